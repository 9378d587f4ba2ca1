//! Automatic mode (MISSION D1, D3, F3, F5): a node that publishes its descriptor into the
//! simulated store ([`crate::store`]) and learns its peers from it, wired as the runtime's
//! discovery agent (src/runtime/discovery.rs) and the I/O thread's intents
//! (src/runtime/io/discovery.rs) wire the library's parts:
//!
//! - the owner lease is the library's [`LeaseKeeper`]: it says which store operation to run
//!   and when, and judges the answers; the simulator carries each operation to the store and
//!   back ([`SimNode::poll_store_op`], [`SimNode::handle_store_answer`]);
//! - the watch feeds the library's [`Directory`] (reload, put, removed), whose [`Intent`]s the
//!   node core's `Discovered::apply` turns into operations, as the I/O thread applies them: a
//!   fence per RID held by admission (HELLO and WELCOME are judged with it), dials for the
//!   peers and servers it names (added, or taken up again), subscriptions to the publishers
//!   it names; the glue carries the operations out: a new fence closing the connections of
//!   another run (and a dial in progress), a descriptor gone stopping the dial while a ready
//!   connection stays (F5: a lease is no liveness signal), a subscription opened, replaced or
//!   retired by the simulator's fanout model;
//! - intents are ignored once the node is stopping, as `on_discovery` ignores them.

use std::collections::BTreeMap;
use std::time::Duration;

use zmesh::proto::discovery::{
    Descriptor, Directory, Intent, LeaseEvent, LeaseKeeper, Local, MeshEndpoints, RenewOutcome,
    StoreOp,
};
use zmesh::proto::handshake::Expectation;
use zmesh::proto::wire::{CloseReason, Lane};

use zmesh::proto::node::discovered::{self, DiscoveryOp, LinkKind, ServerEntry, SubKey};
use zmesh::proto::security::PublicKey;

use super::admit::Dials;
use super::{Dial, SimNode, CHANNEL};
use crate::fanout::Discovered as FanFound;
use crate::net::{NetConn, NodeIx};
use crate::store::{Change, WatchEvent};
use crate::Ctx;

/// A store operation a node run asks for.
#[derive(Debug, Clone)]
pub enum StoreReq {
    /// Publish this descriptor under a fresh lease.
    Put(Descriptor),
    /// Renew the lease `lease` of `rid`'s descriptor of `generation`.
    Renew {
        /// The RID.
        rid: String,
        /// The generation the lease is of.
        generation: u64,
        /// The store's lease id.
        lease: u64,
    },
    /// Remove `rid`'s descriptor if it is still `lease`'s (orderly stop).
    Remove {
        /// The RID.
        rid: String,
        /// The store's lease id.
        lease: u64,
    },
}

/// The store's answer to a put or renewal (`Err`: the store could not be reached).
#[derive(Debug, Clone)]
pub enum StoreAnswer {
    /// To a put: the lease id.
    Put(Result<u64, String>),
    /// To a renewal.
    Renew(Result<RenewOutcome, String>),
}

/// A node run's discovery agent (the fences its directory sets are the node's, where
/// admission reads them).
#[derive(Debug)]
pub(crate) struct Disc {
    keeper: LeaseKeeper,
    dir: Directory,
    descriptor: Descriptor,
    lease: Option<u64>,
    /// The lease to remove on an orderly stop, until the removal is asked for.
    remove: Option<u64>,
    /// The host of each subscription discovery opened, by its position ([`SubKey`]).
    subs: Vec<NodeIx>,
}

/// This run's configuration as the node core's discovery reads it
/// ([`discovered::Entries`]): the simulator indexes its configured peers and servers by host
/// (a sparse list), so the entry a descriptor adds is its host's, `host`; automatic mode
/// has no manual entries and pins no keys.
struct Entries<'a> {
    dials: &'a BTreeMap<(NodeIx, u8), Dial>,
    /// The host of the intent's entry, if its address names one.
    host: Option<NodeIx>,
}

impl discovered::Entries for Entries<'_> {
    fn peer_index(&self, rid: &str) -> Option<usize> {
        zmesh::proto::node::admit::Configured::peer_index(&Dials(self.dials), rid)
    }

    fn peers(&self) -> usize {
        self.host.unwrap_or(usize::MAX)
    }

    fn server(&self, server: usize) -> Option<ServerEntry<'_>> {
        self.dials
            .get(&(server, u8::from(Lane::ClientServer)))
            .map(|d| ServerEntry {
                channel: CHANNEL,
                rid: Some(&d.rid),
                endpoint: &d.endpoint,
            })
    }

    fn servers(&self) -> usize {
        self.host.unwrap_or(usize::MAX)
    }

    fn endpoint_key(&self, _: &str) -> Option<PublicKey> {
        None
    }
}

