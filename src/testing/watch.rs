//! Watch streams: one chunked JSON line per change of the watched
//! objects. A watch from a resourceVersion replays every change after it
//! from the collection's window (`store::WATCH_WINDOW` changes), or gets
//! one `ERROR` event with a 410 `Expired` Status when it is older, as
//! kube-apiserver's watch cache answers (HTTP 200, then the event).
//! `allowWatchBookmarks=true` gets `BOOKMARK` events when the watch cache
//! sends them: every minute, and 2 s before `timeoutSeconds` runs out.

use std::io::BufReader;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::api::view;
use super::http::{self, Request};
use super::resource::Api;
use super::selector::Selection;
use super::server::{self, Next, Shared, Stream};
use super::status;
use super::store::{meta_str, Change, EventType};

/// How often an idle watch checks whether its client went away.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// How often the watch cache sends a bookmark.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// How long before a watch's time-out the watch cache sends a bookmark.
const BOOKMARK_BEFORE_TIMEOUT: Duration = Duration::from_secs(2);

/// When to send the next bookmark (the watch cache's `nextBookmarkTime`):
/// a minute from `now`, or 2 s before the time-out if that is sooner;
/// none once that has passed.
fn next_bookmark(now: Instant, timeout: Option<Instant>) -> Option<Instant> {
    let mut at = now + BOOKMARK_EVERY;
    if let Some(t) = timeout {
        at = at.min(t.checked_sub(BOOKMARK_BEFORE_TIMEOUT)?);
    }
    (at > now).then_some(at)
}

