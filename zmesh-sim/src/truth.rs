//! The simulator's ground truth: what really happened (which handler ran for which call,
//! which generation of which host was started when, what the application was sent), and the
//! invariants checked against it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use zmesh::proto::calls::{may_have_run, CallError, STREAM_WINDOW};
use zmesh::proto::wire::{Kind, Record, RejectReason};

use crate::net::{End, NetConn, NodeIx};

/// The liveness deadline as WIRE.md states it, written down here rather than taken from the
/// core, so that a core with another deadline is caught.
const PEER_DEADLINE: Duration = Duration::from_secs(15);

/// The most a probe or the deadline may be served early or late by coalescing timers
/// (WIRE.md, liveness), written down here for the same reason.
const COALESCE_WINDOW: Duration = Duration::from_millis(10);

/// What a simulated call asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallKind {
    /// A query.
    Query,
    /// An idempotent command.
    Idempotent,
    /// A non-repeatable command without an idempotency key.
    Command,
    /// A non-repeatable command guarded by this idempotency key (the server keeps a durable
    /// record per key that survives kills).
    Guarded(String),
}

/// An invariant that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's name (see SIMULATION.md).
    pub invariant: &'static str,
    /// Virtual time.
    pub at: Duration,
    /// What was seen.
    pub detail: String,
}

#[derive(Debug, Default)]
struct CallTruth {
    kind: Option<CallKind>,
    /// The host whose application started it, and that application's run.
    caller: (NodeIx, u64),
    /// The caller's process was killed before the call completed: nobody waits for it.
    caller_died: bool,
    completions: u32,
    result: Option<Result<Bytes, CallError>>,
    executions: u32,
    /// Its REQUEST was handed to the network.
    request_left: bool,
    /// The application cancelled it while it was pending: it must complete as
    /// `Cancelled { sent }`, `sent` being whether its REQUEST had left.
    cancelled: Option<bool>,
    /// A CANCEL for it reached a callee that held it waiting for its turn: it must never run.
    cancelled_while_queued: bool,
    /// Its handler, while it runs (or ran).
    handler: Option<HandlerTruth>,
}

/// A handler that started for a call.
#[derive(Debug, Clone, Copy)]
struct HandlerTruth {
    /// The host it runs on.
    node: NodeIx,
    /// A query (the runtime stops a query's handler when its caller stops waiting).
    query: bool,
    /// When the call's ttl passes at the callee (arrival + ttl), if it has one.
    ttl_end: Option<Duration>,
    /// When the callee learned that nobody waits any more (a CANCEL arrived, or the caller's
    /// connection was lost), if it did.
    signalled_at: Option<Duration>,
}

/// What a handler that starts is, for [`Truth::on_execute`].
#[derive(Debug, Clone, Copy)]
pub struct Started<'a> {
    /// The idempotency key of the call, if it has one.
    pub key: Option<&'a str>,
    /// A guarded non-repeatable command.
    pub guarded: bool,
    /// A query.
    pub query: bool,
    /// When the call's ttl passes at the callee, if it has one.
    pub ttl_end: Option<Duration>,
}

/// Where a callee held a call when a CANCEL for it arrived, as the callee's own records of
/// its queue and handlers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldAs {
    /// Accepted, waiting for its turn.
    Queued,
    /// Its handler runs.
    Running,
    /// Not in hand (answered, forgotten, never seen).
    Nothing,
}

/// What the simulator knows of one stream call.
#[derive(Debug, Default)]
struct StreamTruth {
    /// Items its handler produces before the terminal REPLY.
    total: u64,
    /// ITEMs the callee sent, and the CREDIT it received.
    sent: u64,
    credit_arrived: u64,
    /// Items the caller's application received.
    received: u64,
    /// The call completed (any outcome).
    done: bool,
}

/// A connection whose first record its acceptor read was not a HELLO (WIRE.md §5.1).
#[derive(Debug, Clone, Copy)]
struct StaleConn {
    /// The kind of that record.
    kind: Kind,
    /// The connection was open at both ends when it was read (a REJECT could leave).
    open: bool,
    /// The acceptor sent its one REJECT.
    refused: bool,
}

impl StaleConn {
    /// Whether the record is one the acceptor answers with REJECT Protocol: any but a
    /// REJECT or CLOSE, which get no answer.
    fn answered(&self) -> bool {
        !matches!(self.kind, Kind::Reject | Kind::Close)
    }
}

/// Everything the simulator knows for certain.
#[derive(Debug, Default)]
pub struct Truth {
    now: Duration,
    calls: BTreeMap<u64, CallTruth>,
    /// Executions of guarded handlers per server RID and idempotency key.
    by_key: BTreeMap<(String, String), u32>,
    /// The durable idempotency records per server RID and key: `None` in progress, `Some(uid)`
    /// done by the call `uid`. They survive kills (they are on the host's disk).
    store: BTreeMap<(String, String), Option<u64>>,
    /// Which host and run each generation belongs to, and when it started.
    generations: BTreeMap<u64, (NodeIx, u64)>,
    /// Per (host, run of the node on it, peer RID): the latest run of that peer admitted
    /// ready.
    admitted: BTreeMap<(NodeIx, u64, String), u64>,
    /// Fanout records published.
    published: BTreeSet<u64>,
    /// Messages the application sent, and those delivered.
    sent: BTreeSet<u64>,
    delivered: BTreeSet<u64>,
    /// Automatic mode: whether each RID serves (from the configuration).
    serves: BTreeMap<String, bool>,
    /// Descriptors the store ever held: (RID, generation).
    descriptors: BTreeSet<(String, u64)>,
    /// Per (host, run of the node on it, peer RID): the generation of the descriptor that
    /// run's watch delivered last, and the peer's current descriptor as that watch tells it
    /// (`None`: it said the descriptor went away). A new run of the host starts with an
    /// empty directory, and two runs of one host, a paused one beside its successor, each
    /// have their own.
    delivered_last: BTreeMap<(NodeIx, u64, String), u64>,
    delivered_current: BTreeMap<(NodeIx, u64, String), Option<u64>>,
    /// Stream calls by uid.
    streams: BTreeMap<u64, StreamTruth>,
    /// Per (host, run, connection): a connection whose first record that run read was not
    /// a HELLO.
    stale: BTreeMap<(NodeIx, u64, NetConn), StaleConn>,
    /// The runs (host, run) whose graceful stop began.
    stopping: BTreeSet<(NodeIx, u64)>,
    /// The violations seen, in order.
    pub violations: Vec<Violation>,
    /// Statistics.
    pub stats: Stats,
}

