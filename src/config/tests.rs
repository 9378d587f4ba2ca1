use std::path::PathBuf;

use super::*;
use crate::proto::security::PublicKey;

#[test]
fn parses_store_urls() {
    assert_eq!(
        StoreUrl::parse("sqlite:///var/lib/zmesh/mesh.db"),
        Ok(StoreUrl::Sqlite("/var/lib/zmesh/mesh.db".into()))
    );
    assert_eq!(
        StoreUrl::parse("sqlite://mesh.db"),
        Ok(StoreUrl::Sqlite("mesh.db".into()))
    );
    assert_eq!(
        StoreUrl::parse("etcd://127.0.0.1:2379"),
        Ok(StoreUrl::Etcd {
            endpoints: vec!["127.0.0.1:2379".into()],
            prefix: "/zmesh/".into()
        })
    );
    assert_eq!(
        StoreUrl::parse("etcd://a:1,b:2/plant-7"),
        Ok(StoreUrl::Etcd {
            endpoints: vec!["a:1".into(), "b:2".into()],
            prefix: "/plant-7/".into()
        })
    );
    for bad in [
        "sqlite://",
        "etcd://",
        "etcd://nohost",
        "redis://x",
        "/tmp/x.db",
    ] {
        assert!(StoreUrl::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn parses_the_documented_example() {
    let text = include_str!("mod.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .skip_while(|l| !l.starts_with("```toml"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n");
    let c = NodeConfig::from_toml(&text).expect("documented example parses");
    assert_eq!(c.rid, "node-a");
    assert_eq!(c.peers.len(), 1);
    assert_eq!(c.servers[0].channel, "orders");
    assert_eq!(c.subscriptions.len(), 1);
    let d = c.discovery.as_ref().expect("discovery");
    assert_eq!(d, &DiscoveryConfig::new("sqlite:///tmp/zmesh-mesh.db"));
}

#[test]
fn discovery_binds_absent_sections_on_ephemeral_ports() {
    let c = NodeConfig::from_toml(
        "rid = \"a\"\n[discovery]\nstore = \"sqlite:///tmp/x.db\"\n\
         bind = [\"route_mesh\", \"publisher\"]\n[publisher]\nendpoint = \"ipc:///tmp/p\"\n\
         [security]\nmode = \"none\"\n",
    )
    .expect("parses")
    .with_discovery_binds();
    let rm = c.route_mesh.expect("bound");
    assert_eq!(rm.application, "tcp://127.0.0.1:*");
    assert_eq!(rm.completion, "tcp://127.0.0.1:*");
    assert_eq!(c.publisher.expect("kept").endpoint, "ipc:///tmp/p");
    assert!(c.server.is_none());
    for bad in [
        "rid = \"a\"\n[discovery]\nstore = \"redis://x\"\n",
        "rid = \"a\"\n[discovery]\nstore = \"sqlite:///x\"\nhost = \"0.0.0.0\"\n",
        "rid = \"a\"\n[discovery]\nstore = \"sqlite:///x\"\nbind = [\"peers\"]\n",
    ] {
        assert!(NodeConfig::from_toml(bad).is_err(), "{bad}");
    }
}

/// `[security]` is required in a file; CURVE needs its key file and the key of
/// every dialled endpoint, the same for both lanes of a peer; `none` takes no keys.
#[test]
fn security_section_is_explicit_and_curve_needs_every_dialled_key() {
    let k1 = PublicKey::from_bytes([1; 32]).to_z85();
    let k2 = PublicKey::from_bytes([2; 32]).to_z85();
    let peer = "[[peers]]\nrid = \"b\"\napplication = \"tcp://127.0.0.1:1\"\n\
                completion = \"tcp://127.0.0.1:2\"\n";
    let curve = |keys: &str| {
        format!(
            "rid = \"a\"\n{peer}[security]\nmode = \"curve\"\nsecret_key_file = \"a.key\"\n\
             [security.endpoint_keys]\n{keys}"
        )
    };
    let both = format!("\"tcp://127.0.0.1:1\" = \"{k1}\"\n\"tcp://127.0.0.1:2\" = \"{k1}\"\n");
    let c = NodeConfig::from_toml(&curve(&both)).expect("curve with both lane keys");
    assert_eq!(c.security.mode, SecurityMode::Curve);
    assert_eq!(
        c.security
            .endpoint_key("tcp://127.0.0.1:2")
            .map(|k| k.to_z85()),
        Some(k1.clone())
    );
    let one = format!("\"tcp://127.0.0.1:1\" = \"{k1}\"\n");
    let differ = format!("\"tcp://127.0.0.1:1\" = \"{k1}\"\n\"tcp://127.0.0.1:2\" = \"{k2}\"\n");
    for bad in [
        format!("rid = \"a\"\n{peer}"),
        "rid = \"a\"\n[security]\nmode = \"curve\"\n".to_owned(),
        format!("rid = \"a\"\n[security]\nmode = \"none\"\nallow = [\"{k1}\"]\n"),
        "rid = \"a\"\n[security]\nmode = \"sometimes\"\n".to_owned(),
        curve(&one),
        curve(&differ),
        curve(&both).replace(
            "[security.endpoint_keys]",
            "[security.endpoint_keys]\n\"udp://x\" = \"k\"",
        ),
    ] {
        assert!(NodeConfig::from_toml(&bad).is_err(), "{bad}");
    }
    let mut c = c;
    c.security.resolve_paths(Path::new("/etc/zmesh"));
    assert_eq!(c.security.secret_key_file, Some("/etc/zmesh/a.key".into()));
}

/// MISSION H1: `[discovery.tls]` and `[discovery.auth]` are for etcd, complete, and their
/// file paths are relative to the configuration file.
#[test]
fn etcd_tls_and_auth_settings_are_checked_and_resolved() {
    let base = "rid = \"a\"\n[security]\nmode = \"none\"\n[discovery]\n\
                store = \"etcd://10.0.0.1:2379,10.0.0.2:2379\"\n";
    let text = format!(
        "{base}[discovery.tls]\nca_file = \"ca.pem\"\ncert_file = \"/etc/zmesh/a.pem\"\n\
         key_file = \"a-key.pem\"\n[discovery.auth]\nuser = \"zmesh\"\n\
         password_file = \"secret/etcd\"\n"
    );
    let mut d = NodeConfig::from_toml(&text)
        .expect("parses")
        .discovery
        .expect("discovery");
    d.resolve_paths(Path::new("/srv/node"));
    let tls = d.tls.clone().expect("tls");
    assert_eq!(tls.ca_file, PathBuf::from("/srv/node/ca.pem"));
    assert_eq!(tls.cert_file, Some("/etc/zmesh/a.pem".into()));
    assert_eq!(tls.key_file, Some("/srv/node/a-key.pem".into()));
    let auth = d.auth.clone().expect("auth");
    assert_eq!(auth.password_file, Some("/srv/node/secret/etcd".into()));
    let env =
        format!("{base}[discovery.auth]\nuser = \"zmesh\"\npassword_env = \"ETCD_PASSWORD\"\n");
    assert!(NodeConfig::from_toml(&env).is_ok());
    for bad in [
        // Not for SQLite.
        "rid = \"a\"\n[security]\nmode = \"none\"\n[discovery]\nstore = \"sqlite:///x\"\n\
         [discovery.tls]\nca_file = \"ca.pem\"\n"
            .to_owned(),
        format!("{base}[discovery.tls]\ncert_file = \"a.pem\"\n"),
        format!("{base}[discovery.tls]\nca_file = \"c\"\ncert_file = \"a.pem\"\n"),
        format!("{base}[discovery.auth]\nuser = \"zmesh\"\n"),
        format!(
            "{base}[discovery.auth]\nuser = \"zmesh\"\npassword_env = \"P\"\n\
             password_file = \"p\"\n"
        ),
        format!("{base}[discovery.auth]\nuser = \"\"\npassword_env = \"P\"\n"),
        // A password is never written in the file itself.
        format!("{base}[discovery.auth]\nuser = \"zmesh\"\npassword = \"hunter2\"\n"),
    ] {
        assert!(NodeConfig::from_toml(&bad).is_err(), "{bad}");
    }
}

/// MISSION H1: a node may bind on every interface when `[discovery.advertise]` names the
/// host peers dial, for every kind it binds; an advertised host is never a wildcard; a
/// store is shared across hosts when one of its etcd members is not on loopback.
#[test]
fn wildcard_binds_need_an_advertised_host() {
    let with = |extra: &str| {
        format!(
            "rid = \"a\"\n[security]\nmode = \"none\"\n[discovery]\n\
             store = \"etcd://10.1.0.1:2379\"\nhost = \"0.0.0.0\"\n{extra}"
        )
    };
    let ok = NodeConfig::from_toml(&with("[discovery.advertise]\nhost = \"10.1.0.5\"\n"))
        .expect("wildcard bind, advertised host");
    let a = ok.discovery.and_then(|d| d.advertise).expect("advertise");
    assert_eq!(
        a.advertised(EndpointKind::RouteMesh, "tcp://0.0.0.0:7101"),
        "tcp://10.1.0.5:7101"
    );
    let per_kind = AdvertiseConfig {
        host: Some("10.1.0.5".into()),
        publisher: Some("fd00::7".into()),
        ..AdvertiseConfig::default()
    };
    assert_eq!(
        per_kind.advertised(EndpointKind::Publisher, "tcp://[::]:9"),
        "tcp://[fd00::7]:9"
    );
    assert_eq!(
        per_kind.advertised(EndpointKind::Server, "tcp://0.0.0.0:8"),
        "tcp://10.1.0.5:8"
    );
    assert_eq!(
        AdvertiseConfig::default().advertised(EndpointKind::Server, "tcp://0.0.0.0:8"),
        "tcp://0.0.0.0:8"
    );
    assert!(NodeConfig::from_toml(&with(
        "bind = [\"route_mesh\", \"publisher\"]\n\
         [discovery.advertise]\nroute_mesh = \"10.1.0.5\"\npublisher = \"10.2.0.5\"\n"
    ))
    .is_ok());
    for bad in [
        with(""),
        with("bind = [\"route_mesh\", \"publisher\"]\n[discovery.advertise]\nroute_mesh = \"h\"\n"),
        with("[discovery.advertise]\nhost = \"0.0.0.0\"\n"),
        with("[discovery.advertise]\nhost = \"::\"\n"),
        with("[discovery.advertise]\nhost = \"\"\n"),
        with("[discovery.advertise]\nhost = \"tcp://h\"\n"),
    ] {
        assert!(NodeConfig::from_toml(&bad).is_err(), "{bad}");
    }
    let shared = |url: &str| StoreUrl::parse(url).expect("url").is_shared_across_hosts();
    assert!(!shared("sqlite:///x.db"));
    assert!(!shared("etcd://127.0.0.1:2379,localhost:2380"));
    assert!(shared("etcd://127.0.0.1:2379,10.1.0.2:2379"));
    assert!(shared("etcd://etcd-1.plant-7:2379"));
}

#[test]
fn rejects_unknown_keys_and_bad_endpoints() {
    assert!(NodeConfig::from_toml("rid = \"a\"\nprobe_interval = 1").is_err());
    let e = NodeConfig::from_toml("rid = \"a\"\n[publisher]\nendpoint = \"udp://x\"");
    assert!(matches!(e, Err(ConfigError::Invalid(_))));
    assert!(matches!(
        NodeConfig::from_toml("rid = \"\""),
        Err(ConfigError::Invalid(_))
    ));
}

/// The constructors and setters build what the same TOML file says.
#[test]
fn setters_build_what_the_file_says() {
    let built = NodeConfig::new("a")
        .member(Membership::server("pump"))
        .member(Membership::object_client("billing"))
        .route_mesh("tcp://127.0.0.1:7101", "tcp://127.0.0.1:7102")
        .server("tcp://127.0.0.1:7103")
        .publisher("ipc:///tmp/a.pub")
        .peer(PeerConfig::new(
            "b",
            "tcp://127.0.0.1:7201",
            "tcp://127.0.0.1:7202",
        ))
        .peer(
            PeerConfig::new("c", "ipc:///tmp/c.app", "ipc:///tmp/c.cpl")
                .generation(7)
                .security_identity("svc-c")
                .batch_calls(false),
        )
        .dial_server(ServerConfig::new("billing", "tcp://127.0.0.1:7303"))
        .dial_server(
            ServerConfig::new("ledger", "tcp://127.0.0.1:7304")
                .rid("books")
                .batch_calls(false),
        )
        .subscribe("ipc:///tmp/c.pub");
    let file = NodeConfig::from_toml(
        "rid = \"a\"\n\
         memberships = [{ role = \"server\", channel = \"pump\" }, \
         { role = \"object_client\", channel = \"billing\" }]\n\
         [route_mesh]\napplication = \"tcp://127.0.0.1:7101\"\n\
         completion = \"tcp://127.0.0.1:7102\"\n\
         [server]\nendpoint = \"tcp://127.0.0.1:7103\"\n\
         [publisher]\nendpoint = \"ipc:///tmp/a.pub\"\n\
         [[peers]]\nrid = \"b\"\napplication = \"tcp://127.0.0.1:7201\"\n\
         completion = \"tcp://127.0.0.1:7202\"\n\
         [[peers]]\nrid = \"c\"\napplication = \"ipc:///tmp/c.app\"\n\
         completion = \"ipc:///tmp/c.cpl\"\ngeneration = 7\n\
         security_identity = \"svc-c\"\nbatch_calls = false\n\
         [[servers]]\nchannel = \"billing\"\nendpoint = \"tcp://127.0.0.1:7303\"\n\
         [[servers]]\nchannel = \"ledger\"\nendpoint = \"tcp://127.0.0.1:7304\"\n\
         rid = \"books\"\nbatch_calls = false\n\
         [[subscriptions]]\nendpoint = \"ipc:///tmp/c.pub\"\n\
         [security]\nmode = \"none\"\n",
    )
    .expect("valid file");
    assert_eq!(built, file);
    assert_eq!(
        built.route_mesh,
        Some(RouteMeshBind::new(
            "tcp://127.0.0.1:7101",
            "tcp://127.0.0.1:7102"
        ))
    );
    built.validate().expect("valid");
}

/// MISSION T5: tcp and ipc endpoints are checked as libzmq reads them; a port it would
/// take modulo 65536, a missing host, port or path, or another transport is refused.
#[test]
fn t5_rejects_endpoints_libzmq_would_misread() {
    for good in [
        "tcp://127.0.0.1:7101",
        "tcp://*:7101",
        "tcp://127.0.0.1:*",
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:65535",
        "tcp://[::1]:7101",
        "tcp://eth0:7101",
        "ipc:///tmp/a.sock",
    ] {
        assert_eq!(check_endpoint(good), Ok(()), "{good}");
    }
    for bad in [
        "tcp://127.0.0.1:99999",
        "tcp://127.0.0.1:65536",
        "tcp://127.0.0.1:",
        "tcp://127.0.0.1:+80",
        "tcp://127.0.0.1:80a",
        "tcp://127.0.0.1",
        "tcp://:7101",
        "ipc://",
        "udp://127.0.0.1:7101",
    ] {
        assert!(check_endpoint(bad).is_err(), "{bad} accepted");
    }
    let refused = NodeConfig::new("a")
        .server("tcp://127.0.0.1:99999")
        .validate();
    assert!(
        matches!(&refused, Err(ConfigError::Invalid(m)) if m.contains("99999")),
        "{refused:?}"
    );
}

/// Names every field of the node configuration and its sections, so that a field added to
/// one of them fails to compile here until it is named, and with it added to `every_key` in
/// tests/example_configs.rs, which checks that README's Configuration table lists every key
/// (outside the crate, `#[non_exhaustive]` lets that function leave a field out).
#[allow(dead_code)]
fn every_field_is_named(c: NodeConfig) {
    let NodeConfig {
        rid: _,
        security_identity: _,
        memberships: _,
        route_mesh: _,
        server: _,
        publisher: _,
        peers: _,
        servers: _,
        subscriptions: _,
        delivery_high_water: _,
        operations_keep: _,
        max_frame_size: _,
        max_unadmitted: _,
        discovery: _,
        security,
    } = c;
    let SecurityConfig {
        mode: _,
        secret_key_file: _,
        allow: _,
        allow_dir: _,
        endpoint_keys: _,
    } = security;
}
