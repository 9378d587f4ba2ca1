//! Which link an event or a snapshot row is about, as typed values: [`LinkId`].

use serde::Serialize;

/// One of a RouteMesh peer's two lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MeshLane {
    /// The Application lane: requests and deliveries.
    Application,
    /// The Completion lane: the answers to calls.
    Completion,
}

impl MeshLane {
    /// `application` or `completion`, as in link names and snapshot roles.
    pub fn as_str(self) -> &'static str {
        match self {
            MeshLane::Application => "application",
            MeshLane::Completion => "completion",
        }
    }
}

/// Which link an event or a snapshot row is about: its topology, the peer it reaches and,
/// for RouteMesh, the lane. A state change ([`crate::runtime::StateChange::id`]) and the
/// snapshot row of the same link ([`crate::runtime::snapshot::LinkSnapshot::id`]) carry
/// equal identities, set by the I/O thread from the link itself, so events and rows are
/// matched without reading display names. Its `Display` is the link's display name
/// ([`crate::runtime::StateChange::link`]): `peer RID LANE` (dialled RouteMesh), `inbound
/// RID LANE` (accepted RouteMesh), `inbound RID client_server` (a ClientServer client),
/// `server CHANNEL ENDPOINT` (dialled ClientServer) and `sub ENDPOINT` (fanout).
///
/// A RouteMesh lane may be on a link this node dialled and, for a while, on one the peer
/// dialled too (one of them stands down): `dialled` tells the two apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum LinkId {
    /// RouteMesh: one lane of a peer.
    Peer {
        /// The peer's RID.
        rid: String,
        /// Which of its lanes.
        lane: MeshLane,
        /// True for the link this node dialled (a `[[peers]]` entry), false for the one the
        /// peer dialled to this node's `[route_mesh]` endpoints.
        dialled: bool,
    },
    /// ClientServer, this node the client: its link to the server of `channel` at
    /// `endpoint` (a `[[servers]]` entry).
    Server {
        /// The channel the server is configured for.
        channel: String,
        /// The endpoint dialled.
        endpoint: String,
    },
    /// ClientServer, this node the server: a client's link to this node's `[server]`
    /// endpoint, by the client's RID.
    Client {
        /// The client's RID.
        rid: String,
    },
    /// Fanout: the subscription to the publisher at `endpoint`.
    Subscription {
        /// The publisher's endpoint.
        endpoint: String,
    },
}

impl LinkId {
    /// The topology: `route_mesh`, `client_server` or `fanout`, as in snapshots.
    pub fn topology(&self) -> &'static str {
        match self {
            LinkId::Peer { .. } => "route_mesh",
            LinkId::Server { .. } | LinkId::Client { .. } => "client_server",
            LinkId::Subscription { .. } => "fanout",
        }
    }

    /// The RID of the node at the other end, where the identity names it (a RouteMesh peer,
    /// a ClientServer client); a server or a publisher is named by where it is dialled.
    pub fn peer(&self) -> Option<&str> {
        match self {
            LinkId::Peer { rid, .. } | LinkId::Client { rid } => Some(rid),
            LinkId::Server { .. } | LinkId::Subscription { .. } => None,
        }
    }

    /// The RouteMesh lane; `None` for the other topologies.
    pub fn lane(&self) -> Option<MeshLane> {
        match self {
            LinkId::Peer { lane, .. } => Some(*lane),
            _ => None,
        }
    }
}

impl std::fmt::Display for LinkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkId::Peer {
                rid,
                lane,
                dialled: true,
            } => write!(f, "peer {rid} {}", lane.as_str()),
            LinkId::Peer {
                rid,
                lane,
                dialled: false,
            } => write!(f, "inbound {rid} {}", lane.as_str()),
            LinkId::Server { channel, endpoint } => write!(f, "server {channel} {endpoint}"),
            LinkId::Client { rid } => write!(f, "inbound {rid} client_server"),
            LinkId::Subscription { endpoint } => write!(f, "sub {endpoint}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2_each_identity_displays_as_its_link_name() {
        let peer = |rid: &str, lane, dialled| LinkId::Peer {
            rid: rid.into(),
            lane,
            dialled,
        };
        let names = [
            (
                peer("node b", MeshLane::Application, true),
                "peer node b application",
            ),
            (
                peer("b", MeshLane::Completion, false),
                "inbound b completion",
            ),
            (
                LinkId::Server {
                    channel: "pump".into(),
                    endpoint: "tcp://127.0.0.1:7000".into(),
                },
                "server pump tcp://127.0.0.1:7000",
            ),
            (
                LinkId::Client { rid: "cli".into() },
                "inbound cli client_server",
            ),
            (
                LinkId::Subscription {
                    endpoint: "ipc:///run/p".into(),
                },
                "sub ipc:///run/p",
            ),
        ];
        for (id, name) in names {
            assert_eq!(id.to_string(), name);
        }
    }
}
