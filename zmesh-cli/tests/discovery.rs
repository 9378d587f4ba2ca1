//! Automatic mode with real processes (MISSION D1, D3, F3, F4, F5, T3, T4): `zmesh node`
//! children whose configurations hold no endpoint at all, only `[discovery]` with the embedded
//! SQLite store of one host. Each test has its own store file.
//!
//! The long tests (`f5_store_down_beyond_the_lease_ttl_links_stay_ready`, ~30 s: the store is
//! down for longer than the lease TTL; `d3_f5_an_expired_lease_stops_the_redials_of_a_killed_node`,
//! ~25 s: a killed node's lease runs out) are `#[ignore]`d and run by name:
//! `cargo test --locked --test discovery -- --ignored`.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "common/discovery.rs"]
mod disc;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use zmesh::config::{AutoBind, NodeConfig};
use zmesh::proto::discovery::LEASE_RENEW_INTERVAL;
use zmesh::runtime::store::{SqliteStore, Store};

use disc::*;

impl Mesh {
    /// The embedded store of a [`Mesh::new`] mesh, opened by the test itself.
    fn store(&self) -> SqliteStore {
        SqliteStore::new(self.dir.path().join("store").join("mesh.db"))
    }
}

/// MISSION D1 (automatic mode), D3: three nodes whose configurations name no endpoint find
/// each other through the embedded store and become ready on both lanes with each other;
/// each holds its lease, renewed on its own interval; `zmesh peers` lists the three
/// descriptors with their lease ages.
#[tokio::test]
async fn d1_d3_three_nodes_discover_each_other_with_no_endpoint_configured() {
    let mesh = Mesh::new("three");
    let rids = ["a", "b", "c"];
    let procs: Vec<Proc> = rids
        .iter()
        .map(|r| mesh.start(&mesh.config(r, server("orders"))))
        .collect();
    for (p, rid) in procs.iter().zip(rids) {
        let others: Vec<&str> = rids.iter().copied().filter(|r| *r != rid).collect();
        let s = p
            .wait_status("ready with the other two", |s| settled(s, rid, &others))
            .await;
        let d = &s["discovery"];
        assert_eq!(d["store"], mesh.url.as_str());
        assert_eq!(d["store_reachable"], true);
        assert_eq!(d["descriptors_seen"], 2);
        assert_eq!(d["descriptor"]["rid"], rid);
        assert!(d["descriptor"]["route_mesh"]["application"]
            .as_str()
            .is_some_and(|e| e.starts_with("tcp://127.0.0.1:") && !e.ends_with(":*")));
    }
    // D3: the lease is held and renewed every LEASE_RENEW_INTERVAL: its age never reaches
    // that interval plus the time a renewal takes.
    let bound = (LEASE_RENEW_INTERVAL + Duration::from_millis(1500)).as_millis() as u64;
    for p in &procs {
        let s = p
            .wait_status("holding its lease", |s| s["discovery"]["lease"] == "held")
            .await;
        let age = s["discovery"]["lease_age_ms"].as_u64().expect("lease age");
        assert!(age < bound, "lease age {age} ms");
        assert_eq!(s["discovery"]["lease_renew_interval_ms"], 4000);
        assert_eq!(s["discovery"]["lease_ttl_ms"], 20000);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["peers", "--json", "--store", &mesh.url])
        .output()
        .expect("zmesh peers");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("peers JSON");
    let listed = listed.as_array().expect("array");
    let names: Vec<&str> = listed
        .iter()
        .filter_map(|e| e["descriptor"]["rid"].as_str())
        .collect();
    assert_eq!(names, rids);
    for e in listed {
        assert!(e["lease_age_ms"].as_u64().expect("age") < 20_000);
        assert_eq!(e["descriptor"]["format"], 1);
        assert_eq!(
            e["descriptor"]["generation"].as_str().map(str::len),
            Some(16)
        );
    }
    let table = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["peers", "--store", &mesh.url])
        .output()
        .expect("zmesh peers");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("LEASE AGE") && text.contains("server:orders"),
        "{text}"
    );
}

