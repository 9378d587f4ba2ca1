//! WIRE.md against zmesh itself (MISSION W1, W3):
//! - every hex example of WIRE.md (a fenced block marked `hex NAME`) decodes to the value its
//!   text describes and encodes back to exactly its bytes; the MessagePack of Appendix A is
//!   what zmesh's call layer (`zmesh::runtime::calls::encode`) produces, and the encoding
//!   table of Appendix A holds;
//! - §5.1, protocol errors before admission: a connection whose first record is not a
//!   well-formed HELLO gets exactly one REJECT (`Protocol`, or `UnsupportedVersion` for
//!   another envelope version) and is ignored afterwards, a REJECT or CLOSE gets no answer,
//!   and the node goes on admitting well-formed HELLOs. The peers are pyzmq processes that
//!   build every record byte by byte in Python;
//! - other rules WIRE.md states about zmesh, against raw libzmq sockets (zmesh's codec on
//!   the test side) or zmesh pairs: HELLO and WELCOME fields, the dialled routing id, the
//!   first PROBE at ready and the +1 probe ids (§5.1, §5.2, §5.4), Replacement (§5.1),
//!   security identity and NotRequired (§5.1), records on the wrong lane (§5.4), PUBLISH seq
//!   (§7.2).
//!
//! Each Python peer stops by itself after at most [`PY_LIFETIME_S`] seconds; every wait of
//! the Rust side is bounded.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::time::Duration;

use bytes::Bytes;
use common::{free_tcp, mesh_server, py_script, server_of, PyPeer};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use zmesh::config::{Endpoint, NodeConfig, RouteMeshBind};
use zmesh::proto::wire::{
    Accept, Answer, Answers, Batch, Calls, Capabilities, CloseReason, Detail, FanoutMessage, Hello,
    Item, Label, Lane, Membership, Memberships, Message, Name, Pack, PubPack, Record, Reject,
    RejectReason, Reply, ReplyCode, Request, Role, Semantics, Welcome, PUBPACK_MARKER,
};
use zmesh::runtime::calls::{decode, encode, ServeError};
use zmesh::runtime::Node;

/// The document under test.
const WIRE_MD: &str = include_str!("../WIRE.md");

// ---- WIRE.md's hex examples (in wire_rules/examples.rs) ----

