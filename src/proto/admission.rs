//! The verdicts of a handshake: what the acceptor does with an unadmitted connection's first
//! record, and what the dialler does with the WELCOME it gets (WIRE.md §5).
//!
//! Pure functions over what arrived and what the node knows; the shell gathers the facts
//! ([`HelloFacts`], [`WelcomeFacts`]), asks, and acts on the answer: it sends the REJECT a
//! [`Refusing`] names and ignores the connection from then on, or it admits the connection and
//! makes it ready. The simulator asks the same functions, so a whole simulated mesh admits
//! exactly as a node does.
//!
//! The identity checks themselves are [`handshake::admit`]'s; this module adds the order of
//! the checks around them (lane, a stopping node, the CURVE key the connection proved, what
//! each side expects of the other) and duplicate resolution between two nodes that dial each
//! other: the connection dialled by the smaller RID is the current one.

use crate::proto::handshake::{self, Expectation, Identity, Refusal};
use crate::proto::security::InputRefusal;
use crate::proto::state::FailureReason;
use crate::proto::wire::{Kind, Lane, RejectReason, WireError};

/// A refusal of an unadmitted connection: one REJECT with this reason and detail, after which
/// the shell ignores everything the connection sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusing {
    /// The REJECT reason.
    pub reason: RejectReason,
    /// The REJECT detail (also logged).
    pub detail: String,
    /// The input refusal to count and list in the snapshot, if this refusal is one (garbage,
    /// a record before HELLO, a security failure); an admission that merely does not match
    /// (NotRequired, a wrong RID or generation, a duplicate) is not.
    pub counted: Option<InputRefusal>,
}

impl Refusing {
    fn new(reason: RejectReason, detail: impl Into<String>) -> Refusing {
        Refusing {
            reason,
            detail: detail.into(),
            counted: None,
        }
    }

    fn counted(reason: RejectReason, detail: impl Into<String>, why: InputRefusal) -> Refusing {
        Refusing {
            reason,
            detail: detail.into(),
            counted: Some(why),
        }
    }
}

/// The acceptor's verdict on a connection whose first record did not decode: REJECT
/// `UnsupportedVersion` for another envelope version, `Protocol` otherwise.
pub fn refuse_malformed(e: &WireError) -> Refusing {
    let reason = match e {
        WireError::UnsupportedVersion { .. } => RejectReason::UnsupportedVersion,
        _ => RejectReason::Protocol,
    };
    Refusing::counted(
        reason,
        format!("malformed record before HELLO: {e}"),
        InputRefusal::Malformed,
    )
}

/// The acceptor's verdict on a connection whose first record is a well-formed record of
/// `kind` other than HELLO: REJECT `Protocol`, except for a REJECT or CLOSE, which end their
/// connection anyway and are not answered (answering one could start an exchange of refusals
/// between two peers that both answer).
pub fn refuse_before_hello(kind: Kind) -> Option<Refusing> {
    if matches!(kind, Kind::Reject | Kind::Close) {
        return None;
    }
    Some(Refusing::counted(
        RejectReason::Protocol,
        format!("{} before HELLO", kind.name()),
        InputRefusal::UnexpectedRecord,
    ))
}

/// Whether this node dials the HELLO's sender on the same lane too (RouteMesh lanes only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnDial {
    /// It does not (or its dial was withdrawn with its descriptor and will not dial again).
    None,
    /// It does: the two connections are duplicates and one of them must stand down.
    Dialling,
}

/// What the acceptor knows when an unadmitted connection opens with a HELLO.
#[derive(Debug, Clone, Copy)]
pub struct HelloFacts<'a> {
    /// The lane of the bound socket the connection arrived on.
    pub socket_lane: Lane,
    /// The lane the HELLO names.
    pub hello_lane: Lane,
    /// Who the HELLO says the dialler is.
    pub peer: &'a Identity,
    /// What the dialler expects of this node (HELLO `expect_rid`, `expect_generation`).
    pub peer_expects: &'a Expectation,
    /// With CURVE, the z85 public key the connection proved in its transport handshake.
    pub verified_key: Option<&'a str>,
    /// Whether this node still admits connections (false once it is stopping).
    pub admitting: bool,
    /// This node's identity.
    pub local: &'a Identity,
    /// What this node expects of the dialler's RID (configuration or descriptor fence).
    pub expect: &'a Expectation,
    /// Whether this node dials the dialler on this lane too.
    pub own_dial: OwnDial,
}

