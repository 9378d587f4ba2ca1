//! K5: what batching buys on the wire. 300 small calls issued concurrently (one task each,
//! all at once: "reading three hundred tags") from node `a` to an echo-like handler on node
//! `b`, once with `batch_calls = false` and once with `batch_calls = true` on `a`'s
//! `[[peers]]` entry, rounds of the two interleaved.
//!
//! Both RouteMesh lanes run through a counting TCP proxy in this process, which counts every
//! byte in each direction and, by following the ZMTP 3 framing (64-byte greeting, then frames
//! of flags + 1- or 8-byte size + body), the messages (zmesh records) and ZMTP commands. A
//! round's figures are the counters after its last answer minus those before its first call:
//! REQUESTs or BATCHes `a -> b` on the Application lane, ACCEPTs and REPLYs `b -> a` on the
//! Completion lane (a receiver answers each call of a BATCH on its own, so batching changes
//! only the first), plus whatever liveness probes and acks fell in the round (one PROBE/ACK
//! pair per connection per 5 s; the rounds take milliseconds).
//!
//! The clock: the round starts before the first task is spawned and ends with the last
//! answer (calls per second = 300 / that); each call's latency is from just before its
//! `call_raw` to its answer.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use zmesh::config::RouteMeshBind;
use zmesh::runtime::calls::{encode, CallOptions, Request};
use zmesh::runtime::Node;

use super::{
    client_config, micros, quantile, server_config, spawn_tcp_proxy, Pair, Plan, Series, CHANNEL,
};

/// Calls per round (MISSION K5: "300 concurrent small calls").
pub(crate) const CALLS: usize = 300;

/// Rounds per mode per run, after [`WARM_UP_ROUNDS`] [quick: 3].
const ROUNDS: usize = 20;
const QUICK_ROUNDS: usize = 3;
const WARM_UP_ROUNDS: usize = 2;

/// One mode's results over the runs: the median round of each run.
#[derive(Default)]
pub(crate) struct Mode {
    /// Bytes on the wire per round, both directions, both lanes.
    pub bytes: Series,
    /// The fewest and the most bytes of any round of the run (the count should not vary).
    pub bytes_min: Series,
    /// See `bytes_min`.
    pub bytes_max: Series,
    /// Bytes `a -> b` (requests) per round.
    pub bytes_to_server: Series,
    /// Bytes `b -> a` (answers) per round.
    pub bytes_to_client: Series,
    /// ZMTP messages `a -> b` per round (one per REQUEST or BATCH, plus probes and acks).
    pub messages_to_server: Series,
    /// ZMTP messages `b -> a` per round.
    pub messages_to_client: Series,
    /// Calls per second of a round.
    pub calls_per_s: Series,
    /// Call latency p50 over every call of the run's rounds, microseconds.
    pub p50_us: Series,
    /// Call latency p99 over every call of the run's rounds, microseconds.
    pub p99_us: Series,
}

/// Both modes.
pub(crate) struct Batching {
    pub unbatched: Mode,
    pub batched: Mode,
    pub rounds: usize,
}

pub(crate) async fn bytes_on_the_wire(plan: &Plan) -> Result<Batching> {
    let rounds = if plan.quick { QUICK_ROUNDS } else { ROUNDS };
    let mut out = Batching {
        unbatched: Mode::default(),
        batched: Mode::default(),
        rounds,
    };
    for run in 0..plan.runs {
        let mut setups = [Setup::start(false).await?, Setup::start(true).await?];
        let mut samples: [Vec<RoundResult>; 2] = [Vec::new(), Vec::new()];
        let mut latencies: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for round in 0..WARM_UP_ROUNDS + rounds {
            for (i, s) in setups.iter_mut().enumerate() {
                let (r, mut lat) = s.round().await?;
                if round >= WARM_UP_ROUNDS {
                    samples[i].push(r);
                    latencies[i].append(&mut lat);
                }
            }
        }
        for (i, mode) in [&mut out.unbatched, &mut out.batched]
            .into_iter()
            .enumerate()
        {
            let rs = &samples[i];
            let median = |f: &dyn Fn(&RoundResult) -> f64| {
                let mut s = Series::default();
                for r in rs {
                    s.push(f(r));
                }
                s.median()
            };
            let total = |r: &RoundResult| (r.to_server.bytes + r.to_client.bytes) as f64;
            mode.bytes.push(median(&total));
            let mut all = Series::default();
            for r in rs {
                all.push(total(r));
            }
            mode.bytes_min.push(all.min());
            mode.bytes_max.push(all.max());
            mode.bytes_to_server
                .push(median(&|r| r.to_server.bytes as f64));
            mode.bytes_to_client
                .push(median(&|r| r.to_client.bytes as f64));
            mode.messages_to_server
                .push(median(&|r| r.to_server.messages as f64));
            mode.messages_to_client
                .push(median(&|r| r.to_client.messages as f64));
            mode.calls_per_s
                .push(median(&|r| CALLS as f64 / r.elapsed.as_secs_f64()));
            let lat = &mut latencies[i];
            lat.sort_by(f64::total_cmp);
            mode.p50_us.push(quantile(lat, 0.5));
            mode.p99_us.push(quantile(lat, 0.99));
        }
        let show = |m: &Mode| {
            format!(
                "{:.0} B [{:.0}..{:.0}] ({:.0} to b in {:.0} messages, {:.0} to a in {:.0}), {:.0} calls/s, p50 {:.0} us p99 {:.0} us",
                last(&m.bytes),
                last(&m.bytes_min),
                last(&m.bytes_max),
                last(&m.bytes_to_server),
                last(&m.messages_to_server),
                last(&m.bytes_to_client),
                last(&m.messages_to_client),
                last(&m.calls_per_s),
                last(&m.p50_us),
                last(&m.p99_us),
            )
        };
        eprintln!(
            "K5 run {}: {CALLS} calls, median of {rounds} rounds: unbatched {}; batched {}",
            run + 1,
            show(&out.unbatched),
            show(&out.batched)
        );
        for s in setups {
            s.shutdown().await?;
        }
    }
    Ok(out)
}

