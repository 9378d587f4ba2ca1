//! Sockets in slots: binding the node's endpoints, placing a socket and its monitor in the
//! epoll set and taking them out again, and the one send and receive primitive of a slot.
//! A send or receive marks its socket for a `ZMQ_EVENTS` check (see [`super::parts::ready`]).

use super::parts::keys::Table;
use super::parts::ready::{Readiness, Watch};
use super::{
    Gated, IoThread, LinkKey, SlotKey, SubKey, BOUND_ID_APPLICATION, BOUND_ID_COMPLETION,
    BOUND_ID_SERVER,
};
use crate::proto::sched::{IdMap, SharedSocketId, Source as SchedSource};
use crate::proto::ConnId;
use crate::runtime::error::NodeError;
use crate::runtime::records::Lane;
use crate::runtime::socket::{
    guarded, set_curve_server, Frame, FrameSocket, MonitorSocket, SocketRoom, Sockets,
    CLOSE_LINGER_MS,
};

/// What a socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotRole {
    /// A bound ROUTER shared by the inbound connections of one lane.
    Bound(Lane),
    /// A dialled ROUTER/DEALER owned by one link.
    Dialled(LinkKey),
    /// A SUB socket owned by one fanout subscription.
    Sub(SubKey),
}

/// The node's sockets: the contexts they are made in, the slot table, the bound sockets'
/// scheduler ids, the epoll set over their descriptors, and the monitors of closed sockets
/// whose close libzmq has not confirmed in time.
pub(super) struct SocketSet {
    /// The libzmq contexts every socket is made in.
    pub(super) contexts: Sockets,
    pub(super) slots: Table<SlotKey, Option<Slot>>,
    /// The bound sockets by their id in the receive scheduler.
    pub(super) shared: IdMap<SharedSocketId, SlotKey>,
    /// The epoll set over every socket's `ZMQ_FD` and the sockets due for a `ZMQ_EVENTS`
    /// check (see [`super::parts::ready`] for the rule that keeps an edge from being lost).
    pub(super) ready: Readiness,
    /// Monitors of closed dialled sockets whose close was not confirmed within
    /// [`CLOSE_CONFIRM_MAX`]: their links dial again, but the monitors are kept (still watched,
    /// under their link's [`Watch::Closing`]) until libzmq confirms, because a monitor dropped
    /// before libzmq's last event blocks the context's reaper (see `MonitorSocket`).
    ///
    /// [`CLOSE_CONFIRM_MAX`]: super::CLOSE_CONFIRM_MAX
    pub(super) overdue_closing: Vec<MonitorSocket>,
    /// CURVE: a bound socket's records keep their message properties (see
    /// [`SocketSet::recv_one`]).
    curve: bool,
}

pub(super) struct Slot {
    pub(super) socket: zmq::Socket,
    pub(super) monitor: Option<MonitorSocket>,
    /// The room in its context of a dialled ROUTER whose monitor was stopped once its
    /// handshake was done: a monitor is attached again in it for the close.
    pub(super) room: Option<SocketRoom>,
    pub(super) role: SlotRole,
    pub(super) endpoint: String,
    /// The scheduler's handle of a bound socket shared by several peers (MISSION R3).
    pub(super) shared: Option<SharedSocketId>,
}

/// Closes the socket of a slot that is no dialled link's (a SUB socket, a bound socket, whose
/// close nobody waits to see confirmed): its monitor, if it has one, is stopped first, so
/// libzmq publishes nothing on it any more; then the socket closes. libzmq publishes a
/// socket's events with a blocking send from the thread that raises them (see
/// [`MonitorSocket`]): an event raised after our end of the monitor is gone, such as the
/// `CLOSED` of a connect still pending when the socket closes, would stop that thread, the
/// context's I/O thread, and every socket it serves with it.
pub(super) fn close_stopping_monitor(slot: Slot) {
    let Slot {
        socket,
        monitor,
        room,
        ..
    } = slot;
    match monitor.map(|m| m.stop(&socket)) {
        Some(Ok((_, monitor_room))) => {
            drop(socket);
            drop(monitor_room);
        }
        Some(Err((e, m))) => {
            tracing::debug!(error = %e, "monitor not stopped before its socket closed");
            drop(socket);
            drop(m);
        }
        None => drop(socket),
    }
    drop(room);
}

/// What the receive scheduler accounts caps to (MISSION R2, R3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Unit {
    /// A socket with one peer: a dialled ROUTER/DEALER or a SUB socket.
    Socket(SlotKey),
    /// One inbound physical connection behind a bound socket.
    Peer(LinkKey, ConnId),
    /// Records from not-yet-admitted connections of a bound socket (handshakes).
    Admission(SlotKey),
}

