//! The I/O thread: owns every libzmq socket of a node and runs the single receive loop
//! (MISSION R1).
//!
//! One loop turn: read the monotonic clock once; run due timers (liveness, beacons, reconnects,
//! disconnect sweeps); wait on the epoll set of every socket's, monitor's and the wake-up
//! pair's `ZMQ_FD` until the next deadline, and check `ZMQ_EVENTS` of the sockets that fired or
//! that the loop touched (module [`ready`]); handle monitor events; handle commands; run one
//! receive rotation under the scheduler's caps; hand the batch of events to the application.
//! Protocol questions (is this ACK evidence? is this peer admitted? is this publisher silent?)
//! are answered by the sans-IO state machines of [`crate::proto`]; this file only moves bytes
//! and reports socket events. An idle wake-up costs the sockets that moved and the timers that
//! are due, not the node's size.
//!
//! # Lanes and who dials
//! A node dials every configured RouteMesh peer with two dedicated ROUTER sockets (Application
//! lane, Completion lane) and every configured ClientServer server with a dedicated DEALER. The
//! dialling side therefore owns a socket per peer and lane and can drop exactly that
//! connection. The accepting side shares one bound ROUTER per lane among its peers; libzmq
//! cannot close one accepted pipe and its disconnect events do not name the peer, so on a
//! bound-side disconnect event the loop *sweeps* that socket: it sends each inbound
//! connection's pending probe with `ROUTER_MANDATORY`, and a connection whose pipe is gone
//! fails the send with `EHOSTUNREACH` and is taken out of ready at once (MISSION L6). The
//! sweep repeats a few times over [`SWEEP_DELAYS`] because libzmq removes the pipe shortly
//! after it reports the event.
//!
//! When two nodes dial each other, both connections reach the acceptors; the connection
//! dialled by the node with the smaller RID is kept and the other one is rejected with
//! `Duplicate`, so each lane has exactly one current connection per peer (MISSION T1).

mod calls;
mod ready;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, TryRecvError};
use tokio::sync::{mpsc, oneshot};

use super::node::{BatchSendError, Delivery, NodeError, NodeEvent, SendError, Source, StateChange};
use super::records::{self, CloseReason, Fanout, Lane, Rec, RejectReason};
use super::snapshot::{FailureSnapshot, LinkSnapshot, Snapshot, SNAPSHOT_LIMIT};
use super::socket::{Frame, FrameSocket, MonitorEvent, MonitorSocket, Sockets, CLOSE_LINGER_MS};
use crate::config::NodeConfig;
use crate::proto::calls::{CallId, CallTable, ServeTable};
use crate::proto::handshake::{self, Expectation, Identity, Refusal};
use crate::proto::liveness::{
    self, Delivery as FanoutDelivery, FanoutInput, Liveness, LivenessEvent, ProbeEvent,
    PublisherEvent, Transmit, PEER_DEADLINE,
};
use crate::proto::sched::{
    Action, IdMap, ReadTarget, ReceiveScheduler, RotationEndReason, SharedSocketId,
    Source as SchedSource,
};
use crate::proto::state::{ConnState, FailureReason, LinkKind as StateKind, LinkState, Recovery};
use crate::proto::wire::{BEACON_TOPIC, MAX_TOPIC_LEN};
use crate::proto::ConnId;
use calls::CallKey;
pub use calls::GRACEFUL_STOP_BOUND;
pub(crate) use calls::{CallReply, ServeDone, ServeItem, ServeJob, Served};
use ready::{KeySet, Readiness, Watch};

/// Delays after a bound-side disconnect event at which the socket's inbound connections are
/// checked for a vanished pipe.
pub const SWEEP_DELAYS: [Duration; 4] = [
    Duration::from_millis(0),
    Duration::from_millis(20),
    Duration::from_millis(100),
    Duration::from_millis(500),
];
/// A dialled connection that is not ready this long after its socket was created is closed
/// and dialled again (a connect that never completes, a peer that never answers HELLO).
pub const HANDSHAKE_TIMEOUT: Duration = PEER_DEADLINE;
/// First reconnect delay after a failure; doubles per consecutive failure.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Largest reconnect delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Longest wait for a closed dialled socket's monitor to confirm the close before a
/// replacement is dialled anyway (the monitor itself is kept until libzmq confirms). libzmq
/// confirms within milliseconds (`MONITOR_STOPPED`, once the socket is destroyed); the bound
/// is for a reaper that is far behind.
pub const CLOSE_CONFIRM_MAX: Duration = Duration::from_secs(1);
/// Records read from a dialled socket after its disconnect event, before the disconnect is
/// acted on (they arrived first; an orderly CLOSE among them is the better reason).
const DRAIN_BEFORE_DISCONNECT: usize = 1024;
/// Records a link holds while the application queue is paused; when full, the link's socket
/// is not read until the queue drains (MISSION R5).
pub const LINK_BACKLOG: usize = 1024;
/// Longest poll wait while some socket is held back by a paused application queue, so the
/// loop notices the application draining its queue.
const PAUSED_POLL_MS: i64 = 10;
/// Bound on one drain of commands per loop turn, so commands cannot starve the receive loop.
const COMMANDS_PER_TURN: usize = 1024;

const BOUND_ID_APPLICATION: &[u8] = b"zmesh-application";
const BOUND_ID_COMPLETION: &[u8] = b"zmesh-completion";
const BOUND_ID_SERVER: &[u8] = b"zmesh-server";

/// Work for the I/O thread from the async side.
pub(crate) enum Command {
    SendPeer {
        peer: String,
        channel: String,
        payload: Bytes,
        reply: oneshot::Sender<Result<(), SendError>>,
    },
    SendPeerBatch {
        peer: String,
        channel: String,
        payloads: Vec<Bytes>,
        reply: oneshot::Sender<Result<(), BatchSendError>>,
    },
    SendServer {
        channel: String,
        payload: Bytes,
        reply: oneshot::Sender<Result<(), SendError>>,
    },
    Publish {
        topic: Bytes,
        payload: Bytes,
    },
    PublishBatch {
        topic: Bytes,
        payloads: Vec<Bytes>,
    },
    Snapshot(oneshot::Sender<Snapshot>),
    Shutdown(oneshot::Sender<()>),
    Call {
        channel: String,
        method: String,
        args: Bytes,
        opts: crate::runtime::calls::CallOptions,
        reply: CallReply,
    },
    Serve {
        channel: String,
        served: Served,
    },
    ServeItem(ServeItem),
    ServeDone(ServeDone),
}

type SlotKey = usize;
type LinkKey = usize;

/// What a socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotRole {
    /// A bound ROUTER shared by the inbound connections of one lane.
    Bound(Lane),
    /// A dialled ROUTER/DEALER owned by one link.
    Dialled(LinkKey),
    /// A SUB socket owned by one fanout subscription.
    Sub(usize),
    /// The publisher's PUB socket (never polled for input).
    Publisher,
}

struct Slot {
    socket: zmq::Socket,
    monitor: Option<MonitorSocket>,
    role: SlotRole,
    endpoint: String,
    /// The scheduler's handle of a bound socket shared by several peers (MISSION R3).
    shared: Option<SharedSocketId>,
}

/// Answers (ACCEPT, REPLY) held back by a full pipe: the connection they are for, in order.
type HeldAnswers = (ConnId, VecDeque<Vec<Vec<u8>>>);

/// What the receive scheduler accounts caps to (MISSION R2, R3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Unit {
    /// A socket with one peer: a dialled ROUTER/DEALER or a SUB socket.
    Socket(SlotKey),
    /// One inbound physical connection behind a bound socket.
    Peer(LinkKey, ConnId),
    /// Records from not-yet-admitted connections of a bound socket (handshakes).
    Admission(SlotKey),
}

/// A record read by the receive loop, waiting for its unit's turn.
struct Staged {
    /// The routing id split off a bound socket's record.
    route: Option<Frame>,
    frames: Vec<Frame>,
}

/// Where a link's records go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LinkKind {
    /// A RouteMesh lane this node dials (index into config.peers).
    MeshDial { peer: usize, lane: Lane },
    /// A ClientServer server this node dials (index into config.servers).
    ClientDial { server: usize },
    /// A connection accepted on a bound socket, keyed by peer RID and lane.
    Inbound { rid: String, lane: Lane },
}

/// One physical connection of a link.
struct Conn {
    id: ConnId,
    slot: SlotKey,
    /// The routing id to prefix when sending (the peer's id on a bound socket, the bound
    /// socket's constant id on a dialled ROUTER, none on a DEALER).
    route: Option<Vec<u8>>,
    /// Dialled connections: when the socket was created (handshake timeout).
    opened_at: Instant,
    hello_sent: bool,
    ready: bool,
    peer: Option<Identity>,
    /// Who this connection's application records come from (once ready): built once, so a
    /// delivery costs a reference count, not a copy of the peer's RID.
    source: Option<Source>,
    /// This connection's probe tracker in the node's liveness table (once ready).
    live: Option<liveness::LinkKey>,
    /// The last probe id the peer sent on this connection (re-ACKed by disconnect sweeps).
    last_peer_probe: Option<u64>,
}

struct Link {
    kind: LinkKind,
    state: LinkState,
    conn: Option<Conn>,
    /// Reconnect not before this instant (dialled links).
    retry_at: Option<Instant>,
    /// A closed socket whose close is not yet confirmed; no new dial until it is.
    closing: Option<(MonitorSocket, Instant)>,
    failures_in_row: u32,
    /// NotRequired is terminal for this configuration generation (MISSION T4).
    terminal: bool,
    /// This dialled lane is served by the peer's inbound connection (duplicate resolution).
    yielded: bool,
    records: u64,
    last_receive: Option<Instant>,
    /// Application records held while the application queue is paused (MISSION R5).
    backlog: VecDeque<Delivery>,
}

impl Link {
    /// Whether this link will be dialled again at `retry_at`: a dialled link without a
    /// connection, not stood down, whose old socket's close was confirmed. The poll timeout
    /// takes `retry_at` only for such links: an inbound link is never dialled, and a timer
    /// nothing acts on would make every poll return at once (the loop would spin).
    fn waits_to_redial(&self) -> bool {
        self.conn.is_none()
            && !self.terminal
            && !self.yielded
            && self.closing.is_none()
            && !matches!(self.kind, LinkKind::Inbound { .. })
    }

    /// The lane this link serves.
    fn lane(&self) -> Option<Lane> {
        match &self.kind {
            LinkKind::MeshDial { lane, .. } | LinkKind::Inbound { lane, .. } => Some(*lane),
            LinkKind::ClientDial { .. } => Some(Lane::ClientServer),
        }
    }
}

struct Sub {
    endpoint: String,
    /// The source of this publisher's deliveries, built once (a reference count per record).
    source: Source,
    /// The topic of the last record delivered: the next record's topic, when it is the same,
    /// is a clone of it instead of a fresh copy.
    last_topic: Bytes,
    slot: Option<SlotKey>,
    conn_id: Option<ConnId>,
    /// This publisher's watch in the node's liveness table.
    live: liveness::LinkKey,
    state: LinkState,
    records: u64,
    /// The current socket completed a ZMTP handshake with the publisher.
    connected: bool,
    /// Open a new socket not before this instant.
    retry_at: Instant,
    failures_in_row: u32,
}

