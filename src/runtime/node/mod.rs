//! The public, async handle of a running node. Serving (channels, services, the contract,
//! the operations registry) is in [`serving`].

mod serving;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::calls::{
    self as rcalls, CallControl, CallError, CallOptions, CallPort, CallStream, ItemSink,
    PendingCall, Request, ServeError,
};
use super::command::{CallReply, Command};
use super::discovery::Agent;
use super::error::{
    AllowListError, BatchSendError, NodeError, NodeStopped, PublishError, SendError,
};
use super::event::{EventSender, EventStream};
use super::idempotency::{Guard, IdempotencyStore, Owner, DEFAULT_RETENTION};
use super::io::IoThread;
use super::io::SecurityInit;
use super::operations::OpsShared;
use super::outbound::{Closed, LinkTable, PubSocket, SendQueue, Stop};
use super::ready::{ReadyError, Target};
use super::security::{curve_available, load_allow_list, KeyPair, ALLOW_DIR_POLL};
use super::service::Service;
use super::snapshot::Snapshot;
use super::wake::WakeUp;
use crate::config::{ConfigError, NodeConfig, SecurityConfig, SecurityMode};
use crate::proto::contract::ServiceContract;
use crate::proto::security::PublicKey;
use crate::proto::wire::{Name, BEACON_TOPIC, MAX_TOPIC_LEN};

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
    /// Moves whenever an event batch changed some link's state; closed when the I/O thread
    /// is gone ([`Node::ready`]).
    state_batches: watch::Receiver<u64>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The contract of every served channel, by channel (MISSION K1).
    contract: Mutex<BTreeMap<String, ServiceContract>>,
    /// The idempotency guard of non-repeatable commands, if the node has a store (K3).
    guard: Option<Arc<Guard>>,
    /// The operations registry (K2).
    ops: Arc<OpsShared>,
    /// Automatic mode: the discovery agent (MISSION D1, D3), once started.
    discovery: Mutex<Option<Agent>>,
    /// `[security]`, for reading the allow-list again.
    security: SecurityConfig,
    /// Stops the thread that watches `allow_dir` when dropped (with this, or at shutdown).
    allow_watch: Mutex<Option<crossbeam_channel::Sender<()>>>,
    /// The last token given to a call, for its cancel ([`Command::CancelCall`]).
    call_tokens: std::sync::atomic::AtomicU64,
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
/// # node.shutdown().await?;
/// # Ok(())
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
        self.services.push(Box::new(move |node: &Node| {
            Ok(node.serve(&channel, handler)?)
        }));
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
            Ok(node.serve_stream(&channel, handler)?)
        }));
        self
    }

    /// Exposes `service` (its methods, semantics and execution), exactly as
    /// [`Node::expose`] does, from the start.
    pub fn expose(mut self, service: Service) -> Self {
        self.services
            .push(Box::new(move |node: &Node| Ok(node.expose(service)?)));
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
        // libzmq needs descriptors per connection: the soft limit goes up to the hard one
        // before the first socket is opened (once per process).
        crate::runtime::fds::raise_limit();
        let security = security_init(&config)?;
        let watch_allow_dir = security.curve.is_some() && config.security.allow_dir.is_some();
        let initial_allow = security.allow.clone();
        // Automatic mode binds what it publishes: absent sections on ephemeral ports.
        let config = config.with_discovery_binds();
        let security_config = config.security.clone();
        let discovery = config.discovery.clone();
        let memberships = config.memberships.clone();
        let generation = fresh_generation();
        let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let (states_tx, state_batches) = watch::channel(0u64);
        let rid = config.rid.clone();
        let rid_for_guard = rid.clone();
        let outstanding = Arc::new(AtomicUsize::new(0));
        let ops = Arc::new(OpsShared::new(config.operations_keep));
        let (io, shared) = IoThread::new(
            config,
            generation,
            cmd_rx,
            EventSender::new(ev_tx, states_tx),
            outstanding.clone(),
            ops.clone(),
            security,
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
                state_batches,
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
                security: security_config,
                allow_watch: Mutex::new(None),
                call_tokens: std::sync::atomic::AtomicU64::new(0),
            }),
        };
        if watch_allow_dir {
            let stop = spawn_allow_watch(
                Arc::downgrade(&node.inner),
                node.inner.security.clone(),
                initial_allow,
            )
            .map_err(|_| NodeError::Stopped)?;
            if let Ok(mut w) = node.inner.allow_watch.lock() {
                *w = Some(stop);
            }
        }
        let plan = match discovery {
            Some(d) => {
                let descriptor = io.descriptor();
                check_advertised(&d, &descriptor)?;
                let store = crate::runtime::store::open_config(&d).map_err(|e| {
                    NodeError::Config(crate::config::ConfigError::Invalid(e.to_string()))
                })?;
                let mut local = crate::proto::discovery::Local::new(node.rid(), &memberships);
                local.route_mesh = d.route_mesh;
                local.client_server = d.client_server;
                local.subscribe = d.subscribe;
                Some(DiscoveryPlan {
                    store,
                    descriptor,
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
        self.send_records(To::Peer(peer), channel, &mut [payload.into()])
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
        self.try_send_records(To::Peer(peer), channel, &mut [payload.into()])
            .map_err(|e| e.error)
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
        self.send_records(To::Peer(peer), channel, &mut payloads)
            .await
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
        self.try_send_records(To::Peer(peer), channel, &mut payloads)
    }

    /// Sends a one-way application record to one ready ClientServer server of `channel`
    /// (the ready servers take turns), as [`Node::send`] does to a peer.
    pub async fn send_to_server(
        &self,
        channel: &str,
        payload: impl Into<Bytes>,
    ) -> Result<(), SendError> {
        self.send_records(To::Server, channel, &mut [payload.into()])
            .await
            .map_err(|e| e.error)
    }

    /// The send path of [`Node::send`], [`Node::send_batch`] and [`Node::send_to_server`]:
    /// queues `payloads` on the ready link `to`, in order, waiting for room while its queue
    /// is full. An empty batch is sent at once (whether or not the link is ready).
    async fn send_records(
        &self,
        to: To<'_>,
        channel: &str,
        payloads: &mut [Bytes],
    ) -> Result<(), BatchSendError> {
        if payloads.is_empty() {
            return Ok(());
        }
        let q = self
            .queue(to, channel)
            .map_err(|error| BatchSendError { sent: 0, error })?;
        let mut sent = 0;
        loop {
            match self.push(&q, channel, payloads, &mut sent) {
                Ok(true) => return Ok(()),
                Ok(false) => q.wait_for_room().await,
                Err(error) => return Err(BatchSendError { sent, error }),
            }
        }
    }

    /// The send path of [`Node::try_send`] and [`Node::try_send_batch`]: as
    /// [`send_records`](Self::send_records), but takes only what fits in the queue now and
    /// fails [`SendError::WouldBlock`] for the rest.
    fn try_send_records(
        &self,
        to: To<'_>,
        channel: &str,
        payloads: &mut [Bytes],
    ) -> Result<(), BatchSendError> {
        if payloads.is_empty() {
            return Ok(());
        }
        let q = self
            .queue(to, channel)
            .map_err(|error| BatchSendError { sent: 0, error })?;
        let mut sent = 0;
        match self.push(&q, channel, payloads, &mut sent) {
            Ok(true) => Ok(()),
            Ok(false) => Err(BatchSendError {
                sent,
                error: SendError::WouldBlock(q.who().to_owned()),
            }),
            Err(error) => Err(BatchSendError { sent, error }),
        }
    }

    /// The queue of the ready link a one-way record on `channel` goes to; fails if the
    /// channel is not a valid name or no such link is ready.
    fn queue(&self, to: To<'_>, channel: &str) -> Result<Arc<SendQueue>, SendError> {
        check_channel(channel)?;
        match to {
            To::Peer(peer) => self.inner.table.peer(peer),
            To::Server => self.inner.table.server(channel),
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
    /// The record goes straight to the node's PUB socket (no command to the I/O thread): `Ok`
    /// means it was handed to the publisher with the next sequence number, not that anyone
    /// received it. PUB never blocks: at the high-water mark libzmq drops records for a slow
    /// subscriber (the fanout loss rule). Records published from one task keep their order.
    /// While every subscriber speaks PUBPACK (WIRE.md §7.5), records published in a burst may
    /// be held for up to one turn of the I/O thread's loop and leave packed; the first record
    /// after a quiet moment leaves at once, and wakes the I/O thread for that turn.
    pub fn publish(&self, topic: &[u8], payload: impl Into<Bytes>) -> Result<(), PublishError> {
        let publisher = self.check_publish(topic)?;
        if publisher.publish(topic, std::slice::from_ref(&payload.into())) {
            Ok(())
        } else {
            Err(PublishError::Shutdown)
        }
    }

    /// Publishes several fanout records on `topic`, in order, as that many [`Node::publish`]s
    /// would (with one lock of the PUB socket for all of them, and, while every subscriber
    /// speaks PUBPACK, in PUBPACKs of up to 64 records sent at once).
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
        if topic.is_empty() || topic.len() > MAX_TOPIC_LEN {
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
    /// ready. See [`CallError`] and [`rcalls::may_have_run`] for what a failure says: arguments
    /// that do not encode are [`CallError::InvalidArgument`] (never sent), a result that does
    /// not decode as `R` is [`CallError::UndecodableResult`] (the call ran and answered).
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
        let args = rcalls::encode_args(args)?;
        let bytes = self.call_raw(channel, method, args, opts).await?;
        rcalls::decode(&bytes)
    }

    /// A call with raw (already encoded) arguments and result.
    ///
    /// Dropping the future before it resolves cancels the call (see [`PendingCall`]).
    pub async fn call_raw(
        &self,
        channel: &str,
        method: &str,
        args: Bytes,
        opts: CallOptions,
    ) -> Result<Bytes, CallError> {
        self.start_call(channel, method, args, opts).await
    }

    /// Starts a call with raw (already encoded) arguments and returns it at once as a
    /// [`PendingCall`]: a future of its raw result that can also be cancelled
    /// ([`PendingCall::cancel`]). Routing, leases and errors are those of [`Node::call`].
    ///
    /// ```no_run
    /// # async fn demo(node: zmesh::runtime::Node) {
    /// use zmesh::runtime::calls::{encode_args, CallError, CallOptions};
    ///
    /// let args = encode_args(&()).expect("unit encodes");
    /// let mut call = node.start_call("pump", "pressure", args, CallOptions::default());
    /// call.cancel();
    /// assert!(matches!(call.await, Err(CallError::Cancelled { .. }) | Ok(_)));
    /// # }
    /// ```
    pub fn start_call(
        &self,
        channel: &str,
        method: &str,
        args: Bytes,
        opts: CallOptions,
    ) -> PendingCall {
        if let Err(e) = check_names(channel, method, &opts) {
            return PendingCall::failed(e);
        }
        let (tx, rx) = oneshot::channel();
        let token = self.next_call_token();
        let cmd = Command::Call {
            channel: channel.to_owned(),
            method: method.to_owned(),
            args,
            opts,
            reply: CallReply::Unary(tx),
            token,
        };
        if !self.command(cmd) {
            return PendingCall::failed(CallError::Shutdown { sent: false });
        }
        PendingCall::new(rx, self.control(token))
    }

    /// A fresh token naming one call of this node.
    fn next_call_token(&self) -> u64 {
        self.inner
            .call_tokens
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(1)
    }

    /// What cancels the call named `token`, holding the node only weakly.
    fn control(&self, token: u64) -> CallControl {
        let port: Arc<dyn CallPort> = self.inner.clone();
        CallControl::new(token, Arc::downgrade(&port))
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
        match rcalls::encode_args(args) {
            Ok(args) => self.call_stream_raw(channel, method, args, opts),
            Err(e) => CallStream::failed(e),
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
        let (tx, rx) = mpsc::channel(rcalls::STREAM_BUFFER + 1);
        let token = self.next_call_token();
        let cmd = Command::Call {
            channel: channel.to_owned(),
            method: method.to_owned(),
            args,
            opts,
            reply: CallReply::Stream(tx),
            token,
        };
        if !self.command(cmd) {
            return CallStream::failed(CallError::Shutdown { sent: false });
        }
        CallStream::new(rx, self.control(token))
    }

    /// A snapshot of every configured and inbound link (MISSION O1).
    pub async fn snapshot(&self) -> Result<Snapshot, NodeStopped> {
        let mut snap = self.ask(Command::Snapshot).await.ok_or(NodeStopped)?;
        if let Ok(d) = self.inner.discovery.lock() {
            snap.discovery = d.as_ref().map(|a| a.snapshot(std::time::Instant::now()));
        }
        Ok(snap)
    }

    /// Resolves once `target` is ready (MISSION A2): a RouteMesh peer, a server of a channel
    /// or a subscription (see [`Target`]). It needs no timeout and takes no event from
    /// [`Node::take_events`]: cancel it by dropping it (wrap it in `tokio::time::timeout` to
    /// bound it). A target that is ready already resolves at once; one that goes ready and
    /// not-ready again before the wait looks may be missed until it is ready again.
    /// Fails with [`ReadyError::Stopped`] when the node stops or begins to stop first.
    ///
    /// Each look is a [`Node::snapshot`] of the links (taken again only when some link
    /// changed state), so only the links a snapshot lists count: the first
    /// [`SNAPSHOT_LIMIT`](crate::runtime::snapshot::SNAPSHOT_LIMIT).
    ///
    /// ```no_run
    /// # async fn demo(node: zmesh::runtime::Node) -> Result<(), Box<dyn std::error::Error>> {
    /// use zmesh::runtime::Target;
    ///
    /// node.ready(Target::server("pump")).await?;
    /// let bar: f64 = node.call("pump", "pressure", &()).await?;
    /// # let _ = bar;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ready(&self, target: Target) -> Result<(), ReadyError> {
        let mut changes = self.inner.state_batches.clone();
        loop {
            // Seen before looking: a change from here on wakes the wait below.
            changes.borrow_and_update();
            let snapshot = match self.ask(Command::Snapshot).await {
                Some(s) if s.host == "running" => s,
                _ => return Err(ReadyError::Stopped(target)),
            };
            if target.is_ready_in(&snapshot) {
                return Ok(());
            }
            if changes.changed().await.is_err() {
                return Err(ReadyError::Stopped(target));
            }
        }
    }

    /// Stops the node gracefully (MISSION C4, F6): refuses new calls (`Unavailable`, did not
    /// run), ends every stream it is producing at once with `Unavailable` (channels of
    /// [`Node::serve_stream`]), answers every other call it accepted (waiting at most
    /// [`GRACEFUL_STOP_BOUND`](crate::runtime::GRACEFUL_STOP_BOUND); calls still running then
    /// are answered `Unavailable`), fails its own pending calls, sends an orderly CLOSE on
    /// every ready connection, closes every socket and monitor, stops every timer, and waits
    /// for the I/O thread to exit. When this returns, nothing of the node is running.
    /// Fails with [`NodeStopped`] only if the I/O thread, or the wait for it, ended in a
    /// panic; on a node that stopped already it returns at once.
    pub async fn shutdown(&self) -> Result<(), NodeStopped> {
        // Automatic mode: the descriptor goes first (bounded), so peers stop dialling a node
        // that is leaving; its connections are closed in order below.
        let agent = self.inner.discovery.lock().ok().and_then(|mut d| d.take());
        if let Some(agent) = agent {
            agent.stop().await;
        }
        // The allow_dir watcher stops (it would only find the I/O thread gone).
        drop(
            self.inner
                .allow_watch
                .lock()
                .ok()
                .and_then(|mut w| w.take()),
        );
        let _ = self.ask(Command::Shutdown).await;
        let handle = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            tokio::task::spawn_blocking(move || h.join())
                .await
                .map_err(|_| NodeStopped)?
                .map_err(|_| NodeStopped)?;
        }
        Ok(())
    }

    /// Reads the allow-list again (`[security] allow` and the files of `allow_dir`) and puts
    /// it in force: new connections to the bound endpoints are checked against it
    /// at once, and admitted inbound connections whose key is no longer on it are closed
    /// (`security_failure`). `zmesh node` calls this on SIGHUP; a change of `allow_dir`'s
    /// files is picked up without it within
    /// [`ALLOW_DIR_POLL`].
    /// Reports [`SecurityEvent::AllowListLoaded`](crate::runtime::security::SecurityEvent)
    /// and returns the number of keys in force (0 in `none` mode, which has no allow-list).
    /// A directory or file that cannot be read leaves the previous list in force and is the
    /// error ([`AllowListError::Unreadable`]); a node that stopped answers
    /// [`AllowListError::Stopped`].
    pub async fn reload_allow_list(&self) -> Result<usize, AllowListError> {
        if self.inner.security.mode == SecurityMode::None {
            return Ok(0);
        }
        let cfg = self.inner.security.clone();
        let loaded = tokio::task::spawn_blocking(move || load_allow_list(&cfg))
            .await
            .map_err(|_| AllowListError::Stopped)?;
        let (loaded, error) = match loaded {
            Ok(keys) => (Ok(keys), None),
            Err(e) => (Err(e.to_string()), Some(e)),
        };
        let applied = self
            .ask(|reply| Command::AllowList {
                loaded,
                trigger: "reload",
                reply: Some(reply),
            })
            .await
            .ok_or(AllowListError::Stopped)?;
        match (applied, error) {
            (Ok(n), _) => Ok(n),
            (Err(_), Some(e)) => Err(AllowListError::Unreadable(e)),
            (Err(_), None) => Err(AllowListError::Stopped),
        }
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

/// What the I/O thread starts with of `[security]`: the key pair (CURVE) and the
/// allow-list, both read now; `none` mode is said loudly, since nothing is authenticated.
fn security_init(config: &NodeConfig) -> Result<SecurityInit, NodeError> {
    let s = &config.security;
    let Some(path) = s
        .secret_key_file
        .as_ref()
        .filter(|_| s.mode == SecurityMode::Curve)
    else {
        tracing::warn!(
            rid = %config.rid,
            "security mode \"none\": peers are not authenticated and traffic is not \
             encrypted; anyone who reaches this node's endpoints can claim any identity"
        );
        return Ok(SecurityInit {
            curve: None,
            allow: BTreeSet::new(),
        });
    };
    if !curve_available() {
        return Err(NodeError::Invalid(
            "security mode \"curve\": the linked libzmq has no CURVE".into(),
        ));
    }
    let pair = KeyPair::read(path)?;
    if let Some(claimed) = &config.security_identity {
        if *claimed != pair.public.to_z85() {
            return Err(NodeError::Config(ConfigError::Invalid(format!(
                "security_identity {claimed:?}: under CURVE this node's security identity is \
                 its public key {}; leave security_identity out",
                pair.public
            ))));
        }
    }
    let allow = load_allow_list(s)?;
    tracing::info!(
        rid = %config.rid,
        public_key = %pair.public,
        allowed = allow.len(),
        "security mode \"curve\""
    );
    Ok(SecurityInit {
        curve: Some(pair),
        allow,
    })
}

/// Starts the thread that looks at `allow_dir` every [`ALLOW_DIR_POLL`] and hands the I/O
/// thread the allow-list whenever what the files say changed (or stopped being readable).
/// It stops when the returned sender is dropped, or when the node is gone.
fn spawn_allow_watch(
    node: Weak<Inner>,
    cfg: SecurityConfig,
    initial: BTreeSet<PublicKey>,
) -> std::io::Result<crossbeam_channel::Sender<()>> {
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    let mut last: Result<BTreeSet<PublicKey>, String> = Ok(initial);
    std::thread::Builder::new()
        .name("zmesh-allow-dir".into())
        .spawn(move || {
            // A poll interval, not a synchronisation: the directory has no change signal here.
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(ALLOW_DIR_POLL)
            {
                let now = load_allow_list(&cfg).map_err(|e| e.to_string());
                if now == last {
                    continue;
                }
                last = now.clone();
                let sent = node.upgrade().is_some_and(|inner| {
                    Node { inner }.command(Command::AllowList {
                        loaded: now,
                        trigger: "change",
                        reply: None,
                    })
                });
                if !sent {
                    break;
                }
            }
        })?;
    Ok(stop)
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

/// Where a one-way record goes.
#[derive(Clone, Copy)]
enum To<'a> {
    /// A RouteMesh peer or a ClientServer client of this node, by RID.
    Peer(&'a str),
    /// One ready ClientServer server of the record's channel.
    Server,
}

/// A one-way record's channel travels as a 1..=255-byte name.
fn check_channel(channel: &str) -> Result<(), SendError> {
    if !Name::fits(channel.len()) {
        return Err(SendError::Invalid("channel must be 1..=255 bytes".into()));
    }
    Ok(())
}

/// Channel and method names travel as 1..=255-byte strings.
fn check_names(channel: &str, method: &str, opts: &CallOptions) -> Result<(), CallError> {
    let key = opts.idempotency_key.as_deref();
    for (what, v) in [
        ("channel", Some(channel)),
        ("method", Some(method)),
        ("idempotency key", key),
    ] {
        if v.is_some_and(|v| !Name::fits(v.len())) {
            return Err(CallError::InvalidArgument {
                reason: format!("{what} must be 1..=255 bytes"),
            });
        }
    }
    Ok(())
}

/// A dropped or cancelled call reaches the I/O thread as [`Command::CancelCall`].
impl CallPort for Inner {
    fn cancel_call(&self, token: u64) {
        self.command(Command::CancelCall(token));
    }

    fn grant_items(&self, token: u64, items: u64) {
        self.command(Command::GrantItems { token, items });
    }
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
/// Refuses a descriptor that would publish an endpoint only this host can dial (loopback,
/// wildcard, ipc) to a store that other hosts read (MISSION H1), saying which endpoint, why,
/// and what to set.
fn check_advertised(
    d: &crate::config::DiscoveryConfig,
    descriptor: &crate::proto::discovery::Descriptor,
) -> Result<(), NodeError> {
    let shared = crate::config::StoreUrl::parse(&d.store).is_ok_and(|u| u.is_shared_across_hosts());
    let local = descriptor.host_local_endpoints();
    let Some((what, endpoint, why)) = local.first().filter(|_| shared) else {
        return Ok(());
    };
    Err(NodeError::Config(crate::config::ConfigError::Invalid(
        format!(
            "discovery: this node would publish its {what} endpoint {endpoint}, {why}, to \
             {}, which other hosts read, and they cannot dial it: bind it on an address \
             they reach, or name that address in [discovery.advertise] (host, or \
             route_mesh / server / publisher)",
            d.store
        ),
    )))
}

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
