//! Shared by the automatic-mode tests of both store backends (`zmesh-cli/tests/discovery.rs`, the
//! embedded SQLite store; `zmesh-cli/tests/discovery_etcd.rs`, a real etcd): `zmesh node` children whose
//! configurations name no endpoint (a [`Mesh`] of [`Proc`]s on one store URL), the snapshot
//! predicates they wait for, and the scenarios both backends run with the same assertions.
//!
//! Declared by the test files that use it (`#[path = "common/discovery.rs"] mod disc;`),
//! next to `mod common;`, which it uses.
#![allow(dead_code)]

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use zmesh::config::{AutoBind, DiscoveryConfig, NodeConfig};

use crate::common;

/// Bound of every wait for a condition.
pub const BOUND: Duration = Duration::from_secs(20);

/// A test's directory (node configurations; for SQLite, the store) and store URL. The
/// directory is removed when the mesh drops (even on a panic): declare the mesh before its
/// [`Proc`]s, so they are killed first.
pub struct Mesh {
    pub dir: tempfile::TempDir,
    pub url: String,
}

impl Mesh {
    /// A mesh on the embedded SQLite store `store/mesh.db` in the test's directory.
    pub fn new(name: &str) -> Mesh {
        let dir = Mesh::dir(name);
        let store = dir.path().join("store");
        std::fs::create_dir_all(&store).expect("store dir");
        let url = format!("sqlite://{}", store.join("mesh.db").display());
        Mesh { dir, url }
    }

    /// A mesh on the store at `url` (an etcd the test started), the test's directory for
    /// the node configurations only.
    pub fn at(name: &str, url: String) -> Mesh {
        let dir = Mesh::dir(name);
        Mesh { dir, url }
    }

    fn dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("zmesh-disc-{name}-"))
            .tempdir()
            .expect("test dir")
    }

    /// A node configuration: a RID, memberships, `[discovery]` and nothing else.
    pub fn config(
        &self,
        rid: &str,
        memberships: Vec<zmesh::proto::handshake::Membership>,
    ) -> NodeConfig {
        let mut c = NodeConfig::new(rid);
        c.memberships = memberships;
        c.discovery = Some(DiscoveryConfig::new(self.url.clone()));
        c
    }

    pub fn start(&self, cfg: &NodeConfig) -> Proc {
        self.start_with(cfg, &[])
    }

    /// [`Mesh::start`] with further `zmesh node` arguments (`--serve CHANNEL`, ...).
    pub fn start_with(&self, cfg: &NodeConfig, extra: &[&str]) -> Proc {
        let text = toml::to_string(cfg).expect("toml");
        assert!(
            !text.contains("tcp://") && !text.contains("ipc://"),
            "no endpoint in the configuration:\n{text}"
        );
        self.spawn_with(cfg, Command::new(env!("CARGO_BIN_EXE_zmesh")), extra)
    }

    /// Starts a `zmesh node` child with `cfg` as it is (endpoints allowed: a manual node).
    pub fn spawn(&self, cfg: &NodeConfig) -> Proc {
        self.spawn_with(cfg, Command::new(env!("CARGO_BIN_EXE_zmesh")), &[])
    }

    /// Starts a `zmesh node` child with `cfg` in the network namespace `netns` (`ip netns
    /// exec`), with the further arguments `extra`; its control endpoint (ipc, a file) is
    /// reached from any namespace.
    pub fn spawn_in(&self, cfg: &NodeConfig, netns: &str, extra: &[&str]) -> Proc {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns, env!("CARGO_BIN_EXE_zmesh")]);
        self.spawn_with(cfg, cmd, extra)
    }

    fn spawn_with(&self, cfg: &NodeConfig, mut cmd: Command, extra: &[&str]) -> Proc {
        let text = toml::to_string(cfg).expect("toml");
        let path = self.dir.path().join(format!("{}.toml", cfg.rid));
        std::fs::write(&path, text).expect("write config");
        let control = common::ipc(&format!("ctl-{}", cfg.rid));
        let mut child = cmd
            .args([
                "node",
                "--events",
                "ndjson",
                "--control",
                &control,
                "--config",
            ])
            .arg(&path)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn zmesh node");
        // The node's log: kept for the test, and passed on to the test's own stderr.
        let log = Arc::new(Mutex::new(Vec::new()));
        let err = child.stderr.take().expect("stderr");
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("{line}");
                if let Ok(mut l) = kept.lock() {
                    l.push(line);
                }
            }
        });
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Proc {
            rid: cfg.rid.clone(),
            child,
            lines,
            seen: Vec::new(),
            control,
            log,
        }
    }
}

