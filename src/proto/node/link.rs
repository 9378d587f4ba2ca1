//! A link and its connection: a link is a configured peer lane, a configured server, or a
//! peer's inbound connection, and holds at most one current physical connection ([`Conn`]).
//! The link's own timings (handshake timeout, reconnect backoff, close confirmation) and the
//! deadline they give are here, and so is what a failure does to the link
//! ([`Link::record_failure`]: the count, terminal failures, recovery and backoff); dialling,
//! closing and the effects of a failure on other parts are the thread's (`io/links.rs`).

use std::time::{Duration, Instant};

use crate::proto::handshake::{Identity, Role};
use crate::proto::liveness::{self, PEER_DEADLINE};
use crate::proto::node::keys::SlotKey;
use crate::proto::node::routes::LinkRoutes;
use crate::proto::node::source::Source;
use crate::proto::security::PublicKey;
use crate::proto::state::{ConnState, FailureReason, LinkKind as StateKind, LinkState, Recovery};
use crate::proto::wire::{CloseReason, Lane, RejectReason};
use crate::proto::ConnId;

/// A dialled connection that is not ready this long after its socket was created is closed
/// and dialled again (a connect that never completes, a peer that never answers HELLO).
pub const HANDSHAKE_TIMEOUT: Duration = PEER_DEADLINE;

/// First reconnect delay after a failure; doubles per consecutive failure.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);

/// Largest reconnect delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Longest wait for a closed dialled socket's monitor to confirm the close before a
/// replacement is dialled anyway (the monitor itself is kept until libzmq confirms). libzmq
/// confirms within milliseconds (`MONITOR_STOPPED`, once the socket is destroyed); the bound
/// is for a reaper that is far behind.
pub const CLOSE_CONFIRM_MAX: Duration = Duration::from_secs(1);

/// Where a link's records go. Public: discovery's operations
/// ([`crate::proto::node::discovered::DiscoveryOp`]) name links by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    /// A RouteMesh lane this node dials (index into config.peers).
    MeshDial {
        /// The peer's index in the configuration.
        peer: usize,
        /// The lane dialled.
        lane: Lane,
    },
    /// A ClientServer server this node dials (index into config.servers).
    ClientDial {
        /// The server's index in the configuration.
        server: usize,
    },
    /// A connection accepted on a bound socket, keyed by peer RID and lane.
    Inbound {
        /// The peer's RID.
        rid: String,
        /// The lane it connected on.
        lane: Lane,
    },
}

/// The channel of each configured ClientServer server, by its index in the configuration (what
/// [`LinkKind::ClientDial`] names).
pub(crate) trait ServerChannels {
    /// The channel of configured server `server`, if there is one.
    fn channel(&self, server: usize) -> Option<&str>;
}

/// One physical connection of a link.
pub(crate) struct Conn {
    pub(crate) id: ConnId,
    pub(crate) slot: SlotKey,
    /// The routing id to prefix when sending (the peer's id on a bound socket, the bound
    /// socket's constant id on a dialled ROUTER, none on a DEALER).
    pub(crate) route: Option<Vec<u8>>,
    /// Dialled connections: when the socket was created (handshake timeout).
    pub(crate) opened_at: Instant,
    pub(crate) hello_sent: bool,
    pub(crate) ready: bool,
    pub(crate) peer: Option<Identity>,
    /// Who this connection's application records come from (once ready): built once, so a
    /// delivery costs a reference count, not a copy of the peer's RID.
    pub(crate) source: Option<Source>,
    /// This connection's probe tracker in the node's liveness table (once ready).
    pub(crate) live: Option<liveness::LinkKey>,
    /// The last probe id the peer sent on this connection (re-ACKed by disconnect sweeps).
    pub(crate) last_peer_probe: Option<u64>,
    /// PROBEs and ACKs a full pipe refused, sent before anything else once it has room.
    pub(crate) held: Vec<Vec<Vec<u8>>>,
    /// The peer's CURVE public key, verified by the transport; `None` without
    /// CURVE, where the peer's security identity is only what its handshake claimed.
    pub(crate) verified_key: Option<PublicKey>,
    /// Connection notices a dialled ROUTER received in band (`ROUTER_NOTIFY`): the
    /// first says the connection attached, any later one that it is gone.
    pub(crate) notices: u8,
}

