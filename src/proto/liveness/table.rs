//! [`Liveness`]: the one structure that owns every liveness machine of a node (MISSION L8).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::fmt;
use std::time::Instant;

use super::timer::after;
use super::{
    AckOutcome, BeaconSchedule, Delivery, FanoutInput, ProbeEvent, ProbeIdSource, ProbeTracker,
    PublisherEvent, PublisherWatch, COALESCE_WINDOW,
};
use crate::proto::state::FailureReason;
use crate::proto::ConnId;

/// Typed handle of one entry in a [`Liveness`] table.
///
/// Allocated by the table, never reused, so a key kept by the shell after
/// [`Liveness::remove`] can never reach an entry inserted later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkKey(u64);

impl fmt::Display for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "l{}", self.0)
    }
}

/// Something the shell must send now, from [`Liveness::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transmit {
    /// Send a PROBE carrying `id` on physical connection `conn`.
    Probe {
        /// The entry that asked.
        key: LinkKey,
        /// The connection to send on.
        conn: ConnId,
        /// The probe id (non-zero).
        id: u64,
    },
    /// Send the two beacon frames on the PUB socket of entry `key`.
    Beacon {
        /// The entry that asked.
        key: LinkKey,
    },
}

/// An event of one entry, from [`Liveness::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LivenessEvent {
    /// From a [`ProbeTracker`].
    Probe(ProbeEvent),
    /// From a [`PublisherWatch`].
    Publisher(PublisherEvent),
}

impl LivenessEvent {
    /// The failure reason to record for this event, or `None` if it is not a failure
    /// ([`PublisherEvent::BecameReady`]).
    pub fn failure_reason(&self) -> Option<FailureReason> {
        match self {
            LivenessEvent::Probe(ProbeEvent::DeadlineExceeded { .. }) => {
                Some(FailureReason::DeadlineExceeded)
            }
            LivenessEvent::Publisher(PublisherEvent::Silence { .. }) => {
                Some(FailureReason::FanoutSilence)
            }
            LivenessEvent::Publisher(PublisherEvent::ProtocolError(_)) => {
                Some(FailureReason::ProtocolError)
            }
            LivenessEvent::Publisher(PublisherEvent::BecameReady) => None,
        }
    }
}

/// What kind of machine an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A [`ProbeTracker`].
    Probe,
    /// A [`PublisherWatch`].
    Publisher,
    /// A [`BeaconSchedule`].
    Beacon,
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EntryKind::Probe => "probe tracker",
            EntryKind::Publisher => "publisher watch",
            EntryKind::Beacon => "beacon schedule",
        })
    }
}

/// Misuse of a [`Liveness`] table by the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LivenessError {
    /// No entry has this key (it was removed, or never existed).
    #[error("no liveness entry {0}")]
    UnknownKey(LinkKey),
    /// The entry is of another kind than the call needs.
    #[error("liveness entry {key} is a {actual}, not a {expected}")]
    WrongKind {
        /// The key passed.
        key: LinkKey,
        /// What the call needs.
        expected: EntryKind,
        /// What the entry is.
        actual: EntryKind,
    },
}

#[derive(Debug, Clone)]
enum Machine {
    Probe(ProbeTracker),
    Publisher(PublisherWatch),
    Beacon(BeaconSchedule),
}

