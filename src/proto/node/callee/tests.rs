//! Unit tests of [`super::Serving`]: the rules the core decides alone, over a served channel
//! of the tests' own and a manual clock.

use super::*;
use crate::proto::node::keys::{CallKey, Key, LinkKey};
use crate::proto::wire::{Name, Semantics as Pin};
use crate::proto::ConnId;

/// The core as the tests drive it: a job is the caller's call id, an item's reply is `()`.
type Core = Serving<u64, (), CallKey>;

/// A served channel "c": method "set" (an idempotent command, conflating where
/// `conflate`), "get" (a query) and "fire" (a non-repeatable command); nothing else.
/// Under keyed execution call 99's key function fails; the others are keyed by parity.
struct Chan {
    execution: ExecutionKind,
    conflate: bool,
    mailbox: usize,
    denied: bool,
}

impl Chan {
    fn new(execution: ExecutionKind, mailbox: usize) -> Chan {
        Chan {
            execution,
            conflate: false,
            mailbox,
            denied: false,
        }
    }
}

impl ServedChannel<CallKey> for Chan {
    type Call = u64;
    type Job = u64;

    fn plan(&self, method: &str) -> Option<MethodPlan> {
        let semantics = match method {
            "set" => Semantics::IdempotentCommand,
            "get" => Semantics::Query,
            "fire" => Semantics::NonRepeatableCommand,
            _ => return None,
        };
        Some(MethodPlan {
            semantics: Some(semantics),
            shape: CallShape::Unary,
            execution: self.execution,
            conflate: self.conflate && method == "set",
            stops_on_cancel: false,
        })
    }

    fn mailbox(&self) -> usize {
        self.mailbox
    }

    fn authorize(&self, _: &str, _: &str, _: Option<Semantics>) -> Result<(), Refusal> {
        if !self.denied {
            return Ok(());
        }
        Err(Refusal {
            code: ReplyCode::Forbidden,
            message: "not you".to_owned(),
        })
    }

    fn open(&self, _: From<CallKey>, req: &wire::Request, _: Instant) -> u64 {
        req.call_id.get()
    }

    fn key(&self, call: &u64) -> Result<Option<String>, Refusal> {
        if *call == 99 {
            return Err(Refusal {
                code: ReplyCode::InvalidParams,
                message: "no key in these arguments".to_owned(),
            });
        }
        Ok(Some((call % 2).to_string()))
    }

    fn job(&self, _: ServeId, call: u64, _: &MethodPlan) -> u64 {
        call
    }
}

fn conn(n: u64) -> CallKey {
    (LinkKey::from_index(0), ConnId(n))
}

fn from(n: u64) -> From<CallKey> {
    From {
        key: conn(n),
        rid: String::new(),
        generation: 1,
        credit: false,
    }
}

fn request(call_id: u64, method: &str, pin: Pin, ttl_ms: Option<u64>) -> wire::Request {
    let name = |s: &str| Name::new(s.to_owned()).expect("a valid name");
    wire::Request {
        call_id: NonZeroU64::new(call_id).expect("a call id"),
        ttl_ms: ttl_ms.and_then(NonZeroU64::new),
        semantics: pin,
        channel: name("c"),
        method: name(method),
        idempotency_key: None,
        payload: Bytes::new(),
    }
}

/// Call `call_id` of `method` on connection `n`, its ACCEPT sent if it was taken.
/// Returns whether it was taken.
fn call(core: &mut Core, chan: &Chan, n: u64, call_id: u64, method: &str, now: Instant) -> bool {
    let req = request(call_id, method, Pin::Undeclared, None);
    match core.handle_request(Some(chan), from(n), req, now) {
        Some(accepting) => {
            core.handle_accept_sent(accepting, true, now);
            true
        }
        None => false,
    }
}

fn runs(core: &mut Core) -> Vec<(ServeId, u64)> {
    std::iter::from_fn(|| core.poll_run()).collect()
}

fn answers(core: &mut Core, now: Instant) -> Vec<(u64, ReplyCode)> {
    std::iter::from_fn(|| core.poll_answer(now))
        .map(|a| (a.reply.call_id.get(), a.reply.code))
        .collect()
}