/// What a run did, for the report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    /// Calls started.
    pub calls: u64,
    /// Calls that completed Ok.
    pub ok: u64,
    /// Calls that failed with "did not run".
    pub did_not_run: u64,
    /// Calls that failed with "may have run".
    pub may_have_run: u64,
    /// Handler executions.
    pub executions: u64,
    /// Links that became ready.
    pub readies: u64,
    /// Links that left ready because their deadline passed.
    pub deadlines: u64,
    /// Messages delivered to an application.
    pub messages: u64,
    /// Guarded calls answered from the durable record.
    pub replayed: u64,
    /// Calls failed because the connection that took them was lost (`OutcomeUnknown`).
    pub lost_with_connection: u64,
    /// Fanout records received by subscribers.
    pub fanout_records: u64,
    /// Publisher watches that went silent.
    pub silences: u64,
    /// Calls the application cancelled while they were pending.
    pub cancels: u64,
    /// Calls that completed `Cancelled { sent: false }` (cancelled before their REQUEST left).
    pub cancelled_unsent: u64,
    /// Calls that completed `Cancelled { sent: true }`.
    pub cancelled_sent: u64,
    /// CANCEL records sent.
    pub cancels_sent: u64,
    /// Cancels that stayed local: the connection had no `cancel` in effect (a version-1 peer).
    pub cancels_kept_local: u64,
    /// CANCELs that reached a call waiting in its callee's queue.
    pub cancels_to_queued: u64,
    /// CANCELs that reached a running handler.
    pub cancels_to_running: u64,
    /// CANCELs for a call the callee no longer held.
    pub cancels_to_nothing: u64,
    /// Query handlers stopped because nobody waited any more.
    pub queries_stopped: u64,
    /// Calls a callee refused `Busy`: their queue's mailbox was full.
    pub busy: u64,
    /// Waiting calls a newer call of the same setpoint took the place of (answered
    /// `Superseded`).
    pub superseded: u64,
    /// ANSWERS records sent (WIRE.md §4.16).
    pub answers_packed: u64,
    /// The ACCEPTs and REPLYs those ANSWERS records stood for.
    pub answers_in_packs: u64,
    /// Bursts of calls an application made in one turn for one server.
    pub bursts: u64,
    /// BATCH records sent (WIRE.md §4.12).
    pub batches_sent: u64,
    /// CALLS records sent (WIRE.md §4.14).
    pub calls_records_sent: u64,
    /// The calls those BATCH and CALLS records carried.
    pub calls_in_records: u64,
    /// Floods: hundreds of messages a peer sent on one connection at once.
    pub floods: u64,
    /// Rotations of the nodes' receive loops.
    pub rotations: u64,
    /// Turns that handed out the count cap's 64 records (and so ended at it).
    pub count_cap_turns: u64,
    /// Descriptors the store published (puts it applied).
    pub store_puts: u64,
    /// Lease renewals the store applied.
    pub store_renewals: u64,
    /// Store operations that failed because the store could not be reached.
    pub store_errors: u64,
    /// Store outages injected (for one host or every host).
    pub store_outages: u64,
    /// Leases the store expired.
    pub leases_expired: u64,
    /// Leases a node's keeper reported lost.
    pub leases_lost: u64,
    /// Reloads a watch delivered (first reads, and after outages of a reloading store).
    pub watch_reloads: u64,
    /// HELLOs or WELCOMEs refused for a generation other than the descriptor fence's.
    pub fence_refusals: u64,
    /// Dials discovery asked for.
    pub discovery_dials: u64,
    /// Ready connections closed because a descriptor of another run replaced their fence.
    pub discovery_replacements: u64,
    /// Publisher descriptors a subscriber's directory asked it to subscribe to (a new
    /// subscription, a new run of a publisher, or a retired one taken up again).
    pub discovery_subscriptions: u64,
    /// Stream calls made.
    pub streams: u64,
    /// ITEMs a callee sent.
    pub items_sent: u64,
    /// Items a caller's application received.
    pub items_received: u64,
    /// CREDIT records a caller sent.
    pub credits_sent: u64,
    /// Times a callee's stream waited for CREDIT with its window closed.
    pub windows_closed: u64,
    /// Stream calls whose application was a slow consumer.
    pub slow_streams: u64,
    /// Items that waited in a slow consumer's buffer.
    pub slow_items: u64,
    /// Runs paused while a successor of their RID started (failovers, `Config::zombies`).
    pub zombies: u64,
    /// Of those, the ones that came back beside their successor.
    pub zombies_back: u64,
    /// Paused runs that came back and ended when the store answered their renewal with
    /// `Superseded` (or `Lost`).
    pub zombies_superseded: u64,
    /// Paused runs that came back and asked to publish their descriptor (their first put
    /// had failed), ended there unless `Config::zombie_puts` lets them publish.
    pub zombies_would_publish: u64,
    /// First records of a connection unknown to its acceptor that were not a HELLO (late
    /// records of a connection the acceptor dropped and forgot).
    pub stale_first_records: u64,
    /// HELLOs a stopping node refused `Draining`.
    pub draining_refusals: u64,
}

