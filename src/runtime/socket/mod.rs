//! The socket layer: the libzmq implementation of the transport ([`crate::runtime::transport`]).
//!
//! [`Sockets`] is the [`Transport`](crate::runtime::transport::Transport): it makes sockets
//! with the options zmesh relies on, spread over libzmq contexts, each with its monitor
//! ([`MonitorSocket`]). A socket it makes for the node (its links, subscriptions, publisher
//! and ZAP handler) is a [`ZmqSocket`], the
//! [`TransportSocket`](crate::runtime::transport::TransportSocket) over a `zmq::Socket`;
//! [`FrameSocket`] is the primitive under it (send and receive whole multipart records, never
//! blocking), implemented for any `zmq::Socket`, so that the sockets outside the transport's
//! kinds (the monitors' PAIRs) use the same code. The options are set deliberately:
//!
//! - `LINGER = 0` on dialled sockets: a socket is closed only when its connection is dead or
//!   being replaced; anything still queued belongs to a connection that is no longer current, and
//!   waiting for it would delay the close that a replacement must observe (MISSION F3). Bound
//!   sockets and the publisher use a short linger (see [`CLOSE_LINGER_MS`]) so an orderly
//!   shutdown flushes its CLOSE records.
//! - `ROUTER_MANDATORY = 1` on every ROUTER: an unknown peer or a full pipe is an error at send
//!   time (`EHOSTUNREACH` / `EAGAIN` with `DONTWAIT`), never a silent drop. This is the basis of
//!   "a frame is never queued on a link that cannot send now" (MISSION C3).
//! - `SNDHWM`/`RCVHWM` = [`HWM`]: bounded queues per pipe; a full pipe fails the send at once.
//! - `RECONNECT_IVL` = 100 ms, `RECONNECT_IVL_MAX` = 1 s on dialled ROUTER/DEALER and SUB
//!   sockets: libzmq itself retries a dial whose peer is not there yet, so a link waits for
//!   its peer to bind without redials of its own. A connection that was up is never resumed
//!   that way: its loss fails the link at once (the monitor's disconnect, or a dialled
//!   ROUTER's second in-band notice, which is also what a reconnection libzmq made on its own
//!   looks like), and zmesh closes the socket and dials a fresh one (fresh routing id, fresh
//!   handshake) after its own backoff (MISSION F4).
//! - Every context [`Sockets`] opens for dialled sockets holds up to [`MAX_SOCKETS`] sockets
//!   (libzmq's `ZMQ_MAX_SOCKETS`, 1023 by default; `vendor/zmq` adds the call), so one
//!   context, with its two libzmq threads and five descriptors, serves some 10 000 dialled
//!   connections (with 1023 a node opened one per 300, 34 contexts and 68 threads
//!   at 10 000).
//!   Beyond that [`Sockets`] spreads sockets over as many contexts as needed
//!   ([`SOCKETS_PER_CONTEXT`] each); tcp and ipc endpoints do not care which context a socket
//!   lives in, and a monitor's inproc pair is created in its socket's own context. A
//!   monitored socket's room is given back when its monitor is dropped, so a node that redials
//!   often keeps reusing the contexts it has instead of opening new ones (each context runs
//!   two libzmq threads), and a context left without sockets is let go (see [`Sockets`]).
//! - A context is opened only if the process has descriptors to spare for it
//!   ([`CONTEXT_HEADROOM`]), and a context libzmq could not create is never used: libzmq
//!   aborts the process when it cannot create a context's pollers, and `zmq_ctx_new` failing
//!   for want of a descriptor left the `zmq` crate a null context whose every socket failed
//!   with `EFAULT` ("Bad address"). Both are reported as `EMFILE`, which
//!   [`crate::runtime::fds::classify`] names with its figures.
//! - `MAXMSGSIZE` = the node's `max_frame_size` on every socket: libzmq reads a
//!   frame's length before the frame and closes the connection of a peer that announces a
//!   longer one, so an oversize frame costs no memory. libzmq reports that close only as a
//!   disconnect, without a reason.
//! - `HANDSHAKE_IVL` = [`HANDSHAKE_IVL_MS`] on every socket: a connection whose transport
//!   handshake (ZMTP greeting, security mechanism, ZAP) has not completed by then is closed by
//!   libzmq, on the accepting side too.
//! - `ZMQ_ZERO_COPY_RECV` = 0 on every context [`Sockets`] opens: libzmq reads a
//!   connection into one buffer it reuses and copies each message out (one allocation of the
//!   message's size). With zero-copy receive (libzmq's default) messages point into the
//!   buffer they were read into, and every read while one of them is still held (the receive
//!   pipe, a payload shared with the application) allocates a fresh buffer of about 18 KiB;
//!   P1 at 1 KiB spent 12-15 % more CPU per record that way, and a third more page faults
//!   (BENCHMARKS.md, "Send buffers handed back, receive buffers reused").
//! - Bound ROUTERs ([`Sockets::bound`]) live in the context of the node's ZAP handler
//!   ([`Sockets::zap_handler`]) and carry a ZAP domain, so every connection they accept is
//!   put to the I/O thread before it may carry a record (the unadmitted-connection cap, the
//!   CURVE allow-list); under CURVE the publisher too ([`Sockets::publisher`]).
//! - CURVE (`[security] mode = "curve"`): bound sockets are CURVE servers
//!   ([`set_curve_server`]), dialled and SUB sockets CURVE clients that name the key they
//!   expect of the server ([`set_curve_client`]); both set before bind / connect. The key a
//!   client proved reaches the I/O thread as the `User-Id` property of its frames
//!   ([`Frame::user_id`]).

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::runtime::transport::{self, SocketEvent, SocketKind, SocketRole};

