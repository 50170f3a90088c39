//! Reading a request head off a connection within a size and a time
//! budget, and parsing it (RFC 9112 §2.2, §3, §5).

use std::io::{self, BufRead, BufReader, Read};
use std::net::TcpStream;

use crate::deadline::Deadline;

/// A readable connection whose socket takes read time-outs: a plain
/// `TcpStream`, or a TLS stream over one.
pub(crate) trait Transport: Read {
    /// The TCP socket underneath.
    fn tcp(&self) -> &TcpStream;
}

impl Transport for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) method: String,
    /// The target in origin form (path and query as sent), also when it was
    /// sent in absolute form.
    pub(crate) target: String,
    /// HTTP/1.1 (else HTTP/1.0).
    pub(crate) http11: bool,
    /// Field names lower-cased, values without surrounding white space.
    pub(crate) headers: Vec<(String, String)>,
    /// Bytes read for the head, blank lines included.
    pub(crate) bytes: u64,
}

impl Head {
    /// The first field named `name` (lower case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path, without the query.
    pub(crate) fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or(&self.target)
    }

    /// Whether the client wants the connection kept open afterwards
    /// (RFC 9112 §9.3).
    pub(crate) fn keep_alive(&self) -> bool {
        let connection = self.header("connection").unwrap_or_default();
        let has = |option: &str| {
            connection
                .split(',')
                .any(|o| o.trim().eq_ignore_ascii_case(option))
        };
        if self.http11 {
            !has("close")
        } else {
            has("keep-alive")
        }
    }
}

/// A head that cannot be served: answer `status` with `reason`, then close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadHead {
    /// `400`, `431` or `505`.
    pub(crate) status: u16,
    /// What is wrong, for the answer's body (no status phrase).
    pub(crate) reason: String,
    /// Method and target, when the request line was readable (for logs).
    pub(crate) method: String,
    pub(crate) target: String,
    /// Bytes read.
    pub(crate) bytes: u64,
}

/// What reading the next request head produced.
#[derive(Debug)]
pub(crate) enum Incoming {
    Head(Head),
    /// The client closed the connection before sending a byte.
    Closed,
    Bad(BadHead),
}

fn bad(reason: impl Into<String>) -> BadHead {
    BadHead {
        status: 400,
        reason: reason.into(),
        method: String::new(),
        target: String::new(),
        bytes: 0,
    }
}

