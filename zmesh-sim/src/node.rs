//! One simulated node run: zmesh's protocol state machines wired the way the I/O thread
//! wires them, over the simulated network instead of libzmq sockets.
//!
//! Every protocol decision is the library's own: admission and duplicate resolution (the
//! node core's [`Admission::judge_inbound`] for a HELLO, its expectations of what a dial
//! reaches, [`zmesh::proto::admission::judge_welcome`] for a WELCOME; applied in
//! `node/admit.rs`), liveness ([`Liveness`]: probes, ACKs, the 15 s deadline with the
//! coalescing window), capability negotiation in the handshake, the caller's call table
//! ([`CallTable`]: leases, what a failure says, which cancels to tell the callee) and the
//! node core's callee ([`Serving`]: refusals, ACCEPT before dispatch, the execution queues,
//! ttl refusals, CANCEL, the graceful drain, stream windows; driven in `node/callee.rs`),
//! and the wire codec for every record, decoded with the capabilities in effect on its
//! connection. What this file adds is the glue the shell has around them: which connection
//! a record came on, where an answer goes, redialling after a failure, handlers that take
//! time.
//!
//! [`Admission::judge_inbound`]: zmesh::proto::node::admit::Admission::judge_inbound
//! [`Serving`]: zmesh::proto::node::callee::Serving

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;
use zmesh::proto::calls::{CallError, CallId, CallTable, Disposition, ServeId};
use zmesh::proto::handshake::{Capabilities, Identity, Membership};
use zmesh::proto::liveness::{LinkKey, Liveness, LivenessEvent, PublisherEvent, Transmit};
use zmesh::proto::node::discovered::Discovered;
use zmesh::proto::wire::{self, CloseReason, Lane, Record};
use zmesh::proto::ConnId;

use crate::fanout::Fan;
use crate::net::{Delivery, End, Link, NetConn, NodeIx};
use crate::Ctx;

mod admit;
mod callee;
mod caller;
mod discovery;
mod receive;
mod stream;

pub use discovery::{mesh_endpoints, server_endpoint, StoreAnswer, StoreReq, STORE_OP_BOUND};

/// The channel every server serves.
pub const CHANNEL: &str = "svc";

/// How long a dialled connection may go without WELCOME before it is dropped and redialled.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a graceful stop waits for accepted calls.
pub const DRAIN_BOUND: Duration = Duration::from_secs(5);

/// What a node run was told to be.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its RID.
    pub rid: String,
    /// Whether it serves [`CHANNEL`].
    pub serves: bool,
    /// The hosts and lanes it dials.
    pub dials: Vec<(NodeIx, Lane)>,
    /// Whether it binds a PUB socket and publishes.
    pub publishes: bool,
    /// The publishers it subscribes to, one SUB socket each (in automatic mode, the ones
    /// whose descriptors the store holds: non-empty only says that it subscribes).
    pub subscribes: Vec<NodeIx>,
    /// It speaks version 1 only: it announces no capability (WIRE.md §8.1).
    pub version1: bool,
    /// What arrives waits in its connection's socket for the receive loop's rotation
    /// ([`SimNode::handle_receive`]) instead of being handled as it arrives.
    pub receive_loop: bool,
    /// It binds the two RouteMesh lanes (a RouteMesh node; a ClientServer server binds its
    /// server endpoint instead).
    pub mesh: bool,
    /// Automatic mode: it publishes its descriptor into the simulated store and dials, or
    /// subscribes to, what the descriptors there ask for, instead of [`Spec::dials`] and
    /// [`Spec::subscribes`] (MISSION D1).
    pub discovery: bool,
}

#[derive(Debug)]
struct Ready {
    peer: Identity,
    live: LinkKey,
}

#[derive(Debug)]
struct Conn {
    lane: Lane,
    peer_node: NodeIx,
    dialled: bool,
    id: ConnId,
    opened_at: Duration,
    hello_sent: bool,
    ready: Option<Ready>,
    refused: bool,
}

/// A dial of this run: a host it dials on one lane, as its configuration (manual mode) or a
/// descriptor (automatic mode) names it.
#[derive(Debug)]
struct Dial {
    /// The RID it expects at the other end.
    rid: String,
    /// The endpoint it dials.
    endpoint: String,
    conn: Option<NetConn>,
    retry_at: Option<Duration>,
    failures: u32,
    /// Stood down: the peer's own dial on this lane is the current connection.
    yielded: bool,
    /// The peer refused with NotRequired: nothing to dial.
    not_required: bool,
    /// Its descriptor is gone: not dialled any more (a ready connection stays).
    withdrawn: bool,
}

impl Dial {
    /// A dial of host `host` on `lane`, due at `at`.
    fn new(host: NodeIx, lane: Lane, at: Duration) -> Dial {
        let endpoint = match lane {
            Lane::Application => discovery::mesh_endpoints(host).application,
            Lane::Completion => discovery::mesh_endpoints(host).completion,
            Lane::ClientServer => discovery::server_endpoint(host),
        };
        Dial {
            rid: crate::rid_of(host),
            endpoint,
            conn: None,
            retry_at: Some(at),
            failures: 0,
            yielded: false,
            not_required: false,
            withdrawn: false,
        }
    }
}

