//! Call scenarios over the public sans-IO API (MISSION C1-C6, K6), with a manual clock.
//! Every test names the requirement it proves.
//!
//! Time: `t0` is read once per test; every later instant is `t0 + Duration`. Nothing sleeps,
//! so a 30 s call runs in microseconds.
//!
//! One module per topic, in tests/calls/: `errors` (one test per `CallError` variant),
//! `lease` (C2, C5), `deadlines` (C6), `drain` (C4, the serve side) and `model` (every caller
//! event in random orders against a reference model). The helpers below are theirs.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use zmesh::proto::calls::{CallError, CallId, CallTable, Completion, Disposition};
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

#[path = "calls/deadlines.rs"]
mod deadlines;
#[path = "calls/drain.rs"]
mod drain;
#[path = "calls/errors.rs"]
mod errors;
#[path = "calls/lease.rs"]
mod lease;
#[path = "calls/model.rs"]
mod model;
