//! The transport: every socket operation a node performs, as traits of ours, so that the same
//! shell can run over libzmq or over a simulated network.
//!
//! Three traits name what a node asks of the network:
//!
//! - [`Transport`] makes a socket of a [`SocketKind`] for a [`SocketRole`], with the options
//!   zmesh sets for that role, and its monitor ([`Opened`]).
//! - [`TransportSocket`] is one socket: it takes a routing id, binds, connects, subscribes,
//!   sends one multipart record without blocking ([`SocketSendError`] says why not), receives
//!   one without blocking, and says whether it has input and what a poller waits on for it
//!   (its readiness, opaque here: libzmq's `ZMQ_FD`, the simulator's socket id). Closing is
//!   dropping it ([`TransportSocket::close`]).
//! - [`TransportMonitor`] reports the socket's connection events ([`SocketEvent`]), as
//!   libzmq's socket monitor reports them.
//!
//! Implementations: libzmq ([`crate::runtime::socket::Sockets`] makes
//! [`ZmqSocket`](crate::runtime::socket::ZmqSocket)s and
//! [`MonitorSocket`](crate::runtime::socket::MonitorSocket)s; the node's I/O thread uses them),
//! and the in-memory network of the `zmesh-sim` crate (`zmesh_sim::transport`). One contract
//! suite, `tests/transport/contract.rs`, is written once over these traits and run against
//! both.
//!
//! Everything here is static dispatch: the shell names the implementation's socket type, and
//! a send or receive through the trait compiles to the implementation's own call.
//!
//! # The contract
//! What the protocol relies on, which every implementation provides (libzmq 4.3 behaviour with
//! zmesh's options, `runtime::socket`; ../shared/LIBZMQ-NOTES.md):
//!
//! - **Routing ids.** A ROUTER's received record starts with the routing id of the peer it came
//!   from; a record it sends starts with the routing id of the peer it goes to. A peer's
//!   routing id is the one it set ([`TransportSocket::set_routing_id`]) before it connected or
//!   bound. A ROUTER that dials another ROUTER cannot send to it until their handshake is
//!   done. An unknown routing id fails the send at once ([`SocketSendError::Unreachable`],
//!   libzmq's `EHOSTUNREACH` under `ROUTER_MANDATORY`); nothing is queued. On a bound
//!   ROUTER, the id of a connection that ended is unknown at once, while the records it sent
//!   are still readable.
//! - **Dialled pipes.** A dialled socket's pipe is made when it connects and outlives its
//!   connections: a DEALER queues records before its handshake and while disconnected, a
//!   dialled ROUTER keeps routing to its peer's id; they leave on the next connection. A dial
//!   that finds nobody, or a connection that ends, is dialled again after the reconnect
//!   interval.
//! - **Order.** Records on one connection arrive in the order they were sent, each once;
//!   records of different connections have no order between them.
//! - **High-water marks.** A ROUTER or DEALER whose pipe to the peer is full fails the send at
//!   once ([`SocketSendError::Full`], `EAGAIN`); nothing is queued. A PUB never blocks and
//!   never fails for a full pipe: the record is dropped for that subscriber alone, and what
//!   reaches a subscriber is still in order.
//! - **Subscriptions.** A SUB receives the records whose first frame starts with one of the
//!   prefixes it subscribed to; the empty prefix takes everything. A subscription takes
//!   effect once it reached the publisher, after the connection's handshake; at a
//!   [`SocketKind::Publisher`], once the node read it and applied it
//!   ([`TransportSocket::apply_subscription`]), and not before.
//! - **Connection notices in band.** A ROUTER made for either role names each connection's
//!   attach and loss in its record stream (`ROUTER_NOTIFY`): a record of the connection's
//!   routing id and one empty frame, the attach before any record of the connection, the loss
//!   after its last one. The two read the same; [`RouterNotices`] tells them apart and makes
//!   them [`SocketEvent::PeerConnected`] and [`SocketEvent::PeerDisconnected`]. A loss notice
//!   that finds the connection's pipe full is dropped (libzmq does so).
//! - **Monitor events.** A dialled socket's monitor reports
//!   [`SocketEvent::HandshakeSucceeded`] when its connection can carry records and
//!   [`SocketEvent::Disconnected`] when it is lost; a dialled ROUTER or DEALER's monitor
//!   reports [`SocketEvent::Stopped`] last, once the closed socket is gone (its own close adds
//!   no other event). A failed dial, and a lost connection after its
//!   [`SocketEvent::Disconnected`], report [`SocketEvent::ConnectRetried`]. A bound socket's
//!   monitor reports [`SocketEvent::Accepted`] and then [`SocketEvent::HandshakeSucceeded`]
//!   for each connection, and [`SocketEvent::Disconnected`] under the accept's handle when it
//!   ends; it does not say which routing id a connection has (the in-band notices do).
//! - **Stopping a monitor.** A monitor stopped while its socket stays open
//!   ([`Transport::stop_monitor`]) hands back the events raised before the stop and reports
//!   nothing after it. A close watch attached to that socket later
//!   ([`Transport::watch_close`]) reports [`SocketEvent::Stopped`] when the socket is closed
//!   and gone, and nothing else: not the loss of its connection, nor a retried dial.
//! - **Security.** A socket made a CURVE server ([`TransportSocket::secure_server`]) before
//!   it binds accepts only connections that complete a CurveZMQ handshake, in which the
//!   client proves the key it presents; a CURVE client ([`TransportSocket::secure_client`])
//!   completes a handshake only with a server that holds the secret key of the public key it
//!   was given. An implementation that does not model security (the simulated network)
//!   accepts both calls, records them, and connects as without them.

