//! [`ExecQueues`]: when an accepted call runs (MISSION K4, C6).
//!
//! The serve side decides *whether* a call is taken ([`super::ServeTable::handle_request`])
//! and whether its ttl still allows it to start ([`super::ServeTable::handle_dispatch`]).
//! This module decides *when* it starts: at once (parallel), or after the calls ahead of it
//! in its queue (serial per instance, or per key).
//!
//! ```text
//!   ServeTable::handle_request ── Accept(id)
//!        │
//!   ExecQueues::handle_arrival(queue, mailbox, method, conflate, id)
//!        ├── RunNow ─────────────────────────────> ServeTable::handle_dispatch(id)
//!        ├── Queued                                  (later, from handle_finished / handle_gone)
//!        ├── Superseding { replaced } ──> answer `replaced` Superseded (it did not run)
//!        └── Busy ──> answer `id` Busy (it did not run; the queue is unchanged)
//!
//!   the running call ends (or dispatch said Skip / Refuse(Timeout))
//!   ExecQueues::handle_finished(queue, id) ── Some(next) ──> ServeTable::handle_dispatch(next)
//! ```
//!
//! # Queues and the mailbox
//!
//! A queue is named by a key `Q` chosen by the runtime (for example the channel, or the
//! channel and a per-call key computed from the arguments). Each queue runs **at most one**
//! call at a time, in arrival order. A queue that runs nothing and holds nothing does not
//! exist: memory is bounded by the calls in hand, however many distinct keys were ever seen.
//!
//! The mailbox bound counts **waiting** calls only, not the running one, and is given with
//! each arrival (it is the service's configuration, [`DEFAULT_MAILBOX`] unless the service
//! says otherwise): with a bound of 100, a running call and 101 arrivals give 100 `Queued`
//! and one `Busy`. Only requests are ever refused; nothing here sees a reply.
//!
//! # Conflation
//!
//! An arrival with `conflate == true` replaces a waiting call of the same method in the same
//! queue that also arrived with `conflate == true`: the new call takes the old one's place
//! (its position in the queue), and the old one is answered `Superseded` by the runtime. Only
//! the newest value of a setpoint-shaped command matters. Conflation is checked before the
//! bound, so a full queue still conflates. The runtime passes `conflate == true` only for
//! methods that declared it, and only idempotent commands may (the combination is rejected
//! when a service is exposed): dropping a waiting non-repeatable command would silently skip
//! work its caller was promised. A call that arrived with `conflate == false` is never
//! replaced, and a running call is never replaced.
//!
//! # Deadlines
//!
//! No clock is needed here: the ttl is measured by the [`super::ServeTable`], which refuses a
//! call whose ttl ran out while it waited (MISSION C6), at dispatch or by its own timer. Either
//! way the runtime tells this module the call is over ([`ExecQueues::handle_finished`] for
//! the running call, [`ExecQueues::handle_gone`] for a waiting one), and the next one moves up.
//!
//! # Determinism
//!
//! No clock, no I/O, no randomness: the same inputs in the same order give the same outputs.
//! Every operation is `O(log n)` in the calls of one queue (plus a scan of the distinct
//! conflating methods waiting in that queue, a handful at most).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// The mailbox bound of a serial queue when the service declares none: at most 100 calls
/// wait in one queue (MISSION K4).
pub const DEFAULT_MAILBOX: usize = 100;

/// What to do with an accepted call, from [`ExecQueues::handle_arrival`].
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arrival<I> {
    /// Dispatch it now ([`super::ServeTable::handle_dispatch`]). For a serial queue, the call
    /// is now that queue's running call: report its end with [`ExecQueues::handle_finished`].
    RunNow,
    /// It waits in its queue; [`ExecQueues::handle_finished`] or [`ExecQueues::handle_gone`]
    /// returns it when its turn comes.
    Queued,
    /// It took the place of `replaced`, a waiting call of the same conflating method, which
    /// the runtime answers `Superseded` now (it did not run). The new call waits at the old
    /// one's position.
    Superseding {
        /// The waiting call it replaced; this module has forgotten it.
        replaced: I,
    },
    /// The queue's mailbox is full: the runtime answers it `Busy` now (it did not run). The
    /// queue is unchanged.
    Busy,
}

