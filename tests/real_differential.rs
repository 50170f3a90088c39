//! The test server as a verified fake: every request sequence the test
//! suites sent to it (recorded with `LEASE_ELECTOR_RECORD_DIR`, see
//! `src/testing/record.rs`) and the cases below are replayed on a fresh
//! test server and on kube-apiserver (`LEASE_ELECTOR_CONTROL_PLANE`, the
//! folder `.ci/control-plane up` wrote), each sequence in fresh namespaces,
//! and the answers compared: status, the headers clients read, bodies and
//! watch streams, once what must differ is normalised (uids, times,
//! resourceVersions by their order). A difference fails the test unless
//! `docs/test-server-deviations.md` lists its key with the reason no
//! client can tell.
//!
//! Ignored by plain `cargo test`: `.ci/control-plane test` runs it.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::TestApiServer;
use serde_json::{json, Value};
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig, TlsProvider};

/// How long after its sequence a watch may take to deliver what the other
/// server's delivered.
const WATCH_WAIT: Duration = Duration::from_secs(2);
/// How long a watch must stay silent to be taken as done.
const QUIET: Duration = Duration::from_millis(200);
/// Requests replayed per sequence at most: a candidate's renew loop repeats
/// itself, and the whole control-plane test has minutes.
const MAX_STEPS: usize = 300;
/// The test files of the clients nobody here wrote (their binaries'
/// names, before the hash).
const ORACLES: &[&str] = &["kubectl", "kubectl_fidelity", "python_client", "js_client"];
const BUILTIN_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

// ---- sequences -------------------------------------------------------------

/// One thing to do on a server.
#[derive(Debug, Clone)]
enum Step {
    Request(Req),
    /// The test put an object into the store (or took one out) directly.
    Seed {
        op: String,
        ns: String,
        name: String,
        object: Value,
    },
}

#[derive(Debug, Clone)]
struct Req {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: String,
    /// The recorded answer, where there is one: its ids are paired with the
    /// replay's, so that later requests naming them name the replay's.
    recorded: Option<Value>,
    /// A watch: the events it sent when recorded (or are expected).
    watch: Option<usize>,
}

#[derive(Debug, Clone)]
struct Sequence {
    name: String,
    steps: Vec<Step>,
}

fn req(method: &str, target: &str, body: Value) -> Step {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    Step::Request(Req {
        method: method.into(),
        target: target.into(),
        headers: vec![("content-type".into(), "application/json".into())],
        body,
        recorded: None,
        watch: None,
    })
}

/// A request whose body is sent as written (what JSON values cannot hold:
/// a duplicate field).
fn raw(method: &str, target: &str, body: &str) -> Step {
    let mut s = req(method, target, Value::Null);
    if let Step::Request(r) = &mut s {
        r.body = body.into();
    }
    s
}

fn with_header(mut s: Step, name: &str, value: &str) -> Step {
    if let Step::Request(r) = &mut s {
        r.headers.retain(|(n, _)| n != name);
        r.headers.push((name.into(), value.into()));
    }
    s
}

fn watching(mut s: Step, events: usize) -> Step {
    if let Step::Request(r) = &mut s {
        r.watch = Some(events);
    }
    s
}

/// Every recording in `dir`, one sequence per server, in `seq` order.
/// Returns the sequences and how many requests were left out (fault
/// injection, refused tokens, protobuf bodies).
fn load(dir: &Path) -> (Vec<Sequence>, usize) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "jsonl"));
    files.sort();
    let mut out = Vec::new();
    let mut left_out = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let mut lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let test = lines
            .first()
            .and_then(|h| h["test"].as_str())
            .unwrap_or("?")
            .to_string();
        // Every request the oracle tests sent is replayed; the crate's own
        // tests' sequences are cut at MAX_STEPS (a renew loop repeats).
        let binary = lines
            .first()
            .and_then(|h| h["binary"].as_str())
            .unwrap_or("");
        let oracle = ORACLES
            .iter()
            .any(|o| binary.rsplit_once('-').map_or(binary, |(b, _)| b) == *o);
        let cap = if oracle { usize::MAX } else { MAX_STEPS };
        lines.retain(|l| l.get("seq").is_some());
        lines.sort_by_key(|l| l["seq"].as_u64());
        let mut steps = Vec::new();
        for l in lines {
            if let Some(op) = l["seed"].as_str() {
                steps.push(Step::Seed {
                    op: op.into(),
                    ns: l["namespace"].as_str().unwrap_or("").into(),
                    name: l["name"].as_str().unwrap_or("").into(),
                    object: l["object"].clone(),
                });
                continue;
            }
            // A protobuf body cannot have its namespace renamed: not
            // replayed (tests/kubectl.rs checks the test server decodes it).
            let protobuf = l["headers"]["content-type"]
                .as_str()
                .is_some_and(|c| c.contains("protobuf"));
            if l.get("skip").is_some_and(|s| !s.is_null())
                || l.get("body_base64").is_some()
                || protobuf
            {
                left_out += 1;
                continue;
            }
            let headers = l["headers"]
                .as_object()
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let recorded = match l.get("watch").and_then(Value::as_array) {
                Some(events) => Some(Value::Array(events.clone())),
                None => l["response_body"]
                    .as_str()
                    .and_then(|b| serde_json::from_str(b).ok()),
            };
            let watch = l["watch"].as_array().map(|e| {
                e.iter()
                    .filter(|e| e["type"] != "BOOKMARK" || initial_end(e))
                    .count()
            });
            steps.push(Step::Request(Req {
                method: l["method"].as_str().unwrap_or("GET").into(),
                target: l["target"].as_str().unwrap_or("/").into(),
                headers,
                body: l["body"].as_str().unwrap_or("").into(),
                recorded,
                watch,
            }));
        }
        if steps.len() > cap {
            left_out += steps.len() - cap;
            steps.truncate(cap);
        }
        if steps.iter().any(|s| matches!(s, Step::Request(_))) {
            out.push(Sequence { name: test, steps });
        }
    }
    (out, left_out)
}

/// What makes two sequences the same: their requests, with namespaces
/// and ids as they were.
fn signature(s: &Sequence) -> String {
    s.steps
        .iter()
        .map(|st| match st {
            Step::Request(r) => format!("{} {} {:?} {}\n", r.method, r.target, r.headers, r.body),
            Step::Seed {
                op,
                ns,
                name,
                object,
            } => format!("{op} {ns} {name} {}\n", object["spec"]),
        })
        .collect()
}

// ---- servers -----------------------------------------------------------------

enum Kind {
    Fake(TestApiServer),
    Real,
}

struct Server {
    kind: Kind,
    base: String,
    agent: ureq::Agent,
    watch_agent: ureq::Agent,
}

fn agent_with(tls: Option<TlsConfig>, timeout: Duration) -> ureq::Agent {
    let mut b = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout));
    if let Some(tls) = tls {
        b = b.tls_config(tls);
    }
    b.build().new_agent()
}

