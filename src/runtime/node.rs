//! The public, async handle of a running node.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::calls::{
    self as rcalls, CallError, CallOptions, CallStream, Handler, HandlerFuture, ItemPort, ItemSink,
    RemoteCode, Request, ServeError,
};
use super::command::{CallReply, Command, ServeDone, ServeItem, ServeJob, Served, WakeUp};
use super::discovery::Agent;
use super::error::{BatchSendError, NodeError, PublishError, SendError};
use super::event::EventStream;
use super::idempotency::{Guard, IdempotencyStore, Owner, DEFAULT_RETENTION};
use super::io::IoThread;
use super::operations::{Operations, OpsShared};
use super::outbound::{Closed, LinkTable, PubSocket, SendQueue, Stop};
use super::service::{
    MethodHandler, NodeContract, Semantics, ServedService, Service, StreamHandler, DESCRIBE_METHOD,
};
use super::snapshot::Snapshot;
use crate::config::NodeConfig;
use crate::proto::calls::{CallShape, ServeId};
use crate::proto::contract::ServiceContract;
use crate::proto::wire::BEACON_TOPIC;

/// A running zmesh node. Cheap to clone; all clones drive the same I/O thread.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    rid: String,
    generation: u64,
    commands: crossbeam_channel::Sender<Command>,
    wake: Arc<WakeUp>,
    /// Where one-way records go, as the I/O thread publishes it.
    table: Arc<LinkTable>,
    /// The node's PUB socket, if it has a publisher endpoint.
    publisher: Option<Arc<PubSocket>>,
    events: Mutex<Option<EventStream>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The contract of every served channel, by channel (MISSION K1).
    contract: Mutex<BTreeMap<String, ServiceContract>>,
    /// The idempotency guard of non-repeatable commands, if the node has a store (K3).
    guard: Option<Arc<Guard>>,
    /// The operations registry (K2).
    ops: Arc<OpsShared>,
    /// Automatic mode: the discovery agent (MISSION D1, D3), once started.
    discovery: Mutex<Option<Agent>>,
}

/// What automatic mode needs to start once the I/O thread runs.
struct DiscoveryPlan {
    store: Arc<dyn crate::runtime::store::Store>,
    descriptor: crate::proto::discovery::Descriptor,
    local: crate::proto::discovery::Local,
}

/// A service registered on a [`NodeBuilder`], applied to the node before it starts.
type Registration = Box<dyn FnOnce(&Node) -> Result<(), NodeError> + Send>;

/// Builds a [`Node`] together with the channels it serves ([`Node::builder`]).
///
/// Handlers registered here are in place before the node reads its first record, so a peer
/// that sees this node ready never has a call refused with `ClassNotFound` for a channel the
/// node was started to serve. ([`Node::serve`] on a running node is immediate too, but a
/// call that arrives first is refused as never run.)
///
/// ```no_run
/// # async fn demo() -> Result<(), zmesh::runtime::NodeError> {
/// use zmesh::config::NodeConfig;
/// use zmesh::runtime::calls::{Request, ServeError};
/// use zmesh::runtime::Node;
///
/// let node = Node::builder(NodeConfig::new("b"))
///     .serve("echo", |req: Request| async move {
///         Ok::<_, ServeError>(req.raw_args().clone())
///     })
///     .start()
///     .await?;
/// # node.shutdown().await
/// # }
/// ```
#[must_use = "a builder does nothing until started"]
pub struct NodeBuilder {
    config: NodeConfig,
    services: Vec<Registration>,
    idempotency: Option<(Arc<dyn IdempotencyStore>, Duration)>,
}

impl NodeBuilder {
    /// Serves `channel` with `handler`, exactly as [`Node::serve`] does, from the start.
    pub fn serve<F, Fut>(mut self, channel: &str, handler: F) -> Self
    where
        F: Fn(Request) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Bytes, ServeError>> + Send + 'static,
    {
        let channel = channel.to_owned();
        self.services
            .push(Box::new(move |node: &Node| node.serve(&channel, handler)));
        self
    }

