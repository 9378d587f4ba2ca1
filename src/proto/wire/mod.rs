//! The byte-exact codec of zmesh wire format v1 (WIRE.md at the repository root).
//!
//! A zmesh record is one ZeroMQ multipart message. Routing-id frames that a ROUTER socket
//! adds or strips are not part of it: the runtime removes them before calling a decoder and
//! adds them after calling an encoder.
//!
//! ```text
//!   RouteMesh / ClientServer          Classic fanout (PUB/SUB)
//!   frame 0  envelope                 frame 0  topic
//!            5A 4D 01 kind  body      frame 1  envelope 5A 4D 01 0D  generation  seq
//!   frame 1  payload (some kinds)     frame 2  payload
//!   ...      (BATCH: inner REQUESTs)
//!                                     beacon:  01 5A 4C 46 31 | 5A 46 01 01
//! ```
//!
//! * [`Record`] is every non-fanout record, [`FanoutMessage`] every PUB/SUB message.
//! * A decoded value is valid by construction: its field types ([`Name`], [`Memberships`],
//!   [`Batch`], `NonZeroU64`, the one-byte enums) admit only what WIRE.md allows, so
//!   encoding is infallible and `decode(encode(r)) == r`. There is exactly one byte form per
//!   record, so also `encode(decode(b)) == b` for every accepted `b`.
//! * Decoders check in the order of WIRE.md §6, never panic, allocate only in proportion to
//!   the bytes actually received (never from a length or count field alone), and tell "a
//!   frame ends too early" (`truncated`) from "a value is malformed" (every other
//!   [`WireError`] class).
//! * The hot records have allocation-free helpers: [`peek_kind`], [`encode_probe`],
//!   [`encode_ack`], [`encode_beacon`].
//!
//! Everything here is a pure function of its input (no clock, no socket), like the rest of
//! [`crate::proto`].
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::arithmetic_side_effects
)]

mod answers;
mod calls;
mod caps;
mod codec;
mod error;
mod fanout;
mod offsets;
mod pack;
mod pubpack;
mod types;

use std::fmt;
use std::num::NonZeroU64;

use bytes::Bytes;

pub use self::answers::{
    pack_front, Answer, Answers, Pending, ANSWERS_MAX_ENTRIES, ANSWERS_MAX_PAYLOAD,
};
pub use self::calls::Calls;
pub use self::caps::{is_extension_entry, Capabilities, EXTENSION_PREFIX, EXTENSION_ROOM};
use self::codec::{put_count, put_str, put_u64, Reader};
pub use self::error::WireError;
pub use self::fanout::{
    encode_beacon, encode_publish_envelope, AppliedSubscriptions, FanoutMessage,
    PUBLISH_ENVELOPE_LEN, PUBPACK_MARKER,
};
pub use self::offsets::IdForm;
pub use self::pack::Pack;
pub use self::pubpack::PubPack;
pub use self::types::{
    BoundedStr, CloseReason, Detail, Label, Lane, Membership, Memberships, Name, RejectReason,
    ReplyCode, Role, Semantics,
};

/// The first two bytes of every envelope: "ZM".
pub const MAGIC: [u8; 2] = [0x5A, 0x4D];
/// The wire format version this codec speaks.
pub const VERSION: u8 = 1;
/// The length of the envelope header: magic, version, kind.
pub const HEADER_LEN: usize = 4;
/// The exact length of a PROBE or ACK frame.
pub const PROBE_LEN: usize = 12;
/// The reserved fanout topic of the liveness beacon (MISSION L4).
pub const BEACON_TOPIC: [u8; 5] = [0x01, 0x5A, 0x4C, 0x46, 0x31];
/// The exact payload of the liveness beacon (MISSION L4).
pub const BEACON_PAYLOAD: [u8; 4] = [0x5A, 0x46, 0x01, 0x01];
/// The longest fanout topic, in bytes (the shortest is 1).
pub const MAX_TOPIC_LEN: usize = 255;