impl Server {
    fn fake() -> Server {
        let server = TestApiServer::builder().record(false).build().unwrap();
        let base = server.url();
        Server {
            kind: Kind::Fake(server),
            base,
            agent: agent_with(None, Duration::from_secs(20)),
            watch_agent: agent_with(None, Duration::from_secs(10)),
        }
    }

    fn real(dir: &Path) -> Server {
        let read = |p: &str| std::fs::read(dir.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        let tls = || {
            let ca = Certificate::from_pem(&read("pki/ca.crt"))
                .unwrap()
                .to_owned();
            let cert = Certificate::from_pem(&read("pki/admin.crt"))
                .unwrap()
                .to_owned();
            let key = PrivateKey::from_pem(&read("pki/admin.key"))
                .unwrap()
                .to_owned();
            TlsConfig::builder()
                .provider(TlsProvider::Rustls)
                .unversioned_rustls_crypto_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .root_certs(RootCerts::new_with_certs(&[ca]))
                .client_cert(Some(ClientCert::new_with_certs(&[cert], key)))
                .build()
        };
        let base = String::from_utf8(read("url")).unwrap().trim().to_string();
        Server {
            kind: Kind::Real,
            base,
            agent: agent_with(Some(tls()), Duration::from_secs(20)),
            watch_agent: agent_with(Some(tls()), Duration::from_secs(10)),
        }
    }

    fn send(
        &self,
        agent: &ureq::Agent,
        method: &str,
        target: &str,
        headers: &[(String, String)],
        body: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, String> {
        let mut b = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{target}", self.base));
        for (n, v) in headers {
            b = b.header(n.as_str(), v.as_str());
        }
        let request = b
            .body(body.as_bytes().to_vec())
            .map_err(|e| e.to_string())?;
        agent
            .run(request)
            .map_err(|e| format!("{method} {target}: {e}"))
    }

    fn call(&self, method: &str, target: &str, headers: &[(String, String)], body: &str) -> Answer {
        match self.send(&self.agent, method, target, headers, body) {
            Ok(resp) => Answer::of(resp),
            Err(e) => Answer {
                status: 0,
                headers: BTreeMap::new(),
                text: e,
            },
        }
    }

    fn add_namespace(&self, ns: &str) {
        match &self.kind {
            Kind::Fake(s) => s.add_namespace(ns),
            Kind::Real => {
                let body = json!({"metadata": {"name": ns}}).to_string();
                let a = self.call("POST", "/api/v1/namespaces", &json_headers(), &body);
                assert!(
                    matches!(a.status, 201 | 409),
                    "creating namespace {ns}: {}",
                    a.text
                );
            }
        }
    }

    /// Store `object` as the Lease `ns/name`, as `put_lease` does; its
    /// answer (the stored object), or the refusal.
    /// With the version the Lease had before, if it existed.
    fn seed_put(
        &self,
        ns: &str,
        name: &str,
        object: &Value,
    ) -> Result<(Value, Option<String>), String> {
        let version = |v: &Value| {
            v["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string)
        };
        match &self.kind {
            Kind::Fake(s) => {
                let before = s
                    .lease_json(ns, name)
                    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                    .and_then(|v| version(&v));
                s.put_lease_json(ns, &object.to_string());
                s.lease_json(ns, name)
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .map(|v| (v, before))
                    .ok_or_else(|| "not stored".into())
            }
            Kind::Real => {
                let path = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}");
                let mut o = object.clone();
                if let Some(m) = o["metadata"].as_object_mut() {
                    for k in [
                        "uid",
                        "resourceVersion",
                        "creationTimestamp",
                        "managedFields",
                    ] {
                        m.remove(k);
                    }
                    m.insert("namespace".into(), ns.into());
                }
                let got = self.call("GET", &path, &[], "");
                let before = (got.status == 200).then(|| version(&got.json())).flatten();
                let a = if got.status == 200 {
                    o["metadata"]["resourceVersion"] =
                        got.json()["metadata"]["resourceVersion"].clone();
                    self.call("PUT", &path, &json_headers(), &o.to_string())
                } else {
                    let coll = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases");
                    self.call("POST", &coll, &json_headers(), &o.to_string())
                };
                if matches!(a.status, 200 | 201) {
                    Ok((a.json(), before))
                } else {
                    Err(format!("{}: {}", a.status, a.text))
                }
            }
        }
    }

    fn seed_delete(&self, ns: &str, name: &str) {
        match &self.kind {
            Kind::Fake(s) => s.delete_lease(ns, name),
            Kind::Real => {
                let path = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}");
                self.call("DELETE", &path, &[], "");
            }
        }
    }

    /// Start a watch; its events arrive on the receiver.
    fn watch(
        &self,
        target: &str,
        headers: &[(String, String)],
    ) -> (Answer, Option<Receiver<Value>>) {
        match self.send(&self.watch_agent, "GET", target, headers, "") {
            Err(e) => (
                Answer {
                    status: 0,
                    headers: BTreeMap::new(),
                    text: e,
                },
                None,
            ),
            Ok(resp) if resp.status() != 200 => (Answer::of(resp), None),
            Ok(resp) => {
                let head = Answer {
                    status: 200,
                    headers: read_headers(&resp),
                    text: String::new(),
                };
                let (tx, rx) = mpsc::channel();
                thread::spawn(move || {
                    use std::io::BufRead;
                    let reader = std::io::BufReader::new(resp.into_body().into_reader());
                    for line in reader.lines() {
                        let Ok(line) = line else { break };
                        if line.trim().is_empty() {
                            continue;
                        }
                        let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                });
                (head, Some(rx))
            }
        }
    }
}

fn json_headers() -> Vec<(String, String)> {
    vec![("content-type".into(), "application/json".into())]
}

/// The headers clients read.
fn read_headers(resp: &ureq::http::Response<ureq::Body>) -> BTreeMap<String, String> {
    let mut h = BTreeMap::new();
    for name in ["content-type", "retry-after", "warning"] {
        let values: Vec<&str> = resp
            .headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if !values.is_empty() {
            h.insert(name.to_string(), values.join(", ").replace("; ", ";"));
        }
    }
    h
}

#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    text: String,
}

impl Answer {
    fn of(resp: ureq::http::Response<ureq::Body>) -> Answer {
        let status = resp.status().as_u16();
        let headers = read_headers(&resp);
        let mut body = resp.into_body();
        let bytes = body
            .with_config()
            .limit(16 * 1024 * 1024)
            .read_to_vec()
            .unwrap_or_default();
        Answer {
            status,
            headers,
            text: String::from_utf8(bytes)
                .unwrap_or_else(|e| format!("<{} bytes of binary>", e.as_bytes().len())),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

// ---- replay ----------------------------------------------------------------

/// What one server answered to one sequence.
struct Replay {
    /// Per step: the answer (None for seeds).
    answers: Vec<Option<Answer>>,
    /// Per step: the events its watch delivered.
    events: Vec<Option<Vec<Value>>>,
    seed_refused: Vec<String>,
    /// The namespaces it used (as named on the servers).
    namespaces: BTreeSet<String>,
    /// The steps before this one are compared.
    compared: usize,
    /// Per step, for a PUT answered 200: the resourceVersion it named and
    /// the one it was answered with (the same when nothing was written).
    put_versions: Vec<Option<(String, String)>>,
}

/// Recorded ids (resourceVersions, uids) to the replay's.
#[derive(Default)]
struct Ids(HashMap<String, String>);

impl Ids {
    fn pair(&mut self, recorded: &Value, replayed: &Value) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        collect_ids(recorded, &mut a);
        collect_ids(replayed, &mut b);
        if a.len() == b.len() {
            for (x, y) in a.into_iter().zip(b) {
                self.0.entry(x).or_insert(y);
            }
        }
    }

    fn get(&self, v: &str) -> String {
        self.0.get(v).cloned().unwrap_or_else(|| v.to_string())
    }
}

fn collect_ids(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("resourceVersion" | "uid", Value::String(s)) if !s.is_empty() => {
                        out.push(s.clone())
                    }
                    _ => collect_ids(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_ids(x, out)),
        _ => {}
    }
}

fn initial_end(e: &Value) -> bool {
    e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
}

struct Names {
    map: BTreeMap<String, String>,
    prefix: String,
}

impl Names {
    fn ns(&mut self, orig: &str) -> String {
        if orig.is_empty() {
            return String::new();
        }
        let n = self.map.len();
        let prefix = &self.prefix;
        self.map
            .entry(orig.to_string())
            .or_insert_with(|| {
                let mut s = format!("{prefix}{n}-{orig}");
                s.truncate(63);
                s.trim_end_matches('-').to_string()
            })
            .clone()
    }
}

/// The target with its namespaces and resourceVersion rewritten.
fn rewrite_target(target: &str, names: &mut Names, ids: &Ids) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut segs: Vec<String> = path.split('/').map(str::to_string).collect();
    for i in 1..segs.len() {
        if segs[i - 1] == "namespaces" && !segs[i].is_empty() {
            segs[i] = names.ns(&segs[i].clone());
        }
    }
    let mut out = segs.join("/");
    if !query.is_empty() {
        let q: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some(("resourceVersion", v)) => format!("resourceVersion={}", ids.get(v)),
                Some(("fieldSelector", v)) if v.contains("metadata.namespace%3D") => {
                    let (a, ns) = v.split_once("metadata.namespace%3D").unwrap_or((v, ""));
                    let (ns, rest) = ns
                        .split_once(',')
                        .map_or((ns, String::new()), |(n, r)| (n, format!(",{r}")));
                    format!(
                        "fieldSelector={a}metadata.namespace%3D{}{rest}",
                        names.ns(ns)
                    )
                }
                _ => p.to_string(),
            })
            .collect();
        out = format!("{out}?{}", q.join("&"));
    }
    out
}

