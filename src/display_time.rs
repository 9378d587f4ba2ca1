//! The one place that reads the wall clock: rendering timestamps for humans.
//!
//! MISSION L7: every elapsed-time judgment uses the monotonic clock (`std::time::Instant`).
//! The wall clock is only used here, to turn a monotonic instant into a displayable
//! timestamp. `.ci/check-clock` and clippy's `disallowed-methods` (see `clippy.toml`) reject
//! wall-clock use anywhere else under `src/`.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Renders a monotonic instant as milliseconds since the Unix epoch, for display only.
///
/// The value is computed as "wall clock now" minus "monotonic time since `at`", so it is only
/// as right as the wall clock is at the moment of rendering. Nothing may compare or subtract
/// the returned values to judge elapsed time.
pub fn unix_millis(at: Instant, now: Instant) -> u64 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    wall.saturating_sub(now.saturating_duration_since(at).as_millis() as u64)
}
