//! `zmesh conform`: the live conformance runner against zmesh itself (a
//! `zmesh node` child described in every role, plus a `zmesh pub` child publishing records,
//! plus a node without Server membership for NotRequired): no rule fails and every rule the
//! description enables is checked; and against a deliberately wrong pyzmq peer (a wrong
//! beacon payload, ACKs with a stale id, two REPLYs for one call) it fails exactly the rules
//! those faults break, and no other.
//!
//! Each runner takes about 11 s (two probe cycles); the checks behind `--long` are not run
//! here. Every wait is bounded.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{free_tcp, py_script, PyPeer};
use serde_json::Value;
use zmesh::config::{Endpoint, NodeConfig, PeerConfig, RouteMeshBind, ServerConfig};

/// The first line of a child (process start, bind).
const STARTUP: Duration = Duration::from_secs(60);
/// A Python peer never outlives this (seconds).
const PY_LIFETIME_S: u32 = 90;

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn zmesh() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zmesh"))
}

/// Starts `cmd` with stdout piped and waits (bounded) for its first line: it is up.
fn start_and_wait_first_line(mut cmd: Command) -> Killed {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx.recv_timeout(STARTUP)
        .expect("the child printed nothing: not started");
    Killed(child)
}

/// A directory for one test's node configurations, removed when the guard drops (even on a
/// panic): declared before the test's [`Killed`] children, so they are killed first.
fn config_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("zmesh-conform-")
        .tempdir()
        .expect("dir")
}

fn write_config(dir: &Path, c: &NodeConfig) -> PathBuf {
    let path = dir.join(format!("{}.toml", c.rid));
    std::fs::write(&path, toml::to_string(c).expect("toml")).expect("write");
    path
}

/// Runs `zmesh conform ARGS --json` to its end (it is bounded by its own waits; the bound
/// here is for a runner that hangs: polled, then killed) and returns its report.
async fn conform(args: Vec<String>) -> (std::process::ExitStatus, Value) {
    tokio::task::spawn_blocking(move || {
        let mut child = zmesh()
            .arg("conform")
            .args(&args)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("zmesh conform");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let out = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdout, &mut b);
            b
        });
        let err = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stderr, &mut b);
            b
        });
        let limit = std::time::Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            if std::time::Instant::now() >= limit {
                let _ = child.kill();
                panic!("zmesh conform still running after 120 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (out, err) = (
            out.join().expect("stdout reader"),
            err.join().expect("stderr reader"),
        );
        let v: Value = serde_json::from_slice(&out).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            )
        });
        (status, v)
    })
    .await
    .expect("the runner's thread")
}

