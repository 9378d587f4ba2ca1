//! An idempotency store in this process's memory, for tests.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{
    Begin, Fingerprint, IdempotencyFuture, IdempotencyStore, IdempotencyStoreError, Outcome, Owner,
    Record, RecordState, ScopedKey,
};

/// Every this many `begin`s, sweep the whole map for expired records, so the cost of
/// eviction is spread over the calls that fill it.
const SWEEP_EVERY: u32 = 64;

/// An idempotency store in a `HashMap` behind a mutex: for tests and examples.
///
/// It is not an answer to the problem MISSION K3 solves. It dies with the process, which is
/// exactly when a durable store would earn its keep: after a crash, a redelivered command
/// finds nothing here and runs again. Use [`SqliteIdempotencyStore`](super::SqliteIdempotencyStore) (or another
/// durable [`IdempotencyStore`]) to run a command once.
///
/// Expiry is measured on the monotonic clock (`Instant`), which is right for records that
/// never outlive the process. Expired records are evicted by
/// [`remove_expired`](IdempotencyStore::remove_expired) and, amortised, by `begin`.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    records: HashMap<ScopedKey, Entry>,
    begins_since_sweep: u32,
}

#[derive(Debug)]
struct Entry {
    record: Record,
    /// `None`: the retention was too long to represent; the record never expires.
    expires: Option<Instant>,
}

impl Entry {
    fn is_live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|at| now < at)
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many records the map holds, expired or not (for tests of eviction).
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether the map holds no record at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every mutation under the lock is a single HashMap call, so a panic elsewhere while
        // the lock was held cannot have left a half-written record: recover the map.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn begin_now(
        &self,
        key: &ScopedKey,
        fingerprint: &Fingerprint,
        owner: &Owner,
        retention: Duration,
        now: Instant,
    ) -> Begin {
        let mut inner = self.lock();
        inner.begins_since_sweep += 1;
        if inner.begins_since_sweep >= SWEEP_EVERY {
            inner.begins_since_sweep = 0;
            inner.records.retain(|_, entry| entry.is_live(now));
        }
        if let Some(entry) = inner.records.get(key) {
            if entry.is_live(now) {
                return Begin::Existing(entry.record.clone());
            }
        }
        inner.records.insert(
            key.clone(),
            Entry {
                record: Record {
                    fingerprint: *fingerprint,
                    owner: owner.clone(),
                    state: RecordState::InProgress,
                },
                expires: now.checked_add(retention),
            },
        );
        Begin::Started
    }

    fn complete_now(
        &self,
        key: &ScopedKey,
        outcome: &Outcome,
        now: Instant,
    ) -> Result<(), IdempotencyStoreError> {
        let mut inner = self.lock();
        match inner.records.get_mut(key) {
            Some(entry) if entry.is_live(now) && entry.record.state == RecordState::InProgress => {
                entry.record.state = RecordState::Done(outcome.clone());
                Ok(())
            }
            _ => Err(IdempotencyStoreError::NotInProgress),
        }
    }

    fn remove_expired_now(&self, now: Instant) -> u64 {
        let mut inner = self.lock();
        let before = inner.records.len();
        inner.records.retain(|_, entry| entry.is_live(now));
        inner.begins_since_sweep = 0;
        (before - inner.records.len()) as u64
    }
}

