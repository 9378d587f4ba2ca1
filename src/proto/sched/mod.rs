//! The fair receive scheduler (MISSION R1-R4): which connection the I/O thread reads next, and
//! when it must stop reading it.
//!
//! One I/O thread per node runs one receive loop over every socket of every topology. This
//! module decides the order of that loop and its caps; the shell does the reading. It is
//! sans-IO like the rest of [`crate::proto`]: it never touches a socket and never reads a
//! clock. Time arrives as `now: Instant` in [`ReceiveScheduler::poll_action`], so the same
//! calls with the same instants give the same actions.
//!
//! # Units, sockets and the ring
//!
//! A **unit** is what the caps are accounted to: one connection, or on a shared socket one
//! peer behind it (MISSION R3: accounting per peer, not per socket). Sockets come in two
//! shapes, and a unit names its shape with [`Source`]:
//!
//! - [`Source::Single`]: a socket that carries one peer only (a DEALER, a SUB socket per
//!   publisher, a ROUTER the node dialled for one peer). The shell can stop reading it at any
//!   record, so the unit's own turn reads it.
//! - [`Source::Shared`]: a bound ROUTER that several peers connected to. The shell learns whose
//!   record it read only after reading it (the routing-id frame), and libzmq fair-queues the
//!   peers' pipes inside the socket. Such a socket is read in a **read phase** of its own,
//!   which only *stages* what it reads, per peer; each peer's turn then hands out its staged
//!   records.
//!
//! The ring holds one entry per single-peer unit and, for each shared socket, its read phase
//! followed directly by the turns of all its peers:
//!
//! ```text
//!   ... | unit A | phase(S) | peer S.1 | peer S.2 | unit B | phase(T) | peer T.1 | ...
//!                   reads S,   hands out  hands out
//!                   stages     S.1's      S.2's
//!                   per peer   staged     staged
//! ```
//!
//! A **rotation** visits the entries in ring order, each at most once, starting at the
//! *cursor*; the cursor always points right after the entry whose turn began last, so the
//! next rotation starts right after the entry where processing stopped, whether the previous
//! rotation went all the way round or was ended early (MISSION R2). Units and shared sockets
//! can be added and removed at any time between calls; removing the entry under the cursor
//! leaves the cursor on that entry's successor.
//!
//! # Caps (MISSION R2)
//!
//! A unit's turn ends at the first of:
//!
//! - [`RECEIVE_COUNT_CAP`] = 64 records handed out (fixed by the contract);
//! - [`RECEIVE_BYTE_CAP`] bytes handed out. The cap is checked after each record, so the one
//!   record that crosses it is still handed out (a record larger than the cap must be
//!   deliverable at all): a turn hands out less than `cap + one record` bytes;
//! - [`RECEIVE_TIME_CAP`] elapsed since the turn began, checked after each action (a read or
//!   a hand-out), so a turn lasts at most the cap plus the cost of its last action;
//! - nothing left to do (no staged record and, for a single-peer unit, its socket would
//!   block).
//!
//! A read phase has no count or byte cap of its own (that would make the peers behind one
//! ROUTER share one peer's allowance, which R3 forbids); it ends when the socket would block,
//! at [`RECEIVE_TIME_CAP`], or after a read that left some peer's staging queue full.
//!
//! A rotation also ends early once [`ROTATION_TIME_CAP`] has elapsed since it began (checked
//! after each action), so the shell services its timers and commands at least that often
//! even when a thousand busy units each use their full turn. Every turn and every rotation
//! performs at least one action before a cap can end it, so the loop always makes progress
//! (a record a single-peer unit read just before a cap ended its turn is the first thing its
//! next turn hands out).
//!
//! # Staging on a shared socket
//!
//! A record read in a read phase goes to its owner's staging queue and is charged to the
//! owner (count and bytes) only when the owner's turn hands it out; the read phase's elapsed
//! time is its own (it is an entry of the ring like a unit). Records of one unit are handed
//! out in the order they were read, staged ones always before newer reads, so order within a
//! unit is preserved exactly.
//!
//! A peer's staging queue is **full** at [`STAGING_RECORD_BOUND`] records or at
//! [`Caps::bytes`] bytes. A read phase stops after the read that fills any peer's queue (but
//! always reads once), and libzmq's high-water mark then pushes back on the senders. Between
//! two read phases of a socket every peer behind it has had exactly one turn, and a turn
//! always hands out at least one staged record, so every queue is below
//! [`STAGING_RECORD_BOUND`] records when a phase starts and never holds more than that plus
//! the records of one read minus one (one, except for a PACK, WIRE.md §4.18, whose records
//! are staged one by one with [`ReceiveScheduler::handle_read_parts`]: at most 64 more). Its
//! bytes stay below [`Caps::bytes`] plus one read, unless time caps keep cutting its turns
//! short (then it may hold up to that many records of any size).
//!
//! A read that stands for several records (a PACK) stages each as a record of its own, for a
//! single-peer unit as for a peer behind a shared socket, so the count and byte caps count
//! the records, not the reads: a turn that reaches a cap inside a PACK leaves the rest
//! staged, and the unit's next turn hands it out before reading anything newer.
//!
//! Because libzmq fair-queues the pipes of one socket (one message per pipe with data, in
//! turn), a read phase that starts with every queue able to take one more record without
//! filling reads the head of every pipe before it stops. That is the normal case: a turn no
//! time cap cuts empties its peer's queue, or hands out at least [`Caps::bytes`] of it and
//! leaves less than one record's bytes. So a quiet peer's probe or ACK behind a shared ROUTER
//! is staged by the next read phase and handed out right after it, in the same rotation. In
//! the pathological case where busy peers' turns are cut after a record or two, each read
//! phase still reads at least one record, so the quiet peer waits at most one read phase per
//! peer behind the same socket.
//!
//! Liveness records (probes, ACKs, beacons) are ordinary records here. The caps bound how
//! long any one unit can hold the loop, so every unit's records, liveness included, are
//! reached in every rotation (MISSION R4).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::time::{Duration, Instant};

