//! Admission's decisions about this node's own peers (MISSION T1, F3): what it expects of a
//! node it dials, what an unadmitted connection's first record leads to
//! ([`Admission::judge_first_record`]: the key it proved, a record other than HELLO, a HELLO),
//! which expectation an inbound HELLO is held to, whether a dial of its own contends with
//! that HELLO, what follows from [`admission::judge_hello`]'s verdict, and what a WELCOME
//! leads to (`Admission::judge_welcome`, crate-private: it reads the I/O thread's link
//! kinds). The configuration reaches it through [`Configured`], a view the shell builds, and the node's
//! own dials through [`OwnDials`], so the core never reads the configuration or the shell's
//! link table itself; the order of what follows from these decisions (HELLO, WELCOME or
//! REJECT, a stood-down dial closed, the step to ready) is the node core's handshake
//! (`proto::node::core`, crate-private), the sending and closing its shell's (the I/O
//! thread's `io/admission.rs`), or a simulated node's glue.

use crate::proto::admission::{
    self, HelloFacts, HelloVerdict, OwnDial, Refusing, WelcomeFacts, WelcomeRefused,
};
use crate::proto::handshake::{Expectation, Identity};
use crate::proto::node::discovered::Discovered;
use crate::proto::node::keys::{LinkKey, Tracked};
use crate::proto::node::link::{Link, LinkKind};
use crate::proto::security::{InputRefusal, PublicKey};
use crate::proto::wire::{Kind, Lane, RejectReason, WireError};

/// A configured RouteMesh peer, as admission reads it.
#[derive(Debug, Clone, Copy)]
pub struct PeerView<'a> {
    /// The RID the peer must present.
    pub rid: &'a str,
    /// The generation the peer must present; `None` or 0 accepts any run.
    pub generation: Option<u64>,
    /// The security identity configured for the peer, if any.
    pub security_identity: Option<&'a str>,
    /// CURVE: the key pinned for the peer's Application endpoint (none without CURVE).
    pub pinned_key: Option<PublicKey>,
}

/// A configured ClientServer server, as admission reads it.
#[derive(Debug, Clone, Copy)]
pub struct ServerView<'a> {
    /// The RID the server must present, if configured with one.
    pub rid: Option<&'a str>,
    /// The server's endpoint (which names its descriptor when no RID is configured).
    pub endpoint: &'a str,
    /// CURVE: the key pinned for the endpoint (none without CURVE).
    pub pinned_key: Option<PublicKey>,
}

/// The configured peers and servers, by their index in the configuration (the index a dial
/// of a peer or server names; peers and servers that discovery added count as configured).
pub trait Configured {
    /// Configured peer `peer`, if there is one.
    fn peer(&self, peer: usize) -> Option<PeerView<'_>>;
    /// The index of the first configured peer with RID `rid`.
    fn peer_index(&self, rid: &str) -> Option<usize>;
    /// Configured server `server`, if there is one.
    fn server(&self, server: usize) -> Option<ServerView<'_>>;
    /// Whether calls to configured peer `peer` may share a BATCH (its `batch_calls`), if
    /// the configuration says; `None` (the default): it does not say.
    fn peer_batches_calls(&self, _peer: usize) -> Option<bool> {
        None
    }
    /// Whether calls to configured server `server` may share a BATCH (its `batch_calls`),
    /// if the configuration says; `None` (the default): it does not say.
    fn server_batches_calls(&self, _server: usize) -> Option<bool> {
        None
    }
}

impl<T: Configured + ?Sized> Configured for &T {
    fn peer(&self, peer: usize) -> Option<PeerView<'_>> {
        (**self).peer(peer)
    }

    fn peer_index(&self, rid: &str) -> Option<usize> {
        (**self).peer_index(rid)
    }

    fn server(&self, server: usize) -> Option<ServerView<'_>> {
        (**self).server(server)
    }

    fn peer_batches_calls(&self, peer: usize) -> Option<bool> {
        (**self).peer_batches_calls(peer)
    }

    fn server_batches_calls(&self, server: usize) -> Option<bool> {
        (**self).server_batches_calls(server)
    }
}

