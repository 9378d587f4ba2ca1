//! Shared helpers for the integration tests: endpoints, a freezing TCP proxy (half-open
//! connections), event waits with an upper bound, and the Python (pyzmq) test peer.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use zmesh::proto::discovery::{Descriptor, MeshEndpoints};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::runtime::store::{Watch, WatchEvent};
use zmesh::runtime::{EventStream, NodeEvent};

#[path = "../../zmesh-cli/src/ports.rs"]
mod ports;

/// A free port on 127.0.0.1, below the kernel's ephemeral range: no outgoing connection takes
/// it between this call and the test's bind (`zmesh-cli/src/ports.rs`).
pub fn free_port() -> u16 {
    ports::free_loopback_port().expect("a free port on 127.0.0.1")
}

/// A free tcp endpoint on 127.0.0.1 ([`free_port`]).
pub fn free_tcp() -> String {
    format!("tcp://127.0.0.1:{}", free_port())
}

/// The descriptor the store contract tests put (tests/discovery_store.rs for SQLite,
/// zmesh-cli/tests/discovery_etcd.rs for etcd): `rid` at `generation`, a Server of "orders"
/// whose RouteMesh endpoints nothing dials.
pub fn desc(rid: &str, generation: u64) -> Descriptor {
    Descriptor {
        rid: rid.into(),
        generation,
        security_identity: rid.into(),
        memberships: vec![Membership {
            role: Role::Server,
            channel: "orders".into(),
        }],
        route_mesh: Some(MeshEndpoints {
            application: "tcp://127.0.0.1:1".into(),
            completion: "tcp://127.0.0.1:2".into(),
        }),
        server: None,
        publishers: Vec::new(),
    }
}

/// The part of the store contract both backends keep alike, on an empty `store`: a put is
/// listed and renewed; a new run's put supersedes the old run's lease, whose removal never
/// deletes the new run's descriptor; the new run's removal empties the store, and its lease
/// is then lost. Returns the first put's lease and its listing, for the checks of one
/// backend (lease ids, lease ages and expiries).
pub async fn put_supersede_remove(
    store: &dyn zmesh::runtime::store::Store,
    ttl: Duration,
) -> (zmesh::runtime::store::Lease, zmesh::runtime::store::Entry) {
    use zmesh::runtime::store::RenewOutcome;
    assert!(store.list().await.expect("empty list").is_empty());
    let lease = store.put(&desc("b", 7), ttl).await.expect("put");
    let listed = store.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].descriptor, desc("b", 7));
    assert_eq!(store.renew(&lease).await, Ok(RenewOutcome::Renewed));
    let newer = store.put(&desc("b", 8), ttl).await.expect("put newer");
    assert_eq!(
        store.renew(&lease).await,
        Ok(RenewOutcome::Superseded { generation: 8 })
    );
    store.remove(&lease).await.expect("remove old");
    assert_eq!(
        store.list().await.expect("list")[0].descriptor.generation,
        8
    );
    store.remove(&newer).await.expect("remove");
    assert!(store.list().await.expect("list").is_empty());
    assert_eq!(store.renew(&newer).await, Ok(RenewOutcome::Lost));
    (lease, listed[0].clone())
}

/// The next event of a store watch; fails the test after `bound`, or if the watch ended.
pub async fn next_watch_event(w: &mut Watch, bound: Duration) -> WatchEvent {
    tokio::time::timeout(bound, w.next())
        .await
        .expect("a watch event within the bound")
        .expect("watch still running")
}