/// A `zmesh node` child: its ndjson lines and its control endpoint.
pub struct Proc {
    pub rid: String,
    pub child: Child,
    pub lines: tokio::sync::mpsc::UnboundedReceiver<Value>,
    /// Every line taken so far, in order.
    pub seen: Vec<Value>,
    pub control: String,
    /// The lines of the node's log (its stderr) so far.
    log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// The lines of the node's log (stderr) so far that contain `text`.
    pub fn log_lines(&self, text: &str) -> Vec<String> {
        self.log
            .lock()
            .map(|l| l.iter().filter(|l| l.contains(text)).cloned().collect())
            .unwrap_or_default()
    }

    /// Takes the lines printed so far.
    pub fn take_lines(&mut self) -> &[Value] {
        while let Ok(v) = self.lines.try_recv() {
            self.seen.push(v);
        }
        &self.seen
    }

    /// Waits (bounded) for a line matching `pred` printed after the first `from` lines.
    pub async fn wait_line(
        &mut self,
        from: usize,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        self.wait_line_within(from, what, BOUND, pred).await
    }

    /// [`Proc::wait_line`] with a bound of its own.
    pub async fn wait_line_within(
        &mut self,
        from: usize,
        what: &str,
        bound: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + bound;
        let mut i = from;
        loop {
            while i < self.seen.len() {
                if pred(&self.seen[i]) {
                    return self.seen[i].clone();
                }
                i += 1;
            }
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(v)) => self.seen.push(v),
                Ok(None) => panic!("{} ended before {what}", self.rid),
                Err(_) => panic!(
                    "{}: no {what} within {bound:?}; lines:\n{}",
                    self.rid,
                    lines_text(&self.seen)
                ),
            }
        }
    }

    /// The node's snapshot (`zmesh status --json`).
    pub fn status(&self) -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args(["status", "--json", "--control", &self.control])
            .output()
            .expect("zmesh status");
        assert!(
            out.status.success(),
            "status of {}: {}",
            self.rid,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// Polls the snapshot until `pred` holds (bounded); returns that snapshot.
    pub async fn wait_status(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + BOUND;
        loop {
            let s = self.status();
            if pred(&s) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: not {what} within {BOUND:?}:\n{}",
                self.rid,
                serde_json::to_string_pretty(&s).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success(), "kill {sig}");
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn lines_text(lines: &[Value]) -> String {
    lines
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The RouteMesh lanes (`application`, `completion`) of `peer` that are ready in `status`,
/// whichever side dialled them.
pub fn ready_lanes(status: &Value, peer: &str) -> Vec<String> {
    let mut lanes: Vec<String> = status["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["topology"] == "route_mesh" && l["peer"] == peer && l["state"] == "ready")
        .filter_map(|l| l["role"].as_str())
        .map(|r| r.trim_end_matches("_inbound").to_owned())
        .collect();
    lanes.sort();
    lanes.dedup();
    lanes
}

/// The ready RouteMesh links this node dialled itself to `peer`: (role, connection id).
pub fn dialled_ready(status: &Value, peer: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = status["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["topology"] == "route_mesh" && l["peer"] == peer && l["state"] == "ready")
        .filter(|l| l["role"] == "application" || l["role"] == "completion")
        .filter_map(|l| {
            Some((
                l["role"].as_str()?.to_owned(),
                common::hex_id(&l["connection_id"])?,
            ))
        })
        .collect();
    out.sort();
    out
}

/// Settled: ready on both lanes with every peer in `peers`, every descriptor known, and the
/// duplicate dials resolved (the node with the smaller RID dials, so its own dials carry
/// both lanes).
pub fn settled(status: &Value, me: &str, peers: &[&str]) -> bool {
    mesh_ready(status, peers)
        && status["discovery"]["descriptors_seen"] == peers.len()
        && peers
            .iter()
            .filter(|p| me < **p)
            .all(|p| dialled_ready(status, p).len() == 2)
        // Both nodes dial each other: until the duplicate resolution has closed the losing
        // dial, a node can hold both (4 ready connections to one peer). Settled is one per lane.
        && peers.iter().all(|p| ready_conns(status, p).len() == 2)
}

/// Every ready RouteMesh connection to `peer`: (role, connection id).
pub fn ready_conns(status: &Value, peer: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = status["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["topology"] == "route_mesh" && l["peer"] == peer && l["state"] == "ready")
        .filter_map(|l| {
            Some((
                l["role"].as_str()?.to_owned(),
                common::hex_id(&l["connection_id"])?,
            ))
        })
        .collect();
    out.sort();
    out
}

pub fn mesh_ready(status: &Value, peers: &[&str]) -> bool {
    peers
        .iter()
        .all(|p| ready_lanes(status, p) == ["application", "completion"])
}

/// The generation of `peer` on its ready RouteMesh links.
pub fn peer_generations(status: &Value, peer: &str) -> Vec<u64> {
    status["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["topology"] == "route_mesh" && l["peer"] == peer && l["state"] == "ready")
        .filter_map(|l| common::hex_id(&l["peer_generation"]))
        .collect()
}

/// State lines of links to `peer` (a RouteMesh link's name is `peer RID lane` or `inbound RID
/// lane`).
pub fn is_link_of(v: &Value, peer: &str) -> bool {
    v["event"] == "state"
        && v["link"].as_str().is_some_and(|l| {
            l.starts_with(&format!("peer {peer} ")) || l.starts_with(&format!("inbound {peer} "))
        })
}

pub fn server(channel: &str) -> Vec<zmesh::proto::handshake::Membership> {
    common::server_of(channel)
}
/// The RouteMesh links of `peer` in `status` (dialled or inbound).
pub fn links_of<'a>(status: &'a Value, peer: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    status["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |l| l["topology"] == "route_mesh" && l["peer"] == peer)
}

/// MISSION T4 (discovery rule): two Object Clients without a Server membership never dial
/// each other (no link at all, not even a `not_required` one: no NotRequired round trip),
/// while both become ready with the server.
pub async fn object_client_pair_is_never_dialled(mesh: &Mesh) {
    let mut a = mesh.start(&mesh.config("a", common::client_of("orders")));
    let mut d = mesh.start(&mesh.config("d", common::client_of("orders")));
    let b = mesh.start(&mesh.config("b", server("orders")));
    b.wait_status("settled with a and d", |s| settled(s, "b", &["a", "d"]))
        .await;
    for (p, other) in [(&a, "d"), (&d, "a")] {
        let s = p
            .wait_status("ready with b, knowing both descriptors", |s| {
                mesh_ready(s, &["b"]) && s["discovery"]["descriptors_seen"] == 2
            })
            .await;
        let links_to_other = s["links"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["peer"] == other)
            .count();
        assert_eq!(
            links_to_other,
            0,
            "{}",
            serde_json::to_string_pretty(&s).unwrap_or_default()
        );
    }
    for (p, other) in [(&mut a, "d"), (&mut d, "a")] {
        let lines = p.take_lines();
        assert!(
            !lines.iter().any(|v| is_link_of(v, other)),
            "a link between the Object Clients:\n{}",
            lines_text(lines)
        );
        assert!(!lines.iter().any(|v| v["state"] == "not_required"));
    }
}

/// MISSION F3, F4: `b` is killed with SIGKILL and started again (same RID, new generation,
/// new ephemeral ports). `a` sees the old connections fail at once, replaces them with
/// connections to the new run once the new descriptor is in, each dial after the close of
/// the old socket was observed, and admits only the new generation; `a`'s links to `c`
/// never leave ready.
pub async fn kill9_restart_new_generation_replaces_the_old_connection(mesh: &Mesh) {
    let mut a = mesh.start(&mesh.config("a", server("orders")));
    let mut b = mesh.start(&mesh.config("b", server("orders")));
    let c = mesh.start(&mesh.config("c", server("orders")));
    let s = a
        .wait_status("settled with b and c", |s| settled(s, "a", &["b", "c"]))
        .await;
    c.wait_status("settled with a and b", |s| settled(s, "c", &["a", "b"]))
        .await;
    let old = peer_generations(&s, "b");
    assert_eq!(old.len(), 2);
    let old_b_conns = dialled_ready(&s, "b");
    let c_conns = dialled_ready(&s, "c");
    assert_eq!(c_conns.len(), 2);

    b.kill9();
    let _b2 = mesh.start(&mesh.config("b", server("orders")));
    let s = a
        .wait_status("ready with b's new run", |s| {
            let g = peer_generations(s, "b");
            mesh_ready(s, &["b"]) && g.len() == 2 && g.iter().all(|g| !old.contains(g))
        })
        .await;
    let new = peer_generations(&s, "b")[0];
    assert_eq!(
        s["discovery"]["descriptors_seen"], 2,
        "the new run's descriptor replaced the old one"
    );
    // Others unaffected: a's connections to c are the same ones, still ready.
    assert_eq!(dialled_ready(&s, "c"), c_conns);
    // On each of a's links to b, from the old connection's ready line on: the old
    // connection ended (it failed at the kill, or was closed for the new descriptor) before
    // any new dial, and there is never more than one connection at a time.
    for (lane, conn) in &old_b_conns {
        let link = format!("peer b {lane}");
        let ready_old = format!("b ready on c{conn}");
        a.wait_line(0, "the old connection's ready line", |v| {
            v["link"] == link.as_str() && v["detail"] == ready_old.as_str()
        })
        .await;
        let lines = a.take_lines().to_vec();
        let from = lines
            .iter()
            .position(|v| v["link"] == link.as_str() && v["detail"] == ready_old.as_str())
            .expect("seen");
        let mine: Vec<&Value> = lines[from + 1..]
            .iter()
            .filter(|v| v["link"] == link.as_str())
            .collect();
        assert!(
            mine.first().is_some_and(|v| !v["reason"].is_null()),
            "{link}: the old connection did not end first:\n{}",
            lines_text(&lines[from..])
        );
        let mut open = false;
        for v in &mine {
            match v["state"].as_str() {
                Some("connecting") => {
                    assert!(
                        !open,
                        "{link}: two connections at once:\n{}",
                        lines_text(&lines[from..])
                    );
                    open = true;
                }
                Some("reconnecting" | "not_connected") => open = false,
                _ => {}
            }
        }
        assert!(mine.iter().any(|v| v["state"] == "ready"));
    }
    let lines = a.take_lines().to_vec();
    assert!(
        lines.iter().any(|v| v["event"] == "discovery"
            && v["kind"] == "descriptor_put"
            && v["rid"] == "b"
            && common::hex_id(&v["generation"]) == Some(new)),
        "{}",
        lines_text(&lines)
    );
    let s = c.status();
    assert!(mesh_ready(&s, &["a"]));
}

/// MISSION T3: two publishers found by descriptor, two SUB sockets at the subscriber (one
/// subscription link per publisher, each with its own connection), both ready.
pub async fn two_publishers_by_descriptor_two_sub_sockets(mesh: &Mesh) {
    let publisher = |rid: &str| {
        let mut c = mesh.config(rid, Vec::new());
        if let Some(d) = c.discovery.as_mut() {
            d.bind = vec![AutoBind::Publisher];
            d.route_mesh = false;
        }
        c
    };
    let _p1 = mesh.start(&publisher("p1"));
    let _p2 = mesh.start(&publisher("p2"));
    let mut sub = mesh.config("s", Vec::new());
    if let Some(d) = sub.discovery.as_mut() {
        d.bind = Vec::new();
    }
    let s = mesh.start(&sub);
    // Ready on the first beacon: a beacon goes out every 5 s.
    let status = s
        .wait_status("ready with both publishers", |s| {
            let subs: Vec<&Value> = s["links"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|l| l["topology"] == "fanout" && l["state"] == "ready")
                .collect();
            subs.len() == 2
        })
        .await;
    let subs: Vec<&Value> = status["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["topology"] == "fanout")
        .collect();
    assert_eq!(subs.len(), 2, "one subscription per publisher descriptor");
    assert_ne!(subs[0]["endpoint"], subs[1]["endpoint"]);
    assert_ne!(subs[0]["connection_id"], subs[1]["connection_id"]);
    assert_eq!(status["discovery"]["descriptors_seen"], 2);
}
