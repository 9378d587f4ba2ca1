//! Property and scenario tests of the fair receive scheduler (MISSION R1-R4), through its
//! public API only.
//!
//! A small simulation stands in for the I/O thread: single-peer sockets are FIFOs, shared
//! sockets are libzmq-style fair queues over one pipe per peer (`fq_t`: one message per active
//! pipe in turn, a pipe leaves the active set when a read finds it empty and rejoins at the
//! end when data arrives), and a fake clock advances by a chosen cost per action. The driver
//! loop in [`Sim::step`] is written as the shell's receive loop will be. Every property is
//! checked online, on every action, and recorded per MISSION requirement; each test asserts
//! its own requirement's record is clean and that the run exercised it.
//!
//! The simulation is here; its tests are in tests/scheduler/: `random` (random scenarios,
//! R1-R3) and `flood` (one flooder beside quiet peers, R3, R4).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use zmesh::proto::sched::{
    Action, Caps, ReadTarget, ReceiveScheduler, RingEntry, RotationEnd, SharedSocketId, Source,
    RECEIVE_COUNT_CAP, STAGING_RECORD_BOUND,
};

type UnitId = u32;

/// A record as the simulated shell reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    owner: UnitId,
    seq: u64,
    len: usize,
    /// Time the shell spends processing it once handed out.
    cost: Duration,
    /// Rotation in progress (or next to start) when it arrived on the socket.
    sent_rotation: u64,
    sent_at: Instant,
}

/// libzmq's fair queue (`fq_t`) over one pipe per peer of a shared socket.
#[derive(Default)]
struct FairQueue {
    pipes: Vec<(UnitId, VecDeque<Rec>)>,
    active: usize,
    current: usize,
}

impl FairQueue {
    fn index(&self, peer: UnitId) -> Option<usize> {
        self.pipes.iter().position(|(p, _)| *p == peer)
    }

    fn attach(&mut self, peer: UnitId) {
        self.pipes.push((peer, VecDeque::new()));
        let last = self.pipes.len() - 1;
        self.pipes.swap(self.active, last);
        self.active += 1;
    }

    fn detach(&mut self, peer: UnitId) {
        let Some(i) = self.index(peer) else { return };
        if i < self.active {
            self.active -= 1;
            self.pipes.swap(i, self.active);
            if self.current == self.active {
                self.current = 0;
            }
        }
        if let Some(j) = self.index(peer) {
            self.pipes.swap_remove(j);
        }
    }

    fn push(&mut self, rec: Rec) {
        let Some(i) = self.index(rec.owner) else {
            return;
        };
        self.pipes[i].1.push_back(rec);
        if i >= self.active {
            self.pipes.swap(i, self.active);
            self.active += 1;
        }
    }

    fn pipe_len(&self, peer: UnitId) -> usize {
        self.index(peer).map_or(0, |i| self.pipes[i].1.len())
    }

    fn recv(&mut self) -> Option<Rec> {
        while self.active > 0 {
            let i = self.current;
            if let Some(rec) = self.pipes[i].1.pop_front() {
                self.current = (i + 1) % self.active;
                return Some(rec);
            }
            self.active -= 1;
            self.pipes.swap(i, self.active);
            if self.current == self.active {
                self.current = 0;
            }
        }
        None
    }
}

/// The MISSION requirement a violation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Req {
    /// R2: count, byte and time caps per unit turn; rotation cap; one turn per rotation.
    Caps,
    /// R1/R2: a unit with deliverable records acts before any other entry has two turns.
    NoStarvation,
    /// R2: the next rotation starts right after the entry where processing stopped.
    Resume,
    /// R3: staging bounds and the quiet-peer bound on a shared socket.
    PerPeer,
    /// Order within a unit, nothing lost or misdelivered.
    Order,
}

