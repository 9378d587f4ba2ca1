//! The owner lease (MISSION D3, F5): a node's descriptor lives in the store under a lease of
//! [`LEASE_TTL`] that the node renews every [`LEASE_RENEW_INTERVAL`], on its own schedule.
//!
//! The lease and transport liveness never look at each other (MISSION D3, F5):
//!
//! - the renewal interval (4 s) is not the probe interval (5 s) and no option merges them;
//! - a probe, ACK or beacon never renews or re-validates a lease: only the store's answer to a
//!   renewal does;
//! - a lost lease or an unreachable store is an event and a snapshot field, never a change of
//!   any link's readiness: ready links stay ready, probes go on;
//! - a liveness verdict never releases the lease: only the node's own lifecycle does (an
//!   orderly stop removes the descriptor).
//!
//! [`LeaseKeeper`] is the schedule and the verdicts. It asks the shell for one store operation
//! at a time ([`LeaseKeeper::poll_op`]); the shell runs it and hands the answer back. Times
//! are monotonic `now`s: a renewal counts from the instant it was *issued*, so the store's own
//! expiry (set when the store received it, later) is never earlier than the keeper believes.
//! The keeper judges the lease lost on its own when no renewal was confirmed for a whole TTL
//! (the store is unreachable: it cannot know, so it assumes the worst). Stores may keep a
//! lease longer than its TTL (etcd stretches leases across a leader change): expiry is
//! never treated as a precise clock, only as "not before".

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

/// How long the store keeps a descriptor without a renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(20);

/// How often the lease is renewed: five renewals per TTL, so four in a row may fail before the
/// lease can expire. Deliberately not the probe interval (5 s, WIRE.md §5.2; MISSION D3).
pub const LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(4);

/// How soon a store operation that failed is tried again.
pub const STORE_RETRY: Duration = Duration::from_secs(1);

/// The store operation the shell must run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreOp {
    /// Publish the descriptor under a fresh lease.
    Put,
    /// Renew the current lease.
    Renew,
    /// Read the descriptors (the watch).
    Watch,
    /// Remove the descriptor (orderly stop).
    Remove,
}

impl StoreOp {
    /// Stable snake_case name (a metric label value: a fixed set, never an identity).
    pub fn as_str(&self) -> &'static str {
        match self {
            StoreOp::Put => "put",
            StoreOp::Renew => "renew",
            StoreOp::Watch => "watch",
            StoreOp::Remove => "remove",
        }
    }
}

/// Where the lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseStatus {
    /// Not published yet (the first put has not succeeded).
    Acquiring,
    /// The store confirmed the lease less than a TTL ago.
    Held,
    /// The store said the lease is gone, or no renewal was confirmed for a TTL; the keeper
    /// keeps trying to get it back.
    Lost,
    /// Another process run of this RID published its descriptor over ours: the keeper stops
    /// publishing (the newer run owns the RID).
    Superseded,
    /// The node removed its descriptor (orderly stop).
    Released,
}

impl LeaseStatus {
    /// Stable snake_case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            LeaseStatus::Acquiring => "acquiring",
            LeaseStatus::Held => "held",
            LeaseStatus::Lost => "lost",
            LeaseStatus::Superseded => "superseded",
            LeaseStatus::Released => "released",
        }
    }
}

/// The store's answer to a renewal that reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewOutcome {
    /// Renewed for another TTL.
    Renewed,
    /// The lease (and the descriptor) is gone: expired or removed.
    Lost,
    /// The descriptor of this RID now belongs to another process run (`generation`).
    Superseded {
        /// The other run's generation.
        generation: u64,
    },
}

/// Why the lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LostReason {
    /// The store answered that the lease no longer exists.
    Expired,
    /// No renewal was confirmed for a whole TTL (the store could not be reached).
    NotRenewed,
}