impl Stats {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Stats) {
        let Stats {
            calls,
            ok,
            did_not_run,
            may_have_run,
            executions,
            readies,
            deadlines,
            messages,
            replayed,
            lost_with_connection,
            fanout_records,
            silences,
            cancels,
            cancelled_unsent,
            cancelled_sent,
            cancels_sent,
            cancels_kept_local,
            cancels_to_queued,
            cancels_to_running,
            cancels_to_nothing,
            queries_stopped,
            busy,
            superseded,
            answers_packed,
            answers_in_packs,
            bursts,
            batches_sent,
            calls_records_sent,
            calls_in_records,
            floods,
            rotations,
            count_cap_turns,
            store_puts,
            store_renewals,
            store_errors,
            store_outages,
            leases_expired,
            leases_lost,
            watch_reloads,
            fence_refusals,
            discovery_dials,
            discovery_replacements,
            discovery_subscriptions,
            streams,
            items_sent,
            items_received,
            credits_sent,
            windows_closed,
            slow_streams,
            slow_items,
            zombies,
            zombies_back,
            zombies_superseded,
            zombies_would_publish,
            stale_first_records,
            draining_refusals,
        } = *o;
        self.calls += calls;
        self.ok += ok;
        self.did_not_run += did_not_run;
        self.may_have_run += may_have_run;
        self.executions += executions;
        self.readies += readies;
        self.deadlines += deadlines;
        self.messages += messages;
        self.replayed += replayed;
        self.lost_with_connection += lost_with_connection;
        self.fanout_records += fanout_records;
        self.silences += silences;
        self.cancels += cancels;
        self.cancelled_unsent += cancelled_unsent;
        self.cancelled_sent += cancelled_sent;
        self.cancels_sent += cancels_sent;
        self.cancels_kept_local += cancels_kept_local;
        self.cancels_to_queued += cancels_to_queued;
        self.cancels_to_running += cancels_to_running;
        self.cancels_to_nothing += cancels_to_nothing;
        self.queries_stopped += queries_stopped;
        self.busy += busy;
        self.superseded += superseded;
        self.answers_packed += answers_packed;
        self.answers_in_packs += answers_in_packs;
        self.bursts += bursts;
        self.batches_sent += batches_sent;
        self.calls_records_sent += calls_records_sent;
        self.calls_in_records += calls_in_records;
        self.floods += floods;
        self.rotations += rotations;
        self.count_cap_turns += count_cap_turns;
        self.store_puts += store_puts;
        self.store_renewals += store_renewals;
        self.store_errors += store_errors;
        self.store_outages += store_outages;
        self.leases_expired += leases_expired;
        self.leases_lost += leases_lost;
        self.watch_reloads += watch_reloads;
        self.fence_refusals += fence_refusals;
        self.discovery_dials += discovery_dials;
        self.discovery_replacements += discovery_replacements;
        self.discovery_subscriptions += discovery_subscriptions;
        self.streams += streams;
        self.items_sent += items_sent;
        self.items_received += items_received;
        self.credits_sent += credits_sent;
        self.windows_closed += windows_closed;
        self.slow_streams += slow_streams;
        self.slow_items += slow_items;
        self.zombies += zombies;
        self.zombies_back += zombies_back;
        self.zombies_superseded += zombies_superseded;
        self.zombies_would_publish += zombies_would_publish;
        self.stale_first_records += stale_first_records;
        self.draining_refusals += draining_refusals;
    }
}

/// The REQUEST payload of call `uid`.
pub fn payload_of(uid: u64) -> Bytes {
    Bytes::copy_from_slice(&uid.to_be_bytes())
}

/// The call a REQUEST payload names (0 for a payload that is not one of ours).
pub fn uid_of(payload: &[u8]) -> u64 {
    payload
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_be_bytes)
}

/// The REPLY payload of a handler that ran for call `uid`.
pub fn result_of(uid: u64) -> Bytes {
    let mut b = b"ran:".to_vec();
    b.extend_from_slice(&uid.to_be_bytes());
    Bytes::from(b)
}

/// The payload of fanout record `uid`.
pub fn fanout_of(uid: u64) -> Bytes {
    let mut b = b"pub:".to_vec();
    b.extend_from_slice(&uid.to_be_bytes());
    Bytes::from(b)
}

/// The MESSAGE payload of message `uid`.
pub fn message_of(uid: u64) -> Bytes {
    let mut b = b"msg:".to_vec();
    b.extend_from_slice(&uid.to_be_bytes());
    Bytes::from(b)
}

fn tagged(payload: &[u8], tag: &[u8]) -> Option<u64> {
    payload.strip_prefix(tag).map(uid_of).filter(|&u| u != 0)
}

impl Truth {
    /// Moves the truth's clock (violations are stamped with it).
    pub fn set_now(&mut self, now: Duration) {
        self.now = now;
    }

    /// Records a violation.
    pub fn violation(&mut self, invariant: &'static str, detail: String) {
        self.violations.push(Violation {
            invariant,
            at: self.now,
            detail,
        });
    }

    /// A run of host `node` started with `generation`.
    pub fn on_start(&mut self, node: NodeIx, run: u64, generation: u64) {
        self.generations.insert(generation, (node, run));
    }

    /// Call `uid` is a stream whose handler produces `total` items, then its REPLY.
    pub fn on_stream(&mut self, uid: u64, total: u64) {
        self.stats.streams += 1;
        self.streams.insert(
            uid,
            StreamTruth {
                total,
                ..StreamTruth::default()
            },
        );
    }

    /// How many items the handler of stream call `uid` produces (`None`: not a stream).
    pub fn stream_total(&self, uid: u64) -> Option<u64> {
        self.streams.get(&uid).map(|s| s.total)
    }

    /// The callee of stream call `uid` sent an ITEM; `window` says whether `credit` is in
    /// effect on its connection: then it may send at most [`STREAM_WINDOW`] items beyond the
    /// CREDIT that reached it (WIRE.md §4.15).
    pub fn on_item_sent(&mut self, uid: u64, window: bool) {
        self.stats.items_sent += 1;
        let Some(s) = self.streams.get_mut(&uid) else {
            return;
        };
        s.sent += 1;
        let limit = STREAM_WINDOW.saturating_add(s.credit_arrived);
        if window && s.sent > limit {
            let detail = format!(
                "the callee of stream u{uid} sent item {} with CREDIT for {} beyond the window",
                s.sent, s.credit_arrived
            );
            self.violation("stream_window_never_exceeded", detail);
        }
    }

    /// A CREDIT of `items` for stream call `uid` reached its callee.
    pub fn on_credit_arrived(&mut self, uid: u64, items: u64) {
        if let Some(s) = self.streams.get_mut(&uid) {
            s.credit_arrived = s.credit_arrived.saturating_add(items);
        }
    }

    /// The caller's application received item `seq` of stream call `uid`.
    pub fn on_item_received(&mut self, uid: u64, seq: u64) {
        self.stats.items_received += 1;
        let Some(s) = self.streams.get_mut(&uid) else {
            let detail = format!("an item {seq} reached the application for u{uid}, no stream");
            self.violation("items_in_order_exactly_once", detail);
            return;
        };
        let (done, next) = (s.done, s.received);
        s.received = s.received.max(seq.saturating_add(1));
        if done {
            let detail = format!(
                "item {seq} of stream u{uid} reached the application after its terminal answer"
            );
            self.violation("nothing_after_the_answer", detail);
        }
        if seq != next {
            let detail = format!(
                "item {seq} of stream u{uid} reached the application where item {next} was next"
            );
            self.violation("items_in_order_exactly_once", detail);
        }
    }