struct TurnObs {
    entry: RingEntry<UnitId>,
    rotation: u64,
    first_at: Instant,
    delivered: usize,
    bytes: usize,
    /// For a read phase: its number and the socket's cap hits when it began.
    phase: Option<(u64, u64)>,
}

/// What a read phase looked like: whether every peer had room for one more record of any
/// size when it began ("roomy"), and whether a time cap cut it.
#[derive(Clone, Copy)]
struct PhaseObs {
    roomy: bool,
    cut: bool,
}

struct QuietObs {
    socket: SharedSocketId,
    phases_at_send: u64,
    peers_at_send: u64,
}

/// Per-unit cost profile: processing time per record, by slowness class.
const SLOWNESS: [Duration; 5] = [
    Duration::from_micros(1),
    Duration::from_micros(5),
    Duration::from_micros(50),
    Duration::from_micros(300),
    Duration::from_micros(1500),
];
const SIZES: [usize; 6] = [16, 100, 1024, 4096, 65_536, 300_000];
const READ_COST: Duration = Duration::from_micros(1);
const YIELD_COST: Duration = Duration::from_micros(20);

/// The simulation's view of one unit.
struct SimUnit {
    /// `None` for a single-peer unit, else the shared socket it is behind.
    socket: Option<SharedSocketId>,
    /// The single-peer socket's queue (peers' records wait in their socket's fair queue).
    pipe: VecDeque<Rec>,
    slowness: Duration,
    sent: u64,
    next_expected: u64,
    /// Records (and their bytes) handed to the scheduler and not yet handed back: the ground
    /// truth the staging bounds are checked against.
    held: usize,
    held_bytes: usize,
    /// While it has deliverable records and has not acted: turns begun by other entries.
    waiting: Option<Vec<(RingEntry<UnitId>, u32)>>,
}

/// The ring and its cursor, taken before a rotation's first poll.
type RingSnapshot = (Vec<RingEntry<UnitId>>, Option<RingEntry<UnitId>>);

struct Sim {
    sched: ReceiveScheduler<UnitId, Rec>,
    caps: Caps,
    now: Instant,
    /// Indexed by unit id; `None` once removed.
    units: Vec<Option<SimUnit>>,
    shared: HashMap<SharedSocketId, FairQueue>,
    live: Vec<UnitId>,
    sockets: Vec<SharedSocketId>,
    max_cost: Duration,
    max_len: usize,
    // Observation state.
    in_rotation: bool,
    rotation_started: Option<Instant>,
    rotation_entries: Vec<RingEntry<UnitId>>,
    turn: Option<TurnObs>,
    start_snapshot: Option<RingSnapshot>,
    quiet: HashMap<(UnitId, u64), QuietObs>,
    phases: HashMap<(SharedSocketId, u64), PhaseObs>,
    // What the run exercised.
    delivered: u64,
    yields: Vec<RotationEnd>,
    windows_closed: u64,
    resume_checks: u64,
    quiet_checked: u64,
    quiet_strong: u64,
    violations: Vec<(Req, String)>,
    /// The delivery made by the last step, for scenario tests.
    last_delivery: Option<Delivery>,
}

/// A record handed out, as a scenario test sees it.
struct Delivery {
    unit: UnitId,
    /// Rotations between the one it arrived in and the one it was handed out in.
    rotations_waited: u64,
    /// Time from its arrival on the socket to its hand-out.
    latency: Duration,
}

impl Sim {
    fn new(caps: Caps, t0: Instant) -> Self {
        Self {
            sched: ReceiveScheduler::with_caps(caps),
            caps,
            now: t0,
            units: vec![None],
            shared: HashMap::new(),
            live: Vec::new(),
            sockets: Vec::new(),
            max_cost: READ_COST,
            max_len: 0,
            in_rotation: false,
            rotation_started: None,
            rotation_entries: Vec::new(),
            turn: None,
            start_snapshot: None,
            quiet: HashMap::new(),
            phases: HashMap::new(),
            delivered: 0,
            yields: Vec::new(),
            windows_closed: 0,
            resume_checks: 0,
            quiet_checked: 0,
            quiet_strong: 0,
            violations: Vec::new(),
            last_delivery: None,
        }
    }

