//! Call scenarios over the public sans-IO API (MISSION C1-C6, K6), with a manual clock.
//! Every test names the requirement it proves.
//!
//! Time: `t0` is read once per test; every later instant is `t0 + Duration`. Nothing sleeps,
//! so a 30 s call runs in microseconds.

use std::collections::{BTreeMap, HashSet};
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use zmesh::proto::calls::{
    may_have_run, ttl_on_wire, Admission, CallError, CallId, CallShape, CallState, CallTable,
    Completion, Dispatch, Disposition, Phase, RemoteCode, ServeTable, Unrouted,
};
use zmesh::proto::wire::ReplyCode;
use zmesh::proto::ConnId;

const A: ConnId = ConnId(1);
const B: ConnId = ConnId(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

type Done = (CallId, Result<Completion, CallError>);

fn drain(table: &mut CallTable<ConnId>) -> Vec<Done> {
    std::iter::from_fn(|| table.poll_completion()).collect()
}

/// The one completion the table has; fails if there is none or more than one.
fn only(table: &mut CallTable<ConnId>) -> Done {
    let all = drain(table);
    assert_eq!(all.len(), 1, "exactly one completion expected: {all:?}");
    all.into_iter().next().unwrap()
}

/// The error of the one completion, which must be for `id`.
fn error_of(table: &mut CallTable<ConnId>, id: CallId) -> CallError {
    match only(table) {
        (got, Err(err)) if got == id => err,
        other => panic!("expected an error for {id}, got {other:?}"),
    }
}

/// A call started on `conn` and handed over at `now`.
fn sent(
    table: &mut CallTable<ConnId>,
    conn: ConnId,
    ttl: Option<Duration>,
    now: Instant,
) -> CallId {
    let id = table.start(conn, ttl, now);
    assert_eq!(table.handle_sent(id, now), Disposition::Applied);
    id
}

/// A call started on `conn`, handed over and accepted at `now`.
fn accepted(
    table: &mut CallTable<ConnId>,
    conn: ConnId,
    ttl: Option<Duration>,
    now: Instant,
) -> CallId {
    let id = sent(table, conn, ttl, now);
    assert_eq!(table.handle_accept(id, conn, now), Disposition::Applied);
    id
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

// ---------------------------------------------------------------------------------------
// C1, C3: one test per CallError variant, produced through the table
// ---------------------------------------------------------------------------------------

/// C3: nothing serves the channel: never sent, did not run.
#[test]
fn c3_no_registration_did_not_run() {
    let t0 = Instant::now();
    let mut table = CallTable::<ConnId>::new();
    let id = table.start_unrouted(Unrouted::NoRegistration, t0);
    let err = error_of(&mut table, id);
    assert_eq!(err, CallError::NoRegistration);
    assert!(!may_have_run(&err));
    assert_eq!(err.code(), "NotFound");
    assert_eq!(table.pending(), 0);
}

/// C3: registrations exist but no connection is ready: never sent, did not run.
#[test]
fn c3_no_ready_peer_did_not_run() {
    let t0 = Instant::now();
    let mut table = CallTable::<ConnId>::new();
    let id = table.start_unrouted(Unrouted::NoReadyPeer, t0);
    let err = error_of(&mut table, id);
    assert_eq!(err, CallError::NoReadyPeer);
    assert!(!may_have_run(&err));
}

/// C3: the link cannot take the frame now: the call fails at once as never sent, and
/// nothing is queued (no timer, nothing pending).
#[test]
fn c3_transport_refused_did_not_run() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = table.start(A, Some(secs(5)), t0);
    assert_eq!(table.handle_send_failed(id, t0), Disposition::Applied);
    let err = error_of(&mut table, id);
    assert_eq!(err, CallError::TransportRefused);
    assert!(!may_have_run(&err));
    assert_eq!((table.pending(), table.poll_timeout()), (0, None));
    // A report that it was sent after all is late and changes nothing.
    assert_eq!(table.handle_sent(id, t0), Disposition::Late);
    assert_eq!(table.poll_completion(), None);
}

/// C3, seed 002 §6 ("before transport accepted the request: route not connected"): the
/// connection leaves ready before the frame was handed over: never sent, did not run.
#[test]
fn c3_connection_lost_before_hand_over_did_not_run() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = table.start(A, None, t0);
    assert_eq!(table.handle_connection_lost(A, t0), 1);
    let err = error_of(&mut table, id);
    assert_eq!(err, CallError::TransportRefused);
    assert!(!may_have_run(&err));
    assert!(!table.is_pending(id), "the shell must not send it now");
}

/// C2, C3: sent, and the connection left ready before any ACCEPT: may have run.
#[test]
fn c2_c3_outcome_unknown_after_send_may_have_run() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = sent(&mut table, A, None, t0);
    let _ = table.handle_connection_lost(A, t0 + ms(5));
    let err = error_of(&mut table, id);
    assert_eq!(err, CallError::OutcomeUnknown { phase: Phase::Sent });
    assert!(may_have_run(&err));
    assert_eq!(err.code(), "UnknownOutcome");
}

/// C2, C3: accepted, and the connection that accepted it left ready: may have run.
#[test]
fn c2_c3_outcome_unknown_after_accept_may_have_run() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = accepted(&mut table, A, None, t0);
    let _ = table.handle_connection_lost(A, t0 + ms(5));
    let err = error_of(&mut table, id);
    assert_eq!(
        err,
        CallError::OutcomeUnknown {
            phase: Phase::Accepted
        }
    );
    assert!(may_have_run(&err));
}