/// Records one unit may hand out per turn (one turn per rotation): fixed by the contract
/// (MISSION R2), not configurable.
pub const RECEIVE_COUNT_CAP: usize = 64;

/// Bytes one unit may hand out per turn; the record that crosses the cap is still handed out.
///
/// 256 KiB is 64 records of 4 KiB: for the small records of this protocol (probes, ACKs,
/// calls, replies) the count cap binds first, while a peer sending large records is held to
/// the same amount of copying and decoding per rotation as one sending 64 small ones. It is
/// also the per-peer staging byte bound on a shared socket: a peer behind a ROUTER normally
/// has less than 256 KiB plus one record staged, and never more than 64 records.
pub const RECEIVE_BYTE_CAP: usize = 256 * 1024;

/// Time one unit's turn may take before it ends (checked after each action).
///
/// Handing out 64 small records costs a few tens of microseconds, so this cap only binds
/// for slow handlers. With it, every thousand busy units add about one second to a full
/// cycle of the ring, which bounds how long a quiet peer's probe or ACK can wait, against a
/// 15 s deadline (MISSION L1, R4); and a turn delays timers by at most a millisecond plus one
/// record.
pub const RECEIVE_TIME_CAP: Duration = Duration::from_millis(1);

/// Time one rotation may take before it ends early (checked after each action), so the shell
/// services timers and commands at least every 10 ms plus one action.
///
/// 10 ms is 10 full-length turns: small against the 5 s probe interval (probes go out with at
/// most that much jitter), large against the shell's wait for socket readiness between
/// rotations.
pub const ROTATION_TIME_CAP: Duration = Duration::from_millis(10);

/// Records a peer behind a shared socket may have staged: one turn's count cap, so a turn not
/// cut by the byte or time cap empties a full queue.
pub const STAGING_RECORD_BOUND: usize = RECEIVE_COUNT_CAP;

mod turns;
mod types;
mod units;

use units::{is_full, UnitState, Units};

pub use types::{
    Action, AddUnitError, Caps, ReadRequest, ReadTarget, RejectReason, Rejected, RingEntry,
    RotationEnd, RotationEndReason, SharedSocketId, SocketStats, Source, UnitStats,
};

