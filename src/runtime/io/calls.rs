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
//! Streams: a caller's stream items go to the call's [`StreamEvent`] channel in order, and
//! always before its end (items are drained before completions). A channel served with
//! [`CallShape::Stream`](crate::proto::calls::CallShape::Stream) numbers each handler item through the serve table and sends it as
//! ITEM on the same route as the REPLY; the drain ends such calls with REPLY `Unavailable`.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::links::LinkKind;
use super::{IoThread, LinkKey};
use crate::proto::calls::batch;
use crate::proto::calls::{ttl_on_wire, CallId, Unrouted};
use crate::proto::contract;
use crate::proto::handshake::Role;
use crate::proto::ops;
use crate::proto::state::FailureReason;
use crate::proto::wire::{self, Lane};
use crate::proto::ConnId;
use crate::runtime::calls::{CallOptions, StreamEvent};
use crate::runtime::command::CallReply;
use crate::runtime::records;
use crate::runtime::socket::SendError;

/// The physical connection a call travels on: a link and its current connection.
pub(crate) type CallKey = (LinkKey, ConnId);

/// Answers (ACCEPT, REPLY) held back by a full pipe: the connection they are for, in order.
pub(super) type HeldAnswers = (ConnId, VecDeque<Vec<Vec<u8>>>);

/// Longest graceful stop: accepted calls still running then are answered `Unavailable`.
pub const GRACEFUL_STOP_BOUND: Duration = Duration::from_secs(10);

/// Longest time the call gauges go without being set again while their values stay the same.
const GAUGE_REFRESH: Duration = Duration::from_secs(1);

/// The call gauges as last set: calls pending, operations per status, and when.
pub(super) type CallGauges = Option<(usize, ops::OpCounts, Instant)>;

impl IoThread {
    /// The ready connection of `rid`'s RouteMesh lane `lane`.
    pub(super) fn lane_of(&self, rid: &str, lane: Lane) -> Option<CallKey> {
        self.links.iter().enumerate().find_map(|(k, l)| {
            let c = l.conn.as_ref().filter(|c| c.ready)?;
            (l.lane() == Some(lane) && c.peer.as_ref()?.rid == rid).then_some((k, c.id))
        })
    }

    /// Where a call to RouteMesh peer `rid` goes: the REQUEST on its Application lane, the
    /// lease (and the answers) on its Completion lane. Both must be ready.
    fn mesh_route(&self, rid: &str) -> Option<(LinkKey, CallKey)> {
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
        let mut ready: Vec<(LinkKey, CallKey)> = Vec::new();
        let serving: Vec<String> = self
            .links
            .iter()
            .filter(|l| l.lane() == Some(Lane::Application))
            .filter_map(|l| l.conn.as_ref())
            .filter_map(|c| c.peer.as_ref())
            .filter(|p| {
                p.memberships
                    .iter()
                    .any(|m| m.role == Role::Server && m.channel == channel)
            })
            .map(|p| p.rid.clone())
            .collect();
        for rid in serving {
            if let Some(route) = self.mesh_route(&rid) {
                ready.push(route);
            }
        }
        let mut known = self.known_servers.contains(channel);
        for (k, l) in self.links.iter().enumerate() {
            if let LinkKind::ClientDial { server } = &l.kind {
                if self
                    .cfg
                    .servers
                    .get(*server)
                    .is_some_and(|s| s.channel == channel)
                {
                    known = true;
                    if let Some(c) = l.conn.as_ref().filter(|c| c.ready) {
                        ready.push((k, (k, c.id)));
                    }
                }
            }
        }
        if ready.is_empty() {
            return Err(if known {
                Unrouted::NoReadyPeer
            } else {
                Unrouted::NoRegistration
            });
        }
        let pick = ready[self.server_rr % ready.len()];
        self.server_rr = self.server_rr.wrapping_add(1);
        Ok(pick)
    }

    /// Starts a call: routes it and queues its REQUEST for [`Self::flush_calls`], which the
    /// command drain runs before it handles any other command and at its end, so the REQUEST
    /// leaves in this loop turn (or the call fails at once as never sent). A call that cannot
    /// be routed fails at once.
    pub(super) fn start_call(
        &mut self,
        channel: String,
        method: String,
        args: Bytes,
        opts: CallOptions,
        reply: CallReply,
        now: Instant,
    ) {
        let ttl = opts.ttl.filter(|t| !t.is_zero());
        let semantics = contract::to_wire(opts.semantics);
        let mut target = None;
        let id = if self.stopping() {
            self.calls.start_unrouted(Unrouted::NoReadyPeer, now)
        } else {
            match self.route_call(&channel, &opts) {
                Err(why) => self.calls.start_unrouted(why, now),
                Ok((send_link, key)) => {
                    let id = self.calls.start(key, ttl, now);
                    target = self.links[send_link]
                        .conn
                        .as_ref()
                        .and_then(|c| c.peer.as_ref())
                        .map(|p| p.rid.clone());
                    let request = records::request(
                        id.get(),
                        ttl_on_wire(ttl),
                        semantics,
                        &channel,
                        &method,
                        opts.idempotency_key.as_deref(),
                        args,
                    );
                    match request {
                        Ok(r) => self.outgoing_calls.push((send_link, id, r)),
                        Err(_) => {
                            let _ = self.calls.handle_send_failed(id, now);
                        }
                    }
                    id
                }
            }
        };
        // The one funnel every call of this node passes (MISSION K2).
        let target = target.unwrap_or_else(|| ops::channel_target(&channel));
        self.ops
            .with(|r| r.issue(id.get().get(), target, channel, method, semantics, now));
        self.pending_calls.insert(id, reply);
        self.drain_calls(now);
    }

