use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::*;

/// A record of the bench: (owner, sequence number within the owner).
type Rec = (u32, u32);

/// A minimal shell: single-peer sockets as FIFOs, shared sockets as one interleaved FIFO,
/// time advancing by a fixed cost per action.
struct Bench {
    sched: ReceiveScheduler<u32, Rec>,
    single: HashMap<u32, VecDeque<(u32, usize)>>,
    shared: HashMap<SharedSocketId, VecDeque<(u32, u32, usize)>>,
    now: Instant,
    cost: Duration,
    next_seq: HashMap<u32, u32>,
    delivered: Vec<(u64, u32, u32)>,
    /// Single-peer units whose reads take up to this many records at once, as one read of a
    /// PACK does ([`ReceiveScheduler::handle_read_parts`]).
    packs: HashMap<u32, usize>,
    /// After each hand-out, take the unit's next records with
    /// [`ReceiveScheduler::next_in_turn`] while it gives them, as the shell does.
    runs: bool,
    /// In runs, the calls one reading of the clock serves (the shell's coarse clock; 1: a
    /// reading per call).
    coarse: usize,
    /// In runs, take what one reading serves with [`ReceiveScheduler::next_in_turn_many`]
    /// (records whose sequence number is a multiple of 7 refused: one `next_in_turn` each).
    many: bool,
}

impl Bench {
    fn new(caps: Caps, cost: Duration) -> Self {
        Self {
            sched: ReceiveScheduler::with_caps(caps),
            single: HashMap::new(),
            shared: HashMap::new(),
            now: Instant::now(),
            cost,
            next_seq: HashMap::new(),
            delivered: Vec::new(),
            packs: HashMap::new(),
            runs: false,
            coarse: 1,
            many: false,
        }
    }

    fn single(&mut self, unit: u32) {
        assert_eq!(self.sched.add_unit(unit, Source::Single), Ok(()));
        self.single.insert(unit, VecDeque::new());
    }

    fn shared(&mut self) -> SharedSocketId {
        let id = self.sched.add_shared_socket();
        self.shared.insert(id, VecDeque::new());
        id
    }

    fn peer(&mut self, unit: u32, socket: SharedSocketId) {
        assert_eq!(self.sched.add_unit(unit, Source::Shared(socket)), Ok(()));
    }

    fn seq(&mut self, unit: u32) -> u32 {
        let seq = self.next_seq.entry(unit).or_insert(0);
        *seq += 1;
        *seq
    }

    /// Queues `n` records of `len` bytes for a single-peer unit.
    fn send(&mut self, unit: u32, n: usize, len: usize) {
        for _ in 0..n {
            let seq = self.seq(unit);
            self.single.entry(unit).or_default().push_back((seq, len));
        }
    }

    /// Queues `n` records of `len` bytes for a peer behind `socket`.
    fn send_shared(&mut self, socket: SharedSocketId, unit: u32, n: usize, len: usize) {
        for _ in 0..n {
            let seq = self.seq(unit);
            self.shared
                .entry(socket)
                .or_default()
                .push_back((unit, seq, len));
        }
    }

    /// One poll and its handling; returns the rotation end if it yielded.
    fn step(&mut self) -> Option<RotationEnd> {
        let now = self.now;
        match self.sched.poll_action(now) {
            Action::Deliver { unit, record } => {
                assert_eq!(record.0, unit, "record handed out to its owner");
                self.delivered
                    .push((self.sched.rotation_number(), unit, record.1));
                self.now += self.cost;
                let (mut reading, mut left) = (self.now, 0);
                let mut taken = Vec::new();
                while self.runs {
                    if left == 0 {
                        (reading, left) = (self.now, self.coarse.max(1));
                    }
                    left -= 1;
                    if self.many {
                        let n = self.sched.next_in_turn_many(
                            unit,
                            reading,
                            left + 1,
                            |r| r.1 % 7 != 0,
                            &mut taken,
                        );
                        if n > 0 {
                            assert_eq!(n, taken.len());
                            left -= n - 1;
                            for record in taken.drain(..) {
                                assert_eq!(record.0, unit, "a run is its unit's");
                                assert_ne!(record.1 % 7, 0, "refused records are left");
                                self.delivered
                                    .push((self.sched.rotation_number(), unit, record.1));
                                self.now += self.cost;
                            }
                            continue;
                        }
                    }
                    let Some(record) = self.sched.next_in_turn(unit, reading) else {
                        break;
                    };
                    assert_eq!(record.0, unit, "a run is its unit's");
                    self.delivered
                        .push((self.sched.rotation_number(), unit, record.1));
                    self.now += self.cost;
                }
                None
            }
            Action::Read(read) => {
                self.now += self.cost;
                if let ReadTarget::Unit(u) = read.target() {
                    if let Some(&n) = self.packs.get(&u) {
                        let fifo = self.single.entry(u).or_default();
                        let parts: Vec<_> = fifo
                            .drain(..n.min(fifo.len()))
                            .map(|(seq, len)| ((u, seq), len))
                            .collect();
                        if parts.is_empty() {
                            self.sched.handle_would_block(read);
                        } else {
                            let handled = self.sched.handle_read_parts(read, u, parts);
                            assert!(handled.is_ok(), "bench reads only registered owners");
                        }
                        return None;
                    }
                }
                let got = match read.target() {
                    ReadTarget::Unit(u) => self
                        .single
                        .get_mut(&u)
                        .and_then(VecDeque::pop_front)
                        .map(|(seq, len)| (u, seq, len)),
                    ReadTarget::Shared(s) => self.shared.get_mut(&s).and_then(VecDeque::pop_front),
                };
                match got {
                    Some((owner, seq, len)) => {
                        let handled = self.sched.handle_read(read, owner, (owner, seq), len);
                        assert!(handled.is_ok(), "bench reads only registered owners");
                    }
                    None => self.sched.handle_would_block(read),
                }
                None
            }
            Action::Yield(end) => Some(end),
        }
    }

