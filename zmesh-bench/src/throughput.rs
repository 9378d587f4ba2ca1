//! P1: one-way throughput. Raw DEALER -> ROUTER against zmesh `Node::send` on the RouteMesh
//! Application lane (liveness and receive caps on), counted where the records arrive: the raw
//! ROUTER's receive loop, the peer node's application event stream.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use zmesh::runtime::NodeEvent;

use super::{bind_any, process_cpu, Curve, Pair, Plan, Series, CHANNEL};

/// The high-water mark both sides use: the same as zmesh's per-pipe HWM.
const HWM: i32 = zmesh::runtime::socket::HWM;

/// Records per second, and CPU time of the whole process per record (all threads: senders,
/// receivers, I/O threads), in microseconds.
#[derive(Default)]
pub(crate) struct OneWay {
    pub raw: Series,
    pub zmesh: Series,
    pub batch: Series,
    pub raw_cpu_us: Series,
    pub zmesh_cpu_us: Series,
    pub batch_cpu_us: Series,
}

/// A rate and the CPU per record it cost.
struct Run {
    rate: f64,
    cpu_us: f64,
}

impl Run {
    fn new(n: u64, elapsed: Duration, cpu: Duration) -> Run {
        Run {
            rate: n as f64 / elapsed.as_secs_f64(),
            cpu_us: cpu.as_secs_f64() * 1e6 / n as f64,
        }
    }
}

/// CURVE: raw DEALER -> ROUTER with CURVE against zmesh `send_batch` of a
/// pair in `mode = "curve"`, `plan.runs` runs interleaved; records per second and CPU per
/// record of each.
pub(crate) async fn oneway_curve(plan: &Plan, size: usize) -> Result<OneWay> {
    let curve = Curve::new()?;
    let mut o = OneWay::default();
    for run in 0..plan.runs {
        let n = plan.messages;
        let c = curve.clone();
        let r = tokio::task::spawn_blocking(move || raw_oneway(size, n, Some(c))).await??;
        let b = zmesh_oneway(size, n, plan.senders, plan.batch, Some(&curve)).await?;
        eprintln!(
            "C1 {size} B run {} (CURVE): raw {:.0} msg/s ({:.2} us CPU/msg), zmesh send_batch \
             {:.0} msg/s ({:.2} us CPU/msg)",
            run + 1,
            r.rate,
            r.cpu_us,
            b.rate,
            b.cpu_us
        );
        o.raw.push(r.rate);
        o.raw_cpu_us.push(r.cpu_us);
        o.batch.push(b.rate);
        o.batch_cpu_us.push(b.cpu_us);
    }
    Ok(o)
}

/// `plan.runs` runs of raw and zmesh, interleaved.
pub(crate) async fn oneway(plan: &Plan, size: usize) -> Result<OneWay> {
    let mut o = OneWay::default();
    for run in 0..plan.runs {
        let n = plan.messages;
        let r = tokio::task::spawn_blocking(move || raw_oneway(size, n, None)).await??;
        let z = zmesh_oneway(size, n, plan.senders, 1, None).await?;
        let b = zmesh_oneway(size, n, plan.senders, plan.batch, None).await?;
        eprintln!(
            "P1 {size} B run {}: raw {:.0} msg/s ({:.2} us CPU/msg), zmesh send {:.0} msg/s \
             ({:.2} us CPU/msg), zmesh send_batch {:.0} msg/s ({:.2} us CPU/msg)",
            run + 1,
            r.rate,
            r.cpu_us,
            z.rate,
            z.cpu_us,
            b.rate,
            b.cpu_us
        );
        o.raw.push(r.rate);
        o.zmesh.push(z.rate);
        o.batch.push(b.rate);
        o.raw_cpu_us.push(r.cpu_us);
        o.zmesh_cpu_us.push(z.cpu_us);
        o.batch_cpu_us.push(b.cpu_us);
    }
    Ok(o)
}

/// zmesh's 64 B `send_batch` row of P1 alone, `plan.runs` times, without raw libzmq or the
/// other rows: a small run to profile (`--only p1batch --messages 20000` under callgrind).
pub(crate) async fn oneway_batch_only(plan: &Plan, size: usize) -> Result<OneWay> {
    let mut o = OneWay::default();
    for run in 0..plan.runs {
        let b = zmesh_oneway(size, plan.messages, plan.senders, plan.batch, None).await?;
        eprintln!(
            "P1 {size} B run {} (send_batch only): zmesh send_batch {:.0} msg/s ({:.2} us \
             CPU/msg)",
            run + 1,
            b.rate,
            b.cpu_us
        );
        o.batch.push(b.rate);
        o.batch_cpu_us.push(b.cpu_us);
    }
    Ok(o)
}