/// C6, C3: the caller's own deadline passes: may have run.
#[test]
fn c6_c3_caller_timeout_may_have_run() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = accepted(&mut table, A, Some(ms(1_500)), t0);
    assert_eq!(table.poll_timeout(), Some(t0 + ms(1_500)));
    table.handle_timeout(t0 + ms(1_500));
    let err = error_of(&mut table, id);
    assert_eq!(
        err,
        CallError::Timeout {
            refused_by_server: false
        }
    );
    assert!(may_have_run(&err));
    assert_eq!(err.code(), "Timeout");
    // The server's answer arriving afterwards is late and changes nothing.
    assert_eq!(
        table.handle_reply(id, A, ReplyCode::Ok, Bytes::new(), t0 + ms(1_600)),
        Disposition::Late
    );
    assert_eq!(table.poll_completion(), None);
}

/// C6, C3: the server refused the call because its ttl ran out before dispatch: did not run.
#[test]
fn c6_c3_server_timeout_refusal_did_not_run() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = accepted(&mut table, A, Some(secs(1)), t0);
    let _ = table.handle_reply(
        id,
        A,
        ReplyCode::Timeout,
        Bytes::from_static(b"ttl ran out"),
        t0 + ms(800),
    );
    let err = error_of(&mut table, id);
    assert_eq!(
        err,
        CallError::Timeout {
            refused_by_server: true
        }
    );
    assert!(!may_have_run(&err));
    assert_eq!(table.poll_timeout(), None, "its timer is gone");
}

/// C1, C3: cancelled before the frame was handed over: did not run; after: may have run.
#[test]
fn c1_c3_cancelled_before_and_after_send() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let early = table.start(A, None, t0);
    let _ = table.handle_cancel(early, t0);
    let err = error_of(&mut table, early);
    assert_eq!(err, CallError::Cancelled { sent: false });
    assert!(!may_have_run(&err));
    assert!(!table.is_pending(early), "the shell must not send it now");

    let late = sent(&mut table, A, Some(secs(10)), t0);
    let _ = table.handle_cancel(late, t0 + secs(1));
    let err = error_of(&mut table, late);
    assert_eq!(err, CallError::Cancelled { sent: true });
    assert!(may_have_run(&err));
    assert_eq!(err.code(), "Cancelled");
    assert_eq!(table.poll_timeout(), None);
}

/// C1, C3, F6: shutdown fails every pending call, "may have run" exactly for those that
/// were sent, leaves no timer, and fails later calls at once as never sent.
#[test]
fn c1_c3_shutdown_fails_pending_calls_by_phase() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let issued = table.start(A, Some(secs(3)), t0);
    let out = sent(&mut table, B, Some(secs(3)), t0);
    let taken = accepted(&mut table, A, None, t0);
    table.handle_shutdown(t0 + ms(10));
    let got: BTreeMap<CallId, Result<Completion, CallError>> =
        drain(&mut table).into_iter().collect();
    assert_eq!(got.len(), 3);
    assert_eq!(got[&issued], Err(CallError::Shutdown { sent: false }));
    assert_eq!(got[&out], Err(CallError::Shutdown { sent: true }));
    assert_eq!(got[&taken], Err(CallError::Shutdown { sent: true }));
    assert!(!may_have_run(&CallError::Shutdown { sent: false }));
    assert!(may_have_run(&CallError::Shutdown { sent: true }));
    assert_eq!((table.pending(), table.poll_timeout()), (0, None));

    let after = table.start(A, None, t0 + secs(1));
    assert_eq!(
        error_of(&mut table, after),
        CallError::Shutdown { sent: false }
    );
    let unrouted = table.start_unrouted(Unrouted::NoReadyPeer, t0 + secs(1));
    assert_eq!(
        error_of(&mut table, unrouted),
        CallError::Shutdown { sent: false }
    );
    assert_eq!(table.pending(), 0);
}

/// C4, C3: the server refused a new call because it is draining (no ACCEPT): did not run;
/// it stopped with an accepted call in hand: may have run.
#[test]
fn c4_c3_unavailable_refused_or_in_hand() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let refused = sent(&mut table, A, None, t0);
    let _ = table.handle_reply(refused, A, ReplyCode::Unavailable, Bytes::new(), t0);
    let err = error_of(&mut table, refused);
    assert_eq!(err, CallError::Unavailable { accepted: false });
    assert!(!may_have_run(&err));

    let in_hand = accepted(&mut table, A, None, t0);
    let _ = table.handle_reply(in_hand, A, ReplyCode::Unavailable, Bytes::new(), t0);
    let err = error_of(&mut table, in_hand);
    assert_eq!(err, CallError::Unavailable { accepted: true });
    assert!(may_have_run(&err));
}

/// C1, C3: a gap in a stream breaks it at once: may have run (the callee was producing).
#[test]
fn c1_c3_item_out_of_order_breaks_the_stream() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = accepted(&mut table, A, None, t0);
    let _ = table.handle_item(id, A, 0, Bytes::from_static(b"a"), t0);
    let _ = table.handle_item(id, A, 2, Bytes::from_static(b"c"), t0);
    let item = table.poll_item().unwrap();
    assert_eq!((item.id, item.seq), (id, 0));
    assert_eq!(
        table.poll_item(),
        None,
        "the out-of-order item is not delivered"
    );
    let err = error_of(&mut table, id);
    assert_eq!(
        err,
        CallError::ItemOutOfOrder {
            expected: 1,
            got: 2
        }
    );
    assert!(may_have_run(&err));
    assert_eq!(
        table.handle_reply(id, A, ReplyCode::Ok, Bytes::new(), t0),
        Disposition::Late
    );
}

