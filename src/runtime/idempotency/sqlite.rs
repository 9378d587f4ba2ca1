//! A durable idempotency store in one SQLite file.
//!
//! # Schema (version 3, in `PRAGMA user_version`)
//!
//! ```sql
//! CREATE TABLE idempotency_records (
//!     key              TEXT PRIMARY KEY NOT NULL, -- ScopedKey::as_str()
//!     fingerprint      BLOB NOT NULL,             -- 32 bytes, SHA-256
//!     owner_rid        TEXT NOT NULL,
//!     owner_generation INTEGER NOT NULL,          -- u64 stored as i64, same bits
//!     state            INTEGER NOT NULL,          -- 0 in progress, 1 done
//!     code             INTEGER,                   -- REPLY code byte when done, else NULL
//!     payload          BLOB,                      -- result or message when done, else NULL
//!     expires_at_ms    INTEGER NOT NULL,          -- Unix milliseconds (wall clock)
//!     begun_at_ms      INTEGER,                   -- Unix milliseconds of the begin
//!     caller           TEXT                       -- the calling node's RID
//! );
//! CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at_ms);
//! ```
//!
//! Expiry dates are wall-clock milliseconds because a record outlives the monotonic clock of
//! the process that wrote it (MISSION L7 allows this in `durable_time` only). A row whose
//! `expires_at_ms` is not after now does not exist for any operation. `begun_at_ms` tells an
//! operator how long a record has been in progress and `caller` who asked for the command; a
//! file of version 1 gains both columns when it is opened, a file of version 2 `caller`
//! (NULL, unknown, for the rows it already held).

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{
    Begin, Fingerprint, IdempotencyFuture, IdempotencyStore, IdempotencyStoreError, Outcome, Owner,
    Record, RecordState, ScopedKey,
};
use crate::durable_time::unix_millis_now;
use crate::runtime::sqlite_file::{self, FileError, FileId, FileSettings, Synchronous};

/// The schema version this build reads and writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 3;

/// How the file is opened: a statement waits up to 5 s for another process holding the write
/// lock, because a `begin` or `complete` that gives up fails the command it guards;
/// `synchronous=FULL`, so a record is on disk before the REPLY it allows is sent; the path
/// may be a `file:` URI.
const FILE: FileSettings = FileSettings {
    busy_timeout: Duration::from_secs(5),
    synchronous: Synchronous::Full,
    uri: true,
};

/// Every this many `begin`s on one store, delete every expired row in the same transaction.
const SWEEP_EVERY: u32 = 64;

const STATE_IN_PROGRESS: i64 = 0;
const STATE_DONE: i64 = 1;

const CREATE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idempotency_records (
    key              TEXT PRIMARY KEY NOT NULL,
    fingerprint      BLOB NOT NULL,
    owner_rid        TEXT NOT NULL,
    owner_generation INTEGER NOT NULL,
    state            INTEGER NOT NULL,
    code             INTEGER,
    payload          BLOB,
    expires_at_ms    INTEGER NOT NULL,
    begun_at_ms      INTEGER,
    caller           TEXT
);
CREATE INDEX IF NOT EXISTS idempotency_records_expiry ON idempotency_records (expires_at_ms);
";

/// A durable [`IdempotencyStore`] in one SQLite file (MISSION K3): records survive a crash
/// and a restart of the process, so a redelivered command is answered from the record.
///
/// The file is in WAL mode with `synchronous=FULL`, so a `begin` or `complete` that returned
/// `Ok` is on disk before the REPLY is sent. Several processes on one host may share the file
/// (writers wait up to 5 s for one another); WAL needs shared memory, so the file must not be
/// on a network file system.
///
/// SQLite calls block, so each operation runs on tokio's blocking pool (`spawn_blocking`)
/// over one connection behind a mutex: the returned futures are `Send` and never block a
/// runtime worker, but must be polled inside a tokio runtime ([`IdempotencyStoreError::NoRuntime`]
/// otherwise). Dropping a returned future does not cancel the operation: a `begin` whose
/// caller went away may still leave an in-progress record, which is the safe direction (a
/// retry is answered `UnknownOutcome`, never run twice).
///
/// Expired rows are deleted by [`remove_expired`](IdempotencyStore::remove_expired), every
/// 64 `begin`s, and by a `begin` that finds an expired row under its own key.
#[derive(Clone)]
pub struct SqliteIdempotencyStore {
    inner: Arc<Mutex<Inner>>,
    /// The path or URI it was opened with, for Debug (which must not wait for the lock).
    path: Arc<str>,
}

