//! Exposing a service (MISSION K1, K3, K4): a channel with its methods, each declaring what
//! repeating it does to the world, and how calls to it are executed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), zmesh::runtime::NodeError> {
//! use zmesh::config::NodeConfig;
//! use zmesh::runtime::calls::{encode, Request, ServeError};
//! use zmesh::runtime::service::{Method, Service};
//! use zmesh::runtime::Node;
//!
//! let pump = Service::new("pump")
//!     .version("2")
//!     .method(Method::query("pressure"), |_req: Request| async move { encode(&1.2f64) })
//!     .method(
//!         Method::idempotent_command("set_setpoint").conflate(),
//!         |req: Request| async move {
//!             let bar: f64 = req.args()?;
//!             encode(&bar)
//!         },
//!     )
//!     .method(Method::non_repeatable_command("dispense"), |_req: Request| async move {
//!         encode("dispensed")
//!     });
//! let node = Node::builder(NodeConfig::new("plant")).expose(pump).start().await?;
//! # node.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Semantics: what a method does to the world (MISSION K1)
//!
//! | semantics | repeating it | example |
//! |---|---|---|
//! | [`Semantics::Query`] | costs a round trip | a reading, a status, a list |
//! | [`Semantics::IdempotentCommand`] | leaves the same state as doing it once | `set_setpoint(1200)`, `close()` |
//! | [`Semantics::NonRepeatableCommand`] | does it again | `dispense()`, `advance_batch()` |
//! | undeclared ([`Method::undeclared`]) | nobody said: never guessed to be safe | |
//!
//! The semantics are part of the contract ([`crate::runtime::Node::describe`]): a caller may
//! pin the semantics it was built against ([`crate::runtime::calls::CallOptions::semantics`]),
//! and a node whose method became more dangerous to repeat answers `IncompatibleVersion`
//! (did not run) instead of running it.
//!
//! # Execution (K4)
//!
//! | [`Execution`] | calls of this service run |
//! |---|---|
//! | not declared (default) | commands (idempotent or non-repeatable) one at a time per service; queries and undeclared methods as they arrive |
//! | [`Execution::Serial`] | one at a time per service, every method |
//! | [`Execution::Keyed`] | one at a time per key (e.g. a device id), keys in parallel |
//! | [`Execution::Parallel`] | as they arrive |
//!
//! A call that must wait waits in its queue's mailbox, at most [`Service::mailbox`] calls
//! (default 100); an arrival past that is refused `Busy` at once (did not run). The ttl is
//! read after the queue wait: a call that waited until its caller gave up is refused
//! `Timeout`, not run late (MISSION C6). A method declared [`Method::conflate`] (idempotent
//! commands only) replaces a waiting call of the same method, whose caller is answered
//! `Superseded` at once (did not run). Invalid combinations are refused when the service is
//! exposed ([`crate::proto::contract::ContractError`]).
//!
//! # Idempotency (K3)
//!
//! A node given an idempotency store ([`crate::runtime::NodeBuilder::idempotency_store`])
//! consults it for non-repeatable commands only (queries pay nothing): a repeat of a command
//! that completed is answered from the record without running; a repeat while the first is
//! still running here gets the first one's answer; a record found in progress with nobody
//! running it (the server died mid-command) answers `UnknownOutcome` and never runs again;
//! the same key with other arguments answers `InvalidParams`; a store that fails answers
//! `UnknownOutcome` without running. See [`crate::runtime::idempotency`].

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::calls::{Handler, HandlerFuture, ItemSink, Request, ServeError};
use super::security::{AuthRequest, Authorizer, Denied};
use crate::proto::calls::CallShape;
use crate::proto::contract::{self, MethodContract, ServiceContract, Shape};
pub use crate::proto::contract::{ContractError, ExecutionKind, NodeContract, Semantics};
use crate::proto::node::callee::MethodPlan;

/// How long an inline handler ([`Service::inline_method`]) may hold the I/O thread before
/// its run is counted as an overrun. A fixed figure, not an option: every other connection's
/// records wait while an inline handler runs, and 1 ms is about the cost of a full receive
/// rotation (64 records per unit) on this design's reference machine (BENCHMARKS.md).
pub const INLINE_BUDGET: std::time::Duration = std::time::Duration::from_millis(1);