    fn rotation(&mut self) -> RotationEnd {
        loop {
            if let Some(end) = self.step() {
                return end;
            }
        }
    }

    fn delivered_in(&self, rotation: u64, unit: u32) -> Vec<u32> {
        self.delivered
            .iter()
            .filter(|(r, u, _)| *r == rotation && *u == unit)
            .map(|(_, _, seq)| *seq)
            .collect()
    }
}

const US: Duration = Duration::from_micros(1);

#[test]
fn default_caps_are_the_documented_constants() {
    let caps = Caps::default();
    assert_eq!(caps.count(), 64);
    assert_eq!(caps.bytes(), 256 * 1024);
    assert_eq!(caps.unit_time(), Duration::from_millis(1));
    assert_eq!(caps.rotation_time(), Duration::from_millis(10));
    assert_eq!(STAGING_RECORD_BOUND, 64);
    assert_eq!(Caps::default().with_bytes(1).count(), 64);
}

#[test]
fn r2_count_cap_ends_a_turn_at_64_records() {
    let mut b = Bench::new(Caps::default(), US);
    b.single(1);
    b.send(1, 100, 10);
    let end = b.rotation();
    assert_eq!(end.delivered, 64);
    assert_eq!(
        b.delivered_in(end.rotation, 1),
        (1..=64).collect::<Vec<_>>()
    );
    let stats = b.sched.unit_stats(1).unwrap_or_default();
    assert_eq!(stats.count_cap_hits, 1);
    assert_eq!(stats.turns, 1);
    let end = b.rotation();
    assert_eq!(
        b.delivered_in(end.rotation, 1),
        (65..=100).collect::<Vec<_>>()
    );
}

#[test]
fn has_staged_reports_records_read_but_not_handed_out() {
    // One action per rotation: a read phase stages a record and the rotation ends before
    // the peer's turn hands it out.
    let caps = Caps::default().with_rotation_time(Duration::ZERO);
    let mut b = Bench::new(caps, US);
    let s = b.shared();
    b.peer(1, s);
    assert!(!b.sched.has_staged());
    b.send_shared(s, 1, 1, 10);
    let end = b.rotation();
    assert_eq!(end.reason, RotationEndReason::TimeCap);
    assert_eq!(end.records_read, 1);
    assert!(b.sched.has_staged(), "the read record waits for its turn");
    while b.delivered.is_empty() {
        b.rotation();
    }
    assert!(!b.sched.has_staged());
    // A single-peer unit whose turn is cut right after a read holds that record too.
    let caps = Caps::default().with_unit_time(Duration::ZERO);
    let mut b = Bench::new(caps, US);
    b.single(2);
    b.send(2, 2, 10);
    b.rotation();
    assert!(b.sched.has_staged());
}

#[test]
fn r2_byte_cap_lets_the_crossing_record_through() {
    let mut b = Bench::new(Caps::default().with_bytes(1000), US);
    b.single(1);
    b.send(1, 10, 300);
    let end = b.rotation();
    // 300, 600, 900 < 1000, the fourth crosses it and is still handed out.
    assert_eq!(b.delivered_in(end.rotation, 1), vec![1, 2, 3, 4]);
    assert_eq!(end.bytes, 1200);
    assert_eq!(b.sched.unit_stats(1).unwrap_or_default().byte_cap_hits, 1);
    // A record larger than the cap is deliverable on its own.
    b.single(2);
    b.send(2, 2, 5000);
    let end = b.rotation();
    assert_eq!(b.delivered_in(end.rotation, 2), vec![1]);
}

#[test]
fn r2_time_cap_ends_a_turn_after_the_crossing_action() {
    let caps = Caps::default().with_unit_time(Duration::from_micros(10));
    let mut b = Bench::new(caps, Duration::from_micros(3));
    b.single(1);
    b.send(1, 50, 10);
    let end = b.rotation();
    // Read/deliver pairs of 3 us each: the action ending at 12 us crosses 10 us. That is
    // read, deliver, read, deliver: two records; the turn took 12 us = cap + one action.
    assert_eq!(b.delivered_in(end.rotation, 1), vec![1, 2]);
    assert_eq!(b.sched.unit_stats(1).unwrap_or_default().time_cap_hits, 1);
}

