//! The in-cluster program with a health endpoint (`docs/in-cluster-health.rs`,
//! which the crate's front page shows and `docs/deploy/` deploys), built as
//! an example so that `tests/health_program.rs` runs it against the
//! embedded API server through a kubeconfig:
//! `KUBECONFIG=... HEALTH_ADDR=127.0.0.1:8080 cargo run --example in_cluster_health`.
include!("../docs/in-cluster-health.rs");
