//! MISSION O2 for automatic mode: the discovery metrics (store reachable, lease age,
//! descriptors seen, store errors) exist, and their labels never carry a RID, an endpoint or
//! a store path; the only label is the store operation, a fixed set.

mod common;

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use zmesh::config::{DiscoveryConfig, NodeConfig};
use zmesh::runtime::Node;

#[tokio::test]
async fn o2_discovery_metrics_carry_no_identities() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this test binary");
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-disc-metrics-")
        .tempdir()
        .expect("dir");
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("store")).expect("dir");
    let url = format!("sqlite://{}", dir.join("store").join("mesh.db").display());
    let mut nodes = Vec::new();
    for rid in ["node-ay", "node-bee"] {
        let mut c = NodeConfig::new(rid);
        c.memberships = common::server_of("chan-x");
        c.discovery = Some(DiscoveryConfig::new(url.clone()));
        nodes.push(Node::start(c).await.expect("start"));
    }
    let seen = |n: &Node| {
        let n = n.clone();
        async move {
            n.snapshot()
                .await
                .ok()
                .and_then(|s| s.discovery)
                .is_some_and(|d| d.descriptors_seen == 1)
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(seen(&nodes[0]).await && seen(&nodes[1]).await) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "descriptors not seen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A store outage: errors are counted per operation.
    std::fs::rename(dir.join("store"), dir.join("away")).expect("move away");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = nodes[0].snapshot().await.expect("snapshot");
        if s.discovery.is_some_and(|d| !d.store_reachable) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "outage not seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let snap = snapshotter.snapshot().into_vec();
    let mut names = Vec::new();
    for (key, _, _, value) in &snap {
        let key = key.key();
        names.push(key.name().to_owned());
        if key.name() == "zmesh_discovery_descriptors" {
            assert!(matches!(value, DebugValue::Gauge(_)));
        }
        for label in key.labels() {
            let v = label.value();
            assert!(
                !v.contains("node-")
                    && !v.contains("tcp://")
                    && !v.contains("sqlite://")
                    && !v.contains("127.0.0.1")
                    && !v.contains("zmesh-disc"),
                "metric {} carries an identity in label {}={v}",
                key.name(),
                label.key()
            );
            assert!(
                ["reason", "code", "topology", "status", "op"].contains(&label.key()),
                "unexpected label key {} on {}",
                label.key(),
                key.name()
            );
        }
    }
    for name in [
        "zmesh_discovery_store_reachable",
        "zmesh_discovery_lease_age_seconds",
        "zmesh_discovery_descriptors",
        "zmesh_discovery_store_errors_total",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
    for n in nodes {
        n.shutdown().await.expect("shutdown");
    }
}
