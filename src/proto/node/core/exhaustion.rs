//! Running out of descriptors, as the node core decides it. A link or subscription whose
//! socket cannot be opened because the node ran out fails with
//! [`FailureReason::ResourceExhausted`] and the cause the shell worked out, and is retried
//! with the normal backoff ([`link_exhausted`], [`sub_exhausted`]); its state event is
//! emitted on the first such failure only (the link stays `reconnecting`; later failures
//! update its figures and counters), and every one is counted. A socket that fails to open
//! for another reason is tried again after [`BACKOFF_MAX`] ([`link_open_error`],
//! [`sub_open_error`]).
//!
//! The node logs one warning per episode ([`Episode`]), an episode lasting from the first
//! such failure to the next socket that opens, and at most one per [`EPISODE_LOG_MIN`].
//! Reading the descriptor figures from the OS, working out the cause and logging are the
//! shell's.

use std::time::{Duration, Instant};

use super::fanout::FanoutShell;
use super::{Count, NodeCore, Shell};
use crate::proto::node::keys::{LinkKey, SubKey};
use crate::proto::node::link::{record_exhausted, BACKOFF_MAX};
use crate::proto::state::{ConnState, FailureReason};

/// Shortest time between two episode warnings: a node that runs out again and again logs
/// once per this, with the count of what it left out.
pub const EPISODE_LOG_MIN: Duration = Duration::from_secs(10);

/// An episode of running out of descriptors and its warnings.
#[derive(Debug, Default)]
pub(crate) struct Episode {
    /// An episode is running: no socket opened since the last failure.
    active: bool,
    /// Failures in the running episode.
    failures: u64,
    /// When the last episode warning was logged.
    logged_at: Option<Instant>,
    /// Failures not logged since that warning (episodes inside [`EPISODE_LOG_MIN`]).
    unlogged: u64,
}

impl Episode {
    /// A socket could not be opened for want of descriptors at `now`: counted in the
    /// episode. Returns the failures left out of the log since the last warning if the
    /// episode's warning is to be logged now (the episode's first failure, and no warning
    /// for [`EPISODE_LOG_MIN`]); otherwise this failure is left out.
    pub(crate) fn handle_failure(&mut self, now: Instant) -> Option<u64> {
        let first = !self.active;
        self.active = true;
        self.failures += 1;
        let quiet = self
            .logged_at
            .is_none_or(|t| now.saturating_duration_since(t) >= EPISODE_LOG_MIN);
        if first && quiet {
            self.logged_at = Some(now);
            Some(std::mem::take(&mut self.unlogged))
        } else {
            self.unlogged += 1;
            None
        }
    }

    /// A socket opened: if that ends a running episode, its failures.
    pub(crate) fn handle_opened(&mut self) -> Option<u64> {
        if !self.active {
            return None;
        }
        self.active = false;
        Some(std::mem::take(&mut self.failures))
    }
}

/// Connections the node has open (sockets with a peer): dialled and inbound connections,
/// and subscriptions with a socket.
pub(crate) fn open_connections(core: &NodeCore) -> usize {
    core.links.values().filter(|l| l.conn.is_some()).count()
        + core.subs.values().filter(|s| s.slot.is_some()).count()
}

/// Dialled link `k` could not open or set up its socket for a reason other than running
/// out: it is tried again after [`BACKOFF_MAX`].
pub(crate) fn link_open_error(core: &mut NodeCore, k: LinkKey, now: Instant) {
    core.links[k].retry_at = Some(now + BACKOFF_MAX);
}

/// Subscription `i` could not open its SUB socket for a reason other than running out:
/// it is tried again after [`BACKOFF_MAX`] (the poll timeout takes this instant).
pub(crate) fn sub_open_error(core: &mut NodeCore, i: SubKey, now: Instant) {
    core.subs[i].retry_at = now + BACKOFF_MAX;
}

/// Dialled link `k` could not open its socket for want of descriptors (`detail`, the
/// cause with its figures): the failure is recorded, the link retries with its backoff,
/// the application hears of it if it is the episode's first failure of the link, and it
/// is counted.
pub(crate) fn link_exhausted<S: Shell>(node: &mut S, k: LinkKey, detail: &str, now: Instant) {
    let l = &mut node.core_mut().links[k];
    let (retry_at, first) = record_exhausted(&mut l.state, &mut l.failures_in_row, detail, now);
    l.retry_at = Some(retry_at);
    if first {
        node.emit_state(
            k,
            ConnState::Reconnecting,
            Some(FailureReason::ResourceExhausted),
            detail,
        );
    }
    node.count(Count::LinkFailure(FailureReason::ResourceExhausted));
}

