//! kubeconfig `exec` credential plugins, run for real: a shell script that
//! prints an `ExecCredential`, against the embedded API server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_elector::lease::MicroTime;
use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, Clock, Deadline, Error, ManualClock};
use serde_json::json;

mod common;

use common::tempdir::TempDir;
use common::RawLeases;

const API_VERSION: &str = "client.authentication.k8s.io/v1";

/// A kubeconfig for `server` whose user runs `command` (relative to the
/// kubeconfig's folder when it has a `/`), with `PLUGIN_DIR` set.
fn kubeconfig(dir: &TempDir, server: &TestApiServer, command: &str) -> PathBuf {
    let cluster = if server.url().starts_with("https") {
        dir.write("ca.pem", server.ca_pem());
        "    certificate-authority: ca.pem\n"
    } else {
        ""
    };
    dir.write(
        "config",
        format!(
            "apiVersion: v1
clusters:
- cluster:
    server: {url}
{cluster}  name: c
contexts:
- context: {{cluster: c, user: u, namespace: ns}}
  name: x
current-context: x
users:
- name: u
  user:
    exec:
      apiVersion: {API_VERSION}
      command: {command}
      args: [--flag, value]
      env:
      - name: PLUGIN_DIR
        value: {plugin_dir}
      interactiveMode: Never
      provideClusterInfo: true
",
            url = server.url(),
            plugin_dir = dir.0.display(),
        ),
    )
}

/// Prints the token in `$PLUGIN_DIR/token` with the expiry in
/// `$PLUGIN_DIR/expiry` (if any); logs each run, its arguments and the
/// `KUBERNETES_EXEC_INFO` it was given.
const TOKEN_PLUGIN: &str = r#"echo "$@" >> "$PLUGIN_DIR/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$PLUGIN_DIR/info"
exp=$(cat "$PLUGIN_DIR/expiry" 2>/dev/null)
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"%s}}\n' \
  "$(cat "$PLUGIN_DIR/token")" "${exp:+,\"expirationTimestamp\":\"$exp\"}""#;

/// Credentials are used only over TLS, as kubectl uses them.
fn tls_server(token: &str) -> TestApiServer {
    let server = TestApiServer::builder()
        .tls(true)
        .tokens(&[token])
        .build()
        .unwrap();
    server.add_namespace("ns");
    server
}

/// A client whose kubeconfig runs `dir/plugin.sh`, with this time-out.
fn plugin_client(dir: &TempDir, server: &TestApiServer, timeout: Duration) -> Client {
    let plugin = dir.0.join("plugin.sh").display().to_string();
    let config = ClientConfig::from_kubeconfig(kubeconfig(dir, server, &plugin), None)
        .unwrap()
        .timeout(timeout);
    Client::new(config).unwrap()
}

fn get(client: &Client) -> lease_elector::Result<()> {
    client
        .get_lease("ns", "probe", &Deadline::from_now(Duration::from_secs(5)))
        .map(|_| ())
}

#[test]
fn token_is_cached_and_renewed_after_a_401_and_at_expiry() {
    let server = tls_server("t1");
    server.put_value(
        "ns",
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "probe"}}),
    );
    let dir = TempDir::new();
    dir.script("plugin.sh", TOKEN_PLUGIN);
    dir.write("token", "t1");
    let path = kubeconfig(&dir, &server, "./plugin.sh");
    let clock = ManualClock::new();
    let config = ClientConfig::from_kubeconfig(&path, None)
        .unwrap()
        .clock(Arc::new(clock.clone()));
    assert!(!format!("{config:?}").contains("t1"));
    let client = Client::new(config).unwrap();
    let runs = || dir.read("runs").lines().count();

    get(&client).unwrap();
    get(&client).unwrap();
    assert_eq!(runs(), 1, "the token is cached");
    assert_eq!(dir.read("runs").trim(), "--flag value");
    let info: serde_json::Value = serde_json::from_str(&dir.read("info")).unwrap();
    assert_eq!(info["apiVersion"], API_VERSION);
    assert_eq!(info["kind"], "ExecCredential");
    assert_eq!(info["spec"]["interactive"], false);
    assert_eq!(info["spec"]["cluster"]["server"], server.url().as_str());

    // Revoked: the 401 makes the client run the plugin again.
    dir.write("token", "t2");
    server.set_tokens(&["t2"]);
    get(&client).unwrap();
    assert_eq!(runs(), 2);

    // A token with an expiry is used until then, and not after.
    let expiry = MicroTime::from_system_time(clock.system_time() + Duration::from_secs(60));
    dir.write("token", "t3");
    dir.write("expiry", expiry.to_string());
    server.set_tokens(&["t3"]);
    get(&client).unwrap();
    assert_eq!(runs(), 3);
    dir.write("token", "t4");
    server.set_tokens(&["t3", "t4"]);
    clock.advance(Duration::from_secs(59));
    get(&client).unwrap();
    assert_eq!(runs(), 3, "still valid");
    clock.advance(Duration::from_secs(2));
    get(&client).unwrap();
    assert_eq!(runs(), 4, "expired: run again without waiting for a 401");
}

