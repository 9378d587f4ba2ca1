//! A deterministic simulator of whole zmesh meshes.
//!
//! One thread, virtual time, one seeded RNG: N nodes (RouteMesh peers dialling each other on
//! both lanes, or ClientServer clients dialling servers) run zmesh's sans-IO protocol state
//! machines ([`zmesh::proto`]; for the calls a node serves and for admission, the node core's
//! parts the I/O thread drives, [`zmesh::proto::node`]) over a simulated network ([`net`])
//! that delays, holds and cuts connections, while a workload makes calls of every semantics
//! (streams among them) and sends messages and a fault schedule partitions, freezes, kills,
//! restarts and stops nodes (and, in automatic mode, where nodes find each other through a
//! simulated descriptor store ([`store`]), cuts them off that store). After every step the
//! invariants of [`truth`] are checked against the simulator's ground truth. The same seed
//! gives the same run, event for event, so a failing seed replays exactly (`zmesh sim --seed
//! S ... --trace`; [`cli`] is that command).
//!
//! SIMULATION.md at the repository root says what is simulated, what is not, the invariants,
//! the seeds run and the deliberately wrong variants of the core the invariants caught.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
mod failover;
pub mod fanout;
pub mod net;
pub mod node;
pub mod store;
pub mod transport;
pub mod truth;
mod workload;
mod world_store;
// Shared with the CLI: a closed stdout ends `zmesh sim` quietly.
#[path = "../../zmesh-cli/src/stdout.rs"]
mod stdout;

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zmesh::proto::wire::Lane;

use failover::Zombie;
use net::{End, Net, NodeIx};
use node::{Phase, SimNode, Spec, StoreAnswer, StoreReq};
use store::{SimStore, WatchEvent};
use truth::{Stats, Truth, Violation};
use world_store::FromStore;

/// The shape of the simulated mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// RouteMesh: every pair of nodes dials each other on the Application and Completion
    /// lanes; some nodes serve, the others only call (pairs of two callers need no link).
    RouteMesh,
    /// ClientServer: clients dial every server on one connection.
    ClientServer,
    /// Classic fanout: publishers bind a PUB socket and beacon; every other node subscribes to
    /// every publisher with one SUB socket each.
    Fanout,
}

impl Topology {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Topology::RouteMesh => "mesh",
            Topology::ClientServer => "client-server",
            Topology::Fanout => "fanout",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Topology> {
        match s {
            "mesh" => Some(Topology::RouteMesh),
            "client-server" => Some(Topology::ClientServer),
            "fanout" => Some(Topology::Fanout),
            _ => None,
        }
    }
}

/// One simulation's parameters. [`Config::for_seed`] derives a varied one from a seed.
#[derive(Debug, Clone)]
pub struct Config {
    /// Hosts (2 to 200).
    pub nodes: usize,
    /// The topology.
    pub topology: Topology,
    /// Virtual time of the faulty phase; a quiet phase and a graceful stop of every node
    /// follow it.
    pub duration: Duration,
    /// Whether faults are injected (without them no link may ever leave ready).
    pub faults: bool,
    /// Keep the whole trace (otherwise the last [`TRACE_TAIL`] lines).
    pub full_trace: bool,
    /// The share of hosts, in percent, that speak version 1 only (announce no capability,
    /// WIRE.md §8.1); which hosts is drawn from the seed.
    pub version1: u8,
    /// Callers sometimes make a burst of calls to one server in one turn, sent as BATCH and
    /// CALLS records (MISSION K5, WIRE.md §4.12, §4.14). Off, the workload draws exactly
    /// what it drew before bursts existed, so a run without them replays as it always did.
    pub batches: bool,
    /// Each node reads what arrived through the library's fair receive scheduler, rotation
    /// by rotation (MISSION R2, R4), and now and then a peer floods one connection with
    /// hundreds of messages at once. Off, a delivery is handled as it arrives and no flood is
    /// drawn, as before the receive loop was modelled.
    pub receive_loop: bool,
    /// Automatic mode (MISSION D1-D3): every node publishes its descriptor into a simulated
    /// store ([`store`]) and dials (RouteMesh, ClientServer) or subscribes to (fanout) what
    /// the descriptors there ask for, through the library's lease keeper and directory; the
    /// faults include store outages. Off, nodes dial their configured peers and nothing of
    /// the store is drawn, so a run without it replays as it did before it existed.
    pub discovery: bool,
    /// Callers sometimes make a stream call: its callee sends 1 to 40 ITEMs (now and then
    /// 1 100 to 1 600, more than a window) before its REPLY, within the window where `credit`
    /// is in effect (WIRE.md §4.10, §4.15); a fifth of them are cancelled as calls are. Off,
    /// no stream is drawn, as before streams were modelled.
    pub streams: bool,
    /// Where a RouteMesh or ClientServer run discovers, a third of the freezes are
    /// failovers instead: the host's run pauses, a successor of its RID (a new generation)
    /// starts while it is paused, and the paused run comes back beside it for a while (a
    /// zombie: a process paused by the kernel, a VM migration or a long GC, whose
    /// orchestrator started a replacement) until it learns from the store that it was
    /// superseded, or is killed. Off, those freezes are drawn as before.
    pub zombies: bool,
    /// A zombie whose first put had failed publishes its descriptor when it comes back, over
    /// its successor's (SIMULATION.md, "Open findings": the store's put replaces any
    /// descriptor of its RID, so the paused run takes the RID back and the successor is
    /// superseded). Off (the default), such a zombie ends when it asks to publish.
    pub zombie_puts: bool,
}

