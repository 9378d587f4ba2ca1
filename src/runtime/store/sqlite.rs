//! The embedded descriptor store: one SQLite file shared by the nodes of **one host** (the
//! precedent is Dapr's SQLite name resolver). No server to run; not for several hosts (WAL
//! needs shared memory, so the file must be on a local file system, and every node must open
//! the same file).
//!
//! # Schema (in the file's `zmesh_discovery_meta` table, key `schema` = 1)
//!
//! ```sql
//! CREATE TABLE zmesh_descriptors (
//!     rid           TEXT PRIMARY KEY NOT NULL,
//!     generation    INTEGER NOT NULL,   -- u64 stored as i64, same bits
//!     body          TEXT NOT NULL,      -- the descriptor's JSON form (format 1)
//!     renewed_at_ms INTEGER NOT NULL,   -- Unix ms (wall clock) of the last put or renewal
//!     expires_at_ms INTEGER NOT NULL,   -- Unix ms (wall clock): dead from then on
//!     rev           INTEGER NOT NULL    -- the store revision of the last put
//! );
//! CREATE TABLE zmesh_discovery_meta (k TEXT PRIMARY KEY NOT NULL, v INTEGER NOT NULL);
//!     -- 'schema' = 1; 'revision' = the last revision handed out (only ever grows)
//! ```
//!
//! - A row whose `expires_at_ms` is not after now does not exist for any reader ("stale rows
//!   ignored"); every put deletes them ("cleaned").
//! - A renewal moves `expires_at_ms` and `renewed_at_ms` and leaves `rev` alone; a put takes
//!   the next revision. A watcher polls every [`SQLITE_POLL_INTERVAL`]: it reads the row keys,
//!   fetches the bodies of rows with a revision above the last it saw, and reports the RIDs
//!   that are no longer live (removed or expired) as removed.
//! - Expiry dates are wall-clock milliseconds because a row must mean the same thing to every
//!   process on the host (MISSION L7 allows this in `durable_time` only).
//!
//! # Availability
//!
//! The store keeps one connection open, but checks before every operation that the file it
//! opened is still the file at its path: a file that was removed or moved away makes every
//! operation fail with [`StoreError::Unavailable`] (the store does not silently create an
//! empty file in its place, which would split the mesh), and a file replaced by another is
//! reopened. The file is created by the first successful operation if it never existed.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use tokio::sync::mpsc;

use super::{
    Change, Descriptor, Entry, Lease, ReloadReason, RenewOutcome, Store, StoreError, StoreFuture,
    Watch, WatchEvent,
};
use crate::durable_time::{millis_since_unix, millis_until_unix, unix_millis_now};
use crate::runtime::sqlite_file::{self, FileError, FileId, FileSettings, Synchronous};

/// How often a watcher reads the file for changes.
pub const SQLITE_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How the file is opened: a statement waits up to 2 s for another node holding the write
/// lock, half the
/// [`LEASE_RENEW_INTERVAL`](crate::proto::discovery::LEASE_RENEW_INTERVAL), so a renewal that waits in vain fails before
/// the next one is due; `synchronous=NORMAL`, because a descriptor lost in a power cut is
/// published again by its node's next renewal.
const FILE: FileSettings = FileSettings {
    busy_timeout: Duration::from_secs(2),
    synchronous: Synchronous::Normal,
    uri: false,
};

/// The schema version this build reads and writes.
const SCHEMA_VERSION: i64 = 1;

const CREATE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS zmesh_descriptors (
    rid           TEXT PRIMARY KEY NOT NULL,
    generation    INTEGER NOT NULL,
    body          TEXT NOT NULL,
    renewed_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    rev           INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS zmesh_discovery_meta (k TEXT PRIMARY KEY NOT NULL, v INTEGER NOT NULL);
INSERT OR IGNORE INTO zmesh_discovery_meta (k, v) VALUES ('schema', 1), ('revision', 0);
";

/// The embedded descriptor store in one SQLite file (see the module doc). Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Mutex<Inner>>,
    path: Arc<Path>,
}

