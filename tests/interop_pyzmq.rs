//! Interoperability with a non-Rust libzmq peer (MISSION W4): pyzmq processes speak zmesh's
//! wire format, built byte by byte from WIRE.md in Python (nothing of zmesh's codec is used on
//! the Python side), against zmesh nodes over tcp on 127.0.0.1.
//!
//! Each Python peer prints one JSON object per line and stops by itself after at most
//! [`PY_LIFETIME_S`] seconds; every wait of the Rust side is bounded.

mod common;

use std::time::Duration;

use common::{
    close_monitored, free_tcp, monitor_wait, monitored_dealer, py_script, Events, PyPeer,
};
use serde_json::Value;
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::proto::state::ConnState;
use zmesh::proto::wire::{BEACON_PAYLOAD, BEACON_TOPIC};
use zmesh::runtime::{Node, NodeEvent, Source};

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(15);
/// The first line of a Python peer: an interpreter start and `import zmq` on a loaded
/// machine can take a while; bounded all the same.
const STARTUP: Duration = Duration::from_secs(60);
/// A Python peer never outlives this (seconds), even if the test is stuck.
const PY_LIFETIME_S: u32 = 60;

/// A pyzmq PUB: an exact beacon every 200 ms; on `publish TOPIC_HEX PAYLOAD_HEX GEN SEQ` one
/// PUBLISH record (WIRE.md §7.2); on `mark` reports how many beacons it has sent.
const PY_PUBLISHER: &str = r#"
ep = sys.argv[1]
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.linger = 0
pub.bind(ep)
commands = stdin_commands()
emit(bound=ep)
beacons = 0
next_at = time.monotonic()
while time.monotonic() < DEADLINE:
    now = time.monotonic()
    if now >= next_at:
        pub.send_multipart([BEACON_TOPIC, BEACON_PAYLOAD])
        beacons += 1
        emit(beacon=beacons)
        next_at = now + 0.2
    try:
        cmd = commands.get(timeout=max(0.0, next_at - time.monotonic()))
    except queue.Empty:
        continue
    if cmd is None:
        break
    if cmd[0] == "mark":
        emit(mark=beacons)
    elif cmd[0] == "publish":
        topic, payload = bytes.fromhex(cmd[1]), bytes.fromhex(cmd[2])
        generation, seq = int(cmd[3]), int(cmd[4])
        pub.send_multipart([topic, envelope(0x0D) + u64(generation) + u64(seq), payload])
        emit(published=seq)
"#;

/// A pyzmq SUB subscribed to everything: reports the first `count` messages with their frames
/// (hex) and the `time.monotonic()` of their arrival.
const PY_SUBSCRIBER: &str = r#"
ep, count = sys.argv[1], int(sys.argv[2])
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.linger = 0
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(ep)
emit(connected=ep)
seen = 0
while seen < count and time.monotonic() < DEADLINE:
    if sub.poll(100):
        frames = sub.recv_multipart()
        emit(message=[f.hex() for f in frames], t=time.monotonic())
        seen += 1
"#;

/// A pyzmq DEALER speaking raw zmesh records on the ClientServer lane: HELLO (WIRE.md §4.1);
/// after WELCOME a MESSAGE and a PROBE of its own; answers every PROBE with an ACK of the same
/// id (§5.2); reports everything it receives until a CLOSE.
const PY_DEALER: &str = r#"
ep, rid, expect_rid, generation = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
OWN_PROBE = 77
ctx = zmq.Context()
d = ctx.socket(zmq.DEALER)
d.linger = 0
d.setsockopt(zmq.ROUTING_ID, b"py-dealer")
d.connect(ep)
hello = (envelope(0x01) + bytes([3]) + string(rid) + u64(generation) + string("")
         + string(expect_rid) + u64(0) + u64(0) + u16(0))
d.send(hello)
emit(sent="hello")
while time.monotonic() < DEADLINE:
    if not d.poll(100):
        continue
    frames = d.recv_multipart()
    f0 = frames[0]
    if len(f0) < 4 or f0[:3] != bytes([0x5A, 0x4D, 0x01]):
        emit(unexpected=[f.hex() for f in frames])
        continue
    kind, r = f0[3], Reader(f0[4:])
    if kind == 0x02 and len(frames) == 1:
        lane, who, gen, sec = r.u8(), r.string(), r.u64(), r.string()
        members = [[r.u8(), r.string()] for _ in range(r.u16())]
        emit(welcome=dict(lane=lane, rid=who, generation=gen, security_identity=sec,
                          memberships=members, exact=r.done()))
        d.send_multipart([envelope(0x06) + string("orders"), b"from python"])
        d.send(envelope(0x04) + u64(OWN_PROBE))
    elif kind == 0x04 and len(f0) == 12 and len(frames) == 1:
        probe = r.u64()
        d.send(envelope(0x05) + u64(probe))
        emit(probe=probe)
    elif kind == 0x05 and len(f0) == 12 and len(frames) == 1:
        emit(ack=r.u64())
    elif kind == 0x06 and len(frames) == 2:
        emit(message=r.string(), payload=frames[1].hex(), exact=r.done())
    elif kind == 0x0B and len(f0) == 5 and len(frames) == 1:
        emit(close=r.u8())
        break
    else:
        emit(unexpected=[f.hex() for f in frames])
