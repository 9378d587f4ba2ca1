//! Fanout (§7): the runner subscribes to the target's publisher (beacon bytes, beacon on
//! join, cadence, PUBLISH form and seq, and what a subscriber that announces `pubpack` gets
//! beside a version-1 one), or binds a publisher the target subscribes to (its
//! subscriptions, a PUBPACK where it announced `pubpack`, its re-subscription after a
//! malformed message and, with `--long`, after 15 s of silence).

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use zmesh::proto::wire::{
    Capabilities, FanoutMessage, PubPack, BEACON_PAYLOAD, BEACON_TOPIC, PUBPACK_MARKER,
};

use super::link::recv_within;
use super::liveness::gap_ok;
use super::{Outcome, Report, Target};

/// How long the runner watches a publisher at most: a join beacon and two grid ticks.
const WATCH: Duration = Duration::from_secs(12);

/// The runner subscribes to the target's publisher at `ep`.
pub fn subscribe(_t: &Target, ep: &str) -> Vec<Outcome> {
    let mut r = Report::new("subscriber");
    let ids = [
        "7.1/beacon-bytes",
        "7.1/beacon-on-join",
        "7.1/beacon-interval",
        "7.2/publish-well-formed",
        "7.5/pubpack-subscriber-well-formed",
    ];
    let ctx = zmq::Context::new();
    let sub_to = |prefixes: &[&[u8]]| {
        ctx.socket(zmq::SUB).and_then(|s| {
            s.set_linger(0)?;
            for p in prefixes {
                s.set_subscribe(p)?;
            }
            s.connect(ep)?;
            Ok(s)
        })
    };
    // A version-1 subscriber, and beside it one that announces `pubpack` (§7.5).
    let (sub, packing) = match (sub_to(&[b""]), sub_to(&[b"", &PUBPACK_MARKER])) {
        (Ok(s), Ok(p)) => (s, p),
        (Err(e), _) | (_, Err(e)) => {
            for id in ids {
                r.skip(id, format!("cannot subscribe to {ep}: {e}"));
            }
            return r.outcomes;
        }
    };
    let w = watch(&sub);
    beacon_checks(&w, &mut r);
    publish_well_formed(&w.publishes, &mut r);
    pubpack_subscriber(&packing, &mut r);
    r.outcomes
}

/// 7.5/pubpack-subscriber-well-formed: what the subscriber that announced `pubpack` received
/// meanwhile (read after the version-1 watch) off the reserved topic is well-formed PUBLISH
/// and PUBPACK records of one generation, seq +1 per record (a PUBPACK's records counted one
/// by one).
fn pubpack_subscriber(sub: &zmq::Socket, r: &mut Report) {
    let id = "7.5/pubpack-subscriber-well-formed";
    let mut problems = Vec::new();
    let mut last: Option<(NonZeroU64, u64)> = None;
    let (mut records, mut packs) = (0usize, 0usize);
    while let Some(frames) = recv_within(sub, Duration::from_millis(50)) {
        // The reserved topic is 7.1/beacon-bytes' business.
        if frames.first().is_some_and(|f| f[..] == BEACON_TOPIC) {
            continue;
        }
        let decoded = FanoutMessage::decode_in(&frames, Capabilities::PUBPACK, |f| {
            Bytes::copy_from_slice(f)
        });
        let seqs: Vec<(NonZeroU64, u64)> = match decoded {
            Ok(FanoutMessage::Beacon) => continue,
            Ok(FanoutMessage::Publish {
                generation, seq, ..
            }) => vec![(generation, seq)],
            Ok(FanoutMessage::PubPack(p)) => {
                packs += 1;
                (p.first_seq()..)
                    .take(p.payloads().len())
                    .map(|seq| (p.generation(), seq))
                    .collect()
            }
            Err(e) => {
                problems.push(format!("{} ({e})", e.class()));
                continue;
            }
        };
        for (generation, seq) in seqs {
            records += 1;
            match last {
                Some((g, _)) if g != generation => problems.push("the generation changed".into()),
                Some((_, s)) if seq != s.wrapping_add(1) => {
                    problems.push(format!("seq {seq} after {s}"))
                }
                _ => {}
            }
            last = Some((generation, seq));
        }
    }
    if records == 0 && problems.is_empty() {
        r.skip(id, "the target published no record in the window");
    } else {
        r.check(
            id,
            problems.is_empty(),
            if problems.is_empty() {
                format!("{records} record(s), {packs} of them in PUBPACKs, seq +1 each")
            } else {
                problems.join("; ")
            },
        );
    }
}

