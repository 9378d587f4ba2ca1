//! [`CallTable`]: reply correlation on the caller side (MISSION C1-C3, C5, C6).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::error::{CallError, Phase};
use crate::proto::wire::ReplyCode;

/// Typed handle of one call of a [`CallTable`]; its value is the REQUEST's `call_id`.
///
/// Allocated by the table from a per-table counter starting at 1 and never reused, so a
/// record carrying the id of a call that completed long ago is recognised as late, never
/// confused with a newer call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub NonZeroU64);

impl CallId {
    /// The wire value (REQUEST, ACCEPT, ITEM, REPLY `call_id`).
    pub fn get(self) -> NonZeroU64 {
        self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call{}", self.0)
    }
}

/// Why a call found no connection to be sent on; see [`CallTable::start_unrouted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unrouted {
    /// Nothing serves the channel or method ([`CallError::NoRegistration`]).
    NoRegistration,
    /// Something serves it, but no connection to it is ready ([`CallError::NoReadyPeer`]).
    NoReadyPeer,
}

/// Where a pending call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallState {
    /// Started; the shell has not yet reported that the frame was handed to the transport.
    /// The frame has not left: a call that fails in this state "certainly did not run".
    Issued,
    /// The frame was handed to the transport; no ACCEPT yet. The deadline, if any, runs.
    Sent,
    /// The callee's ACCEPT arrived on the connection the request went out on: the call is a
    /// lease on that connection (MISSION C2).
    Accepted,
}

/// A successful call: the REPLY `Ok` payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The result bytes.
    pub payload: Bytes,
    /// How many stream items the call delivered before its REPLY (0 for a unary call).
    pub items: u64,
}

/// One stream item, in order, from [`CallTable::poll_item`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamItem {
    /// The call the item belongs to.
    pub id: CallId,
    /// Its sequence number: 0 for the first item of the call, one more for each next one.
    pub seq: u64,
    /// The item bytes.
    pub payload: Bytes,
}

/// How a [`CallTable`] judged one per-call input. Only [`Disposition::Applied`] changed
/// anything; every other outcome only increments a counter in [`CallStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// The input moved the call forward or completed it.
    Applied,
    /// The input repeats or contradicts what the call already knows (a second ACCEPT, a
    /// second send report, a send failure after a send).
    Duplicate,
    /// The record arrived on another physical connection than the one the request went out
    /// on; it is not about this call's lease (MISSION C2, L6).
    OtherConnection,
    /// The call already completed.
    Late,
    /// No call with this id was ever started by this table.
    Unknown,
}

/// Diagnostic counters of a [`CallTable`]. None of them influences a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Calls started (including those completed at once).
    pub started: u64,
    /// Calls completed, successfully or not. Equals `started` minus [`CallTable::pending`].
    pub completed: u64,
    /// ACCEPTs for a call that already completed.
    pub late_accepts: u64,
    /// REPLYs for a call that already completed.
    pub late_replies: u64,
    /// ITEMs for a call that already completed.
    pub late_items: u64,
    /// Send reports (sent / send failed) for a call that already completed.
    pub late_send_reports: u64,
    /// Cancellations of a call that already completed.
    pub late_cancels: u64,
    /// Inputs naming an id this table never issued.
    pub unknown_ids: u64,
    /// ACCEPT, ITEM or REPLY records that arrived on another connection than their call's.
    pub other_connection: u64,
    /// Repeated ACCEPTs.
    pub duplicate_accepts: u64,
    /// Repeated or contradicting send reports.
    pub duplicate_send_reports: u64,
    /// ITEMs that arrived before the call's ACCEPT (accepted as evidence of dispatch).
    pub items_before_accept: u64,
    /// Streams broken by an out-of-order item.
    pub items_out_of_order: u64,
}

