//! A simulated network of sockets behind zmesh's transport traits
//! ([`zmesh::runtime::transport`]): the same operations the node performs on libzmq sockets,
//! in memory, deterministic, in one thread.
//!
//! # Driving it
//! Nothing moves by itself. [`SimNet::deliver`] runs one round of the network: connection
//! attempts that are due, handshakes, closes, and every record that fits into the pipe it is
//! bound for; [`SimNet::advance`] moves the virtual clock, which only reconnect intervals and
//! lingers read. A caller alternates operations on the sockets with rounds and, when a round
//! moved nothing, jumps to [`SimNet::next_timer`]. Every collection is ordered, so the same
//! calls give the same network, event for event.
//!
//! # What it models of libzmq 4.3 with zmesh's options
//! (the contract of [`zmesh::runtime::transport`]; ../shared/LIBZMQ-NOTES.md)
//!
//! - **Pipes.** A dialled socket makes its pipe when it connects and keeps it across
//!   reconnections: a DEALER queues records before the handshake and while disconnected; a
//!   dialled ROUTER keeps routing to its peer's id while disconnected (the records wait for
//!   the reconnection). A bound socket's pipe is made when a connection's handshake is done
//!   and goes with the connection; records that arrived before stay readable. Each pipe has
//!   an outgoing queue of `SNDHWM` and an incoming one of `RCVHWM` records (both
//!   [`zmesh::runtime::socket::HWM`] unless [`SimNet::with_hwm`]); a record moves from one
//!   to the other in a round when there is room. Records of one pipe stay in order; a socket
//!   reads its pipes in turn.
//! - **Routing ids.** A ROUTER's record starts with its peer's routing id (the one the peer
//!   set, or one made up, five bytes as libzmq's); a send to an id it has no pipe for fails
//!   `Unreachable` (`ROUTER_MANDATORY`), to a full pipe `Full`. A second connection with an
//!   id a bound ROUTER already has gets its handshake, but what it sends is dropped, for good.
//! - **DEALER** sends to its pipes in turn, skipping full ones; none with room is `Full`
//!   (also before it connected: it has no pipe then).
//! - **PUB/SUB.** A SUB sends its subscriptions when a connection's handshake is done and
//!   when it subscribes; they take effect at the publisher when they arrive. A PUB sends a
//!   record to each connection whose subscriptions prefix its first frame, and drops it for a
//!   connection whose pipe is full ([`SimNet::dropped`] counts those); a send never fails.
//!   A [`SocketKind::Publisher`] hands each subscription to its reader instead (one frame,
//!   `1` and the prefix) and applies it to the pipe it came on when told
//!   ([`TransportSocket::apply_subscription`]).
//! - **Connection notices.** Both ROUTER roles get an empty record from a connection's
//!   routing id when its handshake is done (before its records) and when it ends (after
//!   them); one that finds the pipe full is dropped.
//! - **Monitor events**, with the events zmesh's sockets ask libzmq for: a bound socket's
//!   monitor reports `Accepted { conn }` one round after the dial, then
//!   `HandshakeSucceeded` (the dialler's too) a round later, and `Disconnected { conn }`
//!   when the connection ends. A dial that finds nobody bound reports `Disconnected` (a
//!   fresh handle) and `ConnectRetried`, and tries again after 100 ms, doubling up to 1 s,
//!   as zmesh's reconnect interval; so does a dialled socket whose connection ended (after
//!   `Disconnected { conn }`). A dialled ROUTER or DEALER's monitor reports `Stopped` when it
//!   is closed; closing a socket reports nothing else to its own monitor. A stopped monitor
//!   ([`Transport::stop_monitor`]) hands back what it held and gets nothing more; a close
//!   watch ([`Transport::watch_close`]) gets the socket's `Stopped` alone.
//! - **Closing.** A dialled socket drops what it still had queued; a bound one, or one
//!   [`TransportSocket::linger_on_close`] was asked of, sends it first (for up to 200 ms of
//!   virtual time, [`zmesh::runtime::socket::CLOSE_LINGER_MS`]). The peer hears of the end in
//!   the next round (at once, as libzmq's peer of a closed TCP connection does).
//!
//! - **Security.** [`TransportSocket::secure_server`] and [`TransportSocket::secure_client`]
//!   are accepted and recorded ([`SimSocket::curve`]); nothing else follows from them.
//!
//! Not modelled: security mechanisms and ZAP (no handshake ever fails, whatever keys the
//! sockets were given), `MAXMSGSIZE`,
//! libzmq's handshake deadline, latency (a record moves in the round after it was sent),
//! kernel buffers (a pipe holds `SNDHWM + RCVHWM` records, libzmq's some more), and the
//! hazard of a libzmq monitor dropped before its socket's last event (here it just goes).

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use zmesh::proto::security::PublicKey;
use zmesh::runtime::security::KeyPair;
use zmesh::runtime::socket::{CLOSE_LINGER_MS, HWM};
use zmesh::runtime::transport::{
    Opened, SocketError, SocketEvent, SocketKind, SocketRole, SocketSendError, Transport,
    TransportMonitor, TransportSocket,
};

/// The first reconnect interval of a dialled socket (zmesh sets libzmq's `RECONNECT_IVL`).
const RECONNECT_IVL: Duration = Duration::from_millis(100);
/// The longest reconnect interval (zmesh's `RECONNECT_IVL_MAX`).
const RECONNECT_IVL_MAX: Duration = Duration::from_millis(1000);
/// The first port a wildcard endpoint (`tcp://127.0.0.1:*`) binds.
const FIRST_PORT: u32 = 40_000;

