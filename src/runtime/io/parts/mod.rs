//! The parts of the I/O thread that own their state behind a narrow interface. None of them
//! imports the thread ([`super::IoThread`]) or the modules of its `impl IoThread` blocks: the
//! thread holds them, and its modules drive them. So the layering is parts at the bottom,
//! the thread's state and loop (`io/mod.rs`) above them, and the glue that moves records
//! between them on top.

pub(crate) mod accepting;
pub(crate) mod answers;
pub(crate) mod app;
pub(crate) mod callee;
pub(crate) mod caller;
pub(crate) mod discovered;
pub(crate) mod exhaustion;
pub(crate) mod fanout;
pub(crate) mod gate;
pub(crate) mod handoff;
pub(crate) mod link;
pub(crate) mod live;
pub(crate) mod local;
pub(crate) mod outbound;
pub(crate) mod ready;
pub(crate) mod receiving;
pub(crate) mod routes;
pub(crate) mod sockets;
pub(crate) mod timers;
