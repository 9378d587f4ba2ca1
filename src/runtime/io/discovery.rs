//! Automatic mode in the I/O thread (MISSION D1, F3, F4, T3, T4): applying the discovery
//! agent's [`Intent`]s to links, and the descriptor fences that admission checks.
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

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::parts::fanout::Sub;
use super::parts::sockets::SlotRole;
use super::{IoThread, LinkKey, SubKey};
use crate::config::{EndpointKind, PeerConfig, ServerConfig};
use crate::proto::discovery::{Descriptor, Intent, MeshEndpoints};
use crate::proto::handshake::Expectation;
use crate::proto::node::admit::Refenced;
use crate::proto::node::link::LinkKind;
use crate::proto::node::links::{Withdrawal, WITHDRAWN};
use crate::proto::security::PublicKey;
use crate::proto::state::{FailureReason, LinkKind as StateKind, LinkState};
use crate::runtime::event::DiscoveryEvent;
use crate::runtime::event::{NodeEvent, Source};
use crate::runtime::records::Lane;

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
    /// changes that follow), then its intents, in order.
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
            match intent {
                Intent::Fence { rid, fence } => {
                    let generation = fence.generation.unwrap_or(0);
                    self.discovered.fences.insert(rid.clone(), fence);
                    // Inbound connections of another run go now; dialled links follow their
                    // own intents (Peer, Server), which come next.
                    self.refence(&rid, generation, true, now);
                }
                Intent::FenceGone { rid } => {
                    self.discovered.fences.remove(&rid);
                }
                Intent::Peer {
                    rid,
                    endpoints,
                    fence,
                } => self.discover_peer(rid, endpoints, fence, now),
                Intent::PeerGone { rid } => {
                    if let Some(&i) = self.discovered.peers.get(&rid) {
                        for lane in [Lane::Application, Lane::Completion] {
                            if let Some(k) = self
                                .links
                                .position(|l| l.kind == LinkKind::MeshDial { peer: i, lane })
                            {
                                self.withdraw(k, now);
                            }
                        }
                    }
                }
                Intent::Server {
                    rid,
                    channel,
                    endpoint,
                    fence,
                } => self.discover_server(rid, channel, endpoint, fence, now),
                Intent::ServerGone { rid, channel } => {
                    if let Some(&i) = self.discovered.servers.get(&(rid, channel)) {
                        let kind = LinkKind::ClientDial { server: i };
                        if let Some(k) = self.links.position(|l| l.kind == kind) {
                            self.withdraw(k, now);
                        }
                    }
                }
                Intent::Publisher {
                    rid,
                    endpoint,
                    generation,
                    security_identity,
                } => self.discover_publisher(rid, endpoint, generation, &security_identity, now),
                Intent::PublisherGone { rid, endpoint } => {
                    if let Some(&(i, _)) = self.discovered.subs.get(&(rid, endpoint)) {
                        self.retire_sub(i, now);
                    }
                }
            }
        }
    }

    fn discover_peer(
        &mut self,
        rid: String,
        endpoints: MeshEndpoints,
        fence: Expectation,
        now: Instant,
    ) {
        let generation = fence.generation.unwrap_or(0);
        self.discovered.fences.insert(rid.clone(), fence);
        let Some(i) = self.local.cfg.peers.iter().position(|p| p.rid == rid) else {
            self.local.cfg.peers.push(PeerConfig {
                rid: rid.clone(),
                application: endpoints.application,
                completion: endpoints.completion,
                generation: None,
                security_identity: None,
                batch_calls: true,
            });
            let i = self.local.cfg.peers.len() - 1;
            self.discovered.peers.insert(rid.clone(), i);
            for lane in [Lane::Application, Lane::Completion] {
                self.add_link(LinkKind::MeshDial { peer: i, lane }, now);
            }
            // An inbound connection of this RID that came first is fenced too.
            self.refence(&rid, generation, false, now);
            return;
        };
        if self.discovered.peers.get(&rid) == Some(&i) {
            // Discovery's own entry follows the descriptor; a manual one keeps its endpoints.
            let p = &mut self.local.cfg.peers[i];
            p.application = endpoints.application;
            p.completion = endpoints.completion;
        }
        for lane in [Lane::Application, Lane::Completion] {
            if let Some(k) = self
                .links
                .position(|l| l.kind == LinkKind::MeshDial { peer: i, lane })
            {
                self.links[k].withdrawn = false;
            }
        }
        self.refence(&rid, generation, false, now);
    }

    fn discover_server(
        &mut self,
        rid: String,
        channel: String,
        endpoint: String,
        fence: Expectation,
        now: Instant,
    ) {
        let generation = fence.generation.unwrap_or(0);
        self.discovered.fences.insert(rid.clone(), fence);
        self.discovered
            .endpoint_owner
            .insert(endpoint.clone(), rid.clone());
        let key = (rid.clone(), channel.clone());
        // A manual entry for this server (by RID, or by endpoint without one) is fenced
        // instead of dialled twice.
        let manual = self.local.cfg.servers.iter().enumerate().any(|(i, s)| {
            !self.discovered.servers.values().any(|d| *d == i)
                && s.channel == channel
                && (s.rid.as_deref() == Some(rid.as_str())
                    || (s.rid.is_none() && s.endpoint == endpoint))
        });
        match self.discovered.servers.get(&key).copied() {
            Some(i) => {
                if let Some(s) = self.local.cfg.servers.get_mut(i) {
                    s.endpoint = endpoint;
                }
                let kind = LinkKind::ClientDial { server: i };
                if let Some(k) = self.links.position(|l| l.kind == kind) {
                    self.links[k].withdrawn = false;
                }
            }
            None if !manual => {
                self.local.cfg.servers.push(ServerConfig {
                    channel,
                    endpoint,
                    rid: Some(rid.clone()),
                    batch_calls: true,
                });
                let i = self.local.cfg.servers.len() - 1;
                self.discovered.servers.insert(key, i);
                self.add_link(LinkKind::ClientDial { server: i }, now);
            }
            None => {}
        }
        self.refence(&rid, generation, false, now);
    }

    /// Holds every link of `rid` (only its inbound links if `inbound_only`) to its current
    /// fence: a ready connection of another run is closed, a dial in progress (started under
    /// an older fence) is closed, and a dialled link with no connection is reconfigured for
    /// the new generation and dialled as soon as the close of its last socket is confirmed.
    fn refence(&mut self, rid: &str, generation: u64, inbound_only: bool, now: Instant) {
        let verdicts = self.admission().refence(rid, inbound_only);
        for (k, verdict) in verdicts {
            match verdict {
                Refenced::Keep => {}
                Refenced::ReplacedRun => {
                    let detail =
                        format!("a descriptor of generation {generation:016x} replaces this run");
                    self.fail_link(k, FailureReason::Reconfigured, &detail, now);
                }
                Refenced::StaleDial => {
                    self.fail_link(
                        k,
                        FailureReason::Reconfigured,
                        "dial started under an older descriptor",
                        now,
                    );
                }
            }
            if let Some(event) = self.links[k].refenced(generation, now) {
                self.emit_link_state(k, event);
            }
        }
    }

    /// Stops dialling link `k` (its descriptor is gone): a dial in progress is closed, a link
    /// waiting to redial goes `not_connected`; a ready connection stays.
    fn withdraw(&mut self, k: LinkKey, now: Instant) {
        match self.links[k].withdraw(now) {
            Withdrawal::Nothing => {}
            Withdrawal::Close => self.fail_link(k, FailureReason::Reconfigured, WITHDRAWN, now),
            Withdrawal::Report(event) => self.emit_link_state(k, event),
        }
    }

    fn discover_publisher(
        &mut self,
        rid: String,
        endpoint: String,
        generation: u64,
        security_identity: &str,
        now: Instant,
    ) {
        // CURVE: the publisher must hold the key its descriptor names (opened only while that
        // key is on this node's allow-list: the store is not trusted with keys); a configured
        // key for that endpoint wins.
        let pinned = self.local.cfg.security.endpoint_key(&endpoint);
        let public_key = pinned.or_else(|| security_identity.parse().ok());
        let from_descriptor = pinned.is_none();
        let key = (rid, endpoint.clone());
        match self.discovered.subs.get(&key).copied() {
            Some((i, g)) => {
                self.fanout.subs[i].retired = false;
                self.fanout.subs[i].key = public_key;
                self.fanout.subs[i].key_from_descriptor = from_descriptor;
                if g != generation {
                    // A new run of the publisher: a new socket (WIRE.md §7.3).
                    if let Some(e) = self.discovered.subs.get_mut(&key) {
                        e.1 = generation;
                    }
                    self.fail_sub(
                        i,
                        FailureReason::Reconfigured,
                        &format!("publisher generation {generation:016x}"),
                        now,
                    );
                    self.fanout.subs[i].retry_at = now;
                } else if self.fanout.subs[i].slot.is_none() {
                    self.fanout.subs[i].retry_at = now;
                }
            }
            None => {
                let i = self.add_sub(&endpoint, public_key, now);
                self.fanout.subs[i].key_from_descriptor = from_descriptor;
                self.discovered.subs.insert(key, (i, generation));
            }
        }
    }

    /// Stops subscribing to publisher `i`: a socket that never became ready is closed now; a
    /// ready one stays until the transport fails it, and is not reopened.
    fn retire_sub(&mut self, i: SubKey, now: Instant) {
        if self.fanout.subs[i].retired {
            return;
        }
        self.fanout.subs[i].retired = true;
        if self.fanout.subs[i].slot.is_some() && !self.fanout.subs[i].state.is_ready() {
            self.fail_sub(
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
        let i = self.fanout.subs.next_key();
        let live = self.liveness.insert_subscription(i, now);
        let pushed = self.fanout.subs.push(Sub {
            endpoint: endpoint.to_owned(),
            source: Source::Publisher {
                endpoint: Arc::from(endpoint),
            },
            last_topic: Bytes::new(),
            slot: None,
            conn_id: None,
            live,
            state: LinkState::new(StateKind::Publisher, 0, now),
            records: 0,
            connected: false,
            retry_at: now,
            failures_in_row: 0,
            retired: false,
            key,
            key_from_descriptor: false,
        });
        debug_assert_eq!(pushed, i);
        i
    }
}