/// The acceptor's verdict on a HELLO, from [`judge_hello`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloVerdict {
    /// Refuse the connection.
    Refuse(Refusing),
    /// Admit the connection: send WELCOME and make it the peer's current connection on the
    /// lane (a connection of the same peer and lane it replaces is done).
    Admit {
        /// This node's own dial to the peer on the lane stands down: the peer's dial is the
        /// current connection (the peer has the smaller RID).
        yield_own_dial: bool,
    },
}

/// Decides what the acceptor does with a HELLO.
///
/// Order: the lane, a stopping node, the CURVE key against the claimed security identity,
/// whether the dialler expects this node, whether this node expects the dialler, then
/// duplicate resolution.
pub fn judge_hello(f: &HelloFacts<'_>) -> HelloVerdict {
    use HelloVerdict::Refuse;
    if f.hello_lane != f.socket_lane {
        return Refuse(Refusing::new(
            RejectReason::LaneMismatch,
            "hello names another lane",
        ));
    }
    if !f.admitting {
        return Refuse(Refusing::new(RejectReason::Draining, "node is stopping"));
    }
    if let Some(key) = f.verified_key {
        let claimed = &f.peer.security_identity;
        if claimed != key {
            let detail = format!(
                "HELLO of {:?} claims security identity {claimed:?}, but the connection holds \
                 key {key}",
                f.peer.rid
            );
            return Refuse(Refusing::counted(
                RejectReason::SecurityFailure,
                detail,
                InputRefusal::SecurityFailure,
            ));
        }
    }
    if let Err(r) = admit_on(f.socket_lane, f.peer, f.peer_expects, f.local) {
        return Refuse(Refusing::new(reject_reason(r), r.to_string()));
    }
    if let Err(r) = admit_on(f.socket_lane, f.local, f.expect, f.peer) {
        if r == Refusal::SecurityFailure {
            let detail = format!(
                "HELLO of {:?}: {r} (it presents {:?}, {:?} is expected of that RID)",
                f.peer.rid,
                f.peer.security_identity,
                f.expect.security_identity.as_deref().unwrap_or_default()
            );
            return Refuse(Refusing::counted(
                reject_reason(r),
                detail,
                InputRefusal::SecurityFailure,
            ));
        }
        return Refuse(Refusing::new(reject_reason(r), r.to_string()));
    }
    let duplicate = f.own_dial == OwnDial::Dialling && f.socket_lane != Lane::ClientServer;
    if duplicate && f.local.rid < f.peer.rid {
        return Refuse(Refusing::new(
            RejectReason::Duplicate,
            "the connection dialled by the smaller RID is current",
        ));
    }
    HelloVerdict::Admit {
        yield_own_dial: duplicate,
    }
}

/// What the dialler knows when the WELCOME of its connection arrives.
#[derive(Debug, Clone, Copy)]
pub struct WelcomeFacts<'a> {
    /// The lane the connection was dialled for.
    pub lane: Lane,
    /// The lane the WELCOME names.
    pub welcome_lane: Lane,
    /// Who the WELCOME says the acceptor is.
    pub peer: &'a Identity,
    /// With CURVE, the z85 public key the connection was dialled with (the transport
    /// handshake proved it).
    pub verified_key: Option<&'a str>,
    /// This node's identity.
    pub local: &'a Identity,
    /// What this node expects of the acceptor.
    pub expect: &'a Expectation,
}

/// Why the dialler does not admit the acceptor, from [`judge_welcome`]: the connection fails
/// with `failure`, after a REJECT with `reject` if one is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WelcomeRefused {
    /// The failure the link records.
    pub failure: FailureReason,
    /// The REJECT to send the acceptor first, telling it why.
    pub reject: Option<RejectReason>,
    /// The failure detail.
    pub detail: String,
}