use std::collections::HashSet;

use crate::proto::security::PublicKey;
use crate::proto::transport::MonitorEvent;
use crate::runtime::security::KeyPair;

/// A kind of socket zmesh uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketKind {
    /// Routes by routing id: a RouteMesh lane (both sides) and a ClientServer server.
    Router,
    /// One peer, no routing id: a ClientServer client.
    Dealer,
    /// Sends every record to each subscriber whose subscriptions match it: a fanout
    /// publisher.
    Pub,
    /// Receives what it subscribed to from a publisher: a fanout subscription.
    Sub,
    /// A [`SocketKind::Pub`] that hands each subscription to the node instead of applying
    /// it: the node reads it ([`TransportSocket::try_recv`]: one frame, `1` or `0` for
    /// subscribe or cancel, then the prefix) and applies it to the connection that sent it
    /// ([`TransportSocket::apply_subscription`]): the node's publisher (libzmq: an XPUB in
    /// manual mode).
    Publisher,
}

/// What a socket is for; the options zmesh sets follow from it (`runtime::socket` lists
/// them for libzmq).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketRole<'a> {
    /// Binds an endpoint that peers dial; shared by the connections it accepts. Flushes what
    /// it queued for a short while when closed. `domain` names the socket to the transport's
    /// admission of new connections ([`Transport::admission`]; libzmq: the ZAP domain); with
    /// none, its connections are not put to the admission.
    Bound {
        /// The name the transport's admission knows the socket by, if it admits for it.
        domain: Option<&'a str>,
    },
    /// Dials one endpoint and holds one connection to it. Drops what is queued when closed
    /// (a closed dialled socket's connection is dead or being replaced).
    Dialled,
}

/// A socket and its monitor, as [`Transport::socket`] makes them.
#[derive(Debug)]
pub struct Opened<S, M> {
    /// The socket.
    pub socket: S,
    /// Its monitor (its connection events).
    pub monitor: M,
}

/// Why a send did not happen. Either way nothing was queued.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SocketSendError<E> {
    /// The pipe is full (high-water mark): the link cannot take the record now.
    #[error("pipe full (high-water mark)")]
    Full,
    /// The peer (routing id) is not connected on this socket.
    #[error("peer not connected")]
    Unreachable,
    /// The socket failed for another reason.
    #[error("socket error: {0}")]
    Other(E),
}

