//! Checks zmesh's wire codec against the language-neutral vectors in `spec-tests/v1/`
//! (MISSION W1, W2, W3, L3, L4).
//!
//! For every vector file: each valid message decodes to exactly its listed fields and those
//! fields encode to exactly its frames; each invalid message is refused with its listed error
//! class; each unencodable value is refused by the encoder side. A coverage test fails when a
//! record kind or an error class has no vector. The mapping from the JSON field form
//! (spec-tests/README.md) to zmesh types lives here, not in the library.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::num::NonZeroU64;
use std::path::PathBuf;

use bytes::Bytes;
use serde::Deserialize;

use zmesh::proto::wire::{
    Accept, Answer, Answers, Batch, Calls, Capabilities, CloseReason, Detail, FanoutMessage, Hello,
    Item, Kind, Label, Lane, Membership, Memberships, Message, Name, Pack, PubPack, Record, Reject,
    RejectReason, Reply, ReplyCode, Request, Role, Semantics, Welcome, WireError, BEACON_TOPIC,
};

// ---- the file format (spec-tests/README.md) ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VectorFile {
    format: String,
    version: u32,
    decoder: Decoder,
    /// The capabilities in effect on the connection the messages travel on (WIRE.md §8.1);
    /// absent: none, version 1 exactly.
    #[serde(default)]
    capabilities: Vec<String>,
    #[allow(dead_code)]
    description: String,
    valid: Vec<Valid>,
    invalid: Vec<Invalid>,
    unencodable: Vec<Unencodable>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Decoder {
    Record,
    Fanout,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Valid {
    name: String,
    #[allow(dead_code)]
    description: String,
    frames: Vec<String>,
    record: JsonRecord,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Invalid {
    name: String,
    #[allow(dead_code)]
    description: String,
    /// The kind the vector is about; absent for header-level vectors.
    kind: Option<String>,
    frames: Vec<String>,
    error: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Unencodable {
    name: String,
    #[allow(dead_code)]
    description: String,
    record: JsonRecord,
    error: String,
}

/// A record or fanout message in the neutral JSON form: u64 as decimal strings, strings as
/// JSON strings, byte fields as hex, enums as snake_case names, "none" as "0" / "".
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum JsonRecord {
    Hello {
        lane: JsonLane,
        rid: String,
        generation: String,
        security_identity: String,
        expect_rid: String,
        expect_generation: String,
        config_generation: String,
        memberships: Vec<JsonMembership>,
    },
    Welcome {
        lane: JsonLane,
        rid: String,
        generation: String,
        security_identity: String,
        memberships: Vec<JsonMembership>,
    },
    Reject {
        reason: JsonRejectReason,
        detail: String,
    },
    Probe {
        id: String,
    },
    Ack {
        id: String,
    },
    Message {
        channel: String,
        payload: String,
    },
    Request(JsonRequest),
    Accept {
        call_id: String,
        generation: String,
        connection_id: String,
    },
    Reply {
        call_id: String,
        code: JsonReplyCode,
        payload: String,
        /// The replayed mark (WIRE.md §4.17); absent means false.
        #[serde(default)]
        replayed: bool,
    },
    Item {
        call_id: String,
        seq: String,
        payload: String,
    },
    Close {
        reason: JsonCloseReason,
    },
    Batch {
        requests: Vec<JsonRequest>,
    },
    Cancel {
        call_id: String,
    },
    Credit {
        call_id: String,
        items: String,
    },
    Calls {
        ttl_ms: String,
        semantics: JsonSemantics,
        channel: String,
        method: String,
        calls: Vec<JsonCall>,
    },
    Answers {
        generation: String,
        connection_id: String,
        answers: Vec<JsonAnswer>,
    },
    /// CALLS16 (WIRE.md §4.19): the keys of CALLS, the call ids in full; the base and the
    /// offsets are the encoder's to derive.
    Calls16 {
        ttl_ms: String,
        semantics: JsonSemantics,
        channel: String,
        method: String,
        calls: Vec<JsonCall>,
    },
    /// ANSWERS16 (WIRE.md §4.19): the keys of ANSWERS, the call ids in full.
    Answers16 {
        generation: String,
        connection_id: String,
        answers: Vec<JsonAnswer>,
    },
    Pack {
        channel: String,
        payloads: Vec<String>,
    },
    Beacon,
    Publish {
        topic: String,
        generation: String,
        seq: String,
        payload: String,
    },
    Pubpack {
        topic: String,
        generation: String,
        first_seq: String,
        payloads: Vec<String>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    call_id: String,
    ttl_ms: String,
    semantics: JsonSemantics,
    channel: String,
    method: String,
    idempotency_key: String,
    payload: String,
}

/// One call of a CALLS record: what it does not share with the others.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonCall {
    call_id: String,
    idempotency_key: String,
    payload: String,
}

/// One entry of an ANSWERS record: `what` is `accept`, `reply` or `accept_reply`; `code`
/// and `payload` are there exactly when it carries a REPLY, `replayed` (absent: false) only
/// then.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonAnswer {
    call_id: String,
    what: JsonWhat,
    #[serde(default)]
    code: Option<JsonReplyCode>,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    replayed: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum JsonWhat {
    Accept,
    Reply,
    AcceptReply,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonMembership {
    role: JsonRole,
    channel: String,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum JsonLane {
    Application,
    Completion,
    ClientServer,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum JsonRole {
    Server,
    ObjectClient,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum JsonRejectReason {
    NotRequired,
    IdentityMismatch,
    GenerationMismatch,
    SecurityFailure,
    UnsupportedVersion,
    Draining,
    LaneMismatch,
    Protocol,
    Duplicate,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum JsonSemantics {
    Undeclared,
    Query,
    IdempotentCommand,
    NonRepeatableCommand,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum JsonReplyCode {
    Ok,
    Exception,
    MethodNotFound,
    ClassNotFound,
    Timeout,
    TransportError,
    Unauthorized,
    Forbidden,
    InvalidParams,
    IncompatibleVersion,
    UnknownOutcome,
    Busy,
    Superseded,
    NotFound,
    Unavailable,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum JsonCloseReason {
    Shutdown,
    Draining,
    Replaced,
    DeadlineExceeded,
    ProtocolError,
    NotRequired,
}

// ---- JSON form -> zmesh types ----

/// What the JSON value is in zmesh terms.
#[derive(Debug, PartialEq)]
enum Typed {
    Record(Record),
    Fanout(FanoutMessage),
}

/// The refusal an encoder-side conversion gives for an out-of-domain value.
fn refused(field: &'static str) -> WireError {
    WireError::InvalidField {
        kind: None,
        field,
        problem: "out of domain",
    }
}

fn u64_of(s: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| panic!("not a decimal u64: {s:?}"))
}

fn non_zero(s: &str, field: &'static str) -> Result<NonZeroU64, WireError> {
    NonZeroU64::new(u64_of(s)).ok_or(refused(field))
}

fn optional_name(s: &str) -> Result<Option<Name>, WireError> {
    if s.is_empty() {
        Ok(None)
    } else {
        Name::new(s).map(Some)
    }
}

fn bytes_of(hex_str: &str) -> Bytes {
    Bytes::from(hex::decode(hex_str).unwrap_or_else(|_| panic!("not hex: {hex_str:?}")))
}

fn lane(v: JsonLane) -> Lane {
    match v {
        JsonLane::Application => Lane::Application,
        JsonLane::Completion => Lane::Completion,
        JsonLane::ClientServer => Lane::ClientServer,
    }
}

fn memberships(list: &[JsonMembership]) -> Result<Memberships, WireError> {
    let list = list
        .iter()
        .map(|m| {
            Ok(Membership {
                role: match m.role {
                    JsonRole::Server => Role::Server,
                    JsonRole::ObjectClient => Role::ObjectClient,
                },
                channel: Name::new(m.channel.as_str())?,
            })
        })
        .collect::<Result<Vec<_>, WireError>>()?;
    Memberships::new(list)
}

fn request(r: &JsonRequest) -> Result<Request, WireError> {
    Ok(Request {
        call_id: non_zero(&r.call_id, "call_id")?,
        ttl_ms: NonZeroU64::new(u64_of(&r.ttl_ms)),
        semantics: match r.semantics {
            JsonSemantics::Undeclared => Semantics::Undeclared,
            JsonSemantics::Query => Semantics::Query,
            JsonSemantics::IdempotentCommand => Semantics::IdempotentCommand,
            JsonSemantics::NonRepeatableCommand => Semantics::NonRepeatableCommand,
        },
        channel: Name::new(r.channel.as_str())?,
        method: Name::new(r.method.as_str())?,
        idempotency_key: optional_name(&r.idempotency_key)?,
        payload: bytes_of(&r.payload),
    })
}

/// Builds the zmesh value of a JSON record; an out-of-domain field is refused with the class
/// the library's constructors use.
fn typed(j: &JsonRecord) -> Result<Typed, WireError> {
    let record = match j {
        JsonRecord::Hello {
            lane: l,
            rid,
            generation,
            security_identity,
            expect_rid,
            expect_generation,
            config_generation,
            memberships: ms,
        } => Record::Hello(Hello {
            lane: lane(*l),
            rid: Name::new(rid.as_str())?,
            generation: non_zero(generation, "generation")?,
            security_identity: Label::new(security_identity.as_str())?,
            expect_rid: optional_name(expect_rid)?,
            expect_generation: NonZeroU64::new(u64_of(expect_generation)),
            config_generation: u64_of(config_generation),
            memberships: memberships(ms)?,
        }),
        JsonRecord::Welcome {
            lane: l,
            rid,
            generation,
            security_identity,
            memberships: ms,
        } => Record::Welcome(Welcome {
            lane: lane(*l),
            rid: Name::new(rid.as_str())?,
            generation: non_zero(generation, "generation")?,
            security_identity: Label::new(security_identity.as_str())?,
            memberships: memberships(ms)?,
        }),
        JsonRecord::Reject { reason, detail } => Record::Reject(Reject {
            reason: reject_reason(reason),
            detail: Detail::new(detail.as_str())?,
        }),
        JsonRecord::Probe { id } => Record::Probe {
            id: non_zero(id, "id")?,
        },
        JsonRecord::Ack { id } => Record::Ack {
            id: non_zero(id, "id")?,
        },
        JsonRecord::Message { channel, payload } => Record::Message(Message {
            channel: Name::new(channel.as_str())?,
            payload: bytes_of(payload),
        }),
        JsonRecord::Request(r) => Record::Request(request(r)?),
        JsonRecord::Accept {
            call_id,
            generation,
            connection_id,
        } => Record::Accept(Accept {
            call_id: non_zero(call_id, "call_id")?,
            generation: non_zero(generation, "generation")?,
            connection_id: u64_of(connection_id),
        }),
        JsonRecord::Reply {
            call_id,
            code,
            payload,
            replayed,
        } => Record::Reply(Reply {
            call_id: non_zero(call_id, "call_id")?,
            code: reply_code(*code),
            payload: bytes_of(payload),
            replayed: *replayed,
        }),
        JsonRecord::Item {
            call_id,
            seq,
            payload,
        } => Record::Item(Item {
            call_id: non_zero(call_id, "call_id")?,
            seq: u64_of(seq),
            payload: bytes_of(payload),
        }),
        JsonRecord::Close { reason } => Record::Close {
            reason: close_reason(reason),
        },
        JsonRecord::Batch { requests } => Record::Batch(Batch::new(
            requests.iter().map(request).collect::<Result<_, _>>()?,
        )?),
        JsonRecord::Cancel { call_id } => Record::Cancel {
            call_id: non_zero(call_id, "call_id")?,
        },
        JsonRecord::Credit { call_id, items } => Record::Credit {
            call_id: non_zero(call_id, "call_id")?,
            items: non_zero(items, "items")?,
        },
        JsonRecord::Calls {
            ttl_ms,
            semantics,
            channel,
            method,
            calls,
        } => Record::Calls(calls_of(ttl_ms, *semantics, channel, method, calls)?),
        JsonRecord::Answers {
            generation,
            connection_id,
            answers,
        } => Record::Answers(answers_of(generation, connection_id, answers)?),
        JsonRecord::Calls16 {
            ttl_ms,
            semantics,
            channel,
            method,
            calls,
        } => {
            let c = calls_of(ttl_ms, *semantics, channel, method, calls)?.with_offsets();
            // Ids more than 65535 apart have no offset form: the record would go as CALLS.
            if c.kind() != Kind::Calls16 {
                return Err(refused("offset"));
            }
            Record::Calls(c)
        }
        JsonRecord::Answers16 {
            generation,
            connection_id,
            answers,
        } => {
            let a = answers_of(generation, connection_id, answers)?.with_offsets();
            if a.kind() != Kind::Answers16 {
                return Err(refused("offset"));
            }
            Record::Answers(a)
        }
        JsonRecord::Pack { channel, payloads } => Record::Pack(Pack::new(
            Name::new(channel.as_str())?,
            payloads.iter().map(|p| bytes_of(p)).collect(),
        )?),
        JsonRecord::Beacon => return Ok(Typed::Fanout(FanoutMessage::Beacon)),
        JsonRecord::Publish {
            topic,
            generation,
            seq,
            payload,
        } => {
            return Ok(Typed::Fanout(FanoutMessage::Publish {
                topic: bytes_of(topic),
                generation: non_zero(generation, "generation")?,
                seq: u64_of(seq),
                payload: bytes_of(payload),
            }))
        }
        JsonRecord::Pubpack {
            topic,
            generation,
            first_seq,
            payloads,
        } => {
            return Ok(Typed::Fanout(FanoutMessage::PubPack(PubPack::new(
                bytes_of(topic),
                non_zero(generation, "generation")?,
                u64_of(first_seq),
                payloads.iter().map(|p| bytes_of(p)).collect(),
            )?)))
        }
    };
    Ok(Typed::Record(record))
}

/// The calls of a vector's CALLS or CALLS16 record, in the full form.
fn calls_of(
    ttl_ms: &str,
    semantics: JsonSemantics,
    channel: &str,
    method: &str,
    calls: &[JsonCall],
) -> Result<Calls, WireError> {
    Calls::new(
        calls
            .iter()
            .map(|c| {
                request(&JsonRequest {
                    call_id: c.call_id.clone(),
                    ttl_ms: ttl_ms.to_owned(),
                    semantics,
                    channel: channel.to_owned(),
                    method: method.to_owned(),
                    idempotency_key: c.idempotency_key.clone(),
                    payload: c.payload.clone(),
                })
            })
            .collect::<Result<_, _>>()?,
    )
}

/// The entries of a vector's ANSWERS or ANSWERS16 record, in the full form.
fn answers_of(
    generation: &str,
    connection_id: &str,
    answers: &[JsonAnswer],
) -> Result<Answers, WireError> {
    Answers::new(
        non_zero(generation, "generation")?,
        u64_of(connection_id),
        answers
            .iter()
            .map(answer)
            .collect::<Result<_, WireError>>()?,
    )
}

/// One entry of a vector's ANSWERS record, with its call id.
fn answer(a: &JsonAnswer) -> Result<(NonZeroU64, Answer), WireError> {
    let reply = || {
        (
            a.code.map_or(ReplyCode::Ok, reply_code),
            bytes_of(a.payload.as_deref().unwrap_or_default()),
        )
    };
    let answer = match a.what {
        JsonWhat::Accept => Answer::Accept,
        JsonWhat::Reply => {
            let (code, payload) = reply();
            Answer::Reply(code, payload, a.replayed)
        }
        JsonWhat::AcceptReply => {
            let (code, payload) = reply();
            Answer::AcceptReply(code, payload, a.replayed)
        }
    };
    Ok((non_zero(&a.call_id, "call_id")?, answer))
}

/// The library's `RejectReason` of a vector's.
fn reject_reason(reason: &JsonRejectReason) -> RejectReason {
    match reason {
        JsonRejectReason::NotRequired => RejectReason::NotRequired,
        JsonRejectReason::IdentityMismatch => RejectReason::IdentityMismatch,
        JsonRejectReason::GenerationMismatch => RejectReason::GenerationMismatch,
        JsonRejectReason::SecurityFailure => RejectReason::SecurityFailure,
        JsonRejectReason::UnsupportedVersion => RejectReason::UnsupportedVersion,
        JsonRejectReason::Draining => RejectReason::Draining,
        JsonRejectReason::LaneMismatch => RejectReason::LaneMismatch,
        JsonRejectReason::Protocol => RejectReason::Protocol,
        JsonRejectReason::Duplicate => RejectReason::Duplicate,
    }
}

/// The library's `CloseReason` of a vector's.
fn close_reason(reason: &JsonCloseReason) -> CloseReason {
    match reason {
        JsonCloseReason::Shutdown => CloseReason::Shutdown,
        JsonCloseReason::Draining => CloseReason::Draining,
        JsonCloseReason::Replaced => CloseReason::Replaced,
        JsonCloseReason::DeadlineExceeded => CloseReason::DeadlineExceeded,
        JsonCloseReason::ProtocolError => CloseReason::ProtocolError,
        JsonCloseReason::NotRequired => CloseReason::NotRequired,
    }
}

/// The wire reply code of a JSON reply code.
fn reply_code(code: JsonReplyCode) -> ReplyCode {
    match code {
        JsonReplyCode::Ok => ReplyCode::Ok,
        JsonReplyCode::Exception => ReplyCode::Exception,
        JsonReplyCode::MethodNotFound => ReplyCode::MethodNotFound,
        JsonReplyCode::ClassNotFound => ReplyCode::ClassNotFound,
        JsonReplyCode::Timeout => ReplyCode::Timeout,
        JsonReplyCode::TransportError => ReplyCode::TransportError,
        JsonReplyCode::Unauthorized => ReplyCode::Unauthorized,
        JsonReplyCode::Forbidden => ReplyCode::Forbidden,
        JsonReplyCode::InvalidParams => ReplyCode::InvalidParams,
        JsonReplyCode::IncompatibleVersion => ReplyCode::IncompatibleVersion,
        JsonReplyCode::UnknownOutcome => ReplyCode::UnknownOutcome,
        JsonReplyCode::Busy => ReplyCode::Busy,
        JsonReplyCode::Superseded => ReplyCode::Superseded,
        JsonReplyCode::NotFound => ReplyCode::NotFound,
        JsonReplyCode::Unavailable => ReplyCode::Unavailable,
    }
}

/// The vector-file name of a kind. Exhaustive on purpose: a new `Kind` does not compile here
/// until it is named, and then `w2_every_kind_has_vectors` demands vectors for it.
fn kind_name(kind: Kind) -> &'static str {
    match kind {
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

/// The JSON kind name of a value.
fn json_kind(j: &JsonRecord) -> &'static str {
    match typed_kind(j) {
        Some(kind) => kind_name(kind),
        None => "beacon",
    }
}

fn typed_kind(j: &JsonRecord) -> Option<Kind> {
    Some(match j {
        JsonRecord::Hello { .. } => Kind::Hello,
        JsonRecord::Welcome { .. } => Kind::Welcome,
        JsonRecord::Reject { .. } => Kind::Reject,
        JsonRecord::Probe { .. } => Kind::Probe,
        JsonRecord::Ack { .. } => Kind::Ack,
        JsonRecord::Message { .. } => Kind::Message,
        JsonRecord::Request(_) => Kind::Request,
        JsonRecord::Accept { .. } => Kind::Accept,
        JsonRecord::Reply { .. } => Kind::Reply,
        JsonRecord::Item { .. } => Kind::Item,
        JsonRecord::Close { .. } => Kind::Close,
        JsonRecord::Batch { .. } => Kind::Batch,
        JsonRecord::Cancel { .. } => Kind::Cancel,
        JsonRecord::Calls { .. } => Kind::Calls,
        JsonRecord::Credit { .. } => Kind::Credit,
        JsonRecord::Answers { .. } => Kind::Answers,
        JsonRecord::Pack { .. } => Kind::Pack,
        JsonRecord::Calls16 { .. } => Kind::Calls16,
        JsonRecord::Answers16 { .. } => Kind::Answers16,
        JsonRecord::Beacon => return None,
        JsonRecord::Publish { .. } => Kind::Publish,
        JsonRecord::Pubpack { .. } => Kind::PubPack,
    })
}

// ---- running the vectors ----

fn load(file: &str) -> VectorFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("spec-tests/v1")
        .join(file);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let parsed: VectorFile =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(parsed.format, "zmesh-spec-vectors", "{file}");
    assert_eq!(parsed.version, 1, "{file}");
    for names in [
        parsed.valid.iter().map(|v| &v.name).collect::<Vec<_>>(),
        parsed.invalid.iter().map(|v| &v.name).collect(),
        parsed.unencodable.iter().map(|v| &v.name).collect(),
    ] {
        let unique: BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{file}: duplicate vector names");
    }
    parsed
}

fn files() -> Vec<VectorFile> {
    vec![
        load("records.json"),
        load("fanout.json"),
        load("cancel.json"),
        load("calls.json"),
        load("credit.json"),
        load("answers.json"),
        load("replayed.json"),
        load("pack.json"),
        load("ids16.json"),
        load("pubpack.json"),
    ]
}

/// The capabilities a file's messages travel under.
fn caps_of(file: &VectorFile) -> Capabilities {
    file.capabilities
        .iter()
        .fold(Capabilities::NONE, |caps, name| match name.as_str() {
            "cancel" => caps.union(Capabilities::CANCEL),
            "calls" => caps.union(Capabilities::CALLS),
            "credit" => caps.union(Capabilities::CREDIT),
            "answers" => caps.union(Capabilities::ANSWERS),
            "replayed" => caps.union(Capabilities::REPLAYED),
            "pack" => caps.union(Capabilities::PACK),
            "ids16" => caps.union(Capabilities::IDS16),
            "pubpack" => caps.union(Capabilities::PUBPACK),
            other => panic!("unknown capability {other:?}"),
        })
}

fn frames_of(name: &str, hex_frames: &[String]) -> Vec<Vec<u8>> {
    hex_frames
        .iter()
        .map(|f| hex::decode(f).unwrap_or_else(|_| panic!("{name}: frame is not hex: {f:?}")))
        .collect()
}

fn decode(file: &VectorFile, frames: &[Vec<u8>]) -> Result<Typed, WireError> {
    match file.decoder {
        Decoder::Record => Record::decode_in(frames, caps_of(file), |f| Bytes::copy_from_slice(f))
            .map(Typed::Record),
        Decoder::Fanout => {
            FanoutMessage::decode_in(frames, caps_of(file), |f| Bytes::copy_from_slice(f))
                .map(Typed::Fanout)
        }
    }
}

fn encode(value: &Typed) -> Result<Vec<Vec<u8>>, WireError> {
    match value {
        Typed::Record(r) => Ok(r.encode()),
        Typed::Fanout(m) => m.encode(),
    }
}

#[test]
fn w2_valid_vectors_decode_to_their_fields() {
    let mut checked = 0;
    for file in files() {
        for v in &file.valid {
            let frames = frames_of(&v.name, &v.frames);
            let expected = typed(&v.record)
                .unwrap_or_else(|e| panic!("{}: fields not representable: {e}", v.name));
            let decoded = decode(&file, &frames)
                .unwrap_or_else(|e| panic!("{}: valid vector refused: {e}", v.name));
            assert_eq!(decoded, expected, "{}", v.name);
            // The kind byte names the JSON kind (CALLS16 is not CALLS, though one variant).
            if let Typed::Record(r) = &decoded {
                assert_eq!(kind_name(r.kind()), json_kind(&v.record), "{}", v.name);
            }
            checked += 1;
        }
    }
    assert!(checked > 0);
}

#[test]
fn w2_valid_vectors_encode_to_their_frames() {
    for file in files() {
        for v in &file.valid {
            let value = typed(&v.record).unwrap();
            let encoded = encode(&value)
                .unwrap_or_else(|e| panic!("{}: encoder refused valid fields: {e}", v.name));
            let hex_frames: Vec<String> = encoded.iter().map(hex::encode).collect();
            assert_eq!(hex_frames, v.frames, "{}", v.name);
        }
    }
}

#[test]
fn w2_invalid_vectors_give_their_error_class() {
    for file in files() {
        for v in &file.invalid {
            let frames = frames_of(&v.name, &v.frames);
            match decode(&file, &frames) {
                Ok(value) => panic!("{}: invalid vector accepted as {value:?}", v.name),
                Err(e) => assert_eq!(e.class(), v.error, "{}: {e}", v.name),
            }
        }
    }
}

#[test]
fn w2_unencodable_values_are_refused() {
    for file in files() {
        for v in &file.unencodable {
            let result = typed(&v.record).and_then(|value| encode(&value));
            match result {
                Ok(frames) => panic!("{}: encoded as {frames:?}", v.name),
                Err(e) => assert_eq!(e.class(), v.error, "{}: {e}", v.name),
            }
        }
    }
}

/// WIRE.md §4.17: the replayed mark exists only where `replayed` is in effect. Decoded
/// without it, each marked vector of replayed.json is an unknown code (`invalid_field`, as in
/// version 1) and each unmarked one decodes to the same fields.
#[test]
fn w3_replayed_marks_are_unknown_codes_without_the_capability() {
    let file = load("replayed.json");
    let mut marked_seen = 0;
    for v in &file.valid {
        let frames = frames_of(&v.name, &v.frames);
        let marked = match &v.record {
            JsonRecord::Reply { replayed, .. } => *replayed,
            JsonRecord::Answers { answers, .. } => answers.iter().any(|a| a.replayed),
            _ => false,
        };
        let without = Record::decode_in(&frames, Capabilities::ANSWERS, |f| {
            Bytes::copy_from_slice(f)
        });
        match without {
            Ok(r) => {
                assert!(
                    !marked,
                    "{}: a marked code byte decoded without replayed",
                    v.name
                );
                assert_eq!(Typed::Record(r), typed(&v.record).unwrap(), "{}", v.name);
            }
            Err(e) => {
                assert!(marked, "{}: refused without replayed: {e}", v.name);
                assert_eq!(e.class(), "invalid_field", "{}: {e}", v.name);
                marked_seen += 1;
            }
        }
    }
    assert!(marked_seen >= 3);
}

/// WIRE.md §4.19: kinds 13 and 14 exist only where `ids16` is in effect. Decoded with every
/// other capability of ids16.json in effect, each of its messages whose kind byte is 13 or 14
/// (valid or not) is an unknown kind, as in version 1.
#[test]
fn x4_ids16_kinds_are_unknown_without_the_capability() {
    let file = load("ids16.json");
    let caps = caps_of(&file);
    assert!(caps.contains(Capabilities::IDS16));
    let without = Capabilities::CALLS
        .union(Capabilities::ANSWERS)
        .union(Capabilities::REPLAYED);
    assert_eq!(
        without.union(Capabilities::IDS16),
        caps,
        "ids16.json's capabilities"
    );
    let messages = file
        .valid
        .iter()
        .map(|v| (&v.name, &v.frames))
        .chain(file.invalid.iter().map(|v| (&v.name, &v.frames)));
    let mut seen = BTreeSet::new();
    for (name, hex_frames) in messages {
        let frames = frames_of(name, hex_frames);
        let byte = frames.first().and_then(|f| f.get(3)).copied();
        let Some(kind @ (0x13 | 0x14)) = byte else {
            continue;
        };
        seen.insert(kind);
        let result = Record::decode_in(&frames, without, |f| Bytes::copy_from_slice(f));
        match result {
            Ok(r) => panic!("{name}: decoded without ids16 as {r:?}"),
            Err(e) => assert_eq!(e.class(), "unknown_kind", "{name}: {e}"),
        }
    }
    assert_eq!(seen, BTreeSet::from([0x13, 0x14]));
}

/// WIRE.md §7.5: kind 15 exists only on a publisher's socket where `pubpack` is in effect.
/// Decoded by a version-1 subscriber, each message of pubpack.json whose frame 1 has kind
/// byte 15 (valid or not) is an unknown kind, unless an earlier rule of §6.3 (the reserved
/// topic, a missing frame 1, a short or foreign header) decides first.
#[test]
fn x3_pubpack_kind_is_unknown_without_the_capability() {
    let file = load("pubpack.json");
    assert_eq!(
        caps_of(&file),
        Capabilities::PUBPACK,
        "pubpack.json's capabilities"
    );
    let messages = file
        .valid
        .iter()
        .map(|v| (&v.name, &v.frames))
        .chain(file.invalid.iter().map(|v| (&v.name, &v.frames)));
    let mut seen = 0;
    for (name, hex_frames) in messages {
        let frames = frames_of(name, hex_frames);
        let header = frames.get(1).and_then(|f| f.get(..4));
        if header != Some(&[0x5A, 0x4D, 0x01, 0x15][..])
            || frames.first().map(Vec::as_slice) == Some(&BEACON_TOPIC[..])
        {
            continue;
        }
        seen += 1;
        match FanoutMessage::decode(&frames) {
            Ok(m) => panic!("{name}: decoded without pubpack as {m:?}"),
            Err(e) => assert_eq!(e.class(), "unknown_kind", "{name}: {e}"),
        }
    }
    assert!(seen >= 10, "only {seen} PUBPACK messages");
}

#[test]
fn w2_valid_vectors_use_the_right_decoder() {
    // A record vector is never a fanout message and vice versa: the two files do not overlap.
    for file in files() {
        for v in &file.valid {
            let is_fanout = matches!(
                v.record,
                JsonRecord::Beacon | JsonRecord::Publish { .. } | JsonRecord::Pubpack { .. }
            );
            assert_eq!(is_fanout, file.decoder == Decoder::Fanout, "{}", v.name);
        }
    }
}

#[test]
fn w2_every_kind_has_vectors() {
    // Kind::ALL is every kind the decoder knows (checked against the kind byte space).
    let known: Vec<Kind> = (0..=255u8).filter_map(|b| Kind::try_from(b).ok()).collect();
    assert_eq!(known, Kind::ALL.to_vec());
    // With every capability in effect (those of the handshake and the fanout one), the
    // extension kinds are known too, and nothing else.
    let every = Capabilities::SPOKEN.union(Capabilities::PUBPACK);
    let with_cancel: Vec<Kind> = (0..=255u8)
        .filter_map(|b| Kind::from_byte_in(b, every).ok())
        .collect();
    let mut all: Vec<Kind> = Kind::ALL.into_iter().chain(Kind::EXTENSIONS).collect();
    all.sort();
    assert_eq!(with_cancel, all);

    let files = files();
    let mut valid_kinds = BTreeSet::new();
    let mut invalid_classes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut all_classes = BTreeSet::new();
    for file in &files {
        for v in &file.valid {
            valid_kinds.insert(json_kind(&v.record));
        }
        for v in &file.invalid {
            all_classes.insert(v.error.clone());
            if let Some(kind) = &v.kind {
                invalid_classes
                    .entry(kind.clone())
                    .or_default()
                    .insert(v.error.clone());
            }
        }
    }

    let structural = [
        "truncated",
        "trailing_bytes",
        "frame_count",
        "invalid_field",
    ];
    let mut names: Vec<&str> = Kind::ALL
        .into_iter()
        .chain(Kind::EXTENSIONS)
        .map(kind_name)
        .collect();
    names.push("beacon");
    for name in names {
        assert!(valid_kinds.contains(name), "no valid vector for {name}");
        let classes = invalid_classes.get(name).cloned().unwrap_or_default();
        let required: &[&str] = match name {
            "beacon" => &["reserved_topic"],
            _ => &structural,
        };
        for class in required {
            assert!(
                classes.contains(*class),
                "no invalid vector of class {class} for {name}"
            );
        }
    }

    let every_class = [
        "frame_count",
        "truncated",
        "bad_magic",
        "unsupported_version",
        "unknown_kind",
        "trailing_bytes",
        "invalid_field",
        "reserved_topic",
    ];
    assert_eq!(
        all_classes,
        every_class.iter().map(|c| c.to_string()).collect(),
        "the invalid vectors use exactly the documented error classes"
    );
}

#[test]
fn w2_every_enum_value_has_a_valid_vector() {
    // Every REJECT reason, REPLY code, CLOSE reason, semantics and lane appears on the wire in
    // some valid vector, so an implementation cannot get a value table wrong unnoticed.
    let mut seen = BTreeSet::new();
    for file in files() {
        for v in &file.valid {
            match typed(&v.record).unwrap() {
                Typed::Record(Record::Reject(r)) => {
                    seen.insert(("reason", u8::from(r.reason)));
                }
                Typed::Record(Record::Reply(r)) => {
                    seen.insert(("code", u8::from(r.code)));
                }
                Typed::Record(Record::Close { reason }) => {
                    seen.insert(("close", u8::from(reason)));
                }
                Typed::Record(Record::Request(r)) => {
                    seen.insert(("semantics", u8::from(r.semantics)));
                }
                Typed::Record(Record::Hello(h)) => {
                    seen.insert(("lane", u8::from(h.lane)));
                    for m in h.memberships.iter() {
                        seen.insert(("role", u8::from(m.role)));
                    }
                }
                Typed::Record(Record::Welcome(w)) => {
                    seen.insert(("lane", u8::from(w.lane)));
                    for m in w.memberships.iter() {
                        seen.insert(("role", u8::from(m.role)));
                    }
                }
                _ => {}
            }
        }
    }
    let expected = RejectReason::ALL
        .iter()
        .map(|v| ("reason", u8::from(*v)))
        .chain(ReplyCode::ALL.iter().map(|v| ("code", u8::from(*v))))
        .chain(CloseReason::ALL.iter().map(|v| ("close", u8::from(*v))))
        .chain(Semantics::ALL.iter().map(|v| ("semantics", u8::from(*v))))
        .chain(Lane::ALL.iter().map(|v| ("lane", u8::from(*v))))
        .chain(Role::ALL.iter().map(|v| ("role", u8::from(*v))));
    for value in expected {
        assert!(seen.contains(&value), "no valid vector carries {value:?}");
    }
}
