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

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, SystemTime};

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
        format!("exec plugin {}", self.command.display())
    }

    fn error(&self, detail: impl Into<String>) -> Error {
        Error::InvalidCredentials {
            what: self.describe(),
            detail: detail.into(),
        }
    }

    /// Run the plugin once, killing it after `timeout`.
    fn run(&self, timeout: Duration) -> Result<Credential> {
        let mut spec = serde_json::json!({ "interactive": false });
        if let Some(cluster) = &self.cluster {
            spec["cluster"] = cluster.clone();
        }
        let info = serde_json::json!({
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": spec,
        });
        let mut child = Command::new(&self.command)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("KUBERNETES_EXEC_INFO", info.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| self.error(format!("cannot run it: {e}")))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(self.error("no standard output"));
        };
        let (tx, rx) = mpsc::channel();
        let reader = thread::Builder::new()
            .name("lease-exec-plugin".into())
            .spawn(move || {
                let mut out = Vec::new();
                let read = stdout.take(MAX_OUTPUT + 1).read_to_end(&mut out);
                let _ = tx.send(read.map(|_| out));
            })
            .map_err(|e| self.error(format!("cannot start its reader thread: {e}")))?;
        let out = match rx.recv_timeout(timeout) {
            Ok(read) => read,
            Err(_) => {
                // The reader is left to end on its own: a process the plugin
                // started may hold its stdout open after the plugin is gone.
                let _ = child.kill();
                let _ = child.wait();
                return Err(self.error(format!("no answer within {timeout:?}; killed it")));
            }
        };
        let _ = reader.join();
        let status = child
            .wait()
            .map_err(|e| self.error(format!("waiting for it: {e}")))?;
        let out = out.map_err(|e| self.error(format!("reading its output: {e}")))?;
        if !status.success() {
            return Err(self.error(format!("it failed ({status})")));
        }
        if out.len() as u64 > MAX_OUTPUT {
            return Err(self.error(format!("its output is larger than {MAX_OUTPUT} bytes")));
        }
        self.parse(&out)
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
}

impl ExecSource {
    pub(crate) fn new(plugin: ExecPlugin, clock: Arc<dyn Clock>, run_timeout: Duration) -> Self {
        ExecSource {
            plugin: Arc::new(plugin),
            state: Arc::default(),
            clock,
            run_timeout,
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
        log::debug!("running {} for a token", plugin.describe());
        thread::Builder::new()
            .name("lease-exec-plugin".into())
            .spawn(move || {
                let outcome = plugin.run(timeout);
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
