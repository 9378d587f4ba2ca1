//! What the async side hands the I/O thread: commands, and the call and serve messages
//! that travel with them. Both [`super::node`] and [`super::io`] use this module; neither
//! imports the other's types through it.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// How the async side wakes the I/O thread: at most one wake-up (an eventfd write, mio's
/// [`mio::Waker`]) per burst of commands, not one per command.
///
/// `pending` is true from the wake-up a sender issued until the I/O thread takes it. A sender
/// queues its command first and then wakes the thread only if no wake-up is pending: a
/// pending one is followed by a drain of the queue, which finds the new command. The I/O
/// thread takes the wake-up (clears `pending`) before it drains, so a command queued after
/// the drain began wakes it again. Both sides use read-modify-write operations with
/// acquire/release ordering, so the thread that clears the flag sees every command queued
/// before the flag was set.
pub(crate) struct WakeUp {
    waker: mio::Waker,
    pending: AtomicBool,
}

impl WakeUp {
    /// A wake-up over `waker` (registered in the I/O thread's epoll set).
    pub(crate) fn new(waker: mio::Waker) -> WakeUp {
        WakeUp {
            waker,
            pending: AtomicBool::new(false),
        }
    }

    /// A command was queued: wakes the I/O thread unless a wake-up is already on its way.
    pub(crate) fn command_queued(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            self.wake_now();
        }
    }

    /// Wakes the I/O thread whatever is pending (the last handle is gone).
    pub(crate) fn wake_now(&self) {
        if let Err(e) = self.waker.wake() {
            tracing::debug!(error = %e, "wake-up not written");
        }
    }

    /// The I/O thread took the wake-up; call it before draining the command queue.
    pub(crate) fn taken(&self) {
        self.pending.swap(false, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mio::{Events, Poll, Token};

    use super::*;

    /// MISSION R1 (one loop) with one wake-up per burst of commands: four threads queue 20 000
    /// commands; the receiving loop sleeps without a timeout of its own (bounded at 10 s only
    /// so a lost wake-up fails the test instead of hanging it) and takes every command, and
    /// far fewer wake-ups fire than commands were queued.
    #[test]
    fn every_command_is_seen_with_fewer_wake_ups_than_commands() {
        let mut poll = Poll::new().expect("poll");
        let wake = std::sync::Arc::new(WakeUp::new(
            mio::Waker::new(poll.registry(), Token(0)).expect("waker"),
        ));
        let (tx, rx) = crossbeam_channel::unbounded::<u32>();
        let senders: Vec<_> = (0..4)
            .map(|_| {
                let (tx, wake) = (tx.clone(), wake.clone());
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        tx.send(i).expect("send");
                        wake.command_queued();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut events = Events::with_capacity(8);
        let (mut taken, mut wake_ups) = (0u32, 0u32);
        while taken < 20_000 {
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .expect("poll");
            assert!(
                !events.is_empty(),
                "no wake-up for 10 s with {} of 20 000 commands taken",
                taken
            );
            wake_ups += 1;
            wake.taken();
            while rx.try_recv().is_ok() {
                taken += 1;
            }
        }
        for s in senders {
            s.join().expect("sender");
        }
        assert_eq!(taken, 20_000);
        assert!(wake_ups < 20_000, "{wake_ups} wake-ups for 20 000 commands");
    }
}
