//! The `zmesh` command line over real processes: `node --events ndjson`, `status`, `call`,
//! `describe`, `ops`, and the main demo.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::ipc;
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::runtime::Node;

/// MISSION O1: `zmesh node --events ndjson` prints one JSON object per state change, and
/// `zmesh status --json` prints the running node's snapshot with the link's state.
#[tokio::test]
async fn o1_cli_node_ndjson_events_and_status_snapshot() {
    let pub_ep = ipc("cli-pub");
    let mut p = NodeConfig::new("cli-pub");
    p.publisher = Some(Endpoint {
        endpoint: pub_ep.clone(),
    });
    let publisher = Node::start(p).await.expect("publisher");

    let mut cfg = NodeConfig::new("cli-node");
    cfg.subscriptions = vec![Endpoint {
        endpoint: pub_ep.clone(),
    }];
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-cli-")
        .tempdir()
        .expect("dir");
    let dir = tmp.path();
    let path = dir.join("node.toml");
    std::fs::write(&path, toml::to_string(&cfg).expect("toml")).expect("write");
    let control = ipc("ctl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args([
            "node",
            "--events",
            "ndjson",
            "--control",
            &control,
            "--config",
        ])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn zmesh node");
    let stdout = child.stdout.take().expect("stdout");
    // The reader thread ends when the child exits; it hands lines over a channel so the wait
    // below is bounded.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut ready = false;
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(15)) {
        let v: serde_json::Value = serde_json::from_str(&line).expect("each line is JSON");
        assert_eq!(v["node"], "cli-node");
        assert!(v["t_ms"].is_u64());
        if v["event"] == "state" && v["state"] == "ready" {
            assert!(v["link"].as_str().expect("link").contains(&pub_ep));
            ready = true;
            break;
        }
    }
    assert!(ready, "no ready state line within 15 s");

    let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["status", "--json", "--control", &control])
        .output()
        .expect("zmesh status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(snap["rid"], "cli-node");
    let link = &snap["links"][0];
    assert_eq!(link["topology"], "fanout");
    assert_eq!(link["endpoint"], pub_ep.as_str());
    assert_eq!(link["state"], "ready");

    let table = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["status", "--control", &control])
        .output()
        .expect("zmesh status");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("subscriber") && text.contains("ready"),
        "{text}"
    );

    let _ = child.kill();
    let _ = child.wait();
    publisher.shutdown().await.expect("shutdown");
}

/// MISSION C3: `zmesh call` prints the result as JSON and exits 0; a call nothing can serve
/// prints the error with `may_have_run: false` and exits 1.
#[tokio::test]
async fn c3_cli_call_prints_result_or_honest_error() {
    use zmesh::config::{PeerConfig, RouteMeshBind};
    use zmesh::proto::handshake::{Membership, Role};
    let bind = RouteMeshBind {
        application: common::free_tcp(),
        completion: common::free_tcp(),
    };
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-cli-call-")
        .tempdir()
        .expect("dir");
    let dir = tmp.path();
    let mut b = NodeConfig::new("b");
    b.memberships = vec![Membership {
        role: Role::Server,
        channel: "tools".into(),
    }];
    b.route_mesh = Some(bind.clone());
    let b_path = dir.join("b.toml");
    std::fs::write(&b_path, toml::to_string(&b).expect("toml")).expect("write");
    let mut server = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["node", "--serve", "tools", "--config"])
        .arg(&b_path)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn server");
    let mut a = NodeConfig::new("a");
    a.peers = vec![PeerConfig {
        batch_calls: true,
        rid: "b".into(),
        application: bind.application.clone(),
        completion: bind.completion.clone(),
        generation: None,
        security_identity: None,
    }];
    let a_path = dir.join("a.toml");
    std::fs::write(&a_path, toml::to_string(&a).expect("toml")).expect("write");
    let call = |channel: &str, method: &str, args: &str, wait_ms: &str| {
        Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args([
                "call",
                "--channel",
                channel,
                "--method",
                method,
                "--args",
                args,
            ])
            .args(["--wait-ms", wait_ms, "--config"])
            .arg(&a_path)
            .output()
            .expect("zmesh call")
    };
    let out = call("tools", "echo", r#"{"x": [1, 2]}"#, "10000");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["ok"], true);
    assert_eq!(v["result"]["x"][1], 2);

    let out = call("nowhere", "echo", "1", "200");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["ok"], false);
    assert_eq!(v["may_have_run"], false);
    assert_eq!(v["code"], "NotFound");

    let out = call("tools", "fail", "null", "10000");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["code"], "Exception");
    assert_eq!(v["may_have_run"], true);
    let _ = server.kill();
    let _ = server.wait();
}

