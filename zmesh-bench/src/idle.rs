//! P5: one node with many fanout publishers and RouteMesh peers, idle: its CPU (% of one
//! core) and its memory per connection.
//!
//! The node under test is a `zmesh node` child process, so its CPU and memory are its own
//! (`/proc/<pid>`), not this process's traffic generators':
//!
//! - publishers: raw libzmq PUB sockets in this process (spread over several contexts, libzmq
//!   allows 1023 sockets per context), each sending exactly the beacon `01 5A 4C 46 31` /
//!   `5A 46 01 01`. Until the node is ready they beacon every 200 ms (so it becomes ready
//!   quickly); then every 5 s, phases spread evenly over the 5 s, as independent publishers
//!   would be.
//! - mesh peers: two raw libzmq ROUTER sockets in this process that speak zmesh records for
//!   every peer RID the node dials: WELCOME to each HELLO (announcing a Server membership,
//!   MISSION T4), an ACK to each PROBE, and a PROBE of their own on each connection every 5 s.
//!   The node dials each peer on two lanes with a socket of its own per lane, exactly as it
//!   would dial real nodes; that the far ends share two sockets changes nothing on its side.
//!
//! CPU: the sum over the child's threads of `/proc/<pid>/task/*/schedstat` (time on CPU, ns)
//! over the window; `utime + stime` of `/proc/<pid>/stat` (10 ms ticks) is reported beside it.
//! Memory: (VmRSS of the loaded node - VmRSS of the same binary running a node without links)
//! / connections, where connections = publishers + 2 x peers.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zmesh::config::{Endpoint, NodeConfig, PeerConfig};
use zmesh::proto::wire::{
    self, Label, Membership, Memberships, Name, Record, Role, Welcome, BEACON_PAYLOAD, BEACON_TOPIC,
};

use super::{bind_any, clock_ticks, cpu_ticks, free_tcp, Plan, Series, CHANNEL};

/// Sockets per libzmq context (its default limit is 1023).
const SOCKETS_PER_CONTEXT: usize = 900;
/// Beacon and probe period once the node is ready (MISSION L1, L4).
pub(super) const PERIOD: Duration = Duration::from_secs(5);
/// Beacon period while the node is getting ready.
const FAST_PERIOD: Duration = Duration::from_millis(200);
/// Longest wait for the node to get every link ready.
const READY_LIMIT: Duration = Duration::from_secs(120);

pub(crate) struct Idle {
    pub cpu_percent: Series,
    pub cpu_ticks_percent: Series,
    pub wakeups_per_s: Series,
    pub kib_per_connection: Series,
    pub rss_kib: Series,
    pub baseline_rss_kib: Series,
}

pub(crate) async fn idle(plan: &Plan) -> Result<Idle> {
    let plan = plan.clone();
    tokio::task::spawn_blocking(move || idle_blocking(&plan)).await?
}