/// The record kind: byte 3 of an envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// 0x01: the dialer's handshake.
    Hello = 0x01,
    /// 0x02: the acceptor's handshake answer.
    Welcome = 0x02,
    /// 0x03: handshake refusal; the sender closes.
    Reject = 0x03,
    /// 0x04: liveness probe.
    Probe = 0x04,
    /// 0x05: liveness acknowledgement.
    Ack = 0x05,
    /// 0x06: one-way application message.
    Message = 0x06,
    /// 0x07: call request.
    Request = 0x07,
    /// 0x08: the callee took a request.
    Accept = 0x08,
    /// 0x09: the one terminal answer of a call.
    Reply = 0x09,
    /// 0x0A: a non-terminal stream item.
    Item = 0x0A,
    /// 0x0B: orderly close.
    Close = 0x0B,
    /// 0x0C: several requests in one message.
    Batch = 0x0C,
    /// 0x0D: fanout application record (frame 1 of a fanout message only).
    Publish = 0x0D,
    /// 0x0E: the caller no longer waits for a call. An extension kind: known only on a
    /// connection that negotiated [`Capabilities::CANCEL`] (WIRE.md §4.13, §8.1).
    Cancel = 0x0E,
    /// 0x0F: several calls of one method, their shared fields said once. An extension kind:
    /// known only on a connection that negotiated [`Capabilities::CALLS`] (WIRE.md §4.14).
    Calls = 0x0F,
    /// 0x10: the caller grants a stream more items. An extension kind: known only on a
    /// connection that negotiated [`Capabilities::CREDIT`] (WIRE.md §4.15).
    Credit = 0x10,
    /// 0x11: the ACCEPTs and REPLYs of several calls of one connection. An extension kind:
    /// known only on a connection that negotiated [`Capabilities::ANSWERS`] (WIRE.md §4.16).
    Answers = 0x11,
    /// 0x12: several MESSAGEs of one channel in one message, the payloads back to back in
    /// one frame. An extension kind: known only on a connection that negotiated
    /// [`Capabilities::PACK`] (WIRE.md §4.18).
    Pack = 0x12,
    /// 0x13: CALLS with the call ids as u16 offsets from the smallest. An extension kind:
    /// known only on a connection that negotiated [`Capabilities::IDS16`] (WIRE.md §4.19).
    Calls16 = 0x13,
    /// 0x14: ANSWERS with the call ids as u16 offsets from the smallest. An extension kind:
    /// known only on a connection that negotiated [`Capabilities::IDS16`] (WIRE.md §4.19).
    Answers16 = 0x14,
    /// 0x15: several PUBLISH records of one topic, frame 1 of a fanout message only. An
    /// extension kind: known only on a publisher's socket where [`Capabilities::PUBPACK`] is
    /// in effect (WIRE.md §7.5).
    PubPack = 0x15,
}

impl Kind {
    /// Every v1 kind, in byte order.
    pub const ALL: [Kind; 13] = [
        Kind::Hello,
        Kind::Welcome,
        Kind::Reject,
        Kind::Probe,
        Kind::Ack,
        Kind::Message,
        Kind::Request,
        Kind::Accept,
        Kind::Reply,
        Kind::Item,
        Kind::Close,
        Kind::Batch,
        Kind::Publish,
    ];

    /// Every extension kind, in byte order: each is known only where its capability is in
    /// effect ([`Kind::capability`]).
    pub const EXTENSIONS: [Kind; 8] = [
        Kind::Cancel,
        Kind::Calls,
        Kind::Credit,
        Kind::Answers,
        Kind::Pack,
        Kind::Calls16,
        Kind::Answers16,
        Kind::PubPack,
    ];

    /// The capability a connection must have negotiated for this kind to be known on it
    /// ([`Capabilities::NONE`] for every version-1 kind).
    pub fn capability(self) -> Capabilities {
        match self {
            Kind::Cancel => Capabilities::CANCEL,
            Kind::Calls => Capabilities::CALLS,
            Kind::Credit => Capabilities::CREDIT,
            Kind::Answers => Capabilities::ANSWERS,
            Kind::Pack => Capabilities::PACK,
            Kind::Calls16 | Kind::Answers16 => Capabilities::IDS16,
            Kind::PubPack => Capabilities::PUBPACK,
            _ => Capabilities::NONE,
        }
    }

    /// The kind of byte 3 of an envelope on a connection where `caps` are in effect: a
    /// version-1 kind, or an extension kind whose capability is in `caps`. Fails with class
    /// `unknown_kind` otherwise, as version 1 does.
    pub fn from_byte_in(byte: u8, caps: Capabilities) -> Result<Kind, WireError> {
        if let Ok(kind) = Kind::try_from(byte) {
            return Ok(kind);
        }
        Kind::EXTENSIONS
            .into_iter()
            .find(|k| u8::from(*k) == byte && caps.contains(k.capability()))
            .ok_or(WireError::UnknownKind { kind: byte })
    }

    /// The lower-case name used in logs and errors (`hello`, `probe`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Welcome => "welcome",
            Kind::Reject => "reject",
            Kind::Probe => "probe",
            Kind::Ack => "ack",
            Kind::Message => "message",
            Kind::Request => "request",
            Kind::Accept => "accept",
            Kind::Reply => "reply",
            Kind::Item => "item",
            Kind::Close => "close",
            Kind::Batch => "batch",
            Kind::Publish => "publish",
            Kind::Cancel => "cancel",
            Kind::Calls => "calls",
            Kind::Credit => "credit",
            Kind::Answers => "answers",
            Kind::Pack => "pack",
            Kind::Calls16 => "calls16",
            Kind::Answers16 => "answers16",
            Kind::PubPack => "pubpack",
        }
    }
}

impl TryFrom<u8> for Kind {
    type Error = WireError;

