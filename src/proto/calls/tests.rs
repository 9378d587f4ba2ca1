//! Unit tests of the call tables: the error table, the ttl on the wire, the inclusive
//! deadline, input judgement and the serve-side rules. Scenario and property tests over the
//! public API are in `tests/calls.rs`. Each test names the MISSION requirement it proves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::proto::wire::ReplyCode;
use crate::proto::ConnId;

const A: ConnId = ConnId(1);
const B: ConnId = ConnId(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

fn one_completion(table: &mut CallTable<ConnId>) -> (CallId, Result<Completion, CallError>) {
    let done = table.poll_completion().expect("a completion");
    assert_eq!(table.poll_completion(), None, "exactly one completion");
    done
}

/// C3, K6: the documented table, row by row: variant -> may_have_run and code.
#[test]
fn c3_k6_error_table_may_have_run_and_codes() {
    let rows: Vec<(CallError, bool, &str)> = vec![
        (CallError::NoRegistration, false, "NotFound"),
        (CallError::NoReadyPeer, false, "Unavailable"),
        (CallError::TransportRefused, false, "TransportError"),
        (
            CallError::OutcomeUnknown { phase: Phase::Sent },
            true,
            "UnknownOutcome",
        ),
        (
            CallError::OutcomeUnknown {
                phase: Phase::Accepted,
            },
            true,
            "UnknownOutcome",
        ),
        (
            CallError::Timeout {
                refused_by_server: false,
            },
            true,
            "Timeout",
        ),
        (
            CallError::Timeout {
                refused_by_server: true,
            },
            false,
            "Timeout",
        ),
        (CallError::Cancelled { sent: false }, false, "Cancelled"),
        (CallError::Cancelled { sent: true }, true, "Cancelled"),
        (CallError::Shutdown { sent: false }, false, "Unavailable"),
        (CallError::Shutdown { sent: true }, true, "Unavailable"),
        (
            CallError::Unavailable { accepted: false },
            false,
            "Unavailable",
        ),
        (
            CallError::Unavailable { accepted: true },
            true,
            "Unavailable",
        ),
        (
            CallError::ItemOutOfOrder {
                expected: 2,
                got: 4,
            },
            true,
            "UnknownOutcome",
        ),
        (
            CallError::InvalidArgument { reason: "x".into() },
            false,
            "InvalidParams",
        ),
        (
            CallError::UndecodableResult { reason: "x".into() },
            true,
            "UndecodableResult",
        ),
        (
            CallError::StreamOverrun { buffered: 1024 },
            true,
            "UnknownOutcome",
        ),
    ];
    for (err, run, code) in rows {
        assert_eq!(may_have_run(&err), run, "{err:?}");
        assert_eq!(err.may_have_run(), run, "{err:?}");
        assert_eq!(err.code(), code, "{err:?}");
        assert!(!err.to_string().is_empty());
    }
    let ran = [
        RemoteCode::Exception,
        RemoteCode::UnknownOutcome,
        RemoteCode::Unavailable,
    ];
    for &code in ReplyCode::ALL {
        let Some(remote) = RemoteCode::from_reply(code) else {
            assert_eq!(code, ReplyCode::Ok);
            continue;
        };
        assert_eq!(remote.to_reply(), code);
        assert_eq!(remote.name(), format!("{code:?}"), "K6 name of {code:?}");
        let err = CallError::Remote {
            code: remote,
            message: String::new(),
        };
        assert_eq!(may_have_run(&err), ran.contains(&remote), "{remote:?}");
        assert_eq!(err.code(), remote.name());
    }
}

/// C3, C6, C4: a REPLY maps to the dedicated variants for Timeout and Unavailable, to
/// `Remote` otherwise, with the message decoded leniently.
#[test]
fn c3_reply_codes_map_to_errors() {
    assert_eq!(CallError::from_reply(ReplyCode::Ok, b"", true), None);
    assert_eq!(
        CallError::from_reply(ReplyCode::Timeout, b"late", true),
        Some(CallError::Timeout {
            refused_by_server: true
        })
    );
    assert_eq!(
        CallError::from_reply(ReplyCode::Unavailable, b"", false),
        Some(CallError::Unavailable { accepted: false })
    );
    assert_eq!(
        CallError::from_reply(ReplyCode::Unavailable, b"", true),
        Some(CallError::Unavailable { accepted: true })
    );
    assert_eq!(
        CallError::from_reply(ReplyCode::Busy, b"full \xff", false),
        Some(CallError::Remote {
            code: RemoteCode::Busy,
            message: "full \u{fffd}".to_owned()
        })
    );
}

/// C6: the wire ttl is a duration in whole ms, shortened by the refusal margin, never 0
/// for a real deadline; no ttl and zero are "no deadline".
#[test]
fn c6_ttl_on_wire() {
    assert_eq!(ttl_on_wire(None), None);
    assert_eq!(ttl_on_wire(Some(Duration::ZERO)), None);
    assert_eq!(ttl_on_wire(Some(Duration::from_micros(500))), Some(nz(1)));
    assert_eq!(ttl_on_wire(Some(ms(1))), Some(nz(1)));
    assert_eq!(ttl_on_wire(Some(ms(100))), Some(nz(50)));
    assert_eq!(ttl_on_wire(Some(ms(500))), Some(nz(250)));
    assert_eq!(ttl_on_wire(Some(ms(1_500))), Some(nz(1_250)));
    assert_eq!(ttl_on_wire(Some(Duration::from_secs(30))), Some(nz(29_750)));
    assert_eq!(
        ttl_on_wire(Some(Duration::MAX)),
        Some(nz(u64::MAX)),
        "saturates instead of overflowing"
    );
}

/// C1: ids are issued from 1 and never reused; inputs for a completed call are late, for a
/// never-issued id unknown, and both change nothing.
#[test]
fn c1_ids_are_sequential_and_late_or_unknown_inputs_are_counted() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let first = table.start(A, None, t0);
    let second = table.start(A, None, t0);
    assert_eq!(first.get().get(), 1);
    assert_eq!(second.get().get(), 2);
    assert_eq!(table.handle_cancel(first, t0), Disposition::Applied);
    let _ = one_completion(&mut table);
    let never = CallId(nz(99));
    assert_eq!(table.handle_accept(first, A, t0), Disposition::Late);
    assert_eq!(
        table.handle_reply(first, A, ReplyCode::Ok, Bytes::new(), t0),
        Disposition::Late
    );
    assert_eq!(
        table.handle_item(first, A, 0, Bytes::new(), t0),
        Disposition::Late
    );
    assert_eq!(table.handle_sent(first, t0), Disposition::Late);
    assert_eq!(table.handle_cancel(first, t0), Disposition::Late);
    assert_eq!(table.handle_accept(never, A, t0), Disposition::Unknown);
    assert_eq!(
        table.handle_reply(never, A, ReplyCode::Ok, Bytes::new(), t0),
        Disposition::Unknown
    );
    assert_eq!(table.poll_completion(), None);
    let stats = *table.stats();
    assert_eq!(stats.late_accepts, 1);
    assert_eq!(stats.late_replies, 1);
    assert_eq!(stats.late_items, 1);
    assert_eq!(stats.late_send_reports, 1);
    assert_eq!(stats.late_cancels, 1);
    assert_eq!(stats.unknown_ids, 2);
    assert_eq!(stats.started, 2);
    assert_eq!(stats.completed, 1);
    assert_eq!(table.pending(), 1);
}