#[test]
fn r2_rotation_cap_ends_early_and_next_rotation_starts_right_after() {
    let caps = Caps::default()
        .with_bytes(usize::MAX)
        .with_rotation_time(Duration::from_micros(200));
    let mut b = Bench::new(caps, US);
    for unit in 1..=4 {
        b.single(unit);
        b.send(unit, 1000, 10);
    }
    // Each turn is 128 actions (64 reads + 64 deliveries) = 128 us; the rotation cap
    // (200 us) is crossed in unit 2's turn, which is cut.
    let end = b.rotation();
    assert_eq!(end.reason, RotationEndReason::TimeCap);
    assert_eq!(b.delivered_in(end.rotation, 1).len(), 64);
    assert!(!b.delivered_in(end.rotation, 2).is_empty());
    assert!(b.delivered_in(end.rotation, 3).is_empty());
    assert_eq!(b.sched.cursor(), Some(RingEntry::Unit(3)));
    assert_eq!(
        b.sched.unit_stats(2).unwrap_or_default().rotation_cap_cuts,
        1
    );
    let end = b.rotation();
    let first = b.delivered.iter().find(|(r, _, _)| *r == end.rotation);
    assert_eq!(first.map(|(_, u, _)| *u), Some(3));
    // Then 4, then (one rotation later than a restart-from-the-start loop would) 1.
    let end = b.rotation();
    let first = b.delivered.iter().find(|(r, _, _)| *r == end.rotation);
    assert_eq!(first.map(|(_, u, _)| *u), Some(1));
}

#[test]
fn removing_the_unit_under_way_resumes_with_its_successor() {
    let mut b = Bench::new(Caps::default(), US);
    for unit in 1..=3 {
        b.single(unit);
        b.send(unit, 10, 10);
    }
    // Run into unit 2's turn.
    while b.sched.current_turn() != Some(RingEntry::Unit(2)) {
        assert_eq!(b.step(), None);
    }
    assert_eq!(b.sched.cursor(), Some(RingEntry::Unit(3)));
    let staged = b.sched.remove_unit(2);
    assert!(staged.is_some());
    assert_eq!(b.sched.current_turn(), None);
    assert_eq!(b.sched.cursor(), Some(RingEntry::Unit(3)));
    let end = b.rotation();
    assert_eq!(b.delivered_in(end.rotation, 3).len(), 10);
}

#[test]
fn removing_the_unit_under_the_cursor_keeps_the_resume_rule() {
    let caps = Caps::default().with_rotation_time(Duration::from_micros(50));
    let mut b = Bench::new(caps, US);
    for unit in 1..=4 {
        b.single(unit);
        b.send(unit, 100, 10);
    }
    let end = b.rotation();
    assert_eq!(end.reason, RotationEndReason::TimeCap);
    assert_eq!(b.sched.cursor(), Some(RingEntry::Unit(2)));
    assert_eq!(b.sched.remove_unit(2), Some(Vec::new()));
    assert_eq!(b.sched.cursor(), Some(RingEntry::Unit(3)));
    // Removing the last entry while the cursor is on it wraps the cursor to the start.
    let mut c = Bench::new(caps, US);
    c.single(1);
    c.single(2);
    c.send(1, 100, 10);
    let _ = c.rotation();
    assert_eq!(c.sched.cursor(), Some(RingEntry::Unit(2)));
    assert_eq!(c.sched.remove_unit(2), Some(Vec::new()));
    assert_eq!(c.sched.cursor(), Some(RingEntry::Unit(1)));
}

#[test]
fn a_record_left_by_the_time_cap_comes_before_newer_reads() {
    // Cost 2 us per action, cap 1 us: every turn ends after its first action. The first
    // turn's action is a read, which leaves the record queued; the next turn hands it
    // out before reading again.
    let caps = Caps::default().with_unit_time(US);
    let mut b = Bench::new(caps, Duration::from_micros(2));
    b.single(1);
    b.send(1, 3, 10);
    let end = b.rotation();
    assert_eq!(end.delivered, 0);
    assert_eq!(b.sched.unit_stats(1).unwrap_or_default().staged, 1);
    for _ in 0..6 {
        let _ = b.rotation();
    }
    let order: Vec<u32> = b.delivered.iter().map(|(_, _, s)| *s).collect();
    assert_eq!(order, vec![1, 2, 3]);
}

#[test]
fn r3_peers_behind_one_socket_each_get_their_own_64() {
    let mut b = Bench::new(Caps::default(), US);
    let s = b.shared();
    b.peer(10, s);
    b.peer(11, s);
    for _ in 0..100 {
        b.send_shared(s, 10, 1, 10);
        b.send_shared(s, 11, 1, 10);
    }
    // The read phase stops after the read that fills peer 10's queue (its 64th record),
    // when peer 11 has 63 staged; each is handed out on its own count, not the socket's.
    let end = b.rotation();
    assert_eq!(b.delivered_in(end.rotation, 10).len(), 64);
    assert_eq!(b.delivered_in(end.rotation, 11).len(), 63);
    assert_eq!(end.delivered, 127);
}

#[test]
fn r3_read_phase_stops_when_a_peer_queue_fills() {
    let mut b = Bench::new(Caps::default(), US);
    let s = b.shared();
    b.peer(10, s);
    b.peer(11, s);
    // Peer 10 floods, peer 11 has one record behind the flood.
    b.send_shared(s, 10, 200, 10);
    b.send_shared(s, 11, 1, 10);
    let end = b.rotation();
    let stats = b.sched.socket_stats(s).unwrap_or_default();
    assert_eq!(
        stats.records_read, 64,
        "stopped at the 64th record of peer 10"
    );
    assert_eq!(stats.staging_full_stops, 1);
    assert_eq!(b.delivered_in(end.rotation, 10).len(), 64);
    assert_eq!(b.sched.unit_stats(10).unwrap_or_default().staged_peak, 64);
    // The bench's socket is not fair-queued, so peer 11 waits behind the flood; every
    // rotation still reads and hands out 64 of it.
    let _ = b.rotation();
    let _ = b.rotation();
    let end = b.rotation();
    assert_eq!(b.delivered_in(end.rotation, 11), vec![1]);
}

