//! What automatic mode added to the node (MISSION D1, F3): the descriptor fences and the
//! links and subscriptions discovery made, by RID. Applying the discovery agent's intents is
//! the thread's (`io/discovery.rs`), which reads and writes these maps.

use std::collections::HashMap;

use crate::proto::handshake::Expectation;
use crate::runtime::keys::SubKey;

/// What discovery added to the I/O thread's links, and the fences of the descriptors.
#[derive(Debug, Default)]
pub(crate) struct Discovered {
    /// The current descriptor fence of each RID (MISSION F3).
    pub(crate) fences: HashMap<String, Expectation>,
    /// The RID whose descriptor publishes a ClientServer endpoint (fences manual servers
    /// configured without a RID).
    pub(crate) endpoint_owner: HashMap<String, String>,
    /// Peers discovery appended to the peer list: RID -> index.
    pub(crate) peers: HashMap<String, usize>,
    /// Servers discovery appended to the server list: (RID, channel) -> index.
    pub(crate) servers: HashMap<(String, String), usize>,
    /// Subscriptions discovery opened: (RID, endpoint) -> index, and the generation each was
    /// opened for.
    pub(crate) subs: HashMap<(String, String), (SubKey, u64)>,
}
