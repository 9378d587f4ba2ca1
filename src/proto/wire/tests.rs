//! Byte-exact parse/emit tests against hand-written hex (smoltcp style), and one `rejects_*`
//! test per error class (rustls style). MISSION W1, W3, L3, L4.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::num::NonZeroU64;

use bytes::Bytes;

use super::*;

/// Hex with spaces allowed, for readable field boundaries.
fn h(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).unwrap()
}

fn nz(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).unwrap()
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn decode(frames: &[Vec<u8>]) -> Result<Record, WireError> {
    Record::decode(frames)
}

fn class(frames: &[Vec<u8>]) -> &'static str {
    decode(frames).unwrap_err().class()
}

fn fanout_class(frames: &[Vec<u8>]) -> &'static str {
    FanoutMessage::decode(frames).unwrap_err().class()
}

// One valid example per kind: (frames, record). Field boundaries are spaced in the hex.

fn hello() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![h("5a4d0101 01 0006 6e6f64652d61 0102030405060708 0000 \
         0006 6e6f64652d62 0000000000000000 0000000000000007 \
         0001 01 0006 6f7264657273")];
    let record = Record::Hello(Hello {
        lane: Lane::Application,
        rid: name("node-a"),
        generation: nz(0x0102_0304_0506_0708),
        security_identity: Label::default(),
        expect_rid: Some(name("node-b")),
        expect_generation: None,
        config_generation: 7,
        memberships: Memberships::new(vec![Membership {
            role: Role::Server,
            channel: name("orders"),
        }])
        .unwrap(),
    });
    (frames, record)
}

fn welcome() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![h(
        "5a4d0102 02 0006 6e6f64652d62 00000000000000ff 0003 737663 0000",
    )];
    let record = Record::Welcome(Welcome {
        lane: Lane::Completion,
        rid: name("node-b"),
        generation: nz(0xff),
        security_identity: Label::new("svc").unwrap(),
        memberships: Memberships::default(),
    });
    (frames, record)
}

fn reject() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![h("5a4d0103 02 0003 726964")];
    let record = Record::Reject(Reject {
        reason: RejectReason::IdentityMismatch,
        detail: Detail::new("rid").unwrap(),
    });
    (frames, record)
}

fn probe() -> (Vec<Vec<u8>>, Record) {
    (
        vec![h("5a4d0104 0000000000000001")],
        Record::Probe { id: nz(1) },
    )
}

fn ack() -> (Vec<Vec<u8>>, Record) {
    (
        vec![h("5a4d0105 00000000deadbeef")],
        Record::Ack {
            id: nz(0xdead_beef),
        },
    )
}

fn message() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![h("5a4d0106 0006 6f7264657273"), h("0102")];
    let record = Record::Message(Message {
        channel: name("orders"),
        payload: Bytes::from_static(&[1, 2]),
    });
    (frames, record)
}

fn request() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![
        h("5a4d0107 0000000000000005 00000000000005dc 03 \
           0004 70756d70 0008 64697370656e7365 0004 776f2d31"),
        h("c0"),
    ];
    let record = Record::Request(Request {
        call_id: nz(5),
        ttl_ms: Some(nz(1500)),
        semantics: Semantics::NonRepeatableCommand,
        channel: name("pump"),
        method: name("dispense"),
        idempotency_key: Some(name("wo-1")),
        payload: Bytes::from_static(&[0xc0]),
    });
    (frames, record)
}

fn accept() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![h(
        "5a4d0108 0000000000000005 0102030405060708 000000000000002a",
    )];
    let record = Record::Accept(Accept {
        call_id: nz(5),
        generation: nz(0x0102_0304_0506_0708),
        connection_id: 42,
    });
    (frames, record)
}

fn reply() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![h("5a4d0109 0000000000000005 00"), h("c3")];
    let record = Record::Reply(Reply {
        call_id: nz(5),
        code: ReplyCode::Ok,
        payload: Bytes::from_static(&[0xc3]),
        replayed: false,
    });
    (frames, record)
}

