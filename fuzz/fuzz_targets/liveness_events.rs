//! Fuzz target: a probe tracker fed an arbitrary sequence of ACKs (right/wrong id, right/wrong
//! connection), application traffic and time steps never panics, never declares the
//! connection dead before 15 s after the last accepted ACK (or ready), and always by then.
#![no_main]

use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zmesh::proto::liveness::{AckOutcome, ProbeIdSource, ProbeTracker, PEER_DEADLINE};
use zmesh::proto::ConnId;

#[derive(Debug, Arbitrary)]
enum Event {
    /// Advance time by this many milliseconds (bounded below).
    Wait(u16),
    /// An ACK echoing the pending id (if any) on this or another connection.
    AckPending { other_conn: bool },
    /// An ACK with an arbitrary id.
    AckId(u64),
    /// An application record.
    App,
    /// The shell polls for probes to send.
    Poll,
}

fuzz_target!(|events: Vec<Event>| {
    let t0 = Instant::now();
    let conn = ConnId(1);
    let mut t = ProbeTracker::new(conn, t0, ProbeIdSource::new(7));
    let mut now = t0;
    let mut last_evidence = t0;
    for ev in events {
        match ev {
            Event::Wait(ms) => now += Duration::from_millis(u64::from(ms % 20_000)),
            Event::AckPending { other_conn } => {
                if let Some(id) = t.pending_id() {
                    let c = if other_conn { ConnId(2) } else { conn };
                    if t.handle_ack(c, id, now) == AckOutcome::Accepted {
                        assert!(!other_conn, "an ACK from another connection was accepted");
                        last_evidence = now;
                    }
                }
            }
            Event::AckId(id) => {
                if t.handle_ack(conn, id, now) == AckOutcome::Accepted {
                    last_evidence = now;
                }
            }
            Event::App => t.handle_app_traffic(now),
            Event::Poll => while t.poll_transmit(now).is_some() {},
        }
        t.handle_timeout(now);
        let dead_by_rule = now >= last_evidence + PEER_DEADLINE;
        assert_eq!(
            t.is_dead(),
            dead_by_rule,
            "deadline judged wrongly at {:?}",
            now - t0
        );
        if t.is_dead() {
            return;
        }
    }
});
