//! One-way records out: the per-connection send queues this thread drains into libzmq in
//! bursts (where the queues are opened and published for the async side is
//! `io/publish.rs`).
//!
//! Draining is bounded: at most [`SEND_BURST`] records of one link at a time and
//! [`SENDS_PER_TURN`](super::parts::outbound::SENDS_PER_TURN) per loop turn, so a flood of sends cannot hold up the receive rotation
//! (MISSION R1-R4). A link whose pipe is full (libzmq's high-water mark) is *blocked*: it is
//! tried again every loop turn, and the loop sleeps at most
//! [`PAUSED_POLL_MS`](super::PAUSED_POLL_MS) while one is (libzmq signals the socket's
//! `ZMQ_FD` when the pipe has room again, which wakes the loop sooner).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::{IoThread, LinkKey};
use crate::proto::node::core;
use crate::proto::state::FailureReason;
use crate::proto::wire::{Capabilities, Pack};
use crate::runtime::outbound::{Closed, SendQueue, Taken, SEND_QUEUE};
use crate::runtime::socket::SocketSendError as SocketError;

/// Records of one link sent in one go before another link (or the receive rotation) has its
/// turn.
pub(super) const SEND_BURST: usize = 256;
/// PROBEs and ACKs held per connection behind a full pipe.
pub(super) const HELD_LIVENESS: usize = 4;
/// Payload bytes this node puts in one PACK (WIRE.md §4.18 allows 64 KiB): 64 records of
/// 64 bytes. libzmq's high-water mark counts messages, so a full pipe holds [`HWM`] PACKs; at
/// this bound that is at most what [`HWM`] records of 4 KiB would be, and the push-back a
/// slow reader gives (MISSION R5) comes after a bounded number of bytes, not 64 times later.
/// Small records, where the cost per message is what counts, still pack 64 to a message.
///
/// [`HWM`]: crate::runtime::socket::HWM
pub(super) const PACK_SEND_BYTES: usize = 4 * 1024;

/// How one burst of a link ended.
enum Burst {
    /// The queue is empty (as far as this burst saw).
    Drained,
    /// Records are left; the budget ended the burst.
    More,
    /// libzmq's pipe is full.
    Blocked,
    /// The link has no ready connection (any more).
    Gone,
    /// libzmq refused the record for another reason than a full pipe: the pipe is gone.
    Failed(SocketError),
}

impl IoThread {
    /// A sender queued records on `q` with no drain on its way: the first burst leaves now,
    /// in command order; what is left waits for [`Self::flush_send_queues`].
    pub(super) fn on_send_queued(&mut self, q: Arc<SendQueue>, now: Instant) {
        let k = q.link();
        let current = self
            .core
            .links
            .get(k)
            .and_then(|l| l.conn.as_ref())
            .and_then(|c| self.outbound.queues.get(k, c.id))
            .is_some_and(|o| Arc::ptr_eq(o, &q) && o.conn() == q.conn());
        if !current || self.outbound.turns.is_listed(k) {
            // A closed queue (its records were counted), or one already in the lists.
            return;
        }
        let burst = self.send_burst(k);
        if let Some(blocked) = self.after_burst(k, burst, now) {
            self.outbound.turns.list(k, blocked);
        }
    }

    /// Drains the listed send queues within this turn's budget, blocked links first tried
    /// again; links with records left stay listed for the next turn.
    pub(super) fn flush_send_queues(&mut self, now: Instant) {
        let mut visits = self.outbound.turns.begin_flush();
        while visits > 0 {
            visits -= 1;
            let Some(k) = self.outbound.turns.next() else {
                break;
            };
            let burst = self.send_burst(k);
            let left = self.after_burst(k, burst, now);
            self.outbound.turns.put_back(k, left);
        }
    }

    /// True if a listed send queue can make progress now (not only blocked ones).
    pub(super) fn has_sends(&self) -> bool {
        !self.outbound.turns.pending.is_empty()
    }

    /// True if some link waits for room in libzmq's pipe.
    pub(super) fn has_blocked_sends(&self) -> bool {
        !self.outbound.turns.blocked.is_empty()
    }

