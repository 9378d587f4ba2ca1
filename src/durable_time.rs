//! The wall clock for expiry dates of durable records, and for nothing else.
//!
//! MISSION L7: every elapsed-time judgment of the protocol uses the monotonic clock
//! (`std::time::Instant`). A record written to disk has to outlive the process that wrote it,
//! and with it that process's monotonic clock, whose epoch means nothing to the next run. Its
//! expiry date can therefore only be written in wall-clock terms. This module is the one
//! place outside [`crate::display_time`] allowed to read the wall clock (`.ci/check-clock`
//! lists it); liveness, deadlines, ttl and every other timer must never call it.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, read from the wall clock.
///
/// Used ONLY for the expiry dates of durable records that must survive a restart (the
/// SQLite idempotency store, MISSION K3), never for liveness or any elapsed-time judgment of
/// the protocol. A wall clock stepped backwards keeps a record a little longer and one
/// stepped forwards drops it a little earlier; that is the price of a date that means the
/// same thing to the next process. A clock set before 1970 reads as 0, which keeps every
/// record already on disk alive rather than expiring it early.
pub(crate) fn unix_millis_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Milliseconds from the wall-clock instant `t_ms` (Unix milliseconds) to now; 0 if `t_ms` is
/// in the future.
///
/// Used ONLY for the age of a lease renewal written by another process into a store shared
/// by processes (the SQLite descriptor store: "renewed 812 ms ago" in `zmesh peers`), where no
/// monotonic clock is common to writer and reader. Display and expiry of durable records
/// only, never a liveness judgment.
pub(crate) fn millis_since_unix(t_ms: u64) -> u64 {
    unix_millis_now().saturating_sub(t_ms)
}

/// Milliseconds from now to the wall-clock instant `t_ms` (Unix milliseconds); 0 if it has
/// passed. The same restriction as [`millis_since_unix`]: a durable record's expiry, for
/// display.
pub(crate) fn millis_until_unix(t_ms: u64) -> u64 {
    t_ms.saturating_sub(unix_millis_now())
}
