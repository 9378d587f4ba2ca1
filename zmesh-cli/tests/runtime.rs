//! Integration tests of the runtime over real libzmq sockets on 127.0.0.1 tcp and ipc.
//!
//! Tests that must run in real time (the 15 s half-open deadline, the flooding publisher) are
//! bounded: each fails if its condition is not met within a fixed limit.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{
    client_of, free_tcp, ipc, mesh_bind, mesh_server, peer, server_of, start_ready,
    wait_peer_ready, EventPred, Events, FreezeProxy,
};
use zmesh::config::{Endpoint, NodeConfig, PeerConfig, ServerConfig};
use zmesh::proto::state::{ConnState, FailureReason};
use zmesh::proto::wire::{BEACON_PAYLOAD, BEACON_TOPIC};
use zmesh::runtime::{Node, NodeEvent, PublishError, SendError, Source};

const STEP: Duration = Duration::from_secs(10);

fn is_state(ev: &NodeEvent, link_part: &str, state: ConnState) -> bool {
    matches!(ev, NodeEvent::State(s) if s.link.contains(link_part) && s.state == state)
}

/// A state change that takes `link_part` out of ready, with a recorded reason.
fn is_failure(ev: &NodeEvent, link_part: &str) -> bool {
    matches!(ev, NodeEvent::State(s) if s.link.contains(link_part) && s.reason.is_some()
        && s.state != ConnState::Ready)
}

/// A RouteMesh pair, both nodes binding (over tcp or ipc): `b` serves `channel`, `a` dials
/// `b`; returns once each sees the other ready on both lanes.
async fn route_mesh_pair(tcp: bool, channel: &str) -> (Node, Events, Node, Events) {
    let b_bind = mesh_bind(tcp);
    let b = mesh_server("b", channel, &b_bind);
    let mut a = NodeConfig::new("a");
    a.route_mesh = Some(mesh_bind(tcp));
    a.peers = vec![peer("b", &b_bind)];
    let b = Node::start(b).await.expect("start b");
    let (a, ea) = start_ready(a, "b").await;
    let mut eb = Events::new(b.take_events().expect("events"));
    wait_peer_ready(&b, &mut eb, "a").await;
    (a, ea, b, eb)
}

fn delivery_payload(ev: &NodeEvent) -> Option<&[u8]> {
    match ev {
        NodeEvent::Delivery(d) => Some(&d.payload),
        _ => None,
    }
}

/// MISSION T1, T5, L3: a RouteMesh pair becomes ready on both lanes and carries records both
/// ways, over tcp and over ipc; probes and ACKs never reach the application.
#[tokio::test]
async fn t1_route_mesh_ready_and_records_both_ways_tcp_and_ipc() {
    for tcp in [true, false] {
        let (a, mut ea, b, mut eb) = route_mesh_pair(tcp, "orders").await;

        a.send("b", "greetings", "to b").await.expect("a -> b");
        let ev = eb.wait(STEP, |e| delivery_payload(e).is_some()).await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        assert_eq!(&d.payload[..], b"to b");
        assert_eq!(&d.channel[..], b"greetings");
        assert_eq!(d.source, Source::Peer { rid: "a".into() });
        // Every record of a connection shares one source: a reference count, not a copy.
        a.send("b", "greetings", "again").await.expect("a -> b");
        let ev = eb.wait(STEP, |e| delivery_payload(e).is_some()).await;
        let (NodeEvent::Delivery(d2), Source::Peer { rid: first }) = (&ev, &d.source) else {
            panic!("not a peer delivery: {ev:?}")
        };
        assert_eq!(&d2.payload[..], b"again");
        assert!(
            matches!(&d2.source, Source::Peer { rid } if Arc::ptr_eq(rid, first)),
            "{:?}",
            d2.source
        );

        b.send("a", "greetings", "to a").await.expect("b -> a");
        let ev = ea.wait(STEP, |e| delivery_payload(e).is_some()).await;
        assert_eq!(delivery_payload(&ev), Some(&b"to a"[..]));

        // Exactly one current connection per lane per peer (T1).
        let snap = a.snapshot().await.expect("snapshot");
        for lane in ["application", "completion"] {
            let n = snap
                .peer("b")
                .filter(|l| l.role.starts_with(lane) && l.state == ConnState::Ready)
                .count();
            assert_eq!(n, 1, "{lane}: {}", snap.to_table());
        }
        a.shutdown().await.expect("shutdown a");
        b.shutdown().await.expect("shutdown b");
    }
}

