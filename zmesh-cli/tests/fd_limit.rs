//! A node that runs out of file descriptors says so, with the real cause and its
//! figures, on the link that could not open its socket (reason `resource_exhausted`),
//! retries it with the normal backoff, logs one warning per episode, and recovers once
//! descriptors are free again; a node whose limit is below what its configuration needs
//! says so at start, and one that cannot open its bound sockets fails with that message.
//!
//! The node under test is a real `zmesh node` process started by `bash -c 'ulimit -n N; exec
//! zmesh node ...'`, so its limit is its own (the node raises its soft limit to the hard
//! one, which `ulimit -n` set to N as well). Linux only: the test reads `/proc/<pid>/fd`.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{mesh_bind, mesh_server, peer};
use zmesh::config::NodeConfig;

/// Upper bound on every wait for the child's output.
const WAIT: Duration = Duration::from_secs(30);
/// The phrase of the episode warning (one per episode).
const EPISODE_LINE: &str = "cannot open sockets:";
/// The phrase of the debug line of each failed attempt.
const ATTEMPT_LINE: &str = "socket not opened:";

/// Lines a child printed on stdout and stderr, with a condition variable to wait on.
#[derive(Default)]
struct Output {
    lines: Mutex<(Vec<String>, Vec<String>)>,
    more: Condvar,
}

impl Output {
    /// Waits (up to [`WAIT`]) until `pred(stdout, stderr)` holds; panics with both if not.
    fn wait(&self, what: &str, pred: impl Fn(&[String], &[String]) -> bool) {
        let deadline = Instant::now() + WAIT;
        let mut g = self.lines.lock().expect("lines");
        loop {
            if pred(&g.0, &g.1) {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{what}: not seen within {WAIT:?}\nstdout:\n{}\nstderr:\n{}",
                g.0.join("\n"),
                g.1.join("\n")
            );
            g = self.more.wait_timeout(g, left).expect("lines").0;
        }
    }

    fn stderr_count(&self, phrase: &str) -> usize {
        let g = self.lines.lock().expect("lines");
        g.1.iter().filter(|l| l.contains(phrase)).count()
    }

    fn stderr(&self) -> String {
        self.lines.lock().expect("lines").1.join("\n")
    }
}

/// A `zmesh node` child under `ulimit -n limit`; killed when dropped (by `Drop`, before the
/// fields drop, so the directory goes after the child).
struct Limited {
    child: Child,
    out: Arc<Output>,
    _dir: tempfile::TempDir,
}

impl Limited {
    fn start(limit: u32, cfg: &NodeConfig) -> Limited {
        let dir = tempfile::Builder::new()
            .prefix(&format!("zmesh-fd-limit-{}-{limit}-", cfg.rid))
            .tempdir()
            .expect("temp dir");
        let path = dir.path().join("node.toml");
        std::fs::write(&path, toml::to_string(cfg).expect("config as toml")).expect("write");
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_zmesh"))
            .args(["node", "--events", "ndjson", "--config"])
            .arg(&path)
            .env("ZMESH_LOG", "warn,zmesh::runtime::io::exhaustion=debug")
            .env("NO_COLOR", "1")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn zmesh node under ulimit");
        let out = Arc::new(Output::default());
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        for (pipe, is_err) in [
            (Box::new(stdout) as Box<dyn std::io::Read + Send>, false),
            (Box::new(stderr), true),
        ] {
            let out = out.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    let mut g = out.lines.lock().expect("lines");
                    if is_err {
                        g.1.push(line);
                    } else {
                        g.0.push(line);
                    }
                    out.more.notify_all();
                }
            });
        }
        Limited {
            child,
            out,
            _dir: dir,
        }
    }

    /// Descriptors the child has open now.
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Waits (bounded) for the child to exit; its status.
    fn exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the node did not exit");
            // Poll the child's state, bounded by the deadline above.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An event line of the child: `state` of `link`, with `reason` if given.
fn is_state(line: &str, link: &str, state: &str, reason: Option<&str>) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
        return false;
    };
    v["event"] == "state"
        && v["link"] == link
        && v["state"] == state
        && reason.is_none_or(|r| v["reason"] == r)
}