/// The rules with `status` in a report, with a line per result for messages.
fn with_status(v: &Value, status: &str) -> BTreeSet<String> {
    v["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["status"] == status)
        .map(|r| r["rule"].as_str().expect("rule").to_owned())
        .collect()
}

fn table(v: &Value) -> String {
    v["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            format!(
                "{} {} [{}] {}",
                r["status"], r["rule"], r["role"], r["detail"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `zmesh conform` against zmesh: a node that accepts RouteMesh (with a pinned peer, the
/// runner), serves ClientServer, publishes, subscribes to the runner, dials the runner as a
/// RouteMesh peer and as a ClientServer server; a `zmesh pub` publishing records; a node
/// without Server membership. Nothing fails, nothing warns, and every rule the description
/// enables passed (the long ones are not run).
/// A zmesh node in every role (the runner is its pinned RouteMesh peer `zmesh-conform` and
/// its ClientServer server), started, its configuration in `dir`; and the runner's
/// description of it.
fn node_t(dir: &Path) -> (Killed, Vec<String>) {
    let route_mesh = RouteMeshBind::new(free_tcp(), free_tcp());
    let (server, publisher, sub_of) = (free_tcp(), free_tcp(), free_tcp());
    let (dial_app, dial_comp, client_of) = (free_tcp(), free_tcp(), free_tcp());
    let mut t = NodeConfig::new("node-t");
    t.memberships = common::server_of("orders");
    t.route_mesh = Some(route_mesh.clone());
    t.server = Some(Endpoint::new(server.clone()));
    t.publisher = Some(Endpoint::new(publisher.clone()));
    t.subscriptions = vec![Endpoint::new(sub_of.clone())];
    t.peers = vec![
        PeerConfig::new("zmesh-conform", dial_app.clone(), dial_comp.clone())
            .security_identity("conform-identity"),
    ];
    t.servers = vec![ServerConfig::new("billing", client_of.clone()).rid("zmesh-conform")];
    let mut node = zmesh();
    node.args([
        "node", "--events", "ndjson", "--serve", "orders", "--config",
    ])
    .arg(write_config(dir, &t));
    let node = start_and_wait_first_line(node);
    let args = vec![
        "--route-mesh".into(),
        format!("{},{}", route_mesh.application, route_mesh.completion),
        "--server".into(),
        server,
        "--publisher".into(),
        publisher,
        "--subscriber-of".into(),
        sub_of,
        "--dials-route-mesh".into(),
        format!("{dial_app},{dial_comp}"),
        "--client-of".into(),
        client_of,
        "--rid".into(),
        "node-t".into(),
        "--pinned-peer".into(),
        "zmesh-conform=conform-identity".into(),
        "--call".into(),
        "orders.echo".into(),
    ];
    (node, args)
}

/// `zmesh conform` against zmesh: a node that accepts RouteMesh (with a pinned peer, the
/// runner), serves ClientServer, publishes, subscribes to the runner, dials the runner as a
/// RouteMesh peer and as a ClientServer server; a `zmesh pub` publishing records; a node
/// without Server membership. Nothing fails, nothing warns, and every rule the description
/// enables passed (the long ones are not run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w2_conform_passes_against_zmesh() {
    let dir = config_dir();
    let (_node, args) = node_t(dir.path());
    // Records on the wire for §7.2: a `zmesh pub` publishing every 200 ms.
    let records = free_tcp();
    let mut publish = zmesh();
    publish.args(["pub", "--endpoint", &records, "--count", "1000"]);
    publish.args(["--interval-ms", "200", "--topic", "prices"]);
    let _pub = start_and_wait_first_line(publish);
    // NotRequired: a RouteMesh node without Server membership.
    let lonely = RouteMeshBind::new(free_tcp(), free_tcp());
    let mut n = NodeConfig::new("node-n");
    n.route_mesh = Some(lonely.clone());
    let mut lonely_node = zmesh();
    lonely_node
        .args(["node", "--events", "ndjson", "--config"])
        .arg(write_config(dir.path(), &n));
    // It prints nothing until a link changes: started without waiting for a line.
    let _lonely = Killed(
        lonely_node
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn node-n"),
    );

    let main_run = conform(args);
    let records_run = conform(vec!["--publisher".into(), records]);
    let lonely_run = conform(vec![
        "--route-mesh".into(),
        format!("{},{}", lonely.application, lonely.completion),
        "--rid".into(),
        "node-n".into(),
    ]);
    let ((status, v), (_, rv), (_, lv)) = tokio::join!(main_run, records_run, lonely_run);

    for (name, report) in [("node-t", &v), ("zmesh pub", &rv), ("node-n", &lv)] {
        assert_eq!(report["failed"], 0, "{name}:\n{}", table(report));
        assert_eq!(report["warnings"], 0, "{name}:\n{}", table(report));
    }
    assert!(status.success(), "exit status {status}");
    // Every short rule is checked somewhere and passed; skips are only the n/a ones.
    let mut passed = with_status(&v, "pass");
    passed.extend(with_status(&rv, "pass"));
    passed.extend(with_status(&lv, "pass"));
    let listed = zmesh()
        .args(["conform", "--list"])
        .output()
        .expect("--list");
    let short: BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter(|l| !l.ends_with("(--long)"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(short.len() >= 40, "{short:?}");
    let missing: Vec<_> = short.difference(&passed).collect();
    assert!(
        missing.is_empty(),
        "never passed: {missing:?}\nnode-t:\n{}\nzmesh pub:\n{}\nnode-n:\n{}",
        table(&v),
        table(&rv),
        table(&lv)
    );
    // The runner is short: two probe cycles.
    assert!(
        v["seconds"].as_f64().expect("seconds") < 30.0,
        "{}",
        v["seconds"]
    );
}

/// `zmesh conform --long` against zmesh: the 15 s probe deadline on every connection (both
/// sides, both topologies) and the subscriber's 15 s silence pass too. Ignored by default:
/// about 25 s, run with `cargo test --test conform -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "about 25 s (the 15 s deadlines); run with --ignored"]
async fn w2_conform_long_checks_pass_against_zmesh() {
    let dir = config_dir();
    let (_node, mut args) = node_t(dir.path());
    args.push("--long".into());
    let (status, v) = conform(args).await;
    assert_eq!(v["failed"], 0, "{}", table(&v));
    assert!(status.success(), "exit status {status}");
    let passed = with_status(&v, "pass");
    for rule in ["5.2/deadline", "7.3/silence-resubscribes"] {
        assert!(passed.contains(rule), "{rule}:\n{}", table(&v));
    }
}

/// A deliberately wrong pyzmq peer: a ClientServer server `py-srv` (ROUTER bound as
/// `zmesh-server`) that follows WIRE.md §5 and §6 except that it ACKs every PROBE with a stale
/// id (the previous PROBE's, or one less for the first) and sends two REPLYs for every call
/// it serves (`svc.*`); and a publisher (XPUB) whose beacons, sent on join and every 5 s,
/// carry a wrong payload (`5A 46 01 02`), with correct PUBLISH records every 300 ms.
const PY_WRONG: &str = r#"
srv_ep, pub_ep = sys.argv[1], sys.argv[2]
GEN = 0x0A0B0C0D01020304
ctx = zmq.Context()
srv = ctx.socket(zmq.ROUTER)
srv.linger = 0
srv.setsockopt(zmq.ROUTING_ID, b"zmesh-server")
srv.setsockopt(zmq.ROUTER_MANDATORY, 1)
srv.bind(srv_ep)
pub = ctx.socket(zmq.XPUB)
pub.linger = 0
pub.setsockopt(zmq.XPUB_VERBOSE, 1)
pub.bind(pub_ep)
WRONG_BEACON = [BEACON_TOPIC, bytes([0x5A, 0x46, 0x01, 0x02])]

def reject(reason, detail):
    return envelope(0x03) + bytes([reason]) + string(detail)
def close(reason): return envelope(0x0B) + bytes([reason])
def reply(call_id, code, payload): return [envelope(0x09) + u64(call_id) + bytes([code]), payload]

conns = {}      # route -> dict(rid, pending, next_id, next_probe_at, last_probe, deadline, conn_id)
by_rid = {}     # rid -> route
refused = set()
conn_ids = [0]

def send(route, frames):
    try:
        srv.send_multipart([route] + frames, zmq.DONTWAIT)
    except zmq.ZMQError:
        pass

def parse_hello(b):
    r = Reader(b[4:])
    lane = r.u8(); rid = r.string(); gen = r.u64(); sec = r.string()
    expect_rid = r.string(); expect_gen = r.u64(); cfg = r.u64()
    members = [(r.u8(), r.string()) for _ in range(r.u16())]
    if not r.done(): raise ValueError("trailing")
    if gen == 0 or lane not in (1, 2, 3) or not rid: raise ValueError("invalid")
    return lane, rid, gen, expect_rid, expect_gen

def parse_request(env):
    r = Reader(env[4:])
    call_id = r.u64(); r.u64(); r.u8(); channel = r.string(); method = r.string(); r.string()
    if not r.done() or call_id == 0: raise ValueError("request")
    return call_id, channel

def admit(route, frames):
    f0 = frames[0]
    if len(f0) < 4 or f0[:2] != bytes([0x5A, 0x4D]):
        refused.add(route); send(route, [reject(8, "malformed record before HELLO")]); return
    if f0[2] != 1:
        refused.add(route); send(route, [reject(5, "version")]); return
    kind = f0[3]
    if kind in (0x03, 0x0B):
        return
    if kind != 0x01:
        refused.add(route); send(route, [reject(8, "record before HELLO")]); return
    try:
        if len(frames) != 1: raise ValueError("frames")
        lane, rid, gen, expect_rid, expect_gen = parse_hello(f0)
    except Exception:
        refused.add(route); send(route, [reject(8, "malformed record before HELLO")]); return
    if lane != 3:
        refused.add(route); send(route, [reject(7, "lane")]); return
    if expect_rid and expect_rid != "py-srv":
        refused.add(route); send(route, [reject(2, "rid")]); return
    if expect_gen and expect_gen != GEN:
        refused.add(route); send(route, [reject(3, "generation")]); return
    old = by_rid.get(rid)
    if old is not None and old in conns:
        send(old, [close(3)])
        del conns[old]
    by_rid[rid] = route
    conn_ids[0] += 1
    now = time.monotonic()
    conns[route] = dict(rid=rid, pending=None, next_id=(conn_ids[0] << 32) + 1, next_probe_at=now,
                        last_probe=None, deadline=now + 15.0, conn_id=conn_ids[0])
    send(route, [envelope(0x02) + bytes([3]) + string("py-srv") + u64(GEN) + string("py-srv")
                 + u16(1) + bytes([1]) + string("svc")])
    tick(route, now)

def tick(route, now):
    c = conns[route]
    if now >= c["deadline"]:
        send(route, [close(4)]); del conns[route]; return
    if now >= c["next_probe_at"]:
        if c["pending"] is None:
            c["pending"] = c["next_id"]; c["next_id"] += 1
        send(route, [envelope(0x04) + u64(c["pending"])])
        while c["next_probe_at"] <= now:
            c["next_probe_at"] += 5.0

def call(route, c, env, payload, answers):
    call_id, channel = parse_request(env)
    if channel == "svc":
        answers.append([envelope(0x08) + u64(call_id) + u64(GEN) + u64(c["conn_id"])])
        answers.append(reply(call_id, 0, payload))
        answers.append(reply(call_id, 0, payload))   # the fault: a second REPLY
    else:
        answers.append(reply(call_id, 3, b"nothing serves that channel"))

def admitted(route, frames):
    c = conns[route]
    f0 = frames[0]
    try:
        if len(f0) < 4 or f0[:3] != bytes([0x5A, 0x4D, 0x01]): raise ValueError("header")
        kind = f0[3]
        if kind in (0x04, 0x05):
            if len(frames) != 1 or len(f0) != 12: raise ValueError("probe size")
            pid = Reader(f0[4:]).u64()
            if pid == 0: raise ValueError("zero")
            if kind == 0x04:
                stale = c["last_probe"] if c["last_probe"] is not None else pid - 1
                c["last_probe"] = pid
                send(route, [envelope(0x05) + u64(stale or 1)])   # the fault: a stale id
            elif c["pending"] == pid:
                c["pending"] = None
                c["deadline"] = time.monotonic() + 15.0
        elif kind == 0x0B:
            if len(frames) != 1 or len(f0) != 5: raise ValueError("close")
            del conns[route]
        elif kind == 0x07:
            if len(frames) != 2: raise ValueError("frames")
            answers = []
            call(route, c, f0, frames[1], answers)
            for a in answers: send(route, a)
        elif kind == 0x0C:
            r = Reader(f0[4:]); n = r.u16()
            if not r.done() or n < 2 or len(frames) != 1 + 2 * n: raise ValueError("batch")
            answers = []
            if n > 256:
                for i in range(n):
                    call_id, _ = parse_request(frames[1 + 2 * i])
                    answers.append(reply(call_id, 8, b"batch over 256 calls"))
            else:
                for i in range(n):
                    call(route, c, frames[1 + 2 * i], frames[2 + 2 * i], answers)
            for a in answers: send(route, a)
        elif kind in (0x01, 0x02, 0x03, 0x06, 0x08, 0x09, 0x0A):
            pass
        else:
            raise ValueError("kind")
    except Exception:
        send(route, [close(5)])
        conns.pop(route, None)

poller = zmq.Poller()
poller.register(srv, zmq.POLLIN)
poller.register(pub, zmq.POLLIN)
emit(bound=True)
next_beacon = time.monotonic()
next_record = time.monotonic()
seq = 0
while time.monotonic() < DEADLINE:
    now = time.monotonic()
    if now >= next_beacon:
        pub.send_multipart(WRONG_BEACON)
        next_beacon += 5.0
    if now >= next_record:
        seq += 1
        pub.send_multipart([b"prices", envelope(0x0D) + u64(GEN) + u64(seq), b"42"])
        next_record += 0.3
    for route in list(conns):
        if route in conns:
            tick(route, now)
    events = dict(poller.poll(20))
    if pub in events:
        m = pub.recv_multipart()
        if m and m[0][:1] == b"\x01":
            pub.send_multipart(WRONG_BEACON)
    if srv in events:
        frames = srv.recv_multipart()
        route, frames = frames[0], frames[1:]
        if route in refused or not frames:
            continue
        if route in conns:
            admitted(route, frames)
        else:
            admit(route, frames)
"#;

/// `zmesh conform` against the wrong pyzmq peer fails exactly the rules its three faults
/// break: the beacon bytes (§7.1), the ACK's id (§5.2), exactly one REPLY per call and per
/// call of a BATCH (§5.3); every other rule of its roles passes (or is n/a), and the exit
/// status says it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w2_conform_fails_a_wrong_peer_on_exactly_the_expected_rules() {
    let (srv, publisher) = (free_tcp(), free_tcp());
    let mut py = PyPeer::start(&py_script(PY_WRONG, PY_LIFETIME_S), &[&srv, &publisher]);
    py.until(STARTUP, "bound").await;
    let (status, v) = conform(vec![
        "--server".into(),
        srv,
        "--publisher".into(),
        publisher,
        "--rid".into(),
        "py-srv".into(),
        "--call".into(),
        "svc.echo".into(),
    ])
    .await;
    let failed = with_status(&v, "fail");
    let expected: BTreeSet<String> = [
        "7.1/beacon-bytes",
        "5.2/ack-echoes-id",
        "5.3/exactly-one-reply",
        "5.3/batch",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(
        failed,
        expected,
        "{}\npython stderr: {}",
        table(&v),
        py.stderr()
    );
    assert_eq!(v["warnings"], 0, "{}", table(&v));
    assert_eq!(status.code(), Some(1), "a failed MUST rule fails the run");
    // The faults are named in the details.
    let detail = |rule: &str| -> String {
        v["results"]
            .as_array()
            .expect("results")
            .iter()
            .find(|r| r["rule"] == rule)
            .map(|r| r["detail"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_default()
    };
    assert!(
        detail("7.1/beacon-bytes").contains("5a460102"),
        "{}",
        table(&v)
    );
    assert!(
        detail("5.3/exactly-one-reply").starts_with("2 REPLY"),
        "{}",
        table(&v)
    );
    // The rest of the server role and the PUBLISH records passed.
    let passed = with_status(&v, "pass");
    for rule in [
        "5.1/welcome",
        "5.1/reject-lane-mismatch",
        "5.1/replacement",
        "5.2/pending-id-resent",
        "5.2/new-id-after-ack",
        "5.3/accept-before-reply",
        "5.3/batch-over-256",
        "6/malformed-frame-count",
        "7.1/beacon-interval",
        "7.2/publish-well-formed",
    ] {
        assert!(passed.contains(rule), "{rule} did not pass:\n{}", table(&v));
    }
    drop(py);
}
