//! Automatic mode (MISSION D1, D3, F5): the discovery agent of a node with `[discovery]`.
//!
//! Two tokio tasks per node, beside (never inside) the I/O thread:
//!
//! ```text
//!  lease task:  LeaseKeeper says when  -> store.put / renew (each bounded by STORE_OP_BOUND)
//!               answers -> LeaseKeeper -> events (lease acquired / lost, store unreachable)
//!  watch task:  store.watch()  -> reload | delta | unreachable
//!               -> Directory (diff) -> intents -> I/O thread (dial, fence, stop dialling)
//!  both:        events and status -> I/O thread (NodeEvent::Discovery) and the snapshot
//! ```
//!
//! Neither task ever touches a link's readiness: a store that is down or a lease that is lost
//! is reported (events, snapshot, metrics), and the links go on as the transport judges them
//! (MISSION F5). The I/O thread only learns *intents* from here: which peers to dial with
//! which fence, which to stop dialling.
//!
//! A descriptor that disappears (the node left, or its lease expired) stops the dialling of
//! that peer and removes its intents. An established connection to it is left alone: it stays
//! ready for as long as its probes are answered (or its publisher's beacons arrive), until
//! liveness, a transport error or a CLOSE ends it; then it is not dialled again and leaves
//! the snapshot. A lease is an authority record, not a liveness signal: a node whose
//! descriptor expired while the store was down is still a working peer (F5).
//!
//! On an orderly stop the lease task removes the node's descriptor (bounded by
//! [`REMOVE_BOUND`]) before the node closes its connections.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::command::Command;
pub use super::event::DiscoveryEvent;
pub use super::snapshot::DiscoverySnapshot;
use super::store::{Lease, RenewOutcome, Store, StoreError, WatchEvent};
use crate::proto::discovery::{
    Descriptor, Directory, Intent, LeaseEvent, LeaseKeeper, LeaseStatus, Local, StoreOp,
    LEASE_RENEW_INTERVAL, LEASE_TTL, STORE_RETRY,
};

/// Longest wait for one store operation; a store that takes longer counts as unreachable.
pub const STORE_OP_BOUND: Duration = Duration::from_secs(5);

/// Longest wait for the removal of the node's descriptor on an orderly stop.
pub const REMOVE_BOUND: Duration = Duration::from_secs(2);

/// What both tasks update and the snapshot reads.
#[derive(Debug)]
struct Status {
    store: String,
    descriptor: Descriptor,
    lease: LeaseStatus,
    confirmed_at: Option<Instant>,
    lease_reachable: bool,
    watch_reachable: bool,
    last_error: Option<(String, Instant)>,
    descriptors_seen: usize,
    outage: Outage,
}

impl Status {
    /// Logs the store's reachability, as both tasks see it together, when it changes: one
    /// line as it goes and one as it comes back, however many retries fail in between.
    fn log_reachability(&mut self, now: Instant) {
        let reachable = self.lease_reachable && self.watch_reachable;
        match self.outage.handle(reachable, now) {
            Some(OutageChange::Began) => {
                let error = self.last_error.as_ref().map_or("", |(e, _)| e.as_str());
                tracing::warn!(
                    store = %self.store,
                    %error,
                    "store unreachable: links go on as their liveness judges them; \
                     retrying every {STORE_RETRY:?}"
                );
            }
            // At the level of the line it closes, so that a log that shows one shows both.
            Some(OutageChange::Ended { lasted }) => tracing::warn!(
                store = %self.store,
                outage_ms = lasted.as_millis() as u64,
                "store reachable again"
            ),
            None => {}
        }
    }
}

/// Whether the store is in an outage, and since when: turns a stream of reachability
/// verdicts (one per store operation) into its changes.
#[derive(Debug, Default)]
struct Outage {
    since: Option<Instant>,
}

/// A change of [`Outage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutageChange {
    /// The store became unreachable.
    Began,
    /// The store answers again, after `lasted`.
    Ended { lasted: Duration },
}

