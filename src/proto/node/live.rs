//! The node's liveness table with who owns each of its entries (MISSION L8): one
//! [`Liveness`] for every connection, subscription and the publisher's beacons, and the link,
//! subscription or publisher each entry belongs to, kept together so that an entry never
//! outlives its owner's record of it, or the other way round.

use std::collections::HashMap;
use std::time::Instant;

use crate::proto::liveness::{self, Liveness};
use crate::proto::node::keys::{LinkKey, SubKey};
use crate::proto::ConnId;

/// Who owns a liveness entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LiveOwner {
    Link(LinkKey),
    Sub(SubKey),
    Publisher,
}

/// The liveness table and the owner of each entry (see the module docs).
pub(crate) struct Live {
    table: Liveness,
    owners: HashMap<liveness::LinkKey, LiveOwner>,
}

impl Live {
    /// An empty table whose probe ids start from `seed` (the node's generation).
    pub(crate) fn new(seed: u64) -> Live {
        Live {
            table: Liveness::new(seed),
            owners: HashMap::new(),
        }
    }

    /// A ready connection of link `k`: its probe and deadline machine, from `now`.
    pub(crate) fn insert_connection(
        &mut self,
        k: LinkKey,
        conn: ConnId,
        now: Instant,
    ) -> liveness::LinkKey {
        let key = self.table.insert_connection(conn, now);
        self.owners.insert(key, LiveOwner::Link(k));
        key
    }

    /// A fanout subscription `i`: its silence deadline, from `now`.
    pub(crate) fn insert_subscription(&mut self, i: SubKey, now: Instant) -> liveness::LinkKey {
        let key = self.table.insert_publisher(now);
        self.owners.insert(key, LiveOwner::Sub(i));
        key
    }

    /// This node's publisher: its beacon timer, from `now`.
    pub(crate) fn insert_beacon(&mut self, now: Instant) -> liveness::LinkKey {
        let key = self.table.insert_beacon(now);
        self.owners.insert(key, LiveOwner::Publisher);
        key
    }

    /// Removes entry `key` and its owner.
    pub(crate) fn remove(&mut self, key: liveness::LinkKey) {
        self.table.remove(key);
        self.owners.remove(&key);
    }

    /// Who owns entry `key`.
    pub(crate) fn owner(&self, key: liveness::LinkKey) -> Option<LiveOwner> {
        self.owners.get(&key).copied()
    }

    /// Removes every entry (the node stops).
    pub(crate) fn clear(&mut self) {
        self.table.clear();
        self.owners.clear();
    }

    /// The table itself, for the reads that need no owner.
    pub(crate) fn table(&self) -> &Liveness {
        &self.table
    }

    /// The table itself, for the inputs and outputs that need no owner (entries are added
    /// and removed only here, with their owners).
    pub(crate) fn table_mut(&mut self) -> &mut Liveness {
        &mut self.table
    }
}
