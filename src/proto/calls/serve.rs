//! [`ServeTable`]: the calls a node is serving, on the callee side (MISSION C4, C6).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use crate::proto::wire::ReplyCode;

/// Typed handle of one call a [`ServeTable`] admitted. Allocated by the table, never reused,
/// so a stale handle (a call already answered) can never reach a newer call that reuses the
/// same wire `call_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServeId(u64);

impl fmt::Display for ServeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

/// Whether a method answers once or streams items first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallShape {
    /// One REPLY.
    Unary,
    /// ITEMs, then one REPLY. A stream cannot be finished by a stopping service: it ends with
    /// `Unavailable` when the drain begins (MISSION C4).
    Stream,
}

/// What to do with an arriving REQUEST, from [`ServeTable::handle_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Send ACCEPT on the connection it came from now (naming that connection), then queue it
    /// for dispatch under this handle.
    Accept(ServeId),
    /// Send REPLY with this code now, without ACCEPT and without running it. `Unavailable`:
    /// the service is stopping (MISSION C4); the caller records "did not run".
    Refuse(ReplyCode),
    /// The same connection already has a call with this id in flight: send nothing (the one
    /// call gets exactly one REPLY). Counted.
    Duplicate,
}

/// What to do with a call whose turn has come, from [`ServeTable::handle_dispatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dispatch {
    /// Run the handler; report its end with [`ServeTable::handle_done`].
    Run,
    /// Do not run it; send REPLY with this code now. `Timeout`: its ttl ran out while it
    /// waited (MISSION C6).
    Refuse(ReplyCode),
    /// Do not run it and send nothing: it was already answered (refused when its ttl ran
    /// out, cut by the drain), its caller's connection is gone, or the handle is unknown.
    Skip,
}

/// What a CANCEL did, from [`ServeTable::handle_cancel`] (WIRE.md §4.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cancelled {
    /// No call of that id is in hand on that connection (never seen, answered already, or
    /// cancelled before): nothing changes. Counted.
    Unknown,
    /// The call waited for its turn: it is forgotten and never runs, and nothing more is sent
    /// for it. The shell takes it out of its execution queue.
    Queued(ServeId),
    /// The handler runs: the shell signals it (and stops it where its method allows); its
    /// result will be dropped, since nobody waits for it.
    Running(ServeId),
}

/// A REPLY the table decided on its own (a timer or the drain), from
/// [`ServeTable::poll_transmit`]. The shell sends it on `conn` with `message` as payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServeReply<K> {
    /// The call answered; the table has forgotten it.
    pub id: ServeId,
    /// The connection the REQUEST came from.
    pub conn: K,
    /// The REQUEST's `call_id`.
    pub call_id: NonZeroU64,
    /// `Timeout` (ttl ran out while queued: did not run) or `Unavailable` (the service is
    /// stopping and the call was in hand: may have run).
    pub code: ReplyCode,
    /// A human-readable reason, for the REPLY payload.
    pub message: &'static str,
}

/// How a drain ended, from [`ServeTable::poll_drained`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Calls answered by their handlers during the drain.
    pub answered: u64,
    /// New REQUESTs refused with `Unavailable` during the drain.
    pub refused: u64,
    /// Streams ended with `Unavailable` when the drain began.
    pub streams_ended: u64,
    /// Calls still in hand when the bound passed, answered `Unavailable` by the table.
    pub cut_at_bound: u64,
    /// Handlers whose caller's connection was gone, still running when the bound passed
    /// (nothing to answer; the shell abandons them).
    pub abandoned: u64,
    /// Whether the bound passed (`false`: every accepted call was answered in time).
    pub bound_reached: bool,
}