/// One of the node's own dials of a configured peer, as admission reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DialView<D> {
    /// What names the dial (the shell's link).
    pub dial: D,
    /// The peer's descriptor is gone, so the dial will not dial again (automatic mode).
    pub withdrawn: bool,
}

/// The node's own dials of its configured peers, by the peer's index in the configuration
/// and the lane: what duplicate resolution reads of them (MISSION T1).
pub trait OwnDials {
    /// What names one dial (the shell's link key).
    type Dial: Copy;

    /// The node's dial of configured peer `peer` on mesh lane `lane`, if it has one.
    fn mesh_dial(&self, peer: usize, lane: Lane) -> Option<DialView<Self::Dial>>;
}

/// The shell's link table: a peer's dial is its `MeshDial` link.
impl OwnDials for Tracked<LinkKey, Link> {
    type Dial = LinkKey;

    fn mesh_dial(&self, peer: usize, lane: Lane) -> Option<DialView<LinkKey>> {
        let k = self.position(|l| l.kind == LinkKind::MeshDial { peer, lane })?;
        Some(DialView {
            dial: k,
            withdrawn: self[k].withdrawn,
        })
    }
}

/// An inbound HELLO and what the acceptor knows beside it.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    /// The lane of the bound socket the connection arrived on.
    pub socket_lane: Lane,
    /// The lane the HELLO names.
    pub hello_lane: Lane,
    /// Who the HELLO says the dialler is.
    pub peer: &'a Identity,
    /// What the HELLO says the dialler expects of this node (its security identity unused).
    pub peer_expects: &'a Expectation,
    /// With CURVE, the key the connection proved.
    pub verified_key: Option<PublicKey>,
    /// Whether this node still admits connections (false once it is stopping).
    pub admitting: bool,
}

/// What the acceptor does with an inbound HELLO, from [`Admission::judge_inbound`]; `D`
/// names one of the node's dials ([`OwnDials::Dial`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundDecision<D> {
    /// Refuse the connection.
    Refuse(Refusing),
    /// Admit it; `stand_down` is this node's own dial of the peer on the lane, which yields
    /// to the peer's dial (duplicate resolution, MISSION T1).
    Admit {
        /// The dial of ours that stands down, if one does.
        stand_down: Option<D>,
    },
}

/// What the acceptor knows of an unadmitted connection's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials<'a> {
    /// The node does not run CURVE: the connection proved nothing.
    Plain,
    /// The node runs CURVE: the `User-Id` its ZAP handler gave the connection (the key it
    /// proved, in Z85), if the record's frames carried one.
    Curve(Option<&'a str>),
}

/// An unadmitted connection's first record, as the acceptor reads it.
#[derive(Debug, Clone, Copy)]
pub enum FirstRecord<'a> {
    /// A HELLO.
    Hello {
        /// The lane the HELLO names.
        lane: Lane,
        /// Who the HELLO says the dialler is.
        peer: &'a Identity,
        /// What the HELLO says the dialler expects of this node.
        expects: &'a Expectation,
    },
    /// A well-formed record of another kind.
    Other(Kind),
    /// A record that does not decode.
    Malformed(&'a WireError),
}

/// What the acceptor does with an unadmitted connection's first record, from
/// [`Admission::judge_first_record`]; `D` names one of the node's dials ([`OwnDials::Dial`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstVerdict<D> {
    /// Refuse the connection (one REJECT, nothing it sends is looked at afterwards).
    Refuse(Refusing),
    /// A record other than HELLO: from a connection that is not (or no longer) admitted, it
    /// changes nothing (MISSION L6) and counts as stale; it is refused unless it is a REJECT
    /// or CLOSE ([`admission::refuse_before_hello`]).
    Stale(Option<Refusing>),
    /// Admit the connection.
    Admit {
        /// This node's own dial that stands down for it, if one does (MISSION T1).
        stand_down: Option<D>,
        /// With CURVE, the key the connection proved.
        verified_key: Option<PublicKey>,
    },
}

