//! P4: one peer floods, a quiet peer must not notice (MISSION R4, L2).
//!
//! Node `a` accepts three RouteMesh peers on its bound sockets:
//!
//! - `x`, a zmesh node that floods `a` with one-way records at full rate (`Node::send_batch`
//!   from several tasks) for the whole window ([`Plan::flood`]);
//! - `y`, a quiet zmesh node: liveness only;
//! - `q`, a quiet raw libzmq DEALER on `a`'s Application lane (the socket `x` floods) that
//!   speaks zmesh records: HELLO, an ACK to each of `a`'s PROBEs, and a PROBE of its own
//!   every [`PROBE_EVERY`] (a fresh id once the last one was answered), timing each PROBE to
//!   its ACK. A zmesh node probes every 5 s; `q` probes faster to have thousands of samples,
//!   and `a` answers any probe the same way.
//!
//! Reported: the p99 of `q`'s PROBE -> ACK round trips (target < 50 ms), and the false
//! not-ready count: every state change that takes a link out of ready on `a` (towards `x`,
//! `y` or `q`), on `x` or on `y` (towards `a`) during the window, plus every probe of `q`
//! left unanswered for the 15 s peer deadline, plus one if `a` sent `q` a CLOSE (from the
//! moment `q` was ready until the row stops it: inside the window that close is also one
//! of `a`'s state changes). The target is zero. `a`'s application takes
//! every delivery as it comes (a paused queue is R5's business, not this row's).

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use zmesh::config::RouteMeshBind;
use zmesh::proto::liveness::PEER_DEADLINE;
use zmesh::proto::state::ConnState;
use zmesh::proto::wire::{self, Hello, Label, Lane, Memberships, Name, Record};
use zmesh::runtime::{EventStream, Node, NodeEvent};

use super::{
    client_config, millis, quantile, server_config, wait_ready, Plan, CHANNEL, SETUP_LIMIT,
};

/// The quiet raw peer's probe period.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(50);
/// Flooding tasks on `x`.
const FLOODERS: usize = 4;
/// The flood's record size.
const FLOOD_PAYLOAD: usize = 64;

/// What one P4 window measured.
pub(crate) struct Flood {
    /// `q`'s PROBE -> ACK round trips, ms, sorted.
    pub rtt_ms: Vec<f64>,
    /// Links that left ready during the window, and probes of `q` never answered.
    pub false_not_ready: u64,
    /// Flood records `a` delivered per second.
    pub flood_rate: f64,
    /// Flood records `a` delivered.
    pub flood_delivered: u64,
}

