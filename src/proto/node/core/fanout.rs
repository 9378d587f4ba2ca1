//! Classic fanout's decisions in the node core, with the order of their consequences: one
//! SUB socket per publisher (MISSION T3), each judged by its own watch in the liveness table
//! and failed and reopened alone (L5), over what fanout asks of the shell beyond [`Shell`]
//! ([`FanoutShell`]: handing a record to the application, closing a SUB socket, announcing a
//! subscription's state).
//!
//! - A message read from a subscription ([`on_fanout`]): its watch judges it (a beacon is
//!   evidence only and never reaches the application, L4; a PUBLISH or PUBPACK is delivered;
//!   a malformed one fails that publisher alone), the watch's events are acted on before
//!   the record that caused them (ready comes first), then the records are delivered, a
//!   PUBPACK's in order (WIRE.md §7.5).
//! - A PUBPACK read whole is staged as its records ([`published_records`]), each charged its
//!   share of the read; in its turn each one ([`on_published`]) changes nothing once its
//!   subscription has another socket; the first is the PUBPACK's one receipt for the watch.
//! - The watch's events ([`on_publisher_event`]): ready at the first valid record or beacon,
//!   failed at 15 s of silence or a protocol error.
//! - A subscription's failure ([`fail_sub`]): its state (reconnecting while the node takes
//!   new work and the subscription is not retired), then only its socket closes, the
//!   application hears of it, and the failure is counted; a new socket is opened when its
//!   backoff has passed (the core's timer pass, `Shell::open_due_sub`).
//! - Opening a socket: the shell asks how it is secured ([`open_security`]: refused once,
//!   as a security failure, when the node runs CURVE and knows no key to expect of the
//!   publisher), creates, subscribes and connects it, then hands it back ([`on_sub_opened`]:
//!   a new connection id, a new watch counting silence from now, connecting).

use std::time::Instant;

use bytes::Bytes;

use super::{Count, NodeCore, Shell};
use crate::proto::liveness::{self, Delivery, FanoutInput, LivenessEvent, PublisherEvent};
use crate::proto::node::keys::{SlotKey, SubKey};
use crate::proto::node::received::Charges;
use crate::proto::node::sub::{
    judge_publisher_event, Fanout, Published, PublisherVerdict, Sub, SubSecurity,
};
use crate::proto::security::PublicKey;
use crate::proto::state::{ConnState, FailureReason};
use crate::proto::wire::WireError;
use crate::proto::ConnId;

/// What fanout's decisions ask of the shell beyond [`Shell`].
pub(crate) trait FanoutShell: Shell {
    /// Hands record `payload` of `topic`, read from subscription `sub`, to the application
    /// (with the subscription's source), counted as a fanout record received.
    fn deliver_published(&mut self, sub: SubKey, topic: Bytes, payload: Bytes);
    /// Closes SUB socket `slot` (a subscription's former socket), stopping its monitor.
    fn close_sub_socket(&mut self, slot: SlotKey);
    /// Tells the application that subscription `sub` is in `state`.
    fn emit_sub_state(
        &mut self,
        sub: SubKey,
        state: ConnState,
        reason: Option<FailureReason>,
        detail: &str,
    );
}

/// Adds a subscription to the publisher at `endpoint`, which under CURVE must hold `key`,
/// with its watch in the liveness table (MISSION T3: a socket of its own, opened on the
/// next timer pass); returns its key.
pub(crate) fn add_sub(
    core: &mut NodeCore,
    endpoint: &str,
    key: Option<PublicKey>,
    now: Instant,
) -> SubKey {
    let i = core.subs.next_key();
    let live = core.liveness.insert_subscription(i, now);
    let pushed = core.subs.push(Sub::new(endpoint, key, live, now));
    debug_assert_eq!(pushed, i);
    i
}