"#;

fn script(body: &str) -> String {
    py_script(body, PY_LIFETIME_S)
}

fn is_ready(ev: &NodeEvent, link_part: &str) -> bool {
    matches!(ev, NodeEvent::State(s) if s.link.contains(link_part) && s.state == ConnState::Ready)
}

fn hex_frames(v: &Value) -> Vec<Vec<u8>> {
    v.as_array()
        .expect("frames array")
        .iter()
        .map(|f| hex::decode(f.as_str().expect("hex frame")).expect("hex"))
        .collect()
}

/// MISSION W4, L4, L5: a pyzmq PUB sending exact beacons makes a zmesh subscriber ready and
/// nothing is delivered for them; a PUBLISH record built from WIRE.md in Python is delivered
/// with exactly its topic and payload.
#[tokio::test]
async fn w4_l5_pyzmq_publisher_beacons_ready_nothing_delivered_then_record_delivered() {
    let ep = free_tcp();
    let mut py = PyPeer::start(&script(PY_PUBLISHER), &[&ep]);
    py.until(STARTUP, "bound").await;

    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep.clone())];
    let s = Node::start(s).await.expect("subscriber");
    let mut es = Events::new(s.take_events().expect("events"));
    let no_delivery = |e: &NodeEvent| {
        assert!(
            !matches!(e, NodeEvent::Delivery(_)),
            "a beacon was delivered: {e:?}"
        );
    };
    es.wait(STEP, |e| {
        no_delivery(e);
        is_ready(e, &format!("sub {ep}"))
    })
    .await;

    // Ten more beacons go out on the now connected socket before the record.
    py.command("mark");
    let (mark, _) = py.until(STEP, "mark").await;
    let target = mark["mark"].as_u64().expect("count") + 10;
    loop {
        let (b, _) = py.until(STEP, "beacon").await;
        if b["beacon"].as_u64().expect("count") >= target {
            break;
        }
    }
    let (topic, payload) = (b"prices.eur", b"42.17");
    py.command(&format!(
        "publish {} {} {} 1",
        hex::encode(topic),
        hex::encode(payload),
        0x0102_0304_0506_0708_u64
    ));
    py.until(STEP, "published").await;

    // The first delivery is the record: none of the beacons before it was delivered.
    let ev = es.wait(STEP, |e| matches!(e, NodeEvent::Delivery(_))).await;
    let NodeEvent::Delivery(d) = ev else {
        unreachable!()
    };
    assert_eq!(&d.channel[..], topic);
    assert_eq!(&d.payload[..], payload);
    assert_eq!(
        d.source,
        Source::Publisher {
            endpoint: ep.as_str().into()
        }
    );
    let snap = s.snapshot().await.expect("snapshot");
    let link = snap
        .links
        .iter()
        .find(|l| l.endpoint == ep)
        .expect("subscription link");
    assert_eq!(link.state, ConnState::Ready, "{}", snap.to_table());
    assert_eq!(link.failure_count, 0, "{}", snap.to_table());
    // Beacons are not application records (L5): only the one record is counted.
    assert_eq!(link.records_received, 1, "{}", snap.to_table());
    s.shutdown().await.expect("shutdown");
}