/// One flood window of `plan.flood`.
pub(crate) async fn flood(plan: &Plan) -> Result<Flood> {
    let a_cfg = server_config("a")?;
    let bind = a_cfg.route_mesh.clone().context("a binds")?;
    let a = Node::start(a_cfg).await?;
    let mut ea = a.take_events().context("events of a")?;
    let x = Node::start(client_config("x", "a", &bind)).await?;
    let y = Node::start(client_config("y", "a", &bind)).await?;
    let mut ex = x.take_events().context("events of x")?;
    let mut ey = y.take_events().context("events of y")?;
    let lanes = |who: &str| -> Vec<String> {
        ["application", "completion"]
            .iter()
            .map(|l| format!("{who} {l}"))
            .collect()
    };
    wait_ready(&mut ex, &lanes("peer a")).await?;
    wait_ready(&mut ey, &lanes("peer a")).await?;
    let mut inbound = lanes("inbound x");
    inbound.extend(lanes("inbound y"));
    wait_ready(&mut ea, &inbound).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (bind, stop) = (bind.clone(), stop.clone());
        std::thread::spawn(move || probe(&bind, &stop))
    };
    // q's lane becomes ready on a before the window starts.
    wait_ready(&mut ea, &["inbound q application".to_owned()]).await?;

    let t0 = Instant::now();
    let end = t0 + plan.flood;
    let watch_a = tokio::spawn(watch(ea, end, "a"));
    let watch_x = tokio::spawn(watch(ex, end, "x"));
    let watch_y = tokio::spawn(watch(ey, end, "y"));
    let mut flooders = Vec::new();
    for _ in 0..FLOODERS {
        let (x, batch) = (x.clone(), plan.batch);
        flooders.push(tokio::spawn(async move {
            let payload = Bytes::from(vec![0xF1u8; FLOOD_PAYLOAD]);
            while Instant::now() < end {
                if let Err(e) = x
                    .send_batch("a", CHANNEL, vec![payload.clone(); batch])
                    .await
                {
                    // Not ready: the row counts that as a false not-ready; keep flooding.
                    tracing::debug!(error = %e, "flood send refused");
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for f in flooders {
        f.await?;
    }
    let (a_left, delivered) = watch_a.await??;
    let (x_left, _) = watch_x.await??;
    let (y_left, _) = watch_y.await??;
    stop.store(true, Ordering::Relaxed);
    let probes = prober
        .join()
        .map_err(|_| anyhow::anyhow!("the prober panicked"))??;
    let elapsed = t0.elapsed().as_secs_f64();
    eprintln!(
        "P4: {} s flood, {delivered} records delivered to a ({:.0}/s); q: {} probes answered, \
         {} unanswered for 15 s{}; left ready: a {a_left}, x {x_left}, y {y_left}",
        plan.flood.as_secs(),
        delivered as f64 / elapsed,
        probes.rtt_ms.len(),
        probes.lost,
        if probes.closed { ", closed by a" } else { "" }
    );
    a.shutdown().await?;
    x.shutdown().await?;
    y.shutdown().await?;
    let mut rtt_ms = probes.rtt_ms;
    rtt_ms.sort_by(f64::total_cmp);
    if rtt_ms.is_empty() {
        bail!("the quiet peer's probes got no ACK at all");
    }
    Ok(Flood {
        rtt_ms,
        false_not_ready: a_left + x_left + y_left + probes.lost + u64::from(probes.closed),
        flood_rate: delivered as f64 / elapsed,
        flood_delivered: delivered,
    })
}

/// Takes `events` until `end`: (state changes out of ready, deliveries).
async fn watch(mut events: EventStream, end: Instant, who: &str) -> Result<(u64, u64)> {
    let (mut left, mut delivered) = (0u64, 0u64);
    let end = tokio::time::Instant::from_std(end);
    loop {
        let batch = tokio::select! {
            b = events.recv() => b.with_context(|| format!("events of {who} ended"))?,
            _ = tokio::time::sleep_until(end) => return Ok((left, delivered)),
        };
        for ev in batch {
            match ev {
                NodeEvent::Delivery(_) => delivered += 1,
                NodeEvent::State(s) if s.state != ConnState::Ready => {
                    eprintln!(
                        "P4: {who}: {} left ready: {:?} {}",
                        s.link, s.reason, s.detail
                    );
                    left += 1;
                }
                // State changes into ready, discovery events: not a false not-ready.
                _ => {}
            }
        }
    }
}

/// What the quiet raw peer saw.
struct Probes {
    rtt_ms: Vec<f64>,
    /// Probes unanswered for the peer deadline.
    lost: u64,
    /// Whether `a` closed `q`'s connection (a false not-ready; `q` stops probing then).
    closed: bool,
}

/// The quiet raw peer `q`: dials `a`'s Application lane with a DEALER, says HELLO, then
/// probes every [`PROBE_EVERY`] and ACKs `a`'s probes until `stop`.
fn probe(bind: &RouteMeshBind, stop: &AtomicBool) -> Result<Probes> {
    let ctx = zmq::Context::new();
    let s = ctx.socket(zmq::DEALER)?;
    s.set_linger(0)?;
    s.set_sndhwm(zmesh::runtime::socket::HWM)?;
    s.set_rcvhwm(zmesh::runtime::socket::HWM)?;
    s.connect(&bind.application)?;
    let hello = Record::Hello(Hello {
        lane: Lane::Application,
        rid: Name::new("q")?,
        generation: NonZeroU64::new(0x0051_0000_0001).context("generation")?,
        security_identity: Label::new("q")?,
        expect_rid: Some(Name::new("a")?),
        expect_generation: None,
        config_generation: 0,
        memberships: Memberships::new(Vec::new())?,
    });
    s.send_multipart(hello.encode(), 0)?;
    let limit = Instant::now() + SETUP_LIMIT;
    loop {
        if s.poll(zmq::POLLIN, 100)? > 0 {
            match Record::decode(&s.recv_multipart(0)?) {
                Ok(Record::Welcome(_)) => break,
                Ok(Record::Reject(r)) => bail!("a rejected the quiet peer: {r:?}"),
                _ => {}
            }
        }
        if Instant::now() > limit {
            bail!("no WELCOME for the quiet peer within {SETUP_LIMIT:?}");
        }
    }
    let mut p = Probes {
        rtt_ms: Vec::new(),
        lost: 0,
        closed: false,
    };
    let mut next_id = 1u64;
    // The probe in flight: its id and when it left.
    let mut pending: Option<(u64, Instant)> = None;
    let mut next_probe = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if let Some((_, sent)) = pending {
            if now.duration_since(sent) >= PEER_DEADLINE {
                // A zmesh peer would take `a` out of ready here.
                p.lost += 1;
                pending = None;
            }
        }
        if pending.is_none() && now >= next_probe {
            let id = NonZeroU64::new(next_id).context("probe id")?;
            next_id += 1;
            s.send(&wire::encode_probe(id)[..], zmq::DONTWAIT)?;
            pending = Some((id.get(), now));
            next_probe = now + PROBE_EVERY;
        }
        let wait = next_probe.saturating_duration_since(Instant::now());
        let wait_ms = i64::try_from(wait.as_millis())
            .unwrap_or(i64::MAX)
            .clamp(1, 50);
        if s.poll(zmq::POLLIN, wait_ms)? == 0 {
            continue;
        }
        while let Ok(frames) = s.recv_multipart(zmq::DONTWAIT) {
            let got = Instant::now();
            match Record::decode(&frames) {
                Ok(Record::Ack { id }) => {
                    if let Some((want, sent)) = pending {
                        if id.get() == want {
                            p.rtt_ms.push(millis(got.duration_since(sent)));
                            pending = None;
                        }
                    }
                }
                Ok(Record::Probe { id }) => {
                    s.send(&wire::encode_ack(id)[..], zmq::DONTWAIT)?;
                }
                Ok(Record::Close { reason }) => {
                    // Taken out of ready: counted with the false not-ready, not an error of
                    // the bench, so that the row still reports what it measured.
                    eprintln!("P4: a closed the quiet peer's connection: {reason:?}");
                    p.closed = true;
                    return Ok(p);
                }
                _ => {}
            }
        }
    }
    Ok(p)
}

/// The p50, p99 and max of sorted samples.
pub(crate) fn summary(sorted: &[f64]) -> (f64, f64, f64) {
    (
        quantile(sorted, 0.5),
        quantile(sorted, 0.99),
        sorted.last().copied().unwrap_or(f64::NAN),
    )
}