    /// A version-1 kind; fails with class `unknown_kind` for any other byte (an extension
    /// kind included: see [`Kind::from_byte_in`]).
    fn try_from(byte: u8) -> Result<Self, WireError> {
        Ok(match byte {
            0x01 => Kind::Hello,
            0x02 => Kind::Welcome,
            0x03 => Kind::Reject,
            0x04 => Kind::Probe,
            0x05 => Kind::Ack,
            0x06 => Kind::Message,
            0x07 => Kind::Request,
            0x08 => Kind::Accept,
            0x09 => Kind::Reply,
            0x0A => Kind::Item,
            0x0B => Kind::Close,
            0x0C => Kind::Batch,
            0x0D => Kind::Publish,
            _ => return Err(WireError::UnknownKind { kind: byte }),
        })
    }
}

impl From<Kind> for u8 {
    fn from(kind: Kind) -> u8 {
        kind as u8
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// HELLO: the first record of the dialer on every RouteMesh/ClientServer connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The lane this connection is for.
    pub lane: Lane,
    /// The dialer's RID.
    pub rid: Name,
    /// The dialer's lifecycle generation.
    pub generation: NonZeroU64,
    /// The dialer's security identity (may be empty).
    pub security_identity: Label,
    /// The RID the dialer expects the acceptor to have (wire: empty string = none).
    pub expect_rid: Option<Name>,
    /// The generation the dialer expects the acceptor to have (wire: 0 = none).
    pub expect_generation: Option<NonZeroU64>,
    /// The dialer's configuration generation (for NotRequired bookkeeping, T4).
    pub config_generation: u64,
    /// The dialer's channel memberships.
    pub memberships: Memberships,
}

/// WELCOME: the acceptor admits the dialer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The lane, echoed from the HELLO.
    pub lane: Lane,
    /// The acceptor's RID.
    pub rid: Name,
    /// The acceptor's lifecycle generation.
    pub generation: NonZeroU64,
    /// The acceptor's security identity (may be empty).
    pub security_identity: Label,
    /// The acceptor's channel memberships.
    pub memberships: Memberships,
}

/// REJECT: the sender refuses the connection and closes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// Why.
    pub reason: RejectReason,
    /// Human-readable detail (may be empty).
    pub detail: Detail,
}

/// MESSAGE: a one-way application record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The channel it is for.
    pub channel: Name,
    /// Opaque application bytes (frame 1; may be empty).
    pub payload: Bytes,
}

impl Message {
    /// Encodes frame 0 of a MESSAGE on `channel`, the envelope; frame 1 is the payload byte
    /// for byte. A sender that hands the payload to its socket as it is skips copying it into
    /// a frame, and one envelope serves every record of a batch on that channel. The same
    /// bytes as frame 0 of [`Record::encode`].
    pub fn encode_envelope(channel: &Name) -> Vec<u8> {
        let mut env = envelope(Kind::Message);
        put_str(&mut env, channel);
        env
    }
}

/// REQUEST: a call (alone, or inside a [`Batch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The caller's call id, unique among its pending calls on the connection.
    pub call_id: NonZeroU64,
    /// How long the caller will still wait, in milliseconds (wire: 0 = no deadline).
    /// Always a duration, never a timestamp (MISSION C6).
    pub ttl_ms: Option<NonZeroU64>,
    /// The method's declared semantics (MISSION K1).
    pub semantics: Semantics,
    /// The channel called.
    pub channel: Name,
    /// The method called.
    pub method: Name,
    /// The caller's idempotency key (wire: empty string = none).
    pub idempotency_key: Option<Name>,
    /// The encoded arguments (frame 1; opaque to the codec).
    pub payload: Bytes,
}

/// ACCEPT: the callee took a request, before dispatching it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accept {
    /// The call accepted.
    pub call_id: NonZeroU64,
    /// The acceptor's lifecycle generation.
    pub generation: NonZeroU64,
    /// The acceptor's id of the physical connection that took it (diagnostic only, F3).
    pub connection_id: u64,
}

/// REPLY: the one terminal answer of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The call answered.
    pub call_id: NonZeroU64,
    /// The outcome.
    pub code: ReplyCode,
    /// The result bytes when `code` is `Ok`, a UTF-8 error message otherwise (not checked by
    /// the codec).
    pub payload: Bytes,
    /// The answer is the recorded outcome of an earlier call with the same idempotency key
    /// (the handler did not run for this call): bit 7 of the code byte, [`REPLAYED_MARK`]
    /// (WIRE.md §4.17). Only where [`Capabilities::REPLAYED`] is in effect; a sender clears
    /// it on any other connection, and a decoder without the capability reads the byte as a
    /// version-1 code (so a marked byte there is `invalid_field`).
    pub replayed: bool,
}

/// Bit 7 of a REPLY's code byte, in a REPLY record and in an ANSWERS entry, where capability
/// `replayed` is in effect: the answer was replayed from the idempotency record (WIRE.md
/// §4.17). Every code of version 1 is below it.
pub const REPLAYED_MARK: u8 = 0x80;

/// The code byte of a REPLY: the code, with [`REPLAYED_MARK`] when `replayed`.
fn code_byte(code: ReplyCode, replayed: bool) -> u8 {
    let byte = u8::from(code);
    if replayed {
        byte | REPLAYED_MARK
    } else {
        byte
    }
}

