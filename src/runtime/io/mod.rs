//! The I/O thread: owns every libzmq socket of a node (the publisher socket, of which it reads
//! only subscriptions, is shared with the async side, see [`outbound`]) and runs the single
//! receive loop (MISSION R1).
//!
//! One loop turn: read the monotonic clock once; run due timers (liveness, beacons, reconnects,
//! disconnect sweeps; a turn that runs a due liveness timer also sends every probe and beacon
//! due within the next [`crate::proto::liveness::COALESCE_WINDOW`], never late, so thousands of connections
//! cost one wake-up per window and not one per probe); wait on the epoll set of every
//! socket's and monitor's `ZMQ_FD` and the async side's wake-up until the next deadline, and
//! check `ZMQ_EVENTS` of the sockets that fired or that the loop touched (`parts::ready`);
//! handle monitor events; handle commands, then the
//! send queues in bursts (module [`outbound`]); run one receive rotation under the scheduler's
//! caps; hand the batch of events to the application.
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
//! cannot close one accepted pipe and its disconnect events do not name the peer, so the bound
//! ROUTER runs with `ROUTER_NOTIFY`: libzmq hands it an empty record from a connection's
//! routing id when the connection attaches (before its HELLO; it changes nothing) and when it
//! is lost (after its last record): the link of an admitted connection whose loss is noticed
//! is taken out of ready at once (MISSION L6), and no other connection hears of it. libzmq
//! drops the loss notice of a connection whose pipe was full at that moment; for that case a
//! bound-side disconnect event starts a few checks over
//! [`SWEEP_DELAYS`](crate::proto::node::timers::SWEEP_DELAYS): if the socket then has more admitted
//! connections than open ones, the loop *sweeps* it, sending each inbound connection a record
//! that changes nothing with `ROUTER_MANDATORY`; a connection whose pipe is gone fails the
//! send with `EHOSTUNREACH` and is taken out of ready.
//!
//! When two nodes dial each other, both connections reach the acceptors; the connection
//! dialled by the node with the smaller RID is kept and the other one is rejected with
//! `Duplicate`, so each lane has exactly one current connection per peer (MISSION T1).
//!
//! # Layout
//! Four layers, each importing only the ones below it:
//! - The node core's parts in [`crate::proto::node`], sans-IO: the typed keys and tables,
//!   links with their own timings and failure rules, the timer table, the liveness table
//!   with the owner of each entry, the call routes, the gate and the admission tables,
//!   discovery's additions, this node's calls (`caller`), the calls it serves (`callee`:
//!   admission, execution queues, dispatch decisions, stream windows) and the callee's
//!   answers on their way out (`answers`). The node-wide ones (the links, the timer table,
//!   the admission tables, discovery's additions, the liveness table, the routes, the fanout
//!   subscriptions) are held as one `NodeCore` (`proto::node::core`), the thread's field
//!   `core`, with the handshake's decisions, a link's failure, the disconnect sweeps, what
//!   its timers do when due, what a dialled or SUB socket's monitor event does and the
//!   receive path's decisions (`core::receive`: where a record read goes, what a link's
//!   record does in its connection's state, a PACK's records as a run), in their order,
//!   classic fanout's (`core::fanout`: what a message read from a subscription is and
//!   whether it is delivered, a PUBPACK's records, the watch's verdicts, a subscription's
//!   failure, refusal and opening), the gate's (`core::gate`: a ZAP request's verdict after
//!   its socket's monitor is read, a bound socket's monitor events, the publisher's refused
//!   input, a refusal counted and remembered), which links and subscriptions a snapshot
//!   lists (`core::snapshot`), what running out of descriptors does (`core::exhaustion`:
//!   the failure of a link or subscription that cannot open a socket, which one emits a
//!   state event, when an episode's warning is logged), and the calls' (`core::calls`:
//!   where a call goes, how a turn's REQUESTs share a message, which calls a lost
//!   connection fails, whether an answer has a call key, where a REQUEST's answers go and
//!   who sent it, where a CANCEL or CREDIT goes and how an answer leaves); the thread is
//!   that core's `Shell`, `ReceiveShell`, `FanoutShell`, `GateShell` and `CallShell`.
//! - [`parts`]: the parts that hold a socket, a channel or a task handle, each owning its
//!   own behind a narrow interface and none of them importing the thread: the socket set with
//!   the one send and receive primitive, the ZAP handler and the monitors of closes not yet
//!   confirmed (`parts::sockets`); readiness (`parts::ready`: epoll over `ZMQ_FD`, the edge
//!   rule); the caller (`parts::caller`: the core's calls with their reply channels, the
//!   operations registry and the call gauges) and the callee (`parts::callee`: the core's
//!   served calls with the served channels, running handlers, inline runs and stream items'
//!   reply channels); the
//!   application queue (`parts::app`); the send queues and their turns
//!   (`parts::outbound`); the node's own publisher (`parts::fanout`); descriptor exhaustion
//!   (`parts::exhaustion`: the OS's figures and the core's episode); the hand-off from the
//!   async side (`parts::handoff`); the node
//!   itself (`parts::local`: configuration, identity, key pair, where it is in its life);
//!   the receive scheduler (`parts::receiving`).
//! - This file: the thread's state ([`IoThread`], which holds the parts), its construction
//!   and the loop with its order.
//! - The glue, `impl IoThread` blocks that move records between the parts and the sockets:
//!   [`slots`] (binding, placing sockets), [`links`] (dialling, closing dialled
//!   sockets), [`monitor`] (reading the sockets' monitor events), [`admission`] (the core's
//!   `Shell`: decoding an unadmitted connection's first record, the effects of the core's
//!   handshake, of its failing a link, of its disconnect sweeps and of its timers), [`gate`]
//!   (reading and answering the ZAP handler, the core's `GateShell`: a bound socket's
//!   monitor, its endpoint, the refusal counter; loading the allow-list), [`receive`]
//!   (the fair receive rotation: reading, staging a PACK's records, handing each record to
//!   its subscription or to the core; the core's `ReceiveShell`: the effects of a link's
//!   records), [`fanout`] (the publisher: binding it,
//!   reading its subscriptions; the SUB sockets: creating, securing, connecting and reading
//!   them for the core, whose `FanoutShell` it is: deliveries, states, closing a SUB socket), [`timers`] (the earliest deadline; call deadlines, then the core's timers), [`commands`] (the async
//!   side's commands), [`outbound`] (draining the send queues in bursts), [`publish`]
//!   (opening, publishing and closing the send queues, below `links` and `outbound`), [`calls`]
//!   (the core's `CallShell`: starting calls, sending a turn's REQUESTs, handing answers
//!   and lost connections to the caller and callee parts), [`serve`] (handing the
//!   REQUESTs, BATCHes, CANCELs and CREDITs the core routed to the callee, sending its
//!   ACCEPTs and ITEMs), [`route`] (below both: sending the CANCELs and answers the
//!   caller, callee and core decided on; `sync_links` and `conn_caps`, hand-offs to the
//!   core for the other glue), [`exhaustion`] (working out the cause of a socket not opened
//!   from the OS's descriptor figures, logging the core's episode),
//!   [`discovery`] (automatic mode: intents and fences, MISSION D1, F3, T3), [`snapshot`]
//!   (the core's listing mapped into the snapshot, with where each link sits in the
//!   configuration and its pending calls) and [`shutdown`].

