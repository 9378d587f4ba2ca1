//! The callee's answers on their way out: ACCEPTs and REPLYs queued per link in the order
//! they were decided, and sent when the loop turn ends.
//!
//! Toward a connection that negotiated `answers` (WIRE.md §4.16) every answer waits for the
//! end of the turn, and the answers that waited together leave as ANSWERS records: the
//! connection's generation and id said once, a call's ACCEPT and REPLY in one entry when
//! they are next to each other. Toward any other connection an answer is sent at once, as in
//! version 1, unless earlier ones are still held back by a full pipe. Either way an answer is
//! owed to a caller that waits for it, so a full pipe (HWM) delays it, never drops it, while
//! its connection lasts; and a record that must keep its place behind the answers (an ITEM
//! of the same call) waits in the same queue.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU64;

use crate::proto::node::keys::LinkKey;
use crate::proto::wire::{
    self, Answer, Answers, Capabilities, Pending, Record, ANSWERS_MAX_ENTRIES, ANSWERS_MAX_PAYLOAD,
};
use crate::proto::ConnId;

/// One record's frames.
type Frames = Vec<Vec<u8>>;

/// What the transport did with a record [`AnswerQueue::flush`] handed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// It took the record.
    Taken,
    /// The pipe is full: the record and those behind it wait for the next flush.
    Full,
    /// The connection is gone: what waits for it is dropped.
    Gone,
}

/// One answer waiting to leave.
pub(crate) enum Outgoing {
    /// An ACCEPT of the call with this id (the connection's generation and id are added
    /// when it leaves).
    Accept(NonZeroU64),
    /// A REPLY.
    Reply(wire::Reply),
    /// Any other record that keeps its place in the queue (an ITEM, a CREDIT).
    Frames(Frames),
}

impl Outgoing {
    /// The frames of this answer sent on its own on connection `conn` of a node of
    /// `generation`.
    pub(crate) fn alone(&self, generation: NonZeroU64, conn: ConnId) -> Frames {
        match self {
            Outgoing::Accept(call_id) => Record::Accept(wire::Accept {
                call_id: *call_id,
                generation,
                connection_id: conn.0,
            })
            .encode(),
            Outgoing::Reply(r) => Record::Reply(r.clone()).encode(),
            Outgoing::Frames(f) => f.clone(),
        }
    }
}

/// The answers waiting per link: the connection they are for, and the answers in order.
#[derive(Default)]
pub(crate) struct AnswerQueue {
    queued: HashMap<LinkKey, (ConnId, VecDeque<Outgoing>)>,
}

impl AnswerQueue {
    /// True if answers for connection `conn` of link `route` wait (a new one goes behind).
    pub(crate) fn is_waiting(&self, route: LinkKey, conn: ConnId) -> bool {
        self.queued
            .get(&route)
            .is_some_and(|(c, q)| *c == conn && !q.is_empty())
    }

    /// Queues `out` for connection `conn` of link `route`, behind what waits there; what
    /// waited for an older connection of the link is dropped.
    pub(crate) fn hold(&mut self, route: LinkKey, conn: ConnId, out: Outgoing) {
        let entry = self
            .queued
            .entry(route)
            .or_insert_with(|| (conn, VecDeque::new()));
        if entry.0 != conn {
            *entry = (conn, VecDeque::new());
        }
        entry.1.push_back(out);
    }

    /// True if nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Sends what waits, in order per link, while `send` takes it. `current` says a link's
    /// current connection and the capabilities in effect on it (whether it packs answers,
    /// and in which form); a link whose connection is not the one its answers were for
    /// drops them (their callers fail the calls on the loss).
    pub(crate) fn flush(
        &mut self,
        generation: NonZeroU64,
        current: impl Fn(LinkKey) -> Option<(ConnId, Capabilities)>,
        mut send: impl FnMut(LinkKey, &[Vec<u8>]) -> Sent,
    ) {
        let links: Vec<LinkKey> = self.queued.keys().copied().collect();
        for route in links {
            let Some((conn, mut queue)) = self.queued.remove(&route) else {
                continue;
            };
            let Some((now_conn, caps)) = current(route) else {
                continue;
            };
            if now_conn != conn {
                continue;
            }
            while !queue.is_empty() {
                let (frames, used) = next_record(&queue, generation, conn, caps);
                match send(route, &frames) {
                    Sent::Taken => {
                        queue.drain(..used);
                    }
                    Sent::Full => {
                        self.queued.insert(route, (conn, queue));
                        break;
                    }
                    Sent::Gone => break,
                }
            }
        }
    }
}

/// The next record to send from the front of `queue`, and how many queued answers it
/// carries: an ANSWERS record of the answers at the front where the connection packs them
/// (`caps` hold `answers`) and they stand for two records or more, in the offset form
/// (ANSWERS16) where `caps` hold `ids16` too, else the front answer alone.
fn next_record(
    queue: &VecDeque<Outgoing>,
    generation: NonZeroU64,
    conn: ConnId,
    caps: Capabilities,
) -> (Frames, usize) {
    if caps.contains(Capabilities::ANSWERS) {
        let (entries, used) = pack_front(queue);
        if let Ok(a) = Answers::new(generation, conn.0, entries) {
            let a = if caps.contains(Capabilities::IDS16) {
                a.with_offsets()
            } else {
                a
            };
            return (Record::Answers(a).encode(), used);
        }
    }
    match queue.front() {
        Some(out) => (out.alone(generation, conn), 1),
        None => (Vec::new(), 0),
    }
}

