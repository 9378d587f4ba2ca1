//! P6: how long a node takes to take a peer out of ready.
//!
//! - Orderly close: the peer node (in this process) shuts down; clock from the
//!   `Node::shutdown` call to the dialling node's failure event.
//! - Killed process: the peer is a `zmesh node` child process; clock from SIGKILL to the
//!   failure event.
//! - Half-open: the Application lane runs through a TCP proxy that stops forwarding without
//!   closing anything. The proxy freezes itself right after it forwarded an ACK to the
//!   dialling node, so the clock starts at the last valid ACK; the contract says the deadline
//!   is 15 s after it (MISSION L1, L2).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zmesh::proto::state::FailureReason;
use zmesh::runtime::{Node, NodeEvent};

use super::{
    client_config, is_failure, millis, server_config, spawn_tcp_proxy, wait_event, wait_ready,
    Pair, Plan, Series,
};

/// Longest wait for a failure event (the half-open deadline is 15 s).
const DETECT_LIMIT: Duration = Duration::from_secs(30);

/// The failure event of `link`, and when it was taken from the event stream.
async fn failure(
    events: &mut zmesh::runtime::EventStream,
    link: &str,
) -> Result<(FailureReason, Instant)> {
    let ev = wait_event(events, DETECT_LIMIT, &format!("failure of {link}"), |e| {
        is_failure(e, link)
    })
    .await?;
    let at = Instant::now();
    match ev {
        NodeEvent::State(s) => Ok((s.reason.context("a failure has a reason")?, at)),
        _ => anyhow::bail!("not a state change"),
    }
}

/// Orderly close, `plan.runs` times; milliseconds.
pub(crate) async fn orderly(plan: &Plan) -> Result<Series> {
    let mut s = Series::default();
    for run in 0..plan.runs {
        let Pair { a, b, mut ea, eb } = Pair::mesh().await?;
        let t0 = Instant::now();
        let stopping = tokio::spawn(async move {
            let r = b.shutdown().await;
            drop(eb);
            r
        });
        let (reason, at) = failure(&mut ea, "peer b").await?;
        anyhow::ensure!(
            reason == FailureReason::OrderlyClose,
            "orderly close reported as {reason}"
        );
        let ms = millis(at.duration_since(t0));
        eprintln!("P6 orderly close run {}: {ms:.1} ms", run + 1);
        s.push(ms);
        stopping.await??;
        a.shutdown().await?;
    }
    Ok(s)
}

