//! `zmesh demo`: a live local mesh on 127.0.0.1 (tcp) and ipc, in real processes.
//!
//! - node `a` runs in this process: RouteMesh peer of `b`, ClientServer client of `c`'s
//!   "orders" channel, fanout subscriber of `c`'s publisher, and dials `d`.
//! - `b` (RouteMesh, Server of "orders"), `c` (ClientServer server + fanout publisher on ipc)
//!   and `d` (an Object Client only) are child processes running `zmesh node`.
//!
//! The demo waits for readiness, sends records, kills `b` with SIGKILL and shows `a` detect it
//! at once, restarts `b` (a new lifecycle generation) and shows the new run admitted, prints
//! `a`'s snapshot, then runs the commands scene ([`commands`]: a non-repeatable command whose
//! server `e` is killed after it ran, answered from the durable idempotency record after the
//! restart), and exits.

mod commands;
pub(crate) mod discovery;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zmesh::config::{Endpoint, NodeConfig, PeerConfig, RouteMeshBind, ServerConfig};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::proto::state::ConnState;
use zmesh::runtime::calls::{may_have_run, CallOptions};
use zmesh::runtime::{EventStream, Node};

use crate::{print_event, EventFormat};

/// Longest wait for any one step of the demo.
const STEP_LIMIT: Duration = Duration::from_secs(20);

struct Proc {
    name: &'static str,
    config: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    /// Every line the process printed on stderr, when captured (else stderr is inherited).
    stderr: Option<Arc<Mutex<Vec<String>>>>,
}

impl Proc {
    fn start(&mut self) -> Result<()> {
        let exe = std::env::current_exe().context("locating the zmesh binary")?;
        let mut child = Command::new(exe)
            .args(["node", "--config"])
            .arg(&self.config)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(if self.stderr.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .with_context(|| format!("starting node {}", self.name))?;
        if let (Some(err), Some(lines)) = (child.stderr.take(), self.stderr.clone()) {
            let name = self.name;
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    println!("    [{name}] {line}");
                    if let Ok(mut l) = lines.lock() {
                        l.push(line);
                    }
                }
            });
        }
        if let Some(out) = child.stdout.take() {
            let name = self.name;
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    println!("    [{name}] {line}");
                }
            });
        }
        self.child = Some(child);
        Ok(())
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

fn free_tcp() -> Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(format!("tcp://127.0.0.1:{}", l.local_addr()?.port()))
}

fn write_config(dir: &Path, cfg: &NodeConfig) -> Result<PathBuf> {
    let path = dir.join(format!("{}.toml", cfg.rid));
    std::fs::write(&path, toml::to_string(cfg)?)?;
    Ok(path)
}

fn membership(role: Role) -> Vec<Membership> {
    vec![Membership {
        role,
        channel: "orders".into(),
    }]
}

