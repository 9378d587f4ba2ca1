//! Capability `pubpack` in real sockets (WIRE.md §7.5, MISSION X3, X4, R2): a zmesh publisher
//! sends PUBPACKs only while every subscriber of its socket announced `pubpack` (subscribed
//! to the marker), every record reaches every subscriber once, in order, with its seq; a
//! version-1 subscriber that joins a packing publisher (a raw libzmq SUB, a pyzmq SUB) never
//! receives a PUBPACK, and the publisher packs again once it left; and a zmesh subscriber
//! stages a PUBPACK as its records, so the receive loop's count cap counts each.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{free_tcp, py_script, Events, PyPeer};
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::proto::state::ConnState;
use zmesh::proto::wire::{
    Capabilities, FanoutMessage, PubPack, BEACON_PAYLOAD, BEACON_TOPIC, PUBPACK_MARKER,
};
use zmesh::runtime::{Node, NodeEvent};

/// Upper bound of every wait.
const STEP: Duration = Duration::from_secs(10);
/// The topic of the records under test.
const TOPIC: &[u8] = b"t";
/// A Python peer never outlives this (seconds), even if the test is stuck.
const PY_LIFETIME_S: u32 = 60;
/// The first line of a Python peer: an interpreter start and `import zmq` on a loaded
/// machine can take a while; bounded all the same.
const STARTUP: Duration = Duration::from_secs(60);

/// A 64-byte payload carrying `i`.
fn payload(i: u64) -> Bytes {
    let mut p = vec![0xA5; 64];
    p[..8].copy_from_slice(&i.to_be_bytes());
    Bytes::from(p)
}

/// The number a [`payload`] carries.
fn index(p: &[u8]) -> u64 {
    u64::from_be_bytes(p[..8].try_into().expect("a payload of the test"))
}

/// One message a raw subscriber received (beacons are not kept).
#[derive(Debug, Clone)]
struct Got {
    /// It was a PUBPACK.
    packed: bool,
    /// Its records on [`TOPIC`]: (seq, the payload's number), in order.
    records: Vec<(u64, u64)>,
}

/// A raw libzmq SUB connected to `ep`, subscribed to the empty prefix and, with `announce`,
/// to the `pubpack` marker.
fn raw_sub(ctx: &zmq::Context, ep: &str, announce: bool) -> zmq::Socket {
    let s = ctx.socket(zmq::SUB).expect("sub");
    s.set_linger(0).expect("linger");
    s.set_rcvhwm(100_000).expect("hwm");
    s.set_subscribe(b"").expect("subscribe");
    if announce {
        s.set_subscribe(&PUBPACK_MARKER).expect("marker");
    }
    s.connect(ep).expect("connect");
    s
}

/// The next message on `sub` within `wait`, beacons skipped; decoded as a subscriber that
/// announced `pubpack` (`announce`) or a version-1 one, which panics on a PUBPACK (for it
/// kind 15 is unknown: WIRE.md §7.5).
fn next(sub: &zmq::Socket, announce: bool, wait: Duration) -> Option<Got> {
    let end = Instant::now() + wait;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if sub
            .poll(zmq::POLLIN, left.as_millis() as i64)
            .expect("poll")
            == 0
        {
            return None;
        }
        let frames = sub.recv_multipart(0).expect("recv");
        let caps = if announce {
            Capabilities::PUBPACK
        } else {
            Capabilities::NONE
        };
        let decoded = FanoutMessage::decode_in(&frames, caps, |f| Bytes::copy_from_slice(f))
            .unwrap_or_else(|e| {
                let hex: Vec<String> = frames.iter().map(hex::encode).collect();
                panic!("announce {announce}: {e}: {hex:?}")
            });
        let (packed, topic, records) = match decoded {
            FanoutMessage::Beacon => continue,
            FanoutMessage::Publish {
                topic,
                seq,
                payload,
                ..
            } => (false, topic, vec![(seq, payload)]),
            FanoutMessage::PubPack(p) => {
                assert!(p.payloads().len() <= 64, "at most 64 records");
                let bytes: usize = p.payloads().iter().map(Bytes::len).sum();
                assert!(bytes <= 4096, "at most 4 KiB of payloads, not {bytes}");
                let seqs = p.first_seq()..;
                let (topic, payloads) = p.into_parts();
                (true, topic, seqs.zip(payloads).collect())
            }
        };
        if &topic[..] != TOPIC {
            continue;
        }
        let records = records.iter().map(|(s, p)| (*s, index(p))).collect();
        return Some(Got { packed, records });
    }
}

