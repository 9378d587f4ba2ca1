//! The node core: the node-wide parts of a node's protocol state in one value, the links
//! with their connections, the timer table, the bound sockets' admission tables, discovery's
//! additions, the liveness table, the call routes and the fanout subscriptions
//! ([`NodeCore`]), and the handshake's decisions with the order of their consequences, over
//! what the core asks of its shell ([`Shell`]). Classic fanout's decisions are in
//! [`fanout`], over its own [`fanout::FanoutShell`]; the receive path's are in [`receive`],
//! over [`ReceiveShell`]; the bound sockets' gate's (ZAP verdicts, refusals) in [`gate`],
//! over [`gate::GateShell`]; what a snapshot lists in [`snapshot`]; what running out of
//! descriptors does in [`exhaustion`]; the calls' in [`calls`], over [`calls::CallShell`].
//!
//! Admission, in order: a dialled connection sends its HELLO once ([`send_hello`]); the
//! acceptor judges an unadmitted connection's first record ([`handle_first_record`]: one
//! REJECT, nothing, or admission: a dial of ours the peer's dial wins over stands down, a
//! connection the new one replaces fails, then WELCOME, the inbound table, the receive
//! unit and the link); the dialler judges the WELCOME ([`handle_welcome`]); and a connection
//! whose handshake is done becomes ready (its liveness entry, the channels its peer serves,
//! its send queue, then the application hears of it). The judgements themselves are
//! [`crate::proto::node::admit`]'s.
//!
//! A link's failure, in order ([`fail_link`]): the calls leased on its connection fail, its
//! send queue closes, the link records the failure ([`links::fail`]), the connection closes
//! ([`close_conn`]: its liveness entry, then its dialled socket, or a CLOSE to the peer and
//! its routing id forgotten), the application hears of it and the failure is counted. A
//! peer's REJECT or CLOSE and an inbound connection's loss fail a link as well
//! ([`handle_peer_ended`], [`fail_gone_inbound`]), and so may a bound socket's disconnect
//! sweep ([`check_bound_disconnects`]), a new allow-list ([`handle_allow_list_effects`]),
//! and discovery: a peer's new fence ([`refence`]) or its withdrawn descriptor
//! ([`withdraw`]).
//!
//! When deadlines come due ([`handle_timeout`]), in order: the liveness table's probes and
//! beacons go out, its verdicts are acted on (a probe deadline fails the link, a
//! publisher's event goes to its subscription), then, if a link's or subscription's
//! deadline is due, a handshake that overran its timeout fails the link, due redials dial
//! and overdue close confirmations stop holding the next dial back, subscriptions due to be
//! opened again are, and the due disconnect sweeps run.
//!
//! A dialled or SUB socket's monitor event ([`handle_monitor_event`], as
//! [`monitor_op`] reads it): a dialled connection's transport handshake sends its HELLO, a
//! refusal fails its link, and its disconnect fails the link as a transport error once the
//! records that arrived before it are read, if the connection is still the link's current
//! one on that socket; a SUB socket's events go to its subscription.

pub(crate) mod calls;
pub(crate) mod exhaustion;
pub(crate) mod fanout;
pub(crate) mod gate;
mod receive;
pub(crate) mod snapshot;

use std::fmt;
use std::time::Instant;

use super::accepting::{Accepting, AllowListEffects};
use super::admit::{
    Admission, Configured, Credentials, FirstRecord, FirstVerdict, Refenced, WelcomeDecision,
};
use super::discovered::Discovered;
use super::gate::Gate;
use super::keys::{CallKey, LinkKey, SlotKey, SubKey, Tracked};
use super::link::{note, Conn, Link, LinkKind, PeerEnded};
use super::links::{self, SweepRecord, Withdrawal, WITHDRAWN};
use super::live::{Live, LiveOwner};
use super::monitor::{monitor_op, MonitorOp, Watching};
use super::routes::Routes;
use super::sub::Sub;
use super::timers::TimerTable;
use crate::proto::admission::Refusing;
use crate::proto::handshake::{self, Expectation, Identity};
use crate::proto::liveness::{self, LivenessEvent, ProbeEvent, PublisherEvent, Transmit};
use crate::proto::sched::IdMap;
use crate::proto::security::{InputRefusal, PublicKey};
use crate::proto::state::{ConnState, FailureReason};
use crate::proto::transport::MonitorEvent;
use crate::proto::wire::{self, Kind, Lane, Record, RejectReason, WireError};
use crate::proto::ConnId;
pub(crate) use receive::{
    handle_bound_record, handle_dialled_record, handle_packed, handle_peer_record, handle_run_end,
    negotiated, Answer, ReceiveShell,
};