/// What the runner saw of a publisher in its watch.
struct Watched {
    /// When the runner subscribed.
    joined: Instant,
    /// When each beacon came.
    beacons: Vec<Instant>,
    /// Messages on the reserved topic that were not the beacon, in hex.
    wrong_beacons: Vec<String>,
    /// Every other message: a PUBLISH's generation and seq, or what was wrong with it.
    publishes: Vec<Result<(NonZeroU64, u64), String>>,
}

/// Reads the publisher for up to [`WATCH`], until two beacons a grid interval apart.
fn watch(sub: &zmq::Socket) -> Watched {
    let joined = Instant::now();
    let mut beacons: Vec<Instant> = Vec::new();
    let mut wrong_beacons = Vec::new();
    let mut publishes: Vec<Result<(NonZeroU64, u64), String>> = Vec::new();
    while joined.elapsed() < WATCH {
        let left = WATCH.saturating_sub(joined.elapsed());
        let Some(frames) = recv_within(sub, left) else {
            break;
        };
        let at = Instant::now();
        if frames.first().is_some_and(|f| f[..] == BEACON_TOPIC) {
            beacons.push(at);
            if frames != [BEACON_TOPIC.to_vec(), BEACON_PAYLOAD.to_vec()] {
                let hex: Vec<String> = frames.iter().map(hex::encode).collect();
                wrong_beacons.push(hex.join(" / "));
            }
            // Enough seen: two beacons a grid interval apart.
            if beacons.len() >= 2 && gap_ok(at - beacons[beacons.len() - 2]) {
                break;
            }
            continue;
        }
        publishes.push(match FanoutMessage::decode(&frames) {
            Ok(FanoutMessage::Publish {
                generation, seq, ..
            }) => Ok((generation, seq)),
            Ok(FanoutMessage::Beacon) => Err("a beacon off its topic".into()),
            // Not decodable by a version-1 decoder: kind 15 is unknown there.
            Ok(FanoutMessage::PubPack(_)) => Err("a PUBPACK to a version-1 subscriber".into()),
            Err(e) => Err(format!("{} ({e})", e.class())),
        });
    }
    Watched {
        joined,
        beacons,
        wrong_beacons,
        publishes,
    }
}

/// 7.1/beacon-bytes, 7.1/beacon-on-join and 7.1/beacon-interval, on what [`watch`] saw.
fn beacon_checks(w: &Watched, r: &mut Report) {
    let Watched {
        joined,
        beacons,
        wrong_beacons,
        ..
    } = w;
    if beacons.is_empty() {
        r.fail(
            "7.1/beacon-bytes",
            format!("no beacon within {} s", WATCH.as_secs()),
        );
    } else {
        r.check(
            "7.1/beacon-bytes",
            wrong_beacons.is_empty(),
            if wrong_beacons.is_empty() {
                format!("{} exact beacon(s)", beacons.len())
            } else {
                format!("on the reserved topic: {}", wrong_beacons.join("; "))
            },
        );
    }
    match beacons.first() {
        Some(first) => {
            let after = *first - *joined;
            r.check(
                "7.1/beacon-on-join",
                after <= Duration::from_millis(2_500),
                format!("first beacon {} ms after subscribing", after.as_millis()),
            );
        }
        None => r.fail("7.1/beacon-on-join", "no beacon"),
    }
    let gaps: Vec<Duration> = beacons.windows(2).map(|w| w[1] - w[0]).collect();
    let shown: Vec<u128> = gaps.iter().map(Duration::as_millis).collect();
    r.check(
        "7.1/beacon-interval",
        gaps.iter().any(|g| gap_ok(*g)) && gaps.iter().all(|g| *g <= Duration::from_millis(5_500)),
        format!("gaps between beacons (ms): {shown:?}"),
    );
}

