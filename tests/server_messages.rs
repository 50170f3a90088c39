//! What an operator reads when the API server cannot be used: our words,
//! the server's URL, and a hint that is true for the case (issue 19,
//! point 5). Each case over real sockets on loopback.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use lease_elector::status::FailureKind;
use lease_elector::testing::{Fault, TestApiServer};
use lease_elector::{Client, ClientConfig, Deadline, Error};

const NS: &str = "test";

fn get(client: &Client) -> Error {
    client
        .get_lease(NS, "l", &Deadline::from_now(Duration::from_secs(10)))
        .unwrap_err()
}

#[test]
fn a_hung_server_is_no_answer_from_its_url_within_the_budget() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    server.inject(Fault::hang());
    let client =
        Client::new(ClientConfig::new(server.url()).timeout(Duration::from_secs(1))).unwrap();
    let err = get(&client);
    assert_eq!(
        err.to_string(),
        format!(
            "get lease test/l: no answer from the API server at {} within 1 s",
            server.url()
        )
    );
    assert!(err.is_transport());
    assert_eq!(FailureKind::of(&err), FailureKind::Transport);
    assert_eq!(
        FailureKind::hint_for(&err, NS),
        format!(
            "check that {} is reachable from here (address, port, firewall, proxy)",
            server.url()
        )
    );
    server.clear_faults();
    server.shutdown();
}

#[test]
fn plain_http_to_a_tls_server_says_to_use_https() {
    let server = TestApiServer::builder().tls(true).build().unwrap();
    server.add_namespace(NS);
    let https = server.url();
    let http = https.replace("https://", "http://");
    let client = Client::new(ClientConfig::new(&http)).unwrap();
    let err = get(&client);
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "get lease test/l: the server at {http} did not answer in HTTP"
        )),
        "{text}"
    );
    assert!(text.ends_with(&format!("use {https}")), "{text}");
    assert!(!text.contains("http parse fail"), "{text}");
    assert_eq!(FailureKind::of(&err), FailureKind::Transport);
    let hint = FailureKind::hint_for(&err, NS);
    assert_eq!(
        hint,
        format!("the server speaks TLS: use https:// in the server URL ({http})")
    );
    server.shutdown();
}

/// A server on loopback that reads each request's head and writes
/// `answer`, as it is, whatever was asked.
fn answering(answer: &'static [u8]) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let mut w = conn;
            let _ = w.write_all(answer);
        }
    });
    addr
}

#[test]
fn go_s_answer_to_plain_http_on_a_tls_port_gets_the_https_hint_too() {
    // What kube-apiserver (Go's crypto/tls) writes back to a plain-HTTP
    // request before closing.
    let addr = answering(
        b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
    );
    let client = Client::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let err = get(&client);
    assert!(err.to_string().contains("400"), "{err}");
    assert_eq!(
        FailureKind::hint_for(&err, NS),
        "the server speaks TLS: use https:// in the server URL"
    );
}

/// An HTTP answer the client cannot parse for another reason than a TLS
/// record where the status line should be (a control character in a
/// header) is not blamed on TLS: the hint to use `https://` would send an
/// operator the wrong way.
#[test]
fn a_malformed_http_answer_is_not_taken_for_tls() {
    let addr = answering(b"HTTP/1.1 200 OK\r\nX-Bad: a\x1b[2Jb\x00\r\nContent-Length: 2\r\n\r\n{}");
    let client = Client::new(ClientConfig::new(format!("http://{addr}"))).unwrap();
    let err = get(&client);
    let hint = FailureKind::hint_for(&err, NS);
    assert!(!hint.contains("TLS"), "{err}: {hint}");
    assert!(!err.to_string().contains('\u{1b}'), "{err}");
}

#[test]
fn a_refused_connection_names_the_server() {
    let url = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let client = Client::new(ClientConfig::new(&url)).unwrap();
    let err = get(&client);
    assert_eq!(
        err.to_string(),
        format!("get lease test/l: no answer from the API server at {url}: connection refused")
    );
    assert!(
        FailureKind::hint_for(&err, NS).starts_with(&format!("check that {url} is reachable")),
        "{}",
        FailureKind::hint_for(&err, NS)
    );
    // The HTTP library's error stays reachable.
    let mut source = std::error::Error::source(&err);
    let mut depth = 0;
    while let Some(s) = source {
        depth += 1;
        source = s.source();
    }
    assert!(depth >= 2, "our words, then ureq's error");
}

#[test]
fn a_tls_failure_names_the_server_and_keeps_the_ca_hint() {
    let server = TestApiServer::builder().tls(true).build().unwrap();
    server.add_namespace(NS);
    // A CA that did not sign the server's certificate.
    let other_ca = include_bytes!("../fixtures/tls/client-ca.pem");
    let client = Client::new(ClientConfig::new(server.url()).ca_pem(other_ca.to_vec())).unwrap();
    let err = get(&client);
    assert!(
        err.to_string().contains(&format!(
            "no answer from the API server at {}",
            server.url()
        )),
        "{err}"
    );
    assert_eq!(FailureKind::of(&err), FailureKind::Tls);
    assert!(
        FailureKind::hint_for(&err, NS).starts_with("check the CA bundle"),
        "{}",
        FailureKind::hint_for(&err, NS)
    );
    server.shutdown();
}

#[test]
fn an_unreadable_token_file_hint_names_the_file() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let missing = std::env::temp_dir().join(format!("no-such-token-{}", std::process::id()));
    // Client::new reads the token file first: the error comes from there.
    let err = Client::new(ClientConfig::new(server.url()).token_file(&missing)).unwrap_err();
    let hint = FailureKind::hint_for(&err, NS);
    assert!(
        hint.contains(&missing.display().to_string()) && hint.contains("exists and is readable"),
        "{hint}"
    );
    server.shutdown();
}

#[test]
fn a_server_url_with_credentials_is_shown_without_them() {
    let url = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let client = Client::new(ClientConfig::new(format!("http://bob:B4seS3cret@{url}"))).unwrap();
    assert!(!format!("{client:?}").contains("B4seS3cret"));
    let err = get(&client);
    assert!(!err.to_string().contains("B4seS3cret"), "{err}");
    assert!(!FailureKind::hint_for(&err, NS).contains("B4seS3cret"));
}

#[test]
fn https_to_a_plain_http_server_says_so() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace(NS);
    let url = server.url().replace("http://", "https://");
    let client = Client::new(ClientConfig::new(&url).ca_pem(server.ca_pem().to_vec())).unwrap();
    let err = get(&client);
    assert_eq!(
        err.to_string(),
        format!("get lease test/l: the server at {url} did not answer in TLS: it serves plain HTTP on that port")
    );
    assert_eq!(
        FailureKind::hint_for(&err, NS),
        format!("the server at {url} does not speak TLS on that port: check the port, or use http:// for a plain-HTTP server")
    );
    server.shutdown();
}
