//! The decisions about the node's links that reach beyond one link's own timings (those are
//! [`crate::proto::node::link`]'s): what a dial uses (endpoint, lane, socket, routing ids,
//! the CURVE key the dialled node must hold) and the link's bookkeeping once the shell made
//! the socket, what failing a connection does to its link and to the node's other links
//! (MISSION F1, L6, T1), what a discovery withdrawal or a new fence does to a link (F3, F4),
//! and which record a disconnect sweep sends a connection. The shell (`io/links.rs`,
//! `io/discovery.rs`) makes and closes the sockets, and hands the [`StateEvent`]s to the
//! application.

use std::time::Instant;

use crate::proto::node::admit::{Configured, OwnDials};
use crate::proto::node::discovered::Discovered;
use crate::proto::node::gate::Gate;
use crate::proto::node::keys::{LinkKey, SlotKey, Tracked};
use crate::proto::node::link::{
    close_reason, note, routing_id, Conn, Link, LinkKind, BACKOFF_MAX, BACKOFF_MIN,
};
use crate::proto::security::PublicKey;
use crate::proto::state::{ConnState, FailureReason, Recovery};
use crate::proto::wire::{CloseReason, Lane};
use crate::proto::ConnId;

/// The routing id of the bound Application ROUTER, which a dialled Application lane addresses.
pub(crate) const BOUND_ID_APPLICATION: &[u8] = b"zmesh-application";
/// The routing id of the bound Completion ROUTER, which a dialled Completion lane addresses.
pub(crate) const BOUND_ID_COMPLETION: &[u8] = b"zmesh-completion";
/// The routing id of the bound ClientServer ROUTER.
pub(crate) const BOUND_ID_SERVER: &[u8] = b"zmesh-server";

/// The detail of a dial in progress that a withdrawal closes, and of the state a waiting
/// withdrawn link goes to.
pub(crate) const WITHDRAWN: &str = "descriptor gone: not dialled any more";

/// A change of a link's state, for the application's queue (and the log) as the shell names
/// the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateEvent {
    /// The state the link is in now.
    pub(crate) state: ConnState,
    /// Why, if it failed.
    pub(crate) reason: Option<FailureReason>,
    /// What happened, in words.
    pub(crate) detail: String,
}

/// Where the configured peers' lanes and servers are, as a dial reads them (peers and servers
/// discovery added count as configured), and the CURVE keys pinned for endpoints.
pub(crate) trait DialTargets {
    /// The endpoint of configured peer `peer`'s lane `lane`, if there is such a peer.
    fn peer_endpoint(&self, peer: usize, lane: Lane) -> Option<&str>;
    /// The RID of configured peer `peer`, if there is one.
    fn peer_rid(&self, peer: usize) -> Option<&str>;
    /// The RID (if configured with one) and endpoint of configured server `server`.
    fn server(&self, server: usize) -> Option<(Option<&str>, &str)>;
    /// The key `[security.endpoint_keys]` pins for `endpoint`, if any.
    fn endpoint_key(&self, endpoint: &str) -> Option<PublicKey>;
}

/// The socket a dial opens: a ROUTER for a RouteMesh lane, a DEALER for a ClientServer server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DialSocket {
    /// A ROUTER (a RouteMesh lane).
    Router,
    /// A DEALER (a ClientServer server).
    Dealer,
}

/// What one dial of a link uses, from [`plan_dial`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dial {
    /// The endpoint to connect to.
    pub(crate) endpoint: String,
    /// The lane the connection serves.
    pub(crate) lane: Lane,
    /// The socket to open.
    pub(crate) socket: DialSocket,
    /// CURVE: the key the node at the endpoint must hold (none without CURVE).
    pub(crate) server_key: Option<PublicKey>,
}

impl Dial {
    /// The routing id this node's socket presents for connection `id` of run `generation`.
    pub(crate) fn routing_id(&self, generation: u64, id: ConnId) -> Vec<u8> {
        routing_id(self.lane, generation, id)
    }

    /// The routing id to prefix when sending on the connection: the bound ROUTER's constant
    /// id for a RouteMesh lane, none on a DEALER.
    pub(crate) fn route(&self) -> Option<Vec<u8>> {
        match self.lane {
            Lane::Application => Some(BOUND_ID_APPLICATION.to_vec()),
            Lane::Completion => Some(BOUND_ID_COMPLETION.to_vec()),
            Lane::ClientServer => None,
        }
    }
}

