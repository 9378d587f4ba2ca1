//! P1: one-way throughput. Raw DEALER -> ROUTER against zmesh `Node::send` on the RouteMesh
//! Application lane (liveness and receive caps on), counted where the records arrive: the raw
//! ROUTER's receive loop, the peer node's application event stream.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use zmesh::runtime::{NodeEvent, SendError};

use super::{bind_any, Pair, Plan, Series, CHANNEL};

/// The high-water mark both sides use: the same as zmesh's per-pipe HWM.
const HWM: i32 = zmesh::runtime::socket::HWM;

/// `plan.runs` runs of raw and zmesh, interleaved; records per second.
pub(crate) async fn oneway(plan: &Plan, size: usize) -> Result<(Series, Series)> {
    let (mut raw, mut zm) = (Series::default(), Series::default());
    for run in 0..plan.runs {
        let n = plan.messages;
        let r = tokio::task::spawn_blocking(move || raw_oneway(size, n)).await??;
        let z = zmesh_oneway(size, n, plan.senders).await?;
        eprintln!(
            "P1 {size} B run {}: raw {:.0} msg/s, zmesh {:.0} msg/s",
            run + 1,
            r,
            z
        );
        raw.push(r);
        zm.push(z);
    }
    Ok((raw, zm))
}

/// A DEALER sends `n` records of `size` bytes to a ROUTER as fast as libzmq takes them; the
/// ROUTER counts them. Clock: first send to last receive.
fn raw_oneway(size: usize, n: u64) -> Result<f64> {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER)?;
    router.set_rcvhwm(HWM)?;
    router.set_linger(0)?;
    router.set_rcvtimeo(10_000)?;
    let ep = bind_any(&router)?;
    let dealer = ctx.socket(zmq::DEALER)?;
    dealer.set_sndhwm(HWM)?;
    dealer.set_linger(0)?;
    dealer.connect(&ep)?;
    // One record through before the clock starts: the connection is up.
    dealer.send(&b"warm-up"[..], 0)?;
    router.recv_multipart(0).context("raw warm-up")?;

    let payload = vec![0xA5u8; size];
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
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("raw sender panicked"))??;
    Ok(n as f64 / elapsed.as_secs_f64())
}

/// Node `a` sends `n` records of `size` bytes to node `b` from `senders` concurrent tasks
/// (each `Node::send` is a round trip to the I/O thread, so one task alone would measure that
/// round trip). A send refused as `WouldBlock` (pipe full: nothing was queued) is retried.
/// Clock: first send to the last delivery taken from `b`'s event stream.
async fn zmesh_oneway(size: usize, n: u64, senders: usize) -> Result<f64> {
    let Pair { a, b, ea, mut eb } = Pair::mesh().await?;
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
            let mut blocked = 0u64;
            for _ in 0..count {
                loop {
                    match a.send("b", CHANNEL, payload.clone()).await {
                        Ok(()) => break,
                        Err(SendError::WouldBlock(_)) => {
                            blocked += 1;
                            tokio::task::yield_now().await;
                        }
                        Err(e) => bail!("send failed: {e}"),
                    }
                }
            }
            Ok(blocked)
        }));
    }
    let mut blocked = 0;
    for t in tasks {
        blocked += t.await??;
    }
    let (t_end, eb) = counter.await??;
    let rate = n as f64 / t_end.duration_since(t0).as_secs_f64();
    if blocked > 0 {
        eprintln!("  (zmesh: {blocked} sends refused as pipe full and retried)");
    }
    Pair { a, b, ea, eb }.shutdown().await?;
    Ok(rate)
}
