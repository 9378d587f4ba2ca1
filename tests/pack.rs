//! Capability `pack` (WIRE.md §4.18, §8.1) in real sockets, against raw libzmq clients
//! (MISSION X3, X4): a zmesh server packs the one-way records it sends only to a client that
//! offered `pack`, a client that did not gets exactly the version-1 MESSAGE bytes, and the
//! records of a PACK a client sends are delivered one by one, in order, as MESSAGEs would
//! be; a malformed PACK, or a PACK where `pack` is not in effect, fails that connection only.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::Events;
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::proto::state::FailureReason;
use zmesh::proto::wire::{self, Capabilities, Message, Name, Pack, Record};
use zmesh::runtime::{Node, NodeEvent, Source};

/// Upper bound of every wait.
const STEP: Duration = Duration::from_secs(10);

/// A zmesh server of channel `orders` on a fresh endpoint, and its events.
async fn server() -> (Node, Events, String) {
    let ep = common::free_tcp();
    let mut c = NodeConfig::new("srv");
    c.memberships = common::server_of("orders");
    c.server = Some(Endpoint::new(ep.clone()));
    let srv = Node::start(c).await.expect("server");
    let events = Events::new(srv.take_events().expect("events"));
    (srv, events, ep)
}

/// The record of a raw client on channel `orders`.
fn message(payload: &[u8]) -> Record {
    Record::Message(Message {
        channel: Name::new("orders").expect("channel"),
        payload: Bytes::copy_from_slice(payload),
    })
}

/// Waits for the server to deliver `payload` from client `rid`.
async fn delivered(events: &mut Events, rid: &str, payload: &[u8]) {
    let want = Source::Client { rid: rid.into() };
    events
        .wait(
            STEP,
            |e| matches!(e, NodeEvent::Delivery(d) if d.source == want && d.payload == payload),
        )
        .await;
}