/// Decides whether the dialler admits the acceptor that sent a WELCOME: `Ok` makes the
/// connection ready.
pub fn judge_welcome(f: &WelcomeFacts<'_>) -> Result<(), WelcomeRefused> {
    if f.welcome_lane != f.lane {
        return Err(WelcomeRefused {
            failure: FailureReason::ProtocolError,
            reject: None,
            detail: "welcome names another lane".into(),
        });
    }
    if let Some(key) = f.verified_key {
        if f.peer.security_identity != key {
            return Err(WelcomeRefused {
                failure: FailureReason::SecurityFailure,
                reject: Some(RejectReason::SecurityFailure),
                detail: format!(
                    "WELCOME of {:?} claims security identity {:?}, but the connection holds \
                     key {key}",
                    f.peer.rid, f.peer.security_identity
                ),
            });
        }
    }
    admit_on(f.lane, f.local, f.expect, f.peer).map_err(|r| WelcomeRefused {
        failure: refusal_failure(r),
        reject: Some(reject_reason(r)),
        detail: r.to_string(),
    })
}

/// Handshake admission on a lane: the NotRequired rule is RouteMesh's; a ClientServer client
/// may call any server.
pub fn admit_on(
    lane: Lane,
    local: &Identity,
    expect: &Expectation,
    peer: &Identity,
) -> Result<(), Refusal> {
    match handshake::admit(local, expect, peer) {
        Err(Refusal::NotRequired) if lane == Lane::ClientServer => Ok(()),
        other => other,
    }
}

/// The REJECT reason for a refused admission.
pub fn reject_reason(r: Refusal) -> RejectReason {
    match r {
        Refusal::NotRequired => RejectReason::NotRequired,
        Refusal::IdentityMismatch => RejectReason::IdentityMismatch,
        Refusal::GenerationMismatch => RejectReason::GenerationMismatch,
        Refusal::SecurityFailure => RejectReason::SecurityFailure,
    }
}

