//! kubeconfig `exec` credential plugins (`aws eks get-token`,
//! `gke-gcloud-auth-plugin`, `kubelogin`, ...): a command whose standard
//! output is an `ExecCredential` holding a bearer token.
//!
//! The token is cached until its `expirationTimestamp` (or, without one,
//! until the API server answers 401) and the plugin is run again then.
//! A run is bounded by the request's time budget: a plugin that does not
//! answer in time is killed, so a hung plugin cannot hold the renew thread
//! past the renew deadline. The plugin gets no terminal (stdin is
//! `/dev/null`); its stderr is passed through, as kubectl does. Plugins that
//! answer with a client certificate instead of a token are refused.
//!
//! # What a run leaves behind
//!
//! A plugin runs in a process group of its own, and its standard output is
//! one end of a Unix socket pair that the run reads with short read
//! time-outs: no thread ever blocks on a pipe that a plugin's child holds
//! open. Once the plugin has exited its output is complete; the run waits
//! at most [`WAIT_DELAY`] more for end-of-file (Go's `exec.Cmd.WaitDelay`),
//! then uses what it read. Then what is left of the plugin goes:
//!
//! - with the cargo feature `process` (on with `cli`), its process group
//!   gets SIGKILL (kill(2) through rustix, before the plugin is reaped, so
//!   the group id cannot have been reused) and every member that became
//!   our child is reaped by its group, never by a wait for any child; a
//!   process that left the group (`setsid`) and still holds the plugin's
//!   output is found through `/proc/PID/fd`, killed too, and reaped by
//!   its pid if it became our child;
//! - without it (safe std cannot signal a group) only the plugin itself is
//!   killed and reaped, our end of its output is closed, and a process it
//!   left holding that output is reported once at warn. Such a process
//!   lives on (with PID 1 as its parent), but nothing here waits for it.
//!
//! Either way a run costs no thread or process after it has returned,
//! except, without `process`, what the plugin chose to leave running.

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::clock::Clock;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::lease::MicroTime;

/// The `apiVersion`s of `ExecCredential` a plugin may speak.
const API_VERSIONS: [&str; 2] = [
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
];

/// More output than this is not a credential.
const MAX_OUTPUT: u64 = 1 << 20;

/// How long a run waits for end-of-file on the plugin's output after the
/// plugin has exited (Go's `exec.Cmd.WaitDelay`). A plugin's output is
/// complete when it exits; this only covers a child that writes its last
/// bytes or closes its copy a moment later. A quarter of the smallest
/// per-request time-out (1 s), so that a plugin that leaves a child holding
/// its output still answers within the request's budget.
pub(crate) const WAIT_DELAY: Duration = Duration::from_millis(250);

/// How often a run looks at the plugin while reading nothing.
const POLL: Duration = Duration::from_millis(10);

/// How to run a plugin, from a kubeconfig user's `exec` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecPlugin {
    pub(crate) command: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) api_version: String,
    /// `spec.cluster` of `KUBERNETES_EXEC_INFO`, when `provideClusterInfo`.
    pub(crate) cluster: Option<serde_json::Value>,
}

impl ExecPlugin {
    /// Check what can be checked before the first run.
    pub(crate) fn validate(
        &self,
        interactive_mode: Option<&str>,
    ) -> std::result::Result<(), String> {
        if !API_VERSIONS.contains(&self.api_version.as_str()) {
            return Err(format!(
                "exec plugin apiVersion {:?} is not supported (use one of {})",
                self.api_version,
                API_VERSIONS.join(", ")
            ));
        }
        if interactive_mode == Some("Always") {
            return Err(
                "exec plugin needs interactiveMode Always (a terminal), which an elector does not have"
                    .into(),
            );
        }
        if self.command.as_os_str().is_empty() {
            return Err("exec plugin has no command".into());
        }
        Ok(())
    }

    fn describe(&self) -> String {
        // The path came from a kubeconfig: data, escaped for logs.
        format!(
            "exec plugin {}",
            crate::text::escape(&self.command.to_string_lossy())
        )
    }

    fn error(&self, detail: impl Into<String>) -> Error {
        Error::InvalidCredentials {
            what: self.describe(),
            detail: detail.into(),
        }
    }

