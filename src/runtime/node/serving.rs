//! Serving: channels and services a node exposes (MISSION K1, K3, K4), the dispatcher that
//! runs each accepted call's handler (behind the idempotency guard for a non-repeatable
//! command), the node's contract and its operations registry (K2).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::{Inner, Node};
use crate::proto::calls::{CallShape, ServeId};
use crate::proto::contract::ServiceContract;
use crate::proto::wire::Name;
use crate::runtime::calls::{
    self as rcalls, CallError, CallOptions, Handler, HandlerFuture, ItemPort, ItemSink, RemoteCode,
    Request, ServeError,
};
use crate::runtime::command::{
    Command, Dispatcher, InlineDispatch, InlineRun, ServeDone, ServeItem, ServeJob, Served,
};
use crate::runtime::error::ExposeError;
use crate::runtime::idempotency::Guard;
use crate::runtime::operations::Operations;
use crate::runtime::service::{
    InlineHandler, MethodHandler, NodeContract, Semantics, ServedService, Service, StreamHandler,
    DESCRIBE_METHOD,
};
impl Node {
    /// Serves `channel`: every call accepted for it runs `handler` on the current tokio
    /// runtime, whatever its method (the handler answers `MethodNotFound` itself for names it
    /// does not know). The node ACCEPTs a call before the handler runs, refuses calls whose
    /// ttl ran out, and answers each call exactly once with the handler's result. A handler
    /// that panics answers `Exception`. Must be called from within a tokio runtime. Serving a
    /// channel again replaces its handler.
    ///
    /// Nothing is declared about such a channel's methods: they are undeclared (never guessed
    /// to be safe to repeat) and run in parallel, and `describe` lists no methods for it. To
    /// declare methods, their semantics and execution, use [`Node::expose`].
    pub fn serve<F, Fut>(&self, channel: &str, handler: F) -> Result<(), ExposeError>
    where
        F: Fn(Request) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Bytes, ServeError>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |req| -> HandlerFuture { Box::pin(handler(req)) });
        self.serve_any(channel, CallShape::Unary, MethodHandler::Unary(handler))
    }

    /// Serves `channel` with `handler` run on the node's I/O thread, right after each call's
    /// ACCEPT: no hand-off to a task and back, so a call round trip is shorter. For
    /// plain functions that finish within microseconds; while one runs the node reads no
    /// socket. See [`Service::inline_method`] for the rules; everything else is as for
    /// [`Node::serve`].
    pub fn serve_inline<F>(&self, channel: &str, handler: F) -> Result<(), ExposeError>
    where
        F: Fn(Request) -> Result<Bytes, ServeError> + Send + Sync + 'static,
    {
        let handler: InlineHandler = Arc::new(handler);
        self.serve_any(channel, CallShape::Unary, MethodHandler::Inline(handler))
    }

    /// Serves `channel` with streaming answers: every call accepted for it runs `handler`
    /// with the [`Request`] and an [`ItemSink`]; the handler sends items through the sink, in
    /// order, and returns the call's terminal result. Everything else is as for
    /// [`Node::serve`].
    ///
    /// A stream cannot be finished by a stopping service: when [`Node::shutdown`] begins,
    /// every call of this channel still in hand ends at once with REPLY `Unavailable`
    /// (the caller sees [`CallError::Unavailable`] `{ accepted: true }`, may have run), the
    /// sink refuses further items, and the handler's result is dropped (MISSION C4). The
    /// same happens to a call of this channel that sends no items at all: every call of a
    /// stream channel is a stream.
    pub fn serve_stream<F, Fut>(&self, channel: &str, handler: F) -> Result<(), ExposeError>
    where
        F: Fn(Request, ItemSink) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Bytes, ServeError>> + Send + 'static,
    {
        let handler: StreamHandler =
            Arc::new(move |req, sink| -> HandlerFuture { Box::pin(handler(req, sink)) });
        self.serve_any(channel, CallShape::Stream, MethodHandler::Stream(handler))
    }

    /// Exposes `service` (MISSION K1, K3, K4): its declared methods, each with its semantics,
    /// and its execution (serial, keyed or parallel, mailbox, conflation), checked now:
    /// invalid combinations (conflate on a method that is not an idempotent command, or with
    /// parallel execution; a mailbox of 0; duplicate or reserved method names) are refused
    /// with [`ExposeError::Contract`]. A call to a method the service does not declare is
    /// answered `MethodNotFound` (did not run). Must be called from within a tokio runtime;
    /// exposing a channel again replaces it. See [`crate::runtime::service`].
    pub fn expose(&self, service: Service) -> Result<(), ExposeError> {
        let channel = service.channel().to_owned();
        let (served, handlers) = service.into_parts().map_err(ExposeError::Contract)?;
        self.register(&channel, served, Lookup::Methods(handlers.handlers))
    }

    /// The operations registry of this node (MISSION K2): one frozen entry per call it
    /// made, with a snapshot and a change stream (see [`crate::runtime::operations`]).
    pub fn operations(&self) -> Operations {
        Operations::new(self.inner.ops.clone())
    }

    /// This node's contract (MISSION K1): every channel it serves, with its methods, their
    /// semantics, shape and execution, conflation, mailbox and version. Another node fetches
    /// it with [`Node::fetch_contract`]; `zmesh describe` prints it.
    ///
    /// Each non-repeatable command says whether it is guarded
    /// ([`MethodContract::guarded`](crate::proto::contract::MethodContract::guarded)): true when
    /// the node runs it behind a durable idempotency store ([`NodeBuilder::idempotency_store`](super::NodeBuilder::idempotency_store)
    /// with a store that [`is_durable`](crate::runtime::idempotency::IdempotencyStore::is_durable)),
    /// false when an idempotency key given with a call cannot keep a retry from running it
    /// again.
    pub fn describe(&self) -> NodeContract {
        let mut c = NodeContract::new(self.inner.rid.clone());
        if let Ok(services) = self.inner.contract.lock() {
            c.services = services.values().cloned().collect();
        }
        let guarded = self.inner.guard.as_ref().is_some_and(|g| g.is_durable());
        for m in c.services.iter_mut().flat_map(|s| s.methods.iter_mut()) {
            m.guarded = (m.semantics == Some(Semantics::NonRepeatableCommand)).then_some(guarded);
        }
        c.normalize();
        c
    }

    /// Fetches the contract of the node that serves `channel` (routed like any call: `opts`
    /// may name a RouteMesh peer), through the built-in method `$describe` every served
    /// channel answers. An answer that does not decode as a contract is
    /// [`CallError::UndecodableResult`].
    pub async fn fetch_contract(
        &self,
        channel: &str,
        opts: CallOptions,
    ) -> Result<NodeContract, CallError> {
        let bytes = self
            .call_raw(channel, DESCRIBE_METHOD, Bytes::new(), opts)
            .await?;
        rcalls::decode(&bytes)
    }

    /// Registers a channel served by one handler for every method.
    fn serve_any(
        &self,
        channel: &str,
        shape: CallShape,
        handler: MethodHandler,
    ) -> Result<(), ExposeError> {
        if !Name::fits(channel.len()) {
            return Err(ExposeError::Invalid("channel must be 1..=255 bytes".into()));
        }
        let served = ServedService {
            contract: Arc::new(ServiceContract::new(channel)),
            key: None,
            any_method: Some(shape),
            authorizer: None,
            abort_choices: Default::default(),
        };
        self.register(channel, served, Lookup::Any(handler))
    }

    /// Registers `channel` with the I/O thread and runs its dispatcher: each accepted call
    /// becomes a task running its method's handler (behind the idempotency guard for a
    /// non-repeatable command, if the node has a store), whose result goes back as
    /// [`Command::ServeDone`].
    fn register(
        &self,
        channel: &str,
        served: ServedService,
        lookup: Lookup,
    ) -> Result<(), ExposeError> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| ExposeError::NoRuntime)?;
        let weak = Arc::downgrade(&self.inner);
        let lookup = Arc::new(lookup);
        let guard = self.inner.guard.clone();
        let inline = inline_dispatch(&lookup, guard.is_some());
        // The I/O thread spawns each accepted call's task itself, on the runtime the channel
        // was registered from: no dispatcher task in between (one thread hand-off less per
        // call).
        let dispatch: Dispatcher = Arc::new(move |job: ServeJob| {
            let (weak, lookup, guard) = (weak.clone(), lookup.clone(), guard.clone());
            rt.spawn(async move {
                let done = DoneOnce {
                    id: job.id,
                    node: weak.clone(),
                    sent: false,
                };
                let (result, replayed) = run_job(job, &lookup, &weak, guard.as_deref()).await;
                done.send(result, replayed);
            })
            .abort_handle()
        });
        let contract = (*served.contract).clone();
        if !self.command(Command::Serve {
            channel: channel.to_owned(),
            served: Served {
                dispatch,
                inline,
                service: served,
            },
        }) {
            return Err(ExposeError::Stopped);
        }
        if let Ok(mut c) = self.inner.contract.lock() {
            c.insert(channel.to_owned(), contract);
        }
        Ok(())
    }
}

