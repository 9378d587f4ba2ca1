//! Timers: the earliest deadline the loop may sleep to, and what runs when deadlines come
//! due (call deadlines, liveness probes and beacons, handshake timeouts, redials, close
//! confirmations, SUB re-opens, disconnect sweeps). One table holds every link's and
//! subscription's earliest deadline, derived again for exactly the ones a turn changed.

use std::collections::BTreeSet;
use std::time::Instant;

use super::parts::keys::Key;
use super::parts::link::note;
use super::{
    IoThread, LinkKey, LiveOwner, SlotKey, SubKey, CLOSE_CONFIRM_MAX, HANDSHAKE_TIMEOUT,
    SWEEP_DELAYS,
};
use crate::proto::liveness::{LivenessEvent, ProbeEvent, PublisherEvent, Transmit};
use crate::proto::state::{ConnState, FailureReason};
use crate::runtime::link::LinkId;
use crate::runtime::records::{self};

/// Whose deadline an entry of the [`TimerTable`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerOwner {
    /// A link: its handshake timeout, its redial or its close confirmation.
    Link(LinkKey),
    /// A fanout subscription without a socket: its re-open.
    Sub(SubKey),
}

/// The node's per-link and per-subscription deadlines, and the disconnect sweeps of the
/// bound sockets.
///
/// The timers themselves live in the links and subscriptions (a connection's `opened_at`, a
/// link's `retry_at` and `closing`, a subscription's `retry_at`): each owner's entry here is
/// the earliest of its own, derived from it by
/// [`Link::next_deadline`](super::parts::link::Link::next_deadline) and
/// [`Sub::next_deadline`](super::fanout::Sub::next_deadline). The links and subscriptions are [`Tracked`] tables, so every owner
/// handed out mutably is derived again before the loop next sleeps or fires timers
/// ([`IoThread::sync_timers`]): no change can be missed, and a turn costs one derivation per
/// owner it touched, not a walk over every link.
///
/// [`Tracked`]: super::parts::keys::Tracked
pub(super) struct TimerTable {
    /// Per link position: its entry in `order`, if it has a deadline.
    links: Vec<Option<Instant>>,
    /// Per subscription position: its entry in `order`, if it has a deadline.
    subs: Vec<Option<Instant>>,
    /// Every owner's earliest deadline, earliest first.
    order: BTreeSet<(Instant, TimerOwner)>,
    /// Disconnect sweeps: when, which bound socket, which step of [`SWEEP_DELAYS`].
    sweeps: Vec<(Instant, SlotKey, usize)>,
}

impl TimerTable {
    /// No deadline set.
    pub(super) fn new() -> TimerTable {
        TimerTable {
            links: Vec::new(),
            subs: Vec::new(),
            order: BTreeSet::new(),
            sweeps: Vec::new(),
        }
    }

    /// `owner`'s earliest deadline is now `at` (`None`: it has none).
    pub(super) fn set(&mut self, owner: TimerOwner, at: Option<Instant>) {
        let (entries, i) = match owner {
            TimerOwner::Link(k) => (&mut self.links, k.index()),
            TimerOwner::Sub(k) => (&mut self.subs, k.index()),
        };
        if entries.len() <= i {
            if at.is_none() {
                return;
            }
            entries.resize(i + 1, None);
        }
        let entry = &mut entries[i];
        if *entry == at {
            return;
        }
        if let Some(old) = entry.take() {
            self.order.remove(&(old, owner));
        }
        if let Some(t) = at {
            self.order.insert((t, owner));
        }
        *entry = at;
    }

    /// The earliest deadline of any owner or sweep.
    pub(super) fn next(&self) -> Option<Instant> {
        let owners = self.order.first().map(|e| e.0);
        [owners, self.next_sweep()].into_iter().flatten().min()
    }

    /// True if some deadline is due at `now`.
    fn due(&self, now: Instant) -> bool {
        self.next().is_some_and(|t| now >= t)
    }

    /// The links whose deadline is due at `now`, in key order.
    fn due_links(&self, now: Instant) -> Vec<LinkKey> {
        let mut due: Vec<LinkKey> = self
            .due_owners(now)
            .filter_map(|o| match o {
                TimerOwner::Link(k) => Some(k),
                TimerOwner::Sub(_) => None,
            })
            .collect();
        due.sort_unstable();
        due
    }

    /// The subscriptions whose deadline is due at `now`, in key order.
    fn due_subs(&self, now: Instant) -> Vec<SubKey> {
        let mut due: Vec<SubKey> = self
            .due_owners(now)
            .filter_map(|o| match o {
                TimerOwner::Sub(k) => Some(k),
                TimerOwner::Link(_) => None,
            })
            .collect();
        due.sort_unstable();
        due
    }

    fn due_owners(&self, now: Instant) -> impl Iterator<Item = TimerOwner> + '_ {
        self.order
            .iter()
            .take_while(move |e| e.0 <= now)
            .map(|e| e.1)
    }

    /// A bound socket reported a disconnect at `now`: its first sweep is due now.
    pub(super) fn start_sweep(&mut self, slot: SlotKey, now: Instant) {
        self.sweeps.push((now, slot, 0));
    }

    /// The sweeps of socket `slot` go (the socket is gone).
    pub(super) fn forget_sweeps(&mut self, slot: SlotKey) {
        self.sweeps.retain(|s| s.1 != slot);
    }

    /// The sockets whose sweep is due at `now`, each with its next step scheduled from `now`.
    fn take_due_sweeps(&mut self, now: Instant) -> Vec<SlotKey> {
        let due: Vec<(SlotKey, usize)> = self
            .sweeps
            .iter()
            .filter(|s| now >= s.0)
            .map(|s| (s.1, s.2))
            .collect();
        self.sweeps.retain(|s| now < s.0);
        for &(slot, step) in &due {
            if let Some(d) = SWEEP_DELAYS.get(step + 1) {
                self.sweeps
                    .push((now + (*d - SWEEP_DELAYS[step]), slot, step + 1));
            }
        }
        due.into_iter().map(|(slot, _)| slot).collect()
    }

    /// The earliest sweep.
    fn next_sweep(&self) -> Option<Instant> {
        self.sweeps.iter().map(|s| s.0).min()
    }

    /// Every deadline and sweep goes (the node stops).
    pub(super) fn clear(&mut self) {
        self.links.clear();
        self.subs.clear();
        self.order.clear();
        self.sweeps.clear();
    }
}

