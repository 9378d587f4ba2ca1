//! WIRE.md's hex examples, and the values their text describes: the table
//! `w1_every_wire_md_hex_example_decodes_and_encodes_exactly` checks both ways.

use super::*;

/// One `hex NAME` block of WIRE.md: its frames.
///
/// A block is one frame of hex byte pairs (whitespace anywhere), or frames introduced by
/// `frame N:` lines (continuation lines belong to the frame above; `(empty)` is an empty
/// frame).
pub(super) fn wire_examples() -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut lines = WIRE_MD.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("```hex ") else {
            continue;
        };
        let name = name.trim().to_owned();
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for l in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            let body = match l.strip_prefix("frame ") {
                Some(rest) => {
                    let (n, rest) = rest
                        .split_once(':')
                        .unwrap_or_else(|| panic!("{name}: `frame N:` expected in {l:?}"));
                    assert_eq!(n.parse::<usize>().ok(), Some(frames.len()), "{name}: {l:?}");
                    frames.push(Vec::new());
                    rest
                }
                None => {
                    if frames.is_empty() {
                        frames.push(Vec::new());
                    }
                    l
                }
            };
            let body = body.trim();
            if body == "(empty)" {
                continue;
            }
            let frame = frames.last_mut().expect("a frame");
            for token in body.split_whitespace() {
                frame.push(hex_byte(token).unwrap_or_else(|| {
                    panic!("{name}: {token:?} is not an upper-case hex byte in {l:?}")
                }));
            }
        }
        assert!(
            out.insert(name.clone(), frames).is_none(),
            "two examples named {name}"
        );
    }
    out
}

/// `token` as a byte, if it is two upper-case hex digits.
pub(super) fn hex_byte(token: &str) -> Option<u8> {
    let upper = token.len() == 2
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b));
    upper.then(|| u8::from_str_radix(token, 16).ok()).flatten()
}

/// What an example must be.
pub(super) enum Expected {
    /// A non-fanout record (WIRE.md §4).
    Record(Record),
    /// A fanout message (WIRE.md §7).
    Fanout(FanoutMessage),
    /// One frame of exactly these bytes (Appendix A's MessagePack values).
    Bytes(Bytes),
}

pub(super) fn nz(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).expect("non-zero")
}

pub(super) fn name(s: &str) -> Name {
    Name::new(s).expect("name")
}

pub(super) fn memberships(list: &[(Role, &str)]) -> Memberships {
    Memberships::new(
        list.iter()
            .map(|(role, channel)| Membership {
                role: *role,
                channel: name(channel),
            })
            .collect(),
    )
    .expect("memberships")
}

pub(super) fn request(
    call_id: u64,
    ttl_ms: u64,
    semantics: Semantics,
    channel: &str,
    method: &str,
    key: Option<&str>,
    payload: Bytes,
) -> Request {
    Request {
        call_id: nz(call_id),
        ttl_ms: NonZeroU64::new(ttl_ms),
        semantics,
        channel: name(channel),
        method: name(method),
        idempotency_key: key.map(name),
        payload,
    }
}

pub(super) fn reply(call_id: u64, code: ReplyCode, payload: Bytes) -> Record {
    Record::Reply(Reply {
        call_id: nz(call_id),
        code,
        payload,
        replayed: false,
    })
}

pub(super) fn msgpack<T: Serialize + ?Sized>(value: &T) -> Bytes {
    encode(value).expect("encodes")
}

/// Appendix A's struct example.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Order {
    pub(super) id: u32,
    pub(super) item: String,
    pub(super) qty: i64,
}

/// Every example WIRE.md must have, with the value its text describes.
pub(super) fn expected_examples() -> BTreeMap<&'static str, Expected> {
    session_examples()
        .into_iter()
        .chain(call_examples())
        .chain(fanout_examples())
        .chain(appendix_a_examples())
        .collect()
}