    /// Serves `channel` with a streaming `handler`, exactly as [`Node::serve_stream`] does,
    /// from the start.
    pub fn serve_stream<F, Fut>(mut self, channel: &str, handler: F) -> Self
    where
        F: Fn(Request, ItemSink) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Bytes, ServeError>> + Send + 'static,
    {
        let channel = channel.to_owned();
        self.services.push(Box::new(move |node: &Node| {
            node.serve_stream(&channel, handler)
        }));
        self
    }

    /// Exposes `service` (its methods, semantics and execution), exactly as
    /// [`Node::expose`] does, from the start.
    pub fn expose(mut self, service: Service) -> Self {
        self.services
            .push(Box::new(move |node: &Node| node.expose(service)));
        self
    }

    /// Guards this node's non-repeatable commands with `store` (MISSION K3): a repeat of a
    /// command is answered from the store's record instead of running again (see
    /// [`crate::runtime::service`]). Records are kept [`DEFAULT_RETENTION`] (24 h) unless
    /// [`NodeBuilder::idempotency_retention`] says otherwise. Queries and other semantics
    /// never reach the store.
    pub fn idempotency_store(mut self, store: Arc<dyn IdempotencyStore>) -> Self {
        let retention = self
            .idempotency
            .as_ref()
            .map_or(DEFAULT_RETENTION, |(_, r)| *r);
        self.idempotency = Some((store, retention));
        self
    }

    /// How long idempotency records are kept (default 24 h; applies once a store is set).
    pub fn idempotency_retention(mut self, retention: Duration) -> Self {
        if let Some((_, r)) = self.idempotency.as_mut() {
            *r = retention;
        }
        self
    }

    /// Starts the node ([`Node::start`]) with its services in place.
    pub async fn start(self) -> Result<Node, NodeError> {
        let NodeBuilder {
            config,
            services,
            idempotency,
        } = self;
        let (node, io, plan) =
            tokio::task::spawn_blocking(move || Node::prepare(config, idempotency))
                .await
                .map_err(|_| NodeError::Stopped)??;
        NodeBuilder::finish(node, io, plan, services)
    }

    /// Blocking variant of [`NodeBuilder::start`]. A builder with services, or a
    /// configuration with `[discovery]`, must be started inside a tokio runtime (the handlers
    /// and the discovery agent run on it): outside one this fails with
    /// [`NodeError::NoRuntime`] before anything is bound.
    pub fn start_blocking(self) -> Result<Node, NodeError> {
        let needs_runtime = !self.services.is_empty() || self.config.discovery.is_some();
        if needs_runtime && tokio::runtime::Handle::try_current().is_err() {
            return Err(NodeError::NoRuntime);
        }
        let NodeBuilder {
            config,
            services,
            idempotency,
        } = self;
        let (node, io, plan) = Node::prepare(config, idempotency)?;
        NodeBuilder::finish(node, io, plan, services)
    }

    fn finish(
        node: Node,
        io: IoThread,
        plan: Option<DiscoveryPlan>,
        services: Vec<Registration>,
    ) -> Result<Node, NodeError> {
        for service in services {
            // On failure `io` is dropped unstarted: its sockets close and nothing runs.
            service(&node)?;
        }
        let handle = match plan {
            Some(_) => {
                Some(tokio::runtime::Handle::try_current().map_err(|_| NodeError::NoRuntime)?)
            }
            None => None,
        };
        node.launch(io)?;
        if let (Some(plan), Some(handle)) = (plan, handle) {
            let weak = Arc::downgrade(&node.inner);
            let to_io: super::discovery::ToIo = Arc::new(move |cmd| match weak.upgrade() {
                Some(inner) => Node { inner }.command(cmd),
                None => false,
            });
            let agent = Agent::spawn(&handle, plan.store, plan.descriptor, plan.local, to_io);
            if let Ok(mut d) = node.inner.discovery.lock() {
                *d = Some(agent);
            }
        }
        Ok(node)
    }
}