/// How much shorter than the caller's own wait the ttl on the wire is, at most.
///
/// The callee measures the ttl from the request's arrival, so without a margin its deadline
/// always falls one network latency *after* the caller's, and its `Timeout` refusal ("did not
/// run") would always arrive after the caller had already given up with "may have run". The
/// REQUEST therefore carries `ttl - min(REFUSAL_MARGIN, ttl / 2)`: a callee refuses to start
/// the call early enough for the refusal to travel back within the caller's wait, and, as
/// long as a round trip is shorter than the margin, never starts a call whose caller has
/// already given up. See [`ttl_on_wire`].
pub const REFUSAL_MARGIN: Duration = Duration::from_millis(250);

/// The REQUEST `ttl_ms` for a call whose caller waits `ttl` (MISSION C6).
///
/// `None` and a zero duration mean "no deadline": `None` on the wire (encoded 0), and
/// [`CallTable`] arms no timer. Otherwise `ttl` minus [`REFUSAL_MARGIN`] (at most half of
/// `ttl`), in whole milliseconds rounded down, and never less than 1 ms (0 would mean "no
/// deadline"). A duration, never a timestamp.
pub fn ttl_on_wire(ttl: Option<Duration>) -> Option<NonZeroU64> {
    let ttl = ttl.filter(|d| !d.is_zero())?;
    let told = ttl.saturating_sub(REFUSAL_MARGIN.min(ttl / 2));
    let ms = u64::try_from(told.as_millis()).unwrap_or(u64::MAX);
    Some(NonZeroU64::new(ms).unwrap_or(NonZeroU64::MIN))
}

#[derive(Debug, Clone)]
struct Call<K> {
    target: K,
    state: CallState,
    /// The caller's wait; `None` = no deadline.
    ttl: Option<Duration>,
    /// Armed when the frame is known to have left; `None` = no timer.
    deadline: Option<Instant>,
    next_seq: u64,
}

/// The pending calls of one node, on the caller side (MISSION C1-C3, C5, C6).
///
/// `K` is the shell's key of one physical connection (for example [`crate::proto::ConnId`]):
/// the connection a request goes out on and the only one whose ACCEPT, ITEM and REPLY count
/// for it.
///
/// # Life of a call
///
/// ```text
///   start ──> Issued ──handle_sent──> Sent ──handle_accept──> Accepted ──handle_reply──> done
///               │                      │                         │
///               └─ send failed, lost,  └─ lost: OutcomeUnknown,  └─ lost: OutcomeUnknown,
///                  cancel, shutdown:      deadline, cancel,         deadline, cancel,
///                  "did not run"          shutdown: "may have run"  shutdown: "may have run"
/// ```
///
/// * [`Self::start`] allocates the id. The shell encodes the REQUEST with it (and
///   [`ttl_on_wire`]), hands the frame to the transport **only if the link can send it now**
///   (MISSION C3: a frame is never queued), and reports [`Self::handle_sent`] or
///   [`Self::handle_send_failed`]. A shell that holds frames for a moment (a BATCH filling
///   up, MISSION K5) must check [`Self::is_pending`] before handing one over: a call that
///   completed while `Issued` (cancelled, shut down, its connection lost) was reported as
///   never sent, and its frame must not leave.
/// * The deadline is `ttl` after the hand-over. `None` or zero arms no timer at all, never
///   "the next tick" (MISSION C6): such a call waits for its REPLY, its cancellation, the
///   shutdown or the loss of its connection, however long that takes (MISSION C2).
/// * Only records that arrive on the connection the request went out on count. The ACCEPT
///   pins the lease; from then on the loss of that connection fails the call at once.
/// * Every call completes **exactly once**, whatever order reply, deadline, cancellation,
///   connection loss, shutdown and route failure arrive in; anything about a completed or
///   unknown call is dropped and counted in [`CallStats`] (MISSION C1). The table never
///   resubmits anything.
///
/// # Timers
///
/// One kind only: a call's deadline, `ttl` after its frame left, kept in one ordered set of
/// `(instant, call)` so [`Self::poll_timeout`] is its first element. Nothing else in the
/// caller side ever wakes the shell: in particular there is no "ACCEPT never came" timer; the
/// loss of the connection ends such a call (MISSION C2).
///
/// # Streams
///
/// ITEMs must arrive numbered 0, 1, 2, ... on the call's connection. A gap or a repeat breaks
/// the stream: the call fails at once with [`CallError::ItemOutOfOrder`] (the callee was
/// running it: "may have run"), and later records for it are late. An ITEM before the ACCEPT
/// counts as the ACCEPT (the callee only produces items from a dispatched call).
///
/// # Polling order
///
/// Every input first applies the deadlines due at or before its `now` (deadlines are
/// inclusive), so a REPLY and a deadline at the same instant give the same verdict whatever
/// order the shell sees them in: the deadline wins. After any input, drain
/// [`Self::poll_item`] **before** [`Self::poll_completion`] (a stream's items are queued
/// before its completion, so this order delivers them first), then sleep until
/// [`Self::poll_timeout`] and call [`Self::handle_timeout`].
#[derive(Debug, Clone)]
pub struct CallTable<K> {
    calls: BTreeMap<CallId, Call<K>>,
    by_conn: HashMap<K, BTreeSet<CallId>>,
    deadlines: BTreeSet<(Instant, CallId)>,
    completions: VecDeque<(CallId, Result<Completion, CallError>)>,
    items: VecDeque<StreamItem>,
    /// Calls whose caller stopped waiting after their REQUEST left: a CANCEL to send.
    cancels: VecDeque<(K, CallId)>,
    next_id: NonZeroU64,
    shut_down: bool,
    stats: CallStats,
}

