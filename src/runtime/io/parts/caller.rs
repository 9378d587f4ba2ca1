//! The caller side of calls (MISSION C1-C3, C5, K2, K5): [`Caller`] owns this node's calls
//! (the call table, the reply channels of the application's call futures and streams, the
//! REQUESTs of this loop turn, the operations registry's funnel, the round-robin position
//! among servers) and decides what each input does to them; the I/O thread finds the routes
//! and sends the REQUESTs it hands out.
//!
//! A call's key is the physical connection its answers travel on (module `io/calls.rs`);
//! its lease is that connection: when it leaves ready, the call fails at once (MISSION C2).
//!
//! Streams: a call's items go to its [`StreamEvent`] channel in order, and always before its
//! end ([`Caller::deliver`] hands items before completions).

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::proto::calls::batch;
use crate::proto::calls::CallError;
use crate::proto::calls::{ttl_on_wire, CallId, CallTable, Disposition, Unrouted};
use crate::proto::contract;
use crate::proto::node::keys::{CallKey, LinkKey};
use crate::proto::ops;
use crate::proto::wire;
use crate::runtime::calls::{CallAnswer, CallOptions, StreamEvent, STREAM_BUFFER};
use crate::runtime::command::CallReply;
use crate::runtime::operations::OpsShared;
use crate::runtime::records;

/// How the REQUESTs for one link may share a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendPolicy {
    /// Each alone: the node behind the link turned batching off.
    Alone,
    /// In BATCHes (version 1).
    Batch,
    /// In CALLS records where consecutive calls share their header, BATCHes otherwise: the
    /// link negotiated capability `calls`. With `offsets` (the link negotiated `ids16` too)
    /// a CALLS record writes its ids as offsets (CALLS16, WIRE.md §4.19).
    Grouped {
        /// Whether CALLS records go in the offset form.
        offsets: bool,
    },
}

/// How a message of REQUESTs is encoded: [`records::requests`] or [`records::calls`].
type Encode = fn(Vec<wire::Request>) -> Result<Vec<Vec<u8>>, wire::WireError>;

/// One message of `calls` for `link`, encoded by `encode`.
fn message(link: LinkKey, calls: Vec<(CallId, wire::Request)>, encode: Encode) -> Requests {
    let (ids, requests): (Vec<CallId>, Vec<wire::Request>) = calls.into_iter().unzip();
    Requests {
        link,
        frames: encode(requests).ok(),
        ids,
    }
}

/// `calls` for `link` in the messages [`batch::frame`] cuts them into, in order: lone
/// REQUESTs, BATCHes and, where `grouped` (the link negotiated capability `calls`), CALLS
/// records for runs of calls that share their header, in the offset form where `offsets`.
fn framed(
    link: LinkKey,
    calls: Vec<(CallId, wire::Request)>,
    grouped: bool,
    offsets: bool,
    out: &mut Vec<Requests>,
) {
    let (ids, requests): (Vec<CallId>, Vec<wire::Request>) = calls.into_iter().unzip();
    let messages = batch::frame(&requests, grouped);
    let mut requests = requests.into_iter();
    for (range, framing) in messages {
        let part: Vec<wire::Request> = requests.by_ref().take(range.len()).collect();
        let frames = match framing {
            batch::Framing::Calls => records::calls(part, offsets),
            batch::Framing::Request | batch::Framing::Batch => records::requests(part),
        };
        out.push(Requests {
            link,
            frames: frames.ok(),
            ids: ids.get(range).map(<[CallId]>::to_vec).unwrap_or_default(),
        });
    }
}

/// Longest time the call gauges go without being set again while their values stay the same.
const GAUGE_REFRESH: Duration = Duration::from_secs(1);

/// A call the application asked for, as the command carried it.
pub(crate) struct NewCall {
    /// The channel called.
    pub(crate) channel: String,
    /// The method called.
    pub(crate) method: String,
    /// The encoded arguments.
    pub(crate) args: Bytes,
    /// The call's options.
    pub(crate) opts: CallOptions,
    /// Where its answer goes.
    pub(crate) reply: CallReply,
    /// The application's name for it, for a cancel.
    pub(crate) token: u64,
}

