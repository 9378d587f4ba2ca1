//! The application's side of serving calls (MISSION C4, C6, K1, K4, K5): [`Callee`] holds the
//! node core's [`Serving`] (which decides what happens to each REQUEST: admission, the
//! execution queues, dispatch, answers, stream windows) and, beside it, what touches the
//! application: the served channels with their handlers, authorizers and key functions
//! (asked through [`ServedChannel`] while a call is admitted), the handlers running on
//! tasks, inline runs, and each stream item's reply channel. The I/O thread routes REQUESTs
//! to it and sends the answers the core decides on.
//!
//! Every method that hands the core an input then acts on every output the core has for the
//! shell, in the polling order of [`crate::proto::node::callee`]: the events (handlers whose
//! caller no longer waits, counters), and the calls to run now.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use crate::proto::calls::{RemoteCode, ServeId};
use crate::proto::contract::Semantics;
use crate::proto::node::callee::{
    self, Answer, Cause, Event, From, ItemSent, MethodPlan, Refusal, ServedChannel, Serving,
    Streamed,
};
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

/// What tells a stream handler whether its item left.
type ItemReply = oneshot::Sender<Result<(), ServeError>>;

/// A call the core took, not yet ACCEPTed on the wire.
pub(crate) type Accepting = callee::Accepting<ServeJob, CallKey>;

/// A stream item whose ITEM the I/O thread is to send now.
pub(crate) type ItemToSend = callee::ItemToSend<ItemReply, CallKey>;

/// The callee's state (see the module docs). Its fields are its own: the I/O thread talks to
/// it through its methods, and to the core through [`Callee::serving`] where the shell adds
/// nothing.
pub(crate) struct Callee {
    /// The channels this node serves.
    served: HashMap<String, Served>,
    /// The calls this node serves, as the core keeps them.
    serving: Serving<ServeJob, ItemReply, CallKey>,
    /// Handlers running on tasks, signalled or stopped when their caller is gone.
    handlers: Handlers,
    /// Channels whose inline handler overran its budget (logged once each).
    overruns_logged: HashSet<String>,
}

impl Callee {
    /// A callee that serves nothing yet.
    pub(crate) fn new() -> Callee {
        Callee {
            served: HashMap::new(),
            serving: Serving::default(),
            handlers: Handlers::default(),
            overruns_logged: HashSet::new(),
        }
    }

    /// The core's calls, for what the shell only forwards: the drain, the timers, the counts.
    pub(crate) fn serving(&self) -> &Serving<ServeJob, ItemReply, CallKey> {
        &self.serving
    }

    /// The core's calls, to drive (see [`Callee::serving`]). Only inputs that leave no output
    /// for the shell go this way: [`Serving::begin_drain`] and [`Serving::handle_timeout`]
    /// (their answers come out of [`Callee::poll_answer`]).
    pub(crate) fn serving_mut(&mut self) -> &mut Serving<ServeJob, ItemReply, CallKey> {
        &mut self.serving
    }

    /// Registers a served channel (replacing an earlier registration of the same name).
    pub(crate) fn serve_channel(&mut self, channel: String, served: Served) {
        self.served.insert(channel, served);
    }

    /// A BATCH for connection `key` ([`Serving::handle_batch`]), counted.
    pub(crate) fn handle_batch(
        &mut self,
        key: CallKey,
        requests: Vec<wire::Request>,
    ) -> Vec<wire::Request> {
        metrics::counter!("zmesh_batches_received_total").increment(1);
        self.serving.handle_batch(key, requests)
    }

    /// A REQUEST from `from` ([`Serving::handle_request`]). `who` tells who calls, for the
    /// channel's authorizer (asked only when the channel has one). Returns the call if it
    /// was taken: send its ACCEPT now, then report with [`Callee::handle_accept_sent`].
    pub(crate) fn handle_request(
        &mut self,
        from: From<CallKey>,
        req: wire::Request,
        who: impl Fn() -> Caller,
        now: Instant,
    ) -> Option<Accepting> {
        let channel = self
            .served
            .get(req.channel.as_str())
            .map(|served| Channel { served, who });
        let taken = self
            .serving
            .handle_request(channel.as_ref(), from, req, now);
        self.act(now);
        taken
    }

