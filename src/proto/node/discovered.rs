//! What automatic mode added to the node (MISSION D1, F3): the descriptor fences and the
//! links and subscriptions discovery made, by RID. Applying the discovery agent's intents is
//! the shell's (the I/O thread's `io/discovery.rs`, or a simulated node's glue), which reads
//! and writes these maps; admission reads the fences ([`crate::proto::node::admit`]).

use std::collections::HashMap;

use crate::proto::handshake::Expectation;
use crate::proto::node::keys::SubKey;

/// What discovery added to the node's links, and the fences of the descriptors.
#[derive(Debug, Default)]
pub struct Discovered {
    /// The current descriptor fence of each RID (MISSION F3).
    pub fences: HashMap<String, Expectation>,
    /// The RID whose descriptor publishes a ClientServer endpoint (fences manual servers
    /// configured without a RID), by that endpoint.
    pub endpoint_owner: HashMap<String, String>,
    /// Peers discovery appended to the peer list: RID -> index.
    pub(crate) peers: HashMap<String, usize>,
    /// Servers discovery appended to the server list: (RID, channel) -> index.
    pub(crate) servers: HashMap<(String, String), usize>,
    /// Subscriptions discovery opened: (RID, endpoint) -> index, and the generation each was
    /// opened for.
    pub(crate) subs: HashMap<(String, String), (SubKey, u64)>,
}

impl Discovered {
    /// The descriptor fence of RouteMesh peer `rid`, if a descriptor set one.
    pub fn peer_fence(&self, rid: &str) -> Option<&Expectation> {
        self.fences.get(rid)
    }

    /// The descriptor fence of a configured server with RID `rid` (if configured with one)
    /// at `endpoint`: by its RID, or by its endpoint when it was configured without one.
    pub fn server_fence(&self, rid: Option<&str>, endpoint: &str) -> Option<&Expectation> {
        self.server_rid(rid, endpoint)
            .and_then(|rid| self.fences.get(rid))
    }

    /// The RID behind a configured server with RID `rid` (if configured with one) at
    /// `endpoint`: configured, or the owner of its endpoint.
    pub fn server_rid<'a>(&'a self, rid: Option<&'a str>, endpoint: &str) -> Option<&'a str> {
        rid.or_else(|| self.endpoint_owner.get(endpoint).map(String::as_str))
    }
}
