//! `zmesh bench`: raw libzmq (the same `zmq` crate, no zmesh) and zmesh side by side, in one
//! run, on 127.0.0.1 tcp. Prints a table and optionally writes the results as JSON.
//!
//! | id | what | raw libzmq | zmesh |
//! |---|---|---|---|
//! | P1 | one-way throughput, 64 B and 1 KiB | DEALER -> ROUTER | `Node::send` on the RouteMesh Application lane, counted on the peer's event stream |
//! | P2 | call round trip p50/p99, sequential | DEALER/ROUTER ping-pong | `Node::call_raw` -> handler -> reply, with a task handler (`Node::serve`) and an inline one (`Node::serve_inline`) |
//! | P3 | fanout throughput, 64 B | PUB -> SUB | `Node::publish`, and `Node::publish_batch`, -> subscriber node's event stream |
//! | P4 | one peer floods, a quiet peer's probe/ACK round trip and false not-ready | - | three peers of one node (see `flood`) |
//! | P5 | idle CPU and memory per connection of one node with many publishers and mesh peers | - | a `zmesh node` child process |
//! | P6 | failure detection: orderly close, killed process, half-open | - | event on the dialling node |
//! | K5 | bytes on the wire, calls/s and latency of 300 concurrent small calls, `batch_calls` off and on | - | a RouteMesh pair through counting TCP proxies |
//! | C1 | P1 (1 KiB, `send_batch`) and P2 with CURVE on both sides | DEALER -> ROUTER with CURVE | a pair in `[security] mode = "curve"` |
//! | P7 | one node with 1 000 / 5 000 / 10 000 connections (a fifth fanout), then 10 000 RouteMesh lanes it dials, then 10 000 it accepts: time to all ready, idle CPU, descriptors and memory per connection | - | a `zmesh node` child process (see `scale`) |
//! | P1 `send_batch` alone (`--only p1batch`, not in the default set) | P1's 64 B `send_batch` row only, for profiling (`valgrind --tool=callgrind --separate-threads=yes zmesh bench --only p1batch --messages 50000 --runs 1`) | - | as P1 |
//! | P7 churn (`--only p7churn`) | one node with 100 / 1 000 / 4 000 inbound RouteMesh connections on its Application endpoint while 10 others of it reconnect, 20 per second for 5 s: records sent to the staying connections and node CPU, per reconnect (flat in N) | - | a `zmesh node` child process (see `churn`) |
//!
//! Every measurement is repeated `--runs` times (raw and zmesh interleaved); the table shows
//! the median and the min..max spread (P7 and P7 churn run once). P4 is one window of `--flood-secs` (its thousands of
//! probes are the samples). Method and results: BENCHMARKS.md.
//!
//! The `zmesh` binary (zmesh-cli) calls [`run`] for `zmesh bench`. P5, P6 and P7 start their
//! nodes as child processes of the running executable (`zmesh node ...`), so [`run`] works
//! only from within that binary.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod batching;
mod calls;
mod churn;
mod detect;
mod fanout;
mod flood;
mod idle;
mod inbound;
mod rows;
mod scale;
mod throughput;

// Shared with the CLI's demo and the integration tests, which include the same file.
#[path = "../../zmesh-cli/src/ports.rs"]
mod ports;
// Shared with the CLI: a closed stdout ends the report quietly.
#[path = "../../zmesh-cli/src/stdout.rs"]
mod stdout;

use std::io::ErrorKind;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use zmesh::config::{NodeConfig, PeerConfig, RouteMeshBind, SecurityConfig};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::proto::state::ConnState;
use zmesh::runtime::security::KeyPair;
use zmesh::runtime::{EventStream, Node, NodeEvent};

