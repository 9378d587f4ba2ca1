//! The parts of the I/O thread that own their state behind a narrow interface and hold a
//! socket, a channel or a task handle (the sans-IO parts are in [`crate::proto::node`]). None of them
//! imports the thread ([`super::IoThread`]) or the modules of its `impl IoThread` blocks: the
//! thread holds them, and its modules drive them. So the layering is parts at the bottom,
//! the thread's state and loop (`io/mod.rs`) above them, and the glue that moves records
//! between them on top.

pub(crate) mod app;
pub(crate) mod callee;
pub(crate) mod caller;
pub(crate) mod exhaustion;
pub(crate) mod fanout;
pub(crate) mod handoff;
pub(crate) mod local;
pub(crate) mod outbound;
pub(crate) mod ready;
pub(crate) mod receiving;
pub(crate) mod sockets;
