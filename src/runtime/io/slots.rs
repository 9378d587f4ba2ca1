//! Sockets in slots: binding the node's endpoints, placing a socket and its monitor in the
//! epoll set and taking them out again, and the one send and receive primitive of a slot.
//! A send or receive marks its socket for a `ZMQ_EVENTS` check (see [`super::parts::ready`]).

use super::parts::sockets::{close_stopping_monitor, Slot, SlotRole, Unit};
use super::{
    Gated, IoThread, LinkKey, SlotKey, BOUND_ID_APPLICATION, BOUND_ID_COMPLETION, BOUND_ID_SERVER,
};
use crate::proto::sched::Source as SchedSource;
use crate::runtime::error::NodeError;
use crate::runtime::records::Lane;
use crate::runtime::socket::SocketSendError;
use crate::runtime::transport::{SocketKind, SocketRole, Transport, TransportSocket};

impl IoThread {
    /// Binds lane `lane`'s ROUTER to `ep` (a wildcard endpoint is known by what the
    /// transport bound) and places it in a slot.
    pub(super) fn bind(&mut self, ep: &str, lane: Lane) -> Result<SlotKey, NodeError> {
        let bind_err = |source| NodeError::bind(ep, source);
        let bound_id = match lane {
            Lane::Application => BOUND_ID_APPLICATION,
            Lane::Completion => BOUND_ID_COMPLETION,
            Lane::ClientServer => BOUND_ID_SERVER,
        };
        // A bound ROUTER's ZAP domain is its routing id: the ZAP handler knows by it which
        // socket a connection arrives on (gate).
        let domain = String::from_utf8_lossy(bound_id).into_owned();
        let m = self
            .sockets
            .contexts
            .socket(
                SocketKind::Router,
                SocketRole::Bound {
                    domain: Some(&domain),
                },
            )
            .map_err(bind_err)?;
        let socket = m.socket;
        socket.set_routing_id(bound_id).map_err(bind_err)?;
        if let Some(pair) = &self.local.curve {
            socket.secure_server(pair).map_err(bind_err)?;
        }
        let endpoint = socket.bind(ep).map_err(bind_err)?;
        let slot = self
            .add_slot(Slot {
                socket,
                monitor: Some(m.monitor),
                room: None,
                role: SlotRole::Bound(lane),
                endpoint,
                shared: None,
            })
            .map_err(NodeError::poller)?;
        self.core
            .accepting
            .gate
            .add_domain(&domain, Gated::Bound(slot));
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
                        self.sockets.park_closing(k, m);
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
            SlotRole::Bound(_) => Some(self.receiving.sched.add_shared_socket()),
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
        if let Err(e) = self.receiving.sched.add_unit(unit, source) {
            tracing::debug!(error = ?e, "scheduler unit not added");
        }
        key
    }

    pub(super) fn take_slot(&mut self, key: SlotKey) -> Option<Slot> {
        match self.sockets.shared_id(key) {
            // Records staged for its peers go with the socket.
            Some(sid) => {
                self.sockets.shared.remove(&sid);
                drop(self.receiving.sched.remove_shared_socket(sid));
            }
            None => drop(self.receiving.sched.remove_unit(Unit::Socket(key))),
        }
        self.core.accepting.inbound.remove(&key);
        self.core.timers.forget_sweeps(key);
        self.sockets.remove(key)
    }

    pub(super) fn send_frames_on_link(
        &self,
        k: LinkKey,
        frames: &[Vec<u8>],
    ) -> Result<(), SocketSendError> {
        let Some(c) = self.core.links.get(k).and_then(|l| l.conn.as_ref()) else {
            return Err(SocketSendError::Unreachable);
        };
        self.sockets.send(c.slot, c.route.as_deref(), frames)
    }

    pub(super) fn send_on_link(
        &mut self,
        k: LinkKey,
        frames: Vec<Vec<u8>>,
    ) -> Result<(), SocketSendError> {
        self.send_frames_on_link(k, &frames)
    }
}