/// Diagnostic counters of an [`ExecQueues`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// Arrivals answered [`Arrival::RunNow`] (parallel ones included).
    pub run_now: u64,
    /// Arrivals answered [`Arrival::Queued`].
    pub queued: u64,
    /// Arrivals answered [`Arrival::Superseding`] (as many waiting calls were superseded).
    pub superseded: u64,
    /// Arrivals refused [`Arrival::Busy`] because the mailbox was full.
    pub busy: u64,
    /// Arrivals refused [`Arrival::Busy`] because their id was already in hand (a shell
    /// bug: ids must be unique among the calls in hand).
    pub duplicate_ids: u64,
    /// Waiting calls removed by [`ExecQueues::handle_gone`] before their turn.
    pub gone_waiting: u64,
    /// Waiting calls promoted to running by [`ExecQueues::handle_finished`] or
    /// [`ExecQueues::handle_gone`].
    pub promoted: u64,
    /// Ends reported for a call that is not the running call of the named queue.
    pub stray_finishes: u64,
}

/// Where a call in hand is.
#[derive(Debug, Clone)]
struct Place<Q> {
    queue: Q,
    /// `None`: running; `Some(pos)`: waiting at position `pos` of the queue.
    waiting_at: Option<u64>,
}

#[derive(Debug, Clone)]
struct Waiter<I> {
    id: I,
    /// Whether it arrived with `conflate == true` (it has an entry in `conflating`).
    conflate: bool,
}

/// One serial queue. Invariant: `running.is_some() || waiting.is_empty()`, and a queue with
/// nothing running is removed from [`ExecQueues`].
#[derive(Debug, Clone)]
struct Queue<I> {
    running: Option<I>,
    /// Waiting calls by position; positions only grow, a superseding call reuses one.
    waiting: BTreeMap<u64, Waiter<I>>,
    /// The position of the one waiting call of each conflating method.
    conflating: Vec<(Box<str>, u64)>,
    next_pos: u64,
}

impl<I> Queue<I> {
    fn running(id: I) -> Self {
        Self {
            running: Some(id),
            waiting: BTreeMap::new(),
            conflating: Vec::new(),
            next_pos: 0,
        }
    }

    fn forget_conflating(&mut self, pos: u64) {
        self.conflating.retain(|&(_, p)| p != pos);
    }
}

/// The execution queues of one node's served calls (MISSION K4): which accepted call runs
/// now, which waits, and which is refused `Busy` or answered `Superseded`.
///
/// `Q` names a queue (for example `(channel, Option<String>)`: the instance, and the key a
/// keyed execution computed from the arguments); `I` is the handle of one call (for example
/// [`super::ServeId`]), unique among the calls in hand. Parallel calls (`queue == None`) are
/// not tracked at all.
///
/// # Life of a serial call
///
/// 1. [`Self::handle_arrival`]: `RunNow` (the queue was idle), `Queued`, `Superseding` or
///    `Busy`.
/// 2. When the running call of a queue ends, for whatever reason (its handler answered, or
///    its dispatch said `Skip` or `Refuse(Timeout)`), [`Self::handle_finished`] returns the
///    next waiting call, which is now running: the runtime dispatches it (and, if that
///    dispatch does not run it, calls [`Self::handle_finished`] again for it).
/// 3. A waiting call answered by someone else (its ttl ran out in the serve table, its
///    caller's connection is gone, the drain cut it) is removed with [`Self::handle_gone`],
///    which keeps the order of the others. A queued call the runtime forgets to report gone
///    still moves on: its dispatch says `Skip` and the runtime calls `handle_finished`.
#[derive(Debug, Clone)]
pub struct ExecQueues<Q, I> {
    queues: HashMap<Q, Queue<I>>,
    /// Every call in hand (running or waiting), for [`Self::handle_gone`].
    index: HashMap<I, Place<Q>>,
    stats: ExecStats,
}

impl<Q: Clone + Eq + Hash, I: Copy + Eq + Hash> Default for ExecQueues<Q, I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Q: Clone + Eq + Hash, I: Copy + Eq + Hash> ExecQueues<Q, I> {
    /// No queues, no calls.
    pub fn new() -> Self {
        Self {
            queues: HashMap::new(),
            index: HashMap::new(),
            stats: ExecStats::default(),
        }
    }