/// The node-wide parts of the node core.
pub(crate) struct NodeCore {
    /// Every configured peer lane, configured server and inbound connection, with its
    /// current connection; every mutable access marks the link for the timer table.
    pub(crate) links: Tracked<LinkKey, Link>,
    /// Every link's and subscription's earliest deadline, and the disconnect sweeps.
    pub(crate) timers: TimerTable,
    /// The bound sockets' gate, their inbound connections and the ones refused.
    pub(crate) accepting: Accepting,
    /// Automatic mode: links added by discovery and the descriptors' fences.
    pub(crate) discovered: Discovered,
    /// The one structure owning every liveness machine of this node (MISSION L8).
    pub(crate) liveness: Live,
    /// Where calls go: the links' routes, indexed (brought up to date by
    /// [`NodeCore::sync_touched`], which the shell's `sync_timers` runs).
    pub(crate) routes: Routes,
    /// One subscription per publisher endpoint, each with its own SUB socket (MISSION T3,
    /// L5); every mutable access marks it for the timer table.
    pub(crate) subs: Tracked<SubKey, Sub>,
}

impl NodeCore {
    /// A node core with no links, the bound sockets' gate `gate`, and liveness ids seeded
    /// from the node's `generation`.
    pub(crate) fn new(gate: Gate, generation: u64) -> NodeCore {
        NodeCore {
            links: Tracked::default(),
            timers: TimerTable::new(),
            accepting: Accepting {
                inbound: IdMap::default(),
                refused: super::accepting::Refused::default(),
                gate,
            },
            discovered: Discovered::default(),
            liveness: Live::new(generation),
            routes: Routes::default(),
            subs: Tracked::default(),
        }
    }

    /// Adds a link of `kind` (its first dial due at once).
    pub(crate) fn add_link(&mut self, kind: LinkKind, now: Instant) -> LinkKey {
        self.links.push(Link::new(kind, now))
    }

    /// The inbound link of `rid`'s connections on `lane`, added (with no redial of its own)
    /// if there is none yet.
    pub(crate) fn inbound_link(&mut self, rid: &str, lane: Lane, now: Instant) -> LinkKey {
        let kind = LinkKind::Inbound {
            rid: rid.to_owned(),
            lane,
        };
        match self.links.position(|l| l.kind == kind) {
            Some(k) => k,
            None => {
                let k = self.add_link(kind, now);
                self.links[k].retry_at = None;
                k
            }
        }
    }

    /// The call key of answers arriving on link `k`: the connection itself, if it is a
    /// Completion lane or a ClientServer connection (answers never travel on the Application
    /// lane).
    pub(crate) fn answer_key(&self, k: LinkKey) -> Option<CallKey> {
        let l = self.links.get(k)?;
        let c = l.conn.as_ref()?;
        match l.lane()? {
            Lane::ClientServer | Lane::Completion => Some((k, c.id)),
            Lane::Application => None,
        }
    }

    /// Counts `records` records received on link `k`'s connection, the last at `now`.
    pub(crate) fn on_link_activity(&mut self, k: LinkKey, records: u64, now: Instant) {
        // None changes nothing, and is not to mark the link for the timer table.
        if records == 0 {
            return;
        }
        if let Some(l) = self.links.get_mut(k) {
            l.handle_receipt(records, now);
        }
    }

    /// Where answers to calls keyed `key` are sent: that connection, if it is still current.
    pub(crate) fn answer_route(&self, key: CallKey) -> Option<LinkKey> {
        let c = self.links.get(key.0)?.conn.as_ref()?;
        (c.id == key.1 && c.ready).then_some(key.0)
    }

    /// Whether the records of the unadmitted connection `route` of bound socket `slot` are
    /// ignored: it was refused already (one REJECT, then nothing it sends is looked at).
    pub(crate) fn ignores_unadmitted(&self, slot: SlotKey, route: &[u8]) -> bool {
        self.accepting.refused.contains(slot, route)
    }
}

/// What the node core asks of its shell: where it reads the core and the node's own
/// identity and configuration, and the consequences of its decisions that reach beyond it
/// (sockets, the receive scheduler, the calls, the send queues, the application, the
/// counters). The core is reached through the shell, not beside it: some of these effects
/// read or note core state themselves (the send queues and the calls read the links,
/// closing a dialled socket notes the link's close, a refusal is remembered by the gate).
pub(crate) trait Shell {
    /// The configured peers and servers as admission and the calls' send policy read them.
    type Configured<'a>: Configured
    where
        Self: 'a;
    /// Why a send failed.
    type SendError: SendFailure;