struct Inner {
    path: PathBuf,
    /// The open connection and the identity (device, inode) of the file it opened.
    conn: Option<(Connection, FileId)>,
    /// The file existed and was opened once: if it vanishes, do not create a new one.
    opened_once: bool,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// A store in the file at `path`. Nothing is opened yet: the first operation opens (and,
    /// if it never existed, creates) the file.
    pub fn new(path: impl Into<PathBuf>) -> SqliteStore {
        let path: PathBuf = path.into();
        SqliteStore {
            path: Arc::from(path.as_path()),
            inner: Arc::new(Mutex::new(Inner {
                path,
                conn: None,
                opened_once: false,
            })),
        }
    }

    /// Runs `op` on the blocking pool with the connection (checked against the path) locked.
    fn run<T, F>(&self, op: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let handle =
                tokio::runtime::Handle::try_current().map_err(|_| StoreError::NoRuntime)?;
            handle
                .spawn_blocking(move || {
                    let mut inner = inner.lock().unwrap_or_else(PoisonError::into_inner);
                    let conn = inner.connection()?;
                    let result = op(conn);
                    if matches!(result, Err(StoreError::Corrupt(_))) {
                        // Open afresh next time (the file may have been replaced).
                        inner.conn = None;
                    }
                    result
                })
                .await
                .map_err(|e| StoreError::Unavailable(format!("store worker failed: {e}")))?
        })
    }
}

impl Inner {
    /// The connection to the file now at the path: the open one if it is still that file,
    /// else a new one.
    fn connection(&mut self) -> Result<&mut Connection, StoreError> {
        let id = match sqlite_file::file_id(&self.path) {
            Ok(id) => Some(id),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !self.opened_once => None,
            Err(e) => {
                self.conn = None;
                return Err(StoreError::Unavailable(format!(
                    "store file {}: {e}",
                    self.path.display()
                )));
            }
        };
        let current = matches!((&self.conn, id), (Some((_, open)), Some(now)) if *open == now);
        if !current {
            self.conn = None;
            let conn = open_file(&self.path)?;
            let id = sqlite_file::file_id(&self.path).map_err(|e| {
                StoreError::Unavailable(format!("store file {}: {e}", self.path.display()))
            })?;
            self.conn = Some((conn, id));
            self.opened_once = true;
        }
        match self.conn.as_mut() {
            Some((c, _)) => Ok(c),
            None => Err(StoreError::Unavailable("store not open".into())),
        }
    }
}

/// Opens the file ([`FILE`]) and creates the schema if it is not there.
fn open_file(path: &Path) -> Result<Connection, StoreError> {
    let mut conn = sqlite_file::open(path, &FILE)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql_error)?;
    tx.execute_batch(CREATE_SCHEMA).map_err(sql_error)?;
    let schema: i64 = tx
        .query_row(
            "SELECT v FROM zmesh_discovery_meta WHERE k = 'schema'",
            [],
            |r| r.get(0),
        )
        .map_err(sql_error)?;
    tx.commit().map_err(sql_error)?;
    if schema != SCHEMA_VERSION {
        return Err(StoreError::Corrupt(format!(
            "descriptor schema {schema}, this build reads {SCHEMA_VERSION}"
        )));
    }
    Ok(conn)
}