/// A running handler.
#[derive(Debug)]
struct Handler {
    ends_at: Duration,
    uid: u64,
    /// The idempotency key of a guarded command, recorded done when it finishes.
    key: Option<String>,
    /// It is stopped when its caller no longer waits (its method's plan).
    stops: bool,
    /// The connection its answers travel on, and the call's wire id there.
    conn: NetConn,
    call_id: NonZeroU64,
    /// A stream call's items still to send, before its REPLY.
    stream: Option<Stream>,
}

/// A stream handler's progress: it produces `total` items, one every `gap` (all at once
/// when `gap` is zero), each handed to the core, which sends it as soon as the call's window
/// allows, then its REPLY.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stream {
    total: u64,
    sent: u64,
    gap: Duration,
    next_at: Duration,
    /// `credit` is in effect on its connection: the core holds its window.
    window: bool,
    /// Its last item waits in the core for the window to open, and the handler with it.
    held: bool,
}

/// An ACCEPT, REPLY or ITEM waiting to leave at the end of the step.
#[derive(Debug, Clone)]
enum Out {
    /// A record, packed with the answers around it where it can be.
    Record(Record),
    /// An ITEM's frames, as the core encoded them.
    Frames(Vec<Vec<u8>>),
}

/// A call this run's application made: the simulator's name for it, and the connection its
/// REQUEST goes out on (none for a call that found no route).
#[derive(Debug, Clone, Copy)]
struct Outgoing {
    uid: u64,
    request: Option<NetConn>,
}

/// One call of a burst the application makes in one turn ([`SimNode::start_calls`]).
#[derive(Debug, Clone)]
pub struct Burst {
    /// The simulator's name for the call.
    pub uid: u64,
    /// What it asks for.
    pub kind: crate::truth::CallKind,
    /// Its ttl, if it has one.
    pub ttl: Option<Duration>,
    /// The application cancels it in the same turn, before its REQUEST leaves.
    pub cancel_at_once: bool,
}

/// Where a node run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Serving.
    Running,
    /// Graceful stop: accepted calls are answered up to the drain bound.
    Draining,
    /// Stopped: nothing more happens.
    Stopped,
}

/// One run of a node.
pub struct SimNode {
    /// The host.
    pub ix: NodeIx,
    /// The run on that host (counts from 1).
    pub run: u64,
    /// What it announces.
    pub me: Identity,
    spec: Spec,
    base: Instant,
    phase: Phase,
    conns: BTreeMap<NetConn, Conn>,
    dials: BTreeMap<(NodeIx, u8), Dial>,
    live: Liveness,
    live_conn: BTreeMap<LinkKey, NetConn>,
    next_conn_id: u64,
    calls: CallTable<NetConn>,
    call_uid: BTreeMap<CallId, Outgoing>,
    /// Calls completed by a REPLY on a connection where `replayed` is in effect (WIRE.md
    /// §4.17), with the REPLY's replayed mark, until the completion is judged.
    replayed: BTreeMap<CallId, bool>,
    /// The calls this run serves, as the node core keeps and decides them.
    serving: callee::Core,
    /// Calls accepted here whose handlers have not started and that are not answered: what
    /// holds a place in an execution queue, by the simulator's own count.
    accepted: callee::AcceptedCalls,
    handlers: BTreeMap<ServeId, Handler>,
    /// Answers (ACCEPT, REPLY) toward connections that negotiated `answers`, in the order
    /// they were decided, sent together when the node's step ends (WIRE.md §4.16), as the
    /// runtime sends them at the end of a loop turn, and the ITEMs decided behind them.
    outbox: Vec<(NetConn, Out)>,
    /// The descriptor fences (automatic mode), as admission reads them.
    discovered: Discovered,
    fan: Fan,
    /// The sockets and the receive scheduler, where the receive loop is modelled.
    rx: Option<receive::Receiver>,
    /// The discovery agent, in automatic mode.
    disc: Option<discovery::Disc>,
    /// Stream calls of this run's application: items taken since the last CREDIT.
    ungranted: BTreeMap<CallId, u64>,
    /// Stream calls whose application is a slow consumer: the items the call table handed
    /// out wait here until the application takes them, one per pace.
    slow: BTreeMap<CallId, stream::SlowConsumer>,
}

