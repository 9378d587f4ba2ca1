//! The node descriptor: what a node publishes to the store so that peers can find it (MISSION
//! D1), and its versioned JSON form.
//!
//! # JSON form, format 1
//!
//! ```json
//! {
//!   "format": 1,
//!   "rid": "b",
//!   "generation": "5129b37914003e4e",
//!   "security_identity": "b",
//!   "memberships": [{ "role": "server", "channel": "orders" }],
//!   "route_mesh": { "application": "tcp://127.0.0.1:33161", "completion": "tcp://127.0.0.1:37295" },
//!   "server": "tcp://127.0.0.1:44017",
//!   "publishers": ["ipc:///tmp/zmesh/c-pub.sock"]
//! }
//! ```
//!
//! - `format` is the version of this form. A reader accepts the formats it knows (1) and
//!   refuses any other with [`DescriptorError::UnsupportedFormat`]; a later format that only
//!   adds keys keeps the number, because readers ignore keys they do not know.
//! - `generation` is the lifecycle generation as 16 lowercase hex digits: a JSON number cannot
//!   carry every u64 exactly in every language. Never 0; compared for equality only.
//! - `route_mesh`, `server` are absent (or `null`) when the node does not bind them;
//!   `publishers` is empty when it publishes nothing.
//!
//! A descriptor read from a store is valid by construction ([`Descriptor::from_json`] checks
//! every field), so nothing downstream re-checks it.

use serde::{Deserialize, Serialize};

use crate::proto::handshake::{Expectation, Identity, Membership, Role};
use crate::proto::wire::{Label, Name};

/// The descriptor format this build writes and reads.
pub const DESCRIPTOR_FORMAT: u32 = 1;

/// Largest descriptor (JSON bytes) a reader accepts.
pub const MAX_DESCRIPTOR_BYTES: usize = 64 * 1024;

/// Most memberships or publisher endpoints one descriptor may list.
pub const MAX_DESCRIPTOR_ITEMS: usize = 256;

/// What a node publishes about itself: RID, lifecycle generation, security identity, the
/// endpoints it accepts connections on, and its channel memberships.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Wire", into = "Wire")]
pub struct Descriptor {
    /// Stable node id.
    pub rid: String,
    /// Lifecycle generation of this process run: random, non-zero, compared for equality.
    pub generation: u64,
    /// The security identity the node presents in its handshake.
    pub security_identity: String,
    /// Channel memberships (Server / Object Client).
    pub memberships: Vec<Membership>,
    /// RouteMesh lanes the node accepts peers on, if it binds them.
    pub route_mesh: Option<MeshEndpoints>,
    /// ClientServer endpoint the node serves clients on (for its Server memberships).
    pub server: Option<String>,
    /// Classic fanout endpoints the node publishes on (one SUB socket each at a subscriber).
    pub publishers: Vec<String>,
}

/// A node's two RouteMesh lane endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeshEndpoints {
    /// The Application lane endpoint.
    pub application: String,
    /// The Completion lane endpoint.
    pub completion: String,
}

/// A descriptor that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DescriptorError {
    /// The bytes are not JSON of the descriptor's shape.
    #[error("descriptor is not valid JSON of the descriptor form: {0}")]
    Malformed(String),
    /// The descriptor is larger than [`MAX_DESCRIPTOR_BYTES`].
    #[error("descriptor of {0} bytes is larger than the limit")]
    TooLarge(usize),
    /// A format this build does not read.
    #[error("descriptor format {0} is not supported (this build reads format 1)")]
    UnsupportedFormat(u32),
    /// A field is out of range.
    #[error("invalid descriptor: {0}")]
    Invalid(String),
}

impl Descriptor {
    /// Parses and checks a descriptor's JSON form.
    pub fn from_json(bytes: &[u8]) -> Result<Descriptor, DescriptorError> {
        if bytes.len() > MAX_DESCRIPTOR_BYTES {
            return Err(DescriptorError::TooLarge(bytes.len()));
        }
        // The format is read first, so a newer form is refused as such and not as malformed.
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let format: Format =
            serde_json::from_slice(bytes).map_err(|e| DescriptorError::Malformed(e.to_string()))?;
        if format.format != DESCRIPTOR_FORMAT {
            return Err(DescriptorError::UnsupportedFormat(format.format));
        }
        let wire: Wire =
            serde_json::from_slice(bytes).map_err(|e| DescriptorError::Malformed(e.to_string()))?;
        Descriptor::try_from(wire)
    }

