//! Streaming calls over real libzmq sockets (MISSION C1, C2, C4): items in order then one
//! terminal answer on RouteMesh and ClientServer; a graceful stop ends a stream at once with
//! `Unavailable` while it still answers a unary call it accepted; a stream whose callee's
//! connection is gone fails as "may have run".

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{free_tcp, mesh_bind, peer, start_client_ready, start_ready, FreezeProxy};
use tokio::sync::{mpsc, Notify};
use zmesh::config::{Endpoint, NodeConfig, RouteMeshBind};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::runtime::calls::{
    encode, may_have_run, CallError, CallOptions, CallStream, ItemSink, RemoteCode, Request,
    ServeError,
};
use zmesh::runtime::Node;

const STEP: Duration = Duration::from_secs(10);

fn server_of(channels: &[&str]) -> Vec<Membership> {
    channels
        .iter()
        .map(|c| Membership {
            role: Role::Server,
            channel: (*c).into(),
        })
        .collect()
}

/// What the stream handler reports to the test.
#[derive(Debug)]
enum Seen {
    /// An `endless` stream began producing.
    Producing,
    /// An `endless` stream's sink refused an item with this error.
    Closed(ServeError),
}

/// The stream handler of the tests: `count` (items 0..n, then `"done"`), `fail_after` (items
/// 0..n, then an `Exception`) and `endless` (items 0, 1, 2, ... until the sink refuses one).
async fn stream_handler(
    req: Request,
    sink: ItemSink,
    seen: mpsc::UnboundedSender<Seen>,
) -> Result<Bytes, ServeError> {
    match req.method.as_str() {
        "count" | "fail_after" => {
            let n: u64 = req.args()?;
            for i in 0..n {
                sink.send_item(&i).await?;
            }
            if req.method == "count" {
                encode("done")
            } else {
                Err(ServeError::exception("failed after the items"))
            }
        }
        "endless" => {
            let _ = seen.send(Seen::Producing);
            let mut i = 0u64;
            loop {
                if let Err(e) = sink.send_item(&i).await {
                    let _ = seen.send(Seen::Closed(e.clone()));
                    return Err(e);
                }
                i += 1;
            }
        }
        other => Err(ServeError::method_not_found(other)),
    }
}

fn serve_stream_with(node: &Node, channel: &str) -> mpsc::UnboundedReceiver<Seen> {
    let (tx, rx) = mpsc::unbounded_channel();
    node.serve_stream(channel, move |req, sink| {
        stream_handler(req, sink, tx.clone())
    })
    .expect("serve_stream");
    rx
}

/// A unary channel: `add`, and `hold`, which reports that it started and answers `"held"`
/// once the test releases `gate`.
fn serve_unary_with(node: &Node, channel: &str, gate: Arc<Notify>) -> mpsc::UnboundedReceiver<()> {
    let (started, rx) = mpsc::unbounded_channel();
    node.serve(channel, move |req: Request| {
        let (gate, started) = (gate.clone(), started.clone());
        async move {
            match req.method.as_str() {
                "add" => {
                    let (a, b): (i64, i64) = req.args()?;
                    encode(&(a + b))
                }
                "hold" => {
                    let _ = started.send(());
                    gate.notified().await;
                    encode("held")
                }
                other => Err(ServeError::method_not_found(other)),
            }
        }
    })
    .expect("serve");
    rx
}

/// The next item of `stream`, bounded by `limit`.
async fn next_within(stream: &mut CallStream, limit: Duration) -> Option<u64> {
    tokio::time::timeout(limit, stream.next_item_as::<u64>())
        .await
        .expect("an item or the end within the bound")
        .map(|r| r.expect("item decodes"))
}

/// Takes the stream's items until it ends, checking they are 0, 1, 2, ... from `next`;
/// returns how many there were. Each wait is bounded by `limit`.
async fn drain_in_order(stream: &mut CallStream, mut next: u64, limit: Duration) -> u64 {
    let first = next;
    while let Some(item) = next_within(stream, limit).await {
        assert_eq!(item, next, "items arrive in order");
        next += 1;
    }
    next - first
}

