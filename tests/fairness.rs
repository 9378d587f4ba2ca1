//! Fair receive loop under a flood, in real time (MISSION R4): one flooding peer never delays
//! another peer's probes, ACKs or beacons enough to flip it not-ready.
//!
//! Each flood test watches for [`WINDOW`] of real time, longer than the 15 s deadline, so a
//! starved peer would be declared silent or past its deadline inside the window. Both are
//! bounded (about 20 s each) and may run in parallel. A third test checks that the loop's
//! per-turn cap on commands delays nothing until a timer.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{free_tcp, mesh_server, EventPred, Events};
use zmesh::config::{Endpoint, NodeConfig, PeerConfig, RouteMeshBind};
use zmesh::proto::state::ConnState;
use zmesh::runtime::{Node, NodeEvent, SendError, Source};

/// The observation window: more than the 15 s peer deadline.
const WINDOW: Duration = Duration::from_secs(17);
/// Upper bound of every wait for readiness.
const STEP: Duration = Duration::from_secs(10);
/// Application payload size of the flood records.
const FLOOD_PAYLOAD: usize = 1024;
/// Fewest records the flood must have delivered during the window.
const MIN_DELIVERED: u64 = 5_000;
/// The flooding PUB sends bursts of this many records, then yields its core for a moment:
/// far more than a subscriber can take (its queue stays full and libzmq drops the excess at
/// the high-water mark) without spinning a core on drops.
const FLOOD_BURST: usize = 2_000;
const FLOOD_PAUSE: Duration = Duration::from_millis(1);
/// Concurrent `send` loops of the flooding RouteMesh peer.
const FLOOD_SENDERS: usize = 32;

fn is_state(ev: &NodeEvent, link_part: &str, state: ConnState) -> bool {
    matches!(ev, NodeEvent::State(s) if s.link.contains(link_part) && s.state == state)
}

/// A valid PUBLISH record (WIRE.md §7.2), built by hand: topic, envelope, payload.
fn publish_frames(topic: &[u8], generation: u64, seq: u64, payload: &[u8]) -> [Vec<u8>; 3] {
    let mut envelope = vec![0x5A, 0x4D, 0x01, 0x0D];
    envelope.extend_from_slice(&generation.to_be_bytes());
    envelope.extend_from_slice(&seq.to_be_bytes());
    [topic.to_vec(), envelope, payload.to_vec()]
}

