//! Classic fanout (PUB/SUB, MISSION T3) between two in-process nodes over ipc: `sub`
//! subscribes to `pub`'s publisher endpoint, becomes ready on the first beacon (the publisher
//! sends one as soon as a subscriber joins, and one every 5 s), receives a few records (one
//! way: fanout has no replies) and never sees a beacon as a record; then both nodes shut down.
//! Run with `cargo run --example fanout`.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::runtime::{EventStream, Node, NodeEvent};

/// Longest wait for any one step (readiness waits for a beacon: milliseconds after the join,
/// at most 5 s from a publisher without beacon on join).
const LIMIT: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<()> {
    // A fresh ipc endpoint (a socket file in the temp directory, unique to this process).
    let path = std::env::temp_dir().join(format!("zmesh-fanout-{}.sock", std::process::id()));
    let endpoint = format!("ipc://{}", path.display());

    let mut p = NodeConfig::new("pub");
    p.publisher = Some(Endpoint::new(endpoint.clone()));
    let publisher = Node::start(p).await?;
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![Endpoint::new(endpoint)];
    let subscriber = Node::start(s).await?;
    let mut events = subscriber.take_events().context("events of sub")?;

    println!("waiting for the publisher's beacon (sent when a subscriber joins)");
    until("sub", &mut events, is_ready).await?;

    for (topic, price) in [
        ("prices.eur", "1.08"),
        ("prices.gbp", "0.86"),
        ("prices.chf", "0.97"),
    ] {
        publisher.publish(topic.as_bytes(), price)?;
        until("sub", &mut events, |e| matches!(e, NodeEvent::Delivery(_))).await?;
    }
    // The beacon's topic is reserved: publishing on it is refused (MISSION L4).
    let refused = publisher.publish(&[0x01, 0x5A, 0x4C, 0x46, 0x31], "x");
    println!("publish on the beacon topic: {refused:?}");
    subscriber.shutdown().await?;
    publisher.shutdown().await?;
    println!("done: both nodes shut down");
    Ok(())
}

/// Prints `node`'s events until `done` is true for one of them; fails after [`LIMIT`].
async fn until(
    node: &str,
    events: &mut EventStream,
    mut done: impl FnMut(&NodeEvent) -> bool,
) -> Result<()> {
    let wait = async {
        while let Some(batch) = events.recv().await {
            let mut hit = false;
            for ev in &batch {
                match ev {
                    NodeEvent::State(s) => println!("[{node}] {} is {}", s.link, s.state),
                    NodeEvent::Delivery(d) => println!(
                        "[{node}] from {:?} on {}: {}",
                        d.source,
                        String::from_utf8_lossy(&d.channel),
                        String::from_utf8_lossy(&d.payload)
                    ),
                    other => println!("[{node}] {other:?}"),
                }
                hit |= done(ev);
            }
            if hit {
                return Ok(());
            }
        }
        bail!("[{node}] event stream ended")
    };
    tokio::time::timeout(LIMIT, wait)
        .await
        .with_context(|| format!("[{node}] nothing expected within {LIMIT:?}"))?
}

fn is_ready(e: &NodeEvent) -> bool {
    matches!(e, NodeEvent::State(s) if s.state.as_str() == "ready")
}
