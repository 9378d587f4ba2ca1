//! The endpoints a node binds (`[route_mesh]`, `[server]`, `[publisher]`) and the links it
//! dials (`[[peers]]`, `[[servers]]`, `[[subscriptions]]`), and the endpoint syntax check.

use serde::{Deserialize, Serialize};

use super::default_true;

/// The two bound RouteMesh lanes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteMeshBind {
    /// Application lane endpoint (`tcp://host:port` or `ipc://path`).
    pub application: String,
    /// Completion lane endpoint.
    pub completion: String,
}

/// One endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Endpoint {
    /// `tcp://host:port` or `ipc://path`.
    pub endpoint: String,
}

/// A RouteMesh peer to dial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
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
#[non_exhaustive]
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

impl RouteMeshBind {
    /// The two RouteMesh lanes bound at `application` and `completion` (`tcp://host:port` or
    /// `ipc://path`, checked when the node starts).
    pub fn new(application: impl Into<String>, completion: impl Into<String>) -> RouteMeshBind {
        RouteMeshBind {
            application: application.into(),
            completion: completion.into(),
        }
    }
}

impl Endpoint {
    /// The endpoint `endpoint` (`tcp://host:port` or `ipc://path`, checked when the node
    /// starts).
    pub fn new(endpoint: impl Into<String>) -> Endpoint {
        Endpoint {
            endpoint: endpoint.into(),
        }
    }
}

impl PeerConfig {
    /// The RouteMesh peer `rid` at its `application` and `completion` lane endpoints, any
    /// generation and security identity, calls batched (the file's defaults).
    pub fn new(
        rid: impl Into<String>,
        application: impl Into<String>,
        completion: impl Into<String>,
    ) -> PeerConfig {
        PeerConfig {
            rid: rid.into(),
            application: application.into(),
            completion: completion.into(),
            generation: None,
            security_identity: None,
            batch_calls: true,
        }
    }

    /// This peer, accepted only in lifecycle generation `generation` (0 accepts any run;
    /// see [`PeerConfig::generation`](field@PeerConfig::generation)).
    pub fn generation(mut self, generation: u64) -> PeerConfig {
        self.generation = Some(generation);
        self
    }

    /// This peer, accepted only with the security identity `identity`.
    pub fn security_identity(mut self, identity: impl Into<String>) -> PeerConfig {
        self.security_identity = Some(identity.into());
        self
    }

    /// This peer with calls issued together batched (`true`, the default) or each sent alone
    /// (see [`PeerConfig::batch_calls`](field@PeerConfig::batch_calls)).
    pub fn batch_calls(mut self, batch_calls: bool) -> PeerConfig {
        self.batch_calls = batch_calls;
        self
    }
}

impl ServerConfig {
    /// The server of `channel` at `endpoint`, any RID, calls batched (the file's defaults).
    pub fn new(channel: impl Into<String>, endpoint: impl Into<String>) -> ServerConfig {
        ServerConfig {
            channel: channel.into(),
            endpoint: endpoint.into(),
            rid: None,
            batch_calls: true,
        }
    }

    /// This server, accepted only if it presents RID `rid`.
    pub fn rid(mut self, rid: impl Into<String>) -> ServerConfig {
        self.rid = Some(rid.into());
        self
    }

    /// This server with calls issued together batched (`true`, the default) or each sent
    /// alone (see [`ServerConfig::batch_calls`](field@ServerConfig::batch_calls)).
    pub fn batch_calls(mut self, batch_calls: bool) -> ServerConfig {
        self.batch_calls = batch_calls;
        self
    }
}

/// Checks an endpoint as libzmq would read it, so that nothing is silently misread: a tcp
/// port above 65535 would be taken modulo 65536 (`tcp://127.0.0.1:99999` binds port 34463).
/// A tcp endpoint is `tcp://host:port` (the host may be `*`, an interface name or a
/// bracketed IPv6 address; the port a number up to 65535, or `*` for an ephemeral one); an
/// ipc endpoint is `ipc://path`.
pub(super) fn check_endpoint(endpoint: &str) -> Result<(), String> {
    if let Some(path) = endpoint.strip_prefix("ipc://") {
        return if path.is_empty() {
            Err("an ipc endpoint names a path: ipc:///run/zmesh/a.sock".into())
        } else {
            Ok(())
        };
    }
    let Some(address) = endpoint.strip_prefix("tcp://") else {
        return Err("only tcp:// and ipc:// are supported".into());
    };
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err("a tcp endpoint is tcp://host:port".into());
    };
    if host.is_empty() || host == "[]" {
        return Err("a tcp endpoint names a host (or * for every interface)".into());
    }
    let port_ok = port == "*"
        || (!port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| p <= 65_535));
    if !port_ok {
        return Err(format!(
            "port {port:?} is not a tcp port (0..=65535, or * for an ephemeral one)"
        ));
    }
    Ok(())
}