impl<K: Copy + Eq + Hash> Default for CallTable<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Copy + Eq + Hash> CallTable<K> {
    /// An empty table; the first call gets id 1.
    pub fn new() -> Self {
        Self {
            calls: BTreeMap::new(),
            by_conn: HashMap::new(),
            deadlines: BTreeSet::new(),
            completions: VecDeque::new(),
            items: VecDeque::new(),
            cancels: VecDeque::new(),
            next_id: NonZeroU64::MIN,
            shut_down: false,
            stats: CallStats::default(),
        }
    }

    /// Starts a call to be sent on connection `target`, whose caller waits `ttl` (`None` or
    /// zero: no deadline). The call is [`CallState::Issued`]; the shell reports what the
    /// transport did with its frame next.
    ///
    /// After [`Self::handle_shutdown`] the call completes at once with
    /// [`CallError::Shutdown`] `{ sent: false }` and must not be sent.
    pub fn start(&mut self, target: K, ttl: Option<Duration>, now: Instant) -> CallId {
        self.handle_timeout(now);
        let id = self.allocate();
        if self.shut_down {
            self.finish(id, Err(CallError::Shutdown { sent: false }));
            return id;
        }
        self.calls.insert(
            id,
            Call {
                target,
                state: CallState::Issued,
                ttl: ttl.filter(|d| !d.is_zero()),
                deadline: None,
                next_seq: 0,
            },
        );
        self.by_conn.entry(target).or_default().insert(id);
        id
    }

    /// Records a call that found nowhere to go: it completes at once with
    /// [`CallError::NoRegistration`] or [`CallError::NoReadyPeer`] ("never sent"), or with
    /// [`CallError::Shutdown`] `{ sent: false }` after [`Self::handle_shutdown`]. Going
    /// through the table gives the call an id and exactly one completion like any other.
    pub fn start_unrouted(&mut self, reason: Unrouted, now: Instant) -> CallId {
        self.handle_timeout(now);
        let id = self.allocate();
        let err = if self.shut_down {
            CallError::Shutdown { sent: false }
        } else {
            match reason {
                Unrouted::NoRegistration => CallError::NoRegistration,
                Unrouted::NoReadyPeer => CallError::NoReadyPeer,
            }
        };
        self.finish(id, Err(err));
        id
    }

