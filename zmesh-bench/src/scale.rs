//! P7: one node with N connections, for N = 1 000, 5 000 and 10 000: the time
//! until every link is ready, its idle CPU, and its file descriptors and memory per
//! connection, to show how they grow with N.
//!
//! The node is a `zmesh node` child process, as in P5 (`idle.rs`, whose publishers, fake
//! peers and node process this reuses): a fifth of the connections are fanout publishers
//! (raw PUB sockets in this process, beaconing), the rest RouteMesh lanes (two per peer) to
//! two raw ROUTER sockets in this process that answer HELLO and PROBE. Descriptors and
//! memory per connection are the loaded node's minus those of the same binary running a node
//! without links, over N.
//!
//! Then one size of RouteMesh lanes only ([`MESH_ONLY_SIZE`]): the connections a node dials
//! at [`FDS_PER_DIALLED`] descriptors each, without the fanout subscriptions'
//! [`FDS_PER_MONITORED`]. Last, one size of RouteMesh connections the node accepts
//! ([`INBOUND_SIZE`], fake peers dialling it: see `inbound`), one descriptor each, so that
//! 10 000 fit under a limit of 20 000; its baseline is the same node with its endpoints
//! bound and nobody connected.
//!
//! Descriptors: the node needs [`FDS_PER_DIALLED`] per dialled mesh lane and
//! [`FDS_PER_MONITORED`] per subscription, so 10 000 dialled need more than the usual hard
//! limit of 20 000. The bench raises its own limit before each size (soft to hard, and the
//! hard limit too where it may: as root with `CAP_SYS_RESOURCE`), and
//! the node, its child, inherits it; a size the limit cannot hold is skipped with the
//! figures, and the largest size under the limit (a multiple of 500) is measured instead.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::runtime::socket::{
    FDS_PER_CONTEXT, FDS_PER_DIALLED, FDS_PER_MONITORED, SOCKETS_PER_CONTEXT,
};

use super::idle::{CpuSample, FakePeers, NodeProcess, Publishers, PERIOD};
use super::inbound::{self, FakeDialers};
use super::{clock_ticks, server_config, Plan};

/// The sizes measured (connections).
pub(crate) const SIZES: [usize; 3] = [1_000, 5_000, 10_000];
/// The size of the RouteMesh-only measurement (connections, two per peer), after [`SIZES`].
pub(crate) const MESH_ONLY_SIZE: usize = 10_000;
/// The size of the inbound measurement (connections the node accepts, two per peer), last.
pub(crate) const INBOUND_SIZE: usize = 10_000;

/// What a size's connections are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mix {
    /// A fifth fanout subscriptions, the rest RouteMesh lanes the node dials.
    Mixed,
    /// RouteMesh lanes the node dials.
    MeshOnly,
    /// RouteMesh lanes the node accepts (fake peers dial it).
    Inbound,
}

impl Mix {
    /// The suffix of the size's labels.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Mix::Mixed => "",
            Mix::MeshOnly => " mesh",
            Mix::Inbound => " inbound",
        }
    }
}

/// The size of `--quick` (smoke only).
const QUICK_SIZE: usize = 30;
/// Descriptors beyond the connections' own (the process, its contexts, slack).
const SLACK_FDS: u64 = 512;
/// A size the limit cannot hold is replaced by the largest multiple of this that it can.
const SIZE_STEP: usize = 500;

/// One size's figures.
pub(crate) struct ScaleRow {
    pub mix: Mix,
    pub connections: usize,
    pub publishers: usize,
    pub ready_s: f64,
    pub cpu_percent: f64,
    pub cpu_ticks_percent: f64,
    pub fds: u64,
    pub baseline_fds: u64,
    pub fds_per_connection: f64,
    pub kib_per_connection: f64,
    pub rss_kib: u64,
    pub fd_limit: u64,
}

/// Every size measured, and those skipped with why.
pub(crate) struct Scale {
    pub rows: Vec<ScaleRow>,
    pub skipped: Vec<(usize, String)>,
}

pub(crate) async fn scale(plan: &Plan) -> Result<Scale> {
    let plan = plan.clone();
    tokio::task::spawn_blocking(move || scale_blocking(&plan)).await?
}

