//! The gate's state: the bound sockets by ZAP domain, the connections open
//! on each, the allow-list (CURVE) and the recent refusals. What the gate decides over it is
//! [`Accepting`](crate::proto::node::accepting::Accepting)'s, in the order the node core
//! gives ([`crate::proto::node::core::gate`]); reading and answering the ZAP handler and
//! counting refusals is the thread's (`io/gate.rs`, whose module docs describe the whole
//! gate).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Instant;

use crate::proto::node::keys::SlotKey;
use crate::proto::security::{InputRefusal, PublicKey};

/// Refusals a snapshot lists, newest last.
pub const RECENT_REFUSALS: usize = 64;

/// The socket behind a ZAP domain: the binding glue registers domains, the gate judges them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gated {
    /// A bound ROUTER, in its slot: the allow-list (CURVE) and the unadmitted cap.
    Bound(SlotKey),
    /// The publisher's XPUB: under CURVE its ZAP domain (the allow-list); in any mode the
    /// input it refuses. Its subscribers are never admitted by a handshake, so the cap is not
    /// theirs.
    Publisher,
}

/// One refusal of an unadmitted connection.
pub(crate) struct Refusal {
    /// When it was refused.
    pub(crate) at: Instant,
    /// The endpoint it came to.
    pub(crate) endpoint: String,
    /// Why, as counted.
    pub(crate) reason: InputRefusal,
    /// What was seen.
    pub(crate) detail: String,
}

/// The gate's state.
pub(crate) struct Gate {
    /// The bound sockets by ZAP domain.
    domains: HashMap<String, Gated>,
    /// Connections open on each bound socket, by descriptor (monitor events).
    open: HashMap<SlotKey, HashSet<u32>>,
    recent: VecDeque<Refusal>,
    /// CURVE: the public keys of the clients the bound endpoints admit.
    allow: BTreeSet<PublicKey>,
    /// Times the allow-list was loaded again since start.
    pub(crate) allow_reloads: u64,
    /// Why the last attempt to load it again failed, if it did (the list in force stays).
    pub(crate) allow_error: Option<String>,
}

impl Gate {
    /// A gate admitting the CURVE clients of `allow`.
    pub(crate) fn new(allow: BTreeSet<PublicKey>) -> Gate {
        Gate {
            domains: HashMap::new(),
            open: HashMap::new(),
            recent: VecDeque::new(),
            allow,
            allow_reloads: 0,
            allow_error: None,
        }
    }

    /// Keys on the allow-list.
    pub(crate) fn allowed_keys(&self) -> usize {
        self.allow.len()
    }

    /// Whether `key` is on the allow-list.
    pub(crate) fn allows(&self, key: &PublicKey) -> bool {
        self.allow.contains(key)
    }

    /// Bound socket `slot` answers to ZAP domain `domain`.
    pub(crate) fn add_domain(&mut self, domain: &str, gated: Gated) {
        self.domains.insert(domain.to_owned(), gated);
        if let Gated::Bound(slot) = gated {
            self.open.entry(slot).or_default();
        }
    }

    /// Bound socket `slot`'s monitor reported connection `fd` accepted.
    pub(crate) fn opened(&mut self, slot: SlotKey, fd: u32) {
        self.open.entry(slot).or_default().insert(fd);
    }

    /// Bound socket `slot`'s monitor reported connection `fd` gone.
    pub(crate) fn closed(&mut self, slot: SlotKey, fd: u32) {
        if let Some(open) = self.open.get_mut(&slot) {
            open.remove(&fd);
        }
    }

    /// Connections open on bound socket `slot`, admitted or not.
    pub(crate) fn open_on(&self, slot: SlotKey) -> usize {
        self.open.get(&slot).map_or(0, HashSet::len)
    }

    /// Keeps a refusal for the snapshot: the last [`RECENT_REFUSALS`], newest last.
    pub(crate) fn remember(&mut self, refusal: Refusal) {
        if self.recent.len() == RECENT_REFUSALS {
            self.recent.pop_front();
        }
        self.recent.push_back(refusal);
    }

    /// The refusals kept, oldest first.
    pub(crate) fn refusals(&self) -> impl Iterator<Item = &Refusal> {
        self.recent.iter()
    }

    /// The bound socket (or the publisher) behind ZAP domain `domain`.
    pub(crate) fn gated(&self, domain: &str) -> Option<Gated> {
        self.domains.get(domain).copied()
    }

    /// Puts `keys` in force as the allow-list, counted as a reload that succeeded; returns
    /// how many keys it holds.
    pub(crate) fn reload(&mut self, keys: BTreeSet<PublicKey>) -> usize {
        self.allow = keys;
        self.allow_reloads += 1;
        self.allow_error = None;
        self.allow.len()
    }
}