/// The fair receive scheduler: decides, without touching a socket, which socket the receive
/// loop reads next, whose record it processes next, and when a turn or a rotation ends.
///
/// `U` names a unit (a connection, or a peer behind a shared socket); `R` is the record type
/// the shell reads (for example a multipart message), carried through unchanged. Unit ids are
/// hashed with a fast unkeyed hash: they must be the shell's own ids, never values a peer
/// chooses (such as routing ids).
///
/// # Polling order
///
/// The shell's receive loop drives it like this, taking `now` from its one monotonic clock
/// before each call:
///
/// 1. Call [`poll_action`](Self::poll_action) and act on the result:
///    - [`Action::Deliver`]: process the record (it belongs to the unit named), then go to 1;
///    - [`Action::Read`]: read one record without blocking from the request's target. If one
///      came, report it with [`handle_read`](Self::handle_read), naming its owner (on a shared
///      socket, the unit of its routing id) and its size in bytes (all frames); if the socket
///      would block, report [`handle_would_block`](Self::handle_would_block). Then go to 1;
///    - [`Action::Yield`]: the rotation ended; service timers and commands and call
///      wait for socket readiness, then go to 1, which starts the next rotation.
/// 2. Between any two calls, register and remove units and shared sockets as connections come
///    and go ([`add_unit`](Self::add_unit), [`remove_unit`](Self::remove_unit),
///    [`add_shared_socket`](Self::add_shared_socket),
///    [`remove_shared_socket`](Self::remove_shared_socket)).
///
/// ```
/// use std::time::Instant;
/// use zmesh::proto::sched::{Action, ReadTarget, ReceiveScheduler, Source};
///
/// let mut sched: ReceiveScheduler<u32, Vec<u8>> = ReceiveScheduler::new();
/// sched.add_unit(7, Source::Single).unwrap();
/// let mut socket_7 = vec![b"probe".to_vec()]; // stands in for a DEALER socket
/// let mut processed = Vec::new();
/// loop {
///     match sched.poll_action(Instant::now()) {
///         Action::Deliver { unit, record } => processed.push((unit, record)),
///         Action::Read(read) => match read.target() {
///             ReadTarget::Unit(7) => match socket_7.pop() {
///                 Some(record) => {
///                     let len = record.len();
///                     sched.handle_read(read, 7, record, len).unwrap();
///                 }
///                 None => sched.handle_would_block(read),
///             },
///             _ => sched.handle_would_block(read),
///         },
///         Action::Yield(_end) => break, // timers, commands, wait, then loop again
///     }
/// }
/// assert_eq!(processed, vec![(7, b"probe".to_vec())]);
/// ```
///
/// On a shared socket, register one unit per admitted peer and, for records whose routing id
/// has no unit yet (handshakes of new connections), one admission unit for the socket, so that
/// everything read from the socket has an owner and admission work is capped like any other.
pub struct ReceiveScheduler<U, R> {
    caps: Caps,
    /// The ring, in ring order. Each entry has a slot that never changes while it is in the
    /// ring, so adding or removing one moves nothing else (O(log ring), where positions
    /// would have to be renumbered).
    ring: BTreeMap<Slot, RingEntry<U>>,
    /// The next turn begins with the first entry at or after this slot (wrapping to the
    /// first entry when there is none): right after the entry whose turn began last, so that
    /// an entry added right after where processing stopped is served next, as the resume
    /// rule requires.
    cursor: Slot,
    /// Blocks handed out ([`Slot::block`]).
    next_block: u64,
    /// Places within a block handed out ([`Slot::seq`]).
    next_seq: u64,
    units: Units<U, R>,
    sockets: IdMap<SharedSocketId, SocketState>,
    next_socket: u64,
    rotation: Option<Rotation>,
    rotations_begun: u64,
    turn: Option<Turn<U>>,
    turns_begun: u64,
    /// Readiness mode ([`Self::with_readiness`]): idle entries get no turn.
    readiness: bool,
    /// Readiness mode: the slots of the entries that may have work, so a rotation visits
    /// those only (O(active) instead of O(ring)).
    active: BTreeSet<Slot>,
    /// Records staged in all units together.
    staged: usize,
}

