//! Typed services (MISSION A1) and awaitable readiness (MISSION A2): a `#[zmesh::service]`
//! trait exposed on one node and called through its generated client from another, over
//! real sockets on 127.0.0.1.

mod common;

use std::collections::{HashMap, HashSet};
use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{free_tcp, mesh_bind, mesh_server, peer, server_of};
use tokio::sync::Barrier;
use zmesh::config::{Endpoint, NodeConfig, ServerConfig};
use zmesh::proto::contract::{ExecutionKind, Semantics, ServiceContract, Shape};
use zmesh::proto::state::ConnState;
use zmesh::runtime::calls::{encode, may_have_run, CallError, RemoteCode, Request, ServeError};
use zmesh::runtime::service::{Method, Service};
use zmesh::runtime::{
    LinkId, MeshLane, Node, NodeError, NodeEvent, NodeStopped, ReadyError, Target,
};
use zmesh::typed::{Context, Items};

/// Longest wait for any one step; a bound on failure, never a synchronisation.
const STEP: Duration = Duration::from_secs(10);

/// An observation window in which a wait that must stay pending is watched (a wrong `ready`
/// resolves within one snapshot round trip, well inside it).
const WINDOW: Duration = Duration::from_millis(300);

/// The pump of the README: a reading, a conflating setpoint, a non-repeatable dispense.
#[zmesh::service(channel = "pump", version = 3, execution = serial)]
pub trait Pump {
    /// The pressure, in bar.
    #[query]
    async fn pressure(&self) -> f64;

    /// Sets the setpoint; the newest one wins.
    #[idempotent(conflate)]
    async fn set_setpoint(&self, bar: f64) -> f64;

    /// Dispenses `litres`, once per call: who asked, and with which key.
    #[non_repeatable]
    async fn dispense(&self, ctx: Context, litres: u32) -> Result<String, ServeError>;

    /// Adds two numbers (several arguments travel as an array).
    async fn add(&self, a: i64, b: i64) -> i64;
}

struct Plant {
    dispensed: AtomicU64,
}

impl Pump for Plant {
    async fn pressure(&self) -> f64 {
        1.25
    }

    async fn set_setpoint(&self, bar: f64) -> f64 {
        bar
    }

    async fn dispense(&self, ctx: Context, litres: u32) -> Result<String, ServeError> {
        if litres == 0 {
            return Err(ServeError::new(
                RemoteCode::InvalidParams,
                "nothing to dispense",
            ));
        }
        self.dispensed
            .fetch_add(u64::from(litres), Ordering::SeqCst);
        Ok(format!(
            "{litres} l for {} (key {})",
            ctx.caller(),
            ctx.idempotency_key().unwrap_or("-")
        ))
    }

    async fn add(&self, a: i64, b: i64) -> i64 {
        a + b
    }
}

/// A ClientServer server node `srv` at `ep` exposing `service`.
async fn server(ep: &str, service: Service) -> Node {
    let mut config = NodeConfig::new("srv");
    config.memberships = server_of(service.channel());
    config.server = Some(Endpoint::new(ep.to_owned()));
    Node::builder(config)
        .expose(service)
        .start()
        .await
        .expect("server starts")
}

/// A client node `cli` that dials the server of `channel` at `ep`.
async fn client(ep: &str, channel: &str) -> Node {
    let mut config = NodeConfig::new("cli");
    config.servers = vec![ServerConfig::new(channel.to_owned(), ep.to_owned()).rid("srv")];
    Node::start(config).await.expect("client starts")
}

async fn bounded<F: IntoFuture>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(STEP, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {STEP:?}"))
}