/// K6, C3: every error code of a REPLY reaches the caller with its message, and
/// may_have_run follows the code.
#[test]
fn k6_c3_remote_codes_through_the_table() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let ran = [ReplyCode::Exception, ReplyCode::UnknownOutcome];
    for &code in ReplyCode::ALL {
        if matches!(
            code,
            ReplyCode::Ok | ReplyCode::Timeout | ReplyCode::Unavailable
        ) {
            continue; // their own variants, tested above
        }
        let id = accepted(&mut table, A, None, t0);
        let _ = table.handle_reply(id, A, code, Bytes::from_static(b"why"), t0);
        let err = error_of(&mut table, id);
        let CallError::Remote {
            code: remote,
            ref message,
        } = err
        else {
            panic!("{code:?} gave {err:?}");
        };
        assert_eq!(remote, RemoteCode::from_reply(code).unwrap());
        assert_eq!(message, "why");
        assert_eq!(may_have_run(&err), ran.contains(&code), "{code:?}");
        assert_eq!(err.code(), format!("{code:?}"));
    }
}

/// C1: a successful call carries the REPLY payload.
#[test]
fn c1_ok_reply_completes_with_its_payload() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = accepted(&mut table, A, Some(secs(2)), t0);
    let _ = table.handle_reply(
        id,
        A,
        ReplyCode::Ok,
        Bytes::from_static(b"\xc3"),
        t0 + ms(3),
    );
    assert_eq!(
        only(&mut table),
        (
            id,
            Ok(Completion {
                payload: Bytes::from_static(b"\xc3"),
                items: 0
            })
        )
    );
    assert_eq!(table.poll_timeout(), None);
}

// ---------------------------------------------------------------------------------------
// C2: the lease
// ---------------------------------------------------------------------------------------

/// C2: an accepted call without any deadline fails at once when the connection that
/// accepted it is lost; a call on another connection is untouched and completes normally.
#[test]
fn c2_accepted_call_fails_at_once_when_its_connection_is_lost() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let on_a = accepted(&mut table, A, None, t0);
    let on_b = accepted(&mut table, B, None, t0);
    assert_eq!(table.poll_timeout(), None, "no call needs a timeout");
    assert_eq!((table.pending_on(A), table.pending_on(B)), (1, 1));

    let lost_at = t0 + secs(3_600);
    assert_eq!(table.handle_connection_lost(A, lost_at), 1);
    let err = error_of(&mut table, on_a);
    assert_eq!(
        err,
        CallError::OutcomeUnknown {
            phase: Phase::Accepted
        }
    );
    assert!(may_have_run(&err));
    assert_eq!((table.pending_on(A), table.pending_on(B)), (0, 1));
    assert_eq!(table.state(on_b), Some(CallState::Accepted));

    // A late REPLY from the lost connection changes nothing.
    assert_eq!(
        table.handle_reply(on_a, A, ReplyCode::Ok, Bytes::new(), lost_at),
        Disposition::Late
    );
    let _ = table.handle_reply(on_b, B, ReplyCode::Ok, Bytes::from_static(b"b"), lost_at);
    assert!(matches!(only(&mut table), (id, Ok(_)) if id == on_b));
    assert_eq!(table.pending(), 0);
}

/// C2, L6: only an ACCEPT on the connection the request went out on pins the lease; one on
/// another connection is ignored and counted, so losing that other connection changes
/// nothing, and the call still fails as "sent, not accepted" with its own connection.
#[test]
fn c2_accept_on_another_connection_pins_nothing() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = sent(&mut table, A, None, t0);
    assert_eq!(table.handle_accept(id, B, t0), Disposition::OtherConnection);
    assert_eq!(table.stats().other_connection, 1);
    assert_eq!(table.handle_connection_lost(B, t0 + ms(1)), 0);
    assert_eq!(table.poll_completion(), None);
    let _ = table.handle_connection_lost(A, t0 + ms(2));
    assert_eq!(
        error_of(&mut table, id),
        CallError::OutcomeUnknown { phase: Phase::Sent }
    );
}

/// C2, C1: a connection that comes back under the same key is a new connection for new
/// calls; the calls of the old one failed when it was lost and stay failed.
#[test]
fn c2_reconnect_does_not_revive_failed_calls() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let old = accepted(&mut table, A, None, t0);
    let _ = table.handle_connection_lost(A, t0 + secs(1));
    let _ = drain(&mut table);
    let new = accepted(&mut table, A, None, t0 + secs(2));
    assert_eq!(table.handle_accept(old, A, t0 + secs(2)), Disposition::Late);
    let _ = table.handle_reply(old, A, ReplyCode::Ok, Bytes::new(), t0 + secs(2));
    assert_eq!(table.poll_completion(), None);
    assert_eq!(table.pending_on(A), 1);
    assert!(table.is_pending(new));
}

// ---------------------------------------------------------------------------------------
// C5: the pending gauge
// ---------------------------------------------------------------------------------------

/// C5: pending calls per node and per connection: a wedged callee shows as a count that
/// climbs on one connection while the other drains.
#[test]
fn c5_pending_gauge_per_node_and_per_connection() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    for i in 0..10 {
        let now = t0 + secs(i);
        let _ = accepted(&mut table, A, None, now);
        let healthy = accepted(&mut table, B, None, now);
        let _ = table.handle_reply(healthy, B, ReplyCode::Ok, Bytes::new(), now + ms(2));
        assert_eq!(table.pending_on(A), i as usize + 1);
        assert_eq!(table.pending_on(B), 0);
        assert_eq!(table.pending(), i as usize + 1);
    }
    assert_eq!(table.pending_on(ConnId(99)), 0);
    let _ = table.handle_connection_lost(A, t0 + secs(20));
    assert_eq!((table.pending(), table.pending_on(A)), (0, 0));
    assert_eq!(drain(&mut table).len(), 20);
}

// ---------------------------------------------------------------------------------------
// C6: deadlines
// ---------------------------------------------------------------------------------------

