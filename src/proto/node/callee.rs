//! The callee side of calls as a part of the node core (MISSION C4, C6, K1, K4, K5):
//! [`Serving`] owns the serve table, the execution queues, the accepted calls waiting in
//! them, the calls whose turn came, the answers decided and the stream items waiting for a
//! window, and decides what each input does to a call. The shell holds the application's
//! side: the served channels (asked through [`ServedChannel`] while a REQUEST is admitted),
//! the handlers running on tasks, and each stream item's reply channel.
//!
//! [`Serving`] is generic over the shell's job `J` (what runs one accepted call), the
//! shell's side `R` of a stream item (what tells its handler whether the item left) and the
//! key `K` of the connection a call's answers travel on (the shell's link and connection, a
//! simulated connection), so it never names a runtime type.
//!
//! The sans-IO machines decide the steps: [`ServeTable`] (admission, ttl after the queue
//! wait, graceful drain), [`ExecQueues`] (serial, keyed or parallel execution, the mailbox,
//! conflation) and [`crate::proto::contract`] (the caller's semantics pin). [`Serving`] puts
//! them in order.
//!
//! # One call, in order
//! 1. Route (the shell): where its answers go (the caller's Completion lane, or the
//!    ClientServer connection); no route, no answer (the caller fails the call with its
//!    lanes).
//! 2. Refusals without ACCEPT (did not run): `ClassNotFound` (nothing serves the channel),
//!    `MethodNotFound`, `IncompatibleVersion` (the method is more dangerous to repeat than the
//!    caller's pin), `Unauthorized` / `Forbidden` (the channel's authorizer), the key
//!    function's error (keyed execution), `Unavailable` (stopping), `Busy` (its queue's
//!    mailbox is full).
//! 3. ACCEPT ([`Serving::handle_request`] takes the call, the shell sends it and reports with
//!    [`Serving::handle_accept_sent`]), then: run now, wait in its queue, or take the place of
//!    a waiting call of the same conflating method (that one is answered `Superseded`, after
//!    its ACCEPT: did not run).
//! 4. When its turn comes the serve table reads its ttl (refused `Timeout` if it ran out while
//!    it waited); the call comes out of [`Serving::poll_run`] for the shell to run, and the
//!    shell reports its result with [`Serving::handle_done`]: that is the REPLY, and the next
//!    call of its queue moves up.
//!
//! # Polling order
//! After every `handle_*` call the shell takes every [`Serving::poll_run`], reporting a call
//! it ran in place with [`Serving::handle_done`] before it takes the next (the next call of
//! that queue is then the next run, ahead of any other, so answers come out in the order the
//! calls were decided), and every [`Serving::poll_event`]. Before each
//! [`Serving::poll_answer`] it takes [`Serving::poll_overdue`] and
//! [`Serving::release_held`]; [`Serving::poll_answer`] may decide a run in turn.
//!
//! # Answers
//! Every REPLY decided here waits in one queue, keyed by the call's connection, until the
//! shell takes it ([`Serving::poll_answer`]) and sends it on that connection's route, if it is
//! still there. The serve table's own answers (ttl refusals, the drain) come out of the same
//! queue, in the order they were decided.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::proto::calls::batch::MAX_INCOMING_BATCH_CALLS;
use crate::proto::calls::{
    Admission, Arrival, CallShape, Cancelled, Dispatch, ExecQueues, ServeId, ServeTable,
};
use crate::proto::contract::{self, ExecutionKind, Semantics};
use crate::proto::wire::{self, Record, ReplyCode};

/// How the callee treats one call of a served channel: what its method declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodPlan {
    /// The method's declared semantics (`None`: undeclared).
    pub semantics: Option<Semantics>,
    /// Unary or stream.
    pub shape: CallShape,
    /// Parallel, serial or keyed (MISSION K4).
    pub execution: ExecutionKind,
    /// Whether a newer call of the method takes the place of a waiting one (MISSION K4).
    pub conflate: bool,
    /// Whether a cancel stops the running handler ([`crate::proto::contract::stops_on_cancel`]).
    pub stops_on_cancel: bool,
}

