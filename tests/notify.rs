//! A dialled RouteMesh lane keeps its libzmq monitor only until its handshake is
//! done; from then on it learns of its connection's loss in band, from libzmq's
//! `ROUTER_NOTIFY` notice, and still fails at once (MISSION L6), then dials again only after
//! its old socket's close was confirmed (F3), with a monitor attached again for that close.

mod common;

use std::time::Duration;

use common::{mesh_bind, mesh_server, start_ready, wait_peer_ready, CutProxy};
use zmesh::config::{NodeConfig, PeerConfig};
use zmesh::proto::state::{ConnState, FailureReason};
use zmesh::runtime::{Node, NodeEvent};

/// Longer than any wait here should take, shorter than the 15 s liveness deadline: a lane that
/// failed only by its deadline would say `deadline_exceeded` and come later than this.
const AT_ONCE: Duration = Duration::from_secs(10);

/// L6, F3: both lanes `a` dialled to `b` run without their monitors once ready;
/// when a proxy cuts both connections (the processes run on), each lane fails at once with
/// `transport_error` "disconnected" (the in-band notice), never by the 15 s deadline, and
/// both are ready again on new connections, twice in a row (the close of each old socket is
/// confirmed by the monitor attached for it before the redial). Fails if the notice is
/// lost (libzmq's `IMMEDIATE = 1` dropped it: the lanes then failed by their deadline).
#[tokio::test]
async fn l6_f3_dialled_lanes_without_monitors_fail_at_once_when_cut_and_come_back() {
    let b_bind = mesh_bind(true);
    let b = mesh_server("b", "orders", &b_bind);
    let b = Node::start(b).await.expect("b");
    let app = CutProxy::start(&b_bind.application);
    let cpl = CutProxy::start(&b_bind.completion);
    let mut a = NodeConfig::new("a");
    a.peers = vec![PeerConfig::new(
        "b",
        app.endpoint.clone(),
        cpl.endpoint.clone(),
    )];
    let (a, mut ea) = start_ready(a, "b").await;
    for round in 0..2 {
        // At least the lanes' own connections (a socket closed late may have let libzmq
        // re-dial once through the proxy meanwhile; that connection is cut too).
        let cut = app.cut() + cpl.cut();
        assert!(cut >= 2, "round {round}: {cut} connections cut");
        let lanes = ["peer b application", "peer b completion"];
        let failed = ea
            .wait_each(
                AT_ONCE,
                lanes
                    .iter()
                    .map(|lane| {
                        Box::new(move |e: &NodeEvent| {
                            matches!(e, NodeEvent::State(s)
                                if s.link == *lane && s.state != ConnState::Ready)
                        }) as common::EventPred
                    })
                    .collect(),
            )
            .await;
        for ev in failed {
            let NodeEvent::State(s) = ev else {
                unreachable!("a state event")
            };
            assert_eq!(
                s.reason,
                Some(FailureReason::TransportError),
                "round {round}: {s:?}"
            );
            assert!(s.detail.contains("disconnected"), "round {round}: {s:?}");
        }
        wait_peer_ready(&a, &mut ea, "b").await;
    }
    a.shutdown().await.expect("a stops");
    b.shutdown().await.expect("b stops");
}