struct Publisher {
    slot: SlotKey,
    /// The beacon schedule in the node's liveness table.
    live: liveness::LinkKey,
    seq: u64,
}

/// Who owns a liveness entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LiveOwner {
    Link(LinkKey),
    Sub(usize),
    Publisher,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Host {
    Running,
    /// Stopping gracefully: no new work, accepted calls are answered (MISSION C4, F6).
    Draining,
    Stopped,
}

/// The I/O thread's state.
pub(crate) struct IoThread {
    cfg: NodeConfig,
    me: Identity,
    sockets: Sockets,
    wake: zmq::Socket,
    /// The epoll set over every socket's `ZMQ_FD` and the sockets due for a `ZMQ_EVENTS`
    /// check (see [`ready`] for the rule that keeps an edge from being lost).
    ready: Readiness,
    /// Sockets with a record to read (their `ZMQ_EVENTS` said so, and no receive has
    /// returned `EAGAIN` since).
    readable: KeySet,
    /// Slots whose monitor has events to read.
    monitors_ready: KeySet,
    /// The wake-up pair has wake-ups to read.
    wake_ready: bool,
    commands: Receiver<Command>,
    events: mpsc::UnboundedSender<Vec<NodeEvent>>,
    out: Vec<NodeEvent>,
    /// Deliveries handed to the application and not yet taken by it.
    outstanding: Arc<AtomicUsize>,
    /// Sockets not read this turn because a paused application queue holds them back.
    held: Vec<SlotKey>,
    /// Records waiting in link backlogs.
    backlogged: usize,
    /// Links whose backlog is not empty, so releasing backlogs costs those links only.
    backlog_links: BTreeSet<LinkKey>,
    /// The earliest deadline of the per-link and per-subscription timers (handshake
    /// timeouts, redials, close confirmations, SUB re-opens) and of the disconnect sweeps,
    /// from the last scan of every link; `None` if none is set.
    link_deadline: Option<Instant>,
    /// A link, subscription or sweep changed since that scan. Every change that can set or
    /// advance one of those timers sets this flag; while it is clear and no deadline is due,
    /// a loop turn does not look at the links at all (an idle node with 1 500 links would
    /// otherwise walk them on every wake-up).
    link_timers_changed: bool,
    /// The last receive rotation left work that socket readiness cannot show: wait without
    /// sleeping, and run a rotation even if no socket is readable.
    busy: bool,
    /// Calls this node made, leased on the connection that carried them (MISSION C1, C2).
    calls: CallTable<CallKey>,
    pending_calls: HashMap<CallId, CallReply>,
    /// Calls this node serves (MISSION C4, C6).
    serve: ServeTable<CallKey>,
    served: HashMap<String, Served>,
    /// Channels some peer ever announced a Server membership for.
    known_servers: HashSet<String>,
    /// ACCEPTs and REPLYs held back by a full pipe, per link (and its connection then).
    answers: HashMap<LinkKey, HeldAnswers>,
    slots: Vec<Option<Slot>>,
    links: Vec<Link>,
    /// Inbound connections by bound socket and routing id (unique per physical connection).
    /// The outer key is our own slot key (fast hash); the routing ids are chosen by peers and
    /// keep the standard keyed hash.
    inbound: IdMap<SlotKey, HashMap<Vec<u8>, LinkKey>>,
    subs: Vec<Sub>,
    publisher: Option<Publisher>,
    /// The one structure owning every liveness machine of this node (MISSION L8).
    liveness: Liveness,
    live_owner: HashMap<liveness::LinkKey, LiveOwner>,
    /// The one fair receive scheduler over every socket and peer (MISSION R1-R3).
    sched: ReceiveScheduler<Unit, Staged>,
    shared_slots: IdMap<SharedSocketId, SlotKey>,
    sweeps: Vec<(Instant, SlotKey, usize)>,
    /// Monitors of closed dialled sockets whose close was not confirmed within
    /// [`CLOSE_CONFIRM_MAX`]: their links dial again, but the monitors are kept (still watched,
    /// under their link's [`Watch::Closing`]) until libzmq confirms, because a monitor dropped
    /// before libzmq's last event blocks the context's reaper (see `MonitorSocket`).
    overdue_closing: Vec<MonitorSocket>,
    next_conn: u64,
    /// Round-robin position among the ready servers of a channel.
    server_rr: usize,
    host: Host,
    shutdown_reply: Option<oneshot::Sender<()>>,
}

impl IoThread {
    /// Binds the node's endpoints and prepares its links; returns the thread state and the
    /// sending end of the wake-up pair.
    pub(crate) fn new(
        cfg: NodeConfig,
        generation: u64,
        commands: Receiver<Command>,
        events: mpsc::UnboundedSender<Vec<NodeEvent>>,
        outstanding: Arc<AtomicUsize>,
    ) -> Result<(IoThread, zmq::Socket), NodeError> {
        let now = Instant::now();
        let sockets = Sockets::new(generation);
        // The wake-up pair lives in a context of its own: the handle keeps its end, and the
        // contexts of every other socket must be free to terminate at shutdown.
        let ctx = zmq::Context::new();
        let wake = ctx.socket(zmq::PAIR)?;
        wake.set_linger(0)?;
        let wake_ep = format!("inproc://zmesh-wake-{generation:016x}");
        wake.bind(&wake_ep)?;
        let waker = ctx.socket(zmq::PAIR)?;
        // No high-water mark: a wake-up is never refused. With a limit, libzmq can refuse one
        // although the I/O thread already read every earlier wake-up (the sender learns of
        // reads only in steps, and at most about once per millisecond), and the command
        // behind it would wait for an unrelated wake-up. Every turn drains them all.
        waker.set_sndhwm(0)?;
        waker.set_linger(0)?;
        waker.connect(&wake_ep)?;
        let ready = Readiness::new().map_err(NodeError::Poller)?;
        ready
            .register(&wake, Watch::Wake)
            .map_err(NodeError::Poller)?;

        let me = Identity {
            rid: cfg.rid.clone(),
            generation,
            security_identity: cfg.security_identity().to_owned(),
            memberships: cfg.memberships.clone(),
        };
        let mut io = IoThread {
            cfg: cfg.clone(),
            me,
            sockets,
            wake,
            ready,
            readable: KeySet::default(),
            monitors_ready: KeySet::default(),
            wake_ready: false,
            commands,
            events,
            out: Vec::new(),
            outstanding,
            held: Vec::new(),
            backlogged: 0,
            backlog_links: BTreeSet::new(),
            link_deadline: None,
            link_timers_changed: true,
            busy: false,
            calls: CallTable::new(),
            pending_calls: HashMap::new(),
            serve: ServeTable::new(),
            served: HashMap::new(),
            known_servers: HashSet::new(),
            answers: HashMap::new(),
            slots: Vec::new(),
            links: Vec::new(),
            inbound: IdMap::default(),
            subs: Vec::new(),
            publisher: None,
            liveness: Liveness::new(generation),
            live_owner: HashMap::new(),
            // Readiness mode: a rotation visits the units with work only (the readable set
            // is handed over at the start of each rotation).
            sched: ReceiveScheduler::new().with_readiness(),
            shared_slots: IdMap::default(),
            sweeps: Vec::new(),
            overdue_closing: Vec::new(),
            next_conn: 1,
            server_rr: 0,
            host: Host::Running,
            shutdown_reply: None,
        };
        if let Some(rm) = &cfg.route_mesh {
            io.bind(
                zmq::ROUTER,
                &rm.application,
                SlotRole::Bound(Lane::Application),
            )?;
            io.bind(
                zmq::ROUTER,
                &rm.completion,
                SlotRole::Bound(Lane::Completion),
            )?;
        }
        if let Some(s) = &cfg.server {
            io.bind(
                zmq::ROUTER,
                &s.endpoint,
                SlotRole::Bound(Lane::ClientServer),
            )?;
        }
        if let Some(p) = &cfg.publisher {
            let slot = io.bind(zmq::PUB, &p.endpoint, SlotRole::Publisher)?;
            let live = io.liveness.insert_beacon(now);
            io.live_owner.insert(live, LiveOwner::Publisher);
            io.publisher = Some(Publisher { slot, live, seq: 0 });
        }
        for (i, _) in cfg.peers.iter().enumerate() {
            for lane in [Lane::Application, Lane::Completion] {
                io.add_link(LinkKind::MeshDial { peer: i, lane }, now);
            }
        }
        for (i, _) in cfg.servers.iter().enumerate() {
            io.add_link(LinkKind::ClientDial { server: i }, now);
        }
        for s in &cfg.subscriptions {
            let live = io.liveness.insert_publisher(now);
            io.live_owner.insert(live, LiveOwner::Sub(io.subs.len()));
            io.subs.push(Sub {
                endpoint: s.endpoint.clone(),
                source: Source::Publisher {
                    endpoint: Arc::from(s.endpoint.as_str()),
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
            });
        }
        Ok((io, waker))
    }

    fn bind(
        &mut self,
        kind: zmq::SocketType,
        ep: &str,
        role: SlotRole,
    ) -> Result<SlotKey, NodeError> {
        let bind_err = |source| NodeError::Bind {
            endpoint: ep.to_owned(),
            source,
        };
        let (socket, monitor) = if role == SlotRole::Publisher {
            (self.sockets.plain(kind).map_err(bind_err)?.0, None)
        } else {
            let m = self.sockets.monitored(kind).map_err(bind_err)?;
            (m.socket, Some(m.monitor))
        };
        if let SlotRole::Bound(lane) = role {
            let id = match lane {
                Lane::Application => BOUND_ID_APPLICATION,
                Lane::Completion => BOUND_ID_COMPLETION,
                Lane::ClientServer => BOUND_ID_SERVER,
            };
            socket.set_identity(id).map_err(bind_err)?;
        }
        socket.set_linger(CLOSE_LINGER_MS).map_err(bind_err)?;
        socket.bind(ep).map_err(bind_err)?;
        self.add_slot(Slot {
            socket,
            monitor,
            role,
            endpoint: ep.to_owned(),
            shared: None,
        })
        .map_err(NodeError::Poller)
    }

    /// Places a socket in a slot and registers it and its monitor in the epoll set; on
    /// failure the slot is given up again (the socket closes).
    fn add_slot(&mut self, slot: Slot) -> std::io::Result<SlotKey> {
        let key = self.put_slot(slot);
        let registered = match self.slots.get(key) {
            Some(Some(s)) => {
                let socket = if s.role == SlotRole::Publisher {
                    // Never read: nothing to watch.
                    Ok(())
                } else {
                    self.ready.register(&s.socket, Watch::Socket(key))
                };
                socket.and_then(|()| match &s.monitor {
                    Some(m) => self.ready.register(m, Watch::Monitor(key)),
                    None => Ok(()),
                })
            }
            _ => Ok(()),
        };
        if let Err(e) = registered {
            if let Some(slot) = self.take_slot(key) {
                match (slot.role, slot.monitor) {
                    // A dialled socket's monitor waits for libzmq's confirmation of the close.
                    (SlotRole::Dialled(k), Some(m)) => {
                        drop(slot.socket);
                        self.park_closing(k, m);
                    }
                    (_, monitor) => {
                        drop(slot.socket);
                        drop(monitor);
                    }
                }
            }
            return Err(e);
        }
        Ok(key)
    }

    fn put_slot(&mut self, mut slot: Slot) -> SlotKey {
        let role = slot.role;
        let shared = match role {
            SlotRole::Bound(_) => Some(self.sched.add_shared_socket()),
            _ => None,
        };
        slot.shared = shared;
        let key = match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        if let Some(sid) = shared {
            self.shared_slots.insert(sid, key);
        }
        let unit = match (role, shared) {
            (SlotRole::Publisher, _) => None,
            (_, Some(sid)) => Some((Unit::Admission(key), SchedSource::Shared(sid))),
            (_, None) => Some((Unit::Socket(key), SchedSource::Single)),
        };
        if let Some((unit, source)) = unit {
            if let Err(e) = self.sched.add_unit(unit, source) {
                tracing::debug!(error = ?e, "scheduler unit not added");
            }
        }
        key
    }

    fn shared_id(&self, slot: SlotKey) -> Option<SharedSocketId> {
        self.slots.get(slot)?.as_ref()?.shared
    }

    fn take_slot(&mut self, key: SlotKey) -> Option<Slot> {
        match self.shared_id(key) {
            // Records staged for its peers go with the socket.
            Some(sid) => {
                self.shared_slots.remove(&sid);
                drop(self.sched.remove_shared_socket(sid));
            }
            None => drop(self.sched.remove_unit(Unit::Socket(key))),
        }
        self.inbound.remove(&key);
        self.sweeps.retain(|s| s.1 != key);
        self.readable.remove(key);
        self.monitors_ready.remove(key);
        let slot = self.slots.get_mut(key).and_then(Option::take)?;
        // Out of the epoll set before the sockets close (their descriptors go with them).
        if slot.role != SlotRole::Publisher {
            self.ready.deregister(&slot.socket);
        }
        if let Some(m) = &slot.monitor {
            self.ready.deregister(m);
        }
        Some(slot)
    }

    fn add_link(&mut self, kind: LinkKind, now: Instant) -> LinkKey {
        self.timers_changed();
        self.links.push(Link {
            kind,
            state: LinkState::new(StateKind::Peer, 0, now),
            conn: None,
            retry_at: Some(now),
            closing: None,
            failures_in_row: 0,
            terminal: false,
            yielded: false,
            records: 0,
            last_receive: None,
            backlog: VecDeque::new(),
        });
        self.links.len() - 1
    }

    fn fresh_conn_id(&mut self) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        id
    }

