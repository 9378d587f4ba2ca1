//! C2, C5: a call is a lease on the connection that accepted it; the pending gauge per
//! node and per connection.

use std::time::Instant;

use bytes::Bytes;
use zmesh::proto::calls::{may_have_run, CallError, CallState, CallTable, Disposition, Phase};
use zmesh::proto::wire::ReplyCode;
use zmesh::proto::ConnId;

use super::{accepted, drain, error_of, ms, only, secs, sent, A, B};

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