#[path = "wire_rules/examples.rs"]
mod examples;
use examples::*;

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
                // Every capability in effect: the version-1 kinds decode as in version 1.
                let decoded =
                    Record::decode_in(frames, Capabilities::SPOKEN, |f| Bytes::copy_from_slice(f))
                        .unwrap_or_else(|e| panic!("{name}: WIRE.md example refused: {e}"));
                assert_eq!(&decoded, record, "{name}: decoded");
                assert_eq!(&record.encode(), frames, "{name}: encoded");
            }
            Expected::Fanout(message) => {
                // As a subscriber that announced `pubpack` (WIRE.md §7.5): version-1 messages
                // decode as in version 1.
                let decoded = FanoutMessage::decode_in(frames, Capabilities::PUBPACK, |f| {
                    Bytes::copy_from_slice(f)
                })
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
struct Pair(u8, u8);

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
    assert_eq!(hex(msgpack(&Pair(1, 2))), "920102");
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
    let bind = RouteMeshBind::new(free_tcp(), free_tcp());
    let mut c = NodeConfig::new("srv");
    c.memberships = server_of("orders");
    c.server = Some(Endpoint::new(cs.clone()));
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

// ---- §5 and §7 rules, against raw libzmq sockets (zmesh's codec on the test side) ----

/// Sends `frames` on a dialling ROUTER (with `ROUTER_MANDATORY`), retrying while the ZMTP
/// handshake has not completed yet (WIRE.md §5.4): `EHOSTUNREACH` until then.
fn send_routed(s: &zmq::Socket, peer: &[u8], frames: &[Vec<u8>]) {
    let deadline = std::time::Instant::now() + STEP;
    let mut all = vec![peer.to_vec()];
    all.extend(frames.iter().cloned());
    loop {
        match s.send_multipart(all.iter(), 0) {
            Ok(()) => return,
            Err(zmq::Error::EHOSTUNREACH) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// The next record on `s` within `limit` (its leading routing frame removed if `routed`),
/// answering PROBEs with ACKs and skipping ACKs; `None` if nothing else came in time.
fn next_record(s: &zmq::Socket, routed: bool, limit: Duration) -> Option<Record> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
        s.set_rcvtimeo(ms).expect("rcvtimeo");
        let mut frames = s.recv_multipart(0).ok()?;
        let route = routed.then(|| frames.remove(0));
        match Record::decode(&frames).expect("zmesh sent a well-formed record") {
            Record::Probe { id } => {
                let mut ack = Vec::new();
                ack.extend(route);
                ack.extend(Record::Ack { id }.encode());
                s.send_multipart(ack.iter(), 0).expect("ack");
            }
            Record::Ack { .. } => {}
            other => return Some(other),
        }
    }
}

/// The next record on `s` within `limit`, PROBEs and ACKs included.
fn next_any(s: &zmq::Socket, routed: bool, limit: Duration) -> Option<(Option<Vec<u8>>, Record)> {
    let ms = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX).max(1);
    s.set_rcvtimeo(ms).expect("rcvtimeo");
    let mut frames = s.recv_multipart(0).ok()?;
    let route = routed.then(|| frames.remove(0));
    Some((route, Record::decode(&frames).expect("well-formed")))
}

fn hello_record(
    lane: Lane,
    rid: &str,
    generation: u64,
    expect: Option<&str>,
    ms: &[(Role, &str)],
) -> Vec<Vec<u8>> {
    Record::Hello(Hello {
        lane,
        rid: name(rid),
        generation: nz(generation),
        security_identity: Label::default(),
        expect_rid: expect.map(name),
        expect_generation: None,
        config_generation: 0,
        memberships: memberships(ms),
    })
    .encode()
}

/// WIRE.md §5.1, §5.2, §5.4 (MISSION T2, L2): what a zmesh ClientServer client sends. Its
/// dialled routing id is `z S generation counter`; its HELLO carries its RID, its
/// lifecycle generation, its security identity (by default its RID), the server RID it
/// expects, expect_generation 0, config_generation 0 and its memberships (a client sends them
/// too). Its first PROBE comes right after the WELCOME, the next one on the 5 s grid with the
/// next id (+1).
#[tokio::test]
async fn w1_client_hello_fields_first_probe_and_probe_ids() {
    let ep = free_tcp();
    let ctx = zmq::Context::new();
    let server = ctx.socket(zmq::ROUTER).expect("router");
    server.set_linger(0).expect("linger");
    server.set_router_mandatory(true).expect("mandatory");
    server.bind(&ep).expect("bind");
    let mut c = NodeConfig::new("cli");
    c.memberships = vec![zmesh::proto::handshake::Membership {
        role: zmesh::proto::handshake::Role::ObjectClient,
        channel: "billing".into(),
    }];
    c.servers = vec![zmesh::config::ServerConfig::new("orders", ep.clone()).rid("srv")];
    let node = Node::start(c).await.expect("client");

    let (route, hello) = next_any(&server, true, STEP).expect("HELLO");
    let route = route.expect("routing id");
    let Record::Hello(h) = hello else {
        panic!("first record: {hello:?}")
    };
    assert_eq!(h.lane, Lane::ClientServer);
    assert_eq!(h.rid.as_str(), "cli");
    assert_eq!(h.security_identity.as_str(), "cli", "default: the RID");
    assert_eq!(h.expect_rid.as_ref().map(|r| r.as_str()), Some("srv"));
    assert_eq!(h.expect_generation, None);
    assert_eq!(h.config_generation, 0);
    // Its memberships, then the extension entry of each capability it speaks (§8.1).
    assert_eq!(
        h.memberships,
        memberships(&[
            (Role::ObjectClient, "billing"),
            (Role::ObjectClient, "\0cancel"),
            (Role::ObjectClient, "\0calls"),
            (Role::ObjectClient, "\0credit"),
            (Role::ObjectClient, "\0answers"),
            (Role::ObjectClient, "\0replayed"),
            (Role::ObjectClient, "\0pack"),
            (Role::ObjectClient, "\0ids16"),
        ])
    );
    assert_eq!(route.len(), 18, "{route:02x?}");
    assert_eq!(&route[..2], b"zS");
    assert_eq!(route[2..10], h.generation.get().to_be_bytes());

    let welcome = Record::Welcome(Welcome {
        lane: Lane::ClientServer,
        rid: name("srv"),
        generation: nz(0x1122_3344_5566_7788),
        security_identity: Label::new("srv").expect("label"),
        memberships: memberships(&[(Role::Server, "orders")]),
    });
    let mut out = vec![route.clone()];
    out.extend(welcome.encode());
    server.send_multipart(out.iter(), 0).expect("welcome");
    let welcomed = std::time::Instant::now();
    let (_, first) = next_any(&server, true, Duration::from_secs(2)).expect("a PROBE at ready");
    let Record::Probe { id: first } = first else {
        panic!("not a PROBE: {first:?}")
    };
    let mut ack = vec![route.clone()];
    ack.extend(Record::Ack { id: first }.encode());
    server.send_multipart(ack.iter(), 0).expect("ack");
    let (_, second) = next_any(&server, true, Duration::from_secs(8)).expect("the next PROBE");
    let Record::Probe { id: second } = second else {
        panic!("not a PROBE: {second:?}")
    };
    let waited = welcomed.elapsed();
    assert!(
        waited >= Duration::from_millis(4_500),
        "on the 5 s grid: {waited:?}"
    );
    let next = first.get().checked_add(1).unwrap_or(1);
    assert_eq!(second.get(), next, "a new id is the previous one + 1");
    node.shutdown().await.expect("shutdown");
}

/// WIRE.md §5.1, §5.2 (MISSION T2, L2, F3): a zmesh ClientServer server's WELCOME carries its
/// RID, its security identity (by default its RID) and its memberships; its first PROBE comes
/// right after the WELCOME; a second connection of the same RID is admitted and the old one
/// gets CLOSE Replaced.
#[tokio::test]
async fn w1_server_welcome_first_probe_and_replacement() {
    let ep = free_tcp();
    let mut c = NodeConfig::new("srv");
    c.memberships = server_of("orders");
    c.server = Some(Endpoint::new(ep.clone()));
    let node = Node::start(c).await.expect("server");
    let ctx = zmq::Context::new();
    let dealer = || {
        let d = ctx.socket(zmq::DEALER).expect("dealer");
        d.set_linger(0).expect("linger");
        d.connect(&ep).expect("connect");
        d
    };
    let hello = hello_record(Lane::ClientServer, "raw", 5, Some("srv"), &[]);
    let old = dealer();
    old.send_multipart(hello.iter(), 0).expect("hello");
    let (_, welcome) = next_any(&old, false, STEP).expect("WELCOME");
    let at = std::time::Instant::now();
    let Record::Welcome(w) = welcome else {
        panic!("not a WELCOME: {welcome:?}")
    };
    assert_eq!(w.lane, Lane::ClientServer);
    assert_eq!(w.rid.as_str(), "srv");
    assert_eq!(w.security_identity.as_str(), "srv");
    assert_eq!(w.memberships, memberships(&[(Role::Server, "orders")]));
    let (_, probe) = next_any(&old, false, Duration::from_secs(2)).expect("a PROBE at ready");
    assert!(matches!(probe, Record::Probe { .. }), "{probe:?}");
    assert!(at.elapsed() < Duration::from_secs(2));

    // The same RID and generation again, on a new connection: admitted; the old one replaced.
    let new = dealer();
    new.send_multipart(hello.iter(), 0).expect("hello");
    let (_, welcome) = next_any(&new, false, STEP).expect("WELCOME");
    assert!(matches!(welcome, Record::Welcome(_)), "{welcome:?}");
    assert_eq!(
        next_record(&old, false, STEP),
        Some(Record::Close {
            reason: CloseReason::Replaced
        })
    );
    node.shutdown().await.expect("shutdown");
}

/// WIRE.md §5.3, §5.4 (MISSION T1): on RouteMesh, records on the wrong lane are ignored and
/// the connections stay ready: a REQUEST on the Completion lane gets no answer, an ACCEPT on
/// the Application lane changes nothing; a MESSAGE on the Completion lane is delivered
/// (zmesh). A REQUEST on the Application lane is answered on the Completion lane. (Multi-thread
/// runtime: the test blocks in libzmq receives while the handler runs on the runtime.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w1_records_on_the_wrong_lane_are_ignored() {
    let bind = RouteMeshBind::new(free_tcp(), free_tcp());
    let c = mesh_server("srv", "orders", &bind);
    let node = Node::builder(c)
        .serve("orders", |req: zmesh::runtime::calls::Request| async move {
            Ok(req.raw_args().clone())
        })
        .start()
        .await
        .expect("node");
    let mut events = common::Events::new(node.take_events().expect("events"));
    let ctx = zmq::Context::new();
    let dial = |ep: &str, id: &[u8]| {
        let s = ctx.socket(zmq::ROUTER).expect("router");
        s.set_linger(0).expect("linger");
        s.set_identity(id).expect("id");
        s.set_router_mandatory(true).expect("mandatory");
        s.connect(ep).expect("connect");
        s
    };
    let (app, comp) = (
        dial(&bind.application, b"raw-app"),
        dial(&bind.completion, b"raw-comp"),
    );
    const APP: &[u8] = b"zmesh-application";
    const COMP: &[u8] = b"zmesh-completion";
    let client = [(Role::ObjectClient, "orders")];
    send_routed(
        &app,
        APP,
        &hello_record(Lane::Application, "raw", 3, None, &client),
    );
    send_routed(
        &comp,
        COMP,
        &hello_record(Lane::Completion, "raw", 3, None, &client),
    );
    for s in [&app, &comp] {
        let r = next_record(s, true, STEP);
        assert!(matches!(r, Some(Record::Welcome(_))), "{r:?}");
    }
    let request = |call_id: u64| {
        Record::Request(request(
            call_id,
            0,
            Semantics::Undeclared,
            "orders",
            "echo",
            None,
            msgpack("x"),
        ))
        .encode()
    };
    // Wrong lanes: a REQUEST on the Completion lane, an ACCEPT on the Application lane.
    send_routed(&comp, COMP, &request(1));
    let accept = Record::Accept(Accept {
        call_id: nz(99),
        generation: nz(3),
        connection_id: 1,
    });
    send_routed(&app, APP, &accept.encode());
    // A MESSAGE on the Completion lane: zmesh delivers it.
    let message = Record::Message(Message {
        channel: name("orders"),
        payload: Bytes::from_static(b"on the completion lane"),
    });
    send_routed(&comp, COMP, &message.encode());
    let delivered = events
        .wait(STEP, |e| {
            matches!(e, zmesh::runtime::NodeEvent::Delivery(_))
        })
        .await;
    let zmesh::runtime::NodeEvent::Delivery(d) = delivered else {
        unreachable!()
    };
    assert_eq!(&d.payload[..], b"on the completion lane");
    // The right lane: answered on the Completion lane, and only call 2 is.
    send_routed(&app, APP, &request(2));
    let mut answers = Vec::new();
    while let Some(r) = next_record(&comp, true, Duration::from_millis(500)) {
        answers.push(r);
    }
    assert_eq!(
        answers.len(),
        2,
        "call 1 (on the Completion lane) is never answered: {answers:?}"
    );
    assert!(
        matches!(&answers[0], Record::Accept(a) if a.call_id == nz(2)),
        "{answers:?}"
    );
    assert_eq!(answers[1], reply(2, ReplyCode::Ok, msgpack("x")));
    assert_eq!(next_record(&app, true, Duration::from_millis(200)), None);
    let snap = node.snapshot().await.expect("snapshot");
    let ready = snap
        .peer("raw")
        .filter(|l| l.state == zmesh::proto::state::ConnState::Ready)
        .count();
    assert_eq!(ready, 2, "both lanes still ready: {}", snap.to_table());
    node.shutdown().await.expect("shutdown");
}

