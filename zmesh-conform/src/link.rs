//! The runner's raw side: plain libzmq sockets and zmesh's codec (`zmesh::proto::wire`),
//! never the runtime, so every byte the target sends is seen as it is.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use zmesh::proto::wire::{
    Label, Lane, Membership, Memberships, Name, Record, Request, Role, Semantics, Welcome,
    EXTENSION_PREFIX,
};

/// Longest wait for an answer that must come (a WELCOME, a REJECT, a REPLY ...).
pub const ANSWER: Duration = Duration::from_secs(5);
/// How long "nothing comes" is watched for (no answer, no second REPLY ...).
pub const QUIET: Duration = Duration::from_millis(700);
/// The bound routing ids of WIRE.md §5.4.
pub const BOUND_APPLICATION: &[u8] = b"zmesh-application";
/// The Completion lane's bound routing id.
pub const BOUND_COMPLETION: &[u8] = b"zmesh-completion";
/// The ClientServer server's bound routing id.
pub const BOUND_SERVER: &[u8] = b"zmesh-server";
/// The channel of the runner's Server membership (a RouteMesh pair with it is required).
pub const RUNNER_CHANNEL: &str = "zmesh-conform";
/// A channel no target serves.
pub const NO_CHANNEL: &str = "zmesh-conform-none";

/// A random non-zero u64 (a generation, a probe id).
pub fn random_nz() -> NonZeroU64 {
    let mut buf = [0u8; 8];
    if getrandom::getrandom(&mut buf).is_err() {
        buf = u64::from(std::process::id()).to_be_bytes();
    }
    NonZeroU64::new(u64::from_be_bytes(buf)).unwrap_or(NonZeroU64::MIN)
}

/// `s` as a wire name; the runner's own names are always valid, and a user's that is not
/// becomes a valid placeholder (the check that uses it then fails visibly).
pub fn name(s: &str) -> Name {
    Name::new(s).unwrap_or_else(|_| Name::new("invalid-name").unwrap_or_else(|_| unreachable!()))
}

/// `s` as a wire label (0..=255 bytes), cut to fit.
pub fn label(s: &str) -> Label {
    Label::new(s).unwrap_or_default()
}

/// The runner's memberships: a Server of [`RUNNER_CHANNEL`] (so a RouteMesh pair with the
/// runner is required), or none.
pub fn memberships(server: bool) -> Memberships {
    offering(server, &[])
}

/// [`memberships`] followed by an extension entry for each capability name of `offer`
/// (WIRE.md §8.1: role ObjectClient, channel `00` + the name).
pub fn offering(server: bool, offer: &[&str]) -> Memberships {
    let mut list = Vec::new();
    if server {
        list.push(Membership {
            role: Role::Server,
            channel: name(RUNNER_CHANNEL),
        });
    }
    for cap in offer {
        list.push(Membership {
            role: Role::ObjectClient,
            channel: name(&format!("{EXTENSION_PREFIX}{cap}")),
        });
    }
    Memberships::new(list).unwrap_or_default()
}

/// The capability names a WELCOME announces: its extension entries (WIRE.md §8.1), whatever
/// their role, in order.
pub fn announced(w: &Welcome) -> Vec<String> {
    w.memberships
        .iter()
        .filter_map(|m| m.channel.as_str().strip_prefix(EXTENSION_PREFIX))
        .map(str::to_owned)
        .collect()
}

/// What a HELLO of the runner says.
#[derive(Clone)]
pub struct HelloSpec {
    /// Its lane field.
    pub lane: Lane,
    /// The runner's RID on this connection.
    pub rid: String,
    /// The runner's generation.
    pub generation: NonZeroU64,
    /// The security identity it announces.
    pub security_identity: String,
    /// The RID it expects of the target.
    pub expect_rid: Option<String>,
    /// The generation it expects of the target.
    pub expect_generation: Option<NonZeroU64>,
    /// With a Server membership or none.
    pub server: bool,
    /// The capabilities it offers, by wire name (none: a version-1 HELLO).
    pub offer: Vec<&'static str>,
}

impl HelloSpec {
    /// A HELLO on `lane` as `rid`, expecting nothing, with a Server membership.
    pub fn new(lane: Lane, rid: &str, generation: NonZeroU64) -> HelloSpec {
        HelloSpec {
            lane,
            rid: rid.to_owned(),
            generation,
            security_identity: rid.to_owned(),
            expect_rid: None,
            expect_generation: None,
            server: true,
            offer: Vec::new(),
        }
    }

