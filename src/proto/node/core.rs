//! The node core: the node-wide parts of a node's protocol state in one value, the links
//! with their connections, the timer table, the bound sockets' admission tables, discovery's
//! additions, the liveness table and the call routes. A shell holds one [`NodeCore`] and
//! hands it what its sockets and its clock say.

use std::time::Instant;

use super::accepting::Accepting;
use super::discovered::Discovered;
use super::gate::Gate;
use super::keys::{CallKey, LinkKey, Tracked};
use super::link::{Link, LinkKind};
use super::live::Live;
use super::routes::Routes;
use super::timers::TimerTable;
use crate::proto::sched::IdMap;
use crate::proto::wire::Lane;

/// The node-wide parts of the node core.
pub(crate) struct NodeCore {
    /// Every configured peer lane, configured server and inbound connection, with its
    /// current connection; every mutable access marks the link for the timer table.
    pub(crate) links: Tracked<LinkKey, Link>,
    /// Every link's and subscription's earliest deadline, and the disconnect sweeps.
    pub(crate) timers: TimerTable,
    /// The bound sockets' gate, their inbound connections and the ones refused.
    pub(crate) accepting: Accepting,
    /// Automatic mode: links added by discovery and the descriptors' fences.
    pub(crate) discovered: Discovered,
    /// The one structure owning every liveness machine of this node (MISSION L8).
    pub(crate) liveness: Live,
    /// Where calls go: the links' routes, indexed (brought up to date by the shell's
    /// `sync_links`).
    pub(crate) routes: Routes,
}

impl NodeCore {
    /// A node core with no links, the bound sockets' gate `gate`, and liveness ids seeded
    /// from the node's `generation`.
    pub(crate) fn new(gate: Gate, generation: u64) -> NodeCore {
        NodeCore {
            links: Tracked::default(),
            timers: TimerTable::new(),
            accepting: Accepting {
                inbound: IdMap::default(),
                refused: super::accepting::Refused::default(),
                gate,
            },
            discovered: Discovered::default(),
            liveness: Live::new(generation),
            routes: Routes::default(),
        }
    }

    /// Adds a link of `kind` (its first dial due at once).
    pub(crate) fn add_link(&mut self, kind: LinkKind, now: Instant) -> LinkKey {
        self.links.push(Link::new(kind, now))
    }

    /// The inbound link of `rid`'s connections on `lane`, added (with no redial of its own)
    /// if there is none yet.
    pub(crate) fn inbound_link(&mut self, rid: &str, lane: Lane, now: Instant) -> LinkKey {
        let kind = LinkKind::Inbound {
            rid: rid.to_owned(),
            lane,
        };
        match self.links.position(|l| l.kind == kind) {
            Some(k) => k,
            None => {
                let k = self.add_link(kind, now);
                self.links[k].retry_at = None;
                k
            }
        }
    }

    /// The call key of answers arriving on link `k`: the connection itself, if it is a
    /// Completion lane or a ClientServer connection (answers never travel on the Application
    /// lane).
    pub(crate) fn answer_key(&self, k: LinkKey) -> Option<CallKey> {
        let l = self.links.get(k)?;
        let c = l.conn.as_ref()?;
        match l.lane()? {
            Lane::ClientServer | Lane::Completion => Some((k, c.id)),
            Lane::Application => None,
        }
    }

    /// Counts `records` records received on link `k`'s connection, the last at `now`.
    pub(crate) fn on_link_activity(&mut self, k: LinkKey, records: u64, now: Instant) {
        // None changes nothing, and is not to mark the link for the timer table.
        if records == 0 {
            return;
        }
        if let Some(l) = self.links.get_mut(k) {
            l.handle_receipt(records, now);
        }
    }

    /// Where answers to calls keyed `key` are sent: that connection, if it is still current.
    pub(crate) fn answer_route(&self, key: CallKey) -> Option<LinkKey> {
        let c = self.links.get(key.0)?.conn.as_ref()?;
        (c.id == key.1 && c.ready).then_some(key.0)
    }
}