fn events(core: &mut Core) -> Vec<Event> {
    std::iter::from_fn(|| core.poll_event()).collect()
}

/// MISSION K4: a caller that goes away does not make others `Busy`. Its calls waiting in
/// a queue leave it when its connection is lost, so their mailbox places are free at
/// once and none of them runs later. Fails if the orphaned-waiting rule is dropped (the
/// third call is refused `Busy`, and the queue moves to a call nobody waits for).
#[test]
fn k4_a_lost_caller_frees_the_mailbox_places_its_waiting_calls_held() {
    let t0 = Instant::now();
    let chan = Chan::new(ExecutionKind::Serial, 1);
    let mut core = Core::default();
    assert!(call(&mut core, &chan, 1, 1, "set", t0));
    let running = runs(&mut core);
    assert_eq!(running.iter().map(|r| r.1).collect::<Vec<_>>(), [1]);
    assert!(
        call(&mut core, &chan, 2, 2, "set", t0),
        "waits behind call 1"
    );
    assert!(runs(&mut core).is_empty());

    core.handle_connection_lost(conn(2), t0);
    assert!(
        events(&mut core).is_empty(),
        "no handler of that connection runs"
    );
    assert!(
        call(&mut core, &chan, 3, 3, "set", t0),
        "the lost caller's place is free"
    );
    assert_eq!(events(&mut core), []);
    assert_eq!(answers(&mut core, t0), [], "nobody was refused Busy");

    let (id, _) = running[0];
    core.handle_done(id, ReplyCode::Ok, Bytes::new(), false, t0);
    assert_eq!(answers(&mut core, t0), [(1, ReplyCode::Ok)]);
    let next: Vec<u64> = runs(&mut core).iter().map(|r| r.1).collect();
    assert_eq!(next, [3], "the call of the lost caller never runs");
    assert_eq!(core.in_flight(), 1);
}

/// MISSION K4, C6: a newer call of a conflating method takes a waiting one's place (that
/// one is answered `Superseded`, after its ACCEPT: it did not run); a full mailbox
/// refuses `Busy`; a call whose ttl ran out while it waited is refused `Timeout` and
/// never runs; the answers come out in the order they were decided.
#[test]
fn k4_c6_superseded_busy_and_ttl_refusals_never_run() {
    let t0 = Instant::now();
    let mut chan = Chan::new(ExecutionKind::Serial, 2);
    chan.conflate = true;
    let mut core = Core::default();
    assert!(call(&mut core, &chan, 1, 1, "set", t0));
    let running = runs(&mut core);
    assert!(call(&mut core, &chan, 1, 2, "set", t0));
    assert!(
        call(&mut core, &chan, 1, 3, "set", t0),
        "takes call 2's place"
    );
    assert_eq!(events(&mut core), [Event::Superseded]);
    assert_eq!(answers(&mut core, t0), [(2, ReplyCode::Superseded)]);

    let req = request(4, "get", Pin::Undeclared, Some(10));
    let taken = core.handle_request(Some(&chan), from(1), req, t0);
    core.handle_accept_sent(taken.expect("call 4 waits"), true, t0);
    assert!(
        !call(&mut core, &chan, 1, 5, "get", t0),
        "the mailbox holds two"
    );
    assert_eq!(events(&mut core), [Event::Busy]);
    assert_eq!(answers(&mut core, t0), [(5, ReplyCode::Busy)]);

    let later = t0 + Duration::from_millis(20);
    core.handle_done(running[0].0, ReplyCode::Ok, Bytes::new(), false, later);
    let next: Vec<u64> = runs(&mut core).iter().map(|r| r.1).collect();
    assert_eq!(next, [3]);
    assert_eq!(
        answers(&mut core, later),
        [(1, ReplyCode::Ok), (4, ReplyCode::Timeout)]
    );
    assert!(runs(&mut core).is_empty(), "call 4 never runs");
}

