//! The application's side of this node's calls: [`Caller`] holds the node core's
//! [`Calls`] (which decides what each input does to a call) and, beside it, the reply
//! channel of each call's future or stream, the operations registry's funnel (MISSION K2)
//! and the call gauges. The I/O thread finds the routes and sends the REQUESTs it hands out.
//!
//! Streams: a call's items go to its [`StreamEvent`] channel in order, and always before its
//! end ([`Caller::deliver`] hands items before completions).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::proto::calls::{CallId, Unrouted};
use crate::proto::node::caller::{CallStart, Calls, Finished};
pub(crate) use crate::proto::node::caller::{Requests, Route};
use crate::proto::node::core::Answer;
use crate::proto::node::keys::CallKey;
use crate::proto::ops;
use crate::runtime::calls::{CallAnswer, CallOptions, StreamEvent, STREAM_BUFFER};
use crate::runtime::command::CallReply;
use crate::runtime::operations::OpsShared;

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

/// The caller's state (see the module docs). Its fields are its own: the I/O thread talks
/// to it through its methods.
pub(crate) struct Caller {
    /// This node's calls, as the core keeps them (MISSION C1, C2).
    calls: Calls,
    /// The application's side of each call not yet handed out finished.
    replies: HashMap<CallId, CallReply>,
    /// The operations registry: one frozen entry per call this node made (MISSION K2).
    ops: Arc<OpsShared>,
    /// The call gauges as last set (set again on a change, or once a second): calls
    /// pending, operations per status, and when.
    gauges: Option<(usize, ops::OpCounts, Instant)>,
}

impl Caller {
    /// A caller with no calls, recording into the operations registry `ops`.
    pub(crate) fn new(ops: Arc<OpsShared>) -> Caller {
        Caller {
            calls: Calls::default(),
            replies: HashMap::new(),
            ops,
            gauges: None,
        }
    }

    /// The core's calls, for what the shell only forwards: routing a call, the REQUESTs and
    /// CANCELs of a turn, a lost connection, deadlines, the counts.
    pub(crate) fn calls(&self) -> &Calls {
        &self.calls
    }

    /// The core's calls, to drive (see [`Caller::calls`]).
    pub(crate) fn calls_mut(&mut self) -> &mut Calls {
        &mut self.calls
    }

    /// Starts a call on `route` (or fails it at once as never sent, for the reason given;
    /// [`Calls::start`]), and records it in the operations registry, the one funnel every
    /// call of this node passes (MISSION K2).
    pub(crate) fn start(&mut self, call: NewCall, route: Result<Route, Unrouted>, now: Instant) {
        let NewCall {
            channel,
            method,
            args,
            opts,
            reply,
            token,
        } = call;
        let start = CallStart {
            channel: &channel,
            method: &method,
            args,
            ttl: opts.ttl,
            semantics: opts.semantics,
            idempotency_key: opts.idempotency_key.as_deref(),
            token,
        };
        let started = self.calls.start(start, route, now);
        let (id, target, semantics) = (started.id, started.target, started.semantics);
        self.ops
            .with(|r| r.issue(id.get().get(), target, channel, method, semantics, now));
        self.replies.insert(id, reply);
    }

    /// The application stopped waiting for the call it named `token` ([`Calls::cancel`]).
    pub(crate) fn cancel(&mut self, token: u64, now: Instant) {
        if self.calls.cancel(token, now) {
            metrics::counter!("zmesh_calls_cancelled_total").increment(1);
        }
    }

    /// The message `requests` was handed to its socket (`sent`), or not.
    pub(crate) fn handle_sent(&mut self, requests: &Requests, sent: bool, now: Instant) {
        if requests.calls() > 1 && sent {
            metrics::counter!("zmesh_batches_sent_total").increment(1);
        }
        self.calls.handle_sent(requests, sent, now);
        if sent {
            for id in requests.ids() {
                self.ops.with(|r| r.sent(id.get().get(), now));
                metrics::counter!("zmesh_calls_started_total").increment(1);
            }
        }
    }

    /// ACCEPT, ITEM or REPLY for one of this node's calls, arriving on connection `key`.
    pub(crate) fn handle_answer(&mut self, key: CallKey, answer: Answer, now: Instant) {
        match answer {
            Answer::Accept(a) => self.calls.handle_accept(key, a.call_id, now),
            Answer::Item(i) => self
                .calls
                .handle_item(key, i.call_id, i.seq, i.payload, now),
            Answer::Reply(r) => {
                (self.calls).handle_reply(key, r.call_id, r.code, r.payload, r.replayed, now)
            }
        }
    }

    /// Hands finished calls and stream items to the application, and sets the call gauges.
    ///
    /// Items first: the core hands out a call's items before its completion, so handing them
    /// first gives every item to its stream before the stream's end. Items of a call nobody
    /// streams (a unary caller, a dropped stream) are dropped.
    ///
    /// A stream's buffer holds [`STREAM_BUFFER`] items (one more place is kept for its end):
    /// an item that finds it full ends the stream as
    /// [`CallError::StreamOverrun`](crate::proto::calls::CallError::StreamOverrun) (the
    /// callee is told, [`Calls::handle_overrun`]), and so does a stream whose last item found
    /// no room just before its REPLY.
    pub(crate) fn deliver(&mut self, now: Instant) {
        while let Some(item) = self.calls.poll_item() {
            self.ops.with(|r| r.item(item.id.get().get(), now));
            let Some(CallReply::Stream(tx)) = self.replies.get(&item.id) else {
                continue;
            };
            if self.calls.is_overrun(item.id) {
                continue;
            }
            if tx.is_closed() || tx.capacity() > 1 {
                let _ = tx.try_send(StreamEvent::Item(item.payload));
                continue;
            }
            metrics::counter!("zmesh_stream_overruns_total").increment(1);
            self.calls.handle_overrun(item.id, STREAM_BUFFER, now);
        }
        while let Some(Finished {
            id,
            result,
            replayed,
        }) = self.calls.poll_completion()
        {
            self.ops.with(|r| {
                r.settle_answer(id.get().get(), result.as_ref().map(|_| ()), replayed, now)
            });
            if let Some(reply) = self.replies.remove(&id) {
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
        let pending = self.calls.pending();
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
