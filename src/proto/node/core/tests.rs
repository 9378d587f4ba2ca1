//! The recording shell the node core's scenario tests run on (a `Shell` that keeps what it
//! is asked, in order, with configured peers by RID), and the scenario tests of the
//! decisions in `core/mod.rs`; the tests of `core/*.rs` reuse the recorder.

use super::*;
use crate::proto::handshake::{Capabilities, Membership};
use crate::proto::node::admit::{PeerView, ServerView};
use crate::proto::node::keys::Key;
use crate::proto::node::link::HANDSHAKE_TIMEOUT;

/// Configured peers by RID, no servers, no CURVE.
pub(super) struct Peers(Vec<&'static str>);

impl Configured for Peers {
    fn peer(&self, peer: usize) -> Option<PeerView<'_>> {
        Some(PeerView {
            rid: self.0.get(peer)?,
            generation: None,
            security_identity: None,
            pinned_key: None,
        })
    }

    fn peer_index(&self, rid: &str) -> Option<usize> {
        self.0.iter().position(|r| *r == rid)
    }

    fn server(&self, _: usize) -> Option<ServerView<'_>> {
        None
    }
}

/// What the core asked of the shell, in order (records by their kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Effect {
    SendOnLink(LinkKey, Kind),
    SendTo(SlotKey, Vec<u8>, Kind),
    AddPeerUnit(SlotKey, LinkKey, ConnId),
    RecordRefusal(SlotKey, InputRefusal),
    Count(Count),
    LearnServers(Vec<String>),
    OpenSendQueue(LinkKey),
    EmitState(LinkKey, ConnState, Option<FailureReason>),
    FailCalls(LinkKey, ConnId, FailureReason),
    CloseSendQueue(LinkKey, FailureReason),
    CloseDialled(LinkKey, SlotKey),
    RemovePeerUnit(LinkKey, ConnId),
    SendProbe(LinkKey),
    Dial(LinkKey),
    CloseOverdue(LinkKey),
    OpenDueSub(SubKey),
    DrainBeforeDisconnect(SlotKey),
    Fanout(super::fanout::tests::FanoutEffect),
    Gate(super::gate::tests::GateEffect),
    /// What the receive path asked of its shell beyond `Shell`.
    Received(super::receive::tests::Received),
    /// What the calls' decisions asked of their shell beyond `Shell`.
    Calls(super::calls::tests::CallEffect),
}

/// A shell that records what it is asked; `dialled` are the slots of dialled sockets;
/// `curve`: whether the node runs CURVE; `calls`: this node's call table.
pub(super) struct Recording {
    pub(super) core: NodeCore,
    pub(super) calls: crate::proto::node::caller::Calls,
    peers: Peers,
    pub(super) me: Identity,
    next_conn: u64,
    pub(super) dialled: Vec<(LinkKey, SlotKey)>,
    pub(super) effects: Vec<Effect>,
    pub(super) curve: bool,
}

#[derive(Debug)]
pub(super) struct Unreachable;

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unreachable")
    }
}

impl SendFailure for Unreachable {
    fn unreachable(&self) -> bool {
        true
    }
}

fn kind(frames: &[Vec<u8>]) -> Kind {
    Record::decode(frames).map_or(Kind::Hello, |r| r.kind())
}

impl Shell for Recording {
    type Configured<'a> = &'a Peers;
    type SendError = Unreachable;