    fn unit(&self, unit: UnitId) -> Option<&SimUnit> {
        self.units.get(unit as usize).and_then(Option::as_ref)
    }

    fn unit_mut(&mut self, unit: UnitId) -> Option<&mut SimUnit> {
        self.units.get_mut(unit as usize).and_then(Option::as_mut)
    }

    fn violate(&mut self, req: Req, what: String) {
        self.violations.push((req, what));
    }

    fn violations_of(&self, req: Req) -> Vec<&String> {
        self.violations
            .iter()
            .filter(|(r, _)| *r == req)
            .map(|(_, w)| w)
            .collect()
    }

    fn new_unit(&mut self, slowness: Duration, socket: Option<SharedSocketId>) -> UnitId {
        let unit = self.units.len() as UnitId;
        self.units.push(Some(SimUnit {
            socket,
            pipe: VecDeque::new(),
            slowness,
            sent: 0,
            next_expected: 1,
            held: 0,
            held_bytes: 0,
            waiting: None,
        }));
        self.live.push(unit);
        unit
    }

    fn add_single(&mut self, slowness: Duration) -> UnitId {
        let unit = self.new_unit(slowness, None);
        assert_eq!(self.sched.add_unit(unit, Source::Single), Ok(()));
        unit
    }

    fn add_socket(&mut self) -> SharedSocketId {
        let socket = self.sched.add_shared_socket();
        self.shared.insert(socket, FairQueue::default());
        self.sockets.push(socket);
        socket
    }

    fn add_peer(&mut self, socket: SharedSocketId, slowness: Duration) -> UnitId {
        let unit = self.new_unit(slowness, Some(socket));
        assert_eq!(self.sched.add_unit(unit, Source::Shared(socket)), Ok(()));
        if let Some(fq) = self.shared.get_mut(&socket) {
            fq.attach(unit);
        }
        unit
    }

    /// Forgets a removed unit, checking that the records returned are exactly those it had
    /// handed to the scheduler, continuing its delivered sequence.
    fn forget(&mut self, unit: UnitId, returned: &[Rec]) {
        let Some(state) = self.units.get_mut(unit as usize).and_then(Option::take) else {
            return;
        };
        let mut problems = Vec::new();
        if returned.len() != state.held {
            problems.push(format!(
                "unit {unit}: {} records returned, {} held",
                returned.len(),
                state.held
            ));
        }
        for (expected, rec) in (state.next_expected..).zip(returned) {
            if rec.owner != unit || rec.seq != expected {
                problems.push(format!(
                    "unit {unit} returned {}#{} expecting #{expected}",
                    rec.owner, rec.seq
                ));
            }
        }
        for problem in problems {
            self.violate(Req::Order, problem);
        }
        if let Some(fq) = state.socket.and_then(|s| self.shared.get_mut(&s)) {
            fq.detach(unit);
        }
        self.live.retain(|u| *u != unit);
    }

    fn remove_unit(&mut self, unit: UnitId) {
        match self.sched.remove_unit(unit) {
            Some(returned) => self.forget(unit, &returned),
            None => self.violate(
                Req::Order,
                format!("live unit {unit} unknown to the scheduler"),
            ),
        }
    }

    fn remove_socket(&mut self, socket: SharedSocketId) {
        for (unit, returned) in self.sched.remove_shared_socket(socket) {
            self.forget(unit, &returned);
        }
        let stale: Vec<UnitId> = self
            .live
            .iter()
            .copied()
            .filter(|u| self.unit(*u).is_some_and(|st| st.socket == Some(socket)))
            .collect();
        if !stale.is_empty() {
            self.violate(Req::Order, format!("peers {stale:?} survived their socket"));
        }
        self.shared.remove(&socket);
        self.sockets.retain(|s| *s != socket);
    }

