//! Timers: the earliest deadline the loop may sleep to, and what runs when deadlines come
//! due (call deadlines, liveness probes and beacons, handshake timeouts, redials, close
//! confirmations, SUB re-opens, disconnect sweeps). Per-link timers are scanned only after a
//! link changed or the earliest of them came due.

use std::time::Instant;

use super::links::note;
use super::{IoThread, LiveOwner, SlotKey, CLOSE_CONFIRM_MAX, HANDSHAKE_TIMEOUT, SWEEP_DELAYS};
use crate::proto::liveness::{LivenessEvent, ProbeEvent, PublisherEvent, Transmit};
use crate::proto::state::{ConnState, FailureReason};
use crate::runtime::link::LinkId;
use crate::runtime::records::{self};

/// The per-link timers as last scanned, and the disconnect sweeps of the bound sockets.
///
/// The per-link and per-subscription timers (handshake timeouts, redials, close
/// confirmations, SUB re-opens) live in the links and subscriptions themselves; this holds
/// their earliest deadline from the last walk over them, and whether something changed
/// since. Every change that can set or advance one of those timers marks it changed; while it
/// is not and no deadline is due, a loop turn does not look at the links at all (an idle node
/// with thousands of links would otherwise walk them on every wake-up).
pub(super) struct LinkTimers {
    /// The earliest deadline of the last scan; `None` if none is set.
    deadline: Option<Instant>,
    /// A link, subscription or sweep changed since that scan.
    changed: bool,
    /// Disconnect sweeps: when, which bound socket, which step of [`SWEEP_DELAYS`].
    sweeps: Vec<(Instant, SlotKey, usize)>,
}

impl LinkTimers {
    /// Nothing scanned yet: the first look scans.
    pub(super) fn new() -> LinkTimers {
        LinkTimers {
            deadline: None,
            changed: true,
            sweeps: Vec::new(),
        }
    }

    /// Something changed: scan again before trusting the last scan.
    pub(super) fn changed(&mut self) {
        self.changed = true;
    }

    /// True if the timers must be walked at `now`: something changed, or the earliest is due.
    fn due(&self, now: Instant) -> bool {
        self.changed || self.deadline.is_some_and(|t| now >= t)
    }

    /// A bound socket reported a disconnect at `now`: its first sweep is due now.
    pub(super) fn start_sweep(&mut self, slot: SlotKey, now: Instant) {
        self.sweeps.push((now, slot, 0));
        self.changed = true;
    }

    /// The sweeps of socket `slot` go (the socket is gone).
    pub(super) fn forget_sweeps(&mut self, slot: SlotKey) {
        self.sweeps.retain(|s| s.1 != slot);
    }

    /// The sockets whose sweep is due at `now`, each with its next step scheduled from `now`.
    fn take_due_sweeps(&mut self, now: Instant) -> Vec<SlotKey> {
        let due: Vec<(SlotKey, usize)> = self
            .sweeps
            .iter()
            .filter(|s| now >= s.0)
            .map(|s| (s.1, s.2))
            .collect();
        self.sweeps.retain(|s| now < s.0);
        for &(slot, step) in &due {
            if let Some(d) = SWEEP_DELAYS.get(step + 1) {
                self.sweeps
                    .push((now + (*d - SWEEP_DELAYS[step]), slot, step + 1));
            }
        }
        due.into_iter().map(|(slot, _)| slot).collect()
    }

    /// The earliest sweep.
    fn next_sweep(&self) -> Option<Instant> {
        self.sweeps.iter().map(|s| s.0).min()
    }

    /// Every sweep goes (the node stops).
    pub(super) fn clear(&mut self) {
        self.sweeps.clear();
    }
}