    // ----------------------------------------------------------------------------------
    // The loop
    // ----------------------------------------------------------------------------------

    /// Runs until shutdown or until every handle is dropped.
    pub(crate) fn run(mut self) {
        // Commands queued before the thread started (services registered by a `NodeBuilder`)
        // take effect before the first record is read.
        if !self.drain_commands(Instant::now()) {
            self.close_everything();
            return;
        }
        loop {
            let now = Instant::now();
            self.run_timers(now);
            self.release_backlogs();
            self.flush_answers();
            self.flush_events();
            if self.host == Host::Draining && self.serve.is_drained() {
                self.host = Host::Stopped;
            }
            if self.host == Host::Stopped {
                break;
            }
            // Every socket the loop operated on since the last check is looked at before
            // the loop may sleep: an operation can consume the descriptor's signal (`ready`).
            // Before the timeout: a close confirmed here may let a link redial sooner.
            self.settle();
            let timeout = self
                .poll_timeout()
                .map(|t| {
                    let d = t.saturating_duration_since(now);
                    // Round up so the loop never wakes a hair before a deadline and spins.
                    (d.as_micros().div_ceil(1000)) as i64
                })
                .unwrap_or(-1);
            let timeout = if self.busy || !self.commands.is_empty() || self.has_input() {
                // More records, monitor events or commands are waiting (commands left over by
                // the per-turn cap have no wake-up of their own): do not sleep.
                0
            } else if self.backlogged == 0 && self.answers.is_empty() {
                timeout
            } else if timeout < 0 {
                PAUSED_POLL_MS
            } else {
                timeout.min(PAUSED_POLL_MS)
            };
            let wait = u64::try_from(timeout).ok().map(Duration::from_millis);
            if let Err(e) = self.ready.wait(wait) {
                tracing::error!(error = %e, "epoll wait failed; stopping the node");
                break;
            }
            self.settle();
            let now = Instant::now();
            for slot in self.monitors_ready.take() {
                self.drain_monitor(slot, now);
            }
            // Commands before records: a command the application gave before it saw some
            // effect (e.g. a service registered before the peer was seen ready) is in force
            // before any record read after that effect.
            if std::mem::take(&mut self.wake_ready) {
                while self.wake.recv_bytes(zmq::DONTWAIT).is_ok() {}
                self.ready.touch(Watch::Wake);
            }
            if !self.drain_commands(now) {
                break;
            }
            // A rotation with no readable socket and nothing left over from the last one
            // (records staged, a rotation cut by its time cap) would only answer "would
            // block" for every unit: skip it.
            self.busy = if self.busy || self.has_readable() {
                self.receive_rotation()
            } else {
                false
            };
        }
        self.close_everything();
    }

