//! CURVE in the node, with real sockets (MISSION F1, F3, K6, W4):
//!
//! - a peer with the right key is ready on ClientServer and RouteMesh, and its verified key
//!   is its security identity (the authorizer sees `verified = true`, the snapshot shows it);
//! - a peer without CURVE, with a key not on the allow-list, expecting another server key, or
//!   presenting someone else's public key without its secret never becomes ready, and the
//!   node records `security_failure`;
//! - a peer with a valid key that claims another identity in its HELLO (another key, or the
//!   RID of a configured peer whose key it does not hold) is rejected;
//! - a fanout subscriber accepts only the publisher key it expects, and a publisher only the
//!   subscribers on its allow-list;
//! - a pyzmq CURVE client interoperates;
//! - the allow-list follows its directory (a change, `Node::reload_allow_list`, SIGHUP of
//!   `zmesh node`), and an admitted client whose key leaves it is closed.
//!
//! Every wait is bounded and waits for an event, never for time.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{free_tcp, mesh_bind, peer, py_script, server_of, Events, PyPeer};
use zmesh::config::{Endpoint, NodeConfig, RouteMeshBind, SecurityConfig, ServerConfig};
use zmesh::proto::security::{z85_encode, InputRefusal, PublicKey};
use zmesh::proto::state::{ConnState, FailureReason};
use zmesh::runtime::calls::{encode, Request};
use zmesh::runtime::security::{Caller, KeyPair, SecurityEvent};
use zmesh::runtime::service::{Method, Service};
use zmesh::runtime::snapshot::Snapshot;
use zmesh::runtime::{AllowListError, Node, NodeEvent};

/// Upper bound of every single wait.
const STEP: Duration = Duration::from_secs(20);
/// A Python peer never outlives this (seconds).
const PY_LIFETIME_S: u32 = 120;

/// Key files in a directory of this test's own, removed when dropped (even on a panic).
struct Keys {
    dir: tempfile::TempDir,
}

impl Keys {
    fn new(tag: &str) -> Keys {
        let dir = tempfile::Builder::new()
            .prefix(&format!("zmesh-curve-{tag}-"))
            .tempdir()
            .expect("key dir");
        Keys { dir }
    }

    /// A fresh key pair, written to `<name>.key`.
    fn pair(&self, name: &str) -> (KeyPair, PathBuf) {
        let pair = KeyPair::generate().expect("CURVE key pair");
        let path = self.dir.path().join(format!("{name}.key"));
        pair.write_new(&path).expect("write key file");
        (pair, path)
    }

    /// A subdirectory (an `allow_dir`).
    fn subdir(&self, name: &str) -> PathBuf {
        let d = self.dir.path().join(name);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }
}

/// CURVE with `key_file`, admitting `allow`.
fn curve(key_file: &std::path::Path, allow: &[PublicKey]) -> SecurityConfig {
    SecurityConfig::curve(key_file).allow(allow.iter().copied())
}

/// The node `srv`: a Server of `vault` serving ClientServer clients at `server_ep`, under
/// CURVE with `key_file`, admitting `allow`.
fn vault_server(server_ep: &str, key_file: &std::path::Path, allow: &[PublicKey]) -> NodeConfig {
    let mut cfg = NodeConfig::new("srv");
    cfg.memberships = server_of("vault");
    cfg.server = Some(Endpoint::new(server_ep.to_owned()));
    cfg.security = curve(key_file, allow);
    cfg
}

/// A ClientServer client of `vault` at `ep`, under `security`, expecting `server_key` there.
fn client(
    rid: &str,
    ep: &str,
    security: SecurityConfig,
    server_key: Option<PublicKey>,
) -> NodeConfig {
    let mut c = NodeConfig::new(rid);
    c.servers = vec![ServerConfig::new("vault", ep.to_owned())];
    c.security = security;
    if let Some(k) = server_key {
        c.security.endpoint_keys.insert(ep.to_owned(), k);
    }
    c
}

/// The `vault` service: `whoami` answers the caller's RID; its authorizer records every
/// caller it is asked about and lets everyone in.
fn vault(seen: Arc<Mutex<Vec<Caller>>>) -> Service {
    Service::new("vault")
        .method(Method::query("whoami"), |r: Request| async move {
            encode(&r.caller)
        })
        .authorize(move |call| {
            seen.lock().expect("seen").push(call.caller.clone());
            Ok(())
        })
}

