//! Liveness scenarios over the public sans-IO API, with a manual clock that jumps to the next
//! `poll_timeout()` (MISSION L1-L8, F2). Every test names the requirement it proves.
//!
//! Time: `t0` is read once per test; every later instant is `t0 + Duration`. Nothing sleeps,
//! so minutes of protocol time run in milliseconds.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use zmesh::proto::liveness::{
    AckOutcome, BeaconSchedule, Delivery, FanoutInput, FanoutProtocolError, Liveness,
    LivenessEvent, ProbeEvent, ProbeIdSource, ProbeTracker, PublisherEvent, PublisherStatus,
    PublisherWatch, Transmit, COALESCE_WINDOW, PEER_DEADLINE, PROBE_INTERVAL,
};
use zmesh::proto::state::FailureReason;
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

// ---------------------------------------------------------------------------------------
// L1: fixed timing
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// L2: probe / ACK on RouteMesh and ClientServer
// ---------------------------------------------------------------------------------------

/// L1, L2: with no application traffic at all, a probe goes out every 5 s (first one at
/// ready), and a peer that answers keeps the connection ready for as long as it answers.
#[test]
fn l1_l2_probe_every_5s_without_application_traffic() {
    let t0 = Instant::now();
    let conn = ConnId(7);
    let mut t = tracker(7, t0);
    let mut now = t0;
    let mut sent_at = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..24 {
        let Some(id) = probe(&mut t, now) else {
            panic!("a probe is due at {:?}", now - t0);
        };
        assert_ne!(id, 0, "probe ids are non-zero");
        sent_at.push(now - t0);
        ids.push(id);
        assert_eq!(t.handle_ack(conn, id, now + ms(15)), AckOutcome::Accepted);
        assert_eq!(probe(&mut t, now + ms(15)), None, "one probe per cycle");
        now = wake(&mut t);
        assert_eq!(t.poll_event(), None);
    }
    let expected: Vec<Duration> = (0..24).map(|k| PROBE_INTERVAL * k).collect();
    assert_eq!(sent_at, expected);
    // Each cycle had no pending id (the last one was ACKed), so each drew a fresh one.
    for pair in ids.windows(2) {
        assert_ne!(pair[0], pair[1]);
    }
    assert!(!t.is_dead());
    assert_eq!(t.stats().probes_sent, 24);
    assert_eq!(t.stats().probes_resent, 0);
    assert_eq!(t.stats().app_receives, 0);
}

/// L2: at most one pending id; while it is pending every cycle resends the same id.
#[test]
fn l2_one_pending_id_is_resent_every_cycle() {
    let t0 = Instant::now();
    let mut t = tracker(1, t0);
    let Some(first) = probe(&mut t, t0) else {
        panic!("probe due at ready");
    };
    assert_eq!(t.pending_id(), Some(first));
    let mut now = t0;
    let mut resent = Vec::new();
    while !t.is_dead() {
        now = wake(&mut t);
        if let Some(id) = probe(&mut t, now) {
            resent.push((now - t0, id));
            assert_eq!(t.pending_id(), Some(first));
        }
    }
    assert_eq!(resent, vec![(secs(5), first), (secs(10), first)]);
    assert_eq!(t.stats().probes_sent, 1);
    assert_eq!(t.stats().probes_resent, 2);
    assert_eq!(now, t0 + PEER_DEADLINE);
}

/// L2: only the first ACK matching the pending id refreshes the deadline; the copy that
/// follows (the peer answered a resent probe twice) changes nothing.
#[test]
fn l2_only_the_first_matching_ack_refreshes_the_deadline() {
    let t0 = Instant::now();
    let conn = ConnId(3);
    let mut t = tracker(3, t0);
    let Some(id) = probe(&mut t, t0) else {
        panic!("probe due at ready");
    };
    // Unanswered at 0 s; resent at 5 s.
    let now = wake(&mut t);
    assert_eq!(probe(&mut t, now), Some(id));
    assert_eq!(t.deadline(), Some(t0 + secs(15)));

    // Both copies are answered.
    assert_eq!(t.handle_ack(conn, id, t0 + ms(5_100)), AckOutcome::Accepted);
    assert_eq!(t.deadline(), Some(t0 + ms(20_100)));
    assert_eq!(t.pending_id(), None);
    assert_eq!(
        t.handle_ack(conn, id, t0 + ms(5_200)),
        AckOutcome::Duplicate
    );
    assert_eq!(
        t.deadline(),
        Some(t0 + ms(20_100)),
        "a duplicate does not move it"
    );
    assert_eq!(t.last_ack_at(), Some(t0 + ms(5_100)));
    assert_eq!(t.stats().acks_accepted, 1);
    assert_eq!(t.stats().acks_duplicate, 1);
}

