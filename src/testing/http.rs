//! HTTP/1.1 on a blocking stream: the request head through the shared
//! server core (`crate::http_server`), then the body (Content-Length and
//! chunked, capped), and response writing (fixed-length or chunked).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::time::Duration;

use crate::deadline::Deadline;
use crate::http_server::{self, Transport};

/// Largest request body accepted; larger ones get 413.
pub(crate) const MAX_BODY: usize = 1024 * 1024;
/// Largest request head (request line and header fields): kube-apiserver's
/// `MaxHeaderBytes`; larger ones get 431.
pub(crate) const MAX_HEAD: usize = 1024 * 1024;
/// Time for a whole request head: kube-apiserver's `ReadHeaderTimeout`,
/// counted from the accept for a connection's first request (settled on
/// kube-apiserver 1.37.2: a connection that sends nothing, or only the TLS
/// handshake, or half a head, is closed 32 s after the connect) and from
/// the first byte for a later one.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(32);
/// How long a keep-alive connection waits for its next request by default:
/// kube-apiserver's `IdleTimeout` (1.37.2 closes one 90 s after the end of
/// its last answer).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Longest line of a chunked body's framing (chunk size and extensions,
/// trailer fields).
const MAX_LINE: usize = 16 * 1024;

/// A parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// Target as sent: path and query.
    pub(crate) target: String,
    /// Percent-decoded path segments, without empty ones.
    pub(crate) segments: Vec<String>,
    /// Percent-decoded query pairs.
    pub(crate) query: Vec<(String, String)>,
    /// Header names lower-cased.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// Bytes read for this request.
    pub(crate) bytes_in: u64,
    /// The client wants the connection kept open afterwards.
    pub(crate) keep_alive: bool,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What reading the next request produced.
#[derive(Debug)]
pub(crate) enum Incoming {
    Request(Request),
    /// The peer closed the connection between requests.
    Closed,
    /// Unanswerable as a request: answer `status` with `message`, then close.
    Bad {
        status: u16,
        message: String,
        /// Method and target, when the request line was readable.
        method: String,
        target: String,
        bytes_in: u64,
    },
}

/// Read one line (up to `\n`) of at most `MAX_LINE` bytes. `Ok(None)` at EOF
/// before any byte; an error if the line is too long or cut short.
fn read_line(r: &mut impl BufRead, count: &mut u64) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        *count += take as u64;
        if line.len() > MAX_LINE {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"));
        }
        if done {
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            return Ok(Some(line));
        }
    }
}

/// Read the next request: its head by `deadline`, then its body. I/O
/// errors mean the connection is unusable.
pub(crate) fn read_request<S: Transport + Write>(
    r: &mut BufReader<S>,
    deadline: &Deadline,
) -> io::Result<Incoming> {
    let head = match http_server::read_head(r, MAX_HEAD, deadline)? {
        http_server::Incoming::Head(head) => head,
        http_server::Incoming::Closed => return Ok(Incoming::Closed),
        http_server::Incoming::Bad(b) => {
            return Ok(Incoming::Bad {
                status: b.status,
                message: b.reason,
                method: b.method,
                target: b.target,
                bytes_in: b.bytes,
            })
        }
    };
    let mut n = head.bytes;
    let with_line = |status: u16, message: &str, n: u64| Incoming::Bad {
        status,
        message: message.to_string(),
        method: head.method.clone(),
        target: head.target.clone(),
        bytes_in: n,
    };
    let header = |name: &str| head.header(name).map(str::to_ascii_lowercase);
    let chunked = header("transfer-encoding").is_some_and(|te| te.contains("chunked"));
    let length = match header("content-length") {
        Some(v) if !chunked => match v.parse::<usize>() {
            Ok(len) => len,
            Err(_) => return Ok(with_line(400, "invalid Content-Length", n)),
        },
        _ => 0,
    };
    if length > MAX_BODY {
        return Ok(with_line(413, "", n));
    }
    if header("expect").is_some_and(|e| e == "100-continue") && (chunked || length > 0) {
        let w = r.get_mut();
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        w.flush()?;
    }
    let body = if chunked {
        match read_chunked(r, &mut n)? {
            Some(body) => body,
            None => return Ok(with_line(413, "", n)),
        }
    } else {
        let mut body = vec![0; length];
        r.read_exact(&mut body)?;
        n += length as u64;
        body
    };

    let keep_alive = head.keep_alive();
    let (path, raw_query) = head.target.split_once('?').unwrap_or((&head.target, ""));
    let segments = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let query = raw_query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    Ok(Incoming::Request(Request {
        method: head.method,
        target: head.target,
        segments,
        query,
        headers: head.headers,
        body,
        bytes_in: n,
        keep_alive,
    }))
}