/// C6, C2: a 30 s call with no ttl completes normally after 30 s of manual clock; nothing
/// ever wakes the shell for it.
#[test]
fn c6_30s_call_without_ttl_completes_normally() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let id = accepted(&mut table, A, None, t0);
    for s in 1..=30 {
        table.handle_timeout(t0 + secs(s));
        assert_eq!(table.poll_timeout(), None);
        assert_eq!(table.poll_completion(), None, "still running at {s} s");
    }
    let _ = table.handle_reply(
        id,
        A,
        ReplyCode::Ok,
        Bytes::from_static(b"done"),
        t0 + secs(30),
    );
    assert_eq!(
        only(&mut table),
        (
            id,
            Ok(Completion {
                payload: Bytes::from_static(b"done"),
                items: 0
            })
        )
    );
}

/// C6: ttl None and ttl 0 arm no timer at all (not "the next tick"): with only such calls
/// poll_timeout is None and a day of clock completes nothing; the wire carries no ttl.
#[test]
fn c6_ttl_zero_or_none_arms_no_timer() {
    let t0 = Instant::now();
    let mut table = CallTable::new();
    let mut ids = Vec::new();
    for ttl in [None, Some(Duration::ZERO), None, Some(Duration::ZERO)] {
        assert_eq!(ttl_on_wire(ttl), None);
        ids.push(accepted(&mut table, A, ttl, t0));
        assert_eq!(table.poll_timeout(), None);
    }
    table.handle_timeout(t0);
    table.handle_timeout(t0 + secs(86_400));
    assert_eq!(table.poll_completion(), None);
    assert_eq!(table.pending(), 4);
    assert!(ids.iter().all(|&id| table.deadline(id).is_none()));
    // A real ttl next to them arms exactly its own timer.
    let _ = sent(&mut table, A, Some(ms(20)), t0 + secs(86_400));
    assert_eq!(table.poll_timeout(), Some(t0 + secs(86_400) + ms(20)));
}

/// C6, C3: a call whose ttl runs out while it waits in a server's queue is refused with
/// Timeout, never runs, and the caller records "did not run": the server's own timer
/// refuses it at arrival + the wire ttl (shortened by the refusal margin), so the refusal
/// arrives before the caller's deadline. A call with no ttl queued behind it runs.
#[test]
fn c6_ttl_ran_out_in_a_server_queue_is_refused_and_caller_records_did_not_run() {
    let t0 = Instant::now();
    let latency = ms(20);
    let mut caller = CallTable::new();
    let mut server = ServeTable::new();

    // A long call occupies the server's one worker (serial execution, K4).
    let busy = sent(&mut caller, A, None, t0);
    let Admission::Accept(busy_s) =
        server.handle_request(A, busy.get(), None, CallShape::Unary, t0 + latency)
    else {
        panic!("accepted");
    };
    assert_eq!(server.handle_dispatch(busy_s, t0 + latency), Dispatch::Run);
    let _ = caller.handle_accept(busy, A, t0 + latency * 2);

    // The call with a 1 s ttl waits behind it.
    let ttl = secs(1);
    let wire_ttl = ttl_on_wire(Some(ttl)).unwrap();
    assert_eq!(wire_ttl.get(), 750);
    let call = sent(&mut caller, A, Some(ttl), t0);
    let arrival = t0 + latency;
    let Admission::Accept(queued) =
        server.handle_request(A, call.get(), Some(wire_ttl), CallShape::Unary, arrival)
    else {
        panic!("accepted");
    };
    let _ = caller.handle_accept(call, A, arrival + latency);

    // The server's timer refuses it at arrival + 750 ms; the caller's deadline is t0 + 1 s.
    let refuse_at = server.poll_timeout().unwrap();
    assert_eq!(refuse_at, arrival + ms(750));
    server.handle_timeout(refuse_at);
    let reply = server.poll_transmit().expect("a refusal");
    assert_eq!(
        (reply.id, reply.conn, reply.call_id, reply.code),
        (queued, A, call.get(), ReplyCode::Timeout)
    );
    let back = refuse_at + latency;
    assert!(back < caller.poll_timeout().unwrap());
    let _ = caller.handle_reply(
        call,
        A,
        reply.code,
        Bytes::from_static(reply.message.as_bytes()),
        back,
    );
    let err = error_of(&mut caller, call);
    assert_eq!(
        err,
        CallError::Timeout {
            refused_by_server: true
        }
    );
    assert!(!may_have_run(&err), "the caller records: did not run");

    // When the worker frees up, the refused call is skipped: it never runs.
    assert_eq!(
        server.handle_done(busy_s, ReplyCode::Ok, t0 + secs(3)),
        Some(ReplyCode::Ok)
    );
    assert_eq!(server.handle_dispatch(queued, t0 + secs(3)), Dispatch::Skip);
    assert_eq!(server.stats().refused_timeout, 1);
    let _ = caller.handle_reply(busy, A, ReplyCode::Ok, Bytes::new(), t0 + secs(3) + latency);
    assert!(matches!(only(&mut caller), (id, Ok(_)) if id == busy));
}

/// C6: if the shell dispatches a queued call whose ttl ran out before the table's timer was
/// applied, the dispatch itself refuses it: exactly one REPLY Timeout either way.
#[test]
fn c6_ttl_ran_out_refused_at_dispatch() {
    let t0 = Instant::now();
    let mut server = ServeTable::new();
    let Admission::Accept(id) =
        server.handle_request(A, nz(3), Some(nz(500)), CallShape::Unary, t0)
    else {
        panic!("accepted");
    };
    assert_eq!(
        server.handle_dispatch(id, t0 + ms(700)),
        Dispatch::Refuse(ReplyCode::Timeout)
    );
    server.handle_timeout(t0 + ms(700));
    assert_eq!(server.poll_transmit(), None);
    assert_eq!(server.poll_timeout(), None);
    assert_eq!(server.in_flight(), 0);
}

