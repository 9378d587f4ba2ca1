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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::proto::handshake::Membership;
use crate::proto::security::PublicKey;

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
    /// Transport security: CURVE with an allow-list, or none. A configuration
    /// file must say which (`[security] mode = "curve"` or `mode = "none"`, see
    /// [`NodeConfig::from_toml`]); the Rust default is [`SecurityMode::None`], which a node
    /// warns about when it starts.
    #[serde(default)]
    pub security: SecurityConfig,
}

/// `[security]`: how this node authenticates its peers and encrypts its traffic.
///
/// With [`SecurityMode::Curve`] every socket runs CurveZMQ (RFC 26): every bound endpoint
/// (RouteMesh lanes, ClientServer server, fanout publisher) is a CURVE server that admits
/// only clients whose public key is on the allow-list (`allow`, `allow_dir`), and every
/// dialled endpoint (peers, servers, subscriptions) is a CURVE client that accepts only the
/// server holding the key this node expects there (`endpoint_keys`, or the key a discovery
/// descriptor carries). A peer's security identity is then its public key (Z85), proven by
/// the transport. With [`SecurityMode::None`] nothing is authenticated or encrypted: the
/// network is trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityConfig {
    /// `"curve"` or `"none"`. Required in a `[security]` section.
    pub mode: SecurityMode,
    /// CURVE: this node's key pair, as `zmesh keygen` writes it (TOML, Z85 keys; or the raw
    /// 64 bytes public key then secret key). Required with `mode = "curve"`. A relative path
    /// in a file read by [`NodeConfig::from_file`] is relative to that file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_file: Option<PathBuf>,
    /// CURVE: public keys (Z85) of the clients the bound endpoints admit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<PublicKey>,
    /// CURVE: a directory of key files whose public keys the bound endpoints admit too (each
    /// file: Z85 keys, one a line, `#` comments; or a `zmesh keygen` key file). Read at start,
    /// again on SIGHUP (`zmesh node`) or [`crate::runtime::Node::reload_allow_list`], and
    /// whenever its files change (looked at every second). Relative as `secret_key_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_dir: Option<PathBuf>,
    /// CURVE: the public key of the node listening on each endpoint this node dials
    /// (`[[peers]]` lanes, `[[servers]]`, `[[subscriptions]]`), by endpoint. Every such
    /// endpoint needs one; a peer's two lanes name the same key. Discovered endpoints take
    /// the key from their descriptor instead.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoint_keys: BTreeMap<String, PublicKey>,
}

/// The transport security of a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityMode {
    /// No authentication, no encryption: anyone who reaches an endpoint may claim any
    /// identity, and the traffic can be read and altered on the wire. For development and
    /// trusted networks only; a node in this mode warns when it starts.
    #[default]
    None,
    /// CurveZMQ on every socket, with the allow-list and the expected keys of
    /// [`SecurityConfig`].
    Curve,
}

impl SecurityMode {
    /// `"none"` or `"curve"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SecurityMode::None => "none",
            SecurityMode::Curve => "curve",
        }
    }
}

impl SecurityConfig {
    /// CURVE with the key pair in `secret_key_file`, an empty allow-list and no expected
    /// keys yet.
    pub fn curve(secret_key_file: impl Into<PathBuf>) -> SecurityConfig {
        SecurityConfig {
            mode: SecurityMode::Curve,
            secret_key_file: Some(secret_key_file.into()),
            ..SecurityConfig::default()
        }
    }

    /// Makes relative `secret_key_file` and `allow_dir` paths relative to `dir` (what
    /// [`NodeConfig::from_file`] does with the file's directory).
    pub fn resolve_paths(&mut self, dir: &Path) {
        for p in [&mut self.secret_key_file, &mut self.allow_dir]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }

    /// The key expected of the node listening on `endpoint` (CURVE), if configured.
    pub fn endpoint_key(&self, endpoint: &str) -> Option<PublicKey> {
        self.endpoint_keys.get(endpoint).copied()
    }
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
    /// The address the automatically bound endpoints listen on. Without
    /// [`DiscoveryConfig::advertise`] it is also the address peers dial, so it must be
    /// reachable by them (not `*`, `0.0.0.0` or `::`); with an advertised host it may be a
    /// wildcard (every interface). Default `127.0.0.1`.
    #[serde(default = "default_discovery_host")]
    pub host: String,
    /// `[discovery.advertise]`: the hosts other nodes dial, where they are not the ones the
    /// endpoints are bound on (a wildcard bind, an interface known by another name). Absent:
    /// every endpoint is published as it is bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise: Option<AdvertiseConfig>,
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
    /// `[discovery.tls]`, etcd only: reach every etcd member over TLS. Absent: plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<EtcdTlsConfig>,
    /// `[discovery.auth]`, etcd only: authenticate with etcd's user/password authentication.
    /// Absent: no authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<EtcdAuthConfig>,
}

/// `[discovery.advertise]`: the host published in the descriptor for each kind of tcp
/// endpoint, in place of the host it is bound on; the bound port is kept (an ephemeral one
/// included). ipc endpoints are published as they are. Each kind takes its own host if set,
/// else `host`, else the bound one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdvertiseConfig {
    /// The host (a DNS name or an IP address) for every kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The host for both RouteMesh lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_mesh: Option<String>,
    /// The host for the ClientServer endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The host for the fanout publisher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<String>,
}

/// A kind of endpoint a descriptor publishes ([`AdvertiseConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointKind {
    /// A RouteMesh lane.
    RouteMesh,
    /// The ClientServer endpoint.
    Server,
    /// The fanout publisher.
    Publisher,
}

impl AdvertiseConfig {
    /// The host advertised for endpoints of `kind`, if any.
    pub fn host_for(&self, kind: EndpointKind) -> Option<&str> {
        let own = match kind {
            EndpointKind::RouteMesh => &self.route_mesh,
            EndpointKind::Server => &self.server,
            EndpointKind::Publisher => &self.publisher,
        };
        own.as_deref().or(self.host.as_deref())
    }

    /// `bound` (an endpoint of `kind` as bound) as it is published.
    pub fn advertised(&self, kind: EndpointKind, bound: &str) -> String {
        match self.host_for(kind) {
            Some(host) => crate::proto::discovery::descriptor::with_host(bound, host),
            None => bound.to_owned(),
        }
    }

    fn validate(&self) -> Result<(), String> {
        let hosts = [&self.host, &self.route_mesh, &self.server, &self.publisher];
        for h in hosts.into_iter().flatten() {
            let probe = crate::proto::discovery::descriptor::with_host("tcp://x:1", h);
            let bad = h.is_empty()
                || h.contains('/')
                || h.contains(']')
                || h.contains('[')
                || crate::proto::discovery::descriptor::host_locality(&probe)
                    == Some("a wildcard address");
            if bad {
                return Err(format!(
                    "[discovery.advertise]: {h:?} is not a host other nodes can dial"
                ));
            }
        }
        Ok(())
    }
}

/// `[discovery.tls]`: TLS to the etcd members. A relative path in a file read by
/// [`NodeConfig::from_file`] is relative to that file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdTlsConfig {
    /// The CA certificate(s) (PEM) that signed the members' certificates. Required.
    pub ca_file: PathBuf,
    /// This node's client certificate (PEM), for members that require one
    /// (`--client-cert-auth`); with `key_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The private key (PEM) of `cert_file`; with `cert_file`. Never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The name the members' certificates must carry. Default: the host of each member's
    /// endpoint in the store URL (a DNS name, or an IP address in the certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// `[discovery.auth]`: etcd user/password authentication. The password comes from a file or
