//! The directory of known descriptors and the link intents they imply (MISSION D1, T3, T4,
//! F3).
//!
//! The store hands the [`Directory`] either everything it holds (a *reload*: the first read,
//! a reconnect, a compacted history) or one change (a descriptor put, a descriptor removed
//! or expired). Either way the directory compares what the descriptors asked of this node
//! before with what they ask now, and answers the difference as [`Intent`]s:
//!
//! | descriptor of a peer that | intent |
//! |---|---|
//! | binds RouteMesh lanes, and one of the pair has a Server membership | [`Intent::Peer`]: dial both lanes, admit only its fence |
//! | binds RouteMesh lanes, and neither has a Server membership (Object Client pair) | nothing at all: never dialled, no NotRequired round trip (T4) |
//! | serves channel C on a ClientServer endpoint, and this node is an Object Client of C | [`Intent::Server`] for (peer, C) |
//! | publishes on endpoint E | [`Intent::Publisher`]: one SUB socket for (peer, E) (T3) |
//! | changed generation | the same intents with the new fence: the I/O thread closes the old run's connection, waits for the close, then dials (F3, F4) |
//! | exists at all | [`Intent::Fence`]: admit this RID only with the descriptor's fence, also on inbound connections (a ClientServer client, a RouteMesh peer this node does not dial) |
//! | disappeared (left, or its lease expired) | [`Intent::FenceGone`], [`Intent::PeerGone`] and friends: stop dialling |
//!
//! The fence of every intent is the descriptor's complete set (RID, security identity,
//! generation): a manual intent for the same peer cannot weaken it (F3,
//! [`Expectation::fenced_by`]). A fence comes before the dial intents of its descriptor.
//!
//! Intents are idempotent: applying the same one twice changes nothing, so a reload that
//! finds nothing new yields no intent at all, and one that does yields only the difference.

use std::collections::{BTreeMap, BTreeSet};

use super::descriptor::{Descriptor, MeshEndpoints};
use crate::proto::handshake::{Expectation, Membership, Role};

/// What this node is and takes from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// This node's RID (its own descriptor is never an intent).
    pub rid: String,
    /// True if this node holds a Server membership (T4).
    pub is_server: bool,
    /// Channels this node is an Object Client of: it dials the ClientServer servers of these.
    pub client_channels: BTreeSet<String>,
    /// Dial RouteMesh peers found in descriptors.
    pub route_mesh: bool,
    /// Dial ClientServer servers found in descriptors (of [`Local::client_channels`]).
    pub client_server: bool,
    /// Subscribe to every publisher found in descriptors, one SUB socket each.
    pub subscribe: bool,
}

impl Local {
    /// A node with these memberships that takes everything the store offers.
    pub fn new(rid: impl Into<String>, memberships: &[Membership]) -> Local {
        Local {
            rid: rid.into(),
            is_server: memberships.iter().any(|m| m.role == Role::Server),
            client_channels: memberships
                .iter()
                .filter(|m| m.role == Role::ObjectClient)
                .map(|m| m.channel.clone())
                .collect(),
            route_mesh: true,
            client_server: true,
            subscribe: true,
        }
    }
}