/// A stream handler's items reach the I/O thread as [`Command::ServeItem`]s; an [`ItemSink`]
/// holds the node only weakly, through this.
impl ItemPort for Inner {
    fn send_item(
        &self,
        id: ServeId,
        payload: Bytes,
    ) -> Option<oneshot::Receiver<Result<(), ServeError>>> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::ServeItem(ServeItem { id, payload, reply }))
            .then_some(rx)
    }
}

/// The one [`Command::ServeDone`] of a call's task: sent with the handler's result, or, when
/// the task is dropped before its handler returned (stopped because its caller is gone, or
/// its runtime shut down), with `Unavailable` (a result nobody receives: the serve table
/// forgot the call), so the I/O thread always hears that the handler is over and the call's
/// execution queue moves on.
struct DoneOnce {
    id: ServeId,
    node: Weak<Inner>,
    sent: bool,
}

impl DoneOnce {
    fn send(mut self, result: Result<Bytes, ServeError>, replayed: bool) {
        self.sent = true;
        if let Some(inner) = self.node.upgrade() {
            inner.command(Command::ServeDone(ServeDone {
                id: self.id,
                result,
                replayed,
            }));
        }
    }
}

impl Drop for DoneOnce {
    fn drop(&mut self) {
        if self.sent {
            return;
        }
        if let Some(inner) = self.node.upgrade() {
            inner.command(Command::ServeDone(ServeDone {
                id: self.id,
                result: Err(ServeError::runtime(
                    RemoteCode::Unavailable,
                    "the handler was stopped before it returned",
                )),
                replayed: false,
            }));
        }
    }
}