mod admission;
mod calls;
mod commands;
mod discovery;
mod exhaustion;
mod fanout;
mod gate;
mod links;
mod monitor;
mod outbound;
mod parts;
mod publish;
mod receive;
mod route;
mod serve;
mod shutdown;
mod slots;
mod snapshot;
mod timers;

use std::collections::BTreeSet;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::command::Command;
use super::error::NodeError;
use super::event::EventSender;
use super::operations::OpsShared;
use super::outbound::{Closed, LinkTable, PubSocket};
use super::records::Lane;
use super::security::KeyPair;
use super::socket::Sockets;
use super::transport::{Transport, TransportMonitor, TransportSocket};
use super::wake::WakeUp;
use crate::config::NodeConfig;
use crate::proto::handshake::Identity;
use crate::proto::node::answers::AnswerQueue;
use crate::proto::node::core::NodeCore;
use crate::proto::node::gate::{Gate, Gated};
use crate::proto::node::keys;
use crate::proto::node::link;
use crate::proto::security::PublicKey;
use link::LinkKind;
pub use parts::callee::GRACEFUL_STOP_BOUND;
use parts::fanout::Publisher;
use parts::{app, callee, caller, ready, sockets};
use ready::{Readiness, Watch};

use sockets::{Slot, SocketSet};

