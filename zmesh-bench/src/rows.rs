//! The result rows of each measurement: what [`run`](crate::run) prints and writes, one
//! function per measurement, in the order `run` calls them.

use anyhow::{Context, Result};
use serde_json::json;
use tokio::task::JoinHandle;

use super::{
    batching, calls, churn, detect, fanout, flood, idle, scale, throughput, Metric, Plan, Series,
    Target, K5_BYTES_AT_MOST,
};

/// P1 rows: one-way throughput, 64 B and 1 KiB, with `send` and with `send_batch`.
pub(super) async fn p1(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    for (size, key, label, batch_key, batch_label) in [
        (
            64usize,
            "p1_oneway_64b",
            "P1 one-way 64 B, send",
            "p1_oneway_64b_batch",
            "P1 one-way 64 B, send_batch",
        ),
        (
            1024,
            "p1_oneway_1k",
            "P1 one-way 1 KiB, send",
            "p1_oneway_1k_batch",
            "P1 one-way 1 KiB, send_batch",
        ),
    ] {
        let o = throughput::oneway(plan, size).await?;
        let batch = batch_extra(plan, &o);
        metrics.push(throughput_row(
            key,
            label,
            o.raw.clone(),
            o.zmesh,
            json!({
                "messages": plan.messages,
                "senders": plan.senders,
                "raw_cpu_us_per_msg": o.raw_cpu_us.to_json(),
                "zmesh_cpu_us_per_msg": o.zmesh_cpu_us.to_json(),
            }),
        ));
        metrics.push(throughput_row(
            batch_key,
            batch_label,
            o.raw,
            o.batch,
            batch,
        ));
    }
    Ok(metrics)
}

/// P1's 64 B `send_batch` row alone (`--only p1batch`), without raw libzmq: for profiling.
pub(super) async fn p1batch(plan: &Plan) -> Result<Vec<Metric>> {
    let o = throughput::oneway_batch_only(plan, 64).await?;
    Ok(vec![Metric {
        key: "p1_oneway_64b_batch_only",
        label: "P1 one-way 64 B, send_batch (alone)",
        unit: "msg/s",
        raw: None,
        zmesh: o.batch,
        target: Target::Reference,
        extra: json!({
            "messages": plan.messages,
            "senders": plan.senders,
            "batch": plan.batch,
            "zmesh_cpu_us_per_msg": o.batch_cpu_us.to_json(),
        }),
    }])
}

/// P2 rows: call round trip p50/p99 with a task handler, and with an inline one.
pub(super) async fn p2(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    let r = calls::round_trip(plan).await?;
    // The same calls to an inline handler (run on the callee's I/O
    // thread), against the same raw runs.
    let inline = [
        (
            "p2_call_inline_p50",
            "P2 call p50, inline handler",
            r.raw_p50.clone(),
            r.inline_p50,
            1.2,
        ),
        (
            "p2_call_inline_p99",
            "P2 call p99, inline handler",
            r.raw_p99.clone(),
            r.inline_p99,
            2.0,
        ),
    ];
    metrics.push(Metric {
        key: "p2_call_p50",
        label: "P2 call round trip p50",
        unit: "us",
        raw: Some(r.raw_p50),
        zmesh: r.zmesh_p50,
        target: Target::RatioAtMost(1.2),
        extra: json!({
            "calls": plan.calls,
            "zmesh_command_round_trip_p50_us": r.command_p50.to_json(),
            "zmesh_send_ping_pong_p50_us": r.send_ping_pong_p50.to_json(),
            "zmesh_send_ping_pong_p99_us": r.send_ping_pong_p99.to_json(),
        }),
    });
    metrics.push(Metric {
        key: "p2_call_p99",
        label: "P2 call round trip p99",
        unit: "us",
        raw: Some(r.raw_p99),
        zmesh: r.zmesh_p99,
        target: Target::RatioAtMost(2.0),
        extra: json!({
            "calls": plan.calls,
            "raw_p999_us": r.raw_p999.to_json(),
            "zmesh_p999_us": r.zmesh_p999.to_json(),
        }),
    });
    for (key, label, raw, zmesh, ratio) in inline {
        metrics.push(Metric {
            key,
            label,
            unit: "us",
            raw: Some(raw),
            zmesh,
            target: Target::RatioAtMost(ratio),
            extra: json!({ "calls": plan.calls }),
        });
    }
    Ok(metrics)
}

