//! Watch streams: one chunked JSON line per change of the watched Lease(s).

use std::io::BufReader;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::http::{self, Request};
use super::selector::{Selection, LEASE_FIELDS};
use super::server::{self, Next, Shared, Stream};
use super::status;
use super::store::{meta_str, Change, EventType};
use super::table;

/// How often an idle watch checks whether its client went away.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// Why a stream ended.
enum End {
    /// Server shutdown: finish the body, then close.
    Shutdown,
    /// `timeoutSeconds` elapsed: finish the body, keep the connection.
    Timeout,
    /// Outage or the client went away: close at once.
    Abort,
}

/// One watch event; with `table` (the Table version kubectl asked for),
/// the object goes out printed as a one-row Table.
fn line(kind: EventType, object: &Value, table: Option<&str>) -> Vec<u8> {
    let printed;
    let object = match table {
        Some(version) => {
            let rv = meta_str(object, "resourceVersion").unwrap_or_default();
            printed = table::LEASES.table(version, rv, std::slice::from_ref(object));
            &printed
        }
        None => object,
    };
    let mut l = json!({ "type": kind.as_str(), "object": object })
        .to_string()
        .into_bytes();
    l.push(b'\n');
    l
}

/// The event a watcher that selects with `matches` gets for `c`: a change
/// that makes an object start matching is `ADDED`, one that makes it stop
/// matching is `DELETED` with the object as it was (at the change's
/// resourceVersion), as kube-apiserver's watch cache sends them.
fn event_for(c: &Change, matches: impl Fn(&Value) -> bool) -> Option<(EventType, Value)> {
    let now = c.kind != EventType::Deleted && matches(&c.object);
    let before = c.previous.as_ref().is_some_and(&matches);
    match (before, now) {
        (false, true) => Some((EventType::Added, c.object.clone())),
        (true, true) => Some((EventType::Modified, c.object.clone())),
        (true, false) => {
            let mut gone = c.previous.clone()?;
            if let Some(m) = gone.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("resourceVersion".into(), c.rv.to_string().into());
            }
            Some((EventType::Deleted, gone))
        }
        (false, false) => None,
    }
}

/// Serve a watch on the Leases of `ns` (one Lease with a `metadata.name`
/// field selector; those with matching labels with a `labelSelector`)
/// until shutdown, outage, time-out or client close.
///
/// Without `resourceVersion` (or with `"0"`), current objects are sent
/// first as `ADDED`; with one, current objects newer than it are sent first
/// as `MODIFIED`. Then every later change is sent as it happens.
pub(crate) fn serve(
    shared: &Arc<Shared>,
    conn: &mut BufReader<Stream>,
    req: &Request,
    ns: &str,
    keep: Next,
) -> Next {
    let bad = |conn: &mut BufReader<Stream>, resp: http::Response| {
        let (method, target) = (&req.method, &req.target);
        let close = keep == Next::Close;
        match server::answer(
            shared,
            conn.get_mut(),
            method,
            target,
            req.bytes_in,
            &resp,
            close,
        ) {
            Ok(()) => keep,
            Err(_) => Next::Close,
        }
    };
    let selector = match Selection::of(req, LEASE_FIELDS) {
        Ok(s) => s,
        Err(resp) => return bad(conn, resp),
    };
    let name = selector.fields.name().map(str::to_string);
    let table = table::wanted(req);
    let since = match req
        .query("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
    {
        None => None,
        Some(v) => match v.parse::<u64>() {
            Ok(rv) => Some(rv),
            Err(_) => {
                let msg = format!("invalid resource version: {v}");
                return bad(conn, status::bad_request(&msg));
            }
        },
    };
    let timeout = req
        .query("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(|s| Instant::now() + Duration::from_secs(s));
    let matches = |o: &Value| selector.matches(o);

    let (initial, mut last) = {
        let st = shared.lock();
        let current = st.store.list(ns).into_iter().filter(|o| matches(o));
        let initial: Vec<Vec<u8>> = match since {
            None => current.map(|o| line(EventType::Added, &o, table)).collect(),
            Some(rv) => current
                .filter(|o| {
                    meta_str(o, "resourceVersion")
                        .and_then(|v| v.parse::<u64>().ok())
                        .is_some_and(|orv| orv > rv)
                })
                .map(|o| line(EventType::Modified, &o, table))
                .collect(),
        };
        (initial, st.store.rv())
    };

    let mut out = 0u64;
    let end = 'stream: {
        match http::write_chunked_head(conn.get_mut()) {
            Ok(n) => out += n,
            Err(_) => break 'stream End::Abort,
        }
        for l in &initial {
            match http::write_chunk(conn.get_mut(), l) {
                Ok(n) => out += n,
                Err(_) => break 'stream End::Abort,
            }
        }
        loop {
            let (lines, end) = {
                let mut st = shared.lock();
                let mut waited = false;
                loop {
                    if shared.stopping() {
                        break (Vec::new(), Some(End::Shutdown));
                    }
                    if st.outage {
                        break (Vec::new(), Some(End::Abort));
                    }
                    let changes = st.store.changes_since(last, ns, name.as_deref());
                    if let Some(c) = changes.last() {
                        last = c.rv;
                        let lines: Vec<Vec<u8>> = changes
                            .iter()
                            .filter_map(|c| event_for(c, matches))
                            .map(|(kind, object)| line(kind, &object, table))
                            .collect();
                        if !lines.is_empty() {
                            break (lines, None);
                        }
                    }
                    let now = Instant::now();
                    if timeout.is_some_and(|t| now >= t) {
                        break (Vec::new(), Some(End::Timeout));
                    }
                    if waited {
                        break (Vec::new(), None);
                    }
                    let wait = timeout.map_or(PROBE_EVERY, |t| PROBE_EVERY.min(t - now));
                    st = shared.wait(st, wait);
                    waited = true;
                }
            };
            if let Some(end) = end {
                break 'stream end;
            }
            for l in &lines {
                match http::write_chunk(conn.get_mut(), l) {
                    Ok(n) => out += n,
                    Err(_) => break 'stream End::Abort,
                }
            }
            if lines.is_empty() && conn.get_mut().peer_gone() {
                break 'stream End::Abort;
            }
        }
    };
    let finish =
        |out: u64| server::finish(shared, &req.method, &req.target, 200, req.bytes_in, out);
    match end {
        End::Abort => {
            finish(out);
            Next::Close
        }
        End::Shutdown | End::Timeout => {
            // Logged before the last chunk leaves, like every other answer.
            finish(out + http::LAST_CHUNK.len() as u64);
            match http::send(conn.get_mut(), http::LAST_CHUNK) {
                Ok(()) if matches!(end, End::Timeout) => keep,
                _ => Next::Close,
            }
        }
    }
}