/// What a simulated socket operation fails with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// Another open socket is bound to the endpoint (`EADDRINUSE`).
    AddressInUse(String),
    /// The endpoint is not `scheme://address` (`EINVAL`).
    InvalidEndpoint(String),
    /// The socket's kind has no such operation (`ENOTSUP`, `EINVAL`).
    NotSupported(&'static str),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::AddressInUse(ep) => write!(f, "address in use: {ep}"),
            SimError::InvalidEndpoint(ep) => write!(f, "invalid endpoint: {ep}"),
            SimError::NotSupported(what) => write!(f, "not supported: {what}"),
        }
    }
}

impl std::error::Error for SimError {}

/// The simulated network has no descriptors to run out of.
impl SocketError for SimError {
    fn is_out_of_descriptors(&self) -> bool {
        false
    }
}

/// What a poller waits on for a simulated socket or monitor: the socket's id (the simulated
/// network has no descriptors; its caller asks [`TransportSocket::has_input`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SimReady(pub u64);

/// The simulated network: every socket, pipe and connection, and the virtual clock.
/// Cheap to clone (a handle).
#[derive(Clone)]
pub struct SimNet {
    world: Rc<RefCell<World>>,
}

/// Makes sockets on a [`SimNet`] (one per simulated node, or one for all).
#[derive(Clone)]
pub struct SimTransport {
    world: Rc<RefCell<World>>,
}

/// A simulated socket; closed when dropped.
pub struct SimSocket {
    world: Rc<RefCell<World>>,
    id: u64,
}

/// The CURVE role a simulated socket was given ([`SimSocket::curve`]): recorded, not
/// enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimCurve {
    /// [`TransportSocket::secure_server`]: a CURVE server with this public key.
    Server {
        /// The socket's public key.
        public: PublicKey,
    },
    /// [`TransportSocket::secure_client`]: a CURVE client with this public key, expecting
    /// `server`'s.
    Client {
        /// The socket's public key.
        public: PublicKey,
        /// The key it expects of the server.
        server: PublicKey,
    },
}

impl SimSocket {
    /// The CURVE role the socket was given, if any (the simulation does not enforce it).
    pub fn curve(&self) -> Option<SimCurve> {
        self.world.borrow().sockets.get(&self.id)?.curve
    }
}

/// The monitor of a simulated socket: its events, from the round they were raised in.
pub struct SimMonitor {
    world: Rc<RefCell<World>>,
    /// The socket's id.
    id: u64,
    /// Which of the socket's monitors this is (a close watch replaces a stopped one).
    token: u64,
}

impl Default for SimNet {
    fn default() -> SimNet {
        SimNet::new()
    }
}

impl SimNet {
    /// An empty network whose pipes hold zmesh's [`HWM`] records each way.
    pub fn new() -> SimNet {
        SimNet::with_hwm(usize::try_from(HWM).unwrap_or(1))
    }

    /// An empty network whose pipes hold `hwm` records each way (at least one).
    pub fn with_hwm(hwm: usize) -> SimNet {
        SimNet {
            world: Rc::new(RefCell::new(World::new(hwm.max(1)))),
        }
    }

    /// A transport that makes sockets on this network.
    pub fn transport(&self) -> SimTransport {
        SimTransport {
            world: self.world.clone(),
        }
    }

    /// One round of the network; returns how many things happened in it (attempts,
    /// handshakes, ends, records moved). Zero: nothing moves until a socket operation or
    /// [`SimNet::advance`].
    pub fn deliver(&self) -> usize {
        self.world.borrow_mut().deliver()
    }

    /// Rounds until one moves nothing (at most `max`); returns the rounds that moved
    /// something.
    pub fn settle(&self, max: usize) -> usize {
        (0..max).take_while(|_| self.deliver() > 0).count()
    }

    /// The virtual time since the network was made.
    pub fn now(&self) -> Duration {
        self.world.borrow().now
    }

    /// Moves the virtual clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.world.borrow_mut().now += by;
    }

    /// The next instant a timer (a reconnect attempt, the end of a linger) is due, if any.
    pub fn next_timer(&self) -> Option<Duration> {
        self.world.borrow().next_timer()
    }

    /// Records a PUB dropped for a subscriber whose pipe was full.
    pub fn dropped(&self) -> u64 {
        self.world.borrow().dropped
    }
}

/// A stopped monitor leaves nothing for the socket to keep (`Room = ()`): a close watch is
/// attached to the socket by its id.
impl Transport for SimTransport {
    type Socket = SimSocket;
    type Monitor = SimMonitor;
    type Room = ();

    fn socket(
        &mut self,
        kind: SocketKind,
        role: SocketRole<'_>,
    ) -> Result<Opened<SimSocket, SimMonitor>, SimError> {
        let (id, token) = {
            let mut w = self.world.borrow_mut();
            let id = w.open(kind, role);
            (id, w.watch(id, false))
        };
        Ok(Opened {
            socket: SimSocket {
                world: self.world.clone(),
                id,
            },
            monitor: SimMonitor {
                world: self.world.clone(),
                id,
                token,
            },
        })
    }

    /// A ROUTER bound to no endpoint: the simulation does not model admission, so no
    /// request ever arrives on it.
    fn admission(&mut self) -> Result<SimSocket, SimError> {
        let id = self
            .world
            .borrow_mut()
            .open(SocketKind::Router, SocketRole::Bound { domain: None });
        Ok(SimSocket {
            world: self.world.clone(),
            id,
        })
    }