/// What the descriptors ask of this node's links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Admit RID `rid` only with `fence`, whoever dials (MISSION F3): every descriptor but
    /// this node's own sets one, whether or not this node dials it. A new fence (new
    /// generation) closes the connections of the old run.
    Fence {
        /// The RID.
        rid: String,
        /// Its descriptor's RID + security identity + generation.
        fence: Expectation,
    },
    /// The descriptor of `rid` is gone: its fence goes with it.
    FenceGone {
        /// The RID.
        rid: String,
    },
    /// Dial RouteMesh peer `rid` on both lanes at `endpoints`; admit only `fence`. For a peer
    /// already known: a new fence (new generation) replaces the current connection, after
    /// its close was observed.
    Peer {
        /// The peer's RID.
        rid: String,
        /// Its lane endpoints.
        endpoints: MeshEndpoints,
        /// Its descriptor's RID + security identity + generation.
        fence: Expectation,
    },
    /// Stop dialling RouteMesh peer `rid` (its descriptor is gone).
    PeerGone {
        /// The peer's RID.
        rid: String,
    },
    /// Dial ClientServer server `rid` for `channel` at `endpoint`; admit only `fence`.
    Server {
        /// The server's RID.
        rid: String,
        /// The channel it serves.
        channel: String,
        /// Its ClientServer endpoint.
        endpoint: String,
        /// Its descriptor's RID + security identity + generation.
        fence: Expectation,
    },
    /// Stop dialling server `rid` for `channel`.
    ServerGone {
        /// The server's RID.
        rid: String,
        /// The channel.
        channel: String,
    },
    /// Subscribe to publisher `rid` at `endpoint` with a SUB socket of its own (T3); a new
    /// `generation` means a new process run: a new socket.
    Publisher {
        /// The publisher's RID.
        rid: String,
        /// Its PUB endpoint.
        endpoint: String,
        /// Its lifecycle generation.
        generation: u64,
        /// Its descriptor's security identity: under CURVE the public key the publisher
        /// must hold (a subscriber accepts no other publisher at that endpoint).
        security_identity: String,
    },
    /// Stop subscribing to publisher `rid` at `endpoint`.
    PublisherGone {
        /// The publisher's RID.
        rid: String,
        /// The endpoint.
        endpoint: String,
    },
}

/// What an intent is about: one intent per key at a time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    // First: a fence is applied before the dial intents of the same descriptor.
    Fence(String),
    Peer(String),
    Server(String, String),
    Publisher(String, String),
}

impl Key {
    fn gone(self) -> Intent {
        match self {
            Key::Fence(rid) => Intent::FenceGone { rid },
            Key::Peer(rid) => Intent::PeerGone { rid },
            Key::Server(rid, channel) => Intent::ServerGone { rid, channel },
            Key::Publisher(rid, endpoint) => Intent::PublisherGone { rid, endpoint },
        }
    }
}

/// The descriptors this node knows (every one but its own) and the intents they imply.
#[derive(Debug, Clone)]
pub struct Directory {
    local: Local,
    known: BTreeMap<String, Descriptor>,
}

impl Directory {
    /// An empty directory for `local`.
    pub fn new(local: Local) -> Directory {
        Directory {
            local,
            known: BTreeMap::new(),
        }
    }

    /// What this node is.
    pub fn local(&self) -> &Local {
        &self.local
    }

    /// Descriptors known (this node's own excluded).
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// True when no descriptor is known.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// The known descriptor of `rid`.
    pub fn get(&self, rid: &str) -> Option<&Descriptor> {
        self.known.get(rid)
    }