/// an environment variable (exactly one of the two), never from the configuration itself,
/// and is never logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdAuthConfig {
    /// The etcd user.
    pub user: String,
    /// A file holding the password (its first line; a trailing newline is not part of it).
    /// Relative as [`EtcdTlsConfig::ca_file`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// The name of an environment variable holding the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
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
            advertise: None,
            tls: None,
            auth: None,
        }
    }

    /// Makes relative certificate, key and password file paths relative to `dir` (what
    /// [`NodeConfig::from_file`] does with the file's directory).
    pub fn resolve_paths(&mut self, dir: &Path) {
        let tls = self.tls.iter_mut().flat_map(|t| {
            [
                Some(&mut t.ca_file),
                t.cert_file.as_mut(),
                t.key_file.as_mut(),
            ]
            .into_iter()
            .flatten()
        });
        let auth = self
            .auth
            .iter_mut()
            .filter_map(|a| a.password_file.as_mut());
        for p in tls.chain(auth) {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }

    /// `[discovery.tls]` and `[discovery.auth]`: for an etcd store only, each setting
    /// complete.
    fn validate_store_access(&self) -> Result<(), String> {
        let etcd = matches!(StoreUrl::parse(&self.store), Ok(StoreUrl::Etcd { .. }));
        if !etcd && (self.tls.is_some() || self.auth.is_some()) {
            return Err("[discovery.tls] and [discovery.auth] apply to an etcd store only".into());
        }
        if let Some(t) = &self.tls {
            if t.cert_file.is_some() != t.key_file.is_some() {
                return Err("[discovery.tls]: cert_file and key_file go together".into());
            }
        }
        if let Some(a) = &self.auth {
            if a.user.is_empty() {
                return Err("[discovery.auth]: user must not be empty".into());
            }
            if a.password_file.is_some() == a.password_env.is_some() {
                return Err("[discovery.auth]: give one of password_file and password_env".into());
            }
        }
        Ok(())
    }
}

/// A parsed [`DiscoveryConfig::store`] URL: which store backend, and where. It lives here,
/// beside the configuration that names it, so that checking a configuration needs nothing of
/// the runtime; [`crate::runtime::store::open`] opens what it names.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `sqlite://PATH` (`sqlite:///abs/path.db`, or a relative path after `sqlite://`).
    Sqlite(PathBuf),
    /// `etcd://host:port[,host:port…][/prefix]`.
    Etcd {
        /// `host:port` of each etcd member.
        endpoints: Vec<String>,
        /// Key prefix of this mesh (default `/zmesh/`), always ending in `/`.
        prefix: String,
    },
}

/// A store URL that is not one this build can open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("store URL {url:?}: {reason}")]
pub struct StoreUrlError {
    /// The URL.
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}

impl StoreUrl {
    /// Parses a store URL.
    ///
    /// # Errors
    /// [`StoreUrlError`] for anything but `sqlite://PATH` and
    /// `etcd://host:port[,host:port…][/prefix]`.
    pub fn parse(url: &str) -> Result<StoreUrl, StoreUrlError> {
        let bad = |reason: &str| StoreUrlError {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(bad("no file path after sqlite://"));
            }
            return Ok(StoreUrl::Sqlite(PathBuf::from(path)));
        }
        if let Some(rest) = url.strip_prefix("etcd://") {
            let (hosts, prefix) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/zmesh/"),
            };
            let endpoints: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(str::to_owned)
                .collect();
            if endpoints.is_empty() || endpoints.iter().any(|h| !h.contains(':')) {
                return Err(bad("expected etcd://host:port[,host:port…][/prefix]"));
            }
            let mut prefix = prefix.to_owned();
            if !prefix.ends_with('/') {
                prefix.push('/');
            }
            return Ok(StoreUrl::Etcd { endpoints, prefix });
        }
        Err(bad("expected sqlite://PATH or etcd://HOST:PORT"))
    }
}

