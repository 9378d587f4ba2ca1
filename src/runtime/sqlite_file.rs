//! Opening the SQLite files zmesh keeps, the embedded descriptor store
//! ([`store::SqliteStore`](crate::runtime::store::SqliteStore)) and the durable idempotency
//! store ([`SqliteIdempotencyStore`](crate::runtime::idempotency::SqliteIdempotencyStore)), the one way
//! both do it: read-write, created if absent, WAL mode (several processes of one
//! host share the file; WAL needs shared memory, so the file must be on a local file
//! system), a busy timeout and a `synchronous` level of each store's choosing
//! ([`FileSettings`]), and the file's identity ([`file_id`]), which each store checks
//! before it writes: SQLite goes on writing to a file that was removed or replaced while
//! open, and whatever it writes there is lost.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

/// How a store's file is opened.
pub(crate) struct FileSettings {
    /// How long a statement waits for another connection (or process) holding the write
    /// lock before it fails.
    pub(crate) busy_timeout: Duration,
    /// When a commit is on disk.
    pub(crate) synchronous: Synchronous,
    /// Whether the path may be an SQLite `file:` URI (for example with `?mode=ro`).
    pub(crate) uri: bool,
}

/// `PRAGMA synchronous` in WAL mode: when a commit that returned is on disk.
pub(crate) enum Synchronous {
    /// `NORMAL`: a commit survives a crash of the process, and may be lost in a power cut.
    Normal,
    /// `FULL`: a commit is on disk when it returns.
    Full,
}

/// Why a file could not be opened or used, as each store reports it.
#[derive(Debug)]
pub(crate) enum FileError {
    /// Not usable now (I/O, locking, no WAL): the operation may succeed later.
    Unavailable(String),
    /// The file is not a database, or a damaged one.
    Corrupt(String),
}

impl From<rusqlite::Error> for FileError {
    fn from(error: rusqlite::Error) -> FileError {
        match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
                FileError::Corrupt(error.to_string())
            }
            _ => FileError::Unavailable(error.to_string()),
        }
    }
}

/// Opens (creating it if absent) the database at `path` with `settings`, in WAL mode.
///
/// # Errors
/// [`FileError::Unavailable`] if the file cannot be opened or created, or stays out of WAL
/// mode; [`FileError::Corrupt`] if it is not an SQLite database.
pub(crate) fn open(path: &Path, settings: &FileSettings) -> Result<Connection, FileError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if settings.uri {
        flags |= OpenFlags::SQLITE_OPEN_URI;
    }
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(settings.busy_timeout)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(FileError::Unavailable(format!(
            "cannot switch the store to WAL mode (journal_mode is {mode})"
        )));
    }
    let synchronous = match settings.synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    Ok(conn)
}

/// A file's identity: its device and inode numbers.
pub(crate) type FileId = (u64, u64);

/// The identity of the file now at `path`.
///
/// # Errors
/// The error of reading its metadata (`NotFound` if there is no file there).
pub(crate) fn file_id(path: &Path) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| (m.dev(), m.ino()))
}