impl Node {
    /// Starts a node: binds its endpoints, starts its I/O thread, begins dialling peers.
    /// Returns once every bind has succeeded (or the first bind error).
    ///
    /// A node that serves calls should register its services with [`Node::builder`] instead,
    /// so that no call can arrive before its handler is in place.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        Node::builder(config).start().await
    }

    /// Blocking variant of [`Node::start`], for code outside an async runtime.
    pub fn start_blocking(config: NodeConfig) -> Result<Node, NodeError> {
        Node::builder(config).start_blocking()
    }

    /// A builder for a node whose services are registered before it reads its first record.
    pub fn builder(config: NodeConfig) -> NodeBuilder {
        NodeBuilder {
            config,
            services: Vec::new(),
            idempotency: None,
        }
    }

    /// Binds the node's endpoints and builds its I/O thread without starting it: nothing is
    /// read from any socket until [`Node::launch`].
    fn prepare(
        config: NodeConfig,
        idempotency: Option<(Arc<dyn IdempotencyStore>, Duration)>,
    ) -> Result<(Node, IoThread, Option<DiscoveryPlan>), NodeError> {
        config.validate()?;
        // Automatic mode binds what it publishes: absent sections on ephemeral ports.
        let config = config.with_discovery_binds();
        let discovery = config.discovery.clone();
        let memberships = config.memberships.clone();
        let generation = fresh_generation();
        let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let rid = config.rid.clone();
        let rid_for_guard = rid.clone();
        let outstanding = Arc::new(AtomicUsize::new(0));
        let ops = Arc::new(OpsShared::new(config.operations_keep));
        let (io, shared) = IoThread::new(
            config,
            generation,
            cmd_rx,
            ev_tx,
            outstanding.clone(),
            ops.clone(),
        )?;
        let node = Node {
            inner: Arc::new(Inner {
                rid,
                generation,
                commands: cmd_tx,
                wake: shared.wake,
                table: shared.table,
                publisher: shared.publisher,
                events: Mutex::new(Some(EventStream::new(ev_rx, outstanding))),
                thread: Mutex::new(None),
                contract: Mutex::new(BTreeMap::new()),
                ops,
                guard: idempotency.map(|(store, retention)| {
                    let owner = Owner {
                        rid: rid_for_guard.clone(),
                        generation,
                    };
                    Arc::new(Guard::new(store, retention, owner))
                }),
                discovery: Mutex::new(None),
            }),
        };
        let plan = match discovery {
            Some(d) => {
                let store = crate::runtime::store::open(&d.store).map_err(|e| {
                    NodeError::Config(crate::config::ConfigError::Invalid(e.to_string()))
                })?;
                let mut local = crate::proto::discovery::Local::new(node.rid(), &memberships);
                local.route_mesh = d.route_mesh;
                local.client_server = d.client_server;
                local.subscribe = d.subscribe;
                Some(DiscoveryPlan {
                    store,
                    descriptor: io.descriptor(),
                    local,
                })
            }
            None => None,
        };
        Ok((node, io, plan))
    }

    /// Starts the I/O thread built by [`Node::prepare`]. Commands queued before (service
    /// registrations) are taken before the first socket is read.
    fn launch(&self, io: IoThread) -> Result<(), NodeError> {
        let thread = std::thread::Builder::new()
            .name(format!("zmesh-io-{}", self.inner.rid))
            .spawn(move || io.run())
            .map_err(|_| NodeError::Stopped)?;
        if let Ok(mut t) = self.inner.thread.lock() {
            *t = Some(thread);
        }
        Ok(())
    }

    /// This node's RID.
    pub fn rid(&self) -> &str {
        &self.inner.rid
    }

    /// This process run's lifecycle generation (random, non-zero).
    pub fn generation(&self) -> u64 {
        self.inner.generation
    }

    /// Takes the event stream (deliveries and state changes). Only the first caller gets it;
    /// events arrive in batches, in the order the I/O thread produced them.
    pub fn take_events(&self) -> Option<EventStream> {
        self.inner.events.lock().ok()?.take()
    }

    fn command(&self, cmd: Command) -> bool {
        self.inner.command(cmd)
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        if !self.command(make(tx)) {
            return None;
        }
        rx.await.ok()
    }

    /// Sends a one-way application record to a RouteMesh peer (on its Application lane) or to
    /// a ClientServer client connected to this node's server endpoint, by RID.
    ///
    /// The record goes into the zmesh queue of the peer's ready link, at most
    /// [`SEND_QUEUE`](crate::runtime::SEND_QUEUE) records deep, and from there to libzmq, in
    /// order, without a round trip to the I/O thread: `Ok` means the record was queued. While
    /// the queue is full, `send` waits for room ([`Node::try_send`] refuses instead). It
    /// fails at once, with nothing queued, if no link to `peer` is ready
    /// ([`SendError::NotReady`]) or the channel is not a valid name.
    ///
    /// Records to one peer keep their order: a task's records arrive in the order it sent
    /// them, also while other tasks send to the same peer (one-way records and calls are not
    /// ordered with respect to each other). A record still queued when its link fails is
    /// not lost silently: the failure's [`StateChange`](crate::runtime::StateChange) detail
    /// says how many queued records were not sent (`"…; 3 queued records not sent"`) and the
    /// metric `zmesh_records_unsent_total` (label `reason`) counts them. At
    /// [`Node::shutdown`], queued records leave before the link's CLOSE, as far as libzmq
    /// takes them; any left are counted the same way.
    pub async fn send(
        &self,
        peer: &str,
        channel: &str,
        payload: impl Into<Bytes>,
    ) -> Result<(), SendError> {
        check_channel(channel)?;
        let q = self.inner.table.peer(peer)?;
        let mut one = [payload.into()];
        self.enqueue(&q, channel, &mut one, true)
            .await
            .map_err(|e| e.error)
    }

    /// [`Node::send`] without waiting: while the link's queue is full, fails at once with
    /// [`SendError::WouldBlock`], nothing queued.
    pub fn try_send(
        &self,
        peer: &str,
        channel: &str,
        payload: impl Into<Bytes>,
    ) -> Result<(), SendError> {
        check_channel(channel)?;
        let q = self.inner.table.peer(peer)?;
        let mut one = [payload.into()];
        self.push_all(&q, channel, &mut one).map_err(|e| e.error)
    }

    /// Sends several one-way records to `peer` on `channel`, in order, exactly as that many
    /// [`Node::send`]s would, at the cost of one.
    ///
    /// Records are taken in order, waiting for room in the link's queue as `send` does.
    /// On an error, [`BatchSendError::sent`] says how many were taken (queued, then sent in
    /// order unless the link fails first, in which case its failure counts them, as for
    /// `send`); the record at that index and every later one were not queued anywhere.
    pub async fn send_batch(
        &self,
        peer: &str,
        channel: &str,
        mut payloads: Vec<Bytes>,
    ) -> Result<(), BatchSendError> {
        if payloads.is_empty() {
            return Ok(());
        }
        let q = check_channel(channel)
            .and_then(|()| self.inner.table.peer(peer))
            .map_err(|error| BatchSendError { sent: 0, error })?;
        self.enqueue(&q, channel, &mut payloads, true).await
    }

    /// [`Node::send_batch`] without waiting: takes records while the link's queue has room,
    /// then fails with [`SendError::WouldBlock`]; [`BatchSendError::sent`] says how many were
    /// taken, and the rest were not queued anywhere.
    pub fn try_send_batch(
        &self,
        peer: &str,
        channel: &str,
        mut payloads: Vec<Bytes>,
    ) -> Result<(), BatchSendError> {
        if payloads.is_empty() {
            return Ok(());
        }
        let q = check_channel(channel)
            .and_then(|()| self.inner.table.peer(peer))
            .map_err(|error| BatchSendError { sent: 0, error })?;
        self.push_all(&q, channel, &mut payloads)
    }

    /// Sends a one-way application record to one ready ClientServer server of `channel`
    /// (the ready servers take turns), as [`Node::send`] does to a peer.
    pub async fn send_to_server(
        &self,
        channel: &str,
        payload: impl Into<Bytes>,
    ) -> Result<(), SendError> {
        check_channel(channel)?;
        let q = self.inner.table.server(channel)?;
        let mut one = [payload.into()];
        self.enqueue(&q, channel, &mut one, true)
            .await
            .map_err(|e| e.error)
    }

    /// Queues `payloads` on `q`; waits for room when `wait`, else fails `WouldBlock`.
    async fn enqueue(
        &self,
        q: &Arc<SendQueue>,
        channel: &str,
        payloads: &mut [Bytes],
        wait: bool,
    ) -> Result<(), BatchSendError> {
        let mut sent = 0;
        loop {
            match self.push(q, channel, payloads, &mut sent) {
                Ok(true) => return Ok(()),
                Ok(false) if wait => q.wait_for_room().await,
                Ok(false) => {
                    let error = SendError::WouldBlock(q.who().to_owned());
                    return Err(BatchSendError { sent, error });
                }
                Err(error) => return Err(BatchSendError { sent, error }),
            }
        }
    }

    /// Queues what fits of `payloads` on `q`, without waiting.
    fn push_all(
        &self,
        q: &Arc<SendQueue>,
        channel: &str,
        payloads: &mut [Bytes],
    ) -> Result<(), BatchSendError> {
        let mut sent = 0;
        match self.push(q, channel, payloads, &mut sent) {
            Ok(true) => Ok(()),
            Ok(false) => Err(BatchSendError {
                sent,
                error: SendError::WouldBlock(q.who().to_owned()),
            }),
            Err(error) => Err(BatchSendError { sent, error }),
        }
    }

    /// One push of `payloads[*sent..]` on `q`: counts what was taken into `sent` and tells
    /// the I/O thread when no drain of `q` is on its way. `Ok(true)`: every record taken;
    /// `Ok(false)`: the queue is full.
    fn push(
        &self,
        q: &Arc<SendQueue>,
        channel: &str,
        payloads: &mut [Bytes],
        sent: &mut usize,
    ) -> Result<bool, SendError> {
        let rest = payloads.get_mut(*sent..).unwrap_or_default();
        let pushed = q.push(channel, rest);
        *sent += pushed.taken;
        if pushed.schedule && !self.command(Command::SendQueued(q.clone())) {
            return Err(SendError::Shutdown);
        }
        match pushed.stop {
            None => Ok(true),
            Some(Stop::Full) => Ok(false),
            Some(Stop::Closed(Closed::NotReady)) => Err(SendError::NotReady(q.who().to_owned())),
            Some(Stop::Closed(Closed::Shutdown)) => Err(SendError::Shutdown),
            Some(Stop::Invalid(e)) => Err(SendError::Invalid(e)),
        }
    }

    /// Publishes a fanout record. The exact beacon topic is refused (MISSION L4); topics that
    /// merely share a prefix with it are fine.
    ///
    /// The record goes straight to the node's PUB socket (no command to the I/O thread, no
    /// wake-up): `Ok` means it was handed to the publisher with the next sequence number, not
    /// that anyone received it. PUB never blocks: at the high-water mark libzmq drops records
    /// for a slow subscriber (the fanout loss rule). Records published from one task keep
    /// their order.
    pub fn publish(&self, topic: &[u8], payload: impl Into<Bytes>) -> Result<(), PublishError> {
        let publisher = self.check_publish(topic)?;
        if publisher.publish(topic, std::slice::from_ref(&payload.into())) {
            Ok(())
        } else {
            Err(PublishError::Shutdown)
        }
    }

    /// Publishes several fanout records on `topic`, in order, as that many [`Node::publish`]s
    /// would (with one lock of the PUB socket for all of them).
    ///
    /// The checks are those of `publish` and apply to the whole batch: a reserved or invalid
    /// topic, or a node without a publisher endpoint, refuses every record (and an empty batch
    /// is checked too). As with `publish`, `Ok` means the records were handed to the
    /// publisher, one sequence number each, not that anyone received them.
    pub fn publish_batch(&self, topic: &[u8], payloads: Vec<Bytes>) -> Result<(), PublishError> {
        let publisher = self.check_publish(topic)?;
        if payloads.is_empty() || publisher.publish(topic, &payloads) {
            Ok(())
        } else {
            Err(PublishError::Shutdown)
        }
    }

    /// The argument checks of [`Node::publish`] and [`Node::publish_batch`]; the publisher.
    fn check_publish(&self, topic: &[u8]) -> Result<&PubSocket, PublishError> {
        if topic == BEACON_TOPIC {
            return Err(PublishError::ReservedTopic);
        }
        if topic.is_empty() || topic.len() > 255 {
            return Err(PublishError::InvalidTopic);
        }
        self.inner
            .publisher
            .as_deref()
            .ok_or(PublishError::NoPublisher)
    }

    /// Calls `method` on a ready server of `channel` and decodes its result.
    ///
    /// The server is a ready RouteMesh peer that announced a Server membership of the channel,
    /// or a ready ClientServer server configured for it. No timeout applies: the call is a
    /// lease on the connection that carried it and fails the moment that connection leaves
    /// ready. See [`CallError`] and [`rcalls::may_have_run`] for what a failure says.
    pub async fn call<A, R>(&self, channel: &str, method: &str, args: &A) -> Result<R, CallError>
    where
        A: serde::Serialize + ?Sized,
        R: serde::de::DeserializeOwned,
    {
        self.call_with(channel, method, args, CallOptions::default())
            .await
    }

    /// [`Node::call`] with options (a deadline, a specific peer).
    pub async fn call_with<A, R>(
        &self,
        channel: &str,
        method: &str,
        args: &A,
        opts: CallOptions,
    ) -> Result<R, CallError>
    where
        A: serde::Serialize + ?Sized,
        R: serde::de::DeserializeOwned,
    {
        let args =
            rcalls::encode(args).map_err(|e| CallError::InvalidArgument { reason: e.message })?;
        let bytes = self.call_raw(channel, method, args, opts).await?;
        rcalls::decode(&bytes)
    }

    /// A call with raw (already encoded) arguments and result.
    pub async fn call_raw(
        &self,
        channel: &str,
        method: &str,
        args: Bytes,
        opts: CallOptions,
    ) -> Result<Bytes, CallError> {
        check_names(channel, method, &opts)?;
        let (tx, rx) = oneshot::channel();
        let cmd = Command::Call {
            channel: channel.to_owned(),
            method: method.to_owned(),
            args,
            opts,
            reply: CallReply::Unary(tx),
        };
        if !self.command(cmd) {
            return Err(CallError::Shutdown { sent: false });
        }
        // The I/O thread answers every call exactly once; if it vanished without answering,
        // the call may have left.
        rx.await.unwrap_or(Err(CallError::Shutdown { sent: true }))
    }

    /// Calls `method` on a ready server of `channel` and streams its answer: the items the
    /// handler sends, in order, then its one terminal result (see [`CallStream`]).
    ///
    /// Routing, leases and errors are those of [`Node::call`]: no timeout applies, and the
    /// stream fails the moment the connection that accepted it leaves ready
    /// (`OutcomeUnknown`). A server that stops gracefully while producing the stream ends it
    /// at once with [`CallError::Unavailable`] `{ accepted: true }` (MISSION C4). Arguments
    /// that do not encode end the stream at once with [`CallError::InvalidArgument`].
    ///
    /// Returns at once; the call is made by the node's I/O thread.
    pub fn call_stream<A>(
        &self,
        channel: &str,
        method: &str,
        args: &A,
        opts: CallOptions,
    ) -> CallStream
    where
        A: serde::Serialize + ?Sized,
    {
        match rcalls::encode(args) {
            Ok(args) => self.call_stream_raw(channel, method, args, opts),
            Err(e) => CallStream::failed(CallError::InvalidArgument { reason: e.message }),
        }
    }

    /// [`Node::call_stream`] with raw (already encoded) arguments.
    pub fn call_stream_raw(
        &self,
        channel: &str,
        method: &str,
        args: Bytes,
        opts: CallOptions,
    ) -> CallStream {
        if let Err(e) = check_names(channel, method, &opts) {
            return CallStream::failed(e);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let cmd = Command::Call {
            channel: channel.to_owned(),
            method: method.to_owned(),
            args,
            opts,
            reply: CallReply::Stream(tx),
        };
        if !self.command(cmd) {
            return CallStream::failed(CallError::Shutdown { sent: false });
        }
        CallStream::new(rx)
    }

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
    pub fn serve<F, Fut>(&self, channel: &str, handler: F) -> Result<(), NodeError>
    where
        F: Fn(Request) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Bytes, ServeError>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |req| -> HandlerFuture { Box::pin(handler(req)) });
        self.serve_any(channel, CallShape::Unary, MethodHandler::Unary(handler))
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
    pub fn serve_stream<F, Fut>(&self, channel: &str, handler: F) -> Result<(), NodeError>
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
    /// with [`NodeError::Contract`]. A call to a method the service does not declare is
    /// answered `MethodNotFound` (did not run). Must be called from within a tokio runtime;
    /// exposing a channel again replaces it. See [`crate::runtime::service`].
    pub fn expose(&self, service: Service) -> Result<(), NodeError> {
        let channel = service.channel().to_owned();
        let (served, handlers) = service.into_parts().map_err(NodeError::Contract)?;
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
    pub fn describe(&self) -> NodeContract {
        let mut c = NodeContract::new(self.inner.rid.clone());
        if let Ok(services) = self.inner.contract.lock() {
            c.services = services.values().cloned().collect();
        }
        c.normalize();
        c
    }

    /// Fetches the contract of the node that serves `channel` (routed like any call: `opts`
    /// may name a RouteMesh peer), through the built-in method `$describe` every served
    /// channel answers.
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
    ) -> Result<(), NodeError> {
        if channel.is_empty() || channel.len() > 255 {
            return Err(NodeError::Invalid("channel must be 1..=255 bytes".into()));
        }
        let served = ServedService {
            contract: Arc::new(ServiceContract::new(channel)),
            key: None,
            any_method: Some(shape),
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
    ) -> Result<(), NodeError> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| NodeError::NoRuntime)?;
        let (jobs, mut rx) = mpsc::unbounded_channel::<ServeJob>();
        let weak = Arc::downgrade(&self.inner);
        let lookup = Arc::new(lookup);
        let guard = self.inner.guard.clone();
        rt.spawn(async move {
            // Ends when the I/O thread drops its sender (node stopped).
            while let Some(job) = rx.recv().await {
                let (weak, lookup, guard) = (weak.clone(), lookup.clone(), guard.clone());
                tokio::spawn(async move {
                    let id = job.id;
                    let result = run_job(job, &lookup, &weak, guard.as_deref()).await;
                    if let Some(inner) = weak.upgrade() {
                        let node = Node { inner };
                        node.command(Command::ServeDone(ServeDone { id, result }));
                    }
                });
            }
        });
        let contract = (*served.contract).clone();
        if !self.command(Command::Serve {
            channel: channel.to_owned(),
            served: Served {
                jobs,
                service: served,
            },
        }) {
            return Err(NodeError::Stopped);
        }
        if let Ok(mut c) = self.inner.contract.lock() {
            c.insert(channel.to_owned(), contract);
        }
        Ok(())
    }

    /// A snapshot of every configured and inbound link (MISSION O1).
    pub async fn snapshot(&self) -> Result<Snapshot, NodeError> {
        let mut snap = self
            .ask(Command::Snapshot)
            .await
            .ok_or(NodeError::Stopped)?;
        if let Ok(d) = self.inner.discovery.lock() {
            snap.discovery = d.as_ref().map(|a| a.snapshot(std::time::Instant::now()));
        }
        Ok(snap)
    }

    /// Stops the node gracefully (MISSION C4, F6): refuses new calls (`Unavailable`, did not
    /// run), ends every stream it is producing at once with `Unavailable` (channels of
    /// [`Node::serve_stream`]), answers every other call it accepted (waiting at most
    /// [`GRACEFUL_STOP_BOUND`](crate::runtime::GRACEFUL_STOP_BOUND); calls still running then
    /// are answered `Unavailable`), fails its own pending calls, sends an orderly CLOSE on
    /// every ready connection, closes every socket and monitor, stops every timer, and waits
    /// for the I/O thread to exit. When this returns, nothing of the node is running.
    pub async fn shutdown(&self) -> Result<(), NodeError> {
        // Automatic mode: the descriptor goes first (bounded), so peers stop dialling a node
        // that is leaving; its connections are closed in order below.
        let agent = self.inner.discovery.lock().ok().and_then(|mut d| d.take());
        if let Some(agent) = agent {
            agent.stop().await;
        }
        let _ = self.ask(Command::Shutdown).await;
        let handle = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            tokio::task::spawn_blocking(move || h.join())
                .await
                .map_err(|_| NodeError::Stopped)?
                .map_err(|_| NodeError::Stopped)?;
        }
        Ok(())
    }

    /// True while the node's I/O thread is running.
    pub fn is_running(&self) -> bool {
        self.inner
            .thread
            .lock()
            .ok()
            .and_then(|t| t.as_ref().map(|h| !h.is_finished()))
            .unwrap_or(false)
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

impl Inner {
    /// Queues `cmd` for the I/O thread and wakes it if needed; false once it is gone.
    fn command(&self, cmd: Command) -> bool {
        if self.commands.send(cmd).is_err() {
            return false;
        }
        self.wake.command_queued();
        true
    }
}

/// A one-way record's channel travels as a 1..=255-byte name.
fn check_channel(channel: &str) -> Result<(), SendError> {
    if channel.is_empty() || channel.len() > 255 {
        return Err(SendError::Invalid("channel must be 1..=255 bytes".into()));
    }
    Ok(())
}

/// How a served channel finds the handler of a call.
enum Lookup {
    /// One handler for every method ([`Node::serve`], [`Node::serve_stream`]).
    Any(MethodHandler),
    /// One handler per declared method ([`Node::expose`]).
    Methods(HashMap<String, MethodHandler>),
}

/// Runs one accepted call: the built-in `$describe`, or its method's handler (a panic is
/// answered `Exception`), behind the idempotency guard for a non-repeatable command.
async fn run_job(
    job: ServeJob,
    lookup: &Lookup,
    node: &Weak<Inner>,
    guard: Option<&Guard>,
) -> Result<Bytes, ServeError> {
    let ServeJob {
        id,
        request,
        semantics,
    } = job;
    if request.method == DESCRIBE_METHOD {
        let contract = node.upgrade().map(|inner| Node { inner }.describe());
        return match contract {
            Some(c) => rcalls::encode(&c),
            None => Err(ServeError::runtime(
                RemoteCode::Unavailable,
                "the node stopped",
            )),
        };
    }
    let handler = match lookup {
        Lookup::Any(h) => Some(h.clone()),
        Lookup::Methods(m) => m.get(&request.method).cloned(),
    };
    let Some(handler) = handler else {
        return Err(ServeError::method_not_found(&request.method));
    };
    let port: Weak<dyn ItemPort> = node.clone();
    let sink = ItemSink::new(id, port);
    let guarded = (semantics == Some(Semantics::NonRepeatableCommand))
        .then_some(guard)
        .flatten();
    let run = |request: Request| async move {
        // The handler is called inside its own task, so a panic anywhere in it is a failed
        // task answered `Exception` (it may have run).
        let task = match handler {
            MethodHandler::Unary(h) => tokio::spawn(h(request)),
            MethodHandler::Stream(h) => tokio::spawn(h(request, sink)),
        };
        match task.await {
            Ok(r) => r,
            Err(e) => Err(ServeError::exception(format!("handler failed: {e}"))),
        }
    };
    match guarded {
        Some(g) => {
            let req = request.clone();
            g.run(&req, move || run(request)).await
        }
        None => run(request).await,
    }
}

/// Channel and method names travel as 1..=255-byte strings.
fn check_names(channel: &str, method: &str, opts: &CallOptions) -> Result<(), CallError> {
    let key = opts.idempotency_key.as_deref();
    for (what, v) in [
        ("channel", Some(channel)),
        ("method", Some(method)),
        ("idempotency key", key),
    ] {
        if v.is_some_and(|v| v.is_empty() || v.len() > 255) {
            return Err(CallError::InvalidArgument {
                reason: format!("{what} must be 1..=255 bytes"),
            });
        }
    }
    Ok(())
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: stop the I/O thread (it exits on a disconnected channel).
        // Disconnect first, then wake: woken before the sender is gone, the loop could find
        // the channel merely empty and sleep until its next timer (up to a probe interval).
        let (dead, _) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.commands, dead));
        self.wake.wake_now();
    }
}

/// A fresh random non-zero lifecycle generation for this process run.
fn fresh_generation() -> u64 {
    loop {
        let mut buf = [0u8; 8];
        if getrandom::getrandom(&mut buf).is_err() {
            // No OS randomness: fall back to the per-process random hasher seed.
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(std::process::id().into());
            buf = h.finish().to_be_bytes();
        }
        let g = u64::from_be_bytes(buf);
        if g != 0 {
            return g;
        }
    }
}