/// What the dialler does with a WELCOME, from [`Admission::judge_welcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WelcomeDecision {
    /// The link is not one of this node's dials: the WELCOME changes nothing.
    Ignore,
    /// The acceptor is who this node expects: the connection is admitted and ready.
    Ready,
    /// It is not: the connection fails, after telling the acceptor why.
    Refuse(WelcomeRefused),
}

/// What a new descriptor fence does to one of its RID's links, from [`Admission::refence`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refenced {
    /// Nothing: not connected, a ready connection of the fenced run, or an inbound
    /// connection still in its handshake (admission holds it to the fence).
    Keep,
    /// A ready connection of another run: closed (MISSION F3: the descriptor names the
    /// current run).
    ReplacedRun,
    /// A dial of ours still in its handshake, started under an older descriptor: closed, to
    /// be dialled again under the new one.
    StaleDial,
}

/// What admission reads of the node: the configuration's view, the descriptor fences and the
/// node's own dials (the shell's link table, `L`), with this node's identity.
pub struct Admission<'a, C, L> {
    /// The configured peers and servers (a view, or a reference to one).
    pub configured: C,
    /// The descriptor fences (automatic mode).
    pub discovered: &'a Discovered,
    /// The node's links, or whatever else answers for its own dials ([`OwnDials`]).
    pub links: &'a L,
    /// This node's identity.
    pub local: &'a Identity,
}

impl<C: Configured, L> Admission<'_, C, L> {
    /// A dialled link's lane and what it expects of the node it dials; `None` for an inbound
    /// link.
    pub(crate) fn dial_expectation(&self, kind: &LinkKind) -> Option<(Lane, Expectation)> {
        match kind {
            LinkKind::MeshDial { peer, lane } => Some((*lane, self.peer_expectation(*peer))),
            LinkKind::ClientDial { server } => {
                Some((Lane::ClientServer, self.server_expectation(*server)))
            }
            LinkKind::Inbound { .. } => None,
        }
    }

    /// What this node expects of configured server `server`: its configured RID (if any)
    /// and the key pinned at its endpoint, fenced by its descriptor.
    pub fn server_expectation(&self, server: usize) -> Expectation {
        let s = self.configured.server(server);
        let manual = Expectation {
            rid: s.and_then(|s| s.rid.map(str::to_owned)),
            // CURVE: the key expected at this endpoint is the server's identity.
            security_identity: s.and_then(|s| s.pinned_key).map(|k| k.to_z85()),
            ..Expectation::default()
        };
        // A descriptor of this server fences it (MISSION F3).
        let fence = s.and_then(|s| self.discovered.server_fence(s.rid, s.endpoint));
        match fence {
            Some(fence) => manual.fenced_by(fence),
            None => manual,
        }
    }

    /// What this node expects of configured peer `peer`: its configured RID, generation and
    /// security identity (or the key pinned at its endpoint), fenced by its descriptor.
    pub fn peer_expectation(&self, peer: usize) -> Expectation {
        let Some(p) = self.configured.peer(peer) else {
            return Expectation::default();
        };
        let manual = Expectation {
            rid: Some(p.rid.to_owned()),
            generation: p.generation.filter(|g| *g != 0),
            // CURVE: the key expected at the peer's endpoints is its identity (the
            // configuration checked that a security_identity, if any, is that key).
            security_identity: p
                .security_identity
                .map(str::to_owned)
                .or_else(|| p.pinned_key.map(|k| k.to_z85())),
        };
        // A descriptor of this peer fences it; a manual entry cannot weaken that (F3).
        match self.discovered.peer_fence(p.rid) {
            Some(fence) => manual.fenced_by(fence),
            None => manual,
        }
    }
}

