//! A fake cluster on your laptop: the embedded API server, with a
//! kubeconfig for kubectl and your program.
//!
//! ```text
//! cargo run --example test_server -- --kubeconfig PATH [--tls] [--token T]
//! KUBECONFIG=PATH kubectl get leases -A
//! ```
//!
//! The same program as the `lease-elector-test-server` binary (feature
//! `testing`), installed from a clone with `cargo install --path .
//! --features testing --bin lease-elector-test-server` (once the crate is
//! published, `cargo install lease-elector --features testing --bin
//! lease-elector-test-server`, without a clone). See
//! `src/bin/lease-elector-test-server/main.rs` for what it serves and what
//! ends it (here, SIGTERM and SIGINT close its connections and it exits 0).

#[path = "../src/bin/lease-elector-test-server/main.rs"]
mod test_server;

fn main() -> std::process::ExitCode {
    test_server::main()
}