/// Reads a REPLY's code byte on a connection where `caps` are in effect: the code, and
/// whether the replayed mark is set (only where [`Capabilities::REPLAYED`] is in effect;
/// elsewhere a marked byte is an unknown code, `invalid_field`, as in version 1).
fn read_code(byte: u8, caps: Capabilities) -> Result<(ReplyCode, bool), WireError> {
    if caps.contains(Capabilities::REPLAYED) && byte & REPLAYED_MARK != 0 {
        Ok((ReplyCode::try_from(byte & !REPLAYED_MARK)?, true))
    } else {
        Ok((ReplyCode::try_from(byte)?, false))
    }
}

/// ITEM: one non-terminal item of a streaming call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The call the item belongs to.
    pub call_id: NonZeroU64,
    /// 0-based item number, one more per item (checked by the call layer, not the codec).
    pub seq: u64,
    /// The item bytes.
    pub payload: Bytes,
}

/// BATCH: 2..=65535 requests in one message (MISSION K5).
///
/// The 64-call sender split and the 256-call receiver limit are call-layer policy; the codec
/// accepts any count in range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch(Vec<Request>);

impl Batch {
    /// The smallest count: a lone call is never wrapped.
    pub const MIN: usize = 2;
    /// The largest count (u16).
    pub const MAX: usize = 65535;

    /// Checks the count. Fails with class `invalid_field`.
    pub fn new(requests: Vec<Request>) -> Result<Self, WireError> {
        if (Self::MIN..=Self::MAX).contains(&requests.len()) {
            Ok(Self(requests))
        } else {
            Err(WireError::invalid(
                Some(Kind::Batch),
                "count",
                "a batch holds 2..=65535 requests",
            ))
        }
    }

    /// The requests, in wire order.
    pub fn requests(&self) -> &[Request] {
        &self.0
    }

    /// The owned requests.
    pub fn into_requests(self) -> Vec<Request> {
        self.0
    }
}

/// One non-fanout zmesh v1 record (one ZeroMQ multipart message, routing frames excluded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// 0x01, 1 frame.
    Hello(Hello),
    /// 0x02, 1 frame.
    Welcome(Welcome),
    /// 0x03, 1 frame.
    Reject(Reject),
    /// 0x04, 1 frame of exactly 12 bytes; carries no business payload (L3).
    Probe {
        /// The probe id.
        id: NonZeroU64,
    },
    /// 0x05, 1 frame of exactly 12 bytes.
    Ack {
        /// The id of the probe acknowledged.
        id: NonZeroU64,
    },
    /// 0x06, 2 frames.
    Message(Message),
    /// 0x07, 2 frames.
    Request(Request),
    /// 0x08, 1 frame.
    Accept(Accept),
    /// 0x09, 2 frames.
    Reply(Reply),
    /// 0x0A, 2 frames.
    Item(Item),
    /// 0x0B, 1 frame.
    Close {
        /// Why the connection closes.
        reason: CloseReason,
    },
    /// 0x0C, 1 + 2 × count frames.
    Batch(Batch),
    /// 0x0E, 1 frame of exactly 12 bytes; only where [`Capabilities::CANCEL`] is in effect.
    Cancel {
        /// The id of the call the caller no longer waits for.
        call_id: NonZeroU64,
    },
    /// 0x0F, 1 + count frames; only where [`Capabilities::CALLS`] is in effect. In the
    /// offset form ([`Calls::with_offsets`]) 0x13, only where [`Capabilities::IDS16`] is in
    /// effect.
    Calls(Calls),
    /// 0x10, 1 frame of exactly 20 bytes; only where [`Capabilities::CREDIT`] is in effect.
    Credit {
        /// The stream call granted more items.
        call_id: NonZeroU64,
        /// How many more items the callee may send.
        items: NonZeroU64,
    },
    /// 0x11, 1 + one frame per REPLY; only where [`Capabilities::ANSWERS`] is in effect.
    /// In the offset form ([`Answers::with_offsets`]) 0x14, only where
    /// [`Capabilities::IDS16`] is in effect.
    Answers(Answers),
    /// 0x12, 2 frames; only where [`Capabilities::PACK`] is in effect.
    Pack(Pack),
}

