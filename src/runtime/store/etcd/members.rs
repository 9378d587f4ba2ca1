//! The order in which the etcd store tries its members: pure state, no I/O, no clock of its
//! own (every time is handed in), so that the failover can be tested with a manual clock.
//!
//! A request goes first to the member that answered last, as long as it has not failed
//! since; then to the members that have not failed since they last answered (in endpoint
//! order after the preferred one); then to those that have failed, the one that failed
//! longest ago first. A member that refuses because it has no leader has failed like one
//! that cannot be reached: both go to the back of the order, so that after a partition
//! heals the members that were cut off the longest (most likely back by now) are tried
//! before the one that refused a moment ago.

use std::time::Instant;

/// Which etcd member to try first, and which next (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MemberOrder {
    /// The member that answered last.
    preferred: usize,
    /// Per member: when it last failed, if it has not answered since.
    failed_at: Vec<Option<Instant>>,
}

impl MemberOrder {
    /// `n` members, none failed yet, the first preferred.
    pub(super) fn new(n: usize) -> MemberOrder {
        MemberOrder {
            preferred: 0,
            failed_at: vec![None; n],
        }
    }

    /// Every member, in the order to try them now.
    pub(super) fn order(&self) -> Vec<usize> {
        let n = self.failed_at.len();
        let ring = (0..n).map(|i| (self.preferred + i) % n);
        let mut healthy: Vec<usize> = ring
            .clone()
            .filter(|&i| self.failed_at[i].is_none())
            .collect();
        let mut failed: Vec<(Instant, usize)> = ring
            .filter_map(|i| self.failed_at[i].map(|at| (at, i)))
            .collect();
        // Stable: members that failed at the same instant keep their ring order.
        failed.sort_by_key(|&(at, _)| at);
        healthy.extend(failed.into_iter().map(|(_, i)| i));
        healthy
    }

    /// Member `i` answered: it is tried first from now on.
    pub(super) fn answered(&mut self, i: usize) {
        if let Some(f) = self.failed_at.get_mut(i) {
            *f = None;
            self.preferred = i;
        }
    }

    /// Member `i` failed at `now` (unreachable, no answer in time, no leader, a broken
    /// stream): it goes to the back of the order.
    pub(super) fn failed(&mut self, i: usize, now: Instant) {
        if let Some(f) = self.failed_at.get_mut(i) {
            *f = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn h1_d2_members_are_tried_in_endpoint_order_at_first() {
        assert_eq!(MemberOrder::new(3).order(), [0, 1, 2]);
        assert_eq!(MemberOrder::new(1).order(), [0]);
        assert!(MemberOrder::new(0).order().is_empty());
    }

    #[test]
    fn h1_d2_the_member_that_answered_last_is_tried_first() {
        let t0 = Instant::now();
        let mut m = MemberOrder::new(3);
        m.failed(0, t0);
        m.answered(1);
        assert_eq!(m.order(), [1, 2, 0]);
        m.answered(2);
        assert_eq!(m.order(), [2, 1, 0]);
        // Answering again clears the failure.
        m.answered(0);
        assert_eq!(m.order(), [0, 1, 2]);
    }

    #[test]
    fn h1_f5_a_member_that_failed_goes_behind_those_that_did_not() {
        // The preferred member fails: the next request goes to the others first, even though
        // none of them has answered yet.
        let t0 = Instant::now();
        let mut m = MemberOrder::new(3);
        m.answered(0);
        m.failed(0, t0);
        assert_eq!(m.order(), [1, 2, 0]);
    }

    #[test]
    fn h1_f5_no_leader_counts_as_failing_and_the_next_member_is_tried() {
        // The cut-off host's own member (2) answered last. Cut off, it refuses for want of a
        // leader: the next request goes to the others first.
        let t0 = Instant::now();
        let mut m = MemberOrder::new(3);
        m.answered(2);
        m.failed(2, t0);
        assert_eq!(m.order(), [0, 1, 2]);
        // Neither can be reached (a connect timeout each): every member has failed once, and
        // the next pass tries each once more, the one that failed longest ago first.
        m.failed(0, t0 + ms(1000));
        m.failed(1, t0 + ms(2000));
        assert_eq!(m.order(), [2, 0, 1]);
        // A pass that fails throughout keeps the order: each member still tried once.
        let pass = m.order();
        for (k, &i) in pass.iter().enumerate() {
            m.failed(i, t0 + ms(3000 + 1000 * k as u64));
        }
        assert_eq!(m.order(), pass);
        // Healed: member 0 answers and is tried first; the refusing member comes last.
        m.failed(2, t0 + ms(6000));
        m.answered(0);
        assert_eq!(m.order(), [0, 1, 2]);
    }

    #[test]
    fn h1_f5_the_member_that_failed_longest_ago_is_tried_first() {
        let t0 = Instant::now();
        let mut m = MemberOrder::new(3);
        m.answered(0);
        m.failed(2, t0);
        m.failed(0, t0 + ms(1));
        m.failed(1, t0 + ms(2));
        assert_eq!(m.order(), [2, 0, 1]);
    }

    #[test]
    fn h1_unknown_members_are_ignored() {
        let mut m = MemberOrder::new(2);
        m.answered(5);
        m.failed(7, Instant::now());
        assert_eq!(m.order(), [0, 1]);
    }
}
