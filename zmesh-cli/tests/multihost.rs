//! The multi-host tier (MISSION H1, H2, F5): three hosts made by the test as network
//! namespaces on one bridge (a fourth namespace holds the bridge, the "switch"), a
//! three-member etcd cluster with one member per host (TLS for clients and peers, client
//! certificates required, user/password authentication on), and a `zmesh node` per host, two
//! on `h3`'s host (`h3` and `h3b`), under CURVE in all three topologies, found through etcd:
//! every node is a RouteMesh server of `orders` and publishes fanout records, `h1` serves the
//! ClientServer channel `ledger` that the others are Object Clients of. Each node binds on
//! every interface and advertises its host's address (`[discovery.advertise]`).
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
use zmesh::runtime::store::ETCD_RESUME_BOUND;

use disc::{links_of, mesh_ready, peer_generations, ready_conns, Mesh, Proc};

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
        etcdctl_from(net, pki, n, n, user, args)
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

/// The tier's nodes, in the order of [`Tier::nodes`]: (RID, host). `h3b` is a second node on
/// `h3`'s host, so that the host that is cut off keeps links that still work: those between
/// its two nodes.
const NODES: [(&str, usize); 4] = [("h1", 1), ("h2", 2), ("h3", 3), ("h3b", 3)];

/// The index of `h3` in [`NODES`].
const H3: usize = 2;

/// The index of `h3b` in [`NODES`].
const H3B: usize = 3;

/// The host a partition cuts off.
const CUT_HOST: usize = 3;

/// The index of the caller `c2`'s key among the tier's keys (after the nodes' own).
const CALLER_KEY: usize = NODES.len();

/// The configuration of node `i` of [`NODES`].
fn node_config(net: &Net, pki: &Pki, keys: &[(KeyPair, PathBuf)], i: usize) -> NodeConfig {
    let (rid, host) = NODES[i];
    let mut c = NodeConfig::new(rid);
    c.memberships = vec![membership(Role::Server, "orders")];
    let mut bind = vec![AutoBind::RouteMesh, AutoBind::Publisher];
    if rid == "h1" {
        c.memberships.push(membership(Role::Server, "ledger"));
        bind.push(AutoBind::Server);
    } else {
        c.memberships.push(membership(Role::ObjectClient, "ledger"));
    }
    let members: Vec<String> = (1..=3).map(|m| format!("{}:2379", net.addr(m))).collect();
    let mut d = DiscoveryConfig::new(format!("etcd://{}{PREFIX}", members.join(",")));
    d.bind = bind;
    d.host = "0.0.0.0".into();
    d.advertise = Some(AdvertiseConfig::new(net.addr(host)));
    d.tls = Some(
        EtcdTlsConfig::new(pki.path("ca.pem"))
            .client_cert(pki.path("client.pem"), pki.path("client-key.pem")),
    );
    d.auth = Some(EtcdAuthConfig::with_password_file(
        "zmesh",
        pki.path("etcd-password"),
    ));
    c.discovery = Some(d);
    c.security = SecurityConfig::curve(&keys[i].1).allow(keys.iter().map(|(k, _)| k.public));
    c
}

/// The configuration of the caller `c2`, a node of host 2: an Object Client of `orders`, so
/// it is dialled by every Server of it, and publishes and subscribes to nothing.
fn caller_config(net: &Net, pki: &Pki, keys: &[(KeyPair, PathBuf)]) -> NodeConfig {
    let mut c = node_config(net, pki, keys, 1);
    c.rid = "c2".into();
    c.memberships = vec![membership(Role::ObjectClient, "orders")];
    if let Some(d) = c.discovery.as_mut() {
        d.bind = vec![AutoBind::RouteMesh];
        d.subscribe = false;
        d.client_server = false;
    }
    c.security.secret_key_file = Some(keys[CALLER_KEY].1.clone());
    c
}

/// [`Tier::exec_log`] of the tier whose nodes `mesh` starts.
fn exec_log(mesh: &Mesh, rid: &str) -> PathBuf {
    mesh.dir.path().join(format!("{rid}.exec"))
}

