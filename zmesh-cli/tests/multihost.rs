//! The multi-host tier (MISSION H1, H2, F5): three hosts made by the test as network
//! namespaces on one bridge (a fourth namespace holds the bridge, the "switch"), a
//! three-member etcd cluster with one member per host (TLS for clients and peers, client
//! certificates required, user/password authentication on), and one `zmesh node` per host
//! under CURVE in all three topologies, found through etcd: every node is a RouteMesh server
//! of `orders` and publishes fanout records, `h1` serves the ClientServer channel `ledger`
//! that `h2` and `h3` are Object Clients of. Each node binds on every interface and
//! advertises its host's address (`[discovery.advertise]`).
//!
//! A partition is the cable of a host pulled at the switch (`ip link set ... down` on the
//! bridge port); healing plugs it back. All traffic stays inside the namespaces: the test
//! process itself reaches the nodes through their ipc control endpoints (files) and etcd
//! through `etcdctl` run inside a host.
//!
//! Needs root and `ip` (iproute2); `#[ignore]`d in the default run, run by name:
//! `cargo test --locked --test multihost -- --ignored` (`.ci/run` does). Every figure is
//! printed (`--nocapture` shows them) and FAULTS.md keeps those of a run.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "common/discovery.rs"]
mod disc;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use zmesh::config::{
    AdvertiseConfig, AutoBind, DiscoveryConfig, EtcdAuthConfig, EtcdTlsConfig, NodeConfig,
    SecurityConfig,
};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::proto::liveness::PEER_DEADLINE;
use zmesh::runtime::security::KeyPair;

use disc::{mesh_ready, peer_generations, ready_conns, Mesh, Proc};

/// Bound of every wait for a condition (set-up included).
const BOUND: Duration = Duration::from_secs(40);

/// The hosts' subnet: addresses that exist only inside this test's namespaces.
const SUBNET: &str = "10.231.0";

/// The etcd key prefix of the mesh (the etcd user's permission covers it).
const PREFIX: &str = "/mh/";

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run a set-up command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

/// The network: a switch namespace with a bridge, and three host namespaces each joined to
/// it by a veth pair (`eth0` in the host, `p{i}` on the bridge). Removed when dropped.
struct Net {
    switch: String,
    hosts: Vec<String>,
}

impl Net {
    fn new(tag: &str) -> Net {
        let tag = format!("{}{tag}", std::process::id());
        let net = Net {
            switch: format!("zm{tag}sw"),
            hosts: (1..=3).map(|i| format!("zm{tag}h{i}")).collect(),
        };
        ip(&["netns", "add", &net.switch]);
        ip(&["-n", &net.switch, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &net.switch, "link", "set", "br0", "up"]);
        for (i, h) in net.hosts.iter().enumerate() {
            let n = i + 1;
            let port = format!("p{n}");
            ip(&["netns", "add", h]);
            ip(&["-n", h, "link", "set", "lo", "up"]);
            // Made inside the host, its peer moved straight into the switch: neither end is
            // ever in the test's own namespace.
            ip(&[
                "-n",
                h,
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &net.switch,
            ]);
            ip(&[
                "-n",
                h,
                "addr",
                "add",
                &format!("{}/24", net.addr(n)),
                "dev",
                "eth0",
            ]);
            ip(&["-n", h, "link", "set", "eth0", "up"]);
            ip(&["-n", &net.switch, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &net.switch, "link", "set", &port, "up"]);
        }
        net
    }

    /// The address of host `n` (1-based).
    fn addr(&self, n: usize) -> String {
        format!("{SUBNET}.{n}")
    }

    /// The namespace of host `n` (1-based).
    fn host(&self, n: usize) -> &str {
        &self.hosts[n - 1]
    }

    /// Pulls (`false`) or plugs back (`true`) host `n`'s cable at the switch.
    fn link(&self, n: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.switch, "link", "set", &format!("p{n}"), state]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain([&self.switch]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// The etcd binary: `ZMESH_ETCD` (`.ci/run` sets it), else `etcd` on PATH.
fn etcd_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("ZMESH_ETCD") {
        return PathBuf::from(p);
    }
    let out = Command::new("sh")
        .args(["-c", "command -v etcd"])
        .output()
        .expect("sh");
    let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success() && !p.is_empty(),
        "the multi-host tier needs etcd: set ZMESH_ETCD or put etcd on PATH"
    );
    PathBuf::from(p)
}

