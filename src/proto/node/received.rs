//! The receive path's decisions, for a shell that reads records off its sockets and delivers
//! them: where a record read from a bound or dialled socket goes (a link's record, a
//! connection notice of libzmq, admission), what a link's record is for in its connection's
//! state, how the records of a PACK or PUBPACK are charged to the receive scheduler's caps
//! (MISSION R2), and what a run of MESSAGEs counts ([`MessageRun`]). Nothing here allocates:
//! the hot path classifies every record with these, and each answer is a small value.

use std::time::Instant;

use crate::proto::liveness;
use crate::proto::node::keys::LinkKey;
use crate::proto::node::link::Conn;
use crate::proto::node::source::Source;
use crate::proto::wire::{self, Kind};
use crate::proto::ConnId;

/// Bytes a record of a PACK or a PUBPACK is charged toward the byte cap besides its payload:
/// its u16 length (WIRE.md §4.18, §7.5). The first record also carries the envelope's other
/// bytes, so the records of one message are charged exactly the bytes read.
pub(crate) const PACKED_RECORD_OVERHEAD: usize = 2;

/// Whether `frames` (after the routing id) is libzmq's notice that a connection of a ROUTER
/// with `ROUTER_NOTIFY` attached or is gone: one empty frame, never one of a peer's records
/// (each has an envelope).
pub(crate) fn is_notice<F: AsRef<[u8]>>(frames: &[F]) -> bool {
    matches!(frames, [only] if only.as_ref().is_empty())
}

/// The kind byte of a record's envelope in `frame` (its 4th byte), if the frame has one: a
/// look before decoding, so only the kinds a caller acts on are decoded.
pub(crate) fn peek_kind(frame: &[u8]) -> Option<u8> {
    frame.get(3).copied()
}

/// Whether `frame` is the envelope of a record of `kind` ([`peek_kind`]).
pub(crate) fn is_kind(frame: &[u8], kind: Kind) -> bool {
    peek_kind(frame) == Some(u8::from(kind))
}

/// What a record read from a bound socket is, by the link its routing id was admitted as
/// (`known`) and whether it is a connection notice ([`is_notice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoundRecord {
    /// The notice of an admitted connection: its attach came before its HELLO, so the
    /// connection is gone (MISSION L6).
    Gone(LinkKey),
    /// A record of an admitted link.
    Link(LinkKey),
    /// The notice of a connection that was never admitted: a refused one leaving, or an
    /// attach (which comes before the HELLO and is no first record to refuse).
    UnadmittedNotice,
    /// A record of a connection that was not admitted: admission's.
    Unadmitted,
}

/// Classifies a record read from a bound socket (see [`BoundRecord`]).
pub(crate) fn classify_bound<F: AsRef<[u8]>>(known: Option<LinkKey>, frames: &[F]) -> BoundRecord {
    match (known, is_notice(frames)) {
        (Some(k), true) => BoundRecord::Gone(k),
        (Some(k), false) => BoundRecord::Link(k),
        (None, true) => BoundRecord::UnadmittedNotice,
        (None, false) => BoundRecord::Unadmitted,
    }
}

/// What a record read from a dialled socket is. A dialled ROUTER (`routed`) reads the bound
/// peer's routing id first, and libzmq's connection notices in band; a DEALER reads neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DialledRecord {
    /// The link's record, in the frames after the first `skip`.
    Record {
        /// Frames before the record (the routing id of a dialled ROUTER).
        skip: usize,
    },
    /// A connection notice ([`Conn::handle_router_notice`]).
    Notice,
    /// Nothing (a ROUTER's read without even a routing id).
    Nothing,
}

/// Classifies a record read from a dialled socket (see [`DialledRecord`]).
pub(crate) fn classify_dialled<F: AsRef<[u8]>>(routed: bool, frames: &[F]) -> DialledRecord {
    if !routed {
        return DialledRecord::Record { skip: 0 };
    }
    match frames.get(1..) {
        None => DialledRecord::Nothing,
        Some(rest) if is_notice(rest) => DialledRecord::Notice,
        Some(_) => DialledRecord::Record { skip: 1 },
    }
}

/// What a decoded record of a link's connection is for, in that connection's state: a
/// record that is not for this state changes nothing but the link's activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordUse {
    /// A PROBE: echoed with an ACK; no evidence for this node's own deadline (L2).
    Probe,
    /// An ACK: evidence for this connection's own probe tracker only (L2).
    Ack,
    /// The WELCOME that answers this node's HELLO on a lane it dialled.
    Welcome,
    /// A call to serve (REQUEST, CALLS, CANCEL, CREDIT): the callee's.
    Call,
    /// An answer to one of this node's calls (ACCEPT, REPLY, ITEM, ANSWERS): the caller's.
    Answer,
    /// The peer ends the connection (REJECT, CLOSE), in any state.
    PeerEnded,
    /// Application records (MESSAGE, PACK).
    Message,
    /// Not handled in this state.
    Ignored,
}