fn rewrite_body(v: &mut Value, names: &mut Names, ids: &Ids, namespace_object: bool) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match (k.as_str(), &*x) {
                    ("namespace", Value::String(s)) => *x = names.ns(&s.clone()).into(),
                    ("resourceVersion" | "uid", Value::String(s)) => *x = ids.get(s).into(),
                    ("name", Value::String(s)) if namespace_object => {
                        *x = names.ns(&s.clone()).into()
                    }
                    ("metadata", _) => rewrite_body(x, names, ids, namespace_object),
                    _ => rewrite_body(x, names, ids, false),
                }
            }
        }
        Value::Array(a) => a
            .iter_mut()
            .for_each(|x| rewrite_body(x, names, ids, false)),
        _ => {}
    }
}

fn without_query(target: &str, drop: &[&str]) -> String {
    let Some((path, query)) = target.split_once('?') else {
        return target.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !drop.contains(&p.split('=').next().unwrap_or("")))
        .collect();
    if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

/// `$RV` in a case's target or body: the resourceVersion of the last
/// answer that carried one.
fn placeholders(s: &str, last_rv: &str) -> String {
    s.replace("$RV", last_rv)
}

/// Replay `seq` on `server` in namespaces named with `prefix`; a watch
/// waits for the events it was recorded with, or for as many as `other`
/// (the other server's replay) delivered, whichever is more.
fn replay(server: &Server, seq: &Sequence, prefix: &str, other: Option<&Replay>) -> Replay {
    let mut names = Names {
        map: BTreeMap::new(),
        prefix: prefix.to_string(),
    };
    let mut ids = Ids::default();
    // Namespaces the sequence makes itself are not made for it.
    let created: BTreeSet<String> = seq
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Request(r)
                if r.method == "POST"
                    && r.target.split('?').next() == Some("/api/v1/namespaces") =>
            {
                serde_json::from_str::<Value>(&r.body).ok()?["metadata"]["name"]
                    .as_str()
                    .map(str::to_string)
            }
            Step::Seed { op, name, .. } if op == "namespace" => Some(name.clone()),
            _ => None,
        })
        .collect();
    let mut used: BTreeSet<String> = BUILTIN_NAMESPACES.iter().map(|s| s.to_string()).collect();
    for s in &seq.steps {
        match s {
            Step::Request(r) => {
                let segs: Vec<&str> = r
                    .target
                    .split('?')
                    .next()
                    .unwrap_or("")
                    .split('/')
                    .collect();
                for w in segs.windows(2) {
                    if w[0] == "namespaces" && !w[1].is_empty() {
                        used.insert(w[1].to_string());
                    }
                }
            }
            Step::Seed { ns, .. } => {
                used.insert(ns.clone());
            }
        }
    }
    for ns in used.difference(&created) {
        if ns.is_empty() {
            continue;
        }
        let mapped = names.ns(ns);
        server.add_namespace(&mapped);
    }

    let mut answers = Vec::new();
    let mut watches: Vec<(usize, usize, Receiver<Value>, Vec<Value>)> = Vec::new();
    let mut seed_refused = Vec::new();
    let mut last_rv = String::new();
    let mut put_versions = vec![None; seq.steps.len()];
    let mut compared: Option<usize> = None;
    // Each object's path to the version it was last answered with.
    let mut versions: HashMap<String, String> = HashMap::new();
    for (i, step) in seq.steps.iter().enumerate() {
        // What the watches delivered so far names versions later requests use.
        for (w, _, rx, got) in watches.iter_mut() {
            got.extend(rx.try_iter());
            if let Some(Step::Request(Req {
                recorded: Some(Value::Array(rec)),
                ..
            })) = seq.steps.get(*w)
            {
                let rec: Vec<&Value> = rec.iter().filter(|e| e["type"] != "BOOKMARK").collect();
                let now: Vec<&Value> = got.iter().filter(|e| e["type"] != "BOOKMARK").collect();
                for (a, b) in rec.iter().zip(now) {
                    ids.pair(a, b);
                }
            }
        }
        match step {
            Step::Seed {
                op,
                ns,
                name,
                object,
            } => {
                let ns = names.ns(ns);
                match op.as_str() {
                    "put" => match server.seed_put(&ns, name, object) {
                        Ok((stored, before)) => {
                            ids.pair(object, &stored);
                            if let (Some(b), Some(a)) =
                                (before, stored["metadata"]["resourceVersion"].as_str())
                            {
                                put_versions[i] = Some((b, a.to_string()));
                            }
                        }
                        Err(e) => {
                            seed_refused.push(format!("{name}: {e}"));
                            // What follows builds on an object the real
                            // server does not hold: not compared.
                            compared.get_or_insert(i);
                        }
                    },
                    "delete" => server.seed_delete(&ns, name),
                    _ => {
                        let ns = names.ns(name);
                        server.add_namespace(&ns);
                    }
                }
                answers.push(None);
            }
            Step::Request(r) => {
                let mut target =
                    placeholders(&rewrite_target(&r.target, &mut names, &ids), &last_rv);
                // A cluster-wide list on the real server holds every
                // sequence's objects: a page of them would not hold ours.
                if r.method == "GET" && !target.contains("/namespaces/") && r.watch.is_none() {
                    target = without_query(&target, &["limit", "continue"]);
                }
                let namespace_object = target.split('?').next() == Some("/api/v1/namespaces");
                // Sent as written unless something in it must be renamed
                // (a body may hold what a JSON value cannot: a duplicate).
                let body = match serde_json::from_str::<Value>(&r.body) {
                    Ok(v) => {
                        let mut w = v.clone();
                        rewrite_body(&mut w, &mut names, &ids, namespace_object);
                        if w == v {
                            placeholders(&r.body, &last_rv)
                        } else {
                            placeholders(&w.to_string(), &last_rv)
                        }
                    }
                    Err(_) => placeholders(&r.body, &last_rv),
                };
                // Both servers are asked for JSON where the client took
                // JSON too: the test server speaks no protobuf for these,
                // and a protobuf answer cannot be compared field by field
                // (the comparer names the difference from the recording).
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|(n, v)| match n.as_str() {
                        "accept" if v.contains("protobuf") && v.contains("json") => {
                            let kept: Vec<&str> = v
                                .split(',')
                                .map(str::trim)
                                .filter(|a| !a.contains("protobuf"))
                                .collect();
                            (n.clone(), kept.join(","))
                        }
                        _ => (n.clone(), v.clone()),
                    })
                    .collect();
                let r = &Req {
                    headers,
                    ..r.clone()
                };
                if let Some(expected) = r.watch {
                    let (a, rx) = server.watch(&target, &r.headers);
                    if let Some(rx) = rx {
                        watches.push((i, expected, rx, Vec::new()));
                    }
                    answers.push(Some(a));
                    continue;
                }
                let a = server.call(&r.method, &target, &r.headers, &body);
                let v = a.json();
                if r.method == "PUT" && a.status == 200 {
                    let sent: Value = serde_json::from_str(&body).unwrap_or_default();
                    let rv = |v: &Value| {
                        v["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or("")
                            .to_string()
                    };
                    put_versions[i] = Some((rv(&sent), rv(&v)));
                }
                // A patch names no version: the object's last one stands in.
                let path = target.split('?').next().unwrap_or("").to_string();
                if r.method == "PATCH" && a.status == 200 {
                    if let (Some(before), Some(after)) = (
                        versions.get(&path),
                        v["metadata"]["resourceVersion"].as_str(),
                    ) {
                        put_versions[i] = Some((before.clone(), after.to_string()));
                    }
                }
                if let Some(rec) = &r.recorded {
                    ids.pair(rec, &v);
                }
                if let Some(rv) = v["metadata"]["resourceVersion"].as_str() {
                    last_rv = rv.to_string();
                    if v["kind"] != "Status" && v.get("items").is_none() {
                        versions.insert(path, rv.to_string());
                    }
                }
                answers.push(Some(a));
            }
        }
    }
    let deadline = Instant::now() + WATCH_WAIT;
    let mut events: Vec<Option<Vec<Value>>> = vec![None; seq.steps.len()];
    for (i, mut expected, rx, mut got) in watches {
        if let Some(Some(e)) = other.map(|o| &o.events[i]) {
            expected = expected.max(
                e.iter()
                    .filter(|e| e["type"] != "BOOKMARK" || initial_end(e))
                    .count(),
            );
        }
        let useful = |g: &Vec<Value>| {
            g.iter()
                .filter(|e| e["type"] != "BOOKMARK" || initial_end(e))
                .count()
        };
        // Then until nothing more comes for a moment: what a watch sends
        // after the last write is part of what is compared.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = if useful(&got) < expected {
                left
            } else {
                left.min(QUIET)
            };
            match rx.recv_timeout(wait) {
                Ok(e) => got.push(e),
                Err(_) => break,
            }
        }
        got.extend(rx.try_iter());
        events[i] = Some(got);
    }
    Replay {
        answers,
        events,
        seed_refused,
        namespaces: names.map.into_values().collect(),
        put_versions,
        compared: compared.unwrap_or(seq.steps.len()),
    }
}

