//! The README's in-cluster program, line for line (`docs/in-cluster.rs`,
//! which the README and the crate's front page show), built as an example
//! so that `tests/readme_program.rs` runs it against the embedded API
//! server through a kubeconfig: `KUBECONFIG=... cargo run --example in_cluster`.
include!("../docs/in-cluster.rs");
