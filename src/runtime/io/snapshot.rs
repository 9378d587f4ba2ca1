//! The node's snapshot (MISSION O1): which links and subscriptions it lists and what it shows
//! of them is the node core's ([`crate::proto::node::core::snapshot`]); this file maps that
//! listing into [`Snapshot`] values, with what only the thread knows: where a link sits in
//! the configuration (topology, role, peer, endpoint, the channels it serves), the calls
//! pending on it, and the node's own state, sockets, descriptors and security.

use std::time::Instant;

use super::parts::sockets::SlotRole;
use super::{Host, IoThread};
use crate::proto::handshake::Identity;
use crate::proto::node::core::snapshot::{self, Listed, Row};
use crate::proto::node::link::{Link, LinkKind};
use crate::proto::state::Failure;
use crate::runtime::link::LinkId;
use crate::runtime::records::{self, Lane};
use crate::runtime::snapshot::{
    FailureSnapshot, LinkSnapshot, SecuritySnapshot, Snapshot, SNAPSHOT_LIMIT,
};

impl IoThread {
    /// The node's snapshot at `now`.
    pub(super) fn snapshot(&self, now: Instant) -> Snapshot {
        let listing = snapshot::listing(
            &self.core,
            &self.local.configured(),
            self.local.curve.is_some(),
            SNAPSHOT_LIMIT,
        );
        let links = listing.rows.iter().map(|r| self.row(r, now)).collect();
        Snapshot {
            rid: self.local.me.rid.clone(),
            generation: self.local.me.generation,
            host: match self.local.host {
                Host::Running => "running",
                Host::Draining => "draining",
                Host::Stopped => "stopped",
            },
            pending_calls: self.caller.calls().pending(),
            serving_calls: self.callee.serving().in_flight(),
            links,
            omitted: listing.omitted,
            links_ready: listing.ready,
            recent_refusals: self.recent_refusals(now),
            zmq_contexts: self.sockets.contexts.contexts(),
            zmq_sockets: self.sockets.contexts.open_sockets(),
            fds_open: crate::runtime::fds::open_count(),
            fd_limit: crate::runtime::fds::limit(),
            discovery: None,
            security: SecuritySnapshot {
                mode: if self.local.curve.is_some() {
                    "curve"
                } else {
                    "none"
                },
                public_key: self.local.curve.as_ref().map(|p| p.public.to_z85()),
                allowed_keys: self.core.accepting.gate.allowed_keys(),
                allow_list_reloads: self.core.accepting.gate.allow_reloads,
                allow_list_error: self.core.accepting.gate.allow_error.clone(),
            },
        }
    }

    /// Where link `l` sits: its topology, role, peer RID (if known) and endpoint.
    fn link_place(&self, l: &Link) -> (&'static str, &'static str, Option<String>, String) {
        match &l.kind {
            LinkKind::MeshDial { peer, lane } => {
                let p = self.local.cfg.peers.get(*peer);
                let ep = p.map(|p| match lane {
                    Lane::Completion => p.completion.clone(),
                    _ => p.application.clone(),
                });
                (
                    "route_mesh",
                    records::lane_name(*lane),
                    p.map(|p| p.rid.clone()),
                    ep.unwrap_or_default(),
                )
            }
            LinkKind::ClientDial { server } => {
                let s = self.local.cfg.servers.get(*server);
                let peer = l
                    .conn
                    .as_ref()
                    .and_then(|c| c.peer.as_ref())
                    .map(|p| p.rid.clone());
                (
                    "client_server",
                    "client",
                    peer.or(s.and_then(|s| s.rid.clone())),
                    s.map(|s| s.endpoint.clone()).unwrap_or_default(),
                )
            }
            LinkKind::Inbound { rid, lane } => {
                let ep = self
                    .sockets
                    .slots
                    .values()
                    .flatten()
                    .find(|s| s.role == SlotRole::Bound(*lane))
                    .map(|s| s.endpoint.clone())
                    .unwrap_or_default();
                let (topo, role) = match lane {
                    Lane::ClientServer => ("client_server", "server_inbound"),
                    Lane::Application => ("route_mesh", "application_inbound"),
                    Lane::Completion => ("route_mesh", "completion_inbound"),
                };
                (topo, role, Some(rid.clone()), ep)
            }
        }
    }

    /// The snapshot row of `row`, as the core lists it.
    fn row(&self, row: &Row<'_>, now: Instant) -> LinkSnapshot {
        let age = |t: Instant| now.saturating_duration_since(t).as_millis() as u64;
        let (id, (topology, role, peer, endpoint), serves, pending_calls) = match row.listed {
            Listed::Link(k) => {
                let l = &self.core.links[k];
                let serves = match &l.kind {
                    LinkKind::ClientDial { server } => self
                        .local
                        .cfg
                        .servers
                        .get(*server)
                        .map(|s| vec![s.channel.clone()]),
                    _ => row.peer.map(Identity::served_channels),
                };
                let pending = row
                    .connection
                    .map_or(0, |c| self.caller.calls().pending_on((k, c)));
                let id = self.local.link_id(&l.kind);
                (id, self.link_place(l), serves, pending)
            }
            Listed::Sub(i) => {
                let endpoint = self.core.subs[i].endpoint.clone();
                let id = LinkId::Subscription {
                    endpoint: endpoint.clone(),
                };
                (id, ("fanout", "subscriber", None, endpoint), None, 0)
            }
        };
        LinkSnapshot {
            id,
            topology,
            role,
            peer,
            peer_generation: row.peer.map(|p| p.generation),
            endpoint,
            serves: serves.unwrap_or_default(),
            state: row.state,
            connection_id: row.connection.map(|c| c.0),
            last_failure: row.last_failure.map(|f| failure_row(f, now)),
            last_receive_age_ms: row.last_receive.map(age),
            last_receive_unix_ms: row
                .last_receive
                .map(|t| crate::display_time::unix_millis(t, now)),
            records_received: row.records,
            pending_calls,
            ready_count: row.readies,
            failure_count: row.failures,
            peer_security_identity: row.security_identity.clone(),
            verified: row.verified,
        }
    }
}

/// The snapshot of a recorded failure, aged at `now`.
fn failure_row(f: &Failure, now: Instant) -> FailureSnapshot {
    FailureSnapshot {
        reason: f.reason,
        detail: f.detail.clone(),
        age_ms: now.saturating_duration_since(f.at).as_millis() as u64,
    }
}
