//! C4: graceful stop on the serve side.

use std::time::{Duration, Instant};

use bytes::Bytes;
use zmesh::proto::calls::{
    may_have_run, Admission, CallError, CallId, CallShape, CallTable, Dispatch, ServeTable,
};
use zmesh::proto::wire::ReplyCode;
use zmesh::proto::ConnId;

use super::{accepted, drain, error_of, ms, nz, secs, sent, A, B};

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