/// A DEALER sends `n` records of `size` bytes to a ROUTER as fast as libzmq takes them; the
/// ROUTER counts them. Clock: first send to last receive.
fn raw_oneway(size: usize, n: u64, curve: Option<Curve>) -> Result<Run> {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER)?;
    router.set_rcvhwm(HWM)?;
    router.set_linger(0)?;
    router.set_rcvtimeo(10_000)?;
    if let Some(c) = &curve {
        c.server(&router)?;
    }
    let ep = bind_any(&router)?;
    let dealer = ctx.socket(zmq::DEALER)?;
    dealer.set_sndhwm(HWM)?;
    dealer.set_linger(0)?;
    if let Some(c) = &curve {
        c.client(&dealer)?;
    }
    dealer.connect(&ep)?;
    // One record through before the clock starts: the connection is up.
    dealer.send(&b"warm-up"[..], 0)?;
    router.recv_multipart(0).context("raw warm-up")?;

    let payload = vec![0xA5u8; size];
    let cpu0 = process_cpu()?;
    let t0 = Instant::now();
    // The sender hands its socket back: with linger 0, closing it would drop what is still
    // queued.
    let sender = std::thread::spawn(move || -> Result<zmq::Socket> {
        for _ in 0..n {
            dealer.send(&payload[..], 0)?;
        }
        Ok(dealer)
    });
    let mut msg = zmq::Message::new();
    let mut got = 0u64;
    while got < n {
        // Routing-id frame, then the payload frame.
        router.recv(&mut msg, 0).context("raw receive")?;
        while router.get_rcvmore()? {
            router.recv(&mut msg, 0).context("raw receive")?;
        }
        got += 1;
    }
    let elapsed = t0.elapsed();
    let cpu = process_cpu()? - cpu0;
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("raw sender panicked"))??;
    Ok(Run::new(n, elapsed, cpu))
}

/// Node `a` sends `n` records of `size` bytes to node `b` from `senders` concurrent tasks,
/// with `Node::send` if `batch` is 1, else with `Node::send_batch` of `batch` records; both
/// queue on the link and wait while its queue is full.
/// Clock: first send to the last delivery taken from `b`'s event stream.
async fn zmesh_oneway(
    size: usize,
    n: u64,
    senders: usize,
    batch: usize,
    curve: Option<&Curve>,
) -> Result<Run> {
    let Pair { a, b, ea, mut eb } = Pair::mesh_with(curve).await?;
    let counter = tokio::spawn(async move {
        let mut got = 0u64;
        while got < n {
            let batch = tokio::time::timeout(Duration::from_secs(30), eb.recv())
                .await
                .context("zmesh deliveries stalled for 30 s")?
                .context("event stream ended")?;
            got += batch
                .iter()
                .filter(|e| matches!(e, NodeEvent::Delivery(_)))
                .count() as u64;
        }
        anyhow::Ok((Instant::now(), eb))
    });
    let payload = Bytes::from(vec![0xA5u8; size]);
    let cpu0 = process_cpu()?;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    let per = n / senders as u64;
    for i in 0..senders as u64 {
        let count = if i == 0 {
            n - per * (senders as u64 - 1)
        } else {
            per
        };
        let (a, payload) = (a.clone(), payload.clone());
        tasks.push(tokio::spawn(async move {
            let mut left = count;
            while left > 0 {
                let take = left.min(batch as u64);
                if batch == 1 {
                    if let Err(e) = a.send("b", CHANNEL, payload.clone()).await {
                        bail!("send failed: {e}");
                    }
                } else {
                    let chunk = vec![payload.clone(); take as usize];
                    if let Err(e) = a.send_batch("b", CHANNEL, chunk).await {
                        bail!("send_batch failed: {e}");
                    }
                }
                left -= take;
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let (t_end, eb) = counter.await??;
    let run = Run::new(n, t_end.duration_since(t0), process_cpu()? - cpu0);
    Pair { a, b, ea, eb }.shutdown().await?;
    Ok(run)
}