mod send_buffers;
mod zmq_transport;

pub use zmq_transport::ZmqSocket;

/// Payload frames at least this long reach the application without a copy; shorter ones are
/// copied and libzmq's message is closed at once. Measured (P1, interleaved runs, when libzmq
/// still received into shared buffers): sharing saves CPU at 1 KiB, but at 64 B it cost more
/// CPU per record than the copy it saves, the message being released from the application's
/// thread.
pub const SHARE_MIN: usize = 512;
/// Send and receive high-water mark per pipe (records).
pub const HWM: i32 = 10_000;
/// Listen backlog of every socket that binds (libzmq's default is 100): connections a bound
/// endpoint holds before it accepts them. The kernel caps it at `net.core.somaxconn` (4 096
/// by default since Linux 5.4). With 100, peers dialling a node all at once (a restart, a
/// network back) overflowed the queue and waited for TCP's SYN retransmissions (1 s, 3 s,
/// 7 s ...): BENCHMARKS.md P7, 10 000 inbound connections.
pub const BACKLOG: i32 = 4_096;
/// Linger of bound sockets and publishers at close, so an orderly close flushes (ms).
pub const CLOSE_LINGER_MS: i32 = 200;
/// The most sockets a context of [`Sockets`] for dialled sockets may hold
/// (`ZMQ_MAX_SOCKETS`, set when the context is opened; libzmq's default is 1023, which the
/// ZAP handler's context keeps). libzmq sizes a context's slot table by it
/// (12 bytes a slot: about 390 KiB of memory, no descriptors).
pub const MAX_SOCKETS: i32 = 32_768;
/// Sockets placed in one libzmq context before a new context is opened: [`MAX_SOCKETS`] less
/// room for closed sockets libzmq's reaper has not freed yet. Monitors count too: a
/// monitored socket is three sockets of its context while its monitor is attached, and a
/// dialled RouteMesh lane keeps room for three so that its close monitor always fits.
pub const SOCKETS_PER_CONTEXT: usize = 32_000;
/// Sockets placed in a context whose `ZMQ_MAX_SOCKETS` stayed at libzmq's default of 1023.
const DEFAULT_ROOM: usize = 900;
pub use crate::proto::transport::MonitorEvent;
pub use crate::runtime::fds::{
    CONTEXT_HEADROOM, FDS_PER_CONTEXT, FDS_PER_DIALLED, FDS_PER_MONITORED,
};
/// libzmq's transport handshake deadline on every socket (ms): the 15 s of the dialler's
/// `HANDSHAKE_TIMEOUT`, so a connection that never completes ZMTP is closed on both sides.
pub const HANDSHAKE_IVL_MS: i32 = 15_000;
/// The endpoint libzmq sends ZAP requests to, in the context of the socket being connected.
pub const ZAP_ENDPOINT: &str = "inproc://zeromq.zap.01";

/// Why a send on a libzmq socket did not happen (the transport's [`transport::SocketSendError`]
/// with libzmq's error).
pub type SocketSendError = transport::SocketSendError<zmq::Error>;

/// One received frame, read in place: libzmq's own message, not a copy of it.
///
/// The last frame of a multi-frame record is the payload of every record kind that has one,
/// so [`FrameSocket::try_recv_frames`] makes it [`Frame::Shared`] when it is at least
/// [`SHARE_MIN`] bytes long: decoding then hands the payload to the application as a `Bytes`
/// that still owns libzmq's message, without a copy. Such a payload keeps that message alive
/// while it lives: its own allocation, as libzmq copies every received message out of its
/// read buffer (`ZMQ_ZERO_COPY_RECV` off, see the module docs).
#[derive(Debug)]
pub enum Frame {
    /// A message read from the socket, its bytes read where libzmq put them.
    Message(zmq::Message),
    /// A message behind a `Bytes` (reference-counted, shared without copying).
    Shared(Bytes),
}

impl Frame {
    /// The frame's bytes as a `Bytes`: shared without a copy if the frame is
    /// [`Frame::Shared`], copied otherwise.
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Frame::Message(m) => Bytes::copy_from_slice(m),
            Frame::Shared(b) => b.clone(),
        }
    }

    /// Makes the frame shareable: moves libzmq's message behind a `Bytes` (one allocation,
    /// no copy of the bytes).
    pub fn share(&mut self) {
        if let Frame::Message(m) = self {
            let m = std::mem::replace(m, zmq::Message::new());
            *self = Frame::Shared(Bytes::from_owner(OwnedMessage(m)));
        }
    }
}

impl Frame {
    /// The `User-Id` libzmq attached to this frame: what the ZAP handler answered for the
    /// connection it arrived on (zmesh: the Z85 public key of a CURVE client). Every frame
    /// read from the connection carries it; not the routing id a ROUTER prepends when it was
    /// prefetched by a `ZMQ_EVENTS` check (libzmq 4.3 attaches no properties to that one),
    /// and a [`Frame::Shared`] frame can no longer be asked.
    pub fn user_id(&mut self) -> Option<String> {
        match self {
            Frame::Message(m) => m.gets("User-Id").map(str::to_owned),
            Frame::Shared(_) => None,
        }
    }
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        match self {
            Frame::Message(m) => m,
            Frame::Shared(b) => b,
        }
    }
}