    /// Sends a PROBE or an ACK on link `k`. A full pipe does not drop it (one-way records
    /// this node queued would otherwise keep the pipe full and starve its liveness records,
    /// MISSION R4): it is held and sent before anything else on the link once the pipe has
    /// room, the link being tried again every loop turn meanwhile. At most [`HELD_LIVENESS`]
    /// are held per connection, the oldest dropped (a newer PROBE or ACK supersedes it).
    pub(super) fn send_liveness(&mut self, k: LinkKey, frames: Vec<Vec<u8>>) {
        let held = match self.core.links.get(k).and_then(|l| l.conn.as_ref()) {
            Some(c) => !c.held.is_empty(),
            None => return,
        };
        if !held {
            match self.send_frames_on_link(k, &frames) {
                Err(SocketError::Full) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "liveness record not sent");
                    return;
                }
                Ok(()) => return,
            }
        }
        if let Some(c) = self.core.links.get_mut(k).and_then(|l| l.conn.as_mut()) {
            if c.held.len() >= HELD_LIVENESS {
                c.held.remove(0);
            }
            c.held.push(frames);
        }
        if !self.outbound.turns.is_listed(k) {
            self.outbound.turns.list(k, true);
        }
    }

    /// Sends link `k`'s held liveness records, in order, while the pipe takes them; true if
    /// none is left.
    fn flush_held(&mut self, k: LinkKey) -> bool {
        let Some(c) = self.core.links.get_mut(k).and_then(|l| l.conn.as_mut()) else {
            return true;
        };
        if c.held.is_empty() {
            return true;
        }
        let held = std::mem::take(&mut c.held);
        let mut sent = 0;
        for frames in &held {
            match self.send_frames_on_link(k, frames) {
                Err(SocketError::Full) => break,
                // Sent, or never will be on this connection (its failure is noticed apart).
                _ => sent += 1,
            }
        }
        let left: Vec<_> = held.into_iter().skip(sent).collect();
        let done = left.is_empty();
        if let Some(c) = self.core.links.get_mut(k).and_then(|l| l.conn.as_mut()) {
            c.held = left;
        }
        done
    }

    /// Sends up to one burst of link `k`'s queue (bounded by the turn's budget), after its
    /// held liveness records.
    fn send_burst(&mut self, k: LinkKey) -> Burst {
        if !self.flush_held(k) {
            return Burst::Blocked;
        }
        let max = SEND_BURST.min(self.outbound.turns.budget);
        let Some(q) = self.ready_queue(k) else {
            return Burst::Gone;
        };
        if max == 0 {
            return Burst::More;
        }
        let mut buf = std::mem::take(&mut self.outbound.turns.scratch);
        let mut pack = std::mem::take(&mut self.outbound.turns.pack);
        q.take(max, &mut buf);
        let (sent, failed) = self.send_records(k, &buf, &mut pack);
        let more = q.settle(&mut buf, sent);
        self.outbound.turns.scratch = buf;
        self.outbound.turns.pack = pack;
        self.outbound.turns.budget -= sent.min(self.outbound.turns.budget);
        if sent > 0 {
            metrics::counter!("zmesh_app_records_sent_total").increment(sent as u64);
        }
        match failed {
            None if more => Burst::More,
            None => Burst::Drained,
            Some(SocketError::Full) => Burst::Blocked,
            Some(e) => Burst::Failed(e),
        }
    }

    /// Sends `records` in order on link `k`'s connection until libzmq refuses one; returns
    /// how many records went, and the refusal. Where capability `pack` is in effect, each run
    /// of two or more records on one channel leaves as PACKs ([`pack_run`]); otherwise, and
    /// for a record alone, as MESSAGEs, the version-1 bytes. libzmq takes a message whole or
    /// not at all, so a refused PACK sent none of its records: they are not counted, and go
    /// back to the queue with the rest (`settle`). A PACK's two frames are written into
    /// `pack`, whose buffers are reused.
    fn send_records(
        &self,
        k: LinkKey,
        records: &Taken,
        pack: &mut (Vec<u8>, Vec<u8>),
    ) -> (usize, Option<SocketError>) {
        let Some(c) = self.core.links.get(k).and_then(|l| l.conn.as_ref()) else {
            return (0, Some(SocketError::Unreachable));
        };
        let packs = self.conn_caps(k).contains(Capabilities::PACK);
        let route = c.route.as_deref();
        let (env, body) = pack;
        let mut sent = 0;
        for (run_env, payloads) in records.runs() {
            let mut done = 0;
            while let Some(rest) = payloads.get(done..).filter(|r| !r.is_empty()) {
                let n = if packs { pack_run(rest) } else { 1 };
                let r = match rest.get(..n) {
                    Some(run @ [_, _, ..]) => {
                        Pack::write_frames(run_env, run.iter().map(|p| p.as_ref()), env, body);
                        self.sockets
                            .send_parts(c.slot, route, &[env.as_slice(), body.as_slice()])
                    }
                    _ => self.sockets.send_parts(c.slot, route, &[run_env, &rest[0]]),
                };
                if let Err(e) = r {
                    return (sent, Some(e));
                }
                done += n;
                sent += n;
            }
        }
        (sent, None)
    }

    /// Acts on how a burst ended: a link with records left stays listed (`true`); a failed
    /// send fails the link, its queued records counted in the failure.
    fn after_burst(&mut self, k: LinkKey, burst: Burst, now: Instant) -> Option<bool> {
        match burst {
            Burst::Drained | Burst::Gone => None,
            Burst::More => Some(false),
            Burst::Blocked => Some(true),
            Burst::Failed(e) => {
                // The pipe is gone (a ROUTER with ROUTER_MANDATORY says so at once): the
                // connection is over.
                let detail = format!("send failed: {e}");
                core::fail_link(self, k, FailureReason::TransportError, &detail, now);
                None
            }
        }
    }

    /// The node stops: every ready link's queue takes no more records, what it holds goes to
    /// libzmq as far as the pipe takes it (the socket's linger then flushes it with the
    /// CLOSE), and the rest is counted; the table answers `Shutdown` from now on. Returns the
    /// links that had records left, and how many.
    pub(super) fn flush_send_queues_at_stop(&mut self) -> Vec<(LinkKey, usize)> {
        self.outbound.table.stop();
        let mut unsent = Vec::new();
        for k in self.core.links.keys() {
            let Some(q) = self.ready_queue(k) else {
                continue;
            };
            q.seal(Closed::Shutdown);
            // Sealed, the queue holds at most SEND_QUEUE records: bursts enough for those.
            for _ in 0..=SEND_QUEUE.div_ceil(SEND_BURST) {
                self.outbound.turns.budget = SEND_BURST;
                if !matches!(self.send_burst(k), Burst::More) {
                    break;
                }
            }
            let n = self.close_send_queue(k, Closed::Shutdown, FailureReason::HostStopped);
            if n > 0 {
                unsent.push((k, n));
            }
        }
        self.outbound.turns.clear();
        unsent
    }
}