/// Names the queue of a call under [`Execution::Keyed`]: calls with the same key run one at a
/// time, in arrival order; calls with different keys run in parallel. Called on the node's
/// I/O thread for every call of the service, so it must be cheap and must not block (decode
/// the argument that names the device, say). An error refuses the call with its code (did not
/// run); a panic refuses it `InvalidParams`.
pub type KeyFn = Arc<dyn Fn(&Request) -> Result<String, ServeError> + Send + Sync>;

/// A handler run on the node's I/O thread (see [`Service::inline_method`]): a plain function,
/// no await, that answers within microseconds.
pub type InlineHandler = Arc<dyn Fn(Request) -> Result<Bytes, ServeError> + Send + Sync>;

/// A stream handler: items through the [`ItemSink`], then the terminal result.
pub type StreamHandler = Arc<dyn Fn(Request, ItemSink) -> HandlerFuture + Send + Sync + 'static>;

/// How the calls of a service are executed (MISSION K4). Not declaring one grades it by the
/// methods' semantics (see the module docs).
#[derive(Clone)]
pub enum Execution {
    /// Every call runs as it arrives.
    Parallel,
    /// One call at a time for the whole service, in arrival order.
    Serial,
    /// One call at a time per key, keys in parallel.
    Keyed(KeyFn),
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind().as_str())
    }
}

impl Execution {
    /// A keyed execution with `key` naming each call's queue.
    pub fn keyed<F>(key: F) -> Execution
    where
        F: Fn(&Request) -> Result<String, ServeError> + Send + Sync + 'static,
    {
        Execution::Keyed(Arc::new(key))
    }

    /// The contract's name for it.
    pub fn kind(&self) -> ExecutionKind {
        match self {
            Execution::Parallel => ExecutionKind::Parallel,
            Execution::Serial => ExecutionKind::Serial,
            Execution::Keyed(_) => ExecutionKind::Keyed,
        }
    }
}

/// One method of a [`Service`]: its name, its semantics (or none) and whether it conflates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    name: String,
    semantics: Option<Semantics>,
    conflate: bool,
    abort_on_cancel: Option<bool>,
}

impl Method {
    /// A method whose semantics are declared as `semantics` (`None`: undeclared).
    pub fn new(name: impl Into<String>, semantics: Option<Semantics>) -> Method {
        Method {
            name: name.into(),
            semantics,
            conflate: false,
            abort_on_cancel: None,
        }
    }

    /// A query: repeating it costs a round trip.
    pub fn query(name: impl Into<String>) -> Method {
        Method::new(name, Some(Semantics::Query))
    }

    /// An idempotent command: repeating it leaves the same state as doing it once.
    pub fn idempotent_command(name: impl Into<String>) -> Method {
        Method::new(name, Some(Semantics::IdempotentCommand))
    }

    /// A non-repeatable command: repeating it does it again.
    pub fn non_repeatable_command(name: impl Into<String>) -> Method {
        Method::new(name, Some(Semantics::NonRepeatableCommand))
    }

    /// A method that declares nothing: never guessed to be safe to repeat.
    pub fn undeclared(name: impl Into<String>) -> Method {
        Method::new(name, None)
    }

    /// A newer call of this method replaces one still waiting in its queue, whose caller is
    /// answered `Superseded` (did not run). Idempotent commands only (checked when the
    /// service is exposed): only the newest setpoint matters.
    pub fn conflate(mut self) -> Method {
        self.conflate = true;
        self
    }

    /// Whether the runtime stops this method's running handler at its next `.await` when
    /// its caller stops waiting (the caller cancelled, its connection left ready, or its
    /// ttl passed). The handler is signalled either way ([`crate::runtime::calls::Request::cancelled`]).
    /// Default: queries are stopped; commands and undeclared methods never are (they may be
    /// half way through changing the world). Set it where the service knows better: `false`
    /// for a query whose work should finish (warming a cache), `true` for a command or an
    /// undeclared method that is safe to cut at any `.await`.
    pub fn abort_on_cancel(mut self, abort: bool) -> Method {
        self.abort_on_cancel = Some(abort);
        self
    }

    /// The method's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The declared semantics (`None`: undeclared).
    pub fn semantics(&self) -> Option<Semantics> {
        self.semantics
    }
}

/// A method's handler.
#[derive(Clone)]
pub(crate) enum MethodHandler {
    Unary(Handler),
    Stream(StreamHandler),
    Inline(InlineHandler),
}

impl MethodHandler {
    fn shape(&self) -> Shape {
        match self {
            MethodHandler::Unary(_) | MethodHandler::Inline(_) => Shape::Unary,
            MethodHandler::Stream(_) => Shape::Stream,
        }
    }
}