/// A publisher node on a fresh endpoint.
async fn publisher() -> (Node, String) {
    let ep = free_tcp();
    let mut c = NodeConfig::new("pub");
    c.publisher = Some(Endpoint::new(ep.clone()));
    (Node::start(c).await.expect("publisher"), ep)
}

/// MISSION X4, X3, T3: two raw subscribers and a zmesh subscriber, all announcing `pubpack`,
/// get every record of a mix of `publish_batch`es and bursts of `publish`es exactly once and
/// in order; the raw ones see seqs that step by one across PUBLISHes and PUBPACKs, and
/// PUBPACKs among them (of at most 64 records and 4 KiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x4_x3_pack_capable_subscribers_get_every_record_once_in_order() {
    const N: u64 = 1_500;
    let (node, ep) = publisher().await;
    let ctx = zmq::Context::new();
    let raws = [raw_sub(&ctx, &ep, true), raw_sub(&ctx, &ep, true)];
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep.clone())];
    let sub = Node::start(s).await.expect("subscriber");
    let mut es = Events::new(sub.take_events().expect("events"));
    // Slow joiners: warm-up records (another topic) until every subscriber has one.
    let warm = Instant::now() + STEP;
    let (mut raw_seen, mut node_seen) = ([false, false], false);
    while !(raw_seen == [true, true] && node_seen) {
        assert!(
            Instant::now() < warm,
            "a subscriber never received a record"
        );
        node.publish(b"warm", "w").expect("warm-up");
        for (r, seen) in raws.iter().zip(raw_seen.iter_mut()) {
            *seen |= r.poll(zmq::POLLIN, 10).expect("poll") > 0;
        }
        node_seen |= !es
            .drain_now()
            .iter()
            .all(|e| !matches!(e, NodeEvent::Delivery(_)));
    }
    let publishing = {
        let node = node.clone();
        tokio::task::spawn_blocking(move || {
            for chunk in 0..N / 100 {
                let from = chunk * 100;
                // Singles last: the held tail of the last burst leaves at the I/O thread's
                // look, with nothing published after it.
                if chunk % 2 == 1 {
                    node.publish_batch(TOPIC, (from..from + 100).map(payload).collect())
                        .expect("batch");
                } else {
                    for i in from..from + 100 {
                        node.publish(TOPIC, payload(i)).expect("publish");
                    }
                }
            }
        })
    };
    let readers: Vec<_> = raws
        .into_iter()
        .map(|r| {
            std::thread::spawn(move || {
                let mut got: Vec<Got> = Vec::new();
                while got.iter().map(|g| g.records.len()).sum::<usize>() < N as usize {
                    match next(&r, true, STEP) {
                        Some(g) => got.push(g),
                        None => break,
                    }
                }
                got
            })
        })
        .collect();
    publishing.await.expect("publishing");
    for r in readers {
        let got = r.join().expect("reader");
        let records: Vec<(u64, u64)> = got.iter().flat_map(|g| g.records.clone()).collect();
        let indices: Vec<u64> = records.iter().map(|r| r.1).collect();
        assert_eq!(
            indices,
            (0..N).collect::<Vec<_>>(),
            "every record once, in order"
        );
        for w in records.windows(2) {
            assert_eq!(w[1].0, w[0].0 + 1, "seqs step by one: {w:?}");
        }
        let packs = got.iter().filter(|g| g.packed).count();
        assert!(
            packs >= 8,
            "only {packs} PUBPACKs in {} messages",
            got.len()
        );
        println!("{} records in {} messages, {packs} PUBPACKs", N, got.len());
    }
    let mut next_index = 0;
    while next_index < N {
        let ev = es
            .wait(
                STEP,
                |e| matches!(e, NodeEvent::Delivery(d) if &d.channel[..] == TOPIC),
            )
            .await;
        let NodeEvent::Delivery(d) = ev else {
            unreachable!()
        };
        assert_eq!(
            index(&d.payload),
            next_index,
            "the zmesh subscriber, in order"
        );
        next_index += 1;
    }
    sub.shutdown().await.expect("subscriber");
    node.shutdown().await.expect("publisher");
}