    fn stop_monitor(
        _socket: &SimSocket,
        monitor: SimMonitor,
    ) -> Result<(Vec<SocketEvent>, ()), (SimError, SimMonitor)> {
        let events = monitor.take_events();
        drop(monitor);
        Ok((events, ()))
    }

    fn watch_close(&self, socket: &SimSocket, _room: ()) -> Result<SimMonitor, SimError> {
        let mut w = self.world.borrow_mut();
        if !w.sockets.contains_key(&socket.id) {
            return Err(SimError::NotSupported("a close watch on a closed socket"));
        }
        let token = w.watch(socket.id, true);
        Ok(SimMonitor {
            world: self.world.clone(),
            id: socket.id,
            token,
        })
    }

    fn close_stopping_monitor(socket: SimSocket, monitor: SimMonitor) -> Vec<SocketEvent> {
        let events = monitor.take_events();
        drop(monitor);
        drop(socket);
        events
    }
}

impl TransportSocket for SimSocket {
    type Frame = Bytes;
    type Error = SimError;
    type Readiness = SimReady;

    fn set_routing_id(&self, id: &[u8]) -> Result<(), SimError> {
        if let Some(s) = self.world.borrow_mut().sockets.get_mut(&self.id) {
            s.routing_id = Some(id.to_vec());
        }
        Ok(())
    }

    fn bind(&self, endpoint: &str) -> Result<String, SimError> {
        self.world.borrow_mut().bind(self.id, endpoint)
    }

    fn connect(&self, endpoint: &str) -> Result<(), SimError> {
        self.world.borrow_mut().connect(self.id, endpoint)
    }

    fn secure_server(&self, pair: &KeyPair) -> Result<(), SimError> {
        self.set_curve(SimCurve::Server {
            public: pair.public,
        })
    }

    fn secure_client(&self, pair: &KeyPair, server: &PublicKey) -> Result<(), SimError> {
        self.set_curve(SimCurve::Client {
            public: pair.public,
            server: *server,
        })
    }

    fn subscribe(&self, prefix: &[u8]) -> Result<(), SimError> {
        self.world.borrow_mut().subscribe(self.id, prefix)
    }

    fn apply_subscription(&self, subscribe: bool, prefix: &[u8]) -> Result<(), SimError> {
        self.world
            .borrow_mut()
            .apply_subscription(self.id, subscribe, prefix)
    }

    fn send(&self, frames: &[&[u8]]) -> Result<(), SocketSendError<SimError>> {
        self.world.borrow_mut().send(self.id, frames)
    }

    fn try_recv(&self) -> Result<Option<Vec<Bytes>>, SimError> {
        self.world.borrow_mut().recv(self.id)
    }

    fn has_input(&self) -> bool {
        self.world.borrow().has_input(self.id)
    }

    fn readiness(&self) -> Result<SimReady, SimError> {
        Ok(SimReady(self.id))
    }

    fn linger_on_close(&self) -> Result<(), SimError> {
        if let Some(s) = self.world.borrow_mut().sockets.get_mut(&self.id) {
            s.linger = true;
        }
        Ok(())
    }
}

impl SimSocket {
    fn set_curve(&self, curve: SimCurve) -> Result<(), SimError> {
        match self.world.borrow_mut().sockets.get_mut(&self.id) {
            Some(s) => {
                s.curve = Some(curve);
                Ok(())
            }
            None => Err(SimError::NotSupported("security on a closed socket")),
        }
    }
}

impl Drop for SimSocket {
    fn drop(&mut self) {
        self.world.borrow_mut().close(self.id);
    }
}

impl TransportMonitor for SimMonitor {
    type Error = SimError;
    type Readiness = SimReady;

    fn try_event(&self) -> Option<SocketEvent> {
        self.world
            .borrow_mut()
            .monitors
            .get_mut(&self.id)
            .filter(|m| m.token == self.token)?
            .events
            .pop_front()
    }

    fn has_event(&self) -> bool {
        self.world
            .borrow()
            .monitors
            .get(&self.id)
            .is_some_and(|m| m.token == self.token && !m.events.is_empty())
    }

    fn readiness(&self) -> Result<SimReady, SimError> {
        Ok(SimReady(self.id))
    }
}