/// Checks one `count` stream of `n` items and one `fail_after` stream over `node`.
async fn check_streams(node: &Node, n: u64) {
    let mut s = node.call_stream("feed", "count", &n, CallOptions::default());
    assert_eq!(drain_in_order(&mut s, 0, STEP).await, n);
    assert_eq!(s.items_received(), n);
    assert!(s.is_ended());
    let done: String = s.finish_as().await.expect("terminal result");
    assert_eq!(done, "done");

    // An error after items: the items first, then the error, once.
    let mut s = node.call_stream("feed", "fail_after", &3u64, CallOptions::default());
    assert_eq!(drain_in_order(&mut s, 0, STEP).await, 3);
    assert_eq!(s.next_item().await, None, "nothing after the end");
    let err = s.finish().await.expect_err("the handler failed");
    assert!(
        matches!(
            err,
            CallError::Remote {
                code: RemoteCode::Exception,
                ..
            }
        ),
        "{err}"
    );
    assert!(may_have_run(&err));
}

/// MISSION C1: a stream of N items arrives in order, then its one terminal result, over
/// RouteMesh (REQUEST on the Application lane, ITEMs and REPLY on the Completion lane) and
/// over ClientServer; an error after items comes after them; a unary caller of a stream
/// channel gets the result (the items are dropped) and a stream caller of a unary channel
/// gets no items and the result.
#[tokio::test]
async fn c1_stream_items_in_order_then_terminal_on_route_mesh_and_client_server() {
    let t = Instant::now();
    let b_bind = mesh_bind(true);
    let s_ep = free_tcp();
    let mut b = NodeConfig::new("b");
    b.memberships = server_of(&["feed", "math"]);
    b.route_mesh = Some(b_bind.clone());
    b.server = Some(Endpoint::new(s_ep.clone()));
    let b = Node::start(b).await.expect("b");
    let _seen = serve_stream_with(&b, "feed");
    let _started = serve_unary_with(&b, "math", Arc::new(Notify::new()));
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;
    check_streams(&a, 1000).await;
    let done: String = a
        .call("feed", "count", &5u64)
        .await
        .expect("unary call of a stream channel");
    assert_eq!(done, "done");
    let s = a.call_stream("math", "add", &(40, 2), CallOptions::default());
    let sum: i64 = s.finish_as().await.expect("stream call of a unary channel");
    assert_eq!(sum, 42);

    let (c, _ec) = start_client_ready("c", "feed", &s_ep, "b").await;
    check_streams(&c, 1000).await;

    for n in [&a, &c] {
        let snap = n.snapshot().await.expect("snapshot");
        assert_eq!(snap.pending_calls, 0, "C5: nothing pending after the ends");
    }
    assert_eq!(b.snapshot().await.expect("snapshot").serving_calls, 0);
    for n in [&a, &b, &c] {
        n.shutdown().await.expect("shutdown");
    }
    eprintln!("c1 streams: {:?}", t.elapsed());
}