// ---- normalising and comparing -----------------------------------------------

/// The request's route with names and namespaces as placeholders, and its
/// query's keys.
fn route(method: &str, target: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut segs: Vec<String> = path.split('/').map(str::to_string).collect();
    // ["", "api", "v1", ...] or ["", "apis", g, v, ...]
    let mut at = match segs.get(1).map(String::as_str) {
        Some("api") => 3,
        Some("apis") => 4,
        _ => usize::MAX,
    };
    if at < segs.len() && segs[at] == "namespaces" && segs.len() > at + 2 {
        segs[at + 1] = "{ns}".into();
        at += 2;
    }
    if at < segs.len() && segs.len() > at + 1 {
        segs[at + 1] = "{name}".into();
    }
    let mut keys: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split('=').next().unwrap_or(""))
        .filter(|k| *k != "timeout")
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let q = if keys.is_empty() {
        String::new()
    } else {
        format!("?{}", keys.join("&"))
    };
    format!("{method} {}{q}", segs.join("/"))
}

fn is_discovery(target: &str) -> bool {
    let path = target.split('?').next().unwrap_or("");
    let n = path.split('/').filter(|s| !s.is_empty()).count();
    path.starts_with("/openapi")
        || path == "/version"
        || (path.starts_with("/api") && !path.starts_with("/apis/") && n <= 2)
        || (path.starts_with("/apis") && n <= 3)
}

/// Keep only what lives in this sequence's namespaces (a cluster-wide list
/// on the real server also shows everyone else's).
fn keep_ours(v: &mut Value, ours: &BTreeSet<String>) {
    let mine = |o: &Value| {
        let m = &o["metadata"];
        match m["namespace"].as_str() {
            Some(ns) if !ns.is_empty() => ours.contains(ns),
            // Only namespaces have none here.
            _ => m["name"].as_str().is_some_and(|n| ours.contains(n)),
        }
    };
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        items.retain(|o| mine(o));
    }
    if let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) {
        rows.retain(|r| !r["object"].is_object() || mine(&r["object"]));
    }
}

struct Normaliser {
    ranks: HashMap<u64, usize>,
    uids: HashMap<String, usize>,
}

impl Normaliser {
    fn new(values: &[&Value]) -> Normaliser {
        let mut rvs = BTreeSet::new();
        for v in values {
            object_rvs(v, &mut rvs, true);
        }
        Normaliser {
            ranks: rvs.into_iter().enumerate().map(|(i, r)| (r, i)).collect(),
            uids: HashMap::new(),
        }
    }