/// Who sent a REQUEST, as the shell knows it from the connection it came on.
pub struct From<K> {
    /// The connection its answers travel on.
    pub key: K,
    /// The caller's RID.
    pub rid: String,
    /// The caller's lifecycle generation.
    pub generation: u64,
    /// Whether the connection the REQUEST came on negotiated `credit`: a stream answered to
    /// it sends only as far as its window (WIRE.md §4.15).
    pub credit: bool,
}

/// A refusal the shell decided while a REQUEST was admitted (the channel's authorizer, the
/// key function): the call did not run.
pub struct Refusal {
    /// The REPLY's code.
    pub code: ReplyCode,
    /// Why, as the REPLY says it.
    pub message: String,
}

/// One served channel as the shell answers for it while [`Serving::handle_request`] admits a
/// call: the questions only the runtime's types can answer (its contract, authorizer and key
/// function, and the shape of a job). The core asks them in the order of the module docs.
/// `K` is the key of the connection a call's answers travel on.
pub trait ServedChannel<K> {
    /// A call as the shell's handlers see it, before it is accepted (what a key function
    /// reads).
    type Call;
    /// One accepted call, handed back to the shell by [`Serving::poll_run`].
    type Job;

    /// The plan of `method`, or `None` when the channel does not expose it.
    fn plan(&self, method: &str) -> Option<MethodPlan>;

    /// How many calls may wait in one of the channel's execution queues (MISSION K4).
    fn mailbox(&self) -> usize;

    /// The channel's authorizer on a call of `channel.method` with `semantics` (MISSION K6):
    /// `Err` refuses it, its message prefixed with the method's name.
    fn authorize(
        &self,
        channel: &str,
        method: &str,
        semantics: Option<Semantics>,
    ) -> Result<(), Refusal>;

    /// The call `req` from `from` arrived at `now`, as the handlers will see it.
    fn open(&self, from: From<K>, req: &wire::Request, now: Instant) -> Self::Call;

    /// The key of `call`'s queue under keyed execution (`None`: the channel has no key
    /// function, and its calls run serially); `Err` refuses it with that message.
    fn key(&self, call: &Self::Call) -> Result<Option<String>, Refusal>;

    /// The job that runs `call`, accepted as `id` under `plan`.
    fn job(&self, id: ServeId, call: Self::Call, plan: &MethodPlan) -> Self::Job;
}

/// An execution queue: the channel, and the key under keyed execution.
type QueueKey = (String, Option<String>);

/// One answer the callee decided on: an ACCEPT-less REPLY, for the connection the call's
/// answers travel on.
#[must_use]
pub struct Answer<K> {
    /// The call's connection.
    pub key: K,
    /// The REPLY.
    pub reply: wire::Reply,
}

/// A call [`Serving::handle_request`] took, not yet ACCEPTed on the wire: what it needs once
/// its ACCEPT left.
#[must_use]
pub struct Accepting<J, K> {
    key: K,
    id: ServeId,
    job: J,
    call_id: NonZeroU64,
    arrival: Arrival<ServeId>,
}

impl<J, K> Accepting<J, K> {
    /// The caller's id of the call, for its ACCEPT.
    pub fn call_id(&self) -> NonZeroU64 {
        self.call_id
    }
}

/// A stream item whose ITEM the shell is to send now (numbered by the serve table); report
/// with [`Serving::handle_item_sent`].
#[must_use]
pub struct ItemToSend<R, K> {
    /// The call's connection.
    pub key: K,
    /// The ITEM record's frames.
    pub frames: Vec<Vec<u8>>,
    id: ServeId,
    call_id: NonZeroU64,
    seq: u64,
    reply: R,
}

/// What becomes of a stream item the shell handed in.
#[must_use]
pub enum Streamed<R, K> {
    /// Its ITEM leaves now.
    Send(ItemToSend<R, K>),
    /// The stream is over (its call answered, cut, cancelled, its caller gone): nothing is
    /// sent, and the shell tells the handler through `R`.
    Over(R),
}

