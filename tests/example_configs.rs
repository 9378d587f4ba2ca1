//! The configuration documents cannot rot:
//! - every file under `examples/config/` loads with `NodeConfig::from_file`, holds what its
//!   comments say, and fits its counterpart (the dialler's endpoints are the acceptor's, the
//!   client's server is the server, the subscriber's publisher is the publisher);
//! - README's "Configuration" section lists every key of `NodeConfig`, and its complete
//!   example loads and sets every key.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use zmesh::config::{
    Endpoint, NodeConfig, PeerConfig, RouteMeshBind, SecurityConfig, SecurityMode, ServerConfig,
};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::proto::security::PublicKey;
use zmesh::runtime::security::{load_allow_list, KeyPair};

const README: &str = include_str!("../README.md");

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config")
}

fn load(name: &str) -> NodeConfig {
    let path = config_dir().join(name);
    NodeConfig::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn membership(role: Role, channel: &str) -> Membership {
    Membership {
        role,
        channel: channel.into(),
    }
}

/// Every example config loads; the set of files is exactly the one checked here.
#[test]
fn every_example_config_loads() {
    let found: BTreeSet<String> = std::fs::read_dir(config_dir())
        .expect("examples/config")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = [
        "client_server_client.toml",
        "client_server_server.toml",
        "fanout_pub.toml",
        "fanout_sub.toml",
        "route_mesh_a.toml",
        "route_mesh_b.toml",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        found, expected,
        "a new example config needs its checks in this test"
    );
    for name in &found {
        load(name);
    }
}

/// RouteMesh: `a` (Server of orders) dials `b` (Object Client of orders) on b's two lanes and
/// pins b's security identity, which `b` announces.
#[test]
fn route_mesh_examples_fit_each_other() {
    let a = load("route_mesh_a.toml");
    let b = load("route_mesh_b.toml");
    assert_eq!(a.rid, "a");
    assert_eq!(a.memberships, vec![membership(Role::Server, "orders")]);
    assert_eq!(a.security_identity(), "a", "default: the rid");
    assert_eq!(
        b.memberships,
        vec![membership(Role::ObjectClient, "orders")]
    );
    assert!(b.peers.is_empty(), "b only accepts");
    let [peer] = a.peers.as_slice() else {
        panic!("a dials one peer: {:?}", a.peers)
    };
    let bind = b.route_mesh.as_ref().expect("b accepts RouteMesh peers");
    assert_eq!(peer.rid, b.rid);
    assert_eq!(peer.application, bind.application);
    assert_eq!(peer.completion, bind.completion);
    assert_eq!(
        peer.security_identity.as_deref(),
        Some(b.security_identity())
    );
    assert_eq!(peer.generation, None);
    assert!(peer.batch_calls, "default true");
    let a_bind = a.route_mesh.as_ref().expect("a accepts too");
    assert_ne!(a_bind.application, bind.application);
}

/// ClientServer: the client's server entry is the server's endpoint, RID and served channel.
#[test]
fn client_server_examples_fit_each_other() {
    let srv = load("client_server_server.toml");
    let cli = load("client_server_client.toml");
    let endpoint = &srv.server.as_ref().expect("a server endpoint").endpoint;
    let [server] = cli.servers.as_slice() else {
        panic!("one server: {:?}", cli.servers)
    };
    assert_eq!(&server.endpoint, endpoint);
    assert_eq!(server.rid.as_deref(), Some(srv.rid.as_str()));
    assert!(srv
        .memberships
        .contains(&membership(Role::Server, &server.channel)));
    assert!(server.batch_calls);
    assert!(cli.route_mesh.is_none() && cli.server.is_none());
    // CURVE: the client expects the server's key, and the server allows the client's.
    let pair = |c: &NodeConfig| {
        assert_eq!(c.security.mode, SecurityMode::Curve);
        let path = c.security.secret_key_file.as_ref().expect("a key file");
        KeyPair::read(path).unwrap_or_else(|e| panic!("{e}"))
    };
    let (srv_keys, cli_keys) = (pair(&srv), pair(&cli));
    assert_eq!(cli.security.endpoint_key(endpoint), Some(srv_keys.public));
    let allowed = load_allow_list(&srv.security).expect("the server's allow-list");
    assert!(allowed.contains(&cli_keys.public), "{allowed:?}");
}

/// Fanout: the subscriber subscribes to the publisher's endpoint.
#[test]
fn fanout_examples_fit_each_other() {
    let publisher = load("fanout_pub.toml");
    let subscriber = load("fanout_sub.toml");
    let endpoint = &publisher.publisher.as_ref().expect("a publisher").endpoint;
    assert_eq!(
        subscriber.subscriptions,
        vec![Endpoint::new(endpoint.clone())]
    );
    assert_eq!(subscriber.delivery_high_water, 65_536, "the default");
}

/// README's "Configuration" section (up to the next `## ` heading).
fn readme_configuration() -> &'static str {
    let start = README
        .find("\n## Configuration\n")
        .expect("README has a Configuration section");
    let rest = &README[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The `toml` block of README's Configuration section.
fn readme_example() -> &'static str {
    let section = readme_configuration();
    let start = section.find("```toml\n").expect("a toml example") + "```toml\n".len();
    let len = section[start..].find("```").expect("end of the example");
    &section[start..start + len]
}

/// A configuration with every optional key set and one entry in every list. Every field is
/// assigned, in declaration order: `src/config/tests.rs` (`every_field_is_named`) names them
/// all, so that a field added there is added here too.
fn every_key() -> NodeConfig {
    let mut c = NodeConfig::new("a");
    c.security_identity = Some("s".into());
    c.memberships = vec![membership(Role::Server, "c")];
    c.route_mesh = Some(RouteMeshBind::new("tcp://127.0.0.1:1", "tcp://127.0.0.1:2"));
    c.server = Some(Endpoint::new("tcp://127.0.0.1:3"));
    c.publisher = Some(Endpoint::new("tcp://127.0.0.1:4"));
    c.peers = vec![
        PeerConfig::new("b", "tcp://127.0.0.1:5", "tcp://127.0.0.1:6")
            .generation(1)
            .security_identity("t"),
    ];
    c.servers = vec![ServerConfig::new("c", "tcp://127.0.0.1:7").rid("d")];
    c.subscriptions = vec![Endpoint::new("tcp://127.0.0.1:8")];
    c.delivery_high_water = 1;
    c.operations_keep = 1;
    c.max_frame_size = 1 << 20;
    c.max_unadmitted = 1;
    c.discovery = Some(zmesh::config::DiscoveryConfig::new("sqlite:///tmp/x.db"));
    let mut security = SecurityConfig::curve("a.key")
        .allow([key(1)])
        .allow_dir("/etc/zmesh/allowed");
    for port in 5..=8 {
        security = security.expect_key(format!("tcp://127.0.0.1:{port}"), key(2));
    }
    assert_eq!(security.mode, SecurityMode::Curve);
    c.security = security;
    c
}

/// A public key of `n`s.
fn key(n: u8) -> PublicKey {
    PublicKey::from_bytes([n; 32])
}

/// The keys of a TOML value as `parent.key` paths (array entries share their array's path).
fn key_paths(value: &toml::Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        // A map whose keys are data (endpoints), not configuration keys.
        toml::Value::Table(_) if prefix == "security.endpoint_keys" => {}
        toml::Value::Table(t) => {
            for (k, v) in t {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(path.clone());
                key_paths(v, &path, out);
            }
        }
        toml::Value::Array(items) => {
            for item in items {
                key_paths(item, prefix, out);
            }
        }
        _ => {}
    }
}

