//! Send buffers libzmq hands back: the frames of [`POOLED`] length a node sends leave in
//! buffers of one process-wide pool instead of a fresh allocation each.
//!
//! A frame given to libzmq by copy (`zmq_msg_init_size`) is an allocation on the sending
//! thread that libzmq's I/O thread frees once it has written the frame to the connection.
//! A one-way burst sends its PACKs (about 4 KiB each) by the hundred, so the allocator's
//! heap grows by a burst's worth and, as libzmq frees them, shrinks again past its trim
//! threshold: every burst then touched fresh pages (BENCHMARKS.md, "Send buffers handed
//! back, receive buffers reused"). Here such a frame is copied into a buffer of [`BUFFER_CAPACITY`] bytes taken from
//! the pool and handed to libzmq without another copy ([`zmq::Message::from_owner`]); when
//! libzmq lets go of it, on its own thread, the buffer goes back to the pool, which keeps at
//! most [`KEPT`] of them (4 MiB) and frees the rest.

use std::ops::RangeInclusive;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The frame lengths that leave in a pooled buffer: shorter frames are small allocations
/// the allocator keeps in per-thread caches (and up to 33 bytes libzmq keeps inside the
/// message itself); a longer one is copied into a message of its own, as before.
pub const POOLED: RangeInclusive<usize> = 1024..=BUFFER_CAPACITY;
/// The capacity of every pooled buffer: a PACK's payload frame as this node packs them (at
/// most `PACK_SEND_BYTES`, 4 KiB).
pub const BUFFER_CAPACITY: usize = 4 * 1024;
/// Buffers the pool keeps when libzmq hands them back; one handed back to a full pool is
/// freed.
pub const KEPT: usize = 1024;

/// The process's pool, which every libzmq socket of the node sends from.
static POOL: SendBuffers = SendBuffers::new(KEPT);

/// The libzmq message for one frame to send: a buffer of the process's pool with a copy of
/// `frame` if its length is in [`POOLED`], otherwise a message of its own
/// (`zmq_msg_init_size` and a copy).
pub fn message(frame: &[u8]) -> zmq::Message {
    POOL.message(frame)
}

/// A pool of send buffers: those waiting for a frame, at most `kept` of them.
pub struct SendBuffers {
    free: Mutex<Vec<Vec<u8>>>,
    kept: usize,
}

impl SendBuffers {
    /// An empty pool that keeps at most `kept` buffers.
    pub const fn new(kept: usize) -> SendBuffers {
        SendBuffers {
            free: Mutex::new(Vec::new()),
            kept,
        }
    }

    /// The libzmq message for `frame` (see [`message`]), its buffer from this pool.
    pub fn message(&'static self, frame: &[u8]) -> zmq::Message {
        if !POOLED.contains(&frame.len()) {
            return zmq::Message::from(frame);
        }
        let mut buf = self.take();
        buf.extend_from_slice(frame);
        zmq::Message::from_owner(Pooled { buf, pool: self })
    }

    /// An empty buffer of [`BUFFER_CAPACITY`]: one from the pool, or a new one.
    fn take(&self) -> Vec<u8> {
        self.lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUFFER_CAPACITY))
    }

    /// Gives `buf` back to the pool, or frees it if the pool is full.
    fn give_back(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut free = self.lock();
        if free.len() < self.kept {
            free.push(buf);
        }
    }

    /// How many buffers the pool holds now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// True if the pool holds no buffer now.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A pooled buffer libzmq sends from: its bytes are the frame, and dropping it gives the
/// buffer back to its pool.
struct Pooled {
    buf: Vec<u8>,
    pool: &'static SendBuffers,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pool(kept: usize) -> &'static SendBuffers {
        Box::leak(Box::new(SendBuffers::new(kept)))
    }

    /// A pooled frame's message carries exactly its bytes, a frame outside [`POOLED`] too;
    /// a message that is dropped gives its buffer back, and the pool never keeps more than
    /// it may.
    #[test]
    fn pooled_frames_carry_their_bytes_and_give_the_buffer_back() {
        let pool = pool(8);
        let lens = [
            0,
            1,
            33,
            1023,
            1024,
            4100,
            BUFFER_CAPACITY,
            BUFFER_CAPACITY + 1,
        ];
        for (i, len) in lens.into_iter().enumerate() {
            let frame: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let m = pool.message(&frame);
            assert_eq!(&m[..], &frame[..], "{len} bytes");
            drop(m);
            // One buffer, made for the first pooled length and reused for the others.
            let made = lens[..=i].iter().any(|l| POOLED.contains(l));
            assert_eq!(pool.len(), usize::from(made), "{len} bytes");
        }
        let held: Vec<_> = (0..10).map(|_| pool.message(&[7; 2000])).collect();
        assert!(held.iter().all(|m| m.len() == 2000 && m[0] == 7));
        assert!(pool.is_empty(), "every free buffer was taken");
        drop(held);
        assert_eq!(pool.len(), 8, "the pool keeps 8, frees the rest");
        let m = pool.message(&[1; 1024]);
        assert_eq!(pool.len(), 7);
        assert_eq!(
            &m[..],
            &[1; 1024][..],
            "a reused buffer holds the new frame alone"
        );
        drop(m);
        assert_eq!(pool.len(), 8);
    }

    /// A message sent over libzmq from a pooled buffer arrives byte for byte, and the buffer
    /// is back in the pool once libzmq has let go of it (inproc: when the receiver closes
    /// the message).
    #[test]
    fn a_pooled_frame_arrives_unchanged_and_its_buffer_comes_back() {
        let pool = pool(4);
        let ctx = zmq::Context::new();
        let a = ctx.socket(zmq::PAIR).unwrap();
        let b = ctx.socket(zmq::PAIR).unwrap();
        a.bind("inproc://send-buffers").unwrap();
        b.connect("inproc://send-buffers").unwrap();
        let frame: Vec<u8> = (0..BUFFER_CAPACITY).map(|i| (i % 253) as u8).collect();
        a.send(pool.message(&frame), 0).unwrap();
        assert!(pool.is_empty(), "libzmq holds the buffer");
        let got = b.recv_bytes(0).unwrap();
        assert_eq!(got, frame);
        assert_eq!(pool.len(), 1);
    }
}
