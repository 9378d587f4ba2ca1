//! Automatic mode in the I/O thread (MISSION D1, F3, F4, T3, T4): carrying out what the node
//! core decides for each of the discovery agent's [`Intent`]s
//! ([`Discovered::apply`](crate::proto::node::discovered::Discovered::apply): configuration
//! entries, links and subscriptions added, resumed, withdrawn, refenced; what withdrawing or
//! refencing does to a link is the core's too, [`core::withdraw`], [`core::refence`]), and
//! the descriptor this node publishes.
//!
//! A discovered RouteMesh peer or ClientServer server becomes a configured entry like a
//! manual one (appended to the node's peer and server lists, dialled the same way); a
//! discovered publisher gets a SUB socket of its own (T3). What discovery adds:
//!
//! - **Fences (F3).** Every descriptor's RID + security identity + generation is the fence of
//!   that RID ([`Intent::Fence`], also for a node this one never dials): admission (HELLO,
//!   WELCOME) requires all three, for discovered links and for manual intents of the same
//!   peer alike ([`Expectation::fenced_by`]: a manual entry's generation 0 cannot weaken it),
//!   and on inbound connections of both topologies: a RouteMesh peer, and a ClientServer
//!   client whose HELLO does not match its descriptor is refused like a RouteMesh one
//!   (`generation_mismatch`, `security_failure`). A manual server without a RID is fenced by
//!   the descriptor that publishes its endpoint. A new fence closes the ready inbound
//!   connections of the old run (`reconfigured`).
//! - **Replacement (F3, F4).** A new generation of a known RID closes every connection of the
//!   old run ([`FailureReason::Reconfigured`]), and closes a dial still in progress (it
//!   carries the old fence); the link then waits until libzmq confirmed the close of the old
//!   socket (links.rs, `closing`) before it dials the new run, and the new handshake must
//!   present the new fence. Late frames of the old connection find no link (L6).
//! - **Withdrawal.** A descriptor that disappears removes the intents it made: a dial in
//!   progress is closed, a link waiting to redial goes `not_connected`, and an established
//!   connection stays, ready for as long as liveness keeps it (a lease is not a liveness
//!   signal, F5), until its deadline, a transport error or the peer's CLOSE ends it; it is
//!   then not redialled. A withdrawn link that holds nothing any more leaves the snapshot
//!   ([`Link::is_removed`](crate::proto::node::link::Link::is_removed)); the same RID's descriptor coming
//!   back takes it up again. A manual intent is never withdrawn.

use std::time::Instant;

use super::parts::sockets::SlotRole;
use super::{IoThread, LinkKey, SubKey};
use crate::config::{EndpointKind, NodeConfig, PeerConfig, ServerConfig};
use crate::proto::discovery::{Descriptor, Intent, MeshEndpoints};
use crate::proto::node::core;
use crate::proto::node::discovered::{DiscoveryOp, Entries, ServerEntry};
use crate::proto::node::keys::Tracked;
use crate::proto::node::link::{Link, LinkKind};
use crate::proto::security::PublicKey;
use crate::proto::state::FailureReason;
use crate::runtime::event::DiscoveryEvent;
use crate::runtime::event::NodeEvent;
use crate::runtime::records::Lane;

/// The configuration as discovery reads it (its own additions included).
impl Entries for NodeConfig {
    fn peer_index(&self, rid: &str) -> Option<usize> {
        self.peers.iter().position(|p| p.rid == rid)
    }

    fn peers(&self) -> usize {
        self.peers.len()
    }

    fn server(&self, server: usize) -> Option<ServerEntry<'_>> {
        self.servers.get(server).map(|s| ServerEntry {
            channel: &s.channel,
            rid: s.rid.as_deref(),
            endpoint: &s.endpoint,
        })
    }

    fn servers(&self) -> usize {
        self.servers.len()
    }

    fn endpoint_key(&self, endpoint: &str) -> Option<PublicKey> {
        self.security.endpoint_key(endpoint)
    }
}

impl IoThread {
    /// The descriptor this node publishes: its identity and the endpoints it bound, each as
    /// `[discovery.advertise]` says other nodes dial it.
    pub(crate) fn descriptor(&self) -> Descriptor {
        let advertise = self
            .local
            .cfg
            .discovery
            .as_ref()
            .and_then(|d| d.advertise.clone())
            .unwrap_or_default();
        let bound = |role: SlotRole| {
            let kind = match role {
                SlotRole::Bound(Lane::ClientServer) => EndpointKind::Server,
                _ => EndpointKind::RouteMesh,
            };
            self.sockets
                .slots
                .values()
                .flatten()
                .find(|s| s.role == role)
                .map(|s| advertise.advertised(kind, &s.endpoint))
        };
        let route_mesh = match (
            bound(SlotRole::Bound(Lane::Application)),
            bound(SlotRole::Bound(Lane::Completion)),
        ) {
            (Some(application), Some(completion)) => Some(MeshEndpoints {
                application,
                completion,
            }),
            _ => None,
        };
        Descriptor::of(
            &self.local.me,
            route_mesh,
            bound(SlotRole::Bound(Lane::ClientServer)),
            self.fanout
                .publisher
                .iter()
                .map(|p| advertise.advertised(EndpointKind::Publisher, &p.endpoint))
                .collect(),
        )
    }

