//! Calls in the I/O thread: the caller's glue and the core's [`CallShell`]. Where a call
//! goes, how a turn's REQUESTs share a message, which calls a lost connection fails,
//! whether an answer has a call key and whether a CREDIT goes are the node core's
//! decisions ([`crate::proto::node::core::calls`]); this file hands calls to the
//! [`Caller`](super::parts::caller::Caller) and the [`Callee`](super::parts::callee::Callee)
//! (which hold the application's channels and the handlers) and sends the REQUESTs.
//!
//! A call's key is the physical connection its answers travel on: the RouteMesh peer's
//! Completion lane connection, or the ClientServer connection; when it leaves ready, every
//! call on it fails at once (MISSION C2).
//!
//! Streams: a caller's stream items go to the call's [`StreamEvent`](crate::runtime::calls::StreamEvent) channel in order, and
//! always before its end (items are drained before completions). A channel served with
//! [`CallShape::Stream`](crate::proto::calls::CallShape::Stream) numbers each handler item through the serve table and sends it as
//! ITEM on the same route as the REPLY; the drain ends such calls with REPLY `Unavailable`.

use std::num::NonZeroU64;
use std::time::Instant;

use super::parts::caller::{NewCall, Route};
use super::{CallKey, IoThread, LinkKey};
use crate::proto::calls::Unrouted;
use crate::proto::node::answers::Outgoing;
use crate::proto::node::callee::From;
use crate::proto::node::caller::Calls;
use crate::proto::node::core::calls::{self as core_calls, CallShell};
use crate::proto::node::core::{Answer, NodeCore};
use crate::proto::state::FailureReason;
use crate::proto::wire;
use crate::proto::ConnId;
use crate::runtime::records;

impl IoThread {
    /// Starts a call: routes it ([`core_calls::route_call`]) and hands it to the caller,
    /// which queues its REQUEST for [`Self::flush_calls`] (the command drain runs it before
    /// it handles any other command and at its end, so the REQUEST leaves in this loop turn,
    /// or the call fails at once as never sent). A call that cannot be routed fails at once.
    pub(super) fn start_call(&mut self, call: NewCall, now: Instant) {
        let route = if self.local.stopping() {
            Err(Unrouted::NoReadyPeer)
        } else {
            core_calls::route_call(self, &call.channel, call.opts.peer.as_deref()).map(
                |(send, key)| Route {
                    send,
                    key,
                    target: self.core.links[send]
                        .conn
                        .as_ref()
                        .and_then(|c| c.peer.as_ref())
                        .map(|p| p.rid.clone()),
                },
            )
        };
        self.caller.start(call, route, now);
        self.drain_calls(now);
    }

    /// Sends the REQUESTs the caller queued in this loop turn (MISSION K5), as the messages
    /// [`Calls::take_requests`] makes of them under the core's
    /// [`send_policy`](core_calls::send_policy).
    pub(super) fn flush_calls(&mut self, now: Instant) {
        if !self.caller.calls().has_requests() {
            return;
        }
        let (links, configured, me) = (
            &self.core.links,
            self.local.configured(),
            self.local.me.capabilities,
        );
        let messages = self
            .caller
            .calls_mut()
            .take_requests(|k| core_calls::send_policy(links, &configured, me, k));
        for m in messages {
            let sent = match &m.frames {
                Some(frames) => self.send_frames_on_link(m.link, frames).is_ok(),
                None => false,
            };
            tracing::debug!(calls = m.calls(), sent, "requests");
            self.caller.handle_sent(&m, sent, now);
        }
        self.drain_calls(now);
    }

    /// ACCEPT, ITEM or REPLY for one of our calls, arriving on link `k`.
    pub(super) fn on_call_answer(&mut self, k: LinkKey, answer: Answer, now: Instant) {
        core_calls::handle_call_answer(self, k, answer, now);
    }

    /// A link's connection is leaving ready: fail the calls leased on it, as the core
    /// decides (MISSION C2).
    pub(super) fn calls_connection_lost(
        &mut self,
        k: LinkKey,
        conn: ConnId,
        reason: FailureReason,
        now: Instant,
    ) {
        core_calls::handle_connection_lost(self, k, conn, reason, now);
    }

    /// The application stopped waiting for the call it named `token`.
    pub(super) fn cancel_call(&mut self, token: u64, now: Instant) {
        self.caller.cancel(token, now);
        self.drain_calls(now);
    }

    /// The application took `items` more items of the stream it named `token`: a CREDIT
    /// where the core says one goes (WIRE.md §4.15).
    pub(super) fn grant_items(&mut self, token: u64, items: u64) {
        core_calls::grant_items(self, token, items);
    }
}

impl CallShell for IoThread {
    fn core_with_calls(&mut self) -> (&mut NodeCore, &mut Calls) {
        (&mut self.core, self.caller.calls_mut())
    }

    fn fail_calls_on(&mut self, key: CallKey, now: Instant) {
        let lost = self.caller.calls_mut().handle_connection_lost(key, now);
        if lost > 0 {
            tracing::info!(calls = lost, "calls failed with their connection");
        }
        self.callee.handle_connection_lost(key, now);
    }

    fn answer_call(&mut self, key: CallKey, answer: Answer, now: Instant) {
        self.caller.handle_answer(key, answer, now);
    }

    fn count_ignored_answer(&mut self) {
        metrics::counter!("zmesh_call_answers_ignored_total").increment(1);
    }

    /// A CREDIT the link cannot take now waits, in order, like an answer: it is never
    /// dropped, since a stream whose window closed waits for nothing else.
    fn send_credit(&mut self, link: LinkKey, call_id: NonZeroU64, items: NonZeroU64) {
        self.send_answer(link, Outgoing::Frames(records::credit(call_id, items)));
    }

    fn callee_request(
        &mut self,
        k: LinkKey,
        from: From<CallKey>,
        request: wire::Request,
        now: Instant,
    ) {
        self.serve_request_from(k, from, request, now);
    }

    fn callee_batch(
        &mut self,
        k: LinkKey,
        key: CallKey,
        requests: Vec<wire::Request>,
        now: Instant,
    ) {
        self.serve_batch_on(k, key, requests, now);
    }

    fn callee_cancel(&mut self, key: CallKey, call_id: NonZeroU64, now: Instant) {
        self.callee.handle_cancel(key, call_id, now);
        self.drain_calls(now);
    }

    fn callee_credit(&mut self, key: CallKey, call_id: NonZeroU64, items: u64, now: Instant) {
        self.serve_credit_on(key, call_id, items, now);
    }

    fn drain_calls(&mut self, now: Instant) {
        IoThread::drain_calls(self, now);
    }
}
