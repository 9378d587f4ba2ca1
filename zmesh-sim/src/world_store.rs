//! What travels between the hosts and the simulated store: the operations a node's lease
//! keeper asks for, the store's answers and its watches' events (held in order while a
//! host is frozen), the expiry of leases and the check that the store is whole after the
//! quiet minute.

use std::time::Duration;

use rand::Rng;
use zmesh::proto::discovery::LEASE_TTL;

use crate::net::NodeIx;
use crate::node::{self, Phase, SimNode, StoreAnswer, StoreReq};
use crate::store::WatchEvent;
use crate::{world_ctx, Ctx, Event, World};

/// Up to three store operations a node asks for now (one in flight at a time, and a
/// removal on an orderly stop).
pub(crate) fn store_ops(node: &mut SimNode, ctx: &mut Ctx<'_>) -> Vec<StoreReq> {
    let mut reqs = Vec::new();
    for _ in 0..3 {
        match node.poll_store_op(ctx) {
            Some(r) => reqs.push(r),
            None => break,
        }
    }
    reqs
}

/// What reaches a node from the store, held while its host is frozen.
#[derive(Debug, Clone)]
pub(crate) enum FromStore {
    Answer(u64, StoreAnswer),
    Watch(u64, Vec<WatchEvent>),
}

impl FromStore {
    /// The run it is for.
    pub(crate) fn run(&self) -> u64 {
        match self {
            FromStore::Answer(r, _) | FromStore::Watch(r, _) => *r,
        }
    }
}

impl World {
    /// Carries the store operations host `i`'s run asks for to the store.
    pub(crate) fn poll_store(&mut self, i: NodeIx) {
        let Some(Some(node)) = self.nodes.get_mut(i) else {
            return;
        };
        let run = node.run;
        let mut ctx = world_ctx!(self);
        let reqs = store_ops(node, &mut ctx);
        self.send_store_ops(i, run, reqs);
    }

    /// Sends store operations of host `i`'s run `run` on their way.
    pub(crate) fn send_store_ops(&mut self, i: NodeIx, run: u64, reqs: Vec<StoreReq>) {
        let now = self.now;
        for req in reqs {
            self.at(
                now + self.store_latency,
                Event::StoreApply {
                    node: i,
                    run,
                    req,
                    issued: now,
                },
            );
        }
    }

    /// The store applies one operation, if the issuing host reaches it, and answers; a host
    /// cut off from it gets an error, at once or after the agent's bound.
    pub(crate) fn store_apply(&mut self, node: NodeIx, run: u64, req: StoreReq, issued: Duration) {
        let now = self.now;
        let latency = self.store_latency;
        let Some(store) = self.store.as_mut() else {
            return;
        };
        self.store_dirty = true;
        let answer = if store.reachable(node) {
            let stretch = Duration::from_millis(self.rng.random_range(0..2_000));
            match req {
                StoreReq::Put(d) => {
                    let lease = store.put(&d, (node, run), now, stretch);
                    self.truth.on_published(&d.rid, d.generation);
                    StoreAnswer::Put(Ok(lease))
                }
                StoreReq::Renew {
                    rid,
                    generation,
                    lease,
                } => {
                    self.truth.stats.store_renewals += 1;
                    StoreAnswer::Renew(Ok(store.renew(&rid, generation, lease, now, stretch)))
                }
                StoreReq::Remove { rid, lease } => {
                    store.remove(&rid, lease);
                    return;
                }
            }
        } else {
            self.truth.stats.store_errors += 1;
            let error = "store unavailable: unreachable".to_owned();
            match req {
                StoreReq::Put(_) => StoreAnswer::Put(Err(error)),
                StoreReq::Renew { .. } => StoreAnswer::Renew(Err(error)),
                StoreReq::Remove { .. } => return,
            }
        };
        // A refused connection answers within a round trip; a store that does not answer
        // is given up after the agent's bound.
        let refused = !matches!(
            answer,
            StoreAnswer::Put(Err(_)) | StoreAnswer::Renew(Err(_))
        ) || self.rng.random_bool(0.5);
        let at = if refused {
            now + latency
        } else {
            issued + node::STORE_OP_BOUND
        };
        self.at(at, Event::StoreAnswer { node, run, answer });
    }

    /// What the store's watches have to say now leaves for their hosts.
    pub(crate) fn poll_watches(&mut self) {
        if !std::mem::take(&mut self.store_dirty) {
            return;
        }
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let at = self.now + self.store_latency;
        for ((node, run), events) in store.poll_watches() {
            self.at(at, Event::Watch { node, run, events });
        }
    }

