//! L1, L2, L4, L8: coalescing: one wake-up for every probe and beacon due within the
//! window.

use std::collections::VecDeque;
use std::time::Instant;

use zmesh::proto::liveness::{
    AckOutcome, BeaconSchedule, Liveness, LivenessEvent, ProbeEvent, Transmit, COALESCE_WINDOW,
    PEER_DEADLINE, PROBE_INTERVAL,
};
use zmesh::proto::ConnId;

use super::{ms, probe, secs, tracker, NS};

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
