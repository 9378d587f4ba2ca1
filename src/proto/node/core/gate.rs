//! The gate's decisions in the node core, over what the gate asks of the shell beyond
//! [`Shell`] ([`GateShell`]: whether a bound socket is still there and its monitor's
//! queued events, the cap, a socket's endpoint, and counting a refusal). The verdicts
//! themselves are [`crate::proto::security::judge_zap`]'s over the gate's state
//! ([`Accepting`](crate::proto::node::accepting::Accepting)); this file orders what
//! follows from them.
//!
//! - A ZAP request read from the handler ([`handle_zap_request`]): a request without its
//!   route or one that does not parse is ignored (only libzmq writes to the handler);
//!   otherwise the verdict ([`zap_verdict`]) goes back to the request's route.
//! - The verdict on one connection ([`zap_verdict`]): for a bound ROUTER still in its slot
//!   its monitor is read first (the connection's ACCEPTED event was published before its
//!   ZAP request, so the unadmitted count includes this connection); a refusal that counts
//!   is recorded against the socket it protects.
//! - A bound socket's monitor event ([`on_monitor_event`]): a disconnect starts the
//!   disconnect sweep checks (the timer table's), a failed transport handshake is a
//!   refusal (`security_failure` under CURVE).
//! - Input the publisher refuses ([`refuse_publisher_input`]): each message that is not a
//!   subscription is `malformed`, each failed transport handshake a refusal for its code.
//! - A refusal ([`record_refusal`]) is counted once, under its reason alone (MISSION O2),
//!   then remembered with its endpoint for the snapshot (the last
//!   [`RECENT_REFUSALS`](crate::proto::node::gate::RECENT_REFUSALS)).

use std::time::Instant;

use super::Shell;
use crate::proto::node::accepting::GateEvent;
use crate::proto::node::gate::{Gated, Refusal};
use crate::proto::node::keys::SlotKey;
use crate::proto::security::{handshake_refusal, InputRefusal, ZapReply, ZapRequest};
use crate::proto::transport::MonitorEvent;

/// What the gate's decisions ask of the shell beyond [`Shell`].
pub(crate) trait GateShell: Shell {
    /// Whether bound socket `slot` still holds its slot as a bound ROUTER.
    fn still_bound(&self, slot: SlotKey) -> bool;
    /// The events queued on bound socket `slot`'s monitor, read now, in order.
    fn read_monitor(&mut self, slot: SlotKey) -> Vec<(MonitorEvent, u32)>;
    /// The most unadmitted connections a bound socket holds (`max_unadmitted`).
    fn max_unadmitted(&self) -> usize;
    /// The endpoint of the socket `gated` names (empty if it is gone).
    fn gated_endpoint(&self, gated: Gated) -> String;
    /// Counts a refusal of input at `endpoint` under `reason`, its only label (MISSION O2).
    fn count_refusal(&mut self, endpoint: &str, reason: InputRefusal, detail: &str);
}

/// One ZAP request read from the handler as `frames` (the route, then the request): the
/// frames of the reply to send back to the handler, if the request is answered (one
/// without its route or that does not parse is ignored: only libzmq writes there).
pub(crate) fn handle_zap_request<S: GateShell, F: AsRef<[u8]>>(
    node: &mut S,
    frames: &[F],
    now: Instant,
) -> Option<Vec<Vec<u8>>> {
    let (route, rest) = frames.split_first()?;
    let request = match ZapRequest::parse(rest) {
        Ok(r) => r,
        Err(e) => {
            // Only libzmq writes here (inproc, this node's contexts).
            tracing::warn!(error = %e, "malformed ZAP request ignored");
            return None;
        }
    };
    let reply = zap_verdict(node, &request, now);
    let mut out: Vec<Vec<u8>> = vec![route.as_ref().to_vec()];
    out.extend(reply.encode());
    Some(out)
}