/// The RID of host `i`.
pub fn rid_of(i: NodeIx) -> String {
    format!("n{i:03}")
}

/// The host a RID of [`rid_of`] names.
pub fn host_of_rid(rid: &str) -> Option<NodeIx> {
    rid.strip_prefix('n')?.parse().ok()
}

/// Trace lines kept when the whole trace is not asked for.
pub const TRACE_TAIL: usize = 400;

impl Config {
    /// The configuration a seed stands for in the default set: 2 to 7 nodes, one of the three
    /// topologies, `minutes` of virtual time with faults, automatic mode and stream calls
    /// each in half of the seeds (streams with effect on the call topologies).
    pub fn for_seed(seed: u64, minutes: u64) -> Config {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c0f1);
        Config {
            nodes: rng.random_range(2..=7),
            topology: match rng.random_range(0..3) {
                0 => Topology::RouteMesh,
                1 => Topology::ClientServer,
                _ => Topology::Fanout,
            },
            duration: Duration::from_secs(minutes * 60),
            faults: true,
            full_trace: false,
            // A third of the seeds mesh version-1 nodes with capable ones.
            version1: match rng.random_range(0..3) {
                0 => rng.random_range(20..=80),
                _ => 0,
            },
            batches: true,
            receive_loop: true,
            // Drawn last, so that every field above is what it was before discovery existed.
            discovery: rng.random_bool(0.5),
            // Drawn after discovery, for the same reason.
            streams: rng.random_bool(0.5),
            // Not drawn: it takes effect only where discovery does, on the call topologies.
            zombies: true,
            zombie_puts: false,
        }
    }

    /// Whether host `i` of a run of `seed` speaks version 1 only.
    pub fn is_version1(&self, seed: u64, i: NodeIx) -> bool {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0001_5eed ^ ((i as u64) << 32));
        rng.random_range(0..100) < u32::from(self.version1)
    }

    /// Whether this run discovers through the store (automatic mode, on every topology).
    pub fn discovers(&self) -> bool {
        self.discovery
    }

    /// Whether this run's faults include paused runs that come back beside their successor
    /// ([`Config::zombies`]): only where the store fences runs (automatic mode) and a
    /// handshake admits them (RouteMesh, ClientServer).
    pub fn has_zombies(&self) -> bool {
        self.zombies && self.discovery && self.topology != Topology::Fanout
    }

    /// The command line that replays this configuration with `seed`.
    pub fn replay_line(&self, seed: u64) -> String {
        format!(
            "cargo run --release -- sim --seed {seed} --nodes {} --topology {} --seconds {} --version1 {}{}{}{}{}{}{}{} --trace",
            self.nodes,
            self.topology.name(),
            self.duration.as_secs(),
            self.version1,
            if self.faults { "" } else { " --no-faults" },
            if self.batches { "" } else { " --no-batches" },
            if self.receive_loop { "" } else { " --no-receive-loop" },
            if self.discovers() {
                " --discovery"
            } else {
                " --no-discovery"
            },
            if self.streams {
                " --streams"
            } else {
                " --no-streams"
            },
            if self.zombies { "" } else { " --no-zombies" },
            if self.zombie_puts { " --zombie-puts" } else { "" }
        )
    }
}

/// The [`Ctx`] of a `World` for one node's step, borrowing only the fields it names, so the
/// node itself (in `nodes` or the zombie) can be borrowed beside it.
macro_rules! world_ctx {
    ($w:ident) => {
        Ctx {
            net: &mut $w.net,
            truth: &mut $w.truth,
            now: $w.now,
            rng: &mut $w.rng,
            trace: &mut $w.trace,
            hosts: &$w.hosts,
        }
    };
}
pub(crate) use world_ctx;

