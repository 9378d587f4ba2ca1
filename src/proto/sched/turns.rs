//! The scheduler's hand-outs: a rotation's turns polled in order (`poll_action`), the
//! records of the current turn taken one or several at a time (`next_in_turn`,
//! `next_in_turn_many`), and how a turn begins, is judged against the caps and ends. The
//! readiness, the units and the staging are `mod.rs`'s.

use std::hash::Hash;
use std::time::Instant;

use super::units::is_full;
use super::*;

impl<U: Copy + Eq + Hash, R> ReceiveScheduler<U, R> {
    /// The next thing the shell must do; starts a rotation if none is under way.
    ///
    /// See the polling order on [`ReceiveScheduler`]. `now` must come from the shell's
    /// monotonic clock; the caps are judged against it.
    #[must_use = "act on the action, then poll again"]
    pub fn poll_action(&mut self, now: Instant) -> Action<U, R> {
        let mut rotation = match self.rotation.take() {
            Some(rotation) => rotation,
            None => {
                self.rotations_begun += 1;
                Rotation {
                    number: self.rotations_begun,
                    deadline: Deadline::after(now, self.caps.rotation_time),
                    actions: 0,
                    turns: 0,
                    delivered: 0,
                    bytes: 0,
                    records_read: 0,
                }
            }
        };
        match self.drive(&mut rotation, now) {
            Step::Act(action) => {
                self.rotation = Some(rotation);
                action
            }
            Step::End(reason) => Action::Yield(RotationEnd {
                rotation: rotation.number,
                reason,
                turns: rotation.turns,
                delivered: rotation.delivered,
                bytes: rotation.bytes,
                records_read: rotation.records_read,
            }),
        }
    }

    /// The next record of `unit`'s turn, when that turn is under way and [`poll_action`]
    /// would hand that record out next: exactly what a `poll_action(now)` returning
    /// [`Action::Deliver`] for `unit` does (the record is counted toward the turn's caps and
    /// the rotation's), without going round the ring. In every other case (another entry's
    /// turn, a cap reached, nothing staged for `unit`) it changes nothing and returns
    /// `None`: the shell then asks [`poll_action`], which ends the turn or reads.
    ///
    /// A shell that processes a run of staged records (the records of a PACK) calls this
    /// after each [`Action::Deliver`] of `unit`, so a record costs one queue pop rather than
    /// a pass through the rotation.
    ///
    /// [`poll_action`]: Self::poll_action
    pub fn next_in_turn(&mut self, unit: U, now: Instant) -> Option<R> {
        let (rotation, turn) = (self.rotation.as_ref()?, self.turn.as_ref()?);
        // poll_action's checks of a turn that has acted, in its order (see `drive`).
        if turn.entry != RingEntry::Unit(unit) || turn.actions == 0 {
            return None;
        }
        let rotation_cap_hit = rotation.actions > 0 && rotation.deadline.reached(now);
        if rotation_cap_hit || self.cap_hits(turn, now).any() {
            return None;
        }
        let at = turn.unit?;
        let (record, len) = self.pop_record(at)?;
        if let (Some(rotation), Some(turn)) = (self.rotation.as_mut(), self.turn.as_mut()) {
            count_hand_out(turn, rotation, len);
        }
        Some(record)
    }