/// What the shell does to dial a link, from [`plan_dial`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DialPlan {
    /// Nothing: an inbound link, or a dial of a configuration entry that is not there.
    Nothing,
    /// Not dialled under CURVE, for the reason given (no key to expect): see
    /// [`Link::refuse_dial`].
    Refuse(String),
    /// Open the socket and connect.
    Dial(Dial),
}

/// Decides what a dial of a link of `kind` uses. `curve` is the bound sockets' gate when the
/// node runs CURVE (its allow-list admits the keys descriptors name), `None` without CURVE.
pub(crate) fn plan_dial<T: DialTargets + ?Sized>(
    kind: &LinkKind,
    targets: &T,
    discovered: &Discovered,
    curve: Option<&Gate>,
) -> DialPlan {
    let Some((endpoint, lane, socket)) = dial_target(kind, targets) else {
        return DialPlan::Nothing;
    };
    // CURVE: the key the node at this endpoint must hold; no key, no dial.
    let server_key = match curve {
        None => None,
        Some(gate) => match dial_key(kind, endpoint, targets, discovered, gate) {
            Ok(key) => Some(key),
            Err(detail) => return DialPlan::Refuse(detail),
        },
    };
    DialPlan::Dial(Dial {
        endpoint: endpoint.to_owned(),
        lane,
        socket,
        server_key,
    })
}

/// The endpoint, lane and socket a link of `kind` dials: `None` for an inbound link, or a dial
/// of a configuration entry that is not there.
pub(crate) fn dial_target<'a, T: DialTargets + ?Sized>(
    kind: &LinkKind,
    targets: &'a T,
) -> Option<(&'a str, Lane, DialSocket)> {
    match kind {
        LinkKind::MeshDial { peer, lane } => targets
            .peer_endpoint(*peer, *lane)
            .map(|ep| (ep, *lane, DialSocket::Router)),
        LinkKind::ClientDial { server } => targets
            .server(*server)
            .map(|(_, ep)| (ep, Lane::ClientServer, DialSocket::Dealer)),
        LinkKind::Inbound { .. } => None,
    }
}

/// The CURVE key a dial of a link of `kind` expects of the node at `endpoint`: the configured
/// one (`[security.endpoint_keys]`), else the one of the peer's descriptor (automatic mode).
/// A descriptor with another key fences the peer all the same (F3): the WELCOME of the node
/// that holds the configured key then fails admission (`security_failure`).
fn dial_key<T: DialTargets + ?Sized>(
    kind: &LinkKind,
    endpoint: &str,
    targets: &T,
    discovered: &Discovered,
    gate: &Gate,
) -> Result<PublicKey, String> {
    if let Some(key) = targets.endpoint_key(endpoint) {
        return Ok(key);
    }
    let fence = match kind {
        LinkKind::MeshDial { peer, .. } => targets
            .peer_rid(*peer)
            .and_then(|rid| discovered.peer_fence(rid)),
        LinkKind::ClientDial { server } => targets
            .server(*server)
            .and_then(|(rid, ep)| discovered.server_fence(rid, ep)),
        LinkKind::Inbound { .. } => None,
    };
    match fence.and_then(|f| f.security_identity.as_deref()) {
        Some(identity) => {
            let key: PublicKey = identity.parse().map_err(|_| {
                format!(
                    "the descriptor's security identity {identity:?} is not a CURVE public \
                     key: the node at {endpoint} does not run CURVE"
                )
            })?;
            // The store is not trusted with keys: a discovered node is dialled only if its
            // key is one this node admits.
            if !gate.allows(&key) {
                return Err(format!(
                    "the descriptor's key {key} for {endpoint} is not on this node's \
                     allow-list"
                ));
            }
            Ok(key)
        }
        None => Err(format!(
            "no CURVE key known for {endpoint} ([security.endpoint_keys] or a descriptor)"
        )),
    }
}

impl Link {
    /// The shell made the socket of `dial` in slot `slot` for connection `id`: the link holds
    /// that connection, not yet ready, and is connecting.
    pub(crate) fn dialled(
        &mut self,
        dial: Dial,
        id: ConnId,
        slot: SlotKey,
        now: Instant,
    ) -> StateEvent {
        self.retry_at = None;
        // The server's key is proven by the CURVE handshake before the first record can
        // arrive.
        self.conn = Some(Conn::new(id, slot, dial.route(), dial.server_key, now));
        note(self.state.handle_connecting(now));
        StateEvent {
            state: ConnState::Connecting,
            reason: None,
            detail: format!("dialling as {id}"),
        }
    }

