//! Every failure is classified by what happened (MISSION X2, C3): each row of the failure
//! table (README.md, "Every failure says whether the call may have run"; the table on
//! `CallError`) produced by the runtime over real sockets on 127.0.0.1, in the situation the
//! row names. Rows whose situation other files already produce are listed in
//! docs/REQUIREMENTS.md under X2.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{
    dial_ready, fill_link, free_tcp, mesh_bind, mesh_server, peer, py_script, start_client_of,
    start_ready, CutProxy, FreezeProxy, PyPeer,
};
use serde::ser::{Error as _, Serializer};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Notify};
use zmesh::config::{NodeConfig, ServerConfig};
use zmesh::runtime::calls::{
    encode, encode_args, may_have_run, CallError, CallOptions, ItemSink, Phase, RemoteCode,
    Request, ServeError,
};
use zmesh::runtime::operations::OpStatus;
use zmesh::runtime::Node;

/// Upper bound of every single wait; a bound on failure, never a synchronisation.
const STEP: Duration = Duration::from_secs(10);

/// A value whose MessagePack form cannot be written: its `Serialize` fails. It derives
/// `Deserialize`, so a typed client can name it as a result type.
#[derive(Debug, Deserialize)]
pub struct NoBytes;

impl Serialize for NoBytes {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(S::Error::custom("NoBytes has no byte form"))
    }
}

/// What the callee's handlers saw: the method of every call that reached one.
type Ran = mpsc::UnboundedReceiver<String>;

/// `b` serves `channel` with the handler of these tests, `a` dials it and is ready. Every
/// call that reaches the handler first reports its method on the receiver returned.
///
/// Methods: `add` (two integers, their sum), `echo` (the arguments back), `hold` (waits until
/// `release` is notified, then answers `"held"`), `unencodable` (a result that does not
/// encode), `code` (answers the [`RemoteCode`] named by its argument).
async fn pair(channel: &str, release: Arc<Notify>) -> (Node, Node, Ran) {
    let bind = mesh_bind(false);
    let (tx, ran) = mpsc::unbounded_channel();
    let b = Node::builder(mesh_server("b", channel, &bind))
        .serve(channel, move |req: Request| {
            let (tx, release) = (tx.clone(), release.clone());
            async move {
                let _ = tx.send(req.method.clone());
                handle(req, release).await
            }
        })
        .start()
        .await
        .expect("b");
    let (a, _events) = dial_ready("a", "b", &bind).await;
    (a, b, ran)
}

async fn handle(req: Request, release: Arc<Notify>) -> Result<Bytes, ServeError> {
    match req.method.as_str() {
        "add" => {
            let (x, y): (i64, i64) = req.args()?;
            encode(&(x + y))
        }
        "echo" => Ok(req.raw_args().clone()),
        "hold" => {
            release.notified().await;
            encode("held")
        }
        "unencodable" => encode(&NoBytes),
        "code" => {
            let name: String = req.args()?;
            let code = HANDLER_CODES
                .iter()
                .copied()
                .find(|c| c.name() == name)
                .ok_or_else(|| ServeError::exception(format!("no code {name}")))?;
            Err(ServeError::new(code, format!("chose {name}")))
        }
        other => Err(ServeError::method_not_found(other)),
    }
}

/// Every code a handler may choose (`RemoteCode::handler_may_choose`, MISSION K6).
const HANDLER_CODES: [RemoteCode; 10] = [
    RemoteCode::Exception,
    RemoteCode::Unauthorized,
    RemoteCode::Forbidden,
    RemoteCode::InvalidParams,
    RemoteCode::IncompatibleVersion,
    RemoteCode::ClassNotFound,
    RemoteCode::MethodNotFound,
    RemoteCode::TransportError,
    RemoteCode::Timeout,
    RemoteCode::UnknownOutcome,
];

/// The next method a handler of `b` ran, within [`STEP`].
async fn next_ran(ran: &mut Ran) -> String {
    tokio::time::timeout(STEP, ran.recv())
        .await
        .expect("a handler ran within the bound")
        .expect("the callee is up")
}

/// The call's result within [`STEP`].
async fn bounded<F: std::future::IntoFuture>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(STEP, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {STEP:?}"))
}