    /// The transport took the call's frame at `now`: the call is sent and its deadline starts.
    pub fn handle_sent(&mut self, id: CallId, now: Instant) -> Disposition {
        self.handle_timeout(now);
        let Some(call) = self.calls.get(&id) else {
            return self.missing(id, |s| &mut s.late_send_reports);
        };
        if call.state != CallState::Issued {
            self.stats.duplicate_send_reports += 1;
            return Disposition::Duplicate;
        }
        self.mark_sent(id, CallState::Sent, now);
        Disposition::Applied
    }

    /// The transport could not take the call's frame now (pipe full, peer unreachable): the
    /// call completes with [`CallError::TransportRefused`] ("never sent"). A failure reported
    /// after [`Self::handle_sent`] contradicts it and is ignored: the frame may have left.
    pub fn handle_send_failed(&mut self, id: CallId, now: Instant) -> Disposition {
        self.handle_timeout(now);
        let Some(call) = self.calls.get(&id) else {
            return self.missing(id, |s| &mut s.late_send_reports);
        };
        if call.state != CallState::Issued {
            self.stats.duplicate_send_reports += 1;
            return Disposition::Duplicate;
        }
        self.complete(id, Err(CallError::TransportRefused));
        Disposition::Applied
    }

    /// An ACCEPT for call `id` arrived on connection `conn` at `now`. Only one arriving on the
    /// connection the request went out on counts: the lease starts (MISSION C2).
    pub fn handle_accept(&mut self, id: CallId, conn: K, now: Instant) -> Disposition {
        self.handle_timeout(now);
        let Some(call) = self.calls.get(&id) else {
            return self.missing(id, |s| &mut s.late_accepts);
        };
        if call.target != conn {
            self.stats.other_connection += 1;
            return Disposition::OtherConnection;
        }
        if call.state == CallState::Accepted {
            self.stats.duplicate_accepts += 1;
            return Disposition::Duplicate;
        }
        self.mark_sent(id, CallState::Accepted, now);
        Disposition::Applied
    }

    /// An ITEM numbered `seq` for call `id` arrived on connection `conn` at `now`. The next
    /// number in order is queued for [`Self::poll_item`]; any other number fails the call
    /// with [`CallError::ItemOutOfOrder`].
    pub fn handle_item(
        &mut self,
        id: CallId,
        conn: K,
        seq: u64,
        payload: Bytes,
        now: Instant,
    ) -> Disposition {
        self.handle_timeout(now);
        let Some(call) = self.calls.get(&id) else {
            return self.missing(id, |s| &mut s.late_items);
        };
        if call.target != conn {
            self.stats.other_connection += 1;
            return Disposition::OtherConnection;
        }
        if call.state != CallState::Accepted {
            self.stats.items_before_accept += 1;
            self.mark_sent(id, CallState::Accepted, now);
        }
        let Some(call) = self.calls.get_mut(&id) else {
            return Disposition::Unknown;
        };
        let expected = call.next_seq;
        if seq != expected {
            self.stats.items_out_of_order += 1;
            self.complete(id, Err(CallError::ItemOutOfOrder { expected, got: seq }));
            return Disposition::Applied;
        }
        call.next_seq = expected.saturating_add(1);
        self.items.push_back(StreamItem { id, seq, payload });
        Disposition::Applied
    }

    /// The REPLY for call `id` arrived on connection `conn` at `now`: the call completes,
    /// with the payload on `Ok` and [`CallError::from_reply`] otherwise.
    pub fn handle_reply(
        &mut self,
        id: CallId,
        conn: K,
        code: ReplyCode,
        payload: Bytes,
        now: Instant,
    ) -> Disposition {
        self.handle_timeout(now);
        let Some(call) = self.calls.get(&id) else {
            return self.missing(id, |s| &mut s.late_replies);
        };
        if call.target != conn {
            self.stats.other_connection += 1;
            return Disposition::OtherConnection;
        }
        let accepted = call.state == CallState::Accepted;
        let items = call.next_seq;
        let result = match CallError::from_reply(code, &payload, accepted) {
            None => Ok(Completion { payload, items }),
            Some(err) => Err(err),
        };
        self.complete(id, result);
        Disposition::Applied
    }

