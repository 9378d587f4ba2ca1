//! `zmesh bench --quick` (smoke mode: tiny sizes, one run) runs every measurement and writes
//! a JSON file with every metric and positive numbers, and K5's batched round takes fewer
//! messages than its unbatched one. Speed itself is not asserted here: it belongs to the
//! benchmark (BENCHMARKS.md), not to tests.

use std::process::{Command, Stdio};
use std::time::Duration;

/// Every metric the JSON must hold.
const METRICS: [&str; 29] = [
    "p1_oneway_64b",
    "p1_oneway_64b_batch",
    "p1_oneway_1k",
    "p1_oneway_1k_batch",
    "p2_call_p50",
    "p2_call_p99",
    "p3_fanout_64b",
    "p3_fanout_64b_batch",
    "p4_quiet_ack_rtt_p99",
    "p4_false_not_ready",
    "p5_idle_cpu",
    "p5_mem_per_conn",
    "p6_orderly_close",
    "p6_killed",
    "p6_half_open",
    "k5_bytes_unbatched",
    "k5_bytes_batched",
    "k5_calls_per_s_unbatched",
    "k5_calls_per_s_batched",
    "k5_p50_unbatched",
    "k5_p50_batched",
    // P7 in quick mode: one node with 30 connections.
    "p7_ready_s_30",
    "p7_idle_cpu_30",
    "p7_fds_per_conn_30",
    "p7_mem_per_conn_30",
    // and one with 30 connections it accepts (fake peers dial it).
    "p7_ready_s_30_inbound",
    "p7_idle_cpu_30_inbound",
    "p7_fds_per_conn_30_inbound",
    "p7_mem_per_conn_30_inbound",
];
/// Metrics whose value may be zero (counts whose target is zero).
const MAY_BE_ZERO: [&str; 3] = [
    "p4_false_not_ready",
    "p7_idle_cpu_30",
    "p7_idle_cpu_30_inbound",
];
/// Upper bound on the run (it takes about 25 s: the half-open measurement needs the 15 s
/// deadline, which is a constant; the P4 flood is 3 s in quick mode).
const LIMIT: Duration = Duration::from_secs(120);

fn positive(v: &serde_json::Value) -> bool {
    v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0)
}

fn non_negative(v: &serde_json::Value) -> bool {
    v.as_f64().is_some_and(|x| x.is_finite() && x >= 0.0)
}

#[test]
fn bench_quick_reports_every_metric() {
    let dir = tempfile::Builder::new()
        .prefix("zmesh-bench-smoke-")
        .tempdir()
        .expect("temp dir");
    let json = dir.path().join("bench.json");
    let child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["bench", "--quick", "--json"])
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zmesh bench");
    // Wait for the child on a thread so the wait is bounded without polling.
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(LIMIT) {
        Ok(out) => out.expect("output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("zmesh bench --quick took more than {LIMIT:?}");
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "zmesh bench --quick failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written"))
            .expect("valid JSON");
    for key in METRICS {
        let m = &doc["metrics"][key];
        assert!(m.is_object(), "{key} missing:\n{doc:#}");
        let zmesh = &m["zmesh"];
        let valid = if MAY_BE_ZERO.contains(&key) {
            non_negative
        } else {
            positive
        };
        assert!(valid(&zmesh["median"]), "{key}: {m:#}");
        let samples = zmesh["samples"].as_array().expect("samples");
        assert!(
            !samples.is_empty() && samples.iter().all(valid),
            "{key}: {m:#}"
        );
        // Throughput and latency rows have the raw libzmq figure beside zmesh's.
        if key.starts_with("p1") || key.starts_with("p2") || key.starts_with("p3") {
            assert!(positive(&m["raw"]["median"]), "{key}: {m:#}");
            assert!(positive(&m["ratio"]), "{key}: {m:#}");
        }
        assert!(m["target"].is_string(), "{key}: {m:#}");
        assert!(m["met"].is_boolean(), "{key}: {m:#}");
        // The table names every metric too.
        let label = m["label"].as_str().expect("label");
        assert!(
            stdout.contains(label),
            "{label} not in the table:\n{stdout}"
        );
    }
    // K5: `batch_calls = false` sends every call as its own message; `true` sends fewer
    // messages for the same 300 calls (BATCHes). A count, not a speed.
    let messages = |key: &str| {
        doc["metrics"][key]["extra"]["messages_to_server"]["median"]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: messages_to_server:\n{doc:#}"))
    };
    let (off, on) = (messages("k5_bytes_unbatched"), messages("k5_bytes_batched"));
    assert!(off >= 300.0, "unbatched: {off} messages for 300 calls");
    assert!(on < off, "batched: {on} messages, unbatched {off}");
}