/// C1 rows: P1 (1 KiB, `send_batch`) and P2 with CURVE on both sides.
pub(super) async fn c1(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    let o = throughput::oneway_curve(plan, 1024).await?;
    let extra = batch_extra(plan, &o);
    metrics.push(throughput_row(
        "c1_oneway_1k_curve",
        "C1 one-way 1 KiB, CURVE, send_batch",
        o.raw,
        o.batch,
        extra,
    ));
    let r = calls::round_trip_curve(plan).await?;
    metrics.push(Metric {
        key: "c1_call_p50_curve",
        label: "C1 call round trip p50, CURVE",
        unit: "us",
        raw: Some(r.raw_p50),
        zmesh: r.zmesh_p50,
        target: Target::RatioAtMost(1.2),
        extra: json!({ "calls": plan.calls }),
    });
    metrics.push(Metric {
        key: "c1_call_p99_curve",
        label: "C1 call round trip p99, CURVE",
        unit: "us",
        raw: Some(r.raw_p99),
        zmesh: r.zmesh_p99,
        target: Target::RatioAtMost(2.0),
        extra: json!({ "calls": plan.calls }),
    });
    Ok(metrics)
}

/// P3 rows: fanout throughput, 64 B, with `publish` and with `publish_batch`.
pub(super) async fn p3(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    let r = fanout::throughput(plan).await?;
    metrics.push(throughput_row(
        "p3_fanout_64b",
        "P3 fanout 64 B, publish",
        r.raw.clone(),
        r.zmesh,
        json!({
            "messages": plan.messages,
            "raw_delivered_fraction": r.raw_delivered.to_json(),
            "zmesh_delivered_fraction": r.zmesh_delivered.to_json(),
            "raw_cpu_us_per_msg": r.raw_cpu_us.to_json(),
            "zmesh_cpu_us_per_msg": r.zmesh_cpu_us.to_json(),
        }),
    ));
    metrics.push(throughput_row(
        "p3_fanout_64b_batch",
        "P3 fanout 64 B, publish_batch",
        r.raw,
        r.batch,
        json!({
            "messages": plan.messages,
            "batch": plan.batch,
            "raw_delivered_fraction": r.raw_delivered.to_json(),
            "zmesh_delivered_fraction": r.batch_delivered.to_json(),
            "raw_cpu_us_per_msg": r.raw_cpu_us.to_json(),
            "zmesh_cpu_us_per_msg": r.batch_cpu_us.to_json(),
        }),
    ));
    Ok(metrics)
}

/// P4 rows: a quiet peer's probe/ACK round trip and false not-ready while another floods.
pub(super) async fn p4(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    let f = flood::flood(plan).await?;
    let (p50, p99, max) = flood::summary(&f.rtt_ms);
    let mut rtt = Series::default();
    rtt.push(p99);
    let mut left = Series::default();
    left.push(f.false_not_ready as f64);
    let extra = json!({
        "flood_s": plan.flood.as_secs(),
        "probe_every_ms": flood::PROBE_EVERY.as_millis() as u64,
        "probes_answered": f.rtt_ms.len(),
        "ack_rtt_p50_ms": p50,
        "ack_rtt_max_ms": max,
        "flood_records_delivered": f.flood_delivered,
        "flood_records_per_s": f.flood_rate,
    });
    metrics.push(Metric {
        key: "p4_quiet_ack_rtt_p99",
        label: "P4 quiet peer ACK RTT p99, flood",
        unit: "ms",
        raw: None,
        zmesh: rtt,
        target: Target::Below(50.0),
        extra: extra.clone(),
    });
    metrics.push(Metric {
        key: "p4_false_not_ready",
        label: "P4 false not-ready under flood",
        unit: "count",
        raw: None,
        zmesh: left,
        target: Target::AtMost(0.0),
        extra,
    });
    Ok(metrics)
}

/// P5 rows: idle CPU and memory per connection of one node.
pub(super) async fn p5(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    let r = idle::idle(plan).await?;
    let connections = plan.publishers + 2 * plan.peers;
    metrics.push(Metric {
        key: "p5_idle_cpu",
        label: "P5 idle CPU, one node",
        unit: "% core",
        raw: None,
        zmesh: r.cpu_percent,
        target: Target::Below(3.0),
        extra: json!({
            "publishers": plan.publishers,
            "mesh_peers": plan.peers,
            "connections": connections,
            "window_s": plan.idle.as_secs(),
            "cpu_percent_from_stat_ticks": r.cpu_ticks_percent.to_json(),
            "wakeups_per_s": r.wakeups_per_s.to_json(),
        }),
    });
    metrics.push(Metric {
        key: "p5_mem_per_conn",
        label: "P5 memory per connection",
        unit: "KiB",
        raw: None,
        zmesh: r.kib_per_connection,
        target: Target::Below(100.0),
        extra: json!({
            "connections": connections,
            "rss_kib": r.rss_kib.to_json(),
            "baseline_rss_kib": r.baseline_rss_kib.to_json(),
        }),
    });
    Ok(metrics)
}

