//! Every file the crate reads is a regular file read through a size cap:
//! a FIFO, a directory or an oversize file given as a token, a CA bundle,
//! a client certificate or a kubeconfig is a clear error, at once (a FIFO
//! used to block forever, with the token mutex held). A token file that
//! cannot be read at start is an error naming it; one that fails a later
//! re-read keeps the last token and warns once per kind of failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::TestApiServer;
use lease_elector::{Client, ClientConfig, Deadline, ManualClock};

mod common;

use common::logs::logs;
use common::tempdir::TempDir;
use common::RawLeases;

/// What a request is given; a read that blocks is caught well within it.
const BUDGET: Duration = Duration::from_secs(5);

fn warnings_about(needle: &str) -> Vec<String> {
    logs()
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, m)| *l == log::Level::Warn && m.contains(needle))
        .map(|(_, m)| m.clone())
        .collect()
}

/// `f()` on a thread of its own, or `Err` when it takes longer than
/// [`BUDGET`] (the thread is left blocked: that is the bug being caught).
fn within_budget<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BUDGET)
        .map_err(|_| format!("still blocked after {:?}", started.elapsed()))
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
}

/// A FIFO, a directory and a sparse file one byte over `cap`, in `dir`.
fn hostile_files(dir: &TempDir, cap: u64) -> Vec<(&'static str, PathBuf)> {
    let fifo = dir.0.join("fifo");
    mkfifo(&fifo);
    let folder = dir.0.join("folder");
    std::fs::create_dir(&folder).unwrap();
    let big = dir.0.join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(cap + 1)
        .unwrap();
    vec![
        ("a FIFO", fifo),
        ("a directory", folder),
        ("larger than", big),
    ]
}

fn assert_clear(err: &str, what: &str, path: &Path, why: &str) {
    assert!(err.contains(what), "names what the file is for: {err}");
    assert!(
        err.contains(&path.display().to_string()),
        "names the file: {err}"
    );
    assert!(err.contains(why), "says why ({why}): {err}");
}

#[test]
fn a_fifo_a_directory_or_an_oversize_file_as_a_token_is_a_clear_error_at_once() {
    let dir = TempDir::new();
    for (why, path) in hostile_files(&dir, 64 << 10) {
        let p = path.clone();
        let err = within_budget(move || {
            Client::new(ClientConfig::new("http://127.0.0.1:1").token_file(p)).map(drop)
        })
        .unwrap_or_else(|e| panic!("token file {why}: {e}"))
        .expect_err("an unusable token file is an error when the client is built")
        .to_string();
        assert_clear(&err, "bearer token", &path, why);
    }
}

#[test]
fn a_fifo_a_directory_or_an_oversize_file_as_a_ca_bundle_is_a_clear_error_at_once() {
    let dir = TempDir::new();
    for (why, path) in hostile_files(&dir, 1 << 20) {
        let p = path.clone();
        let err = within_budget(move || {
            ClientConfig::new("https://127.0.0.1:1")
                .ca_file(p)
                .map(drop)
        })
        .unwrap_or_else(|e| panic!("CA file {why}: {e}"))
        .expect_err("an unusable CA file is an error")
        .to_string();
        assert_clear(&err, "CA bundle", &path, why);
    }
}

#[test]
fn a_fifo_a_directory_or_an_oversize_file_as_a_kubeconfig_is_a_clear_error_at_once() {
    let dir = TempDir::new();
    for (why, path) in hostile_files(&dir, 8 << 20) {
        let p = path.clone();
        let err = within_budget(move || ClientConfig::from_kubeconfig(p, None).map(drop))
            .unwrap_or_else(|e| panic!("kubeconfig {why}: {e}"))
            .expect_err("an unusable kubeconfig is an error")
            .to_string();
        assert_clear(&err, "kubeconfig", &path, why);
    }
}