struct Inner {
    conn: Connection,
    begins_since_sweep: u32,
    /// The database file and its identity (device, inode) when opened: a file removed or
    /// replaced while the store is open is detected, because SQLite would go on writing to
    /// the old, unlinked file and the records would be lost at the next start.
    file: Option<(std::path::PathBuf, FileId)>,
}

impl fmt::Debug for SqliteIdempotencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteIdempotencyStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteIdempotencyStore {
    /// [`SqliteIdempotencyStore::open`] for async code: the file I/O runs on tokio's blocking pool, so
    /// the calling task's worker thread keeps running other tasks meanwhile. Must be called
    /// within a tokio runtime.
    ///
    /// # Errors
    /// Those of [`SqliteIdempotencyStore::open`]; [`IdempotencyStoreError::Unavailable`] if the blocking task
    /// could not run to its end (the runtime is shutting down).
    pub async fn open_async(
        path: impl Into<std::path::PathBuf>,
    ) -> Result<Self, IdempotencyStoreError> {
        let path = path.into();
        tokio::task::spawn_blocking(move || SqliteIdempotencyStore::open(path))
            .await
            .map_err(|e| {
                IdempotencyStoreError::Unavailable(format!("opening the store did not finish: {e}"))
            })?
    }

    /// Opens the store at `path`, creating the file and its table if they do not exist.
    ///
    /// `path` may also be an SQLite `file:` URI (for example with `?mode=ro`). Blocks on file
    /// I/O: call it at startup, or from async code through [`SqliteIdempotencyStore::open_async`].
    ///
    /// # Errors
    /// [`IdempotencyStoreError::Unavailable`] if the file cannot be opened, created or switched to WAL
    /// mode; [`IdempotencyStoreError::Corrupt`] if it is not an SQLite database;
    /// [`IdempotencyStoreError::UnsupportedSchema`] if it was written by a build with another schema.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, IdempotencyStoreError> {
        let path = path.as_ref();
        let mut conn = sqlite_file::open(path, &FILE)?;
        ensure_schema(&mut conn)?;
        let file = conn
            .path()
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from)
            .and_then(|p| sqlite_file::file_id(&p).ok().map(|id| (p, id)));
        Ok(SqliteIdempotencyStore {
            inner: Arc::new(Mutex::new(Inner {
                conn,
                begins_since_sweep: 0,
                file,
            })),
            path: path.to_string_lossy().into(),
        })
    }

    /// Every live record still in progress, soonest to expire first: commands started and
    /// never completed (running now, or left by a process that died: then nobody knows
    /// whether they ran, and a retry is answered `UnknownOutcome`). For an operator
    /// (`zmesh idempotency list`); blocks on file I/O.
    ///
    /// # Errors
    /// As every store operation: [`IdempotencyStoreError::Unavailable`] or `Corrupt`.
    pub fn in_progress(&self) -> Result<Vec<StoredRecord>, IdempotencyStoreError> {
        lock(&self.inner).stored(None)
    }

    /// The live record under `key`, in progress or done. Blocks on file I/O.
    ///
    /// # Errors
    /// As every store operation.
    pub fn get(&self, key: &ScopedKey) -> Result<Option<StoredRecord>, IdempotencyStoreError> {
        Ok(lock(&self.inner).stored(Some(key))?.pop())
    }

    /// Settles the in-progress record under `key` for an operator who went and looked:
    /// [`Resolution::Ran`] completes it with an `Exception` answer carrying the operator's
    /// note (a retry is told so and does not run the command); [`Resolution::DidNotRun`]
    /// removes it (a retry runs the command). Blocks on file I/O.
    ///
    /// # Errors
    /// [`IdempotencyStoreError::NotInProgress`] if there is no live in-progress record under
    /// `key` (missing, expired or done); otherwise as every store operation.
    pub fn resolve(
        &self,
        key: &ScopedKey,
        resolution: &Resolution,
    ) -> Result<(), IdempotencyStoreError> {
        let mut inner = lock(&self.inner);
        match resolution {
            Resolution::Ran { note } => inner.complete(key, &resolution_outcome(note)),
            Resolution::DidNotRun => inner.remove_in_progress(key),
        }
    }

    /// Runs `op` on the blocking pool with the connection locked.
    fn run<T, F>(&self, op: F) -> IdempotencyFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Inner) -> Result<T, IdempotencyStoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let handle = tokio::runtime::Handle::try_current()
                .map_err(|_| IdempotencyStoreError::NoRuntime)?;
            handle
                .spawn_blocking(move || op(&mut lock(&inner)))
                .await
                .map_err(|e| {
                    IdempotencyStoreError::Unavailable(format!("store worker failed: {e}"))
                })?
        })
    }
}

