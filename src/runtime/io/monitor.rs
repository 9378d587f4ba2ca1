//! Monitor events: what libzmq's socket monitors say about the connections of dialled, bound
//! and SUB sockets (handshakes done or failed, refusals in the peer's ZAP handler,
//! disconnects), acted on in order, and the stop of a dialled ROUTER's monitor once its
//! connection's loss reaches it in band.

use std::time::Instant;

use super::parts::link::LinkKind;
use super::parts::ready::Watch;
use super::parts::sockets::SlotRole;
use super::{IoThread, SlotKey, DRAIN_BEFORE_DISCONNECT};
use crate::proto::security::HandshakeFailure;
use crate::proto::state::FailureReason;
use crate::runtime::socket::MonitorEvent;

impl IoThread {
    /// Reads and acts on the events queued on a slot's monitor; a dialled ROUTER's monitor
    /// is stopped once its connection's handshake is done (see [`IoThread::stop_monitor`]).
    pub(super) fn drain_monitor(&mut self, slot: SlotKey, now: Instant) {
        self.monitor_events(slot, now);
        self.stop_monitor(slot, now);
    }

    /// A dialled ROUTER whose handshake is done (HELLO sent) needs its monitor no longer:
    /// the loss of its connection reaches it in band (`ROUTER_NOTIFY`, see
    /// [`IoThread::on_router_notice`]), so the monitor is stopped and its two descriptors go.
    /// Events libzmq raised before the stop (a disconnect among them) are acted on here.
    fn stop_monitor(&mut self, slot: SlotKey, now: Instant) {
        let Some(s) = self.sockets.get(slot) else {
            return;
        };
        let SlotRole::Dialled(k) = s.role else {
            return;
        };
        // A RouteMesh lane: a ROUTER with ROUTER_NOTIFY (a ClientServer DEALER keeps its).
        let done = s.monitor.is_some()
            && matches!(self.links[k].kind, LinkKind::MeshDial { .. })
            && self.links[k]
                .conn
                .as_ref()
                .is_some_and(|c| c.slot == slot && c.hello_sent);
        if !done {
            return;
        }
        let Some(Some(s)) = self.sockets.slots.get_mut(slot) else {
            return;
        };
        let Some(m) = s.monitor.take() else {
            return;
        };
        self.sockets.ready.deregister(&m);
        self.sockets.ready.forget_monitor(slot);
        match m.stop(&s.socket) {
            Ok((events, room)) => {
                s.room = Some(room);
                self.act_on_monitor_events(slot, events, now);
            }
            Err((e, m)) => {
                // It keeps running: the node goes on with it as before.
                tracing::debug!(error = %e, link = %k, "monitor not stopped");
                let registered = self.sockets.ready.register(&m, Watch::Monitor(slot));
                if let Err(e) = registered {
                    tracing::debug!(error = %e, "monitor not watched");
                }
                s.monitor = Some(m);
            }
        }
    }

    /// Reads the events queued on a slot's monitor and acts on them.
    fn monitor_events(&mut self, slot: SlotKey, now: Instant) {
        let events = self.sockets.monitor_events(slot);
        self.act_on_monitor_events(slot, events, now);
    }