impl Conn {
    /// Connection `id` on slot `slot`, opened at `now`, sending with `route`: its HELLO not
    /// sent, not ready, nothing received yet; `verified_key` is the CURVE key the transport
    /// proved, if any.
    pub(crate) fn new(
        id: ConnId,
        slot: SlotKey,
        route: Option<Vec<u8>>,
        verified_key: Option<PublicKey>,
        now: Instant,
    ) -> Conn {
        Conn {
            id,
            slot,
            route,
            opened_at: now,
            hello_sent: false,
            ready: false,
            peer: None,
            source: None,
            live: None,
            last_peer_probe: None,
            held: Vec::new(),
            verified_key,
            notices: 0,
        }
    }
}

/// What a connection notice of libzmq (`ROUTER_NOTIFY`) a dialled ROUTER received in band
/// means ([`Conn::handle_router_notice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouterNotice {
    /// The first: the connection attached (its handshake is done and the socket knows the
    /// peer's routing id), so HELLO can go.
    Attached,
    /// Any later one: the connection is gone (MISSION L6: at once), whether the notice says
    /// so itself or is the attach of a reconnection libzmq made after it (which never
    /// carries this link's records).
    Gone,
}

impl Conn {
    /// A connection notice this dialled ROUTER's connection received in band, in order with
    /// the peer's records (see [`RouterNotice`]).
    pub(crate) fn handle_router_notice(&mut self) -> RouterNotice {
        self.notices = self.notices.saturating_add(1);
        if self.notices > 1 {
            RouterNotice::Gone
        } else {
            RouterNotice::Attached
        }
    }
}