/// A `zmq::Message` as the owner of a `Bytes`: the message is closed when the last `Bytes`
/// sharing it is dropped, on whatever thread that happens (libzmq messages may move between
/// threads).
struct OwnedMessage(zmq::Message);

impl AsRef<[u8]> for OwnedMessage {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Sending and receiving whole records on a libzmq socket without blocking: the primitive
/// under [`ZmqSocket`]'s [`TransportSocket`](crate::runtime::transport::TransportSocket), and
/// what the sockets outside the transport's kinds use (the monitors' PAIRs).
pub trait FrameSocket {
    /// Sends one record (all frames) without blocking. libzmq's implementation sends a frame
    /// of 1 to 4 KiB from a recycled buffer (`send_buffers`), any other by copy.
    fn send_frames(&self, frames: &[&[u8]]) -> Result<(), SocketSendError>;
    /// Receives one whole record without blocking; `Ok(None)` when nothing is queued. The
    /// last frame of a record of two frames or more is [`Frame::Shared`] if it is at least
    /// [`SHARE_MIN`] bytes long.
    fn try_recv_frames(&self) -> Result<Option<Vec<Frame>>, zmq::Error> {
        self.try_recv_record(true)
    }
    /// As [`FrameSocket::try_recv_frames`]; with `share` false every frame stays a
    /// [`Frame::Message`], whose message properties ([`Frame::user_id`]) can still be read
    /// ([`share_last`] shares it later).
    fn try_recv_record(&self, share: bool) -> Result<Option<Vec<Frame>>, zmq::Error>;
}

/// Makes the last frame of `frames` (a whole record as received, routing id included)
/// [`Frame::Shared`] when the record has two frames or more and that frame is at least
/// [`SHARE_MIN`] bytes long: what [`FrameSocket::try_recv_frames`] does on receipt.
pub fn share_last(frames: &mut [Frame]) {
    if frames.len() >= 2 {
        if let Some(last) = frames.last_mut() {
            if last.as_ref().len() >= SHARE_MIN {
                last.share();
            }
        }
    }
}

impl FrameSocket for zmq::Socket {
    fn send_frames(&self, frames: &[&[u8]]) -> Result<(), SocketSendError> {
        let last = frames.len().saturating_sub(1);
        for (i, f) in frames.iter().enumerate() {
            let flags = zmq::DONTWAIT | if i < last { zmq::SNDMORE } else { 0 };
            if let Err(e) = self.send(send_buffers::message(f), flags) {
                // libzmq makes multipart sends atomic: a failure on the first frame queues
                // nothing, and later frames of an accepted message cannot fail with these.
                return Err(match e {
                    zmq::Error::EAGAIN => SocketSendError::Full,
                    zmq::Error::EHOSTUNREACH => SocketSendError::Unreachable,
                    other => SocketSendError::Other(other),
                });
            }
        }
        Ok(())
    }

    fn try_recv_record(&self, share: bool) -> Result<Option<Vec<Frame>>, zmq::Error> {
        // Messages rather than `recv_multipart`: no heap copy of every frame, and the "more"
        // flag is read from the message instead of a getsockopt per frame.
        let mut msg = zmq::Message::new();
        match self.recv(&mut msg, zmq::DONTWAIT) {
            Ok(()) => {}
            Err(zmq::Error::EAGAIN) => return Ok(None),
            Err(e) => return Err(e),
        }
        let mut frames = Vec::with_capacity(4);
        let mut more = msg.get_more();
        frames.push(Frame::Message(msg));
        while more {
            // libzmq delivers a multipart message whole: the rest is already queued.
            let mut msg = zmq::Message::new();
            self.recv(&mut msg, zmq::DONTWAIT)?;
            more = msg.get_more();
            frames.push(Frame::Message(msg));
        }
        if share {
            share_last(&mut frames);
        }
        Ok(Some(frames))
    }
}

/// Whether a libzmq socket has a message to read now, from its `ZMQ_EVENTS`. Reading the
/// option processes the socket's pending commands; an error counts as nothing to read.
pub(crate) fn has_input(socket: &zmq::Socket) -> bool {
    match socket.get_events() {
        Ok(ev) => ev.contains(zmq::POLLIN),
        Err(e) => {
            tracing::debug!(error = %e, "ZMQ_EVENTS not read");
            false
        }
    }
}

/// A socket with its monitor pair.
pub struct Monitored {
    /// The socket itself.
    pub socket: zmq::Socket,
    /// The PAIR socket receiving the socket's monitor events. It holds the room the three
    /// sockets take in their context: drop it after `socket`.
    pub monitor: MonitorSocket,
}

/// The PAIR socket that reads a monitored socket's events, holding the room that socket, the
/// PAIR libzmq publishes the events on and this PAIR take in their context; the room is given
/// back when this is dropped.
///
/// libzmq publishes a socket's events with a *blocking* send on its own PAIR, from whichever
/// libzmq thread raises the event: the reaper thread for `MONITOR_STOPPED` (sent from the
/// socket's destructor), an I/O thread for `CLOSED`/`DISCONNECTED`. If this PAIR is closed
/// first, that send finds no peer and waits for good, and the thread it blocks (for
/// `MONITOR_STOPPED` the context's reaper) serves nothing else until the context is
/// terminated: every socket closed in that context afterwards is never freed (its mailbox and
/// connections stay open; measured: every later dial left 5-8 descriptors behind). So the
/// monitor of a [`Sockets::dialled`] socket is dropped only after
/// [`MonitorSocket::close_confirmed`] said yes, i.e. after libzmq sent its last event.
///
/// By then libzmq has freed the closed socket's slot in its context too. (Closed in a tight
/// loop together with their sockets, about 450 monitored sockets exhausted a context's 1023
/// slots with libzmq 4.3.4; the slots were free again within a second.)
pub struct MonitorSocket {
    // Declared before the room: the socket is closed before its room is given back.
    socket: zmq::Socket,
    room: SocketRoom,
}

/// What [`MonitorSocket::stop`] leaves: the events (with their values) libzmq raised before
/// the stop, in order, and the room the socket keeps.
pub type Stopped = (Vec<(MonitorEvent, u32)>, SocketRoom);

/// The room a monitored socket takes in its libzmq context (three sockets: itself and the
/// two PAIRs of its monitor), held by the socket alone once its monitor is stopped
/// ([`MonitorSocket::stop`]), so that a monitor can be attached again in the same context
/// when the socket is closed ([`Sockets::close_monitor`]). Given back when dropped.
pub struct SocketRoom {
    ctx: zmq::Context,
    _lease: Lease,
}

impl MonitorSocket {
    /// Reads every event queued on this monitor without blocking and says whether libzmq
    /// reported the socket destroyed ([`MonitorEvent::Stopped`], sent by [`Sockets::dialled`]
    /// sockets only): the honest confirmation that a closed socket is gone, after which libzmq
    /// publishes nothing more and this monitor can be dropped safely. Other events (of the
    /// connection that was closed) are read and ignored.
    pub fn close_confirmed(&self) -> bool {
        transport::TransportMonitor::close_confirmed(self)
    }

