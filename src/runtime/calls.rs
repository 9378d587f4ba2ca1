//! Calls on the application side: what a caller passes and gets back, and what a handler
//! receives and answers (MISSION C1-C6).
//!
//! Arguments and results travel as MessagePack (rmp-serde) inside the REQUEST and REPLY
//! payload frames; the envelope around them is WIRE.md's fixed binary layout.
//!
//! A call is a lease on the physical connection that carried it: from the callee's ACCEPT on,
//! it fails the moment that connection leaves ready, with an error that says the call *may
//! have run*. No call needs a timeout to finish; a deadline ([`CallOptions::ttl`]) is
//! optional and travels as a duration.
//!
//! A call may also answer with a **stream**: items first, in order, then the one terminal
//! answer ([`CallStream`] on the caller's side, [`ItemSink`] in the handler of a channel
//! served with [`crate::runtime::Node::serve_stream`]). A service that stops while producing
//! a stream ends it at once with [`CallError::Unavailable`] `{ accepted: true }` (MISSION C4).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

pub use crate::proto::calls::{may_have_run, CallError, Phase, RemoteCode};
use crate::proto::calls::{ServeId, CREDIT_STEP, STREAM_WINDOW};
pub use crate::proto::contract::Semantics;

/// Options of one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// How long the caller waits. `None` (or zero) means no deadline at all: no local timer
    /// and no ttl on the wire (MISSION C6).
    pub ttl: Option<Duration>,
    /// Call this RouteMesh peer (by RID) rather than any ready server of the channel.
    pub peer: Option<String>,
    /// The semantics the caller was built against (MISSION K1), carried in the REQUEST: a
    /// server whose method is now more dangerous to repeat (query < idempotent command <
    /// non-repeatable command < undeclared) answers `IncompatibleVersion` instead of running
    /// it. `None` pins nothing. The operations registry shows it too.
    pub semantics: Option<Semantics>,
    /// The caller's idempotency key (MISSION K3): it names the operator's intent, so a retry
    /// of the same intent with the same key is answered from the server's record of the first
    /// run instead of running a non-repeatable command again. Mint one per intent and keep it
    /// for the retries (never derive it from the value written). 1..=255 bytes; travels in the
    /// REQUEST, scoped by the server to channel + method.
    pub idempotency_key: Option<String>,
}

impl CallOptions {
    /// Options with a deadline.
    pub fn with_ttl(ttl: Duration) -> CallOptions {
        CallOptions {
            ttl: Some(ttl),
            ..CallOptions::default()
        }
    }

    /// These options with the caller's pinned semantics (see [`CallOptions::semantics`]).
    pub fn semantics(mut self, semantics: Semantics) -> CallOptions {
        self.semantics = Some(semantics);
        self
    }

    /// These options with an idempotency key (see [`CallOptions::idempotency_key`]).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> CallOptions {
        self.idempotency_key = Some(key.into());
        self
    }

    /// These options calling RouteMesh peer `rid` (see [`CallOptions::peer`]).
    pub fn peer(mut self, rid: impl Into<String>) -> CallOptions {
        self.peer = Some(rid.into());
        self
    }
}

/// A call as a handler sees it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The channel called.
    pub channel: String,
    /// The method called.
    pub method: String,
    /// The caller's RID.
    pub caller: String,
    caller_generation: u64,
    call_id: u64,
    idempotency_key: Option<String>,
    /// When the caller stops waiting, on this node's monotonic clock: the REQUEST's arrival
    /// plus its `ttl_ms`. `None`: no deadline.
    deadline: Option<Instant>,
    args: Bytes,
    gone: CallerGone,
}

impl Request {
    pub(crate) fn new(channel: String, method: String, caller: String, args: Bytes) -> Request {
        Request {
            channel,
            method,
            caller,
            caller_generation: 0,
            call_id: 0,
            idempotency_key: None,
            deadline: None,
            args,
            gone: CallerGone::default(),
        }
    }