impl Record {
    /// The record's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Record::Hello(_) => Kind::Hello,
            Record::Welcome(_) => Kind::Welcome,
            Record::Reject(_) => Kind::Reject,
            Record::Probe { .. } => Kind::Probe,
            Record::Ack { .. } => Kind::Ack,
            Record::Message(_) => Kind::Message,
            Record::Request(_) => Kind::Request,
            Record::Accept(_) => Kind::Accept,
            Record::Reply(_) => Kind::Reply,
            Record::Item(_) => Kind::Item,
            Record::Close { .. } => Kind::Close,
            Record::Batch(_) => Kind::Batch,
            Record::Cancel { .. } => Kind::Cancel,
            Record::Calls(c) => c.kind(),
            Record::Credit { .. } => Kind::Credit,
            Record::Answers(a) => a.kind(),
            Record::Pack(_) => Kind::Pack,
        }
    }

    /// Encodes the record as its frames (routing frames excluded).
    pub fn encode(&self) -> Vec<Vec<u8>> {
        let mut env = envelope(self.kind());
        match self {
            Record::Hello(h) => {
                env.push(h.lane.into());
                put_str(&mut env, &h.rid);
                put_u64(&mut env, h.generation.get());
                put_str(&mut env, &h.security_identity);
                put_str(&mut env, h.expect_rid.as_deref().unwrap_or_default());
                put_u64(&mut env, h.expect_generation.map_or(0, NonZeroU64::get));
                put_u64(&mut env, h.config_generation);
                put_memberships(&mut env, &h.memberships);
                vec![env]
            }
            Record::Welcome(w) => {
                env.push(w.lane.into());
                put_str(&mut env, &w.rid);
                put_u64(&mut env, w.generation.get());
                put_str(&mut env, &w.security_identity);
                put_memberships(&mut env, &w.memberships);
                vec![env]
            }
            Record::Reject(r) => {
                env.push(r.reason.into());
                put_str(&mut env, &r.detail);
                vec![env]
            }
            Record::Probe { id } => vec![encode_probe(*id).to_vec()],
            Record::Cancel { call_id } => vec![liveness_frame(Kind::Cancel, *call_id).to_vec()],
            Record::Calls(c) => c.encode(),
            Record::Answers(a) => a.encode(),
            Record::Pack(p) => p.encode(),
            Record::Credit { call_id, items } => {
                put_u64(&mut env, call_id.get());
                put_u64(&mut env, items.get());
                vec![env]
            }
            Record::Ack { id } => vec![encode_ack(*id).to_vec()],
            Record::Message(m) => vec![Message::encode_envelope(&m.channel), m.payload.to_vec()],
            Record::Request(r) => encode_request(r).into(),
            Record::Accept(a) => {
                put_u64(&mut env, a.call_id.get());
                put_u64(&mut env, a.generation.get());
                put_u64(&mut env, a.connection_id);
                vec![env]
            }
            Record::Reply(r) => {
                put_u64(&mut env, r.call_id.get());
                env.push(code_byte(r.code, r.replayed));
                vec![env, r.payload.to_vec()]
            }
            Record::Item(i) => {
                put_u64(&mut env, i.call_id.get());
                put_u64(&mut env, i.seq);
                vec![env, i.payload.to_vec()]
            }
            Record::Close { reason } => {
                env.push((*reason).into());
                vec![env]
            }
            Record::Batch(b) => {
                put_count(&mut env, b.0.len());
                let mut frames = Vec::with_capacity(b.0.len().saturating_mul(2).saturating_add(1));
                frames.push(env);
                frames.extend(b.0.iter().flat_map(encode_request));
                frames
            }
        }
    }

    /// Decodes one record from its frames (routing frames already removed).
    ///
    /// Checks run in the order of WIRE.md §6 and the first failure is returned. Payloads are
    /// copied out of their frames; [`Record::decode_with`] can share them instead.
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Result<Record, WireError> {
        Self::decode_with(frames, |f| Bytes::copy_from_slice(f.as_ref()))
    }

    /// [`Record::decode`], taking each payload frame of an accepted record with `payload`
    /// instead of copying it: a caller whose frames already own shareable bytes (a receive
    /// buffer) hands them to the application without a copy. `payload` is called only after
    /// every check of the record passed, and the checks are exactly those of `decode`.
    pub fn decode_with<F: AsRef<[u8]>>(
        frames: &[F],
        payload: impl Fn(&F) -> Bytes,
    ) -> Result<Record, WireError> {
        Self::decode_in(frames, Capabilities::NONE, payload)
    }

    /// [`Record::decode_with`] on a connection where the capabilities `caps` are in effect
    /// (WIRE.md §8.1): an extension kind is known only if its capability is in `caps`; with
    /// [`Capabilities::NONE`] this is exactly the version-1 decoder.
    pub fn decode_in<F: AsRef<[u8]>>(
        frames: &[F],
        caps: Capabilities,
        payload: impl Fn(&F) -> Bytes,
    ) -> Result<Record, WireError> {
        let Some((first, rest)) = frames.split_first() else {
            return Err(WireError::FrameCount {
                kind: None,
                expected: 1,
                found: 0,
            });
        };
        let (kind, body) = read_header(first.as_ref(), caps)?;
        decode_body(kind, Reader::new(body, kind), caps, frames, rest, &payload)
            .map_err(|e| e.in_kind(kind))
    }
}

