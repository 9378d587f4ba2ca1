//! Capability `ids16` (WIRE.md §4.19) on real sockets: a zmesh server answers in ANSWERS16
//! and a zmesh client calls in CALLS16 exactly where the peer announced `ids16` (with
//! `answers` / `calls`), and in ANSWERS / CALLS where it announced only those. The peers are
//! raw libzmq sockets using this crate's codec.

mod common;

use std::collections::BTreeSet;
use std::num::NonZeroU64;

use bytes::Bytes;
use common::{free_tcp, raw_client, raw_recv, raw_router, raw_send, raw_welcome, server_of};
use zmesh::config::{Endpoint, NodeConfig, ServerConfig};
use zmesh::proto::wire::{self, Accept, Batch, Capabilities, Kind, Name, Record, Reply, ReplyCode};
use zmesh::runtime::calls::{CallOptions, Request, ServeError};
use zmesh::runtime::service::{Method, Service};
use zmesh::runtime::{Node, Target};

/// Calls per round: one loop turn's worth, so their answers pack.
const CALLS: u64 = 64;

/// The kinds of the messages a raw client offering `offered` received for one BATCH of
/// [`CALLS`] calls to a zmesh server at `ep`, and the ids answered (each REPLY after its
/// ACCEPT, every payload its call's).
fn answers_seen(ep: &str, offered: &[&str]) -> (BTreeSet<Kind>, BTreeSet<u64>) {
    let caps = offered
        .iter()
        .map(|c| match *c {
            "answers" => Capabilities::ANSWERS,
            _ => Capabilities::IDS16,
        })
        .fold(Capabilities::NONE, Capabilities::union);
    let ctx = zmq::Context::new();
    let d = raw_client(&ctx, ep, "raw", "orders", offered);
    let Record::Welcome(_) = raw_recv(&d, caps).1 else {
        panic!("no WELCOME")
    };
    let requests = (1..=CALLS)
        .map(|i| wire::Request {
            call_id: NonZeroU64::new(i).expect("id"),
            ttl_ms: None,
            semantics: wire::Semantics::Query,
            channel: Name::new("orders").expect("channel"),
            method: Name::new("echo").expect("method"),
            idempotency_key: None,
            payload: Bytes::from(vec![u8::try_from(i).expect("small")]),
        })
        .collect();
    let batch = Record::Batch(Batch::new(requests).expect("batch"));
    d.send_multipart(batch.encode().iter(), 0).expect("batch");
    let (mut kinds, mut accepted, mut answered) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    while (answered.len() as u64) < CALLS {
        let records = match raw_recv(&d, caps).1 {
            Record::Probe { id } => {
                d.send_multipart(Record::Ack { id }.encode().iter(), 0)
                    .expect("ack");
                continue;
            }
            Record::Answers(a) => {
                kinds.insert(a.kind());
                a.into_records().collect()
            }
            other => {
                kinds.insert(other.kind());
                vec![other]
            }
        };
        for r in records {
            match r {
                Record::Accept(a) => assert!(accepted.insert(a.call_id.get()), "two ACCEPTs"),
                Record::Reply(r) => {
                    let id = r.call_id.get();
                    assert!(accepted.contains(&id), "REPLY of {id} before its ACCEPT");
                    assert_eq!(r.payload.as_ref(), [u8::try_from(id).expect("small")]);
                    assert!(answered.insert(id), "two REPLYs of {id}");
                }
                other => panic!("not an answer: {other:?}"),
            }
        }
    }
    (kinds, answered)
}

/// MISSION K5, X3, X4 (WIRE.md §4.19): a zmesh server answers a client that announced
/// `answers` and `ids16` in ANSWERS16 records, one that announced only `answers` in ANSWERS
/// records; either way every call is accepted and answered once.
#[tokio::test]
async fn k5_x3_x4_answers_travel_as_answers16_only_where_ids16_is_in_effect() {
    let ep = free_tcp();
    let mut c = NodeConfig::new("srv");
    c.memberships = server_of("orders");
    c.server = Some(Endpoint::new(ep.clone()));
    let orders = Service::new("orders").method(Method::query("echo"), |req: Request| async move {
        Ok::<_, ServeError>(req.raw_args().clone())
    });
    let srv = Node::builder(c)
        .expose(orders)
        .start()
        .await
        .expect("server");
    let all: BTreeSet<u64> = (1..=CALLS).collect();
    for (offered, packed, not) in [
        (&["answers", "ids16"][..], Kind::Answers16, Kind::Answers),
        (&["answers"][..], Kind::Answers, Kind::Answers16),
    ] {
        let e = ep.clone();
        let (kinds, answered) = tokio::task::spawn_blocking(move || answers_seen(&e, offered))
            .await
            .expect("raw client");
        assert_eq!(answered, all, "offered {offered:?}");
        assert!(kinds.contains(&packed), "offered {offered:?}: {kinds:?}");
        assert!(!kinds.contains(&not), "offered {offered:?}: {kinds:?}");
    }
    srv.shutdown().await.expect("shutdown");
}