/// A fresh ipc endpoint in one shared directory under the temp directory (one directory for
/// every test process, not one per process left behind by each run; the process id in the
/// name keeps concurrent test binaries apart, and libzmq removes a bound socket's file when
/// it closes).
pub fn ipc(name: &str) -> String {
    let dir = std::env::temp_dir().join("zmesh-test-ipc");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "ipc://{}/{}-{name}-{n}.sock",
        dir.display(),
        std::process::id()
    )
}
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A generation or connection id of the JSON a node prints (`zmesh status --json`, ndjson
/// events): 16 lowercase hex digits; `None` for anything else.
pub fn hex_id(v: &serde_json::Value) -> Option<u64> {
    let s = v.as_str()?;
    let digits = s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    digits.then(|| u64::from_str_radix(s, 16).ok()).flatten()
}

/// How many of the events seen before a failed [`Events::wait`] its panic message shows.
pub const SEEN_KEPT: usize = 64;

/// A boxed event predicate, for [`Events::wait_each`].
pub type EventPred<'a> = Box<dyn Fn(&NodeEvent) -> bool + 'a>;

/// A node's event stream, one event at a time.
pub struct Events {
    rx: EventStream,
    buf: VecDeque<NodeEvent>,
}

impl Events {
    /// Wraps the stream of [`zmesh::runtime::Node::take_events`].
    pub fn new(rx: EventStream) -> Events {
        Events {
            rx,
            buf: VecDeque::new(),
        }
    }

    /// Waits for the first event matching `pred`, up to `limit`; returns it, or panics with
    /// the last [`SEEN_KEPT`] events seen. Events before the match are consumed (a flood of
    /// deliveries while waiting is dropped, not kept).
    pub async fn wait(
        &mut self,
        limit: Duration,
        mut pred: impl FnMut(&NodeEvent) -> bool,
    ) -> NodeEvent {
        let mut seen = VecDeque::new();
        let mut skipped = 0u64;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            while let Some(ev) = self.buf.pop_front() {
                if pred(&ev) {
                    return ev;
                }
                if seen.len() == SEEN_KEPT {
                    seen.pop_front();
                    skipped += 1;
                }
                seen.push_back(ev);
            }
            tokio::select! {
                batch = self.rx.recv() => {
                    self.buf.extend(batch.expect("node event stream ended"));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    panic!("no matching event within {limit:?}; saw {skipped} events, then {seen:#?}");
                }
            }
        }
    }

    /// Waits until every predicate in `preds` has matched an event, in any order (e.g. the
    /// two lanes of one peer, which change state independently), up to `limit` in total.
    pub async fn wait_each(
        &mut self,
        limit: Duration,
        preds: Vec<EventPred<'_>>,
    ) -> Vec<NodeEvent> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut open: Vec<usize> = (0..preds.len()).collect();
        let mut found = Vec::new();
        while !open.is_empty() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let ev = self.wait(left, |e| open.iter().any(|&i| preds[i](e))).await;
            open.retain(|&i| !preds[i](&ev));
            found.push(ev);
        }
        found
    }

    /// Hands every event that arrives during `window` to `f`, then returns: an observation
    /// window (e.g. "nothing leaves ready for 17 s"), not a wait for a condition.
    pub async fn watch(&mut self, window: Duration, mut f: impl FnMut(&NodeEvent)) {
        let deadline = tokio::time::Instant::now() + window;
        for ev in self.buf.drain(..) {
            f(&ev);
        }
        loop {
            tokio::select! {
                batch = self.rx.recv() => {
                    for ev in batch.expect("node event stream ended") {
                        f(&ev);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    /// Events already received, without waiting.
    pub fn drain_now(&mut self) -> Vec<NodeEvent> {
        while let Ok(batch) = self.rx.try_recv() {
            self.buf.extend(batch);
        }
        self.buf.drain(..).collect()
    }
}

/// A TCP proxy on 127.0.0.1 that can stop forwarding without closing anything: both TCP
/// connections stay open and silent, which is a half-open link as far as zmesh can tell.
pub struct FreezeProxy {
    /// The endpoint to dial instead of the upstream.
    pub endpoint: String,
    frozen: Arc<(Mutex<bool>, Condvar)>,
}

impl FreezeProxy {
    /// Starts a proxy forwarding to `upstream` (`tcp://127.0.0.1:port`).
    pub fn start(upstream: &str) -> FreezeProxy {
        let up = upstream.trim_start_matches("tcp://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let endpoint = format!("tcp://{}", listener.local_addr().expect("addr"));
        let frozen = Arc::new((Mutex::new(false), Condvar::new()));
        let f = frozen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(&up) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                for (mut from, mut to) in [
                    (
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                    ),
                    (server, client),
                ] {
                    let f = f.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        loop {
                            let n = match from.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            // Frozen: hold the bytes and both sockets, forward nothing, forever.
                            let (lock, cv) = &*f;
                            let mut frozen = lock.lock().expect("lock");
                            while *frozen {
                                frozen = cv.wait(frozen).expect("wait");
                            }
                            drop(frozen);
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Write);
                    });
                }
            }
        });
        FreezeProxy { endpoint, frozen }
    }

    /// Stops forwarding in both directions; connections stay open.
    pub fn freeze(&self) {
        let (lock, cv) = &*self.frozen;
        *lock.lock().expect("lock") = true;
        cv.notify_all();
    }
}

