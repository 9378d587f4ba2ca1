//! [`OpsRegistry`]: what this node has asked for, after the caller has moved on (MISSION
//! K2).
//!
//! A program has its call's result; a person needs to know, after pressing a button, whether
//! the command ran, and if nobody knows, that nobody knows. The registry keeps one frozen
//! [`Operation`] per call made by this node (a server that calls is a caller too). The runtime
//! hooks it at the one funnel every call goes through (the start of a call in the I/O thread)
//! and at each step after that:
//!
//! ```text
//!   start of a call ── issue ──> Issued ── sent ──> Sent ── item ──> Deferred
//!                                  │                 │                  │
//!                                  └──────── settle(Ok) ──> Succeeded ──┤
//!                                            settle(Err) ─> Failed ─────┤
//!                                                        └> UnknownOutcome
//! ```
//!
//! # Statuses
//!
//! | status | meaning |
//! |---|---|
//! | `issued` | created; the request was not (yet) handed to libzmq. A call that fails here certainly did not run |
//! | `sent` | handed to libzmq: from here on a failure may mean it ran |
//! | `deferred` | a stream call that has delivered items but no terminal REPLY yet: the call succeeded so far, the operation has not ended |
//! | `succeeded` | REPLY `Ok` (also when the caller then cannot decode the answer: it ran and succeeded) |
//! | `failed` | it certainly did not run, or it ran and certainly failed (`Exception`) |
//! | `unknown-outcome` | it may have run and nobody knows how it ended: the row an operator must not lose |
//!
//! # Failure to status ([`status_of_failure`])
//!
//! `unknown-outcome` is exactly "[`may_have_run`], and neither a remote `Exception` nor an
//! `UndecodableResult`": an `Exception` proves that the method ran and failed, and an
//! `UndecodableResult` that it ran and answered `Ok` (only the caller cannot read the value),
//! both certain. Every other "may have run" error lands in `unknown-outcome` with its code
//! kept beside it ([`Operation::code`]): a caller's own `Timeout` and an `UnknownOutcome` are
//! the same fact reached by different routes.
//!
//! The runtime settles a row when the call table completes the call, before the caller decodes
//! the result, so the row of a call whose answer does not decode is already `succeeded` (with
//! no code) when the caller sees `UndecodableResult`: what the registry records is what
//! happened at the callee.
//!
//! | [`CallError`] | status | code |
//! |---|---|---|
//! | `NoRegistration` | failed | `NotFound` |
//! | `NoReadyPeer` | failed | `Unavailable` |
//! | `TransportRefused` | failed | `TransportError` |
//! | `InvalidArgument` | failed | `InvalidParams` |
//! | `OutcomeUnknown { phase: Sent \| Accepted }` | unknown-outcome | `UnknownOutcome` |
//! | `ItemOutOfOrder` | unknown-outcome | `UnknownOutcome` |
//! | `StreamOverrun` | unknown-outcome | `UnknownOutcome` |
//! | `Timeout { refused_by_server: false }` (the caller's own deadline) | unknown-outcome | `Timeout` |
//! | `Timeout { refused_by_server: true }` (refused before dispatch) | failed | `Timeout` |
//! | `Cancelled { sent: false }` | failed | `Cancelled` |
//! | `Cancelled { sent: true }` | unknown-outcome | `Cancelled` |
//! | `Shutdown { sent: false }` | failed | `Unavailable` |
//! | `Shutdown { sent: true }` | unknown-outcome | `Unavailable` |
//! | `Unavailable { accepted: false }` (a draining callee refused it) | failed | `Unavailable` |
//! | `Unavailable { accepted: true }` (the callee stopped with it in hand) | unknown-outcome | `Unavailable` |
//! | `UndecodableResult` (it ran and answered `Ok`; the caller cannot read the answer) | succeeded | `UndecodableResult` |
//! | `Remote { Exception }` (it ran and failed) | failed | `Exception` |
//! | `Remote { UnknownOutcome \| Unavailable }` | unknown-outcome | the code |
//! | `Remote { MethodNotFound \| ClassNotFound \| NotFound \| InvalidParams \| Unauthorized \| Forbidden \| IncompatibleVersion \| Busy \| Superseded \| Timeout \| TransportError }` | failed | the code |
//!
//! # No arguments, no results
//!
//! An entry describes the request (who, what, when, how it ended) and never holds its
//! arguments or its result. That is a security property, not a preference: an argument can
//! be a bearer capability and a result a page of plant rows, and a node-wide store holding
//! either would give every screen in the process a read surface that authorization protected
//! on the way in. The API has no place for either: [`OpsRegistry::issue`] takes no payload
//! and [`Operation`] has no field for one.
//!
//! ```compile_fail
//! // An Operation has no arguments to read.
//! fn leak(op: &zmesh::proto::ops::Operation) -> &[u8] {
//!     &op.args
//! }
//! ```
//!
//! # The bound: three tiers (MISSION K2)
//!
//! The registry keeps at most `keep` entries ([`DEFAULT_KEEP`]), evicting in tiers, each a
//! claim about who still has business with the row: first the oldest settled-and-certain entry
//! (`succeeded`, `failed`); then, when none is left, the oldest `unknown-outcome`; never a call
//! in flight (`issued`, `sent`, `deferred`), so the registry may exceed `keep`: dropping one
//! would take a command off an operator's screen while it is still happening. "Oldest" is the
//! order of [`OpsRegistry::issue`]. Each tier is an ordered set, so an insert or a settle costs
//! `O(log n)` and each entry is evicted at most once: no scan of `keep` entries per call.
//!
//! # Changes
//!
//! Every applied update is also queued for [`OpsRegistry::poll_change`], for the shell to
//! publish. The queue is bounded ([`DEFAULT_CHANGE_BOUND`], [`OpsRegistry::set_change_bound`]):
//! when nobody polls, the oldest change is dropped and counted ([`OpsRegistry::take_lagged`]);
//! a consumer that lagged re-reads [`OpsRegistry::snapshot`]. Evictions are not changes.
//!
//! # Determinism
//!
//! No clock, no I/O: every time is an input (`now`), and the same inputs in the same order
//! give the same entries, order, evictions and changes.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::proto::calls::{may_have_run, CallError, RemoteCode};
use crate::proto::wire::Semantics;

