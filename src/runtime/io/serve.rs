//! The callee side of calls in the I/O thread (MISSION C4, C6, K1, K4, K5): a REQUEST (alone
//! or in a BATCH) is checked against the served channel's contract, admitted by the serve
//! table (ACCEPT before dispatch), placed in its execution queue, and dispatched to the
//! channel's handlers when its turn comes; a handler's result becomes the one REPLY.
//!
//! The decisions are the sans-IO machines': [`crate::proto::calls::ServeTable`] (admission,
//! ttl after the queue wait, graceful drain), [`crate::proto::calls::ExecQueues`] (serial,
//! keyed or parallel execution, the mailbox, conflation) and [`crate::proto::contract`]
//! (method lookup, the caller's semantics pin). This file moves their records.
//!
//! # One call, in order
//! 1. Route: where its answers go (the caller's Completion lane, or the ClientServer
//!    connection); no route, no answer (the caller fails the call with its lanes).
//! 2. Refusals without ACCEPT (did not run): `ClassNotFound` (nothing serves the channel),
//!    `MethodNotFound`, `IncompatibleVersion` (the method is more dangerous to repeat than the
//!    caller's pin), `Unauthorized` / `Forbidden` (the channel's authorizer, issue 11), the
//!    key function's error (keyed execution), `Unavailable` (stopping), `Busy` (its queue's
//!    mailbox is full).
//! 3. ACCEPT, then: run now, wait in its queue, or take the place of a waiting call of the
//!    same conflating method (that one is answered `Superseded`, after its ACCEPT: did not
//!    run).
//! 4. When its turn comes the serve table reads its ttl (refused `Timeout` if it ran out while
//!    it waited); the handler runs on the application's runtime; its result is the REPLY, and
//!    the next call of its queue moves up.

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use tokio::task::AbortHandle;

use super::calls::CallKey;
use super::{IoThread, LinkKey};
use crate::proto::calls::batch::MAX_INCOMING_BATCH_CALLS;
use crate::proto::calls::{Admission, Arrival, Dispatch, RemoteCode, ServeId};
use crate::proto::contract::{self, ExecutionKind, Semantics};
use crate::proto::wire::{self, Lane, ReplyCode};
use crate::runtime::calls::{CallerGone, Request, ServeError};
use crate::runtime::command::{
    Dispatcher, InlineDispatch, InlineRun, ServeDone, ServeItem, ServeJob, Served,
};
use crate::runtime::records;
use crate::runtime::security::{AuthRequest, Caller, Denied};
use crate::runtime::service::{MethodPlan, INLINE_BUDGET};

/// An execution queue: the channel, and the key under keyed execution.
pub(super) type QueueKey = (String, Option<String>);

/// Calls accepted and waiting in an execution queue, with what their dispatch needs.
pub(super) type WaitingJobs = HashMap<ServeId, ServeJob>;

/// The handlers running on tasks, by call: what tells each that its caller is gone.
///
/// When the connection a call's answer would travel on leaves ready, the serve table hands
/// back the calls whose handlers still run ([`crate::proto::calls::ServeTable`]'s
/// `handle_connection_lost`); each is signalled ([`Request::cancelled`]), and a query's task
/// is also stopped at its next `.await`: a query changes nothing, so nothing is lost. A
/// command (or an undeclared method, which may be one) is never stopped by the runtime: it
/// may be half way through changing the world, and only its handler knows whether stopping
/// there is safe. A stopped task still reports its end, so the call leaves its execution
/// queue as a finished one does.
#[derive(Default)]
pub(super) struct Handlers {
    running: HashMap<ServeId, Running>,
}

struct Running {
    gone: CallerGone,
    task: AbortHandle,
    /// A query: its task is stopped when its caller is gone.
    stoppable: bool,
}

impl Handlers {
    /// The handler of call `id` started on `task`.
    pub(super) fn started(
        &mut self,
        id: ServeId,
        gone: CallerGone,
        task: AbortHandle,
        semantics: Option<Semantics>,
    ) {
        let stoppable = semantics == Some(Semantics::Query);
        self.running.insert(
            id,
            Running {
                gone,
                task,
                stoppable,
            },
        );
    }

    /// The handler of call `id` is over (returned, or its task was stopped).
    pub(super) fn finished(&mut self, id: ServeId) {
        self.running.remove(&id);
    }