fn idle_blocking(plan: &Plan) -> Result<Idle> {
    let mut r = Idle {
        cpu_percent: Series::default(),
        cpu_ticks_percent: Series::default(),
        wakeups_per_s: Series::default(),
        kib_per_connection: Series::default(),
        rss_kib: Series::default(),
        baseline_rss_kib: Series::default(),
    };
    let dir = std::env::temp_dir().join(format!("zmesh-bench-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let connections = plan.publishers + 2 * plan.peers;
    for run in 0..plan.runs {
        // The same binary running a node without links: the memory baseline.
        let base = NodeProcess::start(&dir, &NodeConfig::new("idle-base"))?;
        base.wait_ready(0)?;
        std::thread::sleep(Duration::from_secs(1));
        let base_rss = base.rss_kib()?;
        drop(base);

        let publishers = Publishers::start(plan.publishers)?;
        let peers = FakePeers::start(2 * plan.peers)?;
        let mut cfg = NodeConfig::new("idle");
        cfg.subscriptions = publishers
            .endpoints
            .iter()
            .map(|e| Endpoint::new(e.clone()))
            .collect();
        cfg.peers = peers.configs(plan.peers);
        let node = NodeProcess::start(&dir, &cfg)?;
        let t_ready = Instant::now();
        node.wait_ready(connections)?;
        eprintln!(
            "P5 run {}: {connections} connections ready in {:.1} s",
            run + 1,
            t_ready.elapsed().as_secs_f64()
        );
        // Steady state: 5 s beacons spread over the period; let one period pass so nothing
        // of the fast phase or the connection storm is in the window.
        publishers.slow_down();
        std::thread::sleep(if plan.quick {
            Duration::from_secs(1)
        } else {
            PERIOD + Duration::from_secs(1)
        });
        let before = node.cpu()?;
        let t0 = Instant::now();
        std::thread::sleep(plan.idle);
        let after = node.cpu()?;
        let window = t0.elapsed().as_secs_f64();
        let rss = node.rss_kib()?;
        // The node must still have every link ready: an idle window with failures is void.
        let ready = node.ready_links()?;
        if ready < connections {
            bail!("only {ready} of {connections} links ready after the idle window");
        }
        let cpu = (after.on_cpu_ns - before.on_cpu_ns) as f64 / 1e9 / window * 100.0;
        let ticks = (after.ticks - before.ticks) as f64 / clock_ticks() / window * 100.0;
        let wakeups = (after.switches - before.switches) as f64 / window;
        let per_conn = (rss as f64 - base_rss as f64) / connections.max(1) as f64;
        eprintln!(
            "P5 run {}: idle CPU {cpu:.2} % ({ticks:.2} % from ticks), {wakeups:.0} context switches/s, \
             RSS {rss} KiB (baseline {base_rss} KiB): {per_conn:.1} KiB per connection; fake peers: {}",
            run + 1,
            peers.stats()
        );
        r.cpu_percent.push(cpu);
        r.cpu_ticks_percent.push(ticks);
        r.wakeups_per_s.push(wakeups);
        r.kib_per_connection.push(per_conn);
        r.rss_kib.push(rss as f64);
        r.baseline_rss_kib.push(base_rss as f64);
        drop(node);
        publishers.stop();
        peers.stop()?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(r)
}

// ------------------------------------------------------------------------------------------
// The node under test
// ------------------------------------------------------------------------------------------

/// A `zmesh node` child process with a control endpoint; killed when dropped.
pub(super) struct NodeProcess {
    child: Child,
    control: String,
}

pub(super) struct CpuSample {
    /// Time on CPU of every thread (schedstat), ns.
    pub(super) on_cpu_ns: u64,
    /// utime + stime, clock ticks.
    pub(super) ticks: u64,
    /// Context switches of every thread (voluntary + involuntary).
    pub(super) switches: u64,
}

impl NodeProcess {
    pub(super) fn start(dir: &std::path::Path, cfg: &NodeConfig) -> Result<NodeProcess> {
        let path = dir.join(format!("{}.toml", cfg.rid));
        std::fs::write(&path, toml::to_string(cfg)?)?;
        let control = free_tcp()?;
        let child = Command::new(std::env::current_exe()?)
            .args([
                "node",
                "--events",
                "ndjson",
                "--control",
                &control,
                "--config",
            ])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("spawning zmesh node")?;
        Ok(NodeProcess { child, control })
    }

    /// The node's snapshot, from its control endpoint.
    fn snapshot(&self) -> Result<serde_json::Value> {
        let ctx = zmq::Context::new();
        let req = ctx.socket(zmq::REQ)?;
        req.set_linger(0)?;
        req.set_rcvtimeo(10_000)?;
        req.connect(&self.control)?;
        req.send(&b"snapshot"[..], 0)?;
        let reply = req.recv_bytes(0).context("no snapshot from the node")?;
        Ok(serde_json::from_slice(&reply)?)
    }

    /// Links ready: the snapshot's count over every link (its list stops at 4 096).
    pub(super) fn ready_links(&self) -> Result<usize> {
        let s = self.snapshot()?;
        if let Some(n) = s["links_ready"].as_u64() {
            return Ok(usize::try_from(n)?);
        }
        Ok(s["links"]
            .as_array()
            .map(|l| l.iter().filter(|l| l["state"] == "ready").count())
            .unwrap_or(0))
    }

    /// Waits until `links` links are ready (0: until the control endpoint answers).
    pub(super) fn wait_ready(&self, links: usize) -> Result<()> {
        let limit = Instant::now() + READY_LIMIT;
        let mut ready = 0;
        while Instant::now() < limit {
            match self.ready_links() {
                Ok(n) if n >= links => return Ok(()),
                Ok(n) => ready = n,
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        bail!("the node has {ready} of {links} links ready after {READY_LIMIT:?}")
    }

    fn proc_path(&self) -> String {
        format!("/proc/{}", self.child.id())
    }

    /// Descriptors the node has open (`/proc/<pid>/fd`).
    pub(super) fn fds(&self) -> Result<u64> {
        Ok(std::fs::read_dir(format!("{}/fd", self.proc_path()))?.count() as u64)
    }

    pub(super) fn rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("{}/status", self.proc_path()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .context("no VmRSS")
    }

    pub(super) fn cpu(&self) -> Result<CpuSample> {
        let base = self.proc_path();
        let ticks = cpu_ticks(&format!("{base}/stat"))?;
        let (mut on_cpu_ns, mut switches) = (0u64, 0u64);
        for task in std::fs::read_dir(format!("{base}/task"))? {
            let task = task?.path();
            if let Ok(s) = std::fs::read_to_string(task.join("schedstat")) {
                on_cpu_ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            if let Ok(s) = std::fs::read_to_string(task.join("status")) {
                switches += s
                    .lines()
                    .filter(|l| l.contains("ctxt_switches:"))
                    .filter_map(|l| l.split_whitespace().nth(1))
                    .filter_map(|v| v.parse::<u64>().ok())
                    .sum::<u64>();
            }
        }
        Ok(CpuSample {
            on_cpu_ns,
            ticks,
            switches,
        })
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------------------------------------
// Publishers
// ------------------------------------------------------------------------------------------

/// Raw PUB sockets sending exact beacons from one thread.
pub(super) struct Publishers {
    pub(super) endpoints: Vec<String>,
    slow: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Publishers {
    pub(super) fn start(n: usize) -> Result<Publishers> {
        let mut contexts = Vec::new();
        let mut sockets = Vec::with_capacity(n);
        let mut endpoints = Vec::with_capacity(n);
        for i in 0..n {
            if i % SOCKETS_PER_CONTEXT == 0 {
                contexts.push(zmq::Context::new());
            }
            let ctx = contexts.last().context("a context")?;
            let s = ctx.socket(zmq::PUB)?;
            s.set_linger(0)?;
            endpoints.push(bind_any(&s)?);
            sockets.push(s);
        }
        let slow = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (sl, st) = (slow.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let _contexts = contexts;
            let now = Instant::now();
            let mut next = vec![now; sockets.len()];
            let mut slowed = false;
            while !st.load(Ordering::Relaxed) {
                let now = Instant::now();
                if !slowed && sl.load(Ordering::Relaxed) {
                    // Even phases over the period, as independent publishers would have.
                    slowed = true;
                    let n = next.len().max(1) as u32;
                    for (i, t) in next.iter_mut().enumerate() {
                        *t = now + PERIOD * i as u32 / n;
                    }
                }
                let period = if slowed { PERIOD } else { FAST_PERIOD };
                for (s, t) in sockets.iter().zip(next.iter_mut()) {
                    if now >= *t {
                        // PUB never blocks; a beacon nobody takes is dropped.
                        let _ = s.send_multipart([&BEACON_TOPIC[..], &BEACON_PAYLOAD[..]], 0);
                        *t += period;
                        if *t < now {
                            *t = now + period;
                        }
                    }
                }
                let wake = next.iter().min().copied().unwrap_or(now + FAST_PERIOD);
                let nap = wake
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50));
                std::thread::sleep(nap);
            }
        });
        Ok(Publishers {
            endpoints,
            slow,
            stop,
            thread: Some(thread),
        })
    }

    pub(super) fn slow_down(&self) {
        self.slow.store(true, Ordering::Relaxed);
    }

    pub(super) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------------------------------------
// Fake mesh peers
// ------------------------------------------------------------------------------------------

/// A traffic thread of this bench: its counters, and a flag that stops it.
pub(super) struct Worker<C> {
    what: &'static str,
    stop: Arc<AtomicBool>,
    counters: Arc<std::sync::Mutex<C>>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl<C: std::fmt::Debug + Default + Send + 'static> Worker<C> {
    /// Runs `body` on a thread of its own with the stop flag and the counters.
    pub(super) fn spawn(
        what: &'static str,
        body: impl FnOnce(&AtomicBool, &std::sync::Mutex<C>) -> Result<()> + Send + 'static,
    ) -> Worker<C> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(std::sync::Mutex::new(C::default()));
        let (st, co) = (stop.clone(), counters.clone());
        let thread = std::thread::spawn(move || body(&st, &co));
        Worker {
            what,
            stop,
            counters,
            thread: Some(thread),
        }
    }

    /// The counters, for a log line.
    pub(super) fn stats(&self) -> String {
        match self.counters.lock() {
            Ok(c) => format!("{:?}", *c),
            Err(_) => "?".into(),
        }
    }

    /// Stops the thread and returns what it returned.
    pub(super) fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("{} panicked", self.what),
            None => Ok(()),
        }
    }
}

/// Two raw ROUTER sockets answering for every peer RID the node dials.
pub(super) struct FakePeers {
    pub(super) application: String,
    pub(super) completion: String,
    worker: Worker<PeerCounters>,
}

#[derive(Debug, Default, Clone, Copy)]
struct PeerCounters {
    welcomed: u64,
    probes_answered: u64,
    probes_sent: u64,
    acks_received: u64,
    closed: u64,
}

/// One connection the fake peers accepted.
struct FakeConn {
    lane: usize,
    route: Vec<u8>,
    next_probe: Instant,
}

impl FakePeers {
    /// `expected`: connections expected, to spread the fake peers' own probes over 5 s.
    pub(super) fn start(expected: usize) -> Result<FakePeers> {
        let ctx = zmq::Context::new();
        let app = ctx.socket(zmq::ROUTER)?;
        let cpl = ctx.socket(zmq::ROUTER)?;
        // The node's dialled ROUTER addresses the bound side by these ids (WIRE.md).
        app.set_identity(b"zmesh-application")?;
        cpl.set_identity(b"zmesh-completion")?;
        for s in [&app, &cpl] {
            s.set_linger(0)?;
            s.set_sndhwm(zmesh::runtime::socket::HWM)?;
            s.set_rcvhwm(zmesh::runtime::socket::HWM)?;
        }
        let application = bind_any(&app)?;
        let completion = bind_any(&cpl)?;
        let worker = Worker::spawn(
            "fake peers",
            move |st, co: &std::sync::Mutex<PeerCounters>| {
                let _ctx = ctx;
                let sockets = [app, cpl];
                serve_fake_peers(&sockets, expected, st, co)
            },
        );
        Ok(FakePeers {
            application,
            completion,
            worker,
        })
    }

    /// The node's `[[peers]]` for `n` of them (RIDs `p0`, `p1`, ...), all at these sockets.
    pub(super) fn configs(&self, n: usize) -> Vec<PeerConfig> {
        (0..n)
            .map(|i| {
                PeerConfig::new(
                    format!("p{i}"),
                    self.application.clone(),
                    self.completion.clone(),
                )
            })
            .collect()
    }

    pub(super) fn stats(&self) -> String {
        self.worker.stats()
    }

    pub(super) fn stop(self) -> Result<()> {
        self.worker.stop()
    }
}

/// The fake peers' thread, until `st`: answers every HELLO on the two bound `sockets`
/// (Application, Completion) with a WELCOME of the peer it expects, every PROBE with its
/// ACK, and probes each connection every 5 s (spread over the period for `expected`
/// connections), counting into `co`.
fn serve_fake_peers(
    sockets: &[zmq::Socket; 2],
    expected: usize,
    st: &AtomicBool,
    co: &std::sync::Mutex<PeerCounters>,
) -> Result<()> {
    let mut conns: Vec<FakeConn> = Vec::new();
    let mut generations: HashMap<String, NonZeroU64> = HashMap::new();
    let memberships = Memberships::new(vec![Membership {
        role: Role::Server,
        channel: Name::new(CHANNEL)?,
    }])?;
    let mut next_id = 1u64;
    while !st.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut items = [
            sockets[0].as_poll_item(zmq::POLLIN),
            sockets[1].as_poll_item(zmq::POLLIN),
        ];
        let wait = conns
            .iter()
            .map(|c| c.next_probe)
            .min()
            .map(|t| t.saturating_duration_since(now).as_millis() as i64 + 1)
            .unwrap_or(50)
            .min(50);
        zmq::poll(&mut items, wait)?;
        let readable = [items[0].is_readable(), items[1].is_readable()];
        let mut c = co.lock().map_err(|_| anyhow::anyhow!("counters"))?;
        for (lane, socket) in sockets.iter().enumerate() {
            if !readable[lane] {
                continue;
            }
            while let Ok(frames) = socket.recv_multipart(zmq::DONTWAIT) {
                let Some((route, rec)) = frames.split_first() else {
                    continue;
                };
                match Record::decode(rec) {
                    Ok(Record::Hello(h)) => {
                        let rid = h.expect_rid.clone().unwrap_or(Name::new("fake")?);
                        let n = generations.len() as u64 + 1;
                        let generation = *generations
                            .entry(rid.as_str().to_owned())
                            .or_insert_with(|| {
                                NonZeroU64::new(0x5EED_0000_0000 + n).unwrap_or(NonZeroU64::MIN)
                            });
                        let welcome = Record::Welcome(Welcome {
                            lane: h.lane,
                            security_identity: Label::new(rid.as_str())?,
                            rid,
                            generation,
                            memberships: memberships.clone(),
                        });
                        if send(socket, route, &welcome.encode()).is_err() {
                            continue;
                        }
                        c.welcomed += 1;
                        let k = conns.len() as u32;
                        conns.push(FakeConn {
                            lane,
                            route: route.clone(),
                            next_probe: now
                                + PERIOD * (k % expected.max(1) as u32) / expected.max(1) as u32,
                        });
                    }
                    Ok(Record::Probe { id }) => {
                        let ack = [wire::encode_ack(id).to_vec()];
                        c.probes_answered += u64::from(send(socket, route, &ack).is_ok());
                    }
                    Ok(Record::Ack { .. }) => c.acks_received += 1,
                    Ok(Record::Close { .. }) => {
                        conns.retain(|x| !(x.lane == lane && x.route == *route));
                        c.closed += 1;
                    }
                    _ => {}
                }
            }
        }
        // Our own probes, each connection every 5 s (a fresh id each time).
        let now = Instant::now();
        for conn in conns.iter_mut().filter(|x| now >= x.next_probe) {
            send_probe(&sockets[conn.lane], &conn.route, &mut next_id);
            conn.next_probe += PERIOD;
            c.probes_sent += 1;
        }
    }
    Ok(())
}

/// Sends a PROBE with a fresh id (`next_id`, then counted up) to `route` on a ROUTER; one
/// that cannot go now is dropped (the node's deadline is what the bench watches).
pub(super) fn send_probe(socket: &zmq::Socket, route: &[u8], next_id: &mut u64) {
    let id = NonZeroU64::new(*next_id).unwrap_or(NonZeroU64::MIN);
    *next_id += 1;
    let _ = send(socket, route, &[wire::encode_probe(id).to_vec()]);
}

/// Sends `frames` to `route` on a ROUTER, without blocking.
pub(super) fn send(socket: &zmq::Socket, route: &[u8], frames: &[Vec<u8>]) -> Result<()> {
    socket.send(route, zmq::SNDMORE | zmq::DONTWAIT)?;
    let last = frames.len().saturating_sub(1);
    for (i, f) in frames.iter().enumerate() {
        let more = if i < last { zmq::SNDMORE } else { 0 };
        socket.send(&f[..], more | zmq::DONTWAIT)?;
    }
    Ok(())
}
