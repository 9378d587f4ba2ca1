//! The operations registry of a node (MISSION K2: what this peer has asked for, after the
//! promise has gone): one frozen entry per call this node made, as a caller or as
//! a server that calls, so an operator can see after the fact what ran, what failed and,
//! above all, which commands nobody knows the outcome of.
//!
//! The registry is hooked where every call of the node passes (the I/O thread's call
//! funnel): issued (handed to the node), sent (handed to libzmq: from now on it may run),
//! deferred (a stream that answered items but not yet its end), and settled as succeeded,
//! failed or unknown-outcome (the code kept beside it). Arguments and results are never
//! kept: an argument may be a bearer capability and a result a page of plant rows; what is
//! kept describes the request (who, what, when, how it ended).
//!
//! It is bounded by [`crate::config::NodeConfig::operations_keep`] (default 1 000) with three
//! tiers: settled-and-certain entries go first, then the oldest unknown-outcome, and an entry
//! in flight never goes (the registry may exceed the bound while more calls are in flight).
//!
//! ```no_run
//! # async fn demo(node: zmesh::runtime::Node) {
//! use zmesh::runtime::operations::OpStatus;
//!
//! let tray = node.operations();
//! let unknown = tray
//!     .snapshot()
//!     .into_iter()
//!     .filter(|op| op.status == OpStatus::UnknownOutcome)
//!     .count();
//! let mut changes = tray.subscribe();
//! while let Ok(op) = changes.recv().await {
//!     println!("{} {}.{} -> {}", op.id, op.channel, op.method, op.status);
//! }
//! # let _ = unknown;
//! # }
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::broadcast;

use crate::proto::ops::OpsRegistry;
pub use crate::proto::ops::{
    status_of_failure, OpCounts, OpStatus, Operation, OperationView, DEFAULT_KEEP,
};

/// Changes a subscriber may fall behind by before it misses some (it then re-reads
/// [`Operations::snapshot`]; `recv` says how many it missed).
pub const CHANGES_CAPACITY: usize = 1024;

/// A node's operations registry: cheap to clone, readable from any thread.
#[derive(Clone)]
pub struct Operations {
    shared: Arc<OpsShared>,
}

impl std::fmt::Debug for Operations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operations")
            .field("counts", &self.counts())
            .finish()
    }
}

impl Operations {
    pub(crate) fn new(shared: Arc<OpsShared>) -> Operations {
        Operations { shared }
    }

    /// Every entry, oldest first (newest last).
    pub fn snapshot(&self) -> Vec<Arc<Operation>> {
        self.shared.with(|r| r.snapshot())
    }

    /// Every entry as a view with ages in milliseconds (serialisable), oldest first.
    pub fn views(&self) -> Vec<OperationView> {
        let now = Instant::now();
        self.snapshot().iter().map(|op| op.view(now)).collect()
    }

    /// How many entries have each status.
    pub fn counts(&self) -> OpCounts {
        self.shared.with(|r| r.counts())
    }

    /// The bound of the registry (settled entries beyond it are evicted).
    pub fn keep(&self) -> usize {
        self.shared.with(|r| r.keep())
    }

    /// Every change from now on: the entry after the change (an eviction is not a change).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Operation>> {
        self.shared.changes.subscribe()
    }
}

/// The registry shared by the I/O thread (which writes) and [`Operations`] handles.
pub(crate) struct OpsShared {
    registry: Mutex<OpsRegistry>,
    changes: broadcast::Sender<Arc<Operation>>,
}

impl OpsShared {
    /// A registry keeping `keep` entries.
    pub(crate) fn new(keep: usize) -> OpsShared {
        let (changes, _) = broadcast::channel(CHANGES_CAPACITY);
        OpsShared {
            registry: Mutex::new(OpsRegistry::new(keep)),
            changes,
        }
    }

    /// Runs `f` on the registry, then publishes the changes it made.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut OpsRegistry) -> R) -> R {
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let r = f(&mut registry);
        while let Some(op) = registry.poll_change() {
            // Nobody subscribed: the change is dropped (the snapshot has it).
            let _ = self.changes.send(op);
        }
        r
    }
}
