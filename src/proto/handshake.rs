//! Handshake admission: who may become a ready peer (MISSION T4, F3, F4).
//!
//! Pure functions over identities; the shell feeds them what arrived in HELLO / WELCOME and
//! what it was told to expect (configuration now, discovery descriptors later), and acts on the
//! verdict: admit, or send REJECT with the reason and close.

use std::num::NonZeroU64;

use serde::Serialize;

use crate::proto::wire::{self, Label, Lane, Memberships, Name, WireError};
pub use crate::proto::wire::{is_extension_entry, Capabilities, EXTENSION_PREFIX, EXTENSION_ROOM};

/// A channel membership a node declares in its handshake.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct Membership {
    /// The role the node plays on the channel.
    pub role: Role,
    /// The ChannelName.
    pub channel: String,
}

impl Membership {
    /// A Server membership of `channel`: this node serves it.
    pub fn server(channel: impl Into<String>) -> Membership {
        Membership {
            role: Role::Server,
            channel: channel.into(),
        }
    }

    /// An Object Client membership of `channel`: this node calls it.
    pub fn object_client(channel: impl Into<String>) -> Membership {
        Membership {
            role: Role::ObjectClient,
            channel: channel.into(),
        }
    }
}

/// A node's role on a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Serves the channel (RouteMesh Channel Server membership).
    Server,
    /// Only calls into the channel.
    ObjectClient,
}

/// What a node says about itself in HELLO / WELCOME.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// Stable node id.
    pub rid: String,
    /// Lifecycle generation: fresh random non-zero per process run; compared for equality only.
    pub generation: u64,
    /// Security identity.
    pub security_identity: String,
    /// Channel memberships.
    pub memberships: Vec<Membership>,
    /// The wire capabilities beyond version 1 the node announces (WIRE.md §8.1).
    pub capabilities: Capabilities,
}

impl Identity {
    /// The channels this node holds a Server membership of, in announced order.
    pub fn served_channels(&self) -> Vec<String> {
        self.memberships
            .iter()
            .filter(|m| m.role == Role::Server)
            .map(|m| m.channel.clone())
            .collect()
    }

    /// True if the node holds at least one Server membership.
    pub fn is_server(&self) -> bool {
        self.memberships.iter().any(|m| m.role == Role::Server)
    }
}

/// What this node was told to expect of a peer. Empty fields expect nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Expectation {
    /// The peer's RID, if known.
    pub rid: Option<String>,
    /// The peer's lifecycle generation, if known (from a descriptor). `None` accepts any run.
    pub generation: Option<u64>,
    /// The peer's security identity, if known.
    pub security_identity: Option<String>,
}

impl Expectation {
    /// Combines a descriptor's expectation with a manual intent. The descriptor's complete set
    /// (RID + security identity + generation) is a fence that an endpoint-only manual intent
    /// with generation 0 cannot weaken (MISSION F3): fields the descriptor sets win.
    pub fn fenced_by(self, descriptor: &Expectation) -> Expectation {
        Expectation {
            rid: descriptor.rid.clone().or(self.rid),
            generation: descriptor
                .generation
                .or(self.generation.filter(|g| *g != 0)),
            security_identity: descriptor
                .security_identity
                .clone()
                .or(self.security_identity),
        }
    }
}

/// Why a handshake did not admit the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// Neither side has a Server membership: the pair needs no connection (MISSION T4).
    #[error("not required: neither node has a Server membership")]
    NotRequired,
    /// The peer's RID is not the expected one.
    #[error("identity mismatch: unexpected RID")]
    IdentityMismatch,
    /// The peer's lifecycle generation is not the expected one.
    #[error("generation mismatch")]
    GenerationMismatch,
    /// The peer's security identity is not the expected one.
    #[error("security identity mismatch")]
    SecurityFailure,
}