/// Where a link's one-way records are published for the application's sends, if it carries
/// any ([`Link::send_route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendRoute<'a> {
    /// By the peer's (or client's) RID.
    Peer(&'a str),
    /// Among the ready servers of a channel.
    Server(&'a str),
}

pub(crate) struct Link {
    pub(crate) kind: LinkKind,
    pub(crate) state: LinkState,
    pub(crate) conn: Option<Conn>,
    /// Reconnect not before this instant (dialled links).
    pub(crate) retry_at: Option<Instant>,
    /// When this link closed a socket whose close is not yet confirmed; no new dial until it
    /// is (the socket's monitor waits in the socket set, `SocketSet::closing`).
    pub(crate) closing: Option<Instant>,
    pub(crate) failures_in_row: u32,
    /// NotRequired is terminal for this configuration generation (MISSION T4).
    pub(crate) terminal: bool,
    /// This dialled lane is served by the peer's inbound connection (duplicate resolution).
    pub(crate) yielded: bool,
    pub(crate) records: u64,
    pub(crate) last_receive: Option<Instant>,
    /// Automatic mode: the peer's descriptor is gone, so the link is not dialled again (an
    /// established connection stays until it fails; see `io::discovery`).
    pub(crate) withdrawn: bool,
}

impl Link {
    /// A new link of `kind` at `now`, not connected, due to be dialled at once if it is a
    /// dialled one.
    pub(crate) fn new(kind: LinkKind, now: Instant) -> Link {
        Link {
            kind,
            state: LinkState::new(StateKind::Peer, 0, now),
            conn: None,
            retry_at: Some(now),
            closing: None,
            failures_in_row: 0,
            terminal: false,
            yielded: false,
            records: 0,
            last_receive: None,
            withdrawn: false,
        }
    }

    /// Whether this link will be dialled again at `retry_at`: a dialled link without a
    /// connection, not stood down, whose old socket's close was confirmed. The poll timeout
    /// takes `retry_at` only for such links: an inbound link is never dialled, and a timer
    /// nothing acts on would make every poll return at once (the loop would spin).
    pub(crate) fn waits_to_redial(&self) -> bool {
        self.conn.is_none()
            && !self.terminal
            && !self.yielded
            && !self.withdrawn
            && self.closing.is_none()
            && !matches!(self.kind, LinkKind::Inbound { .. })
    }

    /// The earliest of this link's timers: its handshake timeout while a connection is not
    /// ready, its redial while it waits to redial, its close confirmation while a close is
    /// unconfirmed. What the timer pass acts on, and nothing else: a deadline nothing acts on
    /// would make every poll return at once.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        [
            self.handshake_deadline(),
            self.redial_at(),
            self.close_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When a connection that is not ready yet has taken too long to become ready.
    fn handshake_deadline(&self) -> Option<Instant> {
        self.conn
            .as_ref()
            .filter(|c| !c.ready)
            .map(|c| c.opened_at + HANDSHAKE_TIMEOUT)
    }

    /// When this link dials again, if it waits to.
    fn redial_at(&self) -> Option<Instant> {
        self.retry_at.filter(|_| self.waits_to_redial())
    }

    /// When an unconfirmed close stops holding back the next dial.
    fn close_deadline(&self) -> Option<Instant> {
        self.closing.map(|t| t + CLOSE_CONFIRM_MAX)
    }

    /// At `now` the connection, not ready yet, took longer than [`HANDSHAKE_TIMEOUT`]: it
    /// fails and the link dials again.
    pub(crate) fn is_handshake_overdue(&self, now: Instant) -> bool {
        self.handshake_deadline().is_some_and(|t| now >= t)
    }

    /// At `now` the link is due to be dialled again ([`Link::waits_to_redial`]).
    pub(crate) fn is_redial_due(&self, now: Instant) -> bool {
        self.redial_at().is_some_and(|t| now >= t)
    }

    /// At `now` libzmq has not confirmed the close of the link's old socket within
    /// [`CLOSE_CONFIRM_MAX`]: the link may dial again without waiting for it.
    pub(crate) fn is_close_overdue(&self, now: Instant) -> bool {
        self.close_deadline().is_some_and(|t| now >= t)
    }

    /// Records the failure of this link's connection (taken from it already) in its state:
    /// a stand-down is no failure of the peer's (it does not count towards the backoff), a
    /// `not_required` refusal is terminal for this configuration generation (T4), and only
    /// a dialled link of a running node whose descriptor is not gone reconnects (an inbound
    /// link waits for the peer to dial again). The next dial is not before the backoff of
    /// the failures in a row. Returns the state the link is in now.
    pub(crate) fn record_failure(
        &mut self,
        reason: FailureReason,
        detail: &str,
        running: bool,
        now: Instant,
    ) -> ConnState {
        if reason != FailureReason::StoodDown {
            self.failures_in_row = self.failures_in_row.saturating_add(1);
        }
        self.terminal |= reason == FailureReason::NotRequired;
        let recovery =
            if running && !self.withdrawn && !matches!(self.kind, LinkKind::Inbound { .. }) {
                Recovery::Reconnect
            } else {
                Recovery::Hold
            };
        note(self.state.handle_failure(reason, detail, recovery, now));
        self.retry_at = Some(now + backoff(self.failures_in_row));
        self.state.state()
    }

    /// A discovered intent whose descriptor is gone and that holds nothing any more: no
    /// connection, no close to confirm. It is removed: it is never dialled and leaves the
    /// snapshot. Its entry stays in the link table only so that the same RID's descriptor,
    /// if it comes back, takes it up again (link keys are never reused for another peer).
    pub(crate) fn is_removed(&self) -> bool {
        self.withdrawn && self.conn.is_none() && self.closing.is_none()
    }

    /// What this link contributes to the call routes ([`Routes`](crate::proto::node::routes::Routes)):
    /// its ready connection with its peer's RID, the channels its peer serves if it is an
    /// Application lane, its configured channel if it dials a ClientServer server
    /// (`servers`: the channels of the node's configured servers).
    pub(crate) fn routes<S: ServerChannels + ?Sized>(&self, servers: &S) -> LinkRoutes {
        let conn = self.conn.as_ref();
        let lane = conn
            .filter(|c| c.ready)
            .and_then(|c| Some((c.peer.as_ref()?.rid.clone(), self.lane()?, c.id)));
        let serves = self.serving_peer().map(|p| {
            let channels = served_channels(p).map(str::to_owned).collect();
            (p.rid.clone(), channels)
        });
        let client = self
            .client_channel(servers)
            .map(|ch| (ch.to_owned(), conn.filter(|c| c.ready).map(|c| c.id)));
        LinkRoutes {
            lane,
            serves,
            client,
        }
    }

    /// Whether [`Link::routes`] would give `old` (compared without building it, so a link
    /// touched by every record it receives costs no allocation to check).
    pub(crate) fn routes_are<S: ServerChannels + ?Sized>(
        &self,
        old: &LinkRoutes,
        servers: &S,
    ) -> bool {
        let conn = self.conn.as_ref();
        let lane = conn
            .filter(|c| c.ready)
            .and_then(|c| Some((c.peer.as_ref()?.rid.as_str(), self.lane()?, c.id)));
        if old.lane.as_ref().map(|(r, l, id)| (r.as_str(), *l, *id)) != lane {
            return false;
        }
        let serves_same = match (&old.serves, self.serving_peer()) {
            (None, None) => true,
            (Some((rid, channels)), Some(p)) => {
                *rid == p.rid && channels.iter().map(String::as_str).eq(served_channels(p))
            }
            _ => false,
        };
        let client = self
            .client_channel(servers)
            .map(|ch| (ch, conn.filter(|c| c.ready).map(|c| c.id)));
        serves_same && old.client.as_ref().map(|(ch, id)| (ch.as_str(), *id)) == client
    }

    /// The peer of an Application lane's connection (ready or not yet) that announced a
    /// Server membership.
    fn serving_peer(&self) -> Option<&Identity> {
        if self.lane() != Some(Lane::Application) {
            return None;
        }
        let peer = self.conn.as_ref()?.peer.as_ref()?;
        served_channels(peer).next().is_some().then_some(peer)
    }

    /// The channel of the configured server this link dials, if it dials one.
    fn client_channel<'a, S: ServerChannels + ?Sized>(&self, servers: &'a S) -> Option<&'a str> {
        match &self.kind {
            LinkKind::ClientDial { server } => servers.channel(*server),
            _ => None,
        }
    }

    /// Counts `records` records received on this link's connection, the last at `now`: its
    /// activity, and a receipt for its state.
    pub(crate) fn handle_receipt(&mut self, records: u64, now: Instant) {
        if records == 0 {
            return;
        }
        self.records += records;
        self.last_receive = Some(now);
        self.state.handle_receive(now);
    }

    /// Where this link's one-way records are published (`servers`: the channels of the
    /// node's configured servers): a RouteMesh peer's Application lane (dialled or
    /// accepted) and a ClientServer client of ours by the peer's RID once its handshake
    /// named it, a server we dial by its configured channel. Borrowed, so that asking it of
    /// every link costs no allocation.
    pub(crate) fn send_route<'a, S: ServerChannels + ?Sized>(
        &'a self,
        servers: &'a S,
    ) -> Option<SendRoute<'a>> {
        match &self.kind {
            LinkKind::MeshDial {
                lane: Lane::Application,
                ..
            }
            | LinkKind::Inbound {
                lane: Lane::Application | Lane::ClientServer,
                ..
            } => Some(SendRoute::Peer(&self.conn.as_ref()?.peer.as_ref()?.rid)),
            LinkKind::ClientDial { server } => servers.channel(*server).map(SendRoute::Server),
            _ => None,
        }
    }

    /// The lane this link serves.
    pub(crate) fn lane(&self) -> Option<Lane> {
        match &self.kind {
            LinkKind::MeshDial { lane, .. } | LinkKind::Inbound { lane, .. } => Some(*lane),
            LinkKind::ClientDial { .. } => Some(Lane::ClientServer),
        }
    }
}

