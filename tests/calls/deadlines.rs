//! C6: deadlines travel as a ttl; a server refuses a call whose ttl ran out.

use std::time::{Duration, Instant};

use bytes::Bytes;
use zmesh::proto::calls::{
    may_have_run, ttl_on_wire, Admission, CallError, CallShape, CallTable, Completion, Dispatch,
    ServeTable,
};
use zmesh::proto::wire::ReplyCode;

use super::{accepted, error_of, ms, nz, only, secs, sent, A};

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