/// L2, L6: duplicate, stale, unknown, zero and other-connection ACKs change nothing: not the
/// pending id, not the deadline, not the verdict instant.
#[test]
fn l2_duplicate_stale_and_other_connection_acks_change_nothing() {
    let t0 = Instant::now();
    let conn = ConnId(10);
    let mut t = tracker(10, t0);
    // Two answered cycles: x at 0 s, y at 5 s.
    let Some(x) = probe(&mut t, t0) else {
        panic!("probe due at ready");
    };
    assert_eq!(t.handle_ack(conn, x, t0 + ms(10)), AckOutcome::Accepted);
    let now = wake(&mut t);
    let Some(y) = probe(&mut t, now) else {
        panic!("probe due at 5 s");
    };
    assert_eq!(t.handle_ack(conn, y, t0 + ms(5_010)), AckOutcome::Accepted);
    // z at 10 s stays pending.
    let now = wake(&mut t);
    let Some(z) = probe(&mut t, now) else {
        panic!("probe due at 10 s");
    };
    assert!(x != y && y != z && x != z);
    let deadline = t0 + ms(20_010);
    assert_eq!(t.deadline(), Some(deadline));

    let at = t0 + secs(11);
    let cases = [
        (conn, y, AckOutcome::Duplicate),
        (conn, x, AckOutcome::Stale),
        (ConnId(11), z, AckOutcome::OtherConnection),
        (ConnId(9), z, AckOutcome::OtherConnection),
        (conn, 0, AckOutcome::Unsolicited),
        (conn, z.wrapping_add(1_000), AckOutcome::Unsolicited),
    ];
    for (from, id, expected) in cases {
        assert_eq!(t.handle_ack(from, id, at), expected, "ack {id} on {from}");
        assert_eq!(t.pending_id(), Some(z));
        assert_eq!(t.deadline(), Some(deadline));
        assert_eq!(t.last_ack_at(), Some(t0 + ms(5_010)));
    }
    let stats = *t.stats();
    assert_eq!(
        (
            stats.acks_duplicate,
            stats.acks_stale,
            stats.acks_other_connection,
            stats.acks_unsolicited
        ),
        (1, 1, 2, 2)
    );

    // The verdict still falls exactly where the last accepted ACK put it.
    while !t.is_dead() {
        let now = wake(&mut t);
        let _ = probe(&mut t, now);
    }
    assert_eq!(t.dead_at(), Some(deadline));
}

/// L2: application traffic only updates the last-receive time; a peer that floods us with
/// data but never ACKs is not-ready exactly 15 s after ready.
#[test]
fn l2_application_traffic_never_extends_the_deadline() {
    let t0 = Instant::now();
    let mut t = tracker(5, t0);
    let mut now = t0;
    let mut next_data = t0;
    while !t.is_dead() {
        let _ = probe(&mut t, now);
        let Some(timer) = t.poll_timeout() else {
            panic!("alive tracker without timer");
        };
        // Data every 100 ms, interleaved with the tracker's own wake-ups.
        if next_data < timer {
            now = next_data;
            t.handle_app_traffic(now);
            next_data += ms(100);
        } else {
            now = timer;
            t.handle_timeout(now);
        }
    }
    assert_eq!(t.dead_at(), Some(t0 + PEER_DEADLINE));
    assert_eq!(t.last_app_receive_at(), Some(t0 + ms(14_900)));
    assert_eq!(t.stats().app_receives, 150);
    assert_eq!(
        t.poll_event(),
        Some(ProbeEvent::DeadlineExceeded {
            conn: ConnId(5),
            last_ack_at: None
        })
    );
}

/// L2, L6: a half-open connection (our probes arrive, the peer's ACKs no longer do) is
/// not-ready exactly 15 s after the last valid ACK - and not one nanosecond earlier. After the
/// verdict the tracker is inert: no timer, no probe, no second event, no revival.
#[test]
fn l2_l6_half_open_connection_is_not_ready_exactly_15s_after_the_last_valid_ack() {
    let t0 = Instant::now();
    let conn = ConnId(4);
    let mut t = tracker(4, t0);
    let mut now = t0;
    // Healthy for 30 s: every probe answered after 25 ms.
    let mut last_ack = None;
    while now < t0 + secs(30) {
        if let Some(id) = probe(&mut t, now) {
            let at = now + ms(25);
            assert_eq!(t.handle_ack(conn, id, at), AckOutcome::Accepted);
            last_ack = Some(at);
        }
        now = wake(&mut t);
    }
    let Some(last_ack) = last_ack else {
        panic!("no ack accepted");
    };
    // The return path breaks: probes still go out, nothing comes back.
    let deadline = last_ack + PEER_DEADLINE;
    assert_eq!(last_ack, t0 + ms(25_025));
    let mut pending = None;
    loop {
        if let Some(id) = probe(&mut t, now) {
            assert!(pending.is_none() || pending == Some(id), "same id resent");
            pending = Some(id);
        }
        let Some(next) = t.poll_timeout() else {
            panic!("alive tracker without timer");
        };
        if next >= deadline {
            assert_eq!(next, deadline, "the wake-up is the deadline itself");
            break;
        }
        now = next;
        t.handle_timeout(now);
    }
    t.handle_timeout(deadline - NS);
    assert!(
        !t.is_dead(),
        "one nanosecond before the deadline it is still ready"
    );
    assert_eq!(t.poll_event(), None);
    t.handle_timeout(deadline);
    assert_eq!(t.dead_at(), Some(deadline));
    assert_eq!(
        t.poll_event(),
        Some(ProbeEvent::DeadlineExceeded {
            conn,
            last_ack_at: Some(last_ack)
        })
    );
    assert_eq!(t.poll_timeout(), None);
    assert_eq!(probe(&mut t, deadline + secs(5)), None);
    let Some(late) = pending else {
        panic!("a probe was pending");
    };
    assert_eq!(
        t.handle_ack(conn, late, deadline + ms(1)),
        AckOutcome::AfterDeadline
    );
    t.handle_timeout(deadline + secs(60));
    assert_eq!(t.poll_event(), None, "one verdict only");
    assert!(t.is_dead());
}

