//! Liveness scenarios over the public sans-IO API, with a manual clock that jumps to the next
//! `poll_timeout()` (MISSION L1-L8, F2). Every test names the requirement it proves.
//!
//! Time: `t0` is read once per test; every later instant is `t0 + Duration`. Nothing sleeps,
//! so minutes of protocol time run in milliseconds.
//!
//! One module per topic, in tests/liveness_scenarios/: `timing` (L1), `probe_ack` (L2, L6),
//! `fanout` (L4, L5), `pair` (L3, a node pair over a simulated link), `table` (L8),
//! `property` (L2 over arbitrary ACK interleavings) and `coalescing` (one wake-up for every
//! probe and beacon due within the window). The helpers below are theirs.

use std::time::{Duration, Instant};

use zmesh::proto::liveness::{ProbeIdSource, ProbeTracker};
use zmesh::proto::ConnId;

const NS: Duration = Duration::from_nanos(1);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn tracker(conn: u64, now: Instant) -> ProbeTracker {
    ProbeTracker::new(ConnId(conn), now, ProbeIdSource::new(conn))
}

/// Sends whatever the tracker wants to send at `now`.
fn probe(t: &mut ProbeTracker, now: Instant) -> Option<u64> {
    t.poll_transmit(now)
}

/// Jumps to the tracker's next wake-up and applies it; returns the new `now`.
fn wake(t: &mut ProbeTracker) -> Instant {
    let Some(at) = t.poll_timeout() else {
        panic!("tracker has no timer");
    };
    t.handle_timeout(at);
    at
}

#[path = "liveness_scenarios/coalescing.rs"]
mod coalescing;
#[path = "liveness_scenarios/fanout.rs"]
mod fanout;
#[path = "liveness_scenarios/pair.rs"]
mod pair;
#[path = "liveness_scenarios/probe_ack.rs"]
mod probe_ack;
#[path = "liveness_scenarios/property.rs"]
mod property;
#[path = "liveness_scenarios/table.rs"]
mod table;
#[path = "liveness_scenarios/timing.rs"]
mod timing;