    /// The node core.
    fn core(&self) -> &NodeCore;
    /// The node core, to change.
    fn core_mut(&mut self) -> &mut NodeCore;
    /// The configured peers and servers.
    fn configured(&self) -> Self::Configured<'_>;
    /// The node core, to change, beside the configured peers and servers.
    fn core_with_configured(&mut self) -> (&mut NodeCore, Self::Configured<'_>);
    /// The identity this node presents in its handshakes.
    fn me(&self) -> &Identity;
    /// Whether the node takes new work (admits new connections).
    fn admitting(&self) -> bool;
    /// A connection id never handed out before by this node.
    fn fresh_conn_id(&mut self) -> ConnId;

    /// Sends `frames` on link `k`'s current connection.
    fn send_on_link(&mut self, k: LinkKey, frames: Vec<Vec<u8>>) -> Result<(), Self::SendError>;
    /// Sends `frames` to connection `route` of bound socket `slot`.
    fn send_to(
        &mut self,
        slot: SlotKey,
        route: &[u8],
        frames: &[Vec<u8>],
    ) -> Result<(), Self::SendError>;
    /// Sends the disconnect sweep's record `record` to connection `route` of bound socket
    /// `slot`, with `ROUTER_MANDATORY` (a connection whose pipe is gone is unreachable).
    fn send_sweep_record(
        &mut self,
        slot: SlotKey,
        route: &[u8],
        record: SweepRecord,
    ) -> Result<(), Self::SendError>;
    /// Connection `conn` of link `k`, admitted on bound socket `slot`, gets its turn in the
    /// receive rotation.
    fn add_peer_unit(&mut self, slot: SlotKey, k: LinkKey, conn: ConnId);
    /// Counts and remembers an input refusal on bound socket `slot`.
    fn record_refusal(&mut self, slot: SlotKey, why: InputRefusal, detail: String, now: Instant);
    /// Counts what `what` names.
    fn count(&mut self, what: Count);
    /// A ready peer serves `channels`: this node's calls may go to them.
    fn learn_servers(&mut self, channels: &[String]);
    /// Link `k`'s connection became ready: one-way records may go to it.
    fn open_send_queue(&mut self, k: LinkKey);
    /// Tells the application that link `k` is in `state` now.
    fn emit_state(
        &mut self,
        k: LinkKey,
        state: ConnState,
        reason: Option<FailureReason>,
        detail: &str,
    );
    /// Fails the calls leased on connection `conn` of link `k`, lost for `reason`, as "may
    /// have run" (MISSION C2), and whatever was served on it.
    fn fail_calls(&mut self, k: LinkKey, conn: ConnId, reason: FailureReason, now: Instant);
    /// Link `k`'s connection leaves ready: its send queue is closed. Returns how many
    /// one-way records were still in it (not sent), counted under `reason`.
    fn close_send_queue(&mut self, k: LinkKey, reason: FailureReason) -> usize;
    /// Closes link `k`'s dialled socket `slot`, if `slot` is that socket: true if it was.
    fn close_dialled(&mut self, k: LinkKey, slot: SlotKey) -> bool;
    /// Connection `conn` of link `k` has no turn in the receive rotation any more.
    fn remove_peer_unit(&mut self, k: LinkKey, conn: ConnId);

    /// Brings the timer table (and the call routes) up to date with every link and
    /// subscription changed since the last time.
    fn sync_timers(&mut self);
    /// Sends a PROBE carrying `id` on link `k`'s connection.
    fn send_probe(&mut self, k: LinkKey, id: u64);
    /// Sends the publisher's beacon, if liveness entry `key` is the publisher's.
    fn send_beacon(&mut self, key: liveness::LinkKey);
    /// Acts on the liveness table's event `ev` about subscription `sub`'s publisher (as
    /// [`fanout::on_publisher_event`] decides).
    fn on_publisher_event(&mut self, sub: SubKey, ev: PublisherEvent, now: Instant);
    /// Dials link `k`, as the link's kind and the configuration plan it.
    fn dial(&mut self, k: LinkKey, now: Instant);
    /// The close of link `k`'s old socket was not confirmed in time: the link may dial
    /// again without waiting for it.
    fn close_overdue(&mut self, k: LinkKey);
    /// Lets go of the monitors of closes confirmed after their time.
    fn settle_overdue_closing(&mut self);
    /// Opens subscription `sub`'s socket again, if it has none and is due to.
    fn open_due_sub(&mut self, sub: SubKey, now: Instant);

    /// Whether the node runs CURVE.
    fn runs_curve(&self) -> bool;
    /// Reads and handles the records still queued on socket `slot`, before its disconnect
    /// is acted on (they arrived first; an orderly CLOSE among them is the better reason).
    fn drain_before_disconnect(&mut self, slot: SlotKey, now: Instant);
    /// Subscription `sub`'s transport handshake is done.
    fn sub_connected(&mut self, sub: SubKey);
    /// Subscription `sub` fails for `reason` (as [`fanout::fail_sub`] decides).
    fn fail_sub(&mut self, sub: SubKey, reason: FailureReason, detail: &str, now: Instant);
}

/// Why a send of the shell failed, as far as the core reads it.
pub(crate) trait SendFailure: fmt::Display {
    /// The connection is not there (its pipe is gone).
    fn unreachable(&self) -> bool;
}

/// What the core has its shell count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// A record from a connection that is not (or no longer) admitted.
    StaleRecord,
    /// A link's failure, for its reason (a stand-down is not counted).
    LinkFailure(FailureReason),
    /// A record a disconnect sweep sent.
    SweepRecord,
}