    /// Stream call `uid` completed: an Ok answer comes after every item its handler
    /// produced, and on this network (FIFO, nothing twice) no call fails for its items'
    /// order. `items` is the count the call table reports on Ok.
    pub fn on_stream_end(&mut self, uid: u64, result: Result<u64, &CallError>) {
        let Some(s) = self.streams.get_mut(&uid) else {
            return;
        };
        s.done = true;
        let (received, total) = (s.received, s.total);
        match result {
            Ok(items) if items != total || received != total => {
                let detail = format!(
                    "stream u{uid} completed Ok after {received} items (the table counts {items}) of {total}"
                );
                self.violation("items_in_order_exactly_once", detail);
            }
            Err(e @ CallError::ItemOutOfOrder { .. }) => {
                let detail = format!("stream u{uid} failed {e:?} on a FIFO network");
                self.violation("items_in_order_exactly_once", detail);
            }
            _ => {}
        }
    }

    /// Automatic mode: RID `rid` serves, or not (what its configuration says).
    pub fn on_role(&mut self, rid: &str, serves: bool) {
        self.serves.insert(rid.to_owned(), serves);
    }

    /// The store applied a put of `rid`'s descriptor of `generation`.
    pub fn on_published(&mut self, rid: &str, generation: u64) {
        self.stats.store_puts += 1;
        self.descriptors.insert((rid.to_owned(), generation));
    }

    /// The watch of the run at `me` delivered a descriptor of `rid` with `generation`.
    pub fn on_delivered(&mut self, me: End, rid: &str, generation: u64) {
        let key = (me.node, me.run, rid.to_owned());
        self.delivered_last.insert(key, generation);
    }

    /// The watch of the run at `me` says what `rid`'s current descriptor is: of the run of
    /// `generation`, or none (`None`: it went away, or a reload did not list it).
    pub fn on_current(&mut self, me: End, rid: &str, generation: Option<u64>) {
        let key = (me.node, me.run, rid.to_owned());
        self.delivered_current.insert(key, generation);
    }

    /// The RIDs whose current descriptor the watch of the run at `me` named last (a reload
    /// that leaves one out says it is gone).
    pub fn current_rids(&self, me: End) -> Vec<String> {
        self.delivered_current
            .iter()
            .filter(|((n, r, _), g)| *n == me.node && *r == me.run && g.is_some())
            .map(|((_, _, rid), _)| rid.clone())
            .collect()
    }

    /// Host `node` (RID `me`) dials `rid` because discovery asked for it, fenced by
    /// `generation`: the store must have held that descriptor (`dials_only_published`), and
    /// the pair must need a connection (`no_dial_a_pair_does_not_need`, MISSION T4).
    pub fn on_discovery_dial(
        &mut self,
        node: NodeIx,
        me: &str,
        rid: &str,
        generation: Option<u64>,
    ) {
        self.stats.discovery_dials += 1;
        let published = generation.is_some_and(|g| self.descriptors.contains(&(rid.to_owned(), g)));
        if !published {
            let detail = format!(
                "host {node} dials {rid} under fence {generation:x?}, a descriptor the store never held"
            );
            self.violation("dials_only_published", detail);
        }
        let serves = |r: &str| self.serves.get(r).copied().unwrap_or(false);
        if !serves(me) && !serves(rid) {
            let detail = format!("host {node} ({me}) dials {rid}; neither serves (MISSION T4)");
            self.violation("no_dial_a_pair_does_not_need", detail);
        }
    }

    /// Host `node` subscribes to publisher `rid`'s run of `generation` because its directory
    /// asked for it: the store must have held that descriptor (`dials_only_published`).
    pub fn on_discovery_subscribe(&mut self, node: NodeIx, rid: &str, generation: u64) {
        self.stats.discovery_subscriptions += 1;
        if !self.descriptors.contains(&(rid.to_owned(), generation)) {
            let detail = format!(
                "host {node} subscribes to {rid} g{generation:x}, a descriptor the store never held"
            );
            self.violation("dials_only_published", detail);
        }
    }

    /// The discovery of the run at `me` closed a ready connection to `rid`'s run of
    /// `generation`: only a descriptor of another run may do that (F3), never a descriptor
    /// that went away or a store that cannot be reached (F5).
    pub fn on_discovery_drop(&mut self, me: End, rid: &str, generation: u64) {
        self.stats.discovery_replacements += 1;
        let node = me.node;
        let last = self
            .delivered_last
            .get(&(node, me.run, rid.to_owned()))
            .copied();
        if last.is_none_or(|g| g == generation) {
            let detail = format!(
                "host {node} closed its ready link to {rid} g{generation:x}, but the last descriptor of {rid} its watch delivered is {last:x?}"
            );
            self.violation("discovery_keeps_ready_links", detail);
        }
    }

    /// The application of the run at `caller` started call `uid`.
    pub fn on_call(&mut self, uid: u64, kind: CallKind, caller: End) {
        self.stats.calls += 1;
        let c = self.calls.entry(uid).or_default();
        c.kind = Some(kind);
        c.caller = (caller.node, caller.run);
    }

    /// The process of the run at `end` was killed: its pending calls have nobody waiting.
    pub fn on_kill(&mut self, end: End) {
        for c in self.calls.values_mut() {
            if c.caller == (end.node, end.run) && c.completions == 0 {
                c.caller_died = true;
            }
        }
    }

    /// The application sent message `uid`.
    pub fn on_send(&mut self, uid: u64) {
        self.sent.insert(uid);
    }

    /// A handler started for call `uid` on host `node` (server `server`).
    pub fn on_execute(&mut self, uid: u64, node: NodeIx, server: &str, started: Started<'_>) {
        self.stats.executions += 1;
        let now = self.now;
        let c = self.calls.entry(uid).or_default();
        c.executions += 1;
        c.handler = Some(HandlerTruth {
            node,
            query: started.query,
            ttl_end: started.ttl_end,
            signalled_at: None,
        });
        let queued_cancel = c.cancelled_while_queued;
        if let Some(Err(e)) = &c.result {
            if !may_have_run(e) {
                let detail = format!(
                    "call u{uid} ran on host {node} after its caller was told it did not run ({e:?})"
                );
                self.violation("did_not_run_never_ran", detail);
            }
        }
        if queued_cancel {
            let detail = format!(
                "call u{uid} ran on host {node} at {now:?}, after a CANCEL reached it while it waited in the queue"
            );
            self.violation("cancelled_in_queue_never_runs", detail);
        }
        if started.guarded {
            if let Some(k) = started.key {
                let n = self
                    .by_key
                    .entry((server.to_owned(), k.to_owned()))
                    .or_default();
                *n += 1;
                if *n > 1 {
                    let detail = format!(
                        "guarded key {k} ran {n} times on server {server} (call u{uid} on host {node})"
                    );
                    self.violation("guarded_at_most_once", detail);
                }
            }
        }
    }