    /// The record's frames.
    pub fn encode(&self) -> Vec<Vec<u8>> {
        Record::Hello(zmesh::proto::wire::Hello {
            lane: self.lane,
            rid: name(&self.rid),
            generation: self.generation,
            security_identity: label(&self.security_identity),
            expect_rid: self.expect_rid.as_deref().map(name),
            expect_generation: self.expect_generation,
            config_generation: 0,
            memberships: offering(self.server, &self.offer),
        })
        .encode()
    }
}

/// A WELCOME of the runner.
pub fn welcome(lane: Lane, rid: &str, generation: NonZeroU64, identity: &str) -> Vec<Vec<u8>> {
    Record::Welcome(Welcome {
        lane,
        rid: name(rid),
        generation,
        security_identity: label(identity),
        memberships: memberships(true),
    })
    .encode()
}

/// A REQUEST.
pub fn request(call_id: u64, channel: &str, method: &str, payload: &[u8]) -> Request {
    Request {
        call_id: NonZeroU64::new(call_id).unwrap_or(NonZeroU64::MIN),
        ttl_ms: None,
        semantics: Semantics::Undeclared,
        channel: name(channel),
        method: name(method),
        idempotency_key: None,
        payload: Bytes::copy_from_slice(payload),
    }
}

/// One connection of the runner to the target, or of the target to the runner: send whole
/// records, receive whole messages (routing frames handled).
pub trait Wire {
    /// Sends one message; an error names why it could not be sent.
    fn send(&self, frames: &[Vec<u8>]) -> Result<(), String>;
    /// The next message within `limit`, routing frames removed.
    fn recv(&self, limit: Duration) -> Option<Vec<Vec<u8>>>;
}

/// A socket the runner dialled: a DEALER (ClientServer) or a ROUTER addressing the bound
/// side by its routing id (RouteMesh).
pub struct Dialled {
    socket: zmq::Socket,
    peer: Option<&'static [u8]>,
}

/// Counter for the runner's dialled routing ids (new for every connection, §5.4).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Dialled {
    /// Dials `endpoint` for `lane`: a ROUTER for the RouteMesh lanes, a DEALER for
    /// ClientServer; its routing id follows §5.4 (`z`, lane letter, generation, counter).
    pub fn connect(
        ctx: &zmq::Context,
        endpoint: &str,
        lane: Lane,
        generation: NonZeroU64,
    ) -> Result<Dialled, String> {
        let (kind, peer, letter) = match lane {
            Lane::Application => (zmq::ROUTER, Some(BOUND_APPLICATION), b'A'),
            Lane::Completion => (zmq::ROUTER, Some(BOUND_COMPLETION), b'C'),
            Lane::ClientServer => (zmq::DEALER, None, b'S'),
        };
        let socket = ctx.socket(kind).map_err(|e| e.to_string())?;
        let mut id = vec![b'z', letter];
        id.extend(generation.get().to_be_bytes());
        let n = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        id.extend(n.to_be_bytes());
        let setup = || -> Result<(), zmq::Error> {
            socket.set_linger(0)?;
            socket.set_identity(&id)?;
            socket.set_sndhwm(100_000)?;
            socket.set_rcvhwm(100_000)?;
            if kind == zmq::ROUTER {
                socket.set_router_mandatory(true)?;
            }
            socket.connect(endpoint)
        };
        setup().map_err(|e| format!("cannot dial {endpoint}: {e}"))?;
        Ok(Dialled { socket, peer })
    }
}

impl Wire for Dialled {
    fn send(&self, frames: &[Vec<u8>]) -> Result<(), String> {
        let mut all: Vec<&[u8]> = Vec::with_capacity(frames.len() + 1);
        if let Some(p) = self.peer {
            all.push(p);
        }
        all.extend(frames.iter().map(Vec::as_slice));
        // A dialling ROUTER can address the bound side only once the ZMTP handshake is done
        // (WIRE.md §5.4): EHOSTUNREACH until then.
        let deadline = Instant::now() + ANSWER;
        loop {
            match self.socket.send_multipart(all.iter(), zmq::DONTWAIT) {
                Ok(()) => return Ok(()),
                Err(zmq::Error::EHOSTUNREACH | zmq::Error::EAGAIN) if Instant::now() < deadline => {
                    // Poll the handshake with a bound (no event to wait on without a monitor).
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(zmq::Error::EHOSTUNREACH) => {
                    return Err(
                        "the target's bound socket is unreachable by its routing id (§5.4: \
                         zmesh-application / zmesh-completion) within 5 s"
                            .into(),
                    )
                }
                Err(e) => return Err(format!("send failed: {e}")),
            }
        }
    }

    fn recv(&self, limit: Duration) -> Option<Vec<Vec<u8>>> {
        let mut frames = recv_within(&self.socket, limit)?;
        if self.peer.is_some() {
            if frames.is_empty() {
                return None;
            }
            frames.remove(0);
        }
        Some(frames)
    }
}

/// The next message on `socket` within `limit`.
pub fn recv_within(socket: &zmq::Socket, limit: Duration) -> Option<Vec<Vec<u8>>> {
    let ms = i64::try_from(limit.as_millis()).unwrap_or(i64::MAX).max(1);
    match socket.poll(zmq::POLLIN, ms) {
        Ok(n) if n > 0 => socket.recv_multipart(zmq::DONTWAIT).ok(),
        _ => None,
    }
}

/// A ROUTER the runner bound, where the target dials.
pub struct Bound {
    /// The socket.
    pub socket: zmq::Socket,
}

impl Bound {
    /// Binds a ROUTER at `endpoint` with the bound routing id of `lane` (§5.4).
    pub fn bind(ctx: &zmq::Context, endpoint: &str, lane: Lane) -> Result<Bound, String> {
        let socket = ctx.socket(zmq::ROUTER).map_err(|e| e.to_string())?;
        let id = match lane {
            Lane::Application => BOUND_APPLICATION,
            Lane::Completion => BOUND_COMPLETION,
            Lane::ClientServer => BOUND_SERVER,
        };
        let setup = || -> Result<(), zmq::Error> {
            socket.set_linger(0)?;
            socket.set_identity(id)?;
            socket.set_router_mandatory(true)?;
            socket.bind(endpoint)
        };
        setup().map_err(|e| format!("cannot bind {endpoint}: {e}"))?;
        Ok(Bound { socket })
    }

