//! The runtime's view of the wire records: decode into what the I/O loop acts on, encode
//! from runtime values. All byte layout lives in [`crate::proto::wire`].

use std::num::NonZeroU64;

use bytes::Bytes;

use super::socket::Frame;
use crate::proto::handshake::{self, Expectation, Identity};
use crate::proto::wire::{self, FanoutMessage, Name, Record, WireError};

pub(crate) use crate::proto::wire::{CloseReason, Lane, RejectReason};

/// A decoded HELLO.
pub(crate) struct HelloRec {
    pub lane: Lane,
    pub identity: Identity,
    pub expect: Expectation,
}

/// A decoded WELCOME.
pub(crate) struct WelcomeRec {
    pub lane: Lane,
    pub identity: Identity,
}

/// What the I/O loop acts on.
pub(crate) enum Rec {
    Hello(HelloRec),
    Welcome(WelcomeRec),
    Reject {
        reason: RejectReason,
        detail: String,
    },
    Probe(u64),
    Ack(u64),
    Message {
        channel: String,
        payload: Bytes,
    },
    Close(CloseReason),
    Request(wire::Request),
    Accept {
        call_id: NonZeroU64,
    },
    Reply {
        call_id: NonZeroU64,
        code: wire::ReplyCode,
        payload: Bytes,
        /// The callee replayed it from its idempotency record (WIRE.md §4.17).
        replayed: bool,
    },
    Item {
        call_id: NonZeroU64,
        seq: u64,
        payload: Bytes,
    },
    /// The requests of a BATCH, in wire order (2 or more, MISSION K5).
    Batch(Vec<wire::Request>),
    /// A CANCEL: the caller no longer waits for this call (WIRE.md §4.13).
    Cancel(NonZeroU64),
    /// A CREDIT: the caller grants this stream call more items (WIRE.md §4.15).
    Credit {
        call_id: NonZeroU64,
        items: NonZeroU64,
    },
    /// The ACCEPTs and REPLYs an ANSWERS record stands for, in order (WIRE.md §4.16): each
    /// is an [`Rec::Accept`] or a [`Rec::Reply`].
    Answers(Vec<Rec>),
    /// The MESSAGEs a PACK stands for, in order (WIRE.md §4.18): one channel, each payload a
    /// slice of the one frame the pack's payloads arrived in.
    Pack {
        channel: Bytes,
        payloads: Vec<Bytes>,
    },
}

impl Rec {
    pub(crate) fn kind_name(&self) -> &'static str {
        self.kind().name()
    }

    /// The record's wire kind.
    pub(crate) fn kind(&self) -> wire::Kind {
        use wire::Kind;
        match self {
            Rec::Hello(_) => Kind::Hello,
            Rec::Welcome(_) => Kind::Welcome,
            Rec::Reject { .. } => Kind::Reject,
            Rec::Probe(_) => Kind::Probe,
            Rec::Ack(_) => Kind::Ack,
            Rec::Message { .. } => Kind::Message,
            Rec::Close(_) => Kind::Close,
            Rec::Request(_) => Kind::Request,
            Rec::Accept { .. } => Kind::Accept,
            Rec::Reply { .. } => Kind::Reply,
            Rec::Item { .. } => Kind::Item,
            Rec::Batch(_) => Kind::Batch,
            Rec::Cancel(_) => Kind::Cancel,
            Rec::Credit { .. } => Kind::Credit,
            Rec::Answers(_) => Kind::Answers,
            Rec::Pack { .. } => Kind::Pack,
        }
    }
}