/// Starts the node of `cfg` with the [`vault`] service, its authorizer recording into `seen`.
async fn start_vault(cfg: NodeConfig, seen: &Arc<Mutex<Vec<Caller>>>) -> Node {
    Node::builder(cfg)
        .expose(vault(seen.clone()))
        .start()
        .await
        .expect("the vault node")
}

/// Makes `security` expect `key` of the node bound at both RouteMesh lanes of `lanes`.
fn expect_lanes(security: &mut SecurityConfig, lanes: &RouteMeshBind, key: PublicKey) {
    for ep in [&lanes.application, &lanes.completion] {
        security.endpoint_keys.insert(ep.clone(), key);
    }
}

fn is_ready(ev: &NodeEvent) -> bool {
    matches!(ev, NodeEvent::State(s) if s.state == ConnState::Ready)
}

fn is_security_failure(ev: &NodeEvent) -> bool {
    matches!(ev, NodeEvent::State(s) if s.reason == Some(FailureReason::SecurityFailure))
}

/// Waits for `n` security failures of `events`' node, then checks in its snapshot that none
/// of its links was ever ready.
async fn never_ready(node: &Node, events: &mut Events, n: usize, who: &str) -> Snapshot {
    for _ in 0..n {
        events.wait(STEP, is_security_failure).await;
    }
    let snap = node.snapshot().await.expect("snapshot");
    for l in &snap.links {
        assert_eq!(
            l.ready_count,
            0,
            "{who}: a link was ready:\n{}",
            snap.to_table()
        );
    }
    let failure = snap.links[0].last_failure.as_ref().expect("a failure");
    assert_eq!(failure.reason, FailureReason::SecurityFailure, "{who}");
    snap
}