/// A connection event of a socket: what libzmq's socket monitor reports (the events zmesh
/// asks it for), and a ROUTER's in-band connection notices ([`RouterNotices`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SocketEvent {
    /// A bound socket accepted connection `conn` (its transport handshake starts).
    Accepted {
        /// The transport's handle of the connection (libzmq: its file descriptor), the same
        /// in its [`SocketEvent::Disconnected`].
        conn: u32,
    },
    /// A connection's transport handshake completed: it can carry records.
    HandshakeSucceeded,
    /// A connection's transport handshake failed: not ZMTP, a mechanism mismatch, the
    /// handshake deadline ([`crate::proto::security::HandshakeFailure::of`] reads `code`).
    HandshakeFailed {
        /// libzmq's value: an `errno` or a ZMTP protocol error code.
        code: u32,
    },
    /// The security handshake failed: the peer's ZAP handler refused this socket, or this
    /// socket's refused the peer.
    AuthFailed {
        /// The ZAP status code (400, 500).
        status: u32,
    },
    /// A dial attempt failed; the transport tries again after its reconnect interval.
    ConnectRetried,
    /// Connection `conn` is gone (closed by either side, or failed).
    Disconnected {
        /// The transport's handle of the connection (libzmq: its file descriptor).
        conn: u32,
    },
    /// The closed socket is gone and its monitor stopped: the last event a monitor reports
    /// (dialled ROUTER and DEALER sockets only).
    Stopped,
    /// A ROUTER's connection with routing id `routing_id` attached (its handshake is done).
    PeerConnected {
        /// The peer's routing id.
        routing_id: Vec<u8>,
    },
    /// A ROUTER's connection with routing id `routing_id` is gone, after its last record.
    PeerDisconnected {
        /// The peer's routing id.
        routing_id: Vec<u8>,
    },
    /// Any other libzmq monitor event: its event number and value.
    Other {
        /// libzmq's event number (`ZMQ_EVENT_*`).
        raw: u16,
        /// The event's value.
        value: u32,
    },
}

impl SocketEvent {
    /// The event as the sans-IO core judges it ([`crate::proto::transport::judge_monitor_event`])
    /// with the value it reads; `None` for the in-band notices, which are not monitor events.
    pub fn monitor_event(&self) -> Option<(MonitorEvent, u32)> {
        Some(match *self {
            SocketEvent::Accepted { conn } => (MonitorEvent::Accepted, conn),
            SocketEvent::HandshakeSucceeded => (MonitorEvent::HandshakeSucceeded, 0),
            SocketEvent::HandshakeFailed { code } => (MonitorEvent::HandshakeFailed, code),
            SocketEvent::AuthFailed { status } => (MonitorEvent::AuthFailed, status),
            SocketEvent::ConnectRetried => (MonitorEvent::ConnectFailed, 0),
            SocketEvent::Disconnected { conn } => (MonitorEvent::Disconnected, conn),
            SocketEvent::Stopped => (MonitorEvent::Stopped, 0),
            SocketEvent::Other { raw, value } => (MonitorEvent::Other(raw), value),
            SocketEvent::PeerConnected { .. } | SocketEvent::PeerDisconnected { .. } => {
                return None
            }
        })
    }
}

/// What a transport's operations fail with: an error that says whether it is the node
/// running out of descriptors (or of the transport's own socket slots), which the node
/// reports as a named failure with its figures (`runtime::fds`) and retries with its backoff.
pub trait SocketError: std::error::Error + 'static {
    /// Whether the operation failed for want of a file descriptor or a socket slot (libzmq:
    /// `EMFILE`, which the socket layer also reports for the system's file table, `ENFILE`).
    fn is_out_of_descriptors(&self) -> bool;
}