/// The host and lane a dialled link of the simulator's configuration names (an inbound
/// link is no dial).
fn dialled(kind: &LinkKind) -> Option<(NodeIx, Lane)> {
    match *kind {
        LinkKind::MeshDial { peer, lane } => Some((peer, lane)),
        LinkKind::ClientDial { server } => Some((server, Lane::ClientServer)),
        LinkKind::Inbound { .. } => None,
    }
}

/// The endpoints the simulator gives host `i`: one address per host, one port per purpose.
pub fn mesh_endpoints(i: NodeIx) -> MeshEndpoints {
    MeshEndpoints {
        application: format!("tcp://10.0.0.{i}:7101"),
        completion: format!("tcp://10.0.0.{i}:7102"),
    }
}

/// Host `i`'s ClientServer endpoint.
pub fn server_endpoint(i: NodeIx) -> String {
    format!("tcp://10.0.0.{i}:7103")
}

/// Host `i`'s fanout PUB endpoint.
pub fn publisher_endpoint(i: NodeIx) -> String {
    format!("tcp://10.0.0.{i}:7104")
}

/// The host an endpoint of [`mesh_endpoints`] or [`server_endpoint`] names (the
/// simulator's address plan), if any.
fn host_of(endpoint: &str) -> Option<NodeIx> {
    zmesh::proto::discovery::descriptor::tcp_host(endpoint)?
        .rsplit('.')
        .next()?
        .parse()
        .ok()
}

impl Disc {
    pub(crate) fn new(node: &SimNode, now: std::time::Instant) -> Disc {
        let route_mesh = node.spec.mesh.then(|| mesh_endpoints(node.ix));
        let server = (node.spec.serves && !node.spec.mesh).then(|| server_endpoint(node.ix));
        let publishers = if node.spec.publishes {
            vec![publisher_endpoint(node.ix)]
        } else {
            Vec::new()
        };
        let descriptor = Descriptor::of(&node.me, route_mesh, server, publishers);
        let mut local = Local::new(node.me.rid.clone(), &node.me.memberships);
        // A subscriber of the fanout topology subscribes to every publisher the store
        // names; no other node subscribes (as in manual mode, where only they have a list).
        local.subscribe = !node.spec.subscribes.is_empty();
        Disc {
            keeper: LeaseKeeper::new(now),
            dir: Directory::new(local),
            descriptor,
            lease: None,
            remove: None,
            subs: Vec::new(),
        }
    }

    /// When the keeper next wants to run.
    pub(crate) fn poll_timeout(&self) -> Option<std::time::Instant> {
        self.keeper.poll_timeout()
    }
}

impl SimNode {
    /// The store operation this run's lease keeper asks for now, if any; an orderly stop
    /// asks for the removal of the descriptor once.
    pub fn poll_store_op(&mut self, ctx: &mut Ctx<'_>) -> Option<StoreReq> {
        let now = self.at(ctx.now);
        let running = self.phase == super::Phase::Running;
        let disc = self.disc.as_mut()?;
        if let Some(lease) = disc.remove.take() {
            return Some(StoreReq::Remove {
                rid: disc.descriptor.rid.clone(),
                lease,
            });
        }
        if !running {
            return None;
        }
        disc.keeper.handle_timeout(now);
        let op = disc.keeper.poll_op(now);
        let req = match op {
            Some(StoreOp::Put) => Some(StoreReq::Put(disc.descriptor.clone())),
            Some(_) => match disc.lease {
                Some(lease) => Some(StoreReq::Renew {
                    rid: disc.descriptor.rid.clone(),
                    generation: disc.descriptor.generation,
                    lease,
                }),
                // No lease to renew: the runtime answers itself that it is lost.
                None => {
                    disc.keeper.handle_renew(Ok(RenewOutcome::Lost), now);
                    None
                }
            },
            None => None,
        };
        self.lease_events(ctx);
        req
    }

