//! The callee side of a simulated node run, driven through the library's node core
//! ([`Serving`], `zmesh::proto::node::callee`) as the I/O thread drives it
//! (src/runtime/io/parts/callee.rs): the simulator answers for its served channel
//! ([`ServedChannel`]), runs the calls the core hands out (handlers that take time, behind the
//! idempotency guard's record), sends the ACCEPTs, REPLYs and ITEMs the core decides on, and
//! tells the core how each handler ended. What happens to a call is the core's decision:
//! refusals, the execution queues with their mailbox and conflation, the ttl at dispatch,
//! CANCEL, the orphaned waiting calls, the drain. The invariants judge those decisions against
//! the simulator's own record of what it accepted, started and was told.
//!
//! A running handler whose caller no longer waits (its CANCEL arrived, its caller's
//! connection is gone, its ttl passed, or the core answered it at the drain) is signalled: a
//! query's is stopped at once and never completes its effect, a command's finishes (half of
//! them observe the signal and finish within 50 ms).

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;
use zmesh::proto::calls::{CallShape, ServeId};
use zmesh::proto::contract::{self, ExecutionKind, Semantics as Declared};
use zmesh::proto::handshake::Capabilities;
use zmesh::proto::node::callee::{
    Cause, Event, From, ItemSent, MethodPlan, Refusal, ServedChannel, Serving, Streamed,
};
use zmesh::proto::wire::{self, Lane, Record, ReplyCode, Semantics};

use super::{Handler, SimNode};
use crate::net::{NetConn, NodeIx};
use crate::truth::{HeldAs, Started};
use crate::Ctx;

/// The method queries call.
pub(super) const QUERY_METHOD: &str = "query";
/// The method idempotent commands call: a setpoint, so a newer call takes the place of one
/// that still waits in its queue (conflation, MISSION K4).
pub(super) const SET_METHOD: &str = "set";
/// The method non-repeatable commands call (guarded ones with an idempotency key).
pub(super) const COMMAND_METHOD: &str = "command";
/// The stream method: a query whose handler sends items before its REPLY.
pub(super) const STREAM_METHOD: &str = "stream";

/// The commands run one at a time per shard of their arguments (keyed execution, MISSION
/// K4): a command waits in its shard's queue behind the one that runs there.
const SHARDS: u64 = 16;

/// How many calls may wait in one queue (the served channel's mailbox, MISSION K4): a burst
/// of calls for one server overflows it now and then.
const MAILBOX: usize = 8;

/// The node core's callee as a simulated node holds it: a job is a [`Job`], a stream item's
/// reply names the handler that waits for it, and a call's answers travel on a simulated
/// connection.
pub(super) type Core = Serving<Job, ServeId, NetConn>;

/// One accepted call, as the simulated service runs it.
#[derive(Debug)]
pub(super) struct Job {
    /// The simulator's name for the call.
    uid: u64,
    /// The connection its answers travel on.
    conn: NetConn,
    call_id: NonZeroU64,
    semantics: Semantics,
    /// The idempotency key of a guarded command.
    key: Option<String>,
    /// When its ttl passes.
    ttl_end: Option<Duration>,
    /// The time the handlers of its BATCH or CALLS record share, if it came in one.
    took: Option<Duration>,
    /// Its handler is stopped when its caller no longer waits (the method's plan).
    stops: bool,
}

/// A call accepted and not yet run, as the simulator knows it: the call's name and the queue
/// its shard puts it in (none for a method that runs at once).
#[derive(Debug, Clone)]
pub(super) struct Accepted {
    uid: u64,
    queue: Option<String>,
}

/// The calls accepted here and not run yet, by the connection their answers travel on and
/// the caller's call id.
pub(super) type AcceptedCalls = BTreeMap<(NetConn, NonZeroU64), Accepted>;

/// What the calls of one BATCH or CALLS record share at the callee: half of their handlers
/// take the same time, so that their REPLYs, like their ACCEPTs, are decided in one step and
/// leave packed where `answers` is in effect.
#[derive(Debug, Clone, Copy)]
pub(super) struct Group {
    took: Duration,
}

impl Group {
    /// What the calls of a BATCH or CALLS record that arrives now share.
    pub(super) fn draw(ctx: &mut Ctx<'_>) -> Group {
        Group {
            took: Duration::from_millis(ctx.rng.random_range(0..3000)),
        }
    }
}