    /// [`next_in_turn`](Self::next_in_turn) called up to `max` times with the same `now`,
    /// stopping at the first call that would return `None` or a record `take` refuses (that
    /// record stays at the front of the queue): the records go to `out`, in order, each
    /// counted and judged by the caps exactly as its own call would count and judge it (the
    /// unit's statistics and the staged counts end the same). Returns how many went.
    ///
    /// For a shell that would make those calls back to back under one reading of its clock,
    /// and whose processing of the records `take` accepts changes nothing in the scheduler
    /// (the records of a PACK, delivered): the calls it saves could not have answered
    /// differently, and a record costs no call and no pass through two returns.
    pub fn next_in_turn_many(
        &mut self,
        unit: U,
        now: Instant,
        max: usize,
        take: impl Fn(&R) -> bool,
        out: &mut Vec<R>,
    ) -> usize {
        let byte_cap = self.caps.bytes;
        let (Some(rotation), Some(turn)) = (self.rotation.as_mut(), self.turn.as_mut()) else {
            return 0;
        };
        // next_in_turn's checks that do not change from one call to the next under one `now`.
        if turn.entry != RingEntry::Unit(unit) || turn.actions == 0 || turn.deadline.reached(now) {
            return 0;
        }
        let rotation_reached = rotation.deadline.reached(now);
        let Some(at) = turn.unit else {
            return 0;
        };
        let Some(state) = self.units.at_mut(at) else {
            return 0;
        };
        let was_full = is_full(state, byte_cap);
        let (mut n, mut bytes) = (0usize, 0u64);
        // The rotation's time cap and the turn's count and byte caps, per record (cap_hits).
        while n < max
            && !(rotation.actions > 0 && rotation_reached)
            && turn.delivered < RECEIVE_COUNT_CAP
            && !(turn.delivered > 0 && turn.bytes >= byte_cap)
        {
            if !state.queue.front().is_some_and(|(record, _)| take(record)) {
                break;
            }
            let Some((record, len)) = state.queue.pop_front() else {
                break;
            };
            state.queued_bytes = state.queued_bytes.saturating_sub(len);
            count_hand_out(turn, rotation, len);
            bytes += len as u64;
            n += 1;
            out.push(record);
        }
        if n == 0 {
            return 0;
        }
        // pop_record's bookkeeping, once for the n pops: a unit's queue only shrinks here,
        // so it stops being full at most once, and empties at the last pop if at all.
        state.stats.staged = state.queue.len();
        state.stats.staged_bytes = state.queued_bytes;
        state.stats.records += n as u64;
        state.stats.bytes += bytes;
        let now_full = is_full(state, byte_cap);
        let emptied = state.queue.is_empty();
        if let (Source::Shared(socket), true, false) = (state.source, was_full, now_full) {
            if let Some(socket_state) = self.sockets.get_mut(&socket) {
                socket_state.full_peers = socket_state.full_peers.saturating_sub(1);
            }
        }
        self.staged = self.staged.saturating_sub(n);
        if emptied {
            self.refresh_unit(at);
        }
        n
    }

    /// Takes the next staged record of the unit at position `at` of `units`.
    fn pop_record(&mut self, at: usize) -> Option<(R, usize)> {
        let byte_bound = self.caps.bytes;
        let state = self.units.at_mut(at)?;
        let was_full = is_full(state, byte_bound);
        let (record, len) = state.queue.pop_front()?;
        state.queued_bytes = state.queued_bytes.saturating_sub(len);
        state.stats.staged = state.queue.len();
        state.stats.staged_bytes = state.queued_bytes;
        state.stats.records += 1;
        state.stats.bytes += len as u64;
        let now_full = is_full(state, byte_bound);
        let emptied = state.queue.is_empty();
        if let (Source::Shared(socket), true, false) = (state.source, was_full, now_full) {
            if let Some(socket_state) = self.sockets.get_mut(&socket) {
                socket_state.full_peers = socket_state.full_peers.saturating_sub(1);
            }
        }
        self.staged = self.staged.saturating_sub(1);
        if emptied {
            self.refresh_unit(at);
        }
        Some((record, len))
    }

    /// Runs turns until one produces an action or the rotation ends. Terminates: every pass
    /// of the loop returns, ends the turn under way, or begins the turn of an entry not yet
    /// served in this rotation.
    fn drive(&mut self, rotation: &mut Rotation, now: Instant) -> Step<U, R> {
        loop {
            let rotation_cap_hit = rotation.actions > 0 && rotation.deadline.reached(now);
            let Some(mut turn) = self.turn.take() else {
                if rotation_cap_hit {
                    return Step::End(RotationEndReason::TimeCap);
                }
                match self.begin_turn(rotation, now) {
                    Some(turn) => self.turn = Some(turn),
                    None => return Step::End(RotationEndReason::Complete),
                }
                continue;
            };
            if turn.actions > 0 {
                let hits = self.cap_hits(&turn, now);
                if hits.any() || rotation_cap_hit {
                    self.record_turn_end(turn.entry, hits, rotation_cap_hit);
                    if rotation_cap_hit {
                        return Step::End(RotationEndReason::TimeCap);
                    }
                    continue;
                }
            }
            if let Some(action) = self.next_action(&mut turn, rotation) {
                turn.actions += 1;
                rotation.actions += 1;
                self.turn = Some(turn);
                return Step::Act(action);
            }
        }
    }

