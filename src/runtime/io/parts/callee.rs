//! The callee side of calls (MISSION C4, C6, K1, K4, K5): [`Callee`] owns everything a node
//! needs to serve calls (the served channels, the serve table, the execution queues, the
//! waiting jobs, the running handlers) and decides what happens to each REQUEST; the I/O
//! thread routes REQUESTs to it and sends the answers it decides on.
//!
//! The sans-IO machines decide the steps: [`crate::proto::calls::ServeTable`] (admission,
//! ttl after the queue wait, graceful drain), [`crate::proto::calls::ExecQueues`] (serial,
//! keyed or parallel execution, the mailbox, conflation) and [`crate::proto::contract`]
//! (method lookup, the caller's semantics pin). [`Callee`] puts them in order and hands work
//! to the application's handlers.
//!
//! # One call, in order
//! 1. Route (the I/O thread): where its answers go (the caller's Completion lane, or the
//!    ClientServer connection); no route, no answer (the caller fails the call with its
//!    lanes).
//! 2. Refusals without ACCEPT (did not run): `ClassNotFound` (nothing serves the channel),
//!    `MethodNotFound`, `IncompatibleVersion` (the method is more dangerous to repeat than the
//!    caller's pin), `Unauthorized` / `Forbidden` (the channel's authorizer), the key
//!    function's error (keyed execution), `Unavailable` (stopping), `Busy` (its queue's
//!    mailbox is full).
//! 3. ACCEPT ([`Callee::handle_request`] takes the call, the I/O thread sends it and reports with
//!    [`Callee::handle_accept_sent`]), then: run now, wait in its queue, or take the place of
//!    a waiting call of the same conflating method (that one is answered `Superseded`, after
//!    its ACCEPT: did not run).
//! 4. When its turn comes the serve table reads its ttl (refused `Timeout` if it ran out while
//!    it waited); the handler runs on the application's runtime (or inline); its result is
//!    the REPLY, and the next call of its queue moves up.
//!
//! # Answers
//! Every REPLY the callee decides on waits in its own queue, keyed by the call's connection,
//! until the I/O thread takes it ([`Callee::poll_answer`]) and sends it on that connection's
//! route, if it is still there. The serve table's own answers (ttl refusals, the drain) come
//! out of the same queue, in the order they were decided.

use std::collections::{HashMap, HashSet, VecDeque};
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::AbortHandle;

use crate::proto::calls::batch::MAX_INCOMING_BATCH_CALLS;
use crate::proto::calls::{
    Admission, Arrival, Cancelled, Dispatch, ExecQueues, RemoteCode, ServeId, ServeTable,
};
use crate::proto::contract::{self, ExecutionKind};
use crate::proto::node::callee::{self as records, MethodPlan};
use crate::proto::node::callee::{Answer, From};
use crate::proto::node::keys::CallKey;
use crate::proto::wire::{self, ReplyCode};
use crate::runtime::calls::{CallerGone, Request, ServeError};
use crate::runtime::command::{
    Dispatcher, InlineDispatch, InlineRun, ServeDone, ServeItem, ServeJob, Served,
};
use crate::runtime::security::{AuthRequest, Caller, Denied};
use crate::runtime::service::INLINE_BUDGET;

/// Longest graceful stop: accepted calls still running then are answered `Unavailable`.
pub const GRACEFUL_STOP_BOUND: Duration = Duration::from_secs(10);

/// An execution queue: the channel, and the key under keyed execution.
type QueueKey = (String, Option<String>);

/// A call [`Callee::handle_request`] took, not yet ACCEPTed on the wire: what it needs once
/// its ACCEPT left.
pub(crate) struct Accepting {
    key: CallKey,
    job: ServeJob,
    call_id: NonZeroU64,
    arrival: Arrival<ServeId>,
}

impl Accepting {
    /// The caller's id of the call, for its ACCEPT.
    pub(crate) fn call_id(&self) -> NonZeroU64 {
        self.call_id
    }
}