impl SimMonitor {
    /// Stops the monitor: the events queued, and none from now on.
    fn take_events(&self) -> Vec<SocketEvent> {
        let mut w = self.world.borrow_mut();
        match w.monitors.get(&self.id) {
            Some(m) if m.token == self.token => w
                .monitors
                .remove(&self.id)
                .map(|m| Vec::from(m.events))
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

impl Drop for SimMonitor {
    fn drop(&mut self) {
        drop(self.take_events());
    }
}

/// The monitor a socket has now.
struct Watcher {
    /// Its [`SimMonitor::token`].
    token: u64,
    /// A close watch: reports [`SocketEvent::Stopped`] alone.
    close_only: bool,
    events: VecDeque<SocketEvent>,
}

/// A socket's role as the simulation needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Bound,
    Dialled,
}

struct Sock {
    kind: SocketKind,
    role: Role,
    routing_id: Option<Vec<u8>>,
    /// Queued records leave before the close (bound sockets, or asked for).
    linger: bool,
    /// The CURVE role it was given (recorded only).
    curve: Option<SimCurve>,
    /// A SUB's prefixes.
    subscriptions: Vec<Vec<u8>>,
    /// Endpoints it bound (free again once it closes).
    endpoints: Vec<String>,
    /// Its pipes, in the order they attached (reads and DEALER sends take them in turn).
    pipes: Vec<u64>,
    /// A ROUTER's pipes by the peer's routing id.
    routes: BTreeMap<Vec<u8>, u64>,
    /// A publisher's pipe it read from last: where a subscription is applied.
    last_read: Option<u64>,
    /// Where the next read and the next DEALER send start in `pipes`.
    next_read: usize,
    next_send: usize,
}

/// What a pipe carries: records, and a SUB's subscriptions on their way to the publisher.
enum Msg {
    Record(Vec<Bytes>),
    Subscribe(Vec<u8>),
}

/// One socket's end of a connection.
struct Pipe {
    sock: u64,
    /// Written by the socket, on their way to the peer (at most `hwm`).
    out: VecDeque<Msg>,
    /// Arrived from the peer, for the socket to read (at most `hwm`).
    inq: VecDeque<Vec<Bytes>>,
    /// The peer's routing id, once a handshake told it.
    peer_id: Option<Vec<u8>>,
    /// A PUB's pipe: the subscriptions that arrived from the SUB.
    filter: Vec<Vec<u8>>,
    /// The connection it is on now.
    conn: Option<u32>,
    /// A dialled socket's pipe: what it dials.
    dial: Option<Dial>,
    /// A bound socket's pipe whose connection ended: it goes once its records are read.
    ended: bool,
    /// A bound ROUTER's pipe whose peer's routing id another pipe has: what it brings is
    /// dropped (libzmq without `ROUTER_HANDOVER`).
    duplicate: bool,
}

struct Dial {
    endpoint: String,
    /// The next attempt (none while connected).
    attempt_at: Option<Duration>,
    /// The interval after the next failure or end.
    ivl: Duration,
}

/// A connection between a dialled socket's pipe and a bound socket.
struct Conn {
    dialler: u64,
    acceptor_sock: u64,
    /// The bound socket's pipe, made when the handshake is done.
    acceptor: Option<u64>,
    phase: Phase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Dialler,
    Acceptor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The bound socket accepted it; the handshake is done next round.
    Accepted,
    Live,
    /// One side closed and sends what it queued until `until`.
    Draining {
        closer: Side,
        until: Duration,
    },
    /// One side closed (or finished draining); the other hears of it next round.
    Ending {
        closer: Side,
    },
}

struct World {
    now: Duration,
    hwm: usize,
    sockets: BTreeMap<u64, Sock>,
    /// Each socket's monitor, by the socket's id, while it has one.
    monitors: BTreeMap<u64, Watcher>,
    bound: BTreeMap<String, u64>,
    pipes: BTreeMap<u64, Pipe>,
    conns: BTreeMap<u32, Conn>,
    next_id: u64,
    next_conn: u32,
    next_port: u32,
    next_routing: u32,
    /// The next monitor's token.
    next_token: u64,
    dropped: u64,
}

impl World {
    fn new(hwm: usize) -> World {
        World {
            now: Duration::ZERO,
            hwm,
            sockets: BTreeMap::new(),
            monitors: BTreeMap::new(),
            bound: BTreeMap::new(),
            pipes: BTreeMap::new(),
            conns: BTreeMap::new(),
            next_id: 1,
            next_conn: 1,
            next_port: FIRST_PORT,
            next_routing: 1,
            next_token: 1,
            dropped: 0,
        }
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn fresh_conn(&mut self) -> u32 {
        let c = self.next_conn;
        self.next_conn = self.next_conn.wrapping_add(1);
        c
    }

    fn open(&mut self, kind: SocketKind, role: SocketRole<'_>) -> u64 {
        let id = self.fresh_id();
        let role = match role {
            SocketRole::Bound { .. } => Role::Bound,
            SocketRole::Dialled => Role::Dialled,
        };
        self.sockets.insert(
            id,
            Sock {
                kind,
                role,
                routing_id: None,
                linger: role == Role::Bound,
                curve: None,
                subscriptions: Vec::new(),
                endpoints: Vec::new(),
                pipes: Vec::new(),
                routes: BTreeMap::new(),
                last_read: None,
                next_read: 0,
                next_send: 0,
            },
        );
        id
    }

    /// Attaches a monitor to socket `sock` (one that reports its close alone if
    /// `close_only`); returns the monitor's token.
    fn watch(&mut self, sock: u64, close_only: bool) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.monitors.insert(
            sock,
            Watcher {
                token,
                close_only,
                events: VecDeque::new(),
            },
        );
        token
    }

    fn emit(&mut self, sock: u64, event: SocketEvent) {
        if let Some(m) = self.monitors.get_mut(&sock) {
            if !m.close_only || event == SocketEvent::Stopped {
                m.events.push_back(event);
            }
        }
    }

    fn bind(&mut self, sock: u64, endpoint: &str) -> Result<String, SimError> {
        valid(endpoint)?;
        let endpoint = if endpoint.contains('*') {
            let port = self.next_port;
            self.next_port += 1;
            endpoint.replacen('*', &port.to_string(), 1)
        } else {
            endpoint.to_owned()
        };
        if self.bound.contains_key(&endpoint) {
            return Err(SimError::AddressInUse(endpoint));
        }
        let Some(s) = self.sockets.get_mut(&sock) else {
            return Err(SimError::NotSupported("bind on a closed socket"));
        };
        s.endpoints.push(endpoint.clone());
        self.bound.insert(endpoint.clone(), sock);
        Ok(endpoint)
    }

    fn connect(&mut self, sock: u64, endpoint: &str) -> Result<(), SimError> {
        valid(endpoint)?;
        let pipe = self.fresh_id();
        let Some(s) = self.sockets.get_mut(&sock) else {
            return Err(SimError::NotSupported("connect on a closed socket"));
        };
        s.pipes.push(pipe);
        self.pipes.insert(
            pipe,
            Pipe {
                dial: Some(Dial {
                    endpoint: endpoint.to_owned(),
                    attempt_at: Some(self.now),
                    ivl: RECONNECT_IVL,
                }),
                ..Pipe::new(sock)
            },
        );
        Ok(())
    }

    fn subscribe(&mut self, sock: u64, prefix: &[u8]) -> Result<(), SimError> {
        let Some(s) = self.sockets.get_mut(&sock) else {
            return Err(SimError::NotSupported("subscribe on a closed socket"));
        };
        if s.kind != SocketKind::Sub {
            return Err(SimError::NotSupported(
                "subscribe on a socket that is not a SUB",
            ));
        }
        s.subscriptions.push(prefix.to_vec());
        for p in s.pipes.clone() {
            let live = self
                .pipes
                .get(&p)
                .and_then(|p| p.conn)
                .and_then(|c| self.conns.get(&c))
                .is_some_and(|c| c.phase == Phase::Live);
            if let (true, Some(p)) = (live, self.pipes.get_mut(&p)) {
                p.out.push_back(Msg::Subscribe(prefix.to_vec()));
            }
        }
        Ok(())
    }

    fn send(&mut self, sock: u64, frames: &[&[u8]]) -> Result<(), SocketSendError<SimError>> {
        let Some(s) = self.sockets.get_mut(&sock) else {
            return Err(SocketSendError::Other(SimError::NotSupported(
                "send on a closed socket",
            )));
        };
        if frames.is_empty() {
            return Ok(());
        }
        let hwm = self.hwm;
        let record = |fs: &[&[u8]]| fs.iter().map(|f| Bytes::copy_from_slice(f)).collect();
        match s.kind {
            SocketKind::Router => {
                let (id, rest) = frames.split_first().ok_or(SocketSendError::Unreachable)?;
                let pipe = s
                    .routes
                    .get(*id)
                    .and_then(|p| self.pipes.get_mut(p))
                    .ok_or(SocketSendError::Unreachable)?;
                if pipe.out.len() >= hwm {
                    return Err(SocketSendError::Full);
                }
                if !rest.is_empty() {
                    pipe.out.push_back(Msg::Record(record(rest)));
                }
                Ok(())
            }
            SocketKind::Dealer => {
                let n = s.pipes.len();
                for i in 0..n {
                    let at = (s.next_send + i) % n;
                    let Some(pipe) = self.pipes.get_mut(&s.pipes[at]) else {
                        continue;
                    };
                    if pipe.ended || pipe.out.len() >= hwm {
                        continue;
                    }
                    pipe.out.push_back(Msg::Record(record(frames)));
                    s.next_send = (at + 1) % n;
                    return Ok(());
                }
                Err(SocketSendError::Full)
            }
            SocketKind::Pub | SocketKind::Publisher => {
                let topic = frames[0];
                for p in &s.pipes {
                    let Some(pipe) = self.pipes.get_mut(p) else {
                        continue;
                    };
                    if pipe.ended || !pipe.filter.iter().any(|f| topic.starts_with(f)) {
                        continue;
                    }
                    if pipe.out.len() >= hwm {
                        self.dropped += 1;
                    } else {
                        pipe.out.push_back(Msg::Record(record(frames)));
                    }
                }
                Ok(())
            }
            SocketKind::Sub => Err(SocketSendError::Other(SimError::NotSupported(
                "send on a SUB socket",
            ))),
        }
    }

    fn recv(&mut self, sock: u64) -> Result<Option<Vec<Bytes>>, SimError> {
        let Some(s) = self.sockets.get_mut(&sock) else {
            return Err(SimError::NotSupported("receive on a closed socket"));
        };
        if s.kind == SocketKind::Pub {
            return Err(SimError::NotSupported("receive on a PUB socket"));
        }
        let n = s.pipes.len();
        for i in 0..n {
            let at = (s.next_read + i) % n;
            let id = s.pipes[at];
            let Some(pipe) = self.pipes.get_mut(&id) else {
                continue;
            };
            let Some(mut record) = pipe.inq.pop_front() else {
                continue;
            };
            if s.kind == SocketKind::Router {
                let from = Bytes::from(pipe.peer_id.clone().unwrap_or_default());
                record.insert(0, from);
            }
            s.last_read = Some(id);
            s.next_read = (at + 1) % n;
            if pipe.ended && pipe.inq.is_empty() {
                // The pipe after it moves into its place.
                s.pipes.remove(at);
                s.next_read = if s.pipes.is_empty() {
                    0
                } else {
                    at % s.pipes.len()
                };
                self.pipes.remove(&id);
            }
            return Ok(Some(record));
        }
        Ok(None)
    }

    fn apply_subscription(
        &mut self,
        sock: u64,
        subscribe: bool,
        prefix: &[u8],
    ) -> Result<(), SimError> {
        let Some(s) = self.sockets.get(&sock) else {
            return Err(SimError::NotSupported("a subscription on a closed socket"));
        };
        if s.kind != SocketKind::Publisher {
            return Err(SimError::NotSupported(
                "a subscription applied by a socket that is not a publisher",
            ));
        }
        // The connection it came on may be gone: nothing to apply it to.
        let Some(pipe) = s.last_read.and_then(|p| self.pipes.get_mut(&p)) else {
            return Ok(());
        };
        if subscribe {
            pipe.filter.push(prefix.to_vec());
        } else if let Some(i) = pipe.filter.iter().position(|f| f == prefix) {
            pipe.filter.remove(i);
        }
        Ok(())
    }

    fn has_input(&self, sock: u64) -> bool {
        self.sockets.get(&sock).is_some_and(|s| {
            s.pipes
                .iter()
                .any(|p| self.pipes.get(p).is_some_and(|p| !p.inq.is_empty()))
        })
    }

    fn close(&mut self, sock: u64) {
        let Some(s) = self.sockets.remove(&sock) else {
            return;
        };
        for ep in &s.endpoints {
            self.bound.remove(ep);
        }
        let watched = self.monitors.get(&sock).is_some_and(|m| m.close_only);
        if watched
            || (s.role == Role::Dialled
                && matches!(s.kind, SocketKind::Router | SocketKind::Dealer))
        {
            self.emit(sock, SocketEvent::Stopped);
        }
        let until = self.now + Duration::from_millis(CLOSE_LINGER_MS.unsigned_abs().into());
        // The connections the socket is on: as the dialler, or accepted by it.
        let conns: Vec<(u32, Side)> = self
            .conns
            .iter()
            .filter_map(|(&id, c)| {
                if self.pipes.get(&c.dialler).is_some_and(|p| p.sock == sock) {
                    Some((id, Side::Dialler))
                } else {
                    (c.acceptor_sock == sock).then_some((id, Side::Acceptor))
                }
            })
            .collect();
        for (id, side) in conns {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            let own = match side {
                Side::Dialler => Some(c.dialler),
                Side::Acceptor => c.acceptor,
            };
            let queued = own
                .and_then(|p| self.pipes.get(&p))
                .is_some_and(|p| !p.out.is_empty());
            let phase = match c.phase {
                Phase::Live if s.linger && queued => Phase::Draining {
                    closer: side,
                    until,
                },
                Phase::Draining { .. } | Phase::Ending { .. } => Phase::Ending {
                    closer: Side::Dialler,
                },
                _ => Phase::Ending { closer: side },
            };
            if let Some(c) = self.conns.get_mut(&id) {
                c.phase = phase;
            }
        }
        // Pipes no connection drains any more go now.
        for p in s.pipes {
            let draining = self.conns.values().any(|c| {
                matches!(c.phase, Phase::Draining { .. })
                    && (c.dialler == p || c.acceptor == Some(p))
            });
            if !draining {
                if let Some(pipe) = self.pipes.get_mut(&p) {
                    pipe.out.clear();
                    pipe.inq.clear();
                    pipe.dial = None;
                    pipe.ended = true;
                }
            }
        }
    }

    fn next_timer(&self) -> Option<Duration> {
        let attempts = self
            .pipes
            .values()
            .filter(|p| self.sockets.contains_key(&p.sock))
            .filter_map(|p| p.dial.as_ref()?.attempt_at);
        let lingers = self.conns.values().filter_map(|c| match c.phase {
            Phase::Draining { until, .. } => Some(until),
            _ => None,
        });
        attempts.chain(lingers).min()
    }

    fn deliver(&mut self) -> usize {
        let mut moved = 0;
        moved += self.end_connections();
        moved += self.complete_handshakes();
        moved += self.attempt_dials();
        moved += self.transfer();
        moved += self.finish_draining();
        self.collect_pipes();
        moved
    }

    /// Connections one side closed: the other side hears of it.
    fn end_connections(&mut self) -> usize {
        let ending: Vec<(u32, Side)> = self
            .conns
            .iter()
            .filter_map(|(&id, c)| match c.phase {
                Phase::Ending { closer } => Some((id, closer)),
                _ => None,
            })
            .collect();
        for &(id, closer) in &ending {
            let Some(c) = self.conns.remove(&id) else {
                continue;
            };
            match closer {
                Side::Dialler => match c.acceptor {
                    Some(q) => self.end_acceptor_pipe(c.acceptor_sock, q, id),
                    // Closed before its handshake: the bound side saw it accepted.
                    None if self.sockets.contains_key(&c.acceptor_sock) => {
                        self.emit(c.acceptor_sock, SocketEvent::Disconnected { conn: id });
                    }
                    None => {}
                },
                Side::Acceptor => self.end_dialler_pipe(c.dialler, id, c.acceptor.is_some()),
            }
        }
        ending.len()
    }

    /// A bound socket's pipe whose connection `conn` ended: its records stay readable, then
    /// the loss notice (a ROUTER), and the peer's routing id is unknown from now on.
    fn end_acceptor_pipe(&mut self, sock: u64, pipe: u64, conn: u32) {
        let hwm = self.hwm;
        let Some(s) = self.sockets.get_mut(&sock) else {
            return;
        };
        let Some(p) = self.pipes.get_mut(&pipe) else {
            return;
        };
        p.ended = true;
        p.conn = None;
        if s.kind == SocketKind::Router && !p.duplicate {
            if let Some(id) = &p.peer_id {
                s.routes.remove(id);
            }
            if p.inq.len() < hwm {
                p.inq.push_back(vec![Bytes::new()]);
            }
        }
        // Nothing left to read: it goes now (else with its last record, `recv`).
        if p.inq.is_empty() {
            s.pipes.retain(|&q| q != pipe);
            s.next_read = 0;
            self.pipes.remove(&pipe);
        }
        self.emit(sock, SocketEvent::Disconnected { conn });
    }

    /// A dialled socket's pipe whose connection `conn` ended: its records stay readable,
    /// then the loss notice (a ROUTER, if the handshake was `done`); it keeps its peer's
    /// routing id and dials again after its interval.
    fn end_dialler_pipe(&mut self, pipe: u64, conn: u32, done: bool) {
        let hwm = self.hwm;
        let now = self.now;
        let Some(p) = self.pipes.get_mut(&pipe) else {
            return;
        };
        let sock = p.sock;
        let Some(s) = self.sockets.get(&sock) else {
            return;
        };
        p.conn = None;
        if done && s.kind == SocketKind::Router && p.inq.len() < hwm {
            p.inq.push_back(vec![Bytes::new()]);
        }
        if let Some(d) = p.dial.as_mut() {
            d.attempt_at = Some(now + d.ivl);
            d.ivl = (d.ivl * 2).min(RECONNECT_IVL_MAX);
        }
        self.emit(sock, SocketEvent::Disconnected { conn });
        self.emit(sock, SocketEvent::ConnectRetried);
    }

    /// Connections accepted in an earlier round complete their handshake: the bound socket's
    /// pipe is made, both monitors report it, routing ids are learnt and ROUTERs get their
    /// attach notice.
    fn complete_handshakes(&mut self) -> usize {
        let ready: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.phase == Phase::Accepted)
            .map(|(&id, _)| id)
            .collect();
        for &id in &ready {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            let (dialler, acceptor_sock) = (c.dialler, c.acceptor_sock);
            let Some(dialler_sock) = self.pipes.get(&dialler).map(|p| p.sock) else {
                continue;
            };
            let dialler_id = self.routing_id_of(dialler_sock);
            let acceptor_id = self.routing_id_of(acceptor_sock);
            let q = self.fresh_id();
            let mut pipe = Pipe::new(acceptor_sock);
            pipe.conn = Some(id);
            pipe.peer_id = Some(dialler_id.clone());
            let hwm = self.hwm;
            if let Some(a) = self.sockets.get_mut(&acceptor_sock) {
                if a.kind == SocketKind::Router {
                    match a.routes.entry(dialler_id) {
                        std::collections::btree_map::Entry::Occupied(_) => pipe.duplicate = true,
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert(q);
                            pipe.inq.push_back(vec![Bytes::new()]);
                        }
                    }
                }
                a.pipes.push(q);
            }
            self.pipes.insert(q, pipe);
            let mut subscriptions = Vec::new();
            if let Some(d) = self.sockets.get_mut(&dialler_sock) {
                match d.kind {
                    SocketKind::Router => {
                        d.routes.entry(acceptor_id.clone()).or_insert(dialler);
                    }
                    SocketKind::Sub => subscriptions = d.subscriptions.clone(),
                    SocketKind::Dealer | SocketKind::Pub | SocketKind::Publisher => {}
                }
                if let Some(p) = self.pipes.get_mut(&dialler) {
                    if d.kind == SocketKind::Router && p.inq.len() < hwm {
                        p.inq.push_back(vec![Bytes::new()]);
                    }
                    p.peer_id = Some(acceptor_id);
                    // The subscriptions go first, as libzmq sends them when a pipe attaches.
                    for prefix in subscriptions.into_iter().rev() {
                        p.out.push_front(Msg::Subscribe(prefix));
                    }
                    if let Some(dial) = p.dial.as_mut() {
                        dial.ivl = RECONNECT_IVL;
                    }
                }
            }
            if let Some(c) = self.conns.get_mut(&id) {
                c.acceptor = Some(q);
                c.phase = Phase::Live;
            }
            self.emit(dialler_sock, SocketEvent::HandshakeSucceeded);
            self.emit(acceptor_sock, SocketEvent::HandshakeSucceeded);
        }
        ready.len()
    }