fn item() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![h("5a4d010a 0000000000000005 0000000000000000"), h("01")];
    let record = Record::Item(Item {
        call_id: nz(5),
        seq: 0,
        payload: Bytes::from_static(&[1]),
    });
    (frames, record)
}

fn close() -> (Vec<Vec<u8>>, Record) {
    (
        vec![h("5a4d010b 01")],
        Record::Close {
            reason: CloseReason::Shutdown,
        },
    )
}

fn batch_request(call_id: u64, semantics: Semantics, method: &str) -> Request {
    Request {
        call_id: nz(call_id),
        ttl_ms: None,
        semantics,
        channel: name("pump"),
        method: name(method),
        idempotency_key: None,
        payload: Bytes::new(),
    }
}

fn batch() -> (Vec<Vec<u8>>, Record) {
    let frames = vec![
        h("5a4d010c 0002"),
        h(
            "5a4d0107 0000000000000001 0000000000000000 01 0004 70756d70 \
           0008 7072657373757265 0000",
        ),
        vec![],
        h(
            "5a4d0107 0000000000000002 0000000000000000 00 0004 70756d70 \
           0006 737461747573 0000",
        ),
        vec![],
    ];
    let record = Record::Batch(
        Batch::new(vec![
            batch_request(1, Semantics::Query, "pressure"),
            batch_request(2, Semantics::Undeclared, "status"),
        ])
        .unwrap(),
    );
    (frames, record)
}

/// Every example above, one per non-fanout kind.
fn examples() -> Vec<(Vec<Vec<u8>>, Record)> {
    vec![
        hello(),
        welcome(),
        reject(),
        probe(),
        ack(),
        message(),
        request(),
        accept(),
        reply(),
        item(),
        close(),
        batch(),
    ]
}

fn publish() -> (Vec<Vec<u8>>, FanoutMessage) {
    let frames = vec![
        h("74"),
        h("5a4d010d 0000000000000001 0000000000000009"),
        h("68656c6c6f"),
    ];
    let msg = FanoutMessage::Publish {
        topic: Bytes::from_static(b"t"),
        generation: nz(1),
        seq: 9,
        payload: Bytes::from_static(b"hello"),
    };
    (frames, msg)
}

fn beacon_frames() -> Vec<Vec<u8>> {
    vec![h("015a4c4631"), h("5a460101")]
}

macro_rules! parse_emit {
    ($($parse:ident, $emit:ident, $example:ident;)+) => {$(
        #[test]
        fn $parse() {
            let (frames, record) = $example();
            assert_eq!(decode(&frames).unwrap(), record);
        }

        #[test]
        fn $emit() {
            let (frames, record) = $example();
            assert_eq!(record.encode(), frames);
        }
    )+};
}

parse_emit! {
    test_parse_hello, test_emit_hello, hello;
    test_parse_welcome, test_emit_welcome, welcome;
    test_parse_reject, test_emit_reject, reject;
    test_parse_probe, test_emit_probe, probe;
    test_parse_ack, test_emit_ack, ack;
    test_parse_message, test_emit_message, message;
    test_parse_request, test_emit_request, request;
    test_parse_accept, test_emit_accept, accept;
    test_parse_reply, test_emit_reply, reply;
    test_parse_item, test_emit_item, item;
    test_parse_close, test_emit_close, close;
    test_parse_batch, test_emit_batch, batch;
}

#[test]
fn test_parse_publish() {
    let (frames, msg) = publish();
    assert_eq!(FanoutMessage::decode(&frames).unwrap(), msg);
}

#[test]
fn test_emit_publish() {
    let (frames, msg) = publish();
    assert_eq!(msg.encode().unwrap(), frames);
}

