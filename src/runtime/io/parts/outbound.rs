//! The one-way side of the node as one part: the link table published for the async side,
//! and the turns of the per-link send queues with this loop turn's budget. Draining the
//! queues into libzmq is the thread's (`io/outbound.rs`, whose module docs give the rules).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::proto::node::answers::AnswerQueue;
use crate::proto::node::keys::{Key, LinkKey};
use crate::proto::sched::IdMap;
use crate::proto::ConnId;
use crate::runtime::outbound::{LinkTable, SendQueue, Taken};

/// Records sent from send queues per loop turn, over every link.
pub(crate) const SENDS_PER_TURN: usize = 2048;

/// The one-way side of the node: the link table the async side sends through, and which of
/// its send queues the I/O thread drains this turn.
pub(crate) struct Outbound {
    /// Where one-way records go, published for the async side.
    pub(crate) table: Arc<LinkTable>,
    /// Which links' send queues have records to drain, and this turn's budget.
    pub(crate) turns: SendTurns,
    /// The callee's ACCEPTs, REPLYs and ITEMs, per link, held for the end of the turn or
    /// behind a full pipe (see [`crate::proto::node::answers`]).
    pub(crate) answers: AnswerQueue,
    /// Which links opened a send queue for each route.
    pub(crate) opened: Opened,
    /// Each link's send queue, for the connection it was opened for (see [`Queues`]).
    pub(crate) queues: Queues,
}

/// The send queue of each link's connection: a queue belongs to the connection it was opened
/// for ([`SendQueue::conn`]), so a queue left here by a connection that is gone is never
/// handed out for the link's next one.
#[derive(Default)]
pub(crate) struct Queues {
    by_link: IdMap<LinkKey, Arc<SendQueue>>,
}

impl Queues {
    /// The queue of link `k`'s connection `conn`, if it has one.
    pub(crate) fn get(&self, k: LinkKey, conn: ConnId) -> Option<&Arc<SendQueue>> {
        self.by_link.get(&k).filter(|q| q.conn() == conn)
    }

    /// `q` becomes the queue of link `k`'s connection `q.conn()`; returns the queue that
    /// connection had before, if any.
    pub(crate) fn open(&mut self, k: LinkKey, q: Arc<SendQueue>) -> Option<Arc<SendQueue>> {
        let conn = q.conn();
        self.by_link.insert(k, q).filter(|old| old.conn() == conn)
    }

    /// Takes the queue of link `k`'s connection `conn`, if it has one.
    pub(crate) fn take(&mut self, k: LinkKey, conn: ConnId) -> Option<Arc<SendQueue>> {
        self.get(k, conn)?;
        self.by_link.remove(&k)
    }
}

/// The links that opened a send queue, per route (a peer's RID, a channel of configured
/// servers), in key order: where the thread looks for a route's ready queues when one opens
/// or closes, instead of at every link (a reconnect on an endpoint of N connections would
/// otherwise compare N names). A link stays listed after its queue closed until the thread
/// looks again and finds it gone ([`Opened::forget_peer`], [`Opened::forget_server`]); so
/// every link with an open queue for a route is listed under it, and the thread checks each
/// listed one.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    peers: HashMap<String, BTreeSet<LinkKey>>,
    servers: HashMap<String, BTreeSet<LinkKey>>,
}

impl Opened {
    /// Link `k` opened a send queue for peer `rid`.
    pub(crate) fn peer(&mut self, rid: &str, k: LinkKey) {
        self.peers.entry(rid.to_owned()).or_default().insert(k);
    }

    /// Link `k` opened a send queue for the servers of `channel`.
    pub(crate) fn server(&mut self, channel: &str, k: LinkKey) {
        self.servers
            .entry(channel.to_owned())
            .or_default()
            .insert(k);
    }