    /// The store answered (or failed) the operation in flight.
    pub fn handle_store_answer(&mut self, ctx: &mut Ctx<'_>, answer: StoreAnswer) {
        let now = self.at(ctx.now);
        if self.phase != super::Phase::Running {
            return;
        }
        let Some(disc) = self.disc.as_mut() else {
            return;
        };
        match answer {
            StoreAnswer::Put(r) => {
                if let Ok(lease) = r {
                    disc.lease = Some(lease);
                }
                disc.keeper.handle_put(r.map(|_| ()), now);
            }
            StoreAnswer::Renew(r) => disc.keeper.handle_renew(r, now),
        }
        self.lease_events(ctx);
    }

    fn lease_events(&mut self, ctx: &mut Ctx<'_>) {
        let Some(disc) = self.disc.as_mut() else {
            return;
        };
        while let Some(ev) = disc.keeper.poll_event() {
            if let LeaseEvent::Lost(_) = ev {
                ctx.truth.stats.leases_lost += 1;
            }
            ctx.trace(format!("{} lease: {ev:?}", self.me.rid));
        }
    }

    /// Whether the lease is held now, and the generation of the descriptor it publishes.
    pub fn lease_held(&self) -> bool {
        self.disc.as_ref().is_some_and(|d| {
            d.keeper.status() == zmesh::proto::discovery::LeaseStatus::Held && d.lease.is_some()
        })
    }

    /// The generation this run's directory knows for `rid`.
    pub fn known_generation(&self, rid: &str) -> Option<u64> {
        self.disc
            .as_ref()
            .and_then(|d| d.dir.get(rid))
            .map(|d| d.generation)
    }

    /// The orderly stop: the descriptor is to be removed, the keeper is done.
    pub(super) fn stop_discovery(&mut self) {
        if let Some(disc) = self.disc.as_mut() {
            disc.remove = disc.lease.take();
            disc.keeper.handle_released();
        }
    }

    /// What this run's watch delivered.
    pub fn handle_watch(&mut self, ctx: &mut Ctx<'_>, ev: WatchEvent) {
        if self.phase != super::Phase::Running {
            return;
        }
        let me = self.end();
        let Some(disc) = self.disc.as_mut() else {
            return;
        };
        let parse = |json: &str| Descriptor::from_json(json.as_bytes()).ok();
        let mut delivered = Vec::new();
        // What the watch says each RID's current descriptor is, in order (the truth's
        // record of the fence this run should hold).
        let mut current: Vec<(String, Option<u64>)> = Vec::new();
        let intents = match ev {
            WatchEvent::Reload(all) => {
                ctx.truth.stats.watch_reloads += 1;
                let ds: Vec<Descriptor> = all.iter().filter_map(|j| parse(j)).collect();
                delivered.extend(ds.iter().map(|d| (d.rid.clone(), d.generation)));
                for rid in ctx.truth.current_rids(me) {
                    if !ds.iter().any(|d| d.rid == rid) {
                        current.push((rid, None));
                    }
                }
                current.extend(ds.iter().map(|d| (d.rid.clone(), Some(d.generation))));
                disc.dir.handle_reload(ds)
            }
            WatchEvent::Delta(changes) => {
                // As the runtime's watch task: each RID's last change of the batch applies.
                let mut batch = Vec::with_capacity(changes.len());
                for c in changes {
                    match c {
                        Change::Put(json) => {
                            if let Some(d) = parse(&json) {
                                delivered.push((d.rid.clone(), d.generation));
                                current.push((d.rid.clone(), Some(d.generation)));
                                batch.push((d.rid.clone(), Some(d)));
                            }
                        }
                        Change::Removed(rid) => {
                            current.push((rid.clone(), None));
                            batch.push((rid, None));
                        }
                    }
                }
                disc.dir.handle_changes(batch)
            }
            WatchEvent::Unreachable | WatchEvent::Resumed => Vec::new(),
        };
        for (rid, generation) in delivered {
            if rid != self.me.rid {
                ctx.truth.on_delivered(me, &rid, generation);
            }
        }
        for (rid, generation) in current {
            if rid != self.me.rid {
                ctx.truth.on_current(me, &rid, generation);
            }
        }
        for intent in intents {
            self.apply_intent(ctx, intent);
        }
        // No connection of a run the watch no longer names current outlives this event.
        let ready = self.ready_runs();
        ctx.truth.check_current_runs(me, &ready);
    }