/// Records read from a dialled socket after its disconnect event, before the disconnect is
/// acted on (they arrived first; an orderly CLOSE among them is the better reason).
const DRAIN_BEFORE_DISCONNECT: usize = 1024;
/// Longest poll wait while some socket is held back by a paused application queue, so the
/// loop notices the application draining its queue.
const PAUSED_POLL_MS: i64 = 10;
/// Bound on one drain of commands per loop turn, so commands cannot starve the receive loop.
const COMMANDS_PER_TURN: usize = 1024;

use crate::proto::node::links::{BOUND_ID_APPLICATION, BOUND_ID_COMPLETION, BOUND_ID_SERVER};
/// The publisher's ZAP domain (CURVE: its subscribers must be on the allow-list).
const PUBLISHER_DOMAIN: &str = "zmesh-publisher";

pub(crate) use keys::{CallKey, LinkKey, SlotKey, SubKey};
use parts::local::Host;

/// What the async side shares with the I/O thread.
pub(crate) struct Shared {
    /// Wakes the I/O thread for commands.
    pub(crate) wake: Arc<WakeUp>,
    /// Where one-way records go.
    pub(crate) table: Arc<LinkTable>,
    /// The node's PUB socket, if it has a publisher endpoint.
    pub(crate) publisher: Option<Arc<PubSocket>>,
}

/// The I/O thread's state.
pub(crate) struct IoThread {
    /// The node itself: configuration, identity, key pair, where it is in its life.
    local: parts::local::Local,
    /// Every socket of the node, the epoll set over them, the closes still unconfirmed and
    /// the descriptor figures when the node runs out.
    sockets: SocketSet,
    /// The async side's command queue, its wake-up and the reply a stop waits for.
    handoff: parts::handoff::Handoff,
    /// What waits to leave: the link table one-way records go through (published for the
    /// async side), the turns of the send queues (see [`outbound`]), and the callee's
    /// answers held for the end of the turn or behind a full pipe.
    outbound: parts::outbound::Outbound,
    /// The application's queue: this turn's events, the deliveries it holds, the link
    /// backlogs while it is paused.
    app: app::AppQueue,
    /// The calls this node makes: call table, reply channels, REQUESTs of this turn.
    caller: caller::Caller,
    /// The calls this node serves: channels, serve table, execution queues, handlers.
    callee: callee::Callee,
    /// The publishers this node reads and its own publisher.
    fanout: parts::fanout::FanoutState,
    /// The fair receive scheduler and what its last rotation left.
    receiving: parts::receiving::Receiving,
    /// The node core's node-wide parts: the links, the timer table, the bound sockets'
    /// admission tables, discovery's additions, the liveness table and the call routes.
    core: NodeCore,
}

/// What the I/O thread is given of the node's security at start.
pub(crate) struct SecurityInit {
    /// This node's CURVE key pair (`mode = "curve"`), or `None` (`mode = "none"`).
    pub(crate) curve: Option<KeyPair>,
    /// The allow-list the bound endpoints start with.
    pub(crate) allow: BTreeSet<PublicKey>,
}