/// Diagnostic counters of a [`ServeTable`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// REQUESTs accepted.
    pub accepted: u64,
    /// REQUESTs refused with `Unavailable` because the service was stopping.
    pub refused_stopping: u64,
    /// Calls refused with `Timeout` (at dispatch or by their timer) because their ttl ran out
    /// before dispatch.
    pub refused_timeout: u64,
    /// Duplicate REQUESTs (same connection, same id, still in flight) ignored.
    pub duplicates: u64,
    /// Calls whose caller's connection was lost before they were answered.
    pub orphaned: u64,
    /// Handler results with nowhere to go (orphaned, already answered, or unknown handle).
    pub dropped_results: u64,
    /// Handler results with code `Timeout` sent as `UnknownOutcome` instead.
    pub handler_timeouts_rewritten: u64,
    /// Dispatches of an unknown, already answered or already running call.
    pub skipped_dispatches: u64,
    /// Items refused because the call is no longer being answered.
    pub refused_items: u64,
    /// Queued calls forgotten because their caller cancelled them (they never ran).
    pub cancelled_queued: u64,
    /// Running calls whose caller cancelled them (their handlers were signalled).
    pub cancelled_running: u64,
    /// CANCELs for a call not in hand, ignored.
    pub late_cancels: u64,
    /// Running calls whose ttl passed while their handler ran (their handlers were
    /// signalled).
    pub overdue: u64,
}

#[derive(Debug, Clone, Copy)]
enum EntryState {
    /// Accepted, waiting for its turn. The ttl deadline is armed here.
    Queued { deadline: Option<Instant> },
    /// The handler runs. `overdue` is when the call's ttl passes (`None`: no ttl, or passed
    /// and reported already).
    Running {
        items: u64,
        overdue: Option<Instant>,
    },
}

/// The items a stream may send before its caller grants more, where the connection
/// negotiated capability `credit` (WIRE.md §4.15): the caller's buffer holds exactly this many.
pub const STREAM_WINDOW: u64 = 1024;

/// How many items a caller grants at a time, once its application took that many
/// (WIRE.md §4.15): a quarter of the window, so a steady stream never waits for a grant.
pub const CREDIT_STEP: u64 = STREAM_WINDOW / 4;

#[derive(Debug, Clone)]
struct Entry<K> {
    conn: K,
    call_id: NonZeroU64,
    shape: CallShape,
    state: EntryState,
    /// Items the stream may still send before its caller grants more; `None`: no window
    /// (the connection did not negotiate `credit`).
    window: Option<u64>,
    /// The caller's connection is gone: nothing will be sent for this call.
    orphaned: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServePhase {
    Serving,
    /// Refusing new calls, waiting for the accepted ones, until `deadline` at the latest.
    Draining {
        deadline: Option<Instant>,
    },
    /// Every accepted call was answered (or cut): the node may leave.
    Drained,
}

/// The calls a node serves, on the callee side (MISSION C4, C6).
///
/// `K` is the shell's key of one physical connection. Calls are identified by
/// `(connection, call_id)` on the wire and by a table-issued [`ServeId`] in the API.
///
/// # Life of a call
///
/// 1. [`Self::handle_request`] when a REQUEST arrives at `now`: a duplicate of a call in flight
///    is ignored; a stopping service refuses with `Unavailable` (no ACCEPT, did not run);
///    otherwise the call is accepted and the shell sends ACCEPT **before** it dispatches
///    (WIRE.md §5.3). The ttl is measured from `now`, the arrival, on this node's clock.
/// 2. [`Self::handle_dispatch`] when the shell is about to run the handler (after any queue
///    wait): `Run`, or `Refuse(Timeout)` if the ttl ran out meanwhile (MISSION C6). The table
///    also refuses a queued call by itself when its ttl runs out ([`Self::poll_transmit`]), so
///    a caller behind a long queue hears "did not run" while it still waits, and a later
///    dispatch is `Skip`.
/// 3. [`Self::handle_item`] before each ITEM (it returns the item's number), and
///    [`Self::handle_done`] when the handler ends (it returns the REPLY code to send).
///
/// # Graceful stop (MISSION C4)
///
/// [`Self::begin_drain`] refuses every new call with `Unavailable`, ends every stream at once
/// with `Unavailable` (a stopping service cannot finish a stream; the subscriber hears it the
/// moment the drain begins), and waits for every other accepted call to be answered by its
/// handler, queued ones included. The wait is bounded: when the bound passes, every call
/// still in hand is answered `Unavailable` by the table (the caller records "may have run",
/// since the call was accepted) and the drain ends, so a wedged handler cannot hold the stop.
/// [`Self::poll_drained`] then yields a [`DrainReport`] once; new calls stay refused.
///
/// # Timers
///
/// Three kinds, all behind [`Self::poll_timeout`]: the ttl deadline of each queued call
/// (`arrival + ttl`: a call that cannot start in time is refused), the same instant for a
/// call whose handler runs (the ttl bounds when a method may start, not how long it runs, so
/// passing it only reports the call in [`Self::poll_overdue`], for the shell to signal its
/// handler that the caller stops waiting), and the drain bound (`begin_drain` + `bound`).
///
/// # What a REPLY `Timeout` means
///
/// On the wire, `Timeout` means "refused: the ttl ran out before dispatch", which callers
/// read as "did not run". A handler cannot say that about a call it ran, so
/// [`Self::handle_done`] sends a handler's own `Timeout` (a downstream timeout, say) as
/// `UnknownOutcome`, which is what it means for the caller: a timeout is the same
/// uncertainty with a more specific cause (MISSION C3).
///
/// # Polling order
///
/// After any input, drain [`Self::poll_transmit`] (send each REPLY) and
/// [`Self::poll_overdue`] (signal each handler), then check
/// [`Self::poll_drained`], then sleep until [`Self::poll_timeout`] and call
/// [`Self::handle_timeout`]. Every input first applies the timers due at or before its `now`.
#[derive(Debug, Clone)]
pub struct ServeTable<K> {
    entries: BTreeMap<ServeId, Entry<K>>,
    /// Calls in flight with a live caller connection, for duplicate detection.
    index: HashMap<(K, NonZeroU64), ServeId>,
    per_conn: HashMap<K, usize>,
    deadlines: BTreeSet<(Instant, ServeId)>,
    /// When each running call's ttl passes, in order.
    overdue_at: BTreeSet<(Instant, ServeId)>,
    overdue: VecDeque<ServeId>,
    transmits: VecDeque<ServeReply<K>>,
    phase: ServePhase,
    report: DrainReport,
    report_ready: bool,
    next_id: u64,
    stats: ServeStats,
}

impl<K: Copy + Eq + Hash> Default for ServeTable<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Copy + Eq + Hash> ServeTable<K> {
    /// An empty table, serving.
    pub fn new() -> Self {
        Self {
            entries: BTreeMap::new(),
            index: HashMap::new(),
            per_conn: HashMap::new(),
            deadlines: BTreeSet::new(),
            overdue_at: BTreeSet::new(),
            overdue: VecDeque::new(),
            transmits: VecDeque::new(),
            phase: ServePhase::Serving,
            report: DrainReport::default(),
            report_ready: false,
            next_id: 0,
            stats: ServeStats::default(),
        }
    }

