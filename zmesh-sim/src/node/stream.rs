//! Stream calls (WIRE.md §4.10, §4.15): a callee whose handler produces items that the
//! library's node core ([`Serving`]) numbers and sends as ITEMs within the window it keeps
//! where `credit` is in effect (an item that finds the window closed waits in the core, and
//! its handler with it, until a CREDIT opens it), then its terminal REPLY; and a caller whose
//! application takes each item the library's [`CallTable`] hands out and grants
//! [`CREDIT_STEP`] more every [`CREDIT_STEP`] items it took, as the runtime's stream receiver
//! does (src/runtime/calls.rs). A stream is a query: cancelling it stops its handler
//! (node/callee.rs), so nothing more is sent for it.
//!
//! A slow consumer (a quarter of the streams) takes one item per drawn pace: what the table
//! handed out waits in the application's buffer, CREDIT follows what it took, not what
//! arrived, and the call's end reaches the application after its last item. Where `credit`
//! is in effect that buffer never holds more than [`STREAM_WINDOW`] items (the runtime's
//! stream buffer, `STREAM_BUFFER`, holds as many: a caller that granted credit for items it
//! had not taken would overrun it).
//!
//! [`Serving`]: zmesh::proto::node::callee::Serving
//! [`CallTable`]: zmesh::proto::calls::CallTable

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::Duration;

use bytes::Bytes;
use zmesh::proto::calls::{
    CallError, CallId, Completion, ServeId, StreamItem, CREDIT_STEP, STREAM_WINDOW,
};
use zmesh::proto::handshake::Capabilities;
use zmesh::proto::wire::{Lane, Record};

use super::callee::STREAM_METHOD;
use super::{Outgoing, SimNode};
use crate::net::{NetConn, NodeIx};
use crate::truth::CallKind;
use crate::Ctx;

/// The application of a stream call that takes one item per `pace`.
#[derive(Debug)]
pub(crate) struct SlowConsumer {
    /// The simulator's name for the call.
    uid: u64,
    /// The connection its REQUEST went out on.
    request: Option<NetConn>,
    /// How long the application takes per item.
    pace: Duration,
    /// When it takes the next item.
    pub(super) next_at: Duration,
    /// Items handed out by the call table and not taken yet, in order.
    pub(super) queue: VecDeque<StreamItem>,
    /// The call's end, once the table completed it with items still waiting: it reaches
    /// the application after them.
    pub(super) end: Option<(Result<Completion, CallError>, Option<bool>)>,
}

impl SimNode {
    /// The application makes stream call `uid` (a query of the stream method); with `pace`,
    /// it takes one item per `pace` (a slow consumer).
    pub fn start_stream(
        &mut self,
        ctx: &mut Ctx<'_>,
        uid: u64,
        ttl: Option<Duration>,
        cancel_at_once: bool,
        pace: Option<Duration>,
    ) {
        let cid = self.start_call_of(
            ctx,
            uid,
            &CallKind::Query,
            ttl,
            cancel_at_once,
            STREAM_METHOD,
        );
        if let (Some(pace), Some(out)) = (pace, self.call_uid.get(&cid)) {
            let slow = SlowConsumer {
                uid,
                request: out.request,
                pace,
                next_at: ctx.now,
                queue: VecDeque::new(),
                end: None,
            };
            self.slow.insert(cid, slow);
        }
    }

    /// The call table handed out an item: the application takes it now, or a slow
    /// consumer's buffer keeps it until its turn.
    pub(super) fn take_item(&mut self, ctx: &mut Ctx<'_>, item: StreamItem) {
        let Some(Outgoing { uid, request }) = self.call_uid.get(&item.id).copied() else {
            // The call completed already: nothing of it may reach the application now.
            let detail = format!(
                "{}: item {} of call {:?} reached the application after its terminal answer",
                self.me.rid, item.seq, item.id
            );
            ctx.truth.violation("nothing_after_the_answer", detail);
            return;
        };
        let credit = request.is_some_and(|c| self.caps_on(c).contains(Capabilities::CREDIT));
        if let Some(s) = self.slow.get_mut(&item.id) {
            if s.queue.is_empty() {
                s.next_at = s.next_at.max(ctx.now + s.pace);
            }
            s.queue.push_back(item);
            ctx.truth.stats.slow_items += 1;
            if credit && s.queue.len() as u64 > STREAM_WINDOW {
                let detail = format!(
                    "{}: the application of stream u{uid} holds {} items it has not taken, more than the window of {STREAM_WINDOW}",
                    self.me.rid,
                    s.queue.len()
                );
                ctx.truth.violation("slow_consumer_within_window", detail);
            }
            return;
        }
        self.consume(ctx, uid, request, item);
    }