impl<C: Configured> Admission<'_, C, Tracked<LinkKey, Link>> {
    /// What the fence of `rid`'s descriptor does to each link of that RID (only the inbound
    /// ones if `inbound_only`), in link order: nothing without a fence. A link is the RID's
    /// when it is an inbound link of that RID, a dial of a configured peer with that RID, or
    /// a dial of a configured server whose descriptor names that RID.
    pub(crate) fn refence(&self, rid: &str, inbound_only: bool) -> Vec<(LinkKey, Refenced)> {
        let Some(fence) = self.discovered.fences.get(rid) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for k in self.links.keys() {
            let link = &self.links[k];
            let ours = match &link.kind {
                LinkKind::MeshDial { peer, .. } => {
                    self.configured.peer(*peer).is_some_and(|p| p.rid == rid)
                }
                LinkKind::ClientDial { server } => self
                    .configured
                    .server(*server)
                    .is_some_and(|s| self.discovered.server_rid(s.rid, s.endpoint) == Some(rid)),
                LinkKind::Inbound { rid: r, .. } => r == rid,
            };
            let inbound = matches!(link.kind, LinkKind::Inbound { .. });
            if !ours || (inbound_only && !inbound) {
                continue;
            }
            let verdict = match link.conn.as_ref() {
                Some(c) if c.ready => {
                    let same_run = c.peer.as_ref().is_some_and(|p| {
                        fence.generation.is_none_or(|g| g == p.generation)
                            && fence
                                .security_identity
                                .as_ref()
                                .is_none_or(|s| *s == p.security_identity)
                    });
                    if same_run {
                        Refenced::Keep
                    } else {
                        Refenced::ReplacedRun
                    }
                }
                Some(_) if !inbound => Refenced::StaleDial,
                _ => Refenced::Keep,
            };
            out.push((k, verdict));
        }
        out
    }
}

impl<C: Configured, L> Admission<'_, C, L> {
    /// Decides what the dialler does with the WELCOME of dialled link `kind`'s connection
    /// (whose transport proved `verified_key`, with CURVE): the WELCOME must name the lane,
    /// and the acceptor must be who this node expects of that peer or server
    /// ([`admission::judge_welcome`]).
    pub(crate) fn judge_welcome(
        &self,
        kind: &LinkKind,
        verified_key: Option<PublicKey>,
        welcome_lane: Lane,
        peer: &Identity,
    ) -> WelcomeDecision {
        let Some((lane, expect)) = self.dial_expectation(kind) else {
            return WelcomeDecision::Ignore;
        };
        let verified_z85 = verified_key.map(|key| key.to_z85());
        let verdict = admission::judge_welcome(&WelcomeFacts {
            lane,
            welcome_lane,
            peer,
            verified_key: verified_z85.as_deref(),
            local: self.local,
            expect: &expect,
        });
        match verdict {
            Ok(()) => WelcomeDecision::Ready,
            Err(refused) => WelcomeDecision::Refuse(refused),
        }
    }
}

/// The key an unadmitted connection proved: `Ok(None)` without CURVE, a refusal
/// (`security_failure`) if a CURVE connection holds no verified key (never the case: the ZAP
/// handler answers every CURVE client's key as its `User-Id`).
pub fn verified_key(credentials: Credentials<'_>) -> Result<Option<PublicKey>, Refusing> {
    let id = match credentials {
        Credentials::Plain => return Ok(None),
        Credentials::Curve(id) => id,
    };
    match id.map(str::parse::<PublicKey>) {
        Some(Ok(key)) => Ok(Some(key)),
        _ => {
            let reason = InputRefusal::SecurityFailure;
            Err(Refusing {
                reason: RejectReason::SecurityFailure,
                detail: format!("no verified CURVE key on this connection ({id:?})"),
                counted: Some(reason),
            })
        }
    }
}