/// A channel this node serves, with its methods (MISSION K1): build it, then expose it with
/// [`crate::runtime::Node::expose`] or [`crate::runtime::NodeBuilder::expose`].
pub struct Service {
    channel: String,
    version: String,
    execution: Option<Execution>,
    mailbox: usize,
    methods: Vec<(Method, MethodHandler)>,
    authorizer: Option<Authorizer>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("channel", &self.channel)
            .field("version", &self.version)
            .field("execution", &self.execution)
            .field("mailbox", &self.mailbox)
            .field(
                "methods",
                &self.methods.iter().map(|(m, _)| m).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Service {
    /// A service on `channel`: version "1", execution graded by semantics, mailbox 100, no
    /// methods yet.
    pub fn new(channel: impl Into<String>) -> Service {
        Service {
            channel: channel.into(),
            version: contract::DEFAULT_VERSION.to_owned(),
            execution: None,
            mailbox: contract::DEFAULT_MAILBOX,
            methods: Vec::new(),
            authorizer: None,
        }
    }

    /// Asks `authorizer` about every call of this channel before it is accepted
    /// (MISSION K6; see [`crate::runtime::security`]): `Err(Denied::Unauthorized(..))` or
    /// `Err(Denied::Forbidden(..))` answers the caller with that code, and the call does not
    /// run. Each call of a BATCH is asked about on its own. Without one, every caller that
    /// reaches the channel may call it.
    ///
    /// ```
    /// use zmesh::runtime::calls::{encode, Request};
    /// use zmesh::runtime::security::Denied;
    /// use zmesh::runtime::service::{Method, Service};
    ///
    /// let pump = Service::new("pump")
    ///     .method(Method::query("pressure"), |_r: Request| async move { encode(&1.2f64) })
    ///     .method(Method::non_repeatable_command("dispense"), |_r: Request| async move {
    ///         encode("dispensed")
    ///     })
    ///     .authorize(|call| {
    ///         if call.method == "pressure" {
    ///             Ok(()) // anyone may read
    ///         } else if !call.caller.verified {
    ///             Err(Denied::unauthorized("commands need an authenticated caller"))
    ///         } else if call.caller.rid != "operator" {
    ///             Err(Denied::forbidden("only the operator dispenses"))
    ///         } else {
    ///             Ok(())
    ///         }
    ///     });
    /// # let _ = pump;
    /// ```
    pub fn authorize<F>(mut self, authorizer: F) -> Service
    where
        F: Fn(&AuthRequest<'_>) -> Result<(), Denied> + Send + Sync + 'static,
    {
        self.authorizer = Some(Arc::new(authorizer));
        self
    }

    /// The service's own contract version (free text, reported by `describe`).
    pub fn version(mut self, version: impl Into<String>) -> Service {
        self.version = version.into();
        self
    }

    /// How its calls are executed (default: graded by each method's semantics).
    pub fn execution(mut self, execution: Execution) -> Service {
        self.execution = Some(execution);
        self
    }

    /// At most this many calls wait in one of its queues (default 100); more are refused
    /// `Busy`.
    pub fn mailbox(mut self, mailbox: usize) -> Service {
        self.mailbox = mailbox;
        self
    }

    /// Adds a method answered once by `handler`.
    pub fn method<F, Fut>(mut self, method: Method, handler: F) -> Service
    where
        F: Fn(Request) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Bytes, ServeError>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |req| -> HandlerFuture { Box::pin(handler(req)) });
        self.methods.push((method, MethodHandler::Unary(handler)));
        self
    }

    /// Adds a method answered once by `handler` run on the node's I/O thread, right after
    /// the call's ACCEPT, with no hand-off to a task and back (the ACCEPT and the
    /// REPLY leave together, a call round trip saves two thread hand-offs). For handlers
    /// that are plain functions finishing within microseconds (a lookup, a counter, a
    /// setpoint in memory): while one runs, the node reads no socket, answers no probe and
    /// sends nothing. A run longer than [`INLINE_BUDGET`] is counted
    /// (`zmesh_inline_overruns_total`) and logged once per channel. A panic answers
    /// `Exception`, as for any handler. Semantics, execution queues, the authorizer and
    /// ttl refusals apply as for [`Service::method`]; a non-repeatable command on a node
    /// with an idempotency store runs on a task instead (the store may block).
    pub fn inline_method<F>(mut self, method: Method, handler: F) -> Service
    where
        F: Fn(Request) -> Result<Bytes, ServeError> + Send + Sync + 'static,
    {
        self.methods
            .push((method, MethodHandler::Inline(Arc::new(handler))));
        self
    }

    /// Adds a method that streams items through an [`ItemSink`] before its terminal result
    /// (see [`crate::runtime::Node::serve_stream`] for what a stopping service does to it).
    pub fn stream_method<F, Fut>(mut self, method: Method, handler: F) -> Service
    where
        F: Fn(Request, ItemSink) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Bytes, ServeError>> + Send + 'static,
    {
        let handler: StreamHandler =
            Arc::new(move |req, sink| -> HandlerFuture { Box::pin(handler(req, sink)) });
        self.methods.push((method, MethodHandler::Stream(handler)));
        self
    }

    /// The channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// This service's contract, as `describe` reports it (methods sorted by name).
    pub fn contract(&self) -> ServiceContract {
        let declared = self.execution.as_ref().map(Execution::kind);
        let mut c = ServiceContract::new(self.channel.clone());
        c.version = self.version.clone();
        c.execution = declared;
        c.mailbox = self.mailbox;
        c.methods = self
            .methods
            .iter()
            .map(|(m, h)| MethodContract {
                name: m.name.clone(),
                semantics: m.semantics,
                shape: h.shape(),
                execution: contract::effective_execution(declared, m.semantics),
                conflate: m.conflate,
                guarded: None,
            })
            .collect();
        c.normalize();
        c
    }

    /// Checks the service (MISSION K4: invalid combinations are refused when a service is
    /// exposed) and splits it into what the I/O thread needs and the handlers.
    pub(crate) fn into_parts(self) -> Result<(ServedService, ServiceHandlers), ContractError> {
        let contract = self.contract();
        contract::validate(&contract)?;
        let key = match &self.execution {
            Some(Execution::Keyed(f)) => Some(f.clone()),
            _ => None,
        };
        let abort_choices = self
            .methods
            .iter()
            .filter_map(|(m, _)| Some((m.name.clone(), m.abort_on_cancel?)))
            .collect();
        let handlers = self.methods.into_iter().map(|(m, h)| (m.name, h)).collect();
        Ok((
            ServedService {
                contract: Arc::new(contract),
                key,
                any_method: None,
                authorizer: self.authorizer,
                abort_choices,
            },
            ServiceHandlers { handlers },
        ))
    }
}

/// What the I/O thread knows of a served channel: its contract (method lookup, semantics,
/// execution, conflation, mailbox) and, for keyed execution, the key function.
#[derive(Clone)]
pub(crate) struct ServedService {
    pub contract: Arc<ServiceContract>,
    pub key: Option<KeyFn>,
    /// A channel served with one handler for every method ([`crate::runtime::Node::serve`]):
    /// any method name is accepted, undeclared and parallel, with this shape.
    pub any_method: Option<CallShape>,
    /// Asked about every call before it is accepted ([`Service::authorize`]).
    pub authorizer: Option<Authorizer>,
    /// The methods that chose whether a cancel stops their handler
    /// ([`Method::abort_on_cancel`]).
    pub abort_choices: HashMap<String, bool>,
}

/// The built-in method every served channel answers: the node's contract (MessagePack of a
/// [`NodeContract`]).
pub const DESCRIBE_METHOD: &str = "$describe";

impl ServedService {
    /// The plan for `method`, or `None` when the channel does not expose it.
    pub(crate) fn plan(&self, method: &str) -> Option<MethodPlan> {
        if method == DESCRIBE_METHOD {
            return Some(MethodPlan {
                semantics: Some(Semantics::Query),
                shape: CallShape::Unary,
                execution: ExecutionKind::Parallel,
                conflate: false,
                stops_on_cancel: true,
            });
        }
        if let Some(m) = self.contract.method(method) {
            let choice = self.abort_choices.get(method).copied();
            return Some(MethodPlan {
                semantics: m.semantics,
                shape: m.shape.into(),
                execution: m.execution,
                conflate: m.conflate,
                stops_on_cancel: contract::stops_on_cancel(m.semantics, choice),
            });
        }
        self.any_method.map(|shape| MethodPlan {
            semantics: None,
            shape,
            execution: ExecutionKind::Parallel,
            conflate: false,
            stops_on_cancel: contract::stops_on_cancel(None, None),
        })
    }
}

/// The handlers of an exposed service, by method name.
pub(crate) struct ServiceHandlers {
    pub handlers: HashMap<String, MethodHandler>,
}
