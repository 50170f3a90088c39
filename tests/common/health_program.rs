//! The program with a health endpoint (`docs/in-cluster-health.rs`, built
//! as `examples/in_cluster_health.rs`) run as a user runs it outside a
//! cluster: `KUBECONFIG` names the embedded API server (TLS and a bearer
//! token), and its endpoint listens on a port of loopback the system picks
//! (`HEALTH_ADDR=127.0.0.1:0`), which its log line names.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use lease_elector::testing::TestApiServer;

use super::spawned::Spawned;
use super::tempdir::TempDir;
use super::{eventually, example};

pub const TOKEN: &str = "He4lth-T0ken-51ab";
/// The Lease the program elects on.
pub const LEASE: &str = "my-operator";

/// An API server for the program: TLS, one accepted token.
pub fn api_server() -> TestApiServer {
    TestApiServer::builder()
        .tls(true)
        .tokens(&[TOKEN])
        .build()
        .unwrap()
}

pub struct HealthProgram {
    pub process: Spawned,
    /// `host:port` of its health endpoint.
    pub addr: String,
    _dir: TempDir,
}

impl HealthProgram {
    /// Start it against `server` and wait for its health endpoint.
    pub fn start(server: &TestApiServer) -> HealthProgram {
        let dir = TempDir::new();
        let kubeconfig = dir.0.join("kubeconfig");
        server.write_kubeconfig(&kubeconfig, Some(TOKEN)).unwrap();
        let process = Spawned::start(
            Command::new(example("in_cluster_health"))
                .env("KUBECONFIG", &kubeconfig)
                .env("HEALTH_ADDR", "127.0.0.1:0")
                .env("RUST_LOG", "info"),
            true,
        );
        let marker = "health endpoint on http://";
        eventually("the health endpoint's log line", || {
            process.log().contains(marker)
        });
        let log = process.log();
        let addr = log
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap()
            .to_string();
        HealthProgram {
            process,
            addr,
            _dir: dir,
        }
    }

    /// Wait until it works as the leader (its first step).
    pub fn wait_leading(&self) {
        eventually("the first step of the work", || {
            self.process.log().contains("leading with token ")
        });
    }

    /// `GET path` over HTTP: the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(&self.addr, path)
    }

    /// SIGTERM, and its exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        self.process.signal("-TERM");
        self.process.exit_code()
    }

    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// One `GET` on a connection of its own; the server closes after answering.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: probe\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let status = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}
