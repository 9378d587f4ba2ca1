//! C1, C3, K6: one test per `CallError` variant, produced through the table, and the
//! `Ok` completion.

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use zmesh::proto::calls::{
    may_have_run, CallError, CallId, CallTable, Completion, Disposition, Phase, RemoteCode,
    Unrouted,
};
use zmesh::proto::wire::ReplyCode;
use zmesh::proto::ConnId;

use super::{accepted, drain, error_of, ms, only, secs, sent, A, B};

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
