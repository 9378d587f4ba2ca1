//! The hand-off from the async side: its command queue, the wake-up it rings after queueing a
//! command, and the reply a stop waits for. Draining the commands is the thread's
//! (`io/commands.rs`).

use std::sync::Arc;

use crossbeam_channel::Receiver;
use tokio::sync::oneshot;

use crate::runtime::command::Command;
use crate::runtime::wake::WakeUp;

/// What the async side hands the I/O thread: its commands, the wake-up it rings after
/// queueing one, and the reply a stop waits for once the node is down.
pub(crate) struct Handoff {
    /// The async side's wake-up: taken before each drain of the command queue.
    pub(crate) wake: Arc<WakeUp>,
    pub(crate) commands: Receiver<Command>,
    /// Sent once the node stopped, to the caller of the stop.
    pub(crate) shutdown_reply: Option<oneshot::Sender<()>>,
}
