//! P3: fanout throughput, 64 B. Raw PUB -> SUB against zmesh `Node::publish` (and again
//! `Node::publish_batch`) -> the subscriber node's event stream.
//!
//! PUB never blocks: at the high-water mark libzmq drops records for a slow subscriber (the
//! fanout loss rule). So the publisher sends `messages` records as fast as it can, the
//! receiver counts what arrives until nothing came for [`IDLE_END`], and the result is the
//! delivery rate (records received / time from the first send to the last receive), with the
//! delivered fraction beside it, and the CPU time of the whole process (every thread) per
//! record sent, from the first send until the receiver stopped counting.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::runtime::{Node, NodeEvent};

use super::{bind_any, free_tcp, process_cpu, Plan, Series, SETUP_LIMIT};

const HWM: i32 = zmesh::runtime::socket::HWM;
/// The receiver stops counting after this long without a record.
const IDLE_END: Duration = Duration::from_millis(500);
const PAYLOAD: usize = 64;
const TOPIC: &[u8] = b"bench";

pub(crate) struct Fanout {
    pub raw: Series,
    pub zmesh: Series,
    pub batch: Series,
    pub raw_delivered: Series,
    pub zmesh_delivered: Series,
    pub batch_delivered: Series,
    pub raw_cpu_us: Series,
    pub zmesh_cpu_us: Series,
    pub batch_cpu_us: Series,
}

/// One measurement: records/s delivered, records delivered, CPU us per record sent.
struct Run {
    rate: f64,
    got: u64,
    cpu_us: f64,
}

pub(crate) async fn throughput(plan: &Plan) -> Result<Fanout> {
    let mut f = Fanout {
        raw: Series::default(),
        zmesh: Series::default(),
        batch: Series::default(),
        raw_delivered: Series::default(),
        zmesh_delivered: Series::default(),
        batch_delivered: Series::default(),
        raw_cpu_us: Series::default(),
        zmesh_cpu_us: Series::default(),
        batch_cpu_us: Series::default(),
    };
    for run in 0..plan.runs {
        let n = plan.messages;
        let r = tokio::task::spawn_blocking(move || raw_fanout(n)).await??;
        let z = zmesh_fanout(n, 1).await?;
        let b = zmesh_fanout(n, plan.batch).await?;
        eprintln!(
            "P3 run {}: raw {:.0} msg/s ({} of {n} delivered, {:.2} us CPU/msg), zmesh publish \
             {:.0} msg/s ({} of {n} delivered, {:.2} us CPU/msg), zmesh publish_batch {:.0} \
             msg/s ({} of {n} delivered, {:.2} us CPU/msg)",
            run + 1,
            r.rate,
            r.got,
            r.cpu_us,
            z.rate,
            z.got,
            z.cpu_us,
            b.rate,
            b.got,
            b.cpu_us
        );
        f.raw.push(r.rate);
        f.zmesh.push(z.rate);
        f.batch.push(b.rate);
        f.raw_delivered.push(r.got as f64 / n as f64);
        f.zmesh_delivered.push(z.got as f64 / n as f64);
        f.batch_delivered.push(b.got as f64 / n as f64);
        f.raw_cpu_us.push(r.cpu_us);
        f.zmesh_cpu_us.push(z.cpu_us);
        f.batch_cpu_us.push(b.cpu_us);
    }
    Ok(f)
}