    /// The signal the I/O thread sets when the caller no longer waits for this call.
    pub(crate) fn caller_gone(&self) -> CallerGone {
        self.gone.clone()
    }

    /// True once the caller no longer waits for this call: the connection its answer would
    /// travel on left ready, so nothing the handler returns reaches anyone. A handler with
    /// work left may stop early; what it already did stays done.
    pub fn is_cancelled(&self) -> bool {
        self.gone.is_set()
    }

    /// Resolves once the caller no longer waits for this call (see
    /// [`Request::is_cancelled`]); never, if the call is answered first. A query handler
    /// need not watch it: its task is dropped at its next `.await` when its caller is gone.
    /// A command's handler (or an undeclared method's) is never stopped by the runtime and
    /// decides here itself whether to finish or to stop.
    pub async fn cancelled(&self) {
        self.gone.wait().await;
    }

    /// This request with who made it: the caller's lifecycle generation, its call id and its
    /// idempotency key (together the request's identity, MISSION K3).
    pub(crate) fn with_identity(
        mut self,
        caller_generation: u64,
        call_id: u64,
        idempotency_key: Option<String>,
    ) -> Request {
        self.caller_generation = caller_generation;
        self.call_id = call_id;
        self.idempotency_key = idempotency_key;
        self
    }

    /// This request with the caller's deadline: `ttl` (the REQUEST's `ttl_ms`; `None`: no
    /// deadline) measured from `arrival`, the instant the REQUEST arrived on this node's
    /// monotonic clock (WIRE.md §4.7).
    pub(crate) fn with_ttl(mut self, arrival: Instant, ttl: Option<Duration>) -> Request {
        self.deadline = ttl.and_then(|ttl| arrival.checked_add(ttl));
        self
    }

    /// How long the caller still waits for this call: its ttl as the REQUEST carried it,
    /// less the time since the REQUEST arrived, on this node's monotonic clock (zero once it
    /// passed). `None`: the caller set no deadline. The ttl on the wire is already shorter
    /// than the caller's own by a margin (250 ms, at most half of it: WIRE.md §5.3), so an
    /// answer sent before this runs out reaches a caller that still waits, as long as the
    /// way back is shorter than the margin.
    pub fn ttl_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The caller's lifecycle generation (a new process run of the caller has a new one).
    pub fn caller_generation(&self) -> u64 {
        self.caller_generation
    }

    /// The caller's id of this call (unique among its pending calls on its connection).
    pub fn call_id(&self) -> u64 {
        self.call_id
    }

    /// The caller's idempotency key, if it gave one.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// The arguments, decoded from MessagePack. A mismatch answers `InvalidParams`.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, ServeError> {
        rmp_serde::from_slice(&self.args)
            .map_err(|e| ServeError::new(RemoteCode::InvalidParams, e.to_string()))
    }

    /// The raw argument bytes.
    pub fn raw_args(&self) -> &Bytes {
        &self.args
    }
}

/// The signal that a call's caller no longer waits: set once by the I/O thread, read by the
/// handler through [`Request::is_cancelled`] and [`Request::cancelled`]. Clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallerGone(Arc<GoneState>);

