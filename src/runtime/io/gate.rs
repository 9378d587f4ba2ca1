//! The gate of the bound sockets: who may hold a connection to this node before
//! it was admitted, and what became of those that were refused. What the gate decides is
//! the node core's ([`crate::proto::node::core::gate`], over [`GateShell`]); this file reads
//! the ZAP handler's requests and sends the replies the core gives it, and carries out the
//! hand-offs the core asks for: reading a bound socket's monitor, and counting and logging a
//! refusal.
//!
//! - **ZAP.** Every bound ROUTER carries a ZAP domain of its own and lives in the context of
//!   the node's ZAP handler, a ROUTER this thread answers
//!   ([`crate::proto::security::ZapRequest`]): libzmq lets no connection carry a record before
//!   the handler said yes. What it says is decided in `proto`
//!   ([`crate::proto::security::judge_zap`], over the gate's state in
//!   [`crate::proto::node::accepting`], in the order [`gate::zap_verdict`] gives).
//! - **The unadmitted cap.** The bound sockets' monitors report each accepted connection and
//!   each disconnect with the connection's descriptor; the connections open on a socket minus
//!   those admitted there (a WELCOME sent, not failed since) are its unadmitted ones. At
//!   `max_unadmitted` the handler refuses a new connection (status 500, which makes libzmq
//!   close it at once; see [`ZapStatus::Refused`](crate::proto::security::ZapStatus::Refused)): a peer that opens
//!   connections and says nothing holds at most that many per endpoint. libzmq cannot close
//!   one accepted connection of a bound socket, so an unadmitted connection that stays silent
//!   is bounded by this cap rather than by a deadline: libzmq's own handshake deadline
//!   (`HANDSHAKE_IVL`, 15 s) closes only connections whose transport handshake never
//!   completed.
//! - **The allow-list (CURVE).** In `curve` mode every connection to a bound endpoint (the
//!   publisher's included) completed a CurveZMQ handshake before its ZAP request, so the
//!   key in the request is proven; the handler admits it only if the allow-list names it,
//!   and answers its Z85 text as the connection's `User-Id`, which libzmq attaches to every
//!   frame of the connection: admission reads it as the peer's verified security identity.
//!   A client without CURVE, or one that does not hold its key, fails its handshake before
//!   any ZAP request; its monitor event is recorded as `security_failure` too.
//! - **Refusals.** Every refusal of an unadmitted connection (garbage, a first record that is
//!   not a HELLO, a failed transport handshake, the cap), and of input on the publisher's
//!   endpoint ([`gate::refuse_publisher_input`]: a message that is not a subscription, a
//!   failed transport handshake), is recorded by the core ([`gate::record_refusal`]): counted
//!   here in `zmesh_input_refused_total{reason}` (the reason is the only label, MISSION
//!   O2), then kept in the snapshot's `recent_refusals` (the last
//!   [`RECENT_REFUSALS`](crate::proto::node::gate::RECENT_REFUSALS), with the endpoint).

use std::collections::BTreeSet;
use std::time::Instant;

use super::parts::ready::Watch;
use super::parts::sockets::{Slot, SlotRole};
use super::{Gated, IoThread, SlotKey};
use crate::proto::node::core;
use crate::proto::node::core::gate::{self, GateShell};
use crate::proto::security::{InputRefusal, PublicKey};
use crate::runtime::event::NodeEvent;
use crate::runtime::security::SecurityEvent;
use crate::runtime::snapshot::RefusalSnapshot;
use crate::runtime::socket::MonitorEvent;
use crate::runtime::transport::TransportSocket;

/// ZAP requests answered per loop turn, so a connection storm cannot starve the loop.
const ZAP_PER_TURN: usize = 256;

impl IoThread {
    /// A bound socket's monitor event, as the core's gate takes it
    /// ([`gate::on_monitor_event`]).
    pub(super) fn gate_monitor_event(
        &mut self,
        slot: SlotKey,
        event: MonitorEvent,
        value: u32,
        now: Instant,
    ) {
        gate::on_monitor_event(self, slot, event, value, now);
    }