/// Decides whether `peer` may become a ready peer of `local`, given what `local` expects.
///
/// Order of checks: identity, generation, security, then the NotRequired rule, so that a
/// wrong node is reported as wrong rather than as merely not needed.
pub fn admit(local: &Identity, expect: &Expectation, peer: &Identity) -> Result<(), Refusal> {
    if peer.generation == 0 {
        return Err(Refusal::GenerationMismatch);
    }
    if let Some(rid) = &expect.rid {
        if *rid != peer.rid {
            return Err(Refusal::IdentityMismatch);
        }
    }
    if let Some(generation) = expect.generation {
        if generation != peer.generation {
            return Err(Refusal::GenerationMismatch);
        }
    }
    if let Some(sec) = &expect.security_identity {
        if *sec != peer.security_identity {
            return Err(Refusal::SecurityFailure);
        }
    }
    if !local.is_server() && !peer.is_server() {
        return Err(Refusal::NotRequired);
    }
    Ok(())
}

impl Identity {
    /// The identity a HELLO or WELCOME carries.
    pub fn from_wire(
        rid: Name,
        generation: NonZeroU64,
        security_identity: Label,
        memberships: Memberships,
    ) -> Identity {
        let mut capabilities = Capabilities::NONE;
        let mut list = Vec::new();
        for m in memberships.into_vec() {
            if is_extension_entry(&m.channel) {
                // An extension entry announces a capability and is not a membership, whatever
                // its role; one this side does not know is ignored.
                if let Some(c) = Capabilities::from_entry(&m.channel) {
                    capabilities = capabilities.union(c);
                }
                continue;
            }
            list.push(Membership {
                role: match m.role {
                    wire::Role::Server => Role::Server,
                    wire::Role::ObjectClient => Role::ObjectClient,
                },
                channel: m.channel.into_string(),
            });
        }
        Identity {
            rid: rid.into_string(),
            generation: generation.get(),
            security_identity: security_identity.into_string(),
            memberships: list,
            capabilities,
        }
    }

    /// The memberships as the wire carries them, followed by one extension entry (role
    /// ObjectClient, channel [`EXTENSION_PREFIX`] and the capability's name) per capability
    /// of `announce` (WIRE.md §8.1). Configuration bounds channel names and keeps
    /// [`EXTENSION_ROOM`] free, so nothing is dropped in practice; entries that would not
    /// fit the wire's bound are left out (extension entries first), never sent broken.
    pub fn wire_memberships(&self, announce: Capabilities) -> Memberships {
        let mut list: Vec<wire::Membership> = self
            .memberships
            .iter()
            .filter(|m| !is_extension_entry(&m.channel))
            .filter_map(|m| {
                Some(wire::Membership {
                    role: match m.role {
                        Role::Server => wire::Role::Server,
                        Role::ObjectClient => wire::Role::ObjectClient,
                    },
                    channel: Name::new(m.channel.clone()).ok()?,
                })
            })
            .take(Memberships::MAX)
            .collect();
        for name in announce.names() {
            if list.len() == Memberships::MAX {
                break;
            }
            if let Ok(channel) = Name::new(format!("{EXTENSION_PREFIX}{name}")) {
                list.push(wire::Membership {
                    role: wire::Role::ObjectClient,
                    channel,
                });
            }
        }
        Memberships::new(list).unwrap_or_default()
    }
}

/// The HELLO a dialler sends on `lane`, announcing `me` and what it expects of the acceptor.
/// Fails if the RID is not a valid wire name.
pub fn hello_record(
    lane: Lane,
    me: &Identity,
    expect: &Expectation,
    config_generation: u64,
) -> Result<wire::Hello, WireError> {
    Ok(wire::Hello {
        lane,
        rid: Name::new(me.rid.clone())?,
        generation: non_zero(me.generation),
        security_identity: Label::new(me.security_identity.clone()).unwrap_or_default(),
        expect_rid: expect.rid.as_ref().and_then(|r| Name::new(r.clone()).ok()),
        expect_generation: expect.generation.and_then(NonZeroU64::new),
        config_generation,
        memberships: me.wire_memberships(me.capabilities),
    })
}