    /// Applies `intent` as the I/O thread does: the node core decides what it does
    /// ([`zmesh::proto::node::discovered::Discovered::apply`]: the fences, and the operations
    /// in order), the glue carries the operations out on the simulated links and
    /// subscriptions.
    fn apply_intent(&mut self, ctx: &mut Ctx<'_>, intent: Intent) {
        ctx.trace(format!("{} intent {intent:?}", self.me.rid));
        // The host the intent's entry is (the simulator's configuration is indexed by host),
        // and a publisher's generation, which its subscription is opened for.
        let host = match &intent {
            Intent::Peer { endpoints, .. } => host_of(&endpoints.application),
            Intent::Server { endpoint, .. } => host_of(endpoint),
            Intent::Fence { rid, .. }
            | Intent::FenceGone { rid }
            | Intent::PeerGone { rid }
            | Intent::ServerGone { rid, .. }
            | Intent::Publisher { rid, .. }
            | Intent::PublisherGone { rid, .. } => crate::host_of_rid(rid),
        };
        let publisher = match &intent {
            Intent::Publisher {
                rid, generation, ..
            } => Some((rid.clone(), *generation)),
            _ => None,
        };
        let Some(disc) = self.disc.as_ref() else {
            return;
        };
        let next_sub = SubKey::at(disc.subs.len());
        let entries = Entries {
            dials: &self.dials,
            host,
        };
        let ops = self.discovered.apply(intent, &entries, next_sub);
        for op in ops {
            self.carry_out(ctx, op, publisher.as_ref());
        }
    }

    /// Carries out one of the core's operations for a discovery intent (`publisher`: the
    /// RID and generation of a Publisher intent's descriptor). The simulator's entries keep
    /// the endpoints of their host's address plan, so an entry added or following its
    /// descriptor needs nothing beyond its links.
    fn carry_out(&mut self, ctx: &mut Ctx<'_>, op: DiscoveryOp, publisher: Option<&(String, u64)>) {
        match op {
            DiscoveryOp::AddPeer { .. }
            | DiscoveryOp::SetPeerEndpoints { .. }
            | DiscoveryOp::AddServer { .. }
            | DiscoveryOp::SetServerEndpoint { .. } => {}
            DiscoveryOp::AddLink(kind) | DiscoveryOp::Resume(kind) => {
                if let Some((h, lane)) = dialled(&kind) {
                    self.discover_dial(ctx, h, lane);
                }
            }
            DiscoveryOp::Withdraw(kind) => {
                if let Some((h, lane)) = dialled(&kind) {
                    self.withdraw(ctx, h, lane);
                }
            }
            DiscoveryOp::Refence {
                rid,
                generation,
                inbound_only,
            } => self.refence(ctx, &rid, generation, inbound_only),
            DiscoveryOp::Subscribe { endpoint, .. } => {
                let Some(h) = host_of(&endpoint) else {
                    return;
                };
                if let Some(disc) = self.disc.as_mut() {
                    disc.subs.push(h);
                }
                if let Some((rid, generation)) = publisher {
                    self.subscribe(ctx, h, rid, *generation);
                }
            }
            DiscoveryOp::Resubscribe { sub, .. } => {
                let h = self.disc.as_ref().and_then(|d| d.subs.get(sub.position()));
                if let (Some(&h), Some((rid, generation))) = (h, publisher) {
                    self.subscribe(ctx, h, rid, *generation);
                }
            }
            DiscoveryOp::Unsubscribe(sub) => {
                let h = self.disc.as_ref().and_then(|d| d.subs.get(sub.position()));
                if let Some(&h) = h {
                    let me = self.end();
                    self.fan.retire(ctx, me, &self.live, h);
                }
            }
        }
    }

    /// Subscribes to (or takes up again) the publisher at host `h`, of `rid`'s run of
    /// `generation`: a subscription of another run is replaced.
    fn subscribe(&mut self, ctx: &mut Ctx<'_>, h: NodeIx, rid: &str, generation: u64) {
        ctx.truth.on_discovery_subscribe(self.ix, rid, generation);
        let me = self.end();
        let found = self
            .fan
            .discover(ctx, me, &mut self.live, self.base, h, generation);
        if let FanFound::Replaced {
            old,
            was_ready: true,
        } = found
        {
            // The one way discovery takes a watch out of ready: a descriptor of another run
            // (F3), judged by the truth as a ready link's close is.
            ctx.truth.on_discovery_drop(me, rid, old);
        }
        ctx.trace(format!(
            "{} subscription to {rid} g{generation:x}: {found:?}",
            self.me.rid
        ));
    }

