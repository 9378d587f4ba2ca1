//! The receive path's decisions over the node core, over what it asks of its shell beyond
//! [`Shell`] ([`ReceiveShell`]: the frame type it reads and how a frame becomes a payload,
//! the ACKs it sends, the calls it serves, the answers it hands to the call table, the
//! application's queue, reading an unadmitted connection's first record, a dialled
//! socket's monitor). The shell reads the sockets, looks up a socket's slot, splits off a
//! bound socket's routing id and hands the frames here.
//!
//! Where a record goes ([`crate::proto::node::received`] classifies it): a dialled
//! socket's record is its link's, after a dialled ROUTER's routing id
//! ([`handle_dialled_record`]); a dialled ROUTER's empty record is libzmq's connection
//! notice, the first its attach (HELLO goes, the monitor can go), any later one its loss,
//! which fails the link at once (MISSION L6, [`handle_router_notice`]). A bound socket's
//! record ([`handle_bound_record`]) is the link's its routing id was admitted as, or that
//! connection's loss if it is a notice ([`handle_inbound_notice`], L6); a refused
//! connection's record is not looked at and its notice forgets it; any other record of a
//! connection not admitted is its first record, for admission. A record for an inbound
//! connection's receive unit is its link's only while that connection is the link's
//! current one ([`handle_peer_record`]): a replaced connection's late records change
//! nothing.
//!
//! A link's record ([`handle_link_record`]): decoded with the capabilities its connection
//! negotiated ([`negotiated`]); a record that does not decode is a protocol error of that
//! connection only (MISSION W3). Otherwise, in order: a PROBE's id is the connection's last
//! peer probe, the record is the link's activity, and then it does what [`record_use`]
//! says it is for in its connection's state: a PROBE is echoed with an ACK and is no
//! evidence for this node's own deadline, an ACK is evidence for its own connection's
//! probe tracker only (L2), a WELCOME is the handshake's ([`handle_welcome`]), calls go to
//! the shell to serve and answers to its call table (an ANSWERS' each in order), a REJECT or
//! CLOSE ends the link with the reason judged ([`handle_peer_ended`]), and a MESSAGE (a
//! PACK's each in order, each counted as activity) is delivered if its connection is ready,
//! with the connection's source, counted, and application traffic of its probe tracker
//! (diagnostics only, never evidence, L2); anything else changes nothing but the link's
//! activity.
//!
//! The records of a PACK the receive loop staged one by one ([`handle_packed`]) are a run
//! of their connection ([`MessageRun`]): each is delivered as it comes, straight into the
//! application's queue while it has room and through the link's backlog after, and what
//! they count is counted once when the run ends ([`handle_run_end`]), before any other
//! record is processed.

use std::num::NonZeroU64;
use std::time::Instant;

use bytes::Bytes;

use super::{fail_gone_inbound, fail_link, handle_peer_ended, handle_welcome, send_hello, Shell};
use crate::proto::handshake;
use crate::proto::node::keys::{LinkKey, SlotKey, Tracked};
use crate::proto::node::link::{judge_close, judge_reject, Link, LinkKind, RouterNotice};
use crate::proto::node::received::{
    classify_bound, classify_dialled, is_notice, record_use, BoundRecord, DialledRecord,
    MessageRun, Placement, RecordUse,
};
use crate::proto::node::source::Source;
use crate::proto::state::FailureReason;
use crate::proto::wire::{self, Capabilities, CloseReason, Kind, Lane, Record};
use crate::proto::ConnId;

/// What the receive path asks of its shell beyond [`Shell`]: the frames it reads, and the
/// consequences of a link's records that reach beyond the core (the liveness records it
/// sends, the calls it serves, its call table, the application).
pub(crate) trait ReceiveShell: Shell {
    /// A frame as the shell reads it off a socket.
    type Frame: AsRef<[u8]>;

    /// `frame`'s bytes as a payload the application may keep (shared with the frame where
    /// the shell can, not copied).
    fn payload(frame: &Self::Frame) -> Bytes;
    /// Sends an ACK of the peer's probe `id` on link `k`'s connection.
    fn send_ack(&mut self, k: LinkKey, id: u64);
    /// Serves a REQUEST that arrived on link `k`.
    fn serve_request(&mut self, k: LinkKey, request: wire::Request, now: Instant);
    /// Serves the calls of a BATCH or CALLS that arrived on link `k` (MISSION K5).
    fn serve_batch(&mut self, k: LinkKey, requests: Vec<wire::Request>, now: Instant);
    /// The caller no longer waits for call `call_id` it sent on link `k` (a CANCEL).
    fn serve_cancel(&mut self, k: LinkKey, call_id: NonZeroU64, now: Instant);
    /// Stream call `call_id`, sent on link `k`, may send `items` more (a CREDIT).
    fn serve_credit(&mut self, k: LinkKey, call_id: NonZeroU64, items: u64, now: Instant);
    /// An answer to one of this node's calls arrived on link `k`.
    fn handle_answer(&mut self, k: LinkKey, answer: Answer, now: Instant);
    /// How many deliveries the application queue takes now, for link `k`, before it may
    /// have to hold one back (none while the link's backlog holds records).
    fn app_room(&self, k: LinkKey) -> usize;
    /// Hands the application a record on `channel` from `source` straight into its queue,
    /// which has room for it ([`ReceiveShell::app_room`]).
    fn deliver_now(&mut self, source: Source, channel: Bytes, payload: Bytes);
    /// Hands the application a record on `channel` from `source`, of link `k`: into its
    /// queue, or into the link's backlog while the queue is paused or the backlog holds
    /// records (the order within a link is kept).
    fn deliver(&mut self, k: LinkKey, source: Source, channel: Bytes, payload: Bytes);
    /// Counts `records` records delivered to the application.
    fn count_delivered(&mut self, records: u64);
    /// The first record `frames` of the unadmitted connection `route` of bound socket `slot`
    /// (of lane `lane`), for admission: the shell reads what the transport knows of the
    /// connection (its CURVE key) and hands it on ([`super::handle_first_record`]).
    fn first_record(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: Self::Frame,
        frames: &mut [Self::Frame],
        now: Instant,
    );
    /// Dialled socket `slot`'s connection attached and its HELLO went: its monitor is read
    /// once more and stopped (the connection's loss comes in band from now on).
    fn monitor_done(&mut self, slot: SlotKey);
}

