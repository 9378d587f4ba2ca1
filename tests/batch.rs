//! MISSION K5 (batching) on the wire, against pyzmq peers that build every record byte by
//! byte from WIRE.md (nothing of zmesh's codec is used on the Python side):
//! - a BATCH of 2 or 64 calls sent to a zmesh server, on ClientServer and on a RouteMesh
//!   Application lane, gets one ACCEPT and one REPLY per call; a BATCH of 257 calls gets one
//!   REPLY `InvalidParams` per call and no ACCEPT (never dropped, never run);
//! - zmesh's own sender puts calls issued together into BATCHes of 2..=64 (a lone call is
//!   never wrapped), and sends only lone REQUESTs to a server configured `batch_calls = false`.
//!
//! Each Python peer stops by itself after at most [`PY_LIFETIME_S`] seconds; every wait of
//! the Rust side is bounded.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{free_tcp, mesh_server, py_script, server_of, Events, PyPeer};
use serde_json::Value;
use zmesh::config::{Endpoint, NodeConfig, RouteMeshBind, ServerConfig};
use zmesh::proto::state::ConnState;
use zmesh::runtime::calls::{CallOptions, Request, ServeError};
use zmesh::runtime::service::{Method, Service};
use zmesh::runtime::Node;

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(15);
/// The first line of a Python peer (interpreter start and `import zmq` under load).
const STARTUP: Duration = Duration::from_secs(60);
/// A Python peer never outlives this (seconds).
const PY_LIFETIME_S: u32 = 90;

/// Shared by the calling peers: a REQUEST of channel `orders` (query, no ttl, no key) and a
/// BATCH of `n` such calls numbered from `first`, method `echo`, payload one byte `i % 128`
/// (its own MessagePack positive fixint); the records it reports.
const PY_CALLS: &str = r#"
def request(call_id, method):
    return (envelope(0x07) + u64(call_id) + u64(0) + bytes([1]) + string("orders")
            + string(method) + string(""))

def batch(n, first):
    frames = [envelope(0x0C) + u16(n)]
    for i in range(n):
        frames += [request(first + i, "echo"), bytes([i % 128])]
    return frames

def report(sock_send, frames):
    """Acts on one record (routing frames removed): ACK probes, report the rest."""
    f0 = frames[0]
    if len(f0) < 4 or f0[:3] != bytes([0x5A, 0x4D, 0x01]):
        emit(unexpected=[f.hex() for f in frames])
        return None
    kind, r = f0[3], Reader(f0[4:])
    if kind == 0x02:
        return "welcome"
    if kind == 0x04 and len(frames) == 1:
        sock_send([envelope(0x05) + f0[4:12]])
    elif kind == 0x08 and len(frames) == 1:
        emit(accept=r.u64())
    elif kind == 0x09 and len(frames) == 2:
        call_id, code = r.u64(), r.u8()
        emit(reply=call_id, code=code, payload=frames[1].hex())
    elif kind in (0x05,):
        pass
    else:
        emit(unexpected=[f.hex() for f in frames])
    return None
"#;

/// A pyzmq DEALER on the ClientServer lane: HELLO, then on `batch N FIRST` one BATCH.
const PY_BATCH_DEALER: &str = r#"
ep, rid, generation = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = zmq.Context()
d = ctx.socket(zmq.DEALER)
d.linger = 0
d.connect(ep)
d.send(envelope(0x01) + bytes([3]) + string(rid) + u64(generation) + string("") + string("")
       + u64(0) + u64(0) + u16(0))
commands = stdin_commands()
while time.monotonic() < DEADLINE:
    while True:
        try:
            cmd = commands.get_nowait()
        except queue.Empty:
            break
        if cmd is None:
            sys.exit(0)
        if cmd[0] == "batch":
            d.send_multipart(batch(int(cmd[1]), int(cmd[2])))
            emit(sent=int(cmd[1]))
    if d.poll(20):
        if report(d.send_multipart, d.recv_multipart()) == "welcome":
            emit(welcome=True)
"#;

/// A pyzmq RouteMesh peer: one dialling ROUTER per lane (HELLO on each once its ZMTP
/// handshake is done, found with ROUTER_MANDATORY), Object Client of `orders`; on
/// `batch N FIRST` one BATCH on the Application lane; answers arrive on the Completion lane.
const PY_BATCH_MESH: &str = r#"
app_ep, comp_ep, rid, generation = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ctx = zmq.Context()
def dial(ep, me):
    s = ctx.socket(zmq.ROUTER)
    s.linger = 0
    s.setsockopt(zmq.ROUTING_ID, me)
    s.setsockopt(zmq.ROUTER_MANDATORY, 1)
    s.connect(ep)
    return s
