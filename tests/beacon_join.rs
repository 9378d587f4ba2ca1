//! WIRE.md §7.1, beacon on join (MISSION L4, T3): a zmesh publisher learns of every new
//! subscriber (its socket is an XPUB with `XPUB_VERBOSE`) and sends one beacon at once, so a
//! subscriber that joins late is ready in milliseconds instead of at the next tick of the 5 s
//! grid; the beacon is still exactly the two frames of L4, the grid is not moved by joins,
//! and subscription messages never reach the application.
//!
//! Every wait is bounded; the bounds are protocol properties ("before the next grid tick
//! could have come"), generous for a loaded machine.

mod common;

use std::time::{Duration, Instant};

use common::{free_tcp, Events};
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::proto::state::ConnState;
use zmesh::proto::wire::{BEACON_PAYLOAD, BEACON_TOPIC};
use zmesh::runtime::{Node, NodeEvent};

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(15);
/// A late subscriber must be ready within this of its socket's creation: half the beacon
/// interval, so the grid alone (up to 5 s) would not pass it.
const JOIN_READY: Duration = Duration::from_millis(2_500);

fn sub_ready(e: &NodeEvent) -> bool {
    matches!(e, NodeEvent::State(s) if s.link.starts_with("sub ") && s.state == ConnState::Ready)
}

fn subscriber(rid: &str, ep: &str) -> NodeConfig {
    let mut c = NodeConfig::new(rid);
    c.subscriptions = vec![Endpoint::new(ep.to_owned())];
    c
}

/// A raw SUB socket subscribed to everything, connected to `ep`.
fn raw_sub(ctx: &zmq::Context, ep: &str) -> zmq::Socket {
    let s = ctx.socket(zmq::SUB).expect("sub");
    s.set_linger(0).expect("linger");
    s.set_subscribe(b"").expect("subscribe");
    s.connect(ep).expect("connect");
    s
}

/// The next message on `s` within `limit`, with its arrival instant.
fn next_message(s: &zmq::Socket, limit: Duration) -> Option<(Instant, Vec<Vec<u8>>)> {
    let ms = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX).max(1);
    s.set_rcvtimeo(ms).expect("rcvtimeo");
    let frames = s.recv_multipart(0).ok()?;
    Some((Instant::now(), frames))
}

/// WIRE.md §7.1: subscribers that join a running publisher (after its bind beacon, long
/// before its next grid tick) are ready within [`JOIN_READY`] of their socket's creation:
/// a second zmesh subscriber (the same "" subscription as the first, which only
/// `XPUB_VERBOSE` passes on) and a raw SUB whose first message is exactly the beacon. The
/// subscription messages reach no application: nobody gets a delivery.
#[tokio::test]
async fn l4_late_subscribers_are_ready_at_once() {
    let ep = free_tcp();
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep.clone()));
    let publisher = Node::start(p).await.expect("publisher");
    let mut ep_events = Events::new(publisher.take_events().expect("events"));

    // The first subscriber: ready, whatever made it so (bind beacon, join or grid).
    let first = Node::start(subscriber("sub-1", &ep))
        .await
        .expect("first subscriber");
    let mut e1 = Events::new(first.take_events().expect("events"));
    e1.wait(STEP, sub_ready).await;

    // The second one joins now: the bind beacon is gone, and if the first became ready on
    // a grid tick, the next one is 5 s away.
    let created = Instant::now();
    let second = Node::start(subscriber("sub-2", &ep))
        .await
        .expect("second subscriber");
    let mut e2 = Events::new(second.take_events().expect("events"));
    e2.wait(STEP, sub_ready).await;
    let waited = created.elapsed();
    assert!(
        waited < JOIN_READY,
        "a late subscriber became ready {waited:?} after its creation: no beacon on join"
    );

    // A raw SUB: its first message is exactly the beacon of L4, at once.
    let ctx = zmq::Context::new();
    let connected = Instant::now();
    let raw = raw_sub(&ctx, &ep);
    let (at, frames) = next_message(&raw, STEP).expect("a beacon");
    assert_eq!(frames, vec![BEACON_TOPIC.to_vec(), BEACON_PAYLOAD.to_vec()]);
    let waited = at - connected;
    assert!(waited < JOIN_READY, "the raw SUB waited {waited:?}");

    // Subscriptions are not records: nothing was delivered anywhere.
    for (who, events) in [
        ("publisher", &mut ep_events),
        ("sub-1", &mut e1),
        ("sub-2", &mut e2),
    ] {
        for e in events.drain_now() {
            assert!(!matches!(e, NodeEvent::Delivery(_)), "{who}: {e:?}");
        }
    }
    let snap = publisher.snapshot().await.expect("snapshot");
    assert!(snap.links.is_empty(), "{}", snap.to_table());
    for n in [first, second, publisher] {
        n.shutdown().await.expect("shutdown");
    }
}

/// WIRE.md §7.1: joins do not move the 5 s grid, and without a join no beacon comes between
/// two ticks. A raw SUB sees the beacon of its join, then a grid tick; 2 s of nothing; then a
/// second SUB joins mid-interval: both get a beacon at once, and the next tick is still 5 s
/// after the previous one (not 5 s after the join). Every message is exactly the beacon.
/// (About 10 s: two grid intervals.)
#[test]
fn l4_joins_do_not_move_the_5s_grid() {
    let beacon = vec![BEACON_TOPIC.to_vec(), BEACON_PAYLOAD.to_vec()];
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let ep = free_tcp();
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep.clone()));
    let publisher = rt.block_on(Node::start(p)).expect("publisher");
    let ctx = zmq::Context::new();
    let raw = raw_sub(&ctx, &ep);
    let (joined, frames) = next_message(&raw, STEP).expect("the join beacon");
    assert_eq!(frames, beacon);
    let (tick, frames) = next_message(&raw, STEP).expect("a grid tick");
    assert_eq!(frames, beacon);
    let first_gap = tick - joined;
    assert!(
        first_gap <= Duration::from_millis(5_500),
        "first grid tick {first_gap:?} after the join"
    );
    // An observation window, not a wait: nothing between ticks without a join.
    let quiet = next_message(&raw, Duration::from_secs(2));
    assert!(quiet.is_none(), "a beacon between ticks: {quiet:?}");
    let connected = Instant::now();
    let other = raw_sub(&ctx, &ep);
    let (at, frames) = next_message(&other, STEP).expect("the second join's beacon");
    assert_eq!(frames, beacon);
    assert!(at - connected < JOIN_READY, "{:?}", at - connected);
    let (_, frames) = next_message(&raw, STEP).expect("the second join's beacon, seen by all");
    assert_eq!(frames, beacon);
    let (next_tick, frames) = next_message(&raw, STEP).expect("the next grid tick");
    assert_eq!(frames, beacon);
    let gap = next_tick - tick;
    assert!(
        gap >= Duration::from_millis(4_500) && gap <= Duration::from_millis(5_500),
        "grid ticks {gap:?} apart (a join in between)"
    );
    drop(other);
    rt.block_on(publisher.shutdown()).expect("shutdown");
}