    /// The earliest instant any timer of the node is due.
    fn poll_timeout(&mut self) -> Option<Instant> {
        if self.link_timers_changed {
            self.link_timers_changed = false;
            self.link_deadline = self.scan_link_timers();
        }
        [
            self.liveness.poll_timeout(),
            self.calls.poll_timeout(),
            self.serve.poll_timeout(),
            self.link_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Notes that a link, a subscription or the sweeps changed: their timers are scanned
    /// again before the loop next sleeps or trusts the last scan.
    fn timers_changed(&mut self) {
        self.link_timers_changed = true;
    }

    /// The earliest per-link, per-subscription or sweep deadline: a walk over every link
    /// and subscription, done only after one of them changed or a deadline came due.
    fn scan_link_timers(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut take = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for l in &self.links {
            if let Some(c) = &l.conn {
                if !c.ready {
                    take(Some(c.opened_at + HANDSHAKE_TIMEOUT));
                }
            } else if l.waits_to_redial() {
                take(l.retry_at);
            }
            take(l.closing.as_ref().map(|c| c.1 + CLOSE_CONFIRM_MAX));
        }
        for s in self.subs.iter().filter(|s| s.slot.is_none()) {
            take(Some(s.retry_at));
        }
        for s in &self.sweeps {
            take(Some(s.0));
        }
        next
    }

    /// Reads `ZMQ_EVENTS` of every socket due for a check (touched by the loop, or its
    /// descriptor fired) and records what it says: readable sockets, monitors with events,
    /// wake-ups, closes confirmed. The check itself is the socket's last operation, so the
    /// next record to arrive on it signals its descriptor again.
    fn settle(&mut self) {
        while self.ready.has_checks() {
            for w in self.ready.take_checks() {
                match w {
                    Watch::Wake => self.wake_ready |= ready::has_input(&self.wake),
                    Watch::Socket(k) => {
                        let input = match self.slots.get(k) {
                            Some(Some(s)) if s.role != SlotRole::Publisher => {
                                ready::has_input(&s.socket)
                            }
                            _ => continue,
                        };
                        if input {
                            self.readable.insert(k);
                        } else {
                            self.readable.remove(k);
                        }
                    }
                    Watch::Monitor(k) => {
                        let input = match self.slots.get(k) {
                            Some(Some(Slot {
                                monitor: Some(m), ..
                            })) => ready::has_input(m),
                            _ => continue,
                        };
                        if input {
                            self.monitors_ready.insert(k);
                        }
                    }
                    Watch::Closing(k) => {
                        // Only libzmq's MONITOR_STOPPED confirms: other events still queued
                        // on the monitor belong to the closed connection and come before it.
                        let confirmed = self
                            .links
                            .get(k)
                            .and_then(|l| l.closing.as_ref())
                            .is_some_and(|(m, _)| m.close_confirmed());
                        if confirmed {
                            self.confirm_close(k);
                        }
                        self.settle_overdue_closing();
                    }
                }
            }
        }
    }

    /// True if something is waiting that the loop can act on now: a readable socket it may
    /// read, a monitor event, a wake-up.
    fn has_input(&self) -> bool {
        self.wake_ready || !self.monitors_ready.is_empty() || self.has_readable()
    }

    /// True if some readable socket is not held back by a paused application queue.
    fn has_readable(&self) -> bool {
        self.readable
            .members()
            .iter()
            .any(|k| !self.held.contains(k))
    }

    fn flush_events(&mut self) {
        if !self.out.is_empty() {
            let batch = std::mem::take(&mut self.out);
            let n = batch
                .iter()
                .filter(|e| matches!(e, NodeEvent::Delivery(_)))
                .count();
            self.outstanding.fetch_add(n, Ordering::Relaxed);
            // The application side may have dropped its receiver; events are then discarded.
            let _ = self.events.send(batch);
        }
    }

    fn emit_state(
        &mut self,
        link: String,
        state: ConnState,
        reason: Option<FailureReason>,
        detail: &str,
    ) {
        tracing::info!(link = %link, state = state.as_str(), reason = ?reason, detail, "link state");
        self.out.push(NodeEvent::State(StateChange {
            link,
            state,
            reason,
            detail: detail.to_owned(),
        }));
    }

    /// True once a stop began: no new work is taken.
    fn stopping(&self) -> bool {
        self.host != Host::Running
    }

    /// True when the application queue holds `delivery_high_water` deliveries or more.
    fn paused(&self) -> bool {
        self.outstanding.load(Ordering::Relaxed) + self.out.len() >= self.cfg.delivery_high_water
    }

    /// Moves held records to the application while its queue has room, in order per link,
    /// and recomputes which sockets a full backlog holds back.
    ///
    /// Only the links with a backlog are looked at (in link order, as before).
    fn release_backlogs(&mut self) {
        if self.backlog_links.is_empty() {
            self.held.clear();
            self.backlogged = 0;
            return;
        }
        let keys: Vec<LinkKey> = self.backlog_links.iter().copied().collect();
        for k in keys {
            while !self.paused() {
                let Some(d) = self.links[k].backlog.pop_front() else {
                    break;
                };
                self.out.push(NodeEvent::Delivery(d));
            }
            if self.links[k].backlog.is_empty() {
                self.backlog_links.remove(&k);
            }
        }
        self.held.clear();
        self.backlogged = 0;
        for &k in &self.backlog_links {
            let l = &self.links[k];
            self.backlogged += l.backlog.len();
            if l.backlog.len() >= LINK_BACKLOG {
                if let Some(c) = &l.conn {
                    if !self.held.contains(&c.slot) {
                        self.held.push(c.slot);
                    }
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------
    // Timers
    // ----------------------------------------------------------------------------------

    fn run_timers(&mut self, now: Instant) {
        // Call deadlines and serve-side ttl refusals and drain bound.
        self.calls.handle_timeout(now);
        self.serve.handle_timeout(now);
        self.drain_calls(now);
        // Every liveness machine of the node, from one table (MISSION L8).
        self.liveness.handle_timeout(now);
        while let Some(t) = self.liveness.poll_transmit(now) {
            match t {
                Transmit::Probe { key, id, .. } => {
                    if let Some(LiveOwner::Link(k)) = self.live_owner.get(&key).copied() {
                        if let Err(e) = self.send_on_link(k, records::probe(id)) {
                            tracing::debug!(error = %e, "probe not sent");
                        }
                    }
                }
                Transmit::Beacon { key } => {
                    if self.publisher.as_ref().is_some_and(|p| p.live == key) {
                        self.send_beacon();
                    }
                }
            }
        }
        self.drain_liveness_events(now);
        // The per-link timers below are walked only if something changed since the last
        // scan or the earliest of them is due (an idle node has none set at all).
        let due = self.link_timers_changed || self.link_deadline.is_some_and(|t| now >= t);
        if !due {
            return;
        }
        // What runs below may set timers of its own; the next poll_timeout scans again.
        self.timers_changed();
        // Handshake timeouts.
        for k in 0..self.links.len() {
            let expired = self.links[k]
                .conn
                .as_ref()
                .is_some_and(|c| !c.ready && now >= c.opened_at + HANDSHAKE_TIMEOUT);
            if expired {
                self.fail_link(k, FailureReason::TransportError, "handshake timed out", now);
            }
        }
        // Reconnects.
        for k in 0..self.links.len() {
            let l = &self.links[k];
            let due = l.waits_to_redial() && l.retry_at.is_some_and(|t| now >= t);
            if due {
                self.dial(k, now);
            }
            if self.links[k]
                .closing
                .as_ref()
                .is_some_and(|c| now >= c.1 + CLOSE_CONFIRM_MAX)
            {
                self.close_overdue(k);
            }
        }
        self.settle_overdue_closing();
        // Fanout subscriptions without a socket get a new one (MISSION L5).
        for i in 0..self.subs.len() {
            if self.subs[i].slot.is_none() && now >= self.subs[i].retry_at {
                self.open_sub(i, now);
            }
        }
        // Bound-socket disconnect sweeps.
        let due: Vec<(SlotKey, usize)> = self
            .sweeps
            .iter()
            .filter(|s| now >= s.0)
            .map(|s| (s.1, s.2))
            .collect();
        self.sweeps.retain(|s| now < s.0);
        for (slot, step) in due {
            self.sweep(slot, now);
            if let Some(d) = SWEEP_DELAYS.get(step + 1) {
                self.sweeps
                    .push((now + (*d - SWEEP_DELAYS[step]), slot, step + 1));
            }
        }
    }

    /// Sends the two beacon frames on the publisher socket (MISSION L4).
    fn send_beacon(&mut self) {
        let Some(p) = &self.publisher else { return };
        if let Some(Some(slot)) = self.slots.get(p.slot) {
            let frames = records::beacon();
            let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            if let Err(e) = slot.socket.send_frames(&refs) {
                tracing::warn!(error = %e, "beacon not sent");
            }
        }
    }

    /// Acts on the liveness table's verdicts.
    fn drain_liveness_events(&mut self, now: Instant) {
        while let Some((key, ev)) = self.liveness.poll_event() {
            match (self.live_owner.get(&key).copied(), ev) {
                (
                    Some(LiveOwner::Link(k)),
                    LivenessEvent::Probe(ProbeEvent::DeadlineExceeded { .. }),
                ) => {
                    self.fail_link(
                        k,
                        FailureReason::DeadlineExceeded,
                        "no valid ACK for 15 s",
                        now,
                    );
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::BecameReady),
                ) => {
                    let s = &mut self.subs[i];
                    s.failures_in_row = 0;
                    note(s.state.handle_ready(now));
                    let name = format!("sub {}", s.endpoint);
                    self.emit_state(name, ConnState::Ready, None, "first record or beacon");
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::Silence { .. }),
                ) => {
                    self.fail_sub(
                        i,
                        FailureReason::FanoutSilence,
                        "no record or beacon for 15 s",
                        now,
                    );
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::ProtocolError(e)),
                ) => {
                    self.fail_sub(i, FailureReason::ProtocolError, &format!("{e}"), now);
                }
                (owner, ev) => tracing::debug!(?owner, ?ev, "liveness event without an owner"),
            }
        }
    }

    // ----------------------------------------------------------------------------------
    // Dialling and closing
    // ----------------------------------------------------------------------------------

    fn link_name(&self, k: LinkKey) -> String {
        match &self.links[k].kind {
            LinkKind::MeshDial { peer, lane } => {
                let rid = self
                    .cfg
                    .peers
                    .get(*peer)
                    .map(|p| p.rid.as_str())
                    .unwrap_or("?");
                format!("peer {rid} {}", records::lane_name(*lane))
            }
            LinkKind::ClientDial { server } => {
                let s = self.cfg.servers.get(*server);
                format!(
                    "server {} {}",
                    s.map(|s| s.channel.as_str()).unwrap_or("?"),
                    s.map(|s| s.endpoint.as_str()).unwrap_or("?")
                )
            }
            LinkKind::Inbound { rid, lane } => {
                format!("inbound {rid} {}", records::lane_name(*lane))
            }
        }
    }

    fn dial(&mut self, k: LinkKey, now: Instant) {
        self.timers_changed();
        let (endpoint, lane, kind) = match &self.links[k].kind {
            LinkKind::MeshDial { peer, lane } => {
                let Some(p) = self.cfg.peers.get(*peer) else {
                    return;
                };
                let ep = match lane {
                    Lane::Completion => p.completion.clone(),
                    _ => p.application.clone(),
                };
                (ep, *lane, zmq::ROUTER)
            }
            LinkKind::ClientDial { server } => {
                let Some(s) = self.cfg.servers.get(*server) else {
                    return;
                };
                (s.endpoint.clone(), Lane::ClientServer, zmq::DEALER)
            }
            LinkKind::Inbound { .. } => return,
        };
        let id = self.fresh_conn_id();
        let routing = routing_id(lane, self.me.generation, id);
        // Its monitor reports the socket's own close, confirmed before any replacement is
        // dialled (MISSION F3).
        let m = match self.sockets.dialled(kind) {
            Ok(m) => m,
            Err(e) => {
                self.links[k].retry_at = Some(now + BACKOFF_MAX);
                tracing::warn!(error = %e, endpoint, "cannot open dialled socket");
                return;
            }
        };
        let configured = m
            .socket
            .set_identity(&routing)
            .and_then(|()| m.socket.set_reconnect_ivl(100))
            .and_then(|()| m.socket.set_reconnect_ivl_max(1000))
            .and_then(|()| m.socket.connect(&endpoint));
        if let Err(e) = configured {
            // The socket goes; its monitor waits for libzmq's confirmation like any other.
            drop(m.socket);
            self.park_closing(k, m.monitor);
            self.links[k].retry_at = Some(now + BACKOFF_MAX);
            tracing::warn!(error = %e, endpoint, "cannot open dialled socket");
            return;
        }
        let added = self.add_slot(Slot {
            socket: m.socket,
            monitor: Some(m.monitor),
            role: SlotRole::Dialled(k),
            endpoint: endpoint.clone(),
            shared: None,
        });
        let slot = match added {
            Ok(slot) => slot,
            Err(e) => {
                self.links[k].retry_at = Some(now + BACKOFF_MAX);
                tracing::warn!(error = %e, endpoint, "cannot watch dialled socket");
                return;
            }
        };
        let route = match lane {
            Lane::Application => Some(BOUND_ID_APPLICATION.to_vec()),
            Lane::Completion => Some(BOUND_ID_COMPLETION.to_vec()),
            Lane::ClientServer => None,
        };
        let l = &mut self.links[k];
        l.retry_at = None;
        l.conn = Some(Conn {
            id,
            slot,
            route,
            opened_at: now,
            hello_sent: false,
            ready: false,
            peer: None,
            source: None,
            live: None,
            last_peer_probe: None,
        });
        note(l.state.handle_connecting(now));
        let name = self.link_name(k);
        self.emit_state(
            name,
            ConnState::Connecting,
            None,
            &format!("dialling as {id}"),
        );
    }

    /// Takes a link's current connection out of ready at once and closes it (MISSION F1, L6).
    fn fail_link(&mut self, k: LinkKey, reason: FailureReason, detail: &str, now: Instant) {
        self.timers_changed();
        let Some(conn_id) = self.links[k].conn.as_ref().map(|c| c.id) else {
            return;
        };
        // Calls leased on this connection fail at once, as "may have run" (MISSION C2).
        self.calls_connection_lost(k, conn_id, reason, now);
        let Some(conn) = self.links[k].conn.take() else {
            return;
        };
        self.close_conn(k, conn, reason, now);
        let l = &mut self.links[k];
        l.failures_in_row = l.failures_in_row.saturating_add(1);
        let terminal = reason == FailureReason::NotRequired;
        l.terminal |= terminal;
        let recovery = if self.host == Host::Running && !matches!(l.kind, LinkKind::Inbound { .. })
        {
            Recovery::Reconnect
        } else {
            Recovery::Hold
        };
        note(l.state.handle_failure(reason, detail, recovery, now));
        let state = l.state.state();
        l.retry_at = Some(now + backoff(l.failures_in_row));
        let name = self.link_name(k);
        self.emit_state(name, state, Some(reason), detail);
        // A dial that stood down for this peer's own connection resumes when that one fails.
        if let LinkKind::Inbound { rid, lane } = &self.links[k].kind {
            let (rid, lane) = (rid.clone(), *lane);
            if let Some(dk) = self
                .cfg
                .peers
                .iter()
                .position(|p| p.rid == rid)
                .and_then(|i| self.find_mesh_dial(i, lane))
            {
                let d = &mut self.links[dk];
                if d.yielded {
                    d.yielded = false;
                    d.retry_at = Some(now + BACKOFF_MIN);
                }
            }
        }
        metrics::counter!("zmesh_link_failures_total", "reason" => reason.as_str()).increment(1);
    }

    fn close_conn(&mut self, k: LinkKey, conn: Conn, reason: FailureReason, _now: Instant) {
        self.timers_changed();
        if let Some(live) = conn.live {
            self.liveness.remove(live);
            self.live_owner.remove(&live);
        }
        let dialled =
            matches!(self.slots.get(conn.slot), Some(Some(s)) if s.role == SlotRole::Dialled(k));
        if dialled {
            if let Some(slot) = self.take_slot(conn.slot) {
                // Closing our own dialled socket: keep its monitor until libzmq confirms the
                // close, and dial no replacement before that (MISSION F3).
                if let Some(m) = slot.monitor {
                    if let Err(e) = self.ready.register(&m, Watch::Closing(k)) {
                        // Unwatched, the link dials again at the time bound, and the monitor is
                        // checked on the timer passes after that (overdue).
                        tracing::debug!(error = %e, "closing monitor not watched");
                    }
                    let earlier = self.links[k].closing.replace((m, Instant::now()));
                    // Never the case (a link dials only once its last close is settled); if
                    // it were, that monitor must still wait for libzmq's confirmation.
                    if let Some((earlier, _)) = earlier {
                        self.overdue_closing.push(earlier);
                    }
                }
                drop(slot.socket);
            }
        } else if let Some(route) = conn.route {
            // An inbound connection on a shared bound socket: libzmq cannot close one pipe
            // there. Tell the peer to close (it owns the socket), and forget the routing id so
            // that late records of this physical connection change nothing (MISSION L6).
            if reason != FailureReason::OrderlyClose && reason != FailureReason::TransportError {
                let close = records::close(records::close_reason(reason));
                let _ = self.send_slot(conn.slot, Some(&route), &close);
            }
            if let Some(m) = self.inbound.get_mut(&conn.slot) {
                m.remove(route.as_slice());
            }
            self.sched.remove_unit(Unit::Peer(k, conn.id));
        }
    }

    /// libzmq confirmed the close of link `k`'s closed socket (or the node is shutting down
    /// and terminates the contexts next): its monitor goes, and the link may be dialled again
    /// at its retry time.
    fn confirm_close(&mut self, k: LinkKey) {
        self.timers_changed();
        if let Some((m, _)) = self.links.get_mut(k).and_then(|l| l.closing.take()) {
            self.ready.deregister(&m);
        }
    }

    /// Link `k`'s closed socket was not confirmed closed within [`CLOSE_CONFIRM_MAX`]: the
    /// link may be dialled again, its old monitor is kept until libzmq confirms after all.
    fn close_overdue(&mut self, k: LinkKey) {
        self.timers_changed();
        if let Some((m, _)) = self.links.get_mut(k).and_then(|l| l.closing.take()) {
            tracing::debug!(link = k, "close not confirmed in time; dialling anyway");
            self.overdue_closing.push(m);
        }
    }

    /// Keeps the monitor of a dialled socket of link `k` that was closed before it served a
    /// connection, until libzmq confirms the close (it does not hold the link's redial).
    fn park_closing(&mut self, k: LinkKey, m: MonitorSocket) {
        if let Err(e) = self.ready.register(&m, Watch::Closing(k)) {
            tracing::debug!(error = %e, "closing monitor not watched");
        }
        self.overdue_closing.push(m);
    }

    /// Drops the overdue closing monitors whose close libzmq has confirmed by now.
    fn settle_overdue_closing(&mut self) {
        if self.overdue_closing.is_empty() {
            return;
        }
        let ready = &self.ready;
        self.overdue_closing.retain(|m| {
            let keep = !m.close_confirmed();
            if !keep {
                ready.deregister(m);
            }
            keep
        });
    }

    // ----------------------------------------------------------------------------------
    // Monitor events
    // ----------------------------------------------------------------------------------

    fn drain_monitor(&mut self, slot: SlotKey, now: Instant) {
        let mut events = Vec::new();
        if let Some(Some(s)) = self.slots.get(slot) {
            if let Some(m) = &s.monitor {
                while let Ok(Some(frames)) = m.try_recv_frames() {
                    if let Some(ev) = MonitorEvent::decode(&frames) {
                        events.push(ev);
                    }
                }
                self.ready.touch(Watch::Monitor(slot));
            }
        }
        for ev in events {
            let Some(Some(s)) = self.slots.get(slot) else {
                return;
            };
            match (s.role, ev) {
                (SlotRole::Dialled(k), MonitorEvent::HandshakeSucceeded) => self.send_hello(k),
                (SlotRole::Dialled(k), MonitorEvent::Disconnected) => {
                    // Records that arrived before the disconnect come first: an orderly CLOSE
                    // explains the disconnect better than the disconnect itself.
                    for _ in 0..DRAIN_BEFORE_DISCONNECT {
                        let Some(frames) = self.recv_one(slot) else {
                            break;
                        };
                        self.on_frames(slot, frames, now);
                    }
                    let still = self.links[k]
                        .conn
                        .as_ref()
                        .is_some_and(|c| c.slot == slot && c.hello_sent);
                    if still {
                        self.fail_link(k, FailureReason::TransportError, "disconnected", now);
                    }
                }
                (SlotRole::Bound(_), MonitorEvent::Disconnected) => {
                    self.sweeps.push((now, slot, 0));
                    self.timers_changed();
                }
                (SlotRole::Sub(i), MonitorEvent::HandshakeSucceeded) => {
                    self.subs[i].connected = true;
                }
                // Before a handshake, a disconnect is a failed connect attempt that libzmq
                // retries itself; after one, the publisher is gone (MISSION L6).
                (SlotRole::Sub(i), MonitorEvent::Disconnected) if self.subs[i].connected => {
                    self.fail_sub(
                        i,
                        FailureReason::TransportError,
                        "publisher disconnected",
                        now,
                    );
                }
                _ => {}
            }
        }
    }

    /// Checks every inbound connection of a bound socket for a vanished pipe: a record sent
    /// with `ROUTER_MANDATORY` to a routing id whose pipe is gone fails with `EHOSTUNREACH`.
    /// The record is one that changes nothing at the peer (L2): a repeat of our ACK of its
    /// last probe (a duplicate), or our own pending probe id (a resend).
    fn sweep(&mut self, slot: SlotKey, now: Instant) {
        let victims: Vec<(Vec<u8>, LinkKey)> = self
            .inbound
            .get(&slot)
            .map(|m| m.iter().map(|(r, k)| (r.clone(), *k)).collect())
            .unwrap_or_default();
        for (route, k) in victims {
            let Some(c) = self.links[k].conn.as_ref() else {
                continue;
            };
            let pending = c
                .live
                .and_then(|key| self.liveness.probe(key))
                .and_then(|t| t.pending_id());
            let frames = match (c.last_peer_probe, pending) {
                (Some(id), _) => records::ack(id),
                (None, Some(id)) => records::probe(id),
                (None, None) => continue,
            };
            let gone = self.send_slot(slot, Some(&route), &frames)
                == Err(super::socket::SendError::Unreachable);
            if gone {
                self.fail_link(k, FailureReason::TransportError, "peer disconnected", now);
            }
        }
    }

    fn send_hello(&mut self, k: LinkKey) {
        let Some((lane, expect)) = self.dial_expectation(k) else {
            return;
        };
        let sent = match records::hello(lane, &self.me, &expect, 0) {
            Ok(frames) => self.send_on_link(k, frames),
            Err(e) => {
                tracing::error!(error = %e, "cannot encode HELLO");
                return;
            }
        };
        if let Some(c) = self.links[k].conn.as_mut() {
            c.hello_sent = sent.is_ok();
        }
    }

    /// A dialled link's lane and what it expects of the node it dials.
    fn dial_expectation(&self, k: LinkKey) -> Option<(Lane, Expectation)> {
        match &self.links[k].kind {
            LinkKind::MeshDial { peer, lane } => Some((*lane, self.expectation_for_peer(*peer))),
            LinkKind::ClientDial { server } => Some((
                Lane::ClientServer,
                Expectation {
                    rid: self.cfg.servers.get(*server).and_then(|s| s.rid.clone()),
                    ..Expectation::default()
                },
            )),
            LinkKind::Inbound { .. } => None,
        }
    }

    fn expectation_for_peer(&self, peer: usize) -> Expectation {
        let Some(p) = self.cfg.peers.get(peer) else {
            return Expectation::default();
        };
        Expectation {
            rid: Some(p.rid.clone()),
            generation: p.generation.filter(|g| *g != 0),
            security_identity: p.security_identity.clone(),
        }
    }

    // ----------------------------------------------------------------------------------
    // Receiving
    // ----------------------------------------------------------------------------------

    /// One rotation of the receive loop (MISSION R1-R3): the scheduler says which socket to
    /// read and whose record to process next, under its count, byte and time caps; the next
    /// rotation starts right after the entry where this one stopped. Sockets not in the
    /// readable set (or held back by a paused application queue) are answered "would block"
    /// without a syscall; a receive that finds nothing takes its socket out of the set.
    ///
    /// Returns true if the scheduler holds work that readiness cannot show (a rotation cut by
    /// its time cap, records read but not handed out): the loop then waits again without
    /// sleeping. A socket with records still queued in libzmq stays readable, so the next
    /// wait does not sleep for it without this flag.
    fn receive_rotation(&mut self) -> bool {
        // The scheduler learns which sockets have records from the readable set; a receive
        // that finds nothing ("would block") takes a socket out of both.
        for &slot in self.readable.members() {
            if self.held.contains(&slot) {
                continue;
            }
            match self.slots.get(slot) {
                Some(Some(Slot {
                    shared: Some(sid), ..
                })) => self.sched.handle_readable(ReadTarget::Shared(*sid)),
                Some(Some(_)) => self
                    .sched
                    .handle_readable(ReadTarget::Unit(Unit::Socket(slot))),
                _ => {}
            }
        }
        loop {
            match self.sched.poll_action(Instant::now()) {
                // Wait again without sleeping only if the scheduler holds work that socket
                // readiness cannot show: a rotation cut by its time cap, or records read but
                // not handed out. A socket left with records (a turn ended by a cap) stays in
                // the readable set, so the next wait does not sleep for it anyway.
                Action::Yield(end) => {
                    return end.reason == RotationEndReason::TimeCap || self.sched.has_staged()
                }
                Action::Deliver { unit, record } => self.on_staged(unit, record, Instant::now()),
                Action::Read(req) => {
                    let slot = match req.target() {
                        ReadTarget::Unit(Unit::Socket(s)) => Some(s),
                        ReadTarget::Shared(sid) => self.slot_of_shared(sid),
                        ReadTarget::Unit(_) => None,
                    };
                    let frames = match slot {
                        Some(s) if self.readable.contains(s) && !self.held.contains(&s) => {
                            self.recv_one(s)
                        }
                        _ => None,
                    };
                    let (Some(slot), Some(mut frames)) = (slot, frames) else {
                        self.sched.handle_would_block(req);
                        continue;
                    };
                    let len = frames.iter().map(|f| f.as_ref().len()).sum();
                    let (owner, staged) = match req.target() {
                        ReadTarget::Shared(_) if !frames.is_empty() => {
                            let route = frames.remove(0);
                            let owner = self
                                .inbound
                                .get(&slot)
                                .and_then(|m| m.get(route.as_ref()))
                                .and_then(|k| {
                                    self.links[*k].conn.as_ref().map(|c| Unit::Peer(*k, c.id))
                                })
                                .unwrap_or(Unit::Admission(slot));
                            (
                                owner,
                                Staged {
                                    route: Some(route),
                                    frames,
                                },
                            )
                        }
                        _ => (
                            Unit::Socket(slot),
                            Staged {
                                route: None,
                                frames,
                            },
                        ),
                    };
                    if let Err(rejected) = self.sched.handle_read(req, owner, staged, len) {
                        // The owner is not a unit (yet): account it to the socket's admission unit.
                        let (req, staged) = rejected.into_parts();
                        if self
                            .sched
                            .handle_read(req, Unit::Admission(slot), staged, len)
                            .is_err()
                        {
                            tracing::debug!("record dropped: no scheduler unit for it");
                        }
                    }
                }
            }
        }
    }

    fn slot_of_shared(&self, sid: SharedSocketId) -> Option<SlotKey> {
        self.shared_slots.get(&sid).copied()
    }

    /// Processes a record in its unit's turn.
    fn on_staged(&mut self, unit: Unit, staged: Staged, now: Instant) {
        match (unit, staged.route) {
            (Unit::Socket(slot), _) => self.on_frames(slot, staged.frames, now),
            (Unit::Peer(k, _), Some(_)) => {
                // The routing id was looked up when the record was read: while the unit's
                // connection is still the link's current one, the record is that link's.
                if self.links_slot(unit).is_some() {
                    self.on_link_record(k, &staged.frames, now);
                }
            }
            (Unit::Admission(slot), Some(route)) => {
                let Some(Some(SlotRole::Bound(lane))) =
                    self.slots.get(slot).map(|s| s.as_ref().map(|s| s.role))
                else {
                    return;
                };
                self.on_bound(slot, lane, route, staged.frames, now);
            }
            (_, None) => {}
        }
    }

    /// The bound socket of an inbound peer unit, if its connection is still current.
    fn links_slot(&self, unit: Unit) -> Option<SlotKey> {
        let Unit::Peer(k, id) = unit else { return None };
        let c = self.links.get(k)?.conn.as_ref()?;
        (c.id == id).then_some(c.slot)
    }

    /// One record from a socket without blocking, if any. "Nothing" (or an error) takes the
    /// socket out of the readable set until its descriptor fires or a check finds a record.
    fn recv_one(&mut self, slot: SlotKey) -> Option<Vec<Frame>> {
        let got = match self.slots.get(slot)?.as_ref()?.socket.try_recv_frames() {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "receive failed");
                None
            }
        };
        self.ready.touch(Watch::Socket(slot));
        if got.is_none() {
            self.readable.remove(slot);
        }
        got
    }

    fn on_frames(&mut self, slot: SlotKey, mut frames: Vec<Frame>, now: Instant) {
        let Some(Some(s)) = self.slots.get(slot) else {
            return;
        };
        match s.role {
            SlotRole::Sub(i) => self.on_fanout(i, frames, now),
            SlotRole::Publisher => {}
            SlotRole::Dialled(k) => {
                // A dialled ROUTER sees the bound peer's routing id first; a DEALER does not.
                if self.links[k]
                    .conn
                    .as_ref()
                    .is_some_and(|c| c.route.is_some())
                {
                    if frames.is_empty() {
                        return;
                    }
                    frames.remove(0);
                }
                self.on_link_record(k, &frames, now);
            }
            SlotRole::Bound(lane) => {
                if frames.is_empty() {
                    return;
                }
                let route = frames.remove(0);
                self.on_bound(slot, lane, route, frames, now);
            }
        }
    }

    /// A record read from a bound socket, with its routing id already split off. The routing
    /// id names one physical connection: records of a replaced connection find no link and
    /// change nothing (MISSION L6).
    fn on_bound(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: Frame,
        frames: Vec<Frame>,
        now: Instant,
    ) {
        let known = self
            .inbound
            .get(&slot)
            .and_then(|m| m.get(route.as_ref()))
            .copied();
        match known {
            Some(k) => self.on_link_record(k, &frames, now),
            None => self.on_unknown_inbound(slot, lane, route, &frames, now),
        }
    }

    fn on_unknown_inbound(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: Frame,
        frames: &[Frame],
        now: Instant,
    ) {
        let hello = match records::decode(frames) {
            Ok(Rec::Hello(h)) => h,
            Ok(_) => {
                // A record from a physical connection that is not (or no longer) admitted:
                // it changes nothing (MISSION L6).
                metrics::counter!("zmesh_stale_records_total").increment(1);
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "malformed record from an unadmitted connection");
                return;
            }
        };
        let route = route.as_ref().to_vec();
        let reject = |io: &mut IoThread, reason: RejectReason, detail: &str| {
            let _ = io.send_slot(slot, Some(&route), &records::reject(reason, detail));
        };
        if hello.lane != lane {
            reject(self, RejectReason::LaneMismatch, "hello names another lane");
            return;
        }
        if self.host != Host::Running {
            reject(self, RejectReason::Draining, "node is stopping");
            return;
        }
        // What does this node expect of that RID? A configured peer's expectation, if any.
        let configured = self
            .cfg
            .peers
            .iter()
            .position(|p| p.rid == hello.identity.rid);
        let expect = match (lane, configured) {
            (Lane::ClientServer, _) | (_, None) => Expectation::default(),
            (_, Some(i)) => self.expectation_for_peer(i),
        };
        // Does the dialler expect us?
        let theirs = Expectation {
            rid: hello.expect.rid.clone(),
            generation: hello.expect.generation,
            security_identity: None,
        };
        if let Err(r) = admit_on(lane, &hello.identity, &theirs, &self.me) {
            reject(self, records::reject_reason(r), &r.to_string());
            return;
        }
        if let Err(r) = admit_on(lane, &self.me, &expect, &hello.identity) {
            reject(self, records::reject_reason(r), &r.to_string());
            return;
        }
        // Duplicate resolution: if we dial this peer on this lane too, the connection dialled
        // by the smaller RID is the current one.
        if let (Some(i), true) = (configured, lane != Lane::ClientServer) {
            if let Some(dk) = self.find_mesh_dial(i, lane) {
                if self.me.rid < hello.identity.rid {
                    reject(
                        self,
                        RejectReason::Duplicate,
                        "the connection dialled by the smaller RID is current",
                    );
                    return;
                }
                // Their dial wins: stand our own dial down.
                if self.links[dk].conn.is_some() {
                    self.fail_link(
                        dk,
                        FailureReason::Replaced,
                        "peer's own dial is current",
                        now,
                    );
                }
                self.links[dk].yielded = true;
                self.timers_changed();
            }
        }
        let k = self.inbound_link(&hello.identity.rid, lane, now);
        // A replacement connection of the same peer and lane (F3): the dialler closed the old
        // one before dialling this one, so the old one is done.
        if self.links[k].conn.is_some() {
            self.fail_link(
                k,
                FailureReason::Replaced,
                "replaced by a newer admitted connection",
                now,
            );
        }
        let id = self.fresh_conn_id();
        let Ok(welcome) = records::welcome(lane, &self.me) else {
            return;
        };
        if let Err(e) = self.send_slot(slot, Some(&route), &welcome) {
            tracing::debug!(error = %e, "welcome not sent");
            return;
        }
        self.inbound
            .entry(slot)
            .or_default()
            .insert(route.clone(), k);
        if let Some(sid) = self.shared_id(slot) {
            if let Err(e) = self
                .sched
                .add_unit(Unit::Peer(k, id), SchedSource::Shared(sid))
            {
                tracing::debug!(error = ?e, "scheduler unit not added");
            }
        }
        self.timers_changed();
        self.links[k].conn = Some(Conn {
            id,
            slot,
            route: Some(route),
            opened_at: now,
            hello_sent: true,
            ready: false,
            peer: None,
            source: None,
            live: None,
            last_peer_probe: None,
        });
        if self.links[k].state.state() != ConnState::Connecting {
            note(self.links[k].state.handle_connecting(now));
        }
        note(self.links[k].state.handle_admitted(now));
        self.become_ready(k, hello.identity, now);
    }