    /// Queues `n` records of `len` bytes from `unit` on its socket.
    fn send(&mut self, unit: UnitId, n: usize, len: usize) {
        let rotation = self.sched.rotation_number();
        let now = self.now;
        let Some(state) = self.units.get_mut(unit as usize).and_then(Option::as_mut) else {
            return;
        };
        // Processing cost grows with size: 1 us per 4 KiB on top of the unit's base cost.
        let cost = state.slowness + Duration::from_micros((len / 4096) as u64);
        self.max_cost = self.max_cost.max(cost);
        self.max_len = self.max_len.max(len);
        let first = state.sent + 1;
        let quiet = state.held == 0;
        let socket = state.socket;
        let recs = (first..first + n as u64).map(|seq| Rec {
            owner: unit,
            seq,
            len,
            cost,
            sent_rotation: rotation,
            sent_at: now,
        });
        state.sent += n as u64;
        match socket {
            None => state.pipe.extend(recs),
            Some(s) => {
                let phases = self.sched.socket_stats(s).map_or(0, |st| st.phases);
                let peers = self.sched.socket_stats(s).map_or(0, |st| st.peers as u64);
                if let Some(fq) = self.shared.get_mut(&s) {
                    if quiet && fq.pipe_len(unit) == 0 && n > 0 {
                        self.quiet.insert(
                            (unit, first),
                            QuietObs {
                                socket: s,
                                phases_at_send: phases,
                                peers_at_send: peers,
                            },
                        );
                    }
                    for rec in recs {
                        fq.push(rec);
                    }
                }
            }
        }
    }

    fn is_empty_peer(&self, entry: RingEntry<UnitId>) -> bool {
        match entry {
            RingEntry::Unit(u) => self
                .unit(u)
                .is_some_and(|st| st.socket.is_some() && st.held == 0),
            RingEntry::ReadPhase(_) => false,
        }
    }

    /// R2 resume rule: every ring entry strictly between `from` (exclusive; `None` means
    /// "start at `to`") and `to` had nothing to do, so was skipped without an action.
    fn check_skipped(
        &mut self,
        ring: &[RingEntry<UnitId>],
        from: Option<usize>,
        to: RingEntry<UnitId>,
        what: &str,
    ) {
        let Some(to_idx) = ring.iter().position(|e| *e == to) else {
            return;
        };
        let mut i = match from {
            Some(f) => (f + 1) % ring.len(),
            None => to_idx,
        };
        let mut guard = 0;
        while i != to_idx && guard <= ring.len() {
            if !self.is_empty_peer(ring[i]) {
                self.violate(
                    Req::Resume,
                    format!(
                        "{what}: {:?} had work but was passed over before {to:?}",
                        ring[i]
                    ),
                );
            }
            i = (i + 1) % ring.len();
            guard += 1;
        }
        self.resume_checks += 1;
    }

    fn phase_cap_hits(&self, socket: SharedSocketId) -> u64 {
        self.sched
            .socket_stats(socket)
            .map_or(0, |st| st.time_cap_hits + st.rotation_cap_cuts)
    }

    /// Whether every peer of `socket` can take one more record of any size without its
    /// staging queue becoming full.
    fn is_roomy(&self, socket: SharedSocketId) -> bool {
        self.live.iter().all(|u| {
            self.unit(*u).is_none_or(|st| {
                st.socket != Some(socket)
                    || (st.held + 1 < STAGING_RECORD_BOUND
                        && st.held_bytes + self.max_len < self.caps.bytes())
            })
        })
    }