/// The examples of WIRE.md §4 and §5.1: the records that open, check, keep alive and close
/// a connection.
fn session_examples() -> Vec<(&'static str, Expected)> {
    use Expected::Record as R;
    vec![
        (
            "hello",
            R(Record::Hello(Hello {
                lane: Lane::Application,
                rid: name("node-a"),
                generation: nz(0x0102_0304_0506_0708),
                security_identity: Label::default(),
                expect_rid: Some(name("node-b")),
                expect_generation: None,
                config_generation: 7,
                memberships: memberships(&[(Role::Server, "orders")]),
            })),
        ),
        (
            "welcome",
            R(Record::Welcome(Welcome {
                lane: Lane::Completion,
                rid: name("node-b"),
                generation: nz(255),
                security_identity: Label::new("svc").expect("label"),
                memberships: Memberships::default(),
            })),
        ),
        (
            "reject",
            R(Record::Reject(Reject {
                reason: RejectReason::IdentityMismatch,
                detail: Detail::new("rid").expect("detail"),
            })),
        ),
        ("probe", R(Record::Probe { id: nz(1) })),
        (
            "ack",
            R(Record::Ack {
                id: nz(0xDEAD_BEEF),
            }),
        ),
        (
            "close",
            R(Record::Close {
                reason: CloseReason::Shutdown,
            }),
        ),
        (
            "hello_announcing_cancel",
            R(Record::Hello(Hello {
                lane: Lane::ClientServer,
                rid: name("cli"),
                generation: nz(1),
                security_identity: Label::default(),
                expect_rid: Some(name("srv")),
                expect_generation: None,
                config_generation: 0,
                memberships: memberships(&[
                    (Role::ObjectClient, "billing"),
                    (Role::ObjectClient, "\0cancel"),
                ]),
            })),
        ),
        (
            "hello_client_server",
            R(Record::Hello(Hello {
                lane: Lane::ClientServer,
                rid: name("node-c"),
                generation: nz(0x0A0B_0C0D_0E0F_1011),
                security_identity: Label::new("node-c").expect("label"),
                expect_rid: Some(name("srv")),
                expect_generation: None,
                config_generation: 0,
                memberships: memberships(&[(Role::ObjectClient, "orders")]),
            })),
        ),
        (
            "welcome_client_server",
            R(Record::Welcome(Welcome {
                lane: Lane::ClientServer,
                rid: name("srv"),
                generation: nz(0x1122_3344_5566_7788),
                security_identity: Label::new("srv").expect("label"),
                memberships: memberships(&[(Role::Server, "orders")]),
            })),
        ),
        (
            "close_replaced",
            R(Record::Close {
                reason: CloseReason::Replaced,
            }),
        ),
        (
            "reject_protocol",
            R(Record::Reject(Reject {
                reason: RejectReason::Protocol,
                detail: Detail::new("probe before HELLO").expect("detail"),
            })),
        ),
    ]
}

/// The examples of WIRE.md §4: the records of messages and calls.
fn call_examples() -> Vec<(&'static str, Expected)> {
    use Expected::Record as R;
    vec![
        (
            "message",
            R(Record::Message(Message {
                channel: name("orders"),
                payload: Bytes::from_static(&[1, 2]),
            })),
        ),
        (
            "request",
            R(Record::Request(request(
                5,
                1500,
                Semantics::NonRepeatableCommand,
                "pump",
                "dispense",
                Some("wo-1"),
                Bytes::from_static(&[0xC0]),
            ))),
        ),
        (
            "accept",
            R(Record::Accept(Accept {
                call_id: nz(5),
                generation: nz(0x0102_0304_0506_0708),
                connection_id: 42,
            })),
        ),
        (
            "reply",
            R(reply(5, ReplyCode::Ok, Bytes::from_static(&[0xC3]))),
        ),
        (
            "item",
            R(Record::Item(Item {
                call_id: nz(5),
                seq: 0,
                payload: Bytes::from_static(&[1]),
            })),
        ),
        ("cancel", R(Record::Cancel { call_id: nz(1) })),
        (
            "credit",
            R(Record::Credit {
                call_id: nz(3),
                items: nz(256),
            }),
        ),
        (
            "calls",
            R(Record::Calls(
                Calls::new(vec![
                    request(
                        1,
                        0,
                        Semantics::Query,
                        "pump",
                        "read",
                        None,
                        Bytes::from_static(&[1]),
                    ),
                    request(
                        2,
                        0,
                        Semantics::Query,
                        "pump",
                        "read",
                        None,
                        Bytes::from_static(&[2]),
                    ),
                ])
                .expect("calls"),
            )),
        ),
        (
            "batch",
            R(Record::Batch(
                Batch::new(vec![
                    request(
                        1,
                        0,
                        Semantics::Query,
                        "pump",
                        "pressure",
                        None,
                        Bytes::new(),
                    ),
                    request(
                        2,
                        0,
                        Semantics::Undeclared,
                        "pump",
                        "status",
                        None,
                        Bytes::new(),
                    ),
                ])
                .expect("batch"),
            )),
        ),
        (
            "answers",
            R(Record::Answers(
                Answers::new(
                    nz(0x0102_0304_0506_0708),
                    42,
                    vec![
                        (
                            nz(5),
                            Answer::AcceptReply(ReplyCode::Ok, Bytes::from_static(&[0xC3]), false),
                        ),
                        (nz(6), Answer::Accept),
                        (nz(7), Answer::Reply(ReplyCode::Busy, Bytes::new(), false)),
                    ],
                )
                .expect("answers"),
            )),
        ),
        (
            "pack",
            R(Record::Pack(
                Pack::new(
                    name("orders"),
                    vec![
                        Bytes::from_static(&[0x01, 0x02]),
                        Bytes::new(),
                        Bytes::from_static(&[0x03]),
                    ],
                )
                .expect("pack"),
            )),
        ),
        (
            "calls16",
            R(Record::Calls(
                Calls::new(vec![
                    request(
                        1,
                        0,
                        Semantics::Query,
                        "pump",
                        "read",
                        None,
                        Bytes::from_static(&[1]),
                    ),
                    request(
                        2,
                        0,
                        Semantics::Query,
                        "pump",
                        "read",
                        None,
                        Bytes::from_static(&[2]),
                    ),
                ])
                .expect("calls")
                .with_offsets(),
            )),
        ),
        (
            "answers16",
            R(Record::Answers(
                Answers::new(
                    nz(0x0102_0304_0506_0708),
                    42,
                    vec![
                        (
                            nz(5),
                            Answer::AcceptReply(ReplyCode::Ok, Bytes::from_static(&[0xC3]), false),
                        ),
                        (nz(6), Answer::Accept),
                        (nz(7), Answer::Reply(ReplyCode::Busy, Bytes::new(), false)),
                    ],
                )
                .expect("answers")
                .with_offsets(),
            )),
        ),
        (
            "reply_replayed",
            R(Record::Reply(Reply {
                call_id: nz(5),
                code: ReplyCode::Ok,
                payload: Bytes::from_static(&[0xC3]),
                replayed: true,
            })),
        ),
        (
            "answers_replayed",
            R(Record::Answers(
                Answers::new(
                    nz(0x0102_0304_0506_0708),
                    42,
                    vec![
                        (
                            nz(5),
                            Answer::AcceptReply(ReplyCode::Ok, Bytes::from_static(&[0xC3]), true),
                        ),
                        (
                            nz(6),
                            Answer::Reply(ReplyCode::Exception, Bytes::from_static(b"x"), true),
                        ),
                        (nz(7), Answer::Reply(ReplyCode::Busy, Bytes::new(), false)),
                    ],
                )
                .expect("answers"),
            )),
        ),
    ]
}

