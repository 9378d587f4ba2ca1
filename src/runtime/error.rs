//! Why a node could not start, why a node that stopped cannot answer, and why a one-way send
//! or a publish was refused.

use crate::config::ConfigError;

/// A node could not start ([`Node::start`], [`NodeBuilder::start`]). The other operations
/// of a node fail with errors of their own family: serving with [`ExposeError`], reading
/// the allow-list again with [`AllowListError`], a stopped node with [`NodeStopped`]; each
/// converts into this for `?`. No variant exposes a type of the `zmq` crate: libzmq's
/// errors are [`TransportError`].
///
/// [`Node::start`]: super::Node::start
/// [`NodeBuilder::start`]: super::NodeBuilder::start
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A socket could not be created or bound.
    #[error("cannot bind {endpoint}: {source}")]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// The libzmq error.
        source: TransportError,
    },
    /// A socket or the epoll set could not be created at start because the node ran out of
    /// file descriptors (or libzmq's socket limit): the cause with its figures.
    #[error("cannot open {what}: {cause}")]
    Exhausted {
        /// What could not be opened (the endpoint to bind, or the node's epoll set).
        what: String,
        /// The real cause and its figures.
        cause: crate::runtime::fds::Exhausted,
    },
    /// libzmq failed while setting up the node.
    #[error("zeromq: {0}")]
    Zmq(TransportError),
    /// The I/O thread's epoll set could not be created, or a socket could not be added to it.
    #[error("readiness (epoll): {0}")]
    Poller(std::io::Error),
    /// An argument is invalid.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A service cannot be exposed as declared (MISSION K1, K4: an invalid combination).
    #[error("cannot expose the service: {0}")]
    Contract(#[from] crate::proto::contract::ContractError),
    /// The call needs a tokio runtime and none is running.
    #[error("no tokio runtime is running")]
    NoRuntime,
    /// The I/O thread could not be started or has stopped.
    #[error("the node's I/O thread is not running")]
    Stopped,
    /// A key file or the allow-list cannot be used (`[security]`).
    #[error("security: {0}")]
    Security(#[from] KeyFileError),
}

impl NodeError {
    /// The error of binding `endpoint` (or opening its socket) at start: [`NodeError::Exhausted`]
    /// with the figures when the node ran out of descriptors, [`NodeError::Bind`] otherwise.
    pub(crate) fn bind(endpoint: &str, source: zmq::Error) -> NodeError {
        match crate::runtime::fds::classify(source, 0, 0) {
            Some(cause) => NodeError::Exhausted {
                what: endpoint.to_owned(),
                cause,
            },
            None => NodeError::Bind {
                endpoint: endpoint.to_owned(),
                source: TransportError(source),
            },
        }
    }

    /// The error of creating the node's epoll set (or adding a socket to it) at start.
    pub(crate) fn poller(e: std::io::Error) -> NodeError {
        match crate::runtime::fds::classify_io(&e, 0, 0) {
            Some(cause) => NodeError::Exhausted {
                what: "the node's epoll set".to_owned(),
                cause,
            },
            None => NodeError::Poller(e),
        }
    }
}

/// Why a channel or a service could not be served on a running node ([`Node::serve`],
/// [`Node::serve_inline`], [`Node::serve_stream`], [`Node::expose`]). Each converts into the
/// [`NodeError`] variant of the same name, which is what [`NodeBuilder::start`] fails with
/// for a channel or service registered on the builder.
///
/// [`Node::serve`]: super::Node::serve
/// [`Node::serve_inline`]: super::Node::serve_inline
/// [`Node::serve_stream`]: super::Node::serve_stream
/// [`Node::expose`]: super::Node::expose
/// [`NodeBuilder::start`]: super::NodeBuilder::start
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExposeError {
    /// An argument is invalid (a channel name of no 1..=255 bytes).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A service cannot be exposed as declared (MISSION K1, K4: an invalid combination).
    #[error("cannot expose the service: {0}")]
    Contract(#[from] crate::proto::contract::ContractError),
    /// Serving needs a tokio runtime for the handlers, and none is running.
    #[error("no tokio runtime is running")]
    NoRuntime,
    /// The node's I/O thread is not running.
    #[error("the node's I/O thread is not running")]
    Stopped,
}

impl From<ExposeError> for NodeError {
    fn from(e: ExposeError) -> NodeError {
        match e {
            ExposeError::Invalid(m) => NodeError::Invalid(m),
            ExposeError::Contract(c) => NodeError::Contract(c),
            ExposeError::NoRuntime => NodeError::NoRuntime,
            ExposeError::Stopped => NodeError::Stopped,
        }
    }
}

impl From<NodeStopped> for NodeError {
    fn from(_: NodeStopped) -> NodeError {
        NodeError::Stopped
    }
}

/// Why [`Node::reload_allow_list`] did not put a new allow-list in force. In every case the
/// allow-list in force before the call stays in force.
///
/// [`Node::reload_allow_list`]: super::Node::reload_allow_list
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllowListError {
    /// `[security] allow_dir` or one of its files could not be read, or a file there holds no
    /// public key.
    #[error("cannot read the allow-list: {0}")]
    Unreadable(#[from] KeyFileError),
    /// The node's I/O thread is not running.
    #[error("the node's I/O thread is not running")]
    Stopped,
}

impl From<AllowListError> for NodeError {
    fn from(e: AllowListError) -> NodeError {
        match e {
            AllowListError::Unreadable(k) => NodeError::Security(k),
            AllowListError::Stopped => NodeError::Stopped,
        }
    }
}

/// An error of libzmq, the ZeroMQ library under zmesh: its message and its `errno`. Opaque,
/// so that zmesh's API does not depend on the types of the `zmq` crate it is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(zmq::Error);

impl TransportError {
    /// The error `e` of the `zmq` crate.
    pub(crate) fn new(e: zmq::Error) -> TransportError {
        TransportError(e)
    }

    /// libzmq's error number (`zmq_errno()`: a POSIX `errno` value such as `EADDRINUSE`, or
    /// one of libzmq's own).
    pub fn errno(&self) -> i32 {
        self.0.to_raw()
    }
}

/// The node's I/O thread is not running: the node stopped ([`Node::shutdown`], or the thread
/// ended on its own), so it has nothing more to report. What [`Node::snapshot`] and
/// [`Node::shutdown`] fail with; it converts into [`NodeError::Stopped`].
///
/// [`Node::shutdown`]: super::Node::shutdown
/// [`Node::snapshot`]: super::Node::snapshot
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the node's I/O thread is not running")]
#[non_exhaustive]
pub struct NodeStopped;

/// Why a one-way send was not taken. In every case the record was not queued anywhere: it
/// certainly was not delivered, and may be sent again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// No ready connection to that peer / no ready server for that channel.
    #[error("no ready peer for {0}")]
    NotReady(String),
    /// The link is ready but its zmesh queue is full
    /// ([`SEND_QUEUE`](crate::runtime::SEND_QUEUE) records, libzmq's pipe behind it full
    /// too). Only [`Node::try_send`](super::Node::try_send) and
    /// [`Node::try_send_batch`](super::Node::try_send_batch) say so; `send` waits for room.
    #[error("link to {0} cannot take more now (queue full)")]
    WouldBlock(String),
    /// An argument is invalid (e.g. channel name length).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The node is stopping or stopped.
    #[error("node is shut down")]
    Shutdown,
}

/// Why [`Node::send_batch`](super::Node::send_batch) or
/// [`Node::try_send_batch`](super::Node::try_send_batch) did not take every record.
///
/// The first [`sent`](Self::sent) records were taken, in order: queued on the link and sent
/// from there in order, unless the link fails first, in which case its failure counts them
/// (see [`Node::send`](super::Node::send)). The record at index `sent` was refused for
/// [`error`](Self::error), and neither it nor any later record was queued anywhere: they
/// certainly were not delivered, and may be sent again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{sent} records sent, then: {error}")]
pub struct BatchSendError {
    /// How many records, from the first, were taken.
    pub sent: usize,
    /// Why the next record was not taken.
    pub error: SendError,
}

/// Why a publish was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The topic is exactly the reserved beacon topic `01 5A 4C 46 31` (MISSION L4).
    #[error("the topic 01 5A 4C 46 31 is reserved for liveness beacons")]
    ReservedTopic,
    /// The topic is empty or longer than 255 bytes.
    #[error("topic must be 1..=255 bytes")]
    InvalidTopic,
    /// This node has no `[publisher]` endpoint.
    #[error("this node has no publisher endpoint")]
    NoPublisher,
    /// The node is stopping or stopped.
    #[error("node is shut down")]
    Shutdown,
}

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a key pair as `zmesh keygen` writes it.
    #[error("{path}: not a zmesh key file ({why})")]
    Invalid {
        /// The path.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// libzmq could not make a key pair (it was built without CURVE).
    #[error("cannot make a CURVE key pair: {0}")]
    Generate(TransportError),
}
