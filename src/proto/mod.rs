//! The sans-IO protocol core.
//!
//! # Determinism contract
//!
//! Nothing in this module tree reads a clock, touches a socket, spawns a task or sleeps. Every
//! state machine takes the current time as an argument (`now: Instant`, always from the one
//! monotonic clock of the shell, MISSION L7), returns what must be sent or reported, and says
//! through a `poll_timeout()` when it next needs to be called. Given the same inputs in the
//! same order, it produces the same outputs.

pub mod admission;
pub mod calls;
pub mod contract;
pub mod discovery;
pub mod handshake;
pub mod liveness;
pub mod node;
pub mod ops;
pub mod sched;
pub mod security;
pub mod state;
pub mod transport;
pub mod wire;

use std::fmt;

/// Diagnostic identifier of one physical connection (one ZeroMQ pipe) inside a node.
///
/// Allocated from a per-node counter and never reused within a process run. It is used to
/// correlate logs and to tell records of an old physical connection from the current one; it
/// is never a fence for admission (MISSION F3) and never travels as a send target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}