#[derive(Debug, Default)]
struct GoneState {
    set: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl CallerGone {
    /// Sets the signal and wakes every waiter (only the first call has an effect).
    pub(crate) fn set(&self) {
        self.0.set.store(true, std::sync::atomic::Ordering::Release);
        self.0.notify.notify_waiters();
    }

    /// True once set.
    pub(crate) fn is_set(&self) -> bool {
        self.0.set.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves once set. The waiter registers before it reads the flag, so a `set` between
    /// the two is not missed.
    async fn wait(&self) {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

/// A handler's failure, sent to the caller as a REPLY code and message.
///
/// A handler chooses its code from the allow-list of MISSION K6
/// ([`RemoteCode::handler_may_choose`]): `Exception`, `Unauthorized`, `Forbidden`,
/// `InvalidParams`, `IncompatibleVersion`, `ClassNotFound`, `MethodNotFound`,
/// `TransportError`, `Timeout`, `UnknownOutcome`. Any other code (`Busy`, `Superseded`,
/// `NotFound`, `Unavailable`: the runtime's own) is sent as `Exception`, however the error
/// was built. `UnknownOutcome` is the honest answer of a gateway whose own downstream call was
/// lost: it may have run, and inventing a result or a plain `Exception` would claim more than
/// is known:
///
/// ```
/// use zmesh::runtime::calls::{RemoteCode, ServeError};
///
/// let lost = ServeError::new(RemoteCode::UnknownOutcome, "the drive did not answer");
/// assert_eq!(lost.code, RemoteCode::UnknownOutcome);
/// // Busy is the runtime's (a full mailbox): a handler that picks it answers Exception.
/// assert_eq!(ServeError::new(RemoteCode::Busy, "x").code, RemoteCode::Exception);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ServeError {
    /// The code (see the allow-list above).
    pub code: RemoteCode,
    /// A human-readable message.
    pub message: String,
}

impl ServeError {
    /// An error with a chosen code from the allow-list (MISSION K6); a code outside it
    /// becomes `Exception`, the message kept.
    pub fn new(code: RemoteCode, message: impl Into<String>) -> ServeError {
        ServeError {
            code: handler_code(code),
            message: message.into(),
        }
    }

    /// An error with any code, for the runtime's own answers to a handler (e.g. an item
    /// refused because the service stopped: `Unavailable`).
    pub(crate) fn runtime(code: RemoteCode, message: impl Into<String>) -> ServeError {
        ServeError {
            code,
            message: message.into(),
        }
    }

    /// The REPLY code a handler's error travels as: its code if on the allow-list (MISSION
    /// K6), else `Exception` (a `ServeError` built field by field can carry any code).
    pub(crate) fn wire_code(&self) -> RemoteCode {
        handler_code(self.code)
    }

    /// The method failed (`Exception`: may have run).
    pub fn exception(message: impl Into<String>) -> ServeError {
        ServeError::new(RemoteCode::Exception, message)
    }

    /// No such method on this channel (`MethodNotFound`: did not run).
    pub fn method_not_found(method: &str) -> ServeError {
        ServeError::new(RemoteCode::MethodNotFound, format!("no method {method:?}"))
    }
}

/// `code` if a handler may choose it (the allow-list of [`ServeError`], MISSION K6), else
/// `Exception`.
fn handler_code(code: RemoteCode) -> RemoteCode {
    if code.handler_may_choose() {
        code
    } else {
        RemoteCode::Exception
    }
}

/// Encodes a handler's result (or a stream item) as MessagePack, for the callee's answer.
///
/// A value that does not encode is the handler's failure, reported after it ran: the error
/// is `Exception` (may have run), never `InvalidParams` (which says "did not run"). A caller
/// encodes its arguments with [`encode_args`] instead.
///
/// ```
/// use zmesh::runtime::calls::{encode, RemoteCode};
/// use serde::ser::{Error, Serialize, Serializer};
///
/// struct Unencodable;
/// impl Serialize for Unencodable {
///     fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
///         Err(S::Error::custom("no byte form"))
///     }
/// }
/// assert_eq!(encode(&Unencodable).unwrap_err().code, RemoteCode::Exception);
/// ```
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, ServeError> {
    rmp_serde::to_vec_named(value)
        .map(Bytes::from)
        .map_err(|e| {
            ServeError::new(
                RemoteCode::Exception,
                format!("the result does not encode: {e}"),
            )
        })
}

/// Encodes a caller's arguments as MessagePack, for [`crate::runtime::Node::call_raw`] and
/// [`crate::runtime::Node::call_stream_raw`] (the typed [`crate::runtime::Node::call`] does
/// it itself).
///
/// Arguments that do not encode are [`CallError::InvalidArgument`]: the call was never
/// built, so it certainly did not run.
pub fn encode_args<T: Serialize + ?Sized>(args: &T) -> Result<Bytes, CallError> {
    rmp_serde::to_vec_named(args)
        .map(Bytes::from)
        .map_err(|e| CallError::InvalidArgument {
            reason: format!("the arguments do not encode: {e}"),
        })
}

/// Decodes a call's result (or one stream item) from MessagePack, at the caller.
///
/// An answer that does not decode as `T` is [`CallError::UndecodableResult`]: the callee ran
/// the call and answered, so the error says it may have run.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CallError> {
    rmp_serde::from_slice(bytes).map_err(|e| CallError::UndecodableResult {
        reason: e.to_string(),
    })
}

/// How many items of one stream the caller's node holds for the application (see
/// [`CallStream`]): a callee that negotiated `credit` never sends more than the application
/// has room for (WIRE.md §4.15: the stream window); from one that did not, an item that
/// finds the buffer full ends the stream as [`CallError::StreamOverrun`]. A bound on the
/// memory a consumer that stopped reading can pin.
pub const STREAM_BUFFER: usize = STREAM_WINDOW as usize;

/// The future a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Bytes, ServeError>> + Send>>;

/// A channel's handler: called once per accepted call, on the tokio runtime.
pub type Handler = Arc<dyn Fn(Request) -> HandlerFuture + Send + Sync>;

/// What the I/O thread tells a [`CallStream`]: items in order, then exactly one end.
pub(crate) enum StreamEvent {
    /// The next item.
    Item(Bytes),
    /// The terminal answer (the REPLY, or how the call failed).
    End(Result<Bytes, CallError>),
}

/// A streaming call in progress, from [`crate::runtime::Node::call_stream`].
///
/// The callee's items arrive in order ([`CallStream::next_item`]), then the call ends exactly
/// once ([`CallStream::finish`]): with the callee's final result, or with the [`CallError`]
/// that ended it (its connection left ready: `OutcomeUnknown`; the callee stopped while
/// producing: `Unavailable { accepted: true }`; a broken sequence: `ItemOutOfOrder`; or any
/// failure a unary call can have). Like a unary call, a stream needs no timeout: it is a
/// lease on the connection that accepted it (MISSION C2).
///
/// Items wait in a buffer of [`STREAM_BUFFER`] until taken. A callee that negotiated
/// `credit` (WIRE.md §4.15) sends only as far as the buffer has room, so a slow application
/// slows the callee's handler down (its sends wait) and nothing is lost. From a callee that
/// did not (a version-1 peer), a stream whose application does not keep up (the buffer is
/// full when an item arrives) ends at once as [`CallError::StreamOverrun`]: the items
/// buffered can still be taken, the call is cancelled at the callee, and no item is dropped
/// silently. Dropping the stream before its end, or
/// [`CallStream::cancel`], cancels the call as dropping a [`PendingCall`] does: it ends as
/// [`CallError::Cancelled`], and a callee that speaks CANCEL stops producing (its handler is
/// signalled; a query's is stopped).
#[derive(Debug)]
pub struct CallStream {
    rx: Option<mpsc::Receiver<StreamEvent>>,
    end: Option<Result<Bytes, CallError>>,
    items: u64,
    /// Items taken since the callee was last granted more.
    ungranted: u64,
    control: Option<CallControl>,
}

impl std::fmt::Debug for StreamEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamEvent::Item(b) => f.debug_tuple("Item").field(&b.len()).finish(),
            StreamEvent::End(r) => f.debug_tuple("End").field(r).finish(),
        }
    }
}