impl IdempotencyStore for SqliteIdempotencyStore {
    fn begin(
        &self,
        key: &ScopedKey,
        fingerprint: &Fingerprint,
        owner: &Owner,
        caller: &str,
        retention: Duration,
    ) -> IdempotencyFuture<'_, Begin> {
        let key = key.clone();
        let fingerprint = *fingerprint;
        let owner = owner.clone();
        let caller = caller.to_owned();
        self.run(move |inner| inner.begin(&key, &fingerprint, &owner, &caller, retention))
    }

    fn complete(&self, key: &ScopedKey, outcome: &Outcome) -> IdempotencyFuture<'_, ()> {
        let key = key.clone();
        let outcome = outcome.clone();
        self.run(move |inner| inner.complete(&key, &outcome))
    }

    fn remove_expired(&self) -> IdempotencyFuture<'_, u64> {
        self.run(Inner::remove_expired)
    }
}

/// What an operator found out about a command left in progress
/// ([`SqliteIdempotencyStore::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// It ran (its effect is there); `note` says what the operator saw.
    Ran {
        /// The operator's note, returned to callers that retry.
        note: String,
    },
    /// It did not run: a retry may run it.
    DidNotRun,
}

/// A live record as a store holds it: its key, what it records, and how long it lives on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// The key it is stored under.
    pub key: ScopedKey,
    /// The record.
    pub record: Record,
    /// Time left until it expires (wall clock: records outlive processes).
    pub expires_in: Duration,
    /// Time since the `begin` that created it (wall clock); `None` for a record written by a
    /// build that did not keep the time.
    pub age: Option<Duration>,
    /// The RID of the node whose call created it, as the serving node knew it; `None` for a
    /// record written by a build that did not keep it.
    pub caller: Option<String>,
}

/// The answer a record resolved as [`Resolution::Ran`] gives a retry: `Exception` (it ran;
/// its result is not known) with the operator's note.
fn resolution_outcome(note: &str) -> Outcome {
    Outcome {
        code: u8::from(crate::proto::wire::ReplyCode::Exception),
        payload: Bytes::from(format!(
            "an operator resolved this command as run (its result was not recorded): {note}"
        )),
    }
}

impl Inner {
    /// The live records under `key`, or every live one in progress, soonest to expire first.
    fn stored(
        &mut self,
        key: Option<&ScopedKey>,
    ) -> Result<Vec<StoredRecord>, IdempotencyStoreError> {
        self.check_file()?;
        let now = now_ms();
        let mut statement = self
            .conn
            .prepare(
                "SELECT fingerprint, owner_rid, owner_generation, state, code, payload, key,
                        expires_at_ms, begun_at_ms, caller
                 FROM idempotency_records
                 WHERE expires_at_ms > ?1 AND (key = ?2 OR (?2 IS NULL AND state = ?3))
                 ORDER BY expires_at_ms",
            )
            .map_err(store_error)?;
        let rows = statement
            .query_map(
                params![now, key.map(ScopedKey::as_str), STATE_IN_PROGRESS],
                |row| {
                    let key: String = row.get(6)?;
                    let expires: i64 = row.get(7)?;
                    let begun: Option<i64> = row.get(8)?;
                    let caller: Option<String> = row.get(9)?;
                    Ok((RawRecord::from_row(row)?, key, expires, begun, caller))
                },
            )
            .map_err(store_error)?;
        let mut out = Vec::new();
        for row in rows {
            let (raw, key, expires, begun, caller) = row.map_err(store_error)?;
            out.push(StoredRecord {
                key: ScopedKey::from_stored(key),
                record: raw.decode()?,
                expires_in: Duration::from_millis(
                    u64::try_from(expires.saturating_sub(now)).unwrap_or(0),
                ),
                age: begun.map(|b| {
                    Duration::from_millis(u64::try_from(now.saturating_sub(b)).unwrap_or(0))
                }),
                caller,
            });
        }
        Ok(out)
    }

    /// Deletes the live in-progress record under `key`.
    fn remove_in_progress(&mut self, key: &ScopedKey) -> Result<(), IdempotencyStoreError> {
        self.check_file()?;
        let removed = self
            .conn
            .execute(
                "DELETE FROM idempotency_records
                 WHERE key = ?1 AND state = ?2 AND expires_at_ms > ?3",
                params![key.as_str(), STATE_IN_PROGRESS, now_ms()],
            )
            .map_err(store_error)?;
        if removed == 0 {
            return Err(IdempotencyStoreError::NotInProgress);
        }
        Ok(())
    }

