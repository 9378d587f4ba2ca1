//! Property tests of the wire codec (MISSION W3: malformed input of any kind is a typed error,
//! never a panic).
//!
//! * The decoders never panic on arbitrary frame lists: random frame counts and bytes,
//!   random bodies behind a valid header, and mutations of every valid spec-test vector; the
//!   record decoder as version 1 and with every spoken capability in effect.
//! * Canonical form: whatever a decoder accepts re-encodes to exactly the same frames (one
//!   byte form per record, WIRE.md §1).
//! * Round trip: every valid record encodes, then decodes, to itself.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::OnceLock;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::sample::{select, Index};

use zmesh::proto::wire::{
    Accept, Answer, Answers, Batch, Calls, Capabilities, CloseReason, Detail, FanoutMessage, Hello,
    IdForm, Item, Kind, Label, Lane, Membership, Memberships, Message, Name, Pack, PubPack, Record,
    Reject, RejectReason, Reply, ReplyCode, Request, Role, Semantics, Welcome, WireError,
    BEACON_PAYLOAD, BEACON_TOPIC, MAGIC, VERSION,
};

const CLASSES: [&str; 8] = [
    "frame_count",
    "truncated",
    "bad_magic",
    "unsupported_version",
    "unknown_kind",
    "trailing_bytes",
    "invalid_field",
    "reserved_topic",
];

/// Runs both decoders on `frames` (each as version 1 and with every capability it knows in
/// effect) and checks the properties that hold for any input.
fn check_decoders(frames: &[Vec<u8>]) -> Result<(), TestCaseError> {
    match Record::decode(frames) {
        Ok(record) => prop_assert_eq!(record.encode(), frames.to_vec(), "not canonical"),
        Err(e) => check_error(&e)?,
    }
    match Record::decode_in(frames, Capabilities::SPOKEN, |f| Bytes::copy_from_slice(f)) {
        Ok(record) => prop_assert_eq!(record.encode(), frames.to_vec(), "not canonical"),
        Err(e) => check_error(&e)?,
    }
    match FanoutMessage::decode(frames) {
        Ok(msg) => prop_assert_eq!(msg.encode().unwrap(), frames.to_vec(), "not canonical"),
        Err(e) => check_error(&e)?,
    }
    match FanoutMessage::decode_in(frames, Capabilities::PUBPACK, |f| Bytes::copy_from_slice(f)) {
        Ok(msg) => prop_assert_eq!(msg.encode().unwrap(), frames.to_vec(), "not canonical"),
        Err(e) => check_error(&e)?,
    }
    Ok(())
}

fn check_error(e: &WireError) -> Result<(), TestCaseError> {
    prop_assert!(
        CLASSES.contains(&e.class()),
        "undocumented class {}",
        e.class()
    );
    // Rendering the error must not panic either.
    prop_assert!(!e.to_string().is_empty());
    Ok(())
}

/// The frames of every valid vector of every spec-test file (the capability files' records
/// reach their decoders through [`check_decoders`]'s spoken capabilities).
fn seeds() -> &'static [Vec<Vec<u8>>] {
    static SEEDS: OnceLock<Vec<Vec<Vec<u8>>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("spec-tests/v1");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        assert!(files.len() >= 10, "{files:?}");
        let mut seeds = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            for v in json["valid"].as_array().unwrap() {
                let frames = v["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| hex::decode(f.as_str().unwrap()).unwrap())
                    .collect();
                seeds.push(frames);
            }
        }
        assert!(!seeds.is_empty());
        seeds
    })
}

/// One edit of a frame list.
#[derive(Debug, Clone)]
enum Mutation {
    /// Overwrite one byte of one frame.
    SetByte(Index, Index, u8),
    /// Add 1..=255 to one byte (wraps), e.g. to turn a length or enum into a neighbour.
    BumpByte(Index, Index, u8),
    /// Cut one frame at a position.
    Truncate(Index, Index),
    /// Insert a byte into one frame.
    InsertByte(Index, Index, u8),
    /// Remove one frame.
    DropFrame(Index),
    /// Repeat one frame after itself.
    DuplicateFrame(Index),
    /// Append a frame.
    PushFrame(Vec<u8>),
    /// Swap two frames.
    SwapFrames(Index, Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), any::<Index>(), any::<u8>())
            .prop_map(|(f, b, v)| Mutation::SetByte(f, b, v)),
        3 => (any::<Index>(), any::<Index>(), 1u8..=255)
            .prop_map(|(f, b, v)| Mutation::BumpByte(f, b, v)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(f, at)| Mutation::Truncate(f, at)),
        2 => (any::<Index>(), any::<Index>(), any::<u8>())
            .prop_map(|(f, at, v)| Mutation::InsertByte(f, at, v)),
        1 => any::<Index>().prop_map(Mutation::DropFrame),
        1 => any::<Index>().prop_map(Mutation::DuplicateFrame),
        1 => prop::collection::vec(any::<u8>(), 0..16).prop_map(Mutation::PushFrame),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::SwapFrames(a, b)),
    ]
}