/// 7.2/publish-well-formed: every PUBLISH well-formed, one generation, seq +1 per record.
fn publish_well_formed(publishes: &[Result<(NonZeroU64, u64), String>], r: &mut Report) {
    if publishes.is_empty() {
        r.skip(
            "7.2/publish-well-formed",
            "the target published no record in the window",
        );
    } else {
        let mut problems: Vec<String> = publishes.iter().filter_map(|p| p.clone().err()).collect();
        let ok: Vec<(NonZeroU64, u64)> = publishes.iter().filter_map(|p| p.clone().ok()).collect();
        for w in ok.windows(2) {
            if w[1].0 != w[0].0 {
                problems.push("the generation changed".into());
            } else if w[1].1 != w[0].1.wrapping_add(1) {
                problems.push(format!("seq {} after {}", w[1].1, w[0].1));
            }
        }
        r.check(
            "7.2/publish-well-formed",
            problems.is_empty(),
            if problems.is_empty() {
                format!("{} PUBLISH record(s), seq +1 each", ok.len())
            } else {
                problems.join("; ")
            },
        );
    }
}

/// The runner binds a publisher (XPUB) at `ep`, which the target subscribes to.
pub fn publish(t: &Target, ep: &str) -> Vec<Outcome> {
    let mut r = Report::new("publisher");
    let ctx = zmq::Context::new();
    let xpub = match ctx.socket(zmq::XPUB).and_then(|s| {
        s.set_linger(0)?;
        s.set_xpub_verbose(true)?;
        s.bind(ep)?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(e) => {
            r.skip(
                "7.3/subscribes-to-beacons",
                format!("cannot bind {ep}: {e}"),
            );
            r.skip(
                "7.3/reserved-topic-resubscribes",
                format!("cannot bind {ep}: {e}"),
            );
            return r.outcomes;
        }
    };
    let beacon = [BEACON_TOPIC.to_vec(), BEACON_PAYLOAD.to_vec()];
    // The next subscription message within `limit`, a beacon sent for it at once.
    let subscription = |limit: Duration| -> Option<(Vec<u8>, Instant)> {
        let deadline = Instant::now() + limit;
        loop {
            let frames = recv_within(&xpub, deadline.saturating_duration_since(Instant::now()))?;
            if let [f] = &frames[..] {
                if f.first() == Some(&1) {
                    let _ = xpub.send_multipart(beacon.iter(), zmq::DONTWAIT);
                    return Some((f[1..].to_vec(), Instant::now()));
                }
            }
        }
    };
    let Some((prefix, _)) = subscription(FIRST_SUBSCRIPTION) else {
        r.fail("7.3/subscribes-to-beacons", "no subscription within 20 s");
        r.skip("7.3/reserved-topic-resubscribes", "no subscription");
        r.skip("7.5/subscriber-announces-pubpack", "no subscription");
        r.skip("7.5/pubpack-accepted", "no subscription");
        return r.outcomes;
    };
    // The rest of that socket's subscriptions (the marker of `pubpack`, §7.5, if it speaks
    // it), so that none of them is taken for a re-subscription below.
    let mut prefixes = vec![prefix];
    while let Some((p, _)) = subscription(Duration::from_millis(300)) {
        prefixes.push(p);
    }
    r.check(
        "7.3/subscribes-to-beacons",
        prefixes.iter().any(|p| BEACON_TOPIC.starts_with(p)),
        format!(
            "subscribed to {:?}",
            prefixes.iter().map(hex::encode).collect::<Vec<_>>()
        ),
    );
    let announces = prefixes.iter().any(|p| p[..] == PUBPACK_MARKER);
    if announces {
        let others: Vec<&Vec<u8>> = prefixes
            .iter()
            .filter(|p| p[..] != PUBPACK_MARKER)
            .collect();
        r.check(
            "7.5/subscriber-announces-pubpack",
            others == [&Vec::<u8>::new()],
            format!(
                "the marker with {:?} (a subscriber that announces pubpack subscribes to \
                 exactly the empty prefix and the marker)",
                others.iter().map(hex::encode).collect::<Vec<_>>()
            ),
        );
    } else {
        r.skip(
            "7.5/subscriber-announces-pubpack",
            "the target does not announce pubpack (version 1)",
        );
    }
    // Beacons for a moment (the subscriber is ready).
    for _ in 0..3 {
        let _ = xpub.send_multipart(beacon.iter(), zmq::DONTWAIT);
        let _ = recv_within(&xpub, Duration::from_millis(100));
    }
    // Where it announced `pubpack`, a well-formed PUBPACK is records, not a protocol error:
    // the subscriber keeps its socket (no new subscription).
    if announces {
        let pack = PubPack::new(
            Bytes::from_static(b"conform"),
            NonZeroU64::MIN,
            1,
            vec![
                Bytes::from_static(b"a"),
                Bytes::new(),
                Bytes::from_static(b"c"),
            ],
        )
        .map(|p| FanoutMessage::PubPack(p).encode());
        if let Ok(Ok(frames)) = pack {
            let _ = xpub.send_multipart(frames.iter(), zmq::DONTWAIT);
        }
        let sent = Instant::now();
        match subscription(PUBPACK_WATCH) {
            Some((_, at)) => r.fail(
                "7.5/pubpack-accepted",
                format!(
                    "subscribed again {} ms after a well-formed PUBPACK",
                    (at - sent).as_millis()
                ),
            ),
            None => r.pass(
                "7.5/pubpack-accepted",
                format!(
                    "kept its socket for {} ms after a PUBPACK of 3 records",
                    PUBPACK_WATCH.as_millis()
                ),
            ),
        }
    } else {
        r.skip(
            "7.5/pubpack-accepted",
            "the target does not announce pubpack",
        );
    }
    // Then a malformed message on the reserved topic: the subscriber must drop that socket
    // and subscribe on a new one.
    let bad = [BEACON_TOPIC.to_vec(), vec![0x5A, 0x46, 0x01, 0x02]];
    let _ = xpub.send_multipart(bad.iter(), zmq::DONTWAIT);
    let sent = Instant::now();
    match subscription(Duration::from_secs(6)) {
        Some((_, at)) => r.pass(
            "7.3/reserved-topic-resubscribes",
            format!(
                "subscribed again {} ms after the malformed message",
                (at - sent).as_millis()
            ),
        ),
        None => r.fail(
            "7.3/reserved-topic-resubscribes",
            "no new subscription within 6 s of a malformed message on the reserved topic",
        ),
    }
    if t.args.long {
        // Silence from the beacon sent for that subscription on: 15 s, then a new socket.
        let quiet_from = Instant::now();
        match subscription(Duration::from_secs(19)) {
            Some((_, at)) => {
                let after = at - quiet_from;
                r.check(
                    "7.3/silence-resubscribes",
                    after >= Duration::from_millis(14_500)
                        && after <= Duration::from_millis(17_500),
                    format!("subscribed again {} ms into the silence", after.as_millis()),
                );
            }
            None => r.fail(
                "7.3/silence-resubscribes",
                "no new subscription within 19 s of silence",
            ),
        }
    }
    r.outcomes
}

/// Longest wait for the target's first subscription (it may be in a reconnect backoff).
const FIRST_SUBSCRIPTION: Duration = Duration::from_secs(20);

/// How long a subscriber that announced `pubpack` must keep its socket after a PUBPACK: a
/// protocol error makes a subscriber drop it at once and subscribe again 100 ms later
/// (§7.3).
const PUBPACK_WATCH: Duration = Duration::from_millis(1_500);