impl Outage {
    /// The store is `reachable` (or not) at `now`: the change this makes, if any.
    fn handle(&mut self, reachable: bool, now: Instant) -> Option<OutageChange> {
        match (reachable, self.since) {
            (false, None) => {
                self.since = Some(now);
                Some(OutageChange::Began)
            }
            (true, Some(since)) => {
                self.since = None;
                Some(OutageChange::Ended {
                    lasted: now.saturating_duration_since(since),
                })
            }
            _ => None,
        }
    }
}

/// How the agent hands the I/O thread its intents and events: false once the node is gone.
pub(crate) type ToIo = Arc<dyn Fn(Command) -> bool + Send + Sync>;

/// A running discovery agent: its two tasks and their stop signal. Dropping it stops the
/// tasks too (the lease task still removes the descriptor).
pub(crate) struct Agent {
    stop: watch::Sender<bool>,
    lease_task: Option<tokio::task::JoinHandle<()>>,
    watch_task: Option<tokio::task::JoinHandle<()>>,
    status: Arc<Mutex<Status>>,
}

impl Agent {
    /// Starts the agent on `handle`'s runtime.
    pub(crate) fn spawn(
        handle: &tokio::runtime::Handle,
        store: Arc<dyn Store>,
        descriptor: Descriptor,
        local: Local,
        to_io: ToIo,
    ) -> Agent {
        let (stop, stopped) = watch::channel(false);
        let status = Arc::new(Mutex::new(Status {
            store: store.url(),
            descriptor: descriptor.clone(),
            lease: LeaseStatus::Acquiring,
            confirmed_at: None,
            lease_reachable: true,
            watch_reachable: true,
            last_error: None,
            descriptors_seen: 0,
            outage: Outage::default(),
        }));
        let lease_task = handle.spawn(lease_task(
            store.clone(),
            descriptor,
            stopped.clone(),
            to_io.clone(),
            status.clone(),
        ));
        let watch_task = handle.spawn(watch_task(store, local, stopped, to_io, status.clone()));
        Agent {
            stop,
            lease_task: Some(lease_task),
            watch_task: Some(watch_task),
            status,
        }
    }