impl StoreUrl {
    /// Whether other hosts may read this store: an etcd with a member that is not on a
    /// loopback address. SQLite is one host's file; an etcd whose every member is on
    /// loopback serves this host only.
    pub fn is_shared_across_hosts(&self) -> bool {
        match self {
            StoreUrl::Sqlite(_) => false,
            StoreUrl::Etcd { endpoints, .. } => endpoints.iter().any(|e| {
                let probe = format!("tcp://{e}");
                crate::proto::discovery::descriptor::host_locality(&probe)
                    != Some("a loopback address")
            }),
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
            security: SecurityConfig::default(),
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
}

/// Checks an endpoint as libzmq would read it, so that nothing is silently misread: a tcp
/// port above 65535 would be taken modulo 65536 (`tcp://127.0.0.1:99999` binds port 34463).
/// A tcp endpoint is `tcp://host:port` (the host may be `*`, an interface name or a
/// bracketed IPv6 address; the port a number up to 65535, or `*` for an ephemeral one); an
/// ipc endpoint is `ipc://path`.
fn check_endpoint(endpoint: &str) -> Result<(), String> {
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
mod tests {
    use super::*;

    #[test]
    fn parses_store_urls() {
        assert_eq!(
            StoreUrl::parse("sqlite:///var/lib/zmesh/mesh.db"),
            Ok(StoreUrl::Sqlite("/var/lib/zmesh/mesh.db".into()))
        );
        assert_eq!(
            StoreUrl::parse("sqlite://mesh.db"),
            Ok(StoreUrl::Sqlite("mesh.db".into()))
        );
        assert_eq!(
            StoreUrl::parse("etcd://127.0.0.1:2379"),
            Ok(StoreUrl::Etcd {
                endpoints: vec!["127.0.0.1:2379".into()],
                prefix: "/zmesh/".into()
            })
        );
        assert_eq!(
            StoreUrl::parse("etcd://a:1,b:2/plant-7"),
            Ok(StoreUrl::Etcd {
                endpoints: vec!["a:1".into(), "b:2".into()],
                prefix: "/plant-7/".into()
            })
        );
        for bad in [
            "sqlite://",
            "etcd://",
            "etcd://nohost",
            "redis://x",
            "/tmp/x.db",
        ] {
            assert!(StoreUrl::parse(bad).is_err(), "{bad}");
        }
    }

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
             bind = [\"route_mesh\", \"publisher\"]\n[publisher]\nendpoint = \"ipc:///tmp/p\"\n\
             [security]\nmode = \"none\"\n",
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

    /// `[security]` is required in a file; CURVE needs its key file and the key of
    /// every dialled endpoint, the same for both lanes of a peer; `none` takes no keys.
    #[test]
    fn security_section_is_explicit_and_curve_needs_every_dialled_key() {
        let k1 = PublicKey::from_bytes([1; 32]).to_z85();
        let k2 = PublicKey::from_bytes([2; 32]).to_z85();
        let peer = "[[peers]]\nrid = \"b\"\napplication = \"tcp://127.0.0.1:1\"\n\
                    completion = \"tcp://127.0.0.1:2\"\n";
        let curve = |keys: &str| {
            format!(
                "rid = \"a\"\n{peer}[security]\nmode = \"curve\"\nsecret_key_file = \"a.key\"\n\
                 [security.endpoint_keys]\n{keys}"
            )
        };
        let both = format!("\"tcp://127.0.0.1:1\" = \"{k1}\"\n\"tcp://127.0.0.1:2\" = \"{k1}\"\n");
        let c = NodeConfig::from_toml(&curve(&both)).expect("curve with both lane keys");
        assert_eq!(c.security.mode, SecurityMode::Curve);
        assert_eq!(
            c.security
                .endpoint_key("tcp://127.0.0.1:2")
                .map(|k| k.to_z85()),
            Some(k1.clone())
        );
        let one = format!("\"tcp://127.0.0.1:1\" = \"{k1}\"\n");
        let differ =
            format!("\"tcp://127.0.0.1:1\" = \"{k1}\"\n\"tcp://127.0.0.1:2\" = \"{k2}\"\n");
        for bad in [
            format!("rid = \"a\"\n{peer}"),
            "rid = \"a\"\n[security]\nmode = \"curve\"\n".to_owned(),
            format!("rid = \"a\"\n[security]\nmode = \"none\"\nallow = [\"{k1}\"]\n"),
            "rid = \"a\"\n[security]\nmode = \"sometimes\"\n".to_owned(),
            curve(&one),
            curve(&differ),
            curve(&both).replace(
                "[security.endpoint_keys]",
                "[security.endpoint_keys]\n\"udp://x\" = \"k\"",
            ),
        ] {
            assert!(NodeConfig::from_toml(&bad).is_err(), "{bad}");
        }
        let mut c = c;
        c.security.resolve_paths(Path::new("/etc/zmesh"));
        assert_eq!(c.security.secret_key_file, Some("/etc/zmesh/a.key".into()));
    }

    /// MISSION H1: `[discovery.tls]` and `[discovery.auth]` are for etcd, complete, and their
    /// file paths are relative to the configuration file.
    #[test]
    fn etcd_tls_and_auth_settings_are_checked_and_resolved() {
        let base = "rid = \"a\"\n[security]\nmode = \"none\"\n[discovery]\n\
                    store = \"etcd://10.0.0.1:2379,10.0.0.2:2379\"\n";
        let text = format!(
            "{base}[discovery.tls]\nca_file = \"ca.pem\"\ncert_file = \"/etc/zmesh/a.pem\"\n\
             key_file = \"a-key.pem\"\n[discovery.auth]\nuser = \"zmesh\"\n\
             password_file = \"secret/etcd\"\n"
        );
        let mut d = NodeConfig::from_toml(&text)
            .expect("parses")
            .discovery
            .expect("discovery");
        d.resolve_paths(Path::new("/srv/node"));
        let tls = d.tls.clone().expect("tls");
        assert_eq!(tls.ca_file, PathBuf::from("/srv/node/ca.pem"));
        assert_eq!(tls.cert_file, Some("/etc/zmesh/a.pem".into()));
        assert_eq!(tls.key_file, Some("/srv/node/a-key.pem".into()));
        let auth = d.auth.clone().expect("auth");
        assert_eq!(auth.password_file, Some("/srv/node/secret/etcd".into()));
        let env =
            format!("{base}[discovery.auth]\nuser = \"zmesh\"\npassword_env = \"ETCD_PASSWORD\"\n");
        assert!(NodeConfig::from_toml(&env).is_ok());
        for bad in [
            // Not for SQLite.
            "rid = \"a\"\n[security]\nmode = \"none\"\n[discovery]\nstore = \"sqlite:///x\"\n\
             [discovery.tls]\nca_file = \"ca.pem\"\n"
                .to_owned(),
            format!("{base}[discovery.tls]\ncert_file = \"a.pem\"\n"),
            format!("{base}[discovery.tls]\nca_file = \"c\"\ncert_file = \"a.pem\"\n"),
            format!("{base}[discovery.auth]\nuser = \"zmesh\"\n"),
            format!(
                "{base}[discovery.auth]\nuser = \"zmesh\"\npassword_env = \"P\"\n\
                 password_file = \"p\"\n"
            ),
            format!("{base}[discovery.auth]\nuser = \"\"\npassword_env = \"P\"\n"),
            // A password is never written in the file itself.
            format!("{base}[discovery.auth]\nuser = \"zmesh\"\npassword = \"hunter2\"\n"),
        ] {
            assert!(NodeConfig::from_toml(&bad).is_err(), "{bad}");
        }
    }

    /// MISSION H1: a node may bind on every interface when `[discovery.advertise]` names the
    /// host peers dial, for every kind it binds; an advertised host is never a wildcard; a
    /// store is shared across hosts when one of its etcd members is not on loopback.
    #[test]
    fn wildcard_binds_need_an_advertised_host() {
        let with = |extra: &str| {
            format!(
                "rid = \"a\"\n[security]\nmode = \"none\"\n[discovery]\n\
                 store = \"etcd://10.1.0.1:2379\"\nhost = \"0.0.0.0\"\n{extra}"
            )
        };
        let ok = NodeConfig::from_toml(&with("[discovery.advertise]\nhost = \"10.1.0.5\"\n"))
            .expect("wildcard bind, advertised host");
        let a = ok.discovery.and_then(|d| d.advertise).expect("advertise");
        assert_eq!(
            a.advertised(EndpointKind::RouteMesh, "tcp://0.0.0.0:7101"),
            "tcp://10.1.0.5:7101"
        );
        let per_kind = AdvertiseConfig {
            host: Some("10.1.0.5".into()),
            publisher: Some("fd00::7".into()),
            ..AdvertiseConfig::default()
        };
        assert_eq!(
            per_kind.advertised(EndpointKind::Publisher, "tcp://[::]:9"),
            "tcp://[fd00::7]:9"
        );
        assert_eq!(
            per_kind.advertised(EndpointKind::Server, "tcp://0.0.0.0:8"),
            "tcp://10.1.0.5:8"
        );
        assert_eq!(
            AdvertiseConfig::default().advertised(EndpointKind::Server, "tcp://0.0.0.0:8"),
            "tcp://0.0.0.0:8"
        );
        assert!(NodeConfig::from_toml(&with(
            "bind = [\"route_mesh\", \"publisher\"]\n\
             [discovery.advertise]\nroute_mesh = \"10.1.0.5\"\npublisher = \"10.2.0.5\"\n"
        ))
        .is_ok());
        for bad in [
            with(""),
            with("bind = [\"route_mesh\", \"publisher\"]\n[discovery.advertise]\nroute_mesh = \"h\"\n"),
            with("[discovery.advertise]\nhost = \"0.0.0.0\"\n"),
            with("[discovery.advertise]\nhost = \"::\"\n"),
            with("[discovery.advertise]\nhost = \"\"\n"),
            with("[discovery.advertise]\nhost = \"tcp://h\"\n"),
        ] {
            assert!(NodeConfig::from_toml(&bad).is_err(), "{bad}");
        }
        let shared = |url: &str| StoreUrl::parse(url).expect("url").is_shared_across_hosts();
        assert!(!shared("sqlite:///x.db"));
        assert!(!shared("etcd://127.0.0.1:2379,localhost:2380"));
        assert!(shared("etcd://127.0.0.1:2379,10.1.0.2:2379"));
        assert!(shared("etcd://etcd-1.plant-7:2379"));
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

    /// The constructors and setters build what the same TOML file says.
    #[test]
    fn setters_build_what_the_file_says() {
        let built = NodeConfig::new("a")
            .member(Membership::server("pump"))
            .member(Membership::object_client("billing"))
            .route_mesh("tcp://127.0.0.1:7101", "tcp://127.0.0.1:7102")
            .server("tcp://127.0.0.1:7103")
            .publisher("ipc:///tmp/a.pub")
            .peer(PeerConfig::new(
                "b",
                "tcp://127.0.0.1:7201",
                "tcp://127.0.0.1:7202",
            ))
            .dial_server(ServerConfig::new("billing", "tcp://127.0.0.1:7303"))
            .subscribe("ipc:///tmp/c.pub");
        let file = NodeConfig::from_toml(
            "rid = \"a\"\n\
             memberships = [{ role = \"server\", channel = \"pump\" }, \
             { role = \"object_client\", channel = \"billing\" }]\n\
             [route_mesh]\napplication = \"tcp://127.0.0.1:7101\"\n\
             completion = \"tcp://127.0.0.1:7102\"\n\
             [server]\nendpoint = \"tcp://127.0.0.1:7103\"\n\
             [publisher]\nendpoint = \"ipc:///tmp/a.pub\"\n\
             [[peers]]\nrid = \"b\"\napplication = \"tcp://127.0.0.1:7201\"\n\
             completion = \"tcp://127.0.0.1:7202\"\n\
             [[servers]]\nchannel = \"billing\"\nendpoint = \"tcp://127.0.0.1:7303\"\n\
             [[subscriptions]]\nendpoint = \"ipc:///tmp/c.pub\"\n\
             [security]\nmode = \"none\"\n",
        )
        .expect("valid file");
        assert_eq!(built, file);
        built.validate().expect("valid");
    }

    /// MISSION T5: tcp and ipc endpoints are checked as libzmq reads them; a port it would
    /// take modulo 65536, a missing host, port or path, or another transport is refused.
    #[test]
    fn t5_rejects_endpoints_libzmq_would_misread() {
        for good in [
            "tcp://127.0.0.1:7101",
            "tcp://*:7101",
            "tcp://127.0.0.1:*",
            "tcp://127.0.0.1:0",
            "tcp://127.0.0.1:65535",
            "tcp://[::1]:7101",
            "tcp://eth0:7101",
            "ipc:///tmp/a.sock",
        ] {
            assert_eq!(check_endpoint(good), Ok(()), "{good}");
        }
        for bad in [
            "tcp://127.0.0.1:99999",
            "tcp://127.0.0.1:65536",
            "tcp://127.0.0.1:",
            "tcp://127.0.0.1:+80",
            "tcp://127.0.0.1:80a",
            "tcp://127.0.0.1",
            "tcp://:7101",
            "ipc://",
            "udp://127.0.0.1:7101",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad} accepted");
        }
        let refused = NodeConfig::new("a")
            .server("tcp://127.0.0.1:99999")
            .validate();
        assert!(
            matches!(&refused, Err(ConfigError::Invalid(m)) if m.contains("99999")),
            "{refused:?}"
        );
    }
}
