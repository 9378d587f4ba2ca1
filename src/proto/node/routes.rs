//! Where calls go, as an index over the links instead of a scan of them: the ready connection
//! of each peer's RouteMesh lane, the peers whose Application lane says they serve a channel,
//! and the configured ClientServer servers of each channel.
//!
//! Routing a call, and answering one, asked these questions of every link in turn (for a
//! channel served by N RouteMesh peers, N scans of every link per call). The index holds what
//! each link contributes ([`LinkRoutes`], derived from the link by the thread) and is brought
//! up to date for exactly the links a turn touched (the link table is a
//! [`Tracked`](crate::proto::node::keys::Tracked) table) before every lookup, so it always
//! answers what the scan would have, in the same order (links by key).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::proto::node::keys::{CallKey, Key, LinkKey};
use crate::proto::wire::Lane;
use crate::proto::ConnId;

/// What one link contributes to the routes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LinkRoutes {
    /// A ready connection with a known peer: the peer's RID, the link's lane and the
    /// connection.
    pub(crate) lane: Option<(String, Lane, ConnId)>,
    /// An Application lane with a connection whose peer's handshake named Server
    /// memberships: the peer's RID and those channels (ready or not yet).
    pub(crate) serves: Option<(String, Vec<String>)>,
    /// A ClientServer server this node dials: its configured channel, and the connection if
    /// it is ready.
    pub(crate) client: Option<(String, Option<ConnId>)>,
}

/// What a link the index has not seen contributes.
static NOTHING: LinkRoutes = LinkRoutes {
    lane: None,
    serves: None,
    client: None,
};

/// The index (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Routes {
    /// What each link (by position) contributes now.
    links: Vec<LinkRoutes>,
    /// Ready connections by peer RID and then lane ([`lane_index`]), in link order.
    lanes: HashMap<String, [BTreeSet<(LinkKey, ConnId)>; 3]>,
    /// Per channel, the Application-lane links whose peer serves it, with that peer's RID.
    serving: HashMap<String, BTreeMap<LinkKey, String>>,
    /// Per channel, the configured servers this node dials, with their ready connection.
    clients: HashMap<String, BTreeMap<LinkKey, Option<ConnId>>>,
    /// The answer of the last [`Routes::ready_for`], kept so that routing a call allocates
    /// nothing once it has grown.
    ready: Vec<(LinkKey, CallKey)>,
}

impl Routes {
    /// Link `k` now contributes `now` (its earlier contribution is withdrawn).
    pub(crate) fn update(&mut self, k: LinkKey, now: LinkRoutes) {
        let i = k.index();
        if self.links.len() <= i {
            self.links.resize_with(i + 1, LinkRoutes::default);
        }
        if self.links[i] == now {
            return;
        }
        let old = std::mem::replace(&mut self.links[i], now.clone());
        if let Some((rid, lane, conn)) = old.lane {
            if let Some(sets) = self.lanes.get_mut(&rid) {
                sets[lane_index(lane)].remove(&(k, conn));
                if sets.iter().all(BTreeSet::is_empty) {
                    self.lanes.remove(&rid);
                }
            }
        }
        if let Some((_, channels)) = old.serves {
            for ch in channels {
                if let Some(m) = self.serving.get_mut(&ch) {
                    m.remove(&k);
                    if m.is_empty() {
                        self.serving.remove(&ch);
                    }
                }
            }
        }
        if let Some((ch, _)) = old.client {
            if let Some(m) = self.clients.get_mut(&ch) {
                m.remove(&k);
                if m.is_empty() {
                    self.clients.remove(&ch);
                }
            }
        }
        if let Some((rid, lane, conn)) = now.lane {
            self.lanes.entry(rid).or_default()[lane_index(lane)].insert((k, conn));
        }
        if let Some((rid, channels)) = now.serves {
            for ch in channels {
                self.serving.entry(ch).or_default().insert(k, rid.clone());
            }
        }
        if let Some((ch, conn)) = now.client {
            self.clients.entry(ch).or_default().insert(k, conn);
        }
    }