/// WIRE.md §7.2 (MISSION T3): a zmesh publisher numbers its PUBLISH records 1, 2, 3, … (each
/// record of a batch too), with its lifecycle generation: the first record a subscriber sees
/// (after it joined, slow joiner) carries the number of publishes so far, and the numbers go
/// on by one.
#[tokio::test]
async fn w1_publish_seq_starts_at_1_and_steps_by_1() {
    let ep = free_tcp();
    let mut c = NodeConfig::new("pub");
    c.publisher = Some(Endpoint::new(ep.clone()));
    let node = Node::start(c).await.expect("publisher");
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).expect("sub");
    sub.set_linger(0).expect("linger");
    sub.set_subscribe(b"").expect("subscribe");
    sub.connect(&ep).expect("connect");
    sub.set_rcvtimeo(50).expect("rcvtimeo");
    // Publish one record at a time, its number as its payload, until one arrives.
    let mut published = 0u64;
    let seen = loop {
        published += 1;
        assert!(published < 400, "no record reached the subscriber");
        node.publish(b"t", published.to_string()).expect("publish");
        if let Some(m) = recv_publish(&sub) {
            break m;
        }
    };
    assert_eq!(seen.1, seen.2, "seq = the record's number, counted from 1");
    let generation = seen.0;
    // Then a batch of three: the next three numbers.
    node.publish_batch(b"t", vec!["a".into(), "b".into(), "c".into()])
        .expect("batch");
    sub.set_rcvtimeo(i32::try_from(STEP.as_millis()).expect("ms"))
        .expect("rcvtimeo");
    let mut later = Vec::new();
    while later.len() < 3 {
        let (g, seq, _) = recv_publish(&sub).expect("the batch");
        assert_eq!(g, generation);
        if seq > published {
            later.push(seq);
        }
    }
    assert_eq!(later, vec![published + 1, published + 2, published + 3]);
    node.shutdown().await.expect("shutdown");
}