    /// A REQUEST `call_id` with `ttl_ms` (`None`: no deadline) for a method of `shape` arrived
    /// on connection `conn` at `now`.
    pub fn handle_request(
        &mut self,
        conn: K,
        call_id: NonZeroU64,
        ttl_ms: Option<NonZeroU64>,
        shape: CallShape,
        now: Instant,
    ) -> Admission {
        self.handle_timeout(now);
        if self.index.contains_key(&(conn, call_id)) {
            self.stats.duplicates += 1;
            return Admission::Duplicate;
        }
        if self.phase != ServePhase::Serving {
            self.stats.refused_stopping += 1;
            self.report.refused += 1;
            return Admission::Refuse(ReplyCode::Unavailable);
        }
        let id = ServeId(self.next_id);
        self.next_id += 1;
        // An overflowing deadline is so far away that it is no deadline.
        let deadline = ttl_ms.and_then(|ms| now.checked_add(Duration::from_millis(ms.get())));
        if let Some(at) = deadline {
            self.deadlines.insert((at, id));
        }
        self.entries.insert(
            id,
            Entry {
                conn,
                call_id,
                shape,
                state: EntryState::Queued { deadline },
                orphaned: false,
                window: None,
            },
        );
        self.index.insert((conn, call_id), id);
        *self.per_conn.entry(conn).or_default() += 1;
        self.stats.accepted += 1;
        Admission::Accept(id)
    }

