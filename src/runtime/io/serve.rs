//! The I/O thread's side of serving calls: where each REQUEST's answers go and who sent it
//! are the node core's decisions ([`crate::proto::node::core::calls`]: `request_route`,
//! `caller_of`); this file hands each REQUEST (alone or in a BATCH), CANCEL and CREDIT
//! the core routed to the [`Callee`](super::parts::callee::Callee), sends the ACCEPTs and
//! ITEMs the callee decides on as they are decided (the rest of its answers leave through
//! [`route`](super::route)), and hands it the handlers' results. What happens to a call is
//! decided in the node core ([`crate::proto::node::callee`]), which the callee holds.

use std::num::NonZeroU64;
use std::time::Instant;

use super::IoThread;
use crate::proto::node::answers::Outgoing;
use crate::proto::node::callee::From as Answered;
use crate::proto::node::core::calls::{self as core_calls, CallerId};
use crate::proto::node::keys::{CallKey, LinkKey};
use crate::proto::wire;
use crate::runtime::command::{ServeDone, ServeItem, Served};
use crate::runtime::security::Caller;

impl From<CallerId> for Caller {
    fn from(c: CallerId) -> Caller {
        Caller {
            rid: c.rid,
            security_identity: c.security_identity,
            verified: c.verified,
        }
    }
}

impl IoThread {
    /// A BATCH arriving on link `k` (MISSION K5), as the core routes it.
    pub(super) fn on_batch(&mut self, k: LinkKey, requests: Vec<wire::Request>, now: Instant) {
        core_calls::handle_batch(self, k, requests, now);
    }

    /// A BATCH from link `k` whose answers go on `key`: each call goes to the callee on its
    /// own, unless the BATCH is over the receiver's limit (then every call of it is
    /// refused).
    pub(super) fn serve_batch_on(
        &mut self,
        k: LinkKey,
        key: CallKey,
        requests: Vec<wire::Request>,
        now: Instant,
    ) {
        let requests = self.callee.handle_batch(key, requests);
        self.send_callee_answers(now);
        for req in requests {
            self.on_request(k, req, now);
        }
    }

    /// A REQUEST arriving on link `k`, as the core routes it.
    pub(super) fn on_request(&mut self, k: LinkKey, req: wire::Request, now: Instant) {
        core_calls::handle_request(self, k, req, now);
    }

    /// A REQUEST from link `k` answered as `from` says: to the callee, and its ACCEPT out if
    /// it took the call.
    pub(super) fn serve_request_from(
        &mut self,
        k: LinkKey,
        from: Answered<CallKey>,
        req: wire::Request,
        now: Instant,
    ) {
        let key = from.key;
        let links = &self.core.links;
        let taken =
            self.callee
                .handle_request(from, req, || core_calls::caller_of(links, k).into(), now);
        if let Some(accepting) = taken {
            let sent = self.send_answer_on(key, Outgoing::Accept(accepting.call_id()));
            self.callee.handle_accept_sent(accepting, sent, now);
        }
        self.drain_calls(now);
    }

    /// A CANCEL arriving on link `k` (WIRE.md §4.13), as the core routes it.
    pub(super) fn on_cancel(&mut self, k: LinkKey, call_id: NonZeroU64, now: Instant) {
        core_calls::handle_cancel(self, k, call_id, now);
    }

    /// A handler finished: its REPLY, then the next call of its queue.
    pub(super) fn on_serve_done(&mut self, done: ServeDone, now: Instant) {
        self.callee.handle_done(done, now);
        self.drain_calls(now);
    }

    /// A stream handler produced an item: sent as ITEM on the call's answer route, or the
    /// handler is told the stream is over (see [`Callee::handle_item_sent`](super::parts::callee::Callee::handle_item_sent)).
    pub(super) fn on_serve_item(&mut self, item: ServeItem, now: Instant) {
        if let Some(item) = self.callee.handle_item(item, now) {
            self.send_item(item, now);
        }
        self.drain_calls(now);
    }

    /// A CREDIT arriving on link `k` (WIRE.md §4.15), as the core routes it.
    pub(super) fn on_credit(&mut self, k: LinkKey, call_id: NonZeroU64, items: u64, now: Instant) {
        core_calls::handle_credit(self, k, call_id, items, now);
    }

    /// Stream call `call_id` of the caller whose answers go on `key` may send `items` more:
    /// the items that waited for it go now.
    pub(super) fn serve_credit_on(
        &mut self,
        key: CallKey,
        call_id: NonZeroU64,
        items: u64,
        now: Instant,
    ) {
        for item in self.callee.handle_credit(key, call_id, items, now) {
            self.send_item(item, now);
        }
        self.drain_calls(now);
    }

    /// Sends one ITEM on its call's answer route and tells the callee whether it left.
    ///
    /// An ITEM behind answers that still wait on that route (its call's ACCEPT among them)
    /// waits with them, so it never overtakes them.
    fn send_item(&mut self, item: super::parts::callee::ItemToSend, now: Instant) {
        let route = self.core.answer_route(item.key);
        let sent = route.is_some_and(|r| {
            if self.outbound.answers.is_waiting(r, item.key.1) {
                self.send_answer(r, Outgoing::Frames(item.frames.clone()))
            } else {
                self.send_frames_on_link(r, &item.frames).is_ok()
            }
        });
        self.callee.handle_item_sent(item, sent, now);
    }

    /// Registers a served channel (replacing an earlier registration of the same name).
    pub(super) fn serve_channel(&mut self, channel: String, served: Served) {
        self.callee.serve_channel(channel, served);
    }
}