    /// The callers of `calls` are gone: each running handler is signalled, each query's task
    /// stopped.
    pub(super) fn callers_gone(&mut self, calls: &[ServeId]) {
        let (mut signalled, mut stopped) = (0u64, 0u64);
        for id in calls {
            let Some(r) = self.running.get(id) else {
                continue;
            };
            r.gone.set();
            signalled += 1;
            if r.stoppable {
                r.task.abort();
                stopped += 1;
            }
        }
        if signalled > 0 {
            metrics::counter!("zmesh_handlers_signalled_total").increment(signalled);
            metrics::counter!("zmesh_handlers_stopped_total").increment(stopped);
            tracing::debug!(signalled, stopped, "handlers of a caller that is gone");
        }
    }
}

impl IoThread {
    /// Where the answers to REQUESTs arriving on link `k` go: the calls' key (the connection
    /// answers travel on), the link to send them on, and the caller's RID and generation.
    /// `None` when there is no way to answer (a REQUEST on a Completion lane, or the caller's
    /// Completion lane is not ready): the caller fails such calls when its lanes fail.
    fn request_route(&self, k: LinkKey) -> Option<(CallKey, LinkKey, String, u64)> {
        let l = self.links.get(k)?;
        let c = l.conn.as_ref()?;
        let (caller, generation) = c
            .peer
            .as_ref()
            .map(|p| (p.rid.clone(), p.generation))
            .unwrap_or_default();
        let key = match l.lane()? {
            Lane::ClientServer => (k, c.id),
            // A RouteMesh call is answered on the caller's Completion lane.
            Lane::Application => self.lane_of(&caller, Lane::Completion)?,
            Lane::Completion => return None,
        };
        let route = self.answer_route(key)?;
        Some((key, route, caller, generation))
    }

