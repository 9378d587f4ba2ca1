//! Probe/ACK liveness of one RouteMesh or ClientServer physical connection (MISSION L2).

use std::num::NonZeroU64;
use std::time::Instant;

use serde::Serialize;

use super::timer::{after, next_tick, Timer, TimerTable};
use super::{COALESCE_WINDOW, PEER_DEADLINE, PROBE_INTERVAL};
use crate::proto::ConnId;

/// Deterministic source of non-zero probe ids for one connection.
///
/// The ids of one source are consecutive (wrapping, skipping 0) from a start derived from the
/// seed, so they never repeat within a connection's lifetime (that would take 2^64 probes) and
/// each id differs from the one before it. Being consecutive also lets the tracker tell an ACK
/// for an id it issued long ago ([`AckOutcome::Stale`]) from one it never issued
/// ([`AckOutcome::Unsolicited`]) in O(1) without keeping a history.
///
/// The seed only spreads the starting point (the shell derives it from the node's lifecycle
/// generation and a per-connection counter); correctness never depends on ids being
/// unpredictable, because ACKs are matched on the physical connection as well as the id.
#[derive(Debug, Clone)]
pub struct ProbeIdSource {
    first: u64,
    next: u64,
    /// Values stepped over since `first`, including a skipped 0.
    span: u64,
}

impl ProbeIdSource {
    /// A source whose sequence is fully determined by `seed`.
    pub fn new(seed: u64) -> Self {
        let first = splitmix64(seed);
        Self {
            first,
            next: first,
            span: 0,
        }
    }

    /// The next id: never 0, never equal to the previous id.
    pub fn next_id(&mut self) -> NonZeroU64 {
        loop {
            let candidate = self.next;
            self.next = self.next.wrapping_add(1);
            self.span = self.span.saturating_add(1);
            if let Some(id) = NonZeroU64::new(candidate) {
                return id;
            }
        }
    }

    /// A new, independent source derived from this one (the next seed in this sequence).
    ///
    /// Used by [`super::Liveness`] to give each connection its own id sequence from one
    /// node-wide seed.
    pub fn fork(&mut self) -> ProbeIdSource {
        ProbeIdSource::new(self.next_id().get())
    }

    /// Whether `id` was returned by [`Self::next_id`] already.
    pub fn has_issued(&self, id: u64) -> bool {
        id != 0 && id.wrapping_sub(self.first) < self.span
    }
}

/// The SplitMix64 finaliser: a bijection on u64 that scatters neighbouring seeds.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How [`ProbeTracker::handle_ack`] judged one incoming ACK.
///
/// Only [`AckOutcome::Accepted`] changes liveness state; every other outcome only increments
/// its diagnostic counter in [`ProbeStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AckOutcome {
    /// The first ACK for the pending id on this connection: the pending id is cleared and the
    /// deadline moves to `now + 15 s`.
    Accepted,
    /// Another copy of the ACK that was accepted last (the peer answered a resent probe
    /// twice, or the network duplicated it).
    Duplicate,
    /// An ACK for an id this tracker issued before the last accepted one.
    Stale,
    /// The ACK arrived on a different physical connection than the tracker's; it is not
    /// evidence for this one (MISSION L2, L6).
    OtherConnection,
    /// An id this tracker never issued (including 0), or an ACK while no probe was sent.
    Unsolicited,
    /// The tracker already declared its deadline exceeded; nothing can revive it.
    AfterDeadline,
}

/// What a [`ProbeTracker`] reports to the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeEvent {
    /// No accepted ACK for 15 s: the connection is not-ready from this instant and must be
    /// closed (MISSION F1, reason `deadline_exceeded`).
    DeadlineExceeded {
        /// The connection the tracker watched.
        conn: ConnId,
        /// When the last ACK was accepted; `None` if none ever was (the deadline then ran
        /// from ready).
        last_ack_at: Option<Instant>,
    },
}