/// C1, C6: the deadline runs from the hand-over, is inclusive, and wins over a REPLY at the
/// same instant whatever order the shell sees them in.
#[test]
fn c6_deadline_is_inclusive_and_runs_from_the_hand_over() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = table.start(A, Some(ms(1_000)), t0);
    assert_eq!(table.poll_timeout(), None, "no timer before the frame left");
    let _ = table.handle_sent(id, t0 + ms(10));
    assert_eq!(table.deadline(id), Some(t0 + ms(1_010)));
    assert_eq!(table.poll_timeout(), Some(t0 + ms(1_010)));
    table.handle_timeout(t0 + ms(1_010) - Duration::from_nanos(1));
    assert!(table.is_pending(id));
    assert_eq!(
        table.handle_reply(id, A, ReplyCode::Ok, Bytes::new(), t0 + ms(1_010)),
        Disposition::Late,
        "the deadline at the same instant was applied first"
    );
    assert_eq!(
        one_completion(&mut table),
        (
            id,
            Err(CallError::Timeout {
                refused_by_server: false
            })
        )
    );
    assert_eq!(table.poll_timeout(), None);
}

/// C2: send reports and ACCEPTs are judged: a repeat or contradiction is a duplicate, an
/// ACCEPT from another connection does not pin anything.
#[test]
fn c2_inputs_are_judged_per_connection_and_state() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = table.start(A, None, t0);
    assert_eq!(table.handle_accept(id, B, t0), Disposition::OtherConnection);
    assert_eq!(table.state(id), Some(CallState::Issued));
    assert_eq!(table.handle_sent(id, t0), Disposition::Applied);
    assert_eq!(table.handle_sent(id, t0), Disposition::Duplicate);
    assert_eq!(table.handle_send_failed(id, t0), Disposition::Duplicate);
    assert_eq!(table.state(id), Some(CallState::Sent));
    assert_eq!(table.handle_accept(id, A, t0), Disposition::Applied);
    assert_eq!(table.handle_accept(id, A, t0), Disposition::Duplicate);
    assert_eq!(
        table.handle_reply(id, B, ReplyCode::Ok, Bytes::new(), t0),
        Disposition::OtherConnection
    );
    assert_eq!(
        table.handle_item(id, B, 0, Bytes::new(), t0),
        Disposition::OtherConnection
    );
    assert_eq!(table.state(id), Some(CallState::Accepted));
    assert_eq!(table.poll_completion(), None);
    let stats = table.stats();
    assert_eq!(stats.other_connection, 3);
    assert_eq!(stats.duplicate_send_reports, 2);
    assert_eq!(stats.duplicate_accepts, 1);
}