/// What the keeper reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEvent {
    /// The descriptor is published under a lease (first time, or again after a loss).
    Acquired,
    /// The lease is lost; the keeper tries to publish again.
    Lost(LostReason),
    /// Another run of this RID holds the descriptor; this node stops publishing.
    Superseded {
        /// The other run's generation.
        generation: u64,
    },
    /// A store operation failed after the store had answered (or before it ever did).
    StoreUnreachable {
        /// The operation.
        op: StoreOp,
        /// The store's error, for humans.
        error: String,
    },
    /// The store answers again.
    StoreReachable,
}

/// The owner lease's schedule and verdicts (see the module doc).
#[derive(Debug, Clone)]
pub struct LeaseKeeper {
    status: LeaseStatus,
    /// Issue instant of the last put or renewal the store confirmed.
    confirmed_at: Option<Instant>,
    /// The operation in flight and when it was issued.
    in_flight: Option<(StoreOp, Instant)>,
    /// When the next operation is due (none while one is in flight or after the end).
    next_at: Option<Instant>,
    /// Whether the last answer came from the store (`None` before the first).
    reachable: Option<bool>,
    events: VecDeque<LeaseEvent>,
}

impl LeaseKeeper {
    /// A keeper that wants to publish at `now`.
    pub fn new(now: Instant) -> LeaseKeeper {
        LeaseKeeper {
            status: LeaseStatus::Acquiring,
            confirmed_at: None,
            in_flight: None,
            next_at: Some(now),
            reachable: None,
            events: VecDeque::new(),
        }
    }

    /// Where the lease stands.
    pub fn status(&self) -> LeaseStatus {
        self.status
    }

    /// Whether the store answered the last operation (`None` before any answer).
    pub fn store_reachable(&self) -> Option<bool> {
        self.reachable
    }

    /// Time since the store last confirmed the lease (from the issue of that operation).
    pub fn age(&self, now: Instant) -> Option<Duration> {
        self.confirmed_at.map(|t| now.saturating_duration_since(t))
    }

    /// The operation to run now, if one is due; it counts as issued at `now` until its
    /// answer is handed back.
    #[must_use]
    pub fn poll_op(&mut self, now: Instant) -> Option<StoreOp> {
        if self.in_flight.is_some() || self.next_at.is_none_or(|t| now < t) {
            return None;
        }
        let op = match self.status {
            LeaseStatus::Acquiring => StoreOp::Put,
            // Lost by the store's word: publish again. Lost by silence: the lease may still
            // be there (leases stretch), so renew first; the store says which.
            LeaseStatus::Lost if self.confirmed_at.is_none() => StoreOp::Put,
            LeaseStatus::Held | LeaseStatus::Lost => StoreOp::Renew,
            LeaseStatus::Superseded | LeaseStatus::Released => return None,
        };
        self.in_flight = Some((op, now));
        self.next_at = None;
        Some(op)
    }

    /// The answer to a put: `Err` carries the store's error for humans.
    pub fn handle_put(&mut self, result: Result<(), String>, now: Instant) {
        let Some((StoreOp::Put, issued)) = self.in_flight.take() else {
            return;
        };
        match result {
            Ok(()) => {
                self.answered();
                self.confirmed_at = Some(issued);
                self.next_at = Some(issued + LEASE_RENEW_INTERVAL);
                if self.status != LeaseStatus::Held {
                    self.status = LeaseStatus::Held;
                    self.events.push_back(LeaseEvent::Acquired);
                }
            }
            Err(error) => self.failed(StoreOp::Put, error, now),
        }
    }