/// How a served channel finds the handler of a call.
enum Lookup {
    /// One handler for every method ([`Node::serve`], [`Node::serve_stream`]).
    Any(MethodHandler),
    /// One handler per declared method ([`Node::expose`]).
    Methods(HashMap<String, MethodHandler>),
}

/// Runs one accepted call: the built-in `$describe`, or its method's handler (a panic is
/// answered `Exception`), behind the idempotency guard for a non-repeatable command. Its
/// answer, and whether the guard replayed it from an earlier call of the same key.
async fn run_job(
    job: ServeJob,
    lookup: &Lookup,
    node: &Weak<Inner>,
    guard: Option<&Guard>,
) -> (Result<Bytes, ServeError>, bool) {
    let ServeJob {
        id,
        request,
        semantics,
        ..
    } = job;
    if request.method == DESCRIBE_METHOD {
        let contract = node.upgrade().map(|inner| Node { inner }.describe());
        let result = match contract {
            Some(c) => rcalls::encode(&c),
            None => Err(ServeError::runtime(
                RemoteCode::Unavailable,
                "the node stopped",
            )),
        };
        return (result, false);
    }
    let handler = match lookup {
        Lookup::Any(h) => Some(h.clone()),
        Lookup::Methods(m) => m.get(&request.method).cloned(),
    };
    let Some(handler) = handler else {
        return (Err(ServeError::method_not_found(&request.method)), false);
    };
    let port: Weak<dyn ItemPort> = node.clone();
    let sink = ItemSink::new(id, port);
    let guarded = (semantics == Some(Semantics::NonRepeatableCommand))
        .then_some(guard)
        .flatten();
    if guarded.is_none() {
        note_unguarded_key(&request, semantics);
    }
    // A panic anywhere in the handler (in the call that makes its future, or while the
    // future runs) answers `Exception`: it may have run.
    let run = |request: Request| {
        Caught::new(move || match handler {
            MethodHandler::Unary(h) => h(request),
            MethodHandler::Stream(h) => h(request, sink),
            // An inline handler that runs on a task (guarded by the idempotency store).
            MethodHandler::Inline(h) => {
                let result = h(request);
                Box::pin(async move { result })
            }
        })
    };
    match guarded {
        Some(g) => {
            let req = request.clone();
            let guarded = g.run(&req, move || run(request)).await;
            (guarded.answer, guarded.replayed)
        }
        None => (run(request).await, false),
    }
}