/// A TCP proxy on 127.0.0.1 that can cut every connection it carries at once (both
/// connections of each pair are shut down, so both ends see the connection close), and keeps
/// accepting and forwarding new ones. The upstream is `tcp://127.0.0.1:port` or `ipc://path`
/// (ZMTP is the same byte stream over both), so the node behind it can be bound on ipc:
/// a proxy's own port is bound once and held, where a `free_tcp` port can be taken by another
/// test between being picked and being bound.
pub struct CutProxy {
    /// The endpoint to dial instead of the upstream.
    pub endpoint: String,
    live: Arc<Mutex<Vec<Stream>>>,
}

/// One side of a proxied connection.
enum Stream {
    Tcp(TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Stream {
    fn connect(upstream: &str) -> std::io::Result<Stream> {
        match upstream.strip_prefix("ipc://") {
            Some(path) => std::os::unix::net::UnixStream::connect(path).map(Stream::Unix),
            None => TcpStream::connect(upstream.trim_start_matches("tcp://")).map(Stream::Tcp),
        }
    }

    fn try_clone(&self) -> std::io::Result<Stream> {
        match self {
            Stream::Tcp(s) => s.try_clone().map(Stream::Tcp),
            Stream::Unix(s) => s.try_clone().map(Stream::Unix),
        }
    }

    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CutProxy {
    /// Starts a proxy forwarding to `upstream`.
    pub fn start(upstream: &str) -> CutProxy {
        let up = upstream.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let endpoint = format!("tcp://{}", listener.local_addr().expect("addr"));
        let live = Arc::new(Mutex::new(Vec::new()));
        let l = live.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let client = Stream::Tcp(client);
                let Ok(server) = Stream::connect(&up) else {
                    client.shutdown(Shutdown::Both);
                    continue;
                };
                let clones = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                );
                let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = clones else {
                    continue;
                };
                l.lock().expect("lock").extend([c3, s3]);
                for (mut from, mut to) in [(client, s2), (server, c2)] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        to.shutdown(Shutdown::Write);
                    });
                }
            }
        });
        CutProxy { endpoint, live }
    }

    /// Shuts down every connection carried so far, both sides, at once; returns how many
    /// connections (pairs) that was.
    pub fn cut(&self) -> usize {
        let conns = std::mem::take(&mut *self.live.lock().expect("lock"));
        for s in &conns {
            s.shutdown(Shutdown::Both);
        }
        conns.len() / 2
    }
}

/// The pyzmq version range the interop tests are written against.
pub const PYZMQ_REQUIREMENT: &str = "pyzmq>=25,<28";

