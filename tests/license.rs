//! The license the crate is offered under: `Cargo.toml` says Apache-2.0,
//! the README says so, and `LICENSE` is that license's text as the Apache
//! Software Foundation publishes it (<https://www.apache.org/licenses/LICENSE-2.0.txt>,
//! also Debian's `/usr/share/common-licenses/Apache-2.0`), byte for byte:
//! a reformatted copy (several crates ship one, dedented and without its
//! appendix) is not the text the SPDX identifier names. `.ci/run` checks
//! that `cargo package` ships it.

/// SHA-256 of the ASF's `LICENSE-2.0.txt`.
const APACHE_2_0_SHA256: &str = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30";

fn read(file: &str) -> String {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_license_file_is_the_apache_2_0_text_unmodified() {
    let text = read("LICENSE");
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, APACHE_2_0_SHA256, "LICENSE is not the ASF's text");
}

#[test]
fn cargo_toml_names_the_license_and_ships_its_file_and_the_readme_names_it() {
    let manifest = read("Cargo.toml");
    assert!(
        manifest.lines().any(|l| l == r#"license = "Apache-2.0""#),
        "Cargo.toml's license"
    );
    assert!(
        manifest.lines().any(|l| l.trim() == r#""/LICENSE","#),
        "Cargo.toml's include lists /LICENSE"
    );
    let readme = read("README.md");
    let section = readme
        .split("\n## License\n")
        .nth(1)
        .expect("the README's License section");
    assert!(
        section.contains("Apache License 2.0") && section.contains("(LICENSE)"),
        "{section}"
    );
}
