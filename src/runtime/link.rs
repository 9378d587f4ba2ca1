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
/// for RouteMesh, the lane. A state change ([`crate::runtime::StateChange::link_id`]) and
/// the snapshot row of the same link ([`crate::runtime::snapshot::LinkSnapshot::link_id`])
/// have equal identities, so events and rows can be matched without reading display names.
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

    /// The identity a link display name stands for; `None` for a name of no known form.
    /// The I/O thread names links `peer RID LANE` (dialled RouteMesh), `inbound RID LANE`
    /// (accepted: a RouteMesh lane, or a ClientServer client when LANE is `client_server`),
    /// `server CHANNEL ENDPOINT` (dialled ClientServer) and `sub ENDPOINT` (fanout). A RID
    /// may hold spaces, a lane never does; an endpoint starts `tcp://` or `ipc://`.
    pub fn from_display_name(name: &str) -> Option<LinkId> {
        let (kind, rest) = name.split_once(' ')?;
        match kind {
            "peer" | "inbound" => {
                let (rid, lane) = rest.rsplit_once(' ')?;
                let rid = rid.to_owned();
                let dialled = kind == "peer";
                match lane {
                    "application" => Some(LinkId::Peer {
                        rid,
                        lane: MeshLane::Application,
                        dialled,
                    }),
                    "completion" => Some(LinkId::Peer {
                        rid,
                        lane: MeshLane::Completion,
                        dialled,
                    }),
                    "client_server" if !dialled => Some(LinkId::Client { rid }),
                    _ => None,
                }
            }
            "server" => {
                let at = [" tcp://", " ipc://"]
                    .iter()
                    .filter_map(|scheme| rest.find(scheme))
                    .min()?;
                Some(LinkId::Server {
                    channel: rest[..at].to_owned(),
                    endpoint: rest[at + 1..].to_owned(),
                })
            }
            "sub" => Some(LinkId::Subscription {
                endpoint: rest.to_owned(),
            }),
            _ => None,
        }
    }

    /// The identity of a snapshot row, from its topology, role, peer, endpoint and the
    /// channel it serves; `None` for a row of no known form.
    pub(crate) fn of_row(
        topology: &str,
        role: &str,
        peer: Option<&str>,
        endpoint: &str,
        serves: &[String],
    ) -> Option<LinkId> {
        let mesh = |lane, dialled| {
            peer.map(|rid| LinkId::Peer {
                rid: rid.to_owned(),
                lane,
                dialled,
            })
        };
        match (topology, role) {
            ("route_mesh", "application") => mesh(MeshLane::Application, true),
            ("route_mesh", "completion") => mesh(MeshLane::Completion, true),
            ("route_mesh", "application_inbound") => mesh(MeshLane::Application, false),
            ("route_mesh", "completion_inbound") => mesh(MeshLane::Completion, false),
            ("client_server", "client") => serves.first().map(|channel| LinkId::Server {
                channel: channel.clone(),
                endpoint: endpoint.to_owned(),
            }),
            ("client_server", "server_inbound") => peer.map(|rid| LinkId::Client {
                rid: rid.to_owned(),
            }),
            ("fanout", "subscriber") => Some(LinkId::Subscription {
                endpoint: endpoint.to_owned(),
            }),
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

    fn peer(rid: &str, lane: MeshLane, dialled: bool) -> LinkId {
        LinkId::Peer {
            rid: rid.into(),
            lane,
            dialled,
        }
    }

    #[test]
    fn a2_every_display_name_reads_back_as_its_identity() {
        let ids = [
            peer("node b", MeshLane::Application, true),
            peer("b", MeshLane::Completion, true),
            peer("b", MeshLane::Application, false),
            peer("b", MeshLane::Completion, false),
            LinkId::Server {
                channel: "pump ctl".into(),
                endpoint: "ipc:///run/a b.sock".into(),
            },
            LinkId::Server {
                channel: "pump".into(),
                endpoint: "tcp://127.0.0.1:7000".into(),
            },
            LinkId::Client { rid: "cli".into() },
            LinkId::Subscription {
                endpoint: "tcp://127.0.0.1:7001".into(),
            },
        ];
        for id in ids {
            assert_eq!(
                LinkId::from_display_name(&id.to_string()),
                Some(id.clone()),
                "{id}"
            );
        }
    }

    #[test]
    fn a2_names_of_no_known_form_have_no_identity() {
        for name in [
            "",
            "peer",
            "peer b",
            "peer b client_server",
            "inbound b lane",
            "server pump",
            "server pump udp://x",
            "publisher tcp://x:1",
        ] {
            assert_eq!(LinkId::from_display_name(name), None, "{name:?}");
        }
    }

    #[test]
    fn a2_a_row_and_its_link_name_have_one_identity() {
        let pump = ["pump".to_owned()];
        let rows = [
            (
                "route_mesh",
                "application",
                Some("b"),
                "",
                &[][..],
                "peer b application",
            ),
            (
                "route_mesh",
                "completion_inbound",
                Some("b"),
                "",
                &[][..],
                "inbound b completion",
            ),
            (
                "client_server",
                "client",
                None,
                "tcp://h:1",
                &pump[..],
                "server pump tcp://h:1",
            ),
            (
                "client_server",
                "server_inbound",
                Some("c"),
                "tcp://h:2",
                &[][..],
                "inbound c client_server",
            ),
            (
                "fanout",
                "subscriber",
                None,
                "tcp://h:3",
                &[][..],
                "sub tcp://h:3",
            ),
        ];
        for (topology, role, rid, endpoint, serves, name) in rows {
            let id = LinkId::of_row(topology, role, rid, endpoint, serves).expect(name);
            assert_eq!(
                Some(&id),
                LinkId::from_display_name(name).as_ref(),
                "{name}"
            );
            assert_eq!(id.topology(), topology);
        }
    }
}
