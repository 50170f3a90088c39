//! The versions the documentation names, held to where they come from:
//! the release the test server reports (its `/version`, over HTTP), the
//! kubectl the crate's tests ran (whose minor the server reports: the
//! project machine's kubectl is the Google Cloud SDK's dispatcher, which
//! runs the binary of the server's minor where it has one, 1.27 to 1.33,
//! and its own 1.32.4 otherwise), and the kubectl `.ci/control-plane`
//! builds where a machine has none (its pin). The crate page and the
//! README said two different things of the kubectl the tests used; they
//! now say one, and this test fails when either drifts.

use std::io::{Read, Write};
use std::net::TcpStream;

use lease_elector::testing::TestApiServer;

const CRATE_PAGE: &str = include_str!("../src/lib.rs");
const TESTING_PAGE: &str = include_str!("../src/testing/mod.rs");
const README: &str = include_str!("../README.md");

/// The test server's `/version`, as kubectl reads it.
fn reported() -> serde_json::Value {
    let server = TestApiServer::start().unwrap();
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut conn = TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "GET /version HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    serde_json::from_str(body).unwrap()
}

/// The word after `phrase` in `text` (a page's comment markers and line
/// breaks read as spaces), without trailing punctuation.
fn after(text: &str, phrase: &str, what: &str) -> String {
    let words = text
        .replace("//!", " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let rest = words
        .split_once(phrase)
        .unwrap_or_else(|| panic!("{what}: no {phrase:?}"))
        .1;
    let word = rest.split_whitespace().next().unwrap_or_default();
    word.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

#[test]
fn the_pages_name_the_release_the_test_server_reports() {
    let version = reported();
    let git = version["gitVersion"].as_str().unwrap();
    let release = git.split('+').next().unwrap();
    assert_eq!(
        release,
        format!(
            "v{}.{}.0",
            version["major"].as_str().unwrap(),
            version["minor"].as_str().unwrap()
        )
    );
    for (page, text) in [
        ("the crate page", CRATE_PAGE),
        ("the testing page", TESTING_PAGE),
        ("the README", README),
    ] {
        assert_eq!(
            after(text, "reports itself as", page),
            release,
            "{page} names another release than the test server's {git}"
        );
    }
}

#[test]
fn the_crate_page_and_the_readme_name_one_kubectl_the_tests_ran_of_the_reported_minor() {
    let page = after(CRATE_PAGE, "the tests ran kubectl", "the crate page");
    let readme = after(README, "the tests ran kubectl", "the README");
    assert_eq!(page, readme, "the crate page and the README disagree");
    let minor = reported()["minor"].as_str().unwrap().to_string();
    assert_eq!(
        page.split('.').nth(1),
        Some(minor.as_str()),
        "the pages say the tests ran kubectl {page}, but a dispatching kubectl (the Google Cloud \
         SDK's, the project machine's) runs its 1.{minor} binary against a server that reports 1.{minor}"
    );
}

#[test]
fn the_crate_page_and_the_readme_name_the_kubectl_the_control_plane_build_pins() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/control-plane");
    let script = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e} (the repository's CI, not in the .crate)"));
    let pin = script
        .lines()
        .find_map(|l| l.strip_prefix("KUBE_VERSION="))
        .expect("KUBE_VERSION= in .ci/control-plane");
    for (name, text) in [("the crate page", CRATE_PAGE), ("the README", README)] {
        assert_eq!(
            after(text, "builds kubectl", name),
            pin,
            "{name}: the kubectl .ci/control-plane builds"
        );
    }
}
