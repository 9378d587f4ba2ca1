//! Running out of descriptors, as one part: the figures and the episode being logged (how one
//! failure is recorded on a link's state is the core's,
//! [`record_exhausted`](crate::proto::node::link::record_exhausted)). What the node does
//! about it is the thread's (`io/exhaustion.rs`, whose module docs describe the whole rule).

use std::time::{Duration, Instant};

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