/// What a raw client `rid` (offering `pack` when `offer`) received for the `n` one-way
/// records the server sent it: every payload in order, how many PACKs carried them, the
/// largest PACK, and whether the WELCOME announced `pack`. It decodes with the capabilities
/// it offered in effect, so with none any PACK fails the decode (version-1 bytes only).
/// PROBEs are answered; `ready` is told once the client's first MESSAGE is on its way.
fn raw_receiver(
    ep: &str,
    rid: &str,
    offer: bool,
    n: usize,
    ready: std::sync::mpsc::Sender<()>,
) -> (Vec<Vec<u8>>, usize, usize, bool) {
    let ctx = zmq::Context::new();
    let offered: &[&str] = if offer { &["pack"] } else { &[] };
    let caps = if offer {
        Capabilities::PACK
    } else {
        Capabilities::NONE
    };
    let d = common::raw_client(&ctx, ep, rid, "orders", offered);
    let (_, Record::Welcome(w)) = common::raw_recv(&d, caps) else {
        panic!("no WELCOME")
    };
    let announced = w.memberships.iter().any(|m| m.channel.as_str() == "\0pack");
    d.send_multipart(message(b"hi").encode().iter(), 0)
        .expect("hi");
    ready.send(()).expect("ready");
    let (mut payloads, mut packs, mut largest) = (Vec::new(), 0, 0);
    while payloads.len() < n {
        match common::raw_recv(&d, caps).1 {
            Record::Probe { id } => {
                d.send_multipart(Record::Ack { id }.encode().iter(), 0)
                    .expect("ack");
            }
            Record::Message(m) => payloads.push(m.payload.to_vec()),
            Record::Pack(p) => {
                packs += 1;
                largest = largest.max(p.payloads().len());
                payloads.extend(p.payloads().iter().map(|b| b.to_vec()));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    (payloads, packs, largest, announced)
}

/// MISSION X3, X4: 200 records sent with one `send_batch` reach a client that offered `pack`
/// in PACKs of at most 64 records, every payload in order; a client that did not offer it
/// (a version-1 implementation) gets the same 200 payloads as version-1 MESSAGEs only.
#[tokio::test]
async fn x4_x3_one_way_records_are_packed_only_where_pack_is_in_effect() {
    let (srv, mut events, ep) = server().await;
    let n = 200;
    let payloads: Vec<Bytes> = (0..n)
        .map(|i: usize| Bytes::from(i.to_be_bytes().to_vec()))
        .collect();
    for offer in [false, true] {
        let rid = if offer { "raw-pack" } else { "raw-v1" };
        let (tx, rx) = std::sync::mpsc::channel();
        let e = ep.clone();
        let client = tokio::task::spawn_blocking(move || raw_receiver(&e, rid, offer, n, tx));
        tokio::task::spawn_blocking(move || rx.recv())
            .await
            .expect("join")
            .expect("client ready");
        delivered(&mut events, rid, b"hi").await;
        srv.send_batch(rid, "orders", payloads.clone())
            .await
            .expect("send_batch");
        let (got, packs, largest, announced) = client.await.expect("raw client");
        assert_eq!(
            announced, offer,
            "the server announces pack only if offered"
        );
        let want: Vec<Vec<u8>> = payloads.iter().map(|p| p.to_vec()).collect();
        assert_eq!(got, want, "offer {offer}: every record, in order");
        if offer {
            assert!(packs >= 1, "no PACK for a client that offered pack");
            assert!(largest <= Pack::MAX, "a PACK of {largest} records");
        } else {
            assert_eq!(packs, 0, "a version-1 client got a PACK");
        }
    }
    srv.shutdown().await.expect("shutdown");
}

/// The two frames of a PACK of `payloads` on `orders`, with the count field set to `count`
/// (the real count when equal).
fn pack_frames(payloads: &[&[u8]], count: u16) -> Vec<Vec<u8>> {
    let (mut env, mut body) = (Vec::new(), Vec::new());
    let menv = Message::encode_envelope(&Name::new("orders").expect("channel"));
    Pack::write_frames(&menv, payloads.iter().copied(), &mut env, &mut body);
    env[4..6].copy_from_slice(&count.to_be_bytes());
    vec![env, body]
}

/// Records received on the server's link of client `rid`, by its snapshot.
async fn records_received(srv: &Node, rid: &str) -> u64 {
    let snap = srv.snapshot().await.expect("snapshot");
    snap.links
        .iter()
        .filter(|l| l.peer.as_deref() == Some(rid))
        .map(|l| l.records_received)
        .sum()
}

/// MISSION X4, X3, W3: the records of the PACKs a client sends are delivered one by one, in
/// order with its MESSAGEs, each with the client as source, and each counts as a record
/// received on the link; then a PACK of count 1 (a lone record is never wrapped) fails that
/// connection as a protocol error and delivers nothing.
#[tokio::test]
async fn x4_packed_records_are_delivered_as_messages_and_a_bad_pack_fails_the_connection() {
    let (srv, mut events, ep) = server().await;
    let (tx, rx) = std::sync::mpsc::channel::<Vec<Vec<u8>>>();
    let client = tokio::task::spawn_blocking(move || {
        let ctx = zmq::Context::new();
        let d = common::raw_client(&ctx, &ep, "packer", "orders", &["pack"]);
        let (_, Record::Welcome(_)) = common::raw_recv(&d, Capabilities::PACK) else {
            panic!("no WELCOME")
        };
        while let Ok(frames) = rx.recv() {
            d.send_multipart(frames.iter(), 0).expect("send");
        }
    });
    // The client's HELLO is in: the link exists and counts from here.
    tx.send(message(b"m0").encode()).expect("message");
    delivered(&mut events, "packer", b"m0").await;
    let before = records_received(&srv, "packer").await;
    let first: [&[u8]; 3] = [b"p1", b"", b"p3"];
    tx.send(pack_frames(&first, 3)).expect("pack");
    tx.send(message(b"m4").encode()).expect("message");
    let many: Vec<Vec<u8>> = (5..69u8).map(|i| vec![i]).collect();
    let refs: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
    tx.send(pack_frames(&refs, 64)).expect("pack of 64");
    let mut want: Vec<Vec<u8>> = first.iter().map(|p| p.to_vec()).collect();
    want.push(b"m4".to_vec());
    want.extend(many.iter().cloned());
    let source = Source::Client {
        rid: "packer".into(),
    };
    let mut got = Vec::new();
    while got.len() < want.len() {
        let ev = events
            .wait(STEP, |e| matches!(e, NodeEvent::Delivery(_)))
            .await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        assert_eq!(d.source, source);
        assert_eq!(&d.channel[..], b"orders");
        got.push(d.payload.to_vec());
    }
    assert_eq!(got, want, "each record, in order");
    let after = records_received(&srv, "packer").await;
    assert_eq!(
        after - before,
        68,
        "every record of a PACK counts as one received"
    );

    tx.send(pack_frames(&[b"lone"], 1)).expect("lone");
    tx.send(message(b"after").encode()).expect("after");
    let ev = events
        .wait(STEP, |e| {
            matches!(e, NodeEvent::Delivery(_))
                || matches!(e, NodeEvent::State(s) if s.reason.is_some())
        })
        .await;
    let NodeEvent::State(s) = ev else {
        panic!("delivered after a bad PACK: {ev:?}")
    };
    assert_eq!(s.reason, Some(FailureReason::ProtocolError), "{s:?}");
    drop(tx);
    client.await.expect("client");
    srv.shutdown().await.expect("shutdown");
}

/// MISSION X3, W3: a PACK from a client that did not offer `pack` is an unknown kind there,
/// exactly as in version 1: a protocol error for that connection, nothing delivered.
#[tokio::test]
async fn x3_a_pack_where_pack_is_not_in_effect_is_unknown() {
    let (srv, mut events, ep) = server().await;
    let client = tokio::task::spawn_blocking(move || {
        let ctx = zmq::Context::new();
        let d = common::raw_client(&ctx, &ep, "v1", "orders", &[]);
        let (_, Record::Welcome(w)) = common::raw_recv(&d, Capabilities::NONE) else {
            panic!("no WELCOME")
        };
        assert!(!w
            .memberships
            .iter()
            .any(|m| wire::is_extension_entry(&m.channel)));
        d.send_multipart(pack_frames(&[b"a", b"b"], 2).iter(), 0)
            .expect("pack");
        d
    });
    let ev = events
        .wait(STEP, |e| {
            matches!(e, NodeEvent::Delivery(_))
                || matches!(e, NodeEvent::State(s) if s.reason.is_some() && s.link.contains("v1"))
        })
        .await;
    let NodeEvent::State(s) = ev else {
        panic!("delivered a PACK from a version-1 client: {ev:?}")
    };
    assert_eq!(s.reason, Some(FailureReason::ProtocolError), "{s:?}");
    drop(client.await.expect("client"));
    srv.shutdown().await.expect("shutdown");
}