    /// Stops the monitor of `watched`, the socket this PAIR reads the events of (a
    /// dialled RouteMesh ROUTER keeps no monitor once its handshake is done; it learns of its
    /// connection's loss in band, see [`Sockets::dialled`]). libzmq stops the monitor within
    /// the call (`MONITOR_STOPPED` last) and publishes nothing after it, so this PAIR is
    /// closed at once, without the wait a closed socket's monitor needs: returned are the
    /// events raised before the stop, still to be acted on, and the room, which the socket
    /// keeps. If libzmq refuses, the monitor runs on and comes back with the error.
    #[allow(clippy::result_large_err)]
    pub fn stop(self, watched: &zmq::Socket) -> Result<Stopped, (zmq::Error, MonitorSocket)> {
        let (events, room) = self.stop_with_events(watched)?;
        let events = events
            .iter()
            .filter_map(SocketEvent::monitor_event)
            .collect();
        Ok((events, room))
    }

    /// As [`MonitorSocket::stop`], with the events as the transport names them.
    #[allow(clippy::result_large_err)]
    pub fn stop_with_events(
        self,
        watched: &zmq::Socket,
    ) -> Result<(Vec<SocketEvent>, SocketRoom), (zmq::Error, MonitorSocket)> {
        if let Err(e) = watched.monitor_stop() {
            return Err((e, self));
        }
        let mut events = Vec::new();
        while let Some(ev) = transport::TransportMonitor::try_event(&self) {
            events.push(ev);
        }
        let MonitorSocket { socket, room } = self;
        drop(socket);
        Ok((events, room))
    }
}

impl Deref for MonitorSocket {
    type Target = zmq::Socket;

    fn deref(&self) -> &zmq::Socket {
        &self.socket
    }
}

/// Room held in one context by sockets still open; given back when dropped.
struct Lease {
    used: Arc<AtomicUsize>,
    n: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.used.fetch_sub(self.n, Ordering::Relaxed);
    }
}

/// One libzmq context and the room its open sockets take.
struct Room {
    ctx: zmq::Context,
    used: Arc<AtomicUsize>,
    /// Sockets placed in it at most.
    cap: usize,
}

impl Room {
    fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// How many contexts, each full for the moment (`EMFILE`), one socket creation passes over
/// before it reports the error.
const EMFILE_PASSES: usize = 4;

/// Creates sockets, spreading them over libzmq contexts.
///
/// A new socket goes to the first context with room; a new context is opened only when none
/// has room. Room is counted back when a monitored socket's [`MonitorSocket`] is dropped
/// (plain sockets keep theirs: they are the node's publisher, which lives as long as the
/// node). Contexts whose sockets are all closed are let go, except one kept for reuse, so
/// the number of contexts follows the number of open sockets, not the number ever opened.
///
/// libzmq frees a closed socket's slot a little later than `zmq_close` returns (its reaper
/// thread does it); [`SOCKETS_PER_CONTEXT`] stays below [`MAX_SOCKETS`] to leave room for
/// sockets being reaped, and a context that is full for that moment anyway (`EMFILE`) is
/// passed over for another one. Letting a context go terminates it (`zmq_ctx_term`) on the
/// caller's thread; every socket of it is closed by then and dialled sockets have
/// `LINGER = 0`, so that only waits for the reaper to finish.
pub struct Sockets {
    contexts: Vec<Room>,
    monitor_seq: AtomicU64,
    tag: u64,
    /// `MAXMSGSIZE` of every socket made from now on (-1: no limit).
    max_frame_size: i64,
    /// The context of the ZAP handler, where bound sockets are made.
    zap: Option<Room>,
    /// When a new context was last refused for want of descriptors: none is tried again
    /// for [`CONTEXT_RETRY`] (counting the descriptors costs a directory read).
    refused_at: Option<Instant>,
    /// Sockets placed in one context: [`SOCKETS_PER_CONTEXT`], fewer in unit tests that
    /// need a second context without opening thousands of sockets.
    per_context: usize,
}

/// How long after a context was refused for want of descriptors no new one is tried.
const CONTEXT_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

impl Sockets {
    /// A new socket factory; `tag` makes inproc monitor names unique per node.
    pub fn new(tag: u64) -> Sockets {
        Sockets {
            contexts: Vec::new(),
            monitor_seq: AtomicU64::new(0),
            tag,
            max_frame_size: -1,
            zap: None,
            refused_at: None,
            per_context: SOCKETS_PER_CONTEXT,
        }
    }

