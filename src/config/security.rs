//! `[security]`: CURVE or none, the allow-list and the keys this node expects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::proto::security::PublicKey;

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
#[non_exhaustive]
pub struct SecurityConfig {
    /// `"curve"` or `"none"`. Required in a `[security]` section.
    pub mode: SecurityMode,
    /// CURVE: this node's key pair, as `zmesh keygen` writes it (TOML, Z85 keys; or the raw
    /// 64 bytes public key then secret key). Required with `mode = "curve"`. A relative path
    /// in a file read by [`NodeConfig::from_file`](super::NodeConfig::from_file) is relative
    /// to that file.
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

    /// This configuration admitting the clients whose public keys are `keys` too (CURVE:
    /// [`SecurityConfig::allow`](field@SecurityConfig::allow)).
    pub fn allow(mut self, keys: impl IntoIterator<Item = PublicKey>) -> SecurityConfig {
        self.allow.extend(keys);
        self
    }

    /// This configuration admitting the clients whose keys are in the files of `dir` too
    /// (CURVE: [`SecurityConfig::allow_dir`](field@SecurityConfig::allow_dir)).
    pub fn allow_dir(mut self, dir: impl Into<PathBuf>) -> SecurityConfig {
        self.allow_dir = Some(dir.into());
        self
    }

    /// This configuration expecting the node listening on `endpoint` to hold `key` (CURVE:
    /// [`SecurityConfig::endpoint_keys`]).
    pub fn expect_key(mut self, endpoint: impl Into<String>, key: PublicKey) -> SecurityConfig {
        self.endpoint_keys.insert(endpoint.into(), key);
        self
    }

    /// Makes relative `secret_key_file` and `allow_dir` paths relative to `dir` (what
    /// [`NodeConfig::from_file`](super::NodeConfig::from_file) does with the file's directory).
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