/// How many entries a registry keeps by default before it evicts settled ones.
pub const DEFAULT_KEEP: usize = 1000;

/// How many changes wait for [`OpsRegistry::poll_change`] by default before the oldest is
/// dropped.
pub const DEFAULT_CHANGE_BOUND: usize = 1024;

/// The prefix of [`Operation::target`] for a call that was never routed to a peer.
pub const CHANNEL_TARGET_PREFIX: &str = "channel:";

/// The status of one operation (MISSION K2); see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpStatus {
    /// Created; the request was not (yet) handed to libzmq.
    Issued,
    /// The request was handed to libzmq.
    Sent,
    /// The call succeeded.
    Succeeded,
    /// The call certainly did not run, or ran and certainly failed.
    Failed,
    /// The call may have run and its outcome is not known.
    UnknownOutcome,
    /// A stream call that has delivered items but no terminal REPLY yet.
    Deferred,
}

impl OpStatus {
    /// Every status, in declaration order.
    pub const ALL: [OpStatus; 6] = [
        OpStatus::Issued,
        OpStatus::Sent,
        OpStatus::Succeeded,
        OpStatus::Failed,
        OpStatus::UnknownOutcome,
        OpStatus::Deferred,
    ];

    /// The serialised name (`"issued"`, ..., `"unknown-outcome"`, `"deferred"`).
    pub fn name(self) -> &'static str {
        match self {
            OpStatus::Issued => "issued",
            OpStatus::Sent => "sent",
            OpStatus::Succeeded => "succeeded",
            OpStatus::Failed => "failed",
            OpStatus::UnknownOutcome => "unknown-outcome",
            OpStatus::Deferred => "deferred",
        }
    }

    /// Whether the call is still in flight (`issued`, `sent`, `deferred`): never evicted.
    pub fn is_in_flight(self) -> bool {
        matches!(self, OpStatus::Issued | OpStatus::Sent | OpStatus::Deferred)
    }
}

impl fmt::Display for OpStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The status a call failing with `err` ends in: `unknown-outcome` if it may have run
/// ([`may_have_run`]) unless the callee answered `Exception` (it ran and failed, which is
/// certain: `failed`) or its `Ok` answer does not decode at the caller (it ran and succeeded,
/// which is certain: `succeeded`); `failed` otherwise. The module docs have the table.
pub fn status_of_failure(err: &CallError) -> OpStatus {
    match err {
        CallError::Remote {
            code: RemoteCode::Exception,
            ..
        } => OpStatus::Failed,
        CallError::UndecodableResult { .. } => OpStatus::Succeeded,
        err if may_have_run(err) => OpStatus::UnknownOutcome,
        _ => OpStatus::Failed,
    }
}

/// The [`Operation::target`] of a call that was never routed to a peer: `channel:<name>`.
pub fn channel_target(channel: &str) -> String {
    format!("{CHANNEL_TARGET_PREFIX}{channel}")
}

/// The name of a [`Semantics`] as the contract spells it (MISSION K1).
fn semantics_name(semantics: Semantics) -> &'static str {
    match semantics {
        Semantics::Undeclared => "undeclared",
        Semantics::Query => "query",
        Semantics::IdempotentCommand => "idempotent-command",
        Semantics::NonRepeatableCommand => "non-repeatable-command",
    }
}

/// One call made by this node, as the registry last saw it (MISSION K2).
///
/// Frozen: an update replaces the entry with a new value, so an `Arc<Operation>` a reader
/// holds never changes under it. It describes the request and never holds its arguments or
/// its result (see the module docs). The strings are `Arc<str>` so that each update, which
/// builds a new entry, shares them instead of copying them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The call id (the REQUEST's `call_id`), unique within the node's run.
    pub id: u64,
    /// Where the request went: the RID of the peer it was routed to, or
    /// `channel:<name>` ([`channel_target`]) for a call no peer was chosen for (it failed
    /// before routing: nothing serves the channel, or no peer was ready).
    pub target: Arc<str>,
    /// The channel (service) called.
    pub channel: Arc<str>,
    /// The method called.
    pub method: Arc<str>,
    /// What repeating the call does to the world, as the caller knew it (it travels nowhere
    /// and decides nothing here; it tells an uncertain non-repeatable command apart).
    pub semantics: Semantics,
    /// Where the call is.
    pub status: OpStatus,
    /// When the call was issued.
    pub issued_at: Instant,
    /// When the request was handed to libzmq, if it was.
    pub sent_at: Option<Instant>,
    /// When the call ended (`succeeded`, `failed`, `unknown-outcome`).
    pub settled_at: Option<Instant>,
    /// The error code of a failed call ([`CallError::code`]), kept beside `unknown-outcome`
    /// because a `Timeout` and an `UnknownOutcome` are the same fact by different routes.
    pub code: Option<&'static str>,
    /// Stream items delivered so far.
    pub items: u64,
    /// The callee answered with the recorded outcome of an earlier call with the same
    /// idempotency key (the REPLY's replayed mark, WIRE.md §4.17): the command did not run
    /// for this call. False until the call settles, and for a callee that does not say.
    pub replayed: bool,
}