/// The verdict on one connection, as the gate judges it
/// ([`Accepting::judge_zap`](crate::proto::node::accepting::Accepting::judge_zap)): for a
/// bound ROUTER still in its slot its monitor is read first (the connection's ACCEPTED
/// event was published before its ZAP request, so the count includes this connection). A
/// refusal that counts is recorded.
pub(crate) fn zap_verdict<S: GateShell>(
    node: &mut S,
    request: &ZapRequest,
    now: Instant,
) -> ZapReply {
    let gated = node.core().accepting.gate.gated(&request.domain);
    let mut still_bound = false;
    if let Some(Gated::Bound(slot)) = gated {
        still_bound = node.still_bound(slot);
        if still_bound {
            for (event, value) in node.read_monitor(slot) {
                on_monitor_event(node, slot, event, value, now);
            }
        }
    }
    let curve = node.runs_curve();
    let max_unadmitted = node.max_unadmitted();
    let (reply, refused) =
        node.core()
            .accepting
            .judge_zap(request, gated, still_bound, curve, max_unadmitted);
    if let Some((gated, reason, detail)) = refused {
        record_refusal(node, gated, reason, detail, now);
    }
    reply
}

/// Bound socket `slot`'s monitor reported `event` with `value`, as the gate takes it
/// ([`Accepting::handle_monitor_event`](crate::proto::node::accepting::Accepting::handle_monitor_event)):
/// a disconnect starts the sweep checks ([`super::check_bound_disconnects`] when due), a
/// refused handshake is recorded.
pub(crate) fn on_monitor_event<S: GateShell>(
    node: &mut S,
    slot: SlotKey,
    event: MonitorEvent,
    value: u32,
    now: Instant,
) {
    let curve = node.runs_curve();
    let core = node.core_mut();
    match core
        .accepting
        .handle_monitor_event(slot, event, value, curve)
    {
        GateEvent::Nothing => {}
        GateEvent::Sweep => core.timers.start_sweep(slot, now),
        GateEvent::Refused(reason, detail) => {
            record_refusal(node, Gated::Bound(slot), reason, detail, now)
        }
    }
}

/// What the publisher read: `garbage` messages that are neither a subscription nor its
/// cancel, and its monitor's `events`; each such message and each failed transport
/// handshake among the events is a refusal of publisher input, in that order.
pub(crate) fn refuse_publisher_input<S: GateShell>(
    node: &mut S,
    garbage: usize,
    events: &[(MonitorEvent, u32)],
    now: Instant,
) {
    for _ in 0..garbage {
        record_refusal(
            node,
            Gated::Publisher,
            InputRefusal::Malformed,
            "a message to the publisher that is neither a subscription nor its cancel".to_owned(),
            now,
        );
    }
    for &(event, value) in events {
        if event == MonitorEvent::HandshakeFailed {
            let (reason, detail) = handshake_refusal(node.runs_curve(), value);
            record_refusal(node, Gated::Publisher, reason, detail, now);
        }
    }
}