/// The WELCOME an acceptor sends on `lane`, announcing `me`, in answer to a HELLO that
/// announced the capabilities `offered`. The WELCOME announces only the capabilities both
/// sides speak (WIRE.md §8.1), so a version-1 dialler, which offers none, receives exactly
/// version-1 bytes. Fails if the RID is not a valid wire name.
pub fn welcome_record(
    lane: Lane,
    me: &Identity,
    offered: Capabilities,
) -> Result<wire::Welcome, WireError> {
    Ok(wire::Welcome {
        lane,
        rid: Name::new(me.rid.clone())?,
        generation: non_zero(me.generation),
        security_identity: Label::new(me.security_identity.clone()).unwrap_or_default(),
        memberships: me.wire_memberships(me.capabilities.intersection(offered)),
    })
}

/// What a HELLO says: its lane, the dialler's identity, and what the dialler expects of the
/// acceptor.
pub fn from_hello(h: wire::Hello) -> (Lane, Identity, Expectation) {
    let expect = Expectation {
        rid: h.expect_rid.map(Name::into_string),
        generation: h.expect_generation.map(NonZeroU64::get),
        security_identity: None,
    };
    let identity = Identity::from_wire(h.rid, h.generation, h.security_identity, h.memberships);
    (h.lane, identity, expect)
}

/// What a WELCOME says: its lane and the acceptor's identity.
pub fn from_welcome(w: wire::Welcome) -> (Lane, Identity) {
    let identity = Identity::from_wire(w.rid, w.generation, w.security_identity, w.memberships);
    (w.lane, identity)
}