fn last(s: &Series) -> f64 {
    s.0.last().copied().unwrap_or(f64::NAN)
}

/// Counters of one direction of a proxy.
#[derive(Default)]
struct Counters {
    bytes: AtomicU64,
    messages: AtomicU64,
}

/// One direction's traffic in a round.
#[derive(Debug, Clone, Copy, Default)]
struct Traffic {
    bytes: u64,
    messages: u64,
}

struct RoundResult {
    to_server: Traffic,
    to_client: Traffic,
    elapsed: Duration,
}

/// A RouteMesh pair whose two lanes run through counting proxies; `a` calls `b`.
struct Setup {
    pair: Pair,
    proxies: [CountingProxy; 2],
}

impl Setup {
    async fn start(batch_calls: bool) -> Result<Setup> {
        let tag = if batch_calls { "batched" } else { "unbatched" };
        let b_rid = format!("k5b-{tag}");
        let a_rid = format!("k5a-{tag}");
        let b_cfg = server_config(&b_rid)?;
        let bind = b_cfg.route_mesh.clone().context("b binds")?;
        let proxies = [
            CountingProxy::start(&bind.application)?,
            CountingProxy::start(&bind.completion)?,
        ];
        let via = RouteMeshBind::new(proxies[0].endpoint.clone(), proxies[1].endpoint.clone());
        let mut a_cfg = client_config(&a_rid, &b_rid, &via);
        for p in &mut a_cfg.peers {
            p.batch_calls = batch_calls;
        }
        // A small call: a tag number in, a reading out.
        let b = Node::builder(b_cfg)
            .serve(CHANNEL, |req: Request| async move {
                let tag: u32 = req.args()?;
                encode(&(f64::from(tag) * 0.5))
            })
            .start()
            .await?;
        let a = Node::start(a_cfg).await?;
        Ok(Setup {
            pair: Pair::ready(a, b).await?,
            proxies,
        })
    }

    /// Both proxies' counters, summed per direction.
    fn traffic(&self) -> (Traffic, Traffic) {
        let mut to_server = Traffic::default();
        let mut to_client = Traffic::default();
        for p in &self.proxies {
            to_server.bytes += p.up.bytes.load(Ordering::Relaxed);
            to_server.messages += p.up.messages.load(Ordering::Relaxed);
            to_client.bytes += p.down.bytes.load(Ordering::Relaxed);
            to_client.messages += p.down.messages.load(Ordering::Relaxed);
        }
        (to_server, to_client)
    }

    /// One round of [`CALLS`] concurrent calls; every one must succeed. Returns the round's
    /// traffic and time, and each call's latency in microseconds.
    async fn round(&mut self) -> Result<(RoundResult, Vec<f64>)> {
        let (s0, c0) = self.traffic();
        let t0 = Instant::now();
        let mut tasks = Vec::with_capacity(CALLS);
        for i in 0..CALLS {
            let a = self.pair.a.clone();
            let tag = u32::try_from(i).unwrap_or(u32::MAX);
            let args = encode(&tag).map_err(|e| anyhow::anyhow!("encode: {e}"))?;
            tasks.push(tokio::spawn(async move {
                let t = Instant::now();
                let r = a
                    .call_raw(CHANNEL, "read", args, CallOptions::default())
                    .await;
                (r, t.elapsed())
            }));
        }
        let mut lat = Vec::with_capacity(CALLS);
        for task in tasks {
            let (r, took) = tokio::time::timeout(super::SETUP_LIMIT, task)
                .await
                .context("a K5 call did not complete in time")??;
            let reading: Bytes = r.context("K5 call")?;
            anyhow::ensure!(!reading.is_empty(), "an empty answer");
            lat.push(micros(took));
        }
        let elapsed = t0.elapsed();
        let (s1, c1) = self.traffic();
        let diff = |a: Traffic, b: Traffic| Traffic {
            bytes: b.bytes.saturating_sub(a.bytes),
            messages: b.messages.saturating_sub(a.messages),
        };
        Ok((
            RoundResult {
                to_server: diff(s0, s1),
                to_client: diff(c0, c1),
                elapsed,
            },
            lat,
        ))
    }

