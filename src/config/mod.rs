//! Node configuration (TOML via serde). Every key is documented on its field; unknown keys are
//! rejected so a typo is an error, not a silently ignored setting. README.md's section
//! "Configuration" lists every key with its type and default, and `examples/config/` holds one
//! file per topology.
//!
//! Fixed timings (probe interval, peer deadline, beacon interval) are deliberately absent:
//! they are constants (MISSION L1).
//!
//! ```toml
//! rid = "node-a"                       # stable node id (required)
//! security_identity = "svc-a"          # optional; defaults to the rid
//! memberships = [{ role = "server", channel = "orders" }]
//! max_frame_size = 16777216            # largest frame a peer may send (default 16 MiB)
//! max_unadmitted = 256                 # unadmitted connections per bound endpoint
//!
//! [route_mesh]                          # accept RouteMesh peers on these endpoints
//! application = "tcp://127.0.0.1:7101"
//! completion = "tcp://127.0.0.1:7102"
//!
//! [server]                              # ClientServer: serve clients on this endpoint
//! endpoint = "tcp://127.0.0.1:7103"
//!
//! [publisher]                           # Classic fanout: publish on this endpoint
//! endpoint = "tcp://127.0.0.1:7104"
//!
//! [[peers]]                             # RouteMesh peers to dial
//! rid = "node-b"
//! application = "tcp://127.0.0.1:7201"
//! completion = "tcp://127.0.0.1:7202"
//! batch_calls = true                   # calls issued together share a BATCH (default)
//!
//! [[servers]]                           # ClientServer servers to dial
//! channel = "orders"
//! endpoint = "tcp://127.0.0.1:7203"
//! batch_calls = true                   # default; false only for a pre-BATCH server
//!
//! [[subscriptions]]                     # fanout publishers to subscribe to
//! endpoint = "tcp://127.0.0.1:7204"
//!
//! [discovery]                           # automatic mode: find peers through a store
//! store = "sqlite:///tmp/zmesh-mesh.db"  # one host; or etcd://127.0.0.1:2379 (many hosts)
//! bind = ["route_mesh"]                # sections bound on ephemeral ports when absent
//! host = "127.0.0.1"                   # the address those ports are bound (and dialled) on
//! route_mesh = true                    # dial RouteMesh peers found in the store
//! client_server = true                 # dial servers of this node's object_client channels
//! subscribe = true                     # one SUB socket per publisher found in the store
//!
//! [security]                            # required: "curve", or "none" to trust the network
//! mode = "none"
//! ```
//!
//! Manual and automatic mode combine: `[[peers]]`, `[[servers]]` and `[[subscriptions]]` are
//! dialled as written, and a descriptor of the same peer fences them (MISSION F3): its RID,
//! security identity and generation are required of the peer whatever the manual entry says.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::proto::handshake::{self, Membership};
use crate::proto::wire::{Label, Memberships, Name};

mod discovery;
mod endpoints;
mod security;

pub use discovery::{
    AdvertiseConfig, AutoBind, DiscoveryConfig, EndpointKind, EtcdAuthConfig, EtcdTlsConfig,
    StoreUrl, StoreUrlError,
};
use endpoints::check_endpoint;
pub use endpoints::{Endpoint, PeerConfig, RouteMeshBind, ServerConfig};
pub use security::{SecurityConfig, SecurityMode};