impl IdempotencyStore for MemoryStore {
    fn begin(
        &self,
        key: &ScopedKey,
        fingerprint: &Fingerprint,
        owner: &Owner,
        caller: &str,
        retention: Duration,
    ) -> IdempotencyFuture<'_, Begin> {
        // The caller is kept for an operator's listing, which only the durable stores offer.
        let _ = caller;
        let answer = self.begin_now(key, fingerprint, owner, retention, Instant::now());
        Box::pin(std::future::ready(Ok(answer)))
    }

    fn complete(&self, key: &ScopedKey, outcome: &Outcome) -> IdempotencyFuture<'_, ()> {
        let answer = self.complete_now(key, outcome, Instant::now());
        Box::pin(std::future::ready(answer))
    }

    fn remove_expired(&self) -> IdempotencyFuture<'_, u64> {
        let removed = self.remove_expired_now(Instant::now());
        Box::pin(std::future::ready(Ok(removed)))
    }

    /// Its records go with the process.
    fn is_durable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            rid: "node-a".into(),
            generation: 1,
        }
    }

    fn fp() -> Fingerprint {
        Fingerprint::of_call("ch", "m", b"args")
    }

    /// K3: expiry is judged against the `now` handed in, so it is tested without waiting:
    /// live strictly before the expiry instant, absent from it on.
    #[test]
    fn k3_memory_expiry_at_the_instant() {
        let store = MemoryStore::new();
        let key = ScopedKey::from_request("c", 1, 1);
        let t0 = Instant::now();
        let retention = Duration::from_secs(10);
        assert_eq!(
            store.begin_now(&key, &fp(), &owner(), retention, t0),
            Begin::Started
        );
        assert!(matches!(
            store.begin_now(
                &key,
                &fp(),
                &owner(),
                retention,
                t0 + retention - Duration::from_nanos(1)
            ),
            Begin::Existing(_)
        ));
        let outcome = Outcome {
            code: 0,
            payload: bytes::Bytes::from_static(b"r"),
        };
        assert_eq!(
            store.complete_now(&key, &outcome, t0 + retention),
            Err(IdempotencyStoreError::NotInProgress),
            "an expired record cannot be completed"
        );
        assert_eq!(
            store.begin_now(&key, &fp(), &owner(), retention, t0 + retention),
            Begin::Started,
            "an expired record counts as absent"
        );
    }

    /// K3: `begin` sweeps expired records every SWEEP_EVERY calls, so a store fed only new
    /// keys stays bounded by what is live.
    #[test]
    fn k3_memory_begin_evicts_amortised() {
        let store = MemoryStore::new();
        let t0 = Instant::now();
        let short = Duration::from_secs(1);
        for i in 0..u64::from(SWEEP_EVERY) - 1 {
            let key = ScopedKey::from_request("c", 1, i);
            store.begin_now(&key, &fp(), &owner(), short, t0);
        }
        assert_eq!(store.len(), SWEEP_EVERY as usize - 1);
        let later = t0 + Duration::from_secs(2);
        let key = ScopedKey::from_request("c", 1, u64::MAX);
        store.begin_now(&key, &fp(), &owner(), short, later);
        assert_eq!(store.len(), 1, "the sweep left only the new live record");
    }

    /// K3: `remove_expired` counts what it removed and keeps live records.
    #[test]
    fn k3_memory_remove_expired_counts() {
        let store = MemoryStore::new();
        let t0 = Instant::now();
        store.begin_now(
            &ScopedKey::from_request("c", 1, 1),
            &fp(),
            &owner(),
            Duration::from_secs(1),
            t0,
        );
        store.begin_now(
            &ScopedKey::from_request("c", 1, 2),
            &fp(),
            &owner(),
            Duration::from_secs(100),
            t0,
        );
        assert_eq!(store.remove_expired_now(t0 + Duration::from_secs(5)), 1);
        assert_eq!(store.len(), 1);
        assert!(!store.is_empty());
    }

    /// K3: a retention too long for the clock to represent means "never expires", not a
    /// panic.
    #[test]
    fn k3_memory_unrepresentable_retention_never_expires() {
        let store = MemoryStore::new();
        let key = ScopedKey::from_request("c", 1, 1);
        let t0 = Instant::now();
        store.begin_now(&key, &fp(), &owner(), Duration::MAX, t0);
        assert_eq!(
            store.remove_expired_now(t0 + Duration::from_secs(1 << 40)),
            0
        );
    }
}