/// Options of `zmesh bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Repetitions of every measurement (default 3; 1 with --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Smoke mode: tiny sizes, one run, and the 15 s half-open measurement overlapping the
    /// others. Checks that everything works; its numbers are not measurements.
    #[arg(long)]
    quick: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Records per throughput measurement (P1, P3) [default: 300000; quick: 3000].
    #[arg(long)]
    messages: Option<u64>,
    /// Sequential calls per latency measurement (P2) [default: 5000; quick: 200].
    #[arg(long)]
    calls: Option<usize>,
    /// Concurrent `Node::send` tasks driving P1.
    #[arg(long, default_value_t = 16)]
    senders: usize,
    /// Records per `Node::send_batch` / `Node::publish_batch` call in the batched P1 and P3
    /// rows.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Fanout publishers of the idle node (P5) [default: 1000; quick: 20].
    #[arg(long)]
    publishers: Option<usize>,
    /// RouteMesh peers of the idle node (P5), two connections each [default: 256; quick: 4].
    #[arg(long)]
    peers: Option<usize>,
    /// Length of the idle CPU window in seconds (P5) [default: 10; quick: 2].
    #[arg(long)]
    idle_secs: Option<u64>,
    /// Length of the flood window in seconds (P4, run once) [default: 300; quick: 3].
    #[arg(long)]
    flood_secs: Option<u64>,
    /// Only these measurements, comma-separated: p1,p2,p3,p4,p5,p6,k5,c1,p7,p7churn
    /// [default: all]; `p1batch` (never in the default) runs zmesh's P1 64 B `send_batch` row
    /// alone, without raw libzmq, to profile it.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// The sizes of one bench run, after defaults.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    quick: bool,
    runs: usize,
    messages: u64,
    calls: usize,
    senders: usize,
    batch: usize,
    publishers: usize,
    peers: usize,
    idle: Duration,
    flood: Duration,
}

impl Plan {
    fn from_args(a: &BenchArgs) -> Plan {
        let q = a.quick;
        Plan {
            quick: q,
            runs: a.runs.unwrap_or(if q { 1 } else { 3 }).max(1),
            messages: a.messages.unwrap_or(if q { 3_000 } else { 300_000 }).max(1),
            calls: a.calls.unwrap_or(if q { 200 } else { 5_000 }).max(1),
            senders: a.senders.max(1),
            batch: a.batch.max(2),
            publishers: a.publishers.unwrap_or(if q { 20 } else { 1_000 }),
            peers: a.peers.unwrap_or(if q { 4 } else { 256 }),
            idle: Duration::from_secs(a.idle_secs.unwrap_or(if q { 2 } else { 10 }).max(1)),
            flood: Duration::from_secs(a.flood_secs.unwrap_or(if q { 3 } else { 300 }).max(1)),
        }
    }
}

/// Repeated samples of one quantity.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series(Vec<f64>);

impl Series {
    fn push(&mut self, v: f64) {
        self.0.push(v);
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    /// The median (mean of the two middle samples for an even count).
    fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }

    fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }

    fn to_json(&self) -> Value {
        json!({
            "median": self.median(),
            "min": self.min(),
            "max": self.max(),
            "samples": self.0,
        })
    }
}

