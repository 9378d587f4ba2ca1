//! Typed services (MISSION A1): what [`macro@crate::service`] generates calls, and what its
//! users see of it: the [`Call`] a typed client's method returns and the request
//! [`Context`] a method may take; [`Call::answer`] gives a result with whether it was
//! replayed ([`Answered`]).
//!
//! A method that takes an [`Items`] argument streams its answer: the client's method returns a
//! [`StreamCall`], read as an [`ItemStream`] ([`Node::call_stream_raw`] underneath).
//!
//! A typed client's call is [`Node::call_raw`] underneath: the arguments are encoded as
//! MessagePack (none: `nil`; one argument: the value itself; several: an array of them, in
//! order), the method's declared semantics travel in the REQUEST as the caller's pin
//! ([`CallOptions::semantics`]), and the result is decoded from MessagePack (one that does not
//! decode is [`CallError::UndecodableResult`]: the call ran). A result that the service cannot
//! encode is answered `Exception` (it ran). A service built with the builder API
//! ([`crate::runtime::service`]) that decodes the same values answers a typed client, and the
//! other way round.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::proto::contract::{self, CheckReport, ContractError, NodeContract, ServiceContract};
use crate::runtime::calls::{
    self as rcalls, CallError, CallOptions, CallStream, ItemSink, Request, Semantics, ServeError,
};
use crate::runtime::Node;

/// One call of a typed client, not made yet: set its options, then `.await` it for the
/// method's result.
///
/// ```no_run
/// # #[zmesh::service(channel = "pump")]
/// # trait Pump { #[non_repeatable] async fn dispense(&self, litres: u32) -> String; }
/// # async fn demo(pump: PumpClient) -> Result<(), zmesh::runtime::calls::CallError> {
/// use std::time::Duration;
///
/// let receipt = pump
///     .dispense(5)
///     .idempotency_key("order-1182") // a retry of this intent is answered, not run again
///     .ttl(Duration::from_secs(2))
///     .await?;
/// # let _ = receipt;
/// # Ok(())
/// # }
/// ```
#[must_use = "a call is made when it is awaited"]
pub struct Call<R> {
    node: Node,
    channel: &'static str,
    method: &'static str,
    args: Result<Bytes, CallError>,
    opts: CallOptions,
    result: PhantomData<fn() -> R>,
}

impl<R> std::fmt::Debug for Call<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("channel", &self.channel)
            .field("method", &self.method)
            .field("opts", &self.opts)
            .finish()
    }
}

impl<R> Call<R> {
    /// A call of `channel`.`method` through `node`, pinned to `semantics`, with `args`
    /// already encoded (or the reason they could not be). Generated code only.
    #[doc(hidden)]
    pub fn __new(
        node: &Node,
        channel: &'static str,
        method: &'static str,
        semantics: Option<Semantics>,
        peer: Option<String>,
        args: Result<Bytes, CallError>,
    ) -> Call<R> {
        Call {
            node: node.clone(),
            channel,
            method,
            args,
            opts: CallOptions {
                semantics,
                peer,
                ..CallOptions::default()
            },
            result: PhantomData,
        }
    }

    /// The caller's idempotency key for this call (see [`CallOptions::idempotency_key`]):
    /// mint one per intent and give the same one to every retry of it.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Call<R> {
        self.opts.idempotency_key = Some(key.into());
        self
    }

    /// How long the caller waits (see [`CallOptions::ttl`]); zero means no deadline.
    pub fn ttl(mut self, ttl: Duration) -> Call<R> {
        self.opts.ttl = Some(ttl);
        self
    }

    /// Calls RouteMesh peer `rid` rather than any ready server of the channel.
    pub fn peer(mut self, rid: impl Into<String>) -> Call<R> {
        self.opts.peer = Some(rid.into());
        self
    }

    /// The options the call will be made with (the pinned semantics among them).
    pub fn options(&self) -> &CallOptions {
        &self.opts
    }
}

