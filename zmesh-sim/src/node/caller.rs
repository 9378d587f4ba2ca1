//! The caller side of a simulated node run: calls from the application through the
//! [`CallTable`](zmesh::proto::calls::CallTable), routed to a ready server, cancelled by the
//! application (a CANCEL for the callee where the connection negotiated it), bursts of calls
//! made in one turn (sent as BATCH and CALLS records, [`batch::frame`]), and one-way messages.

use std::num::NonZeroU64;
use std::time::Duration;

use zmesh::proto::calls::batch::{self, Framing};
use zmesh::proto::calls::CallId;
use zmesh::proto::handshake::Capabilities;
use zmesh::proto::wire::{self, Lane, Record, Semantics};

use super::callee::{COMMAND_METHOD, QUERY_METHOD, SET_METHOD};
use super::{name, Burst, Outgoing, Phase, SimNode, CHANNEL};
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
        self.start_call_of(ctx, uid, kind, ttl, cancel_at_once, method_of(kind));
    }

    /// Starts call `uid` of `method`.
    pub(super) fn start_call_of(
        &mut self,
        ctx: &mut Ctx<'_>,
        uid: u64,
        kind: &CallKind,
        ttl: Option<Duration>,
        cancel_at_once: bool,
        method: &'static str,
    ) -> CallId {
        let now = self.at(ctx.now);
        let Some((request_conn, answer_conn)) = self.route() else {
            let cid = self
                .calls
                .start_unrouted(zmesh::proto::calls::Unrouted::NoReadyPeer, now);
            self.call_uid.insert(cid, Outgoing { uid, request: None });
            self.pump(ctx);
            return cid;
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
            return cid;
        }
        let req = request_of(cid, uid, kind, ttl, method);
        if self.send(ctx, request_conn, &Record::Request(req)) {
            ctx.truth.on_request_left(uid);
            self.calls.handle_sent(cid, now);
        } else {
            self.calls.handle_send_failed(cid, now);
        }
        self.pump(ctx);
        cid
    }

    /// Starts the calls of a burst the application made in one turn. They take one route
    /// and leave together, as the runtime sends a turn's calls for one link: BATCH records,
    /// and CALLS records for runs that share their header where `calls` is in effect on the
    /// connection ([`batch::frame`]); a call cancelled in the turn does not leave.
    pub fn start_calls(&mut self, ctx: &mut Ctx<'_>, burst: Vec<Burst>) {
        let now = self.at(ctx.now);
        let Some((request_conn, answer_conn)) = self.route() else {
            for b in burst {
                let cid = self
                    .calls
                    .start_unrouted(zmesh::proto::calls::Unrouted::NoReadyPeer, now);
                let request = None;
                self.call_uid.insert(
                    cid,
                    Outgoing {
                        uid: b.uid,
                        request,
                    },
                );
            }
            self.pump(ctx);
            return;
        };
        let mut leaving: Vec<(u64, CallId)> = Vec::new();
        let mut requests: Vec<wire::Request> = Vec::new();
        for b in burst {
            let cid = self.calls.start(answer_conn, b.ttl, now);
            let request = Some(request_conn);
            self.call_uid.insert(
                cid,
                Outgoing {
                    uid: b.uid,
                    request,
                },
            );
            if b.cancel_at_once && self.calls.is_pending(cid) {
                ctx.truth.on_cancel(b.uid);
                self.calls.handle_cancel(cid, now);
            }
            if self.calls.is_pending(cid) {
                leaving.push((b.uid, cid));
                requests.push(request_of(cid, b.uid, &b.kind, b.ttl, method_of(&b.kind)));
            }
        }
        let caps = self.caps_on(request_conn);
        let calls_on = caps.contains(Capabilities::CALLS);
        let offsets = caps.contains(Capabilities::IDS16);
        for (range, framing) in batch::frame(&requests, calls_on) {
            let part = requests.get(range.clone()).unwrap_or_default().to_vec();
            let count = part.len() as u64;
            let record = match framing {
                Framing::Request => part.into_iter().next().map(Record::Request),
                Framing::Batch => wire::Batch::new(part).ok().map(Record::Batch),
                Framing::Calls => wire::Calls::new(part)
                    .ok()
                    .map(|c| Record::Calls(if offsets { c.with_offsets() } else { c })),
            };
            let sent = record.is_some_and(|r| self.send(ctx, request_conn, &r));
            if sent {
                match framing {
                    Framing::Request => {}
                    Framing::Batch => ctx.truth.stats.batches_sent += 1,
                    Framing::Calls => ctx.truth.stats.calls_records_sent += 1,
                }
                if framing != Framing::Request {
                    ctx.truth.stats.calls_in_records += count;
                }
            }
            for &(uid, cid) in leaving.get(range).unwrap_or_default() {
                if sent {
                    ctx.truth.on_request_left(uid);
                    self.calls.handle_sent(cid, now);
                } else {
                    self.calls.handle_send_failed(cid, now);
                }
            }
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

/// The method a unary call of `kind` calls: the one whose declared semantics are the call's.
fn method_of(kind: &CallKind) -> &'static str {
    match kind {
        CallKind::Query => QUERY_METHOD,
        CallKind::Idempotent => SET_METHOD,
        CallKind::Command | CallKind::Guarded(_) => COMMAND_METHOD,
    }
}

/// The REQUEST of call `cid`, the simulator's call `uid`.
fn request_of(
    cid: CallId,
    uid: u64,
    kind: &CallKind,
    ttl: Option<Duration>,
    method: &'static str,
) -> wire::Request {
    let (semantics, key) = match kind {
        CallKind::Query => (Semantics::Query, None),
        CallKind::Idempotent => (Semantics::IdempotentCommand, None),
        CallKind::Command => (Semantics::NonRepeatableCommand, None),
        CallKind::Guarded(k) => (Semantics::NonRepeatableCommand, Some(k.clone())),
    };
    wire::Request {
        call_id: cid.0,
        ttl_ms: zmesh::proto::calls::ttl_on_wire(ttl),
        semantics,
        channel: name(CHANNEL),
        method: name(method),
        idempotency_key: key.and_then(|k| wire::Name::new(k).ok()),
        payload: crate::truth::payload_of(uid),
    }
}