/// The ANSWERS entries of the answers at the front of `queue`, within this node's bounds
/// (see [`wire::pack_front`]).
fn pack_front(queue: &VecDeque<Outgoing>) -> (Vec<(NonZeroU64, Answer)>, usize) {
    let pending = queue.iter().map(|out| match out {
        Outgoing::Accept(call_id) => Pending::Accept(*call_id),
        Outgoing::Reply(r) => Pending::Reply(r),
        Outgoing::Frames(_) => Pending::Other,
    });
    wire::pack_front(pending, ANSWERS_MAX_ENTRIES, ANSWERS_MAX_PAYLOAD)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use bytes::Bytes;
    use wire::ReplyCode;

    fn id(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    fn reply(n: u64, len: usize) -> Outgoing {
        Outgoing::Reply(wire::Reply {
            call_id: id(n),
            code: ReplyCode::Ok,
            payload: Bytes::from(vec![0; len]),
            replayed: false,
        })
    }

    /// MISSION K5, X4: answers that waited together pack in order, an ACCEPT next to its
    /// call's REPLY makes one entry, and a pack stops at its entry and payload bounds and
    /// before any record that is not an answer.
    #[test]
    fn k5_x4_answers_pack_in_order_within_their_bounds() {
        let q: VecDeque<Outgoing> = vec![
            Outgoing::Accept(id(1)),
            reply(1, 1),
            Outgoing::Accept(id(2)),
            reply(3, 1),
            Outgoing::Frames(vec![vec![1]]),
            reply(2, 1),
        ]
        .into();
        let (entries, used) = pack_front(&q);
        assert_eq!(used, 4);
        assert_eq!(
            entries,
            vec![
                (
                    id(1),
                    Answer::AcceptReply(ReplyCode::Ok, Bytes::from(vec![0]), false)
                ),
                (id(2), Answer::Accept),
                (
                    id(3),
                    Answer::Reply(ReplyCode::Ok, Bytes::from(vec![0]), false)
                ),
            ]
        );

        let many: VecDeque<Outgoing> = (1..=100).map(|n| Outgoing::Accept(id(n))).collect();
        let (entries, used) = pack_front(&many);
        assert_eq!(
            (entries.len(), used),
            (ANSWERS_MAX_ENTRIES, ANSWERS_MAX_ENTRIES)
        );

        let big: VecDeque<Outgoing> =
            vec![reply(1, ANSWERS_MAX_PAYLOAD), reply(2, 1), reply(3, 1)].into();
        let (entries, used) = pack_front(&big);
        assert_eq!(
            (entries.len(), used),
            (1, 1),
            "the payload bound ends the pack"
        );
        let (frames, used) = next_record(&big, id(5), ConnId(1), Capabilities::ANSWERS);
        assert_eq!(used, 1);
        assert_eq!(frames[0][3], 0x09, "a lone REPLY is never wrapped");

        let (frames, used) = next_record(&q, id(5), ConnId(1), Capabilities::NONE);
        assert_eq!(
            (frames[0][3], used),
            (0x08, 1),
            "no packing where not negotiated"
        );
        let (frames, used) = next_record(&q, id(5), ConnId(1), Capabilities::ANSWERS);
        assert_eq!((frames[0][3], used), (0x11, 4));
        let both = Capabilities::ANSWERS.union(Capabilities::IDS16);
        let (short, used) = next_record(&q, id(5), ConnId(1), both);
        assert_eq!(
            (short[0][3], used),
            (0x14, 4),
            "ANSWERS16 where ids16 is on"
        );
        assert_eq!(
            frames[0].len() - short[0].len(),
            3 * 6 - 8,
            "three ids of two bytes, not eight, and one base"
        );
        let only_ids = Capabilities::IDS16;
        let (frames, _) = next_record(&q, id(5), ConnId(1), only_ids);
        assert_eq!(frames[0][3], 0x08, "ids16 alone packs nothing");
    }

    /// An answer is owed while its connection lasts (MISSION C3, X4): a full pipe keeps it,
    /// in order, for the next flush; a connection that is gone, or replaced by another one
    /// of the link, drops what waited for it.
    #[test]
    fn c3_x4_a_full_pipe_delays_answers_and_a_gone_connection_drops_them() {
        let link = <LinkKey as crate::proto::node::keys::Key>::from_index(0);
        let gen = id(1);
        let mut q = AnswerQueue::default();
        q.hold(link, ConnId(1), Outgoing::Accept(id(1)));
        q.hold(link, ConnId(1), reply(1, 1));
        let current = |_| Some((ConnId(1), Capabilities::NONE));
        let mut seen = Vec::new();
        q.flush(gen, current, |_, frames| {
            seen.push(frames.to_vec());
            Sent::Full
        });
        assert_eq!(seen.len(), 1, "nothing after a full pipe is tried");
        assert!(q.is_waiting(link, ConnId(1)));
        let mut sent = Vec::new();
        q.flush(gen, current, |_, frames| {
            sent.push(frames.to_vec());
            Sent::Taken
        });
        assert_eq!(sent.len(), 2, "both, in order, once the pipe has room");
        assert_eq!(sent[0], seen[0], "the ACCEPT first");
        assert!(q.is_empty());

        q.hold(link, ConnId(1), reply(2, 1));
        q.flush(gen, current, |_, _| Sent::Gone);
        assert!(q.is_empty(), "a gone connection drops what waited for it");
        q.hold(link, ConnId(1), reply(3, 1));
        let mut tried = false;
        q.flush(
            gen,
            |_| Some((ConnId(2), Capabilities::NONE)),
            |_, _| {
                tried = true;
                Sent::Taken
            },
        );
        assert!(
            !tried,
            "answers of the old connection never reach the new one"
        );
        assert!(q.is_empty());
    }
}