/// Reconnect delay after `failures` consecutive failures: [`BACKOFF_MIN`] doubling up to
/// [`BACKOFF_MAX`].
pub(crate) fn backoff(failures: u32) -> Duration {
    let shift = failures.clamp(1, 8) - 1;
    (BACKOFF_MIN * (1u32 << shift)).min(BACKOFF_MAX)
}

/// Records a `resource_exhausted` failure on a link's or a subscription's state (every time:
/// the snapshot shows the latest figures and the count) and counts it for the backoff.
/// Returns when to try again and whether this is the episode's first failure.
pub(crate) fn record_exhausted(
    state: &mut LinkState,
    failures_in_row: &mut u32,
    detail: &str,
    now: Instant,
) -> (Instant, bool) {
    *failures_in_row = failures_in_row.saturating_add(1);
    let first = !(state.state() == ConnState::Reconnecting
        && state
            .last_failure()
            .is_some_and(|f| f.reason == FailureReason::ResourceExhausted));
    note(state.handle_failure(
        FailureReason::ResourceExhausted,
        detail,
        Recovery::Reconnect,
        now,
    ));
    (now + backoff(*failures_in_row), first)
}

/// Logs a state transition the link state machine refused; the runtime's own bookkeeping
/// decides what happens next, the refusal only signals a bug worth seeing in traces.
pub(crate) fn note(r: Result<(), crate::proto::state::TransitionError>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "link state transition refused");
    }
}