/// The status and code of `a`'s newest operation on `method`.
fn op_of(a: &Node, method: &str) -> (OpStatus, Option<&'static str>) {
    let op = a
        .operations()
        .snapshot()
        .into_iter()
        .rev()
        .find(|op| &*op.method == method)
        .unwrap_or_else(|| panic!("no operation for {method}"));
    (op.status, op.code)
}

/// MISSION X2, C3: a REPLY `Ok` whose result does not decode as the type the caller asked
/// for is `UndecodableResult`: the handler ran and answered, so it may have run (never
/// `InvalidParams`, which says it did not). The operations row says what happened at the
/// callee: succeeded.
#[tokio::test]
async fn x2_an_undecodable_result_may_have_run() {
    let (a, b, mut ran) = pair("math", Arc::new(Notify::new())).await;
    let err = bounded("add", a.call::<_, String>("math", "add", &(40, 2)))
        .await
        .expect_err("an integer is not a string");
    assert!(
        matches!(&err, CallError::UndecodableResult { reason } if !reason.is_empty()),
        "{err:?}"
    );
    assert!(may_have_run(&err), "the handler ran and answered");
    assert_eq!(err.code(), "UndecodableResult");
    assert!(err.to_string().contains("does not decode"), "{err}");
    assert_eq!(next_ran(&mut ran).await, "add", "the handler did run");
    assert_eq!(op_of(&a, "add"), (OpStatus::Succeeded, None));
    // The same bytes read as the type they are.
    let sum: i64 = bounded("add", a.call("math", "add", &(40, 2)))
        .await
        .expect("an integer");
    assert_eq!(sum, 42);
    // `decode`, for answers taken raw, gives the same class.
    let raw = bounded(
        "echo",
        a.call_raw(
            "math",
            "echo",
            encode_args(&7u8).expect("args"),
            CallOptions::default(),
        ),
    )
    .await
    .expect("echo");
    let err = zmesh::runtime::calls::decode::<String>(&raw).expect_err("7 is no string");
    assert!(may_have_run(&err), "{err:?}");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION X2: a stream item that does not decode is `UndecodableResult` for that item
/// alone (the callee ran and sent it), the items around it arrive as they were sent, and a
/// terminal result that does not decode is the same class.
#[tokio::test]
async fn x2_an_undecodable_stream_item_is_that_item_only() {
    let bind = mesh_bind(false);
    let b = Node::builder(mesh_server("b", "feed", &bind))
        .serve_stream("feed", |_req: Request, sink: ItemSink| async move {
            sink.send_item(&0u64).await?;
            sink.send_item("one").await?;
            sink.send_item(&2u64).await?;
            encode("done")
        })
        .start()
        .await
        .expect("b");
    let (a, _events) = dial_ready("a", "b", &bind).await;
    let mut s = a.call_stream("feed", "count", &(), CallOptions::default());
    let mut got = Vec::new();
    while let Some(item) = bounded("item", s.next_item_as::<u64>()).await {
        got.push(item);
    }
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0], Ok(0));
    assert!(
        matches!(&got[1], Err(e @ CallError::UndecodableResult { .. }) if may_have_run(e)),
        "{:?}",
        got[1]
    );
    assert_eq!(got[2], Ok(2));
    let err = bounded("finish", s.finish_as::<u64>())
        .await
        .expect_err("\"done\" is no integer");
    assert!(
        matches!(&err, CallError::UndecodableResult { .. }),
        "{err:?}"
    );
    assert!(may_have_run(&err));
    assert_eq!(op_of(&a, "count").0, OpStatus::Succeeded);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// A typed service whose result cannot be encoded, and two clients of one channel that
/// disagree about a result's type.
#[zmesh::service(channel = "meter")]
pub trait Meter {
    /// The reading, as the server knows it.
    #[query]
    async fn reading(&self) -> u64;

    /// A result that does not encode.
    #[query]
    async fn broken(&self) -> NoBytes;
}

/// The same channel as [`Meter`], built against another result type.
#[zmesh::service(channel = "meter")]
pub trait MeterElsewhere {
    /// The reading, as this caller expects it.
    #[query]
    async fn reading(&self) -> String;
}

struct Gauge;

impl Meter for Gauge {
    async fn reading(&self) -> u64 {
        7
    }

    async fn broken(&self) -> NoBytes {
        NoBytes
    }
}