    /// The ACCEPT of a call [`Callee::handle_request`] took was sent (`sent`), or could not
    /// be ([`Serving::handle_accept_sent`]).
    pub(crate) fn handle_accept_sent(&mut self, accepting: Accepting, sent: bool, now: Instant) {
        self.serving.handle_accept_sent(accepting, sent, now);
        self.act(now);
    }

    /// The connection `key` that calls' answers travel on is gone
    /// ([`Serving::handle_connection_lost`]): the handlers still running for it are told
    /// their caller is gone ([`Handlers`]).
    pub(crate) fn handle_connection_lost(&mut self, key: CallKey, now: Instant) {
        self.serving.handle_connection_lost(key, now);
        self.act(now);
    }

    /// A CANCEL for call `call_id` of the caller whose answers travel on `key`
    /// ([`Serving::handle_cancel`]): a running handler is signalled, and stopped where its
    /// method allows.
    pub(crate) fn handle_cancel(&mut self, key: CallKey, call_id: NonZeroU64, now: Instant) {
        self.serving.handle_cancel(key, call_id, now);
        self.act(now);
    }

    /// A handler finished: its REPLY, then the next call of its queue.
    pub(crate) fn handle_done(&mut self, done: ServeDone, now: Instant) {
        self.handlers.finished(done.id);
        let (code, payload) = split(done.result);
        self.serving
            .handle_done(done.id, code, payload, done.replayed, now);
        self.act(now);
    }

    /// A stream handler produced an item: the ITEM to send, numbered, or `None` when it
    /// waits for its window or the stream is over (the handler is told, nothing is sent;
    /// [`Serving::handle_item`]).
    pub(crate) fn handle_item(&mut self, item: ServeItem, now: Instant) -> Option<ItemToSend> {
        let ServeItem { id, payload, reply } = item;
        self.serving
            .handle_item(id, payload, reply, now)
            .and_then(stream)
    }

    /// A CREDIT of `items` for call `call_id` of the caller whose answers travel on `key`
    /// ([`Serving::handle_credit`]): the items that waited for it and leave now.
    pub(crate) fn handle_credit(
        &mut self,
        key: CallKey,
        call_id: NonZeroU64,
        items: u64,
        now: Instant,
    ) -> Vec<ItemToSend> {
        self.serving
            .handle_credit(key, call_id, items, now)
            .into_iter()
            .filter_map(stream)
            .collect()
    }

    /// The ITEM of [`Callee::handle_item`] was handed to the transport (`sent`), or not
    /// ([`Serving::handle_item_sent`]): its handler hears which.
    pub(crate) fn handle_item_sent(&mut self, item: ItemToSend, sent: bool, now: Instant) {
        match self.serving.handle_item_sent(item, sent, now) {
            ItemSent::Sent(reply) => {
                let _ = reply.send(Ok(()));
            }
            ItemSent::Unsent { reply, message } => {
                metrics::counter!("zmesh_stream_items_unsent_total").increment(1);
                let _ = reply.send(Err(ServeError::runtime(
                    RemoteCode::UnknownOutcome,
                    message,
                )));
            }
        }
    }

    /// The node stops: every handler still running is told that nobody waits for it any
    /// more (and a query's task stopped), as when its caller is gone.
    pub(crate) fn handle_stop(&mut self) {
        let running: Vec<ServeId> = self.handlers.running.keys().copied().collect();
        self.handlers.callers_gone(&running, Cause::Answered);
    }

    /// The next answer to send, in the order decided ([`Serving::poll_answer`]). Before it,
    /// the handlers of running calls whose ttl passed are signalled, and the stream items
    /// that waited for a window of a call that is over are told the stream is over.
    #[must_use]
    pub(crate) fn poll_answer(&mut self, now: Instant) -> Option<Answer<CallKey>> {
        self.signal_overdue();
        for reply in self.serving.release_held() {
            let _ = reply.send(Err(stream_over()));
        }
        let answer = self.serving.poll_answer(now);
        self.act(now);
        answer
    }