/// The routing id of a dialled connection: unique per physical connection, so that a new
/// connection never collides with a half-open old one at the accepting ROUTER (LIBZMQ-NOTES),
/// and never starting with byte 0 (reserved by libzmq).
pub(crate) fn routing_id(lane: Lane, generation: u64, id: ConnId) -> Vec<u8> {
    let mut r = Vec::with_capacity(18);
    r.push(b'z');
    r.push(match lane {
        Lane::Application => b'A',
        Lane::Completion => b'C',
        Lane::ClientServer => b'S',
    });
    r.extend_from_slice(&generation.to_be_bytes());
    r.extend_from_slice(&id.0.to_be_bytes());
    r
}

/// The channels `peer` announced a Server membership of, in announced order.
fn served_channels(peer: &Identity) -> impl Iterator<Item = &str> {
    peer.memberships
        .iter()
        .filter(|m| m.role == Role::Server)
        .map(|m| m.channel.as_str())
}

/// What a peer's REJECT or CLOSE does to the link that received it: the failure it records,
/// and whether the link stands down (a dialled lane whose peer kept its own dial of that
/// lane, MISSION T1: it is not dialled again while the peer's connection serves the lane).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerEnded {
    /// The failure the link records.
    pub(crate) reason: FailureReason,
    /// The link stands down (yields the lane) instead of redialling.
    pub(crate) stands_down: bool,
}

/// A REJECT with `reason` arrived on a link's connection (WIRE.md §5.1): `Duplicate` means the
/// peer admitted this node's other dial of the lane, so this one stands down (MISSION T1);
/// every other reason is the failure it names.
pub(crate) fn judge_reject(reason: RejectReason) -> PeerEnded {
    let failure = match reason {
        RejectReason::Duplicate => FailureReason::StoodDown,
        RejectReason::NotRequired => FailureReason::NotRequired,
        RejectReason::IdentityMismatch => FailureReason::IdentityMismatch,
        RejectReason::GenerationMismatch => FailureReason::GenerationMismatch,
        RejectReason::SecurityFailure => FailureReason::SecurityFailure,
        RejectReason::Draining => FailureReason::HostDraining,
        RejectReason::UnsupportedVersion | RejectReason::LaneMismatch | RejectReason::Protocol => {
            FailureReason::ProtocolError
        }
    };
    PeerEnded {
        reason: failure,
        stands_down: reason == RejectReason::Duplicate,
    }
}

/// A CLOSE with `reason` arrived on a link's connection (WIRE.md §5.1): `Replaced` on a lane
/// this node dialled means the peer kept its own dial of the lane, so this one stands down
/// (MISSION T1); anything else, and any CLOSE on an inbound connection, is an orderly close.
pub(crate) fn judge_close(reason: CloseReason, inbound: bool) -> PeerEnded {
    let stands_down = reason == CloseReason::Replaced && !inbound;
    PeerEnded {
        reason: if stands_down {
            FailureReason::StoodDown
        } else {
            FailureReason::OrderlyClose
        },
        stands_down,
    }
}

/// The CLOSE reason this node sends when it drops a connection for `f`.
pub(crate) fn close_reason(f: FailureReason) -> CloseReason {
    match f {
        FailureReason::DeadlineExceeded => CloseReason::DeadlineExceeded,
        FailureReason::Replaced | FailureReason::StoodDown => CloseReason::Replaced,
        FailureReason::NotRequired => CloseReason::NotRequired,
        FailureReason::HostDraining => CloseReason::Draining,
        FailureReason::HostStopped => CloseReason::Shutdown,
        _ => CloseReason::ProtocolError,
    }
}