    fn core(&self) -> &NodeCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut NodeCore {
        &mut self.core
    }
    fn configured(&self) -> &Peers {
        &self.peers
    }
    fn core_with_configured(&mut self) -> (&mut NodeCore, &Peers) {
        (&mut self.core, &self.peers)
    }
    fn me(&self) -> &Identity {
        &self.me
    }
    fn admitting(&self) -> bool {
        true
    }
    fn fresh_conn_id(&mut self) -> ConnId {
        self.next_conn += 1;
        ConnId(self.next_conn)
    }
    fn send_on_link(&mut self, k: LinkKey, frames: Vec<Vec<u8>>) -> Result<(), Unreachable> {
        self.effects.push(Effect::SendOnLink(k, kind(&frames)));
        Ok(())
    }
    fn send_to(
        &mut self,
        slot: SlotKey,
        route: &[u8],
        frames: &[Vec<u8>],
    ) -> Result<(), Unreachable> {
        self.effects
            .push(Effect::SendTo(slot, route.to_vec(), kind(frames)));
        Ok(())
    }
    fn send_sweep_record(
        &mut self,
        _: SlotKey,
        _: &[u8],
        _: SweepRecord,
    ) -> Result<(), Unreachable> {
        Err(Unreachable)
    }
    fn add_peer_unit(&mut self, slot: SlotKey, k: LinkKey, conn: ConnId) {
        self.effects.push(Effect::AddPeerUnit(slot, k, conn));
    }
    fn record_refusal(&mut self, slot: SlotKey, why: InputRefusal, _: String, _: Instant) {
        self.effects.push(Effect::RecordRefusal(slot, why));
    }
    fn count(&mut self, what: Count) {
        self.effects.push(Effect::Count(what));
    }
    fn learn_servers(&mut self, channels: &[String]) {
        self.effects.push(Effect::LearnServers(channels.to_vec()));
    }
    fn open_send_queue(&mut self, k: LinkKey) {
        self.effects.push(Effect::OpenSendQueue(k));
    }
    fn emit_state(&mut self, k: LinkKey, state: ConnState, reason: Option<FailureReason>, _: &str) {
        self.effects.push(Effect::EmitState(k, state, reason));
    }
    fn fail_calls(&mut self, k: LinkKey, conn: ConnId, reason: FailureReason, _: Instant) {
        self.effects.push(Effect::FailCalls(k, conn, reason));
    }
    fn close_send_queue(&mut self, k: LinkKey, reason: FailureReason) -> usize {
        self.effects.push(Effect::CloseSendQueue(k, reason));
        0
    }
    fn close_dialled(&mut self, k: LinkKey, slot: SlotKey) -> bool {
        let dialled = self.dialled.contains(&(k, slot));
        if dialled {
            self.effects.push(Effect::CloseDialled(k, slot));
        }
        dialled
    }
    fn remove_peer_unit(&mut self, k: LinkKey, conn: ConnId) {
        self.effects.push(Effect::RemovePeerUnit(k, conn));
    }
    fn sync_timers(&mut self) {
        // As the I/O thread's: the timer table and the call routes (no servers).
        self.core.sync_touched(&self.peers);
    }
    fn send_probe(&mut self, k: LinkKey, _: u64) {
        self.effects.push(Effect::SendProbe(k));
    }
    fn send_beacon(&mut self, _: liveness::LinkKey) {}
    fn on_publisher_event(&mut self, sub: SubKey, ev: PublisherEvent, now: Instant) {
        super::fanout::on_publisher_event(self, sub, ev, now);
    }
    fn dial(&mut self, k: LinkKey, now: Instant) {
        // As a dial would: the link waits for its connection, opened now.
        self.effects.push(Effect::Dial(k));
        self.core.links[k].retry_at = None;
        let slot = SlotKey::from_index(10 + k.index());
        let id = self.fresh_conn_id();
        self.core.links[k].conn = Some(Conn::new(id, slot, None, None, now));
        self.dialled.push((k, slot));
    }
    fn close_overdue(&mut self, k: LinkKey) {
        self.effects.push(Effect::CloseOverdue(k));
    }
    fn settle_overdue_closing(&mut self) {}
    fn open_due_sub(&mut self, sub: SubKey, _: Instant) {
        self.effects.push(Effect::OpenDueSub(sub));
    }
    fn runs_curve(&self) -> bool {
        self.curve
    }
    fn drain_before_disconnect(&mut self, slot: SlotKey, _: Instant) {
        self.effects.push(Effect::DrainBeforeDisconnect(slot));
    }
    fn sub_connected(&mut self, sub: SubKey) {
        self.core.subs[sub].connected = true;
    }
    fn fail_sub(&mut self, sub: SubKey, reason: FailureReason, detail: &str, now: Instant) {
        super::fanout::fail_sub(self, sub, reason, detail, now);
    }
}

pub(super) fn node(rid: &str) -> Identity {
    Identity {
        rid: rid.into(),
        generation: 1,
        security_identity: String::new(),
        memberships: vec![Membership::server("pump")],
        capabilities: Capabilities::NONE,
    }
}

