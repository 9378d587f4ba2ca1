//! WIRE.md against zmesh itself (MISSION W1, W3):
//! - every hex example of WIRE.md (a fenced block marked `hex NAME`) decodes to the value its
//!   text describes and encodes back to exactly its bytes; the MessagePack of Appendix A is
//!   what zmesh's call layer (`zmesh::runtime::calls::encode`) produces, and the encoding
//!   table of Appendix A holds;
//! - §5.1, protocol errors before admission: a connection whose first record is not a
//!   well-formed HELLO gets exactly one REJECT (`Protocol`, or `UnsupportedVersion` for
//!   another envelope version) and is ignored afterwards, a REJECT or CLOSE gets no answer,
//!   and the node goes on admitting well-formed HELLOs. The peers are pyzmq processes that
//!   build every record byte by byte in Python.
//!
//! Each Python peer stops by itself after at most [`PY_LIFETIME_S`] seconds; every wait of
//! the Rust side is bounded.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::time::Duration;

use bytes::Bytes;
use common::{free_tcp, py_script, server_of, PyPeer};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use zmesh::config::{Endpoint, NodeConfig, RouteMeshBind};
use zmesh::proto::wire::{
    Accept, Batch, CloseReason, Detail, FanoutMessage, Hello, Item, Label, Lane, Membership,
    Memberships, Message, Name, Record, Reject, RejectReason, Reply, ReplyCode, Request, Role,
    Semantics, Welcome,
};
use zmesh::runtime::calls::{decode, encode, ServeError};
use zmesh::runtime::Node;

/// The document under test.
const WIRE_MD: &str = include_str!("../WIRE.md");

// ---- WIRE.md's hex examples ----

/// One `hex NAME` block of WIRE.md: its frames.
///
/// A block is one frame of hex byte pairs (whitespace anywhere), or frames introduced by
/// `frame N:` lines (continuation lines belong to the frame above; `(empty)` is an empty
/// frame).
fn wire_examples() -> BTreeMap<String, Vec<Vec<u8>>> {
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
fn hex_byte(token: &str) -> Option<u8> {
    let upper = token.len() == 2
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b));
    upper.then(|| u8::from_str_radix(token, 16).ok()).flatten()
}

/// What an example must be.
enum Expected {
    /// A non-fanout record (WIRE.md §4).
    Record(Record),
    /// A fanout message (WIRE.md §7).
    Fanout(FanoutMessage),
    /// One frame of exactly these bytes (Appendix A's MessagePack values).
    Bytes(Bytes),
}

fn nz(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).expect("non-zero")
}

fn name(s: &str) -> Name {
    Name::new(s).expect("name")
}