/// MISSION T1: when both nodes dial each other, each lane still has exactly one current
/// connection per peer (the one dialled by the smaller RID).
#[tokio::test]
async fn t1_mutual_dial_keeps_one_connection_per_lane() {
    let (a_bind, b_bind) = (mesh_bind(true), mesh_bind(true));
    let mut a = mesh_server("a", "x", &a_bind);
    a.peers = vec![peer("b", &b_bind)];
    let mut b = mesh_server("b", "x", &b_bind);
    b.peers = vec![peer("a", &a_bind)];
    let a = Node::start(a).await.expect("a");
    let b = Node::start(b).await.expect("b");
    let mut ea = Events::new(a.take_events().expect("events"));
    let mut eb = Events::new(b.take_events().expect("events"));
    wait_peer_ready(&a, &mut ea, "b").await;
    wait_peer_ready(&b, &mut eb, "a").await;
    for (node, other) in [(&a, "b"), (&b, "a")] {
        let snap = node.snapshot().await.expect("snapshot");
        for lane in ["application", "completion"] {
            let ready: Vec<_> = snap
                .peer(other)
                .filter(|l| l.role.starts_with(lane) && l.state == ConnState::Ready)
                .collect();
            assert_eq!(ready.len(), 1, "{}", snap.to_table());
        }
    }
    a.send("b", "x", "one").await.expect("send");
    let ev = eb.wait(STEP, |e| delivery_payload(e).is_some()).await;
    assert_eq!(delivery_payload(&ev), Some(&b"one"[..]));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION T2: a ClientServer client picks a ready server of the channel; records flow both
/// ways on the one lane.
#[tokio::test]
async fn t2_client_server_ready_and_records_both_ways() {
    let ep = free_tcp();
    let mut s = NodeConfig::new("srv");
    s.memberships = server_of("orders");
    s.server = Some(Endpoint::new(ep.clone()));
    let mut c = NodeConfig::new("cli");
    c.servers = vec![ServerConfig::new("orders", ep).rid("srv")];
    let s = Node::start(s).await.expect("server");
    let c = Node::start(c).await.expect("client");
    let mut es = Events::new(s.take_events().expect("events"));
    let mut ec = Events::new(c.take_events().expect("events"));
    ec.wait(STEP, |e| is_state(e, "server orders", ConnState::Ready))
        .await;
    es.wait(STEP, |e| is_state(e, "inbound cli", ConnState::Ready))
        .await;

    c.send_to_server("orders", "order 1")
        .await
        .expect("client -> server");
    let ev = es.wait(STEP, |e| delivery_payload(e).is_some()).await;
    let NodeEvent::Delivery(d) = ev else {
        unreachable!()
    };
    assert_eq!(d.source, Source::Client { rid: "cli".into() });
    assert_eq!(&d.payload[..], b"order 1");

    s.send("cli", "orders", "receipt 1")
        .await
        .expect("server -> client");
    let ev = ec.wait(STEP, |e| delivery_payload(e).is_some()).await;
    assert_eq!(delivery_payload(&ev), Some(&b"receipt 1"[..]));

    // No ready server for another channel: refused at once, nothing queued.
    assert!(c.send_to_server("other", "x").await.is_err());
    c.shutdown().await.expect("client");
    s.shutdown().await.expect("server");
}

/// MISSION T3, L4, L5: a subscriber becomes ready on the first beacon (before any record),
/// then receives records; beacons are never delivered.
#[tokio::test]
async fn t3_fanout_ready_on_beacon_then_records_never_beacons() {
    let ep = ipc("pub");
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep.clone()));
    let p = Node::start(p).await.expect("pub");
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep)];
    let s = Node::start(s).await.expect("sub");
    let mut es = Events::new(s.take_events().expect("events"));
    // Nothing but beacons has been published: ready can only come from a beacon.
    es.wait(STEP, |e| is_state(e, "sub ", ConnState::Ready))
        .await;
    // A topic that merely shares a prefix with the beacon topic is an application topic.
    let prefix_topic = [&BEACON_TOPIC[..], b"x"].concat();
    p.publish(&prefix_topic, "p1").expect("publish");
    let ev = es.wait(STEP, |e| delivery_payload(e).is_some()).await;
    let NodeEvent::Delivery(d) = ev else {
        unreachable!()
    };
    assert_eq!(&d.channel[..], &prefix_topic[..]);
    assert_eq!(&d.payload[..], b"p1");
    // The exact reserved topic is an argument error.
    assert!(p.publish(&BEACON_TOPIC, "x").is_err());
    p.shutdown().await.expect("pub");
    s.shutdown().await.expect("sub");
}

