//! L2: a property test over arbitrary ACK interleavings.

use std::time::{Duration, Instant};

use zmesh::proto::liveness::{AckOutcome, ProbeEvent, ProbeIdSource, ProbeTracker, PEER_DEADLINE};
use zmesh::proto::ConnId;

use super::NS;

/// One step of the property test: an input to the tracker after some elapsed time.
#[derive(Debug, Clone)]
enum Step {
    /// ACK the pending id (if any) on the tracker's connection.
    AckPending,
    /// ACK the pending id on another connection.
    AckOtherConnection,
    /// ACK one of the ids issued so far, chosen by index.
    AckIssued(usize),
    /// ACK an arbitrary id (usually never issued; may be 0).
    AckArbitrary(u64),
    /// Application traffic.
    App,
    /// Take whatever the tracker wants to send.
    Transmit,
    /// Jump to `poll_timeout()` and apply it.
    Timeout,
}

fn step() -> impl proptest::strategy::Strategy<Value = (u64, Step)> {
    use proptest::prelude::*;
    let step = prop_oneof![
        3 => Just(Step::AckPending),
        1 => Just(Step::AckOtherConnection),
        2 => any::<usize>().prop_map(Step::AckIssued),
        1 => prop_oneof![Just(0u64), any::<u64>()].prop_map(Step::AckArbitrary),
        1 => Just(Step::App),
        3 => Just(Step::Transmit),
        3 => Just(Step::Timeout),
    ];
    (0u64..7_000, step)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// L2, L6: for arbitrary interleavings of ACKs (pending, duplicate, stale, arbitrary,
    /// other-connection), application traffic, transmits and timeouts at arbitrary times, the
    /// deadline moves only on an `Accepted` outcome (to exactly `now + 15 s`), at most one id
    /// is pending and resends repeat it, and the verdict never fires before the exact
    /// deadline - nor is it missed by an input at or after it.
    #[test]
    fn l2_prop_deadline_moves_only_on_accepted_acks_and_never_fires_early(
        steps in proptest::collection::vec(step(), 1..160),
        seed in proptest::prelude::any::<u64>(),
    ) {
        use proptest::prop_assert;
        use proptest::prop_assert_eq;

        let t0 = Instant::now();
        let conn = ConnId(1);
        let mut t = ProbeTracker::new(conn, t0, ProbeIdSource::new(seed));
        let mut now = t0;
        let mut issued: Vec<u64> = Vec::new();
        let mut verdicts = 0;
        for (advance_ms, step) in steps {
            now += Duration::from_millis(advance_ms);
            let before = t.deadline();
            let pending_before = t.pending_id();
            let mut accepted = false;
            let mut applies_timers = true;
            match step {
                Step::AckPending => {
                    let id = pending_before.unwrap_or(0);
                    accepted = t.handle_ack(conn, id, now) == AckOutcome::Accepted;
                    if accepted {
                        prop_assert!(pending_before.is_some());
                    }
                }
                Step::AckOtherConnection => {
                    let id = pending_before.unwrap_or(1);
                    let outcome = t.handle_ack(ConnId(2), id, now);
                    prop_assert_eq!(outcome, AckOutcome::OtherConnection);
                }
                Step::AckIssued(i) => {
                    if issued.is_empty() {
                        applies_timers = false;
                    } else {
                        let id = issued[i % issued.len()];
                        accepted = t.handle_ack(conn, id, now) == AckOutcome::Accepted;
                        if accepted {
                            prop_assert_eq!(Some(id), pending_before);
                        }
                    }
                }
                Step::AckArbitrary(id) => {
                    accepted = t.handle_ack(conn, id, now) == AckOutcome::Accepted;
                    if accepted {
                        prop_assert_eq!(Some(id), pending_before);
                    }
                }
                Step::App => {
                    t.handle_app_traffic(now);
                    applies_timers = false;
                }
                Step::Transmit => {
                    if let Some(id) = t.poll_transmit(now) {
                        prop_assert!(id != 0);
                        if let Some(p) = pending_before {
                            prop_assert_eq!(id, p, "a pending id is resent, not replaced");
                        } else {
                            prop_assert!(!issued.contains(&id), "fresh ids are new");
                            issued.push(id);
                        }
                        prop_assert_eq!(t.pending_id(), Some(id));
                    }
                }
                Step::Timeout => {
                    if let Some(at) = t.poll_timeout() {
                        if at > now {
                            // Nothing may happen one nanosecond before the wake-up.
                            t.handle_timeout(at - NS);
                            prop_assert!(t.poll_event().is_none());
                            prop_assert_eq!(t.deadline(), before);
                            now = at;
                        }
                    }
                    t.handle_timeout(now);
                }
            }
            let after = t.deadline();
            if accepted {
                let Some(d) = before else {
                    return Err(proptest::test_runner::TestCaseError::fail("accepted while dead"));
                };
                prop_assert!(now < d, "accepted at or after the deadline");
                prop_assert_eq!(after, Some(now + PEER_DEADLINE));
                prop_assert_eq!(t.pending_id(), None);
            } else if !t.is_dead() {
                prop_assert_eq!(after, before, "deadline moved without an accepted ACK");
            }
            if let Some(event) = t.poll_event() {
                verdicts += 1;
                let Some(d) = before else {
                    return Err(proptest::test_runner::TestCaseError::fail("second verdict"));
                };
                prop_assert!(now >= d, "verdict before the deadline");
                prop_assert_eq!(t.dead_at(), Some(now));
                prop_assert_eq!(
                    event,
                    ProbeEvent::DeadlineExceeded { conn, last_ack_at: t.last_ack_at() }
                );
            }
            if applies_timers {
                if let Some(d) = before {
                    prop_assert_eq!(t.is_dead(), now >= d, "verdict missed or early");
                }
            }
            prop_assert!(verdicts <= 1);
        }
    }
}
