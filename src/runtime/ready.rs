//! Readiness a caller can await (MISSION A2): [`Node::ready`](crate::runtime::Node::ready)
//! resolves once a peer, a server of a channel or a subscription is ready, without reading
//! raw events.
//!
//! The node's I/O thread counts the event batches that changed some link's state; a waiter
//! takes a snapshot, checks its target in it, and waits for the count to move before it
//! looks again. A change that lands between the snapshot and the wait moves the count, so
//! none is missed; changes are coalesced, so a busy node costs a waiter one snapshot per
//! wake-up, not one per change.

use crate::proto::state::ConnState;
use crate::runtime::link::{LinkId, MeshLane};
use crate::runtime::snapshot::{LinkSnapshot, Snapshot};

/// What [`Node::ready`](crate::runtime::Node::ready) waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// RouteMesh peer `rid` (by RID): both its lanes (Application and Completion) are
    /// ready, so records and calls to it can be sent.
    Peer(String),
    /// A server of `channel`: a ready ClientServer server configured for it, or a RouteMesh
    /// peer with both lanes ready that announced a Server membership of it. A call to the
    /// channel is routed from then on (as long as that server stays ready).
    Server(String),
    /// The fanout publisher this node subscribes to at `endpoint` (as configured or
    /// discovered): its first record or beacon arrived.
    Subscription(String),
}

impl Target {
    /// [`Target::Peer`].
    pub fn peer(rid: impl Into<String>) -> Target {
        Target::Peer(rid.into())
    }

    /// [`Target::Server`].
    pub fn server(channel: impl Into<String>) -> Target {
        Target::Server(channel.into())
    }

    /// [`Target::Subscription`].
    pub fn subscription(endpoint: impl Into<String>) -> Target {
        Target::Subscription(endpoint.into())
    }

    /// True when `snapshot` shows the target ready. Only the links the snapshot lists count
    /// (at most [`SNAPSHOT_LIMIT`](crate::runtime::snapshot::SNAPSHOT_LIMIT)).
    pub fn is_ready_in(&self, snapshot: &Snapshot) -> bool {
        let ready = || {
            snapshot
                .links
                .iter()
                .filter(|l| l.state == ConnState::Ready)
        };
        match self {
            Target::Peer(rid) => mesh_ready(snapshot, rid),
            Target::Server(channel) => ready().any(|l| match &l.id {
                LinkId::Server { channel: c, .. } => c == channel,
                LinkId::Peer { rid, .. } => {
                    l.serves.iter().any(|c| c == channel) && mesh_ready(snapshot, rid)
                }
                _ => false,
            }),
            Target::Subscription(endpoint) => ready()
                .any(|l| matches!(&l.id, LinkId::Subscription { endpoint: e } if e == endpoint)),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Peer(rid) => write!(f, "peer {rid}"),
            Target::Server(channel) => write!(f, "a server of {channel}"),
            Target::Subscription(endpoint) => write!(f, "subscription {endpoint}"),
        }
    }
}

/// True when RouteMesh peer `rid` has a ready link on each lane, dialled or inbound.
fn mesh_ready(snapshot: &Snapshot, rid: &str) -> bool {
    let lane = |want: MeshLane| {
        snapshot.links.iter().any(|l: &LinkSnapshot| {
            l.state == ConnState::Ready
                && matches!(&l.id, LinkId::Peer { rid: r, lane, .. } if r == rid && *lane == want)
        })
    };
    lane(MeshLane::Application) && lane(MeshLane::Completion)
}

/// Why a readiness wait ended without its target becoming ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadyError {
    /// The node stopped, or began stopping, first: a stopping node makes nothing ready.
    #[error("the node stopped before {0} became ready")]
    Stopped(Target),
}