/// MISSION K1, K2: `zmesh describe` prints a running node's contract from its control
/// endpoint and over the wire (`--config --channel`), as JSON and as a table naming each
/// method's semantics; `zmesh ops` prints its operations registry (empty: it made no calls).
#[tokio::test]
async fn k1_k2_cli_describe_and_ops() {
    use zmesh::config::ServerConfig;
    use zmesh::proto::handshake::{Membership, Role};
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-cli-describe-")
        .tempdir()
        .expect("dir");
    let dir = tmp.path();
    let endpoint = common::free_tcp();
    let mut b = NodeConfig::new("pump-node");
    b.memberships = vec![Membership {
        role: Role::Server,
        channel: "pump".into(),
    }];
    b.server = Some(Endpoint {
        endpoint: endpoint.clone(),
    });
    let b_path = dir.join("b.toml");
    std::fs::write(&b_path, toml::to_string(&b).expect("toml")).expect("write");
    let control = ipc("describe-ctl");
    let mut server = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["node", "--serve", "pump", "--control", &control, "--config"])
        .arg(&b_path)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn server");
    let mut a = NodeConfig::new("asker");
    a.servers = vec![ServerConfig {
        batch_calls: true,
        channel: "pump".into(),
        endpoint,
        rid: None,
    }];
    let a_path = dir.join("a.toml");
    std::fs::write(&a_path, toml::to_string(&a).expect("toml")).expect("write");
    let zmesh = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args(args)
            .output()
            .expect("zmesh");
        assert!(
            out.status.success(),
            "zmesh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let a_config = a_path.display().to_string();
    // Over the wire first: it waits for the server to be ready (bounded by --wait-ms).
    let wire: serde_json::Value = serde_json::from_str(&zmesh(&[
        "describe",
        "--config",
        &a_config,
        "--channel",
        "pump",
        "--wait-ms",
        "15000",
        "--json",
    ]))
    .expect("JSON");
    let local: serde_json::Value =
        serde_json::from_str(&zmesh(&["describe", "--control", &control, "--json"])).expect("JSON");
    assert_eq!(wire, local, "the same contract both ways");
    assert_eq!(local["rid"], "pump-node");
    let methods = local["services"][0]["methods"].as_array().expect("methods");
    let semantics = |name: &str| {
        methods
            .iter()
            .find(|m| m["name"] == name)
            .map(|m| m["semantics"].clone())
    };
    assert_eq!(semantics("dispense"), Some("non-repeatable-command".into()));
    assert_eq!(semantics("set"), Some("idempotent-command".into()));
    assert_eq!(semantics("get"), Some("query".into()));
    assert_eq!(semantics("sleep"), Some("undeclared".into()));
    let table = zmesh(&["describe", "--control", &control]);
    assert!(
        table.contains("dispense") && table.contains("non-repeatable-command"),
        "{table}"
    );
    let ops: serde_json::Value =
        serde_json::from_str(&zmesh(&["ops", "--control", &control, "--json"])).expect("JSON");
    assert_eq!(ops, serde_json::json!([]), "the server made no calls");
    let table = zmesh(&["ops", "--control", &control, "--status", "unknown-outcome"]);
    assert!(table.contains("STATUS"), "{table}");
    let _ = server.kill();
    let _ = server.wait();
}

/// MISSION D1, D2, T4, F3, F5 (the README's main command): `zmesh demo --quick` finds its
/// nodes through the embedded SQLite store with no endpoint written anywhere and runs every
/// scene to the end: records and calls, b killed and its new generation admitted, the store
/// away with every ready link staying ready, the commands scene answered from e's durable
/// record (dispense ran once); the Object Client pair a-d is never dialled.
#[test]
fn d1_demo_quick_finds_its_nodes_through_the_embedded_store() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["demo", "--quick"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn zmesh demo");
    let out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    // Bounded: the demo waits on what it observes, each step within 20 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("zmesh demo --quick did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = reader.join().expect("reader");
    assert!(status.success(), "zmesh demo failed:\n{text}");
    for expected in [
        "sqlite://",
        "a's links to d: 0",
        "a -> b orders.echo(\"hello\") = \"hello\"",
        "may_have_run = true",
        "b was generation",
        "each stays ready on the same connection",
        "dispense ran 1 time(s)",
        "demo finished",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }
}