#[test]
fn r3_staging_byte_bound_stops_the_phase() {
    let mut b = Bench::new(Caps::default().with_bytes(1000), US);
    let s = b.shared();
    b.peer(10, s);
    b.send_shared(s, 10, 10, 400);
    let _ = b.rotation();
    let stats = b.sched.socket_stats(s).unwrap_or_default();
    assert_eq!(
        stats.records_read, 3,
        "1200 bytes staged reach the 1000-byte bound"
    );
}

#[test]
fn read_phase_reads_once_even_if_a_queue_is_full_at_its_start() {
    // Byte cap 0: any staged record makes its queue full; every phase still reads one.
    let mut b = Bench::new(Caps::default().with_bytes(0), US);
    let s = b.shared();
    b.peer(10, s);
    b.send_shared(s, 10, 3, 10);
    for _ in 0..4 {
        let _ = b.rotation();
    }
    let order: Vec<u32> = b.delivered.iter().map(|(_, _, s)| *s).collect();
    assert_eq!(order, vec![1, 2, 3]);
}

#[test]
fn handle_read_refuses_unknown_and_misplaced_owners() {
    let t0 = Instant::now();
    let mut sched: ReceiveScheduler<u32, &str> = ReceiveScheduler::new();
    assert_eq!(sched.add_unit(1, Source::Single), Ok(()));
    let s = sched.add_shared_socket();
    let Action::Read(read) = sched.poll_action(t0) else {
        panic!("expected a read of unit 1");
    };
    assert_eq!(read.target(), ReadTarget::Unit(1));
    let Err(rejected) = sched.handle_read(read, 2, "x", 1) else {
        panic!("owner 2 is unknown");
    };
    assert_eq!(rejected.reason(), RejectReason::UnknownUnit);
    let (read, record) = rejected.into_parts();
    assert_eq!(sched.add_unit(2, Source::Shared(s)), Ok(()));
    let Err(rejected) = sched.handle_read(read, 2, record, 1) else {
        panic!("unit 2 is not behind unit 1's socket");
    };
    assert_eq!(rejected.reason(), RejectReason::WrongSocket);
    let (read, record) = rejected.into_parts();
    assert!(sched.handle_read(read, 1, record, 1).is_ok());
    assert_eq!(
        sched.poll_action(t0),
        Action::Deliver {
            unit: 1,
            record: "x"
        }
    );
}

#[test]
fn a_stale_would_block_is_ignored() {
    let t0 = Instant::now();
    let mut sched: ReceiveScheduler<u32, u8> = ReceiveScheduler::new();
    assert_eq!(sched.add_unit(1, Source::Single), Ok(()));
    assert_eq!(sched.add_unit(2, Source::Single), Ok(()));
    let Action::Read(first) = sched.poll_action(t0) else {
        panic!("expected a read of unit 1");
    };
    // The shell drops nothing here but keeps the request; the unit is removed and a new
    // turn starts; the old request must not end it.
    assert_eq!(sched.remove_unit(1), Some(Vec::new()));
    let Action::Read(second) = sched.poll_action(t0) else {
        panic!("expected a read of unit 2");
    };
    assert_eq!(second.target(), ReadTarget::Unit(2));
    sched.handle_would_block(first);
    assert_eq!(sched.current_turn(), Some(RingEntry::Unit(2)));
    sched.handle_would_block(second);
    assert_eq!(sched.current_turn(), None);
}

#[test]
fn add_unit_refuses_duplicates_and_unknown_sockets() {
    let mut sched: ReceiveScheduler<u32, u8> = ReceiveScheduler::new();
    let s = sched.add_shared_socket();
    assert_eq!(sched.add_unit(1, Source::Single), Ok(()));
    assert_eq!(
        sched.add_unit(1, Source::Shared(s)),
        Err(AddUnitError::AlreadyPresent)
    );
    assert_eq!(sched.remove_shared_socket(s), Vec::new());
    assert_eq!(
        sched.add_unit(2, Source::Shared(s)),
        Err(AddUnitError::UnknownSocket(s))
    );
    assert_eq!(sched.len(), 1);
    assert_eq!(sched.ring().collect::<Vec<_>>(), vec![RingEntry::Unit(1)]);
}

#[test]
fn idle_rotations_are_reported_idle() {
    let mut b = Bench::new(Caps::default(), US);
    let end = b.rotation();
    assert!(end.is_idle());
    assert_eq!(end.turns, 0);
    b.single(1);
    let s = b.shared();
    b.peer(10, s);
    let end = b.rotation();
    assert!(end.is_idle());
    assert_eq!(end.turns, 3);
    b.send(1, 1, 10);
    assert!(!b.rotation().is_idle());
    assert!(b.rotation().is_idle());
}

#[test]
fn remove_shared_socket_returns_staged_records_in_order() {
    let mut b = Bench::new(Caps::default(), US);
    let s = b.shared();
    b.peer(10, s);
    b.peer(11, s);
    b.send_shared(s, 10, 3, 10);
    b.send_shared(s, 11, 2, 10);
    // Run the read phase only: five reads, then the sixth would block.
    for _ in 0..6 {
        assert_eq!(b.step(), None);
    }
    assert_eq!(b.sched.current_turn(), None);
    let mut removed = b.sched.remove_shared_socket(s);
    removed.sort();
    assert_eq!(
        removed,
        vec![
            (10, vec![(10, 1), (10, 2), (10, 3)]),
            (11, vec![(11, 1), (11, 2)])
        ]
    );
    assert!(b.sched.is_empty());
    assert_eq!(b.sched.cursor(), None);
    assert!(
        !b.rotation().is_idle(),
        "the rotation under way had read records"
    );
    assert!(b.rotation().is_idle());
}

