//! The node's snapshot (MISSION O1): every link and subscription with its state, last failure
//! and counters, count-limited.
//!
//! A RouteMesh lane is listed by the links that serve it or try to. Two kinds of link are not
//! listed, because they are history of a lane and not a failure of it: a dial that stood down
//! for the peer's own connection (duplicate resolution, MISSION T1; it dials again only if
//! that connection fails, and is listed again from then on), and any link without a
//! connection whose peer and lane are ready on another link (the inbound link of a dial the
//! peer stood down).

use std::collections::HashSet;
use std::time::Instant;

use super::parts::sockets::SlotRole;
use super::{Host, IoThread, LinkKey};
use crate::proto::handshake::Identity;
use crate::proto::node::link::{Link, LinkKind};
use crate::proto::state::Failure;
use crate::runtime::link::LinkId;
use crate::runtime::records::{self, Lane};
use crate::runtime::snapshot::{
    FailureSnapshot, LinkSnapshot, SecuritySnapshot, Snapshot, SNAPSHOT_LIMIT,
};

impl IoThread {
    pub(super) fn snapshot(&self, now: Instant) -> Snapshot {
        let mut links = Vec::new();
        let ready_lanes: HashSet<(&str, Lane)> = self
            .core
            .links
            .iter()
            .filter(|(_, l)| l.state.is_ready())
            .filter_map(|(_, l)| self.local.mesh_lane(&l.kind))
            .collect();
        for (k, l) in self.core.links.iter() {
            // A discovered intent whose descriptor is gone, once its last connection ended.
            if l.is_removed() {
                continue;
            }
            let served_elsewhere = l.conn.is_none()
                && !l.state.is_ready()
                && self
                    .local
                    .mesh_lane(&l.kind)
                    .is_some_and(|lane| ready_lanes.contains(&lane));
            if served_elsewhere || (l.yielded && l.conn.is_none()) {
                continue;
            }
            links.push(self.link_row(k, l, now));
        }
        self.sub_rows(now, &mut links);
        let links_ready = links
            .iter()
            .filter(|l| l.state == crate::proto::state::ConnState::Ready)
            .count();
        let omitted = links.len().saturating_sub(SNAPSHOT_LIMIT);
        links.truncate(SNAPSHOT_LIMIT);
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
            omitted,
            links_ready,
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

    /// The snapshot row of link `k`.
    fn link_row(&self, k: LinkKey, l: &Link, now: Instant) -> LinkSnapshot {
        let age = |t: Instant| now.saturating_duration_since(t).as_millis() as u64;
        let (topology, role, peer, endpoint) = self.link_place(l);
        let peer_generation = l
            .conn
            .as_ref()
            .and_then(|c| c.peer.as_ref())
            .map(|p| p.generation);
        let serves = match &l.kind {
            LinkKind::ClientDial { server } => self
                .local
                .cfg
                .servers
                .get(*server)
                .map(|s| vec![s.channel.clone()]),
            _ => l
                .conn
                .as_ref()
                .and_then(|c| c.peer.as_ref())
                .map(Identity::served_channels),
        };
        LinkSnapshot {
            id: self.local.link_id(&self.core.links[k].kind),
            topology,
            role,
            peer,
            peer_generation,
            endpoint,
            serves: serves.unwrap_or_default(),
            state: l.state.state(),
            connection_id: l.conn.as_ref().map(|c| c.id.0),
            last_failure: l.state.last_failure().map(|f| failure_row(f, now)),
            last_receive_age_ms: l.last_receive.map(age),
            last_receive_unix_ms: l
                .last_receive
                .map(|t| crate::display_time::unix_millis(t, now)),
            records_received: l.records,
            pending_calls: l
                .conn
                .as_ref()
                .map(|c| self.caller.calls().pending_on((k, c.id)))
                .unwrap_or(0),
            ready_count: l.state.readies(),
            failure_count: l.state.failures(),
            peer_security_identity: l
                .conn
                .as_ref()
                .filter(|c| c.peer.is_some())
                .map(|_| self.caller_of(k).security_identity),
            verified: l
                .conn
                .as_ref()
                .is_some_and(|c| c.peer.is_some() && c.verified_key.is_some()),
        }
    }

    /// The snapshot rows of the fanout subscriptions.
    fn sub_rows(&self, now: Instant, links: &mut Vec<LinkSnapshot>) {
        let age = |t: Instant| now.saturating_duration_since(t).as_millis() as u64;
        // A discovered publisher whose descriptor is gone, once its socket is closed.
        for s in self
            .core
            .subs
            .values()
            .filter(|s| !(s.retired && s.slot.is_none()))
        {
            let last = self
                .core
                .liveness
                .table()
                .publisher(s.live)
                .and_then(|w| w.last_receive_at());
            links.push(LinkSnapshot {
                id: LinkId::Subscription {
                    endpoint: s.endpoint.clone(),
                },
                topology: "fanout",
                role: "subscriber",
                peer: None,
                peer_generation: None,
                endpoint: s.endpoint.clone(),
                serves: Vec::new(),
                state: s.state.state(),
                connection_id: s.conn_id.map(|c| c.0),
                last_failure: s.state.last_failure().map(|f| failure_row(f, now)),
                last_receive_age_ms: last.map(age),
                last_receive_unix_ms: last.map(|t| crate::display_time::unix_millis(t, now)),
                records_received: s.records,
                pending_calls: 0,
                ready_count: s.state.readies(),
                failure_count: s.state.failures(),
                peer_security_identity: s.key.filter(|_| s.state.is_ready()).map(|k| k.to_z85()),
                verified: self.local.curve.is_some() && s.state.is_ready(),
            });
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
