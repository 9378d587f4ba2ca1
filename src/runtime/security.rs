//! Who is calling, and may they (MISSION K6): the per-call authorizer of a served
//! channel.
//!
//! A [`crate::runtime::service::Service`] may carry an authorizer
//! ([`crate::runtime::service::Service::authorize`]). The I/O thread asks it about every
//! call of that channel (each call of a BATCH on its own) after the method was found and the
//! caller's semantics pin checked, and before the call is ACCEPTed: a refusal is answered
//! `Unauthorized` or `Forbidden` at once, and the call did not run (no ACCEPT, no handler,
//! no queue place, no idempotency record).
//!
//! What the authorizer sees of the caller is [`Caller`]: its RID and its security identity.
//! The identity is **verified** only when the connection authenticated the caller (CURVE: the
//! client's public key, checked by the transport). In `[security] mode = "none"` it is the
//! identity the caller *claimed* in its HELLO, and [`Caller::verified`] is false: anyone who
//! reaches the endpoint can claim anything, so an authorizer that needs to know who calls
//! answers such a caller [`Denied::Unauthorized`].

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use crate::proto::contract::Semantics;
use crate::proto::security::{z85_decode, z85_encode, PublicKey, KEY_LEN};
pub use crate::runtime::error::KeyFileError;
use crate::runtime::error::TransportError;

/// The caller of one call, as the connection it arrived on knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The caller's RID (from its HELLO; never verified on its own).
    pub rid: String,
    /// The caller's security identity: under CURVE the Z85 text of its public key (verified
    /// by the transport); otherwise the identity its HELLO claimed.
    pub security_identity: String,
    /// True when the transport authenticated `security_identity` (CURVE); false when it is
    /// only a claim (`[security] mode = "none"`).
    pub verified: bool,
}

/// What an authorizer is asked about one call.
#[derive(Debug, Clone, Copy)]
pub struct AuthRequest<'a> {
    /// Who calls.
    pub caller: &'a Caller,
    /// The channel called.
    pub channel: &'a str,
    /// The method called (`$describe` for the built-in contract method).
    pub method: &'a str,
    /// The method's declared semantics here (`None`: undeclared).
    pub semantics: Option<Semantics>,
}

/// An authorizer's refusal. Either way the call did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// The channel needs to know who calls and the caller is not authenticated (answered
    /// `Unauthorized`).
    Unauthorized(String),
    /// The caller is known and not permitted to make this call (answered `Forbidden`).
    Forbidden(String),
}

impl Denied {
    /// An `Unauthorized` refusal with this message.
    pub fn unauthorized(message: impl Into<String>) -> Denied {
        Denied::Unauthorized(message.into())
    }

    /// A `Forbidden` refusal with this message.
    pub fn forbidden(message: impl Into<String>) -> Denied {
        Denied::Forbidden(message.into())
    }
}

/// A channel's authorizer: called on the node's I/O thread for every call of the channel, so
/// it must be cheap and must not block (look the identity up in a set, say). A panic refuses
/// the call `Forbidden`.
pub type Authorizer = Arc<dyn Fn(&AuthRequest<'_>) -> Result<(), Denied> + Send + Sync>;

/// A CURVE key pair: this node's identity under CURVE. Made by `zmesh keygen`
/// ([`KeyPair::generate`], [`KeyPair::write_new`]); the secret half is never printed
/// (`Debug` shows the public key only).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPair {
    /// The public key: what peers configure to expect of this node.
    pub public: PublicKey,
    secret: [u8; KEY_LEN],
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &self.public)
            .field("secret", &"<not shown>")
            .finish()
    }
}

/// A key file's contents, as TOML.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    public_key: PublicKey,
    secret_key: String,
}

impl KeyPair {
    /// A fresh key pair from libzmq (libsodium's random generator).
    pub fn generate() -> Result<KeyPair, KeyFileError> {
        let pair =
            zmq::CurveKeyPair::new().map_err(|e| KeyFileError::Generate(TransportError::new(e)))?;
        Ok(KeyPair {
            public: PublicKey::from_bytes(pair.public_key),
            secret: pair.secret_key,
        })
    }

    /// The secret key's 32 bytes (for the socket options; never print them).
    pub fn secret_bytes(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }

    /// The key file's text: TOML with `public_key` and `secret_key`, both Z85.
    pub fn to_file_text(&self) -> String {
        let file = KeyFile {
            public_key: self.public,
            secret_key: z85_encode(&self.secret).unwrap_or_default(),
        };
        format!(
            "# zmesh CURVE key pair (zmesh keygen). The secret key is this node's identity:\n\
             # keep this file private. Peers configure the public key.\n{}",
            toml::to_string(&file).unwrap_or_default()
        )
    }

    /// Parses a key file's text; `path` names it in errors.
    pub fn from_file_text(text: &str, path: &str) -> Result<KeyPair, KeyFileError> {
        let invalid = |why: String| KeyFileError::Invalid {
            path: path.to_owned(),
            why,
        };
        let file: KeyFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let secret = z85_decode(file.secret_key.trim())
            .and_then(|b| <[u8; KEY_LEN]>::try_from(b.as_slice()).ok())
            .ok_or_else(|| invalid("secret_key is not 40 characters of Z85".into()))?;
        Ok(KeyPair {
            public: file.public_key,
            secret,
        })
    }

    /// Reads a key file: the TOML that [`KeyPair::write_new`] writes (Z85 keys), or the raw
    /// form, exactly 64 bytes: the public key's 32 bytes, then the secret key's.
    ///
    /// Nothing here can check that the two halves belong together (that takes the curve
    /// arithmetic libzmq does not expose): a mismatched pair fails every CURVE handshake,
    /// because peers expect the public key and this node proves the secret one.
    pub fn read(path: impl AsRef<Path>) -> Result<KeyPair, KeyFileError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| KeyFileError::Io {
            path: shown.clone(),
            source,
        })?;
        if bytes.len() == 2 * KEY_LEN {
            // No TOML key file is this short (two 40-character values and their names).
            let (public, secret) = bytes.split_at(KEY_LEN);
            if let (Some(public), Ok(secret)) = (
                PublicKey::from_slice(public),
                <[u8; KEY_LEN]>::try_from(secret),
            ) {
                return Ok(KeyPair { public, secret });
            }
        }
        let text = String::from_utf8(bytes).map_err(|_| KeyFileError::Invalid {
            path: shown.clone(),
            why: "neither TOML text nor the raw 64 bytes of a key pair".into(),
        })?;
        KeyPair::from_file_text(&text, &shown)
    }

    /// Writes the key file to `path`, which must not exist yet, readable by its owner only.
    pub fn write_new(&self, path: impl AsRef<Path>) -> Result<(), KeyFileError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = path.as_ref();
        let io = |source| KeyFileError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        f.write_all(self.to_file_text().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)
    }
}

/// Whether the linked libzmq has CURVE (zmesh builds it with libsodium: vendor/zmq-sys).
pub fn curve_available() -> bool {
    zmq::has("curve") == Some(true)
}

/// How often a node looks at its `allow_dir` for changes.
pub const ALLOW_DIR_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Public keys in a key file's text: a `zmesh keygen` key file (its `public_key`), or Z85
/// keys one a line, with blank lines and lines starting with `#` (what `zmesh keygen` prints, collected
/// in a file). `path` names the file in errors.
pub fn parse_public_keys(text: &str, path: &str) -> Result<Vec<PublicKey>, KeyFileError> {
    #[derive(serde::Deserialize)]
    struct WithPublicKey {
        public_key: PublicKey,
    }
    if let Ok(file) = toml::from_str::<WithPublicKey>(text) {
        return Ok(vec![file.public_key]);
    }
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        // `#` is a Z85 digit, but never the first of a key (a first digit is at most 82,
        // `%`): a line starting with it is a comment.
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = line.parse().map_err(|_| KeyFileError::Invalid {
            path: path.to_owned(),
            why: format!("line {} is not a Z85 public key", n + 1),
        })?;
        keys.push(key);
    }
    Ok(keys)
}

