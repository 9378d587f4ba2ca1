//! Cancellation over real libzmq sockets (MISSION X1, X3): a caller that stops waiting (a
//! dropped future, `PendingCall::cancel`, a `tokio::time::timeout`, a dropped stream) ends
//! its call at once and tells a callee that negotiated CANCEL; the callee never runs a queued
//! call, stops a query's handler, and only signals a command's. A version-1 peer, which
//! announces no capability, never receives a CANCEL.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{mesh_bind, mesh_server, peer, raw_router, raw_send, raw_welcome, start_ready};
use tokio::sync::{mpsc, Notify};
use zmesh::config::{NodeConfig, ServerConfig};
use zmesh::proto::ops::OpStatus;
use zmesh::proto::wire::{self, Record, ReplyCode};
use zmesh::runtime::calls::{encode, encode_args, CallError, CallOptions, Request};
use zmesh::runtime::service::{Execution, Method, Service};
use zmesh::runtime::Node;

const STEP: Duration = Duration::from_secs(10);

/// Sends its name when dropped: shows that a handler's future was dropped.
struct DropProbe(&'static str, mpsc::UnboundedSender<&'static str>);

impl Drop for DropProbe {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

async fn recv<T>(rx: &mut mpsc::UnboundedReceiver<T>, what: &str) -> T {
    tokio::time::timeout(STEP, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {STEP:?}"))
        .unwrap_or_else(|| panic!("{what}: channel closed"))
}

/// A RouteMesh pair: `b` serving `services`, `a` dialling it, both lanes ready.
async fn pair(services: Vec<Service>) -> (Node, Node) {
    let b_bind = mesh_bind(true);
    let mut config = mesh_server("b", services[0].channel(), &b_bind);
    config.memberships = services
        .iter()
        .flat_map(|s| common::server_of(s.channel()))
        .collect();
    let b = Node::start(config).await.expect("b");
    for service in services {
        b.expose(service).expect("expose");
    }
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _events) = start_ready(a, "b").await;
    (a, b)
}

/// MISSION X1: a call waiting in the callee's serial queue, cancelled by its caller, never
/// runs. The first call holds the queue until the test lets it go; the second is cancelled
/// explicitly (its caller hears `Cancelled { sent: true }` at once); a query on the same
/// connection, answered after the CANCEL arrived (records of one connection arrive in
/// order), shows the callee had it before the queue moved; the third call then runs, and
/// the cancelled one never did.
#[tokio::test]
async fn x1_a_cancelled_queued_call_never_runs() {
    let gate = Arc::new(Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let hold = {
        let gate = gate.clone();
        move |_req: Request| {
            let (gate, started) = (gate.clone(), started_tx.clone());
            async move {
                let _ = started.send(());
                gate.notified().await;
                encode("held")
            }
        }
    };
    let record = {
        let runs = runs.clone();
        move |_req: Request| {
            let runs = runs.clone();
            async move { encode(&(runs.fetch_add(1, Ordering::SeqCst) + 1)) }
        }
    };
    let service = Service::new("work")
        .execution(Execution::Serial)
        .method(Method::idempotent_command("hold"), hold)
        .method(Method::non_repeatable_command("record"), record);
    let ping = Service::new("ping").method(Method::query("ping"), |_req: Request| async {
        encode("pong")
    });
    let (a, b) = pair(vec![service, ping]).await;

    let first = {
        let a = a.clone();
        tokio::spawn(async move { a.call::<_, String>("work", "hold", &()).await })
    };
    recv(&mut started, "the first call's handler").await;
    let args = encode_args(&()).expect("args");
    let mut second = a.start_call("work", "record", args, CallOptions::default());
    // Let the REQUEST leave and be queued behind the first call: the ping answered after it
    // shows the callee has it.
    let pong: String = a.call("ping", "ping", &()).await.expect("ping");
    assert_eq!(pong, "pong");
    second.cancel();
    let err = second.await.expect_err("cancelled");
    assert_eq!(err, CallError::Cancelled { sent: true });
    let pong: String = a
        .call("ping", "ping", &())
        .await
        .expect("ping after the cancel");
    assert_eq!(pong, "pong");

    gate.notify_one();
    assert_eq!(first.await.expect("join").expect("first call"), "held");
    let third: usize = a.call("work", "record", &()).await.expect("third call");
    assert_eq!(
        third, 1,
        "the cancelled call never ran: the third is the first to run"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let row = a
        .operations()
        .snapshot()
        .into_iter()
        .find(|o| &*o.method == "record")
        .expect("the cancelled call's row");
    assert_eq!(row.status, OpStatus::UnknownOutcome, "sent, then cancelled");
    assert_eq!(row.code, Some("Cancelled"));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION X1: a running query whose caller drops the call (here through
/// `tokio::time::timeout`) has its handler's future dropped at its next `.await`; a running
/// command is never stopped by the runtime: its handler sees the signal and finishes. The
/// caller's table keeps nothing, and each operations row is settled as "may have run".
#[tokio::test]
async fn x1_a_dropped_query_stops_and_a_dropped_command_finishes() {
    let (started_tx, mut started) = mpsc::unbounded_channel::<&'static str>();
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel::<&'static str>();
    let (finished_tx, mut finished) = mpsc::unbounded_channel::<&'static str>();
    let look = {
        let (started, dropped) = (started_tx.clone(), dropped_tx.clone());
        move |_req: Request| {
            let (started, dropped) = (started.clone(), dropped.clone());
            async move {
                let _probe = DropProbe("look", dropped);
                let _ = started.send("look");
                std::future::pending::<()>().await;
                encode("never")
            }
        }
    };
    let act = move |req: Request| {
        let (started, dropped, finished) =
            (started_tx.clone(), dropped_tx.clone(), finished_tx.clone());
        async move {
            let _probe = DropProbe("act", dropped);
            let _ = started.send("act");
            req.cancelled().await;
            let _ = finished.send("act");
            encode("stopped where it was safe")
        }
    };
    let service = Service::new("work")
        .method(Method::query("look"), look)
        .method(Method::non_repeatable_command("act"), act);
    let (a, b) = pair(vec![service]).await;

    for method in ["look", "act"] {
        // The call is dropped once its handler runs, as `tokio::time::timeout` drops it.
        let call = a.call::<_, String>("work", method, &());
        tokio::pin!(call);
        tokio::time::timeout(STEP, async {
            tokio::select! {
                r = &mut call => panic!("{method} answered: {r:?}"),
                m = started.recv() => assert_eq!(m, Some(method)),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{method}: its handler did not start"));
    }
    let mut gone = vec![recv(&mut dropped, "a handler's future dropped").await];
    assert_eq!(
        recv(&mut finished, "the command saw the signal").await,
        "act"
    );
    gone.push(recv(&mut dropped, "the command's future ended").await);
    gone.sort_unstable();
    assert_eq!(gone, ["act", "look"]);
    let snap = a.snapshot().await.expect("snapshot");
    assert_eq!(snap.pending_calls, 0, "the caller keeps nothing");
    for row in a.operations().snapshot() {
        assert_eq!(row.status, OpStatus::UnknownOutcome, "{}", row.method);
        assert_eq!(row.code, Some("Cancelled"), "{}", row.method);
    }
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION X1: dropping a stream part way stops the callee's producer (a query's handler is
/// stopped at its next `.await`), and the caller's table keeps nothing.
#[tokio::test]
async fn x1_a_dropped_stream_stops_its_producer() {
    let b_bind = mesh_bind(true);
    let b = Node::start(mesh_server("b", "feed", &b_bind))
        .await
        .expect("b");
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel::<&'static str>();
    b.serve_stream("feed", move |_req, sink| {
        let dropped = dropped_tx.clone();
        async move {
            let _probe = DropProbe("feed", dropped);
            let mut n = 0u64;
            // An endless producer: it ends only when stopped or when its sink refuses.
            while sink.send_item(&n).await.is_ok() {
                n += 1;
            }
            encode("refused")
        }
    })
    .expect("serve");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _events) = start_ready(a, "b").await;
    let mut stream = a.call_stream("feed", "endless", &(), CallOptions::default());
    for want in 0..5u64 {
        let got = tokio::time::timeout(STEP, stream.next_item_as::<u64>())
            .await
            .expect("an item")
            .expect("not ended")
            .expect("decodes");
        assert_eq!(got, want);
    }
    drop(stream);
    assert_eq!(recv(&mut dropped, "the producer ended").await, "feed");
    let snap = a.snapshot().await.expect("snapshot");
    assert_eq!(snap.pending_calls, 0);
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION X1, X3: a server that speaks only version 1 (a raw libzmq ROUTER answering with
/// this crate's codec and announcing no capability) never receives a CANCEL: the HELLO
/// offers `cancel`, the version-1 WELCOME does not, so a dropped call stays local (the caller
/// still hears `Cancelled` at once) and the next record the server reads is the next call's
/// REQUEST, which it answers as usual.
#[tokio::test]
async fn x1_x3_a_version_1_server_never_receives_a_cancel() {
    let ctx = zmq::Context::new();
    let (server, ep) = raw_router(&ctx, 10_000);
    let mut c = NodeConfig::new("cli");
    c.servers = vec![ServerConfig::new("orders", ep.clone()).rid("srv")];
    let node = Node::start(c).await.expect("client");

    let server = tokio::task::spawn_blocking(move || {
        let next = |s: &zmq::Socket| -> (Vec<u8>, Record) {
            loop {
                let mut frames = s.recv_multipart(0).expect("a record within 10 s");
                let route = frames.remove(0);
                let rec = Record::decode(&frames).expect("version-1 bytes only");
                if !matches!(rec, Record::Probe { .. } | Record::Ack { .. }) {
                    return (route, rec);
                }
                if let Record::Probe { id } = rec {
                    assert!(raw_send(s, &route, Record::Ack { id }), "ack");
                }
            }
        };
        let (route, hello) = next(&server);
        let Record::Hello(h) = hello else {
            panic!("first record: {hello:?}")
        };
        let offered: Vec<&str> = h.memberships.iter().map(|m| m.channel.as_str()).collect();
        assert_eq!(
            offered,
            [
                "\0cancel",
                "\0calls",
                "\0credit",
                "\0answers",
                "\0replayed",
                "\0pack",
                "\0ids16"
            ],
            "the client offers its capabilities"
        );
        assert!(
            raw_send(&server, &route, raw_welcome("orders", &[])),
            "welcome"
        );
        // The first REQUEST goes unanswered (its caller gives up); the next record must be
        // the second REQUEST, never a CANCEL.
        let (_, first) = next(&server);
        let Record::Request(first) = first else {
            panic!("not a REQUEST: {first:?}")
        };
        let (route, second) = next(&server);
        let Record::Request(second) = second else {
            panic!("a version-1 server got {second:?}")
        };
        assert_ne!(first.call_id, second.call_id);
        let reply = raw_send(
            &server,
            &route,
            Record::Reply(wire::Reply {
                call_id: second.call_id,
                code: ReplyCode::Ok,
                payload: Bytes::from(encode("second").expect("payload").to_vec()),
                replayed: false,
            }),
        );
        assert!(reply, "reply");
        first.method.as_str().to_owned()
    });

    // Bounded: if the server thread failed an assertion it never welcomes, and the panic
    // must surface rather than the wait hang.
    let ready = tokio::time::timeout(
        Duration::from_secs(20),
        node.ready(zmesh::runtime::Target::server("orders")),
    )
    .await;
    if ready.is_err() && server.is_finished() {
        server.await.expect("server thread");
        unreachable!("the server thread returned without welcoming");
    }
    ready.expect("ready within 20 s").expect("ready");
    let args = encode_args(&()).expect("args");
    let mut first = node.start_call("orders", "first", args.clone(), CallOptions::default());
    // A command after a call sends the call's REQUEST first: once the snapshot is answered,
    // the REQUEST was handed to libzmq.
    node.snapshot().await.expect("snapshot");
    let sent = node
        .operations()
        .snapshot()
        .iter()
        .any(|o| &*o.method == "first" && o.status == OpStatus::Sent);
    assert!(sent, "the first REQUEST left");
    first.cancel();
    assert_eq!(
        first.await.expect_err("cancelled"),
        CallError::Cancelled { sent: true }
    );
    let second: String = node.call("orders", "second", &()).await.expect("second");
    assert_eq!(second, "second");
    assert_eq!(server.await.expect("server"), "first");
    node.shutdown().await.expect("shutdown");
}

/// MISSION X2 (and X1): from a version-1 callee (no window: a raw libzmq ROUTER that sends
/// 1 100 ITEMs at once), a stream whose application takes nothing holds at most
/// `STREAM_BUFFER` items; the next one ends it as `StreamOverrun` (may have run), and the
/// buffered items can still be taken, in order, before the end.
#[tokio::test]
async fn x2_a_stream_from_a_version_1_callee_nobody_reads_ends_as_overrun() {
    use zmesh::runtime::calls::{may_have_run, STREAM_BUFFER};
    let ctx = zmq::Context::new();
    let (server, ep) = raw_router(&ctx, 10_000);
    let mut c = NodeConfig::new("cli");
    c.servers = vec![ServerConfig::new("feed", ep.clone()).rid("srv")];
    let node = Node::start(c).await.expect("client");
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let serving = tokio::task::spawn_blocking(move || {
        let send = |route: &[u8], rec: Record| assert!(raw_send(&server, route, rec), "send");
        loop {
            let mut frames = server.recv_multipart(0).expect("a record within 10 s");
            let route = frames.remove(0);
            match Record::decode(&frames).expect("version-1 bytes only") {
                Record::Hello(_) => send(&route, raw_welcome("feed", &[])),
                Record::Probe { id } => send(&route, Record::Ack { id }),
                Record::Request(r) => {
                    send(
                        &route,
                        Record::Accept(wire::Accept {
                            call_id: r.call_id,
                            generation: std::num::NonZeroU64::MIN,
                            connection_id: 0,
                        }),
                    );
                    for seq in 0..1_100u64 {
                        let payload = encode(&seq).expect("item");
                        send(
                            &route,
                            Record::Item(wire::Item {
                                call_id: r.call_id,
                                seq,
                                payload,
                            }),
                        );
                    }
                    // The connection stays up until the test has seen the end.
                    let _ = done_rx.recv();
                    return;
                }
                _ => {}
            }
        }
    });
    node.ready(zmesh::runtime::Target::server("feed"))
        .await
        .expect("ready");
    let mut settled = node.operations().subscribe();
    let mut stream = node.call_stream("feed", "endless", &(), CallOptions::default());
    // Nothing is taken until the call settles: the first item to find the buffer full ends it.
    loop {
        let op = tokio::time::timeout(STEP, settled.recv())
            .await
            .expect("the call settles")
            .expect("registry");
        if op.status == OpStatus::UnknownOutcome {
            break;
        }
    }
    let mut got = 0u64;
    while let Some(item) = tokio::time::timeout(STEP, stream.next_item_as::<u64>())
        .await
        .expect("the stream ends")
    {
        assert_eq!(item.expect("decodes"), got, "in order");
        got += 1;
    }
    assert_eq!(
        got, STREAM_BUFFER as u64,
        "every buffered item is still there"
    );
    let err = stream.finish().await.expect_err("overrun");
    assert_eq!(
        err,
        CallError::StreamOverrun {
            buffered: STREAM_BUFFER
        }
    );
    assert!(may_have_run(&err));
    let snap = node.snapshot().await.expect("snapshot");
    assert_eq!(snap.pending_calls, 0);
    let _ = done_tx.send(());
    serving.await.expect("server thread");
    node.shutdown().await.expect("shutdown");
}

/// WIRE.md §4.15: toward a caller that negotiated `credit`, a stream's producer sends only as
/// far as the caller's buffer has room, and then waits: here the caller takes nothing until
/// the producer has sent a full window (`STREAM_BUFFER` items), sees that the producer's
/// next send waits, then takes all 5 000 items in order and the stream ends normally.
#[tokio::test]
async fn x2_a_slow_consumer_slows_its_producer_and_loses_nothing() {
    use zmesh::runtime::calls::STREAM_BUFFER;
    let b_bind = mesh_bind(true);
    let b = Node::start(mesh_server("b", "feed", &b_bind))
        .await
        .expect("b");
    let (sent_tx, mut sent) = mpsc::unbounded_channel::<u64>();
    b.serve_stream("feed", move |_req, sink| {
        let sent = sent_tx.clone();
        async move {
            for n in 0..5_000u64 {
                sink.send_item(&n).await?;
                let _ = sent.send(n + 1);
            }
            encode("done")
        }
    })
    .expect("serve");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, _events) = start_ready(a, "b").await;
    let mut stream = a.call_stream("feed", "count", &(), CallOptions::default());
    loop {
        if recv(&mut sent, "the producer's sends").await == STREAM_BUFFER as u64 {
            break;
        }
    }
    // The window is spent: the producer's next send waits for a grant (without the window it
    // would go on at once).
    let more = tokio::time::timeout(Duration::from_millis(300), sent.recv()).await;
    assert!(more.is_err(), "the producer sent past its window: {more:?}");
    let mut got = 0u64;
    while let Some(item) = tokio::time::timeout(STEP, stream.next_item_as::<u64>())
        .await
        .expect("the stream goes on")
    {
        assert_eq!(item.expect("decodes"), got, "in order");
        got += 1;
    }
    assert_eq!(got, 5_000);
    let end: String = stream.finish_as().await.expect("the stream ended normally");
    assert_eq!(end, "done");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}