#[test]
fn files_a_kubeconfig_names_are_read_the_same_way() {
    let dir = TempDir::new();
    let files = hostile_files(&dir, 1 << 20);
    for (field, what) in [
        ("certificate-authority", "CA bundle"),
        ("tokenFile", "bearer token"),
        ("client-certificate", "client certificate"),
        ("client-key", "client key"),
    ] {
        for (why, path) in &files {
            let (cluster, user) = match field {
                "certificate-authority" => (format!("{field}: {}", path.display()), String::new()),
                "client-key" => (
                    "certificate-authority-data: eA==".into(),
                    format!(
                        "client-certificate-data: eA==, client-key: {}",
                        path.display()
                    ),
                ),
                "client-certificate" => (
                    "certificate-authority-data: eA==".into(),
                    format!(
                        "client-key-data: eA==, client-certificate: {}",
                        path.display()
                    ),
                ),
                _ => (
                    "certificate-authority-data: eA==".into(),
                    format!("{field}: {}", path.display()),
                ),
            };
            let config = dir.write(
                "config",
                format!(
                    "clusters:\n- name: c\n  cluster: {{server: 'https://h:1', {cluster}}}\n\
                     users:\n- name: u\n  user: {{{user}}}\n\
                     contexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
                     current-context: x\n"
                ),
            );
            let err = within_budget(move || {
                ClientConfig::from_kubeconfig(config, None)
                    .and_then(Client::new)
                    .map(drop)
            })
            .unwrap_or_else(|e| panic!("{field} {why}: {e}"))
            .expect_err("an unusable file is an error")
            .to_string();
            assert_clear(&err, what, path, why);
        }
    }
}

#[test]
fn a_missing_token_file_is_an_error_naming_it_when_the_client_is_built() {
    let dir = TempDir::new();
    let missing = dir.0.join("no-such-token");
    let err = Client::new(ClientConfig::new("http://127.0.0.1:1").token_file(&missing))
        .expect_err("no client without its token")
        .to_string();
    assert_clear(&err, "bearer token", &missing, "No such file");
    let empty = dir.write("empty", "\n");
    let err = Client::new(ClientConfig::new("http://127.0.0.1:1").token_file(&empty))
        .expect_err("no client with an empty token file")
        .to_string();
    assert_clear(&err, "bearer token", &empty, "empty");
}

/// `lease-elect` and the `elect` example exit with the error rather than
/// retrying forever.
#[test]
fn both_command_line_tools_exit_naming_a_missing_token_file() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("ns");
    let dir = TempDir::new();
    let missing = dir.0.join("no-such-token");
    for bin in [
        PathBuf::from(env!("CARGO_BIN_EXE_lease-elect")),
        common::example("elect"),
    ] {
        assert!(
            bin.exists(),
            "{} missing: run via `cargo test` (which builds the examples)",
            bin.display()
        );
        let mut cmd = Command::new(&bin);
        cmd.args([
            "--server",
            &server.url(),
            "--namespace",
            "ns",
            "--name",
            "lock",
        ])
        .arg("--token-file")
        .arg(&missing)
        .arg("--ignore-stdin");
        let out = within_budget(move || cmd.output().unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: {stderr}", bin.display());
        assert!(
            stderr.contains(&missing.display().to_string()) && stderr.contains("bearer token"),
            "{}: {stderr}",
            bin.display()
        );
    }
}

#[test]
fn a_token_file_that_later_fails_to_read_keeps_the_last_token_and_warns_once_per_kind() {
    logs();
    let server = TestApiServer::builder().tokens(&["first"]).build().unwrap();
    server.add_namespace("ns");
    server.put_value(
        "ns",
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "probe"}}),
    );
    let dir = TempDir::new();
    let token = dir.write("token", "first\n");
    let clock = ManualClock::new();
    let client = Client::new(
        ClientConfig::new(server.url())
            .token_file(&token)
            .clock(Arc::new(clock.clone())),
    )
    .unwrap();
    let get = |client: &Client| {
        let client = client.clone();
        within_budget(move || {
            client
                .get_lease("ns", "probe", &Deadline::from_now(BUDGET))
                .map(drop)
        })
    };
    get(&client).unwrap().unwrap();

    // Rotation gone wrong, each past the re-read interval: a FIFO, a
    // folder, a FIFO again (one kind: not a regular file), then no file
    // at all (another kind), twice.
    let name = token.display().to_string();
    for (i, (make, warnings)) in [
        ("fifo", 1),
        ("dir", 1),
        ("fifo", 1),
        ("none", 2),
        ("none", 2),
    ]
    .into_iter()
    .enumerate()
    {
        let _ = std::fs::remove_file(&token).or_else(|_| std::fs::remove_dir(&token));
        match make {
            "fifo" => mkfifo(&token),
            "dir" => std::fs::create_dir(&token).unwrap(),
            _ => {}
        }
        clock.advance(Duration::from_secs(61));
        get(&client)
            .unwrap_or_else(|e| panic!("re-read {i} ({make}): {e}"))
            .unwrap_or_else(|e| panic!("re-read {i} ({make}) keeps the last token: {e}"));
        let warned = warnings_about(&name);
        assert_eq!(warned.len(), warnings, "after {make}: {warned:#?}");
        assert!(warned
            .iter()
            .all(|w| w.contains("keeping the previous token")));
    }

    // Readable again: the new token is used, and the recovery is said.
    std::fs::write(&token, "second\n").unwrap();
    server.set_tokens(&["second"]);
    clock.advance(Duration::from_secs(61));
    get(&client).unwrap().unwrap();
    assert!(warnings_about(&name)
        .iter()
        .any(|w| w.contains("readable again")));
}