impl Operation {
    /// A serialisable view of this entry at `now`: times become ages in milliseconds, since
    /// an `Instant` means nothing outside this process (the runtime adds wall-clock rendering
    /// with [`crate::display_time::unix_millis`]).
    pub fn view(&self, now: Instant) -> OperationView {
        let age = |at: Instant| {
            u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX)
        };
        OperationView {
            id: self.id,
            target: self.target.clone(),
            channel: self.channel.clone(),
            method: self.method.clone(),
            semantics: semantics_name(self.semantics),
            status: self.status,
            code: self.code,
            items: self.items,
            replayed: self.replayed,
            issued_ms_ago: age(self.issued_at),
            sent_ms_ago: self.sent_at.map(age),
            settled_ms_ago: self.settled_at.map(age),
        }
    }
}

/// The serialisable form of an [`Operation`] at one moment ([`Operation::view`]): the same
/// fields, with ages in milliseconds instead of instants. Its JSON keys are exactly its field
/// names; absent times are `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperationView {
    /// [`Operation::id`].
    pub id: u64,
    /// [`Operation::target`].
    pub target: Arc<str>,
    /// [`Operation::channel`].
    pub channel: Arc<str>,
    /// [`Operation::method`].
    pub method: Arc<str>,
    /// [`Operation::semantics`]: `"undeclared"`, `"query"`, `"idempotent-command"` or
    /// `"non-repeatable-command"`.
    pub semantics: &'static str,
    /// [`Operation::status`].
    pub status: OpStatus,
    /// [`Operation::code`].
    pub code: Option<&'static str>,
    /// [`Operation::items`].
    pub items: u64,
    /// [`Operation::replayed`].
    pub replayed: bool,
    /// Milliseconds since the call was issued.
    pub issued_ms_ago: u64,
    /// Milliseconds since the request was handed to libzmq.
    pub sent_ms_ago: Option<u64>,
    /// Milliseconds since the call ended.
    pub settled_ms_ago: Option<u64>,
}

/// How many entries of each status a registry holds, for gauges ([`OpsRegistry::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    /// `issued` entries.
    pub issued: u64,
    /// `sent` entries.
    pub sent: u64,
    /// `succeeded` entries.
    pub succeeded: u64,
    /// `failed` entries.
    pub failed: u64,
    /// `unknown-outcome` entries.
    pub unknown_outcome: u64,
    /// `deferred` entries.
    pub deferred: u64,
}

impl OpCounts {
    /// The count of `status`.
    pub fn get(&self, status: OpStatus) -> u64 {
        match status {
            OpStatus::Issued => self.issued,
            OpStatus::Sent => self.sent,
            OpStatus::Succeeded => self.succeeded,
            OpStatus::Failed => self.failed,
            OpStatus::UnknownOutcome => self.unknown_outcome,
            OpStatus::Deferred => self.deferred,
        }
    }

    /// Every entry.
    pub fn total(&self) -> u64 {
        OpStatus::ALL.iter().map(|&s| self.get(s)).sum()
    }

    fn slot(&mut self, status: OpStatus) -> &mut u64 {
        match status {
            OpStatus::Issued => &mut self.issued,
            OpStatus::Sent => &mut self.sent,
            OpStatus::Succeeded => &mut self.succeeded,
            OpStatus::Failed => &mut self.failed,
            OpStatus::UnknownOutcome => &mut self.unknown_outcome,
            OpStatus::Deferred => &mut self.deferred,
        }
    }
}

/// Diagnostic counters of an [`OpsRegistry`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpsStats {
    /// Entries issued.
    pub issued: u64,
    /// Settled-and-certain entries evicted (first tier).
    pub evicted_certain: u64,
    /// `unknown-outcome` entries evicted (second tier).
    pub evicted_unknown: u64,
    /// Updates that changed nothing: an id issued twice, or unknown (never issued, or
    /// evicted), or an update that does not apply to the entry's status (a settled call).
    pub ignored: u64,
}

/// The operations registry of one node (MISSION K2); see the module docs.
///
/// Every update takes the time as an input and returns whether it changed the entry
/// (`false` for an unknown id, or an update that does not apply: see each method).
#[derive(Debug, Clone)]
pub struct OpsRegistry {
    keep: usize,
    /// Entries by issue order; the value is the entry's current frozen version.
    order: BTreeMap<u64, Arc<Operation>>,
    /// Call id -> issue order.
    by_id: HashMap<u64, u64>,
    /// Settled-and-certain entries by issue order: evicted first.
    certain: BTreeSet<u64>,
    /// `unknown-outcome` entries by issue order: evicted when no certain one is left.
    unknown: BTreeSet<u64>,
    counts: OpCounts,
    changes: VecDeque<Arc<Operation>>,
    change_bound: usize,
    lagged: u64,
    next_seq: u64,
    stats: OpsStats,
}

