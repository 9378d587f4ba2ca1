//! Idempotency stores: running a non-repeatable command once (MISSION K3).
//!
//! Delivery and execution are at least once unless the method is guarded by a durable
//! idempotency store. A server given one records what a non-repeatable command did, so a
//! redelivery after a crash, or a caller retrying with the same idempotency key, is answered
//! from the record instead of being run again.
//!
//! ```text
//!  REQUEST (non-repeatable-command only; queries and other semantics never reach the store)
//!     |  key = ScopedKey::from_idempotency_key(channel, method, caller's key)
//!     |     or ScopedKey::from_request(caller RID, caller generation, call id)
//!     |  fingerprint = Fingerprint::of_call(channel, method, args)
//!     v
//!  store.begin(key, fingerprint, owner, caller RID, retention)
//!     |-- Started ------------------------------> run the handler
//!     |                                             store.complete(key, outcome)
//!     |                                             then send the REPLY
//!     |-- Existing(Done(outcome)) --------------> answer with the recorded outcome (replayed)
//!     |-- Existing(InProgress), owner = me -----> attach to the call still running here (replayed)
//!     |-- Existing(InProgress), other owner ----> UnknownOutcome (it may have run; never re-run)
//!     |-- Existing(..), other fingerprint ------> InvalidParams (same key, different call)
//!     '-- Err(IdempotencyStoreError) ----------------------> UnknownOutcome, handler NOT run
//! ```
//!
//! The runtime, not this module, makes those decisions; this module is the trait, the key and
//! fingerprint helpers and two stores: [`MemoryStore`] for tests and [`SqliteIdempotencyStore`], a durable
//! store in one SQLite file.
//!
//! Two rules of K3 shape the interface:
//! - The outcome is recorded before the answer is sent. The other order leaves a window where
//!   the caller has the result and the store does not, and a retry in that window runs the
//!   command twice.
//! - A store that cannot be reached refuses the command. Every [`IdempotencyStoreError`] from
//!   [`IdempotencyStore::begin`] makes the runtime answer `UnknownOutcome` without running the
//!   handler: failing open would turn an unreachable guard into exactly the double execution it
//!   was installed to prevent.

mod guard;
mod memory;
mod sqlite;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};

pub(crate) use guard::Guard;
pub use memory::MemoryStore;
pub use sqlite::{Resolution, SqliteIdempotencyStore, StoredRecord};

/// How long a record is kept when the caller of [`IdempotencyStore::begin`] has no reason to
/// choose otherwise: 24 hours, long enough for an operator to come back and retry a command
/// after a night's outage.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// The future every store operation returns: boxed so that [`IdempotencyStore`] stays
/// dyn-compatible (the runtime holds an `Arc<dyn IdempotencyStore>`), and `Send` so it can be
/// awaited on any tokio worker.
pub type IdempotencyFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, IdempotencyStoreError>> + Send + 'a>>;

/// Somewhere to record what a non-repeatable command did (MISSION K3).
///
/// Implementations must make [`begin`](Self::begin) atomic: of any number of concurrent
/// `begin`s on one key, exactly one is answered [`Begin::Started`]. A record past its expiry
/// does not exist for any operation.
///
/// Any error means "the store cannot vouch for this key". The runtime answers `UnknownOutcome`
/// and does not run the handler when `begin` fails; it never falls back to running the command
/// unguarded.
pub trait IdempotencyStore: Send + Sync {
    /// Claims `key` for a new run of the command.
    ///
    /// If no live record exists under `key`, atomically inserts an
    /// [`InProgress`](RecordState::InProgress) record holding `fingerprint`, `owner` and
    /// `caller` (the calling node's RID as the server knows it, kept for an operator who
    /// looks at a record left in progress) that expires `retention` from now, and answers
    /// [`Begin::Started`]: the caller must run the command and then call
    /// [`complete`](Self::complete). Otherwise answers [`Begin::Existing`] with the record
    /// as it stands, unchanged; the caller compares its fingerprint and owner to decide what
    /// to answer.
    fn begin(
        &self,
        key: &ScopedKey,
        fingerprint: &Fingerprint,
        owner: &Owner,
        caller: &str,
        retention: Duration,
    ) -> IdempotencyFuture<'_, Begin>;

    /// Records `outcome` on the in-progress record under `key`, making it
    /// [`Done`](RecordState::Done). Must complete before the REPLY is sent.
    ///
    /// Fails with [`IdempotencyStoreError::NotInProgress`] if there is no live record under `key` or it
    /// is already done. The record keeps the expiry it was given by `begin`.
    ///
    /// A failure here comes after the command ran: the record stays in progress, so a retry
    /// is answered `UnknownOutcome`, never run again.
    fn complete(&self, key: &ScopedKey, outcome: &Outcome) -> IdempotencyFuture<'_, ()>;