impl SimNode {
    /// A new run of host `ix`, started at `now`.
    pub fn new(
        ix: NodeIx,
        run: u64,
        generation: u64,
        spec: Spec,
        base: Instant,
        now: Duration,
    ) -> SimNode {
        let membership = if spec.serves {
            Membership::server(CHANNEL)
        } else {
            Membership::object_client(CHANNEL)
        };
        let me = Identity {
            rid: spec.rid.clone(),
            generation,
            security_identity: String::new(),
            memberships: vec![membership],
            capabilities: if spec.version1 {
                Capabilities::NONE
            } else {
                Capabilities::SPOKEN
            },
        };
        // In automatic mode the descriptors in the store say what to dial.
        let manual: &[(NodeIx, Lane)] = if spec.discovery { &[] } else { &spec.dials };
        let dials = manual
            .iter()
            .map(|&(peer, lane)| {
                (
                    (peer, u8::from(lane)),
                    Dial::new(peer, lane, Duration::ZERO),
                )
            })
            .collect();
        let mut live = Liveness::new(generation);
        // In automatic mode the publisher descriptors say what to subscribe to.
        let subscribes: &[NodeIx] = if spec.discovery {
            &[]
        } else {
            &spec.subscribes
        };
        let fan = Fan::new(spec.publishes, subscribes, &mut live, base + now);
        let rx = spec.receive_loop.then(receive::Receiver::new);
        let mut node = SimNode {
            ix,
            run,
            me,
            spec,
            base,
            phase: Phase::Running,
            conns: BTreeMap::new(),
            dials,
            live,
            live_conn: BTreeMap::new(),
            next_conn_id: 1,
            calls: CallTable::new(),
            call_uid: BTreeMap::new(),
            replayed: BTreeMap::new(),
            serving: callee::Core::default(),
            accepted: callee::AcceptedCalls::new(),
            handlers: BTreeMap::new(),
            outbox: Vec::new(),
            discovered: Discovered::default(),
            fan,
            rx,
            disc: None,
            ungranted: BTreeMap::new(),
            slow: BTreeMap::new(),
        };
        if node.spec.discovery {
            node.disc = Some(discovery::Disc::new(&node, base + now));
        }
        node
    }

    fn end(&self) -> End {
        End {
            node: self.ix,
            run: self.run,
        }
    }

    fn at(&self, t: Duration) -> Instant {
        self.base + t
    }

    /// Where the run is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether this run serves the channel.
    pub fn serves(&self) -> bool {
        self.spec.serves
    }