    fn apply(&mut self, v: &mut Value, top: bool) {
        let is_list = top && (v.get("items").is_some() || v["kind"] == "Table");
        let bookmark_like = top && v["type"] == "BOOKMARK";
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    match (k.as_str(), &*x) {
                        ("object", _) if bookmark_like => {
                            if let Some(rv) = x["metadata"].get_mut("resourceVersion") {
                                *rv = "<bookmark>".into();
                            }
                        }
                        ("metadata", _) if is_list => {
                            if let Some(rv) = x.get_mut("resourceVersion") {
                                *rv = "<list>".into();
                            }
                            self.apply(x, false);
                        }
                        ("resourceVersion", Value::String(s)) => {
                            *x = match s.parse::<u64>().ok().and_then(|r| self.ranks.get(&r)) {
                                Some(i) => format!("rv#{i}").into(),
                                None => "rv#?".into(),
                            }
                        }
                        ("uid", Value::String(s)) => {
                            let n = self.uids.len();
                            let i = *self.uids.entry(s.clone()).or_insert(n);
                            *x = format!("uid#{i}").into();
                        }
                        ("creationTimestamp" | "deletionTimestamp" | "time", Value::String(_)) => {
                            *x = "<time>".into();
                        }
                        ("cells", Value::Array(_)) => {
                            if let Value::Array(cells) = x {
                                for c in cells {
                                    if c.as_str().is_some_and(is_age) {
                                        *c = "<age>".into();
                                    }
                                }
                            }
                        }
                        ("message", Value::String(s)) => *x = numbers_out(s).into(),
                        ("object", _) => self.apply(x, true),
                        _ => self.apply(x, false),
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| self.apply(x, top)),
            _ => {}
        }
    }
}

/// A message with its uids as `<uid>` and each run of digits as `N`:
/// resourceVersions and uids in words differ between servers.
fn numbers_out(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while !rest.is_empty() {
        let uuid_like = rest.len() >= 36
            && rest.is_char_boundary(36)
            && rest[..36].char_indices().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => c == '-',
                _ => c.is_ascii_hexdigit(),
            });
        if uuid_like {
            out.push_str("<uid>");
            rest = &rest[36..];
            continue;
        }
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            out.push('N');
            rest = &rest[digits..];
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

fn is_age(s: &str) -> bool {
    // 5s, 2m36s, 3h, 4d5h, <invalid>
    s == "<invalid>"
        || (!s.is_empty()
            && s.ends_with(|c: char| "smhdy".contains(c))
            && s.chars().all(|c| c.is_ascii_digit() || "smhdy".contains(c))
            && s.starts_with(|c: char| c.is_ascii_digit()))
}

/// The resourceVersions of objects (not of lists or bookmarks).
fn object_rvs(v: &Value, out: &mut BTreeSet<u64>, top: bool) {
    let is_list = top && (v.get("items").is_some() || v["kind"] == "Table");
    if top && v["type"] == "BOOKMARK" {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("metadata", _) if is_list => {}
                    ("resourceVersion", Value::String(s)) => {
                        if let Ok(r) = s.parse() {
                            out.insert(r);
                        }
                    }
                    ("object", _) => object_rvs(x, out, true),
                    _ => object_rvs(x, out, false),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| object_rvs(x, out, top)),
        _ => {}
    }
}

fn alias_versions(v: &mut Value, aliases: &HashMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match x {
                    Value::String(s) if k == "resourceVersion" => {
                        if let Some(a) = aliases.get(s.as_str()) {
                            *s = a.clone();
                        }
                    }
                    _ => alias_versions(x, aliases),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| alias_versions(x, aliases)),
        _ => {}
    }
}

/// Take `metadata.managedFields` out (compared only as shown or not);
/// true when there were any.
fn strip_managed_fields(v: &mut Value) -> bool {
    match v {
        Value::Object(m) => {
            let mut had = m.remove("managedFields").is_some_and(|f| !f.is_null());
            for x in m.values_mut() {
                had |= strip_managed_fields(x);
            }
            had
        }
        Value::Array(a) => a.iter_mut().fold(false, |h, x| strip_managed_fields(x) | h),
        _ => false,
    }
}

/// Names the server made up from a `generateName`, each to a placeholder
/// in order of appearance.
fn generated_names(v: &Value, out: &mut HashMap<String, String>) {
    match v {
        Value::Object(m) => {
            if let (Some(g), Some(n)) = (
                m.get("generateName").and_then(Value::as_str),
                m.get("name").and_then(Value::as_str),
            ) {
                if !g.is_empty() && n.starts_with(g) {
                    let k = out.len();
                    out.entry(n.to_string())
                        .or_insert_with(|| format!("{g}<generated#{k}>"));
                }
            }
            m.values().for_each(|x| generated_names(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| generated_names(x, out)),
        _ => {}
    }
}

fn rename(v: &mut Value, names: &HashMap<String, String>) {
    match v {
        Value::String(s) => {
            if let Some(n) = names.get(s.as_str()) {
                *s = n.clone();
            }
        }
        Value::Object(m) => m.values_mut().for_each(|x| rename(x, names)),
        Value::Array(a) => a.iter_mut().for_each(|x| rename(x, names)),
        _ => {}
    }
}

/// One difference: its key (what the table lists) and what it was.
#[derive(Debug, Clone)]
struct Difference {
    key: String,
    what: String,
}

fn diff_json(a: &Value, b: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => diff_json(u, v, &p, out),
                    (u, v) => out.push((p, format!("{} | {}", short(u), short(v)))),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (u, v) in x.iter().zip(y) {
                diff_json(u, v, &format!("{path}[]"), out);
            }
        }
        _ if a != b => out.push((
            path.to_string(),
            format!("{} | {}", short(Some(a)), short(Some(b))),
        )),
        _ => {}
    }
}

fn short(v: Option<&Value>) -> String {
    let s = v.map_or("(absent)".to_string(), Value::to_string);
    if s.len() > 300 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(300).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}

/// Per step: the answer's body and the watch's events, normalised; and
/// whether any `managedFields` were shown.
type Prepared = (Vec<Option<Value>>, Vec<Option<Vec<Value>>>, bool);

