//! The I/O thread's side of serving calls: it routes each REQUEST (alone or in a BATCH) to
//! the [`Callee`](super::parts::callee::Callee) with where its answers go and who sent it, sends the ACCEPTs and ITEMs
//! the callee decides on as they are decided (the rest of its answers leave through
//! [`route`](super::route)), and hands it the handlers' results. What happens to a call
//! is decided in the node core ([`crate::proto::node::callee`]), which the callee holds.

use std::time::Instant;

use super::{IoThread, LinkKey, Tracked};
use crate::proto::node::answers::Outgoing;
use crate::proto::node::callee::From;
use crate::proto::node::keys::CallKey;
use crate::proto::node::link::Link;
use crate::proto::wire::{self, Capabilities, Lane};
use crate::runtime::command::{ServeDone, ServeItem, Served};
use crate::runtime::security::Caller;
use std::num::NonZeroU64;

impl IoThread {
    /// Where the answers to REQUESTs arriving on link `k` go: the calls' key (the connection
    /// answers travel on), and the caller's RID and generation. `None` when there is no way
    /// to answer (a REQUEST on a Completion lane, or the caller's Completion lane is not
    /// ready): the caller fails such calls when its lanes fail.
    fn request_route(&mut self, k: LinkKey) -> Option<From<CallKey>> {
        let l = self.core.links.get(k)?;
        let c = l.conn.as_ref()?;
        let (rid, generation) = c
            .peer
            .as_ref()
            .map(|p| (p.rid.clone(), p.generation))
            .unwrap_or_default();
        let key = match l.lane()? {
            Lane::ClientServer => (k, c.id),
            // A RouteMesh call is answered on the caller's Completion lane.
            Lane::Application => self.lane_of(&rid, Lane::Completion)?,
            Lane::Completion => return None,
        };
        self.core.answer_route(key)?;
        Some(From {
            key,
            rid,
            generation,
            credit: self.conn_caps(k).contains(Capabilities::CREDIT),
        })
    }

    /// A BATCH arriving on link `k` (MISSION K5): each call goes to the callee on its own,
    /// unless the BATCH is over the receiver's limit (then every call of it is refused).
    pub(super) fn on_batch(&mut self, k: LinkKey, requests: Vec<wire::Request>, now: Instant) {
        let Some(from) = self.request_route(k) else {
            return;
        };
        let key = from.key;
        let requests = self.callee.handle_batch(key, requests);
        self.send_callee_answers(now);
        for req in requests {
            self.on_request(k, req, now);
        }
    }

    /// A REQUEST arriving on link `k`: to the callee, and its ACCEPT out if it took the call.
    pub(super) fn on_request(&mut self, k: LinkKey, req: wire::Request, now: Instant) {
        let Some(from) = self.request_route(k) else {
            // No way to answer: the caller fails the call when its lanes fail.
            return;
        };
        let key = from.key;
        let links = &self.core.links;
        let taken = self
            .callee
            .handle_request(from, req, || caller_of(links, k), now);
        if let Some(accepting) = taken {
            let sent = self.send_answer_on(key, Outgoing::Accept(accepting.call_id()));
            self.callee.handle_accept_sent(accepting, sent, now);
        }
        self.drain_calls(now);
    }

    /// A CANCEL arriving on link `k` (WIRE.md §4.13): the caller no longer waits for call
    /// `call_id`, which it sent on this link.
    pub(super) fn on_cancel(&mut self, k: LinkKey, call_id: NonZeroU64, now: Instant) {
        let Some(from) = self.request_route(k) else {
            return;
        };
        self.callee.handle_cancel(from.key, call_id, now);
        self.drain_calls(now);
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

    /// A CREDIT arriving on link `k` (WIRE.md §4.15): stream call `call_id`, which the caller
    /// sent on this link, may send `items` more; the items that waited for it go now.
    pub(super) fn on_credit(&mut self, k: LinkKey, call_id: NonZeroU64, items: u64, now: Instant) {
        let Some(from) = self.request_route(k) else {
            return;
        };
        for item in self.callee.handle_credit(from.key, call_id, items, now) {
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

/// Who calls on link `k` of `links`, as its connection knows it.
fn caller_of(links: &Tracked<LinkKey, Link>, k: LinkKey) -> Caller {
    let c = links.get(k).and_then(|l| l.conn.as_ref());
    let peer = c.and_then(|c| c.peer.as_ref());
    let verified = c.and_then(|c| c.verified_key);
    Caller {
        rid: peer.map(|p| p.rid.clone()).unwrap_or_default(),
        security_identity: match (verified, peer) {
            (Some(key), _) => key.to_z85(),
            (None, Some(p)) => p.security_identity.clone(),
            (None, None) => String::new(),
        },
        verified: verified.is_some(),
    }
}