/// L6, F4: after a reconnect under the same table key, a late ACK from the old physical
/// connection is not evidence for the new one, and the old connection's verdict never
/// reaches the new one.
#[test]
fn l6_late_ack_from_the_old_connection_never_touches_the_new_one() {
    let t0 = Instant::now();
    let mut table = Liveness::new(9);
    let old = ConnId(20);
    let key = table.insert_connection(old, t0);
    let Some(Transmit::Probe { id: old_id, .. }) = table.poll_transmit(t0) else {
        panic!("probe due at ready");
    };
    // The old connection closes in an orderly way at 3 s: it is replaced at once, no 15 s wait.
    let new = ConnId(21);
    let reconnect = t0 + secs(3);
    assert_eq!(table.replace_connection(key, new, reconnect), Ok(()));
    let Some(Transmit::Probe {
        conn, id: new_id, ..
    }) = table.poll_transmit(reconnect)
    else {
        panic!("probe due at the new ready");
    };
    assert_eq!(conn, new);
    // The old connection's ACK arrives late.
    assert_eq!(
        table.handle_ack(key, old, old_id, reconnect + ms(5)),
        Ok(AckOutcome::OtherConnection)
    );
    let new_tracker = table.probe(key);
    assert_eq!(
        new_tracker.map(ProbeTracker::pending_id),
        Some(Some(new_id))
    );
    assert_eq!(
        new_tracker.and_then(ProbeTracker::deadline),
        Some(reconnect + PEER_DEADLINE)
    );
    // The old connection would have died at 15 s; nothing happens then. The only verdict is
    // the new connection's own, 15 s after it became ready.
    let mut now = reconnect;
    let mut events = Vec::new();
    while now < reconnect + secs(20) {
        let Some(next) = table.poll_timeout() else {
            break;
        };
        now = next;
        table.handle_timeout(now);
        while table.poll_transmit(now).is_some() {}
        while let Some((k, event)) = table.poll_event() {
            events.push((now - t0, k, event));
        }
    }
    assert_eq!(
        events,
        vec![(
            secs(18),
            key,
            LivenessEvent::Probe(ProbeEvent::DeadlineExceeded {
                conn: new,
                last_ack_at: None
            })
        )]
    );
}

// ---------------------------------------------------------------------------------------
// L4, L5, F2: Classic fanout
// ---------------------------------------------------------------------------------------

/// L4: a PUB socket sends a beacon at bind and then every 5 s on a fixed grid, whatever the
/// application publishes; a late wake-up sends one beacon, not a burst.
#[test]
fn l4_beacon_every_5s_from_bind_whatever_else_is_sent() {
    let t0 = Instant::now();
    let mut schedule = BeaconSchedule::new(t0);
    assert_eq!(schedule.poll_timeout(), Some(t0));
    let mut sent = Vec::new();
    let mut now = t0;
    for _ in 0..13 {
        assert!(schedule.poll_transmit(now), "beacon due at {:?}", now - t0);
        assert!(!schedule.poll_transmit(now), "one beacon per tick");
        sent.push(now - t0);
        // Application records published in between do not touch the schedule (it has no
        // input for them at all); the next beacon is exactly 5 s after this one.
        let Some(next) = schedule.poll_timeout() else {
            panic!("a schedule always has a next beacon");
        };
        assert!(
            !schedule.poll_transmit(next - NS),
            "not one nanosecond early"
        );
        now = next;
    }
    let expected: Vec<Duration> = (0..13).map(|k| PROBE_INTERVAL * k).collect();
    assert_eq!(sent, expected);
    assert_eq!(schedule.sent(), 13);

    // The shell oversleeps by 12.3 s: one beacon, and the grid is kept.
    let late = now + ms(12_300);
    assert!(schedule.poll_transmit(late));
    assert!(!schedule.poll_transmit(late));
    assert_eq!(schedule.poll_timeout(), Some(now + secs(15)));
}

/// L5: an exact beacon makes a waiting publisher ready (consumed, not delivered); beacons
/// keep it ready; 15 s of silence makes it not-ready exactly 15 s after the last beacon.
#[test]
fn l5_beacon_makes_a_publisher_ready_and_15s_silence_fails_it() {
    let t0 = Instant::now();
    let mut watch = PublisherWatch::new(t0);
    assert_eq!(watch.status(), PublisherStatus::Waiting);
    assert!(
        !watch.is_ready(),
        "a connected socket is not ready by itself"
    );

    assert_eq!(
        watch.handle_input(FanoutInput::Beacon, t0 + secs(2)),
        Delivery::Consume
    );
    assert_eq!(watch.poll_event(), Some(PublisherEvent::BecameReady));
    assert!(watch.is_ready());
    for k in 1..=4 {
        let at = t0 + secs(2) + PROBE_INTERVAL * k;
        assert_eq!(
            watch.handle_input(FanoutInput::Beacon, at),
            Delivery::Consume
        );
    }
    assert_eq!(watch.poll_event(), None, "ready once, not per beacon");
    let last = t0 + secs(22);
    assert_eq!(watch.last_receive_at(), Some(last));
    // The publisher falls silent.
    let deadline = last + PEER_DEADLINE;
    assert_eq!(watch.poll_timeout(), Some(deadline));
    watch.handle_timeout(deadline - NS);
    assert!(watch.is_ready(), "not one nanosecond early");
    watch.handle_timeout(deadline);
    assert_eq!(watch.status(), PublisherStatus::Failed);
    assert_eq!(
        watch.poll_event(),
        Some(PublisherEvent::Silence {
            last_receive_at: Some(last)
        })
    );
    assert_eq!(watch.poll_timeout(), None);
    // A frame still buffered from the old socket changes nothing.
    assert_eq!(
        watch.handle_input(FanoutInput::Record, deadline + ms(1)),
        Delivery::Discard
    );
    assert_eq!(watch.poll_event(), None);
    assert_eq!(watch.stats().beacons, 5);
    assert_eq!(
        watch.stats().records,
        0,
        "beacons are not application records"
    );
}