    /// Acts on events read from a slot's monitor, in order.
    fn act_on_monitor_events(
        &mut self,
        slot: SlotKey,
        events: Vec<(MonitorEvent, u32)>,
        now: Instant,
    ) {
        for (ev, value) in events {
            let Some(s) = self.sockets.get(slot) else {
                return;
            };
            if let SlotRole::Bound(_) = s.role {
                self.gate_monitor_event(slot, ev, value, now);
                continue;
            }
            let Some(s) = self.sockets.get(slot) else {
                return;
            };
            match (s.role, ev) {
                (SlotRole::Dialled(k), MonitorEvent::HandshakeSucceeded) => self.send_hello(k),
                // The peer refused this connection in its transport handshake (its ZAP
                // handler): libzmq will not retry it; the link dials again after its backoff.
                (SlotRole::Dialled(k), MonitorEvent::AuthFailed) => {
                    let (reason, detail) = if value == 400 {
                        (
                            FailureReason::SecurityFailure,
                            "the peer refused this node's credentials (ZAP 400: under CURVE, \
                             this node's key is not on its allow-list)"
                                .to_owned(),
                        )
                    } else {
                        (
                            FailureReason::TransportError,
                            format!(
                                "the peer refused the connection in its handshake (ZAP {value})"
                            ),
                        )
                    };
                    self.fail_link(k, reason, &detail, now);
                }
                // The transport handshake failed: under CURVE (or against a CURVE node)
                // that is the keys; libzmq would only try again with the same keys.
                (SlotRole::Dialled(k), MonitorEvent::HandshakeFailed) => {
                    if let Some(detail) = self.handshake_security_detail(value) {
                        self.fail_link(k, FailureReason::SecurityFailure, &detail, now);
                    }
                }
                (SlotRole::Dialled(k), MonitorEvent::Disconnected) => {
                    // Records that arrived before the disconnect come first: an orderly CLOSE
                    // explains the disconnect better than the disconnect itself.
                    for _ in 0..DRAIN_BEFORE_DISCONNECT {
                        let Some(frames) = self.sockets.recv_one(slot) else {
                            break;
                        };
                        self.on_frames(slot, frames, now);
                    }
                    let still = self.links[k]
                        .conn
                        .as_ref()
                        .is_some_and(|c| c.slot == slot && c.hello_sent);
                    if still {
                        self.fail_link(k, FailureReason::TransportError, "disconnected", now);
                    }
                }
                (SlotRole::Sub(i), MonitorEvent::HandshakeSucceeded) => {
                    self.fanout.subs[i].connected = true;
                }
                // A publisher that does not hold the key this node expects of it, or refuses
                // this node (its allow-list): nothing of it is ever read.
                (SlotRole::Sub(i), MonitorEvent::HandshakeFailed) => {
                    if let Some(detail) = self.handshake_security_detail(value) {
                        self.fail_sub(i, FailureReason::SecurityFailure, &detail, now);
                    }
                }
                (SlotRole::Sub(i), MonitorEvent::AuthFailed) => {
                    let detail = format!(
                        "the publisher refused this node's credentials (ZAP {value}): not on \
                         its allow-list"
                    );
                    self.fail_sub(i, FailureReason::SecurityFailure, &detail, now);
                }
                // Before a handshake, a disconnect is a failed connect attempt that libzmq
                // retries itself; after one, the publisher is gone (MISSION L6).
                (SlotRole::Sub(i), MonitorEvent::Disconnected) if self.fanout.subs[i].connected => {
                    self.fail_sub(
                        i,
                        FailureReason::TransportError,
                        "publisher disconnected",
                        now,
                    );
                }
                _ => {}
            }
        }
    }

    /// What a failed transport handshake of a dialled or SUB socket (event value `value`)
    /// says about security, if anything: a mechanism mismatch (one side CURVE, the other
    /// not), failed CURVE cryptography, and under CURVE a connection the node at the other
    /// end closed during the handshake (it does not hold the key expected of it, so it could
    /// not open this node's HELLO). `None`: not a security failure; the link's own timers and
    /// disconnect handling deal with it.
    pub(super) fn handshake_security_detail(&self, value: u32) -> Option<String> {
        match (HandshakeFailure::of(value), self.local.curve.is_some()) {
            (HandshakeFailure::MechanismMismatch, true) => {
                Some("the node at this endpoint does not run CURVE (mechanism mismatch)".into())
            }
            (HandshakeFailure::MechanismMismatch, false) => Some(
                "the node at this endpoint runs CURVE and this node does not (mechanism \
                 mismatch)"
                    .into(),
            ),
            (HandshakeFailure::Cryptographic, _) => Some(format!(
                "the CURVE handshake failed (libzmq code {value:#x}): the node at this endpoint \
                 does not hold the key expected of it"
            )),
            (HandshakeFailure::Closed, true) => Some(
                "closed during the CURVE handshake: the node at this endpoint does not hold the \
                 key expected of it (or this node's key file pairs a public key with another \
                 secret key)"
                    .into(),
            ),
            _ => None,
        }
    }
}
