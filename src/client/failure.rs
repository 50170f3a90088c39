//! Why a request got no usable answer, said in our words and naming the
//! server: "no answer from the API server at URL within 5 s", not the HTTP
//! library's "timeout: global". The library's error stays reachable as the
//! `source()`.
//!
//! Also the two answers the client refuses: a redirect (the API server
//! never redirects, and ureq would follow a redirected `PUT` as a `GET`,
//! whose answer then looks like the answer to the write), and URLs shown
//! without the credentials they may carry.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::error::{ApiStatus, Error, StatusKind};

use super::wire::Target;

/// The cause inside an [`Error::Transport`] the crate's client made.
#[derive(Debug)]
pub(crate) struct NoAnswer {
    /// The API server's base URL, without credentials.
    server: String,
    why: Why,
}

#[derive(Debug)]
enum Why {
    /// A time-out, with the budget the request had.
    TimedOut { connecting: bool, within: Duration },
    /// An `http://` URL answered with bytes that are not HTTP: what a TLS
    /// server sends back to a plain-text request.
    NotHttp,
    /// An `https://` URL answered with bytes that are not TLS: a
    /// plain-HTTP server on that port.
    NotTls(ureq::Error),
    /// The request was never sent: no time was left, or a stop came first.
    Unsent(&'static str),
    /// The request could not be built (a header the HTTP crate refuses).
    Unbuilt(ureq::http::Error),
    /// Anything else the HTTP library reports.
    Ureq(ureq::Error),
    /// Reading the answer's body failed.
    Body(std::io::Error),
}

impl NoAnswer {
    fn new(server: &str, why: Why) -> Self {
        NoAnswer {
            server: shown_url(server).into_owned(),
            why,
        }
    }

    /// A failed exchange: `budget` is the time the request was given,
    /// `connect` the part of it a connection could take.
    pub(crate) fn from_ureq(
        server: &str,
        e: ureq::Error,
        budget: Duration,
        connect: Duration,
    ) -> Self {
        let why = match e {
            ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => {
                Why::TimedOut {
                    connecting: true,
                    within: connect,
                }
            }
            ureq::Error::Timeout(_) => Why::TimedOut {
                connecting: false,
                within: budget,
            },
            // A TLS record where the status line should be fails on its
            // first bytes ("invalid HTTP version"); any other parse failure
            // (a bad header) is not a TLS server's.
            ureq::Error::Protocol(p)
                if server.starts_with("http://") && {
                    let p = p.to_string();
                    p.starts_with("http parse fail") && p.contains("version")
                } =>
            {
                Why::NotHttp
            }
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => Why::TimedOut {
                connecting: false,
                within: budget,
            },
            ureq::Error::Io(io) if not_tls(&io) => Why::NotTls(ureq::Error::Io(io)),
            e => Why::Ureq(e),
        };
        NoAnswer::new(server, why)
    }

    /// Reading the body of an answer failed.
    pub(crate) fn from_body(server: &str, e: std::io::Error, budget: Duration) -> Self {
        // ureq reports a time-out while reading the body as an io::Error
        // that wraps its own.
        let timed_out = e.kind() == std::io::ErrorKind::TimedOut
            || e.get_ref()
                .and_then(|inner| inner.downcast_ref::<ureq::Error>())
                .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
        let why = if timed_out {
            Why::TimedOut {
                connecting: false,
                within: budget,
            }
        } else {
            Why::Body(e)
        };
        NoAnswer::new(server, why)
    }

    /// The request was not sent: `why` says why (no time left, a stop).
    pub(crate) fn unsent(server: &str, why: &'static str) -> Self {
        NoAnswer::new(server, Why::Unsent(why))
    }

    /// The request could not be built.
    pub(crate) fn unbuilt(server: &str, e: ureq::http::Error) -> Self {
        NoAnswer::new(server, Why::Unbuilt(e))
    }

    /// The server's URL, without credentials.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// An `http://` URL answered by something that does not speak HTTP,
    /// most likely a TLS server: the fix is `https://`.
    pub(crate) fn wants_https(&self) -> bool {
        matches!(self.why, Why::NotHttp)
    }

    /// The TLS handshake or certificate check failed.
    pub(crate) fn is_tls(&self) -> bool {
        let Why::Ureq(e) = &self.why else {
            return false;
        };
        if matches!(e, ureq::Error::Rustls(_) | ureq::Error::Tls(_)) {
            return true;
        }
        // rustls errors met mid-handshake come back as io errors.
        let text = format!("{e:?} {e}").to_ascii_lowercase();
        ["certificate", "tls", "unknownissuer", "handshake"]
            .iter()
            .any(|w| text.contains(w))
    }

    /// An `https://` URL answered in plain HTTP.
    pub(crate) fn wants_http(&self) -> bool {
        matches!(self.why, Why::NotTls(_))
    }

    /// `https://` in place of `http://`.
    fn https_url(&self) -> String {
        match self.server.strip_prefix("http://") {
            Some(rest) => format!("https://{rest}"),
            None => self.server.clone(),
        }
    }
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = &self.server;
        match &self.why {
            Why::TimedOut {
                connecting: true,
                within,
            } => write!(
                f,
                "could not connect to the API server at {server} within {}",
                Seconds(*within)
            ),
            Why::TimedOut { within, .. } => write!(
                f,
                "no answer from the API server at {server} within {}",
                Seconds(*within)
            ),
            Why::NotHttp => write!(
                f,
                "the server at {server} did not answer in HTTP, as a TLS server answers a plain-text request: use {}",
                self.https_url()
            ),
            Why::NotTls(_) => write!(
                f,
                "the server at {server} did not answer in TLS: it serves plain HTTP on that port"
            ),
            Why::Unsent(why) => write!(f, "no request sent to the API server at {server}: {why}"),
            Why::Unbuilt(e) => write!(
                f,
                "could not build the request to the API server at {server}: {e}"
            ),
            Why::Ureq(e) => write!(f, "no answer from the API server at {server}: {}", Ureq(e)),
            Why::Body(e) => write!(
                f,
                "the answer from the API server at {server} broke off: {e}"
            ),
        }
    }
}

