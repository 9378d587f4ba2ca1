//! zmesh: a node transport runtime over ZeroMQ sockets.
//!
//! zmesh gives a service three topologies over libzmq 4.3 (through the `zmq` crate):
//! RouteMesh (ROUTER-ROUTER, an Application and a Completion lane per peer pair),
//! ClientServer (DEALER-ROUTER, one lane) and Classic fanout (PUB/SUB, one SUB socket per
//! publisher). Liveness is exact and fixed: a probe every 5 s, a 15 s peer deadline, exact-byte
//! beacons on fanout. Peers are authenticated by CurveZMQ keys with an allow-list, or, in
//! `none` mode, not at all ([`config::SecurityConfig`]).
//!
//! # Layout
//!
//! ```text
//!   application (async, tokio)
//!        |  commands / deliveries (crossbeam-channel)
//!   runtime: one I/O thread per node, one receive loop (epoll over every ZMQ_FD)
//!        |  bytes in, bytes out, `now`, socket events
//!   proto: sans-IO core (no clock reads, no sockets, no tasks)
//!        wire      byte-exact codec of WIRE.md
//!        liveness  probe tracker, publisher watch, beacon schedule
//!        state     connection states and failure reasons
//!        sched     fair receive scheduler (64 records / bytes / time caps)
//!        calls     reply correlation, leases, deadlines, graceful stop
//!        discovery descriptors, the intents a descriptor set implies, the owner lease
//!        security  CURVE public keys (Z85), the ZAP codec, refusal reasons
//!        node      the node core's parts (callee, admission) the I/O thread and the
//!                  simulator both drive
//!   runtime::store: descriptor stores (embedded SQLite, etcd v3) for automatic mode
//!   runtime::transport: the socket operations of the I/O thread as traits; libzmq
//!                       implements them (runtime::socket), and so does zmesh-sim's
//!                       simulated network
//!   typed + #[service]: a service as a Rust trait, its typed client and contract, on top of
//!                    runtime::service and Node::call_raw
//! ```
//!
//! Everything under [`proto`] is deterministic: it takes `now: Instant` as an input and reports
//! the next instant it wants to be woken at, so the 5 s / 15 s rules are tested with a manual
//! clock in milliseconds of real time.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod display_time;
mod durable_time;
pub mod proto;
pub mod runtime;
pub mod typed;

pub use proto::handshake::{Membership, Role};
pub use proto::state::ConnState;

/// What most programs need, in one import: `use zmesh::prelude::*;`. The node and its
/// configuration, the service macro and its request context, readiness, events and link
/// identities, and the error of every operation of a [`Node`](runtime::Node): starting
/// ([`NodeError`](runtime::NodeError)), serving ([`ExposeError`](runtime::ExposeError)),
/// calling ([`CallError`](runtime::calls::CallError)), sending
/// ([`SendError`](runtime::SendError), [`BatchSendError`](runtime::BatchSendError)),
/// publishing ([`PublishError`](runtime::PublishError)), waiting
/// ([`ReadyError`](runtime::ReadyError)), reading the allow-list again
/// ([`AllowListError`](runtime::AllowListError)), and asking a stopped node
/// ([`NodeStopped`](runtime::NodeStopped)); [`TransportError`](runtime::TransportError) is
/// libzmq's error inside them.
///
/// ```no_run
/// use zmesh::prelude::*;
///
/// async fn report(node: &Node) -> Result<(), NodeStopped> {
///     let snapshot = node.snapshot().await?;
///     println!("{} links", snapshot.links.len());
///     node.shutdown().await
/// }
/// # let _ = report;
/// ```
pub mod prelude {
    pub use crate::config::{Endpoint, NodeConfig, PeerConfig, ServerConfig};
    pub use crate::proto::handshake::{Membership, Role};
    pub use crate::proto::state::{ConnState, FailureReason};
    pub use crate::runtime::calls::{
        may_have_run, CallError, CallOptions, RemoteCode, Request, Semantics, ServeError,
    };
    pub use crate::runtime::{
        AllowListError, BatchSendError, Delivery, ExposeError, LinkId, MeshLane, Node, NodeBuilder,
        NodeError, NodeEvent, NodeStopped, PublishError, ReadyError, SendError, Source,
        StateChange, Target, TransportError,
    };
    pub use crate::service;
    pub use crate::typed::{Context, Items};
}