/// What the simulator hands a node for one step: the network, the truth, the clock, the RNG.
pub struct Ctx<'a> {
    /// The network.
    pub net: &'a mut Net,
    /// The ground truth.
    pub truth: &'a mut Truth,
    /// Virtual time now.
    pub now: Duration,
    /// The one RNG.
    pub rng: &'a mut ChaCha8Rng,
    /// The trace.
    trace: &'a mut Trace,
    /// Per host: its current run (0: none yet), and whether a node listens there.
    hosts: &'a [(u64, bool)],
}

impl Ctx<'_> {
    /// Adds a line to the trace.
    pub fn trace(&mut self, line: String) {
        self.trace.push(self.now, line);
    }

    /// The current run of host `node`, and whether a node listens there.
    pub fn host(&self, node: NodeIx) -> (End, bool) {
        let (run, up) = self.hosts.get(node).copied().unwrap_or((0, false));
        (End { node, run }, up)
    }
}

#[derive(Debug)]
struct Trace {
    lines: VecDeque<String>,
    full: bool,
}

impl Trace {
    fn push(&mut self, now: Duration, line: String) {
        if !self.full && self.lines.len() >= TRACE_TAIL {
            self.lines.pop_front();
        }
        let mut s = String::new();
        let _ = write!(s, "{:>10.3}s {line}", now.as_secs_f64());
        self.lines.push_back(s);
    }
}

/// How one simulation went.
#[derive(Debug)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Its configuration.
    pub config: Config,
    /// What it did.
    pub stats: Stats,
    /// The violations (empty: every invariant held).
    pub violations: Vec<Violation>,
    /// The trace (the tail, or all of it with `full_trace`).
    pub trace: Vec<String>,
    /// Simulation steps taken.
    pub steps: u64,
    /// Hosts that serve (RouteMesh, ClientServer) or publish (fanout).
    pub servers: usize,
}