/// Throwaway certificates: a CA, one server certificate for every member (all three host
/// addresses, for clients and peers alike), a client certificate for the nodes and one for
/// the test's own `etcdctl`.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new(net: &Net) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("zmesh-mh-pki-")
            .tempdir()
            .expect("pki dir");
        let pki = Pki { dir };
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "zmesh multihost CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca =
            rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().expect("key"))
                .expect("CA");
        std::fs::write(pki.path("ca.pem"), ca.pem()).expect("write");
        let addrs: Vec<String> = (1..=3).map(|n| net.addr(n)).collect();
        for (name, sans) in [("server", addrs), ("client", vec![]), ("admin", vec![])] {
            let mut p = rcgen::CertificateParams::new(sans).expect("params");
            p.distinguished_name.push(rcgen::DnType::CommonName, name);
            p.extended_key_usages = vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let key = rcgen::KeyPair::generate().expect("key");
            let cert = p.signed_by(&key, &ca).expect("sign");
            std::fs::write(pki.path(&format!("{name}.pem")), cert.pem()).expect("write");
            std::fs::write(pki.path(&format!("{name}-key.pem")), key.serialize_pem())
                .expect("write");
        }
        std::fs::write(pki.path("etcd-password"), "zmesh-pw\n").expect("write");
        pki
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }
}

/// One etcd member, in its host; killed when dropped.
struct Member {
    child: Option<Child>,
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The three-member cluster.
struct Cluster {
    members: Vec<Member>,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn start(net: &Net, pki: &Pki) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("zmesh-mh-etcd-")
            .tempdir()
            .expect("dir");
        let members = (1..=3)
            .map(|n| Cluster::spawn(net, pki, dir.path(), n))
            .collect();
        let cluster = Cluster { members, dir };
        let deadline = Instant::now() + BOUND;
        while let Err(e) = cluster.etcdctl(net, pki, 1, None, &["put", "/probe", "1"]) {
            assert!(
                Instant::now() < deadline,
                "the cluster did not serve: {e}\n{}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        for args in [
            &["user", "add", "root", "--new-user-password=root-pw"][..],
            &["role", "add", "root"],
            &["user", "grant-role", "root", "root"],
            &["role", "add", "zmesh"],
            &[
                "role",
                "grant-permission",
                "zmesh",
                "readwrite",
                "--prefix=true",
                PREFIX,
            ],
            &["user", "add", "zmesh", "--new-user-password=zmesh-pw"],
            &["user", "grant-role", "zmesh", "zmesh"],
            &["auth", "enable"],
        ] {
            if let Err(e) = cluster.etcdctl(net, pki, 1, None, args) {
                // etcd may hold the root role already.
                assert!(
                    args[..2] == ["role", "add"] && e.contains("exists"),
                    "{args:?}: {e}"
                );
            }
        }
        cluster
    }

