//! The one timer table of the liveness machines.
//!
//! Every deadline a liveness machine keeps lives in a [`TimerTable`], one slot per [`Timer`]
//! variant, so "what is the next wake-up" is always one `min` over a fixed array and no timer
//! can hide in a stray field.

use std::time::{Duration, Instant};

/// One kind of liveness timer. Each machine uses only the variants that concern it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// [`super::ProbeTracker`]: the next 5 s probe cycle (send a new id or resend the pending
    /// one).
    Probe,
    /// [`super::ProbeTracker`]: 15 s after ready or after the last accepted ACK; reaching it
    /// makes the connection not-ready.
    PeerDeadline,
    /// [`super::PublisherWatch`]: 15 s after socket creation or after the last valid record
    /// or beacon; reaching it makes the publisher not-ready.
    FanoutSilence,
    /// [`super::BeaconSchedule`]: the next 5 s beacon.
    Beacon,
}

impl Timer {
    const COUNT: usize = 4;

    fn index(self) -> usize {
        match self {
            Timer::Probe => 0,
            Timer::PeerDeadline => 1,
            Timer::FanoutSilence => 2,
            Timer::Beacon => 3,
        }
    }
}

/// Armed deadlines, one optional slot per [`Timer`].
#[derive(Debug, Clone, Default)]
pub(crate) struct TimerTable {
    slots: [Option<Instant>; Timer::COUNT],
}

impl TimerTable {
    /// Arms (or re-arms) `timer` to fire at `at`.
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.slots[timer.index()] = Some(at);
    }

    /// Disarms every timer (the machine is dead and must never wake anyone again).
    pub(crate) fn stop_all(&mut self) {
        self.slots = [None; Timer::COUNT];
    }

    /// When `timer` fires, if armed.
    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.slots[timer.index()]
    }

    /// Whether `timer` is armed and due at `now` (deadlines are inclusive: a timer set for
    /// `t` has expired at `now == t`, not one nanosecond earlier).
    pub(crate) fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|at| at <= now)
    }

    /// The earliest armed timer.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        self.slots.iter().flatten().min().copied()
    }
}

/// `now + d`, without a panic path.
///
/// `Instant + Duration` panics on overflow. The durations here are 5 s and 15 s, so overflow
/// would need an `Instant` within seconds of the platform maximum; if that ever happens the
/// timer fires at `now` rather than the process aborting on network input.
pub(crate) fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or(now)
}

/// The first instant on the grid `due + k * period` (k >= 1) that is strictly after `now`.
///
/// Periodic timers stay anchored to their first due instant, so a late wake-up neither
/// shifts the cadence nor produces a burst of catch-up sends: one send covers every missed
/// tick.
pub(crate) fn next_tick(due: Instant, now: Instant, period: Duration) -> Instant {
    let behind = now.saturating_duration_since(due).as_nanos();
    let period_ns = period.as_nanos().max(1);
    let ticks = behind / period_ns + 1;
    let step = u64::try_from(period_ns.saturating_mul(ticks)).unwrap_or(u64::MAX);
    after(due, Duration::from_nanos(step))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_secs(5);

    #[test]
    fn next_tick_on_time_is_one_period_later() {
        let t0 = Instant::now();
        assert_eq!(next_tick(t0, t0, P), t0 + P);
    }

    #[test]
    fn next_tick_late_wakeup_stays_on_grid() {
        let t0 = Instant::now();
        let late = t0 + Duration::from_millis(12_300);
        assert_eq!(next_tick(t0, late, P), t0 + Duration::from_secs(15));
        let exactly_on_tick = t0 + Duration::from_secs(10);
        assert_eq!(
            next_tick(t0, exactly_on_tick, P),
            t0 + Duration::from_secs(15)
        );
    }

    #[test]
    fn next_tick_early_call_still_advances() {
        let t0 = Instant::now();
        let due = t0 + P;
        assert_eq!(next_tick(due, t0, P), due + P);
    }

    #[test]
    fn timer_table_min_and_inclusive_expiry() {
        let t0 = Instant::now();
        let mut table = TimerTable::default();
        assert_eq!(table.next_timeout(), None);
        table.set(Timer::PeerDeadline, t0 + Duration::from_secs(15));
        table.set(Timer::Probe, t0 + P);
        assert_eq!(table.next_timeout(), Some(t0 + P));
        assert!(!table.is_expired(Timer::Probe, t0 + P - Duration::from_nanos(1)));
        assert!(table.is_expired(Timer::Probe, t0 + P));
        table.set(Timer::Probe, t0 + Duration::from_secs(20));
        assert_eq!(table.next_timeout(), Some(t0 + Duration::from_secs(15)));
        table.stop_all();
        assert_eq!(table.next_timeout(), None);
    }
}