    /// Applies what the discovery agent learnt: its events first (they explain the state
    /// changes that follow), then its intents, in order, each as the node core decides
    /// ([`Discovered::apply`](crate::proto::node::discovered::Discovered::apply)).
    pub(super) fn on_discovery(
        &mut self,
        intents: Vec<Intent>,
        events: Vec<DiscoveryEvent>,
        now: Instant,
    ) {
        for e in events {
            tracing::info!(event = %e, "discovery");
            self.app.push(NodeEvent::Discovery(e));
        }
        if self.local.stopping() {
            return;
        }
        for intent in intents {
            let next_sub = self.core.subs.next_key();
            for op in self
                .core
                .discovered
                .apply(intent, &self.local.cfg, next_sub)
            {
                self.discovery_op(op, now);
            }
        }
    }

    /// Carries out one operation of a discovery intent.
    fn discovery_op(&mut self, op: DiscoveryOp, now: Instant) {
        let link =
            |links: &Tracked<LinkKey, Link>, kind: &LinkKind| links.position(|l| l.kind == *kind);
        match op {
            DiscoveryOp::AddPeer { rid, endpoints } => self.local.cfg.peers.push(PeerConfig {
                rid,
                application: endpoints.application,
                completion: endpoints.completion,
                generation: None,
                security_identity: None,
                batch_calls: true,
            }),
            DiscoveryOp::SetPeerEndpoints { peer, endpoints } => {
                if let Some(p) = self.local.cfg.peers.get_mut(peer) {
                    p.application = endpoints.application;
                    p.completion = endpoints.completion;
                }
            }
            DiscoveryOp::AddServer {
                rid,
                channel,
                endpoint,
            } => self.local.cfg.servers.push(ServerConfig {
                channel,
                endpoint,
                rid: Some(rid),
                batch_calls: true,
            }),
            DiscoveryOp::SetServerEndpoint { server, endpoint } => {
                if let Some(s) = self.local.cfg.servers.get_mut(server) {
                    s.endpoint = endpoint;
                }
            }
            DiscoveryOp::AddLink(kind) => {
                self.core.add_link(kind, now);
            }
            DiscoveryOp::Resume(kind) => {
                if let Some(k) = link(&self.core.links, &kind) {
                    self.core.links[k].withdrawn = false;
                }
            }
            DiscoveryOp::Withdraw(kind) => {
                if let Some(k) = link(&self.core.links, &kind) {
                    core::withdraw(self, k, now);
                }
            }
            DiscoveryOp::Refence {
                rid,
                generation,
                inbound_only,
            } => core::refence(self, &rid, generation, inbound_only, now),
            DiscoveryOp::Subscribe {
                endpoint,
                key,
                key_from_descriptor,
            } => {
                let i = self.add_sub(&endpoint, key, now);
                self.core.subs[i].key_from_descriptor = key_from_descriptor;
            }
            DiscoveryOp::Resubscribe {
                sub,
                key,
                key_from_descriptor,
                new_run,
            } => {
                let s = &mut self.core.subs[sub];
                s.retired = false;
                s.key = key;
                s.key_from_descriptor = key_from_descriptor;
                if let Some(generation) = new_run {
                    // A new run of the publisher: a new socket (WIRE.md §7.3).
                    core::fanout::fail_sub(
                        self,
                        sub,
                        FailureReason::Reconfigured,
                        &format!("publisher generation {generation:016x}"),
                        now,
                    );
                    self.core.subs[sub].retry_at = now;
                } else if s.slot.is_none() {
                    s.retry_at = now;
                }
            }
            DiscoveryOp::Unsubscribe(sub) => self.retire_sub(sub, now),
        }
    }

    /// Stops subscribing to publisher `i`: a socket that never became ready is closed now; a
    /// ready one stays until the transport fails it, and is not reopened.
    fn retire_sub(&mut self, i: SubKey, now: Instant) {
        if self.core.subs[i].retired {
            return;
        }
        self.core.subs[i].retired = true;
        if self.core.subs[i].slot.is_some() && !self.core.subs[i].state.is_ready() {
            core::fanout::fail_sub(
                self,
                i,
                FailureReason::Reconfigured,
                "descriptor gone: not subscribed any more",
                now,
            );
        }
    }

    /// Adds a subscription to the publisher at `endpoint` (a SUB socket of its own, opened on
    /// the next timer pass), which under CURVE must hold `key`; returns its index.
    pub(super) fn add_sub(
        &mut self,
        endpoint: &str,
        key: Option<PublicKey>,
        now: Instant,
    ) -> SubKey {
        core::fanout::add_sub(&mut self.core, endpoint, key, now)
    }
}
