//! What automatic mode added to the node (MISSION D1, F3): the descriptor fences and the
//! links and subscriptions discovery made, by RID, and what each of the discovery agent's
//! intents does to them ([`Discovered::apply`]: a list of [`DiscoveryOp`]s, naming links by
//! their [`LinkKind`] and subscriptions by their [`SubKey`]). Carrying the operations out
//! (the configuration entries, links and SUB sockets) is the shell's (the I/O thread's
//! `io/discovery.rs`, or a simulated node's glue); admission reads the fences
//! ([`crate::proto::node::admit`]).

use std::collections::HashMap;

use crate::proto::discovery::{Intent, MeshEndpoints};
use crate::proto::handshake::Expectation;
pub use crate::proto::node::keys::SubKey;
pub use crate::proto::node::link::LinkKind;
use crate::proto::security::PublicKey;
use crate::proto::wire::Lane;

/// What discovery added to the node's links, and the fences of the descriptors.
#[derive(Debug, Default)]
pub struct Discovered {
    /// The current descriptor fence of each RID (MISSION F3).
    pub fences: HashMap<String, Expectation>,
    /// The RID whose descriptor publishes a ClientServer endpoint (fences manual servers
    /// configured without a RID), by that endpoint.
    pub endpoint_owner: HashMap<String, String>,
    /// Peers discovery appended to the peer list: RID -> index.
    pub(crate) peers: HashMap<String, usize>,
    /// Servers discovery appended to the server list: (RID, channel) -> index.
    pub(crate) servers: HashMap<(String, String), usize>,
    /// Subscriptions discovery opened: (RID, endpoint) -> index, and the generation each was
    /// opened for.
    pub(crate) subs: HashMap<(String, String), (SubKey, u64)>,
}

impl Discovered {
    /// The descriptor fence of RouteMesh peer `rid`, if a descriptor set one.
    pub fn peer_fence(&self, rid: &str) -> Option<&Expectation> {
        self.fences.get(rid)
    }

    /// The descriptor fence of a configured server with RID `rid` (if configured with one)
    /// at `endpoint`: by its RID, or by its endpoint when it was configured without one.
    pub fn server_fence(&self, rid: Option<&str>, endpoint: &str) -> Option<&Expectation> {
        self.server_rid(rid, endpoint)
            .and_then(|rid| self.fences.get(rid))
    }

    /// The RID behind a configured server with RID `rid` (if configured with one) at
    /// `endpoint`: configured, or the owner of its endpoint.
    pub fn server_rid<'a>(&'a self, rid: Option<&'a str>, endpoint: &str) -> Option<&'a str> {
        rid.or_else(|| self.endpoint_owner.get(endpoint).map(String::as_str))
    }
}

/// The dialled links of configured peer `peer`, one per RouteMesh lane.
fn mesh_dials(peer: usize) -> [LinkKind; 2] {
    [Lane::Application, Lane::Completion].map(|lane| LinkKind::MeshDial { peer, lane })
}

/// A configured ClientServer server, as discovery reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerEntry<'a> {
    /// The channel it serves.
    pub channel: &'a str,
    /// The RID it must present, if configured with one.
    pub rid: Option<&'a str>,
    /// Its endpoint.
    pub endpoint: &'a str,
}

/// The node's configured peers and servers (discovery's additions included), as
/// [`Discovered::apply`] reads them, and the keys pinned for endpoints.
pub trait Entries {
    /// The index of the first configured peer with RID `rid`.
    fn peer_index(&self, rid: &str) -> Option<usize>;
    /// How many peers are configured (the index of the next one added).
    fn peers(&self) -> usize;
    /// Configured server `server`, if there is one.
    fn server(&self, server: usize) -> Option<ServerEntry<'_>>;
    /// How many servers are configured (the index of the next one added).
    fn servers(&self) -> usize;
    /// The key `[security.endpoint_keys]` pins for `endpoint`, if any.
    fn endpoint_key(&self, endpoint: &str) -> Option<PublicKey>;
}

