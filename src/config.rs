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
//! ```
//!
//! Manual and automatic mode combine: `[[peers]]`, `[[servers]]` and `[[subscriptions]]` are
//! dialled as written, and a descriptor of the same peer fences them (MISSION F3): its RID,
//! security identity and generation are required of the peer whatever the manual entry says.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::proto::handshake::Membership;

/// Configuration of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// Automatic discovery through a descriptor store (MISSION D1, D2; see
/// [`crate::runtime::store`] and [`crate::proto::discovery`]).
///
/// The node publishes its descriptor (RID, generation, security identity, memberships and the
/// endpoints it bound) under an owner lease, and from the other nodes' descriptors dials:
/// RouteMesh peers (never an Object Client pair without a Server membership, MISSION T4),
/// ClientServer servers of the channels it is an Object Client of, and every publisher with a
/// SUB socket of its own (T3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryConfig {
    /// The store: `sqlite:///path/mesh.db` (embedded, one host only) or
    /// `etcd://host:port[,host:port…][/prefix]` (etcd v3, many hosts).
    pub store: String,
    /// The sections this node binds by itself when they are absent from the file, each on an
    /// ephemeral tcp port of [`DiscoveryConfig::host`], and publishes in its descriptor:
    /// `route_mesh`, `server`, `publisher`. Default `["route_mesh"]`.
    #[serde(default = "default_auto_bind")]
    pub bind: Vec<AutoBind>,
    /// The address the automatically bound endpoints listen on, which peers dial: it must be
    /// reachable by them (not `*` or `0.0.0.0`). Default `127.0.0.1`.
    #[serde(default = "default_discovery_host")]
    pub host: String,
    /// Dial the RouteMesh peers found in the store. Default true.
    #[serde(default = "default_true")]
    pub route_mesh: bool,
    /// Dial the ClientServer servers found in the store, for the channels this node is an
    /// `object_client` of. Default true.
    #[serde(default = "default_true")]
    pub client_server: bool,
    /// Subscribe to every publisher found in the store, one SUB socket each. Default true.
    #[serde(default = "default_true")]
    pub subscribe: bool,
}

/// A section that [`DiscoveryConfig::bind`] binds automatically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoBind {
    /// `[route_mesh]`: both lanes.
    RouteMesh,
    /// `[server]`: the ClientServer endpoint.
    Server,
    /// `[publisher]`: the fanout endpoint.
    Publisher,
}

impl DiscoveryConfig {
    /// Discovery through `store` with every default.
    pub fn new(store: impl Into<String>) -> DiscoveryConfig {
        DiscoveryConfig {
            store: store.into(),
            bind: default_auto_bind(),
            host: default_discovery_host(),
            route_mesh: true,
            client_server: true,
            subscribe: true,
        }
    }
}

fn default_auto_bind() -> Vec<AutoBind> {
    vec![AutoBind::RouteMesh]
}

fn default_discovery_host() -> String {
    "127.0.0.1".into()
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
        }
    }
}

/// The two bound RouteMesh lanes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteMeshBind {
    /// Application lane endpoint (`tcp://host:port` or `ipc://path`).
    pub application: String,
    /// Completion lane endpoint.
    pub completion: String,
}

/// One endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// `tcp://host:port` or `ipc://path`.
    pub endpoint: String,
}

/// A RouteMesh peer to dial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The RID the peer must present.
    pub rid: String,
    /// The peer's Application lane endpoint.
    pub application: String,
    /// The peer's Completion lane endpoint.
    pub completion: String,
    /// The lifecycle generation the peer must present; absent or 0 accepts any run.
    #[serde(default)]
    pub generation: Option<u64>,
    /// The security identity the peer must present; absent accepts any.
    #[serde(default)]
    pub security_identity: Option<String>,
    /// Whether calls issued together to this peer travel in one BATCH (MISSION K5; default
    /// true). Turn it off only for a peer built before BATCH existed: it cannot unpack one,
    /// and there is no negotiation.
    #[serde(default = "default_true")]
    pub batch_calls: bool,
}

