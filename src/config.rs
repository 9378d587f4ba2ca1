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
//! ```

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
        for e in endpoints {
            if !(e.starts_with("tcp://") || e.starts_with("ipc://")) {
                return bad(format!(
                    "endpoint {e:?}: only tcp:// and ipc:// are supported"
                ));
            }
        }
        Ok(())
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