/// What admission reads of the node behind `node`: its configured peers and servers, the
/// descriptor fences, its links and its identity.
pub(crate) fn admission<S: Shell>(
    node: &S,
) -> Admission<'_, S::Configured<'_>, Tracked<LinkKey, Link>> {
    let core = node.core();
    Admission {
        configured: node.configured(),
        discovered: &core.discovered,
        links: &core.links,
        local: node.me(),
    }
}

/// Sends dialled link `k`'s HELLO, once per connection: a dialled ROUTER learns that its
/// handshake is done both from its monitor and in band, in either order.
pub(crate) fn send_hello<S: Shell>(node: &mut S, k: LinkKey) {
    let links = &node.core().links;
    if links[k].conn.as_ref().is_none_or(|c| c.hello_sent) {
        return;
    }
    let Some((lane, expect)) = admission(node).dial_expectation(&links[k].kind) else {
        return;
    };
    let sent = match hello(lane, node.me(), &expect, 0) {
        Ok(frames) => node.send_on_link(k, frames),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode HELLO");
            return;
        }
    };
    if let Some(c) = node.core_mut().links[k].conn.as_mut() {
        c.hello_sent = sent.is_ok();
    }
}

/// An unadmitted connection's first record, as the shell decoded it.
pub(crate) enum First {
    /// A HELLO: its lane, who it says the dialler is and what the dialler expects.
    Hello {
        /// The lane the HELLO names.
        lane: Lane,
        /// Who the HELLO says the dialler is.
        peer: Identity,
        /// What the dialler expects of this node.
        expects: Expectation,
    },
    /// A well-formed record of another kind.
    Other(Kind),
    /// A record that does not decode.
    Malformed(WireError),
}

/// The first record of the unadmitted connection `route` of bound socket `slot` (of lane
/// `lane`, the connection holding `credentials`), as admission judges it
/// ([`Admission::judge_first_record`]): refused (one REJECT), stale, or admitted, standing
/// a dial of ours down if the peer's wins.
pub(crate) fn handle_first_record<S: Shell>(
    node: &mut S,
    slot: SlotKey,
    lane: Lane,
    route: Vec<u8>,
    credentials: Credentials<'_>,
    first: First,
    now: Instant,
) {
    let record = match &first {
        First::Hello {
            lane,
            peer,
            expects,
        } => FirstRecord::Hello {
            lane: *lane,
            peer,
            expects,
        },
        First::Other(kind) => FirstRecord::Other(*kind),
        First::Malformed(e) => FirstRecord::Malformed(e),
    };
    let admitting = node.admitting();
    let verdict = admission(node).judge_first_record(lane, credentials, record, admitting);
    match verdict {
        FirstVerdict::Refuse(r) => {
            if let (First::Malformed(e), Some(InputRefusal::Malformed)) = (&first, r.counted) {
                tracing::debug!(error = %e, "malformed record from an unadmitted connection");
            }
            refuse_with(node, slot, &route, r, now);
        }
        FirstVerdict::Stale(r) => {
            node.count(Count::StaleRecord);
            if let Some(r) = r {
                refuse_with(node, slot, &route, r, now);
            }
        }
        FirstVerdict::Admit {
            stand_down,
            verified_key,
        } => {
            if let Some(dk) = stand_down {
                // Their dial wins: stand our own dial down.
                if node.core().links[dk].conn.is_some() {
                    fail_link(
                        node,
                        dk,
                        FailureReason::StoodDown,
                        "peer's own dial is current",
                        now,
                    );
                }
                node.core_mut().links[dk].yielded = true;
            }
            if let First::Hello { peer, .. } = first {
                admit_inbound(node, slot, lane, route, peer, verified_key, now);
            }
        }
    }
}