fn compare(
    seq: &Sequence,
    fake: &Replay,
    real: &Replay,
    ours: &BTreeSet<String>,
) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut push = |key: String, what: String| out.push(Difference { key, what });
    for e in &real.seed_refused {
        push(
            "seed:refused".into(),
            format!("{}: the real server refused a seeded Lease: {e}", seq.name),
        );
    }
    // An unchanged PUT: kube-apiserver writes nothing and answers with the
    // version it was given, as the test server now does. Were the test
    // server to write a new one again, that is a difference (not listed),
    // and its version is taken as the one it was given, its MODIFIED event
    // dropped, so that the rest of the sequence still compares.
    let mut aliases: HashMap<String, String> = HashMap::new();
    for (i, step) in seq.steps.iter().enumerate() {
        let what = match step {
            Step::Request(r) => route(&r.method, &r.target),
            Step::Seed { .. } => "seed".to_string(),
        };
        if let (Some((fs, fa)), Some((rs, ra))) = (&fake.put_versions[i], &real.put_versions[i]) {
            if rs == ra && fs != fa {
                aliases.insert(fa.clone(), fs.clone());
                push(
                    format!("no-op-update:{what}"),
                    format!("{} step {i}: an unchanged PUT: kube-apiserver kept version {rs}, the test server wrote {fa}", seq.name),
                );
            }
        }
    }
    // Bodies as JSON, filtered to our namespaces, then normalised.
    let prepare = |r: &Replay, aliases: &HashMap<String, String>| -> Prepared {
        let bodies: Vec<Option<Value>> = r
            .answers
            .iter()
            .map(|a| {
                a.as_ref().map(|a| {
                    let mut v = a.json();
                    keep_ours(&mut v, ours);
                    v
                })
            })
            .collect();
        let events: Vec<Option<Vec<Value>>> = r
            .events
            .iter()
            .map(|e| {
                e.as_ref().map(|e| {
                    e.iter()
                        .filter(|e| {
                            let o = &e["object"];
                            (e["type"] != "BOOKMARK" || initial_end(e))
                                && match o["metadata"]["namespace"].as_str() {
                                    Some(ns) if !ns.is_empty() => ours.contains(ns),
                                    _ => true,
                                }
                        })
                        .cloned()
                        .collect()
                })
            })
            .collect();
        let (mut bodies, mut events) = (bodies, events);
        if !aliases.is_empty() {
            for e in events.iter_mut().flatten() {
                e.retain(|e| {
                    !(e["type"] == "MODIFIED"
                        && e["object"]["metadata"]["resourceVersion"]
                            .as_str()
                            .is_some_and(|v| aliases.contains_key(v)))
                });
            }
            for v in bodies
                .iter_mut()
                .flatten()
                .chain(events.iter_mut().flatten().flatten())
            {
                alias_versions(v, aliases);
            }
        }
        let mut generated = HashMap::new();
        let mut managed = false;
        for v in bodies
            .iter_mut()
            .flatten()
            .chain(events.iter_mut().flatten().flatten())
        {
            managed |= strip_managed_fields(v);
            generated_names(v, &mut generated);
        }
        for v in bodies
            .iter_mut()
            .flatten()
            .chain(events.iter_mut().flatten().flatten())
        {
            rename(v, &generated);
        }
        let mut all: Vec<&Value> = bodies.iter().flatten().collect();
        all.extend(events.iter().flatten().flatten());
        let mut n = Normaliser::new(&all);
        let bodies = bodies
            .into_iter()
            .map(|b| {
                b.map(|mut b| {
                    n.apply(&mut b, true);
                    b
                })
            })
            .collect();
        let events = events
            .into_iter()
            .map(|e| {
                e.map(|e| {
                    e.into_iter()
                        .map(|mut e| {
                            n.apply(&mut e, true);
                            e
                        })
                        .collect()
                })
            })
            .collect();
        (bodies, events, managed)
    };
    let (fb, fe, fm) = prepare(fake, &aliases);
    let (rb, re, rm) = prepare(real, &HashMap::new());
    if fm != rm {
        push(
            "managedFields".into(),
            format!("{}: metadata.managedFields shown by the test server: {fm}, by kube-apiserver: {rm}", seq.name),
        );
    }
    let mut deleted_namespaces: Vec<String> = Vec::new();
    for (i, step) in seq.steps.iter().enumerate() {
        let Step::Request(r) = step else { continue };
        if i >= real.compared.min(fake.compared) {
            break;
        }
        let (Some(fa), Some(ra)) = (&fake.answers[i], &real.answers[i]) else {
            continue;
        };
        // A YAML body's differences are the YAML reader's (see the table).
        let yaml = r
            .headers
            .iter()
            .any(|(n, v)| n == "content-type" && v.contains("yaml") && !v.contains("apply-patch"));
        // After its namespace was deleted, an object is gone from the test
        // server and stays on kube-apiserver (see the table).
        let in_deleted = deleted_namespaces
            .iter()
            .any(|ns| r.target.contains(&format!("/namespaces/{ns}/")));
        let route = format!(
            "{}{}{}",
            if in_deleted {
                "terminating-namespace:"
            } else {
                ""
            },
            if yaml { "yaml:" } else { "" },
            route(&r.method, &r.target)
        );
        if r.method == "DELETE" && fa.status == 200 {
            if let Some(ns) = r
                .target
                .split('?')
                .next()
                .unwrap_or("")
                .strip_prefix("/api/v1/namespaces/")
            {
                deleted_namespaces.push(ns.to_string());
            }
        }
        let at = format!("{} step {i}: {} {}", seq.name, r.method, r.target);
        if fa.status != ra.status {
            push(
                format!("status:{route}:{}/{}", fa.status, ra.status),
                format!(
                    "{at}: test server {} {}, kube-apiserver {} {}",
                    fa.status,
                    short_text(&fa.text),
                    ra.status,
                    short_text(&ra.text)
                ),
            );
            continue;
        }
        if is_discovery(&r.target) {
            if fb[i] != rb[i]
                || fa.headers != ra.headers
                || fa.text.is_empty() != ra.text.is_empty()
            {
                push(
                    format!("discovery:{route}"),
                    format!("{at}: discovery documents differ"),
                );
            }
            continue;
        }
        let accept = r
            .headers
            .iter()
            .find(|(n, _)| n == "accept")
            .map_or("", |(_, v)| v.as_str());
        if accept
            .trim_start()
            .starts_with("application/vnd.kubernetes.protobuf")
        {
            push(
                format!("protobuf:{route}"),
                format!("{at}: the client asked for {accept:?}; compared as JSON"),
            );
        }
        for name in ["content-type", "retry-after", "warning"] {
            let (x, y) = (fa.headers.get(name), ra.headers.get(name));
            if x != y
                && !(name == "content-type"
                    && (x.is_none() || y.is_none())
                    && fa.text.is_empty()
                    && ra.text.is_empty())
            {
                push(
                    format!("header:{name}:{route}"),
                    format!("{at}: {x:?} | {y:?}"),
                );
            }
        }
        match (&fb[i], &rb[i]) {
            (Some(Value::Null), Some(Value::Null))
                if r.watch.is_none() && fa.text.trim() != ra.text.trim() =>
            {
                push(
                    format!("body:{route}:text"),
                    format!("{at}: {} | {}", short_text(&fa.text), short_text(&ra.text)),
                );
            }
            (Some(x), Some(y)) => {
                let mut d = Vec::new();
                diff_json(x, y, "", &mut d);
                for (p, w) in d {
                    let time = |v: &Value| {
                        v["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("parsing time"))
                    };
                    if p == "message" && time(x) && time(y) {
                        push(format!("parse-time-message:{route}"), format!("{at}: {w}"));
                        continue;
                    }
                    push(format!("body:{route}:{p}"), format!("{at}: {p}: {w}"));
                }
            }
            _ => {}
        }
        if let (Some(x), Some(y)) = (&fe[i], &re[i]) {
            let types = |e: &Vec<Value>| {
                e.iter()
                    .map(|e| e["type"].as_str().unwrap_or("?").to_string())
                    .collect::<Vec<_>>()
            };
            let expired = |e: &Vec<Value>| {
                e.iter()
                    .any(|e| e["type"] == "ERROR" && e["object"]["code"] == 410)
            };
            if expired(y) && !expired(x) {
                push(
                    format!("watch-too-old:{route}"),
                    format!("{at}: event types {:?} | {:?}", types(x), types(y)),
                );
                continue;
            }
            if types(x) != types(y) {
                push(
                    format!("watch:{route}:events"),
                    format!("{at}: event types {:?} | {:?}", types(x), types(y)),
                );
                continue;
            }
            for (u, v) in x.iter().zip(y) {
                let mut d = Vec::new();
                diff_json(u, v, "", &mut d);
                for (p, w) in d {
                    push(format!("watch:{route}:{p}"), format!("{at}: {p}: {w}"));
                }
            }
        }
    }
    out
}

