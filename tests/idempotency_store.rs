//! MISSION K3: the idempotency store contract, run against both stores (`MemoryStore` and
//! `SqliteIdempotencyStore`), plus what only a durable store can show: records that survive closing and
//! reopening the file, an in-progress record left by a crashed writer, several connections
//! racing on one file, and an unwritable or foreign file refused with an error, not a panic.

use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Barrier;
use zmesh::runtime::idempotency::{
    Begin, Fingerprint, IdempotencyStore, IdempotencyStoreError, MemoryStore, Outcome, Owner,
    Record, RecordState, ScopedKey, SqliteIdempotencyStore, DEFAULT_RETENTION,
};

/// A directory under the system temp dir, removed on drop (even on a panic).
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("zmesh-idem-{name}-"))
            .tempdir()
            .expect("create temp dir");
        TempDir(dir)
    }

    fn db(&self) -> PathBuf {
        self.0.path().join("idempotency.db")
    }
}

fn memory_store() -> (Arc<dyn IdempotencyStore>, Option<TempDir>) {
    (Arc::new(MemoryStore::new()), None)
}

fn sqlite_store() -> (Arc<dyn IdempotencyStore>, Option<TempDir>) {
    let dir = TempDir::new("contract");
    let store = SqliteIdempotencyStore::open(dir.db()).expect("open sqlite store");
    (Arc::new(store), Some(dir))
}

fn owner(rid: &str, generation: u64) -> Owner {
    Owner {
        rid: rid.into(),
        generation,
    }
}

fn fp(args: &[u8]) -> Fingerprint {
    Fingerprint::of_call("pump", "dispense", args)
}

fn key(k: &str) -> ScopedKey {
    ScopedKey::from_idempotency_key("pump", "dispense", k)
}