/// Makes an admitted connection the peer's current one on `lane`: WELCOME, its link and
/// receive unit, then ready.
fn admit_inbound<S: Shell>(
    node: &mut S,
    slot: SlotKey,
    lane: Lane,
    route: Vec<u8>,
    peer: Identity,
    verified: Option<PublicKey>,
    now: Instant,
) {
    let k = node.core_mut().inbound_link(&peer.rid, lane, now);
    // A replacement connection of the same peer and lane (F3): the dialler closed the old
    // one before dialling this one, so the old one is done.
    if node.core().links[k].conn.is_some() {
        fail_link(
            node,
            k,
            FailureReason::Replaced,
            "replaced by a newer admitted connection",
            now,
        );
    }
    let id = node.fresh_conn_id();
    let Ok(welcome) = welcome(lane, node.me(), peer.capabilities) else {
        return;
    };
    if let Err(e) = node.send_to(slot, &route, &welcome) {
        tracing::debug!(error = %e, "welcome not sent");
        return;
    }
    node.core_mut().accepting.admitted(slot, route.clone(), k);
    node.add_peer_unit(slot, k, id);
    let conn = Conn::admitted(id, slot, route, verified, now);
    node.core_mut().links[k].handle_admitted_inbound(conn, now);
    become_ready(node, k, peer, now);
}

/// Refuses the unadmitted connection `route` of bound socket `slot`: one REJECT, and
/// nothing it sends afterwards is looked at (while the refusals remember it).
fn refuse<S: Shell>(node: &mut S, slot: SlotKey, route: &[u8], reason: RejectReason, detail: &str) {
    if node.core_mut().accepting.refuse(slot, route) {
        let _ = node.send_to(slot, route, &reject(reason, detail));
    }
}

/// Refuses as admission decided: the input refusal counted if it is one, then [`refuse`].
fn refuse_with<S: Shell>(node: &mut S, slot: SlotKey, route: &[u8], r: Refusing, now: Instant) {
    if let Some(why) = r.counted {
        node.record_refusal(slot, why, r.detail.clone(), now);
    }
    refuse(node, slot, route, r.reason, &r.detail);
}

/// The handshake of link `k`'s connection is done with `peer`: the link makes it ready
/// ([`Link::handle_ready`]) with its liveness entry, the caller learns the channels the
/// peer serves, its send queue opens and the application hears of it.
fn become_ready<S: Shell>(node: &mut S, k: LinkKey, peer: Identity, now: Instant) {
    let core = node.core_mut();
    let Some(id) = core.links[k].conn.as_ref().map(|c| c.id) else {
        return;
    };
    let live = core.liveness.insert_connection(k, id, now);
    let Some(ready) = core.links[k].handle_ready(peer, live, now) else {
        return;
    };
    node.learn_servers(&ready.servers);
    // One-way records may go to it from now on (before the application hears of it).
    node.open_send_queue(k);
    node.emit_state(k, ConnState::Ready, None, &ready.detail);
}

/// The acceptor admitted link `k`'s connection with a WELCOME on `lane` from `peer`: the
/// dialler checks it is who it expects ([`Admission::judge_welcome`]), then the link is
/// ready; if it is not, the acceptor is told why and the connection fails.
pub(crate) fn handle_welcome<S: Shell>(
    node: &mut S,
    k: LinkKey,
    lane: Lane,
    peer: Identity,
    now: Instant,
) {
    let l = &node.core().links[k];
    let verified = l.conn.as_ref().and_then(|c| c.verified_key);
    let decision = admission(node).judge_welcome(&l.kind, verified, lane, &peer);
    match decision {
        WelcomeDecision::Ignore => {}
        WelcomeDecision::Ready => {
            note(node.core_mut().links[k].state.handle_admitted(now));
            become_ready(node, k, peer, now);
        }
        WelcomeDecision::Refuse(refused) => {
            // Tell the acceptor why, then close our side.
            if let Some(reason) = refused.reject {
                let _ = node.send_on_link(k, reject(reason, &refused.detail));
            }
            fail_link(node, k, refused.failure, &refused.detail, now);
        }
    }
}