/// A message read from subscription `sub`'s socket, decoded (`decoded`), in its turn (a
/// PUBPACK staged as its records comes to [`on_published`] instead): judged by the
/// publisher's watch, the watch's events acted on, then delivered if the watch says so (see
/// the module docs).
pub(crate) fn on_fanout<S: FanoutShell>(
    node: &mut S,
    sub: SubKey,
    decoded: Result<Fanout, WireError>,
    now: Instant,
) {
    let input = match &decoded {
        Ok(Fanout::Beacon) => FanoutInput::Beacon,
        Ok(Fanout::Publish { .. }) => FanoutInput::Record,
        Ok(Fanout::Pack { payloads, .. }) => FanoutInput::Pack {
            records: u16::try_from(payloads.len()).unwrap_or(u16::MAX),
        },
        Err(e) => FanoutInput::from_decoded(Err(e)),
    };
    let live = node.core().subs[sub].live;
    let verdict = node
        .core_mut()
        .liveness
        .table_mut()
        .handle_fanout(live, input, now);
    // A state change (ready) comes before the record that caused it.
    take_publisher_events(node, sub, live, now);
    match (verdict, decoded) {
        (Ok(Delivery::Deliver), Ok(Fanout::Publish { topic, payload })) => {
            deliver(node, sub, topic, payload);
        }
        (Ok(Delivery::Deliver), Ok(Fanout::Pack { topic, payloads })) => {
            // Each as the PUBLISH it stands for, in order (WIRE.md §7.5).
            for payload in payloads {
                deliver(node, sub, topic.clone(), payload);
            }
        }
        _ => {}
    }
}

/// The records of a PUBPACK (`topic`, `payloads`) read whole on subscription `sub`'s
/// current socket (connection `conn`), each staged on its own with its share of the read's
/// `len` bytes; the first carries the PUBPACK's receipt (how many records it holds).
pub(crate) fn published_records(
    sub: SubKey,
    conn: ConnId,
    topic: Bytes,
    payloads: Vec<Bytes>,
    len: usize,
) -> impl Iterator<Item = (Published, usize)> {
    let mut charges = Charges::new(len, payloads.iter().map(Bytes::len));
    let mut receipt = u16::try_from(payloads.len()).unwrap_or(u16::MAX);
    payloads.into_iter().map(move |payload| {
        let bytes = charges.next(payload.len());
        let published = Published {
            sub,
            conn,
            topic: topic.clone(),
            payload,
            receipt: std::mem::take(&mut receipt),
        };
        (published, bytes)
    })
}

/// A record of a PUBPACK in its turn: the first is the PUBPACK's receipt for the
/// publisher's watch (WIRE.md §7.5: one valid receipt), and each is delivered while the
/// socket it came on is still the subscription's and the watch took the PUBPACK.
#[inline]
pub(crate) fn on_published<S: FanoutShell>(node: &mut S, p: Published, now: Instant) {
    let Some(s) = node.core().subs.get(p.sub) else {
        return;
    };
    if !s.is_current(p.conn) {
        return;
    }
    if p.receipt > 0 {
        let input = FanoutInput::Pack { records: p.receipt };
        let live = s.live;
        let verdict = node
            .core_mut()
            .liveness
            .table_mut()
            .handle_fanout(live, input, now);
        // A state change (ready) comes before the records that caused it.
        take_publisher_events(node, p.sub, live, now);
        if !matches!(verdict, Ok(Delivery::Deliver)) {
            return;
        }
        // A verdict that failed the watch closed the socket: the rest are not current.
    }
    deliver(node, p.sub, p.topic, p.payload);
}

/// Hands one fanout record of subscription `sub` to the application, counted on the
/// subscription (its topic kept for the next record's to share).
#[inline]
fn deliver<S: FanoutShell>(node: &mut S, sub: SubKey, topic: Bytes, payload: Bytes) {
    node.core_mut().subs[sub].handle_delivered(&topic);
    node.deliver_published(sub, topic, payload);
}

/// Acts on what subscription `sub`'s watch (`live`) said of the input it was just handed,
/// before that input's records are delivered.
fn take_publisher_events<S: FanoutShell>(
    node: &mut S,
    sub: SubKey,
    live: liveness::LinkKey,
    now: Instant,
) {
    while let Some(ev) = node.core_mut().liveness.table_mut().poll_event_of(live) {
        match ev {
            LivenessEvent::Publisher(ev) => on_publisher_event(node, sub, ev, now),
            LivenessEvent::Probe(ev) => {
                tracing::debug!(?ev, "probe event of a publisher's watch")
            }
        }
    }
}