fn short_text(s: &str) -> String {
    let s: String = s.chars().filter(|c| !c.is_control()).collect();
    if s.chars().count() > 400 {
        format!("{}…", s.chars().take(400).collect::<String>())
    } else {
        s
    }
}

// ---- the table -----------------------------------------------------------------

/// The keys `docs/test-server-deviations.md` lists: the first `code` span
/// of each table row; a key ending in `*` covers every key it begins.
fn listed() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/test-server-deviations.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l[3..].split('`').next().map(str::to_string))
        .collect()
}

fn is_listed(key: &str, table: &[String]) -> bool {
    table.iter().any(|k| glob(k, key))
}

/// `pattern` matches `text`, each `*` standing for any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    if parts.is_empty() {
        return rest.is_empty();
    }
    for (i, p) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.ends_with(p);
        }
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    true
}

// ---- the cases settled on the real server ----------------------------------------

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

fn lease(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec})
}

fn cases() -> Vec<Sequence> {
    let case = |name: &str, steps: Vec<Step>| Sequence {
        name: format!("case: {name}"),
        steps,
    };
    let at = |n: &str| format!("{LEASES}/{n}");
    let event = |name: &str| {
        json!({"metadata": {"name": name}, "involvedObject": {"kind": "Lease", "namespace": "default", "name": "l"},
               "reason": "LeaderElection", "message": "m", "type": "Normal", "source": {"component": "c"}})
    };
    let apply = |s: Step| with_header(s, "content-type", "application/apply-patch+yaml");
    vec![
        case("a PUT that creates a missing Lease while naming a resourceVersion", vec![
            req("PUT", &at("l"), {
                let mut l = lease("l", json!({"holderIdentity": "a"}));
                l["metadata"]["resourceVersion"] = "12345".into();
                l
            }),
            req("GET", &at("l"), Value::Null),
            req("PUT", &at("m"), lease("m", json!({"holderIdentity": "a"}))),
        ]),
        case("core/v1 Event names that are not DNS subdomains", vec![
            req("POST", "/api/v1/namespaces/default/events", event("Not_A.Subdomain")),
            req("POST", "/api/v1/namespaces/default/events", event("UPPER")),
            req("POST", "/api/v1/namespaces/default/events", event("a:b")),
            req("POST", "/api/v1/namespaces/default/events", event("")),
            req("POST", "/api/v1/namespaces/default/events", event("a/b")),
            req("POST", "/api/v1/namespaces/default/events", event(&"x".repeat(300))),
        ]),
        case("server-side apply with a stale resourceVersion", vec![
            req("POST", LEASES, lease("l", json!({"holderIdentity": "a"}))),
            req("PUT", &at("l"), {
                let mut l = lease("l", json!({"holderIdentity": "b"}));
                l["metadata"]["resourceVersion"] = "$RV".into();
                l
            }),
            apply(req("PATCH", &format!("{}?fieldManager=t", at("l")), {
                let mut l = lease("l", json!({"holderIdentity": "c"}));
                l["metadata"]["resourceVersion"] = "1".into();
                l
            })),
            apply(req("PATCH", &format!("{}?fieldManager=t&force=true", at("l")), {
                let mut l = lease("l", json!({"holderIdentity": "c"}));
                l["metadata"]["resourceVersion"] = "1".into();
                l
            })),
            apply(req("PATCH", &format!("{}?fieldManager=t", at("n")), {
                let mut l = lease("n", json!({"holderIdentity": "c"}));
                l["metadata"]["resourceVersion"] = "1".into();
                l
            })),
        ]),
        case("DELETE of the cluster-wide Lease collection", vec![
            req("POST", LEASES, lease("l", json!({}))),
            req("DELETE", "/apis/coordination.k8s.io/v1/leases", Value::Null),
            req("DELETE", "/api/v1/events", Value::Null),
            req("GET", &at("l"), Value::Null),
        ]),
        case("deleting a Lease with finalizers", vec![
            {
                let mut l = lease("f", json!({"holderIdentity": "a"}));
                l["metadata"]["finalizers"] = json!(["example.com/hold"]);
                req("POST", LEASES, l)
            },
            watching(req("GET", &format!("{LEASES}?watch=true&fieldSelector=metadata.name%3Df&resourceVersion=$RV"), Value::Null), 3),
            req("DELETE", &at("f"), Value::Null),
            req("GET", &at("f"), Value::Null),
            req("PUT", &at("f"), {
                let mut l = lease("f", json!({"holderIdentity": "b"}));
                l["metadata"]["finalizers"] = json!(["example.com/hold"]);
                l["metadata"]["resourceVersion"] = "$RV".into();
                l
            }),
            req("DELETE", &at("f"), Value::Null),
            {
                let mut l = lease("f", json!({"holderIdentity": "a"}));
                l["metadata"]["finalizers"] = json!([]);
                l["metadata"]["resourceVersion"] = "$RV".into();
                req("PUT", &at("f"), l)
            },
            req("GET", &at("f"), Value::Null),
        ]),
        case("leaseDurationSeconds: 0", vec![
            req("POST", LEASES, lease("z", json!({"leaseDurationSeconds": 0}))),
            req("POST", LEASES, lease("n", json!({"leaseDurationSeconds": -1}))),
            req("POST", LEASES, lease("l", json!({"leaseDurationSeconds": 1}))),
            req("PUT", &at("l"), {
                let mut l = lease("l", json!({"leaseDurationSeconds": 0}));
                l["metadata"]["resourceVersion"] = "$RV".into();
                l
            }),
            with_header(req("PATCH", &at("l"), json!({"spec": {"leaseDurationSeconds": 0}})), "content-type", "application/merge-patch+json"),
        ]),
        case("negative leaseTransitions", vec![
            req("POST", LEASES, lease("t", json!({"leaseTransitions": -1}))),
            req("POST", LEASES, lease("l", json!({"leaseTransitions": 0}))),
            with_header(req("PATCH", &at("l"), json!({"spec": {"leaseTransitions": -5}})), "content-type", "application/merge-patch+json"),
        ]),
        case("strict field validation", vec![
            req("POST", &format!("{LEASES}?fieldValidation=Strict"), lease("s1", json!({"holderIdentity": "a", "bogus": 1}))),
            raw("POST", &format!("{LEASES}?fieldValidation=Strict"),
                r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"d"},"spec":{"holderIdentity":"a","holderIdentity":"b"}}"#),
            raw("POST", LEASES,
                r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"d"},"spec":{"holderIdentity":"a","holderIdentity":"b"}}"#),
            req("POST", &format!("{LEASES}?fieldValidation=Warn"), lease("s2", json!({"holderIdentity": "a", "bogus": 1}))),
            req("POST", LEASES, lease("s3", json!({"holderIdentity": "a", "bogus": 1}))),
            req("POST", &format!("{LEASES}?fieldValidation=Ignore"), lease("s4", json!({"holderIdentity": "a", "bogus": 1}))),
            req("POST", &format!("{LEASES}?fieldValidation=Bogus"), lease("s5", json!({}))),
            req("PUT", &format!("{}?fieldValidation=Strict", at("s2")), {
                let mut l = lease("s2", json!({"holderIdentity": "a", "other": true}));
                l["metadata"]["resourceVersion"] = "$RV".into();
                l["metadata"]["bogus"] = "x".into();
                l
            }),
            with_header(req("PATCH", &format!("{}?fieldValidation=Strict", at("s3")), json!({"spec": {"nope": 1}})), "content-type", "application/merge-patch+json"),
        ]),
        case("an unchanged PUT", vec![
            req("POST", LEASES, lease("u", json!({"holderIdentity": "a"}))),
            watching(req("GET", &format!("{LEASES}?watch=true&fieldSelector=metadata.name%3Du&resourceVersion=$RV"), Value::Null), 1),
            req("PUT", &at("u"), {
                let mut l = lease("u", json!({"holderIdentity": "a"}));
                l["metadata"]["resourceVersion"] = "$RV".into();
                l
            }),
            req("PUT", &at("u"), {
                let mut l = lease("u", json!({"holderIdentity": "b"}));
                l["metadata"]["resourceVersion"] = "$RV".into();
                l
            }),
            req("GET", &at("u"), Value::Null),
        ]),
        case("watch: initial events, bookmarks, a too-old version, a named watch on delete", vec![
            req("POST", LEASES, lease("w", json!({"holderIdentity": "a"}))),
            watching(req("GET", &format!("{LEASES}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"), Value::Null), 2),
            watching(req("GET", &format!("{LEASES}?watch=true&fieldSelector=metadata.name%3Dw&resourceVersion=$RV"), Value::Null), 2),
            watching(req("GET", &format!("{LEASES}?watch=true&resourceVersion=1"), Value::Null), 1),
            req("PUT", &at("w"), {
                let mut l = lease("w", json!({"holderIdentity": "b"}));
                l["metadata"]["resourceVersion"] = "$RV".into();
                l
            }),
            req("DELETE", &at("w"), Value::Null),
        ]),
    ]
}