/// The scheduler's maps, keyed by the shell's own unit and socket ids.
///
/// Those ids are never bytes chosen by a peer (the shell derives them from its own slot,
/// link and connection counters), so a fast unkeyed hash is safe here; SipHash's
/// resistance to chosen keys would buy nothing, and it was the largest single cost of the
/// receive loop (about a tenth of its instructions, several lookups per record).
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A multiply-rotate hasher over machine words (the scheme of rustc's FxHasher).
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Where an entry sits in the ring. The ring is a sequence of blocks in the order they were
/// added: a single-peer unit is a block of its own (`seq` 0); a shared socket's block is its
/// read phase (`seq` 0) followed by its peers in the order they joined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Slot {
    block: u64,
    seq: u64,
}

impl Slot {
    /// The slot just after this one: the first entry at or after it is this entry's next.
    fn after(self) -> Slot {
        Slot {
            block: self.block,
            seq: self.seq.saturating_add(1),
        }
    }
}

struct SocketState {
    full_peers: usize,
    served_in: u64,
    stats: SocketStats,
    /// Readiness mode: the socket may have records.
    readable: bool,
    /// The read phase's slot in the ring (its block holds the socket's peers).
    pos: Slot,
}

struct Turn<U> {
    entry: RingEntry<U>,
    /// The position of the turn's unit in `units` (`None` for a read phase): the unit is
    /// registered while its turn is under way, since removing it ends the turn.
    unit: Option<usize>,
    seq: u64,
    /// When the turn's time cap is reached ([`Deadline`]).
    deadline: Deadline,
    actions: u64,
    delivered: usize,
    bytes: usize,
}

struct Rotation {
    number: u64,
    /// When the rotation's time cap is reached ([`Deadline`]).
    deadline: Deadline,
    actions: u64,
    turns: u64,
    delivered: u64,
    bytes: u64,
    records_read: u64,
}

/// The instant a time cap is reached, computed once when the turn or rotation begins, so a
/// cap is judged with one comparison of instants per action rather than a subtraction.
/// `reached(now)` is exactly `now.saturating_duration_since(started) >= cap`.
#[derive(Clone, Copy)]
enum Deadline {
    /// A zero cap: reached at once.
    Now,
    /// Reached at this instant.
    At(Instant),
    /// `started + cap` is past what an `Instant` can hold: never reached.
    Never,
}

impl Deadline {
    fn after(started: Instant, cap: Duration) -> Deadline {
        if cap.is_zero() {
            return Deadline::Now;
        }
        match started.checked_add(cap) {
            Some(at) => Deadline::At(at),
            None => Deadline::Never,
        }
    }

    fn reached(self, now: Instant) -> bool {
        match self {
            Deadline::Now => true,
            Deadline::At(at) => now >= at,
            Deadline::Never => false,
        }
    }
}

#[derive(Default, Clone, Copy)]
struct CapHits {
    count: bool,
    bytes: bool,
    time: bool,
}

impl CapHits {
    fn any(self) -> bool {
        self.count || self.bytes || self.time
    }
}

enum Step<U, R> {
    Act(Action<U, R>),
    End(RotationEndReason),
}

impl<U: Copy + Eq + Hash, R> Default for ReceiveScheduler<U, R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<U: Copy + Eq + Hash, R> ReceiveScheduler<U, R> {
    /// An empty scheduler with [`Caps::default`].
    pub fn new() -> Self {
        Self::with_caps(Caps::default())
    }

    /// An empty scheduler with the given caps (for tests; the runtime uses [`Self::new`]).
    pub fn with_caps(caps: Caps) -> Self {
        Self {
            caps,
            ring: BTreeMap::new(),
            cursor: Slot::default(),
            next_block: 0,
            next_seq: 0,
            units: Units::new(),
            sockets: IdMap::default(),
            next_socket: 0,
            rotation: None,
            rotations_begun: 0,
            turn: None,
            turns_begun: 0,
            readiness: false,
            active: BTreeSet::new(),
            staged: 0,
        }
    }