    /// Stops the agent: the watch ends, the descriptor is removed (bounded by
    /// [`REMOVE_BOUND`]); returns once both tasks ended.
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.send(true);
        for task in [self.lease_task.take(), self.watch_task.take()]
            .into_iter()
            .flatten()
        {
            let _ = task.await;
        }
    }

    /// The discovery part of a snapshot taken at `now`.
    pub(crate) fn snapshot(&self, now: Instant) -> DiscoverySnapshot {
        let s = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        let ms = |t: Instant| now.saturating_duration_since(t).as_millis() as u64;
        DiscoverySnapshot {
            store: s.store.clone(),
            store_reachable: s.lease_reachable && s.watch_reachable,
            last_store_error: s.last_error.as_ref().map(|(e, at)| (e.clone(), ms(*at))),
            lease: s.lease,
            lease_age_ms: s.confirmed_at.map(ms),
            lease_ttl_ms: LEASE_TTL.as_millis() as u64,
            lease_renew_interval_ms: LEASE_RENEW_INTERVAL.as_millis() as u64,
            descriptors_seen: s.descriptors_seen,
            descriptor: s.descriptor.clone(),
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn lock(status: &Mutex<Status>) -> std::sync::MutexGuard<'_, Status> {
    status.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs one store operation, bounded by [`STORE_OP_BOUND`].
async fn bounded<T>(
    op: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(STORE_OP_BOUND, op).await {
        Ok(r) => r,
        Err(_) => Err(StoreError::Unavailable(format!(
            "no answer within {STORE_OP_BOUND:?}"
        ))),
    }
}

/// Publishes and renews the node's descriptor on the lease's own schedule; removes it on stop.
async fn lease_task(
    store: Arc<dyn Store>,
    descriptor: Descriptor,
    mut stopped: watch::Receiver<bool>,
    to_io: ToIo,
    status: Arc<Mutex<Status>>,
) {
    let mut keeper = LeaseKeeper::new(Instant::now());
    let mut lease: Option<Lease> = None;
    loop {
        let now = Instant::now();
        keeper.handle_timeout(now);
        if let Some(op) = keeper.poll_op(now) {
            let answer = async {
                match op {
                    StoreOp::Put => match bounded(store.put(&descriptor, LEASE_TTL)).await {
                        Ok(l) => {
                            lease = Some(l);
                            keeper.handle_put(Ok(()), Instant::now());
                        }
                        Err(e) => {
                            count_error(op);
                            keeper.handle_put(Err(e.to_string()), Instant::now());
                        }
                    },
                    _ => {
                        let result = match &lease {
                            Some(l) => bounded(store.renew(l)).await,
                            None => Ok(RenewOutcome::Lost),
                        };
                        if result.is_err() {
                            count_error(op);
                        }
                        keeper.handle_renew(result.map_err(|e| e.to_string()), Instant::now());
                    }
                }
            };
            tokio::select! {
                _ = answer => {}
                _ = stopped.changed() => break,
            }
        }
        let mut events = Vec::new();
        while let Some(ev) = keeper.poll_event() {
            events.push(match ev {
                LeaseEvent::Acquired => DiscoveryEvent::LeaseAcquired,
                LeaseEvent::Lost(reason) => {
                    metrics::counter!("zmesh_discovery_lease_lost_total").increment(1);
                    DiscoveryEvent::LeaseLost { reason }
                }
                LeaseEvent::Superseded { generation } => {
                    DiscoveryEvent::LeaseSuperseded { generation }
                }
                LeaseEvent::StoreUnreachable { op, error } => {
                    lock(&status).last_error = Some((error.clone(), Instant::now()));
                    DiscoveryEvent::StoreUnreachable { op, error }
                }
                LeaseEvent::StoreReachable => DiscoveryEvent::StoreReachable { op: StoreOp::Renew },
            });
        }
        {
            let now = Instant::now();
            let mut s = lock(&status);
            s.lease = keeper.status();
            s.confirmed_at = keeper.age(now).map(|age| now - age);
            s.lease_reachable = keeper.store_reachable() != Some(false);
            s.log_reachability(now);
            let age = keeper.age(now).map_or(-1.0, |a| a.as_secs_f64());
            metrics::gauge!("zmesh_discovery_lease_age_seconds").set(age);
            metrics::gauge!("zmesh_discovery_store_reachable").set(
                if s.lease_reachable && s.watch_reachable {
                    1.0
                } else {
                    0.0
                },
            );
        }
        if !events.is_empty() && !to_io(Command::Discovery(Vec::new(), events)) {
            break;
        }
        let wake = keeper
            .poll_timeout()
            .unwrap_or_else(|| Instant::now() + LEASE_RENEW_INTERVAL);
        tokio::select! {
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            _ = stopped.changed() => break,
        }
    }
    // An orderly stop (or the node handle dropped): the descriptor goes, if it is still ours.
    if let (Some(l), true) = (lease, keeper.status() != LeaseStatus::Superseded) {
        if let Err(e) = tokio::time::timeout(REMOVE_BOUND, store.remove(&l))
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("remove timed out".into())))
        {
            count_error(StoreOp::Remove);
            tracing::warn!(error = %e, "descriptor not removed; it expires with its lease");
        }
    }
    keeper.handle_released();
    lock(&status).lease = keeper.status();
}

fn count_error(op: StoreOp) {
    metrics::counter!("zmesh_discovery_store_errors_total", "op" => op.as_str()).increment(1);
}