    /// The shell made a dial's socket but could not watch it (the socket is gone): the link
    /// dials again after [`BACKOFF_MAX`].
    pub(crate) fn unwatched(&mut self, now: Instant) {
        self.retry_at = Some(now + BACKOFF_MAX);
    }

    /// The link cannot be dialled under CURVE (no key to expect, `detail` says why): it shows
    /// `not_connected` with `security_failure` and is not dialled again until a descriptor
    /// brings a new configuration generation. Returns the state change, unless the link had
    /// been refused for the same reason already (nothing changed, nothing to report).
    pub(crate) fn refuse_dial(&mut self, detail: &str, now: Instant) -> Option<StateEvent> {
        self.retry_at = None;
        let already = self.state.state() == ConnState::NotConnected
            && self
                .state
                .last_failure()
                .is_some_and(|f| f.reason == FailureReason::SecurityFailure && f.detail == detail);
        if already {
            return None;
        }
        note(self.state.handle_failure(
            FailureReason::SecurityFailure,
            detail,
            Recovery::Hold,
            now,
        ));
        Some(StateEvent {
            state: ConnState::NotConnected,
            reason: Some(FailureReason::SecurityFailure),
            detail: detail.to_owned(),
        })
    }

    /// The link's descriptor is gone (automatic mode): it is not dialled again. What that does
    /// now depends on its connection: a ready one stays, a dial in progress is closed (the
    /// shell fails the link with [`Withdrawal::Close`]'s reason), and a link waiting to redial
    /// goes `not_connected`. A link withdrawn already changes nothing.
    pub(crate) fn withdraw(&mut self, now: Instant) -> Withdrawal {
        if self.withdrawn {
            return Withdrawal::Nothing;
        }
        self.withdrawn = true;
        match self.conn.as_ref().map(|c| c.ready) {
            Some(true) => Withdrawal::Nothing,
            Some(false) => Withdrawal::Close,
            None if self.state.state() != ConnState::NotConnected => {
                note(self.state.handle_failure(
                    FailureReason::Reconfigured,
                    WITHDRAWN,
                    Recovery::Hold,
                    now,
                ));
                Withdrawal::Report(StateEvent {
                    state: ConnState::NotConnected,
                    reason: Some(FailureReason::Reconfigured),
                    detail: WITHDRAWN.to_owned(),
                })
            }
            None => Withdrawal::Nothing,
        }
    }

    /// A new descriptor of generation `generation` fenced this link's RID (after any
    /// connection it closed was failed): a dialled link with no connection, not terminal and
    /// not stood down is reconfigured for the new generation and dialled at once (once the
    /// close of its last socket is confirmed). Returns the state change, if it was.
    pub(crate) fn refenced(&mut self, generation: u64, now: Instant) -> Option<StateEvent> {
        let inbound = matches!(self.kind, LinkKind::Inbound { .. });
        if inbound || self.conn.is_some() || self.terminal || self.yielded {
            return None;
        }
        // The new run is a new configuration generation of this link.
        self.state.handle_reconfigure(generation, now).ok()?;
        self.retry_at = Some(now);
        Some(StateEvent {
            state: ConnState::Configured,
            reason: None,
            detail: format!("descriptor generation {generation:016x}"),
        })
    }
}

/// What withdrawing a link does now, from [`Link::withdraw`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Withdrawal {
    /// Nothing (a ready connection stays until it fails; a link withdrawn already).
    Nothing,
    /// Its dial in progress is closed: the shell fails the link with
    /// [`FailureReason::Reconfigured`] and [`WITHDRAWN`].
    Close,
    /// The link went `not_connected`.
    Report(StateEvent),
}

/// What failing a link's connection did to the links, from [`fail`]; the shell closes the
/// connection and reports the event.
pub(crate) struct Failed {
    /// The connection taken from the link, to close.
    pub(crate) conn: Conn,
    /// The link's state change.
    pub(crate) event: StateEvent,
    /// Whether the failure counts in `zmesh_link_failures_total` (a stand-down is no
    /// failure).
    pub(crate) counted: bool,
}

