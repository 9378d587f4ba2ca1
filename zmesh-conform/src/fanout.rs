//! Fanout (§7): the runner subscribes to the target's publisher (beacon bytes, beacon on
//! join, cadence, PUBLISH form and seq), or binds a publisher the target subscribes to (its
//! subscription, its re-subscription after a malformed message and, with `--long`, after
//! 15 s of silence).

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use zmesh::proto::wire::{FanoutMessage, BEACON_PAYLOAD, BEACON_TOPIC};

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
    ];
    let ctx = zmq::Context::new();
    let sub = match ctx.socket(zmq::SUB).and_then(|s| {
        s.set_linger(0)?;
        s.set_subscribe(b"")?;
        s.connect(ep)?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(e) => {
            for id in ids {
                r.skip(id, format!("cannot subscribe to {ep}: {e}"));
            }
            return r.outcomes;
        }
    };
    let w = watch(&sub);
    beacon_checks(&w, &mut r);
    publish_well_formed(&w.publishes, &mut r);
    r.outcomes
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
        return r.outcomes;
    };
    r.check(
        "7.3/subscribes-to-beacons",
        BEACON_TOPIC.starts_with(&prefix),
        format!("subscribed to {:?}", hex::encode(&prefix)),
    );
    // Beacons for a moment (the subscriber is ready), then a malformed message on the
    // reserved topic: the subscriber must drop that socket and subscribe on a new one.
    for _ in 0..3 {
        let _ = xpub.send_multipart(beacon.iter(), zmq::DONTWAIT);
        let _ = recv_within(&xpub, Duration::from_millis(100));
    }
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
