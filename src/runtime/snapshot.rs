//! Read-only snapshots of a node's links (MISSION O1, O2).
//!
//! A snapshot carries identities (RIDs, endpoints, connection ids); metrics never do (O2).
//! Times are monotonic ages in milliseconds; `*_unix_ms` fields are rendered from the wall
//! clock for display only (MISSION L7).

use serde::Serialize;

use crate::proto::discovery::{Descriptor, LeaseStatus};
use crate::proto::security::InputRefusal;
use crate::proto::state::{ConnState, FailureReason};
use crate::runtime::link::LinkId;

/// Most links a snapshot lists; the rest are counted in [`Snapshot::omitted`].
pub const SNAPSHOT_LIMIT: usize = 4096;

/// A copy of a node's state at one instant.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Snapshot {
    /// The node's RID.
    pub rid: String,
    /// The node's lifecycle generation (JSON: 16 hex digits, as in its descriptor).
    #[serde(serialize_with = "super::hex64::serialize")]
    pub generation: u64,
    /// Host state: `running`, `draining` or `stopped`.
    pub host: &'static str,
    /// Calls this node made that have not completed (MISSION C5).
    pub pending_calls: usize,
    /// Calls this node accepted and has not answered yet.
    pub serving_calls: usize,
    /// Every configured or inbound link, up to [`SNAPSHOT_LIMIT`], but for RouteMesh links
    /// that are history of a lane rather than its state: a dial that stood down for the
    /// peer's own connection, and a link without a connection whose peer and lane are ready
    /// on another link.
    pub links: Vec<LinkSnapshot>,
    /// Links left out because of the limit.
    pub omitted: usize,
    /// Links and subscriptions in state `ready`, over all of them (those left out of
    /// [`Snapshot::links`] too).
    pub links_ready: usize,
    /// The last refusals of connections that were never admitted on this node's bound
    /// endpoints (garbage, a first record that is not a HELLO, a failed transport
    /// handshake, the unadmitted-connection cap, security), oldest first, at most 64.
    pub recent_refusals: Vec<RefusalSnapshot>,
    /// libzmq contexts holding this node's link sockets (each runs two libzmq threads). Follows the number of open sockets, not
    /// the number ever opened: a node that redials often does not accumulate contexts.
    pub zmq_contexts: usize,
    /// Sockets open in those contexts, as counted against libzmq's per-context limit (a
    /// monitored socket counts three: itself and its two monitor PAIRs).
    pub zmq_sockets: usize,
    /// File descriptors the process has open (Linux: `/proc/self/fd`; `None` elsewhere).
    pub fds_open: Option<u64>,
    /// The process's soft file descriptor limit (`RLIMIT_NOFILE`), which the node raised to
    /// the hard limit at start; `None` where there is none.
    pub fd_limit: Option<u64>,
    /// Automatic mode: the store, the lease and the descriptors seen (absent in manual mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery: Option<DiscoverySnapshot>,
    /// Transport security: the mode, this node's public key, the allow-list.
    pub security: SecuritySnapshot,
}

/// A node's transport security.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct SecuritySnapshot {
    /// `curve` or `none` (`none`: nothing is authenticated or encrypted).
    pub mode: &'static str,
    /// CURVE: this node's public key (Z85), its security identity.
    pub public_key: Option<String>,
    /// CURVE: keys on the allow-list of the bound endpoints.
    pub allowed_keys: usize,
    /// Times the allow-list was read again since start (SIGHUP, a change of `allow_dir`).
    pub allow_list_reloads: u64,
    /// Why the last attempt to read it again failed, if it did (the previous list stays).
    pub allow_list_error: Option<String>,
}

/// One link: a RouteMesh lane, a ClientServer connection or a fanout publisher.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct LinkSnapshot {
    /// Which link this row is, as typed values (topology, peer, lane): equal to the
    /// [`StateChange::id`](crate::runtime::StateChange::id) of the link's state changes.
    /// Not serialized: the row's topology, role, peer and endpoint say it in JSON.
    #[serde(skip)]
    pub id: LinkId,
    /// `route_mesh`, `client_server` or `fanout`.
    pub topology: &'static str,
    /// `application`, `completion`, `client`, `server_inbound`, `subscriber` …
    pub role: &'static str,
    /// The peer RID, once known.
    pub peer: Option<String>,
    /// The peer's lifecycle generation on the current connection (a different value than
    /// before means a new process run of the same RID). JSON: 16 hex digits.
    #[serde(serialize_with = "super::hex64::serialize_option")]
    pub peer_generation: Option<u64>,
    /// The endpoint dialled or subscribed to (inbound links: the local bound endpoint).
    pub endpoint: String,
    /// The channels calls reach through this link: for a ClientServer client link, the
    /// channel its server is configured for; for a RouteMesh or inbound link, the channels
    /// its peer announced a Server membership of in the current connection's handshake
    /// (empty before one).
    pub serves: Vec<String>,
    /// Current state.
    pub state: ConnState,
    /// Current physical connection id (diagnostic only; `c{n}` in event details and logs,
    /// JSON: `n` as 16 hex digits).
    #[serde(serialize_with = "super::hex64::serialize_option")]
    pub connection_id: Option<u64>,
    /// Last failure, if any.
    pub last_failure: Option<FailureSnapshot>,
    /// Milliseconds since the last record was received on this link (monotonic).
    pub last_receive_age_ms: Option<u64>,
    /// Wall-clock rendering of the last receive, for display only.
    pub last_receive_unix_ms: Option<u64>,
    /// Records received on the current and previous connections of this link.
    pub records_received: u64,
    /// Calls pending on this link's current connection (MISSION C5: a count that climbs on a
    /// healthy peer is a wedged callee).
    pub pending_calls: usize,
    /// Times this link became ready.
    pub ready_count: u64,
    /// Times this link failed.
    pub failure_count: u64,
    /// The security identity of the peer on the current connection, once admitted: under
    /// CURVE its public key (Z85), else what its handshake claimed.
    pub peer_security_identity: Option<String>,
    /// True when the transport proved `peer_security_identity` (CURVE).
    pub verified: bool,
}