/// Takes link `k`'s current connection out of ready (MISSION F1, L6) and records the
/// failure: `unsent` one-way records still in its queue are named in the detail, never
/// silently gone; only a dialled link of a `running` node reconnects
/// ([`Link::record_failure`]). A dial of ours that stood down for this peer's own inbound
/// connection resumes after [`BACKOFF_MIN`] (T1). `None` if the link has no connection.
pub(crate) fn fail<C: Configured + ?Sized>(
    links: &mut Tracked<LinkKey, Link>,
    configured: &C,
    k: LinkKey,
    failure: (FailureReason, &str),
    unsent: usize,
    running: bool,
    now: Instant,
) -> Option<Failed> {
    let (reason, detail) = failure;
    let conn = links.get_mut(k)?.conn.take()?;
    let detail = if unsent > 0 {
        format!("{detail}; {unsent} queued records not sent")
    } else {
        detail.to_owned()
    };
    let state = links[k].record_failure(reason, &detail, running, now);
    // A dial that stood down for this peer's own connection resumes when that one fails.
    if let LinkKind::Inbound { rid, lane } = &links[k].kind {
        let dial = configured
            .peer_index(rid)
            .and_then(|i| links.mesh_dial(i, *lane));
        if let Some(d) = dial {
            let d = &mut links[d.dial];
            if d.yielded {
                d.yielded = false;
                d.retry_at = Some(now + BACKOFF_MIN);
            }
        }
    }
    Some(Failed {
        conn,
        event: StateEvent {
            state,
            reason: Some(reason),
            detail,
        },
        counted: reason != FailureReason::StoodDown,
    })
}

/// Inbound link `k`'s connection is gone: why it fails. It stands down if it was the peer's
/// duplicate dial of a lane another link holds, ready or connecting (T1); otherwise the peer
/// disconnected.
pub(crate) fn gone_inbound<C: Configured + ?Sized>(
    links: &Tracked<LinkKey, Link>,
    configured: &C,
    k: LinkKey,
) -> (FailureReason, &'static str) {
    if lane_held_elsewhere(links, configured, k) {
        (
            FailureReason::StoodDown,
            "the peer stood this dial down for another connection of the lane",
        )
    } else {
        (FailureReason::TransportError, "peer disconnected")
    }
}

/// The peer RID and lane of a RouteMesh link of kind `kind`, dialled or inbound.
pub(crate) fn mesh_lane<'a, C: Configured + ?Sized>(
    configured: &'a C,
    kind: &'a LinkKind,
) -> Option<(&'a str, Lane)> {
    match kind {
        LinkKind::MeshDial { peer, lane } => configured.peer(*peer).map(|p| (p.rid, *lane)),
        LinkKind::Inbound { rid, lane } if *lane != Lane::ClientServer => {
            Some((rid.as_str(), *lane))
        }
        _ => None,
    }
}

/// Whether the RouteMesh peer and lane of link `k` are ready, or connecting, on another
/// link: the connection of `k` was then a duplicate of the pair (T1).
fn lane_held_elsewhere<C: Configured + ?Sized>(
    links: &Tracked<LinkKey, Link>,
    configured: &C,
    k: LinkKey,
) -> bool {
    let Some(lane) = links.get(k).and_then(|l| mesh_lane(configured, &l.kind)) else {
        return false;
    };
    links.iter().any(|(other, l)| {
        other != k
            && (l.state.is_ready() || l.conn.is_some())
            && mesh_lane(configured, &l.kind) == Some(lane)
    })
}

/// The CLOSE this node sends an inbound connection of a shared bound socket that it drops for
/// `reason`: libzmq cannot close one pipe there, so the peer, which owns the socket, is told
/// to. None when the peer closed it in order or the transport lost it (nobody to tell).
pub(crate) fn inbound_close(reason: FailureReason) -> Option<CloseReason> {
    let gone = matches!(
        reason,
        FailureReason::OrderlyClose | FailureReason::TransportError
    );
    (!gone).then(|| close_reason(reason))
}

/// The record a disconnect sweep sends an inbound connection: one that changes nothing at
/// the peer (L2), so that only a vanished pipe shows (`EHOSTUNREACH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SweepRecord {
    /// A repeat of our ACK of the peer's last probe (a duplicate).
    Ack(u64),
    /// Our own pending probe id (a resend).
    Probe(u64),
}

