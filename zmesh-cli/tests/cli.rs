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
    p.publisher = Some(Endpoint::new(pub_ep.clone()));
    let publisher = Node::start(p).await.expect("publisher");

    let mut cfg = NodeConfig::new("cli-node");
    cfg.subscriptions = vec![Endpoint::new(pub_ep.clone())];
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

/// A `zmesh node` "b" serving the demo service on channel `tools` over RouteMesh (with
/// `--events ndjson` and its log on pipes), and the configuration file of a node "a" that has b as its
/// peer, in `dir`.
fn tools_server(dir: &std::path::Path) -> (std::process::Child, std::path::PathBuf) {
    use zmesh::config::{PeerConfig, RouteMeshBind};
    use zmesh::proto::handshake::{Membership, Role};
    let bind = RouteMeshBind::new(common::free_tcp(), common::free_tcp());
    let mut b = NodeConfig::new("b");
    b.memberships = vec![Membership {
        role: Role::Server,
        channel: "tools".into(),
    }];
    b.route_mesh = Some(bind.clone());
    let b_path = dir.join("b.toml");
    std::fs::write(&b_path, toml::to_string(&b).expect("toml")).expect("write");
    let server = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["node", "--serve", "tools", "--events", "ndjson", "--config"])
        .arg(&b_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut a = NodeConfig::new("a");
    a.peers = vec![PeerConfig::new(
        "b",
        bind.application.clone(),
        bind.completion.clone(),
    )];
    let a_path = dir.join("a.toml");
    std::fs::write(&a_path, toml::to_string(&a).expect("toml")).expect("write");
    (server, a_path)
}

/// `zmesh call --config FILE` on `channel`.`method` with `args`, waiting `wait_ms` for b.
fn call_command(
    config: &std::path::Path,
    channel: &str,
    method: &str,
    args: &str,
    wait_ms: &str,
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zmesh"));
    cmd.args([
        "call",
        "--channel",
        channel,
        "--method",
        method,
        "--args",
        args,
    ])
    .args(["--wait-ms", wait_ms, "--config"])
    .arg(config);
    cmd
}

/// MISSION C3, K2: `zmesh call` prints the result as JSON and exits 0; a call nothing can
/// serve prints the error with `may_have_run: false` and exits 1. The JSON carries the call's
/// own operations-registry row (`operation`, as `zmesh ops` prints a node's rows) and the
/// RID it called as.
#[tokio::test]
async fn c3_k2_cli_call_prints_result_or_honest_error_and_its_operation() {
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-cli-call-")
        .tempdir()
        .expect("dir");
    let (mut server, a_path) = tools_server(tmp.path());
    let call = |channel: &str, method: &str, args: &str, wait_ms: &str| {
        call_command(&a_path, channel, method, args, wait_ms)
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
    let op = &v["operation"];
    assert_eq!(
        (&op["target"], &op["channel"], &op["method"], &op["status"]),
        (
            &"b".into(),
            &"tools".into(),
            &"echo".into(),
            &"succeeded".into()
        ),
        "{v}"
    );
    assert!(op["id"].is_u64() && op["settled_ms_ago"].is_u64(), "{v}");
    assert_eq!(
        (&v["replayed"], &op["replayed"]),
        (&false.into(), &false.into()),
        "{v}"
    );
    assert!(
        v["rid"].as_str().is_some_and(|r| r.starts_with("a.call-")),
        "{v}"
    );

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
    assert_eq!(v["operation"]["status"], "failed", "{v}");
    assert_eq!(v["operation"]["code"], "Exception", "{v}");

    // `--rid` names the RID to call as.
    let out = call_command(&a_path, "tools", "echo", "3", "10000")
        .args(["--rid", "a"])
        .output()
        .expect("zmesh call --rid");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!((&v["ok"], &v["rid"]), (&true.into(), &"a".into()), "{v}");
    let _ = server.kill();
    let _ = server.wait();
}

/// Two `zmesh call` processes started from one configuration file at once each call as a RID
/// of their own: the second does not replace the first's connection, so both calls are
/// answered (with a shared RID the first was told UnknownOutcome while its call ran on).
#[tokio::test]
async fn cli_two_calls_from_one_config_do_not_replace_each_other() {
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-cli-two-calls-")
        .tempdir()
        .expect("dir");
    let (mut server, a_path) = tools_server(tmp.path());
    let events = server.stdout.take().expect("server stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(events).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The first call holds the server 2 s; the second starts once the first is running.
    let mut first = call_command(&a_path, "tools", "sleep", "2000", "10000")
        .stdout(Stdio::piped())
        .spawn()
        .expect("first zmesh call");
    let started = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("the first call reaches the server within 15 s");
        let v: serde_json::Value = serde_json::from_str(&line).expect("an ndjson line");
        if v["event"] == "call" && v["method"] == "sleep" {
            break v;
        }
    };
    let mut second = call_command(&a_path, "tools", "echo", "2", "10000")
        .stdout(Stdio::piped())
        .spawn()
        .expect("second zmesh call");
    // Bounded: a call whose connection was replaced under it may wait for good.
    let printed = |child: &mut std::process::Child, what: &str| {
        wait_exit(child, Duration::from_secs(15), what);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out)
            .expect("stdout");
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap_or_else(|e| panic!("{what} printed no JSON ({e}): {out:?}"))
    };
    let v2 = printed(&mut second, "the second zmesh call");
    let v1 = printed(&mut first, "the first zmesh call");
    assert_eq!(v1["ok"], true, "the first call: {v1}");
    assert_eq!(v2["ok"], true, "the second call: {v2}");
    assert_ne!(v1["rid"], v2["rid"]);
    assert_eq!(started["caller"], v1["rid"], "{started}");
    let _ = server.kill();
    let _ = server.wait();
}

