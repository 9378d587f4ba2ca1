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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use crate::proto::calls::{may_have_run, CallError, Phase, RemoteCode};

/// Options of one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// How long the caller waits. `None` (or zero) means no deadline at all: no local timer
    /// and no ttl on the wire (MISSION C6).
    pub ttl: Option<Duration>,
    /// Call this RouteMesh peer (by RID) rather than any ready server of the channel.
    pub peer: Option<String>,
}

impl CallOptions {
    /// Options with a deadline.
    pub fn with_ttl(ttl: Duration) -> CallOptions {
        CallOptions {
            ttl: Some(ttl),
            ..CallOptions::default()
        }
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
    args: Bytes,
}

impl Request {
    pub(crate) fn new(channel: String, method: String, caller: String, args: Bytes) -> Request {
        Request {
            channel,
            method,
            caller,
            args,
        }
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

/// A handler's failure, sent to the caller as a REPLY code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ServeError {
    /// The code; a handler may choose any of [`RemoteCode`] (the allow-list of K6).
    pub code: RemoteCode,
    /// A human-readable message.
    pub message: String,
}

impl ServeError {
    /// An error with a chosen code.
    pub fn new(code: RemoteCode, message: impl Into<String>) -> ServeError {
        ServeError {
            code,
            message: message.into(),
        }
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

/// Encodes a value as call arguments or a result (MessagePack).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, ServeError> {
    rmp_serde::to_vec_named(value)
        .map(Bytes::from)
        .map_err(|e| ServeError::new(RemoteCode::InvalidParams, e.to_string()))
}

/// Decodes a call result (MessagePack).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CallError> {
    rmp_serde::from_slice(bytes).map_err(|e| CallError::Remote {
        code: RemoteCode::InvalidParams,
        message: format!("result does not decode: {e}"),
    })
}

/// The future a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Bytes, ServeError>> + Send>>;

/// A channel's handler: called once per accepted call, on the tokio runtime.
pub type Handler = Arc<dyn Fn(Request) -> HandlerFuture + Send + Sync>;