/// MISSION C4: a server that stops gracefully while producing an endless stream ends it at
/// the caller at once with `Unavailable { accepted: true }` (may have run), after the items
/// it sent, in order; the handler's sink refuses the next item; and a unary call it accepted
/// at the same time is still answered normally. The unary handler only finishes when the
/// test releases it, after the stream's end was seen: so the stream ended while the drain
/// was still waiting, not when the node left.
#[tokio::test]
async fn c4_graceful_stop_ends_stream_at_once_and_answers_unary() {
    let b_bind = mesh_bind(true);
    let mut b = NodeConfig::new("b");
    b.memberships = server_of(&["feed", "work"]);
    b.route_mesh = Some(b_bind.clone());
    let b = Node::start(b).await.expect("b");
    let mut seen = serve_stream_with(&b, "feed");
    let gate = Arc::new(Notify::new());
    let mut started = serve_unary_with(&b, "work", gate.clone());
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;

    let mut stream = a.call_stream("feed", "endless", &(), CallOptions::default());
    for want in 0..10u64 {
        assert_eq!(next_within(&mut stream, STEP).await, Some(want));
    }
    let caller = a.clone();
    let unary = tokio::spawn(async move { caller.call::<_, String>("work", "hold", &()).await });
    tokio::time::timeout(STEP, started.recv())
        .await
        .expect("unary handler started")
        .expect("started");

    let stopper = b.clone();
    let stopped_at = Instant::now();
    let stop = tokio::spawn(async move { stopper.shutdown().await });
    let more = drain_in_order(&mut stream, 10, STEP).await;
    let ended = stopped_at.elapsed();
    let err = stream.finish().await.expect_err("the stream was cut");
    assert_eq!(err, CallError::Unavailable { accepted: true });
    assert!(may_have_run(&err));
    assert!(
        ended < Duration::from_secs(2),
        "ended {ended:?} after the stop"
    );
    assert!(
        !unary.is_finished(),
        "the drain is still waiting for the unary call"
    );
    assert!(!stop.is_finished(), "the node is still draining");
    // The handler learns that the stream is over from its sink.
    let closed = loop {
        match tokio::time::timeout(STEP, seen.recv()).await {
            Ok(Some(Seen::Closed(e))) => break e,
            Ok(Some(Seen::Producing)) => continue,
            other => panic!("no sink refusal: {other:?}"),
        }
    };
    assert_eq!(closed.code, RemoteCode::Unavailable);

    release_unary_then_stop(&gate, unary, stop).await;
    assert_eq!(a.snapshot().await.expect("snapshot").pending_calls, 0);
    a.shutdown().await.expect("a");
    eprintln!("c4: {more} items after the stop, ended after {ended:?}");
}

/// Opens `gate`: the unary call `unary` held behind it is answered normally (`held`), and
/// then the shutdown `stop`, which waited for that call, ends.
async fn release_unary_then_stop<E: std::fmt::Debug>(
    gate: &Notify,
    unary: tokio::task::JoinHandle<Result<String, CallError>>,
    stop: tokio::task::JoinHandle<Result<(), E>>,
) {
    gate.notify_one();
    let answer = tokio::time::timeout(STEP, unary)
        .await
        .expect("unary answered")
        .expect("join")
        .expect("the accepted unary call is answered normally");
    assert_eq!(answer, "held");
    tokio::time::timeout(STEP, stop)
        .await
        .expect("stop ends")
        .expect("join")
        .expect("shutdown");
}

/// Starts callee `b` serving the endless stream on `feed` with its lanes bound at `bind`.
async fn stream_callee(bind: &RouteMeshBind) -> (Node, mpsc::UnboundedReceiver<Seen>) {
    let mut b = NodeConfig::new("b");
    b.memberships = server_of(&["feed"]);
    b.route_mesh = Some(bind.clone());
    let b = Node::start(b).await.expect("b");
    let seen = serve_stream_with(&b, "feed");
    (b, seen)
}

/// MISSION C2: the callee stops abruptly mid-stream (its last handle is dropped: it closes
/// its connections without answering anything): the stream fails at once as "may have
/// run", after the items that arrived, in order.
#[tokio::test]
async fn c2_stream_fails_at_once_when_callee_node_goes_away() {
    let b_bind = mesh_bind(true);
    let (b, mut seen) = stream_callee(&b_bind).await;
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;
    let mut stream = a.call_stream("feed", "endless", &(), CallOptions::default());
    for want in 0..10u64 {
        assert_eq!(next_within(&mut stream, STEP).await, Some(want));
    }
    let gone = Instant::now();
    drop(b);
    let _ = drain_in_order(&mut stream, 10, STEP).await;
    let waited = gone.elapsed();
    let err = stream.finish().await.expect_err("the callee went away");
    assert!(matches!(err, CallError::OutcomeUnknown { .. }), "{err}");
    assert!(may_have_run(&err));
    assert!(waited < Duration::from_secs(2), "failed {waited:?} after");
    // The callee's handler is told too (its node stopped).
    let closed = loop {
        match tokio::time::timeout(STEP, seen.recv()).await {
            Ok(Some(Seen::Closed(e))) => break e,
            Ok(Some(Seen::Producing)) => continue,
            other => panic!("no sink refusal: {other:?}"),
        }
    };
    assert_eq!(closed.code, RemoteCode::Unavailable, "{}", closed.message);
    a.shutdown().await.expect("a");
}