impl<R: DeserializeOwned> Call<R> {
    /// Makes the call and waits for its answer with what the callee said of it: the typed
    /// result, and whether the callee answered from its idempotency record instead of
    /// running the method ([`Answered::replayed`], WIRE.md §4.17). Awaiting the call itself
    /// gives the result alone.
    pub async fn answer(self) -> Answered<R> {
        let args = match self.args {
            Ok(args) => args,
            Err(e) => {
                return Answered {
                    result: Err(e),
                    replayed: false,
                }
            }
        };
        let answer = self
            .node
            .start_call(self.channel, self.method, args, self.opts)
            .answer()
            .await;
        let replayed = answer.replayed();
        Answered {
            result: answer
                .into_result()
                .and_then(|bytes| rcalls::decode(&bytes)),
            replayed,
        }
    }
}

/// A typed call's answer from [`Call::answer`]: its result and whether it was replayed.
#[derive(Debug)]
pub struct Answered<R> {
    result: Result<R, CallError>,
    replayed: bool,
}

impl<R> Answered<R> {
    /// True when the callee answered with the recorded outcome of an earlier call with the
    /// same idempotency key: the method did not run for this call. False when it ran now,
    /// when the call failed before the callee answered, and toward a callee that does not
    /// speak `replayed` (see [`crate::runtime::calls::CallAnswer::replayed`]).
    pub fn replayed(&self) -> bool {
        self.replayed
    }

    /// The call's typed result.
    pub fn result(&self) -> Result<&R, &CallError> {
        self.result.as_ref()
    }

    /// The call's typed result, owned.
    pub fn into_result(self) -> Result<R, CallError> {
        self.result
    }
}

impl<R: DeserializeOwned + Send + 'static> IntoFuture for Call<R> {
    type Output = Result<R, CallError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<R, CallError>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let args = self.args?;
            let bytes = self
                .node
                .call_raw(self.channel, self.method, args, self.opts)
                .await?;
            rcalls::decode(&bytes)
        })
    }
}

/// Where a streaming method sends its items: a service method that takes an argument of
/// type `Items<T>` answers with a stream (its items, in order, then its result), which the
/// typed client reads as an [`ItemStream`]. Cheap to clone; a clone sends into the same call.
pub struct Items<T> {
    sink: ItemSink,
    item: PhantomData<fn(T)>,
}

impl<T> Clone for Items<T> {
    fn clone(&self) -> Self {
        Items {
            sink: self.sink.clone(),
            item: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Items<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Items").field(&self.sink).finish()
    }
}

impl<T: Serialize> Items<T> {
    /// The items of the call behind `sink`. Generated code only.
    #[doc(hidden)]
    pub fn __new(sink: ItemSink) -> Items<T> {
        Items {
            sink,
            item: PhantomData,
        }
    }

    /// Sends one item; returns once the node has handed it to the transport. An error means
    /// the stream is over (see [`ItemSink::send`]): stop, returning it with `?` is fine.
    pub async fn send(&self, item: &T) -> Result<(), ServeError> {
        self.sink.send_item(item).await
    }
}

/// One call of a typed client's streaming method, not made yet: set its options, then
/// `.await` it (or [`StreamCall::start`] it) for the [`ItemStream`] of its answer.
#[must_use = "a call is made when it is awaited or started"]
pub struct StreamCall<T, R> {
    call: Call<(T, R)>,
}

impl<T, R> std::fmt::Debug for StreamCall<T, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StreamCall").field(&self.call).finish()
    }
}

impl<T, R> StreamCall<T, R> {
    /// A streaming call; see [`Call::__new`]. Generated code only.
    #[doc(hidden)]
    pub fn __new(
        node: &Node,
        channel: &'static str,
        method: &'static str,
        semantics: Option<Semantics>,
        peer: Option<String>,
        args: Result<Bytes, CallError>,
    ) -> StreamCall<T, R> {
        StreamCall {
            call: Call::__new(node, channel, method, semantics, peer, args),
        }
    }

