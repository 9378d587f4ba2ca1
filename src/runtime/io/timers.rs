//! Timers: the earliest deadline the loop may sleep to, and what runs when deadlines come
//! due (call deadlines, liveness probes and beacons, handshake timeouts, redials, close
//! confirmations, SUB re-opens, disconnect sweeps). One table holds every link's and
//! subscription's earliest deadline, derived again for exactly the ones a turn changed.

use std::time::Instant;

use super::{IoThread, LiveOwner};
use crate::proto::liveness::{LivenessEvent, ProbeEvent, Transmit};
use crate::proto::node::core;
use crate::proto::state::FailureReason;
use crate::runtime::records::{self};

impl IoThread {
    /// The earliest instant any timer of the node is due.
    pub(super) fn poll_timeout(&mut self) -> Option<Instant> {
        self.sync_links();
        [
            self.core.liveness.table().poll_timeout(),
            self.caller.calls().poll_timeout(),
            self.callee.serving().poll_timeout(),
            self.core.timers.next(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub(super) fn run_timers(&mut self, now: Instant) {
        // Call deadlines and serve-side ttl refusals and drain bound.
        self.caller.calls_mut().handle_timeout(now);
        self.callee.serving_mut().handle_timeout(now);
        self.drain_calls(now);
        // Every liveness machine of the node, from one table (MISSION L8). Coalesced: a
        // wake-up for a due timer also starts every probe and beacon due within the next
        // `COALESCE_WINDOW` (never late, at most that early; deadlines never early), so that
        // thousands of connections' probe cycles a few milliseconds apart cost one wake-up
        // per window instead of one each, and their ACKs come back together.
        self.core.liveness.table_mut().handle_timeout_coalesced(now);
        while let Some(t) = self.core.liveness.table_mut().poll_transmit(now) {
            match t {
                Transmit::Probe { key, id, .. } => {
                    if let Some(LiveOwner::Link(k)) = self.core.liveness.owner(key) {
                        self.send_liveness(k, records::probe(id));
                    }
                }
                Transmit::Beacon { key } => {
                    if self
                        .fanout
                        .publisher
                        .as_ref()
                        .is_some_and(|p| p.live == key)
                    {
                        if let Some(p) = self.fanout.publisher.as_mut() {
                            p.send_beacon();
                        }
                    }
                }
            }
        }
        self.drain_liveness_events(now);
        // Only the links and subscriptions whose deadline is due are looked at (an idle node
        // has none set at all).
        self.sync_links();
        if !self.core.timers.due(now) {
            return;
        }
        // Handshake timeouts.
        for k in self.core.timers.due_links(now) {
            if self.core.links[k].is_handshake_overdue(now) {
                core::fail_link(
                    self,
                    k,
                    FailureReason::TransportError,
                    "handshake timed out",
                    now,
                );
            }
        }
        // Reconnects and overdue close confirmations, also of links the timeouts above made
        // due.
        self.sync_links();
        for k in self.core.timers.due_links(now) {
            if self.core.links[k].is_redial_due(now) {
                self.dial(k, now);
            }
            if self.core.links[k].is_close_overdue(now) {
                self.close_overdue(k);
            }
        }
        self.sockets.settle_overdue_closing();
        // Fanout subscriptions without a socket get a new one (MISSION L5).
        self.sync_links();
        for i in self.core.timers.due_subs(now) {
            let s = &self.fanout.subs[i];
            if s.slot.is_none() && !s.retired && now >= s.retry_at {
                self.open_sub(i, now);
            }
        }
        // The fallback after bound-socket disconnects, for a notice libzmq dropped.
        for slot in self.core.timers.take_due_sweeps(now) {
            core::check_bound_disconnects(self, slot, now);
        }
    }

    /// Acts on the liveness table's verdicts.
    fn drain_liveness_events(&mut self, now: Instant) {
        while let Some((key, ev)) = self.core.liveness.table_mut().poll_event() {
            match (self.core.liveness.owner(key), ev) {
                (
                    Some(LiveOwner::Link(k)),
                    LivenessEvent::Probe(ProbeEvent::DeadlineExceeded { .. }),
                ) => {
                    core::fail_link(
                        self,
                        k,
                        FailureReason::DeadlineExceeded,
                        "no valid ACK for 15 s",
                        now,
                    );
                }
                (Some(LiveOwner::Sub(i)), LivenessEvent::Publisher(ev)) => {
                    self.on_publisher_event(i, ev, now);
                }
                (owner, ev) => tracing::debug!(?owner, ?ev, "liveness event without an owner"),
            }
        }
    }
}
