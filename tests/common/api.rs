//! One test body, two servers: the embedded test server, or the real
//! control plane that `.ci/control-plane up DIR` started when
//! `LEASE_ELECTOR_CONTROL_PLANE=DIR` is set.
//!
//! Each [`Api`] is a fresh namespace with two users: `elector` (the Role
//! of docs/deploy: leases get, create, update, watch; events create,
//! patch) and `no-watch` (the same without watch). On the embedded server
//! they are bearer tokens over TLS, `no-watch`'s watches refused with 403
//! as RBAC refuses them; on the real one, `.ci/control-plane up`'s static
//! tokens and ClusterRoles. What the test does as an operator (take, free
//! or delete the Lease, read it, list Events) goes through the admin: the
//! embedded server's own methods, or kubectl with `admin.kubeconfig`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{Client, ClientConfig, LeaseLock, MicroTime};
use serde_json::{json, Value};

use super::tempdir::{unique, TempDir};
use super::RawLeases;

/// The variable that points the tests at a real control plane.
pub const CONTROL_PLANE: &str = "LEASE_ELECTOR_CONTROL_PLANE";

const ELECTOR_TOKEN: &str = "elector-token";
const NO_WATCH_TOKEN: &str = "no-watch-token";

/// Whose credentials a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    /// leases get, create, update, watch; events create, patch.
    Elector,
    /// leases get, create, update; events create, patch: no watch.
    NoWatch,
}

impl User {
    fn name(self) -> &'static str {
        match self {
            User::Elector => "elector",
            User::NoWatch => "no-watch",
        }
    }
}

enum Backend {
    Embedded(TestApiServer),
    Real(PathBuf),
}

/// One request a candidate sent for a Lease of the test's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `get`, `create`, `update`, `watch`, `patch`, `delete`.
    pub verb: String,
    pub user: Option<String>,
    /// The answer's status code.
    pub code: u16,
}

pub struct Api {
    backend: Backend,
    ns: String,
    dir: TempDir,
}

