//! Receiving: one rotation of the fair receive loop under the scheduler's caps (MISSION
//! R1-R3): reading the sockets the scheduler names, staging a PACK's or PUBPACK's records
//! one by one, handing each record in its unit's turn to its subscription or to the node
//! core, and the application backlog held while its queue is paused (R5).
//!
//! Where a record goes and what it means (a link's record, a connection notice of libzmq,
//! an unadmitted connection's first record, a replaced connection's late record), what a
//! link's record does in its connection's state, and what a PACK's records staged one by
//! one deliver and count are the node core's ([`core::handle_dialled_record`],
//! [`core::handle_bound_record`], [`core::handle_peer_record`], [`core::handle_packed`],
//! [`core::handle_run_end`]; [`crate::proto::node::received`] for the classifications,
//! whether a PACK is staged as its records and how they are charged to the caps). This file
//! reads, looks up the socket's slot and hands over, and is the core's [`ReceiveShell`]: how
//! a frame becomes a payload, and the effects of a link's records (the ACK it sends, the
//! calls it serves, the answers for the call table, the application's queue and its
//! backlogs, the received-records counter, an unadmitted connection's CURVE key, a dialled
//! socket's monitor).

use std::num::NonZeroU64;
use std::time::Instant;

use bytes::Bytes;

use super::parts::sockets::{Packed, Staged};
use super::parts::sockets::{Slot, SlotRole, Unit};
use super::{IoThread, LinkKey, SlotKey};
use crate::proto::node::core::{self, Answer, ReceiveShell};
use crate::proto::node::received::{self, Charges, MessageRun};
use crate::proto::node::source::Source;
use crate::proto::sched::{Action, ReadTarget, RotationEndReason, SharedSocketId};
use crate::proto::wire;
use crate::runtime::event::Delivery;
use crate::runtime::records::{self, Lane};
use crate::runtime::socket::{share_last, Frame};

/// Scheduler actions that share one reading of the clock.
///
/// A reading costs about 60 ns on the benchmark machine (a VM), and a record takes two or
/// three actions (read, deliver) of a few hundred ns each: reading the clock for each was
/// 15-20 % of a receiving I/O thread (`perf`, P1 64 B). The caps are then judged at most
/// `CLOCK_EVERY - 1` actions late (microseconds against a 1 ms turn and a 10 ms rotation), and
/// a record is processed with a `now` at most that much in the past, which a deadline judged
/// in seconds does not notice.
const CLOCK_EVERY: u32 = 8;

/// The receive rotation's clock: the monotonic clock, read once per [`CLOCK_EVERY`] actions.
#[derive(Default)]
struct CoarseClock {
    at: Option<Instant>,
    left: u32,
}

impl CoarseClock {
    /// Actions the last reading still serves after the one [`CoarseClock::now`] returned it
    /// for.
    fn left(&self) -> usize {
        self.left as usize
    }

    /// `n` more actions (at most [`CoarseClock::left`]) took the last reading.
    fn used(&mut self, n: usize) {
        self.left = self
            .left
            .saturating_sub(u32::try_from(n).unwrap_or(u32::MAX));
    }

    fn now(&mut self) -> Instant {
        match self.at {
            Some(at) if self.left > 0 => {
                self.left -= 1;
                at
            }
            _ => {
                let at = Instant::now();
                self.at = Some(at);
                self.left = CLOCK_EVERY - 1;
                at
            }
        }
    }
}

