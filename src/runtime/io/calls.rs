//! Calls in the I/O thread: routing a call to a ready server, the caller's call table (leases
//! on the connection that carried the request), and the callee's serve table (ACCEPT before
//! dispatch, ttl refusals, graceful drain). Decisions are the sans-IO tables'
//! ([`crate::proto::calls`]); this file moves their records.
//!
//! A call's key is the physical connection its REQUEST went out on: the RouteMesh peer's
//! Application lane connection, or the ClientServer connection. ACCEPT, ITEM and REPLY arrive
//! on the peer's Completion lane (RouteMesh) or the same connection (ClientServer) and are
//! judged against that key; when either lane of the peer leaves ready, every call on it
//! fails at once (MISSION C2).
//!
//! Streams: a caller's stream items go to the call's [`StreamEvent`](crate::runtime::calls::StreamEvent) channel in order, and
//! always before its end (items are drained before completions). A channel served with
//! [`CallShape::Stream`](crate::proto::calls::CallShape::Stream) numbers each handler item through the serve table and sends it as
//! ITEM on the same route as the REPLY; the drain ends such calls with REPLY `Unavailable`.

use std::num::NonZeroU64;
use std::time::Instant;

use super::parts::caller::{NewCall, Route, SendPolicy};
use super::route::negotiated;
use super::{CallKey, IoThread, LinkKey, Tracked};
use crate::config::NodeConfig;
use crate::proto::calls::Unrouted;
use crate::proto::node::answers::Outgoing;
use crate::proto::node::core::Answer;
use crate::proto::node::link::{Link, LinkKind};
use crate::proto::state::FailureReason;
use crate::proto::wire::{Capabilities, Lane};
use crate::proto::ConnId;
use crate::runtime::calls::CallOptions;
use crate::runtime::records;

impl IoThread {
    /// Where a call to RouteMesh peer `rid` goes: the REQUEST on its Application lane, the
    /// lease (and the answers) on its Completion lane. Both must be ready.
    fn mesh_route(&mut self, rid: &str) -> Option<(LinkKey, CallKey)> {
        let app = self.lane_of(rid, Lane::Application)?;
        let completion = self.lane_of(rid, Lane::Completion)?;
        Some((app.0, completion))
    }

    /// Picks the connection for a call: the named peer, or a ready server of the channel
    /// (RouteMesh peers with a Server membership, and ClientServer servers), round-robin.
    /// Returns the link to send the REQUEST on and the call's key.
    fn route_call(
        &mut self,
        channel: &str,
        opts: &CallOptions,
    ) -> Result<(LinkKey, CallKey), Unrouted> {
        if let Some(rid) = &opts.peer {
            return self.mesh_route(rid).ok_or(Unrouted::NoReadyPeer);
        }
        self.sync_links();
        let (ready, configured) = self.core.routes.ready_for(channel);
        self.caller.calls_mut().pick(channel, ready, configured)
    }

    /// Starts a call: routes it and hands it to the caller, which queues its REQUEST for
    /// [`Self::flush_calls`] (the command drain runs it before it handles any other command
    /// and at its end, so the REQUEST leaves in this loop turn, or the call fails at once as
    /// never sent). A call that cannot be routed fails at once.
    pub(super) fn start_call(&mut self, call: NewCall, now: Instant) {
        let route = if self.local.stopping() {
            Err(Unrouted::NoReadyPeer)
        } else {
            self.route_call(&call.channel, &call.opts)
                .map(|(send, key)| Route {
                    send,
                    key,
                    target: self.core.links[send]
                        .conn
                        .as_ref()
                        .and_then(|c| c.peer.as_ref())
                        .map(|p| p.rid.clone()),
                })
        };
        self.caller.start(call, route, now);
        self.drain_calls(now);
    }