/// The Python interpreter with pyzmq for the libzmq interop tests (MISSION W4).
///
/// `ZMESH_PYTHON` wins when set (`.ci/run` sets it to its `.venv`). Otherwise a venv is made
/// once under `<target dir>/zmesh-pyenv` with `python3 -m venv` and `pip install` of
/// [`PYZMQ_REQUIREMENT`], and its interpreter is returned. Several test threads and test
/// binaries may race here: threads share one [`OnceLock`], and each process builds in a
/// private directory that is renamed into place only when finished (a rename is atomic, so
/// nobody ever sees a half-built venv; the loser of the race uses the winner's venv).
///
/// Panics with what went wrong when no interpreter with pyzmq can be had: the interop tests
/// fail, they never skip silently.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(find_or_make_python) {
        Ok(p) => p.clone(),
        Err(e) => panic!(
            "the libzmq interop tests need Python 3 with {PYZMQ_REQUIREMENT}: {e}\n\
             set ZMESH_PYTHON to such an interpreter, or make `python3 -m venv` and PyPI \
             reachable"
        ),
    }
}

fn find_or_make_python() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("ZMESH_PYTHON") {
        let p = PathBuf::from(p);
        check_pyzmq(&p).map_err(|e| format!("ZMESH_PYTHON={}: {e}", p.display()))?;
        return Ok(p);
    }
    // CARGO_TARGET_TMPDIR is `<target dir>/tmp`; the venv sits beside it, so it follows
    // CARGO_TARGET_DIR and `cargo clean` removes it.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .ok_or("CARGO_TARGET_TMPDIR has no parent")?;
    let venv = target.join("zmesh-pyenv");
    let interpreter = venv.join("bin").join("python");
    if venv.exists() {
        // Only a finished venv is ever renamed to this path.
        return check_pyzmq(&interpreter)
            .map(|_| interpreter.clone())
            .map_err(|e| {
                format!(
                    "{}: {e} (remove {} to have it made again)",
                    interpreter.display(),
                    venv.display()
                )
            });
    }
    let building = target.join(format!("zmesh-pyenv.building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    run(Command::new("python3").args(["-m", "venv"]).arg(&building))?;
    let built = building.join("bin").join("python");
    run(Command::new(&built).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        PYZMQ_REQUIREMENT,
    ]))?;
    check_pyzmq(&built)?;
    // The interpreter finds its venv from its own path (pyvenv.cfg beside bin/), so the venv
    // works under its new name; only pip's script shebangs keep the old one, and pip is
    // always run as `python -m pip`.
    if let Err(e) = std::fs::rename(&building, &venv) {
        let _ = std::fs::remove_dir_all(&building);
        // Another process finished first: use its venv.
        if check_pyzmq(&interpreter).is_err() {
            return Err(format!("cannot move the venv to {}: {e}", venv.display()));
        }
    }
    check_pyzmq(&interpreter)?;
    Ok(interpreter)
}

/// Runs `cmd` to completion; its output becomes the error when it fails.
fn run(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{shown} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn check_pyzmq(python: &Path) -> Result<(), String> {
    run(Command::new(python).args(["-c", "import zmq; assert zmq.pyzmq_version_info() >= (25,)"]))
}

/// A Python test peer: a script run with [`python()`] as a child process. It reports by
/// printing one JSON object per line on stdout and takes commands as lines on stdin. The
/// child is killed when this is dropped.
pub struct PyPeer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl PyPeer {
    /// Runs `script` (Python source) with `args` as `sys.argv[1:]`.
    pub fn start(script: &str, args: &[&str]) -> PyPeer {
        let mut child = Command::new(python())
            .arg("-u")
            .arg("-c")
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the Python peer");
        let stdin = child.stdin.take();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().expect("stderr lock").push_str(&text);
            }
        });
        PyPeer {
            child,
            stdin,
            lines,
            stderr,
        }
    }

    /// The next JSON line the script printed, waiting at most `limit`; panics (with the
    /// script's stderr) if none comes or the script ended.
    pub async fn next(&mut self, limit: Duration) -> serde_json::Value {
        let line = match tokio::time::timeout(limit, self.lines.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!("the Python peer ended; stderr:\n{}", self.stderr()),
            Err(_) => panic!(
                "no line from the Python peer within {limit:?}; stderr:\n{}",
                self.stderr()
            ),
        };
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }

    /// The next JSON line that has the key `key`, waiting at most `limit` in all; lines
    /// before it are returned too, in order, so the caller can check them.
    pub async fn until(
        &mut self,
        limit: Duration,
        key: &str,
    ) -> (serde_json::Value, Vec<serde_json::Value>) {
        let deadline = tokio::time::Instant::now() + limit;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let v = self.next(left).await;
            if v.get(key).is_some() {
                return (v, before);
            }
            before.push(v);
        }
    }

    /// Sends one command line to the script.
    pub fn command(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}")
            .and_then(|_| stdin.flush())
            .expect("write to the Python peer");
    }

    /// What the script wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }
}