/// MISSION T3, L4: `Node::publish_batch` delivers every record of a batch, in order, on its
/// topic, and refuses a whole batch for the arguments `publish` refuses (the reserved
/// topic, an empty topic, a node without a publisher endpoint).
#[tokio::test]
async fn t3_publish_batch_delivers_in_order_and_refuses_publish_arguments() {
    let ep = ipc("pubbatch");
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep.clone()));
    let p = Node::start(p).await.expect("pub");
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep.clone())];
    let s = Node::start(s).await.expect("sub");
    let mut es = Events::new(s.take_events().expect("events"));
    es.wait(STEP, |e| is_state(e, "sub ", ConnState::Ready))
        .await;

    let one = || vec![Bytes::from_static(b"x")];
    assert_eq!(
        p.publish_batch(&BEACON_TOPIC, one()),
        Err(PublishError::ReservedTopic)
    );
    assert_eq!(
        p.publish_batch(&BEACON_TOPIC, Vec::new()),
        Err(PublishError::ReservedTopic)
    );
    assert_eq!(p.publish_batch(b"", one()), Err(PublishError::InvalidTopic));
    assert_eq!(
        p.publish_batch(&[b'x'; 256], one()),
        Err(PublishError::InvalidTopic)
    );
    assert_eq!(s.publish_batch(b"t", one()), Err(PublishError::NoPublisher));

    // Two batches and a single publish in between: one order, nothing lost (far below HWM).
    let batch = |from: usize| -> Vec<Bytes> {
        (from..from + 300)
            .map(|i| Bytes::from(format!("r{i}")))
            .collect()
    };
    p.publish_batch(b"batch", batch(0)).expect("batch 1");
    p.publish(b"batch", "r300").expect("publish");
    p.publish_batch(b"batch", batch(301)).expect("batch 2");
    let mut got = Vec::new();
    while got.len() < 601 {
        let ev = es.wait(STEP, |e| delivery_payload(e).is_some()).await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        assert_eq!(&d.channel[..], b"batch");
        got.push(String::from_utf8(d.payload.to_vec()).expect("utf-8"));
    }
    let want: Vec<String> = (0..601).map(|i| format!("r{i}")).collect();
    assert_eq!(got, want);
    // A subscriber reuses the previous record's topic when it repeats: a change of topic (and
    // a payload with the previous topic's bytes) is still delivered as sent.
    p.publish_batch(b"other", vec![Bytes::from_static(b"batch")])
        .expect("other topic");
    p.publish(b"batch", "other").expect("back");
    for (topic, payload) in [(&b"other"[..], &b"batch"[..]), (b"batch", b"other")] {
        let ev = es.wait(STEP, |e| delivery_payload(e).is_some()).await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        assert_eq!((&d.channel[..], &d.payload[..]), (topic, payload));
    }
    // Every record was a record of its own: the subscriber counted 603 (and nothing else).
    let snap = s.snapshot().await.expect("snapshot");
    let link = snap
        .links
        .iter()
        .find(|l| l.endpoint == ep)
        .expect("subscription link");
    assert_eq!(link.records_received, 603, "{}", snap.to_table());
    p.shutdown().await.expect("pub");
    s.shutdown().await.expect("sub");
}