#[cfg(test)]
impl Conn {
    /// A connection for tests: connection id `id`, on slot 0 with no route, opened now, its
    /// HELLO sent, `ready` or not, with `peer` as its handshake named it.
    pub(crate) fn for_test(id: u64, ready: bool, peer: Option<Identity>) -> Conn {
        use crate::proto::node::keys::Key;
        let mut c = Conn::new(
            ConnId(id),
            SlotKey::from_index(0),
            None,
            None,
            Instant::now(),
        );
        c.hello_sent = true;
        c.ready = ready;
        c.peer = peer;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::handshake::Membership;
    use crate::proto::wire::Capabilities;

    fn link(kind: LinkKind) -> Link {
        Link {
            retry_at: None,
            ..Link::new(kind, Instant::now())
        }
    }

    fn conn(id: u64, ready: bool, peer: Option<(&str, &[&str])>) -> Conn {
        Conn::for_test(
            id,
            ready,
            peer.map(|(rid, serves)| Identity {
                rid: rid.to_owned(),
                generation: 1,
                security_identity: rid.to_owned(),
                memberships: serves.iter().map(|c| Membership::server(*c)).collect(),
                capabilities: Capabilities::NONE,
            }),
        )
    }

    /// The failure rules of a link: stand-downs do not count towards the backoff, NotRequired
    /// is terminal, and only a dialled link of a running node whose descriptor is not gone
    /// reconnects.
    #[test]
    fn f1_t4_a_failure_counts_recovers_and_backs_off_by_the_links_kind() {
        let now = Instant::now();
        let dial = LinkKind::MeshDial {
            peer: 0,
            lane: Lane::Application,
        };
        let inbound = LinkKind::Inbound {
            rid: "b".to_owned(),
            lane: Lane::Application,
        };
        let fresh = |kind: LinkKind| {
            let mut l = link(kind);
            note(l.state.handle_connecting(now));
            l
        };
        let mut l = fresh(dial.clone());
        let s = l.record_failure(FailureReason::TransportError, "cut", true, now);
        assert_eq!(
            (s, l.failures_in_row, l.terminal),
            (ConnState::Reconnecting, 1, false)
        );
        assert_eq!(l.retry_at, Some(now + backoff(1)));
        assert_eq!(
            l.state.last_failure().map(|f| f.detail.as_str()),
            Some("cut")
        );
        note(l.state.handle_connecting(now));
        l.record_failure(FailureReason::StoodDown, "peer's dial", true, now);
        assert_eq!(
            l.failures_in_row, 1,
            "a stand-down is not a failure of the peer"
        );
        note(l.state.handle_connecting(now));
        l.record_failure(FailureReason::NotRequired, "no pair", true, now);
        assert!(l.terminal && !l.waits_to_redial());
        // No reconnect: a stopping node, a withdrawn descriptor, an inbound link.
        let mut stopping = fresh(dial.clone());
        let s = stopping.record_failure(FailureReason::TransportError, "cut", false, now);
        assert_eq!(s, ConnState::NotConnected);
        let mut withdrawn = fresh(dial);
        withdrawn.withdrawn = true;
        let s = withdrawn.record_failure(FailureReason::TransportError, "cut", true, now);
        assert_eq!(s, ConnState::NotConnected);
        let mut inbound = fresh(inbound);
        let s = inbound.record_failure(FailureReason::TransportError, "cut", true, now);
        assert_eq!(s, ConnState::NotConnected);
    }

    /// `routes_are` (the allocation-free check) agrees with `routes` on every link state a
    /// route depends on: whatever a link turns into, the index is updated exactly when what
    /// it contributes changed.
    /// The configured servers' channels, as a test gives them.
    struct Channels(Vec<&'static str>);

    impl ServerChannels for Channels {
        fn channel(&self, server: usize) -> Option<&str> {
            self.0.get(server).copied()
        }
    }

    #[test]
    fn routes_are_agrees_with_routes_for_every_state() {
        let servers = Channels(vec!["pump"]);
        let app = LinkKind::MeshDial {
            peer: 0,
            lane: Lane::Application,
        };
        let inbound = LinkKind::Inbound {
            rid: "b".to_owned(),
            lane: Lane::Completion,
        };
        let client = LinkKind::ClientDial { server: 0 };
        let mut states = Vec::new();
        for kind in [app, inbound, client] {
            states.push(link(kind.clone()));
            for (id, ready, peer) in [
                (1, false, None),
                (1, true, None),
                (1, false, Some(("b", &["pump"][..]))),
                (1, true, Some(("b", &["pump"][..]))),
                (2, true, Some(("b", &["pump"][..]))),
                (2, true, Some(("c", &["pump"][..]))),
                (2, true, Some(("c", &["pump", "valve"][..]))),
                (2, true, Some(("c", &[][..]))),
            ] {
                let mut l = link(kind.clone());
                l.conn = Some(conn(id, ready, peer));
                states.push(l);
            }
        }
        let derived: Vec<LinkRoutes> = states.iter().map(|l| l.routes(&servers)).collect();
        for (i, l) in states.iter().enumerate() {
            for (j, r) in derived.iter().enumerate() {
                assert_eq!(
                    l.routes_are(r, &servers),
                    *r == derived[i],
                    "state {i} against the routes of state {j}"
                );
            }
        }
        // The states give routes of every shape.
        assert!(derived.iter().any(|r| r.lane.is_some()));
        assert!(derived.iter().any(|r| r.serves.is_some()));
        assert!(derived
            .iter()
            .any(|r| r.client.as_ref().is_some_and(|c| c.1.is_some())));
    }

    /// What a peer's REJECT or CLOSE means: only a `Duplicate` REJECT, and a `Replaced` CLOSE
    /// on a dialled lane, make the link stand down (T1); every REJECT reason records its own
    /// failure (F1), and the CLOSE this node sends for a stand-down is `Replaced`, which the
    /// peer reads the same way.
    #[test]
    fn t1_f1_a_peers_reject_or_close_stands_down_only_for_a_kept_duplicate() {
        let all = [
            RejectReason::NotRequired,
            RejectReason::IdentityMismatch,
            RejectReason::GenerationMismatch,
            RejectReason::SecurityFailure,
            RejectReason::Draining,
            RejectReason::Duplicate,
            RejectReason::UnsupportedVersion,
            RejectReason::LaneMismatch,
            RejectReason::Protocol,
        ];
        for r in all {
            let v = judge_reject(r);
            assert_eq!(v.stands_down, r == RejectReason::Duplicate, "{r:?}");
            assert_eq!(v.stands_down, v.reason == FailureReason::StoodDown, "{r:?}");
        }
        assert_eq!(
            judge_reject(RejectReason::NotRequired).reason,
            FailureReason::NotRequired
        );
        assert_eq!(
            judge_reject(RejectReason::GenerationMismatch).reason,
            FailureReason::GenerationMismatch
        );
        assert_eq!(
            judge_reject(RejectReason::LaneMismatch).reason,
            FailureReason::ProtocolError
        );
        let kept = judge_close(CloseReason::Replaced, false);
        assert_eq!(
            (kept.reason, kept.stands_down),
            (FailureReason::StoodDown, true)
        );
        let inbound = judge_close(CloseReason::Replaced, true);
        assert_eq!(
            (inbound.reason, inbound.stands_down),
            (FailureReason::OrderlyClose, false)
        );
        let orderly = judge_close(CloseReason::Shutdown, false);
        assert_eq!(
            (orderly.reason, orderly.stands_down),
            (FailureReason::OrderlyClose, false)
        );
        // The two ends agree: the CLOSE sent for a stand-down makes the other dial stand down.
        let sent = close_reason(FailureReason::StoodDown);
        assert!(judge_close(sent, false).stands_down);
        assert_eq!(
            close_reason(FailureReason::HostStopped),
            CloseReason::Shutdown
        );
        assert_eq!(
            close_reason(FailureReason::DeadlineExceeded),
            CloseReason::DeadlineExceeded
        );
    }

    /// A link's timers come due exactly at the deadline they give the timer table (F3, F4):
    /// a handshake not done within `HANDSHAKE_TIMEOUT`, a redial at its retry time (never
    /// for a link that does not wait to redial), a close libzmq did not confirm within
    /// `CLOSE_CONFIRM_MAX`; and the link's next deadline is the earliest of them.
    #[test]
    fn f3_f4_a_links_timers_come_due_at_the_deadline_it_gives() {
        let dial = LinkKind::MeshDial {
            peer: 0,
            lane: Lane::Application,
        };
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);

        let mut l = link(dial.clone());
        let mut c = conn(1, false, None);
        c.opened_at = t0;
        l.conn = Some(c);
        assert_eq!(l.next_deadline(), Some(t0 + HANDSHAKE_TIMEOUT));
        assert!(!l.is_handshake_overdue(t0 + HANDSHAKE_TIMEOUT - ms));
        assert!(l.is_handshake_overdue(t0 + HANDSHAKE_TIMEOUT));
        if let Some(c) = l.conn.as_mut() {
            c.ready = true;
        }
        assert!(!l.is_handshake_overdue(t0 + HANDSHAKE_TIMEOUT * 2));
        assert_eq!(l.next_deadline(), None);

        let mut l = link(dial.clone());
        l.retry_at = Some(t0 + BACKOFF_MIN);
        assert_eq!(l.next_deadline(), Some(t0 + BACKOFF_MIN));
        assert!(!l.is_redial_due(t0 + BACKOFF_MIN - ms));
        assert!(l.is_redial_due(t0 + BACKOFF_MIN));
        l.closing = Some(t0);
        assert!(
            !l.is_redial_due(t0 + BACKOFF_MIN),
            "no redial before the close settles"
        );
        assert_eq!(l.next_deadline(), Some(t0 + CLOSE_CONFIRM_MAX));
        assert!(!l.is_close_overdue(t0 + CLOSE_CONFIRM_MAX - ms));
        assert!(l.is_close_overdue(t0 + CLOSE_CONFIRM_MAX));

        let mut inbound = link(LinkKind::Inbound {
            rid: "b".to_owned(),
            lane: Lane::Application,
        });
        inbound.retry_at = Some(t0);
        assert!(
            !inbound.is_redial_due(t0 + BACKOFF_MAX),
            "an inbound link is never dialled"
        );
        assert_eq!(inbound.next_deadline(), None);
    }

    /// A dialled ROUTER's first in-band notice is its connection's attach, any later one
    /// its loss (L6).
    #[test]
    fn l6_a_routers_second_notice_is_its_connections_loss() {
        let mut c = conn(1, false, None);
        assert_eq!(c.handle_router_notice(), RouterNotice::Attached);
        assert_eq!(c.handle_router_notice(), RouterNotice::Gone);
        c.notices = u8::MAX;
        assert_eq!(c.handle_router_notice(), RouterNotice::Gone);
    }

    /// Records received count as the link's activity, with the instant of the last; none
    /// count nothing.
    #[test]
    fn l2_received_records_are_the_links_activity() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(5);
        let mut l = link(LinkKind::ClientDial { server: 0 });
        l.handle_receipt(0, later);
        assert_eq!((l.records, l.last_receive), (0, None));
        l.handle_receipt(3, t0);
        l.handle_receipt(1, later);
        assert_eq!((l.records, l.last_receive), (4, Some(later)));
    }