impl IoThread {
    /// One rotation of the receive loop (MISSION R1-R3): the scheduler says which socket to
    /// read and whose record to process next, under its count, byte and time caps; the next
    /// rotation starts right after the entry where this one stopped. Sockets not in the
    /// readable set (or held back by a paused application queue) are answered "would block"
    /// without a syscall; a receive that finds nothing takes its socket out of the set.
    ///
    /// Returns true if the scheduler holds work that readiness cannot show (a rotation cut by
    /// its time cap, records read but not handed out): the loop then waits again without
    /// sleeping. A socket with records still queued in libzmq stays readable, so the next
    /// wait does not sleep for it without this flag.
    pub(super) fn receive_rotation(&mut self) -> bool {
        // The scheduler learns which sockets have records from the readable set; a receive
        // that finds nothing ("would block") takes a socket out of both.
        for &slot in self.sockets.ready.readable() {
            if self.app.is_held(slot) {
                continue;
            }
            match self.sockets.get(slot) {
                Some(Slot {
                    shared: Some(sid), ..
                }) => self
                    .receiving
                    .sched
                    .handle_readable(ReadTarget::Shared(*sid)),
                Some(_) => self
                    .receiving
                    .sched
                    .handle_readable(ReadTarget::Unit(Unit::Socket(slot))),
                _ => {}
            }
        }
        let mut clock = CoarseClock::default();
        loop {
            let now = clock.now();
            match self.receiving.sched.poll_action(now) {
                // Wait again without sleeping only if the scheduler holds work that socket
                // readiness cannot show: a rotation cut by its time cap, or records read but
                // not handed out. A socket left with records (a turn ended by a cap) stays in
                // the readable set, so the next wait does not sleep for it anyway.
                Action::Yield(end) => {
                    return end.reason == RotationEndReason::TimeCap
                        || self.receiving.sched.has_staged()
                }
                Action::Deliver { unit, record } => self.on_turn(unit, record, now, &mut clock),
                Action::Read(req) => {
                    let slot = match req.target() {
                        ReadTarget::Unit(Unit::Socket(s)) => Some(s),
                        ReadTarget::Shared(sid) => self.slot_of_shared(sid),
                        ReadTarget::Unit(_) => None,
                    };
                    let frames = match slot {
                        Some(s) if self.sockets.ready.is_readable(s) && !self.app.is_held(s) => {
                            self.sockets.recv_one(s)
                        }
                        _ => None,
                    };
                    let (Some(slot), Some(mut frames)) = (slot, frames) else {
                        self.receiving.sched.handle_would_block(req);
                        continue;
                    };
                    let len = frames.iter().map(|f| f.as_ref().len()).sum();
                    let (owner, staged) = match req.target() {
                        ReadTarget::Shared(_) if !frames.is_empty() => {
                            let owner = self
                                .core
                                .accepting
                                .inbound
                                .get(&slot)
                                .and_then(|m| m.get(frames[0].as_ref()))
                                .and_then(|k| {
                                    self.core.links[*k]
                                        .conn
                                        .as_ref()
                                        .map(|c| Unit::Peer(*k, c.id))
                                })
                                .unwrap_or(Unit::Admission(slot));
                            // Read unshared under CURVE (`recv_one`): an admitted
                            // connection's payload is shared now, as on receipt otherwise.
                            if self.local.curve.is_some() && matches!(owner, Unit::Peer(..)) {
                                share_last(&mut frames);
                            }
                            let route = frames.remove(0);
                            (
                                owner,
                                Staged::Frames {
                                    route: Some(route),
                                    frames,
                                },
                            )
                        }
                        _ => (
                            Unit::Socket(slot),
                            Staged::Frames {
                                route: None,
                                frames,
                            },
                        ),
                    };
                    // A PACK is staged as the MESSAGEs it stands for, each counted by the caps.
                    let (req, staged) = match self.unpack(owner, &staged, len) {
                        Some(parts) => {
                            match self.receiving.sched.handle_read_parts(req, owner, parts) {
                                Ok(()) => continue,
                                // Not a unit (cannot be: `unpack` found its link): whole, below.
                                Err(rejected) => (rejected.into_parts().0, staged),
                            }
                        }
                        None => (req, staged),
                    };
                    // A PUBPACK likewise, as the PUBLISHes it stands for (WIRE.md §7.5).
                    let (req, staged) = match self.unpack_published(owner, &staged, len) {
                        Some(parts) => {
                            match self.receiving.sched.handle_read_parts(req, owner, parts) {
                                Ok(()) => continue,
                                Err(rejected) => (rejected.into_parts().0, staged),
                            }
                        }
                        None => (req, staged),
                    };
                    if let Err(rejected) = self.receiving.sched.handle_read(req, owner, staged, len)
                    {
                        // The owner is not a unit (yet): account it to the socket's admission unit.
                        let (req, staged) = rejected.into_parts();
                        if self
                            .receiving
                            .sched
                            .handle_read(req, Unit::Admission(slot), staged, len)
                            .is_err()
                        {
                            tracing::debug!("record dropped: no scheduler unit for it");
                        }
                    }
                }
            }
        }
    }