    /// The answer to a renewal.
    pub fn handle_renew(&mut self, result: Result<RenewOutcome, String>, now: Instant) {
        let Some((StoreOp::Renew, issued)) = self.in_flight.take() else {
            return;
        };
        match result {
            Ok(RenewOutcome::Renewed) => {
                self.answered();
                self.confirmed_at = Some(issued);
                self.next_at = Some(issued + LEASE_RENEW_INTERVAL);
                if self.status != LeaseStatus::Held {
                    // Judged lost by silence, but the store kept it.
                    self.status = LeaseStatus::Held;
                    self.events.push_back(LeaseEvent::Acquired);
                }
            }
            Ok(RenewOutcome::Lost) => {
                self.answered();
                self.confirmed_at = None;
                self.next_at = Some(now);
                if self.status != LeaseStatus::Lost {
                    self.events.push_back(LeaseEvent::Lost(LostReason::Expired));
                }
                self.status = LeaseStatus::Lost;
            }
            Ok(RenewOutcome::Superseded { generation }) => {
                self.answered();
                self.confirmed_at = None;
                self.next_at = None;
                self.status = LeaseStatus::Superseded;
                self.events.push_back(LeaseEvent::Superseded { generation });
            }
            Err(error) => self.failed(StoreOp::Renew, error, now),
        }
    }

    /// The node removed its descriptor: nothing more to do.
    pub fn handle_released(&mut self) {
        self.status = LeaseStatus::Released;
        self.in_flight = None;
        self.next_at = None;
    }

