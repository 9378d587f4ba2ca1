//! Bounded input before admission, and authorization, with real sockets (MISSION W3, K6).
//!
//! - The 800 MB scenario: three pyzmq DEALERs each send one 800 MB frame before any HELLO to a
//!   `zmesh node` process; libzmq drops each of those connections as it reads the frame's
//!   length (`max_frame_size`, 16 MiB by default), the node's peak RSS (`VmHWM`) stays within
//!   64 MB of what it was before, and an admitted client is unaffected.
//! - The gate of a bound endpoint: garbage is refused (REJECT, counted by reason, in the
//!   snapshot's recent refusals), a connection that fails its transport handshake too, and at
//!   `max_unadmitted` silent connections a new connection is refused in its transport
//!   handshake while admitted peers keep working; once one silent connection goes, a new one
//!   gets through.
//!
//! - authorize() per call (K6): `Unauthorized` and `Forbidden` reach the caller as did-not-run,
//!   each call of a BATCH is authorized on its own.
//!
//! Memory is asserted, never time; every wait is bounded.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    close_monitored, free_tcp, monitor_wait, monitored_dealer, py_script, Events, PyPeer,
};
use zmesh::config::{Endpoint, NodeConfig, RouteMeshBind, ServerConfig};
use zmesh::proto::security::InputRefusal;
use zmesh::proto::state::{ConnState, FailureReason};
use zmesh::runtime::calls::{encode, may_have_run, CallError, RemoteCode, Request};
use zmesh::runtime::security::Denied;
use zmesh::runtime::service::{Method, Service};
use zmesh::runtime::{Node, NodeEvent};

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(20);
/// A Python peer never outlives this (seconds).
const PY_LIFETIME_S: u32 = 120;
/// The bound the issue sets on the node's peak RSS growth.
const RSS_MARGIN_KB: u64 = 64 * 1024;

/// Three DEALERs that never reconnect: each completes the ZMTP handshake, then all three send
/// one frame of `size` bytes (the same buffer, not copied) before any zmesh record; reports
/// when every one of them was disconnected.
const PY_FLOOD: &str = r#"
from zmq.utils.monitor import recv_monitor_message
ep, size, n = sys.argv[1], int(sys.argv[2]), 3
ctx = zmq.Context()
payload = bytearray(size)
socks = []
for i in range(n):
    d = ctx.socket(zmq.DEALER)
    d.linger = 0
    d.setsockopt(zmq.RECONNECT_IVL, -1)
    mon = d.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    d.connect(ep)
    socks.append((d, mon))
def wait_for(mon, event):
    while time.monotonic() < DEADLINE:
        if mon.poll(100):
            if recv_monitor_message(mon)["event"] == event:
                return True
    return False
for d, mon in socks:
    if not wait_for(mon, zmq.EVENT_HANDSHAKE_SUCCEEDED):
        emit(error="no handshake")
        sys.exit(1)
emit(connected=n)
for d, mon in socks:
    d.send(payload, copy=False)
emit(sent=n)
for d, mon in socks:
    if not wait_for(mon, zmq.EVENT_DISCONNECTED):
        emit(error="not dropped")
        sys.exit(1)
emit(dropped=n)
"#;

/// The peak resident set (`VmHWM`, kB) of process `pid`.
fn vm_hwm_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// A line-by-line reader of a child's stdout with bounded waits.
struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    fn of(stdout: std::process::ChildStdout) -> Lines {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines(rx)
    }

    /// The first ndjson line matching `pred`, within [`STEP`].
    fn wait(&self, what: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = std::time::Instant::now() + STEP;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .0
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what} from the node within {STEP:?}"));
            let v: serde_json::Value = serde_json::from_str(&line).expect("ndjson");
            if pred(&v) {
                return v;
            }
        }
    }
}

/// Kills the child when dropped, so a failed assertion leaves no node behind.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn is_ready(ev: &NodeEvent) -> bool {
    matches!(ev, NodeEvent::State(s) if s.state == ConnState::Ready)
}

