//! What the server served, written down for the differential suite
//! (`tests/real_differential.rs`), which replays it on kube-apiserver and
//! on a fresh test server and compares the answers.
//!
//! With `LEASE_ELECTOR_RECORD_DIR` set when a server is built, it writes
//! one file of JSON lines there (named after its process, port and start
//! time, so that servers never share one): a first line naming the test
//! (the thread that built the server), then one line per request served,
//! per watch once it ends, and per object the test itself put into or
//! took out of the store (`put_lease`, `delete_lease`, `add_namespace`).
//! Every line carries `seq`, taken under the store's lock as the request
//! was served, so sorting by it gives the order the store saw.
//!
//! Unset, nothing is read or written beyond the one look at the variable.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::http::{Request, Response};

/// The variable naming the folder recordings go to.
pub(crate) const RECORD_DIR: &str = "LEASE_ELECTOR_RECORD_DIR";

/// The request headers that change what a server answers (the user agent
/// names the field manager).
const REQUEST_HEADERS: &[&str] = &["content-type", "accept", "content-encoding", "user-agent"];

/// Why a request's answer says nothing about the API: the replay skips it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// A fault rule answered it (or dropped or hung it).
    Fault,
    /// The token was refused (401) or forbidden (403) by the test's set-up.
    Auth,
}

impl Skip {
    fn as_str(self) -> &'static str {
        match self {
            Skip::Fault => "fault",
            Skip::Auth => "auth",
        }
    }
}

/// One server's recording file.
#[derive(Debug)]
pub(crate) struct Recording {
    file: File,
    path: PathBuf,
    seq: u64,
}

impl Recording {
    /// A recording for the server on `port`, when [`RECORD_DIR`] is set.
    pub(crate) fn from_env(port: u16, tls: bool) -> Option<Recording> {
        let dir = PathBuf::from(std::env::var_os(RECORD_DIR)?);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = dir.join(format!(
            "test-server-{}-{port}-{nanos}.jsonl",
            std::process::id()
        ));
        let opened = std::fs::create_dir_all(&dir).and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
        });
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                log::warn!(
                    "test-apiserver: not recording: cannot create {}: {e}",
                    path.display()
                );
                return None;
            }
        };
        let thread = std::thread::current();
        let mut r = Recording { file, path, seq: 0 };
        let test = thread.name().unwrap_or("").to_string();
        // The test binary (`kubectl-<hash>` for tests/kubectl.rs): the
        // replay keeps every request of the oracle tests.
        let binary = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_default();
        r.write(&json!({ "recording": 1, "test": test, "binary": binary, "tls": tls }));
        Some(r)
    }

    /// The position of the next thing recorded.
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// A request and its answer.
    pub(crate) fn exchange(&mut self, req: &Request, resp: &Response, skip: Option<Skip>) {
        let seq = self.next_seq();
        let mut line = request(seq, req);
        line.insert("status".into(), resp.status.into());
        let headers: Vec<Value> = resp
            .headers
            .iter()
            .map(|(n, v)| json!([n.to_ascii_lowercase(), v]))
            .collect();
        line.insert("response_headers".into(), headers.into());
        body(&mut line, "response_body", &resp.body);
        if let Some(s) = skip {
            line.insert("skip".into(), s.as_str().into());
        }
        self.write(&Value::Object(line));
    }

    /// A request refused or dropped before it reached the API, with no
    /// answer (`status` 0).
    pub(crate) fn dropped(&mut self, req: &Request) {
        let seq = self.next_seq();
        let mut line = request(seq, req);
        line.insert("status".into(), 0.into());
        line.insert("skip".into(), Skip::Fault.as_str().into());
        self.write(&Value::Object(line));
    }

    /// A watch that began at `seq` and sent `events` (each a JSON line)
    /// before it ended (`timeout`, `shutdown` or `abort`: the client left).
    pub(crate) fn watch(&mut self, seq: u64, req: &Request, events: &[Vec<u8>], end: &str) {
        let mut line = request(seq, req);
        line.insert("status".into(), 200.into());
        let events: Vec<Value> = events
            .iter()
            .map(|l| serde_json::from_slice(l).unwrap_or(Value::Null))
            .collect();
        line.insert("watch".into(), events.into());
        line.insert("end".into(), end.into());
        self.write(&Value::Object(line));
    }

    /// The test put `object` into the store (`put`), deleted
    /// `namespace/name` from it (`delete`) or added a namespace
    /// (`namespace`) without a request.
    pub(crate) fn seed(
        &mut self,
        op: &str,
        collection: &str,
        ns: &str,
        name: &str,
        object: &Value,
    ) {
        let seq = self.next_seq();
        self.write(&json!({
            "seq": seq,
            "seed": op,
            "collection": collection,
            "namespace": ns,
            "name": name,
            "object": object,
        }));
    }

    fn write(&mut self, line: &Value) {
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        // One write per line: a reader never sees half of one unless the
        // process died mid-way, and then it drops the last line.
        if let Err(e) = self.file.write_all(&bytes) {
            log::warn!(
                "test-apiserver: recording to {} failed: {e}",
                self.path.display()
            );
        }
    }
}

fn request(seq: u64, req: &Request) -> Map<String, Value> {
    let mut line = Map::new();
    line.insert("seq".into(), seq.into());
    line.insert("method".into(), req.method.clone().into());
    line.insert("target".into(), req.target.clone().into());
    let headers: Map<String, Value> = REQUEST_HEADERS
        .iter()
        .filter_map(|n| req.header(n).map(|v| ((*n).to_string(), v.into())))
        .collect();
    line.insert("headers".into(), headers.into());
    body(&mut line, "body", &req.body);
    line
}

/// A body as text, or as base64 under `<key>_base64` when it is not UTF-8
/// (protobuf).
fn body(line: &mut Map<String, Value>, key: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => {
            line.insert(key.into(), text.into());
        }
        Err(_) => {
            line.insert(
                format!("{key}_base64"),
                crate::client::base64::encode(bytes).into(),
            );
        }
    }
}
