//! Fault injection with calls in flight (MISSION C1, C2, C3, C4, F1, F2, K5, W3): real
//! processes, real sockets on 127.0.0.1 and ipc. The callee (`zmesh node --serve work --exec-log FILE`) writes a
//! line before each call's method runs, so every outcome is checked against what really ran:
//!
//! - every call completes exactly once;
//! - `Ok` means it ran exactly once;
//! - an error with `may_have_run == false` means it did not run at all;
//! - nothing ever runs twice (no resubmission).
//!
//! `k5_c1_c3_kill9_with_batches_in_flight` does the same per call with BATCHes running and
//! in flight at each kill (MISSION K5). The reconnect storm, several callees hit together
//! over and over, is `zmesh-cli/tests/reconnect_storm.rs`; the judge and the calls both use
//! are in `zmesh-cli/tests/common/faults.rs`.
//!
//! Short versions run in the default suite; the long one (SIGSTOP beyond the 15 s deadline)
//! is `#[ignore]`d and run by name: `cargo test --locked --test faults -- --ignored`.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "common/faults.rs"]
mod fault;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{mesh_bind, peer, start_ready, wait_peer_ready, Events};
use fault::{collect, count_runs, issue, judge, stdout_lines, test_dir, StormChild, STEP};
use zmesh::config::{NodeConfig, RouteMeshBind};
use zmesh::runtime::Node;

struct Callee {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    exec_log: PathBuf,
}

impl Callee {
    /// Starts `zmesh node --serve work` with an execution log.
    fn start(dir: &Path, bind: &RouteMeshBind, exec_log: &Path) -> Callee {
        let mut b = NodeConfig::new("callee");
        b.memberships = common::server_of("work");
        b.route_mesh = Some(bind.clone());
        let path = dir.join("callee.toml");
        std::fs::write(&path, toml::to_string(&b).expect("toml")).expect("write");
        let mut child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args([
                "node",
                "--events",
                "ndjson",
                "--serve",
                "work",
                "--exec-log",
            ])
            .arg(exec_log)
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn callee");
        let lines = stdout_lines(&mut child);
        Callee {
            child,
            lines,
            exec_log: exec_log.to_owned(),
        }
    }

    /// Waits until `n` handlers have started (the callee prints one `call` line each).
    async fn wait_started(&mut self, n: usize) {
        let mut seen = 0;
        while seen < n {
            let line = tokio::time::timeout(STEP, self.lines.recv())
                .await
                .expect("callee output within the bound")
                .expect("callee still running");
            let v: serde_json::Value = serde_json::from_str(&line).expect("ndjson");
            if v["event"] == "call" {
                seen += 1;
            }
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success(), "kill {sig}");
    }

    fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }

    /// How many times each `work` token started running.
    fn executed(&self) -> HashMap<String, usize> {
        let mut runs = HashMap::new();
        count_runs(&self.exec_log, &mut runs);
        runs
    }
}