/// The envelope-only encoders emit exactly frame 0 of a MESSAGE and frame 1 of a PUBLISH.
#[test]
fn test_emit_envelopes_alone() {
    let (frames, record) = message();
    let Record::Message(m) = record else {
        panic!("not a message")
    };
    assert_eq!(Message::encode_envelope(&m.channel), frames[0]);
    let (frames, _) = publish();
    assert_eq!(encode_publish_envelope(nz(1), 9).to_vec(), frames[1]);
    assert_eq!(
        encode_publish_envelope(nz(0x0102_0304_0506_0708), u64::MAX).to_vec(),
        h("5a4d010d 0102030405060708 ffffffffffffffff")
    );
}

/// `decode_with` accepts exactly what `decode` accepts, decodes it to the same value, and
/// takes an accepted record's payloads from the caller's frames (shared, not copied).
#[test]
fn decode_with_shares_payloads_and_agrees_with_decode() {
    for (frames, record) in examples() {
        let shared: Vec<Bytes> = frames.iter().cloned().map(Bytes::from).collect();
        let got = Record::decode_with(&shared, Bytes::clone).unwrap();
        assert_eq!(got, record);
        let payload = match &got {
            Record::Message(m) => Some(&m.payload),
            Record::Reply(r) => Some(&r.payload),
            Record::Item(i) => Some(&i.payload),
            _ => None,
        };
        if let (Some(p), Some(last)) = (payload, shared.last()) {
            assert_eq!(p.as_ptr(), last.as_ptr(), "payload was copied");
        }
    }
    let (frames, msg) = publish();
    let shared: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
    let got = FanoutMessage::decode_with(&shared, Bytes::clone).unwrap();
    assert_eq!(got, msg);
    let FanoutMessage::Publish { payload, .. } = got else {
        panic!("not a publish");
    };
    assert_eq!(payload.as_ptr(), shared[2].as_ptr(), "payload was copied");
}

/// A rejected record never has its payload taken, and is rejected with `decode`'s error.
#[test]
fn rejects_with_decode_with_as_with_decode() {
    let (mut frames, _) = message();
    frames[0][3] = 0x7f; // unknown kind
    let taken = std::cell::Cell::new(0);
    let take = |f: &Vec<u8>| {
        taken.set(taken.get() + 1);
        Bytes::copy_from_slice(f)
    };
    assert_eq!(
        Record::decode_with(&frames, take).unwrap_err(),
        decode(&frames).unwrap_err()
    );
    let (mut frames, _) = publish();
    frames.push(vec![1]); // a fourth frame
    assert_eq!(
        FanoutMessage::decode_with(&frames, take).unwrap_err(),
        FanoutMessage::decode(&frames).unwrap_err()
    );
    assert_eq!(taken.get(), 0);
}

#[test]
fn test_parse_beacon() {
    assert_eq!(
        FanoutMessage::decode(&beacon_frames()).unwrap(),
        FanoutMessage::Beacon
    );
}

#[test]
fn test_emit_beacon() {
    assert_eq!(FanoutMessage::Beacon.encode().unwrap(), beacon_frames());
    assert_eq!(
        encode_beacon().map(<[u8]>::to_vec).to_vec(),
        beacon_frames()
    );
}

#[test]
fn examples_cover_every_record_kind() {
    let kinds: Vec<Kind> = examples().iter().map(|(_, r)| r.kind()).collect();
    for kind in Kind::ALL {
        assert!(
            kinds.contains(&kind) || kind == Kind::Publish,
            "{kind} has no example"
        );
    }
}

#[test]
fn kind_all_lists_every_decodable_kind_byte() {
    let decodable: Vec<u8> = (0..=255u8).filter(|b| Kind::try_from(*b).is_ok()).collect();
    let all: Vec<u8> = Kind::ALL.iter().map(|k| u8::from(*k)).collect();
    assert_eq!(decodable, all);
    assert_eq!(all, (1..=13).collect::<Vec<u8>>());
}