/// The `q` quantile (0..=1) of samples, nearest rank.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What a metric is judged against.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// zmesh / raw at least this (throughput).
    RatioAtLeast(f64),
    /// zmesh / raw at most this (latency).
    RatioAtMost(f64),
    /// zmesh value below this.
    Below(f64),
    /// zmesh value at most this.
    AtMost(f64),
    /// zmesh value within `center ± tolerance`.
    Within(f64, f64),
    /// zmesh value at most `ratio` times a reference row measured in the same run (its
    /// median, and its name).
    AtMostOf(f64, f64, &'static str),
    /// zmesh value at least `ratio` times a reference row measured in the same run.
    AtLeastOf(f64, f64, &'static str),
    /// The reference of other rows: no target of its own.
    Reference,
}

impl Target {
    fn describe(&self) -> String {
        match self {
            Target::RatioAtLeast(r) => format!(">= {r}x raw"),
            Target::RatioAtMost(r) => format!("<= {r}x raw"),
            Target::Below(v) => format!("< {v}"),
            Target::AtMost(v) => format!("<= {v}"),
            Target::Within(c, t) => format!("{c} ± {t}"),
            Target::AtMostOf(_, r, name) => format!("<= {r}x {name}"),
            Target::AtLeastOf(_, r, name) => format!(">= {r}x {name}"),
            Target::Reference => "(reference)".into(),
        }
    }
}

/// One row of the results.
struct Metric {
    key: &'static str,
    label: &'static str,
    unit: &'static str,
    raw: Option<Series>,
    zmesh: Series,
    target: Target,
    /// Free-form extra numbers (losses, counts, secondary measures).
    extra: Value,
}

impl Metric {
    /// zmesh / raw, or zmesh / the reference row for a target against one.
    fn ratio(&self) -> Option<f64> {
        match self.target {
            Target::AtMostOf(reference, ..) | Target::AtLeastOf(reference, ..) => {
                Some(self.zmesh.median() / reference)
            }
            _ => self.raw.as_ref().map(|r| self.zmesh.median() / r.median()),
        }
    }

    fn met(&self) -> bool {
        let z = self.zmesh.median();
        match (self.target, self.ratio()) {
            (Target::RatioAtLeast(t), Some(r)) => r >= t,
            (Target::RatioAtMost(t), Some(r)) => r <= t,
            (Target::Below(t), _) => z < t,
            (Target::AtMost(t), _) => z <= t,
            (Target::Within(c, t), _) => (z - c).abs() <= t,
            (Target::AtMostOf(_, t, _), Some(r)) => r <= t,
            (Target::AtLeastOf(_, t, _), Some(r)) => r >= t,
            (Target::Reference, _) => true,
            _ => false,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "label": self.label,
            "unit": self.unit,
            "raw": self.raw.as_ref().map(Series::to_json),
            "zmesh": self.zmesh.to_json(),
            "ratio": self.ratio(),
            "target": self.target.describe(),
            "met": self.met(),
            "extra": self.extra,
        })
    }
}

/// Runs `zmesh bench`.
pub async fn run(args: BenchArgs) -> Result<()> {
    let plan = Plan::from_args(&args);
    let want = |id: &str| args.only.is_empty() || args.only.iter().any(|o| o == id);
    for o in &args.only {
        if ![
            "p1", "p1batch", "p2", "p3", "p4", "p5", "p6", "k5", "c1", "p7", "p7churn",
        ]
        .contains(&o.as_str())
        {
            bail!(
                "--only: unknown measurement {o:?} (use \
                 p1,p1batch,p2,p3,p4,p5,p6,k5,c1,p7,p7churn)"
            );
        }
    }
    let machine = machine_info();
    let load_before = load_average();
    eprintln!("zmesh bench: {plan:?}");
    let started = Instant::now();
    let mut metrics: Vec<Metric> = Vec::new();

    // In quick mode the 15 s half-open measurement overlaps the others (smoke only).
    let half_open_early = if plan.quick && want("p6") {
        let p = plan.clone();
        Some(tokio::spawn(async move { detect::half_open(&p).await }))
    } else {
        None
    };

    if want("p1") {
        metrics.extend(rows::p1(&plan).await?);
    }
    if args.only.iter().any(|o| o == "p1batch") {
        metrics.extend(rows::p1batch(&plan).await?);
    }
    if want("p2") {
        metrics.extend(rows::p2(&plan).await?);
    }
    if want("c1") {
        metrics.extend(rows::c1(&plan).await?);
    }
    if want("p3") {
        metrics.extend(rows::p3(&plan).await?);
    }
    if want("p4") {
        metrics.extend(rows::p4(&plan).await?);
    }
    if want("p5") {
        metrics.extend(rows::p5(&plan).await?);
    }
    if want("p7") {
        metrics.extend(rows::p7(&plan).await?);
    }
    if want("p7churn") {
        metrics.extend(rows::p7churn(&plan).await?);
    }
    if want("p6") {
        metrics.extend(rows::p6(&plan, half_open_early).await?);
    }

    if want("k5") {
        metrics.extend(rows::k5(&plan).await?);
    }

    let total = started.elapsed();
    let printed = report(&metrics, &plan, &machine, &load_before, total);
    // A stdout closed by its reader (`zmesh bench | head -1`) stops the report, not the file.
    if let Some(path) = &args.json {
        write_json(path, &plan, &machine, &load_before, total, &metrics)?;
    }
    match printed {
        Err(e) if !stdout::is_closed(&e) => Err(anyhow::Error::new(e).context("writing to stdout")),
        _ => Ok(()),
    }
}

