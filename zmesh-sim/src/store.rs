//! The simulated descriptor store (MISSION D1-D3, F5): a deterministic in-memory KV of
//! descriptors under leases, with revisions and watches, modelled on what the real backends
//! guarantee (src/runtime/store/mod.rs, "The interface"):
//!
//! - a put publishes a descriptor under a fresh lease of [`LEASE_TTL`] and replaces any
//!   descriptor of its RID; a renewal extends the lease, or answers that it is gone or that
//!   another run of the RID took the descriptor over; a removal deletes the descriptor only if
//!   it is still the lease's;
//! - a lease expires *not before* its TTL, counted from when the store applied the put or
//!   renewal (here: up to 2 s later, drawn per lease, as etcd stretches leases);
//! - every change has a revision; a watch delivers a reload of everything first, then the
//!   changes in revision order, each once; when the store cannot be reached it says so once,
//!   and when it can again it either starts over with a reload (the SQLite backend) or
//!   resumes from the last change it delivered (etcd): nothing is missed, nothing repeated.
//!
//! The store holds each descriptor in its JSON form ([`Descriptor::to_json`]) and a watcher
//! reads it back with [`Descriptor::from_json`], as the real backends do. What reaches the
//! store and when is the simulator's business ([`crate`]'s `World`): an operation is applied
//! one store latency after it was issued and answered one latency later, unless the store is
//! cut off from the issuing host (a store outage), in which case it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use zmesh::proto::discovery::{Descriptor, RenewOutcome, LEASE_TTL};

use crate::net::NodeIx;

/// One change of the store's descriptor set, as a watch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A descriptor was published (its JSON form).
    Put(String),
    /// The descriptor of this RID was removed or its lease expired.
    Removed(String),
}

/// What a watch delivers to one node run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// Every live descriptor (JSON forms): replaces what the watcher knew.
    Reload(Vec<String>),
    /// Changes since the previous event, in revision order.
    Delta(Vec<Change>),
    /// The store cannot be read (once per outage).
    Unreachable,
    /// The store answers again and the watch goes on from the last change it delivered.
    Resumed,
}

#[derive(Debug, Clone)]
struct Entry {
    /// The JSON form.
    json: String,
    generation: u64,
    lease: u64,
    /// Not before this instant does the lease expire.
    expires_at: Duration,
    /// The run (host, run) that published it.
    owner: (NodeIx, u64),
    /// When the store last applied a put or renewal of the lease.
    renewed_at: Duration,
}

#[derive(Debug, Clone)]
struct Watcher {
    /// The revision up to which changes were delivered (or declared missed).
    cursor: u64,
    /// The watcher was told the store is unreachable and has not been resynchronised.
    lagging: bool,
    /// The watcher had its first reload (a watch that starts while the store cannot be
    /// reached begins with a reload when it can, whichever backend).
    loaded: bool,
}

/// A descriptor whose lease expired, with what the truth needs to judge it.
#[derive(Debug, Clone)]
pub struct Expired {
    /// The descriptor's RID.
    pub rid: String,
    /// Its generation.
    pub generation: u64,
    /// The run that published it.
    pub owner: (NodeIx, u64),
    /// When the store last applied a put or renewal of its lease.
    pub renewed_at: Duration,
}

/// The simulated store.
#[derive(Debug)]
pub struct SimStore {
    entries: BTreeMap<String, Entry>,
    revision: u64,
    /// Every change with its revision (the store's history: never compacted here).
    log: Vec<(u64, Change)>,
    next_lease: u64,
    /// Hosts the store cannot be reached from, and whether every host is cut off.
    cut: BTreeSet<NodeIx>,
    cut_all: bool,
    /// After an outage a watch resumes from its revision (etcd) instead of reloading
    /// everything (SQLite).
    pub resumes: bool,
    /// Watches of node runs: (host, run) -> where it stands.
    watchers: BTreeMap<(NodeIx, u64), Watcher>,
}

impl SimStore {
    /// An empty store; `resumes` picks the etcd-like watch (resume by revision) over the
    /// SQLite-like one (reload after an outage).
    pub fn new(resumes: bool) -> SimStore {
        SimStore {
            entries: BTreeMap::new(),
            revision: 0,
            log: Vec::new(),
            next_lease: 1,
            cut: BTreeSet::new(),
            cut_all: false,
            resumes,
            watchers: BTreeMap::new(),
        }
    }

    /// Whether host `node` reaches the store now.
    pub fn reachable(&self, node: NodeIx) -> bool {
        !self.cut_all && !self.cut.contains(&node)
    }

    /// Cuts host `node` (or every host) off the store, or heals that cut.
    pub fn set_cut(&mut self, node: Option<NodeIx>, cut: bool) {
        match (node, cut) {
            (None, c) => self.cut_all = c,
            (Some(n), true) => {
                self.cut.insert(n);
            }
            (Some(n), false) => {
                self.cut.remove(&n);
            }
        }
    }

    /// Ends every outage.
    pub fn heal_all(&mut self) {
        self.cut.clear();
        self.cut_all = false;
    }

    fn change(&mut self, c: Change) {
        self.revision += 1;
        self.log.push((self.revision, c));
    }

