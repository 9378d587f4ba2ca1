//! The node's sockets as one part: the slot table with each socket and its monitor, the
//! bound sockets' scheduler ids, the epoll set over them, the monitors of closes not yet
//! confirmed, and the one send and the one receive primitive of a slot. A send or receive
//! marks its socket for a `ZMQ_EVENTS` check (see [`super::ready`]). Binding, dialling and
//! closing are the thread's (`io/slots.rs`, `io/links.rs`).

use std::collections::HashMap;

use super::exhaustion::Exhaustion;
use super::ready::{Readiness, Watch};
use crate::proto::node::keys::{LinkKey, SlotKey, SubKey, Table};
use crate::proto::node::sub::Published;
use crate::proto::sched::{IdMap, SharedSocketId};
use crate::proto::ConnId;
use crate::runtime::records::Lane;
use crate::runtime::socket::{
    Frame, MonitorEvent, MonitorSocket, SocketSendError, Sockets, ZmqSocket,
};
use crate::runtime::transport::{Transport, TransportMonitor, TransportSocket};

/// What a socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotRole {
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
pub(crate) struct SocketSet {
    /// The libzmq contexts every socket is made in.
    pub(crate) contexts: Sockets,
    pub(crate) slots: Table<SlotKey, Option<Slot>>,
    /// The bound sockets by their id in the receive scheduler.
    pub(crate) shared: IdMap<SharedSocketId, SlotKey>,
    /// The epoll set over every socket's `ZMQ_FD` and the sockets due for a `ZMQ_EVENTS`
    /// check (see [`super::ready`] for the rule that keeps an edge from being lost).
    pub(crate) ready: Readiness,
    /// Monitors of closed dialled sockets whose close was not confirmed within
    /// [`CLOSE_CONFIRM_MAX`]: their links dial again, but the monitors are kept (still watched,
    /// under their link's [`Watch::Closing`]) until libzmq confirms, because a monitor dropped
    /// before libzmq's last event blocks the context's reaper (see `MonitorSocket`).
    ///
    /// [`CLOSE_CONFIRM_MAX`]: crate::proto::node::link::CLOSE_CONFIRM_MAX
    pub(crate) overdue_closing: Vec<MonitorSocket>,
    /// The monitor of each link's closed dialled socket, until libzmq confirms the close or
    /// the link's [`CLOSE_CONFIRM_MAX`] passes (then it joins `overdue_closing`).
    ///
    /// [`CLOSE_CONFIRM_MAX`]: crate::proto::node::link::CLOSE_CONFIRM_MAX
    pub(crate) closing: HashMap<LinkKey, MonitorSocket>,
    /// CURVE: a bound socket's records keep their message properties (see
    /// [`SocketSet::recv_one`]).
    curve: bool,
    /// Running out of descriptors: the figures and the episode being logged.
    pub(crate) exhaustion: Exhaustion,
    /// The transport's admission of the bound endpoints' connections (libzmq: the ZAP
    /// handler; none when the node gates no socket).
    pub(crate) zap: Option<ZmqSocket>,
    /// The ZAP handler's descriptor fired or it was touched: read it.
    pub(crate) zap_ready: bool,
}

pub(crate) struct Slot {
    /// The socket, the transport's (`<Sockets as Transport>::Socket`).
    pub(crate) socket: ZmqSocket,
    pub(crate) monitor: Option<MonitorSocket>,
    /// The room in its context of a dialled ROUTER whose monitor was stopped once its
    /// handshake was done: a monitor is attached again in it for the close.
    pub(crate) room: Option<<Sockets as Transport>::Room>,
    pub(crate) role: SlotRole,
    pub(crate) endpoint: String,
    /// The scheduler's handle of a bound socket shared by several peers (MISSION R3).
    pub(crate) shared: Option<SharedSocketId>,
}