fn apply(frames: &mut Vec<Vec<u8>>, m: &Mutation) {
    let n = frames.len();
    match m {
        Mutation::SetByte(f, b, v) | Mutation::BumpByte(f, b, v) if n > 0 => {
            let frame = &mut frames[f.index(n)];
            if !frame.is_empty() {
                let at = b.index(frame.len());
                frame[at] = match m {
                    Mutation::SetByte(..) => *v,
                    _ => frame[at].wrapping_add(*v),
                };
            }
        }
        Mutation::Truncate(f, at) if n > 0 => {
            let frame = &mut frames[f.index(n)];
            let len = at.index(frame.len() + 1);
            frame.truncate(len);
        }
        Mutation::InsertByte(f, at, v) if n > 0 => {
            let frame = &mut frames[f.index(n)];
            let pos = at.index(frame.len() + 1);
            frame.insert(pos, *v);
        }
        Mutation::DropFrame(f) if n > 0 => {
            frames.remove(f.index(n));
        }
        Mutation::DuplicateFrame(f) if n > 0 => {
            let i = f.index(n);
            let copy = frames[i].clone();
            frames.insert(i, copy);
        }
        Mutation::PushFrame(bytes) => frames.push(bytes.clone()),
        Mutation::SwapFrames(a, b) if n > 0 => frames.swap(a.index(n), b.index(n)),
        _ => {}
    }
}

/// A frame that starts with a valid v1 header of any kind byte near the known range (the
/// extension kinds included, and one past them).
fn enveloped_frame() -> impl Strategy<Value = Vec<u8>> {
    (0u8..=0x15, prop::collection::vec(any::<u8>(), 0..80)).prop_map(|(kind, body)| {
        let mut frame = MAGIC.to_vec();
        frame.push(VERSION);
        frame.push(kind);
        frame.extend(body);
        frame
    })
}

fn any_frames() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..48), 0..8)
}

// ---- valid-value strategies ----

fn non_zero() -> impl Strategy<Value = NonZeroU64> {
    prop_oneof![Just(1u64), Just(u64::MAX), 1u64..=1000, any::<u64>()]
        .prop_filter_map("zero", NonZeroU64::new)
}

fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()]
}

/// Strings up to `max_chars` characters of any Unicode, plus ASCII at the byte limits.
fn text(min_chars: usize, max_chars: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::collection::vec(any::<char>(), min_chars..=max_chars)
            .prop_map(|cs| cs.into_iter().collect::<String>()),
        1 => (min_chars..=255usize).prop_map(|n| "x".repeat(n)),
    ]
}

fn name() -> impl Strategy<Value = Name> {
    text(1, 24).prop_filter_map("length", |s| Name::new(s).ok())
}

fn label() -> impl Strategy<Value = Label> {
    text(0, 24).prop_filter_map("length", |s| Label::new(s).ok())
}

fn optional_name() -> impl Strategy<Value = Option<Name>> {
    prop::option::of(name())
}

fn payload() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from)
}

fn memberships() -> impl Strategy<Value = Memberships> {
    prop::collection::vec(
        (select(Role::ALL), name()).prop_map(|(role, channel)| Membership { role, channel }),
        0..4,
    )
    .prop_map(|list| Memberships::new(list).unwrap())
}

fn request() -> impl Strategy<Value = Request> {
    (
        non_zero(),
        prop::option::of(non_zero()),
        select(Semantics::ALL),
        name(),
        name(),
        optional_name(),
        payload(),
    )
        .prop_map(
            |(call_id, ttl_ms, semantics, channel, method, idempotency_key, payload)| Request {
                call_id,
                ttl_ms,
                semantics,
                channel,
                method,
                idempotency_key,
                payload,
            },
        )
}