#[test]
fn peers_join_their_socket_group_and_singles_the_end() {
    let mut sched: ReceiveScheduler<u32, u8> = ReceiveScheduler::new();
    let s = sched.add_shared_socket();
    assert_eq!(sched.add_unit(1, Source::Single), Ok(()));
    assert_eq!(sched.add_unit(10, Source::Shared(s)), Ok(()));
    assert_eq!(sched.add_unit(11, Source::Shared(s)), Ok(()));
    assert_eq!(sched.add_unit(2, Source::Single), Ok(()));
    assert_eq!(
        sched.ring().collect::<Vec<_>>(),
        vec![
            RingEntry::ReadPhase(s),
            RingEntry::Unit(10),
            RingEntry::Unit(11),
            RingEntry::Unit(1),
            RingEntry::Unit(2),
        ]
    );
    assert_eq!(sched.socket_stats(s).unwrap_or_default().peers, 2);
}

impl Bench {
    /// Readiness mode's shell side: every socket with records is reported readable.
    fn report_readable(&mut self) {
        let singles: Vec<u32> = self
            .single
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(u, _)| *u)
            .collect();
        for u in singles {
            self.sched.handle_readable(ReadTarget::Unit(u));
        }
        let shared: Vec<SharedSocketId> = self
            .shared
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(s, _)| *s)
            .collect();
        for s in shared {
            self.sched.handle_readable(ReadTarget::Shared(s));
        }
    }
}

/// A seeded xorshift64 generator for the randomised workloads below.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    }
}

/// Readiness mode hands out the same records per unit in the same rotations and order as
/// the default mode, when the shell reports every socket that has records; it skips the
/// empty turns.
#[test]
fn readiness_mode_hands_out_the_same_records_per_unit_and_rotation() {
    for seed in 1..=20u64 {
        let mut next = xorshift(seed);
        // No time passes per action: the time caps would otherwise cut the two modes'
        // rotations at different records (empty turns cost actions in the default mode).
        let caps = Caps::default().with_bytes(4096);
        let mut plain = Bench::new(caps, Duration::ZERO);
        let mut ready = Bench::new(caps, Duration::ZERO);
        ready.sched = ReceiveScheduler::with_caps(caps).with_readiness();
        for b in [&mut plain, &mut ready] {
            for u in 1..=5 {
                b.single(u);
            }
            let s = b.shared();
            for u in 10..=13 {
                b.peer(u, s);
            }
            for u in 6..=7 {
                b.single(u);
            }
        }
        let socket = *plain.shared.keys().next().unwrap_or(&SharedSocketId(1));
        let mut turns_plain = 0;
        let mut turns_ready = 0;
        for _round in 0..60 {
            // Traffic arrives between rotations, for a few units at a time.
            for _ in 0..(next() % 4) {
                let unit = (next() % 11) as u32;
                let (n, len) = ((next() % 90) as usize, 1 + (next() % 200) as usize);
                for b in [&mut plain, &mut ready] {
                    if unit < 7 {
                        b.send(unit + 1, n, len);
                    } else {
                        b.send_shared(socket, unit + 3, n, len);
                    }
                }
            }
            let end_plain = plain.rotation();
            ready.report_readable();
            let end_ready = ready.rotation();
            assert_eq!(end_plain.delivered, end_ready.delivered, "seed {seed}");
            assert_eq!(end_plain.reason, end_ready.reason, "seed {seed}");
            assert!(end_ready.turns <= end_plain.turns);
            turns_plain += end_plain.turns;
            turns_ready += end_ready.turns;
        }
        // Per rotation and unit: the same records in the same order. Only where a
        // rotation starts differs (after the last entry that had a turn, not after the
        // last idle one), so units may follow each other in another order.
        let per_unit = |b: &Bench| {
            let mut m: std::collections::BTreeMap<(u64, u32), Vec<u32>> = Default::default();
            for (r, u, seq) in &b.delivered {
                m.entry((*r, *u)).or_default().push(*seq);
            }
            m
        };
        assert_eq!(per_unit(&plain), per_unit(&ready), "seed {seed}");
        assert_eq!(plain.delivered.len(), ready.delivered.len());
        assert!(turns_ready < turns_plain, "idle entries were skipped");
    }
}

#[test]
fn readiness_mode_gives_idle_entries_no_turn() {
    let mut b = Bench::new(Caps::default(), US);
    b.sched = ReceiveScheduler::new().with_readiness();
    for u in 1..=100 {
        b.single(u);
    }
    // New units start readable: the first rotation finds them all empty.
    let first = b.rotation();
    assert_eq!(first.turns, 100);
    let idle = b.rotation();
    assert!(idle.is_idle());
    assert_eq!(
        idle.turns, 0,
        "nothing readable, nothing staged: no turn at all"
    );
    b.send(42, 3, 10);
    b.report_readable();
    let end = b.rotation();
    assert_eq!(end.turns, 1);
    assert_eq!(b.delivered_in(end.rotation, 42), vec![1, 2, 3]);
    // A unit not reported readable is not read (the shell's readiness is the truth).
    b.send(7, 1, 10);
    assert_eq!(b.rotation().turns, 0);
    b.report_readable();
    let end = b.rotation();
    assert_eq!(b.delivered_in(end.rotation, 7), vec![1]);
}