    fn close_turn(&mut self, end: Instant) {
        if let Some(turn) = self.turn.take() {
            if let (RingEntry::ReadPhase(socket), Some((number, hits))) = (turn.entry, turn.phase) {
                let cut = self.phase_cap_hits(socket) != hits;
                if let Some(obs) = self.phases.get_mut(&(socket, number)) {
                    obs.cut = cut;
                }
            }
            let took = end.saturating_duration_since(turn.first_at);
            if took > self.caps.unit_time() + self.max_cost {
                self.violate(
                    Req::Caps,
                    format!(
                        "turn of {:?} in rotation {} took {took:?}",
                        turn.entry, turn.rotation
                    ),
                );
            }
        }
    }

    /// Observations made before each poll: open waits, check staging bounds.
    fn before_poll(&mut self) {
        let mut problems = Vec::new();
        for i in 0..self.live.len() {
            let unit = self.live[i];
            let Some(st) = self.units.get_mut(unit as usize).and_then(Option::as_mut) else {
                continue;
            };
            if (st.held > 0 || !st.pipe.is_empty()) && st.waiting.is_none() {
                st.waiting = Some(Vec::new());
            }
            if st.held > STAGING_RECORD_BOUND {
                problems.push(format!("unit {unit} staged {}", st.held));
            }
            if st.held_bytes >= self.caps.bytes() + self.max_len {
                // Only bounded so while the unit's turns are not cut short by time.
                let uncut = self
                    .sched
                    .unit_stats(unit)
                    .is_some_and(|s| s.time_cap_hits == 0 && s.rotation_cap_cuts == 0);
                if uncut {
                    problems.push(format!("unit {unit} staged {} bytes", st.held_bytes));
                }
            }
        }
        for problem in problems {
            self.violate(Req::PerPeer, problem);
        }
        if !self.in_rotation && self.start_snapshot.is_none() {
            self.start_snapshot = Some((self.sched.ring().collect(), self.sched.cursor()));
        }
    }

    /// Observations when an action of `entry` is issued at `now`.
    fn on_action(&mut self, entry: RingEntry<UnitId>) {
        let rotation = self.sched.rotation_number();
        if !self.in_rotation {
            self.in_rotation = true;
            self.rotation_started = Some(self.now);
            self.rotation_entries.clear();
        }
        // Any action of a waiting unit ends its wait.
        if let RingEntry::Unit(unit) = entry {
            if let Some(st) = self.unit_mut(unit) {
                if st.waiting.take().is_some() {
                    self.windows_closed += 1;
                }
            }
        }
        let new_turn = self
            .turn
            .as_ref()
            .is_none_or(|t| t.entry != entry || t.rotation != rotation);
        if !new_turn {
            return;
        }
        self.close_turn(self.now);
        if self.rotation_entries.contains(&entry) {
            self.violate(
                Req::Caps,
                format!("{entry:?} had two turns in rotation {rotation}"),
            );
        }
        self.rotation_entries.push(entry);
        if let Some((ring, Some(cursor))) = self.start_snapshot.take() {
            // Entries from the cursor (inclusive) up to the first acting entry were skipped.
            let before = ring
                .iter()
                .position(|e| *e == cursor)
                .map(|f| (f + ring.len() - 1) % ring.len());
            if ring.contains(&entry) {
                self.check_skipped(&ring, before, entry, "rotation start");
            }
        }
        let mut starved = Vec::new();
        for i in 0..self.live.len() {
            let unit = self.live[i];
            let Some(waiting) = self.unit_mut(unit).and_then(|st| st.waiting.as_mut()) else {
                continue;
            };
            match waiting.iter_mut().find(|(e, _)| *e == entry) {
                Some((_, n)) => {
                    *n += 1;
                    starved.push(unit);
                }
                None => waiting.push((entry, 1)),
            }
        }
        for unit in starved {
            self.violate(
                Req::NoStarvation,
                format!("unit {unit} waited while {entry:?} had two turns"),
            );
            if let Some(st) = self.unit_mut(unit) {
                st.waiting = None;
            }
        }
        let phase = match entry {
            RingEntry::ReadPhase(socket) => {
                let number = self.sched.socket_stats(socket).map_or(0, |st| st.phases);
                let roomy = self.is_roomy(socket);
                self.phases
                    .insert((socket, number), PhaseObs { roomy, cut: false });
                Some((number, self.phase_cap_hits(socket)))
            }
            RingEntry::Unit(_) => None,
        };
        self.turn = Some(TurnObs {
            entry,
            rotation,
            first_at: self.now,
            delivered: 0,
            bytes: 0,
            phase,
        });
    }

