//! Timers: the earliest deadline the loop may sleep to, and what runs when deadlines come
//! due: call deadlines here, then the node core's timers in its order
//! ([`core::handle_timeout`]: liveness probes and beacons, probe deadlines, handshake
//! timeouts, redials, close confirmations, SUB re-opens, disconnect sweeps), with the
//! beacons and SUB re-opens it asks for. One table holds every link's and subscription's
//! earliest deadline, derived again for exactly the ones a turn changed.

use std::time::Instant;

use super::{IoThread, SubKey};
use crate::proto::liveness::LinkKey;
use crate::proto::node::core;

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
        // Liveness, handshake timeouts, redials, close confirmations, SUB re-opens and
        // disconnect sweeps: as the node core orders them.
        core::handle_timeout(self, now);
    }

    /// Opens subscription `i`'s socket again if it has none, is not retired and its retry
    /// time has come (MISSION L5).
    pub(super) fn open_due_sub(&mut self, i: SubKey, now: Instant) {
        if self.core.subs[i].is_open_due(now) {
            self.open_sub(i, now);
        }
    }

    /// Sends the publisher's beacon if liveness entry `key` is the publisher's.
    pub(super) fn send_beacon(&mut self, key: LinkKey) {
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