/// MISSION O1, T1: in a healthy three-node mesh, where every pair dials each other at start
/// and one dial of each pair stands down, `zmesh status` of every node lists exactly one ready
/// link per peer and lane and nothing else: no stood-down dial shown as `reconnecting`, no
/// inbound link left `not_connected` by the dial the peer stood down, no failure on any row.
/// The events say the same: the duplicate dials that went are `stood_down` at both ends, and
/// no state event names a failure.
#[tokio::test]
async fn o1_t1_healthy_three_node_mesh_status_lists_only_ready_links() {
    let mesh = Mesh::new("healthy");
    let rids = ["a", "b", "c"];
    let mut procs: Vec<Proc> = rids
        .iter()
        .map(|r| mesh.start(&mesh.config(r, server("orders"))))
        .collect();
    for (p, rid) in procs.iter().zip(rids) {
        let others: Vec<&str> = rids.iter().copied().filter(|r| *r != rid).collect();
        p.wait_status("settled with the other two", |s| settled(s, rid, &others))
            .await;
    }
    for (p, rid) in procs.iter().zip(rids) {
        let s = p.status();
        let links = s["links"].as_array().expect("links");
        let rows: Vec<String> = links
            .iter()
            .map(|l| format!("{} {} {}", l["peer"], l["role"], l["state"]))
            .collect();
        assert_eq!(links.len(), 4, "{rid}: two peers, two lanes each: {rows:?}");
        for l in links {
            assert_eq!(l["state"], "ready", "{rid}: {rows:?}");
            assert!(l["last_failure"].is_null(), "{rid}: {l}");
        }
        let table = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args(["status", "--control", &p.control])
            .output()
            .expect("zmesh status");
        let text = String::from_utf8_lossy(&table.stdout);
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("route_mesh"))
            .collect();
        assert_eq!(rows.len(), 4, "{text}");
        assert!(rows.iter().all(|r| r.contains(" ready ")), "{text}");
    }
    for p in &mut procs {
        let rid = p.rid.clone();
        let lines = p.take_lines();
        let failures: Vec<&Value> = lines
            .iter()
            .filter(|v| v["event"] == "state" && !v["reason"].is_null())
            .filter(|v| v["reason"] != "stood_down")
            .collect();
        assert!(
            failures.is_empty(),
            "{rid}: a stand-down reported as a failure: {}",
            lines_text(lines)
        );
    }
}

/// MISSION T4 (discovery rule): two Object Clients without a Server membership never dial
/// each other (no link at all, not even a `not_required` one: no NotRequired round trip),
/// while both become ready with the server.
#[tokio::test]
async fn t4_object_client_pair_is_never_dialled_by_discovery() {
    object_client_pair_is_never_dialled(&Mesh::new("t4")).await;
}

/// MISSION F3, F4: `b` is killed with SIGKILL and started again (same RID, new generation,
/// new ephemeral ports). `a` sees the old connections fail at once, replaces them with
/// connections to the new run once the new descriptor is in, each dial after the close of
/// the old socket was observed, and admits only the new generation; `a`'s links to `c`
/// never leave ready.
#[tokio::test]
async fn f3_f4_kill9_restart_new_generation_replaces_the_old_connection() {
    kill9_restart_new_generation_replaces_the_old_connection(&Mesh::new("restart")).await;
}