/// What a record of `kind` is for on a connection that is `ready` or not, accepted on a
/// bound socket (`inbound`) or dialled: only a dialled connection that is not ready yet
/// takes a WELCOME, and only a ready one takes calls, answers and messages.
pub(crate) fn record_use(kind: Kind, ready: bool, inbound: bool) -> RecordUse {
    match kind {
        Kind::Probe => RecordUse::Probe,
        Kind::Ack => RecordUse::Ack,
        Kind::Welcome if !ready && !inbound => RecordUse::Welcome,
        Kind::Request | Kind::Batch | Kind::Calls | Kind::Calls16 | Kind::Cancel | Kind::Credit
            if ready =>
        {
            RecordUse::Call
        }
        Kind::Accept | Kind::Reply | Kind::Item | Kind::Answers | Kind::Answers16 if ready => {
            RecordUse::Answer
        }
        Kind::Reject | Kind::Close => RecordUse::PeerEnded,
        Kind::Message | Kind::Pack if ready => RecordUse::Message,
        _ => RecordUse::Ignored,
    }
}

/// Whether a PACK that arrived on connection `conn` is staged as its records: only while
/// `current` (the link's current connection) is that connection, ready, and negotiated PACK
/// (`caps`). Anything else is staged whole, and judged in its turn.
pub(crate) fn unpacks(current: Option<&Conn>, conn: ConnId, caps: wire::Capabilities) -> bool {
    current.is_some_and(|c| c.id == conn && c.ready) && caps.contains(wire::Capabilities::PACK)
}

/// The bytes each record of a PACK or PUBPACK of `len` bytes read is charged toward the
/// byte cap: its payload and [`PACKED_RECORD_OVERHEAD`], and on the first also the rest of
/// the message (envelope, channel or topic), so the records add up to `len` exactly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Charges {
    rest: usize,
}

impl Charges {
    /// The charges of a message of `len` bytes whose records carry `payloads` bytes each.
    pub(crate) fn new(len: usize, payloads: impl IntoIterator<Item = usize>) -> Charges {
        let charged: usize = payloads
            .into_iter()
            .map(|p| p + PACKED_RECORD_OVERHEAD)
            .sum();
        Charges {
            rest: len.saturating_sub(charged),
        }
    }

    /// The charge of the next record, of `payload` bytes.
    pub(crate) fn next(&mut self, payload: usize) -> usize {
        payload + PACKED_RECORD_OVERHEAD + std::mem::take(&mut self.rest)
    }
}

/// How the shell hands a run's record to the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// The application queue has room for it: straight in.
    Now,
    /// Through the link's backlog, which holds it if the queue is full; the shell then tells
    /// the run the room left ([`MessageRun::set_room`]).
    Queue,
}

/// A run of MESSAGEs of one connection (the records of its PACKs) handed out one after the
/// other in a unit's turn. Each record is delivered as it comes; what each also counts (the
/// link's activity, the connection's application traffic for its liveness statistics, the
/// received-records metric) is counted once for the run when it ends ([`RunEnd`]), with the
/// instant of its last record, before any other record is processed: the same counts and
/// instants as counting each record as it comes, since nothing reads them in between.
#[derive(Debug)]
pub(crate) struct MessageRun {
    link: LinkKey,
    conn: ConnId,
    /// Records of the run: each is activity of the link.
    records: u64,
    /// The instant the run's last record was processed at.
    last: Instant,
    /// The connection was ready when the run began (a run's records change nothing that
    /// could make it otherwise): its records are application traffic of its probe tracker
    /// `live`, and deliveries from `source`.
    ready: bool,
    live: Option<liveness::LinkKey>,
    source: Option<Source>,
    /// Records delivered.
    delivered: u64,
    /// Deliveries the application queue takes before it may have to hold one back.
    room: usize,
}

/// What a run counts when it ends (see [`MessageRun`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunEnd {
    /// The link whose activity the run's records are.
    pub(crate) link: LinkKey,
    /// The run's records, and the instant of its last.
    pub(crate) records: u64,
    pub(crate) last: Instant,
    /// The probe tracker the records are application traffic of (a ready connection's).
    pub(crate) traffic_of: Option<liveness::LinkKey>,
    /// Records delivered to the application.
    pub(crate) delivered: u64,
}