/// C1: items are delivered in order and counted in the completion; an item before the
/// ACCEPT counts as the ACCEPT.
#[test]
fn c1_stream_items_in_order_then_completion() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = table.start(A, None, t0);
    let _ = table.handle_sent(id, t0);
    for seq in 0..3 {
        let payload = Bytes::from(vec![seq as u8]);
        assert_eq!(
            table.handle_item(id, A, seq, payload, t0),
            Disposition::Applied
        );
    }
    assert_eq!(table.state(id), Some(CallState::Accepted));
    assert_eq!(table.stats().items_before_accept, 1);
    let _ = table.handle_reply(id, A, ReplyCode::Ok, Bytes::from_static(b"end"), t0);
    for seq in 0..3 {
        let item = table.poll_item().expect("item");
        assert_eq!(
            (item.id, item.seq, item.payload.to_vec()),
            (id, seq, vec![seq as u8])
        );
    }
    assert_eq!(table.poll_item(), None);
    assert_eq!(
        one_completion(&mut table),
        (
            id,
            Ok(Completion {
                payload: Bytes::from_static(b"end"),
                items: 3
            })
        )
    );
}

/// C1: a repeated or skipped item number breaks the stream: the call fails at once.
#[test]
fn c1_repeated_or_skipped_item_breaks_the_stream() {
    let t0 = Instant::now();
    for (bad, expected) in [(0_u64, 1_u64), (2, 1)] {
        let mut table = CallTable::new();
        let id = table.start(A, None, t0);
        let _ = table.handle_sent(id, t0);
        let _ = table.handle_accept(id, A, t0);
        let _ = table.handle_item(id, A, 0, Bytes::new(), t0);
        assert_eq!(
            table.handle_item(id, A, bad, Bytes::new(), t0),
            Disposition::Applied
        );
        assert_eq!(
            one_completion(&mut table),
            (id, Err(CallError::ItemOutOfOrder { expected, got: bad }))
        );
        assert_eq!(table.stats().items_out_of_order, 1);
        assert_eq!(
            table.handle_item(id, A, expected, Bytes::new(), t0),
            Disposition::Late
        );
    }
}