    /// Sends the REQUESTs the caller queued in this loop turn (MISSION K5), as the messages
    /// [`Calls::take_requests`](crate::proto::node::caller::Calls::take_requests) makes of them.
    pub(super) fn flush_calls(&mut self, now: Instant) {
        if !self.caller.calls().has_requests() {
            return;
        }
        let (links, cfg, me) = (
            &self.core.links,
            &self.local.cfg,
            self.local.me.capabilities,
        );
        let messages = self.caller.calls_mut().take_requests(|k| {
            if !batches_calls(links, cfg, k) {
                SendPolicy::Alone
            } else if negotiated(links, me, k).contains(Capabilities::CALLS) {
                SendPolicy::Grouped {
                    offsets: negotiated(links, me, k).contains(Capabilities::IDS16),
                }
            } else {
                SendPolicy::Batch
            }
        });
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
        let kind = answer.kind().name();
        tracing::debug!(kind, key = ?self.core.answer_key(k), "call answer");
        let Some(key) = self.core.answer_key(k) else {
            metrics::counter!("zmesh_call_answers_ignored_total").increment(1);
            return;
        };
        self.caller.handle_answer(key, answer, now);
        self.drain_calls(now);
    }

    /// A link's connection is leaving ready: fail the calls leased on it (MISSION C2).
    ///
    /// Calls are keyed by the connection their answers travel on (a RouteMesh Completion lane,
    /// a ClientServer connection): its failure fails them. A failed Application lane fails
    /// the calls of the peer's Completion lane too, unless the peer closed it in order: a
    /// stopping peer answers what it accepted on the Completion lane before closing that one.
    pub(super) fn calls_connection_lost(
        &mut self,
        k: LinkKey,
        conn: ConnId,
        reason: FailureReason,
        now: Instant,
    ) {
        let Some(l) = self.core.links.get(k) else {
            return;
        };
        let key = match l.lane() {
            Some(Lane::Completion | Lane::ClientServer) => Some((k, conn)),
            Some(Lane::Application) if reason != FailureReason::OrderlyClose => l
                .conn
                .as_ref()
                .and_then(|c| c.peer.as_ref())
                .map(|p| p.rid.clone())
                .and_then(|rid| self.lane_of(&rid, Lane::Completion)),
            _ => None,
        };
        if let Some(key) = key {
            let lost = self.caller.calls_mut().handle_connection_lost(key, now);
            if lost > 0 {
                tracing::info!(calls = lost, "calls failed with their connection");
            }
            self.callee.handle_connection_lost(key, now);
        }
        self.drain_calls(now);
    }

    /// The application stopped waiting for the call it named `token`.
    pub(super) fn cancel_call(&mut self, token: u64, now: Instant) {
        self.caller.cancel(token, now);
        self.drain_calls(now);
    }

    /// The application took `items` more items of the stream it named `token`: a CREDIT on
    /// the link its REQUEST went out on, where that connection negotiated `credit`
    /// (WIRE.md §4.15). A CREDIT the link cannot take now waits, in order, like an answer:
    /// it is never dropped, since a stream whose window closed waits for nothing else.
    pub(super) fn grant_items(&mut self, token: u64, items: u64) {
        let Some((key, call_id)) = self.caller.calls().credit_target(token) else {
            return;
        };
        let Some(items) = NonZeroU64::new(items) else {
            return;
        };
        let Some(link) = self.request_link(key) else {
            return;
        };
        if self.conn_caps(link).contains(Capabilities::CREDIT) {
            self.send_answer(link, Outgoing::Frames(records::credit(call_id, items)));
        }
    }
}

/// Whether calls to the node behind link `k` may share a BATCH (its `batch_calls`
/// configuration; a peer that dialled us and is not configured here: yes).
fn batches_calls(links: &Tracked<LinkKey, Link>, cfg: &NodeConfig, k: LinkKey) -> bool {
    let Some(l) = links.get(k) else {
        return true;
    };
    match &l.kind {
        LinkKind::MeshDial { peer, .. } => cfg.peers.get(*peer).is_none_or(|p| p.batch_calls),
        LinkKind::ClientDial { server } => cfg.servers.get(*server).is_none_or(|s| s.batch_calls),
        LinkKind::Inbound { rid, .. } => cfg
            .peers
            .iter()
            .find(|p| &p.rid == rid)
            .is_none_or(|p| p.batch_calls),
    }
}