/// Closes the socket of a slot that is no dialled link's (a SUB socket, a bound socket, whose
/// close nobody waits to see confirmed): its monitor, if it has one, is stopped first, so
/// libzmq publishes nothing on it any more; then the socket closes. libzmq publishes a
/// socket's events with a blocking send from the thread that raises them (see
/// [`MonitorSocket`]): an event raised after our end of the monitor is gone, such as the
/// `CLOSED` of a connect still pending when the socket closes, would stop that thread, the
/// context's I/O thread, and every socket it serves with it.
pub(crate) fn close_stopping_monitor(slot: Slot) {
    let Slot {
        socket,
        monitor,
        room,
        ..
    } = slot;
    match monitor {
        Some(m) => drop(Sockets::close_stopping_monitor(socket, m)),
        None => socket.close(),
    }
    drop(room);
}

/// What the receive scheduler accounts caps to (MISSION R2, R3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Unit {
    /// A socket with one peer: a dialled ROUTER/DEALER or a SUB socket.
    Socket(SlotKey),
    /// One inbound physical connection behind a bound socket.
    Peer(LinkKey, ConnId),
    /// Records from not-yet-admitted connections of a bound socket (handshakes).
    Admission(SlotKey),
}

impl SocketSet {
    /// No socket yet; `curve`: the node runs CURVE.
    pub(crate) fn new(contexts: Sockets, ready: Readiness, curve: bool) -> SocketSet {
        SocketSet {
            contexts,
            slots: Table::default(),
            shared: IdMap::default(),
            ready,
            overdue_closing: Vec::new(),
            closing: HashMap::new(),
            curve,
            exhaustion: Exhaustion::default(),
            zap: None,
            zap_ready: false,
        }
    }

    /// The socket in slot `key`, if there is one.
    pub(crate) fn get(&self, key: SlotKey) -> Option<&Slot> {
        self.slots.get(key)?.as_ref()
    }

