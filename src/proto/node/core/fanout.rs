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

use super::{Count, Shell};
use crate::proto::liveness::{self, Delivery, FanoutInput, LivenessEvent, PublisherEvent};
use crate::proto::node::keys::{SlotKey, SubKey};
use crate::proto::node::received::Charges;
use crate::proto::node::sub::{
    judge_publisher_event, Fanout, Published, PublisherVerdict, SubSecurity,
};
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
