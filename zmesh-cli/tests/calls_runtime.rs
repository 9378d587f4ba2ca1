//! Calls over real libzmq sockets (MISSION C1-C6): round trips on RouteMesh and ClientServer,
//! honest failures when the callee dies (killed process, half-open connection), graceful stop,
//! late replies.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{
    free_tcp, mesh_bind, mesh_server, peer, server_of, start_client_ready, start_ready, FreezeProxy,
};
use tokio::sync::mpsc;
use zmesh::config::{Endpoint, NodeConfig, PeerConfig, RouteMeshBind, ServerConfig};
use zmesh::proto::state::ConnState;
use zmesh::runtime::calls::{encode, may_have_run, CallError, CallOptions, Request, ServeError};
use zmesh::runtime::service::{Method, Service};
use zmesh::runtime::{Node, NodeEvent};

const STEP: Duration = Duration::from_secs(10);

/// A handler for tests: `echo`, `add`, and `hold` (reports that it started, then sleeps the
/// given milliseconds).
async fn handler(
    req: Request,
    started: mpsc::UnboundedSender<String>,
) -> Result<Bytes, ServeError> {
    match req.method.as_str() {
        "echo" => Ok(req.raw_args().clone()),
        "add" => {
            let (a, b): (i64, i64) = req.args()?;
            encode(&(a + b))
        }
        "hold" => {
            let ms: u64 = req.args()?;
            let _ = started.send(req.caller.clone());
            tokio::time::sleep(Duration::from_millis(ms)).await;
            encode("held")
        }
        other => Err(ServeError::method_not_found(other)),
    }
}

fn serve_with(node: &Node, channel: &str) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    node.serve(channel, move |req| handler(req, tx.clone()))
        .expect("serve");
    rx
}

/// MISSION C1: a call round trip over RouteMesh (request on the Application lane, accept and
/// reply on the Completion lane) and over ClientServer; remote errors keep their code.
#[tokio::test]
async fn c1_calls_round_trip_on_route_mesh_and_client_server() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("zmesh=trace")
        .with_test_writer()
        .try_init();
    let b_bind = mesh_bind(true);
    let s_ep = free_tcp();
    let mut b = mesh_server("b", "math", &b_bind);
    b.server = Some(Endpoint::new(s_ep.clone()));
    let b = Node::start(b).await.expect("b");
    let _started = serve_with(&b, "math");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;
    let sum: i64 = a
        .call("math", "add", &(40, 2))
        .await
        .expect("add over RouteMesh");
    assert_eq!(sum, 42);
    let err = a
        .call::<_, i64>("math", "nope", &())
        .await
        .expect_err("unknown method");
    assert_eq!(err.code(), "MethodNotFound");
    assert!(!may_have_run(&err));

    let (c, _ec) = start_client_ready("c", "math", &s_ep, "b").await;
    let sum: i64 = c
        .call("math", "add", &(1, 2))
        .await
        .expect("add over ClientServer");
    assert_eq!(sum, 3);
    let snap = a.snapshot().await.expect("snapshot");
    assert_eq!(
        snap.pending_calls, 0,
        "C5: nothing pending after the replies"
    );
    for n in [&a, &b, &c] {
        n.shutdown().await.expect("shutdown");
    }
}

/// MISSION C3: a call with no ready peer fails at once as "did not run"; a channel nothing
/// serves is `NoRegistration`.
#[tokio::test]
async fn c3_no_ready_peer_and_no_registration_did_not_run() {
    let mut a = NodeConfig::new("a");
    // Nothing listens at the endpoint.
    a.servers = vec![ServerConfig::new("orders", free_tcp())];
    let a = Node::start(a).await.expect("a");
    let t = Instant::now();
    let err = a
        .call::<_, ()>("orders", "place", &1)
        .await
        .expect_err("no ready server");
    assert_eq!(err, CallError::NoReadyPeer);
    assert!(!may_have_run(&err));
    let err = a
        .call::<_, ()>("nobody", "x", &1)
        .await
        .expect_err("nothing serves it");
    assert_eq!(err, CallError::NoRegistration);
    assert!(!may_have_run(&err));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "failed at once, not after a timeout"
    );
    a.shutdown().await.expect("a");
}