    /// Deletes every expired record and answers how many went. The stores also evict on their
    /// own as they go; this is for a caller that wants the space back now.
    fn remove_expired(&self) -> IdempotencyFuture<'_, u64>;

    /// Whether the records outlive the process (a file, a database): only then does a
    /// redelivery after a crash find the record. A node's `describe` reports its
    /// non-repeatable commands as guarded ([`crate::proto::contract::MethodContract::guarded`])
    /// only behind a durable store. True unless the store says otherwise; [`MemoryStore`]
    /// says false.
    fn is_durable(&self) -> bool {
        true
    }
}

/// The answer to [`IdempotencyStore::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// There was no live record: one is now in progress for the caller, who must run the
    /// command and then complete the record.
    Started,
    /// A live record already exists; it was not changed.
    Existing(Record),
}

/// What a store holds under one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The fingerprint of the call that created the record. A different fingerprint under the
    /// same key means the caller reused a key for a different call (the runtime answers
    /// `InvalidParams`).
    pub fingerprint: Fingerprint,
    /// The node run that started the command.
    pub owner: Owner,
    /// Whether the command has finished, and how.
    pub state: RecordState,
}

/// Whether a recorded command has finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// Started and not completed: still running, or its owner died before recording the
    /// outcome (then nobody knows whether it ran).
    InProgress,
    /// Finished with this outcome.
    Done(Outcome),
}

/// How a command ended: what the REPLY said, or will say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The REPLY code byte (WIRE.md §4.9, [`ReplyCode`](crate::proto::wire::ReplyCode)):
    /// 0 is Ok.
    pub code: u8,
    /// The result bytes when `code` is 0 (Ok), a UTF-8 error message otherwise.
    pub payload: Bytes,
}

/// The node run that serves a command: its RID and lifecycle generation.
///
/// Lets the runtime tell a command still running in this very process (attach to it) from
/// one left in progress by a run that is gone (answer `UnknownOutcome`, never re-run).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The serving node's RID.
    pub rid: String,
    /// The serving node's lifecycle generation (compared for equality only).
    pub generation: u64,
}

/// Why a store operation failed. Whatever the cause, the runtime refuses the command with
/// `UnknownOutcome` rather than run it unguarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyStoreError {
    /// The store cannot be opened, read or written (I/O or SQLite error text).
    #[error("idempotency store unavailable: {0}")]
    Unavailable(String),
    /// The store holds something this build cannot read (a malformed record, a file that is
    /// not a database).
    #[error("idempotency store corrupt: {0}")]
    Corrupt(String),
    /// The store was written by a build with a schema this one does not know.
    #[error(
        "idempotency store schema version {found} is not supported (this build knows {supported})"
    )]
    UnsupportedSchema {
        /// The version found in the store.
        found: i64,
        /// The version this build reads and writes.
        supported: i64,
    },
    /// [`IdempotencyStore::complete`] found no live in-progress record under the key: it is
    /// missing, expired, or already done.
    #[error("no in-progress idempotency record under this key")]
    NotInProgress,
    /// The operation needs a tokio runtime and none is running.
    #[error("no tokio runtime is running")]
    NoRuntime,
}

/// The key a record is stored under: the caller's idempotency key scoped to channel and
/// method, or the request's own identity.
///
/// Every part is length-prefixed (`<len>:<bytes>,`, a netstring) behind a tag naming the
/// constructor, so no two different inputs, and no inputs to the two different constructors,
/// give the same key. The encoding is stored on disk: changing it orphans every record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopedKey(String);

impl ScopedKey {
    /// The caller's idempotency key, which names an operator's intent across retries, scoped
    /// to the channel and method it was sent to (the same key on another method is another
    /// intent).
    pub fn from_idempotency_key(channel: &str, method: &str, key: &str) -> Self {
        let mut out = String::from("key:");
        push_netstring(&mut out, channel);
        push_netstring(&mut out, method);
        push_netstring(&mut out, key);
        ScopedKey(out)
    }

    /// The request's identity, for a call without an idempotency key: a redelivered REQUEST
    /// is the same command, an operator pressing the button again is not.
    pub fn from_request(caller_rid: &str, caller_generation: u64, call_id: u64) -> Self {
        let mut out = String::from("req:");
        push_netstring(&mut out, caller_rid);
        push_netstring(&mut out, &caller_generation.to_string());
        push_netstring(&mut out, &call_id.to_string());
        ScopedKey(out)
    }

    /// The encoded key, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A key as a store lists it ([`ScopedKey::as_str`]).
    pub fn from_stored(stored: impl Into<String>) -> Self {
        ScopedKey(stored.into())
    }

