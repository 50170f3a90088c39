//! No credential reaches an error, a `Debug` dump or a log line: proxy
//! passwords are cut out of every URL shown, and a logger at trace level
//! that keeps the `ureq` and `ureq_proto` targets below trace (the README's
//! rule for library users) sees neither the bearer token nor the proxy
//! password during a whole term.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::recorder::LoggingProxy;
use common::{timings, Cluster, LEASE, NS};
use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, LeaseLock};

const PASSWORD: &str = "Pr0xyS3cret";
const TOKEN: &str = "T0kenS3cret-4a7f";
/// base64("alice:Pr0xyS3cret"), as sent in `Proxy-Authorization`.
const PROXY_BASIC: &str = "YWxpY2U6UHIweHlTM2NyZXQ=";

fn assert_secret_free(what: &str, text: &str) {
    for secret in [PASSWORD, TOKEN, PROXY_BASIC] {
        assert!(!text.contains(secret), "{what} shows a secret: {text}");
    }
}

#[test]
fn a_refused_socks_proxy_is_named_without_its_password() {
    let cfg = ClientConfig::new("http://127.0.0.1:1")
        .proxy(format!("socks5://alice:{PASSWORD}@127.0.0.1:1080"));
    assert_secret_free("ClientConfig's Debug", &format!("{cfg:?}"));
    let err = Client::new(cfg).unwrap_err();
    assert!(
        err.to_string()
            .contains("proxy socks5://***@127.0.0.1:1080"),
        "{err}"
    );
    assert_secret_free("the error", &err.to_string());
    assert_secret_free("the error's Debug", &format!("{err:?}"));
}

#[test]
fn an_unparsable_proxy_url_is_named_without_its_password() {
    let cfg = ClientConfig::new("http://127.0.0.1:1")
        .proxy(format!("http://alice:{PASSWORD}@127.0.0.1:1 /x"));
    assert_secret_free("ClientConfig's Debug", &format!("{cfg:?}"));
    let err = Client::new(cfg).unwrap_err();
    assert!(
        err.to_string().contains("http://***@127.0.0.1:1 /x"),
        "{err}"
    );
    assert_secret_free("the error", &err.to_string());
    assert_secret_free("the error's Debug", &format!("{err:?}"));
}

/// A `/`, `?` or `#` in a password that is not percent-encoded makes the
/// URL invalid, and the authority seems to end at that character: what
/// follows it up to the `@` is the rest of the password. A server URL
/// with credentials is shown without them in every error and `Debug`
/// (`https` without a CA is refused naming the URL).
#[test]
fn a_password_holding_a_slash_is_cut_out_of_the_url_too() {
    for sep in ["", "/", "?", "#"] {
        let password = format!("Pr0xy{sep}S3cret");
        let proxy = ClientConfig::new("http://127.0.0.1:1")
            .proxy(format!("socks5://alice:{password}@127.0.0.1:1080"));
        let server = ClientConfig::new(format!("https://alice:{password}@127.0.0.1:6443"));
        for cfg in [proxy, server] {
            let debug = format!("{cfg:?}");
            assert!(
                !debug.contains("Pr0xy") && !debug.contains("S3cret"),
                "Debug shows the password: {debug}"
            );
            let err = Client::new(cfg).unwrap_err().to_string();
            assert!(
                !err.contains("Pr0xy") && !err.contains("S3cret"),
                "the error shows the password: {err}"
            );
            assert!(err.contains("://***@127.0.0.1:"), "{err}");
        }
    }
}

#[test]
fn a_kubeconfig_proxy_password_stays_out_of_debug_output() {
    let dir = common::tempdir::TempDir::new();
    let path = dir.write(
        "config",
        format!(
            r#"
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: http://127.0.0.1:1
    proxy-url: http://alice:{PASSWORD}@127.0.0.1:3128
contexts:
- name: x
  context: {{cluster: c, user: u}}
users:
- name: u
  user: {{}}
current-context: x
"#
        ),
    );
    let cfg = ClientConfig::from_kubeconfig(&path, None).unwrap();
    assert_secret_free("ClientConfig's Debug", &format!("{cfg:?}"));
    let client = Client::new(cfg).unwrap();
    assert_secret_free("Client's Debug", &format!("{client:?}"));
}

/// Every record of this test binary at every level, except the `ureq*`
/// targets at trace, which are only counted: what the README tells library
/// users to do.
struct Logs {
    kept: Mutex<Vec<String>>,
    ureq_trace: AtomicUsize,
}

fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    static INSTALLED: OnceLock<()> = OnceLock::new();
    let state = LOGS.get_or_init(|| Logs {
        kept: Mutex::new(Vec::new()),
        ureq_trace: AtomicUsize::new(0),
    });
    INSTALLED.get_or_init(|| {
        struct Capture;
        impl log::Log for Capture {
            fn enabled(&self, _: &log::Metadata) -> bool {
                true
            }
            fn log(&self, r: &log::Record) {
                let logs = logs();
                if r.target().starts_with("ureq") && r.level() == log::Level::Trace {
                    logs.ureq_trace.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let line = format!("{} {} {}", r.level(), r.target(), r.args());
                logs.kept.lock().unwrap().push(line);
            }
            fn flush(&self) {}
        }
        static CAPTURE: Capture = Capture;
        let _ = log::set_logger(&CAPTURE);
        log::set_max_level(log::LevelFilter::Trace);
    });
    state
}

#[test]
fn a_trace_logger_that_keeps_ureq_below_trace_sees_no_token_and_no_proxy_password() {
    let logs = logs();
    let server = TestApiServer::builder().tokens(&[TOKEN]).build().unwrap();
    server.add_namespace(NS);
    let proxy = LoggingProxy::start();
    let through = proxy
        .url
        .replace("http://", &format!("http://alice:{PASSWORD}@"));
    let client = Client::new(
        ClientConfig::new(server.url())
            .token(TOKEN)
            .proxy(through)
            .timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let mut c = Cluster::with_server(server);
    c.add_lock("me", LeaseLock::new(client, NS, LEASE, "me"), timings());
    c.step_until(Duration::from_secs(2), Duration::from_secs(20), |c| {
        c.leaders() == ["me"]
    });
    c.step(Duration::from_secs(2));
    c.stop(0);
    assert!(
        !proxy.carried().is_empty(),
        "the requests went through the proxy"
    );
    assert_eq!(c.holder(), "", "a full term: acquired, renewed, released");
    assert!(
        logs.ureq_trace.load(Ordering::Relaxed) > 0,
        "trace was on: ureq logged at trace, and the rule kept it out"
    );
    let kept = logs.kept.lock().unwrap();
    assert!(
        kept.iter().any(|l| l.contains("lease_elector")),
        "the crate's own records were kept"
    );
    for line in kept.iter() {
        assert_secret_free("a log line", line);
    }
}