    /// The JSON form (format [`DESCRIPTOR_FORMAT`]).
    pub fn to_json(&self) -> String {
        // A Wire of strings, numbers and vectors always serializes.
        serde_json::to_string(&Wire::from(self.clone())).unwrap_or_default()
    }

    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), DescriptorError> {
        let bad = |m: String| Err(DescriptorError::Invalid(m));
        if !Name::fits(self.rid.len()) {
            return bad(format!("rid must be 1..=255 bytes, got {}", self.rid.len()));
        }
        if self.generation == 0 {
            return bad("generation must not be 0".into());
        }
        if !Label::fits(self.security_identity.len()) {
            return bad("security_identity must be at most 255 bytes".into());
        }
        if self.memberships.len() > MAX_DESCRIPTOR_ITEMS
            || self.publishers.len() > MAX_DESCRIPTOR_ITEMS
        {
            return bad("too many memberships or publishers".into());
        }
        for m in &self.memberships {
            if !Name::fits(m.channel.len()) {
                return bad(format!("channel {:?} must be 1..=255 bytes", m.channel));
            }
        }
        let mut endpoints: Vec<&str> = Vec::new();
        if let Some(rm) = &self.route_mesh {
            endpoints.extend([rm.application.as_str(), rm.completion.as_str()]);
        }
        endpoints.extend(self.server.as_deref());
        endpoints.extend(self.publishers.iter().map(String::as_str));
        for e in endpoints {
            let usable = (e.starts_with("tcp://") || e.starts_with("ipc://"))
                && e.len() <= 1024
                && !e.contains('*');
            if !usable {
                return bad(format!(
                    "endpoint {e:?} is not a dialable tcp:// or ipc:// endpoint"
                ));
            }
        }
        Ok(())
    }

    /// True if the node holds at least one Server membership.
    pub fn is_server(&self) -> bool {
        self.memberships.iter().any(|m| m.role == Role::Server)
    }

    /// The channels the node serves (its Server memberships), in order, without repeats.
    pub fn served_channels(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for m in self.memberships.iter().filter(|m| m.role == Role::Server) {
            if !out.contains(&m.channel.as_str()) {
                out.push(&m.channel);
            }
        }
        out
    }

    /// The admission fence this descriptor sets (MISSION F3): its RID, security identity and
    /// generation, all three.
    pub fn fence(&self) -> Expectation {
        Expectation {
            rid: Some(self.rid.clone()),
            generation: Some(self.generation),
            security_identity: Some(self.security_identity.clone()),
        }
    }

    /// Every endpoint this descriptor publishes, with what it is: `route_mesh application`,
    /// `route_mesh completion`, `server`, `publisher`.
    pub fn endpoints(&self) -> Vec<(&'static str, &str)> {
        let mut out = Vec::new();
        if let Some(m) = &self.route_mesh {
            out.push(("route_mesh application", m.application.as_str()));
            out.push(("route_mesh completion", m.completion.as_str()));
        }
        out.extend(self.server.iter().map(|s| ("server", s.as_str())));
        out.extend(self.publishers.iter().map(|p| ("publisher", p.as_str())));
        out
    }

    /// The endpoints of this descriptor that only this host can dial, each with why: a tcp
    /// endpoint on a loopback address (`127.0.0.0/8`, `::1`, `localhost`) or a wildcard one
    /// (`0.0.0.0`, `::`, `*`), or an ipc endpoint. Fine for a store that only this host reads,
    /// refused for one that other hosts read (MISSION H1).
    pub fn host_local_endpoints(&self) -> Vec<(&'static str, &str, &'static str)> {
        self.endpoints()
            .into_iter()
            .filter_map(|(what, e)| host_locality(e).map(|why| (what, e, why)))
            .collect()
    }

    /// The descriptor of a node with `identity` and these endpoints.
    pub fn of(
        identity: &Identity,
        route_mesh: Option<MeshEndpoints>,
        server: Option<String>,
        publishers: Vec<String>,
    ) -> Descriptor {
        Descriptor {
            rid: identity.rid.clone(),
            generation: identity.generation,
            security_identity: identity.security_identity.clone(),
            memberships: identity.memberships.clone(),
            route_mesh,
            server,
            publishers,
        }
    }
}