impl CallStream {
    /// A stream fed by the I/O thread through `rx`, cancelled and granted through `control`.
    pub(crate) fn new(rx: mpsc::Receiver<StreamEvent>, control: CallControl) -> CallStream {
        CallStream {
            rx: Some(rx),
            end: None,
            items: 0,
            ungranted: 0,
            control: Some(control),
        }
    }

    /// A stream that ended before it started (the call could not be made).
    pub(crate) fn failed(err: CallError) -> CallStream {
        CallStream {
            rx: None,
            end: Some(Err(err)),
            items: 0,
            ungranted: 0,
            control: None,
        }
    }

    /// Stops waiting for the stream: [`CallStream::next_item`] still returns the items that
    /// had arrived, then the stream ends as [`CallError::Cancelled`] (unless its end had
    /// already arrived, which then wins).
    /// See the type docs for what the callee hears.
    pub fn cancel(&mut self) {
        if let Some(c) = self.control.as_mut() {
            c.cancel();
        }
    }

    /// The next item, in the callee's order; `None` once the stream has ended (then
    /// [`CallStream::finish`] gives the terminal answer at once).
    pub async fn next_item(&mut self) -> Option<Bytes> {
        if self.end.is_some() {
            return None;
        }
        let event = match self.rx.as_mut() {
            Some(rx) => rx.recv().await,
            None => None,
        };
        match event {
            Some(StreamEvent::Item(item)) => {
                self.items += 1;
                // A callee with a window (WIRE.md §4.15) sends on as the application takes.
                self.ungranted += 1;
                if self.ungranted >= CREDIT_STEP {
                    self.ungranted = 0;
                    if let Some(c) = self.control.as_ref() {
                        c.grant(CREDIT_STEP);
                    }
                }
                Some(item)
            }
            Some(StreamEvent::End(result)) => {
                self.end = Some(result);
                self.rx = None;
                if let Some(c) = self.control.as_mut() {
                    c.disarm();
                }
                None
            }
            None => {
                // The I/O thread vanished without an answer: the call may have left.
                self.end = Some(Err(CallError::Shutdown { sent: true }));
                self.rx = None;
                None
            }
        }
    }