/// MISSION K1, K2, K3: `zmesh describe` prints a running node's contract from its control
/// endpoint and over the wire (`--config --channel`), as JSON and as a table naming each
/// method's semantics and whether a non-repeatable command is guarded; `zmesh ops` prints its operations registry (empty: it made no calls).
#[tokio::test]
async fn k1_k2_k3_cli_describe_and_ops() {
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
    b.server = Some(Endpoint::new(endpoint.clone()));
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
    a.servers = vec![ServerConfig::new("pump", endpoint)];
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
    // No idempotency store: its one non-repeatable command is reported unguarded, and
    // "guarded" is said of nothing else.
    let guarded = |name: &str| {
        methods
            .iter()
            .find(|m| m["name"] == name)
            .map(|m| m.get("guarded").cloned())
    };
    assert_eq!(guarded("dispense"), Some(Some(false.into())));
    assert_eq!(guarded("set"), Some(None));
    assert_eq!(guarded("get"), Some(None));
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
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zmesh demo");
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    // Read apart from stdout (its warnings are not the demo's output), shown on a failure.
    let errors = std::thread::spawn(move || {
        BufReader::new(err)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n")
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
    let errors = errors.join().expect("stderr reader");
    assert!(
        status.success(),
        "zmesh demo failed ({status}):\n{text}\nstderr:\n{errors}"
    );
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

/// Waits for `child` to exit, at most `limit`; kills it and panics past that.
fn wait_exit(
    child: &mut std::process::Child,
    limit: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A configuration file for a node that logs a warning as it starts (security mode "none")
/// and prints a state event at once (its subscription starts connecting).
fn quiet_node_config(dir: &std::path::Path) -> std::path::PathBuf {
    let mut cfg = NodeConfig::new("cli-hygiene");
    cfg.subscriptions = vec![Endpoint::new(ipc("nobody-publishes"))];
    let path = dir.join("node.toml");
    std::fs::write(&path, toml::to_string(&cfg).expect("toml")).expect("write");
    path
}

/// Log lines on stderr carry ANSI colour only when asked with `--color` (stderr here is a
/// pipe, not a terminal).
#[test]
fn cli_log_lines_are_coloured_only_on_a_terminal_or_with_color() {
    let tmp = tempfile::tempdir().expect("dir");
    let config = quiet_node_config(tmp.path());
    let stderr_of = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args([
                "call",
                "--channel",
                "none",
                "--method",
                "m",
                "--wait-ms",
                "0",
            ])
            .args(extra)
            .arg("--config")
            .arg(&config)
            .env_remove("NO_COLOR")
            .output()
            .expect("zmesh call");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let plain = stderr_of(&[]);
    assert!(plain.contains("WARN"), "no warning logged: {plain}");
    assert!(!plain.contains('\u{1b}'), "colour on a pipe: {plain:?}");
    let never = stderr_of(&["--color", "never"]);
    assert!(
        !never.contains('\u{1b}'),
        "colour with --color never: {never:?}"
    );
    let coloured = stderr_of(&["--color"]);
    assert!(
        coloured.contains("\u{1b}["),
        "no colour with --color: {coloured:?}"
    );
}

/// An error prints one line per cause, never a cause twice (the configuration error's text
/// already carries the I/O error under it), and no backtrace, even with RUST_BACKTRACE set,
/// unless `--debug` asks for one.
#[test]
fn cli_error_prints_each_cause_once_backtrace_only_with_debug() {
    let run = |debug: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_zmesh"));
        cmd.args(["node", "--config", "/nonexistent/zmesh-node.toml"])
            .env("RUST_BACKTRACE", "1");
        if debug {
            cmd.arg("--debug");
        }
        let out = cmd.output().expect("zmesh node");
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let plain = run(false);
    let lines: Vec<&str> = plain.lines().collect();
    assert_eq!(lines.len(), 1, "one cause, one line: {plain}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains("/nonexistent/zmesh-node.toml"),
        "{plain}"
    );
    assert!(!plain.to_lowercase().contains("backtrace"), "{plain}");
    let debug = run(true);
    assert!(debug.starts_with(&plain), "{debug}");
    assert!(
        debug.contains("backtrace:\n"),
        "no backtrace with --debug: {debug}"
    );
}

/// A stdout closed by its reader (`zmesh keygen | head -c0`, `zmesh node | head -1`) ends the
/// command quietly with status 0: no panic, nothing on stderr, and a node stops by itself.
#[test]
fn cli_closed_stdout_ends_the_command_quietly() {
    let tmp = tempfile::tempdir().expect("dir");
    let closed = || {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        writer
    };
    let key = tmp.path().join("node.key");
    let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["keygen", "--out"])
        .arg(&key)
        .stdout(closed())
        .stderr(Stdio::piped())
        .output()
        .expect("zmesh keygen");
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        key.exists(),
        "the key file is written before the public key is printed"
    );

    let config = quiet_node_config(tmp.path());
    let mut node = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["node", "--color", "never", "--events", "ndjson", "--config"])
        .arg(&config)
        .stdout(closed())
        .stderr(Stdio::piped())
        .spawn()
        .expect("zmesh node");
    let status = wait_exit(
        &mut node,
        Duration::from_secs(10),
        "zmesh node with a closed stdout",
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut node.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert!(status.success(), "{status:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The commands of the tool crates print through the same closed-stdout rule as the others:
/// `zmesh sim --seeds 2`, `zmesh conform --list` and `zmesh bench --quick --only p2` with a
/// stdout closed by its reader end with status 0 and no panic; sim and conform say nothing
/// on stderr (the bench logs its progress there), and the bench still writes its `--json`
/// file.
#[test]
fn cli_closed_stdout_ends_sim_conform_and_bench_quietly() {
    let tmp = tempfile::tempdir().expect("dir");
    let json = tmp.path().join("bench.json");
    let json_arg = json.to_str().expect("utf-8 path");
    let bench = ["bench", "--quick", "--only", "p2", "--json", json_arg];
    for args in [&["sim", "--seeds", "2"][..], &["conform", "--list"], &bench] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .expect("zmesh");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "zmesh {args:?}: {err}");
        assert!(
            out.status.success(),
            "zmesh {args:?}: {:?}: {err}",
            out.status
        );
        if args[0] != "bench" {
            assert!(err.is_empty(), "zmesh {args:?}: {err}");
        }
    }
    assert!(json.exists(), "the bench wrote its JSON with stdout closed");
}

/// MISSION K3: a non-repeatable command called with an idempotency key on a server without
/// an idempotency store runs every time (the key guards nothing there), and both ends say so:
/// the server in its log, one warning for the method however many keyed calls come; each
/// `zmesh call --key`, one line on stderr, from the server's contract (`"guarded": false`).
#[tokio::test]
async fn k3_cli_keyed_calls_of_an_unguarded_command_are_logged_once() {
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-cli-unguarded-")
        .tempdir()
        .expect("dir");
    let (mut server, a_path) = tools_server(tmp.path());
    let mut answers = Vec::new();
    for _ in 0..2 {
        let out = call_command(&a_path, "tools", "dispense", "null", "10000")
            .args(["--key", "order-1"])
            .output()
            .expect("zmesh call --key");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["ok"], true, "{v}");
        answers.push(v["result"].clone());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let warned: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("does not guard tools.dispense"))
            .collect();
        assert_eq!(warned.len(), 1, "one warning line: {stderr}");
    }
    assert_eq!(answers, ["dispensed #1", "dispensed #2"], "it ran twice");
    let _ = server.kill();
    let _ = server.wait();
    let mut log = String::new();
    std::io::Read::read_to_string(&mut server.stderr.take().expect("stderr"), &mut log)
        .expect("server log");
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("no idempotency store"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("dispense"),
        "{log}"
    );
}
