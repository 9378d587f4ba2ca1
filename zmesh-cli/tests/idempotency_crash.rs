//! MISSION K3 across real crashes: a non-repeatable command guarded by the durable SQLite
//! store runs at most once, whatever the process serving it does.
//!
//! The server is a real `zmesh node --serve pump --idempotency-store DB` child process (the
//! demo service: `dispense` is a non-repeatable command that writes `dispense <args-hex>` to
//! the process run's execution log before it runs). It is killed with SIGKILL (no orderly
//! anything) and restarted on the same store file with a new lifecycle generation. The caller
//! is a node in the test process, dialling the server over ClientServer on an ipc endpoint,
//! plus the `zmesh call` CLI for one retry. Every outcome is checked against the execution
//! logs of every process run and against the store file itself (opened read-only).
//!
//! | fault | first call | retry with the same key | runs |
//! |---|---|---|---|
//! | kill -9 after the outcome was recorded, before the REPLY | may have run (`UnknownOutcome`) | the recorded outcome: Ok, the same bytes | 1 |
//! | kill -9 mid-handler | may have run (`UnknownOutcome`) | `UnknownOutcome`, never run again | 1 |
//! | store opened read-only (`file:...?mode=ro`) | `UnknownOutcome` | - | 0 |
//! | store locked by another process after start | `UnknownOutcome` | runs once the lock is gone | 0, then 1 |
//!
//! Every wait is bounded; conditions are polled (exec log, store file, control endpoint)
//! with a bound, never slept on. Children are killed when their handle drops.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::json;
use zmesh::config::{Endpoint, NodeConfig, ServerConfig};
use zmesh::proto::state::ConnState;
use zmesh::runtime::calls::{encode, may_have_run, CallError, CallOptions, RemoteCode, Semantics};
use zmesh::runtime::idempotency::{ScopedKey, SqliteIdempotencyStore};
use zmesh::runtime::operations::OpStatus;
use zmesh::runtime::{Node, NodeEvent};

/// Upper bound of every single wait (generous: a loaded 2-core machine runs debug builds of
/// several child processes at once).
const STEP: Duration = Duration::from_secs(30);

/// How often a polled condition is checked.
const POLL: Duration = Duration::from_millis(20);

/// The served channel, and the server's RID.
const CHANNEL: &str = "pump";
const SERVER_RID: &str = "pump-node";

/// A scratch directory per test, removed when it drops (even on a panic): declare it before
/// the [`PumpServer`] that uses it, so the server's children are killed first.
fn scratch_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("zmesh-k3crash-{name}-"))
        .tempdir()
        .expect("scratch dir")
}

/// A test's scratch directory ([`scratch_dir`]) and the idempotency store file in it, by
/// path and as the server's `--idempotency-store` argument.
struct Scratch {
    dir: tempfile::TempDir,
    db: PathBuf,
    db_arg: String,
}

fn scratch_store(name: &str) -> Scratch {
    let dir = scratch_dir(name);
    let db = dir.path().join("store.db");
    let db_arg = db.to_str().expect("utf-8 path").to_owned();
    Scratch { dir, db, db_arg }
}

/// Starts the server on `store` (its REPLY held `hold_reply_ms` after the outcome is
/// recorded, if given) and a caller ready with its first run, whose generation is returned.
async fn serve_ready(
    dir: &Path,
    store: &str,
    hold_reply_ms: Option<u64>,
) -> (PumpServer, Caller, u64) {
    let server = PumpServer::start(dir, store, hold_reply_ms);
    let gen0 = server.generation().await;
    let mut caller = Caller::start(&server.endpoint).await;
    caller.wait_ready(gen0).await;
    (server, caller, gen0)
}

/// The server: `zmesh node --serve pump` with a durable store, one child process per run,
/// each run with its own execution log and control endpoint. Killed (SIGKILL) on drop.
struct PumpServer {
    dir: PathBuf,
    cfg_path: PathBuf,
    endpoint: String,
    /// The `--idempotency-store` argument: a path or an SQLite `file:` URI.
    store: String,
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    exec_logs: Vec<PathBuf>,
    control: String,
}