// ---- the test ----------------------------------------------------------------------

#[test]
#[ignore = "needs the real control plane (.ci/control-plane test)"]
fn the_test_server_answers_as_kube_apiserver_does_or_the_table_says_why_not() {
    let Some(dir) = std::env::var_os("LEASE_ELECTOR_CONTROL_PLANE") else {
        common::oracle::skipped(
            "control-plane",
            "LEASE_ELECTOR_CONTROL_PLANE not set (run `.ci/control-plane test`)",
        );
        return;
    };
    common::oracle::ran("control-plane");
    let real = Server::real(Path::new(&dir));
    let mut sequences = cases();
    let mut left_out = 0;
    if let Some(rec) = std::env::var_os("LEASE_ELECTOR_RECORD_DIR") {
        let (recorded, n) = load(Path::new(&rec));
        left_out = n;
        let mut seen = BTreeSet::new();
        sequences.extend(recorded.into_iter().filter(|s| seen.insert(signature(s))));
    }
    if let Ok(only) = std::env::var("LEASE_ELECTOR_DIFFERENTIAL_ONLY") {
        sequences.retain(|s| s.name.contains(&only));
    }
    let table = listed();
    // Each run's namespaces are its own, so that a control plane can be
    // reused.
    let run = format!(
        "x{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() % 0xfffff)
    );
    let started = Instant::now();
    let (mut requests, mut all) = (0usize, Vec::new());
    // Sequences run side by side (each in namespaces of its own): most of
    // a replay is waiting for answers and for watches to fall quiet.
    let jobs = std::env::var("LEASE_ELECTOR_DIFFERENTIAL_JOBS")
        .ok()
        .and_then(|j| j.parse::<usize>().ok())
        .unwrap_or(4)
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let found = std::sync::Mutex::new(Vec::new());
    thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(seq) = sequences.get(n) else { break };
                let prefix = format!("{run}-{n}-");
                let fake_server = Server::fake();
                let fake = replay(&fake_server, seq, &prefix, None);
                if let Kind::Fake(s) = fake_server.kind {
                    s.shutdown();
                }
                let r = replay(&real, seq, &prefix, Some(&fake));
                let ours: BTreeSet<String> = r
                    .namespaces
                    .iter()
                    .chain(&fake.namespaces)
                    .cloned()
                    .collect();
                let diffs = compare(seq, &fake, &r, &ours);
                found.lock().unwrap().push((n, diffs));
            });
        }
    });
    let mut found = found.into_inner().unwrap();
    found.sort_by_key(|(n, _)| *n);
    all.extend(found.into_iter().flat_map(|(_, d)| d));
    requests += sequences
        .iter()
        .flat_map(|s| &s.steps)
        .filter(|s| matches!(s, Step::Request(_)))
        .count();
    let mut by_key: BTreeMap<&str, Vec<&Difference>> = BTreeMap::new();
    for d in &all {
        by_key.entry(&d.key).or_default().push(d);
    }
    let listed_n = by_key.keys().filter(|k| is_listed(k, &table)).count();
    let mut report = String::new();
    for (k, ds) in &by_key {
        let mark = if is_listed(k, &table) {
            "listed"
        } else {
            "NOT LISTED"
        };
        report.push_str(&format!(
            "{mark}: `{k}` ({} times), e.g. {}\n",
            ds.len(),
            ds[0].what
        ));
    }
    report.push_str(&format!(
        "replayed in {:.1} s; {left_out} recorded requests left out (injected faults, refused tokens, protobuf, past {MAX_STEPS} per sequence)\n",
        started.elapsed().as_secs_f64()
    ));
    let line = format!(
        "differential: {} sequences, {requests} requests, {} differences ({listed_n} listed)",
        sequences.len(),
        by_key.len()
    );
    eprint!("{report}");
    println!("{line}");
    // Also where a runner that captures the test's output can read it.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("differential.txt");
    let _ = std::fs::write(&out, format!("{report}{line}\n"));
    let unlisted: Vec<&&str> = by_key.keys().filter(|k| !is_listed(k, &table)).collect();
    assert!(
        unlisted.is_empty(),
        "differences not in docs/test-server-deviations.md: {unlisted:#?}"
    );
}