    /// The store's complete set replaces what was known; returns the difference as intents.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_reload(&mut self, descriptors: Vec<Descriptor>) -> Vec<Intent> {
        let before = self.all_wants();
        self.known = descriptors
            .into_iter()
            .filter(|d| d.rid != self.local.rid)
            .map(|d| (d.rid.clone(), d))
            .collect();
        diff(before, self.all_wants())
    }

    /// One descriptor was put (new, or a new version of a known RID).
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_put(&mut self, d: Descriptor) -> Vec<Intent> {
        if d.rid == self.local.rid {
            return Vec::new();
        }
        let before = self
            .known
            .get(&d.rid)
            .map(|old| self.wants(old))
            .unwrap_or_default();
        let after = self.wants(&d);
        self.known.insert(d.rid.clone(), d);
        diff(before, after)
    }

    /// Several changes of the store's set at once, as a watch delivers them (`None`: the
    /// RID's descriptor was removed or expired). Only each RID's last change is applied, so
    /// a batch means what a reload at its end would: a watch that resumes after an outage
    /// replays the changes it missed one by one, and applying an old run's descriptor from
    /// that backlog would fence out the newer run already admitted (closing its ready
    /// connections), only for the next change to fence it back in.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_changes(&mut self, changes: Vec<(String, Option<Descriptor>)>) -> Vec<Intent> {
        let mut seen = std::collections::HashSet::new();
        let mut last: Vec<(String, Option<Descriptor>)> = changes
            .into_iter()
            .rev()
            .filter(|(rid, _)| seen.insert(rid.clone()))
            .collect();
        last.reverse();
        let mut out = Vec::new();
        for (rid, d) in last {
            out.extend(match d {
                Some(d) => self.handle_put(d),
                None => self.handle_removed(&rid),
            });
        }
        out
    }

    /// The descriptor of `rid` was removed or expired.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_removed(&mut self, rid: &str) -> Vec<Intent> {
        match self.known.remove(rid) {
            Some(old) => diff(self.wants(&old), BTreeMap::new()),
            None => Vec::new(),
        }
    }

    fn all_wants(&self) -> BTreeMap<Key, Intent> {
        self.known.values().flat_map(|d| self.wants(d)).collect()
    }

    /// What one descriptor asks of this node.
    fn wants(&self, d: &Descriptor) -> BTreeMap<Key, Intent> {
        let mut out = BTreeMap::new();
        if d.rid == self.local.rid {
            return out;
        }
        let fence = d.fence();
        out.insert(
            Key::Fence(d.rid.clone()),
            Intent::Fence {
                rid: d.rid.clone(),
                fence: fence.clone(),
            },
        );
        // T4: an Object Client pair without a Server membership needs no connection, so
        // discovery asks for none (no dial, no NotRequired round trip).
        let pair_needed = self.local.is_server || d.is_server();
        if let (true, true, Some(rm)) = (self.local.route_mesh, pair_needed, &d.route_mesh) {
            out.insert(
                Key::Peer(d.rid.clone()),
                Intent::Peer {
                    rid: d.rid.clone(),
                    endpoints: rm.clone(),
                    fence: fence.clone(),
                },
            );
        }
        if let (true, Some(endpoint)) = (self.local.client_server, &d.server) {
            for channel in d.served_channels() {
                if self.local.client_channels.contains(channel) {
                    out.insert(
                        Key::Server(d.rid.clone(), channel.to_owned()),
                        Intent::Server {
                            rid: d.rid.clone(),
                            channel: channel.to_owned(),
                            endpoint: endpoint.clone(),
                            fence: fence.clone(),
                        },
                    );
                }
            }
        }
        if self.local.subscribe {
            for endpoint in &d.publishers {
                out.insert(
                    Key::Publisher(d.rid.clone(), endpoint.clone()),
                    Intent::Publisher {
                        rid: d.rid.clone(),
                        endpoint: endpoint.clone(),
                        generation: d.generation,
                        security_identity: d.security_identity.clone(),
                    },
                );
            }
        }
        out
    }
}