    /// The shell is about to run call `id` at `now` (its turn came, after any queue wait).
    ///
    /// Only this call's own ttl is judged here (an expired one is `Refuse(Timeout)` and
    /// forgotten); other expired calls are refused by [`Self::handle_timeout`]. A passed drain
    /// bound applies first.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_dispatch(&mut self, id: ServeId, now: Instant) -> Dispatch {
        self.apply_drain_bound(now);
        let Some(EntryState::Queued { deadline }) = self.entries.get(&id).map(|e| e.state) else {
            self.stats.skipped_dispatches += 1;
            return Dispatch::Skip;
        };
        if deadline.is_some_and(|at| at <= now) {
            self.stats.refused_timeout += 1;
            self.remove(id);
            return Dispatch::Refuse(ReplyCode::Timeout);
        }
        if let Some(at) = deadline {
            self.deadlines.remove(&(at, id));
            self.overdue_at.insert((at, id));
        }
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.state = EntryState::Running {
                items: 0,
                overdue: deadline,
            };
        }
        Dispatch::Run
    }

    /// Stream call `id` arrived on a connection that negotiated `credit` (WIRE.md §4.15): it
    /// sends at most [`STREAM_WINDOW`] items beyond those its caller grants.
    pub fn limit_window(&mut self, id: ServeId) {
        if let Some(e) = self.entries.get_mut(&id) {
            if e.shape == CallShape::Stream {
                e.window = Some(STREAM_WINDOW);
            }
        }
    }

    /// Whether stream call `id` may send an item now: it is answered and running, and its
    /// window (if it has one) is open. `false` with a closed window means the item waits for
    /// the caller's CREDIT ([`Self::handle_credit`]); the handler waits with it.
    pub fn may_send_item(&self, id: ServeId) -> bool {
        self.entries.get(&id).is_some_and(|e| {
            !e.orphaned && matches!(e.state, EntryState::Running { .. }) && e.window != Some(0)
        })
    }

    /// Whether call `id` is in hand and answered (not orphaned): items for it may still go
    /// once its window opens.
    pub fn is_answered(&self, id: ServeId) -> bool {
        self.entries.get(&id).is_some_and(|e| !e.orphaned)
    }

    /// A CREDIT of `items` for `call_id` arrived on connection `conn` (WIRE.md §4.15): the
    /// stream's window grows by that much. Returns the call, if it is in hand, so the shell
    /// sends the items that waited; a CREDIT for an unknown call changes nothing.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_credit(&mut self, conn: K, call_id: NonZeroU64, items: u64) -> Option<ServeId> {
        let &id = self.index.get(&(conn, call_id))?;
        let e = self.entries.get_mut(&id)?;
        if let Some(w) = e.window.as_mut() {
            *w = w.saturating_add(items);
        }
        Some(id)
    }

    /// The handler of call `id` produced an item at `now`: the ITEM's `seq` to send, or `None`
    /// when the call is no longer answered (ended by the drain, its caller gone, or not
    /// running): the handler should stop.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_item(&mut self, id: ServeId, now: Instant) -> Option<u64> {
        self.handle_timeout(now);
        let entry = self.entries.get_mut(&id).filter(|e| !e.orphaned);
        let Some(EntryState::Running { items, .. }) = entry.map(|e| &mut e.state) else {
            self.stats.refused_items += 1;
            return None;
        };
        let seq = *items;
        *items = items.saturating_add(1);
        if let Some(e) = self.entries.get_mut(&id) {
            if let Some(w) = e.window.as_mut() {
                *w = w.saturating_sub(1);
            }
        }
        Some(seq)
    }

    /// The handler of call `id` ended at `now` with `code`: the REPLY code to send, or `None`
    /// when there is nowhere to send it (caller's connection gone, already answered, unknown
    /// handle). A handler's `Timeout` is sent as `UnknownOutcome` (see the type docs).
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_done(&mut self, id: ServeId, code: ReplyCode, now: Instant) -> Option<ReplyCode> {
        self.handle_timeout(now);
        let Some(entry) = self.remove(id) else {
            self.stats.dropped_results += 1;
            return None;
        };
        if entry.orphaned {
            self.stats.dropped_results += 1;
            self.check_drained();
            return None;
        }
        if matches!(self.phase, ServePhase::Draining { .. }) {
            self.report.answered += 1;
        }
        self.check_drained();
        if code == ReplyCode::Timeout {
            self.stats.handler_timeouts_rewritten += 1;
            return Some(ReplyCode::UnknownOutcome);
        }
        Some(code)
    }

    /// Connection `conn` is gone at `now`. Its queued calls are forgotten (they will never
    /// run: their callers already failed them as "may have run"); its running calls are
    /// returned so the shell can cancel their handlers, and their results will be dropped.
    /// A drain still waits for those handlers, up to its bound.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_connection_lost(&mut self, conn: K, now: Instant) -> Vec<ServeId> {
        self.handle_timeout(now);
        let on_conn: Vec<ServeId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.conn == conn && !e.orphaned)
            .map(|(&id, _)| id)
            .collect();
        let mut running = Vec::new();
        for id in on_conn {
            self.stats.orphaned += 1;
            if self.is_running(id) {
                self.abandon(id);
                running.push(id);
            } else {
                self.remove(id);
            }
        }
        self.per_conn.remove(&conn);
        self.check_drained();
        running
    }

    /// A CANCEL for `call_id` arrived on connection `conn` at `now`: the caller no longer
    /// waits (WIRE.md §4.13). A queued call is forgotten (it never runs); a running one is
    /// orphaned (its handler is to be signalled, its result dropped); an unknown one is
    /// ignored. Either way nothing more is sent for the call.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_cancel(&mut self, conn: K, call_id: NonZeroU64, now: Instant) -> Cancelled {
        self.handle_timeout(now);
        let Some(&id) = self.index.get(&(conn, call_id)) else {
            self.stats.late_cancels += 1;
            return Cancelled::Unknown;
        };
        if !self.is_running(id) {
            self.stats.cancelled_queued += 1;
            self.remove(id);
            self.check_drained();
            return Cancelled::Queued(id);
        }
        self.stats.cancelled_running += 1;
        self.abandon(id);
        Cancelled::Running(id)
    }

    /// The shell stopped the handler of running call `id` (its caller is gone or its ttl
    /// passed): nothing is sent for it any more, and its result, when the stopped task
    /// reports, is dropped. Unknown or queued calls are left as they are.
    pub fn handle_abandon(&mut self, id: ServeId) {
        if self.is_running(id) {
            self.abandon(id);
        }
    }

    /// The next running call whose ttl passed while its handler ran (WIRE.md §5.3): its
    /// caller has stopped waiting or is about to, so the shell signals the handler. Each call
    /// is reported once; the call stays in hand (a handler that still answers in time is
    /// heard).
    #[must_use]
    pub fn poll_overdue(&mut self) -> Option<ServeId> {
        self.overdue.pop_front()
    }

    /// Begins the graceful stop at `now`, waiting at most `bound` for accepted calls (see
    /// the type docs). A second call changes nothing.
    pub fn begin_drain(&mut self, bound: Duration, now: Instant) {
        self.handle_timeout(now);
        if self.phase != ServePhase::Serving {
            return;
        }
        let deadline = now.checked_add(bound);
        self.phase = ServePhase::Draining { deadline };
        let streams: Vec<ServeId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.shape == CallShape::Stream && !e.orphaned)
            .map(|(&id, _)| id)
            .collect();
        for id in streams {
            self.report.streams_ended += 1;
            self.answer(
                id,
                ReplyCode::Unavailable,
                "the service is stopping; the stream ended",
            );
        }
        // A bound of zero (or one already passed) cuts everything now.
        self.apply_drain_bound(now);
        self.check_drained();
    }

    /// Applies every timer due at or before `now`: queued calls whose ttl ran out are refused
    /// with `Timeout` (first, so a call that is both expired and cut hears the more precise
    /// "did not run"), then a passed drain bound cuts what is left.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.overdue_at.first() {
            if at > now {
                break;
            }
            self.overdue_at.remove(&(at, id));
            if let Some(Entry {
                state: EntryState::Running { overdue, .. },
                orphaned: false,
                ..
            }) = self.entries.get_mut(&id)
            {
                *overdue = None;
                self.stats.overdue += 1;
                self.overdue.push_back(id);
            }
        }
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.remove(&(at, id));
            self.stats.refused_timeout += 1;
            self.answer(
                id,
                ReplyCode::Timeout,
                "the call's ttl ran out before dispatch; it did not run",
            );
        }
        self.apply_drain_bound(now);
    }

    /// The next REPLY the table decided on its own, to send now.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<ServeReply<K>> {
        self.transmits.pop_front()
    }

    /// Once, when the drain is over: every accepted call was answered, or the bound passed.
    #[must_use]
    pub fn poll_drained(&mut self) -> Option<DrainReport> {
        if self.report_ready {
            self.report_ready = false;
            return Some(self.report);
        }
        None
    }

    /// The earliest timer: a queued or running call's ttl, or the drain bound.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let queued = self.deadlines.first().map(|&(at, _)| at);
        let running = self.overdue_at.first().map(|&(at, _)| at);
        let ttl = match (queued, running) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let bound = match self.phase {
            ServePhase::Draining { deadline } => deadline,
            ServePhase::Serving | ServePhase::Drained => None,
        };
        match (ttl, bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Calls accepted and not yet answered, including handlers still running for a lost
    /// connection.
    pub fn in_flight(&self) -> usize {
        self.entries.len()
    }

    /// Calls accepted on connection `conn` and not yet answered (a lost connection has none).
    pub fn in_flight_on(&self, conn: K) -> usize {
        self.per_conn.get(&conn).copied().unwrap_or(0)
    }

    /// Whether [`Self::begin_drain`] was called (new calls are refused).
    pub fn is_stopping(&self) -> bool {
        self.phase != ServePhase::Serving
    }

    /// Whether the drain is over.
    pub fn is_drained(&self) -> bool {
        self.phase == ServePhase::Drained
    }

    /// The connection and wire `call_id` of a call in hand (not yet answered or forgotten).
    pub fn call_of(&self, id: ServeId) -> Option<(K, NonZeroU64)> {
        self.entries.get(&id).map(|e| (e.conn, e.call_id))
    }

    /// Diagnostic counters.
    pub fn stats(&self) -> &ServeStats {
        &self.stats
    }

    /// When the drain bound passed: answers every call still in hand `Unavailable` and ends
    /// the drain.
    fn apply_drain_bound(&mut self, now: Instant) {
        let ServePhase::Draining {
            deadline: Some(deadline),
        } = self.phase
        else {
            return;
        };
        if deadline > now {
            return;
        }
        let left: Vec<ServeId> = self.entries.keys().copied().collect();
        if !left.is_empty() {
            self.report.bound_reached = true;
        }
        for id in left {
            if self.entries.get(&id).is_some_and(|e| e.orphaned) {
                self.report.abandoned += 1;
                self.remove(id);
            } else {
                self.report.cut_at_bound += 1;
                self.answer(
                    id,
                    ReplyCode::Unavailable,
                    "the service stopped before the call was answered",
                );
            }
        }
        self.check_drained();
    }

    /// Forgets call `id` and queues a REPLY for it (unless its caller is gone).
    fn answer(&mut self, id: ServeId, code: ReplyCode, message: &'static str) {
        if let Some(entry) = self.remove(id) {
            if !entry.orphaned {
                self.transmits.push_back(ServeReply {
                    id,
                    conn: entry.conn,
                    call_id: entry.call_id,
                    code,
                    message,
                });
            }
        }
    }

    /// Whether call `id` is in hand and its handler runs.
    fn is_running(&self, id: ServeId) -> bool {
        matches!(
            self.entries.get(&id).map(|e| e.state),
            Some(EntryState::Running { .. })
        )
    }

    /// Orphans running call `id`: it leaves the duplicate index and its connection's count
    /// (nothing is sent for it any more), and stays in hand until its handler reports.
    fn abandon(&mut self, id: ServeId) {
        let Some(entry) = self.entries.get_mut(&id).filter(|e| !e.orphaned) else {
            return;
        };
        entry.orphaned = true;
        let (conn, call_id) = (entry.conn, entry.call_id);
        if let EntryState::Running {
            overdue: Some(at), ..
        } = entry.state
        {
            self.overdue_at.remove(&(at, id));
        }
        self.index.remove(&(conn, call_id));
        if let Some(n) = self.per_conn.get_mut(&conn) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_conn.remove(&conn);
            }
        }
    }

    fn remove(&mut self, id: ServeId) -> Option<Entry<K>> {
        let entry = self.entries.remove(&id)?;
        match entry.state {
            EntryState::Queued { deadline: Some(at) } => {
                self.deadlines.remove(&(at, id));
            }
            EntryState::Running {
                overdue: Some(at), ..
            } => {
                self.overdue_at.remove(&(at, id));
            }
            _ => {}
        }
        if !entry.orphaned {
            self.index.remove(&(entry.conn, entry.call_id));
            if let Some(n) = self.per_conn.get_mut(&entry.conn) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.per_conn.remove(&entry.conn);
                }
            }
        }
        Some(entry)
    }

    fn check_drained(&mut self) {
        if matches!(self.phase, ServePhase::Draining { .. }) && self.entries.is_empty() {
            self.phase = ServePhase::Drained;
            self.report_ready = true;
        }
    }
}