/// Makes sockets. One per node (libzmq: the node's contexts); its sockets may outlive
/// borrows of it.
pub trait Transport {
    /// The sockets it makes.
    type Socket: TransportSocket;
    /// Their monitors.
    type Monitor: TransportMonitor<
        Readiness = <Self::Socket as TransportSocket>::Readiness,
        Error = <Self::Socket as TransportSocket>::Error,
    >;
    /// What a socket whose monitor was stopped keeps, to have its close watched
    /// ([`Transport::stop_monitor`], [`Transport::watch_close`]); libzmq: the room the socket
    /// and its monitor take in their context.
    type Room;

    /// A new socket of `kind` for `role`, with the options zmesh sets, and its monitor. It
    /// has no routing id, endpoint or subscription yet.
    #[allow(clippy::type_complexity)]
    fn socket(
        &mut self,
        kind: SocketKind,
        role: SocketRole<'_>,
    ) -> Result<Opened<Self::Socket, Self::Monitor>, <Self::Socket as TransportSocket>::Error>;

    /// Closes `socket`, whose close nobody waits to see confirmed (a bound or SUB socket),
    /// after stopping its `monitor`: the transport raises no event for it any more. Returns
    /// the events raised before the stop, in order.
    ///
    /// A socket whose close must be confirmed (a dialled ROUTER or DEALER, before its
    /// replacement is dialled: MISSION F3) is closed with [`TransportSocket::close`] instead,
    /// and its monitor kept until it reported [`SocketEvent::Stopped`]. libzmq needs one or
    /// the other: it publishes a socket's events with a blocking send, and a monitor dropped
    /// while its socket can still raise one stops a libzmq thread for good
    /// (`runtime::socket::MonitorSocket`).
    fn close_stopping_monitor(socket: Self::Socket, monitor: Self::Monitor) -> Vec<SocketEvent>;

    /// The transport's admission of new connections to its bound sockets: a socket on which
    /// the transport asks, for each connection a bound socket accepts, whether it may carry
    /// records, and the node answers each request on the same socket (libzmq: the ZAP
    /// handler, a ROUTER at `inproc://zeromq.zap.01`; its requests and replies are ZAP's,
    /// [`crate::proto::security::ZapRequest`]). A request names the socket by the `domain` of
    /// its [`SocketRole::Bound`]. Made once, before the bound sockets it admits for; until
    /// then, and without it, bound sockets admit every connection. A transport that does not
    /// model admission gives a socket on which no request ever arrives.
    fn admission(&mut self) -> Result<Self::Socket, <Self::Socket as TransportSocket>::Error>;

    /// Stops `monitor`, the monitor of `socket`, which stays open: the transport raises no
    /// event for it any more (a dialled ROUTER learns of its connection's loss in band once
    /// its handshake is done, [`RouterNotices`]). Returns the events raised before the stop,
    /// in order, still to be acted on, and what the socket keeps to have its close watched
    /// later ([`Transport::watch_close`]). If the transport refuses, the monitor runs on and
    /// comes back with the error.
    #[allow(clippy::type_complexity, clippy::result_large_err)]
    fn stop_monitor(
        socket: &Self::Socket,
        monitor: Self::Monitor,
    ) -> Result<
        (Vec<SocketEvent>, Self::Room),
        (<Self::Socket as TransportSocket>::Error, Self::Monitor),
    >;

    /// A monitor of `socket`, whose monitor was stopped ([`Transport::stop_monitor`] gave
    /// `room`), that reports the socket's close alone ([`SocketEvent::Stopped`], once the
    /// closed socket is gone): attached right before a dialled socket is closed, so that its
    /// close is confirmed before a replacement is dialled (MISSION F3), as for a socket that
    /// kept its monitor. On error `room` is given up and the close goes unconfirmed.
    fn watch_close(
        &self,
        socket: &Self::Socket,
        room: Self::Room,
    ) -> Result<Self::Monitor, <Self::Socket as TransportSocket>::Error>;
}

