//! Synchronous, blocking Kubernetes leader election on `coordination.k8s.io/v1` Leases.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod error;
pub mod lease;
#[cfg(feature = "testing")]
pub mod testing;

pub use clock::{Clock, ManualClock, SystemClock, Wake, Wakeup};
pub use error::{ApiStatus, Error, Result, StatusKind};
pub use lease::{LeaderElectionRecord, Lease, LeaseSpec, MicroTime, ObjectMeta, Status};