/// MISSION R4, L5, T3 (real time, bounded): a raw libzmq PUB floods 1 KiB records at full
/// speed while a zmesh publisher sends only its beacons; one zmesh subscriber takes both.
/// For 17 s the quiet publisher's link never leaves ready while the flood is being delivered.
#[tokio::test]
async fn r4_fanout_flood_never_flips_the_quiet_publisher() {
    let flood_ep = free_tcp();
    let quiet_ep = free_tcp();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let ctx = zmq::Context::new();
    let flood = ctx.socket(zmq::PUB).expect("flood pub");
    flood.set_linger(0).expect("linger");
    flood.bind(&flood_ep).expect("bind flood");
    let flooder = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let payload = vec![0xA5; FLOOD_PAYLOAD];
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..FLOOD_BURST {
                    seq += 1;
                    let frames = publish_frames(b"flood", 0x00F1_00D0, seq, &payload);
                    // PUB never blocks: at the high-water mark libzmq drops the record.
                    flood.send_multipart(frames, 0).expect("flood send");
                }
                sent.store(seq, Ordering::Relaxed);
                std::thread::sleep(FLOOD_PAUSE); // pacing of the generator, not a sync
            }
            // Handed back, so that it stays open (and its link ready) until the snapshot.
            flood
        })
    };

    let mut q = NodeConfig::new("quiet");
    q.publisher = Some(Endpoint::new(quiet_ep.clone()));
    let quiet = Node::start(q).await.expect("quiet publisher");
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![
        Endpoint::new(flood_ep.clone()),
        Endpoint::new(quiet_ep.clone()),
    ];
    let sub = Node::start(s).await.expect("subscriber");
    let mut es = Events::new(sub.take_events().expect("events"));
    let quiet_link = format!("sub {quiet_ep}");
    let flood_link = format!("sub {flood_ep}");
    // The quiet link is ready on its first beacon (the publisher sends one when the
    // subscriber joins, and every 5 s).
    let (mut quiet_ready, mut flood_ready) = (false, false);
    while !(quiet_ready && flood_ready) {
        let ev = es
            .wait(STEP, |e| {
                is_state(e, &quiet_link, ConnState::Ready)
                    || is_state(e, &flood_link, ConnState::Ready)
            })
            .await;
        quiet_ready |= is_state(&ev, &quiet_link, ConnState::Ready);
        flood_ready |= is_state(&ev, &flood_link, ConnState::Ready);
    }

    let started = tokio::time::Instant::now();
    let (mut delivered, mut delivered_late) = (0u64, 0u64);
    es.watch(WINDOW, |e| match e {
        NodeEvent::Delivery(d) => {
            assert!(
                matches!(&d.source, Source::Publisher { endpoint } if **endpoint == *flood_ep),
                "{:?}",
                d.source
            );
            assert_eq!(d.payload.len(), FLOOD_PAYLOAD);
            delivered += 1;
            // Still flowing after the 15 s deadline of the quiet link has passed.
            if started.elapsed() > Duration::from_secs(15) {
                delivered_late += 1;
            }
        }
        NodeEvent::State(st) => panic!("a link changed state under the flood: {st:?}"),
        _ => {}
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    // The flooding socket stays open until the snapshot below: closing it is a disconnect.
    let flood = flooder.join().expect("flooder");
    let sent = sent.load(Ordering::Relaxed);
    println!("flood: {sent} sent, {delivered} delivered in {WINDOW:?}");
    assert!(
        delivered > MIN_DELIVERED,
        "only {delivered} flood records delivered"
    );
    assert!(delivered_late > 0, "the flood stopped being delivered");

    let snap = sub.snapshot().await.expect("snapshot");
    for ep in [&quiet_ep, &flood_ep] {
        let l = snap.links.iter().find(|l| &l.endpoint == ep).expect("link");
        assert_eq!(l.state, ConnState::Ready, "{}", snap.to_table());
        assert_eq!(
            (l.ready_count, l.failure_count),
            (1, 0),
            "{}",
            snap.to_table()
        );
    }
    let q = snap
        .links
        .iter()
        .find(|l| l.endpoint == quiet_ep)
        .expect("quiet link");
    // Its beacons kept arriving during the flood (one every 5 s).
    assert!(
        q.last_receive_age_ms.is_some_and(|ms| ms <= 6_000),
        "{}",
        snap.to_table()
    );
    drop(flood);
    sub.shutdown().await.expect("sub");
    quiet.shutdown().await.expect("quiet");
}

fn dialler(rid: &str, a: &RouteMeshBind) -> NodeConfig {
    let mut c = NodeConfig::new(rid);
    c.peers = vec![PeerConfig::new(
        "a",
        a.application.clone(),
        a.completion.clone(),
    )];
    c
}

/// Waits until both lanes of `node`'s link to `rid` are ready (dialled or inbound).
async fn wait_both_lanes(events: &mut Events, link_part: &str) {
    let ready = |lane: &str| -> EventPred<'static> {
        let part = format!("{link_part} {lane}");
        Box::new(move |e| is_state(e, &part, ConnState::Ready))
    };
    events
        .wait_each(STEP, vec![ready("application"), ready("completion")])
        .await;
}