/// Killed process, `plan.runs` times; milliseconds.
pub(crate) async fn killed(plan: &Plan) -> Result<Series> {
    let mut s = Series::default();
    let dir = std::env::temp_dir().join(format!("zmesh-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for run in 0..plan.runs {
        let b = server_config("kb")?;
        let bind = b.route_mesh.clone().context("kb binds")?;
        let path = dir.join(format!("kb-{run}.toml"));
        std::fs::write(&path, toml::to_string(&b)?)?;
        let mut child = ChildGuard(
            Command::new(std::env::current_exe()?)
                .args(["node", "--events", "ndjson", "--config"])
                .arg(&path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .context("spawning zmesh node")?,
        );
        let a = Node::start(client_config("a", "kb", &bind)).await?;
        let mut ea = a.take_events().context("events")?;
        wait_ready(
            &mut ea,
            &["peer kb application".into(), "peer kb completion".into()],
        )
        .await?;
        let t0 = Instant::now();
        child.0.kill().context("SIGKILL")?;
        let (reason, at) = failure(&mut ea, "peer kb").await?;
        anyhow::ensure!(
            reason == FailureReason::TransportError,
            "killed peer reported as {reason}"
        );
        let ms = millis(at.duration_since(t0));
        eprintln!("P6 killed process run {}: {ms:.1} ms", run + 1);
        s.push(ms);
        let _ = child.0.wait();
        a.shutdown().await?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(s)
}

/// Kills the child when dropped (an error path must not leave a node running).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Half-open detection times, milliseconds.
pub(crate) struct HalfOpen {
    /// From the last ACK the dialling node received to its deadline failure.
    pub after_ack: Series,
    /// From the freeze to the failure (the freeze follows the ACK within microseconds).
    pub after_freeze: Series,
}

/// Half-open, `plan.runs` times.
pub(crate) async fn half_open(plan: &Plan) -> Result<HalfOpen> {
    let mut h = HalfOpen {
        after_ack: Series::default(),
        after_freeze: Series::default(),
    };
    for run in 0..plan.runs {
        let b_cfg = server_config("hb")?;
        let bind = b_cfg.route_mesh.clone().context("hb binds")?;
        let proxy = FreezeProxy::start(&bind.application)?;
        let b = Node::start(b_cfg).await?;
        let mut a_cfg = client_config("ha", "hb", &bind);
        a_cfg.peers[0].application = proxy.endpoint.clone();
        let a = Node::start(a_cfg).await?;
        let mut ea = a.take_events().context("events")?;
        // The proxy freezes after the first ACK it forwards to `ha` (the answer to the probe
        // sent when the lane became ready); wait for the failure that follows.
        let (reason, at) = failure(&mut ea, "peer hb application").await?;
        anyhow::ensure!(
            reason == FailureReason::DeadlineExceeded,
            "half-open reported as {reason}"
        );
        let (acked, frozen) = proxy.frozen_at().context("the proxy never froze")?;
        let (after_ack, after_freeze) = (
            millis(at.duration_since(acked)),
            millis(at.duration_since(frozen)),
        );
        eprintln!(
            "P6 half-open run {}: {after_ack:.1} ms after the last ACK ({after_freeze:.1} ms after the freeze)",
            run + 1
        );
        h.after_ack.push(after_ack);
        h.after_freeze.push(after_freeze);
        a.shutdown().await?;
        b.shutdown().await?;
        proxy.stop();
    }
    Ok(h)
}

/// An ACK frame on the wire as the dialling node receives it: ZMTP flags (final, short), size
/// 12, then the envelope 5A 4D 01 05 (WIRE.md: ACK).
const ACK_ON_WIRE: [u8; 6] = [0x00, 0x0C, 0x5A, 0x4D, 0x01, 0x05];

#[derive(Default)]
struct ProxyState {
    frozen: bool,
    stopped: bool,
    /// When the ACK that triggered the freeze was forwarded, and when the freeze began.
    frozen_at: Option<(Instant, Instant)>,
}

/// A TCP proxy on 127.0.0.1 that freezes (forwards nothing more, closes nothing) right after
/// it forwarded the first ACK from the upstream to the dialler.
struct FreezeProxy {
    endpoint: String,
    state: Arc<(Mutex<ProxyState>, Condvar)>,
    stop: Arc<AtomicBool>,
}

impl FreezeProxy {
    fn start(upstream: &str) -> Result<FreezeProxy> {
        let state = Arc::new((Mutex::new(ProxyState::default()), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let st = state.clone();
        // Only the upstream's direction is watched for the ACK.
        let endpoint = spawn_tcp_proxy(upstream, stop.clone(), move |from, to, watch| {
            forward(from, to, watch, &st)
        })?;
        Ok(FreezeProxy {
            endpoint,
            state,
            stop,
        })
    }

    /// (ACK forwarded, freeze began), once frozen.
    fn frozen_at(&self) -> Option<(Instant, Instant)> {
        self.state.0.lock().ok()?.frozen_at
    }

    /// Ends the proxy: forwarding threads end when their connections close.
    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(mut s) = self.state.0.lock() {
            s.stopped = true;
        }
        self.state.1.notify_all();
    }
}

impl Drop for FreezeProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Copies `from` to `to` until either closes; holds everything while frozen. With `watch`,
/// freezes right after forwarding a chunk that completes an ACK frame.
fn forward(
    mut from: TcpStream,
    mut to: TcpStream,
    watch: bool,
    state: &(Mutex<ProxyState>, Condvar),
) {
    let mut buf = [0u8; 16384];
    // The last bytes of the previous chunk, so a frame split across reads is still seen.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let (lock, cv) = state;
            let Ok(mut s) = lock.lock() else { break };
            while s.frozen && !s.stopped {
                s = match cv.wait(s) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            }
            if s.stopped {
                break;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if watch {
            tail.extend_from_slice(&buf[..n]);
            let acked = tail.windows(ACK_ON_WIRE.len()).any(|w| w == ACK_ON_WIRE);
            let keep = tail.len().saturating_sub(ACK_ON_WIRE.len() - 1);
            tail.drain(..keep);
            if acked {
                let at = Instant::now();
                let (lock, _) = state;
                if let Ok(mut s) = lock.lock() {
                    if !s.frozen && s.frozen_at.is_none() {
                        s.frozen = true;
                        s.frozen_at = Some((at, Instant::now()));
                    }
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