impl IoThread {
    /// The earliest instant any timer of the node is due.
    pub(super) fn poll_timeout(&mut self) -> Option<Instant> {
        if self.link_timers.changed {
            self.link_timers.changed = false;
            self.link_timers.deadline = self.scan_link_timers();
        }
        [
            self.liveness.table().poll_timeout(),
            self.caller.poll_timeout(),
            self.callee.poll_timeout(),
            self.link_timers.deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Notes that a link, a subscription or the sweeps changed: their timers are scanned
    /// again before the loop next sleeps or trusts the last scan.
    pub(super) fn timers_changed(&mut self) {
        self.link_timers.changed();
    }

    /// The earliest per-link, per-subscription or sweep deadline: a walk over every link
    /// and subscription, done only after one of them changed or a deadline came due.
    pub(super) fn scan_link_timers(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut take = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for l in &self.links {
            if let Some(c) = &l.conn {
                if !c.ready {
                    take(Some(c.opened_at + HANDSHAKE_TIMEOUT));
                }
            } else if l.waits_to_redial() {
                take(l.retry_at);
            }
            take(l.closing.as_ref().map(|c| c.1 + CLOSE_CONFIRM_MAX));
        }
        for s in self
            .subs
            .values()
            .filter(|s| s.slot.is_none() && !s.retired)
        {
            take(Some(s.retry_at));
        }
        take(self.link_timers.next_sweep());
        next
    }

    pub(super) fn run_timers(&mut self, now: Instant) {
        // Call deadlines and serve-side ttl refusals and drain bound.
        self.caller.handle_timeout(now);
        self.callee.handle_timeout(now);
        self.drain_calls(now);
        // Every liveness machine of the node, from one table (MISSION L8). Coalesced: a
        // wake-up for a due timer also starts every probe and beacon due within the next
        // `COALESCE_WINDOW` (never late, at most that early; deadlines never early), so that
        // thousands of connections' probe cycles a few milliseconds apart cost one wake-up
        // per window instead of one each, and their ACKs come back together.
        self.liveness.table_mut().handle_timeout_coalesced(now);
        while let Some(t) = self.liveness.table_mut().poll_transmit(now) {
            match t {
                Transmit::Probe { key, id, .. } => {
                    if let Some(LiveOwner::Link(k)) = self.liveness.owner(key) {
                        self.send_liveness(k, records::probe(id));
                    }
                }
                Transmit::Beacon { key } => {
                    if self.publisher.as_ref().is_some_and(|p| p.live == key) {
                        if let Some(p) = self.publisher.as_mut() {
                            p.send_beacon();
                        }
                    }
                }
            }
        }
        self.drain_liveness_events(now);
        // The per-link timers below are walked only if something changed since the last
        // scan or the earliest of them is due (an idle node has none set at all).
        if !self.link_timers.due(now) {
            return;
        }
        // What runs below may set timers of its own; the next poll_timeout scans again.
        self.timers_changed();
        // Handshake timeouts.
        for k in self.links.keys() {
            let expired = self.links[k]
                .conn
                .as_ref()
                .is_some_and(|c| !c.ready && now >= c.opened_at + HANDSHAKE_TIMEOUT);
            if expired {
                self.fail_link(k, FailureReason::TransportError, "handshake timed out", now);
            }
        }
        // Reconnects.
        for k in self.links.keys() {
            let l = &self.links[k];
            let due = l.waits_to_redial() && l.retry_at.is_some_and(|t| now >= t);
            if due {
                self.dial(k, now);
            }
            if self.links[k]
                .closing
                .as_ref()
                .is_some_and(|c| now >= c.1 + CLOSE_CONFIRM_MAX)
            {
                self.close_overdue(k);
            }
        }
        self.settle_overdue_closing();
        // Fanout subscriptions without a socket get a new one (MISSION L5).
        for i in self.subs.keys() {
            let s = &self.subs[i];
            if s.slot.is_none() && !s.retired && now >= s.retry_at {
                self.open_sub(i, now);
            }
        }
        // Bound-socket disconnect sweeps.
        for slot in self.link_timers.take_due_sweeps(now) {
            self.sweep(slot, now);
        }
    }

    /// Acts on the liveness table's verdicts.
    pub(super) fn drain_liveness_events(&mut self, now: Instant) {
        while let Some((key, ev)) = self.liveness.table_mut().poll_event() {
            match (self.liveness.owner(key), ev) {
                (
                    Some(LiveOwner::Link(k)),
                    LivenessEvent::Probe(ProbeEvent::DeadlineExceeded { .. }),
                ) => {
                    self.fail_link(
                        k,
                        FailureReason::DeadlineExceeded,
                        "no valid ACK for 15 s",
                        now,
                    );
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::BecameReady),
                ) => {
                    let s = &mut self.subs[i];
                    s.failures_in_row = 0;
                    note(s.state.handle_ready(now));
                    let link = LinkId::Subscription {
                        endpoint: s.endpoint.clone(),
                    };
                    self.emit_state(link, ConnState::Ready, None, "first record or beacon");
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::Silence { .. }),
                ) => {
                    self.fail_sub(
                        i,
                        FailureReason::FanoutSilence,
                        "no record or beacon for 15 s",
                        now,
                    );
                }
                (
                    Some(LiveOwner::Sub(i)),
                    LivenessEvent::Publisher(PublisherEvent::ProtocolError(e)),
                ) => {
                    self.fail_sub(i, FailureReason::ProtocolError, &format!("{e}"), now);
                }
                (owner, ev) => tracing::debug!(?owner, ?ev, "liveness event without an owner"),
            }
        }
    }
}
