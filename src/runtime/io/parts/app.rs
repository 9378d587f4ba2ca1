//! The application's queue as the I/O thread sees it (MISSION R5): the events of this loop
//! turn, handed over in one batch; how many deliveries the application has not taken yet;
//! and the per-link backlogs of application records held while that queue is full.
//!
//! A paused queue (the application holds `delivery_high_water` deliveries or more) never
//! changes a link's readiness: records keep being read (probes and ACKs with them) and wait
//! in their link's backlog, in order. Only a link whose backlog reaches [`LINK_BACKLOG`] has
//! its socket held back from reading until the application drains its queue.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::proto::node::keys::{LinkKey, SlotKey};
use crate::proto::state::{ConnState, FailureReason};
use crate::runtime::event::{Delivery, EventSender, NodeEvent, StateChange};
use crate::runtime::link::LinkId;

/// Records a link holds while the application queue is paused; when full, the link's socket
/// is not read until the queue drains (MISSION R5).
pub const LINK_BACKLOG: usize = 1024;

/// Events a new batch has room for from the start, at most (see [`AppQueue::flush`]).
const BATCH_PRESIZE_MAX: usize = 1024;

/// The application's queue (see the module docs). Its fields are its own.
pub(crate) struct AppQueue {
    /// Where the batches go.
    events: EventSender,
    /// The events of this loop turn.
    out: Vec<NodeEvent>,
    /// Deliveries handed to the application and not yet taken by it.
    outstanding: Arc<AtomicUsize>,
    /// The pause threshold: deliveries the application may hold.
    high_water: usize,
    /// Application records held while the queue is paused, per link with a backlog, in
    /// arrival order.
    backlogs: BTreeMap<LinkKey, VecDeque<Delivery>>,
    /// Sockets not read because a full backlog of theirs holds them back.
    held: Vec<SlotKey>,
    /// Records waiting in link backlogs.
    backlogged: usize,
}

impl AppQueue {
    /// A queue sending batches to `events`; the application counts down `outstanding` as
    /// it takes deliveries, and holds at most `high_water` before the queue pauses.
    pub(crate) fn new(
        events: EventSender,
        outstanding: Arc<AtomicUsize>,
        high_water: usize,
    ) -> AppQueue {
        AppQueue {
            events,
            out: Vec::new(),
            outstanding,
            high_water,
            backlogs: BTreeMap::new(),
            held: Vec::new(),
            backlogged: 0,
        }
    }

    /// A link's state changed: logged, and told to the application in this turn's batch.
    pub(crate) fn emit_state(
        &mut self,
        id: LinkId,
        state: ConnState,
        reason: Option<FailureReason>,
        detail: &str,
    ) {
        tracing::info!(link = %id, state = state.as_str(), reason = ?reason, detail, "link state");
        self.push(NodeEvent::State(StateChange {
            link: id.to_string(),
            id,
            state,
            reason,
            detail: detail.to_owned(),
        }));
    }

    /// An event for the application (a state change, a discovery event, a fanout delivery,
    /// which no backlog holds).
    pub(crate) fn push(&mut self, event: NodeEvent) {
        self.out.push(event);
    }

    /// An application record of link `k`: to the application now, or into the link's
    /// backlog while the queue is paused or the backlog is not empty (order within a link
    /// is kept).
    pub(crate) fn deliver(&mut self, k: LinkKey, d: Delivery) {
        if self.paused() || self.backlogs.contains_key(&k) {
            self.backlogs.entry(k).or_default().push_back(d);
        } else {
            self.out.push(NodeEvent::Delivery(d));
        }
    }

    /// How many application records of link `k` may go to the application now, one after
    /// another, before [`AppQueue::deliver`] would hold the next in the backlog: none while
    /// the link has a backlog, else what the pause threshold leaves, judged by one reading
    /// of what the application holds. The application only ever takes deliveries, so that
    /// reading can only overstate what it holds (as any reading of it may, an instant
    /// later): records of a run delivered under this count are delivered exactly as
    /// `deliver` would have delivered them had the application taken nothing during the run.
    pub(crate) fn room(&self, k: LinkKey) -> usize {
        if self.backlogs.contains_key(&k) {
            return 0;
        }
        self.high_water
            .saturating_sub(self.outstanding.load(Ordering::Relaxed) + self.out.len())
    }

    /// An application record of a link with [`AppQueue::room`] left: to the application now.
    /// The caller counts the room down, one per record.
    pub(crate) fn deliver_now(&mut self, d: Delivery) {
        self.out.push(NodeEvent::Delivery(d));
    }

    /// True when the application holds `high_water` deliveries or more.
    fn paused(&self) -> bool {
        self.outstanding.load(Ordering::Relaxed) + self.out.len() >= self.high_water
    }

    /// Moves held records to the application while its queue has room, in order per link
    /// (links in key order), and recomputes which sockets a full backlog holds back:
    /// `slot_of` names the socket of a link's current connection. Only the links with a
    /// backlog are looked at.
    pub(crate) fn release(&mut self, slot_of: impl Fn(LinkKey) -> Option<SlotKey>) {
        self.held.clear();
        self.backlogged = 0;
        if self.backlogs.is_empty() {
            return;
        }
        let keys: Vec<LinkKey> = self.backlogs.keys().copied().collect();
        for k in keys {
            while !self.paused() {
                let Some(d) = self.backlogs.get_mut(&k).and_then(|b| b.pop_front()) else {
                    break;
                };
                self.out.push(NodeEvent::Delivery(d));
            }
            if self.backlogs.get(&k).is_some_and(|b| b.is_empty()) {
                self.backlogs.remove(&k);
            }
        }
        for (&k, backlog) in &self.backlogs {
            self.backlogged += backlog.len();
            if backlog.len() >= LINK_BACKLOG {
                if let Some(slot) = slot_of(k) {
                    if !self.held.contains(&slot) {
                        self.held.push(slot);
                    }
                }
            }
        }
    }

    /// True if a full backlog holds socket `slot` back.
    pub(crate) fn is_held(&self, slot: SlotKey) -> bool {
        self.held.contains(&slot)
    }

    /// True if records wait in some link's backlog.
    pub(crate) fn has_backlog(&self) -> bool {
        self.backlogged > 0
    }

    /// Hands this turn's events to the application in one batch (discarded if it dropped
    /// its receiver), counting its deliveries as outstanding.
    pub(crate) fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        // The next turn's batch starts at this one's size (up to BATCH_PRESIZE_MAX): one
        // allocation per batch rather than a doubling per power of two of a busy link's
        // records, and never a large buffer held for a quiet turn.
        let cap = self.out.len().min(BATCH_PRESIZE_MAX);
        let batch = std::mem::replace(&mut self.out, Vec::with_capacity(cap));
        let n = batch
            .iter()
            .filter(|e| matches!(e, NodeEvent::Delivery(_)))
            .count();
        self.outstanding.fetch_add(n, Ordering::Relaxed);
        let _ = self.events.send(batch);
    }
}