    /// The next message from any connection within `limit`: its routing id and frames.
    pub fn recv_any(&self, limit: Duration) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
        let mut frames = recv_within(&self.socket, limit)?;
        if frames.is_empty() {
            return None;
        }
        let route = frames.remove(0);
        Some((route, frames))
    }

    /// One connection of this socket, by routing id.
    pub fn conn(&self, route: Vec<u8>) -> BoundConn<'_> {
        BoundConn { bound: self, route }
    }
}

/// One connection of a [`Bound`] socket; messages of other connections are dropped while it
/// reads.
pub struct BoundConn<'a> {
    bound: &'a Bound,
    /// Its routing id.
    pub route: Vec<u8>,
}

impl Wire for BoundConn<'_> {
    fn send(&self, frames: &[Vec<u8>]) -> Result<(), String> {
        let mut all: Vec<&[u8]> = vec![&self.route];
        all.extend(frames.iter().map(Vec::as_slice));
        self.bound
            .socket
            .send_multipart(all.iter(), zmq::DONTWAIT)
            .map_err(|e| format!("send failed: {e}"))
    }

    fn recv(&self, limit: Duration) -> Option<Vec<Vec<u8>>> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (route, frames) = self.bound.recv_any(left)?;
            if route == self.route {
                return Some(frames);
            }
        }
    }
}

/// What came from the target while the runner waited for something.
pub enum Got {
    /// A well-formed record.
    Record(Record),
    /// A message that does not decode: its error class and detail.
    Malformed(String),
}

/// The next record on `w` within `limit`, answering PROBEs (ACK, same id) and skipping ACKs
/// when `auto_ack`; `None` if nothing else came.
pub fn next(w: &dyn Wire, limit: Duration, auto_ack: bool) -> Option<Got> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let frames = w.recv(left)?;
        match Record::decode(&frames) {
            Ok(Record::Probe { id }) if auto_ack => {
                let _ = w.send(&Record::Ack { id }.encode());
            }
            Ok(Record::Ack { .. }) if auto_ack => {}
            Ok(r) => return Some(Got::Record(r)),
            Err(e) => return Some(Got::Malformed(format!("{} ({e})", e.class()))),
        }
    }
}

/// Every record on `w` within `limit`, PROBEs answered and ACKs skipped.
pub fn collect(w: &dyn Wire, limit: Duration) -> Vec<Got> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return out;
        }
        match next(w, left, true) {
            Some(g) => out.push(g),
            None => return out,
        }
    }
}

/// A short description of what came.
pub fn show(g: &Got) -> String {
    match g {
        Got::Record(r) => describe(r),
        Got::Malformed(e) => format!("a malformed message: {e}"),
    }
}

/// A short description of a record.
pub fn describe(r: &Record) -> String {
    match r {
        Record::Reject(j) => format!("REJECT {:?} ({:?})", j.reason, j.detail.as_str()),
        Record::Close { reason } => format!("CLOSE {reason:?}"),
        Record::Probe { id } => format!("PROBE {id}"),
        Record::Ack { id } => format!("ACK {id}"),
        Record::Reply(p) => format!("REPLY call {} {:?}", p.call_id, p.code),
        Record::Accept(a) => format!("ACCEPT call {}", a.call_id),
        other => other.kind().name().to_uppercase(),
    }
}