    /// Which links' one-way records are published, and under which route: an Application
    /// lane (dialled or accepted) and an accepted ClientServer client by the RID its
    /// handshake named, a dialled server by its configured channel; a Completion lane never.
    #[test]
    fn a_links_send_route_is_its_peers_rid_or_its_servers_channel() {
        let servers = Channels(vec!["pump"]);
        let named = |kind: LinkKind| {
            let mut l = link(kind);
            l.conn = Some(conn(1, true, Some(("b", &[]))));
            l
        };
        let app = LinkKind::MeshDial {
            peer: 0,
            lane: Lane::Application,
        };
        assert_eq!(link(app.clone()).send_route(&servers), None, "no peer yet");
        assert_eq!(named(app).send_route(&servers), Some(SendRoute::Peer("b")));
        for lane in [Lane::Application, Lane::ClientServer] {
            let inbound = LinkKind::Inbound {
                rid: "b".to_owned(),
                lane,
            };
            assert_eq!(
                named(inbound).send_route(&servers),
                Some(SendRoute::Peer("b"))
            );
        }
        let completion = [
            LinkKind::MeshDial {
                peer: 0,
                lane: Lane::Completion,
            },
            LinkKind::Inbound {
                rid: "b".to_owned(),
                lane: Lane::Completion,
            },
        ];
        for kind in completion {
            assert_eq!(named(kind).send_route(&servers), None);
        }
        let client = link(LinkKind::ClientDial { server: 0 });
        assert_eq!(client.send_route(&servers), Some(SendRoute::Server("pump")));
        let unknown = link(LinkKind::ClientDial { server: 1 });
        assert_eq!(unknown.send_route(&servers), None);
    }

    /// Running out of descriptors (`resource_exhausted`): every failure is recorded on the
    /// link's state and counts toward the backoff, and only the first of an episode (the
    /// link was not already reconnecting after the same cause) says so, for the one warning
    /// of the episode.
    #[test]
    fn f1_an_exhausted_dial_backs_off_and_only_the_first_of_an_episode_says_so() {
        let t0 = Instant::now();
        let mut state = LinkState::new(StateKind::Peer, 0, t0);
        let mut failures = 0;
        let (retry, first) = record_exhausted(&mut state, &mut failures, "EMFILE", t0);
        assert!(first);
        assert_eq!((failures, retry), (1, t0 + backoff(1)));
        assert_eq!(state.state(), ConnState::Reconnecting);
        assert_eq!(
            state.last_failure().map(|f| f.reason),
            Some(FailureReason::ResourceExhausted)
        );
        let (retry, first) = record_exhausted(&mut state, &mut failures, "EMFILE", retry);
        assert!(!first, "the same episode");
        assert_eq!(failures, 2);
        assert!(retry > t0 + backoff(1));
    }
}