/// P7 rows: four per size of the scaled node ([`p7_size`]).
pub(super) async fn p7(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    let r = scale::scale(plan).await?;
    for row in r.rows {
        metrics.extend(p7_size(plan, row));
    }
    for (n, why) in r.skipped {
        eprintln!("P7 {n} connections skipped: {why}");
    }
    Ok(metrics)
}

/// The four P7 rows of one size: time to all ready, idle CPU, descriptors and memory per
/// connection.
fn p7_size(plan: &Plan, row: scale::ScaleRow) -> Vec<Metric> {
    let mut metrics = Vec::new();
    // One row per size: the labels are made once per run (a CLI's few bytes).
    // A size of RouteMesh lanes only is named so, dialled ("mesh") or accepted
    // ("inbound").
    let mesh = row.mix.suffix();
    let name = |what: &str| -> &'static str {
        Box::leak(format!("P7 {what}, {} conn{mesh}", row.connections).into_boxed_str())
    };
    let key = |what: &str| -> &'static str {
        let mesh = mesh.trim().replace(' ', "_");
        let sep = if mesh.is_empty() { "" } else { "_" };
        Box::leak(format!("p7_{what}_{}{sep}{mesh}", row.connections).into_boxed_str())
    };
    let one = |v: f64| {
        let mut s = Series::default();
        s.push(v);
        s
    };
    let extra = json!({
        "connections": row.connections,
        "publishers": row.publishers,
        "mesh_lanes": row.connections - row.publishers,
        "mix": row.mix.suffix().trim(),
        "fds": row.fds,
        "baseline_fds": row.baseline_fds,
        "fd_limit": row.fd_limit,
        "rss_kib": row.rss_kib,
        "cpu_percent_from_stat_ticks": row.cpu_ticks_percent,
        "window_s": plan.idle.as_secs(),
    });
    metrics.push(Metric {
        key: key("ready_s"),
        label: name("all ready"),
        unit: "s",
        raw: None,
        zmesh: one(row.ready_s),
        target: Target::Reference,
        extra: extra.clone(),
    });
    metrics.push(Metric {
        key: key("idle_cpu"),
        label: name("idle CPU"),
        unit: "% core",
        raw: None,
        zmesh: one(row.cpu_percent),
        target: Target::Below(5.0),
        extra: extra.clone(),
    });
    metrics.push(Metric {
        key: key("fds_per_conn"),
        label: name("fds per conn"),
        unit: "fds",
        raw: None,
        zmesh: one(row.fds_per_connection),
        target: Target::AtMost(2.0),
        extra: extra.clone(),
    });
    metrics.push(Metric {
        key: key("mem_per_conn"),
        label: name("memory per conn"),
        unit: "KiB",
        raw: None,
        zmesh: one(row.kib_per_connection),
        target: Target::Below(100.0),
        extra,
    });
    metrics
}

/// P6 rows: failure detection of an orderly close, a killed process, a half-open
/// connection (`half_open_early`: that measurement, already started in quick mode).
pub(super) async fn p6(
    plan: &Plan,
    half_open_early: Option<JoinHandle<Result<detect::HalfOpen>>>,
) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    let orderly = detect::orderly(plan).await?;
    metrics.push(Metric {
        key: "p6_orderly_close",
        label: "P6 detect orderly close",
        unit: "ms",
        raw: None,
        zmesh: orderly,
        target: Target::Below(100.0),
        extra: json!({"from": "Node::shutdown called on the peer"}),
    });
    let killed = detect::killed(plan).await?;
    metrics.push(Metric {
        key: "p6_killed",
        label: "P6 detect killed process",
        unit: "ms",
        raw: None,
        zmesh: killed,
        target: Target::Below(100.0),
        extra: json!({"from": "SIGKILL sent to the peer's process"}),
    });
    let half = match half_open_early {
        Some(h) => h.await.context("half-open task")??,
        None => detect::half_open(plan).await?,
    };
    metrics.push(Metric {
        key: "p6_half_open",
        label: "P6 detect half-open after last ACK",
        unit: "ms",
        raw: None,
        zmesh: half.after_ack,
        target: Target::Within(15_000.0, 100.0),
        extra: json!({
            "from": "the last valid ACK forwarded by the freezing proxy (the proxy freezes right after it)",
            "after_freeze_ms": half.after_freeze.to_json(),
        }),
    });
    Ok(metrics)
}