fn keys_of(config: &NodeConfig) -> BTreeSet<String> {
    let value = toml::Value::try_from(config).expect("a config serialises");
    let mut keys = BTreeSet::new();
    key_paths(&value, "", &mut keys);
    keys
}

/// Every key of `NodeConfig` has its row in README's table: `key`, `[key]` or `[[key]]` in the
/// first cell of a row, and a nested key as `parent.key` in the first cell of a row or named in
/// its parent's row.
#[test]
fn readme_configuration_lists_every_key() {
    let section = readme_configuration();
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| `")).collect();
    let first_cell = |row: &str| row.split('|').nth(1).unwrap_or_default().to_owned();
    let row_of = |key: &str| {
        rows.iter().copied().find(|r| {
            let cell = first_cell(r);
            [
                format!("`{key}`"),
                format!("`[{key}]`"),
                format!("`[[{key}]]`"),
            ]
            .iter()
            .any(|name| cell.contains(name.as_str()))
        })
    };
    let keys = keys_of(&every_key());
    assert!(keys.len() > 20, "{keys:?}");
    for key in &keys {
        let documented = match key.rsplit_once('.') {
            None => row_of(key).is_some(),
            Some((parent, child)) => {
                row_of(key).is_some()
                    || row_of(parent).is_some_and(|r| r.contains(&format!("`{child}`")))
            }
        };
        assert!(documented, "README's Configuration table lacks `{key}`");
    }
}

/// README's complete example loads and sets every key there is.
#[test]
fn readme_configuration_example_is_complete() {
    let c = NodeConfig::from_toml(readme_example()).expect("README's example loads");
    assert_eq!(keys_of(&c), keys_of(&every_key()), "keys the example sets");
    assert_eq!(c.rid, "node-a");
    assert_eq!(
        c.security_identity(),
        "qDxqdleXFUi{{dV{a]?R3=>J43</t]JR0$iWcFhr"
    );
    assert_eq!(c.memberships.len(), 2);
    let node_b = ">ayA%{O)eKCErry6-)b@uXg9>&p*#<t9=iNgSwtU";
    assert_eq!(c.peers[0].security_identity.as_deref(), Some(node_b));
    assert_eq!(c.security.mode, SecurityMode::Curve);
    assert_eq!(
        c.security
            .endpoint_key(&c.peers[0].completion)
            .map(|k| k.to_z85()),
        Some(node_b.to_owned())
    );
    assert_eq!(c.peers[0].generation, Some(0));
    assert!(c.peers[0].batch_calls && c.servers[0].batch_calls);
    assert_eq!(c.servers[0].rid.as_deref(), Some("billing-1"));
    assert_eq!(c.subscriptions.len(), 1);
}

/// The defaults README states.
#[test]
fn readme_configuration_defaults_hold() {
    let c = NodeConfig::from_toml(
        "rid = \"n\"\n[[peers]]\nrid = \"p\"\napplication = \"tcp://127.0.0.1:1\"\n\
         completion = \"tcp://127.0.0.1:2\"\n[[servers]]\nchannel = \"c\"\n\
         endpoint = \"tcp://127.0.0.1:3\"\n[security]\nmode = \"none\"\n",
    )
    .expect("minimal");
    assert_eq!(c.security_identity(), "n");
    assert!(c.memberships.is_empty());
    assert_eq!(c.delivery_high_water, 65_536);
    assert_eq!(c.operations_keep, 1000);
    assert_eq!(c.max_frame_size, 16 << 20);
    assert_eq!(c.max_unadmitted, 256);
    assert!(c.route_mesh.is_none() && c.server.is_none() && c.publisher.is_none());
    assert_eq!(c.peers[0].generation, None);
    assert_eq!(c.peers[0].security_identity, None);
    assert!(c.peers[0].batch_calls);
    assert_eq!(c.servers[0].rid, None);
    assert!(c.servers[0].batch_calls);
    assert_eq!(c.security, SecurityConfig::default());
    // [security] is required in a file, and names its mode.
    for text in ["rid = \"n\"\n", "rid = \"n\"\n[security]\n"] {
        assert!(NodeConfig::from_toml(text).is_err(), "{text:?}");
    }
    // Unknown keys are an error; TOML integers stop at 2^63 - 1.
    assert!(NodeConfig::from_toml("rid = \"n\"\nprobe_interval = 5\n").is_err());
    let big = "rid = \"n\"\n[[peers]]\nrid = \"p\"\napplication = \"tcp://127.0.0.1:1\"\n\
               completion = \"tcp://127.0.0.1:2\"\ngeneration = 9223372036854775808\n";
    assert!(NodeConfig::from_toml(big).is_err());
}
