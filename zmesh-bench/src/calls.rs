//! P2: call round trip, sequential. Raw DEALER/ROUTER ping-pong (an echo thread behind the
//! ROUTER) against zmesh `Node::call_raw` -> handler -> reply (REQUEST on the Application
//! lane, ACCEPT and REPLY on the Completion lane).

use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;
use zmesh::runtime::calls::{may_have_run, CallOptions, Request};
use zmesh::runtime::NodeEvent;

use super::{bind_any, micros, quantile, Curve, Pair, Plan, Series, CHANNEL, INLINE_CHANNEL};

/// Argument bytes of every call and ping.
const ARGS: &[u8] = b"0123456789abcdef";
/// Round trips before the clock starts.
const WARM_UP: usize = 200;

/// Each run's quantiles, in microseconds.
#[derive(Default)]
pub(crate) struct RoundTrip {
    pub raw_p50: Series,
    pub raw_p99: Series,
    pub zmesh_p50: Series,
    pub zmesh_p99: Series,
    pub raw_p999: Series,
    pub zmesh_p999: Series,
    /// p50 of a bare command round trip between a task and the node's I/O thread (a
    /// `snapshot` of the pair's node, two links): the cost of one hop pair of the call path.
    pub command_p50: Series,
    /// p50 and p99 of a one-way ping-pong between the same two nodes: `a` sends, `b`'s
    /// application sends the record back as it takes it from its event stream. The same
    /// threads as a call minus the handler's dispatch and the ACCEPT (where
    /// a call's time goes, measured from outside the call path).
    pub send_ping_pong_p50: Series,
    /// See [`RoundTrip::send_ping_pong_p50`].
    pub send_ping_pong_p99: Series,
    /// p50 and p99 of the same calls to an inline handler (`Node::serve_inline`: run on
    /// `b`'s I/O thread, no task hop).
    pub inline_p50: Series,
    /// See [`RoundTrip::inline_p50`].
    pub inline_p99: Series,
}

pub(crate) async fn round_trip(plan: &Plan) -> Result<RoundTrip> {
    let mut r = RoundTrip::default();
    for run in 0..plan.runs {
        let n = plan.calls;
        let raw = tokio::task::spawn_blocking(move || raw_ping_pong(n, None)).await??;
        let Calls {
            task: zm,
            inline,
            command: cmd,
            ping,
        } = zmesh_calls(n, None).await?;
        let (i50, i99) = (quantile(&inline, 0.5), quantile(&inline, 0.99));
        let (r50, r99) = (quantile(&raw, 0.5), quantile(&raw, 0.99));
        let (z50, z99) = (quantile(&zm, 0.5), quantile(&zm, 0.99));
        let c50 = quantile(&cmd, 0.5);
        let (s50, s99) = (quantile(&ping, 0.5), quantile(&ping, 0.99));
        eprintln!(
            "P2 run {}: raw p50 {r50:.0} us p99 {r99:.0} us, zmesh p50 {z50:.0} us p99 {z99:.0} us \
             (inline handler p50 {i50:.0} us p99 {i99:.0} us; command round trip p50 {c50:.1} us; \
             send ping-pong p50 {s50:.0} us p99 {s99:.0} us)",
            run + 1
        );
        r.inline_p50.push(i50);
        r.inline_p99.push(i99);
        r.send_ping_pong_p50.push(s50);
        r.send_ping_pong_p99.push(s99);
        r.raw_p999.push(quantile(&raw, 0.999));
        r.zmesh_p999.push(quantile(&zm, 0.999));
        r.command_p50.push(c50);
        r.raw_p50.push(r50);
        r.raw_p99.push(r99);
        r.zmesh_p50.push(z50);
        r.zmesh_p99.push(z99);
    }
    Ok(r)
}

/// CURVE: raw ping-pong with CURVE against zmesh calls of a pair in
/// `mode = "curve"`, `plan.runs` runs interleaved; p50 and p99 of each (the command round trip
/// is not measured again).
pub(crate) async fn round_trip_curve(plan: &Plan) -> Result<RoundTrip> {
    let curve = Curve::new()?;
    let mut r = RoundTrip::default();
    for run in 0..plan.runs {
        let n = plan.calls;
        let c = curve.clone();
        let raw = tokio::task::spawn_blocking(move || raw_ping_pong(n, Some(c))).await??;
        let zm = zmesh_calls(n, Some(&curve)).await?.task;
        let (r50, r99) = (quantile(&raw, 0.5), quantile(&raw, 0.99));
        let (z50, z99) = (quantile(&zm, 0.5), quantile(&zm, 0.99));
        eprintln!(
            "C2 run {} (CURVE): raw p50 {r50:.0} us p99 {r99:.0} us, zmesh p50 {z50:.0} us p99 \
             {z99:.0} us",
            run + 1
        );
        r.raw_p50.push(r50);
        r.raw_p99.push(r99);
        r.zmesh_p50.push(z50);
        r.zmesh_p99.push(z99);
    }
    Ok(r)
}

