//! Classic fanout liveness: the subscriber's watch of one publisher (MISSION L5) and the
//! publisher's beacon schedule (MISSION L4).

use std::collections::VecDeque;
use std::time::Instant;

use serde::Serialize;

use super::timer::{after, next_tick, Timer, TimerTable};
use super::{COALESCE_WINDOW, PEER_DEADLINE, PROBE_INTERVAL};

/// One message received on a publisher's SUB socket, already classified by the wire codec.
///
/// The codec owns the byte rules (beacon topic `01 5A 4C 46 31`, payload `5A 46 01 01`,
/// exactly two frames); this module only needs the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutInput {
    /// An exact liveness beacon.
    Beacon,
    /// A well-formed application record.
    Record,
    /// A well-formed PUBPACK (WIRE.md §7.5) of `records` application records: one receipt,
    /// after which each of its records is delivered.
    Pack {
        /// How many records it carries.
        records: u16,
    },
    /// Anything else.
    Malformed {
        /// The topic was the reserved beacon topic but the payload or frame count was wrong.
        reserved_topic: bool,
    },
}

impl FanoutInput {
    /// The input a message is, from what the wire codec made of it: `Ok(true)` the exact
    /// beacon, `Ok(false)` a well-formed record, `Err` the codec's error (a malformed message
    /// on the reserved beacon topic is told apart: it is a protocol error of the publisher).
    pub fn from_decoded(decoded: Result<bool, &crate::proto::wire::WireError>) -> FanoutInput {
        match decoded {
            Ok(true) => FanoutInput::Beacon,
            Ok(false) => FanoutInput::Record,
            Err(e) => FanoutInput::Malformed {
                reserved_topic: e.class() == "reserved_topic",
            },
        }
    }
}

/// What the shell must do with a message after [`PublisherWatch::handle_input`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Delivery {
    /// A valid application record: hand it to the application (and count it in application
    /// metrics); for a [`FanoutInput::Pack`], each of its records.
    Deliver,
    /// A beacon: liveness evidence only. Never delivered, dispatched, traced as an
    /// application message, counted in application metrics or acknowledged.
    Consume,
    /// A protocol error: deliver nothing. The publisher became not-ready at once and a
    /// [`PublisherEvent::ProtocolError`] is queued; the shell closes this publisher's socket.
    ProtocolError(FanoutProtocolError),
    /// The watch already failed (its socket is being closed): a late frame from the old
    /// socket, dropped without effect.
    Discard,
}

/// Why a fanout message was a protocol error (MISSION L5, W3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FanoutProtocolError {
    /// The reserved beacon topic with a wrong payload or frame count.
    #[error("reserved beacon topic with a wrong payload or frame count")]
    MalformedBeacon,
    /// A malformed application record.
    #[error("malformed fanout record")]
    MalformedRecord,
}

/// What a [`PublisherWatch`] reports to the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublisherEvent {
    /// The first valid record or beacon on this socket: the publisher is ready.
    BecameReady,
    /// 15 s without a valid record or beacon: the publisher is not-ready; close this socket
    /// and create a new one (MISSION F1, reason `fanout_silence`).
    Silence {
        /// The last valid receipt on this socket; `None` if it never spoke (the 15 s then ran
        /// from socket creation).
        last_receive_at: Option<Instant>,
    },
    /// A protocol error: the publisher is not-ready; close this socket and create a new one
    /// (MISSION F1, reason `protocol_error`).
    ProtocolError(FanoutProtocolError),
}

/// Where a [`PublisherWatch`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PublisherStatus {
    /// Socket created, nothing valid received yet: not ready.
    Waiting,
    /// At least one valid record or beacon received within the last 15 s.
    Ready,
    /// Silence or protocol error: not ready; the socket must be replaced.
    Failed,
}

/// Diagnostic counters of one [`PublisherWatch`], kept across [`PublisherWatch::reset`].
///
/// These are liveness diagnostics, not application metrics: beacons appear here only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PublisherStats {
    /// Beacons consumed.
    pub beacons: u64,
    /// Application records delivered (each record of a PUBPACK counts).
    pub records: u64,
    /// Protocol errors (each failed a socket).
    pub protocol_errors: u64,
    /// Silence verdicts (each failed a socket).
    pub silences: u64,
    /// Times the watch became ready.
    pub readies: u64,
    /// Sockets watched: 1 at creation, +1 per [`PublisherWatch::reset`].
    pub sockets: u64,
    /// Frames discarded because the watch had already failed.
    pub discarded: u64,
}