def hello(lane):
    return (envelope(0x01) + bytes([lane]) + string(rid) + u64(generation) + string("")
            + string("") + u64(0) + u64(0) + u16(1) + bytes([2]) + string("orders"))
def send_when_routable(s, peer, frames):
    while time.monotonic() < DEADLINE:
        try:
            s.send_multipart([peer] + frames)
            return
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:
                raise
            time.sleep(0.005)
app = dial(app_ep, b"py-app")
comp = dial(comp_ep, b"py-comp")
APP, COMP = b"zmesh-application", b"zmesh-completion"
send_when_routable(app, APP, [hello(1)])
send_when_routable(comp, COMP, [hello(2)])
welcomed = set()
commands = stdin_commands()
poller = zmq.Poller()
poller.register(app, zmq.POLLIN)
poller.register(comp, zmq.POLLIN)
while time.monotonic() < DEADLINE:
    while True:
        try:
            cmd = commands.get_nowait()
        except queue.Empty:
            break
        if cmd is None:
            sys.exit(0)
        if cmd[0] == "batch":
            app.send_multipart([APP] + batch(int(cmd[1]), int(cmd[2])))
            emit(sent=int(cmd[1]))
    for s, _ in poller.poll(20):
        frames = s.recv_multipart()
        peer = frames[0]
        send = lambda fs, s=s, peer=peer: s.send_multipart([peer] + fs)
        if report(send, frames[1:]) == "welcome":
            welcomed.add(s)
            if len(welcomed) == 2:
                emit(welcome=True)
"#;

/// A pyzmq ROUTER playing a ClientServer server of `orders`: WELCOMEs every HELLO, ACKs
/// probes, reports every REQUEST (`request=[id]`) and BATCH (`batch=[ids]`) it receives and
/// answers each call with ACCEPT and REPLY Ok echoing its payload.
const PY_ROUTER_SERVER: &str = r#"
ep, generation = sys.argv[1], int(sys.argv[2])
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.linger = 0
s.bind(ep)
emit(bound=ep)
def call_id_of(env):
    r = Reader(env[4:])
    return r.u64()
def answer(peer, env, payload):
    cid = call_id_of(env)
    s.send_multipart([peer, envelope(0x08) + u64(cid) + u64(generation) + u64(1)])
    s.send_multipart([peer, envelope(0x09) + u64(cid) + bytes([0]), payload])
    return cid
while time.monotonic() < DEADLINE:
    if not s.poll(50):
        continue
    frames = s.recv_multipart()
    peer, rec = frames[0], frames[1:]
    f0 = rec[0]
    kind = f0[3] if len(f0) >= 4 else None
    if kind == 0x01:
        s.send_multipart([peer, envelope(0x02) + bytes([3]) + string("pysrv") + u64(generation)
                          + string("") + u16(1) + bytes([1]) + string("orders")])
        emit(hello=True)
    elif kind == 0x04:
        s.send_multipart([peer, envelope(0x05) + f0[4:12]])
    elif kind == 0x07 and len(rec) == 2:
        emit(request=[answer(peer, f0, rec[1])])
    elif kind == 0x0C:
        n = Reader(f0[4:]).u16()
        ok = len(rec) == 1 + 2 * n
        ids = [answer(peer, rec[1 + 2 * i], rec[2 + 2 * i]) for i in range(n)] if ok else []
        emit(batch=ids, count=n, exact=ok)
    elif kind in (0x05, 0x0B):
        pass
    else:
        emit(unexpected=[f.hex() for f in rec])
"#;

fn script(body: &str) -> String {
    py_script(&(PY_CALLS.to_owned() + body), PY_LIFETIME_S)
}

/// A server of `orders` whose `echo` (a query: the Python callers pin that semantics)
/// answers its raw arguments.
async fn echo_server(cfg: NodeConfig) -> Node {
    let orders = Service::new("orders").method(Method::query("echo"), |req: Request| async move {
        Ok::<_, ServeError>(req.raw_args().clone())
    });
    Node::builder(cfg)
        .expose(orders)
        .start()
        .await
        .expect("server")
}