/// The examples of WIRE.md §7: fanout messages (and §7.5's marker, as bytes).
fn fanout_examples() -> Vec<(&'static str, Expected)> {
    use Expected::{Bytes as B, Fanout as F};
    vec![
        ("beacon", F(FanoutMessage::Beacon)),
        (
            "publish",
            F(FanoutMessage::Publish {
                topic: Bytes::from_static(b"t"),
                generation: nz(1),
                seq: 9,
                payload: Bytes::from_static(b"hello"),
            }),
        ),
        (
            "publish_first",
            F(FanoutMessage::Publish {
                topic: Bytes::from_static(b"prices"),
                generation: nz(0x0102_0304_0506_0708),
                seq: 1,
                payload: Bytes::from_static(b"42"),
            }),
        ),
        (
            "pubpack",
            F(FanoutMessage::PubPack(
                PubPack::new(
                    Bytes::from_static(b"prices"),
                    nz(0x0102_0304_0506_0708),
                    9,
                    vec![
                        Bytes::from_static(&[1, 2]),
                        Bytes::new(),
                        Bytes::from_static(&[3]),
                    ],
                )
                .expect("pubpack"),
            )),
        ),
        ("pubpack_marker", B(Bytes::from_static(&PUBPACK_MARKER))),
    ]
}

/// The examples of WIRE.md Appendix A: payloads as zmesh's call layer encodes them.
fn appendix_a_examples() -> Vec<(&'static str, Expected)> {
    use Expected::{Bytes as B, Record as R};
    let order = Order {
        id: 7,
        item: "pump".into(),
        qty: -2,
    };
    let method_not_found = ServeError::method_not_found("mul").message;
    vec![
        (
            "call_add_request",
            R(Record::Request(request(
                1,
                0,
                Semantics::Undeclared,
                "math",
                "add",
                None,
                msgpack(&(40i64, 2i64)),
            ))),
        ),
        (
            "call_add_reply",
            R(reply(1, ReplyCode::Ok, msgpack(&42i64))),
        ),
        ("msgpack_order", B(msgpack(&order))),
        ("msgpack_unit", B(msgpack(&()))),
        (
            "call_error_reply",
            R(reply(
                2,
                ReplyCode::MethodNotFound,
                Bytes::from(method_not_found.into_bytes()),
            )),
        ),
        (
            "call_stream_item",
            R(Record::Item(Item {
                call_id: nz(3),
                seq: 1,
                payload: msgpack(&1u64),
            })),
        ),
        (
            "call_stream_end",
            R(reply(3, ReplyCode::Ok, msgpack("done"))),
        ),
    ]
}