/// MISSION R4, R3, L2 (real time, bounded): peer X floods node A with one-way records as fast
/// as `send` takes them while peer Y only does liveness; for 17 s A takes neither Y nor X out
/// of ready, and neither X nor Y takes A out of ready.
#[tokio::test]
async fn r4_route_mesh_flooding_peer_never_flips_the_quiet_peer() {
    let a_bind = RouteMeshBind::new(free_tcp(), free_tcp());
    let ac = mesh_server("a", "work", &a_bind);
    let a = Node::start(ac).await.expect("a");
    let x = Node::start(dialler("x", &a_bind)).await.expect("x");
    let y = Node::start(dialler("y", &a_bind)).await.expect("y");
    let mut ea = Events::new(a.take_events().expect("events"));
    let mut ex = Events::new(x.take_events().expect("events"));
    let mut ey = Events::new(y.take_events().expect("events"));
    wait_both_lanes(&mut ex, "peer a").await;
    wait_both_lanes(&mut ey, "peer a").await;
    let snap = a.snapshot().await.expect("snapshot");
    let inbound_ready = |rid: &str| {
        snap.peer(rid)
            .filter(|l| l.state == ConnState::Ready)
            .count()
    };
    assert_eq!(
        (inbound_ready("x"), inbound_ready("y")),
        (2, 2),
        "{}",
        snap.to_table()
    );
    // The ready events of a's inbound lanes may still be queued: they are not failures.
    let not_ready_change = |who: &str, e: &NodeEvent| {
        if let NodeEvent::State(st) = e {
            assert_eq!(
                st.state,
                ConnState::Ready,
                "{who}: a link left ready under the flood: {st:?}"
            );
        }
    };

    let deadline = tokio::time::Instant::now() + WINDOW;
    let payload = Bytes::from(vec![0x5Au8; FLOOD_PAYLOAD]);
    // Several sends in flight at once: `send` is a round trip to x's I/O thread, and one at a
    // time would leave a's receive queue mostly empty.
    let mut flooders = tokio::task::JoinSet::new();
    for _ in 0..FLOOD_SENDERS {
        let (x, payload) = (x.clone(), payload.clone());
        flooders.spawn(async move {
            let (mut taken, mut blocked) = (0u64, 0u64);
            while tokio::time::Instant::now() < deadline {
                match x.send("a", "flood", payload.clone()).await {
                    Ok(()) => taken += 1,
                    Err(SendError::WouldBlock(_)) => {
                        blocked += 1;
                        tokio::task::yield_now().await;
                    }
                    Err(e) => panic!("x cannot send to a: {e}"),
                }
            }
            (taken, blocked)
        });
    }
    let flood = async {
        let (mut taken, mut blocked) = (0u64, 0u64);
        while let Some(r) = flooders.join_next().await {
            let (t, b) = r.expect("flooder");
            taken += t;
            blocked += b;
        }
        (taken, blocked)
    };
    let mut delivered = 0u64;
    let watch_a = ea.watch(WINDOW, |e| match e {
        NodeEvent::Delivery(d) => {
            assert_eq!(d.source, Source::Peer { rid: "x".into() });
            delivered += 1;
        }
        st => not_ready_change("a", st),
    });
    let watch_x = ex.watch(WINDOW, |e| not_ready_change("x", e));
    let watch_y = ey.watch(WINDOW, |e| not_ready_change("y", e));
    let ((taken, blocked), (), (), ()) = tokio::join!(flood, watch_a, watch_x, watch_y);
    println!("flood: {taken} records taken by send, {blocked} WouldBlock, {delivered} delivered");
    assert!(
        delivered > MIN_DELIVERED,
        "only {delivered} flood records delivered"
    );

    let snap = a.snapshot().await.expect("snapshot");
    for rid in ["x", "y"] {
        let lanes: Vec<_> = snap.peer(rid).collect();
        assert_eq!(lanes.len(), 2, "{}", snap.to_table());
        for l in lanes {
            assert_eq!(l.state, ConnState::Ready, "{}", snap.to_table());
            assert_eq!(
                (l.ready_count, l.failure_count),
                (1, 0),
                "{}",
                snap.to_table()
            );
        }
    }
    for (node, name) in [(&x, "x"), (&y, "y")] {
        let snap = node.snapshot().await.expect("snapshot");
        for l in snap.peer("a") {
            assert_eq!(l.state, ConnState::Ready, "{name}: {}", snap.to_table());
            assert_eq!(l.failure_count, 0, "{name}: {}", snap.to_table());
        }
    }
    for n in [x, y, a] {
        n.shutdown().await.expect("shutdown");
    }
}

/// MISSION R1, R2, T3 (regression): the I/O loop takes at most 1024 commands per turn, so that
/// commands cannot starve the receive loop; the rest of a burst is taken on the next turns at
/// once, not after the next timer (the publisher's next beacon, 5 s away here).
#[tokio::test]
async fn r2_command_burst_beyond_one_turn_is_not_held_until_a_timer() {
    const BURST: u32 = 5_000;
    let ep = common::ipc("burst");
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep.clone()));
    let publisher = Node::start(p).await.expect("publisher");
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep)];
    let sub = Node::start(s).await.expect("subscriber");
    let mut es = Events::new(sub.take_events().expect("events"));
    // Ready on a beacon: the next one is 5 s away.
    es.wait(STEP, |e| is_state(e, "sub ", ConnState::Ready))
        .await;
    for i in 0..BURST {
        publisher
            .publish(b"burst", i.to_be_bytes().to_vec())
            .expect("publish");
    }
    // Far less than the 5 s to the next beacon, far more than the burst needs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    for i in 0..BURST {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let ev = es.wait(left, |e| matches!(e, NodeEvent::Delivery(_))).await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        assert_eq!(&d.payload[..], &i.to_be_bytes()[..], "in order, none lost");
    }
    publisher.shutdown().await.expect("publisher");
    sub.shutdown().await.expect("subscriber");
}