/// `n` sequential DEALER -> ROUTER -> DEALER round trips; sorted latencies in microseconds.
fn raw_ping_pong(n: usize, curve: Option<Curve>) -> Result<Vec<f64>> {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER)?;
    router.set_linger(0)?;
    if let Some(c) = &curve {
        c.server(&router)?;
    }
    let ep = bind_any(&router)?;
    let echo = std::thread::spawn(move || -> Result<()> {
        loop {
            let frames = router.recv_multipart(0)?;
            // An empty payload ends the echo.
            match frames.get(1) {
                Some(p) if !p.is_empty() => {}
                _ => return Ok(()),
            }
            router.send_multipart(frames, 0)?;
        }
    });
    let dealer = ctx.socket(zmq::DEALER)?;
    dealer.set_linger(0)?;
    dealer.set_rcvtimeo(10_000)?;
    if let Some(c) = &curve {
        c.client(&dealer)?;
    }
    dealer.connect(&ep)?;
    let mut lat = Vec::with_capacity(n);
    let mut msg = zmq::Message::new();
    for i in 0..WARM_UP + n {
        let t = Instant::now();
        dealer.send(ARGS, 0)?;
        dealer.recv(&mut msg, 0).context("raw pong")?;
        if i >= WARM_UP {
            lat.push(micros(t.elapsed()));
        }
    }
    dealer.send(&b""[..], 0)?;
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))??;
    lat.sort_by(f64::total_cmp);
    Ok(lat)
}

/// What [`zmesh_calls`] measured: sorted latencies in microseconds.
struct Calls {
    /// Calls to a task handler (`Node::serve`).
    task: Vec<f64>,
    /// Calls to an inline handler (`Node::serve_inline`).
    inline: Vec<f64>,
    /// Bare command round trips (a snapshot).
    command: Vec<f64>,
    /// One-way ping-pongs.
    ping: Vec<f64>,
}

/// `n` sequential calls from `a` to an echo handler on `b` (a task handler, then an inline
/// one), then `n` bare command round trips on `a`, then `n` one-way ping-pongs.
async fn zmesh_calls(n: usize, curve: Option<&Curve>) -> Result<Calls> {
    let mut pair = Pair::mesh_with(curve).await?;
    pair.b.serve(
        CHANNEL,
        |req: Request| async move { Ok(req.raw_args().clone()) },
    )?;
    pair.b
        .serve_inline(INLINE_CHANNEL, |req: Request| Ok(req.raw_args().clone()))?;
    let task = timed_calls(&pair, CHANNEL, n).await?;
    let inline = timed_calls(&pair, INLINE_CHANNEL, n).await?;
    let mut cmd = Vec::with_capacity(n);
    for i in 0..WARM_UP + n {
        let t = Instant::now();
        // A `send` no longer goes to the I/O thread; a snapshot does, and is small.
        let snap = pair.a.snapshot().await.context("snapshot")?;
        if i >= WARM_UP {
            cmd.push(micros(t.elapsed()));
        }
        anyhow::ensure!(!snap.links.is_empty(), "a snapshot without links");
    }
    let ping = send_ping_pong(&mut pair, n).await?;
    pair.shutdown().await?;
    cmd.sort_by(f64::total_cmp);
    Ok(Calls {
        task,
        inline,
        command: cmd,
        ping,
    })
}

/// `n` sequential echo calls from `a` to `channel` on `b` after a warm-up; sorted latencies in
/// microseconds.
async fn timed_calls(pair: &Pair, channel: &str, n: usize) -> Result<Vec<f64>> {
    let args = Bytes::from_static(ARGS);
    // The Serve command and the first REQUEST reach `b` separately: until `b` has taken the
    // former, a call is refused as never run, and is simply made again.
    let mut tries = 0;
    while let Err(e) = pair
        .a
        .call_raw(channel, "echo", args.clone(), CallOptions::default())
        .await
    {
        tries += 1;
        anyhow::ensure!(!may_have_run(&e) && tries < 100, "first call: {e}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut lat = Vec::with_capacity(n);
    for i in 0..WARM_UP + n {
        let t = Instant::now();
        let reply = pair
            .a
            .call_raw(channel, "echo", args.clone(), CallOptions::default())
            .await
            .context("zmesh call")?;
        if i >= WARM_UP {
            lat.push(micros(t.elapsed()));
        }
        anyhow::ensure!(reply == args, "echo answered other bytes");
    }
    lat.sort_by(f64::total_cmp);
    Ok(lat)
}

/// `n` sequential one-way round trips: `a` sends on the Application lane, `b`'s application
/// sends each record back as it takes it from its event stream; sorted latencies in
/// microseconds.
async fn send_ping_pong(pair: &mut Pair, n: usize) -> Result<Vec<f64>> {
    let (a, b) = (pair.a.clone(), pair.b.clone());
    let eb = &mut pair.eb;
    let ea = &mut pair.ea;
    let echo = async {
        while let Some(batch) = eb.recv().await {
            for ev in batch {
                if let NodeEvent::Delivery(d) = ev {
                    b.send("a", "pong", d.payload).await.context("pong")?;
                }
            }
        }
        anyhow::Ok(())
    };
    let ping = async {
        let mut lat = Vec::with_capacity(n);
        for i in 0..WARM_UP + n {
            let t = Instant::now();
            a.send("b", "ping", Bytes::from_static(ARGS))
                .await
                .context("ping")?;
            'pong: loop {
                let batch = ea.recv().await.context("events of a ended")?;
                if batch.iter().any(|e| matches!(e, NodeEvent::Delivery(_))) {
                    break 'pong;
                }
            }
            if i >= WARM_UP {
                lat.push(micros(t.elapsed()));
            }
        }
        anyhow::Ok(lat)
    };
    let mut lat = tokio::select! {
        r = echo => { r?; anyhow::bail!("the echo ended first") }
        lat = ping => lat?,
    };
    lat.sort_by(f64::total_cmp);
    Ok(lat)
}