impl std::error::Error for NoAnswer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.why {
            Why::Ureq(e) | Why::NotTls(e) => Some(e),
            Why::Body(e) => Some(e),
            Why::Unbuilt(e) => Some(e),
            _ => None,
        }
    }
}

/// rustls met a record that is not TLS: what a plain-HTTP server answers.
fn not_tls(io: &std::io::Error) -> bool {
    io.get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            )
        })
}

/// ureq's error with its category prefix ("io: ", "protocol: ") dropped
/// where the rest says it all.
struct Ureq<'a>(&'a ureq::Error);

impl fmt::Display for Ureq<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            ureq::Error::Io(e) => match e.kind() {
                std::io::ErrorKind::ConnectionRefused => f.write_str("connection refused"),
                std::io::ErrorKind::ConnectionReset => f.write_str("connection reset"),
                _ => write!(f, "{e}"),
            },
            ureq::Error::HostNotFound => f.write_str("host not found"),
            e => write!(f, "{e}"),
        }
    }
}

/// A budget as "5 s", "2.5 s" or "300 ms".
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < Duration::from_millis(950) {
            return write!(f, "{} ms", self.0.as_millis());
        }
        let tenths = (self.0.as_millis() + 50) / 100;
        if tenths % 10 == 0 {
            write!(f, "{} s", tenths / 10)
        } else {
            write!(f, "{}.{} s", tenths / 10, tenths % 10)
        }
    }
}

/// A 3xx answer: an error naming the status and where it pointed. The
/// client follows no redirect (the API server never sends one, and a
/// followed redirect turns a write into a read).
pub(crate) fn redirect(t: Target<'_>, code: u16, location: Option<&[u8]>) -> Error {
    let message = match location {
        Some(l) => format!(
            "redirected to {}; the API server never redirects, so it is not followed",
            shown_url(&String::from_utf8_lossy(l))
        ),
        None => "a redirect without a Location; the API server never redirects".to_string(),
    };
    Error::Api {
        target: t.what.to_string(),
        action: t.action,
        status: ApiStatus {
            code,
            kind: StatusKind::Other,
            reason: String::new(),
            message,
            retry_after: None,
        },
    }
}

/// `url` without the credentials it may carry (`user:password@`), which
/// become `***@`; the rest as it is. Works on text that does not parse as
/// a URL too, so that an unusable URL can be shown in the error that
/// refuses it.
pub(crate) fn shown_url(url: &str) -> Cow<'_, str> {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let userinfo_end = match authority.rfind('@') {
        Some(at) => Some(at),
        // A password holding a `/`, `?` or `#` that is not percent-encoded
        // ends the authority early (`user:pa/ss@host`), leaving a `:` that
        // no port follows: the text up to the last `@` is still userinfo.
        None if !port_or_none(authority) => rest.rfind('@'),
        None => None,
    };
    match userinfo_end {
        Some(at) => Cow::Owned(format!("{}***{}", &url[..start], &rest[at..])),
        None => Cow::Borrowed(url),
    }
}

/// Whether `authority` (without userinfo) is a host with a port of digits
/// or without one (`host`, `host:6443`, `[::1]:8080`).
fn port_or_none(authority: &str) -> bool {
    let after_host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, after)| after),
        None => authority,
    };
    match after_host.split_once(':') {
        Some((_, port)) => !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_cut_out_of_urls() {
        assert_eq!(
            shown_url("http://alice:Pr0xyS3cret@127.0.0.1:1 /x"),
            "http://***@127.0.0.1:1 /x"
        );
        assert_eq!(shown_url("socks5://u:p@h:1080"), "socks5://***@h:1080");
        assert_eq!(shown_url("u:p@proxy:3128"), "***@proxy:3128");
        assert_eq!(shown_url("https://a@b@host/p@q"), "https://***@host/p@q");
        assert_eq!(
            shown_url("http://host/path?u=a@b"),
            "http://host/path?u=a@b"
        );
        assert_eq!(
            shown_url("http://host:8080/path?u=a@b"),
            "http://host:8080/path?u=a@b"
        );
        assert_eq!(
            shown_url("http://[::1]:8080/p?u=a@b"),
            "http://[::1]:8080/p?u=a@b"
        );
        assert_eq!(shown_url("socks5://u:pa/ss@h:1080"), "socks5://***@h:1080");
        assert_eq!(shown_url("https://u:pa#s?s@h"), "https://***@h");
        assert!(matches!(
            shown_url("https://10.0.0.1:6443"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn budgets_read_in_seconds() {
        assert_eq!(Seconds(Duration::from_secs(5)).to_string(), "5 s");
        assert_eq!(Seconds(Duration::from_millis(4_999)).to_string(), "5 s");
        assert_eq!(Seconds(Duration::from_millis(2_500)).to_string(), "2.5 s");
        assert_eq!(Seconds(Duration::from_millis(40)).to_string(), "40 ms");
        assert_eq!(Seconds(Duration::from_millis(960)).to_string(), "1 s");
    }
}
