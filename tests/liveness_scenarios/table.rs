//! L8: one structure owns liveness.

use std::time::Instant;

use zmesh::proto::liveness::{
    AckOutcome, BeaconSchedule, Delivery, FanoutInput, Liveness, ProbeTracker, PublisherWatch,
    Transmit,
};
use zmesh::proto::state::FailureReason;
use zmesh::proto::ConnId;

use super::{ms, secs};

/// L8 (with L1, L4): one `Liveness` table holds RouteMesh lanes, a ClientServer connection,
/// fanout publishers and a beacon schedule; its single `poll_timeout` is always the earliest
/// timer of all of them, and every wake-up at it has something to do.
#[test]
fn l8_one_table_gives_one_poll_timeout_for_mixed_entries() {
    let t0 = Instant::now();
    let mut table = Liveness::new(77);
    let app_lane = table.insert_connection(ConnId(1), t0);
    let completion_lane = table.insert_connection(ConnId(2), t0 + ms(250));
    let client_server = table.insert_connection(ConnId(3), t0 + ms(1_100));
    let publishers: Vec<_> = (0..3)
        .map(|k| table.insert_publisher(t0 + ms(400 * k)))
        .collect();
    let beacon = table.insert_beacon(t0 + ms(700));
    let connections = [app_lane, completion_lane, client_server];

    let earliest = |table: &Liveness| -> Option<Instant> {
        let probes = connections
            .iter()
            .filter_map(|&k| table.probe(k).and_then(ProbeTracker::poll_timeout));
        let watches = publishers
            .iter()
            .filter_map(|&k| table.publisher(k).and_then(PublisherWatch::poll_timeout));
        let beacons = table.beacon(beacon).and_then(BeaconSchedule::poll_timeout);
        probes.chain(watches).chain(beacons).min()
    };

    let mut now = t0 + ms(1_100);
    let mut wakeups = 0;
    let mut beacons_sent = 0;
    let mut silences = Vec::new();
    let mut idle_wakeups = 0;
    loop {
        let mut busy = false;
        // Drain what is due now: probes answered only on the application lane and on
        // ClientServer, beacons counted; publisher 0 hears beacons until 20 s.
        while let Some(t) = table.poll_transmit(now) {
            busy = true;
            match t {
                Transmit::Probe { key, conn, id } if key != completion_lane => {
                    assert_eq!(
                        table.handle_ack(key, conn, id, now),
                        Ok(AckOutcome::Accepted)
                    );
                }
                Transmit::Probe { .. } => {}
                Transmit::Beacon { key } => {
                    assert_eq!(key, beacon);
                    beacons_sent += 1;
                    if now < t0 + secs(20) {
                        let d = table.handle_fanout(publishers[0], FanoutInput::Beacon, now);
                        assert_eq!(d, Ok(Delivery::Consume));
                    }
                }
            }
        }
        while let Some((key, event)) = table.poll_event() {
            busy = true;
            if event.failure_reason().is_some() {
                silences.push((now - t0, key, event.failure_reason()));
            }
        }
        if !busy {
            idle_wakeups += 1;
        }
        assert_eq!(table.poll_timeout(), earliest(&table), "at {:?}", now - t0);
        let Some(next) = table.poll_timeout() else {
            panic!("the beacon schedule always has a timer");
        };
        if next > t0 + secs(60) {
            break;
        }
        assert!(next > now, "time moves forward");
        now = next;
        table.handle_timeout(now);
        wakeups += 1;
    }
    // Beacons at 0.7 s + 5 k up to 60 s: 12; the completion lane dies 15 s after ready;
    // publishers 1 and 2 never speak (silence 15 s after creation); publisher 0 15 s after
    // its last beacon (at 15.7 s).
    assert_eq!(beacons_sent, 12);
    assert_eq!(
        silences,
        vec![
            (
                ms(15_250),
                completion_lane,
                Some(FailureReason::DeadlineExceeded)
            ),
            (
                ms(15_400),
                publishers[1],
                Some(FailureReason::FanoutSilence)
            ),
            (
                ms(15_800),
                publishers[2],
                Some(FailureReason::FanoutSilence)
            ),
            (
                ms(30_700),
                publishers[0],
                Some(FailureReason::FanoutSilence)
            ),
        ]
    );
    assert!(wakeups > 20);
    assert_eq!(idle_wakeups, 0, "no spurious wake-up");
    assert!(table.probe(app_lane).is_some_and(|t| !t.is_dead()));
    assert!(table.probe(client_server).is_some_and(|t| !t.is_dead()));

    // Removing everything leaves no timer at all (F6).
    table.clear();
    assert_eq!(table.poll_timeout(), None);
    assert!(table.is_empty());
}