    /// The next item decoded from MessagePack; `None` once the stream has ended. An item
    /// that does not decode is [`CallError::UndecodableResult`] for that item only (the
    /// callee ran the call and sent it); the stream goes on.
    pub async fn next_item_as<T: DeserializeOwned>(&mut self) -> Option<Result<T, CallError>> {
        let item = self.next_item().await?;
        Some(decode(&item))
    }

    /// How many items [`CallStream::next_item`] has returned so far.
    pub fn items_received(&self) -> u64 {
        self.items
    }

    /// Whether the stream has ended (its terminal answer is known).
    pub fn is_ended(&self) -> bool {
        self.end.is_some()
    }

    /// Waits for the end of the call and returns its terminal answer: the callee's final
    /// result, or the error that ended the call. Items not taken yet are discarded.
    pub async fn finish(mut self) -> Result<Bytes, CallError> {
        loop {
            if let Some(result) = self.end.take() {
                return result;
            }
            let _ = self.next_item().await;
        }
    }

    /// [`CallStream::finish`], with the final result decoded from MessagePack: one that does
    /// not decode is [`CallError::UndecodableResult`] (the call ran and answered).
    pub async fn finish_as<R: DeserializeOwned>(self) -> Result<R, CallError> {
        let bytes = self.finish().await?;
        decode(&bytes)
    }
}

/// How a call's cancel and a stream's grants reach its node without keeping it alive (the
/// node implements it).
pub(crate) trait CallPort: Send + Sync {
    /// The application stopped waiting for the call it named `token`.
    fn cancel_call(&self, token: u64);
    /// The application took `items` more items of the stream it named `token`: the callee
    /// may send that many more (WIRE.md §4.15).
    fn grant_items(&self, token: u64, items: u64);
}

/// The application's hold on one call: it cancels the call when told to or when dropped,
/// unless the call ended first (what makes dropping a [`PendingCall`] or a [`CallStream`]
/// tell the node, and through it the callee, that nobody waits any more), and it grants a
/// stream the items its application took.
pub(crate) struct CallControl {
    token: u64,
    port: Weak<dyn CallPort>,
    armed: bool,
}

impl CallControl {
    /// The control of the call named `token` at `port`.
    pub(crate) fn new(token: u64, port: Weak<dyn CallPort>) -> CallControl {
        CallControl {
            token,
            port,
            armed: true,
        }
    }