/// MISSION W3, the 800 MB test: three pyzmq DEALERs each send one 800 MB frame to
/// a `zmesh node` before any handshake record; each connection is dropped, the node's peak
/// RSS stays within 64 MB of its baseline, and an admitted client stays ready and is served.
/// Cheap at full size: libzmq refuses each frame at its length field, so the 800 MB never
/// cross the loopback.
#[tokio::test]
async fn w3_800mb_frames_before_hello_cost_no_memory_and_spare_other_peers() {
    let server_ep = free_tcp();
    let mut cfg = NodeConfig::new("guarded");
    cfg.server = Some(Endpoint::new(server_ep.clone()));
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-sec-")
        .tempdir()
        .expect("dir");
    let dir = tmp.path();
    let path = dir.join("guarded.toml");
    std::fs::write(&path, toml::to_string(&cfg).expect("toml")).expect("write");
    let mut node = Child(
        Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args(["node", "--events", "ndjson", "--config"])
            .arg(&path)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn zmesh node"),
    );
    let pid = node.0.id();
    let lines = Lines::of(node.0.stdout.take().expect("stdout"));

    // An admitted client, ready before the flood.
    let mut c = NodeConfig::new("client");
    c.servers = vec![ServerConfig::new("orders", server_ep.clone()).rid("guarded")];
    let client = Node::start(c).await.expect("client");
    let mut events = Events::new(client.take_events().expect("events"));
    events.wait(STEP, is_ready).await;
    lines.wait("the client's inbound link ready", |v| {
        v["event"] == "state" && v["state"] == "ready"
    });
    let baseline = vm_hwm_kb(pid);

    let mut flood = PyPeer::start(
        &py_script(PY_FLOOD, PY_LIFETIME_S),
        &[&server_ep, &(800u64 << 20).to_string()],
    );
    let (dropped, before) = flood.until(Duration::from_secs(90), "dropped").await;
    assert!(
        before.iter().all(|v| v.get("error").is_none()),
        "{before:?}"
    );
    assert_eq!(
        dropped["dropped"], 3,
        "every flooding connection was closed"
    );
    let peak = vm_hwm_kb(pid);
    assert!(
        peak <= baseline + RSS_MARGIN_KB,
        "peak RSS {peak} kB, baseline {baseline} kB: more than 64 MB for three 800 MB frames"
    );

    // The admitted client never left ready and is still served.
    client
        .send_to_server("orders", b"after the flood".to_vec())
        .await
        .expect("send");
    let delivery = lines.wait("the client's record", |v| v["event"] == "delivery");
    assert_eq!(delivery["source"]["rid"], "client", "{delivery}");
    for ev in events.drain_now() {
        if let NodeEvent::State(s) = ev {
            panic!("the admitted client's link changed state: {s:?}");
        }
    }
    drop(flood);
    client.shutdown().await.expect("shutdown");
    let _ = node.0.stdin.take().map(|mut s| s.flush());
}