/// Prints the table of rows and the machine's line.
fn report(
    metrics: &[Metric],
    plan: &Plan,
    machine: &Value,
    load_before: &str,
    total: Duration,
) -> std::io::Result<()> {
    stdout::out!("{}", render(metrics, plan))?;
    stdout::outln!(
        "machine: {} x {}, load average before {} after {}; {:.0} s in all",
        machine["nproc"],
        machine["cpu"].as_str().unwrap_or("?"),
        load_before,
        load_average(),
        total.as_secs_f64()
    )
}

/// Writes the results as JSON to `path`: the plan, the machine, the load average before the
/// run and now, the run's duration, and every row by its key.
fn write_json(
    path: &Path,
    plan: &Plan,
    machine: &Value,
    load_before: &str,
    total: Duration,
    metrics: &[Metric],
) -> Result<()> {
    let doc = json!({
        "zmesh_version": env!("CARGO_PKG_VERSION"),
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "plan": {
            "quick": plan.quick,
            "runs": plan.runs,
            "messages": plan.messages,
            "calls": plan.calls,
            "senders": plan.senders,
            "batch": plan.batch,
            "publishers": plan.publishers,
            "peers": plan.peers,
            "idle_s": plan.idle.as_secs(),
            "flood_s": plan.flood.as_secs(),
        },
        "machine": machine,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "seconds": total.as_secs_f64(),
        "metrics": metrics
            .iter()
            .map(|m| (m.key.to_owned(), m.to_json()))
            .collect::<serde_json::Map<_, _>>(),
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// A number for the table: 3 significant digits, k/M suffixes for large ones.
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let (v, suffix) = if v.abs() >= 1e6 {
        (v / 1e6, "M")
    } else if v.abs() >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{suffix}")
}

fn cell(s: &Series) -> String {
    format!("{} [{}..{}]", num(s.median()), num(s.min()), num(s.max()))
}

fn render(metrics: &[Metric], plan: &Plan) -> String {
    let mut out = format!(
        "\nzmesh bench ({} run{}{}), median [min..max]\n",
        plan.runs,
        if plan.runs == 1 { "" } else { "s" },
        if plan.quick {
            ", QUICK smoke mode: not a measurement"
        } else {
            ""
        }
    );
    out.push_str(&format!(
        "{:<40} {:<7} {:<26} {:<26} {:>6}  {:<18} {}\n",
        "metric", "unit", "raw libzmq", "zmesh", "ratio", "target", "met"
    ));
    for m in metrics {
        out.push_str(&format!(
            "{:<40} {:<7} {:<26} {:<26} {:>6}  {:<18} {}\n",
            m.label,
            m.unit,
            m.raw.as_ref().map(cell).unwrap_or_else(|| "-".into()),
            cell(&m.zmesh),
            m.ratio()
                .map(|r| format!("{r:.2}x"))
                .unwrap_or_else(|| "-".into()),
            m.target.describe(),
            match (m.target, m.met()) {
                (Target::Reference, _) => "-",
                (_, true) => "yes",
                (_, false) => "NO",
            }
        ));
    }
    out
}

/// CPU model, core count, memory and kernel, from /proc.
fn machine_info() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok());
    json!({
        "cpu": cpu,
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "mem_total_kib": mem_kib,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
    })
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

// ------------------------------------------------------------------------------------------
// Helpers shared by the measurements
// ------------------------------------------------------------------------------------------

/// The K5 target: a round of batched calls puts at most this fraction of the unbatched
/// round's bytes on the wire (batching, MISSION K5, is meant to save bytes: the data-path
/// issue's 0.5x). Both rounds' answers travel packed (ANSWERS16 between zmesh nodes), so the
/// saving is the requests': CALLS16 says the shared header once and each id in two bytes
/// (WIRE.md §4.19; BENCHMARKS.md, K5).
const K5_BYTES_AT_MOST: f64 = 0.5;

/// Longest wait for any setup step (a link becoming ready, a process starting).
pub(crate) const SETUP_LIMIT: Duration = Duration::from_secs(30);

/// A free tcp endpoint on 127.0.0.1 (for zmesh configurations, which name their ports).
pub(crate) fn free_tcp() -> Result<String> {
    let port = ports::free_loopback_port().context("a free port on 127.0.0.1")?;
    Ok(format!("tcp://127.0.0.1:{port}"))
}

/// Binds a raw socket on an ephemeral 127.0.0.1 port; returns the endpoint.
pub(crate) fn bind_any(s: &zmq::Socket) -> Result<String> {
    s.bind("tcp://127.0.0.1:*")?;
    match s.get_last_endpoint()? {
        Ok(ep) => Ok(ep),
        Err(_) => bail!("last endpoint is not UTF-8"),
    }
}

/// The RouteMesh membership every bench server announces (one side of a pair needs a Server
/// membership, MISSION T4).
pub(crate) const CHANNEL: &str = "bench";

/// The channel P2 serves with an inline handler.
pub(crate) const INLINE_CHANNEL: &str = "bench-inline";

/// Configuration of a RouteMesh node that accepts peers and serves [`CHANNEL`] and
/// [`INLINE_CHANNEL`].
pub(crate) fn server_config(rid: &str) -> Result<NodeConfig> {
    let mut c = NodeConfig::new(rid);
    c.memberships = [CHANNEL, INLINE_CHANNEL]
        .into_iter()
        .map(|channel| Membership {
            role: Role::Server,
            channel: channel.into(),
        })
        .collect();
    c.route_mesh = Some(RouteMeshBind::new(free_tcp()?, free_tcp()?));
    Ok(c)
}

/// Configuration of a node that dials `server` (whose bind is `bind`) on both lanes.
pub(crate) fn client_config(rid: &str, server: &str, bind: &RouteMeshBind) -> NodeConfig {
    let mut c = NodeConfig::new(rid);
    c.peers = vec![PeerConfig::new(
        server,
        bind.application.clone(),
        bind.completion.clone(),
    )];
    c
}

/// Waits until `pred` holds for an event of `events`, at most `limit`; returns that event.
pub(crate) async fn wait_event(
    events: &mut EventStream,
    limit: Duration,
    what: &str,
    mut pred: impl FnMut(&NodeEvent) -> bool,
) -> Result<NodeEvent> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let batch = tokio::time::timeout_at(deadline, events.recv())
            .await
            .with_context(|| format!("no {what} within {limit:?}"))?
            .with_context(|| format!("event stream ended waiting for {what}"))?;
        if let Some(ev) = batch.into_iter().find(|e| pred(e)) {
            return Ok(ev);
        }
    }
}