    /// The recent refusals, oldest first, for a snapshot.
    pub(super) fn recent_refusals(&self, now: Instant) -> Vec<RefusalSnapshot> {
        self.core
            .accepting
            .gate
            .refusals()
            .map(|r| RefusalSnapshot {
                endpoint: r.endpoint.clone(),
                reason: r.reason,
                detail: r.detail.clone(),
                age_ms: now.saturating_duration_since(r.at).as_millis() as u64,
            })
            .collect()
    }

    /// Answers the ZAP requests waiting on the handler (at most [`ZAP_PER_TURN`]), each as
    /// the core's gate decides ([`gate::handle_zap_request`]).
    pub(super) fn handle_zap(&mut self, now: Instant) {
        for _ in 0..ZAP_PER_TURN {
            let frames = match self.sockets.zap.as_ref().map(TransportSocket::try_recv) {
                Some(Ok(Some(frames))) => frames,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "ZAP handler receive failed");
                    break;
                }
                _ => break,
            };
            let Some(out) = gate::handle_zap_request(self, &frames, now) else {
                continue;
            };
            let refs: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
            if let Some(zap) = &self.sockets.zap {
                if let Err(e) = zap.send(&refs) {
                    tracing::warn!(error = %e, "ZAP reply not sent");
                }
            }
        }
        self.sockets.ready.touch(Watch::Zap);
    }

    /// A new allow-list (or the error of an attempt to read one): in force at once for new
    /// connections; what it does to the links is the gate's
    /// ([`Accepting::allow_list_effects`](crate::proto::node::accepting::Accepting::allow_list_effects)),
    /// carried out by the core ([`core::handle_allow_list_effects`]).
    pub(super) fn on_allow_list(
        &mut self,
        loaded: Result<BTreeSet<PublicKey>, String>,
        trigger: &'static str,
        now: Instant,
    ) -> Result<usize, String> {
        let keys = match loaded {
            Ok(keys) => keys,
            Err(detail) => {
                tracing::warn!(
                    trigger,
                    detail,
                    "allow-list not reloaded; the previous one stays"
                );
                self.core.accepting.gate.allow_error = Some(detail.clone());
                self.app
                    .push(NodeEvent::Security(SecurityEvent::AllowListError {
                        detail: detail.clone(),
                        trigger,
                    }));
                return Err(detail);
            }
        };
        let n = self.core.accepting.gate.reload(keys);
        metrics::gauge!("zmesh_allow_list_keys").set(n as f64);
        tracing::info!(trigger, keys = n, "allow-list loaded");
        self.app
            .push(NodeEvent::Security(SecurityEvent::AllowListLoaded {
                keys: n,
                trigger,
            }));
        let effects = self
            .core
            .accepting
            .allow_list_effects(&self.core.links, |k| {
                self.link_endpoint(k)
                    .is_some_and(|ep| self.local.cfg.security.endpoint_key(&ep).is_some())
            });
        core::handle_allow_list_effects(self, effects, now);
        Ok(n)
    }
}

impl GateShell for IoThread {
    fn still_bound(&self, slot: SlotKey) -> bool {
        matches!(
            self.sockets.get(slot),
            Some(Slot {
                role: SlotRole::Bound(_),
                ..
            })
        )
    }

    fn read_monitor(&mut self, slot: SlotKey) -> Vec<(MonitorEvent, u32)> {
        self.sockets.monitor_events(slot)
    }

    fn max_unadmitted(&self) -> usize {
        self.local.cfg.max_unadmitted
    }

    fn gated_endpoint(&self, gated: Gated) -> String {
        match gated {
            Gated::Bound(slot) => self
                .sockets
                .get(slot)
                .map_or_else(String::new, |s| s.endpoint.clone()),
            Gated::Publisher => self
                .fanout
                .publisher
                .as_ref()
                .map(|p| p.endpoint.clone())
                .unwrap_or_default(),
        }
    }

    fn count_refusal(&mut self, endpoint: &str, reason: InputRefusal, detail: &str) {
        metrics::counter!("zmesh_input_refused_total", "reason" => reason.as_str()).increment(1);
        tracing::debug!(endpoint, reason = reason.as_str(), detail, "refused");
    }
}