/// What the Python peer reported for one BATCH of `n` calls numbered from `first`: ACCEPTed
/// ids (in arrival order) and REPLYs by id (code, payload hex).
async fn batch_answers(
    py: &mut PyPeer,
    n: usize,
    first: u64,
) -> (Vec<u64>, BTreeMap<u64, (u64, String)>) {
    py.command(&format!("batch {n} {first}"));
    let (mut accepts, mut replies) = (Vec::new(), BTreeMap::new());
    let deadline = tokio::time::Instant::now() + STEP;
    while replies.len() < n {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(
            !left.is_zero(),
            "{} of {n} replies within {STEP:?}",
            replies.len()
        );
        let v = py.next(left).await;
        if let Some(id) = v.get("accept").and_then(Value::as_u64) {
            assert!(!replies.contains_key(&id), "ACCEPT of {id} after its REPLY");
            accepts.push(id);
        } else if let Some(id) = v.get("reply").and_then(Value::as_u64) {
            let code = v["code"].as_u64().expect("code");
            let payload = v["payload"].as_str().expect("payload").to_owned();
            assert!(
                replies.insert(id, (code, payload)).is_none(),
                "two REPLYs for call {id}"
            );
        } else if v.get("sent").is_none() {
            panic!("unexpected from the Python peer: {v}");
        }
    }
    (accepts, replies)
}

/// Checks the answers to BATCHes of 2, 64 and 257 calls (K5).
async fn check_batches(py: &mut PyPeer) {
    for (n, first) in [(2usize, 1_000u64), (64, 2_000)] {
        let (accepts, replies) = batch_answers(py, n, first).await;
        let ids: BTreeSet<u64> = (first..first + n as u64).collect();
        assert_eq!(accepts.iter().copied().collect::<BTreeSet<_>>(), ids);
        assert_eq!(accepts.len(), n, "one ACCEPT per call");
        for (i, id) in ids.iter().enumerate() {
            let (code, payload) = &replies[id];
            assert_eq!(*code, 0, "call {id} of a BATCH of {n}: code {code}");
            assert_eq!(payload, &format!("{:02x}", i % 128), "call {id}");
        }
    }
    let n = 257;
    let (accepts, replies) = batch_answers(py, n, 10_000).await;
    assert!(
        accepts.is_empty(),
        "a BATCH over 256 calls is not dispatched"
    );
    assert_eq!(
        replies.len(),
        n,
        "every call of the oversized BATCH answered"
    );
    for (id, (code, payload)) in &replies {
        assert_eq!(*code, 8, "call {id}: InvalidParams");
        let text = String::from_utf8(hex::decode(payload).expect("hex")).expect("utf-8");
        assert!(text.contains("256"), "{text}");
    }
}

/// MISSION K5, C1: a pyzmq ClientServer client sends BATCHes of 2, 64 and 257 calls to a
/// zmesh server; every call gets exactly one answer (ACCEPT then REPLY Ok for 2 and 64;
/// REPLY InvalidParams without ACCEPT for each of the 257), and the link stays ready.
#[tokio::test]
async fn k5_pyzmq_client_batches_of_2_64_257_every_call_answered() {
    let ep = free_tcp();
    let mut c = NodeConfig::new("srv");
    c.memberships = server_of("orders");
    c.server = Some(Endpoint::new(ep.clone()));
    let srv = echo_server(c).await;
    let mut py = PyPeer::start(
        &script(PY_BATCH_DEALER),
        &[&ep, "py-client", &0x0A0B_u64.to_string()],
    );
    py.until(STARTUP, "welcome").await;
    check_batches(&mut py).await;
    let snap = srv.snapshot().await.expect("snapshot");
    let link = snap.peer("py-client").next().expect("inbound link");
    assert_eq!(link.state, ConnState::Ready, "{}", snap.to_table());
    assert_eq!(link.failure_count, 0, "{}", snap.to_table());
    srv.shutdown().await.expect("shutdown");
}