#[test]
fn test_emit_probe_and_ack_without_allocating() {
    // L3: 12 bytes, no business payload.
    assert_eq!(encode_probe(nz(1)).to_vec(), probe().0[0]);
    assert_eq!(encode_ack(nz(0xdead_beef)).to_vec(), ack().0[0]);
    assert_eq!(encode_probe(nz(u64::MAX)).len(), PROBE_LEN);
}

#[test]
fn test_peek_kind() {
    for (frames, record) in examples() {
        assert_eq!(peek_kind(&frames[0]).unwrap(), record.kind());
    }
    assert_eq!(peek_kind(&publish().0[1]).unwrap(), Kind::Publish);
    // The header alone is enough: the body is not looked at.
    assert_eq!(peek_kind(&h("5a4d0104")).unwrap(), Kind::Probe);
    assert_eq!(peek_kind(&h("5a4d01")).unwrap_err().class(), "truncated");
}

#[test]
fn test_parse_accepts_reserved_topic_prefix() {
    // L4: topics that only share a prefix with the beacon topic are application topics.
    for topic in ["015a4c46", "015a4c463100", "015a4c4632", "01"] {
        let mut frames = publish().0;
        frames[0] = h(topic);
        let msg = FanoutMessage::decode(&frames).unwrap();
        assert_eq!(msg.encode().unwrap(), frames);
    }
}

#[test]
fn test_parse_large_batch() {
    // The 64/256 batch limits are call-layer policy, not codec rules.
    let requests: Vec<Request> = (1..=300)
        .map(|i| batch_request(i, Semantics::Query, "pressure"))
        .collect();
    let record = Record::Batch(Batch::new(requests).unwrap());
    let frames = record.encode();
    assert_eq!(frames.len(), 601);
    assert_eq!(decode(&frames).unwrap(), record);
}

#[test]
fn test_parse_accepts_routing_free_frames_of_any_container() {
    let (frames, record) = probe();
    let slices: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    assert_eq!(Record::decode(&slices).unwrap(), record);
}

// ---- frame_count ----

#[test]
fn rejects_empty_message() {
    assert_eq!(class(&[]), "frame_count");
    assert_eq!(fanout_class(&[]), "frame_count");
}

#[test]
fn rejects_wrong_frame_count() {
    for (frames, record) in examples() {
        let mut more = frames.clone();
        more.push(vec![]);
        assert_eq!(class(&more), "frame_count", "{} + 1 frame", record.kind());
        if frames.len() > 1 {
            let fewer = &frames[..frames.len() - 1];
            assert_eq!(class(fewer), "frame_count", "{} - 1 frame", record.kind());
        }
    }
    let (frames, _) = publish();
    assert_eq!(fanout_class(&frames[..1]), "frame_count");
    assert_eq!(fanout_class(&frames[..2]), "frame_count");
    let mut more = frames.clone();
    more.push(vec![]);
    assert_eq!(fanout_class(&more), "frame_count");
}

#[test]
fn rejects_batch_frame_count_not_matching_count() {
    let (mut frames, _) = batch();
    frames[0] = h("5a4d010c 0003");
    let err = decode(&frames).unwrap_err();
    assert_eq!(
        err,
        WireError::FrameCount {
            kind: Some(Kind::Batch),
            expected: 7,
            found: 5
        }
    );
}

// ---- truncated ----

#[test]
fn rejects_short_header() {
    for bad in ["", "5a", "5a4d", "5a4d01"] {
        assert_eq!(class(&[h(bad)]), "truncated", "{bad}");
    }
    // Shorter than 4 bytes is `truncated` even when the magic is already wrong.
    assert_eq!(class(&[h("0000")]), "truncated");
}

#[test]
fn rejects_truncated_body() {
    // Every strict prefix of every envelope lacks some field.
    for (frames, record) in examples() {
        for cut in 0..frames[0].len() {
            let mut short = frames.clone();
            short[0].truncate(cut);
            let err = decode(&short).unwrap_err();
            assert_eq!(err.class(), "truncated", "{} cut at {cut}", record.kind());
        }
    }
    let (frames, _) = publish();
    for cut in 0..frames[1].len() {
        let mut short = frames.clone();
        short[1].truncate(cut);
        assert_eq!(fanout_class(&short), "truncated");
    }
}