/// Why only this host can dial `endpoint`, if so: `"a loopback address"`, `"a wildcard
/// address"`, `"an ipc path"`.
pub fn host_locality(endpoint: &str) -> Option<&'static str> {
    if endpoint.starts_with("ipc://") {
        return Some("an ipc path");
    }
    let host = tcp_host(endpoint)?;
    if host == "*" || host == "0.0.0.0" || host == "::" {
        return Some("a wildcard address");
    }
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback.then_some("a loopback address")
}

/// The host of a `tcp://HOST:PORT` endpoint (an IPv6 address without its brackets).
pub fn tcp_host(endpoint: &str) -> Option<&str> {
    let rest = endpoint.strip_prefix("tcp://")?;
    let (host, _port) = rest.rsplit_once(':')?;
    Some(host.trim_start_matches('[').trim_end_matches(']'))
}

/// `endpoint` with its host replaced by `host`, its port kept: what a node advertises for an
/// endpoint it bound on another address (a wildcard, or an interface other hosts reach by
/// another name). Anything but a `tcp://HOST:PORT` endpoint is returned as it is.
pub fn with_host(endpoint: &str, host: &str) -> String {
    let Some((_, port)) = endpoint
        .strip_prefix("tcp://")
        .and_then(|rest| rest.rsplit_once(':'))
    else {
        return endpoint.to_owned();
    };
    if host.contains(':') {
        format!("tcp://[{host}]:{port}")
    } else {
        format!("tcp://{host}:{port}")
    }
}

/// The serde form: the format number and the generation as hex text.
#[derive(Serialize, Deserialize)]
struct Wire {
    format: u32,
    rid: String,
    generation: String,
    security_identity: String,
    #[serde(default)]
    memberships: Vec<Membership>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    route_mesh: Option<MeshEndpoints>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    #[serde(default)]
    publishers: Vec<String>,
}

impl TryFrom<Wire> for Descriptor {
    type Error = DescriptorError;

    fn try_from(w: Wire) -> Result<Descriptor, DescriptorError> {
        if w.format != DESCRIPTOR_FORMAT {
            return Err(DescriptorError::UnsupportedFormat(w.format));
        }
        let hex_ok =
            w.generation.len() == 16 && w.generation.bytes().all(|b| b.is_ascii_hexdigit());
        let generation = u64::from_str_radix(&w.generation, 16)
            .ok()
            .filter(|_| hex_ok)
            .ok_or_else(|| {
                DescriptorError::Invalid(format!(
                    "generation {:?} is not 16 hex digits",
                    w.generation
                ))
            })?;
        let d = Descriptor {
            rid: w.rid,
            generation,
            security_identity: w.security_identity,
            memberships: w.memberships,
            route_mesh: w.route_mesh,
            server: w.server,
            publishers: w.publishers,
        };
        d.validate()?;
        Ok(d)
    }
}

