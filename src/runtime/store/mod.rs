//! Descriptor stores (MISSION D2): where nodes publish their [`Descriptor`]s under a lease and
//! find each other's.
//!
//! Two backends:
//!
//! | URL | backend | scope |
//! |---|---|---|
//! | `sqlite:///var/lib/zmesh/mesh.db` | [`SqliteStore`]: one SQLite file, no server; rows with a wall-clock expiry renewed on the lease interval, a revision column for change polling, stale rows ignored and cleaned | **one host only**: every node must open the same file on a local file system |
//! | `etcd://127.0.0.1:2379[,host:port…][/prefix]` | [`EtcdStore`], etcd v3 over gRPC (`etcd-client`), plain or TLS, with or without user/password authentication ([`EtcdOptions`]): one lease per node with keep-alive, watch by revision with resume, a compacted revision reloads everything | many hosts |
//!
//! # The interface
//!
//! [`Store`] is dyn-compatible (the runtime holds an `Arc<dyn Store>`): every operation
//! returns a boxed `Send` future, run on the caller's tokio runtime.
//!
//! - [`Store::put`] publishes a descriptor under a fresh lease of `ttl`; a descriptor of the
//!   same RID is replaced (a new process run takes over from the old one's leftover).
//! - [`Store::renew`] extends the lease; the answer says whether it still exists, or whether
//!   another run of the RID took the descriptor over.
//! - [`Store::remove`] deletes the descriptor if it is still this lease's.
//! - [`Store::list`] reads every live descriptor with its lease age.
//! - [`Store::watch`] is a change stream that survives reconnects: its first event is a
//!   [`WatchEvent::Reload`] with everything, then [`WatchEvent::Delta`]s; when the store
//!   cannot be read it says so ([`WatchEvent::Unreachable`], once per outage) and keeps
//!   trying, and when it can again it either starts over with a `Reload` (SQLite) or resumes
//!   from the last change it delivered ([`WatchEvent::Resumed`], etcd): nothing that happened
//!   meanwhile is missed. A store whose history no longer reaches back to the watcher's
//!   position (etcd compaction) answers with a `Reload` ([`ReloadReason::Compacted`]).
//!
//! Lease expiry is never a precise clock: a store removes an expired descriptor *not before*
//! its TTL, sometimes later (etcd stretches leases across a leader change; the SQLite store
//! judges expiry on the wall clock of whoever reads).

mod etcd;
mod sqlite;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::config::DiscoveryConfig;
pub use crate::config::{StoreUrl, StoreUrlError};
pub use crate::proto::discovery::lease::RenewOutcome;
pub use crate::proto::discovery::Descriptor;
pub use etcd::{
    EtcdOptions, EtcdStore, EtcdTls, Secret, ETCD_CONNECT_TIMEOUT, ETCD_REQUEST_TIMEOUT,
    ETCD_RESUME_BOUND, WATCH_PING_INTERVAL,
};
pub use sqlite::{SqliteStore, SQLITE_POLL_INTERVAL};

/// The future every store operation returns: boxed so that [`Store`] stays dyn-compatible,
/// `Send` so it can be awaited on any tokio worker.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A store operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store cannot be reached or used now (file gone or locked, server down); the
    /// operation may succeed later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store holds data this build cannot use.
    #[error("store data not usable: {0}")]
    Corrupt(String),
    /// The operation must run inside a tokio runtime.
    #[error("store operations need a tokio runtime")]
    NoRuntime,
    /// The store URL is not one this build can open.
    #[error("store URL {url:?}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS handshake with a store server failed: its certificate could not be verified,
    /// or it refused this node's.
    #[error("store {endpoint}: TLS handshake failed: {failure}")]
    Tls {
        /// The server (`host:port`).
        endpoint: String,
        /// Why.
        failure: TlsFailure,
    },
    /// A store server refused this node's credentials (a wrong user name or password, a user
    /// without the permission needed, or credentials given to a server without
    /// authentication).
    #[error("store {endpoint}: authentication refused: {detail}")]
    Auth {
        /// The server (`host:port`).
        endpoint: String,
        /// The server's own words.
        detail: String,
    },
    /// The store's TLS or authentication settings cannot be used (a file that cannot be read
    /// or is not PEM, a password variable that is not set).
    #[error("store settings: {0}")]
    Settings(String),
}

/// Why a TLS handshake with a store server failed ([`StoreError::Tls`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server's certificate is not signed by the configured CA: a wrong `ca_file`, or
    /// not the server meant.
    #[error("the server's certificate is not signed by the configured CA (ca_file)")]
    UnknownIssuer,
    /// The server's certificate has expired.
    #[error("the server's certificate has expired")]
    Expired,
    /// The server's certificate is not valid yet (or this host's clock is behind).
    #[error("the server's certificate is not valid yet")]
    NotValidYet,
    /// The server's certificate is not issued for the name dialled (or `server_name`).
    #[error("the server's certificate is not valid for the name dialled: {0}")]
    NameMismatch(String),
    /// The server refused this node's client certificate (absent, expired, or not signed by
    /// a CA the server trusts), with the TLS alert it sent.
    #[error("the server refused this node's client certificate ({0})")]
    ClientCertificateRefused(String),
    /// Another TLS failure, in the TLS library's words.
    #[error("{0}")]
    Other(String),
}