    /// The next instant this run needs to be woken for its timers, as the shell computes it
    /// from every part's `poll_timeout()` and its own redial and handshake timers.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let mut best: Option<Duration> = None;
        let mut take = |t: Option<Duration>| {
            if let Some(t) = t {
                best = Some(best.map_or(t, |b: Duration| b.min(t)));
            }
        };
        let rel = |i: Option<Instant>| i.map(|i| i.saturating_duration_since(self.base));
        take(rel(self.live.poll_timeout()));
        take(rel(self.calls.poll_timeout()));
        take(rel(self.serving.poll_timeout()));
        for h in self.handlers.values() {
            take(Some(h.ends_at));
            if let Some(st) = &h.stream {
                // A closed window waits for CREDIT, not for the clock.
                if st.sent < st.total && !st.held {
                    take(Some(st.next_at));
                }
            }
        }
        for c in self.slow.values() {
            if !c.queue.is_empty() {
                take(Some(c.next_at));
            }
        }
        if self.phase == Phase::Running {
            for d in self.dials.values() {
                take(d.retry_at);
            }
            take(self.fan.poll_timeout());
            take(rel(self
                .disc
                .as_ref()
                .and_then(discovery::Disc::poll_timeout)));
        }
        for c in self.conns.values() {
            if c.dialled && c.ready.is_none() && c.hello_sent {
                take(Some(c.opened_at + HANDSHAKE_TIMEOUT));
            }
        }
        best
    }

    /// Whether any part still holds a timer (none may after a stop).
    pub fn has_timers(&self) -> bool {
        self.live.poll_timeout().is_some()
            || self.calls.poll_timeout().is_some()
            || self.serving.poll_timeout().is_some()
            || self.serving.in_flight() > 0
            || !self.handlers.is_empty()
            || self
                .disc
                .as_ref()
                .is_some_and(|d| d.poll_timeout().is_some())
    }

    fn send(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, rec: &Record) -> bool {
        let end = self.end();
        let sent = ctx.net.send(conn, end, rec.encode(), ctx.now, ctx.rng);
        if sent {
            ctx.truth.on_wire(end, conn, rec);
        }
        sent
    }

    /// Sends an ACCEPT or REPLY: at once toward a connection without `answers`, else at the
    /// end of this step, packed with the other answers of the step ([`Self::flush_answers`]).
    ///
    /// A REPLY's replayed mark is cleared toward a connection without `replayed`, as the
    /// runtime does (WIRE.md §4.17). Returns whether it was sent or will be.
    fn send_answer(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, mut rec: Record) -> bool {
        let caps = self.caps_on(conn);
        if let Record::Reply(r) = &mut rec {
            r.replayed &= caps.contains(Capabilities::REPLAYED);
        }
        if caps.contains(Capabilities::ANSWERS) {
            self.outbox.push((conn, Out::Record(rec)));
            true
        } else {
            self.send(ctx, conn, &rec)
        }
    }

    /// Sends an ITEM's `frames` on `conn`: behind the answers of this step that still wait
    /// for that connection (so it never overtakes its call's ACCEPT), else at once. Returns
    /// whether it was sent or will be.
    fn send_item(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, frames: Vec<Vec<u8>>) -> bool {
        if self.outbox.iter().any(|(c, _)| *c == conn) {
            self.outbox.push((conn, Out::Frames(frames)));
            return true;
        }
        let end = self.end();
        ctx.net.send(conn, end, frames, ctx.now, ctx.rng)
    }

    /// Sends the answers of this step, per connection in order, each run that stands for
    /// two records or more as one ANSWERS record (zmesh's bounds, `wire::pack_front`).
    fn flush_answers(&mut self, ctx: &mut Ctx<'_>) {
        let out = std::mem::take(&mut self.outbox);
        let mut seen = BTreeSet::new();
        for conn in out.iter().map(|(c, _)| *c) {
            if !seen.insert(conn) {
                continue;
            }
            let Some(conn_id) = self.conns.get(&conn).map(|c| c.id.0) else {
                continue;
            };
            let queue: Vec<&Out> = out
                .iter()
                .filter(|(c, _)| *c == conn)
                .map(|(_, r)| r)
                .collect();
            let generation = NonZeroU64::new(self.me.generation).unwrap_or(NonZeroU64::MIN);
            let offsets = self.caps_on(conn).contains(Capabilities::IDS16);
            let mut at = 0;
            while at < queue.len() {
                let pending = queue[at..].iter().map(|r| match r {
                    Out::Record(Record::Accept(a)) => wire::Pending::Accept(a.call_id),
                    Out::Record(Record::Reply(r)) => wire::Pending::Reply(r),
                    _ => wire::Pending::Other,
                });
                let (entries, used) = wire::pack_front(
                    pending,
                    wire::ANSWERS_MAX_ENTRIES,
                    wire::ANSWERS_MAX_PAYLOAD,
                );
                match wire::Answers::new(generation, conn_id, entries) {
                    Ok(a) => {
                        let a = if offsets { a.with_offsets() } else { a };
                        let records = a.records();
                        if self.send(ctx, conn, &Record::Answers(a)) {
                            ctx.truth.on_answers_packed(records);
                        }
                        at += used;
                    }
                    Err(_) => {
                        match queue[at].clone() {
                            Out::Record(rec) => {
                                self.send(ctx, conn, &rec);
                            }
                            Out::Frames(frames) => {
                                let end = self.end();
                                ctx.net.send(conn, end, frames, ctx.now, ctx.rng);
                            }
                        }
                        at += 1;
                    }
                }
            }
        }
    }

    /// Runs every timer due at `ctx.now`.
    pub fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        self.run_timers(ctx);
        self.flush_answers(ctx);
    }

    fn run_timers(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.phase == Phase::Stopped {
            return;
        }
        self.live.handle_timeout_coalesced(self.at(now));
        self.calls.handle_timeout(self.at(now));
        self.serving.handle_timeout(self.at(now));
        // Handlers whose ttl passed are signalled before any of them finishes at this instant.
        self.serve_outputs(ctx);
        self.send_items(ctx);
        self.consume_slow(ctx);
        let due: Vec<ServeId> = self
            .handlers
            .iter()
            .filter(|(_, h)| h.ends_at <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            self.finish_handler(ctx, id);
        }
        if self.phase == Phase::Running {
            let due: Vec<(NodeIx, u8)> = self
                .dials
                .iter()
                .filter(|(_, d)| d.retry_at.is_some_and(|t| t <= now))
                .map(|(&k, _)| k)
                .collect();
            for key in due {
                self.dial(ctx, key);
            }
            let me = self.end();
            self.fan.handle_timeout(ctx, me);
        }
        let stale: Vec<NetConn> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.dialled
                    && c.ready.is_none()
                    && c.hello_sent
                    && c.opened_at + HANDSHAKE_TIMEOUT <= now
            })
            .map(|(&k, _)| k)
            .collect();
        for k in stale {
            ctx.trace(format!("{} {k} handshake timed out", self.me.rid));
            self.drop_conn(ctx, k, None);
        }
        self.pump(ctx);
    }

    fn dial(&mut self, ctx: &mut Ctx<'_>, key: (NodeIx, u8)) {
        let lane = lane_of(key.1);
        let inbound_ready = self.inbound_ready(key.0, lane);
        let Some(d) = self.dials.get_mut(&key) else {
            return;
        };
        d.retry_at = None;
        if d.conn.is_some() || d.not_required || d.withdrawn {
            return;
        }
        // A dial that stood down comes back only when the peer's connection is gone.
        if d.yielded && inbound_ready {
            return;
        }
        d.yielded = false;
        if self.disc.is_some() {
            let rid = crate::rid_of(key.0);
            let fence = self.fence_for(&rid);
            ctx.truth
                .on_discovery_dial(self.ix, &self.me.rid, &rid, fence.generation);
        }
        let (to, up) = ctx.host(key.0);
        let conn = ctx
            .net
            .dial(self.end(), to, up, Link::Lane(lane), ctx.now, ctx.rng);
        ctx.trace(format!(
            "{} {conn} dials host {} on {lane:?}",
            self.me.rid, key.0
        ));
        let id = ConnId(self.next_conn_id);
        self.next_conn_id += 1;
        if let Some(d) = self.dials.get_mut(&key) {
            d.conn = Some(conn);
        }
        self.conns.insert(
            conn,
            Conn {
                lane,
                peer_node: key.0,
                dialled: true,
                id,
                opened_at: ctx.now,
                hello_sent: false,
                ready: None,
                refused: false,
            },
        );
    }

    fn inbound_ready(&self, peer: NodeIx, lane: Lane) -> bool {
        self.conns
            .values()
            .any(|c| !c.dialled && c.peer_node == peer && c.lane == lane && c.ready.is_some())
    }

    /// Something arrived on `conn`.
    pub fn handle_delivery(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        peer_node: NodeIx,
        link: Link,
        delivery: Delivery,
    ) {
        self.on_delivery(ctx, conn, peer_node, link, delivery);
        self.flush_answers(ctx);
    }

    fn on_delivery(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        peer_node: NodeIx,
        link: Link,
        delivery: Delivery,
    ) {
        if self.phase == Phase::Stopped {
            return;
        }
        let lane = match link {
            Link::Lane(lane) => lane,
            Link::Sub => {
                let me = self.end();
                let base = self.base;
                self.fan
                    .handle_delivery(ctx, me, &mut self.live, base, conn, delivery);
                self.pump(ctx);
                return;
            }
        };
        match delivery {
            Delivery::Connected => self.on_connected(ctx, conn),
            Delivery::Closed => {
                if self.conns.contains_key(&conn) {
                    ctx.trace(format!("{} {conn} closed by the peer", self.me.rid));
                    self.lose_conn(ctx, conn, false);
                }
            }
            Delivery::Frames(frames) => self.on_frames(ctx, conn, peer_node, lane, frames),
        }
        self.pump(ctx);
    }

    fn on_frames(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        peer_node: NodeIx,
        lane: Lane,
        frames: Vec<Vec<u8>>,
    ) {
        let known = self
            .conns
            .get(&conn)
            .map(|c| (c.ready.is_some(), c.dialled, c.refused));
        let caps = self.caps_on(conn);
        let rec = Record::decode_in(&frames, caps, |f| Bytes::copy_from_slice(f));
        match known {
            None => {
                // What the acceptor reads first on a connection it does not know, as the
                // truth judges it: a record other than HELLO is a stale one (WIRE.md §5.1).
                let me = self.end();
                let stale = rec.as_ref().ok().map(Record::kind);
                let stale = stale.filter(|k| *k != wire::Kind::Hello);
                if let Some(kind) = stale {
                    let open = ctx.net.is_open(conn);
                    ctx.truth.on_stale_first(me, conn, kind, open);
                }
                self.on_unknown_inbound(ctx, conn, peer_node, lane, rec);
                if stale.is_some() {
                    ctx.truth.check_stale_answered(me, conn);
                }
            }
            Some((_, _, true)) => {}
            Some((false, true, _)) => match rec {
                Ok(Record::Welcome(w)) => self.on_welcome(ctx, conn, w),
                Ok(Record::Reject(r)) => self.on_reject(ctx, conn, r.reason),
                _ => {}
            },
            Some((false, false, _)) => {}
            Some((true, _, _)) => match rec {
                Ok(r) => self.on_ready_record(ctx, conn, r),
                Err(e) => {
                    let byte = frames.first().and_then(|f| f.get(3)).copied();
                    let extension = wire::Kind::EXTENSIONS
                        .into_iter()
                        .find(|k| Some(u8::from(*k)) == byte)
                        .filter(|k| !caps.contains(k.capability()));
                    if let Some(kind) = extension {
                        // CANCEL has an invariant of its own; every other extension kind
                        // (CALLS, ANSWERS, PACK, CALLS16, ANSWERS16) shares one.
                        let invariant = if kind == wire::Kind::Cancel {
                            "cancel_only_where_negotiated"
                        } else {
                            "extensions_only_where_negotiated"
                        };
                        let detail = format!(
                            "{} ({}) received a {} record on {conn}, where {} is not in effect",
                            self.me.rid,
                            self.me.capabilities,
                            kind.name().to_uppercase(),
                            kind.capability().names().collect::<Vec<_>>().join("+")
                        );
                        ctx.truth.violation(invariant, detail);
                    }
                    ctx.trace(format!("{} {conn} malformed record: {e}", self.me.rid));
                    self.drop_conn(ctx, conn, Some(CloseReason::ProtocolError));
                }
            },
        }
    }

    fn on_ready_record(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, rec: Record) {
        let now = self.at(ctx.now);
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (lane, id, peer_node) = (c.lane, c.id, c.peer_node);
        let Some(live) = c.ready.as_ref().map(|r| r.live) else {
            return;
        };
        match rec {
            Record::Probe { id: pid } => {
                self.send(ctx, conn, &Record::Ack { id: pid });
            }
            Record::Ack { id: pid } => {
                let _ = self.live.handle_ack(live, id, pid.get(), now);
            }
            Record::Message(m) => {
                let _ = self.live.handle_app_traffic(live, now);
                let me = self.end();
                ctx.truth.on_app_message(me, conn, &m.payload, ctx.now);
            }
            Record::Close { reason } => {
                ctx.trace(format!("{} {conn} CLOSE {reason:?}", self.me.rid));
                let orderly = matches!(reason, CloseReason::Shutdown | CloseReason::Draining);
                self.lose_conn(ctx, conn, orderly);
            }
            Record::Request(r) => self.on_request(ctx, conn, lane, peer_node, r, None),
            Record::Batch(b) => {
                self.on_batch(ctx, conn, lane, peer_node, b.into_requests());
            }
            Record::Accept(a) => {
                if let Some(cid) = self.call_for(a.call_id) {
                    self.calls.handle_accept(cid, conn, now);
                }
            }
            Record::Reply(r) => {
                if let Some(cid) = self.call_for(r.call_id) {
                    let applied = self.calls.handle_reply(cid, conn, r.code, r.payload, now);
                    if applied == Disposition::Applied
                        && self.caps_on(conn).contains(Capabilities::REPLAYED)
                    {
                        self.replayed.insert(cid, r.replayed);
                    }
                }
            }
            // Every ITEM goes to the table, which judges one for a call no longer pending
            // (a late item: counted, never handed out).
            Record::Item(i) => {
                let cid = CallId(i.call_id);
                self.calls.handle_item(cid, conn, i.seq, i.payload, now);
            }
            Record::Calls(c) => {
                self.on_batch(ctx, conn, lane, peer_node, c.into_requests());
            }
            Record::Cancel { call_id } => self.on_cancel(ctx, conn, lane, peer_node, call_id),
            // Each record an ANSWERS stands for, as if it had arrived alone (WIRE.md §4.16).
            Record::Answers(a) => {
                for r in a.into_records() {
                    self.on_ready_record(ctx, conn, r);
                }
            }
            Record::Credit { call_id, items } => {
                self.on_credit(ctx, conn, lane, peer_node, call_id, items.get());
            }
            // Each MESSAGE a PACK stands for, as if it had arrived alone (WIRE.md §4.18).
            // The simulated sender sends MESSAGEs only; this is the receiver's side.
            Record::Pack(p) => {
                for m in p.messages() {
                    self.on_ready_record(ctx, conn, Record::Message(m));
                }
            }
            Record::Hello(_) | Record::Welcome(_) | Record::Reject(_) => {}
        }
    }

    /// The capabilities in effect on `conn`: those both ends announced in its handshake (none
    /// before it is ready).
    fn caps_on(&self, conn: NetConn) -> Capabilities {
        self.conns
            .get(&conn)
            .and_then(|c| c.ready.as_ref())
            .map_or(Capabilities::NONE, |r| {
                r.peer.capabilities.intersection(self.me.capabilities)
            })
    }

    /// The ready connection to `peer` on `lane`, dialled or accepted.
    fn ready_on(&self, peer: NodeIx, lane: Lane) -> Option<NetConn> {
        self.conns
            .iter()
            .find(|(_, c)| c.peer_node == peer && c.lane == lane && c.ready.is_some())
            .map(|(&k, _)| k)
    }

    /// Drops `conn` from this side: CLOSE first if named, then the transport closes it. A
    /// connection this run accepted is only forgotten while the run goes on: a bound socket
    /// cannot close one accepted connection (libzmq), so the peer closes it on the CLOSE, and
    /// what it sent before that arrives as an unknown connection's records (WIRE.md §5.1,
    /// "Protocol errors before admission"), as the I/O thread's `fail_link` forgets the
    /// routing id. A run that stops closes its bound sockets, and with them every connection.
    fn drop_conn(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, close: Option<CloseReason>) {
        if let Some(reason) = close {
            if self.conns.get(&conn).is_some_and(|c| c.ready.is_some()) {
                self.send(ctx, conn, &Record::Close { reason });
            }
        }
        let accepted = self.conns.get(&conn).is_some_and(|c| !c.dialled);
        if accepted && self.phase != Phase::Stopped {
            ctx.trace(format!("{} {conn} forgotten", self.me.rid));
            self.release_conn(ctx, conn, false, false);
            return;
        }
        let end = self.end();
        ctx.net.close(conn, end, ctx.now, ctx.rng);
        self.lose_conn(ctx, conn, false);
    }

    /// `conn` is gone: everything that leaned on it learns so, and its dial redials.
    fn lose_conn(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, orderly: bool) {
        self.release_conn(ctx, conn, orderly, true);
    }

    /// This run lets go of `conn` (closing its transport if `close`; an accepted connection
    /// that is only forgotten stays open, and what still waits in its socket or arrives
    /// later is read as an unknown connection's): everything that leaned on it learns so,
    /// and its dial redials.
    fn release_conn(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, orderly: bool, close: bool) {
        let now = self.at(ctx.now);
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if close {
            let end = self.end();
            ctx.net.close(conn, end, ctx.now, ctx.rng);
            if let Some(rx) = self.rx.as_mut() {
                rx.forget(conn);
            }
        }
        if let Some(r) = &c.ready {
            self.live.remove(r.live);
            self.live_conn.remove(&r.live);
            ctx.truth.on_leave_ready(self.ix, conn, ctx.now);
        }
        self.calls.handle_connection_lost(conn, now);
        // The calls of the pair lean on the Application lane too, unless the peer closed it
        // in order (it answers what it accepted on the Completion lane first).
        if c.lane == Lane::Application && !orderly {
            if let Some(k) = self.ready_on(c.peer_node, Lane::Completion) {
                self.calls.handle_connection_lost(k, now);
            }
        }
        // Waiting calls of a caller that is gone never run; running handlers are told.
        self.serve_connection_lost(ctx, conn);
        if c.dialled {
            let rng_ms = ctx.rng.random_range(0..100);
            if let Some(d) = self.dials.get_mut(&(c.peer_node, u8::from(c.lane))) {
                if d.conn == Some(conn) {
                    d.conn = None;
                    d.failures = d.failures.saturating_add(1);
                    if !d.yielded && !d.not_required && !d.withdrawn && self.phase == Phase::Running
                    {
                        let backoff = Duration::from_millis(100u64 << d.failures.min(5));
                        d.retry_at = Some(ctx.now + backoff + Duration::from_millis(rng_ms));
                    }
                }
            }
        } else {
            // The peer's dial is gone: a dial of ours that stood down for it comes back.
            if let Some(d) = self.dials.get_mut(&(c.peer_node, u8::from(c.lane))) {
                if d.yielded && d.conn.is_none() && !d.withdrawn && self.phase == Phase::Running {
                    d.retry_at = Some(ctx.now + Duration::from_millis(50));
                }
            }
        }
    }

    /// Acts on everything the parts queued: probes to send, liveness verdicts, completions,
    /// the callee's own REPLYs, the end of a drain.
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let now = self.at(ctx.now);
        while let Some(t) = self.live.poll_transmit(now) {
            match t {
                Transmit::Probe { key, id, .. } => {
                    if let Some(&conn) = self.live_conn.get(&key) {
                        let Some(id) = NonZeroU64::new(id) else {
                            continue;
                        };
                        self.send(ctx, conn, &Record::Probe { id });
                    }
                }
                Transmit::Beacon { key } => {
                    if self.fan.is_beacon(key) {
                        let me = self.end();
                        self.fan.send_beacon(ctx, me);
                    }
                }
            }
        }
        while let Some((key, ev)) = self.live.poll_event() {
            if let LivenessEvent::Publisher(pe) = ev {
                let since = match pe {
                    PublisherEvent::BecameReady => continue,
                    PublisherEvent::Silence { last_receive_at } => last_receive_at,
                    PublisherEvent::ProtocolError(_) => None,
                };
                let since = since
                    .or_else(|| self.live.publisher(key).map(|w| w.socket_at()))
                    .map_or(Duration::ZERO, |t| t.saturating_duration_since(self.base));
                ctx.trace(format!("{} publisher watch {key} silent", self.me.rid));
                let me = self.end();
                let base = self.base;
                self.fan
                    .handle_silence(ctx, me, &mut self.live, base, key, since);
                continue;
            }
            if let LivenessEvent::Probe(_) = ev {
                if let Some(&conn) = self.live_conn.get(&key) {
                    let tracker = self.live.probe(key).map(|t| {
                        t.last_ack_at()
                            .unwrap_or(t.ready_at())
                            .saturating_duration_since(self.base)
                    });
                    ctx.truth
                        .on_deadline(self.ix, conn, tracker, ctx.now, ctx.net.last_hold(conn));
                    ctx.trace(format!("{} {conn} deadline exceeded", self.me.rid));
                    self.drop_conn(ctx, conn, Some(CloseReason::DeadlineExceeded));
                }
            }
        }
        // Cancels first: the calls they name are still in `call_uid` until their completion.
        while let Some((_, cid)) = self.calls.poll_cancel() {
            self.send_cancel(ctx, cid);
        }
        // Items first, as the table asks: a call's items are handed out before its end.
        while let Some(item) = self.calls.poll_item() {
            self.take_item(ctx, item);
        }
        while let Some((cid, result)) = self.calls.poll_completion() {
            let out = self.call_uid.remove(&cid);
            let replayed = self.replayed.remove(&cid);
            self.ungranted.remove(&cid);
            let Some(Outgoing { uid, .. }) = out else {
                ctx.truth.violation(
                    "exactly_once",
                    format!(
                        "{}: a completion for call {cid:?} nobody started or already completed",
                        self.me.rid
                    ),
                );
                continue;
            };
            // A slow consumer takes the end after the items it has not taken yet (a
            // cancelled call's application takes nothing more).
            if let Some(s) = self.slow.get_mut(&cid) {
                let cancelled = matches!(result, Err(CallError::Cancelled { .. }));
                if !s.queue.is_empty() && !cancelled {
                    s.end = Some((result, replayed));
                    continue;
                }
                self.slow.remove(&cid);
            }
            self.complete(ctx, uid, result, replayed);
        }
        self.serve_outputs(ctx);
        if self.phase == Phase::Draining && self.serving.is_drained() {
            self.stop(ctx);
        }
    }

    /// The application learns how call `uid` ended.
    fn complete(
        &mut self,
        ctx: &mut Ctx<'_>,
        uid: u64,
        result: Result<zmesh::proto::calls::Completion, CallError>,
        replayed: Option<bool>,
    ) {
        ctx.truth
            .on_stream_end(uid, result.as_ref().map(|c| c.items));
        ctx.trace(format!(
            "{} call u{uid} completed: {}",
            self.me.rid,
            describe(&result)
        ));
        ctx.truth
            .on_completion(uid, result.map(|c| c.payload), replayed, ctx.now);
    }

    /// Begins a graceful stop: new calls and connections are refused, accepted calls are
    /// answered up to [`DRAIN_BOUND`], then every connection closes.
    pub fn begin_stop(&mut self, ctx: &mut Ctx<'_>) {
        if self.phase != Phase::Running {
            return;
        }
        ctx.trace(format!("{} begins a graceful stop", self.me.rid));
        self.phase = Phase::Draining;
        // The descriptor goes first (the runtime removes it before closing connections).
        self.stop_discovery();
        let now = self.at(ctx.now);
        self.calls.handle_shutdown(now);
        self.serving.begin_drain(DRAIN_BOUND, now);
        self.pump(ctx);
        self.flush_answers(ctx);
    }

    fn stop(&mut self, ctx: &mut Ctx<'_>) {
        // The answers of this step leave before the connections close.
        self.flush_answers(ctx);
        // The application still reads what its streams hold, then their ends.
        self.consume_all(ctx);
        self.phase = Phase::Stopped;
        let me = self.end();
        self.fan.stop(ctx, me);
        let conns: Vec<NetConn> = self.conns.keys().copied().collect();
        for k in conns {
            self.drop_conn(ctx, k, Some(CloseReason::Shutdown));
        }
        // Handlers whose callers are gone are abandoned with the node.
        self.abandon_handlers(ctx);
        self.live.clear();
        self.live_conn.clear();
        ctx.trace(format!("{} stopped", self.me.rid));
    }

    /// Every ready connection with its liveness evidence: (connection, peer RID, instant of
    /// the last valid ACK or of ready).
    pub fn ready_evidence(&self) -> Vec<(NetConn, String, Duration)> {
        self.conns
            .iter()
            .filter_map(|(&k, c)| {
                let r = c.ready.as_ref()?;
                let t = self.live.probe(r.live)?;
                let last = t.last_ack_at().unwrap_or(t.ready_at());
                Some((
                    k,
                    r.peer.rid.clone(),
                    last.saturating_duration_since(self.base),
                ))
            })
            .collect()
    }

    /// Every ready connection with its peer's RID and generation.
    pub fn ready_runs(&self) -> Vec<(NetConn, String, u64)> {
        self.conns
            .iter()
            .filter_map(|(&k, c)| {
                let r = c.ready.as_ref()?;
                Some((k, r.peer.rid.clone(), r.peer.generation))
            })
            .collect()
    }

    /// Whether a connection to host `peer` on `lane` is ready (dialled or accepted).
    pub fn is_ready_with(&self, peer: NodeIx, lane: Lane) -> bool {
        self.ready_on(peer, lane).is_some()
    }

    /// Publishes record `uid` if this run publishes.
    pub fn publish(&mut self, ctx: &mut Ctx<'_>, uid: u64) -> bool {
        if self.phase != Phase::Running {
            return false;
        }
        let me = self.end();
        self.fan.publish(ctx, me, self.me.generation, uid)
    }

    /// The publisher watches that are ready, with their last valid receipt.
    pub fn ready_watches(&self) -> Vec<(NodeIx, Duration)> {
        self.fan.ready_watches(&self.live, self.base)
    }

    /// Calls still pending in the caller's table.
    pub fn pending_calls(&self) -> usize {
        self.calls.pending()
    }

    /// Peers this run is ready with, by host (any lane).
    pub fn ready_peers(&self) -> BTreeSet<NodeIx> {
        self.conns
            .values()
            .filter(|c| c.ready.is_some())
            .map(|c| c.peer_node)
            .collect()
    }
}

fn describe(r: &Result<zmesh::proto::calls::Completion, CallError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{e:?} (may have run: {})", e.may_have_run()),
    }
}

/// A wire name from one of this file's constants (valid by construction).
fn name(s: &'static str) -> wire::Name {
    wire::Name::new(s).expect("the simulator's channel and method names are valid wire names")
}

/// The lane a dial key names (keys hold the lane's wire code, which orders).
fn lane_of(code: u8) -> Lane {
    Lane::try_from(code).unwrap_or(Lane::Application)
}
