//! RouteMesh (ROUTER-ROUTER, MISSION T1) between two in-process nodes on 127.0.0.1: `a` dials
//! `b`, both lanes (Application, Completion) become ready, one-way records go both ways, and
//! both nodes shut down. Run with `cargo run --example route_mesh`.

use std::net::TcpListener;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use zmesh::config::NodeConfig;
use zmesh::runtime::{EventStream, Node, NodeEvent};

/// Longest wait for any one step.
const LIMIT: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<()> {
    let (b_app, b_cpl) = (free_tcp()?, free_tcp()?);
    // RouteMesh needs a Server membership on one side of the pair (MISSION T4).
    let b = Node::start(NodeConfig::from_toml(&format!(
        "rid = \"b\"\nmemberships = [{{ role = \"server\", channel = \"chat\" }}]\n\
         [route_mesh]\napplication = \"{b_app}\"\ncompletion = \"{b_cpl}\"\n"
    ))?)
    .await?;
    let a = Node::start(NodeConfig::from_toml(&format!(
        "rid = \"a\"\n[[peers]]\nrid = \"b\"\napplication = \"{b_app}\"\ncompletion = \"{b_cpl}\"\n"
    ))?)
    .await?;
    let mut ea = a.take_events().context("events of a")?;
    let mut eb = b.take_events().context("events of b")?;

    // `a` dialled both lanes of `b`; `b` sees them as inbound connections.
    let mut ready = 0;
    until("a", &mut ea, |e| {
        ready += usize::from(is_ready(e));
        ready == 2
    })
    .await?;
    until("b", &mut eb, |e| {
        is_ready(e) && matches!(e, NodeEvent::State(s) if s.link.contains("application"))
    })
    .await?;

    for i in 1..=3 {
        a.send("b", "chat", format!("hello b #{i}")).await?;
        until("b", &mut eb, |e| matches!(e, NodeEvent::Delivery(_))).await?;
        b.send("a", "chat", format!("hello a #{i}")).await?;
        until("a", &mut ea, |e| matches!(e, NodeEvent::Delivery(_))).await?;
    }
    a.shutdown().await?;
    b.shutdown().await?;
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