/// L5: the first well-formed application record also makes a publisher ready, and is
/// delivered.
#[test]
fn l5_first_record_makes_a_publisher_ready_and_is_delivered() {
    let t0 = Instant::now();
    let mut watch = PublisherWatch::new(t0);
    assert_eq!(
        watch.handle_input(FanoutInput::Record, t0 + ms(300)),
        Delivery::Deliver
    );
    assert_eq!(watch.poll_event(), Some(PublisherEvent::BecameReady));
    assert_eq!(watch.ready_at(), Some(t0 + ms(300)));
    assert_eq!(watch.poll_timeout(), Some(t0 + ms(15_300)));
}

/// L5, F4: a publisher that never speaks gets its socket recreated every 15 s: the silence
/// timer runs from socket creation, and each new socket starts waiting (not ready) again.
#[test]
fn l5_silent_publisher_socket_is_recreated_every_15s() {
    let t0 = Instant::now();
    let mut watch = PublisherWatch::new(t0);
    let mut failures = Vec::new();
    for _ in 0..4 {
        let Some(at) = watch.poll_timeout() else {
            panic!("a waiting watch has a silence timer");
        };
        watch.handle_timeout(at);
        assert_eq!(
            watch.poll_event(),
            Some(PublisherEvent::Silence {
                last_receive_at: None
            })
        );
        failures.push(at - t0);
        // The shell closes the socket and creates a new one at once.
        watch.reset(at);
        assert_eq!(watch.status(), PublisherStatus::Waiting);
    }
    assert_eq!(failures, vec![secs(15), secs(30), secs(45), secs(60)]);
    assert_eq!(watch.stats().sockets, 5);
    assert_eq!(watch.stats().silences, 4);
}

