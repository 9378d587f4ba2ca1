//! Stream calls (WIRE.md §4.10, §4.15): a callee whose handler sends ITEMs and then its
//! terminal REPLY, within the window the library's [`ServeTable`] keeps where `credit` is in
//! effect, and a caller whose application takes each item the library's [`CallTable`] hands
//! out and grants [`CREDIT_STEP`] more every [`CREDIT_STEP`] items it took, as the runtime's
//! stream receiver does (src/runtime/calls.rs). A stream is a query: cancelling it stops its
//! handler ([`SimNode::signal`]), so nothing more is sent for it.
//!
//! [`ServeTable`]: zmesh::proto::calls::ServeTable
//! [`CallTable`]: zmesh::proto::calls::CallTable

use std::num::NonZeroU64;
use std::time::Duration;

use bytes::Bytes;
use zmesh::proto::calls::{CallId, ServeId, StreamItem, CREDIT_STEP};
use zmesh::proto::handshake::Capabilities;
use zmesh::proto::wire::{self, Lane, Record};

use super::{Outgoing, SimNode};
use crate::net::{NetConn, NodeIx};
use crate::truth::CallKind;
use crate::Ctx;

/// The simulator's stream method.
pub(super) const STREAM_METHOD: &str = "stream";

/// Whether `r` calls the stream method.
pub(super) fn is_stream(r: &wire::Request) -> bool {
    r.method.as_str() == STREAM_METHOD
}

impl SimNode {
    /// The application makes stream call `uid` (a query of the stream method).
    pub fn start_stream(
        &mut self,
        ctx: &mut Ctx<'_>,
        uid: u64,
        ttl: Option<Duration>,
        cancel_at_once: bool,
    ) {
        self.start_call_of(
            ctx,
            uid,
            &CallKind::Query,
            ttl,
            cancel_at_once,
            STREAM_METHOD,
        );
    }

    /// The application takes an item the call table handed out; every [`CREDIT_STEP`] items
    /// of a call whose connection negotiated `credit`, it grants as many more.
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
        ctx.truth.on_item_received(uid, item.seq);
        let Some(conn) = request else {
            return;
        };
        if !self.caps_on(conn).contains(Capabilities::CREDIT) {
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

    /// A CREDIT for `call_id` arrived on `conn`: the stream's window grows, and what waited
    /// for it leaves.
    pub(super) fn on_credit(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        lane: Lane,
        peer_node: NodeIx,
        call_id: NonZeroU64,
        items: u64,
    ) {
        // The call's answers travel on the caller's Completion lane (RouteMesh).
        let answer = match lane {
            Lane::Application => match self.ready_on(peer_node, Lane::Completion) {
                Some(k) => k,
                None => return,
            },
            Lane::Completion => return,
            Lane::ClientServer => conn,
        };
        let Some(sid) = self.serve.handle_credit(answer, call_id, items) else {
            return;
        };
        if let Some(h) = self.handlers.get_mut(&sid) {
            ctx.truth.on_credit_arrived(h.uid, items);
            if let Some(st) = h.stream.as_mut() {
                st.next_at = st.next_at.min(ctx.now);
            }
        }
        self.send_items(ctx);
    }

    /// Every stream handler whose next item is due sends what its window allows; one that
    /// produced its last item ends now (its REPLY follows its items).
    pub(super) fn send_items(&mut self, ctx: &mut Ctx<'_>) {
        let now = self.at(ctx.now);
        let due: Vec<ServeId> = self
            .handlers
            .iter()
            .filter(|(_, h)| h.stream.is_some_and(|st| st.next_at <= ctx.now))
            .map(|(&sid, _)| sid)
            .collect();
        for sid in due {
            while let Some(h) = self.handlers.get(&sid) {
                let Some(st) = h.stream else {
                    break;
                };
                let (uid, conn, call_id) = (h.uid, h.conn, h.call_id);
                if st.sent >= st.total {
                    if let Some(h) = self.handlers.get_mut(&sid) {
                        h.ends_at = ctx.now;
                    }
                    break;
                }
                if !self.serve.may_send_item(sid) {
                    ctx.truth.stats.windows_closed += 1;
                    break;
                }
                let Some(seq) = self.serve.handle_item(sid, now) else {
                    break;
                };
                let item = Record::Item(wire::Item {
                    call_id,
                    seq,
                    payload: Bytes::from(format!("item:{uid}:{seq}")),
                });
                self.send(ctx, conn, &item);
                ctx.truth.on_item_sent(uid, st.window);
                if let Some(s) = self.handlers.get_mut(&sid).and_then(|h| h.stream.as_mut()) {
                    s.sent += 1;
                    if !s.gap.is_zero() {
                        s.next_at = ctx.now + s.gap;
                        if s.sent < s.total {
                            break;
                        }
                    }
                }
            }
        }
    }
}
