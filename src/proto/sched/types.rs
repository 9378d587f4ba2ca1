//! The scheduler's public types: its caps, the ids and requests it hands the shell, the
//! actions it returns, and its statistics.

use std::fmt;
use std::time::Duration;

#[cfg(doc)]
use super::ReceiveScheduler;
use super::{RECEIVE_BYTE_CAP, RECEIVE_COUNT_CAP, RECEIVE_TIME_CAP, ROTATION_TIME_CAP};

/// The caps a [`ReceiveScheduler`] applies.
///
/// The runtime uses [`Caps::default`], which holds [`RECEIVE_COUNT_CAP`], [`RECEIVE_BYTE_CAP`],
/// [`RECEIVE_TIME_CAP`] and [`ROTATION_TIME_CAP`]. The setters exist so tests can provoke each
/// cap with small numbers; the count cap has no setter, it is always 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub(super) bytes: usize,
    pub(super) unit_time: Duration,
    pub(super) rotation_time: Duration,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            bytes: RECEIVE_BYTE_CAP,
            unit_time: RECEIVE_TIME_CAP,
            rotation_time: ROTATION_TIME_CAP,
        }
    }
}

impl Caps {
    /// Records per unit per turn: always [`RECEIVE_COUNT_CAP`].
    pub fn count(&self) -> usize {
        RECEIVE_COUNT_CAP
    }

    /// Bytes per unit per turn, also the per-peer staging byte bound.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Elapsed time per turn (unit turn or read phase).
    pub fn unit_time(&self) -> Duration {
        self.unit_time
    }

    /// Elapsed time per rotation.
    pub fn rotation_time(&self) -> Duration {
        self.rotation_time
    }

    /// Sets the byte cap (0 means one record per turn).
    #[must_use]
    pub fn with_bytes(mut self, bytes: usize) -> Self {
        self.bytes = bytes;
        self
    }

    /// Sets the per-turn time cap (zero means one action per turn).
    #[must_use]
    pub fn with_unit_time(mut self, cap: Duration) -> Self {
        self.unit_time = cap;
        self
    }

    /// Sets the per-rotation time cap (zero means one action per rotation).
    #[must_use]
    pub fn with_rotation_time(mut self, cap: Duration) -> Self {
        self.rotation_time = cap;
        self
    }
}

/// Handle of a shared socket registered with [`ReceiveScheduler::add_shared_socket`].
///
/// Allocated by the scheduler and never reused by it; the shell maps it to its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharedSocketId(pub(super) u64);

impl fmt::Display for SharedSocketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shared{}", self.0)
    }
}

/// Where a unit's records come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// A socket of its own that carries this unit's records only; read in the unit's turn.
    Single,
    /// A peer behind a shared socket; read in that socket's read phase and staged.
    Shared(SharedSocketId),
}

/// One entry of the ring: a unit's turn or a shared socket's read phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RingEntry<U> {
    /// The turn of a unit (single-peer, or a peer behind a shared socket).
    Unit(U),
    /// The read phase of a shared socket.
    ReadPhase(SharedSocketId),
}

/// What a read must target: a unit's own socket or a shared socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadTarget<U> {
    /// The single-peer socket of this unit.
    Unit(U),
    /// This shared socket; the shell attributes the record to a peer by its routing id.
    Shared(SharedSocketId),
}

/// A request to read one record, without blocking, from [`ReadRequest::target`].
///
/// The shell answers it with [`ReceiveScheduler::handle_read`] (a record came) or
/// [`ReceiveScheduler::handle_would_block`] (the socket had nothing). It cannot be cloned or
/// built outside the scheduler, so each read is answered at most once. Dropping it
/// unanswered is allowed (for example on a socket error, after removing the unit): the next
/// [`ReceiveScheduler::poll_action`] simply goes on with the turn.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "answer the read with handle_read or handle_would_block"]
pub struct ReadRequest<U> {
    pub(super) target: ReadTarget<U>,
    pub(super) turn: u64,
}

impl<U: Copy> ReadRequest<U> {
    /// The socket to read.
    pub fn target(&self) -> ReadTarget<U> {
        self.target
    }
}