/// Polls `begin` on `key` until it answers Started (the record expired), within a bound.
async fn begin_until_started(store: &dyn IdempotencyStore, key: &ScopedKey, who: &Owner) {
    let bound = Instant::now() + Duration::from_secs(5);
    loop {
        let answer = store
            .begin(key, &fp(b"again"), who, "caller", DEFAULT_RETENTION)
            .await
            .expect("begin");
        if answer == Begin::Started {
            return;
        }
        assert!(
            Instant::now() < bound,
            "the record did not expire within 5 s: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The contract every [`IdempotencyStore`] keeps; each function is one test, run for both
/// stores by `contract_suite!`.
mod contract {
    use super::*;

    /// K3: Started, then Existing(InProgress) with the first caller's fingerprint and owner,
    /// then complete, then Existing(Done) with the exact outcome bytes; a second complete is
    /// refused.
    pub async fn lifecycle(store: &dyn IdempotencyStore) {
        let k = key("wo-1");
        let me = owner("node-a", 7);
        assert_eq!(
            store
                .begin(&k, &fp(b"\x01"), &me, "caller", DEFAULT_RETENTION)
                .await
                .expect("begin"),
            Begin::Started
        );
        let expected_in_progress = Record {
            fingerprint: fp(b"\x01"),
            owner: me.clone(),
            state: RecordState::InProgress,
        };
        let other = owner("node-b", 9);
        assert_eq!(
            store
                .begin(&k, &fp(b"\x01"), &other, "caller", DEFAULT_RETENTION)
                .await
                .expect("begin"),
            Begin::Existing(expected_in_progress),
            "a second begin sees the record unchanged"
        );
        let payload: Vec<u8> = (0..=255u8).chain([0, 0, 0xC3]).collect();
        let outcome = Outcome {
            code: 0,
            payload: Bytes::from(payload),
        };
        store.complete(&k, &outcome).await.expect("complete");
        assert_eq!(
            store
                .begin(&k, &fp(b"\x01"), &other, "caller", DEFAULT_RETENTION)
                .await
                .expect("begin"),
            Begin::Existing(Record {
                fingerprint: fp(b"\x01"),
                owner: me,
                state: RecordState::Done(outcome.clone()),
            })
        );
        assert_eq!(
            store.complete(&k, &outcome).await,
            Err(IdempotencyStoreError::NotInProgress),
            "a done record cannot be completed again"
        );
    }

    /// K3: an error outcome keeps its code and message; an empty payload stays empty.
    pub async fn error_outcome_round_trips(store: &dyn IdempotencyStore) {
        let me = owner("node-a", 1);
        for (k, outcome) in [
            (
                "err",
                Outcome {
                    code: 1,
                    payload: Bytes::from_static("the valve is stuck".as_bytes()),
                },
            ),
            (
                "empty",
                Outcome {
                    code: 0,
                    payload: Bytes::new(),
                },
            ),
            (
                "big",
                Outcome {
                    code: 255,
                    payload: Bytes::from(vec![0xA5; 1 << 20]),
                },
            ),
        ] {
            let k = key(k);
            store
                .begin(&k, &fp(b""), &me, "caller", DEFAULT_RETENTION)
                .await
                .expect("begin");
            store.complete(&k, &outcome).await.expect("complete");
            match store
                .begin(&k, &fp(b""), &me, "caller", DEFAULT_RETENTION)
                .await
            {
                Ok(Begin::Existing(record)) => {
                    assert_eq!(record.state, RecordState::Done(outcome))
                }
                other => panic!("expected the done record, got {other:?}"),
            }
        }
    }

    /// K3: completing a key that was never begun is refused.
    pub async fn complete_without_begin(store: &dyn IdempotencyStore) {
        let outcome = Outcome {
            code: 0,
            payload: Bytes::new(),
        };
        assert_eq!(
            store.complete(&key("never"), &outcome).await,
            Err(IdempotencyStoreError::NotInProgress)
        );
    }

    /// K3: the same key with other arguments is visible to the caller as a fingerprint
    /// mismatch (the runtime answers InvalidParams), both in progress and done.
    pub async fn fingerprint_mismatch_is_visible(store: &dyn IdempotencyStore) {
        let k = key("wo-2");
        let me = owner("node-a", 1);
        store
            .begin(&k, &fp(b"180"), &me, "caller", DEFAULT_RETENTION)
            .await
            .expect("begin");
        for _ in 0..2 {
            match store
                .begin(&k, &fp(b"190"), &me, "caller", DEFAULT_RETENTION)
                .await
                .expect("begin")
            {
                Begin::Existing(record) => {
                    assert_eq!(record.fingerprint, fp(b"180"));
                    assert_ne!(record.fingerprint, fp(b"190"));
                }
                Begin::Started => panic!("a reused key must not start a second run"),
            }
            let outcome = Outcome {
                code: 0,
                payload: Bytes::from_static(b"ok"),
            };
            let _ = store.complete(&k, &outcome).await;
        }
    }

    /// K3: an expired record counts as absent: a begin after the retention starts afresh,
    /// and the new record carries the new owner. Expiry is elapsed time, so this polls with
    /// a bound instead of sleeping a fixed amount.
    pub async fn expired_record_counts_as_absent(store: &dyn IdempotencyStore) {
        let k = key("short");
        let first = owner("node-a", 1);
        store
            .begin(&k, &fp(b"x"), &first, "caller", Duration::from_millis(1))
            .await
            .expect("begin");
        let second = owner("node-b", 2);
        begin_until_started(store, &k, &second).await;
        match store
            .begin(&k, &fp(b"x"), &first, "caller", DEFAULT_RETENTION)
            .await
            .expect("begin")
        {
            Begin::Existing(record) => {
                assert_eq!(record.owner, second);
                assert_eq!(record.fingerprint, fp(b"again"));
                assert_eq!(record.state, RecordState::InProgress);
            }
            Begin::Started => panic!("the fresh record must be live"),
        }
    }

    /// K3: an expired in-progress record cannot be completed (it no longer exists).
    pub async fn expired_record_cannot_be_completed(store: &dyn IdempotencyStore) {
        let k = key("late");
        store
            .begin(
                &k,
                &fp(b"x"),
                &owner("node-a", 1),
                "caller",
                Duration::from_millis(1),
            )
            .await
            .expect("begin");
        // Expiry is elapsed time itself: wait well past the 1 ms retention.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let outcome = Outcome {
            code: 0,
            payload: Bytes::new(),
        };
        assert_eq!(
            store.complete(&k, &outcome).await,
            Err(IdempotencyStoreError::NotInProgress)
        );
    }

    /// K3: remove_expired deletes expired records, counts them, and keeps live ones.
    pub async fn remove_expired_keeps_live_records(store: &dyn IdempotencyStore) {
        let me = owner("node-a", 1);
        for k in ["gone-1", "gone-2"] {
            store
                .begin(&key(k), &fp(b""), &me, "caller", Duration::from_millis(1))
                .await
                .expect("begin");
        }
        store
            .begin(&key("kept"), &fp(b""), &me, "caller", DEFAULT_RETENTION)
            .await
            .expect("begin");
        let bound = Instant::now() + Duration::from_secs(5);
        let mut removed = 0;
        while removed < 2 {
            removed += store.remove_expired().await.expect("remove_expired");
            assert!(Instant::now() < bound, "only {removed} of 2 expired in 5 s");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(removed, 2);
        assert!(matches!(
            store
                .begin(&key("kept"), &fp(b""), &me, "caller", DEFAULT_RETENTION)
                .await,
            Ok(Begin::Existing(_))
        ));
    }

    /// K3: 32 tasks begin the same key at once; exactly one is Started and every other one
    /// sees the winner's record.
    pub async fn concurrent_begin_has_one_winner(stores: Vec<Arc<dyn IdempotencyStore>>) {
        const TASKS: u64 = 32;
        let k = key("race");
        let barrier = Arc::new(Barrier::new(TASKS as usize));
        let mut tasks = Vec::new();
        for i in 0..TASKS {
            let store = Arc::clone(&stores[i as usize % stores.len()]);
            let barrier = Arc::clone(&barrier);
            let k = k.clone();
            tasks.push(tokio::spawn(async move {
                let me = owner("node", i + 1);
                barrier.wait().await;
                let answer = store
                    .begin(&k, &fp(b"race"), &me, "caller", DEFAULT_RETENTION)
                    .await
                    .expect("begin");
                (me, answer)
            }));
        }
        let mut winners = Vec::new();
        let mut seen = Vec::new();
        for task in tasks {
            match task.await.expect("task") {
                (me, Begin::Started) => winners.push(me),
                (_, Begin::Existing(record)) => seen.push(record.owner),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one Started: {winners:?}");
        assert!(seen.iter().all(|o| *o == winners[0]), "{seen:?}");
    }

    /// K3: keys from the two constructors never collide, even when their inputs spell the
    /// same text, and parts cannot slide between fields.
    pub async fn constructor_keys_never_collide(store: &dyn IdempotencyStore) {
        let me = owner("node-a", 1);
        let keys = [
            ScopedKey::from_idempotency_key("rid", "7", "9"),
            ScopedKey::from_request("rid", 7, 9),
            ScopedKey::from_idempotency_key("a:b", "c", "9"),
            ScopedKey::from_idempotency_key("a", "b:c", "9"),
            ScopedKey::from_request("a", 17, 9),
            ScopedKey::from_request("a1", 7, 9),
        ];
        for k in &keys {
            assert_eq!(
                store
                    .begin(k, &fp(b""), &me, "caller", DEFAULT_RETENTION)
                    .await
                    .expect("begin"),
                Begin::Started,
                "{k} collided with an earlier key"
            );
        }
    }
}

macro_rules! contract_suite {
    ($name:ident, $make:path) => {
        /// MISSION K3: the store contract for this store.
        mod $name {
            use super::*;

            #[tokio::test]
            async fn k3_lifecycle_started_in_progress_done() {
                let (store, _dir) = $make();
                contract::lifecycle(&*store).await;
            }

            #[tokio::test]
            async fn k3_error_outcome_round_trips() {
                let (store, _dir) = $make();
                contract::error_outcome_round_trips(&*store).await;
            }

            #[tokio::test]
            async fn k3_complete_without_begin_is_refused() {
                let (store, _dir) = $make();
                contract::complete_without_begin(&*store).await;
            }

            #[tokio::test]
            async fn k3_fingerprint_mismatch_is_visible() {
                let (store, _dir) = $make();
                contract::fingerprint_mismatch_is_visible(&*store).await;
            }

            #[tokio::test]
            async fn k3_expired_record_counts_as_absent() {
                let (store, _dir) = $make();
                contract::expired_record_counts_as_absent(&*store).await;
            }

            #[tokio::test]
            async fn k3_expired_record_cannot_be_completed() {
                let (store, _dir) = $make();
                contract::expired_record_cannot_be_completed(&*store).await;
            }

            #[tokio::test]
            async fn k3_remove_expired_keeps_live_records() {
                let (store, _dir) = $make();
                contract::remove_expired_keeps_live_records(&*store).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn k3_concurrent_begin_has_one_winner() {
                let (store, _dir) = $make();
                contract::concurrent_begin_has_one_winner(vec![store]).await;
            }

            #[tokio::test]
            async fn k3_constructor_keys_never_collide() {
                let (store, _dir) = $make();
                contract::constructor_keys_never_collide(&*store).await;
            }
        }
    };
}

contract_suite!(memory, memory_store);
contract_suite!(sqlite, sqlite_store);

/// MISSION K3 (durability): open, begin, complete, close; a new store on the same file
/// answers the redelivery from the record.
#[tokio::test]
async fn k3_sqlite_record_survives_reopen() {
    let dir = TempDir::new("reopen");
    let k = ScopedKey::from_request("caller", 3, 41);
    let me = owner("node-a", 5);
    let outcome = Outcome {
        code: 0,
        payload: Bytes::from_static(b"\x93\x01\x02\x03"),
    };
    {
        let store = SqliteIdempotencyStore::open(dir.db()).expect("open");
        assert_eq!(
            store
                .begin(&k, &fp(b"a"), &me, "caller", DEFAULT_RETENTION)
                .await
                .expect("begin"),
            Begin::Started
        );
        store.complete(&k, &outcome).await.expect("complete");
    }
    let store = SqliteIdempotencyStore::open(dir.db()).expect("reopen");
    assert_eq!(
        store
            .begin(
                &k,
                &fp(b"a"),
                &owner("node-a", 6),
                "caller",
                DEFAULT_RETENTION
            )
            .await
            .expect("begin"),
        Begin::Existing(Record {
            fingerprint: fp(b"a"),
            owner: me,
            state: RecordState::Done(outcome),
        })
    );
}

/// MISSION K3: a writer that "crashed" after begin (its connection leaked, never closed or
/// checkpointed) leaves an in-progress record that the next run sees with the dead run's
/// owner, so the runtime answers UnknownOutcome instead of running the command again.
#[tokio::test]
async fn k3_sqlite_in_progress_record_of_a_crashed_writer() {
    let dir = TempDir::new("crash");
    let k = key("wo-crash");
    let dead = owner("node-a", 11);
    let store = SqliteIdempotencyStore::open(dir.db()).expect("open");
    assert_eq!(
        store
            .begin(&k, &fp(b"a"), &dead, "caller", DEFAULT_RETENTION)
            .await
            .expect("begin"),
        Begin::Started
    );
    // No complete, no orderly close: the connection is leaked, as a crash would leave it.
    std::mem::forget(store);
    let next_run = SqliteIdempotencyStore::open(dir.db()).expect("reopen");
    assert_eq!(
        next_run
            .begin(
                &k,
                &fp(b"a"),
                &owner("node-a", 12),
                "caller",
                DEFAULT_RETENTION
            )
            .await
            .expect("begin"),
        Begin::Existing(Record {
            fingerprint: fp(b"a"),
            owner: dead,
            state: RecordState::InProgress,
        })
    );
}

/// MISSION K3: two connections to one file (as two processes sharing it would have) race 32
/// begins on one key: exactly one Started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k3_sqlite_two_connections_one_winner() {
    let dir = TempDir::new("two-conns");
    let a: Arc<dyn IdempotencyStore> =
        Arc::new(SqliteIdempotencyStore::open(dir.db()).expect("open a"));
    let b: Arc<dyn IdempotencyStore> =
        Arc::new(SqliteIdempotencyStore::open(dir.db()).expect("open b"));
    contract::concurrent_begin_has_one_winner(vec![a, b]).await;
}

/// MISSION K3: a store file that cannot be created is `Unavailable` from `open`, not a
/// panic. Tests may run as root, where permission bits do not stop writes, so the path is
/// made impossible instead: its parent is a regular file, which no user can create a file in.
#[test]
fn k3_sqlite_uncreatable_file_is_unavailable() {
    let dir = TempDir::new("uncreatable");
    let not_a_dir = dir.0.path().join("plain-file");
    std::fs::write(&not_a_dir, b"not a directory").expect("write");
    match SqliteIdempotencyStore::open(not_a_dir.join("idempotency.db")) {
        Err(IdempotencyStoreError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// MISSION K3: a store that can be read but not written refuses `begin` and `complete` with
/// `Unavailable` (the runtime then answers UnknownOutcome and does not run the command). Root ignores
/// permission bits, so the file is opened read-only through SQLite's `mode=ro` URI flag,
/// which SQLite enforces for any user.
#[tokio::test]
async fn k3_sqlite_read_only_store_is_unavailable() {
    let dir = TempDir::new("read-only");
    let k = key("wo-ro");
    let me = owner("node-a", 1);
    let outcome = Outcome {
        code: 0,
        payload: Bytes::from_static(b"done"),
    };
    {
        let store = SqliteIdempotencyStore::open(dir.db()).expect("create");
        store
            .begin(&k, &fp(b""), &me, "caller", DEFAULT_RETENTION)
            .await
            .expect("begin");
        store.complete(&k, &outcome).await.expect("complete");
        store
            .begin(
                &key("wo-pending"),
                &fp(b""),
                &me,
                "caller",
                DEFAULT_RETENTION,
            )
            .await
            .expect("begin");
    }
    let uri = format!("file:{}?mode=ro", dir.db().display());
    // The file exists with this build's schema, so opening it needs no write and succeeds;
    // the refusal comes from the first operation that must write.
    let store = SqliteIdempotencyStore::open(&uri).expect("open read-only");
    assert!(
        matches!(
            store
                .begin(&key("new"), &fp(b""), &me, "caller", DEFAULT_RETENTION)
                .await,
            Err(IdempotencyStoreError::Unavailable(_))
        ),
        "a begin that must write cannot succeed on a read-only store"
    );
    assert!(
        matches!(
            store.complete(&key("wo-pending"), &outcome).await,
            Err(IdempotencyStoreError::Unavailable(_))
        ),
        "a complete cannot succeed on a read-only store"
    );
    assert_eq!(
        store
            .begin(&k, &fp(b""), &me, "caller", DEFAULT_RETENTION)
            .await,
        Ok(Begin::Existing(Record {
            fingerprint: fp(b""),
            owner: me,
            state: RecordState::Done(outcome),
        })),
        "reading a done record needs no write"
    );
}

/// MISSION K3: a file that is not an SQLite database is `Corrupt`, not a panic and not
/// silently replaced.
#[test]
fn k3_sqlite_foreign_file_is_corrupt() {
    let dir = TempDir::new("foreign");
    std::fs::write(dir.db(), vec![0x42; 8192]).expect("write");
    match SqliteIdempotencyStore::open(dir.db()) {
        Err(IdempotencyStoreError::Corrupt(_)) => {}
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(dir.db()).expect("read"),
        vec![0x42; 8192],
        "the file was left as it was"
    );
}

/// MISSION K3: the SQLite store's futures need a tokio runtime for the blocking pool;
/// polled anywhere else they fail with `NoRuntime` instead of panicking.
#[test]
fn k3_sqlite_outside_tokio_is_an_error() {
    struct NoopWake;
    impl Wake for NoopWake {
        fn wake(self: Arc<Self>) {}
    }
    let dir = TempDir::new("no-runtime");
    let store = SqliteIdempotencyStore::open(dir.db()).expect("open");
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let mut future = store.begin(
        &key("k"),
        &fp(b""),
        &owner("n", 1),
        "caller",
        DEFAULT_RETENTION,
    );
    assert_eq!(
        future.as_mut().poll(&mut cx),
        Poll::Ready(Err(IdempotencyStoreError::NoRuntime))
    );
}
