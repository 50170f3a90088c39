//! The command line: the flags of `examples/elect.rs`, plus the tool's own.

use std::ffi::OsString;
use std::time::Duration;

use lease_elector::client::ConnectOptions;
use lease_elector::tool::{check_election_flags, duration_flag, watch_flag};
use lease_elector::ElectorConfig;

/// One line, printed after a usage error.
pub const USAGE: &str = "usage: lease-elect [--server URL | --kubeconfig F [--context C]] [--namespace NS] --name NAME [--identity ID] \
[--token-file F] [--ca-file F] [--lease-duration S --renew-deadline S --retry-period S] \
[--release-on-cancel] [--no-watch] [--no-events] [--health-addr ADDR [--health-tolerance S]] [-v]... \
[--grace S] [--restart] [--acquire-timeout S] [-- COMMAND [ARGS...]] | --help | --version";

/// `--help`.
pub const HELP: &str = "\
lease-elect: Kubernetes leader election on a coordination.k8s.io/v1 Lease.
Without COMMAND, print one line per event. With COMMAND, run it only while
this candidate leads.

usage: lease-elect [OPTIONS] --name NAME [-- COMMAND [ARGS...]]

API server (default, as kubectl: $KUBECONFIG or ~/.kube/config if there is one, else in-cluster
config in a pod):
  --server URL            the API server's URL; --namespace is then required
  --ca-file F             the CA bundle to verify the server with (alone): needed for an
                          https:// --server, whose certificate is otherwise refused
  --token-file F          bearer token, re-read as it rotates; unreadable at start is an error
  --kubeconfig F          a kubeconfig file (YAML or JSON)
  --context C             a kubeconfig context, as kubectl's --context

Lease:
  --namespace NS          default: the kubeconfig context's or the pod's namespace
  --name NAME             the Lease's name (required)
  --identity ID           this candidate's identity (default <hostname>_<uuid>)
  --lease-duration S      default 15s; durations are seconds or Go durations (15, 1.5, 1m30s)
  --renew-deadline S      default 10s
  --retry-period S        default 2s, at least 100ms: every request is paced by it
  --release-on-cancel     release the lease on exit so another candidate takes over at once
                          (always done with COMMAND, once COMMAND has ended)
  --no-watch              do not watch the Lease: poll it every retry period, as client-go
                          does. By default every change of the Lease (a release, a takeover,
                          a crashed leader's last renew) reaches this candidate within a round
                          trip through a watch, which needs `watch` on leases; a server that
                          refuses it gets polling anyway, and one warning that says so.
                          (--watch, the default, is still accepted.)
  --no-events             do not record Kubernetes Events for transitions (recorded by default,
                          as library-go does: needs `create` on events; a refusal is warned
                          about and never affects the election)

Without COMMAND:
  --ignore-stdin          do not stop when stdin closes. Only a pipe or a socket on stdin is
                          read (its end-of-file means stop); a terminal or /dev/null never is

With COMMAND:
  --grace S               time COMMAND gets between SIGTERM and SIGKILL (default 10s); when
                          leadership is lost, COMMAND is killed before the lease can expire
                          whatever --grace says, and at once (no SIGTERM) when another holder
                          was seen
  --restart               start COMMAND again when it exits on its own while still leading
                          (1s after it ended, doubling up to 30s while it keeps exiting within 10s)
  --acquire-timeout S     give up, exiting 75, if another candidate holds the lease for S (0: one
                          attempt; exit 1 if the API server could not be asked);
                          giving up writes nothing to the Lease (an attempt in flight at S
                          decides). For jobs that must not run twice at once (cron): COMMAND
                          runs once, then the lease is released. A lease left by a crashed
                          holder is taken only after a whole lease duration: with S shorter
                          than --lease-duration (15s), it never is

COMMAND's environment holds its term: LEASE_ELECT_TERM (the fencing token: the Lease's
resourceVersion as the write that began this term stored it, greater for every later term,
across deletions of the Lease; send it with each write to a store that refuses a token
lower than one it has seen), LEASE_ELECT_IDENTITY and
LEASE_ELECT_LEASE (namespace/name). A term ends when its renew deadline passes without a
renew. COMMAND's supervisor holds that deadline too (on CLOCK_BOOTTIME, which counts a
suspend): it stops COMMAND at the term's end also while lease-elect does not run (SIGSTOP,
SIGTTOU, stuck), and kills it at once if lease-elect dies. With COMMAND, SIGTSTP (Ctrl-Z)
is ignored: a stopped candidate cannot renew.

