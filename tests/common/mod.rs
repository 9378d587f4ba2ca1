//! Shared helpers for the integration tests: endpoints, a freezing TCP proxy (half-open
//! connections), event waits with an upper bound, and the Python test peer.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use zmesh::runtime::{EventStream, NodeEvent};

/// A free tcp endpoint on 127.0.0.1.
pub fn free_tcp() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    format!("tcp://127.0.0.1:{}", l.local_addr().expect("addr").port())
}

/// A fresh ipc endpoint in the temp directory.
pub fn ipc(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("zmesh-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("ipc://{}/{name}-{n}.sock", dir.display())
}
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
    /// what was seen. Events before the match are consumed.
    pub async fn wait(
        &mut self,
        limit: Duration,
        mut pred: impl FnMut(&NodeEvent) -> bool,
    ) -> NodeEvent {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            while let Some(ev) = self.buf.pop_front() {
                if pred(&ev) {
                    return ev;
                }
                seen.push(ev);
            }
            tokio::select! {
                batch = self.rx.recv() => {
                    self.buf.extend(batch.expect("node event stream ended"));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    panic!("no matching event within {limit:?}; saw {seen:#?}");
                }
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

/// The Python interpreter with pyzmq, from `ZMESH_PYTHON` (set by `.ci/run`).
pub fn python() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("ZMESH_PYTHON")?);
    p.exists().then_some(p)
}
