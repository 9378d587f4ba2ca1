//! What the async side hands the I/O thread: commands, and the call and serve messages
//! that travel with them. Both [`super::node`] and [`super::io`] use this module; neither
//! imports the other's types through it.

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::calls::{CallError, CallOptions, Request, ServeError, StreamEvent};
use super::error::{BatchSendError, SendError};
use super::snapshot::Snapshot;
use crate::proto::calls::{CallShape, ServeId};

/// Work for the I/O thread from the async side.
pub(crate) enum Command {
    SendPeer {
        peer: String,
        channel: String,
        payload: Bytes,
        reply: oneshot::Sender<Result<(), SendError>>,
    },
    SendPeerBatch {
        peer: String,
        channel: String,
        payloads: Vec<Bytes>,
        reply: oneshot::Sender<Result<(), BatchSendError>>,
    },
    SendServer {
        channel: String,
        payload: Bytes,
        reply: oneshot::Sender<Result<(), SendError>>,
    },
    Publish {
        topic: Bytes,
        payload: Bytes,
    },
    PublishBatch {
        topic: Bytes,
        payloads: Vec<Bytes>,
    },
    Snapshot(oneshot::Sender<Snapshot>),
    Shutdown(oneshot::Sender<()>),
    Call {
        channel: String,
        method: String,
        args: Bytes,
        opts: CallOptions,
        reply: CallReply,
    },
    Serve {
        channel: String,
        served: Served,
    },
    ServeItem(ServeItem),
    ServeDone(ServeDone),
}

/// Where a call's answer goes, on the caller's side.
pub(crate) enum CallReply {
    /// A unary call: its one result. Stream items for it are dropped.
    Unary(oneshot::Sender<Result<Bytes, CallError>>),
    /// A streaming call: its items in order, then its one end.
    Stream(mpsc::UnboundedSender<StreamEvent>),
}

/// A channel this node serves.
pub(crate) struct Served {
    /// Where its accepted calls are dispatched.
    pub jobs: mpsc::UnboundedSender<ServeJob>,
    /// Unary, or streams (which a drain ends with `Unavailable`).
    pub shape: CallShape,
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
}

/// A handler's answer, back to the I/O thread.
pub(crate) struct ServeDone {
    pub id: ServeId,
    pub result: Result<Bytes, ServeError>,
}