    /// Fails when the database file is no longer the one the store opened (removed, or
    /// replaced by another file): writing on would record into a file nobody will read again.
    fn check_file(&self) -> Result<(), IdempotencyStoreError> {
        match &self.file {
            Some((path, id)) if sqlite_file::file_id(path).ok() != Some(*id) => {
                Err(IdempotencyStoreError::Unavailable(format!(
                    "the store file {} was removed or replaced while open",
                    path.display()
                )))
            }
            _ => Ok(()),
        }
    }

    fn begin(
        &mut self,
        key: &ScopedKey,
        fingerprint: &Fingerprint,
        owner: &Owner,
        caller: &str,
        retention: Duration,
    ) -> Result<Begin, IdempotencyStoreError> {
        self.check_file()?;
        self.begins_since_sweep += 1;
        let sweep = self.begins_since_sweep >= SWEEP_EVERY;
        // IMMEDIATE takes the write lock before reading, so no other connection (in this
        // process or another) can insert under the key between our read and our insert.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error)?;
        let now = now_ms();
        if sweep {
            tx.execute(
                "DELETE FROM idempotency_records WHERE expires_at_ms <= ?1",
                [now],
            )
            .map_err(store_error)?;
        }
        let existing = tx
            .query_row(
                "SELECT fingerprint, owner_rid, owner_generation, state, code, payload
                 FROM idempotency_records WHERE key = ?1 AND expires_at_ms > ?2",
                params![key.as_str(), now],
                RawRecord::from_row,
            )
            .optional()
            .map_err(store_error)?;
        if let Some(raw) = existing {
            let record = raw.decode()?;
            tx.commit().map_err(store_error)?;
            if sweep {
                self.begins_since_sweep = 0;
            }
            return Ok(Begin::Existing(record));
        }
        // An expired row under this key, if any, is replaced.
        tx.execute(
            "INSERT OR REPLACE INTO idempotency_records
             (key, fingerprint, owner_rid, owner_generation, state, code, payload, expires_at_ms,
              begun_at_ms, caller)
             VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL, ?6, ?7, ?8)",
            params![
                key.as_str(),
                &fingerprint.as_bytes()[..],
                owner.rid,
                generation_to_sql(owner.generation),
                STATE_IN_PROGRESS,
                now.saturating_add(retention_ms(retention)),
                now,
                caller,
            ],
        )
        .map_err(store_error)?;
        tx.commit().map_err(store_error)?;
        if sweep {
            self.begins_since_sweep = 0;
        }
        Ok(Begin::Started)
    }

    fn complete(
        &mut self,
        key: &ScopedKey,
        outcome: &Outcome,
    ) -> Result<(), IdempotencyStoreError> {
        self.check_file()?;
        let changed = self
            .conn
            .execute(
                "UPDATE idempotency_records SET state = ?1, code = ?2, payload = ?3
                 WHERE key = ?4 AND state = ?5 AND expires_at_ms > ?6",
                params![
                    STATE_DONE,
                    i64::from(outcome.code),
                    &outcome.payload[..],
                    key.as_str(),
                    STATE_IN_PROGRESS,
                    now_ms(),
                ],
            )
            .map_err(store_error)?;
        if changed == 0 {
            return Err(IdempotencyStoreError::NotInProgress);
        }
        Ok(())
    }

    fn remove_expired(&mut self) -> Result<u64, IdempotencyStoreError> {
        let removed = self
            .conn
            .execute(
                "DELETE FROM idempotency_records WHERE expires_at_ms <= ?1",
                [now_ms()],
            )
            .map_err(store_error)?;
        self.begins_since_sweep = 0;
        Ok(removed as u64)
    }
}

/// A row as SQLite typed it, before this build's checks.
struct RawRecord {
    fingerprint: Vec<u8>,
    owner_rid: String,
    owner_generation: i64,
    state: i64,
    code: Option<i64>,
    payload: Option<Vec<u8>>,
}