/// Where a call goes, as the I/O thread found it.
pub(crate) struct Route {
    /// The link its REQUEST goes out on.
    pub(crate) send: LinkKey,
    /// The connection its answers travel on (its lease).
    pub(crate) key: CallKey,
    /// The RID of the node behind it, if known (for the operations registry).
    pub(crate) target: Option<String>,
}

/// One message of REQUESTs for one link: a lone REQUEST or a BATCH.
pub(crate) struct Requests {
    /// The link to send it on.
    pub(crate) link: LinkKey,
    /// Its frames, or `None` when it could not be encoded (its calls fail as never sent).
    pub(crate) frames: Option<Vec<Vec<u8>>>,
    /// The calls in it, in order.
    ids: Vec<CallId>,
}

impl Requests {
    /// How many calls it carries.
    pub(crate) fn calls(&self) -> usize {
        self.ids.len()
    }
}

/// The caller's state (see the module docs). Its fields are its own: the I/O thread talks
/// to it through its methods.
pub(crate) struct Caller {
    /// Calls this node made, leased on the connection that carried them (MISSION C1, C2).
    table: CallTable<CallKey>,
    /// The application's side of each pending call, with the token that names it.
    replies: HashMap<CallId, (CallReply, u64)>,
    /// The pending calls by the application's token, for a cancel.
    tokens: HashMap<u64, CallId>,
    /// Calls the REPLY that completed them said were replayed (WIRE.md §4.17), until the
    /// completion is handed to the application.
    replayed: HashSet<CallId>,
    /// REQUESTs of calls started in this loop turn, with the link they go on: sent together
    /// (per link, as BATCHes) before any other command is handled and at the end of the
    /// command drain (MISSION K5).
    outgoing: Vec<(LinkKey, CallId, wire::Request)>,
    /// The operations registry: one frozen entry per call this node made (MISSION K2).
    ops: Arc<OpsShared>,
    /// Round-robin position among the ready servers of a channel.
    rr: usize,
    /// Channels some peer ever announced a Server membership for.
    known_servers: HashSet<String>,
    /// The call gauges as last set (set again on a change, or once a second): calls
    /// pending, operations per status, and when.
    gauges: Option<(usize, ops::OpCounts, Instant)>,
}

impl Caller {
    /// A caller with no calls, recording into the operations registry `ops`.
    pub(crate) fn new(ops: Arc<OpsShared>) -> Caller {
        Caller {
            table: CallTable::new(),
            replies: HashMap::new(),
            tokens: HashMap::new(),
            replayed: HashSet::new(),
            outgoing: Vec::new(),
            ops,
            rr: 0,
            known_servers: HashSet::new(),
            gauges: None,
        }
    }

    /// A peer announced a Server membership for `channel`: a call to it that finds no
    /// ready server has no ready peer, not no registration.
    pub(crate) fn learn_server(&mut self, channel: &str) {
        if !self.known_servers.contains(channel) {
            self.known_servers.insert(channel.to_owned());
        }
    }

    /// Picks the connection for a call to any server of `channel` among the `ready` routes
    /// (REQUEST link, call key), round-robin. `configured`: a ClientServer server of the
    /// channel is configured, ready or not.
    pub(crate) fn pick(
        &mut self,
        channel: &str,
        ready: &[(LinkKey, CallKey)],
        configured: bool,
    ) -> Result<(LinkKey, CallKey), Unrouted> {
        if ready.is_empty() {
            return Err(if configured || self.known_servers.contains(channel) {
                Unrouted::NoReadyPeer
            } else {
                Unrouted::NoRegistration
            });
        }
        let pick = ready[self.rr % ready.len()];
        self.rr = self.rr.wrapping_add(1);
        Ok(pick)
    }