/// MISSION W3, bounded input: garbage before HELLO is refused with one REJECT and recorded as
/// `malformed`; a ZMTP greeting naming an unknown mechanism as `handshake_failed`; with
/// `max_unadmitted = 2` and two silent connections held open, a third connection is refused
/// in its transport handshake (`unadmitted_cap`: libzmq closes it at once) while the admitted
/// client keeps being served; a zmesh client arriving then fails its link at once and gets
/// through once a silent connection went.
#[tokio::test]
async fn w3_garbage_handshake_failures_and_the_unadmitted_cap() {
    let server_ep = free_tcp();
    let (app_ep, completion_ep) = (free_tcp(), free_tcp());
    let mut cfg = NodeConfig::new("gate");
    cfg.server = Some(Endpoint::new(server_ep.clone()));
    // Garbage goes to the RouteMesh lanes, so that its connections (which stay open a while
    // after their refusal) do not count against the ClientServer endpoint's cap.
    cfg.route_mesh = Some(RouteMeshBind::new(app_ep.clone(), completion_ep.clone()));
    cfg.max_unadmitted = 2;
    let server = Node::start(cfg).await.expect("server");
    let mut server_events = Events::new(server.take_events().expect("events"));

    let mut c = NodeConfig::new("client");
    c.servers = vec![ServerConfig::new("orders", server_ep.clone()).rid("gate")];
    let client = Node::start(c).await.expect("client");
    let mut client_events = Events::new(client.take_events().expect("events"));
    client_events.wait(STEP, is_ready).await;
    server_events.wait(STEP, is_ready).await;

    let ctx = zmq::Context::new();
    // Garbage as a first record: one REJECT (Protocol).
    let (garbage, garbage_mon) = monitored_dealer(&ctx, &app_ep, 0);
    monitor_wait(&garbage_mon, &[zmq::SocketEvent::HANDSHAKE_SUCCEEDED], STEP);
    garbage.send(&b"not a zmesh record"[..], 0).expect("send");
    garbage
        .set_rcvtimeo(STEP.as_millis() as i32)
        .expect("rcvtimeo");
    let reject = garbage.recv_bytes(0).expect("a REJECT");
    assert_eq!(&reject[..4], &[0x5A, 0x4D, 0x01, 0x03], "REJECT");
    assert_eq!(reject[4], 8, "reason Protocol");
    close_monitored((garbage, garbage_mon), STEP);

    // A ZMTP 3.0 greeting with a mechanism libzmq does not know.
    let addr = completion_ep.trim_start_matches("tcp://").to_owned();
    let mut tcp = std::net::TcpStream::connect(&addr).expect("tcp connect");
    let mut greeting = vec![0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0];
    let mut mechanism = b"GARBAGE".to_vec();
    mechanism.resize(20, 0);
    greeting.extend(mechanism);
    greeting.resize(64, 0);
    tcp.write_all(&greeting).expect("greeting");

    // Two silent connections fill the cap; a third is refused in its handshake.
    let (silent_a, mon_a) = monitored_dealer(&ctx, &server_ep, 1);
    monitor_wait(&mon_a, &[zmq::SocketEvent::HANDSHAKE_SUCCEEDED], STEP);
    let (silent_b, mon_b) = monitored_dealer(&ctx, &server_ep, 2);
    monitor_wait(&mon_b, &[zmq::SocketEvent::HANDSHAKE_SUCCEEDED], STEP);
    let (third, mon_c) = monitored_dealer(&ctx, &server_ep, 3);
    let ev = monitor_wait(
        &mon_c,
        &[
            zmq::SocketEvent::HANDSHAKE_SUCCEEDED,
            zmq::SocketEvent::DISCONNECTED,
            zmq::SocketEvent::HANDSHAKE_FAILED_AUTH,
        ],
        STEP,
    );
    assert_ne!(
        ev,
        zmq::SocketEvent::HANDSHAKE_SUCCEEDED,
        "a third unadmitted connection got through a cap of 2"
    );

    // The admitted client is still served.
    client
        .send_to_server("orders", b"still here".to_vec())
        .await
        .expect("send");
    server_events
        .wait(
            STEP,
            |e| matches!(e, NodeEvent::Delivery(d) if &d.payload[..] == b"still here"),
        )
        .await;

    let snap = server.snapshot().await.expect("snapshot");
    let reasons: Vec<InputRefusal> = snap.recent_refusals.iter().map(|r| r.reason).collect();
    for want in [
        InputRefusal::Malformed,
        InputRefusal::HandshakeFailed,
        InputRefusal::UnadmittedCap,
    ] {
        assert!(reasons.contains(&want), "{want} not in {reasons:?}");
    }
    let at = |reason| {
        snap.recent_refusals
            .iter()
            .filter(move |r| r.reason == reason)
            .map(|r| r.endpoint.as_str())
    };
    assert!(at(InputRefusal::Malformed).all(|e| e == app_ep));
    assert!(at(InputRefusal::HandshakeFailed).all(|e| e == completion_ep));
    assert!(at(InputRefusal::UnadmittedCap).all(|e| e == server_ep));

    // A zmesh client arriving now is refused in its handshake too: its link fails at once
    // (not after its 15 s handshake timeout) and dials again after its backoff.
    let mut late_cfg = NodeConfig::new("late");
    late_cfg.servers = vec![ServerConfig::new("orders", server_ep.clone()).rid("gate")];
    let late = Node::start(late_cfg).await.expect("late client");
    let mut late_events = Events::new(late.take_events().expect("events"));
    late_events
        .wait(STEP, |e| {
            matches!(e, NodeEvent::State(s) if s.reason == Some(FailureReason::TransportError)
                && s.detail.contains("ZAP 500"))
        })
        .await;

    // One silent connection goes: once the node has seen it go (its disconnect travels
    // through libzmq's monitor), the late client's next dial gets through.
    close_monitored((silent_a, mon_a), STEP);
    late_events.wait(STEP, is_ready).await;
    late.shutdown().await.expect("shutdown");

    for raw in [(silent_b, mon_b), (third, mon_c)] {
        close_monitored(raw, STEP);
    }
    drop(tcp);
    client.shutdown().await.expect("shutdown");
    server.shutdown().await.expect("shutdown");
}

/// A pyzmq DEALER on the ClientServer lane (rid from argv): HELLO, then after WELCOME one
/// BATCH of three calls of channel `vault` (1 `open`, 2 `secret`, 3 `open`, no arguments);
/// reports every ACCEPT and REPLY.
const PY_AUTH_BATCH: &str = r#"
ep, rid = sys.argv[1], sys.argv[2]
def request(call_id, method):
    return (envelope(0x07) + u64(call_id) + u64(0) + bytes([0]) + string("vault")
            + string(method) + string(""))
ctx = zmq.Context()
d = ctx.socket(zmq.DEALER)
d.linger = 0
d.connect(ep)
d.send(envelope(0x01) + bytes([3]) + string(rid) + u64(7) + string("") + string("")
       + u64(0) + u64(0) + u16(0))
while time.monotonic() < DEADLINE:
    if not d.poll(50):
        continue
    frames = d.recv_multipart()
    f0 = frames[0]
    kind, r = f0[3], Reader(f0[4:])
    if kind == 0x02:
        calls = [(1, "open"), (2, "secret"), (3, "open")]
        out = [envelope(0x0C) + u16(len(calls))]
        for call_id, method in calls:
            out += [request(call_id, method), bytes([0xC0])]
        d.send_multipart(out)
        emit(sent=len(calls))
    elif kind == 0x04:
        d.send(envelope(0x05) + f0[4:12])
    elif kind == 0x08:
        emit(accept=r.u64())
    elif kind == 0x09:
        emit(reply=r.u64(), code=r.u8())