    /// Acts on every output of the core: the events, then the calls to run now, in order (a
    /// call answered in place lets the next call of its queue be the next run).
    fn act(&mut self, now: Instant) {
        loop {
            while let Some(event) = self.serving.poll_event() {
                self.handle_event(event);
            }
            let Some((id, job)) = self.serving.poll_run() else {
                return;
            };
            self.run(id, job, now);
        }
    }

    /// Acts on one event of the core.
    fn handle_event(&mut self, event: Event) {
        match event {
            Event::CallersGone { calls, cause } => {
                self.handlers.callers_gone(&calls, cause);
            }
            Event::Busy => {
                metrics::counter!("zmesh_calls_refused_total", "code" => "Busy").increment(1);
            }
            Event::Superseded => {
                metrics::counter!("zmesh_calls_refused_total", "code" => "Superseded").increment(1);
            }
            Event::CancelIgnored => {
                metrics::counter!("zmesh_cancels_ignored_total").increment(1);
            }
            Event::CancelledQueued => {
                metrics::counter!("zmesh_served_calls_cancelled_total").increment(1);
            }
        }
    }

    /// Signals the handlers of running calls whose ttl passed (the core reports each once);
    /// a handler the runtime may stop is stopped, and the call abandoned (its caller fails
    /// it on its own deadline, an instant later), while any other may still answer.
    fn signal_overdue(&mut self) {
        while let Some(id) = self.serving.poll_overdue() {
            if self.handlers.callers_gone(&[id], Cause::Ttl) {
                self.serving.handle_abandon(id);
            }
        }
    }

    /// Runs call `id`, whose turn came: its channel's inline handler on this thread, or its
    /// handler on a task. An inline answer goes back to the core at once.
    fn run(&mut self, id: ServeId, job: ServeJob, now: Instant) {
        let handlers = self
            .served
            .get(&job.request.channel)
            .map(|s| (s.dispatch.clone(), s.inline.clone()));
        match handlers {
            Some((spawn, Some(inline))) => match self.run_inline(&inline, job) {
                InlineRun::Answered(result) => {
                    // Answered in place: the REPLY follows the ACCEPT in the same turn, and
                    // the queue moves on without a hand-off. An inline handler is never
                    // behind the idempotency guard, so its answer is never a replay.
                    let (code, payload) = split(result);
                    self.serving.handle_done(id, code, payload, false, now);
                }
                InlineRun::OnTask(job) => self.spawn_handler(&spawn, job),
            },
            Some((spawn, None)) => self.spawn_handler(&spawn, job),
            None => {
                // Never the case (a served channel is only ever replaced); if it were:
                // answered, not run.
                let payload = Bytes::from_static(b"the channel is no longer served");
                let code = ReplyCode::Unavailable;
                self.serving.handle_done(id, code, payload, false, now);
            }
        }
    }

    /// Runs an accepted call's handler on a task, kept in [`Handlers`] until it is over.
    fn spawn_handler(&mut self, spawn: &Dispatcher, job: ServeJob) {
        let (id, gone, stoppable) = (job.id, job.request.caller_gone(), job.stops_on_cancel);
        let task = spawn(job);
        self.handlers.started(id, gone, task, stoppable);
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
}

/// A served channel as the core asks about it while one REQUEST is admitted: the channel's
/// registration, and who calls (for its authorizer).
struct Channel<'a, W> {
    served: &'a Served,
    who: W,
}

