//! The manifests of `docs/deploy/` (the library program's) and
//! `docs/deploy/lease-elect/` (`lease-elect`'s), read as YAML; what a
//! Role grants beside what a program asked of the API server, both as
//! RBAC sees them; and `lease-elect` run with its Deployment's arguments.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

use lease_elector::testing::{Fault, TestApiServer};

use super::health_program::http_get;
use super::spawned::Spawned;

/// The library program's manifests (`docs/in-cluster-health.rs`).
pub const PROGRAM: &str = "docs/deploy";
/// `lease-elect`'s manifests and Containerfile.
pub const LEASE_ELECT: &str = "docs/deploy/lease-elect";

/// `(apiGroup, resource, verb, name)`, as an RBAC rule grants it: the
/// name one of the rule's `resourceNames`, empty for a rule without them
/// (any object, and a create, which names none).
pub type Grant = (String, String, String, String);

/// `folder/file` of the repository, as text.
pub fn text(folder: &str, file: &str) -> String {
    let path = format!("{}/{folder}/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The one object of `folder/file`.
pub fn manifest(folder: &str, file: &str) -> Yaml {
    let mut docs = YamlLoader::load_from_str(&text(folder, file))
        .unwrap_or_else(|e| panic!("{folder}/{file}: {e}"));
    assert_eq!(docs.len(), 1, "{folder}/{file}: one object per file");
    docs.remove(0)
}

pub fn str_of<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {y:?}"))
}

pub fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec()
        .unwrap_or_else(|| panic!("not a list: {y:?}"))
        .iter()
        .map(|s| str_of(s, "a list item").to_string())
        .collect()
}

/// What `folder/role.yaml` grants.
pub fn role_grants(folder: &str) -> BTreeSet<Grant> {
    let role = manifest(folder, "role.yaml");
    assert_eq!(str_of(&role["kind"], "kind"), "Role");
    let mut grants = BTreeSet::new();
    for rule in role["rules"].as_vec().unwrap() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    let names = match &rule["resourceNames"] {
                        Yaml::BadValue => vec![String::new()],
                        names => strings(names),
                    };
                    for name in names {
                        grants.insert((group.clone(), resource.clone(), verb.clone(), name));
                    }
                }
            }
        }
    }
    grants
}

pub fn grant(group: &str, resource: &str, verb: &str, name: &str) -> Grant {
    (group.into(), resource.into(), verb.into(), name.into())
}

/// The RBAC verb and name kube-apiserver checks for `method target` (its
/// `RequestInfo`: a `GET` of a collection is `list`, or `watch` with
/// `watch=true`, named by a `fieldSelector=metadata.name=` (settled on
/// kube-apiserver 1.37.2: such a watch is granted by a rule with that
/// name in `resourceNames`); of a named object `get`; `DELETE` of a
/// collection is `deletecollection`).
pub fn rbac(method: &str, target: &str) -> Grant {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => panic!("not a resource path: {target}"),
    };
    let (resource, name) = match rest {
        ["namespaces", _ns, resource, name @ ..] => (*resource, name.first().copied()),
        [resource, name @ ..] => (*resource, name.first().copied()),
        [] => panic!("no resource: {target}"),
    };
    let named = name.is_some();
    let selected = query.split('&').find_map(|q| {
        q.strip_prefix("fieldSelector=")
            .map(|v| v.replace("%3D", "=").replace("%3d", "="))
            .and_then(|v| v.strip_prefix("metadata.name=").map(str::to_string))
            .filter(|n| !n.contains(','))
    });
    let watch = query
        .split('&')
        .any(|q| q == "watch=true" || q == "watch=1");
    let verb = match (method, named) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (other, _) => panic!("method {other} on {target}"),
    };
    let name = match (verb, name) {
        ("create", _) => String::new(),
        (_, Some(name)) => name.to_string(),
        (_, None) => selected.unwrap_or_default(),
    };
    grant(group, resource, verb, &name)
}

/// What the programs asked of `server`, as RBAC verbs.
pub fn used(server: &TestApiServer) -> BTreeSet<Grant> {
    server
        .requests()
        .iter()
        .map(|r| rbac(&r.method, &r.path))
        .collect()
}

/// Every verb no Role here grants that a fault can single out: any
/// `PATCH` or `DELETE`, and reading or replacing Events. (What no fault
/// can single out, a `list`, is caught by comparing the log with the
/// Role.)
pub fn forbid_all_but_the_role(server: &TestApiServer) {
    for method in ["PATCH", "DELETE"] {
        server.inject(Fault::status(403).method(method).forever());
    }
    for method in ["GET", "PUT"] {
        server.inject(
            Fault::status(403)
                .method(method)
                .path_contains("/events")
                .forever(),
        );
    }
}

