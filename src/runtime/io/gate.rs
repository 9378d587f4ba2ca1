//! The gate of the bound sockets (issue 11): who may hold a connection to this node before
//! it was admitted, and what became of those that were refused.
//!
//! - **ZAP.** Every bound ROUTER carries a ZAP domain of its own and lives in the context of
//!   the node's ZAP handler, a ROUTER this thread answers
//!   ([`crate::proto::security::ZapRequest`]): libzmq lets no connection carry a record before
//!   the handler said yes.
//! - **The unadmitted cap.** The bound sockets' monitors report each accepted connection and
//!   each disconnect with the connection's descriptor; the connections open on a socket minus
//!   those admitted there (a WELCOME sent, not failed since) are its unadmitted ones. At
//!   `max_unadmitted` the handler refuses a new connection (status 500, which makes libzmq
//!   close it at once; see [`ZapStatus::Refused`]): a peer that opens
//!   connections and says nothing holds at most that many per endpoint. libzmq cannot close
//!   one accepted connection of a bound socket, so an unadmitted connection that stays silent
//!   is bounded by this cap rather than by a deadline: libzmq's own handshake deadline
//!   (`HANDSHAKE_IVL`, 15 s) closes only connections whose transport handshake never
//!   completed.
//! - **Refusals.** Every refusal of an unadmitted connection (garbage, a first record that is
//!   not a HELLO, a failed transport handshake, the cap) is counted in
//!   `zmesh_input_refused_total{reason}` (the reason is the only label, MISSION O2) and kept in
//!   the snapshot's `recent_refusals` (the last [`RECENT_REFUSALS`], with the endpoint).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use super::ready::Watch;
use super::slots::{Slot, SlotRole};
use super::{IoThread, SlotKey};
use crate::proto::security::{InputRefusal, ZapReply, ZapRequest, ZapStatus};
use crate::runtime::snapshot::RefusalSnapshot;
use crate::runtime::socket::{FrameSocket, MonitorEvent};

/// Refusals a snapshot lists, newest last.
pub const RECENT_REFUSALS: usize = 64;
/// ZAP requests answered per loop turn, so a connection storm cannot starve the loop.
const ZAP_PER_TURN: usize = 256;

/// One refusal of an unadmitted connection.
struct Refusal {
    at: Instant,
    endpoint: String,
    reason: InputRefusal,
    detail: String,
}

/// The gate's state.
#[derive(Default)]
pub(super) struct Gate {
    /// The ZAP handler (none when the node binds no ROUTER).
    zap: Option<zmq::Socket>,
    /// Its descriptor fired or it was touched: read it.
    pub(super) zap_ready: bool,
    /// The bound sockets by ZAP domain.
    domains: HashMap<String, SlotKey>,
    /// Connections open on each bound socket, by descriptor (monitor events).
    open: HashMap<SlotKey, HashSet<u32>>,
    recent: VecDeque<Refusal>,
}

impl Gate {
    /// Installs the ZAP handler.
    pub(super) fn set_handler(&mut self, zap: zmq::Socket) {
        self.zap = Some(zap);
    }

    /// The ZAP handler's socket, to watch.
    pub(super) fn handler(&self) -> Option<&zmq::Socket> {
        self.zap.as_ref()
    }

    /// Bound socket `slot` answers to ZAP domain `domain`.
    pub(super) fn add_domain(&mut self, domain: &str, slot: SlotKey) {
        self.domains.insert(domain.to_owned(), slot);
        self.open.entry(slot).or_default();
    }
}

impl IoThread {
    /// A bound socket's monitor event: the connections open on it, and refused handshakes.
    pub(super) fn gate_monitor_event(
        &mut self,
        slot: SlotKey,
        event: MonitorEvent,
        value: u32,
        now: Instant,
    ) {
        match event {
            MonitorEvent::Accepted => {
                self.gate.open.entry(slot).or_default().insert(value);
            }
            MonitorEvent::Disconnected => {
                if let Some(open) = self.gate.open.get_mut(&slot) {
                    open.remove(&value);
                }
            }
            MonitorEvent::HandshakeFailed => {
                let detail = format!(
                    "transport handshake failed (not ZMTP, a mechanism mismatch, or no \
                     handshake within 15 s; libzmq code {value:#x})"
                );
                self.record_refusal(slot, InputRefusal::HandshakeFailed, detail, now);
            }
            // The ZAP handler's own refusals are recorded when it decides.
            _ => {}
        }
    }