    fn on_deliver(&mut self, unit: UnitId, rec: &Rec) {
        let mut problems = Vec::new();
        if rec.owner != unit {
            problems.push(format!("{}#{} handed to {unit}", rec.owner, rec.seq));
        }
        match self.unit_mut(unit) {
            Some(st) => {
                if rec.seq != st.next_expected {
                    problems.push(format!(
                        "unit {unit} got #{} expecting #{}",
                        rec.seq, st.next_expected
                    ));
                }
                st.next_expected = rec.seq + 1;
                st.held = st.held.saturating_sub(1);
                st.held_bytes = st.held_bytes.saturating_sub(rec.len);
            }
            None => problems.push(format!("removed unit {unit} got #{}", rec.seq)),
        }
        for problem in problems {
            self.violate(Req::Order, problem);
        }
        if let Some(turn) = self.turn.as_mut() {
            let (count, bytes) = (turn.delivered, turn.bytes);
            turn.delivered += 1;
            turn.bytes += rec.len;
            if count >= RECEIVE_COUNT_CAP {
                self.violate(
                    Req::Caps,
                    format!("unit {unit}: record {} in one turn", count + 1),
                );
            }
            if count > 0 && bytes >= self.caps.bytes() {
                self.violate(
                    Req::Caps,
                    format!("unit {unit}: record after {bytes} bytes"),
                );
            }
        }
        if let Some(q) = self.quiet.remove(&(unit, rec.seq)) {
            self.check_quiet(unit, rec.seq, &q);
        }
        self.delivered += 1;
        self.last_delivery = Some(Delivery {
            unit,
            rotations_waited: self.sched.rotation_number() - rec.sent_rotation,
            latency: self.now.saturating_duration_since(rec.sent_at),
        });
    }

    /// R3: a quiet peer's record behind a shared socket. The first read phase after it
    /// arrived reaches every pipe's head when it starts with room everywhere and no time cap
    /// cuts it: then the record is handed out before the next phase. Otherwise each phase
    /// reads at least one record and the fair queue reaches the pipe within one record per
    /// peer.
    fn check_quiet(&mut self, unit: UnitId, seq: u64, q: &QuietObs) {
        let phases = self.sched.socket_stats(q.socket).map_or(0, |s| s.phases);
        let next = q.phases_at_send + 1;
        let strong = self
            .phases
            .get(&(q.socket, next))
            .is_some_and(|obs| obs.roomy && !obs.cut);
        if strong && phases > next {
            self.violate(
                Req::PerPeer,
                format!("quiet record {unit}#{seq} missed roomy read phase {next} (now {phases})"),
            );
        } else if phases > q.phases_at_send + q.peers_at_send {
            self.violate(
                Req::PerPeer,
                format!(
                    "quiet record {unit}#{seq} waited {} read phases behind {} peers",
                    phases - q.phases_at_send,
                    q.peers_at_send
                ),
            );
        }
        self.quiet_checked += 1;
        self.quiet_strong += u64::from(strong);
    }