/// Decodes one record (routing frames already removed) of a connection where `caps` are in
/// effect (before its handshake: none). A shared payload frame reaches the application
/// without a copy.
pub(crate) fn decode(frames: &[Frame], caps: wire::Capabilities) -> Result<Rec, WireError> {
    Ok(match Record::decode_in(frames, caps, Frame::to_bytes)? {
        Record::Hello(h) => {
            let (lane, identity, expect) = handshake::from_hello(h);
            Rec::Hello(HelloRec {
                lane,
                identity,
                expect,
            })
        }
        Record::Welcome(w) => {
            let (lane, identity) = handshake::from_welcome(w);
            Rec::Welcome(WelcomeRec { lane, identity })
        }
        Record::Reject(r) => Rec::Reject {
            reason: r.reason,
            detail: r.detail.into_string(),
        },
        Record::Probe { id } => Rec::Probe(id.get()),
        Record::Ack { id } => Rec::Ack(id.get()),
        Record::Message(m) => Rec::Message {
            channel: m.channel.into_string(),
            payload: m.payload,
        },
        Record::Close { reason } => Rec::Close(reason),
        Record::Request(r) => Rec::Request(r),
        Record::Accept(a) => Rec::Accept { call_id: a.call_id },
        Record::Reply(r) => Rec::Reply {
            call_id: r.call_id,
            code: r.code,
            payload: r.payload,
            replayed: r.replayed,
        },
        Record::Item(i) => Rec::Item {
            call_id: i.call_id,
            seq: i.seq,
            payload: i.payload,
        },
        Record::Batch(b) => Rec::Batch(b.into_requests()),
        Record::Cancel { call_id } => Rec::Cancel(call_id),
        // A CALLS record is handled as the BATCH of the same calls (WIRE.md §4.14).
        Record::Calls(c) => Rec::Batch(c.into_requests()),
        Record::Credit { call_id, items } => Rec::Credit { call_id, items },
        Record::Answers(a) => Rec::Answers(
            a.into_records()
                .filter_map(|r| match r {
                    Record::Accept(a) => Some(Rec::Accept { call_id: a.call_id }),
                    Record::Reply(r) => Some(Rec::Reply {
                        call_id: r.call_id,
                        code: r.code,
                        payload: r.payload,
                        replayed: r.replayed,
                    }),
                    _ => None,
                })
                .collect(),
        ),
        Record::Pack(p) => {
            let (channel, payloads) = p.into_parts();
            Rec::Pack {
                channel: Bytes::from(channel.into_string().into_bytes()),
                payloads,
            }
        }
    })
}

/// A decoded fanout message (the node core's type: it judges and delivers them).
pub(crate) use crate::proto::node::sub::Fanout;

/// Decodes one fanout message on a socket where the fanout capabilities `caps` are in effect.
/// A frame with the bytes of `last_topic` (the topic of this publisher's previous record, as
/// a rule the same) is taken as a clone of it rather than copied; the payload frame is
/// shared, not copied.
pub(crate) fn decode_fanout(
    frames: &[Frame],
    last_topic: &Bytes,
    caps: wire::Capabilities,
) -> Result<Fanout, WireError> {
    let take = |f: &Frame| {
        if f.as_ref() == last_topic.as_ref() {
            last_topic.clone()
        } else {
            f.to_bytes()
        }
    };
    Ok(match FanoutMessage::decode_in(frames, caps, take)? {
        FanoutMessage::Beacon => Fanout::Beacon,
        FanoutMessage::Publish { topic, payload, .. } => Fanout::Publish { topic, payload },
        FanoutMessage::PubPack(p) => {
            let (topic, payloads) = p.into_parts();
            Fanout::Pack { topic, payloads }
        }
    })
}

fn nz(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)
}

fn name(s: &str) -> Result<Name, WireError> {
    Name::new(s.to_owned())
}

/// PROBE.
pub(crate) fn probe(id: u64) -> Vec<Vec<u8>> {
    vec![wire::encode_probe(nz(id)).to_vec()]
}

/// CANCEL of call `call_id`.
pub(crate) fn cancel(call_id: NonZeroU64) -> Vec<Vec<u8>> {
    Record::Cancel { call_id }.encode()
}

/// CREDIT of `items` more items for stream call `call_id`.
pub(crate) fn credit(call_id: NonZeroU64, items: NonZeroU64) -> Vec<Vec<u8>> {
    Record::Credit { call_id, items }.encode()
}

/// ACK.
pub(crate) fn ack(id: u64) -> Vec<Vec<u8>> {
    vec![wire::encode_ack(nz(id)).to_vec()]
}

/// CLOSE.
pub(crate) fn close(reason: CloseReason) -> Vec<Vec<u8>> {
    Record::Close { reason }.encode()
}

/// The envelope of a MESSAGE on `channel` (frame 0; the payload is frame 1 as it is, so it
/// goes to the socket without a copy of ours, and a batch shares one envelope).
pub(crate) fn message_envelope(channel: &str) -> Result<Vec<u8>, WireError> {
    Ok(wire::Message::encode_envelope(&name(channel)?))
}

/// The envelope of a fanout application record (frame 1, between the topic and the
/// payload, which go to the socket as they are).
pub(crate) fn publish_envelope(generation: u64, seq: u64) -> [u8; wire::PUBLISH_ENVELOPE_LEN] {
    wire::encode_publish_envelope(nz(generation), seq)
}

/// Display name of a lane.
pub(crate) fn lane_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Application => "application",
        Lane::Completion => "completion",
        Lane::ClientServer => "client_server",
    }
}

/// Display name of a close reason.
pub(crate) fn close_name(r: CloseReason) -> &'static str {
    match r {
        CloseReason::Shutdown => "shutdown",
        CloseReason::Draining => "draining",
        CloseReason::Replaced => "replaced",
        CloseReason::DeadlineExceeded => "deadline_exceeded",
        CloseReason::ProtocolError => "protocol_error",
        CloseReason::NotRequired => "not_required",
    }
}