    fn find_mesh_dial(&self, peer: usize, lane: Lane) -> Option<LinkKey> {
        self.links
            .iter()
            .position(|l| l.kind == LinkKind::MeshDial { peer, lane })
    }

    fn inbound_link(&mut self, rid: &str, lane: Lane, now: Instant) -> LinkKey {
        let kind = LinkKind::Inbound {
            rid: rid.to_owned(),
            lane,
        };
        match self.links.iter().position(|l| l.kind == kind) {
            Some(k) => k,
            None => {
                let k = self.add_link(kind, now);
                self.links[k].retry_at = None;
                k
            }
        }
    }

    fn become_ready(&mut self, k: LinkKey, peer: Identity, now: Instant) {
        // A ready connection has no handshake timeout any more.
        self.timers_changed();
        let l = &mut self.links[k];
        let Some(c) = l.conn.as_mut() else {
            return;
        };
        c.ready = true;
        let rid: Arc<str> = Arc::from(peer.rid.as_str());
        c.source = Some(match &l.kind {
            LinkKind::MeshDial { .. } => Source::Peer { rid },
            LinkKind::Inbound {
                lane: Lane::ClientServer,
                ..
            } => Source::Client { rid },
            LinkKind::Inbound { .. } => Source::Peer { rid },
            LinkKind::ClientDial { .. } => Source::Server { rid },
        });
        let id = c.id;
        // The 15 s deadline runs from ready (seed 002 §3).
        let live = self.liveness.insert_connection(id, now);
        c.live = Some(live);
        self.live_owner.insert(live, LiveOwner::Link(k));
        let rid = peer.rid.clone();
        for m in &peer.memberships {
            if m.role == crate::proto::handshake::Role::Server {
                self.known_servers.insert(m.channel.clone());
            }
        }
        c.peer = Some(peer);
        let l = &mut self.links[k];
        l.failures_in_row = 0;
        note(l.state.handle_ready(now));
        let name = self.link_name(k);
        self.emit_state(
            name,
            ConnState::Ready,
            None,
            &format!("{rid} ready on {id}"),
        );
    }

