//! Typed services (MISSION A1): what [`macro@crate::service`] generates calls, and what its
//! users see of it: the [`Call`] a typed client's method returns and the request
//! [`Context`] a method may take.
//!
//! A typed client's call is [`Node::call_raw`] underneath: the arguments are encoded as
//! MessagePack (none: `nil`; one argument: the value itself; several: an array of them, in
//! order), the method's declared semantics travel in the REQUEST as the caller's pin
//! ([`CallOptions::semantics`]), and the result is decoded from MessagePack. A service built
//! with the builder API ([`crate::runtime::service`]) that decodes the same values answers a
//! typed client, and the other way round.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::proto::contract::{self, CheckReport, ContractError, NodeContract, ServiceContract};
use crate::runtime::calls::{self as rcalls, CallError, CallOptions, Request, Semantics};
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

/// The request context a service method may take (an argument of this type, anywhere after
/// `&self`): who called and under which identity. It is not part of the call's arguments.
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

    use crate::runtime::calls::{encode, CallError, Request, ServeError};

    /// A client call's arguments, encoded.
    pub fn encode_args<T: Serialize + ?Sized>(args: &T) -> Result<Bytes, CallError> {
        encode(args).map_err(|e| CallError::InvalidArgument { reason: e.message })
    }

    /// A method's result, encoded: one that does not encode answers `Exception` (it ran).
    pub fn reply<T: Serialize>(out: T) -> Result<Bytes, ServeError> {
        encode(&out)
            .map_err(|e| ServeError::exception(format!("result does not encode: {}", e.message)))
    }

    /// A method's `Result`, its error converted to the call's.
    pub fn reply_result<T: Serialize, E: Into<ServeError>>(
        out: Result<T, E>,
    ) -> Result<Bytes, ServeError> {
        out.map_err(Into::into).and_then(reply)
    }

    /// The queue name of a keyed call: its key argument's MessagePack bytes in hex.
    pub fn key_of<T: Serialize>(key: &T) -> Result<String, ServeError> {
        encode(key).map(hex::encode)
    }

    /// The handler of a service declared only to read its contract.
    pub async fn not_exposed(req: Request) -> Result<Bytes, ServeError> {
        Err(ServeError::method_not_found(&req.method))
    }
}