/// MISSION A1: a typed client calls each method of a trait-defined service with typed
/// arguments and gets typed results; a handler's `Err` arrives with its code; the request
/// context carries the caller and its idempotency key.
#[tokio::test]
async fn a1_typed_client_calls_a_trait_service() {
    let ep = free_tcp();
    let plant = Plant {
        dispensed: AtomicU64::new(0),
    };
    let srv = server(&ep, plant.into_service()).await;
    let cli = client(&ep, "pump").await;
    let pump = PumpClient::new(&cli);
    bounded("ready", pump.ready()).await.expect("ready");

    let bar: f64 = bounded("pressure", pump.pressure())
        .await
        .expect("pressure");
    assert_eq!(bar, 1.25);
    let set = bounded("setpoint", pump.set_setpoint(2.5))
        .await
        .expect("set");
    assert_eq!(set, 2.5);
    assert_eq!(bounded("add", pump.add(40, 2)).await.expect("add"), 42);
    let receipt = bounded("dispense", pump.dispense(5).idempotency_key("order-7"))
        .await
        .expect("dispense");
    assert_eq!(receipt, "5 l for cli (key order-7)");
    let err = bounded("dispense 0", pump.dispense(0))
        .await
        .expect_err("a handler's Err is the call's");
    match &err {
        CallError::Remote { code, message } => {
            assert_eq!(*code, RemoteCode::InvalidParams);
            assert_eq!(message, "nothing to dispense");
        }
        other => panic!("expected the handler's error, got {other:?}"),
    }
    cli.shutdown().await.expect("cli stops");
    srv.shutdown().await.expect("srv stops");
}

/// MISSION A1, K3, X3: a typed call's `answer()` says whether the callee answered from its
/// idempotency record. A retry of a non-repeatable command with the same key gets the first
/// call's typed result marked replayed; a new key runs the method again, unmarked.
#[tokio::test]
async fn a1_k3_x3_a_typed_answer_says_when_it_was_replayed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = zmesh::runtime::idempotency::SqliteIdempotencyStore::open(tmp.path().join("i.db"))
        .expect("store");
    let ep = free_tcp();
    let plant = Plant {
        dispensed: AtomicU64::new(0),
    };
    let mut config = NodeConfig::new("srv");
    config.memberships = server_of("pump");
    config.server = Some(Endpoint::new(ep.clone()));
    let srv = Node::builder(config)
        .expose(plant.into_service())
        .idempotency_store(Arc::new(store))
        .start()
        .await
        .expect("server starts");
    let cli = client(&ep, "pump").await;
    let pump = PumpClient::new(&cli);
    bounded("ready", pump.ready()).await.expect("ready");

    let first = bounded(
        "first",
        pump.dispense(3).idempotency_key("order-9").answer(),
    )
    .await;
    assert!(!first.replayed(), "the first call ran");
    let receipt = first.into_result().expect("dispensed");
    assert_eq!(receipt, "3 l for cli (key order-9)");
    let retry = bounded(
        "retry",
        pump.dispense(3).idempotency_key("order-9").answer(),
    )
    .await;
    assert!(retry.replayed(), "the retry was answered from the record");
    assert_eq!(
        retry.result().ok(),
        Some(&receipt),
        "with the first call's result"
    );
    let other = bounded(
        "other",
        pump.dispense(3).idempotency_key("order-10").answer(),
    )
    .await;
    assert!(!other.replayed(), "a new key runs the method");
    assert_eq!(
        other.into_result().expect("dispensed"),
        "3 l for cli (key order-10)"
    );
    let query = bounded("query", pump.pressure().answer()).await;
    assert!(!query.replayed() && query.result().is_ok());
    cli.shutdown().await.expect("cli");
    srv.shutdown().await.expect("srv");
}