// ---------------------------------------------------------------------------------------
// C4: graceful stop on the serve side
// ---------------------------------------------------------------------------------------

/// C4: a draining server refuses new calls (did not run), ends streams in progress with
/// Unavailable at once (the subscriber hears "may have run"), answers every accepted call,
/// queued ones included, and then reports drained before its bound.
#[test]
fn c4_drain_refuses_new_calls_answers_accepted_ones_and_ends_streams() {
    let t0 = Instant::now();
    let mut caller = CallTable::new();
    let mut server = ServeTable::new();
    let admit = |server: &mut ServeTable<ConnId>, id: CallId, shape, now| match server
        .handle_request(A, id.get(), None, shape, now)
    {
        Admission::Accept(s) => s,
        other => panic!("{other:?}"),
    };

    let unary = accepted(&mut caller, A, None, t0);
    let unary_s = admit(&mut server, unary, CallShape::Unary, t0);
    assert_eq!(server.handle_dispatch(unary_s, t0), Dispatch::Run);
    let queued = accepted(&mut caller, A, None, t0);
    let queued_s = admit(&mut server, queued, CallShape::Unary, t0);
    let stream = accepted(&mut caller, A, None, t0);
    let stream_s = admit(&mut server, stream, CallShape::Stream, t0);
    assert_eq!(server.handle_dispatch(stream_s, t0), Dispatch::Run);
    assert_eq!(server.handle_item(stream_s, t0), Some(0));
    let _ = caller.handle_item(stream, A, 0, Bytes::from_static(b"tick"), t0);

    server.begin_drain(secs(10), t0 + secs(1));
    assert!(server.is_stopping());
    assert_eq!(server.poll_timeout(), Some(t0 + secs(11)));
    // The stream ends now.
    let end = server.poll_transmit().expect("stream end");
    assert_eq!(
        (end.id, end.call_id, end.code),
        (stream_s, stream.get(), ReplyCode::Unavailable)
    );
    assert_eq!(server.poll_transmit(), None);
    assert_eq!(
        server.handle_item(stream_s, t0 + secs(1)),
        None,
        "handler stops"
    );
    let _ = caller.handle_reply(stream, A, end.code, Bytes::new(), t0 + secs(1));
    let item = caller.poll_item().unwrap();
    assert_eq!((item.id, item.seq), (stream, 0));
    let err = error_of(&mut caller, stream);
    assert_eq!(err, CallError::Unavailable { accepted: true });
    assert!(may_have_run(&err));

    // A new call is refused without ACCEPT: did not run.
    let late = sent(&mut caller, A, None, t0 + secs(2));
    assert_eq!(
        server.handle_request(A, late.get(), None, CallShape::Unary, t0 + secs(2)),
        Admission::Refuse(ReplyCode::Unavailable)
    );
    let _ = caller.handle_reply(late, A, ReplyCode::Unavailable, Bytes::new(), t0 + secs(2));
    let err = error_of(&mut caller, late);
    assert_eq!(err, CallError::Unavailable { accepted: false });
    assert!(!may_have_run(&err));

    // Accepted calls, the queued one included, are answered normally.
    assert_eq!(
        server.handle_done(unary_s, ReplyCode::Ok, t0 + secs(3)),
        Some(ReplyCode::Ok)
    );
    assert_eq!(server.poll_drained(), None, "one call still in hand");
    assert_eq!(
        server.handle_dispatch(queued_s, t0 + secs(3)),
        Dispatch::Run
    );
    assert_eq!(
        server.handle_done(queued_s, ReplyCode::Ok, t0 + secs(4)),
        Some(ReplyCode::Ok)
    );
    for id in [unary, queued] {
        let _ = caller.handle_reply(id, A, ReplyCode::Ok, Bytes::new(), t0 + secs(4));
    }
    assert!(drain(&mut caller).iter().all(|(_, r)| r.is_ok()));
    let report = server.poll_drained().expect("drained");
    assert_eq!(report.answered, 2);
    assert_eq!(report.refused, 1);
    assert_eq!(report.streams_ended, 1);
    assert_eq!(report.cut_at_bound, 0);
    assert!(!report.bound_reached);
    assert!(server.is_drained());
    assert_eq!(server.poll_timeout(), None, "no timer after the drain");
    assert_eq!(caller.pending(), 0);
}

/// C4: the wait is bounded: a wedged handler cannot hold the stop. At the bound the table
/// answers it Unavailable (the caller records "may have run") and the drain ends; the
/// handler's late result goes nowhere.
#[test]
fn c4_drain_bound_cuts_a_wedged_call() {
    let t0 = Instant::now();
    let mut caller = CallTable::new();
    let mut server = ServeTable::new();
    let wedged = accepted(&mut caller, B, None, t0);
    let Admission::Accept(wedged_s) =
        server.handle_request(B, wedged.get(), None, CallShape::Unary, t0)
    else {
        panic!("accepted");
    };
    assert_eq!(server.handle_dispatch(wedged_s, t0), Dispatch::Run);
    server.begin_drain(secs(30), t0 + secs(1));
    server.handle_timeout(t0 + secs(31) - Duration::from_nanos(1));
    assert_eq!(server.poll_transmit(), None);
    assert_eq!(server.poll_drained(), None);
    assert_eq!(server.poll_timeout(), Some(t0 + secs(31)));
    server.handle_timeout(t0 + secs(31));
    let cut = server.poll_transmit().expect("cut at the bound");
    assert_eq!(
        (cut.id, cut.conn, cut.code),
        (wedged_s, B, ReplyCode::Unavailable)
    );
    let report = server.poll_drained().expect("drained at the bound");
    assert_eq!((report.cut_at_bound, report.bound_reached), (1, true));
    assert_eq!(
        server.handle_done(wedged_s, ReplyCode::Ok, t0 + secs(40)),
        None
    );

    let _ = caller.handle_reply(wedged, B, cut.code, Bytes::new(), t0 + secs(31));
    let err = error_of(&mut caller, wedged);
    assert_eq!(err, CallError::Unavailable { accepted: true });
    assert!(may_have_run(&err));
}