/// MISSION K5, X3, X4 (WIRE.md §4.19): a zmesh client sends calls of one method issued
/// together as CALLS16 toward a server that announced `calls` and `ids16`, as CALLS toward
/// one that announced only `calls`; every call is answered.
#[tokio::test]
async fn k5_x3_x4_calls_travel_as_calls16_only_where_ids16_is_in_effect() {
    for announced in [&["calls", "ids16"][..], &["calls"][..]] {
        let ctx = zmq::Context::new();
        let (server, ep) = raw_router(&ctx, 15_000);
        let caps = if announced.len() == 2 {
            Capabilities::CALLS.union(Capabilities::IDS16)
        } else {
            Capabilities::CALLS
        };
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<(Kind, usize)>();
        let serving = tokio::task::spawn_blocking(move || loop {
            let Ok(mut frames) = server.recv_multipart(0) else {
                return;
            };
            let route = frames.remove(0);
            let rec = Record::decode_in(&frames, caps, |f| Bytes::copy_from_slice(f))
                .expect("a record the negotiated capabilities allow");
            let requests = match rec {
                Record::Hello(_) => {
                    raw_send(&server, &route, raw_welcome("orders", announced));
                    continue;
                }
                Record::Probe { id } => {
                    raw_send(&server, &route, Record::Ack { id });
                    continue;
                }
                Record::Request(r) => vec![r],
                Record::Batch(b) => b.into_requests(),
                Record::Calls(c) => {
                    let _ = seen_tx.send((c.kind(), c.requests().len()));
                    c.into_requests()
                }
                Record::Close { .. } => return,
                _ => continue,
            };
            for r in requests {
                let accept = Record::Accept(Accept {
                    call_id: r.call_id,
                    generation: NonZeroU64::MIN,
                    connection_id: 0,
                });
                let reply = Record::Reply(Reply {
                    call_id: r.call_id,
                    code: ReplyCode::Ok,
                    payload: r.payload,
                    replayed: false,
                });
                if !(raw_send(&server, &route, accept) && raw_send(&server, &route, reply)) {
                    return;
                }
            }
        });
        let mut c = NodeConfig::new("cli");
        c.servers = vec![ServerConfig::new("orders", ep.clone()).rid("srv")];
        let node = Node::start(c).await.expect("client");
        node.ready(Target::server("orders")).await.expect("ready");
        let mut kinds = BTreeSet::new();
        for _round in 0..5 {
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..100u8 {
                let node = node.clone();
                tasks.spawn(async move {
                    let arg = Bytes::from(vec![i % 128]);
                    let got = node
                        .call_raw("orders", "echo", arg.clone(), CallOptions::default())
                        .await;
                    assert_eq!(got.as_ref(), Ok(&arg), "call {i}");
                });
            }
            while let Some(r) = tasks.join_next().await {
                r.expect("call task");
            }
            while let Ok((kind, n)) = seen.try_recv() {
                assert!((2..=64).contains(&n), "a record of {n} calls");
                kinds.insert(kind);
            }
            if !kinds.is_empty() {
                break;
            }
        }
        let (want, not) = if announced.len() == 2 {
            (Kind::Calls16, Kind::Calls)
        } else {
            (Kind::Calls, Kind::Calls16)
        };
        assert!(kinds.contains(&want), "announced {announced:?}: {kinds:?}");
        assert!(!kinds.contains(&not), "announced {announced:?}: {kinds:?}");
        node.shutdown().await.expect("shutdown");
        serving.await.expect("server thread");
    }
}
