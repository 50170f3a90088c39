//! What the crate's command-line tools (`lease-elect`, and the `elect` and
//! `test_server` examples) share, so that they cannot drift apart: reading a
//! duration flag, checking the election's flags as usage, and when standard
//! input means "stop", the watch flags. Public because
//! binaries and examples see only the public API; small, and no dependency.

use std::time::Duration;

use crate::duration::parse_go_duration;
use crate::elector::ElectorConfig;

/// A duration flag's value: plain seconds (`15`, `1.5`) or a Go duration
/// (`1m30s`, `500ms`). Plain seconds are read as the Go duration `15s`, so no
/// float parsing is linked into a static binary. The error names the flag
/// and shows both forms.
///
/// ```
/// use lease_elector::tool::duration_flag;
/// use std::time::Duration;
/// assert_eq!(duration_flag("--grace", "1.5"), Ok(Duration::from_millis(1500)));
/// assert_eq!(duration_flag("--grace", "1m30s"), Ok(Duration::from_secs(90)));
/// assert!(duration_flag("--grace", "abc").unwrap_err().contains("give seconds (15, 1.5)"));
/// ```
pub fn duration_flag(flag: &str, value: &str) -> Result<Duration, String> {
    let plain = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let go = if plain {
        format!("{value}s")
    } else {
        value.to_string()
    };
    parse_go_duration(&go)
        .map_err(|e| format!("{flag} {e}: give seconds (15, 1.5) or a Go duration (1m30s, 500ms)"))
}

/// The watch flags both tools read: `--no-watch` turns the Lease watch
/// off (poll only, as client-go does); `--watch`, the default since the
/// watch is on by default, is still accepted. `None` for any other flag.
///
/// ```
/// use lease_elector::tool::watch_flag;
/// assert_eq!(watch_flag("--no-watch"), Some(false));
/// assert_eq!(watch_flag("--watch"), Some(true));
/// assert_eq!(watch_flag("--name"), None);
/// ```
pub fn watch_flag(flag: &str) -> Option<bool> {
    match flag {
        "--watch" => Some(true),
        "--no-watch" => Some(false),
        _ => None,
    }
}

/// Check what a command line names for an election before any request:
/// the timings (client-go's rules, over `config`, the defaults with the
/// flags given), the Lease's name, its namespace when given and the
/// identity when given. A tool reports an error as a usage error (exit 2),
/// as it does an unknown flag: nothing was tried.
///
/// ```
/// use lease_elector::tool::check_election_flags;
/// use lease_elector::ElectorConfig;
/// use std::time::Duration;
/// let config = ElectorConfig::default();
/// assert!(check_election_flags(&config, Some("default"), "my-lease", None).is_ok());
/// let err = check_election_flags(&config, None, "Bad_Name", None).unwrap_err();
/// assert!(err.contains("--name"), "{err}");
/// let short = ElectorConfig { lease_duration: Duration::from_secs(5), ..config };
/// let err = check_election_flags(&short, None, "my-lease", None).unwrap_err();
/// assert!(err.contains("renewDeadline"), "{err}");
/// ```
pub fn check_election_flags(
    config: &ElectorConfig,
    namespace: Option<&str>,
    name: &str,
    identity: Option<&str>,
) -> Result<(), String> {
    let flag = |flag: &'static str| move |e: crate::Error| format!("{flag}: {e}");
    crate::names::check_lease_name(name).map_err(flag("--name"))?;
    if let Some(ns) = namespace {
        crate::names::check_namespace(ns).map_err(flag("--namespace"))?;
    }
    if let Some(id) = identity {
        crate::names::check_identity(id).map_err(flag("--identity"))?;
    }
    // The default identity is always valid: a stand-in for it.
    config
        .validate("default")
        .map_err(flag("--lease-duration, --renew-deadline, --retry-period"))
}

/// Whether stdin is a pipe or a socket, whose end-of-file means "stop" (a
/// parent that closes it wants the tool gone). A terminal is never read (a
/// background job reading it is stopped by SIGTTIN), nor `/dev/null`
/// (end-of-file at once, in every container).
pub fn stdin_is_a_pipe() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_socket())
}