/// Which record a sweep sends connection `conn`, whose probe tracker has `pending` probe
/// pending: none if it has neither an ACK to repeat nor a probe to resend.
pub(crate) fn sweep_record(conn: &Conn, pending: Option<u64>) -> Option<SweepRecord> {
    match (conn.last_peer_probe, pending) {
        (Some(id), _) => Some(SweepRecord::Ack(id)),
        (None, Some(id)) => Some(SweepRecord::Probe(id)),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};
    use std::time::Duration;

    use super::*;
    use crate::proto::handshake::{Capabilities, Expectation, Identity};
    use crate::proto::node::admit::{PeerView, ServerView};
    use crate::proto::node::keys::Key;

    /// Peers (RID, Application endpoint, Completion endpoint), servers (RID, endpoint) and
    /// the keys pinned for endpoints, as a test configures them.
    #[derive(Default)]
    struct Config {
        peers: Vec<(&'static str, &'static str, &'static str)>,
        servers: Vec<(Option<&'static str>, &'static str)>,
        pinned: HashMap<&'static str, PublicKey>,
    }

    impl DialTargets for Config {
        fn peer_endpoint(&self, peer: usize, lane: Lane) -> Option<&str> {
            let (_, app, completion) = self.peers.get(peer)?;
            Some(if lane == Lane::Completion {
                completion
            } else {
                app
            })
        }

        fn peer_rid(&self, peer: usize) -> Option<&str> {
            self.peers.get(peer).map(|p| p.0)
        }

        fn server(&self, server: usize) -> Option<(Option<&str>, &str)> {
            self.servers.get(server).copied()
        }

        fn endpoint_key(&self, endpoint: &str) -> Option<PublicKey> {
            self.pinned.get(endpoint).copied()
        }
    }

    impl Configured for Config {
        fn peer(&self, peer: usize) -> Option<PeerView<'_>> {
            let (rid, ..) = self.peers.get(peer)?;
            Some(PeerView {
                rid,
                generation: None,
                security_identity: None,
                pinned_key: None,
            })
        }

        fn peer_index(&self, rid: &str) -> Option<usize> {
            self.peers.iter().position(|p| p.0 == rid)
        }

        fn server(&self, server: usize) -> Option<ServerView<'_>> {
            let (rid, endpoint) = self.servers.get(server)?;
            Some(ServerView {
                rid: *rid,
                endpoint,
                pinned_key: None,
            })
        }
    }

    fn config() -> Config {
        Config {
            peers: vec![("a", "tcp://a:1", "tcp://a:2")],
            servers: vec![(None, "tcp://s:1")],
            pinned: HashMap::new(),
        }
    }

    fn mesh(lane: Lane) -> LinkKind {
        LinkKind::MeshDial { peer: 0, lane }
    }

    fn fence(rid: &str, generation: u64, key: &str) -> Expectation {
        Expectation {
            rid: Some(rid.into()),
            generation: Some(generation),
            security_identity: Some(key.into()),
        }
    }

    /// Without CURVE a dial uses the lane's endpoint, a ROUTER addressing the bound lane's
    /// routing id for a RouteMesh lane and a DEALER for a server, and no key; an inbound link
    /// and a dial of an entry that is not configured dial nothing.
    #[test]
    fn f1_a_dial_uses_the_lanes_endpoint_socket_and_routing_ids() {
        let cfg = config();
        let none = Discovered::default();
        let plan = |kind: &LinkKind| plan_dial(kind, &cfg, &none, None);
        let DialPlan::Dial(app) = plan(&mesh(Lane::Application)) else {
            panic!("the Application lane is not dialled");
        };
        assert_eq!(
            (app.endpoint.as_str(), app.lane, app.socket, app.server_key),
            ("tcp://a:1", Lane::Application, DialSocket::Router, None)
        );
        assert_eq!(app.route(), Some(BOUND_ID_APPLICATION.to_vec()));
        assert_eq!(
            app.routing_id(7, ConnId(3)),
            routing_id(Lane::Application, 7, ConnId(3))
        );
        let DialPlan::Dial(completion) = plan(&mesh(Lane::Completion)) else {
            panic!("the Completion lane is not dialled");
        };
        assert_eq!(completion.endpoint, "tcp://a:2");
        assert_eq!(completion.route(), Some(BOUND_ID_COMPLETION.to_vec()));
        let DialPlan::Dial(server) = plan(&LinkKind::ClientDial { server: 0 }) else {
            panic!("the server is not dialled");
        };
        assert_eq!(
            (server.endpoint.as_str(), server.lane, server.socket),
            ("tcp://s:1", Lane::ClientServer, DialSocket::Dealer)
        );
        assert_eq!(server.route(), None);
        let inbound = LinkKind::Inbound {
            rid: "a".into(),
            lane: Lane::Application,
        };
        assert_eq!(plan(&inbound), DialPlan::Nothing);
        let gone = LinkKind::MeshDial {
            peer: 5,
            lane: Lane::Application,
        };
        assert_eq!(plan(&gone), DialPlan::Nothing);
        assert_eq!(plan(&LinkKind::ClientDial { server: 5 }), DialPlan::Nothing);
    }

    /// Under CURVE the key a dial expects is the one pinned for the endpoint, else its
    /// descriptor's, and only while that key is on the allow-list (F3); a descriptor whose
    /// identity is no key, or no key at all, refuses the dial and says why.
    #[test]
    fn f3_a_curve_dial_expects_the_pinned_key_else_an_allowed_descriptor_key() {
        let pinned = PublicKey::from_bytes([1; 32]);
        let described = PublicKey::from_bytes([2; 32]);
        let mut cfg = config();
        let mut discovered = Discovered::default();
        let open = Gate::new(BTreeSet::from([described]));
        let closed = Gate::new(BTreeSet::new());
        let key_of =
            |cfg: &Config, discovered: &Discovered, gate: &Gate, kind: &LinkKind| match plan_dial(
                kind,
                cfg,
                discovered,
                Some(gate),
            ) {
                DialPlan::Dial(d) => Ok(d.server_key),
                DialPlan::Refuse(why) => Err(why),
                DialPlan::Nothing => panic!("nothing planned"),
            };
        let app = mesh(Lane::Application);
        let server = LinkKind::ClientDial { server: 0 };
        let Err(why) = key_of(&cfg, &discovered, &open, &app) else {
            panic!("dialled without a key");
        };
        assert!(why.starts_with("no CURVE key known for tcp://a:1"), "{why}");
        discovered
            .fences
            .insert("a".into(), fence("a", 4, &described.to_z85()));
        assert_eq!(key_of(&cfg, &discovered, &open, &app), Ok(Some(described)));
        let Err(why) = key_of(&cfg, &discovered, &closed, &app) else {
            panic!("dialled a key the allow-list does not hold");
        };
        assert!(why.contains("is not on this node's allow-list"), "{why}");
        // A server configured without a RID is fenced by the descriptor of its endpoint.
        assert!(key_of(&cfg, &discovered, &open, &server).is_err());
        discovered
            .endpoint_owner
            .insert("tcp://s:1".into(), "a".into());
        assert_eq!(
            key_of(&cfg, &discovered, &open, &server),
            Ok(Some(described))
        );
        // The pinned key wins, whatever the descriptor says and the allow-list holds.
        cfg.pinned.insert("tcp://a:1", pinned);
        assert_eq!(key_of(&cfg, &discovered, &closed, &app), Ok(Some(pinned)));
        discovered
            .fences
            .insert("a".into(), fence("a", 5, "plain-text identity"));
        let completion = mesh(Lane::Completion);
        let Err(why) = key_of(&cfg, &discovered, &open, &completion) else {
            panic!("dialled a node whose identity is no key");
        };
        assert!(why.contains("does not run CURVE"), "{why}");
    }

    /// A socket made: the link holds a connection not ready, with the route and the key of
    /// the dial, and is connecting; not watched, it dials again after the longest backoff.
    /// A refused dial reports `security_failure` once per reason and is not retried.
    #[test]
    fn f1_f3_a_dial_made_connects_and_a_refused_one_reports_once() {
        let t0 = Instant::now();
        let key = PublicKey::from_bytes([3; 32]);
        let mut l = Link::new(mesh(Lane::Completion), t0);
        let dial = Dial {
            endpoint: "tcp://a:2".into(),
            lane: Lane::Completion,
            socket: DialSocket::Router,
            server_key: Some(key),
        };
        let event = l.dialled(dial, ConnId(9), SlotKey::from_index(4), t0);
        assert_eq!(
            event,
            StateEvent {
                state: ConnState::Connecting,
                reason: None,
                detail: format!("dialling as {}", ConnId(9)),
            }
        );
        assert_eq!(l.state.state(), ConnState::Connecting);
        assert_eq!(l.retry_at, None);
        let c = l
            .conn
            .as_ref()
            .map(|c| (c.id, c.slot, c.route.clone(), c.ready, c.verified_key));
        assert_eq!(
            c,
            Some((
                ConnId(9),
                SlotKey::from_index(4),
                Some(BOUND_ID_COMPLETION.to_vec()),
                false,
                Some(key)
            ))
        );
        l.unwatched(t0);
        assert_eq!(l.retry_at, Some(t0 + BACKOFF_MAX));

        let mut l = Link::new(mesh(Lane::Application), t0);
        let event = l.refuse_dial("no key", t0);
        assert_eq!(
            event.map(|e| (e.state, e.reason)),
            Some((
                ConnState::NotConnected,
                Some(FailureReason::SecurityFailure)
            ))
        );
        assert_eq!(l.retry_at, None);
        assert!(!l.is_redial_due(t0 + Duration::from_secs(60)));
        assert_eq!(l.refuse_dial("no key", t0), None, "reported once");
        assert!(l.refuse_dial("another reason", t0).is_some());
    }

    fn identity(rid: &str) -> Identity {
        Identity {
            rid: rid.into(),
            generation: 1,
            security_identity: String::new(),
            memberships: Vec::new(),
            capabilities: Capabilities::NONE,
        }
    }

    /// Failing a connection takes it from its link, names the records it leaves unsent and
    /// counts unless it is a stand-down; the failure of the peer's inbound connection resumes
    /// the dial of ours that stood down for it, after the shortest backoff (T1). A link
    /// without a connection has nothing to fail.
    #[test]
    fn f1_l6_t1_failing_a_connection_resumes_the_dial_that_yielded_to_it() {
        let t0 = Instant::now();
        let cfg = config();
        let mut links = Tracked::default();
        let dial = links.push(Link::new(mesh(Lane::Application), t0));
        links[dial].yielded = true;
        links[dial].retry_at = None;
        let inbound = links.push(Link::new(
            LinkKind::Inbound {
                rid: "a".into(),
                lane: Lane::Application,
            },
            t0,
        ));
        links[inbound].conn = Some(Conn::for_test(2, true, Some(identity("a"))));
        assert!(fail(
            &mut links,
            &cfg,
            dial,
            (FailureReason::TransportError, "x"),
            0,
            true,
            t0
        )
        .is_none());

        let failed = fail(
            &mut links,
            &cfg,
            inbound,
            (FailureReason::TransportError, "peer disconnected"),
            3,
            true,
            t0,
        );
        let Some(failed) = failed else {
            panic!("the connection did not fail");
        };
        assert_eq!(failed.conn.id, ConnId(2));
        assert!(failed.counted);
        assert_eq!(
            failed.event,
            StateEvent {
                state: ConnState::NotConnected,
                reason: Some(FailureReason::TransportError),
                detail: "peer disconnected; 3 queued records not sent".into(),
            }
        );
        assert!(links[inbound].conn.is_none());
        assert!(!links[dial].yielded);
        assert_eq!(links[dial].retry_at, Some(t0 + BACKOFF_MIN));

        links[dial].conn = Some(Conn::for_test(3, false, None));
        let failed = fail(
            &mut links,
            &cfg,
            dial,
            (FailureReason::StoodDown, "duplicate"),
            0,
            true,
            t0,
        );
        let failed = failed.map(|f| (f.counted, f.event.state, f.event.detail));
        assert_eq!(
            failed,
            Some((false, ConnState::Reconnecting, "duplicate".to_owned()))
        );
    }

    /// A vanished inbound connection stands down when another link holds its peer's lane,
    /// ready or connecting (it was the peer's duplicate dial, T1); otherwise the peer
    /// disconnected.
    #[test]
    fn t1_a_gone_inbound_connection_stands_down_only_for_a_lane_held_elsewhere() {
        let t0 = Instant::now();
        let cfg = config();
        let mut links = Tracked::default();
        let dial = links.push(Link::new(mesh(Lane::Application), t0));
        let other_lane = links.push(Link::new(mesh(Lane::Completion), t0));
        links[other_lane].conn = Some(Conn::for_test(1, true, None));
        let inbound = links.push(Link::new(
            LinkKind::Inbound {
                rid: "a".into(),
                lane: Lane::Application,
            },
            t0,
        ));
        assert_eq!(
            gone_inbound(&links, &cfg, inbound),
            (FailureReason::TransportError, "peer disconnected")
        );
        links[dial].conn = Some(Conn::for_test(2, false, None));
        assert_eq!(
            gone_inbound(&links, &cfg, inbound).0,
            FailureReason::StoodDown
        );
    }

    /// Withdrawal (the descriptor is gone): a ready connection stays, a dial in progress is
    /// closed, a waiting link goes `not_connected` once; a refenced dialled link without a
    /// connection is reconfigured and due at once, an inbound or connected one is not.
    #[test]
    fn f3_f4_withdrawal_and_a_new_fence_by_the_links_connection() {
        let t0 = Instant::now();
        let mut ready = Link::new(mesh(Lane::Application), t0);
        ready.conn = Some(Conn::for_test(1, true, None));
        assert_eq!(ready.withdraw(t0), Withdrawal::Nothing);
        assert!(ready.withdrawn);
        let mut dialling = Link::new(mesh(Lane::Application), t0);
        dialling.conn = Some(Conn::for_test(1, false, None));
        assert_eq!(dialling.withdraw(t0), Withdrawal::Close);
        assert_eq!(dialling.withdraw(t0), Withdrawal::Nothing, "withdrawn once");
        let mut waiting = Link::new(mesh(Lane::Application), t0);
        note(waiting.state.handle_connecting(t0));
        let Withdrawal::Report(event) = waiting.withdraw(t0) else {
            panic!("a waiting link did not report its withdrawal");
        };
        assert_eq!(
            (event.state, event.reason, event.detail.as_str()),
            (
                ConnState::NotConnected,
                Some(FailureReason::Reconfigured),
                WITHDRAWN
            )
        );
        assert!(waiting.is_removed());
        let mut refused = Link::new(mesh(Lane::Application), t0);
        assert!(refused.refuse_dial("no key", t0).is_some());
        assert_eq!(
            refused.withdraw(t0),
            Withdrawal::Nothing,
            "not connected already"
        );

        let t1 = t0 + Duration::from_secs(1);
        let mut waiting = Link::new(mesh(Lane::Application), t0);
        waiting.retry_at = None;
        let event = waiting.refenced(0x2a, t1);
        assert_eq!(
            event.map(|e| (e.state, e.detail)),
            Some((
                ConnState::Configured,
                "descriptor generation 000000000000002a".to_owned()
            ))
        );
        assert_eq!(waiting.retry_at, Some(t1));
        assert_eq!(dialling.refenced(0x2a, t1), None, "connected");
        let mut yielded = Link::new(mesh(Lane::Application), t0);
        yielded.yielded = true;
        assert_eq!(yielded.refenced(0x2a, t1), None, "stood down");
        let mut inbound = Link::new(
            LinkKind::Inbound {
                rid: "a".into(),
                lane: Lane::Application,
            },
            t0,
        );
        assert_eq!(inbound.refenced(0x2a, t1), None, "never dialled");
    }

    /// An inbound connection dropped for a failure of ours is told why with a CLOSE (L6), one
    /// the peer closed or the transport lost is not.
    #[test]
    fn l6_an_inbound_connection_dropped_by_us_is_told_to_close() {
        assert_eq!(inbound_close(FailureReason::OrderlyClose), None);
        assert_eq!(inbound_close(FailureReason::TransportError), None);
        assert_eq!(
            inbound_close(FailureReason::StoodDown),
            Some(CloseReason::Replaced)
        );
        assert_eq!(
            inbound_close(FailureReason::DeadlineExceeded),
            Some(CloseReason::DeadlineExceeded)
        );
        assert_eq!(
            inbound_close(FailureReason::Reconfigured),
            Some(CloseReason::ProtocolError)
        );
    }

    /// A sweep repeats our ACK of the peer's last probe, else resends our pending probe, and
    /// sends nothing to a connection with neither.
    #[test]
    fn l6_a_sweep_sends_a_record_that_changes_nothing() {
        let mut c = Conn::for_test(1, true, None);
        assert_eq!(sweep_record(&c, None), None);
        assert_eq!(sweep_record(&c, Some(5)), Some(SweepRecord::Probe(5)));
        c.last_peer_probe = Some(8);
        assert_eq!(sweep_record(&c, Some(5)), Some(SweepRecord::Ack(8)));
        assert_eq!(sweep_record(&c, None), Some(SweepRecord::Ack(8)));
    }
}
