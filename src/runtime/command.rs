//! What the async side hands the I/O thread: commands, and the call and serve messages
//! that travel with them. Both [`super::node`] and [`super::io`] use this module; neither
//! imports the other's types through it.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::calls::{CallOptions, Request, ServeError, StreamEvent};
use super::outbound::SendQueue;
use super::service::ServedService;
use super::snapshot::Snapshot;
use crate::proto::calls::ServeId;
use crate::proto::contract::Semantics;

/// Work for the I/O thread from the async side.
pub(crate) enum Command {
    /// Records were queued on a link whose queue had no drain on its way (one command per
    /// burst of records, not per record).
    SendQueued(Arc<SendQueue>),
    Snapshot(oneshot::Sender<Snapshot>),
    Shutdown(oneshot::Sender<()>),
    Call {
        channel: String,
        method: String,
        args: Bytes,
        opts: CallOptions,
        reply: CallReply,
        /// The caller's name for this call, for [`Command::CancelCall`]; unique per node.
        token: u64,
    },
    /// The application stopped waiting for the call it named `token` (its future or stream
    /// was dropped, or cancelled): the call ends as `Cancelled`, and the callee is told.
    CancelCall(u64),
    /// The application took `items` more items of the stream it named `token`: the callee
    /// is granted as many (a CREDIT, where negotiated).
    GrantItems {
        token: u64,
        items: u64,
    },
    Serve {
        channel: String,
        served: Served,
    },
    ServeItem(ServeItem),
    ServeDone(ServeDone),
    /// From the discovery agent: link intents to apply, then events to report (MISSION D1).
    Discovery(
        Vec<crate::proto::discovery::Intent>,
        Vec<super::event::DiscoveryEvent>,
    ),
    /// A new allow-list, or why it could not be read: `trigger` says what made the
    /// node read it; `reply` hears the number of keys in force.
    AllowList {
        loaded: Result<std::collections::BTreeSet<crate::proto::security::PublicKey>, String>,
        trigger: &'static str,
        reply: Option<oneshot::Sender<Result<usize, String>>>,
    },
}

/// Where a call's answer goes, on the caller's side.
pub(crate) enum CallReply {
    /// A unary call: its one answer. Stream items for it are dropped.
    Unary(oneshot::Sender<crate::runtime::calls::CallAnswer>),
    /// A streaming call: its items in order, then its one end.
    /// Bounded: [`super::calls::STREAM_BUFFER`] items and one place for the end.
    Stream(mpsc::Sender<StreamEvent>),
}

/// A channel this node serves.
pub(crate) struct Served {
    /// Runs an accepted call: spawns its task on the application's runtime.
    pub dispatch: Dispatcher,
    /// Runs a call's inline handler on the I/O thread, if the channel has any.
    pub inline: Option<InlineDispatch>,
    /// Its methods, their semantics, shapes and execution (MISSION K1, K4).
    pub service: ServedService,
}

/// Spawns the task of one accepted call (on the runtime its channel was registered from);
/// the handle stops that task. The task answers with exactly one [`Command::ServeDone`],
/// also when it is stopped before its handler returned.
pub(crate) type Dispatcher =
    std::sync::Arc<dyn Fn(ServeJob) -> tokio::task::AbortHandle + Send + Sync>;

/// Runs an accepted call's inline handler in place (see `node::serving::inline_dispatch`).
pub(crate) type InlineDispatch = std::sync::Arc<dyn Fn(ServeJob) -> InlineRun + Send + Sync>;

/// What [`InlineDispatch`] did with a call.
pub(crate) enum InlineRun {
    /// Ran it here: its result.
    Answered(Result<Bytes, crate::runtime::calls::ServeError>),
    /// It must run on a task after all: the job, handed back.
    OnTask(ServeJob),
}

/// One item a stream handler produced, for the I/O thread to number and send.
pub(crate) struct ServeItem {
    pub id: ServeId,
    pub payload: Bytes,
    /// `Ok` once the ITEM was handed to the transport; an error when the stream is over.
    pub reply: oneshot::Sender<Result<(), ServeError>>,
}

/// One accepted call handed to the application's dispatcher.
pub(crate) struct ServeJob {
    pub id: ServeId,
    pub request: Request,
    /// The method's declared semantics (a non-repeatable command is guarded by the node's
    /// idempotency store, if it has one: MISSION K3).
    pub semantics: Option<Semantics>,
    /// Whether the runtime stops its handler when its caller stops waiting.
    pub stops_on_cancel: bool,
}

/// A handler's answer, back to the I/O thread.
pub(crate) struct ServeDone {
    pub id: ServeId,
    pub result: Result<Bytes, ServeError>,
    /// The idempotency guard answered with the outcome of an earlier call of the same key
    /// instead of running the handler for this one: the REPLY carries the replayed mark
    /// where the caller's connection negotiated it (WIRE.md §4.17).
    pub replayed: bool,
}