impl From<Descriptor> for Wire {
    fn from(d: Descriptor) -> Wire {
        Wire {
            format: DESCRIPTOR_FORMAT,
            rid: d.rid,
            generation: format!("{:016x}", d.generation),
            security_identity: d.security_identity,
            memberships: d.memberships,
            route_mesh: d.route_mesh,
            server: d.server,
            publishers: d.publishers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Descriptor {
        Descriptor {
            rid: "b".into(),
            generation: 0x5129_b379_1400_3e4e,
            security_identity: "b".into(),
            memberships: vec![Membership {
                role: Role::Server,
                channel: "orders".into(),
            }],
            route_mesh: Some(MeshEndpoints {
                application: "tcp://127.0.0.1:33161".into(),
                completion: "tcp://127.0.0.1:37295".into(),
            }),
            server: Some("tcp://127.0.0.1:44017".into()),
            publishers: vec!["ipc:///tmp/zmesh/c-pub.sock".into()],
        }
    }

    /// The documented example is exactly the JSON form.
    #[test]
    fn documented_form_round_trips() {
        let doc = include_str!("descriptor.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .skip_while(|l| !l.starts_with("```json"))
            .skip(1)
            .take_while(|l| !l.starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
        let d = Descriptor::from_json(doc.as_bytes()).expect("documented form parses");
        assert_eq!(d, sample());
        let back = Descriptor::from_json(d.to_json().as_bytes()).expect("round trip");
        assert_eq!(back, d);
        assert!(d.to_json().contains("\"generation\":\"5129b37914003e4e\""));
    }

    #[test]
    fn unknown_keys_are_ignored_within_a_format() {
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        v["zone"] = "eu-1".into();
        let d = Descriptor::from_json(v.to_string().as_bytes()).expect("extra key ignored");
        assert_eq!(d, sample());
    }

    #[test]
    fn rejects_other_formats_bad_generations_and_endpoints() {
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
            f(&mut v);
            Descriptor::from_json(v.to_string().as_bytes())
        };
        assert_eq!(
            with(&|v| v["format"] = 2.into()),
            Err(DescriptorError::UnsupportedFormat(2))
        );
        for g in [
            "0000000000000000",
            "12",
            "zz29b37914003e4e",
            "+129b37914003e4e",
        ] {
            assert!(
                matches!(
                    with(&|v| v["generation"] = g.into()),
                    Err(DescriptorError::Invalid(_))
                ),
                "{g}"
            );
        }
        assert!(matches!(
            with(&|v| v["server"] = "udp://x".into()),
            Err(DescriptorError::Invalid(_))
        ));
        assert!(matches!(
            with(&|v| v["route_mesh"]["application"] = "tcp://127.0.0.1:*".into()),
            Err(DescriptorError::Invalid(_))
        ));
        assert!(matches!(
            with(&|v| v["rid"] = "".into()),
            Err(DescriptorError::Invalid(_))
        ));
        assert!(matches!(
            Descriptor::from_json(b"{\"format\":1}"),
            Err(DescriptorError::Malformed(_))
        ));
        assert!(matches!(
            Descriptor::from_json(b"not json"),
            Err(DescriptorError::Malformed(_))
        ));
        let big = vec![b' '; MAX_DESCRIPTOR_BYTES + 1];
        assert!(matches!(
            Descriptor::from_json(&big),
            Err(DescriptorError::TooLarge(_))
        ));
    }

    #[test]
    fn fence_is_the_complete_set() {
        let f = sample().fence();
        assert_eq!(f.rid.as_deref(), Some("b"));
        assert_eq!(f.generation, Some(0x5129_b379_1400_3e4e));
        assert_eq!(f.security_identity.as_deref(), Some("b"));
    }

    /// MISSION H1: what only this host can dial is found, and an advertised host replaces
    /// the bound one with the bound port kept.
    #[test]
    fn host_local_endpoints_and_advertised_hosts() {
        for (e, why) in [
            ("tcp://127.0.0.1:7101", Some("a loopback address")),
            ("tcp://127.9.0.3:7101", Some("a loopback address")),
            ("tcp://localhost:7101", Some("a loopback address")),
            ("tcp://[::1]:7101", Some("a loopback address")),
            ("tcp://0.0.0.0:7101", Some("a wildcard address")),
            ("tcp://[::]:7101", Some("a wildcard address")),
            ("tcp://*:7101", Some("a wildcard address")),
            ("ipc:///tmp/x", Some("an ipc path")),
            ("tcp://10.1.0.5:7101", None),
            ("tcp://node-a.plant-7:7101", None),
            ("tcp://[fd00::5]:7101", None),
        ] {
            assert_eq!(host_locality(e), why, "{e}");
        }
        assert_eq!(
            with_host("tcp://0.0.0.0:7101", "10.1.0.5"),
            "tcp://10.1.0.5:7101"
        );
        assert_eq!(
            with_host("tcp://[::]:7101", "fd00::5"),
            "tcp://[fd00::5]:7101"
        );
        assert_eq!(with_host("ipc:///tmp/x", "10.1.0.5"), "ipc:///tmp/x");
        let mut d = sample();
        d.route_mesh = Some(MeshEndpoints {
            application: "tcp://0.0.0.0:1".into(),
            completion: "tcp://10.1.0.5:2".into(),
        });
        d.server = Some("tcp://127.0.0.1:3".into());
        d.publishers = vec!["tcp://10.1.0.5:4".into()];
        assert_eq!(
            d.host_local_endpoints(),
            vec![
                (
                    "route_mesh application",
                    "tcp://0.0.0.0:1",
                    "a wildcard address"
                ),
                ("server", "tcp://127.0.0.1:3", "a loopback address"),
            ]
        );
    }
}
