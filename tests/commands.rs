//! Commands over real sockets (MISSION K1-K6, seed 003): what a handler may answer, how calls
//! to one service are executed, idempotency, the operations registry and the contract.

mod common;

use std::time::Duration;

use common::{mesh_bind, peer, server_of, start_ready};
use zmesh::config::NodeConfig;
use zmesh::runtime::calls::{may_have_run, CallError, RemoteCode, Request, ServeError};
use zmesh::runtime::Node;

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(15);

/// A RouteMesh pair: `b` serves `channel` with `handler` (registered before it starts), `a`
/// dials it and is ready.
async fn pair<F, Fut>(channel: &str, handler: F) -> (Node, Node)
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<bytes::Bytes, ServeError>> + Send + 'static,
{
    let bind = mesh_bind(false);
    let mut b = NodeConfig::new("b");
    b.memberships = server_of(channel);
    b.route_mesh = Some(bind.clone());
    let b = Node::builder(b)
        .serve(channel, handler)
        .start()
        .await
        .expect("b");
    let mut a = NodeConfig::new("a");
    a.peers = vec![peer("b", &bind)];
    let (a, _events) = start_ready(a, "b").await;
    (a, b)
}

/// MISSION K6: a handler chooses its code from the allow-list; `Busy`, `Superseded`,
/// `NotFound` and `Unavailable` are the runtime's own, so a handler that returns one (even a
/// `ServeError` built field by field) answers `Exception`, which says it ran. `UnknownOutcome`
/// (a gateway whose downstream call was lost) travels as it is and says it may have run.
#[tokio::test]
async fn k6_handler_codes_outside_the_allow_list_become_exception() {
    let (a, b) = pair("gw", |req: Request| async move {
        Err(match req.method.as_str() {
            "busy" => ServeError {
                code: RemoteCode::Busy,
                message: "my own busy".into(),
            },
            "superseded" => ServeError::new(RemoteCode::Superseded, "mine"),
            "unavailable" => ServeError {
                code: RemoteCode::Unavailable,
                message: "mine".into(),
            },
            "lost" => ServeError::new(RemoteCode::UnknownOutcome, "the drive did not answer"),
            "forbidden" => ServeError::new(RemoteCode::Forbidden, "local mode"),
            _ => ServeError::method_not_found(&req.method),
        })
    })
    .await;
    let call = |m: &'static str| {
        let a = a.clone();
        async move {
            tokio::time::timeout(STEP, a.call::<_, ()>("gw", m, &()))
                .await
                .expect("answered")
                .expect_err("an error")
        }
    };
    for m in ["busy", "superseded", "unavailable"] {
        let err = call(m).await;
        assert!(
            matches!(
                &err,
                CallError::Remote {
                    code: RemoteCode::Exception,
                    ..
                }
            ),
            "{m}: {err:?}"
        );
        assert!(may_have_run(&err), "{m}: Exception ran");
    }
    let err = call("lost").await;
    assert!(
        matches!(&err, CallError::Remote { code: RemoteCode::UnknownOutcome, message } if message == "the drive did not answer"),
        "{err:?}"
    );
    assert!(may_have_run(&err));
    let err = call("forbidden").await;
    assert!(
        matches!(
            &err,
            CallError::Remote {
                code: RemoteCode::Forbidden,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!may_have_run(&err));
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}