/// MISSION L5, F2, W3: a malformed reserved-topic record from one publisher (a raw libzmq PUB)
/// takes only that publisher out of ready, with a protocol error, delivering nothing; the
/// other publisher stays ready.
#[tokio::test]
async fn l5_malformed_reserved_topic_drops_only_that_publisher() {
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::PUB).expect("pub");
    let raw_ep = free_tcp();
    raw.bind(&raw_ep).expect("bind");
    let good_ep = ipc("good");
    let mut g = NodeConfig::new("good");
    g.publisher = Some(Endpoint::new(good_ep.clone()));
    let g = Node::start(g).await.expect("good pub");
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![
        Endpoint::new(raw_ep.clone()),
        Endpoint::new(good_ep.clone()),
    ];
    let s = Node::start(s).await.expect("sub");
    let mut es = Events::new(s.take_events().expect("events"));
    es.wait(STEP, |e| is_state(e, &good_ep, ConnState::Ready))
        .await;
    // Make the raw publisher's subscriber ready with an exact beacon (sent until it lands:
    // PUB drops records sent before the subscription arrives).
    let ready = async {
        loop {
            raw.send_multipart([&BEACON_TOPIC[..], &BEACON_PAYLOAD[..]], 0)
                .expect("send");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        _ = ready => {}
        _ = es.wait(STEP, |e| is_state(e, &raw_ep, ConnState::Ready)) => {}
    }
    raw.send_multipart([&BEACON_TOPIC[..], b"ZF\x01\x02"], 0)
        .expect("send bad");
    let ev = es
        .wait(STEP, |e| {
            assert!(
                delivery_payload(e).is_none(),
                "nothing may be delivered: {e:?}"
            );
            is_failure(e, &raw_ep)
        })
        .await;
    let NodeEvent::State(st) = ev else {
        unreachable!()
    };
    assert_eq!(st.reason, Some(FailureReason::ProtocolError));
    let snap = s.snapshot().await.expect("snapshot");
    let good = snap
        .links
        .iter()
        .find(|l| l.endpoint == good_ep)
        .expect("good link");
    assert_eq!(good.state, ConnState::Ready, "{}", snap.to_table());
    g.shutdown().await.expect("good");
    s.shutdown().await.expect("sub");
}

/// MISSION L6, F1, F2: killing a peer process takes only that peer out of ready at once, with
/// reason transport_error (not the 15 s deadline); the other peer stays ready.
#[tokio::test]
async fn l6_killed_peer_process_detected_at_once_only_that_peer() {
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-kill-")
        .tempdir()
        .expect("dir");
    let dir = tmp.path();
    let (b_bind, c_bind) = (mesh_bind(true), mesh_bind(true));
    let b = mesh_server("b", "x", &b_bind);
    let path = dir.join("b.toml");
    std::fs::write(&path, toml::to_string(&b).expect("toml")).expect("write");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["node", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn b");
    let c = mesh_server("c", "x", &c_bind);
    let c = Node::start(c).await.expect("c");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind), peer("c", &c_bind)];
    let (a, mut ea) = start_ready(a, "b").await;
    wait_peer_ready(&a, &mut ea, "c").await;

    let killed = Instant::now();
    child.kill().expect("kill -9 b");
    let _ = child.wait();
    let ev = ea.wait(STEP, |e| is_failure(e, "peer b")).await;
    let detected = killed.elapsed();
    let NodeEvent::State(st) = ev else {
        unreachable!()
    };
    assert_eq!(st.reason, Some(FailureReason::TransportError), "{st:?}");
    assert!(
        detected < Duration::from_secs(5),
        "detected after {detected:?}: not immediate"
    );
    let snap = a.snapshot().await.expect("snapshot");
    assert_eq!(
        snap.peer("c")
            .filter(|l| l.state == ConnState::Ready)
            .count(),
        2,
        "{}",
        snap.to_table()
    );
    assert_eq!(snap.host, "running");
    a.shutdown().await.expect("a");
    c.shutdown().await.expect("c");
}

