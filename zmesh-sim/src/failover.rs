//! Failovers (`Config::zombies`): a run paused while a successor of its RID starts, which
//! comes back beside it until the store tells it it was superseded or it is killed. The
//! paused run keeps its host's index and its own run number: the network tells its
//! connections from its successor's ([`crate::net::Net::set_run_frozen`]), and every peer
//! sees both as the same RID, as a shell keying links by RID would.

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;
use zmesh::proto::discovery::RenewOutcome;

use crate::net::{End, NodeIx};
use crate::node::{SimNode, StoreAnswer, StoreReq};
use crate::world_store::{store_ops, FromStore};
use crate::{world_ctx, Ctx, Event, World};

/// A run paused beside which a successor of its RID started (`Config::zombies`): at most
/// one in a simulation at a time. It keeps its host's index and its own run number, so the
/// network tells its connections from its successor's, and every peer sees both as the
/// same RID, as a shell keying links by RID would.
pub(crate) struct Zombie {
    pub(crate) node: SimNode,
    /// Paused: it runs nothing, and nothing reaches it or leaves it.
    pub(crate) paused: bool,
    /// What the store sent it while it was paused, delivered in order when it comes back.
    pub(crate) deferred: VecDeque<FromStore>,
}

impl World {
    /// Carries the store operations the zombie asks for to the store.
    pub(crate) fn poll_zombie_store(&mut self) {
        let Some(z) = self.zombie.as_mut().filter(|z| !z.paused) else {
            return;
        };
        let (i, run) = (z.node.ix, z.node.run);
        let mut ctx = world_ctx!(self);
        let reqs = store_ops(&mut z.node, &mut ctx);
        let publishes = reqs.iter().any(|r| matches!(r, StoreReq::Put(_)));
        if publishes && !self.cfg.zombie_puts {
            // A run paused before its first put succeeded asks to publish when it comes
            // back, and the store's put replaces its successor's descriptor (SIMULATION.md,
            // "Open findings"): not drawn unless `Config::zombie_puts` asks for it.
            self.truth.stats.zombies_would_publish += 1;
            self.kill_zombie("it would publish itself over its successor");
            return;
        }
        self.send_store_ops(i, run, reqs);
    }

    /// The zombie's next wake-up, if it runs (not paused, its host not frozen).
    pub(crate) fn zombie_wakeup(&self) -> Option<Duration> {
        let z = self.zombie.as_ref()?;
        if z.paused || self.net.is_frozen(z.node.ix) {
            return None;
        }
        z.node.poll_timeout()
    }

    pub(crate) fn ctx_zombie(&mut self, f: impl FnOnce(&mut SimNode, &mut Ctx<'_>)) {
        let Some(z) = self.zombie.as_mut() else {
            return;
        };
        let mut ctx = world_ctx!(self);
        f(&mut z.node, &mut ctx);
        self.zombie_touched = true;
    }

    /// The zombie's ready links are judged as any node's (not while it is paused).
    pub(crate) fn check_zombie_ready(&mut self) {
        let Some(z) = self.zombie.as_ref() else {
            return;
        };
        if z.paused || self.net.is_frozen(z.node.ix) {
            return;
        }
        let i = z.node.ix;
        for (conn, _, last) in z.node.ready_evidence() {
            self.truth.check_ready(i, conn, last, self.now);
        }
    }

    /// Hands the zombie what the store sent it while it could not run, in order.
    pub(crate) fn zombie_catches_up(&mut self) {
        loop {
            let Some(z) = self.zombie.as_mut() else {
                return;
            };
            if z.paused || self.net.is_frozen(z.node.ix) {
                return;
            }
            let Some(item) = z.deferred.pop_front() else {
                return;
            };
            self.deliver_to_zombie(item);
        }
    }

    /// Something from the store reaches the zombie. An answer that says its lease is
    /// another run's now (`Superseded`) or gone (`Lost`) ends it: a run that learns it was
    /// replaced stops (its application's answer to `LeaseSuperseded`, or its orchestrator's),
    /// rather than publishing itself again over its successor.
    pub(crate) fn deliver_to_zombie(&mut self, item: FromStore) {
        match item {
            FromStore::Answer(
                _,
                StoreAnswer::Renew(Ok(
                    outcome @ (RenewOutcome::Superseded { .. } | RenewOutcome::Lost),
                )),
            ) => {
                self.truth.stats.zombies_superseded += 1;
                self.kill_zombie(&format!("the store answers its renewal {outcome:?}"));
            }
            FromStore::Answer(_, answer) => {
                self.ctx_zombie(|n, ctx| n.handle_store_answer(ctx, answer));
            }
            FromStore::Watch(_, events) => {
                self.ctx_zombie(|n, ctx| {
                    for ev in events {
                        n.handle_watch(ctx, ev);
                    }
                });
            }
        }
    }

    /// Pauses host `node`'s running run and makes it the zombie; its successor starts
    /// `standby` later and the paused run comes back `back_after` after that.
    pub(crate) fn failover(&mut self, node: NodeIx, standby: Duration, back_after: Duration) {
        let now = self.now;
        if self.zombie.is_some() || !self.up(node) || self.net.is_frozen(node) {
            return;
        }
        let Some(paused) = self.nodes.get_mut(node).and_then(Option::take) else {
            return;
        };
        let run = paused.run;
        self.trace.push(
            now,
            format!(
                "fault: host {node} run {run} pauses; a successor starts in {standby:?}, the paused run comes back {back_after:?} after that"
            ),
        );
        self.truth.stats.zombies += 1;
        self.net.set_run_frozen(End { node, run }, true, now);
        if let Some(h) = self.hosts.get_mut(node) {
            h.1 = false;
        }
        if let Some(old) = self.wake_of.get_mut(node).and_then(Option::take) {
            self.wakeups.remove(&(old, node));
        }
        self.zombie = Some(Zombie {
            node: paused,
            paused: true,
            deferred: VecDeque::new(),
        });
        self.at(now + standby, Event::Start { node });
        self.at(now + standby + back_after, Event::ZombieBack { node, run });
    }

    /// The zombie's process ends (killed, or stopped once the store told it it was
    /// superseded): its connections close after what it had sent.
    pub(crate) fn kill_zombie(&mut self, why: &str) {
        let Some(z) = self.zombie.take() else {
            return;
        };
        let end = End {
            node: z.node.ix,
            run: z.node.run,
        };
        self.trace.push(
            self.now,
            format!(
                "host {} run {} (beside its successor) ends: {why}",
                end.node, end.run
            ),
        );
        self.net.kill_run(end, self.now, &mut self.rng);
        self.truth.on_kill(end);
        if let Some(store) = self.store.as_mut() {
            store.unwatch((end.node, end.run));
        }
    }

    /// The paused run `run` of host `node` comes back beside its successor, for 1 to 30 s
    /// at most.
    pub(crate) fn zombie_back(&mut self, node: NodeIx, run: u64) {
        let now = self.now;
        let Some(z) = self
            .zombie
            .as_mut()
            .filter(|z| z.node.ix == node && z.node.run == run)
        else {
            return;
        };
        z.paused = false;
        self.truth.stats.zombies_back += 1;
        self.trace.push(
            now,
            format!("fault: host {node} run {run} comes back beside its successor"),
        );
        self.net.set_run_frozen(End { node, run }, false, now);
        self.zombie_touched = true;
        self.zombie_catches_up();
        let end = now + Duration::from_millis(self.rng.random_range(1_000..30_000));
        self.at(end, Event::ZombieKill { node, run });
    }
}