    fn on_link_record(&mut self, k: LinkKey, frames: &[Frame], now: Instant) {
        let rec = match records::decode(frames) {
            Ok(r) => r,
            Err(e) => {
                // Malformed input: a protocol error for this connection only (MISSION W3).
                self.fail_link(k, FailureReason::ProtocolError, &e.to_string(), now);
                return;
            }
        };
        let inbound = matches!(self.links[k].kind, LinkKind::Inbound { .. });
        let Some(c) = self.links[k].conn.as_mut() else {
            return;
        };
        let (ready, conn_id, live) = (c.ready, c.id, c.live);
        // One span per physical connection: identities go to traces, never to metric labels.
        let _span = tracing::debug_span!("conn", id = %conn_id, kind = rec.kind_name()).entered();
        if let Rec::Probe(id) = rec {
            c.last_peer_probe = Some(id);
        }
        self.links[k].records += 1;
        self.links[k].last_receive = Some(now);
        self.links[k].state.handle_receive(now);
        match rec {
            Rec::Probe(id) => {
                // Echo the id; a received probe is not evidence for our own deadline (L2).
                let _ = self.send_on_link(k, records::ack(id));
            }
            Rec::Ack(id) => {
                if let Some(live) = live {
                    // The ACK travelled on this physical connection: it is evidence only for
                    // this connection's tracker (L2).
                    let outcome = self.liveness.handle_ack(live, conn_id, id, now);
                    tracing::trace!(conn = %conn_id, ?outcome, "ack");
                }
            }
            Rec::Welcome(w) if !ready && !inbound => self.on_welcome(k, w, now),
            Rec::Request(req) if ready => self.on_request(k, req, now),
            rec @ (Rec::Accept { .. } | Rec::Reply { .. } | Rec::Item { .. }) if ready => {
                self.on_call_answer(k, rec, now)
            }
            Rec::Reject { reason, detail } => {
                if reason == RejectReason::Duplicate {
                    // The peer's own dial of this lane is the current connection (T1).
                    self.fail_link(k, FailureReason::Replaced, &detail, now);
                    self.links[k].yielded = true;
                    self.timers_changed();
                } else {
                    self.fail_link(k, records::reject_failure(reason), &detail, now);
                }
            }
            Rec::Close(reason) => {
                let detail = format!("peer closed: {}", records::close_name(reason));
                self.fail_link(k, FailureReason::OrderlyClose, &detail, now);
                if reason == CloseReason::Replaced && !inbound {
                    // The peer kept its own dial of this lane: ours stands down (T1).
                    self.links[k].yielded = true;
                    self.timers_changed();
                }
            }
            Rec::Message { channel, payload } if ready => {
                if let Some(live) = live {
                    // Diagnostics only: application traffic never extends the deadline (L2).
                    let _ = self.liveness.handle_app_traffic(live, now);
                }
                let Some(source) = self.links[k].conn.as_ref().and_then(|c| c.source.clone())
                else {
                    return;
                };
                metrics::counter!("zmesh_app_records_received_total").increment(1);
                let d = Delivery {
                    source,
                    channel: Bytes::from(channel.into_bytes()),
                    payload,
                };
                if self.paused() || !self.links[k].backlog.is_empty() {
                    // Order within a link is kept: behind a backlog, records queue too.
                    self.links[k].backlog.push_back(d);
                    self.backlog_links.insert(k);
                } else {
                    self.out.push(NodeEvent::Delivery(d));
                }
            }
            other => {
                tracing::debug!(kind = other.kind_name(), "record not handled in this state");
            }
        }
    }