    /// The routing id a socket's peers know it by: the one it set, else one made up.
    fn routing_id_of(&mut self, sock: u64) -> Vec<u8> {
        if let Some(id) = self.sockets.get(&sock).and_then(|s| s.routing_id.clone()) {
            return id;
        }
        let n = self.next_routing;
        self.next_routing = self.next_routing.wrapping_add(1);
        let mut id = vec![0];
        id.extend_from_slice(&n.to_be_bytes());
        id
    }

    /// Dial attempts that are due: accepted by the socket bound to the endpoint, or failed
    /// and retried later.
    fn attempt_dials(&mut self) -> usize {
        let now = self.now;
        let due: Vec<(u64, u64, String)> = self
            .pipes
            .iter()
            .filter(|(_, p)| self.sockets.contains_key(&p.sock))
            .filter_map(|(&id, p)| {
                let d = p.dial.as_ref()?;
                (d.attempt_at? <= now).then(|| (id, p.sock, d.endpoint.clone()))
            })
            .collect();
        for (pipe, sock, endpoint) in &due {
            let conn = self.fresh_conn();
            let acceptor = self.bound.get(endpoint).copied();
            let Some(p) = self.pipes.get_mut(pipe) else {
                continue;
            };
            let Some(d) = p.dial.as_mut() else {
                continue;
            };
            match acceptor {
                Some(acceptor_sock) => {
                    d.attempt_at = None;
                    p.conn = Some(conn);
                    self.conns.insert(
                        conn,
                        Conn {
                            dialler: *pipe,
                            acceptor_sock,
                            acceptor: None,
                            phase: Phase::Accepted,
                        },
                    );
                    self.emit(acceptor_sock, SocketEvent::Accepted { conn });
                }
                None => {
                    d.attempt_at = Some(now + d.ivl);
                    d.ivl = (d.ivl * 2).min(RECONNECT_IVL_MAX);
                    self.emit(*sock, SocketEvent::Disconnected { conn });
                    self.emit(*sock, SocketEvent::ConnectRetried);
                }
            }
        }
        due.len()
    }

