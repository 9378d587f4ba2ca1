//! What a node reports to its application: deliveries and link state changes, in batches.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::proto::discovery::lease::LostReason;
use crate::proto::discovery::StoreOp;
pub use crate::proto::node::source::Source;
use crate::proto::state::{ConnState, FailureReason};
use crate::runtime::link::LinkId;
use crate::runtime::store::ReloadReason;

/// One application record delivered to this node. Probes, ACKs and beacons never appear here
/// (MISSION L3, L5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Who sent it.
    pub source: Source,
    /// The channel (RouteMesh/ClientServer) or topic bytes (fanout).
    pub channel: Bytes,
    /// The application payload. A payload of at least
    /// [`SHARE_MIN`](crate::runtime::socket::SHARE_MIN) bytes is libzmq's received message
    /// itself, not a copy: while it is alive it keeps libzmq's receive buffer (a few KiB,
    /// shared with the records received around it) alive; copy it to keep it for long.
    pub payload: Bytes,
}

/// A link changed state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateChange {
    /// Which link changed state, as typed values (topology, peer, lane): equal to the
    /// [`LinkSnapshot::id`](crate::runtime::snapshot::LinkSnapshot::id) of its snapshot row.
    /// Not serialized: [`StateChange::link`] is its text.
    #[serde(skip)]
    pub id: LinkId,
    /// The link's display name, [`StateChange::id`] as text (e.g. `peer node-b application`,
    /// `sub tcp://…`), as logs and `zmesh node --events` show it.
    pub link: String,
    /// The new state.
    pub state: ConnState,
    /// Why, when the link left ready or failed.
    pub reason: Option<FailureReason>,
    /// Free-form detail for humans.
    pub detail: String,
}

/// The stream of a node's events: one at a time as a `futures_core::Stream` of [`NodeEvent`]
/// (or [`EventStream::next_event`]), or in the batches the I/O thread hands over
/// ([`EventStream::recv`]).
///
/// Deliveries not yet taken from the stream are the node's *application queue*. When it holds
/// [`crate::config::NodeConfig::delivery_high_water`] deliveries or more, the queue is paused:
/// RouteMesh and ClientServer records wait in a bounded backlog per link, and once a link's
/// backlog is full its socket is not read (libzmq's HWM then pushes back on the sender, whose
/// sends fail at once as never sent). Liveness records keep being processed as long as a
/// socket is read; a paused queue by itself never changes readiness (MISSION R5). Fanout is
/// never flow-controlled: its records are delivered whatever the queue holds.
///
/// The limit of that rule: probes and ACKs travel on the same sockets as application
/// records, so a link whose backlog stays full for longer than the peer deadline (15 s)
/// leaves its peer's probes unread like any record behind a high-water mark, and the link
/// fails with `deadline_exceeded` (on both sides) for lack of progress evidence: records
/// queued before a PROBE or ACK delay it, and the 15 s deadline of WIRE.md §5.2 still
/// applies. Take deliveries at least that often.
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<Vec<NodeEvent>>,
    outstanding: Arc<AtomicUsize>,
    /// Events of a batch received for [`Stream::poll_next`] and not yielded yet.
    buffered: VecDeque<NodeEvent>,
}

