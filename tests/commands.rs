//! Commands over real sockets (MISSION K1-K6, seed 003): what a handler may answer, how calls
//! to one service are executed, idempotency, the operations registry and the contract.

mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{mesh_bind, mesh_server, peer, start_ready};
use tokio::sync::{mpsc, Semaphore};
use zmesh::config::NodeConfig;
use zmesh::runtime::calls::{
    decode, encode, encode_args, may_have_run, CallError, CallOptions, RemoteCode, Request,
    Semantics, ServeError,
};
use zmesh::runtime::idempotency::{
    Begin, Fingerprint, IdempotencyFuture, IdempotencyStore, IdempotencyStoreError, MemoryStore,
    Outcome, Owner, ScopedKey,
};
use zmesh::runtime::operations::OpStatus;
use zmesh::runtime::service::{Execution, Method, Service};
use zmesh::runtime::{ExposeError, Node};

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(15);

/// A RouteMesh pair: `b` serves `channel` with `handler` (registered before it starts), `a`
/// dials it and is ready.
async fn pair<F, Fut>(channel: &str, handler: F) -> (Node, Node)
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<bytes::Bytes, ServeError>> + Send + 'static,
{
    let bind = mesh_bind(false);
    let b = mesh_server("b", channel, &bind);
    let b = Node::builder(b)
        .serve(channel, handler)
        .start()
        .await
        .expect("b");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &bind)];
    let (a, _events) = start_ready(a, "b").await;
    (a, b)
}

/// MISSION K6: a handler chooses its code from the allow-list; `Busy`, `Superseded`,
/// `NotFound` and `Unavailable` are the runtime's own, so a handler that returns one (even a
/// `ServeError` built field by field) answers `Exception`, which says it ran. `UnknownOutcome`
/// (a gateway whose downstream call was lost) travels as it is and says it may have run.
#[tokio::test]
async fn k6_handler_codes_outside_the_allow_list_become_exception() {
    let (a, b) = pair("gw", |req: Request| async move {
        Err(match req.method.as_str() {
            "busy" => ServeError {
                code: RemoteCode::Busy,
                message: "my own busy".into(),
            },
            "superseded" => ServeError::new(RemoteCode::Superseded, "mine"),
            "unavailable" => ServeError {
                code: RemoteCode::Unavailable,
                message: "mine".into(),
            },
            "lost" => ServeError::new(RemoteCode::UnknownOutcome, "the drive did not answer"),
            "forbidden" => ServeError::new(RemoteCode::Forbidden, "local mode"),
            _ => ServeError::method_not_found(&req.method),
        })
    })
    .await;
    let call = |m: &'static str| {
        let a = a.clone();
        async move {
            tokio::time::timeout(STEP, a.call::<_, ()>("gw", m, &()))
                .await
                .expect("answered")
                .expect_err("an error")
        }
    };
    for m in ["busy", "superseded", "unavailable"] {
        let err = call(m).await;
        assert!(
            matches!(
                &err,
                CallError::Remote {
                    code: RemoteCode::Exception,
                    ..
                }
            ),
            "{m}: {err:?}"
        );
        assert!(may_have_run(&err), "{m}: Exception ran");
    }
    let err = call("lost").await;
    assert!(
        matches!(&err, CallError::Remote { code: RemoteCode::UnknownOutcome, message } if message == "the drive did not answer"),
        "{err:?}"
    );
    assert!(may_have_run(&err));
    let err = call("forbidden").await;
    assert!(
        matches!(
            &err,
            CallError::Remote {
                code: RemoteCode::Forbidden,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!may_have_run(&err));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// A RouteMesh pair: `b` exposes `service` (with `store` guarding its non-repeatable
/// commands, if given), `a` dials it and is ready.
async fn pair_with(service: Service, store: Option<Arc<dyn IdempotencyStore>>) -> (Node, Node) {
    let bind = mesh_bind(false);
    let b = mesh_server("b", service.channel(), &bind);
    let mut builder = Node::builder(b).expose(service);
    if let Some(store) = store {
        builder = builder.idempotency_store(store);
    }
    let b = builder.start().await.expect("b");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &bind)];
    let (a, _events) = start_ready(a, "b").await;
    (a, b)
}

/// A gate handlers wait at until the test opens it, and the labels of the calls that started.
#[derive(Clone)]
struct Gate {
    permits: Arc<Semaphore>,
    started: mpsc::UnboundedSender<String>,
}

impl Gate {
    fn new() -> (Gate, mpsc::UnboundedReceiver<String>) {
        let (started, rx) = mpsc::unbounded_channel();
        (
            Gate {
                permits: Arc::new(Semaphore::new(0)),
                started,
            },
            rx,
        )
    }

    /// Reports `label` as started, then waits for a permit.
    async fn pass(&self, label: String) {
        let _ = self.started.send(label);
        if let Ok(p) = self.permits.acquire().await {
            p.forget();
        }
    }

    fn open(&self, n: usize) {
        self.permits.add_permits(n);
    }
}

async fn started(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(STEP, rx.recv())
        .await
        .expect("a handler started in time")
        .expect("gate open")
}

/// Waits (bounded) until `b` holds `n` accepted calls not yet answered (running or queued).
async fn serving(b: &Node, n: usize) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let got = b.snapshot().await.expect("snapshot").serving_calls;
        if got == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "serving {got} calls, waited for {n}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn code_of(err: &CallError) -> Option<RemoteCode> {
    match err {
        CallError::Remote { code, .. } => Some(*code),
        _ => None,
    }
}