/// Waits until every link named (in part) in `links` reported ready, at most [`SETUP_LIMIT`].
pub(crate) async fn wait_ready(events: &mut EventStream, links: &[String]) -> Result<()> {
    let mut left: Vec<&String> = links.iter().collect();
    let deadline = tokio::time::Instant::now() + SETUP_LIMIT;
    while !left.is_empty() {
        let batch = tokio::time::timeout_at(deadline, events.recv())
            .await
            .with_context(|| format!("{left:?} not ready within {SETUP_LIMIT:?}"))?
            .context("event stream ended waiting for ready links")?;
        for ev in &batch {
            left.retain(|l| !is_state(ev, l, ConnState::Ready));
        }
    }
    Ok(())
}

/// True for a state change of a link whose name contains `link` to `state`.
pub(crate) fn is_state(ev: &NodeEvent, link: &str, state: ConnState) -> bool {
    matches!(ev, NodeEvent::State(s) if s.link.contains(link) && s.state == state)
}

/// True for a state change of a link whose name contains `link` that carries a failure.
pub(crate) fn is_failure(ev: &NodeEvent, link: &str) -> bool {
    matches!(ev, NodeEvent::State(s) if s.link.contains(link) && s.reason.is_some())
}

/// A TCP proxy in this process: listens on an ephemeral port of 127.0.0.1 and, until `stop`,
/// connects every connection it accepts to `upstream` (`tcp://host:port`), with Nagle off on
/// both, and hands each direction to `relay(from, to, upstream_to_dialler)` on a thread of
/// its own. Returns the endpoint it listens on. The measurements' proxies (one that counts
/// ZMTP messages, one that freezes a connection) differ in `relay` only.
pub(crate) fn spawn_tcp_proxy(
    upstream: &str,
    stop: Arc<AtomicBool>,
    relay: impl Fn(TcpStream, TcpStream, bool) + Clone + Send + 'static,
) -> Result<String> {
    let up = upstream.trim_start_matches("tcp://").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let endpoint = format!("tcp://{}", listener.local_addr()?);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let client = match listener.accept() {
                Ok((c, _)) => c,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    // Connections are made at setup only; this is not on the measured path.
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(_) => break,
            };
            let _ = client.set_nonblocking(false);
            let Ok(server) = TcpStream::connect(&up) else {
                let _ = client.shutdown(Shutdown::Both);
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            for (from, to, upstream_to_dialler) in [
                (client.try_clone(), server.try_clone(), false),
                (server.try_clone(), client.try_clone(), true),
            ] {
                let (Ok(from), Ok(to)) = (from, to) else {
                    continue;
                };
                let relay = relay.clone();
                std::thread::spawn(move || relay(from, to, upstream_to_dialler));
            }
        }
    });
    Ok(endpoint)
}