    /// The REQUEST of call `uid` was handed to the network.
    pub fn on_request_left(&mut self, uid: u64) {
        self.calls.entry(uid).or_default().request_left = true;
    }

    /// The application cancels call `uid`, which its caller's table still holds as pending:
    /// it must complete as `Cancelled`, saying whether its REQUEST had left.
    pub fn on_cancel(&mut self, uid: u64) {
        self.stats.cancels += 1;
        let c = self.calls.entry(uid).or_default();
        c.cancelled = Some(c.request_left);
    }

    /// A callee sent an ANSWERS record standing for `records` ACCEPTs and REPLYs.
    pub fn on_answers_packed(&mut self, records: usize) {
        self.stats.answers_packed += 1;
        self.stats.answers_in_packs += records as u64;
    }

    /// The caller sends a CANCEL for call `uid`: only a call whose REQUEST left may be
    /// cancelled at the callee (WIRE.md §5.3).
    pub fn on_cancel_sent(&mut self, uid: u64) {
        self.stats.cancels_sent += 1;
        let left = self.calls.get(&uid).is_some_and(|c| c.request_left);
        if !left {
            let detail = format!("a CANCEL was sent for call u{uid}, whose REQUEST never left");
            self.violation("cancel_only_after_request", detail);
        }
    }

    /// A CANCEL for call `uid` reached host `node`, which held the call as `held`.
    pub fn on_cancel_arrived(&mut self, uid: u64, node: NodeIx, held: HeldAs) {
        match held {
            HeldAs::Queued => self.stats.cancels_to_queued += 1,
            HeldAs::Running => self.stats.cancels_to_running += 1,
            HeldAs::Nothing => {
                self.stats.cancels_to_nothing += 1;
                return;
            }
        }
        let now = self.now;
        let c = self.calls.entry(uid).or_default();
        if held == HeldAs::Queued {
            c.cancelled_while_queued = true;
        }
        if let Some(h) = c.handler.as_mut().filter(|h| h.node == node) {
            h.signalled_at.get_or_insert(now);
        }
    }

    /// Host `node` learned that the caller of call `uid`, whose handler runs there, is gone
    /// (the connection its answers travel on was lost).
    pub fn on_caller_gone(&mut self, uid: u64, node: NodeIx) {
        let now = self.now;
        if let Some(h) = self
            .calls
            .get_mut(&uid)
            .and_then(|c| c.handler.as_mut())
            .filter(|h| h.node == node)
        {
            h.signalled_at.get_or_insert(now);
        }
    }

    /// The handler of call `uid` on host `node` ran to its end and completed its effect. A
    /// query's handler must not: it is stopped once its callee learns nobody waits (a CANCEL
    /// arrived, its caller is gone, or its ttl passed while it ran). A command may finish.
    pub fn on_handler_done(&mut self, uid: u64, node: NodeIx) {
        let now = self.now;
        let Some(h) = self
            .calls
            .get(&uid)
            .and_then(|c| c.handler)
            .filter(|h| h.node == node && h.query)
        else {
            return;
        };
        let why = match (h.signalled_at, h.ttl_end) {
            (Some(at), _) => format!("its callee learned at {at:?} that nobody waits"),
            (None, Some(end)) if end <= now => format!("its ttl passed at {end:?}"),
            _ => return,
        };
        let detail = format!(
            "the query handler of call u{uid} on host {node} finished at {now:?}, but {why}"
        );
        self.violation("stopped_query_never_finishes", detail);
    }

    /// A query handler was stopped because nobody waits any more.
    pub fn on_query_stopped(&mut self) {
        self.stats.queries_stopped += 1;
    }

    /// The durable record of `key` on server `rid`: `None` absent, `Some(None)` in progress,
    /// `Some(Some(uid))` done by call `uid`.
    pub fn store_get(&mut self, rid: &str, key: &str) -> Option<Option<u64>> {
        let got = self.store.get(&(rid.to_owned(), key.to_owned())).copied();
        if matches!(got, Some(Some(_))) {
            self.stats.replayed += 1;
        }
        got
    }

    /// Records `key` as in progress on server `rid` (before its handler runs).
    pub fn store_begin(&mut self, rid: &str, key: &str) {
        self.store.insert((rid.to_owned(), key.to_owned()), None);
    }

    /// Records `key` as done by call `uid` on server `rid`.
    pub fn store_done(&mut self, rid: &str, key: &str, uid: u64) {
        self.store
            .insert((rid.to_owned(), key.to_owned()), Some(uid));
    }