/// One refusal of a connection that was never admitted. It names the local
/// endpoint, never the peer (the peer is not known: it was not admitted).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RefusalSnapshot {
    /// The local bound endpoint the connection arrived on.
    pub endpoint: String,
    /// Why (the label of `zmesh_input_refused_total`).
    pub reason: InputRefusal,
    /// Detail for humans.
    pub detail: String,
    /// Milliseconds since it happened (monotonic).
    pub age_ms: u64,
}

/// The last failure of a link.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FailureSnapshot {
    /// Why.
    pub reason: FailureReason,
    /// Detail for humans.
    pub detail: String,
    /// Milliseconds since it happened (monotonic).
    pub age_ms: u64,
}

impl Snapshot {
    /// The links whose peer is `rid`.
    pub fn peer(&self, rid: &str) -> impl Iterator<Item = &LinkSnapshot> {
        let rid = rid.to_owned();
        self.links
            .iter()
            .filter(move |l| l.peer.as_deref() == Some(rid.as_str()))
    }

    /// A human-readable table.
    pub fn to_table(&self) -> String {
        let mut out = format!(
            "node {} generation {:016x} host {}\n{:<14} {:<20} {:<10} {:<44} {:<14} {:>5} {}\n",
            self.rid,
            self.generation,
            self.host,
            "TOPOLOGY",
            "ROLE",
            "PEER",
            "ENDPOINT",
            "STATE",
            "CONN",
            "LAST FAILURE"
        );
        for l in &self.links {
            let failure = l
                .last_failure
                .as_ref()
                .map(|f| format!("{} ({} ms ago) {}", f.reason, f.age_ms, f.detail))
                .unwrap_or_default();
            out.push_str(&format!(
                "{:<14} {:<20} {:<10} {:<44} {:<14} {:>5} {}\n",
                l.topology,
                l.role,
                l.peer.as_deref().unwrap_or("-"),
                l.endpoint,
                l.state.as_str(),
                l.connection_id.map(|c| c.to_string()).unwrap_or("-".into()),
                failure
            ));
        }
        if self.omitted > 0 {
            out.push_str(&format!("... {} more links omitted\n", self.omitted));
        }
        if !self.recent_refusals.is_empty() {
            out.push_str("recent refusals of unadmitted connections:\n");
            for r in &self.recent_refusals {
                out.push_str(&format!(
                    "  {} {} ({} ms ago) {}\n",
                    r.endpoint, r.reason, r.age_ms, r.detail
                ));
            }
        }
        out.push_str(&format!(
            "links ready {}; file descriptors {} open of {} (libzmq: {} contexts, {} sockets)\n",
            self.links_ready,
            self.fds_open.map_or("?".into(), |n| n.to_string()),
            self.fd_limit.map_or("?".into(), |n| n.to_string()),
            self.zmq_contexts,
            self.zmq_sockets,
        ));
        let sec = &self.security;
        out.push_str(&match &sec.public_key {
            Some(key) => format!(
                "security {} key {} allow-list {} keys (reloaded {} times){}\n",
                sec.mode,
                key,
                sec.allowed_keys,
                sec.allow_list_reloads,
                sec.allow_list_error
                    .as_ref()
                    .map(|e| format!(", last reload failed: {e}"))
                    .unwrap_or_default()
            ),
            None => format!(
                "security {}: nothing authenticated or encrypted\n",
                sec.mode
            ),
        });
        if let Some(d) = &self.discovery {
            out.push_str(&format!(
                "discovery {} store {} lease {} (age {}, ttl {} ms, renewed every {} ms) descriptors {}\n",
                d.store,
                if d.store_reachable { "reachable" } else { "unreachable" },
                d.lease.as_str(),
                d.lease_age_ms.map_or("-".into(), |a| format!("{a} ms")),
                d.lease_ttl_ms,
                d.lease_renew_interval_ms,
                d.descriptors_seen,
            ));
        }
        out
    }
}

/// The discovery part of a node's snapshot.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct DiscoverySnapshot {
    /// The store's URL.
    pub store: String,
    /// Whether the store answered the last lease operation and the last read.
    pub store_reachable: bool,
    /// The last store error, if any, and how long ago (ms, monotonic).
    pub last_store_error: Option<(String, u64)>,
    /// Where this node's lease stands: `acquiring`, `held`, `lost`, `superseded`, `released`.
    pub lease: LeaseStatus,
    /// Milliseconds since the store last confirmed this node's lease (monotonic).
    pub lease_age_ms: Option<u64>,
    /// The lease's TTL in ms ([`LEASE_TTL`](crate::proto::discovery::LEASE_TTL)).
    pub lease_ttl_ms: u64,
    /// The renewal interval in ms ([`LEASE_RENEW_INTERVAL`](crate::proto::discovery::LEASE_RENEW_INTERVAL)).
    pub lease_renew_interval_ms: u64,
    /// Descriptors of other nodes known from the store.
    pub descriptors_seen: usize,
    /// This node's own descriptor, as published.
    pub descriptor: Descriptor,
}
