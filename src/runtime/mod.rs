//! The runtime: one I/O thread per node that owns every libzmq socket, and the async handle
//! ([`Node`]) that applications use.
//!
//! ```text
//!  Node (Clone, async)  --Command--> crossbeam channel --+   wake-up (eventfd, once
//!        ^                                               v     per burst of commands)
//!        |                           I/O thread: loop { timers; epoll wait on ZMQ_FDs, then
//!        +--- NodeEvent batches ---      ZMQ_EVENTS of fired/touched sockets; receive
//!             (tokio mpsc)               rotation (scheduler caps); sans-IO core decides;
//!                                        sockets send }
//! ```
//!
//! The I/O thread reads the monotonic clock once per loop turn and hands `now` to the sans-IO
//! state machines in [`crate::proto`]; it never decides protocol questions itself.

pub mod calls;
mod command;
pub mod discovery;
mod error;
mod event;
pub mod idempotency;
mod io;
mod node;
pub mod operations;
mod records;
pub mod service;
pub mod snapshot;
pub mod socket;
pub mod store;
pub mod telemetry;

pub use error::{BatchSendError, NodeError, PublishError, SendError};
pub use event::{Delivery, EventStream, NodeEvent, Source, StateChange};
pub use io::GRACEFUL_STOP_BOUND;
pub use node::{Node, NodeBuilder};