    /// Cancels the call (once; nothing if it ended or was cancelled already).
    fn cancel(&mut self) {
        if std::mem::take(&mut self.armed) {
            if let Some(port) = self.port.upgrade() {
                port.cancel_call(self.token);
            }
        }
    }

    /// The call ended: nothing to cancel any more.
    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Grants the stream `items` more items (nothing once it ended or was cancelled).
    fn grant(&self, items: u64) {
        if self.armed {
            if let Some(port) = self.port.upgrade() {
                port.grant_items(self.token, items);
            }
        }
    }
}

impl Drop for CallControl {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl std::fmt::Debug for CallControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallControl")
            .field("token", &self.token)
            .field("armed", &self.armed)
            .finish()
    }
}

/// A unary call's answer as [`PendingCall::answer`] gives it: its result, and whether the
/// callee replayed it.
///
/// A callee with a durable idempotency store answers a retry of a non-repeatable command
/// (the same idempotency key, the same arguments) with the outcome it recorded for the
/// first call instead of running the command again; where both ends speak capability
/// `replayed` its REPLY says so (WIRE.md §4.17), and [`CallAnswer::replayed`] is true. The
/// result is then the first call's, success or error alike.
#[derive(Debug)]
pub struct CallAnswer {
    result: Result<Bytes, CallError>,
    replayed: bool,
}

impl CallAnswer {
    /// An answer: the call's result, and whether the callee said it replayed it.
    pub(crate) fn new(result: Result<Bytes, CallError>, replayed: bool) -> CallAnswer {
        CallAnswer { result, replayed }
    }

    /// True when the callee answered with the recorded outcome of an earlier call with the
    /// same idempotency key: the command did not run for this call. False when it ran now,
    /// when the call failed before the callee answered, and toward a callee that does not
    /// speak `replayed` (a version-1 peer cannot say).
    pub fn replayed(&self) -> bool {
        self.replayed
    }

    /// The call's raw result, as [`crate::runtime::Node::call_raw`] gives it.
    pub fn result(&self) -> Result<&Bytes, &CallError> {
        self.result.as_ref()
    }

    /// The call's raw result, owned.
    pub fn into_result(self) -> Result<Bytes, CallError> {
        self.result
    }
}

/// A unary call in progress, from [`crate::runtime::Node::start_call`]: a future of its
/// result, like [`crate::runtime::Node::call_raw`], that can also be cancelled.
///
/// Cancelling it ([`PendingCall::cancel`]) or dropping it before it resolved ends the call
/// at once as [`CallError::Cancelled`]: the node forgets it, its operations row settles
/// (`failed` if the REQUEST never left, `unknown-outcome` if it had), and a callee that
/// speaks CANCEL (WIRE.md §4.13) hears that nobody waits: a call still queued there never
/// runs, and a running handler is signalled (a query's is stopped). `Cancelled { sent: true }`
/// says the call may have run. Wrapping it in `tokio::time::timeout` drops it when the time
/// is up, so a timeout cancels the same way.
#[derive(Debug)]
#[must_use = "a call is cancelled when its PendingCall is dropped"]
pub struct PendingCall {
    rx: Option<oneshot::Receiver<CallAnswer>>,
    early: Option<CallError>,
    control: Option<CallControl>,
}

impl PendingCall {
    /// A call handed to the I/O thread, answered through `rx`, cancelled and granted through `control`.
    pub(crate) fn new(rx: oneshot::Receiver<CallAnswer>, control: CallControl) -> PendingCall {
        PendingCall {
            rx: Some(rx),
            early: None,
            control: Some(control),
        }
    }

    /// A call that failed before it was made.
    pub(crate) fn failed(err: CallError) -> PendingCall {
        PendingCall {
            rx: None,
            early: Some(err),
            control: None,
        }
    }

    /// Stops waiting for the call: awaiting it then gives [`CallError::Cancelled`] (unless its
    /// answer had already arrived, which then wins). See the type docs for what the callee
    /// hears.
    pub fn cancel(&mut self) {
        if let Some(c) = self.control.as_mut() {
            c.cancel();
        }
    }