    /// Dials host `h` on `lane` because a descriptor asks for it, or takes a withdrawn dial
    /// of it up again.
    fn discover_dial(&mut self, ctx: &mut Ctx<'_>, h: NodeIx, lane: Lane) {
        let d = self
            .dials
            .entry((h, u8::from(lane)))
            .or_insert_with(|| Dial::new(h, lane, ctx.now));
        d.withdrawn = false;
        if d.conn.is_none() && d.retry_at.is_none() && !d.yielded && !d.not_required {
            d.retry_at = Some(ctx.now);
        }
    }

    /// Stops dialling host `h` on `lane` (its descriptor is gone): a dial in progress is
    /// closed, a ready connection stays (MISSION F5).
    fn withdraw(&mut self, ctx: &mut Ctx<'_>, h: NodeIx, lane: Lane) {
        let Some(d) = self.dials.get_mut(&(h, u8::from(lane))) else {
            return;
        };
        d.withdrawn = true;
        d.retry_at = None;
        let conn = d.conn;
        if let Some(k) = conn {
            if self.conns.get(&k).is_some_and(|c| c.ready.is_none()) {
                ctx.trace(format!("{} {k} withdrawn: descriptor gone", self.me.rid));
                self.drop_conn(ctx, k, None);
            }
        }
    }

    /// Closes ready connection `k` to `rid`'s run of `generation` because of what the store
    /// said: the one way discovery takes a link out of ready (the shell's
    /// `fail_link(.., Reconfigured)`), reported to the truth, which judges it.
    fn close_for_discovery(
        &mut self,
        ctx: &mut Ctx<'_>,
        k: NetConn,
        rid: &str,
        generation: u64,
        why: &str,
    ) {
        let me = self.end();
        ctx.truth.on_discovery_drop(me, rid, generation);
        ctx.trace(format!("{} {k} closed by discovery: {why}", self.me.rid));
        self.drop_conn(ctx, k, Some(CloseReason::Replaced));
    }

    /// Holds every connection of `rid` (only the inbound ones if `inbound_only`) to its
    /// new fence of `generation` (0: none, nothing to hold): a ready connection of another
    /// run is closed, a dial in progress is closed and dialled again under the new fence.
    fn refence(&mut self, ctx: &mut Ctx<'_>, rid: &str, generation: u64, inbound_only: bool) {
        if generation == 0 {
            return;
        }
        let host = crate::host_of_rid(rid);
        let mine: Vec<(NetConn, Option<u64>, bool)> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.refused)
            .filter(|(_, c)| match &c.ready {
                Some(r) => r.peer.rid == rid,
                None => c.dialled && Some(c.peer_node) == host,
            })
            .map(|(&k, c)| (k, c.ready.as_ref().map(|r| r.peer.generation), c.dialled))
            .collect();
        for (k, ready_gen, dialled) in mine {
            if inbound_only && dialled {
                continue;
            }
            match ready_gen {
                Some(g) if g != generation => {
                    let why = format!("a descriptor of g{generation:x} replaces g{g:x}");
                    self.close_for_discovery(ctx, k, rid, g, &why);
                }
                Some(_) => {}
                None if dialled => {
                    ctx.trace(format!(
                        "{} {k} closed: dial started under an older descriptor",
                        self.me.rid
                    ));
                    self.drop_conn(ctx, k, None);
                }
                None => {}
            }
        }
        // A dialled link without a connection dials the new run now.
        if inbound_only {
            return;
        }
        if let Some(h) = host {
            for lane in [Lane::Application, Lane::Completion, Lane::ClientServer] {
                if let Some(d) = self.dials.get_mut(&(h, u8::from(lane))) {
                    if d.conn.is_none() && !d.withdrawn && !d.yielded && !d.not_required {
                        d.retry_at = Some(ctx.now);
                    }
                }
            }
        }
    }

    /// The fence this run holds for the peer at host `h`, or for `rid`; no expectation at
    /// all without discovery (manual mode without configured generations).
    pub(super) fn fence_for(&self, rid: &str) -> Expectation {
        self.discovered.peer_fence(rid).cloned().unwrap_or_default()
    }
}

/// How long a store operation waits for an answer that never comes before the agent counts
/// the store unreachable (src/runtime/discovery.rs `STORE_OP_BOUND`).
pub const STORE_OP_BOUND: Duration = Duration::from_secs(5);