/// A RouteMesh pair in this process: `a` dials `b` (which serves [`CHANNEL`]); returns once
/// both of `a`'s lanes and both of `b`'s inbound lanes are ready.
pub(crate) struct Pair {
    pub a: Node,
    pub b: Node,
    pub ea: EventStream,
    pub eb: EventStream,
}

impl Pair {
    pub(crate) async fn start(b_cfg: NodeConfig, a_cfg: NodeConfig) -> Result<Pair> {
        let b = Node::start(b_cfg).await?;
        let a = Node::start(a_cfg).await?;
        Pair::ready(a, b).await
    }

    /// Takes the event streams of `a`, started to dial `b`, and of `b`, and waits until both
    /// RouteMesh lanes are ready on both sides.
    pub(crate) async fn ready(a: Node, b: Node) -> Result<Pair> {
        let mut ea = a.take_events().context("events of a")?;
        let mut eb = b.take_events().context("events of b")?;
        let (a_rid, b_rid) = (a.rid().to_owned(), b.rid().to_owned());
        let lanes = ["application", "completion"];
        let a_links: Vec<String> = lanes.iter().map(|l| format!("peer {b_rid} {l}")).collect();
        let b_links: Vec<String> = lanes
            .iter()
            .map(|l| format!("inbound {a_rid} {l}"))
            .collect();
        wait_ready(&mut ea, &a_links).await?;
        wait_ready(&mut eb, &b_links).await?;
        Ok(Pair { a, b, ea, eb })
    }