    /// Places `slot` in the first free slot (or a new one); returns its key.
    pub(crate) fn insert(&mut self, slot: Slot) -> SlotKey {
        match self.slots.position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => self.slots.push(Some(slot)),
        }
    }

    /// Registers slot `key`'s socket and its monitor in the epoll set.
    pub(crate) fn register(&self, key: SlotKey) -> std::io::Result<()> {
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
    pub(crate) fn remove(&mut self, key: SlotKey) -> Option<Slot> {
        self.ready.forget(key);
        let slot = self.slots.get_mut(key).and_then(Option::take)?;
        self.ready.deregister(&slot.socket);
        if let Some(m) = &slot.monitor {
            self.ready.deregister(m);
        }
        Some(slot)
    }

    /// The receive scheduler's handle of slot `key`, if it is a bound socket.
    pub(crate) fn shared_id(&self, key: SlotKey) -> Option<SharedSocketId> {
        self.get(key)?.shared
    }

    /// Sends a record on a slot's socket, prefixed by a routing id when the socket is a
    /// ROUTER, and marks the socket for a `ZMQ_EVENTS` check (the send may have consumed the
    /// signal of a record that arrived meanwhile).
    pub(crate) fn send(
        &self,
        slot: SlotKey,
        route: Option<&[u8]>,
        frames: &[Vec<u8>],
    ) -> Result<(), SocketSendError> {
        match self.get(slot) {
            Some(s) => {
                let r = send_routed(&s.socket, route, frames);
                self.ready.touch(Watch::Socket(slot));
                r
            }
            _ => Err(SocketSendError::Unreachable),
        }
    }

    /// Sends one message of borrowed parts on a slot's socket, prefixed by a routing id
    /// when the socket is a ROUTER (the one-way burst's MESSAGEs and PACKs, whose payloads go
    /// to libzmq as they are), and marks the socket for a `ZMQ_EVENTS` check as
    /// [`SocketSet::send`] does.
    pub(crate) fn send_parts(
        &self,
        slot: SlotKey,
        route: Option<&[u8]>,
        parts: &[&[u8]],
    ) -> Result<(), SocketSendError> {
        let Some(s) = self.get(slot) else {
            return Err(SocketSendError::Unreachable);
        };
        let r = match (route, parts) {
            (Some(route), [a, b]) => s.socket.send(&[route, a, b]),
            (Some(route), _) => {
                let mut all = Vec::with_capacity(parts.len() + 1);
                all.push(route);
                all.extend_from_slice(parts);
                s.socket.send(&all)
            }
            (None, _) => s.socket.send(parts),
        };
        self.ready.touch(Watch::Socket(slot));
        r
    }

    /// One record from a socket without blocking, if any. "Nothing" (or an error) takes the
    /// socket out of the readable set until its descriptor fires or a check finds a record.
    pub(crate) fn recv_one(&mut self, slot: SlotKey) -> Option<Vec<Frame>> {
        let s = self.get(slot)?;
        // CURVE: a bound socket's records keep their message properties until the receive
        // loop knows whether they come from an admitted connection (`receive`): a HELLO's
        // carries the client's verified key.
        let got = if !self.curve || !matches!(s.role, SlotRole::Bound(_)) {
            s.socket.try_recv()
        } else {
            s.socket.try_recv_record(false)
        };
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

    /// The events queued on a slot's monitor, read until it has none (its descriptor fires
    /// again only for events after a check, so the monitor is marked for one).
    pub(crate) fn monitor_events(&mut self, slot: SlotKey) -> Vec<(MonitorEvent, u32)> {
        let mut events = Vec::new();
        if let Some(m) = self.get(slot).and_then(|s| s.monitor.as_ref()) {
            while let Some(ev) = m.try_event() {
                events.extend(ev.monitor_event());
            }
            self.ready.touch(Watch::Monitor(slot));
        }
        events
    }

    /// Keeps the monitor of a dialled socket of link `k` that was closed before it served a
    /// connection, until libzmq confirms the close (it does not hold the link's redial).
    pub(crate) fn park_closing(&mut self, k: LinkKey, m: MonitorSocket) {
        if let Err(e) = self.ready.register(&m, Watch::Closing(k)) {
            tracing::debug!(error = %e, "closing monitor not watched");
        }
        self.overdue_closing.push(m);
    }

    /// Drops the overdue closing monitors whose close libzmq has confirmed by now.
    pub(crate) fn settle_overdue_closing(&mut self) {
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
}

/// Sends a record, prefixed by a routing id when the socket is a ROUTER.
pub(crate) fn send_routed(
    socket: &ZmqSocket,
    route: Option<&[u8]>,
    frames: &[Vec<u8>],
) -> Result<(), SocketSendError> {
    let mut refs: Vec<&[u8]> = Vec::with_capacity(frames.len() + 1);
    if let Some(r) = route {
        refs.push(r);
    }
    refs.extend(frames.iter().map(Vec::as_slice));
    socket.send(&refs)
}

/// A record read by the receive loop, waiting for its unit's turn. An enum rather than a
/// struct of both shapes: staged records move through the scheduler's queue and actions by
/// value, and a PACK's records are the common case of a busy link.
pub(crate) enum Staged {
    /// A record as libzmq gave it.
    Frames {
        /// The routing id split off a bound socket's record.
        route: Option<Frame>,
        /// The record's frames.
        frames: Vec<Frame>,
    },
    /// One MESSAGE of a PACK: a PACK is staged as its records, so the scheduler's caps count
    /// each (MISSION R2, WIRE.md §4.18).
    Packed(Packed),
    /// One PUBLISH of a PUBPACK, staged on its own likewise (WIRE.md §7.5).
    Published(Published),
}

/// One MESSAGE of a PACK, staged on its own.
pub(crate) struct Packed {
    /// The link the PACK came on, and its connection then: the record is that connection's
    /// only, so it changes nothing once another connection is the link's current one.
    pub(crate) link: LinkKey,
    pub(crate) conn: ConnId,
    /// The PACK's channel, one buffer shared by its records.
    pub(crate) channel: bytes::Bytes,
    /// This record's payload: a slice of the PACK's frame 1.
    pub(crate) payload: bytes::Bytes,
}