/// The simulated service, as the core asks about it while one REQUEST is admitted.
struct Service {
    base: Instant,
    group: Option<Group>,
}

impl ServedChannel<NetConn> for Service {
    type Call = Job;
    type Job = Job;

    fn plan(&self, method: &str) -> Option<MethodPlan> {
        plan_of(method)
    }

    fn mailbox(&self) -> usize {
        MAILBOX
    }

    /// The simulated service has no authorizer.
    fn authorize(&self, _: &str, _: &str, _: Option<Declared>) -> Result<(), Refusal> {
        Ok(())
    }

    fn open(&self, from: From<NetConn>, req: &wire::Request, now: Instant) -> Job {
        let arrived = now.saturating_duration_since(self.base);
        Job {
            uid: crate::truth::uid_of(&req.payload),
            conn: from.key,
            call_id: req.call_id,
            semantics: req.semantics,
            key: req.idempotency_key.as_ref().map(|k| k.to_string()),
            ttl_end: req
                .ttl_ms
                .map(|ms| arrived + Duration::from_millis(ms.get())),
            took: self.group.map(|g| g.took),
            stops: false,
        }
    }

    /// The shard of the call's arguments.
    fn key(&self, call: &Job) -> Result<Option<String>, Refusal> {
        Ok(Some(shard_of(call.uid)))
    }

    fn job(&self, _: ServeId, mut call: Job, plan: &MethodPlan) -> Job {
        call.stops = plan.stops_on_cancel;
        call
    }
}

/// The plan of each method of the simulated service: queries and streams run at once, side
/// by side; commands run one at a time per shard, and a setpoint conflates.
fn plan_of(method: &str) -> Option<MethodPlan> {
    let (semantics, shape, execution, conflate) = match method {
        QUERY_METHOD => (
            Declared::Query,
            CallShape::Unary,
            ExecutionKind::Parallel,
            false,
        ),
        STREAM_METHOD => (
            Declared::Query,
            CallShape::Stream,
            ExecutionKind::Parallel,
            false,
        ),
        SET_METHOD => (
            Declared::IdempotentCommand,
            CallShape::Unary,
            ExecutionKind::Keyed,
            true,
        ),
        COMMAND_METHOD => (
            Declared::NonRepeatableCommand,
            CallShape::Unary,
            ExecutionKind::Keyed,
            false,
        ),
        _ => return None,
    };
    Some(MethodPlan {
        semantics: Some(semantics),
        shape,
        execution,
        conflate,
        stops_on_cancel: contract::stops_on_cancel(Some(semantics), None),
    })
}

/// The shard a call's arguments fall in.
fn shard_of(uid: u64) -> String {
    format!("s{}", uid % SHARDS)
}

/// The queue a call of `req` waits in, if its method has queues.
fn queue_of(req: &wire::Request) -> Option<String> {
    plan_of(req.method.as_str())
        .filter(|p| p.execution != ExecutionKind::Parallel)
        .map(|_| shard_of(crate::truth::uid_of(&req.payload)))
}

impl SimNode {
    /// Where the answers to a call that arrived on `conn` (lane `lane`, from host
    /// `peer_node`) go: a RouteMesh call is answered on the caller's Completion lane, a
    /// ClientServer call on its own connection; none for a call on a Completion lane or
    /// while the caller's Completion lane is not ready.
    pub(super) fn answer_conn(
        &self,
        conn: NetConn,
        lane: Lane,
        peer_node: NodeIx,
    ) -> Option<NetConn> {
        match lane {
            Lane::Application => self.ready_on(peer_node, Lane::Completion),
            Lane::Completion => None,
            Lane::ClientServer => Some(conn),
        }
    }

    /// A BATCH or CALLS record arrived on `conn`: the core says which of its calls go on to
    /// be admitted one by one (MISSION K5).
    pub(super) fn on_batch(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        lane: Lane,
        peer_node: NodeIx,
        requests: Vec<wire::Request>,
    ) {
        let Some(answer) = self.answer_conn(conn, lane, peer_node) else {
            return;
        };
        let group = Some(Group::draw(ctx));
        let requests = self.serving.handle_batch(answer, requests);
        self.serve_outputs(ctx);
        for r in requests {
            self.on_request(ctx, conn, lane, peer_node, r, group);
        }
    }