impl MessageRun {
    /// A run of connection `conn` of link `link`, if `current` (the link's current
    /// connection) is that connection; `room`: what the application queue takes now (asked
    /// only for a run that begins).
    pub(crate) fn begin(
        link: LinkKey,
        conn: ConnId,
        current: Option<&Conn>,
        room: impl FnOnce() -> usize,
        now: Instant,
    ) -> Option<MessageRun> {
        let c = current.filter(|c| c.id == conn)?;
        Some(MessageRun {
            link,
            conn,
            records: 0,
            last: now,
            ready: c.ready,
            live: c.live,
            source: c.ready.then(|| c.source.clone()).flatten(),
            delivered: 0,
            room: room(),
        })
    }

    /// Whether a record of connection `conn` of link `link` continues this run.
    pub(crate) fn continues(&self, link: LinkKey, conn: ConnId) -> bool {
        self.link == link && self.conn == conn
    }

    /// One record of the run, at `now`: counted, and delivered from the returned source
    /// the way [`Placement`] says, if the connection was ready.
    pub(crate) fn handle_record(&mut self, now: Instant) -> Option<(&Source, Placement)> {
        self.records += 1;
        self.last = now;
        let source = self.source.as_ref()?;
        self.delivered += 1;
        let placement = if self.room > 0 {
            self.room -= 1;
            Placement::Now
        } else {
            Placement::Queue
        };
        Some((source, placement))
    }

    /// The room the application queue has after a [`Placement::Queue`] delivery.
    pub(crate) fn set_room(&mut self, room: usize) {
        self.room = room;
    }