    async fn shutdown(self) -> Result<()> {
        self.pair.a.shutdown().await?;
        self.pair.b.shutdown().await?;
        drop(self.proxies);
        Ok(())
    }
}

/// A TCP proxy on 127.0.0.1 that forwards everything and counts it: bytes, and ZMTP messages
/// in each direction.
struct CountingProxy {
    endpoint: String,
    /// Dialler -> upstream.
    up: Arc<Counters>,
    /// Upstream -> dialler.
    down: Arc<Counters>,
    stop: Arc<AtomicBool>,
}

impl CountingProxy {
    fn start(upstream: &str) -> Result<CountingProxy> {
        let up = Arc::new(Counters::default());
        let down = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (u, d) = (up.clone(), down.clone());
        let endpoint = spawn_tcp_proxy(upstream, stop.clone(), move |from, to, to_dialler| {
            forward(from, to, if to_dialler { &d } else { &u })
        })?;
        Ok(CountingProxy {
            endpoint,
            up,
            down,
            stop,
        })
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        // The accept loop ends; forwarding threads end when their connections close.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copies `from` to `to` until either closes, counting each chunk before it is forwarded (so
/// a byte the far end has acted on is already counted).
fn forward(mut from: TcpStream, mut to: TcpStream, counters: &Counters) {
    let mut buf = [0u8; 65536];
    let mut zmtp = Zmtp::default();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (messages, _commands) = zmtp.feed(&buf[..n]);
        counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        counters.messages.fetch_add(messages, Ordering::Relaxed);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Follows the ZMTP 3 framing of one direction of a connection (RFC 23/ZMTP): a 64-byte
/// greeting, then frames of a flags byte (bit 0 MORE, bit 1 LONG, bit 2 COMMAND), a size (1
/// byte, or 8 bytes big-endian with LONG) and the body. Counts messages (a non-command frame
/// without MORE ends one) and commands (the handshake's READY and the like).
#[derive(Default)]
struct Zmtp {
    /// Greeting bytes seen (64 once complete).
    greeting: usize,
    /// The frame header being read: flags, then size bytes.
    header: Vec<u8>,
    /// Body bytes still to skip in the current frame, and its flags.
    body_left: u64,
    flags: u8,
    in_body: bool,
}

impl Zmtp {
    const GREETING: usize = 64;
    const MORE: u8 = 0x01;
    const LONG: u8 = 0x02;
    const COMMAND: u8 = 0x04;

    /// Consumes a chunk; answers (messages, commands) completed in it.
    fn feed(&mut self, mut bytes: &[u8]) -> (u64, u64) {
        let (mut messages, mut commands) = (0, 0);
        while !bytes.is_empty() {
            if self.greeting < Self::GREETING {
                let take = (Self::GREETING - self.greeting).min(bytes.len());
                self.greeting += take;
                bytes = &bytes[take..];
                continue;
            }
            if self.in_body {
                let take = usize::try_from(self.body_left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.body_left -= take as u64;
                bytes = &bytes[take..];
                if self.body_left == 0 {
                    self.in_body = false;
                    if self.flags & Self::COMMAND != 0 {
                        commands += 1;
                    } else if self.flags & Self::MORE == 0 {
                        messages += 1;
                    }
                }
                continue;
            }
            self.header.push(bytes[0]);
            bytes = &bytes[1..];
            let flags = self.header[0];
            let size_len = if flags & Self::LONG != 0 { 8 } else { 1 };
            if self.header.len() == 1 + size_len {
                let size = self.header[1..]
                    .iter()
                    .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
                self.header.clear();
                self.flags = flags;
                self.body_left = size;
                self.in_body = true;
                if size == 0 {
                    // An empty frame ends at once.
                    let (m, c) = self.end_empty();
                    messages += m;
                    commands += c;
                }
            }
        }
        (messages, commands)
    }

    fn end_empty(&mut self) -> (u64, u64) {
        self.in_body = false;
        if self.flags & Self::COMMAND != 0 {
            (0, 1)
        } else if self.flags & Self::MORE == 0 {
            (1, 0)
        } else {
            (0, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Zmtp;

    /// The ZMTP follower counts messages and commands however the bytes are cut.
    #[test]
    fn zmtp_counts_messages_across_any_cut() {
        let mut wire = vec![0xFFu8; 64];
        // READY command (short), a two-frame message, an empty one-frame message, a long frame.
        wire.extend([0x04, 3, b'a', b'b', b'c']);
        wire.extend([0x01, 2, 1, 2, 0x00, 1, 9]);
        wire.extend([0x00, 0]);
        wire.extend([0x02, 0, 0, 0, 0, 0, 0, 1, 44]);
        wire.extend(std::iter::repeat_n(7u8, 300));
        for cut in 1..wire.len() {
            let mut z = Zmtp::default();
            let (m1, c1) = z.feed(&wire[..cut]);
            let (m2, c2) = z.feed(&wire[cut..]);
            assert_eq!((m1 + m2, c1 + c2), (3, 1), "cut at {cut}");
        }
    }
}