/// A chunked body, or `None` when it exceeds [`MAX_BODY`].
fn read_chunked(r: &mut impl BufRead, n: &mut u64) -> io::Result<Option<Vec<u8>>> {
    let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let mut body = Vec::new();
    loop {
        let line = read_line(r, n)?.ok_or(io::ErrorKind::UnexpectedEof)?;
        let line = String::from_utf8_lossy(&line);
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_line(r, n)?
                .ok_or(io::ErrorKind::UnexpectedEof)?
                .is_empty()
            {}
            return Ok(Some(body));
        }
        if body.len() + size > MAX_BODY {
            return Ok(None);
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        *n += size as u64;
        let crlf = read_line(r, n)?.ok_or(io::ErrorKind::UnexpectedEof)?;
        if !crlf.is_empty() {
            return Err(invalid("chunk not followed by CRLF"));
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Decode `%XX` escapes (and `+` as space, as in form-encoded queries).
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A complete response with a fixed-length body.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    pub(crate) fn json(status: u16, body: Vec<u8>) -> Self {
        Response {
            status,
            headers: vec![("Content-Type", "application/json".to_string())],
            body,
        }
    }
}

/// The bytes of `resp` with a Content-Length header.
pub(crate) fn encode_response(resp: &Response, close: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        resp.status,
        http_server::reason_phrase(resp.status)
    );
    for (name, value) in &resp.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n", resp.body.len()));
    if close {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&resp.body);
    bytes
}

/// Write already encoded bytes and flush them.
pub(crate) fn send(w: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    w.write_all(bytes)?;
    w.flush()
}

/// The last chunk of a chunked body with an empty trailer section.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Start a chunked 200 response; returns the bytes written.
pub(crate) fn write_chunked_head(w: &mut impl Write) -> io::Result<u64> {
    let head =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    w.write_all(head)?;
    w.flush()?;
    Ok(head.len() as u64)
}

/// Write `data` as one chunk and flush it; empty `data` ends the body.
pub(crate) fn write_chunk(w: &mut impl Write, data: &[u8]) -> io::Result<u64> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    w.write_all(&out)?;
    w.flush()?;
    Ok(out.len() as u64)
}

/// `raw` read as a request over a loopback connection, for unit tests.
#[cfg(test)]
pub(crate) fn parse_raw(raw: &[u8]) -> Incoming {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    client.write_all(raw).unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    read_request(
        &mut BufReader::new(server),
        &Deadline::from_now(HEAD_TIMEOUT),
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &[u8]) -> Incoming {
        parse_raw(raw)
    }

    #[test]
    fn parses_chunked_body_and_query() {
        let raw = b"PUT /a/b%2Fc?x=1&fieldSelector=metadata.name%3Dl HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n";
        let Incoming::Request(r) = parse(raw) else {
            panic!()
        };
        assert_eq!(r.body, b"abcde");
        assert_eq!(r.segments, ["a", "b/c"]);
        assert_eq!(r.query("fieldSelector"), Some("metadata.name=l"));
        assert_eq!(r.bytes_in, raw.len() as u64);
        assert!(r.keep_alive);
    }

    #[test]
    fn caps_bodies() {
        let raw = format!(
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert!(matches!(
            parse(raw.as_bytes()),
            Incoming::Bad { status: 413, .. }
        ));
    }

    #[test]
    fn percent_decoding_keeps_bad_escapes() {
        assert_eq!(percent_decode("a%3Db%2"), "a=b%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }

    #[test]
    fn writes_final_chunk() {
        let mut out = Vec::new();
        write_chunk(&mut out, b"").unwrap();
        assert_eq!(out, b"0\r\n\r\n");
    }
}