/// The intents that take `before` to `after`: what ended first (a gone intent closes before
/// its replacement opens), then what is new or changed, each in key order.
fn diff(before: BTreeMap<Key, Intent>, mut after: BTreeMap<Key, Intent>) -> Vec<Intent> {
    let mut out = Vec::new();
    for (key, old) in before {
        match after.get(&key) {
            None => out.push(key.gone()),
            Some(new) if *new == old => {
                after.remove(&key);
            }
            Some(_) => {}
        }
    }
    out.extend(after.into_values());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(rid: &str, generation: u64, role: Role) -> Descriptor {
        Descriptor {
            rid: rid.into(),
            generation,
            security_identity: format!("sec-{rid}"),
            memberships: vec![Membership {
                role,
                channel: "orders".into(),
            }],
            route_mesh: Some(MeshEndpoints {
                application: format!("tcp://127.0.0.1:1{generation}"),
                completion: format!("tcp://127.0.0.1:2{generation}"),
            }),
            server: None,
            publishers: Vec::new(),
        }
    }

    fn local(role: Role) -> Local {
        Local::new(
            "a",
            &[Membership {
                role,
                channel: "orders".into(),
            }],
        )
    }

    fn rids(intents: &[Intent]) -> Vec<String> {
        intents
            .iter()
            // Fences are checked by their own tests.
            .filter(|i| !matches!(i, Intent::Fence { .. } | Intent::FenceGone { .. }))
            .map(|i| match i {
                Intent::Fence { rid, .. } => format!("fence {rid}"),
                Intent::FenceGone { rid } => format!("fence-gone {rid}"),
                Intent::Peer { rid, fence, .. } => {
                    format!("peer {rid} {}", fence.generation.unwrap_or(0))
                }
                Intent::PeerGone { rid } => format!("gone {rid}"),
                Intent::Server { rid, channel, .. } => format!("server {rid} {channel}"),
                Intent::ServerGone { rid, channel } => format!("server-gone {rid} {channel}"),
                Intent::Publisher {
                    rid, generation, ..
                } => format!("pub {rid} {generation}"),
                Intent::PublisherGone { rid, endpoint } => format!("pub-gone {rid} {endpoint}"),
            })
            .collect()
    }

    /// MISSION T4 (discovery rule): an Object Client pair without Server membership gets no
    /// intent at all; a server peer does.
    #[test]
    fn t4_object_client_pair_gets_no_intent() {
        let mut dir = Directory::new(local(Role::ObjectClient));
        let intents = dir.handle_reload(vec![
            desc("d", 1, Role::ObjectClient),
            desc("b", 2, Role::Server),
        ]);
        assert_eq!(rids(&intents), ["peer b 2"]);
        // The same pair from the server's side is needed.
        let mut dir = Directory::new(local(Role::Server));
        let intents = dir.handle_reload(vec![desc("d", 1, Role::ObjectClient)]);
        assert_eq!(rids(&intents), ["peer d 1"]);
    }

    /// MISSION F3: the intent carries the descriptor's complete fence; a new generation is a
    /// new intent (the I/O thread replaces the connection), the same descriptor again is none.
    #[test]
    fn f3_new_generation_is_a_new_fence_and_repeats_are_silent() {
        let mut dir = Directory::new(local(Role::Server));
        let first = dir.handle_put(desc("b", 7, Role::Server));
        let Some(Intent::Peer { fence, .. }) = first.get(1) else {
            panic!("{first:?}");
        };
        assert_eq!(*fence, desc("b", 7, Role::Server).fence());
        assert!(dir.handle_put(desc("b", 7, Role::Server)).is_empty());
        assert!(dir
            .handle_reload(vec![desc("b", 7, Role::Server)])
            .is_empty());
        assert_eq!(
            rids(&dir.handle_put(desc("b", 8, Role::Server))),
            ["peer b 8"]
        );
    }

    #[test]
    fn removal_and_reload_without_it_stop_dialling() {
        let mut dir = Directory::new(local(Role::Server));
        let _ = dir.handle_reload(vec![desc("b", 1, Role::Server), desc("c", 2, Role::Server)]);
        assert_eq!(rids(&dir.handle_removed("b")), ["gone b"]);
        assert!(dir.handle_removed("b").is_empty());
        assert_eq!(rids(&dir.handle_reload(Vec::new())), ["gone c"]);
        assert!(dir.is_empty());
    }

    #[test]
    fn own_descriptor_is_never_an_intent() {
        let mut dir = Directory::new(local(Role::Server));
        assert!(dir.handle_put(desc("a", 1, Role::Server)).is_empty());
        assert!(dir
            .handle_reload(vec![desc("a", 2, Role::Server)])
            .is_empty());
        assert_eq!(dir.len(), 0);
    }

    /// MISSION T3: one intent (one SUB socket) per publisher descriptor and endpoint; a new
    /// generation re-subscribes, a moved endpoint ends the old subscription first.
    #[test]
    fn t3_one_subscription_per_publisher_descriptor() {
        let mut dir = Directory::new(local(Role::ObjectClient));
        let mut p = desc("p", 1, Role::ObjectClient);
        p.route_mesh = None;
        p.publishers = vec!["ipc:///tmp/p.sock".into()];
        let mut q = p.clone();
        q.rid = "q".into();
        q.publishers = vec!["ipc:///tmp/q.sock".into()];
        assert_eq!(
            rids(&dir.handle_reload(vec![p.clone(), q.clone()])),
            ["pub p 1", "pub q 1"]
        );
        let mut p2 = p.clone();
        p2.generation = 2;
        p2.publishers = vec!["ipc:///tmp/p2.sock".into()];
        assert_eq!(
            rids(&dir.handle_put(p2)),
            ["pub-gone p ipc:///tmp/p.sock", "pub p 2"]
        );
    }

    #[test]
    fn servers_per_channel_of_object_client_memberships() {
        let mut dir = Directory::new(local(Role::ObjectClient));
        let mut s = desc("s", 3, Role::Server);
        s.route_mesh = None;
        s.server = Some("tcp://127.0.0.1:9".into());
        s.memberships.push(Membership {
            role: Role::Server,
            channel: "other".into(),
        });
        assert_eq!(rids(&dir.handle_put(s)), ["server s orders"]);
        assert_eq!(rids(&dir.handle_removed("s")), ["server-gone s orders"]);
    }

    #[test]
    fn opting_out_of_a_topology_asks_for_none_of_it() {
        let mut l = local(Role::Server);
        l.route_mesh = false;
        l.subscribe = false;
        let mut dir = Directory::new(l);
        let mut b = desc("b", 1, Role::Server);
        b.publishers = vec!["ipc:///tmp/b.sock".into()];
        assert!(rids(&dir.handle_put(b)).is_empty());
        assert_eq!(dir.len(), 1);
    }

    /// MISSION F3: every descriptor fences its RID, also one this node never dials (a
    /// ClientServer client, an Object Client pair), before any dial intent of it; a new
    /// generation is a new fence; a descriptor gone takes its fence with it.
    #[test]
    fn f3_every_descriptor_fences_its_rid_before_its_dials() {
        let mut dir = Directory::new(local(Role::Server));
        let mut client = desc("c", 4, Role::ObjectClient);
        client.route_mesh = None;
        let b = desc("b", 7, Role::Server);
        let intents = dir.handle_reload(vec![client.clone(), b.clone()]);
        assert_eq!(
            intents,
            vec![
                Intent::Fence {
                    rid: "b".into(),
                    fence: b.fence()
                },
                Intent::Fence {
                    rid: "c".into(),
                    fence: client.fence()
                },
                Intent::Peer {
                    rid: "b".into(),
                    endpoints: b.route_mesh.clone().expect("bound"),
                    fence: b.fence()
                },
            ]
        );
        client.generation = 5;
        assert_eq!(
            dir.handle_put(client.clone()),
            vec![Intent::Fence {
                rid: "c".into(),
                fence: client.fence()
            }]
        );
        assert_eq!(
            dir.handle_removed("c"),
            vec![Intent::FenceGone { rid: "c".into() }]
        );
    }

    /// A batch of changes is applied as its last change per RID: a backlog that replays an
    /// old run's descriptor before the newer run's (a watch resumed after an outage) never
    /// fences the newer run out, and gives the intents a reload at its end would give.
    #[test]
    fn d1_f3_a_batch_of_changes_applies_the_last_change_per_rid() {
        let mut d = Directory::new(local(Role::Server));
        let _ = d.handle_put(desc("b", 2, Role::Server));
        let backlog = vec![
            ("b".to_owned(), Some(desc("b", 3, Role::Server))),
            ("b".to_owned(), None),
            ("c".to_owned(), Some(desc("c", 1, Role::Server))),
            ("b".to_owned(), Some(desc("b", 4, Role::Server))),
        ];
        let mut reloaded = Directory::new(local(Role::Server));
        let _ = reloaded.handle_put(desc("b", 2, Role::Server));
        let expected =
            reloaded.handle_reload(vec![desc("b", 4, Role::Server), desc("c", 1, Role::Server)]);
        let got = d.handle_changes(backlog);
        let fences = |is: &[Intent]| -> Vec<u64> {
            is.iter()
                .filter_map(|i| match i {
                    Intent::Fence { fence, .. } => fence.generation,
                    _ => None,
                })
                .collect()
        };
        // In the order of each RID's last change: c's, then b's.
        assert_eq!(fences(&got), vec![1, 4], "no fence for the old run 3");
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        assert_eq!(
            sorted(rids(&got)),
            sorted(rids(&expected)),
            "what a reload would give"
        );
        assert_eq!(d.get("b").map(|x| x.generation), Some(4));
        assert_eq!(d.get("c").map(|x| x.generation), Some(1));
    }
}