impl PumpServer {
    /// Writes the server's configuration (ClientServer on an ipc endpoint in `dir`: the path
    /// stays the same across runs, and no other test can take it) and starts the first run.
    fn start(dir: &Path, store: &str, hold_after_record_ms: Option<u64>) -> PumpServer {
        let endpoint = format!("ipc://{}", dir.join("pump.sock").display());
        let mut cfg = NodeConfig::new(SERVER_RID);
        cfg.memberships = common::server_of(CHANNEL);
        cfg.server = Some(Endpoint::new(endpoint.clone()));
        let cfg_path = dir.join("server.toml");
        std::fs::write(&cfg_path, toml::to_string(&cfg).expect("toml")).expect("write config");
        let mut s = PumpServer {
            dir: dir.to_owned(),
            cfg_path,
            endpoint,
            store: store.to_owned(),
            child: None,
            stderr: Arc::new(Mutex::new(String::new())),
            exec_logs: Vec::new(),
            control: String::new(),
        };
        s.spawn(hold_after_record_ms);
        s
    }

    /// Starts a new process run (a new generation) on the same store file.
    fn spawn(&mut self, hold_after_record_ms: Option<u64>) {
        assert!(self.child.is_none(), "the previous run is still alive");
        let run = self.exec_logs.len();
        let exec_log = self.dir.join(format!("exec-{run}.log"));
        self.control = format!(
            "ipc://{}",
            self.dir.join(format!("ctl-{run}.sock")).display()
        );
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_zmesh"));
        cmd.args(["node", "--events", "ndjson", "--serve", CHANNEL])
            .arg("--config")
            .arg(&self.cfg_path)
            .arg("--exec-log")
            .arg(&exec_log)
            .args(["--idempotency-store", &self.store])
            .args(["--control", &self.control]);
        if let Some(ms) = hold_after_record_ms {
            cmd.args(["--fault-hold-after-record-ms", &ms.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn zmesh node");
        let mut err = child.stderr.take().expect("piped stderr");
        let sink = self.stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().expect("stderr lock").push_str(&text);
            }
        });
        self.exec_logs.push(exec_log);
        self.child = Some(child);
    }