    /// The usual pair: `a` dials `b`.
    pub(crate) async fn mesh() -> Result<Pair> {
        Pair::mesh_with(None).await
    }

    /// The usual pair, in `mode = "curve"` with `curve`'s keys when given.
    pub(crate) async fn mesh_with(curve: Option<&Curve>) -> Result<Pair> {
        let mut b = server_config("b")?;
        let bind = b.route_mesh.clone().context("b binds")?;
        let mut a = client_config("a", "b", &bind);
        if let Some(c) = curve {
            b.security = SecurityConfig::curve(&c.b_file).allow([c.a.public]);
            a.security = SecurityConfig::curve(&c.a_file);
            for ep in [&bind.application, &bind.completion] {
                a.security.endpoint_keys.insert(ep.clone(), c.b.public);
            }
        }
        Pair::start(b, a).await
    }

    pub(crate) async fn shutdown(self) -> Result<()> {
        self.a.shutdown().await?;
        self.b.shutdown().await?;
        Ok(())
    }
}

/// CURVE keys of a measured pair: `b` is the server (the bound side), `a`
/// the client; written to key files for the zmesh nodes, set on raw sockets directly.
#[derive(Clone)]
pub(crate) struct Curve {
    pub a: KeyPair,
    pub b: KeyPair,
    pub a_file: PathBuf,
    pub b_file: PathBuf,
    /// The directory of the key files, removed when the last clone is dropped.
    _dir: std::sync::Arc<KeyDir>,
}

/// A directory removed when dropped.
struct KeyDir(PathBuf);

impl Drop for KeyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Curve {
    /// Fresh keys, in a directory of this process.
    pub(crate) fn new() -> Result<Curve> {
        let dir = std::env::temp_dir().join(format!("zmesh-bench-curve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let (a, b) = (KeyPair::generate()?, KeyPair::generate()?);
        let (a_file, b_file) = (dir.join("a.key"), dir.join("b.key"));
        a.write_new(&a_file)?;
        b.write_new(&b_file)?;
        Ok(Curve {
            a,
            b,
            a_file,
            b_file,
            _dir: std::sync::Arc::new(KeyDir(dir)),
        })
    }

    /// Makes a raw socket the CURVE server (before it binds).
    pub(crate) fn server(&self, s: &zmq::Socket) -> zmq::Result<()> {
        zmesh::runtime::socket::set_curve_server(s, &self.b)
    }

    /// Makes a raw socket the CURVE client of the server (before it connects).
    pub(crate) fn client(&self, s: &zmq::Socket) -> zmq::Result<()> {
        zmesh::runtime::socket::set_curve_client(s, &self.a, &self.b.public)
    }
}

/// Clock ticks per second of `/proc` CPU times (`getconf CLK_TCK`, normally 100).
pub(crate) fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU time (user + system, every thread, also those that ended) this process has used,
/// from `/proc/self/stat`; 10 ms resolution.
pub(crate) fn process_cpu() -> Result<Duration> {
    let ticks = cpu_ticks("/proc/self/stat")?;
    Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks()))
}

/// `utime + stime` (clock ticks, every thread) from a `/proc/<pid>/stat` file.
pub(crate) fn cpu_ticks(stat_path: &str) -> Result<u64> {
    let stat = std::fs::read_to_string(stat_path)?;
    // Fields after the command name (which may contain spaces) start after ") ".
    let rest = stat.rsplit_once(") ").map(|x| x.1).context("stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    let field = |i: usize, name: &str| {
        f.get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .with_context(|| format!("{name} in {stat_path}"))
    };
    Ok(field(11, "utime")? + field(12, "stime")?)
}

/// Microseconds of a duration, as a float.
pub(crate) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Milliseconds of a duration, as a float.
pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