pub(crate) async fn run(quick: bool) -> Result<()> {
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("zmesh-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let pause =
        |ms: u64| tokio::time::sleep(Duration::from_millis(if quick { ms / 4 } else { ms }));

    let b_rm = RouteMeshBind {
        application: free_tcp()?,
        completion: free_tcp()?,
    };
    let d_rm = RouteMeshBind {
        application: free_tcp()?,
        completion: free_tcp()?,
    };
    let c_server = free_tcp()?;
    let c_pub = format!("ipc://{}/c-pub.sock", dir.display());

    let mut b = NodeConfig::new("b");
    b.memberships = membership(Role::Server);
    b.route_mesh = Some(b_rm.clone());
    let mut c = NodeConfig::new("c");
    c.memberships = membership(Role::Server);
    c.server = Some(Endpoint {
        endpoint: c_server.clone(),
    });
    c.publisher = Some(Endpoint {
        endpoint: c_pub.clone(),
    });
    let mut d = NodeConfig::new("d");
    d.memberships = membership(Role::ObjectClient);
    d.route_mesh = Some(d_rm.clone());

    let mut a = NodeConfig::new("a");
    a.memberships = membership(Role::ObjectClient);
    a.route_mesh = Some(RouteMeshBind {
        application: free_tcp()?,
        completion: free_tcp()?,
    });
    a.peers = vec![
        PeerConfig {
            batch_calls: true,
            rid: "b".into(),
            application: b_rm.application.clone(),
            completion: b_rm.completion.clone(),
            generation: None,
            security_identity: None,
        },
        PeerConfig {
            batch_calls: true,
            rid: "d".into(),
            application: d_rm.application.clone(),
            completion: d_rm.completion.clone(),
            generation: None,
            security_identity: None,
        },
    ];
    a.servers = vec![ServerConfig {
        batch_calls: true,
        channel: "orders".into(),
        endpoint: c_server.clone(),
        rid: Some("c".into()),
    }];
    a.subscriptions = vec![Endpoint { endpoint: c_pub }];

    println!("zmesh demo: nodes b, c, d as processes; node a in this process");
    println!("  b: RouteMesh {} / {}", b_rm.application, b_rm.completion);
    println!("  c: ClientServer {c_server}, fanout publisher on ipc");
    println!("  d: RouteMesh, Object Client only (a and d need no connection: not_required)");
    let mut procs = Vec::new();
    for cfg in [&b, &c, &d] {
        let name = match cfg.rid.as_str() {
            "b" => "b",
            "c" => "c",
            _ => "d",
        };
        // b serves the demo methods (echo, sleep, fail) on "orders".
        let extra = if name == "b" {
            vec!["--serve".to_owned(), "orders".to_owned()]
        } else {
            vec![]
        };
        procs.push(Proc {
            name,
            config: write_config(&dir, cfg)?,
            extra,
            child: None,
            stderr: None,
        });
    }
    for p in procs.iter_mut() {
        p.start()?;
    }

    let mut pump = commands::Pump::prepare(&dir)?;
    a.servers.push(pump.server_entry());
    let node = Node::start(a).await?;
    let mut events = node.take_events().context("events")?;

    println!("\n== 1. links become ready");
    wait_for(&node, &mut events, t0, |s| {
        let ready = |topo: &str, role: &str| {
            s.links
                .iter()
                .any(|l| l.topology == topo && l.role == role && l.state == ConnState::Ready)
        };
        let b_ready = s.peer("b").filter(|l| l.state == ConnState::Ready).count() == 2;
        let d_nr = s.peer("d").any(|l| l.state == ConnState::NotRequired);
        // c's "orders" server itself (a is also a client of e's "pump", for scene 7).
        let c_ready = s
            .links
            .iter()
            .any(|l| l.endpoint == c_server && l.state == ConnState::Ready);
        b_ready && d_nr && c_ready && ready("fanout", "subscriber")
    })
    .await?;

    println!("\n== 2. records flow: a -> b (RouteMesh), a -> c (ClientServer)");
    node.send("b", "greetings", "hello b").await?;
    node.send_to_server("orders", "order #1").await?;
    pause(800).await;
    drain(&node, &mut events, t0);

    println!("\n== 3. a call to b: answered");
    let opts = CallOptions {
        peer: Some("b".into()),
        ..CallOptions::default()
    };
    let echoed: String = node
        .call_with("orders", "echo", "hello", opts.clone())
        .await?;
    println!("   a -> b orders.echo(\"hello\") = {echoed:?}");

    println!(
        "\n== 4. a 60 s call to b, then kill -9 b: the call fails at once, saying it may have run"
    );
    let caller = node.clone();
    let o = opts.clone();
    let call = tokio::spawn(async move {
        caller
            .call_with::<_, String>("orders", "sleep", &60_000u64, o)
            .await
    });
    // Let the call reach b's handler (b prints "serving orders.sleep").
    pause(1200).await;
    let killed = Instant::now();
    procs[0].kill();
    match call.await? {
        Ok(v) => println!("   unexpected answer {v:?}"),
        Err(e) => println!(
            "   call failed after {} ms: {e} [code {}, may_have_run = {}]",
            killed.elapsed().as_millis(),
            e.code(),
            may_have_run(&e)
        ),
    }
    wait_for(&node, &mut events, t0, |s| {
        s.peer("b").all(|l| l.state != ConnState::Ready)
    })
    .await?;
    println!(
        "   detected {} ms after the kill (no 15 s wait: the OS closed b's sockets)",
        killed.elapsed().as_millis()
    );

    println!("\n== 5. restart b: a new process run (new generation) is admitted");
    procs[0].start()?;
    wait_for(&node, &mut events, t0, |s| {
        s.peer("b").filter(|l| l.state == ConnState::Ready).count() == 2
    })
    .await?;
    node.send("b", "greetings", "hello again, new b").await?;
    pause(500).await;
    drain(&node, &mut events, t0);

    println!("\n== 6. a's snapshot");
    print!("{}", node.snapshot().await?.to_table());

    println!(
        "\n== 7. commands: a non-repeatable command, its server killed after it ran, retried \
         with the same idempotency key"
    );
    pump.run(&node, &mut events, t0, quick).await?;

    println!("\n== 8. shutdown");
    node.shutdown().await?;
    drop(procs);
    drop(pump);
    let _ = std::fs::remove_dir_all(&dir);
    println!("demo finished in {} ms", t0.elapsed().as_millis());
    Ok(())
}

fn drain(node: &Node, events: &mut EventStream, t0: Instant) {
    while let Ok(batch) = events.try_recv() {
        for ev in &batch {
            print_event(node.rid(), ev, EventFormat::Human, t0);
        }
    }
}

/// Prints a's events until `done(snapshot)` holds; fails after [`STEP_LIMIT`].
async fn wait_for(
    node: &Node,
    events: &mut EventStream,
    t0: Instant,
    done: impl Fn(&zmesh::runtime::snapshot::Snapshot) -> bool,
) -> Result<()> {
    let limit = tokio::time::Instant::now() + STEP_LIMIT;
    loop {
        if done(&node.snapshot().await?) {
            drain(node, events, t0);
            return Ok(());
        }
        tokio::select! {
            batch = events.recv() => {
                let Some(batch) = batch else { bail!("node stopped") };
                for ev in &batch {
                    print_event(node.rid(), ev, EventFormat::Human, t0);
                }
            }
            _ = tokio::time::sleep_until(limit) => {
                print!("{}", node.snapshot().await?.to_table());
                bail!("step did not complete within {STEP_LIMIT:?}");
            }
        }
    }
}