/// What the shell does for a discovery intent, in order, from [`Discovered::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryOp {
    /// Append RouteMesh peer `rid` at `endpoints` to the configuration (it becomes the peer
    /// of the next index).
    AddPeer {
        /// The peer's RID.
        rid: String,
        /// Its lane endpoints.
        endpoints: MeshEndpoints,
    },
    /// Discovery's own entry of configured peer `peer` follows its descriptor's endpoints.
    SetPeerEndpoints {
        /// The peer's index in the configuration.
        peer: usize,
        /// Its lane endpoints.
        endpoints: MeshEndpoints,
    },
    /// Append ClientServer server `rid` for `channel` at `endpoint` to the configuration (it
    /// becomes the server of the next index).
    AddServer {
        /// The server's RID.
        rid: String,
        /// The channel it serves.
        channel: String,
        /// Its endpoint.
        endpoint: String,
    },
    /// Discovery's own entry of configured server `server` follows its descriptor's endpoint.
    SetServerEndpoint {
        /// The server's index in the configuration.
        server: usize,
        /// Its endpoint.
        endpoint: String,
    },
    /// Add a link of this kind (due to be dialled at once).
    AddLink(LinkKind),
    /// The link of this kind, if there is one, is dialled again (its descriptor is back).
    Resume(LinkKind),
    /// The link of this kind, if there is one, is withdrawn (the link's `withdraw`).
    Withdraw(LinkKind),
    /// Hold the links of `rid` (only the inbound ones if `inbound_only`) to its new fence of
    /// `generation` ([`Admission::refence`](crate::proto::node::admit::Admission)).
    Refence {
        /// The RID fenced.
        rid: String,
        /// The generation its descriptor names (0 for none).
        generation: u64,
        /// Whether only the RID's inbound links are held to it now.
        inbound_only: bool,
    },
    /// Open a subscription to the publisher at `endpoint` (it becomes the subscription the
    /// shell's next key names).
    Subscribe {
        /// The publisher's endpoint.
        endpoint: String,
        /// CURVE: the key the publisher must hold.
        key: Option<PublicKey>,
        /// Whether that key is the descriptor's (not pinned by configuration).
        key_from_descriptor: bool,
    },
    /// Subscription `sub` of a known publisher is taken up again with the descriptor's key:
    /// not retired; opened again now if it has no socket; if `new_run` names a new
    /// generation of the publisher, its socket is failed (`reconfigured`) and a new one opened
    /// (WIRE.md §7.3).
    Resubscribe {
        /// The subscription.
        sub: SubKey,
        /// CURVE: the key the publisher must hold.
        key: Option<PublicKey>,
        /// Whether that key is the descriptor's.
        key_from_descriptor: bool,
        /// The publisher's new generation, if it changed.
        new_run: Option<u64>,
    },
    /// Subscription `sub` is retired (its descriptor is gone).
    Unsubscribe(SubKey),
}