fn detail_of(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn route_mesh_node(rid: &str) -> NodeConfig {
    mesh_server(rid, "orders", &mesh_bind(true))
}

/// A node whose limit is below what its configuration needs says so at start, and its links
/// (RouteMesh lanes and a fanout subscription) that cannot open a socket show
/// `resource_exhausted` with the figures ("too many open
/// files: N of 64"), never "Bad address"; a node that cannot even open its bound sockets
/// fails at start with that message.
#[cfg(target_os = "linux")]
#[test]
fn a_limit_below_the_configuration_is_named_at_start() {
    let mut cfg = route_mesh_node("small");
    // 40 dialled connections at about 7 descriptors each, and nobody listening: the
    // sockets exist all the same (libzmq keeps trying to connect).
    cfg.peers = (0..20)
        .map(|i| peer(&format!("p{i}"), &mesh_bind(true)))
        .collect();
    // And fanout subscriptions, whose SUB sockets fail the same way.
    let sub = common::free_tcp();
    cfg.subscriptions = vec![zmesh::config::Endpoint::new(sub.clone())];
    let node = Limited::start(64, &cfg);
    node.out.wait("the start-time warning", |_, err| {
        err.iter().any(|l| {
            l.contains(
                "the file descriptor limit (64) is below what this node's configuration needs",
            )
        })
    });
    node.out
        .wait("a link failing with resource_exhausted", |out, _| {
            out.iter().any(|l| {
                is_state(
                    l,
                    "peer p19 completion",
                    "reconnecting",
                    Some("resource_exhausted"),
                ) && detail_of(l).starts_with("too many open files: ")
                    && detail_of(l).contains(" of 64")
            })
        });
    let sub_link = format!("sub {sub}");
    node.out.wait(
        "a subscription failing with resource_exhausted",
        |out, _| {
            out.iter().any(|l| {
                is_state(l, &sub_link, "reconnecting", Some("resource_exhausted"))
                    && detail_of(l).starts_with("too many open files: ")
            })
        },
    );
    // The warning of the episode (stderr is read on a thread of its own: it may come in
    // after the event on stdout).
    node.out.wait("the episode warning", |_, err| {
        err.iter().any(|l| l.contains(EPISODE_LINE))
    });
    let stderr = node.out.stderr();
    assert!(!stderr.contains("Bad address"), "{stderr}");
    assert_eq!(node.out.stderr_count(EPISODE_LINE), 1, "{stderr}");
    drop(node);

    // Too few descriptors for the bound sockets (and the libzmq context they need).
    let mut tiny = Limited::start(20, &route_mesh_node("tiny"));
    let status = tiny.exit();
    // Its stderr is read on a thread of its own: the last lines may come in after the exit.
    tiny.out.wait("the start-up failure", |_, err| {
        err.iter().any(|l| l.contains("cannot open"))
    });
    let stderr = tiny.out.stderr();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot open") && stderr.contains("too many open files: "),
        "{stderr}"
    );
    assert!(stderr.contains(" of 20"), "{stderr}");
    assert!(!stderr.contains("Bad address"), "{stderr}");
}

/// A node at its limit (inbound TCP connections hold its last descriptors) whose peer
/// restarts: the redials fail with `resource_exhausted` and the real cause, one warning for
/// the whole episode however often they are retried, and the links are ready again once
/// the inbound connections go away and free their descriptors.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_is_named_logged_once_and_recovered_from() {
    const LIMIT: u32 = 96;
    let srv_cfg = route_mesh_node("srv");
    let srv_bind = srv_cfg.route_mesh.clone().expect("binds");
    let srv = zmesh::runtime::Node::start(srv_cfg.clone())
        .await
        .expect("start srv");
    let mut cfg = route_mesh_node("x");
    cfg.peers = vec![peer("srv", &srv_bind)];
    let inbound = cfg
        .route_mesh
        .as_ref()
        .map(|b| b.application.trim_start_matches("tcp://").to_owned())
        .expect("binds");
    let node = Limited::start(LIMIT, &cfg);
    let lanes = ["peer srv application", "peer srv completion"];
    node.out.wait("both lanes ready", |out, _| {
        lanes
            .iter()
            .all(|lane| out.iter().any(|l| is_state(l, lane, "ready", None)))
    });
    // Inbound TCP connections that never speak take the node's last descriptors; more wait
    // in the listen backlog, to take every descriptor that frees up.
    let mut hogs = Vec::new();
    let mut extra = 0;
    let limit = usize::try_from(LIMIT).expect("limit");
    while hogs.len() < 300 && extra < 40 {
        let addr = inbound.parse().expect("socket address");
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => hogs.push(s),
            Err(_) => break,
        }
        if node.fds() + 1 >= limit {
            extra += 1;
        }
    }
    assert!(node.fds() + 1 >= limit, "{} of {LIMIT} open", node.fds());
    // The peer goes away (an orderly close): both lanes fail and are redialled, and the
    // redials find no descriptor.
    srv.shutdown().await.expect("srv shutdown");
    let out = node.out.clone();
    tokio::task::spawn_blocking(move || {
        out.wait("a redial failing with resource_exhausted", |out, _| {
            out.iter().any(|l| {
                lanes
                    .iter()
                    .any(|lane| is_state(l, lane, "reconnecting", Some("resource_exhausted")))
                    && detail_of(l).starts_with("too many open files: ")
            })
        });
        // Retried with the backoff, several times.
        out.wait("three failed attempts", |_, err| {
            err.iter().filter(|l| l.contains(ATTEMPT_LINE)).count() >= 3
        });
    })
    .await
    .expect("wait");
    assert_eq!(
        node.out.stderr_count(EPISODE_LINE),
        1,
        "{}",
        node.out.stderr()
    );
    // The peer is back, and the inbound connections go away: descriptors are free again.
    let srv = zmesh::runtime::Node::start(srv_cfg)
        .await
        .expect("restart srv");
    let failed_at = node.out.lines.lock().expect("lines").0.len();
    drop(hogs);
    let out = node.out.clone();
    tokio::task::spawn_blocking(move || {
        out.wait("both lanes ready again", |out, _| {
            lanes.iter().all(|lane| {
                out.iter()
                    .skip(failed_at)
                    .any(|l| is_state(l, lane, "ready", None))
            })
        });
    })
    .await
    .expect("wait");
    let stderr = node.out.stderr();
    assert_eq!(node.out.stderr_count(EPISODE_LINE), 1, "{stderr}");
    assert!(!stderr.contains("Bad address"), "{stderr}");
    srv.shutdown().await.expect("srv shutdown");
}