    /// The acceptor admitted us: verify it is who we expect, then the lane is ready.
    fn on_welcome(&mut self, k: LinkKey, w: records::WelcomeRec, now: Instant) {
        let Some((lane, expect)) = self.dial_expectation(k) else {
            return;
        };
        if w.lane != lane {
            self.fail_link(
                k,
                FailureReason::ProtocolError,
                "welcome names another lane",
                now,
            );
            return;
        }
        match admit_on(lane, &self.me, &expect, &w.identity) {
            Ok(()) => {
                note(self.links[k].state.handle_admitted(now));
                self.become_ready(k, w.identity, now);
            }
            Err(r) => {
                let detail = r.to_string();
                // Tell the acceptor why, then close our side.
                let _ = self.send_on_link(k, records::reject(records::reject_reason(r), &detail));
                self.fail_link(k, records::refusal_failure(r), &detail, now);
            }
        }
    }

    fn send_frames_on_link(
        &self,
        k: LinkKey,
        frames: &[Vec<u8>],
    ) -> Result<(), super::socket::SendError> {
        let Some(c) = self.links.get(k).and_then(|l| l.conn.as_ref()) else {
            return Err(super::socket::SendError::Unreachable);
        };
        self.send_slot(c.slot, c.route.as_deref(), frames)
    }

    /// Sends a record on a slot's socket, prefixed by a routing id when the socket is a
    /// ROUTER, and marks the socket for a `ZMQ_EVENTS` check (the send may have consumed the
    /// signal of a record that arrived meanwhile).
    fn send_slot(
        &self,
        slot: SlotKey,
        route: Option<&[u8]>,
        frames: &[Vec<u8>],
    ) -> Result<(), super::socket::SendError> {
        match self.slots.get(slot) {
            Some(Some(s)) => {
                let r = send_routed(&s.socket, route, frames);
                self.ready.touch(Watch::Socket(slot));
                r
            }
            _ => Err(super::socket::SendError::Unreachable),
        }
    }

    fn send_on_link(
        &mut self,
        k: LinkKey,
        frames: Vec<Vec<u8>>,
    ) -> Result<(), super::socket::SendError> {
        self.send_frames_on_link(k, &frames)
    }

    // ----------------------------------------------------------------------------------
    // Fanout
    // ----------------------------------------------------------------------------------

    fn open_sub(&mut self, i: usize, now: Instant) {
        self.timers_changed();
        let endpoint = self.subs[i].endpoint.clone();
        let opened = self.sockets.monitored(zmq::SUB).and_then(|m| {
            m.socket.set_subscribe(b"")?;
            m.socket.set_reconnect_ivl(100)?;
            m.socket.set_reconnect_ivl_max(1000)?;
            m.socket.connect(&endpoint)?;
            Ok(m)
        });
        match opened {
            Ok(m) => {
                let added = self.add_slot(Slot {
                    socket: m.socket,
                    monitor: Some(m.monitor),
                    role: SlotRole::Sub(i),
                    endpoint: endpoint.clone(),
                    shared: None,
                });
                let slot = match added {
                    Ok(slot) => slot,
                    Err(e) => {
                        self.subs[i].retry_at = now + BACKOFF_MAX;
                        tracing::warn!(error = %e, endpoint, "cannot watch SUB socket");
                        return;
                    }
                };
                let id = self.fresh_conn_id();
                // A new socket starts a new watch: silence is counted from now (L5).
                let _ = self.liveness.reset_publisher(self.subs[i].live, now);
                let s = &mut self.subs[i];
                s.slot = Some(slot);
                s.conn_id = Some(id);
                s.connected = false;
                note(s.state.handle_connecting(now));
                self.emit_state(
                    format!("sub {endpoint}"),
                    ConnState::Connecting,
                    None,
                    &format!("subscribed as {id}"),
                );
            }
            Err(e) => {
                // Not again at once: the poll timeout takes this instant.
                self.subs[i].retry_at = now + BACKOFF_MAX;
                tracing::warn!(error = %e, endpoint, "cannot open SUB socket");
            }
        }
    }

    fn on_fanout(&mut self, i: usize, frames: Vec<Frame>, now: Instant) {
        let decoded = records::decode_fanout(&frames, &self.subs[i].last_topic);
        let input = match &decoded {
            Ok(Fanout::Beacon) => FanoutInput::Beacon,
            Ok(Fanout::Publish { .. }) => FanoutInput::Record,
            Err(e) => FanoutInput::Malformed {
                reserved_topic: e.class() == "reserved_topic",
            },
        };
        let live = self.subs[i].live;
        let verdict = self.liveness.handle_fanout(live, input, now);
        // A state change (ready) comes before the record that caused it.
        self.drain_liveness_events(now);
        if let (Ok(FanoutDelivery::Deliver), Ok(Fanout::Publish { topic, payload })) =
            (verdict, decoded)
        {
            let s = &mut self.subs[i];
            s.records += 1;
            if s.last_topic != topic {
                s.last_topic = topic.clone();
            }
            metrics::counter!("zmesh_fanout_records_received_total").increment(1);
            self.out.push(NodeEvent::Delivery(Delivery {
                source: self.subs[i].source.clone(),
                channel: topic,
                payload,
            }));
        }
        self.drain_liveness_events(now);
    }

    /// Takes one publisher out of ready, closes only its socket; a new socket is opened on the
    /// next timer pass (MISSION L5).
    fn fail_sub(&mut self, i: usize, reason: FailureReason, detail: &str, now: Instant) {
        self.timers_changed();
        let Some(slot) = self.subs[i].slot.take() else {
            return;
        };
        self.take_slot(slot);
        let s = &mut self.subs[i];
        s.conn_id = None;
        s.failures_in_row = s.failures_in_row.saturating_add(1);
        s.retry_at = now + backoff(s.failures_in_row);
        let recovery = if self.host == Host::Running {
            Recovery::Reconnect
        } else {
            Recovery::Hold
        };
        note(s.state.handle_failure(reason, detail, recovery, now));
        let name = format!("sub {}", s.endpoint);
        let state = s.state.state();
        self.emit_state(name, state, Some(reason), detail);
        metrics::counter!("zmesh_link_failures_total", "reason" => reason.as_str()).increment(1);
    }

    // ----------------------------------------------------------------------------------
    // Commands
    // ----------------------------------------------------------------------------------

    /// Returns false when the node must stop.
    fn drain_commands(&mut self, now: Instant) -> bool {
        for _ in 0..COMMANDS_PER_TURN {
            let cmd = match self.commands.try_recv() {
                Ok(c) => c,
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            };
            match cmd {
                Command::SendPeer {
                    peer,
                    channel,
                    payload,
                    reply,
                } => {
                    let r = self.send_peer(&peer, &channel, &payload);
                    let _ = reply.send(r);
                }
                Command::SendPeerBatch {
                    peer,
                    channel,
                    payloads,
                    reply,
                } => {
                    let r = self.send_peer_batch(&peer, &channel, &payloads);
                    let _ = reply.send(r);
                }
                Command::SendServer {
                    channel,
                    payload,
                    reply,
                } => {
                    let r = self.send_server(&channel, &payload);
                    let _ = reply.send(r);
                }
                Command::Publish { topic, payload } => {
                    self.publish(&topic, std::slice::from_ref(&payload))
                }
                Command::PublishBatch { topic, payloads } => self.publish(&topic, &payloads),
                Command::Snapshot(reply) => {
                    let _ = reply.send(self.snapshot(now));
                }
                Command::Shutdown(reply) => {
                    self.shutdown_reply = Some(reply);
                    if self.host == Host::Running {
                        // Graceful stop: refuse new calls, answer the accepted ones, then
                        // leave (MISSION C4, F6); the loop ends when the drain is done.
                        self.host = Host::Draining;
                        self.serve.begin_drain(GRACEFUL_STOP_BOUND, now);
                        self.drain_calls(now);
                    }
                }
                Command::Call {
                    channel,
                    method,
                    args,
                    opts,
                    reply,
                } => self.start_call(channel, method, args, opts, reply, now),
                Command::Serve { channel, served } => self.serve_channel(channel, served),
                Command::ServeItem(item) => self.on_serve_item(item, now),
                Command::ServeDone(done) => self.on_serve_done(done, now),
            }
        }
        true
    }

    fn send_peer(&mut self, peer: &str, channel: &str, payload: &Bytes) -> Result<(), SendError> {
        let k = self.peer_link(peer, channel)?;
        let env = message_envelope(channel)?;
        self.send_app(k, peer, &env, payload)
    }

    /// Sends `payloads` in order on one peer link; stops at the first one not taken.
    fn send_peer_batch(
        &mut self,
        peer: &str,
        channel: &str,
        payloads: &[Bytes],
    ) -> Result<(), BatchSendError> {
        let k = self
            .peer_link(peer, channel)
            .and_then(|k| Ok((k, message_envelope(channel)?)));
        let (k, env) = k.map_err(|error| BatchSendError { sent: 0, error })?;
        for (sent, payload) in payloads.iter().enumerate() {
            self.send_app(k, peer, &env, payload)
                .map_err(|error| BatchSendError { sent, error })?;
        }
        Ok(())
    }