impl<C: Configured, L: OwnDials> Admission<'_, C, L> {
    /// Decides what the acceptor does with the first record of an unadmitted connection on a
    /// bound socket of lane `socket_lane`: under CURVE the connection must hold a verified
    /// key ([`verified_key`]); a record that does not decode is refused
    /// ([`admission::refuse_malformed`]), one of another kind is stale, and a HELLO is
    /// judged by [`Admission::judge_inbound`] (`admitting`: the node still admits).
    pub fn judge_first_record(
        &self,
        socket_lane: Lane,
        credentials: Credentials<'_>,
        first: FirstRecord<'_>,
        admitting: bool,
    ) -> FirstVerdict<L::Dial> {
        let verified = match verified_key(credentials) {
            Ok(key) => key,
            Err(r) => return FirstVerdict::Refuse(r),
        };
        let (hello_lane, peer, peer_expects) = match first {
            FirstRecord::Hello {
                lane,
                peer,
                expects,
            } => (lane, peer, expects),
            FirstRecord::Other(kind) => {
                return FirstVerdict::Stale(admission::refuse_before_hello(kind))
            }
            FirstRecord::Malformed(e) => {
                return FirstVerdict::Refuse(admission::refuse_malformed(e))
            }
        };
        let decision = self.judge_inbound(&Inbound {
            socket_lane,
            hello_lane,
            peer,
            peer_expects,
            verified_key: verified,
            admitting,
        });
        match decision {
            InboundDecision::Refuse(r) => FirstVerdict::Refuse(r),
            InboundDecision::Admit { stand_down } => FirstVerdict::Admit {
                stand_down,
                verified_key: verified,
            },
        }
    }

    /// Decides what the acceptor does with an inbound HELLO: the expectation it is held to,
    /// whether a dial of ours contends with it, [`admission::judge_hello`]'s verdict, and
    /// which of our dials stands down if the peer's wins.
    pub fn judge_inbound(&self, hello: &Inbound<'_>) -> InboundDecision<L::Dial> {
        let lane = hello.socket_lane;
        let rid = hello.peer.rid.as_str();
        // What does this node expect of that RID? A configured peer's expectation, else the
        // fence of its descriptor (automatic mode): a ClientServer client is held to its
        // descriptor like a RouteMesh peer (MISSION F3).
        let configured = self.configured.peer_index(rid);
        let expect = match (lane, configured) {
            (Lane::ClientServer, _) | (_, None) => {
                self.discovered.peer_fence(rid).cloned().unwrap_or_default()
            }
            (_, Some(i)) => self.peer_expectation(i),
        };
        let theirs = Expectation {
            rid: hello.peer_expects.rid.clone(),
            generation: hello.peer_expects.generation,
            security_identity: None,
        };
        // A dial withdrawn with its descriptor is not a contender: it will not dial again, so
        // the peer's own dial is the only way back.
        let own_dial = configured
            .filter(|_| lane != Lane::ClientServer)
            .and_then(|i| self.links.mesh_dial(i, lane))
            .filter(|d| !d.withdrawn)
            .map(|d| d.dial);
        let verified_z85 = hello.verified_key.map(|key| key.to_z85());
        let verdict = admission::judge_hello(&HelloFacts {
            socket_lane: lane,
            hello_lane: hello.hello_lane,
            peer: hello.peer,
            peer_expects: &theirs,
            verified_key: verified_z85.as_deref(),
            admitting: hello.admitting,
            local: self.local,
            expect: &expect,
            own_dial: if own_dial.is_some() {
                OwnDial::Dialling
            } else {
                OwnDial::None
            },
        });
        match verdict {
            HelloVerdict::Refuse(r) => InboundDecision::Refuse(r),
            HelloVerdict::Admit { yield_own_dial } => InboundDecision::Admit {
                stand_down: own_dial.filter(|_| yield_own_dial),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::proto::handshake::{Capabilities, Membership};
    use crate::proto::wire::RejectReason;

    /// Configured peers by RID and generation, no servers, no CURVE.
    struct Peers(Vec<(&'static str, Option<u64>)>);

    impl Configured for Peers {
        fn peer(&self, peer: usize) -> Option<PeerView<'_>> {
            let (rid, generation) = *self.0.get(peer)?;
            Some(PeerView {
                rid,
                generation,
                security_identity: None,
                pinned_key: None,
            })
        }

        fn peer_index(&self, rid: &str) -> Option<usize> {
            self.0.iter().position(|(r, _)| *r == rid)
        }

        fn server(&self, _: usize) -> Option<ServerView<'_>> {
            None
        }
    }

    fn node(rid: &str, generation: u64) -> Identity {
        Identity {
            rid: rid.into(),
            generation,
            security_identity: String::new(),
            memberships: vec![Membership::server("pump")],
            capabilities: Capabilities::NONE,
        }
    }

    /// Node b has peer a configured with generation 3 and dials it; a's descriptor fences
    /// generation 8. The fence, not the manual entry, is what b's HELLO asks for and what a's
    /// HELLO is held to; an admitted HELLO of a (the smaller RID) stands b's dial down, unless
    /// that dial was withdrawn with a's descriptor and so contends no more.
    #[test]
    fn t1_f3_the_fence_beats_a_manual_entry_and_only_a_live_dial_of_ours_stands_down() {
        let b = node("b", 1);
        let peers = Peers(vec![("a", Some(3))]);
        let mut discovered = Discovered::default();
        let fence = Expectation {
            rid: Some("a".into()),
            generation: Some(8),
            security_identity: None,
        };
        discovered.fences.insert("a".into(), fence.clone());
        let dial = LinkKind::MeshDial {
            peer: 0,
            lane: Lane::Application,
        };
        let mut links = Tracked::default();
        let dk = links.push(Link::new(dial.clone(), Instant::now()));
        let anything = Expectation::default();
        let judge = |links: &Tracked<LinkKey, Link>, generation: u64| {
            let admission = Admission {
                configured: &peers,
                discovered: &discovered,
                links,
                local: &b,
            };
            let a = node("a", generation);
            admission.judge_inbound(&Inbound {
                socket_lane: Lane::Application,
                hello_lane: Lane::Application,
                peer: &a,
                peer_expects: &anything,
                verified_key: None,
                admitting: true,
            })
        };
        let admission = Admission {
            configured: &peers,
            discovered: &discovered,
            links: &links,
            local: &b,
        };
        assert_eq!(
            admission.dial_expectation(&dial),
            Some((Lane::Application, fence))
        );
        let InboundDecision::Refuse(r) = judge(&links, 3) else {
            panic!("the run the manual entry names was admitted against the fence");
        };
        assert_eq!(r.reason, RejectReason::GenerationMismatch);
        assert_eq!(
            judge(&links, 8),
            InboundDecision::Admit {
                stand_down: Some(dk)
            }
        );
        links[dk].withdrawn = true;
        assert_eq!(
            judge(&links, 8),
            InboundDecision::Admit { stand_down: None }
        );
    }

    /// MISSION W1, W3, T1: an unadmitted connection's first record. Under CURVE a connection
    /// without a verified key is refused before its record is read (counted as a security
    /// failure); a record that does not decode is refused (`UnsupportedVersion` for another
    /// envelope version, counted as malformed); another record is stale, refused unless it is
    /// a REJECT or CLOSE; a HELLO is judged, and admitted with the key the connection proved
    /// and the dial of ours it stands down.
    #[test]
    fn w1_w3_t1_an_unadmitted_connections_first_record_is_refused_stale_or_admitted() {
        let b = node("b", 1);
        let peers = Peers(vec![("a", None)]);
        let discovered = Discovered::default();
        let mut links = Tracked::default();
        let dial = LinkKind::MeshDial {
            peer: 0,
            lane: Lane::Application,
        };
        let dk = links.push(Link::new(dial, Instant::now()));
        let admission = Admission {
            configured: &peers,
            discovered: &discovered,
            links: &links,
            local: &b,
        };
        let key = PublicKey::from_bytes([5; crate::proto::security::KEY_LEN]);
        let z85 = key.to_z85();
        let plain = node("a", 2);
        let curved = Identity {
            security_identity: z85.clone(),
            ..node("a", 2)
        };
        let anything = Expectation::default();
        let hello = |peer| FirstRecord::Hello {
            lane: Lane::Application,
            peer,
            expects: &anything,
        };
        let judge = |credentials, first| {
            admission.judge_first_record(Lane::Application, credentials, first, true)
        };
        let refused = |v: FirstVerdict<LinkKey>| match v {
            FirstVerdict::Refuse(r) => (r.reason, r.counted),
            other => panic!("{other:?}"),
        };
        let security = (
            RejectReason::SecurityFailure,
            Some(InputRefusal::SecurityFailure),
        );
        assert_eq!(
            refused(judge(Credentials::Curve(None), hello(&curved))),
            security
        );
        let FirstVerdict::Refuse(r) = judge(Credentials::Curve(Some("junk")), hello(&curved))
        else {
            panic!("a connection without a verified key was admitted");
        };
        assert_eq!(
            r.detail,
            "no verified CURVE key on this connection (Some(\"junk\"))"
        );
        assert_eq!(
            judge(Credentials::Curve(Some(&z85)), hello(&curved)),
            FirstVerdict::Admit {
                stand_down: Some(dk),
                verified_key: Some(key),
            }
        );
        assert_eq!(
            refused(judge(Credentials::Curve(Some(&z85)), hello(&plain))),
            security,
            "a HELLO that claims another identity than the key"
        );
        assert_eq!(
            judge(Credentials::Plain, hello(&plain)),
            FirstVerdict::Admit {
                stand_down: Some(dk),
                verified_key: None,
            }
        );
        let stopping = admission.judge_first_record(
            Lane::Application,
            Credentials::Plain,
            hello(&plain),
            false,
        );
        assert_eq!(refused(stopping).0, RejectReason::Draining);
        let version = WireError::UnsupportedVersion { version: 9 };
        assert_eq!(
            refused(judge(Credentials::Plain, FirstRecord::Malformed(&version))),
            (
                RejectReason::UnsupportedVersion,
                Some(InputRefusal::Malformed)
            )
        );
        let FirstVerdict::Stale(Some(r)) =
            judge(Credentials::Plain, FirstRecord::Other(Kind::Probe))
        else {
            panic!("a PROBE before HELLO was not refused");
        };
        assert_eq!(
            (r.reason, r.counted),
            (RejectReason::Protocol, Some(InputRefusal::UnexpectedRecord))
        );
        for kind in [Kind::Reject, Kind::Close] {
            assert_eq!(
                judge(Credentials::Plain, FirstRecord::Other(kind)),
                FirstVerdict::Stale(None),
                "{kind:?} is not answered"
            );
        }
    }

    /// MISSION F3, W1: a WELCOME on one of our dials makes it ready if it names the lane and
    /// the acceptor is who we expect (the fence of its descriptor); a WELCOME naming another
    /// lane fails the dial without a REJECT, another run fails it with one, and under CURVE
    /// the acceptor must claim the key the connection proved. A WELCOME on an inbound link
    /// changes nothing.
    #[test]
    fn f3_w1_a_welcome_is_held_to_the_dials_expectation() {
        let b = node("b", 1);
        let peers = Peers(vec![("a", None)]);
        let mut discovered = Discovered::default();
        discovered.fences.insert(
            "a".into(),
            Expectation {
                rid: Some("a".into()),
                generation: Some(8),
                security_identity: None,
            },
        );
        let links: Tracked<LinkKey, Link> = Tracked::default();
        let admission = Admission {
            configured: &peers,
            discovered: &discovered,
            links: &links,
            local: &b,
        };
        let dial = LinkKind::MeshDial {
            peer: 0,
            lane: Lane::Application,
        };
        let run8 = node("a", 8);
        let judge = |kind: &LinkKind, key, lane, peer: &Identity| {
            admission.judge_welcome(kind, key, lane, peer)
        };
        assert_eq!(
            judge(&dial, None, Lane::Application, &run8),
            WelcomeDecision::Ready
        );
        let refused = |d: WelcomeDecision| match d {
            WelcomeDecision::Refuse(r) => (r.failure, r.reject),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused(judge(&dial, None, Lane::Completion, &run8)),
            (crate::proto::state::FailureReason::ProtocolError, None)
        );
        assert_eq!(
            refused(judge(&dial, None, Lane::Application, &node("a", 3))).1,
            Some(RejectReason::GenerationMismatch)
        );
        let key = PublicKey::from_bytes([5; crate::proto::security::KEY_LEN]);
        assert_eq!(
            refused(judge(&dial, Some(key), Lane::Application, &run8)),
            (
                crate::proto::state::FailureReason::SecurityFailure,
                Some(RejectReason::SecurityFailure)
            )
        );
        let inbound = LinkKind::Inbound {
            rid: "a".into(),
            lane: Lane::Application,
        };
        assert_eq!(
            judge(&inbound, None, Lane::Application, &run8),
            WelcomeDecision::Ignore
        );
    }

    /// A connection to `peer`, ready (its handshake named `peer`) or still in its handshake.
    fn connected(peer: Identity, ready: bool) -> crate::proto::node::link::Conn {
        crate::proto::node::link::Conn::for_test(1, ready, ready.then_some(peer))
    }

    /// A descriptor of a's run 8 arrives while node b holds: a ready dial to run 8 (kept), a
    /// ready inbound connection of run 3 (another run: closed), a dial still in its handshake
    /// (started under the older descriptor: closed, to be dialled again), an inbound link of
    /// another RID and a link not connected (untouched). Asked for the inbound links only,
    /// the dials are not named; without a fence nothing is.
    #[test]
    fn f3_f4_a_new_fence_closes_other_runs_and_stale_dials_and_keeps_the_fenced_run() {
        let b = node("b", 1);
        let peers = Peers(vec![("a", None), ("a", None), ("a", None)]);
        let mut discovered = Discovered::default();
        let mut links = Tracked::default();
        let now = Instant::now();
        let dial = |peer, lane| LinkKind::MeshDial { peer, lane };
        let inbound = |rid: &str| LinkKind::Inbound {
            rid: rid.into(),
            lane: Lane::Completion,
        };
        let kept = links.push(Link::new(dial(0, Lane::Application), now));
        links[kept].conn = Some(connected(node("a", 8), true));
        let replaced = links.push(Link::new(inbound("a"), now));
        links[replaced].conn = Some(connected(node("a", 3), true));
        let stale = links.push(Link::new(dial(1, Lane::Completion), now));
        links[stale].conn = Some(connected(node("a", 3), false));
        let other = links.push(Link::new(inbound("c"), now));
        links[other].conn = Some(connected(node("c", 3), true));
        let idle = links.push(Link::new(dial(2, Lane::Application), now));
        let verdicts = |discovered: &Discovered, inbound_only| {
            Admission {
                configured: &peers,
                discovered,
                links: &links,
                local: &b,
            }
            .refence("a", inbound_only)
        };
        assert_eq!(verdicts(&discovered, false), []);
        discovered.fences.insert(
            "a".into(),
            Expectation {
                rid: Some("a".into()),
                generation: Some(8),
                security_identity: None,
            },
        );
        assert_eq!(
            verdicts(&discovered, false),
            [
                (kept, Refenced::Keep),
                (replaced, Refenced::ReplacedRun),
                (stale, Refenced::StaleDial),
                (idle, Refenced::Keep),
            ]
        );
        assert_eq!(
            verdicts(&discovered, true),
            [(replaced, Refenced::ReplacedRun)]
        );
    }
}