impl Default for OpsRegistry {
    fn default() -> Self {
        Self::new(DEFAULT_KEEP)
    }
}

impl OpsRegistry {
    /// An empty registry keeping at most `keep` entries beyond those in flight.
    pub fn new(keep: usize) -> Self {
        Self {
            keep,
            order: BTreeMap::new(),
            by_id: HashMap::new(),
            certain: BTreeSet::new(),
            unknown: BTreeSet::new(),
            counts: OpCounts::default(),
            changes: VecDeque::new(),
            change_bound: DEFAULT_CHANGE_BOUND,
            lagged: 0,
            next_seq: 0,
            stats: OpsStats::default(),
        }
    }

    /// How many changes may wait for [`Self::poll_change`] (0: none are recorded, and none
    /// counted as lagged: for a shell nobody listens to). Changes over the new bound are
    /// dropped oldest first and counted as lagged.
    pub fn set_change_bound(&mut self, bound: usize) {
        self.change_bound = bound;
        while self.changes.len() > bound {
            self.changes.pop_front();
            if bound > 0 {
                self.lagged += 1;
            }
        }
    }

    /// Call `id` to `channel`/`method` was issued at `now`, bound for `target` (a peer's RID,
    /// or [`channel_target`] when no peer was chosen): a new `issued` entry, the newest.
    /// May evict settled entries. `false` (nothing changes) if `id` is already present.
    pub fn issue(
        &mut self,
        id: u64,
        target: impl Into<Arc<str>>,
        channel: impl Into<Arc<str>>,
        method: impl Into<Arc<str>>,
        semantics: Semantics,
        now: Instant,
    ) -> bool {
        if self.by_id.contains_key(&id) {
            self.stats.ignored += 1;
            return false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let op = Arc::new(Operation {
            id,
            target: target.into(),
            channel: channel.into(),
            method: method.into(),
            semantics,
            status: OpStatus::Issued,
            issued_at: now,
            sent_at: None,
            settled_at: None,
            code: None,
            items: 0,
            replayed: false,
        });
        self.by_id.insert(id, seq);
        self.order.insert(seq, op.clone());
        *self.counts.slot(OpStatus::Issued) += 1;
        self.stats.issued += 1;
        self.push_change(op);
        self.evict();
        true
    }

    /// The request of call `id` was handed to libzmq at `now`: `issued` -> `sent`. Applies
    /// only to an `issued` entry.
    pub fn sent(&mut self, id: u64, now: Instant) -> bool {
        self.update(id, |op| {
            if op.status != OpStatus::Issued {
                return false;
            }
            op.status = OpStatus::Sent;
            op.sent_at = Some(now);
            true
        })
    }

    /// Call `id` delivered a stream item at `now`: the entry becomes (or stays) `deferred`,
    /// one more item. Applies to a call in flight. (No per-item time is kept; `now` keeps
    /// every input the same shape.)
    pub fn item(&mut self, id: u64, now: Instant) -> bool {
        let _ = now;
        self.update(id, |op| {
            if !op.status.is_in_flight() {
                return false;
            }
            op.status = OpStatus::Deferred;
            op.items = op.items.saturating_add(1);
            true
        })
    }

    /// Call `id` ended at `now`: `succeeded` for `Ok`, [`status_of_failure`] with the error's
    /// code kept for `Err`. Applies to a call in flight; may evict settled entries (this one
    /// included, if it is the oldest certain one while the registry is over its bound).
    pub fn settle(&mut self, id: u64, outcome: Result<(), &CallError>, now: Instant) -> bool {
        self.settle_answer(id, outcome, false, now)
    }

    /// [`Self::settle`] for a call whose callee said whether its answer was `replayed` from
    /// an earlier call's record ([`Operation::replayed`]).
    pub fn settle_answer(
        &mut self,
        id: u64,
        outcome: Result<(), &CallError>,
        replayed: bool,
        now: Instant,
    ) -> bool {
        let (status, code) = match outcome {
            Ok(()) => (OpStatus::Succeeded, None),
            Err(err) => (status_of_failure(err), Some(err.code())),
        };
        let applied = self.update(id, |op| {
            if !op.status.is_in_flight() {
                return false;
            }
            op.status = status;
            op.code = code;
            op.settled_at = Some(now);
            op.replayed = replayed;
            true
        });
        if applied {
            self.evict();
        }
        applied
    }

    /// Every entry, oldest first (newest last).
    pub fn snapshot(&self) -> Vec<Arc<Operation>> {
        self.order.values().cloned().collect()
    }

    /// The entry of call `id`, if it is kept.
    pub fn get(&self, id: u64) -> Option<Arc<Operation>> {
        let seq = self.by_id.get(&id)?;
        self.order.get(seq).cloned()
    }

    /// How many entries of each status are kept.
    pub fn counts(&self) -> OpCounts {
        self.counts
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no entry is kept.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The bound given to [`Self::new`].
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// The next changed entry (its new version), oldest change first.
    #[must_use]
    pub fn poll_change(&mut self) -> Option<Arc<Operation>> {
        self.changes.pop_front()
    }

    /// How many changes were dropped unpolled since the last call (then 0 again). Non-zero:
    /// the consumer missed changes and should re-read [`Self::snapshot`].
    pub fn take_lagged(&mut self) -> u64 {
        std::mem::take(&mut self.lagged)
    }

    /// Diagnostic counters.
    pub fn stats(&self) -> &OpsStats {
        &self.stats
    }

    /// Replaces entry `id` with `apply` of a copy of it, if `apply` says it changed; moves it
    /// between tiers and counts; queues the change.
    fn update(&mut self, id: u64, apply: impl FnOnce(&mut Operation) -> bool) -> bool {
        let Some(&seq) = self.by_id.get(&id) else {
            self.stats.ignored += 1;
            return false;
        };
        let Some(slot) = self.order.get_mut(&seq) else {
            self.stats.ignored += 1;
            return false;
        };
        let mut next = Operation::clone(slot);
        let before = next.status;
        if !apply(&mut next) {
            self.stats.ignored += 1;
            return false;
        }
        let after = next.status;
        let next = Arc::new(next);
        *slot = next.clone();
        if before != after {
            *self.counts.slot(before) = self.counts.slot(before).saturating_sub(1);
            *self.counts.slot(after) += 1;
            match after {
                OpStatus::Succeeded | OpStatus::Failed => {
                    self.certain.insert(seq);
                }
                OpStatus::UnknownOutcome => {
                    self.unknown.insert(seq);
                }
                OpStatus::Issued | OpStatus::Sent | OpStatus::Deferred => {}
            }
        }
        self.push_change(next);
        true
    }

    fn push_change(&mut self, op: Arc<Operation>) {
        if self.change_bound == 0 {
            return;
        }
        if self.changes.len() >= self.change_bound {
            self.changes.pop_front();
            self.lagged += 1;
        }
        self.changes.push_back(op);
    }

    /// Evicts while over the bound: the oldest certain entry, else the oldest unknown one,
    /// never one in flight. Each entry is evicted at most once, each step `O(log n)`.
    fn evict(&mut self) {
        while self.order.len() > self.keep {
            let seq = if let Some(seq) = self.certain.pop_first() {
                self.stats.evicted_certain += 1;
                seq
            } else if let Some(seq) = self.unknown.pop_first() {
                self.stats.evicted_unknown += 1;
                seq
            } else {
                return;
            };
            if let Some(op) = self.order.remove(&seq) {
                self.by_id.remove(&op.id);
                *self.counts.slot(op.status) = self.counts.slot(op.status).saturating_sub(1);
            }
        }
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
    use std::collections::BTreeSet;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::proto::calls::Phase;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn issue(r: &mut OpsRegistry, id: u64, now: Instant) -> bool {
        r.issue(
            id,
            "node-b",
            "pump",
            "dispense",
            Semantics::NonRepeatableCommand,
            now,
        )
    }

    fn ids(r: &OpsRegistry) -> Vec<u64> {
        r.snapshot().iter().map(|op| op.id).collect()
    }

    const LOST: CallError = CallError::OutcomeUnknown { phase: Phase::Sent };
    const REFUSED: CallError = CallError::TransportRefused;

    /// K2: issued -> sent -> deferred (items counted) -> succeeded, with each time recorded;
    /// a settled entry changes no more; unknown ids and repeated issues change nothing.
    #[test]
    fn k2_status_transitions() {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(10);
        assert!(issue(&mut r, 1, t0));
        assert!(!issue(&mut r, 1, t0 + ms(1)), "an id is issued once");
        let op = r.get(1).unwrap();
        assert_eq!(op.status, OpStatus::Issued);
        assert_eq!((op.issued_at, op.sent_at, op.settled_at), (t0, None, None));
        assert_eq!(&*op.target, "node-b");

        assert!(r.sent(1, t0 + ms(2)));
        assert!(!r.sent(1, t0 + ms(3)), "sent once");
        assert_eq!(r.get(1).unwrap().status, OpStatus::Sent);
        assert_eq!(r.get(1).unwrap().sent_at, Some(t0 + ms(2)));

        assert!(r.item(1, t0 + ms(4)));
        assert!(r.item(1, t0 + ms(5)));
        let op = r.get(1).unwrap();
        assert_eq!((op.status, op.items), (OpStatus::Deferred, 2));
        assert!(!r.sent(1, t0 + ms(6)), "a deferred call is not sent again");

        assert!(r.settle(1, Ok(()), t0 + ms(7)));
        let op = r.get(1).unwrap();
        assert_eq!(op.status, OpStatus::Succeeded);
        assert_eq!(
            (op.settled_at, op.code, op.items),
            (Some(t0 + ms(7)), None, 2)
        );
        assert!(!r.settle(1, Err(&LOST), t0 + ms(8)), "settled once");
        assert!(!r.item(1, t0 + ms(8)));
        assert!(!r.sent(1, t0 + ms(8)));
        assert_eq!(r.get(1).unwrap().status, OpStatus::Succeeded);

        assert!(!r.sent(99, t0));
        assert!(!r.item(99, t0));
        assert!(!r.settle(99, Ok(()), t0));
        assert_eq!(r.stats().ignored, 9);
    }

    /// K2: failures land in failed or unknown-outcome with their code kept; an issued call
    /// that fails certainly did not run; a stream cut with its call in hand is unknown.
    #[test]
    fn k2_failed_and_unknown_outcome_keep_their_code() {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(10);
        for id in 1..=4 {
            assert!(issue(&mut r, id, t0));
        }
        assert!(r.settle(1, Err(&REFUSED), t0));
        assert!(r.sent(2, t0));
        assert!(r.settle(2, Err(&LOST), t0));
        assert!(r.sent(3, t0));
        let own_timeout = CallError::Timeout {
            refused_by_server: false,
        };
        assert!(r.settle(3, Err(&own_timeout), t0));
        assert!(r.sent(4, t0));
        assert!(r.item(4, t0));
        assert!(r.settle(4, Err(&CallError::Unavailable { accepted: true }), t0));
        let got: Vec<(OpStatus, Option<&str>)> =
            r.snapshot().iter().map(|op| (op.status, op.code)).collect();
        assert_eq!(
            got,
            vec![
                (OpStatus::Failed, Some("TransportError")),
                (OpStatus::UnknownOutcome, Some("UnknownOutcome")),
                (OpStatus::UnknownOutcome, Some("Timeout")),
                (OpStatus::UnknownOutcome, Some("Unavailable")),
            ]
        );
        assert_eq!(r.counts().failed, 1);
        assert_eq!(r.counts().unknown_outcome, 3);
        assert_eq!(r.counts().total(), 4);
    }

    /// K2, C3: `status_of_failure` for every `CallError` variant (and every remote code):
    /// unknown-outcome exactly when the call may have run, except a remote `Exception` (it
    /// ran and failed: certain) and an undecodable answer (it ran and succeeded: certain).
    #[test]
    fn k2_status_of_failure_every_variant() {
        use OpStatus::{Failed, Succeeded, UnknownOutcome as Unknown};
        let remote = |code| CallError::Remote {
            code,
            message: String::new(),
        };
        let rows: Vec<(CallError, OpStatus)> = vec![
            (CallError::NoRegistration, Failed),
            (CallError::NoReadyPeer, Failed),
            (CallError::TransportRefused, Failed),
            (CallError::InvalidArgument { reason: "x".into() }, Failed),
            (CallError::OutcomeUnknown { phase: Phase::Sent }, Unknown),
            (
                CallError::OutcomeUnknown {
                    phase: Phase::Accepted,
                },
                Unknown,
            ),
            (
                CallError::ItemOutOfOrder {
                    expected: 1,
                    got: 3,
                },
                Unknown,
            ),
            (
                CallError::Timeout {
                    refused_by_server: false,
                },
                Unknown,
            ),
            (
                CallError::Timeout {
                    refused_by_server: true,
                },
                Failed,
            ),
            (CallError::Cancelled { sent: false }, Failed),
            (CallError::Cancelled { sent: true }, Unknown),
            (CallError::Shutdown { sent: false }, Failed),
            (CallError::Shutdown { sent: true }, Unknown),
            (CallError::Unavailable { accepted: false }, Failed),
            (CallError::Unavailable { accepted: true }, Unknown),
            (
                CallError::UndecodableResult { reason: "x".into() },
                Succeeded,
            ),
            (CallError::StreamOverrun { buffered: 1 }, Unknown),
            (remote(RemoteCode::Exception), Failed),
            (remote(RemoteCode::UnknownOutcome), Unknown),
            (remote(RemoteCode::Unavailable), Unknown),
            (remote(RemoteCode::MethodNotFound), Failed),
            (remote(RemoteCode::ClassNotFound), Failed),
            (remote(RemoteCode::NotFound), Failed),
            (remote(RemoteCode::InvalidParams), Failed),
            (remote(RemoteCode::Unauthorized), Failed),
            (remote(RemoteCode::Forbidden), Failed),
            (remote(RemoteCode::IncompatibleVersion), Failed),
            (remote(RemoteCode::Busy), Failed),
            (remote(RemoteCode::Superseded), Failed),
            (remote(RemoteCode::Timeout), Failed),
            (remote(RemoteCode::TransportError), Failed),
        ];
        for (err, want) in &rows {
            assert_eq!(status_of_failure(err), *want, "{err:?}");
            let ran_certainly = matches!(
                err,
                CallError::Remote {
                    code: RemoteCode::Exception,
                    ..
                } | CallError::UndecodableResult { .. }
            );
            assert_eq!(
                *want == Unknown,
                may_have_run(err) && !ran_certainly,
                "{err:?}: one classification, not a second opinion"
            );
        }
        // Every wire error code has a row.
        let codes: BTreeSet<&str> = rows
            .iter()
            .filter_map(|(e, _)| match e {
                CallError::Remote { code, .. } => Some(code.name()),
                _ => None,
            })
            .collect();
        let wire: BTreeSet<&str> = crate::proto::wire::ReplyCode::ALL
            .iter()
            .filter_map(|&c| RemoteCode::from_reply(c))
            .map(RemoteCode::name)
            .collect();
        assert_eq!(codes, wire);
    }

    /// K2: the three tiers: settled-and-certain go first (oldest first), then the oldest
    /// unknown-outcome, never a call in flight.
    #[test]
    fn k2_three_tier_eviction() {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(4);
        for id in 1..=4 {
            assert!(issue(&mut r, id, t0));
            assert!(r.sent(id, t0));
        }
        // 1 unknown, 2 certain, 3 in flight, 4 certain.
        assert!(r.settle(1, Err(&LOST), t0));
        assert!(r.settle(2, Ok(()), t0));
        assert!(r.settle(4, Err(&REFUSED), t0));
        assert_eq!(ids(&r), [1, 2, 3, 4]);

        assert!(issue(&mut r, 5, t0));
        assert_eq!(ids(&r), [1, 3, 4, 5], "the oldest certain goes first");
        assert!(issue(&mut r, 6, t0));
        assert_eq!(ids(&r), [1, 3, 5, 6], "then the next certain");
        assert!(issue(&mut r, 7, t0));
        assert_eq!(ids(&r), [3, 5, 6, 7], "then the oldest unknown");
        assert!(issue(&mut r, 8, t0));
        assert_eq!(ids(&r), [3, 5, 6, 7, 8], "never one in flight");
        assert_eq!(r.len(), 5);

        // Settling makes room: the newly settled certain entry is the only evictable one.
        assert!(r.settle(8, Ok(()), t0));
        assert_eq!(ids(&r), [3, 5, 6, 7]);
        assert_eq!(r.get(8), None);
        assert_eq!(r.stats().evicted_certain, 3);
        assert_eq!(r.stats().evicted_unknown, 1);
        assert_eq!(r.counts().sent, 1);
        assert_eq!(r.counts().issued, 3);
        assert_eq!(r.counts().total(), 4);
    }

    /// K2: an unknown-outcome outlives every newer certain entry.
    #[test]
    fn k2_unknown_outlives_newer_certain_entries() {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(2);
        assert!(issue(&mut r, 1, t0));
        assert!(r.settle(1, Err(&LOST), t0));
        for id in 2..100 {
            assert!(issue(&mut r, id, t0));
            assert!(r.settle(id, Ok(()), t0));
        }
        assert_eq!(ids(&r), [1, 99]);
    }

    /// K2: calls in flight are never evicted; the registry exceeds `keep` while they last.
    #[test]
    fn k2_in_flight_never_evicted() {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(10);
        for id in 0..1000 {
            assert!(issue(&mut r, id, t0));
            if id % 2 == 0 {
                assert!(r.sent(id, t0));
            }
            if id % 3 == 0 {
                assert!(r.item(id, t0));
            }
        }
        assert_eq!(r.len(), 1000);
        assert!((0..1000).all(|id| r.get(id).is_some()));
        assert_eq!(
            r.counts().issued + r.counts().sent + r.counts().deferred,
            1000
        );
        for id in 0..1000 {
            assert!(r.settle(id, Ok(()), t0));
        }
        assert_eq!(ids(&r), (990..1000).collect::<Vec<_>>());
        assert_eq!(r.counts().succeeded, 10);
    }

    /// K2: entries are frozen: a reader's copy never changes under it.
    #[test]
    fn k2_entries_are_frozen() {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(10);
        assert!(issue(&mut r, 1, t0));
        let before = r.get(1).unwrap();
        assert!(r.sent(1, t0 + ms(1)));
        assert_eq!(before.status, OpStatus::Issued);
        assert_eq!(r.get(1).unwrap().status, OpStatus::Sent);
    }

    /// K2: an entry holds only the described fields, never arguments or results: its
    /// serialised form has exactly these keys. (The API has no place for either; see the
    /// `compile_fail` example in the module docs.)
    #[test]
    fn k2_arguments_never_retained_only_described_fields() {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(10);
        assert!(r.issue(
            7,
            channel_target("pump"),
            "pump",
            "setSetpoint",
            Semantics::IdempotentCommand,
            t0
        ));
        assert!(r.sent(7, t0 + ms(5)));
        assert!(r.settle(7, Err(&LOST), t0 + ms(20)));
        let view = r.get(7).unwrap().view(t0 + ms(1020));
        let json = serde_json::to_value(&view).unwrap();
        let keys: BTreeSet<&str> = json.as_object().unwrap().keys().map(|k| &**k).collect();
        let described: BTreeSet<&str> = [
            "id",
            "target",
            "channel",
            "method",
            "semantics",
            "status",
            "code",
            "items",
            "replayed",
            "issued_ms_ago",
            "sent_ms_ago",
            "settled_ms_ago",
        ]
        .into_iter()
        .collect();
        assert_eq!(keys, described);
        assert_eq!(
            json,
            serde_json::json!({
                "id": 7,
                "target": "channel:pump",
                "channel": "pump",
                "method": "setSetpoint",
                "semantics": "idempotent-command",
                "status": "unknown-outcome",
                "code": "UnknownOutcome",
                "items": 0,
                "replayed": false,
                "issued_ms_ago": 1020,
                "sent_ms_ago": 1015,
                "settled_ms_ago": 1000,
            })
        );
    }

    /// K2: the serialised status names.
    #[test]
    fn k2_status_names() {
        for s in OpStatus::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
            assert_eq!(
                serde_json::from_value::<OpStatus>(s.name().into()).unwrap(),
                s
            );
        }
        let names: Vec<&str> = OpStatus::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "issued",
                "sent",
                "succeeded",
                "failed",
                "unknown-outcome",
                "deferred"
            ]
        );
    }