/// What the shell does next, from [`ReceiveScheduler::poll_action`].
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Action<U, R> {
    /// Process this record of `unit` now (decode it, run the liveness or call logic), then
    /// poll again.
    Deliver {
        /// The unit the record belongs to (the turn's unit).
        unit: U,
        /// The record, as the shell handed it to [`ReceiveScheduler::handle_read`].
        record: R,
    },
    /// Read one record without blocking and report the outcome, then poll again.
    Read(ReadRequest<U>),
    /// The rotation ended. Service timers and commands, wait for socket readiness (as long
    /// as the next timer allows if [`RotationEnd::is_idle`], else without waiting), then poll
    /// again to start the next rotation.
    Yield(RotationEnd),
}

/// Why a rotation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RotationEndReason {
    /// Every entry of the ring had its turn.
    Complete,
    /// [`Caps::rotation_time`] elapsed; the next rotation resumes right after the entry whose
    /// turn was cut.
    TimeCap,
}

/// Summary of one finished rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RotationEnd {
    /// Number of the rotation (the first is 1).
    pub rotation: u64,
    /// Why it ended.
    pub reason: RotationEndReason,
    /// Turns begun (unit turns and read phases, including those with nothing to do).
    pub turns: u64,
    /// Records handed out.
    pub delivered: u64,
    /// Bytes handed out.
    pub bytes: u64,
    /// Records the shell reported read (from any socket).
    pub records_read: u64,
}

impl RotationEnd {
    /// Whether the rotation went all the way round without reading or handing out anything:
    /// the shell may block until a socket is readable or a timer is due.
    pub fn is_idle(&self) -> bool {
        self.reason == RotationEndReason::Complete && self.delivered == 0 && self.records_read == 0
    }
}

/// Per-unit diagnostic counters, from [`ReceiveScheduler::unit_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnitStats {
    /// Records handed out since the unit was added.
    pub records: u64,
    /// Bytes handed out since the unit was added.
    pub bytes: u64,
    /// Turns begun (one per rotation that reached the unit), including empty ones.
    pub turns: u64,
    /// Turns ended by the count cap.
    pub count_cap_hits: u64,
    /// Turns ended by the byte cap.
    pub byte_cap_hits: u64,
    /// Turns ended by the per-turn time cap.
    pub time_cap_hits: u64,
    /// Turns cut because the rotation reached its time cap.
    pub rotation_cap_cuts: u64,
    /// Records staged now, not yet handed out.
    pub staged: usize,
    /// Bytes staged now.
    pub staged_bytes: usize,
    /// Most records ever staged at once.
    pub staged_peak: usize,
}

/// Per-shared-socket diagnostic counters, from [`ReceiveScheduler::socket_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketStats {
    /// Read phases begun.
    pub phases: u64,
    /// Records read from the socket (reported through [`ReceiveScheduler::handle_read`]).
    pub records_read: u64,
    /// Bytes of those records.
    pub bytes_read: u64,
    /// Read phases ended because a peer's staging queue was full.
    pub staging_full_stops: u64,
    /// Read phases ended by the per-turn time cap.
    pub time_cap_hits: u64,
    /// Read phases cut because the rotation reached its time cap.
    pub rotation_cap_cuts: u64,
    /// Peers registered behind the socket now.
    pub peers: usize,
}

/// Why [`ReceiveScheduler::add_unit`] refused a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddUnitError {
    /// The unit is already registered.
    #[error("unit already registered")]
    AlreadyPresent,
    /// The shared socket it names is not registered.
    #[error("shared socket {0} is not registered")]
    UnknownSocket(SharedSocketId),
}

/// Why [`ReceiveScheduler::handle_read`] refused a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RejectReason {
    /// The owner is not a registered unit (for example a routing id with no unit yet).
    #[error("owner is not a registered unit")]
    UnknownUnit,
    /// The owner is not behind the socket that was read.
    #[error("owner is not behind the socket that was read")]
    WrongSocket,
}

/// A record [`ReceiveScheduler::handle_read`] refused, handed back with its read request.
///
/// The shell may register the owner (for example as a newly admitted peer of a shared socket)
/// and call [`ReceiveScheduler::handle_read`] again with [`Rejected::into_parts`], or drop the
/// record.
#[derive(Debug, thiserror::Error)]
#[error("record refused: {reason}")]
pub struct Rejected<U, R> {
    pub(super) read: ReadRequest<U>,
    pub(super) record: R,
    pub(super) reason: RejectReason,
}

impl<U, R> Rejected<U, R> {
    /// Why the record was refused.
    pub fn reason(&self) -> RejectReason {
        self.reason
    }

    /// The read request (still answerable) and the record.
    pub fn into_parts(self) -> (ReadRequest<U>, R) {
        (self.read, self.record)
    }
}