/// MISSION X2, A1: through typed clients: a result the callee cannot encode is answered
/// `Exception` (it ran), and a result the caller cannot decode is `UndecodableResult` (it
/// ran).
#[tokio::test]
async fn x2_typed_results_that_do_not_encode_or_decode_may_have_run() {
    let bind = mesh_bind(false);
    let b = Node::builder(mesh_server("b", "meter", &bind))
        .expose(Gauge.into_service())
        .start()
        .await
        .expect("b");
    let (a, _events) = dial_ready("a", "b", &bind).await;
    let meter = MeterClient::new(&a);
    assert_eq!(bounded("reading", meter.reading()).await, Ok(7));
    let err = bounded("broken", meter.broken())
        .await
        .expect_err("the result does not encode");
    assert!(
        matches!(&err, CallError::Remote { code: RemoteCode::Exception, message } if message.contains("does not encode")),
        "{err:?}"
    );
    assert!(may_have_run(&err));
    let elsewhere = MeterElsewhereClient::new(&a);
    let err = bounded("reading", elsewhere.reading())
        .await
        .expect_err("7 is no string");
    assert!(
        matches!(&err, CallError::UndecodableResult { .. }),
        "{err:?}"
    );
    assert!(may_have_run(&err));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION X2: a handler's result (or stream item) that does not encode is answered
/// `Exception`: the handler ran, so the caller hears "may have run", never `InvalidParams`.
#[tokio::test]
async fn x2_a_result_that_does_not_encode_answers_exception() {
    let (a, b, mut ran) = pair("math", Arc::new(Notify::new())).await;
    let err = bounded("unencodable", a.call::<_, ()>("math", "unencodable", &()))
        .await
        .expect_err("the result does not encode");
    assert!(
        matches!(&err, CallError::Remote { code: RemoteCode::Exception, message } if message.contains("does not encode")),
        "{err:?}"
    );
    assert!(may_have_run(&err));
    assert_eq!(next_ran(&mut ran).await, "unencodable");
    assert_eq!(
        op_of(&a, "unencodable"),
        (OpStatus::Failed, Some("Exception"))
    );
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");

    let bind = mesh_bind(false);
    let b = Node::builder(mesh_server("b", "feed", &bind))
        .serve_stream("feed", |_req: Request, sink: ItemSink| async move {
            sink.send_item(&NoBytes).await?;
            encode("unreachable")
        })
        .start()
        .await
        .expect("b");
    let (a, _events) = dial_ready("a", "b", &bind).await;
    let mut s = a.call_stream("feed", "items", &(), CallOptions::default());
    assert_eq!(
        bounded("item", s.next_item()).await,
        None,
        "no item was sent"
    );
    let err = bounded("finish", s.finish()).await.expect_err("Exception");
    assert!(
        matches!(
            &err,
            CallError::Remote {
                code: RemoteCode::Exception,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(may_have_run(&err));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION X2, C3 (`InvalidArgument`): arguments that do not encode, and names outside
/// 1..=255 bytes, fail at the caller before anything is sent: it did not run, and the
/// callee's handler never sees the call (the next call it sees is the one after).
#[tokio::test]
async fn x2_arguments_that_do_not_encode_never_leave() {
    let (a, b, mut ran) = pair("math", Arc::new(Notify::new())).await;
    let err = bounded("add", a.call::<_, i64>("math", "add", &NoBytes))
        .await
        .expect_err("the arguments do not encode");
    assert!(
        matches!(&err, CallError::InvalidArgument { reason } if reason.contains("do not encode")),
        "{err:?}"
    );
    assert!(!may_have_run(&err));
    assert_eq!(err.code(), "InvalidParams");
    let s = a.call_stream("math", "add", &NoBytes, CallOptions::default());
    let err = bounded("stream", s.finish())
        .await
        .expect_err("the arguments do not encode");
    assert!(matches!(err, CallError::InvalidArgument { .. }), "{err:?}");
    assert!(matches!(
        encode_args(&NoBytes),
        Err(CallError::InvalidArgument { .. })
    ));
    let long = "m".repeat(256);
    let err = bounded("long", a.call::<_, i64>("math", &long, &(1, 2)))
        .await
        .expect_err("a 256-byte method name");
    assert!(matches!(err, CallError::InvalidArgument { .. }), "{err:?}");
    assert!(!may_have_run(&err));
    let sum: i64 = bounded("add", a.call("math", "add", &(1, 2)))
        .await
        .expect("add");
    assert_eq!(sum, 3);
    assert_eq!(
        next_ran(&mut ran).await,
        "add",
        "the first call the callee saw is the good one"
    );
    assert!(ran.try_recv().is_err(), "and no other");
    assert_eq!(op_of(&a, "add"), (OpStatus::Succeeded, None));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION X2, C3, K6 (`Remote`): every code a handler may choose reaches the caller with
/// the class of its code: `Exception` and `UnknownOutcome` may have run, the refusals did
/// not; a handler's `Timeout` travels as `UnknownOutcome` (on the wire `Timeout` means
/// "refused before dispatch"); arguments that do not match the method are `InvalidParams`
/// (did not run).
#[tokio::test]
async fn x2_remote_codes_keep_the_class_of_their_code() {
    let (a, b, _ran) = pair("gw", Arc::new(Notify::new())).await;
    for code in HANDLER_CODES {
        let err = bounded(code.name(), a.call::<_, ()>("gw", "code", code.name()))
            .await
            .expect_err("the handler's code");
        let want = if code == RemoteCode::Timeout {
            RemoteCode::UnknownOutcome
        } else {
            code
        };
        assert!(
            matches!(&err, CallError::Remote { code: got, .. } if *got == want),
            "{code}: {err:?}"
        );
        assert_eq!(may_have_run(&err), want.may_have_run(), "{code}: {err:?}");
        assert_eq!(err.code(), want.name());
    }
    let err = bounded("add", a.call::<_, i64>("gw", "add", "not two numbers"))
        .await
        .expect_err("arguments of another shape");
    assert!(
        matches!(
            &err,
            CallError::Remote {
                code: RemoteCode::InvalidParams,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!may_have_run(&err));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION X2, C3 (`TransportRefused`): the link to the callee cannot take the request now
/// (its pipe is full: the callee's application queue is paused and reads nothing): the call
/// fails at once, never sent, never queued, did not run.
#[tokio::test]
async fn x2_a_request_the_link_cannot_take_is_transport_refused() {
    let bind = mesh_bind(true);
    let mut b = mesh_server("b", "data", &bind);
    b.delivery_high_water = 4;
    let b = Node::start(b).await.expect("b");
    let calls = Arc::new(AtomicU64::new(0));
    let seen = calls.clone();
    b.serve("data", move |_req: Request| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { encode(&()) }
    })
    .expect("serve");
    let (a, _events) = dial_ready("a", "b", &bind).await;
    let taken = fill_link(&a, "b", "data", |_| Bytes::from(vec![0u8; 1024])).await;
    assert!(taken > 0);
    let err = bounded("call", a.call::<_, ()>("data", "put", &1u8))
        .await
        .expect_err("the link is full");
    assert_eq!(err, CallError::TransportRefused);
    assert!(!may_have_run(&err));
    assert_eq!(op_of(&a, "put"), (OpStatus::Failed, Some("TransportError")));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing reached a handler");
    assert_eq!(a.snapshot().await.expect("snapshot").pending_calls, 0);
    drop(a);
    drop(b);
}

/// MISSION X2, C2, C3 (`OutcomeUnknown { phase: Sent }`): the request reached the callee and
/// its handler runs, but the ACCEPT never reaches the caller (the Completion lane is frozen
/// from the start), and the Application lane's connection breaks: the call fails at once
/// with phase `Sent`, may have run.
#[tokio::test]
async fn x2_a_call_lost_before_its_accept_is_outcome_unknown_sent() {
    let bind = mesh_bind(true);
    let app = CutProxy::start(&bind.application);
    let cpl = FreezeProxy::start(&bind.completion);
    let release = Arc::new(Notify::new());
    let (tx, mut ran) = mpsc::unbounded_channel();
    let held = release.clone();
    let b = Node::builder(mesh_server("b", "work", &bind))
        .serve("work", move |req: Request| {
            let (tx, release) = (tx.clone(), held.clone());
            async move {
                let _ = tx.send(req.method.clone());
                handle(req, release).await
            }
        })
        .start()
        .await
        .expect("b");
    let mut a = NodeConfig::new("a");
    let mut p = peer("b", &bind);
    p.application = app.endpoint.clone();
    p.completion = cpl.endpoint.clone();
    a.peers = vec![p];
    let (a, _events) = start_ready(a, "b").await;
    cpl.freeze();
    let caller = a.clone();
    let call = tokio::spawn(async move { caller.call::<_, String>("work", "hold", &()).await });
    assert_eq!(next_ran(&mut ran).await, "hold", "the request arrived");
    assert!(app.cut() > 0, "the Application lane was carried");
    let err = bounded("hold", call)
        .await
        .expect("join")
        .expect_err("the connection broke");
    assert_eq!(err, CallError::OutcomeUnknown { phase: Phase::Sent });
    assert!(may_have_run(&err));
    assert_eq!(
        op_of(&a, "hold"),
        (OpStatus::UnknownOutcome, Some("UnknownOutcome"))
    );
    release.notify_one();
    a.shutdown().await.expect("a");
    drop(b);
}

/// MISSION X2, C2, C3 (`OutcomeUnknown { phase: Accepted }`): a stream whose items arrived
/// (an ITEM counts as the ACCEPT) loses its callee: phase `Accepted`, may have run.
#[tokio::test]
async fn x2_a_call_lost_after_its_accept_is_outcome_unknown_accepted() {
    let bind = mesh_bind(false);
    let b = Node::builder(mesh_server("b", "feed", &bind))
        .serve_stream("feed", |_req: Request, sink: ItemSink| async move {
            sink.send_item(&0u64).await?;
            std::future::pending::<()>().await;
            encode("never")
        })
        .start()
        .await
        .expect("b");
    let (a, _events) = dial_ready("a", "b", &bind).await;
    let mut s = a.call_stream("feed", "endless", &(), CallOptions::default());
    let first = bounded("item", s.next_item_as::<u64>()).await;
    assert_eq!(first, Some(Ok(0)));
    drop(b);
    let err = bounded("finish", s.finish())
        .await
        .expect_err("the callee went away");
    assert_eq!(
        err,
        CallError::OutcomeUnknown {
            phase: Phase::Accepted
        }
    );
    assert!(may_have_run(&err));
    a.shutdown().await.expect("a");
}

/// MISSION X2, C3, F6 (`Shutdown`): the caller's own node stops while a call is out (the
/// callee's handler runs): `Shutdown { sent: true }`, may have run; a call made after the
/// stop is `Shutdown { sent: false }`, never sent.
#[tokio::test]
async fn x2_the_callers_node_stopping_is_shutdown_by_phase() {
    let (a, b, mut ran) = pair("work", Arc::new(Notify::new())).await;
    let caller = a.clone();
    let call = tokio::spawn(async move { caller.call::<_, String>("work", "hold", &()).await });
    assert_eq!(next_ran(&mut ran).await, "hold");
    bounded("stop", a.shutdown()).await.expect("a stops");
    let err = bounded("hold", call)
        .await
        .expect("join")
        .expect_err("the caller stopped");
    assert_eq!(err, CallError::Shutdown { sent: true });
    assert!(may_have_run(&err));
    let err = bounded("late", a.call::<_, i64>("work", "add", &(1, 2)))
        .await
        .expect_err("the node is stopped");
    assert_eq!(err, CallError::Shutdown { sent: false });
    assert!(!may_have_run(&err));
    let s = a.call_stream("work", "add", &(1, 2), CallOptions::default());
    let err = bounded("late stream", s.finish())
        .await
        .expect_err("the node is stopped");
    assert_eq!(err, CallError::Shutdown { sent: false });
    assert!(ran.try_recv().is_err(), "no late call reached the callee");
    drop(b);
}

/// MISSION X2, C4, C3 (`Unavailable { accepted: false }`): a callee that is stopping
/// (draining: it waits for the call it accepted) refuses a new call without running it: did
/// not run. The accepted call is still answered.
#[tokio::test]
async fn x2_a_draining_callee_refuses_new_calls_unavailable_not_accepted() {
    let release = Arc::new(Notify::new());
    let (a, b, mut ran) = pair("work", release.clone()).await;
    let caller = a.clone();
    let held = tokio::spawn(async move { caller.call::<_, String>("work", "hold", &()).await });
    assert_eq!(next_ran(&mut ran).await, "hold");
    let stopper = b.clone();
    let stop = tokio::spawn(async move { stopper.shutdown().await });
    let limit = tokio::time::Instant::now() + STEP;
    while b.snapshot().await.expect("snapshot").host != "draining" {
        assert!(tokio::time::Instant::now() < limit, "b never drained");
        tokio::task::yield_now().await;
    }
    let err = bounded("echo", a.call::<_, String>("work", "echo", "late"))
        .await
        .expect_err("b is stopping");
    assert_eq!(err, CallError::Unavailable { accepted: false });
    assert!(!may_have_run(&err));
    assert_eq!(op_of(&a, "echo"), (OpStatus::Failed, Some("Unavailable")));
    release.notify_one();
    let answer = bounded("hold", held)
        .await
        .expect("join")
        .expect("answered");
    assert_eq!(answer, "held");
    bounded("stop", stop).await.expect("join").expect("b stops");
    assert!(ran.try_recv().is_err(), "the refused call never ran");
    a.shutdown().await.expect("a");
}

/// A pyzmq ROUTER playing a ClientServer server of `feed`, built byte by byte from WIRE.md:
/// WELCOMEs every HELLO, ACKs probes, and answers every REQUEST with ACCEPT, ITEM seq 0,
/// ITEM seq 2 (item 1 is missing) and REPLY `Ok`, reporting `request=[id]`.
const PY_GAPPED_STREAM: &str = r#"
ep = sys.argv[1]
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.linger = 0
s.bind(ep)
emit(bound=ep)
while time.monotonic() < DEADLINE:
    if not s.poll(50):
        continue
    frames = s.recv_multipart()
    peer, rec = frames[0], frames[1:]
    f0 = rec[0]
    kind = f0[3] if len(f0) >= 4 else None
    if kind == 0x01:
        s.send_multipart([peer, envelope(0x02) + bytes([3]) + string("pysrv") + u64(7)
                          + string("") + u16(1) + bytes([1]) + string("feed")])
        emit(hello=True)
    elif kind == 0x04:
        s.send_multipart([peer, envelope(0x05) + f0[4:12]])
    elif kind == 0x07 and len(rec) == 2:
        cid = Reader(f0[4:]).u64()
        s.send_multipart([peer, envelope(0x08) + u64(cid) + u64(7) + u64(1)])
        s.send_multipart([peer, envelope(0x0A) + u64(cid) + u64(0), bytes([0])])
        s.send_multipart([peer, envelope(0x0A) + u64(cid) + u64(2), bytes([2])])
        s.send_multipart([peer, envelope(0x09) + u64(cid) + bytes([0]), bytes([0xC0])])
        emit(request=[cid])
"#;

/// MISSION X2, C1, C3 (`ItemOutOfOrder`): a callee that skips a stream item (ITEM 0, then
/// ITEM 2) breaks the stream: item 0 arrives, then the call ends at once with
/// `ItemOutOfOrder { expected: 1, got: 2 }`, may have run (the callee was producing items);
/// the REPLY after it changes nothing.
#[tokio::test]
async fn x2_a_gap_in_a_stream_is_item_out_of_order() {
    let ep = free_tcp();
    let mut py = PyPeer::start(&py_script(PY_GAPPED_STREAM, 90), &[&ep]);
    py.until(Duration::from_secs(60), "bound").await;
    let server = ServerConfig::new("feed", ep.clone())
        .rid("pysrv")
        .batch_calls(false);
    let (a, _events) = start_client_of("cli", server).await;
    let mut s = a.call_stream("feed", "count", &(), CallOptions::default());
    assert_eq!(
        bounded("item 0", s.next_item()).await.as_deref(),
        Some(&[0u8][..])
    );
    assert_eq!(
        bounded("item 2", s.next_item()).await,
        None,
        "item 2 is not delivered"
    );
    let err = bounded("finish", s.finish())
        .await
        .expect_err("the stream is broken");
    assert_eq!(
        err,
        CallError::ItemOutOfOrder {
            expected: 1,
            got: 2
        }
    );
    assert!(may_have_run(&err));
    assert_eq!(err.code(), "UnknownOutcome");
    assert_eq!(
        op_of(&a, "count"),
        (OpStatus::UnknownOutcome, Some("UnknownOutcome"))
    );
    assert_eq!(a.snapshot().await.expect("snapshot").pending_calls, 0);
    a.shutdown().await.expect("a");
}
