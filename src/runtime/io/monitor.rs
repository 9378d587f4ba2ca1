//! Monitor events: what libzmq's socket monitors say about the connections of dialled, bound
//! and SUB sockets (handshakes done or failed, refusals in the peer's ZAP handler,
//! disconnects), acted on in order as the core says ([`core::handle_monitor_event`] for a
//! dialled or SUB socket, the gate for a bound socket), with the records read before a
//! disconnect is acted on, and the stop of a dialled ROUTER's monitor once its connection's
//! loss reaches it in band.

use std::time::Instant;

use super::parts::ready::Watch;
use super::parts::sockets::SlotRole;
use super::{IoThread, SlotKey, DRAIN_BEFORE_DISCONNECT};
use crate::proto::node::core;
use crate::proto::node::keys::SubKey;
use crate::proto::node::monitor::Watching;
use crate::proto::transport::MonitorEvent;
use crate::runtime::socket::Sockets;
use crate::runtime::transport::{SocketEvent, Transport};

impl IoThread {
    /// Reads and acts on the events queued on a slot's monitor; a dialled ROUTER's monitor
    /// is stopped once its connection's handshake is done (see [`IoThread::stop_monitor`]).
    pub(super) fn drain_monitor(&mut self, slot: SlotKey, now: Instant) {
        self.monitor_events(slot, now);
        self.stop_monitor(slot, now);
    }

    /// A dialled ROUTER whose handshake is done (HELLO sent,
    /// [`Link::monitor_done_on`](crate::proto::node::link::Link::monitor_done_on)) needs its
    /// monitor no longer: the loss of its connection reaches it in band (`ROUTER_NOTIFY`, see
    /// [`core::handle_dialled_record`]), so the monitor is stopped and its two descriptors go.
    /// Events libzmq raised before the stop (a disconnect among them) are acted on here.
    fn stop_monitor(&mut self, slot: SlotKey, now: Instant) {
        let Some(s) = self.sockets.get(slot) else {
            return;
        };
        let SlotRole::Dialled(k) = s.role else {
            return;
        };
        if s.monitor.is_none() || !self.core.links[k].monitor_done_on(slot) {
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
        match Sockets::stop_monitor(&s.socket, m) {
            Ok((events, room)) => {
                s.room = Some(room);
                let events = events
                    .iter()
                    .filter_map(SocketEvent::monitor_event)
                    .collect();
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

    /// Acts on events read from a slot's monitor, in order: a bound socket's go to its gate,
    /// a dialled or SUB socket's to the node core ([`core::handle_monitor_event`]).
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
            let watching = match s.role {
                SlotRole::Bound(_) => {
                    self.gate_monitor_event(slot, ev, value, now);
                    continue;
                }
                SlotRole::Dialled(k) => Watching::Dialled(k),
                SlotRole::Sub(sub) => Watching::Sub {
                    sub,
                    connected: self.core.subs[sub].connected,
                },
            };
            core::handle_monitor_event(self, slot, watching, (ev, value), now);
        }
    }

    /// Reads and handles up to [`DRAIN_BEFORE_DISCONNECT`] records still queued on socket
    /// `slot`, before its disconnect is acted on.
    pub(super) fn drain_before_disconnect(&mut self, slot: SlotKey, now: Instant) {
        for _ in 0..DRAIN_BEFORE_DISCONNECT {
            let Some(frames) = self.sockets.recv_one(slot) else {
                break;
            };
            self.on_frames(slot, frames, now);
        }
    }

    /// Subscription `sub`'s transport handshake is done.
    pub(super) fn sub_connected(&mut self, sub: SubKey) {
        self.core.subs[sub].connected = true;
    }
}