/// The next PUBLISH on `sub` (beacons skipped): generation, seq, and the payload as a number
/// (0 if it is not one); `None` on a receive timeout.
fn recv_publish(sub: &zmq::Socket) -> Option<(NonZeroU64, u64, u64)> {
    loop {
        let frames = sub.recv_multipart(0).ok()?;
        match FanoutMessage::decode(&frames).expect("a well-formed fanout message") {
            FanoutMessage::Beacon => continue,
            FanoutMessage::Publish {
                generation,
                seq,
                payload,
                ..
            } => {
                let n = std::str::from_utf8(&payload)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                return Some((generation, seq, n));
            }
            other => panic!("a version-1 decoder gave {other:?}"),
        }
    }
}

/// WIRE.md §5.1 (MISSION F3, T4): a security identity is checked only where a peer entry
/// configures one, by the dialer (in the WELCOME) and by the acceptor (in the HELLO), and a
/// mismatch is SecurityFailure; NotRequired compares roles, not channels (a Server of
/// `billing` and an Object Client of `orders` are a required pair).
#[tokio::test]
async fn w1_security_identity_and_not_required_rules() {
    use zmesh::proto::state::FailureReason;
    use zmesh::runtime::NodeEvent;
    let security_failure = |e: &NodeEvent| matches!(e, NodeEvent::State(s) if s.reason == Some(FailureReason::SecurityFailure));

    // The dialer pins the acceptor's identity; the acceptor announces another.
    let b1_bind = common::mesh_bind(true);
    let mut b1 = NodeConfig::new("b1");
    b1.security_identity = Some("other".into());
    b1.memberships = server_of("orders");
    b1.route_mesh = Some(b1_bind.clone());
    let b1 = Node::start(b1).await.expect("b1");
    let mut a1 = NodeConfig::new("a1");
    a1.peers = vec![common::peer("b1", &b1_bind).security_identity("svc-b1")];
    let a1 = Node::start(a1).await.expect("a1");
    let mut e1 = common::Events::new(a1.take_events().expect("events"));
    e1.wait(STEP, security_failure).await;

    // The acceptor pins the dialer's identity (it announces its RID, "a2", by default).
    let a2_bind = common::mesh_bind(true);
    let b2_bind = common::mesh_bind(true);
    let mut b2 = mesh_server("b2", "orders", &b2_bind);
    b2.peers = vec![common::peer("a2", &a2_bind).security_identity("svc-a2")];
    let b2 = Node::start(b2).await.expect("b2");
    let mut a2 = NodeConfig::new("a2");
    a2.peers = vec![common::peer("b2", &b2_bind)];
    let a2 = Node::start(a2).await.expect("a2");
    let mut e2 = common::Events::new(a2.take_events().expect("events"));
    e2.wait(STEP, security_failure).await;

    // Roles, not channels: Object Client of orders + Server of billing is a required pair.
    let b3_bind = common::mesh_bind(true);
    let b3 = mesh_server("b3", "billing", &b3_bind);
    let b3 = Node::start(b3).await.expect("b3");
    let mut a3 = NodeConfig::new("a3");
    a3.memberships = common::client_of("orders");
    a3.peers = vec![common::peer("b3", &b3_bind)];
    let (a3, _e3) = common::start_ready(a3, "b3").await;

    for n in [a1, b1, a2, b2, a3, b3] {
        n.shutdown().await.expect("shutdown");
    }
}