/// How an ITEM's send ended, from [`Serving::handle_item_sent`].
#[must_use]
pub enum ItemSent<R> {
    /// It was handed to the transport: the handler hears so through `R`.
    Sent(R),
    /// It could not be sent; the call ended `UnknownOutcome` with `message`, which the
    /// handler hears too.
    Unsent {
        /// The item's reply.
        reply: R,
        /// Why the stream ended.
        message: String,
    },
}

/// Why a running handler's caller no longer waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
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
    /// Its name as the metrics label it.
    pub fn label(self) -> &'static str {
        match self {
            Cause::CallerGone => "caller_gone",
            Cause::Cancel => "cancel",
            Cause::Ttl => "ttl",
            Cause::Answered => "answered",
        }
    }
}

/// What happened that the shell acts on or counts, from [`Serving::poll_event`].
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Nobody waits any more for the handlers of `calls` that still run, for `cause`: the
    /// shell signals each (and stops those it may).
    CallersGone {
        /// The calls; some may have no handler running.
        calls: Vec<ServeId>,
        /// Why.
        cause: Cause,
    },
    /// A call was refused `Busy`: its queue's mailbox was full.
    Busy,
    /// A waiting call was answered `Superseded`.
    Superseded,
    /// A CANCEL named no call in hand.
    CancelIgnored,
    /// A CANCEL took a waiting call out of its queue.
    CancelledQueued,
}

/// The callee's state (see the module docs). Its fields are its own: the shell talks to it
/// through the `handle_*` methods and takes its outputs from the `poll_*` ones.
pub struct Serving<J, R, K> {
    /// Calls this node serves (MISSION C4, C6).
    table: ServeTable<K>,
    /// The execution queues of served calls (MISSION K4).
    exec: ExecQueues<QueueKey, ServeId>,
    /// Accepted calls waiting in an execution queue, with their jobs.
    waiting: HashMap<ServeId, J>,
    /// Calls whose turn came and whose ttl allowed them, for the shell to run, in order.
    runs: VecDeque<(ServeId, J)>,
    /// Answers decided and not yet taken by the shell, in order.
    answers: VecDeque<Answer<K>>,
    /// What the shell acts on or counts, in order.
    events: VecDeque<Event>,
    /// Stream items waiting for their call's window to open, in order (WIRE.md §4.15).
    held: HashMap<ServeId, VecDeque<(Bytes, R)>>,
}

impl<J, R, K: Copy + Eq + Hash> Default for Serving<J, R, K> {
    fn default() -> Self {
        Serving {
            table: ServeTable::new(),
            exec: ExecQueues::new(),
            waiting: HashMap::new(),
            runs: VecDeque::new(),
            answers: VecDeque::new(),
            events: VecDeque::new(),
            held: HashMap::new(),
        }
    }
}

