//! `zmesh node --metrics ADDR` (MISSION O1, O2): the node's metrics served for Prometheus by
//! `metrics-exporter-prometheus`, scraped over HTTP on 127.0.0.1 with a plain `TcpStream`.
//! Names follow the Prometheus conventions (`zmesh_` prefix, snake_case, counters end in
//! `_total`), every metric is one of `zmesh::runtime::telemetry::METRICS` with its kind and
//! label keys, and no label value is an identity (RID, endpoint, connection id). A second test
//! holds that list to the code: every `counter!`/`gauge!` of `src/` is in it, and back. A
//! third counts what pyzmq peers and raw TCP connections aimed at a node's publisher.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{free_port, mesh_bind, mesh_server, server_of, Events};
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::runtime::telemetry::{MetricKind, LABEL_KEYS, METRICS};
use zmesh::runtime::{Node, NodeEvent};

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(15);

/// A child process killed when dropped (a failing test leaves nothing running).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP GET of `path` at `addr`: the status code, the headers (lower-case names) and the
/// body; `None` if the connection fails (the listener is not up yet).
fn http_get(addr: &str, path: &str) -> Option<(u16, BTreeMap<String, String>, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(STEP)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8(raw).expect("a UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers end");
    let mut lines = head.split("\r\n");
    let status = lines.next().expect("status line");
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("status line {status:?}"));
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let body = if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Some((code, headers, body))
}

/// The body of a chunked HTTP response.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("chunk size");
        let n = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
}

/// One sample line of the exposition format: name, labels, value.
fn sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let (series, value) = line.rsplit_once(' ').expect("name and value");
    let value: f64 = value
        .parse()
        .unwrap_or_else(|_| panic!("value of {line:?}"));
    let (name, labels) = match series.split_once('{') {
        None => (series.to_owned(), Vec::new()),
        Some((name, rest)) => {
            let inner = rest.strip_suffix('}').expect("labels end with }");
            let labels = inner
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once("=\"").expect("key=\"value\"");
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels)
        }
    };
    (name, labels, value)
}

/// A Prometheus metric name as the conventions want it.
fn conventional(name: &str, kind: MetricKind) -> bool {
    let snake = name.starts_with("zmesh_")
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    snake
        && match kind {
            MetricKind::Counter => name.ends_with("_total"),
            MetricKind::Gauge => !name.ends_with("_total"),
        }
}