/// MISSION F3 (the fence replaces a connection that is still ready): `b` is stopped
/// (SIGSTOP: its connections stay open and, for up to 15 s, ready at `a`) and a new run of
/// `b` starts. Its descriptor replaces the old one; `a` closes the old run's ready
/// connections at once with reason `reconfigured` (not after the 15 s deadline), and dials
/// the new run.
#[tokio::test]
async fn f3_new_descriptor_generation_closes_a_still_ready_connection() {
    let mesh = Mesh::new("fence");
    let mut a = mesh.start(&mesh.config("a", server("orders")));
    let old_b = mesh.start(&mesh.config("b", server("orders")));
    let s = a
        .wait_status("settled with b", |s| settled(s, "a", &["b"]))
        .await;
    let old = peer_generations(&s, "b");
    let mark = a.take_lines().len();
    old_b.signal("-STOP");
    let started = tokio::time::Instant::now();
    let _b2 = mesh.start(&mesh.config("b", server("orders")));
    let left = a
        .wait_line(mark, "the old run's connection closed", |v| {
            is_link_of(v, "b") && v["reason"] == "reconfigured"
        })
        .await;
    assert!(
        left["detail"]
            .as_str()
            .is_some_and(|d| d.contains("replaces this run")),
        "{left}"
    );
    let s = a
        .wait_status("ready with b's new run", |s| {
            let g = peer_generations(s, "b");
            mesh_ready(s, &["b"]) && g.len() == 2 && g.iter().all(|g| !old.contains(g))
        })
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "replaced by the fence, not by the 15 s deadline: {:?}",
        started.elapsed()
    );
    let lines = a.take_lines()[mark..].to_vec();
    assert!(
        !lines.iter().any(|v| v["reason"] == "deadline_exceeded"),
        "{}",
        lines_text(&lines)
    );
    drop(old_b);
    drop(s);
}

/// MISSION T3: two publishers found by descriptor, two SUB sockets at the subscriber (one
/// subscription link per publisher, each with its own connection), both ready.
#[tokio::test]
async fn t3_two_publishers_by_descriptor_two_sub_sockets() {
    two_publishers_by_descriptor_two_sub_sockets(&Mesh::new("fanout")).await;
}