/// A generation is never zero on the wire; an identity that holds zero (never the case for a
/// running node) announces the smallest one.
fn non_zero(generation: u64) -> NonZeroU64 {
    NonZeroU64::new(generation).unwrap_or(NonZeroU64::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rid: &str, generation: u64, server: bool) -> Identity {
        Identity {
            rid: rid.into(),
            generation,
            security_identity: format!("sec-{rid}"),
            memberships: vec![Membership {
                role: if server {
                    Role::Server
                } else {
                    Role::ObjectClient
                },
                channel: "orders".into(),
            }],
            capabilities: Capabilities::NONE,
        }
    }

    #[test]
    fn admits_expected_peer() {
        let expect = Expectation {
            rid: Some("b".into()),
            generation: None,
            security_identity: Some("sec-b".into()),
        };
        assert_eq!(
            admit(&node("a", 1, true), &expect, &node("b", 7, false)),
            Ok(())
        );
    }

    /// MISSION T4: two Object Clients without Server membership never become a pair.
    #[test]
    fn t4_object_client_pair_is_not_required() {
        let r = admit(
            &node("a", 1, false),
            &Expectation::default(),
            &node("b", 2, false),
        );
        assert_eq!(r, Err(Refusal::NotRequired));
    }

    #[test]
    fn rejects_wrong_rid_generation_and_security() {
        let b = node("b", 7, true);
        let a = node("a", 1, true);
        let e = |rid: &str, g: Option<u64>, s: &str| Expectation {
            rid: Some(rid.into()),
            generation: g,
            security_identity: Some(s.into()),
        };
        assert_eq!(
            admit(&a, &e("x", None, "sec-b"), &b),
            Err(Refusal::IdentityMismatch)
        );
        assert_eq!(
            admit(&a, &e("b", Some(8), "sec-b"), &b),
            Err(Refusal::GenerationMismatch)
        );
        assert_eq!(
            admit(&a, &e("b", Some(7), "nope"), &b),
            Err(Refusal::SecurityFailure)
        );
        assert_eq!(admit(&a, &e("b", Some(7), "sec-b"), &b), Ok(()));
    }

    /// MISSION F3: a generation-0 manual intent cannot weaken a descriptor's fence.
    #[test]
    fn f3_manual_generation_zero_cannot_weaken_descriptor_fence() {
        let descriptor = Expectation {
            rid: Some("b".into()),
            generation: Some(7),
            security_identity: Some("sec-b".into()),
        };
        let manual = Expectation {
            rid: None,
            generation: Some(0),
            security_identity: None,
        };
        let fence = manual.fenced_by(&descriptor);
        assert_eq!(fence, descriptor);
        let a = node("a", 1, true);
        assert_eq!(
            admit(&a, &fence, &node("b", 9, true)),
            Err(Refusal::GenerationMismatch)
        );
    }

    #[test]
    fn rejects_generation_zero_peer() {
        let r = admit(
            &node("a", 1, true),
            &Expectation::default(),
            &node("b", 0, true),
        );
        assert_eq!(r, Err(Refusal::GenerationMismatch));
    }

    fn encoded_memberships(m: &Memberships) -> Vec<u8> {
        let w = wire::Welcome {
            lane: Lane::Completion,
            rid: Name::new("x").unwrap(),
            generation: NonZeroU64::MIN,
            security_identity: Label::default(),
            memberships: m.clone(),
        };
        wire::Record::Welcome(w).encode().concat()
    }

    /// X3: capabilities travel as extension entries after the memberships, come back as
    /// capabilities (not memberships), and an acceptor answers a HELLO that offered none with
    /// exactly the WELCOME of a node that speaks none.
    #[test]
    fn x3_capabilities_are_negotiated_in_the_handshake() {
        let mut me = node("a", 1, true);
        me.capabilities = Capabilities::SPOKEN;
        let hello = hello_record(Lane::Application, &me, &Expectation::default(), 0).unwrap();
        assert_eq!(
            hello.memberships.len(),
            1 + Capabilities::SPOKEN.names().count(),
            "one membership, one extension entry per capability"
        );
        let frames = wire::Record::Hello(hello).encode();
        let Ok(wire::Record::Hello(back)) = wire::Record::decode(&frames) else {
            panic!("a HELLO with an extension entry is valid version 1");
        };
        let (_, peer, _) = from_hello(back);
        assert_eq!(peer.capabilities, Capabilities::SPOKEN);
        assert_eq!(
            peer.memberships, me.memberships,
            "an entry is no membership"
        );

        let v1 = node("a", 1, true);
        let to_v1 = welcome_record(Lane::Application, &me, Capabilities::NONE).unwrap();
        let as_v1 = welcome_record(Lane::Application, &v1, Capabilities::CANCEL).unwrap();
        assert_eq!(
            encoded_memberships(&to_v1.memberships),
            encoded_memberships(&as_v1.memberships),
            "a version-1 dialler gets version-1 bytes"
        );
        let to_peer = welcome_record(Lane::Application, &me, Capabilities::CANCEL).unwrap();
        let (_, acceptor) = from_welcome(to_peer);
        assert_eq!(acceptor.capabilities, Capabilities::CANCEL);
        assert_eq!(
            acceptor.capabilities.intersection(me.capabilities),
            Capabilities::CANCEL
        );
    }

    /// X3: an extension entry this side does not know is ignored (a capability it does not
    /// speak), and is never taken for a membership.
    #[test]
    fn x3_unknown_extension_entries_are_ignored() {
        let list = Memberships::new(vec![
            wire::Membership {
                role: wire::Role::Server,
                channel: Name::new("orders").unwrap(),
            },
            wire::Membership {
                role: wire::Role::ObjectClient,
                channel: Name::new("\0from-the-future").unwrap(),
            },
        ])
        .unwrap();
        let id = Identity::from_wire(
            Name::new("b").unwrap(),
            NonZeroU64::MIN,
            Label::default(),
            list,
        );
        assert_eq!(id.capabilities, Capabilities::NONE);
        assert_eq!(id.memberships, vec![Membership::server("orders")]);
        assert_eq!(
            Capabilities::SPOKEN.to_string(),
            "v1+cancel+calls+credit+answers+replayed+pack+ids16"
        );
        assert_eq!(Capabilities::NONE.to_string(), "v1");
    }
}