/// One socket. Every operation returns at once; none blocks.
pub trait TransportSocket {
    /// A received frame.
    type Frame: AsRef<[u8]>;
    /// What an operation fails with.
    type Error: SocketError;
    /// What a poller waits on for this socket (libzmq: its `ZMQ_FD`).
    type Readiness;

    /// Sets the routing id the socket's peers know it by; before it binds or connects.
    fn set_routing_id(&self, id: &[u8]) -> Result<(), Self::Error>;

    /// Binds `endpoint`; returns the endpoint bound, with a wildcard (`tcp://127.0.0.1:*`)
    /// resolved, else `endpoint` itself.
    fn bind(&self, endpoint: &str) -> Result<String, Self::Error>;

    /// Dials `endpoint`. The connection comes later (its monitor reports it); a dial to an
    /// endpoint nobody binds yet is retried.
    fn connect(&self, endpoint: &str) -> Result<(), Self::Error>;

    /// Makes the socket a CURVE server with `pair`'s keys; before it binds. Every connection
    /// must complete a CurveZMQ handshake in which the client proves it holds the secret key
    /// of the public key it presents (the transport's admission then decides whether that key
    /// is allowed).
    fn secure_server(&self, pair: &KeyPair) -> Result<(), Self::Error>;

    /// Makes the socket a CURVE client with `pair`'s keys that accepts only a server holding
    /// the secret key of `server`; before it connects. A server with another key cannot
    /// complete the handshake, so nothing it sends is ever read.
    fn secure_client(&self, pair: &KeyPair, server: &PublicKey) -> Result<(), Self::Error>;

    /// A SUB socket's subscription to records whose first frame starts with `prefix`.
    fn subscribe(&self, prefix: &[u8]) -> Result<(), Self::Error>;

    /// A [`SocketKind::Publisher`]'s application of the subscription it received last (or
    /// its cancel, `subscribe` false) to the connection that sent it: from now on that
    /// connection gets the records whose first frame starts with `prefix`.
    fn apply_subscription(&self, subscribe: bool, prefix: &[u8]) -> Result<(), Self::Error>;

    /// Sends one record (every frame of it, a ROUTER's routing id first) without blocking;
    /// all of it is queued or none.
    fn send(&self, frames: &[&[u8]]) -> Result<(), SocketSendError<Self::Error>>;

    /// Receives one whole record (a ROUTER's routing id first) without blocking; `Ok(None)`
    /// when none is queued.
    fn try_recv(&self) -> Result<Option<Vec<Self::Frame>>, Self::Error>;

    /// Whether a record can be received now.
    fn has_input(&self) -> bool;

    /// What a poller waits on for this socket. libzmq's descriptor is edge-like: after any
    /// operation on the socket, [`TransportSocket::has_input`] must be asked before waiting.
    fn readiness(&self) -> Result<Self::Readiness, Self::Error>;

    /// Makes the close flush what is queued for a short while (what a bound socket does
    /// already); for a dialled socket whose last records must leave, such as a CLOSE when the
    /// node stops.
    fn linger_on_close(&self) -> Result<(), Self::Error>;

    /// Closes the socket: its connections end (their peers' monitors report
    /// [`SocketEvent::Disconnected`]). Its monitor is kept until it reported
    /// [`SocketEvent::Stopped`], or stopped first ([`Transport::close_stopping_monitor`]).
    fn close(self)
    where
        Self: Sized,
    {
        drop(self);
    }
}

/// The events of one socket, in the order the transport raised them.
pub trait TransportMonitor {
    /// What an operation fails with.
    type Error: SocketError;
    /// What a poller waits on for this monitor.
    type Readiness;

    /// The next event, if one is queued (malformed ones are skipped).
    fn try_event(&self) -> Option<SocketEvent>;

    /// Whether an event is queued.
    fn has_event(&self) -> bool;

