//! The runtime: one I/O thread per node that owns every libzmq socket (the publisher socket,
//! of which it reads only subscriptions, it shares with [`Node::publish`]), and the async
//! handle ([`Node`]) that applications use.
//!
//! ```text
//!  Node (Clone, async)
//!   |-- calls, serve, snapshot, shutdown: Command -> crossbeam channel --+  wake-up: eventfd,
//!   |-- send: link table -> the link's send queue (SEND_QUEUE records) --+  once per burst
//!   |-- publish: straight to the XPUB socket (a mutex)                   v
//!   ^                     I/O thread: loop { timers; epoll wait on ZMQ_FDs, then ZMQ_EVENTS
//!   |                         of fired/touched sockets; commands; send queues in bursts;
//!   +-- NodeEvent batches     receive rotation (scheduler caps); sans-IO core decides;
//!       (tokio mpsc)          sockets send }
//! ```
//!
//! The I/O thread reads the monotonic clock once per loop turn and hands `now` to the sans-IO
//! state machines in [`crate::proto`]; it never decides protocol questions itself.

pub mod calls;
mod command;
pub mod discovery;
mod error;
mod event;
pub mod fds;
mod hex64;
pub mod idempotency;
mod io;
mod link;
mod node;
pub mod operations;
mod outbound;
mod ready;
mod records;
pub mod security;
pub mod service;
pub mod snapshot;
pub mod socket;
mod sqlite_file;
pub mod store;
pub mod telemetry;
pub mod transport;
mod wake;

pub use error::{
    AllowListError, BatchSendError, ExposeError, NodeError, NodeStopped, PublishError, SendError,
    TransportError,
};
pub use event::{Delivery, EventStream, NodeEvent, Source, StateChange};
pub use io::GRACEFUL_STOP_BOUND;
pub use link::{LinkId, MeshLane};
pub use node::{Node, NodeBuilder};
pub use outbound::SEND_QUEUE;
pub use ready::{ReadyError, Target};

/// A [`Node`] is shared between tasks and threads, and so is a handle to it: checked here,
/// at compile time.
const _: () = {
    const fn shared<T: Send + Sync + 'static>() {}
    shared::<Node>();
    shared::<calls::CallError>();
};