    /// A REQUEST arrived on `conn`: the core admits it (or refuses it), its ACCEPT leaves,
    /// and the core says when it runs.
    pub(super) fn on_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        lane: Lane,
        peer_node: NodeIx,
        r: wire::Request,
        group: Option<Group>,
    ) {
        let now = self.at(ctx.now);
        // A RouteMesh call is answered on the caller's Completion lane.
        let Some(answer) = self.answer_conn(conn, lane, peer_node) else {
            return;
        };
        let Some(peer) = self.conns.get(&conn).and_then(|c| c.ready.as_ref()) else {
            return;
        };
        let from = From {
            key: answer,
            rid: peer.peer.rid.clone(),
            generation: peer.peer.generation,
            credit: self.caps_on(conn).contains(Capabilities::CREDIT),
        };
        let service = self.spec.serves.then_some(Service {
            base: self.base,
            group,
        });
        let accepted = Accepted {
            uid: crate::truth::uid_of(&r.payload),
            queue: queue_of(&r),
        };
        let call_id = r.call_id;
        let waiting = self.waiting_in(accepted.queue.as_deref());
        let busy = ctx.truth.stats.busy;
        let taken = self.serving.handle_request(service.as_ref(), from, r, now);
        if let Some(accepting) = taken {
            let generation = NonZeroU64::new(self.me.generation).unwrap_or(NonZeroU64::MIN);
            let sent = self.conns.get(&answer).map(|c| c.id.0).is_some_and(|id| {
                let accept = Record::Accept(wire::Accept {
                    call_id: accepting.call_id(),
                    generation,
                    connection_id: id,
                });
                self.send_answer(ctx, answer, accept)
            });
            if sent {
                self.accepted.insert((answer, call_id), accepted.clone());
            }
            self.serving.handle_accept_sent(accepting, sent, now);
        }
        self.serve_outputs(ctx);
        if ctx.truth.stats.busy > busy && waiting < MAILBOX {
            let detail = format!(
                "{}: call u{} was refused Busy while {waiting} calls of live callers waited in its queue {:?}, fewer than its mailbox of {MAILBOX}",
                self.me.rid, accepted.uid, accepted.queue
            );
            ctx.truth.violation("busy_only_when_full", detail);
        }
    }

    /// The calls accepted here, not run yet and not answered, that wait in `queue` for live
    /// callers (the place they hold in its mailbox).
    fn waiting_in(&self, queue: Option<&str>) -> usize {
        let Some(queue) = queue else {
            return 0;
        };
        self.accepted
            .values()
            .filter(|a| a.queue.as_deref() == Some(queue))
            .count()
    }

    /// A CANCEL for `call_id` arrived on `conn` (WIRE.md §4.13): the caller no longer waits
    /// for a call it sent on this connection.
    pub(super) fn on_cancel(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        lane: Lane,
        peer_node: NodeIx,
        call_id: NonZeroU64,
    ) {
        let now = self.at(ctx.now);
        // The call's answers travel on the caller's Completion lane (RouteMesh).
        let Some(answer) = self.answer_conn(conn, lane, peer_node) else {
            return;
        };
        // Ground truth, from what this glue accepted and started, not from the core.
        let queued = self.accepted.remove(&(answer, call_id)).map(|a| a.uid);
        let running = self
            .handlers
            .values()
            .find(|h| h.conn == answer && h.call_id == call_id)
            .map(|h| h.uid);
        let (uid, held) = match (queued, running) {
            (Some(u), _) => (u, HeldAs::Queued),
            (None, Some(u)) => (u, HeldAs::Running),
            (None, None) => (0, HeldAs::Nothing),
        };
        ctx.trace(format!(
            "{} {conn} CANCEL of call {call_id} (u{uid}, {held:?})",
            self.me.rid
        ));
        ctx.truth.on_cancel_arrived(uid, self.ix, held);
        self.serving.handle_cancel(answer, call_id, now);
        self.serve_outputs(ctx);
    }

    /// The connection `conn` is gone: its calls' callers no longer wait. The core forgets
    /// the waiting ones and reports the running ones.
    pub(super) fn serve_connection_lost(&mut self, ctx: &mut Ctx<'_>, conn: NetConn) {
        let now = self.at(ctx.now);
        self.accepted.retain(|(c, _), _| *c != conn);
        self.serving.handle_connection_lost(conn, now);
        self.serve_outputs(ctx);
    }

    /// Acts on every output of the core, in the polling order of
    /// `zmesh::proto::node::callee`: events and runs after every input; before each answer,
    /// the overdue handlers and the stream items of calls that are over.
    pub(super) fn serve_outputs(&mut self, ctx: &mut Ctx<'_>) {
        let now = self.at(ctx.now);
        loop {
            self.serve_act(ctx);
            let mut acted = self.signal_overdue(ctx);
            for sid in self.serving.release_held() {
                acted = true;
                self.stream_over(ctx, sid);
            }
            if acted {
                continue;
            }
            let Some(a) = self.serving.poll_answer(now) else {
                return;
            };
            self.accepted.remove(&(a.key, a.reply.call_id));
            self.send_answer(ctx, a.key, Record::Reply(a.reply));
        }
    }

    /// The core's events, then the calls it hands out to run, in order.
    fn serve_act(&mut self, ctx: &mut Ctx<'_>) {
        loop {
            while let Some(event) = self.serving.poll_event() {
                self.on_serve_event(ctx, event);
            }
            let Some((sid, job)) = self.serving.poll_run() else {
                return;
            };
            self.run(ctx, sid, job);
        }
    }

    fn on_serve_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        match event {
            Event::CallersGone { calls, cause } => {
                for sid in calls {
                    let Some(uid) = self.handlers.get(&sid).map(|h| h.uid) else {
                        continue;
                    };
                    if cause == Cause::CallerGone {
                        ctx.truth.on_caller_gone(uid, self.ix);
                    }
                    if self.signal(ctx, sid) {
                        self.stopped(ctx, sid);
                    }
                }
            }
            Event::Busy => ctx.truth.stats.busy += 1,
            Event::Superseded => ctx.truth.stats.superseded += 1,
            Event::CancelIgnored | Event::CancelledQueued => {}
        }
    }

    /// Call `sid`'s turn came: its handler starts, unless the idempotency guard's record
    /// answers for it.
    fn run(&mut self, ctx: &mut Ctx<'_>, sid: ServeId, job: Job) {
        let now = self.at(ctx.now);
        self.accepted.remove(&(job.conn, job.call_id));
        let guarded = job.semantics == Semantics::NonRepeatableCommand && job.key.is_some();
        if guarded {
            let k = job.key.clone().unwrap_or_default();
            match ctx.truth.store_get(&self.me.rid, &k) {
                Some(Some(ran)) => {
                    // Replayed from the record: the handler does not run again.
                    let result = crate::truth::result_of(ran);
                    self.serving
                        .handle_done(sid, ReplyCode::Ok, result, true, now);
                    return;
                }
                Some(None) => {
                    self.serving.handle_done(
                        sid,
                        ReplyCode::UnknownOutcome,
                        Bytes::new(),
                        false,
                        now,
                    );
                    return;
                }
                None => ctx.truth.store_begin(&self.me.rid, &k),
            }
        }
        let started = Started {
            key: job.key.as_deref(),
            guarded,
            query: job.semantics == Semantics::Query,
            ttl_end: job.ttl_end,
        };
        ctx.truth
            .on_execute(job.uid, self.ix, &self.me.rid, started);
        let took = match job.took {
            Some(t) if ctx.rng.random_bool(0.5) => t,
            _ => Duration::from_millis(ctx.rng.random_range(0..3000)),
        };
        let stream = ctx.truth.stream_total(job.uid).map(|total| {
            let gap = Duration::from_millis(ctx.rng.random_range(0..20));
            super::Stream {
                total,
                sent: 0,
                gap,
                next_at: ctx.now + gap,
                window: self.caps_on(job.conn).contains(Capabilities::CREDIT),
                held: false,
            }
        });
        // A stream's handler ends once its last item left (`send_items`).
        let took = if stream.is_some() {
            Duration::from_secs(3600)
        } else {
            took
        };
        self.handlers.insert(
            sid,
            Handler {
                ends_at: ctx.now + took,
                uid: job.uid,
                key: job.key.filter(|_| guarded),
                stops: job.stops,
                conn: job.conn,
                call_id: job.call_id,
                stream,
            },
        );
    }

    /// Tells the handler of `sid` that nobody waits for its result any more. A handler its
    /// method lets the runtime stop (a query's) is stopped at once and never completes its
    /// effect; a command's may observe the signal and finish sooner, and finishes either
    /// way. Returns whether the handler was stopped.
    fn signal(&mut self, ctx: &mut Ctx<'_>, sid: ServeId) -> bool {
        let Some(h) = self.handlers.get_mut(&sid) else {
            return false;
        };
        if !h.stops {
            if ctx.rng.random_bool(0.5) {
                let soon = ctx.now + Duration::from_millis(ctx.rng.random_range(0..50));
                h.ends_at = h.ends_at.min(soon);
            }
            return false;
        }
        let uid = h.uid;
        self.handlers.remove(&sid);
        ctx.trace(format!("{} query handler of u{uid} stopped", self.me.rid));
        ctx.truth.on_query_stopped();
        true
    }

    /// The stopped handler of `sid` reports its end, as a stopped task does: nothing is sent
    /// for it (the core forgot or orphaned the call), and its queue moves on.
    fn stopped(&mut self, ctx: &mut Ctx<'_>, sid: ServeId) {
        let now = self.at(ctx.now);
        let payload = Bytes::from_static(b"the handler was stopped before it returned");
        self.serving
            .handle_done(sid, ReplyCode::Unavailable, payload, false, now);
    }

    /// Signals the handlers of running calls whose ttl passed (the core reports each once);
    /// one that was stopped is abandoned before its end is reported. Returns whether there
    /// was any.
    fn signal_overdue(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut any = false;
        while let Some(sid) = self.serving.poll_overdue() {
            any = true;
            if self.signal(ctx, sid) {
                self.serving.handle_abandon(sid);
                self.stopped(ctx, sid);
            }
        }
        any
    }

    /// The handler of `sid` ran to its end: its effect is done, and the core decides its
    /// REPLY.
    pub(super) fn finish_handler(&mut self, ctx: &mut Ctx<'_>, sid: ServeId) {
        let now = self.at(ctx.now);
        let Some(h) = self.handlers.remove(&sid) else {
            return;
        };
        if let Some(k) = &h.key {
            ctx.truth.store_done(&self.me.rid, k, h.uid);
        }
        ctx.truth.on_handler_done(h.uid, self.ix);
        let result = crate::truth::result_of(h.uid);
        self.serving
            .handle_done(sid, ReplyCode::Ok, result, false, now);
        self.serve_outputs(ctx);
    }

    /// What the core made of an item a stream handler produced: its ITEM leaves (after the
    /// answers that wait on its connection), or the stream is over.
    pub(super) fn streamed(&mut self, ctx: &mut Ctx<'_>, s: Streamed<ServeId, NetConn>) {
        let now = self.at(ctx.now);
        let item = match s {
            Streamed::Send(item) => item,
            Streamed::Over(sid) => {
                self.stream_over(ctx, sid);
                return;
            }
        };
        let sent = self.send_item(ctx, item.key, item.frames.clone());
        match self.serving.handle_item_sent(item, sent, now) {
            ItemSent::Sent(sid) => {
                let Some(h) = self.handlers.get_mut(&sid) else {
                    return;
                };
                let uid = h.uid;
                let Some(st) = h.stream.as_mut() else {
                    return;
                };
                st.sent += 1;
                st.held = false;
                st.next_at = ctx.now + st.gap;
                let window = st.window;
                ctx.truth.on_item_sent(uid, window);
            }
            ItemSent::Unsent { reply: sid, .. } => self.stream_over(ctx, sid),
        }
    }

    /// The handler of stream call `sid` hears that its stream is over (answered, cut,
    /// cancelled, its caller gone): it ends there, without completing its effect.
    pub(super) fn stream_over(&mut self, ctx: &mut Ctx<'_>, sid: ServeId) {
        if self.handlers.remove(&sid).is_some() {
            ctx.trace(format!("{} stream handler {sid:?} over", self.me.rid));
            self.stopped(ctx, sid);
        }
    }

    /// The handlers still running when the node stops are abandoned with it.
    pub(super) fn abandon_handlers(&mut self, ctx: &mut Ctx<'_>) {
        let left: Vec<ServeId> = self.handlers.keys().copied().collect();
        for sid in left {
            self.handlers.remove(&sid);
            self.stopped(ctx, sid);
        }
        self.serve_outputs(ctx);
    }
}
