//! The callee side of a simulated node run: REQUESTs admitted through the
//! [`ServeTable`](zmesh::proto::calls::ServeTable), ACCEPT before dispatch, handlers that take
//! time, and their REPLYs.

use std::num::NonZeroU64;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use zmesh::proto::calls::{Admission, CallShape, Dispatch, ServeId};
use zmesh::proto::wire::{self, Lane, Record, ReplyCode, Semantics};

use super::{Handler, SimNode};
use crate::net::{NetConn, NodeIx};
use crate::Ctx;

impl SimNode {
    pub(super) fn on_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        lane: Lane,
        peer_node: NodeIx,
        r: wire::Request,
    ) {
        let now = self.at(ctx.now);
        // A RouteMesh call is answered on the caller's Completion lane.
        let answer = match lane {
            Lane::Application => match self.ready_on(peer_node, Lane::Completion) {
                Some(k) => k,
                None => return,
            },
            Lane::Completion => return,
            Lane::ClientServer => conn,
        };
        if !self.spec.serves {
            let reply = Record::Reply(wire::Reply {
                call_id: r.call_id,
                code: ReplyCode::ClassNotFound,
                payload: Bytes::new(),
            });
            self.send(ctx, answer, &reply);
            return;
        }
        let sid =
            match self
                .serve
                .handle_request(answer, r.call_id, r.ttl_ms, CallShape::Unary, now)
            {
                Admission::Accept(sid) => sid,
                Admission::Refuse(code) => {
                    let reply = Record::Reply(wire::Reply {
                        call_id: r.call_id,
                        code,
                        payload: Bytes::new(),
                    });
                    self.send(ctx, answer, &reply);
                    return;
                }
                Admission::Duplicate => return,
            };
        let Some(answer_id) = self.conns.get(&answer).map(|c| c.id.0) else {
            return;
        };
        let accept = Record::Accept(wire::Accept {
            call_id: r.call_id,
            generation: NonZeroU64::new(self.me.generation).unwrap_or(NonZeroU64::MIN),
            connection_id: answer_id,
        });
        self.send(ctx, answer, &accept);
        // Handlers take time; a ttl may run out before dispatch.
        let wait = Duration::from_millis(ctx.rng.random_range(0..200));
        let at = self.at(ctx.now + wait);
        match self.serve.handle_dispatch(sid, at) {
            Dispatch::Run => {}
            Dispatch::Refuse(code) => {
                let reply = Record::Reply(wire::Reply {
                    call_id: r.call_id,
                    code,
                    payload: Bytes::new(),
                });
                self.send(ctx, answer, &reply);
                return;
            }
            Dispatch::Skip => return,
        }
        let uid = crate::truth::uid_of(&r.payload);
        let key = r.idempotency_key.as_ref().map(|k| k.to_string());
        let guarded = r.semantics == Semantics::NonRepeatableCommand && key.is_some();
        if guarded {
            let k = key.clone().unwrap_or_default();
            match ctx.truth.store_get(&self.me.rid, &k) {
                Some(Some(ran)) => {
                    // Replayed from the record: the handler does not run again.
                    self.answer(ctx, sid, ReplyCode::Ok, crate::truth::result_of(ran));
                    return;
                }
                Some(None) => {
                    self.answer(ctx, sid, ReplyCode::UnknownOutcome, Bytes::new());
                    return;
                }
                None => ctx.truth.store_begin(&self.me.rid, &k),
            }
        }
        ctx.truth
            .on_execute(uid, key.as_deref(), guarded, self.ix, &self.me.rid);
        let took = Duration::from_millis(ctx.rng.random_range(0..3000));
        self.handlers.insert(
            sid,
            Handler {
                ends_at: ctx.now + wait + took,
                uid,
                key: key.filter(|_| guarded),
                query: r.semantics == Semantics::Query,
            },
        );
    }

    pub(super) fn answer(
        &mut self,
        ctx: &mut Ctx<'_>,
        sid: ServeId,
        code: ReplyCode,
        payload: Bytes,
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
            });
            self.send(ctx, conn, &reply);
        }
    }

    pub(super) fn finish_handler(&mut self, ctx: &mut Ctx<'_>, sid: ServeId) {
        let Some(h) = self.handlers.remove(&sid) else {
            return;
        };
        if let Some(k) = &h.key {
            ctx.truth.store_done(&self.me.rid, k, h.uid);
        }
        self.answer(ctx, sid, ReplyCode::Ok, crate::truth::result_of(h.uid));
    }
}