#[test]
fn readiness_mode_resumes_after_the_entry_where_a_cap_stopped() {
    let mut b = Bench::new(Caps::default(), US);
    b.sched = ReceiveScheduler::new().with_readiness();
    for u in 1..=4 {
        b.single(u);
    }
    let _ = b.rotation();
    b.send(2, 100, 10);
    b.send(4, 10, 10);
    b.report_readable();
    let end = b.rotation();
    assert_eq!(b.delivered_in(end.rotation, 2).len(), 64);
    assert_eq!(b.delivered_in(end.rotation, 4).len(), 10);
    // Unit 2 still has records (its socket did not say "would block"): it is served in
    // the next rotation without a new report, and unit 1, idle, is skipped.
    b.send(1, 1, 10);
    let end = b.rotation();
    assert_eq!(b.delivered_in(end.rotation, 2).len(), 36);
    assert!(b.delivered_in(end.rotation, 1).is_empty());
    assert_eq!(end.turns, 1);
    // Removing and adding entries keeps positions right.
    assert!(b.sched.remove_unit(3).is_some());
    b.single(9);
    b.report_readable();
    b.send(9, 2, 10);
    b.report_readable();
    let end = b.rotation();
    assert_eq!(b.delivered_in(end.rotation, 1), vec![1]);
    assert_eq!(b.delivered_in(end.rotation, 9), vec![1, 2]);
    assert!(!b.sched.has_staged());
}

/// MISSION R2, R4, X4: the records of one read that stands for several (a PACK) count one by
/// one toward the count and byte caps. A flooding unit whose every read is a pack of 40 hands
/// out exactly 64 records per turn, the rest of the pack it crossed the cap in waits for its
/// next turn (in the next rotation, before anything read later, in order), and a quiet unit's
/// record is handed out in every rotation in between.
#[test]
fn r2_x4_packed_records_count_toward_the_caps_across_rotations() {
    let mut b = Bench::new(Caps::default(), US);
    b.single(1);
    b.single(2);
    b.packs.insert(1, 40);
    b.send(1, 400, 10);
    let mut handed = Vec::new();
    for round in 1..=5 {
        b.send(2, 1, 12);
        let end = b.rotation();
        let flood = b.delivered_in(end.rotation, 1);
        assert_eq!(
            flood.len(),
            64,
            "round {round}: 64 records of the packs, not more"
        );
        assert_eq!(
            b.delivered_in(end.rotation, 2),
            vec![round],
            "round {round}: the quiet unit's record keeps its place"
        );
        handed.extend(flood);
    }
    assert_eq!(handed, (1..=320).collect::<Vec<_>>(), "in order, none lost");
    let stats = b.sched.unit_stats(1).unwrap_or_default();
    assert_eq!(stats.count_cap_hits, 5);
    // The byte cap too: 100-byte records of packs of 64 against a 1000-byte cap, 10 per turn.
    let mut b = Bench::new(Caps::default().with_bytes(1000), US);
    b.single(3);
    b.packs.insert(3, 64);
    b.send(3, 64, 100);
    let end = b.rotation();
    assert_eq!(
        b.delivered_in(end.rotation, 3),
        (1..=10).collect::<Vec<_>>()
    );
    assert_eq!(b.sched.unit_stats(3).unwrap_or_default().byte_cap_hits, 1);
    let end = b.rotation();
    assert_eq!(
        b.delivered_in(end.rotation, 3),
        (11..=20).collect::<Vec<_>>()
    );
}

/// `next_in_turn` after each hand-out changes nothing the rotation does: the same records
/// in the same rotations and order, the same rotation ends, the same cap hits, under count,
/// byte and time caps, packs, and peers behind a shared socket.
#[test]
fn r2_x4_runs_of_next_in_turn_hand_out_exactly_what_poll_action_would() {
    for seed in 1..=40u64 {
        runs_match_poll_action(seed, false);
    }
}

/// The same, while units leave and others join between rotations, so that the positions of
/// units that left are reused by later ones.
#[test]
fn r2_x4_runs_of_next_in_turn_match_poll_action_as_units_join_and_leave() {
    for seed in 41..=80u64 {
        runs_match_poll_action(seed, true);
    }
}

/// `next_in_turn_many` hands out exactly what the `next_in_turn` calls it stands for would
/// (the same `now` for the calls one reading of the clock serves, 1 to 8 of them), stopping
/// at a record it is told to leave: the same records in the same rotations, the same rotation
/// ends, the same unit statistics, with units joining and leaving.
#[test]
fn r2_x4_next_in_turn_many_matches_the_calls_it_stands_for() {
    for seed in 81..=160u64 {
        let coarse = 1 + (seed % 8) as usize;
        runs_match(seed, seed.is_multiple_of(3), Some(coarse));
    }
}

/// Runs one seeded workload with and without `next_in_turn` runs and compares the two; with
/// `churn`, a single-peer unit and a peer behind the shared socket are replaced now and then.
fn runs_match_poll_action(seed: u64, churn: bool) {
    runs_match(seed, churn, None);
}