impl Drop for Callee {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Setup {
    bind: RouteMeshBind,
    a: Node,
    ea: Events,
    callee: Callee,
    /// Removed when dropped (even on a panic); the last field, so it drops after the callee
    /// (fields drop in declaration order).
    dir: tempfile::TempDir,
}

async fn setup(name: &str) -> Setup {
    let dir = test_dir(name);
    let bind = mesh_bind(true);
    let callee = Callee::start(dir.path(), &bind, &dir.path().join("exec.log"));
    let mut a = NodeConfig::new("caller");
    a.peers = vec![peer("callee", &bind)];
    let (a, ea) = start_ready(a, "callee").await;
    Setup {
        bind,
        a,
        ea,
        callee,
        dir,
    }
}

/// MISSION C1, C2, C3, F1: kill -9 of the callee with 16 calls running and 16 more arriving:
/// all complete once; the ones that ran say "may have run"; none is claimed "did not run"
/// wrongly; nothing runs twice. Then a restarted callee (new generation, F4) serves new calls.
#[tokio::test]
async fn c1_c2_c3_kill9_with_calls_in_flight_then_restart() {
    let mut s = setup("kill9").await;
    let running = issue(&s.a, "k", 16, 60_000);
    s.callee.wait_started(16).await;
    let late = issue(&s.a, "late", 16, 60_000);
    s.callee.kill9();
    let mut results = collect(running).await;
    results.extend(collect(late).await);
    let row = judge("kill -9 (process)", &results, &s.callee.executed());
    assert_eq!(row.ok, 0);
    assert!(row.failed_may_have_run >= 16, "{row:?}");
    assert_eq!(s.a.snapshot().await.expect("snapshot").pending_calls, 0);

    // Restart: a new process run of the same RID is admitted and serves.
    s.callee = Callee::start(s.dir.path(), &s.bind, &s.dir.path().join("exec2.log"));
    wait_peer_ready(&s.a, &mut s.ea, "callee").await;
    let results = collect(issue(&s.a, "after", 8, 10)).await;
    let row = judge(
        "restart with a new generation",
        &results,
        &s.callee.executed(),
    );
    assert_eq!(row.ok, 8, "{row:?}");
    s.a.shutdown().await.expect("caller");
}

/// MISSION C4, C1, C3: SIGTERM makes the callee stop gracefully: the calls it accepted are
/// answered (Ok, ran once); calls arriving while it stops are refused as "did not run" or
/// fail as "may have run" - never wrongly.
#[tokio::test]
async fn c4_orderly_stop_with_calls_in_flight() {
    let mut s = setup("sigterm").await;
    let running = issue(&s.a, "t", 8, 800);
    s.callee.wait_started(8).await;
    s.callee.signal("-TERM");
    let late = issue(&s.a, "late", 8, 10);
    let mut results = collect(running).await;
    let row = judge(
        "orderly stop (SIGTERM): accepted calls",
        &results,
        &s.callee.executed(),
    );
    assert_eq!(row.ok, 8, "accepted calls are answered: {row:?}");
    results = collect(late).await;
    judge(
        "orderly stop (SIGTERM): calls arriving while it stops",
        &results,
        &s.callee.executed(),
    );
    s.a.shutdown().await.expect("caller");
}

/// MISSION C2, F1 (real time, ~20 s): SIGSTOP freezes the callee with calls running: its TCP
/// connections stay open, so only the 15 s peer deadline can tell; every call then fails as
/// "may have run". After SIGCONT nothing is answered twice.
#[tokio::test]
#[ignore = "long real-time fault: run with --ignored"]
async fn c2_sigstop_beyond_the_deadline() {
    let mut s = setup("sigstop").await;
    let running = issue(&s.a, "s", 8, 2_000);
    s.callee.wait_started(8).await;
    s.callee.signal("-STOP");
    let stopped = Instant::now();
    let results = collect(running).await;
    let waited = stopped.elapsed();
    s.callee.signal("-CONT");
    let row = judge(
        "SIGSTOP beyond the 15 s deadline",
        &results,
        &s.callee.executed(),
    );
    assert_eq!(row.failed_may_have_run, 8, "{row:?}");
    assert!(waited <= Duration::from_millis(15_500), "{waited:?}");
    s.a.shutdown().await.expect("caller");
}

/// MISSION C1 (real time, short): SIGSTOP shorter than the deadline changes nothing: the
/// calls complete normally after SIGCONT.
#[tokio::test]
async fn c1_short_sigstop_changes_nothing() {
    let mut s = setup("shortstop").await;
    let running = issue(&s.a, "p", 8, 300);
    s.callee.wait_started(8).await;
    s.callee.signal("-STOP");
    tokio::time::sleep(Duration::from_secs(2)).await; // the fault itself: 2 s frozen
    s.callee.signal("-CONT");
    let results = collect(running).await;
    let row = judge(
        "SIGSTOP 2 s (under the deadline)",
        &results,
        &s.callee.executed(),
    );
    assert_eq!(row.ok, 8, "{row:?}");
    s.a.shutdown().await.expect("caller");
}

/// Frames of one valid record of every kind a ClientServer client may send after admission.
fn valid_records() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    use bytes::Bytes;
    use std::num::NonZeroU64;
    use zmesh::proto::wire::{self, Name, Record, ReplyCode};
    let id = NonZeroU64::new(7).expect("non-zero");
    let name = |s: &str| Name::new(s.to_owned()).expect("name");
    let request = wire::Request {
        call_id: id,
        ttl_ms: NonZeroU64::new(5_000),
        semantics: wire::Semantics::Query,
        channel: name("work"),
        method: name("echo"),
        idempotency_key: Some(name("k1")),
        payload: Bytes::from_static(b"\x91\x01"),
    };
    vec![
        ("probe", Record::Probe { id }.encode()),
        ("ack", Record::Ack { id }.encode()),
        (
            "message",
            Record::Message(wire::Message {
                channel: name("work"),
                payload: Bytes::from_static(b"hi"),
            })
            .encode(),
        ),
        ("request", Record::Request(request.clone()).encode()),
        (
            "accept",
            Record::Accept(wire::Accept {
                call_id: id,
                generation: id,
                connection_id: 3,
            })
            .encode(),
        ),
        (
            "reply",
            Record::Reply(wire::Reply {
                call_id: id,
                code: ReplyCode::Ok,
                payload: Bytes::from_static(b"\xc0"),
                replayed: false,
            })
            .encode(),
        ),
        (
            "item",
            Record::Item(wire::Item {
                call_id: id,
                seq: 0,
                payload: Bytes::new(),
            })
            .encode(),
        ),
        (
            "batch",
            Record::Batch(wire::Batch::new(vec![request.clone(), request]).expect("batch"))
                .encode(),
        ),
    ]
}