/// MISSION A1, K1: each typed call pins the semantics its method was declared with (the
/// undeclared pins nothing); a server whose method became more dangerous to repeat answers
/// `IncompatibleVersion` and does not run it.
#[tokio::test]
async fn a1_typed_client_pins_semantics() {
    let ep = free_tcp();
    let cli = client(&ep, "pump").await;
    let pump = PumpClient::new(&cli);
    assert_eq!(pump.pressure().options().semantics, Some(Semantics::Query));
    assert_eq!(
        pump.set_setpoint(1.0).options().semantics,
        Some(Semantics::IdempotentCommand)
    );
    assert_eq!(
        pump.dispense(1).options().semantics,
        Some(Semantics::NonRepeatableCommand)
    );
    assert_eq!(pump.add(1, 2).options().semantics, None);
    let ttl = Duration::from_millis(1500);
    assert_eq!(pump.pressure().ttl(ttl).options().ttl, Some(ttl));

    // A later server whose `pressure` moves the plant: no longer a query.
    let runs = Arc::new(AtomicU64::new(0));
    let r = runs.clone();
    let moved = Service::new("pump").method(
        Method::non_repeatable_command("pressure"),
        move |_req: Request| {
            r.fetch_add(1, Ordering::SeqCst);
            async move { encode(&9.0f64) }
        },
    );
    let srv = server(&ep, moved).await;
    bounded("ready", pump.ready()).await.expect("ready");
    let err = bounded("pressure", pump.pressure())
        .await
        .expect_err("a query pin must not run a non-repeatable command");
    assert!(
        matches!(
            err,
            CallError::Remote {
                code: RemoteCode::IncompatibleVersion,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!may_have_run(&err), "refused before it ran: {err:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler never ran");
    cli.shutdown().await.expect("cli stops");
    srv.shutdown().await.expect("srv stops");
}

/// MISSION A1, K1: the contract comes from the trait: `Pump::contract()` (through an
/// implementation or the client) equals what `describe()` reports once the service is
/// exposed (which adds whether the non-repeatable command is guarded), and says what the
/// trait declares.
#[tokio::test]
async fn a1_contract_from_the_trait_equals_describe() {
    let from_trait: ServiceContract = <Plant as Pump>::contract();
    assert_eq!(from_trait, PumpClient::contract());
    assert_eq!(from_trait.channel, "pump");
    assert_eq!(from_trait.version, "3");
    assert_eq!(from_trait.execution, Some(ExecutionKind::Serial));
    let method = |name: &str| from_trait.method(name).expect(name).clone();
    assert_eq!(method("pressure").semantics, Some(Semantics::Query));
    assert_eq!(
        method("set_setpoint").semantics,
        Some(Semantics::IdempotentCommand)
    );
    assert!(method("set_setpoint").conflate);
    assert!(!method("dispense").conflate);
    assert_eq!(
        method("dispense").semantics,
        Some(Semantics::NonRepeatableCommand)
    );
    assert_eq!(method("add").semantics, None);
    assert_eq!(from_trait.methods.len(), 4);

    let ep = free_tcp();
    let plant = Plant {
        dispensed: AtomicU64::new(0),
    };
    let srv = server(&ep, plant.into_service()).await;
    let described = srv.describe();
    // Beyond the declaration, describe says what only the running node knows: this one has
    // no idempotency store, so its non-repeatable command is unguarded.
    let mut as_declared = described.services.clone();
    for m in as_declared.iter_mut().flat_map(|s| s.methods.iter_mut()) {
        let expected = (m.name == "dispense").then_some(false);
        assert_eq!(m.guarded, expected, "{}", m.name);
        m.guarded = None;
    }
    assert_eq!(as_declared, vec![from_trait.clone()]);
    // A caller's CI: the release's JSON against the trait now.
    let released = described.to_json_pretty().expect("json");
    let report = zmesh::typed::check_against_release(&from_trait, &released).expect("check");
    assert!(report.changes.is_empty(), "{report:?}");
    srv.shutdown().await.expect("srv stops");
}

/// A drive whose command runs until its caller stops waiting.
#[zmesh::service(channel = "drive")]
pub trait Drive {
    /// Runs until the caller is gone, then says so.
    #[non_repeatable]
    async fn run(&self, ctx: Context) -> bool;
}

struct Motor {
    started: tokio::sync::mpsc::UnboundedSender<bool>,
    stopped: tokio::sync::mpsc::UnboundedSender<bool>,
}

impl Drive for Motor {
    async fn run(&self, ctx: Context) -> bool {
        let _ = self.started.send(ctx.is_cancelled());
        ctx.cancelled().await;
        let _ = self.stopped.send(ctx.is_cancelled());
        true
    }
}

/// MISSION A1, X1: the request context tells a typed command that its caller is gone.
#[tokio::test]
async fn a1_x1_the_context_says_when_the_caller_is_gone() {
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let (stopped, mut stopped_rx) = tokio::sync::mpsc::unbounded_channel();
    let ep = free_tcp();
    let srv = server(&ep, Motor { started, stopped }.into_service()).await;
    let cli = client(&ep, "drive").await;
    let drive = DriveClient::new(&cli);
    bounded("ready", drive.ready()).await.expect("ready");
    let call = tokio::spawn(drive.run().into_future());
    let cancelled = bounded("started", started_rx.recv()).await.expect("ran");
    assert!(!cancelled, "signalled while the caller waited");
    cli.shutdown().await.expect("cli stops");
    let cancelled = bounded("told", stopped_rx.recv()).await.expect("returned");
    assert!(cancelled);
    let err = bounded("the call", call)
        .await
        .expect("task")
        .expect_err("never answered");
    assert!(may_have_run(&err), "{err:?}");
    srv.shutdown().await.expect("srv stops");
}

/// A clock that tells how long its caller still waits.
#[zmesh::service(channel = "clock")]
pub trait Clock {
    /// The ttl left as the method sees it when it runs (`None`: no deadline).
    #[query]
    async fn left(&self, ctx: Context) -> Option<Duration>;
}

struct Watch;

impl Clock for Watch {
    async fn left(&self, ctx: Context) -> Option<Duration> {
        ctx.ttl_left()
    }
}

/// MISSION A1, C6: the request context says how long the caller still waits: the ttl the
/// REQUEST carried (the caller's less the refusal margin) measured from its arrival, so never
/// more than that and close to it for a method that runs at once; `None` without a ttl.
#[tokio::test]
async fn a1_c6_the_context_says_how_long_the_caller_still_waits() {
    let ep = free_tcp();
    let srv = server(&ep, Watch.into_service()).await;
    let cli = client(&ep, "clock").await;
    let clock = ClockClient::new(&cli);
    bounded("ready", clock.ready()).await.expect("ready");
    for ttl in [Duration::from_secs(5), Duration::from_secs(60)] {
        let on_wire = zmesh::proto::calls::ttl_on_wire(Some(ttl)).expect("a deadline");
        let told = Duration::from_millis(on_wire.get());
        assert!(
            told < ttl,
            "the wire ttl keeps a margin: {told:?} of {ttl:?}"
        );
        let left = bounded("left", clock.left().ttl(ttl))
            .await
            .expect("left")
            .expect("a caller with a ttl has a deadline");
        assert!(left <= told, "{left:?} left of {told:?} on the wire");
        assert!(
            left > told.saturating_sub(Duration::from_secs(2)),
            "{left:?} left of {told:?} on the wire, for a method that ran at once"
        );
    }
    let left = bounded("no ttl", clock.left()).await.expect("left");
    assert_eq!(left, None, "no ttl, no deadline");
    cli.shutdown().await.expect("cli stops");
    srv.shutdown().await.expect("srv stops");
}

/// A gauge whose readings stream.
#[zmesh::service(channel = "gauge")]
pub trait Gauge {
    /// Streams `n` readings, then says how many it sent.
    #[query]
    async fn readings(&self, items: Items<f64>, n: u32) -> Result<u32, ServeError>;
}

struct Dial;

impl Gauge for Dial {
    async fn readings(&self, items: Items<f64>, n: u32) -> Result<u32, ServeError> {
        for i in 1..=n {
            items.send(&(f64::from(i) / 2.0)).await?;
        }
        Ok(n)
    }
}

/// MISSION A1: a method that takes `Items<T>` streams: the contract says so, the typed
/// client reads its items in order, typed, then its result.
#[tokio::test]
async fn a1_streaming_method_sends_typed_items() {
    let contract = GaugeClient::contract();
    let readings = contract.method("readings").expect("readings");
    assert_eq!(readings.shape, Shape::Stream);
    assert_eq!(readings.semantics, Some(Semantics::Query));
    let ep = free_tcp();
    let srv = server(&ep, Dial.into_service()).await;
    assert_eq!(srv.describe().services, vec![contract]);
    let cli = client(&ep, "gauge").await;
    let gauge = GaugeClient::new(&cli);
    bounded("ready", gauge.ready()).await.expect("ready");
    let mut stream = gauge.readings(3).await;
    let mut items = Vec::new();
    while let Some(item) = bounded("item", stream.next()).await {
        items.push(item.expect("decodes"));
    }
    assert_eq!(items, vec![0.5, 1.0, 1.5]);
    assert_eq!(bounded("result", stream.finish()).await.expect("result"), 3);
    cli.shutdown().await.expect("cli stops");
    srv.shutdown().await.expect("srv stops");
}

/// A valve bank: calls for one valve run one at a time, valves in parallel (MISSION K4).
#[zmesh::service(channel = "valves", execution = keyed(valve))]
pub trait Valves {
    /// Opens `valve` for the call's duration, meeting the other valve's call at `meet`.
    #[idempotent]
    async fn cycle(&self, valve: u32, meet: bool) -> u32;
}

struct Bank {
    open: Mutex<HashMap<u32, u32>>,
    most_open: AtomicU64,
    meet: Barrier,
}

impl Valves for Bank {
    async fn cycle(&self, valve: u32, meet: bool) -> u32 {
        let now = {
            let mut open = self.open.lock().expect("lock");
            let n = open.entry(valve).or_insert(0);
            *n += 1;
            *n
        };
        self.most_open.fetch_max(u64::from(now), Ordering::SeqCst);
        if meet {
            // Both valves' calls must be running at once to get past this.
            self.meet.wait().await;
        } else {
            tokio::task::yield_now().await;
        }
        if let Some(n) = self.open.lock().expect("lock").get_mut(&valve) {
            *n -= 1;
        }
        valve
    }
}

/// MISSION A1, K4: `execution = keyed(valve)` queues calls by their `valve` argument: two
/// valves run at once (each call waits for the other's), calls of one valve never overlap.
#[tokio::test]
async fn a1_k4_keyed_execution_queues_by_the_named_argument() {
    assert_eq!(
        ValvesClient::contract().execution,
        Some(ExecutionKind::Keyed)
    );
    let ep = free_tcp();
    let bank = Arc::new(Bank {
        open: Mutex::new(HashMap::new()),
        most_open: AtomicU64::new(0),
        meet: Barrier::new(2),
    });
    // Exposed through the generated `impl Valves for Arc<Bank>`, one clone kept here.
    let srv = server(&ep, bank.clone().into_service()).await;
    let cli = client(&ep, "valves").await;
    let valves = ValvesClient::new(&cli);
    bounded("ready", valves.ready()).await.expect("ready");
    let (a, b) = bounded("two valves at once", async {
        tokio::join!(
            valves.cycle(1, true).into_future(),
            valves.cycle(2, true).into_future()
        )
    })
    .await;
    assert_eq!((a.expect("valve 1"), b.expect("valve 2")), (1, 2));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        calls.spawn(valves.cycle(7, false).into_future());
    }
    let same = bounded("one valve, eight calls", calls.join_all()).await;
    assert!(
        same.iter().all(|r| r.as_ref().is_ok_and(|v| *v == 7)),
        "{same:?}"
    );
    assert_eq!(
        bank.most_open.load(Ordering::SeqCst),
        1,
        "calls of one valve overlapped"
    );
    cli.shutdown().await.expect("cli stops");
    srv.shutdown().await.expect("srv stops");
}

/// MISSION A2: `ready` for a server of a channel is pending while no server is up, and
/// resolves once one is, after which a call is routed at once; the node's event stream is
/// left to the application.
#[tokio::test]
async fn a2_ready_resolves_for_a_server() {
    let ep = free_tcp();
    let cli = client(&ep, "pump").await;
    let mut wait = Box::pin(cli.ready(Target::server("pump")));
    assert!(
        tokio::time::timeout(WINDOW, &mut wait).await.is_err(),
        "no server is up: not ready"
    );
    let plant = Plant {
        dispensed: AtomicU64::new(0),
    };
    let srv = server(&ep, plant.into_service()).await;
    bounded("ready", wait).await.expect("ready");
    let bar = PumpClient::new(&cli)
        .pressure()
        .await
        .expect("routed once ready");
    assert_eq!(bar, 1.25);
    assert!(cli.take_events().is_some(), "the events were not taken");
    // Another channel has no server: still pending.
    let billing = cli.ready(Target::server("billing"));
    assert!(tokio::time::timeout(WINDOW, billing).await.is_err());
    cli.shutdown().await.expect("cli stops");
    srv.shutdown().await.expect("srv stops");
}

/// MISSION A2: `ready` for a RouteMesh peer resolves once both its lanes are ready, on the
/// dialling side and on the accepting side; a RouteMesh server of a channel counts as a
/// server of it.
#[tokio::test]
async fn a2_ready_resolves_for_a_peer() {
    let bind = mesh_bind(true);
    let plant = Plant {
        dispensed: AtomicU64::new(0),
    };
    let b = Node::builder(mesh_server("b", "pump", &bind))
        .expose(plant.into_service())
        .start()
        .await
        .expect("b starts");
    let mut config = NodeConfig::new("a");
    config.peers = vec![peer("b", &bind)];
    let a = Node::start(config).await.expect("a starts");
    bounded("a: peer b", a.ready(Target::peer("b")))
        .await
        .expect("b ready");
    bounded("b: peer a", b.ready(Target::peer("a")))
        .await
        .expect("a ready");
    bounded("a: server of pump", a.ready(Target::server("pump")))
        .await
        .expect("pump ready");
    let pump = PumpClient::new(&a).to_peer("b");
    bounded("client ready", pump.ready()).await.expect("ready");
    assert_eq!(pump.add(2, 3).await.expect("add"), 5);
    a.shutdown().await.expect("a stops");
    b.shutdown().await.expect("b stops");
}

/// MISSION A2: a link's typed identity tells a RouteMesh peer's two lanes and a ClientServer
/// link apart, on the dialling side and on the accepting sides, and a state change names the
/// link its snapshot row names.
#[tokio::test]
async fn a2_links_are_told_apart_by_their_typed_identity() {
    let bind = mesh_bind(true);
    let b = Node::start(mesh_server("b", "pump", &bind))
        .await
        .expect("b starts");
    let ep = free_tcp();
    let srv = server(&ep, Watch.into_service()).await;
    let mut config = NodeConfig::new("a");
    config.peers = vec![peer("b", &bind)];
    config.servers = vec![ServerConfig::new("clock", ep.as_str())];
    let a = Node::start(config).await.expect("a starts");
    let mut events = a.take_events().expect("events");
    let lane = |lane, rid: &str, dialled| LinkId::Peer {
        rid: rid.into(),
        lane,
        dialled,
    };
    let want: HashSet<LinkId> = [
        lane(MeshLane::Application, "b", true),
        lane(MeshLane::Completion, "b", true),
        LinkId::Server {
            channel: "clock".into(),
            endpoint: ep.clone(),
        },
    ]
    .into();
    assert_eq!(want.len(), 3, "three links, three identities");
    let mut ready = HashSet::new();
    bounded("three links ready", async {
        while ready.len() < want.len() {
            let event = events.next_event().await.expect("a runs");
            if let NodeEvent::State(s) = event {
                assert!(want.contains(&s.id), "{:?} ({})", s.id, s.link);
                assert_eq!(s.link, s.id.to_string());
                if s.state == ConnState::Ready {
                    ready.insert(s.id);
                }
            }
        }
    })
    .await;
    let rows = |snap: &zmesh::runtime::snapshot::Snapshot| -> HashSet<LinkId> {
        snap.links.iter().map(|l| l.id.clone()).collect()
    };
    assert_eq!(rows(&a.snapshot().await.expect("a's snapshot")), want);
    let topologies: HashSet<&str> = want.iter().map(LinkId::topology).collect();
    assert_eq!(topologies, ["route_mesh", "client_server"].into());

    bounded("b: peer a", b.ready(Target::peer("a")))
        .await
        .expect("a ready");
    let accepted: HashSet<LinkId> = [
        lane(MeshLane::Application, "a", false),
        lane(MeshLane::Completion, "a", false),
    ]
    .into();
    assert_eq!(rows(&b.snapshot().await.expect("b's snapshot")), accepted);
    let client = LinkId::Client { rid: "a".into() };
    assert!(
        rows(&srv.snapshot().await.expect("srv's snapshot")).contains(&client),
        "srv names its client"
    );
    a.shutdown().await.expect("a stops");
    b.shutdown().await.expect("b stops");
    srv.shutdown().await.expect("srv stops");
}

/// MISSION A2: `ready` for a subscription resolves once the publisher's first record or
/// beacon arrived on it.
#[tokio::test]
async fn a2_ready_resolves_for_a_subscription() {
    let ep = free_tcp();
    let mut pub_config = NodeConfig::new("pub");
    pub_config.publisher = Some(Endpoint::new(ep.clone()));
    let publisher = Node::start(pub_config).await.expect("publisher starts");
    let mut sub_config = NodeConfig::new("sub");
    sub_config.subscriptions = vec![Endpoint::new(ep.clone())];
    let sub = Node::start(sub_config).await.expect("subscriber starts");
    bounded("subscription", sub.ready(Target::subscription(ep.as_str())))
        .await
        .expect("ready");
    let snap = sub.snapshot().await.expect("snapshot");
    assert!(snap
        .links
        .iter()
        .any(|l| l.topology == "fanout" && l.state == zmesh::proto::state::ConnState::Ready));
    sub.shutdown().await.expect("sub stops");
    publisher.shutdown().await.expect("publisher stops");
}

/// MISSION A2: a wait whose node stops ends with `Stopped`, not never.
#[tokio::test]
async fn a2_ready_fails_when_the_node_stops() {
    let ep = free_tcp();
    let cli = client(&ep, "pump").await;
    let waiter = {
        let cli = cli.clone();
        tokio::spawn(async move { cli.ready(Target::server("pump")).await })
    };
    cli.shutdown().await.expect("cli stops");
    let ended = bounded("the wait ends", waiter).await.expect("task");
    assert_eq!(ended, Err(ReadyError::Stopped(Target::server("pump"))));
}

/// MISSION A1 (an error per operation family): a node that cannot bind says so with an
/// opaque transport error whose errno tells why (here: the address is in use), and a node
/// that stopped answers `NodeStopped` to `snapshot` (which converts into
/// `NodeError::Stopped` for `?`) while `shutdown` stays done.
#[tokio::test]
async fn a1_start_snapshot_and_shutdown_errors_say_what_happened() {
    let ep = free_tcp();
    let first = server(&ep, Watch.into_service()).await;
    let second = Node::start(NodeConfig::new("second").server(ep.as_str())).await;
    match second {
        Err(NodeError::Bind { endpoint, source }) => {
            assert_eq!(endpoint, ep);
            let errno = std::io::Error::from_raw_os_error(source.errno());
            assert_eq!(errno.kind(), std::io::ErrorKind::AddrInUse, "{source}");
        }
        other => panic!("expected a bind error, got {:?}", other.map(|_| "a node")),
    }
    first.shutdown().await.expect("first stops");
    let stopped = first
        .snapshot()
        .await
        .expect_err("a stopped node has no snapshot");
    assert!(matches!(stopped, NodeStopped { .. }), "{stopped:?}");
    assert!(matches!(NodeError::from(stopped), NodeError::Stopped));
    first
        .shutdown()
        .await
        .expect("stopping again is done at once");
}