/// Starts `zmesh node --serve CHANNEL --events ndjson` and returns it with a receiver of its
/// stdout lines.
fn spawn_callee(
    dir: &std::path::Path,
    bind: &RouteMeshBind,
    channel: &str,
) -> (Child, std::sync::mpsc::Receiver<String>) {
    let b = mesh_server("b", channel, bind);
    let path = dir.join("callee.toml");
    std::fs::write(&path, toml::to_string(&b).expect("toml")).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["node", "--events", "ndjson", "--serve", channel, "--config"])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn callee");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// MISSION C2, C3: the callee process is killed mid-call (its handler is running): the caller
/// gets "may have run" (the call had been accepted) at once, within 1 s of the kill, not
/// after a timeout.
#[tokio::test]
async fn c2_callee_killed_mid_call_fails_at_once_may_have_run() {
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-callkill-")
        .tempdir()
        .expect("dir");
    let b_bind = mesh_bind(true);
    let (mut child, lines) = spawn_callee(tmp.path(), &b_bind, "work");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;
    let echoed: String = a.call("work", "echo", "ping").await.expect("echo");
    assert_eq!(echoed, "ping");
    let caller = a.clone();
    let call =
        tokio::spawn(async move { caller.call::<_, String>("work", "sleep", &60_000u64).await });
    // The callee prints a line when a handler starts: the call was accepted and dispatched.
    let started = tokio::task::spawn_blocking(move || loop {
        let line = lines.recv_timeout(STEP).expect("callee output");
        let v: serde_json::Value = serde_json::from_str(&line).expect("ndjson line");
        if v["event"] == "call" && v["method"] == "sleep" {
            break;
        }
    });
    started.await.expect("the sleep handler started");
    child.kill().expect("kill -9 callee");
    let _ = child.wait();
    let killed = Instant::now();
    let err = call.await.expect("join").expect_err("the callee died");
    let waited = killed.elapsed();
    // Both lanes drop at once: whether the ACCEPT (already sent) was read before the
    // Application lane's disconnect is a race; either way the call may have run.
    assert!(matches!(err, CallError::OutcomeUnknown { .. }), "{err}");
    assert!(may_have_run(&err));
    assert!(
        waited < Duration::from_secs(1),
        "failed {waited:?} after the kill"
    );
    a.shutdown().await.expect("a");
}

/// MISSION C2 (real time, bounded): the callee's connections go half-open mid-call (a proxy
/// stops forwarding, nothing closes): the call fails as "may have run" within the 15 s
/// peer deadline.
#[tokio::test]
async fn c2_half_open_callee_fails_within_deadline_may_have_run() {
    let b_bind = mesh_bind(true);
    let app = FreezeProxy::start(&b_bind.application);
    let cpl = FreezeProxy::start(&b_bind.completion);
    let b = mesh_server("b", "work", &b_bind);
    let b = Node::start(b).await.expect("b");
    let mut started = serve_with(&b, "work");
    let mut a = NodeConfig::new("a");
    a.peers = vec![PeerConfig::new(
        "b",
        app.endpoint.clone(),
        cpl.endpoint.clone(),
    )];
    let (a, _ea) = start_ready(a, "b").await;
    let caller = a.clone();
    let call =
        tokio::spawn(async move { caller.call::<_, String>("work", "hold", &60_000u64).await });
    tokio::time::timeout(STEP, started.recv())
        .await
        .expect("handler started")
        .expect("caller");
    let frozen = Instant::now();
    app.freeze();
    cpl.freeze();
    let err = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("failed within the bound")
        .expect("join")
        .expect_err("half-open callee");
    let waited = frozen.elapsed();
    assert!(matches!(err, CallError::OutcomeUnknown { .. }), "{err}");
    assert!(may_have_run(&err));
    assert!(waited <= Duration::from_millis(15_500), "took {waited:?}");
    a.shutdown().await.expect("a");
    drop(b);
}