/// Configuration of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NodeConfig {
    /// Stable node id (RID). Required, 1..=255 bytes.
    pub rid: String,
    /// Security identity announced in the handshake; defaults to the RID.
    #[serde(default)]
    pub security_identity: Option<String>,
    /// Channel memberships announced in the handshake.
    #[serde(default)]
    pub memberships: Vec<Membership>,
    /// Endpoints on which this node accepts RouteMesh peers.
    #[serde(default)]
    pub route_mesh: Option<RouteMeshBind>,
    /// Endpoint on which this node serves ClientServer clients.
    #[serde(default)]
    pub server: Option<Endpoint>,
    /// Endpoint on which this node publishes fanout records (and beacons).
    #[serde(default)]
    pub publisher: Option<Endpoint>,
    /// RouteMesh peers this node dials.
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
    /// ClientServer servers this node dials as a client.
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
    /// Fanout publishers this node subscribes to (one SUB socket each).
    #[serde(default)]
    pub subscriptions: Vec<Endpoint>,
    /// Deliveries the application may leave untaken before the application queue counts as
    /// paused (see [`crate::runtime::EventStream`]). Default 65536.
    #[serde(default = "default_high_water")]
    pub delivery_high_water: usize,
    /// Entries the operations registry keeps (MISSION K2, [`crate::runtime::operations`]):
    /// settled-and-certain entries beyond it are evicted first, then the oldest
    /// unknown-outcome ones; entries in flight never are. Default 1000.
    #[serde(default = "default_operations_keep")]
    pub operations_keep: usize,
    /// The largest frame a peer may send, in bytes (libzmq `ZMQ_MAXMSGSIZE` on every
    /// socket): libzmq checks a frame's length before it reads the frame, and closes the
    /// connection of a peer that announces a longer one, so no byte of it is stored. Only
    /// that connection is closed. Default [`DEFAULT_MAX_FRAME_SIZE`] (16 MiB); at least
    /// [`MIN_MAX_FRAME_SIZE`] so that every valid handshake record fits.
    #[serde(default = "default_max_frame_size")]
    pub max_frame_size: u64,
    /// Connections each bound endpoint (RouteMesh lanes, ClientServer server) holds that
    /// were not admitted (no WELCOME sent on them, or refused): at this many, a new
    /// connection is refused in its transport handshake until one of them goes. Default
    /// [`DEFAULT_MAX_UNADMITTED`].
    #[serde(default = "default_max_unadmitted")]
    pub max_unadmitted: usize,
    /// Automatic mode (MISSION D1): publish this node's descriptor to a store and derive
    /// links from the other nodes' descriptors. Absent: manual mode only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<DiscoveryConfig>,
    /// Transport security: CURVE with an allow-list, or none. A configuration
    /// file must say which (`[security] mode = "curve"` or `mode = "none"`, see
    /// [`NodeConfig::from_toml`]); the Rust default is [`SecurityMode::None`], which a node
    /// warns about when it starts.
    #[serde(default)]
    pub security: SecurityConfig,
}

/// Default of [`NodeConfig::max_frame_size`]: 16 MiB.
pub const DEFAULT_MAX_FRAME_SIZE: u64 = 16 << 20;
/// Smallest [`NodeConfig::max_frame_size`]: 1 MiB, above the longest valid HELLO (1 024
/// memberships of 255-byte channel names, about 265 KB).
pub const MIN_MAX_FRAME_SIZE: u64 = 1 << 20;
/// Default of [`NodeConfig::max_unadmitted`].
pub const DEFAULT_MAX_UNADMITTED: usize = 256;

fn default_max_frame_size() -> u64 {
    DEFAULT_MAX_FRAME_SIZE
}

fn default_max_unadmitted() -> usize {
    DEFAULT_MAX_UNADMITTED
}

fn default_operations_keep() -> usize {
    crate::proto::ops::DEFAULT_KEEP
}

fn default_high_water() -> usize {
    65_536
}

impl Default for NodeConfig {
    /// No RID (set one before starting), nothing bound, nothing dialled.
    fn default() -> NodeConfig {
        NodeConfig {
            rid: String::new(),
            security_identity: None,
            memberships: Vec::new(),
            route_mesh: None,
            server: None,
            publisher: None,
            peers: Vec::new(),
            servers: Vec::new(),
            subscriptions: Vec::new(),
            delivery_high_water: default_high_water(),
            operations_keep: default_operations_keep(),
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            max_unadmitted: DEFAULT_MAX_UNADMITTED,
            discovery: None,
            security: SecurityConfig::default(),
        }
    }
}