    /// Starts member `n` in its host, on its data dir under `dir` (a new member of the
    /// cluster, or the same member again: etcd then reads its membership from the data dir).
    fn spawn(net: &Net, pki: &Pki, dir: &std::path::Path, n: usize) -> Member {
        let initial: Vec<String> = (1..=3)
            .map(|m| format!("m{m}=https://{}:2380", net.addr(m)))
            .collect();
        let a = net.addr(n);
        let s = |f: &str| pki.path(f).display().to_string();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("m{n}.log")))
            .expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", net.host(n)])
            .arg(etcd_binary())
            .args(["--name", &format!("m{n}")])
            .arg("--data-dir")
            .arg(dir.join(format!("m{n}")))
            .args(["--listen-client-urls", &format!("https://{a}:2379")])
            .args(["--advertise-client-urls", &format!("https://{a}:2379")])
            .args(["--listen-peer-urls", &format!("https://{a}:2380")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("https://{a}:2380"),
            ])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "zmesh-mh"])
            .args([
                "--cert-file",
                &s("server.pem"),
                "--key-file",
                &s("server-key.pem"),
            ])
            .args(["--trusted-ca-file", &s("ca.pem"), "--client-cert-auth"])
            .args(["--peer-cert-file", &s("server.pem")])
            .args(["--peer-key-file", &s("server-key.pem")])
            .args([
                "--peer-trusted-ca-file",
                &s("ca.pem"),
                "--peer-client-cert-auth",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start etcd");
        Member { child: Some(child) }
    }

    /// Kills member `n` with SIGKILL.
    fn kill(&mut self, n: usize) {
        if let Some(mut c) = self.members[n - 1].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `n` again on its data dir and waits until it serves.
    fn restart(&mut self, net: &Net, pki: &Pki, n: usize) {
        self.members[n - 1] = Cluster::spawn(net, pki, self.dir.path(), n);
        let deadline = Instant::now() + BOUND;
        while let Err(e) = self.etcdctl(net, pki, n, Some("root:root-pw"), &["put", "/back", "1"]) {
            assert!(
                Instant::now() < deadline,
                "m{n} did not serve again: {e}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `etcdctl` in host `n`, to that host's member, as root once authentication is on.
    fn etcdctl(
        &self,
        net: &Net,
        pki: &Pki,
        n: usize,
        user: Option<&str>,
        args: &[&str],
    ) -> Result<String, String> {
        let s = |f: &str| pki.path(f).display().to_string();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", net.host(n)])
            .arg(etcd_binary().with_file_name("etcdctl"))
            .args(["--endpoints", &format!("https://{}:2379", net.addr(n))])
            .args(["--cacert", &s("ca.pem"), "--cert", &s("admin.pem")])
            .args(["--key", &s("admin-key.pem"), "--command-timeout", "2s"]);
        if let Some(u) = user {
            cmd.args(["--user", u]);
        }
        let out = cmd
            .args(args)
            .env("ETCDCTL_API", "3")
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn logs(&self) -> String {
        (1..=3)
            .map(|n| {
                let log = std::fs::read_to_string(self.dir.path().join(format!("m{n}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                format!(
                    "m{n}:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn membership(role: Role, channel: &str) -> Membership {
    Membership {
        role,
        channel: channel.into(),
    }
}

/// The configuration of the node of host `n`.
fn node_config(net: &Net, pki: &Pki, keys: &[(KeyPair, PathBuf)], n: usize) -> NodeConfig {
    let mut c = NodeConfig::new(format!("h{n}"));
    c.memberships = vec![membership(Role::Server, "orders")];
    let mut bind = vec![AutoBind::RouteMesh, AutoBind::Publisher];
    if n == 1 {
        c.memberships.push(membership(Role::Server, "ledger"));
        bind.push(AutoBind::Server);
    } else {
        c.memberships.push(membership(Role::ObjectClient, "ledger"));
    }
    let members: Vec<String> = (1..=3).map(|m| format!("{}:2379", net.addr(m))).collect();
    let mut d = DiscoveryConfig::new(format!("etcd://{}{PREFIX}", members.join(",")));
    d.bind = bind;
    d.host = "0.0.0.0".into();
    d.advertise = Some(AdvertiseConfig::new(net.addr(n)));
    d.tls = Some(
        EtcdTlsConfig::new(pki.path("ca.pem"))
            .client_cert(pki.path("client.pem"), pki.path("client-key.pem")),
    );
    d.auth = Some(EtcdAuthConfig::with_password_file(
        "zmesh",
        pki.path("etcd-password"),
    ));
    c.discovery = Some(d);
    c.security = SecurityConfig::curve(&keys[n - 1].1).allow(keys.iter().map(|(k, _)| k.public));
    c
}

/// The configuration of the caller `c2`, a node of host 2: an Object Client of `orders`, so
/// it is dialled by every Server of it, and publishes and subscribes to nothing.
fn caller_config(net: &Net, pki: &Pki, keys: &[(KeyPair, PathBuf)]) -> NodeConfig {
    let mut c = node_config(net, pki, keys, 2);
    c.rid = "c2".into();
    c.memberships = vec![membership(Role::ObjectClient, "orders")];
    if let Some(d) = c.discovery.as_mut() {
        d.bind = vec![AutoBind::RouteMesh];
        d.subscribe = false;
        d.client_server = false;
    }
    c.security.secret_key_file = Some(keys[3].1.clone());
    c
}

/// [`Tier::exec_log`] of the tier whose nodes `mesh` starts.
fn exec_log(mesh: &Mesh, n: usize) -> PathBuf {
    mesh.dir.path().join(format!("h{n}.exec"))
}

fn others(n: usize) -> Vec<String> {
    (1..=3)
        .filter(|m| *m != n)
        .map(|m| format!("h{m}"))
        .collect()
}

fn links<'a>(s: &'a Value, topology: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    s["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |l| l["topology"] == topology)
}

fn ready(l: &Value) -> bool {
    l["state"] == "ready"
}

/// Node `n` is ready in every topology with every peer in `peers`: both RouteMesh lanes,
/// one connection each; a SUB socket ready per publisher; for `h2`, `h3`, the `ledger`
/// server `h1` when it is among `peers`. Every link proven by CURVE.
fn ready_with(s: &Value, n: usize, peers: &[String]) -> bool {
    let peers_ref: Vec<&str> = peers.iter().map(String::as_str).collect();
    let mesh = mesh_ready(s, &peers_ref) && peers.iter().all(|p| ready_conns(s, p).len() == 2);
    let subs = links(s, "fanout").filter(|l| ready(l)).count() == peers.len();
    let cs = n == 1
        || !peers.iter().any(|p| p == "h1")
        || links(s, "client_server")
            .any(|l| ready(l) && l["role"] == "client" && l["peer"] == "h1");
    let verified = s["links"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| ready(l) && l["topology"] != "fanout")
        .all(|l| l["verified"] == true);
    mesh && subs && cs && verified
}

/// No RouteMesh link of `s` to `peer` is ready.
fn none_ready(s: &Value, peer: &str) -> bool {
    ready_conns(s, peer).is_empty()
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Polls node `p` until `pred` holds; returns the time it took.
async fn wait(p: &Proc, what: &str, bound: Duration, pred: impl Fn(&Value) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        let s = p.status();
        if pred(&s) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < bound,
            "{}: not {what} within {bound:?}:\n{}",
            p.rid,
            serde_json::to_string_pretty(&s["links"]).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls every node of `nodes` until `pred` (given the node's index in `nodes`) holds for
/// each; returns, for each, the time from `since` to the first poll that saw it hold.
async fn wait_each(
    nodes: &[Proc],
    since: Instant,
    what: &str,
    pred: impl Fn(usize, &Value) -> bool,
) -> Vec<Duration> {
    let mut seen: Vec<Option<Duration>> = vec![None; nodes.len()];
    loop {
        for (i, (p, at)) in nodes.iter().zip(seen.iter_mut()).enumerate() {
            if at.is_none() {
                let s = p.status();
                if pred(i, &s) {
                    *at = Some(since.elapsed());
                } else {
                    assert!(
                        since.elapsed() < BOUND,
                        "{}: not {what} within {BOUND:?}:\n{}",
                        p.rid,
                        serde_json::to_string_pretty(&s["links"]).unwrap_or_default()
                    );
                }
            }
        }
        if seen.iter().all(Option::is_some) {
            return seen.into_iter().flatten().collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every ready connection of node `p`'s RouteMesh links to `peers`, with the peer's
/// generation: what must not change while a link is said to keep working.
fn connections(p: &Proc, peers: &[&str]) -> BTreeSet<(String, String, u64, Vec<u64>)> {
    connections_in(&p.status(), peers)
}

/// [`connections`] in the snapshot `s`.
fn connections_in(s: &Value, peers: &[&str]) -> BTreeSet<(String, String, u64, Vec<u64>)> {
    peers
        .iter()
        .flat_map(|peer| {
            let gens = peer_generations(s, peer);
            ready_conns(s, peer)
                .into_iter()
                .map(move |(role, id)| ((*peer).to_owned(), role, id, gens.clone()))
        })
        .collect()
}

/// A running tier: the network, the etcd cluster and one node per host, all ready. Its
/// fields drop in order: the nodes first, the network last.
struct Tier {
    nodes: Vec<Proc>,
    cluster: Cluster,
    mesh: Mesh,
    keys: Vec<(KeyPair, PathBuf)>,
    _keys_dir: tempfile::TempDir,
    pki: Pki,
    net: Net,
}

impl Tier {
    /// Builds the tier `tag` (its namespaces' names carry it) and waits until every node is
    /// ready in all three topologies; prints how long that took.
    async fn start(tag: &str) -> Tier {
        let net = Net::new(tag);
        let pki = Pki::new(&net);
        let cluster = Cluster::start(&net, &pki);
        let keys_dir = tempfile::Builder::new()
            .prefix("zmesh-mh-keys-")
            .tempdir()
            .expect("keys");
        // h1, h2, h3, and the caller c2 (the last).
        let keys: Vec<(KeyPair, PathBuf)> = (1..=4)
            .map(|n| {
                let pair = KeyPair::generate().expect("CURVE key pair");
                let path = keys_dir.path().join(format!("k{n}.key"));
                pair.write_new(&path).expect("key file");
                (pair, path)
            })
            .collect();
        let mut tier = Tier {
            nodes: Vec::new(),
            cluster,
            mesh: Mesh::at(&format!("multihost-{tag}"), String::new()),
            keys,
            _keys_dir: keys_dir,
            pki,
            net,
        };
        let t0 = Instant::now();
        tier.nodes = (1..=3).map(|n| tier.start_node(n)).collect();
        for (i, p) in tier.nodes.iter().enumerate() {
            let n = i + 1;
            wait(p, "ready in all three topologies", BOUND, |s| {
                ready_with(s, n, &others(n))
            })
            .await;
        }
        println!(
            "{tag}: all ready {} ms after the three nodes started",
            ms(t0.elapsed())
        );
        tier
    }

    /// Starts the node of host `n` (a new process run): it serves the demo service on
    /// `orders` and logs each call it starts running to [`Tier::exec_log`].
    fn start_node(&self, n: usize) -> Proc {
        let cfg = node_config(&self.net, &self.pki, &self.keys, n);
        let log = self.exec_log(n).display().to_string();
        self.mesh.spawn_in(
            &cfg,
            self.net.host(n),
            &["--serve", "orders", "--exec-log", &log],
        )
    }

    /// The file where the node of host `n` writes a line as each call starts running.
    fn exec_log(&self, n: usize) -> PathBuf {
        exec_log(&self.mesh, n)
    }
}

/// MISSION H1, H2, F5 (three hosts, see the module doc): all ready; a partition of `h3` (its
/// peers leave ready within the 15 s deadline, `h1`-`h2` keep the very same connections, the
/// majority's etcd keeps serving, `h3` reports its store unreachable); healing (the same
/// generations, one connection per lane, nothing duplicated); etcd member `m1` killed with
/// SIGKILL (nobody leaves ready), and back.
#[tokio::test]
#[ignore = "multi-host tier: needs root and ip (network namespaces); run by name"]
async fn h1_h2_three_hosts_partition_heal_and_member_loss() {
    let mut tier = Tier::start("ph").await;
    let Tier {
        nodes,
        cluster,
        net,
        pki,
        mesh,
        keys,
        ..
    } = &mut tier;
    let (net, pki, mesh, keys): (&Net, &Pki, &Mesh, &[(KeyPair, PathBuf)]) = (net, pki, mesh, keys);

    // A partition: h3's cable pulled.
    let before = connections(&nodes[0], &["h2"]);
    let before_b = connections(&nodes[1], &["h1"]);
    let h3_generation = peer_generations(&nodes[0].status(), "h3");
    net.link(3, false);
    let cut = Instant::now();
    // h1, h2: h3 leaves ready; h3: its store is unreachable (its member has no quorum).
    let seen = wait_each(nodes, cut, "partitioned", |i, s| match i {
        2 => s["discovery"]["store_reachable"] == false,
        _ => none_ready(s, "h3"),
    })
    .await;
    let slowest = seen[..2].iter().max().copied().unwrap_or_default();
    println!(
        "partition: h1 and h2 saw h3 leave ready {} ms and {} ms after the cut; h3 reported \
         its store unreachable after {} ms",
        ms(seen[0]),
        ms(seen[1]),
        ms(seen[2])
    );
    assert!(
        slowest <= PEER_DEADLINE + Duration::from_secs(1),
        "h3 left ready {slowest:?} after the cut (deadline {PEER_DEADLINE:?})"
    );
    assert_eq!(
        connections(&nodes[0], &["h2"]),
        before,
        "h1-h2 kept working"
    );
    assert_eq!(
        connections(&nodes[1], &["h1"]),
        before_b,
        "h2-h1 kept working"
    );
    cluster
        .etcdctl(
            net,
            pki,
            1,
            Some("root:root-pw"),
            &["put", "/majority", "1"],
        )
        .expect("the majority's etcd keeps serving");
    assert!(
        cluster
            .etcdctl(
                net,
                pki,
                3,
                Some("root:root-pw"),
                &["put", "/minority", "1"]
            )
            .is_err(),
        "the minority's member cannot commit"
    );
    for p in &nodes[..2] {
        let s = p.status();
        assert_eq!(s["discovery"]["store_reachable"], true, "{}", p.rid);
    }

    // Heal.
    net.link(3, true);
    let healed = Instant::now();
    for (i, p) in nodes.iter().enumerate() {
        let n = i + 1;
        wait(p, "ready again with every peer", BOUND, |s| {
            ready_with(s, n, &others(n))
        })
        .await;
    }
    println!(
        "heal: every link ready again {} ms after the cable came back",
        ms(healed.elapsed())
    );
    for p in &nodes[..2] {
        let s = p.status();
        assert_eq!(peer_generations(&s, "h3"), h3_generation, "same generation");
        assert_eq!(ready_conns(&s, "h3").len(), 2, "one connection per lane");
        assert_eq!(
            s["discovery"]["descriptors_seen"], 2,
            "no duplicate descriptor"
        );
    }

    // The healed member serves again (it caught up with the leader) before the next fault:
    // a member killed now is one fault, not two.
    let caught_up = Instant::now();
    while let Err(e) = cluster.etcdctl(net, pki, 3, Some("root:root-pw"), &["put", "/healed", "1"])
    {
        assert!(
            caught_up.elapsed() < BOUND,
            "m3 did not serve again: {e}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "heal: etcd m3 serving again {} ms after the cable came back",
        ms(healed.elapsed())
    );

    // etcd member m1 (the one every node tries first) killed with SIGKILL.
    let steady: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let peers = others(i + 1);
            let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
            connections(p, &peers)
        })
        .collect();
    cluster.kill(1);
    let killed = Instant::now();
    // Through two renewals on the other members: nobody leaves ready meanwhile, and each
    // node renews its lease through another member.
    let mut renewed: Vec<Option<Duration>> = vec![None; nodes.len()];
    while killed.elapsed() < Duration::from_secs(10) || renewed.iter().any(Option::is_none) {
        assert!(
            killed.elapsed() < BOUND,
            "not every node renewed after the kill: {renewed:?}"
        );
        for (i, p) in nodes.iter().enumerate() {
            let peers = others(i + 1);
            let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
            let s = p.status();
            let now = connections_in(&s, &peers);
            assert_eq!(now, steady[i], "{} left ready", p.rid);
            let since_kill = killed.elapsed().as_millis() as u64;
            let fresh = s["discovery"]["lease"] == "held"
                && s["discovery"]["lease_age_ms"]
                    .as_u64()
                    .is_some_and(|a| a < since_kill);
            if fresh && renewed[i].is_none() {
                renewed[i] = Some(killed.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let renewed: Vec<u128> = renewed.into_iter().flatten().map(ms).collect();
    println!(
        "etcd m1 killed: no link left ready in {} ms; the nodes renewed through m2, m3 {renewed:?} ms after the kill",
        ms(killed.elapsed())
    );
    cluster.restart(net, pki, 1);
    println!(
        "etcd m1 back: serving {} ms after it was killed",
        ms(killed.elapsed())
    );

    // A call in flight across a partition: c2 (on h2) calls `work` on h3 for two minutes, h3
    // is cut off while it runs: the call fails as may-have-run once the connection leaves
    // ready at the deadline, never silently, and h3 did start it.
    let config = mesh.dir.path().join("c2.toml");
    std::fs::write(
        &config,
        toml::to_string(&caller_config(net, pki, keys)).expect("toml"),
    )
    .expect("write");
    let mut call = Command::new("ip")
        .args([
            "netns",
            "exec",
            net.host(2),
            env!("CARGO_BIN_EXE_zmesh"),
            "call",
        ])
        .arg("--config")
        .arg(&config)
        .args(["--channel", "orders", "--method", "work", "--peer", "h3"])
        .args(["--args", r#"["across", 120000]"#, "--wait-ms", "30000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("zmesh call");
    let started = Instant::now();
    let exec_log = exec_log(mesh, 3);
    while !std::fs::read_to_string(&exec_log)
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("work "))
    {
        assert!(started.elapsed() < BOUND, "h3 never started the call");
        assert!(
            call.try_wait().ok().flatten().is_none(),
            "the call ended before h3 ran it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    net.link(3, false);
    let cut = Instant::now();
    let status = loop {
        if let Some(status) = call.try_wait().expect("wait") {
            break status;
        }
        assert!(
            cut.elapsed() < BOUND,
            "the call did not end within {BOUND:?} of the cut"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let failed_after = cut.elapsed();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut call.stdout.take().expect("stdout"), &mut out)
        .expect("read");
    let answer: Value = serde_json::from_str(out.trim()).expect("the call's JSON");
    println!(
        "call across the partition: failed {} ms after the cut: {answer}",
        ms(failed_after)
    );
    assert!(!status.success(), "{answer}");
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["may_have_run"], true, "{answer}");
    assert!(
        failed_after <= PEER_DEADLINE + Duration::from_secs(1),
        "the call failed {failed_after:?} after the cut (deadline {PEER_DEADLINE:?})"
    );
    net.link(3, true);
}

/// MISSION H2, F3, F4 (three hosts): `h3`'s node killed with SIGKILL while its host is cut
/// off and started again there (a new generation), then the cable plugged back: `h1` and
/// `h2` never see the old generation again and become ready with the new run.
#[tokio::test]
#[ignore = "multi-host tier: needs root and ip (network namespaces); run by name"]
async fn h2_three_hosts_node_restarted_while_cut_off() {
    let mut tier = Tier::start("rs").await;
    let h3_generation = peer_generations(&tier.nodes[0].status(), "h3");
    tier.net.link(3, false);
    for p in &tier.nodes[..2] {
        wait(p, "without h3", BOUND, |s| none_ready(s, "h3")).await;
    }
    tier.nodes[2].kill9();
    tier.nodes.pop();
    let new_h3 = tier.start_node(3);
    tier.net.link(3, true);
    let healed = Instant::now();
    let mut new_generation = None;
    loop {
        let mut done = true;
        for p in &tier.nodes {
            let s = p.status();
            let gens = peer_generations(&s, "h3");
            assert!(
                !gens.iter().any(|g| h3_generation.contains(g)),
                "{}: the old generation of h3 came back",
                p.rid
            );
            if let Some(g) = gens.first() {
                new_generation.get_or_insert(*g);
            }
            done &= ready_conns(&s, "h3").len() == 2;
        }
        if done {
            break;
        }
        assert!(
            healed.elapsed() < BOUND,
            "h3's new run not ready within {BOUND:?}; h3: {}\nh1: {}",
            serde_json::to_string_pretty(&new_h3.status()).unwrap_or_default(),
            serde_json::to_string_pretty(&tier.nodes[0].status()).unwrap_or_default(),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait(&new_h3, "ready with h1, h2", BOUND, |s| {
        ready_with(s, 3, &others(3))
    })
    .await;
    println!(
        "restart: h3's new run ready with h1 and h2 {} ms after the heal; the old generation \
         never seen",
        ms(healed.elapsed())
    );
}