    /// Call `uid` completed with `result` (the REPLY payload on Ok); `replayed` is the
    /// REPLY's replayed mark where the connection it came on negotiated `replayed` (WIRE.md
    /// §4.17), `None` elsewhere.
    pub fn on_completion(
        &mut self,
        uid: u64,
        result: Result<Bytes, CallError>,
        replayed: Option<bool>,
        now: Duration,
    ) {
        let _ = now;
        // The replayed mark is set exactly on an answer from the durable record: an Ok result
        // of an earlier call with the same key (the simulated callee records only Ok).
        if let Some(said) = replayed {
            let from_record = result
                .as_ref()
                .is_ok_and(|p| tagged(p, b"ran:").is_some_and(|r| r != uid));
            if said != from_record {
                let detail = format!(
                    "call u{uid} was answered {}from the record, but its REPLY said replayed={said}",
                    if from_record { "" } else { "not " }
                );
                self.violation("replayed_exactly_from_the_record", detail);
            }
        }
        let c = self.calls.entry(uid).or_default();
        c.completions += 1;
        if c.completions > 1 {
            let detail = format!("call u{uid} completed {} times", c.completions);
            self.violation("exactly_once", detail);
            return;
        }
        if matches!(result, Err(CallError::OutcomeUnknown { .. })) {
            self.stats.lost_with_connection += 1;
        }
        match &result {
            Err(CallError::Cancelled { sent: false }) => self.stats.cancelled_unsent += 1,
            Err(CallError::Cancelled { sent: true }) => self.stats.cancelled_sent += 1,
            _ => {}
        }
        if let Some(left) = c.cancelled {
            if !matches!(&result, Err(CallError::Cancelled { sent }) if *sent == left) {
                let detail = format!(
                    "call u{uid} was cancelled while pending (its REQUEST {}), but completed {result:?}",
                    if left { "had left" } else { "had not left" }
                );
                c.result = Some(result);
                self.violation("cancelled_completes_as_cancelled", detail);
                return;
            }
        }
        match &result {
            Ok(_) => self.stats.ok += 1,
            Err(e) if may_have_run(e) => self.stats.may_have_run += 1,
            Err(e) => {
                self.stats.did_not_run += 1;
                if c.executions > 0 {
                    let detail = format!(
                        "call u{uid} failed as did-not-run ({e:?}) but its handler ran {} time(s)",
                        c.executions
                    );
                    c.result = Some(result);
                    self.violation("did_not_run_never_ran", detail);
                    return;
                }
            }
        }
        if let Ok(payload) = &result {
            // An Ok result is the result of a handler that ran: this call's own, or (a
            // guarded call answered from the record) an earlier call with the same key.
            let ran = tagged(payload, b"ran:");
            let kind = c.kind.clone();
            let valid = match (ran, kind) {
                (Some(r), _) if r == uid => self.calls.get(&uid).is_some_and(|c| c.executions > 0),
                (Some(r), Some(CallKind::Guarded(k))) => self
                    .calls
                    .get(&r)
                    .is_some_and(|o| o.kind == Some(CallKind::Guarded(k)) && o.executions > 0),
                _ => false,
            };
            if !valid {
                let detail = format!("call u{uid} got an Ok result that no handler of it produced");
                self.violation("ok_means_ran", detail);
            }
        }
        if let Some(c) = self.calls.get_mut(&uid) {
            c.result = Some(result);
        }
    }

    /// The run at `me` made a link to `peer_rid` ready with `generation`; `automatic`: the
    /// node discovers through the store.
    ///
    /// Generations are compared for equality only (MISSION, Terms), so in automatic mode a
    /// node tells one run of a RID from another by the descriptor its watch names current:
    /// `store_fence_holds` requires the ready run to be that one whenever the watch names
    /// one, and `no_older_generation` judges a ready only then (a watch that fell behind in
    /// an outage, or that said the descriptor went away, names none). In manual mode,
    /// where runs follow each other on a host, `no_older_generation` judges every ready.
    pub fn on_ready(&mut self, me: End, peer_rid: &str, generation: u64, automatic: bool) {
        let node = me.node;
        self.stats.readies += 1;
        let Some(&(_, run)) = self.generations.get(&generation) else {
            let detail = format!(
                "host {node} made ready a generation {generation:x} no run of {peer_rid} had"
            );
            self.violation("no_older_generation", detail);
            return;
        };
        let key = (node, me.run, peer_rid.to_owned());
        let current = self.delivered_current.get(&key).copied().flatten();
        let knows_runs = !automatic || current.is_some();
        let latest = self.admitted.get(&key).copied().unwrap_or(0);
        if run < latest && knows_runs {
            let detail = format!(
                "host {node} made run {run} of {peer_rid} ready after it had admitted run {latest}"
            );
            self.violation("no_older_generation", detail);
        }
        if let Some(fence) = current.filter(|g| *g != generation) {
            let shown = self.generations.get(&fence).map_or(0, |r| r.1);
            let detail = format!(
                "host {node} made run {run} of {peer_rid} ready while its watch named run {shown} (g{fence:x}) current"
            );
            self.violation("store_fence_holds", detail);
        }
        self.admitted.insert(key, run.max(latest));
    }

    /// The run at `me` read `kind`, not a HELLO, as the first record of `conn`, a connection
    /// it does not know (`open`: still open at both ends). It must answer with one REJECT
    /// Protocol at once, or with nothing for a REJECT or CLOSE; it sends nothing more on
    /// that connection, never makes it ready and hands nothing of it to its application
    /// (WIRE.md §5.1, "Protocol errors before admission"; MISSION W3, L6).
    pub fn on_stale_first(&mut self, me: End, conn: NetConn, kind: Kind, open: bool) {
        self.stats.stale_first_records += 1;
        let key = (me.node, me.run, conn);
        let first = StaleConn {
            kind,
            open,
            refused: false,
        };
        match self.stale.get(&key) {
            // A REJECT or CLOSE ends its connection, but what still arrives is judged too.
            Some(s) if s.answered() => {}
            _ => {
                self.stale.insert(key, first);
            }
        }
    }

    /// The run at `me` has judged the stale first record of `conn`: if it needed an answer
    /// and the connection was open, the REJECT left.
    pub fn check_stale_answered(&mut self, me: End, conn: NetConn) {
        let Some(s) = self.stale.get(&(me.node, me.run, conn)).copied() else {
            return;
        };
        if s.answered() && s.open && !s.refused {
            let detail = format!(
                "host {} read {:?} as the first record of {conn}, an unknown connection, and did not refuse it",
                me.node, s.kind
            );
            self.violation("stale_records_refused", detail);
        }
    }

    /// The run at `me` put `rec` on the wire on `conn`.
    pub fn on_wire(&mut self, me: End, conn: NetConn, rec: &Record) {
        if self.stale.is_empty() {
            return;
        }
        let Some(s) = self.stale.get_mut(&(me.node, me.run, conn)) else {
            return;
        };
        let protocol = matches!(rec, Record::Reject(r) if r.reason == RejectReason::Protocol);
        if protocol && s.answered() && !s.refused {
            s.refused = true;
            return;
        }
        let detail = format!(
            "host {} sent {:?} on {conn}, whose first record was {:?} (refused already: {})",
            me.node,
            rec.kind(),
            s.kind,
            s.refused
        );
        self.violation("stale_records_refused", detail);
    }

    /// The run at `me` made `conn` ready (`dialled`: a connection it dialled). A connection
    /// whose first record was stale never is; a run whose graceful stop began admits no new
    /// connection (WIRE.md §5.1: a stopping acceptor answers a HELLO with REJECT Draining;
    /// MISSION F6, C4).
    pub fn on_conn_ready(&mut self, me: End, conn: NetConn, dialled: bool) {
        let node = me.node;
        if self.stale.contains_key(&(node, me.run, conn)) {
            let detail =
                format!("host {node} made {conn} ready, whose first record was not a HELLO");
            self.violation("stale_records_refused", detail);
        }
        if !dialled && self.stopping.contains(&(node, me.run)) {
            let detail = format!(
                "host {node} (run {}) admitted {conn} after its graceful stop began",
                me.run
            );
            self.violation("no_admission_while_draining", detail);
        }
    }