    /// A factory that places `per_context` sockets in one context (tests of the spreading).
    #[cfg(test)]
    fn with_per_context(tag: u64, per_context: usize) -> Sockets {
        Sockets {
            per_context,
            ..Sockets::new(tag)
        }
    }

    /// Sets `MAXMSGSIZE` (bytes) of every socket made from now on; `None` for no limit.
    pub fn set_max_frame_size(&mut self, max: Option<u64>) {
        self.max_frame_size = max.map_or(-1, |m| i64::try_from(m).unwrap_or(i64::MAX));
    }

    /// The node's ZAP handler: a ROUTER bound to [`ZAP_ENDPOINT`] in a context of its own,
    /// where [`Sockets::bound`] makes the bound sockets (libzmq asks the ZAP handler of the
    /// socket's own context). Made once; the caller answers its requests
    /// ([`crate::proto::security::ZapRequest`]). Its room is not given back.
    pub fn zap_handler(&mut self) -> Result<zmq::Socket, zmq::Error> {
        if self.zap.is_some() {
            return Err(zmq::Error::EADDRINUSE);
        }
        // A few sockets (the bound ones, the publisher): libzmq's default slot table.
        let (ctx, cap) = self.open_context(false)?;
        let room = Room {
            ctx,
            used: Arc::new(AtomicUsize::new(1)),
            cap,
        };
        let s = guarded(|| room.ctx.socket(zmq::ROUTER))?;
        s.set_linger(0)?;
        s.bind(ZAP_ENDPOINT)?;
        self.zap = Some(room);
        Ok(s)
    }

    /// A monitored ROUTER (or other `kind`) to bind, in the ZAP handler's context, whose
    /// monitor also reports accepted connections, with ZAP domain `domain`: every connection
    /// it accepts is put to the ZAP handler. Without a ZAP handler, as [`Sockets::monitored`].
    ///
    /// A ROUTER also names each connection's attach and loss in band: `ROUTER_NOTIFY` =
    /// connect | disconnect makes libzmq hand it an empty record from the connection's routing
    /// id once its handshake (security and ZAP included) is done, before any record of it, and
    /// one after its last record when it is lost. The monitor's disconnect event does not say
    /// which connection left; the notice does. libzmq drops a disconnect notice that finds the
    /// connection's pipe full (`HWM` records unread); the I/O thread's fallback for that is
    /// `IoThread::check_bound_disconnects`.
    pub fn bound(&mut self, kind: zmq::SocketType, domain: &str) -> Result<Monitored, zmq::Error> {
        self.bound_with(kind, domain, &|_| Ok(()))
    }

    /// As [`Sockets::bound`], with `setup` applied to the socket before its monitor starts.
    fn bound_with(
        &mut self,
        kind: zmq::SocketType,
        domain: &str,
        setup: Setup<'_>,
    ) -> Result<Monitored, zmq::Error> {
        let events = monitored_events() | zmq::SocketEvent::ACCEPTED.to_raw();
        let gated = self.zap.is_some();
        let setup = |s: &zmq::Socket| {
            if gated {
                s.set_zap_domain(domain)?;
            }
            set_notify(s, kind)?;
            setup(s)
        };
        match &self.zap {
            None => self.monitored_with(kind, events, &setup),
            Some(zap) => {
                zap.used.fetch_add(3, Ordering::Relaxed);
                let lease = Lease {
                    used: zap.used.clone(),
                    n: 3,
                };
                let ctx = zap.ctx.clone();
                self.monitored_in(&ctx, lease, kind, events, &setup)
            }
        }
    }

    /// The publisher's XPUB, monitored: its failed transport handshakes (garbage, another
    /// mechanism, a silent connection at the handshake deadline) are refusals like those of
    /// the bound ROUTERs. With `domain` (CURVE), as [`Sockets::bound`]: in the ZAP handler's
    /// context, every connection put to the handler (the allow-list). Without, a monitored
    /// socket that no ZAP handler sees.
    pub fn publisher(&mut self, domain: Option<&str>) -> Result<Monitored, zmq::Error> {
        match domain {
            Some(domain) => self.bound(zmq::XPUB, domain),
            None => self.monitored(zmq::XPUB),
        }
    }

    /// libzmq contexts this factory holds (each runs two libzmq threads).
    pub fn contexts(&self) -> usize {
        self.contexts.len()
    }