impl Drop for PyPeer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Server membership of `channel`.
pub fn server_of(channel: &str) -> Vec<zmesh::proto::handshake::Membership> {
    vec![zmesh::proto::handshake::Membership {
        role: zmesh::proto::handshake::Role::Server,
        channel: channel.into(),
    }]
}

/// An Object Client membership of `channel`.
pub fn client_of(channel: &str) -> Vec<zmesh::proto::handshake::Membership> {
    vec![zmesh::proto::handshake::Membership {
        role: zmesh::proto::handshake::Role::ObjectClient,
        channel: channel.into(),
    }]
}

/// Two RouteMesh lane endpoints, on 127.0.0.1 tcp or on ipc.
pub fn mesh_bind(tcp: bool) -> zmesh::config::RouteMeshBind {
    if tcp {
        zmesh::config::RouteMeshBind::new(free_tcp(), free_tcp())
    } else {
        zmesh::config::RouteMeshBind::new(ipc("app"), ipc("cpl"))
    }
}

/// A RouteMesh node `rid` serving `channel` (a [`server_of`] membership), bound at `bind`:
/// the acceptor most tests start.
pub fn mesh_server(
    rid: impl Into<String>,
    channel: &str,
    bind: &zmesh::config::RouteMeshBind,
) -> zmesh::config::NodeConfig {
    let mut config = zmesh::config::NodeConfig::new(rid);
    config.memberships = server_of(channel);
    config.route_mesh = Some(bind.clone());
    config
}

/// A RouteMesh peer to dial at `b`'s endpoints.
pub fn peer(rid: &str, b: &zmesh::config::RouteMeshBind) -> zmesh::config::PeerConfig {
    zmesh::config::PeerConfig::new(rid, b.application.clone(), b.completion.clone())
}

/// Starts a node from `config`, takes its event stream and waits (bounded) until its
/// RouteMesh peer `rid` is ready on both lanes.
pub async fn start_ready(
    config: zmesh::config::NodeConfig,
    rid: &str,
) -> (zmesh::runtime::Node, Events) {
    let node = zmesh::runtime::Node::start(config)
        .await
        .unwrap_or_else(|e| panic!("start {rid}'s dialler: {e}"));
    let mut events = Events::new(node.take_events().expect("events"));
    wait_peer_ready(&node, &mut events, rid).await;
    (node, events)
}

/// Starts a node `rid` that dials the RouteMesh node `to` bound at `bind`, takes its event
/// stream and waits (bounded) until `to` is ready on both lanes.
pub async fn dial_ready(
    rid: &str,
    to: &str,
    bind: &zmesh::config::RouteMeshBind,
) -> (zmesh::runtime::Node, Events) {
    let mut config = zmesh::config::NodeConfig::new(rid);
    config.peers = vec![peer(to, bind)];
    start_ready(config, to).await
}

/// Starts a node `rid` with one ClientServer server, `channel` at `endpoint` (which must
/// present `server_rid`), takes its event stream and waits (bounded) until that link is
/// ready.
pub async fn start_client_ready(
    rid: &str,
    channel: &str,
    endpoint: &str,
    server_rid: &str,
) -> (zmesh::runtime::Node, Events) {
    start_client_of(
        rid,
        zmesh::config::ServerConfig::new(channel, endpoint).rid(server_rid),
    )
    .await
}