    /// Switches to readiness mode: a rotation gives turns only to the entries that may have
    /// work, so an idle rotation costs the active entries, not the whole ring.
    ///
    /// An entry may have work when it has staged records or, for a single-peer unit or a
    /// read phase, when its socket may have records. The shell reports the latter: a socket
    /// answered with [`handle_would_block`](Self::handle_would_block) is taken as empty until
    /// the shell says otherwise with [`handle_readable`](Self::handle_readable) (new units and
    /// sockets start readable). Skipped entries are exactly those whose turn would only have
    /// asked for a read that would block, or found nothing staged. The rules stay those of
    /// the ring: every entry with work has one turn per rotation, in ring order, under the
    /// same caps, and the next rotation starts right after the entry whose turn began last.
    /// Provided the shell reports every socket that has records, each unit is handed the same
    /// records in the same rotations as without this mode; what differs is where a complete
    /// rotation leaves the cursor (after the last entry that had a turn rather than after the
    /// last idle one), so units may follow each other from another starting point, and
    /// [`UnitStats::turns`] and [`SocketStats::phases`] no longer count empty turns.
    pub fn with_readiness(mut self) -> Self {
        self.readiness = true;
        let entries: Vec<RingEntry<U>> = self.ring.values().copied().collect();
        for entry in entries {
            self.refresh(entry);
        }
        self
    }

    /// Readiness mode: `target`'s socket may have records to read, so its entry gets a turn
    /// in the next rotation (or in the current one, if not served yet). Without readiness
    /// mode every socket counts as readable and this does nothing.
    pub fn handle_readable(&mut self, target: ReadTarget<U>) {
        if !self.readiness {
            return;
        }
        let entry = match target {
            ReadTarget::Unit(unit) => match self.units.get_mut(&unit) {
                Some(state) if state.source == Source::Single => {
                    state.readable = true;
                    RingEntry::Unit(unit)
                }
                _ => return,
            },
            ReadTarget::Shared(socket) => match self.sockets.get_mut(&socket) {
                Some(state) => {
                    state.readable = true;
                    RingEntry::ReadPhase(socket)
                }
                None => return,
            },
        };
        self.refresh(entry);
    }

    /// Readiness mode: puts `entry` in or out of the active set after its queue or its
    /// socket's readiness changed.
    fn refresh(&mut self, entry: RingEntry<U>) {
        if !self.readiness {
            return;
        }
        match entry {
            RingEntry::Unit(unit) => {
                if let Some(at) = self.units.position(&unit) {
                    self.refresh_unit(at);
                }
            }
            RingEntry::ReadPhase(socket) => {
                if let Some(state) = self.sockets.get(&socket) {
                    let (pos, active) = (state.pos, state.readable);
                    self.set_active(pos, active);
                }
            }
        }
    }

    /// [`refresh`](Self::refresh) of the unit at position `at` of `units`.
    fn refresh_unit(&mut self, at: usize) {
        if !self.readiness {
            return;
        }
        if let Some(state) = self.units.at(at) {
            let active =
                !state.queue.is_empty() || (state.source == Source::Single && state.readable);
            let pos = state.pos;
            self.set_active(pos, active);
        }
    }

    /// Puts the ring entry at `pos` in or out of the active set.
    fn set_active(&mut self, pos: Slot, active: bool) {
        if active {
            self.active.insert(pos);
        } else {
            self.active.remove(&pos);
        }
    }

    /// The caps in force.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Registers a shared socket; its read phase joins the end of the ring (like a unit in
    /// [`add_unit`](Self::add_unit)).
    pub fn add_shared_socket(&mut self) -> SharedSocketId {
        self.next_socket += 1;
        let id = SharedSocketId(self.next_socket);
        let slot = self.new_block();
        self.sockets.insert(
            id,
            SocketState {
                full_peers: 0,
                served_in: 0,
                stats: SocketStats::default(),
                readable: true,
                pos: slot,
            },
        );
        self.ring.insert(slot, RingEntry::ReadPhase(id));
        self.refresh(RingEntry::ReadPhase(id));
        id
    }