    /// Moves records along every open connection, each way, as far as the receiving pipe
    /// has room; what goes to a closed socket is dropped.
    fn transfer(&mut self) -> usize {
        let mut moved = 0;
        let conns: Vec<(u32, u64, u64, Phase)> = self
            .conns
            .iter()
            .filter_map(|(&id, c)| Some((id, c.dialler, c.acceptor?, c.phase)))
            .collect();
        for (_, dialler, acceptor, phase) in conns {
            let (from_dialler, from_acceptor) = match phase {
                Phase::Live => (true, true),
                Phase::Draining { closer, .. } => {
                    (closer == Side::Dialler, closer == Side::Acceptor)
                }
                Phase::Accepted | Phase::Ending { .. } => (false, false),
            };
            if from_dialler {
                moved += self.move_records(dialler, acceptor);
            }
            if from_acceptor {
                moved += self.move_records(acceptor, dialler);
            }
        }
        moved
    }

    /// Moves records from pipe `from`'s outgoing queue to pipe `to`'s incoming one.
    fn move_records(&mut self, from: u64, to: u64) -> usize {
        let hwm = self.hwm;
        let Some(to_sock) = self.pipes.get(&to).map(|p| p.sock) else {
            return 0;
        };
        let (open, sub_filter, publisher) = match self.sockets.get(&to_sock) {
            Some(s) => (
                true,
                (s.kind == SocketKind::Sub).then(|| s.subscriptions.clone()),
                s.kind == SocketKind::Publisher,
            ),
            None => (false, None, false),
        };
        let mut moved = 0;
        loop {
            let room = self.pipes.get(&to).is_some_and(|p| p.inq.len() < hwm);
            let Some(from_pipe) = self.pipes.get_mut(&from) else {
                break;
            };
            let head_is_record = matches!(from_pipe.out.front(), Some(Msg::Record(_)));
            if head_is_record && open && !room {
                break;
            }
            let Some(msg) = from_pipe.out.pop_front() else {
                break;
            };
            moved += 1;
            let Some(to_pipe) = self.pipes.get_mut(&to) else {
                continue;
            };
            if !open || to_pipe.duplicate {
                continue;
            }
            match msg {
                // The node reads it and applies it (`apply_subscription`).
                Msg::Subscribe(prefix) if publisher => {
                    let mut message = vec![1];
                    message.extend_from_slice(&prefix);
                    to_pipe.inq.push_back(vec![Bytes::from(message)]);
                }
                Msg::Subscribe(prefix) => to_pipe.filter.push(prefix),
                Msg::Record(record) => {
                    let wanted = match (&sub_filter, record.first()) {
                        (Some(prefixes), Some(topic)) => {
                            prefixes.iter().any(|p| topic.starts_with(p))
                        }
                        _ => true,
                    };
                    if wanted {
                        to_pipe.inq.push_back(record);
                    }
                }
            }
        }
        moved
    }