    /// What link `k` contributes now.
    pub(crate) fn of(&self, k: LinkKey) -> &LinkRoutes {
        self.links.get(k.index()).unwrap_or(&NOTHING)
    }

    /// The ready connection of `rid`'s lane `lane` (the first link in key order, as a scan
    /// would find it).
    pub(crate) fn lane_of(&self, rid: &str, lane: Lane) -> Option<CallKey> {
        self.lanes.get(rid)?[lane_index(lane)].first().copied()
    }

    /// Where a call to `channel` may go, and whether this node dials a configured server of
    /// it: for each peer whose Application lane says it serves `channel` (in link order, a
    /// peer with two such links twice) and whose two RouteMesh lanes are ready, the
    /// Application lane's link and the Completion lane's connection; then each ready
    /// configured server (its link and connection), in link order.
    pub(crate) fn ready_for(&mut self, channel: &str) -> (&[(LinkKey, CallKey)], bool) {
        self.ready.clear();
        if let Some(m) = self.serving.get(channel) {
            for rid in m.values() {
                let Some(sets) = self.lanes.get(rid) else {
                    continue;
                };
                let first = |lane| sets[lane_index(lane)].first().copied();
                if let (Some(app), Some(completion)) =
                    (first(Lane::Application), first(Lane::Completion))
                {
                    self.ready.push((app.0, completion));
                }
            }
        }
        let configured = match self.clients.get(channel) {
            None => false,
            Some(m) => {
                let ready = m.iter().filter_map(|(&k, c)| c.map(|id| (k, (k, id))));
                self.ready.extend(ready);
                true
            }
        };
        (&self.ready, configured)
    }