    /// Connection `conn` left ready at `now` (any reason: orderly close, transport error,
    /// deadline exceeded, replacement, MISSION F1). Every pending call on it completes at
    /// once (MISSION C2): [`CallState::Issued`] with [`CallError::TransportRefused`] (the
    /// frame never left: its route was not connected), [`CallState::Sent`] and
    /// [`CallState::Accepted`] with [`CallError::OutcomeUnknown`] ("may have run"). Calls on
    /// other connections are untouched. Returns how many calls failed.
    pub fn handle_connection_lost(&mut self, conn: K, now: Instant) -> usize {
        self.handle_timeout(now);
        let Some(ids) = self.by_conn.remove(&conn) else {
            return 0;
        };
        for &id in &ids {
            let Some(call) = self.calls.get(&id) else {
                continue;
            };
            let err = match call.state {
                CallState::Issued => CallError::TransportRefused,
                CallState::Sent => CallError::OutcomeUnknown { phase: Phase::Sent },
                CallState::Accepted => CallError::OutcomeUnknown {
                    phase: Phase::Accepted,
                },
            };
            self.complete(id, Err(err));
        }
        ids.len()
    }

    /// The caller cancelled call `id` at `now`: it completes with [`CallError::Cancelled`]
    /// `{ sent }`. A call whose REQUEST left is also queued in [`Self::poll_cancel`], so the
    /// shell can tell the callee (a CANCEL, where the connection negotiated it); one that
    /// never left must not leave now.
    pub fn handle_cancel(&mut self, id: CallId, now: Instant) -> Disposition {
        self.handle_timeout(now);
        let Some(call) = self.calls.get(&id) else {
            return self.missing(id, |s| &mut s.late_cancels);
        };
        let sent = call.state != CallState::Issued;
        if sent {
            self.cancels.push_back((call.target, id));
        }
        self.complete(id, Err(CallError::Cancelled { sent }));
        Disposition::Applied
    }

    /// The caller cannot take stream call `id`'s next item at `now` (its buffer of `buffered`
    /// items is full): the call completes with [`CallError::StreamOverrun`] and, since its
    /// REQUEST left, is queued in [`Self::poll_cancel`] so the callee stops producing. Items
    /// already queued in [`Self::poll_item`] for it stay there (the shell drops them).
    pub fn handle_overrun(&mut self, id: CallId, buffered: usize, now: Instant) -> Disposition {
        self.handle_timeout(now);
        let Some(call) = self.calls.get(&id) else {
            return self.missing(id, |s| &mut s.late_items);
        };
        self.cancels.push_back((call.target, id));
        self.complete(id, Err(CallError::StreamOverrun { buffered }));
        Disposition::Applied
    }

    /// The next call whose caller stopped waiting after its REQUEST left (cancelled, or its
    /// deadline passed), with the connection its answers travel on: the shell tells the
    /// callee with a CANCEL if that connection negotiated it (WIRE.md §4.13), and otherwise
    /// nothing (the callee finishes the call and its answers are late).
    #[must_use]
    pub fn poll_cancel(&mut self) -> Option<(K, CallId)> {
        self.cancels.pop_front()
    }