impl Store for SqliteStore {
    fn put(&self, descriptor: &Descriptor, ttl: Duration) -> StoreFuture<'_, Lease> {
        let d = descriptor.clone();
        self.run(move |conn| {
            let now = now_ms();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_error)?;
            tx.execute(
                "DELETE FROM zmesh_descriptors WHERE expires_at_ms <= ?1",
                [now],
            )
            .map_err(sql_error)?;
            let rev: i64 = tx
                .query_row(
                    "UPDATE zmesh_discovery_meta SET v = v + 1 WHERE k = 'revision' RETURNING v",
                    [],
                    |r| r.get(0),
                )
                .map_err(sql_error)?;
            tx.execute(
                "INSERT OR REPLACE INTO zmesh_descriptors
                 (rid, generation, body, renewed_at_ms, expires_at_ms, rev)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    d.rid,
                    generation_to_sql(d.generation),
                    d.to_json(),
                    now,
                    now.saturating_add(duration_ms(ttl)),
                    rev
                ],
            )
            .map_err(sql_error)?;
            tx.commit().map_err(sql_error)?;
            Ok(Lease {
                rid: d.rid,
                generation: d.generation,
                ttl,
                id: 0,
            })
        })
    }

    fn renew(&self, lease: &Lease) -> StoreFuture<'_, RenewOutcome> {
        let lease = lease.clone();
        self.run(move |conn| {
            let now = now_ms();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_error)?;
            let row: Option<(i64, i64)> = tx
                .query_row(
                    "SELECT generation, expires_at_ms FROM zmesh_descriptors WHERE rid = ?1",
                    [&lease.rid],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(sql_error)?;
            let outcome = match row {
                None => RenewOutcome::Lost,
                Some((_, expires)) if expires <= now => RenewOutcome::Lost,
                Some((generation, _)) if generation != generation_to_sql(lease.generation) => {
                    RenewOutcome::Superseded {
                        generation: generation_from_sql(generation),
                    }
                }
                Some(_) => {
                    tx.execute(
                        "UPDATE zmesh_descriptors SET renewed_at_ms = ?1, expires_at_ms = ?2
                         WHERE rid = ?3",
                        params![now, now.saturating_add(duration_ms(lease.ttl)), lease.rid],
                    )
                    .map_err(sql_error)?;
                    RenewOutcome::Renewed
                }
            };
            tx.commit().map_err(sql_error)?;
            Ok(outcome)
        })
    }

    fn remove(&self, lease: &Lease) -> StoreFuture<'_, ()> {
        let lease = lease.clone();
        self.run(move |conn| {
            conn.execute(
                "DELETE FROM zmesh_descriptors WHERE rid = ?1 AND generation = ?2",
                params![lease.rid, generation_to_sql(lease.generation)],
            )
            .map_err(sql_error)?;
            Ok(())
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<Entry>> {
        self.run(|conn| {
            let now = now_ms();
            let mut stmt = conn
                .prepare(
                    "SELECT body, renewed_at_ms, expires_at_ms FROM zmesh_descriptors
                     WHERE expires_at_ms > ?1 ORDER BY rid",
                )
                .map_err(sql_error)?;
            let rows = stmt
                .query_map([now], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(sql_error)?;
            let mut out = Vec::new();
            for row in rows {
                let (body, renewed, expires) = row.map_err(sql_error)?;
                let Some(descriptor) = parse_body(&body) else {
                    continue;
                };
                out.push(Entry {
                    descriptor,
                    lease_age_ms: Some(millis_since_unix(to_u64(renewed))),
                    expires_in_ms: Some(millis_until_unix(to_u64(expires))),
                });
            }
            Ok(out)
        })
    }

    fn watch(&self) -> Result<Watch, StoreError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| StoreError::NoRuntime)?;
        let (tx, rx) = mpsc::channel(16);
        let store = self.clone();
        let task = handle.spawn(async move { poll_loop(store, tx).await });
        Ok(Watch::new(rx, task))
    }

    fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}

/// What a watcher last saw: live RIDs with their revisions, and the highest revision.
#[derive(Default)]
struct Seen {
    rows: std::collections::HashMap<String, i64>,
    max_rev: i64,
}

/// One poll's answer: the live rows (RID, revision) and the bodies of those above the
/// revision asked for.
struct Poll {
    rows: Vec<(String, i64)>,
    bodies: Vec<(String, i64, String)>,
}