    /// Sends the REQUESTs queued by [`Self::start_call`] in this loop turn (MISSION K5): the
    /// calls for one link go, in order, as one BATCH when there are two or more (cut by
    /// [`batch::split`] above [`batch::MAX_BATCH_CALLS`]) and as a lone REQUEST otherwise, or
    /// each alone when the peer's configuration turns batching off. A message the link cannot
    /// take now fails every call in it at once as never sent: a frame is never queued on a
    /// link that cannot send now (MISSION C3).
    pub(super) fn flush_calls(&mut self, now: Instant) {
        if self.outgoing_calls.is_empty() {
            return;
        }
        let mut per_link: Vec<(LinkKey, Vec<(CallId, wire::Request)>)> = Vec::new();
        for (link, id, request) in self.outgoing_calls.drain(..) {
            match per_link.iter_mut().find(|(l, _)| *l == link) {
                Some((_, calls)) => calls.push((id, request)),
                None => per_link.push((link, vec![(id, request)])),
            }
        }
        for (link, calls) in per_link {
            let parts: Vec<std::ops::Range<usize>> = if self.batches_calls(link) {
                batch::split(calls.len()).collect()
            } else {
                (0..calls.len()).map(|i| i..i + 1).collect()
            };
            let mut calls = calls.into_iter();
            for part in parts {
                let (ids, requests): (Vec<CallId>, Vec<wire::Request>) =
                    calls.by_ref().take(part.len()).unzip();
                let sent = records::requests(requests)
                    .is_ok_and(|frames| self.send_on_link(link, frames).is_ok());
                tracing::debug!(calls = ids.len(), sent, "requests");
                if ids.len() > 1 && sent {
                    metrics::counter!("zmesh_batches_sent_total").increment(1);
                }
                for id in ids {
                    if sent {
                        let _ = self.calls.handle_sent(id, now);
                        self.ops.with(|r| r.sent(id.get().get(), now));
                        metrics::counter!("zmesh_calls_started_total").increment(1);
                    } else {
                        let _ = self.calls.handle_send_failed(id, now);
                    }
                }
            }
        }
        self.drain_calls(now);
    }

    /// Whether calls to the node behind link `k` may share a BATCH (its `batch_calls`
    /// configuration; a peer that dialled us and is not configured here: yes).
    fn batches_calls(&self, k: LinkKey) -> bool {
        let Some(l) = self.links.get(k) else {
            return true;
        };
        match &l.kind {
            LinkKind::MeshDial { peer, .. } => {
                self.cfg.peers.get(*peer).is_none_or(|p| p.batch_calls)
            }
            LinkKind::ClientDial { server } => {
                self.cfg.servers.get(*server).is_none_or(|s| s.batch_calls)
            }
            LinkKind::Inbound { rid, .. } => self
                .cfg
                .peers
                .iter()
                .find(|p| &p.rid == rid)
                .is_none_or(|p| p.batch_calls),
        }
    }

    /// The call key of answers arriving on link `k`: the connection itself, if it is a
    /// Completion lane or a ClientServer connection (answers never travel on the Application
    /// lane).
    fn answer_key(&self, k: LinkKey) -> Option<CallKey> {
        let l = self.links.get(k)?;
        let c = l.conn.as_ref()?;
        match l.lane()? {
            Lane::ClientServer | Lane::Completion => Some((k, c.id)),
            Lane::Application => None,
        }
    }

    /// ACCEPT, ITEM or REPLY for one of our calls, arriving on link `k`.
    pub(super) fn on_call_answer(&mut self, k: LinkKey, rec: records::Rec, now: Instant) {
        tracing::debug!(kind = rec.kind_name(), key = ?self.answer_key(k), "call answer");
        let Some(key) = self.answer_key(k) else {
            metrics::counter!("zmesh_call_answers_ignored_total").increment(1);
            return;
        };
        let id = |n: NonZeroU64| CallId(n);
        match rec {
            records::Rec::Accept { call_id } => {
                let _ = self.calls.handle_accept(id(call_id), key, now);
            }
            records::Rec::Item {
                call_id,
                seq,
                payload,
            } => {
                let _ = self.calls.handle_item(id(call_id), key, seq, payload, now);
            }
            records::Rec::Reply {
                call_id,
                code,
                payload,
            } => {
                let _ = self
                    .calls
                    .handle_reply(id(call_id), key, code, payload, now);
            }
            _ => {}
        }
        self.drain_calls(now);
    }