/// MISSION L2, L6 (real time, bounded): a half-open connection (a proxy that stops forwarding
/// without closing) becomes not-ready with reason deadline_exceeded within 15 s of the last
/// valid ACK, and not before.
#[tokio::test]
async fn l2_half_open_connection_fails_on_deadline_real_time() {
    let b_bind = mesh_bind(true);
    let app_proxy = FreezeProxy::start(&b_bind.application);
    let b = mesh_server("b", "x", &b_bind);
    let b = Node::start(b).await.expect("b");
    let mut a = NodeConfig::new("a");
    a.peers = vec![PeerConfig::new(
        "b",
        app_proxy.endpoint.clone(),
        b_bind.completion.clone(),
    )];
    let (a, mut ea) = start_ready(a, "b").await;
    let frozen_at = Instant::now();
    app_proxy.freeze();
    let ev = ea
        .wait(Duration::from_secs(20), |e| {
            is_failure(e, "peer b application")
        })
        .await;
    let waited = frozen_at.elapsed();
    let NodeEvent::State(st) = ev else {
        unreachable!()
    };
    assert_eq!(st.reason, Some(FailureReason::DeadlineExceeded), "{st:?}");
    // The last valid ACK came at most one probe interval before the freeze.
    assert!(waited <= Duration::from_millis(15_500), "took {waited:?}");
    assert!(
        waited >= Duration::from_secs(10),
        "failed after {waited:?}: before any deadline"
    );
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION F4: a restarted peer (same RID, new lifecycle generation) is admitted as a new run.
#[tokio::test]
async fn f4_restarted_peer_is_admitted_as_new_run() {
    let b_bind = mesh_bind(true);
    let bc = mesh_server("b", "x", &b_bind);
    let b1 = Node::start(bc.clone()).await.expect("b1");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, mut ea) = start_ready(a, "b").await;
    let g1 = b1.generation();
    b1.shutdown().await.expect("b1 down");
    let ev = ea.wait(STEP, |e| is_failure(e, "peer b")).await;
    let NodeEvent::State(st) = ev else {
        unreachable!()
    };
    assert_eq!(st.reason, Some(FailureReason::OrderlyClose), "{st:?}");
    let b2 = Node::start(bc).await.expect("b2");
    assert_ne!(b2.generation(), g1);
    wait_peer_ready(&a, &mut ea, "b").await;
    let snap = a.snapshot().await.expect("snapshot");
    for l in snap.peer("b") {
        assert_eq!(
            l.peer_generation,
            Some(b2.generation()),
            "{}",
            snap.to_table()
        );
        assert!(l.ready_count >= 2);
    }
    a.send("b", "x", "new run")
        .await
        .expect("send to the new run");
    a.shutdown().await.expect("a");
    b2.shutdown().await.expect("b2");
}

/// MISSION T4: two Object Clients without Server membership end as not_required at admission
/// and are not dialled again.
#[tokio::test]
async fn t4_not_required_pair_never_ready_never_retried() {
    let d_bind = mesh_bind(true);
    let mut d = NodeConfig::new("d");
    d.memberships = client_of("orders");
    d.route_mesh = Some(d_bind.clone());
    let d = Node::start(d).await.expect("d");
    let mut a = NodeConfig::new("a");
    a.memberships = client_of("orders");
    a.peers = vec![peer("d", &d_bind)];
    let a = Node::start(a).await.expect("a");
    let mut ea = Events::new(a.take_events().expect("events"));
    // The two lanes are admitted independently, in either order.
    let not_required = |lane: &'static str| -> EventPred<'static> {
        Box::new(move |e| {
            assert!(!is_state(e, "peer d", ConnState::Ready), "{e:?}");
            is_state(e, lane, ConnState::NotRequired)
        })
    };
    let evs = ea
        .wait_each(
            STEP,
            vec![
                not_required("peer d application"),
                not_required("peer d completion"),
            ],
        )
        .await;
    for ev in evs {
        let NodeEvent::State(st) = ev else {
            unreachable!()
        };
        assert_eq!(st.reason, Some(FailureReason::NotRequired));
    }
    // Observation window of ten reconnect backoffs: no new dial may happen.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let snap = a.snapshot().await.expect("snapshot");
    for l in snap.peer("d") {
        assert_eq!(l.state, ConnState::NotRequired, "{}", snap.to_table());
        assert_eq!(l.ready_count, 0, "{}", snap.to_table());
        let f = l.last_failure.as_ref().expect("the reason is recorded");
        assert_eq!(f.reason, FailureReason::NotRequired);
        assert_eq!(l.connection_id, None);
    }
    assert!(ea
        .drain_now()
        .iter()
        .all(|e| !is_state(e, "peer d", ConnState::Connecting)));
    let dsnap = d.snapshot().await.expect("snapshot");
    assert!(
        dsnap.links.iter().all(|l| l.state != ConnState::Ready),
        "{}",
        dsnap.to_table()
    );
    a.shutdown().await.expect("a");
    d.shutdown().await.expect("d");
}