    /// Who calls on link `k`, as its connection knows it (see
    /// [`crate::runtime::security::Caller`]).
    pub(super) fn caller_of(&self, k: LinkKey) -> Caller {
        let c = self.links.get(k).and_then(|l| l.conn.as_ref());
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

    /// A BATCH arriving on link `k` (MISSION K5): an envelope, never a transaction. Each call
    /// goes through the path of a lone REQUEST, so each is refused, ACCEPTed, deadlined and
    /// answered on its own. A BATCH over [`MAX_INCOMING_BATCH_CALLS`] is not dispatched:
    /// every call of it is answered `InvalidParams` (did not run), none is dropped.
    pub(super) fn on_batch(&mut self, k: LinkKey, requests: Vec<wire::Request>, now: Instant) {
        metrics::counter!("zmesh_batches_received_total").increment(1);
        if requests.len() > MAX_INCOMING_BATCH_CALLS {
            let Some((_, route, _, _)) = self.request_route(k) else {
                return;
            };
            let message = format!(
                "a BATCH of {} calls exceeds this receiver's limit of {MAX_INCOMING_BATCH_CALLS} \
                 calls; not run",
                requests.len()
            );
            for req in requests {
                self.send_answer(
                    route,
                    records::reply(
                        req.call_id,
                        ReplyCode::InvalidParams,
                        Bytes::from(message.clone()),
                    ),
                );
            }
            return;
        }
        for req in requests {
            self.on_request(k, req, now);
        }
    }

    /// A REQUEST arriving on link `k` (see the module docs for the order of its steps).
    pub(super) fn on_request(&mut self, k: LinkKey, req: wire::Request, now: Instant) {
        let call_id = req.call_id;
        let Some((key, route, caller, caller_generation)) = self.request_route(k) else {
            // No way to answer: the caller fails the call when its lanes fail.
            return;
        };
        let refuse = |io: &mut IoThread, code: ReplyCode, message: String| {
            io.send_answer(
                route,
                records::reply(call_id, code, Bytes::from(message.into_bytes())),
            );
        };
        let channel = req.channel.as_str();
        let method = req.method.as_str();
        let Some(served) = self.served.get(channel) else {
            let msg = format!("nothing serves channel {channel:?} here; not run");
            refuse(self, ReplyCode::ClassNotFound, msg);
            return;
        };
        let Some(plan) = served.service.plan(method) else {
            let msg = format!("channel {channel:?} has no method {method:?}; not run");
            refuse(self, ReplyCode::MethodNotFound, msg);
            return;
        };
        // The caller's pin (MISSION K1): never run a method that became more dangerous to
        // repeat than the contract the caller was built against.
        if !contract::pin_allows(req.semantics, plan.semantics) {
            let msg = format!(
                "{channel}.{method} is {} here, more dangerous to repeat than the {} the \
                 caller was built against; not run",
                contract::semantics_name(plan.semantics),
                contract::semantics_name(contract::from_wire(req.semantics)),
            );
            refuse(self, ReplyCode::IncompatibleVersion, msg);
            return;
        }
        // The channel's authorizer (issue 11, MISSION K6): before ACCEPT, so a refusal did
        // not run. Each call of a BATCH comes through here on its own.
        if let Some(authorizer) = &served.service.authorizer {
            let who = self.caller_of(k);
            let asked = AuthRequest {
                caller: &who,
                channel,
                method,
                semantics: plan.semantics,
            };
            let verdict =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| authorizer(&asked)))
                    .unwrap_or_else(|_| Err(Denied::forbidden("the channel's authorizer failed")));
            if let Err(denied) = verdict {
                let (code, why) = match denied {
                    Denied::Unauthorized(m) => (ReplyCode::Unauthorized, m),
                    Denied::Forbidden(m) => (ReplyCode::Forbidden, m),
                };
                let label = if code == ReplyCode::Unauthorized {
                    "Unauthorized"
                } else {
                    "Forbidden"
                };
                metrics::counter!("zmesh_calls_refused_total", "code" => label).increment(1);
                refuse(self, code, format!("{channel}.{method}: {why}; not run"));
                return;
            }
        }
        let request = Request::new(channel.to_owned(), method.to_owned(), caller, req.payload)
            .with_identity(
                caller_generation,
                call_id.get(),
                req.idempotency_key.map(|k| k.as_str().to_owned()),
            );
        let mailbox = served.service.contract.mailbox;
        let queue = match queue_of(served, &plan, &request) {
            Ok(q) => q,
            Err(e) => {
                refuse(self, e.wire_code().to_reply(), e.message);
                return;
            }
        };
        match self
            .serve
            .handle_request(key, call_id, req.ttl_ms, plan.shape, now)
        {
            Admission::Duplicate => {}
            Admission::Refuse(code) => {
                refuse(self, code, "the service is stopping; not run".into());
            }
            Admission::Accept(sid) => {
                let arrival = self.exec.handle_arrival(
                    queue.clone(),
                    mailbox,
                    &request.method,
                    plan.conflate,
                    sid,
                );
                if arrival == Arrival::Busy {
                    metrics::counter!("zmesh_calls_refused_total", "code" => "Busy").increment(1);
                    if let Some(code) = self.serve.handle_done(sid, ReplyCode::Busy, now) {
                        let msg = format!(
                            "the mailbox of {} is full ({mailbox} calls wait); not run",
                            queue.map_or_else(String::new, |(c, k)| match k {
                                Some(k) => format!("{c} key {k:?}"),
                                None => c,
                            })
                        );
                        refuse(self, code, msg);
                    }
                    self.drain_calls(now);
                    return;
                }
                let accept = records::accept(call_id, self.me.generation, key.1 .0);
                if !self.send_answer(route, accept) {
                    // ACCEPT could not be sent: the answer path is gone.
                    let running = self.serve.handle_connection_lost(key, now);
                    self.handlers.callers_gone(&running);
                    let next = self.left_queue(sid);
                    self.dispatch(next, now);
                    self.forget_orphaned_waiting(now);
                    self.drain_calls(now);
                    return;
                }
                let job = ServeJob {
                    id: sid,
                    request,
                    semantics: plan.semantics,
                };
                match arrival {
                    Arrival::RunNow => self.dispatch(Some((sid, job)), now),
                    Arrival::Queued => {
                        self.waiting_jobs.insert(sid, job);
                    }
                    Arrival::Superseding { replaced } => {
                        self.waiting_jobs.insert(sid, job);
                        self.supersede(replaced, now);
                    }
                    Arrival::Busy => {}
                }
            }
        }
        self.drain_calls(now);
    }

    /// Answers `replaced`, a waiting call a newer call of the same conflating method took the
    /// place of, `Superseded` (MISSION K4: did not run).
    fn supersede(&mut self, replaced: ServeId, now: Instant) {
        self.waiting_jobs.remove(&replaced);
        metrics::counter!("zmesh_calls_refused_total", "code" => "Superseded").increment(1);
        let call = self.serve.call_of(replaced);
        if let Some(code) = self.serve.handle_done(replaced, ReplyCode::Superseded, now) {
            if let Some((key, call_id)) = call {
                if let Some(route) = self.answer_route(key) {
                    let msg = "superseded by a newer call of the same method while it waited; \
                               not run";
                    self.send_answer(route, records::reply(call_id, code, Bytes::from(msg)));
                }
            }
        }
    }

    /// Runs calls whose turn has come, starting with `next`: the serve table reads each one's
    /// ttl after its queue wait (MISSION C6); a call refused or skipped there lets the next
    /// call of its queue move up at once.
    pub(super) fn dispatch(&mut self, mut next: Option<(ServeId, ServeJob)>, now: Instant) {
        while let Some((sid, job)) = next.take() {
            let call = self.serve.call_of(sid);
            match self.serve.handle_dispatch(sid, now) {
                Dispatch::Run => {
                    let handlers = self
                        .served
                        .get(&job.request.channel)
                        .map(|s| (s.dispatch.clone(), s.inline.clone()));
                    match handlers {
                        Some((spawn, Some(inline))) => match self.run_inline(&inline, job) {
                            InlineRun::Answered(result) => {
                                // Answered in place: the REPLY follows the ACCEPT in the same
                                // turn, and the queue moves on without a hand-off.
                                self.finish_call(sid, result, now);
                                next = self.left_queue(sid);
                            }
                            InlineRun::OnTask(job) => self.spawn_handler(&spawn, job),
                        },
                        Some((spawn, None)) => self.spawn_handler(&spawn, job),
                        None => {
                            // Never the case (a served channel is only ever replaced); if it
                            // were: answered, not run.
                            let code = self.serve.handle_done(sid, ReplyCode::Unavailable, now);
                            if let Some(code) = code {
                                self.reply_to(call, code, "the channel is no longer served");
                            }
                            next = self.left_queue(sid);
                        }
                    }
                    continue;
                }
                Dispatch::Refuse(code) => {
                    self.reply_to(call, code, "ttl ran out before dispatch; not run");
                }
                Dispatch::Skip => {}
            }
            next = self.left_queue(sid);
        }
    }

    /// Call `sid` left its execution queue (its handler ended, it was refused or answered,
    /// or its connection is gone): the next call of that queue, now its running call, with
    /// its job. A call no queue holds (parallel) has none.
    pub(super) fn left_queue(&mut self, sid: ServeId) -> Option<(ServeId, ServeJob)> {
        self.waiting_jobs.remove(&sid);
        let mut gone = sid;
        loop {
            let next = self.exec.handle_gone(gone)?;
            match self.waiting_jobs.remove(&next) {
                Some(job) => return Some((next, job)),
                // Never the case (every waiting call has its job); if it were, skip it.
                None => gone = next,
            }
        }
    }

    /// Runs an accepted call's handler on a task, kept in [`Handlers`] until it is over.
    fn spawn_handler(&mut self, spawn: &Dispatcher, job: ServeJob) {
        let (id, gone, semantics) = (job.id, job.request.caller_gone(), job.semantics);
        let task = spawn(job);
        self.handlers.started(id, gone, task, semantics);
    }

    /// Calls waiting in an execution queue whose caller's connection is gone (the serve table
    /// forgot them: they will never run) leave their queue now, so that they do not hold
    /// mailbox places until their turn comes (MISSION K4: a caller that goes away must not
    /// make others `Busy`). A call that was running in its queue lets the next one move up.
    pub(super) fn forget_orphaned_waiting(&mut self, now: Instant) {
        let gone: Vec<ServeId> = self
            .waiting_jobs
            .keys()
            .copied()
            .filter(|&sid| self.serve.call_of(sid).is_none())
            .collect();
        for sid in gone {
            let next = self.left_queue(sid);
            self.dispatch(next, now);
        }
    }

    /// Sends a REPLY for a call identified by the serve table's `(connection, call_id)`.
    fn reply_to(
        &mut self,
        call: Option<(CallKey, std::num::NonZeroU64)>,
        code: ReplyCode,
        msg: &str,
    ) {
        let Some((key, call_id)) = call else { return };
        if let Some(route) = self.answer_route(key) {
            self.send_answer(
                route,
                records::reply(call_id, code, Bytes::copy_from_slice(msg.as_bytes())),
            );
        }
    }

    /// Runs a call's inline handler on this thread (see
    /// [`crate::runtime::service::Service::inline_method`]), or hands the job back for a
    /// task. A run longer than [`INLINE_BUDGET`] is counted, and logged once per channel.
    fn run_inline(&mut self, inline: &InlineDispatch, job: ServeJob) -> InlineRun {
        let channel = job.request.channel.clone();
        let started = Instant::now();
        let result = inline(job);
        if matches!(result, InlineRun::OnTask(_)) {
            return result;
        }
        let took = started.elapsed();
        if took > INLINE_BUDGET {
            metrics::counter!("zmesh_inline_overruns_total").increment(1);
            if self.inline_overruns_logged.insert(channel.clone()) {
                tracing::warn!(
                    channel = %channel,
                    took_us = took.as_micros() as u64,
                    budget_us = INLINE_BUDGET.as_micros() as u64,
                    "an inline handler held the I/O thread longer than its budget; every \
                     connection waited meanwhile: make it a task handler (Service::method) \
                     (logged once per channel)"
                );
            }
        }
        result
    }

    /// A call's handler finished: its one REPLY (unless the serve table already answered
    /// it, e.g. a stream ended by a drain).
    fn finish_call(&mut self, id: ServeId, result: Result<Bytes, ServeError>, now: Instant) {
        let call = self.serve.call_of(id);
        let (code, payload) = match result {
            Ok(bytes) => (ReplyCode::Ok, bytes),
            // Only allow-listed codes leave a handler (MISSION K6).
            Err(e) => (
                e.wire_code().to_reply(),
                Bytes::from(e.message.into_bytes()),
            ),
        };
        if let Some(code) = self.serve.handle_done(id, code, now) {
            if let Some((key, call_id)) = call {
                if let Some(route) = self.answer_route(key) {
                    self.send_answer(route, records::reply(call_id, code, payload));
                }
            }
        }
    }

    /// A handler finished: its REPLY, then the next call of its queue.
    pub(super) fn on_serve_done(&mut self, done: ServeDone, now: Instant) {
        self.handlers.finished(done.id);
        self.finish_call(done.id, done.result, now);
        let next = self.left_queue(done.id);
        self.dispatch(next, now);
        self.drain_calls(now);
    }

    /// A stream handler produced an item: number it and send it as ITEM on the call's answer
    /// route, or tell the handler the stream is over.
    ///
    /// The serve table refuses the item when the call is no longer answered (the drain ended
    /// the stream with `Unavailable`, the caller's connection is gone, the handler already
    /// returned): nothing is sent. An ITEM the link cannot take now is never queued
    /// (MISSION C3); its number is spent, so the stream cannot go on: the call ends at once
    /// with REPLY `UnknownOutcome` (the caller must not take a shortened stream for a
    /// complete one), and the handler's later result is dropped.
    pub(super) fn on_serve_item(&mut self, item: ServeItem, now: Instant) {
        let ServeItem { id, payload, reply } = item;
        let call = self.serve.call_of(id);
        let seq = call.and_then(|_| self.serve.handle_item(id, now));
        let (Some((key, call_id)), Some(seq)) = (call, seq) else {
            let _ = reply.send(Err(ServeError::runtime(
                RemoteCode::Unavailable,
                "the stream is over: the service is stopping, the caller is gone, or the call \
                 already ended",
            )));
            self.drain_calls(now);
            return;
        };
        let route = self.answer_route(key);
        let sent = route.is_some_and(|r| {
            self.send_on_link(r, records::item(call_id, seq, payload))
                .is_ok()
        });
        if sent {
            let _ = reply.send(Ok(()));
        } else {
            metrics::counter!("zmesh_stream_items_unsent_total").increment(1);
            let message = format!("stream item {seq} could not be sent now; the stream ended");
            if let Some(code) = self.serve.handle_done(id, ReplyCode::UnknownOutcome, now) {
                if let Some(r) = route {
                    self.send_answer(
                        r,
                        records::reply(call_id, code, Bytes::from(message.clone())),
                    );
                }
            }
            let _ = reply.send(Err(ServeError::runtime(
                RemoteCode::UnknownOutcome,
                message,
            )));
        }
        self.drain_calls(now);
    }

    /// Registers a served channel (replacing an earlier registration of the same name).
    pub(super) fn serve_channel(&mut self, channel: String, served: Served) {
        self.served.insert(channel, served);
    }
}

/// The execution queue of a call (MISSION K4): none (parallel), the channel's (serial), or
/// the channel's queue for the key the service's key function names (keyed). A key function
/// that fails refuses the call with its error; one that panics refuses it `InvalidParams`.
fn queue_of(
    served: &Served,
    plan: &MethodPlan,
    request: &Request,
) -> Result<Option<QueueKey>, ServeError> {
    let channel = || request.channel.clone();
    match plan.execution {
        ExecutionKind::Parallel => Ok(None),
        ExecutionKind::Serial => Ok(Some((channel(), None))),
        ExecutionKind::Keyed => {
            let Some(key_fn) = served.service.key.as_ref() else {
                // Validation refuses keyed execution without a key function; serial then.
                return Ok(Some((channel(), None)));
            };
            let key = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| key_fn(request)))
                .unwrap_or_else(|_| {
                    Err(ServeError::new(
                        RemoteCode::InvalidParams,
                        "the service's key function failed on these arguments",
                    ))
                })?;
            Ok(Some((channel(), Some(key))))
        }
    }
}