fn scale_blocking(plan: &Plan) -> Result<Scale> {
    let sizes: Vec<(usize, Mix)> = if plan.quick {
        vec![(QUICK_SIZE, Mix::Mixed), (QUICK_SIZE, Mix::Inbound)]
    } else {
        SIZES
            .iter()
            .map(|&n| (n, Mix::Mixed))
            .chain([
                (MESH_ONLY_SIZE, Mix::MeshOnly),
                (INBOUND_SIZE, Mix::Inbound),
            ])
            .collect()
    };
    let dir = std::env::temp_dir().join(format!("zmesh-bench-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut out = Scale {
        rows: Vec::new(),
        skipped: Vec::new(),
    };
    let mut largest = 0;
    for (n, mix) in sizes {
        let need = needed_for(n, mix);
        let limit = raise_limit(need);
        let n = if limit >= need {
            n
        } else {
            let why = format!(
                "needs about {need} file descriptors ({FDS_PER_DIALLED} per dialled mesh lane, \
                 {FDS_PER_MONITORED} per subscription and 1 per accepted lane in the node); \
                 the limit is {limit} and could not be raised (raising the hard limit needs \
                 root with CAP_SYS_RESOURCE)"
            );
            // Said once, with the results (lib.rs), not here as well.
            out.skipped.push((n, why));
            // The largest size under the limit instead (in steps of 500), once per mix.
            match (1..=n / SIZE_STEP)
                .rev()
                .map(|k| k * SIZE_STEP)
                .find(|&m| needed_for(m, mix) <= limit)
            {
                Some(m) if mix != Mix::Mixed || m > largest => m,
                _ => continue,
            }
        };
        if mix == Mix::Mixed {
            largest = largest.max(n);
        }
        let publishers = if mix == Mix::Mixed { n / 5 } else { 0 };
        let peers = (n - publishers) / 2;
        let limit = raise_limit(needed_for(n, mix));
        out.rows
            .push(one_size(plan, &dir, mix, publishers, peers, limit)?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}

/// The far ends of a size's mesh connections.
enum Far {
    /// Fake peers the node dials.
    Peers(FakePeers),
    /// Fake peers that dial the node.
    Dialers(FakeDialers),
}

impl Far {
    fn stats(&self) -> String {
        match self {
            Far::Peers(p) => p.stats(),
            Far::Dialers(d) => d.stats(),
        }
    }

    fn stop(self) -> Result<()> {
        match self {
            Far::Peers(p) => p.stop(),
            Far::Dialers(d) => d.stop(),
        }
    }
}

/// Measures one P7 size: a node with `publishers` fanout publishers and `peers` RouteMesh peers
/// (two lanes each) of `mix`, against its baseline without links.
fn one_size(
    plan: &Plan,
    dir: &std::path::Path,
    mix: Mix,
    publishers: usize,
    peers: usize,
    fd_limit: u64,
) -> Result<ScaleRow> {
    let connections = publishers + 2 * peers;
    let mut cfg = match mix {
        Mix::Inbound => {
            let mut c = server_config("scale")?;
            // Every connection may arrive at once: none is refused as unadmitted.
            c.max_unadmitted = connections + 1;
            c
        }
        Mix::Mixed | Mix::MeshOnly => NodeConfig::new("scale"),
    };
    let (baseline_fds, baseline_rss) = baseline(dir, &cfg)?;

    let pubs = Publishers::start(publishers)?;
    cfg.subscriptions = pubs
        .endpoints
        .iter()
        .map(|e| Endpoint::new(e.clone()))
        .collect();
    let fake = match mix {
        Mix::Inbound => None,
        Mix::Mixed | Mix::MeshOnly => Some(FakePeers::start(2 * peers)?),
    };
    if let Some(fake) = &fake {
        cfg.peers = fake.configs(peers);
    }
    let node = NodeProcess::start(dir, &cfg)?;
    let t0 = Instant::now();
    let far = match (fake, &cfg.route_mesh) {
        (Some(fake), _) => Far::Peers(fake),
        (None, bind) => {
            let bind = bind
                .as_ref()
                .context("an inbound size binds its endpoints")?;
            // Its endpoints are bound once its control endpoint answers.
            node.wait_ready(0)?;
            Far::Dialers(inbound::dial(peers, &bind.application, &bind.completion)?)
        }
    };
    node.wait_ready(connections)?;
    let ready_s = t0.elapsed().as_secs_f64();
    eprintln!("P7 {connections} connections: all ready in {ready_s:.1} s");
    // Steady state, as P5: one beacon period after the fast phase.
    pubs.slow_down();
    std::thread::sleep(if plan.quick {
        Duration::from_secs(1)
    } else {
        PERIOD + Duration::from_secs(1)
    });
    let (before, after, window) = idle_window(plan, &node, &far, connections)?;
    let (fds, rss) = (node.fds()?, node.rss_kib()?);
    let ready = node.ready_links()?;
    anyhow::ensure!(
        ready >= connections,
        "only {ready} of {connections} links ready after the idle window"
    );
    let cpu_percent = (after.on_cpu_ns - before.on_cpu_ns) as f64 / 1e9 / window * 100.0;
    let cpu_ticks_percent = (after.ticks - before.ticks) as f64 / clock_ticks() / window * 100.0;
    let per = |v: f64| v / connections.max(1) as f64;
    let row = ScaleRow {
        mix,
        connections,
        publishers,
        ready_s,
        cpu_percent,
        cpu_ticks_percent,
        fds,
        baseline_fds,
        fds_per_connection: per(fds as f64 - baseline_fds as f64),
        kib_per_connection: per(rss as f64 - baseline_rss as f64),
        rss_kib: rss,
        fd_limit,
    };
    let lanes = if mix == Mix::Inbound {
        "accepted"
    } else {
        "dialled"
    };
    eprintln!(
        "P7 {connections} connections ({publishers} publishers, {} {lanes} mesh lanes): idle \
         CPU {cpu_percent:.2} % ({cpu_ticks_percent:.2} % from ticks); {fds} fds (baseline \
         {baseline_fds}): {:.2} per connection; RSS {rss} KiB (baseline {baseline_rss} KiB): \
         {:.1} KiB per connection; fake peers: {}",
        2 * peers,
        row.fds_per_connection,
        row.kib_per_connection,
        far.stats()
    );
    drop(node);
    pubs.stop();
    far.stop()?;
    Ok(row)
}

/// Descriptors and RSS (KiB) of the same binary running `cfg`'s node without links (with its
/// endpoints bound, if it accepts): the baselines of a size.
fn baseline(dir: &std::path::Path, cfg: &NodeConfig) -> Result<(u64, u64)> {
    let mut base_cfg = cfg.clone();
    base_cfg.rid = "scale-base".into();
    let base = NodeProcess::start(dir, &base_cfg)?;
    base.wait_ready(0)?;
    let (baseline_fds, baseline_rss) = (base.fds()?, base.rss_kib()?);
    drop(base);
    Ok((baseline_fds, baseline_rss))
}

/// The node's CPU samples before and after the idle window of `plan.idle`, and the window's
/// length in seconds.
fn idle_window(
    plan: &Plan,
    node: &NodeProcess,
    far: &Far,
    connections: usize,
) -> Result<(CpuSample, CpuSample, f64)> {
    let before = node.cpu()?;
    eprintln!(
        "P7 {connections} connections: idle window starts; fake peers: {}",
        far.stats()
    );
    let t = Instant::now();
    std::thread::sleep(plan.idle);
    let after = node.cpu()?;
    let window = t.elapsed().as_secs_f64();
    Ok((before, after, window))
}

/// Descriptors one process needs for `n` connections of `mix` as this bench makes them.
fn needed_for(n: usize, mix: Mix) -> u64 {
    let publishers = if mix == Mix::Mixed { n / 5 } else { 0 };
    let connections = publishers + 2 * ((n - publishers) / 2);
    if mix == Mix::Inbound {
        // One per connection on either side (the node's accepted TCP connections; the fake
        // dialers' connections on their two sockets).
        return connections as u64 + SLACK_FDS;
    }
    needed(connections as u64, publishers as u64)
}

/// Descriptors one process needs for `connections`, `publishers` of them fanout: the node
/// ([`FDS_PER_DIALLED`] per mesh lane, [`FDS_PER_MONITORED`] per subscription, and its
/// contexts) or this bench (a PUB socket's
/// mailbox, listening socket and connection per publisher; one accepted connection per mesh
/// lane), whichever is more.
fn needed(connections: u64, publishers: u64) -> u64 {
    let contexts = connections.div_ceil((SOCKETS_PER_CONTEXT / 3) as u64) + 1;
    let node = (connections - publishers) * FDS_PER_DIALLED
        + publishers * FDS_PER_MONITORED
        + contexts * FDS_PER_CONTEXT;
    let bench = 3 * publishers + (connections - publishers) + contexts * FDS_PER_CONTEXT;
    node.max(bench) + SLACK_FDS
}

/// Raises this process's descriptor limit (soft and, where allowed, hard) to at least
/// `need`; returns the soft limit it has after.
fn raise_limit(need: u64) -> u64 {
    #[cfg(unix)]
    {
        let Ok((soft, hard)) = rlimit::getrlimit(rlimit::Resource::NOFILE) else {
            return 0;
        };
        if hard < need {
            // Root may raise the hard limit (up to fs.nr_open); anyone else keeps theirs.
            let _ = rlimit::setrlimit(rlimit::Resource::NOFILE, need, need);
        }
        let hard = rlimit::getrlimit(rlimit::Resource::NOFILE)
            .map(|(_, h)| h)
            .unwrap_or(hard);
        if soft < hard {
            let _ = rlimit::setrlimit(rlimit::Resource::NOFILE, hard, hard);
        }
        rlimit::getrlimit(rlimit::Resource::NOFILE)
            .map(|(s, _)| s)
            .unwrap_or(soft)
    }
    #[cfg(not(unix))]
    {
        let _ = need;
        0
    }
}