/// The allow-list a configuration names: its inline `allow` keys and the keys of every file
/// in its `allow_dir` (files whose name starts with `.` are skipped; so are directories).
/// An unreadable directory or an invalid file is an error: the caller keeps the list it had.
pub fn load_allow_list(
    cfg: &crate::config::SecurityConfig,
) -> Result<BTreeSet<PublicKey>, KeyFileError> {
    let mut keys: BTreeSet<PublicKey> = cfg.allow.iter().copied().collect();
    let Some(dir) = &cfg.allow_dir else {
        return Ok(keys);
    };
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| KeyFileError::Io { path, source }
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if !hidden && entry.file_type().map_err(io(&path))?.is_file() {
            files.push(path);
        }
    }
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        keys.extend(parse_public_keys(&text, &path.display().to_string())?);
    }
    Ok(keys)
}

/// A change of this node's security state, reported as [`crate::runtime::NodeEvent::Security`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SecurityEvent {
    /// The allow-list now in force: `keys` public keys. Admitted connections whose key is no
    /// longer on it were closed (`security_failure`).
    AllowListLoaded {
        /// Keys on the list.
        keys: usize,
        /// What made the node read it: `reload` (SIGHUP, [`crate::runtime::Node::reload_allow_list`])
        /// or `change` (the directory's files changed).
        trigger: &'static str,
    },
    /// The allow-list could not be read again: the previous one stays in force.
    AllowListError {
        /// What went wrong.
        detail: String,
        /// `reload` or `change`, as above.
        trigger: &'static str,
    },
}

impl std::fmt::Display for SecurityEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecurityEvent::AllowListLoaded { keys, trigger } => {
                write!(f, "allow-list loaded ({trigger}): {keys} keys")
            }
            SecurityEvent::AllowListError { detail, trigger } => {
                write!(
                    f,
                    "allow-list not reloaded ({trigger}), the previous one stays: {detail}"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The libzmq zmesh links has CURVE (built with libsodium, vendor/zmq-sys).
    #[test]
    fn libzmq_has_curve() {
        assert!(curve_available());
    }

    #[test]
    fn key_files_round_trip_and_hide_the_secret() {
        let pair = KeyPair::generate().expect("CURVE key pair");
        let text = pair.to_file_text();
        assert_eq!(KeyPair::from_file_text(&text, "t").expect("parses"), pair);
        assert!(!format!("{pair:?}").contains(&z85_encode(pair.secret_bytes()).unwrap_or_default()));
        let dir = std::env::temp_dir().join(format!("zmesh-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("node.key");
        let _ = std::fs::remove_file(&path);
        pair.write_new(&path).expect("write");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o077, 0, "private to its owner");
        assert!(pair.write_new(&path).is_err(), "never overwrites a key");
        assert_eq!(KeyPair::read(&path).expect("read"), pair);
        assert!(KeyPair::from_file_text("public_key = \"x\"", "t").is_err());
    }

    /// Two CURVE sockets with generated keys talk.
    #[test]
    fn curve_sockets_authenticate_the_server() {
        let server = KeyPair::generate().expect("keys");
        let client = KeyPair::generate().expect("keys");
        let ctx = zmq::Context::new();
        let rep = ctx.socket(zmq::ROUTER).expect("router");
        rep.set_curve_server(true).expect("server");
        rep.set_curve_secretkey(server.secret_bytes())
            .expect("secret");
        rep.bind("tcp://127.0.0.1:*").expect("bind");
        let ep = rep.get_last_endpoint().expect("ep").expect("utf-8");
        let dial = |server_key: &PublicKey| -> zmq::Socket {
            let d = ctx.socket(zmq::DEALER).expect("dealer");
            d.set_linger(0).expect("linger");
            d.set_curve_serverkey(server_key.as_bytes())
                .expect("serverkey");
            d.set_curve_publickey(client.public.as_bytes())
                .expect("public");
            d.set_curve_secretkey(client.secret_bytes())
                .expect("secret");
            d.connect(&ep).expect("connect");
            d
        };
        let good = dial(&server.public);
        good.send("hi", 0).expect("send");
        rep.set_rcvtimeo(10_000).expect("timeout");
        let mut m = zmq::Message::new();
        rep.recv(&mut m, 0).expect("routing id");
        assert_eq!(m.gets("User-Id"), None, "no ZAP handler: no User-Id");
        let body = rep.recv_bytes(0).expect("body");
        assert_eq!(body, b"hi");
    }
}
