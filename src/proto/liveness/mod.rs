//! Liveness state machines (MISSION L1-L8; WIRE.md §5.2, §7.1, §7.3).
//!
//! | machine | watches | evidence | verdict |
//! |---|---|---|---|
//! | [`ProbeTracker`] | one RouteMesh lane or ClientServer connection | first ACK of the pending probe id on the same connection | [`ProbeEvent::DeadlineExceeded`] |
//! | [`PublisherWatch`] | one fanout publisher (one SUB socket) | a valid record or an exact beacon | [`PublisherEvent::Silence`], [`PublisherEvent::ProtocolError`] |
//! | [`BeaconSchedule`] | one PUB socket of this node | - | a beacon every 5 s |
//! | [`Liveness`] | all of the above for one node | - | one wake-up time, one event queue |
//!
//! # Fixed timing (MISSION L1)
//!
//! [`PROBE_INTERVAL`] and [`PEER_DEADLINE`] are constants. No constructor, builder, setter or
//! configuration field takes a duration, and every topology uses the same two values. Tests
//! shorten nothing: they drive a manual clock.
//!
//! # Determinism
//!
//! Nothing here reads a clock. Inputs carry `now`, outputs are polled, and each machine
//! reports its next wake-up through `poll_timeout()`; all deadlines of a machine live in one
//! timer table. Deadlines are inclusive: a verdict due at `t` is reached by
//! `handle_timeout(t)` and by no earlier instant.
//!
//! # Internal signals (MISSION L3)
//!
//! Probes, ACKs and beacons never reach the application: the shell answers a PROBE by echoing
//! its id in an ACK (receiving a probe touches none of the receiver's own liveness state),
//! feeds ACKs to [`ProbeTracker::handle_ack`], and hands a fanout message to the application
//! only when [`PublisherWatch::handle_input`] says [`Delivery::Deliver`].

use std::time::Duration;

mod fanout;
mod probe;
mod table;
mod timer;

pub use fanout::{
    BeaconSchedule, Delivery, FanoutInput, FanoutProtocolError, PublisherEvent, PublisherStats,
    PublisherStatus, PublisherWatch,
};
pub use probe::{AckOutcome, ProbeEvent, ProbeIdSource, ProbeStats, ProbeTracker};
pub use table::{EntryKind, LinkKey, Liveness, LivenessError, LivenessEvent, Transmit};

/// Interval between probe cycles on a connection and between beacons on a PUB socket
/// (MISSION L1, L2, L4). Fixed for every topology; not configurable.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// How long a connection stays ready without an accepted ACK, and a publisher without a valid
/// record or beacon (MISSION L1, L2, L5). Fixed for every topology; not configurable.
pub const PEER_DEADLINE: Duration = Duration::from_secs(15);

/// How long before its instant on the 5 s grid a probe cycle or a beacon may start, so that
/// one wake-up serves every probe and beacon due that close together (see "Coalescing"
/// above). Deadlines never start early. Fixed; not configurable (MISSION L1).
pub const COALESCE_WINDOW: Duration = Duration::from_millis(10);