/// Decodes the body and the frames after it of a record of `kind` (context-free field errors
/// are given their kind by the caller).
fn decode_body<F: AsRef<[u8]>>(
    kind: Kind,
    mut r: Reader<'_>,
    caps: Capabilities,
    frames: &[F],
    rest: &[F],
    take: &impl Fn(&F) -> Bytes,
) -> Result<Record, WireError> {
    match kind {
        Kind::Hello => decode_hello(r, frames).map(Record::Hello),
        Kind::Welcome => decode_welcome(r, frames).map(Record::Welcome),
        Kind::Reject => {
            let reason = r.u8("reason")?;
            let detail = r.string("detail")?;
            r.finish()?;
            no_payload(kind, frames)?;
            Ok(Record::Reject(Reject {
                reason: RejectReason::try_from(reason)?,
                detail: Detail::from_wire(detail, "detail")?,
            }))
        }
        Kind::Probe | Kind::Ack | Kind::Cancel => {
            let id = r.u64(if kind == Kind::Cancel {
                "call_id"
            } else {
                "id"
            })?;
            r.finish()?;
            no_payload(kind, frames)?;
            Ok(match kind {
                Kind::Probe => Record::Probe {
                    id: non_zero(id, "id")?,
                },
                Kind::Ack => Record::Ack {
                    id: non_zero(id, "id")?,
                },
                _ => Record::Cancel {
                    call_id: non_zero(id, "call_id")?,
                },
            })
        }
        Kind::Message => {
            let channel = r.string("channel")?;
            r.finish()?;
            let payload = one_payload(kind, frames)?;
            Ok(Record::Message(Message {
                channel: Name::from_wire(channel, "channel")?,
                payload: take(payload),
            }))
        }
        Kind::Request => {
            let raw = RawRequest::read(&mut r)?;
            r.finish()?;
            let payload = one_payload(kind, frames)?;
            raw.check(|| take(payload)).map(Record::Request)
        }
        Kind::Accept => decode_accept(r, frames).map(Record::Accept),
        Kind::Reply | Kind::Item => decode_answer(kind, r, caps, frames, take),
        Kind::Close => {
            let reason = r.u8("reason")?;
            r.finish()?;
            no_payload(kind, frames)?;
            let reason = CloseReason::try_from(reason)?;
            Ok(Record::Close { reason })
        }
        Kind::Batch => decode_batch(r, frames, rest, take).map(Record::Batch),
        Kind::Calls => Calls::decode(r, IdForm::Full, frames, rest, take),
        Kind::Calls16 => Calls::decode(r, IdForm::Offsets, frames, rest, take),
        Kind::Answers => Answers::decode(r, IdForm::Full, caps, frames, rest, take),
        Kind::Answers16 => Answers::decode(r, IdForm::Offsets, caps, frames, rest, take),
        Kind::Pack => Pack::decode(r, frames, take),
        Kind::Credit => {
            let call_id = r.u64("call_id")?;
            let items = r.u64("items")?;
            r.finish()?;
            no_payload(kind, frames)?;
            Ok(Record::Credit {
                call_id: non_zero(call_id, "call_id")?,
                items: non_zero(items, "items")?,
            })
        }
        Kind::Publish | Kind::PubPack => Err(WireError::invalid(
            Some(kind),
            "kind",
            "PUBLISH and PUBPACK are only valid in frame 1 of a fanout message",
        )),
    }
}

/// The body of a HELLO (WIRE.md §4.1).
fn decode_hello<F>(mut r: Reader<'_>, frames: &[F]) -> Result<Hello, WireError> {
    let lane = r.u8("lane")?;
    let rid = r.string("rid")?;
    let generation = r.u64("generation")?;
    let security_identity = r.string("security_identity")?;
    let expect_rid = r.string("expect_rid")?;
    let expect_generation = r.u64("expect_generation")?;
    let config_generation = r.u64("config_generation")?;
    let memberships = read_memberships(&mut r)?;
    r.finish()?;
    no_payload(Kind::Hello, frames)?;
    Ok(Hello {
        lane: Lane::try_from(lane)?,
        rid: Name::from_wire(rid, "rid")?,
        generation: non_zero(generation, "generation")?,
        security_identity: Label::from_wire(security_identity, "security_identity")?,
        expect_rid: optional_name(expect_rid, "expect_rid")?,
        expect_generation: NonZeroU64::new(expect_generation),
        config_generation,
        memberships: memberships_from_wire(&memberships)?,
    })
}

/// The body of a WELCOME (WIRE.md §4.2).
fn decode_welcome<F>(mut r: Reader<'_>, frames: &[F]) -> Result<Welcome, WireError> {
    let lane = r.u8("lane")?;
    let rid = r.string("rid")?;
    let generation = r.u64("generation")?;
    let security_identity = r.string("security_identity")?;
    let memberships = read_memberships(&mut r)?;
    r.finish()?;
    no_payload(Kind::Welcome, frames)?;
    Ok(Welcome {
        lane: Lane::try_from(lane)?,
        rid: Name::from_wire(rid, "rid")?,
        generation: non_zero(generation, "generation")?,
        security_identity: Label::from_wire(security_identity, "security_identity")?,
        memberships: memberships_from_wire(&memberships)?,
    })
}

