//! Synchronous, blocking Kubernetes leader election on `coordination.k8s.io/v1` Leases.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod clock;
pub mod config;
pub mod duration;
pub mod elector;
pub mod error;
pub mod events;
pub mod lease;
pub mod lock;
#[cfg(feature = "testing")]
pub mod testing;
pub mod watch;

pub use client::{Client, ClientConfig};
pub use clock::{Clock, ManualClock, SystemClock, Wake, Wakeup};
pub use config::{from_config, Election, LeaderElection, Tolerances};
pub use duration::{format_go_duration, parse_go_duration, GoDurationError};
pub use elector::{
    ElectorBuilder, ElectorConfig, ElectorHandle, LeaderElector, LeaderEvent, StopReason,
};
pub use error::{ApiStatus, Error, Result, StatusKind};
pub use events::{EventRecorder, EventStats};
pub use lease::{LeaderElectionRecord, Lease, LeaseSpec, MicroTime, ObjectMeta, Status};
pub use lock::{EventSink, LeaseLock, Lock};