#[test]
fn plugin_failures_are_errors_that_name_the_plugin() {
    let server = tls_server("t");
    let cases = [
        (
            "echo 'token expired, run aws sso login' >&2; exit 1",
            "failed (exit status: 1)",
        ),
        ("echo not json", "not an ExecCredential"),
        (
            r#"echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}'"#,
            "answered apiVersion \"client.authentication.k8s.io/v1beta1\"",
        ),
        (
            r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"x","clientKeyData":"y"}}'"#,
            "only tokens are supported",
        ),
        (
            r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"soon"}}'"#,
            "expirationTimestamp \"soon\"",
        ),
    ];
    for (body, want) in cases {
        let dir = TempDir::new();
        dir.script("plugin.sh", body);
        let path = kubeconfig(&dir, &server, "./plugin.sh");
        let client = Client::new(ClientConfig::from_kubeconfig(&path, None).unwrap()).unwrap();
        let err = get(&client).unwrap_err();
        assert!(matches!(err, Error::InvalidCredentials { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("exec plugin") && msg.contains(want),
            "{body}: {msg}"
        );
    }

    let dir = TempDir::new();
    let path = kubeconfig(&dir, &server, "./no-such-plugin");
    let client = Client::new(ClientConfig::from_kubeconfig(&path, None).unwrap()).unwrap();
    let msg = get(&client).unwrap_err().to_string();
    assert!(msg.contains("cannot run it"), "{msg}");
}

/// A plugin that never answers (here a shell whose child keeps its stdout
/// open) costs the request's time budget, not the caller's liveness.
#[test]
fn hung_plugin_is_killed_within_the_request_budget() {
    let server = tls_server("t");
    let dir = TempDir::new();
    dir.script("plugin.sh", "sleep 30; echo late");
    let client = plugin_client(&dir, &server, Duration::from_millis(500));
    let began = Instant::now();
    let msg = get(&client).unwrap_err().to_string();
    assert!(msg.contains("no answer within"), "{msg}");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
}

/// A slow plugin run started by one request (a watch or Events thread,
/// with a long budget) must not hold another request (the renew, with a
/// short one) past its own deadline; and both wait for the same run: the
/// plugin runs once.
#[test]
fn a_slow_plugin_run_is_shared_and_each_waiter_keeps_its_own_deadline() {
    let server = tls_server("t1");
    let dir = TempDir::new();
    dir.write("token", "t1");
    dir.script(
        "plugin.sh",
        &format!("echo >> \"$PLUGIN_DIR/started\"\nsleep 2\n{TOKEN_PLUGIN}"),
    );
    let client = plugin_client(&dir, &server, Duration::from_secs(10));
    let slow = {
        let client = client.clone();
        std::thread::spawn(move || {
            client
                .get_lease("ns", "probe", &Deadline::from_now(Duration::from_secs(8)))
                .map(|_| ())
        })
    };
    // Let the first request start the run.
    while dir.read("started").is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let began = Instant::now();
    let short = client.get_lease(
        "ns",
        "probe",
        &Deadline::from_now(Duration::from_millis(300)),
    );
    let waited = began.elapsed();
    let msg = short.unwrap_err().to_string();
    assert!(msg.contains("no answer within"), "{msg}");
    assert!(
        waited < Duration::from_millis(1000),
        "the short request waited {waited:?} for another request's plugin run"
    );
    // The long one gets its answer from the one run (a 404: no such Lease).
    let long = slow.join().unwrap().unwrap_err();
    assert!(long.is_not_found(), "{long}");
    assert_eq!(dir.read("runs").lines().count(), 1, "the plugin ran once");
}

/// Threads of this process whose name starts with `prefix` (`comm` holds
/// the first 15 bytes of a thread's name).
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end().starts_with(prefix))
        })
        .count()
}