/// The RIDs of every node of the tier but `rid`.
fn others(rid: &str) -> Vec<&'static str> {
    NODES
        .iter()
        .map(|(r, _)| *r)
        .filter(|r| *r != rid)
        .collect()
}

/// The RIDs of the nodes on the same side of a cut of [`CUT_HOST`] as node `i` (`near`) and
/// on the other side (`far`), `i` itself in neither.
fn sides(i: usize) -> (Vec<&'static str>, Vec<&'static str>) {
    let cut_off = |j: usize| NODES[j].1 == CUT_HOST;
    let (near, far): (Vec<usize>, Vec<usize>) = (0..NODES.len())
        .filter(|j| *j != i)
        .partition(|j| cut_off(*j) == cut_off(i));
    let rids = |v: Vec<usize>| v.into_iter().map(|j| NODES[j].0).collect();
    (rids(near), rids(far))
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

/// Node `rid` is ready in every topology with every peer in `peers`: both RouteMesh lanes,
/// one connection each; a SUB socket ready per publisher; for every node but `h1`, the
/// `ledger` server `h1` when it is among `peers`. Every link proven by CURVE.
fn ready_with(s: &Value, rid: &str, peers: &[&str]) -> bool {
    let mesh = mesh_ready(s, peers) && peers.iter().all(|p| ready_conns(s, p).len() == 2);
    let subs = links(s, "fanout").filter(|l| ready(l)).count() == peers.len();
    let cs = rid == "h1"
        || !peers.contains(&"h1")
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

/// The generations of `peer` on the ready RouteMesh links of `s`.
fn generations(s: &Value, peer: &str) -> BTreeSet<u64> {
    peer_generations(s, peer).into_iter().collect()
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

/// One ready RouteMesh connection: (peer, role, connection id, the peer's generations on its
/// ready links, times the link became ready). Unchanged, it is the same connection that never
/// left ready in between.
type Conn = (String, String, u64, BTreeSet<u64>, u64);

/// Every ready connection of node `p`'s RouteMesh links to `peers`: what must not change
/// while a link is said to keep working.
fn connections(p: &Proc, peers: &[&str]) -> BTreeSet<Conn> {
    connections_in(&p.status(), peers)
}

/// [`connections`] in the snapshot `s`.
fn connections_in(s: &Value, peers: &[&str]) -> BTreeSet<Conn> {
    peers
        .iter()
        .flat_map(|peer| {
            let gens = generations(s, peer);
            links_of(s, peer).filter(|l| ready(l)).filter_map(move |l| {
                Some((
                    (*peer).to_owned(),
                    l["role"].as_str()?.to_owned(),
                    common::hex_id(&l["connection_id"])?,
                    gens.clone(),
                    l["ready_count"].as_u64()?,
                ))
            })
        })
        .collect()
}

/// The fanout publisher endpoint node `s` advertises in its descriptor.
fn publisher_of(s: &Value) -> String {
    s["discovery"]["descriptor"]["publishers"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no publisher in {}", s["discovery"]["descriptor"]))
        .to_owned()
}

/// A fanout subscription: (state, connection id, times it became ready). Unchanged, it is the
/// same connection that never left ready in between.
type Sub = (String, Option<u64>, u64);

/// Node `s`'s subscription to the publisher `endpoint`, and the age of its last receive in ms.
fn subscription(s: &Value, endpoint: &str) -> (Sub, Option<u64>) {
    let l = links(s, "fanout")
        .find(|l| l["endpoint"] == endpoint)
        .unwrap_or_else(|| panic!("{}: no subscription to {endpoint}", s["rid"]));
    (
        (
            l["state"].as_str().unwrap_or_default().to_owned(),
            common::hex_id(&l["connection_id"]),
            l["ready_count"].as_u64().unwrap_or_default(),
        ),
        l["last_receive_age_ms"].as_u64(),
    )
}

/// Lines of the node log that open and close a store outage.
const OUTAGE_LINES: [&str; 2] = ["store unreachable", "store reachable again"];

/// `etcdctl` in host `from`, to member `to`, as `user` if given.
fn etcdctl_from(
    net: &Net,
    pki: &Pki,
    from: usize,
    to: usize,
    user: Option<&str>,
    args: &[&str],
) -> Result<String, String> {
    let out = etcdctl_command(net, pki, from, to, user, args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The command of [`etcdctl_from`], to run as often as needed.
fn etcdctl_command(
    net: &Net,
    pki: &Pki,
    from: usize,
    to: usize,
    user: Option<&str>,
    args: &[&str],
) -> Command {
    let s = |f: &str| pki.path(f).display().to_string();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", net.host(from)])
        .arg(etcd_binary().with_file_name("etcdctl"))
        .args(["--endpoints", &format!("https://{}:2379", net.addr(to))])
        .args(["--cacert", &s("ca.pem"), "--cert", &s("admin.pem")])
        .args(["--key", &s("admin-key.pem"), "--command-timeout", "2s"]);
    if let Some(u) = user {
        cmd.args(["--user", u]);
    }
    cmd.args(args).env("ETCDCTL_API", "3");
    cmd
}

/// A running tier: the network, the etcd cluster and the nodes of [`NODES`], all ready. Its
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
        // The nodes' keys in the order of NODES, then the caller c2's.
        let keys: Vec<(KeyPair, PathBuf)> = (0..=CALLER_KEY)
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
        tier.nodes = (0..NODES.len()).map(|i| tier.start_node(i)).collect();
        for (p, (rid, _)) in tier.nodes.iter().zip(NODES) {
            wait(p, "ready in all three topologies", BOUND, |s| {
                ready_with(s, rid, &others(rid))
            })
            .await;
        }
        println!(
            "{tag}: all ready {} ms after the four nodes (two on h3's host) started",
            ms(t0.elapsed())
        );
        tier
    }

    /// Starts node `i` of [`NODES`] (a new process run) in its host: it serves the demo
    /// service on `orders` and logs each call it starts running to [`Tier::exec_log`].
    fn start_node(&self, i: usize) -> Proc {
        let (rid, host) = NODES[i];
        let cfg = node_config(&self.net, &self.pki, &self.keys, i);
        let log = self.exec_log(rid).display().to_string();
        self.mesh.spawn_in(
            &cfg,
            self.net.host(host),
            &["--serve", "orders", "--exec-log", &log],
        )
    }

    /// The file where node `rid` writes a line as each call starts running.
    fn exec_log(&self, rid: &str) -> PathBuf {
        exec_log(&self.mesh, rid)
    }
}

/// What a partition of [`CUT_HOST`] must leave as it was, taken before the cut.
struct Before {
    /// Per node: its ready RouteMesh connections to the nodes on its side of the cut.
    near: Vec<BTreeSet<Conn>>,
    /// Per node: the generation of every other node on its links.
    generations: Vec<Vec<BTreeSet<u64>>>,
    /// `h3`'s subscription to `h3b`'s publisher and `h3b`'s to `h3`'s: the endpoint and
    /// (state, connection id, times it became ready).
    subs: Vec<(usize, String, Sub)>,
    /// Per node: how many lines of [`OUTAGE_LINES`] its log holds.
    outage_lines: Vec<[usize; 2]>,
}

impl Before {
    fn take(nodes: &[Proc]) -> Before {
        let snaps: Vec<Value> = nodes.iter().map(Proc::status).collect();
        let near = (0..nodes.len())
            .map(|i| connections_in(&snaps[i], &sides(i).0))
            .collect();
        let generations = (0..nodes.len())
            .map(|i| {
                let rid = NODES[i].0;
                others(rid)
                    .iter()
                    .map(|p| generations(&snaps[i], p))
                    .collect()
            })
            .collect();
        let subs = [(H3, H3B), (H3B, H3)]
            .into_iter()
            .map(|(i, of)| {
                let endpoint = publisher_of(&snaps[of]);
                let (sub, _) = subscription(&snaps[i], &endpoint);
                assert_eq!(sub.0, "ready", "{}: {endpoint}", nodes[i].rid);
                (i, endpoint, sub)
            })
            .collect();
        let outage_lines = nodes
            .iter()
            .map(|p| OUTAGE_LINES.map(|l| p.log_lines(l).len()))
            .collect();
        Before {
            near,
            generations,
            subs,
            outage_lines,
        }
    }
}

/// Times from the cut, per node, as a partition scene first saw them.
#[derive(Default, Clone)]
struct Seen {
    /// Each node on the other side of the cut (in the order of [`sides`]) left ready.
    far_gone: Vec<Option<Duration>>,
    /// The store reported unreachable (the cut-off host's nodes only).
    unreachable: Option<Duration>,
    /// A beacon of the other node on the host arrived after the cut (the cut-off host's).
    beacon: Option<Duration>,
}

/// A partition: [`CUT_HOST`]'s cable pulled. Polls every node through the cut: the nodes on
/// each side see those on the other leave ready within the deadline, and keep the very same
/// connections to those on their own side at every poll (`h3`-`h3b` included, and their
/// subscriptions to each other, over which beacons go on arriving); `h3` and `h3b` report
/// their store unreachable (their member has no quorum); the majority's etcd keeps serving,
/// the minority's member cannot commit. Returns what the cut had to keep, for the heal.
async fn partition(tier: &Tier) -> Before {
    let nodes = &tier.nodes;
    let before = Before::take(nodes);
    tier.net.link(CUT_HOST, false);
    let cut = Instant::now();
    let mut seen: Vec<Seen> = (0..nodes.len())
        .map(|i| Seen {
            far_gone: vec![None; sides(i).1.len()],
            ..Seen::default()
        })
        .collect();
    let cut_off = |i: usize| NODES[i].1 == CUT_HOST;
    loop {
        let snaps: Vec<Value> = nodes.iter().map(Proc::status).collect();
        let at = cut.elapsed();
        for (i, s) in snaps.iter().enumerate() {
            let (near, far) = sides(i);
            assert_eq!(
                connections_in(s, &near),
                before.near[i],
                "{}: a link to {near:?} changed during the cut",
                nodes[i].rid
            );
            for (gone, peer) in seen[i].far_gone.iter_mut().zip(&far) {
                if gone.is_none() && none_ready(s, peer) {
                    *gone = Some(at);
                }
            }
            if cut_off(i)
                && seen[i].unreachable.is_none()
                && s["discovery"]["store_reachable"] == false
            {
                seen[i].unreachable = Some(at);
            }
        }
        for (i, endpoint, sub) in &before.subs {
            let (now, age) = subscription(&snaps[*i], endpoint);
            assert_eq!(
                &now, sub,
                "{}: its subscription to {endpoint} changed",
                nodes[*i].rid
            );
            // A receive younger than the cut: a beacon that crossed after it.
            if seen[*i].beacon.is_none() && age.is_some_and(|a| u128::from(a) < ms(at)) {
                seen[*i].beacon = Some(at);
            }
        }
        let done = seen.iter().enumerate().all(|(i, v)| {
            v.far_gone.iter().all(Option::is_some)
                && (!cut_off(i) || (v.unreachable.is_some() && v.beacon.is_some()))
        });
        if done {
            break;
        }
        assert!(
            cut.elapsed() < BOUND,
            "not every verdict of the cut within {BOUND:?}: {:?}",
            seen.iter()
                .map(|v| (&v.far_gone, v.unreachable, v.beacon))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report_partition(tier, &seen);
    before
}

/// Prints the figures of a partition, checks its deadline, and checks the store on both sides.
fn report_partition(tier: &Tier, seen: &[Seen]) {
    let (nodes, cluster, net, pki) = (&tier.nodes, &tier.cluster, &tier.net, &tier.pki);
    for (i, v) in seen.iter().enumerate() {
        let (near, far) = sides(i);
        let gone: Vec<String> = far
            .iter()
            .zip(&v.far_gone)
            .map(|(p, t)| format!("{p} {} ms", t.map_or(0, ms)))
            .collect();
        let mut line = format!(
            "partition: {} saw {} leave ready after the cut; the same connections to {} throughout",
            nodes[i].rid,
            gone.join(", "),
            near.join(", ")
        );
        if let (Some(u), Some(b)) = (v.unreachable, v.beacon) {
            line.push_str(&format!(
                "; store unreachable after {} ms; a beacon of {} arrived {} ms after the cut",
                ms(u),
                near.join(", "),
                ms(b)
            ));
        }
        println!("{line}");
        let slowest = v
            .far_gone
            .iter()
            .flatten()
            .max()
            .copied()
            .unwrap_or_default();
        assert!(
            slowest <= PEER_DEADLINE + Duration::from_secs(1),
            "{}: {far:?} left ready {slowest:?} after the cut (deadline {PEER_DEADLINE:?})",
            nodes[i].rid
        );
    }
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
                CUT_HOST,
                Some("root:root-pw"),
                &["put", "/minority", "1"]
            )
            .is_err(),
        "the minority's member cannot commit"
    );
    for (p, (_, host)) in nodes.iter().zip(NODES) {
        if host != CUT_HOST {
            let s = p.status();
            assert_eq!(s["discovery"]["store_reachable"], true, "{}", p.rid);
        }
    }
}

/// Heal: the cable plugged back. Every link ready again, every node under the generation it
/// had before the cut, one connection per lane; the links that kept working are still the
/// same connections, the cut-off host's subscriptions to each other too; the cut-off member
/// serves again, `h3` and `h3b` report their store reachable and logged the outage with one
/// line as it began and one as it ended; no descriptor twice.
async fn heal(tier: &Tier, before: &Before) {
    let (nodes, cluster, net, pki) = (&tier.nodes, &tier.cluster, &tier.net, &tier.pki);
    // The first answer of the majority to the cut-off host: m1 asked from inside it.
    let mut ask = etcdctl_command(
        net,
        pki,
        CUT_HOST,
        1,
        Some("root:root-pw"),
        &["get", "/majority"],
    );
    net.link(CUT_HOST, true);
    let healed = Instant::now();
    let majority = std::thread::spawn(move || loop {
        if ask.output().is_ok_and(|o| o.status.success()) {
            return Some(healed.elapsed());
        }
        if healed.elapsed() > BOUND {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    });
    // Per node: every link ready again; the store back (reachable, the lease held: the
    // descriptor published again) on the cut-off host's nodes.
    let mut ready: Vec<Option<Duration>> = vec![None; nodes.len()];
    let mut store_back: Vec<Option<Duration>> = vec![None; nodes.len()];
    loop {
        for (i, p) in nodes.iter().enumerate() {
            let s = p.status();
            let at = healed.elapsed();
            let rid = NODES[i].0;
            if ready[i].is_none() && ready_with(&s, rid, &others(rid)) {
                ready[i] = Some(at);
            }
            if NODES[i].1 == CUT_HOST
                && store_back[i].is_none()
                && s["discovery"]["store_reachable"] == true
                && s["discovery"]["lease"] == "held"
            {
                store_back[i] = Some(at);
            }
        }
        let done = ready.iter().all(Option::is_some)
            && (0..nodes.len()).all(|i| NODES[i].1 != CUT_HOST || store_back[i].is_some());
        if done {
            break;
        }
        assert!(
            healed.elapsed() < BOUND,
            "not ready again, or the store not back, within {BOUND:?}: {ready:?} {store_back:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let majority = majority
        .join()
        .ok()
        .flatten()
        .expect("m1 answers the cut-off host after the heal");
    let slowest = ready.iter().flatten().max().copied().unwrap_or_default();
    println!(
        "heal: every link ready again {} ms after the cable came back",
        ms(slowest)
    );
    let back: Vec<String> = (0..nodes.len())
        .filter_map(|i| store_back[i].map(|t| (i, t)))
        .map(|(i, t)| {
            format!(
                "{} {} ms ({} ms after m1 answered)",
                nodes[i].rid,
                ms(t),
                ms(t.saturating_sub(majority))
            )
        })
        .collect();
    println!(
        "heal: etcd m1 answering h3's host {} ms after the cable came back; store back after \
         heal (reachable, the lease held): {}",
        ms(majority),
        back.join(", ")
    );
    // The cut-off nodes publish again within the stated bound of the majority answering.
    for (i, t) in store_back.iter().enumerate() {
        if let Some(t) = t {
            assert!(
                t.saturating_sub(majority) <= ETCD_RESUME_BOUND,
                "{}: store back {t:?} after the heal, m1 answered after {majority:?} (bound \
                 {ETCD_RESUME_BOUND:?})",
                nodes[i].rid
            );
        }
    }
    let snaps: Vec<Value> = nodes.iter().map(Proc::status).collect();
    for (i, s) in snaps.iter().enumerate() {
        let rid = NODES[i].0;
        for (peer, gens) in others(rid).iter().zip(&before.generations[i]) {
            assert_eq!(
                &generations(s, peer),
                gens,
                "{rid}: the generation of {peer}"
            );
            assert_eq!(
                ready_conns(s, peer).len(),
                2,
                "{rid}: one connection per lane to {peer}"
            );
        }
        assert_eq!(
            connections_in(s, &sides(i).0),
            before.near[i],
            "{rid}: kept links"
        );
    }
    for (i, endpoint, sub) in &before.subs {
        assert_eq!(
            &subscription(&snaps[*i], endpoint).0,
            sub,
            "{}",
            nodes[*i].rid
        );
    }

    // The healed member serves again (it caught up with the leader) before the next fault:
    // a member killed now is one fault, not two.
    while let Err(e) = cluster.etcdctl(
        net,
        pki,
        CUT_HOST,
        Some("root:root-pw"),
        &["put", "/healed", "1"],
    ) {
        assert!(
            healed.elapsed() < BOUND,
            "m3 did not serve again: {e}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let serving = healed.elapsed();
    for (i, p) in nodes.iter().enumerate() {
        wait(
            p,
            "its store reachable, every descriptor known once",
            BOUND,
            |s| {
                s["discovery"]["store_reachable"] == true
                    && s["discovery"]["descriptors_seen"] == NODES.len() - 1
            },
        )
        .await;
        let s = p.status();
        assert_eq!(s["discovery"]["lease"], "held", "{}", p.rid);
        if NODES[i].1 == CUT_HOST {
            let lines = OUTAGE_LINES.map(|l| p.log_lines(l).len());
            let [down, up] = before.outage_lines[i];
            assert_eq!(
                lines,
                [down + 1, up + 1],
                "{}: one log line each way",
                p.rid
            );
        }
    }
    println!(
        "heal: etcd m3 serving again {} ms after the cable came back",
        ms(serving)
    );
}

/// etcd member `m1` (the one every node tries first) killed with SIGKILL: through two
/// renewals on the other members nobody leaves ready, no node reports its store unreachable,
/// and each node renews its lease through another member; `m1` is started again on its data
/// dir.
async fn member_loss(tier: &mut Tier) {
    let steady: Vec<_> = tier
        .nodes
        .iter()
        .zip(NODES)
        .map(|(p, (rid, _))| connections(p, &others(rid)))
        .collect();
    tier.cluster.kill(1);
    let killed = Instant::now();
    let mut renewed: Vec<Option<Duration>> = vec![None; tier.nodes.len()];
    while killed.elapsed() < Duration::from_secs(10) || renewed.iter().any(Option::is_none) {
        assert!(
            killed.elapsed() < BOUND,
            "not every node renewed after the kill: {renewed:?}"
        );
        for (i, p) in tier.nodes.iter().enumerate() {
            let s = p.status();
            let now = connections_in(&s, &others(NODES[i].0));
            assert_eq!(now, steady[i], "{} left ready", p.rid);
            // Two members of three still serve: the store never counts as unreachable (the
            // watch on m1 is opened again on another member at once).
            assert_eq!(
                s["discovery"]["store_reachable"], true,
                "{}: the store unreachable after m1 was killed",
                p.rid
            );
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
    tier.cluster.restart(&tier.net, &tier.pki, 1);
    println!(
        "etcd m1 back: serving {} ms after it was killed",
        ms(killed.elapsed())
    );
}

/// A call in flight across a partition: `c2` (on `h2`) calls `work` on `h3` for two minutes,
/// `h3`'s host is cut off while it runs: the call fails as may-have-run once the connection
/// leaves ready at the deadline, never silently, and `h3` did start it.
async fn call_across_partition(tier: &Tier) {
    let (net, pki, mesh, keys) = (&tier.net, &tier.pki, &tier.mesh, &tier.keys);
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
    let exec_log = tier.exec_log("h3");
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
    net.link(CUT_HOST, false);
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
    net.link(CUT_HOST, true);
}

/// MISSION H1, H2, F5 (three hosts, see the module doc): all ready; a partition of `h3`'s
/// host (each side sees the other leave ready within the 15 s deadline and keeps the very same
/// connections within itself, `h3`-`h3b` on the cut-off host included; the majority's etcd
/// keeps serving; `h3` and `h3b` report their store unreachable); healing (the same
/// generations, one connection per lane, nothing duplicated, the outage logged once each
/// way); etcd member `m1` killed with SIGKILL (nobody leaves ready), and back; a call in
/// flight across a partition.
#[tokio::test]
#[ignore = "multi-host tier: needs root and ip (network namespaces); run by name"]
async fn h1_h2_f5_three_hosts_partition_heal_and_member_loss() {
    let mut tier = Tier::start("ph").await;
    let before = partition(&tier).await;
    heal(&tier, &before).await;
    member_loss(&mut tier).await;
    call_across_partition(&tier).await;
}

/// MISSION H2, F3, F4 (three hosts): `h3`'s node killed with SIGKILL while its host is cut
/// off and started again there (a new generation), then the cable plugged back: `h1`, `h2`
/// and `h3b` (on `h3`'s host, which sees the killed run's connections end at once) never see
/// the old generation again and become ready with the new run.
#[tokio::test]
#[ignore = "multi-host tier: needs root and ip (network namespaces); run by name"]
async fn h2_f3_f4_three_hosts_node_restarted_while_cut_off() {
    let mut tier = Tier::start("rs").await;
    let h3_generation = generations(&tier.nodes[0].status(), "h3");
    tier.net.link(CUT_HOST, false);
    for p in &tier.nodes[..2] {
        wait(p, "without h3", BOUND, |s| none_ready(s, "h3")).await;
    }
    tier.nodes[H3].kill9();
    let gone = wait(&tier.nodes[H3B], "without h3's killed run", BOUND, |s| {
        none_ready(s, "h3")
    })
    .await;
    let new_h3 = tier.start_node(H3);
    tier.nodes[H3] = new_h3;
    tier.net.link(CUT_HOST, true);
    let healed = Instant::now();
    loop {
        let mut done = true;
        let others = tier.nodes.iter().enumerate().filter(|(i, _)| *i != H3);
        for p in others.map(|(_, p)| p) {
            let s = p.status();
            assert!(
                generations(&s, "h3").is_disjoint(&h3_generation),
                "{}: the old generation of h3 came back",
                p.rid
            );
            done &= ready_conns(&s, "h3").len() == 2;
        }
        if done {
            break;
        }
        assert!(
            healed.elapsed() < BOUND,
            "h3's new run not ready within {BOUND:?}; h3: {}\nh1: {}",
            serde_json::to_string_pretty(&tier.nodes[H3].status()).unwrap_or_default(),
            serde_json::to_string_pretty(&tier.nodes[0].status()).unwrap_or_default(),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait(&tier.nodes[H3], "ready with h1, h2, h3b", BOUND, |s| {
        ready_with(s, "h3", &others("h3"))
    })
    .await;
    println!(
        "restart: h3b saw h3's killed run leave ready {} ms after the kill; h3's new run ready \
         with h1, h2 and h3b {} ms after the heal; the old generation never seen",
        ms(gone),
        ms(healed.elapsed())
    );
}