impl IoThread {
    /// The earliest instant any timer of the node is due.
    pub(super) fn poll_timeout(&mut self) -> Option<Instant> {
        self.sync_timers();
        [
            self.liveness.table().poll_timeout(),
            self.caller.poll_timeout(),
            self.callee.poll_timeout(),
            self.timers.next(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Derives again the deadline of every link and subscription handed out mutably since the
    /// last call.
    pub(super) fn sync_timers(&mut self) {
        let timers = &mut self.timers;
        self.links
            .drain_touched(|k, l| timers.set(TimerOwner::Link(k), l.next_deadline()));
        self.fanout
            .subs
            .drain_touched(|k, s| timers.set(TimerOwner::Sub(k), s.next_deadline()));
    }

    pub(super) fn run_timers(&mut self, now: Instant) {
        // Call deadlines and serve-side ttl refusals and drain bound.
        self.caller.handle_timeout(now);
        self.callee.handle_timeout(now);
        self.drain_calls(now);
        // Every liveness machine of the node, from one table (MISSION L8). Coalesced: a
        // wake-up for a due timer also starts every probe and beacon due within the next
        // `COALESCE_WINDOW` (never late, at most that early; deadlines never early), so that
        // thousands of connections' probe cycles a few milliseconds apart cost one wake-up
        // per window instead of one each, and their ACKs come back together.
        self.liveness.table_mut().handle_timeout_coalesced(now);
        while let Some(t) = self.liveness.table_mut().poll_transmit(now) {
            match t {
                Transmit::Probe { key, id, .. } => {
                    if let Some(LiveOwner::Link(k)) = self.liveness.owner(key) {
                        self.send_liveness(k, records::probe(id));
                    }
                }
                Transmit::Beacon { key } => {
                    if self
                        .fanout
                        .publisher
                        .as_ref()
                        .is_some_and(|p| p.live == key)
                    {
                        if let Some(p) = self.fanout.publisher.as_mut() {
                            p.send_beacon();
                        }
                    }
                }
            }
        }
        self.drain_liveness_events(now);
        // Only the links and subscriptions whose deadline is due are looked at (an idle node
        // has none set at all).
        self.sync_timers();
        if !self.timers.due(now) {
            return;
        }
        // Handshake timeouts.
        for k in self.timers.due_links(now) {
            let expired = self.links[k]
                .conn
                .as_ref()
                .is_some_and(|c| !c.ready && now >= c.opened_at + HANDSHAKE_TIMEOUT);
            if expired {
                self.fail_link(k, FailureReason::TransportError, "handshake timed out", now);
            }
        }
        // Reconnects and overdue close confirmations, also of links the timeouts above made
        // due.
        self.sync_timers();
        for k in self.timers.due_links(now) {
            let l = &self.links[k];
            let due = l.waits_to_redial() && l.retry_at.is_some_and(|t| now >= t);
            if due {
                self.dial(k, now);
            }
            if self.links[k]
                .closing
                .as_ref()
                .is_some_and(|c| now >= c.1 + CLOSE_CONFIRM_MAX)
            {
                self.close_overdue(k);
            }
        }
        self.settle_overdue_closing();
        // Fanout subscriptions without a socket get a new one (MISSION L5).
        self.sync_timers();
        for i in self.timers.due_subs(now) {
            let s = &self.fanout.subs[i];
            if s.slot.is_none() && !s.retired && now >= s.retry_at {
                self.open_sub(i, now);
            }
        }
        // Bound-socket disconnect sweeps.
        for slot in self.timers.take_due_sweeps(now) {
            self.sweep(slot, now);
        }
    }

    /// Acts on the liveness table's verdicts.
    pub(super) fn drain_liveness_events(&mut self, now: Instant) {
        while let Some((key, ev)) = self.liveness.table_mut().poll_event() {
            match (self.liveness.owner(key), ev) {
                (
                    Some(LiveOwner::Link(k)),
                    LivenessEvent::Probe(ProbeEvent::DeadlineExceeded { .. }),
                ) => {
                    self.fail_link(
                        k,
                        FailureReason::DeadlineExceeded,
                        "no valid ACK for 15 s",
                        now,
                    );
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::BecameReady),
                ) => {
                    let s = &mut self.fanout.subs[i];
                    s.failures_in_row = 0;
                    note(s.state.handle_ready(now));
                    let link = LinkId::Subscription {
                        endpoint: s.endpoint.clone(),
                    };
                    self.emit_state(link, ConnState::Ready, None, "first record or beacon");
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::Silence { .. }),
                ) => {
                    self.fail_sub(
                        i,
                        FailureReason::FanoutSilence,
                        "no record or beacon for 15 s",
                        now,
                    );
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::ProtocolError(e)),
                ) => {
                    self.fail_sub(i, FailureReason::ProtocolError, &format!("{e}"), now);
                }
                (owner, ev) => tracing::debug!(?owner, ?ev, "liveness event without an owner"),
            }
        }
    }
}