fn alive(pid: u32) -> bool {
    // A zombie has ended; only its parent has not reaped it yet.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").starts_with(" Z"))
}

/// A plugin that answers and leaves a child holding its standard output
/// (`sleep 300 &` inherits it), with a token that has already expired, so
/// that every request runs it again. Each run answers within its budget,
/// and 20 runs leave no reader thread and no process behind.
#[test]
fn a_forking_plugin_run_twenty_times_leaves_no_thread_or_process_behind() {
    run_a_forking_plugin_twenty_times("sleep 300 &");
}

/// The same with a child in a session of its own (`setsid`), out of the
/// plugin's process group: it still holds the plugin's output, and goes
/// with the run.
#[test]
fn a_plugin_child_in_its_own_session_holding_the_output_goes_with_the_run() {
    if std::process::Command::new("setsid")
        .args(["true"])
        .status()
        .is_err()
    {
        eprintln!("setsid(1) is not installed: skipping");
        return;
    }
    run_a_forking_plugin_twenty_times("setsid sleep 300 &");
}

/// Run a plugin that starts `child` (a shell command ending in `&`)
/// twenty times; check that no thread or child outlives the runs.
fn run_a_forking_plugin_twenty_times(child: &str) {
    let server = tls_server("t1");
    server.put_value(
        "ns",
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "probe"}}),
    );
    let dir = TempDir::new();
    dir.write("token", "t1");
    dir.write("expiry", "2000-01-01T00:00:00Z");
    dir.script(
        "plugin.sh",
        &format!("{child}\necho $! >> \"$PLUGIN_DIR/leftovers\"\n{TOKEN_PLUGIN}"),
    );
    let client = plugin_client(&dir, &server, Duration::from_secs(1));
    let plugin_threads = || threads_named("lease-exec-plug");
    let baseline = plugin_threads();
    let mut slow = Vec::new();
    for run in 1..=20 {
        let began = Instant::now();
        let got = get(&client);
        if got.is_err() || began.elapsed() >= Duration::from_millis(900) {
            slow.push(format!("run {run}: {got:?} after {:?}", began.elapsed()));
        }
    }
    let leftovers: Vec<u32> = dir
        .read("leftovers")
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(!leftovers.is_empty());
    let deadline = Instant::now() + Duration::from_secs(5);
    while (plugin_threads() > baseline || leftovers.iter().any(|&p| alive(p)))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let threads_left = plugin_threads().saturating_sub(baseline);
    let living: Vec<u32> = leftovers.iter().copied().filter(|&p| alive(p)).collect();
    for &pid in &living {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert_eq!(threads_left, 0, "plugin threads left behind");
    assert!(living.is_empty(), "plugin children left behind: {living:?}");
    assert!(
        slow.is_empty(),
        "runs waited for the plugin's child: {slow:#?}"
    );
    assert_eq!(
        dir.read("runs").lines().count(),
        20,
        "an expired token is never reused"
    );
}