/// A refusal of input at the socket `gated` names: counted under `reason` alone (MISSION
/// O2), then remembered with its endpoint and `detail` for the snapshot.
pub(crate) fn record_refusal<S: GateShell>(
    node: &mut S,
    gated: Gated,
    reason: InputRefusal,
    detail: String,
    now: Instant,
) {
    let endpoint = node.gated_endpoint(gated);
    node.count_refusal(&endpoint, reason, &detail);
    node.core_mut().accepting.gate.remember(Refusal {
        at: now,
        endpoint,
        reason,
        detail,
    });
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::proto::node::core::tests::{shell, Effect, Recording};
    use crate::proto::node::gate::RECENT_REFUSALS;
    use crate::proto::node::keys::Key;
    use crate::proto::security::{PublicKey, ZapStatus, KEY_LEN, ZMTP_CRYPTOGRAPHIC};

    /// The cap the recording shell keeps.
    const MAX_UNADMITTED: usize = 2;

    /// What the gate's decisions asked of the recording shell beyond [`Shell`].
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(in crate::proto::node::core) enum GateEffect {
        ReadMonitor(SlotKey),
        CountRefusal(String, InputRefusal),
    }

    impl GateShell for Recording {
        fn still_bound(&self, slot: SlotKey) -> bool {
            slot == bound()
        }
        fn read_monitor(&mut self, slot: SlotKey) -> Vec<(MonitorEvent, u32)> {
            self.effects
                .push(Effect::Gate(GateEffect::ReadMonitor(slot)));
            Vec::new()
        }
        fn max_unadmitted(&self) -> usize {
            MAX_UNADMITTED
        }
        fn gated_endpoint(&self, gated: Gated) -> String {
            match gated {
                Gated::Bound(slot) => format!("tcp://bound:{}", slot.index()),
                Gated::Publisher => "tcp://publisher:1".to_owned(),
            }
        }
        fn count_refusal(&mut self, endpoint: &str, reason: InputRefusal, _: &str) {
            let e = GateEffect::CountRefusal(endpoint.to_owned(), reason);
            self.effects.push(Effect::Gate(e));
        }
    }

    /// The bound socket of the gated shell (ZAP domain "app").
    fn bound() -> SlotKey {
        SlotKey::from_index(1)
    }

    /// A shell whose gate knows bound socket 1 as "app" and the publisher as "pub".
    fn gated(curve: bool) -> Recording {
        let mut n = shell("a", vec![]);
        n.curve = curve;
        let gate = &mut n.core.accepting.gate;
        gate.add_domain("app", Gated::Bound(bound()));
        gate.add_domain("pub", Gated::Publisher);
        n
    }

    fn zap(domain: &str, key: Option<PublicKey>) -> ZapRequest {
        ZapRequest::for_test(b"1", domain, key.as_ref())
    }

    fn counted(endpoint: &str, reason: InputRefusal) -> Effect {
        Effect::Gate(GateEffect::CountRefusal(endpoint.to_owned(), reason))
    }

    fn remembered(n: &Recording) -> Vec<(String, InputRefusal)> {
        (n.core.accepting.gate.refusals())
            .map(|r| (r.endpoint.clone(), r.reason))
            .collect()
    }

    /// MISSION W3: the unadmitted cap refuses at `max_unadmitted`: the socket's monitor is
    /// read before each verdict, connections up to the cap pass (this one included), the
    /// next is refused with status 500, counted as `unadmitted_cap` and remembered with its
    /// endpoint; once one of them is admitted there is room again.
    #[test]
    fn w3_the_unadmitted_cap_refuses_at_max_unadmitted() {
        let now = Instant::now();
        let mut n = gated(false);
        let s = bound();
        for fd in 0..MAX_UNADMITTED as u32 {
            on_monitor_event(&mut n, s, MonitorEvent::Accepted, fd, now);
            let r = zap_verdict(&mut n, &zap("app", None), now);
            assert_eq!(r.status, ZapStatus::Ok);
        }
        on_monitor_event(&mut n, s, MonitorEvent::Accepted, 9, now);
        n.effects.clear();
        let r = zap_verdict(&mut n, &zap("app", None), now);
        assert_eq!(r.status, ZapStatus::Refused);
        let endpoint = "tcp://bound:1";
        assert_eq!(
            n.effects,
            [
                Effect::Gate(GateEffect::ReadMonitor(s)),
                counted(endpoint, InputRefusal::UnadmittedCap),
            ]
        );
        assert_eq!(
            remembered(&n),
            [(endpoint.to_owned(), InputRefusal::UnadmittedCap)]
        );
        n.core.accepting.admitted(
            s,
            b"r".to_vec(),
            crate::proto::node::keys::LinkKey::from_index(0),
        );
        let r = zap_verdict(&mut n, &zap("app", None), now);
        assert_eq!(r.status, ZapStatus::Ok);
    }

    /// MISSION O2: a refusal is counted once, under its reason alone, and remembered with
    /// its endpoint: an allow-list refusal under CURVE (on the publisher as on a bound
    /// socket) is `security_failure`; a request for an unknown domain is refused and counts
    /// nothing; the socket of a domain no longer bound is not read.
    #[test]
    fn o2_a_refusal_is_counted_under_its_reason_only() {
        let now = Instant::now();
        let key = PublicKey::from_bytes([7; KEY_LEN]);
        let mut n = gated(true);
        let r = zap_verdict(&mut n, &zap("pub", Some(key)), now);
        assert_eq!(r.status, ZapStatus::AuthFailure);
        assert_eq!(
            n.effects,
            [counted("tcp://publisher:1", InputRefusal::SecurityFailure)]
        );
        n.effects.clear();
        let r = zap_verdict(&mut n, &zap("nowhere", Some(key)), now);
        assert_eq!(
            (r.status, &n.effects[..]),
            (ZapStatus::AuthFailure, &[][..])
        );
        n.core
            .accepting
            .gate
            .add_domain("gone", Gated::Bound(SlotKey::from_index(5)));
        let r = zap_verdict(&mut n, &zap("gone", Some(key)), now);
        assert_eq!(r.status, ZapStatus::AuthFailure);
        assert_eq!(
            n.effects,
            [counted("tcp://bound:5", InputRefusal::SecurityFailure)],
            "not read, but refused: the key is not on the list"
        );
        assert_eq!(remembered(&n).len(), 2);
    }

    /// A ZAP request is answered to its route; one without a route, or that does not
    /// parse, is ignored.
    #[test]
    fn a_zap_request_is_answered_to_its_route() {
        let now = Instant::now();
        let mut n = gated(false);
        let request: [&[u8]; 8] = [
            b"route",
            b"",
            b"1.0",
            b"7",
            b"app",
            b"127.0.0.1",
            b"",
            b"NULL",
        ];
        let out = handle_zap_request(&mut n, &request, now).expect("answered");
        let reply = ZapReply {
            request_id: b"7".to_vec(),
            status: ZapStatus::Ok,
            text: "OK".to_owned(),
            user_id: String::new(),
        };
        let mut expected = vec![b"route".to_vec()];
        expected.extend(reply.encode());
        assert_eq!(out, expected);
        assert_eq!(n.effects, [Effect::Gate(GateEffect::ReadMonitor(bound()))]);
        let empty: [Vec<u8>; 0] = [];
        assert_eq!(handle_zap_request(&mut n, &empty, now), None);
        assert_eq!(handle_zap_request(&mut n, &[b"route".to_vec()], now), None);
    }

    /// MISSION W3, O2: a bound socket's disconnect starts the sweep checks, a failed
    /// transport handshake is refused as `security_failure` under CURVE and
    /// `handshake_failed` otherwise; what the publisher refuses is counted against it.
    #[test]
    fn w3_o2_monitor_events_and_publisher_input_are_refused_for_their_reason() {
        let now = Instant::now();
        let mut n = gated(false);
        on_monitor_event(&mut n, bound(), MonitorEvent::Disconnected, 3, now);
        assert_eq!(n.effects, []);
        assert!(
            n.core.timers.next_sweep().is_some(),
            "the sweep checks start"
        );
        on_monitor_event(
            &mut n,
            bound(),
            MonitorEvent::HandshakeFailed,
            ZMTP_CRYPTOGRAPHIC,
            now,
        );
        let events = [
            (MonitorEvent::Accepted, 1),
            (MonitorEvent::HandshakeFailed, ZMTP_CRYPTOGRAPHIC),
        ];
        refuse_publisher_input(&mut n, 2, &events, now);
        let p = "tcp://publisher:1";
        assert_eq!(
            n.effects,
            [
                counted("tcp://bound:1", InputRefusal::HandshakeFailed),
                counted(p, InputRefusal::Malformed),
                counted(p, InputRefusal::Malformed),
                counted(p, InputRefusal::HandshakeFailed),
            ]
        );
        n.curve = true;
        n.effects.clear();
        refuse_publisher_input(&mut n, 0, &events, now);
        assert_eq!(n.effects, [counted(p, InputRefusal::SecurityFailure)]);
    }

    /// The snapshot keeps the last [`RECENT_REFUSALS`] refusals, oldest first; each is
    /// counted.
    #[test]
    fn o1_the_last_refusals_are_remembered_in_order() {
        let now = Instant::now();
        let mut n = gated(false);
        for i in 0..RECENT_REFUSALS + 3 {
            record_refusal(
                &mut n,
                Gated::Publisher,
                InputRefusal::Malformed,
                i.to_string(),
                now,
            );
        }
        assert_eq!(n.effects.len(), RECENT_REFUSALS + 3);
        let kept: Vec<String> = (n.core.accepting.gate.refusals())
            .map(|r| r.detail.clone())
            .collect();
        assert_eq!(kept.len(), RECENT_REFUSALS);
        assert_eq!(kept[0], "3");
    }
}