#[test]
fn rejects_memberships_count_beyond_input_without_allocating() {
    // 65535 entries announced, none present: `truncated`, not a large allocation.
    let frames = [h("5a4d0102 01 0001 61 0000000000000001 0000 ffff")];
    assert_eq!(
        decode(&frames).unwrap_err(),
        WireError::Truncated {
            kind: Some(Kind::Welcome),
            field: "role"
        }
    );
}

// ---- bad_magic, unsupported_version, unknown_kind ----

#[test]
fn rejects_bad_magic() {
    assert_eq!(
        decode(&[h("5a4e0104 0000000000000001")]).unwrap_err(),
        WireError::BadMagic {
            found: [0x5a, 0x4e]
        }
    );
    assert_eq!(class(&[h("00000000")]), "bad_magic");
    let mut frames = publish().0;
    frames[1][0] = 0;
    assert_eq!(fanout_class(&frames), "bad_magic");
}

#[test]
fn rejects_unsupported_version() {
    // The version is reported; nothing after it is read (a future version may change it all).
    for version in [0u8, 2, 0xff] {
        let mut frame = h("5a4d0004");
        frame[2] = version;
        assert_eq!(
            decode(&[frame.clone()]).unwrap_err(),
            WireError::UnsupportedVersion { version }
        );
        assert_eq!(
            decode(&[frame.clone(), vec![1, 2, 3], vec![]]).unwrap_err(),
            WireError::UnsupportedVersion { version }
        );
        assert_eq!(fanout_class(&[h("74"), frame]), "unsupported_version");
    }
}