/// Takes link `k`'s current connection out of ready at once and closes it (MISSION F1,
/// L6): the calls leased on it fail, its send queue closes (the records still in it named in
/// the failure), the link records the failure ([`links::fail`]), the connection closes
/// ([`close_conn`]) and the application hears of it.
pub(crate) fn fail_link<S: Shell>(
    node: &mut S,
    k: LinkKey,
    reason: FailureReason,
    detail: &str,
    now: Instant,
) {
    let Some(conn_id) = node.core().links[k].conn.as_ref().map(|c| c.id) else {
        return;
    };
    // Calls leased on this connection fail at once, as "may have run" (MISSION C2).
    node.fail_calls(k, conn_id, reason, now);
    // One-way records still in its zmesh queue are counted and named in this failure,
    // never silently gone.
    let unsent = node.close_send_queue(k, reason);
    let running = node.admitting();
    let failed = {
        let (core, configured) = node.core_with_configured();
        let failure = (reason, detail);
        links::fail(
            &mut core.links,
            &configured,
            k,
            failure,
            unsent,
            running,
            now,
        )
    };
    let Some(failed) = failed else {
        return;
    };
    close_conn(node, k, failed.conn, reason, now);
    let event = failed.event;
    node.emit_state(k, event.state, event.reason, &event.detail);
    if failed.counted {
        node.count(Count::LinkFailure(reason));
    }
}

/// Closes connection `conn`, which link `k` held until it failed for `reason`: its
/// liveness entry goes, then its dialled socket closes, or (an inbound connection on a
/// shared bound socket, whose one pipe libzmq cannot close) the peer is told to close
/// ([`links::inbound_close`]) and the routing id is forgotten, so that late records of this
/// physical connection change nothing (MISSION L6).
pub(crate) fn close_conn<S: Shell>(
    node: &mut S,
    k: LinkKey,
    conn: Conn,
    reason: FailureReason,
    _now: Instant,
) {
    if let Some(live) = conn.live {
        node.core_mut().liveness.remove(live);
    }
    if node.close_dialled(k, conn.slot) {
        return;
    }
    if let Some(route) = conn.route {
        if let Some(reason) = links::inbound_close(reason) {
            let _ = node.send_to(conn.slot, &route, &Record::Close { reason }.encode());
        }
        if let Some(m) = node.core_mut().accepting.inbound.get_mut(&conn.slot) {
            m.remove(route.as_slice());
        }
        node.remove_peer_unit(k, conn.id);
    }
}

/// The peer ended link `k`'s connection with a REJECT or CLOSE, judged as `verdict`: the
/// link fails, and stands down if the peer's own dial of the lane is current (T1).
pub(crate) fn handle_peer_ended<S: Shell>(
    node: &mut S,
    k: LinkKey,
    verdict: PeerEnded,
    detail: &str,
    now: Instant,
) {
    fail_link(node, k, verdict.reason, detail, now);
    if verdict.stands_down {
        // The peer's own dial of this lane is the current connection (T1).
        node.core_mut().links[k].yielded = true;
    }
}

/// Inbound link `k`'s connection is gone: it fails, or stands down if it was the peer's
/// duplicate dial of a lane our own dial holds (T1, [`links::gone_inbound`]).
pub(crate) fn fail_gone_inbound<S: Shell>(node: &mut S, k: LinkKey, now: Instant) {
    let (reason, detail) = links::gone_inbound(&node.core().links, &node.configured(), k);
    fail_link(node, k, reason, detail, now);
}

/// A step of the fallback after a disconnect event of bound socket `slot`
/// ([`SWEEP_DELAYS`](crate::proto::node::timers::SWEEP_DELAYS)): every connection names its
/// own loss in band (its notice: [`fail_gone_inbound`]), except one whose pipe was full when
/// it was lost (libzmq drops that notice). If more connections are admitted on the socket
/// than its monitor counts open, a notice is missing (or still queued behind records), and
/// the socket is swept ([`sweep`]); otherwise nothing is sent. An unadmitted connection open
/// at the time hides a missing notice from the count: the peer's next connection of the lane
/// replaces the link at its HELLO, and failing that, the link's 15 s deadline (L2) takes it
/// out of ready.
pub(crate) fn check_bound_disconnects<S: Shell>(node: &mut S, slot: SlotKey, now: Instant) {
    let accepting = &node.core().accepting;
    let admitted = accepting.inbound.get(&slot).map_or(0, |m| m.len());
    if admitted > accepting.gate.open_on(slot) {
        sweep(node, slot, now);
    }
}