    /// SIGKILL, and reap the process.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("kill -9");
            let _ = c.wait();
        }
    }

    /// What every run wrote to stderr so far.
    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// The current run's lifecycle generation, from its control endpoint (bounded: the run
    /// may still be starting).
    async fn generation(&self) -> u64 {
        let ep = self.control.clone();
        let snap = tokio::task::spawn_blocking(move || {
            let ctx = zmq::Context::new();
            let req = ctx.socket(zmq::REQ).expect("req");
            req.set_linger(0).expect("linger");
            req.set_rcvtimeo(STEP.as_millis() as i32).expect("rcvtimeo");
            req.connect(&ep).expect("connect");
            req.send(&b"snapshot"[..], 0).expect("send");
            let reply = req
                .recv_bytes(0)
                .unwrap_or_else(|e| panic!("no snapshot from {ep} within {STEP:?}: {e}"));
            serde_json::from_slice::<serde_json::Value>(&reply).expect("snapshot JSON")
        })
        .await
        .expect("join");
        common::hex_id(&snap["generation"]).expect("generation")
    }

    /// The arguments of every `dispense` that started running, per process run, in order.
    fn dispensed(&self) -> Vec<Vec<serde_json::Value>> {
        self.exec_logs
            .iter()
            .map(|log| {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                text.lines()
                    .filter_map(|l| l.strip_prefix("dispense "))
                    .map(|h| {
                        let bytes = hex::decode(h).expect("exec log hex");
                        rmp_serde::from_slice(&bytes).expect("dispense arguments")
                    })
                    .collect()
            })
            .collect()
    }

    /// How many times a `dispense` with these arguments started, over every run.
    fn runs_of(&self, args: &serde_json::Value) -> usize {
        self.dispensed()
            .iter()
            .flatten()
            .filter(|a| *a == args)
            .count()
    }

    /// Every line of every run's execution log, for failure messages.
    fn exec_text(&self) -> String {
        self.exec_logs
            .iter()
            .enumerate()
            .map(|(i, log)| {
                format!(
                    "run {i}:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
            .collect()
    }
}

impl Drop for PumpServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A row of the store, as the file holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StoredRow {
    state: i64,
    code: Option<i64>,
    payload: Option<Vec<u8>>,
    owner_rid: String,
    owner_generation: u64,
}

/// The store's row under `key`, read from the file through a read-only connection of its own
/// (never the server's).
fn read_row(db: &Path, key: &ScopedKey) -> rusqlite::Result<Option<StoredRow>> {
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.query_row(
        "SELECT state, code, payload, owner_rid, owner_generation
         FROM idempotency_records WHERE key = ?1",
        [key.as_str()],
        |r| {
            Ok(StoredRow {
                state: r.get(0)?,
                code: r.get(1)?,
                payload: r.get(2)?,
                owner_rid: r.get(3)?,
                owner_generation: u64::from_ne_bytes(r.get::<_, i64>(4)?.to_ne_bytes()),
            })
        },
    )
    .optional()
}

/// [`read_row`] for polling: `None` while there is no row, or while the file cannot be read.
fn polled_row(db: &Path, key: &ScopedKey) -> Option<StoredRow> {
    read_row(db, key).ok().flatten()
}

/// [`read_row`] for a final check: the file must be readable.
fn stored(db: &Path, key: &ScopedKey) -> Option<StoredRow> {
    read_row(db, key).expect("the store file reads")
}

/// Polls `f` until it answers `Some`, at most `limit`; panics with `what` (and `context()`)
/// past the bound.
async fn until<T>(
    what: &str,
    limit: Duration,
    context: impl Fn() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}\n{}",
            context()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The caller: a node in the test process with one ClientServer link to the pump.
struct Caller {
    node: Node,
    events: common::Events,
}

impl Caller {
    async fn start(endpoint: &str) -> Caller {
        let mut cfg = NodeConfig::new("operator");
        cfg.servers = vec![ServerConfig::new(CHANNEL, endpoint).rid(SERVER_RID)];
        let node = Node::start(cfg).await.expect("caller");
        let events = common::Events::new(node.take_events().expect("events"));
        Caller { node, events }
    }

    /// Waits (bounded) until the link to the pump is ready on the run with `generation`.
    async fn wait_ready(&mut self, generation: u64) {
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            let snap = self.node.snapshot().await.expect("snapshot");
            if snap
                .links
                .iter()
                .any(|l| l.state == ConnState::Ready && l.peer_generation == Some(generation))
            {
                return;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            assert!(
                !left.is_zero(),
                "the pump (generation {generation:x}) not ready within {STEP:?}:\n{}",
                snap.to_table()
            );
            // A state change, or a look again at the bound: wait() panics on its own bound.
            let _ = tokio::time::timeout(
                left.min(Duration::from_millis(500)),
                self.events.wait(STEP, |e| matches!(e, NodeEvent::State(_))),
            )
            .await;
        }
    }

    /// A `dispense` with these arguments and idempotency key, its raw result bytes. The
    /// caller pins the semantics it was built against (so its registry row says what kind of
    /// call it was).
    fn dispense(
        &self,
        args: &serde_json::Value,
        key: &str,
    ) -> tokio::task::JoinHandle<Result<Bytes, CallError>> {
        let node = self.node.clone();
        let args = encode(args).expect("encode");
        let opts = CallOptions {
            idempotency_key: Some(key.to_owned()),
            semantics: Some(Semantics::NonRepeatableCommand),
            ..CallOptions::default()
        };
        tokio::spawn(async move { node.call_raw(CHANNEL, "dispense", args, opts).await })
    }
}

/// Waits (bounded) for a call's result.
async fn result_of(
    task: tokio::task::JoinHandle<Result<Bytes, CallError>>,
) -> Result<Bytes, CallError> {
    tokio::time::timeout(STEP, task)
        .await
        .expect("the call completes within the bound")
        .expect("join")
}

/// A MessagePack string, as a handler's result bytes carry it.
fn msgpack_str(s: &str) -> Vec<u8> {
    encode(s).expect("encode").to_vec()
}

/// Runs `zmesh call` (a separate caller process) with the same key, bounded; its JSON line.
fn cli_call(dir: &Path, endpoint: &str, args: &serde_json::Value, key: &str) -> serde_json::Value {
    let mut cfg = NodeConfig::new("operator-cli");
    cfg.servers = vec![ServerConfig::new(CHANNEL, endpoint).rid(SERVER_RID)];
    let path = dir.join("cli.toml");
    std::fs::write(&path, toml::to_string(&cfg).expect("toml")).expect("write");
    let child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["call", "--config"])
        .arg(&path)
        .args(["--channel", CHANNEL, "--method", "dispense", "--key", key])
        .args(["--args", &args.to_string()])
        .args(["--wait-ms", &STEP.as_millis().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zmesh call");
    // Waited for on a thread, so the wait is bounded without polling.
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(STEP * 2) {
        Ok(out) => out.expect("zmesh call output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("zmesh call took more than {:?}", STEP * 2);
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The server guards dispense with its store: its contract says so, and the CLI is quiet.
    assert!(
        !stderr.contains("does not guard"),
        "zmesh call warned of a guarded method: {stderr}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "zmesh call printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// MISSION K3 (and C2, K2): kill -9 after the handler ran and its outcome was recorded, but
/// before the REPLY left. The caller is told "may have run" (`UnknownOutcome`); the server is
/// restarted on the same store file with a new generation; a retry with the same key gets the
/// recorded outcome (Ok, the very bytes the first run recorded) without running, and so does
/// the `zmesh call` CLI, whose JSON says `replayed` (as does its operations row). The
/// execution logs of both runs show exactly one run.
#[tokio::test]
async fn k3_crash_after_outcome_recorded_retry_answers_the_record() {
    let Scratch {
        dir: scratch,
        db,
        db_arg,
    } = scratch_store("recorded");
    // The REPLY is held 10 minutes after the outcome is recorded: the kill comes first.
    let (mut server, mut caller, gen0) = serve_ready(scratch.path(), &db_arg, Some(600_000)).await;

    let args = json!({"order": "wo-a"});
    let key = ScopedKey::from_idempotency_key(CHANNEL, "dispense", "wo-crash-a");
    let first = caller.dispense(&args, "wo-crash-a");
    // The handler ran (exec log) and its outcome is in the file (read-only look at the store).
    until(
        "the first run in the exec log",
        STEP,
        || server.exec_text(),
        || (server.runs_of(&args) == 1).then_some(()),
    )
    .await;
    let row = until(
        "the outcome recorded in the store",
        STEP,
        || server.stderr(),
        || polled_row(&db, &key).filter(|r| r.state == 1),
    )
    .await;
    assert_eq!(row.code, Some(0), "recorded Ok: {row:?}");
    assert_eq!(row.owner_rid, SERVER_RID);
    assert_eq!(row.owner_generation, gen0, "recorded by the first run");
    let recorded = row.payload.clone().expect("result bytes recorded");
    assert_eq!(recorded, msgpack_str("dispensed #1"));
    until(
        "the server holding the REPLY",
        STEP,
        || server.stderr(),
        || {
            server
                .stderr()
                .contains("fault injection: outcome recorded")
                .then_some(())
        },
    )
    .await;
    assert!(!first.is_finished(), "the REPLY is held: no answer yet");

    server.kill9();
    let err = result_of(first).await.expect_err("no REPLY ever left");
    assert!(may_have_run(&err), "{err:?}");
    assert_eq!(err.code(), "UnknownOutcome", "{err:?}");
    // The operator's tray (K2) keeps the row nobody knows the outcome of.
    let ops = caller.node.operations().views();
    let uncertain: Vec<_> = ops
        .iter()
        .filter(|o| o.status == OpStatus::UnknownOutcome)
        .collect();
    assert_eq!(uncertain.len(), 1, "{ops:?}");
    assert_eq!(&*uncertain[0].method, "dispense");
    assert_eq!(uncertain[0].semantics, "non-repeatable-command");

    // Restart on the same file: a new generation, nothing held this time.
    server.spawn(None);
    let gen1 = server.generation().await;
    assert_ne!(gen1, gen0, "a new process run");
    caller.wait_ready(gen1).await;
    let retry = result_of(caller.dispense(&args, "wo-crash-a"))
        .await
        .expect("the recorded outcome");
    assert_eq!(
        &retry[..],
        &recorded[..],
        "the very bytes the first run recorded"
    );
    // Another process, the CLI, retrying the same intent gets the same record.
    let cli = cli_call(scratch.path(), &server.endpoint, &args, "wo-crash-a");
    assert_eq!(cli["ok"], true, "{cli}");
    assert_eq!(cli["result"], "dispensed #1", "{cli}");
    // The answer says it came from the record (WIRE.md §4.17), and so does the call's row.
    assert_eq!(cli["replayed"], true, "{cli}");
    assert_eq!(cli["operation"]["replayed"], true, "{cli}");

    let runs = server.dispensed();
    assert_eq!(runs[0], vec![args.clone()], "{}", server.exec_text());
    assert!(runs[1].is_empty(), "never re-run: {}", server.exec_text());
    assert_eq!(stored(&db, &key), Some(row), "the record is unchanged");
    caller.node.shutdown().await.expect("caller");
}

/// MISSION K3 (and C2): kill -9 while the handler runs (the record is still "in progress").
/// The caller is told "may have run"; after a restart on the same store file, a retry with
/// the same key is answered `UnknownOutcome` without running: the record says a run began and
/// nobody knows how it ended, and a non-repeatable command is never run again on a guess. The
/// execution logs show exactly one run.
#[tokio::test]
async fn k3_crash_mid_handler_retry_answers_unknown_outcome_never_reruns() {
    let Scratch {
        dir: scratch,
        db,
        db_arg,
    } = scratch_store("midrun");
    let (mut server, mut caller, gen0) = serve_ready(scratch.path(), &db_arg, None).await;

    // The handler holds 60 s after it ran: the kill comes first.
    let args = json!({"hold_ms": 60_000});
    let key = ScopedKey::from_idempotency_key(CHANNEL, "dispense", "wo-crash-b");
    let first = caller.dispense(&args, "wo-crash-b");
    until(
        "the run in the exec log",
        STEP,
        || server.exec_text(),
        || (server.runs_of(&args) == 1).then_some(()),
    )
    .await;
    // "In progress" was recorded before the handler ran.
    let row = until(
        "the record in the store",
        STEP,
        || server.stderr(),
        || polled_row(&db, &key),
    )
    .await;
    assert_eq!((row.state, row.code, row.payload.as_ref()), (0, None, None));
    assert_eq!(row.owner_generation, gen0);
    assert!(!first.is_finished(), "the handler is still running");

    server.kill9();
    let err = result_of(first).await.expect_err("no REPLY ever left");
    assert!(may_have_run(&err), "{err:?}");
    assert_eq!(err.code(), "UnknownOutcome", "{err:?}");

    server.spawn(None);
    let gen1 = server.generation().await;
    assert_ne!(gen1, gen0);
    caller.wait_ready(gen1).await;
    let err = result_of(caller.dispense(&args, "wo-crash-b"))
        .await
        .expect_err("never re-run on a guess");
    match &err {
        CallError::Remote {
            code: RemoteCode::UnknownOutcome,
            message,
        } => assert!(message.contains("not run again"), "{message}"),
        other => panic!("expected the server's UnknownOutcome, got {other:?}"),
    }
    assert!(may_have_run(&err));

    let runs = server.dispensed();
    assert_eq!(runs[0], vec![args.clone()], "{}", server.exec_text());
    assert!(runs[1].is_empty(), "never re-run: {}", server.exec_text());
    assert_eq!(
        stored(&db, &key),
        Some(row),
        "still in progress, same owner"
    );
    caller.node.shutdown().await.expect("caller");
}

/// MISSION K3: a store the server cannot write (opened through SQLite's `mode=ro` URI flag,
/// which SQLite enforces for every user, root included). The node starts and serves queries;
/// every `dispense` is answered `UnknownOutcome` and never runs: zero `dispense` lines in the
/// execution log, with or without an idempotency key, and nothing in the store.
#[tokio::test]
async fn k3_crash_unwritable_store_unknown_outcome_zero_runs() {
    let Scratch {
        dir: scratch, db, ..
    } = scratch_store("readonly");
    // A store file of this build's schema, so opening it read-only needs no write.
    drop(SqliteIdempotencyStore::open(&db).expect("create the store"));
    let uri = format!("file:{}?mode=ro", db.display());
    let (server, caller, _) = serve_ready(scratch.path(), &uri, None).await;

    // Queries never touch the store.
    let echoed: String = tokio::time::timeout(
        STEP,
        caller
            .node
            .call_with(CHANNEL, "echo", "still serving", CallOptions::default()),
    )
    .await
    .expect("bounded")
    .expect("a query is served");
    assert_eq!(echoed, "still serving");

    let args = json!({"order": "wo-c"});
    for key in [Some("wo-crash-c"), None] {
        let opts = CallOptions {
            idempotency_key: key.map(str::to_owned),
            ..CallOptions::default()
        };
        let err = tokio::time::timeout(
            STEP,
            caller
                .node
                .call_raw(CHANNEL, "dispense", encode(&args).expect("encode"), opts),
        )
        .await
        .expect("bounded")
        .expect_err("refused: the store cannot vouch for it");
        match &err {
            CallError::Remote {
                code: RemoteCode::UnknownOutcome,
                message,
            } => assert!(message.contains("idempotency store failed"), "{message}"),
            other => panic!("key {key:?}: expected UnknownOutcome, got {other:?}"),
        }
    }
    assert_eq!(server.runs_of(&args), 0, "{}", server.exec_text());
    assert!(
        server.exec_text().contains("echo "),
        "the exec log works: {}",
        server.exec_text()
    );
    let key = ScopedKey::from_idempotency_key(CHANNEL, "dispense", "wo-crash-c");
    assert_eq!(stored(&db, &key), None);
    caller.node.shutdown().await.expect("caller");
}

/// MISSION K3: the store becomes unusable after the server started: another process holds
/// SQLite's write lock (an open `BEGIN EXCLUSIVE`). A `dispense` that worked before is now
/// answered `UnknownOutcome` once the store's 5 s busy wait runs out, and does not run; once
/// the lock is gone the same call runs, exactly once.
#[tokio::test]
async fn k3_crash_store_locked_after_start_unknown_outcome_zero_runs() {
    let Scratch {
        dir: scratch,
        db,
        db_arg,
    } = scratch_store("locked");
    let (server, caller, _) = serve_ready(scratch.path(), &db_arg, None).await;

    let before = json!({"order": "wo-d1"});
    let ok = result_of(caller.dispense(&before, "wo-crash-d1"))
        .await
        .expect("the store works");
    assert_eq!(&ok[..], &msgpack_str("dispensed #1")[..]);

    let lock = Connection::open(&db).expect("open the store elsewhere");
    lock.execute_batch("BEGIN EXCLUSIVE")
        .expect("take the write lock");
    let during = json!({"order": "wo-d2"});
    let err = result_of(caller.dispense(&during, "wo-crash-d2"))
        .await
        .expect_err("refused while the store is locked");
    match &err {
        CallError::Remote {
            code: RemoteCode::UnknownOutcome,
            message,
        } => assert!(message.contains("idempotency store failed"), "{message}"),
        other => panic!("expected UnknownOutcome, got {other:?}"),
    }
    assert_eq!(server.runs_of(&during), 0, "{}", server.exec_text());
    lock.execute_batch("COMMIT").expect("release the lock");
    drop(lock);

    // Nothing was recorded for the refused call, so the same intent now runs, once.
    let ok = result_of(caller.dispense(&during, "wo-crash-d2"))
        .await
        .expect("runs once the store is back");
    assert_eq!(&ok[..], &msgpack_str("dispensed #2")[..]);
    assert_eq!(server.runs_of(&before), 1, "{}", server.exec_text());
    assert_eq!(server.runs_of(&during), 1, "{}", server.exec_text());
    caller.node.shutdown().await.expect("caller");
}

/// `zmesh idempotency ARGS` on the store; its stdout, and whether it succeeded.
fn zmesh_idempotency(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .arg("idempotency")
        .args(args)
        .output()
        .expect("zmesh idempotency");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// MISSION K3, after a crash: the record a server killed mid-handler left in progress
/// (which answers every retry `UnknownOutcome` for its whole retention) is listed by `zmesh
/// idempotency list` with its age, the node run that started it and the caller whose call
/// started it (its RID as the server knew it), shown by `show`, and settled by an
/// operator with `resolve --ran --note`: the retry is then answered `Exception` carrying the
/// note, and the command never runs again. A record no longer in progress cannot be resolved.
#[tokio::test]
async fn k3_record_left_in_progress_is_listed_with_its_caller_and_resolved() {
    let Scratch {
        dir: scratch,
        db,
        db_arg,
    } = scratch_store("operator");
    let (mut server, mut caller, gen0) = serve_ready(scratch.path(), &db_arg, None).await;
    let args = json!({"hold_ms": 60_000});
    let key = ScopedKey::from_idempotency_key(CHANNEL, "dispense", "wo-operator");
    let first = caller.dispense(&args, "wo-operator");
    until(
        "the record in the store",
        STEP,
        || server.stderr(),
        || polled_row(&db, &key),
    )
    .await;
    server.kill9();
    result_of(first).await.expect_err("no REPLY ever left");

    let (ok, out) = zmesh_idempotency(&["list", "--store", &db_arg, "--json"]);
    assert!(ok, "{out}");
    let listed: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let rows = listed.as_array().expect("array");
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["key"], key.as_str());
    assert_eq!(rows[0]["state"], "in-progress");
    assert_eq!(rows[0]["owner_generation"], format!("{gen0:016x}"));
    assert!(
        rows[0]["age_ms"].is_u64(),
        "how long it has been in progress: {listed}"
    );
    assert_eq!(
        (&rows[0]["method"], &rows[0]["idempotency_key"]),
        (&"dispense".into(), &"wo-operator".into())
    );
    let caller_rid = caller.node.rid().to_owned();
    assert_eq!(rows[0]["caller"], caller_rid.as_str(), "{listed}");
    let (ok, table) = zmesh_idempotency(&["list", "--store", &db_arg]);
    assert!(
        ok && table.contains(key.as_str())
            && table.contains("AGE")
            && table.contains("CALLER")
            && table.contains(&caller_rid)
            && table.contains("1 in progress"),
        "{table}"
    );
    let (ok, shown) = zmesh_idempotency(&["show", "--store", &db_arg, key.as_str()]);
    assert!(
        ok && shown.contains("in-progress") && shown.contains(&caller_rid),
        "{shown}"
    );

    let note = "the dispenser's counter moved by 5 at 12:00";
    let (ok, out) = zmesh_idempotency(&[
        "resolve",
        "--store",
        &db_arg,
        key.as_str(),
        "--ran",
        "--note",
        note,
    ]);
    assert!(ok, "{out}");
    let (ok, _) = zmesh_idempotency(&[
        "resolve",
        "--store",
        &db_arg,
        key.as_str(),
        "--did-not-run",
        "--note",
        "again",
    ]);
    assert!(!ok, "a record no longer in progress is not resolved twice");

    server.spawn(None);
    let gen1 = server.generation().await;
    caller.wait_ready(gen1).await;
    let err = result_of(caller.dispense(&args, "wo-operator"))
        .await
        .expect_err("answered from the resolved record");
    match &err {
        CallError::Remote {
            code: RemoteCode::Exception,
            message,
        } => assert!(message.contains(note), "{message}"),
        other => panic!("expected the operator's Exception, got {other:?}"),
    }
    assert!(server.dispensed()[1].is_empty(), "{}", server.exec_text());
    caller.node.shutdown().await.expect("caller");
}