/// MISSION F3: a client and a RouteMesh peer with the right keys become ready; the server's
/// authorizer sees each caller's verified key as its security identity (`verified = true`,
/// MISSION K6); both sides' snapshots show the verified identities; the descriptor a CURVE
/// node would publish carries its key.
#[tokio::test]
async fn f3_curve_right_keys_are_ready_and_verified() {
    let keys = Keys::new("right");
    let (srv_k, srv_f) = keys.pair("srv");
    let (cli_k, cli_f) = keys.pair("cli");
    let (peer_k, peer_f) = keys.pair("peer");
    let server_ep = free_tcp();
    let lanes = mesh_bind(true);
    let mut cfg = vault_server(&server_ep, &srv_f, &[cli_k.public, peer_k.public]);
    cfg.route_mesh = Some(lanes.clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = start_vault(cfg, &seen).await;

    let cli = Node::start(client(
        "cli",
        &server_ep,
        curve(&cli_f, &[]),
        Some(srv_k.public),
    ))
    .await
    .expect("client");
    let mut p = NodeConfig::new("peer");
    p.peers = vec![peer("srv", &lanes)];
    p.security = curve(&peer_f, &[]);
    expect_lanes(&mut p.security, &lanes, srv_k.public);
    let mesh = Node::start(p).await.expect("peer");
    let mut cli_events = Events::new(cli.take_events().expect("events"));
    cli_events.wait(STEP, is_ready).await;
    let mut mesh_events = Events::new(mesh.take_events().expect("events"));
    common::wait_peer_ready(&mesh, &mut mesh_events, "srv").await;

    let rid: String = cli.call("vault", "whoami", &()).await.expect("call");
    assert_eq!(rid, "cli");
    let rid: String = mesh.call("vault", "whoami", &()).await.expect("mesh call");
    assert_eq!(rid, "peer");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(
        seen,
        vec![
            Caller {
                rid: "cli".into(),
                security_identity: cli_k.public.to_z85(),
                verified: true,
            },
            Caller {
                rid: "peer".into(),
                security_identity: peer_k.public.to_z85(),
                verified: true,
            },
        ]
    );

    let snap = server.snapshot().await.expect("snapshot");
    assert_eq!(snap.security.mode, "curve");
    assert_eq!(snap.security.public_key, Some(srv_k.public.to_z85()));
    assert_eq!(snap.security.allowed_keys, 2);
    let inbound: Vec<_> = snap
        .links
        .iter()
        .filter(|l| l.state == ConnState::Ready)
        .map(|l| {
            (
                l.peer.clone().unwrap_or_default(),
                l.peer_security_identity.clone(),
                l.verified,
            )
        })
        .collect();
    assert_eq!(inbound.len(), 3, "{}", snap.to_table());
    for (rid, identity, verified) in inbound {
        let want = if rid == "cli" {
            cli_k.public
        } else {
            peer_k.public
        };
        assert_eq!((identity, verified), (Some(want.to_z85()), true), "{rid}");
    }
    for node in [&cli, &mesh] {
        let snap = node.snapshot().await.expect("snapshot");
        for l in &snap.links {
            assert!(l.verified, "{}", snap.to_table());
            assert_eq!(l.peer_security_identity, Some(srv_k.public.to_z85()));
        }
    }
    for n in [cli, mesh, server] {
        n.shutdown().await.expect("shutdown");
    }
}

/// MISSION F3: against a CURVE server that allows one key, a client without CURVE,
/// one whose key is not on the allow-list, one that expects another server key, and one that
/// presents the allowed public key without its secret key each fail with `security_failure`
/// again and again and are never ready; the server records `security_failure` for each kind,
/// by reason only in its metric (O2), and admits none of them. The allowed client is served
/// meanwhile.
#[tokio::test]
async fn f3_no_key_wrong_key_and_unlisted_key_are_never_ready() {
    let keys = Keys::new("refused");
    let (srv_k, srv_f) = keys.pair("srv");
    let (good_k, good_f) = keys.pair("good");
    let (stranger_k, stranger_f) = keys.pair("stranger");
    let (impostor_k, _) = keys.pair("impostor");
    // The allowed public key with another secret key: the raw 64-byte key file form.
    let impostor_f = keys.dir.path().join("impostor-raw.key");
    let mut raw = good_k.public.as_bytes().to_vec();
    raw.extend_from_slice(impostor_k.secret_bytes());
    std::fs::write(&impostor_f, raw).expect("raw key file");

    let server_ep = free_tcp();
    let cfg = vault_server(&server_ep, &srv_f, &[good_k.public]);
    let server = start_vault(cfg, &Arc::new(Mutex::new(Vec::new()))).await;
    let mut server_events = Events::new(server.take_events().expect("events"));

    let good = Node::start(client(
        "good",
        &server_ep,
        curve(&good_f, &[]),
        Some(srv_k.public),
    ))
    .await
    .expect("good");
    let mut good_events = Events::new(good.take_events().expect("events"));
    good_events.wait(STEP, is_ready).await;
    server_events.wait(STEP, is_ready).await;

    let refused = [
        (
            "nokey",
            client("nokey", &server_ep, SecurityConfig::default(), None),
        ),
        (
            "stranger",
            client(
                "stranger",
                &server_ep,
                curve(&stranger_f, &[]),
                Some(srv_k.public),
            ),
        ),
        (
            "misdial",
            client(
                "misdial",
                &server_ep,
                curve(&good_f, &[]),
                Some(stranger_k.public),
            ),
        ),
        (
            "impostor",
            client(
                "impostor",
                &server_ep,
                curve(&impostor_f, &[]),
                Some(srv_k.public),
            ),
        ),
    ];
    let mut nodes = Vec::new();
    for (who, cfg) in refused {
        let node = Node::start(cfg).await.expect("client");
        let mut events = Events::new(node.take_events().expect("events"));
        let snap = never_ready(&node, &mut events, 2, who).await;
        let detail = &snap.links[0].last_failure.as_ref().expect("failure").detail;
        eprintln!("{who}: {detail}");
        nodes.push(node);
    }

    // The allowed client was served all along, and the server admitted nobody else.
    let rid: String = good.call("vault", "whoami", &()).await.expect("call");
    assert_eq!(rid, "good");
    for ev in server_events.drain_now() {
        assert!(!is_ready(&ev), "the server admitted someone: {ev:?}");
    }
    // A client learns of its failure from its own socket, the server from its monitor: the
    // server's list may still lack a refusal when the last client gave up, so it is read
    // until every one is there (bounded by STEP).
    let wanted = [
        "without CURVE".to_owned(),
        format!("client key {} is not on the allow-list", stranger_k.public),
        "the CURVE handshake failed".to_owned(),
    ];
    let security_details = |snap: &Snapshot| -> Vec<String> {
        snap.recent_refusals
            .iter()
            .filter(|r| r.reason == InputRefusal::SecurityFailure)
            .map(|r| r.detail.clone())
            .collect()
    };
    let deadline = tokio::time::Instant::now() + STEP;
    let snap = loop {
        let snap = server.snapshot().await.expect("snapshot");
        let details = security_details(&snap);
        let all = wanted
            .iter()
            .all(|w| details.iter().any(|d| d.contains(w.as_str())));
        if all || tokio::time::Instant::now() >= deadline {
            break snap;
        }
    };
    let details = security_details(&snap);
    for want in &wanted {
        assert!(
            details.iter().any(|d| d.contains(want.as_str())),
            "no refusal saying {want:?} in {details:#?}"
        );
    }
    assert!(snap.recent_refusals.iter().all(|r| r.endpoint == server_ep));
    for n in nodes.into_iter().chain([good, server]) {
        n.shutdown().await.expect("shutdown");
    }
}

/// A pyzmq CURVE DEALER (`zmq.has("curve")`) with the given keys: a HELLO on lane `lane`
/// claiming `rid` and security identity `claimed`; reports the WELCOME (and then makes one
/// call of `vault.whoami`) or the REJECT, and the call's REPLY.
const PY_CURVE_CLIENT: &str = r#"
ep, server_key, public, secret, lane, rid, claimed = sys.argv[1:8]
if not zmq.has("curve"):
    emit(error="pyzmq's libzmq has no CURVE")
    sys.exit(1)
ctx = zmq.Context()
d = ctx.socket(zmq.DEALER)
d.linger = 0
d.curve_serverkey = server_key.encode()
d.curve_publickey = public.encode()
d.curve_secretkey = secret.encode()
d.connect(ep)
d.send(envelope(0x01) + bytes([int(lane)]) + string(rid) + u64(7) + string(claimed)
       + string("") + u64(0) + u64(0) + u16(0))
while time.monotonic() < DEADLINE:
    if not d.poll(50):
        continue
    frames = d.recv_multipart()
    f0 = frames[0]
    kind, r = f0[3], Reader(f0[4:])
    if kind == 0x02:
        r.u8()
        emit(welcome=r.string(), generation=r.u64(), identity=r.string())
        d.send_multipart([envelope(0x07) + u64(1) + u64(0) + bytes([0]) + string("vault")
                          + string("whoami") + string(""), bytes([0xC0])])
    elif kind == 0x03:
        emit(reject=r.u8(), detail=r.string())
    elif kind == 0x04:
        d.send(envelope(0x05) + f0[4:12])
    elif kind == 0x09:
        emit(reply=r.u64(), code=r.u8(), payload=frames[1].hex())
"#;

/// Runs [`PY_CURVE_CLIENT`] until it reports a WELCOME's call REPLY or a REJECT.
async fn py_curve(
    ep: &str,
    server: &KeyPair,
    me: &KeyPair,
    lane: u8,
    rid: &str,
    claimed: &str,
) -> serde_json::Value {
    let secret = z85_encode(me.secret_bytes()).expect("z85");
    let mut py = PyPeer::start(
        &py_script(PY_CURVE_CLIENT, PY_LIFETIME_S),
        &[
            ep,
            &server.public.to_z85(),
            &me.public.to_z85(),
            &secret,
            &lane.to_string(),
            rid,
            claimed,
        ],
    );
    loop {
        let v = py.next(Duration::from_secs(60)).await;
        assert!(v.get("error").is_none(), "{v}");
        if v.get("reply").is_some() || v.get("reject").is_some() {
            return v;
        }
        assert!(v.get("welcome").is_some(), "{v}");
    }
}

/// MISSION W4, F1, F3: a pyzmq CURVE client interoperates: its
/// HELLO claiming its own key is admitted and its call answered, the authorizer seeing its
/// verified key. The same client claiming another key is rejected `SecurityFailure`; on a
/// RouteMesh lane, claiming the RID of a configured peer whose key it does not hold is
/// rejected `SecurityFailure` too. The server records both.
#[tokio::test]
async fn w4_pyzmq_curve_client_interoperates_and_cannot_claim_another_identity() {
    let keys = Keys::new("pyzmq");
    let (srv_k, srv_f) = keys.pair("srv");
    let (py_k, _) = keys.pair("py");
    let (other_k, _) = keys.pair("other");
    let (b_k, _) = keys.pair("b");
    let server_ep = free_tcp();
    let lanes = mesh_bind(true);
    let b_lanes = mesh_bind(true);
    let mut cfg = vault_server(&server_ep, &srv_f, &[py_k.public, other_k.public]);
    cfg.route_mesh = Some(lanes.clone());
    // A configured peer "b" whose key is pinned (nobody listens at its endpoints).
    cfg.peers = vec![peer("b", &b_lanes)];
    expect_lanes(&mut cfg.security, &b_lanes, b_k.public);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = start_vault(cfg, &seen).await;

    let own = py_k.public.to_z85();
    let honest = py_curve(&server_ep, &srv_k, &py_k, 3, "py", &own).await;
    assert_eq!(honest["code"], 0, "{honest}");
    assert_eq!(
        seen.lock().expect("seen").as_slice(),
        [Caller {
            rid: "py".into(),
            security_identity: own.clone(),
            verified: true,
        }]
    );

    let liar = py_curve(&server_ep, &srv_k, &py_k, 3, "py", &other_k.public.to_z85()).await;
    assert_eq!(liar["reject"], 4, "SecurityFailure: {liar}");
    let as_b = py_curve(&lanes.application, &srv_k, &py_k, 1, "b", &own).await;
    assert_eq!(as_b["reject"], 4, "SecurityFailure: {as_b}");
    assert_eq!(
        seen.lock().expect("seen").len(),
        1,
        "no other call got through"
    );

    let snap = server.snapshot().await.expect("snapshot");
    let refusals: Vec<(&str, &str)> = snap
        .recent_refusals
        .iter()
        .filter(|r| r.reason == InputRefusal::SecurityFailure)
        .map(|r| (r.endpoint.as_str(), r.detail.as_str()))
        .collect();
    assert!(
        refusals
            .iter()
            .any(|(ep, d)| *ep == server_ep && d.contains("claims security identity")),
        "{refusals:#?}"
    );
    assert!(
        refusals
            .iter()
            .any(|(ep, d)| *ep == lanes.application && d.contains(&b_k.public.to_z85())),
        "{refusals:#?}"
    );
    server.shutdown().await.expect("shutdown");
}

/// MISSION F3: a fanout subscriber accepts only the publisher key it expects: of
/// two CURVE publishers that both allow it, the one holding the expected key becomes ready,
/// the other never does (`security_failure`, again and again); a subscriber missing from a
/// publisher's allow-list is refused (`security_failure` on both sides).
#[tokio::test]
async fn f3_fanout_subscriber_accepts_only_its_publisher_key() {
    let keys = Keys::new("fanout");
    let (pub_k, pub_f) = keys.pair("pub");
    let (other_k, other_f) = keys.pair("other");
    let (sub_k, sub_f) = keys.pair("sub");
    let (late_k, late_f) = keys.pair("late");
    let _ = late_k;
    let (pub_ep, other_ep) = (free_tcp(), free_tcp());
    let publisher = |rid: &str, ep: &str, f: &std::path::Path| {
        let mut c = NodeConfig::new(rid);
        c.publisher = Some(Endpoint::new(ep.to_owned()));
        c.security = curve(f, &[sub_k.public]);
        c
    };
    let p = Node::start(publisher("pub", &pub_ep, &pub_f))
        .await
        .expect("pub");
    let q = Node::start(publisher("other", &other_ep, &other_f))
        .await
        .expect("other");
    let _ = other_k;

    // The subscriber expects pub's key at both endpoints.
    let mut s = NodeConfig::new("sub");
    s.subscriptions = vec![
        Endpoint::new(pub_ep.clone()),
        Endpoint::new(other_ep.clone()),
    ];
    s.security = curve(&sub_f, &[]);
    for ep in [&pub_ep, &other_ep] {
        s.security.endpoint_keys.insert(ep.clone(), pub_k.public);
    }
    let sub = Node::start(s).await.expect("sub");
    let mut events = Events::new(sub.take_events().expect("events"));
    let other_link = format!("sub {other_ep}");
    let pub_link = format!("sub {pub_ep}");
    let mut failures = 0;
    let mut ready = false;
    while failures < 2 || !ready {
        let ev = events
            .wait(STEP, |e| is_ready(e) || is_security_failure(e))
            .await;
        let NodeEvent::State(st) = ev else { continue };
        if st.state == ConnState::Ready {
            assert_eq!(st.link, pub_link, "only pub's subscription becomes ready");
            ready = true;
        } else {
            assert_eq!(st.link, other_link, "{st:?}");
            failures += 1;
        }
    }
    let snap = sub.snapshot().await.expect("snapshot");
    let link = |ep: &str| {
        snap.links
            .iter()
            .find(|l| l.endpoint == ep)
            .expect("subscription")
    };
    assert_eq!(link(&other_ep).ready_count, 0, "{}", snap.to_table());
    assert!(link(&pub_ep).verified);
    assert_eq!(
        link(&pub_ep).peer_security_identity,
        Some(pub_k.public.to_z85())
    );

    // A subscriber the publisher does not allow.
    let mut l = NodeConfig::new("late");
    l.subscriptions = vec![Endpoint::new(pub_ep.clone())];
    l.security = curve(&late_f, &[]);
    l.security
        .endpoint_keys
        .insert(pub_ep.clone(), pub_k.public);
    let late = Node::start(l).await.expect("late");
    let mut late_events = Events::new(late.take_events().expect("events"));
    never_ready(&late, &mut late_events, 2, "late").await;
    let psnap = p.snapshot().await.expect("snapshot");
    assert!(
        psnap
            .recent_refusals
            .iter()
            .any(|r| r.reason == InputRefusal::SecurityFailure && r.endpoint == pub_ep),
        "{:#?}",
        psnap.recent_refusals
    );
    for n in [late, sub, p, q] {
        n.shutdown().await.expect("shutdown");
    }
}

/// MISSION F3: the allow-list follows its directory. A client whose key is not listed fails
/// (`security_failure`); once its key file appears the node reads the directory again by
/// itself (`change`) and the client becomes ready; `reload_allow_list` reads it on demand;
/// when the file goes, the admitted client is closed (`security_failure` on both sides).
#[tokio::test]
async fn f3_allow_list_follows_its_directory() {
    let keys = Keys::new("allowdir");
    let (srv_k, srv_f) = keys.pair("srv");
    let (cli_k, cli_f) = keys.pair("cli");
    let allowed = keys.subdir("allowed");
    let server_ep = free_tcp();
    let mut cfg = NodeConfig::new("srv");
    cfg.server = Some(Endpoint::new(server_ep.clone()));
    cfg.security = SecurityConfig::curve(&srv_f).allow_dir(allowed.clone());
    let server = Node::start(cfg).await.expect("server");
    let mut server_events = Events::new(server.take_events().expect("events"));
    let cli = Node::start(client(
        "cli",
        &server_ep,
        curve(&cli_f, &[]),
        Some(srv_k.public),
    ))
    .await
    .expect("client");
    let mut cli_events = Events::new(cli.take_events().expect("events"));
    cli_events.wait(STEP, is_security_failure).await;

    let file = allowed.join("cli.pub");
    std::fs::write(&file, format!("# cli\n{}\n", cli_k.public)).expect("key file");
    let loaded = server_events
        .wait(STEP, |e| matches!(e, NodeEvent::Security(_)))
        .await;
    assert_eq!(
        loaded,
        NodeEvent::Security(SecurityEvent::AllowListLoaded {
            keys: 1,
            trigger: "change"
        })
    );
    cli_events.wait(STEP, is_ready).await;
    assert_eq!(server.reload_allow_list().await.expect("reload"), 1);

    std::fs::remove_file(&file).expect("remove key file");
    assert_eq!(server.reload_allow_list().await.expect("reload"), 0);
    server_events
        .wait(STEP, |e| {
            matches!(e, NodeEvent::State(s) if s.reason == Some(FailureReason::SecurityFailure)
                && s.detail.contains("removed from the allow-list"))
        })
        .await;
    let closed = cli_events
        .wait(
            STEP,
            |e| matches!(e, NodeEvent::State(s) if s.state != ConnState::Ready),
        )
        .await;
    assert!(is_security_failure(&closed), "{closed:?}");
    let snap = server.snapshot().await.expect("snapshot");
    assert_eq!(snap.security.allowed_keys, 0);
    assert!(snap.security.allow_list_reloads >= 3);
    // A file that holds no key is the reload's error; the empty list stays in force.
    std::fs::write(&file, "not a key\n").expect("bad key file");
    let refused = server.reload_allow_list().await;
    assert!(
        matches!(refused, Err(AllowListError::Unreadable(_))),
        "{refused:?}"
    );
    for n in [cli, server.clone()] {
        n.shutdown().await.expect("shutdown");
    }
    let stopped = server.reload_allow_list().await;
    assert!(
        matches!(stopped, Err(AllowListError::Stopped)),
        "{stopped:?}"
    );
}

/// Kills the child when dropped, so a failed assertion leaves no node behind.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// MISSION F3: `zmesh node` reads its allow-list again on SIGHUP and says so (an ndjson
/// `security` event with trigger `reload`), and warns at start in `none` mode.
#[tokio::test]
async fn f3_zmesh_node_reloads_its_allow_list_on_sighup() {
    use std::io::{BufRead, BufReader};
    let keys = Keys::new("sighup");
    let (_, srv_f) = keys.pair("srv");
    let (cli_k, _) = keys.pair("cli");
    let allowed = keys.subdir("allowed");
    std::fs::write(allowed.join("cli.pub"), format!("{}\n", cli_k.public)).expect("key");
    let mut cfg = NodeConfig::new("hup");
    cfg.server = Some(Endpoint::new(free_tcp()));
    cfg.security = SecurityConfig::curve(&srv_f).allow_dir(allowed);
    let path = keys.dir.path().join("hup.toml");
    std::fs::write(&path, toml::to_string(&cfg).expect("toml")).expect("write");
    let control = common::ipc("hup-control");
    let mut node = Child(
        Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args(["node", "--events", "ndjson", "--control"])
            .arg(&control)
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn zmesh node"),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = node.0.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // A SIGHUP before the node handles it would end the process: once its control endpoint
    // answers, its handler is in place (zmesh node installs it first).
    let deadline = std::time::Instant::now() + STEP;
    let status = loop {
        let status = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args(["status", "--json", "--control", &control])
            .output()
            .expect("zmesh status");
        if status.status.success() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no status: {status:?}"
        );
    };
    let snap: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(snap["security"]["mode"], "curve", "{snap}");
    assert_eq!(snap["security"]["allowed_keys"], 1, "{snap}");
    let kill = Command::new("kill")
        .args(["-HUP", &node.0.id().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(kill.success());
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no security event within {STEP:?}"));
        let v: serde_json::Value = serde_json::from_str(&line).expect("ndjson");
        if v["event"] == "security" {
            assert_eq!(v["kind"], "allow_list_loaded", "{v}");
            assert_eq!(v["trigger"], "reload", "{v}");
            assert_eq!(v["keys"], 1, "{v}");
            break;
        }
    }
    assert!(
        node.0.try_wait().expect("wait").is_none(),
        "SIGHUP ended the node"
    );
}

/// Automatic mode (MISSION D1, F3, T3): a CURVE node's descriptor carries its
/// public key as its security identity; nodes that find each other in the store dial with
/// the key of the descriptor (RouteMesh lanes, the ClientServer server, the publisher), and
/// every link is verified: no key is configured for any endpoint.
#[tokio::test]
async fn d1_f3_discovered_peers_are_dialled_with_their_descriptor_key() {
    use zmesh::config::{AutoBind, DiscoveryConfig};
    use zmesh::runtime::store::{SqliteStore, Store};
    let keys = Keys::new("discovery");
    let (a_k, a_f) = keys.pair("a");
    let (b_k, b_f) = keys.pair("b");
    let db = keys.dir.path().join("mesh.db");
    let url = format!("sqlite://{}", db.display());
    let mut a = NodeConfig::new("a");
    a.memberships = server_of("vault");
    let mut a_discovery = DiscoveryConfig::new(url.clone());
    a_discovery.bind = vec![AutoBind::RouteMesh, AutoBind::Server, AutoBind::Publisher];
    a.discovery = Some(a_discovery);
    a.security = curve(&a_f, &[b_k.public]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let a = start_vault(a, &seen).await;
    // Only a dials RouteMesh (b's lanes, with b's descriptor key): no mutual dial to
    // resolve while b calls.
    let mut b = NodeConfig::new("b");
    b.memberships = common::client_of("vault");
    let mut b_discovery = DiscoveryConfig::new(url);
    b_discovery.route_mesh = false;
    b.discovery = Some(b_discovery);
    b.security = curve(&b_f, &[a_k.public]);
    let b = Node::start(b).await.expect("b");
    let mut b_events = Events::new(b.take_events().expect("events"));
    // a's two RouteMesh lanes (inbound at b), b's ClientServer link and its subscription.
    let mut ready = std::collections::BTreeSet::new();
    while ready.len() < 4 {
        if let NodeEvent::State(s) = b_events.wait(STEP, is_ready).await {
            ready.insert(s.link);
        }
    }
    // A node whose descriptor key b does not allow is never dialled: the store is not
    // trusted with keys.
    let (_, c_f) = keys.pair("c");
    let mut c = NodeConfig::new("c");
    c.memberships = server_of("vault");
    let mut c_discovery = DiscoveryConfig::new(format!("sqlite://{}", db.display()));
    c_discovery.bind = vec![AutoBind::Server];
    c_discovery.route_mesh = false;
    c.discovery = Some(c_discovery);
    c.security = curve(&c_f, &[b_k.public]);
    let c = Node::start(c).await.expect("c");
    b_events
        .wait(STEP, |e| {
            is_security_failure(e)
                && matches!(e, NodeEvent::State(s) if s.detail.contains("not on this node's allow-list"))
        })
        .await;

    let rid: String = b.call("vault", "whoami", &()).await.expect("call");
    assert_eq!(rid, "b");
    assert!(seen
        .lock()
        .expect("seen")
        .iter()
        .all(|c| c.verified && c.security_identity == b_k.public.to_z85()));
    let snap = b.snapshot().await.expect("snapshot");
    let ready: Vec<_> = snap
        .links
        .iter()
        .filter(|l| l.state == ConnState::Ready)
        .collect();
    assert!(ready.len() >= 4, "{}", snap.to_table());
    for l in ready {
        assert!(l.verified, "{}", snap.to_table());
        assert_eq!(l.peer_security_identity, Some(a_k.public.to_z85()));
    }
    assert!(
        snap.links
            .iter()
            .filter(|l| l.peer.as_deref() == Some("c"))
            .all(|l| l.ready_count == 0),
        "{}",
        snap.to_table()
    );
    let snap = a.snapshot().await.expect("snapshot");
    let dialled: Vec<_> = snap
        .links
        .iter()
        .filter(|l| l.peer.as_deref() == Some("b") && l.state == ConnState::Ready)
        .collect();
    assert!(dialled.len() >= 3, "{}", snap.to_table());
    for l in dialled {
        assert!(l.verified, "{}", snap.to_table());
        assert_eq!(l.peer_security_identity, Some(b_k.public.to_z85()));
    }
    let listed = SqliteStore::new(&db).list().await.expect("list");
    let identity = |rid: &str| {
        listed
            .iter()
            .find(|e| e.descriptor.rid == rid)
            .map(|e| e.descriptor.security_identity.clone())
    };
    assert_eq!(identity("a"), Some(a_k.public.to_z85()));
    assert_eq!(identity("b"), Some(b_k.public.to_z85()));
    for n in [b, c, a] {
        n.shutdown().await.expect("shutdown");
    }
}