/// MISSION W4, L4 (real time, bounded): a pyzmq SUB connected to a zmesh publisher receives
/// byte-exact beacons (exactly 2 frames `01 5A 4C 46 31` / `5A 46 01 01`): the one sent when
/// it joined (WIRE.md §7.1), then the grid's, two consecutive ones 5 s apart (4.5 s..5.5 s by
/// Python's monotonic clock).
#[tokio::test]
async fn w4_l4_pyzmq_subscriber_receives_exact_beacons_5s_apart() {
    let ep = free_tcp();
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep.clone()));
    let p = Node::start(p).await.expect("publisher");
    let mut py = PyPeer::start(&script(PY_SUBSCRIBER), &[&ep, "3"]);
    py.until(STARTUP, "connected").await;
    let mut times = Vec::new();
    for _ in 0..3 {
        // The node publishes nothing but beacons: every message must be one.
        let (m, _) = py.until(STEP, "message").await;
        let frames = hex_frames(&m["message"]);
        assert_eq!(
            frames,
            vec![BEACON_TOPIC.to_vec(), BEACON_PAYLOAD.to_vec()],
            "not the exact beacon: {m}"
        );
        assert_eq!(frames[0], [0x01, 0x5A, 0x4C, 0x46, 0x31]);
        assert_eq!(frames[1], [0x5A, 0x46, 0x01, 0x01]);
        times.push(m["t"].as_f64().expect("monotonic time"));
    }
    let first_tick = times[1] - times[0];
    assert!(
        first_tick <= 5.5,
        "the join's beacon, then a tick {first_tick:.3} s later"
    );
    let gap = times[2] - times[1];
    assert!((4.5..=5.5).contains(&gap), "beacons {gap:.3} s apart");
    p.shutdown().await.expect("shutdown");
}

/// MISSION W4, T2, L2, L3: a pyzmq DEALER speaking raw zmesh records (built from WIRE.md) to a
/// zmesh `[server]` is admitted with a WELCOME, answers zmesh's PROBEs with ACKs that zmesh
/// accepts (the next PROBE carries a new id, where an unanswered one would be resent with the
/// same id), gets an ACK for its own PROBE, and records flow both ways; zmesh's shutdown
/// reaches it as an orderly CLOSE.
#[tokio::test]
async fn w4_t2_pyzmq_dealer_admitted_answers_probes_records_both_ways() {
    let ep = free_tcp();
    let mut c = NodeConfig::new("srv");
    c.memberships = vec![Membership {
        role: Role::Server,
        channel: "orders".into(),
    }];
    c.server = Some(Endpoint::new(ep.clone()));
    let srv = Node::start(c).await.expect("server");
    let mut es = Events::new(srv.take_events().expect("events"));
    let py_generation = 0x0102_0304_0506_0708_u64;
    let mut py = PyPeer::start(
        &script(PY_DEALER),
        &[&ep, "py-client", "srv", &py_generation.to_string()],
    );

    let (w, before) = py.until(STARTUP, "welcome").await;
    assert!(before.iter().all(|v| v.get("sent").is_some()), "{before:?}");
    let w = &w["welcome"];
    assert_eq!(w["lane"], 3, "{w}");
    assert_eq!(w["rid"], "srv", "{w}");
    assert_eq!(w["generation"].as_u64(), Some(srv.generation()), "{w}");
    assert_eq!(w["security_identity"], "srv", "{w}");
    assert_eq!(w["memberships"], serde_json::json!([[1, "orders"]]), "{w}");
    assert_eq!(w["exact"], true, "{w}");

    es.wait(STEP, |e| is_ready(e, "inbound py-client client_server"))
        .await;
    let ev = es.wait(STEP, |e| matches!(e, NodeEvent::Delivery(_))).await;
    let NodeEvent::Delivery(d) = ev else {
        unreachable!()
    };
    assert_eq!(
        d.source,
        Source::Client {
            rid: "py-client".into()
        }
    );
    assert_eq!(&d.channel[..], b"orders");
    assert_eq!(&d.payload[..], b"from python");
    srv.send("py-client", "orders", "to python")
        .await
        .expect("server -> python");

    // Probes come every 5 s from ready: two of them within 15 s.
    let (mut probes, mut acks, mut messages) = (Vec::new(), Vec::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + STEP;
    while probes.len() < 2 || acks.is_empty() || messages.is_empty() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let v = py.next(left).await;
        if let Some(id) = v.get("probe") {
            probes.push(id.as_u64().expect("probe id"));
        } else if let Some(id) = v.get("ack") {
            acks.push(id.as_u64().expect("ack id"));
        } else if v.get("message").is_some() {
            messages.push(v);
        } else {
            panic!("unexpected from the Python peer: {v}");
        }
    }
    assert_ne!(
        probes[0], probes[1],
        "the same probe id again: zmesh did not accept the ACK"
    );
    assert_eq!(acks, vec![77], "zmesh must echo the peer's probe id once");
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["message"], "orders");
    assert_eq!(messages[0]["payload"], hex::encode("to python"));
    assert_eq!(messages[0]["exact"], true);

    let snap = srv.snapshot().await.expect("snapshot");
    let link = snap.peer("py-client").next().expect("inbound link");
    assert_eq!(link.state, ConnState::Ready, "{}", snap.to_table());
    assert_eq!(link.failure_count, 0, "{}", snap.to_table());
    assert_eq!(link.peer_generation, Some(py_generation));
    // Probes and ACKs never reach the application (L3): one delivery only.
    assert!(es
        .drain_now()
        .iter()
        .all(|e| !matches!(e, NodeEvent::Delivery(_))));

    srv.shutdown().await.expect("shutdown");
    let (close, _) = py.until(STEP, "close").await;
    assert_eq!(close["close"], 1, "CLOSE reason Shutdown: {close}");
}