    /// Removes a shared socket and every unit behind it; returns each unit with the records it
    /// had staged, in order. Returns an empty list for an unknown socket.
    pub fn remove_shared_socket(&mut self, socket: SharedSocketId) -> Vec<(U, Vec<R>)> {
        let Some(phase) = self.sockets.get(&socket).map(|state| state.pos) else {
            return Vec::new();
        };
        let block = self.ring.range(
            phase.after()..Slot {
                block: phase.block.saturating_add(1),
                seq: 0,
            },
        );
        let peers: Vec<U> = block
            .filter_map(|(_, entry)| match entry {
                RingEntry::Unit(u) => Some(*u),
                RingEntry::ReadPhase(_) => None,
            })
            .collect();
        let mut removed = Vec::with_capacity(peers.len());
        for unit in peers {
            if let Some(records) = self.remove_unit(unit) {
                removed.push((unit, records));
            }
        }
        if let Some(state) = self.sockets.remove(&socket) {
            self.remove_entry(RingEntry::ReadPhase(socket), state.pos);
        }
        removed
    }

    /// Registers a unit. A single-peer unit joins the end of the ring; a peer of a shared
    /// socket joins the end of that socket's group (after its read phase and its other peers).
    /// An entry that lands right where the next turn would begin is served next (so the
    /// entries already served stay ahead of it only by one turn each); otherwise the new unit
    /// has its first turn in the current rotation or the next one.
    pub fn add_unit(&mut self, unit: U, source: Source) -> Result<(), AddUnitError> {
        if self.units.contains_key(&unit) {
            return Err(AddUnitError::AlreadyPresent);
        }
        let at = match source {
            Source::Single => self.new_block(),
            Source::Shared(socket) => {
                let socket_state = self
                    .sockets
                    .get_mut(&socket)
                    .ok_or(AddUnitError::UnknownSocket(socket))?;
                socket_state.stats.peers += 1;
                let block = socket_state.pos.block;
                self.next_seq = self.next_seq.saturating_add(1);
                Slot {
                    block,
                    seq: self.next_seq,
                }
            }
        };
        self.units.insert(
            unit,
            UnitState {
                source,
                queue: VecDeque::new(),
                queued_bytes: 0,
                served_in: 0,
                stats: UnitStats::default(),
                readable: true,
                pos: at,
            },
        );
        self.ring.insert(at, RingEntry::Unit(unit));
        self.refresh(RingEntry::Unit(unit));
        Ok(())
    }

    /// Removes a unit and returns the records it had staged, in order (`None` if unknown).
    ///
    /// If it is the unit whose turn is under way, the turn ends; the rotation goes on with the
    /// next entry, so "resume right after where processing stopped" still holds.
    pub fn remove_unit(&mut self, unit: U) -> Option<Vec<R>> {
        let state = self.units.remove(&unit)?;
        self.staged = self.staged.saturating_sub(state.queue.len());
        if let Source::Shared(socket) = state.source {
            if let Some(socket_state) = self.sockets.get_mut(&socket) {
                socket_state.stats.peers = socket_state.stats.peers.saturating_sub(1);
                if is_full(&state, self.caps.bytes) {
                    socket_state.full_peers = socket_state.full_peers.saturating_sub(1);
                }
            }
        }
        self.remove_entry(RingEntry::Unit(unit), state.pos);
        Some(state.queue.into_iter().map(|(record, _)| record).collect())
    }

    /// Whether the unit is registered.
    pub fn contains(&self, unit: U) -> bool {
        self.units.contains_key(&unit)
    }

    /// Number of registered units.
    pub fn len(&self) -> usize {
        self.units.len()
    }

    /// Whether no unit is registered.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// Whether some unit holds records that were read but not handed out yet.
    ///
    /// The shell's socket readiness cannot show these records (they left libzmq already), so
    /// the shell must not sleep while this is true. Records still queued in libzmq need no
    /// such flag: their socket is readable.
    pub fn has_staged(&self) -> bool {
        self.staged > 0
    }

