//! P7 churn: one node with N inbound RouteMesh connections on its Application endpoint while
//! a few other connections of that endpoint reconnect, [`RATE`] per second: the records the
//! node sends to the N that stay (records that change nothing, as a disconnect sweep sends)
//! and its CPU, per reconnect. Both should not depend on N.
//!
//! The node is a `zmesh node` child process (`idle::NodeProcess`). The N connections are one
//! raw ROUTER socket in this process with a connection per fake peer (as `inbound` dials),
//! each of which says HELLO and sends one PROBE once welcomed (so the node has a probe of each
//! to repeat the ACK of), and answers the node's probes. The reconnecting ones are
//! [`CHURNERS`] raw ROUTER sockets of one connection each, closed (linger 0: a disconnect)
//! and dialled again with a fresh routing id, HELLO again, in turn.
//!
//! Counted on the N connections during the churn window: every ACK (none is owed: their one
//! PROBE was answered before the window) and every PROBE whose id the node already sent on
//! that connection. CPU: the node's time on CPU over the churn window minus that over an
//! equally long quiet window just before it (the N connections' own liveness), over the
//! reconnects. The figures are counted by the far ends, so any zmesh binary can be measured.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zmesh::proto::wire::{self, Hello, Label, Lane, Memberships, Name, Record};

use super::idle::{send, NodeProcess, PERIOD};
use super::{server_config, Plan};

/// The sizes measured (connections that stay).
pub(crate) const SIZES: [usize; 3] = [100, 1_000, 4_000];
/// The size of `--quick`.
const QUICK_SIZE: usize = 20;
/// Connections that reconnect, each a socket of its own.
const CHURNERS: usize = 10;
/// Reconnects per second, over all churners.
const RATE: u32 = 20;
/// The churn window, and the quiet window before it: one liveness period each, so that each
/// holds one round of the node's probes to the N connections (which all connected at once, so
/// their probes come due together) and the quiet window's subtraction takes it out.
const WINDOW: Duration = PERIOD;
/// Longest wait for a stage (all welcomed).
const LIMIT: Duration = Duration::from_secs(60);

/// One size's figures.
pub(crate) struct ChurnRow {
    pub connections: usize,
    pub reconnects: u64,
    pub records: u64,
    pub records_per_reconnect: f64,
    pub cpu_us_per_reconnect: f64,
}

pub(crate) async fn churn(plan: &Plan) -> Result<Vec<ChurnRow>> {
    let plan = plan.clone();
    tokio::task::spawn_blocking(move || churn_blocking(&plan)).await?
}