/// Diagnostic counters of one [`ProbeTracker`]. None of them influences liveness.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProbeStats {
    /// Probes sent with a fresh id.
    pub probes_sent: u64,
    /// Probes resent with the still-pending id.
    pub probes_resent: u64,
    /// ACKs judged [`AckOutcome::Accepted`].
    pub acks_accepted: u64,
    /// ACKs judged [`AckOutcome::Duplicate`].
    pub acks_duplicate: u64,
    /// ACKs judged [`AckOutcome::Stale`].
    pub acks_stale: u64,
    /// ACKs judged [`AckOutcome::OtherConnection`].
    pub acks_other_connection: u64,
    /// ACKs judged [`AckOutcome::Unsolicited`].
    pub acks_unsolicited: u64,
    /// ACKs judged [`AckOutcome::AfterDeadline`].
    pub acks_after_deadline: u64,
    /// Application frames received (diagnostics only; they never extend the deadline).
    pub app_receives: u64,
}

/// Liveness state of the tracker; the data valid in each state lives in its variant.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// The deadline has not passed.
    Alive {
        /// A probe cycle fired and its probe has not been taken by `poll_transmit` yet.
        probe_due: bool,
    },
    /// The deadline passed at `at`; the tracker is inert.
    Dead { at: Instant },
}

/// Probe/ACK liveness of one physical RouteMesh or ClientServer connection (MISSION L1, L2).
///
/// Created by the shell when the connection becomes ready (handshake and identity checks
/// done), dropped when the connection closes. One tracker never outlives its connection: a
/// reconnect gets a new tracker with a new [`ConnId`] (MISSION F4).
///
/// # Timing
///
/// * The first probe is due **at ready** (the constructor leaves a probe waiting in
///   [`Self::poll_transmit`]), then on the fixed grid `ready + k * 5 s`. Probing at ready
///   gives three sends (0 s, 5 s, 10 s) of the same id before a silent connection's 15 s
///   deadline instead of two, so one lost probe or ACK never costs the connection.
/// * The deadline is `ready + 15 s`, and `t + 15 s` after an ACK accepted at `t`. It is
///   inclusive: at exactly the deadline the connection is dead, one nanosecond before it is
///   not.
/// * A cycle with a pending id resends that id; a new id is drawn only when none is pending,
///   so at most one id is pending at any time.
///
/// # What is evidence
///
/// Only the first ACK carrying the pending id on this tracker's own [`ConnId`]. Duplicates,
/// stale ids, unknown ids and ACKs from another physical connection change nothing but
/// [`ProbeStats`]. Application traffic ([`Self::handle_app_traffic`]) is recorded for
/// diagnostics only. A PROBE received from the peer is not evidence either: the shell answers
/// it by echoing the id in an ACK and never tells this tracker about it, which is why there is
/// no `handle_probe` method.
///
/// # Polling order
///
/// After any `handle_*` call, and after waking at [`Self::poll_timeout`] and calling
/// [`Self::handle_timeout`], the shell drains [`Self::poll_transmit`] (send each id as a PROBE
/// on this connection) and [`Self::poll_event`], then sleeps until the next
/// [`Self::poll_timeout`]. Every input first applies the timers that expired at or before its
/// `now`, so the verdict does not depend on the order in which the shell delivers an ACK and a
/// timeout that are due at the same instant.
#[derive(Debug, Clone)]
pub struct ProbeTracker {
    conn: ConnId,
    ready_at: Instant,
    timers: TimerTable,
    ids: ProbeIdSource,
    phase: Phase,
    pending: Option<NonZeroU64>,
    last_accepted: Option<NonZeroU64>,
    last_ack_at: Option<Instant>,
    last_app_receive_at: Option<Instant>,
    last_probe_at: Option<Instant>,
    event: Option<ProbeEvent>,
    stats: ProbeStats,
}

impl ProbeTracker {
    /// A tracker for `conn`, which became ready at `now`.
    pub fn new(conn: ConnId, now: Instant, ids: ProbeIdSource) -> Self {
        let mut timers = TimerTable::default();
        timers.set(Timer::Probe, after(now, PROBE_INTERVAL));
        timers.set(Timer::PeerDeadline, after(now, PEER_DEADLINE));
        Self {
            conn,
            ready_at: now,
            timers,
            ids,
            phase: Phase::Alive { probe_due: true },
            pending: None,
            last_accepted: None,
            last_ack_at: None,
            last_app_receive_at: None,
            last_probe_at: None,
            event: None,
            stats: ProbeStats::default(),
        }
    }

