//! L4, L5, F2: Classic fanout: the beacon grid, a publisher's readiness and silence, and
//! malformed reserved-topic messages.

use std::time::{Duration, Instant};

use zmesh::proto::liveness::{
    AckOutcome, BeaconSchedule, Delivery, FanoutInput, FanoutProtocolError, Liveness,
    LivenessEvent, PublisherEvent, PublisherStatus, PublisherWatch, Transmit, PEER_DEADLINE,
    PROBE_INTERVAL,
};
use zmesh::proto::state::FailureReason;
use zmesh::proto::ConnId;

use super::{ms, secs, NS};

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
