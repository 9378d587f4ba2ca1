//! How the async side wakes the I/O thread ([`WakeUp`]): the command queue and the
//! publishers' send queues both signal through it, so it is a module of its own that
//! neither imports.

use std::sync::atomic::{AtomicBool, Ordering};

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