/// Read one request head from `conn`: at most `max` bytes (blank lines
/// before the request line included; more is a `431`), each read allowed
/// only what is left until `deadline`, so that a client dripping a byte at
/// a time gets no more time than one that sends nothing. The socket's read
/// time-out is cleared again before returning a head.
///
/// `Err` when the time is up, the connection failed, or it was closed in
/// the middle of a head: there is no one to answer.
pub(crate) fn read_head<S: Transport>(
    conn: &mut BufReader<S>,
    max: usize,
    deadline: &Deadline,
) -> io::Result<Incoming> {
    // The head so far, without the blank lines before it.
    let mut head: Vec<u8> = Vec::new();
    let mut read = 0usize;
    // The request line is checked as soon as it ends (or goes wrong), so
    // that a client speaking something else (a TLS hello, say) is answered
    // at once rather than left waiting for a blank line that never comes.
    let mut line_checked = false;
    loop {
        let left = deadline.remaining();
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request head not received in time",
            ));
        }
        conn.get_ref().tcp().set_read_timeout(Some(left))?;
        let buf = match conn.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return if read == 0 {
                Ok(Incoming::Closed)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        let mut used = 0;
        let mut complete = false;
        let mut check_line = false;
        for &b in buf {
            if read + used >= max {
                break;
            }
            used += 1;
            // RFC 9112 §2.2: ignore empty lines before the request line.
            if head.is_empty() && (b == b'\r' || b == b'\n') {
                continue;
            }
            head.push(b);
            if !line_checked && (b == b'\n' || (b != b'\r' && !(0x20..0x7f).contains(&b))) {
                check_line = true;
                break;
            }
            if b == b'\n' && (head.ends_with(b"\n\n") || head.ends_with(b"\n\r\n")) {
                complete = true;
                break;
            }
        }
        conn.consume(used);
        read += used;
        if check_line {
            line_checked = true;
            let line = head.strip_suffix(b"\n").unwrap_or(&head);
            if let Err(mut b) = request_line(line.strip_suffix(b"\r").unwrap_or(line)) {
                conn.get_ref().tcp().set_read_timeout(None)?;
                b.bytes = read as u64;
                return Ok(Incoming::Bad(b));
            }
        }
        if complete {
            conn.get_ref().tcp().set_read_timeout(None)?;
            // Without the blank line and the end of the last field line.
            while matches!(head.last(), Some(b'\r' | b'\n')) {
                head.pop();
            }
            let incoming = match parse(&head) {
                Ok(mut h) => {
                    h.bytes = read as u64;
                    Incoming::Head(h)
                }
                Err(mut b) => {
                    b.bytes = read as u64;
                    Incoming::Bad(b)
                }
            };
            return Ok(incoming);
        }
        if read >= max {
            conn.get_ref().tcp().set_read_timeout(None)?;
            let (method, target) = request_line_start(&head);
            return Ok(Incoming::Bad(BadHead {
                status: 431,
                reason: format!("request head larger than {max} bytes"),
                method,
                target,
                bytes: read as u64,
            }));
        }
    }
}

/// Method and target of a request line that may be cut short, for logs.
fn request_line_start(head: &[u8]) -> (String, String) {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let method = parts.next().filter(|m| is_token(m)).unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    (method.to_string(), target.chars().take(256).collect())
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Method, origin-form target and HTTP/1.1-ness of a request line.
fn request_line(line: &[u8]) -> Result<(String, String, bool), BadHead> {
    let line = std::str::from_utf8(line)
        .ok()
        .filter(|l| l.is_ascii() && !l.bytes().any(|b| b.is_ascii_control()))
        .ok_or_else(|| bad("request line is not ASCII text"))?;
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(bad("request line is not METHOD TARGET HTTP/1.1"));
    };
    let with_line = |mut b: BadHead| {
        b.method = method.to_string();
        b.target = target.chars().take(256).collect();
        b
    };
    if !is_token(method) {
        return Err(bad("malformed method"));
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        v if v.len() == 8
            && v.starts_with("HTTP/")
            && v.as_bytes()[5].is_ascii_digit()
            && v.as_bytes()[6] == b'.'
            && v.as_bytes()[7].is_ascii_digit() =>
        {
            return Err(with_line(BadHead {
                status: 505,
                ..bad(format!("{v} is not supported: use HTTP/1.1 or HTTP/1.0"))
            }));
        }
        _ => return Err(with_line(bad("malformed HTTP version"))),
    };
    let origin = origin_form(target).ok_or_else(|| with_line(bad("malformed request target")))?;
    Ok((method.to_string(), origin, http11))
}

/// Parse a request head (without the blank line that ends it).
pub(crate) fn parse(head: &[u8]) -> Result<Head, BadHead> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let (method, target, http11) = request_line(lines.next().unwrap_or_default())?;
    let with_line = |mut b: BadHead| {
        b.method = method.clone();
        b.target = target.clone();
        b
    };
    let mut headers = Vec::new();
    for line in lines {
        if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
            return Err(with_line(bad("folded header line")));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| with_line(bad("header line without a colon")))?;
        let name = std::str::from_utf8(&line[..colon])
            .ok()
            .filter(|n| is_token(n))
            .ok_or_else(|| with_line(bad("malformed header name")))?;
        let value = &line[colon + 1..];
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(with_line(bad("control character in a header value")));
        }
        headers.push((
            name.to_ascii_lowercase(),
            String::from_utf8_lossy(value)
                .trim_matches([' ', '\t'])
                .to_string(),
        ));
    }
    // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host.
    let hosts = headers.iter().filter(|(n, _)| n == "host").count();
    if (http11 && hosts == 0) || hosts > 1 {
        return Err(with_line(bad(
            "an HTTP/1.1 request needs exactly one Host header",
        )));
    }
    Ok(Head {
        method,
        target,
        http11,
        headers,
        bytes: 0,
    })
}