/// MISSION C4: a node that stops gracefully answers the call it accepted (no lease fails), and
/// refuses calls that arrive while it stops.
#[tokio::test]
async fn c4_graceful_stop_answers_accepted_calls() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("zmesh=debug")
        .with_test_writer()
        .try_init();
    let b_bind = mesh_bind(true);
    let b = mesh_server("b", "work", &b_bind);
    let b = Node::start(b).await.expect("b");
    let mut started = serve_with(&b, "work");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, mut ea) = start_ready(a, "b").await;
    let caller = a.clone();
    let call = tokio::spawn(async move { caller.call::<_, String>("work", "hold", &500u64).await });
    tokio::time::timeout(STEP, started.recv())
        .await
        .expect("handler started")
        .expect("caller");
    let stopper = b.clone();
    let stop = tokio::spawn(async move { stopper.shutdown().await });
    let answer = call
        .await
        .expect("join")
        .expect("the accepted call is answered");
    assert_eq!(answer, "held");
    stop.await.expect("join").expect("shutdown");
    // Once a has seen b leave (b's CLOSE), a call is refused before it is sent. Without this
    // wait, a REQUEST sent before a read the CLOSE is honestly "may have run".
    ea.wait(STEP, |e| {
        matches!(e, NodeEvent::State(s) if s.link.starts_with("peer b") && s.state != ConnState::Ready)
    })
    .await;
    let err = a
        .call::<_, String>("work", "echo", "late")
        .await
        .expect_err("b is gone");
    assert!(!may_have_run(&err), "{err}");
    a.shutdown().await.expect("a");
}