    /// The ready link that carries one-way records to `peer` (a RouteMesh peer's Application
    /// lane, or a client of our server), after checking the channel name.
    fn peer_link(&self, peer: &str, channel: &str) -> Result<LinkKey, SendError> {
        if channel.is_empty() || channel.len() > 255 {
            return Err(SendError::Invalid("channel must be 1..=255 bytes".into()));
        }
        self.links
            .iter()
            .position(|l| {
                let lane_ok = match &l.kind {
                    // A RouteMesh peer's Application lane, or a client of our server.
                    LinkKind::MeshDial { lane, .. } => *lane == Lane::Application,
                    LinkKind::Inbound { lane, .. } => *lane != Lane::Completion,
                    LinkKind::ClientDial { .. } => false,
                };
                lane_ok
                    && l.conn
                        .as_ref()
                        .is_some_and(|c| c.ready && c.peer.as_ref().is_some_and(|p| p.rid == peer))
            })
            .ok_or_else(|| SendError::NotReady(peer.to_owned()))
    }

    fn send_server(&mut self, channel: &str, payload: &Bytes) -> Result<(), SendError> {
        if channel.is_empty() || channel.len() > 255 {
            return Err(SendError::Invalid("channel must be 1..=255 bytes".into()));
        }
        let ready: Vec<LinkKey> = (0..self.links.len())
            .filter(|k| {
                let l = &self.links[*k];
                matches!(&l.kind, LinkKind::ClientDial { server }
                    if self.cfg.servers.get(*server).is_some_and(|s| s.channel == channel))
                    && l.conn.as_ref().is_some_and(|c| c.ready)
            })
            .collect();
        if ready.is_empty() {
            return Err(SendError::NotReady(channel.to_owned()));
        }
        // Spread records over the ready servers.
        let pick = ready[self.server_rr % ready.len()];
        self.server_rr = self.server_rr.wrapping_add(1);
        let env = message_envelope(channel)?;
        self.send_app(pick, channel, &env, payload)
    }

    /// Sends one MESSAGE: `env` (from [`message_envelope`]) and the payload as it is.
    fn send_app(
        &mut self,
        k: LinkKey,
        who: &str,
        env: &[u8],
        payload: &[u8],
    ) -> Result<(), SendError> {
        let Some(c) = self.links.get(k).and_then(|l| l.conn.as_ref()) else {
            return Err(SendError::NotReady(who.to_owned()));
        };
        let sent = match (self.slots.get(c.slot), c.route.as_deref()) {
            (Some(Some(s)), Some(route)) => s.socket.send_frames(&[route, env, payload]),
            (Some(Some(s)), None) => s.socket.send_frames(&[env, payload]),
            _ => Err(super::socket::SendError::Unreachable),
        };
        // The send may have consumed the ZMQ_FD signal of a record that arrived meanwhile:
        // check the socket's ZMQ_EVENTS before the loop sleeps (see `ready`).
        self.ready.touch(Watch::Socket(c.slot));
        match sent {
            Ok(()) => {
                metrics::counter!("zmesh_app_records_sent_total").increment(1);
                Ok(())
            }
            Err(super::socket::SendError::Full) => Err(SendError::WouldBlock(who.to_owned())),
            Err(_) => Err(SendError::NotReady(who.to_owned())),
        }
    }

    /// Publishes `payloads` on `topic` in order, one sequence number each. Topic and payload
    /// go to the socket as they are, between them an envelope built on the stack.
    fn publish(&mut self, topic: &[u8], payloads: &[Bytes]) {
        let Some(p) = self.publisher.as_mut() else {
            tracing::warn!("publish on a node without a publisher endpoint");
            return;
        };
        // Node::publish checked the topic; the wire rule is checked again here, once a batch.
        if topic.is_empty() || topic.len() > MAX_TOPIC_LEN || topic == BEACON_TOPIC {
            return;
        }
        let Some(Some(slot)) = self.slots.get(p.slot) else {
            return;
        };
        for payload in payloads {
            p.seq += 1;
            let env = records::publish_envelope(self.me.generation, p.seq);
            // PUB never blocks; at HWM libzmq drops for that subscriber (fanout loss rule).
            let _ = slot.socket.send_frames(&[topic, &env, payload]);
        }
    }

    // ----------------------------------------------------------------------------------
    // Snapshot and shutdown
    // ----------------------------------------------------------------------------------

    fn snapshot(&self, now: Instant) -> Snapshot {
        let age = |t: Instant| now.saturating_duration_since(t).as_millis() as u64;
        let mut links = Vec::new();
        for (k, l) in self.links.iter().enumerate() {
            let (topology, role, peer, endpoint) = match &l.kind {
                LinkKind::MeshDial { peer, lane } => {
                    let p = self.cfg.peers.get(*peer);
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
                    let s = self.cfg.servers.get(*server);
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
                        .slots
                        .iter()
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
            };
            let _ = k;
            let peer_generation = l
                .conn
                .as_ref()
                .and_then(|c| c.peer.as_ref())
                .map(|p| p.generation);
            links.push(LinkSnapshot {
                topology,
                role,
                peer,
                peer_generation,
                endpoint,
                state: l.state.state(),
                connection_id: l.conn.as_ref().map(|c| c.id.0),
                last_failure: l.state.last_failure().map(|f| FailureSnapshot {
                    reason: f.reason,
                    detail: f.detail.clone(),
                    age_ms: age(f.at),
                }),
                last_receive_age_ms: l.last_receive.map(age),
                last_receive_unix_ms: l
                    .last_receive
                    .map(|t| crate::display_time::unix_millis(t, now)),
                records_received: l.records,
                pending_calls: l
                    .conn
                    .as_ref()
                    .map(|c| self.calls.pending_on((k, c.id)))
                    .unwrap_or(0),
                ready_count: l.state.readies(),
                failure_count: l.state.failures(),
            });
        }
        for s in &self.subs {
            let last = self
                .liveness
                .publisher(s.live)
                .and_then(|w| w.last_receive_at());
            links.push(LinkSnapshot {
                topology: "fanout",
                role: "subscriber",
                peer: None,
                peer_generation: None,
                endpoint: s.endpoint.clone(),
                state: s.state.state(),
                connection_id: s.conn_id.map(|c| c.0),
                last_failure: s.state.last_failure().map(|f| FailureSnapshot {
                    reason: f.reason,
                    detail: f.detail.clone(),
                    age_ms: age(f.at),
                }),
                last_receive_age_ms: last.map(age),
                last_receive_unix_ms: last.map(|t| crate::display_time::unix_millis(t, now)),
                records_received: s.records,
                pending_calls: 0,
                ready_count: s.state.readies(),
                failure_count: s.state.failures(),
            });
        }
        let omitted = links.len().saturating_sub(SNAPSHOT_LIMIT);
        links.truncate(SNAPSHOT_LIMIT);
        Snapshot {
            rid: self.me.rid.clone(),
            generation: self.me.generation,
            host: match self.host {
                Host::Running => "running",
                Host::Draining => "draining",
                Host::Stopped => "stopped",
            },
            pending_calls: self.calls.pending(),
            serving_calls: self.serve.in_flight(),
            links,
            omitted,
            zmq_contexts: self.sockets.contexts(),
            zmq_sockets: self.sockets.open_sockets(),
        }
    }

    /// Orderly close of every ready connection, then every socket, monitor and timer goes.
    fn close_everything(&mut self) {
        let now = Instant::now();
        // This node's own calls still out end now, each saying whether it may have run.
        self.calls.handle_shutdown(now);
        self.drain_calls(now);
        for k in 0..self.links.len() {
            if self.links[k].conn.as_ref().is_some_and(|c| c.ready) {
                let _ = self.send_on_link(k, records::close(CloseReason::Shutdown));
            }
            if let Some(conn) = self.links[k].conn.take() {
                self.close_conn(k, conn, FailureReason::HostStopped, now);
            }
            // Dropped before libzmq confirmed the close: a monitor dropped that early can
            // keep the context's reaper waiting to send it MONITOR_STOPPED, until the context
            // is terminated, which the end of this function does.
            self.confirm_close(k);
            self.links[k].retry_at = None;
        }
        for m in std::mem::take(&mut self.overdue_closing) {
            self.ready.deregister(&m);
        }
        for k in 0..self.slots.len() {
            if let Some(slot) = self.take_slot(k) {
                // Dialled sockets carrying our CLOSE need a moment to flush it.
                let _ = slot.socket.set_linger(CLOSE_LINGER_MS);
                drop(slot);
            }
        }
        self.sweeps.clear();
        self.inbound.clear();
        self.subs.clear();
        self.publisher = None;
        self.liveness.clear();
        self.live_owner.clear();
        // Dropping the contexts terminates them once their last socket is closed: after this,
        // libzmq has released every socket, connection and listening port of the node.
        self.sockets = Sockets::new(0);
        self.flush_events();
        if let Some(reply) = self.shutdown_reply.take() {
            let _ = reply.send(());
        }
    }
}

/// Handshake admission on a lane: the NotRequired rule is RouteMesh's (MISSION T4); a
/// ClientServer client may call any server.
fn admit_on(
    lane: Lane,
    local: &Identity,
    expect: &Expectation,
    peer: &Identity,
) -> Result<(), Refusal> {
    match handshake::admit(local, expect, peer) {
        Err(Refusal::NotRequired) if lane == Lane::ClientServer => Ok(()),
        other => other,
    }
}

/// The MESSAGE envelope of `channel`, a refused channel being an argument error.
fn message_envelope(channel: &str) -> Result<Vec<u8>, SendError> {
    records::message_envelope(channel).map_err(|e| SendError::Invalid(e.to_string()))
}

/// Reconnect delay after `failures` consecutive failures: [`BACKOFF_MIN`] doubling up to
/// [`BACKOFF_MAX`].
fn backoff(failures: u32) -> Duration {
    let shift = failures.clamp(1, 8) - 1;
    (BACKOFF_MIN * (1u32 << shift)).min(BACKOFF_MAX)
}

/// Sends a record, prefixed by a routing id when the socket is a ROUTER.
fn send_routed(
    socket: &zmq::Socket,
    route: Option<&[u8]>,
    frames: &[Vec<u8>],
) -> Result<(), super::socket::SendError> {
    let mut refs: Vec<&[u8]> = Vec::with_capacity(frames.len() + 1);
    if let Some(r) = route {
        refs.push(r);
    }
    refs.extend(frames.iter().map(Vec::as_slice));
    socket.send_frames(&refs)
}

/// The routing id of a dialled connection: unique per physical connection, so that a new
/// connection never collides with a half-open old one at the accepting ROUTER (LIBZMQ-NOTES),
/// and never starting with byte 0 (reserved by libzmq).
/// Logs a state transition the link state machine refused; the runtime's own bookkeeping
/// decides what happens next, the refusal only signals a bug worth seeing in traces.
fn note(r: Result<(), crate::proto::state::TransitionError>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "link state transition refused");
    }
}

fn routing_id(lane: Lane, generation: u64, id: ConnId) -> Vec<u8> {
    let mut r = Vec::with_capacity(18);
    r.push(b'z');
    r.push(match lane {
        Lane::Application => b'A',
        Lane::Completion => b'C',
        Lane::ClientServer => b'S',
    });
    r.extend_from_slice(&generation.to_be_bytes());
    r.extend_from_slice(&id.0.to_be_bytes());
    r
}