fn memberships(list: &[(Role, &str)]) -> Memberships {
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

fn request(
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

fn reply(call_id: u64, code: ReplyCode, payload: Bytes) -> Record {
    Record::Reply(Reply {
        call_id: nz(call_id),
        code,
        payload,
    })
}

fn msgpack<T: Serialize + ?Sized>(value: &T) -> Bytes {
    encode(value).expect("encodes")
}

/// Appendix A's struct example.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u32,
    item: String,
    qty: i64,
}

/// Every example WIRE.md must have, with the value its text describes.
fn expected_examples() -> BTreeMap<&'static str, Expected> {
    use Expected::{Bytes as B, Fanout as F, Record as R};
    let order = Order {
        id: 7,
        item: "pump".into(),
        qty: -2,
    };
    let method_not_found = ServeError::method_not_found("mul").message;
    BTreeMap::from([
        // §4
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
        (
            "close",
            R(Record::Close {
                reason: CloseReason::Shutdown,
            }),
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
        // §5.1
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
        // §7
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
        // Appendix A: payloads as zmesh's call layer encodes them.
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
    ])
}

/// MISSION W1: every hex example of WIRE.md is the value its text describes, in both
/// directions (decode, then encode), and no example is missing or unknown.
#[test]
fn w1_every_wire_md_hex_example_decodes_and_encodes_exactly() {
    let examples = wire_examples();
    let expected = expected_examples();
    let found: BTreeSet<&str> = examples.keys().map(String::as_str).collect();
    let wanted: BTreeSet<&str> = expected.keys().copied().collect();
    assert_eq!(found, wanted, "WIRE.md's hex examples and this test's list");
    for (name, frames) in &examples {
        match &expected[name.as_str()] {
            Expected::Record(record) => {
                let decoded = Record::decode(frames)
                    .unwrap_or_else(|e| panic!("{name}: WIRE.md example refused: {e}"));
                assert_eq!(&decoded, record, "{name}: decoded");
                assert_eq!(&record.encode(), frames, "{name}: encoded");
            }
            Expected::Fanout(message) => {
                let decoded = FanoutMessage::decode(frames)
                    .unwrap_or_else(|e| panic!("{name}: WIRE.md example refused: {e}"));
                assert_eq!(&decoded, message, "{name}: decoded");
                assert_eq!(
                    &message.encode().expect("encodes"),
                    frames,
                    "{name}: encoded"
                );
            }
            Expected::Bytes(bytes) => {
                assert_eq!(frames, &vec![bytes.to_vec()], "{name}");
            }
        }
    }
}

/// MISSION W1: byte examples outside a `hex` block would go unchecked; there are none. Outside
/// the blocks, a run of hex byte tokens that looks like a record (an envelope header and at
/// least one byte more) or is longer than any constant of the format (8 bytes or more) fails
/// this test; headers, the beacon's frames and topics stay allowed.
#[test]
fn w1_wire_md_has_no_unchecked_hex_example() {
    let mut in_hex = false;
    for (n, line) in WIRE_MD.lines().enumerate() {
        if line.starts_with("```hex ") {
            in_hex = true;
            continue;
        }
        if in_hex {
            in_hex = !line.starts_with("```");
            continue;
        }
        let mut run: Vec<u8> = Vec::new();
        for token in line.split(|c: char| c.is_whitespace() || c == '`' || c == '|') {
            if token.is_empty() {
                continue;
            }
            match hex_byte(token) {
                Some(b) => run.push(b),
                None => run.clear(),
            }
            let record = run.len() > 4 && run.starts_with(&[0x5A, 0x4D]);
            assert!(
                run.len() < 8 && !record,
                "WIRE.md line {}: bytes outside a `hex` block: {line}",
                n + 1
            );
        }
    }
}

/// Bytes serialised as a byte string (what `serde_bytes` does).
struct ByteString(&'static [u8]);

impl Serialize for ByteString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Shape {
    Dot,
    Size(u8),
}

/// WIRE.md Appendix A, "How zmesh encodes values" and "What zmesh accepts": each row, with
/// zmesh's own encoder and decoder.
#[test]
fn w1_appendix_a_encoding_table_holds() {
    let hex = |b: Bytes| hex::encode_upper(b);
    // Integers: the shortest form of the value, whatever the type.
    assert_eq!(hex(msgpack(&5u64)), "05");
    assert_eq!(hex(msgpack(&-1i64)), "FF");
    assert_eq!(hex(msgpack(&-32i8)), "E0");
    assert_eq!(hex(msgpack(&200i64)), "CCC8");
    assert_eq!(hex(msgpack(&300u64)), "CD012C");
    assert_eq!(hex(msgpack(&65_536u32)), "CE00010000");
    assert_eq!(hex(msgpack(&(1u64 << 32))), "CF0000000100000000");
    assert_eq!(hex(msgpack(&-33i64)), "D0DF");
    assert_eq!(hex(msgpack(&-200i64)), "D1FF38");
    // Floats, booleans, nil, options.
    assert_eq!(hex(msgpack(&1.5f32)), "CA3FC00000");
    assert_eq!(hex(msgpack(&1.5f64)), "CB3FF8000000000000");
    assert_eq!(hex(msgpack(&false)), "C2");
    assert_eq!(hex(msgpack(&true)), "C3");
    assert_eq!(hex(msgpack(&())), "C0");
    assert_eq!(hex(msgpack(&None::<u8>)), "C0");
    assert_eq!(hex(msgpack(&Some(5u8))), "05");
    // Strings, byte strings, sequences, maps, structs, enums.
    assert_eq!(hex(msgpack("hello")), "A568656C6C6F");
    assert_eq!(hex(msgpack(&"x".repeat(32)))[..6], *"D92078");
    assert_eq!(hex(msgpack(&ByteString(b"ab"))), "C4026162");
    assert_eq!(hex(msgpack(&vec![1u8, 2])), "920102");
    assert_eq!(hex(msgpack(&(40i64, 2i64))), "922802");
    assert_eq!(hex(msgpack(&BTreeMap::from([("a", 1)]))), "81A16101");
    assert_eq!(
        hex(msgpack(&Order {
            id: 7,
            item: "pump".into(),
            qty: -2
        })),
        "83A2696407A46974656DA470756D70A3717479FE"
    );
    assert_eq!(hex(msgpack(&Shape::Dot)), "A3446F74");
    assert_eq!(hex(msgpack(&Shape::Size(3))), "81A453697A6503");
    // What zmesh accepts besides.
    let order = Order {
        id: 7,
        item: "x".into(),
        qty: -2,
    };
    let as_array = [0x93, 0x07, 0xA1, b'x', 0xFE];
    assert_eq!(decode::<Order>(&as_array).expect("array"), order);
    let reordered_extra = [
        0x84, 0xA3, b'q', b't', b'y', 0xFE, 0xA1, b'z', 0x01, 0xA2, b'i', b'd', 0x07, 0xA4, b'i',
        b't', b'e', b'm', 0xA1, b'x',
    ];
    assert_eq!(decode::<Order>(&reordered_extra).expect("map"), order);
    assert_eq!(
        decode::<i64>(&[0xCF, 0, 0, 0, 0, 0, 0, 0, 42]).expect("u64"),
        42
    );
    assert_eq!(decode::<String>(&[0xC4, 2, b'h', b'i']).expect("bin"), "hi");
    // A method without parameters takes nil, not an empty payload.
    assert!(decode::<()>(&[0xC0]).is_ok());
    assert!(decode::<()>(&[]).is_err());
}

// ---- §5.1: protocol errors before admission ----

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(15);
/// The first line of a Python peer (interpreter start and `import zmq` under load).
const STARTUP: Duration = Duration::from_secs(60);
/// A Python peer never outlives this (seconds).
const PY_LIFETIME_S: u32 = 60;

/// A pyzmq peer that opens one new connection per case to a zmesh ClientServer server
/// (DEALER) or to its RouteMesh Application lane (a dialling ROUTER, which sends only once
/// its ZMTP handshake is done), sends the case's records, and reports every record it gets
/// back within the case's window as `{"case": NAME, "got": [[frame hex, ...], ...]}`.
const PY_UNADMITTED: &str = r#"
cs_ep, app_ep = sys.argv[1], sys.argv[2]
ctx = zmq.Context()
PROBE = envelope(0x04) + u64(1)
MESSAGE = [envelope(0x06) + string("orders"), b"x"]
CLOSE = envelope(0x0B) + bytes([1])
REJECT = envelope(0x03) + bytes([2]) + string("rid")
def hello(rid, generation, lane=3):
    return (envelope(0x01) + bytes([lane]) + string(rid) + u64(generation) + string("")
            + string("") + u64(0) + u64(0) + u16(0))
def dealer():
    d = ctx.socket(zmq.DEALER)
    d.linger = 0
    d.connect(cs_ep)
    return d, (lambda frames: d.send_multipart(frames)), False
def router():
    s = ctx.socket(zmq.ROUTER)
    s.linger = 0
    s.setsockopt(zmq.ROUTING_ID, b"py-app")
    s.setsockopt(zmq.ROUTER_MANDATORY, 1)
    s.connect(app_ep)
    def send(frames):
        while time.monotonic() < DEADLINE:
            try:
                s.send_multipart([b"zmesh-application"] + frames)
                return
            except zmq.ZMQError as e:
                if e.errno != zmq.EHOSTUNREACH:
                    raise
                time.sleep(0.005)
    return s, send, True
def case(name, sock, records, first_only=False):
    s, send, routed = sock
    for frames in records:
        send(frames)
    got = []
    # Up to 10 s for the first answer, then 500 ms for any further one.
    end = time.monotonic() + 10.0
    while time.monotonic() < end:
        if s.poll(20):
            frames = s.recv_multipart()
            got.append([f.hex() for f in (frames[1:] if routed else frames)])
            if first_only:
                break
            end = min(end, time.monotonic() + 0.5)
    emit(case=name, got=got)
    s.close()
good = hello("py-refused", 7)
case("probe_first", dealer(), [[PROBE]] + [MESSAGE] * 20 + [[good]])
case("hello_generation_0", dealer(), [[hello("py-zero", 0)]])
case("hello_truncated", dealer(), [[good[:10]]])
v2 = bytearray(good)
v2[2] = 2
case("version_2", dealer(), [[bytes(v2)]])
case("not_zmesh", dealer(), [[b"GET / HTTP/1.1\r\n\r\n"]])
case("close_and_reject_first", dealer(), [[CLOSE], [REJECT], [PROBE]])
case("mesh_message_first", router(), [MESSAGE])
case("hello_ok", dealer(), [[hello("py-ok", 9)]], first_only=True)
emit(done=True)
"#;

/// The records the Python peer got back in `case`, decoded.
fn answers(results: &BTreeMap<String, Value>, case: &str) -> Vec<Vec<Vec<u8>>> {
    let got = results
        .get(case)
        .unwrap_or_else(|| panic!("no result for case {case}"));
    got.as_array()
        .expect("got is a list")
        .iter()
        .map(|record| {
            record
                .as_array()
                .expect("a record is a list of frames")
                .iter()
                .map(|f| hex::decode(f.as_str().expect("hex frame")).expect("hex"))
                .collect()
        })
        .collect()
}

/// The one REJECT of a case: its reason and detail.
fn one_reject(results: &BTreeMap<String, Value>, case: &str) -> (RejectReason, String) {
    let got = answers(results, case);
    assert_eq!(got.len(), 1, "{case}: exactly one answer, got {got:02x?}");
    match Record::decode(&got[0]) {
        Ok(Record::Reject(r)) => (r.reason, r.detail.as_str().to_owned()),
        other => panic!("{case}: not a REJECT: {other:?}"),
    }
}

/// WIRE.md §5.1 (MISSION W3, T4): a connection whose first record is not a well-formed HELLO
/// gets exactly one REJECT (Protocol; UnsupportedVersion for envelope version 2) and nothing
/// more, whatever it sends after (a valid HELLO included); a REJECT or CLOSE before HELLO gets
/// no answer; the same holds on a RouteMesh lane; a well-formed HELLO on a new connection is
/// still admitted. zmesh's REJECT for a PROBE before HELLO is byte for byte WIRE.md's example.
#[tokio::test]
async fn w3_protocol_error_before_admission_gets_one_reject() {
    let cs = free_tcp();
    let bind = RouteMeshBind {
        application: free_tcp(),
        completion: free_tcp(),
    };
    let mut c = NodeConfig::new("srv");
    c.memberships = server_of("orders");
    c.server = Some(Endpoint {
        endpoint: cs.clone(),
    });
    c.route_mesh = Some(bind.clone());
    let node = Node::start(c).await.expect("node");

    let mut py = PyPeer::start(
        &py_script(PY_UNADMITTED, PY_LIFETIME_S),
        &[&cs, &bind.application],
    );
    let mut results = BTreeMap::new();
    let mut limit = STARTUP;
    loop {
        let v = py.next(limit).await;
        limit = STEP;
        if v.get("done").is_some() {
            break;
        }
        let case = v["case"].as_str().expect("case").to_owned();
        results.insert(case, v["got"].clone());
    }

    let example = wire_examples()
        .remove("reject_protocol")
        .expect("WIRE.md example reject_protocol");
    let probe_first = answers(&results, "probe_first");
    assert_eq!(
        probe_first,
        vec![example.clone()],
        "one REJECT, exactly WIRE.md's example, for a PROBE, 20 MESSAGEs and a HELLO"
    );
    for case in ["hello_generation_0", "hello_truncated", "not_zmesh"] {
        let (reason, detail) = one_reject(&results, case);
        assert_eq!(reason, RejectReason::Protocol, "{case}: {detail}");
        assert!(
            detail.starts_with("malformed record before HELLO"),
            "{case}: {detail}"
        );
    }
    let (reason, detail) = one_reject(&results, "version_2");
    assert_eq!(reason, RejectReason::UnsupportedVersion, "{detail}");
    // The REJECT and the CLOSE went unanswered: the only answer is the one to the PROBE.
    assert_eq!(answers(&results, "close_and_reject_first"), vec![example]);
    let (reason, detail) = one_reject(&results, "mesh_message_first");
    assert_eq!(reason, RejectReason::Protocol);
    assert_eq!(detail, "message before HELLO");
    let ok = answers(&results, "hello_ok");
    assert!(
        matches!(
            ok.first().map(|r| Record::decode(r)),
            Some(Ok(Record::Welcome(_)))
        ),
        "a well-formed HELLO is still admitted: {ok:02x?}"
    );

    // Nothing of the refused connections became a link; the admitted one did.
    let snap = node.snapshot().await.expect("snapshot");
    assert_eq!(snap.host, "running");
    for rid in ["py-refused", "py-zero"] {
        assert_eq!(snap.peer(rid).count(), 0, "{rid}: {}", snap.to_table());
    }
    // (py-ok's connection is closed again by now: its link exists, whatever its state.)
    assert_eq!(snap.peer("py-ok").count(), 1, "{}", snap.to_table());
    drop(py);
    node.shutdown().await.expect("shutdown");
}