/// Starts a node `rid` whose one ClientServer server is `server`, takes its event stream and
/// waits (bounded) until the link to that server is ready.
pub async fn start_client_of(
    rid: &str,
    server: zmesh::config::ServerConfig,
) -> (zmesh::runtime::Node, Events) {
    let link = format!("server {}", server.channel);
    let mut config = zmesh::config::NodeConfig::new(rid);
    config.servers = vec![server];
    let node = zmesh::runtime::Node::start(config)
        .await
        .unwrap_or_else(|e| panic!("start client {rid}: {e}"));
    let mut events = Events::new(node.take_events().expect("events"));
    events
        .wait(Duration::from_secs(10), |e| {
            matches!(e, NodeEvent::State(s) if s.link.starts_with(&link)
                && s.state == zmesh::proto::state::ConnState::Ready)
        })
        .await;
    (node, events)
}

/// Waits (bounded) until `rid`'s two RouteMesh lanes are ready in `node`'s snapshot.
pub async fn wait_peer_ready(node: &zmesh::runtime::Node, events: &mut Events, rid: &str) {
    let step = Duration::from_secs(10);
    let limit = tokio::time::Instant::now() + step;
    loop {
        let snap = node.snapshot().await.expect("snapshot");
        let ready = snap
            .peer(rid)
            .filter(|l| l.state == zmesh::proto::state::ConnState::Ready)
            .count();
        if ready == 2 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < limit,
            "peer {rid} not ready: {}",
            snap.to_table()
        );
        events
            .wait(step, |e| matches!(e, NodeEvent::State(_)))
            .await;
    }
}