/// Checks every inbound connection of a bound socket for a vanished pipe: a record sent
/// with `ROUTER_MANDATORY` to a routing id whose pipe is gone fails as unreachable. The
/// record is one that changes nothing at the peer ([`links::sweep_record`]); each one sent
/// is counted ([`Count::SweepRecord`]).
fn sweep<S: Shell>(node: &mut S, slot: SlotKey, now: Instant) {
    let core = node.core();
    let victims: Vec<(Vec<u8>, LinkKey)> = (core.accepting.inbound.get(&slot))
        .map(|m| m.iter().map(|(r, k)| (r.clone(), *k)).collect())
        .unwrap_or_default();
    for (route, k) in victims {
        let core = node.core();
        let Some(c) = core.links[k].conn.as_ref() else {
            continue;
        };
        let pending = c
            .live
            .and_then(|key| core.liveness.table().probe(key))
            .and_then(|t| t.pending_id());
        let Some(record) = links::sweep_record(c, pending) else {
            continue;
        };
        node.count(Count::SweepRecord);
        let sent = node.send_sweep_record(slot, &route, record);
        if sent.is_err_and(|e| e.unreachable()) {
            fail_gone_inbound(node, k, now);
        }
    }
}

/// What a new allow-list does ([`Accepting::allow_list_effects`]): the dialled links
/// refused for want of an allowed key dial again now; each connection of a node whose key
/// left the list is told why if it is inbound (one REJECT), then fails as a security failure.
pub(crate) fn handle_allow_list_effects<S: Shell>(
    node: &mut S,
    effects: AllowListEffects,
    now: Instant,
) {
    for k in effects.redial {
        node.core_mut().links[k].retry_at = Some(now);
    }
    for removed in effects.removed {
        if let Some((reason, detail)) = removed.reject {
            let _ = node.send_on_link(removed.link, reject(reason, detail));
        }
        fail_link(
            node,
            removed.link,
            FailureReason::SecurityFailure,
            removed.detail,
            now,
        );
    }
}

/// Holds every link of `rid` (only its inbound links if `inbound_only`) to its current
/// fence: a ready connection of another run is closed, a dial in progress (started under
/// an older fence) is closed, and a dialled link with no connection is reconfigured for
/// the new generation and dialled as soon as the close of its last socket is confirmed.
pub(crate) fn refence<S: Shell>(
    node: &mut S,
    rid: &str,
    generation: u64,
    inbound_only: bool,
    now: Instant,
) {
    let verdicts = admission(node).refence(rid, inbound_only);
    for (k, verdict) in verdicts {
        match verdict {
            Refenced::Keep => {}
            Refenced::ReplacedRun => {
                let detail =
                    format!("a descriptor of generation {generation:016x} replaces this run");
                fail_link(node, k, FailureReason::Reconfigured, &detail, now);
            }
            Refenced::StaleDial => {
                fail_link(
                    node,
                    k,
                    FailureReason::Reconfigured,
                    "dial started under an older descriptor",
                    now,
                );
            }
        }
        if let Some(event) = node.core_mut().links[k].refenced(generation, now) {
            node.emit_state(k, event.state, event.reason, &event.detail);
        }
    }
}

/// Stops dialling link `k` (its descriptor is gone): as [`Link::withdraw`] decides.
pub(crate) fn withdraw<S: Shell>(node: &mut S, k: LinkKey, now: Instant) {
    match node.core_mut().links[k].withdraw(now) {
        Withdrawal::Nothing => {}
        Withdrawal::Close => fail_link(node, k, FailureReason::Reconfigured, WITHDRAWN, now),
        Withdrawal::Report(event) => node.emit_state(k, event.state, event.reason, &event.detail),
    }
}