/// The control plane's folder, when the tests are pointed at one.
pub fn control_plane() -> Option<PathBuf> {
    std::env::var_os(CONTROL_PLANE)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

impl Api {
    /// A fresh namespace on the server the environment names.
    pub fn new() -> Api {
        let dir = TempDir::new();
        let ns = format!("t-{}", unique().replace('_', "-"))
            .chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches('-')
            .to_string();
        let backend = match control_plane() {
            Some(cp) => {
                super::oracle::ran("control-plane");
                let api = Api {
                    backend: Backend::Real(cp),
                    ns: ns.clone(),
                    dir,
                };
                api.kubectl(&["create", "namespace", &ns]);
                return api;
            }
            None => {
                let server = TestApiServer::builder()
                    .tls(true)
                    .tokens(&[ELECTOR_TOKEN, NO_WATCH_TOKEN])
                    .build()
                    .unwrap();
                server.add_namespace(&ns);
                server.inject(
                    Fault::status(403)
                        .path_contains("watch=true")
                        .bearer(NO_WATCH_TOKEN)
                        .forever(),
                );
                for (user, token) in [
                    (User::Elector, ELECTOR_TOKEN),
                    (User::NoWatch, NO_WATCH_TOKEN),
                ] {
                    server
                        .write_kubeconfig(
                            dir.0.join(format!("{}.kubeconfig", user.name())),
                            Some(token),
                        )
                        .unwrap();
                }
                Backend::Embedded(server)
            }
        };
        Api { backend, ns, dir }
    }

    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real(_))
    }

    /// The embedded server, for what only it can do (statistics, faults).
    pub fn embedded(&self) -> Option<&TestApiServer> {
        match &self.backend {
            Backend::Embedded(s) => Some(s),
            Backend::Real(_) => None,
        }
    }

    /// `kube-apiserver` or `the test server`, for messages.
    pub fn server_name(&self) -> &'static str {
        if self.is_real() {
            "kube-apiserver"
        } else {
            "the test server"
        }
    }

    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// A scratch folder that lives as long as this.
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// `user`'s kubeconfig (context namespace `default`).
    pub fn kubeconfig(&self, user: User) -> PathBuf {
        match &self.backend {
            Backend::Real(cp) => cp.join(format!("{}.kubeconfig", user.name())),
            Backend::Embedded(_) => self.dir.0.join(format!("{}.kubeconfig", user.name())),
        }
    }

    /// The admin's kubeconfig, on the real control plane.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        match &self.backend {
            Backend::Real(cp) => cp.join("admin.kubeconfig"),
            Backend::Embedded(_) => panic!("the embedded server's operator is the test itself"),
        }
    }

    pub fn client_config(&self, user: User) -> ClientConfig {
        ClientConfig::from_kubeconfig(self.kubeconfig(user), None)
            .unwrap()
            .timeout(Duration::from_secs(5))
    }

    pub fn client(&self, user: User) -> Client {
        Client::new(self.client_config(user)).unwrap()
    }

    /// A lock on Lease `name` of this namespace for candidate `id`.
    pub fn lock(&self, user: User, name: &str, id: &str) -> LeaseLock {
        LeaseLock::new(self.client(user), &self.ns, name, id)
    }

    /// kubectl as the cluster's admin; panics when it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let Backend::Real(cp) = &self.backend else {
            panic!("kubectl as admin is for the real control plane");
        };
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(cp.join("admin.kubeconfig"))
            .args(args)
            .output()
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The stored Lease `name`, as JSON.
    pub fn lease(&self, name: &str) -> Option<Value> {
        match &self.backend {
            Backend::Embedded(s) => s.lease_value(&self.ns, name),
            Backend::Real(_) => {
                let out = self.kubectl(&[
                    "get",
                    "lease",
                    name,
                    "-n",
                    &self.ns,
                    "-o",
                    "json",
                    "--ignore-not-found",
                ]);
                (!out.trim().is_empty()).then(|| serde_json::from_str(&out).unwrap())
            }
        }
    }

    /// The Lease's `spec.holderIdentity`, `None` when there is no Lease or
    /// no holder.
    pub fn holder(&self, name: &str) -> Option<String> {
        self.lease(name)?["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_string)
    }

    /// The Lease's `metadata.resourceVersion`, as a number.
    pub fn version(&self, name: &str) -> Option<u64> {
        self.lease(name)?["metadata"]["resourceVersion"]
            .as_str()?
            .parse()
            .ok()
    }

    /// Another writer (an operator, another client) merges `spec` into the
    /// Lease's spec, as `kubectl patch --type merge` does.
    pub fn patch_spec(&self, name: &str, spec: Value) {
        match &self.backend {
            Backend::Embedded(s) => {
                let mut lease = s.lease_value(&self.ns, name).expect("the Lease exists");
                for (k, v) in spec.as_object().unwrap() {
                    lease["spec"][k] = v.clone();
                }
                s.put_value(&self.ns, lease);
            }
            Backend::Real(_) => {
                let patch = json!({ "spec": spec }).to_string();
                self.kubectl(&[
                    "patch", "lease", name, "-n", &self.ns, "--type", "merge", "-p", &patch,
                ]);
            }
        }
    }

    /// Another holder takes the Lease now, for `seconds`, counting a
    /// transition as a takeover does.
    pub fn take(&self, name: &str, holder: &str, seconds: u64) {
        let now = MicroTime::from_system_time(SystemTime::now()).to_string();
        let transitions = self.lease(name).expect("the Lease exists")["spec"]["leaseTransitions"]
            .as_i64()
            .unwrap_or(0);
        self.patch_spec(
            name,
            json!({
                "holderIdentity": holder,
                "leaseDurationSeconds": seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": transitions + 1,
            }),
        );
    }

    /// Someone else frees the Lease: holder empty.
    pub fn free(&self, name: &str) {
        self.patch_spec(name, json!({ "holderIdentity": "" }));
    }

    /// `kubectl delete lease NAME`.
    pub fn delete(&self, name: &str) {
        match &self.backend {
            Backend::Embedded(s) => s.delete_lease(&self.ns, name),
            Backend::Real(_) => {
                self.kubectl(&["delete", "lease", name, "-n", &self.ns, "--wait=false"]);
            }
        }
    }

    /// When the admin's last write of Lease `name` (a patch, an update or
    /// a delete) was stored, by the server's own account where it keeps
    /// one (kube-apiserver's audit log: the answer's time); `None` where
    /// it does not (the embedded server's writes are calls: the caller
    /// times them).
    pub fn admin_write_stored(&self, name: &str) -> Option<SystemTime> {
        let Backend::Real(cp) = &self.backend else {
            return None;
        };
        let log = std::fs::read_to_string(cp.join("audit.log")).ok()?;
        let at = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| {
                e["user"]["username"] == "admin"
                    && e["stage"] == "ResponseComplete"
                    && e["objectRef"]["namespace"] == self.ns.as_str()
                    && e["objectRef"]["name"] == name
                    && ["patch", "update", "delete"].contains(&e["verb"].as_str().unwrap_or(""))
            })
            .filter_map(|e| e["stageTimestamp"].as_str().map(str::to_string))
            .next_back()?;
        Some(MicroTime::parse_strict(&at).ok()?.to_system_time())
    }

    /// A Lease created by the admin, held by `holder` for `seconds` from now.
    pub fn create_held(&self, name: &str, holder: &str, seconds: u64) {
        let now = MicroTime::from_system_time(SystemTime::now()).to_string();
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        });
        match &self.backend {
            Backend::Embedded(s) => s.put_value(&self.ns, lease),
            Backend::Real(_) => {
                let file = self.dir.write(&format!("{name}.json"), lease.to_string());
                self.kubectl(&["create", "-f", file.to_str().unwrap()]);
            }
        }
    }

    /// The Events of this namespace, core/v1 as listed (events.k8s.io/v1
    /// Events are the same objects).
    pub fn events(&self) -> Vec<Value> {
        match &self.backend {
            Backend::Embedded(s) => s
                .event_values()
                .into_iter()
                .filter(|e| e["metadata"]["namespace"] == self.ns)
                .collect(),
            Backend::Real(_) => {
                let out = self.kubectl(&["get", "events", "-n", &self.ns, "-o", "json"]);
                let list: Value = serde_json::from_str(&out).unwrap();
                list["items"].as_array().cloned().unwrap_or_default()
            }
        }
    }

    /// Every request the candidates (not the admin) sent for Lease `name`
    /// so far, in order.
    pub fn requests(&self, name: &str) -> Vec<Request> {
        match &self.backend {
            Backend::Embedded(s) => {
                let exact = format!("/namespaces/{}/leases/{name}", self.ns);
                let collection = format!("/namespaces/{}/leases", self.ns);
                s.requests()
                    .into_iter()
                    .filter_map(|r| {
                        let path = r.path.split('?').next().unwrap_or("");
                        let named_watch = r.path.contains("watch=true")
                            && r.path.contains(&format!("metadata.name%3D{name}"));
                        let verb = match (r.method.as_str(), r.path.contains("watch=true")) {
                            (_, true) if named_watch || path == exact => "watch",
                            ("GET", false) if path.ends_with(&exact) => "get",
                            ("PUT", _) if path.ends_with(&exact) => "update",
                            ("PATCH", _) if path.ends_with(&exact) => "patch",
                            ("DELETE", _) if path.ends_with(&exact) => "delete",
                            ("POST", _) if path.ends_with(&collection) => "create",
                            _ => return None,
                        };
                        Some(Request {
                            verb: verb.into(),
                            user: None,
                            code: r.status,
                        })
                    })
                    .collect()
            }
            Backend::Real(cp) => {
                let log = std::fs::read_to_string(cp.join("audit.log")).unwrap_or_default();
                let mut seen = std::collections::HashSet::new();
                let mut out = Vec::new();
                for line in log.lines() {
                    let Ok(e) = serde_json::from_str::<Value>(line) else {
                        continue;
                    };
                    let o = &e["objectRef"];
                    let user = e["user"]["username"].as_str().unwrap_or("").to_string();
                    if o["namespace"] != self.ns.as_str()
                        || o["resource"] != "leases"
                        || user == "admin"
                        || e["stage"] != "ResponseComplete"
                    {
                        continue;
                    }
                    let named = o["name"] == name;
                    let verb = e["verb"].as_str().unwrap_or("").to_string();
                    // A create names no object in its path; a named watch
                    // is a list-watch of the collection with a selector.
                    let ours = named
                        || (o["name"].is_null()
                            && (verb == "create"
                                || e["requestURI"]
                                    .as_str()
                                    .unwrap_or("")
                                    .contains(&format!("metadata.name%3D{name}"))));
                    if !ours || !seen.insert(e["auditID"].as_str().unwrap_or("").to_string()) {
                        continue;
                    }
                    out.push(Request {
                        verb,
                        user: Some(user),
                        code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                    });
                }
                out
            }
        }
    }
}

impl Drop for Api {
    /// The namespace goes with the test (kube-apiserver without a
    /// controller manager keeps it Terminating; its Leases stay readable).
    fn drop(&mut self) {
        if let Backend::Real(cp) = &self.backend {
            let _ = Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(cp.join("admin.kubeconfig"))
                .args(["delete", "namespace", &self.ns, "--wait=false"])
                .output();
        }
    }
}