/// An answer to one of this node's calls, alone or one of an ANSWERS.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The callee took the call.
    Accept(wire::Accept),
    /// The call's outcome.
    Reply(wire::Reply),
    /// One item of a stream call.
    Item(wire::Item),
}

impl Answer {
    /// The kind of the record it is.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Answer::Accept(_) => Kind::Accept,
            Answer::Reply(_) => Kind::Reply,
            Answer::Item(_) => Kind::Item,
        }
    }
}

/// The capabilities in effect on link `k`'s ready connection in `links`: those its peer
/// announced that this node (`me`) announced too; none before it is ready.
pub(crate) fn negotiated(
    links: &Tracked<LinkKey, Link>,
    me: Capabilities,
    k: LinkKey,
) -> Capabilities {
    links
        .get(k)
        .and_then(|l| l.conn.as_ref())
        .filter(|c| c.ready)
        .and_then(|c| c.peer.as_ref())
        .map_or(Capabilities::NONE, |p| p.capabilities.intersection(me))
}

/// A record read from dialled socket of link `k`: the link's record, or a connection
/// notice of a dialled ROUTER ([`handle_router_notice`]), as [`classify_dialled`] reads it
/// (a dialled ROUTER reads the bound peer's routing id first, a DEALER does not).
pub(crate) fn handle_dialled_record<S: ReceiveShell>(
    node: &mut S,
    k: LinkKey,
    frames: &[S::Frame],
    now: Instant,
) {
    let routed = (node.core().links[k].conn.as_ref()).is_some_and(|c| c.route.is_some());
    match classify_dialled(routed, frames) {
        DialledRecord::Record { skip } => handle_link_record(node, k, &frames[skip..], now),
        DialledRecord::Notice => handle_router_notice(node, k, now),
        DialledRecord::Nothing => {}
    }
}

/// A record read from bound socket `slot` (of lane `lane`), its routing id `route` split
/// off. The routing id names one physical connection: records of a replaced connection
/// find no link and change nothing (MISSION L6). An empty record is libzmq's notice of the
/// connection's attach or loss (`ROUTER_NOTIFY`): for an admitted connection it means the
/// connection is gone ([`handle_inbound_notice`]); for a refused one, that it left (its id
/// is forgotten); for any other it changes nothing (an attach comes before the HELLO, and
/// is no first record to refuse). Any other record of a connection not admitted is its
/// first record, for admission, unless the connection was refused already (then nothing it
/// sends is looked at).
pub(crate) fn handle_bound_record<S: ReceiveShell>(
    node: &mut S,
    slot: SlotKey,
    lane: Lane,
    route: S::Frame,
    mut frames: Vec<S::Frame>,
    now: Instant,
) {
    let core = node.core();
    let known = (core.accepting.inbound.get(&slot))
        .and_then(|m| m.get(route.as_ref()))
        .copied();
    match classify_bound(known, &frames) {
        BoundRecord::Gone(k) => handle_inbound_notice(node, k, now),
        BoundRecord::Link(k) => handle_link_record(node, k, &frames, now),
        BoundRecord::UnadmittedNotice => {
            // A refused connection's attach came before the HELLO that was refused, so
            // this notice is its departure: its id need not be remembered any more.
            if node
                .core_mut()
                .accepting
                .refused
                .forget(slot, route.as_ref())
            {
                tracing::trace!("a refused connection left");
            } else {
                tracing::trace!("connection notice from an unadmitted connection");
            }
        }
        BoundRecord::Unadmitted => {
            if node.core().ignores_unadmitted(slot, route.as_ref()) {
                // Refused already: the rest of what this connection sends is ignored.
                return;
            }
            node.first_record(slot, lane, route, &mut frames, now);
        }
    }
}

/// A record of connection `conn` of inbound link `k`, read from its shared bound socket
/// with its routing id looked up then: the link's while `conn` is still the link's current
/// connection (else it changes nothing, MISSION L6), an empty one libzmq's notice that the
/// connection is gone ([`handle_inbound_notice`]).
pub(crate) fn handle_peer_record<S: ReceiveShell>(
    node: &mut S,
    k: LinkKey,
    conn: ConnId,
    frames: &[S::Frame],
    now: Instant,
) {
    let current = (node.core().links.get(k)).and_then(|l| l.conn.as_ref());
    if current.is_none_or(|c| c.id != conn) {
        return;
    }
    if is_notice(frames) {
        handle_inbound_notice(node, k, now);
    } else {
        handle_link_record(node, k, frames, now);
    }
}

/// An empty record a dialled ROUTER of link `k` received from its peer's routing id: a
/// connection notice of libzmq (`ROUTER_NOTIFY`), in order with the peer's records
/// ([`Conn::handle_router_notice`](crate::proto::node::link::Conn::handle_router_notice)). The first says the connection attached; any later one
/// that the connection is gone (MISSION L6: at once), whether it says so itself or is the
/// attach of a reconnection libzmq made after it (which never carries this link's records).
pub(crate) fn handle_router_notice<S: ReceiveShell>(node: &mut S, k: LinkKey, now: Instant) {
    let Some(c) = node.core_mut().links[k].conn.as_mut() else {
        return;
    };
    let notice = c.handle_router_notice();
    tracing::debug!(link = %k, notices = c.notices, "connection notice");
    if notice == RouterNotice::Gone {
        fail_link(node, k, FailureReason::TransportError, "disconnected", now);
        return;
    }
    // Attached: the handshake is done and the socket knows the peer's routing id, so
    // HELLO can go now if the monitor's word has not come yet (or a send right after it
    // found the peer not yet known), and the monitor can go.
    let slot = c.slot;
    send_hello(node, k);
    node.monitor_done(slot);
}