/// K5 rows: bytes on the wire, calls/s and latency, `batch_calls` off and on.
pub(super) async fn k5(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    let r = batching::bytes_on_the_wire(plan).await?;
    let (off, on) = (&r.unbatched, &r.batched);
    let detail = |m: &batching::Mode, batch_calls: bool| {
        json!({
            "calls": batching::CALLS,
            "rounds_per_run": r.rounds,
            "batch_calls": batch_calls,
            "bytes_fewest_in_a_round": m.bytes_min.to_json(),
            "bytes_most_in_a_round": m.bytes_max.to_json(),
            "bytes_to_server": m.bytes_to_server.to_json(),
            "bytes_to_client": m.bytes_to_client.to_json(),
            "messages_to_server": m.messages_to_server.to_json(),
            "messages_to_client": m.messages_to_client.to_json(),
            "p99_us": m.p99_us.to_json(),
        })
    };
    let unbatched = "unbatched";
    metrics.push(Metric {
        key: "k5_bytes_unbatched",
        label: "K5 300 calls: wire bytes, unbatched",
        unit: "B",
        raw: None,
        zmesh: off.bytes.clone(),
        target: Target::Reference,
        extra: detail(off, false),
    });
    metrics.push(Metric {
        key: "k5_bytes_batched",
        label: "K5 300 calls: wire bytes, batched",
        unit: "B",
        raw: None,
        zmesh: on.bytes.clone(),
        target: Target::AtMostOf(off.bytes.median(), K5_BYTES_AT_MOST, unbatched),
        extra: detail(on, true),
    });
    metrics.push(Metric {
        key: "k5_calls_per_s_unbatched",
        label: "K5 300 calls: calls/s, unbatched",
        unit: "call/s",
        raw: None,
        zmesh: off.calls_per_s.clone(),
        target: Target::Reference,
        extra: detail(off, false),
    });
    metrics.push(Metric {
        key: "k5_calls_per_s_batched",
        label: "K5 300 calls: calls/s, batched",
        unit: "call/s",
        raw: None,
        zmesh: on.calls_per_s.clone(),
        target: Target::AtLeastOf(off.calls_per_s.median(), 0.9, unbatched),
        extra: detail(on, true),
    });
    metrics.push(Metric {
        key: "k5_p50_unbatched",
        label: "K5 300 calls: latency p50, unbatched",
        unit: "us",
        raw: None,
        zmesh: off.p50_us.clone(),
        target: Target::Reference,
        extra: detail(off, false),
    });
    metrics.push(Metric {
        key: "k5_p50_batched",
        label: "K5 300 calls: latency p50, batched",
        unit: "us",
        raw: None,
        zmesh: on.p50_us.clone(),
        target: Target::AtMostOf(off.p50_us.median(), 1.1, unbatched),
        extra: detail(on, true),
    });
    Ok(metrics)
}

/// A throughput row: messages per second through zmesh against raw libzmq, met at 0.9 of
/// raw or better.
fn throughput_row(
    key: &'static str,
    label: &'static str,
    raw: Series,
    zmesh: Series,
    extra: serde_json::Value,
) -> Metric {
    Metric {
        key,
        label,
        unit: "msg/s",
        raw: Some(raw),
        zmesh,
        target: Target::RatioAtLeast(0.9),
        extra,
    }
}

/// The extra numbers of a one-way `send_batch` row: the plan's sizes and the CPU per message
/// of raw libzmq and of zmesh.
fn batch_extra(plan: &Plan, o: &throughput::OneWay) -> serde_json::Value {
    json!({
        "messages": plan.messages,
        "senders": plan.senders,
        "batch": plan.batch,
        "raw_cpu_us_per_msg": o.raw_cpu_us.to_json(),
        "zmesh_cpu_us_per_msg": o.batch_cpu_us.to_json(),
    })
}

/// P7 churn rows: records to the staying connections and CPU, per reconnect, for each size
/// (see `churn`).
pub(super) async fn p7churn(plan: &Plan) -> Result<Vec<Metric>> {
    let mut metrics = Vec::new();
    for row in churn::churn(plan).await? {
        let one = |v: f64| {
            let mut s = Series::default();
            s.push(v);
            s
        };
        let n = row.connections;
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let extra = json!({
            "connections": n,
            "reconnects": row.reconnects,
            "records": row.records,
        });
        metrics.push(Metric {
            key: leak(format!("p7churn_records_per_reconnect_{n}")),
            label: leak(format!("P7 churn records/reconnect, {n} conn")),
            unit: "records",
            raw: None,
            zmesh: one(row.records_per_reconnect),
            target: Target::Below(1.0),
            extra: extra.clone(),
        });
        metrics.push(Metric {
            key: leak(format!("p7churn_cpu_per_reconnect_{n}")),
            label: leak(format!("P7 churn CPU/reconnect, {n} conn")),
            unit: "us",
            raw: None,
            zmesh: one(row.cpu_us_per_reconnect),
            target: Target::Reference,
            extra,
        });
    }
    Ok(metrics)
}