    /// See [`Call::idempotency_key`].
    pub fn idempotency_key(self, key: impl Into<String>) -> StreamCall<T, R> {
        StreamCall {
            call: self.call.idempotency_key(key),
        }
    }

    /// See [`Call::ttl`].
    pub fn ttl(self, ttl: Duration) -> StreamCall<T, R> {
        StreamCall {
            call: self.call.ttl(ttl),
        }
    }

    /// See [`Call::peer`].
    pub fn peer(self, rid: impl Into<String>) -> StreamCall<T, R> {
        StreamCall {
            call: self.call.peer(rid),
        }
    }

    /// The options the call will be made with (the pinned semantics among them).
    pub fn options(&self) -> &CallOptions {
        &self.call.opts
    }

    /// Makes the call now ([`Node::call_stream_raw`]); its items and result arrive on the
    /// stream returned.
    pub fn start(self) -> ItemStream<T, R> {
        let Call {
            node,
            channel,
            method,
            args,
            opts,
            ..
        } = self.call;
        let stream = match args {
            Ok(args) => node.call_stream_raw(channel, method, args, opts),
            Err(e) => CallStream::failed(e),
        };
        ItemStream {
            stream,
            types: PhantomData,
        }
    }
}

impl<T, R> IntoFuture for StreamCall<T, R> {
    type Output = ItemStream<T, R>;
    type IntoFuture = std::future::Ready<ItemStream<T, R>>;

    fn into_future(self) -> Self::IntoFuture {
        std::future::ready(self.start())
    }
}

/// The answer of a streaming call in progress: its items in order ([`ItemStream::next`]),
/// then its result ([`ItemStream::finish`]). Like [`CallStream`], which it decodes, it needs
/// no timeout: it is a lease on the connection that accepted it.
pub struct ItemStream<T, R> {
    stream: CallStream,
    types: PhantomData<fn() -> (T, R)>,
}

impl<T, R> std::fmt::Debug for ItemStream<T, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ItemStream").field(&self.stream).finish()
    }
}

impl<T: DeserializeOwned, R: DeserializeOwned> ItemStream<T, R> {
    /// The next item; `None` once the stream has ended ([`ItemStream::finish`] then gives
    /// the result at once). An item that does not decode is [`CallError::UndecodableResult`]
    /// for that item only (the callee ran and sent it); the stream goes on.
    pub async fn next(&mut self) -> Option<Result<T, CallError>> {
        self.stream.next_item_as().await
    }

    /// Waits for the end of the call: its result, or the error that ended it. Items not
    /// taken yet are discarded. A result that does not decode is
    /// [`CallError::UndecodableResult`] (the call ran and answered).
    pub async fn finish(self) -> Result<R, CallError> {
        self.stream.finish_as().await
    }

    /// How many items [`ItemStream::next`] has returned so far.
    pub fn items_received(&self) -> u64 {
        self.stream.items_received()
    }
}

/// The request context a service method may take (an argument of this type, anywhere after
/// `&self`): who called, under which identity, how long it still waits and whether it still
/// waits at all. It is not part of the call's arguments.
#[derive(Debug, Clone)]
pub struct Context {
    request: Request,
}

impl Context {
    /// The context of `request`. Generated code only.
    #[doc(hidden)]
    pub fn __from_request(request: &Request) -> Context {
        Context {
            request: request.clone(),
        }
    }

    /// The caller's RID.
    pub fn caller(&self) -> &str {
        &self.request.caller
    }

    /// The caller's lifecycle generation (a new process run of the caller has a new one).
    pub fn caller_generation(&self) -> u64 {
        self.request.caller_generation()
    }

    /// The caller's id of this call.
    pub fn call_id(&self) -> u64 {
        self.request.call_id()
    }