/// The verdict of subscription `sub`'s watch: ready at its first valid record or beacon;
/// failed (its socket closed, a new one opened) at 15 s of silence or a protocol error.
pub(crate) fn on_publisher_event<S: FanoutShell>(
    node: &mut S,
    sub: SubKey,
    ev: PublisherEvent,
    now: Instant,
) {
    match judge_publisher_event(ev) {
        PublisherVerdict::Ready => {
            node.core_mut().subs[sub].handle_ready(now);
            node.emit_sub_state(sub, ConnState::Ready, None, "first record or beacon");
        }
        PublisherVerdict::Fail(reason, detail) => fail_sub(node, sub, reason, &detail, now),
    }
}

/// Takes one publisher out of ready and closes only its socket (MISSION L5): a new socket is
/// opened once its backoff has passed, while the node takes new work and the subscription is
/// not retired. Nothing happens to a subscription without a socket.
pub(crate) fn fail_sub<S: FanoutShell>(
    node: &mut S,
    sub: SubKey,
    reason: FailureReason,
    detail: &str,
    now: Instant,
) {
    let running = node.admitting();
    let failed = node.core_mut().subs[sub].handle_failure(reason, detail, running, now);
    let Some((slot, state)) = failed else {
        return;
    };
    node.close_sub_socket(slot);
    node.emit_sub_state(sub, state, Some(reason), detail);
    node.count(Count::LinkFailure(reason));
}

/// How subscription `sub`'s next socket is secured: plain, or a CURVE client expecting the
/// key its publisher must hold. [`SubSecurity::Refused`] (the node runs CURVE and knows no
/// key to expect) is refused here ([`refuse_sub`]), and the shell opens nothing.
pub(crate) fn open_security<S: FanoutShell>(
    node: &mut S,
    sub: SubKey,
    now: Instant,
) -> SubSecurity {
    let curve = node.runs_curve();
    let core = node.core();
    let gate = &core.accepting.gate;
    let security = core.subs[sub].security(curve, |k| gate.allows(k));
    if security == SubSecurity::Refused {
        refuse_sub(node, sub, now);
    }
    security
}

/// Subscription `sub` has no CURVE key to expect of its publisher: it is not opened; it
/// shows `not_connected` with `security_failure` (announced once) and is looked at again
/// after a while.
fn refuse_sub<S: FanoutShell>(node: &mut S, sub: SubKey, now: Instant) {
    let Some(detail) = node.core_mut().subs[sub].handle_refused(now) else {
        return;
    };
    node.emit_sub_state(
        sub,
        ConnState::NotConnected,
        Some(FailureReason::SecurityFailure),
        &detail,
    );
}

