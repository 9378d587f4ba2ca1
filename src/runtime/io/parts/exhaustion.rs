//! Running out of descriptors, as one part: the figures and the episode being logged, and how
//! one failure is recorded on a link's state. What the node does about it is the thread's
//! (`io/exhaustion.rs`, whose module docs describe the whole rule).

use std::time::{Duration, Instant};

use crate::proto::node::link::{backoff, note};
use crate::proto::state::{ConnState, FailureReason, LinkState, Recovery};
use crate::runtime::fds::{Exhausted, Gauge};

/// Shortest time between two episode warnings: a node that runs out again and again logs
/// once per this, with the count of what it left out.
pub const EPISODE_LOG_MIN: Duration = Duration::from_secs(10);

/// Running out of descriptors: the figures and the episode (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Exhaustion {
    /// Descriptors open and the limit, read at most once per [`Gauge::TTL`].
    pub(crate) gauge: Gauge,
    /// Descriptors open at start, after the binds: left out of the figure per connection.
    pub(crate) base: u64,
    /// The cause of the last failure and when it was worked out, reused for
    /// [`Gauge::TTL`]: a node that runs out fails many dials in a short time.
    pub(crate) last: Option<(Instant, Exhausted)>,
    /// An episode is running: no socket opened since the last failure.
    pub(crate) active: bool,
    /// Failures in the running episode.
    pub(crate) failures: u64,
    /// When the last episode warning was logged.
    pub(crate) logged_at: Option<Instant>,
    /// Failures not logged since that warning (episodes inside [`EPISODE_LOG_MIN`]).
    pub(crate) unlogged: u64,
}

/// Records a `resource_exhausted` failure on a link's or a subscription's state (every time:
/// the snapshot shows the latest figures and the count) and counts it for the backoff.
/// Returns when to try again and whether this is the episode's first failure.
pub(crate) fn record_exhausted(
    state: &mut LinkState,
    failures_in_row: &mut u32,
    detail: &str,
    now: Instant,
) -> (Instant, bool) {
    *failures_in_row = failures_in_row.saturating_add(1);
    let first = !(state.state() == ConnState::Reconnecting
        && state
            .last_failure()
            .is_some_and(|f| f.reason == FailureReason::ResourceExhausted));
    note(state.handle_failure(
        FailureReason::ResourceExhausted,
        detail,
        Recovery::Reconnect,
        now,
    ));
    (now + backoff(*failures_in_row), first)
}
