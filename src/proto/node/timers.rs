//! The timer table: every link's and subscription's earliest deadline, ordered, and the
//! bound sockets' disconnect sweeps. What runs when a deadline comes due is the thread's
//! (`io/timers.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::proto::node::keys::{Key, LinkKey, SlotKey, SubKey};

/// Delays after a bound-side disconnect event at which the I/O thread checks whether a
/// connection of the socket left without its notice (`IoThread::check_bound_disconnects`),
/// and sweeps the socket if one did. The first is late enough for a notice queued behind a
/// few records to be read; the later ones catch a pipe libzmq closes late. Disconnects of
/// one socket share one schedule: a disconnect during it starts it again from the first
/// step, never later than the step already due.
pub const SWEEP_DELAYS: [Duration; 3] = [
    Duration::from_millis(20),
    Duration::from_millis(100),
    Duration::from_millis(500),
];

/// Whose deadline an entry of the [`TimerTable`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerOwner {
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
/// [`Link::next_deadline`](super::link::Link::next_deadline) and
/// `Sub::next_deadline`. The links and subscriptions are [`Tracked`] tables, so every owner
/// handed out mutably is derived again before the loop next sleeps or fires timers
/// (`IoThread::sync_links`, `io/timers.rs`): no change can be missed, and a turn costs one derivation per
/// owner it touched, not a walk over every link.
///
/// [`Tracked`]: crate::proto::node::keys::Tracked
pub(crate) struct TimerTable {
    /// Per link position: its entry in `order`, if it has a deadline.
    links: Vec<Option<Instant>>,
    /// Per subscription position: its entry in `order`, if it has a deadline.
    subs: Vec<Option<Instant>>,
    /// Every owner's earliest deadline, earliest first.
    order: BTreeSet<(Instant, TimerOwner)>,
    /// Disconnect checks: when, which bound socket, which step of [`SWEEP_DELAYS`]; at most
    /// one per socket.
    sweeps: Vec<(Instant, SlotKey, usize)>,
}

impl TimerTable {
    /// No deadline set.
    pub(crate) fn new() -> TimerTable {
        TimerTable {
            links: Vec::new(),
            subs: Vec::new(),
            order: BTreeSet::new(),
            sweeps: Vec::new(),
        }
    }

    /// `owner`'s earliest deadline is now `at` (`None`: it has none).
    pub(crate) fn set(&mut self, owner: TimerOwner, at: Option<Instant>) {
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
    pub(crate) fn next(&self) -> Option<Instant> {
        let owners = self.order.first().map(|e| e.0);
        [owners, self.next_sweep()].into_iter().flatten().min()
    }

    /// True if some deadline is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.next().is_some_and(|t| now >= t)
    }

    /// The links whose deadline is due at `now`, in key order.
    pub(crate) fn due_links(&self, now: Instant) -> Vec<LinkKey> {
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
    pub(crate) fn due_subs(&self, now: Instant) -> Vec<SubKey> {
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

    pub(crate) fn due_owners(&self, now: Instant) -> impl Iterator<Item = TimerOwner> + '_ {
        self.order
            .iter()
            .take_while(move |e| e.0 <= now)
            .map(|e| e.1)
    }

    /// A bound socket reported a disconnect at `now`: its schedule of checks starts from the
    /// first step (one schedule per socket, however many disconnects it reports).
    pub(crate) fn start_sweep(&mut self, slot: SlotKey, now: Instant) {
        let first = now + SWEEP_DELAYS[0];
        match self.sweeps.iter_mut().find(|s| s.1 == slot) {
            Some(s) => {
                s.0 = s.0.min(first);
                s.2 = 0;
            }
            None => self.sweeps.push((first, slot, 0)),
        }
    }

    /// The sweeps of socket `slot` go (the socket is gone).
    pub(crate) fn forget_sweeps(&mut self, slot: SlotKey) {
        self.sweeps.retain(|s| s.1 != slot);
    }

    /// The sockets whose sweep is due at `now`, each with its next step scheduled from `now`.
    pub(crate) fn take_due_sweeps(&mut self, now: Instant) -> Vec<SlotKey> {
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
    pub(crate) fn next_sweep(&self) -> Option<Instant> {
        self.sweeps.iter().map(|s| s.0).min()
    }

    /// Every deadline and sweep goes (the node stops).
    pub(crate) fn clear(&mut self) {
        self.links.clear();
        self.subs.clear();
        self.order.clear();
        self.sweeps.clear();
    }
}