/// The body of an ACCEPT (WIRE.md §4.8).
fn decode_accept<F>(mut r: Reader<'_>, frames: &[F]) -> Result<Accept, WireError> {
    let call_id = r.u64("call_id")?;
    let generation = r.u64("generation")?;
    let connection_id = r.u64("connection_id")?;
    r.finish()?;
    no_payload(Kind::Accept, frames)?;
    Ok(Accept {
        call_id: non_zero(call_id, "call_id")?,
        generation: non_zero(generation, "generation")?,
        connection_id,
    })
}

/// The body and payload of a REPLY or an ITEM (WIRE.md §4.9, §4.10).
fn decode_answer<F: AsRef<[u8]>>(
    kind: Kind,
    mut r: Reader<'_>,
    caps: Capabilities,
    frames: &[F],
    take: &impl Fn(&F) -> Bytes,
) -> Result<Record, WireError> {
    let call_id = r.u64("call_id")?;
    if kind == Kind::Reply {
        let code = r.u8("code")?;
        r.finish()?;
        let payload = one_payload(kind, frames)?;
        let call_id = non_zero(call_id, "call_id")?;
        let (code, replayed) = read_code(code, caps)?;
        return Ok(Record::Reply(Reply {
            call_id,
            code,
            payload: take(payload),
            replayed,
        }));
    }
    let seq = r.u64("seq")?;
    r.finish()?;
    let payload = one_payload(kind, frames)?;
    Ok(Record::Item(Item {
        call_id: non_zero(call_id, "call_id")?,
        seq,
        payload: take(payload),
    }))
}

/// The header and the request pairs of a BATCH (WIRE.md §4.12).
fn decode_batch<F: AsRef<[u8]>>(
    mut r: Reader<'_>,
    frames: &[F],
    rest: &[F],
    take: &impl Fn(&F) -> Bytes,
) -> Result<Batch, WireError> {
    let kind = Kind::Batch;
    let count = usize::from(r.u16("count")?);
    r.finish()?;
    let expected = count.saturating_mul(2).saturating_add(1);
    if frames.len() != expected {
        return Err(WireError::FrameCount {
            kind: Some(kind),
            expected,
            found: frames.len(),
        });
    }
    if count < Batch::MIN {
        return Err(WireError::invalid(
            Some(kind),
            "count",
            "a batch holds 2..=65535 requests",
        ));
    }
    // The frame count is checked, so this allocation is bounded by the input.
    let mut requests = Vec::with_capacity(count);
    for pair in rest.chunks_exact(2) {
        let [env, payload] = pair else {
            // chunks_exact(2) only yields pairs.
            continue;
        };
        requests.push(decode_inner_request(env.as_ref(), || take(payload))?);
    }
    Ok(Batch(requests))
}

/// Reads the 4-byte header of an envelope: steps 2-5 of WIRE.md §6, nothing else.
///
/// This is the zero-copy fast path for dispatching on the kind (a PROBE or ACK can be told
/// from application traffic without decoding anything else). It returns `Kind::Publish` for
/// a PUBLISH envelope; whether that kind is valid where it appears is the full decoder's job.
pub fn peek_kind(frame0: &[u8]) -> Result<Kind, WireError> {
    read_header(frame0, Capabilities::NONE).map(|(kind, _)| kind)
}

/// Encodes a PROBE envelope without allocating: `5A 4D 01 04` + id (big-endian).
pub fn encode_probe(id: NonZeroU64) -> [u8; PROBE_LEN] {
    liveness_frame(Kind::Probe, id)
}

/// Encodes an ACK envelope without allocating: `5A 4D 01 05` + id (big-endian).
pub fn encode_ack(id: NonZeroU64) -> [u8; PROBE_LEN] {
    liveness_frame(Kind::Ack, id)
}

fn liveness_frame(kind: Kind, id: NonZeroU64) -> [u8; PROBE_LEN] {
    let [m0, m1] = MAGIC;
    let [a, b, c, d, e, f, g, h] = id.get().to_be_bytes();
    [m0, m1, VERSION, kind as u8, a, b, c, d, e, f, g, h]
}

/// Starts an envelope: the 4-byte header of `kind`.
fn envelope(kind: Kind) -> Vec<u8> {
    let mut env = Vec::with_capacity(64);
    env.extend_from_slice(&MAGIC);
    env.push(VERSION);
    env.push(kind as u8);
    env
}

/// Splits an envelope into its kind and body, checking length, magic, version and kind.
fn read_header(frame: &[u8], caps: Capabilities) -> Result<(Kind, &[u8]), WireError> {
    let Some(([m0, m1, version, kind], body)) = frame.split_first_chunk::<HEADER_LEN>() else {
        return Err(WireError::Truncated {
            kind: None,
            field: "header",
        });
    };
    if [*m0, *m1] != MAGIC {
        return Err(WireError::BadMagic { found: [*m0, *m1] });
    }
    if *version != VERSION {
        return Err(WireError::UnsupportedVersion { version: *version });
    }
    Ok((Kind::from_byte_in(*kind, caps)?, body))
}