/// Turns a trait into a typed zmesh service (MISSION A1): the semantics of each method are
/// attributes, the client is generated, the contract comes from the trait.
///
/// ```no_run
/// use zmesh::runtime::calls::ServeError;
/// use zmesh::typed::Context;
///
/// #[zmesh::service(channel = "pump", version = 1, execution = serial)]
/// pub trait Pump {
///     /// The pressure, in bar.
///     #[query]
///     async fn pressure(&self) -> f64;
///     /// The newest setpoint wins: a waiting call is replaced (`Superseded`).
///     #[idempotent(conflate)]
///     async fn set_setpoint(&self, bar: f64) -> f64;
///     /// Runs again if repeated: retry a lost call with the same idempotency key.
///     #[non_repeatable]
///     async fn dispense(&self, ctx: Context, litres: u32) -> Result<String, ServeError>;
/// }
///
/// struct Plant;
///
/// impl Pump for Plant {
///     async fn pressure(&self) -> f64 {
///         1.2
///     }
///     async fn set_setpoint(&self, bar: f64) -> f64 {
///         bar
///     }
///     async fn dispense(&self, ctx: Context, litres: u32) -> Result<String, ServeError> {
///         Ok(format!("{litres} l for {}", ctx.caller()))
///     }
/// }
///
/// # async fn demo(server: zmesh::runtime::Node, caller: zmesh::runtime::Node)
/// #     -> Result<(), Box<dyn std::error::Error>> {
/// server.expose(Plant.into_service())?; // or NodeBuilder::expose, before the node starts
/// let pump = PumpClient::new(&caller);
/// pump.ready().await?;
/// let bar: f64 = pump.pressure().await?;
/// pump.set_setpoint(bar + 0.5).await?;
/// let receipt = pump.dispense(5).idempotency_key("order-1182").await?;
/// # let _ = receipt;
/// # Ok(())
/// # }
/// ```
///
/// # On the trait
///
/// | key | meaning |
/// |---|---|
/// | `channel = "pump"` | required: the channel the service is exposed and called on (1..=255 bytes) |
/// | `version = 1` or `version = "1.2"` | the service's contract version, free text (default `"1"`) |
/// | `execution = serial`, `parallel` or `keyed(arg)` | how calls run ([`runtime::service::Execution`]); `keyed(arg)` queues each call by its argument `arg`, which every method must have. Absent: graded by each method's semantics |
/// | `mailbox = 100` | calls one queue holds before refusing `Busy` (default 100, at least 1) |
///
/// # On each method
///
/// `#[query]`, `#[idempotent]`, `#[idempotent(conflate)]` or `#[non_repeatable]`; none:
/// undeclared (never guessed safe to repeat). A method is an `async fn` taking `&self`, then
/// its arguments by value (owned types that are `serde` `Serialize` and `Deserialize`), and
/// returns a value or a `Result<T, E>` whose `E: Into<ServeError>` becomes the call's error
/// (code and message). One argument of type [`typed::Context`] anywhere after `&self` is the
/// request context (caller, call id, idempotency key, cancellation), not a call argument; so
/// is one of type [`typed::Items`] (see Streams).
///
/// # What it generates
///
/// - The trait, each `async fn` declared as `fn .. -> impl Future<Output = ..> + Send` (an
///   implementation writes `async fn`), with `Send + Sync + 'static` supertraits and two
///   provided items: `into_service(self) -> Service`, which `Node::expose` takes, and
///   `contract() -> ServiceContract`.
/// - `impl Pump for Arc<T>` for every `T: Pump`, calling through, so an implementation the
///   program shares (`let plant = Arc::new(Plant::new())`) is exposed with
///   `plant.clone().into_service()`.
/// - `PumpClient` (the trait's name + `Client`): `new(&node)`, `to_peer(rid)`, `ready()`,
///   `contract()` (the contract without an implementation: `PumpClient::contract()`), the
///   channel as `PumpClient::CHANNEL`, and one method per service method taking its arguments
///   and returning a [`typed::Call`] pinned to the method's semantics.
///
/// The contract both give is the one [`runtime::Node::describe`] reports once the service is
/// exposed; [`typed::check_against_release`] compares it with a released one.
///
/// # Refused at compile time
///
/// With a message at the offending tokens (one trybuild test each, zmesh-macros/tests/ui):
/// `conflate` on anything but `#[idempotent]` (on `#[query]`, `#[non_repeatable]`, or alone as
/// `#[conflate]` on an undeclared method), or in a `parallel` service; `keyed(arg)` where a
/// method has no argument `arg`, or `keyed` naming no argument; a method that is not `async`,
/// is generic, `const`, `unsafe` or `extern`, has a body, takes no `&self` or takes
/// `&mut self`; a streaming method that conflates, or one with two `Items` arguments; two
/// `Context` arguments; an argument that is a pattern, not a plain name; reference,
/// `impl Trait`, trait-object or pointer argument and result types; two semantics attributes
/// on one method, or one given arguments or a value; a generic or `unsafe` trait, or one
/// holding anything but methods; method names the generated items take (`into_service`,
/// `contract`, `new`, `ready`, `to_peer`, `node`) or argument names starting `__`; unknown
/// keys or executions; a missing, empty or over-long channel; a mailbox of 0. The builder API
/// ([`runtime::service`]) refuses the same combinations when a service is exposed.
///
/// # Streams
///
/// A method that takes an argument of type [`typed::Items<T>`] (one at most, anywhere after
/// `&self`) answers with a stream: it sends items through it, in order, and its return value
/// is the call's result. Its client method returns a [`typed::StreamCall`], whose await gives
/// the [`typed::ItemStream`] of typed items and result; the contract lists it as a stream. A
/// streaming method may not conflate.
pub use zmesh_macros::service;

/// Compiles the README's example as a doctest, so the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