"#;

/// The `vault` service: `open` for anyone, `secret` only for the RID `boss` (else
/// Forbidden), `cmd` only for an authenticated caller (else Unauthorized); counts the runs
/// of its handlers.
fn vault(runs: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Service {
    let run = move |r: Request| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            encode(&r.method)
        }
    };
    Service::new("vault")
        .method(Method::query("open"), run.clone())
        .method(Method::query("secret"), run.clone())
        .method(Method::non_repeatable_command("cmd"), run)
        .authorize(|call| match call.method {
            "secret" if call.caller.rid != "boss" => Err(Denied::forbidden("boss only")),
            "cmd" if !call.caller.verified => Err(Denied::unauthorized("who are you?")),
            _ => Ok(()),
        })
}

/// A node `vault-node` exposing [`vault`] as a ClientServer server on a free tcp endpoint:
/// the node and its endpoint.
async fn vault_node(runs: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> (Node, String) {
    let server_ep = free_tcp();
    let mut cfg = NodeConfig::new("vault-node");
    cfg.server = Some(Endpoint::new(server_ep.clone()));
    let server = Node::builder(cfg)
        .expose(vault(runs))
        .start()
        .await
        .expect("server");
    (server, server_ep)
}

/// MISSION K6: a service's authorizer refuses `Unauthorized` (the caller is
/// not authenticated: `security = "none"` identities are claims) and `Forbidden` (known, not
/// permitted); both reach the caller as "did not run" and no handler ran; the authorizer
/// sees the caller's RID and its unverified identity.
#[tokio::test]
async fn k6_authorizer_refuses_unauthorized_and_forbidden_did_not_run() {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (server, server_ep) = vault_node(runs.clone()).await;
    let client = |rid: &str| {
        let mut c = NodeConfig::new(rid);
        c.servers = vec![ServerConfig::new("vault", server_ep.clone())];
        c
    };
    let guest = Node::start(client("guest")).await.expect("guest");
    let boss = Node::start(client("boss")).await.expect("boss");
    for node in [&guest, &boss] {
        let mut ev = Events::new(node.take_events().expect("events"));
        ev.wait(STEP, is_ready).await;
    }
    let open: String = guest.call("vault", "open", &()).await.expect("open");
    assert_eq!(open, "open");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);

    let refused = |e: CallError, want: RemoteCode| match e {
        CallError::Remote { code, ref message } => {
            assert_eq!(code, want, "{message}");
            assert!(!may_have_run(&e), "{want:?} is did-not-run");
        }
        other => panic!("expected {want:?}, got {other:?}"),
    };
    let e = guest
        .call::<_, String>("vault", "secret", &())
        .await
        .expect_err("forbidden");
    refused(e, RemoteCode::Forbidden);
    let e = boss
        .call::<_, String>("vault", "cmd", &())
        .await
        .expect_err("unauthorized");
    refused(e, RemoteCode::Unauthorized);
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no refused call ran"
    );
    let secret: String = boss.call("vault", "secret", &()).await.expect("boss");
    assert_eq!(secret, "secret");
    for n in [guest, boss, server] {
        n.shutdown().await.expect("shutdown");
    }
}

/// MISSION K5/K6: each call of a BATCH is authorized on its own: in one BATCH of
/// `open`, `secret`, `open` from a guest, both `open` calls are ACCEPTed and answered Ok, the
/// `secret` call is answered Forbidden without an ACCEPT, and only the two `open` calls ran.
#[tokio::test]
async fn k6_each_call_of_a_batch_is_authorized_on_its_own() {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (server, server_ep) = vault_node(runs.clone()).await;
    let mut py = PyPeer::start(
        &py_script(PY_AUTH_BATCH, PY_LIFETIME_S),
        &[&server_ep, "guest"],
    );
    let mut accepts = Vec::new();
    let mut replies = std::collections::BTreeMap::new();
    while replies.len() < 3 {
        let v = py.next(Duration::from_secs(60)).await;
        if let Some(id) = v["accept"].as_u64() {
            accepts.push(id);
        }
        if let Some(id) = v["reply"].as_u64() {
            replies.insert(id, v["code"].as_u64().expect("code"));
        }
    }
    accepts.sort_unstable();
    assert_eq!(
        accepts,
        vec![1, 3],
        "only the permitted calls were ACCEPTed"
    );
    assert_eq!(replies[&1], 0, "Ok");
    assert_eq!(replies[&2], 7, "Forbidden");
    assert_eq!(replies[&3], 0, "Ok");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    drop(py);
    server.shutdown().await.expect("shutdown");
}