/// The (channel, method) pairs whose unguarded idempotency keys were logged in this process.
static UNGUARDED_KEYS_LOGGED: Mutex<BTreeSet<(String, String)>> = Mutex::new(BTreeSet::new());

/// A caller gave an idempotency key for a non-repeatable command this node runs without an
/// idempotency store: the key cannot keep a retry from running it again. Logged as a warning
/// once per channel and method (a caller that retries with its key would log it each time).
fn note_unguarded_key(request: &Request, semantics: Option<Semantics>) {
    if semantics != Some(Semantics::NonRepeatableCommand) || request.idempotency_key().is_none() {
        return;
    }
    let first = UNGUARDED_KEYS_LOGGED
        .lock()
        .map(|mut logged| logged.insert((request.channel.clone(), request.method.clone())))
        .unwrap_or(false);
    if first {
        tracing::warn!(
            channel = %request.channel,
            method = %request.method,
            caller = %request.caller,
            "a call of a non-repeatable command came with an idempotency key, but this node has \
             no idempotency store: the key is ignored, a retry with it runs the command again \
             (logged once per method)"
        );
    }
}

/// The I/O thread's way to run a call's inline handler ([`Service::inline_method`],
/// [`Node::serve_inline`]) in place: `None` when the channel has no inline handler at all.
/// The function hands the job back ([`InlineRun::OnTask`]) when it must run on a task after all: the built-in
/// `$describe`, a method whose handler is not inline or not known (the task answers
/// `MethodNotFound`), or a non-repeatable command on a node with an idempotency store (the
/// store may block). A panic answers `Exception`.
fn inline_dispatch(lookup: &Arc<Lookup>, guarded: bool) -> Option<InlineDispatch> {
    let any_inline = match &**lookup {
        Lookup::Any(h) => matches!(h, MethodHandler::Inline(_)),
        Lookup::Methods(m) => m.values().any(|h| matches!(h, MethodHandler::Inline(_))),
    };
    if !any_inline {
        return None;
    }
    let lookup = lookup.clone();
    Some(Arc::new(move |job: ServeJob| {
        if job.request.method == DESCRIBE_METHOD
            || (guarded && job.semantics == Some(Semantics::NonRepeatableCommand))
        {
            return InlineRun::OnTask(job);
        }
        if !guarded {
            note_unguarded_key(&job.request, job.semantics);
        }
        let handler = match &*lookup {
            Lookup::Any(h) => Some(h),
            Lookup::Methods(m) => m.get(&job.request.method),
        };
        let Some(MethodHandler::Inline(h)) = handler else {
            return InlineRun::OnTask(job);
        };
        let h = h.clone();
        let request = job.request;
        InlineRun::Answered(
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || h(request)))
                .unwrap_or_else(|panic| {
                    Err(ServeError::exception(format!(
                        "handler panicked: {}",
                        panic_text(panic)
                    )))
                }),
        )
    }))
}

/// A handler's future with its panics caught: a panic while the handler is called or while
/// its future is polled ends the call with `Exception` instead of killing the task (which
/// would leave the call unanswered).
struct Caught(Result<HandlerFuture, String>);

impl Caught {
    fn new(call: impl FnOnce() -> HandlerFuture) -> Caught {
        Caught(std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).map_err(panic_text))
    }
}

impl std::future::Future for Caught {
    type Output = Result<Bytes, ServeError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let failed = |text: &str| ServeError::exception(format!("handler panicked: {text}"));
        let fut = match &mut self.0 {
            Ok(fut) => fut,
            Err(text) => return std::task::Poll::Ready(Err(failed(text))),
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(panic) => {
                let text = panic_text(panic);
                let answer = failed(&text);
                // Never polled again: the future panicked.
                self.0 = Err(text);
                std::task::Poll::Ready(Err(answer))
            }
        }
    }
}

/// The message of a panic payload, if it has one.
fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}