    /// Waits for the call's answer with what the callee said of it: its result and whether
    /// it was replayed from the callee's idempotency record ([`CallAnswer::replayed`]).
    /// Awaiting the `PendingCall` itself gives the result alone.
    pub async fn answer(mut self) -> CallAnswer {
        std::future::poll_fn(|cx| self.poll_answer(cx)).await
    }

    fn poll_answer(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<CallAnswer> {
        use std::task::Poll;
        if let Some(err) = self.early.take() {
            return Poll::Ready(CallAnswer::new(Err(err), false));
        }
        let Some(rx) = self.rx.as_mut() else {
            // Polled after it resolved: nothing more will come.
            return Poll::Ready(CallAnswer::new(
                Err(CallError::Shutdown { sent: true }),
                false,
            ));
        };
        match Pin::new(rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(answer) => {
                self.rx = None;
                if let Some(c) = self.control.as_mut() {
                    c.disarm();
                }
                // The I/O thread answers every call exactly once; if it vanished without
                // answering, the call may have left.
                Poll::Ready(answer.unwrap_or_else(|_| {
                    CallAnswer::new(Err(CallError::Shutdown { sent: true }), false)
                }))
            }
        }
    }
}

impl Future for PendingCall {
    type Output = Result<Bytes, CallError>;

    fn poll(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Bytes, CallError>> {
        self.get_mut().poll_answer(cx).map(CallAnswer::into_result)
    }
}

/// How an [`ItemSink`] reaches its node without keeping it alive (the node implements it).
pub(crate) trait ItemPort: Send + Sync {
    /// Hands item `payload` of call `id` to the node; the receiver answers once the node has
    /// handed it to the transport (or refused it). `None` once the node is gone.
    fn send_item(
        &self,
        id: ServeId,
        payload: Bytes,
    ) -> Option<oneshot::Receiver<Result<(), ServeError>>>;
}

/// Where a stream handler sends its items (see [`crate::runtime::Node::serve_stream`] and
/// [`crate::runtime::service::Service::stream_method`]).
///
/// Each item is numbered by the node and sent as one ITEM, in the order the sends complete,
/// on the connection the call's REPLY will take. Cheap to clone; a clone sends into the same
/// call. It does not keep the node alive.
#[derive(Clone)]
pub struct ItemSink {
    id: ServeId,
    port: Weak<dyn ItemPort>,
}

impl std::fmt::Debug for ItemSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemSink").field("call", &self.id).finish()
    }
}

impl ItemSink {
    /// A sink for call `id` of the node behind `port`.
    pub(crate) fn new(id: ServeId, port: Weak<dyn ItemPort>) -> ItemSink {
        ItemSink { id, port }
    }

    /// Sends one item; returns once the node has handed it to the transport.
    ///
    /// An error means the stream is over and the handler should stop (returning the error
    /// with `?` is fine: the call already has its answer, so the handler's result is
    /// dropped): code `Unavailable` when the service is stopping (the caller was told
    /// `Unavailable`), the caller's connection is gone, the call already ended or the node
    /// stopped; code `UnknownOutcome` when the link could not take the item now (a frame is
    /// never queued, MISSION C3), in which case the node ended the call with that code.
    pub async fn send(&self, payload: impl Into<Bytes>) -> Result<(), ServeError> {
        let closed = || ServeError::runtime(RemoteCode::Unavailable, "the node stopped");
        let rx = self
            .port
            .upgrade()
            .and_then(|port| port.send_item(self.id, payload.into()));
        match rx {
            Some(rx) => rx.await.unwrap_or_else(|_| Err(closed())),
            None => Err(closed()),
        }
    }

    /// Sends one item encoded as MessagePack; see [`ItemSink::send`]. An item that does not
    /// encode is not sent and is an `Exception` error ([`encode`]): returned with `?`, it
    /// answers the call `Exception` (it ran).
    pub async fn send_item<T: Serialize + ?Sized>(&self, item: &T) -> Result<(), ServeError> {
        self.send(encode(item)?).await
    }
}