/// A stream item whose ITEM the I/O thread is to send now (numbered by the serve table).
pub(crate) struct ItemToSend {
    /// The call's connection.
    pub(crate) key: CallKey,
    /// The ITEM record's frames.
    pub(crate) frames: Vec<Vec<u8>>,
    id: ServeId,
    call_id: NonZeroU64,
    seq: u64,
    reply: tokio::sync::oneshot::Sender<Result<(), ServeError>>,
}

/// The callee's state (see the module docs). Its fields are its own: the I/O thread talks to
/// it through the `handle_*` methods and takes its answers from [`Callee::poll_answer`].
pub(crate) struct Callee {
    /// The channels this node serves.
    served: HashMap<String, Served>,
    /// Calls this node serves (MISSION C4, C6).
    table: ServeTable<CallKey>,
    /// The execution queues of served calls (MISSION K4).
    exec: ExecQueues<QueueKey, ServeId>,
    /// Accepted calls waiting in an execution queue, with their jobs.
    waiting: HashMap<ServeId, ServeJob>,
    /// Handlers running on tasks, signalled or stopped when their caller is gone.
    handlers: Handlers,
    /// Channels whose inline handler overran its budget (logged once each).
    overruns_logged: HashSet<String>,
    /// Answers decided and not yet taken by the I/O thread, in order.
    answers: VecDeque<Answer>,
    /// Stream items waiting for their call's window to open, in order (WIRE.md §4.15).
    held: HashMap<ServeId, VecDeque<ServeItem>>,
}

impl Callee {
    /// A callee that serves nothing yet.
    pub(crate) fn new() -> Callee {
        Callee {
            served: HashMap::new(),
            table: ServeTable::new(),
            exec: ExecQueues::new(),
            waiting: HashMap::new(),
            handlers: Handlers::default(),
            overruns_logged: HashSet::new(),
            answers: VecDeque::new(),
            held: HashMap::new(),
        }
    }

    /// Registers a served channel (replacing an earlier registration of the same name).
    pub(crate) fn serve_channel(&mut self, channel: String, served: Served) {
        self.served.insert(channel, served);
    }

    /// A BATCH from `from` (MISSION K5): an envelope, never a transaction. Each call goes
    /// through the path of a lone REQUEST (the I/O thread hands them to
    /// [`Callee::handle_request`] one by one), so each is refused, ACCEPTed, deadlined and
    /// answered on its own. A BATCH over [`MAX_INCOMING_BATCH_CALLS`] is not dispatched:
    /// every call of it is answered `InvalidParams` (did not run), none is dropped. Returns
    /// the requests to handle one by one (none when the BATCH was refused whole).
    pub(crate) fn handle_batch(
        &mut self,
        key: CallKey,
        requests: Vec<wire::Request>,
    ) -> Vec<wire::Request> {
        metrics::counter!("zmesh_batches_received_total").increment(1);
        if requests.len() <= MAX_INCOMING_BATCH_CALLS {
            return requests;
        }
        let message = format!(
            "a BATCH of {} calls exceeds this receiver's limit of {MAX_INCOMING_BATCH_CALLS} \
             calls; not run",
            requests.len()
        );
        for req in requests {
            self.answers.push_back(Answer {
                key,
                reply: records::reply(
                    req.call_id,
                    ReplyCode::InvalidParams,
                    Bytes::from(message.clone()),
                ),
            });
        }
        Vec::new()
    }