/// C3, C6: a server refusal for ttl and a drain refusal are "did not run"; a drain cut
/// after the ACCEPT is "may have run".
#[test]
fn c3_reply_refusals_are_judged_with_the_accept() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let refused = table.start(A, None, t0);
    let cut = table.start(A, None, t0);
    for id in [refused, cut] {
        let _ = table.handle_sent(id, t0);
    }
    let _ = table.handle_accept(cut, A, t0);
    let _ = table.handle_reply(refused, A, ReplyCode::Unavailable, Bytes::new(), t0);
    let _ = table.handle_reply(cut, A, ReplyCode::Unavailable, Bytes::new(), t0);
    let (_, first) = table.poll_completion().unwrap();
    let (_, second) = table.poll_completion().unwrap();
    assert_eq!(first, Err(CallError::Unavailable { accepted: false }));
    assert_eq!(second, Err(CallError::Unavailable { accepted: true }));
}

/// C4, C6: the serve side: duplicates ignored, dispatch judges the ttl, a handler's own
/// Timeout is sent as UnknownOutcome, items are numbered.
#[test]
fn c4_c6_serve_rules() {
    let t0 = Instant::now();
    let mut serve = ServeTable::new();
    let Admission::Accept(id) =
        serve.handle_request(A, nz(7), Some(nz(100)), CallShape::Stream, t0)
    else {
        panic!("accepted");
    };
    assert_eq!(
        serve.handle_request(A, nz(7), None, CallShape::Unary, t0),
        Admission::Duplicate
    );
    assert!(matches!(
        serve.handle_request(B, nz(7), None, CallShape::Unary, t0),
        Admission::Accept(_)
    ));
    assert_eq!(serve.stats().duplicates, 1);
    assert_eq!(serve.handle_item(id, t0), None, "not running yet");
    assert_eq!(serve.handle_dispatch(id, t0 + ms(99)), Dispatch::Run);
    assert_eq!(serve.handle_dispatch(id, t0 + ms(99)), Dispatch::Skip);
    assert_eq!(
        serve.poll_timeout(),
        Some(t0 + ms(100)),
        "a running call's ttl only signals its handler"
    );
    assert_eq!(serve.handle_item(id, t0 + ms(500)), Some(0));
    assert_eq!(
        serve.poll_overdue(),
        Some(id),
        "reported once, still in hand"
    );
    assert_eq!(serve.poll_overdue(), None);
    assert_eq!(serve.poll_timeout(), None);
    assert_eq!(serve.handle_item(id, t0 + ms(500)), Some(1));
    assert_eq!(
        serve.handle_done(id, ReplyCode::Timeout, t0 + ms(600)),
        Some(ReplyCode::UnknownOutcome)
    );
    assert_eq!(serve.handle_done(id, ReplyCode::Ok, t0 + ms(600)), None);
    assert_eq!(serve.stats().handler_timeouts_rewritten, 1);
    assert_eq!(serve.stats().dropped_results, 1);

    let Admission::Accept(late) =
        serve.handle_request(A, nz(8), Some(nz(100)), CallShape::Unary, t0)
    else {
        panic!("accepted");
    };
    assert_eq!(
        serve.handle_dispatch(late, t0 + ms(100)),
        Dispatch::Refuse(ReplyCode::Timeout),
        "inclusive: refused exactly at arrival + ttl"
    );
    assert_eq!(
        serve.poll_transmit(),
        None,
        "answered through dispatch, once"
    );
    assert_eq!(serve.stats().refused_timeout, 1);
}