impl Discovered {
    /// What the discovery agent's `intent` changes: the fences and discovery's own records
    /// here, and the operations the shell carries out, in order. `entries` is the node's
    /// configuration as it is before the operations; `next_sub` the key the shell's next
    /// subscription gets.
    ///
    /// A discovered peer or server becomes a configuration entry with its links, unless a
    /// manual entry (by RID, or a server configured without a RID by its endpoint) exists:
    /// that one is fenced instead of dialled twice, and keeps its endpoints. A known entry is
    /// taken up again (its links resume), a gone one is withdrawn. Every descriptor fences
    /// its RID; a fence alone holds only the RID's inbound links to it, the RID's own intents
    /// hold its dials.
    pub fn apply<E: Entries + ?Sized>(
        &mut self,
        intent: Intent,
        entries: &E,
        next_sub: SubKey,
    ) -> Vec<DiscoveryOp> {
        match intent {
            Intent::Fence { rid, fence } => {
                let generation = fence.generation.unwrap_or(0);
                self.fences.insert(rid.clone(), fence);
                // Inbound connections of another run go now; dialled links follow their own
                // intents (Peer, Server), which come next.
                vec![DiscoveryOp::Refence {
                    rid,
                    generation,
                    inbound_only: true,
                }]
            }
            Intent::FenceGone { rid } => {
                self.fences.remove(&rid);
                Vec::new()
            }
            Intent::Peer {
                rid,
                endpoints,
                fence,
            } => self.peer(rid, endpoints, fence, entries),
            Intent::PeerGone { rid } => match self.peers.get(&rid) {
                Some(&i) => mesh_dials(i)
                    .into_iter()
                    .map(DiscoveryOp::Withdraw)
                    .collect(),
                None => Vec::new(),
            },
            Intent::Server {
                rid,
                channel,
                endpoint,
                fence,
            } => self.server(rid, channel, endpoint, fence, entries),
            Intent::ServerGone { rid, channel } => match self.servers.get(&(rid, channel)) {
                Some(&i) => vec![DiscoveryOp::Withdraw(LinkKind::ClientDial { server: i })],
                None => Vec::new(),
            },
            Intent::Publisher {
                rid,
                endpoint,
                generation,
                security_identity,
            } => {
                // CURVE: the publisher must hold the key its descriptor names (opened only
                // while that key is on this node's allow-list: the store is not trusted with
                // keys); a configured key for that endpoint wins.
                let pinned = entries.endpoint_key(&endpoint);
                let key = pinned.or_else(|| security_identity.parse().ok());
                let key_from_descriptor = pinned.is_none();
                let op = match self.subs.get_mut(&(rid.clone(), endpoint.clone())) {
                    Some((sub, g)) => {
                        let new_run = (*g != generation).then_some(generation);
                        *g = generation;
                        DiscoveryOp::Resubscribe {
                            sub: *sub,
                            key,
                            key_from_descriptor,
                            new_run,
                        }
                    }
                    None => {
                        self.subs
                            .insert((rid, endpoint.clone()), (next_sub, generation));
                        DiscoveryOp::Subscribe {
                            endpoint,
                            key,
                            key_from_descriptor,
                        }
                    }
                };
                vec![op]
            }
            Intent::PublisherGone { rid, endpoint } => match self.subs.get(&(rid, endpoint)) {
                Some(&(sub, _)) => vec![DiscoveryOp::Unsubscribe(sub)],
                None => Vec::new(),
            },
        }
    }

    /// A RouteMesh peer's descriptor ([`Intent::Peer`]).
    fn peer<E: Entries + ?Sized>(
        &mut self,
        rid: String,
        endpoints: MeshEndpoints,
        fence: Expectation,
        entries: &E,
    ) -> Vec<DiscoveryOp> {
        let generation = fence.generation.unwrap_or(0);
        self.fences.insert(rid.clone(), fence);
        let mut ops = Vec::new();
        match entries.peer_index(&rid) {
            None => {
                let i = entries.peers();
                self.peers.insert(rid.clone(), i);
                ops.push(DiscoveryOp::AddPeer {
                    rid: rid.clone(),
                    endpoints,
                });
                ops.extend(mesh_dials(i).map(DiscoveryOp::AddLink));
            }
            Some(i) => {
                if self.peers.get(&rid) == Some(&i) {
                    // Discovery's own entry follows the descriptor; a manual one keeps its
                    // endpoints.
                    ops.push(DiscoveryOp::SetPeerEndpoints { peer: i, endpoints });
                }
                ops.extend(mesh_dials(i).map(DiscoveryOp::Resume));
            }
        }
        // An inbound connection of this RID that came first is fenced too.
        ops.push(DiscoveryOp::Refence {
            rid,
            generation,
            inbound_only: false,
        });
        ops
    }