async fn poll_loop(store: SqliteStore, tx: mpsc::Sender<WatchEvent>) {
    // None: the next successful read is a Reload (first read, or after an outage).
    let mut seen: Option<Seen> = None;
    let mut first = true;
    let mut reachable = true;
    loop {
        let above = seen.as_ref().map_or(i64::MIN, |s| s.max_rev);
        let polled = store.run(move |conn| poll_once(conn, above)).await;
        let event = match polled {
            Ok(p) => {
                reachable = true;
                match seen.as_mut() {
                    None => {
                        let mut s = Seen::default();
                        let mut descriptors = Vec::new();
                        for (rid, rev, body) in p.bodies {
                            s.max_rev = s.max_rev.max(rev);
                            if let Some(d) = parse_body(&body) {
                                s.rows.insert(rid, rev);
                                descriptors.push(d);
                            }
                        }
                        seen = Some(s);
                        let reason = if first {
                            ReloadReason::Initial
                        } else {
                            ReloadReason::Resumed
                        };
                        first = false;
                        Some(WatchEvent::Reload {
                            descriptors,
                            reason,
                        })
                    }
                    Some(s) => {
                        let changes = delta(s, p);
                        (!changes.is_empty()).then_some(WatchEvent::Delta(changes))
                    }
                }
            }
            Err(e) => {
                seen = None;
                let was = std::mem::replace(&mut reachable, false);
                was.then_some(WatchEvent::Unreachable(e))
            }
        };
        if let Some(ev) = event {
            if tx.send(ev).await.is_err() {
                return;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(SQLITE_POLL_INTERVAL) => {}
            _ = tx.closed() => return,
        }
    }
}

/// The changes from `s` to the poll's rows; `s` becomes the poll's rows.
fn delta(s: &mut Seen, p: Poll) -> Vec<Change> {
    let mut changes = Vec::new();
    let live: std::collections::HashSet<&str> = p.rows.iter().map(|(r, _)| r.as_str()).collect();
    let mut gone: Vec<String> = s
        .rows
        .keys()
        .filter(|r| !live.contains(r.as_str()))
        .cloned()
        .collect();
    gone.sort();
    for rid in gone {
        s.rows.remove(&rid);
        changes.push(Change::Removed { rid });
    }
    let mut bodies = p.bodies;
    bodies.sort_by_key(|b| b.1);
    for (rid, rev, body) in bodies {
        s.max_rev = s.max_rev.max(rev);
        if s.rows.get(&rid) == Some(&rev) {
            continue;
        }
        match parse_body(&body) {
            Some(d) => {
                s.rows.insert(rid, rev);
                changes.push(Change::Put(d));
            }
            None => {
                // Unusable: as if it were not there.
                if s.rows.remove(&rid).is_some() {
                    changes.push(Change::Removed { rid });
                }
            }
        }
    }
    changes
}

fn poll_once(conn: &mut Connection, above: i64) -> Result<Poll, StoreError> {
    let now = now_ms();
    let tx = conn.transaction().map_err(sql_error)?;
    let mut stmt = tx
        .prepare(
            "SELECT rid, rev, CASE WHEN rev > ?2 THEN body END FROM zmesh_descriptors
             WHERE expires_at_ms > ?1",
        )
        .map_err(sql_error)?;
    let rows = stmt
        .query_map(params![now, above], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        })
        .map_err(sql_error)?;
    let mut out = Poll {
        rows: Vec::new(),
        bodies: Vec::new(),
    };
    for row in rows {
        let (rid, rev, body) = row.map_err(sql_error)?;
        if let Some(body) = body {
            out.bodies.push((rid.clone(), rev, body));
        }
        out.rows.push((rid, rev));
    }
    drop(stmt);
    tx.commit().map_err(sql_error)?;
    Ok(out)
}

fn parse_body(body: &str) -> Option<Descriptor> {
    match Descriptor::from_json(body.as_bytes()) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!(error = %e, "descriptor in the store skipped");
            None
        }
    }
}

fn sql_error(error: rusqlite::Error) -> StoreError {
    FileError::from(error).into()
}

impl From<FileError> for StoreError {
    fn from(error: FileError) -> StoreError {
        match error {
            FileError::Unavailable(e) => StoreError::Unavailable(e),
            FileError::Corrupt(e) => StoreError::Corrupt(e),
        }
    }
}

/// Now, as stored: wall-clock Unix milliseconds, saturated into SQLite's i64.
fn now_ms() -> i64 {
    i64::try_from(unix_millis_now()).unwrap_or(i64::MAX)
}

fn to_u64(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

/// A duration in whole milliseconds (at least 1), saturated into i64.
fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis().max(1)).unwrap_or(i64::MAX)
}

/// The generation is any u64; SQLite integers are i64: store the same 64 bits.
fn generation_to_sql(generation: u64) -> i64 {
    i64::from_ne_bytes(generation.to_ne_bytes())
}

fn generation_from_sql(generation: i64) -> u64 {
    u64::from_ne_bytes(generation.to_ne_bytes())
}