/// A lease on one published descriptor: what [`Store::renew`] and [`Store::remove`] need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The descriptor's RID.
    pub rid: String,
    /// The descriptor's generation (the lease is this process run's).
    pub generation: u64,
    /// The lease's time to live.
    pub ttl: Duration,
    /// The backend's lease id (etcd), 0 where the backend has none.
    pub id: i64,
}

/// One live descriptor as [`Store::list`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The descriptor.
    pub descriptor: Descriptor,
    /// Time since the lease was last renewed, if the backend knows.
    pub lease_age_ms: Option<u64>,
    /// Time until the lease expires unless renewed, if the backend knows (not before this).
    pub expires_in_ms: Option<u64>,
}

/// One change of the store's descriptor set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A descriptor was published (new RID, or a new version of a known one).
    Put(Descriptor),
    /// The descriptor of `rid` was removed or its lease expired.
    Removed {
        /// Its RID.
        rid: String,
    },
}

/// Why a watch starts over with everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadReason {
    /// The first read of the watch.
    Initial,
    /// The store answers again after it could not be read.
    Resumed,
    /// The store's history no longer reaches back to the watch's position (etcd compaction).
    Compacted,
}

impl ReloadReason {
    /// Stable snake_case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ReloadReason::Initial => "initial",
            ReloadReason::Resumed => "resumed",
            ReloadReason::Compacted => "compacted",
        }
    }
}

/// What a [`Watch`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// Every live descriptor: replaces whatever the watcher knew.
    Reload {
        /// The descriptors.
        descriptors: Vec<Descriptor>,
        /// Why the watch starts over.
        reason: ReloadReason,
    },
    /// Changes since the previous event, in order.
    Delta(Vec<Change>),
    /// The store cannot be read; the watch keeps trying, and says when it can again: with a
    /// `Reload`, or with `Resumed`.
    Unreachable(StoreError),
    /// The store answers again and the watch went on from the last change it delivered:
    /// nothing was missed, nothing is repeated (etcd, whose history allows it).
    Resumed,
}

/// A change stream of a store's descriptors (see [`Store::watch`]). Dropping it ends the
/// task that feeds it.
#[derive(Debug)]
pub struct Watch {
    rx: mpsc::Receiver<WatchEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// A watch fed by `task` through `rx`.
    pub fn new(rx: mpsc::Receiver<WatchEvent>, task: tokio::task::JoinHandle<()>) -> Watch {
        Watch { rx, task }
    }

    /// The next event; `None` only if the feeding task ended.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        self.rx.recv().await
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where descriptors live (see the module doc for the contract).
pub trait Store: Send + Sync + fmt::Debug {
    /// Publishes `descriptor` under a fresh lease of `ttl`, replacing any descriptor of its RID.
    fn put(&self, descriptor: &Descriptor, ttl: Duration) -> StoreFuture<'_, Lease>;

    /// Extends `lease` by its TTL from now: [`RenewOutcome::Lost`] if it no longer exists
    /// (expired or removed), [`RenewOutcome::Superseded`] if the RID's descriptor now belongs
    /// to another generation.
    fn renew(&self, lease: &Lease) -> StoreFuture<'_, RenewOutcome>;

    /// Removes the descriptor if it is still `lease`'s (never another run's).
    fn remove(&self, lease: &Lease) -> StoreFuture<'_, ()>;

    /// Every live descriptor, by RID.
    fn list(&self) -> StoreFuture<'_, Vec<Entry>>;

    /// A change stream of the descriptors; needs a tokio runtime.
    fn watch(&self) -> Result<Watch, StoreError>;

    /// The store's URL, for snapshots and logs (never with credentials).
    fn url(&self) -> String;
}

impl From<StoreUrlError> for StoreError {
    fn from(e: StoreUrlError) -> StoreError {
        StoreError::Url {
            url: e.url,
            reason: e.reason,
        }
    }
}

/// Opens the store at `url`, an etcd one in plain text without authentication. Nothing is
/// read or written yet: an unreachable store shows up in the first operation, not here (a
/// node starts whether or not its store answers).
///
/// # Errors
/// [`StoreError::Url`] for a URL this build cannot open.
pub fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    open_with(url, EtcdOptions::new())
}

/// Opens the store of a `[discovery]` section: its URL, reached with the TLS and
/// authentication settings of the section. The certificate, key and password files are read
/// here (a missing file fails at start); the store itself is not contacted yet.
///
/// # Errors
/// [`StoreError::Url`] for a URL this build cannot open; [`StoreError::Settings`] for
/// settings that cannot be used.
pub fn open_config(d: &DiscoveryConfig) -> Result<Arc<dyn Store>, StoreError> {
    open_with(&d.store, EtcdOptions::from_config(d)?)
}

fn open_with(url: &str, options: EtcdOptions) -> Result<Arc<dyn Store>, StoreError> {
    match StoreUrl::parse(url)? {
        StoreUrl::Sqlite(path) => Ok(Arc::new(SqliteStore::new(path))),
        StoreUrl::Etcd { endpoints, prefix } => Ok(Arc::new(EtcdStore::with_options(
            endpoints, prefix, options,
        ))),
    }
}
