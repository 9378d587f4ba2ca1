//! The etcd v3 store (MISSION D2) against a real etcd that each test starts itself on
//! 127.0.0.1 with a temp data dir: the store contract, a watch that resumes by revision and
//! reloads everything after a compaction, nodes in real processes discovering each other
//! through etcd, etcd killed without any link leaving ready (F5), and descriptors that other
//! hosts can dial (H1); TLS and authentication are `zmesh-cli/tests/discovery_etcd_tls.rs`,
//! the etcd the tests start `zmesh-cli/tests/common/etcd.rs`. The scenarios of
//! `zmesh-cli/tests/discovery.rs` that hold for both backends (T4: an Object-Client-only pair
//! never dials; F3, F4: kill -9 and restart, the new generation replaces the old connection;
//! T3: two publishers by descriptor, two SUB sockets) run here through etcd with the same
//! assertions: both files call the same scenario of `zmesh-cli/tests/common/discovery.rs`.
//!
//! The long test (etcd down for 30 s) is `#[ignore]`d and run by name:
//! `cargo test --locked --test discovery_etcd -- --ignored`.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "common/discovery.rs"]
mod disc;
#[path = "common/etcd.rs"]
mod etcd;

use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use zmesh::config::{AdvertiseConfig, DiscoveryConfig, EtcdTlsConfig, NodeConfig};
use zmesh::proto::discovery::STORE_RETRY;
use zmesh::runtime::store::{
    self, Change, EtcdStore, ReloadReason, Store, WatchEvent, ETCD_REQUEST_TIMEOUT,
};
use zmesh::runtime::Node;

use common::{desc, put_supersede_remove};
use disc::{mesh_ready, ready_conns, Mesh, Proc};
use etcd::{next, Etcd, BOUND, TTL};

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
/// MISSION D2: the etcd store keeps the contract of the embedded one.
#[tokio::test]
async fn d2_etcd_put_list_renew_remove() {
    let etcd = Etcd::start("crud");
    let store = store::open(&format!("etcd://{}/crud", etcd.host())).expect("open");
    assert_eq!(store.url(), format!("etcd://{}/crud/", etcd.host()));
    let (lease, listed) = put_supersede_remove(store.as_ref(), TTL).await;
    assert_ne!(lease.id, 0, "an etcd lease");
    assert!(listed.lease_age_ms.expect("age") <= 2_000);
    assert!(listed.expires_in_ms.expect("expiry") >= 28_000);
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
        d.advertise = Some(AdvertiseConfig::new("127.0.0.1"));
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
        d.advertise = advertise.map(AdvertiseConfig::new);
        d.tls = Some(EtcdTlsConfig::new(dir.path().join("absent-ca.pem")));
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