    /// Sockets counted as open over all contexts (a monitored socket counts three).
    pub fn open_sockets(&self) -> usize {
        self.contexts.iter().map(Room::used).sum()
    }

    /// Takes room for `needed` sockets in the first context that has it, opening a context
    /// if none has.
    fn context(&mut self, needed: usize) -> Result<(usize, zmq::Context, Lease), zmq::Error> {
        // Let go of contexts left without sockets, all but the first such one.
        let mut kept_empty = false;
        self.contexts.retain(|r| {
            if r.used() > 0 {
                return true;
            }
            !std::mem::replace(&mut kept_empty, true)
        });
        let Some(i) = self
            .contexts
            .iter()
            .position(|r| r.used() + needed <= r.cap)
        else {
            let (ctx, lease) = self.new_context(needed)?;
            return Ok((self.contexts.len() - 1, ctx, lease));
        };
        let room = &self.contexts[i];
        room.used.fetch_add(needed, Ordering::Relaxed);
        let lease = Lease {
            used: room.used.clone(),
            n: needed,
        };
        Ok((i, room.ctx.clone(), lease))
    }

    /// A plain socket with no monitor (the publisher). Its room is not given back while this
    /// factory lives.
    pub fn plain(
        &mut self,
        kind: zmq::SocketType,
    ) -> Result<(zmq::Socket, zmq::Context), zmq::Error> {
        let (_, ctx, lease) = self.context(1)?;
        let s = guarded(|| ctx.socket(kind))?;
        apply_common(&s, kind, self.max_frame_size)?;
        std::mem::forget(lease);
        Ok((s, ctx))
    }

    /// A socket with a monitor for the handshake and disconnect events.
    pub fn monitored(&mut self, kind: zmq::SocketType) -> Result<Monitored, zmq::Error> {
        self.monitored_with(kind, monitored_events(), &|_| Ok(()))
    }

    /// A monitored socket whose monitor also reports the socket's own close
    /// (`MONITOR_STOPPED`, sent once libzmq destroyed the socket): for the dialled sockets the
    /// I/O thread closes itself and must see closed before it dials a replacement (MISSION
    /// F3). Keep the monitor until [`MonitorSocket::close_confirmed`] said yes: dropped sooner,
    /// it blocks the context's reaper (see [`MonitorSocket`]).
    ///
    /// A ROUTER (a RouteMesh lane) also reports its connection in band:
    /// `ROUTER_NOTIFY` = connect | disconnect makes libzmq hand it an empty record from the
    /// peer's routing id when the connection attaches (after the handshake, security
    /// included) and when it is lost, in order with the records: the first such record says
    /// "attached", any later one "the connection this socket had is gone" (a disconnect, or
    /// the attach of a reconnection libzmq made after a disconnect notice that a full pipe
    /// could not take). So its monitor is needed only until the handshake is done
    /// ([`MonitorSocket::stop`]) and again for the close ([`Sockets::close_monitor`]): two
    /// descriptors at steady state instead of four. (`IMMEDIATE` stays 0: with 1, libzmq
    /// drops the disconnect notice when it re-dials; measured.)
    pub fn dialled(&mut self, kind: zmq::SocketType) -> Result<Monitored, zmq::Error> {
        self.dialled_with(kind, &|_| Ok(()))
    }

    /// As [`Sockets::dialled`], with `setup` applied to the socket before its monitor starts.
    fn dialled_with(
        &mut self,
        kind: zmq::SocketType,
        setup: Setup<'_>,
    ) -> Result<Monitored, zmq::Error> {
        self.monitored_with(
            kind,
            monitored_events() | zmq::SocketEvent::MONITOR_STOPPED.to_raw(),
            &|s| {
                set_notify(s, kind)?;
                setup(s)
            },
        )
    }

    /// The [`Transport`](crate::runtime::transport::Transport)'s socket of `kind` for `role`
    /// (see the trait's implementation for [`Sockets`]).
    fn for_role(
        &mut self,
        kind: SocketKind,
        role: SocketRole<'_>,
    ) -> Result<Monitored, zmq::Error> {
        let zkind = match kind {
            SocketKind::Router => zmq::ROUTER,
            SocketKind::Dealer => zmq::DEALER,
            SocketKind::Pub => zmq::PUB,
            SocketKind::Sub => zmq::SUB,
            SocketKind::Publisher => zmq::XPUB,
        };
        // libzmq applies no subscription by itself on the publisher: the node reads each and
        // applies it to the connection that sent it.
        let bound = |s: &zmq::Socket| {
            s.set_linger(CLOSE_LINGER_MS)?;
            if kind == SocketKind::Publisher {
                s.set_xpub_manual(true)?;
            }
            Ok(())
        };
        match (role, kind) {
            (
                SocketRole::Bound {
                    domain: Some(domain),
                },
                _,
            ) => self.bound_with(zkind, domain, &bound),
            // As `publisher(None)`: failed handshakes reported, no accepts counted.
            (SocketRole::Bound { domain: None }, SocketKind::Publisher) => {
                self.monitored_with(zkind, monitored_events(), &bound)
            }
            // As `bound` without a ZAP handler.
            (SocketRole::Bound { domain: None }, _) => self.monitored_with(
                zkind,
                monitored_events() | zmq::SocketEvent::ACCEPTED.to_raw(),
                &|s| {
                    set_notify(s, zkind)?;
                    bound(s)
                },
            ),
            // A SUB socket's close is confirmed by nobody: no MONITOR_STOPPED.
            (SocketRole::Dialled, SocketKind::Sub) => {
                self.monitored_with(zkind, monitored_events(), &set_reconnect)
            }
            (SocketRole::Dialled, _) => self.dialled_with(zkind, &set_reconnect),
        }
    }

