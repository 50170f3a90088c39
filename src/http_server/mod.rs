//! The small HTTP/1.1 server core shared by the health endpoint
//! (`crate::health`, feature `health`) and the embedded API server
//! (`crate::testing`, feature `testing`): one implementation of the
//! limits, the request-head parsing, the head time-out and the connection
//! accounting, so that a fix to any of them is made once.
//!
//! What each server does with it:
//!
//! | | health endpoint | test API server |
//! |---|---|---|
//! | request head (request line and header fields) | at most 8 KiB | at most 1 MiB (kube-apiserver's `MaxHeaderBytes`) |
//! | head time-out | the whole head within 5 s of the accept | the first head within 32 s of the accept, a later one within 32 s of its first byte (kube-apiserver's `ReadHeaderTimeout`) |
//! | idle keep-alive connection | closed after the answer | closed after 90 s (kube-apiserver's `IdleTimeout`) |
//! | connections | at most 16, at most 8 per peer address | at most 512 (a test tool on loopback: one peer) |
//!
//! **Making room.** When a new connection would go over its peer's share
//! or over the total, the oldest connection in the way that has not sent a
//! complete request head (silent, or dripping a slow-loris head) is closed
//! at once without an answer; failing that, the oldest one whose answer is
//! already written (lingering until the client closes). A peer over its
//! share only ever closes its own connections, so one address flooding the
//! server cannot close another's. Only when every connection in the way is
//! busy computing an answer is the new one refused (the health endpoint
//! answers it `503`). Go's `net/http` and nginx have no such policy (they
//! rely on time-outs alone); with a thread per connection a bounded table
//! is what keeps memory bounded, and eviction is what keeps the bound from
//! becoming a lever.
//!
//! **Heads** are parsed as RFC 9112 says: `METHOD SP target SP HTTP/1.x`,
//! origin-form (`/path?query`) or absolute-form (`http://host/path`)
//! targets, `name: value` fields (names are tokens; no control character in
//! values; no obsolete line folding), exactly one `Host` in an HTTP/1.1
//! request, empty lines before the request line ignored, bare LF line ends
//! accepted. Answers to a bad head: `400`, `431` (too large) or `505` (a
//! version other than HTTP/1.0 and HTTP/1.1), as Go's `net/http` answers.

// Built with either server alone, a few items only the other one uses are
// idle; with both (as the crate's tests build it) everything is used.
#![cfg_attr(
    not(all(feature = "health", feature = "testing")),
    allow(dead_code, unused_imports)
)]

mod conns;
mod head;

pub(crate) use conns::{Admission, Connections, Limits, Phase};
pub(crate) use head::{read_head, Head, Incoming, Transport};

/// The reason phrase of a status code (RFC 9110 §15).
pub(crate) fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}