    /// Judges an ACK carrying `id` that arrived on physical connection `conn` at `now`.
    ///
    /// Only [`AckOutcome::Accepted`] changes state: it clears the pending id and moves the
    /// deadline to `now + 15 s`.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_ack(&mut self, conn: ConnId, id: u64, now: Instant) -> AckOutcome {
        self.handle_timeout(now);
        let outcome = self.classify(conn, id);
        match outcome {
            AckOutcome::Accepted => {
                self.stats.acks_accepted += 1;
                self.last_accepted = self.pending.take();
                self.last_ack_at = Some(now);
                self.timers
                    .set(Timer::PeerDeadline, after(now, PEER_DEADLINE));
            }
            AckOutcome::Duplicate => self.stats.acks_duplicate += 1,
            AckOutcome::Stale => self.stats.acks_stale += 1,
            AckOutcome::OtherConnection => self.stats.acks_other_connection += 1,
            AckOutcome::Unsolicited => self.stats.acks_unsolicited += 1,
            AckOutcome::AfterDeadline => self.stats.acks_after_deadline += 1,
        }
        outcome
    }

    fn classify(&self, conn: ConnId, id: u64) -> AckOutcome {
        if conn != self.conn {
            return AckOutcome::OtherConnection;
        }
        if matches!(self.phase, Phase::Dead { .. }) {
            return AckOutcome::AfterDeadline;
        }
        if self.pending.is_some_and(|p| p.get() == id) {
            AckOutcome::Accepted
        } else if self.last_accepted.is_some_and(|a| a.get() == id) {
            AckOutcome::Duplicate
        } else if self.ids.has_issued(id) {
            AckOutcome::Stale
        } else {
            AckOutcome::Unsolicited
        }
    }

    /// Records that an application frame arrived at `now`. Diagnostics only: it never
    /// extends the deadline (MISSION L2), because receiving from the peer does not prove the
    /// peer receives from us.
    pub fn handle_app_traffic(&mut self, now: Instant) {
        self.handle_app_traffic_run(1, now);
    }

    /// Records that `frames` application frames arrived, the last at `now`: what as many
    /// [`handle_app_traffic`](Self::handle_app_traffic) calls do, the last with `now`
    /// (nothing if `frames` is 0). Diagnostics only, like them.
    pub fn handle_app_traffic_run(&mut self, frames: u64, now: Instant) {
        if frames == 0 {
            return;
        }
        self.stats.app_receives += frames;
        self.last_app_receive_at = Some(now);
    }

    /// Applies every timer that expired at or before `now`.
    ///
    /// A passed deadline wins over a due probe: the tracker dies and sends nothing more.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.is_dead() {
            return;
        }
        if self.timers.is_expired(Timer::PeerDeadline, now) {
            self.timers.stop_all();
            self.phase = Phase::Dead { at: now };
            self.event = Some(ProbeEvent::DeadlineExceeded {
                conn: self.conn,
                last_ack_at: self.last_ack_at,
            });
            return;
        }
        if let Some(due) = self.timers.get(Timer::Probe).filter(|&due| due <= now) {
            self.timers
                .set(Timer::Probe, next_tick(due, now, PROBE_INTERVAL));
            self.phase = Phase::Alive { probe_due: true };
        }
    }

    /// Like [`Self::handle_timeout`], and also starts the next probe cycle now if it falls
    /// within [`COALESCE_WINDOW`] after `now` (MISSION L1, module doc "Coalescing"): its probe
    /// goes out at most the window early, never late, and the grid `ready + k * 5 s` stays
    /// where it is. The deadline is never applied before it is due.
    pub fn handle_timeout_coalesced(&mut self, now: Instant) {
        self.handle_timeout(now);
        if self.is_dead() {
            return;
        }
        let horizon = after(now, COALESCE_WINDOW);
        if let Some(due) = self.timers.get(Timer::Probe).filter(|&due| due <= horizon) {
            self.timers
                .set(Timer::Probe, next_tick(due, now, PROBE_INTERVAL));
            self.phase = Phase::Alive { probe_due: true };
        }
    }

    /// The probe id to send now on this connection, if a cycle is due: the pending id again,
    /// or a fresh one when none is pending. At most one per cycle.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<u64> {
        self.handle_timeout(now);
        let Phase::Alive { probe_due: true } = self.phase else {
            return None;
        };
        self.phase = Phase::Alive { probe_due: false };
        let id = match self.pending {
            Some(id) => {
                self.stats.probes_resent += 1;
                id
            }
            None => {
                let id = self.ids.next_id();
                self.pending = Some(id);
                self.stats.probes_sent += 1;
                id
            }
        };
        self.last_probe_at = Some(now);
        Some(id.get())
    }

    /// The next event for the shell, if any. A tracker reports at most one event in its life.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ProbeEvent> {
        self.event.take()
    }

    /// When the tracker next needs [`Self::handle_timeout`]: the earlier of the next probe
    /// cycle and the deadline. `None` once dead.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// The connection this tracker watches.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// When the connection became ready (the tracker was created).
    pub fn ready_at(&self) -> Instant {
        self.ready_at
    }

    /// The current deadline; `None` once dead.
    pub fn deadline(&self) -> Option<Instant> {
        self.timers.get(Timer::PeerDeadline)
    }

    /// Whether the deadline passed (the connection is not-ready).
    pub fn is_dead(&self) -> bool {
        matches!(self.phase, Phase::Dead { .. })
    }

    /// When the deadline was judged exceeded, if it was.
    pub fn dead_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Dead { at } => Some(at),
            Phase::Alive { .. } => None,
        }
    }

    /// Whether a probe is waiting in [`Self::poll_transmit`] (a cycle fired and was not sent
    /// yet).
    pub fn is_probe_due(&self) -> bool {
        matches!(self.phase, Phase::Alive { probe_due: true })
    }

    /// The id awaiting its ACK, if any.
    pub fn pending_id(&self) -> Option<u64> {
        self.pending.map(NonZeroU64::get)
    }

    /// When the last ACK was accepted.
    pub fn last_ack_at(&self) -> Option<Instant> {
        self.last_ack_at
    }

    /// When the last application frame arrived (diagnostics).
    pub fn last_app_receive_at(&self) -> Option<Instant> {
        self.last_app_receive_at
    }

    /// When the last probe (new or resent) was handed out by [`Self::poll_transmit`].
    pub fn last_probe_at(&self) -> Option<Instant> {
        self.last_probe_at
    }

    /// Diagnostic counters.
    pub fn stats(&self) -> &ProbeStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn id_source_is_deterministic_and_skips_zero() {
        let mut a = ProbeIdSource::new(7);
        let mut b = ProbeIdSource::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_id(), b.next_id());
        }
        // Force a wrap through 0.
        let mut wrap = ProbeIdSource {
            first: u64::MAX - 1,
            next: u64::MAX - 1,
            span: 0,
        };
        let ids: Vec<u64> = (0..3).map(|_| wrap.next_id().get()).collect();
        assert_eq!(ids, vec![u64::MAX - 1, u64::MAX, 1]);
        assert!(wrap.has_issued(u64::MAX));
        assert!(wrap.has_issued(1));
        assert!(!wrap.has_issued(0));
        assert!(!wrap.has_issued(2));
    }

    #[test]
    fn id_source_consecutive_ids_differ_and_are_recognised() {
        let mut ids = ProbeIdSource::new(0);
        let first = ids.next_id().get();
        let second = ids.next_id().get();
        assert_ne!(first, second);
        assert!(ids.has_issued(first) && ids.has_issued(second));
        assert!(!ids.has_issued(second.wrapping_add(1)));
    }

    #[test]
    fn forked_sources_start_elsewhere() {
        let mut root = ProbeIdSource::new(1);
        let mut a = root.fork();
        let mut b = root.fork();
        assert_ne!(a.next_id(), b.next_id());
    }

    #[test]
    fn ack_racing_the_deadline_at_the_same_instant_loses() {
        let t0 = Instant::now();
        let mut tracker = ProbeTracker::new(ConnId(1), t0, ProbeIdSource::new(3));
        let id = tracker.poll_transmit(t0);
        let Some(id) = id else {
            panic!("probe due at ready");
        };
        let deadline = t0 + PEER_DEADLINE;
        assert_eq!(
            tracker.handle_ack(ConnId(1), id, deadline),
            AckOutcome::AfterDeadline
        );
        assert_eq!(
            tracker.poll_event(),
            Some(ProbeEvent::DeadlineExceeded {
                conn: ConnId(1),
                last_ack_at: None
            })
        );
        assert_eq!(tracker.poll_timeout(), None);
        assert_eq!(
            tracker.poll_transmit(deadline + Duration::from_secs(5)),
            None
        );
    }
}