    /// Call `id` of `method` was accepted; where does it go?
    ///
    /// * `queue == None`: the call runs in parallel: always [`Arrival::RunNow`], nothing is
    ///   recorded (and nothing must be reported for it later).
    /// * `Some(q)`, `q` idle (nothing runs, nothing waits): [`Arrival::RunNow`]; `id` is now
    ///   `q`'s running call.
    /// * `conflate` and a call of the same `method` that also arrived with `conflate` waits in
    ///   `q`: [`Arrival::Superseding`]; `id` takes its place (checked before the bound).
    /// * fewer than `mailbox` calls wait in `q`: [`Arrival::Queued`] at the back.
    /// * otherwise [`Arrival::Busy`]; nothing changes.
    ///
    /// `mailbox` is the bound of waiting calls of `q` (the running call is not counted; 0
    /// means "run now or refuse"); it is the service's setting, [`DEFAULT_MAILBOX`] unless
    /// configured, and is ignored for parallel calls. Each arrival is judged against its own
    /// `mailbox`, so every arrival of one queue should pass the same value.
    ///
    /// `id` must not already be in hand; an id that is, is refused `Busy` and changes nothing
    /// (counted in [`ExecStats::duplicate_ids`]).
    pub fn handle_arrival(
        &mut self,
        queue: Option<Q>,
        mailbox: usize,
        method: &str,
        conflate: bool,
        id: I,
    ) -> Arrival<I> {
        let Some(key) = queue else {
            self.stats.run_now += 1;
            return Arrival::RunNow;
        };
        if self.index.contains_key(&id) {
            self.stats.duplicate_ids += 1;
            return Arrival::Busy;
        }
        let Some(q) = self.queues.get_mut(&key) else {
            self.queues.insert(key.clone(), Queue::running(id));
            self.index.insert(
                id,
                Place {
                    queue: key,
                    waiting_at: None,
                },
            );
            self.stats.run_now += 1;
            return Arrival::RunNow;
        };
        if conflate {
            let pos = q
                .conflating
                .iter()
                .find(|(m, _)| &**m == method)
                .map(|&(_, pos)| pos);
            if let Some(pos) = pos {
                if let Some(waiter) = q.waiting.get_mut(&pos) {
                    let replaced = std::mem::replace(&mut waiter.id, id);
                    self.index.remove(&replaced);
                    self.index.insert(
                        id,
                        Place {
                            queue: key,
                            waiting_at: Some(pos),
                        },
                    );
                    self.stats.superseded += 1;
                    return Arrival::Superseding { replaced };
                }
            }
        }
        if q.waiting.len() >= mailbox {
            self.stats.busy += 1;
            return Arrival::Busy;
        }
        let pos = q.next_pos;
        q.next_pos += 1;
        q.waiting.insert(pos, Waiter { id, conflate });
        if conflate {
            q.conflating.push((method.into(), pos));
        }
        self.index.insert(
            id,
            Place {
                queue: key,
                waiting_at: Some(pos),
            },
        );
        self.stats.queued += 1;
        Arrival::Queued
    }

    /// The running call `id` of `queue` is over (answered, or its dispatch said `Skip` or
    /// `Refuse(Timeout)`). Returns the next waiting call, which is now running: the runtime
    /// dispatches it. `None`: the queue is idle now (and freed).
    ///
    /// If `id` is not `queue`'s running call (unknown, already over, waiting, or in another
    /// queue), nothing changes and `None` is returned (counted in
    /// [`ExecStats::stray_finishes`]); a waiting call that is over is reported with
    /// [`Self::handle_gone`].
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_finished(&mut self, queue: &Q, id: I) -> Option<I> {
        let is_running = self
            .queues
            .get(queue)
            .is_some_and(|q| q.running == Some(id));
        if !is_running {
            self.stats.stray_finishes += 1;
            return None;
        }
        self.index.remove(&id);
        self.promote(queue)
    }

