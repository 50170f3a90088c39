//! A recording API server and a logging proxy, for comparing what kubectl
//! and the crate send for the same kubeconfig: every request's method,
//! target and headers, answered with a Kubernetes 404 `Status`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

const SERVER_CERT: &[u8] = include_bytes!("../../fixtures/tls/server.pem");
const SERVER_KEY: &[u8] = include_bytes!("../../fixtures/tls/server-key.pem");
/// The CA of the client certificates the recorder asks for (optional).
const CLIENT_CA: &[u8] = include_bytes!("../../fixtures/tls/client-ca.pem");
/// The CA that signed the recorder's certificate (names 127.0.0.1, ::1, localhost).
pub const CA: &[u8] = include_bytes!("../../fixtures/tls/ca.pem");

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub target: String,
    /// Header names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// Over TLS: the server name the client sent (SNI).
    pub sni: Option<String>,
    /// Over TLS: the client certificate presented, DER.
    pub client_cert: Option<Vec<u8>>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `Authorization` and `Impersonate-*` headers, sorted: what decides
    /// who the server takes the request to be from.
    pub fn identity_headers(&self) -> Vec<(String, String)> {
        let mut h: Vec<_> = self
            .headers
            .iter()
            .filter(|(n, _)| n == "authorization" || n.starts_with("impersonate-"))
            .cloned()
            .collect();
        h.sort();
        h
    }
}

type Log = Arc<Mutex<Vec<Recorded>>>;

/// A server on `ip` (any loopback address), plain or TLS.
pub struct Recorder {
    pub url: String,
    log: Log,
    /// Connections accepted, whether or not a request followed: a client
    /// that refused the certificate still shows it came.
    accepted: Arc<AtomicUsize>,
}

impl Recorder {
    pub fn start(ip: &str, tls: bool) -> Recorder {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Log = Arc::default();
        let config = tls.then(server_config);
        let l = log.clone();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let (l, config) = (l.clone(), config.clone());
                thread::spawn(move || serve(conn, config, &l));
            }
        });
        let scheme = if tls { "https" } else { "http" };
        Recorder {
            url: format!("{scheme}://{addr}"),
            log,
            accepted,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }

    /// Connections accepted since the last [`clear`](Self::clear).
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn clear(&self) {
        self.log.lock().unwrap().clear();
        self.accepted.store(0, Ordering::SeqCst);
    }
}

fn server_config() -> Arc<rustls::ServerConfig> {
    let certs = CertificateDer::pem_slice_iter(SERVER_CERT)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(CLIENT_CA) {
        roots.add(ca.unwrap()).unwrap();
    }
    // Client certificates are asked for, not required: the log says who
    // presented one.
    let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .unwrap();
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(clients)
            .with_single_cert(certs, key)
            .unwrap(),
    )
}

fn serve(conn: TcpStream, tls: Option<Arc<rustls::ServerConfig>>, log: &Log) {
    match tls {
        None => answer(conn, log, (None, None)),
        Some(cfg) => {
            let Ok(session) = rustls::ServerConnection::new(cfg) else {
                return;
            };
            let mut stream = rustls::StreamOwned::new(session, conn);
            while stream.conn.is_handshaking() {
                if stream.conn.complete_io(&mut stream.sock).is_err() {
                    return;
                }
            }
            let sni = stream.conn.server_name().map(str::to_string);
            let cert = stream
                .conn
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.to_vec());
            answer(stream, log, (sni, cert))
        }
    }
}

/// Read one request head (and body), record it with what TLS said
/// (`tls`: SNI, client certificate), answer 404, close.
fn answer(stream: impl Read + Write, log: &Log, tls: (Option<String>, Option<Vec<u8>>)) {
    let mut r = BufReader::new(stream);
    let Some((method, target, headers)) = read_head(&mut r) else {
        return;
    };
    let len = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    log.lock().unwrap().push(Recorded {
        method,
        target,
        headers,
        sni: tls.0,
        client_cert: tls.1,
    });
    let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"not found","reason":"NotFound","code":404}"#;
    let resp = format!(
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let s = r.get_mut();
    let _ = s.write_all(resp.as_bytes());
    let _ = s.flush();
}

/// Method, target and headers of one request head.
type Head = (String, String, Vec<(String, String)>);

fn read_head(r: &mut impl BufRead) -> Option<Head> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':')?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    Some((method, target, headers))
}

/// An HTTP proxy that logs each request it is asked to carry (`CONNECT
/// host:port`, or an absolute-form `GET http://...`) and carries it.
pub struct LoggingProxy {
    pub url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl LoggingProxy {
    pub fn start() -> LoggingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let l = log.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let l = l.clone();
                thread::spawn(move || carry(conn, &l));
            }
        });
        LoggingProxy {
            url: format!("http://{addr}"),
            log,
        }
    }

    pub fn clear(&self) {
        self.log.lock().unwrap().clear();
    }

    /// `"CONNECT host:port"` or `"GET http://host:port/path"`, in order.
    pub fn carried(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn carry(client: TcpStream, log: &Arc<Mutex<Vec<String>>>) {
    let mut r = BufReader::new(client.try_clone().unwrap());
    let Some((method, target, headers)) = read_head(&mut r) else {
        return;
    };
    log.lock().unwrap().push(format!("{method} {target}"));
    let mut client = client;
    if method == "CONNECT" {
        let Ok(upstream) = TcpStream::connect(&target) else {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
            return;
        };
        let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        pipe(r, client, upstream);
        return;
    }
    // Absolute form: http://host:port/path
    let Some(rest) = target.strip_prefix("http://") else {
        return;
    };
    let (hostport, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let Ok(mut upstream) = TcpStream::connect(hostport) else {
        return;
    };
    let mut head = format!(
        "{method} {} HTTP/1.1\r\n",
        if path.is_empty() { "/" } else { path }
    );
    for (n, v) in &headers {
        if !n.starts_with("proxy-") {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    if upstream.write_all(head.as_bytes()).is_err() {
        return;
    }
    pipe(r, client, upstream);
}

/// Copy both ways until either side closes.
fn pipe(mut from_client: BufReader<TcpStream>, mut client: TcpStream, upstream: TcpStream) {
    let mut up_w = upstream.try_clone().unwrap();
    let t = thread::spawn(move || {
        let buffered = from_client.buffer().to_vec();
        let _ = up_w.write_all(&buffered);
        let n = buffered.len();
        from_client.consume(n);
        let _ = std::io::copy(&mut from_client.into_inner(), &mut up_w);
        let _ = up_w.shutdown(Shutdown::Write);
    });
    let mut up_r = upstream;
    let _ = std::io::copy(&mut up_r, &mut client);
    let _ = client.shutdown(Shutdown::Both);
    let _ = t.join();
}