/// Every single-byte corruption of frame 0 (each byte XOR 0xFF), plus a dropped and an added
/// frame, of every record kind.
fn mutations() -> Vec<(String, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    for (kind, frames) in valid_records() {
        for i in 0..frames[0].len() {
            let mut m = frames.clone();
            m[0][i] ^= 0xFF;
            out.push((format!("{kind} byte {i}"), m));
        }
        let mut fewer = frames.clone();
        fewer.pop();
        if !fewer.is_empty() {
            out.push((format!("{kind} one frame fewer"), fewer));
        }
        let mut more = frames.clone();
        more.push(b"extra".to_vec());
        out.push((format!("{kind} one frame more"), more));
        let mut short = frames.clone();
        let half = short[0].len() / 2;
        short[0].truncate(half);
        out.push((format!("{kind} frame 0 cut in half"), short));
    }
    out
}

/// MISSION W3, F2: malformed frames at every position of every record, each sent by a raw
/// libzmq peer on its own admitted ClientServer connection: the zmesh server closes exactly
/// that connection with a protocol error (CLOSE reason 5), never panics, delivers nothing
/// malformed, and its other clients keep working.
#[tokio::test]
async fn w3_malformed_frames_at_every_position_close_only_that_connection() {
    use zmesh::proto::wire::{Label, Lane, Memberships, Name, Record};
    let ep = common::free_tcp();
    let mut srv = NodeConfig::new("srv");
    srv.memberships = common::server_of("work");
    srv.server = Some(zmesh::config::Endpoint::new(ep.clone()));
    let srv = Node::start(srv).await.expect("server");
    srv.serve("work", |req: zmesh::runtime::calls::Request| async move {
        Ok(req.raw_args().clone())
    })
    .expect("serve");
    let mut healthy = NodeConfig::new("healthy");
    healthy.servers = vec![zmesh::config::ServerConfig::new("work", ep.clone()).rid("srv")];
    let healthy = Node::start(healthy).await.expect("healthy client");
    let mut eh = Events::new(healthy.take_events().expect("events"));
    eh.wait(STEP, |e| matches!(e, zmesh::runtime::NodeEvent::State(s) if s.state == zmesh::proto::state::ConnState::Ready)).await;

    let hello = Record::Hello(zmesh::proto::wire::Hello {
        lane: Lane::ClientServer,
        rid: Name::new("raw".to_owned()).expect("rid"),
        generation: std::num::NonZeroU64::new(99).expect("gen"),
        security_identity: Label::default(),
        expect_rid: None,
        expect_generation: None,
        config_generation: 0,
        memberships: Memberships::default(),
    })
    .encode();
    let ctx = zmq::Context::new();
    let mut closed = 0;
    let mut accepted_valid = 0;
    let all = mutations();
    for (what, frames) in &all {
        let d = ctx.socket(zmq::DEALER).expect("dealer");
        d.set_linger(0).expect("linger");
        d.set_rcvtimeo(3000).expect("rcvtimeo");
        d.connect(&ep).expect("connect");
        d.send_multipart(hello.iter(), 0).expect("hello");
        let welcome = d.recv_multipart(0).expect("welcome");
        assert!(
            matches!(Record::decode(&welcome), Ok(Record::Welcome(_))),
            "{what}: not admitted"
        );
        d.send_multipart(frames.iter(), 0).expect("send");
        if Record::decode(frames).is_err() {
            // Expect CLOSE(ProtocolError) for this connection, skipping probes and acks.
            loop {
                let got = d
                    .recv_multipart(0)
                    .unwrap_or_else(|e| panic!("{what}: no CLOSE: {e}"));
                match Record::decode(&got) {
                    Ok(Record::Close { reason }) => {
                        assert_eq!(u8::from(reason), 5, "{what}: close reason");
                        closed += 1;
                        break;
                    }
                    Ok(_) => continue,
                    Err(e) => panic!("{what}: server sent a malformed record: {e}"),
                }
            }
        } else {
            accepted_valid += 1;
        }
    }
    // The server still runs and its other client still works (F2).
    let answer: String = healthy
        .call("work", "echo", "still fine")
        .await
        .expect("healthy call");
    assert_eq!(answer, "still fine");
    let snap = srv.snapshot().await.expect("server snapshot");
    assert_eq!(snap.host, "running");
    println!(
        "FAULT-MATRIX | malformed frames ({} mutations of {} record kinds) | protocol-error closes {closed} | mutations that were still valid records {accepted_valid} | server panics 0 |",
        all.len(),
        valid_records().len()
    );
    assert_eq!(closed + accepted_valid, all.len());
    assert!(
        closed >= 50,
        "the mutations exercise the decoder's rejections: {closed}"
    );
    healthy.shutdown().await.expect("healthy");
    srv.shutdown().await.expect("server");
}