/// [`runs_match_poll_action`]; with `coarse`, compares runs of `next_in_turn` calls under a
/// clock read once per `coarse` calls with the same runs taken by `next_in_turn_many`.
fn runs_match(seed: u64, churn: bool, coarse: Option<usize>) {
    let mut next = xorshift(seed);
    let caps = Caps::default()
        .with_bytes(1 + (next() % 8000) as usize)
        .with_unit_time(Duration::from_micros(next() % 60))
        .with_rotation_time(Duration::from_micros(next() % 400));
    let cost = Duration::from_micros(next() % 3);
    let mut plain = Bench::new(caps, cost);
    let mut runs = Bench::new(caps, cost);
    runs.runs = true;
    if let Some(k) = coarse {
        (plain.runs, plain.coarse) = (true, k);
        (runs.coarse, runs.many) = (k, true);
    }
    if seed.is_multiple_of(2) {
        plain.sched = ReceiveScheduler::with_caps(caps).with_readiness();
        runs.sched = ReceiveScheduler::with_caps(caps).with_readiness();
    }
    let t0 = plain.now;
    runs.now = t0;
    let (mut singles, mut peers): (Vec<u32>, Vec<u32>) = (vec![1, 2, 3, 4], vec![10, 11, 12]);
    let mut units: Vec<u32> = singles.iter().chain(&peers).copied().collect();
    for b in [&mut plain, &mut runs] {
        for &u in &singles {
            b.single(u);
        }
        b.packs.insert(1, 64);
        b.packs.insert(2, 7);
        let s = b.shared();
        for &u in &peers {
            b.peer(u, s);
        }
    }
    let socket = *plain.shared.keys().next().unwrap_or(&SharedSocketId(1));
    for round in 0..40u32 {
        if churn && next().is_multiple_of(3) {
            let (gone, joins) = (singles.remove((next() % 4) as usize), 100 + round);
            let pack = 1 + (next() % 64) as usize;
            for b in [&mut plain, &mut runs] {
                assert!(b.sched.remove_unit(gone).is_some(), "seed {seed}");
                b.single.remove(&gone);
                b.single(joins);
                b.packs.insert(joins, pack);
            }
            singles.push(joins);
            units.push(joins);
        }
        if churn && next().is_multiple_of(4) {
            let (gone, joins) = (peers.remove((next() % 3) as usize), 200 + round);
            for b in [&mut plain, &mut runs] {
                assert!(b.sched.remove_unit(gone).is_some(), "seed {seed}");
                if let Some(fifo) = b.shared.get_mut(&socket) {
                    // A connection's records leave with it.
                    fifo.retain(|(owner, _, _)| *owner != gone);
                }
                b.peer(joins, socket);
            }
            peers.push(joins);
            units.push(joins);
        }
        for _ in 0..(next() % 4) {
            let pick = (next() % 7) as usize;
            let (n, len) = ((next() % 150) as usize, 1 + (next() % 300) as usize);
            for b in [&mut plain, &mut runs] {
                if pick < 4 {
                    b.send(singles[pick], n, len);
                } else {
                    b.send_shared(socket, peers[pick - 4], n, len);
                }
            }
        }
        if seed.is_multiple_of(2) {
            plain.report_readable();
            runs.report_readable();
        }
        let (a, b) = (plain.rotation(), runs.rotation());
        assert_eq!(a, b, "seed {seed}: the same rotation end");
    }
    assert_eq!(plain.delivered, runs.delivered, "seed {seed}");
    for u in units {
        assert_eq!(
            plain.sched.unit_stats(u),
            runs.sched.unit_stats(u),
            "seed {seed}"
        );
    }
    assert!(!plain.delivered.is_empty());
}

/// A unit removed while its turn is under way ends the turn; a unit registered after it
/// takes its position in the scheduler's table and is handed its own records only, in its
/// own turn.
#[test]
fn a_position_reused_after_a_removal_mid_turn_serves_only_its_new_unit() {
    let mut b = Bench::new(Caps::default(), US);
    b.single(1);
    b.packs.insert(1, 10);
    b.send(1, 10, 10);
    b.single(2);
    b.send(2, 3, 10);
    while b.delivered.is_empty() {
        assert_eq!(
            b.step(),
            None,
            "unit 1's first record comes before the rotation ends"
        );
    }
    assert_eq!(b.delivered, vec![(1, 1, 1)]);
    let staged = b.sched.remove_unit(1).unwrap_or_default();
    assert_eq!(staged.len(), 9, "the rest of the pack comes back");
    assert_eq!(b.sched.units.position(&1), None);
    b.single.remove(&1);
    b.single(3);
    assert_eq!(
        b.sched.units.position(&3),
        Some(0),
        "unit 1's position, reused"
    );
    b.send(3, 2, 10);
    assert_eq!(b.sched.next_in_turn(1, b.now), None, "unit 1's turn ended");
    assert_eq!(b.sched.next_in_turn(3, b.now), None, "not unit 3's turn");
    b.runs = true;
    for _ in 0..2 {
        b.rotation();
    }
    let of = |unit| {
        b.delivered
            .iter()
            .filter(|(_, u, _)| *u == unit)
            .map(|(_, _, seq)| *seq)
            .collect::<Vec<_>>()
    };
    assert_eq!(of(1), vec![1]);
    assert_eq!(of(2), vec![1, 2, 3]);
    assert_eq!(of(3), vec![1, 2]);
}

/// One structural change or a few scheduling steps, for the ring model below.
#[derive(Debug, Clone)]
enum RingOp {
    Single,
    Socket,
    Peer(usize),
    RemoveUnit(usize),
    RemoveSocket(usize),
    Steps(usize),
}