impl Report {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// A fault or workload event the schedule fires.
#[derive(Debug, Clone)]
enum Event {
    Work,
    /// The application of host `node`'s run `run` cancels call `uid` (if it still waits).
    Cancel {
        node: NodeIx,
        run: u64,
        uid: u64,
    },
    Partition {
        a: NodeIx,
        b: NodeIx,
        one_way: bool,
        heal_after: Duration,
    },
    Heal {
        a: NodeIx,
        b: NodeIx,
    },
    Freeze {
        node: NodeIx,
        thaw_after: Duration,
        then_kill: bool,
    },
    Thaw {
        node: NodeIx,
        kill: bool,
    },
    Kill {
        node: NodeIx,
    },
    /// Host `node`'s run pauses; a successor of its RID starts after `standby`, and the
    /// paused run comes back `back_after` later, beside it (`Config::zombies`).
    Failover {
        node: NodeIx,
        standby: Duration,
        back_after: Duration,
    },
    /// The paused run `run` of host `node` comes back.
    ZombieBack {
        node: NodeIx,
        run: u64,
    },
    /// The paused run `run` of host `node`, back beside its successor, is killed.
    ZombieKill {
        node: NodeIx,
        run: u64,
    },
    Start {
        node: NodeIx,
    },
    /// Host `node` begins a graceful stop (and starts again later); `racing`: another host
    /// restarts at the same instant, so its new run dials the stopping node while it drains.
    Stop {
        node: NodeIx,
        racing: Option<NodeIx>,
    },
    Reset,
    Sweep,
    EndFaults,
    StopAll,
    /// A store operation of host `node`'s run `run` reaches the store.
    StoreApply {
        node: NodeIx,
        run: u64,
        req: StoreReq,
        issued: Duration,
    },
    /// The store's answer reaches host `node`'s run `run`.
    StoreAnswer {
        node: NodeIx,
        run: u64,
        answer: StoreAnswer,
    },
    /// What the store's watch reports reaches host `node`'s run `run`.
    Watch {
        node: NodeIx,
        run: u64,
        events: Vec<WatchEvent>,
    },
    /// A store outage begins for host `who` (every host: `None`).
    StoreCut {
        who: Option<NodeIx>,
        heal_after: Duration,
    },
    /// That outage ends.
    StoreHeal {
        who: Option<NodeIx>,
    },
}

struct World {
    cfg: Config,
    rng: ChaCha8Rng,
    net: Net,
    truth: Truth,
    trace: Trace,
    base: Instant,
    now: Duration,
    specs: Vec<Spec>,
    nodes: Vec<Option<SimNode>>,
    hosts: Vec<(u64, bool)>,
    schedule: BTreeMap<(Duration, u64), Event>,
    seq: u64,
    next_uid: u64,
    keys: Vec<(String, u64)>,
    faults_on: bool,
    steps: u64,
    /// When each host's node next wants its timers run, by instant (the index the loop
    /// picks the next instant from).
    wakeups: std::collections::BTreeSet<(Duration, NodeIx)>,
    wake_of: Vec<Option<Duration>>,
    /// Hosts whose node was handed something in this step.
    touched: std::collections::BTreeSet<NodeIx>,
    /// Check every node's ready links at the end of this step.
    sweep: bool,
    /// The simulated store, in automatic mode.
    store: Option<SimStore>,
    /// One-way latency between a host and the store (constant per seed, so a watch's
    /// events arrive in order).
    store_latency: Duration,
    /// The store changed (or who reaches it did): the watches have something to say.
    store_dirty: bool,
    /// Per host: the last instant it could not reach the store or was frozen (the lease
    /// rule judges an expiry only after a whole TTL without either).
    blind_at: Vec<Duration>,
    /// What the store sent a frozen host, in order, delivered when it thaws.
    deferred: BTreeMap<NodeIx, VecDeque<FromStore>>,
    /// The paused run beside its successor, if there is one now.
    zombie: Option<Zombie>,
    /// The zombie was handed something in this step.
    zombie_touched: bool,
}

/// Runs one simulation.
pub fn run(seed: u64, cfg: &Config) -> Report {
    let mut w = World::new(seed, cfg.clone());
    w.run();
    Report {
        seed,
        config: cfg.clone(),
        stats: w.truth.stats,
        violations: w.truth.violations.clone(),
        trace: w.trace.lines.into_iter().collect(),
        steps: w.steps,
        servers: w.specs.iter().filter(|s| s.serves || s.publishes).count(),
    }
}

impl World {
    fn new(seed: u64, cfg: Config) -> World {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = cfg.nodes.clamp(2, 200);
        let latency = Duration::from_micros(rng.random_range(50..5_000));
        let jitter = Duration::from_micros(rng.random_range(0..20_000));
        let servers = match cfg.topology {
            Topology::RouteMesh => rng.random_range(1..=n),
            Topology::ClientServer | Topology::Fanout => rng.random_range(1..n),
        };
        let specs: Vec<Spec> = (0..n)
            .map(|i| {
                let dials = match cfg.topology {
                    Topology::RouteMesh => (0..n)
                        .filter(|&j| j != i)
                        .flat_map(|j| [(j, Lane::Application), (j, Lane::Completion)])
                        .collect(),
                    Topology::ClientServer if i >= servers => {
                        (0..servers).map(|j| (j, Lane::ClientServer)).collect()
                    }
                    Topology::ClientServer | Topology::Fanout => Vec::new(),
                };
                let fanout = cfg.topology == Topology::Fanout;
                Spec {
                    rid: rid_of(i),
                    serves: i < servers && !fanout,
                    dials,
                    publishes: fanout && i < servers,
                    subscribes: if fanout && i >= servers {
                        (0..servers).collect()
                    } else {
                        Vec::new()
                    },
                    version1: cfg.is_version1(seed, i),
                    receive_loop: cfg.receive_loop,
                    mesh: cfg.topology == Topology::RouteMesh,
                    discovery: cfg.discovers(),
                }
            })
            .collect();
        let full = cfg.full_trace;
        // Drawn only in automatic mode, after everything a run without it draws here.
        let (store, store_latency) = if cfg.discovers() {
            let latency = Duration::from_micros(rng.random_range(200..20_000));
            (Some(SimStore::new(rng.random_bool(0.5))), latency)
        } else {
            (None, Duration::ZERO)
        };
        World {
            cfg,
            rng,
            net: Net::new(latency, jitter),
            truth: Truth::default(),
            trace: Trace {
                lines: VecDeque::new(),
                full,
            },
            base: Instant::now(),
            now: Duration::ZERO,
            specs,
            nodes: (0..n).map(|_| None).collect(),
            hosts: vec![(0, false); n],
            schedule: BTreeMap::new(),
            seq: 0,
            next_uid: 1,
            keys: Vec::new(),
            faults_on: true,
            steps: 0,
            wakeups: std::collections::BTreeSet::new(),
            wake_of: vec![None; n],
            touched: std::collections::BTreeSet::new(),
            sweep: false,
            store,
            store_latency,
            store_dirty: false,
            blind_at: vec![Duration::ZERO; n],
            deferred: BTreeMap::new(),
            zombie: None,
            zombie_touched: false,
        }
    }

    fn at(&mut self, t: Duration, e: Event) {
        self.seq += 1;
        self.schedule.insert((t, self.seq), e);
    }

    fn n(&self) -> usize {
        self.nodes.len()
    }

