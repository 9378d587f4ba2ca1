//! The caller side of a simulated node run: calls from the application through the
//! [`CallTable`](zmesh::proto::calls::CallTable), routed to a ready server, cancelled by the
//! application (a CANCEL for the callee where the connection negotiated it), and one-way
//! messages.

use std::num::NonZeroU64;
use std::time::Duration;

use zmesh::proto::calls::CallId;
use zmesh::proto::handshake::Capabilities;
use zmesh::proto::wire::{self, Lane, Record, Semantics};

use super::{name, Outgoing, Phase, SimNode, CHANNEL};
use crate::net::NetConn;
use crate::truth::CallKind;
use crate::Ctx;

impl SimNode {
    pub(super) fn call_for(&self, call_id: NonZeroU64) -> Option<CallId> {
        let cid = CallId(call_id);
        self.call_uid.contains_key(&cid).then_some(cid)
    }

    /// Starts a call from the application: `uid` is the simulator's name for it. With
    /// `cancel_at_once` the application cancels it in the turn it made it, before its REQUEST
    /// leaves.
    pub fn start_call(
        &mut self,
        ctx: &mut Ctx<'_>,
        uid: u64,
        kind: &CallKind,
        ttl: Option<Duration>,
        cancel_at_once: bool,
    ) {
        let now = self.at(ctx.now);
        let Some((request_conn, answer_conn)) = self.route() else {
            let cid = self
                .calls
                .start_unrouted(zmesh::proto::calls::Unrouted::NoReadyPeer, now);
            self.call_uid.insert(cid, Outgoing { uid, request: None });
            self.pump(ctx);
            return;
        };
        let cid = self.calls.start(answer_conn, ttl, now);
        let request = Some(request_conn);
        self.call_uid.insert(cid, Outgoing { uid, request });
        if cancel_at_once && self.calls.is_pending(cid) {
            ctx.truth.on_cancel(uid);
            self.calls.handle_cancel(cid, now);
        }
        // A call that completed already (cancelled, shut down) must not leave.
        if !self.calls.is_pending(cid) {
            self.pump(ctx);
            return;
        }
        let (semantics, key) = match kind {
            CallKind::Query => (Semantics::Query, None),
            CallKind::Idempotent => (Semantics::IdempotentCommand, None),
            CallKind::Command => (Semantics::NonRepeatableCommand, None),
            CallKind::Guarded(k) => (Semantics::NonRepeatableCommand, Some(k.clone())),
        };
        let req = wire::Request {
            call_id: cid.0,
            ttl_ms: zmesh::proto::calls::ttl_on_wire(ttl),
            semantics,
            channel: name(CHANNEL),
            method: name("op"),
            idempotency_key: key.and_then(|k| wire::Name::new(k).ok()),
            payload: crate::truth::payload_of(uid),
        };
        if self.send(ctx, request_conn, &Record::Request(req)) {
            ctx.truth.on_request_left(uid);
            self.calls.handle_sent(cid, now);
        } else {
            self.calls.handle_send_failed(cid, now);
        }
        self.pump(ctx);
    }

    /// The application cancels call `uid`, if this run still waits for it. Whatever is due
    /// at this instant (a deadline) applies first, as it does for any input.
    pub fn cancel_call(&mut self, ctx: &mut Ctx<'_>, uid: u64) {
        let now = self.at(ctx.now);
        self.calls.handle_timeout(now);
        self.pump(ctx);
        let pending = self
            .call_uid
            .iter()
            .find(|(_, o)| o.uid == uid)
            .map(|(&cid, _)| cid)
            .filter(|&cid| self.calls.is_pending(cid));
        let Some(cid) = pending else {
            return;
        };
        ctx.trace(format!("{} cancels call u{uid}", self.me.rid));
        ctx.truth.on_cancel(uid);
        self.calls.handle_cancel(cid, now);
        self.pump(ctx);
    }

    /// Tells the callee that nobody waits for call `cid` any more: a CANCEL on the connection
    /// its REQUEST went out on, if that connection negotiated `cancel` (WIRE.md §4.13, §8.1);
    /// otherwise the cancel stays local and the callee finishes the call.
    pub(super) fn send_cancel(&mut self, ctx: &mut Ctx<'_>, cid: CallId) {
        let Some(Outgoing {
            uid,
            request: Some(conn),
        }) = self.call_uid.get(&cid).copied()
        else {
            return;
        };
        if !self.caps_on(conn).contains(Capabilities::CANCEL) {
            ctx.truth.stats.cancels_kept_local += 1;
            return;
        }
        ctx.truth.on_cancel_sent(uid);
        self.send(ctx, conn, &Record::Cancel { call_id: cid.0 });
    }

    /// A ready server to call: the connection the REQUEST goes on and the one its answers
    /// come back on (a RouteMesh peer's Application and Completion lanes, or one ClientServer
    /// connection).
    pub(super) fn route(&self) -> Option<(NetConn, NetConn)> {
        if self.phase != Phase::Running {
            return None;
        }
        for c in self.conns.values() {
            let Some(r) = &c.ready else { continue };
            if !r.peer.is_server() {
                continue;
            }
            match c.lane {
                Lane::ClientServer if c.dialled => {
                    let k = self.ready_on(c.peer_node, Lane::ClientServer)?;
                    return Some((k, k));
                }
                Lane::Application => {
                    let (Some(a), Some(b)) = (
                        self.ready_on(c.peer_node, Lane::Application),
                        self.ready_on(c.peer_node, Lane::Completion),
                    ) else {
                        continue;
                    };
                    return Some((a, b));
                }
                _ => {}
            }
        }
        None
    }

    /// Sends a one-way MESSAGE to some ready peer; false if none is ready.
    pub fn send_message(&mut self, ctx: &mut Ctx<'_>, uid: u64) -> bool {
        let target = self
            .conns
            .iter()
            .find(|(_, c)| {
                c.ready.is_some() && matches!(c.lane, Lane::Application | Lane::ClientServer)
            })
            .map(|(&k, _)| k);
        let Some(conn) = target else {
            return false;
        };
        let msg = Record::Message(wire::Message {
            channel: name(CHANNEL),
            payload: crate::truth::message_of(uid),
        });
        self.send(ctx, conn, &msg)
    }
}