    /// Run the plugin once, killing it after `timeout`; `warned` is set
    /// once a plugin has been reported for leaving a process behind.
    fn run(&self, timeout: Duration, warned: &AtomicBool) -> Result<Credential> {
        let mut spec = serde_json::json!({ "interactive": false });
        if let Some(cluster) = &self.cluster {
            spec["cluster"] = cluster.clone();
        }
        let info = serde_json::json!({
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": spec,
        });
        let (mut ours, theirs) =
            UnixStream::pair().map_err(|e| self.error(format!("cannot make its output: {e}")))?;
        ours.set_read_timeout(Some(POLL))
            .map_err(|e| self.error(format!("cannot make its output: {e}")))?;
        let theirs = std::fs::File::from(OwnedFd::from(theirs));
        // What names the plugin's output in /proc/PID/fd: `socket:[inode]`.
        let output = std::os::unix::fs::MetadataExt::ino(
            &theirs
                .metadata()
                .map_err(|e| self.error(format!("cannot make its output: {e}")))?,
        );
        let started = Instant::now();
        let child = {
            // Dropped with the Command: only the plugin holds `theirs`.
            let mut command = Command::new(&self.command);
            command
                .args(&self.args)
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .env("KUBERNETES_EXEC_INFO", info.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::from(theirs))
                .stderr(Stdio::inherit())
                .process_group(0);
            command
                .spawn()
                .map_err(|e| self.error(format!("cannot run it: {e}")))?
        };
        let mut plugin = Plugin::new(child, output);
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        let mut eof = false;
        let mut exited_at: Option<Instant> = None;
        let read_error = loop {
            if eof {
                thread::sleep(POLL);
            } else {
                match ours.read(&mut buf) {
                    Ok(0) => {
                        eof = true;
                        // Nothing holds its output any more.
                        plugin.output = None;
                    }
                    Ok(n) => {
                        out.extend_from_slice(&buf[..n]);
                        if out.len() as u64 > MAX_OUTPUT {
                            let _ = plugin.end();
                            return Err(
                                self.error(format!("its output is larger than {MAX_OUTPUT} bytes"))
                            );
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock
                                | io::ErrorKind::TimedOut
                                | io::ErrorKind::Interrupted
                        ) => {}
                    Err(e) => break Some(e),
                }
            }
            if exited_at.is_none() && plugin.exited() {
                exited_at = Some(Instant::now());
            }
            match exited_at {
                Some(_) if eof => break None,
                Some(at) if at.elapsed() >= WAIT_DELAY => {
                    self.left_behind(warned);
                    break None;
                }
                _ => {}
            }
            if started.elapsed() >= timeout {
                let _ = plugin.end();
                return Err(self.error(format!("no answer within {timeout:?}; killed it")));
            }
        };
        drop(ours);
        let status = plugin
            .end()
            .map_err(|e| self.error(format!("waiting for it: {e}")))?;
        if let Some(e) = read_error {
            return Err(self.error(format!("reading its output: {e}")));
        }
        if !status.success() {
            return Err(self.error(format!("it failed ({status})")));
        }
        self.parse(&out)
    }

    /// The plugin exited but something it started still holds its output.
    fn left_behind(&self, warned: &AtomicBool) {
        if cfg!(feature = "process") {
            log::debug!(
                "{} left a process holding its output; killing its process group",
                self.describe()
            );
        } else if !warned.swap(true, Ordering::Relaxed) {
            log::warn!(
                "{} left a process running that holds its output; it is not waited for, but it lives on: the cargo feature `process` kills a plugin's process group after each run",
                self.describe()
            );
        }
    }

    fn parse(&self, out: &[u8]) -> Result<Credential> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct ExecCredential {
            #[serde(default)]
            api_version: String,
            #[serde(default)]
            kind: String,
            status: Option<Status>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Status {
            #[serde(default)]
            token: String,
            expiration_timestamp: Option<String>,
            client_certificate_data: Option<String>,
        }
        let cred: ExecCredential = serde_json::from_slice(out)
            .map_err(|e| self.error(format!("its output is not an ExecCredential: {e}")))?;
        if cred.kind != "ExecCredential" {
            return Err(self.error(format!(
                "it answered kind {:?}, not ExecCredential",
                cred.kind
            )));
        }
        if cred.api_version != self.api_version {
            return Err(self.error(format!(
                "it answered apiVersion {:?}, but {:?} was asked for",
                cred.api_version, self.api_version
            )));
        }
        let status = cred
            .status
            .ok_or_else(|| self.error("its ExecCredential has no status"))?;
        if status.token.is_empty() {
            return Err(self.error(match status.client_certificate_data {
                Some(_) => "it answered with a client certificate; only tokens are supported",
                None => "its ExecCredential has no token",
            }));
        }
        let expires = match status.expiration_timestamp.as_deref() {
            None | Some("") => None,
            Some(t) => Some(
                t.parse::<MicroTime>()
                    .map_err(|e| self.error(format!("expirationTimestamp {t:?}: {e}")))?
                    .to_system_time(),
            ),
        };
        Ok(Credential {
            token: status.token,
            expires,
        })
    }
}

struct Credential {
    token: String,
    expires: Option<SystemTime>,
}

/// A running plugin, the leader of its own process group.
struct Plugin {
    child: Child,
    /// Once reaped.
    status: Option<ExitStatus>,
    /// The inode of the socket that is the plugin's standard output, while
    /// a process may still hold it.
    output: Option<u64>,
}

impl Plugin {
    fn new(child: Child, output: u64) -> Plugin {
        Plugin {
            child,
            status: None,
            output: Some(output),
        }
    }