fn default_true() -> bool {
    true
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The TOML is invalid or has unknown keys.
    #[error("invalid configuration: {0}")]
    Parse(#[from] toml::de::Error),
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl NodeConfig {
    /// A minimal configuration with just a RID.
    pub fn new(rid: impl Into<String>) -> NodeConfig {
        NodeConfig {
            rid: rid.into(),
            ..NodeConfig::default()
        }
    }

    /// This configuration with the channel membership `membership` announced too
    /// (`memberships`), e.g. `Membership::server("pump")`.
    pub fn member(mut self, membership: Membership) -> NodeConfig {
        self.memberships.push(membership);
        self
    }

    /// This configuration accepting RouteMesh peers on `application` and `completion`
    /// (`[route_mesh]`).
    pub fn route_mesh(
        mut self,
        application: impl Into<String>,
        completion: impl Into<String>,
    ) -> NodeConfig {
        self.route_mesh = Some(RouteMeshBind {
            application: application.into(),
            completion: completion.into(),
        });
        self
    }

    /// This configuration dialling RouteMesh peer `peer` (one `[[peers]]` entry more).
    pub fn peer(mut self, peer: PeerConfig) -> NodeConfig {
        self.peers.push(peer);
        self
    }

    /// This configuration publishing fanout records at `endpoint` (`[publisher]`).
    pub fn publisher(mut self, endpoint: impl Into<String>) -> NodeConfig {
        self.publisher = Some(Endpoint::new(endpoint));
        self
    }

    /// This configuration subscribing to the publisher at `endpoint` (one
    /// `[[subscriptions]]` entry more).
    pub fn subscribe(mut self, endpoint: impl Into<String>) -> NodeConfig {
        self.subscriptions.push(Endpoint::new(endpoint));
        self
    }

    /// This configuration serving ClientServer clients at `endpoint` (`[server]`).
    pub fn server(mut self, endpoint: impl Into<String>) -> NodeConfig {
        self.server = Some(Endpoint::new(endpoint));
        self
    }

    /// This configuration dialling `server` as a ClientServer client (one `[[servers]]`
    /// entry more).
    pub fn dial_server(mut self, server: ServerConfig) -> NodeConfig {
        self.servers.push(server);
        self
    }

    /// Reads and validates a TOML file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<NodeConfig, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = NodeConfig::from_toml(&text)?;
        // Key paths in a file are relative to the file, wherever it is run from.
        if let Some(dir) = path.parent() {
            config.security.resolve_paths(dir);
            if let Some(d) = config.discovery.as_mut() {
                d.resolve_paths(dir);
            }
        }
        Ok(config)
    }

    /// Parses and validates TOML text.
    ///
    /// The text must have a `[security]` section naming its mode: a node never runs without
    /// authentication because a section was forgotten (`mode = "none"` says so on purpose).
    pub fn from_toml(text: &str) -> Result<NodeConfig, ConfigError> {
        let config: NodeConfig = toml::from_str(text)?;
        let table: toml::Table = toml::from_str(text)?;
        if !table.contains_key("security") {
            return Err(ConfigError::Invalid(
                "no [security] section: add `[security]` with `mode = \"curve\"` and \
                 `secret_key_file` (make one with `zmesh keygen`), or `mode = \"none\"` to \
                 trust the network"
                    .into(),
            ));
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks ranges that serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if !Name::fits(self.rid.len()) {
            return bad(format!("rid must be 1..=255 bytes, got {}", self.rid.len()));
        }
        if self.delivery_high_water == 0 {
            return bad("delivery_high_water must be at least 1".into());
        }
        if self.max_frame_size < MIN_MAX_FRAME_SIZE || self.max_frame_size > i64::MAX as u64 {
            return bad(format!(
                "max_frame_size must be at least {MIN_MAX_FRAME_SIZE} bytes, got {}",
                self.max_frame_size
            ));
        }
        if self.max_unadmitted == 0 {
            return bad("max_unadmitted must be at least 1".into());
        }
        if self
            .security_identity
            .as_ref()
            .is_some_and(|s| !Label::fits(s.len()))
        {
            return bad("security_identity must be at most 255 bytes".into());
        }
        let most = Memberships::MAX - handshake::EXTENSION_ROOM;
        if self.memberships.len() > most {
            return bad(format!(
                "{} memberships; a node holds at most {most}",
                self.memberships.len()
            ));
        }
        for m in &self.memberships {
            if !Name::fits(m.channel.len()) {
                return bad(format!(
                    "channel name {:?} must be 1..=255 bytes",
                    m.channel
                ));
            }
            if handshake::is_extension_entry(&m.channel) {
                return bad(format!(
                    "channel name {:?} begins with byte 00, which the wire keeps for \
                     extension entries (WIRE.md §8.1)",
                    m.channel
                ));
            }
        }
        let mut endpoints: Vec<&str> = Vec::new();
        if let Some(rm) = &self.route_mesh {
            endpoints.extend([rm.application.as_str(), rm.completion.as_str()]);
        }
        endpoints.extend(self.server.iter().map(|e| e.endpoint.as_str()));
        endpoints.extend(self.publisher.iter().map(|e| e.endpoint.as_str()));
        for p in &self.peers {
            if !Name::fits(p.rid.len()) {
                return bad(format!("peer rid {:?} must be 1..=255 bytes", p.rid));
            }
            if p.rid == self.rid {
                return bad(format!("peer {:?} is this node itself", p.rid));
            }
            endpoints.extend([p.application.as_str(), p.completion.as_str()]);
        }
        for s in &self.servers {
            if !Name::fits(s.channel.len()) {
                return bad(format!(
                    "server channel {:?} must be 1..=255 bytes",
                    s.channel
                ));
            }
            endpoints.push(&s.endpoint);
        }
        endpoints.extend(self.subscriptions.iter().map(|e| e.endpoint.as_str()));
        if let Some(d) = &self.discovery {
            if let Err(e) = StoreUrl::parse(&d.store) {
                return bad(format!("discovery: {e}"));
            }
            let wildcard = d.host == "*" || d.host == "0.0.0.0" || d.host == "::";
            let advertised = |kind| {
                d.advertise
                    .as_ref()
                    .and_then(|a| a.host_for(kind))
                    .is_some()
            };
            let kinds_advertised = d.bind.iter().all(|b| {
                advertised(match b {
                    AutoBind::RouteMesh => EndpointKind::RouteMesh,
                    AutoBind::Server => EndpointKind::Server,
                    AutoBind::Publisher => EndpointKind::Publisher,
                })
            });
            let host_ok = !d.host.is_empty() && !d.host.contains('/');
            if !host_ok || (wildcard && !kinds_advertised) {
                return bad(format!(
                    "discovery host {:?} must be an address peers can dial, or a wildcard \
                     with [discovery.advertise] naming the host they dial",
                    d.host
                ));
            }
            if let Some(a) = &d.advertise {
                a.validate().or_else(|e| bad(format!("discovery: {e}")))?;
            }
            if let Err(e) = d.validate_store_access() {
                return bad(format!("discovery: {e}"));
            }
        }
        self.validate_security()?;
        endpoints.extend(self.security.endpoint_keys.keys().map(String::as_str));
        for e in endpoints {
            check_endpoint(e).or_else(|why| bad(format!("endpoint {e:?}: {why}")))?;
        }
        Ok(())
    }

    /// `[security]`: in `none` mode no CURVE key is set; in `curve` mode the key file is
    /// named and every manually dialled endpoint has the key expected there.
    fn validate_security(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(format!("security: {m}")));
        let s = &self.security;
        if s.mode == SecurityMode::None {
            if s.secret_key_file.is_some()
                || !s.allow.is_empty()
                || s.allow_dir.is_some()
                || !s.endpoint_keys.is_empty()
            {
                return bad(
                    "secret_key_file, allow, allow_dir and endpoint_keys apply only with \
                     mode = \"curve\""
                        .into(),
                );
            }
            return Ok(());
        }
        if s.secret_key_file.is_none() {
            return bad(
                "mode = \"curve\" needs secret_key_file (make one with `zmesh keygen --out \
                 FILE`)"
                    .into(),
            );
        }
        let key = |ep: &str| {
            s.endpoint_key(ep).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "security: no key in [security.endpoint_keys] for {ep:?}: with CURVE this \
                     node must know the public key of every endpoint it dials"
                ))
            })
        };
        for p in &self.peers {
            let (a, c) = (key(&p.application)?, key(&p.completion)?);
            if a != c {
                return bad(format!(
                    "peer {:?}: its two lanes are one node and must have the same key",
                    p.rid
                ));
            }
            if p.security_identity
                .as_ref()
                .is_some_and(|i| *i != a.to_z85())
            {
                return bad(format!(
                    "peer {:?}: with CURVE its security identity is its public key; \
                     security_identity differs from the key of its endpoints",
                    p.rid
                ));
            }
        }
        for e in self.servers.iter().map(|s| &s.endpoint) {
            key(e)?;
        }
        for e in self.subscriptions.iter().map(|s| &s.endpoint) {
            key(e)?;
        }
        Ok(())
    }

    /// This configuration with the sections that [`DiscoveryConfig::bind`] names and the file
    /// leaves out filled in with ephemeral ports (`tcp://HOST:*`); unchanged without
    /// `[discovery]`. The node publishes the ports it was given.
    pub fn with_discovery_binds(mut self) -> NodeConfig {
        let Some(d) = self.discovery.clone() else {
            return self;
        };
        let any = if d.host.contains(':') {
            format!("tcp://[{}]:*", d.host)
        } else {
            format!("tcp://{}:*", d.host)
        };
        for b in &d.bind {
            match b {
                AutoBind::RouteMesh if self.route_mesh.is_none() => {
                    self.route_mesh = Some(RouteMeshBind {
                        application: any.clone(),
                        completion: any.clone(),
                    });
                }
                AutoBind::Server if self.server.is_none() => {
                    self.server = Some(Endpoint {
                        endpoint: any.clone(),
                    });
                }
                AutoBind::Publisher if self.publisher.is_none() => {
                    self.publisher = Some(Endpoint {
                        endpoint: any.clone(),
                    });
                }
                _ => {}
            }
        }
        self
    }

    /// The security identity this node announces.
    pub fn security_identity(&self) -> &str {
        self.security_identity.as_deref().unwrap_or(&self.rid)
    }
}

#[cfg(test)]
mod tests;