impl<J, R, K: Copy + Eq + Hash> Serving<J, R, K> {
    /// A BATCH for connection `key` (MISSION K5): an envelope, never a transaction. Each call
    /// goes through the path of a lone REQUEST (the shell hands them to
    /// [`Serving::handle_request`] one by one), so each is refused, ACCEPTed, deadlined and
    /// answered on its own. A BATCH over [`MAX_INCOMING_BATCH_CALLS`] is not dispatched:
    /// every call of it is answered `InvalidParams` (did not run), none is dropped. Returns
    /// the requests to handle one by one (none when the BATCH was refused whole).
    #[must_use]
    pub fn handle_batch(&mut self, key: K, requests: Vec<wire::Request>) -> Vec<wire::Request> {
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
                reply: reply(
                    req.call_id,
                    ReplyCode::InvalidParams,
                    Bytes::from(message.clone()),
                ),
            });
        }
        Vec::new()
    }

    /// A REQUEST from `from` for the channel `served` (`None`: nothing serves it here); see
    /// the module docs for the order of its steps. Returns the call if it was taken: the
    /// shell sends its ACCEPT now, then reports with [`Serving::handle_accept_sent`]. `None`:
    /// answered already (refused; its REPLY waits in [`Serving::poll_answer`]), or a
    /// duplicate of a call in hand (nothing to send).
    #[must_use]
    pub fn handle_request<S: ServedChannel<K, Job = J>>(
        &mut self,
        served: Option<&S>,
        from: From<K>,
        req: wire::Request,
        now: Instant,
    ) -> Option<Accepting<J, K>> {
        let call_id = req.call_id;
        let (key, credit) = (from.key, from.credit);
        let channel = req.channel.as_str();
        let method = req.method.as_str();
        let Some(served) = served else {
            let msg = format!("nothing serves channel {channel:?} here; not run");
            return self.refuse(key, call_id, ReplyCode::ClassNotFound, msg);
        };
        let Some(plan) = served.plan(method) else {
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
        if let Err(r) = served.authorize(channel, method, plan.semantics) {
            let msg = format!("{channel}.{method}: {}; not run", r.message);
            return self.refuse(key, call_id, r.code, msg);
        }
        let call = served.open(from, &req, now);
        let mailbox = served.mailbox();
        // The execution queue (MISSION K4): none (parallel), the channel's (serial), or the
        // channel's queue for the key the key function names (keyed).
        let queue = match plan.execution {
            ExecutionKind::Parallel => None,
            ExecutionKind::Serial => Some((channel.to_owned(), None)),
            ExecutionKind::Keyed => match served.key(&call) {
                Ok(k) => Some((channel.to_owned(), k)),
                Err(r) => return self.refuse(key, call_id, r.code, r.message),
            },
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
        let arrival = self
            .exec
            .handle_arrival(queue.clone(), mailbox, method, plan.conflate, sid);
        if arrival == Arrival::Busy {
            self.events.push_back(Event::Busy);
            if let Some(code) = self.table.handle_done(sid, ReplyCode::Busy, now) {
                let msg = format!(
                    "the mailbox of {} is full ({mailbox} calls wait); not run",
                    queue.map_or_else(String::new, |(c, k)| match k {
                        Some(k) => format!("{c} key {k:?}"),
                        None => c,
                    })
                );
                let _ = self.refuse(key, call_id, code, msg);
            }
            return None;
        }
        Some(Accepting {
            key,
            id: sid,
            job: served.job(sid, call, &plan),
            call_id,
            arrival,
        })
    }

    /// The ACCEPT of a call [`Serving::handle_request`] took was sent (`sent`), or could not
    /// be (its answer path is gone: the call is forgotten with the rest of that
    /// connection's calls). Once sent, the call runs now, waits in its queue, or takes the
    /// place of a waiting call of the same conflating method.
    pub fn handle_accept_sent(&mut self, accepting: Accepting<J, K>, sent: bool, now: Instant) {
        let Accepting {
            key,
            id,
            job,
            arrival,
            ..
        } = accepting;
        if !sent {
            self.handle_connection_lost(key, now);
            let next = self.left_queue(id);
            self.dispatch_next(next, now);
            if let Arrival::Superseding { replaced } = arrival {
                // The queue forgot the waiting call this one replaced; it will never run.
                self.supersede(replaced, now);
            }
            return;
        }
        match arrival {
            Arrival::RunNow => self.dispatch_next(Some((id, job)), now),
            Arrival::Queued => {
                self.waiting.insert(id, job);
            }
            Arrival::Superseding { replaced } => {
                self.waiting.insert(id, job);
                self.supersede(replaced, now);
            }
            Arrival::Busy => {}
        }
    }

    /// The connection `key` that calls' answers travel on is gone: its waiting calls will
    /// never run and leave their queues (so they do not hold mailbox places), and the
    /// handlers still running for it are told their caller is gone ([`Event::CallersGone`]).
    pub fn handle_connection_lost(&mut self, key: K, now: Instant) {
        let running = self.table.handle_connection_lost(key, now);
        if !running.is_empty() {
            self.events.push_back(Event::CallersGone {
                calls: running,
                cause: Cause::CallerGone,
            });
        }
        self.forget_orphaned_waiting(now);
    }

    /// A CANCEL for call `call_id` of the caller whose answers travel on `key` (WIRE.md
    /// §4.13): a queued call leaves its queue and never runs; a running handler is signalled,
    /// and stopped where its method allows; an unknown or finished call is ignored. Nothing
    /// more is sent for the call.
    pub fn handle_cancel(&mut self, key: K, call_id: NonZeroU64, now: Instant) {
        match self.table.handle_cancel(key, call_id, now) {
            Cancelled::Unknown => self.events.push_back(Event::CancelIgnored),
            Cancelled::Queued(_) => {
                self.events.push_back(Event::CancelledQueued);
                self.forget_orphaned_waiting(now);
            }
            Cancelled::Running(id) => self.events.push_back(Event::CallersGone {
                calls: vec![id],
                cause: Cause::Cancel,
            }),
        }
    }

    /// The handler of call `id` finished with `code` and `payload` (`replayed`: the
    /// idempotency guard answered with an earlier call's outcome): its one REPLY (unless the
    /// serve table already answered it, e.g. a stream ended by a drain), then the next call
    /// of its queue, which is the next [`Serving::poll_run`].
    pub fn handle_done(
        &mut self,
        id: ServeId,
        code: ReplyCode,
        payload: Bytes,
        replayed: bool,
        now: Instant,
    ) {
        let call = self.table.call_of(id);
        if let Some(sent) = self.table.handle_done(id, code, now) {
            if let Some((key, call_id)) = call {
                let mut reply = reply(call_id, sent, payload);
                // A code the serve table put in the handler's place is this call's own
                // answer, never a replay.
                reply.replayed = replayed && sent == code;
                self.answers.push_back(Answer { key, reply });
            }
        }
        let next = self.left_queue(id);
        if let Some(run) = self.dispatch(next, now) {
            self.runs.push_front(run);
        }
    }

    /// The next call to run now, with its job: its turn came and its ttl allowed it. The
    /// shell runs it (on a task, or in place) and reports its end with
    /// [`Serving::handle_done`].
    #[must_use]
    pub fn poll_run(&mut self) -> Option<(ServeId, J)> {
        self.runs.pop_front()
    }

    /// The next thing that happened for the shell to act on or count.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A running call whose ttl passed (the serve table reports each once): the shell
    /// signals its handler, and where it stopped it, reports [`Serving::handle_abandon`].
    #[must_use]
    pub fn poll_overdue(&mut self) -> Option<ServeId> {
        self.table.poll_overdue()
    }

    /// The handler of overdue call `id` was stopped: the call is abandoned (its caller fails
    /// it on its own deadline, an instant later).
    pub fn handle_abandon(&mut self, id: ServeId) {
        self.table.handle_abandon(id);
    }

    /// A stream handler of call `id` produced an item (`payload`, and `reply` to tell it
    /// whether it left). `None`: it waits, because the stream has a window (WIRE.md §4.15)
    /// and it is closed; its handler waits with it (its send resolves when the item
    /// leaves): that is the stream's backpressure. Items go in order, so one that comes
    /// while others wait waits too.
    #[must_use]
    pub fn handle_item(
        &mut self,
        id: ServeId,
        payload: Bytes,
        reply: R,
        now: Instant,
    ) -> Option<Streamed<R, K>> {
        // Nothing waits (the common case): no map lookup before the window check.
        let waiting = !self.held.is_empty() && self.held.get(&id).is_some_and(|q| !q.is_empty());
        if !waiting && self.table.may_send_item(id) {
            return Some(self.item_now(id, payload, reply, now));
        }
        if self.table.is_answered(id) {
            self.held.entry(id).or_default().push_back((payload, reply));
            return None;
        }
        // The call is over: refused.
        Some(self.item_now(id, payload, reply, now))
    }

    /// A CREDIT of `items` for call `call_id` of the caller whose answers travel on `key`
    /// (WIRE.md §4.15): its window grows, and the items that waited for it leave, in order,
    /// as far as it goes.
    #[must_use]
    pub fn handle_credit(
        &mut self,
        key: K,
        call_id: NonZeroU64,
        items: u64,
        now: Instant,
    ) -> Vec<Streamed<R, K>> {
        let Some(id) = self.table.handle_credit(key, call_id, items) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while self.table.may_send_item(id) {
            let Some((payload, reply)) = self.held.get_mut(&id).and_then(VecDeque::pop_front)
            else {
                break;
            };
            out.push(self.item_now(id, payload, reply, now));
        }
        if self.held.get(&id).is_some_and(VecDeque::is_empty) {
            self.held.remove(&id);
        }
        out
    }

    /// The ITEM of [`Serving::handle_item`] was handed to the transport (`sent`), or not. An
    /// ITEM the link cannot take now is never queued (MISSION C3); its number is spent, so
    /// the stream cannot go on: the call ends at once with REPLY `UnknownOutcome` (the caller
    /// must not take a shortened stream for a complete one), and the handler's later result
    /// is dropped.
    pub fn handle_item_sent(
        &mut self,
        item: ItemToSend<R, K>,
        sent: bool,
        now: Instant,
    ) -> ItemSent<R> {
        let ItemToSend {
            key,
            id,
            call_id,
            seq,
            reply: item_reply,
            ..
        } = item;
        if sent {
            return ItemSent::Sent(item_reply);
        }
        let message = format!("stream item {seq} could not be sent now; the stream ended");
        if let Some(code) = self.table.handle_done(id, ReplyCode::UnknownOutcome, now) {
            self.answers.push_back(Answer {
                key,
                reply: reply(call_id, code, Bytes::from(message.clone())),
            });
        }
        ItemSent::Unsent {
            reply: item_reply,
            message,
        }
    }

    /// Items that waited for a window of a call that is over (answered, cut, cancelled, its
    /// caller gone): each one's reply, for the shell to tell its handler that the stream is
    /// over.
    #[must_use]
    pub fn release_held(&mut self) -> Vec<R> {
        let mut over = Vec::new();
        if self.held.is_empty() {
            return over;
        }
        let table = &self.table;
        self.held.retain(|&id, items| {
            if table.is_answered(id) {
                return true;
            }
            over.extend(items.drain(..).map(|(_, reply)| reply));
            false
        });
        over
    }

    /// Begins the graceful stop: no new calls, the accepted ones answered within `bound`
    /// (MISSION C4, F6).
    pub fn begin_drain(&mut self, bound: Duration, now: Instant) {
        self.table.begin_drain(bound, now);
    }

    /// Applies the serve table's timers due at `now` (ttl refusals, the drain bound).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.table.handle_timeout(now);
    }

    /// The serve table's next timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.table.poll_timeout()
    }

    /// True once a drain is over.
    pub fn is_drained(&self) -> bool {
        self.table.is_drained()
    }

    /// Calls accepted and not yet answered, handlers still running for a lost connection
    /// included.
    pub fn in_flight(&self) -> usize {
        self.table.in_flight()
    }

    /// The next answer to send, in the order decided: the callee's own, and the serve
    /// table's (a queued call refused by its ttl, a call cut by the drain: its handler's
    /// caller no longer waits, [`Event::CallersGone`], and the next call of its queue moves
    /// up as it is taken).
    #[must_use]
    pub fn poll_answer(&mut self, now: Instant) -> Option<Answer<K>> {
        if let Some(a) = self.answers.pop_front() {
            return Some(a);
        }
        let r = self.table.poll_transmit()?;
        // Answered by the table (a stream ended by the drain, a call cut at the drain
        // bound) while its handler runs: its caller no longer waits for the handler.
        self.events.push_back(Event::CallersGone {
            calls: vec![r.id],
            cause: Cause::Answered,
        });
        let answer = Answer {
            key: r.conn,
            reply: reply(r.call_id, r.code, Bytes::from_static(r.message.as_bytes())),
        };
        let next = self.left_queue(r.id);
        self.dispatch_next(next, now);
        Some(answer)
    }

    /// Queues a REPLY refusing a call that did not run.
    fn refuse(
        &mut self,
        key: K,
        call_id: NonZeroU64,
        code: ReplyCode,
        message: String,
    ) -> Option<Accepting<J, K>> {
        self.answers.push_back(Answer {
            key,
            reply: reply(call_id, code, Bytes::from(message.into_bytes())),
        });
        None
    }

    /// Answers `replaced`, a waiting call a newer call of the same conflating method took the
    /// place of, `Superseded` (MISSION K4: did not run).
    fn supersede(&mut self, replaced: ServeId, now: Instant) {
        self.waiting.remove(&replaced);
        self.events.push_back(Event::Superseded);
        let call = self.table.call_of(replaced);
        if let Some(code) = self.table.handle_done(replaced, ReplyCode::Superseded, now) {
            let msg = "superseded by a newer call of the same method while it waited; not run";
            self.reply_to(call, code, msg);
        }
    }

    /// [`Serving::dispatch`], its run (if any) queued behind the runs already decided.
    fn dispatch_next(&mut self, next: Option<(ServeId, J)>, now: Instant) {
        if let Some(run) = self.dispatch(next, now) {
            self.runs.push_back(run);
        }
    }

    /// Decides on calls whose turn has come, starting with `next`: the serve table reads each
    /// one's ttl after its queue wait (MISSION C6); a call refused or skipped there lets the
    /// next call of its queue move up at once. Returns the first call to run: its queue
    /// waits for its end.
    fn dispatch(&mut self, mut next: Option<(ServeId, J)>, now: Instant) -> Option<(ServeId, J)> {
        while let Some((sid, job)) = next.take() {
            let call = self.table.call_of(sid);
            match self.table.handle_dispatch(sid, now) {
                Dispatch::Run => return Some((sid, job)),
                Dispatch::Refuse(code) => {
                    self.reply_to(call, code, "ttl ran out before dispatch; not run");
                }
                Dispatch::Skip => {}
            }
            next = self.left_queue(sid);
        }
        None
    }

    /// Call `sid` left its execution queue (answered, refused, skipped, or its caller's
    /// connection is gone): the next call of that queue, now its running call, with
    /// its job. A call no queue holds (parallel) has none.
    fn left_queue(&mut self, sid: ServeId) -> Option<(ServeId, J)> {
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
            self.dispatch_next(next, now);
        }
    }

    /// Queues a REPLY for a call identified by the serve table's `(connection, call_id)`.
    fn reply_to(&mut self, call: Option<(K, NonZeroU64)>, code: ReplyCode, msg: &str) {
        let Some((key, call_id)) = call else { return };
        self.answers.push_back(Answer {
            key,
            reply: reply(call_id, code, Bytes::copy_from_slice(msg.as_bytes())),
        });
    }

    /// Item `payload` of call `id`, to send now: numbered, or refused when its call is over.
    fn item_now(&mut self, id: ServeId, payload: Bytes, reply: R, now: Instant) -> Streamed<R, K> {
        let call = self.table.call_of(id);
        let seq = call.and_then(|_| self.table.handle_item(id, now));
        let (Some((key, call_id)), Some(seq)) = (call, seq) else {
            return Streamed::Over(reply);
        };
        Streamed::Send(ItemToSend {
            key,
            frames: item(call_id, seq, payload),
            id,
            call_id,
            seq,
            reply,
        })
    }
}

/// REPLY (encoded when it leaves: answers of one connection may travel together, WIRE.md
/// §4.16), not replayed (see [`wire::Reply::replayed`]).
fn reply(call_id: NonZeroU64, code: ReplyCode, payload: Bytes) -> wire::Reply {
    wire::Reply {
        call_id,
        code,
        payload,
        replayed: false,
    }
}

/// ITEM: stream item `seq` of call `call_id`.
fn item(call_id: NonZeroU64, seq: u64, payload: Bytes) -> Vec<Vec<u8>> {
    Record::Item(wire::Item {
        call_id,
        seq,
        payload,
    })
    .encode()
}

#[cfg(test)]
mod tests;