    /// The links listed for peer `rid`, in key order.
    pub(crate) fn peers_of(&self, rid: &str) -> Vec<LinkKey> {
        self.peers
            .get(rid)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The links listed for the servers of `channel`, in key order.
    pub(crate) fn servers_of(&self, channel: &str) -> Vec<LinkKey> {
        self.servers
            .get(channel)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Link `k` no longer has an open queue for peer `rid`.
    pub(crate) fn forget_peer(&mut self, rid: &str, k: LinkKey) {
        if let Some(s) = self.peers.get_mut(rid) {
            s.remove(&k);
            if s.is_empty() {
                self.peers.remove(rid);
            }
        }
    }

    /// Link `k` no longer has an open queue for the servers of `channel`.
    pub(crate) fn forget_server(&mut self, channel: &str, k: LinkKey) {
        if let Some(s) = self.servers.get_mut(channel) {
            s.remove(&k);
            if s.is_empty() {
                self.servers.remove(channel);
            }
        }
    }
}

/// Which links' send queues have records to drain, in turn order, and how many records the
/// queues may still send in this loop turn.
pub(crate) struct SendTurns {
    /// Links whose send queue has records to drain, in turn order.
    pub(crate) pending: VecDeque<LinkKey>,
    /// Links whose send queue waits for room in libzmq's pipe; tried again every turn.
    pub(crate) blocked: Vec<LinkKey>,
    /// Whether each link (by key) is in one of the two lists.
    listed: Vec<bool>,
    /// Records the send queues may still send in this loop turn.
    pub(crate) budget: usize,
    /// A burst of records taken from a send queue (kept to reuse its allocation).
    pub(crate) scratch: Taken,
    /// The two frames of the PACK being written (envelope, payloads), kept to reuse their
    /// allocations from PACK to PACK and burst to burst.
    pub(crate) pack: (Vec<u8>, Vec<u8>),
}

impl SendTurns {
    /// No link listed; a full turn's budget.
    pub(crate) fn new() -> SendTurns {
        SendTurns {
            pending: VecDeque::new(),
            blocked: Vec::new(),
            listed: Vec::new(),
            budget: SENDS_PER_TURN,
            scratch: Taken::default(),
            pack: (Vec::new(), Vec::new()),
        }
    }

    /// A new loop turn: the full budget again.
    pub(crate) fn start_turn(&mut self) {
        self.budget = SENDS_PER_TURN;
    }

    /// True if link `k` is listed (pending or blocked).
    pub(crate) fn is_listed(&self, k: LinkKey) -> bool {
        self.listed.get(k.index()).copied().unwrap_or(false)
    }

    pub(crate) fn set_listed(&mut self, k: LinkKey, listed: bool) {
        let i = k.index();
        if self.listed.len() <= i {
            self.listed.resize(i + 1, false);
        }
        self.listed[i] = listed;
    }

    /// Lists link `k`: blocked (waits for room in its pipe), or pending.
    pub(crate) fn list(&mut self, k: LinkKey, blocked: bool) {
        self.set_listed(k, true);
        if blocked {
            self.blocked.push(k);
        } else {
            self.pending.push_back(k);
        }
    }

    /// Puts link `k` back after its burst: `None` unlisted (drained or gone), `Some(false)`
    /// pending, `Some(true)` blocked.
    pub(crate) fn put_back(&mut self, k: LinkKey, left: Option<bool>) {
        match left {
            None => self.set_listed(k, false),
            Some(false) => self.pending.push_back(k),
            Some(true) => self.blocked.push(k),
        }
    }

    /// Starts a flush: blocked links are tried again after the pending ones; returns how
    /// many links this flush visits at most.
    pub(crate) fn begin_flush(&mut self) -> usize {
        let blocked = std::mem::take(&mut self.blocked);
        self.pending.extend(blocked);
        self.pending.len()
    }

    /// The next link to visit, while the budget lasts.
    pub(crate) fn next(&mut self) -> Option<LinkKey> {
        if self.budget == 0 {
            return None;
        }
        self.pending.pop_front()
    }

    /// Unlists every link (the node stops).
    pub(crate) fn clear(&mut self) {
        self.pending.clear();
        self.blocked.clear();
        self.listed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: usize) -> LinkKey {
        LinkKey::from_index(i)
    }

    /// MISSION P7: the links that opened a queue for a route come back in key order (a peer's
    /// first ready link is the one a scan of every link finds), per route, and a forgotten
    /// link, or a route with none left, is gone.
    #[test]
    fn p7_opened_queues_are_listed_per_route_in_key_order() {
        let mut o = Opened::default();
        o.peer("b", k(7));
        o.peer("b", k(2));
        o.peer("c", k(3));
        o.server("orders", k(5));
        o.server("orders", k(1));
        assert_eq!(o.peers_of("b"), vec![k(2), k(7)]);
        assert_eq!(o.peers_of("c"), vec![k(3)]);
        assert_eq!(o.servers_of("orders"), vec![k(1), k(5)]);
        assert_eq!(
            o.peers_of("orders"),
            Vec::<LinkKey>::new(),
            "peers and servers apart"
        );
        o.forget_peer("b", k(2));
        o.forget_server("orders", k(5));
        o.forget_server("orders", k(1));
        assert_eq!(o.peers_of("b"), vec![k(7)]);
        assert_eq!(o.servers_of("orders"), Vec::<LinkKey>::new());
        assert!(
            !o.servers.contains_key("orders"),
            "an empty route is dropped"
        );
    }
}