impl RawRecord {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(RawRecord {
            fingerprint: row.get(0)?,
            owner_rid: row.get(1)?,
            owner_generation: row.get(2)?,
            state: row.get(3)?,
            code: row.get(4)?,
            payload: row.get(5)?,
        })
    }

    fn decode(self) -> Result<Record, IdempotencyStoreError> {
        let fingerprint = <[u8; 32]>::try_from(self.fingerprint.as_slice()).map_err(|_| {
            IdempotencyStoreError::Corrupt(format!(
                "fingerprint is {} bytes, expected 32",
                self.fingerprint.len()
            ))
        })?;
        let state = match (self.state, self.code, self.payload) {
            (STATE_IN_PROGRESS, None, None) => RecordState::InProgress,
            (STATE_DONE, Some(code), Some(payload)) => RecordState::Done(Outcome {
                code: u8::try_from(code).map_err(|_| {
                    IdempotencyStoreError::Corrupt(format!("reply code {code} is not a byte"))
                })?,
                payload: Bytes::from(payload),
            }),
            (state, code, payload) => {
                return Err(IdempotencyStoreError::Corrupt(format!(
                    "state {state} with code {code:?} and {} payload",
                    if payload.is_some() { "a" } else { "no" }
                )))
            }
        };
        Ok(Record {
            fingerprint: Fingerprint::from_bytes(fingerprint),
            owner: Owner {
                rid: self.owner_rid,
                generation: generation_from_sql(self.owner_generation),
            },
            state,
        })
    }
}

/// Creates the table on a fresh file, adds `begun_at_ms` and `caller` to a file of version 1
/// and `caller` to one of version 2, accepts a file of this version, refuses any other.
fn ensure_schema(conn: &mut Connection) -> Result<(), IdempotencyStoreError> {
    // Read first without a write lock, so opening an up-to-date file writes nothing.
    if user_version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(store_error)?;
    // Another process may have created the schema between the read and the lock.
    match user_version(&tx)? {
        0 => {
            tx.execute_batch(CREATE_SCHEMA).map_err(store_error)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(store_error)?;
            tx.commit().map_err(store_error)
        }
        found @ (1 | 2) => {
            if found == 1 {
                tx.execute_batch("ALTER TABLE idempotency_records ADD COLUMN begun_at_ms INTEGER;")
                    .map_err(store_error)?;
            }
            tx.execute_batch("ALTER TABLE idempotency_records ADD COLUMN caller TEXT;")
                .map_err(store_error)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(store_error)?;
            tx.commit().map_err(store_error)
        }
        SCHEMA_VERSION => Ok(()),
        found => Err(IdempotencyStoreError::UnsupportedSchema {
            found,
            supported: SCHEMA_VERSION,
        }),
    }
}

fn user_version(conn: &Connection) -> Result<i64, IdempotencyStoreError> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(store_error)
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic under the lock unwinds through rusqlite's Transaction, whose drop rolls back:
    // the file, which is the truth, is consistent, so the connection can be used again.
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

fn store_error(error: rusqlite::Error) -> IdempotencyStoreError {
    FileError::from(error).into()
}

impl From<FileError> for IdempotencyStoreError {
    fn from(error: FileError) -> IdempotencyStoreError {
        match error {
            FileError::Unavailable(e) => IdempotencyStoreError::Unavailable(e),
            FileError::Corrupt(e) => IdempotencyStoreError::Corrupt(e),
        }
    }
}

/// Now, as stored: wall-clock Unix milliseconds, saturated into SQLite's i64.
fn now_ms() -> i64 {
    i64::try_from(unix_millis_now()).unwrap_or(i64::MAX)
}

