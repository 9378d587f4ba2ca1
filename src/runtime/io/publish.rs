//! Where this thread publishes each connection's send queue for the async side: a queue is
//! opened when a connection that carries one-way records becomes ready (a RouteMesh peer's
//! Application lane, a ClientServer client of ours, a server we dial), published in the
//! [`LinkTable`](crate::runtime::outbound::LinkTable) under its route (the peer's RID, or
//! the channel of configured servers), and unpublished and closed when the connection
//! leaves ready, the records still in it counted in that failure. Which links carry one-way
//! records, and under which route, is the node core's
//! ([`Link::send_route`](crate::proto::node::link::Link::send_route)). Draining the queues is
//! `io/outbound.rs`'s.

use std::sync::Arc;

use super::{IoThread, LinkKey};
use crate::proto::node::link::SendRoute;
use crate::proto::state::FailureReason;
use crate::runtime::outbound::{Closed, SendQueue};

/// Where a link's one-way records are published in the link table.
enum Route {
    /// By the peer's (or client's) RID.
    Peer(String),
    /// Among the ready servers of a channel.
    Server(String),
}

impl Route {
    /// The route as the node core names it, borrowed.
    fn as_send_route(&self) -> SendRoute<'_> {
        match self {
            Route::Peer(rid) => SendRoute::Peer(rid),
            Route::Server(channel) => SendRoute::Server(channel),
        }
    }
}

impl IoThread {
    /// Where link `k`'s one-way records are published, if it carries any
    /// ([`Link::send_route`](crate::proto::node::link::Link::send_route)).
    fn route_of(&self, k: LinkKey) -> Option<Route> {
        let route = self
            .core
            .links
            .get(k)?
            .send_route(&self.local.cfg.servers[..])?;
        Some(match route {
            SendRoute::Peer(rid) => Route::Peer(rid.to_owned()),
            SendRoute::Server(channel) => Route::Server(channel.to_owned()),
        })
    }

    /// Whether link `k` sends for `route` (what [`Self::route_of`] says, compared in place:
    /// [`Self::publish_route`] asks it of every link, and a copy of each name would cost an
    /// allocation per link per reconnect).
    fn routes_to(&self, k: LinkKey, route: &Route) -> bool {
        self.core.links.get(k).is_some_and(|l| {
            l.send_route(&self.local.cfg.servers[..]) == Some(route.as_send_route())
        })
    }

    /// Link `k`'s connection became ready: it gets a send queue, published in the table.
    pub(super) fn open_send_queue(&mut self, k: LinkKey) {
        let Some(route) = self.route_of(k) else {
            return;
        };
        let who = match &route {
            Route::Peer(rid) => rid.as_str(),
            Route::Server(channel) => channel.as_str(),
        };
        let who: Arc<str> = Arc::from(who);
        let Some(c) = self.core.links.get(k).and_then(|l| l.conn.as_ref()) else {
            return;
        };
        let q = Arc::new(SendQueue::new(k, c.id, who));
        if let Some(old) = self.outbound.queues.open(k, q) {
            old.close(Closed::NotReady);
        }
        match &route {
            Route::Peer(rid) => self.outbound.opened.peer(rid, k),
            Route::Server(channel) => self.outbound.opened.server(channel, k),
        }
        self.publish_route(&route);
    }

    /// Link `k`'s connection leaves ready: its queue is unpublished and closed. Returns how
    /// many records were still in it (not sent), counted in the metric under `reason`.
    pub(super) fn close_send_queue(
        &mut self,
        k: LinkKey,
        why: Closed,
        reason: FailureReason,
    ) -> usize {
        let route = self.route_of(k);
        let Some(q) = self
            .core
            .links
            .get(k)
            .and_then(|l| l.conn.as_ref())
            .and_then(|c| self.outbound.queues.take(k, c.id))
        else {
            return 0;
        };
        let unsent = q.close(why);
        if let Some(route) = route {
            self.publish_route(&route);
        }
        if unsent > 0 {
            // The reason only: no RID, endpoint or connection id in labels (MISSION O2).
            metrics::counter!("zmesh_records_unsent_total", "reason" => reason.as_str())
                .increment(unsent as u64);
            tracing::warn!(
                link = %k,
                unsent,
                reason = reason.as_str(),
                "queued records not sent"
            );
        }
        unsent
    }

    /// Publishes, for `route`, the queues of the current ready links: a peer's first such
    /// link in link order (as a lookup by RID always found), a channel's every ready server.
    /// Only the links that opened a queue for the route can have one (the queue is opened
    /// in [`Self::open_send_queue`] alone, and a link's route does not change while its
    /// connection lasts); those found without one leave the list.
    fn publish_route(&mut self, route: &Route) {
        let listed = match route {
            Route::Peer(rid) => self.outbound.opened.peers_of(rid),
            Route::Server(channel) => self.outbound.opened.servers_of(channel),
        };
        let mut queues = Vec::new();
        for k in listed {
            match self.ready_queue(k).filter(|_| self.routes_to(k, route)) {
                Some(q) => queues.push(q),
                None if self.has_queue_for(k, route) => {}
                None => match route {
                    Route::Peer(rid) => self.outbound.opened.forget_peer(rid, k),
                    Route::Server(channel) => self.outbound.opened.forget_server(channel, k),
                },
            }
        }
        match route {
            Route::Peer(rid) => self.outbound.table.set_peer(rid, queues.into_iter().next()),
            Route::Server(channel) => self.outbound.table.set_servers(channel, queues),
        }
    }

    /// Whether link `k` still has a queue (ready or not) for `route`: it stays listed.
    fn has_queue_for(&self, k: LinkKey, route: &Route) -> bool {
        self.core
            .links
            .get(k)
            .and_then(|l| l.conn.as_ref())
            .is_some_and(|c| self.outbound.queues.get(k, c.id).is_some())
            && self.routes_to(k, route)
    }

    /// The send queue of link `k`'s ready connection.
    pub(super) fn ready_queue(&self, k: LinkKey) -> Option<Arc<SendQueue>> {
        let c = self.core.links.get(k)?.conn.as_ref()?;
        self.outbound
            .queues
            .get(k, c.id)
            .cloned()
            .filter(|_| c.ready)
    }
}