/// MISSION F6: shutdown closes every socket and stops the I/O thread: the peer sees an orderly
/// close at once and the bound port is free again.
#[tokio::test]
async fn f6_shutdown_leaves_nothing_running() {
    let b_bind = mesh_bind(true);
    let b = mesh_server("b", "x", &b_bind);
    let b = Node::start(b).await.expect("b");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, mut ea) = start_ready(a, "b").await;
    b.shutdown().await.expect("shutdown");
    assert!(!b.is_running());
    assert!(
        b.snapshot().await.is_err(),
        "a stopped node answers nothing"
    );
    let ev = ea.wait(STEP, |e| is_failure(e, "peer b")).await;
    let NodeEvent::State(st) = ev else {
        unreachable!()
    };
    assert_eq!(st.reason, Some(FailureReason::OrderlyClose));
    // Every socket of b is closed: its ports can be bound again.
    for ep in [&b_bind.application, &b_bind.completion] {
        std::net::TcpListener::bind(ep.trim_start_matches("tcp://")).expect("port released");
    }
    a.shutdown().await.expect("a");
}

/// MISSION R5, L3 (real time, bounded): a paused application queue (the application takes no
/// events) never changes readiness: probes and ACKs keep being processed across more than one
/// peer deadline, and the records that arrived meanwhile are delivered afterwards, in order.
#[tokio::test]
async fn r5_paused_application_queue_never_changes_readiness() {
    let b_bind = mesh_bind(true);
    let b = mesh_server("b", "x", &b_bind);
    let b = Node::start(b).await.expect("b");
    let mut a = NodeConfig::new("a");
    a.delivery_high_water = 8;
    a.peers = vec![peer("b", &b_bind)];
    let (a, mut ea) = start_ready(a, "b").await;
    // From here on a's application takes nothing: its queue fills to the high-water mark and
    // the rest waits in the link's backlog.
    for i in 0..100u32 {
        b.send("a", "x", i.to_be_bytes().to_vec())
            .await
            .expect("send");
    }
    // Observation window longer than the 15 s peer deadline.
    tokio::time::sleep(Duration::from_secs(16)).await;
    let snap = a.snapshot().await.expect("snapshot");
    for l in snap.peer("b") {
        assert_eq!(l.state, ConnState::Ready, "{}", snap.to_table());
        assert_eq!(
            l.ready_count,
            1,
            "left ready while paused: {}",
            snap.to_table()
        );
    }
    let mut got = Vec::new();
    while got.len() < 100 {
        if let NodeEvent::Delivery(d) = ea.wait(STEP, |e| delivery_payload(e).is_some()).await {
            got.push(u32::from_be_bytes(
                d.payload[..].try_into().expect("4 bytes"),
            ));
        }
    }
    assert_eq!(
        got,
        (0..100).collect::<Vec<u32>>(),
        "order within the link is kept"
    );
    // 16 s of probes and ACKs on both lanes delivered nothing else (MISSION L3).
    let extra: Vec<NodeEvent> = ea
        .drain_now()
        .into_iter()
        .filter(|e| matches!(e, NodeEvent::Delivery(_)))
        .collect();
    assert!(
        extra.is_empty(),
        "liveness records reached the application: {extra:#?}"
    );
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// MISSION L5: a subscriber whose publisher is not there yet keeps one socket and lets libzmq
/// retry the connect; it does not spin through new sockets, and it becomes ready when the
/// publisher appears.
#[tokio::test]
async fn l5_subscriber_waits_for_an_absent_publisher_without_spinning() {
    let ep = ipc("late-pub");
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep.clone())];
    let s = Node::start(s).await.expect("sub");
    let mut es = Events::new(s.take_events().expect("events"));
    es.wait(STEP, |e| is_state(e, "sub ", ConnState::Connecting))
        .await;
    // Observation window of ten reconnect backoffs with nothing to connect to.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let churn: Vec<NodeEvent> = es.drain_now();
    assert!(
        churn.is_empty(),
        "socket churn without a publisher: {churn:#?}"
    );
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep));
    let p = Node::start(p).await.expect("pub");
    es.wait(STEP, |e| is_state(e, "sub ", ConnState::Ready))
        .await;
    let snap = s.snapshot().await.expect("snapshot");
    assert_eq!(
        snap.links[0].connection_id,
        Some(1),
        "still the first socket: {}",
        snap.to_table()
    );
    p.shutdown().await.expect("pub");
    s.shutdown().await.expect("sub");
}