impl EventStream {
    /// The stream over `rx`; `outstanding` counts the deliveries sent and not yet taken.
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<Vec<NodeEvent>>,
        outstanding: Arc<AtomicUsize>,
    ) -> EventStream {
        EventStream {
            rx,
            outstanding,
            buffered: VecDeque::new(),
        }
    }

    /// Counts the deliveries of `events` as taken by the application.
    fn taken(&self, events: &[NodeEvent]) {
        let n = events
            .iter()
            .filter(|e| matches!(e, NodeEvent::Delivery(_)))
            .count();
        if n > 0 {
            self.outstanding.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// The events a [`Stream`] poll received and has not yielded yet, as one batch.
    fn take_buffered(&mut self) -> Option<Vec<NodeEvent>> {
        if self.buffered.is_empty() {
            return None;
        }
        let batch: Vec<NodeEvent> = self.buffered.drain(..).collect();
        self.taken(&batch);
        Some(batch)
    }

    /// The next batch; `None` once the node has stopped and every batch was taken.
    pub async fn recv(&mut self) -> Option<Vec<NodeEvent>> {
        if let Some(batch) = self.take_buffered() {
            return Some(batch);
        }
        let batch = self.rx.recv().await?;
        self.taken(&batch);
        Some(batch)
    }

    /// The next batch if one is ready, without waiting.
    pub fn try_recv(&mut self) -> Result<Vec<NodeEvent>, mpsc::error::TryRecvError> {
        if let Some(batch) = self.take_buffered() {
            return Ok(batch);
        }
        let batch = self.rx.try_recv()?;
        self.taken(&batch);
        Ok(batch)
    }

    /// The next event, one at a time (the [`Stream`] of this type, without a stream
    /// combinator crate); `None` once the node has stopped and every event was taken.
    pub async fn next_event(&mut self) -> Option<NodeEvent> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Deliveries produced but not yet taken from this stream.
    pub fn queued_deliveries(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }
}

/// The events one at a time, in the order the I/O thread produced them. The batches stay
/// inside: a batch is received whole and its events are yielded in turn, a delivery counting
/// as taken (for [`crate::config::NodeConfig::delivery_high_water`]) when it is yielded.
/// Batches ([`EventStream::recv`]) and single events may be mixed; a batch then starts with
/// the events a poll received and did not yield yet.
///
/// There is one stream per node ([`crate::runtime::Node::take_events`]), not one per
/// subscriber: the deliveries it holds are the node's application queue, which pauses
/// reading at the high-water mark, and with several consumers one slow one would hold the
/// others back or lose records. Readiness has its own waiters ([`crate::runtime::Node::ready`]).
impl Stream for EventStream {
    type Item = NodeEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<NodeEvent>> {
        loop {
            if let Some(event) = self.buffered.pop_front() {
                self.taken(std::slice::from_ref(&event));
                return Poll::Ready(Some(event));
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(batch)) => self.buffered.extend(batch),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// How the I/O thread hands its event batches to the application: the channel of the
/// [`EventStream`], and a count of the batches that changed some link's state, which
/// [`crate::runtime::Node::ready`] waits on (it is dropped with the I/O thread, which tells
/// those waiters that the node stopped).
pub(crate) struct EventSender {
    tx: mpsc::UnboundedSender<Vec<NodeEvent>>,
    state_batches: watch::Sender<u64>,
}

impl EventSender {
    /// A sender into `tx` that counts state-changing batches in `state_batches`.
    pub(crate) fn new(
        tx: mpsc::UnboundedSender<Vec<NodeEvent>>,
        state_batches: watch::Sender<u64>,
    ) -> EventSender {
        EventSender { tx, state_batches }
    }

    /// Hands `batch` over; fails (the batch returned) when the application dropped the
    /// stream. The count moves whatever the stream's fate: readiness waiters do not read it.
    pub(crate) fn send(
        &self,
        batch: Vec<NodeEvent>,
    ) -> Result<(), mpsc::error::SendError<Vec<NodeEvent>>> {
        let changed = batch.iter().any(|e| matches!(e, NodeEvent::State(_)));
        let sent = self.tx.send(batch);
        if changed {
            self.state_batches.send_modify(|n| *n = n.wrapping_add(1));
        }
        sent
    }
}

/// What a node reports to its application.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// An application record arrived.
    Delivery(Delivery),
    /// A link changed state.
    State(StateChange),
    /// Automatic mode: the store, the lease or the descriptors changed (MISSION D1, D3,
    /// F5). Never a change of any link's readiness by itself.
    Discovery(DiscoveryEvent),
    /// The node's security state changed: its allow-list was read again.
    Security(super::security::SecurityEvent),
}

/// What the discovery agent reports to the application, in the node's event stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum DiscoveryEvent {
    /// This node's descriptor is published under a lease (first time, or again after a loss).
    LeaseAcquired,
    /// This node's lease is lost: the store says it expired, or no renewal was confirmed for
    /// a TTL. The node publishes again as soon as the store lets it. Links are not affected.
    LeaseLost {
        /// Why.
        reason: LostReason,
    },
    /// Another process run of this node's RID published its descriptor over this one's: this
    /// run stops publishing. Links are not affected.
    LeaseSuperseded {
        /// The other run's generation (JSON: 16 hex digits).
        #[serde(serialize_with = "super::hex64::serialize")]
        generation: u64,
    },
    /// A store operation failed; it is retried. Links are not affected.
    StoreUnreachable {
        /// The operation that failed.
        op: StoreOp,
        /// The store's error.
        error: String,
    },
    /// The store answers again.
    StoreReachable {
        /// The operation that succeeded.
        op: StoreOp,
    },
    /// Every descriptor was read (the first read, after an outage, after compaction).
    Reloaded {
        /// Why.
        reason: ReloadReason,
        /// Descriptors of other nodes now known.
        descriptors: usize,
    },
    /// A peer's descriptor appeared or changed.
    DescriptorPut {
        /// Its RID.
        rid: String,
        /// Its generation (JSON: 16 hex digits).
        #[serde(serialize_with = "super::hex64::serialize")]
        generation: u64,
    },
    /// A peer's descriptor disappeared (removed, or its lease expired): it is no longer
    /// dialled; an established connection stays as long as the transport judges it ready.
    DescriptorRemoved {
        /// Its RID.
        rid: String,
    },
}

impl std::fmt::Display for DiscoveryEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiscoveryEvent::LeaseAcquired => write!(f, "lease acquired (descriptor published)"),
            DiscoveryEvent::LeaseLost { reason } => write!(f, "lease lost ({reason:?})"),
            DiscoveryEvent::LeaseSuperseded { generation } => {
                write!(f, "lease superseded by generation {generation:016x}")
            }
            DiscoveryEvent::StoreUnreachable { op, error } => {
                write!(f, "store unreachable ({}): {error}", op.as_str())
            }
            DiscoveryEvent::StoreReachable { op } => {
                write!(f, "store reachable again ({})", op.as_str())
            }
            DiscoveryEvent::Reloaded {
                reason,
                descriptors,
            } => write!(
                f,
                "descriptors reloaded ({}): {descriptors} known",
                reason.as_str()
            ),
            DiscoveryEvent::DescriptorPut { rid, generation } => {
                write!(f, "descriptor of {rid} generation {generation:016x}")
            }
            DiscoveryEvent::DescriptorRemoved { rid } => {
                write!(f, "descriptor of {rid} removed or expired")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(n: u8) -> NodeEvent {
        NodeEvent::Delivery(Delivery {
            source: Source::Peer { rid: "b".into() },
            channel: Bytes::from_static(b"c"),
            payload: Bytes::from(vec![n]),
        })
    }

    fn state(endpoint: &str) -> NodeEvent {
        let id = LinkId::Subscription {
            endpoint: endpoint.to_owned(),
        };
        NodeEvent::State(StateChange {
            link: id.to_string(),
            id,
            state: ConnState::Ready,
            reason: None,
            detail: String::new(),
        })
    }

    /// What the I/O thread does: counts a batch's deliveries, then sends it.
    fn send(tx: &mpsc::UnboundedSender<Vec<NodeEvent>>, out: &AtomicUsize, b: Vec<NodeEvent>) {
        let n = b
            .iter()
            .filter(|e| matches!(e, NodeEvent::Delivery(_)))
            .count();
        out.fetch_add(n, Ordering::Relaxed);
        tx.send(b).expect("receiver alive");
    }

    #[tokio::test]
    async fn stream_yields_every_event_in_order_then_ends() {
        let (tx, rx) = mpsc::unbounded_channel();
        let out = Arc::new(AtomicUsize::new(0));
        let mut events = EventStream::new(rx, out.clone());
        send(&tx, &out, vec![state("a"), delivery(1), delivery(2)]);
        send(&tx, &out, vec![delivery(3)]);
        drop(tx);
        let mut seen = Vec::new();
        while let Some(e) = events.next_event().await {
            seen.push(e);
        }
        assert_eq!(
            seen,
            vec![state("a"), delivery(1), delivery(2), delivery(3)]
        );
    }

    #[tokio::test]
    async fn a_delivery_counts_as_taken_when_it_is_yielded() {
        let (tx, rx) = mpsc::unbounded_channel();
        let out = Arc::new(AtomicUsize::new(0));
        let mut events = EventStream::new(rx, out.clone());
        send(&tx, &out, vec![delivery(1), state("a"), delivery(2)]);
        assert_eq!(events.next_event().await, Some(delivery(1)));
        // The batch is in hand, but one of its deliveries has not been taken yet.
        assert_eq!(events.queued_deliveries(), 1);
        // A batch receive mixed in starts with what the stream still holds.
        send(&tx, &out, vec![delivery(3)]);
        assert_eq!(events.try_recv(), Ok(vec![state("a"), delivery(2)]));
        assert_eq!(events.queued_deliveries(), 1);
        assert_eq!(events.recv().await, Some(vec![delivery(3)]));
        assert_eq!(events.queued_deliveries(), 0);
    }
}