    /// The run at `end` begins its graceful stop.
    pub fn on_stop_began(&mut self, end: End) {
        self.stopping.insert((end.node, end.run));
    }

    /// The watch of the run at `me` delivered something, and the run applied it; `ready`
    /// are its ready connections with their peer's RID and generation. None may be of
    /// another run than the one the watch names current for that RID: a descriptor of a
    /// new run closes the connections of the run it replaces at once (MISSION F3).
    pub fn check_current_runs(&mut self, me: End, ready: &[(NetConn, String, u64)]) {
        for (conn, rid, generation) in ready {
            let key = (me.node, me.run, rid.clone());
            let Some(current) = self.delivered_current.get(&key).copied().flatten() else {
                continue;
            };
            if current != *generation {
                let run = |g: u64| self.generations.get(&g).map_or(0, |r| r.1);
                let detail = format!(
                    "host {} kept {conn} to run {} of {rid} (g{generation:x}) ready after its watch named run {} (g{current:x}) current",
                    me.node,
                    run(*generation),
                    run(current)
                );
                self.violation("replaced_run_leaves_ready", detail);
            }
        }
    }

    /// Host `node` took `conn` out of ready.
    pub fn on_leave_ready(&mut self, _node: NodeIx, _conn: NetConn, _now: Duration) {}

    /// Host `node` failed `conn` for its deadline at `now`; `last` is the liveness evidence
    /// it had (last valid ACK or ready), `held` the last instant the network held the
    /// connection's frames.
    pub fn on_deadline(
        &mut self,
        node: NodeIx,
        conn: NetConn,
        last: Option<Duration>,
        now: Duration,
        held: Option<Duration>,
    ) {
        self.stats.deadlines += 1;
        if let Some(last) = last {
            if now < last + PEER_DEADLINE {
                let detail = format!(
                    "host {node} failed {conn} for its deadline {:?} after its last evidence",
                    now - last
                );
                self.violation("deadline_not_early", detail);
            }
        }
        // A link that nothing held must not time out: probes every 5 s answered within
        // milliseconds never leave 15 s without an ACK.
        let window = PEER_DEADLINE + Duration::from_secs(1);
        let touched = held.is_some_and(|h| h + window >= now);
        if !touched {
            let detail = format!(
                "host {node} failed {conn} for its deadline, but the network never held it"
            );
            self.violation("no_false_deadline", detail);
        }
    }

    /// Host `node` has a ready link whose last evidence was at `last`: it must not stay ready
    /// past 15 s plus the coalescing window.
    pub fn check_ready(&mut self, node: NodeIx, conn: NetConn, last: Duration, now: Duration) {
        let limit = last + PEER_DEADLINE + COALESCE_WINDOW;
        if now > limit {
            let detail = format!(
                "host {node} kept {conn} ready {:?} after its last valid ACK",
                now - last
            );
            self.violation("frozen_link_leaves_ready", detail);
        }
    }

    /// The application of the run at `me` received a MESSAGE with `payload` from `conn`.
    pub fn on_app_message(&mut self, me: End, conn: NetConn, payload: &[u8], _now: Duration) {
        let node = me.node;
        self.stats.messages += 1;
        if self.stale.contains_key(&(node, me.run, conn)) {
            let detail = format!(
                "host {node}'s application got a MESSAGE from {conn}, whose first record was not a HELLO"
            );
            self.violation("stale_records_refused", detail);
        }
        match tagged(payload, b"msg:") {
            Some(uid) if self.sent.contains(&uid) => {
                if !self.delivered.insert(uid) {
                    self.violation(
                        "messages_at_most_once",
                        format!("message m{uid} delivered twice"),
                    );
                }
            }
            _ => {
                let detail = format!(
                    "host {node}'s application got {payload:02x?}, which no application sent"
                );
                self.violation("only_application_records_reach_the_application", detail);
            }
        }
    }

    /// A publisher published record `uid`.
    pub fn on_publish(&mut self, uid: u64) {
        self.published.insert(uid);
    }

    /// Host `node`'s application received a fanout record from host `publisher`: `seq`, after
    /// `last` from the same publisher run.
    pub fn on_fanout_record(
        &mut self,
        node: NodeIx,
        publisher: NodeIx,
        last: Option<u64>,
        seq: u64,
        payload: &[u8],
    ) {
        self.stats.fanout_records += 1;
        let ours = payload
            .strip_prefix(b"pub:")
            .map(uid_of)
            .is_some_and(|u| self.published.contains(&u));
        if !ours {
            let detail = format!(
                "host {node}'s application got fanout bytes {payload:02x?} from host {publisher}, which no publisher published"
            );
            self.violation("only_application_records_reach_the_application", detail);
        }
        if let Some(last) = last {
            if seq <= last {
                let detail =
                    format!("host {node} got record {seq} of host {publisher} after record {last}");
                self.violation("fanout_in_order_at_most_once", detail);
            }
        }
    }

    /// Host `node`'s watch of host `publisher` went silent at `now`; `since` is its last
    /// valid receipt as the watch saw it (or the socket's creation), `delivered` the last
    /// instant the socket really received a well-formed beacon or record.
    pub fn on_silence(
        &mut self,
        node: NodeIx,
        publisher: NodeIx,
        since: Duration,
        now: Duration,
        delivered: Option<Duration>,
    ) {
        self.stats.silences += 1;
        if now < since + PEER_DEADLINE {
            let detail = format!(
                "host {node}'s watch of host {publisher} went silent {:?} after its last receipt",
                now - since
            );
            self.violation("silence_not_early", detail);
        }
        // A message that arrived after the last receipt the watch counted and before its
        // deadline should have moved the deadline. (One arriving in the very instant the
        // deadline passed is judged after the deadline, as the watch does.)
        if let Some(at) = delivered.filter(|&at| at > since && at < since + PEER_DEADLINE) {
            let detail = format!(
                "host {node}'s watch of host {publisher} went silent, but its socket received a beacon or record {:?} before",
                now - at
            );
            self.violation("no_false_silence", detail);
        }
    }

    /// Host `node` has a ready watch of host `publisher` whose last receipt was at `last`: it
    /// must not stay ready past 15 s plus the coalescing window.
    pub fn check_watch(&mut self, node: NodeIx, publisher: NodeIx, last: Duration, now: Duration) {
        if now > last + PEER_DEADLINE + COALESCE_WINDOW {
            let detail = format!(
                "host {node} kept its watch of host {publisher} ready {:?} after its last receipt",
                now - last
            );
            self.violation("silent_publisher_leaves_ready", detail);
        }
    }