/// MISSION K5, C1, T1: the same on a RouteMesh pair: the BATCH travels on the Application
/// lane, the ACCEPTs and REPLYs on the Completion lane.
#[tokio::test]
async fn k5_pyzmq_mesh_peer_batches_on_application_lane_every_call_answered() {
    let bind = RouteMeshBind::new(free_tcp(), free_tcp());
    let c = mesh_server("srv", "orders", &bind);
    let srv = echo_server(c).await;
    let mut py = PyPeer::start(
        &script(PY_BATCH_MESH),
        &[
            &bind.application,
            &bind.completion,
            "py-peer",
            &0x0C0D_u64.to_string(),
        ],
    );
    py.until(STARTUP, "welcome").await;
    check_batches(&mut py).await;
    let snap = srv.snapshot().await.expect("snapshot");
    for link in snap.peer("py-peer") {
        assert_eq!(link.state, ConnState::Ready, "{}", snap.to_table());
        assert_eq!(link.failure_count, 0, "{}", snap.to_table());
    }
    srv.shutdown().await.expect("shutdown");
}

/// A zmesh client of the Python server at `ep`, ready.
async fn client_of_py(ep: &str, batch_calls: bool) -> (Node, Events) {
    let server = ServerConfig::new("orders", ep.to_owned())
        .rid("pysrv")
        .batch_calls(batch_calls);
    common::start_client_of("cli", server).await
}

/// Issues `n` calls at once (one task each) and checks every answer.
async fn concurrent_calls(node: &Node, n: usize) {
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (node, done) = (node.clone(), done.clone());
        tasks.spawn(async move {
            let arg = Bytes::from(vec![(i % 128) as u8]);
            let got = node
                .call_raw("orders", "echo", arg.clone(), CallOptions::default())
                .await;
            assert_eq!(got.as_ref(), Ok(&arg), "call {i}");
            done.fetch_add(1, Ordering::Relaxed);
        });
    }
    tokio::time::timeout(STEP, async {
        while let Some(r) = tasks.join_next().await {
            r.expect("call task");
        }
    })
    .await
    .expect("calls answered in time");
    assert_eq!(done.load(Ordering::Relaxed), n);
}

/// The messages the Python server reported for `calls` call ids: (lone REQUESTs, BATCH sizes).
async fn wire_messages(py: &mut PyPeer, calls: usize) -> (usize, Vec<usize>) {
    let (mut lone, mut batches, mut seen) = (0, Vec::new(), 0);
    while seen < calls {
        let v = py.next(STEP).await;
        if let Some(ids) = v.get("request").and_then(Value::as_array) {
            assert_eq!(ids.len(), 1);
            lone += 1;
            seen += 1;
        } else if let Some(ids) = v.get("batch").and_then(Value::as_array) {
            assert_eq!(v["exact"], true, "BATCH frame count: {v}");
            batches.push(ids.len());
            seen += ids.len();
        } else {
            assert!(v.get("unexpected").is_none(), "{v}");
        }
    }
    assert_eq!(seen, calls, "no call twice");
    (lone, batches)
}

/// MISSION K5: calls issued together by a zmesh client reach the (pyzmq) server in BATCHes of
/// 2..=64 calls, checked on the wire; every call is answered. How many the I/O thread finds
/// queued in one turn depends on scheduling, so a round of 150 concurrent calls is repeated
/// (at most 5 times) until one BATCH was seen; every round must keep the rules.
#[tokio::test]
async fn k5_zmesh_sender_batches_calls_issued_together_and_splits_above_64() {
    let ep = free_tcp();
    let mut py = PyPeer::start(&script(PY_ROUTER_SERVER), &[&ep, &0x0E0F_u64.to_string()]);
    py.until(STARTUP, "bound").await;
    let (node, _events) = client_of_py(&ep, true).await;
    py.until(STEP, "hello").await;
    let mut batched = Vec::new();
    for _round in 0..5 {
        concurrent_calls(&node, 150).await;
        let (_lone, batches) = wire_messages(&mut py, 150).await;
        for &b in &batches {
            assert!((2..=64).contains(&b), "a BATCH of {b} calls");
        }
        batched.extend(batches);
        if !batched.is_empty() {
            break;
        }
    }
    assert!(
        !batched.is_empty(),
        "no BATCH in 5 rounds of 150 concurrent calls"
    );
    node.shutdown().await.expect("shutdown");
}

/// MISSION K5: with `batch_calls = false` for a server (a peer built before BATCH), every
/// call travels as a lone REQUEST.
#[tokio::test]
async fn k5_batch_calls_false_sends_only_lone_requests() {
    let ep = free_tcp();
    let mut py = PyPeer::start(&script(PY_ROUTER_SERVER), &[&ep, &0x0E10_u64.to_string()]);
    py.until(STARTUP, "bound").await;
    let (node, _events) = client_of_py(&ep, false).await;
    py.until(STEP, "hello").await;
    concurrent_calls(&node, 150).await;
    let (lone, batches) = wire_messages(&mut py, 150).await;
    assert_eq!((lone, batches.len()), (150, 0));
    node.shutdown().await.expect("shutdown");
}