/// The origin form (`/path?query`) of an origin-form or absolute-form
/// (`http://host:8080/path?query`) target; `None` for anything else
/// (`*`, authority form) or a target with characters a URI cannot hold.
fn origin_form(target: &str) -> Option<String> {
    if target
        .bytes()
        .any(|b| b.is_ascii_control() || b == b' ' || b == b'#')
    {
        return None;
    }
    if target.starts_with('/') {
        return Some(target.to_string());
    }
    let lower = target.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return None;
    }
    let after_scheme = &target[target.find("://")? + 3..];
    Some(match after_scheme.find(['/', '?']) {
        Some(i) if after_scheme[i..].starts_with('/') => after_scheme[i..].to_string(),
        Some(i) => format!("/{}", &after_scheme[i..]),
        None => "/".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    fn target_of(head: &str) -> Result<String, u16> {
        parse(head.as_bytes())
            .map(|h| h.target)
            .map_err(|b| b.status)
    }

    #[test]
    fn request_lines_and_targets_parse_as_rfc_9112_says() {
        assert_eq!(
            target_of("GET /healthz HTTP/1.1\r\nHost: x"),
            Ok("/healthz".into())
        );
        assert_eq!(
            target_of("GET /healthz?verbose HTTP/1.0"),
            Ok("/healthz?verbose".into())
        );
        assert_eq!(
            target_of("GET http://h:8080/metrics?a HTTP/1.1\nHost: h"),
            Ok("/metrics?a".into())
        );
        assert_eq!(
            target_of("GET http://h:8080 HTTP/1.1\nHost: h"),
            Ok("/".into())
        );
        assert_eq!(
            target_of("GET HTTP://h?a=b HTTP/1.1\nHost: h"),
            Ok("/?a=b".into())
        );
        assert_eq!(target_of("GET /healthz HTTP/2.0\r\nHost: x"), Err(505));
        for bad in [
            "GET /healthz HTTP/1.1", // no Host
            "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b",
            "GET  /healthz HTTP/1.1\r\nHost: x", // two spaces
            "GET /healthz\r\nHost: x",           // HTTP/0.9
            "GET healthz HTTP/1.1\r\nHost: x",
            "OPTIONS * HTTP/1.1\r\nHost: x",
            "G(T /healthz HTTP/1.1\r\nHost: x",
            "GET /healthz HTTP/1.1\r\nHost: x\r\n folded",
            "GET /healthz HTTP/1.1\r\nHost: x\r\nno colon",
            "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: v",
            "GET /healthz HTTP/1.1\r\nHost: x\r\nA: \x01",
            "GET /h\u{e9} HTTP/1.1\r\nHost: x",
            "GET /a#b HTTP/1.1\r\nHost: x",
            "\u{0}\u{1}garbage",
        ] {
            assert_eq!(target_of(bad), Err(400), "{bad:?}");
        }
    }

    #[test]
    fn fields_are_lower_cased_and_trimmed_and_keep_alive_follows_the_version() {
        let h = parse(b"PUT /x HTTP/1.1\r\nHost: h\r\nContent-Type:\t application/json \r\nConnection: Keep-Alive, Close").unwrap();
        assert_eq!(h.header("content-type"), Some("application/json"));
        assert!(!h.keep_alive());
        let h = parse(b"GET /x HTTP/1.0\r\nConnection: keep-alive").unwrap();
        assert!(h.keep_alive());
        assert!(!parse(b"GET /x HTTP/1.0").unwrap().keep_alive());
        assert!(parse(b"GET /x HTTP/1.1\nHost: h").unwrap().keep_alive());
    }

    /// A connected pair: the server side wrapped for `read_head`, the
    /// client side to write into.
    fn pair() -> (BufReader<TcpStream>, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (BufReader::new(l.accept().unwrap().0), client)
    }

    fn soon() -> Deadline {
        Deadline::from_now(Duration::from_secs(10))
    }

    #[test]
    fn a_head_ends_at_its_blank_line_and_leaves_the_body_unread() {
        let (mut server, mut client) = pair();
        client
            .write_all(b"\r\n\r\nPOST /a HTTP/1.1\nHost: h\n\nbody")
            .unwrap();
        let got = read_head(&mut server, 1024, &soon()).unwrap();
        let Incoming::Head(h) = got else {
            panic!("no head: {got:?}");
        };
        assert_eq!((h.method.as_str(), h.target.as_str()), ("POST", "/a"));
        assert_eq!(h.bytes, 4 + 17 + 8 + 1);
        let mut body = [0u8; 4];
        server.read_exact(&mut body).unwrap();
        assert_eq!(&body, b"body");
        assert_eq!(server.get_ref().read_timeout().unwrap(), None);
        drop(client);
        assert!(matches!(
            read_head(&mut server, 1024, &soon()).unwrap(),
            Incoming::Closed
        ));
    }

    #[test]
    fn a_head_over_the_limit_is_431_without_reading_further() {
        let (mut server, mut client) = pair();
        let long = format!(
            "GET /x HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n",
            "y".repeat(100)
        );
        client.write_all(long.as_bytes()).unwrap();
        let Incoming::Bad(b) = read_head(&mut server, 64, &soon()).unwrap() else {
            panic!("not refused");
        };
        assert_eq!((b.status, b.bytes), (431, 64));
        assert_eq!((b.method.as_str(), b.target.as_str()), ("GET", "/x"));
        assert!(b.reason.contains("64 bytes"), "{}", b.reason);
        // An endless run of blank lines counts too.
        let (mut server, mut client) = pair();
        client.write_all(&[b'\n'; 100]).unwrap();
        let Incoming::Bad(b) = read_head(&mut server, 64, &soon()).unwrap() else {
            panic!("not refused");
        };
        assert_eq!(b.status, 431);
    }

    #[test]
    fn a_bad_request_line_is_refused_as_soon_as_it_is_read() {
        // A TLS ClientHello to a plain-HTTP port: no blank line will come.
        let (mut server, mut client) = pair();
        client
            .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
            .unwrap();
        let got = read_head(&mut server, 1024, &soon()).unwrap();
        assert!(
            matches!(got, Incoming::Bad(BadHead { status: 400, .. })),
            "{got:?}"
        );
        // A request line that ends wrong is refused before any header.
        let (mut server, mut client) = pair();
        client.write_all(b"GET /x HTTP/2.0\r\nHost: h\r\n").unwrap();
        let got = read_head(&mut server, 1024, &soon()).unwrap();
        assert!(
            matches!(got, Incoming::Bad(BadHead { status: 505, .. })),
            "{got:?}"
        );
    }

    #[test]
    fn a_dripping_client_gets_no_more_time_than_the_deadline() {
        let (mut server, mut client) = pair();
        let t = Instant::now();
        let drip = std::thread::spawn(move || {
            for b in b"GET /x HTTP/1.1\r\nHost: h\r\nX: "
                .iter()
                .cycle()
                .take(400)
            {
                if client.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let err = read_head(
            &mut server,
            1 << 20,
            &Deadline::from_now(Duration::from_millis(300)),
        )
        .unwrap_err();
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{err}"
        );
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        drop(server);
        drip.join().unwrap();
    }
}