/// Runs what is due at `now` (see the module docs): the liveness table's timers
/// (coalesced: a wake-up for a due timer also starts every probe and beacon due within the
/// next [`liveness::COALESCE_WINDOW`], never late, at most that early; deadlines never
/// early, so that thousands of connections' probe cycles a few milliseconds apart cost one
/// wake-up per window instead of one each, and their ACKs come back together), then only
/// the links and subscriptions whose deadline is due (an idle node has none set at all).
pub(crate) fn handle_timeout<S: Shell>(node: &mut S, now: Instant) {
    // Every liveness machine of the node, from one table (MISSION L8).
    node.core_mut()
        .liveness
        .table_mut()
        .handle_timeout_coalesced(now);
    while let Some(t) = node.core_mut().liveness.table_mut().poll_transmit(now) {
        match t {
            Transmit::Probe { key, id, .. } => {
                if let Some(LiveOwner::Link(k)) = node.core().liveness.owner(key) {
                    node.send_probe(k, id);
                }
            }
            Transmit::Beacon { key } => node.send_beacon(key),
        }
    }
    handle_liveness_events(node, now);
    node.sync_timers();
    if !node.core().timers.due(now) {
        return;
    }
    // Handshake timeouts.
    for k in node.core().timers.due_links(now) {
        if node.core().links[k].is_handshake_overdue(now) {
            fail_link(
                node,
                k,
                FailureReason::TransportError,
                "handshake timed out",
                now,
            );
        }
    }
    // Reconnects and overdue close confirmations, also of links the timeouts above made
    // due.
    node.sync_timers();
    for k in node.core().timers.due_links(now) {
        if node.core().links[k].is_redial_due(now) {
            node.dial(k, now);
        }
        if node.core().links[k].is_close_overdue(now) {
            node.close_overdue(k);
        }
    }
    node.settle_overdue_closing();
    // Fanout subscriptions without a socket get a new one (MISSION L5).
    node.sync_timers();
    for sub in node.core().timers.due_subs(now) {
        node.open_due_sub(sub, now);
    }
    // The fallback after bound-socket disconnects, for a notice libzmq dropped.
    for slot in node.core_mut().timers.take_due_sweeps(now) {
        check_bound_disconnects(node, slot, now);
    }
}

/// Acts on the liveness table's verdicts: a connection's probe deadline fails its link, a
/// publisher's event goes to its subscription.
fn handle_liveness_events<S: Shell>(node: &mut S, now: Instant) {
    while let Some((key, ev)) = node.core_mut().liveness.table_mut().poll_event() {
        match (node.core().liveness.owner(key), ev) {
            (
                Some(LiveOwner::Link(k)),
                LivenessEvent::Probe(ProbeEvent::DeadlineExceeded { .. }),
            ) => {
                fail_link(
                    node,
                    k,
                    FailureReason::DeadlineExceeded,
                    "no valid ACK for 15 s",
                    now,
                );
            }
            (Some(LiveOwner::Sub(i)), LivenessEvent::Publisher(ev)) => {
                node.on_publisher_event(i, ev, now);
            }
            (owner, ev) => tracing::debug!(?owner, ?ev, "liveness event without an owner"),
        }
    }
}

/// Acts on event `event` (with its `value`) of the monitor of socket `slot`, a dialled or
/// SUB socket (`watching`), as [`monitor_op`] says (see the module docs).
pub(crate) fn handle_monitor_event<S: Shell>(
    node: &mut S,
    slot: SlotKey,
    watching: Watching,
    (event, value): (MonitorEvent, u32),
    now: Instant,
) {
    match monitor_op(watching, event, value, node.runs_curve()) {
        MonitorOp::Nothing => {}
        MonitorOp::SendHello(k) => send_hello(node, k),
        MonitorOp::FailLink {
            link,
            reason,
            detail,
        } => fail_link(node, link, reason, &detail, now),
        MonitorOp::Disconnected(k) => {
            node.drain_before_disconnect(slot, now);
            if node.core().links[k].hello_sent_on(slot) {
                fail_link(node, k, FailureReason::TransportError, "disconnected", now);
            }
        }
        MonitorOp::SubConnected(sub) => node.sub_connected(sub),
        MonitorOp::FailSub {
            sub,
            reason,
            detail,
        } => node.fail_sub(sub, reason, &detail, now),
    }
}

/// HELLO from a dialler.
fn hello(
    lane: Lane,
    me: &Identity,
    expect: &Expectation,
    config_generation: u64,
) -> Result<Vec<Vec<u8>>, WireError> {
    let hello = handshake::hello_record(lane, me, expect, config_generation)?;
    Ok(Record::Hello(hello).encode())
}

/// WELCOME from an acceptor, answering a HELLO that offered the capabilities `offered`.
fn welcome(
    lane: Lane,
    me: &Identity,
    offered: handshake::Capabilities,
) -> Result<Vec<Vec<u8>>, WireError> {
    Ok(Record::Welcome(handshake::welcome_record(lane, me, offered)?).encode())
}

/// REJECT with a reason and detail (cut to the wire's bound).
pub(crate) fn reject(reason: RejectReason, detail: &str) -> Vec<Vec<u8>> {
    let mut d = detail.to_owned();
    while d.len() > 1024 {
        d.pop();
    }
    Record::Reject(wire::Reject {
        reason,
        detail: wire::Detail::new(d).unwrap_or_default(),
    })
    .encode()
}

#[cfg(test)]
pub(super) mod tests;