Diagnostics:
  --health-addr ADDR      serve /healthz, /readyz, /leader and /metrics on ADDR (HOST:PORT,
                          e.g. 127.0.0.1:8080, or :PORT for every interface, as in Go)
  --health-tolerance S    /healthz fails once leading without a renew for lease duration + S,
                          or S after losing the lease (default 20s)
  -v, --verbose           more detail on stderr (-v info, -vv debug, -vvv trace); the base level
                          is $LEASE_ELECT_LOG (off, error, warn, info, debug, trace), default warn
  -h, --help              this text
  -V, --version           the version

Output: one line per event on stdout: `LEADING <identity>`, `STOPPED <identity>` (printed as
the elector reports it, before the lease is released), `NEW_LEADER <identity>`. COMMAND
inherits stdout and stderr; its stdin is /dev/null.

Stderr tells what happened at the default level: a lost lease and why, requests that
succeed again after a failure, COMMAND's own exit and its status.

Without COMMAND it keeps competing after losing the lease, and stops on SIGTERM/SIGINT or
when stdin (a pipe or a socket) closes. With COMMAND: COMMAND starts when this candidate
becomes leader, in a process group of its own. On SIGTERM/SIGINT (passed on as received) or
a term that ran out (SIGTERM), COMMAND's process group gets the signal, then SIGKILL after
--grace, or sooner after a loss, so that it has ended before the lease can expire for anyone
else; a second SIGTERM/SIGINT kills it at once, and so does a lease seen held by another.
COMMAND is signalled before anything is logged: a stderr or stdout nobody reads never
delays it (lines that do not fit a bounded queue are dropped, and their count told later). Whatever COMMAND started (in its process group, or in
a session of its own) is killed when COMMAND ends, and the lease is released only once all
of it has ended. If lease-elect itself dies, a small supervisor process kills all of it at once.
Nothing is needed on PATH (a FROM scratch image works).

Exit status:
  0        stopped by SIGTERM/SIGINT (or stdin closing, without COMMAND): COMMAND has ended
           and the lease has been released
  N        COMMAND exited on its own with status N (128+S when killed by signal S), without
           --restart; the lease has been released
  1        leadership was lost while running COMMAND (COMMAND has ended first; the
           orchestrator restarts lease-elect as a fresh candidate), or an error: the API
           server, the configuration, a failed release, or COMMAND's supervisor killed
           (what COMMAND started is killed first, then the lease released)
  2        usage error (also a value found wrong before any request: timings, names,
           a --server without its scheme)
  75       --acquire-timeout passed while another candidate held the lease (EX_TEMPFAIL;
           COMMAND never ran, the Lease was not written), or COMMAND itself exited 75;
           an API server that could not be asked (refused, forbidden, unreachable) is 1
  126, 127 COMMAND cannot be run, or is not found (checked at start)
";

/// What the command line asks for.
#[derive(Debug, Default)]
pub struct Args {
    /// `--server`, `--ca-file`, `--token-file`, `--kubeconfig`,
    /// `--context`, `--namespace`: read as `elect` reads them.
    pub connect: ConnectOptions,
    pub name: Option<String>,
    pub identity: Option<String>,
    pub lease_duration: Option<Duration>,
    pub renew_deadline: Option<Duration>,
    pub retry_period: Option<Duration>,
    pub release_on_cancel: bool,
    pub ignore_stdin: bool,
    pub watch: bool,
    pub no_events: bool,
    pub health_addr: Option<String>,
    pub health_tolerance: Duration,
    /// How many `-v`.
    pub verbose: u8,
    pub grace: Duration,
    pub restart: bool,
    pub acquire_timeout: Option<Duration>,
    /// Empty without `--`.
    pub command: Vec<OsString>,
}