impl<W: Fn() -> Caller> ServedChannel<CallKey> for Channel<'_, W> {
    type Call = Request;
    type Job = ServeJob;

    fn plan(&self, method: &str) -> Option<MethodPlan> {
        self.served.service.plan(method)
    }

    fn mailbox(&self) -> usize {
        self.served.service.contract.mailbox
    }

    /// The channel's authorizer, if it has one; one that panics forbids the call.
    fn authorize(
        &self,
        channel: &str,
        method: &str,
        semantics: Option<Semantics>,
    ) -> Result<(), Refusal> {
        let Some(authorizer) = &self.served.service.authorizer else {
            return Ok(());
        };
        let who = (self.who)();
        let asked = AuthRequest {
            caller: &who,
            channel,
            method,
            semantics,
        };
        let verdict = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| authorizer(&asked)))
            .unwrap_or_else(|_| Err(Denied::forbidden("the channel's authorizer failed")));
        let Err(denied) = verdict else {
            return Ok(());
        };
        let (code, label, message) = match denied {
            Denied::Unauthorized(m) => (ReplyCode::Unauthorized, "Unauthorized", m),
            Denied::Forbidden(m) => (ReplyCode::Forbidden, "Forbidden", m),
        };
        metrics::counter!("zmesh_calls_refused_total", "code" => label).increment(1);
        Err(Refusal { code, message })
    }

    fn open(&self, from: From<CallKey>, req: &wire::Request, now: Instant) -> Request {
        Request::new(
            req.channel.as_str().to_owned(),
            req.method.as_str().to_owned(),
            from.rid,
            req.payload.clone(),
        )
        .with_identity(
            from.generation,
            req.call_id.get(),
            req.idempotency_key.as_ref().map(|k| k.as_str().to_owned()),
        )
        .with_ttl(now, req.ttl_ms.map(|ms| Duration::from_millis(ms.get())))
    }

    /// The service's key function on the call's arguments; one that fails refuses the call
    /// with its error, one that panics refuses it `InvalidParams`.
    fn key(&self, call: &Request) -> Result<Option<String>, Refusal> {
        let Some(key_fn) = self.served.service.key.as_ref() else {
            // Validation refuses keyed execution without a key function; serial then.
            return Ok(None);
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| key_fn(call)))
            .unwrap_or_else(|_| {
                Err(ServeError::new(
                    RemoteCode::InvalidParams,
                    "the service's key function failed on these arguments",
                ))
            })
            .map(Some)
            .map_err(|e| Refusal {
                code: e.wire_code().to_reply(),
                message: e.message,
            })
    }

    fn job(&self, id: ServeId, request: Request, plan: &MethodPlan) -> ServeJob {
        ServeJob {
            id,
            request,
            semantics: plan.semantics,
            stops_on_cancel: plan.stops_on_cancel,
        }
    }
}

/// A handler's result as the core takes it: the REPLY's code and payload. Only
/// allow-listed codes leave a handler (MISSION K6).
fn split(result: Result<Bytes, ServeError>) -> (ReplyCode, Bytes) {
    match result {
        Ok(bytes) => (ReplyCode::Ok, bytes),
        Err(e) => (
            e.wire_code().to_reply(),
            Bytes::from(e.message.into_bytes()),
        ),
    }
}

/// The ITEM of a stream item to send, or `None` once its handler was told the stream is over.
fn stream(s: Streamed<ItemReply, CallKey>) -> Option<ItemToSend> {
    match s {
        Streamed::Send(item) => Some(item),
        Streamed::Over(reply) => {
            let _ = reply.send(Err(stream_over()));
            None
        }
    }
}

/// The handlers running on tasks, by call: what tells each that its caller is gone.
///
/// When the connection a call's answer would travel on leaves ready, the core reports the
/// calls whose handlers still run ([`Event::CallersGone`]); each is signalled
/// ([`Request::cancelled`]), and a query's task is also stopped at its next `.await`: a query
/// changes nothing, so nothing is lost. The same holds for a call the serve table answered
/// itself while its handler runs (a stream ended by the drain, a call cut at the drain
/// bound), and for every handler still running when the node stops. A command (or an
/// undeclared method, which may be one) is never stopped by the runtime: it may be half way
/// through changing the world, and only its handler knows whether stopping there is safe. A
/// stopped task still reports its end, so the call leaves its execution queue as a finished
/// one does.
#[derive(Default)]
struct Handlers {
    running: HashMap<ServeId, Running>,
}

struct Running {
    gone: CallerGone,
    task: AbortHandle,
    /// Its task is stopped when its caller stops waiting
    /// ([`crate::proto::contract::stops_on_cancel`]).
    stoppable: bool,
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