/// A pyzmq DEALER that keeps one socket, as other implementations do: it sends its HELLO
/// (WIRE.md §5.1) and reports how long the WELCOME took, then answers PROBEs until stdin
/// closes.
const PY_HONEST_DEALER: &str = r#"
ep, rid, expect_rid = sys.argv[1], sys.argv[2], sys.argv[3]
ctx = zmq.Context()
d = ctx.socket(zmq.DEALER)
d.linger = 0
t0 = time.monotonic()
d.connect(ep)
d.send(envelope(0x01) + bytes([3]) + string(rid) + u64(7) + string("")
       + string(expect_rid) + u64(0) + u64(0) + u16(0))
commands = stdin_commands()
while time.monotonic() < DEADLINE:
    try:
        if commands.get_nowait() is None:
            break
    except queue.Empty:
        pass
    if not d.poll(100):
        continue
    f0 = d.recv_multipart()[0]
    if f0[:4] == envelope(0x02):
        emit(welcome_after_s=time.monotonic() - t0)
    elif f0[:4] == envelope(0x04):
        d.send(envelope(0x05) + f0[4:12])
"#;

/// MISSION W4, F2: silent connections held open below the unadmitted cap (20, then 200 raw
/// libzmq DEALERs that completed their ZMTP handshake and never send a HELLO) cost an honest
/// client nothing: a pyzmq DEALER that keeps one socket gets its WELCOME, and a zmesh client
/// is ready, at once (well within a second, nowhere near a 15 s handshake deadline).
#[tokio::test]
async fn w4_f2_honest_clients_admitted_at_once_beside_200_silent_dealers() {
    const AT_ONCE: Duration = Duration::from_secs(2);
    let ep = free_tcp();
    let mut c = NodeConfig::new("srv");
    c.memberships = vec![Membership {
        role: Role::Server,
        channel: "orders".into(),
    }];
    c.server = Some(Endpoint::new(ep.clone()));
    assert!(
        c.max_unadmitted > 200,
        "the default cap is above the test's 200"
    );
    let srv = Node::start(c).await.expect("server");
    let ctx = zmq::Context::new();
    let mut silent: Vec<(zmq::Socket, zmq::Socket)> = Vec::new();
    for held in [20, 200] {
        let before = silent.len();
        while silent.len() < held {
            silent.push(monitored_dealer(&ctx, &ep, silent.len()));
        }
        // Every one of them is an open, unadmitted connection of the server's endpoint.
        for (_, mon) in &silent[before..] {
            monitor_wait(mon, &[zmq::SocketEvent::HANDSHAKE_SUCCEEDED], STEP);
        }
        let rid = format!("py-{held}");
        let mut py = PyPeer::start(&script(PY_HONEST_DEALER), &[&ep, &rid, "srv"]);
        let (w, _) = py.until(STARTUP, "welcome_after_s").await;
        let took = w["welcome_after_s"].as_f64().expect("seconds");
        assert!(
            took < AT_ONCE.as_secs_f64(),
            "{held} silent: pyzmq's WELCOME after {took:.3} s"
        );

        let mut cli = NodeConfig::new(format!("cli-{held}"));
        cli.servers = vec![zmesh::config::ServerConfig::new("orders", ep.clone()).rid("srv")];
        let t0 = std::time::Instant::now();
        let cli = Node::start(cli).await.expect("client");
        let mut events = Events::new(cli.take_events().expect("events"));
        events.wait(STEP, |e| is_ready(e, "server orders")).await;
        let took = t0.elapsed();
        assert!(
            took < AT_ONCE,
            "{held} silent: the zmesh client ready after {took:?}"
        );
        cli.shutdown().await.expect("client shutdown");
        drop(py);
    }
    // Each silent socket closes before its monitor (a monitor closed first can keep libzmq's
    // reaper waiting).
    for raw in silent {
        close_monitored(raw, STEP);
    }
    srv.shutdown().await.expect("shutdown");
}