/// MISSION R2, R4, X4 (real time, bounded): a raw libzmq client that negotiated `pack` floods
/// a zmesh server with PACKs of 64 records of 1 KiB as fast as libzmq takes them, while a
/// zmesh client of the same server (the same bound ROUTER) only does liveness. The server
/// counts each record of a PACK toward the flooder's caps, so for 17 s the quiet client's
/// link never leaves ready on either side while the flood is being delivered.
#[tokio::test]
async fn r2_r4_x4_flood_of_packs_never_flips_the_quiet_client() {
    use zmesh::config::ServerConfig;
    use zmesh::proto::wire::{Capabilities, Message, Name, Pack, Record};
    let ep = free_tcp();
    let mut sc = NodeConfig::new("srv");
    sc.memberships = common::server_of("orders");
    sc.server = Some(Endpoint::new(ep.clone()));
    let srv = Node::start(sc).await.expect("server");
    let mut es = Events::new(srv.take_events().expect("events"));
    let mut qc = NodeConfig::new("quiet");
    qc.servers = vec![ServerConfig::new("orders", ep.clone()).rid("srv")];
    let quiet = Node::start(qc).await.expect("quiet");
    let mut eq = Events::new(quiet.take_events().expect("events"));
    eq.wait(STEP, |e| is_state(e, "orders", ConnState::Ready))
        .await;

    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let flooder = {
        let (stop, ep) = (stop.clone(), ep.clone());
        std::thread::spawn(move || {
            let ctx = zmq::Context::new();
            let d = common::raw_client(&ctx, &ep, "flood", "orders", &["pack"]);
            let (_, Record::Welcome(_)) = common::raw_recv(&d, Capabilities::PACK) else {
                panic!("no WELCOME")
            };
            ready_tx.send(()).expect("ready");
            let payload = vec![0xA5; FLOOD_PAYLOAD];
            let (mut env, mut body) = (Vec::new(), Vec::new());
            let menv = Message::encode_envelope(&Name::new("orders").expect("channel"));
            Pack::write_frames(
                &menv,
                std::iter::repeat_n(payload.as_slice(), Pack::MAX),
                &mut env,
                &mut body,
            );
            let mut packs = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match d.send_multipart([&env, &body], zmq::DONTWAIT) {
                    Ok(()) => packs += 1,
                    Err(zmq::Error::EAGAIN) => std::thread::yield_now(),
                    Err(e) => panic!("flood send: {e}"),
                }
                // The server's PROBEs are answered, so the flooder stays ready too.
                while let Ok(frames) = d.recv_multipart(zmq::DONTWAIT) {
                    if let Ok(Record::Probe { id }) =
                        Record::decode_in(&frames, Capabilities::PACK, |f| {
                            Bytes::copy_from_slice(f)
                        })
                    {
                        d.send_multipart(Record::Ack { id }.encode().iter(), 0)
                            .expect("ack");
                    }
                }
            }
            (packs, d)
        })
    };
    tokio::task::spawn_blocking(move || ready_rx.recv())
        .await
        .expect("join")
        .expect("flooder ready");

    let not_ready_change = |who: &str, e: &NodeEvent| {
        if let NodeEvent::State(st) = e {
            assert_eq!(
                st.state,
                ConnState::Ready,
                "{who}: a link left ready under the flood: {st:?}"
            );
        }
    };
    let mut delivered = 0u64;
    let watch_srv = es.watch(WINDOW, |e| match e {
        NodeEvent::Delivery(d) => {
            assert_eq!(
                d.source,
                Source::Client {
                    rid: "flood".into()
                }
            );
            delivered += 1;
        }
        st => not_ready_change("srv", st),
    });
    let watch_quiet = eq.watch(WINDOW, |e| not_ready_change("quiet", e));
    tokio::join!(watch_srv, watch_quiet);
    stop.store(true, Ordering::Relaxed);
    let (packs, d) = flooder.join().expect("flooder");
    println!(
        "flood: {packs} PACKs of {} sent, {delivered} records delivered",
        Pack::MAX
    );
    assert!(
        delivered > MIN_DELIVERED,
        "only {delivered} flood records delivered"
    );
    let snap = srv.snapshot().await.expect("snapshot");
    let quiet_lanes: Vec<_> = snap
        .links
        .iter()
        .filter(|l| l.id.to_string().contains("quiet"))
        .collect();
    assert_eq!(quiet_lanes.len(), 1, "{}", snap.to_table());
    for l in quiet_lanes {
        assert_eq!(l.state, ConnState::Ready, "{}", snap.to_table());
        assert_eq!(
            (l.ready_count, l.failure_count),
            (1, 0),
            "{}",
            snap.to_table()
        );
    }
    let snap = quiet.snapshot().await.expect("snapshot");
    for l in &snap.links {
        assert_eq!(l.state, ConnState::Ready, "{}", snap.to_table());
        assert_eq!(l.failure_count, 0, "{}", snap.to_table());
    }
    drop(d);
    quiet.shutdown().await.expect("quiet");
    srv.shutdown().await.expect("srv");
}