/// In a pod: the token, CA and namespace files of the service-account
/// folder, and an OpenShift config file, are read the same way.
#[test]
fn the_service_account_folder_and_openshift_config_files_are_read_the_same_way() {
    let dir = TempDir::new();
    let sa = dir.0.join("sa");
    dir.write("sa/token", "t\n");
    dir.write(
        "sa/ca.crt",
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tls/ca.pem")).unwrap(),
    );
    // A namespace file that is a FIFO is no namespace, at once.
    mkfifo(&sa.join("namespace"));
    let folder = sa.clone();
    let cfg = within_budget(move || ClientConfig::in_cluster_from("10.0.0.1", "443", &folder))
        .unwrap()
        .unwrap();
    assert_eq!(cfg.namespace(), None);
    // A token that is a FIFO is an error naming it.
    std::fs::remove_file(sa.join("token")).unwrap();
    mkfifo(&sa.join("token"));
    let folder = sa.clone();
    let err =
        within_budget(move || ClientConfig::in_cluster_from("10.0.0.1", "443", &folder).map(drop))
            .unwrap()
            .unwrap_err()
            .to_string();
    assert_clear(&err, "bearer token", &sa.join("token"), "a FIFO");

    let config = dir.0.join("leader-election.yaml");
    mkfifo(&config);
    let path = config.clone();
    let err =
        within_budget(move || lease_elector::openshift::LeaderElection::from_file(path).map(drop))
            .unwrap()
            .unwrap_err()
            .to_string();
    assert_clear(&err, "leader election config", &config, "a FIFO");
}

/// A kubeconfig of `entries` one-character impersonation groups, as one
/// flow list: a node per two bytes of the file.
fn kubeconfig_of_tiny_entries(entries: usize) -> String {
    format!(
        "apiVersion: v1\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:1'}}\n\
         users:\n- name: u\n  user:\n    token: t\n    as: me\n    as-groups: [{}]\n\
         contexts:\n- name: x\n  context: {{cluster: c, user: u, namespace: ns}}\n\
         current-context: x\n",
        vec!["a"; entries].join(",")
    )
}

/// Reading a kubeconfig takes at most 4 times its size and 1 MiB: a file
/// made of one-character entries (once 17 to 34 times its size, 272 MiB
/// at the 8 MiB cap) is refused with an error that names it and says why,
/// while kubeconfigs of many small entries as tools write them still load.
#[test]
fn a_kubeconfig_that_would_take_more_than_four_times_its_size_in_memory_is_refused() {
    let dir = TempDir::new();
    let hostile = dir.write("hostile", kubeconfig_of_tiny_entries(1 << 20));
    let err = ClientConfig::from_kubeconfig(&hostile, None)
        .map(|_| ())
        .expect_err("a kubeconfig of a million one-character groups is refused")
        .to_string();
    assert!(
        err.contains(&hostile.display().to_string()) && err.contains("4 \u{d7} its size in memory"),
        "{err}"
    );

    // The same shape, small: read, every group kept.
    let small = dir.write("small", kubeconfig_of_tiny_entries(1000));
    ClientConfig::from_kubeconfig(&small, None).expect("a small kubeconfig reads");

    // 5,000 contexts as gcloud names them (1 MiB of small entries).
    let name = |i: usize| format!("gke_my-project-123456_europe-west1-b_cluster-{i:05}");
    let mut many = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.1\n  name: {0}\n\
         users:\n- name: {0}\n  user:\n    token: t\ncurrent-context: {0}\ncontexts:\n",
        name(0)
    );
    for i in 0..5000 {
        many += &format!(
            "- context:\n    cluster: {0}\n    user: {0}\n    namespace: ns\n  name: {1}\n",
            name(0),
            name(i)
        );
    }
    let many = dir.write("many", many);
    let cfg = ClientConfig::from_kubeconfig(&many, None).expect("5,000 contexts read");
    assert_eq!(cfg.namespace(), Some("ns"));
}