    /// The ring in order, starting at its first entry (diagnostics and tests).
    pub fn ring(&self) -> impl Iterator<Item = RingEntry<U>> + '_ {
        self.ring.values().copied()
    }

    /// The entry the next turn begins with, if the ring is not empty.
    pub fn cursor(&self) -> Option<RingEntry<U>> {
        self.next_at_or_after(self.cursor).map(|(_, entry)| entry)
    }

    /// The entry whose turn is under way, if any.
    pub fn current_turn(&self) -> Option<RingEntry<U>> {
        self.turn.as_ref().map(|turn| turn.entry)
    }

    /// Number of the rotation the next action belongs to: the one under way, or the next one
    /// if the last [`poll_action`](Self::poll_action) yielded.
    pub fn rotation_number(&self) -> u64 {
        match &self.rotation {
            Some(rotation) => rotation.number,
            None => self.rotations_begun + 1,
        }
    }

    /// Counters of a unit (`None` if unknown).
    pub fn unit_stats(&self, unit: U) -> Option<UnitStats> {
        self.units.get(&unit).map(|state| state.stats)
    }

    /// Counters of a shared socket (`None` if unknown).
    pub fn socket_stats(&self, socket: SharedSocketId) -> Option<SocketStats> {
        self.sockets.get(&socket).map(|state| state.stats)
    }

    /// Reports the record a [`ReadRequest`] produced: `owner` is the unit it belongs to (on a
    /// shared socket, the unit of its routing id) and `len` its size in bytes (all frames).
    ///
    /// The record joins the owner's queue behind any record staged before it, and is handed
    /// out in the owner's turn. A request from an earlier turn is still accepted (the record
    /// was read and must not be lost). Refused, with the request and record handed back, if
    /// the owner is unknown or not behind the socket that was read.
    pub fn handle_read(
        &mut self,
        read: ReadRequest<U>,
        owner: U,
        record: R,
        len: usize,
    ) -> Result<(), Rejected<U, R>> {
        let Some((at, state)) = self
            .units
            .position(&owner)
            .and_then(|at| Some((at, self.units.at(at)?)))
        else {
            return Err(Rejected {
                read,
                record,
                reason: RejectReason::UnknownUnit,
            });
        };
        let fits = match read.target {
            ReadTarget::Unit(unit) => unit == owner && state.source == Source::Single,
            ReadTarget::Shared(socket) => state.source == Source::Shared(socket),
        };
        if !fits {
            return Err(Rejected {
                read,
                record,
                reason: RejectReason::WrongSocket,
            });
        }
        if let ReadTarget::Shared(socket) = read.target {
            if let Some(socket_state) = self.sockets.get_mut(&socket) {
                socket_state.stats.records_read += 1;
                socket_state.stats.bytes_read += len as u64;
            }
        }
        if let Some(rotation) = self.rotation.as_mut() {
            rotation.records_read += 1;
        }
        self.push_records(at, [(record, len)]);
        Ok(())
    }

    /// [`handle_read`](Self::handle_read) for one read that stands for several records (a
    /// PACK, WIRE.md §4.18): each of `records`, with its share of the read's bytes, joins the
    /// owner's queue as a record of its own, in order, so the count and byte caps count each
    /// (MISSION R2) and what one turn does not hand out waits for the owner's next turn, in
    /// the next rotation. The socket's and the rotation's read counters count one read.
    /// Refused as `handle_read` is, with every record handed back, before any is staged.
    ///
    /// A peer's queue may then hold up to [`STAGING_RECORD_BOUND`] plus one read's records
    /// minus one: the bound stops the read phase after the read that crossed it.
    ///
    /// `records` is any iterator of them (the shell decodes a PACK's records as they are
    /// staged, with no list of its own); refused, it is handed back unconsumed.
    pub fn handle_read_parts<I>(
        &mut self,
        read: ReadRequest<U>,
        owner: U,
        records: I,
    ) -> Result<(), Rejected<U, I>>
    where
        I: IntoIterator<Item = (R, usize)>,
    {
        let at = self.units.position(&owner);
        let reason = match at.and_then(|at| self.units.at(at)) {
            None => Some(RejectReason::UnknownUnit),
            Some(state) => {
                let fits = match read.target {
                    ReadTarget::Unit(unit) => unit == owner && state.source == Source::Single,
                    ReadTarget::Shared(socket) => state.source == Source::Shared(socket),
                };
                (!fits).then_some(RejectReason::WrongSocket)
            }
        };
        let (Some(at), None) = (at, reason) else {
            return Err(Rejected {
                read,
                record: records,
                reason: reason.unwrap_or(RejectReason::UnknownUnit),
            });
        };
        if let Some(rotation) = self.rotation.as_mut() {
            rotation.records_read += 1;
        }
        let len = self.push_records(at, records);
        if let ReadTarget::Shared(socket) = read.target {
            if let Some(socket_state) = self.sockets.get_mut(&socket) {
                socket_state.stats.records_read += 1;
                socket_state.stats.bytes_read += len as u64;
            }
        }
        Ok(())
    }

    /// Reports that the socket of a [`ReadRequest`] had nothing to read: the turn (or read
    /// phase) that asked ends. A request from an earlier turn is ignored.
    ///
    /// In readiness mode the socket also counts as empty from now on, until
    /// [`handle_readable`](Self::handle_readable).
    pub fn handle_would_block(&mut self, read: ReadRequest<U>) {
        if self.turn.as_ref().is_some_and(|turn| turn.seq == read.turn) {
            self.turn = None;
        }
        if !self.readiness {
            return;
        }
        let entry = match read.target {
            ReadTarget::Unit(unit) => match self.units.get_mut(&unit) {
                Some(state) => {
                    state.readable = false;
                    RingEntry::Unit(unit)
                }
                None => return,
            },
            ReadTarget::Shared(socket) => match self.sockets.get_mut(&socket) {
                Some(state) => {
                    state.readable = false;
                    RingEntry::ReadPhase(socket)
                }
                None => return,
            },
        };
        self.refresh(entry);
    }

    /// A slot for a new block at the end of the ring.
    fn new_block(&mut self) -> Slot {
        self.next_block = self.next_block.saturating_add(1);
        Slot {
            block: self.next_block,
            seq: 0,
        }
    }

    /// The first entry at or after `slot`, else the ring's first entry (none if empty).
    fn next_at_or_after(&self, slot: Slot) -> Option<(Slot, RingEntry<U>)> {
        self.ring
            .range(slot..)
            .next()
            .or_else(|| self.ring.iter().next())
            .map(|(slot, entry)| (*slot, *entry))
    }

    /// Takes `entry`, at `slot`, out of the ring (and of the active set). The next turn
    /// still begins with what followed the removed entry. If it was the last entry before the
    /// cursor, the cursor moves back to right after the entry before it, so that an entry
    /// added there later is served next, as one added where the removed entry stood would
    /// have been (the gap it leaves is where the next turn begins).
    fn remove_entry(&mut self, entry: RingEntry<U>, slot: Slot) {
        if self.ring.get(&slot) == Some(&entry) {
            self.ring.remove(&slot);
            self.active.remove(&slot);
            if slot < self.cursor && self.ring.range(slot..self.cursor).next().is_none() {
                self.cursor = self
                    .ring
                    .range(..slot)
                    .next_back()
                    .map_or(Slot::default(), |(before, _)| before.after());
            }
        }
        if self.turn.as_ref().is_some_and(|turn| turn.entry == entry) {
            self.turn = None;
        }
    }

    /// Stages `records` for the unit at position `at` of `units`, in order, with one update
    /// of the active set; returns their bytes.
    fn push_records(&mut self, at: usize, records: impl IntoIterator<Item = (R, usize)>) -> usize {
        let byte_bound = self.caps.bytes;
        let Some(state) = self.units.at_mut(at) else {
            return 0;
        };
        let was_full = is_full(state, byte_bound);
        let (mut n, mut bytes) = (0, 0usize);
        for (record, len) in records {
            state.queue.push_back((record, len));
            state.queued_bytes = state.queued_bytes.saturating_add(len);
            n += 1;
            bytes = bytes.saturating_add(len);
        }
        state.stats.staged = state.queue.len();
        state.stats.staged_bytes = state.queued_bytes;
        state.stats.staged_peak = state.stats.staged_peak.max(state.queue.len());
        let now_full = is_full(state, byte_bound);
        if let (Source::Shared(socket), false, true) = (state.source, was_full, now_full) {
            if let Some(socket_state) = self.sockets.get_mut(&socket) {
                socket_state.full_peers += 1;
            }
        }
        self.staged += n;
        self.refresh_unit(at);
        bytes
    }
}

impl<U: fmt::Debug, R> fmt::Debug for ReceiveScheduler<U, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiveScheduler")
            .field("caps", &self.caps)
            .field("ring", &self.ring.values().collect::<Vec<_>>())
            .field("cursor", &self.cursor)
            .field("rotations_begun", &self.rotations_begun)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