fn record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (
            select(Lane::ALL),
            name(),
            non_zero(),
            label(),
            optional_name(),
            prop::option::of(non_zero()),
            any_u64(),
            memberships(),
        )
            .prop_map(
                |(lane, rid, generation, security_identity, expect_rid, eg, cg, ms)| {
                    Record::Hello(Hello {
                        lane,
                        rid,
                        generation,
                        security_identity,
                        expect_rid,
                        expect_generation: eg,
                        config_generation: cg,
                        memberships: ms,
                    })
                }
            )
            .boxed(),
        (
            select(Lane::ALL),
            name(),
            non_zero(),
            label(),
            memberships()
        )
            .prop_map(|(lane, rid, generation, security_identity, memberships)| {
                Record::Welcome(Welcome {
                    lane,
                    rid,
                    generation,
                    security_identity,
                    memberships,
                })
            })
            .boxed(),
        (
            select(RejectReason::ALL),
            text(0, 300).prop_filter_map("length", |s| Detail::new(s).ok())
        )
            .prop_map(|(reason, detail)| Record::Reject(Reject { reason, detail }))
            .boxed(),
        non_zero().prop_map(|id| Record::Probe { id }).boxed(),
        non_zero().prop_map(|id| Record::Ack { id }).boxed(),
        (name(), payload())
            .prop_map(|(channel, payload)| Record::Message(Message { channel, payload }))
            .boxed(),
        request().prop_map(Record::Request).boxed(),
        (non_zero(), non_zero(), any_u64())
            .prop_map(|(call_id, generation, connection_id)| {
                Record::Accept(Accept {
                    call_id,
                    generation,
                    connection_id,
                })
            })
            .boxed(),
        (non_zero(), select(ReplyCode::ALL), payload())
            .prop_map(|(call_id, code, payload)| Record::Reply(Reply {
                call_id,
                code,
                payload,
                replayed: false,
            }))
            .boxed(),
        (non_zero(), any_u64(), payload())
            .prop_map(|(call_id, seq, payload)| Record::Item(Item {
                call_id,
                seq,
                payload
            }))
            .boxed(),
        select(CloseReason::ALL)
            .prop_map(|reason| Record::Close { reason })
            .boxed(),
        prop::collection::vec(request(), 2..6)
            .prop_map(|requests| Record::Batch(Batch::new(requests).unwrap()))
            .boxed(),
    ]
}

