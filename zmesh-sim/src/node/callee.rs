//! The callee side of a simulated node run: REQUESTs admitted through the
//! [`ServeTable`](zmesh::proto::calls::ServeTable), ACCEPT before dispatch, a wait in the
//! execution queue, handlers that take time, their REPLYs, and CANCELs: a waiting call that is
//! cancelled never runs, a running handler is signalled (a query stops, a command finishes).

use std::num::NonZeroU64;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use zmesh::proto::calls::{Admission, CallShape, Cancelled, Dispatch, ServeId};
use zmesh::proto::contract::{self, stops_on_cancel};
use zmesh::proto::handshake::Capabilities;
use zmesh::proto::wire::{self, Lane, Record, ReplyCode, Semantics};

use super::{Group, Handler, SimNode, Waiting};
use crate::net::{NetConn, NodeIx};
use crate::truth::{HeldAs, Started};
use crate::Ctx;

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
        if !self.spec.serves {
            self.refuse(ctx, answer, r.call_id, ReplyCode::ClassNotFound);
            return;
        }
        // The method's contract says whether it streams (the simulator's "stream" method).
        let shape = if super::stream::is_stream(&r) {
            CallShape::Stream
        } else {
            CallShape::Unary
        };
        let sid = match self
            .serve
            .handle_request(answer, r.call_id, r.ttl_ms, shape, now)
        {
            Admission::Accept(sid) => sid,
            Admission::Refuse(code) => {
                self.refuse(ctx, answer, r.call_id, code);
                return;
            }
            Admission::Duplicate => return,
        };
        if shape == CallShape::Stream && self.caps_on(answer).contains(Capabilities::CREDIT) {
            self.serve.limit_window(sid);
        }
        let Some(answer_id) = self.conns.get(&answer).map(|c| c.id.0) else {
            return;
        };
        let accept = Record::Accept(wire::Accept {
            call_id: r.call_id,
            generation: NonZeroU64::new(self.me.generation).unwrap_or(NonZeroU64::MIN),
            connection_id: answer_id,
        });
        self.send_answer(ctx, answer, accept);
        // The call waits its turn in the execution queue; its ttl may run out meanwhile.
        let wait = match group {
            Some(g) => g.wait,
            None => Duration::from_millis(ctx.rng.random_range(0..200)),
        };
        self.waiting.insert(
            sid,
            Waiting {
                dispatch_at: ctx.now + wait,
                conn: answer,
                arrived: ctx.now,
                req: r,
                group,
            },
        );
    }

    /// Dispatches every waiting call whose turn has come.
    pub(super) fn dispatch_due(&mut self, ctx: &mut Ctx<'_>) {
        let due: Vec<ServeId> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.dispatch_at <= ctx.now)
            .map(|(&sid, _)| sid)
            .collect();
        for sid in due {
            if let Some(w) = self.waiting.remove(&sid) {
                self.dispatch(ctx, sid, w);
            }
        }
    }

    /// The turn of waiting call `sid` has come: it runs, unless the table says otherwise.
    fn dispatch(&mut self, ctx: &mut Ctx<'_>, sid: ServeId, w: Waiting) {
        let now = self.at(ctx.now);
        let Waiting {
            conn,
            arrived,
            req,
            group,
            ..
        } = w;
        match self.serve.handle_dispatch(sid, now) {
            Dispatch::Run => {}
            Dispatch::Refuse(code) => {
                self.refuse(ctx, conn, req.call_id, code);
                return;
            }
            Dispatch::Skip => return,
        }
        let uid = crate::truth::uid_of(&req.payload);
        let key = req.idempotency_key.as_ref().map(|k| k.to_string());
        let guarded = req.semantics == Semantics::NonRepeatableCommand && key.is_some();
        if guarded {
            let k = key.clone().unwrap_or_default();
            match ctx.truth.store_get(&self.me.rid, &k) {
                Some(Some(ran)) => {
                    // Replayed from the record: the handler does not run again.
                    let result = crate::truth::result_of(ran);
                    self.answer(ctx, sid, ReplyCode::Ok, result, true);
                    return;
                }
                Some(None) => {
                    self.answer(ctx, sid, ReplyCode::UnknownOutcome, Bytes::new(), false);
                    return;
                }
                None => ctx.truth.store_begin(&self.me.rid, &k),
            }
        }
        let started = Started {
            key: key.as_deref(),
            guarded,
            query: req.semantics == Semantics::Query,
            ttl_end: req
                .ttl_ms
                .map(|ms| arrived + Duration::from_millis(ms.get())),
        };
        ctx.truth.on_execute(uid, self.ix, &self.me.rid, started);
        let took = match group {
            Some(g) if ctx.rng.random_bool(0.5) => g.took,
            _ => Duration::from_millis(ctx.rng.random_range(0..3000)),
        };
        let stream = ctx.truth.stream_total(uid).map(|total| {
            let gap = Duration::from_millis(ctx.rng.random_range(0..20));
            super::Stream {
                total,
                sent: 0,
                gap,
                next_at: ctx.now + gap,
                window: self.caps_on(conn).contains(Capabilities::CREDIT),
            }
        });
        // A stream's handler ends once it produced its last item (`send_items`).
        let took = if stream.is_some() {
            Duration::from_secs(3600)
        } else {
            took
        };
        self.handlers.insert(
            sid,
            Handler {
                ends_at: ctx.now + took,
                uid,
                key: key.filter(|_| guarded),
                semantics: req.semantics,
                conn,
                call_id: req.call_id,
                stream,
            },
        );
    }

    /// A CANCEL for `call_id` arrived on `conn` (WIRE.md §4.13): the caller no longer waits
    /// for a call it sent on this connection. A waiting call leaves the queue and never
    /// runs; a running handler is signalled; an unknown call changes nothing.
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
        // Ground truth, from this glue's own queue and handlers, not from the table.
        let queued = self
            .waiting
            .values()
            .find(|w| w.conn == answer && w.req.call_id == call_id)
            .map(|w| crate::truth::uid_of(&w.req.payload));
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
        match self.serve.handle_cancel(answer, call_id, now) {
            Cancelled::Unknown => {}
            Cancelled::Queued(sid) => {
                self.waiting.remove(&sid);
            }
            Cancelled::Running(sid) => {
                self.signal(ctx, sid);
            }
        }
    }

    /// Tells the handler of `sid` that nobody waits for its result any more (a CANCEL, its
    /// ttl passed, its caller is gone). A query's handler is stopped at once and never
    /// completes its effect ([`stops_on_cancel`]); a command's may observe the signal and
    /// finish sooner, and finishes either way. Returns whether the handler was stopped.
    pub(super) fn signal(&mut self, ctx: &mut Ctx<'_>, sid: ServeId) -> bool {
        let now = self.at(ctx.now);
        let Some(h) = self.handlers.get_mut(&sid) else {
            return false;
        };
        if !stops_on_cancel(contract::from_wire(h.semantics), None) {
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
        self.serve.handle_abandon(sid);
        // The stopped task reports; nothing is sent for it.
        let _ = self.serve.handle_done(sid, ReplyCode::Exception, now);
        true
    }

    /// Signals the handlers of running calls whose ttl passed (the table reports each once).
    pub(super) fn signal_overdue(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(sid) = self.serve.poll_overdue() {
            self.signal(ctx, sid);
        }
    }

    /// Answers call `sid` with `code` and `payload` (unless the table already answered it);
    /// `replayed` marks an answer from the idempotency record (WIRE.md §4.17).
    pub(super) fn answer(
        &mut self,
        ctx: &mut Ctx<'_>,
        sid: ServeId,
        code: ReplyCode,
        payload: Bytes,
        replayed: bool,
    ) {
        let now = self.at(ctx.now);
        let Some((conn, call_id)) = self.serve.call_of(sid) else {
            let _ = self.serve.handle_done(sid, code, now);
            return;
        };
        if let Some(code) = self.serve.handle_done(sid, code, now) {
            let reply = Record::Reply(wire::Reply {
                call_id,
                code,
                payload,
                replayed,
            });
            self.send_answer(ctx, conn, reply);
        }
    }

    pub(super) fn finish_handler(&mut self, ctx: &mut Ctx<'_>, sid: ServeId) {
        let Some(h) = self.handlers.remove(&sid) else {
            return;
        };
        if let Some(k) = &h.key {
            ctx.truth.store_done(&self.me.rid, k, h.uid);
        }
        ctx.truth.on_handler_done(h.uid, self.ix);
        self.answer(
            ctx,
            sid,
            ReplyCode::Ok,
            crate::truth::result_of(h.uid),
            false,
        );
    }
}

impl Group {
    /// What the calls of a BATCH or CALLS record that arrives now share.
    pub(super) fn draw(ctx: &mut Ctx<'_>) -> Group {
        Group {
            wait: Duration::from_millis(ctx.rng.random_range(0..200)),
            took: Duration::from_millis(ctx.rng.random_range(0..3000)),
        }
    }
}

impl SimNode {
    /// Answers call `call_id` on `conn` with a refusal `code` and no message.
    fn refuse(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, call_id: NonZeroU64, code: ReplyCode) {
        let reply = Record::Reply(wire::Reply {
            call_id,
            code,
            payload: Bytes::new(),
            replayed: false,
        });
        self.send_answer(ctx, conn, reply);
    }
}