// ---- lease-elect's Deployment, run as the kubelet runs it ---------------------------

/// The pod's name, as the downward API gives it (`metadata.name`).
pub const POD: &str = "my-job-6b9f7c5d48-x2x7q";

pub fn lease_elect_deployment() -> Yaml {
    manifest(LEASE_ELECT, "deployment.yaml")
}

/// The Deployment's one container.
pub fn lease_elect_container() -> Yaml {
    let deployment = lease_elect_deployment();
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_vec()
        .unwrap();
    assert_eq!(
        containers.len(),
        1,
        "one container: lease-elect and COMMAND"
    );
    containers[0].clone()
}

/// The value of `--flag=value` among `args` before `--`, where the
/// manifest writes every flag with its value.
pub fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("{name}=");
    args.iter()
        .take_while(|a| *a != "--")
        .find_map(|a| a.strip_prefix(&prefix))
}

/// The container's args as the kubelet hands them to `lease-elect`, each
/// `$(VAR)` replaced by the container's env `VAR`.
pub fn expanded_args(container: &Yaml) -> Vec<String> {
    let mut vars = Vec::new();
    for e in container["env"].as_vec().unwrap() {
        let name = str_of(&e["name"], "env name");
        let value = match (&e["value"], &e["valueFrom"]["fieldRef"]["fieldPath"]) {
            (Yaml::String(v), _) => v.clone(),
            (_, Yaml::String(path)) if path == "metadata.name" => POD.to_string(),
            other => panic!("env {name}: {other:?}"),
        };
        vars.push((format!("$({name})"), value));
    }
    strings(&container["args"])
        .into_iter()
        .map(|arg| {
            let arg = vars
                .iter()
                .fold(arg, |arg, (var, value)| arg.replace(var, value));
            assert!(
                !arg.contains("$("),
                "{arg}: a variable the env does not set"
            );
            arg
        })
        .collect()
}

/// The Lease the Deployment's `lease-elect` elects on (`--name`).
pub fn lease_elect_lease() -> String {
    flag(&expanded_args(&lease_elect_container()), "--name")
        .expect("--name")
        .to_string()
}

/// `lease-elect` (`bin`) as the Deployment runs it, but for what a test
/// must change: the API server (`kubeconfig`, where a pod has its service
/// account), the health endpoint's port (a free one, in the same `:PORT`
/// form) and COMMAND (a sleep that SIGTERM ends); `extra` flags go before
/// `--`.
pub struct Deployed {
    pub process: Spawned,
    /// `127.0.0.1:PORT` of its health endpoint.
    pub health: String,
}

impl Deployed {
    pub fn start(bin: &str, kubeconfig: &Path, extra: &[&str]) -> Deployed {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut args: Vec<String> = Vec::new();
        for arg in expanded_args(&lease_elect_container()) {
            if arg == "--" {
                args.extend(extra.iter().map(|s| s.to_string()));
                args.extend(["--", "sleep", "600"].map(String::from));
                break;
            }
            match arg.strip_prefix("--health-addr=") {
                Some(_) => args.push(format!("--health-addr=:{port}")),
                None => args.push(arg),
            }
        }
        let process = Spawned::start(
            Command::new(bin)
                .args(&args)
                .env("KUBECONFIG", kubeconfig)
                // Outside a pod, as the kubeconfig is.
                .env_remove("KUBERNETES_SERVICE_HOST")
                .env("LEASE_ELECT_LOG", "info"),
            true,
        );
        Deployed {
            process,
            health: format!("127.0.0.1:{port}"),
        }
    }

    /// Writes of its record (acquires and renews), from its /metrics.
    pub fn renews(&self) -> u64 {
        renews_total(&http_get(&self.health, "/metrics").1)
    }

    /// Leads under the pod's name, renews twice and answers its probes
    /// with 200; on SIGTERM ends COMMAND, says STOPPED and exits 0.
    pub fn lead_renew_and_stop(&mut self) {
        self.process.expect(&format!("LEADING {POD}"));
        super::eventually("a renew", || self.renews() >= 2);
        for path in ["/healthz", "/readyz"] {
            let (status, body) = http_get(&self.health, path);
            assert_eq!(status, 200, "{path}: {body}\n{}", self.process.log());
        }
        self.process.signal("-TERM");
        self.process.expect(&format!("STOPPED {POD}"));
        assert_eq!(self.process.exit_code(), Some(0), "{}", self.process.log());
    }
}

/// `lease_elector_renews_total` in the Prometheus text `metrics`.
pub fn renews_total(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("lease_elector_renews_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no renews: {metrics}"))
}

/// The server refused none of the requests it served (403).
pub fn assert_nothing_refused(server: &TestApiServer) {
    let refused: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.status == 403)
        .collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
}