pub(super) fn shell(rid: &str, peers: Vec<&'static str>) -> Recording {
    Recording {
        core: NodeCore::new(Gate::new(Default::default()), 1),
        calls: Default::default(),
        peers: Peers(peers),
        me: node(rid),
        next_conn: 100,
        dialled: Vec::new(),
        effects: Vec::new(),
        curve: false,
    }
}

/// Node b's dialled Application link to its configured peer 0, its connection `id` on
/// socket `slot` open (no HELLO sent yet), the socket recorded as dialled.
pub(super) fn dialling(b: &mut Recording, id: u64, slot: SlotKey, now: Instant) -> LinkKey {
    let dial = LinkKind::MeshDial {
        peer: 0,
        lane: Lane::Application,
    };
    let k = b.core.add_link(dial, now);
    b.core.links[k].conn = Some(Conn::new(ConnId(id), slot, None, None, now));
    b.dialled.push((k, slot));
    k
}

pub(super) fn hello_from(rid: &str) -> First {
    First::Hello {
        lane: Lane::Application,
        peer: node(rid),
        expects: Expectation::default(),
    }
}

/// A record that does not decode from an unadmitted connection: the refusal is counted,
/// then one REJECT goes to it, and nothing it sends afterwards is looked at (WIRE.md §5.1).
#[test]
fn a_malformed_first_record_is_refused_once_then_ignored() {
    let mut b = shell("b", vec!["a"]);
    let (slot, route, now) = (SlotKey::from_index(1), vec![7u8; 5], Instant::now());
    assert!(!b.core.ignores_unadmitted(slot, &route));
    let garbage = Record::decode(&[b"not a record".to_vec()]);
    let first = First::Malformed(garbage.expect_err("garbage does not decode"));
    handle_first_record(
        &mut b,
        slot,
        Lane::Application,
        route.clone(),
        Credentials::Plain,
        first,
        now,
    );
    assert_eq!(
        b.effects,
        [
            Effect::RecordRefusal(slot, InputRefusal::Malformed),
            Effect::SendTo(slot, route.clone(), Kind::Reject),
        ]
    );
    assert!(b.core.ignores_unadmitted(slot, &route));
    assert_eq!(b.core.links.keys().count(), 0);
}

/// Node b dials a; a's own dial reaches b first and wins (the smaller RID's dial is kept,
/// T1): b's dial fails as stood down (its calls, its queue, its socket, then the
/// application hears; not counted as a failure) and yields, and only then is a's
/// connection welcomed, given its receive unit and made ready (channels, send queue, the
/// application last).
#[test]
fn t1_an_admitted_hello_stands_our_dial_down_before_its_welcome() {
    let mut b = shell("b", vec!["a"]);
    let now = Instant::now();
    let dial_slot = SlotKey::from_index(3);
    let dk = dialling(&mut b, 1, dial_slot, now);
    let (slot, route) = (SlotKey::from_index(1), vec![9u8; 5]);
    handle_first_record(
        &mut b,
        slot,
        Lane::Application,
        route.clone(),
        Credentials::Plain,
        hello_from("a"),
        now,
    );
    let k = b
        .core
        .links
        .position(|l| matches!(&l.kind, LinkKind::Inbound { rid, .. } if rid == "a"))
        .expect("a's inbound link");
    let reason = FailureReason::StoodDown;
    let failed = b.effects.iter().find_map(|e| match e {
        Effect::EmitState(l, state, _) if *l == dk => Some(*state),
        _ => None,
    });
    let failed = failed.expect("the stood-down dial's state");
    assert_eq!(
        b.effects,
        [
            Effect::FailCalls(dk, ConnId(1), reason),
            Effect::CloseSendQueue(dk, reason),
            Effect::CloseDialled(dk, dial_slot),
            Effect::EmitState(dk, failed, Some(reason)),
            Effect::SendTo(slot, route.clone(), Kind::Welcome),
            Effect::AddPeerUnit(slot, k, ConnId(101)),
            Effect::LearnServers(vec!["pump".into()]),
            Effect::OpenSendQueue(k),
            Effect::EmitState(k, ConnState::Ready, None),
        ]
    );
    assert!(b.core.links[dk].yielded && b.core.links[dk].conn.is_none());
    assert!(b.core.links[k].conn.as_ref().is_some_and(|c| c.ready));
    assert_eq!(b.core.accepting.inbound[&slot].get(&route), Some(&k));
}