/// C4: a drain with a zero bound cuts every call in hand at once and is drained at once;
/// a second begin_drain changes nothing; the report comes once.
#[test]
fn c4_zero_bound_drain_cuts_at_once() {
    let t0 = Instant::now();
    let mut serve = ServeTable::new();
    let Admission::Accept(id) = serve.handle_request(A, nz(1), None, CallShape::Unary, t0) else {
        panic!("accepted");
    };
    assert_eq!(serve.handle_dispatch(id, t0), Dispatch::Run);
    serve.begin_drain(Duration::ZERO, t0);
    let reply = serve.poll_transmit().expect("cut");
    assert_eq!((reply.id, reply.code), (id, ReplyCode::Unavailable));
    assert_eq!(serve.poll_transmit(), None);
    let report = serve.poll_drained().expect("drained");
    assert_eq!(report.cut_at_bound, 1);
    assert!(report.bound_reached);
    assert_eq!(serve.poll_drained(), None);
    serve.begin_drain(Duration::from_secs(5), t0);
    assert_eq!(serve.poll_timeout(), None);
    assert!(serve.is_drained());
    assert_eq!(serve.handle_done(id, ReplyCode::Ok, t0), None);
}

/// C4, C2: a lost connection forgets its queued calls and orphans its running ones; their
/// results go nowhere; other connections are untouched.
#[test]
fn c4_lost_connection_orphans_running_calls() {
    let t0 = Instant::now();
    let mut serve = ServeTable::new();
    let Admission::Accept(running) = serve.handle_request(A, nz(1), None, CallShape::Unary, t0)
    else {
        panic!("accepted");
    };
    let Admission::Accept(queued) =
        serve.handle_request(A, nz(2), Some(nz(10)), CallShape::Unary, t0)
    else {
        panic!("accepted");
    };
    let Admission::Accept(other) = serve.handle_request(B, nz(1), None, CallShape::Unary, t0)
    else {
        panic!("accepted");
    };
    let _ = serve.handle_dispatch(running, t0);
    assert_eq!(serve.in_flight_on(A), 2);
    assert_eq!(serve.handle_connection_lost(A, t0), vec![running]);
    assert_eq!(serve.in_flight_on(A), 0);
    assert_eq!(serve.in_flight_on(B), 1);
    assert_eq!(serve.in_flight(), 2, "the orphaned handler still runs");
    assert_eq!(
        serve.poll_timeout(),
        None,
        "the queued call's timer is gone"
    );
    assert_eq!(serve.handle_dispatch(queued, t0), Dispatch::Skip);
    assert_eq!(serve.handle_item(running, t0), None);
    assert_eq!(serve.handle_done(running, ReplyCode::Ok, t0), None);
    assert_eq!(serve.handle_dispatch(other, t0), Dispatch::Run);
    assert_eq!(
        serve.handle_done(other, ReplyCode::Ok, t0),
        Some(ReplyCode::Ok)
    );
    assert_eq!(serve.in_flight(), 0);
    assert_eq!(serve.stats().orphaned, 2);
}

/// MISSION K6: the handler allow-list is exactly Exception and the nine codes a handler may
/// choose (Unauthorized, Forbidden, InvalidParams, IncompatibleVersion, ClassNotFound,
/// MethodNotFound, TransportError, Timeout, UnknownOutcome); the runtime's own codes are not
/// on it.
#[test]
fn k6_handler_allow_list() {
    use RemoteCode::*;
    let allowed = [
        Exception,
        Unauthorized,
        Forbidden,
        InvalidParams,
        IncompatibleVersion,
        ClassNotFound,
        MethodNotFound,
        TransportError,
        Timeout,
        UnknownOutcome,
    ];
    for c in allowed {
        assert!(c.handler_may_choose(), "{c}");
    }
    for c in [Busy, Superseded, NotFound, Unavailable] {
        assert!(!c.handler_may_choose(), "{c}");
    }
}