    /// The local node shuts down at `now`: every pending call completes with
    /// [`CallError::Shutdown`], and every later call at once. No timer remains (MISSION F6).
    pub fn handle_shutdown(&mut self, now: Instant) {
        self.handle_timeout(now);
        self.shut_down = true;
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            let sent = self
                .calls
                .get(&id)
                .is_some_and(|c| c.state != CallState::Issued);
            self.complete(id, Err(CallError::Shutdown { sent }));
        }
    }

    /// Completes every call whose deadline is at or before `now` with [`CallError::Timeout`]
    /// `{ refused_by_server: false }`, in deadline order.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            // A deadline is armed only once the REQUEST left: the callee may still hold it.
            if let Some(call) = self.calls.get(&id) {
                self.cancels.push_back((call.target, id));
            }
            self.complete(
                id,
                Err(CallError::Timeout {
                    refused_by_server: false,
                }),
            );
        }
    }

    /// The next completed call, in completion order. Each started call appears exactly once.
    #[must_use]
    pub fn poll_completion(&mut self) -> Option<(CallId, Result<Completion, CallError>)> {
        self.completions.pop_front()
    }

    /// The next stream item, in arrival order (per call: 0, 1, 2, ...). Drain before
    /// [`Self::poll_completion`].
    #[must_use]
    pub fn poll_item(&mut self) -> Option<StreamItem> {
        self.items.pop_front()
    }

    /// The earliest armed deadline. `None` when no pending call has one: calls without a ttl
    /// never wake the shell.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// Pending calls of the node (MISSION C5 gauge).
    pub fn pending(&self) -> usize {
        self.calls.len()
    }

    /// Pending calls on connection `conn` (MISSION C5: a count that climbs on a healthy peer
    /// is a wedged callee).
    pub fn pending_on(&self, conn: K) -> usize {
        self.by_conn.get(&conn).map_or(0, BTreeSet::len)
    }

    /// Whether call `id` has not completed yet.
    pub fn is_pending(&self, id: CallId) -> bool {
        self.calls.contains_key(&id)
    }

    /// Where pending call `id` is; `None` once it completed.
    pub fn state(&self, id: CallId) -> Option<CallState> {
        self.calls.get(&id).map(|c| c.state)
    }

    /// The connection pending call `id` was sent (or is to be sent) on.
    pub fn target(&self, id: CallId) -> Option<K> {
        self.calls.get(&id).map(|c| c.target)
    }

    /// The deadline of pending call `id`, if one is armed.
    pub fn deadline(&self, id: CallId) -> Option<Instant> {
        self.calls.get(&id).and_then(|c| c.deadline)
    }

    /// Whether [`Self::handle_shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Diagnostic counters.
    pub fn stats(&self) -> &CallStats {
        &self.stats
    }

    fn allocate(&mut self) -> CallId {
        let id = CallId(self.next_id);
        // 2^64 calls do not happen; saturating keeps this free of a panic path.
        self.next_id = self.next_id.saturating_add(1);
        self.stats.started += 1;
        id
    }

    /// Counts an input for a call that is not pending: late if the id was issued, else
    /// unknown.
    fn missing(&mut self, id: CallId, late: fn(&mut CallStats) -> &mut u64) -> Disposition {
        if id.0 < self.next_id {
            *late(&mut self.stats) += 1;
            Disposition::Late
        } else {
            self.stats.unknown_ids += 1;
            Disposition::Unknown
        }
    }

    /// Moves an `Issued` or `Sent` call forward to `state`; arms the deadline the first time
    /// the call is known to have left.
    fn mark_sent(&mut self, id: CallId, state: CallState, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let was_issued = call.state == CallState::Issued;
        call.state = state;
        if was_issued {
            // An overflowing deadline is so far away that it is no deadline.
            call.deadline = call.ttl.and_then(|ttl| now.checked_add(ttl));
            if let Some(at) = call.deadline {
                self.deadlines.insert((at, id));
            }
        }
    }

    /// Removes a pending call and queues its one completion.
    fn complete(&mut self, id: CallId, result: Result<Completion, CallError>) {
        let Some(call) = self.calls.remove(&id) else {
            return;
        };
        if let Some(at) = call.deadline {
            self.deadlines.remove(&(at, id));
        }
        if let Some(ids) = self.by_conn.get_mut(&call.target) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_conn.remove(&call.target);
            }
        }
        self.finish(id, result);
    }

    fn finish(&mut self, id: CallId, result: Result<Completion, CallError>) {
        self.stats.completed += 1;
        self.completions.push_back((id, result));
    }
}
