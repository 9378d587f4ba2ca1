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
use crate::runtime::socket::{guarded, set_curve_server, CLOSE_LINGER_MS};

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
        if let Some(pair) = &self.local.curve {
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
