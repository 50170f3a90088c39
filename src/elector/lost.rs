//! Waiting for lost leadership, library-go style: its components exit when
//! they lose the lease so that they restart as a fresh candidate.

use std::time::Instant;

use super::leader_event::LeaderEvent;
use super::receiver::LeaderEvents;
use super::term::StopReason;

/// How the wait in [`wait_for_lost_leadership`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadershipEnd {
    /// Leadership was lost (renew deadline passed, or another holder took over).
    Lost {
        /// When leadership ended, on the elector's clock.
        at: Instant,
    },
    /// The elector was stopped while leading (`ElectorHandle::stop` or drop).
    Stopped {
        /// When leadership ended, on the elector's clock.
        at: Instant,
    },
    /// The elector ended (its channel closed) without a `StoppedLeading`.
    ElectorEnded,
}

/// Block until `events` reports `StoppedLeading` or closes.
///
/// Other events are consumed (and logged at debug), so call this where
/// nothing else reads the channel, typically after `StartedLeading`.
pub fn wait_for_lost_leadership(events: &LeaderEvents) -> LeadershipEnd {
    loop {
        match events.recv() {
            Ok(LeaderEvent::StoppedLeading { at, reason }) => {
                return match reason {
                    StopReason::Lost => LeadershipEnd::Lost { at },
                    _ => LeadershipEnd::Stopped { at },
                }
            }
            Ok(other) => log::debug!("waiting for lost leadership: {other:?}"),
            Err(_) => return LeadershipEnd::ElectorEnded,
        }
    }
}

/// Opt-in, library-go style: block until leadership is lost, then log the
/// warning `leader election lost` and exit the process with status 0, so
/// the orchestrator restarts it as a fresh candidate.
///
/// Not the default: the elector itself only reports
/// [`LeaderEvent::StoppedLeading`]. Returns (without exiting) when the
/// elector was stopped deliberately or ended without leading.
pub fn exit_on_lost_leadership(events: &LeaderEvents) -> LeadershipEnd {
    match wait_for_lost_leadership(events) {
        LeadershipEnd::Lost { .. } => {
            log::warn!("leader election lost");
            log::logger().flush();
            std::process::exit(0)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn waits_for_stopped_leading() {
        let (tx, rx) = mpsc::channel();
        let rx = LeaderEvents::from_channel(rx);
        let at = Instant::now();
        tx.send(LeaderEvent::NewLeader {
            identity: "me".into(),
            at,
        })
        .unwrap();
        tx.send(LeaderEvent::StoppedLeading {
            at,
            reason: StopReason::Lost,
        })
        .unwrap();
        assert_eq!(wait_for_lost_leadership(&rx), LeadershipEnd::Lost { at });
        tx.send(LeaderEvent::StoppedLeading {
            at,
            reason: StopReason::Stopped,
        })
        .unwrap();
        // A deliberate stop is not a loss: the exiting helper returns.
        assert_eq!(exit_on_lost_leadership(&rx), LeadershipEnd::Stopped { at });
        tx.send(LeaderEvent::NewLeader {
            identity: "other".into(),
            at,
        })
        .unwrap();
        drop(tx);
        assert_eq!(wait_for_lost_leadership(&rx), LeadershipEnd::ElectorEnded);
        // Blocks until the event arrives from another thread.
        let (tx, rx) = mpsc::channel();
        let rx = LeaderEvents::from_channel(rx);
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let sender = std::thread::spawn(move || {
            go_rx.recv().unwrap();
            tx.send(LeaderEvent::StoppedLeading {
                at,
                reason: StopReason::Lost,
            })
            .unwrap();
        });
        go_tx.send(()).unwrap();
        assert_eq!(wait_for_lost_leadership(&rx), LeadershipEnd::Lost { at });
        sender.join().unwrap();
    }
}