    pub(super) fn slot_of_shared(&self, sid: SharedSocketId) -> Option<SlotKey> {
        self.sockets.shared.get(&sid).copied()
    }

    /// The records of a PACK just read for `owner`, each with its share of the read's `len`
    /// bytes, if the record is a valid PACK of a link's ready connection where `pack` is in
    /// effect. Anything else (a malformed PACK included) is staged whole, and fails its
    /// connection in its turn as any malformed record does.
    fn unpack(
        &self,
        owner: Unit,
        staged: &Staged,
        len: usize,
    ) -> Option<impl Iterator<Item = (Staged, usize)>> {
        let Staged::Frames { frames, .. } = staged else {
            return None;
        };
        let (link, conn, frames) = match owner {
            Unit::Peer(k, id) => (k, id, frames.as_slice()),
            Unit::Socket(slot) => {
                let Some(Slot {
                    role: SlotRole::Dialled(k),
                    ..
                }) = self.sockets.get(slot)
                else {
                    return None;
                };
                let c = self.core.links.get(*k)?.conn.as_ref()?;
                // A dialled ROUTER reads the bound peer's routing id first.
                let skip = usize::from(c.route.is_some());
                (*k, c.id, frames.get(skip..)?)
            }
            Unit::Admission(_) => return None,
        };
        if !received::is_kind(frames.first()?.as_ref(), wire::Kind::Pack) {
            return None;
        }
        let current = self.core.links.get(link)?.conn.as_ref();
        if !received::unpacks(current, conn, self.conn_caps(link)) {
            return None;
        }
        let Ok(wire::Record::Pack(p)) =
            wire::Record::decode_in(frames, wire::Capabilities::PACK, Frame::to_bytes)
        else {
            return None;
        };
        let (channel, payloads) = p.into_parts();
        let channel = Bytes::from(channel.into_string().into_bytes());
        let mut charges = Charges::new(len, payloads.iter().map(Bytes::len));
        let parts = payloads.into_iter().map(move |payload| {
            let bytes = charges.next(payload.len());
            let packed = Packed {
                link,
                conn,
                channel: channel.clone(),
                payload,
            };
            (Staged::Packed(packed), bytes)
        });
        Some(parts)
    }

    /// A record the scheduler handed out for `unit`, and the rest of the unit's staged
    /// records in this turn (a PACK's, say), exactly as the scheduler would hand them out
    /// next, without a pass through the rotation per record.
    ///
    /// The records of a PACK that one reading of the clock serves leave the scheduler together
    /// ([`next_in_turn_many`](crate::proto::sched::ReceiveScheduler::next_in_turn_many)): the
    /// calls of `next_in_turn` they stand for would have had that reading, and delivering a
    /// PACK's record changes nothing in the scheduler, so the same records go, judged by the
    /// same caps. Any other record leaves alone, through `next_in_turn`, as it is processed
    /// (its processing may end the turn).
    fn on_turn(&mut self, unit: Unit, record: Staged, now: Instant, clock: &mut CoarseClock) {
        let mut run = None;
        self.on_staged(unit, record, now, &mut run);
        let mut taken = std::mem::take(&mut self.receiving.taken);
        loop {
            let now = clock.now();
            let n = self.receiving.sched.next_in_turn_many(
                unit,
                now,
                clock.left() + 1,
                |r| matches!(r, Staged::Packed(_)),
                &mut taken,
            );
            if n > 0 {
                clock.used(n - 1);
                for record in taken.drain(..) {
                    self.on_staged(unit, record, now, &mut run);
                }
                continue;
            }
            let Some(record) = self.receiving.sched.next_in_turn(unit, now) else {
                break;
            };
            self.on_staged(unit, record, now, &mut run);
        }
        self.receiving.taken = taken;
        core::handle_run_end(self, run);
    }