fn churn_blocking(plan: &Plan) -> Result<Vec<ChurnRow>> {
    let sizes: Vec<usize> = if plan.quick {
        vec![QUICK_SIZE]
    } else {
        SIZES.to_vec()
    };
    let dir = std::env::temp_dir().join(format!("zmesh-bench-churn-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    for n in sizes {
        rows.push(one_size(&dir, n)?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

/// A fake peer's HELLO on the Application lane.
fn hello(rid: &str, generation: u64) -> Result<Vec<Vec<u8>>> {
    Ok(Record::Hello(Hello {
        lane: Lane::Application,
        security_identity: Label::new(rid)?,
        rid: Name::new(rid)?,
        generation: std::num::NonZeroU64::new(generation).context("generation")?,
        expect_rid: None,
        expect_generation: None,
        config_generation: 0,
        memberships: Memberships::new(Vec::new())?,
    })
    .encode())
}

/// A connection that reconnects.
struct Churner {
    socket: zmq::Socket,
    route: Vec<u8>,
    hello: Vec<Vec<u8>>,
    hello_sent: bool,
    welcomed: bool,
}

fn dial_churner(ctx: &zmq::Context, endpoint: &str, j: usize, seq: u64) -> Result<Churner> {
    let socket = ctx.socket(zmq::ROUTER)?;
    socket.set_linger(0)?;
    socket.set_router_mandatory(true)?;
    let mut id = vec![b'z', b'A'];
    id.extend_from_slice(&(0xC0_0000 + j as u64).to_be_bytes());
    id.extend_from_slice(&seq.to_be_bytes());
    socket.set_identity(&id)?;
    let route = b"node".to_vec();
    socket.set_connect_routing_id(&route)?;
    socket.connect(endpoint)?;
    Ok(Churner {
        socket,
        route,
        hello: hello(&format!("churn{j}"), 0xC0_0000 + j as u64)?,
        hello_sent: false,
        welcomed: false,
    })
}

/// What the N connections saw.
#[derive(Default)]
struct Seen {
    welcomed: usize,
    acked: usize,
    /// ACKs and repeated PROBEs, counted once `counting`.
    records: u64,
    counting: bool,
}

fn one_size(dir: &std::path::Path, n: usize) -> Result<ChurnRow> {
    let mut cfg = server_config("churn")?;
    cfg.max_unadmitted = n + CHURNERS + 16;
    let endpoint = cfg
        .route_mesh
        .as_ref()
        .context("the node binds its lanes")?
        .application
        .clone();
    let node = NodeProcess::start(dir, &cfg)?;
    node.wait_ready(0)?;
    let ctx = zmq::Context::new();
    let stay = ctx.socket(zmq::ROUTER)?;
    stay.set_linger(0)?;
    stay.set_router_mandatory(true)?;
    stay.set_sndhwm(zmesh::runtime::socket::HWM)?;
    stay.set_rcvhwm(zmesh::runtime::socket::HWM)?;
    let mut unsent = Vec::with_capacity(n);
    for i in 0..n {
        let mut id = vec![b'z', b'A'];
        id.extend_from_slice(&(0xD0_0000 + i as u64).to_be_bytes());
        id.extend_from_slice(&(i as u64).to_be_bytes());
        stay.set_identity(&id)?;
        let route = format!("s{i}").into_bytes();
        stay.set_connect_routing_id(&route)?;
        stay.connect(&endpoint)?;
        unsent.push((route, hello(&format!("stay{i}"), 0xD0_0000 + i as u64)?));
    }
    let mut churners = (0..CHURNERS)
        .map(|j| dial_churner(&ctx, &endpoint, j, 0))
        .collect::<Result<Vec<_>>>()?;
    let mut seq = 1u64;
    let mut seen = Seen::default();
    // The last probe id the node sent on each staying connection.
    let mut probes: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut next_probe = 1u64;
    let mut pump = |stay: &zmq::Socket,
                    unsent: &mut Vec<(Vec<u8>, Vec<Vec<u8>>)>,
                    churners: &mut [Churner],
                    seen: &mut Seen|
     -> Result<()> {
        unsent.retain(|(route, frames)| send(stay, route, frames).is_err());
        while let Ok(frames) = stay.recv_multipart(zmq::DONTWAIT) {
            let Some((route, rec)) = frames.split_first() else {
                continue;
            };
            match Record::decode(rec) {
                Ok(Record::Welcome(_)) => {
                    seen.welcomed += 1;
                    let id = std::num::NonZeroU64::new(next_probe).context("id")?;
                    next_probe += 1;
                    let _ = send(stay, route, &[wire::encode_probe(id).to_vec()]);
                }
                Ok(Record::Ack { .. }) => {
                    seen.acked += 1;
                    seen.records += u64::from(seen.counting);
                }
                Ok(Record::Probe { id }) => {
                    let repeat = probes.insert(route.clone(), id.get()) == Some(id.get());
                    seen.records += u64::from(seen.counting && repeat);
                    let _ = send(stay, route, &[wire::encode_ack(id).to_vec()]);
                }
                _ => {}
            }
        }
        for c in churners.iter_mut() {
            if !c.hello_sent {
                c.hello_sent = send(&c.socket, &c.route, &c.hello).is_ok();
            }
            while let Ok(frames) = c.socket.recv_multipart(zmq::DONTWAIT) {
                match Record::decode(frames.get(1..).unwrap_or_default()) {
                    Ok(Record::Welcome(_)) => c.welcomed = true,
                    Ok(Record::Probe { id }) => {
                        let _ = send(&c.socket, &c.route, &[wire::encode_ack(id).to_vec()]);
                    }
                    _ => {}
                }
            }
        }
        let mut items: Vec<zmq::PollItem> = std::iter::once(stay.as_poll_item(zmq::POLLIN))
            .chain(churners.iter().map(|c| c.socket.as_poll_item(zmq::POLLIN)))
            .collect();
        zmq::poll(&mut items, 1)?;
        Ok(())
    };
    // Everyone welcomed, and the staying connections' probes answered.
    let t0 = Instant::now();
    while seen.acked < n || churners.iter().any(|c| !c.welcomed) {
        anyhow::ensure!(
            t0.elapsed() < LIMIT,
            "P7 churn {n}: {} of {n} welcomed, {} acked",
            seen.welcomed,
            seen.acked
        );
        pump(&stay, &mut unsent, &mut churners, &mut seen)?;
    }
    // The quiet window, then the churn window.
    let quiet0 = node.cpu()?;
    let t = Instant::now();
    while t.elapsed() < WINDOW {
        pump(&stay, &mut unsent, &mut churners, &mut seen)?;
    }
    let quiet1 = node.cpu()?;
    let quiet_s = t.elapsed().as_secs_f64();
    seen.counting = true;
    let mut reconnects = 0u64;
    let t = Instant::now();
    let every = Duration::from_secs(1) / RATE;
    let mut next = t;
    let mut turn = 0;
    while t.elapsed() < WINDOW {
        if Instant::now() >= next {
            // The next churner that is welcomed reconnects (one that is not yet waits).
            let j = turn % CHURNERS;
            if churners[j].welcomed {
                churners[j] = dial_churner(&ctx, &endpoint, j, seq)?;
                seq += 1;
                reconnects += 1;
                turn += 1;
            }
            next += every;
        }
        pump(&stay, &mut unsent, &mut churners, &mut seen)?;
    }
    let churn1 = node.cpu()?;
    let churn_s = t.elapsed().as_secs_f64();
    // Records the node sent within the window that are still on their way.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(600) {
        pump(&stay, &mut unsent, &mut churners, &mut seen)?;
    }
    let quiet_ns = (quiet1.on_cpu_ns - quiet0.on_cpu_ns) as f64 / quiet_s * churn_s;
    let churn_ns = (churn1.on_cpu_ns - quiet1.on_cpu_ns) as f64;
    let per = reconnects.max(1) as f64;
    let row = ChurnRow {
        connections: n,
        reconnects,
        records: seen.records,
        records_per_reconnect: seen.records as f64 / per,
        cpu_us_per_reconnect: (churn_ns - quiet_ns).max(0.0) / 1e3 / per,
    };
    eprintln!(
        "P7 churn {n} connections: {reconnects} reconnects in {churn_s:.1} s, {} records to the \
         staying connections ({:.1} per reconnect), {:.0} us CPU per reconnect (quiet {:.2} % core)",
        row.records,
        row.records_per_reconnect,
        row.cpu_us_per_reconnect,
        quiet_ns / churn_s / 1e7
    );
    drop(node);
    Ok(row)
}