/// An inbound connection that a sweep finds unreachable fails at once as the peer's
/// disconnect: a CLOSE is not sent to a pipe that is gone, its routing id and receive
/// unit go, and the failure is counted.
#[test]
fn l6_a_swept_connection_found_gone_fails_once() {
    let mut b = shell("b", vec![]);
    let now = Instant::now();
    let (slot, route) = (SlotKey::from_index(1), vec![9u8; 5]);
    handle_first_record(
        &mut b,
        slot,
        Lane::Application,
        route.clone(),
        Credentials::Plain,
        hello_from("a"),
        now,
    );
    let k = b.core.accepting.inbound[&slot][&route];
    // The peer's last probe: the sweep repeats its ACK, which changes nothing there.
    if let Some(c) = b.core.links[k].conn.as_mut() {
        c.last_peer_probe = Some(5);
    }
    b.effects.clear();
    // The socket's monitor counts no open connection: one admitted is missing its notice.
    check_bound_disconnects(&mut b, slot, now);
    let reason = FailureReason::TransportError;
    let counted = b
        .effects
        .iter()
        .filter(|e| **e == Effect::Count(Count::SweepRecord));
    assert_eq!(counted.count(), 1, "{:?}", b.effects);
    assert!(b
        .effects
        .contains(&Effect::FailCalls(k, ConnId(101), reason)));
    assert!(b.effects.contains(&Effect::RemovePeerUnit(k, ConnId(101))));
    assert!(!b
        .effects
        .iter()
        .any(|e| matches!(e, Effect::SendTo(_, _, Kind::Close))));
    assert_eq!(
        b.effects.last(),
        Some(&Effect::Count(Count::LinkFailure(reason)))
    );
    assert!(b.core.links[k].conn.is_none());
    assert!(b.core.accepting.inbound[&slot].is_empty());
}

/// A dial in progress whose descriptor is withdrawn closes (reconfigured, counted, its
/// dialled socket closed); withdrawing it again changes nothing.
#[test]
fn a_withdrawn_dial_in_progress_closes_once() {
    let mut b = shell("b", vec!["a"]);
    let now = Instant::now();
    let dial_slot = SlotKey::from_index(3);
    let dk = dialling(&mut b, 1, dial_slot, now);
    withdraw(&mut b, dk, now);
    let reason = FailureReason::Reconfigured;
    assert_eq!(
        b.effects[..3],
        [
            Effect::FailCalls(dk, ConnId(1), reason),
            Effect::CloseSendQueue(dk, reason),
            Effect::CloseDialled(dk, dial_slot),
        ]
    );
    assert!(matches!(b.effects[3], Effect::EmitState(l, _, Some(r)) if l == dk && r == reason));
    assert_eq!(b.effects[4..], [Effect::Count(Count::LinkFailure(reason))]);
    b.effects.clear();
    withdraw(&mut b, dk, now);
    assert_eq!(b.effects, []);
}

/// A new dialled link's first dial is due at once: the timer pass dials it, and nothing
/// else. The connection it opened, still not ready when its handshake timeout passes,
/// fails as a transport error (its calls, its queue, its socket, the application, then
/// counted); the timers pass before that changes nothing.
#[test]
fn a_due_dial_dials_and_an_overrun_handshake_fails_the_link() {
    let mut b = shell("b", vec!["a"]);
    let now = Instant::now();
    let dial = LinkKind::MeshDial {
        peer: 0,
        lane: Lane::Application,
    };
    let dk = b.core.add_link(dial, now);
    handle_timeout(&mut b, now);
    assert_eq!(b.effects, [Effect::Dial(dk)]);
    b.effects.clear();
    let conn = b.core.links[dk].conn.as_ref().map(|c| (c.id, c.slot));
    let (id, slot) = conn.expect("the dial's connection");
    let almost = now + HANDSHAKE_TIMEOUT - std::time::Duration::from_millis(1);
    handle_timeout(&mut b, almost);
    assert_eq!(b.effects, []);
    handle_timeout(&mut b, now + HANDSHAKE_TIMEOUT);
    let reason = FailureReason::TransportError;
    assert_eq!(
        b.effects[..3],
        [
            Effect::FailCalls(dk, id, reason),
            Effect::CloseSendQueue(dk, reason),
            Effect::CloseDialled(dk, slot),
        ]
    );
    assert!(matches!(b.effects[3], Effect::EmitState(l, _, Some(r)) if l == dk && r == reason));
    assert_eq!(b.effects[4..], [Effect::Count(Count::LinkFailure(reason))]);
    assert!(b.core.links[dk].conn.is_none());
}

