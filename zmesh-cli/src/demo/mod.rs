//! `zmesh demo`: a live local mesh in real processes whose nodes find each other through a
//! descriptor store (MISSION D1-D3): no endpoint is written anywhere. Every node binds
//! ephemeral tcp ports on 127.0.0.1 and publishes them in its descriptor, in the embedded
//! SQLite store (default) or in an etcd the demo starts (`--etcd`, see [`store`]).
//!
//! - node `a` runs in this process: RouteMesh peer of `b`, ClientServer client of `c`'s
//!   "orders" and `e`'s "pump", fanout subscriber of `c`'s publisher; an Object Client like
//!   `d`, so the pair a-d is never dialled (T4).
//! - `b` (RouteMesh, Server of "orders", serves it), `c` (ClientServer server of "orders",
//!   fanout publisher), `d` (an Object Client only) and `e` ([`commands`]) are child
//!   processes running `zmesh node`.
//!
//! Scenes: the nodes find each other and become ready; records a -> b and a -> c; a call to
//! `b`; a 60 s call, then `b` killed with SIGKILL: the call fails at once; `b` restarted, its
//! new generation (from its new descriptor) replacing the old connection (F3, F4); the store
//! taken away while every ready link stays ready and probes go on (F5), and back; `a`'s
//! snapshot; the commands scene ([`commands`]: a non-repeatable command whose server `e` is
//! killed after it ran, answered from the durable idempotency record after the restart);
//! shutdown. Every step waits on what it observes (a's snapshot and events, the children's
//! output lines), bounded by [`STEP_LIMIT`], never on a fixed delay; `--quick` only drops the
//! pacing pauses between scenes that give a reader time.

mod commands;
mod etcd;
mod store;

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zmesh::config::{AutoBind, DiscoveryConfig, NodeConfig};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::proto::state::ConnState;
use zmesh::runtime::calls::{may_have_run, CallOptions};
use zmesh::runtime::snapshot::{LinkSnapshot, Snapshot};
use zmesh::runtime::{EventStream, Node};

use crate::output::{out, outln};
use crate::{print_event, EventFormat};
use store::{store_line, DemoStore};

/// Longest wait for any one step of the demo.
const STEP_LIMIT: Duration = Duration::from_secs(20);

/// A pause between scenes for a reader (none with `--quick`): pacing, never a wait for a
/// state.
const PACE: Duration = Duration::from_millis(600);

