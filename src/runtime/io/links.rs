//! Links and dialling: a link is a configured peer lane, a configured server, or a peer's
//! inbound connection; it holds at most one current physical connection. Dialling, closing
//! a dialled socket and waiting for libzmq to confirm the close before a replacement is
//! dialled (F3). What a dial uses, what a failure does to the links and what a disconnect
//! sweep sends are the node core's decisions ([`crate::proto::node::links`]), and so are
//! failing a connection at once (MISSION F1, L6) with the order of its consequences
//! ([`crate::proto::node::core::fail_link`]) and the bound-socket sweeps that detect a
//! vanished inbound connection whose notice libzmq dropped
//! ([`crate::proto::node::core::check_bound_disconnects`]); this file makes and closes the
//! sockets. What the sockets' monitors say is acted on above this, in `io/monitor.rs`; the
//! in-band notices of a connection's loss in `io/receive.rs`.
use std::time::Instant;

use super::parts::ready::Watch;
use crate::config::NodeConfig;
use crate::proto::node::core::Shell;
use crate::proto::node::links::{self, DialPlan, DialSocket, DialTargets, StateEvent};

use super::parts::sockets::{Slot, SlotRole};
use super::{Host, IoThread, LinkKey, SlotKey};
use crate::proto::security::PublicKey;
use crate::proto::state::FailureReason;
use crate::runtime::records::Lane;
use crate::runtime::transport::{SocketKind, SocketRole, Transport, TransportSocket};

/// The configuration as a dial reads it (peers and servers discovery appended included).
impl DialTargets for NodeConfig {
    fn peer_endpoint(&self, peer: usize, lane: Lane) -> Option<&str> {
        self.peers.get(peer).map(|p| match lane {
            Lane::Completion => p.completion.as_str(),
            _ => p.application.as_str(),
        })
    }

    fn peer_rid(&self, peer: usize) -> Option<&str> {
        self.peers.get(peer).map(|p| p.rid.as_str())
    }

    fn server(&self, server: usize) -> Option<(Option<&str>, &str)> {
        self.servers
            .get(server)
            .map(|s| (s.rid.as_deref(), s.endpoint.as_str()))
    }

    fn endpoint_key(&self, endpoint: &str) -> Option<PublicKey> {
        self.security.endpoint_key(endpoint)
    }
}

impl IoThread {
    /// The endpoint dialled link `k` dials (`None` for an inbound link).
    pub(super) fn link_endpoint(&self, k: LinkKey) -> Option<String> {
        links::dial_target(&self.core.links[k].kind, &self.local.cfg).map(|(ep, ..)| ep.to_owned())
    }

    /// Dials link `k` as the node core plans it ([`links::plan_dial`]).
    pub(super) fn dial(&mut self, k: LinkKey, now: Instant) {
        let curve = self.local.curve.as_ref().map(|_| &self.core.accepting.gate);
        let plan = links::plan_dial(
            &self.core.links[k].kind,
            &self.local.cfg,
            &self.core.discovered,
            curve,
        );
        let dial = match plan {
            DialPlan::Nothing => return,
            DialPlan::Refuse(detail) => {
                self.refuse_dial(k, &detail, now);
                return;
            }
            DialPlan::Dial(dial) => dial,
        };
        let id = self.local.fresh_conn_id();
        let routing = dial.routing_id(self.local.me.generation, id);
        let kind = match dial.socket {
            DialSocket::Router => SocketKind::Router,
            DialSocket::Dealer => SocketKind::Dealer,
        };
        let endpoint = dial.endpoint.clone();
        // Its monitor reports the socket's own close, confirmed before any replacement is
        // dialled (MISSION F3).
        let m = match self.sockets.contexts.socket(kind, SocketRole::Dialled) {
            Ok(m) => m,
            Err(e) => {
                self.dial_failed(k, e, &endpoint, now);
                return;
            }
        };
        let curve = match (&self.local.curve, &dial.server_key) {
            (Some(pair), Some(key)) => m.socket.secure_client(pair, key),
            _ => Ok(()),
        };
        let configured = curve
            .and_then(|()| m.socket.set_routing_id(&routing))
            .and_then(|()| m.socket.connect(&endpoint));
        if let Err(e) = configured {
            // The socket goes; its monitor waits for libzmq's confirmation like any other.
            drop(m.socket);
            self.sockets.park_closing(k, m.monitor);
            self.dial_failed(k, e, &endpoint, now);
            return;
        }
        self.socket_opened(now);
        let added = self.add_slot(Slot {
            socket: m.socket,
            monitor: Some(m.monitor),
            room: None,
            role: SlotRole::Dialled(k),
            endpoint: endpoint.clone(),
            shared: None,
        });
        let slot = match added {
            Ok(slot) => slot,
            Err(e) => {
                self.core.links[k].unwatched(now);
                tracing::warn!(error = %e, endpoint, "cannot watch dialled socket");
                return;
            }
        };
        let event = self.core.links[k].dialled(dial, id, slot, now);
        self.emit_link_state(k, event);
    }