/// The failure a refused admission records.
pub fn refusal_failure(r: Refusal) -> FailureReason {
    match r {
        Refusal::NotRequired => FailureReason::NotRequired,
        Refusal::IdentityMismatch => FailureReason::IdentityMismatch,
        Refusal::GenerationMismatch => FailureReason::GenerationMismatch,
        Refusal::SecurityFailure => FailureReason::SecurityFailure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::handshake::Membership;

    fn node(rid: &str, generation: u64, serves: bool) -> Identity {
        Identity {
            rid: rid.into(),
            generation,
            security_identity: String::new(),
            memberships: if serves {
                vec![Membership::server("pump")]
            } else {
                vec![Membership::object_client("pump")]
            },
            capabilities: crate::proto::handshake::Capabilities::NONE,
        }
    }

    fn facts<'a>(
        local: &'a Identity,
        peer: &'a Identity,
        none: &'a Expectation,
        own_dial: OwnDial,
    ) -> HelloFacts<'a> {
        HelloFacts {
            socket_lane: Lane::Application,
            hello_lane: Lane::Application,
            peer,
            peer_expects: none,
            verified_key: None,
            admitting: true,
            local,
            expect: none,
            own_dial,
        }
    }

    #[test]
    fn t1_the_dial_of_the_smaller_rid_is_current() {
        let none = Expectation::default();
        let a = node("a", 1, true);
        let b = node("b", 2, true);
        // b accepts a's dial while dialling a: a is smaller, so b's own dial yields.
        let at_b = judge_hello(&facts(&b, &a, &none, OwnDial::Dialling));
        assert_eq!(
            at_b,
            HelloVerdict::Admit {
                yield_own_dial: true
            }
        );
        // a accepts b's dial while dialling b: a's own dial is current, b's is refused.
        let HelloVerdict::Refuse(r) = judge_hello(&facts(&a, &b, &none, OwnDial::Dialling)) else {
            panic!("the larger RID's dial was admitted at the smaller RID");
        };
        assert_eq!(r.reason, RejectReason::Duplicate);
        assert_eq!(r.counted, None);
        // Without a dial of its own there is nothing to resolve.
        assert_eq!(
            judge_hello(&facts(&a, &b, &none, OwnDial::None)),
            HelloVerdict::Admit {
                yield_own_dial: false
            }
        );
    }

    #[test]
    fn f3_a_fenced_generation_refuses_another_run() {
        let none = Expectation::default();
        let a = node("a", 1, true);
        let old_b = node("b", 7, true);
        let fence = Expectation {
            rid: Some("b".into()),
            generation: Some(8),
            security_identity: None,
        };
        let mut f = facts(&a, &old_b, &none, OwnDial::None);
        f.expect = &fence;
        let HelloVerdict::Refuse(r) = judge_hello(&f) else {
            panic!("a run the fence does not name was admitted");
        };
        assert_eq!(r.reason, RejectReason::GenerationMismatch);
    }

    #[test]
    fn t4_two_clients_need_no_connection_on_a_mesh_lane_but_may_on_client_server() {
        let none = Expectation::default();
        let a = node("a", 1, false);
        let b = node("b", 2, false);
        let HelloVerdict::Refuse(r) = judge_hello(&facts(&a, &b, &none, OwnDial::None)) else {
            panic!("two object clients were admitted on a mesh lane");
        };
        assert_eq!(r.reason, RejectReason::NotRequired);
        let mut f = facts(&a, &b, &none, OwnDial::Dialling);
        f.socket_lane = Lane::ClientServer;
        f.hello_lane = Lane::ClientServer;
        assert_eq!(
            judge_hello(&f),
            HelloVerdict::Admit {
                yield_own_dial: false
            }
        );
    }

    #[test]
    fn rejects_a_hello_or_welcome_claiming_another_key_than_the_proven_one() {
        let none = Expectation::default();
        let a = node("a", 1, true);
        let mut b = node("b", 2, true);
        b.security_identity = "claimed".into();
        let mut f = facts(&a, &b, &none, OwnDial::None);
        f.verified_key = Some("proven");
        let HelloVerdict::Refuse(r) = judge_hello(&f) else {
            panic!("a HELLO claiming another key was admitted");
        };
        assert_eq!(r.reason, RejectReason::SecurityFailure);
        assert_eq!(r.counted, Some(InputRefusal::SecurityFailure));
        let w = WelcomeFacts {
            lane: Lane::Application,
            welcome_lane: Lane::Application,
            peer: &b,
            verified_key: Some("proven"),
            local: &a,
            expect: &none,
        };
        let refused = judge_welcome(&w).expect_err("a WELCOME claiming another key was admitted");
        assert_eq!(refused.failure, FailureReason::SecurityFailure);
    }

    #[test]
    fn rejects_other_lanes_a_stopping_node_and_records_before_hello() {
        let none = Expectation::default();
        let a = node("a", 1, true);
        let b = node("b", 2, true);
        let mut f = facts(&a, &b, &none, OwnDial::None);
        f.hello_lane = Lane::Completion;
        assert!(
            matches!(judge_hello(&f), HelloVerdict::Refuse(r) if r.reason == RejectReason::LaneMismatch)
        );
        let mut f = facts(&a, &b, &none, OwnDial::None);
        f.admitting = false;
        assert!(
            matches!(judge_hello(&f), HelloVerdict::Refuse(r) if r.reason == RejectReason::Draining)
        );
        assert_eq!(refuse_before_hello(Kind::Close), None);
        assert_eq!(refuse_before_hello(Kind::Reject), None);
        let r = refuse_before_hello(Kind::Message).expect("a MESSAGE before HELLO is refused");
        assert_eq!(r.counted, Some(InputRefusal::UnexpectedRecord));
        let garbage = refuse_malformed(&WireError::UnsupportedVersion { version: 2 });
        assert_eq!(garbage.reason, RejectReason::UnsupportedVersion);
    }
}