    /// A slow consumer's application takes what is due of what it holds; a call whose last
    /// item it took reaches its end.
    pub(super) fn consume_slow(&mut self, ctx: &mut Ctx<'_>) {
        self.consume_where(ctx, |s, now| s.next_at <= now);
    }

    /// Every slow consumer takes all it holds at once (the node stops).
    pub(super) fn consume_all(&mut self, ctx: &mut Ctx<'_>) {
        self.consume_where(ctx, |_, _| true);
    }

    fn consume_where(&mut self, ctx: &mut Ctx<'_>, due: fn(&SlowConsumer, Duration) -> bool) {
        let cids: Vec<CallId> = self.slow.keys().copied().collect();
        for cid in cids {
            while let Some(s) = self.slow.get_mut(&cid) {
                if s.queue.is_empty() || !due(s, ctx.now) {
                    break;
                }
                let Some(item) = s.queue.pop_front() else {
                    break;
                };
                s.next_at += s.pace;
                let (uid, request) = (s.uid, s.request);
                self.consume(ctx, uid, request, item);
            }
            let done = self
                .slow
                .get(&cid)
                .is_some_and(|s| s.queue.is_empty() && s.end.is_some());
            if done {
                if let Some(SlowConsumer {
                    uid,
                    end: Some((result, replayed)),
                    ..
                }) = self.slow.remove(&cid)
                {
                    self.complete(ctx, uid, result, replayed);
                }
            }
        }
    }

    /// The application takes an item of call `uid`; every [`CREDIT_STEP`] items of a call
    /// still waiting whose connection negotiated `credit`, it grants as many more.
    fn consume(&mut self, ctx: &mut Ctx<'_>, uid: u64, request: Option<NetConn>, item: StreamItem) {
        ctx.truth.on_item_received(uid, item.seq);
        let Some(conn) = request else {
            return;
        };
        if !self.caps_on(conn).contains(Capabilities::CREDIT) || !self.calls.is_pending(item.id) {
            return;
        }
        let taken = self.ungranted.entry(item.id).or_insert(0);
        *taken += 1;
        if *taken >= CREDIT_STEP {
            *taken = 0;
            let CallId(call_id) = item.id;
            if let Some(items) = NonZeroU64::new(CREDIT_STEP) {
                ctx.truth.stats.credits_sent += 1;
                self.send(ctx, conn, &Record::Credit { call_id, items });
            }
        }
    }

    /// A CREDIT for `call_id` arrived on `conn`: the stream's window grows, and the item
    /// that waited for it leaves (its handler goes on).
    pub(super) fn on_credit(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        lane: Lane,
        peer_node: NodeIx,
        call_id: NonZeroU64,
        items: u64,
    ) {
        let now = self.at(ctx.now);
        // The call's answers travel on the caller's Completion lane (RouteMesh).
        let Some(answer) = self.answer_conn(conn, lane, peer_node) else {
            return;
        };
        if let Some(h) = self
            .handlers
            .values()
            .find(|h| h.conn == answer && h.call_id == call_id)
        {
            ctx.truth.on_credit_arrived(h.uid, items);
        }
        for s in self.serving.handle_credit(answer, call_id, items, now) {
            self.streamed(ctx, s);
        }
        self.send_items(ctx);
        self.serve_outputs(ctx);
    }

    /// Every stream handler whose next item is due produces it and hands it to the core,
    /// which sends it or holds it (and the handler with it) until the window opens; one that
    /// produced its last item ends now (its REPLY follows its items).
    pub(super) fn send_items(&mut self, ctx: &mut Ctx<'_>) {
        let now = self.at(ctx.now);
        let due: Vec<ServeId> = self
            .handlers
            .iter()
            .filter(|(_, h)| h.stream.is_some_and(|st| !st.held && st.next_at <= ctx.now))
            .map(|(&sid, _)| sid)
            .collect();
        for sid in due {
            while let Some(h) = self.handlers.get_mut(&sid) {
                let uid = h.uid;
                let Some(st) = h.stream.as_mut() else {
                    break;
                };
                if st.held || st.next_at > ctx.now {
                    break;
                }
                if st.sent >= st.total {
                    h.ends_at = ctx.now;
                    break;
                }
                let payload = Bytes::from(format!("item:{uid}:{}", st.sent));
                match self.serving.handle_item(sid, payload, sid, now) {
                    Some(s) => self.streamed(ctx, s),
                    None => {
                        if let Some(st) =
                            self.handlers.get_mut(&sid).and_then(|h| h.stream.as_mut())
                        {
                            st.held = true;
                        }
                        ctx.truth.stats.windows_closed += 1;
                        break;
                    }
                }
            }
        }
    }
}
