//! MISSION O2: metric labels never carry an endpoint, a RID or a connection id; identities
//! appear only in count-limited snapshots and traces.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use common::{free_tcp, mesh_bind, mesh_server, peer, start_ready, Events};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use zmesh::config::{NodeConfig, PeerConfig, RouteMeshBind};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::proto::state::ConnState;
use zmesh::runtime::{Node, NodeEvent, SEND_QUEUE};

/// The metrics recorder of this test binary, installed by the first test that asks.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder in this test binary");
        snapshotter
    })
}

/// The value of counter `name` with label `reason`, 0 if never recorded.
fn counter(name: &str, reason: &str) -> u64 {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, _, _, _)| {
            k.key().name() == name
                && k.key()
                    .labels()
                    .any(|l| l.key() == "reason" && l.value() == reason)
        })
        .map(|(_, _, _, v)| match v {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

/// MISSION O2: after traffic, a failure and a reconnect, every metric's labels are free of
/// RIDs, endpoints and connection ids.
#[tokio::test]
async fn o2_metric_labels_carry_no_identities() {
    let snapshotter = snapshotter();

    let bind = RouteMeshBind::new(free_tcp(), free_tcp());
    let mut b = NodeConfig::new("node-bee");
    b.memberships = vec![Membership {
        role: Role::Server,
        channel: "chan-x".into(),
    }];
    b.route_mesh = Some(bind.clone());
    let bn = Node::start(b.clone()).await.expect("b");
    let mut a = NodeConfig::new("node-ay");
    a.peers = vec![PeerConfig::new(
        "node-bee",
        bind.application.clone(),
        bind.completion.clone(),
    )];
    let an = Node::start(a).await.expect("a");
    let mut ea = Events::new(an.take_events().expect("events"));
    let ready = |e: &NodeEvent| matches!(e, NodeEvent::State(s) if s.state == ConnState::Ready);
    ea.wait(Duration::from_secs(10), ready).await;
    ea.wait(Duration::from_secs(10), ready).await;
    an.send("node-bee", "chan-x", "m").await.expect("send");
    bn.shutdown().await.expect("b down");
    ea.wait(
        Duration::from_secs(10),
        |e| matches!(e, NodeEvent::State(s) if s.reason.is_some()),
    )
    .await;
    let _ = an.call::<_, ()>("chan-x", "m", &()).await;

    let snap = snapshotter.snapshot().into_vec();
    assert!(!snap.is_empty(), "the runtime records metrics");
    let conn_ids: Vec<String> = (1..64).map(|i| format!("c{i}")).collect();
    for (key, _, _, _) in snap {
        let key = key.key();
        for label in key.labels() {
            let v = label.value();
            assert!(
                !v.contains("node-")
                    && !v.contains("tcp://")
                    && !v.contains("ipc://")
                    && !v.contains("127.0.0.1")
                    && !conn_ids.iter().any(|c| c == v),
                "metric {} carries an identity in label {}={v}",
                key.name(),
                label.key()
            );
            assert!(
                ["reason", "code", "topology", "status"].contains(&label.key()),
                "unexpected label key {} on {}",
                label.key(),
                key.name()
            );
        }
    }
    an.shutdown().await.expect("a down");
}

/// Honest at failure, MISSION O2: a link that fails with records still in
/// its zmesh queue names the count in its state change ("…; N queued records not sent") and
/// counts them in `zmesh_records_unsent_total`, labelled with the failure reason only.
#[tokio::test]
async fn o2_unsent_records_are_counted_by_failure_reason_only() {
    snapshotter();
    let b_bind = mesh_bind(true);
    let mut b = mesh_server("b", "data", &b_bind);
    // b's application takes nothing: its queue pauses, its link's backlog fills, its socket
    // is not read, and a's pipe and then a's queue fill up.
    b.delivery_high_water = 16;
    let b = Node::start(b).await.expect("b");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &b_bind)];
    let (a, mut ea) = start_ready(a, "b").await;
    let record = Bytes::from(vec![0x5Au8; 1024]);
    common::fill_link(&a, "b", "data", |_| record.clone()).await;
    b.shutdown().await.expect("b down");
    let ev = ea
        .wait(Duration::from_secs(10), |e| {
            matches!(e, NodeEvent::State(s) if s.link == "peer b application" && s.reason.is_some())
        })
        .await;
    let NodeEvent::State(s) = ev else {
        unreachable!()
    };
    let reason = s.reason.expect("a reason").as_str();
    let unsent: u64 = s
        .detail
        .rsplit_once("; ")
        .and_then(|(_, tail)| tail.strip_suffix(" queued records not sent"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of queued records in {s:?}"));
    assert!(
        (1..=SEND_QUEUE as u64).contains(&unsent),
        "{unsent} records counted: {s:?}"
    );
    assert!(
        counter("zmesh_records_unsent_total", reason) >= unsent,
        "zmesh_records_unsent_total{{reason={reason}}} below {unsent}"
    );
    a.shutdown().await.expect("a down");
}
