//! How call records leave, for the caller's and the callee's glue alike (io/calls.rs,
//! io/serve.rs): the sending of what the caller and callee parts and the node core
//! ([`crate::proto::node::core::calls`]) decided on: CANCELs, ACCEPTs, REPLYs and the
//! answers packed at the end of a turn. The route index kept in step with the links and
//! the capabilities in effect on a connection are the core's; `sync_links` and
//! `conn_caps` here hand the other glue files to them. Nothing here calls back up into the
//! glue that uses it.

use std::num::NonZeroU64;
use std::time::Instant;

use super::{CallKey, IoThread, LinkKey};
use crate::config::ServerConfig;
use crate::proto::node::answers::{Outgoing, Sent};
use crate::proto::node::core::calls as core_calls;
use crate::proto::node::link::ServerChannels;
use crate::proto::wire::Capabilities;
use crate::runtime::records;
use crate::runtime::socket::SocketSendError;

impl ServerChannels for [ServerConfig] {
    fn channel(&self, server: usize) -> Option<&str> {
        self.get(server).map(|s| s.channel.as_str())
    }
}

impl IoThread {
    /// Brings the timer table and the call routes up to date with every link and
    /// subscription handed out mutably since the last call
    /// ([`NodeCore::sync_touched`](crate::proto::node::core::NodeCore::sync_touched)).
    pub(super) fn sync_links(&mut self) {
        self.core.sync_touched(self.local.cfg.servers.as_slice());
    }

    /// The capabilities in effect on link `k`'s ready connection: those both ends announced
    /// in its handshake (none before it is ready).
    pub(super) fn conn_caps(&self, k: LinkKey) -> Capabilities {
        core_calls::conn_caps(self, k)
    }

    /// Hands finished calls to the application, tells callees of the calls nobody waits
    /// for any more, and sends the callee's answers.
    pub(super) fn drain_calls(&mut self, now: Instant) {
        self.send_cancels();
        self.caller.deliver(now);
        self.send_callee_answers(now);
    }

    /// Sends a CANCEL for each call whose caller stopped waiting after its REQUEST left,
    /// where the core says one goes ([`core_calls::cancel_link`]: the link its REQUEST went
    /// out on, where that connection negotiated CANCEL, WIRE.md §4.13, §8.1). Elsewhere, or
    /// when the link cannot take it now, the cancel stays local:
    /// the callee finishes the call and its answers arrive late, as they would have without
    /// the record.
    fn send_cancels(&mut self) {
        for (key, call_id) in self.caller.calls_mut().take_cancels() {
            let Some(link) = core_calls::cancel_link(self, key) else {
                continue;
            };
            if self
                .send_frames_on_link(link, &records::cancel(call_id))
                .is_ok()
            {
                metrics::counter!("zmesh_cancels_sent_total").increment(1);
            }
        }
    }

    /// Sends every answer the callee decided on, each on its call's route if it is still
    /// there (a connection gone since has no one to answer).
    pub(super) fn send_callee_answers(&mut self, now: Instant) {
        while let Some(a) = self.callee.poll_answer(now) {
            self.send_answer_on(a.key, Outgoing::Reply(a.reply));
        }
    }

    /// Sends an ACCEPT or REPLY for the calls of connection `key` on its route; false when
    /// the route is gone.
    pub(super) fn send_answer_on(&mut self, key: CallKey, out: Outgoing) -> bool {
        match self.core.answer_route(key) {
            Some(route) => self.send_answer(route, out),
            None => false,
        }
    }

    /// Sends an answer on `route`, in order behind any answer still waiting there: at the
    /// end of the turn where the connection packs answers, else now (a full pipe keeps it
    /// for a later turn), a REPLY's replayed mark (WIRE.md §4.17) kept only where
    /// negotiated, as the core's [`answer_form`](core_calls::answer_form) says. Returns
    /// false when the connection is gone (the caller fails the call when it sees that).
    pub(super) fn send_answer(&mut self, route: LinkKey, mut out: Outgoing) -> bool {
        let Some(form) = core_calls::answer_form(self, route) else {
            return false;
        };
        let conn = form.conn;
        if let Outgoing::Reply(r) = &mut out {
            r.replayed &= form.replayed;
        }
        if !form.packs && !self.outbound.answers.is_waiting(route, conn) {
            let frames = out.alone(
                NonZeroU64::new(self.local.me.generation).unwrap_or(NonZeroU64::MIN),
                conn,
            );
            match self.send_frames_on_link(route, &frames) {
                Ok(()) => return true,
                Err(SocketSendError::Full) => {}
                Err(_) => return false,
            }
        }
        self.outbound.answers.hold(route, conn, out);
        true
    }

    /// Sends the answers that wait, in order per link (see [`AnswerQueue`](crate::proto::node::answers::AnswerQueue)); answers of a
    /// connection that is gone are dropped (their callers fail the calls on the loss).
    pub(super) fn flush_answers(&mut self) {
        if self.outbound.answers.is_empty() {
            return;
        }
        let Some(generation) = NonZeroU64::new(self.local.me.generation) else {
            return;
        };
        let mut queued = std::mem::take(&mut self.outbound.answers);
        queued.flush(
            generation,
            |k| {
                let conn = self.core.links.get(k).and_then(|l| l.conn.as_ref())?.id;
                Some((conn, self.conn_caps(k)))
            },
            |k, frames| match self.send_frames_on_link(k, frames) {
                Ok(()) => Sent::Taken,
                Err(SocketSendError::Full) => Sent::Full,
                Err(_) => Sent::Gone,
            },
        );
        self.outbound.answers = queued;
    }
}