/// MISSION K1, K5, K6: every refusal before ACCEPT is answered and runs nothing: no such
/// channel, no such method, a method more dangerous to repeat than the caller's pin, the
/// authorizer, the key function; a BATCH over the receiver's limit is refused call by
/// call, and one within it is handed back whole.
#[test]
fn k1_k5_refusals_before_accept_are_answered_and_never_run() {
    let t0 = Instant::now();
    let mut core = Core::default();
    let chan = Chan::new(ExecutionKind::Keyed, 10);
    let pinned = |id, method, pin| request(id, method, pin, None);
    let none: Option<&Chan> = None;
    assert!(core
        .handle_request(none, from(1), pinned(1, "set", Pin::Undeclared), t0)
        .is_none());
    let cases = [
        pinned(2, "nope", Pin::Undeclared),
        pinned(3, "fire", Pin::Query),
        pinned(99, "set", Pin::Undeclared),
    ];
    for req in cases {
        assert!(core.handle_request(Some(&chan), from(1), req, t0).is_none());
    }
    let denied = Chan {
        denied: true,
        ..Chan::new(ExecutionKind::Parallel, 10)
    };
    let req = pinned(4, "get", Pin::Query);
    assert!(core
        .handle_request(Some(&denied), from(1), req, t0)
        .is_none());
    let refused: Vec<(u64, ReplyCode, Bytes)> = std::iter::from_fn(|| core.poll_answer(t0))
        .map(|a| (a.reply.call_id.get(), a.reply.code, a.reply.payload))
        .collect();
    let codes: Vec<(u64, ReplyCode)> = refused.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        codes,
        [
            (1, ReplyCode::ClassNotFound),
            (2, ReplyCode::MethodNotFound),
            (3, ReplyCode::IncompatibleVersion),
            (99, ReplyCode::InvalidParams),
            (4, ReplyCode::Forbidden),
        ]
    );
    assert_eq!(refused[3].2, "no key in these arguments");
    assert_eq!(refused[4].2, "c.get: not you; not run");
    assert!(runs(&mut core).is_empty());
    assert_eq!(core.in_flight(), 0);

    let batch = |n: u64| (1..=n).map(|id| pinned(id, "get", Pin::Query)).collect();
    assert_eq!(core.handle_batch(conn(1), batch(2)).len(), 2);
    let over = MAX_INCOMING_BATCH_CALLS as u64 + 1;
    assert!(core.handle_batch(conn(1), batch(over)).is_empty());
    let answered = answers(&mut core, t0);
    assert_eq!(answered.len() as u64, over, "no call of it is dropped");
    assert!(answered.iter().all(|a| a.1 == ReplyCode::InvalidParams));
}

/// MISSION C4: once the drain begins new calls are refused `Unavailable` (did not run);
/// a call still running at the bound is answered `Unavailable` by the core, its handler
/// hears that nobody waits for it, and its later result is dropped.
#[test]
fn c4_the_drain_refuses_new_calls_and_cuts_running_ones_at_its_bound() {
    let t0 = Instant::now();
    let chan = Chan::new(ExecutionKind::Parallel, 10);
    let mut core = Core::default();
    assert!(call(&mut core, &chan, 1, 1, "get", t0));
    let (id, _) = runs(&mut core)[0];
    core.begin_drain(Duration::from_secs(1), t0);
    assert!(!core.is_drained());
    assert!(!call(&mut core, &chan, 1, 2, "get", t0));
    assert_eq!(answers(&mut core, t0), [(2, ReplyCode::Unavailable)]);

    let bound = t0 + Duration::from_secs(1);
    assert_eq!(core.poll_timeout(), Some(bound));
    core.handle_timeout(bound);
    assert_eq!(answers(&mut core, bound), [(1, ReplyCode::Unavailable)]);
    assert_eq!(
        events(&mut core),
        [Event::CallersGone {
            calls: vec![id],
            cause: Cause::Answered,
        }]
    );
    core.handle_done(id, ReplyCode::Ok, Bytes::new(), false, bound);
    assert_eq!(answers(&mut core, bound), [], "answered once");
    assert!(core.is_drained());
}