/// Subscription `i` could not open its SUB socket for want of descriptors: as
/// [`link_exhausted`].
pub(crate) fn sub_exhausted<S: FanoutShell>(node: &mut S, i: SubKey, detail: &str, now: Instant) {
    let s = &mut node.core_mut().subs[i];
    let (retry_at, first) = record_exhausted(&mut s.state, &mut s.failures_in_row, detail, now);
    s.retry_at = retry_at;
    if first {
        node.emit_sub_state(
            i,
            ConnState::Reconnecting,
            Some(FailureReason::ResourceExhausted),
            detail,
        );
    }
    node.count(Count::LinkFailure(FailureReason::ResourceExhausted));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::node::core::fanout::add_sub;
    use crate::proto::node::core::fanout::tests::FanoutEffect;
    use crate::proto::node::core::tests::{shell, Effect};
    use crate::proto::node::link::{backoff, LinkKind};
    use crate::proto::wire::Lane;

    /// MISSION F1: one warning per episode: the first failure of an episode is logged, the
    /// rest of it is not; a socket that opens ends it with its failures; a new episode
    /// within [`EPISODE_LOG_MIN`] of the last warning is not logged, and the next one after
    /// it says how many failures were left out.
    #[test]
    fn f1_one_warning_per_episode_at_most_one_per_episode_log_min() {
        let t0 = Instant::now();
        let mut e = Episode::default();
        assert_eq!(e.handle_opened(), None, "no episode to end");
        assert_eq!(e.handle_failure(t0), Some(0));
        assert_eq!(e.handle_failure(t0), None);
        assert_eq!(e.handle_opened(), Some(2));
        assert_eq!(e.handle_opened(), None);
        let t1 = t0 + EPISODE_LOG_MIN / 2;
        assert_eq!(e.handle_failure(t1), None, "within EPISODE_LOG_MIN");
        assert_eq!(e.handle_opened(), Some(1));
        let t2 = t0 + EPISODE_LOG_MIN;
        assert_eq!(e.handle_failure(t2), Some(2), "the failures left out");
        assert_eq!(e.handle_opened(), Some(1));
    }

    /// MISSION F1: a link that cannot open a socket for want of descriptors fails with
    /// `resource_exhausted` and retries with its backoff; only the first failure of the
    /// episode reaches the application, every one is counted; another error retries after
    /// [`BACKOFF_MAX`] and changes nothing else.
    #[test]
    fn f1_only_the_first_exhausted_failure_emits_a_state_event() {
        let t0 = Instant::now();
        let mut n = shell("a", vec!["b"]);
        let k = n.core.add_link(
            LinkKind::MeshDial {
                peer: 0,
                lane: Lane::Application,
            },
            t0,
        );
        let counted = || Effect::Count(Count::LinkFailure(FailureReason::ResourceExhausted));
        link_exhausted(&mut n, k, "EMFILE", t0);
        let reason = Some(FailureReason::ResourceExhausted);
        assert_eq!(
            n.effects,
            [
                Effect::EmitState(k, ConnState::Reconnecting, reason),
                counted()
            ]
        );
        assert_eq!(n.core.links[k].retry_at, Some(t0 + backoff(1)));
        n.effects.clear();
        let t1 = t0 + backoff(1);
        link_exhausted(&mut n, k, "EMFILE", t1);
        assert_eq!(n.effects, [counted()], "the link stays reconnecting");
        assert_eq!(n.core.links[k].retry_at, Some(t1 + backoff(2)));
        assert_eq!(n.core.links[k].state.failures(), 2);
        n.effects.clear();
        link_open_error(&mut n.core, k, t1);
        assert_eq!(n.core.links[k].retry_at, Some(t1 + BACKOFF_MAX));
        assert_eq!(n.effects, []);

        let s = add_sub(&mut n.core, "tcp://p:1", None, t0);
        sub_exhausted(&mut n, s, "EMFILE", t0);
        sub_exhausted(&mut n, s, "EMFILE", t1);
        let emitted = FanoutEffect::EmitSubState(s, ConnState::Reconnecting, reason);
        assert_eq!(n.effects, [Effect::Fanout(emitted), counted(), counted()]);
        sub_open_error(&mut n.core, s, t1);
        assert_eq!(n.core.subs[s].retry_at, t1 + BACKOFF_MAX);
        assert_eq!(open_connections(&n.core), 0);
    }
}