    /// A REQUEST from `from` (see the module docs for the order of its steps). `who` tells
    /// who calls, for the channel's authorizer (asked only when the channel has one).
    /// Returns the call if it was taken: send its ACCEPT now, then report with
    /// [`Callee::handle_accept_sent`]. `None`: answered already (refused; its REPLY waits in
    /// [`Callee::poll_answer`]), or a duplicate of a call in hand (nothing to send).
    pub(crate) fn handle_request(
        &mut self,
        from: From,
        req: wire::Request,
        who: impl FnOnce() -> Caller,
        now: Instant,
    ) -> Option<Accepting> {
        let call_id = req.call_id;
        let (key, credit) = (from.key, from.credit);
        let channel = req.channel.as_str();
        let method = req.method.as_str();
        let Some(served) = self.served.get(channel) else {
            let msg = format!("nothing serves channel {channel:?} here; not run");
            return self.refuse(key, call_id, ReplyCode::ClassNotFound, msg);
        };
        let Some(plan) = served.service.plan(method) else {
            let msg = format!("channel {channel:?} has no method {method:?}; not run");
            return self.refuse(key, call_id, ReplyCode::MethodNotFound, msg);
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
            return self.refuse(key, call_id, ReplyCode::IncompatibleVersion, msg);
        }
        // The channel's authorizer (MISSION K6): before ACCEPT, so a refusal did not run.
        // Each call of a BATCH comes through here on its own.
        if let Some(authorizer) = &served.service.authorizer {
            let who = who();
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
                let msg = format!("{channel}.{method}: {why}; not run");
                return self.refuse(key, call_id, code, msg);
            }
        }
        let request = Request::new(channel.to_owned(), method.to_owned(), from.rid, req.payload)
            .with_identity(
                from.generation,
                call_id.get(),
                req.idempotency_key.map(|k| k.as_str().to_owned()),
            )
            .with_ttl(now, req.ttl_ms.map(|ms| Duration::from_millis(ms.get())));
        let mailbox = served.service.contract.mailbox;
        let queue = match queue_of(served, &plan, &request) {
            Ok(q) => q,
            Err(e) => return self.refuse(key, call_id, e.wire_code().to_reply(), e.message),
        };
        let sid = match self
            .table
            .handle_request(key, call_id, req.ttl_ms, plan.shape, now)
        {
            Admission::Duplicate => return None,
            Admission::Refuse(code) => {
                let msg = "the service is stopping; not run".to_owned();
                return self.refuse(key, call_id, code, msg);
            }
            Admission::Accept(sid) => sid,
        };
        if credit {
            self.table.limit_window(sid);
        }
        let arrival =
            self.exec
                .handle_arrival(queue.clone(), mailbox, &request.method, plan.conflate, sid);
        if arrival == Arrival::Busy {
            metrics::counter!("zmesh_calls_refused_total", "code" => "Busy").increment(1);
            if let Some(code) = self.table.handle_done(sid, ReplyCode::Busy, now) {
                let msg = format!(
                    "the mailbox of {} is full ({mailbox} calls wait); not run",
                    queue.map_or_else(String::new, |(c, k)| match k {
                        Some(k) => format!("{c} key {k:?}"),
                        None => c,
                    })
                );
                self.refuse(key, call_id, code, msg);
            }
            return None;
        }
        Some(Accepting {
            key,
            job: ServeJob {
                id: sid,
                request,
                semantics: plan.semantics,
                stops_on_cancel: plan.stops_on_cancel,
            },
            call_id,
            arrival,
        })
    }

    /// The ACCEPT of a call [`Callee::handle_request`] took was sent (`sent`), or could not
    /// be (its answer path is gone: the call is forgotten with the rest of that
    /// connection's calls). Once sent, the call runs now, waits in its queue, or takes the
    /// place of a waiting call of the same conflating method.
    pub(crate) fn handle_accept_sent(&mut self, accepting: Accepting, sent: bool, now: Instant) {
        let Accepting {
            key, job, arrival, ..
        } = accepting;
        let sid = job.id;
        if !sent {
            self.handle_connection_lost(key, now);
            let next = self.left_queue(sid);
            self.dispatch(next, now);
            if let Arrival::Superseding { replaced } = arrival {
                // The queue forgot the waiting call this one replaced; it will never run.
                self.supersede(replaced, now);
            }
            return;
        }
        match arrival {
            Arrival::RunNow => self.dispatch(Some((sid, job)), now),
            Arrival::Queued => {
                self.waiting.insert(sid, job);
            }
            Arrival::Superseding { replaced } => {
                self.waiting.insert(sid, job);
                self.supersede(replaced, now);
            }
            Arrival::Busy => {}
        }
    }

    /// The connection `key` that calls' answers travel on is gone: its waiting calls will
    /// never run and leave their queues (so they do not hold mailbox places), and the
    /// handlers still running for it are told their caller is gone ([`Handlers`]).
    pub(crate) fn handle_connection_lost(&mut self, key: CallKey, now: Instant) {
        let running = self.table.handle_connection_lost(key, now);
        self.handlers.callers_gone(&running, Cause::CallerGone);
        self.forget_orphaned_waiting(now);
    }

    /// A CANCEL for call `call_id` of the caller whose answers travel on `key` (WIRE.md
    /// §4.13): a queued call leaves its queue and never runs; a running handler is signalled,
    /// and stopped where its method allows; an unknown or finished call is ignored. Nothing
    /// more is sent for the call.
    pub(crate) fn handle_cancel(&mut self, key: CallKey, call_id: NonZeroU64, now: Instant) {
        match self.table.handle_cancel(key, call_id, now) {
            Cancelled::Unknown => {
                metrics::counter!("zmesh_cancels_ignored_total").increment(1);
            }
            Cancelled::Queued(_) => {
                metrics::counter!("zmesh_served_calls_cancelled_total").increment(1);
                self.forget_orphaned_waiting(now);
            }
            Cancelled::Running(id) => {
                self.handlers.callers_gone(&[id], Cause::Cancel);
            }
        }
    }

    /// Signals the handlers of running calls whose ttl passed (the serve table reports each
    /// once); a handler the runtime may stop is stopped, and the call abandoned (its caller
    /// fails it on its own deadline, an instant later), while any other may still answer.
    fn signal_overdue(&mut self) {
        while let Some(id) = self.table.poll_overdue() {
            if self.handlers.callers_gone(&[id], Cause::Ttl) {
                self.table.handle_abandon(id);
            }
        }
    }

    /// A handler finished: its REPLY, then the next call of its queue.
    pub(crate) fn handle_done(&mut self, done: ServeDone, now: Instant) {
        self.handlers.finished(done.id);
        self.finish_call(done.id, done.result, done.replayed, now);
        let next = self.left_queue(done.id);
        self.dispatch(next, now);
    }

    /// A stream handler produced an item: the ITEM to send, numbered, or `None` when the
    /// stream is over (the drain ended it with `Unavailable`, the caller's connection is
    /// gone, the handler already returned: the handler is told, nothing is sent).
    ///
    /// Where the stream has a window (WIRE.md §4.15) and it is closed, the item waits, and
    /// its handler with it (its send resolves when the item leaves): that is the stream's
    /// backpressure. Items go in order, so one that comes while others wait waits too.
    pub(crate) fn handle_item(&mut self, item: ServeItem, now: Instant) -> Option<ItemToSend> {
        let id = item.id;
        // Nothing waits (the common case): no map lookup before the window check.
        let waiting = !self.held.is_empty() && self.held.get(&id).is_some_and(|q| !q.is_empty());
        if !waiting && self.table.may_send_item(id) {
            return self.item_now(item, now);
        }
        if self.table.is_answered(id) {
            self.held.entry(id).or_default().push_back(item);
            return None;
        }
        // The call is over: refused.
        self.item_now(item, now)
    }

    /// A CREDIT of `items` for call `call_id` of the caller whose answers travel on `key`
    /// (WIRE.md §4.15): its window grows, and the items that waited for it leave, in order,
    /// as far as it goes.
    pub(crate) fn handle_credit(
        &mut self,
        key: CallKey,
        call_id: NonZeroU64,
        items: u64,
        now: Instant,
    ) -> Vec<ItemToSend> {
        let Some(id) = self.table.handle_credit(key, call_id, items) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while self.table.may_send_item(id) {
            let Some(item) = self.held.get_mut(&id).and_then(VecDeque::pop_front) else {
                break;
            };
            out.extend(self.item_now(item, now));
        }
        if self.held.get(&id).is_some_and(VecDeque::is_empty) {
            self.held.remove(&id);
        }
        out
    }

    /// Items that waited for a window of a call that is over (answered, cut, cancelled, its
    /// caller gone): each one's handler hears that the stream is over.
    fn release_held_items(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let table = &self.table;
        self.held.retain(|&id, items| {
            if table.is_answered(id) {
                return true;
            }
            for item in items.drain(..) {
                let _ = item.reply.send(Err(stream_over()));
            }
            false
        });
    }

    /// Item `item`, to send now: numbered, or refused when its call is over.
    fn item_now(&mut self, item: ServeItem, now: Instant) -> Option<ItemToSend> {
        let ServeItem { id, payload, reply } = item;
        let call = self.table.call_of(id);
        let seq = call.and_then(|_| self.table.handle_item(id, now));
        let (Some((key, call_id)), Some(seq)) = (call, seq) else {
            let _ = reply.send(Err(stream_over()));
            return None;
        };
        Some(ItemToSend {
            key,
            frames: records::item(call_id, seq, payload),
            id,
            call_id,
            seq,
            reply,
        })
    }

    /// The ITEM of [`Callee::handle_item`] was handed to the transport (`sent`), or not. An
    /// ITEM the link cannot take now is never queued (MISSION C3); its number is spent, so
    /// the stream cannot go on: the call ends at once with REPLY `UnknownOutcome` (the caller
    /// must not take a shortened stream for a complete one), and the handler's later result
    /// is dropped.
    pub(crate) fn handle_item_sent(&mut self, item: ItemToSend, sent: bool, now: Instant) {
        let ItemToSend {
            key,
            id,
            call_id,
            seq,
            reply,
            ..
        } = item;
        if sent {
            let _ = reply.send(Ok(()));
            return;
        }
        metrics::counter!("zmesh_stream_items_unsent_total").increment(1);
        let message = format!("stream item {seq} could not be sent now; the stream ended");
        if let Some(code) = self.table.handle_done(id, ReplyCode::UnknownOutcome, now) {
            self.answers.push_back(Answer {
                key,
                reply: records::reply(call_id, code, Bytes::from(message.clone())),
            });
        }
        let _ = reply.send(Err(ServeError::runtime(
            RemoteCode::UnknownOutcome,
            message,
        )));
    }

    /// The node stops: every handler still running is told that nobody waits for it any
    /// more (and a query's task stopped), as when its caller is gone.
    pub(crate) fn handle_stop(&mut self) {
        let running: Vec<ServeId> = self.handlers.running.keys().copied().collect();
        self.handlers.callers_gone(&running, Cause::Answered);
    }

    /// Begins the graceful stop: no new calls, the accepted ones answered within `bound`
    /// (MISSION C4, F6).
    pub(crate) fn begin_drain(&mut self, bound: Duration, now: Instant) {
        self.table.begin_drain(bound, now);
    }

    /// Applies the serve table's timers due at `now` (ttl refusals, the drain bound).
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.table.handle_timeout(now);
    }

    /// The serve table's next timer.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.table.poll_timeout()
    }

    /// True once a drain is over.
    pub(crate) fn is_drained(&self) -> bool {
        self.table.is_drained()
    }

    /// Calls accepted and not yet answered, handlers still running for a lost connection
    /// included.
    pub(crate) fn in_flight(&self) -> usize {
        self.table.in_flight()
    }

    /// The next answer to send, in the order decided: the callee's own, and the serve
    /// table's (a queued call refused by its ttl, a call cut by the drain: the next call of
    /// its queue moves up as it is taken).
    #[must_use]
    pub(crate) fn poll_answer(&mut self, now: Instant) -> Option<Answer> {
        self.signal_overdue();
        self.release_held_items();
        loop {
            if let Some(a) = self.answers.pop_front() {
                return Some(a);
            }
            let r = self.table.poll_transmit()?;
            // Answered by the table (a stream ended by the drain, a call cut at the drain
            // bound) while its handler runs: its caller no longer waits for the handler.
            self.handlers.callers_gone(&[r.id], Cause::Answered);
            self.answers.push_back(Answer {
                key: r.conn,
                reply: records::reply(r.call_id, r.code, Bytes::from_static(r.message.as_bytes())),
            });
            let next = self.left_queue(r.id);
            self.dispatch(next, now);
        }
    }

    /// Queues a REPLY refusing a call that did not run.
    fn refuse(
        &mut self,
        key: CallKey,
        call_id: NonZeroU64,
        code: ReplyCode,
        message: String,
    ) -> Option<Accepting> {
        self.answers.push_back(Answer {
            key,
            reply: records::reply(call_id, code, Bytes::from(message.into_bytes())),
        });
        None
    }

    /// Answers `replaced`, a waiting call a newer call of the same conflating method took the
    /// place of, `Superseded` (MISSION K4: did not run).
    fn supersede(&mut self, replaced: ServeId, now: Instant) {
        self.waiting.remove(&replaced);
        metrics::counter!("zmesh_calls_refused_total", "code" => "Superseded").increment(1);
        let call = self.table.call_of(replaced);
        if let Some(code) = self.table.handle_done(replaced, ReplyCode::Superseded, now) {
            let msg = "superseded by a newer call of the same method while it waited; not run";
            self.reply_to(call, code, msg);
        }
    }

    /// Runs calls whose turn has come, starting with `next`: the serve table reads each one's
    /// ttl after its queue wait (MISSION C6); a call refused or skipped there lets the next
    /// call of its queue move up at once.
    fn dispatch(&mut self, mut next: Option<(ServeId, ServeJob)>, now: Instant) {
        while let Some((sid, job)) = next.take() {
            let call = self.table.call_of(sid);
            match self.table.handle_dispatch(sid, now) {
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
                                // An inline handler is never behind the idempotency guard,
                                // so its answer is never a replay.
                                self.finish_call(sid, result, false, now);
                                next = self.left_queue(sid);
                            }
                            InlineRun::OnTask(job) => self.spawn_handler(&spawn, job),
                        },
                        Some((spawn, None)) => self.spawn_handler(&spawn, job),
                        None => {
                            // Never the case (a served channel is only ever replaced); if it
                            // were: answered, not run.
                            let code = self.table.handle_done(sid, ReplyCode::Unavailable, now);
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

    /// Runs an accepted call's handler on a task, kept in [`Handlers`] until it is over.
    fn spawn_handler(&mut self, spawn: &Dispatcher, job: ServeJob) {
        let (id, gone, stoppable) = (job.id, job.request.caller_gone(), job.stops_on_cancel);
        let task = spawn(job);
        self.handlers.started(id, gone, task, stoppable);
    }

    /// Call `sid` left its execution queue (answered, refused, skipped, or its caller's
    /// connection is gone): the next call of that queue, now its running call, with
    /// its job. A call no queue holds (parallel) has none.
    fn left_queue(&mut self, sid: ServeId) -> Option<(ServeId, ServeJob)> {
        self.waiting.remove(&sid);
        let mut gone = sid;
        loop {
            let next = self.exec.handle_gone(gone)?;
            match self.waiting.remove(&next) {
                Some(job) => return Some((next, job)),
                // Never the case (every waiting call has its job); if it were, skip it.
                None => gone = next,
            }
        }
    }

    /// Calls waiting in an execution queue whose caller's connection is gone (the serve table
    /// forgot them: they will never run) leave their queue now, so that they do not hold
    /// mailbox places until their turn comes (MISSION K4: a caller that goes away must not
    /// make others `Busy`). A call that was running in its queue lets the next one move up.
    fn forget_orphaned_waiting(&mut self, now: Instant) {
        let gone: Vec<ServeId> = self
            .waiting
            .keys()
            .copied()
            .filter(|&sid| self.table.call_of(sid).is_none())
            .collect();
        for sid in gone {
            let next = self.left_queue(sid);
            self.dispatch(next, now);
        }
    }

    /// Queues a REPLY for a call identified by the serve table's `(connection, call_id)`.
    fn reply_to(&mut self, call: Option<(CallKey, NonZeroU64)>, code: ReplyCode, msg: &str) {
        let Some((key, call_id)) = call else { return };
        self.answers.push_back(Answer {
            key,
            reply: records::reply(call_id, code, Bytes::copy_from_slice(msg.as_bytes())),
        });
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
            if self.overruns_logged.insert(channel.clone()) {
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
    fn finish_call(
        &mut self,
        id: ServeId,
        result: Result<Bytes, ServeError>,
        replayed: bool,
        now: Instant,
    ) {
        let call = self.table.call_of(id);
        let (code, payload) = match result {
            Ok(bytes) => (ReplyCode::Ok, bytes),
            // Only allow-listed codes leave a handler (MISSION K6).
            Err(e) => (
                e.wire_code().to_reply(),
                Bytes::from(e.message.into_bytes()),
            ),
        };
        if let Some(sent) = self.table.handle_done(id, code, now) {
            if let Some((key, call_id)) = call {
                let mut reply = records::reply(call_id, sent, payload);
                // A code the serve table put in the handler's place is this call's own
                // answer, never a replay.
                reply.replayed = replayed && sent == code;
                self.answers.push_back(Answer { key, reply });
            }
        }
    }
}

/// The handlers running on tasks, by call: what tells each that its caller is gone.
///
/// When the connection a call's answer would travel on leaves ready, the serve table hands
/// back the calls whose handlers still run ([`ServeTable::handle_connection_lost`]); each is
/// signalled ([`Request::cancelled`]), and a query's task is also stopped at its next
/// `.await`: a query changes nothing, so nothing is lost. The same holds for a call the
/// serve table answered itself while its handler runs (a stream ended by the drain, a call
/// cut at the drain bound), and for every handler still running when the node stops. A command (or an undeclared
/// method, which may be one) is never stopped by the runtime: it may be half way through
/// changing the world, and only its handler knows whether stopping there is safe. A stopped
/// task still reports its end, so the call leaves its execution queue as a finished one
/// does.
#[derive(Default)]
struct Handlers {
    running: HashMap<ServeId, Running>,
}

struct Running {
    gone: CallerGone,
    task: AbortHandle,
    /// Its task is stopped when its caller stops waiting ([`contract::stops_on_cancel`]).
    stoppable: bool,
}

/// Why a handler's caller no longer waits, as the metrics label it.
#[derive(Debug, Clone, Copy)]
enum Cause {
    /// The connection its answer would travel on left ready.
    CallerGone,
    /// The caller sent a CANCEL.
    Cancel,
    /// Its ttl passed while it ran.
    Ttl,
    /// The serve table answered it itself (the drain), or the node stops.
    Answered,
}

impl Cause {
    fn label(self) -> &'static str {
        match self {
            Cause::CallerGone => "caller_gone",
            Cause::Cancel => "cancel",
            Cause::Ttl => "ttl",
            Cause::Answered => "answered",
        }
    }
}

impl Handlers {
    /// The handler of call `id` started on `task`; `stoppable`: its task is stopped when its
    /// caller stops waiting.
    fn started(&mut self, id: ServeId, gone: CallerGone, task: AbortHandle, stoppable: bool) {
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
    fn finished(&mut self, id: ServeId) {
        self.running.remove(&id);
    }

    /// The callers of `calls` no longer wait, for `cause`: each running handler is
    /// signalled, and each stoppable one's task stopped. Returns whether any was stopped.
    fn callers_gone(&mut self, calls: &[ServeId], cause: Cause) -> bool {
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
            let cause = cause.label();
            metrics::counter!("zmesh_handlers_signalled_total", "reason" => cause)
                .increment(signalled);
            metrics::counter!("zmesh_handlers_stopped_total", "reason" => cause).increment(stopped);
            tracing::debug!(
                signalled,
                stopped,
                cause,
                "handlers whose caller stopped waiting"
            );
        }
        stopped > 0
    }
}

/// What a stream handler's send hears once its call is over.
fn stream_over() -> ServeError {
    ServeError::runtime(
        RemoteCode::Unavailable,
        "the stream is over: the service is stopping, the caller is gone, or the call already \
         ended",
    )
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