impl Args {
    /// The default timings with those the flags give, and the watch.
    pub fn elector_config(&self) -> ElectorConfig {
        let defaults = ElectorConfig::default();
        ElectorConfig {
            lease_duration: self.lease_duration.unwrap_or(defaults.lease_duration),
            renew_deadline: self.renew_deadline.unwrap_or(defaults.renew_deadline),
            retry_period: self.retry_period.unwrap_or(defaults.retry_period),
            watch: self.watch,
            ..defaults
        }
    }
}

/// A parsed command line.
#[derive(Debug)]
pub enum Parsed {
    Run(Box<Args>),
    Help,
    Version,
}

const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// client-go's usual `HealthzAdaptor` timeout (kube-controller-manager's).
const DEFAULT_HEALTH_TOLERANCE: Duration = Duration::from_secs(20);

/// Parse everything after the program name. `--flag value` and
/// `--flag=value` both work; everything after `--` is COMMAND.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let mut a = Args {
        grace: DEFAULT_GRACE,
        health_tolerance: DEFAULT_HEALTH_TOLERANCE,
        watch: ElectorConfig::default().watch,
        ..Args::default()
    };
    let mut grace_given = false;
    let mut it = args.into_iter();
    while let Some(raw) = it.next() {
        if raw == "--" {
            a.command = it.by_ref().collect();
            if a.command.is_empty() {
                return Err("`--` must be followed by a COMMAND".into());
            }
            break;
        }
        let arg = raw
            .into_string()
            .map_err(|raw| format!("argument {raw:?} is not UTF-8"))?;
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg, None),
        };
        let mut value = || -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it
                    .next()
                    .ok_or_else(|| format!("{flag} needs a value"))?
                    .into_string()
                    .map_err(|v| format!("{flag}: {v:?} is not UTF-8")),
            }
        };
        match flag.as_str() {
            "--server" => a.connect.server = Some(value()?),
            "--kubeconfig" => a.connect.kubeconfig = Some(value()?.into()),
            "--context" => a.connect.context = Some(value()?),
            "--namespace" => a.connect.namespace = Some(value()?),
            "--name" => a.name = Some(value()?),
            "--identity" => a.identity = Some(value()?),
            "--token-file" => a.connect.token_file = Some(value()?.into()),
            "--ca-file" => a.connect.ca_file = Some(value()?.into()),
            "--lease-duration" => a.lease_duration = Some(duration_flag(&flag, &value()?)?),
            "--renew-deadline" => a.renew_deadline = Some(duration_flag(&flag, &value()?)?),
            "--retry-period" => a.retry_period = Some(duration_flag(&flag, &value()?)?),
            "--acquire-timeout" => {
                a.acquire_timeout = Some(duration_flag(&flag, &value()?)?);
            }
            "--grace" => {
                a.grace = duration_flag(&flag, &value()?)?;
                grace_given = true;
            }
            "--health-addr" => {
                let v = value()?;
                if !v.contains(':') {
                    return Err(format!("--health-addr {v:?}: want HOST:PORT or :PORT"));
                }
                if let Some(port) = v.strip_prefix(':') {
                    port.parse::<u16>()
                        .map_err(|_| format!("--health-addr {v:?}: {port:?} is not a port"))?;
                }
                a.health_addr = Some(v);
            }
            "--health-tolerance" => a.health_tolerance = duration_flag(&flag, &value()?)?,
            "--release-on-cancel"
            | "--ignore-stdin"
            | "--watch"
            | "--no-watch"
            | "--no-events"
            | "--restart"
            | "--verbose"
                if inline.is_some() =>
            {
                return Err(format!("{flag} takes no value"));
            }
            "--release-on-cancel" => a.release_on_cancel = true,
            "--ignore-stdin" => a.ignore_stdin = true,
            "--watch" | "--no-watch" => a.watch = watch_flag(&flag).unwrap_or(a.watch),
            "--no-events" => a.no_events = true,
            "--restart" => a.restart = true,
            "--verbose" => a.verbose = a.verbose.saturating_add(1),
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            v if v.len() > 1 && v.starts_with('-') && v[1..].bytes().all(|b| b == b'v') => {
                a.verbose = a.verbose.saturating_add((v.len() - 1) as u8);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.command.is_empty() && (grace_given || a.restart || a.acquire_timeout.is_some()) {
        return Err("--grace, --restart and --acquire-timeout need a COMMAND (after `--`)".into());
    }
    if a.name.is_none() {
        return Err("--name is required".into());
    }
    a.connect.check_flags()?;
    check_election_flags(
        &a.elector_config(),
        a.connect.namespace.as_deref(),
        a.name.as_deref().unwrap_or_default(),
        a.identity.as_deref(),
    )?;
    Ok(Parsed::Run(Box::new(a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Parsed, String> {
        parse(args.iter().map(OsString::from))
    }

    fn run(args: &[&str]) -> Args {
        match parse_strs(args) {
            Ok(Parsed::Run(a)) => *a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn everything_after_the_double_dash_is_the_command() {
        let a = run(&["--name", "x", "--", "sh", "-c", "--name", "--"]);
        assert_eq!(a.command, ["sh", "-c", "--name", "--"]);
        assert_eq!(a.grace, DEFAULT_GRACE);
    }

    #[test]
    fn flags_take_values_after_a_space_or_an_equals_sign() {
        let a = run(&[
            "--name=x",
            "--lease-duration",
            "2",
            "--renew-deadline=1.5s",
            "--retry-period=1",
            "-vv",
            "--verbose",
            "--health-addr",
            "127.0.0.1:0",
        ]);
        assert_eq!(a.name.as_deref(), Some("x"));
        assert_eq!(a.lease_duration, Some(Duration::from_secs(2)));
        assert_eq!(a.renew_deadline, Some(Duration::from_millis(1500)));
        assert_eq!(a.verbose, 3);
        assert!(a.health_addr.is_some());
    }

    #[test]
    fn the_watch_is_on_unless_no_watch_is_given() {
        assert!(run(&["--name", "x"]).watch);
        assert!(run(&["--name", "x", "--watch"]).watch, "still accepted");
        assert!(!run(&["--name", "x", "--no-watch"]).watch);
        assert!(run(&["--name", "x"]).elector_config().watch);
        assert!(!run(&["--no-watch", "--name", "x"]).elector_config().watch);
    }

    #[test]
    fn durations_are_plain_seconds_or_go_durations() {
        let d = |v| duration_flag("--grace", v);
        assert_eq!(d("15"), Ok(Duration::from_secs(15)));
        assert_eq!(d("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(d(".5"), Ok(Duration::from_millis(500)));
        assert_eq!(d("1m30s"), Ok(Duration::from_secs(90)));
        for bad in ["", "abc", "-1", "1.2.3", "15x"] {
            let e = d(bad).unwrap_err();
            assert!(
                e.contains("--grace") && e.contains("1.5") && e.contains("1m30s"),
                "{e}"
            );
        }
    }

    #[test]
    fn mistakes_are_usage_errors() {
        for bad in [
            &["--name", "x", "--bogus"][..],
            &["--name"],
            &["--grace", "1", "--name", "x"],
            &["--name", "x", "--restart"],
            &["--name", "x", "--acquire-timeout", "1"],
            &["--name", "x", "--"],
            &["--name", "x", "--watch=yes"],
            &["--name", "x", "--no-watch=yes"],
            &["--name", "x", "--health-addr", "localhost"],
            &["--server", "http://127.0.0.1:1"],
            &["--server", "http://127.0.0.1:1", "--name", "x"],
            &["--server", "HTTPS://h:1", "--namespace", "n", "--name", "x"],
        ] {
            assert!(parse_strs(bad).is_err(), "{bad:?}");
        }
        assert!(parse_strs(&["--bogus", "-h"]).is_err());
        assert!(matches!(parse_strs(&["-h", "--bogus"]), Ok(Parsed::Help)));
    }
}
