//! The receive loop of a simulated node run: what arrives on a connection waits in that
//! connection's socket until the library's fair receive scheduler
//! ([`ReceiveScheduler`](zmesh::proto::sched::ReceiveScheduler), in readiness mode as the
//! I/O thread runs it) gives the connection a turn, and the loop runs rotations until every
//! socket is empty. The rules of MISSION R2 and R4 are checked on every rotation against the
//! glue's own count of what each connection was handed, with the count cap written down
//! here rather than read from the core.
//!
//! Every connection is a unit of its own ([`Source::Single`], as a dialled socket is). Virtual
//! time does not pass within a step, so the time caps never bind; the count cap does, when a
//! flooding peer or a healed partition leaves more than 64 records waiting on one connection.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use zmesh::proto::sched::{Action, ReadTarget, ReceiveScheduler, Source};

use super::SimNode;
use crate::net::{Delivery, Link, NetConn, NodeIx};
use crate::Ctx;

/// The records one connection may be handed in one rotation (MISSION R2), written down here
/// so that a core with another cap is caught.
const COUNT_CAP: usize = 64;

/// The most actions one call of [`SimNode::handle_receive`] may take before the simulator
/// calls it stuck (every rotation hands out at least one record, so it never needs this).
const ACTIONS_BOUND: u64 = 10_000_000;

/// What arrived on a connection, as its socket holds it.
#[derive(Debug)]
pub(super) struct Arrival {
    peer_node: NodeIx,
    link: Link,
    delivery: Delivery,
}

/// The node run's sockets and its receive scheduler.
pub(super) struct Receiver {
    sched: ReceiveScheduler<NetConn, Arrival>,
    /// What each connection's socket holds, not read yet.
    sockets: BTreeMap<NetConn, VecDeque<Arrival>>,
    /// Records handed out per connection in the rotation under way.
    handed: BTreeMap<NetConn, usize>,
    /// The connections whose sockets held something when the rotation under way began.
    waiting: Option<BTreeSet<NetConn>>,
}

impl Receiver {
    pub(super) fn new() -> Receiver {
        Receiver {
            sched: ReceiveScheduler::new().with_readiness(),
            sockets: BTreeMap::new(),
            handed: BTreeMap::new(),
            waiting: None,
        }
    }

    /// The node no longer holds `conn`: what its socket still held is gone with it.
    pub(super) fn forget(&mut self, conn: NetConn) {
        self.sockets.remove(&conn);
        let _ = self.sched.remove_unit(conn);
    }

    fn is_empty(&self) -> bool {
        self.sockets.values().all(VecDeque::is_empty) && !self.sched.has_staged()
    }
}

impl SimNode {
    /// Something arrived on `conn`: it waits in the connection's socket for
    /// [`Self::handle_receive`] (with the receive loop modelled; otherwise it is handled
    /// now, [`Self::handle_delivery`]).
    pub fn enqueue(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        peer_node: NodeIx,
        link: Link,
        delivery: Delivery,
    ) {
        let Some(rx) = self.rx.as_mut() else {
            self.handle_delivery(ctx, conn, peer_node, link, delivery);
            return;
        };
        if !rx.sched.contains(conn) && rx.sched.add_unit(conn, Source::Single).is_err() {
            return;
        }
        rx.sockets.entry(conn).or_default().push_back(Arrival {
            peer_node,
            link,
            delivery,
        });
        rx.sched.handle_readable(ReadTarget::Unit(conn));
    }

    /// Runs the receive loop until every socket is empty: rotation after rotation, each
    /// connection with something to read gets one turn of at most 64 records per rotation,
    /// and the answers decided in a rotation leave at its end (packed where `answers` is in
    /// effect), as the runtime's leave at the end of a loop turn.
    pub fn handle_receive(&mut self, ctx: &mut Ctx<'_>) {
        let now = self.at(ctx.now);
        let mut actions = 0u64;
        loop {
            // A violation ends the run at this step: the loop need not go on.
            if !ctx.truth.violations.is_empty() {
                return;
            }
            let Some(rx) = self.rx.as_mut() else {
                return;
            };
            if rx.waiting.is_none() {
                if rx.is_empty() {
                    break;
                }
                let waiting = rx
                    .sockets
                    .iter()
                    .filter(|(_, s)| !s.is_empty())
                    .map(|(&k, _)| k)
                    .collect();
                rx.waiting = Some(waiting);
            }
            actions += 1;
            if actions > ACTIONS_BOUND {
                ctx.truth.violation(
                    "progress",
                    format!("{}: the receive loop does not end", self.me.rid),
                );
                return;
            }
            match rx.sched.poll_action(now) {
                Action::Read(read) => {
                    let ReadTarget::Unit(conn) = read.target() else {
                        rx.sched.handle_would_block(read);
                        continue;
                    };
                    match rx.sockets.get_mut(&conn).and_then(VecDeque::pop_front) {
                        Some(a) => {
                            let len = match &a.delivery {
                                Delivery::Frames(f) => f.iter().map(Vec::len).sum(),
                                Delivery::Connected | Delivery::Closed => 0,
                            };
                            let _ = rx.sched.handle_read(read, conn, a, len);
                        }
                        None => rx.sched.handle_would_block(read),
                    }
                }
                Action::Deliver { unit, record } => {
                    let handed = rx.handed.entry(unit).or_default();
                    *handed += 1;
                    if *handed > COUNT_CAP {
                        let detail = format!(
                            "{} was handed record {} of {unit} in one rotation (cap {COUNT_CAP})",
                            self.me.rid, *handed
                        );
                        ctx.truth.violation("receive_count_cap", detail);
                    }
                    if *handed == COUNT_CAP {
                        ctx.truth.stats.count_cap_turns += 1;
                    }
                    let Arrival {
                        peer_node,
                        link,
                        delivery,
                    } = record;
                    self.on_delivery(ctx, unit, peer_node, link, delivery);
                }
                Action::Yield(_) => {
                    ctx.truth.stats.rotations += 1;
                    let handed = std::mem::take(&mut rx.handed);
                    let waiting = rx.waiting.take().unwrap_or_default();
                    // Every connection that had something to read when the rotation began,
                    // and that the node still holds, was read in it (MISSION R2, R4).
                    let skipped: Vec<NetConn> = waiting
                        .into_iter()
                        .filter(|k| rx.sockets.contains_key(k) && !handed.contains_key(k))
                        .collect();
                    if let Some(k) = skipped.first() {
                        let detail = format!(
                            "{}: {k} had records waiting and was not read in the rotation",
                            self.me.rid
                        );
                        ctx.truth.violation("every_waiting_connection_read", detail);
                    }
                    self.flush_answers(ctx);
                }
            }
        }
        // Between steps the ring holds no idle connection: a unit comes back with its next
        // arrival.
        if let Some(rx) = self.rx.as_mut() {
            let idle: Vec<NetConn> = rx.sockets.keys().copied().collect();
            for k in idle {
                rx.forget(k);
            }
        }
        self.flush_answers(ctx);
    }
}