/// A child `zmesh node`: its configuration, extra arguments and every line it printed.
struct Proc {
    name: &'static str,
    config: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    /// Every line the process printed (stdout and stderr, every run), echoed as
    /// `    [name] line`.
    lines: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    fn new(name: &'static str, config: PathBuf, extra: Vec<String>) -> Proc {
        Proc {
            name,
            config,
            extra,
            child: None,
            lines: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn start(&mut self) -> Result<()> {
        let exe = std::env::current_exe().context("locating the zmesh binary")?;
        let mut child = Command::new(exe)
            .args(["node", "--config"])
            .arg(&self.config)
            .args(&self.extra)
            // Its log lines are echoed into the demo's output: plain text, no colour codes.
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting node {}", self.name))?;
        if let Some(out) = child.stdout.take() {
            self.echo(out);
        }
        if let Some(err) = child.stderr.take() {
            self.echo(err);
        }
        self.child = Some(child);
        Ok(())
    }

    /// Echoes and records every line of `from`, on a thread of its own.
    fn echo(&self, from: impl Read + Send + 'static) {
        let (name, lines) = (self.name, self.lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines().map_while(Result::ok) {
                let _ = outln!("    [{name}] {line}");
                if let Ok(mut l) = lines.lock() {
                    l.push(line);
                }
            }
        });
    }

    /// How many lines the process printed so far: a mark for [`Proc::wait_line`].
    fn mark(&self) -> usize {
        self.lines.lock().map(|l| l.len()).unwrap_or(0)
    }

    /// Waits (bounded by [`STEP_LIMIT`]) until a line printed after `mark` contains `needle`.
    async fn wait_line(&self, mark: usize, needle: &str) -> Result<()> {
        let limit = tokio::time::Instant::now() + STEP_LIMIT;
        loop {
            let seen = self
                .lines
                .lock()
                .map(|l| l.iter().skip(mark).any(|l| l.contains(needle)))
                .unwrap_or(false);
            if seen {
                return Ok(());
            }
            if tokio::time::Instant::now() > limit {
                bail!(
                    "{} did not print {needle:?} within {STEP_LIMIT:?}",
                    self.name
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL: no orderly close, the OS closes its sockets.
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Removes a directory when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_config(dir: &Path, cfg: &NodeConfig) -> Result<PathBuf> {
    let path = dir.join(format!("{}.toml", cfg.rid));
    std::fs::write(&path, toml::to_string(cfg)?)?;
    Ok(path)
}

fn member(role: Role, channel: &str) -> Membership {
    Membership {
        role,
        channel: channel.into(),
    }
}

/// A node configuration with no endpoint: memberships, and `[discovery]` on `url` binding
/// `bind` on ephemeral ports.
fn node_config(
    rid: &str,
    memberships: Vec<Membership>,
    url: &str,
    bind: Vec<AutoBind>,
) -> NodeConfig {
    let mut c = NodeConfig::new(rid);
    c.memberships = memberships;
    let mut d = DiscoveryConfig::new(url);
    d.bind = bind;
    c.discovery = Some(d);
    c
}

/// a's ready RouteMesh links to `b`: (the ones a dialled, b's dials a admitted).
fn b_links(s: &Snapshot) -> (Vec<&LinkSnapshot>, usize) {
    let ready: Vec<&LinkSnapshot> = s
        .peer("b")
        .filter(|l| l.state == ConnState::Ready)
        .collect();
    let inbound = ready
        .iter()
        .filter(|l| l.role.ends_with("_inbound"))
        .count();
    (
        ready
            .into_iter()
            .filter(|l| !l.role.ends_with("_inbound"))
            .collect(),
        inbound,
    )
}

/// Settled with `b`: a and b dial each other, and the connections a dialled (the smaller
/// RID) stay current; until b's dials were closed as duplicates a call may pick one of them
/// as it goes. Returns b's generation on a's dials.
fn b_settled(s: &Snapshot) -> Option<u64> {
    let (dialled, inbound) = b_links(s);
    let generation = dialled.first()?.peer_generation?;
    (dialled.len() == 2
        && inbound == 0
        && dialled
            .iter()
            .all(|l| l.peer_generation == Some(generation)))
    .then_some(generation)
}

/// Whether a's ClientServer link to `rid` is ready.
fn server_ready(s: &Snapshot, rid: &str) -> bool {
    s.links.iter().any(|l| {
        l.topology == "client_server"
            && l.peer.as_deref() == Some(rid)
            && l.state == ConnState::Ready
    })
}

/// One ready link of a: its topology, role, peer and connection id.
type LinkId = (&'static str, &'static str, Option<String>, Option<u64>);

/// a's ready links, each with the records received on it.
fn ready_links(s: &Snapshot) -> Vec<(LinkId, u64)> {
    s.links
        .iter()
        .filter(|l| l.state == ConnState::Ready)
        .map(|l| {
            (
                (l.topology, l.role, l.peer.clone(), l.connection_id),
                l.records_received,
            )
        })
        .collect()
}

pub(crate) async fn run(quick: bool, etcd: bool) -> Result<()> {
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("zmesh-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // Declared before everything that uses the directory, so dropped after it: the directory
    // goes on every exit, a failed step (or no etcd for --etcd) included.
    let _dir_guard = RemoveOnDrop(dir.clone());
    let mut store = DemoStore::start(&dir, etcd)?;
    let url = store.url();
    let (a, mut procs) = introduce(&dir, &url)?;
    for p in procs.iter_mut() {
        p.start()?;
    }
    let mut pump = commands::Pump::prepare(&dir, &url)?;
    let node = Node::start(a).await?;
    let events = node.take_events().context("events")?;
    let mut scenes = Scenes {
        events,
        node,
        t0,
        quick,
    };
    let opts = CallOptions {
        peer: Some("b".into()),
        ..CallOptions::default()
    };

    scenes.found(&url).await?;
    scenes.records(&procs).await?;
    scenes.call(&opts).await?;
    let old = scenes.kill_b(&mut procs, &opts).await?;
    scenes.restart_b(&mut procs, old).await?;
    let left = scenes.store_away(&mut store).await?;
    scenes.snapshot().await?;
    let Scenes {
        mut events, node, ..
    } = scenes;

    outln!(
        "\n== 8. commands: a non-repeatable command, its server killed after it ran, retried \
         with the same idempotency key"
    )?;
    pump.run(&node, &mut events, t0).await?;
    if !quick {
        tokio::time::sleep(PACE).await;
    }

    outln!("\n== 9. shutdown")?;
    node.shutdown().await?;
    drop(procs);
    drop(pump);
    drop(store);
    outln!("demo finished in {} ms", t0.elapsed().as_millis())?;
    if left {
        bail!("a link left ready while the store was away");
    }
    Ok(())
}

/// The demo's nodes: `a`'s configuration (it runs in this process) and the processes of `b`,
/// `c` and `d` (not started yet), each introduced on stdout.
fn introduce(dir: &Path, url: &str) -> Result<(NodeConfig, Vec<Proc>)> {
    let b = node_config(
        "b",
        vec![member(Role::Server, "orders")],
        url,
        vec![AutoBind::RouteMesh],
    );
    let mut c = node_config(
        "c",
        vec![member(Role::Server, "orders")],
        url,
        vec![AutoBind::Server, AutoBind::Publisher],
    );
    // c takes no part in RouteMesh: a ClientServer server and a publisher only.
    if let Some(d) = c.discovery.as_mut() {
        d.route_mesh = false;
    }
    let d = node_config(
        "d",
        vec![member(Role::ObjectClient, "orders")],
        url,
        vec![AutoBind::RouteMesh],
    );
    let a = node_config(
        "a",
        vec![
            member(Role::ObjectClient, "orders"),
            member(Role::ObjectClient, "pump"),
        ],
        url,
        vec![AutoBind::RouteMesh],
    );
    outln!("zmesh demo: nodes b, c, d, e as processes; node a in this process")?;
    outln!("  no endpoint in any configuration: every node binds ephemeral ports on 127.0.0.1")?;
    outln!("  and publishes its descriptor to {url}")?;
    outln!("  b: Server of \"orders\" (RouteMesh), serves it")?;
    outln!("  c: Server of \"orders\" (ClientServer), fanout publisher")?;
    outln!("  d: Object Client of \"orders\", like a: the pair a-d needs no connection and is never dialled")?;
    outln!("  e: Server of \"pump\" (ClientServer), a durable idempotency store (scene 8)")?;
    let mut procs = Vec::new();
    for (cfg, name) in [(&b, "b"), (&c, "c"), (&d, "d")] {
        // b serves the demo methods (echo, sleep, fail) on "orders".
        let extra = if name == "b" {
            vec!["--serve".to_owned(), "orders".to_owned()]
        } else {
            vec![]
        };
        procs.push(Proc::new(name, write_config(dir, cfg)?, extra));
    }
    Ok((a, procs))
}

/// Node `a` and what every scene uses: its events, the demo's start, the pacing.
struct Scenes {
    events: EventStream,
    node: Node,
    t0: Instant,
    quick: bool,
}

impl Scenes {
    /// A pause between scenes for a reader, none with `--quick`.
    async fn pace(&self) {
        if !self.quick {
            tokio::time::sleep(PACE).await;
        }
    }

    /// Scene 1: the nodes find each other through the store at `url`; links become ready.
    async fn found(&mut self, url: &str) -> Result<()> {
        outln!("\n== 1. the nodes find each other through the store; links become ready")?;
        wait_for(&self.node, &mut self.events, self.t0, |s| {
            let seen = s
                .discovery
                .as_ref()
                .is_some_and(|d| d.descriptors_seen == 4);
            let fanout = s
                .links
                .iter()
                .any(|l| l.topology == "fanout" && l.state == ConnState::Ready);
            // c's "orders" server itself (a is also a client of e's "pump", scene 8).
            seen && b_settled(s).is_some() && server_ready(s, "c") && fanout
        })
        .await?;
        let s = self.node.snapshot().await?;
        outln!("   a: {}", store_line(&s))?;
        outln!(
            "   a's links to d: {} (an Object Client pair: never dialled, not even to learn it is not required)",
            s.peer("d").count()
        )?;
        outln!("   the store (zmesh peers --store {url}):")?;
        let entries = zmesh::runtime::store::open(url)?.list().await?;
        for line in crate::peers::table(&entries).lines() {
            outln!("     {line}")?;
        }
        self.pace().await;
        Ok(())
    }

    /// Scene 2: records flow, a -> b (RouteMesh) and a -> c (ClientServer).
    async fn records(&mut self, procs: &[Proc]) -> Result<()> {
        outln!("\n== 2. records flow: a -> b (RouteMesh), a -> c (ClientServer)")?;
        let (mb, mc) = (procs[0].mark(), procs[1].mark());
        self.node.send("b", "greetings", "hello b").await?;
        self.node.send_to_server("orders", "order #1").await?;
        procs[0].wait_line(mb, "\"greetings\": hello b").await?;
        procs[1].wait_line(mc, "\"orders\": order #1").await?;
        drain(&self.node, &mut self.events, self.t0)?;
        self.pace().await;
        Ok(())
    }

    /// Scene 3: a call to b, answered.
    async fn call(&mut self, opts: &CallOptions) -> Result<()> {
        outln!("\n== 3. a call to b: answered")?;
        let echoed: String = self
            .node
            .call_with("orders", "echo", "hello", opts.clone())
            .await?;
        outln!("   a -> b orders.echo(\"hello\") = {echoed:?}")?;
        self.pace().await;
        Ok(())
    }

    /// Scene 4: a 60 s call to b, then b killed with SIGKILL: the call fails at once, saying it
    /// may have run. Returns b's generation before the kill.
    async fn kill_b(&mut self, procs: &mut [Proc], opts: &CallOptions) -> Result<Option<u64>> {
        outln!(
            "\n== 4. a 60 s call to b, then kill -9 b: the call fails at once, saying it may have run"
        )?;
        let old = b_settled(&self.node.snapshot().await?);
        let caller = self.node.clone();
        let o = opts.clone();
        let mark = procs[0].mark();
        let call = tokio::spawn(async move {
            caller
                .call_with::<_, String>("orders", "sleep", &60_000u64, o)
                .await
        });
        // The call reached b's handler when b says so.
        procs[0].wait_line(mark, "serving orders.sleep").await?;
        let killed = Instant::now();
        procs[0].kill();
        match call.await? {
            Ok(v) => outln!("   unexpected answer {v:?}")?,
            Err(e) => outln!(
                "   call failed after {} ms: {e} [code {}, may_have_run = {}]",
                killed.elapsed().as_millis(),
                e.code(),
                may_have_run(&e)
            )?,
        }
        wait_for(&self.node, &mut self.events, self.t0, |s| {
            s.peer("b").all(|l| l.state != ConnState::Ready)
        })
        .await?;
        outln!(
            "   detected {} ms after the kill (no 15 s wait: the OS closed b's sockets)",
            killed.elapsed().as_millis()
        )?;
        self.pace().await;
        Ok(old)
    }

    /// Scene 5: b restarted, a new process run on new ports whose new descriptor's
    /// generation (not `old`) replaces the old connection.
    async fn restart_b(&mut self, procs: &mut [Proc], old: Option<u64>) -> Result<()> {
        outln!(
            "\n== 5. restart b: a new process run on new ports; its new descriptor's generation \
             replaces the old connection"
        )?;
        procs[0].start()?;
        wait_for(&self.node, &mut self.events, self.t0, |s| {
            b_settled(s).is_some_and(|g| Some(g) != old)
        })
        .await?;
        let now = b_settled(&self.node.snapshot().await?);
        if let (Some(o), Some(n)) = (old, now) {
            outln!("   b was generation {o:016x}, is now {n:016x}")?;
        }
        let mark = procs[0].mark();
        self.node
            .send("b", "greetings", "hello again, new b")
            .await?;
        procs[0].wait_line(mark, "hello again, new b").await?;
        drain(&self.node, &mut self.events, self.t0)?;
        self.pace().await;
        Ok(())
    }

    /// Scene 6: the store goes away and comes back; every ready link stays ready, probes
    /// going on. Returns whether a link left ready meanwhile.
    async fn store_away(&mut self, store: &mut DemoStore) -> Result<bool> {
        outln!(
            "\n== 6. the store goes away: reported, and every ready link stays ready, probes going on"
        )?;
        let before = ready_links(&self.node.snapshot().await?);
        store.take_away()?;
        wait_for(&self.node, &mut self.events, self.t0, |s| {
            s.discovery.as_ref().is_some_and(|d| !d.store_reachable)
        })
        .await?;
        // Until every ready RouteMesh and ClientServer connection received liveness records
        // (probes, ACKs) with the store away, or one of the ready links left ready.
        let left = Cell::new(false);
        wait_for(&self.node, &mut self.events, self.t0, |s| {
            let during = ready_links(s);
            let same = |k: &LinkId| during.iter().find(|(d, _)| d == k);
            if before.iter().any(|(k, _)| same(k).is_none()) {
                left.set(true);
                return true;
            }
            before
                .iter()
                .filter(|(k, _)| k.0 != "fanout")
                .all(|(k, n)| same(k).is_some_and(|(_, m)| m > n))
        })
        .await?;
        outln!(
            "   {} links ready before the store went away; with it away, {}",
            before.len(),
            if left.get() {
                "one LEFT READY"
            } else {
                "each stays ready on the same connection, and each RouteMesh and ClientServer one received probes or ACKs"
            }
        )?;
        store.bring_back()?;
        wait_for(&self.node, &mut self.events, self.t0, |s| {
            s.discovery.as_ref().is_some_and(|d| d.store_reachable)
        })
        .await?;
        outln!(
            "   the store is back; a: {}",
            store_line(&self.node.snapshot().await?)
        )?;
        self.pace().await;
        Ok(left.get())
    }

    /// Scene 7: a's snapshot.
    async fn snapshot(&mut self) -> Result<()> {
        outln!("\n== 7. a's snapshot")?;
        out!("{}", self.node.snapshot().await?.to_table())?;
        self.pace().await;
        Ok(())
    }
}

fn drain(node: &Node, events: &mut EventStream, t0: Instant) -> Result<()> {
    while let Ok(batch) = events.try_recv() {
        for ev in &batch {
            print_event(node.rid(), ev, EventFormat::Human, t0)?;
        }
    }
    Ok(())
}

/// Prints a's events until `done(snapshot)` holds, looking again at every batch of events and
/// at least every 100 ms (counters such as records received change without an event); fails
/// after [`STEP_LIMIT`].
async fn wait_for(
    node: &Node,
    events: &mut EventStream,
    t0: Instant,
    done: impl Fn(&zmesh::runtime::snapshot::Snapshot) -> bool,
) -> Result<()> {
    let limit = tokio::time::Instant::now() + STEP_LIMIT;
    loop {
        if done(&node.snapshot().await?) {
            return drain(node, events, t0);
        }
        tokio::select! {
            batch = events.recv() => {
                let Some(batch) = batch else { bail!("node stopped") };
                for ev in &batch {
                    print_event(node.rid(), ev, EventFormat::Human, t0)?;
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = tokio::time::sleep_until(limit) => {
                out!("{}", node.snapshot().await?.to_table())?;
                bail!("step did not complete within {STEP_LIMIT:?}");
            }
        }
    }
}