    /// Applies a put of `d` by run `owner` at `now`, with a lease stretched by `stretch`
    /// beyond its TTL; returns the lease id.
    pub fn put(
        &mut self,
        d: &Descriptor,
        owner: (NodeIx, u64),
        now: Duration,
        stretch: Duration,
    ) -> u64 {
        let lease = self.next_lease;
        self.next_lease += 1;
        let json = d.to_json();
        self.entries.insert(
            d.rid.clone(),
            Entry {
                json: json.clone(),
                generation: d.generation,
                lease,
                expires_at: now + LEASE_TTL + stretch,
                owner,
                renewed_at: now,
            },
        );
        self.change(Change::Put(json));
        lease
    }

    /// Applies a renewal of `lease` (of `rid`, `generation`) at `now`.
    pub fn renew(
        &mut self,
        rid: &str,
        generation: u64,
        lease: u64,
        now: Duration,
        stretch: Duration,
    ) -> RenewOutcome {
        match self.entries.get_mut(rid) {
            Some(e) if e.lease == lease => {
                e.expires_at = e.expires_at.max(now + LEASE_TTL + stretch);
                e.renewed_at = now;
                RenewOutcome::Renewed
            }
            Some(e) if e.generation != generation => RenewOutcome::Superseded {
                generation: e.generation,
            },
            _ => RenewOutcome::Lost,
        }
    }

    /// Applies the removal of `rid`'s descriptor if it is still `lease`'s.
    pub fn remove(&mut self, rid: &str, lease: u64) {
        if self.entries.get(rid).is_some_and(|e| e.lease == lease) {
            self.entries.remove(rid);
            self.change(Change::Removed(rid.to_owned()));
        }
    }

    /// Removes every descriptor whose lease expired by `now`; returns them.
    pub fn expire(&mut self, now: Duration) -> Vec<Expired> {
        let gone: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.expires_at <= now)
            .map(|(rid, _)| rid.clone())
            .collect();
        let mut out = Vec::new();
        for rid in gone {
            if let Some(e) = self.entries.remove(&rid) {
                out.push(Expired {
                    rid: rid.clone(),
                    generation: e.generation,
                    owner: e.owner,
                    renewed_at: e.renewed_at,
                });
                self.change(Change::Removed(rid));
            }
        }
        out
    }

    /// The generation the store holds for `rid`.
    pub fn generation_of(&self, rid: &str) -> Option<u64> {
        self.entries.get(rid).map(|e| e.generation)
    }

    fn all(&self) -> Vec<String> {
        self.entries.values().map(|e| e.json.clone()).collect()
    }

    /// Run `watcher` starts its watch: what it is told first (a reload, or that the store
    /// cannot be read).
    pub fn watch(&mut self, watcher: (NodeIx, u64)) -> WatchEvent {
        let reachable = self.reachable(watcher.0);
        self.watchers.insert(
            watcher,
            Watcher {
                cursor: self.revision,
                lagging: !reachable,
                loaded: reachable,
            },
        );
        if reachable {
            WatchEvent::Reload(self.all())
        } else {
            WatchEvent::Unreachable
        }
    }

    /// Run `watcher`'s watch ends (the run stopped or was killed).
    pub fn unwatch(&mut self, watcher: (NodeIx, u64)) {
        self.watchers.remove(&watcher);
    }

    /// What every watch learns now: the changes since its cursor for a watcher that reaches
    /// the store (after an outage: a reload, or `Resumed` and the changes it missed), and
    /// `Unreachable` once for a watcher that no longer does.
    pub fn poll_watches(&mut self) -> Vec<((NodeIx, u64), Vec<WatchEvent>)> {
        let mut out = Vec::new();
        let keys: Vec<(NodeIx, u64)> = self.watchers.keys().copied().collect();
        for key in keys {
            let reachable = self.reachable(key.0);
            let Some(w) = self.watchers.get(&key).cloned() else {
                continue;
            };
            let mut events = Vec::new();
            let mut cursor = w.cursor;
            let mut lagging = w.lagging;
            match (reachable, w.lagging) {
                (false, false) => {
                    events.push(WatchEvent::Unreachable);
                    lagging = true;
                }
                (false, true) => {}
                (true, true) if !self.resumes || !w.loaded => {
                    events.push(WatchEvent::Reload(self.all()));
                    cursor = self.revision;
                    lagging = false;
                }
                (true, lagging_now) => {
                    if lagging_now {
                        events.push(WatchEvent::Resumed);
                    }
                    let from = self.log.partition_point(|(rev, _)| *rev <= cursor);
                    let changes: Vec<Change> =
                        self.log[from..].iter().map(|(_, c)| c.clone()).collect();
                    if !changes.is_empty() {
                        events.push(WatchEvent::Delta(changes));
                    }
                    cursor = self.revision;
                    lagging = false;
                }
            }
            if let Some(w) = self.watchers.get_mut(&key) {
                w.cursor = cursor;
                w.lagging = lagging;
                w.loaded |= !lagging;
            }
            if !events.is_empty() {
                out.push((key, events));
            }
        }
        out
    }
}