    /// A ClientServer server's descriptor ([`Intent::Server`]).
    fn server<E: Entries + ?Sized>(
        &mut self,
        rid: String,
        channel: String,
        endpoint: String,
        fence: Expectation,
        entries: &E,
    ) -> Vec<DiscoveryOp> {
        let generation = fence.generation.unwrap_or(0);
        self.fences.insert(rid.clone(), fence);
        self.endpoint_owner.insert(endpoint.clone(), rid.clone());
        // A manual entry for this server (by RID, or by endpoint without one) is fenced
        // instead of dialled twice.
        let manual = (0..entries.servers()).any(|i| {
            !self.servers.values().any(|d| *d == i)
                && entries.server(i).is_some_and(|s| {
                    s.channel == channel
                        && (s.rid == Some(rid.as_str())
                            || (s.rid.is_none() && s.endpoint == endpoint))
                })
        });
        let mut ops = Vec::new();
        let key = (rid.clone(), channel.clone());
        match self.servers.get(&key).copied() {
            Some(i) => {
                if entries.server(i).is_some() {
                    ops.push(DiscoveryOp::SetServerEndpoint {
                        server: i,
                        endpoint,
                    });
                }
                ops.push(DiscoveryOp::Resume(LinkKind::ClientDial { server: i }));
            }
            None if !manual => {
                let i = entries.servers();
                self.servers.insert(key, i);
                ops.push(DiscoveryOp::AddServer {
                    rid: rid.clone(),
                    channel,
                    endpoint,
                });
                ops.push(DiscoveryOp::AddLink(LinkKind::ClientDial { server: i }));
            }
            None => {}
        }
        ops.push(DiscoveryOp::Refence {
            rid,
            generation,
            inbound_only: false,
        });
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::node::keys::Key;

    /// Configured peers by RID, servers (channel, RID, endpoint) and pinned keys, as a test
    /// gives them.
    #[derive(Default)]
    struct Config {
        peers: Vec<&'static str>,
        servers: Vec<(&'static str, Option<&'static str>, &'static str)>,
        pinned: Vec<(&'static str, PublicKey)>,
    }

    impl Entries for Config {
        fn peer_index(&self, rid: &str) -> Option<usize> {
            self.peers.iter().position(|p| *p == rid)
        }

        fn peers(&self) -> usize {
            self.peers.len()
        }

        fn server(&self, server: usize) -> Option<ServerEntry<'_>> {
            let (channel, rid, endpoint) = *self.servers.get(server)?;
            Some(ServerEntry {
                channel,
                rid,
                endpoint,
            })
        }

        fn servers(&self) -> usize {
            self.servers.len()
        }

        fn endpoint_key(&self, endpoint: &str) -> Option<PublicKey> {
            self.pinned
                .iter()
                .find(|(e, _)| *e == endpoint)
                .map(|(_, k)| *k)
        }
    }

    fn fence(rid: &str, generation: u64) -> Expectation {
        Expectation {
            rid: Some(rid.into()),
            generation: Some(generation),
            security_identity: None,
        }
    }

    fn endpoints(port: u16) -> MeshEndpoints {
        MeshEndpoints {
            application: format!("tcp://h:{port}"),
            completion: format!("tcp://h:{}", port + 1),
        }
    }

    fn peer(rid: &str, port: u16, generation: u64) -> Intent {
        Intent::Peer {
            rid: rid.into(),
            endpoints: endpoints(port),
            fence: fence(rid, generation),
        }
    }

    fn refence(rid: &str, generation: u64, inbound_only: bool) -> DiscoveryOp {
        DiscoveryOp::Refence {
            rid: rid.into(),
            generation,
            inbound_only,
        }
    }

    fn lane(peer: usize, lane: Lane) -> LinkKind {
        LinkKind::MeshDial { peer, lane }
    }

    /// A new peer's descriptor appends it with a dial per lane and fences it; its next
    /// descriptor moves discovery's entry and resumes its dials; a manual entry of the RID
    /// keeps its endpoints; the descriptor gone withdraws discovery's dials (D1, F3, F4).
    #[test]
    fn d1_f3_a_peers_descriptor_adds_moves_and_withdraws_its_dials() {
        let none = SubKey::from_index(0);
        let mut d = Discovered::default();
        let mut cfg = Config {
            peers: vec!["manual"],
            ..Config::default()
        };
        assert_eq!(
            d.apply(peer("b", 10, 3), &cfg, none),
            [
                DiscoveryOp::AddPeer {
                    rid: "b".into(),
                    endpoints: endpoints(10)
                },
                DiscoveryOp::AddLink(lane(1, Lane::Application)),
                DiscoveryOp::AddLink(lane(1, Lane::Completion)),
                refence("b", 3, false),
            ]
        );
        assert_eq!(d.peer_fence("b"), Some(&fence("b", 3)));
        cfg.peers.push("b");
        assert_eq!(
            d.apply(peer("b", 20, 4), &cfg, none),
            [
                DiscoveryOp::SetPeerEndpoints {
                    peer: 1,
                    endpoints: endpoints(20)
                },
                DiscoveryOp::Resume(lane(1, Lane::Application)),
                DiscoveryOp::Resume(lane(1, Lane::Completion)),
                refence("b", 4, false),
            ]
        );
        assert_eq!(
            d.apply(peer("manual", 30, 5), &cfg, none),
            [
                DiscoveryOp::Resume(lane(0, Lane::Application)),
                DiscoveryOp::Resume(lane(0, Lane::Completion)),
                refence("manual", 5, false),
            ],
            "a manual entry keeps its endpoints"
        );
        let gone = |rid: &str| Intent::PeerGone { rid: rid.into() };
        assert_eq!(
            d.apply(gone("b"), &cfg, none),
            [
                DiscoveryOp::Withdraw(lane(1, Lane::Application)),
                DiscoveryOp::Withdraw(lane(1, Lane::Completion)),
            ]
        );
        assert_eq!(
            d.apply(gone("manual"), &cfg, none),
            [],
            "a manual intent is never withdrawn"
        );
        // A fence alone holds the inbound links; its removal removes it.
        let f = Intent::Fence {
            rid: "c".into(),
            fence: fence("c", 9),
        };
        assert_eq!(d.apply(f, &cfg, none), [refence("c", 9, true)]);
        assert!(d.peer_fence("c").is_some());
        let gone = Intent::FenceGone { rid: "c".into() };
        assert_eq!(d.apply(gone, &cfg, none), []);
        assert!(d.peer_fence("c").is_none());
    }

    fn server(rid: &str, channel: &str, endpoint: &str, generation: u64) -> Intent {
        Intent::Server {
            rid: rid.into(),
            channel: channel.into(),
            endpoint: endpoint.into(),
            fence: fence(rid, generation),
        }
    }

    /// A discovered server becomes an entry with its dial unless a manual entry of the
    /// channel names its RID, or, configured without a RID, its endpoint: that one is fenced
    /// instead of dialled twice (F3). Its next descriptor moves discovery's entry.
    #[test]
    fn d1_f3_a_servers_descriptor_adds_a_dial_unless_a_manual_entry_has_it() {
        let none = SubKey::from_index(0);
        let mut d = Discovered::default();
        let mut cfg = Config {
            servers: vec![
                ("pump", None, "tcp://m:1"),
                ("valve", Some("r"), "tcp://r:1"),
            ],
            ..Config::default()
        };
        assert_eq!(
            d.apply(server("m", "pump", "tcp://m:1", 2), &cfg, none),
            [refence("m", 2, false)],
            "the manual entry without a RID has that endpoint"
        );
        assert_eq!(
            d.server_fence(None, "tcp://m:1"),
            Some(&fence("m", 2)),
            "fenced by the descriptor of its endpoint"
        );
        assert_eq!(
            d.apply(server("r", "valve", "tcp://r:9", 2), &cfg, none),
            [refence("r", 2, false)],
            "the manual entry names the RID"
        );
        let added = d.apply(server("r", "pump", "tcp://r:2", 2), &cfg, none);
        assert_eq!(
            added,
            [
                DiscoveryOp::AddServer {
                    rid: "r".into(),
                    channel: "pump".into(),
                    endpoint: "tcp://r:2".into()
                },
                DiscoveryOp::AddLink(LinkKind::ClientDial { server: 2 }),
                refence("r", 2, false),
            ],
            "another channel of the RID"
        );
        cfg.servers.push(("pump", Some("r"), "tcp://r:2"));
        assert_eq!(
            d.apply(server("r", "pump", "tcp://r:3", 3), &cfg, none),
            [
                DiscoveryOp::SetServerEndpoint {
                    server: 2,
                    endpoint: "tcp://r:3".into()
                },
                DiscoveryOp::Resume(LinkKind::ClientDial { server: 2 }),
                refence("r", 3, false),
            ]
        );
        let gone = |channel: &str| Intent::ServerGone {
            rid: "r".into(),
            channel: channel.into(),
        };
        assert_eq!(
            d.apply(gone("pump"), &cfg, none),
            [DiscoveryOp::Withdraw(LinkKind::ClientDial { server: 2 })]
        );
        assert_eq!(d.apply(gone("valve"), &cfg, none), []);
    }

    /// A publisher's descriptor opens a subscription under the key it names unless one is
    /// pinned; the same run takes it up again, a new generation replaces its socket (T3), and
    /// the descriptor gone retires it.
    #[test]
    fn t3_a_publishers_descriptor_subscribes_and_a_new_run_replaces_the_socket() {
        let key = PublicKey::from_bytes([4; 32]);
        let pinned = PublicKey::from_bytes([5; 32]);
        let publisher = |endpoint: &str, generation| Intent::Publisher {
            rid: "p".into(),
            endpoint: endpoint.into(),
            generation,
            security_identity: key.to_z85(),
        };
        let cfg = Config {
            pinned: vec![("tcp://p:2", pinned)],
            ..Config::default()
        };
        let mut d = Discovered::default();
        let s0 = SubKey::from_index(0);
        let s1 = SubKey::from_index(1);
        assert_eq!(
            d.apply(publisher("tcp://p:1", 1), &cfg, s0),
            [DiscoveryOp::Subscribe {
                endpoint: "tcp://p:1".into(),
                key: Some(key),
                key_from_descriptor: true
            }]
        );
        assert_eq!(
            d.apply(publisher("tcp://p:2", 1), &cfg, s1),
            [DiscoveryOp::Subscribe {
                endpoint: "tcp://p:2".into(),
                key: Some(pinned),
                key_from_descriptor: false
            }],
            "the pinned key wins"
        );
        let again = |new_run| {
            [DiscoveryOp::Resubscribe {
                sub: s0,
                key: Some(key),
                key_from_descriptor: true,
                new_run,
            }]
        };
        let next = SubKey::from_index(2);
        assert_eq!(d.apply(publisher("tcp://p:1", 1), &cfg, next), again(None));
        assert_eq!(
            d.apply(publisher("tcp://p:1", 7), &cfg, next),
            again(Some(7))
        );
        assert_eq!(
            d.apply(publisher("tcp://p:1", 7), &cfg, next),
            again(None),
            "the new run is the known one now"
        );
        let gone = |endpoint: &str| Intent::PublisherGone {
            rid: "p".into(),
            endpoint: endpoint.into(),
        };
        assert_eq!(
            d.apply(gone("tcp://p:2"), &cfg, next),
            [DiscoveryOp::Unsubscribe(s1)]
        );
        assert_eq!(d.apply(gone("tcp://p:9"), &cfg, next), []);
    }
}