    /// Where answers to calls keyed `key` are sent: that connection, if it is still current.
    pub(super) fn answer_route(&self, key: CallKey) -> Option<LinkKey> {
        let c = self.links.get(key.0)?.conn.as_ref()?;
        (c.id == key.1 && c.ready).then_some(key.0)
    }

    /// Sends an ACCEPT or REPLY on `route`, in order behind any answer still waiting there.
    /// A pipe that is full now (HWM) keeps the answer for a later loop turn: an answer is owed
    /// to a caller that waits for it, so it is delayed, never dropped. Returns false when the
    /// connection is gone (the caller fails the call when it sees that).
    pub(super) fn send_answer(&mut self, route: LinkKey, frames: Vec<Vec<u8>>) -> bool {
        let Some(conn) = self
            .links
            .get(route)
            .and_then(|l| l.conn.as_ref())
            .map(|c| c.id)
        else {
            return false;
        };
        let waiting = self
            .answers
            .get(&route)
            .is_some_and(|(c, q)| *c == conn && !q.is_empty());
        if !waiting {
            match self.send_frames_on_link(route, &frames) {
                Ok(()) => return true,
                Err(SendError::Full) => {}
                Err(_) => return false,
            }
        }
        let entry = self
            .answers
            .entry(route)
            .or_insert_with(|| (conn, VecDeque::new()));
        if entry.0 != conn {
            *entry = (conn, VecDeque::new());
        }
        entry.1.push_back(frames);
        true
    }

    /// Retries answers held back by a full pipe, in order per link; answers of a connection
    /// that is gone are dropped (their callers fail the calls on the connection loss).
    pub(super) fn flush_answers(&mut self) {
        let links: Vec<LinkKey> = self.answers.keys().copied().collect();
        for route in links {
            let current = self
                .links
                .get(route)
                .and_then(|l| l.conn.as_ref())
                .map(|c| c.id);
            let Some((conn, mut queue)) = self.answers.remove(&route) else {
                continue;
            };
            if Some(conn) != current {
                continue;
            }
            while let Some(frames) = queue.pop_front() {
                match self.send_frames_on_link(route, &frames) {
                    Ok(()) => {}
                    Err(SendError::Full) => {
                        queue.push_front(frames);
                        self.answers.insert(route, (conn, queue));
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
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
        let Some(l) = self.links.get(k) else { return };
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
            let lost = self.calls.handle_connection_lost(key, now);
            if lost > 0 {
                tracing::info!(calls = lost, "calls failed with their connection");
            }
            self.callee.handle_connection_lost(key, now);
        }
        self.drain_calls(now);
    }

    /// Hands finished calls to their callers and sends the serve table's own replies.
    ///
    /// Items first: the table queues a call's items before its completion, so draining them
    /// first hands every item to its stream before the stream's end. Items of a call nobody
    /// streams (a unary caller, a dropped stream) are dropped.
    pub(super) fn drain_calls(&mut self, now: Instant) {
        while let Some(item) = self.calls.poll_item() {
            self.ops.with(|r| r.item(item.id.get().get(), now));
            if let Some(CallReply::Stream(tx)) = self.pending_calls.get(&item.id) {
                let _ = tx.send(StreamEvent::Item(item.payload));
            }
        }
        while let Some((id, result)) = self.calls.poll_completion() {
            self.ops
                .with(|r| r.settle(id.get().get(), result.as_ref().map(|_| ()), now));
            if let Some(reply) = self.pending_calls.remove(&id) {
                let result = result.map(|c| c.payload);
                if let Err(e) = &result {
                    metrics::counter!("zmesh_calls_failed_total", "code" => e.code()).increment(1);
                }
                match reply {
                    CallReply::Unary(tx) => {
                        let _ = tx.send(result);
                    }
                    CallReply::Stream(tx) => {
                        let _ = tx.send(StreamEvent::End(result));
                    }
                }
            }
        }
        self.send_callee_answers(now);
        self.set_call_gauges(now);
    }

    /// Sets the call gauges when their values changed, and at least once per
    /// [`GAUGE_REFRESH`] (a recorder installed after the node started sees them too). Setting
    /// a labelled gauge is a registry lookup per label set: doing it on every loop turn was
    /// 3 % of an idle I/O thread at 4 500 connections (issue 13).
    fn set_call_gauges(&mut self, now: Instant) {
        let pending = self.calls.pending();
        let counts = self.ops.with(|r| r.counts());
        let fresh = match &self.call_gauges {
            Some((p, c, at)) => *p == pending && *c == counts && now < *at + GAUGE_REFRESH,
            None => false,
        };
        if fresh {
            return;
        }
        self.call_gauges = Some((pending, counts, now));
        metrics::gauge!("zmesh_calls_pending").set(pending as f64);
        for status in ops::OpStatus::ALL {
            metrics::gauge!("zmesh_operations", "status" => status.name())
                .set(counts.get(status) as f64);
        }
    }
}