    fn begin_turn(&mut self, rotation: &mut Rotation, now: Instant) -> Option<Turn<U>> {
        // Readiness mode: the first entry at or after the cursor (cyclically) that may have
        // work; the entries in between would only have had empty turns. Served entries form
        // one stretch behind the cursor, so reaching one means no unserved entry has work.
        let (at, entry) = if self.readiness {
            let next = self.active.range(self.cursor..).next();
            let at = *next.or_else(|| self.active.iter().next())?;
            (at, *self.ring.get(&at)?)
        } else {
            self.next_at_or_after(self.cursor)?
        };
        let unit_at = match entry {
            RingEntry::Unit(unit) => {
                let unit_at = self.units.position(&unit)?;
                let state = self.units.at_mut(unit_at)?;
                if state.served_in == rotation.number {
                    return None;
                }
                state.served_in = rotation.number;
                state.stats.turns += 1;
                Some(unit_at)
            }
            RingEntry::ReadPhase(socket) => {
                let state = self.sockets.get_mut(&socket)?;
                if state.served_in == rotation.number {
                    return None;
                }
                state.served_in = rotation.number;
                state.stats.phases += 1;
                None
            }
        };
        self.cursor = at.after();
        self.turns_begun += 1;
        rotation.turns += 1;
        Some(Turn {
            entry,
            unit: unit_at,
            seq: self.turns_begun,
            deadline: Deadline::after(now, self.caps.unit_time),
            actions: 0,
            delivered: 0,
            bytes: 0,
        })
    }

    fn cap_hits(&self, turn: &Turn<U>, now: Instant) -> CapHits {
        CapHits {
            count: turn.delivered >= RECEIVE_COUNT_CAP,
            bytes: turn.delivered > 0 && turn.bytes >= self.caps.bytes,
            time: turn.deadline.reached(now),
        }
    }

    fn record_turn_end(&mut self, entry: RingEntry<U>, hits: CapHits, rotation_cut: bool) {
        match entry {
            RingEntry::Unit(unit) => {
                if let Some(state) = self.units.get_mut(&unit) {
                    let stats = &mut state.stats;
                    stats.count_cap_hits += u64::from(hits.count);
                    stats.byte_cap_hits += u64::from(hits.bytes);
                    stats.time_cap_hits += u64::from(hits.time);
                    stats.rotation_cap_cuts += u64::from(rotation_cut);
                }
            }
            RingEntry::ReadPhase(socket) => {
                if let Some(state) = self.sockets.get_mut(&socket) {
                    state.stats.time_cap_hits += u64::from(hits.time);
                    state.stats.rotation_cap_cuts += u64::from(rotation_cut);
                }
            }
        }
    }

    /// The turn's next action, or `None` when the turn has nothing left to do.
    fn next_action(&mut self, turn: &mut Turn<U>, rotation: &mut Rotation) -> Option<Action<U, R>> {
        match turn.entry {
            RingEntry::Unit(unit) => {
                let at = turn.unit?;
                if let Some((record, len)) = self.pop_record(at) {
                    turn.delivered += 1;
                    turn.bytes = turn.bytes.saturating_add(len);
                    rotation.delivered += 1;
                    rotation.bytes += len as u64;
                    return Some(Action::Deliver { unit, record });
                }
                match self.units.at(at)?.source {
                    Source::Single => Some(Action::Read(ReadRequest {
                        target: ReadTarget::Unit(unit),
                        turn: turn.seq,
                    })),
                    Source::Shared(_) => None,
                }
            }
            RingEntry::ReadPhase(socket) => {
                let state = self.sockets.get_mut(&socket)?;
                if turn.actions > 0 && state.full_peers > 0 {
                    state.stats.staging_full_stops += 1;
                    return None;
                }
                Some(Action::Read(ReadRequest {
                    target: ReadTarget::Shared(socket),
                    turn: turn.seq,
                }))
            }
        }
    }
}

/// Counts one record of `len` bytes handed out in `turn` of `rotation`: what the turn's and
/// the rotation's caps are judged against.
#[inline]
fn count_hand_out<U>(turn: &mut Turn<U>, rotation: &mut Rotation, len: usize) {
    turn.delivered += 1;
    turn.bytes = turn.bytes.saturating_add(len);
    turn.actions += 1;
    rotation.delivered += 1;
    rotation.bytes += len as u64;
    rotation.actions += 1;
}