    /// Draining connections whose closed side has sent everything, or whose linger is over,
    /// end (the peer hears of it next round).
    fn finish_draining(&mut self) -> usize {
        let now = self.now;
        let mut finished = 0;
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for id in ids {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            let Phase::Draining { closer, until } = c.phase else {
                continue;
            };
            let own = match closer {
                Side::Dialler => Some(c.dialler),
                Side::Acceptor => c.acceptor,
            };
            let empty = own
                .and_then(|p| self.pipes.get(&p))
                .is_none_or(|p| p.out.is_empty());
            if empty || now >= until {
                if let Some(p) = own.and_then(|p| self.pipes.get_mut(&p)) {
                    p.out.clear();
                }
                if let Some(c) = self.conns.get_mut(&id) {
                    c.phase = Phase::Ending { closer };
                }
                finished += 1;
            }
        }
        finished
    }

    /// Drops the pipes of closed sockets that no connection uses any more.
    fn collect_pipes(&mut self) {
        let used: std::collections::BTreeSet<u64> = self
            .conns
            .values()
            .flat_map(|c| [Some(c.dialler), c.acceptor])
            .flatten()
            .collect();
        let sockets = &self.sockets;
        self.pipes
            .retain(|id, p| sockets.contains_key(&p.sock) || used.contains(id));
    }
}

impl Pipe {
    fn new(sock: u64) -> Pipe {
        Pipe {
            sock,
            out: VecDeque::new(),
            inq: VecDeque::new(),
            peer_id: None,
            filter: Vec::new(),
            conn: None,
            dial: None,
            ended: false,
            duplicate: false,
        }
    }
}

/// An endpoint is `scheme://address`, as libzmq's.
fn valid(endpoint: &str) -> Result<(), SimError> {
    match endpoint.split_once("://") {
        Some((scheme, address)) if !scheme.is_empty() && !address.is_empty() => Ok(()),
        _ => Err(SimError::InvalidEndpoint(endpoint.to_owned())),
    }
}
