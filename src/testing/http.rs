//! HTTP/1.1 on a blocking stream: request parsing (Content-Length and
//! chunked bodies, capped) and response writing (fixed-length or chunked).

use std::io::{self, BufRead, BufReader, Read, Write};

/// Largest request body accepted; larger ones get 413.
pub(crate) const MAX_BODY: usize = 1024 * 1024;
const MAX_LINE: usize = 16 * 1024;
const MAX_HEADERS: usize = 100;

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

fn bad(status: u16, message: impl Into<String>, bytes_in: u64) -> Incoming {
    Incoming::Bad {
        status,
        message: message.into(),
        method: String::new(),
        target: String::new(),
        bytes_in,
    }
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

/// Read the next request. I/O errors mean the connection is unusable.
pub(crate) fn read_request<S: Read + Write>(r: &mut BufReader<S>) -> io::Result<Incoming> {
    let mut n = 0u64;
    // RFC 9112 §2.2: ignore empty lines before the request line.
    let line = loop {
        match read_line(r, &mut n) {
            Ok(None) => return Ok(Incoming::Closed),
            Ok(Some(l)) if l.is_empty() => continue,
            Ok(Some(l)) => break l,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Ok(bad(414, "request line too long", n))
            }
            Err(e) => return Err(e),
        }
    };
    let line = String::from_utf8_lossy(&line).into_owned();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ok(bad(400, "malformed request line", n));
    };
    let (method, target) = (method.to_string(), target.to_string());
    let with_line = |status: u16, message: &str, n: u64| Incoming::Bad {
        status,
        message: message.to_string(),
        method: method.clone(),
        target: target.clone(),
        bytes_in: n,
    };
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Ok(with_line(505, "HTTP version not supported", n)),
    };
    if !target.starts_with('/') {
        return Ok(with_line(400, "request target must be a path", n));
    }

    let mut headers = Vec::new();
    loop {
        let l = match read_line(r, &mut n) {
            Ok(Some(l)) => l,
            Ok(None) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Ok(with_line(431, "request header too long", n))
            }
            Err(e) => return Err(e),
        };
        if l.is_empty() {
            break;
        }
        if headers.len() == MAX_HEADERS {
            return Ok(with_line(431, "too many request headers", n));
        }
        let l = String::from_utf8_lossy(&l);
        let Some((name, value)) = l.split_once(':') else {
            return Ok(with_line(400, "malformed header line", n));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(h, _)| h == name)
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let connection = header("connection").unwrap_or_default();
    let keep_alive = if http10 {
        connection.contains("keep-alive")
    } else {
        !connection.contains("close")
    };

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

    let (path, raw_query) = target.split_once('?').unwrap_or((&target, ""));
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
        method,
        target: target.clone(),
        segments,
        query,
        headers,
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

/// The bytes of `resp` with a Content-Length header.
pub(crate) fn encode_response(resp: &Response, close: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        resp.status,
        reason_phrase(resp.status)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn parse(raw: &[u8]) -> Incoming {
        read_request(&mut BufReader::new(Cursor::new(raw.to_vec()))).unwrap()
    }

    #[test]
    fn parses_chunked_body_and_query() {
        let raw = b"PUT /a/b%2Fc?x=1&fieldSelector=metadata.name%3Dl HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n";
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
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
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