impl IoThread {
    /// Binds the node's endpoints and prepares its links; returns the thread state and what
    /// the async side shares with it.
    pub(crate) fn new(
        cfg: NodeConfig,
        generation: u64,
        commands: Receiver<Command>,
        events: EventSender,
        outstanding: Arc<AtomicUsize>,
        ops: Arc<OpsShared>,
        security: SecurityInit,
    ) -> Result<(IoThread, Shared), NodeError> {
        let now = Instant::now();
        let mut sockets = Sockets::new(generation);
        sockets.set_max_frame_size(Some(cfg.max_frame_size));
        metrics::gauge!("zmesh_allow_list_keys").set(security.allow.len() as f64);
        let gate = Gate::new(security.allow);
        let curve = security.curve;
        let mut zap = None;
        // Bound ROUTERs always go through the gate (the unadmitted cap); under CURVE the
        // publisher too (the allow-list).
        let gated = cfg.route_mesh.is_some()
            || cfg.server.is_some()
            || (curve.is_some() && cfg.publisher.is_some());
        if gated {
            let handler = sockets.admission().map_err(|source| {
                NodeError::bind(
                    "the ZAP handler of the bound endpoints (inproc://zeromq.zap.01)",
                    source,
                )
            })?;
            zap = Some(handler);
        }
        let ready = Readiness::new().map_err(NodeError::poller)?;
        let wake = Arc::new(WakeUp::new(ready.waker().map_err(NodeError::poller)?));
        let table = Arc::new(LinkTable::default());

        // Under CURVE a node's security identity is its public key, which it proves in every
        // handshake.
        let security_identity = match &curve {
            Some(pair) => pair.public.to_z85(),
            None => cfg.security_identity().to_owned(),
        };
        let me = Identity {
            rid: cfg.rid.clone(),
            generation,
            security_identity,
            memberships: cfg.memberships.clone(),
            capabilities: crate::proto::handshake::Capabilities::SPOKEN,
        };
        let mut io = IoThread {
            sockets: SocketSet::new(sockets, ready, curve.is_some()),
            local: parts::local::Local::new(cfg.clone(), me, curve),
            handoff: parts::handoff::Handoff {
                wake: wake.clone(),
                commands,
                shutdown_reply: None,
            },
            outbound: parts::outbound::Outbound {
                table: table.clone(),
                turns: parts::outbound::SendTurns::new(),
                answers: AnswerQueue::default(),
                opened: parts::outbound::Opened::default(),
                queues: parts::outbound::Queues::default(),
            },
            app: app::AppQueue::new(events, outstanding, cfg.delivery_high_water),
            caller: caller::Caller::new(ops),
            callee: callee::Callee::new(),
            fanout: parts::fanout::FanoutState::default(),
            receiving: parts::receiving::Receiving::new(),
            core: NodeCore::new(gate, generation),
        };
        io.sockets.zap = zap;
        if let Some(zap) = &io.sockets.zap {
            io.sockets
                .ready
                .register(zap, Watch::Zap)
                .map_err(NodeError::poller)?;
        }
        if let Some(rm) = &cfg.route_mesh {
            io.bind(&rm.application, Lane::Application)?;
            io.bind(&rm.completion, Lane::Completion)?;
        }
        if let Some(s) = &cfg.server {
            io.bind(&s.endpoint, Lane::ClientServer)?;
        }
        if let Some(p) = &cfg.publisher {
            let (socket, endpoint, monitor) = io.bind_publisher(&p.endpoint)?;
            let socket = Arc::new(PubSocket::new(socket, generation, wake.clone()));
            let live = io.core.liveness.insert_beacon(now);
            io.fanout.publisher = Some(Publisher::new(socket, endpoint, live, monitor));
        }
        for (i, _) in cfg.peers.iter().enumerate() {
            for lane in [Lane::Application, Lane::Completion] {
                io.core.add_link(LinkKind::MeshDial { peer: i, lane }, now);
            }
        }
        for (i, _) in cfg.servers.iter().enumerate() {
            io.core.add_link(LinkKind::ClientDial { server: i }, now);
        }
        for s in &cfg.subscriptions {
            let key = cfg.security.endpoint_key(&s.endpoint);
            io.add_sub(&s.endpoint, key, now);
        }
        io.check_fd_limit();
        let shared = Shared {
            wake,
            table,
            publisher: io.fanout.publisher.as_ref().map(|p| p.socket.clone()),
        };
        Ok((io, shared))
    }

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
            self.app.flush();
            if self.local.host == Host::Draining && self.callee.serving().is_drained() {
                self.local.host = Host::Stopped;
            }
            if self.local.host == Host::Stopped {
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
            let timeout = if self.receiving.busy
                || !self.handoff.commands.is_empty()
                || self.has_input()
                || self.has_sends()
            {
                // More records, monitor events, commands or queued sends are waiting (those
                // left over by a per-turn cap have no wake-up of their own): do not sleep.
                0
            } else if !self.app.has_backlog()
                && self.outbound.answers.is_empty()
                && !self.has_blocked_sends()
            {
                timeout
            } else if timeout < 0 {
                PAUSED_POLL_MS
            } else {
                timeout.min(PAUSED_POLL_MS)
            };
            let wait = u64::try_from(timeout).ok().map(Duration::from_millis);
            if let Err(e) = self.sockets.ready.wait(wait) {
                tracing::error!(error = %e, "epoll wait failed; stopping the node");
                break;
            }
            self.settle();
            let now = Instant::now();
            for slot in self.sockets.ready.take_monitors() {
                self.drain_monitor(slot, now);
            }
            // The wake-up is taken before the publisher's look (and the command queue) is:
            // a publish that asks for a look after this wakes the loop again.
            if self.sockets.ready.take_wake() {
                self.handoff.wake.taken();
            }
            self.read_publisher(now);
            if std::mem::take(&mut self.sockets.zap_ready) {
                self.handle_zap(now);
            }
            // Commands before records: a command the application gave before it saw some
            // effect (e.g. a service registered before the peer was seen ready) is in force
            // before any record read after that effect.
            if !self.drain_commands(now) {
                break;
            }
            // A rotation with no readable socket and nothing left over from the last one
            // (records staged, a rotation cut by its time cap) would only answer "would
            // block" for every unit: skip it.
            self.receiving.busy = if self.receiving.busy || self.has_readable() {
                self.receive_rotation()
            } else {
                false
            };
        }
        self.close_everything();
    }

    /// Reads `ZMQ_EVENTS` of every socket due for a check (touched by the loop, or its
    /// descriptor fired) and records what it says: readable sockets, monitors with events,
    /// wake-ups, closes confirmed. The check itself is the socket's last operation, so the
    /// next record to arrive on it signals its descriptor again.
    pub(super) fn settle(&mut self) {
        while self.sockets.ready.has_checks() {
            for w in self.sockets.ready.take_checks() {
                match w {
                    Watch::Wake => self.sockets.ready.found_wake(),
                    Watch::Publisher => {
                        if let Some(p) = self.fanout.publisher.as_mut() {
                            p.subscriptions_waiting();
                        }
                    }
                    Watch::PublisherMonitor => {
                        if let Some(p) = self.fanout.publisher.as_mut() {
                            p.monitor_waiting();
                        }
                    }
                    Watch::Zap => {
                        if self.sockets.zap.as_ref().is_some_and(|z| z.has_input()) {
                            self.sockets.zap_ready = true;
                        }
                    }
                    Watch::Socket(k) => {
                        let input = match self.sockets.get(k) {
                            Some(s) => s.socket.has_input(),
                            _ => continue,
                        };
                        self.sockets.ready.found_socket(k, input);
                    }
                    Watch::Monitor(k) => {
                        let input = match self.sockets.get(k) {
                            Some(Slot {
                                monitor: Some(m), ..
                            }) => m.has_event(),
                            _ => continue,
                        };
                        if input {
                            self.sockets.ready.found_monitor(k);
                        }
                    }
                    Watch::Closing(k) => {
                        // Only libzmq's MONITOR_STOPPED confirms: other events still queued
                        // on the monitor belong to the closed connection and come before it.
                        let confirmed = self
                            .sockets
                            .closing
                            .get(&k)
                            .is_some_and(|m| m.close_confirmed());
                        if confirmed {
                            self.confirm_close(k);
                        }
                        self.sockets.settle_overdue_closing();
                    }
                }
            }
        }
    }

    /// True if something is waiting that the loop can act on now: a readable socket it may
    /// read, a monitor event, a wake-up.
    pub(super) fn has_input(&self) -> bool {
        self.sockets.ready.is_woken()
            || self.sockets.zap_ready
            || self.sockets.ready.has_monitors()
            || self.has_readable()
            || self
                .fanout
                .publisher
                .as_ref()
                .is_some_and(|p| p.has_subscriptions() || p.has_monitor_events())
    }

    /// True if some readable socket is not held back by a paused application queue.
    pub(super) fn has_readable(&self) -> bool {
        self.sockets
            .ready
            .readable()
            .iter()
            .any(|&k| !self.app.is_held(k))
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        // However the thread ended, or if it never ran: senders learn that the node stopped
        // instead of waiting for room in a queue nobody drains (a stop that ran
        // `close_everything` did all of this already).
        self.outbound.table.stop();
        for k in self.core.links.keys() {
            let conn = self
                .core
                .links
                .get(k)
                .and_then(|l| l.conn.as_ref())
                .map(|c| c.id);
            if let Some(q) = conn.and_then(|c| self.outbound.queues.take(k, c)) {
                q.close(Closed::Shutdown);
            }
        }
        if let Some(p) = &self.fanout.publisher {
            drop(p.socket.close());
        }
    }
}