/// C4, C1: a duplicate REQUEST (same connection, same id) for a call in flight is ignored and
/// counted, so the call gets exactly one REPLY; the same id on another connection is a
/// different call.
#[test]
fn c4_c1_duplicate_request_is_ignored_and_counted() {
    let t0 = Instant::now();
    let mut server = ServeTable::new();
    let Admission::Accept(first) = server.handle_request(A, nz(9), None, CallShape::Unary, t0)
    else {
        panic!("accepted");
    };
    assert_eq!(
        server.handle_request(A, nz(9), Some(nz(5)), CallShape::Unary, t0 + ms(1)),
        Admission::Duplicate
    );
    assert!(matches!(
        server.handle_request(B, nz(9), None, CallShape::Unary, t0 + ms(1)),
        Admission::Accept(_)
    ));
    assert_eq!(server.stats().duplicates, 1);
    assert_eq!((server.in_flight_on(A), server.in_flight_on(B)), (1, 1));
    // A duplicate during the drain is still only ignored, not refused with a second REPLY.
    server.begin_drain(secs(5), t0 + ms(2));
    assert_eq!(
        server.handle_request(A, nz(9), None, CallShape::Unary, t0 + ms(3)),
        Admission::Duplicate
    );
    assert_eq!(server.handle_dispatch(first, t0 + ms(4)), Dispatch::Run);
    assert_eq!(
        server.handle_done(first, ReplyCode::Ok, t0 + ms(5)),
        Some(ReplyCode::Ok)
    );
    assert_eq!(server.stats().duplicates, 2);
}

/// C4, C2: a caller connection lost during the drain: its running handler is still waited
/// for (up to the bound) but nothing is sent for it.
#[test]
fn c4_drain_waits_for_orphaned_handlers_up_to_the_bound() {
    let t0 = Instant::now();
    let mut server = ServeTable::new();
    let Admission::Accept(id) = server.handle_request(A, nz(1), None, CallShape::Unary, t0) else {
        panic!("accepted");
    };
    let _ = server.handle_dispatch(id, t0);
    server.begin_drain(secs(5), t0);
    assert_eq!(server.handle_connection_lost(A, t0 + secs(1)), vec![id]);
    assert_eq!(server.poll_drained(), None);
    server.handle_timeout(t0 + secs(5));
    assert_eq!(server.poll_transmit(), None, "nobody to answer");
    let report = server.poll_drained().expect("drained");
    assert_eq!((report.abandoned, report.cut_at_bound), (1, 0));
}

// ---------------------------------------------------------------------------------------
// C1, C2, C3, C5, C6: every caller event, in random orders, against a reference model
// ---------------------------------------------------------------------------------------

const CONNS: u64 = 3;

/// One input of the property test. Call numbers index the calls started so far (modulo
/// their count, one past it = an id never issued), so events hit pending, completed and
/// unknown calls, and repeat.
#[derive(Debug, Clone)]
enum Ev {
    Start {
        conn: u64,
        ttl_ms: Option<u64>,
    },
    Unrouted {
        registration: bool,
    },
    Sent(usize),
    SendFailed(usize),
    Accept {
        call: usize,
        right: bool,
    },
    Item {
        call: usize,
        right: bool,
        skew: i8,
    },
    Reply {
        call: usize,
        right: bool,
        code: usize,
    },
    Lost(u64),
    Cancel(usize),
    Shutdown,
    Advance(u64),
    Timeout,
}