    /// Attaches a monitor to `watched`, a dialled socket whose monitor was stopped, that
    /// reports only the socket's close (`MONITOR_STOPPED`), in the context `room` was taken
    /// in; attached right before the socket is closed, so that the close is confirmed before
    /// a replacement is dialled (MISSION F3), as for a socket that kept its monitor. On error
    /// the room is given back (the caller closes the socket unconfirmed).
    pub fn close_monitor(
        &self,
        watched: &zmq::Socket,
        room: SocketRoom,
    ) -> Result<MonitorSocket, zmq::Error> {
        let ep = self.monitor_endpoint();
        let pair = guarded(|| room.ctx.socket(zmq::PAIR))?;
        pair.set_linger(0)?;
        pair.connect(&ep)?;
        guarded(|| watched.monitor(&ep, i32::from(zmq::SocketEvent::MONITOR_STOPPED.to_raw())))?;
        Ok(MonitorSocket { socket: pair, room })
    }

    /// A fresh inproc endpoint for a monitor.
    fn monitor_endpoint(&self) -> String {
        let n = self.monitor_seq.fetch_add(1, Ordering::Relaxed);
        format!("inproc://zmesh-mon-{}-{}", self.tag, n)
    }

    fn monitored_with(
        &mut self,
        kind: zmq::SocketType,
        events: u16,
        setup: Setup<'_>,
    ) -> Result<Monitored, zmq::Error> {
        // Three sockets of the context: the socket, the PAIR that `zmq_socket_monitor`
        // creates inside libzmq to publish the events, and our PAIR that reads them. (Counting
        // two let a context reach libzmq's 1023 at about 340 monitored sockets, and socket
        // creation then failed with EMFILE until the count moved on to a new context.)
        // libzmq's reaper frees closed sockets' slots a little after they were closed; a
        // context whose count has room can be full for that moment (EMFILE), and under load
        // more than one can be. Try the others (a new one if none has room; it is let go
        // again once its sockets are closed), passing the full ones over, a bounded number
        // of times; the passed-over contexts go to the end, to be used when the others fill.
        let mut passed = Vec::new();
        let result = loop {
            let (i, ctx, lease) = match self.context(3) {
                Ok(c) => c,
                Err(e) => break Err(e),
            };
            match self.monitored_in(&ctx, lease, kind, events, setup) {
                Err(zmq::Error::EMFILE) if passed.len() < EMFILE_PASSES => {
                    passed.push(self.contexts.remove(i));
                }
                other => break other,
            }
        };
        self.contexts.extend(passed);
        result
    }

    /// Opens a context and takes room for `needed` sockets in it.
    fn new_context(&mut self, needed: usize) -> Result<(zmq::Context, Lease), zmq::Error> {
        let (ctx, cap) = self.open_context(true)?;
        let room = Room {
            ctx,
            used: Arc::new(AtomicUsize::new(needed)),
            cap,
        };
        let taken = (
            room.ctx.clone(),
            Lease {
                used: room.used.clone(),
                n: needed,
            },
        );
        self.contexts.push(room);
        Ok(taken)
    }

    /// A new libzmq context, if the process has [`CONTEXT_HEADROOM`] descriptors to spare
    /// and libzmq could create it; `EMFILE` if not. libzmq aborts the process when it cannot
    /// create the poller of a context's thread (done at its first socket), and a context that
    /// `zmq_ctx_new` could not create (no descriptor for its mailbox) is a null pointer to
    /// the `zmq` crate: every socket of it failed with `EFAULT` ("Bad address"), and, kept as
    /// the context with room, it failed every later socket too, long after descriptors were
    /// free again.
    ///
    /// With `large`, its `ZMQ_MAX_SOCKETS` is raised to [`MAX_SOCKETS`]. Returns the context
    /// and how many sockets to place in it: `per_context`, or [`DEFAULT_ROOM`] where it was
    /// not raised (not `large`, or libzmq refused: its `select` poller caps it at
    /// `FD_SETSIZE`).
    fn open_context(&mut self, large: bool) -> Result<(zmq::Context, usize), zmq::Error> {
        let now = Instant::now();
        if self
            .refused_at
            .is_some_and(|t| now.saturating_duration_since(t) < CONTEXT_RETRY)
        {
            return Err(zmq::Error::EMFILE);
        }
        let short = match (
            crate::runtime::fds::open_count(),
            crate::runtime::fds::limit(),
        ) {
            (Some(open), Some(limit)) => open + CONTEXT_HEADROOM > limit,
            // Not even the count could open its directory.
            (None, Some(_)) => cfg!(target_os = "linux"),
            _ => false,
        };
        let ctx = if short {
            None
        } else {
            let ctx = zmq::Context::new();
            if let Err(e) = ctx.set_zero_copy_recv(false) {
                tracing::debug!(error = %e, "ZMQ_ZERO_COPY_RECV not turned off");
            }
            if large && ctx.set_max_sockets(MAX_SOCKETS).is_ok() {
                Some((ctx, self.per_context))
            } else {
                // `zmq_ctx_get` of a null context fails (EFAULT); of a real one it answers.
                ctx.get_io_threads()
                    .is_ok()
                    .then_some((ctx, DEFAULT_ROOM.min(self.per_context)))
            }
        };
        match ctx {
            Some(opened) => {
                self.refused_at = None;
                Ok(opened)
            }
            None => {
                self.refused_at = Some(now);
                Err(zmq::Error::EMFILE)
            }
        }
    }