/// Records the callee's current run received from `peer` on its inbound Application lanes (a
/// BATCH is one record however many calls it carries; probes and acks count too).
async fn application_records(callee: &StormChild, peer: &str) -> u64 {
    let snap = callee.snapshot().await;
    snap["links"]
        .as_array()
        .expect("links")
        .iter()
        .filter(|l| l["peer"] == peer && l["role"] == "application_inbound")
        .map(|l| l["records_received"].as_u64().expect("records_received"))
        .sum()
}

/// Waits (bounded) until `n` of `node`'s calls on `channel` are `sent` (MISSION K2's
/// registry: handed to libzmq, no answer yet). Checks again at every turn of the test's
/// runtime rather than after a sleep, so the fault that follows lands as close as possible
/// to the moment the requests left.
async fn wait_sent(node: &Node, channel: &str, n: usize) {
    use zmesh::runtime::operations::OpStatus;
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let ops = node.operations().views();
        let sent = ops
            .iter()
            .filter(|o| &*o.channel == channel && o.status == OpStatus::Sent)
            .count();
        if sent >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sent} of {n} calls sent within {STEP:?}: {ops:?}"
        );
        tokio::task::yield_now().await;
    }
}

/// MISSION K5, C1, C2, C3: kill -9 of the callee with BATCHes in flight. Concurrent `work`
/// calls leave together, so the caller sends them as BATCHes (checked: the callee's snapshot
/// counts fewer records on its Application lane than calls arrived in). Round 0: 40 calls
/// run, 40 more are issued, and the callee is killed the moment the caller's registry shows
/// them handed to libzmq, so that BATCH is on its way or being unpacked when the process
/// dies. Rounds 1-3: the callee is restarted (a new generation) and killed the same way with
/// 40 calls in flight. Every call of every BATCH completes exactly once and is classified
/// against the execution logs by [`judge`]: none lost, none run twice, none wrongly "did not
/// run" (a BATCH is an envelope: each call is answered, and fails, on its own). A last run
/// of the callee then takes 40 calls as BATCHes and answers every one.
#[tokio::test]
async fn k5_c1_c3_kill9_with_batches_in_flight() {
    const N: usize = 40;
    const ROUNDS: usize = 4;
    // Declared before the callee, so it is removed after the callee is killed.
    let dir = test_dir("batch");
    let bind = mesh_bind(false);
    let mut cfg = NodeConfig::new("callee");
    cfg.memberships = common::server_of("work");
    cfg.route_mesh = Some(bind.clone());
    let mut callee = StormChild::start(dir.path(), &cfg, "work");
    let mut a = NodeConfig::new("caller");
    a.peers = vec![peer("callee", &bind)];
    assert!(a.peers[0].batch_calls, "batching is on by default");
    let (a, mut ea) = start_ready(a, "callee").await;

    // Round 0 first: N calls running, carried in fewer records than calls (BATCHes).
    let before = application_records(&callee, "caller").await;
    let running = issue(&a, "running", N, 60_000);
    callee.wait_started(N).await;
    let carried = application_records(&callee, "caller").await - before;
    assert!(
        carried < N as u64,
        "{N} calls arrived in {carried} records: no BATCH was used"
    );
    let mut results = Vec::new();
    let mut pending = Some(running);
    let mut started_in_flight = Vec::new();
    for round in 0..ROUNDS {
        if round > 0 {
            callee.spawn();
            wait_peer_ready(&a, &mut ea, "callee").await;
        }
        let already = pending.as_ref().map_or(0, Vec::len);
        let in_flight = issue(&a, &format!("inflight{round}"), N, 60_000);
        wait_sent(&a, "work", already + N).await;
        callee.kill9();
        if let Some(running) = pending.take() {
            results.extend(collect(running).await);
        }
        let round_results = collect(in_flight).await;
        let mut runs = HashMap::new();
        callee.executed(&mut runs);
        started_in_flight.push(
            round_results
                .iter()
                .filter(|(t, _)| runs.contains_key(t))
                .count(),
        );
        results.extend(round_results);
    }
    let mut runs = HashMap::new();
    callee.executed(&mut runs);
    let row = judge(
        &format!(
            "kill -9 with BATCHes in flight, {ROUNDS} times: {N} running (sent in {carried} records) + {N} sent just before each kill (of which started: {started_in_flight:?})"
        ),
        &results,
        &runs,
    );
    assert_eq!(row.ok, 0, "{row:?}");
    // Every call was handed to libzmq before its kill: each may have run, none is "did not
    // run" (judge checked that none of those ran).
    assert_eq!(row.failed_may_have_run, (ROUNDS + 1) * N, "{row:?}");
    assert!(row.executed >= N, "{row:?}");
    assert_eq!(a.snapshot().await.expect("snapshot").pending_calls, 0);

    // A new run of the callee takes the next BATCHes and answers every call.
    callee.spawn();
    wait_peer_ready(&a, &mut ea, "callee").await;
    let before = application_records(&callee, "caller").await;
    let results = collect(issue(&a, "after", N, 10)).await;
    let carried = application_records(&callee, "caller").await - before;
    let mut runs = HashMap::new();
    callee.executed(&mut runs);
    let row = judge(
        &format!("restart with a new generation, then {N} calls (sent in {carried} records)"),
        &results,
        &runs,
    );
    assert_eq!(row.ok, N, "{row:?}");
    assert!(carried < N as u64, "{N} calls in {carried} records");
    a.shutdown().await.expect("caller");
    drop(callee);
}