    /// K2: every applied update is a change, in order; an unpolled queue is bounded, drops
    /// its oldest and counts them; a bound of 0 records nothing.
    #[test]
    fn k2_changes_are_bounded() {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(10);
        assert!(issue(&mut r, 1, t0));
        assert!(r.sent(1, t0));
        assert!(!r.sent(1, t0), "not applied: no change");
        let c: Vec<(u64, OpStatus)> = std::iter::from_fn(|| r.poll_change())
            .map(|op| (op.id, op.status))
            .collect();
        assert_eq!(c, [(1, OpStatus::Issued), (1, OpStatus::Sent)]);
        assert_eq!(r.take_lagged(), 0);

        r.set_change_bound(3);
        for id in 2..=6 {
            assert!(issue(&mut r, id, t0));
        }
        let c: Vec<u64> = std::iter::from_fn(|| r.poll_change())
            .map(|op| op.id)
            .collect();
        assert_eq!(c, [4, 5, 6]);
        assert_eq!(r.take_lagged(), 2);
        assert_eq!(r.take_lagged(), 0);

        r.set_change_bound(0);
        assert!(issue(&mut r, 7, t0));
        assert_eq!(r.poll_change(), None);
        assert_eq!(r.take_lagged(), 0);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Issue,
        Sent(usize),
        Item(usize),
        Settle(usize, u8),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Issue),
            2 => any::<usize>().prop_map(Step::Sent),
            1 => any::<usize>().prop_map(Step::Item),
            3 => (any::<usize>(), 0..4u8).prop_map(|(i, o)| Step::Settle(i, o)),
        ]
    }

    fn outcome(o: u8) -> Result<(), CallError> {
        match o {
            0 => Ok(()),
            1 => Err(REFUSED),
            2 => Err(LOST),
            _ => Err(CallError::Remote {
                code: RemoteCode::Exception,
                message: String::new(),
            }),
        }
    }

    /// The naive model: a vector in issue order, evicted by scanning.
    fn model_evict(model: &mut Vec<(u64, OpStatus)>, keep: usize) {
        while model.len() > keep {
            let certain = model
                .iter()
                .position(|(_, s)| matches!(s, OpStatus::Succeeded | OpStatus::Failed));
            let unknown = model
                .iter()
                .position(|(_, s)| *s == OpStatus::UnknownOutcome);
            match certain.or(unknown) {
                Some(i) => {
                    model.remove(i);
                }
                None => return,
            }
        }
    }

    fn run(keep: usize, steps: &[Step]) -> Result<(), TestCaseError> {
        let t0 = Instant::now();
        let mut r = OpsRegistry::new(keep);
        r.set_change_bound(0);
        let mut model: Vec<(u64, OpStatus)> = Vec::new();
        let mut next_id = 0u64;
        for s in steps {
            match *s {
                Step::Issue => {
                    prop_assert!(issue(&mut r, next_id, t0));
                    model.push((next_id, OpStatus::Issued));
                    next_id += 1;
                    model_evict(&mut model, keep);
                }
                Step::Sent(pick) | Step::Item(pick) | Step::Settle(pick, _) => {
                    // Any id ever issued, kept or evicted.
                    let id = (pick as u64) % (next_id + 1);
                    let entry = model.iter_mut().find(|(i, _)| *i == id);
                    let (applies, to) = match (s, entry.as_ref().map(|e| e.1)) {
                        (_, None) => (false, OpStatus::Issued),
                        (Step::Sent(_), Some(st)) => (st == OpStatus::Issued, OpStatus::Sent),
                        (Step::Item(_), Some(st)) => (st.is_in_flight(), OpStatus::Deferred),
                        (Step::Settle(_, o), Some(st)) => (
                            st.is_in_flight(),
                            match outcome(*o) {
                                Ok(()) => OpStatus::Succeeded,
                                Err(e) => status_of_failure(&e),
                            },
                        ),
                        (Step::Issue, Some(_)) => unreachable!(),
                    };
                    if applies {
                        if let Some(e) = entry {
                            e.1 = to;
                        }
                    }
                    let got = match s {
                        Step::Sent(_) => r.sent(id, t0),
                        Step::Item(_) => r.item(id, t0),
                        Step::Settle(_, o) => r.settle(id, outcome(*o).as_ref().map(|_| ()), t0),
                        Step::Issue => unreachable!(),
                    };
                    prop_assert_eq!(got, applies);
                    if matches!(s, Step::Settle(..)) {
                        model_evict(&mut model, keep);
                    }
                }
            }
            let got: Vec<(u64, OpStatus)> =
                r.snapshot().iter().map(|op| (op.id, op.status)).collect();
            prop_assert_eq!(&got, &model);
            for status in OpStatus::ALL {
                let n = model.iter().filter(|(_, s)| *s == status).count() as u64;
                prop_assert_eq!(r.counts().get(status), n);
            }
            let in_flight = model.iter().filter(|(_, s)| s.is_in_flight()).count();
            prop_assert!(r.len() <= keep.max(in_flight));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// K2: random issues, sends, items and settlements against a naive model of the
        /// three-tier eviction: the same entries, statuses and order after every step, the
        /// counts agree, in-flight calls are all kept, and the size is within
        /// `max(keep, in flight)`.
        #[test]
        fn k2_prop_eviction_against_a_naive_model(
            keep in 0..6usize,
            steps in prop::collection::vec(step(), 1..200),
        ) {
            run(keep, &steps)?;
        }
    }
}