/// MISSION C1, C6: the caller's deadline passes first ("may have run"); the reply arriving
/// afterwards is dropped without effect, and the next call gets its own answer.
#[tokio::test]
async fn c6_reply_after_caller_gave_up_is_dropped() {
    let b_bind = mesh_bind(true);
    let b = mesh_server("b", "work", &b_bind);
    let b = Node::start(b).await.expect("b");
    let mut started = serve_with(&b, "work");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;
    let err = a
        .call_with::<_, String>(
            "work",
            "hold",
            &1_000u64,
            CallOptions::with_ttl(Duration::from_millis(600)),
        )
        .await
        .expect_err("deadline");
    assert_eq!(
        err,
        CallError::Timeout {
            refused_by_server: false
        }
    );
    assert!(may_have_run(&err));
    // The handler did run: the late reply is on its way and must change nothing.
    tokio::time::timeout(STEP, started.recv())
        .await
        .expect("handler ran")
        .expect("caller");
    let echoed: String = a.call("work", "echo", "after").await.expect("next call");
    assert_eq!(echoed, "after");
    let _ = a
        .call::<_, String>("work", "hold", &600u64)
        .await
        .expect("a full call");
    assert_eq!(a.snapshot().await.expect("snapshot").pending_calls, 0);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION C3 (never a false "not served"): services registered on a [`Node::builder`] are in
/// place before the node reads its first record, so the first call after the peer is seen
/// ready is served, unary and stream alike. A builder refuses a bad channel name before
/// binding anything, and a builder with services outside a tokio runtime.
#[tokio::test]
async fn builder_services_serve_the_first_call_after_ready() {
    let b_bind = mesh_bind(true);
    let mut b = NodeConfig::new("b");
    b.memberships = server_of("math");
    b.memberships.extend(server_of("feed"));
    b.route_mesh = Some(b_bind.clone());
    let (tx, _started) = mpsc::unbounded_channel();
    let b = Node::builder(b)
        .serve("math", move |req| handler(req, tx.clone()))
        .serve_stream("feed", |req: Request, sink| async move {
            let n: u64 = req.args()?;
            for i in 0..n {
                sink.send_item(&i).await?;
            }
            encode("done")
        })
        .start()
        .await
        .expect("b");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;
    let sum: i64 = a.call("math", "add", &(40, 2)).await.expect("first call");
    assert_eq!(sum, 42);
    let mut s = a.call_stream("feed", "count", &3u64, CallOptions::default());
    let mut items = Vec::new();
    while let Some(item) = s.next_item_as::<u64>().await {
        items.push(item.expect("item"));
    }
    assert_eq!(items, vec![0, 1, 2]);
    assert_eq!(s.finish_as::<String>().await.expect("terminal"), "done");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");

    // A bad channel fails the start; the endpoint is not left bound.
    // ipc: a tcp port picked free could be taken by another test between the two starts.
    let bad_bind = mesh_bind(false);
    let mut c = NodeConfig::new("c");
    c.route_mesh = Some(bad_bind.clone());
    let err = Node::builder(c.clone())
        .serve("", |_req: Request| async { encode(&()) })
        .start()
        .await
        .err()
        .expect("empty channel refused");
    assert!(
        matches!(err, zmesh::runtime::NodeError::Invalid(_)),
        "{err}"
    );
    let c = Node::start(c).await.expect("the endpoint is free again");
    c.shutdown().await.expect("c");
}

/// A builder with services needs a tokio runtime for its handlers: outside one it fails
/// with `NoRuntime` before binding anything.
#[test]
fn builder_with_services_outside_a_runtime_is_refused() {
    let err = Node::builder(NodeConfig::new("d"))
        .serve("math", |_req: Request| async { encode(&()) })
        .start_blocking()
        .err()
        .expect("no runtime");
    assert!(matches!(err, zmesh::runtime::NodeError::NoRuntime), "{err}");
}

/// Sends its name when dropped: the handler's future that holds it is gone.
struct DropProbe(&'static str, mpsc::UnboundedSender<&'static str>);

impl Drop for DropProbe {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

/// MISSION X1 (handlers of a caller whose connection left ready are signalled): the caller
/// goes away while its calls run. A running query's task is dropped at its await
/// (it never returns); a running non-repeatable command is signalled through
/// `Request::cancelled` and is not stopped: it returns on its own. Neither was signalled
/// while its caller waited, and the callee holds no call afterwards.
#[tokio::test]
async fn x1_handlers_of_a_caller_that_is_gone_are_told() {
    let b_bind = mesh_bind(true);
    let b = Node::start(mesh_server("b", "work", &b_bind))
        .await
        .expect("b");
    let (started_tx, mut started) = mpsc::unbounded_channel::<(&'static str, bool)>();
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel::<&'static str>();
    let (returned_tx, mut returned) = mpsc::unbounded_channel::<&'static str>();
    let look = {
        let (started, dropped) = (started_tx.clone(), dropped_tx.clone());
        move |req: Request| {
            let (started, dropped) = (started.clone(), dropped.clone());
            async move {
                let _probe = DropProbe("look", dropped);
                let _ = started.send(("look", req.is_cancelled()));
                std::future::pending::<()>().await;
                encode("never")
            }
        }
    };
    let act = move |req: Request| {
        let (started, dropped, returned) =
            (started_tx.clone(), dropped_tx.clone(), returned_tx.clone());
        async move {
            let _probe = DropProbe("act", dropped);
            let _ = started.send(("act", req.is_cancelled()));
            req.cancelled().await;
            assert!(req.is_cancelled());
            let _ = returned.send("act");
            encode("stopped early")
        }
    };
    b.expose(
        Service::new("work")
            .method(Method::query("look"), look)
            .method(Method::non_repeatable_command("act"), act),
    )
    .expect("expose");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;
    let calls: Vec<_> = ["look", "act"]
        .into_iter()
        .map(|m| {
            let a = a.clone();
            tokio::spawn(async move { a.call::<_, String>("work", m, &()).await })
        })
        .collect();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (method, cancelled) = tokio::time::timeout(STEP, started.recv())
            .await
            .expect("handler started")
            .expect("handler");
        assert!(!cancelled, "{method} signalled while its caller waited");
        seen.push(method);
    }
    seen.sort_unstable();
    assert_eq!(seen, ["act", "look"]);
    a.shutdown().await.expect("a");
    for call in calls {
        let err = call.await.expect("join").expect_err("the caller stopped");
        assert!(may_have_run(&err), "{err}");
    }
    let returned = tokio::time::timeout(STEP, returned.recv())
        .await
        .expect("the command was signalled")
        .expect("returned");
    assert_eq!(returned, "act");
    let mut gone = Vec::new();
    for _ in 0..2 {
        gone.push(
            tokio::time::timeout(STEP, dropped.recv())
                .await
                .expect("the handler's future was dropped")
                .expect("dropped"),
        );
    }
    gone.sort_unstable();
    assert_eq!(gone, ["act", "look"]);
    // Both handlers are over for the callee too: it holds no call.
    let limit = tokio::time::Instant::now() + STEP;
    loop {
        let snap = b.snapshot().await.expect("snapshot");
        if snap.serving_calls == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < limit,
            "b still holds {} calls",
            snap.serving_calls
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.shutdown().await.expect("b");
}