    /// Starts a call on `route` (or fails it at once as never sent, for the reason given):
    /// its REQUEST waits for [`Caller::take_requests`], which the I/O thread calls before
    /// any other command and at the end of the command drain, so the REQUEST leaves in this
    /// loop turn (or the call fails at once as never sent).
    pub(crate) fn start(&mut self, call: NewCall, route: Result<Route, Unrouted>, now: Instant) {
        let NewCall {
            channel,
            method,
            args,
            opts,
            reply,
            token,
        } = call;
        let ttl = opts.ttl.filter(|t| !t.is_zero());
        let semantics = contract::to_wire(opts.semantics);
        let mut target = None;
        let id = match route {
            Err(why) => self.table.start_unrouted(why, now),
            Ok(route) => {
                let id = self.table.start(route.key, ttl, now);
                target = route.target;
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
                    Ok(r) => self.outgoing.push((route.send, id, r)),
                    Err(_) => {
                        let _ = self.table.handle_send_failed(id, now);
                    }
                }
                id
            }
        };
        // The one funnel every call of this node passes (MISSION K2).
        let target = target.unwrap_or_else(|| ops::channel_target(&channel));
        self.ops
            .with(|r| r.issue(id.get().get(), target, channel, method, semantics, now));
        if self.table.is_pending(id) {
            self.tokens.insert(token, id);
        }
        self.replies.insert(id, (reply, token));
    }

    /// The application stopped waiting for the call it named `token`, at `now`: the call
    /// ends as `Cancelled` (whether it was sent says whether it may have run). Its REQUEST,
    /// if still waiting for this turn's send, never leaves; if it left, the callee is to be
    /// told ([`Caller::take_cancels`]). A token of a call that already ended changes nothing.
    pub(crate) fn cancel(&mut self, token: u64, now: Instant) {
        let Some(id) = self.tokens.remove(&token) else {
            return;
        };
        if self.table.handle_cancel(id, now) == crate::proto::calls::Disposition::Applied {
            metrics::counter!("zmesh_calls_cancelled_total").increment(1);
        }
    }

    /// Where a CREDIT for the stream the application named `token` goes: its connection and
    /// call id, while it is pending.
    pub(crate) fn credit_target(&self, token: u64) -> Option<(CallKey, NonZeroU64)> {
        let id = *self.tokens.get(&token)?;
        Some((self.table.target(id)?, id.get()))
    }

    /// The calls whose callers stopped waiting after their REQUEST left (cancelled, or past
    /// their deadline), each with the connection its answers travel on: a CANCEL to send
    /// where that connection's pair negotiated it.
    pub(crate) fn take_cancels(&mut self) -> Vec<(CallKey, NonZeroU64)> {
        std::iter::from_fn(|| self.table.poll_cancel())
            .map(|(key, id)| (key, id.get()))
            .collect()
    }

    /// True if REQUESTs of this turn wait to be sent.
    pub(crate) fn has_requests(&self) -> bool {
        !self.outgoing.is_empty()
    }

    /// The REQUESTs of this turn as messages (MISSION K5): the calls for one link go, in
    /// order, as one BATCH when there are two or more (cut by [`batch::split`] above
    /// [`batch::MAX_BATCH_CALLS`]) and as a lone REQUEST otherwise, or each alone when
    /// `policy` says the node behind the link turned batching off. Where the link negotiated
    /// capability `calls`, a run of consecutive calls sharing channel, method, ttl and
    /// semantics goes as CALLS records instead (WIRE.md §4.14), the shared fields said once;
    /// calls never change order. Send each, in order, and report with
    /// [`Caller::handle_sent`]: a message the link cannot take now fails every call in it at
    /// once as never sent (a frame is never queued on a link that cannot send now, MISSION
    /// C3).
    pub(crate) fn take_requests(
        &mut self,
        policy: impl Fn(LinkKey) -> SendPolicy,
    ) -> Vec<Requests> {
        let mut per_link: Vec<(LinkKey, Vec<(CallId, wire::Request)>)> = Vec::new();
        // A call that ended before its REQUEST left (cancelled in this turn) must not leave.
        let table = &self.table;
        for (link, id, request) in self
            .outgoing
            .drain(..)
            .filter(|(_, id, _)| table.is_pending(*id))
        {
            match per_link.iter_mut().find(|(l, _)| *l == link) {
                Some((_, calls)) => calls.push((id, request)),
                None => per_link.push((link, vec![(id, request)])),
            }
        }
        let mut out = Vec::new();
        for (link, calls) in per_link {
            match policy(link) {
                SendPolicy::Alone => {
                    for call in calls {
                        out.push(message(link, vec![call], records::requests));
                    }
                }
                SendPolicy::Batch => framed(link, calls, false, false, &mut out),
                SendPolicy::Grouped { offsets } => framed(link, calls, true, offsets, &mut out),
            }
        }
        out
    }

    /// The message `requests` was handed to its socket (`sent`), or not.
    pub(crate) fn handle_sent(&mut self, requests: &Requests, sent: bool, now: Instant) {
        if requests.ids.len() > 1 && sent {
            metrics::counter!("zmesh_batches_sent_total").increment(1);
        }
        for &id in &requests.ids {
            if sent {
                let _ = self.table.handle_sent(id, now);
                self.ops.with(|r| r.sent(id.get().get(), now));
                metrics::counter!("zmesh_calls_started_total").increment(1);
            } else {
                let _ = self.table.handle_send_failed(id, now);
            }
        }
    }

    /// ACCEPT, ITEM or REPLY for one of this node's calls, arriving on connection `key`.
    pub(crate) fn handle_answer(&mut self, key: CallKey, rec: records::Rec, now: Instant) {
        let id = |n: NonZeroU64| CallId(n);
        match rec {
            records::Rec::Accept { call_id } => {
                let _ = self.table.handle_accept(id(call_id), key, now);
            }
            records::Rec::Item {
                call_id,
                seq,
                payload,
            } => {
                let _ = self.table.handle_item(id(call_id), key, seq, payload, now);
            }
            records::Rec::Reply {
                call_id,
                code,
                payload,
                replayed,
            } => {
                let applied = self
                    .table
                    .handle_reply(id(call_id), key, code, payload, now);
                // The REPLY that completes a call is the answer it reports (a late or
                // foreign one changes nothing).
                if replayed && applied == Disposition::Applied {
                    self.replayed.insert(id(call_id));
                }
            }
            _ => {}
        }
    }

    /// Connection `key` left ready: every call leased on it fails; returns how many.
    pub(crate) fn handle_connection_lost(&mut self, key: CallKey, now: Instant) -> usize {
        self.table.handle_connection_lost(key, now)
    }

    /// The node stops: every call still out ends now, each saying whether it may have run.
    pub(crate) fn handle_shutdown(&mut self, now: Instant) {
        self.table.handle_shutdown(now);
    }

    /// Applies the call deadlines due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.table.handle_timeout(now);
    }

    /// The earliest call deadline.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.table.poll_timeout()
    }

    /// Calls pending (MISSION C5).
    pub(crate) fn pending(&self) -> usize {
        self.table.pending()
    }

    /// Calls pending on connection `key`.
    pub(crate) fn pending_on(&self, key: CallKey) -> usize {
        self.table.pending_on(key)
    }

    /// Hands finished calls and stream items to the application, and sets the call gauges.
    ///
    /// Items first: the table queues a call's items before its completion, so handing them
    /// first gives every item to its stream before the stream's end. Items of a call nobody
    /// streams (a unary caller, a dropped stream) are dropped.
    ///
    /// A stream's buffer holds [`STREAM_BUFFER`] items (one more place is kept for its end):
    /// an item that finds it full ends the stream as [`CallError::StreamOverrun`] (the callee
    /// is told), and so does a stream whose last item found no room just before its REPLY.
    pub(crate) fn deliver(&mut self, now: Instant) {
        let mut overrun: Vec<CallId> = Vec::new();
        while let Some(item) = self.table.poll_item() {
            self.ops.with(|r| r.item(item.id.get().get(), now));
            let Some((CallReply::Stream(tx), _)) = self.replies.get(&item.id) else {
                continue;
            };
            if overrun.contains(&item.id) {
                continue;
            }
            if tx.is_closed() || tx.capacity() > 1 {
                let _ = tx.try_send(StreamEvent::Item(item.payload));
                continue;
            }
            metrics::counter!("zmesh_stream_overruns_total").increment(1);
            overrun.push(item.id);
            let _ = self.table.handle_overrun(item.id, STREAM_BUFFER, now);
        }
        while let Some((id, result)) = self.table.poll_completion() {
            // A stream that lost an item to a full buffer is never passed off as whole, even
            // if its REPLY had already arrived.
            let replayed = self.replayed.remove(&id);
            let (result, replayed) = if overrun.contains(&id) {
                let overrun = CallError::StreamOverrun {
                    buffered: STREAM_BUFFER,
                };
                (Err(overrun), false)
            } else {
                (result, replayed)
            };
            self.ops.with(|r| {
                r.settle_answer(id.get().get(), result.as_ref().map(|_| ()), replayed, now)
            });
            if let Some((reply, token)) = self.replies.remove(&id) {
                self.tokens.remove(&token);
                let result = result.map(|c| c.payload);
                if let Err(e) = &result {
                    metrics::counter!("zmesh_calls_failed_total", "code" => e.code()).increment(1);
                }
                match reply {
                    CallReply::Unary(tx) => {
                        let _ = tx.send(CallAnswer::new(result, replayed));
                    }
                    CallReply::Stream(tx) => {
                        // The buffer always keeps a place for the end.
                        let _ = tx.try_send(StreamEvent::End(result));
                    }
                }
            }
        }
        self.set_gauges(now);
    }

    /// Sets the call gauges when their values changed, and at least once per
    /// [`GAUGE_REFRESH`] (a recorder installed after the node started sees them too).
    /// Setting a labelled gauge is a registry lookup per label set, too dear for every loop
    /// turn of a large node.
    fn set_gauges(&mut self, now: Instant) {
        let pending = self.table.pending();
        let counts = self.ops.with(|r| r.counts());
        let fresh = match &self.gauges {
            Some((p, c, at)) => *p == pending && *c == counts && now < *at + GAUGE_REFRESH,
            None => false,
        };
        if fresh {
            return;
        }
        self.gauges = Some((pending, counts, now));
        metrics::gauge!("zmesh_calls_pending").set(pending as f64);
        for status in ops::OpStatus::ALL {
            metrics::gauge!("zmesh_operations", "status" => status.name())
                .set(counts.get(status) as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::proto::wire::{Kind, Name, Record, Semantics};

    fn call(id: u64, method: &str) -> (CallId, wire::Request) {
        let n = NonZeroU64::new(id).unwrap();
        (
            CallId(n),
            wire::Request {
                call_id: n,
                ttl_ms: None,
                semantics: Semantics::Query,
                channel: Name::new("pump").unwrap(),
                method: Name::new(method).unwrap(),
                idempotency_key: None,
                payload: Bytes::new(),
            },
        )
    }

    /// MISSION K5, X4: runs of two or more calls that share their header go as CALLS (as
    /// CALLS16 where the link speaks `ids16`), the calls between runs as a lone REQUEST or a
    /// BATCH, and no call changes its place.
    #[test]
    fn k5_x4_grouped_calls_keep_their_order() {
        let link = <LinkKey as crate::proto::node::keys::Key>::from_index(0);
        let calls = || {
            vec![
                call(1, "read"),
                call(2, "read"),
                call(3, "set"),
                call(4, "read"),
                call(5, "read"),
                call(6, "read"),
                call(7, "set"),
                call(8, "get"),
            ]
        };
        let shape = |offsets: bool| -> Vec<(Kind, Vec<u64>)> {
            let mut out = Vec::new();
            framed(link, calls(), true, offsets, &mut out);
            let caps = wire::Capabilities::CALLS.union(wire::Capabilities::IDS16);
            out.iter()
                .map(|m| {
                    let frames = m.frames.as_ref().expect("encodes");
                    let kind =
                        Record::decode_in(frames, caps, |f: &Vec<u8>| Bytes::copy_from_slice(f))
                            .expect("decodes")
                            .kind();
                    (kind, m.ids.iter().map(|id| id.get().get()).collect())
                })
                .collect()
        };
        let expect = |calls: Kind| {
            vec![
                (calls, vec![1, 2]),
                (Kind::Request, vec![3]),
                (calls, vec![4, 5, 6]),
                (Kind::Batch, vec![7, 8]),
            ]
        };
        assert_eq!(shape(false), expect(Kind::Calls));
        assert_eq!(shape(true), expect(Kind::Calls16));
    }
}