impl SocketSet {
    /// No socket yet; `curve`: the node runs CURVE.
    pub(super) fn new(contexts: Sockets, ready: Readiness, curve: bool) -> SocketSet {
        SocketSet {
            contexts,
            slots: Table::default(),
            shared: IdMap::default(),
            ready,
            overdue_closing: Vec::new(),
            curve,
        }
    }

    /// The socket in slot `key`, if there is one.
    pub(super) fn get(&self, key: SlotKey) -> Option<&Slot> {
        self.slots.get(key)?.as_ref()
    }

    /// Places `slot` in the first free slot (or a new one); returns its key.
    fn insert(&mut self, slot: Slot) -> SlotKey {
        match self.slots.position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => self.slots.push(Some(slot)),
        }
    }

    /// Registers slot `key`'s socket and its monitor in the epoll set.
    fn register(&self, key: SlotKey) -> std::io::Result<()> {
        let Some(s) = self.get(key) else {
            return Ok(());
        };
        self.ready.register(&s.socket, Watch::Socket(key))?;
        match &s.monitor {
            Some(m) => self.ready.register(m, Watch::Monitor(key)),
            None => Ok(()),
        }
    }

    /// Takes slot `key`'s socket out of the table and, with its monitor, out of the epoll
    /// set, before they close (their descriptors go with them).
    fn remove(&mut self, key: SlotKey) -> Option<Slot> {
        self.ready.forget(key);
        let slot = self.slots.get_mut(key).and_then(Option::take)?;
        self.ready.deregister(&slot.socket);
        if let Some(m) = &slot.monitor {
            self.ready.deregister(m);
        }
        Some(slot)
    }

    /// The receive scheduler's handle of slot `key`, if it is a bound socket.
    pub(super) fn shared_id(&self, key: SlotKey) -> Option<SharedSocketId> {
        self.get(key)?.shared
    }

    /// Sends a record on a slot's socket, prefixed by a routing id when the socket is a
    /// ROUTER, and marks the socket for a `ZMQ_EVENTS` check (the send may have consumed the
    /// signal of a record that arrived meanwhile).
    pub(super) fn send(
        &self,
        slot: SlotKey,
        route: Option<&[u8]>,
        frames: &[Vec<u8>],
    ) -> Result<(), crate::runtime::socket::SocketSendError> {
        match self.get(slot) {
            Some(s) => {
                let r = send_routed(&s.socket, route, frames);
                self.ready.touch(Watch::Socket(slot));
                r
            }
            _ => Err(crate::runtime::socket::SocketSendError::Unreachable),
        }
    }

    /// One record from a socket without blocking, if any. "Nothing" (or an error) takes the
    /// socket out of the readable set until its descriptor fires or a check finds a record.
    pub(super) fn recv_one(&mut self, slot: SlotKey) -> Option<Vec<Frame>> {
        let s = self.get(slot)?;
        // CURVE: a bound socket's records keep their message properties until the receive
        // loop knows whether they come from an admitted connection (`receive`): a HELLO's
        // carries the client's verified key.
        let share = !self.curve || !matches!(s.role, SlotRole::Bound(_));
        let got = s.socket.try_recv_record(share);
        match &got {
            Ok(Some(_)) | Err(_) => self.ready.touch(Watch::Socket(slot)),
            // EAGAIN: libzmq processed the socket's commands and found nothing; the socket's
            // next record signals its descriptor (`ready`, the rule), so no check is due.
            Ok(None) => self.ready.settled_by_receive(Watch::Socket(slot)),
        }
        let got = got.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "receive failed");
            None
        });
        if got.is_none() {
            self.ready.drained(slot);
        }
        got
    }
}