/// Follows the store's descriptors and hands the I/O thread what they ask of its links.
async fn watch_task(
    store: Arc<dyn Store>,
    local: Local,
    mut stopped: watch::Receiver<bool>,
    to_io: ToIo,
    status: Arc<Mutex<Status>>,
) {
    let mut dir = Directory::new(local);
    let mut reachable = true;
    'outer: loop {
        let mut w = match store.watch() {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the store");
                tokio::select! {
                    _ = tokio::time::sleep(STORE_RETRY) => continue,
                    _ = stopped.changed() => break,
                }
            }
        };
        loop {
            let ev = tokio::select! {
                ev = w.next() => ev,
                _ = stopped.changed() => break 'outer,
            };
            let Some(ev) = ev else {
                // The watch ended (its task failed): start another.
                continue 'outer;
            };
            let mut events = Vec::new();
            let intents: Vec<Intent> = match ev {
                WatchEvent::Reload {
                    descriptors,
                    reason,
                } => {
                    if !std::mem::replace(&mut reachable, true) {
                        events.push(DiscoveryEvent::StoreReachable { op: StoreOp::Watch });
                    }
                    let intents = dir.handle_reload(descriptors);
                    events.push(DiscoveryEvent::Reloaded {
                        reason,
                        descriptors: dir.len(),
                    });
                    intents
                }
                WatchEvent::Delta(changes) => {
                    // Every change is reported; the directory applies each RID's last one
                    // (`Directory::handle_changes`: a resumed backlog means its end state).
                    let mut batch = Vec::with_capacity(changes.len());
                    for c in changes {
                        match c {
                            super::store::Change::Put(d) => {
                                if d.rid != dir.local().rid {
                                    events.push(DiscoveryEvent::DescriptorPut {
                                        rid: d.rid.clone(),
                                        generation: d.generation,
                                    });
                                }
                                batch.push((d.rid.clone(), Some(d)));
                            }
                            super::store::Change::Removed { rid } => {
                                if rid != dir.local().rid {
                                    events.push(DiscoveryEvent::DescriptorRemoved {
                                        rid: rid.clone(),
                                    });
                                }
                                batch.push((rid, None));
                            }
                        }
                    }
                    dir.handle_changes(batch)
                }
                WatchEvent::Resumed => {
                    if !std::mem::replace(&mut reachable, true) {
                        events.push(DiscoveryEvent::StoreReachable { op: StoreOp::Watch });
                    }
                    Vec::new()
                }
                WatchEvent::Unreachable(e) => {
                    reachable = false;
                    count_error(StoreOp::Watch);
                    lock(&status).last_error = Some((e.to_string(), Instant::now()));
                    events.push(DiscoveryEvent::StoreUnreachable {
                        op: StoreOp::Watch,
                        error: e.to_string(),
                    });
                    Vec::new()
                }
            };
            {
                let mut s = lock(&status);
                s.watch_reachable = reachable;
                s.log_reachability(Instant::now());
                s.descriptors_seen = dir.len();
                metrics::gauge!("zmesh_discovery_descriptors").set(dir.len() as f64);
            }
            if (!intents.is_empty() || !events.is_empty())
                && !to_io(Command::Discovery(intents, events))
            {
                break 'outer;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MISSION F5, operator view: however many operations fail, an outage is one
    /// change as it begins and one as it ends, with how long it lasted.
    #[test]
    fn an_outage_is_one_change_each_way_however_many_retries() {
        let t0 = Instant::now();
        let mut o = Outage::default();
        assert_eq!(o.handle(true, t0), None);
        assert_eq!(o.handle(false, t0), Some(OutageChange::Began));
        for i in 1..=10 {
            assert_eq!(o.handle(false, t0 + STORE_RETRY * i), None, "retry {i}");
        }
        let back = t0 + Duration::from_millis(10_500);
        assert_eq!(
            o.handle(true, back),
            Some(OutageChange::Ended {
                lasted: Duration::from_millis(10_500)
            })
        );
        assert_eq!(o.handle(true, back), None);
        assert_eq!(o.handle(false, back), Some(OutageChange::Began));
    }
}