    /// Hands link `k`'s state change to the application.
    pub(super) fn emit_link_state(&mut self, k: LinkKey, event: StateEvent) {
        Shell::emit_state(self, k, event.state, event.reason, &event.detail);
    }

    /// Link `k` cannot be dialled under CURVE ([`Link::refuse_dial`]).
    fn refuse_dial(&mut self, k: LinkKey, detail: &str, now: Instant) {
        let Some(event) = self.core.links[k].refuse_dial(detail, now) else {
            return;
        };
        tracing::warn!(detail, "not dialled");
        self.emit_link_state(k, event);
        metrics::counter!("zmesh_link_failures_total", "reason" => FailureReason::SecurityFailure.as_str())
            .increment(1);
    }

    /// Closes link `k`'s dialled socket `slot` if `slot` is that (true), keeping its
    /// monitor until libzmq confirms the close; false if `slot` is not link `k`'s own socket.
    pub(super) fn close_dialled(&mut self, k: LinkKey, slot: SlotKey) -> bool {
        let dialled = matches!(self.sockets.get(slot), Some(s) if s.role == SlotRole::Dialled(k));
        if !dialled {
            return false;
        }
        if let Some(mut slot) = self.take_slot(slot) {
            // A socket whose monitor was stopped after its handshake gets one again for
            // its close; if it cannot (no descriptors), the close goes
            // unconfirmed and the link dials again after its backoff alone. A node that
            // stops dials nothing again: no confirmation is needed then.
            let redial = self.local.host != Host::Stopped;
            if let (None, Some(room), true) = (slot.monitor.as_ref(), slot.room.take(), redial) {
                match self.sockets.contexts.watch_close(&slot.socket, room) {
                    Ok(m) => slot.monitor = Some(m),
                    Err(e) => tracing::debug!(error = %e, link = %k, "close not monitored"),
                }
            }
            // Closing our own dialled socket: keep its monitor until libzmq confirms the
            // close, and dial no replacement before that (MISSION F3).
            if let Some(m) = slot.monitor {
                if let Err(e) = self.sockets.ready.register(&m, Watch::Closing(k)) {
                    // Unwatched, the link dials again at the time bound, and the monitor is
                    // checked on the timer passes after that (overdue).
                    tracing::debug!(error = %e, "closing monitor not watched");
                }
                self.core.links[k].closing = Some(Instant::now());
                // Never the case (a link dials only once its last close is settled); if
                // it were, that monitor must still wait for libzmq's confirmation.
                if let Some(earlier) = self.sockets.closing.insert(k, m) {
                    self.sockets.overdue_closing.push(earlier);
                }
            }
            slot.socket.close();
        }
        true
    }

    /// libzmq confirmed the close of link `k`'s closed socket (or the node is shutting down
    /// and terminates the contexts next): its monitor goes, and the link may be dialled again
    /// at its retry time.
    pub(super) fn confirm_close(&mut self, k: LinkKey) {
        if let Some(l) = self.core.links.get_mut(k) {
            l.closing = None;
        }
        if let Some(m) = self.sockets.closing.remove(&k) {
            self.sockets.ready.deregister(&m);
        }
    }

    /// Link `k`'s closed socket was not confirmed closed within [`CLOSE_CONFIRM_MAX`](crate::proto::node::link::CLOSE_CONFIRM_MAX): the
    /// link may be dialled again, its old monitor is kept until libzmq confirms after all.
    pub(super) fn close_overdue(&mut self, k: LinkKey) {
        if let Some(l) = self.core.links.get_mut(k) {
            l.closing = None;
        }
        if let Some(m) = self.sockets.closing.remove(&k) {
            tracing::debug!(link = %k, "close not confirmed in time; dialling anyway");
            self.sockets.overdue_closing.push(m);
        }
    }
}