    fn run(&mut self) {
        for i in 0..self.n() {
            let t = Duration::from_millis(self.rng.random_range(0..500));
            self.at(t, Event::Start { node: i });
        }
        self.at(Duration::from_millis(100), Event::Work);
        self.at(Duration::from_millis(500), Event::Sweep);
        if self.cfg.faults {
            let first = self.random_gap();
            self.at(first, Event::Reset);
        }
        let quiet = self.cfg.duration;
        self.at(quiet, Event::EndFaults);
        // The quiet phase: faults healed, every host up, links back, then a graceful stop.
        let end = quiet + Duration::from_secs(60);
        self.at(end, Event::StopAll);
        let hard_end = end + Duration::from_secs(30);
        let mut stuck = 0u32;
        loop {
            let next = [
                self.schedule.keys().next().map(|k| k.0),
                self.net.next_due(),
                self.wakeups
                    .iter()
                    .find(|(_, i)| !self.net.is_frozen(*i))
                    .map(|(t, _)| *t),
                self.zombie_wakeup(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else { break };
            if next > hard_end {
                break;
            }
            if next <= self.now {
                stuck += 1;
                if stuck > 100_000 {
                    self.truth.violation(
                        "progress",
                        "the simulation stopped advancing its clock".into(),
                    );
                    return;
                }
            } else {
                stuck = 0;
            }
            self.now = next.max(self.now);
            self.truth.set_now(self.now);
            self.step();
            if !self.truth.violations.is_empty() {
                return;
            }
        }
        self.truth.set_now(self.now);
        for (i, slot) in self.nodes.iter().enumerate() {
            if let Some(node) = slot {
                if node.phase() != Phase::Stopped || node.has_timers() {
                    let detail = format!(
                        "host {i} ({:?}) still has timers or is not stopped at the end",
                        node.phase()
                    );
                    self.truth.violation("nothing_after_shutdown", detail);
                }
            }
        }
        self.truth.check_end();
    }

    fn random_gap(&mut self) -> Duration {
        self.now + Duration::from_millis(self.rng.random_range(2_000..40_000))
    }

    fn step(&mut self) {
        self.steps += 1;
        let now = self.now;
        // Scheduled events due now.
        while let Some((&(t, s), _)) = self.schedule.iter().next() {
            if t > now {
                break;
            }
            let Some(e) = self.schedule.remove(&(t, s)) else {
                break;
            };
            self.fire(e);
        }
        // Deliveries due now.
        let mut received = std::collections::BTreeSet::new();
        let mut zombie_received = false;
        for d in self.net.take_due(now) {
            let peer = self.net_peer(&d);
            if let Some(z) = self
                .zombie
                .as_mut()
                .filter(|z| z.node.ix == d.to.node && z.node.run == d.to.run)
            {
                let mut ctx = world_ctx!(self);
                z.node.enqueue(&mut ctx, d.conn, peer, d.link, d.delivery);
                self.zombie_touched = true;
                zombie_received = true;
                continue;
            }
            let Some(Some(node)) = self.nodes.get_mut(d.to.node) else {
                continue;
            };
            if node.run != d.to.run {
                continue;
            }
            let mut ctx = world_ctx!(self);
            node.enqueue(&mut ctx, d.conn, peer, d.link, d.delivery);
            self.touched.insert(d.to.node);
            received.insert(d.to.node);
        }
        // What arrived is read now, rotation by rotation (where the receive loop is
        // modelled; otherwise it was handled as it arrived).
        if self.cfg.receive_loop {
            for i in received {
                self.ctx_node(i, |node, ctx| node.handle_receive(ctx));
            }
            if zombie_received {
                self.ctx_zombie(|node, ctx| node.handle_receive(ctx));
            }
        }
        // Timers due now (a frozen host runs none).
        let due: Vec<NodeIx> = self
            .wakeups
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|&(_, i)| i)
            .filter(|&i| !self.net.is_frozen(i))
            .collect();
        for i in due {
            self.ctx_node(i, |node, ctx| node.handle_timeout(ctx));
        }
        if self.zombie_wakeup().is_some_and(|t| t <= now) {
            self.ctx_zombie(|node, ctx| node.handle_timeout(ctx));
        }
        // The liveness rule, checked for every node that moved (and every node on each
        // sweep): no ready link outlives its deadline.
        let touched = std::mem::take(&mut self.touched);
        let zombie_touched = std::mem::take(&mut self.zombie_touched);
        if self.store.is_some() {
            for &i in &touched {
                self.poll_store(i);
            }
            if zombie_touched {
                self.poll_zombie_store();
            }
            self.poll_watches();
        }
        for &i in &touched {
            self.rewake(i);
        }
        let sweep = std::mem::take(&mut self.sweep);
        if sweep || zombie_touched {
            self.check_zombie_ready();
        }
        if sweep {
            for i in 0..self.n() {
                self.check_ready(i);
            }
        } else {
            for i in touched {
                self.check_ready(i);
            }
        }
    }

    /// After the quiet phase every link the configuration asks for is ready: each dial of a
    /// pair where at least one side serves, seen from both sides.
    fn check_whole(&mut self) {
        for i in 0..self.n() {
            for &(peer, lane) in &self.specs[i].dials {
                if !self.specs[i].serves && !self.specs[peer].serves {
                    continue;
                }
                for (a, b) in [(i, peer), (peer, i)] {
                    let ready = self
                        .nodes
                        .get(a)
                        .and_then(Option::as_ref)
                        .is_some_and(|n| n.is_ready_with(b, lane));
                    if !ready {
                        let detail = format!(
                            "after a quiet minute host {a} has no ready {lane:?} link with host {b}"
                        );
                        self.truth.violation("quiet_mesh_is_whole", detail);
                    }
                }
            }
        }
    }

    fn check_ready(&mut self, i: NodeIx) {
        if self.net.is_frozen(i) {
            // A frozen host runs no timers; its links are judged when it thaws.
            return;
        }
        if let Some(Some(node)) = self.nodes.get(i) {
            for (conn, _, last) in node.ready_evidence() {
                self.truth.check_ready(i, conn, last, self.now);
            }
            for (publisher, last) in node.ready_watches() {
                self.truth.check_watch(i, publisher, last, self.now);
            }
        }
    }

    /// Re-registers host `i`'s next wake-up after its node was handed something.
    fn rewake(&mut self, i: NodeIx) {
        if let Some(old) = self.wake_of.get_mut(i).and_then(Option::take) {
            self.wakeups.remove(&(old, i));
        }
        let next = self
            .nodes
            .get(i)
            .and_then(Option::as_ref)
            .and_then(SimNode::poll_timeout);
        if let Some(t) = next {
            self.wakeups.insert((t, i));
            if let Some(w) = self.wake_of.get_mut(i) {
                *w = Some(t);
            }
        }
    }

    fn net_peer(&self, d: &net::Due) -> NodeIx {
        // The host at the other end: the simulator knows it; a node learns who it is from
        // the handshake, and its glue keys links by host where the shell keys them by RID
        // (one RID per host here).
        d.from.node
    }

    fn ctx_node(&mut self, i: NodeIx, f: impl FnOnce(&mut SimNode, &mut Ctx<'_>)) {
        let Some(Some(node)) = self.nodes.get_mut(i) else {
            return;
        };
        let mut ctx = world_ctx!(self);
        f(node, &mut ctx);
        self.touched.insert(i);
    }

    /// The current run of host `i`.
    fn end_of(&self, i: NodeIx) -> End {
        End {
            node: i,
            run: self.hosts.get(i).map_or(0, |h| h.0),
        }
    }

    fn up(&self, i: NodeIx) -> bool {
        self.nodes
            .get(i)
            .and_then(Option::as_ref)
            .is_some_and(|n| n.phase() == Phase::Running)
    }

    fn fire(&mut self, e: Event) {
        let now = self.now;
        match e {
            Event::Work => {
                self.work();
                let gap = Duration::from_millis(self.rng.random_range(20..400));
                if now < self.cfg.duration + Duration::from_secs(55) {
                    self.at(now + gap, Event::Work);
                }
            }
            Event::Cancel { node, run, uid } => {
                if self.hosts.get(node).is_some_and(|h| h.0 == run) {
                    self.ctx_node(node, |n, ctx| n.cancel_call(ctx, uid));
                }
            }
            Event::Start { node } => self.start(node),
            Event::Stop { node, racing } => {
                self.trace
                    .push(now, format!("fault: graceful stop of host {node}"));
                self.begin_stop(node);
                let back = now + Duration::from_millis(self.rng.random_range(6_000..20_000));
                self.at(back, Event::Start { node });
                if let Some(b) = racing {
                    // A rolling restart of two hosts at once: b's process is replaced while
                    // `node` drains, and b's new run dials it.
                    self.trace.push(
                        now,
                        format!("fault: host {b} restarts while host {node} drains"),
                    );
                    self.kill(b);
                    let back = now + Duration::from_millis(self.rng.random_range(50..500));
                    self.at(back, Event::Start { node: b });
                }
            }
            Event::Failover {
                node,
                standby,
                back_after,
            } => self.failover(node, standby, back_after),
            Event::ZombieBack { node, run } => self.zombie_back(node, run),
            Event::ZombieKill { node, run } => {
                if self
                    .zombie
                    .as_ref()
                    .is_some_and(|z| z.node.ix == node && z.node.run == run)
                {
                    self.kill_zombie("killed");
                }
            }
            Event::Kill { node } => {
                self.kill(node);
                let back = now + Duration::from_millis(self.rng.random_range(500..20_000));
                self.at(back, Event::Start { node });
            }
            Event::Partition {
                a,
                b,
                one_way,
                heal_after,
            } => {
                let how = if one_way { "one-way" } else { "symmetric" };
                self.trace.push(
                    now,
                    format!("fault: {how} partition {a} -> {b} for {heal_after:?}"),
                );
                self.net.set_held(a, b, true, now);
                if !one_way {
                    self.net.set_held(b, a, true, now);
                }
                self.at(now + heal_after, Event::Heal { a, b });
            }
            Event::Heal { a, b } => {
                self.trace
                    .push(now, format!("fault: partition {a} <-> {b} heals"));
                self.net.set_held(a, b, false, now);
                self.net.set_held(b, a, false, now);
            }
            Event::Freeze {
                node,
                thaw_after,
                then_kill,
            } => {
                self.trace.push(
                    now,
                    format!(
                        "fault: host {node} freezes for {thaw_after:?} (then killed: {then_kill})"
                    ),
                );
                self.net.set_frozen(node, true, now);
                self.at(
                    now + thaw_after,
                    Event::Thaw {
                        node,
                        kill: then_kill,
                    },
                );
            }
            Event::Thaw { node, kill } => {
                self.trace.push(now, format!("fault: host {node} thaws"));
                if kill {
                    // A host that froze and rebooted: its process is gone.
                    self.kill(node);
                    self.net.set_frozen(node, false, now);
                    let back = now + Duration::from_millis(self.rng.random_range(100..5_000));
                    self.at(back, Event::Start { node });
                } else {
                    self.net.set_frozen(node, false, now);
                    self.thawed(node);
                }
            }
            Event::Reset => {
                if self.faults_on {
                    self.inject();
                    let next = self.random_gap();
                    self.at(next, Event::Reset);
                }
            }
            Event::Sweep => {
                // Checked at the end of the step, after the nodes ran their timers: a host
                // that thaws now runs its overdue deadlines first.
                self.sweep = true;
                self.expire_leases();
                if now < self.cfg.duration + Duration::from_secs(90) {
                    self.at(now + Duration::from_millis(500), Event::Sweep);
                }
            }
            Event::EndFaults => {
                self.trace.push(
                    now,
                    "faults end: every partition heals, every host starts".into(),
                );
                self.faults_on = false;
                self.kill_zombie("the faults end");
                for a in 0..self.n() {
                    let frozen = self.net.is_frozen(a);
                    self.net.set_frozen(a, false, now);
                    if frozen {
                        self.thawed(a);
                    }
                    for b in 0..self.n() {
                        self.net.set_held(a, b, false, now);
                    }
                }
                if let Some(store) = self.store.as_mut() {
                    store.heal_all();
                    self.store_dirty = true;
                    for b in &mut self.blind_at {
                        *b = now;
                    }
                }
                // Pending fault events are dropped (what is on its way to or from the store
                // is not a fault); every host is started again.
                let keep: Vec<((Duration, u64), Event)> = std::mem::take(&mut self.schedule)
                    .into_iter()
                    .filter(|(_, e)| {
                        matches!(
                            e,
                            Event::Work
                                | Event::Cancel { .. }
                                | Event::StopAll
                                | Event::StoreApply { .. }
                                | Event::StoreAnswer { .. }
                                | Event::Watch { .. }
                        )
                    })
                    .collect();
                self.schedule.extend(keep);
                for i in 0..self.n() {
                    if !self.up(i) {
                        if self.nodes.get(i).is_some_and(Option::is_some) {
                            self.kill(i);
                        }
                        self.at(now + Duration::from_millis(10), Event::Start { node: i });
                    }
                }
            }
            Event::StopAll => {
                self.check_whole();
                self.check_store_whole();
                self.trace.push(now, "graceful stop of every host".into());
                for i in 0..self.n() {
                    self.begin_stop(i);
                }
            }
            Event::StoreApply {
                node,
                run,
                req,
                issued,
            } => self.store_apply(node, run, req, issued),
            Event::StoreAnswer { node, run, answer } => {
                self.on_from_store(node, FromStore::Answer(run, answer));
            }
            Event::Watch { node, run, events } => {
                self.on_from_store(node, FromStore::Watch(run, events));
            }
            Event::StoreCut { who, heal_after } => {
                let whom = who.map_or("every host".to_owned(), |h| format!("host {h}"));
                self.trace.push(
                    now,
                    format!("fault: the store is unreachable for {whom} for {heal_after:?}"),
                );
                self.truth.stats.store_outages += 1;
                if let Some(store) = self.store.as_mut() {
                    store.set_cut(who, true);
                }
                self.store_dirty = true;
                self.at(now + heal_after, Event::StoreHeal { who });
            }
            Event::StoreHeal { who } => {
                let whom = who.map_or("every host".to_owned(), |h| format!("host {h}"));
                self.trace.push(
                    now,
                    format!("fault: the store is reachable again for {whom}"),
                );
                if let Some(store) = self.store.as_mut() {
                    store.set_cut(who, false);
                }
                for (h, b) in self.blind_at.iter_mut().enumerate() {
                    if who.is_none_or(|w| w == h) {
                        *b = now;
                    }
                }
                self.store_dirty = true;
            }
        }
    }

    /// Host `node`'s running node begins its graceful stop (the truth records it: from now
    /// on that run admits no new connection).
    fn begin_stop(&mut self, node: NodeIx) {
        if self.up(node) {
            let end = self.end_of(node);
            self.truth.on_stop_began(end);
        }
        self.ctx_node(node, |n, ctx| n.begin_stop(ctx));
    }

    fn start(&mut self, node: NodeIx) {
        if self.up(node) {
            return;
        }
        if self.nodes.get(node).is_some_and(Option::is_some) {
            // A node still draining or stopped: its process ends before the next one starts.
            self.kill(node);
        }
        let run = self.hosts[node].0 + 1;
        let generation = self.rng.random::<u64>() | 1;
        self.truth.on_start(node, run, generation);
        self.hosts[node] = (run, true);
        let spec = self.specs[node].clone();
        self.trace.push(
            self.now,
            format!("host {node} starts run {run} g{generation:x}"),
        );
        let serves = spec.serves;
        let rid = spec.rid.clone();
        self.nodes[node] = Some(SimNode::new(
            node, run, generation, spec, self.base, self.now,
        ));
        self.touched.insert(node);
        if let Some(store) = self.store.as_mut() {
            self.truth.on_role(&rid, serves);
            let first = store.watch((node, run));
            self.at(
                self.now + self.store_latency,
                Event::Watch {
                    node,
                    run,
                    events: vec![first],
                },
            );
        }
    }

    fn kill(&mut self, node: NodeIx) {
        self.trace
            .push(self.now, format!("fault: host {node} killed"));
        if self.zombie.as_ref().is_some_and(|z| z.node.ix == node) {
            self.kill_zombie("its host is killed");
        }
        self.net.kill(node, self.now, &mut self.rng);
        self.truth.on_kill(End {
            node,
            run: self.hosts[node].0,
        });
        if let Some(store) = self.store.as_mut() {
            store.unwatch((node, self.hosts[node].0));
        }
        self.deferred.remove(&node);
        if let Some(slot) = self.nodes.get_mut(node) {
            *slot = None;
        }
        self.touched.insert(node);
        if let Some(h) = self.hosts.get_mut(node) {
            h.1 = false;
        }
    }

    /// One fault, chosen at random.
    fn inject(&mut self) {
        let n = self.n();
        let now = self.now;
        let a = self.rng.random_range(0..n);
        let mut b = self.rng.random_range(0..n);
        if b == a {
            b = (a + 1) % n;
        }
        // In automatic mode a fifth of the faults are store outages (drawn only there).
        if self.store.is_some() && self.rng.random_bool(0.2) {
            let who = self.rng.random_bool(0.5).then_some(a);
            let heal_after = Duration::from_millis(self.rng.random_range(1_000..40_000));
            self.fire(Event::StoreCut { who, heal_after });
            return;
        }
        let e = match self.rng.random_range(0..100) {
            0..=24 => Event::Partition {
                a,
                b,
                one_way: self.rng.random_bool(0.4),
                heal_after: Duration::from_millis(self.rng.random_range(1_000..40_000)),
            },
            // Drawn only where zombies are on, so other runs draw what they always drew.
            25..=39 if self.cfg.has_zombies() && self.rng.random_bool(1.0 / 3.0) => {
                Event::Failover {
                    node: a,
                    standby: Duration::from_millis(self.rng.random_range(500..10_000)),
                    back_after: Duration::from_millis(self.rng.random_range(1_000..40_000)),
                }
            }
            25..=39 => Event::Freeze {
                node: a,
                thaw_after: Duration::from_millis(self.rng.random_range(1_000..40_000)),
                then_kill: self.rng.random_bool(0.5),
            },
            40..=59 => Event::Kill { node: a },
            // A third of the graceful stops race a restart of another host.
            60..=79 => Event::Stop {
                node: a,
                racing: self.rng.random_bool(1.0 / 3.0).then_some(b),
            },
            _ => {
                // A middlebox resets connections of one host.
                let conns: Vec<net::NetConn> = self.net.conns_of(a);
                for c in conns {
                    if !self.rng.random_bool(0.5) {
                        continue;
                    }
                    self.trace.push(now, format!("fault: {c} reset"));
                    self.net.reset(c, now, &mut self.rng);
                }
                return;
            }
        };
        self.fire(e);
    }
}