/// Liveness of one fanout publisher, i.e. of one dedicated SUB socket (MISSION L5).
///
/// # Lifecycle
///
/// Created (or [`reset`](Self::reset)) when the shell creates the SUB socket for the
/// publisher: [`PublisherStatus::Waiting`], not ready. The first valid record or exact beacon
/// makes it ready; every valid record or beacon moves the silence deadline to `now + 15 s`.
///
/// The silence timer also runs while waiting, from socket creation: a publisher that never
/// speaks (wrong endpoint, dead process, subscription lost) gets its socket recreated every
/// 15 s, exactly as a publisher that fell silent after speaking. The deadline is inclusive.
///
/// Silence or a protocol error fails the watch: it queues one event, stops its timer and
/// turns inert ([`Delivery::Discard`] for late frames). The shell closes the socket, opens a
/// new one for the same publisher and calls [`Self::reset`] with the new socket's creation
/// time. Reset rather than re-creation keeps the diagnostic counters for the publisher; the
/// readiness state starts over (MISSION F4: nothing of the old socket's ready state is
/// reused).
#[derive(Debug, Clone)]
pub struct PublisherWatch {
    status: PublisherStatus,
    socket_at: Instant,
    ready_at: Option<Instant>,
    last_receive_at: Option<Instant>,
    timers: TimerTable,
    events: VecDeque<PublisherEvent>,
    stats: PublisherStats,
}

impl PublisherWatch {
    /// A watch for a SUB socket created at `now`.
    pub fn new(now: Instant) -> Self {
        let mut watch = Self {
            status: PublisherStatus::Waiting,
            socket_at: now,
            ready_at: None,
            last_receive_at: None,
            timers: TimerTable::default(),
            events: VecDeque::new(),
            stats: PublisherStats::default(),
        };
        watch.reset(now);
        watch
    }

    /// Starts over for a new SUB socket created at `now`: waiting, silence deadline
    /// `now + 15 s`, undrained events of the old socket dropped. Counters are kept.
    pub fn reset(&mut self, now: Instant) {
        self.status = PublisherStatus::Waiting;
        self.socket_at = now;
        self.ready_at = None;
        self.last_receive_at = None;
        self.events.clear();
        self.timers.stop_all();
        self.timers
            .set(Timer::FanoutSilence, after(now, PEER_DEADLINE));
        self.stats.sockets += 1;
    }

    /// Judges one classified message received on this publisher's socket at `now`.
    #[must_use = "the shell acts on what this returns"]
    pub fn handle_input(&mut self, input: FanoutInput, now: Instant) -> Delivery {
        self.handle_timeout(now);
        if self.status == PublisherStatus::Failed {
            self.stats.discarded += 1;
            return Delivery::Discard;
        }
        let delivery = match input {
            FanoutInput::Beacon => {
                self.stats.beacons += 1;
                Delivery::Consume
            }
            FanoutInput::Record => {
                self.stats.records += 1;
                Delivery::Deliver
            }
            FanoutInput::Pack { records } => {
                self.stats.records += u64::from(records);
                Delivery::Deliver
            }
            FanoutInput::Malformed { reserved_topic } => {
                let error = if reserved_topic {
                    FanoutProtocolError::MalformedBeacon
                } else {
                    FanoutProtocolError::MalformedRecord
                };
                self.stats.protocol_errors += 1;
                self.fail(PublisherEvent::ProtocolError(error));
                return Delivery::ProtocolError(error);
            }
        };
        self.last_receive_at = Some(now);
        self.timers
            .set(Timer::FanoutSilence, after(now, PEER_DEADLINE));
        if self.status == PublisherStatus::Waiting {
            self.status = PublisherStatus::Ready;
            self.ready_at = Some(now);
            self.stats.readies += 1;
            self.events.push_back(PublisherEvent::BecameReady);
        }
        delivery
    }