/// A pyzmq SUB subscribed to the empty prefix only, as a version-1 subscriber, reading WIRE.md
/// byte by byte: every message must be the beacon or a PUBLISH (frame 1 `5A 4D 01 0D`, 20
/// bytes); reports the first and last seq of `count` PUBLISH records of topic `t`, and any
/// other message, then closes its socket and says so.
const PY_V1_SUBSCRIBER: &str = r#"
ep, count = sys.argv[1], int(sys.argv[2])
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.linger = 0
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(ep)
emit(connected=ep)
first, last, n, other = None, None, 0, []
while n < count and time.monotonic() < DEADLINE:
    if not sub.poll(100):
        continue
    frames = sub.recv_multipart()
    if frames[0] == BEACON_TOPIC and frames[1:] == [BEACON_PAYLOAD]:
        continue
    env = frames[1] if len(frames) > 1 else b""
    if len(frames) == 3 and len(env) == 20 and env[:4] == envelope(0x0D):
        if frames[0] == b"t":
            seq = Reader(env[12:]).u64()
            first = seq if first is None else first
            last = seq
            n += 1
    else:
        other.append([f.hex() for f in frames])
sub.close()
emit(done=n, first=first, last=last, other=other)
"#;

/// MISSION X3, W4: a version-1 subscriber (a raw libzmq SUB, and a pyzmq SUB reading WIRE.md
/// byte by byte) joins a publisher that is packing for a subscriber that announced `pubpack`,
/// while records are being published: it receives every record it gets as a PUBLISH, and the
/// announcing subscriber gets no PUBPACK between the first and the last record the version-1
/// subscriber received (its subscription was counted before any of them was sent). Once
/// both left, the publisher packs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x3_w4_version_1_subscribers_joining_a_packing_publisher_get_only_publishes() {
    let (node, ep) = publisher().await;
    let ctx = zmq::Context::new();
    let packing = raw_sub(&ctx, &ep, true);
    // Publish records all along: batches of 8, and single records between them.
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let publishing = {
        let (node, stop, published) = (node.clone(), stop.clone(), published.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                node.publish_batch(TOPIC, (i..i + 8).map(payload).collect())
                    .expect("batch");
                node.publish(TOPIC, payload(i + 8)).expect("publish");
                i += 9;
                published.store(i, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(500)); // pacing, not a sync
            }
        })
    };
    // The announcing subscriber's log, read on a thread of its own until told to stop.
    let (stop_reading, log) = {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            while !s.load(Ordering::Relaxed) {
                if let Some(g) = next(&packing, true, Duration::from_millis(100)) {
                    got.push(g);
                }
            }
            got
        });
        (stop, reader)
    };
    // Packing is on before anyone else joins: wait for it on the shared log through the
    // publisher's counter (the reader thread owns the socket), then let the others join.
    let until = Instant::now() + STEP;
    while published.load(Ordering::Relaxed) < 2_000 {
        assert!(Instant::now() < until, "the publisher is stuck");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let v1 = raw_sub(&ctx, &ep, false);
    let mut py = PyPeer::start(&py_script(PY_V1_SUBSCRIBER, PY_LIFETIME_S), &[&ep, "300"]);
    let v1_records = tokio::task::spawn_blocking(move || {
        let mut records = Vec::new();
        while records.len() < 300 {
            let got = next(&v1, false, STEP).expect("the version-1 subscriber gets records");
            assert!(!got.packed);
            records.extend(got.records);
        }
        drop(v1);
        records
    })
    .await
    .expect("version-1 reader");
    let (done, _) = py.until(STARTUP, "done").await;
    assert_eq!(done["other"], serde_json::json!([]), "pyzmq: {done}");
    assert_eq!(done["done"], 300, "pyzmq: {done}");
    let py_range = (
        done["first"].as_u64().expect("first"),
        done["last"].as_u64().expect("last"),
    );
    let v1_range = (v1_records[0].0, v1_records[v1_records.len() - 1].0);
    // Both left; records go on until the announcing subscriber saw PUBPACKs again.
    let left_at = published.load(Ordering::Relaxed);
    let until = Instant::now() + STEP;
    while published.load(Ordering::Relaxed) < left_at + 3_000 {
        assert!(Instant::now() < until, "the publisher is stuck");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    publishing.join().expect("publishing");
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop_reading.store(true, Ordering::Relaxed);
    let got = log.join().expect("reader");
    let first_seq = |g: &Got| g.records[0].0;
    let last_v1 = v1_range.1.max(py_range.1);
    assert!(
        got.iter().any(|g| g.packed && first_seq(g) < v1_range.0),
        "packing before the version-1 subscribers joined"
    );
    for (who, (from, to)) in [("libzmq", v1_range), ("pyzmq", py_range)] {
        let wrong: Vec<&Got> = got
            .iter()
            .filter(|g| g.packed && first_seq(g) >= from && first_seq(g) <= to)
            .collect();
        assert!(
            wrong.is_empty(),
            "PUBPACKs while the {who} subscriber was there (seqs {from}..={to}): {wrong:?}"
        );
    }
    assert!(
        got.iter().any(|g| g.packed && first_seq(g) > last_v1),
        "packing again after the version-1 subscribers left"
    );
    node.shutdown().await.expect("publisher");
}

/// MISSION R2, X4: a zmesh subscriber stages a PUBPACK as its records, so the receive loop's
/// count cap counts each: against a raw publisher that sends 50 PUBPACKs of 40 records in one
/// burst, no turn hands out more than 64 records (the application gets one batch of events
/// per loop turn), a turn finishes a PUBPACK it crossed the cap in in the next one, and every
/// record arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_x4_records_of_a_pubpack_count_toward_the_turn_cap() {
    const PACKS: u64 = 50;
    const PER_PACK: u64 = 40;
    let ctx = zmq::Context::new();
    let xpub = ctx.socket(zmq::XPUB).expect("xpub");
    xpub.set_linger(0).expect("linger");
    xpub.set_sndhwm(100_000).expect("hwm");
    xpub.set_xpub_verbose(true).expect("verbose");
    xpub.bind("tcp://127.0.0.1:*").expect("bind");
    let ep = xpub.get_last_endpoint().expect("ep").expect("utf-8");
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep.clone())];
    let sub = Node::start(s).await.expect("subscriber");
    let mut events = sub.take_events().expect("events");
    // The subscriber announces `pubpack`: the empty prefix and the marker.
    let xpub = tokio::task::spawn_blocking(move || {
        let mut prefixes = Vec::new();
        let end = Instant::now() + STEP;
        while prefixes.len() < 2 {
            assert!(Instant::now() < end, "subscriptions: {prefixes:?}");
            if let Ok(m) = xpub.recv_bytes(zmq::DONTWAIT) {
                prefixes.push(m);
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        prefixes.sort();
        let mut marker = vec![1];
        marker.extend_from_slice(&PUBPACK_MARKER);
        assert_eq!(prefixes, vec![vec![1], marker]);
        xpub.send_multipart([&BEACON_TOPIC[..], &BEACON_PAYLOAD[..]], 0)
            .expect("beacon");
        xpub
    })
    .await
    .expect("subscriptions");
    let link = format!("sub {ep}");
    let end = Instant::now() + STEP;
    'ready: loop {
        let left = end.saturating_duration_since(Instant::now());
        let batch = tokio::time::timeout(left, events.recv())
            .await
            .expect("ready in time")
            .expect("events");
        for e in batch {
            if matches!(&e, NodeEvent::State(s) if s.link == link && s.state == ConnState::Ready) {
                break 'ready;
            }
        }
    }
    let generation = std::num::NonZeroU64::new(7).expect("non-zero");
    let xpub = tokio::task::spawn_blocking(move || {
        for k in 0..PACKS {
            let from = k * PER_PACK;
            let pack = PubPack::new(
                Bytes::from_static(TOPIC),
                generation,
                from + 1,
                (from..from + PER_PACK).map(payload).collect(),
            )
            .expect("pack");
            let frames = FanoutMessage::PubPack(pack).encode().expect("frames");
            xpub.send_multipart(frames, 0).expect("send");
        }
        xpub
    })
    .await
    .expect("flood");
    let (mut next_index, mut largest) = (0u64, 0usize);
    while next_index < PACKS * PER_PACK {
        let batch = tokio::time::timeout(STEP, events.recv())
            .await
            .expect("records in time")
            .expect("events");
        let mut in_batch = 0;
        for e in batch {
            if let NodeEvent::Delivery(d) = e {
                assert_eq!(index(&d.payload), next_index, "in order, each once");
                next_index += 1;
                in_batch += 1;
            }
        }
        assert!(in_batch <= 64, "a turn handed out {in_batch} records");
        largest = largest.max(in_batch);
    }
    println!("largest turn: {largest} records");
    assert!(
        largest > PER_PACK as usize,
        "no turn went on into a second PUBPACK (largest {largest})"
    );
    drop(xpub);
    sub.shutdown().await.expect("subscriber");
}