    /// Judges the lease on the clock: held, but no renewal confirmed for a whole TTL, it is
    /// lost (the store could not be reached to say otherwise).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.status == LeaseStatus::Held
            && self.confirmed_at.is_some_and(|t| now >= t + LEASE_TTL)
        {
            self.status = LeaseStatus::Lost;
            self.events
                .push_back(LeaseEvent::Lost(LostReason::NotRenewed));
        }
    }

    /// When the keeper next wants to be called: the next operation, or the instant a held
    /// lease would be judged lost.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let expiry = match (self.status, self.confirmed_at) {
            (LeaseStatus::Held, Some(t)) => Some(t + LEASE_TTL),
            _ => None,
        };
        [self.next_at, expiry].into_iter().flatten().min()
    }

    /// The next event, in order.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<LeaseEvent> {
        self.events.pop_front()
    }

    fn answered(&mut self) {
        if self.reachable == Some(false) {
            self.events.push_back(LeaseEvent::StoreReachable);
        }
        self.reachable = Some(true);
    }

    fn failed(&mut self, op: StoreOp, error: String, now: Instant) {
        if self.reachable != Some(false) {
            self.events
                .push_back(LeaseEvent::StoreUnreachable { op, error });
        }
        self.reachable = Some(false);
        self.next_at = Some(now + STORE_RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::liveness::{PEER_DEADLINE, PROBE_INTERVAL};

    fn drain(k: &mut LeaseKeeper) -> Vec<LeaseEvent> {
        std::iter::from_fn(|| k.poll_event()).collect()
    }

    /// MISSION D3: the lease is renewed on its own interval, which is not the probe interval,
    /// from the instant each renewal was issued.
    #[test]
    fn d3_renewed_on_its_own_interval() {
        assert_ne!(LEASE_RENEW_INTERVAL, PROBE_INTERVAL);
        assert!(LEASE_RENEW_INTERVAL * 4 < LEASE_TTL);
        assert!(LEASE_TTL > PEER_DEADLINE);
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(t0);
        assert_eq!(k.poll_op(t0), Some(StoreOp::Put));
        assert_eq!(k.poll_op(t0), None, "one operation at a time");
        k.handle_put(Ok(()), t0 + Duration::from_millis(30));
        assert_eq!(drain(&mut k), [LeaseEvent::Acquired]);
        assert_eq!(k.status(), LeaseStatus::Held);
        let mut renewals = Vec::new();
        let mut now = t0;
        for _ in 0..5 {
            now = k.poll_timeout().expect("a renewal is planned");
            assert_eq!(k.poll_op(now), Some(StoreOp::Renew));
            renewals.push(now - t0);
            k.handle_renew(Ok(RenewOutcome::Renewed), now + Duration::from_millis(50));
        }
        let expected: Vec<Duration> = (1..=5).map(|i| LEASE_RENEW_INTERVAL * i).collect();
        assert_eq!(renewals, expected);
        assert!(drain(&mut k).is_empty());
        assert_eq!(
            k.age(now + Duration::from_secs(1)),
            Some(Duration::from_secs(1))
        );
    }

    /// MISSION F5: store errors are events, the keeper retries on its own; a held lease is
    /// judged lost only after a whole TTL without a confirmed renewal; the store coming back
    /// is an event too. Nothing here knows about links at all.
    #[test]
    fn f5_store_errors_are_events_and_lease_loss_is_judged_after_a_ttl() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(t0);
        let _ = k.poll_op(t0);
        k.handle_put(Ok(()), t0);
        drain(&mut k);
        let mut now;
        let mut failures = 0;
        loop {
            now = k.poll_timeout().expect("planned");
            k.handle_timeout(now);
            if k.status() == LeaseStatus::Lost {
                break;
            }
            if let Some(op) = k.poll_op(now) {
                assert_eq!(op, StoreOp::Renew);
                k.handle_renew(Err("database is locked".into()), now);
                failures += 1;
            }
        }
        assert_eq!(
            now - t0,
            LEASE_TTL,
            "lost exactly one TTL after the last confirmation"
        );
        assert!(failures >= 16, "retried every {STORE_RETRY:?}: {failures}");
        let events = drain(&mut k);
        assert_eq!(
            events,
            [
                LeaseEvent::StoreUnreachable {
                    op: StoreOp::Renew,
                    error: "database is locked".into()
                },
                LeaseEvent::Lost(LostReason::NotRenewed),
            ],
            "one unreachable event, not one per failure"
        );
        // The store comes back and still has the lease (leases stretch): held again.
        now = k.poll_timeout().expect("planned");
        assert_eq!(k.poll_op(now), Some(StoreOp::Renew));
        k.handle_renew(Ok(RenewOutcome::Renewed), now);
        assert_eq!(
            drain(&mut k),
            [LeaseEvent::StoreReachable, LeaseEvent::Acquired]
        );
    }

    #[test]
    fn lost_by_the_store_publishes_again_and_superseded_stops() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(t0);
        let _ = k.poll_op(t0);
        k.handle_put(Ok(()), t0);
        let now = t0 + LEASE_RENEW_INTERVAL;
        assert_eq!(k.poll_op(now), Some(StoreOp::Renew));
        k.handle_renew(Ok(RenewOutcome::Lost), now);
        assert_eq!(k.poll_op(now), Some(StoreOp::Put));
        k.handle_put(Ok(()), now);
        assert_eq!(
            drain(&mut k),
            [
                LeaseEvent::Acquired,
                LeaseEvent::Lost(LostReason::Expired),
                LeaseEvent::Acquired
            ]
        );
        let later = now + LEASE_RENEW_INTERVAL;
        assert_eq!(k.poll_op(later), Some(StoreOp::Renew));
        k.handle_renew(Ok(RenewOutcome::Superseded { generation: 9 }), later);
        assert_eq!(k.status(), LeaseStatus::Superseded);
        assert_eq!(k.poll_timeout(), None);
        assert_eq!(k.poll_op(later + LEASE_TTL), None);
        k.handle_released();
        assert_eq!(k.status(), LeaseStatus::Released);
    }

    #[test]
    fn a_failed_first_put_is_retried() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(t0);
        let _ = k.poll_op(t0);
        k.handle_put(Err("no such file".into()), t0);
        assert_eq!(k.status(), LeaseStatus::Acquiring);
        assert_eq!(k.poll_timeout(), Some(t0 + STORE_RETRY));
        assert_eq!(k.poll_op(t0 + STORE_RETRY), Some(StoreOp::Put));
        // An answer for an operation not in flight is ignored.
        k.handle_renew(Ok(RenewOutcome::Renewed), t0 + STORE_RETRY);
        assert_eq!(k.status(), LeaseStatus::Acquiring);
    }
}