impl Machine {
    fn kind(&self) -> EntryKind {
        match self {
            Machine::Probe(_) => EntryKind::Probe,
            Machine::Publisher(_) => EntryKind::Publisher,
            Machine::Beacon(_) => EntryKind::Beacon,
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Machine::Probe(m) => m.poll_timeout(),
            Machine::Publisher(m) => m.poll_timeout(),
            Machine::Beacon(m) => m.poll_timeout(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self {
            Machine::Probe(m) => m.handle_timeout(now),
            Machine::Publisher(m) => m.handle_timeout(now),
            Machine::Beacon(m) => m.handle_timeout(now),
        }
    }

    fn handle_timeout_coalesced(&mut self, now: Instant) {
        match self {
            Machine::Probe(m) => m.handle_timeout_coalesced(now),
            // A silence deadline is never applied early.
            Machine::Publisher(m) => m.handle_timeout(now),
            Machine::Beacon(m) => m.handle_timeout_coalesced(now),
        }
    }

    fn wants_transmit(&self, now: Instant) -> bool {
        match self {
            Machine::Probe(m) => m.is_probe_due(),
            Machine::Publisher(_) => false,
            Machine::Beacon(m) => m.is_due(now),
        }
    }

    fn poll_event(&mut self) -> Option<LivenessEvent> {
        match self {
            Machine::Probe(m) => m.poll_event().map(LivenessEvent::Probe),
            Machine::Publisher(m) => m.poll_event().map(LivenessEvent::Publisher),
            Machine::Beacon(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    machine: Machine,
    /// The instant this entry is registered under in the heap, if any. A heap item whose
    /// instant differs is stale. It may be earlier than the machine's real timeout (a
    /// postponed deadline is not re-pushed until its old instant reaches the top).
    scheduled: Option<Instant>,
    /// The key is in `transmit_queue`.
    queued: bool,
}

/// The one structure that owns liveness for a whole node (MISSION L8): every
/// [`ProbeTracker`] (one per ready RouteMesh lane or ClientServer connection), every
/// [`PublisherWatch`] (one per fanout publisher this node subscribes to) and every
/// [`BeaconSchedule`] (one per PUB socket this node binds), with one wake-up time.
///
/// All entries share the fixed 5 s / 15 s constants; no entry takes a duration.
///
/// # Driving it
///
/// ```text
/// loop {
///     sleep until poll_timeout()           (or until input arrives)
///     handle_ack / handle_app_traffic / handle_fanout   for each input, with `now`
///     handle_timeout(now)                  if now >= the instant slept for
///         (or handle_timeout_coalesced(now): one wake-up for every probe and beacon due
///          within COALESCE_WINDOW, see the module doc of `liveness`)
///     while let Some(t) = poll_transmit(now) { send t }
///     while let Some((key, ev)) = poll_event() { act on ev: close, record failure, ... }
/// }
/// ```
///
/// Orderly close and transport errors do not go through this table: the shell records the
/// failure and calls [`Self::remove`] (or [`Self::replace_connection`]) at once
/// (MISSION L6); events still queued for that key are dropped with it.
///
/// # Complexity
///
/// Entries sit in a `BTreeMap` by key; wake-ups in a binary min-heap of `(instant, key)` with
/// lazy invalidation: each entry records the one instant it is registered under and heap
/// items that do not match are skipped when they surface. A deadline that moves later (every
/// accepted ACK, every fanout record) is not re-pushed while its old item is buried: only when
/// that item reaches the top is the entry's real timeout re-registered, so 1,000 busy
/// publishers cost one heap operation per record for the single entry at the top and none
/// for the others.
///
/// With n entries: `insert`/`remove`/`handle_*` for one entry O(log n) amortised;
/// [`Self::handle_timeout`] O((k + s) log n) for k due entries and s stale items surfacing;
/// [`Self::poll_timeout`] O(1). The heap is rebuilt in O(n) when stale items outnumber live
/// entries, so it never holds more than 2n + 64 items. A node with 1,000 publishers never
/// scans all of them on a wake-up.
#[derive(Debug, Clone)]
pub struct Liveness {
    entries: BTreeMap<LinkKey, Slot>,
    heap: BinaryHeap<Reverse<(Instant, LinkKey)>>,
    transmit_queue: VecDeque<LinkKey>,
    events: VecDeque<(LinkKey, LivenessEvent)>,
    next_key: u64,
    ids: ProbeIdSource,
}

/// Stale heap items tolerated on top of two per entry before a rebuild.
const HEAP_SLACK: usize = 64;

impl Liveness {
    /// An empty table. `seed` determines every probe id the table will hand out (the shell
    /// uses the node's lifecycle generation).
    pub fn new(seed: u64) -> Self {
        Self {
            entries: BTreeMap::new(),
            heap: BinaryHeap::new(),
            transmit_queue: VecDeque::new(),
            events: VecDeque::new(),
            next_key: 0,
            ids: ProbeIdSource::new(seed),
        }
    }

    /// Starts probing connection `conn`, which became ready at `now`. Its first probe is
    /// waiting in [`Self::poll_transmit`].
    pub fn insert_connection(&mut self, conn: ConnId, now: Instant) -> LinkKey {
        let tracker = ProbeTracker::new(conn, now, self.ids.fork());
        self.insert(Machine::Probe(tracker), now)
    }

    /// Starts watching a publisher whose SUB socket was created at `now`.
    pub fn insert_publisher(&mut self, now: Instant) -> LinkKey {
        self.insert(Machine::Publisher(PublisherWatch::new(now)), now)
    }

    /// Starts the beacon schedule of a PUB socket bound at `now`; the first beacon is waiting
    /// in [`Self::poll_transmit`].
    pub fn insert_beacon(&mut self, now: Instant) -> LinkKey {
        self.insert(Machine::Beacon(BeaconSchedule::new(now)), now)
    }

    fn insert(&mut self, machine: Machine, now: Instant) -> LinkKey {
        let key = LinkKey(self.next_key);
        self.next_key += 1;
        self.entries.insert(
            key,
            Slot {
                machine,
                scheduled: None,
                queued: false,
            },
        );
        self.after_change(key, now);
        key
    }

    /// Replaces the tracker of entry `key` with a fresh one for the new physical connection
    /// `conn`, ready at `now` (reconnect under the same key). Nothing of the old tracker
    /// survives: not its pending id, not its deadline, not its queued events or probe
    /// (MISSION F4); late ACKs from the old connection are [`AckOutcome::OtherConnection`].
    pub fn replace_connection(
        &mut self,
        key: LinkKey,
        conn: ConnId,
        now: Instant,
    ) -> Result<(), LivenessError> {
        let ids = self.ids.fork();
        let slot = self.slot_mut(key, EntryKind::Probe)?;
        slot.machine = Machine::Probe(ProbeTracker::new(conn, now, ids));
        self.purge_queued(key);
        self.after_change(key, now);
        Ok(())
    }

    /// Restarts the watch of entry `key` for the publisher's new SUB socket, created at `now`
    /// (see [`PublisherWatch::reset`]). Events still queued for the old socket are dropped.
    pub fn reset_publisher(&mut self, key: LinkKey, now: Instant) -> Result<(), LivenessError> {
        let Machine::Publisher(watch) = &mut self.slot_mut(key, EntryKind::Publisher)?.machine
        else {
            return Err(LivenessError::UnknownKey(key));
        };
        watch.reset(now);
        self.purge_queued(key);
        self.after_change(key, now);
        Ok(())
    }

    /// Removes entry `key` with its timers, queued transmits and queued events. Returns
    /// whether it existed.
    pub fn remove(&mut self, key: LinkKey) -> bool {
        let existed = self.entries.remove(&key).is_some();
        if existed {
            self.purge_queued(key);
            self.prune();
        }
        existed
    }

    /// Removes every entry: after this no liveness timer remains (MISSION F6).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.heap.clear();
        self.transmit_queue.clear();
        self.events.clear();
    }

    /// Feeds an ACK carrying `id`, received on physical connection `conn`, to the tracker of
    /// entry `key`. See [`ProbeTracker::handle_ack`].
    pub fn handle_ack(
        &mut self,
        key: LinkKey,
        conn: ConnId,
        id: u64,
        now: Instant,
    ) -> Result<AckOutcome, LivenessError> {
        let outcome = match &mut self.slot_mut(key, EntryKind::Probe)?.machine {
            Machine::Probe(tracker) => tracker.handle_ack(conn, id, now),
            _ => return Err(LivenessError::UnknownKey(key)),
        };
        self.after_change(key, now);
        Ok(outcome)
    }

    /// Records application traffic on the connection of entry `key` (diagnostics only; see
    /// [`ProbeTracker::handle_app_traffic`]).
    pub fn handle_app_traffic(&mut self, key: LinkKey, now: Instant) -> Result<(), LivenessError> {
        self.handle_app_traffic_run(key, 1, now)
    }

    /// Records `frames` application frames on the connection of entry `key`, the last at
    /// `now` (diagnostics only; see [`ProbeTracker::handle_app_traffic_run`]).
    pub fn handle_app_traffic_run(
        &mut self,
        key: LinkKey,
        frames: u64,
        now: Instant,
    ) -> Result<(), LivenessError> {
        match &mut self.slot_mut(key, EntryKind::Probe)?.machine {
            Machine::Probe(tracker) => tracker.handle_app_traffic_run(frames, now),
            _ => return Err(LivenessError::UnknownKey(key)),
        }
        Ok(())
    }

    /// Feeds a classified fanout message to the watch of entry `key`. See
    /// [`PublisherWatch::handle_input`].
    pub fn handle_fanout(
        &mut self,
        key: LinkKey,
        input: FanoutInput,
        now: Instant,
    ) -> Result<Delivery, LivenessError> {
        let delivery = match &mut self.slot_mut(key, EntryKind::Publisher)?.machine {
            Machine::Publisher(watch) => watch.handle_input(input, now),
            _ => return Err(LivenessError::UnknownKey(key)),
        };
        self.after_change(key, now);
        Ok(delivery)
    }

    /// Advances every entry whose timer is due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due = self.take_due(now);
        for key in due {
            if let Some(slot) = self.entries.get_mut(&key) {
                slot.machine.handle_timeout(now);
            }
            self.after_change(key, now);
        }
        self.prune();
    }

    /// Like [`Self::handle_timeout`]; and if any timer was due at or before `now`, also starts
    /// every probe cycle and beacon due within [`COALESCE_WINDOW`] after `now`, so that this
    /// wake-up serves them all and the next timer wake-up is at least the window away
    /// (module doc "Coalescing"). Probes and beacons go out at most the window early and
    /// never late, on their unchanged 5 s grids; deadlines and silence verdicts are never
    /// reached before they are due (MISSION L1, L2, L5). Does nothing when no timer is due,
    /// so a wake-up for input does not send probes early one by one.
    ///
    /// O((k + s) log n) for the k entries due within the window and s stale items.
    pub fn handle_timeout_coalesced(&mut self, now: Instant) {
        if self.heap.peek().is_none_or(|Reverse((at, _))| *at > now) {
            return;
        }
        let horizon = after(now, COALESCE_WINDOW);
        let due = self.take_due(horizon);
        for key in due {
            if let Some(slot) = self.entries.get_mut(&key) {
                slot.machine.handle_timeout_coalesced(now);
            }
            self.after_change(key, now);
        }
        self.prune();
    }

    /// Pops the heap items registered at or before `until` and returns the keys of the
    /// entries still registered under them (stale items are dropped), clearing their
    /// registration.
    fn take_due(&mut self, until: Instant) -> Vec<LinkKey> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, key))) = self.heap.peek() {
            if at > until {
                break;
            }
            self.heap.pop();
            if let Some(slot) = self.entries.get_mut(&key) {
                if slot.scheduled == Some(at) {
                    slot.scheduled = None;
                    due.push(key);
                }
            }
        }
        due
    }

    /// The next thing to send, across all entries.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        while let Some(key) = self.transmit_queue.pop_front() {
            let Some(slot) = self.entries.get_mut(&key) else {
                continue;
            };
            slot.queued = false;
            let transmit = match &mut slot.machine {
                Machine::Probe(tracker) => tracker.poll_transmit(now).map(|id| Transmit::Probe {
                    key,
                    conn: tracker.conn(),
                    id,
                }),
                Machine::Beacon(schedule) => schedule
                    .poll_transmit(now)
                    .then_some(Transmit::Beacon { key }),
                Machine::Publisher(_) => None,
            };
            self.after_change(key, now);
            if transmit.is_some() {
                return transmit;
            }
        }
        None
    }

    /// The next event, with the key of the entry that raised it.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<(LinkKey, LivenessEvent)> {
        self.events.pop_front()
    }

    /// The next event entry `key` raised, taken out of turn: what the shell polls right after
    /// handing that entry an input (a fanout receipt), so that the entry's verdict is acted on
    /// before the input's effect; the other entries' events keep their order.
    #[must_use]
    pub fn poll_event_of(&mut self, key: LinkKey) -> Option<LivenessEvent> {
        let i = self.events.iter().position(|(k, _)| *k == key)?;
        self.events.remove(i).map(|(_, ev)| ev)
    }

    /// The earliest timer across all entries; `None` if no entry has one.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// The tracker of entry `key`, if it is one.
    pub fn probe(&self, key: LinkKey) -> Option<&ProbeTracker> {
        match &self.entries.get(&key)?.machine {
            Machine::Probe(tracker) => Some(tracker),
            _ => None,
        }
    }

    /// The publisher watch of entry `key`, if it is one.
    pub fn publisher(&self, key: LinkKey) -> Option<&PublisherWatch> {
        match &self.entries.get(&key)?.machine {
            Machine::Publisher(watch) => Some(watch),
            _ => None,
        }
    }

    /// The beacon schedule of entry `key`, if it is one.
    pub fn beacon(&self, key: LinkKey) -> Option<&BeaconSchedule> {
        match &self.entries.get(&key)?.machine {
            Machine::Beacon(schedule) => Some(schedule),
            _ => None,
        }
    }

    /// The kind of entry `key`, if it exists.
    pub fn kind(&self, key: LinkKey) -> Option<EntryKind> {
        self.entries.get(&key).map(|slot| slot.machine.kind())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Heap items currently held, live and stale (diagnostics; bounded by 2n + 64).
    pub fn timer_items(&self) -> usize {
        self.heap.len()
    }

    fn slot_mut(&mut self, key: LinkKey, expected: EntryKind) -> Result<&mut Slot, LivenessError> {
        let slot = self
            .entries
            .get_mut(&key)
            .ok_or(LivenessError::UnknownKey(key))?;
        let actual = slot.machine.kind();
        if actual != expected {
            return Err(LivenessError::WrongKind {
                key,
                expected,
                actual,
            });
        }
        Ok(slot)
    }

    fn purge_queued(&mut self, key: LinkKey) {
        self.events.retain(|(k, _)| *k != key);
        self.transmit_queue.retain(|k| *k != key);
        if let Some(slot) = self.entries.get_mut(&key) {
            slot.queued = false;
        }
    }

    /// Collects what entry `key` produced and re-registers its wake-up.
    fn after_change(&mut self, key: LinkKey, now: Instant) {
        let Some(slot) = self.entries.get_mut(&key) else {
            return;
        };
        while let Some(event) = slot.machine.poll_event() {
            self.events.push_back((key, event));
        }
        if !slot.queued && slot.machine.wants_transmit(now) {
            slot.queued = true;
            self.transmit_queue.push_back(key);
        }
        let timeout = slot.machine.poll_timeout();
        match (slot.scheduled, timeout) {
            (_, None) => slot.scheduled = None,
            // Registered no later than needed: when that item surfaces, `prune` or
            // `handle_timeout` re-registers the real instant.
            (Some(scheduled), Some(at)) if scheduled <= at => {}
            (_, Some(at)) => {
                slot.scheduled = Some(at);
                self.heap.push(Reverse((at, key)));
            }
        }
        self.prune();
    }

    /// Restores the invariant that the heap top, if any, is the exact earliest timeout.
    fn prune(&mut self) {
        if self.heap.len() > 2 * self.entries.len() + HEAP_SLACK {
            self.rebuild();
        }
        while let Some(&Reverse((at, key))) = self.heap.peek() {
            let Some(slot) = self.entries.get_mut(&key) else {
                self.heap.pop();
                continue;
            };
            if slot.scheduled != Some(at) {
                self.heap.pop();
                continue;
            }
            let actual = slot.machine.poll_timeout();
            if actual == Some(at) {
                break;
            }
            self.heap.pop();
            slot.scheduled = actual;
            if let Some(actual) = actual {
                self.heap.push(Reverse((actual, key)));
            }
        }
    }

    fn rebuild(&mut self) {
        self.heap = self
            .entries
            .iter_mut()
            .filter_map(|(key, slot)| {
                slot.scheduled = slot.machine.poll_timeout();
                slot.scheduled.map(|at| Reverse((at, *key)))
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::proto::liveness::PEER_DEADLINE;

    #[test]
    fn busy_publishers_do_not_grow_the_heap() {
        let t0 = Instant::now();
        let mut table = Liveness::new(1);
        let keys: Vec<LinkKey> = (0..1_000).map(|_| table.insert_publisher(t0)).collect();
        for ms in 0..200u64 {
            let now = t0 + Duration::from_millis(ms);
            for key in &keys {
                assert_eq!(
                    table.handle_fanout(*key, FanoutInput::Record, now),
                    Ok(Delivery::Deliver)
                );
            }
        }
        let mut readies = 0;
        while let Some((_, event)) = table.poll_event() {
            assert_eq!(event, LivenessEvent::Publisher(PublisherEvent::BecameReady));
            readies += 1;
        }
        assert_eq!(readies, keys.len());
        assert!(table.timer_items() <= 2 * keys.len() + HEAP_SLACK);
        // The postponed silence deadline still surfaces exactly, not at its first value.
        let last = t0 + Duration::from_millis(199);
        assert_eq!(table.poll_timeout(), Some(last + PEER_DEADLINE));
        table.handle_timeout(t0 + PEER_DEADLINE);
        assert_eq!(table.poll_event(), None);
        table.handle_timeout(last + PEER_DEADLINE);
        let mut silenced = 0;
        while let Some((_, event)) = table.poll_event() {
            assert_eq!(event.failure_reason(), Some(FailureReason::FanoutSilence));
            silenced += 1;
        }
        assert_eq!(silenced, keys.len());
        assert_eq!(table.poll_timeout(), None);
    }

    /// MISSION L5: the verdict of one publisher's receipt is taken right after it (the
    /// shell acts on it before the record it judged), and the events other entries raised
    /// before it stay queued in their order.
    #[test]
    fn l5_an_entrys_own_event_is_taken_out_of_turn_and_the_rest_keep_their_order() {
        let t0 = Instant::now();
        let mut table = Liveness::new(1);
        let quiet = table.insert_publisher(t0);
        let other = table.insert_publisher(t0 + Duration::from_millis(1));
        let late = table.insert_publisher(t0 + Duration::from_secs(1));
        table.handle_timeout(t0 + PEER_DEADLINE);
        table.handle_timeout(t0 + PEER_DEADLINE + Duration::from_millis(1));
        assert_eq!(table.poll_event_of(late), None);
        assert_eq!(
            table.handle_fanout(
                late,
                FanoutInput::Record,
                t0 + PEER_DEADLINE + Duration::from_millis(1)
            ),
            Ok(Delivery::Deliver)
        );
        assert_eq!(
            table.poll_event_of(late),
            Some(LivenessEvent::Publisher(PublisherEvent::BecameReady))
        );
        assert_eq!(table.poll_event_of(late), None);
        let rest: Vec<LinkKey> =
            std::iter::from_fn(|| table.poll_event().map(|(k, _)| k)).collect();
        assert_eq!(rest, vec![quiet, other]);
    }

    #[test]
    fn removed_key_is_unknown_and_never_reused() {
        let t0 = Instant::now();
        let mut table = Liveness::new(1);
        let a = table.insert_publisher(t0);
        assert!(table.remove(a));
        let b = table.insert_publisher(t0);
        assert_ne!(a, b);
        assert_eq!(
            table.handle_fanout(a, FanoutInput::Beacon, t0),
            Err(LivenessError::UnknownKey(a))
        );
        assert_eq!(table.poll_timeout(), Some(t0 + PEER_DEADLINE));
    }

    #[test]
    fn wrong_kind_is_an_error() {
        let t0 = Instant::now();
        let mut table = Liveness::new(1);
        let p = table.insert_publisher(t0);
        assert_eq!(
            table.handle_ack(p, ConnId(1), 1, t0),
            Err(LivenessError::WrongKind {
                key: p,
                expected: EntryKind::Probe,
                actual: EntryKind::Publisher
            })
        );
    }
}