/// How many payloads at the front of `payloads` (not empty; one channel run) leave in one
/// PACK: the longest run of at most [`Pack::MAX`] records and [`PACK_SEND_BYTES`] of payloads
/// (within WIRE.md §4.18's bounds: each payload at most [`Pack::MAX_RECORD`] bytes, at most
/// [`Pack::MAX_BYTES`] together). 1 means the first record leaves alone, as a MESSAGE (a lone
/// record is never wrapped).
fn pack_run(payloads: &[Bytes]) -> usize {
    pack_run_within(payloads, PACK_SEND_BYTES)
}

/// [`pack_run`] with a payload byte bound of `max_bytes` (at most [`Pack::MAX_BYTES`]).
fn pack_run_within(payloads: &[Bytes], max_bytes: usize) -> usize {
    let max_bytes = max_bytes.min(Pack::MAX_BYTES);
    let mut bytes = 0usize;
    let mut run = 0;
    for p in payloads.iter().take(Pack::MAX) {
        let len = p.len();
        if len > Pack::MAX_RECORD || bytes + len > max_bytes {
            break;
        }
        bytes += len;
        run += 1;
    }
    run.max(1).min(payloads.len())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bytes::Bytes;

    use super::*;

    fn recs(n: usize, len: usize) -> Vec<Bytes> {
        (0..n).map(|_| Bytes::from(vec![7; len])).collect()
    }

    /// MISSION X4: a run packs at most 64 records and this node's 4 KiB of payloads (within
    /// the wire's 64 KiB); a record too long for a PACK, or one alone, leaves as a MESSAGE.
    /// (A run is one channel's: the queue keeps channels apart, see
    /// `runtime::outbound::tests::x4_taken_runs_keep_channels_apart`.)
    #[test]
    fn x4_pack_runs_keep_the_wire_bounds() {
        let same = recs(100, 64);
        assert_eq!(pack_run(&same), 64);
        assert_eq!(pack_run(&same[..1]), 1);
        assert_eq!(pack_run(&same[..2]), 2);
        assert_eq!(pack_run(&[]), 0);
        assert_eq!(pack_run(&recs(10, 1024)), 4, "4 KiB of payloads");
        let long_first = [recs(1, 4096), recs(1, 1)].concat();
        assert_eq!(pack_run(&long_first), 1);
        assert_eq!(
            pack_run_within(&recs(5, 30_000), usize::MAX),
            2,
            "a third would cross 64 KiB"
        );
        let exact = [recs(2, 32_768), recs(1, 0)].concat();
        assert_eq!(pack_run_within(&exact, Pack::MAX_BYTES), 3);
        let long = [recs(1, 70_000), recs(1, 1)].concat();
        assert_eq!(pack_run_within(&long, usize::MAX), 1);
        let after_long = [recs(1, 1), recs(1, 70_000)].concat();
        assert_eq!(pack_run_within(&after_long, usize::MAX), 1);
    }
}