    /// Call `id` is over without this module's help (for example refused by the serve table
    /// when its ttl ran out, its caller's connection gone, cut by a drain).
    ///
    /// A waiting call is removed; the others keep their order; `None` is returned. A running
    /// call is treated as [`Self::handle_finished`]: the next waiting call of its queue is
    /// returned, now running. An unknown id (a parallel call, one already over) changes
    /// nothing.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_gone(&mut self, id: I) -> Option<I> {
        let place = self.index.remove(&id)?;
        match place.waiting_at {
            None => self.promote(&place.queue),
            Some(pos) => {
                if let Some(q) = self.queues.get_mut(&place.queue) {
                    if let Some(waiter) = q.waiting.remove(&pos) {
                        if waiter.conflate {
                            q.forget_conflating(pos);
                        }
                    }
                }
                self.stats.gone_waiting += 1;
                None
            }
        }
    }

    /// How many calls wait in `queue` (not counting the running one).
    pub fn waiting(&self, queue: &Q) -> usize {
        self.queues.get(queue).map_or(0, |q| q.waiting.len())
    }

    /// The call `queue` is running, if any.
    pub fn running(&self, queue: &Q) -> Option<I> {
        self.queues.get(queue).and_then(|q| q.running)
    }

    /// The calls in hand, running and waiting, over every queue (parallel calls are not
    /// tracked).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no serial call is in hand (then no queue exists either).
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The queues that exist: those running a call. An idle queue is freed at once.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// Diagnostic counters.
    pub fn stats(&self) -> &ExecStats {
        &self.stats
    }

    /// The running call of `queue` is over (already removed from the index): the first
    /// waiting call runs next, or the queue is freed.
    fn promote(&mut self, queue: &Q) -> Option<I> {
        let q = self.queues.get_mut(queue)?;
        let Some((pos, next)) = q.waiting.pop_first() else {
            self.queues.remove(queue);
            return None;
        };
        if next.conflate {
            q.forget_conflating(pos);
        }
        q.running = Some(next.id);
        if let Some(place) = self.index.get_mut(&next.id) {
            place.waiting_at = None;
        }
        self.stats.promoted += 1;
        Some(next.id)
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use proptest::prelude::*;

    use super::*;

    type Key = (&'static str, Option<u32>);
    const CELL: Key = ("cell", None);
    const FLEET: Key = ("fleet", Some(7));

    fn queues() -> ExecQueues<Key, u32> {
        ExecQueues::new()
    }

    /// K4: with the default bound, a running call and 101 arrivals give exactly 100 `Queued`
    /// and one `Busy` (the bound counts waiting calls only); the refused call changed nothing.
    #[test]
    fn k4_exactly_one_busy_for_101_arrivals_behind_a_running_call() {
        let mut q = queues();
        assert_eq!(
            q.handle_arrival(Some(CELL), DEFAULT_MAILBOX, "start", false, 0),
            Arrival::RunNow
        );
        let answers: Vec<Arrival<u32>> = (1..=101)
            .map(|id| q.handle_arrival(Some(CELL), DEFAULT_MAILBOX, "start", false, id))
            .collect();
        assert_eq!(
            answers.iter().filter(|a| **a == Arrival::Queued).count(),
            100
        );
        assert_eq!(answers.iter().filter(|a| **a == Arrival::Busy).count(), 1);
        assert_eq!(answers[100], Arrival::Busy, "the 101st is the one refused");
        assert_eq!(q.waiting(&CELL), 100);
        assert_eq!(q.running(&CELL), Some(0));
        assert_eq!(q.len(), 101);
        // The refused id was never taken in: it is unknown.
        assert_eq!(q.handle_gone(101), None);
        assert_eq!(q.waiting(&CELL), 100);
        // Once one finishes, there is room for exactly one more.
        assert_eq!(q.handle_finished(&CELL, 0), Some(1));
        assert_eq!(
            q.handle_arrival(Some(CELL), DEFAULT_MAILBOX, "start", false, 102),
            Arrival::Queued
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), DEFAULT_MAILBOX, "start", false, 103),
            Arrival::Busy
        );
        assert_eq!(q.stats().busy, 2);
    }

    /// K4: the bound is per queue and given with the arrival: a mailbox of 0 means "run now
    /// or refuse", and a full queue does not affect another queue.
    #[test]
    fn k4_mailbox_is_per_queue() {
        let mut q = queues();
        assert_eq!(
            q.handle_arrival(Some(CELL), 0, "m", false, 1),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), 0, "m", false, 2),
            Arrival::Busy
        );
        assert_eq!(
            q.handle_arrival(Some(FLEET), 1, "m", false, 3),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(FLEET), 1, "m", false, 4),
            Arrival::Queued
        );
        assert_eq!(
            q.handle_arrival(Some(FLEET), 1, "m", false, 5),
            Arrival::Busy
        );
    }

    /// K4: a conflating arrival replaces the waiting call of the same method, answering
    /// `Superseding` with the replaced id; the new call keeps the old position; other methods
    /// and non-conflating calls are not touched; a full queue still conflates.
    #[test]
    fn k4_conflate_supersedes_in_place() {
        let mut q = queues();
        let mb = 3;
        assert_eq!(
            q.handle_arrival(Some(CELL), mb, "set", true, 1),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), mb, "set", true, 2),
            Arrival::Queued
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), mb, "mode", false, 3),
            Arrival::Queued
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), mb, "other", true, 4),
            Arrival::Queued
        );
        // Full now; the same method still conflates, at position of 2.
        assert_eq!(
            q.handle_arrival(Some(CELL), mb, "set", true, 5),
            Arrival::Superseding { replaced: 2 }
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), mb, "set", true, 6),
            Arrival::Superseding { replaced: 5 }
        );
        // A non-conflating call of a conflating method's name is refused by the bound.
        assert_eq!(
            q.handle_arrival(Some(CELL), mb, "mode", true, 7),
            Arrival::Busy
        );
        assert_eq!(q.waiting(&CELL), 3);
        assert_eq!(q.len(), 4);
        // Replaced ids are forgotten.
        assert_eq!(q.handle_gone(2), None);
        assert_eq!(q.handle_gone(5), None);
        // Order: 6 (in 2's place), 3, 4.
        assert_eq!(q.handle_finished(&CELL, 1), Some(6));
        // The running call is never replaced: a new "set" queues behind.
        assert_eq!(
            q.handle_arrival(Some(CELL), mb, "set", true, 8),
            Arrival::Queued
        );
        assert_eq!(q.handle_finished(&CELL, 6), Some(3));
        assert_eq!(q.handle_finished(&CELL, 3), Some(4));
        assert_eq!(q.handle_finished(&CELL, 4), Some(8));
        assert_eq!(q.handle_finished(&CELL, 8), None);
        assert!(q.is_empty());
        assert_eq!(q.stats().superseded, 2);
    }

    /// K4: only calls that arrived conflating are replaced (the runtime passes `conflate`
    /// only for idempotent commands that declared it): a waiting non-conflating call of the
    /// same method is never dropped.
    #[test]
    fn k4_conflate_never_replaces_a_non_conflating_call() {
        let mut q = queues();
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "dispense", false, 1),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "dispense", false, 2),
            Arrival::Queued
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "dispense", true, 3),
            Arrival::Queued
        );
        assert_eq!(q.handle_finished(&CELL, 1), Some(2));
        assert_eq!(q.handle_finished(&CELL, 2), Some(3));
    }

    /// K4: once the superseding call has run, or left, the method conflates no more with it.
    #[test]
    fn k4_conflate_forgets_promoted_and_gone_waiters() {
        let mut q = queues();
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "set", true, 1),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "set", true, 2),
            Arrival::Queued
        );
        assert_eq!(q.handle_gone(2), None);
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "set", true, 3),
            Arrival::Queued
        );
        assert_eq!(q.handle_finished(&CELL, 1), Some(3));
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "set", true, 4),
            Arrival::Queued
        );
    }

    /// K4: per-key order holds while other keys proceed independently.
    #[test]
    fn k4_keys_run_independently_in_order() {
        let mut q = queues();
        let a = ("fleet", Some(1));
        let b = ("fleet", Some(2));
        assert_eq!(
            q.handle_arrival(Some(a), 10, "m", false, 1),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(b), 10, "m", false, 2),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(a), 10, "m", false, 3),
            Arrival::Queued
        );
        assert_eq!(
            q.handle_arrival(Some(b), 10, "m", false, 4),
            Arrival::Queued
        );
        assert_eq!(q.handle_finished(&b, 2), Some(4));
        assert_eq!(q.running(&a), Some(1));
        assert_eq!(q.handle_finished(&b, 4), None);
        assert_eq!(q.handle_finished(&a, 1), Some(3));
        // A finish naming the wrong queue or a waiting call changes nothing.
        assert_eq!(q.handle_finished(&b, 3), None);
        assert_eq!(q.running(&a), Some(3));
        assert_eq!(q.stats().stray_finishes, 1);
    }

    /// K4: a parallel call always runs now and is not tracked.
    #[test]
    fn k4_parallel_always_runs_now() {
        let mut q = queues();
        for id in 0..500 {
            assert_eq!(q.handle_arrival(None, 0, "read", true, id), Arrival::RunNow);
        }
        assert!(q.is_empty());
        assert_eq!(q.queues(), 0);
        assert_eq!(q.handle_gone(3), None);
        assert_eq!(q.stats().run_now, 500);
    }

    /// K4, C6: a waiting call that is gone (its ttl ran out in the serve table, its caller is
    /// gone) leaves without disturbing the order of the others.
    #[test]
    fn k4_c6_gone_waiting_call_keeps_order() {
        let mut q = queues();
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "m", false, 1),
            Arrival::RunNow
        );
        for id in 2..=5 {
            assert_eq!(
                q.handle_arrival(Some(CELL), 10, "m", false, id),
                Arrival::Queued
            );
        }
        assert_eq!(q.handle_gone(3), None);
        assert_eq!(q.waiting(&CELL), 3);
        assert_eq!(q.running(&CELL), Some(1));
        assert_eq!(q.handle_finished(&CELL, 1), Some(2));
        assert_eq!(q.handle_finished(&CELL, 2), Some(4));
        assert_eq!(q.handle_finished(&CELL, 4), Some(5));
        assert_eq!(q.stats().gone_waiting, 1);
    }

    /// K4: a running call that is gone behaves as finished: the next one runs.
    #[test]
    fn k4_gone_running_call_promotes_the_next() {
        let mut q = queues();
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "m", false, 1),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "m", false, 2),
            Arrival::Queued
        );
        assert_eq!(q.handle_gone(1), Some(2));
        assert_eq!(q.running(&CELL), Some(2));
        assert_eq!(q.handle_gone(2), None);
        assert_eq!(q.queues(), 0);
        assert!(q.is_empty());
    }

    /// K4: idle queues are freed at once, so a keyed service that saw a million distinct
    /// keys holds memory only for the calls in hand.
    #[test]
    fn k4_empty_queues_are_freed() {
        let mut q: ExecQueues<(u8, u32), u32> = ExecQueues::new();
        for id in 0..10_000u32 {
            assert_eq!(
                q.handle_arrival(Some((1, id)), 10, "m", false, id),
                Arrival::RunNow
            );
            assert_eq!(q.handle_finished(&(1, id), id), None);
        }
        assert_eq!(q.queues(), 0);
        assert!(q.is_empty());
        assert_eq!(
            q.handle_arrival(Some((1, 5)), 10, "m", false, 1),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some((1, 5)), 10, "m", false, 2),
            Arrival::Queued
        );
        assert_eq!(q.handle_gone(2), None);
        assert_eq!(q.queues(), 1, "the running call keeps its queue");
        assert_eq!(q.handle_finished(&(1, 5), 1), None);
        assert_eq!(q.queues(), 0);
    }

    /// K4: an id already in hand is refused and changes nothing.
    #[test]
    fn k4_duplicate_id_changes_nothing() {
        let mut q = queues();
        assert_eq!(
            q.handle_arrival(Some(CELL), 10, "m", false, 1),
            Arrival::RunNow
        );
        assert_eq!(
            q.handle_arrival(Some(FLEET), 10, "m", false, 1),
            Arrival::Busy
        );
        assert_eq!(q.queues(), 1);
        assert_eq!(q.stats().duplicate_ids, 1);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Arrive {
            key: u8,
            method: u8,
            conflate: bool,
        },
        Finish {
            key: u8,
        },
        /// A call in hand, picked by index among the ids in hand in id order.
        Gone {
            pick: usize,
        },
        /// A finish naming a call that is not running (a stray report).
        StrayFinish {
            key: u8,
            pick: usize,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            5 => (0..3u8, 0..3u8, any::<bool>())
                .prop_map(|(key, method, conflate)| Step::Arrive { key, method, conflate }),
            3 => (0..3u8).prop_map(|key| Step::Finish { key }),
            1 => any::<usize>().prop_map(|pick| Step::Gone { pick }),
            1 => (0..3u8, any::<usize>()).prop_map(|(key, pick)| Step::StrayFinish { key, pick }),
        ]
    }

    /// The naive model of one queue: a vector in order, replaced in place.
    #[derive(Debug, Default)]
    struct ModelQueue {
        running: Option<u32>,
        waiting: Vec<(u32, u8, bool)>,
    }

    fn mailbox(key: u8) -> usize {
        usize::from(key) + 1
    }

    /// The naive model of every queue, with what the run-order check needs: each key's
    /// arrivals and runs in order, the calls that were dropped (busy, superseded, gone while
    /// waiting) and the calls involved in conflation.
    #[derive(Debug, Default)]
    struct Model {
        queues: BTreeMap<u8, ModelQueue>,
        arrival_order: BTreeMap<u8, Vec<u32>>,
        run_order: BTreeMap<u8, Vec<u32>>,
        dropped: HashSet<u32>,
        conflated: HashSet<u32>,
        next_id: u32,
    }

    impl Model {
        /// Plays one step on the model and on `q`, and checks that `q` answers as the model.
        fn step(&mut self, q: &mut ExecQueues<u8, u32>, step: &Step) -> Result<(), TestCaseError> {
            match *step {
                Step::Arrive {
                    key,
                    method,
                    conflate,
                } => {
                    let (id, expected) = self.arrive(key, method, conflate);
                    let got = q.handle_arrival(
                        Some(key),
                        mailbox(key),
                        &method.to_string(),
                        conflate,
                        id,
                    );
                    prop_assert_eq!(got, expected);
                }
                Step::Finish { key } => {
                    let Some(running) = self.queues.get(&key).and_then(|m| m.running) else {
                        return Ok(());
                    };
                    let expected = self.promote(key);
                    prop_assert_eq!(q.handle_finished(&key, running), expected);
                }
                Step::Gone { pick } => {
                    let Some((id, expected)) = self.gone(pick) else {
                        return Ok(());
                    };
                    prop_assert_eq!(q.handle_gone(id), expected);
                }
                Step::StrayFinish { key, pick } => {
                    let running = self.queues.get(&key).and_then(|m| m.running);
                    let id = u32::try_from(pick % (self.next_id as usize + 1)).unwrap();
                    if Some(id) == running {
                        return Ok(());
                    }
                    prop_assert_eq!(q.handle_finished(&key, id), None);
                }
            }
            Ok(())
        }

        /// A new call on `key`: its id and what the queues must answer.
        fn arrive(&mut self, key: u8, method: u8, conflate: bool) -> (u32, Arrival<u32>) {
            let id = self.next_id;
            self.next_id += 1;
            self.arrival_order.entry(key).or_default().push(id);
            let m = self.queues.entry(key).or_default();
            let expected = if m.running.is_none() {
                m.running = Some(id);
                self.run_order.entry(key).or_default().push(id);
                Arrival::RunNow
            } else if let Some(w) = m
                .waiting
                .iter_mut()
                .find(|w| conflate && w.2 && w.1 == method)
            {
                let replaced = w.0;
                w.0 = id;
                self.dropped.insert(replaced);
                self.conflated.insert(replaced);
                self.conflated.insert(id);
                Arrival::Superseding { replaced }
            } else if m.waiting.len() < mailbox(key) {
                m.waiting.push((id, method, conflate));
                Arrival::Queued
            } else {
                self.dropped.insert(id);
                Arrival::Busy
            };
            (id, expected)
        }

        /// The running call of `key` ended: the next waiting one runs, if any.
        fn promote(&mut self, key: u8) -> Option<u32> {
            let m = self.queues.get_mut(&key)?;
            if m.waiting.is_empty() {
                m.running = None;
                None
            } else {
                let next = m.waiting.remove(0).0;
                m.running = Some(next);
                self.run_order.entry(key).or_default().push(next);
                Some(next)
            }
        }

        /// A call in hand went away, picked by index among the ids in hand in id order: its
        /// id and what the queues must answer; `None` with no call in hand.
        fn gone(&mut self, pick: usize) -> Option<(u32, Option<u32>)> {
            let mut in_hand: Vec<(u32, u8)> = self
                .queues
                .iter()
                .flat_map(|(&k, m)| {
                    m.running
                        .iter()
                        .copied()
                        .chain(m.waiting.iter().map(|w| w.0))
                        .map(move |id| (id, k))
                })
                .collect();
            in_hand.sort_unstable();
            if in_hand.is_empty() {
                return None;
            }
            let (id, key) = in_hand[pick % in_hand.len()];
            let m = self.queues.get_mut(&key).unwrap();
            let expected = if m.running == Some(id) {
                self.promote(key)
            } else {
                m.waiting.retain(|w| w.0 != id);
                self.dropped.insert(id);
                None
            };
            Some((id, expected))
        }

        /// The invariants after every step: the model's queues are `q`'s; a key with waiting
        /// calls and no running call never exists; idle queues are freed.
        fn check(&self, q: &ExecQueues<u8, u32>) -> Result<(), TestCaseError> {
            let mut in_hand = 0;
            for key in 0..3u8 {
                let m = self.queues.get(&key);
                let waiting = m.map_or(0, |m| m.waiting.len());
                prop_assert_eq!(q.running(&key), m.and_then(|m| m.running));
                prop_assert_eq!(q.waiting(&key), waiting);
                prop_assert!(waiting == 0 || q.running(&key).is_some());
                prop_assert!(waiting <= mailbox(key));
                in_hand += waiting + usize::from(m.is_some_and(|m| m.running.is_some()));
            }
            prop_assert_eq!(q.len(), in_hand);
            prop_assert_eq!(q.queues(), self.queues.len(), "idle queues are freed");
            Ok(())
        }

        /// Each key's run order is its arrival order minus the calls that were dropped (busy,
        /// superseded, gone while waiting), once calls involved in conflation (which move to
        /// their predecessor's position) are set aside; at most one call per key ran at a time
        /// (checked after every step: `running` is one value).
        fn check_run_order(&self) -> Result<(), TestCaseError> {
            for (key, arrived) in &self.arrival_order {
                let ran: Vec<u32> = self
                    .run_order
                    .get(key)
                    .map(|r| {
                        r.iter()
                            .copied()
                            .filter(|id| !self.conflated.contains(id))
                            .collect()
                    })
                    .unwrap_or_default();
                let still: HashSet<u32> = self
                    .queues
                    .get(key)
                    .map(|m| m.waiting.iter().map(|w| w.0).collect())
                    .unwrap_or_default();
                let expected: Vec<u32> = arrived
                    .iter()
                    .copied()
                    .filter(|id| !self.dropped.contains(id) && !self.conflated.contains(id))
                    .filter(|id| !still.contains(id))
                    .collect();
                prop_assert_eq!(ran, expected);
            }
            Ok(())
        }
    }

    fn run(steps: &[Step]) -> Result<(), TestCaseError> {
        let mut q: ExecQueues<u8, u32> = ExecQueues::new();
        let mut model = Model::default();
        for s in steps {
            model.step(&mut q, s)?;
            model.queues.retain(|_, m| m.running.is_some());
            model.check(&q)?;
        }
        model.check_run_order()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// K4: random arrivals, finishes and departures over a few keys, against a naive
        /// model: every answer matches; each key runs at most one call and never has waiting
        /// calls without a running one; idle keys are freed; each key's run order is its
        /// arrival order minus busy, superseded and gone calls (conflating calls take their
        /// predecessor's position, which the model replays exactly).
        #[test]
        fn k4_prop_per_key_order_against_a_model(steps in prop::collection::vec(step(), 1..200)) {
            run(&steps)?;
        }
    }
}