#[test]
fn rejects_unknown_kind() {
    for kind in [0x00u8, 0x0e, 0x7f, 0xff] {
        let frame = vec![0x5a, 0x4d, 0x01, kind, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(
            decode(std::slice::from_ref(&frame)).unwrap_err(),
            WireError::UnknownKind { kind }
        );
        assert_eq!(fanout_class(&[h("74"), frame, vec![]]), "unknown_kind");
    }
}

// ---- trailing_bytes ----

#[test]
fn rejects_trailing_bytes() {
    for (frames, record) in examples() {
        let mut long = frames.clone();
        long[0].push(0);
        assert_eq!(
            decode(&long).unwrap_err(),
            WireError::TrailingBytes {
                kind: record.kind(),
                extra: 1
            }
        );
    }
    let (mut frames, _) = publish();
    frames[1].extend_from_slice(&[0, 0]);
    assert_eq!(fanout_class(&frames), "trailing_bytes");
}

// ---- invalid_field ----

fn assert_invalid(frames: &[Vec<u8>], kind: Kind, field: &str) {
    match decode(frames).unwrap_err() {
        WireError::InvalidField {
            kind: Some(k),
            field: f,
            ..
        } if k == kind && f == field => {}
        other => panic!("expected invalid {kind}.{field}, got {other:?}"),
    }
}

#[test]
fn rejects_zero_ids() {
    assert_invalid(&[h("5a4d0104 0000000000000000")], Kind::Probe, "id");
    assert_invalid(&[h("5a4d0105 0000000000000000")], Kind::Ack, "id");
    assert_invalid(
        &[h(
            "5a4d0108 0000000000000000 0000000000000001 0000000000000000",
        )],
        Kind::Accept,
        "call_id",
    );
    assert_invalid(
        &[h(
            "5a4d0108 0000000000000001 0000000000000000 0000000000000000",
        )],
        Kind::Accept,
        "generation",
    );
    assert_invalid(
        &[h("5a4d0109 0000000000000000 00"), vec![]],
        Kind::Reply,
        "call_id",
    );
    assert_invalid(
        &[h("5a4d010a 0000000000000000 0000000000000000"), vec![]],
        Kind::Item,
        "call_id",
    );
    let (mut frames, _) = request();
    frames[0][4..12].fill(0);
    assert_invalid(&frames, Kind::Request, "call_id");
    let (mut frames, _) = hello();
    frames[0][13..21].fill(0);
    assert_invalid(&frames, Kind::Hello, "generation");
    let (mut frames, _) = welcome();
    frames[0][13..21].fill(0);
    assert_invalid(&frames, Kind::Welcome, "generation");
    let (mut frames, _) = publish();
    frames[1][4..12].fill(0);
    assert_eq!(
        FanoutMessage::decode(&frames).unwrap_err(),
        WireError::InvalidField {
            kind: Some(Kind::Publish),
            field: "generation",
            problem: "must be non-zero"
        }
    );
}

#[test]
fn rejects_unknown_enum_values() {
    assert_invalid(&[h("5a4d010b 00")], Kind::Close, "reason");
    assert_invalid(&[h("5a4d010b 07")], Kind::Close, "reason");
    assert_invalid(&[h("5a4d0103 00 0000")], Kind::Reject, "reason");
    assert_invalid(&[h("5a4d0103 0a 0000")], Kind::Reject, "reason");
    assert_invalid(
        &[h("5a4d0109 0000000000000001 0f"), vec![]],
        Kind::Reply,
        "code",
    );
    let (mut frames, _) = request();
    frames[0][20] = 4;
    assert_invalid(&frames, Kind::Request, "semantics");
    let (mut frames, _) = hello();
    frames[0][4] = 0;
    assert_invalid(&frames, Kind::Hello, "lane");
    let (mut frames, _) = welcome();
    frames[0][4] = 4;
    assert_invalid(&frames, Kind::Welcome, "lane");
    let (mut frames, _) = hello();
    let role_at = frames[0].len() - 9;
    frames[0][role_at] = 3;
    assert_invalid(&frames, Kind::Hello, "role");
}

#[test]
fn rejects_bad_utf8() {
    // "node-a" with its last byte replaced by a lone continuation byte.
    let (mut frames, _) = hello();
    frames[0][12] = 0x80;
    assert_invalid(&frames, Kind::Hello, "rid");
    let mut frames = message().0;
    frames[0][6] = 0xff;
    assert_invalid(&frames, Kind::Message, "channel");
    assert_invalid(&[h("5a4d0103 08 0002 c328")], Kind::Reject, "detail");
}

#[test]
fn rejects_string_length_out_of_range() {
    assert_invalid(&[h("5a4d0106 0000"), vec![]], Kind::Message, "channel");
    let mut long = h("5a4d0106 0100");
    long.extend(std::iter::repeat_n(b'a', 256));
    assert_invalid(&[long, vec![]], Kind::Message, "channel");
    let mut detail = h("5a4d0103 08 0401");
    detail.extend(std::iter::repeat_n(b'a', 1025));
    assert_invalid(&[detail], Kind::Reject, "detail");
    // 1024 bytes of detail is the maximum and fine.
    let mut detail = h("5a4d0103 08 0400");
    detail.extend(std::iter::repeat_n(b'a', 1024));
    assert!(decode(&[detail]).is_ok());
    // Empty method.
    let frames = [
        h("5a4d0107 0000000000000001 0000000000000000 00 0004 70756d70 0000 0000"),
        vec![],
    ];
    assert_invalid(&frames, Kind::Request, "method");
}

#[test]
fn rejects_too_many_memberships() {
    let mut frame = h("5a4d0102 01 0001 61 0000000000000001 0000 0401");
    for _ in 0..1025 {
        frame.extend(h("01 0001 63"));
    }
    assert_invalid(&[frame.clone()], Kind::Welcome, "memberships");
    // The count is judged before the entries (values in wire order).
    let last_role = frame.len() - 4;
    frame[last_role] = 0;
    assert_invalid(&[frame], Kind::Welcome, "memberships");
}

#[test]
fn rejects_batch_count_below_two() {
    assert_invalid(&[h("5a4d010c 0000")], Kind::Batch, "count");
    let (frames, _) = request();
    let mut one = vec![h("5a4d010c 0001")];
    one.extend(frames);
    assert_invalid(&one, Kind::Batch, "count");
}

#[test]
fn rejects_non_request_in_batch() {
    let (mut frames, _) = batch();
    frames[3] = message().0[0].clone();
    assert_invalid(&frames, Kind::Batch, "requests");
}

#[test]
fn rejects_invalid_inner_request_with_request_context() {
    let (mut frames, _) = batch();
    frames[3][4..12].fill(0);
    assert_invalid(&frames, Kind::Request, "call_id");
    let (mut frames, _) = batch();
    frames[1].push(0);
    assert_eq!(class(&frames), "trailing_bytes");
    let (mut frames, _) = batch();
    frames[3][2] = 2;
    assert_eq!(class(&frames), "unsupported_version");
}

#[test]
fn rejects_publish_outside_fanout() {
    let (frames, _) = publish();
    assert_invalid(&frames[1..], Kind::Publish, "kind");
}

#[test]
fn rejects_non_publish_in_fanout() {
    let frames = [h("74"), probe().0[0].clone(), vec![]];
    assert_eq!(
        FanoutMessage::decode(&frames).unwrap_err(),
        WireError::InvalidField {
            kind: Some(Kind::Probe),
            field: "kind",
            problem: "only PUBLISH (and PUBPACK) is valid in frame 1 of a fanout message"
        }
    );
}

#[test]
fn rejects_bad_fanout_topic_length() {
    let (mut frames, _) = publish();
    frames[0] = vec![];
    assert_eq!(fanout_class(&frames), "invalid_field");
    frames[0] = vec![b't'; 256];
    assert_eq!(fanout_class(&frames), "invalid_field");
    frames[0] = vec![b't'; 255];
    assert!(FanoutMessage::decode(&frames).is_ok());
}

#[test]
fn rejects_encoding_reserved_topic() {
    // L4: publishing on the exact beacon topic is an argument error.
    let msg = FanoutMessage::Publish {
        topic: Bytes::from_static(&BEACON_TOPIC),
        generation: nz(1),
        seq: 0,
        payload: Bytes::new(),
    };
    assert_eq!(
        msg.encode().unwrap_err(),
        WireError::InvalidField {
            kind: Some(Kind::Publish),
            field: "topic",
            problem: "the beacon topic is reserved"
        }
    );
    let empty = FanoutMessage::Publish {
        topic: Bytes::new(),
        generation: nz(1),
        seq: 0,
        payload: Bytes::new(),
    };
    assert_eq!(empty.encode().unwrap_err().class(), "invalid_field");
}

#[test]
fn rejects_out_of_range_values_at_construction() {
    assert_eq!(Name::new("").unwrap_err().class(), "invalid_field");
    assert_eq!(
        Name::new("a".repeat(256)).unwrap_err().class(),
        "invalid_field"
    );
    assert!(Name::new("a".repeat(255)).is_ok());
    assert!(Label::new("").is_ok());
    assert_eq!(
        Detail::new("a".repeat(1025)).unwrap_err().class(),
        "invalid_field"
    );
    assert_eq!(
        Memberships::new(vec![
            Membership {
                role: Role::Server,
                channel: name("c")
            };
            1025
        ])
        .unwrap_err()
        .class(),
        "invalid_field"
    );
    assert_eq!(Batch::new(vec![]).unwrap_err().class(), "invalid_field");
    let (_, Record::Request(one)) = request() else {
        unreachable!()
    };
    assert_eq!(Batch::new(vec![one]).unwrap_err().class(), "invalid_field");
    assert_eq!(Lane::try_from(0).unwrap_err().class(), "invalid_field");
    assert_eq!(Kind::try_from(14).unwrap_err().class(), "unknown_kind");
}

// ---- reserved_topic ----

#[test]
fn rejects_reserved_topic_with_wrong_payload() {
    for payload in ["5a460102", "5a4601", "5a46010100", ""] {
        let frames = [h("015a4c4631"), h(payload)];
        assert_eq!(fanout_class(&frames), "reserved_topic", "{payload}");
    }
}

#[test]
fn rejects_reserved_topic_with_wrong_frame_count() {
    assert_eq!(fanout_class(&[h("015a4c4631")]), "reserved_topic");
    let (mut frames, _) = publish();
    frames[0] = BEACON_TOPIC.to_vec();
    assert_eq!(fanout_class(&frames), "reserved_topic");
    let mut four = beacon_frames();
    four.extend(beacon_frames());
    assert_eq!(fanout_class(&four), "reserved_topic");
}

// ---- check order (WIRE.md §6) ----

#[test]
fn rejects_in_the_specified_order() {
    // Structure before values: trailing bytes win over a zero id.
    assert_eq!(
        class(&[h("5a4d0104 0000000000000000 00")]),
        "trailing_bytes"
    );
    // Body before frame count: a truncated probe in two frames is `truncated`.
    assert_eq!(class(&[h("5a4d0104 00"), vec![]]), "truncated");
    // Frame count before values: a zero-id probe in two frames is `frame_count`.
    assert_eq!(
        class(&[h("5a4d0104 0000000000000000"), vec![]]),
        "frame_count"
    );
    // Magic before version before kind.
    assert_eq!(class(&[h("00000000")]), "bad_magic");
    assert_eq!(class(&[h("5a4d02ff")]), "unsupported_version");
    // Values in wire order: the first bad field is reported.
    assert_invalid(
        &[h(
            "5a4d0108 0000000000000000 0000000000000000 0000000000000000",
        )],
        Kind::Accept,
        "call_id",
    );
    // A fanout topic is checked after the envelope's structure, before its values.
    assert_eq!(
        fanout_class(&[vec![], h("5a4d010d 00"), vec![]]),
        "truncated"
    );
    assert_eq!(
        FanoutMessage::decode(&[
            vec![],
            h("5a4d010d 0000000000000000 0000000000000000"),
            vec![]
        ])
        .unwrap_err(),
        WireError::InvalidField {
            kind: Some(Kind::Publish),
            field: "topic",
            problem: "length out of range"
        }
    );
}

#[test]
fn error_classes_are_the_documented_strings() {
    let all = [
        WireError::FrameCount {
            kind: None,
            expected: 1,
            found: 0,
        },
        WireError::Truncated {
            kind: None,
            field: "header",
        },
        WireError::BadMagic { found: [0, 0] },
        WireError::UnsupportedVersion { version: 2 },
        WireError::UnknownKind { kind: 0 },
        WireError::TrailingBytes {
            kind: Kind::Probe,
            extra: 1,
        },
        WireError::invalid(None, "f", "p"),
        WireError::ReservedTopic { problem: "p" },
    ];
    let classes: Vec<&str> = all.iter().map(WireError::class).collect();
    assert_eq!(
        classes,
        [
            "frame_count",
            "truncated",
            "bad_magic",
            "unsupported_version",
            "unknown_kind",
            "trailing_bytes",
            "invalid_field",
            "reserved_topic"
        ]
    );
    // Messages name the context when there is one.
    assert_eq!(all[5].to_string(), "probe: 1 byte(s) after the last field");
    assert_eq!(all[0].to_string(), "expected 1 frame(s), found 0");
    assert_eq!(
        Name::new("").unwrap_err().to_string(),
        "invalid field `string`: length out of range"
    );
    assert_eq!(
        decode(&[h("5a4d0104 0000000000000000")])
            .unwrap_err()
            .to_string(),
        "probe: invalid field `id`: must be non-zero"
    );
}