fn ev() -> impl Strategy<Value = Ev> {
    let call = 0_usize..12;
    prop_oneof![
        4 => (0..CONNS, prop_oneof![Just(None), Just(Some(0)), (1_u64..3_000).prop_map(Some)])
            .prop_map(|(conn, ttl_ms)| Ev::Start { conn, ttl_ms }),
        1 => any::<bool>().prop_map(|registration| Ev::Unrouted { registration }),
        4 => call.clone().prop_map(Ev::Sent),
        1 => call.clone().prop_map(Ev::SendFailed),
        3 => (call.clone(), prop::bool::weighted(0.8))
            .prop_map(|(call, right)| Ev::Accept { call, right }),
        2 => (call.clone(), prop::bool::weighted(0.8), prop_oneof![8 => Just(0_i8), 1 => Just(-1), 1 => Just(1)])
            .prop_map(|(call, right, skew)| Ev::Item { call, right, skew }),
        2 => (call.clone(), prop::bool::weighted(0.8), 0..ReplyCode::ALL.len())
            .prop_map(|(call, right, code)| Ev::Reply { call, right, code }),
        1 => (0..CONNS).prop_map(Ev::Lost),
        1 => call.prop_map(Ev::Cancel),
        3 => (0_u64..1_500).prop_map(Ev::Advance),
        1 => prop_oneof![30 => Just(Ev::Timeout), 1 => Just(Ev::Shutdown)],
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MState {
    Issued,
    Sent,
    Accepted,
}

/// The reference model of one pending call: what the specification says the table knows.
#[derive(Debug, Clone)]
struct MCall {
    conn: ConnId,
    ttl: Option<Duration>,
    state: MState,
    deadline: Option<Instant>,
    next_seq: u64,
}

/// What happened to one call in the world, for the may_have_run check.
#[derive(Debug, Clone, Default)]
struct Facts {
    /// The frame left this node before the call completed: a send report, or a record that
    /// can only answer a received request, on the call's own connection.
    left: bool,
    /// The completion came from a REPLY on the call's connection.
    by_reply: bool,
}

struct Model {
    now: Instant,
    ids: Vec<CallId>,
    pending: BTreeMap<CallId, MCall>,
    facts: BTreeMap<CallId, Facts>,
    shut: bool,
}

impl Model {
    fn expire(&mut self, now: Instant) -> Vec<(CallId, CallError)> {
        let due: Vec<CallId> = self
            .pending
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        due.into_iter()
            .map(|id| {
                self.pending.remove(&id);
                (
                    id,
                    CallError::Timeout {
                        refused_by_server: false,
                    },
                )
            })
            .collect()
    }

    fn leave(&mut self, id: CallId, state: MState, now: Instant) {
        self.facts.entry(id).or_default().left = true;
        if let Some(c) = self.pending.get_mut(&id) {
            if c.state == MState::Issued {
                c.deadline = c.ttl.map(|t| now + t);
            }
            c.state = state;
        }
    }
}

fn pick(model: &Model, n: usize) -> CallId {
    if model.ids.is_empty() || n % (model.ids.len() + 1) == model.ids.len() {
        CallId(NonZeroU64::new(10_000 + n as u64).unwrap())
    } else {
        model.ids[n % (model.ids.len() + 1)]
    }
}

fn other(conn: ConnId) -> ConnId {
    ConnId(conn.0 % CONNS + 1)
}

/// Runs `events` through a table and the model; checks every completion against the model
/// and the facts, the gauges and the wake-up after every event, and exactly-once at the end.
fn run(events: &[Ev]) -> Result<(), TestCaseError> {
    let t0 = Instant::now();
    let mut table = CallTable::<ConnId>::new();
    let mut model = Model {
        now: t0,
        ids: Vec::new(),
        pending: BTreeMap::new(),
        facts: BTreeMap::new(),
        shut: false,
    };
    let mut completed: HashSet<CallId> = HashSet::new();

    for event in events.iter().chain(std::iter::once(&Ev::Shutdown)) {
        let now = model.now;
        // Every input first applies the deadlines due at its `now` (moving the clock is not
        // an input).
        let mut expected: BTreeMap<CallId, Result<Completion, CallError>> =
            if matches!(event, Ev::Advance(_)) {
                BTreeMap::new()
            } else {
                model
                    .expire(now)
                    .into_iter()
                    .map(|(id, e)| (id, Err(e)))
                    .collect()
            };
        let mut items_expected = Vec::new();
        match *event {
            Ev::Start { conn, ttl_ms } => {
                let conn = ConnId(conn + 1);
                let ttl = ttl_ms.map(ms);
                let id = table.start(conn, ttl, now);
                model.ids.push(id);
                model.facts.insert(id, Facts::default());
                if model.shut {
                    expected.insert(id, Err(CallError::Shutdown { sent: false }));
                } else {
                    model.pending.insert(
                        id,
                        MCall {
                            conn,
                            ttl: ttl.filter(|t| !t.is_zero()),
                            state: MState::Issued,
                            deadline: None,
                            next_seq: 0,
                        },
                    );
                }
            }
            Ev::Unrouted { registration } => {
                let (reason, err) = if registration {
                    (Unrouted::NoRegistration, CallError::NoRegistration)
                } else {
                    (Unrouted::NoReadyPeer, CallError::NoReadyPeer)
                };
                let id = table.start_unrouted(reason, now);
                model.ids.push(id);
                model.facts.insert(id, Facts::default());
                let err = if model.shut {
                    CallError::Shutdown { sent: false }
                } else {
                    err
                };
                expected.insert(id, Err(err));
            }
            Ev::Sent(n) => {
                let id = pick(&model, n);
                let _ = table.handle_sent(id, now);
                if model
                    .pending
                    .get(&id)
                    .is_some_and(|c| c.state == MState::Issued)
                {
                    model.leave(id, MState::Sent, now);
                }
            }
            Ev::SendFailed(n) => {
                let id = pick(&model, n);
                let _ = table.handle_send_failed(id, now);
                if model
                    .pending
                    .get(&id)
                    .is_some_and(|c| c.state == MState::Issued)
                {
                    model.pending.remove(&id);
                    expected.insert(id, Err(CallError::TransportRefused));
                }
            }
            Ev::Accept { call, right } => {
                let id = pick(&model, call);
                let conn = model.pending.get(&id).map_or(A, |c| c.conn);
                let conn = if right { conn } else { other(conn) };
                let _ = table.handle_accept(id, conn, now);
                if right && model.pending.contains_key(&id) {
                    model.leave(id, MState::Accepted, now);
                }
            }
            Ev::Item { call, right, skew } => {
                let id = pick(&model, call);
                let (conn, next) = model
                    .pending
                    .get(&id)
                    .map_or((A, 0), |c| (c.conn, c.next_seq));
                let seq = next.saturating_add_signed(i64::from(skew));
                let conn = if right { conn } else { other(conn) };
                let payload = Bytes::from(seq.to_be_bytes().to_vec());
                let _ = table.handle_item(id, conn, seq, payload.clone(), now);
                if right && model.pending.contains_key(&id) {
                    model.leave(id, MState::Accepted, now);
                    let c = model.pending.get_mut(&id).unwrap();
                    if seq == c.next_seq {
                        c.next_seq += 1;
                        items_expected.push((id, seq, payload));
                    } else {
                        let expected_seq = c.next_seq;
                        model.pending.remove(&id);
                        expected.insert(
                            id,
                            Err(CallError::ItemOutOfOrder {
                                expected: expected_seq,
                                got: seq,
                            }),
                        );
                    }
                }
            }
            Ev::Reply { call, right, code } => {
                let id = pick(&model, call);
                let code = ReplyCode::ALL[code];
                let conn = model.pending.get(&id).map_or(A, |c| c.conn);
                let conn = if right { conn } else { other(conn) };
                let payload = Bytes::from_static(b"r");
                let _ = table.handle_reply(id, conn, code, payload.clone(), now);
                if right {
                    if let Some(c) = model.pending.remove(&id) {
                        let facts = model.facts.entry(id).or_default();
                        facts.left = true;
                        facts.by_reply = true;
                        let result = match code {
                            ReplyCode::Ok => Ok(Completion {
                                payload,
                                items: c.next_seq,
                            }),
                            ReplyCode::Timeout => Err(CallError::Timeout {
                                refused_by_server: true,
                            }),
                            ReplyCode::Unavailable => Err(CallError::Unavailable {
                                accepted: c.state == MState::Accepted,
                            }),
                            code => Err(CallError::Remote {
                                code: RemoteCode::from_reply(code).unwrap(),
                                message: "r".to_owned(),
                            }),
                        };
                        expected.insert(id, result);
                    }
                }
            }
            Ev::Lost(conn) => {
                let conn = ConnId(conn + 1);
                let _ = table.handle_connection_lost(conn, now);
                let on: Vec<CallId> = model
                    .pending
                    .iter()
                    .filter(|(_, c)| c.conn == conn)
                    .map(|(&id, _)| id)
                    .collect();
                for id in on {
                    let c = model.pending.remove(&id).unwrap();
                    let err = match c.state {
                        MState::Issued => CallError::TransportRefused,
                        MState::Sent => CallError::OutcomeUnknown { phase: Phase::Sent },
                        MState::Accepted => CallError::OutcomeUnknown {
                            phase: Phase::Accepted,
                        },
                    };
                    expected.insert(id, Err(err));
                }
            }
            Ev::Cancel(n) => {
                let id = pick(&model, n);
                let _ = table.handle_cancel(id, now);
                if let Some(c) = model.pending.remove(&id) {
                    expected.insert(
                        id,
                        Err(CallError::Cancelled {
                            sent: c.state != MState::Issued,
                        }),
                    );
                }
            }
            Ev::Shutdown => {
                table.handle_shutdown(now);
                model.shut = true;
                for (id, c) in std::mem::take(&mut model.pending) {
                    expected.insert(
                        id,
                        Err(CallError::Shutdown {
                            sent: c.state != MState::Issued,
                        }),
                    );
                }
            }
            // The clock moves; the table hears nothing until the next input.
            Ev::Advance(d) => model.now += ms(d),
            Ev::Timeout => table.handle_timeout(now),
        }

        // Items in order, exactly those the model expects.
        let items: Vec<_> = std::iter::from_fn(|| table.poll_item())
            .map(|i| (i.id, i.seq, i.payload))
            .collect();
        prop_assert_eq!(items, items_expected, "items after {:?}", event);

        let got: Vec<Done> = drain(&mut table);
        let got_ids: Vec<CallId> = got.iter().map(|(id, _)| *id).collect();
        let got_map: BTreeMap<CallId, Result<Completion, CallError>> = got.into_iter().collect();
        prop_assert_eq!(
            got_map.len(),
            got_ids.len(),
            "one completion per call per poll"
        );
        prop_assert_eq!(&got_map, &expected, "completions after {:?}", event);
        for (id, result) in &got_map {
            prop_assert!(completed.insert(*id), "{} completed twice", id);
            prop_assert!(model.ids.contains(id), "completion for an id never issued");
            let facts = model.facts.get(id).cloned().unwrap_or_default();
            if let Err(err) = result {
                if !facts.left {
                    // Never sent: never "may have run".
                    prop_assert!(!may_have_run(err), "{} never left but {:?}", id, err);
                } else if !facts.by_reply {
                    // Sent, and failed locally: always "may have run".
                    prop_assert!(may_have_run(err), "{} left but {:?}", id, err);
                }
            }
        }

        // C5 gauges and the one wake-up, after every event.
        prop_assert_eq!(table.pending(), model.pending.len());
        for c in 1..=CONNS {
            let conn = ConnId(c);
            let n = model.pending.values().filter(|m| m.conn == conn).count();
            prop_assert_eq!(table.pending_on(conn), n);
        }
        let wake = model.pending.values().filter_map(|c| c.deadline).min();
        prop_assert_eq!(table.poll_timeout(), wake);
        prop_assert!(model.pending.keys().all(|&id| table.is_pending(id)));
    }

    // Exactly once: every call ever started completed, once; none is left.
    prop_assert_eq!(completed.len(), model.ids.len());
    prop_assert_eq!(table.pending(), 0);
    prop_assert_eq!(table.poll_timeout(), None);
    prop_assert_eq!(table.stats().started, model.ids.len() as u64);
    prop_assert_eq!(table.stats().completed, model.ids.len() as u64);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// C1, C2, C3, C5, C6: sent / send failed / accept on the right or wrong connection /
    /// items in and out of order / reply with every code / connection lost / cancel /
    /// shutdown / deadlines, duplicated, late and for unknown ids, in random orders for many
    /// calls: each call completes exactly once, with the result the specification gives,
    /// never "may have run" if it never left and always if it left and failed locally; the
    /// gauges and the wake-up match after every event.
    #[test]
    fn c1_c3_prop_every_call_completes_exactly_once_and_says_what_is_known(
        events in prop::collection::vec(ev(), 1..150)
    ) {
        run(&events)?;
    }
}