fn fanout_message() -> impl Strategy<Value = FanoutMessage> {
    prop_oneof![
        1 => Just(FanoutMessage::Beacon),
        4 => (
            prop::collection::vec(any::<u8>(), 1..=40)
                .prop_filter("reserved topic", |t| t.as_slice() != BEACON_TOPIC),
            non_zero(),
            any_u64(),
            payload(),
        )
            .prop_map(|(topic, generation, seq, payload)| FanoutMessage::Publish {
                topic: Bytes::from(topic),
                generation,
                seq,
                payload,
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn decoders_never_panic_on_arbitrary_frames(frames in any_frames()) {
        check_decoders(&frames)?;
    }

    #[test]
    fn decoders_never_panic_behind_a_valid_header(
        first in enveloped_frame(),
        rest in prop::collection::vec(
            prop_oneof![enveloped_frame(), prop::collection::vec(any::<u8>(), 0..16)],
            0..7,
        ),
        topic in prop_oneof![
            Just(BEACON_TOPIC.to_vec()),
            prop::collection::vec(any::<u8>(), 0..8),
        ],
    ) {
        let mut frames = vec![first];
        frames.extend(rest);
        check_decoders(&frames)?;
        // The same frames behind a topic, as a fanout message.
        frames.insert(0, topic);
        check_decoders(&frames)?;
    }

    #[test]
    fn decoders_never_panic_on_mutated_vectors(
        seed in any::<Index>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let seeds = seeds();
        let mut frames = seeds[seed.index(seeds.len())].clone();
        for m in &mutations {
            apply(&mut frames, m);
        }
        check_decoders(&frames)?;
    }

    #[test]
    fn beacon_is_exact(payload in prop::collection::vec(any::<u8>(), 0..6), extra in 0usize..3) {
        // L4/L5: on the exact reserved topic, only the exact beacon is accepted.
        let mut frames = vec![BEACON_TOPIC.to_vec(), payload.clone()];
        frames.extend(std::iter::repeat_n(Vec::new(), extra));
        let result = FanoutMessage::decode(&frames);
        if payload == BEACON_PAYLOAD && extra == 0 {
            prop_assert_eq!(result, Ok(FanoutMessage::Beacon));
        } else {
            prop_assert_eq!(result.unwrap_err().class(), "reserved_topic");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn records_round_trip(record in record()) {
        let frames = record.encode();
        prop_assert_eq!(Record::decode(&frames), Ok(record));
    }

    #[test]
    fn fanout_messages_round_trip(msg in fanout_message()) {
        let frames = msg.encode().unwrap();
        prop_assert_eq!(FanoutMessage::decode(&frames), Ok(msg));
    }
}

/// A valid PACK (WIRE.md §4.18): 2..=64 payloads on one channel.
fn pack() -> impl Strategy<Value = Pack> {
    (name(), prop::collection::vec(payload(), 2..=64))
        .prop_map(|(channel, payloads)| Pack::new(channel, payloads).unwrap())
}

/// A valid PUBPACK (WIRE.md §7.5): 2..=64 payloads on one topic, the last seq within a u64.
fn pubpack() -> impl Strategy<Value = PubPack> {
    (
        prop::collection::vec(any::<u8>(), 1..=40)
            .prop_filter("reserved topic", |t| t.as_slice() != BEACON_TOPIC),
        non_zero(),
        any_u64(),
        prop::collection::vec(payload(), 2..=64),
    )
        .prop_map(|(topic, generation, first, payloads)| {
            let first = first.min(u64::MAX - payloads.len() as u64);
            PubPack::new(Bytes::from(topic), generation, first, payloads).unwrap()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// MISSION X4, W3: a PUBPACK round-trips where `pubpack` is in effect, and any mutation
    /// of one decodes to a canonical message or fails with a documented class, never a
    /// panic.
    #[test]
    fn x4_w3_mutated_pubpacks_are_typed_errors_or_canonical(
        p in pubpack(),
        mutations in prop::collection::vec(mutation(), 0..4),
    ) {
        let decode = |f: &[Vec<u8>]| {
            FanoutMessage::decode_in(f, Capabilities::PUBPACK, |b| Bytes::copy_from_slice(b))
        };
        let msg = FanoutMessage::PubPack(p);
        let mut frames = msg.encode().unwrap();
        prop_assert_eq!(decode(&frames), Ok(msg));
        for m in &mutations {
            apply(&mut frames, m);
        }
        match decode(&frames) {
            Ok(m) => prop_assert_eq!(m.encode().unwrap(), frames, "not canonical"),
            Err(e) => check_error(&e)?,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// MISSION X4, W3: a PACK round-trips where `pack` is in effect, and any mutation of one
    /// decodes to a canonical record or fails with a documented class, never a panic.
    #[test]
    fn x4_w3_mutated_packs_are_typed_errors_or_canonical(
        p in pack(),
        mutations in prop::collection::vec(mutation(), 0..4),
    ) {
        let decode = |f: &[Vec<u8>]| {
            Record::decode_in(f, Capabilities::PACK, |b| Bytes::copy_from_slice(b))
        };
        let record = Record::Pack(p);
        let mut frames = record.encode();
        prop_assert_eq!(decode(&frames), Ok(record));
        for m in &mutations {
            apply(&mut frames, m);
        }
        match decode(&frames) {
            Ok(r) => prop_assert_eq!(r.encode(), frames, "not canonical"),
            Err(e) => check_error(&e)?,
        }
    }
}

/// Call ids for one CALLS or ANSWERS record: mostly within 65535 of each other (the offset
/// form of WIRE.md §4.19 exists), near u64 max too; sometimes anything (it may not).
fn call_ids(n: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<NonZeroU64>> {
    prop_oneof![
        3 => (non_zero(), prop::collection::vec(any::<u16>(), n.clone())).prop_map(
            |(anchor, offsets)| {
                let a = anchor.get();
                offsets
                    .into_iter()
                    .map(|o| {
                        let id = a.checked_add(u64::from(o)).unwrap_or_else(|| a - u64::from(o));
                        NonZeroU64::new(id).unwrap_or(NonZeroU64::MIN)
                    })
                    .collect()
            }
        ),
        1 => prop::collection::vec(non_zero(), n),
    ]
}

/// A valid CALLS (WIRE.md §4.14): 2..=8 calls sharing channel, method, ttl and semantics.
fn calls() -> impl Strategy<Value = Calls> {
    (
        call_ids(2..=8),
        prop::option::of(non_zero()),
        select(Semantics::ALL),
        name(),
        name(),
        prop::collection::vec((optional_name(), payload()), 8),
    )
        .prop_map(|(ids, ttl_ms, semantics, channel, method, rest)| {
            let requests = ids
                .into_iter()
                .zip(rest)
                .map(|(call_id, (idempotency_key, payload))| Request {
                    call_id,
                    ttl_ms,
                    semantics,
                    channel: channel.clone(),
                    method: method.clone(),
                    idempotency_key,
                    payload,
                })
                .collect();
            Calls::new(requests).unwrap()
        })
}

/// One ANSWERS entry's answer, the replayed mark included.
fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        Just(Answer::Accept),
        (select(ReplyCode::ALL), payload(), any::<bool>())
            .prop_map(|(code, p, replayed)| Answer::Reply(code, p, replayed)),
        (select(ReplyCode::ALL), payload(), any::<bool>())
            .prop_map(|(code, p, replayed)| Answer::AcceptReply(code, p, replayed)),
    ]
}

/// A valid ANSWERS (WIRE.md §4.16): 1..=8 entries standing for two records or more.
fn answers() -> impl Strategy<Value = Answers> {
    (
        non_zero(),
        any_u64(),
        call_ids(1..=8),
        prop::collection::vec(answer(), 8),
    )
        .prop_filter_map("a lone record", |(generation, conn, ids, list)| {
            let entries = ids.into_iter().zip(list).collect();
            Answers::new(generation, conn, entries).ok()
        })
}

/// Whether `ids` are within 65535 of their smallest: the offset form exists.
fn within_u16(ids: impl Iterator<Item = NonZeroU64> + Clone) -> bool {
    let (min, max) = (ids.clone().min().unwrap(), ids.max().unwrap());
    max.get() - min.get() <= u64::from(u16::MAX)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// MISSION X4, W3: a CALLS or ANSWERS in the offset form (CALLS16, ANSWERS16, WIRE.md
    /// §4.19) where its ids are within 65535 of each other, the full form otherwise; it
    /// round-trips where `ids16` is in effect, is 6 bytes per id less 8 smaller than the full
    /// form, is an unknown kind where `ids16` is not; and any mutation of it decodes to a
    /// canonical record or fails with a documented class, never a panic.
    #[test]
    fn x4_w3_mutated_calls16_and_answers16_are_typed_errors_or_canonical(
        record in prop_oneof![
            calls().prop_map(Record::Calls),
            answers().prop_map(Record::Answers),
        ],
        mutations in prop::collection::vec(mutation(), 0..4),
    ) {
        let long = Capabilities::CALLS
            .union(Capabilities::ANSWERS)
            .union(Capabilities::REPLAYED);
        let caps = long.union(Capabilities::IDS16);
        let decode = |f: &[Vec<u8>], caps| {
            Record::decode_in(f, caps, |b| Bytes::copy_from_slice(b))
        };
        let full = record.encode();
        let (short, ids, fits) = match record {
            Record::Calls(c) => {
                let ids: Vec<_> = c.requests().iter().map(|r| r.call_id).collect();
                let fits = within_u16(ids.iter().copied());
                let c = c.with_offsets();
                prop_assert_eq!(c.form() == IdForm::Offsets, fits);
                prop_assert_eq!(c.kind() == Kind::Calls16, fits);
                (Record::Calls(c), ids.len(), fits)
            }
            Record::Answers(a) => {
                let ids: Vec<_> = a.entries().iter().map(|(id, _)| *id).collect();
                let fits = within_u16(ids.iter().copied());
                let a = a.with_offsets();
                prop_assert_eq!(a.form() == IdForm::Offsets, fits);
                prop_assert_eq!(a.kind() == Kind::Answers16, fits);
                (Record::Answers(a), ids.len(), fits)
            }
            other => unreachable!("{other:?}"),
        };
        let mut frames = short.encode();
        prop_assert_eq!(decode(&frames, caps), Ok(short.clone()));
        if fits {
            prop_assert_eq!(full[0].len() + 8, frames[0].len() + 6 * ids);
            prop_assert_eq!(&full[1..], &frames[1..]);
            let without = decode(&frames, long).unwrap_err();
            prop_assert_eq!(without.class(), "unknown_kind");
        } else {
            prop_assert_eq!(&full, &frames);
        }
        for m in &mutations {
            apply(&mut frames, m);
        }
        match decode(&frames, caps) {
            Ok(r) => prop_assert_eq!(r.encode(), frames, "not canonical"),
            Err(e) => check_error(&e)?,
        }
    }
}