/// The shell opened and watches subscription `sub`'s new socket `slot` at `now`: a new
/// connection id, a new watch (silence is counted from now, MISSION L5), connecting, and
/// the application hears of it.
pub(crate) fn on_sub_opened<S: FanoutShell>(
    node: &mut S,
    sub: SubKey,
    slot: SlotKey,
    now: Instant,
) {
    let id = node.fresh_conn_id();
    let live = node.core().subs[sub].live;
    let _ = node
        .core_mut()
        .liveness
        .table_mut()
        .reset_publisher(live, now);
    node.core_mut().subs[sub].handle_opened(slot, id, now);
    node.emit_sub_state(
        sub,
        ConnState::Connecting,
        None,
        &format!("subscribed as {id}"),
    );
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::proto::liveness::{PublisherStatus, PEER_DEADLINE};
    use crate::proto::node::core::tests::{shell, Effect, Recording};
    use crate::proto::node::core::{handle_monitor_event, handle_timeout};
    use crate::proto::node::keys::Key;
    use crate::proto::node::link::{backoff, BACKOFF_MAX};
    use crate::proto::node::monitor::Watching;
    use crate::proto::transport::MonitorEvent;

    /// What fanout's decisions asked of the recording shell beyond [`Shell`].
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(in crate::proto::node::core) enum FanoutEffect {
        Deliver(SubKey, Bytes, Bytes),
        CloseSubSocket(SlotKey),
        EmitSubState(SubKey, ConnState, Option<FailureReason>),
    }

    impl FanoutShell for Recording {
        fn deliver_published(&mut self, sub: SubKey, topic: Bytes, payload: Bytes) {
            let e = FanoutEffect::Deliver(sub, topic, payload);
            self.effects.push(Effect::Fanout(e));
        }
        fn close_sub_socket(&mut self, slot: SlotKey) {
            self.effects
                .push(Effect::Fanout(FanoutEffect::CloseSubSocket(slot)));
        }
        fn emit_sub_state(
            &mut self,
            sub: SubKey,
            state: ConnState,
            reason: Option<FailureReason>,
            _: &str,
        ) {
            let e = FanoutEffect::EmitSubState(sub, state, reason);
            self.effects.push(Effect::Fanout(e));
        }
    }

    fn state(sub: SubKey, state: ConnState, reason: Option<FailureReason>) -> Effect {
        Effect::Fanout(FanoutEffect::EmitSubState(sub, state, reason))
    }

    fn delivered(sub: SubKey, topic: &'static [u8], payload: &'static [u8]) -> Effect {
        let (topic, payload) = (Bytes::from_static(topic), Bytes::from_static(payload));
        Effect::Fanout(FanoutEffect::Deliver(sub, topic, payload))
    }

    fn closed(slot: SlotKey) -> Effect {
        Effect::Fanout(FanoutEffect::CloseSubSocket(slot))
    }

    fn publish(topic: &'static [u8], payload: &'static [u8]) -> Result<Fanout, WireError> {
        Ok(Fanout::Publish {
            topic: Bytes::from_static(topic),
            payload: Bytes::from_static(payload),
        })
    }

    /// The slot the recording shell gives subscription `sub`'s `n`th socket.
    fn slot_of(sub: SubKey, n: usize) -> SlotKey {
        SlotKey::from_index(10 * (sub.index() + 1) + n)
    }

    /// A node subscribed to `n` publishers, each socket opened by the timer pass at `now`,
    /// the effects cleared.
    fn subscribed(n: usize, now: Instant) -> (Recording, Vec<SubKey>) {
        let mut b = shell("b", vec![]);
        let subs: Vec<SubKey> = (0..n)
            .map(|p| add_sub(&mut b.core, &format!("tcp://p:{p}"), None, now))
            .collect();
        handle_timeout(&mut b, now);
        let asked: Vec<Effect> = subs.iter().map(|&s| Effect::OpenDueSub(s)).collect();
        assert_eq!(b.effects, asked, "each subscription asks for a socket");
        for &s in &subs {
            on_sub_opened(&mut b, s, slot_of(s, 0), now);
        }
        b.effects.clear();
        (b, subs)
    }

    fn watch_status(b: &Recording, sub: SubKey) -> Option<PublisherStatus> {
        let live = b.core.subs[sub].live;
        b.core.liveness.table().publisher(live).map(|w| w.status())
    }

    /// One SUB socket per publisher (MISSION T3): the timer pass asks for a socket for each
    /// subscription, each opened socket is that subscription's alone with a connection of its
    /// own, connecting, with a new watch; once each has its socket the timer pass asks for
    /// nothing more.
    #[test]
    fn t3_each_publisher_gets_a_socket_of_its_own() {
        let t0 = Instant::now();
        let mut b = shell("b", vec![]);
        let p = add_sub(&mut b.core, "tcp://p:1", None, t0);
        let q = add_sub(&mut b.core, "tcp://q:1", None, t0);
        handle_timeout(&mut b, t0);
        assert_eq!(b.effects, [Effect::OpenDueSub(p), Effect::OpenDueSub(q)]);
        b.effects.clear();
        on_sub_opened(&mut b, p, slot_of(p, 0), t0);
        on_sub_opened(&mut b, q, slot_of(q, 0), t0);
        assert_eq!(
            b.effects,
            [
                state(p, ConnState::Connecting, None),
                state(q, ConnState::Connecting, None),
            ]
        );
        let (sp, sq) = (&b.core.subs[p], &b.core.subs[q]);
        assert_eq!(
            (sp.slot, sq.slot),
            (Some(slot_of(p, 0)), Some(slot_of(q, 0)))
        );
        assert!(sp.conn_id.is_some() && sp.conn_id != sq.conn_id);
        assert_eq!(watch_status(&b, p), Some(PublisherStatus::Waiting));
        b.effects.clear();
        handle_timeout(&mut b, t0 + Duration::from_secs(1));
        assert_eq!(b.effects, [], "a socket is open: nothing to open");
    }

    /// A beacon readies its publisher and never reaches the application (MISSION L4, L5):
    /// the first one only announces ready, the next changes nothing the shell sees, and the
    /// subscription counts no record; a record after it is delivered.
    #[test]
    fn l4_l5_a_beacon_readies_the_publisher_and_is_never_delivered() {
        let t0 = Instant::now();
        let (mut b, subs) = subscribed(1, t0);
        let p = subs[0];
        let t1 = t0 + Duration::from_secs(1);
        on_fanout(&mut b, p, Ok(Fanout::Beacon), t1);
        assert_eq!(b.effects, [state(p, ConnState::Ready, None)]);
        b.effects.clear();
        on_fanout(&mut b, p, Ok(Fanout::Beacon), t1);
        assert_eq!(b.effects, []);
        assert_eq!(b.core.subs[p].records, 0);
        assert_eq!(b.core.subs[p].state.state(), ConnState::Ready);
        on_fanout(&mut b, p, publish(b"t", b"x"), t1);
        assert_eq!(b.effects, [delivered(p, b"t", b"x")]);
        assert_eq!(b.core.subs[p].records, 1);
        assert_eq!(&b.core.subs[p].last_topic[..], b"t");
    }

    /// The first record readies its publisher, and the application hears of ready before it
    /// gets the record that caused it (MISSION L5).
    #[test]
    fn l5_the_first_record_readies_the_publisher_before_it_is_delivered() {
        let t0 = Instant::now();
        let (mut b, subs) = subscribed(1, t0);
        let p = subs[0];
        on_fanout(&mut b, p, publish(b"t", b"x"), t0);
        assert_eq!(
            b.effects,
            [state(p, ConnState::Ready, None), delivered(p, b"t", b"x")]
        );
    }

    /// A publisher silent for 15 s fails alone (MISSION L5, F2): at its deadline, not a
    /// millisecond before, only its socket is closed, it goes reconnecting for
    /// `fanout_silence` and the failure is counted; the publisher that kept beaconing stays
    /// ready on its socket. After the backoff the timer pass asks for a new socket for the
    /// silent one only, which starts a new watch.
    #[test]
    fn l5_f2_a_silent_publisher_fails_at_15s_and_only_its_socket_is_reopened() {
        let t0 = Instant::now();
        let (mut b, subs) = subscribed(2, t0);
        let (silent, talking) = (subs[0], subs[1]);
        let s = Duration::from_secs(1);
        for at in [t0 + 5 * s, t0 + 10 * s] {
            on_fanout(&mut b, talking, Ok(Fanout::Beacon), at);
            handle_timeout(&mut b, at);
        }
        assert_eq!(b.effects, [state(talking, ConnState::Ready, None)]);
        b.effects.clear();
        handle_timeout(&mut b, t0 + PEER_DEADLINE - Duration::from_millis(1));
        assert_eq!(b.effects, []);

        let failed_at = t0 + PEER_DEADLINE;
        handle_timeout(&mut b, failed_at);
        let reason = FailureReason::FanoutSilence;
        assert_eq!(
            b.effects,
            [
                closed(slot_of(silent, 0)),
                state(silent, ConnState::Reconnecting, Some(reason)),
                Effect::Count(Count::LinkFailure(reason)),
            ]
        );
        assert_eq!(b.core.subs[silent].slot, None);
        assert_eq!(b.core.subs[talking].slot, Some(slot_of(talking, 0)));
        assert_eq!(b.core.subs[talking].state.state(), ConnState::Ready);
        assert_eq!(watch_status(&b, talking), Some(PublisherStatus::Ready));
        b.effects.clear();

        let retry = failed_at + backoff(1);
        on_fanout(&mut b, talking, Ok(Fanout::Beacon), retry);
        handle_timeout(&mut b, retry - Duration::from_millis(1));
        assert_eq!(b.effects, [], "not before the backoff");
        handle_timeout(&mut b, retry);
        assert_eq!(b.effects, [Effect::OpenDueSub(silent)]);
        b.effects.clear();
        on_sub_opened(&mut b, silent, slot_of(silent, 1), retry);
        assert_eq!(b.effects, [state(silent, ConnState::Connecting, None)]);
        assert_eq!(watch_status(&b, silent), Some(PublisherStatus::Waiting));
    }

    /// A malformed fanout message (here on the reserved beacon topic) is a protocol error
    /// against its publisher alone (MISSION L5, F2): nothing is delivered, its socket is
    /// closed, it goes reconnecting for `protocol_error` and the failure is counted; the
    /// other publisher keeps its socket and stays ready.
    #[test]
    fn l5_f2_a_malformed_fanout_message_fails_that_publisher_only() {
        let t0 = Instant::now();
        let (mut b, subs) = subscribed(2, t0);
        let (bad, good) = (subs[0], subs[1]);
        on_fanout(&mut b, bad, Ok(Fanout::Beacon), t0);
        on_fanout(&mut b, good, Ok(Fanout::Beacon), t0);
        b.effects.clear();
        let malformed = WireError::ReservedTopic { problem: "payload" };
        on_fanout(&mut b, bad, Err(malformed), t0);
        let reason = FailureReason::ProtocolError;
        assert_eq!(
            b.effects,
            [
                closed(slot_of(bad, 0)),
                state(bad, ConnState::Reconnecting, Some(reason)),
                Effect::Count(Count::LinkFailure(reason)),
            ]
        );
        assert_eq!(b.core.subs[bad].records, 0);
        assert_eq!(b.core.subs[good].slot, Some(slot_of(good, 0)));
        assert_eq!(b.core.subs[good].state.state(), ConnState::Ready);
        b.effects.clear();
        on_fanout(&mut b, good, publish(b"t", b"x"), t0);
        assert_eq!(b.effects, [delivered(good, b"t", b"x")]);
    }

    /// A PUBPACK is one receipt for its publisher's watch and its records are delivered in
    /// order (MISSION X4, L5; WIRE.md §7.5), whether read whole or staged as its records: staged, the first
    /// record carries the receipt for all three and each is charged a share of the read;
    /// the watch counts the three records at the first one, ready comes before the first
    /// delivery, and the rest are delivered as they come.
    #[test]
    fn x4_l5_a_pubpack_is_one_receipt_and_its_records_are_delivered_in_order() {
        let t0 = Instant::now();
        let (mut b, subs) = subscribed(2, t0);
        let (staged, whole) = (subs[0], subs[1]);
        let conn = b.core.subs[staged]
            .conn_id
            .expect("an open socket's connection");
        let payloads = [b"a" as &[u8], b"bb", b"ccc"]
            .map(Bytes::from_static)
            .to_vec();
        let parts: Vec<(Published, usize)> =
            published_records(staged, conn, Bytes::from_static(b"t"), payloads, 60).collect();
        let receipts: Vec<u16> = parts.iter().map(|(p, _)| p.receipt).collect();
        assert_eq!(receipts, [3, 0, 0]);
        assert_eq!(parts.iter().map(|(_, n)| n).sum::<usize>(), 60);
        let live = b.core.subs[staged].live;
        let records = |b: &Recording| {
            let watch = b.core.liveness.table().publisher(live);
            watch.map(|w| w.stats().records)
        };
        let mut parts = parts.into_iter();
        if let Some((first, _)) = parts.next() {
            on_published(&mut b, first, t0);
        }
        assert_eq!(records(&b), Some(3), "one receipt for the three records");
        for (p, _) in parts {
            on_published(&mut b, p, t0);
        }
        assert_eq!(records(&b), Some(3));
        assert_eq!(
            b.effects,
            [
                state(staged, ConnState::Ready, None),
                delivered(staged, b"t", b"a"),
                delivered(staged, b"t", b"bb"),
                delivered(staged, b"t", b"ccc"),
            ]
        );
        b.effects.clear();
        let pack = Fanout::Pack {
            topic: Bytes::from_static(b"u"),
            payloads: [b"1" as &[u8], b"2"].map(Bytes::from_static).to_vec(),
        };
        on_fanout(&mut b, whole, Ok(pack), t0);
        assert_eq!(
            b.effects,
            [
                state(whole, ConnState::Ready, None),
                delivered(whole, b"u", b"1"),
                delivered(whole, b"u", b"2"),
            ]
        );
    }

    /// A PUBPACK's records staged from a socket the subscription no longer has are not
    /// delivered and change nothing (MISSION L6) (the socket failed and a new one was opened meanwhile);
    /// nor are the rest of a PUBPACK whose receipt came after the silence deadline: that
    /// receipt fails the publisher (MISSION L5) and closes the socket they came on.
    #[test]
    fn l6_a_record_of_a_replaced_sub_connection_is_not_delivered() {
        let t0 = Instant::now();
        let (mut b, subs) = subscribed(1, t0);
        let p = subs[0];
        let old = b.core.subs[p].conn_id.expect("an open socket's connection");
        let payloads = vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")];
        let stale: Vec<Published> =
            published_records(p, old, Bytes::from_static(b"t"), payloads.clone(), 2)
                .map(|(r, _)| r)
                .collect();
        let slot = slot_of(p, 0);
        let watching = Watching::Sub {
            sub: p,
            connected: true,
        };
        handle_monitor_event(&mut b, slot, watching, (MonitorEvent::Disconnected, 0), t0);
        let reason = FailureReason::TransportError;
        assert_eq!(
            b.effects,
            [
                closed(slot),
                state(p, ConnState::Reconnecting, Some(reason)),
                Effect::Count(Count::LinkFailure(reason)),
            ]
        );
        on_sub_opened(&mut b, p, slot_of(p, 1), t0);
        b.effects.clear();
        for r in stale {
            on_published(&mut b, r, t0);
        }
        assert_eq!(b.effects, []);
        assert_eq!(watch_status(&b, p), Some(PublisherStatus::Waiting));

        let current = b.core.subs[p].conn_id.expect("the new socket's connection");
        let late = t0 + PEER_DEADLINE;
        for (r, _) in published_records(p, current, Bytes::from_static(b"t"), payloads, 2) {
            on_published(&mut b, r, late);
        }
        let reason = FailureReason::FanoutSilence;
        assert_eq!(
            b.effects,
            [
                closed(slot_of(p, 1)),
                state(p, ConnState::Reconnecting, Some(reason)),
                Effect::Count(Count::LinkFailure(reason)),
            ]
        );
        assert_eq!(b.core.subs[p].records, 0);
    }

    /// A node that runs CURVE does not open a subscription it knows no key to expect of
    /// its publisher (MISSION T3 under CURVE): refused as a security failure, shown once,
    /// and not asked about again before the longest backoff; a configured key secures the
    /// socket with it, and a failure of a subscription without a socket changes nothing.
    #[test]
    fn t3_under_curve_a_publisher_without_a_key_to_expect_is_not_opened() {
        let t0 = Instant::now();
        let mut b = shell("b", vec![]);
        b.curve = true;
        let key = PublicKey::from_bytes([7; 32]);
        let p = add_sub(&mut b.core, "tcp://p:1", None, t0);
        let q = add_sub(&mut b.core, "tcp://q:1", Some(key), t0);
        assert_eq!(open_security(&mut b, p, t0), SubSecurity::Refused);
        let reason = Some(FailureReason::SecurityFailure);
        assert_eq!(b.effects, [state(p, ConnState::NotConnected, reason)]);
        b.effects.clear();
        assert_eq!(open_security(&mut b, q, t0), SubSecurity::Curve(key));
        assert_eq!(b.effects, [], "a key to expect: nothing to refuse");
        let later = t0 + Duration::from_secs(1);
        assert_eq!(open_security(&mut b, p, later), SubSecurity::Refused);
        assert_eq!(b.effects, [], "shown once");
        assert_eq!(b.core.subs[p].retry_at, later + BACKOFF_MAX);
        assert!(!b.core.subs[p].is_open_due(later + BACKOFF_MAX / 2));
        assert!(b.core.subs[p].is_open_due(later + BACKOFF_MAX));
        fail_sub(&mut b, p, FailureReason::TransportError, "gone", later);
        assert_eq!(b.effects, [], "no socket: nothing fails");
    }
}
