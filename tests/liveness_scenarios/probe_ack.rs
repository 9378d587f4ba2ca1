//! L2, L6: PROBE and ACK on RouteMesh and ClientServer connections: one pending id, the
//! first matching ACK, the deadline 15 s after it, and nothing from an old connection.

use std::time::{Duration, Instant};

use zmesh::proto::liveness::{
    AckOutcome, Liveness, LivenessEvent, ProbeEvent, ProbeTracker, Transmit, PEER_DEADLINE,
    PROBE_INTERVAL,
};
use zmesh::proto::ConnId;

use super::{ms, probe, secs, tracker, wake, NS};

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