    /// Processes a record in its unit's turn. A MESSAGE of a PACK joins `run` (a run of
    /// another connection ends first); any other record ends the run before it is processed.
    fn on_staged(
        &mut self,
        unit: Unit,
        staged: Staged,
        now: Instant,
        run: &mut Option<MessageRun>,
    ) {
        let (route, frames) = match staged {
            Staged::Packed(p) => {
                core::handle_packed(self, p.link, p.conn, p.channel, p.payload, now, run);
                return;
            }
            Staged::Published(p) => {
                core::handle_run_end(self, run.take());
                self.on_published(p, now);
                return;
            }
            Staged::Frames { route, frames } => {
                core::handle_run_end(self, run.take());
                (route, frames)
            }
        };
        match (unit, route) {
            (Unit::Socket(slot), _) => self.on_frames(slot, frames, now),
            // The routing id was looked up when the record was read.
            (Unit::Peer(k, conn), Some(_)) => core::handle_peer_record(self, k, conn, &frames, now),
            (Unit::Admission(slot), Some(route)) => {
                let Some(Some(SlotRole::Bound(lane))) = self
                    .sockets
                    .slots
                    .get(slot)
                    .map(|s| s.as_ref().map(|s| s.role))
                else {
                    return;
                };
                core::handle_bound_record(self, slot, lane, route, frames, now);
            }
            (_, None) => {}
        }
    }

    /// A record read from socket `slot`, for its subscription, or for the core as a
    /// dialled or bound socket's record.
    pub(super) fn on_frames(&mut self, slot: SlotKey, mut frames: Vec<Frame>, now: Instant) {
        let Some(s) = self.sockets.get(slot) else {
            return;
        };
        match s.role {
            SlotRole::Sub(i) => self.on_fanout(i, frames, now),
            SlotRole::Dialled(k) => core::handle_dialled_record(self, k, &frames, now),
            SlotRole::Bound(lane) => {
                if frames.is_empty() {
                    return;
                }
                let route = frames.remove(0);
                core::handle_bound_record(self, slot, lane, route, frames, now);
            }
        }
    }

    /// Moves held records to the application while its queue has room, and recomputes which
    /// sockets a full backlog holds back (see [`super::parts::app::AppQueue::release`]).
    pub(super) fn release_backlogs(&mut self) {
        let links = &self.core.links;
        self.app
            .release(|k| links.get(k).and_then(|l| l.conn.as_ref()).map(|c| c.slot));
    }
}

impl ReceiveShell for IoThread {
    type Frame = Frame;

    fn payload(frame: &Frame) -> Bytes {
        frame.to_bytes()
    }

    fn send_ack(&mut self, k: LinkKey, id: u64) {
        self.send_liveness(k, records::ack(id));
    }

    fn serve_request(&mut self, k: LinkKey, request: wire::Request, now: Instant) {
        self.on_request(k, request, now);
    }

    fn serve_batch(&mut self, k: LinkKey, requests: Vec<wire::Request>, now: Instant) {
        self.on_batch(k, requests, now);
    }

    fn serve_cancel(&mut self, k: LinkKey, call_id: NonZeroU64, now: Instant) {
        self.on_cancel(k, call_id, now);
    }

    fn serve_credit(&mut self, k: LinkKey, call_id: NonZeroU64, items: u64, now: Instant) {
        self.on_credit(k, call_id, items, now);
    }

    fn handle_answer(&mut self, k: LinkKey, answer: Answer, now: Instant) {
        self.on_call_answer(k, answer, now);
    }

    fn app_room(&self, k: LinkKey) -> usize {
        self.app.room(k)
    }

    fn deliver_now(&mut self, source: Source, channel: Bytes, payload: Bytes) {
        self.app.deliver_now(Delivery {
            source,
            channel,
            payload,
        });
    }

    fn deliver(&mut self, k: LinkKey, source: Source, channel: Bytes, payload: Bytes) {
        let d = Delivery {
            source,
            channel,
            payload,
        };
        self.app.deliver(k, d);
    }

    fn count_delivered(&mut self, records: u64) {
        metrics::counter!("zmesh_app_records_received_total").increment(records);
    }

    fn first_record(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: Frame,
        frames: &mut [Frame],
        now: Instant,
    ) {
        self.on_unknown_inbound(slot, lane, route, frames, now);
    }

    fn monitor_done(&mut self, slot: SlotKey) {
        // The loop's next monitor phase reads what the monitor holds and stops it
        // (`IoThread::drain_monitor`).
        self.sockets.ready.recheck_monitor(slot);
    }
}