/// `Node::send_batch`: records arrive in order on the peer's Application lane; a batch to a
/// peer that is not ready is refused whole; `Node::try_send_batch` of more than the link can
/// hold stops at the first record the link's queue refuses (`WouldBlock`), and
/// exactly the records reported taken arrive, in order.
#[tokio::test]
async fn send_batch_in_order_and_stops_at_the_first_refused_record() {
    let b_bind = mesh_bind(true);
    let mut b = mesh_server("b", "orders", &b_bind);
    // While b's application takes nothing, its queue pauses at 1024 deliveries, then its
    // link's backlog fills and its socket stops being read, so the link fills up (R5).
    b.delivery_high_water = 1024;
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let b = Node::start(b).await.expect("start b");
    let a = Node::start(a).await.expect("start a");
    let mut ea = Events::new(a.take_events().expect("events"));
    let mut eb = Events::new(b.take_events().expect("events"));
    wait_peer_ready(&a, &mut ea, "b").await;

    let small: Vec<Bytes> = (0..100u32).map(|i| Bytes::from(i.to_string())).collect();
    a.send_batch("b", "orders", small.clone())
        .await
        .expect("a small batch is taken whole");
    for expected in &small {
        let ev = eb.wait(STEP, |e| delivery_payload(e).is_some()).await;
        assert_eq!(delivery_payload(&ev), Some(&expected[..]));
    }
    let refused = a
        .send_batch("nobody", "orders", small)
        .await
        .expect_err("no such peer");
    assert_eq!(refused.sent, 0);
    assert!(matches!(refused.error, SendError::NotReady(_)), "{refused}");

    // Far more than a's send queue, b's queue and backlog, both HWMs and the TCP buffers hold
    // together. The records are taken from b right away (a socket held for 15 s would also
    // hold back the probes' ACKs).
    const BIG: u64 = 60_000;
    let big: Vec<Bytes> = (0..BIG)
        .map(|i| {
            let mut p = vec![0u8; 1024];
            p[..8].copy_from_slice(&i.to_be_bytes());
            Bytes::from(p)
        })
        .collect();
    let stopped = a
        .try_send_batch("b", "orders", big)
        .expect_err("the link fills up");
    assert!(
        matches!(stopped.error, SendError::WouldBlock(_)),
        "{stopped}"
    );
    let sent = stopped.sent as u64;
    assert!(sent > 0 && sent < BIG, "sent {sent}");
    for i in 0..sent {
        let ev = eb.wait(STEP, |e| delivery_payload(e).is_some()).await;
        let p = delivery_payload(&ev).expect("a delivery");
        assert_eq!(p[..8], i.to_be_bytes(), "record {i} in order");
    }
    eb.watch(Duration::from_millis(500), |e| {
        assert!(
            delivery_payload(e).is_none(),
            "a record beyond the {sent} sent arrived"
        )
    })
    .await;
    a.shutdown().await.expect("shutdown a");
    b.shutdown().await.expect("shutdown b");
}

/// CPU time used so far by this process's threads named `name` (from /proc, Linux).
fn thread_cpu(name: &str) -> Duration {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let task = task.expect("task").path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let stat = std::fs::read_to_string(task.join("schedstat")).unwrap_or_default();
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

/// An acceptor whose inbound peer closed goes idle: its I/O thread waits for readiness
/// instead of polling without waiting. (The failed inbound link's reconnect time, which no
/// one acts on since inbound links are never dialled, used to be taken as the next timer, so
/// the loop spun at 100% CPU until the peer came back.)
#[tokio::test]
async fn acceptor_idles_after_its_inbound_peer_closed() {
    let b_bind = mesh_bind(true);
    // A RID of its own: the check below finds the I/O thread by name (zmesh-io-<rid>).
    let b = mesh_server("acc9", "x", &b_bind);
    let b = Node::start(b).await.expect("b");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("acc9", &b_bind)];
    let a = Node::start(a).await.expect("a");
    let mut ea = Events::new(a.take_events().expect("events"));
    let mut eb = Events::new(b.take_events().expect("events"));
    wait_peer_ready(&a, &mut ea, "acc9").await;
    a.shutdown().await.expect("a");
    let closed = |lane: &'static str| -> EventPred<'static> {
        Box::new(move |e| matches!(e, NodeEvent::State(s) if s.link == lane && s.reason.is_some()))
    };
    eb.wait_each(
        STEP,
        vec![
            closed("inbound a application"),
            closed("inbound a completion"),
        ],
    )
    .await;
    // Past the reconnect backoff and the disconnect sweeps (500 ms).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before = thread_cpu("zmesh-io-acc9");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = thread_cpu("zmesh-io-acc9") - before;
    assert!(
        used < Duration::from_millis(100),
        "the idle acceptor's I/O thread used {used:?} of CPU in 1 s"
    );
    b.shutdown().await.expect("b");
}