/// A ClientServer server to dial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The ChannelName the server serves.
    pub channel: String,
    /// The server's endpoint.
    pub endpoint: String,
    /// The RID the server must present; absent accepts any.
    #[serde(default)]
    pub rid: Option<String>,
    /// Whether calls issued together to this server travel in one BATCH (MISSION K5; default
    /// true). Turn it off only for a server built before BATCH existed.
    #[serde(default = "default_true")]
    pub batch_calls: bool,
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

    /// Reads and validates a TOML file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<NodeConfig, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        NodeConfig::from_toml(&text)
    }

    /// Parses and validates TOML text.
    pub fn from_toml(text: &str) -> Result<NodeConfig, ConfigError> {
        let config: NodeConfig = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks ranges that serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.rid.is_empty() || self.rid.len() > 255 {
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
            .is_some_and(|s| s.len() > 255)
        {
            return bad("security_identity must be at most 255 bytes".into());
        }
        for m in &self.memberships {
            if m.channel.is_empty() || m.channel.len() > 255 {
                return bad(format!(
                    "channel name {:?} must be 1..=255 bytes",
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
            if p.rid.is_empty() || p.rid.len() > 255 {
                return bad(format!("peer rid {:?} must be 1..=255 bytes", p.rid));
            }
            if p.rid == self.rid {
                return bad(format!("peer {:?} is this node itself", p.rid));
            }
            endpoints.extend([p.application.as_str(), p.completion.as_str()]);
        }
        for s in &self.servers {
            if s.channel.is_empty() || s.channel.len() > 255 {
                return bad(format!(
                    "server channel {:?} must be 1..=255 bytes",
                    s.channel
                ));
            }
            endpoints.push(&s.endpoint);
        }
        endpoints.extend(self.subscriptions.iter().map(|e| e.endpoint.as_str()));
        if let Some(d) = &self.discovery {
            if let Err(e) = crate::runtime::store::StoreUrl::parse(&d.store) {
                return bad(format!("discovery: {e}"));
            }
            let host_ok =
                !d.host.is_empty() && d.host != "*" && d.host != "0.0.0.0" && !d.host.contains('/');
            if !host_ok {
                return bad(format!(
                    "discovery host {:?} must be an address peers can dial",
                    d.host
                ));
            }
        }
        for e in endpoints {
            if !(e.starts_with("tcp://") || e.starts_with("ipc://")) {
                return bad(format!(
                    "endpoint {e:?}: only tcp:// and ipc:// are supported"
                ));
            }
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
        let any = format!("tcp://{}:*", d.host);
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
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let text = include_str!("config.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .skip_while(|l| !l.starts_with("```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
        let c = NodeConfig::from_toml(&text).expect("documented example parses");
        assert_eq!(c.rid, "node-a");
        assert_eq!(c.peers.len(), 1);
        assert_eq!(c.servers[0].channel, "orders");
        assert_eq!(c.subscriptions.len(), 1);
        let d = c.discovery.as_ref().expect("discovery");
        assert_eq!(d, &DiscoveryConfig::new("sqlite:///tmp/zmesh-mesh.db"));
    }

    #[test]
    fn discovery_binds_absent_sections_on_ephemeral_ports() {
        let c = NodeConfig::from_toml(
            "rid = \"a\"\n[discovery]\nstore = \"sqlite:///tmp/x.db\"\n\
             bind = [\"route_mesh\", \"publisher\"]\n[publisher]\nendpoint = \"ipc:///tmp/p\"\n",
        )
        .expect("parses")
        .with_discovery_binds();
        let rm = c.route_mesh.expect("bound");
        assert_eq!(rm.application, "tcp://127.0.0.1:*");
        assert_eq!(rm.completion, "tcp://127.0.0.1:*");
        assert_eq!(c.publisher.expect("kept").endpoint, "ipc:///tmp/p");
        assert!(c.server.is_none());
        for bad in [
            "rid = \"a\"\n[discovery]\nstore = \"redis://x\"\n",
            "rid = \"a\"\n[discovery]\nstore = \"sqlite:///x\"\nhost = \"0.0.0.0\"\n",
            "rid = \"a\"\n[discovery]\nstore = \"sqlite:///x\"\nbind = [\"peers\"]\n",
        ] {
            assert!(NodeConfig::from_toml(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_unknown_keys_and_bad_endpoints() {
        assert!(NodeConfig::from_toml("rid = \"a\"\nprobe_interval = 1").is_err());
        let e = NodeConfig::from_toml("rid = \"a\"\n[publisher]\nendpoint = \"udp://x\"");
        assert!(matches!(e, Err(ConfigError::Invalid(_))));
        assert!(matches!(
            NodeConfig::from_toml("rid = \"\""),
            Err(ConfigError::Invalid(_))
        ));
    }
}