/// libzmq's notice (`ROUTER_NOTIFY`) for admitted inbound link `k`'s connection: the
/// connection is gone (MISSION L6: at once). Its attach notice came before its HELLO, so
/// any notice now is its loss, or the attach of a newer connection with the same routing
/// id, which libzmq lets in only once the old connection's pipe is gone.
pub(crate) fn handle_inbound_notice<S: Shell>(node: &mut S, k: LinkKey, now: Instant) {
    tracing::debug!(link = %k, "inbound connection notice: gone");
    fail_gone_inbound(node, k, now);
}

/// A record read from link `k`'s current connection (the routing frames split off): what
/// it does in the connection's state (see the module docs).
pub(crate) fn handle_link_record<S: ReceiveShell>(
    node: &mut S,
    k: LinkKey,
    frames: &[S::Frame],
    now: Instant,
) {
    let caps = negotiated(&node.core().links, node.me().capabilities, k);
    let rec = match Record::decode_in(frames, caps, S::payload) {
        Ok(r) => r,
        Err(e) => {
            // Malformed input: a protocol error for this connection only (MISSION W3).
            fail_link(node, k, FailureReason::ProtocolError, &e.to_string(), now);
            return;
        }
    };
    let core = node.core_mut();
    let inbound = matches!(core.links[k].kind, LinkKind::Inbound { .. });
    let Some(c) = core.links[k].conn.as_mut() else {
        return;
    };
    let (ready, conn_id, live) = (c.ready, c.id, c.live);
    let kind = rec.kind();
    // One span per physical connection: identities go to traces, never to metric labels.
    let _span = tracing::debug_span!("conn", id = %conn_id, kind = kind.name()).entered();
    if let Record::Probe { id } = rec {
        c.last_peer_probe = Some(id.get());
    }
    core.on_link_activity(k, 1, now);
    match (record_use(kind, ready, inbound), rec) {
        (RecordUse::Ignored, _) => {
            tracing::debug!(kind = kind.name(), "record not handled in this state");
        }
        (_, Record::Probe { id }) => {
            // Echo the id; a received probe is not evidence for our own deadline (L2).
            node.send_ack(k, id.get());
        }
        (_, Record::Ack { id }) => {
            if let Some(live) = live {
                // The ACK travelled on this physical connection: it is evidence only for
                // this connection's tracker (L2).
                let outcome =
                    (node.core_mut().liveness.table_mut()).handle_ack(live, conn_id, id.get(), now);
                tracing::trace!(conn = %conn_id, ?outcome, "ack");
            }
        }
        (_, Record::Welcome(w)) => {
            let (lane, peer) = handshake::from_welcome(w);
            handle_welcome(node, k, lane, peer, now);
        }
        (_, Record::Request(req)) => node.serve_request(k, req, now),
        (_, Record::Batch(b)) => node.serve_batch(k, b.into_requests(), now),
        // A CALLS record is served as the BATCH of the same calls (WIRE.md §4.14).
        (_, Record::Calls(c)) => node.serve_batch(k, c.into_requests(), now),
        (_, Record::Cancel { call_id }) => node.serve_cancel(k, call_id, now),
        (_, Record::Credit { call_id, items }) => node.serve_credit(k, call_id, items.get(), now),
        (_, Record::Accept(a)) => node.handle_answer(k, Answer::Accept(a), now),
        (_, Record::Reply(r)) => node.handle_answer(k, Answer::Reply(r), now),
        (_, Record::Item(i)) => node.handle_answer(k, Answer::Item(i), now),
        (_, Record::Answers(answers)) => {
            // Each as if it had arrived alone, in order (WIRE.md §4.16).
            for rec in answers.into_records() {
                match rec {
                    Record::Accept(a) => node.handle_answer(k, Answer::Accept(a), now),
                    Record::Reply(r) => node.handle_answer(k, Answer::Reply(r), now),
                    _ => {}
                }
            }
        }
        (_, Record::Reject(r)) => {
            handle_peer_ended(node, k, judge_reject(r.reason), r.detail.as_str(), now)
        }
        (_, Record::Close { reason }) => {
            let detail = format!("peer closed: {}", close_name(reason));
            handle_peer_ended(node, k, judge_close(reason, inbound), &detail, now);
        }
        (_, Record::Message(m)) => {
            let channel = Bytes::from(m.channel.into_string().into_bytes());
            handle_message(node, k, channel, m.payload, now);
        }
        (_, Record::Pack(p)) => {
            // Each as the MESSAGE it stands for, in order (WIRE.md §4.18). A PACK the
            // receive loop read is staged as its records instead (the shell's unpacking);
            // this is the path of one that reached here whole.
            let (channel, payloads) = p.into_parts();
            let channel = Bytes::from(channel.into_string().into_bytes());
            for (i, payload) in payloads.into_iter().enumerate() {
                if i > 0 {
                    // The first was counted above, as every record is.
                    node.core_mut().on_link_activity(k, 1, now);
                }
                handle_message(node, k, channel.clone(), payload, now);
            }
        }
        (_, Record::Hello(_)) => {
            tracing::debug!(kind = kind.name(), "record not handled in this state");
        }
    }
}

/// A MESSAGE on `channel` on link `k`'s connection, on its own or one of a PACK that
/// reached [`handle_link_record`] whole (the receive loop stages a PACK as its records,
/// [`handle_packed`]): delivered if the connection is ready, with its source, and counted.
/// It is application traffic of the connection's probe tracker: diagnostics only, never
/// evidence for the deadline (MISSION L2).
fn handle_message<S: ReceiveShell>(
    node: &mut S,
    k: LinkKey,
    channel: Bytes,
    payload: Bytes,
    now: Instant,
) {
    let core = node.core_mut();
    let Some(c) = core.links.get(k).and_then(|l| l.conn.as_ref()) else {
        return;
    };
    if !c.ready {
        return;
    }
    let (live, source) = (c.live, c.source.clone());
    if let Some(live) = live {
        // Diagnostics only: application traffic never extends the deadline (L2).
        let _ = core.liveness.table_mut().handle_app_traffic(live, now);
    }
    let Some(source) = source else {
        return;
    };
    node.count_delivered(1);
    node.deliver(k, source, channel, payload);
}