/// L5, F2, W3: a record on the reserved beacon topic with a wrong payload or frame count is a
/// protocol error: nothing is delivered and only that publisher is not-ready at once. The
/// other publishers and the RouteMesh connection in the same table carry on untouched.
#[test]
fn l5_f2_malformed_reserved_topic_fails_only_that_publisher() {
    let t0 = Instant::now();
    let mut table = Liveness::new(5);
    let publishers: Vec<_> = (0..3).map(|_| table.insert_publisher(t0)).collect();
    let conn = ConnId(1);
    let lane = table.insert_connection(conn, t0);
    let bad = publishers[1];

    let mut delivered = Vec::new();
    let mut events = Vec::new();
    let mut now = t0;
    let mut next_beacon = t0 + ms(500);
    let end = t0 + secs(120);
    while now < end {
        let timer = table.poll_timeout().unwrap_or(end);
        if next_beacon <= timer {
            now = next_beacon;
            next_beacon += PROBE_INTERVAL;
            for &p in &publishers {
                // Publisher 1 sends a malformed beacon at 10.5 s, then keeps beaconing on
                // its old socket (those frames are discarded).
                let input = if p == bad && now == t0 + ms(10_500) {
                    FanoutInput::Malformed {
                        reserved_topic: true,
                    }
                } else {
                    FanoutInput::Beacon
                };
                match table.handle_fanout(p, input, now) {
                    Ok(Delivery::Deliver) => delivered.push(p),
                    Ok(Delivery::ProtocolError(e)) => {
                        assert_eq!(p, bad);
                        assert_eq!(e, FanoutProtocolError::MalformedBeacon);
                        assert_eq!(
                            table.publisher(bad).map(PublisherWatch::status),
                            Some(PublisherStatus::Failed),
                            "not-ready at once"
                        );
                    }
                    Ok(Delivery::Consume | Delivery::Discard) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        } else {
            now = timer;
            table.handle_timeout(now);
        }
        while let Some(t) = table.poll_transmit(now) {
            if let Transmit::Probe { key, conn, id } = t {
                assert_eq!(
                    table.handle_ack(key, conn, id, now + ms(3)),
                    Ok(AckOutcome::Accepted)
                );
            }
        }
        while let Some((key, event)) = table.poll_event() {
            events.push((now - t0, key, event));
        }
    }
    assert!(delivered.is_empty(), "nothing delivered: {delivered:?}");
    let failures: Vec<_> = events
        .iter()
        .filter(|(_, _, e)| e.failure_reason().is_some())
        .collect();
    assert_eq!(
        failures,
        vec![&(
            ms(10_500),
            bad,
            LivenessEvent::Publisher(PublisherEvent::ProtocolError(
                FanoutProtocolError::MalformedBeacon
            ))
        )]
    );
    assert_eq!(
        failures[0].2.failure_reason(),
        Some(FailureReason::ProtocolError)
    );
    for &p in &publishers {
        let ready = table.publisher(p).is_some_and(PublisherWatch::is_ready);
        assert_eq!(ready, p != bad, "only the bad publisher is not-ready");
    }
    assert!(table.probe(lane).is_some_and(|t| !t.is_dead()));
    let discarded = table.publisher(bad).map(|w| w.stats().discarded);
    assert_eq!(
        discarded,
        Some(21),
        "later beacons on the failed socket are discarded"
    );
}

/// L5, W3: a malformed application record is a protocol error too (reported as such), and a
/// failed watch comes back only through a new socket.
#[test]
fn l5_malformed_record_is_a_protocol_error_and_reset_starts_over() {
    let t0 = Instant::now();
    let mut watch = PublisherWatch::new(t0);
    assert_eq!(
        watch.handle_input(FanoutInput::Record, t0),
        Delivery::Deliver
    );
    let bad = FanoutInput::Malformed {
        reserved_topic: false,
    };
    assert_eq!(
        watch.handle_input(bad, t0 + secs(1)),
        Delivery::ProtocolError(FanoutProtocolError::MalformedRecord)
    );
    assert_eq!(watch.poll_event(), Some(PublisherEvent::BecameReady));
    assert_eq!(
        watch.poll_event(),
        Some(PublisherEvent::ProtocolError(
            FanoutProtocolError::MalformedRecord
        ))
    );
    assert!(!watch.is_ready());
    watch.reset(t0 + secs(1));
    assert_eq!(watch.status(), PublisherStatus::Waiting);
    assert_eq!(
        watch.ready_at(),
        None,
        "no ready state survives the old socket"
    );
    assert_eq!(
        watch.handle_input(FanoutInput::Beacon, t0 + secs(2)),
        Delivery::Consume
    );
    assert_eq!(watch.poll_event(), Some(PublisherEvent::BecameReady));
    assert_eq!(watch.stats().readies, 2);
}

// ---------------------------------------------------------------------------------------
// L3: a sans-IO node pair over a simulated link
// ---------------------------------------------------------------------------------------

/// What travels on the simulated link. Liveness frames and application frames share it, as
/// probes and ACKs share the Application lane with data (seed 002 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Probe(u64),
    Ack(u64),
    App(u32),
    Beacon,
    Record(u32),
}

/// One direction of a link: constant latency (so FIFO), deterministic loss (every
/// `drop_every`-th frame), and partition windows during which everything is lost.
struct Wire {
    latency: Duration,
    drop_every: u64,
    partitions: Vec<(Instant, Instant)>,
    in_flight: VecDeque<(Instant, Frame)>,
    sent: u64,
    lost: u64,
}

impl Wire {
    fn new(latency: Duration, drop_every: u64) -> Self {
        Self {
            latency,
            drop_every,
            partitions: Vec::new(),
            in_flight: VecDeque::new(),
            sent: 0,
            lost: 0,
        }
    }

    fn send(&mut self, now: Instant, frame: Frame) {
        self.sent += 1;
        let dropped = self.drop_every != 0 && self.sent.is_multiple_of(self.drop_every);
        let partitioned = self.partitions.iter().any(|&(a, b)| a <= now && now < b);
        if dropped || partitioned {
            self.lost += 1;
        } else {
            self.in_flight.push_back((now + self.latency, frame));
        }
    }

    fn next_arrival(&self) -> Option<Instant> {
        self.in_flight.front().map(|&(at, _)| at)
    }

    fn pop_due(&mut self, now: Instant) -> Option<Frame> {
        if self.next_arrival()? <= now {
            self.in_flight.pop_front().map(|(_, frame)| frame)
        } else {
            None
        }
    }
}

/// One node's view of the pair: its tracker for its side of the connection, what reached its
/// application, and optionally a fanout publisher (A) or subscriber (B).
struct Node {
    conn: ConnId,
    tracker: ProbeTracker,
    application: Vec<Frame>,
    verdict: Option<(Instant, ProbeEvent)>,
    beacons: Option<BeaconSchedule>,
    watch: Option<PublisherWatch>,
    watch_events: Vec<(Instant, PublisherEvent)>,
}

impl Node {
    fn new(conn: ConnId, seed: u64, now: Instant) -> Self {
        Self {
            conn,
            tracker: ProbeTracker::new(conn, now, ProbeIdSource::new(seed)),
            application: Vec::new(),
            verdict: None,
            beacons: None,
            watch: None,
            watch_events: Vec::new(),
        }
    }

    /// The receive path of the shell: internal signals are handled here and only
    /// application frames reach `application`.
    fn receive(&mut self, frame: Frame, now: Instant, back: &mut Wire) {
        match frame {
            // Answer by echoing the id; the receiver's own tracker is not involved.
            Frame::Probe(id) => back.send(now, Frame::Ack(id)),
            Frame::Ack(id) => {
                let _ = self.tracker.handle_ack(self.conn, id, now);
            }
            Frame::App(_) => {
                self.tracker.handle_app_traffic(now);
                self.application.push(frame);
            }
            Frame::Beacon | Frame::Record(_) => {
                let input = if frame == Frame::Beacon {
                    FanoutInput::Beacon
                } else {
                    FanoutInput::Record
                };
                let Some(watch) = self.watch.as_mut() else {
                    return;
                };
                if watch.handle_input(input, now) == Delivery::Deliver {
                    self.application.push(frame);
                }
            }
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        [
            self.tracker.poll_timeout(),
            self.beacons.as_ref().and_then(BeaconSchedule::poll_timeout),
            self.watch.as_ref().and_then(PublisherWatch::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn on_time(&mut self, now: Instant, out: &mut Wire, fanout: &mut Wire) {
        self.tracker.handle_timeout(now);
        if let Some(watch) = self.watch.as_mut() {
            watch.handle_timeout(now);
            while let Some(event) = watch.poll_event() {
                self.watch_events.push((now, event));
            }
        }
        while let Some(id) = self.tracker.poll_transmit(now) {
            out.send(now, Frame::Probe(id));
        }
        if let Some(beacons) = self.beacons.as_mut() {
            if beacons.poll_transmit(now) {
                fanout.send(now, Frame::Beacon);
            }
        }
        if let Some(event) = self.tracker.poll_event() {
            self.verdict = Some((now, event));
        }
    }
}

/// Two nodes, a bidirectional RouteMesh-like link and a one-way fanout link from A to B.
struct Pair {
    now: Instant,
    a: Node,
    b: Node,
    ab: Wire,
    ba: Wire,
    fanout: Wire,
}

impl Pair {
    fn next_wakeup(&self) -> Option<Instant> {
        [
            self.a.next_timer(),
            self.b.next_timer(),
            self.ab.next_arrival(),
            self.ba.next_arrival(),
            self.fanout.next_arrival(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Jumps from wake-up to wake-up until `end` (or until nothing is left to do).
    fn drive_until(&mut self, end: Instant) {
        while let Some(next) = self.next_wakeup().filter(|&t| t <= end) {
            self.now = next;
            let now = next;
            while let Some(frame) = self.ab.pop_due(now) {
                self.b.receive(frame, now, &mut self.ba);
            }
            while let Some(frame) = self.ba.pop_due(now) {
                self.a.receive(frame, now, &mut self.ab);
            }
            while let Some(frame) = self.fanout.pop_due(now) {
                self.b.receive(frame, now, &mut self.ba);
            }
            self.a.on_time(now, &mut self.ab, &mut self.fanout);
            self.b.on_time(now, &mut self.ba, &mut self.fanout);
        }
        self.now = end;
    }
}

/// L3 (with L2, L4, L5): probes, ACKs and beacons never reach the application. Two sans-IO
/// nodes run liveness for five minutes over a lossy link with no application traffic: their
/// application lists stay empty while thousands of liveness frames flow. A positive control
/// shows the same harness does deliver application frames. Then a partition makes both
/// sides not-ready exactly 15 s after their last valid ACK, and the subscriber's publisher
/// not-ready 15 s after its last beacon - still without a single application delivery.
#[test]
fn l3_probes_acks_and_beacons_never_reach_the_application() {
    let t0 = Instant::now();
    let mut a = Node::new(ConnId(100), 1, t0);
    a.beacons = Some(BeaconSchedule::new(t0));
    let mut b = Node::new(ConnId(200), 2, t0);
    b.watch = Some(PublisherWatch::new(t0));
    let mut pair = Pair {
        now: t0,
        a,
        b,
        ab: Wire::new(ms(30), 7),
        ba: Wire::new(ms(30), 7),
        fanout: Wire::new(ms(5), 0),
    };
    let partition = (t0 + secs(301), t0 + secs(400));
    pair.ab.partitions.push(partition);
    pair.ba.partitions.push(partition);
    pair.fanout.partitions.push(partition);

    // Five minutes of liveness only, with every 7th frame lost in each direction.
    pair.drive_until(t0 + secs(300));
    assert!(pair.a.application.is_empty() && pair.b.application.is_empty());
    assert_eq!(pair.a.verdict, None);
    assert_eq!(pair.b.verdict, None);
    assert!(pair.b.watch.as_ref().is_some_and(PublisherWatch::is_ready));
    assert!(pair.ab.lost > 0 && pair.ba.lost > 0, "loss was injected");
    for node in [&pair.a, &pair.b] {
        let stats = node.tracker.stats();
        // One probe per 5 s cycle from 0 s to 300 s, new or resent.
        assert_eq!(stats.probes_sent + stats.probes_resent, 61, "{stats:?}");
        assert!(
            stats.probes_resent > 0,
            "lost probes were resent: {stats:?}"
        );
        assert!(stats.acks_accepted >= 40, "{stats:?}");
        assert_eq!(stats.app_receives, 0);
    }
    let watch_stats = pair.b.watch.as_ref().map(|w| *w.stats());
    // Beacons sent at 0 s, 5 s, ..., 295 s have arrived (the one sent at 300 s is in flight).
    assert_eq!(watch_stats.map(|s| (s.beacons, s.records)), Some((60, 0)));

    // Positive control: application frames do reach the application, on both paths.
    pair.ab.send(pair.now, Frame::App(1));
    pair.fanout.send(pair.now, Frame::Record(2));
    pair.drive_until(t0 + ms(300_500));
    assert_eq!(pair.b.application, vec![Frame::Record(2), Frame::App(1)]);

    // Partition from 301 s: both trackers die exactly 15 s after their last accepted ACK.
    pair.drive_until(t0 + secs(340));
    for node in [&pair.a, &pair.b] {
        let Some(last_ack) = node.tracker.last_ack_at() else {
            panic!("acks were accepted");
        };
        assert!(last_ack < partition.0 + pair.ab.latency);
        assert_eq!(
            node.verdict,
            Some((
                last_ack + PEER_DEADLINE,
                ProbeEvent::DeadlineExceeded {
                    conn: node.conn,
                    last_ack_at: Some(last_ack)
                }
            ))
        );
    }
    let last_beacon = pair
        .b
        .watch
        .as_ref()
        .and_then(PublisherWatch::last_receive_at);
    let Some(last_beacon) = last_beacon else {
        panic!("beacons arrived");
    };
    assert_eq!(
        pair.b.watch_events.last(),
        Some(&(
            last_beacon + PEER_DEADLINE,
            PublisherEvent::Silence {
                last_receive_at: Some(last_beacon)
            }
        ))
    );
    assert!(pair.a.application.is_empty());
    assert_eq!(pair.b.application, vec![Frame::Record(2), Frame::App(1)]);
}

// ---------------------------------------------------------------------------------------
// L8: one structure owns liveness
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// L2: property - arbitrary ACK interleavings
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Coalescing: one wake-up for every probe and beacon due within the window
// ---------------------------------------------------------------------------------------

/// L1: the coalescing window is a constant of a few milliseconds, far below the 5 s period.
#[test]
fn l1_coalescing_window_is_a_small_constant() {
    assert_eq!(COALESCE_WINDOW, ms(10));
    assert!(COALESCE_WINDOW * 100 < PROBE_INTERVAL);
}

/// L1, L2: a coalesced wake-up starts a probe cycle at most `COALESCE_WINDOW` before its
/// instant on the grid `ready + k * 5 s`, never earlier and never after it, and the grid does
/// not move: the next cycle is still due at `ready + (k + 1) * 5 s`.
#[test]
fn l1_l2_coalesced_probe_is_never_late_and_at_most_the_window_early() {
    let t0 = Instant::now();
    let conn = ConnId(3);
    let mut t = tracker(3, t0);
    let Some(first) = probe(&mut t, t0) else {
        panic!("a probe is due at ready");
    };
    assert_eq!(t.handle_ack(conn, first, t0 + ms(1)), AckOutcome::Accepted);
    for k in 1..=6u32 {
        let tick = t0 + PROBE_INTERVAL * k;
        assert_eq!(t.poll_timeout(), Some(tick), "the grid stays where it is");
        // Earlier than the window: nothing starts.
        t.handle_timeout_coalesced(tick - COALESCE_WINDOW - NS);
        assert!(
            !t.is_probe_due(),
            "cycle {k} started more than the window early"
        );
        // Exactly the window early: the cycle starts now, its probe goes out now.
        let early = tick - COALESCE_WINDOW;
        t.handle_timeout_coalesced(early);
        let Some(id) = probe(&mut t, early) else {
            panic!("cycle {k} not started within the window");
        };
        assert_eq!(t.last_probe_at(), Some(early));
        assert_eq!(probe(&mut t, tick), None, "one probe per cycle");
        assert_eq!(t.poll_timeout(), Some(tick + PROBE_INTERVAL));
        assert_eq!(t.handle_ack(conn, id, tick), AckOutcome::Accepted);
    }
    assert!(!t.is_dead());
    assert_eq!(t.stats().probes_sent, 7);
}

/// L2, L6: coalescing never applies a deadline early: a connection whose ACKs stop is
/// not-ready exactly 15 s after its last valid ACK, not one nanosecond before, even when
/// coalesced wake-ups fall inside the window before the deadline (P6 half-open: 15 s).
#[test]
fn l2_l6_coalesced_wakeups_never_apply_the_deadline_early() {
    let t0 = Instant::now();
    let conn = ConnId(9);
    let mut t = tracker(9, t0);
    let Some(id) = probe(&mut t, t0) else {
        panic!("a probe is due at ready");
    };
    let last_ack = t0 + ms(2_300);
    assert_eq!(t.handle_ack(conn, id, last_ack), AckOutcome::Accepted);
    let deadline = last_ack + PEER_DEADLINE;
    let mut now = last_ack;
    while now < deadline - COALESCE_WINDOW {
        now += ms(1);
        t.handle_timeout_coalesced(now);
        while probe(&mut t, now).is_some() {}
        assert!(
            !t.is_dead(),
            "dead at {:?}, before the deadline",
            now - last_ack
        );
    }
    t.handle_timeout_coalesced(deadline - NS);
    assert!(!t.is_dead());
    assert_eq!(t.poll_event(), None);
    t.handle_timeout_coalesced(deadline);
    assert_eq!(t.dead_at(), Some(deadline));
    assert_eq!(
        t.poll_event(),
        Some(ProbeEvent::DeadlineExceeded {
            conn,
            last_ack_at: Some(last_ack)
        })
    );
}

/// L1, L4: a coalesced beacon goes out at most the window before its tick on the grid
/// `bind + k * 5 s`, never after it, and the grid does not move.
#[test]
fn l1_l4_coalesced_beacon_stays_on_its_grid_at_most_the_window_early() {
    let t0 = Instant::now();
    let mut schedule = BeaconSchedule::new(t0);
    assert!(schedule.poll_transmit(t0));
    for k in 1..=4u32 {
        let tick = t0 + PROBE_INTERVAL * k;
        schedule.handle_timeout_coalesced(tick - COALESCE_WINDOW - NS);
        assert!(!schedule.is_due(tick - COALESCE_WINDOW - NS));
        schedule.handle_timeout_coalesced(tick - COALESCE_WINDOW);
        assert!(schedule.poll_transmit(tick - COALESCE_WINDOW));
        assert!(!schedule.poll_transmit(tick), "one beacon per tick");
        assert_eq!(schedule.poll_timeout(), Some(tick + PROBE_INTERVAL));
    }
    assert_eq!(schedule.sent(), 5);
}

/// L1, L2, L8: a table of 1 000 connections that became ready 1 ms apart, every probe
/// answered 1 ms later, driven by a manual clock that jumps to `poll_timeout()` and applies
/// `handle_timeout_coalesced`: every probe goes out within `[tick - COALESCE_WINDOW, tick]`
/// of its own grid, no connection fails, and one wake-up serves every probe due within the
/// window (about ten per wake-up here instead of one).
#[test]
fn l1_l2_l8_one_coalesced_wakeup_serves_every_probe_due_within_the_window() {
    let t0 = Instant::now();
    let mut table = Liveness::new(13);
    let n = 1_000u64;
    let mut ready_at = std::collections::HashMap::new();
    for i in 0..n {
        let at = t0 + ms(i);
        let key = table.insert_connection(ConnId(i + 1), at);
        ready_at.insert(key, at);
        // The first probe of each connection is due at its ready.
        table.handle_timeout_coalesced(at);
        while let Some(Transmit::Probe { key, conn, id }) = table.poll_transmit(at) {
            assert_eq!(
                table.handle_ack(key, conn, id, at),
                Ok(AckOutcome::Accepted)
            );
        }
    }
    let end = t0 + secs(60);
    let mut now = t0 + ms(n);
    let mut acks: VecDeque<(Instant, zmesh::proto::liveness::LinkKey, ConnId, u64)> =
        VecDeque::new();
    let (mut wakeups, mut probes) = (0u64, 0u64);
    loop {
        let next_ack = acks.front().map(|a| a.0);
        let next = [table.poll_timeout(), next_ack].into_iter().flatten().min();
        let Some(next) = next else { break };
        if next > end {
            break;
        }
        assert!(next >= now, "time moves forward");
        now = next;
        while acks.front().is_some_and(|a| a.0 <= now) {
            let Some((at, key, conn, id)) = acks.pop_front() else {
                break;
            };
            assert_eq!(
                table.handle_ack(key, conn, id, at),
                Ok(AckOutcome::Accepted)
            );
        }
        if table.poll_timeout().is_some_and(|t| t <= now) {
            wakeups += 1;
        }
        table.handle_timeout_coalesced(now);
        while let Some(t) = table.poll_transmit(now) {
            let Transmit::Probe { key, conn, id } = t else {
                panic!("only probes in this table");
            };
            probes += 1;
            let ready = ready_at[&key];
            // The cycle this probe belongs to: the first grid instant at or after `now`.
            let since = (now - ready).as_nanos();
            let period = PROBE_INTERVAL.as_nanos();
            let k = since.div_ceil(period) as u32;
            let tick = ready + PROBE_INTERVAL * k;
            assert!(now <= tick, "probe late: {:?} after its tick", now - tick);
            assert!(
                tick - now <= COALESCE_WINDOW,
                "probe {:?} early, more than the window",
                tick - now
            );
            acks.push_back((now + ms(1), key, conn, id));
        }
        if let Some((key, event)) = table.poll_event() {
            panic!("{key}: {event:?}: a connection failed");
        }
    }
    // Every connection probes 12 times more in those 60 s (at ready + 5 s ... + 60 s, minus
    // the last few that fall after the end).
    assert!(probes >= 11 * n, "{probes} probes");
    assert!(
        wakeups * 5 < probes,
        "{wakeups} timer wake-ups for {probes} probes: not coalesced"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// L1, L2: connections ready at arbitrary instants, a shell that wakes for input at
    /// arbitrary instants and otherwise at `poll_timeout()`, applying
    /// `handle_timeout_coalesced` each time, and ACKs that come or do not: every probe goes
    /// out within `[tick - COALESCE_WINDOW, tick]` of its own tick on `ready + k * 5 s`, every
    /// cycle sends exactly one (none skipped, none twice), and a deadline is reached exactly
    /// 15 s after ready or the last accepted ACK, never earlier.
    #[test]
    fn l1_l2_prop_coalesced_probes_never_late_never_beyond_the_window_deadlines_never_early(
        mut readies in proptest::collection::vec(0u64..5_000, 1..20),
        steps in proptest::collection::vec(
            (1u64..3_000, proptest::prelude::any::<bool>()),
            1..150,
        ),
    ) {
        use proptest::{prop_assert, prop_assert_eq};

        struct Conn {
            ready: Instant,
            from: Instant,
            cycles: Vec<u32>,
            dead: bool,
        }
        readies.sort_unstable();
        let t0 = Instant::now();
        let mut table = Liveness::new(5);
        let mut conns = std::collections::HashMap::new();
        let mut pending = readies.iter().map(|r| t0 + ms(*r)).collect::<VecDeque<_>>();
        let mut next_conn = 1;
        let mut now = t0;
        for (advance, answer) in steps {
            // The next wake-up: input at `now + advance`, a new connection, or the timer;
            // whichever comes first.
            now = [Some(now + ms(advance)), pending.front().copied(), table.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now)
                .max(now);
            while pending.front().is_some_and(|r| *r <= now) {
                let Some(ready) = pending.pop_front() else { break };
                let key = table.insert_connection(ConnId(next_conn), ready);
                next_conn += 1;
                conns.insert(key, Conn { ready, from: ready, cycles: Vec::new(), dead: false });
            }
            table.handle_timeout_coalesced(now);
            while let Some(t) = table.poll_transmit(now) {
                let Transmit::Probe { key, conn, id } = t else { continue };
                let c = conns.get_mut(&key).expect("known key");
                let since = (now - c.ready).as_nanos();
                let k = since.div_ceil(PROBE_INTERVAL.as_nanos()) as u32;
                let tick = c.ready + PROBE_INTERVAL * k;
                prop_assert!(tick - now <= COALESCE_WINDOW, "probe {:?} before its tick", tick - now);
                prop_assert_eq!(c.cycles.last().map_or(0, |l| l + 1), k, "cycle skipped or repeated");
                c.cycles.push(k);
                if answer {
                    prop_assert_eq!(table.handle_ack(key, conn, id, now), Ok(AckOutcome::Accepted));
                    c.from = now;
                }
            }
            while let Some((key, event)) = table.poll_event() {
                let c = conns.get_mut(&key).expect("known key");
                prop_assert_eq!(now, c.from + PEER_DEADLINE, "deadline not exact");
                prop_assert!(!c.dead);
                c.dead = true;
                let is_deadline = matches!(event, LivenessEvent::Probe(ProbeEvent::DeadlineExceeded { .. }));
                prop_assert!(is_deadline);
            }
        }
    }
}
