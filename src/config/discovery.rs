//! `[discovery]`: automatic mode through a descriptor store, the addresses a node binds and
//! advertises, and the store's URL, TLS and authentication.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::default_true;

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
#[non_exhaustive]
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
#[non_exhaustive]
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

impl AdvertiseConfig {
    /// Every kind of endpoint advertised at `host` (a DNS name or an IP address); set
    /// [`AdvertiseConfig::route_mesh`], [`AdvertiseConfig::server`] or
    /// [`AdvertiseConfig::publisher`] for a kind advertised elsewhere.
    pub fn new(host: impl Into<String>) -> AdvertiseConfig {
        AdvertiseConfig {
            host: Some(host.into()),
            ..AdvertiseConfig::default()
        }
    }
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

    pub(super) fn validate(&self) -> Result<(), String> {
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
/// [`NodeConfig::from_file`](super::NodeConfig::from_file) is relative to that file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
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

impl EtcdTlsConfig {
    /// TLS trusting the members' certificates signed by the CA(s) in `ca_file`, without a
    /// client certificate, each member's certificate checked for the host of its endpoint.
    pub fn new(ca_file: impl Into<PathBuf>) -> EtcdTlsConfig {
        EtcdTlsConfig {
            ca_file: ca_file.into(),
            cert_file: None,
            key_file: None,
            server_name: None,
        }
    }

    /// This TLS with the client certificate `cert_file` and its private key `key_file`
    /// (PEM), for members that require one.
    pub fn client_cert(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> EtcdTlsConfig {
        self.cert_file = Some(cert_file.into());
        self.key_file = Some(key_file.into());
        self
    }

    /// This TLS checking every member's certificate for the name `name`.
    pub fn server_name(mut self, name: impl Into<String>) -> EtcdTlsConfig {
        self.server_name = Some(name.into());
        self
    }
}

/// `[discovery.auth]`: etcd user/password authentication. The password comes from a file or
/// an environment variable (exactly one of the two), never from the configuration itself,
/// and is never logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
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

impl EtcdAuthConfig {
    /// The etcd user `user`, its password the first line of `password_file`.
    pub fn with_password_file(
        user: impl Into<String>,
        password_file: impl Into<PathBuf>,
    ) -> EtcdAuthConfig {
        EtcdAuthConfig {
            user: user.into(),
            password_file: Some(password_file.into()),
            password_env: None,
        }
    }

    /// The etcd user `user`, its password in the environment variable `var`.
    pub fn with_password_env(user: impl Into<String>, var: impl Into<String>) -> EtcdAuthConfig {
        EtcdAuthConfig {
            user: user.into(),
            password_file: None,
            password_env: Some(var.into()),
        }
    }
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
    /// [`NodeConfig::from_file`](super::NodeConfig::from_file) does with the file's directory).
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
    pub(super) fn validate_store_access(&self) -> Result<(), String> {
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