fn ring_op() -> impl proptest::strategy::Strategy<Value = RingOp> {
    use proptest::prelude::*;
    prop_oneof![
        Just(RingOp::Single),
        Just(RingOp::Socket),
        any::<usize>().prop_map(RingOp::Peer),
        any::<usize>().prop_map(RingOp::RemoveUnit),
        any::<usize>().prop_map(RingOp::RemoveSocket),
        (1usize..40).prop_map(RingOp::Steps),
    ]
}

/// The turns `entry` has begun (a unit's turns, a read phase's phases).
fn turns_of(sched: &ReceiveScheduler<u32, Rec>, entry: RingEntry<u32>) -> u64 {
    match entry {
        RingEntry::Unit(u) => sched.unit_stats(u).map_or(0, |s| s.turns),
        RingEntry::ReadPhase(s) => sched.socket_stats(s).map_or(0, |s| s.phases),
    }
}

proptest::proptest! {
    /// MISSION R2, R3: the ring keeps its order and the resume rule under any sequence of
    /// units and sockets joining and leaving between turns, exactly as a ring of positions
    /// renumbered on every change would: singles and sockets join the end, a peer the end
    /// of its socket's group, and the next turn begins right after the entry whose turn
    /// began last (with what followed it, if it left).
    #[test]
    fn r2_r3_ring_order_and_resume_rule_hold_under_joins_and_leaves(
        ops in proptest::collection::vec(ring_op(), 1..80)
    ) {
        let mut b = Bench::new(Caps::default(), US);
        // The model: the ring as positions, the cursor as an index (the earlier design).
        let (mut ring, mut cursor) = (Vec::<RingEntry<u32>>::new(), 0usize);
        let (mut next_unit, mut sockets) = (0u32, Vec::<SharedSocketId>::new());
        for op in ops {
            match op {
                RingOp::Single => {
                    next_unit += 1;
                    b.single(next_unit);
                    b.send(next_unit, 1000, 10);
                    ring.push(RingEntry::Unit(next_unit));
                }
                RingOp::Socket => {
                    let s = b.shared();
                    sockets.push(s);
                    ring.push(RingEntry::ReadPhase(s));
                }
                RingOp::Peer(i) if !sockets.is_empty() => {
                    let s = sockets[i % sockets.len()];
                    next_unit += 1;
                    b.peer(next_unit, s);
                    let phase = ring.iter().position(|e| *e == RingEntry::ReadPhase(s)).unwrap_or(ring.len());
                    let mut at = phase + 1;
                    while at < ring.len() && matches!(ring[at], RingEntry::Unit(u) if b.sched.units.get(&u).is_some_and(|st| st.source == Source::Shared(s))) {
                        at += 1;
                    }
                    let at = at.min(ring.len());
                    ring.insert(at, RingEntry::Unit(next_unit));
                    if at < cursor {
                        cursor += 1;
                    }
                }
                RingOp::RemoveUnit(i) => {
                    let units: Vec<u32> = ring.iter().filter_map(|e| match e { RingEntry::Unit(u) => Some(*u), _ => None }).collect();
                    if units.is_empty() {
                        continue;
                    }
                    let u = units[i % units.len()];
                    let at = ring.iter().position(|e| *e == RingEntry::Unit(u)).unwrap_or(0);
                    proptest::prop_assert!(b.sched.remove_unit(u).is_some());
                    ring.remove(at);
                    if at < cursor {
                        cursor -= 1;
                    }
                }
                RingOp::RemoveSocket(i) if !sockets.is_empty() => {
                    let s = sockets.remove(i % sockets.len());
                    let peers: Vec<u32> = ring.iter().filter_map(|e| match e {
                        RingEntry::Unit(u) if b.sched.units.get(u).is_some_and(|st| st.source == Source::Shared(s)) => Some(*u),
                        _ => None,
                    }).collect();
                    let removed: Vec<u32> = b.sched.remove_shared_socket(s).into_iter().map(|(u, _)| u).collect();
                    proptest::prop_assert_eq!(&removed, &peers);
                    for e in peers.into_iter().map(RingEntry::Unit).chain([RingEntry::ReadPhase(s)]) {
                        let at = ring.iter().position(|x| *x == e).unwrap_or(0);
                        ring.remove(at);
                        if at < cursor {
                            cursor -= 1;
                        }
                    }
                }
                RingOp::Steps(n) => {
                    for _ in 0..n {
                        let before: Vec<u64> = ring.iter().map(|e| turns_of(&b.sched, *e)).collect();
                        let _ = b.step();
                        // A turn began where an entry's turn count grew (several may begin
                        // in one step, in ring order from the cursor): the model's cursor goes
                        // right after the one that began last.
                        let len = ring.len().max(1);
                        let from = if cursor >= ring.len() { 0 } else { cursor };
                        let last = ring
                            .iter()
                            .enumerate()
                            .filter(|(at, e)| turns_of(&b.sched, **e) > before[*at])
                            .max_by_key(|(at, _)| (at + len - from) % len);
                        if let Some((at, _)) = last {
                            cursor = at + 1;
                        }
                    }
                }
                RingOp::Peer(_) | RingOp::RemoveSocket(_) => {}
            }
            proptest::prop_assert_eq!(b.sched.ring().collect::<Vec<_>>(), ring.clone());
            let expected = ring.get(cursor).or(ring.first()).copied();
            proptest::prop_assert_eq!(b.sched.cursor(), expected);
        }
    }
}