impl IoThread {
    pub(super) fn bind(
        &mut self,
        kind: zmq::SocketType,
        ep: &str,
        role: SlotRole,
    ) -> Result<SlotKey, NodeError> {
        let bind_err = |source| NodeError::bind(ep, source);
        let bound_id = match role {
            SlotRole::Bound(Lane::Application) => Some(BOUND_ID_APPLICATION),
            SlotRole::Bound(Lane::Completion) => Some(BOUND_ID_COMPLETION),
            SlotRole::Bound(Lane::ClientServer) => Some(BOUND_ID_SERVER),
            _ => None,
        };
        // A bound ROUTER's ZAP domain is its routing id: the ZAP handler knows by it which
        // socket a connection arrives on (gate).
        let domain = bound_id.map(|id| String::from_utf8_lossy(id).into_owned());
        let (socket, monitor) = match (&domain, role) {
            (Some(domain), _) => {
                let m = self
                    .sockets
                    .contexts
                    .bound(kind, domain)
                    .map_err(bind_err)?;
                (m.socket, Some(m.monitor))
            }
            (None, _) => {
                let m = self.sockets.contexts.monitored(kind).map_err(bind_err)?;
                (m.socket, Some(m.monitor))
            }
        };
        if let Some(id) = bound_id {
            socket.set_identity(id).map_err(bind_err)?;
        }
        if let Some(pair) = &self.curve {
            set_curve_server(&socket, pair).map_err(bind_err)?;
        }
        socket.set_linger(CLOSE_LINGER_MS).map_err(bind_err)?;
        guarded(|| socket.bind(ep)).map_err(bind_err)?;
        // A wildcard (`tcp://127.0.0.1:*`, automatic mode) is known by what libzmq bound.
        let endpoint = match socket.get_last_endpoint() {
            Ok(Ok(bound)) if ep.contains('*') => bound,
            _ => ep.to_owned(),
        };
        let slot = self
            .add_slot(Slot {
                socket,
                monitor,
                room: None,
                role,
                endpoint,
                shared: None,
            })
            .map_err(NodeError::poller)?;
        if let Some(domain) = domain {
            self.accepting.gate.add_domain(&domain, Gated::Bound(slot));
        }
        Ok(slot)
    }

    /// Places a socket in a slot and registers it and its monitor in the epoll set; on
    /// failure the slot is given up again (the socket closes).
    pub(super) fn add_slot(&mut self, slot: Slot) -> std::io::Result<SlotKey> {
        let key = self.put_slot(slot);
        if let Err(e) = self.sockets.register(key) {
            if let Some(slot) = self.take_slot(key) {
                match (slot.role, slot.monitor) {
                    // A dialled socket's monitor waits for libzmq's confirmation of the close.
                    (SlotRole::Dialled(k), Some(m)) => {
                        drop(slot.socket);
                        self.park_closing(k, m);
                    }
                    (_, monitor) => close_stopping_monitor(Slot { monitor, ..slot }),
                }
            }
            return Err(e);
        }
        Ok(key)
    }

    pub(super) fn put_slot(&mut self, mut slot: Slot) -> SlotKey {
        let role = slot.role;
        let shared = match role {
            SlotRole::Bound(_) => Some(self.sched.add_shared_socket()),
            _ => None,
        };
        slot.shared = shared;
        let key = self.sockets.insert(slot);
        if let Some(sid) = shared {
            self.sockets.shared.insert(sid, key);
        }
        let (unit, source) = match shared {
            Some(sid) => (Unit::Admission(key), SchedSource::Shared(sid)),
            None => (Unit::Socket(key), SchedSource::Single),
        };
        if let Err(e) = self.sched.add_unit(unit, source) {
            tracing::debug!(error = ?e, "scheduler unit not added");
        }
        key
    }

    pub(super) fn take_slot(&mut self, key: SlotKey) -> Option<Slot> {
        match self.sockets.shared_id(key) {
            // Records staged for its peers go with the socket.
            Some(sid) => {
                self.sockets.shared.remove(&sid);
                drop(self.sched.remove_shared_socket(sid));
            }
            None => drop(self.sched.remove_unit(Unit::Socket(key))),
        }
        self.accepting.inbound.remove(&key);
        self.timers.forget_sweeps(key);
        self.sockets.remove(key)
    }

    pub(super) fn send_frames_on_link(
        &self,
        k: LinkKey,
        frames: &[Vec<u8>],
    ) -> Result<(), crate::runtime::socket::SocketSendError> {
        let Some(c) = self.links.get(k).and_then(|l| l.conn.as_ref()) else {
            return Err(crate::runtime::socket::SocketSendError::Unreachable);
        };
        self.sockets.send(c.slot, c.route.as_deref(), frames)
    }

    pub(super) fn send_on_link(
        &mut self,
        k: LinkKey,
        frames: Vec<Vec<u8>>,
    ) -> Result<(), crate::runtime::socket::SocketSendError> {
        self.send_frames_on_link(k, &frames)
    }
}

/// Sends a record, prefixed by a routing id when the socket is a ROUTER.
pub(super) fn send_routed(
    socket: &zmq::Socket,
    route: Option<&[u8]>,
    frames: &[Vec<u8>],
) -> Result<(), crate::runtime::socket::SocketSendError> {
    let mut refs: Vec<&[u8]> = Vec::with_capacity(frames.len() + 1);
    if let Some(r) = route {
        refs.push(r);
    }
    refs.extend(frames.iter().map(Vec::as_slice));
    socket.send_frames(&refs)
}