/// Raw PUB -> SUB.
fn raw_fanout(n: u64) -> Result<Run> {
    let ctx = zmq::Context::new();
    let publ = ctx.socket(zmq::PUB)?;
    publ.set_sndhwm(HWM)?;
    publ.set_linger(0)?;
    let ep = bind_any(&publ)?;
    let sub = ctx.socket(zmq::SUB)?;
    sub.set_rcvhwm(HWM)?;
    sub.set_linger(0)?;
    sub.set_subscribe(b"")?;
    sub.connect(&ep)?;
    // Slow joiner: publish warm-up records until one arrives, then drain them.
    let limit = Instant::now() + SETUP_LIMIT;
    loop {
        publ.send_multipart([&b"warm"[..], &b"w"[..]], 0)?;
        if sub.poll(zmq::POLLIN, 10)? > 0 {
            break;
        }
        anyhow::ensure!(Instant::now() < limit, "raw SUB never received a record");
    }
    while sub.poll(zmq::POLLIN, 50)? > 0 {
        sub.recv_multipart(0)?;
    }

    let receiver = std::thread::spawn(move || -> Result<(u64, Instant)> {
        sub.set_rcvtimeo(IDLE_END.as_millis() as i32)?;
        let mut msg = zmq::Message::new();
        let (mut got, mut last) = (0u64, Instant::now());
        while got < n {
            match sub.recv(&mut msg, 0) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN) => break,
                Err(e) => return Err(e.into()),
            }
            while sub.get_rcvmore()? {
                sub.recv(&mut msg, 0)?;
            }
            got += 1;
            last = Instant::now();
        }
        Ok((got, last))
    });
    let payload = [0xA5u8; PAYLOAD];
    let cpu0 = process_cpu()?;
    let t0 = Instant::now();
    for _ in 0..n {
        publ.send(TOPIC, zmq::SNDMORE)?;
        publ.send(&payload[..], 0)?;
    }
    let (got, last) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("raw receiver panicked"))??;
    Ok(Run::new(
        n,
        got,
        last.duration_since(t0),
        process_cpu()? - cpu0,
    ))
}

impl Run {
    fn new(sent: u64, got: u64, elapsed: Duration, cpu: Duration) -> Run {
        Run {
            rate: got as f64 / elapsed.as_secs_f64(),
            got,
            cpu_us: cpu.as_secs_f64() * 1e6 / sent as f64,
        }
    }
}

/// zmesh publisher node -> subscriber node, with `Node::publish` if `batch` is 1, else with
/// `Node::publish_batch` of `batch` records.
async fn zmesh_fanout(n: u64, batch: usize) -> Result<Run> {
    let ep = free_tcp()?;
    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(ep.clone()));
    let publisher = Node::start(p).await?;
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(ep)];
    let subscriber = Node::start(s).await?;
    let mut events = subscriber.take_events().context("events")?;
    // The subscription is ready on its first record: publish warm-up records until one is
    // delivered (rather than waiting up to 5 s for a beacon), then drain.
    let limit = tokio::time::Instant::now() + SETUP_LIMIT;
    'warm: loop {
        publisher.publish(b"warm", "w")?;
        let wait = tokio::time::sleep(Duration::from_millis(10));
        tokio::pin!(wait);
        loop {
            tokio::select! {
                batch = events.recv() => {
                    let batch = batch.context("event stream ended")?;
                    if batch.iter().any(|e| matches!(e, NodeEvent::Delivery(_))) {
                        break 'warm;
                    }
                }
                _ = &mut wait => break,
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < limit,
            "zmesh subscriber never received a record"
        );
    }
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(50), events.recv()).await {}

    let counter = tokio::spawn(async move {
        let (mut got, mut last) = (0u64, Instant::now());
        while got < n {
            match tokio::time::timeout(IDLE_END, events.recv()).await {
                Ok(Some(batch)) => {
                    got += batch
                        .iter()
                        .filter(|e| matches!(e, NodeEvent::Delivery(_)))
                        .count() as u64;
                    last = Instant::now();
                }
                Ok(None) | Err(_) => break,
            }
        }
        (got, last)
    });
    let payload = Bytes::from(vec![0xA5u8; PAYLOAD]);
    let cpu0 = process_cpu()?;
    let t0 = Instant::now();
    let publisher2 = publisher.clone();
    tokio::task::spawn_blocking(move || -> Result<()> {
        if batch == 1 {
            for _ in 0..n {
                publisher2.publish(TOPIC, payload.clone())?;
            }
        } else {
            let mut left = n;
            while left > 0 {
                let take = left.min(batch as u64);
                publisher2.publish_batch(TOPIC, vec![payload.clone(); take as usize])?;
                left -= take;
            }
        }
        Ok(())
    })
    .await??;
    let (got, last) = counter.await?;
    let cpu = process_cpu()? - cpu0;
    publisher.shutdown().await?;
    subscriber.shutdown().await?;
    Ok(Run::new(n, got, last.duration_since(t0), cpu))
}