/// MISSION K5, X3, X4 (WIRE.md §4.14): toward a server that announces capability `calls`,
/// calls of one method issued together travel as CALLS records of 2..=64 calls (the shared
/// header said once), never as BATCHes; each is answered on its own. The server is a raw
/// libzmq ROUTER using this crate's codec with `calls` in effect.
#[tokio::test]
async fn k5_x3_x4_calls_of_one_method_travel_as_calls_records_where_negotiated() {
    use common::{raw_router, raw_send, raw_welcome};
    use zmesh::proto::wire::{Accept, Capabilities, Record, Reply, ReplyCode};
    let ctx = zmq::Context::new();
    let (server, ep) = raw_router(&ctx, 15_000);
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<(&'static str, usize)>();
    let serving = tokio::task::spawn_blocking(move || {
        let send = |route: &[u8], rec: Record| raw_send(&server, route, rec);
        let mut caps = Capabilities::NONE;
        loop {
            let Ok(mut frames) = server.recv_multipart(0) else {
                return;
            };
            let route = frames.remove(0);
            let rec = Record::decode_in(&frames, caps, |f| Bytes::copy_from_slice(f))
                .expect("a record the negotiated capabilities allow");
            let requests = match rec {
                Record::Hello(h) => {
                    let offered = h
                        .memberships
                        .iter()
                        .any(|m| m.channel.as_str() == "\0calls");
                    assert!(offered, "the client offers calls");
                    caps = Capabilities::CALLS;
                    send(&route, raw_welcome("orders", &["calls"]));
                    continue;
                }
                Record::Probe { id } => {
                    send(&route, Record::Ack { id });
                    continue;
                }
                Record::Request(r) => {
                    let _ = seen_tx.send(("request", 1));
                    vec![r]
                }
                Record::Batch(b) => {
                    let _ = seen_tx.send(("batch", b.requests().len()));
                    b.into_requests()
                }
                Record::Calls(c) => {
                    let _ = seen_tx.send(("calls", c.requests().len()));
                    c.into_requests()
                }
                Record::Close { .. } => return,
                _ => continue,
            };
            for r in requests {
                let accept = Record::Accept(Accept {
                    call_id: r.call_id,
                    generation: std::num::NonZeroU64::MIN,
                    connection_id: 0,
                });
                let reply = Record::Reply(Reply {
                    call_id: r.call_id,
                    code: ReplyCode::Ok,
                    payload: r.payload,
                    replayed: false,
                });
                if !(send(&route, accept) && send(&route, reply)) {
                    return;
                }
            }
        }
    });
    let mut c = NodeConfig::new("cli");
    c.servers = vec![ServerConfig::new("orders", ep.clone()).rid("srv")];
    let node = Node::start(c).await.expect("client");
    node.ready(zmesh::runtime::Target::server("orders"))
        .await
        .expect("ready");
    let mut grouped = Vec::new();
    for _round in 0..5 {
        concurrent_calls(&node, 150).await;
        let mut calls = 0;
        while calls < 150 {
            let (kind, n) = tokio::time::timeout(STEP, seen.recv())
                .await
                .expect("the server saw the calls")
                .expect("server");
            assert_ne!(kind, "batch", "calls of one method go as CALLS, not BATCH");
            if kind == "calls" {
                assert!((2..=64).contains(&n), "a CALLS record of {n} calls");
                grouped.push(n);
            }
            calls += n;
        }
        assert_eq!(calls, 150, "no call twice");
        if !grouped.is_empty() {
            break;
        }
    }
    assert!(!grouped.is_empty(), "no CALLS record in 5 rounds");
    node.shutdown().await.expect("shutdown");
    serving.await.expect("server thread");
}

/// What a raw libzmq ClientServer client (this crate's codec, HELLO offering `answers` when
/// `offer`) saw for one BATCH of `n` calls of `orders`.`echo` to a zmesh server: the ACCEPTed
/// and the answered ids in arrival order, each REPLY's payload, how many messages carried
/// them and how many of those were ANSWERS records.
struct Answered {
    accepts: Vec<u64>,
    replies: BTreeMap<u64, Bytes>,
    messages: usize,
    packed: usize,
}

fn raw_client_batch(ep: &str, offer: bool, n: u64) -> Answered {
    use zmesh::proto::wire::{self, Batch, Capabilities, Name, Record};
    let ctx = zmq::Context::new();
    let (rid, offered): (&str, &[&str]) = if offer {
        ("raw-v2", &["answers"])
    } else {
        ("raw-v1", &[])
    };
    let d = common::raw_client(&ctx, ep, rid, "orders", offered);
    let caps = if offer {
        Capabilities::ANSWERS
    } else {
        Capabilities::NONE
    };
    let recv = || common::raw_recv(&d, caps).1;
    let Record::Welcome(w) = recv() else {
        panic!("no WELCOME")
    };
    let announced = w
        .memberships
        .iter()
        .any(|m| m.channel.as_str() == "\0answers");
    assert_eq!(
        announced, offer,
        "the server announces only what was offered"
    );
    let requests = (1..=n)
        .map(|i| wire::Request {
            call_id: std::num::NonZeroU64::new(i).expect("id"),
            ttl_ms: None,
            semantics: wire::Semantics::Query,
            channel: Name::new("orders").expect("channel"),
            method: Name::new("echo").expect("method"),
            idempotency_key: None,
            payload: Bytes::from(vec![u8::try_from(i % 128).expect("fixint")]),
        })
        .collect();
    let batch = Record::Batch(Batch::new(requests).expect("batch"));
    d.send_multipart(batch.encode().iter(), 0).expect("batch");
    let mut seen = Answered {
        accepts: Vec::new(),
        replies: BTreeMap::new(),
        messages: 0,
        packed: 0,
    };
    while (seen.replies.len() as u64) < n {
        let records = match recv() {
            Record::Probe { id } => {
                d.send_multipart(Record::Ack { id }.encode().iter(), 0)
                    .expect("ack");
                continue;
            }
            Record::Answers(a) => {
                seen.packed += 1;
                a.into_records().collect()
            }
            other => vec![other],
        };
        seen.messages += 1;
        for r in records {
            match r {
                Record::Accept(a) => seen.accepts.push(a.call_id.get()),
                Record::Reply(r) => {
                    let id = r.call_id.get();
                    assert!(
                        seen.accepts.contains(&id),
                        "REPLY of {id} before its ACCEPT"
                    );
                    assert_eq!(r.code, wire::ReplyCode::Ok, "call {id}");
                    assert!(seen.replies.insert(id, r.payload).is_none(), "two REPLYs");
                }
                other => panic!("not an answer: {other:?}"),
            }
        }
    }
    seen
}

/// MISSION K5, X3, X4 (WIRE.md §4.16): the answers of a BATCH of 64 calls to a zmesh server
/// travel as ANSWERS records toward a client that offered `answers`, standing for exactly
/// one ACCEPT and one REPLY per call (ACCEPT first), in fewer messages than records; a
/// version-1 client gets exactly the version-1 ACCEPT and REPLY records.
#[tokio::test]
async fn k5_x3_x4_answers_travel_packed_only_where_negotiated() {
    let ep = free_tcp();
    let mut c = NodeConfig::new("srv");
    c.memberships = server_of("orders");
    c.server = Some(Endpoint::new(ep.clone()));
    let srv = echo_server(c).await;
    for offer in [true, false] {
        let e = ep.clone();
        let seen = tokio::task::spawn_blocking(move || raw_client_batch(&e, offer, 64))
            .await
            .expect("raw client");
        let ids: Vec<u64> = (1..=64).collect();
        let mut accepted = seen.accepts.clone();
        accepted.sort_unstable();
        assert_eq!(accepted, ids, "one ACCEPT per call (offer {offer})");
        for (id, payload) in &seen.replies {
            assert_eq!(payload.as_ref(), [u8::try_from(id % 128).expect("fixint")]);
        }
        if offer {
            assert!(seen.packed > 0, "no ANSWERS record");
            assert!(
                seen.messages * 2 <= 128,
                "{} messages for 128 answers",
                seen.messages
            );
        } else {
            assert_eq!(seen.packed, 0);
            assert_eq!(seen.messages, 128, "one message per answer in version 1");
        }
    }
    srv.shutdown().await.expect("shutdown");
}