/// `try_send`s records `record(0)`, `record(1)`, ... to `peer` on `channel` until the link's
/// zmesh queue stays full: `WouldBlock` 20 times in a row, 20 ms apart (the I/O thread drains
/// the queue into libzmq until the pipe towards a peer that reads nothing is full). Returns
/// how many records were taken. The data-path tests make such a peer with a paused application
/// queue: its link's backlog fills, its socket is not read, the pipe fills.
pub async fn fill_link(
    node: &zmesh::runtime::Node,
    peer: &str,
    channel: &str,
    record: impl Fn(u64) -> bytes::Bytes,
) -> u64 {
    let mut taken = 0u64;
    let mut refused_in_row = 0;
    loop {
        match node.try_send(peer, channel, record(taken)) {
            Ok(()) => {
                taken += 1;
                refused_in_row = 0;
            }
            Err(zmesh::runtime::SendError::WouldBlock(who)) => {
                assert_eq!(who, peer);
                refused_in_row += 1;
                if refused_in_row == 20 {
                    return taken;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("try_send to {peer} failed: {e}"),
        }
        assert!(taken < 1_000_000, "the link to {peer} never filled up");
    }
}

/// Helpers shared by the Python peers: the byte forms of WIRE.md §1 and §3.
pub const PY_PRELUDE: &str = r#"
import json, queue, struct, sys, threading, time
import zmq

DEADLINE = time.monotonic() + LIFETIME

def emit(**kv):
    print(json.dumps(kv), flush=True)

def u16(n): return struct.pack(">H", n)
def u64(n): return struct.pack(">Q", n)
def string(s):
    b = s.encode("utf-8")
    return u16(len(b)) + b
def envelope(kind): return bytes([0x5A, 0x4D, 0x01, kind])

BEACON_TOPIC = bytes([0x01, 0x5A, 0x4C, 0x46, 0x31])
BEACON_PAYLOAD = bytes([0x5A, 0x46, 0x01, 0x01])

class Reader:
    def __init__(self, b): self.b, self.i = b, 0
    def take(self, n):
        if self.i + n > len(self.b): raise ValueError("truncated")
        self.i += n
        return self.b[self.i - n:self.i]
    def u8(self): return self.take(1)[0]
    def u16(self): return struct.unpack(">H", self.take(2))[0]
    def u64(self): return struct.unpack(">Q", self.take(8))[0]
    def string(self): return self.take(self.u16()).decode("utf-8")
    def done(self): return self.i == len(self.b)

def stdin_commands():
    """Lines of stdin as lists of words; None once stdin is closed."""
    q = queue.Queue()
    def read():
        for line in sys.stdin:
            q.put(line.split())
        q.put(None)
    threading.Thread(target=read, daemon=True).start()
    return q
"#;

/// A Python peer's script: [`PY_PRELUDE`] (which stops the peer after `lifetime_s` seconds
/// through its `DEADLINE`) followed by `body`.
pub fn py_script(body: &str, lifetime_s: u32) -> String {
    PY_PRELUDE.replace("LIFETIME", &lifetime_s.to_string()) + body
}

/// A raw libzmq DEALER connected to `ep`, with a PAIR socket that receives its monitor
/// events: not a zmesh node, it never sends anything on its own. `n` names the monitor's
/// inproc endpoint, so it differs between the dealers of one context.
pub fn monitored_dealer(ctx: &zmq::Context, ep: &str, n: usize) -> (zmq::Socket, zmq::Socket) {
    let d = ctx.socket(zmq::DEALER).expect("dealer");
    d.set_linger(0).expect("linger");
    let mon_ep = format!("inproc://raw-dealer-mon-{n}");
    d.monitor(&mon_ep, zmq::SocketEvent::ALL as i32)
        .expect("monitor");
    let mon = ctx.socket(zmq::PAIR).expect("pair");
    mon.connect(&mon_ep).expect("connect monitor");
    d.connect(ep).expect("connect");
    (d, mon)
}

/// Waits, within `bound`, for a monitor event of `kinds` on `mon` (libzmq's raw monitor
/// messages); returns it.
pub fn monitor_wait(
    mon: &zmq::Socket,
    kinds: &[zmq::SocketEvent],
    bound: Duration,
) -> zmq::SocketEvent {
    let deadline = std::time::Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(
            !left.is_zero(),
            "no monitor event {kinds:?} within {bound:?}"
        );
        if mon
            .poll(zmq::POLLIN, left.as_millis() as i64)
            .expect("poll")
            == 0
        {
            continue;
        }
        let frames = mon.recv_multipart(0).expect("monitor");
        let ev = zmq::SocketEvent::from_raw(u16::from_ne_bytes([frames[0][0], frames[0][1]]));
        if kinds.contains(&ev) {
            return ev;
        }
    }
}

/// Closes a [`monitored_dealer`], then its monitor once libzmq reported the socket destroyed
/// (within `bound`): a monitor closed sooner blocks libzmq's reaper, and the socket and its
/// connection would never close (LIBZMQ-NOTES).
pub fn close_monitored((d, mon): (zmq::Socket, zmq::Socket), bound: Duration) {
    drop(d);
    monitor_wait(&mon, &[zmq::SocketEvent::MONITOR_STOPPED], bound);
}

/// A raw libzmq ROUTER bound on a fresh 127.0.0.1 port, reading with a `read_ms` bound: a
/// ClientServer server the test plays itself with this crate's record codec (a version-1
/// peer unless its WELCOME announces capabilities). Returns the socket and its endpoint.
///
/// A send to a connection whose queue is full waits (up to `read_ms`) instead of being
/// dropped, as a plain ROUTER does at its high-water mark: a test that sends a burst of a
/// thousand records gets them all to the client, whatever the machine's load. Both options
/// are set before the bind, because a listener copies the socket's options when it is made.
pub fn raw_router(ctx: &zmq::Context, read_ms: i32) -> (zmq::Socket, String) {
    let ep = free_tcp();
    let s = ctx.socket(zmq::ROUTER).expect("router");
    s.set_linger(0).expect("linger");
    s.set_rcvtimeo(read_ms).expect("rcvtimeo");
    s.set_router_mandatory(true).expect("router mandatory");
    s.set_sndtimeo(read_ms).expect("sndtimeo");
    s.bind(&ep).expect("bind");
    (s, ep)
}

/// Sends `rec` to the connection `route` of a raw ROUTER; false if libzmq refused it.
pub fn raw_send(s: &zmq::Socket, route: &[u8], rec: zmesh::proto::wire::Record) -> bool {
    let mut out = vec![route.to_vec()];
    out.extend(rec.encode());
    s.send_multipart(out.iter(), 0).is_ok()
}

/// The HELLO of a raw ClientServer client `rid` (generation 1), an Object Client of
/// `channel`, offering the capabilities named in `capabilities` (WIRE.md §8.1; none: exactly
/// version 1).
pub fn raw_hello(rid: &str, channel: &str, capabilities: &[&str]) -> zmesh::proto::wire::Record {
    use zmesh::proto::wire::{self, Hello, Label, Lane, Memberships, Name, Record, Role};
    let mut list = vec![wire::Membership {
        role: Role::ObjectClient,
        channel: Name::new(channel).expect("channel"),
    }];
    list.extend(capabilities.iter().map(|c| wire::Membership {
        role: Role::ObjectClient,
        channel: Name::new(format!("\0{c}")).expect("extension entry"),
    }));
    Record::Hello(Hello {
        lane: Lane::ClientServer,
        rid: Name::new(rid).expect("rid"),
        generation: std::num::NonZeroU64::MIN,
        security_identity: Label::default(),
        expect_rid: None,
        expect_generation: None,
        config_generation: 0,
        memberships: Memberships::new(list).expect("memberships"),
    })
}

/// A raw libzmq ClientServer client of `channel` at `ep`: a DEALER (linger 0, receives wait
/// at most 15 s) that has sent the HELLO of [`raw_hello`] as `rid`, offering `capabilities`.
pub fn raw_client(
    ctx: &zmq::Context,
    ep: &str,
    rid: &str,
    channel: &str,
    capabilities: &[&str],
) -> zmq::Socket {
    let d = ctx.socket(zmq::DEALER).expect("dealer");
    d.set_linger(0).expect("linger");
    d.set_rcvtimeo(15_000).expect("rcvtimeo");
    d.connect(ep).expect("connect");
    d.send_multipart(raw_hello(rid, channel, capabilities).encode().iter(), 0)
        .expect("hello");
    d
}

/// The next record on raw socket `d` (within its receive timeout), decoded with the
/// capabilities `caps` in effect, and its frames exactly as they came.
pub fn raw_recv(
    d: &zmq::Socket,
    caps: zmesh::proto::wire::Capabilities,
) -> (Vec<Vec<u8>>, zmesh::proto::wire::Record) {
    let frames = d.recv_multipart(0).expect("a record within 15 s");
    let rec =
        zmesh::proto::wire::Record::decode_in(&frames, caps, |f| bytes::Bytes::copy_from_slice(f))
            .expect("a record this connection's capabilities allow");
    (frames, rec)
}

/// The WELCOME of a raw ClientServer server `srv` of `channel`, announcing the capabilities
/// named in `capabilities` (WIRE.md §8.1; none: exactly version 1).
pub fn raw_welcome(channel: &str, capabilities: &[&str]) -> zmesh::proto::wire::Record {
    use zmesh::proto::wire::{self, Label, Lane, Memberships, Name, Record, Role, Welcome};
    let mut list = vec![wire::Membership {
        role: Role::Server,
        channel: Name::new(channel).expect("channel"),
    }];
    list.extend(capabilities.iter().map(|c| wire::Membership {
        role: Role::ObjectClient,
        channel: Name::new(format!("\0{c}")).expect("extension entry"),
    }));
    Record::Welcome(Welcome {
        lane: Lane::ClientServer,
        rid: Name::new("srv").expect("rid"),
        generation: std::num::NonZeroU64::MIN,
        security_identity: Label::new("srv").expect("label"),
        memberships: Memberships::new(list).expect("memberships"),
    })
}