    /// A monitored socket in `ctx`, holding `lease`, with `setup` applied after the common
    /// options and before the monitor starts (so a failure leaves no monitor behind). On any
    /// error the lease is dropped (after the sockets made so far) and its room given back.
    fn monitored_in(
        &self,
        ctx: &zmq::Context,
        lease: Lease,
        kind: zmq::SocketType,
        events: u16,
        setup: Setup<'_>,
    ) -> Result<Monitored, zmq::Error> {
        let socket = guarded(|| ctx.socket(kind))?;
        apply_common(&socket, kind, self.max_frame_size)?;
        setup(&socket)?;
        let ep = self.monitor_endpoint();
        // Our PAIR connects first (libzmq completes an inproc connect at the bind), so that
        // once the socket's monitor exists it always has its reader: a socket whose monitor
        // never got one would block libzmq's reaper with its last event when closed (see
        // [`MonitorSocket`]). A failure before the monitor starts leaves nothing behind.
        let monitor = guarded(|| ctx.socket(zmq::PAIR))?;
        monitor.set_linger(0)?;
        monitor.connect(&ep)?;
        guarded(|| socket.monitor(&ep, i32::from(events)))?;
        Ok(Monitored {
            socket,
            monitor: MonitorSocket {
                socket: monitor,
                room: SocketRoom {
                    ctx: ctx.clone(),
                    _lease: lease,
                },
            },
        })
    }
}

/// Runs a libzmq call that may need new descriptors. The `zmq` crate panics on an error code
/// it does not know, and `ENFILE` (the system's file table is full) is one: that panic is
/// caught here and reported as `EMFILE`, which [`crate::runtime::fds::classify`] tells apart
/// by the system's figures. (The panic's message is still printed by the panic hook.)
pub fn guarded<T>(f: impl FnOnce() -> Result<T, zmq::Error>) -> Result<T, zmq::Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(Err(zmq::Error::EMFILE))
}

/// Options of one role, set on a new socket after the common ones (`apply_common`).
type Setup<'a> = &'a dyn Fn(&zmq::Socket) -> Result<(), zmq::Error>;

/// A ROUTER names its connections' attach and loss in band (see [`Sockets::dialled`],
/// [`Sockets::bound`]); other kinds have nothing to set.
fn set_notify(s: &zmq::Socket, kind: zmq::SocketType) -> Result<(), zmq::Error> {
    if kind == zmq::ROUTER {
        s.set_router_notify(zmq::ROUTER_NOTIFY_CONNECT | zmq::ROUTER_NOTIFY_DISCONNECT)?;
    }
    Ok(())
}

/// A dialled socket's reconnect interval: 100 ms, backing off to 1 s.
fn set_reconnect(s: &zmq::Socket) -> Result<(), zmq::Error> {
    s.set_reconnect_ivl(100)?;
    s.set_reconnect_ivl_max(1000)
}

/// The events every monitor reports.
fn monitored_events() -> u16 {
    zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw()
        | zmq::SocketEvent::DISCONNECTED.to_raw()
        | zmq::SocketEvent::CLOSED.to_raw()
        | zmq::SocketEvent::CONNECT_RETRIED.to_raw()
        | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL.to_raw()
        | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL.to_raw()
        | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH.to_raw()
}

/// Makes `s` a CURVE server with `pair`'s keys (set before it binds): every connection must
/// complete a CurveZMQ handshake, in which the client proves it holds the secret key of the
/// public key it presents (the ZAP handler then decides whether that key is allowed).
pub fn set_curve_server(
    s: &zmq::Socket,
    pair: &crate::runtime::security::KeyPair,
) -> Result<(), zmq::Error> {
    s.set_curve_server(true)?;
    s.set_curve_publickey(pair.public.as_bytes())?;
    s.set_curve_secretkey(pair.secret_bytes())
}

/// Makes `s` a CURVE client with `pair`'s keys that accepts only a server holding the secret
/// key of `server` (set before it connects): a server with another key cannot complete the
/// handshake, so nothing it sends is ever read.
pub fn set_curve_client(
    s: &zmq::Socket,
    pair: &crate::runtime::security::KeyPair,
    server: &crate::proto::security::PublicKey,
) -> Result<(), zmq::Error> {
    s.set_curve_serverkey(server.as_bytes())?;
    s.set_curve_publickey(pair.public.as_bytes())?;
    s.set_curve_secretkey(pair.secret_bytes())
}

fn apply_common(
    s: &zmq::Socket,
    kind: zmq::SocketType,
    max_frame_size: i64,
) -> Result<(), zmq::Error> {
    s.set_maxmsgsize(max_frame_size)?;
    s.set_handshake_ivl(HANDSHAKE_IVL_MS)?;
    s.set_backlog(BACKLOG)?;
    s.set_sndhwm(HWM)?;
    s.set_rcvhwm(HWM)?;
    s.set_linger(0)?;
    if kind == zmq::ROUTER {
        s.set_router_mandatory(true)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