/// Sends `n` records `(round, seq)` to `peer` in batches, retrying the part a full pipe
/// refused; returns when every record was taken.
async fn send_round(node: Node, peer: &'static str, round: u64, n: u64) {
    let mut seq = 0;
    while seq < n {
        let batch: Vec<Bytes> = (seq..n.min(seq + 64))
            .map(|i| {
                let mut p = round.to_be_bytes().to_vec();
                p.extend_from_slice(&i.to_be_bytes());
                Bytes::from(p)
            })
            .collect();
        match node.send_batch(peer, "both-ways", batch).await {
            Ok(()) => seq = n.min(seq + 64),
            Err(e) if matches!(e.error, SendError::WouldBlock(_)) => {
                seq += e.sent as u64;
                // Flow control, not synchronisation: the pipe drains as the peer reads.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(e) => panic!("send to {peer} failed: {e:?}"),
        }
    }
}

/// Waits until records `(round, 0..n)` arrived in order, within `limit`.
async fn receive_round(events: &mut Events, round: u64, n: u64, limit: Duration) {
    let mut next = 0;
    while next < n {
        let ev = events.wait(limit, |e| delivery_payload(e).is_some()).await;
        let p = delivery_payload(&ev).unwrap_or_default();
        let (r, i) = p.split_at(8.min(p.len()));
        let r = u64::from_be_bytes(r.try_into().expect("round"));
        let i = u64::from_be_bytes(i.try_into().expect("seq"));
        assert_eq!((r, i), (round, next), "records of one link arrive in order");
        next += 1;
    }
}

/// MISSION R1 over the I/O thread's readiness (no lost `ZMQ_FD` edge): both nodes send
/// records to each other on the same sockets they read, so their I/O threads send on a socket
/// between reads of it (a send can consume the signal of a record that arrived meanwhile).
/// Every record must arrive, round after round (30 rounds, about a second in all), each round
/// within 3 s: a socket whose edge was lost would be read again only when something else
/// touched it (the next probe, 5 s later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_both_ways_on_shared_sockets_all_arrive_round_after_round() {
    const ROUNDS: u64 = 30;
    const PER_ROUND: u64 = 3_000;
    let (a, mut ea, b, mut eb) = route_mesh_pair(true, "both-ways").await;
    for round in 0..ROUNDS {
        // Odd rounds are tiny: the last records of a round then arrive at an idle loop.
        let n = if round % 2 == 0 { PER_ROUND } else { 3 };
        let to_b = tokio::spawn(send_round(a.clone(), "b", round, n));
        let to_a = tokio::spawn(send_round(b.clone(), "a", round, n));
        let limit = Duration::from_secs(3);
        tokio::join!(
            receive_round(&mut eb, round, n, limit),
            receive_round(&mut ea, round, n, limit)
        );
        to_b.await.expect("sender a");
        to_a.await.expect("sender b");
    }
    // Nothing left ready-less on the way.
    for (node, other) in [(&a, "b"), (&b, "a")] {
        let snap = node.snapshot().await.expect("snapshot");
        let ready = snap
            .peer(other)
            .filter(|l| l.state == ConnState::Ready)
            .count();
        assert_eq!(ready, 2, "{}", snap.to_table());
    }
    a.shutdown().await.expect("shutdown a");
    b.shutdown().await.expect("shutdown b");
}