    /// The RIDs of the peers whose Application lane says they serve `channel`, in link order
    /// (a peer with two such links is listed twice, as a scan lists it).
    #[cfg(test)]
    pub(crate) fn serving(&self, channel: &str) -> Vec<String> {
        self.serving
            .get(channel)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether this node dials a configured server of `channel`, and the ready ones, in link
    /// order.
    #[cfg(test)]
    pub(crate) fn clients(&self, channel: &str) -> (bool, Vec<(LinkKey, CallKey)>) {
        match self.clients.get(channel) {
            None => (false, Vec::new()),
            Some(m) => (
                true,
                m.iter()
                    .filter_map(|(&k, c)| c.map(|id| (k, (k, id))))
                    .collect(),
            ),
        }
    }
}

/// A lane's place in the per-RID array of [`Routes`].
fn lane_index(lane: Lane) -> usize {
    match lane {
        Lane::Application => 0,
        Lane::Completion => 1,
        Lane::ClientServer => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(i: usize) -> LinkKey {
        LinkKey::from_index(i)
    }

    fn ready(rid: &str, lane: Lane, conn: u64) -> LinkRoutes {
        LinkRoutes {
            lane: Some((rid.to_owned(), lane, ConnId(conn))),
            ..LinkRoutes::default()
        }
    }

    #[test]
    fn lanes_follow_each_update_and_answer_in_link_order() {
        let mut r = Routes::default();
        r.update(link(3), ready("b", Lane::Completion, 7));
        r.update(link(1), ready("b", Lane::Completion, 5));
        assert_eq!(
            r.lane_of("b", Lane::Completion),
            Some((link(1), ConnId(5))),
            "the first link in key order"
        );
        assert_eq!(r.lane_of("b", Lane::Application), None);
        r.update(link(1), LinkRoutes::default());
        assert_eq!(r.lane_of("b", Lane::Completion), Some((link(3), ConnId(7))));
        // A new connection of the same link replaces the old one.
        r.update(link(3), ready("b", Lane::Completion, 9));
        assert_eq!(r.lane_of("b", Lane::Completion), Some((link(3), ConnId(9))));
        r.update(link(3), LinkRoutes::default());
        assert_eq!(r.lane_of("b", Lane::Completion), None);
        assert!(r.lanes.is_empty(), "nothing left behind");
    }

    #[test]
    fn a_call_goes_to_serving_peers_with_both_lanes_ready_then_to_ready_servers() {
        let mut r = Routes::default();
        // Peer b serves pump on link 2 (its Application lane) and has both lanes ready; peer
        // c serves it on link 4 but only its Application lane is ready.
        r.update(
            link(2),
            LinkRoutes {
                lane: Some(("b".to_owned(), Lane::Application, ConnId(20))),
                serves: Some(("b".to_owned(), vec!["pump".to_owned()])),
                client: None,
            },
        );
        r.update(link(3), ready("b", Lane::Completion, 30));
        r.update(
            link(4),
            LinkRoutes {
                lane: Some(("c".to_owned(), Lane::Application, ConnId(40))),
                serves: Some(("c".to_owned(), vec!["pump".to_owned()])),
                client: None,
            },
        );
        let server = |conn: Option<u64>| LinkRoutes {
            client: Some(("pump".to_owned(), conn.map(ConnId))),
            ..LinkRoutes::default()
        };
        r.update(link(6), server(Some(60)));
        r.update(link(5), server(None));
        let (ready, configured) = r.ready_for("pump");
        assert!(configured, "a configured server of pump is dialled");
        assert_eq!(
            ready,
            [
                (link(2), (link(3), ConnId(30))),
                (link(6), (link(6), ConnId(60)))
            ],
            "b by its lanes, then the one ready server; c (one lane) and link 5 (not ready) not"
        );
        r.update(link(5), server(Some(50)));
        r.update(link(5), server(Some(50)));
        r.update(link(3), LinkRoutes::default());
        let (ready, _) = r.ready_for("pump");
        assert_eq!(
            ready,
            [
                (link(5), (link(5), ConnId(50))),
                (link(6), (link(6), ConnId(60)))
            ],
            "b's Completion lane left ready; the servers in link order"
        );
        assert_eq!(r.ready_for("valve"), (&[][..], false));
    }

    #[test]
    fn servers_and_clients_of_a_channel_are_listed_in_link_order() {
        let mut r = Routes::default();
        let serves = |rid: &str, chs: &[&str]| LinkRoutes {
            serves: Some((
                rid.to_owned(),
                chs.iter().map(|c| (*c).to_owned()).collect(),
            )),
            ..LinkRoutes::default()
        };
        r.update(link(4), serves("c", &["pump"]));
        r.update(link(2), serves("b", &["pump", "valve"]));
        assert_eq!(r.serving("pump"), vec!["b".to_owned(), "c".to_owned()]);
        assert_eq!(r.serving("valve"), vec!["b".to_owned()]);
        r.update(link(2), serves("b", &["valve"]));
        assert_eq!(r.serving("pump"), vec!["c".to_owned()]);
        let client = |ch: &str, conn: Option<u64>| LinkRoutes {
            client: Some((ch.to_owned(), conn.map(ConnId))),
            ..LinkRoutes::default()
        };
        assert_eq!(r.clients("pump"), (false, Vec::new()));
        r.update(link(6), client("pump", None));
        assert_eq!(
            r.clients("pump"),
            (true, Vec::new()),
            "configured, none ready"
        );
        r.update(link(5), client("pump", Some(3)));
        r.update(link(6), client("pump", Some(4)));
        assert_eq!(
            r.clients("pump"),
            (
                true,
                vec![
                    (link(5), (link(5), ConnId(3))),
                    (link(6), (link(6), ConnId(4)))
                ]
            )
        );
        for i in [2, 4, 5, 6] {
            r.update(link(i), LinkRoutes::default());
        }
        assert_eq!(r.serving("valve"), Vec::<String>::new());
        assert_eq!(r.clients("pump"), (false, Vec::new()));
        assert!(
            r.serving.is_empty() && r.clients.is_empty(),
            "nothing left behind"
        );
    }
}
