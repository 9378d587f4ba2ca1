//! ClientServer (DEALER to ROUTER, MISSION T2) between two in-process nodes on 127.0.0.1:
//! `cli` dials the server of channel "orders" run by `srv`, the lane becomes ready, the client
//! sends orders and the server answers each one, then both nodes shut down.
//! Run with `cargo run --example client_server`.

use std::net::TcpListener;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use zmesh::config::NodeConfig;
use zmesh::runtime::{EventStream, Node, NodeEvent};

/// Longest wait for any one step.
const LIMIT: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<()> {
    let ep = free_tcp()?;
    let srv = Node::start(NodeConfig::from_toml(&format!(
        "rid = \"srv\"\nmemberships = [{{ role = \"server\", channel = \"orders\" }}]\n\
         [server]\nendpoint = \"{ep}\"\n"
    ))?)
    .await?;
    let cli = Node::start(NodeConfig::from_toml(&format!(
        "rid = \"cli\"\n[[servers]]\nchannel = \"orders\"\nendpoint = \"{ep}\"\nrid = \"srv\"\n"
    ))?)
    .await?;
    let mut es = srv.take_events().context("events of srv")?;
    let mut ec = cli.take_events().context("events of cli")?;

    // Ready on both ends: the client after WELCOME, the server after admitting the client.
    until("cli", &mut ec, is_ready).await?;
    until("srv", &mut es, is_ready).await?;

    for i in 1..=3 {
        // The client picks a ready server of the channel; the server answers by client RID.
        cli.send_to_server("orders", format!("order #{i}")).await?;
        until("srv", &mut es, |e| matches!(e, NodeEvent::Delivery(_))).await?;
        srv.send("cli", "orders", format!("receipt #{i}")).await?;
        until("cli", &mut ec, |e| matches!(e, NodeEvent::Delivery(_))).await?;
    }
    cli.shutdown().await?;
    srv.shutdown().await?;
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

/// A free tcp endpoint on 127.0.0.1 (the OS picks the port).
fn free_tcp() -> Result<String> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(format!("tcp://127.0.0.1:{}", l.local_addr()?.port()))
}