/// The demo pump: `pressure` (query), `set` (idempotent command, conflating), `dispense`
/// (non-repeatable command) and `legacy` (undeclared), counting runs of `dispense`.
fn pump(runs: Arc<AtomicU64>) -> Service {
    Service::new("pump")
        .version("2")
        .method(Method::query("pressure"), |_r: Request| async move {
            encode(&1.5f64)
        })
        .method(
            Method::idempotent_command("set").conflate(),
            |r: Request| async move {
                let v: u32 = r.args()?;
                encode(&v)
            },
        )
        .method(
            Method::non_repeatable_command("dispense"),
            move |_r: Request| {
                let runs = runs.clone();
                async move { encode(&(runs.fetch_add(1, Ordering::SeqCst) + 1)) }
            },
        )
        .method(Method::undeclared("legacy"), |_r: Request| async move {
            encode("ok")
        })
}

/// MISSION K1: `describe` reports every method's semantics (undeclared stays undeclared),
/// shape, execution and conflation, the mailbox and the version; another node fetches the
/// same contract over the wire (`$describe`).
#[tokio::test]
async fn k1_describe_reports_semantics_and_is_fetched_over_the_wire() {
    let (a, b) = pair_with(pump(Arc::new(AtomicU64::new(0))), None).await;
    let local = b.describe();
    let json = serde_json::to_value(&local).expect("json");
    let methods = &json["services"][0]["methods"];
    let by_name = |n: &str| {
        methods
            .as_array()
            .expect("methods")
            .iter()
            .find(|m| m["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("no method {n} in {json}"))
    };
    assert_eq!(by_name("pressure")["semantics"], "query");
    assert_eq!(by_name("pressure")["execution"], "parallel");
    assert_eq!(by_name("set")["semantics"], "idempotent-command");
    assert_eq!(by_name("set")["conflate"], true);
    assert_eq!(by_name("set")["execution"], "serial");
    assert_eq!(by_name("dispense")["semantics"], "non-repeatable-command");
    assert_eq!(by_name("legacy")["semantics"], "undeclared");
    assert_eq!(json["services"][0]["version"], "2");
    assert_eq!(json["services"][0]["mailbox"], 100);
    let fetched = tokio::time::timeout(STEP, a.fetch_contract("pump", CallOptions::default()))
        .await
        .expect("in time")
        .expect("contract");
    assert_eq!(fetched, local);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K3: `describe` says of each non-repeatable command whether it is guarded by a
/// durable idempotency store: not without a store, not behind a [`MemoryStore`] (its records
/// go with the process), yes behind an SQLite store, and of no other method at all.
#[tokio::test]
async fn k3_describe_says_whether_non_repeatable_commands_are_guarded() {
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-guarded-")
        .tempdir()
        .expect("dir");
    let sqlite: Arc<dyn IdempotencyStore> = Arc::new(
        zmesh::runtime::idempotency::SqliteIdempotencyStore::open(tmp.path().join("k.db"))
            .expect("sqlite store"),
    );
    let memory: Arc<dyn IdempotencyStore> = Arc::new(MemoryStore::new());
    for (store, want) in [(None, false), (Some(memory), false), (Some(sqlite), true)] {
        let (a, b) = pair_with(pump(Arc::new(AtomicU64::new(0))), store).await;
        let contract = b.describe();
        for m in &contract.services[0].methods {
            let expected = (m.name == "dispense").then_some(want);
            assert_eq!(m.guarded, expected, "{}", m.name);
        }
        a.shutdown().await.expect("a");
        b.shutdown().await.expect("b");
    }
}

/// MISSION K1: a caller that pins the semantics it was built against is refused
/// `IncompatibleVersion` (did not run) when the method is more dangerous to repeat here; a
/// pin at least as dangerous, or none, runs it. A method the service does not declare is
/// `MethodNotFound` (did not run).
#[tokio::test]
async fn k1_pinned_semantics_more_dangerous_here_is_refused_incompatible_version() {
    let runs = Arc::new(AtomicU64::new(0));
    let (a, b) = pair_with(pump(runs.clone()), None).await;
    let call = |method: &'static str, pin: Option<Semantics>| {
        let a = a.clone();
        async move {
            let opts = CallOptions {
                semantics: pin,
                ..CallOptions::default()
            };
            tokio::time::timeout(
                STEP,
                a.call_with::<_, serde_json::Value>("pump", method, &(), opts),
            )
            .await
            .expect("answered")
        }
    };
    let err = call("dispense", Some(Semantics::Query))
        .await
        .expect_err("a query pin must not run a non-repeatable command");
    assert_eq!(
        code_of(&err),
        Some(RemoteCode::IncompatibleVersion),
        "{err:?}"
    );
    assert!(!may_have_run(&err));
    let err = call("legacy", Some(Semantics::IdempotentCommand))
        .await
        .expect_err("declared -> undeclared is more dangerous");
    assert_eq!(
        code_of(&err),
        Some(RemoteCode::IncompatibleVersion),
        "{err:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran");
    call("dispense", Some(Semantics::NonRepeatableCommand))
        .await
        .expect("same semantics runs");
    call("dispense", None).await.expect("no pin runs");
    call("pressure", Some(Semantics::NonRepeatableCommand))
        .await
        .expect("less dangerous than the pin runs");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let err = call("nope", None).await.expect_err("not declared");
    assert_eq!(code_of(&err), Some(RemoteCode::MethodNotFound), "{err:?}");
    assert!(!may_have_run(&err));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K4: invalid combinations are refused when the service is exposed, with a clear
/// error: conflate on a non-repeatable (or undeclared) method, conflate with parallel
/// execution, a mailbox of 0.
#[tokio::test]
async fn k4_invalid_combinations_refused_when_exposed() {
    let b = Node::start(NodeConfig::new("b")).await.expect("b");
    let h = |_r: Request| async move { Ok::<_, ServeError>(Bytes::new()) };
    let bad = [
        Service::new("x").method(Method::non_repeatable_command("m").conflate(), h),
        Service::new("x").method(Method::undeclared("m").conflate(), h),
        Service::new("x")
            .execution(Execution::Parallel)
            .method(Method::idempotent_command("m").conflate(), h),
        Service::new("x").mailbox(0).method(Method::query("m"), h),
    ];
    for service in bad {
        let shown = format!("{service:?}");
        match b.expose(service) {
            Err(ExposeError::Contract(e)) => assert!(!e.to_string().is_empty()),
            other => panic!("{shown} exposed: {other:?}"),
        }
    }
    b.expose(Service::new("x").method(Method::idempotent_command("m").conflate(), h))
        .expect("a conflating idempotent command on a serial queue is fine");
    b.shutdown().await.expect("b");
}

/// A handler that records its argument in `log` and waits at `gate` when the argument starts
/// with "wait".
fn logged(
    gate: Gate,
    log: Arc<Mutex<Vec<String>>>,
) -> impl Fn(
    Request,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Bytes, ServeError>> + Send>>
       + Send
       + Sync
       + 'static {
    move |r: Request| {
        let (gate, log) = (gate.clone(), log.clone());
        Box::pin(async move {
            let label: String = r.args()?;
            if let Ok(mut l) = log.lock() {
                l.push(label.clone());
            }
            if label.starts_with("wait") {
                gate.pass(label.clone()).await;
            }
            encode(&label)
        })
    }
}

/// A service whose command `hold` waits at `gate`, with the given execution and mailbox;
/// `step` and `set` (idempotent commands; `set` conflates) are [`logged`].
fn held(
    gate: Gate,
    log: Arc<Mutex<Vec<String>>>,
    execution: Option<Execution>,
    mailbox: usize,
) -> Service {
    let g2 = gate.clone();
    let mut s = Service::new("cell")
        .mailbox(mailbox)
        .method(Method::idempotent_command("hold"), move |r: Request| {
            let gate = gate.clone();
            async move {
                let label: String = r.args()?;
                gate.pass(label.clone()).await;
                encode(&label)
            }
        })
        .method(
            Method::idempotent_command("step"),
            logged(g2.clone(), log.clone()),
        )
        .method(
            Method::idempotent_command("set").conflate(),
            logged(g2, log),
        );
    if let Some(e) = execution {
        s = s.execution(e);
    }
    s
}

/// MISSION K4: commands run one at a time (default for command semantics); behind a running
/// call, 101 arrivals fill the mailbox of 100 and exactly one is refused `Busy` (did not
/// run, never queued); the other 100 run once the first ends.
#[tokio::test]
async fn k4_mailbox_of_100_behind_a_running_call_refuses_exactly_one_busy() {
    let (gate, mut started_rx) = Gate::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = pair_with(held(gate.clone(), log, None, 100), None).await;
    let first = {
        let a = a.clone();
        tokio::spawn(async move { a.call::<_, String>("cell", "hold", &"first").await })
    };
    assert_eq!(started(&mut started_rx).await, "first");
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..101 {
        let a = a.clone();
        calls.spawn(async move { a.call::<_, String>("cell", "hold", &format!("q{i}")).await });
    }
    // The one refusal comes while the first call still holds the queue.
    let busy = tokio::time::timeout(STEP, calls.join_next())
        .await
        .expect("the refusal comes at once")
        .expect("a call")
        .expect("task");
    let err = busy.expect_err("Busy");
    assert_eq!(code_of(&err), Some(RemoteCode::Busy), "{err:?}");
    assert!(!may_have_run(&err));
    serving(&b, 101).await;
    gate.open(1_000);
    let mut ok = 0;
    while let Some(r) = tokio::time::timeout(STEP, calls.join_next())
        .await
        .expect("in time")
    {
        let r = r.expect("task");
        assert!(r.is_ok(), "only one Busy: {r:?}");
        ok += 1;
    }
    assert_eq!(ok, 100);
    first.await.expect("task").expect("first");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K4: a conflating idempotent command that waits in its queue is replaced by a newer
/// call of the same method; the replaced caller is answered `Superseded` at once (did not
/// run), the newer one runs.
#[tokio::test]
async fn k4_conflate_answers_the_replaced_caller_superseded_at_once() {
    let (gate, mut started_rx) = Gate::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = pair_with(held(gate.clone(), log.clone(), None, 100), None).await;
    let first = {
        let a = a.clone();
        tokio::spawn(async move { a.call::<_, String>("cell", "hold", &"first").await })
    };
    assert_eq!(started(&mut started_rx).await, "first");
    let old = {
        let a = a.clone();
        tokio::spawn(async move { a.call::<_, String>("cell", "set", &"1200").await })
    };
    serving(&b, 2).await;
    let new = {
        let a = a.clone();
        tokio::spawn(async move { a.call::<_, String>("cell", "set", &"1300").await })
    };
    let err = tokio::time::timeout(STEP, old)
        .await
        .expect("answered while the queue is still held")
        .expect("task")
        .expect_err("superseded");
    assert_eq!(code_of(&err), Some(RemoteCode::Superseded), "{err:?}");
    assert!(!may_have_run(&err));
    gate.open(10);
    assert_eq!(new.await.expect("task").expect("newer runs"), "1300");
    first.await.expect("task").expect("first");
    assert_eq!(*log.lock().expect("log"), vec!["1300".to_owned()]);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K4: keyed execution: calls with one key run one at a time in arrival order, while
/// calls with other keys proceed meanwhile.
#[tokio::test]
async fn k4_keyed_execution_keeps_per_key_order_while_other_keys_proceed() {
    let (gate, mut started_rx) = Gate::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let key = Execution::keyed(|r: &Request| {
        let label: String = r.args()?;
        Ok(label.trim_start_matches("wait").chars().take(1).collect())
    });
    let (a, b) = pair_with(held(gate.clone(), log.clone(), Some(key), 100), None).await;
    let call = |label: &'static str| {
        let a = a.clone();
        tokio::spawn(async move { a.call::<_, String>("cell", "step", &label).await })
    };
    // Device A's first command holds A's queue.
    let a1 = call("waitA1");
    assert_eq!(started(&mut started_rx).await, "waitA1");
    let a2 = call("A2");
    serving(&b, 2).await;
    let a3 = call("A3");
    serving(&b, 3).await;
    // Device B is not behind A.
    for label in ["B1", "B2", "B3"] {
        let r = tokio::time::timeout(STEP, call(label))
            .await
            .expect("B proceeds while A is held")
            .expect("task");
        assert_eq!(r.expect("B"), label);
    }
    gate.open(1);
    for (h, label) in [(a1, "waitA1"), (a2, "A2"), (a3, "A3")] {
        assert_eq!(h.await.expect("task").expect("A"), label);
    }
    let order: Vec<String> = log
        .lock()
        .expect("log")
        .iter()
        .filter(|l| l.contains('A'))
        .cloned()
        .collect();
    assert_eq!(order, ["waitA1", "A2", "A3"]);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K4, C6: the ttl is read after the queue wait: a call that waited behind a running
/// one until its ttl ran out is refused `Timeout` by the server (did not run), never run late.
#[tokio::test]
async fn k4_ttl_read_after_the_queue_wait_refuses_timeout() {
    let (gate, mut started_rx) = Gate::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = pair_with(held(gate.clone(), log.clone(), None, 100), None).await;
    let first = {
        let a = a.clone();
        tokio::spawn(async move { a.call::<_, String>("cell", "hold", &"first").await })
    };
    assert_eq!(started(&mut started_rx).await, "first");
    let opts = CallOptions::with_ttl(Duration::from_millis(400));
    let err = tokio::time::timeout(
        STEP,
        a.call_with::<_, String>("cell", "step", &"late", opts),
    )
    .await
    .expect("answered")
    .expect_err("refused");
    assert_eq!(
        err,
        CallError::Timeout {
            refused_by_server: true
        },
        "{err:?}"
    );
    assert!(!may_have_run(&err));
    gate.open(10);
    first.await.expect("task").expect("first");
    assert!(
        log.lock().expect("log").is_empty(),
        "the late call never ran"
    );
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// A store around a [`MemoryStore`] that counts `begin`s and can be made to fail.
#[derive(Default)]
struct ProbeStore {
    inner: MemoryStore,
    begins: AtomicUsize,
    failing: bool,
}

impl IdempotencyStore for ProbeStore {
    fn begin(
        &self,
        key: &ScopedKey,
        fingerprint: &Fingerprint,
        owner: &Owner,
        caller: &str,
        retention: Duration,
    ) -> IdempotencyFuture<'_, Begin> {
        self.begins.fetch_add(1, Ordering::SeqCst);
        if self.failing {
            return Box::pin(async {
                Err(IdempotencyStoreError::Unavailable(
                    "the disk is gone".into(),
                ))
            });
        }
        self.inner.begin(key, fingerprint, owner, caller, retention)
    }

    fn complete(&self, key: &ScopedKey, outcome: &Outcome) -> IdempotencyFuture<'_, ()> {
        self.inner.complete(key, outcome)
    }

    fn remove_expired(&self) -> IdempotencyFuture<'_, u64> {
        self.inner.remove_expired()
    }
}

async fn dispense(a: &Node, key: Option<&str>, amount: u32) -> Result<u64, CallError> {
    let opts = CallOptions {
        idempotency_key: key.map(str::to_owned),
        ..CallOptions::default()
    };
    tokio::time::timeout(STEP, a.call_with("pump", "dispense", &amount, opts))
        .await
        .expect("answered")
}

/// MISSION K3: with an idempotency store, a repeat of a non-repeatable command with the same
/// key is answered from the record of the first run (it runs once); another key runs; the
/// same key with other arguments is `InvalidParams` (did not run); queries never reach the
/// store.
#[tokio::test]
async fn k3_same_key_answered_from_the_record_other_arguments_refused_queries_skip_store() {
    let runs = Arc::new(AtomicU64::new(0));
    let store = Arc::new(ProbeStore::default());
    let (a, b) = pair_with(pump(runs.clone()), Some(store.clone())).await;
    for _ in 0..5 {
        let _: f64 = a.call("pump", "pressure", &()).await.expect("query");
    }
    assert_eq!(
        store.begins.load(Ordering::SeqCst),
        0,
        "queries pay nothing"
    );
    assert_eq!(dispense(&a, Some("wo-1"), 7).await, Ok(1));
    assert_eq!(
        dispense(&a, Some("wo-1"), 7).await,
        Ok(1),
        "answered from the record"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "ran once");
    assert_eq!(
        dispense(&a, Some("wo-2"), 7).await,
        Ok(2),
        "another intent runs"
    );
    let err = dispense(&a, Some("wo-1"), 8)
        .await
        .expect_err("other arguments");
    assert_eq!(code_of(&err), Some(RemoteCode::InvalidParams), "{err:?}");
    assert!(!may_have_run(&err));
    // Without a key, each call is its own request (caller RID + generation + call id).
    assert_eq!(dispense(&a, None, 7).await, Ok(3));
    assert_eq!(dispense(&a, None, 7).await, Ok(4));
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// A keyed call of `pump`.`dispense` with `amount`, as [`zmesh::runtime::calls::PendingCall::answer`]
/// gives it: the decoded result and whether the server said it replayed it.
async fn dispense_answer(a: &Node, key: &str, amount: u32) -> (Result<u64, CallError>, bool) {
    let opts = CallOptions {
        idempotency_key: Some(key.to_owned()),
        ..CallOptions::default()
    };
    let args = encode_args(&amount).expect("args");
    let answer = tokio::time::timeout(STEP, a.start_call("pump", "dispense", args, opts).answer())
        .await
        .expect("answered");
    let replayed = answer.replayed();
    let result = answer.into_result().and_then(|b| decode::<u64>(&b));
    (result, replayed)
}

/// The `replayed` field of the newest row of `a`'s operations registry.
fn last_row_replayed(a: &Node) -> bool {
    let row = a.operations().views().pop().expect("a row");
    assert_eq!(row.status, OpStatus::Succeeded, "{row:?}");
    row.replayed
}

/// MISSION K3, X3 (WIRE.md §4.17): between two zmesh nodes (both speak `replayed`), the
/// first call with a key runs and its answer says not replayed; a retry with the key is
/// answered from the server's durable record, and its answer, and the caller's operations
/// row, say replayed; the command ran once. Another key runs (not replayed); the same key
/// with other arguments is refused by the guard, which is not a replay.
#[tokio::test]
async fn k3_x3_a_replayed_answer_says_so_where_negotiated() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = zmesh::runtime::idempotency::SqliteIdempotencyStore::open(tmp.path().join("r.db"))
        .expect("store");
    let runs = Arc::new(AtomicU64::new(0));
    let (a, b) = pair_with(pump(runs.clone()), Some(Arc::new(store))).await;

    assert_eq!(
        dispense_answer(&a, "wo-1", 7).await,
        (Ok(1), false),
        "ran now"
    );
    assert!(!last_row_replayed(&a));
    assert_eq!(
        dispense_answer(&a, "wo-1", 7).await,
        (Ok(1), true),
        "answered from the record"
    );
    assert!(last_row_replayed(&a), "the operations row says replayed");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "ran once");
    assert_eq!(dispense_answer(&a, "wo-2", 7).await, (Ok(2), false));
    let (refused, replayed) = dispense_answer(&a, "wo-1", 8).await;
    assert_eq!(
        refused.as_ref().err().and_then(code_of),
        Some(RemoteCode::InvalidParams),
        "{refused:?}"
    );
    assert!(!replayed, "a refusal of the guard is not a replay");
    // A query never reaches the guard.
    let query = a
        .start_call(
            "pump",
            "pressure",
            encode_args(&()).expect("args"),
            CallOptions::default(),
        )
        .answer()
        .await;
    assert!(query.result().is_ok() && !query.replayed());
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// What a raw libzmq ClientServer client (HELLO offering `replayed` when `offer`, nothing
/// else) received for two calls of `pump`.`dispense` with one idempotency key: the frames of
/// each REPLY exactly as they came off the socket, and whether the WELCOME announced
/// `replayed`.
fn raw_keyed_twice(ep: &str, offer: bool, key: &str) -> (Vec<Vec<Vec<u8>>>, bool) {
    use zmesh::proto::wire::{self, Capabilities, Name, Record};
    let ctx = zmq::Context::new();
    let (rid, offered): (&str, &[&str]) = if offer {
        ("raw-replayed", &["replayed"])
    } else {
        ("raw-v1", &[])
    };
    let d = common::raw_client(&ctx, ep, rid, "pump", offered);
    let caps = if offer {
        Capabilities::REPLAYED
    } else {
        Capabilities::NONE
    };
    let recv = || common::raw_recv(&d, caps);
    let (_, Record::Welcome(w)) = recv() else {
        panic!("no WELCOME")
    };
    let announced = w
        .memberships
        .iter()
        .any(|m| m.channel.as_str() == "\0replayed");
    let mut replies = Vec::new();
    for call_id in 1..=2u64 {
        let request = Record::Request(wire::Request {
            call_id: std::num::NonZeroU64::new(call_id).expect("id"),
            ttl_ms: None,
            semantics: wire::Semantics::NonRepeatableCommand,
            channel: Name::new("pump").expect("channel"),
            method: Name::new("dispense").expect("method"),
            idempotency_key: Some(Name::new(key).expect("key")),
            // MessagePack of 7.
            payload: Bytes::from_static(&[0x07]),
        });
        d.send_multipart(request.encode().iter(), 0)
            .expect("request");
        loop {
            match recv() {
                (_, Record::Probe { id }) => {
                    d.send_multipart(Record::Ack { id }.encode().iter(), 0)
                        .expect("ack");
                }
                (_, Record::Accept(_)) => {}
                (frames, Record::Reply(r)) if r.call_id.get() == call_id => {
                    replies.push(frames);
                    break;
                }
                (_, other) => panic!("not an answer of call {call_id}: {other:?}"),
            }
        }
    }
    (replies, announced)
}

/// MISSION K3, X3 (WIRE.md §4.17, §8.1): a raw libzmq client that does not offer
/// `replayed` gets, for a retry answered from the server's durable record, exactly the
/// version-1 REPLY bytes (code byte `00`, the first call's result); one that offers it gets
/// the replayed mark (code byte `80`) on the retry and `00` on the first call. The command
/// runs once per key.
#[tokio::test]
async fn k3_x3_a_version_1_client_receives_version_1_replies_for_a_replay() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = zmesh::runtime::idempotency::SqliteIdempotencyStore::open(tmp.path().join("r.db"))
        .expect("store");
    let ep = common::free_tcp();
    let mut c = NodeConfig::new("srv");
    c.memberships = common::server_of("pump");
    c.server = Some(zmesh::config::Endpoint::new(ep.clone()));
    let runs = Arc::new(AtomicU64::new(0));
    let srv = Node::builder(c)
        .expose(pump(runs.clone()))
        .idempotency_store(Arc::new(store))
        .start()
        .await
        .expect("server");
    for offer in [false, true] {
        let e = ep.clone();
        let key = format!("wo-raw-{offer}");
        let (replies, announced) =
            tokio::task::spawn_blocking(move || raw_keyed_twice(&e, offer, &key))
                .await
                .expect("raw client");
        assert_eq!(
            announced, offer,
            "the server announces only what was offered"
        );
        let run = if offer { 2u8 } else { 1 };
        let reply = |call_id: u8, code: u8| -> Vec<Vec<u8>> {
            vec![
                vec![0x5A, 0x4D, 0x01, 0x09, 0, 0, 0, 0, 0, 0, 0, call_id, code],
                // MessagePack of the run number: the first call's result, both times.
                vec![run],
            ]
        };
        assert_eq!(
            replies[0],
            reply(1, 0x00),
            "offer {offer}: the first call ran"
        );
        let mark = if offer { 0x80 } else { 0x00 };
        assert_eq!(
            replies[1],
            reply(2, mark),
            "offer {offer}: the retry, answered from the record"
        );
        assert_eq!(runs.load(Ordering::SeqCst), u64::from(run), "once per key");
    }
    srv.shutdown().await.expect("shutdown");
}

/// MISSION K3: a repeat that arrives while the first call with its key is still running here
/// attaches to it and gets the same answer, marked replayed (WIRE.md §4.17): the command runs
/// once.
#[tokio::test]
async fn k3_repeat_while_running_attaches_to_the_first() {
    let (gate, mut started_rx) = Gate::new();
    let runs = Arc::new(AtomicU64::new(0));
    let svc = {
        let (runs, gate) = (runs.clone(), gate.clone());
        Service::new("pump").execution(Execution::Parallel).method(
            Method::non_repeatable_command("dispense"),
            move |_r: Request| {
                let (gate, runs) = (gate.clone(), runs.clone());
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    gate.pass(format!("run {n}")).await;
                    encode(&n)
                }
            },
        )
    };
    let (a, b) = pair_with(svc, Some(Arc::new(MemoryStore::new()))).await;
    let first = {
        let a = a.clone();
        tokio::spawn(async move { dispense_answer(&a, "press-1", 1).await })
    };
    assert_eq!(started(&mut started_rx).await, "run 1");
    let second = {
        let a = a.clone();
        tokio::spawn(async move { dispense_answer(&a, "press-1", 1).await })
    };
    serving(&b, 2).await;
    gate.open(10);
    assert_eq!(first.await.expect("task"), (Ok(1), false));
    assert_eq!(
        second.await.expect("task"),
        (Ok(1), true),
        "the first one's answer, replayed: this call ran nothing"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K3: a record found in progress that nobody here is running (the server died in
/// the middle of the command) answers `UnknownOutcome` and never runs the command again; a
/// store that fails answers `UnknownOutcome` without running it (failing open would be the
/// double execution the store is there to prevent).
#[tokio::test]
async fn k3_in_progress_record_and_failing_store_answer_unknown_outcome_never_run() {
    let runs = Arc::new(AtomicU64::new(0));
    let store = Arc::new(MemoryStore::new());
    // A run of another process began this key and never recorded an outcome.
    let key = ScopedKey::from_idempotency_key("pump", "dispense", "wo-9");
    let args = encode(&7u32).expect("args");
    let fp = Fingerprint::of_call("pump", "dispense", &args);
    let dead = Owner {
        rid: "b".into(),
        generation: 42,
    };
    assert_eq!(
        store
            .begin(&key, &fp, &dead, "caller", Duration::from_secs(60))
            .await
            .expect("begin"),
        Begin::Started
    );
    let (a, b) = pair_with(pump(runs.clone()), Some(store)).await;
    let err = dispense(&a, Some("wo-9"), 7).await.expect_err("unknown");
    assert_eq!(code_of(&err), Some(RemoteCode::UnknownOutcome), "{err:?}");
    assert!(may_have_run(&err), "the first run may have happened");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "never run again");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");

    let failing = Arc::new(ProbeStore {
        failing: true,
        ..ProbeStore::default()
    });
    let (a, b) = pair_with(pump(runs.clone()), Some(failing.clone())).await;
    let err = dispense(&a, Some("wo-10"), 7)
        .await
        .expect_err("store down");
    assert_eq!(code_of(&err), Some(RemoteCode::UnknownOutcome), "{err:?}");
    assert_eq!(failing.begins.load(Ordering::SeqCst), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "not run without its guard");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K2: every call the node makes has one entry in its operations registry, hooked at
/// the call funnel: succeeded, failed (with its code), unknown-outcome (with its code), with
/// the caller's semantics; a subscriber sees each change; arguments are not kept (the entry
/// has no field for them).
#[tokio::test]
async fn k2_operations_registry_records_every_call_and_its_end() {
    let svc = Service::new("gw")
        .method(
            Method::query("ok"),
            |_r: Request| async move { encode(&1u8) },
        )
        .method(
            Method::non_repeatable_command("lost"),
            |_r: Request| async move {
                Err::<Bytes, _>(ServeError::new(
                    RemoteCode::UnknownOutcome,
                    "downstream lost",
                ))
            },
        );
    let (a, b) = pair_with(svc, None).await;
    let tray = a.operations();
    let mut changes = tray.subscribe();
    let _: u8 = a.call("gw", "ok", &"secret-token").await.expect("ok");
    let opts = CallOptions::default().semantics(Semantics::NonRepeatableCommand);
    let _ = a.call_with::<_, u8>("gw", "lost", &(), opts).await;
    let _ = a.call::<_, u8>("gw", "missing", &()).await;
    let _ = a.call::<_, u8>("nobody", "x", &()).await;
    let ops = tray.snapshot();
    assert_eq!(ops.len(), 4, "{ops:?}");
    let status: Vec<(&str, OpStatus, Option<&str>)> =
        ops.iter().map(|o| (&*o.method, o.status, o.code)).collect();
    assert_eq!(
        status,
        [
            ("ok", OpStatus::Succeeded, None),
            ("lost", OpStatus::UnknownOutcome, Some("UnknownOutcome")),
            ("missing", OpStatus::Failed, Some("MethodNotFound")),
            ("x", OpStatus::Failed, Some("NotFound")),
        ]
    );
    assert_eq!(&*ops[0].target, "b");
    assert_eq!(&*ops[3].target, "channel:nobody");
    assert!(ops.iter().all(|o| o.settled_at.is_some()));
    assert!(
        ops[0].sent_at.is_some() && ops[3].sent_at.is_none(),
        "never sent: issued only"
    );
    assert_eq!(
        ops[1].semantics,
        zmesh::proto::wire::Semantics::NonRepeatableCommand
    );
    let json = serde_json::to_string(&tray.views()).expect("json");
    assert!(
        !json.contains("secret-token"),
        "arguments are never retained"
    );
    let counts = tray.counts();
    assert_eq!(counts.get(OpStatus::UnknownOutcome), 1);
    // Every change reached the subscriber, ending with the last call's settlement.
    let mut last = None;
    while let Ok(op) = changes.try_recv() {
        last = Some(op);
    }
    let last = last.expect("changes");
    assert_eq!((&*last.method, last.status), ("x", OpStatus::Failed));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K2: a stream call that has answered items but not yet its end is `deferred` in the
/// caller's registry (a call that succeeded and an operation that has not); its end settles
/// it.
#[tokio::test]
async fn k2_stream_with_items_and_no_end_is_deferred_then_settled() {
    let (gate, mut started_rx) = Gate::new();
    let g = gate.clone();
    let svc = Service::new("feed").stream_method(
        Method::query("ticks"),
        move |_r: Request, sink: zmesh::runtime::calls::ItemSink| {
            let gate = g.clone();
            async move {
                sink.send_item(&1u8).await?;
                gate.pass("after item".into()).await;
                encode("end")
            }
        },
    );
    let (a, b) = pair_with(svc, None).await;
    let mut stream = a.call_stream("feed", "ticks", &(), CallOptions::default());
    let item = tokio::time::timeout(STEP, stream.next_item())
        .await
        .expect("in time")
        .expect("an item");
    assert_eq!(&item[..], &encode(&1u8).expect("item")[..]);
    assert_eq!(started(&mut started_rx).await, "after item");
    let op = a.operations().snapshot().pop().expect("one entry");
    assert_eq!((op.status, op.items), (OpStatus::Deferred, 1));
    gate.open(1);
    let end: String = tokio::time::timeout(STEP, stream.finish_as())
        .await
        .expect("in time")
        .expect("end");
    assert_eq!(end, "end");
    let op = a.operations().snapshot().pop().expect("one entry");
    assert_eq!(op.status, OpStatus::Succeeded);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION C1, C3: a handler that panics, whether in the call that makes its future or while
/// the future runs, answers `Exception` (it may have run): the call completes exactly once,
/// and the node serves the next call.
#[tokio::test]
async fn c1_a_panicking_handler_answers_exception_and_the_node_goes_on() {
    #[allow(clippy::panic)]
    fn make(
        r: Request,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Bytes, ServeError>> + Send>>
    {
        if r.method == "at_call" {
            panic!("boom before the future");
        }
        Box::pin(async move {
            if r.method == "in_future" {
                panic!("boom inside the future");
            }
            encode("fine")
        })
    }
    let svc = Service::new("p")
        .method(Method::query("at_call"), make)
        .method(Method::query("in_future"), make)
        .method(Method::query("ok"), make);
    let (a, b) = pair_with(svc, None).await;
    for m in ["at_call", "in_future"] {
        let err = tokio::time::timeout(STEP, a.call::<_, String>("p", m, &()))
            .await
            .expect("answered, not hung")
            .expect_err("panicked");
        assert_eq!(code_of(&err), Some(RemoteCode::Exception), "{m}: {err:?}");
        assert!(may_have_run(&err));
    }
    let ok: String = a.call("p", "ok", &()).await.expect("still serving");
    assert_eq!(ok, "fine");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// The name of the thread a handler runs on.
fn thread_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("(unnamed)")
        .to_owned()
}

/// MISSION C1: an inline handler runs on the callee's I/O thread, right
/// after the ACCEPT (no task hop); every one of many concurrent calls is answered exactly once
/// with its own result; `Node::serve_inline` does the same for a channel of any method.
#[tokio::test]
async fn c1_inline_handlers_run_on_the_io_thread_and_answer_each_call_once() {
    let svc = Service::new("inl").inline_method(Method::query("where"), |r: Request| {
        let n: u32 = r.args()?;
        encode(&(n, thread_name()))
    });
    let (a, b) = pair_with(svc, None).await;
    b.serve_inline("any", |r: Request| {
        encode(&(r.method.clone(), thread_name()))
    })
    .expect("serve_inline");
    let calls = (0..50u32).map(|n| {
        let a = a.clone();
        tokio::spawn(async move {
            tokio::time::timeout(STEP, a.call::<_, (u32, String)>("inl", "where", &n)).await
        })
    });
    let mut seen = Vec::new();
    for c in calls.collect::<Vec<_>>() {
        let (n, thread) = c.await.expect("task").expect("answered").expect("ok");
        assert_eq!(thread, "zmesh-io-b", "call {n} ran on {thread}");
        seen.push(n);
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..50).collect::<Vec<_>>(),
        "each call its own answer"
    );
    let (method, thread): (String, String) = tokio::time::timeout(
        STEP,
        a.call_with("any", "whatever", &(), CallOptions::default().peer("b")),
    )
    .await
    .expect("answered")
    .expect("ok");
    assert_eq!(
        (method.as_str(), thread.as_str()),
        ("whatever", "zmesh-io-b")
    );
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION C3, F2: an inline handler that panics answers `Exception` (it may
/// have run) and the node, whose I/O thread ran it, goes on serving; a handler error travels
/// as it is.
#[tokio::test]
async fn c3_f2_inline_handler_panic_answers_exception_and_the_node_goes_on() {
    let svc = Service::new("inl").inline_method(Method::query("q"), |r: Request| {
        match r.args::<u32>()? {
            0 => panic!("inline boom"),
            1 => Err(ServeError::new(
                RemoteCode::InvalidParams,
                "one is not allowed",
            )),
            n => encode(&n),
        }
    });
    let (a, b) = pair_with(svc, None).await;
    let err = tokio::time::timeout(STEP, a.call::<_, u32>("inl", "q", &0u32))
        .await
        .expect("answered, not hung")
        .expect_err("panicked");
    assert_eq!(code_of(&err), Some(RemoteCode::Exception), "{err:?}");
    assert!(may_have_run(&err));
    let err = a
        .call::<_, u32>("inl", "q", &1u32)
        .await
        .expect_err("refused");
    assert_eq!(code_of(&err), Some(RemoteCode::InvalidParams), "{err:?}");
    let n: u32 = a.call("inl", "q", &7u32).await.expect("still serving");
    assert_eq!(n, 7);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K4: inline handlers of a serial service still run one at a
/// time, each exactly once: 100 concurrent calls each see a distinct run number.
#[tokio::test]
async fn k4_inline_serial_calls_each_run_once() {
    let runs = Arc::new(AtomicU64::new(0));
    let counted = runs.clone();
    let svc = Service::new("ser")
        .execution(Execution::Serial)
        .inline_method(Method::idempotent_command("step"), move |_r: Request| {
            encode(&(counted.fetch_add(1, Ordering::SeqCst) + 1))
        });
    let (a, b) = pair_with(svc, None).await;
    let calls: Vec<_> = (0..100)
        .map(|_| {
            let a = a.clone();
            tokio::spawn(async move {
                tokio::time::timeout(STEP, a.call::<_, u64>("ser", "step", &())).await
            })
        })
        .collect();
    let mut seen = Vec::new();
    for c in calls {
        seen.push(c.await.expect("task").expect("answered").expect("ok"));
    }
    seen.sort_unstable();
    assert_eq!(seen, (1..=100).collect::<Vec<u64>>());
    assert_eq!(runs.load(Ordering::SeqCst), 100);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K3: on a node with an idempotency store, an inline
/// non-repeatable command runs on a task (the store may block), behind the guard: a repeat
/// with the same key is answered from the record without running again.
#[tokio::test]
async fn k3_inline_non_repeatable_command_with_a_store_runs_on_a_task_behind_the_guard() {
    let runs = Arc::new(AtomicU64::new(0));
    let counted = runs.clone();
    let svc = Service::new("pump").inline_method(
        Method::non_repeatable_command("dispense"),
        move |_r: Request| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            encode(&(n, thread_name()))
        },
    );
    let (a, b) = pair_with(svc, Some(Arc::new(MemoryStore::new()))).await;
    let opts = || CallOptions {
        idempotency_key: Some("wo-1".into()),
        ..CallOptions::default()
    };
    let first: (u64, String) =
        tokio::time::timeout(STEP, a.call_with("pump", "dispense", &1u32, opts()))
            .await
            .expect("answered")
            .expect("ok");
    assert_eq!(first.0, 1);
    assert_ne!(first.1, "zmesh-io-b", "guarded: not on the I/O thread");
    let again: (u64, String) =
        tokio::time::timeout(STEP, a.call_with("pump", "dispense", &1u32, opts()))
            .await
            .expect("answered")
            .expect("ok");
    assert_eq!(again, first, "answered from the record");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION K4 (and C2): calls waiting in an execution queue whose caller went away leave the
/// queue at once. They will never run (their caller already failed them), so they must not
/// hold mailbox places: another caller's calls are accepted, not refused `Busy`, and only
/// they run after the call that was running.
#[tokio::test]
async fn k4_waiting_calls_of_a_caller_that_left_free_their_mailbox_places() {
    let (gate, mut started_rx) = Gate::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let svc = held(gate.clone(), log, None, 2);
    let bind = mesh_bind(false);
    let bc = mesh_server("b", svc.channel(), &bind);
    let b = Node::builder(bc).expose(svc).start().await.expect("b");
    let mut ac = NodeConfig::new("a");
    ac.peers = vec![peer("b", &bind)];
    let (a, _ea) = start_ready(ac, "b").await;
    let hold = |n: &Node, label: &str| {
        let (n, label) = (n.clone(), label.to_owned());
        tokio::spawn(async move { n.call::<_, String>("cell", "hold", &label).await })
    };
    // a's first call holds the serial queue; two more fill its mailbox of 2; a fourth is Busy.
    let first = hold(&a, "a-first");
    assert_eq!(started(&mut started_rx).await, "a-first");
    let waiting = [hold(&a, "a-q0"), hold(&a, "a-q1")];
    serving(&b, 3).await;
    let err = tokio::time::timeout(STEP, a.call::<_, String>("cell", "hold", &"a-q2"))
        .await
        .expect("answered")
        .expect_err("Busy");
    assert_eq!(code_of(&err), Some(RemoteCode::Busy), "{err:?}");
    // a goes away: its calls fail on its side; b forgets the waiting ones.
    a.shutdown().await.expect("a");
    for w in waiting {
        assert!(
            w.await.expect("task").is_err(),
            "a's waiting call failed with a"
        );
    }
    assert!(first.await.expect("task").is_err());
    serving(&b, 1).await;
    // c's calls find the mailbox free: both accepted (b holds 3 calls), none Busy.
    let mut cc = NodeConfig::new("c");
    cc.peers = vec![peer("b", &bind)];
    let (c, _ec) = start_ready(cc, "b").await;
    let c_calls = [hold(&c, "c-0"), hold(&c, "c-1")];
    serving(&b, 3).await;
    gate.open(10);
    let mut ran = Vec::new();
    for _ in 0..2 {
        ran.push(started(&mut started_rx).await);
    }
    ran.sort();
    assert_eq!(ran, ["c-0", "c-1"], "a's waiting calls never ran");
    for (i, call) in c_calls.into_iter().enumerate() {
        let got = tokio::time::timeout(STEP, call)
            .await
            .expect("answered")
            .expect("task");
        assert_eq!(got.ok(), Some(format!("c-{i}")));
    }
    c.shutdown().await.expect("c");
    b.shutdown().await.expect("b");
}