    /// Applies the silence deadline if it expired at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timers.is_expired(Timer::FanoutSilence, now) {
            self.stats.silences += 1;
            self.fail(PublisherEvent::Silence {
                last_receive_at: self.last_receive_at,
            });
        }
    }

    fn fail(&mut self, event: PublisherEvent) {
        self.status = PublisherStatus::Failed;
        self.timers.stop_all();
        self.events.push_back(event);
    }

    /// The next event for the shell, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<PublisherEvent> {
        self.events.pop_front()
    }

    /// When the silence deadline falls; `None` once failed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Where the watch stands.
    pub fn status(&self) -> PublisherStatus {
        self.status
    }

    /// Whether the publisher is ready.
    pub fn is_ready(&self) -> bool {
        self.status == PublisherStatus::Ready
    }

    /// When the current socket was created.
    pub fn socket_at(&self) -> Instant {
        self.socket_at
    }

    /// When the current socket became ready, if it did.
    pub fn ready_at(&self) -> Option<Instant> {
        self.ready_at
    }

    /// The last valid record or beacon on the current socket.
    pub fn last_receive_at(&self) -> Option<Instant> {
        self.last_receive_at
    }

    /// Diagnostic counters.
    pub fn stats(&self) -> &PublisherStats {
        &self.stats
    }
}

/// The publisher side of fanout liveness: a beacon every 5 s whatever else is sent
/// (MISSION L4).
///
/// The first beacon is due at once (at bind), so subscribers that are already connected
/// become ready without waiting a full interval; later beacons fall on the fixed grid
/// `bind + k * 5 s`. (The runtime also sends a beacon when a subscriber joins, WIRE.md §7.1;
/// such beacons are outside this schedule and do not move its grid.) Application records never postpone a beacon. A wake-up that comes late
/// sends one beacon, not one per missed tick.
#[derive(Debug, Clone)]
pub struct BeaconSchedule {
    timers: TimerTable,
    due: bool,
    sent: u64,
}

impl BeaconSchedule {
    /// A schedule for a PUB socket bound at `now`; the first beacon is due at `now`.
    pub fn new(now: Instant) -> Self {
        let mut timers = TimerTable::default();
        timers.set(Timer::Beacon, now);
        Self {
            timers,
            due: false,
            sent: 0,
        }
    }

    /// Marks a beacon due if its tick is at or before `now` and moves the timer to the next
    /// tick. Calling it is optional: [`Self::poll_transmit`] applies it itself.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(tick) = self.timers.get(Timer::Beacon).filter(|&tick| tick <= now) {
            self.timers
                .set(Timer::Beacon, next_tick(tick, now, PROBE_INTERVAL));
            self.due = true;
        }
    }

    /// Like [`Self::handle_timeout`], and also marks the next beacon due now if its tick falls
    /// within [`COALESCE_WINDOW`] after `now` (MISSION L1, L4): it goes out at most the window
    /// early, never late, and the grid `bind + k * 5 s` stays where it is.
    pub fn handle_timeout_coalesced(&mut self, now: Instant) {
        let horizon = after(now, COALESCE_WINDOW);
        if let Some(tick) = self
            .timers
            .get(Timer::Beacon)
            .filter(|&tick| tick <= horizon)
        {
            self.timers
                .set(Timer::Beacon, next_tick(tick, now, PROBE_INTERVAL));
            self.due = true;
        }
    }

    /// Whether to send one beacon now (the two exact frames of MISSION L4).
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> bool {
        self.handle_timeout(now);
        let due = std::mem::take(&mut self.due);
        if due {
            self.sent += 1;
        }
        due
    }

    /// Whether a beacon is due at `now` and not sent yet.
    pub fn is_due(&self, now: Instant) -> bool {
        self.due || self.timers.is_expired(Timer::Beacon, now)
    }

    /// When the next beacon is due. Always `Some`: a schedule runs until dropped.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Beacons handed out so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// MISSION L5, X4: a well-formed PUBPACK is one valid receipt: it makes a waiting
    /// publisher ready and moves the silence deadline to 15 s after it, and its records
    /// count in the statistics one by one.
    #[test]
    fn l5_x4_a_pack_is_one_receipt_that_counts_its_records() {
        let t0 = Instant::now();
        let mut w = PublisherWatch::new(t0);
        let t1 = t0 + Duration::from_secs(10);
        let d = w.handle_input(FanoutInput::Pack { records: 5 }, t1);
        assert_eq!(d, Delivery::Deliver);
        assert_eq!(w.poll_event(), Some(PublisherEvent::BecameReady));
        assert_eq!(w.last_receive_at(), Some(t1));
        assert_eq!(w.poll_timeout(), Some(t1 + PEER_DEADLINE));
        assert_eq!(w.stats().records, 5);
        w.handle_timeout(t1 + PEER_DEADLINE - Duration::from_millis(1));
        assert!(w.is_ready(), "the pack moved the deadline");
    }
}