/// One MESSAGE of a PACK of connection `conn` of link `link`, staged as its own record, in
/// its unit's turn: delivered if that connection is still the link's current one and ready,
/// and counted with the rest of `run` ([`MessageRun`]), which it begins if `run` is another
/// connection's, or none (that run ends first, [`handle_run_end`]). A record of a
/// connection that is no longer current changes nothing (MISSION L6).
pub(crate) fn handle_packed<S: ReceiveShell>(
    node: &mut S,
    link: LinkKey,
    conn: ConnId,
    channel: Bytes,
    payload: Bytes,
    now: Instant,
    run: &mut Option<MessageRun>,
) {
    if !run.as_ref().is_some_and(|r| r.continues(link, conn)) {
        handle_run_end(node, run.take());
        let current = node.core().links.get(link).and_then(|l| l.conn.as_ref());
        *run = MessageRun::begin(link, conn, current, || node.app_room(link), now);
    }
    let Some(r) = run.as_mut() else {
        return;
    };
    let Some((source, placement)) = r.handle_record(now) else {
        return;
    };
    match placement {
        Placement::Now => node.deliver_now(source.clone(), channel, payload),
        Placement::Queue => {
            node.deliver(link, source.clone(), channel, payload);
            r.set_room(node.app_room(link));
        }
    }
}

/// Ends `run`, if there is one: what its records count ([`MessageRun::end`]), once: the
/// link's activity, the connection's application traffic (diagnostics only, L2) and the
/// records delivered.
pub(crate) fn handle_run_end<S: ReceiveShell>(node: &mut S, run: Option<MessageRun>) {
    let Some(end) = run.map(MessageRun::end) else {
        return;
    };
    let core = node.core_mut();
    core.on_link_activity(end.link, end.records, end.last);
    if let Some(live) = end.traffic_of {
        // Diagnostics only: application traffic never extends the deadline (L2).
        let _ = (core.liveness.table_mut()).handle_app_traffic_run(live, end.records, end.last);
    }
    if end.delivered > 0 {
        node.count_delivered(end.delivered);
    }
}

