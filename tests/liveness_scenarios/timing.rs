//! L1: the fixed timing constants, the same for every topology.

use std::time::{Duration, Instant};

use zmesh::proto::liveness::{
    AckOutcome, BeaconSchedule, Liveness, LivenessEvent, ProbeEvent, ProbeTracker, PublisherWatch,
    Transmit, PEER_DEADLINE, PROBE_INTERVAL,
};
use zmesh::proto::ConnId;

use super::{ms, secs};

/// L1: the two timings are constants of the crate, 5 s and 15 s.
#[test]
fn l1_timing_constants_are_5s_and_15s() {
    assert_eq!(PROBE_INTERVAL, Duration::from_secs(5));
    assert_eq!(PEER_DEADLINE, Duration::from_secs(15));
}

/// L1: no constructor takes a duration, so trackers of every topology (RouteMesh Application
/// lane, RouteMesh Completion lane, ClientServer) and both fanout machines follow the same
/// 5 s / 15 s rules. The same script gives the same trace, relative to each one's ready time.
#[test]
fn l1_every_topology_uses_identical_timing() {
    let t0 = Instant::now();
    let mut table = Liveness::new(42);
    // Ready at different instants, so equal traces are not a coincidence of the clock.
    let lanes = [
        ("routemesh application lane", ConnId(1), t0),
        ("routemesh completion lane", ConnId(2), t0 + ms(1_300)),
        ("clientserver", ConnId(3), t0 + ms(2_700)),
    ];
    let mut traces = Vec::new();
    for (name, conn, ready) in lanes {
        let key = table.insert_connection(conn, ready);
        let mut trace = Vec::new();
        let mut now = ready;
        let mut acked = 0;
        loop {
            while let Some(Transmit::Probe { id, .. }) = table.poll_transmit(now) {
                trace.push((now - ready, "probe"));
                // Answer the first two probes after 40 ms, then go silent (half-open).
                if acked < 2 {
                    acked += 1;
                    let outcome = table.handle_ack(key, conn, id, now + ms(40));
                    assert_eq!(outcome, Ok(AckOutcome::Accepted), "{name}");
                    trace.push((now + ms(40) - ready, "ack"));
                }
            }
            if let Some((k, LivenessEvent::Probe(ProbeEvent::DeadlineExceeded { .. }))) =
                table.poll_event()
            {
                assert_eq!(k, key);
                trace.push((now - ready, "deadline exceeded"));
                break;
            }
            let Some(next) = table.probe(key).and_then(ProbeTracker::poll_timeout) else {
                panic!("{name}: alive tracker without timer");
            };
            now = next;
            table.handle_timeout(now);
        }
        assert!(table.remove(key));
        traces.push(trace);
    }
    // Probe at ready, ACKed; probe at 5 s, ACKed (deadline 20.04 s); a new id at 10 s,
    // resent at 15 s and 20 s; the verdict falls exactly 15 s after the last ACK.
    let expected = vec![
        (secs(0), "probe"),
        (ms(40), "ack"),
        (secs(5), "probe"),
        (ms(5_040), "ack"),
        (secs(10), "probe"),
        (secs(15), "probe"),
        (secs(20), "probe"),
        (ms(20_040), "deadline exceeded"),
    ];
    for trace in &traces {
        assert_eq!(trace, &expected);
    }

    // The fanout machines use the same two constants.
    let mut beacons = BeaconSchedule::new(t0);
    assert!(beacons.poll_transmit(t0));
    assert_eq!(beacons.poll_timeout(), Some(t0 + PROBE_INTERVAL));
    let watch = PublisherWatch::new(t0);
    assert_eq!(watch.poll_timeout(), Some(t0 + PEER_DEADLINE));
}