/// Frame-count check of a one-frame kind.
fn no_payload<F>(kind: Kind, frames: &[F]) -> Result<(), WireError> {
    if frames.len() == 1 {
        Ok(())
    } else {
        Err(WireError::FrameCount {
            kind: Some(kind),
            expected: 1,
            found: frames.len(),
        })
    }
}

/// Frame-count check of a two-frame kind; returns the payload frame.
fn one_payload<F>(kind: Kind, frames: &[F]) -> Result<&F, WireError> {
    match frames {
        [_, payload] => Ok(payload),
        _ => Err(WireError::FrameCount {
            kind: Some(kind),
            expected: 2,
            found: frames.len(),
        }),
    }
}

fn non_zero(value: u64, field: &'static str) -> Result<NonZeroU64, WireError> {
    NonZeroU64::new(value).ok_or(WireError::invalid(None, field, "must be non-zero"))
}

/// An optional name: the empty string means none.
fn optional_name(bytes: &[u8], field: &'static str) -> Result<Option<Name>, WireError> {
    if bytes.is_empty() {
        Ok(None)
    } else {
        Name::from_wire(bytes, field).map(Some)
    }
}

/// Reads the structure of a memberships list (role byte and channel bytes per entry).
///
/// Every entry consumes at least 3 bytes or fails, so the list is bounded by the input.
fn read_memberships<'a>(r: &mut Reader<'a>) -> Result<Vec<(u8, &'a [u8])>, WireError> {
    let count = r.u16("memberships")?;
    let mut list = Vec::new();
    for _ in 0..count {
        let role = r.u8("role")?;
        let channel = r.string("channel")?;
        list.push((role, channel));
    }
    Ok(list)
}

/// Checks a memberships list in wire order: the count first, then each entry.
fn memberships_from_wire(raw: &[(u8, &[u8])]) -> Result<Memberships, WireError> {
    Memberships::check_count(raw.len())?;
    let list = raw
        .iter()
        .map(|(role, channel)| {
            Ok(Membership {
                role: Role::try_from(*role)?,
                channel: Name::from_wire(channel, "channel")?,
            })
        })
        .collect::<Result<Vec<_>, WireError>>()?;
    Memberships::new(list)
}

fn put_memberships(out: &mut Vec<u8>, memberships: &Memberships) {
    put_count(out, memberships.len());
    for m in memberships.iter() {
        out.push(m.role.into());
        put_str(out, &m.channel);
    }
}

fn encode_request(r: &Request) -> [Vec<u8>; 2] {
    let mut env = envelope(Kind::Request);
    put_u64(&mut env, r.call_id.get());
    put_u64(&mut env, r.ttl_ms.map_or(0, NonZeroU64::get));
    env.push(r.semantics.into());
    put_str(&mut env, &r.channel);
    put_str(&mut env, &r.method);
    put_str(&mut env, r.idempotency_key.as_deref().unwrap_or_default());
    [env, r.payload.to_vec()]
}

/// Decodes one REQUEST of a BATCH: the same rules as a lone REQUEST, the frame count being
/// fixed by the batch.
fn decode_inner_request(env: &[u8], payload: impl FnOnce() -> Bytes) -> Result<Request, WireError> {
    let (kind, body) = read_header(env, Capabilities::NONE)?;
    if kind != Kind::Request {
        return Err(WireError::invalid(
            Some(Kind::Batch),
            "requests",
            "a BATCH holds only REQUEST records",
        ));
    }
    let mut r = Reader::new(body, kind);
    let raw = RawRequest::read(&mut r)?;
    r.finish()?;
    raw.check(payload).map_err(|e| e.in_kind(Kind::Request))
}

/// The fields of a REQUEST envelope, structure checked, values not yet.
struct RawRequest<'a> {
    call_id: u64,
    ttl_ms: u64,
    semantics: u8,
    channel: &'a [u8],
    method: &'a [u8],
    idempotency_key: &'a [u8],
}

impl<'a> RawRequest<'a> {
    fn read(r: &mut Reader<'a>) -> Result<Self, WireError> {
        Ok(Self {
            call_id: r.u64("call_id")?,
            ttl_ms: r.u64("ttl_ms")?,
            semantics: r.u8("semantics")?,
            channel: r.string("channel")?,
            method: r.string("method")?,
            idempotency_key: r.string("idempotency_key")?,
        })
    }

    /// Checks the field values (context-free errors: the caller names the kind); `payload`
    /// is taken only once they all passed.
    fn check(self, payload: impl FnOnce() -> Bytes) -> Result<Request, WireError> {
        Ok(Request {
            call_id: non_zero(self.call_id, "call_id")?,
            ttl_ms: NonZeroU64::new(self.ttl_ms),
            semantics: Semantics::try_from(self.semantics)?,
            channel: Name::from_wire(self.channel, "channel")?,
            method: Name::from_wire(self.method, "method")?,
            idempotency_key: optional_name(self.idempotency_key, "idempotency_key")?,
            payload: payload(),
        })
    }
}

#[cfg(test)]
mod tests;
