//! Running out of descriptors, as one part: the figures read from the OS and the episode
//! being logged. When the episode's warning is logged is the core's ([`Episode`]), and so
//! is what one failure does to a link ([`crate::proto::node::core::exhaustion`]). What the
//! node does about it is the thread's (`io/exhaustion.rs`, whose module docs describe the whole rule).

use std::time::Instant;

use crate::proto::node::core::exhaustion::Episode;
use crate::runtime::fds::{Exhausted, Gauge};

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
    /// The running episode and its warnings.
    pub(crate) episode: Episode,
}