    /// Whether the plugin has exited. With `process` it is left a zombie,
    /// so that its pid, and with it its group id, cannot be reused before
    /// [`end`](Self::end) signals the group.
    fn exited(&mut self) -> bool {
        #[cfg(feature = "process")]
        {
            use rustix::process::{WaitId, WaitIdOptions};
            let Some(pid) = group_id(&self.child) else {
                return false;
            };
            let peek = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
            matches!(rustix::process::waitid(WaitId::Pid(pid), peek), Ok(Some(_)))
        }
        #[cfg(not(feature = "process"))]
        {
            if self.status.is_none() {
                self.status = self.child.try_wait().ok().flatten();
            }
            self.status.is_some()
        }
    }

    /// Kill what is left of the plugin, reap it and return its status:
    /// with `process` its whole group, without it the plugin alone.
    fn end(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        #[cfg(feature = "process")]
        let group = group_id(&self.child);
        #[cfg(feature = "process")]
        if let Some(pgid) = group {
            // ESRCH: nothing left (the plugin is a zombie, not a member).
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        // The plugin itself, also if it left its group (a zombie ignores it).
        let _ = self.child.kill();
        let status = self.child.wait()?;
        self.status = Some(status);
        #[cfg(feature = "process")]
        if let Some(pgid) = group {
            reap_group(pgid);
        }
        // A process that left the group (`setsid`) holding the output.
        #[cfg(feature = "process")]
        if let Some(output) = self.output.take() {
            kill_holders(output, self.child.id());
        }
        Ok(status)
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// The plugin's pid, which is its process group's id.
#[cfg(feature = "process")]
fn group_id(child: &Child) -> Option<rustix::process::Pid> {
    i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
}

/// Reap the members of the killed group `pgid` that became our children
/// (when this process is a child subreaper, or PID 1), by their group:
/// never a status that std's `Child` owns elsewhere. Bounded by
/// [`WAIT_DELAY`]: a member in uninterruptible sleep is left to its fate.
#[cfg(feature = "process")]
fn reap_group(pgid: rustix::process::Pid) {
    use rustix::process::WaitOptions;
    let until = Instant::now() + WAIT_DELAY;
    loop {
        match rustix::process::waitpgid(pgid, WaitOptions::NOHANG) {
            Ok(Some(_)) => continue,
            // Members that are our children are still dying.
            Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(1)),
            // ECHILD: none of our children is in the group.
            Ok(None) | Err(_) => return,
        }
    }
}

/// SIGKILL every process that holds the socket `inode` open (a child the
/// plugin started in a session of its own, out of its group's reach), and
/// reap those that became our children (this process is a child subreaper,
/// or PID 1). `plugin` is reaped already: std's `Child` owned its status.
/// Bounded by [`WAIT_DELAY`], as [`reap_group`].
#[cfg(feature = "process")]
fn kill_holders(inode: u64, plugin: u32) {
    use rustix::process::{Pid, Signal, WaitOptions};
    let me = std::process::id();
    let wanted = format!("socket:[{inode}]");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    let holders: Vec<Pid> = procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && pid != plugin)
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str())
                })
            })
        })
        .filter_map(|pid| i32::try_from(pid).ok().and_then(Pid::from_raw))
        .collect();
    for &pid in &holders {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
    let until = Instant::now() + WAIT_DELAY;
    let mut left = holders;
    while !left.is_empty() {
        // ECHILD: not our child; its own parent reaps it.
        left.retain(|&pid| {
            matches!(
                rustix::process::waitpid(Some(pid), WaitOptions::NOHANG),
                Ok(None)
            )
        });
        if Instant::now() >= until {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// One run of the plugin, shared by every request that needs its token.
#[derive(Default)]
struct Flight {
    /// The token, or the error as (what, detail) so every waiter gets a copy.
    result: Mutex<Option<std::result::Result<String, (String, String)>>>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    cached: Option<Credential>,
    running: Option<Arc<Flight>>,
}

/// A plugin's token, cached until it expires or is refused.
///
/// No lock is held while the plugin runs: the run happens on a thread of
/// its own, every request that needs a token waits for the same run, and
/// each gives up at its own deadline. The run itself is bounded by the
/// client's time-out (then the plugin is killed), so a waiter that gave up
/// finds a finished run, or a new one, next time.
pub(crate) struct ExecSource {
    plugin: Arc<ExecPlugin>,
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    run_timeout: Duration,
    /// Set once a run has been reported for leaving a process behind.
    warned: Arc<AtomicBool>,
}

impl ExecSource {
    pub(crate) fn new(plugin: ExecPlugin, clock: Arc<dyn Clock>, run_timeout: Duration) -> Self {
        ExecSource {
            plugin: Arc::new(plugin),
            state: Arc::default(),
            clock,
            run_timeout,
            warned: Arc::default(),
        }
    }

    /// The token; waits (until `deadline`) for a plugin run when there is
    /// none, it expired, or `force` (after a 401).
    pub(crate) fn current(&self, force: bool, deadline: &Deadline) -> Result<String> {
        let flight = {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(c) = st.cached.as_ref() {
                let fresh = c.expires.is_none_or(|t| self.clock.system_time() < t);
                if fresh && !force {
                    return Ok(c.token.clone());
                }
            }
            if force {
                st.cached = None;
            }
            match &st.running {
                Some(f) => f.clone(),
                None => {
                    let f = Arc::new(Flight::default());
                    self.start(f.clone())?;
                    st.running = Some(f.clone());
                    f
                }
            }
        };
        let mut result = flight.result.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(r) = result.as_ref() {
                return r
                    .clone()
                    .map_err(|(what, detail)| Error::InvalidCredentials { what, detail });
            }
            let left = deadline.remaining();
            if left.is_zero() || deadline.is_cancelled() {
                return Err(self
                    .plugin
                    .error("no answer within this request's time budget (the run goes on, bounded by the client time-out)"));
            }
            // Short waits so a cancel or a manual clock's deadline is seen.
            result = flight
                .done
                .wait_timeout(result, left.min(Duration::from_millis(50)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn start(&self, flight: Arc<Flight>) -> Result<()> {
        let (plugin, state, timeout) = (self.plugin.clone(), self.state.clone(), self.run_timeout);
        let warned = self.warned.clone();
        log::debug!("running {} for a token", plugin.describe());
        thread::Builder::new()
            .name("lease-exec-plugin".into())
            .spawn(move || {
                let outcome = plugin.run(timeout, &warned);
                let shared = match &outcome {
                    Ok(c) => Ok(c.token.clone()),
                    Err(Error::InvalidCredentials { what, detail }) => {
                        Err((what.clone(), detail.clone()))
                    }
                    Err(e) => Err((plugin.describe(), e.to_string())),
                };
                {
                    let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Ok(c) = outcome {
                        st.cached = Some(c);
                    }
                    st.running = None;
                }
                *flight.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(shared);
                flight.done.notify_all();
            })
            .map(drop)
            .map_err(|e| {
                self.plugin
                    .error(format!("cannot start a thread to run it: {e}"))
            })
    }
}