    /// Something from the store reaches host `i`: handled now, or held in order while the
    /// host is frozen (or while earlier items wait).
    pub(crate) fn on_from_store(&mut self, i: NodeIx, item: FromStore) {
        if let Some(z) = self
            .zombie
            .as_mut()
            .filter(|z| z.node.ix == i && z.node.run == item.run())
        {
            if z.paused || self.net.is_frozen(i) || !z.deferred.is_empty() {
                z.deferred.push_back(item);
            } else {
                self.deliver_to_zombie(item);
            }
            return;
        }
        if self.net.is_frozen(i) || self.deferred.get(&i).is_some_and(|q| !q.is_empty()) {
            self.deferred.entry(i).or_default().push_back(item);
            return;
        }
        self.deliver_from_store(i, item);
    }

    pub(crate) fn deliver_from_store(&mut self, i: NodeIx, item: FromStore) {
        let (run, _) = self.hosts.get(i).copied().unwrap_or((0, false));
        match item {
            FromStore::Answer(r, answer) if r == run => {
                self.ctx_node(i, |n, ctx| n.handle_store_answer(ctx, answer));
            }
            FromStore::Watch(r, events) if r == run => {
                self.ctx_node(i, |n, ctx| {
                    for ev in events {
                        n.handle_watch(ctx, ev);
                    }
                });
            }
            // For a run that is gone.
            _ => {}
        }
    }

    /// Host `i` thawed: what the store sent meanwhile arrives now, in order.
    pub(crate) fn thawed(&mut self, i: NodeIx) {
        if let Some(b) = self.blind_at.get_mut(i) {
            *b = self.now;
        }
        let held = self.deferred.remove(&i).unwrap_or_default();
        for item in held {
            self.deliver_from_store(i, item);
        }
        if self.zombie.as_ref().is_some_and(|z| z.node.ix == i) {
            self.zombie_catches_up();
        }
    }

    /// The store expires the leases whose time came; a lease of a running node that could
    /// reach the store, unfrozen, for the whole TTL before must never expire (MISSION D3:
    /// the keeper renews on its own interval).
    pub(crate) fn expire_leases(&mut self) {
        let now = self.now;
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let expired = store.expire(now);
        let reachable: Vec<bool> = (0..self.nodes.len()).map(|h| store.reachable(h)).collect();
        for e in expired {
            self.store_dirty = true;
            self.truth.stats.leases_expired += 1;
            self.trace.push(
                now,
                format!("store: the lease of {} g{:x} expired", e.rid, e.generation),
            );
            let (host, run) = e.owner;
            let running = self.hosts.get(host).is_some_and(|h| h.0 == run) && self.up(host);
            let clear = reachable.get(host).copied().unwrap_or(false)
                && !self.net.is_frozen(host)
                && self
                    .blind_at
                    .get(host)
                    .is_some_and(|b| *b + LEASE_TTL <= now);
            if running && clear {
                let detail = format!(
                    "the lease of {} g{:x} (host {host}, running, reaching the store for the whole TTL) expired; last renewed at {:.3}s",
                    e.rid,
                    e.generation,
                    e.renewed_at.as_secs_f64()
                );
                self.truth.violation("lease_kept_while_reachable", detail);
            }
        }
    }

    /// After the quiet minute the store is whole too: every running node holds its lease,
    /// the store holds its current descriptor, and every running node's directory knows
    /// every other running node's current run (MISSION D1, D3).
    pub(crate) fn check_store_whole(&mut self) {
        let Some(store) = self.store.as_ref() else {
            return;
        };
        let running: Vec<(NodeIx, String, u64)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_ref().map(|n| (i, n)))
            .filter(|(_, n)| n.phase() == Phase::Running)
            .map(|(i, n)| (i, n.me.rid.clone(), n.me.generation))
            .collect();
        let mut bad = Vec::new();
        for (i, rid, generation) in &running {
            let Some(Some(node)) = self.nodes.get(*i) else {
                continue;
            };
            if !node.lease_held() || store.generation_of(rid) != Some(*generation) {
                bad.push(format!(
                    "host {i}: lease held {}, the store holds {:x?} for its run g{generation:x}",
                    node.lease_held(),
                    store.generation_of(rid)
                ));
            }
            for (j, other, g) in &running {
                if j != i && node.known_generation(other) != Some(*g) {
                    bad.push(format!(
                        "host {i} knows {:x?} for {other}, which runs g{g:x}",
                        node.known_generation(other)
                    ));
                }
            }
        }
        for detail in bad {
            self.truth.violation("quiet_store_is_whole", detail);
        }
    }
}