/// Display name of a close reason, as a CLOSE's failure detail names it.
fn close_name(r: CloseReason) -> &'static str {
    match r {
        CloseReason::Shutdown => "shutdown",
        CloseReason::Draining => "draining",
        CloseReason::Replaced => "replaced",
        CloseReason::DeadlineExceeded => "deadline_exceeded",
        CloseReason::ProtocolError => "protocol_error",
        CloseReason::NotRequired => "not_required",
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::{hello_from, shell, Effect, Recording};
    use super::super::{handle_first_record, handle_timeout, hello, reject, welcome, Count};
    use super::*;
    use crate::proto::handshake::Expectation;
    use crate::proto::node::admit::Credentials;
    use crate::proto::node::keys::{Key, SlotKey};
    use crate::proto::wire::Lane;
    use crate::proto::ConnId;

    /// What the receive path asked of the recording shell beyond `Shell`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Received {
        /// An ACK of the peer's probe id.
        SendAck(LinkKey, u64),
        /// A call to serve, by the kind of the record that carried it.
        Serve(LinkKey, Kind),
        /// An answer for the call table, by its kind.
        Answer(LinkKey, Kind),
        /// A record for the application, through link `k`'s backlog: source, channel and
        /// payload.
        Deliver(LinkKey, Source, Vec<u8>, Vec<u8>),
        /// A record straight into the application's queue.
        DeliverNow(Source, Vec<u8>, Vec<u8>),
        /// Records delivered, counted.
        CountDelivered(u64),
        /// An unadmitted connection's first record, for admission.
        FirstRecord(SlotKey, Vec<u8>),
        /// A dialled socket's monitor can go.
        MonitorDone(SlotKey),
    }

    impl Recording {
        fn received(&mut self, r: Received) {
            self.effects.push(Effect::Received(r));
        }
    }

    impl ReceiveShell for Recording {
        type Frame = Vec<u8>;

        fn payload(frame: &Vec<u8>) -> Bytes {
            Bytes::copy_from_slice(frame)
        }
        fn send_ack(&mut self, k: LinkKey, id: u64) {
            self.received(Received::SendAck(k, id));
        }
        fn serve_request(&mut self, k: LinkKey, _: wire::Request, _: Instant) {
            self.received(Received::Serve(k, Kind::Request));
        }
        fn serve_batch(&mut self, k: LinkKey, _: Vec<wire::Request>, _: Instant) {
            self.received(Received::Serve(k, Kind::Batch));
        }
        fn serve_cancel(&mut self, k: LinkKey, _: NonZeroU64, _: Instant) {
            self.received(Received::Serve(k, Kind::Cancel));
        }
        fn serve_credit(&mut self, k: LinkKey, _: NonZeroU64, _: u64, _: Instant) {
            self.received(Received::Serve(k, Kind::Credit));
        }
        fn handle_answer(&mut self, k: LinkKey, answer: Answer, _: Instant) {
            self.received(Received::Answer(k, answer.kind()));
        }
        fn app_room(&self, _: LinkKey) -> usize {
            1
        }
        fn deliver_now(&mut self, source: Source, channel: Bytes, payload: Bytes) {
            let (channel, payload) = (channel.to_vec(), payload.to_vec());
            self.received(Received::DeliverNow(source, channel, payload));
        }
        fn deliver(&mut self, k: LinkKey, source: Source, channel: Bytes, payload: Bytes) {
            let (channel, payload) = (channel.to_vec(), payload.to_vec());
            self.received(Received::Deliver(k, source, channel, payload));
        }
        fn count_delivered(&mut self, records: u64) {
            self.received(Received::CountDelivered(records));
        }
        fn first_record(
            &mut self,
            slot: SlotKey,
            _: Lane,
            route: Vec<u8>,
            _: &mut [Vec<u8>],
            _: Instant,
        ) {
            self.received(Received::FirstRecord(slot, route));
        }
        fn monitor_done(&mut self, slot: SlotKey) {
            self.received(Received::MonitorDone(slot));
        }
    }

    fn nz(v: u64) -> NonZeroU64 {
        NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)
    }

    /// Node b with `rid`'s inbound Application connection admitted on bound socket 1 as
    /// routing id `route` and ready: its link.
    fn admitted(b: &mut Recording, rid: &str, route: &[u8], now: Instant) -> LinkKey {
        let slot = SlotKey::from_index(1);
        let hello = hello_from(rid);
        let lane = Lane::Application;
        handle_first_record(
            b,
            slot,
            lane,
            route.to_vec(),
            Credentials::Plain,
            hello,
            now,
        );
        let k = b.core.accepting.inbound[&slot][route];
        assert!(b.core.links[k].conn.as_ref().is_some_and(|c| c.ready));
        b.effects.clear();
        k
    }

    /// Node b's dialled Application link to a, its connection `id` on socket `slot` open
    /// and not ready (HELLO sent, no WELCOME yet).
    fn dialling(b: &mut Recording, id: u64, slot: SlotKey, now: Instant) -> LinkKey {
        let k = super::super::tests::dialling(b, id, slot, now);
        if let Some(c) = b.core.links[k].conn.as_mut() {
            c.hello_sent = true;
        }
        k
    }

    /// The pending probe id of link `k`'s connection, once the timers sent its probe.
    fn probed(b: &mut Recording, k: LinkKey) -> u64 {
        let live = b.core.links[k].conn.as_ref().and_then(|c| c.live);
        let live = live.expect("a ready connection's probe tracker");
        while b
            .core
            .liveness
            .table()
            .probe(live)
            .and_then(|t| t.pending_id())
            .is_none()
        {
            let at = b.core.liveness.table().poll_timeout();
            handle_timeout(b, at.expect("a probe tracker has a deadline"));
        }
        b.effects.retain(|e| *e != Effect::SendProbe(k));
        let pending = b
            .core
            .liveness
            .table()
            .probe(live)
            .and_then(|t| t.pending_id());
        pending.unwrap_or_default()
    }

    fn from_a() -> Source {
        Source::Peer { rid: "a".into() }
    }

    fn acks_accepted(b: &Recording, k: LinkKey) -> u64 {
        let live = b.core.links[k].conn.as_ref().and_then(|c| c.live);
        let tracker = live.and_then(|l| b.core.liveness.table().probe(l));
        tracker.map_or(0, |t| t.stats().acks_accepted)
    }

    /// A PROBE is echoed with an ACK of its id and remembered as the connection's last
    /// peer probe, and is no evidence for this node's own deadline (MISSION L2).
    #[test]
    fn l2_a_probe_is_echoed_and_is_no_evidence() {
        let mut b = shell("b", vec![]);
        let now = Instant::now();
        let k = admitted(&mut b, "a", b"ra", now);
        let pending = probed(&mut b, k);
        let probe = Record::Probe { id: nz(7) }.encode();
        handle_link_record(&mut b, k, &probe, now);
        assert_eq!(b.effects, [Effect::Received(Received::SendAck(k, 7))]);
        let c = b.core.links[k].conn.as_ref();
        assert_eq!(c.and_then(|c| c.last_peer_probe), Some(7));
        assert_eq!(acks_accepted(&b, k), 0);
        let live = c
            .and_then(|c| c.live)
            .and_then(|l| b.core.liveness.table().probe(l));
        assert_eq!(live.and_then(|t| t.pending_id()), Some(pending));
    }

    /// An ACK is evidence for the probe tracker of the connection it travelled on only
    /// (MISSION L2): once a newer connection replaced the one probed, an ACK of the old
    /// connection's probe id is no evidence for the new one; the new one's own id is.
    #[test]
    fn l2_an_ack_on_a_replaced_connection_is_no_evidence_for_the_new_one() {
        let mut b = shell("b", vec![]);
        let now = Instant::now();
        let k = admitted(&mut b, "a", b"old", now);
        let old = probed(&mut b, k);
        let at = b.core.liveness.table().poll_timeout().unwrap_or(now);
        let again = admitted(&mut b, "a", b"new", at);
        assert_eq!(again, k, "the same link, its connection replaced");
        handle_link_record(&mut b, k, &Record::Ack { id: nz(old) }.encode(), at);
        assert_eq!(b.effects, []);
        assert_eq!(acks_accepted(&b, k), 0);
        let new = probed(&mut b, k);
        assert_ne!(new, old);
        handle_link_record(&mut b, k, &Record::Ack { id: nz(new) }.encode(), at);
        assert_eq!(acks_accepted(&b, k), 1);
        assert_eq!(b.effects, []);
    }

    /// A record that does not decode fails its own link as a protocol error (MISSION W3):
    /// its calls, its queue, a CLOSE to the peer, the application, the count; another
    /// peer's link stays ready. An extension record its connection did not negotiate (a
    /// PACK here) does not decode either.
    #[test]
    fn w3_a_malformed_record_fails_only_its_link_as_a_protocol_error() {
        for frames in [
            vec![b"not a record".to_vec()],
            Record::Pack(
                wire::Pack::new(wire::Name::new("ch").unwrap(), vec![Bytes::new(); 2]).unwrap(),
            )
            .encode(),
        ] {
            let mut b = shell("b", vec![]);
            let now = Instant::now();
            let ka = admitted(&mut b, "a", b"ra", now);
            let kc = admitted(&mut b, "c", b"rc", now);
            handle_link_record(&mut b, ka, &frames, now);
            let reason = FailureReason::ProtocolError;
            let slot = SlotKey::from_index(1);
            assert_eq!(
                b.effects[..3],
                [
                    Effect::FailCalls(ka, ConnId(101), reason),
                    Effect::CloseSendQueue(ka, reason),
                    Effect::SendTo(slot, b"ra".to_vec(), Kind::Close),
                ]
            );
            assert!(b.effects.contains(&Effect::RemovePeerUnit(ka, ConnId(101))));
            assert_eq!(
                b.effects.last(),
                Some(&Effect::Count(Count::LinkFailure(reason)))
            );
            let of_c = |e: &Effect| matches!(e, Effect::FailCalls(l, ..) | Effect::EmitState(l, ..) if *l == kc);
            assert!(!b.effects.iter().any(of_c));
            assert!(b.core.links[ka].conn.is_none());
            assert!(b.core.links[kc].conn.as_ref().is_some_and(|c| c.ready));
        }
    }

    /// A CLOSE ends the link with the reason judged: an inbound connection's peer shutting
    /// down is an orderly close; a dialled connection the peer replaced stands down (its
    /// own dial of the lane is current, MISSION T1), which is not counted as a failure.
    #[test]
    fn t1_a_close_ends_the_link_with_the_judged_reason() {
        let mut b = shell("b", vec!["a"]);
        let now = Instant::now();
        let k = admitted(&mut b, "a", b"ra", now);
        let close = Record::Close {
            reason: CloseReason::Shutdown,
        };
        handle_link_record(&mut b, k, &close.encode(), now);
        let orderly = FailureReason::OrderlyClose;
        assert_eq!(b.effects[0], Effect::FailCalls(k, ConnId(101), orderly));
        assert!(b
            .effects
            .iter()
            .any(|e| matches!(e, Effect::EmitState(l, _, Some(r)) if *l == k && *r == orderly)));
        assert!(!b.core.links[k].yielded && b.core.links[k].conn.is_none());

        let slot = SlotKey::from_index(3);
        let dk = dialling(&mut b, 1, slot, now);
        b.effects.clear();
        let close = Record::Close {
            reason: CloseReason::Replaced,
        };
        handle_link_record(&mut b, dk, &close.encode(), now);
        let stood = FailureReason::StoodDown;
        assert_eq!(
            b.effects[..3],
            [
                Effect::FailCalls(dk, ConnId(1), stood),
                Effect::CloseSendQueue(dk, stood),
                Effect::CloseDialled(dk, slot),
            ]
        );
        assert!(!b
            .effects
            .contains(&Effect::Count(Count::LinkFailure(stood))));
        assert!(b.core.links[dk].yielded && b.core.links[dk].conn.is_none());
    }

    /// A REJECT of a dialled connection ends its link with the REJECT's reason judged.
    #[test]
    fn t1_a_reject_ends_the_link_with_its_reason() {
        let mut b = shell("b", vec!["a"]);
        let now = Instant::now();
        let slot = SlotKey::from_index(3);
        let dk = dialling(&mut b, 1, slot, now);
        let reject = reject(wire::RejectReason::IdentityMismatch, "not you");
        handle_link_record(&mut b, dk, &reject, now);
        let reason = FailureReason::IdentityMismatch;
        assert_eq!(b.effects[0], Effect::FailCalls(dk, ConnId(1), reason));
        assert_eq!(
            b.effects.last(),
            Some(&Effect::Count(Count::LinkFailure(reason)))
        );
        assert!(!b.core.links[dk].yielded && b.core.links[dk].conn.is_none());
    }

    /// A record that is not for its connection's state changes nothing but the link's
    /// activity: calls, answers and messages before the connection is ready, a WELCOME on
    /// an inbound connection or once ready, a HELLO on an admitted connection.
    #[test]
    fn a_record_not_for_its_state_changes_nothing() {
        let mut b = shell("b", vec!["a"]);
        let now = Instant::now();
        let dk = dialling(&mut b, 1, SlotKey::from_index(3), now);
        let k = admitted(&mut b, "c", b"rc", now);
        let message = Record::Message(wire::Message {
            channel: wire::Name::new("ch").unwrap(),
            payload: Bytes::from_static(b"x"),
        });
        let reply = Record::Reply(wire::Reply {
            call_id: nz(1),
            code: wire::ReplyCode::Ok,
            payload: Bytes::new(),
            replayed: false,
        });
        for rec in [message, reply] {
            handle_link_record(&mut b, dk, &rec.encode(), now);
        }
        let lane = Lane::Application;
        let welcome = welcome(lane, &b.me, Capabilities::NONE).unwrap();
        handle_link_record(&mut b, k, &welcome, now);
        let hello = hello(lane, &b.me, &Expectation::default(), 0).unwrap();
        handle_link_record(&mut b, k, &hello, now);
        assert_eq!(b.effects, []);
        assert!(b.core.links[dk].conn.as_ref().is_some_and(|c| !c.ready));
        assert!(b.core.links[k].conn.as_ref().is_some_and(|c| c.ready));
    }

    /// A ready connection's calls go to the shell to serve, its answers to the call table
    /// and its MESSAGEs to the application, each once, in order.
    #[test]
    fn a_ready_connections_calls_answers_and_messages_are_handed_on() {
        let mut b = shell("b", vec![]);
        let now = Instant::now();
        let k = admitted(&mut b, "a", b"ra", now);
        let request = Record::Request(wire::Request {
            call_id: nz(4),
            ttl_ms: None,
            semantics: wire::Semantics::Query,
            channel: wire::Name::new("pump").unwrap(),
            method: wire::Name::new("m").unwrap(),
            idempotency_key: None,
            payload: Bytes::new(),
        });
        let accept = Record::Accept(wire::Accept {
            call_id: nz(9),
            generation: nz(1),
            connection_id: 0,
        });
        let message = Record::Message(wire::Message {
            channel: wire::Name::new("ch").unwrap(),
            payload: Bytes::from_static(b"x"),
        });
        for rec in [request, accept, message] {
            handle_link_record(&mut b, k, &rec.encode(), now);
        }
        assert_eq!(
            b.effects,
            [
                Effect::Received(Received::Serve(k, Kind::Request)),
                Effect::Received(Received::Answer(k, Kind::Accept)),
                Effect::Received(Received::CountDelivered(1)),
                Effect::Received(Received::Deliver(
                    k,
                    from_a(),
                    b"ch".to_vec(),
                    b"x".to_vec()
                )),
            ]
        );
    }

    /// A dialled ROUTER's first connection notice is its attach: HELLO goes (once) and the
    /// monitor can go. Any later notice is the connection's loss and fails the link at once
    /// as a transport error (MISSION L6); a read with not even a routing id is nothing.
    #[test]
    fn l6_a_router_notice_after_the_attach_fails_the_link_at_once() {
        let mut b = shell("b", vec!["a"]);
        let now = Instant::now();
        let slot = SlotKey::from_index(3);
        let dk = dialling(&mut b, 1, slot, now);
        if let Some(c) = b.core.links[dk].conn.as_mut() {
            (c.hello_sent, c.route) = (false, Some(b"peer".to_vec()));
        }
        handle_dialled_record(&mut b, dk, &[], now);
        assert_eq!(b.effects, []);
        let notice = [b"peer".to_vec(), Vec::new()];
        handle_dialled_record(&mut b, dk, &notice, now);
        assert_eq!(
            b.effects,
            [
                Effect::SendOnLink(dk, Kind::Hello),
                Effect::Received(Received::MonitorDone(slot)),
            ]
        );
        b.effects.clear();
        handle_dialled_record(&mut b, dk, &notice, now);
        let reason = FailureReason::TransportError;
        assert_eq!(
            b.effects[..3],
            [
                Effect::FailCalls(dk, ConnId(1), reason),
                Effect::CloseSendQueue(dk, reason),
                Effect::CloseDialled(dk, slot),
            ]
        );
        assert_eq!(
            b.effects.last(),
            Some(&Effect::Count(Count::LinkFailure(reason)))
        );
        assert!(b.core.links[dk].conn.is_none());
    }

    /// A dialled ROUTER's record starts after the peer's routing id; a DEALER's is whole
    /// (and an empty record of a DEALER is a malformed record, not a notice).
    #[test]
    fn a_dialled_record_is_read_after_the_routing_id_of_a_router_only() {
        let mut b = shell("b", vec!["a"]);
        let now = Instant::now();
        let slot = SlotKey::from_index(3);
        let dk = dialling(&mut b, 1, slot, now);
        let mut probe = vec![b"peer".to_vec()];
        probe.extend(Record::Probe { id: nz(3) }.encode());
        if let Some(c) = b.core.links[dk].conn.as_mut() {
            c.route = Some(b"peer".to_vec());
        }
        handle_dialled_record(&mut b, dk, &probe, now);
        assert_eq!(b.effects, [Effect::Received(Received::SendAck(dk, 3))]);
        b.effects.clear();
        if let Some(c) = b.core.links[dk].conn.as_mut() {
            c.route = None;
        }
        handle_dialled_record(&mut b, dk, &probe[1..], now);
        assert_eq!(b.effects, [Effect::Received(Received::SendAck(dk, 3))]);
        b.effects.clear();
        handle_dialled_record(&mut b, dk, &[Vec::new()], now);
        let reason = FailureReason::ProtocolError;
        assert_eq!(b.effects[0], Effect::FailCalls(dk, ConnId(1), reason));
    }

    /// On a bound socket, an admitted connection's record goes to its link and its notice
    /// fails the link at once as the peer's disconnect (MISSION L6); once a newer
    /// connection replaced it, the old routing id names no link: its records are an
    /// unadmitted connection's, for admission, and never its old link's.
    #[test]
    fn l6_a_bound_notice_fails_its_link_and_a_replaced_routing_id_names_no_link() {
        let mut b = shell("b", vec![]);
        let now = Instant::now();
        let slot = SlotKey::from_index(1);
        let lane = Lane::Application;
        let k = admitted(&mut b, "a", b"old", now);
        let probe = Record::Probe { id: nz(5) }.encode();
        handle_bound_record(&mut b, slot, lane, b"old".to_vec(), probe.clone(), now);
        assert_eq!(b.effects, [Effect::Received(Received::SendAck(k, 5))]);
        assert_eq!(admitted(&mut b, "a", b"new", now), k);
        handle_bound_record(&mut b, slot, lane, b"old".to_vec(), probe, now);
        let first = Received::FirstRecord(slot, b"old".to_vec());
        assert_eq!(b.effects, [Effect::Received(first)]);
        b.effects.clear();
        handle_bound_record(&mut b, slot, lane, b"old".to_vec(), vec![Vec::new()], now);
        assert_eq!(b.effects, [], "an unadmitted connection's notice");
        handle_bound_record(&mut b, slot, lane, b"new".to_vec(), vec![Vec::new()], now);
        let reason = FailureReason::TransportError;
        assert_eq!(b.effects[0], Effect::FailCalls(k, ConnId(102), reason));
        assert!(b.effects.contains(&Effect::RemovePeerUnit(k, ConnId(102))));
        assert_eq!(
            b.effects.last(),
            Some(&Effect::Count(Count::LinkFailure(reason)))
        );
        assert!(b.core.links[k].conn.is_none());
        assert!(b.core.accepting.inbound[&slot].is_empty());
    }

    /// A refused connection's records are not looked at (WIRE.md §5.1); its notice is its
    /// departure, after which its routing id is forgotten.
    #[test]
    fn a_refused_connection_is_ignored_until_its_notice() {
        let mut b = shell("b", vec![]);
        let now = Instant::now();
        let (slot, route, lane) = (SlotKey::from_index(1), b"r".to_vec(), Lane::Application);
        let garbage = vec![b"not a record".to_vec()];
        let first = Record::decode(&garbage).expect_err("garbage does not decode");
        let first = super::super::First::Malformed(first);
        handle_first_record(
            &mut b,
            slot,
            lane,
            route.clone(),
            Credentials::Plain,
            first,
            now,
        );
        b.effects.clear();
        handle_bound_record(&mut b, slot, lane, route.clone(), garbage.clone(), now);
        assert_eq!(b.effects, []);
        assert!(b.core.ignores_unadmitted(slot, &route));
        handle_bound_record(&mut b, slot, lane, route.clone(), vec![Vec::new()], now);
        assert_eq!(b.effects, []);
        assert!(!b.core.ignores_unadmitted(slot, &route));
        handle_bound_record(&mut b, slot, lane, route.clone(), garbage, now);
        assert_eq!(
            b.effects,
            [Effect::Received(Received::FirstRecord(slot, route))]
        );
    }

    /// A record read for an inbound connection's receive unit is its link's only while that
    /// connection is the link's current one (MISSION L6); its notice fails the link.
    #[test]
    fn l6_a_peer_units_record_counts_only_for_its_current_connection() {
        let mut b = shell("b", vec![]);
        let now = Instant::now();
        let k = admitted(&mut b, "a", b"old", now);
        let old = ConnId(101);
        assert_eq!(admitted(&mut b, "a", b"new", now), k);
        let probe = Record::Probe { id: nz(5) }.encode();
        handle_peer_record(&mut b, k, old, &probe, now);
        handle_peer_record(&mut b, k, old, &[Vec::new()], now);
        assert_eq!(b.effects, []);
        let new = ConnId(102);
        handle_peer_record(&mut b, k, new, &probe, now);
        assert_eq!(b.effects, [Effect::Received(Received::SendAck(k, 5))]);
        handle_peer_record(&mut b, k, new, &[Vec::new()], now);
        let reason = FailureReason::TransportError;
        assert_eq!(b.effects[1], Effect::FailCalls(k, new, reason));
        assert!(b.core.links[k].conn.is_none());
    }

    fn app_receives(b: &Recording, k: LinkKey) -> u64 {
        let live = b.core.links[k].conn.as_ref().and_then(|c| c.live);
        let tracker = live.and_then(|l| b.core.liveness.table().probe(l));
        tracker.map_or(0, |t| t.stats().app_receives)
    }

    /// A MESSAGE of a ready connection is counted and delivered through its link's backlog,
    /// with the connection's source; it is application traffic of the connection's probe
    /// tracker, diagnostics only: no evidence, the pending probe stays pending (MISSION L2).
    #[test]
    fn l2_a_message_is_delivered_and_is_no_evidence() {
        let mut b = shell("b", vec![]);
        let now = Instant::now();
        let k = admitted(&mut b, "a", b"ra", now);
        let pending = probed(&mut b, k);
        let message = Record::Message(wire::Message {
            channel: wire::Name::new("ch").unwrap(),
            payload: Bytes::from_static(b"x"),
        });
        handle_link_record(&mut b, k, &message.encode(), now);
        assert_eq!(
            b.effects,
            [
                Effect::Received(Received::CountDelivered(1)),
                Effect::Received(Received::Deliver(
                    k,
                    from_a(),
                    b"ch".to_vec(),
                    b"x".to_vec()
                )),
            ]
        );
        assert_eq!((app_receives(&b, k), acks_accepted(&b, k)), (1, 0));
        let live = b.core.links[k].conn.as_ref().and_then(|c| c.live);
        let tracker = live.and_then(|l| b.core.liveness.table().probe(l));
        assert_eq!(tracker.and_then(|t| t.pending_id()), Some(pending));
    }

    /// A PACK's records staged one by one are delivered as the application queue has room
    /// (straight in while it has, through the backlog after) and counted once, at the end
    /// of their run (R5): the link's activity, the application traffic and the deliveries.
    /// A record of another connection ends the run first; one of a connection that is no
    /// longer the link's current one changes nothing (MISSION L6).
    #[test]
    fn r5_l6_a_runs_records_are_delivered_with_room_and_counted_once() {
        let mut b = shell("b", vec![]);
        let now = Instant::now();
        let k = admitted(&mut b, "a", b"old", now);
        let records = b.core.links[k].records;
        let mut run = None;
        let pack = |b: &mut Recording, conn, run: &mut Option<MessageRun>, p: &'static [u8]| {
            let (ch, p) = (Bytes::from_static(b"ch"), Bytes::from_static(p));
            handle_packed(b, k, ConnId(conn), ch, p, now, run);
        };
        for p in [b"1", b"2", b"3"] {
            pack(&mut b, 101, &mut run, p);
        }
        let (ch, a) = (b"ch".to_vec(), from_a());
        assert_eq!(
            b.effects,
            [
                Effect::Received(Received::DeliverNow(a.clone(), ch.clone(), b"1".to_vec())),
                Effect::Received(Received::Deliver(k, a.clone(), ch.clone(), b"2".to_vec())),
                Effect::Received(Received::DeliverNow(a.clone(), ch.clone(), b"3".to_vec())),
            ]
        );
        assert_eq!((b.core.links[k].records, app_receives(&b, k)), (records, 0));
        b.effects.clear();
        // Any other record (the replacing connection's HELLO here) ends the run first.
        handle_run_end(&mut b, run.take());
        assert_eq!(b.effects, [Effect::Received(Received::CountDelivered(3))]);
        assert_eq!(
            (b.core.links[k].records, app_receives(&b, k)),
            (records + 3, 3)
        );
        assert_eq!(admitted(&mut b, "a", b"new", now), k);
        // The old connection's record: no run begins, nothing is delivered or counted.
        pack(&mut b, 101, &mut run, b"4");
        handle_run_end(&mut b, run.take());
        assert_eq!(b.effects, []);
        assert_eq!(b.core.links[k].records, records + 3);
        pack(&mut b, 102, &mut run, b"5");
        // Another connection's record ends the run first (and begins none, here).
        pack(&mut b, 101, &mut run, b"6");
        assert!(run.is_none());
        assert_eq!(
            b.effects,
            [
                Effect::Received(Received::DeliverNow(a, ch, b"5".to_vec())),
                Effect::Received(Received::CountDelivered(1)),
            ]
        );
        assert_eq!(
            (b.core.links[k].records, app_receives(&b, k)),
            (records + 4, 1)
        );
    }
}