/// MISSION D1 (ClientServer by descriptor): a client dials the ClientServer server of each
/// channel it is an Object Client of, found in the store; a server of another channel is not
/// dialled.
#[tokio::test]
async fn d1_client_server_servers_per_channel_by_descriptor() {
    let mesh = Mesh::new("client-server");
    let server_cfg = |rid: &str, channel: &str| {
        let mut c = mesh.config(rid, server(channel));
        if let Some(d) = c.discovery.as_mut() {
            d.bind = vec![AutoBind::Server];
            d.route_mesh = false;
        }
        c
    };
    let _s1 = mesh.start(&server_cfg("s1", "orders"));
    let _s2 = mesh.start(&server_cfg("s2", "billing"));
    let mut client = mesh.config("k", common::client_of("orders"));
    if let Some(d) = client.discovery.as_mut() {
        d.bind = Vec::new();
    }
    let k = mesh.start(&client);
    let s = k
        .wait_status("ready with the orders server", |s| {
            s["discovery"]["descriptors_seen"] == 2
                && s["links"].as_array().into_iter().flatten().any(|l| {
                    l["topology"] == "client_server" && l["peer"] == "s1" && l["state"] == "ready"
                })
        })
        .await;
    let cs: Vec<&Value> = s["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["topology"] == "client_server")
        .collect();
    assert_eq!(
        cs.len(),
        1,
        "only the server of a channel k is a client of: {cs:?}"
    );
    assert!(cs[0]["endpoint"]
        .as_str()
        .is_some_and(|e| e.starts_with("tcp://127.0.0.1:")));
}

/// MISSION F5: the store file is moved away (every store operation fails): both nodes say
/// so (event and snapshot), and no link leaves ready while probes go on past a probe
/// interval; a node started meanwhile cannot publish; the store back, it is picked up.
#[tokio::test]
async fn f5_store_unavailable_no_link_leaves_ready() {
    let mesh = Mesh::new("outage");
    let mut a = mesh.start(&mesh.config("a", server("orders")));
    let mut b = mesh.start(&mesh.config("b", server("orders")));
    let sa = a
        .wait_status("settled with b", |s| settled(s, "a", &["b"]))
        .await;
    let sb = b
        .wait_status("settled with a", |s| settled(s, "b", &["a"]))
        .await;
    let before = (ready_conns(&sa, "b"), ready_conns(&sb, "a"));
    let marks = (a.take_lines().len(), b.take_lines().len());

    let away = mesh.dir.path().join("store-away");
    std::fs::rename(mesh.dir.path().join("store"), &away).expect("move the store away");
    for (p, mark) in [(&mut a, marks.0), (&mut b, marks.1)] {
        p.wait_line(mark, "a store_unreachable event", |v| {
            v["event"] == "discovery" && v["kind"] == "store_unreachable"
        })
        .await;
        p.wait_status("reporting the store unreachable", |s| {
            s["discovery"]["store_reachable"] == false
        })
        .await;
    }
    let c = mesh.start(&mesh.config("c", server("orders")));
    // Past one probe interval (5 s) with the store down: probes and ACKs go on.
    let until = tokio::time::Instant::now() + Duration::from_secs(6);
    while tokio::time::Instant::now() < until {
        for p in [&a, &b] {
            let s = p.status();
            let other = if p.rid == "a" { "b" } else { "a" };
            assert!(
                mesh_ready(&s, &[other]),
                "{}: {}",
                p.rid,
                serde_json::to_string_pretty(&s).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The very same connections, never replaced.
    assert_eq!(
        (ready_conns(&a.status(), "b"), ready_conns(&b.status(), "a")),
        before
    );
    let cs = c.status();
    assert_eq!(cs["discovery"]["lease"], "acquiring");
    assert_eq!(cs["discovery"]["store_reachable"], false);

    std::fs::rename(&away, mesh.dir.path().join("store")).expect("move the store back");
    for p in [&a, &b] {
        let other = if p.rid == "a" { "b" } else { "a" };
        p.wait_status("back, with c discovered", |s| {
            s["discovery"]["store_reachable"] == true && mesh_ready(s, &[other, "c"])
        })
        .await;
    }
    c.wait_status("ready with a and b", |s| mesh_ready(s, &["a", "b"]))
        .await;
}

/// MISSION D1, F5 (a descriptor that disappears): `a` (automatic mode) dials `b`, a node in
/// manual mode that stays alive throughout, whose descriptor the test publishes itself and
/// then removes. The established connection stays ready and live: probes and ACKs go on over
/// it past a probe interval (a lease is not a liveness signal). Then `b` is killed: `a`'s
/// links to it fail at once and are never dialled again (no `connecting` event, no
/// `reconnecting` state, no new connection), and the removed links leave `a`'s snapshot.
#[tokio::test]
async fn d1_f5_vanished_descriptor_keeps_the_live_connection_and_never_redials() {
    use zmesh::proto::discovery::{Descriptor, MeshEndpoints};

    let mesh = Mesh::new("vanish");
    let mut bc = NodeConfig::new("b");
    bc.memberships = server("orders");
    let bind = common::mesh_bind(true);
    bc.route_mesh = Some(bind.clone());
    let mut b = mesh.spawn(&bc);
    let bs = b
        .wait_status("b up", |s| common::hex_id(&s["generation"]).is_some())
        .await;
    let descriptor = Descriptor {
        rid: "b".into(),
        generation: common::hex_id(&bs["generation"]).expect("generation"),
        security_identity: bc.security_identity().to_owned(),
        memberships: bc.memberships.clone(),
        route_mesh: Some(MeshEndpoints {
            application: bind.application.clone(),
            completion: bind.completion.clone(),
        }),
        server: None,
        publishers: Vec::new(),
    };
    // A TTL far beyond the test: only the explicit removal below takes the descriptor away.
    let lease = mesh
        .store()
        .put(&descriptor, Duration::from_secs(600))
        .await
        .expect("publish b's descriptor");
    let mut a = mesh.start(&mesh.config("a", server("orders")));
    let s = a
        .wait_status("a's own dials to b ready", |s| {
            dialled_ready(s, "b").len() == 2
        })
        .await;
    let conns = dialled_ready(&s, "b");
    let received = |s: &Value| -> u64 {
        links_of(s, "b")
            .filter(|l| l["state"] == "ready")
            .filter_map(|l| l["records_received"].as_u64())
            .sum()
    };
    let before = received(&s);

    // The descriptor goes; b lives on.
    let mark = a.take_lines().len();
    mesh.store()
        .remove(&lease)
        .await
        .expect("remove b's descriptor");
    a.wait_line(mark, "b's descriptor removed", |v| {
        v["kind"] == "descriptor_removed" && v["rid"] == "b"
    })
    .await;
    // Liveness goes on over the same connections: b's probe and b's ACK of a's probe on
    // each lane (one probe interval, 5 s), and they never leave ready.
    let s = a
        .wait_status("probes and ACKs from b after the removal", |s| {
            assert_eq!(
                dialled_ready(s, "b"),
                conns,
                "the established connections stay ready:\n{s:#}"
            );
            received(s) >= before + 4
        })
        .await;
    assert_eq!(s["discovery"]["descriptors_seen"], 0);
    let lines = a.take_lines()[mark..].to_vec();
    assert!(
        !lines.iter().any(|v| is_link_of(v, "b")),
        "no state change of b's links: {}",
        lines_text(&lines)
    );

    // Now b dies: the connections fail at once, and nothing dials b again.
    let mark = a.take_lines().len();
    b.kill9();
    let failed = a
        .wait_line(mark, "b's links failed", |v| {
            is_link_of(v, "b") && v["state"] == "not_connected"
        })
        .await;
    assert_eq!(failed["reason"], "transport_error", "{failed}");
    a.wait_status("b's links removed from the snapshot", |s| {
        links_of(s, "b").next().is_none()
    })
    .await;
    // Past the first redial delays (100 ms, 200 ms, 400 ms, ...), observed all along: no
    // dial, no link of b back in the snapshot.
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < until {
        let s = a.status();
        assert!(
            links_of(&s, "b").next().is_none(),
            "a link of b came back:\n{s:#}"
        );
        let lines = a.take_lines()[mark..].to_vec();
        assert!(
            !lines.iter().any(|v| is_link_of(v, "b")
                && ["connecting", "reconnecting", "configured"]
                    .contains(&v["state"].as_str().unwrap_or_default())),
            "b was dialled again: {}",
            lines_text(&lines)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// MISSION D3, F5 (long: ~25 s; a lease that expires): `b` is killed with SIGKILL, so nothing
/// removes its descriptor. Until its lease expires `a` redials it (the descriptor still says
/// it exists); once the lease TTL ran out the store drops the descriptor, `a` stops dialling,
/// its dialled links to `b` leave the snapshot (inbound ones stay, not connected) and nothing
/// dials `b` again.
#[tokio::test]
#[ignore = "long real-time test (~25 s): waits for the 20 s lease TTL of a killed node"]
async fn d3_f5_an_expired_lease_stops_the_redials_of_a_killed_node() {
    use zmesh::proto::discovery::LEASE_TTL;

    let mesh = Mesh::new("expiry");
    let mut a = mesh.start(&mesh.config("a", server("orders")));
    let mut b = mesh.start(&mesh.config("b", server("orders")));
    a.wait_status("settled with b", |s| settled(s, "a", &["b"]))
        .await;
    let mark = a.take_lines().len();
    b.kill9();
    // The lease is not renewed any more: the store drops the descriptor after the TTL.
    a.wait_line_within(mark, "b's descriptor expired", LEASE_TTL + BOUND, |v| {
        v["kind"] == "descriptor_removed" && v["rid"] == "b"
    })
    .await;
    let lines = a.take_lines()[mark..].to_vec();
    assert!(
        lines
            .iter()
            .any(|v| is_link_of(v, "b") && v["state"] == "connecting"),
        "a redialled b while its descriptor lived: {}",
        lines_text(&lines)
    );
    // a's dialled links to b leave the snapshot. Which side's dials won the duplicate
    // resolution is a race: where b's won, a also holds b's inbound links, which stay listed
    // as not connected (inbound links are never dialled).
    let gone = |s: &Value| {
        links_of(s, "b").all(|l| {
            l["role"].as_str().is_some_and(|r| r.ends_with("_inbound"))
                && l["state"] == "not_connected"
        })
    };
    a.wait_status("b's dialled links removed from the snapshot", gone)
        .await;
    let mark = a.take_lines().len();
    // Past the first redial delays (100 ms, 200 ms, 400 ms, ...), observed all along.
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < until {
        let s = a.status();
        assert!(gone(&s), "a link of b came back:\n{s:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines = a.take_lines()[mark..].to_vec();
    assert!(
        !lines.iter().any(|v| is_link_of(v, "b")),
        "b was dialled again: {}",
        lines_text(&lines)
    );
}

/// MISSION F5, D3 (long: ~30 s): the store stays down for longer than the lease TTL. Each
/// node judges its lease lost (an event and a snapshot field), no link leaves ready, and when
/// the store is back the lease is acquired again.
#[tokio::test]
#[ignore = "long real-time test (~30 s): the store down for longer than the 20 s lease TTL"]
async fn f5_store_down_beyond_the_lease_ttl_links_stay_ready() {
    let mesh = Mesh::new("long-outage");
    let mut a = mesh.start(&mesh.config("a", server("orders")));
    let b = mesh.start(&mesh.config("b", server("orders")));
    a.wait_status("settled with b", |s| settled(s, "a", &["b"]))
        .await;
    b.wait_status("settled with a", |s| settled(s, "b", &["a"]))
        .await;
    let mark = a.take_lines().len();
    let away = mesh.dir.path().join("store-away");
    std::fs::rename(mesh.dir.path().join("store"), &away).expect("move the store away");
    let limit = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = a.status();
        assert!(
            mesh_ready(&s, &["b"]),
            "{}",
            serde_json::to_string_pretty(&s).unwrap_or_default()
        );
        if s["discovery"]["lease"] == "lost" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < limit,
            "lease never judged lost"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let lines = a.take_lines()[mark..].to_vec();
    assert!(lines
        .iter()
        .any(|v| v["kind"] == "lease_lost" && v["reason"] == "not_renewed"));
    assert!(
        !lines.iter().any(|v| v["event"] == "state"),
        "{}",
        lines_text(&lines)
    );
    std::fs::rename(&away, mesh.dir.path().join("store")).expect("move the store back");
    a.wait_status("holding its lease again", |s| {
        s["discovery"]["lease"] == "held"
    })
    .await;
    assert!(mesh_ready(&a.status(), &["b"]));
}

/// MISSION F3 (manual and automatic combined): `a` dials `b` through a manual `[[peers]]`
/// entry (endpoint only, generation 0), and also knows `b`'s descriptor. The manual endpoint
/// is served by another run claiming RID `b` (same security identity, another generation, not
/// in the store). The descriptor's fence wins: that run is never left ready, the manual link
/// fails with `generation_mismatch`; the manual intent could not weaken the fence.
#[tokio::test]
async fn f3_manual_intent_cannot_weaken_a_descriptor_fence() {
    use zmesh::config::PeerConfig;
    use zmesh::proto::state::{ConnState, FailureReason};
    use zmesh::runtime::Node;

    let mesh = Mesh::new("manual-fence");
    // The real b, in the store.
    let real_b = Node::start(mesh.config("b", server("orders")))
        .await
        .expect("real b");
    // Another run with RID b on manual endpoints, not in the store.
    let mut other = NodeConfig::new("b");
    other.memberships = server("orders");
    other.route_mesh = Some(common::mesh_bind(true));
    let impostor = Node::start(other.clone()).await.expect("other b");
    assert_ne!(impostor.generation(), real_b.generation());

    let mut a = mesh.config("a", server("orders"));
    let bind = other.route_mesh.clone().expect("bound");
    a.peers = vec![PeerConfig::new("b", bind.application, bind.completion).generation(0)];
    let a = Node::start(a).await.expect("a");
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let s = a.snapshot().await.expect("snapshot");
        let manual: Vec<_> = s
            .links
            .iter()
            .filter(|l| l.role == "application" || l.role == "completion")
            .filter(|l| l.peer.as_deref() == Some("b"))
            .collect();
        assert_eq!(
            manual.len(),
            2,
            "the manual entry, fenced, not a second dial"
        );
        let fenced = s
            .discovery
            .as_ref()
            .is_some_and(|d| d.descriptors_seen == 1)
            && manual.iter().all(|l| {
                l.state != ConnState::Ready
                    && l.last_failure
                        .as_ref()
                        .is_some_and(|f| f.reason == FailureReason::GenerationMismatch)
            });
        if fenced {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not fenced: {}",
            s.to_table()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And it stays fenced: the manual link keeps dialling the other run (manual intents are
    // retried), which is refused every time.
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    while tokio::time::Instant::now() < until {
        let s = a.snapshot().await.expect("snapshot");
        assert!(
            !s.links.iter().any(|l| l.peer.as_deref() == Some("b")
                && l.state == ConnState::Ready
                && l.peer_generation == Some(impostor.generation())),
            "{}",
            s.to_table()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in [a, impostor, real_b] {
        n.shutdown().await.expect("shutdown");
    }
}

/// MISSION F3 (ClientServer inbound): a server in automatic mode holds each client to the
/// fence of the client's descriptor (RID + security identity + generation), as RouteMesh
/// does with its peers. The real `c` (in the store) is admitted; another run claiming RID
/// `c` (not in the store, so another generation) dials the same server and is refused with
/// `generation_mismatch`, the reason RouteMesh uses, and never replaces the real `c`'s
/// connection.
#[tokio::test]
async fn f3_client_server_inbound_is_fenced_by_the_client_descriptor() {
    use zmesh::config::ServerConfig;
    use zmesh::proto::state::{ConnState, FailureReason};
    use zmesh::runtime::snapshot::Snapshot;
    use zmesh::runtime::Node;

    let mesh = Mesh::new("cs-fence");
    let mut sc = mesh.config("s", server("orders"));
    if let Some(d) = sc.discovery.as_mut() {
        d.bind = vec![AutoBind::Server];
        d.route_mesh = false;
    }
    let s = Node::start(sc).await.expect("s");
    let mut cc = mesh.config("c", common::client_of("orders"));
    if let Some(d) = cc.discovery.as_mut() {
        // A client only: its descriptor binds nothing, it is there for its fence.
        d.bind = Vec::new();
    }
    let c = Node::start(cc).await.expect("c");
    let inbound_c = |snap: &Snapshot| -> Vec<(ConnState, Option<u64>, Option<u64>)> {
        snap.links
            .iter()
            .filter(|l| l.role == "server_inbound" && l.peer.as_deref() == Some("c"))
            .map(|l| (l.state, l.peer_generation, l.connection_id))
            .collect()
    };
    let deadline = tokio::time::Instant::now() + BOUND;
    let (real, endpoint) = loop {
        let snap = s.snapshot().await.expect("snapshot");
        let d = snap.discovery.as_ref().expect("automatic mode");
        if let ([(ConnState::Ready, Some(g), Some(id))], 1) =
            (inbound_c(&snap).as_slice(), d.descriptors_seen)
        {
            let endpoint = d.descriptor.server.clone().expect("s binds a server");
            assert_eq!(*g, c.generation());
            break ((*g, *id), endpoint);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "c not admitted: {}",
            snap.to_table()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // Another run claiming RID c dials s's server by hand.
    let mut other = NodeConfig::new("c");
    other.memberships = common::client_of("orders");
    other.servers = vec![ServerConfig::new("orders", endpoint).rid("s")];
    let impostor = Node::start(other).await.expect("other c");
    assert_ne!(impostor.generation(), c.generation());
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let snap = impostor.snapshot().await.expect("snapshot");
        let refused = snap.links.iter().any(|l| {
            l.role == "client"
                && l.state != ConnState::Ready
                && l.last_failure
                    .as_ref()
                    .is_some_and(|f| f.reason == FailureReason::GenerationMismatch)
        });
        if refused {
            break;
        }
        assert!(
            snap.links.iter().all(|l| l.state != ConnState::Ready),
            "the other run was admitted: {}",
            snap.to_table()
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "not refused: {}",
            snap.to_table()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The real c's connection is untouched: the same connection, still ready.
    let snap = s.snapshot().await.expect("snapshot");
    assert_eq!(
        inbound_c(&snap),
        [(ConnState::Ready, Some(real.0), Some(real.1))],
        "{}",
        snap.to_table()
    );
    for n in [impostor, c, s] {
        n.shutdown().await.expect("shutdown");
    }
}