    /// Connections open on bound socket `slot` that are not admitted there.
    pub(super) fn unadmitted(&self, slot: SlotKey) -> usize {
        let open = self.gate.open.get(&slot).map_or(0, HashSet::len);
        let admitted = self.inbound.get(&slot).map_or(0, HashMap::len);
        open.saturating_sub(admitted)
    }

    /// Counts a refusal of an unadmitted connection of bound socket `slot` and keeps it for
    /// the snapshot.
    pub(super) fn record_refusal(
        &mut self,
        slot: SlotKey,
        reason: InputRefusal,
        detail: String,
        now: Instant,
    ) {
        metrics::counter!("zmesh_input_refused_total", "reason" => reason.as_str()).increment(1);
        let endpoint = match self.slots.get(slot) {
            Some(Some(s)) => s.endpoint.clone(),
            _ => String::new(),
        };
        tracing::debug!(endpoint, reason = reason.as_str(), detail, "refused");
        if self.gate.recent.len() == RECENT_REFUSALS {
            self.gate.recent.pop_front();
        }
        self.gate.recent.push_back(Refusal {
            at: now,
            endpoint,
            reason,
            detail,
        });
    }

    /// The recent refusals, oldest first, for a snapshot.
    pub(super) fn recent_refusals(&self, now: Instant) -> Vec<RefusalSnapshot> {
        self.gate
            .recent
            .iter()
            .map(|r| RefusalSnapshot {
                endpoint: r.endpoint.clone(),
                reason: r.reason,
                detail: r.detail.clone(),
                age_ms: now.saturating_duration_since(r.at).as_millis() as u64,
            })
            .collect()
    }

    /// Answers the ZAP requests waiting on the handler (at most [`ZAP_PER_TURN`]).
    pub(super) fn handle_zap(&mut self, now: Instant) {
        for _ in 0..ZAP_PER_TURN {
            let frames = match self.gate.zap.as_ref().map(FrameSocket::try_recv_frames) {
                Some(Ok(Some(frames))) => frames,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "ZAP handler receive failed");
                    break;
                }
                _ => break,
            };
            let Some((route, rest)) = frames.split_first() else {
                continue;
            };
            let request = match ZapRequest::parse(rest) {
                Ok(r) => r,
                Err(e) => {
                    // Only libzmq writes here (inproc, this node's contexts).
                    tracing::warn!(error = %e, "malformed ZAP request ignored");
                    continue;
                }
            };
            let reply = self.zap_verdict(&request, now);
            let mut out: Vec<Vec<u8>> = vec![route.as_ref().to_vec()];
            out.extend(reply.encode());
            let refs: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
            if let Some(zap) = &self.gate.zap {
                if let Err(e) = zap.send_frames(&refs) {
                    tracing::warn!(error = %e, "ZAP reply not sent");
                }
            }
        }
        self.ready.touch(Watch::Zap);
    }

    /// The verdict on one connection.
    fn zap_verdict(&mut self, request: &ZapRequest, now: Instant) -> ZapReply {
        let verdict = |status, text: String| ZapReply {
            request_id: request.request_id.clone(),
            status,
            text,
            user_id: String::new(),
        };
        let Some(&slot) = self.gate.domains.get(&request.domain) else {
            return verdict(ZapStatus::AuthFailure, "unknown ZAP domain".into());
        };
        // The connection's ACCEPTED event was published before its ZAP request: read it,
        // so the count includes this connection.
        if matches!(
            self.slots.get(slot),
            Some(Some(Slot {
                role: SlotRole::Bound(_),
                ..
            }))
        ) {
            self.drain_monitor(slot, now);
        }
        let unadmitted = self.unadmitted(slot);
        if unadmitted > self.cfg.max_unadmitted {
            let detail = format!(
                "{} connections not admitted on this endpoint (max_unadmitted {}); refused in \
                 the transport handshake",
                unadmitted - 1,
                self.cfg.max_unadmitted
            );
            self.record_refusal(slot, InputRefusal::UnadmittedCap, detail.clone(), now);
            return verdict(ZapStatus::Refused, detail);
        }
        verdict(ZapStatus::Ok, "OK".into())
    }
}