/// MISSION O1, O2: a `zmesh node --metrics 127.0.0.1:PORT` child that dials a RouteMesh peer,
/// sends it records, serves a channel, publishes beacons to a subscriber that joins, and
/// loses its peer: a plain HTTP GET gets the exposition format with counters and gauges of
/// conventional names (each one of the telemetry list, with its kind and HELP text), the
/// counts of what happened, and labels with allowed keys and no identity in any value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o2_prometheus_scrape_conventional_names_no_identities() {
    let bind = mesh_bind(true);
    let b = mesh_server("node-bee", "orders", &bind);
    let bee = Node::start(b).await.expect("node-bee");
    let mut eb = Events::new(bee.take_events().expect("events"));

    let pub_ep = common::ipc("prom-pub");
    let mut a = NodeConfig::new("node-ay");
    a.memberships = server_of("pump");
    a.peers = vec![common::peer("node-bee", &bind)];
    a.publisher = Some(Endpoint::new(pub_ep.clone()));
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-prom-")
        .tempdir()
        .expect("dir");
    let dir = tmp.path();
    let path = dir.join("node-ay.toml");
    std::fs::write(&path, toml::to_string(&a).expect("toml")).expect("write");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args([
            "node", "--events", "ndjson", "--send", "2", "--serve", "pump",
        ])
        .args(["--metrics", &addr, "--config"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zmesh node");
    let stdout = child.stdout.take().expect("stdout");
    let _child = Killed(child);
    std::thread::spawn(move || {
        // Drained so the child never blocks on a full pipe.
        for _ in BufReader::new(stdout).lines().map_while(Result::ok) {}
    });

    // The peer gets the two records once both lanes are ready.
    for _ in 0..2 {
        eb.wait(STEP, |e| matches!(e, NodeEvent::Delivery(_))).await;
    }
    // A subscriber joins the publisher: a beacon at once (and counted).
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).expect("sub");
    sub.set_linger(0).expect("linger");
    sub.set_subscribe(b"").expect("subscribe");
    sub.set_rcvtimeo(15_000).expect("rcvtimeo");
    sub.connect(&pub_ep).expect("connect");
    sub.recv_multipart(0).expect("a beacon");
    // The peer goes: the child's links fail (orderly close).
    bee.shutdown().await.expect("node-bee down");

    // Scrape until the failure is counted (bounded).
    let limit = std::time::Instant::now() + STEP;
    let (code, headers, body) = loop {
        let got = http_get(&addr, "/metrics");
        if let Some((_, _, body)) = &got {
            if body.contains("zmesh_link_failures_total{reason=\"orderly_close\"}") {
                break got.expect("a response");
            }
        }
        assert!(
            std::time::Instant::now() < limit,
            "no scrape with the link failure within {STEP:?}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(code, 200);
    assert!(
        headers
            .get("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{headers:?}"
    );

    let known: BTreeMap<&str, _> = METRICS.iter().map(|m| (m.name, m)).collect();
    let mut typed = BTreeMap::new();
    let mut helped = BTreeSet::new();
    let mut values = BTreeMap::new();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').expect("HELP name text");
            helped.insert(name.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            typed.insert(name.to_owned(), kind.to_owned());
        } else {
            assert!(!line.starts_with('#'), "unexpected comment {line:?}");
            let (name, labels, value) = sample(line);
            let m = known
                .get(name.as_str())
                .unwrap_or_else(|| panic!("{name} is not in telemetry::METRICS"));
            let kind = match m.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
            };
            assert_eq!(
                typed.get(&name).map(String::as_str),
                Some(kind),
                "{name}: TYPE"
            );
            assert!(conventional(&name, m.kind), "{name}: not conventional");
            assert!(helped.contains(&name), "{name}: no HELP line");
            for (k, v) in &labels {
                assert!(
                    m.labels.contains(&k.as_str()) && LABEL_KEYS.contains(&k.as_str()),
                    "{name}: label key {k}"
                );
                let identity = v.contains("node-")
                    || v.contains("tcp://")
                    || v.contains("ipc://")
                    || v.contains("127.0.0.1")
                    || v.contains(&pub_ep)
                    || (v.len() > 1
                        && v.starts_with('c')
                        && v[1..].bytes().all(|b| b.is_ascii_digit()));
                assert!(!identity, "{name}: label {k}={v} carries an identity");
            }
            values.insert(line.rsplit_once(' ').expect("series").0.to_owned(), value);
        }
    }
    // What happened is counted.
    assert_eq!(
        values.get("zmesh_app_records_sent_total"),
        Some(&2.0),
        "{body}"
    );
    assert!(
        values
            .get("zmesh_fanout_join_beacons_total")
            .is_some_and(|v| *v >= 1.0),
        "{body}"
    );
    assert!(values.contains_key("zmesh_calls_pending"), "{body}");
    assert!(
        values.contains_key("zmesh_operations{status=\"unknown-outcome\"}"),
        "{body}"
    );
}

/// Every metric the code records (`metrics::counter!`/`gauge!`/`histogram!` with a literal
/// name under `src/`) is in `telemetry::METRICS` with its kind and label keys, every entry
/// of the list is recorded somewhere, and every name is conventional.
#[test]
fn o2_telemetry_list_matches_the_code() {
    let mut found: BTreeMap<String, (MetricKind, BTreeSet<String>)> = BTreeMap::new();
    let mut files = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../src")];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(
                std::fs::read_dir(&p)
                    .expect("read_dir")
                    .map(|e| e.expect("entry").path()),
            );
            continue;
        }
        if p.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("read");
        for (mac, kind) in [
            ("metrics::counter!(", Some(MetricKind::Counter)),
            ("metrics::gauge!(", Some(MetricKind::Gauge)),
            ("metrics::histogram!(", None),
        ] {
            for (i, _) in text.match_indices(mac) {
                let call = &text[i + mac.len()..];
                let call = &call[..call.find(')').expect("macro call ends")];
                let Some(rest) = call.trim_start().strip_prefix('"') else {
                    // A describe loop or other non-literal use.
                    continue;
                };
                let name = &rest[..rest.find('"').expect("name ends")];
                let kind = kind.unwrap_or_else(|| panic!("{name}: histograms are not listed"));
                let parts: Vec<&str> = call.split("=>").collect();
                let labels: BTreeSet<String> = parts[..parts.len() - 1]
                    .iter()
                    .map(|before| {
                        let before = before.trim_end().trim_end_matches('"');
                        before[before.rfind('"').expect("label key") + 1..].to_owned()
                    })
                    .collect();
                let e = found
                    .entry(name.to_owned())
                    .or_insert_with(|| (kind, BTreeSet::new()));
                assert_eq!(e.0, kind, "{name}: one kind");
                e.1.extend(labels);
            }
        }
    }
    let listed: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
    let recorded: BTreeSet<&str> = found.keys().map(String::as_str).collect();
    assert_eq!(
        recorded, listed,
        "the code's metrics and telemetry::METRICS"
    );
    for m in METRICS {
        assert!(conventional(m.name, m.kind), "{}", m.name);
        assert!(!m.help.is_empty(), "{}: help", m.name);
        let (kind, labels) = &found[m.name];
        assert_eq!(*kind, m.kind, "{}", m.name);
        let declared: BTreeSet<String> = m.labels.iter().map(|l| l.to_string()).collect();
        assert_eq!(labels, &declared, "{}: label keys", m.name);
        for l in m.labels {
            assert!(LABEL_KEYS.contains(l), "{}: label key {l}", m.name);
        }
    }
    // And the in-process recorder tests' allowed keys are the same set.
    let set: BTreeSet<&str> = LABEL_KEYS.iter().copied().collect();
    assert_eq!(
        set,
        BTreeSet::from(["reason", "code", "topology", "status", "op"])
    );
}

