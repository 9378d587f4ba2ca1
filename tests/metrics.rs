//! MISSION O2: metric labels never carry an endpoint, a RID or a connection id; identities
//! appear only in count-limited snapshots and traces.

mod common;

use std::time::Duration;

use common::{free_tcp, Events};
use metrics_util::debugging::DebuggingRecorder;
use zmesh::config::{NodeConfig, PeerConfig, RouteMeshBind};
use zmesh::proto::handshake::{Membership, Role};
use zmesh::proto::state::ConnState;
use zmesh::runtime::{Node, NodeEvent};

/// MISSION O2: after traffic, a failure and a reconnect, every metric's labels are free of
/// RIDs, endpoints and connection ids.
#[tokio::test]
async fn o2_metric_labels_carry_no_identities() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this test binary");

    let bind = RouteMeshBind {
        application: free_tcp(),
        completion: free_tcp(),
    };
    let mut b = NodeConfig::new("node-bee");
    b.memberships = vec![Membership {
        role: Role::Server,
        channel: "chan-x".into(),
    }];
    b.route_mesh = Some(bind.clone());
    let bn = Node::start(b.clone()).await.expect("b");
    let mut a = NodeConfig::new("node-ay");
    a.peers = vec![PeerConfig {
        batch_calls: true,
        rid: "node-bee".into(),
        application: bind.application.clone(),
        completion: bind.completion.clone(),
        generation: None,
        security_identity: None,
    }];
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
