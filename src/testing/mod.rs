//! Embedded Kubernetes API server for tests (work in progress).