/// A ready connection is probed when its probe is due, and one whose peer never
/// answers fails once its deadline passes (MISSION L2), as a deadline exceeded.
#[test]
fn l2_an_unanswered_probe_fails_the_link_at_its_deadline() {
    let mut b = shell("b", vec![]);
    let now = Instant::now();
    let (slot, route) = (SlotKey::from_index(1), vec![9u8; 5]);
    handle_first_record(
        &mut b,
        slot,
        Lane::Application,
        route,
        Credentials::Plain,
        hello_from("a"),
        now,
    );
    let k = b.core.accepting.inbound[&slot].values().next().copied();
    let k = k.expect("a's inbound link");
    b.effects.clear();
    let mut t = now;
    let mut probes = 0;
    while b.core.links[k].conn.is_some() {
        let next = b.core.liveness.table().poll_timeout();
        t = next.expect("a ready connection has a liveness deadline");
        assert!(t < now + std::time::Duration::from_secs(60), "never failed");
        handle_timeout(&mut b, t);
        probes += b
            .effects
            .iter()
            .filter(|e| **e == Effect::SendProbe(k))
            .count();
        b.effects.retain(|e| *e != Effect::SendProbe(k));
    }
    assert!(probes >= 1, "no probe sent before the deadline");
    let reason = FailureReason::DeadlineExceeded;
    assert_eq!(b.effects[0], Effect::FailCalls(k, ConnId(101), reason));
    assert_eq!(
        b.effects.last(),
        Some(&Effect::Count(Count::LinkFailure(reason)))
    );
    assert!(t >= now + liveness::PEER_DEADLINE);
}

/// A dialled connection's transport handshake sends its HELLO once; its disconnect is
/// acted on only after the records queued before it are read, and fails the link as a
/// transport error (MISSION L6); a late disconnect event of that socket does not fail
/// the link's next connection.
#[test]
fn l6_a_dialled_disconnect_drains_then_fails_the_link_once() {
    let mut b = shell("b", vec!["a"]);
    let now = Instant::now();
    let slot = SlotKey::from_index(3);
    let dk = dialling(&mut b, 1, slot, now);
    let watching = Watching::Dialled(dk);
    handle_monitor_event(
        &mut b,
        slot,
        watching,
        (MonitorEvent::HandshakeSucceeded, 0),
        now,
    );
    handle_monitor_event(
        &mut b,
        slot,
        watching,
        (MonitorEvent::HandshakeSucceeded, 0),
        now,
    );
    assert_eq!(b.effects, [Effect::SendOnLink(dk, Kind::Hello)]);
    b.effects.clear();
    handle_monitor_event(&mut b, slot, watching, (MonitorEvent::Disconnected, 0), now);
    let reason = FailureReason::TransportError;
    assert_eq!(
        b.effects[..4],
        [
            Effect::DrainBeforeDisconnect(slot),
            Effect::FailCalls(dk, ConnId(1), reason),
            Effect::CloseSendQueue(dk, reason),
            Effect::CloseDialled(dk, slot),
        ]
    );
    assert_eq!(
        b.effects.last(),
        Some(&Effect::Count(Count::LinkFailure(reason)))
    );
    // The link's next connection, on a socket of its own: a late disconnect event of
    // the old socket is not its.
    let next = SlotKey::from_index(4);
    b.core.links[dk].conn = Some(Conn::new(ConnId(2), next, None, None, now));
    b.effects.clear();
    handle_monitor_event(&mut b, slot, watching, (MonitorEvent::Disconnected, 0), now);
    assert_eq!(b.effects, [Effect::DrainBeforeDisconnect(slot)]);
    assert!(b.core.links[dk].conn.is_some());
}
