//! The data path: one-way records go through a per-link zmesh queue without a round
//! trip to the I/O thread, and publishing goes straight to the PUB socket. What must hold:
//! a send to a link that is not ready fails at once; order per link is kept under concurrent
//! senders; `try_send` refuses `WouldBlock` while the queue is full and `send` waits for room;
//! records still queued when a link stops are counted, never silently gone; publish order is
//! kept. (The count in a failure's event and metric is in `tests/metrics.rs`, which owns the
//! metrics recorder.) No test asserts a time.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use common::{dial_ready, mesh_bind, mesh_server, Events};
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::proto::state::{ConnState, FailureReason};
use zmesh::runtime::{Node, NodeEvent, SendError, SEND_QUEUE};

const STEP: Duration = Duration::from_secs(10);

struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

/// Polls `fut` exactly once: a future that must finish without waiting for anything.
fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(NoWake));
    let mut cx = Context::from_waker(&waker);
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// `(sender, seq)` as a payload, padded to `len` bytes.
fn tagged(sender: u32, seq: u64, len: usize) -> Bytes {
    let mut p = vec![0u8; len.max(12)];
    p[..4].copy_from_slice(&sender.to_be_bytes());
    p[4..12].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(p)
}

fn untag(p: &[u8]) -> (u32, u64) {
    let sender = u32::from_be_bytes(p[..4].try_into().expect("sender"));
    let seq = u64::from_be_bytes(p[4..12].try_into().expect("seq"));
    (sender, seq)
}

/// `b` serves `channel` and binds; `a` dials it. `b`'s application queue pauses at
/// `high_water` deliveries. Returns once `a` has `b` ready on both lanes.
async fn pair(high_water: usize) -> (Node, Events, Node, Events) {
    let b_bind = mesh_bind(true);
    let mut b = mesh_server("b", "data", &b_bind);
    b.delivery_high_water = high_water;
    let b = Node::start(b).await.expect("start b");
    let eb = Events::new(b.take_events().expect("events"));
    let (a, ea) = dial_ready("a", "b", &b_bind).await;
    (a, ea, b, eb)
}

/// Fills `a`'s link to `b` (see [`common::fill_link`]); records `(0, seq)`.
async fn fill(a: &Node) -> u64 {
    common::fill_link(a, "b", "data", |seq| tagged(0, seq, 1024)).await
}

/// Waits for `n` deliveries `(0, 0..n)` in order.
async fn expect_in_order(eb: &mut Events, n: u64) {
    for i in 0..n {
        let ev = eb.wait(STEP, |e| matches!(e, NodeEvent::Delivery(_))).await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        assert_eq!(untag(&d.payload), (0, i), "record {i} in order");
    }
}

/// The data path: `send`, `send_batch` and `try_send` to a peer with no ready link fail
/// at once with `NotReady`, nothing queued: one poll of the future finishes it, without the
/// I/O thread; so does a send after the peer's link failed.
#[tokio::test]
async fn c3_send_to_a_link_that_is_not_ready_fails_at_once() {
    let (a, mut ea, b, _eb) = pair(1024).await;
    let not_ready = Some(Err(SendError::NotReady("nobody".into())));
    assert_eq!(poll_once(a.send("nobody", "data", "x")), not_ready);
    assert_eq!(
        a.try_send("nobody", "data", "x"),
        Err(SendError::NotReady("nobody".into()))
    );
    let batch = poll_once(a.send_batch("nobody", "data", vec![Bytes::from("x")]))
        .expect("finished at once")
        .expect_err("refused");
    assert_eq!(
        (batch.sent, batch.error),
        (0, SendError::NotReady("nobody".into()))
    );
    // A ready peer is taken at once too (the queue has room).
    assert_eq!(poll_once(a.send("b", "data", "x")), Some(Ok(())));

    b.shutdown().await.expect("b down");
    ea.wait(STEP, |e| {
        matches!(e, NodeEvent::State(s) if s.link == "peer b application" && s.reason.is_some())
    })
    .await;
    // The failure was published before it was reported.
    assert_eq!(
        poll_once(a.send("b", "data", "x")),
        Some(Err(SendError::NotReady("b".into())))
    );
    a.shutdown().await.expect("a down");
    assert_eq!(
        a.try_send("b", "data", "x"),
        Err(SendError::Shutdown),
        "a stopped node says so"
    );
}