    /// Ends the run: what it counts.
    pub(crate) fn end(self) -> RunEnd {
        RunEnd {
            link: self.link,
            records: self.records,
            last: self.last,
            traffic_of: self.live.filter(|_| self.ready),
            delivered: self.delivered,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::proto::node::keys::Key;

    fn k(i: usize) -> LinkKey {
        LinkKey::from_index(i)
    }

    /// Where a bound or dialled socket's record goes (L6): an admitted connection's empty
    /// record is its loss, an unadmitted one's is no record, and a dialled ROUTER's record
    /// starts after the routing id while a DEALER's is whole.
    #[test]
    fn l6_records_and_notices_go_to_their_link_or_admission() {
        let notice: [&[u8]; 1] = [b""];
        let record: [&[u8]; 2] = [b"ZM\x01\x06", b"x"];
        assert_eq!(classify_bound(Some(k(1)), &notice), BoundRecord::Gone(k(1)));
        assert_eq!(classify_bound(Some(k(1)), &record), BoundRecord::Link(k(1)));
        assert_eq!(classify_bound(None, &notice), BoundRecord::UnadmittedNotice);
        assert_eq!(classify_bound(None, &record), BoundRecord::Unadmitted);
        // Two frames, one of them empty, is no notice.
        let two: [&[u8]; 2] = [b"", b""];
        assert_eq!(classify_bound(None, &two), BoundRecord::Unadmitted);

        let routed_notice: [&[u8]; 2] = [b"peer", b""];
        let routed_record: [&[u8]; 3] = [b"peer", b"ZM\x01\x06", b"x"];
        let none: [&[u8]; 0] = [];
        assert_eq!(
            classify_dialled(true, &routed_notice),
            DialledRecord::Notice
        );
        assert_eq!(
            classify_dialled(true, &routed_record),
            DialledRecord::Record { skip: 1 }
        );
        assert_eq!(classify_dialled(true, &none), DialledRecord::Nothing);
        // A DEALER has no routing id and no notices: an empty record is a record (malformed).
        assert_eq!(
            classify_dialled(false, &notice),
            DialledRecord::Record { skip: 0 }
        );
    }

    /// What a link's record is for: PROBE, ACK, REJECT and CLOSE in any state, WELCOME only
    /// on a dialled connection not ready yet, calls, answers and messages only once ready.
    #[test]
    fn l2_t1_a_links_record_is_taken_only_in_the_state_it_belongs_to() {
        for (ready, inbound) in [(false, false), (false, true), (true, false), (true, true)] {
            let r#use = |kind| record_use(kind, ready, inbound);
            assert_eq!(r#use(Kind::Probe), RecordUse::Probe);
            assert_eq!(r#use(Kind::Ack), RecordUse::Ack);
            assert_eq!(r#use(Kind::Reject), RecordUse::PeerEnded);
            assert_eq!(r#use(Kind::Close), RecordUse::PeerEnded);
            assert_eq!(r#use(Kind::Hello), RecordUse::Ignored);
            assert_eq!(r#use(Kind::Publish), RecordUse::Ignored);
            assert_eq!(r#use(Kind::PubPack), RecordUse::Ignored);
            let welcome = if !ready && !inbound {
                RecordUse::Welcome
            } else {
                RecordUse::Ignored
            };
            assert_eq!(r#use(Kind::Welcome), welcome, "{ready} {inbound}");
            let when_ready = |u| if ready { u } else { RecordUse::Ignored };
            for kind in [
                Kind::Request,
                Kind::Batch,
                Kind::Calls,
                Kind::Calls16,
                Kind::Cancel,
                Kind::Credit,
            ] {
                assert_eq!(r#use(kind), when_ready(RecordUse::Call), "{kind:?}");
            }
            for kind in [
                Kind::Accept,
                Kind::Reply,
                Kind::Item,
                Kind::Answers,
                Kind::Answers16,
            ] {
                assert_eq!(r#use(kind), when_ready(RecordUse::Answer), "{kind:?}");
            }
            for kind in [Kind::Message, Kind::Pack] {
                assert_eq!(r#use(kind), when_ready(RecordUse::Message), "{kind:?}");
            }
        }
    }

    /// A PACK is staged as its records only on the link's current connection, ready, with
    /// PACK negotiated; the records are charged exactly the bytes read, the envelope on the
    /// first (R2).
    #[test]
    fn r2_a_packs_records_are_charged_the_bytes_read() {
        let ready = Conn::for_test(7, true, None);
        let pack = wire::Capabilities::PACK;
        assert!(unpacks(Some(&ready), ConnId(7), pack));
        assert!(
            !unpacks(Some(&ready), ConnId(6), pack),
            "another connection"
        );
        assert!(!unpacks(Some(&ready), ConnId(7), wire::Capabilities::NONE));
        assert!(!unpacks(None, ConnId(7), pack));
        let handshaking = Conn::for_test(7, false, None);
        assert!(!unpacks(Some(&handshaking), ConnId(7), pack));

        let payloads = [10, 0, 5];
        let len = 40;
        let mut charges = Charges::new(len, payloads);
        let each: Vec<usize> = payloads.iter().map(|p| charges.next(*p)).collect();
        assert_eq!(each, vec![12 + 40 - 21, 2, 7]);
        assert_eq!(each.iter().sum::<usize>(), len);
        // A read shorter than its records (cannot be) charges no envelope.
        let mut short = Charges::new(3, payloads);
        assert_eq!(short.next(10), 12);

        assert!(is_kind(b"ZM\x01\x12rest", Kind::Pack));
        assert!(!is_kind(b"ZM\x01\x06", Kind::Pack));
        assert!(!is_kind(b"ZM\x01", Kind::Pack));
        assert_eq!(peek_kind(b"ZM\x01\x15"), Some(0x15));
    }

    /// A run of a ready connection's MESSAGEs delivers each straight into the queue while it
    /// has room and through the backlog after, and counts its records once at its end with
    /// the instant of the last; a run of a connection not ready counts activity only; a run
    /// of a connection that is no longer current does not begin.
    #[test]
    fn r5_a_message_run_delivers_with_room_and_counts_once() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut c = Conn::for_test(3, true, None);
        let source = Source::Peer { rid: "b".into() };
        c.source = Some(source.clone());
        let live = liveness::Liveness::new(1).insert_connection(ConnId(3), t0);
        c.live = Some(live);

        assert!(MessageRun::begin(k(0), ConnId(2), Some(&c), || unreachable!(), t0).is_none());
        assert!(MessageRun::begin(k(0), ConnId(3), None, || 5, t0).is_none());

        let mut run = MessageRun::begin(k(0), ConnId(3), Some(&c), || 1, t0).unwrap();
        assert!(run.continues(k(0), ConnId(3)));
        assert!(!run.continues(k(0), ConnId(4)));
        assert!(!run.continues(k(1), ConnId(3)));
        let first = run.handle_record(t0).map(|(s, p)| (s.clone(), p));
        assert_eq!(first, Some((source.clone(), Placement::Now)));
        let second = run.handle_record(t0 + ms).map(|(_, p)| p);
        assert_eq!(second, Some(Placement::Queue), "the queue is full now");
        run.set_room(0);
        assert_eq!(
            run.handle_record(t0 + ms).map(|(_, p)| p),
            Some(Placement::Queue)
        );
        run.set_room(2);
        assert_eq!(
            run.handle_record(t0 + 2 * ms).map(|(_, p)| p),
            Some(Placement::Now)
        );
        let end = run.end();
        assert_eq!(
            (
                end.link,
                end.records,
                end.last,
                end.delivered,
                end.traffic_of
            ),
            (k(0), 4, t0 + 2 * ms, 4, Some(live))
        );

        let mut not_ready = Conn::for_test(3, false, None);
        not_ready.live = Some(live);
        let mut run = MessageRun::begin(k(0), ConnId(3), Some(&not_ready), || 9, t0).unwrap();
        assert!(run.handle_record(t0 + ms).is_none());
        let end = run.end();
        assert_eq!(
            (end.records, end.delivered, end.last, end.traffic_of),
            (1, 0, t0 + ms, None),
            "a connection not ready has no application traffic"
        );
    }
}