/// A bookmark: an object of the watched kind that carries only the
/// resourceVersion the watch has reached (and, ending the initial events
/// of `sendInitialEvents`, the annotation saying so).
fn bookmark(api: Api, rv: u64, initial_end: bool) -> Vec<u8> {
    let mut meta = json!({ "resourceVersion": rv.to_string() });
    if initial_end {
        meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    let mut object =
        json!({ "kind": api.kind(), "apiVersion": api.api_version(), "metadata": meta });
    // The empty object of the kind, as Go serialises it: the fields it
    // does not omit when empty are there.
    match api {
        Api::Leases => object["spec"] = json!({}),
        Api::Events => {
            object["involvedObject"] = json!({});
            object = super::api::view(api, object);
        }
        _ => {}
    }
    let mut l = json!({ "type": "BOOKMARK", "object": object })
        .to_string()
        .into_bytes();
    l.push(b'\n');
    l
}

/// Why a stream ended.
enum End {
    /// Server shutdown: finish the body, then close.
    Shutdown,
    /// `timeoutSeconds` elapsed: finish the body, keep the connection.
    Timeout,
    /// Outage or the client went away: close at once.
    Abort,
}

/// One watch event of a stored object; with `table` (the Table version
/// kubectl asked for), the object goes out printed as a one-row Table.
///
/// kube-apiserver sends a Table's column definitions with the stream's
/// first Table only (`null` in the later ones): `columns` says whether
/// they were sent.
fn line(
    api: Api,
    kind: EventType,
    object: &Value,
    table: Option<&str>,
    columns: &std::cell::Cell<bool>,
) -> Vec<u8> {
    let object = match table {
        Some(version) => {
            let rv = meta_str(object, "resourceVersion").unwrap_or_default();
            let mut t = api
                .printer()
                .table(version, rv, std::slice::from_ref(object));
            if columns.replace(true) {
                t["columnDefinitions"] = Value::Null;
            }
            t
        }
        None => view(api, object.clone()),
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

/// Serve a watch on the `api` objects of `ns` (one object with a
/// `metadata.name` field selector; those with matching labels with a
/// `labelSelector`) until shutdown, outage, time-out or client close.
///
/// Without `resourceVersion` (or with `"0"`), current objects are sent
/// first as `ADDED`; with one, every change after it is replayed. Then
/// every later change is sent as it happens.
pub(crate) fn serve(
    shared: &Arc<Shared>,
    conn: &mut BufReader<Stream>,
    req: &Request,
    api: Api,
    ns: &str,
    keep: Next,
) -> Next {
    let bad = |conn: &mut BufReader<Stream>, resp: http::Response| {
        if let Some(r) = shared.lock().recording.as_mut() {
            r.exchange(req, &resp, None);
        }
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
    let selector = match Selection::of(req, api.selectable()) {
        Ok(s) => s,
        Err(resp) => return bad(conn, resp),
    };
    let name = selector.fields.name().map(str::to_string);
    let table = super::table::wanted(req);
    let bookmarks = req.query("allowWatchBookmarks") == Some("true");
    let send_initial = req.query("sendInitialEvents") == Some("true");
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
        .map(|s| crate::clock::add_saturating(Instant::now(), Duration::from_secs(s)));
    let matches = |o: &Value| selector.matches(o);
    let c = api.collection();
    let columns = std::cell::Cell::new(false);

    let (initial, mut last, expired, seq) = {
        let mut st = shared.lock();
        let seq = st.recording.as_mut().map(|r| r.next_seq());
        let now = st.store.rv();
        let current = || {
            st.store
                .list(c, ns)
                .into_iter()
                .filter(|o| matches(o))
                .map(|o| line(api, EventType::Added, &o, table, &columns))
        };
        match since {
            _ if send_initial => {
                let mut lines: Vec<Vec<u8>> = current().collect();
                if bookmarks {
                    lines.push(bookmark(api, now, true));
                }
                (lines, now, false, seq)
            }
            // kube-apiserver 1.37 ends the current objects of a watch
            // without a version (or from "0") with the bookmark, when the
            // client takes bookmarks, as for `sendInitialEvents`.
            None => {
                let mut lines: Vec<Vec<u8>> = current().collect();
                if bookmarks {
                    lines.push(bookmark(api, now, true));
                }
                (lines, now, false, seq)
            }
            Some(rv) => match st.store.changes_since(c, rv, ns, name.as_deref()) {
                Ok(changes) => {
                    let lines = changes
                        .iter()
                        .filter_map(|ch| event_for(ch, matches))
                        .map(|(kind, object)| line(api, kind, &object, table, &columns))
                        .collect();
                    (lines, now, false, seq)
                }
                Err(e) => {
                    let status = status::expired(rv, e.oldest);
                    let mut l = json!({ "type": "ERROR", "object": status })
                        .to_string()
                        .into_bytes();
                    l.push(b'\n');
                    (vec![l], now, true, seq)
                }
            },
        }
    };
    let mut next_beat = if bookmarks {
        next_bookmark(Instant::now(), timeout)
    } else {
        None
    };

    // What the stream sent, kept only while recording.
    let mut sent: Vec<Vec<u8>> = Vec::new();
    if seq.is_some() {
        sent.extend(initial.iter().cloned());
    }
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
        if expired {
            break 'stream End::Timeout;
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
                    // A watcher that fell further behind than the window
                    // is ended, as the watch cache ends one whose buffer
                    // overflows: it resumes and gets the 410.
                    let Ok(changes) = st.store.changes_since(c, last, ns, name.as_deref()) else {
                        break (Vec::new(), Some(End::Timeout));
                    };
                    if let Some(ch) = changes.last() {
                        last = ch.rv;
                        let lines: Vec<Vec<u8>> = changes
                            .iter()
                            .filter_map(|ch| event_for(ch, matches))
                            .map(|(kind, object)| line(api, kind, &object, table, &columns))
                            .collect();
                        if !lines.is_empty() {
                            break (lines, None);
                        }
                    }
                    let now = Instant::now();
                    if timeout.is_some_and(|t| now >= t) {
                        break (Vec::new(), Some(End::Timeout));
                    }
                    if next_beat.is_some_and(|b| now >= b) {
                        next_beat = next_bookmark(now, timeout);
                        break (vec![bookmark(api, st.store.rv().max(last), false)], None);
                    }
                    if waited {
                        break (Vec::new(), None);
                    }
                    let mut wait = timeout.map_or(PROBE_EVERY, |t| PROBE_EVERY.min(t - now));
                    if let Some(b) = next_beat {
                        wait = wait.min(b.saturating_duration_since(now));
                    }
                    st = shared.wait(st, wait);
                    waited = true;
                }
            };
            if let Some(end) = end {
                break 'stream end;
            }
            if seq.is_some() {
                sent.extend(lines.iter().cloned());
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
    if let Some(seq) = seq {
        let how = match end {
            End::Abort => "abort",
            End::Shutdown => "shutdown",
            End::Timeout => "timeout",
        };
        if let Some(r) = shared.lock().recording.as_mut() {
            r.watch(seq, req, &sent, how);
        }
    }
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