    fn on_yield(&mut self, end: RotationEnd) {
        self.close_turn(self.now);
        if self.in_rotation {
            let started = self.rotation_started.unwrap_or(self.now);
            let took = self.now.saturating_duration_since(started);
            if took > self.caps.rotation_time() + self.max_cost {
                self.violate(
                    Req::Caps,
                    format!("rotation {} took {took:?}", end.rotation),
                );
            }
            // Where processing stopped: the last entry that acted; the cursor must be right
            // after it, past entries that were skipped for having nothing to do.
            if let (Some(last), Some(cursor)) =
                (self.rotation_entries.last().copied(), self.sched.cursor())
            {
                let ring: Vec<_> = self.sched.ring().collect();
                if let Some(from) = ring.iter().position(|e| *e == last) {
                    self.check_skipped(&ring, Some(from), cursor, "rotation end");
                }
            }
        }
        self.in_rotation = false;
        self.start_snapshot = None;
        self.yields.push(end);
    }

    /// One pass of the shell's receive loop: poll, act, report.
    fn step(&mut self) -> Option<RotationEnd> {
        self.before_poll();
        let now = self.now;
        match self.sched.poll_action(now) {
            Action::Deliver { unit, record } => {
                self.on_action(RingEntry::Unit(unit));
                self.on_deliver(unit, &record);
                self.now += record.cost;
                None
            }
            Action::Read(read) => {
                let (entry, got) = match read.target() {
                    ReadTarget::Unit(u) => (
                        RingEntry::Unit(u),
                        self.unit_mut(u).and_then(|st| st.pipe.pop_front()),
                    ),
                    ReadTarget::Shared(s) => (
                        RingEntry::ReadPhase(s),
                        self.shared.get_mut(&s).and_then(FairQueue::recv),
                    ),
                };
                self.on_action(entry);
                self.now += READ_COST;
                match got {
                    Some(rec) => {
                        let (owner, len) = (rec.owner, rec.len);
                        match self.sched.handle_read(read, owner, rec, len) {
                            Ok(()) => {
                                if let Some(st) = self.unit_mut(owner) {
                                    st.held += 1;
                                    st.held_bytes += len;
                                }
                            }
                            Err(rejected) => self.violate(
                                Req::Order,
                                format!("read of {owner} refused: {rejected}"),
                            ),
                        }
                    }
                    None => self.sched.handle_would_block(read),
                }
                None
            }
            Action::Yield(end) => {
                self.on_yield(end);
                self.now += YIELD_COST;
                Some(end)
            }
        }
    }

    fn run(&mut self, polls: usize) {
        for _ in 0..polls {
            let _ = self.step();
        }
    }

    /// Records waiting on `unit`'s socket (its own, or its pipe in a shared one).
    fn on_socket(&self, unit: UnitId) -> usize {
        match self.unit(unit) {
            Some(SimUnit {
                socket: Some(s), ..
            }) => self.shared.get(s).map_or(0, |fq| fq.pipe_len(unit)),
            Some(st) => st.pipe.len(),
            None => 0,
        }
    }

    /// Nothing was lost: every record sent to a live unit is delivered, held by the scheduler
    /// or still on its socket; and the scheduler's staging counters match what it holds.
    fn check_conservation(&mut self) {
        let mut problems = Vec::new();
        for &unit in &self.live {
            let Some(st) = self.unit(unit) else { continue };
            let delivered = st.next_expected - 1;
            let on_socket = self.on_socket(unit) as u64;
            if st.sent != delivered + st.held as u64 + on_socket {
                problems.push(format!(
                    "unit {unit}: sent {}, delivered {delivered}, held {}, on socket {on_socket}",
                    st.sent, st.held
                ));
            }
            let stats = self.sched.unit_stats(unit).unwrap_or_default();
            if (stats.staged, stats.staged_bytes) != (st.held, st.held_bytes)
                || stats.records != delivered
            {
                problems.push(format!("unit {unit}: stats {stats:?} disagree"));
            }
        }
        for problem in problems {
            self.violate(Req::Order, problem);
        }
    }
}

#[path = "scheduler/flood.rs"]
mod flood;
#[path = "scheduler/random.rs"]
mod random;