    /// The caller's idempotency key, if it gave one.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.request.idempotency_key()
    }

    /// The method called.
    pub fn method(&self) -> &str {
        &self.request.method
    }

    /// How long the caller still waits for this call (see [`Request::ttl_left`]); `None`:
    /// it set no deadline. A method with more work than time left may stop early, or
    /// decline work it cannot finish in time.
    pub fn ttl_left(&self) -> Option<Duration> {
        self.request.ttl_left()
    }

    /// True once the caller no longer waits for this call (see [`Request::is_cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        self.request.is_cancelled()
    }

    /// Resolves once the caller no longer waits for this call (see [`Request::cancelled`]):
    /// a command's implementation decides here whether to finish or to stop; a query's is
    /// dropped at its next `.await` anyway.
    pub async fn cancelled(&self) {
        self.request.cancelled().await;
    }
}

/// Compares `contract` (a service's contract now, e.g. `PumpClient::contract()`) with a
/// released node contract as JSON (what `zmesh describe --json` printed, or
/// [`NodeContract::to_json_pretty`] wrote, at the release), for a user's own CI: the report's
/// [`CheckReport::is_breaking`] says whether a caller built against the release would be
/// refused or surprised (a method removed or more dangerous to repeat). Only the service's
/// own channel is compared; other channels of the released contract are ignored.
///
/// ```
/// # #[zmesh::service(channel = "pump")]
/// # trait Pump { #[query] async fn pressure(&self) -> f64; }
/// let released = r#"{"format": 1, "rid": "plant", "services": []}"#;
/// let report = zmesh::typed::check_against_release(&PumpClient::contract(), released)?;
/// assert!(!report.is_breaking()); // a new service breaks no caller
/// # Ok::<(), zmesh::proto::contract::ContractError>(())
/// ```
pub fn check_against_release(
    contract: &ServiceContract,
    released: &str,
) -> Result<CheckReport, ContractError> {
    let mut old = NodeContract::from_json(released)?;
    old.services.retain(|s| s.channel == contract.channel);
    let mut new = NodeContract::new(old.rid.clone());
    new.services.push(contract.clone());
    new.normalize();
    Ok(contract::check(&old, &new))
}

/// What generated code calls; not an API.
#[doc(hidden)]
pub mod __private {
    use bytes::Bytes;
    pub use serde::de::IgnoredAny;
    use serde::Serialize;

    use crate::runtime::calls::{
        self as rcalls, encode, CallError, RemoteCode, Request, ServeError,
    };

    /// A client call's arguments, encoded: ones that do not encode are
    /// [`CallError::InvalidArgument`] (never sent).
    pub fn encode_args<T: Serialize + ?Sized>(args: &T) -> Result<Bytes, CallError> {
        rcalls::encode_args(args)
    }

    /// A method's result, encoded: one that does not encode answers `Exception` (it ran).
    pub fn reply<T: Serialize>(out: T) -> Result<Bytes, ServeError> {
        encode(&out)
    }

    /// A method's `Result`, its error converted to the call's.
    pub fn reply_result<T: Serialize, E: Into<ServeError>>(
        out: Result<T, E>,
    ) -> Result<Bytes, ServeError> {
        out.map_err(Into::into).and_then(reply)
    }

    /// The queue name of a keyed call: its key argument's MessagePack bytes in hex. It is
    /// named before the method runs, so a key that does not encode refuses the call
    /// `InvalidParams` (did not run).
    pub fn key_of<T: Serialize>(key: &T) -> Result<String, ServeError> {
        rmp_serde::to_vec_named(key).map(hex::encode).map_err(|e| {
            ServeError::new(
                RemoteCode::InvalidParams,
                format!("the key does not encode: {e}"),
            )
        })
    }

    /// The handler of a service declared only to read its contract.
    pub async fn not_exposed(req: Request) -> Result<Bytes, ServeError> {
        Err(ServeError::method_not_found(&req.method))
    }

    /// The stream handler of a service declared only to read its contract.
    pub async fn not_exposed_stream(
        req: Request,
        _items: crate::runtime::calls::ItemSink,
    ) -> Result<Bytes, ServeError> {
        Err(ServeError::method_not_found(&req.method))
    }
}