/// MISSION C2 (real time, bounded by 20 s): the callee's connections go half-open
/// mid-stream (a proxy stops forwarding, nothing closes): the stream fails as "may have run"
/// within the 15 s peer deadline, with no timeout on the call.
#[tokio::test]
async fn c2_half_open_stream_fails_within_deadline_may_have_run() {
    let b_bind = mesh_bind(true);
    let app = FreezeProxy::start(&b_bind.application);
    let cpl = FreezeProxy::start(&b_bind.completion);
    let (b, _seen) = stream_callee(&b_bind).await;
    let mut a = NodeConfig::new("a");
    let via = RouteMeshBind::new(app.endpoint.clone(), cpl.endpoint.clone());
    a.peers = vec![peer("b", &via)];
    let (a, _ea) = start_ready(a, "b").await;
    let mut stream = a.call_stream("feed", "endless", &(), CallOptions::default());
    for want in 0..10u64 {
        assert_eq!(next_within(&mut stream, STEP).await, Some(want));
    }
    let frozen = Instant::now();
    app.freeze();
    cpl.freeze();
    let _ = drain_in_order(&mut stream, 10, Duration::from_secs(20)).await;
    let waited = frozen.elapsed();
    let err = stream.finish().await.expect_err("half-open callee");
    assert_eq!(
        err,
        CallError::OutcomeUnknown {
            phase: zmesh::runtime::calls::Phase::Accepted
        }
    );
    assert!(may_have_run(&err));
    assert!(waited <= Duration::from_millis(15_500), "took {waited:?}");
    a.shutdown().await.expect("a");
    drop(b);
}

/// MISSION X1, C4: a stream ended by the server's graceful stop ends for its caller at once;
/// its handler, which sends nothing and waits on `Request::cancelled`, is told nobody waits
/// for it any more while the drain still waits for an accepted unary call (so it is the end
/// of its stream that tells it, not the end of the node), and not before.
#[tokio::test]
async fn x1_c4_a_stream_ended_by_the_drain_signals_its_handler() {
    let b_bind = mesh_bind(true);
    let mut b = NodeConfig::new("b");
    b.memberships = server_of(&["feed", "work"]);
    b.route_mesh = Some(b_bind.clone());
    let b = Node::start(b).await.expect("b");
    let (tx, mut told) = mpsc::unbounded_channel::<&'static str>();
    b.serve_stream("feed", move |req: Request, _sink| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(if req.is_cancelled() {
                "cancelled at start"
            } else {
                "started"
            });
            req.cancelled().await;
            let _ = tx.send("cancelled");
            encode("stopped")
        }
    })
    .expect("serve_stream");
    let gate = Arc::new(Notify::new());
    let mut held = serve_unary_with(&b, "work", gate.clone());
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _ea) = start_ready(a, "b").await;
    let stream = a.call_stream("feed", "quiet", &(), CallOptions::default());
    let first = tokio::time::timeout(STEP, told.recv())
        .await
        .expect("handler started")
        .expect("told");
    assert_eq!(first, "started");
    let caller = a.clone();
    let unary = tokio::spawn(async move { caller.call::<_, String>("work", "hold", &()).await });
    tokio::time::timeout(STEP, held.recv())
        .await
        .expect("unary handler started")
        .expect("started");
    let stopper = b.clone();
    let stop = tokio::spawn(async move { stopper.shutdown().await });
    let err = tokio::time::timeout(STEP, stream.finish())
        .await
        .expect("the stream ended")
        .expect_err("the stream was cut");
    assert_eq!(err, CallError::Unavailable { accepted: true });
    let then = tokio::time::timeout(STEP, told.recv())
        .await
        .expect("the handler was told")
        .expect("told");
    assert_eq!(then, "cancelled");
    assert!(!stop.is_finished(), "the node is still draining");
    release_unary_then_stop(&gate, unary, stop).await;
    a.shutdown().await.expect("a");
}