    /// What the key is made of: `"key"` with the channel, method and idempotency key, or
    /// `"req"` with the caller's RID, lifecycle generation and call id; `None` for text that
    /// is not a key of either form.
    pub fn parts(&self) -> Option<(&str, Vec<&str>)> {
        let (kind, mut rest) = self.0.split_once(':')?;
        if kind != "key" && kind != "req" {
            return None;
        }
        let mut parts = Vec::new();
        while !rest.is_empty() {
            let (len, tail) = rest.split_once(':')?;
            let len: usize = len.parse().ok()?;
            let part = tail.get(..len)?;
            rest = tail.get(len..)?.strip_prefix(',')?;
            parts.push(part);
        }
        (parts.len() == 3).then_some((kind, parts))
    }
}

impl fmt::Display for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn push_netstring(out: &mut String, part: &str) {
    out.push_str(&part.len().to_string());
    out.push(':');
    out.push_str(part);
    out.push(',');
}

/// SHA-256 of a call's channel, method and argument bytes: tells a retry of the same call
/// from a different call that reuses its idempotency key.
///
/// Stored on disk, so the hashed encoding must never change: a domain tag, then channel and
/// method each behind a 64-bit big-endian length, then the argument bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    const DOMAIN: &'static [u8] = b"zmesh-idempotency-fingerprint-v1\0";

    /// The fingerprint of a call to `method` on `channel` with these encoded arguments.
    pub fn of_call(channel: &str, method: &str, args: &[u8]) -> Self {
        let mut hash = Sha256::new();
        hash.update(Self::DOMAIN);
        for part in [channel.as_bytes(), method.as_bytes()] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        hash.update(args);
        Fingerprint(hash.finalize().into())
    }

    /// A fingerprint from its 32 bytes (as read back from a store).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Fingerprint(bytes)
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    /// Lower-case hex, 64 characters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// K3: the key encoding is unambiguous: a separator inside a part cannot move the border
    /// between parts.
    #[test]
    fn k3_scoped_key_parts_cannot_slide() {
        let a = ScopedKey::from_idempotency_key("a:b", "c", "k");
        let b = ScopedKey::from_idempotency_key("a", "b:c", "k");
        assert_ne!(a, b);
        let a = ScopedKey::from_idempotency_key("ch", "m,1:x", "k");
        let b = ScopedKey::from_idempotency_key("ch", "m", "1:x,k");
        assert_ne!(a, b);
        let a = ScopedKey::from_request("r:1", 2, 3);
        let b = ScopedKey::from_request("r", 12, 3);
        assert_ne!(a, b);
    }

    /// K3: the two constructors never produce the same key, even for inputs that spell the
    /// same text.
    #[test]
    fn k3_scoped_key_constructors_never_collide() {
        let by_key = ScopedKey::from_idempotency_key("rid", "7", "9");
        let by_request = ScopedKey::from_request("rid", 7, 9);
        assert_ne!(by_key, by_request);
    }

    /// K3: the encoding is what lies on disk; pin it so a change is a deliberate one.
    #[test]
    fn k3_scoped_key_encoding_is_pinned() {
        assert_eq!(
            ScopedKey::from_idempotency_key("pump", "dispense", "wo-42").as_str(),
            "key:4:pump,8:dispense,5:wo-42,"
        );
        assert_eq!(
            ScopedKey::from_request("node-a", 7, 5).to_string(),
            "req:6:node-a,1:7,1:5,"
        );
        // Lengths are in bytes, not characters.
        assert_eq!(
            ScopedKey::from_idempotency_key("é", "", "").as_str(),
            "key:2:é,0:,0:,"
        );
    }

    /// K3: the fingerprint is stored on disk; pin its bytes for one input (computed
    /// independently of this code: SHA-256 over the documented framing) so a change of
    /// encoding or hash is a deliberate one.
    #[test]
    fn k3_fingerprint_is_pinned_and_hex() {
        const PINNED: &str = "40ee5b3b52d7968a95b35ab54ffc565fe17276ae139f38ed2f432dafa6364a7d";
        let fp = Fingerprint::of_call("pump", "dispense", &[0xC3]);
        assert_eq!(fp.to_string(), PINNED);
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(PINNED, &mut bytes).expect("hex");
        assert_eq!(fp.as_bytes(), &bytes);
        assert_eq!(fp, Fingerprint::from_bytes(bytes));
        assert_eq!(format!("{fp:?}"), format!("Fingerprint({PINNED})"));
    }

    /// K3: the fingerprint separates channel, method and arguments.
    #[test]
    fn k3_fingerprint_separates_its_parts() {
        let base = Fingerprint::of_call("ab", "c", b"x");
        assert_ne!(base, Fingerprint::of_call("a", "bc", b"x"));
        assert_ne!(base, Fingerprint::of_call("ab", "cx", b""));
        assert_ne!(base, Fingerprint::of_call("ab", "c", b"y"));
        assert_eq!(base, Fingerprint::of_call("ab", "c", b"x"));
    }
}
