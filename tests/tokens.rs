//! Term tokens never go down (issue 44): a lock whose versions are decimal
//! for some writes and not for others (tokens are then the revision or,
//! failing that, `leaseTransitions`) gave 1001, 1, 1005, 3, 1009.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_elector::{
    ApiStatus, Deadline, Error, LeaderElectionRecord, LeaderElector, LeaderEvent, Lock,
    ManualClock, Result,
};

#[derive(Debug, Default)]
struct Stored {
    record: Option<LeaderElectionRecord>,
    writes: u64,
}

impl Stored {
    /// The n-th write's version: a decimal revision for odd writes, not
    /// one for even writes.
    fn version(&self) -> String {
        if self.writes % 2 == 1 {
            (1000 + self.writes).to_string()
        } else {
            format!("v{}", self.writes)
        }
    }
}

#[derive(Debug)]
struct MixedVersions {
    stored: Arc<Mutex<Stored>>,
    seen: u64,
}

fn conflict() -> Error {
    Error::Api {
        target: "lease test/mixed".into(),
        action: "update",
        status: ApiStatus::new(409, "Conflict", ""),
    }
}

impl Lock for MixedVersions {
    fn get(&mut self, _: &Deadline) -> Result<LeaderElectionRecord> {
        let st = self.stored.lock().unwrap();
        self.seen = st.writes;
        st.record.clone().ok_or_else(|| Error::Api {
            target: "lease test/mixed".into(),
            action: "get",
            status: ApiStatus::new(404, "NotFound", ""),
        })
    }
    fn create(&mut self, record: &LeaderElectionRecord, _: &Deadline) -> Result<()> {
        let mut st = self.stored.lock().unwrap();
        st.record = Some(record.clone());
        st.writes += 1;
        self.seen = st.writes;
        Ok(())
    }
    fn update(&mut self, record: &LeaderElectionRecord, _: &Deadline) -> Result<()> {
        let mut st = self.stored.lock().unwrap();
        if st.writes != self.seen {
            return Err(conflict());
        }
        st.record = Some(record.clone());
        st.writes += 1;
        self.seen = st.writes;
        Ok(())
    }
    fn identity(&self) -> &str {
        "a"
    }
    fn describe(&self) -> String {
        "test/mixed".into()
    }
    fn version(&self) -> Option<String> {
        Some(self.stored.lock().unwrap().version())
    }
}

#[test]
fn a_term_token_is_never_lower_than_one_handed_out_before() {
    let stored = Arc::new(Mutex::new(Stored::default()));
    let lock = MixedVersions {
        stored: stored.clone(),
        seen: 0,
    };
    let clock = ManualClock::auto_advancing();
    let (handle, events) = LeaderElector::builder(lock)
        .rejoin(true)
        .clock(Arc::new(clock))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let mut tokens = Vec::new();
    while tokens.len() < 6 {
        match events.recv_timeout(Duration::from_secs(20)).unwrap() {
            LeaderEvent::StartedLeading { term, .. } => {
                tokens.push(term.token());
                // Another writer frees the Lease: the term ends, and the
                // next one begins on the next write.
                let mut st = stored.lock().unwrap();
                if let Some(r) = st.record.as_mut() {
                    r.holder_identity.clear();
                }
                // Its write, and (every other term) one more, so that the
                // next term's version is a revision one time and not the
                // next.
                st.writes += 1 + tokens.len() as u64 % 2;
            }
            _ => continue,
        }
    }
    handle.stop().unwrap();
    assert!(
        tokens.windows(2).all(|w| w[1] > w[0]),
        "term tokens went down: {tokens:?}"
    );
}