    /// What a poller waits on for this monitor (edge-like, as
    /// [`TransportSocket::readiness`]).
    fn readiness(&self) -> Result<Self::Readiness, Self::Error>;

    /// Reads every queued event and says whether one was [`SocketEvent::Stopped`]: the
    /// confirmation that the closed socket is gone, after which the monitor reports nothing
    /// and may be dropped. The other events, of the connection that was closed, are read and
    /// ignored.
    fn close_confirmed(&self) -> bool {
        let mut stopped = false;
        while let Some(event) = self.try_event() {
            stopped |= event == SocketEvent::Stopped;
        }
        stopped
    }
}

/// Tells a ROUTER's in-band connection notices apart (see the module's contract): the first
/// notice of a routing id is its attach, the next its loss, after which the id may attach
/// again. Holds the routing ids attached now.
///
/// A loss notice the transport dropped (its pipe was full) makes the next notice of that
/// routing id, the attach of a new connection, read as a loss; the node's own tables make
/// up for that (`runtime::io`, the disconnect sweep).
#[derive(Debug, Default)]
pub struct RouterNotices {
    attached: HashSet<Vec<u8>>,
}

impl RouterNotices {
    /// Whether `record`, as a ROUTER received it, is a connection notice: a routing id and
    /// one empty frame (no record of zmesh's is empty: each has an envelope).
    pub fn is_notice<F: AsRef<[u8]>>(record: &[F]) -> bool {
        matches!(record, [_, only] if only.as_ref().is_empty())
    }

    /// The event `record` stands for if it is a notice ([`RouterNotices::is_notice`]);
    /// `None` for any other record.
    pub fn classify<F: AsRef<[u8]>>(&mut self, record: &[F]) -> Option<SocketEvent> {
        if !Self::is_notice(record) {
            return None;
        }
        let routing_id = record.first()?.as_ref().to_vec();
        Some(if self.attached.remove(&routing_id) {
            SocketEvent::PeerDisconnected { routing_id }
        } else {
            self.attached.insert(routing_id.clone());
            SocketEvent::PeerConnected { routing_id }
        })
    }

    /// Whether `routing_id` is attached now.
    pub fn is_attached(&self, routing_id: &[u8]) -> bool {
        self.attached.contains(routing_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routing_ids_first_notice_is_its_attach_and_the_next_its_loss() {
        let mut n = RouterNotices::default();
        let notice: [&[u8]; 2] = [b"peer", b""];
        assert_eq!(
            n.classify(&notice),
            Some(SocketEvent::PeerConnected {
                routing_id: b"peer".to_vec()
            })
        );
        assert!(n.is_attached(b"peer"));
        // A record of the peer is no notice and changes nothing.
        let record: [&[u8]; 3] = [b"peer", b"env", b""];
        assert_eq!(n.classify(&record), None);
        assert_eq!(n.classify(&[&b"peer"[..], b"x"]), None);
        assert_eq!(
            n.classify(&notice),
            Some(SocketEvent::PeerDisconnected {
                routing_id: b"peer".to_vec()
            })
        );
        assert!(!n.is_attached(b"peer"));
        // The id may attach again.
        assert!(matches!(
            n.classify(&notice),
            Some(SocketEvent::PeerConnected { .. })
        ));
    }

    #[test]
    fn notices_are_not_monitor_events_and_the_rest_keep_their_values() {
        assert_eq!(
            SocketEvent::PeerConnected {
                routing_id: vec![1]
            }
            .monitor_event(),
            None
        );
        assert_eq!(
            SocketEvent::Disconnected { conn: 7 }.monitor_event(),
            Some((MonitorEvent::Disconnected, 7))
        );
        assert_eq!(
            SocketEvent::AuthFailed { status: 400 }.monitor_event(),
            Some((MonitorEvent::AuthFailed, 400))
        );
        assert_eq!(
            SocketEvent::Other { raw: 1, value: 3 }.monitor_event(),
            Some((MonitorEvent::Other(1), 3))
        );
    }
}
