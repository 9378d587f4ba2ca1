//! Handshake admission: who may become a ready peer (MISSION T4, F3, F4).
//!
//! Pure functions over identities; the shell feeds them what arrived in HELLO / WELCOME and
//! what it was told to expect (configuration now, discovery descriptors later), and acts on the
//! verdict: admit, or send REJECT with the reason and close.

use std::num::NonZeroU64;

use serde::Serialize;

use crate::proto::wire::{self, Label, Lane, Memberships, Name, WireError};

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
        Identity {
            rid: rid.into_string(),
            generation: generation.get(),
            security_identity: security_identity.into_string(),
            memberships: memberships
                .into_vec()
                .into_iter()
                .map(|m| Membership {
                    role: match m.role {
                        wire::Role::Server => Role::Server,
                        wire::Role::ObjectClient => Role::ObjectClient,
                    },
                    channel: m.channel.into_string(),
                })
                .collect(),
        }
    }

    /// The memberships as the wire carries them. Configuration bounds channel names, so none
    /// is dropped in practice; a list over the wire's bound is cut rather than sent broken.
    pub fn wire_memberships(&self) -> Memberships {
        let list = self
            .memberships
            .iter()
            .filter_map(|m| {
                Some(wire::Membership {
                    role: match m.role {
                        Role::Server => wire::Role::Server,
                        Role::ObjectClient => wire::Role::ObjectClient,
                    },
                    channel: Name::new(m.channel.clone()).ok()?,
                })
            })
            .collect();
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
        memberships: me.wire_memberships(),
    })
}

/// The WELCOME an acceptor sends on `lane`, announcing `me`. Fails if the RID is not a valid
/// wire name.
pub fn welcome_record(lane: Lane, me: &Identity) -> Result<wire::Welcome, WireError> {
    Ok(wire::Welcome {
        lane,
        rid: Name::new(me.rid.clone())?,
        generation: non_zero(me.generation),
        security_identity: Label::new(me.security_identity.clone()).unwrap_or_default(),
        memberships: me.wire_memberships(),
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
}