/// The value of the sample `series` (name and labels as printed) in a scrape, 0 if absent.
fn value_of(body: &str, series: &str) -> f64 {
    body.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(s, _)| *s == series)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

/// Scrapes `addr` until `done(body)` holds (bounded by [`STEP`]); returns that body.
async fn scrape_until(addr: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let limit = std::time::Instant::now() + STEP;
    loop {
        let body = http_get(addr, "/metrics").map(|(_, _, b)| b);
        if let Some(body) = body.as_deref().filter(|b| done(b)) {
            return body.to_owned();
        }
        assert!(
            std::time::Instant::now() < limit,
            "no scrape with {what} within {STEP:?}: {body:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the Python peer sends a publisher: 2 000 messages that are not subscriptions from an
/// XSUB (after a real subscription), then on `tcp` 40 raw TCP connections with a ZMTP 3.0
/// greeting of a mechanism nobody knows and one SUB that speaks PLAIN to it (never
/// reconnecting).
const PUBLISHER_ABUSE: &str = r#"
import socket
ep = sys.argv[1]
ctx = zmq.Context()
x = ctx.socket(zmq.XSUB)
x.setsockopt(zmq.SNDHWM, 0)
mon = x.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
x.connect(ep)
mon.recv_multipart()
x.send(b"\x01")
for i in range(2000):
    x.send(b"garbage %d" % i)
emit(garbage=2000)
commands = stdin_commands()
assert commands.get(timeout=30) == ["tcp"]
host, port = ep[len("tcp://"):].rsplit(":", 1)
greeting = bytes([0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0]) + b"GARBAGE".ljust(20, b"\0")
greeting = greeting.ljust(64, b"\0")
raw = []
for _ in range(40):
    s = socket.create_connection((host, int(port)))
    s.sendall(greeting)
    raw.append(s)
plain = ctx.socket(zmq.SUB)
plain.plain_username = b"user"
plain.plain_password = b"password"
plain.setsockopt(zmq.RECONNECT_IVL, -1)
plain.setsockopt(zmq.SUBSCRIBE, b"")
plain.connect(ep)
emit(sent="tcp")
commands.get(timeout=LIFETIME)
"#;

/// MISSION W3: input that no subscriber sends, aimed at a `zmesh node`'s publisher
/// endpoint by real peers (a pyzmq XSUB sending 2 000 messages that are not subscriptions, 40
/// raw TCP connections with a mechanism nobody knows, a PLAIN SUB against a NULL publisher),
/// is refused and counted like the same input on the RouteMesh and server endpoints: each
/// one in `zmesh_input_refused_total{reason}` (`malformed`, `handshake_failed`) and the
/// snapshot's recent refusals, with the publisher's endpoint; a zmesh subscriber of the same
/// publisher stays ready on its one connection throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w3_publisher_endpoint_refusals_are_counted_like_the_bound_endpoints() {
    let pub_ep = format!("tcp://127.0.0.1:{}", free_port());
    let mut cfg = NodeConfig::new("node-pub");
    cfg.publisher = Some(Endpoint::new(pub_ep.clone()));
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-prom-pub-")
        .tempdir()
        .expect("dir");
    let path = tmp.path().join("node-pub.toml");
    std::fs::write(&path, toml::to_string(&cfg).expect("toml")).expect("write");
    let addr = format!("127.0.0.1:{}", free_port());
    let control = common::ipc("prom-pub-ctl");
    let child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args([
            "node",
            "--metrics",
            &addr,
            "--control",
            &control,
            "--config",
        ])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn zmesh node");
    let _child = Killed(child);
    scrape_until(&addr, "the exporter up", |_| true).await;

    let mut s = NodeConfig::new("node-sub");
    s.subscriptions = vec![Endpoint::new(pub_ep.clone())];
    let sub = Node::start(s).await.expect("subscriber");
    let mut events = Events::new(sub.take_events().expect("events"));
    events
        .wait(STEP, |e| {
            matches!(e, NodeEvent::State(s) if s.state == zmesh::proto::state::ConnState::Ready)
        })
        .await;

    let mut py = common::PyPeer::start(&common::py_script(PUBLISHER_ABUSE, 60), &[&pub_ep]);
    py.until(STEP, "garbage").await;
    let malformed = "zmesh_input_refused_total{reason=\"malformed\"}";
    let handshake = "zmesh_input_refused_total{reason=\"handshake_failed\"}";
    scrape_until(&addr, "2 000 malformed refusals", |b| {
        value_of(b, malformed) >= 2000.0
    })
    .await;
    py.command("tcp");
    py.until(STEP, "sent").await;
    let body = scrape_until(&addr, "41 failed handshakes", |b| {
        value_of(b, handshake) >= 41.0
    })
    .await;
    assert_eq!(value_of(&body, malformed), 2000.0, "{body}");
    assert_eq!(value_of(&body, handshake), 41.0, "{body}");

    let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["status", "--json", "--control", &control])
        .output()
        .expect("zmesh status");
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let refusals = snap["recent_refusals"].as_array().expect("refusals");
    assert_eq!(refusals.len(), 64, "{snap}");
    assert!(
        refusals.iter().all(|r| r["endpoint"] == pub_ep.as_str()),
        "{snap}"
    );
    let count = |reason: &str| refusals.iter().filter(|r| r["reason"] == reason).count();
    assert_eq!(count("handshake_failed"), 41, "{snap}");
    assert_eq!(count("malformed"), 23, "{snap}");

    // The subscriber was spared: still ready on the connection it had.
    let link = sub.snapshot().await.expect("snapshot").links.remove(0);
    assert_eq!(link.state, zmesh::proto::state::ConnState::Ready);
    assert_eq!((link.ready_count, link.failure_count), (1, 0));
    sub.shutdown().await.expect("shutdown");
}