    /// At the end: every call completed exactly once.
    pub fn check_end(&mut self) {
        let missing: Vec<u64> = self
            .calls
            .iter()
            .filter(|(_, c)| c.kind.is_some() && c.completions == 0 && !c.caller_died)
            .map(|(&u, _)| u)
            .collect();
        for uid in missing {
            self.violation("exactly_once", format!("call u{uid} never completed"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: End = End { node: 0, run: 1 };

    /// Two runs of host 1 (RID n001): run 1 with generation 0x11, run 2 with 0x22.
    fn two_runs() -> Truth {
        let mut t = Truth::default();
        t.on_start(1, 1, 0x11);
        t.on_start(1, 2, 0x22);
        t
    }

    #[test]
    fn s1_f3_a_ready_run_other_than_the_watchs_current_one_breaks_the_fence() {
        let mut t = two_runs();
        t.on_current(A, "n001", Some(0x22));
        t.on_ready(A, "n001", 0x22, true);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        // The older run while the watch names the newer: both invariants see it.
        t.on_ready(A, "n001", 0x11, true);
        let seen: Vec<&str> = t.violations.iter().map(|v| v.invariant).collect();
        assert_eq!(seen, ["no_older_generation", "store_fence_holds"]);
        // A newer run under the older fence breaks the fence too.
        let mut t = two_runs();
        t.on_current(A, "n001", Some(0x11));
        t.on_ready(A, "n001", 0x22, true);
        let seen: Vec<&str> = t.violations.iter().map(|v| v.invariant).collect();
        assert_eq!(seen, ["store_fence_holds"]);
    }

    /// A REJECT Protocol of the acceptor, as the simulated glue sends one.
    fn reject(reason: RejectReason) -> Record {
        Record::Reject(zmesh::proto::wire::Reject {
            reason,
            detail: zmesh::proto::wire::Detail::default(),
        })
    }

    fn seen(t: &Truth) -> Vec<&'static str> {
        t.violations.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn s1_w3_l6_a_stale_first_record_is_refused_once_and_its_connection_never_counts() {
        let k = NetConn(7);
        // Refused with one REJECT Protocol: the rule holds.
        let mut t = Truth::default();
        t.on_stale_first(A, k, Kind::Probe, true);
        t.on_wire(A, k, &reject(RejectReason::Protocol));
        t.check_stale_answered(A, k);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        // Anything more on it, its readiness or a MESSAGE from it to the application: not.
        t.on_wire(A, k, &reject(RejectReason::Protocol));
        t.on_conn_ready(A, k, false);
        t.on_app_message(A, k, &message_of(1), Duration::ZERO);
        assert_eq!(
            seen(&t),
            [
                "stale_records_refused",
                "stale_records_refused",
                "stale_records_refused",
                "only_application_records_reach_the_application"
            ]
        );
        // Not refused while the connection was open; another reason than Protocol.
        let mut t = Truth::default();
        t.on_stale_first(A, k, Kind::Message, true);
        t.check_stale_answered(A, k);
        t.on_stale_first(A, NetConn(8), Kind::Request, true);
        t.on_wire(A, NetConn(8), &reject(RejectReason::Draining));
        assert_eq!(seen(&t), ["stale_records_refused", "stale_records_refused"]);
        // A REJECT or CLOSE gets no answer; a connection already closed cannot get one.
        let mut t = Truth::default();
        t.on_stale_first(A, k, Kind::Close, true);
        t.check_stale_answered(A, k);
        t.on_stale_first(A, NetConn(8), Kind::Probe, false);
        t.check_stale_answered(A, NetConn(8));
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.on_wire(A, k, &reject(RejectReason::Protocol));
        assert_eq!(seen(&t), ["stale_records_refused"]);
    }

    #[test]
    fn s1_f6_c4_a_run_whose_graceful_stop_began_admits_no_connection() {
        let mut t = Truth::default();
        t.on_conn_ready(A, NetConn(1), false);
        t.on_stop_began(A);
        // Its own dial answered late may still become ready; an accepted connection not.
        t.on_conn_ready(A, NetConn(2), true);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.on_conn_ready(A, NetConn(3), false);
        assert_eq!(seen(&t), ["no_admission_while_draining"]);
        // The host's next run admits again.
        t.on_conn_ready(End { node: 0, run: 2 }, NetConn(4), false);
        assert_eq!(t.violations.len(), 1);
    }

    #[test]
    fn s1_f3_a_connection_of_a_replaced_run_leaves_ready_with_the_descriptor() {
        let mut t = two_runs();
        let old = (NetConn(1), "n001".to_owned(), 0x11);
        let new = (NetConn(2), "n001".to_owned(), 0x22);
        // No current descriptor: nothing to tell runs apart by.
        t.check_current_runs(A, std::slice::from_ref(&old));
        t.on_current(A, "n001", Some(0x11));
        t.check_current_runs(A, std::slice::from_ref(&old));
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        // The watch names run 2: only its connection may stay ready.
        t.on_current(A, "n001", Some(0x22));
        t.check_current_runs(A, std::slice::from_ref(&new));
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.check_current_runs(A, &[new, old]);
        assert_eq!(seen(&t), ["replaced_run_leaves_ready"]);
        // Gone from the store: a ready connection stays (MISSION F5).
        let mut t = two_runs();
        t.on_current(A, "n001", None);
        t.check_current_runs(A, &[(NetConn(1), "n001".to_owned(), 0x11)]);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
    }

    #[test]
    fn s1_f3_without_a_current_descriptor_runs_are_not_told_apart() {
        // Generations compare for equality only: once the watch says the descriptor went
        // away, a node in automatic mode cannot tell an older run from a newer one.
        let mut t = two_runs();
        t.on_current(A, "n001", Some(0x22));
        t.on_ready(A, "n001", 0x22, true);
        t.on_current(A, "n001", None);
        t.on_ready(A, "n001", 0x11, true);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        // In manual mode runs follow each other on a host: an older one is never admitted
        // after a newer one.
        let mut t = two_runs();
        t.on_ready(A, "n001", 0x22, false);
        t.on_ready(A, "n001", 0x11, false);
        let seen: Vec<&str> = t.violations.iter().map(|v| v.invariant).collect();
        assert_eq!(seen, ["no_older_generation"]);
    }
}