/// The retention in whole milliseconds, rounded up (a retention of 1 µs keeps the record for
/// 1 ms rather than not at all), saturated into i64.
fn retention_ms(retention: Duration) -> i64 {
    let whole = retention.as_millis();
    let ms = if retention.subsec_nanos().is_multiple_of(1_000_000) {
        whole
    } else {
        whole.saturating_add(1)
    };
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The generation is any u64; SQLite integers are i64: store the same 64 bits.
fn generation_to_sql(generation: u64) -> i64 {
    i64::from_ne_bytes(generation.to_ne_bytes())
}

fn generation_from_sql(stored: i64) -> u64 {
    u64::from_ne_bytes(stored.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MISSION K3: a store whose file was removed while open refuses (`Unavailable`, so the
    /// runtime answers UnknownOutcome and does not run) instead of recording into the unlinked
    /// file, whose records the next start would not see.
    #[tokio::test]
    async fn k3_store_file_removed_while_open_is_unavailable() {
        let path = temp_db("removed");
        let store = SqliteIdempotencyStore::open(&path).expect("open");
        let owner = Owner {
            rid: "n".into(),
            generation: 1,
        };
        let key = ScopedKey::from_idempotency_key("c", "m", "k1");
        let fp = Fingerprint::of_call("c", "m", b"");
        let begun = store
            .begin(&key, &fp, &owner, "caller", Duration::from_secs(60))
            .await;
        assert_eq!(begun, Ok(Begin::Started));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let key2 = ScopedKey::from_idempotency_key("c", "m", "k2");
        let begun = store
            .begin(&key2, &fp, &owner, "caller", Duration::from_secs(60))
            .await;
        assert!(
            matches!(begun, Err(IdempotencyStoreError::Unavailable(_))),
            "{begun:?}"
        );
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    /// MISSION K3, for an operator: the records left in progress are listed (done ones are
    /// not), one is shown by its key with the caller that started it; resolved as run it
    /// answers the operator's note as an `Exception` and is no longer in progress; resolved
    /// as not run it is gone, so the next `begin` starts afresh; a record that is not in
    /// progress cannot be resolved.
    #[tokio::test]
    async fn k3_records_left_in_progress_are_listed_with_their_caller_and_resolved() {
        let path = temp_db("resolve");
        let store = SqliteIdempotencyStore::open(&path).expect("open");
        let fp = Fingerprint::of_call("pump", "dispense", b"");
        let key = |k: &str| ScopedKey::from_idempotency_key("pump", "dispense", k);
        let day = Duration::from_secs(86_400);
        for k in ["ran", "did-not-run", "done"] {
            let begun = store.begin(&key(k), &fp, &owner(), "client-7", day).await;
            assert_eq!(begun, Ok(Begin::Started));
        }
        let ok = Outcome {
            code: 0,
            payload: Bytes::from_static(b"\xa2ok"),
        };
        store.complete(&key("done"), &ok).await.expect("complete");

        let listed: Vec<ScopedKey> = store
            .in_progress()
            .expect("list")
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(listed.contains(&key("ran")) && listed.contains(&key("did-not-run")));
        let shown = store.get(&key("ran")).expect("get").expect("a record");
        assert_eq!(shown.record.owner, owner());
        assert_eq!(shown.record.state, RecordState::InProgress);
        assert!(shown.expires_in > Duration::from_secs(86_000) && shown.expires_in <= day);
        assert!(shown.age.is_some_and(|age| age < day), "{shown:?}");
        assert_eq!(shown.caller.as_deref(), Some("client-7"));
        assert_eq!(
            key("ran").parts(),
            Some(("key", vec!["pump", "dispense", "ran"]))
        );

        let ran = Resolution::Ran {
            note: "the pump's counter moved".into(),
        };
        store.resolve(&key("ran"), &ran).expect("resolve ran");
        let RecordState::Done(outcome) = store
            .get(&key("ran"))
            .expect("get")
            .expect("kept")
            .record
            .state
        else {
            panic!("a record resolved as run is done");
        };
        assert_eq!(
            outcome.code,
            u8::from(crate::proto::wire::ReplyCode::Exception)
        );
        assert!(String::from_utf8_lossy(&outcome.payload).contains("the pump's counter moved"));

        store
            .resolve(&key("did-not-run"), &Resolution::DidNotRun)
            .expect("resolve did not run");
        assert_eq!(store.get(&key("did-not-run")).expect("get"), None);
        let again = store
            .begin(&key("did-not-run"), &fp, &owner(), "caller", day)
            .await;
        assert_eq!(again, Ok(Begin::Started), "a retry may run it");

        for k in ["done", "ran", "missing"] {
            assert_eq!(
                store.resolve(&key(k), &Resolution::DidNotRun),
                Err(IdempotencyStoreError::NotInProgress),
                "{k}"
            );
        }
        assert_eq!(ScopedKey::from_stored("key:3:ab,").parts(), None);
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    fn temp_db(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("zmesh-idem-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir.join("store.db")
    }

    fn owner() -> Owner {
        Owner {
            rid: "node-a".into(),
            generation: u64::MAX - 1,
        }
    }

    /// K3: a generation above i64::MAX survives the round trip through an i64 column.
    #[test]
    fn k3_generation_keeps_all_64_bits() {
        for g in [0, 1, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX] {
            assert_eq!(generation_from_sql(generation_to_sql(g)), g);
        }
    }

    /// K3: retention is rounded up to whole milliseconds and saturates.
    #[test]
    fn k3_retention_rounds_up_and_saturates() {
        assert_eq!(retention_ms(Duration::ZERO), 0);
        assert_eq!(retention_ms(Duration::from_micros(1)), 1);
        assert_eq!(retention_ms(Duration::from_millis(5)), 5);
        assert_eq!(retention_ms(Duration::MAX), i64::MAX);
    }

    /// K3: a row this build cannot read gives `Corrupt`, not a panic and not a guess.
    #[test]
    fn k3_sqlite_rejects_malformed_rows() {
        let path = temp_db("malformed");
        let store = SqliteIdempotencyStore::open(&path).expect("open");
        let far = now_ms() + 60_000;
        // (key, fingerprint, state, code, payload)
        type Row<'a> = (&'a str, &'a [u8], i64, Option<i64>, Option<&'a [u8]>);
        let bad_rows: [Row<'_>; 4] = [
            ("short-fp", &[1, 2, 3], STATE_IN_PROGRESS, None, None),
            ("bad-state", &[0; 32], 7, None, None),
            ("done-without-code", &[0; 32], STATE_DONE, None, Some(b"x")),
            ("code-too-big", &[0; 32], STATE_DONE, Some(300), Some(b"x")),
        ];
        let mut inner = lock(&store.inner);
        for (key, fp, state, code, payload) in bad_rows {
            inner
                .conn
                .execute(
                    "INSERT INTO idempotency_records VALUES (?1, ?2, 'r', 1, ?3, ?4, ?5, ?6, NULL, NULL)",
                    params![key, fp, state, code, payload, far],
                )
                .expect("insert");
        }
        for (key, ..) in bad_rows {
            let key = ScopedKey(key.to_owned());
            let fp = Fingerprint::from_bytes([0; 32]);
            let answer = inner.begin(&key, &fp, &owner(), "caller", Duration::from_secs(60));
            assert!(
                matches!(answer, Err(IdempotencyStoreError::Corrupt(_))),
                "{key}: {answer:?}"
            );
        }
        drop(inner);
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    /// K3: the async open opens the same store as the blocking one, and reports its errors.
    #[tokio::test]
    async fn k3_sqlite_open_async_opens_the_same_store() {
        let path = temp_db("async");
        drop(
            SqliteIdempotencyStore::open_async(path.clone())
                .await
                .expect("open"),
        );
        Connection::open(&path)
            .and_then(|c| c.pragma_update(None, "user_version", 4))
            .expect("bump version");
        assert_eq!(
            SqliteIdempotencyStore::open_async(path.clone())
                .await
                .map(|_| ()),
            Err(IdempotencyStoreError::UnsupportedSchema {
                found: 4,
                supported: 3
            })
        );
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    /// K3: a file of schema version 1 (no `begun_at_ms`, no `caller`) is opened and
    /// upgraded: its rows keep working with no age and no caller, rows begun since have
    /// both.
    #[tokio::test]
    async fn k3_sqlite_version_1_file_gains_the_begin_time() {
        let path = temp_db("v1");
        {
            let conn = Connection::open(&path).expect("create");
            conn.execute_batch(
                "CREATE TABLE idempotency_records (
                    key TEXT PRIMARY KEY NOT NULL, fingerprint BLOB NOT NULL,
                    owner_rid TEXT NOT NULL, owner_generation INTEGER NOT NULL,
                    state INTEGER NOT NULL, code INTEGER, payload BLOB,
                    expires_at_ms INTEGER NOT NULL);
                 PRAGMA user_version = 1;",
            )
            .expect("v1 schema");
            conn.execute(
                "INSERT INTO idempotency_records VALUES ('old', ?1, 'r', 1, 0, NULL, NULL, ?2)",
                params![&[0u8; 32][..], now_ms() + 60_000],
            )
            .expect("v1 row");
        }
        let store = SqliteIdempotencyStore::open(&path).expect("open v1");
        let old = store.get(&ScopedKey("old".into())).expect("get");
        assert_eq!(old.map(|r| (r.age, r.caller)), Some((None, None)));
        let key = ScopedKey::from_request("c", 1, 1);
        let fp = Fingerprint::from_bytes([1; 32]);
        let begun = store
            .begin(&key, &fp, &owner(), "c", Duration::from_secs(60))
            .await;
        assert_eq!(begun, Ok(Begin::Started));
        let new = store.get(&key).expect("get").expect("record");
        assert!(new.age.is_some(), "{new:?}");
        assert_eq!(new.caller.as_deref(), Some("c"));
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    /// K3: a file of schema version 2 (with `begun_at_ms`, no `caller`) is opened and
    /// upgraded to version 3: its rows keep their age and have no caller, rows begun since
    /// name theirs, and the file says version 3.
    #[tokio::test]
    async fn k3_sqlite_version_2_file_gains_the_caller() {
        let path = temp_db("v2");
        let begun_at = now_ms() - 5_000;
        {
            let conn = Connection::open(&path).expect("create");
            conn.execute_batch(
                "CREATE TABLE idempotency_records (
                    key TEXT PRIMARY KEY NOT NULL, fingerprint BLOB NOT NULL,
                    owner_rid TEXT NOT NULL, owner_generation INTEGER NOT NULL,
                    state INTEGER NOT NULL, code INTEGER, payload BLOB,
                    expires_at_ms INTEGER NOT NULL, begun_at_ms INTEGER);
                 CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at_ms);
                 PRAGMA user_version = 2;",
            )
            .expect("v2 schema");
            conn.execute(
                "INSERT INTO idempotency_records
                 VALUES ('old', ?1, 'r', 1, 0, NULL, NULL, ?2, ?3)",
                params![&[0u8; 32][..], now_ms() + 60_000, begun_at],
            )
            .expect("v2 row");
        }
        let store = SqliteIdempotencyStore::open(&path).expect("open v2");
        let old = store
            .get(&ScopedKey("old".into()))
            .expect("get")
            .expect("the old row");
        assert!(
            old.age.is_some_and(|a| a >= Duration::from_secs(5)),
            "{old:?}"
        );
        assert_eq!(old.caller, None);
        assert_eq!(old.record.state, RecordState::InProgress);
        let key = ScopedKey::from_idempotency_key("pump", "dispense", "wo-1");
        let fp = Fingerprint::from_bytes([2; 32]);
        let begun = store
            .begin(&key, &fp, &owner(), "desk-3", Duration::from_secs(60))
            .await;
        assert_eq!(begun, Ok(Begin::Started));
        let listed: Vec<Option<String>> = store
            .in_progress()
            .expect("list")
            .into_iter()
            .map(|r| r.caller)
            .collect();
        assert!(listed.contains(&Some("desk-3".into())), "{listed:?}");
        assert!(listed.contains(&None), "{listed:?}");
        drop(store);
        let version: i64 = Connection::open(&path)
            .and_then(|c| c.pragma_query_value(None, "user_version", |r| r.get(0)))
            .expect("version");
        assert_eq!(version, 3);
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    /// K3: a file written by a future schema is refused at open, not misread.
    #[test]
    fn k3_sqlite_refuses_unknown_schema_version() {
        let path = temp_db("schema");
        drop(SqliteIdempotencyStore::open(&path).expect("open"));
        Connection::open(&path)
            .and_then(|c| c.pragma_update(None, "user_version", 4))
            .expect("bump version");
        assert_eq!(
            SqliteIdempotencyStore::open(&path).map(|_| ()),
            Err(IdempotencyStoreError::UnsupportedSchema {
                found: 4,
                supported: 3
            })
        );
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    /// K3: `begin` sweeps expired rows every SWEEP_EVERY calls.
    #[test]
    fn k3_sqlite_begin_evicts_amortised() {
        let path = temp_db("sweep");
        let store = SqliteIdempotencyStore::open(&path).expect("open");
        let mut inner = lock(&store.inner);
        let past = now_ms() - 1;
        inner
            .conn
            .execute(
                "INSERT INTO idempotency_records VALUES ('old', ?1, 'r', 1, 0, NULL, NULL, ?2, NULL, NULL)",
                params![&[0u8; 32][..], past],
            )
            .expect("insert");
        let fp = Fingerprint::from_bytes([1; 32]);
        let count = |inner: &Inner| -> i64 {
            inner
                .conn
                .query_row("SELECT count(*) FROM idempotency_records", [], |r| r.get(0))
                .expect("count")
        };
        for i in 0..u64::from(SWEEP_EVERY) - 1 {
            let key = ScopedKey::from_request("c", 1, i);
            inner
                .begin(&key, &fp, &owner(), "caller", Duration::from_secs(60))
                .expect("begin");
        }
        assert_eq!(count(&inner), i64::from(SWEEP_EVERY), "not swept yet");
        let key = ScopedKey::from_request("c", 1, u64::MAX);
        inner
            .begin(&key, &fp, &owner(), "caller", Duration::from_secs(60))
            .expect("begin");
        assert_eq!(
            count(&inner),
            i64::from(SWEEP_EVERY),
            "old row swept, new one in"
        );
        drop(inner);
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }
}