/// X1: a caller that stops waiting tells the callee only about calls whose REQUEST left:
/// a cancel before the send completes the call as never sent and queues no CANCEL; a cancel
/// after it, and a deadline passing, queue one CANCEL each, on the call's connection.
#[test]
fn x1_only_calls_that_left_are_cancelled_at_the_callee() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let unsent = table.start(A, None, t0);
    let sent = table.start(B, None, t0);
    let timed = table.start(A, Some(ms(50)), t0);
    let _ = table.handle_sent(sent, t0);
    let _ = table.handle_sent(timed, t0);

    assert_eq!(table.handle_cancel(unsent, t0), Disposition::Applied);
    assert_eq!(table.poll_cancel(), None, "it never left: nothing to tell");
    assert_eq!(
        one_completion(&mut table),
        (unsent, Err(CallError::Cancelled { sent: false }))
    );

    assert_eq!(table.handle_cancel(sent, t0), Disposition::Applied);
    assert_eq!(table.poll_cancel(), Some((B, sent)));
    assert_eq!(
        one_completion(&mut table),
        (sent, Err(CallError::Cancelled { sent: true }))
    );

    table.handle_timeout(t0 + ms(50));
    assert_eq!(table.poll_cancel(), Some((A, timed)));
    assert_eq!(table.poll_cancel(), None);
    assert_eq!(
        one_completion(&mut table),
        (
            timed,
            Err(CallError::Timeout {
                refused_by_server: false
            })
        )
    );
    assert_eq!(table.handle_cancel(sent, t0 + ms(60)), Disposition::Late);
    assert_eq!(table.poll_cancel(), None, "a late cancel tells nobody");
}

/// X1: a CANCEL at the callee: a queued call is forgotten and never runs; a running one is
/// orphaned (its result is dropped, nothing more is sent); an unknown one is ignored. Only
/// the named connection's call is touched.
#[test]
fn x1_a_cancel_forgets_a_queued_call_and_orphans_a_running_one() {
    let t0 = Instant::now();
    let mut serve = ServeTable::new();
    let accept = |serve: &mut ServeTable<ConnId>, conn, id| match serve.handle_request(
        conn,
        nz(id),
        None,
        CallShape::Unary,
        t0,
    ) {
        Admission::Accept(sid) => sid,
        other => panic!("not accepted: {other:?}"),
    };
    let queued = accept(&mut serve, A, 1);
    let running = accept(&mut serve, A, 2);
    let other = accept(&mut serve, B, 1);
    assert_eq!(serve.handle_dispatch(running, t0), Dispatch::Run);

    assert_eq!(serve.handle_cancel(A, nz(1), t0), Cancelled::Queued(queued));
    assert_eq!(
        serve.handle_dispatch(queued, t0),
        Dispatch::Skip,
        "never runs"
    );
    assert_eq!(
        serve.handle_cancel(A, nz(2), t0),
        Cancelled::Running(running)
    );
    assert_eq!(serve.handle_item(running, t0), None, "nothing more is sent");
    assert_eq!(serve.handle_done(running, ReplyCode::Ok, t0), None);
    assert_eq!(serve.handle_cancel(A, nz(2), t0), Cancelled::Unknown);
    assert_eq!(serve.handle_cancel(A, nz(9), t0), Cancelled::Unknown);
    assert_eq!(serve.in_flight_on(A), 0);
    assert_eq!(
        serve.in_flight_on(B),
        1,
        "the other caller's call 1 is untouched"
    );
    assert_eq!(serve.handle_dispatch(other, t0), Dispatch::Run);
    let stats = *serve.stats();
    assert_eq!(stats.cancelled_queued, 1);
    assert_eq!(stats.cancelled_running, 1);
    assert_eq!(stats.late_cancels, 2);
    assert_eq!(
        serve.poll_transmit(),
        None,
        "a cancelled call is never answered"
    );
}

/// X1: the runtime's default of what a cancel stops: queries only; never a command or an
/// undeclared method (it may be one); a method's own choice wins.
#[test]
fn x1_what_a_cancel_stops_follows_the_semantics() {
    use crate::proto::contract::{stops_on_cancel, Semantics};
    assert!(stops_on_cancel(Some(Semantics::Query), None));
    assert!(!stops_on_cancel(None, None));
    assert!(!stops_on_cancel(Some(Semantics::IdempotentCommand), None));
    assert!(!stops_on_cancel(
        Some(Semantics::NonRepeatableCommand),
        None
    ));
    assert!(!stops_on_cancel(Some(Semantics::Query), Some(false)));
    assert!(stops_on_cancel(
        Some(Semantics::NonRepeatableCommand),
        Some(true)
    ));
    assert!(stops_on_cancel(None, Some(true)));
}