/// The data path: order per link under concurrent senders. Eight tasks send to the same
/// peer at once, with `send`, `send_batch` and `try_send` (retried after `WouldBlock`), far
/// more than the queue holds; every record arrives, each sender's in its own order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t1_order_per_link_kept_under_concurrent_senders() {
    const SENDERS: u32 = 8;
    const EACH: u64 = 3_000;
    let (a, _ea, b, mut eb) = pair(1024).await;
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..SENDERS {
        let a = a.clone();
        tasks.spawn(async move {
            let mut seq = 0;
            while seq < EACH {
                match s % 3 {
                    0 => {
                        a.send("b", "data", tagged(s, seq, 64)).await.expect("send");
                        seq += 1;
                    }
                    1 => {
                        let n = 50.min(EACH - seq);
                        let batch = (seq..seq + n).map(|i| tagged(s, i, 64)).collect();
                        a.send_batch("b", "data", batch).await.expect("send_batch");
                        seq += n;
                    }
                    _ => match a.try_send("b", "data", tagged(s, seq, 64)) {
                        Ok(()) => seq += 1,
                        Err(SendError::WouldBlock(_)) => tokio::task::yield_now().await,
                        Err(e) => panic!("try_send: {e}"),
                    },
                }
            }
        });
    }
    let mut next = vec![0u64; SENDERS as usize];
    let mut got = 0;
    while got < u64::from(SENDERS) * EACH {
        let ev = eb.wait(STEP, |e| matches!(e, NodeEvent::Delivery(_))).await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        let (s, seq) = untag(&d.payload);
        assert_eq!(
            seq, next[s as usize],
            "sender {s}: record {seq} arrived where {} was due",
            next[s as usize]
        );
        next[s as usize] += 1;
        got += 1;
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("sender task");
    }
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// The data path: towards a peer that reads nothing (its application queue paused, its
/// link's backlog full, libzmq's pipe full), `try_send` refuses `WouldBlock` once the link's
/// queue is full, and `send` waits for room instead; when the peer reads again, the waiting
/// send completes and every record taken arrives, in order.
#[tokio::test]
async fn r5_try_send_would_block_when_full_and_send_waits_for_room() {
    // b pauses at 1 024 deliveries: reading them back after the fill takes well under the
    // 15 s peer deadline (a's ACKs of b's probes wait in the full pipe behind its records).
    let (a, _ea, b, mut eb) = pair(1024).await;
    let taken = fill(&a).await;
    assert!(
        taken >= SEND_QUEUE as u64,
        "only {taken} records taken before the queue stayed full"
    );
    let waiting = tokio::spawn({
        let a = a.clone();
        async move { a.send("b", "data", tagged(0, taken, 1024)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "send finished while the queue was full and nothing was read"
    );
    // b reads again: the backlog, the pipe and a's queue drain, the waiting send is taken.
    expect_in_order(&mut eb, taken + 1).await;
    assert_eq!(waiting.await.expect("send task"), Ok(()));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// Honest at failure: records still in a link's queue when the node stops
/// are counted and named: the link's state change says how many were not sent.
#[tokio::test]
async fn f6_c3_shutdown_with_queued_records_counts_them() {
    let (a, mut ea, b, _eb) = pair(16).await;
    fill(&a).await;
    a.shutdown().await.expect("a");
    let ev = ea
        .wait(STEP, |e| {
            matches!(e, NodeEvent::State(s) if s.link == "peer b application"
                && s.reason == Some(FailureReason::HostStopped))
        })
        .await;
    let NodeEvent::State(s) = ev else {
        unreachable!()
    };
    assert_ne!(s.state, ConnState::Ready);
    let unsent: usize = s
        .detail
        .strip_prefix("node stopped; ")
        .and_then(|d| d.strip_suffix(" queued records not sent"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {s:?}"));
    // The pipe was full: nothing of the queue left at the stop.
    assert!(
        (1..=SEND_QUEUE).contains(&unsent),
        "{unsent} records counted: {s:?}"
    );
    b.shutdown().await.expect("b");
}

/// Honest at failure: records still in a link's queue when the *link*
/// fails (its peer stops while the pipe is full) are counted and named in that link's failure:
/// the state change's detail says how many were not sent; the node itself goes on.
#[tokio::test]
async fn f1_c3_link_failing_with_queued_records_reports_the_count() {
    let (a, mut ea, b, _eb) = pair(16).await;
    fill(&a).await;
    b.shutdown().await.expect("b");
    let ev = ea
        .wait(STEP, |e| {
            matches!(e, NodeEvent::State(s) if s.link == "peer b application"
                && s.state != ConnState::Ready
                && s.detail.ends_with(" queued records not sent"))
        })
        .await;
    let NodeEvent::State(s) = ev else {
        unreachable!()
    };
    assert_ne!(s.reason, Some(FailureReason::HostStopped), "{s:?}");
    let unsent: usize = s
        .detail
        .rsplit("; ")
        .next()
        .and_then(|d| d.strip_suffix(" queued records not sent"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {s:?}"));
    assert!(
        (1..=SEND_QUEUE).contains(&unsent),
        "{unsent} records counted: {s:?}"
    );
    a.shutdown().await.expect("a");
}

/// The data path: `publish` and `publish_batch` go straight to the PUB socket, and the
/// records of one task keep their order, mixed as they are.
#[tokio::test]
async fn t3_publish_order_kept() {
    const N: u64 = 3_000;
    let ep = common::free_tcp();
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep.clone()));
    let publisher = Node::start(p).await.expect("pub");
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep)];
    let subscriber = Node::start(s).await.expect("sub");
    let mut es = Events::new(subscriber.take_events().expect("events"));
    // Ready on the first record: publish warm-up records until one arrives.
    let warm = tokio::time::Instant::now() + STEP;
    loop {
        publisher.publish(b"warm", "w").expect("publish");
        let got = tokio::time::timeout(Duration::from_millis(20), async {
            es.wait(STEP, |e| matches!(e, NodeEvent::Delivery(_))).await
        })
        .await;
        if got.is_ok() {
            break;
        }
        assert!(tokio::time::Instant::now() < warm, "never subscribed");
    }
    let mut seq = 0;
    while seq < N {
        if seq % 100 < 50 {
            publisher
                .publish(b"seq", tagged(0, seq, 64))
                .expect("publish");
            seq += 1;
        } else {
            let batch = (seq..seq + 10).map(|i| tagged(0, i, 64)).collect();
            publisher.publish_batch(b"seq", batch).expect("batch");
            seq += 10;
        }
    }
    let mut next = 0;
    while next < N {
        let ev = es
            .wait(
                STEP,
                |e| matches!(e, NodeEvent::Delivery(d) if &d.channel[..] == b"seq"),
            )
            .await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        assert_eq!(
            untag(&d.payload),
            (0, next),
            "fanout record {next} in order"
        );
        next += 1;
    }
    publisher.shutdown().await.expect("pub");
    assert_eq!(
        publisher.publish(b"seq", "late"),
        Err(zmesh::runtime::PublishError::Shutdown)
    );
    subscriber.shutdown().await.expect("sub");
}
