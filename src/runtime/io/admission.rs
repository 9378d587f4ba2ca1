//! Handshake and admission: HELLO from the dialler, admission (or REJECT) by the acceptor,
//! WELCOME checked by the dialler, duplicate resolution between two nodes that dial each other
//! (MISSION T1), NotRequired (T4), and the step to ready. The decisions are the core's
//! ([`crate::proto::admission`], and [`crate::proto::node::admit`] for what this node expects
//! of a peer and which of its dials stands down); this file gathers their inputs, moves
//! their records and acts on what they decide.
//!
//! A connection that does not open with a well-formed HELLO is refused like one whose HELLO
//! fails admission: one REJECT (`Protocol`, or `UnsupportedVersion` for another envelope
//! version), then everything else it sends is ignored ([`Refused`](crate::proto::node::accepting::Refused), WIRE.md §5.1).

use std::sync::Arc;
use std::time::Instant;

use super::parts::local::ConfigView;
use super::parts::sockets::Unit;
use super::{Host, IoThread, LinkKey, SlotKey, Tracked};
use crate::proto::admission::{self, Refusing, WelcomeFacts};
use crate::proto::handshake::{Expectation, Identity};
use crate::proto::node::admit::{Admission, Inbound, InboundDecision};
use crate::proto::node::link::{note, Conn, Link, LinkKind};
use crate::proto::node::source::Source;
use crate::proto::sched::Source as SchedSource;
use crate::proto::security::{InputRefusal, PublicKey};
use crate::proto::state::{ConnState, FailureReason};
use crate::runtime::records::{self, Lane, Rec, RejectReason};
use crate::runtime::socket::Frame;

impl IoThread {
    pub(super) fn send_hello(&mut self, k: LinkKey) {
        // Once per connection: a dialled ROUTER learns that its handshake is done both from
        // its monitor and in band (`on_router_notice`), in either order.
        if self.links[k].conn.as_ref().is_none_or(|c| c.hello_sent) {
            return;
        }
        let Some((lane, expect)) = self.dial_expectation(k) else {
            return;
        };
        let sent = match records::hello(lane, &self.local.me, &expect, 0) {
            Ok(frames) => self.send_on_link(k, frames),
            Err(e) => {
                tracing::error!(error = %e, "cannot encode HELLO");
                return;
            }
        };
        if let Some(c) = self.links[k].conn.as_mut() {
            c.hello_sent = sent.is_ok();
        }
    }

    /// What admission reads of this node: the configured peers and servers, the descriptor
    /// fences, the links and this node's identity.
    pub(super) fn admission(&self) -> Admission<'_, ConfigView<'_>, Tracked<LinkKey, Link>> {
        Admission {
            configured: self.local.configured(),
            discovered: &self.discovered,
            links: &self.links,
            local: &self.local.me,
        }
    }

    /// A dialled link's lane and what it expects of the node it dials.
    fn dial_expectation(&self, k: LinkKey) -> Option<(Lane, Expectation)> {
        self.admission().dial_expectation(&self.links[k].kind)
    }

    pub(super) fn on_unknown_inbound(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: Frame,
        frames: &mut [Frame],
        now: Instant,
    ) {
        if self.accepting.refused.contains(slot, route.as_ref()) {
            // Refused already: the rest of what this connection sends is ignored.
            return;
        }
        let route = route.as_ref().to_vec();
        let Some(verified) = self.verified_key(slot, &route, frames, now) else {
            return;
        };
        let hello = match records::decode(&*frames, crate::proto::wire::Capabilities::NONE) {
            Ok(Rec::Hello(h)) => h,
            Ok(rec) => {
                // A record from a physical connection that is not (or no longer) admitted:
                // it changes nothing (MISSION L6).
                metrics::counter!("zmesh_stale_records_total").increment(1);
                if let Some(r) = admission::refuse_before_hello(rec.kind()) {
                    self.refuse_with(slot, &route, r, now);
                }
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "malformed record from an unadmitted connection");
                self.refuse_with(slot, &route, admission::refuse_malformed(&e), now);
                return;
            }
        };
        if self.judge_inbound(slot, lane, &route, &hello, verified, now) {
            self.admit_inbound(slot, lane, route, hello.identity, verified, now);
        }
    }

    /// With CURVE, the key the connection proved, as the ZAP handler answered it (the User-Id
    /// of the record's frames, read unshared for this: `recv_one`): `Some(None)` without
    /// CURVE, `None` if the connection holds no verified key (it is refused).
    fn verified_key(
        &mut self,
        slot: SlotKey,
        route: &[u8],
        frames: &mut [Frame],
        now: Instant,
    ) -> Option<Option<PublicKey>> {
        if self.local.curve.is_none() {
            return Some(None);
        }
        let Some(id) = frames.first_mut().and_then(Frame::user_id) else {
            return self.no_verified_key(slot, route, None, now);
        };
        match id.parse() {
            Ok(key) => Some(Some(key)),
            Err(_) => self.no_verified_key(slot, route, Some(&id), now),
        }
    }

    /// Refuses a CURVE connection whose key the ZAP handler did not answer (never the case:
    /// it answers every CURVE client's key).
    fn no_verified_key(
        &mut self,
        slot: SlotKey,
        route: &[u8],
        id: Option<&str>,
        now: Instant,
    ) -> Option<Option<PublicKey>> {
        let detail = format!("no verified CURVE key on this connection ({id:?})");
        self.record_refusal(slot, InputRefusal::SecurityFailure, detail.clone(), now);
        self.refuse(slot, route, RejectReason::SecurityFailure, &detail);
        None
    }

    /// Asks the core ([`Admission::judge_inbound`]) about a HELLO and acts on a refusal or a
    /// dial of ours that stands down. Returns whether the connection is admitted.
    fn judge_inbound(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: &[u8],
        hello: &records::HelloRec,
        verified: Option<PublicKey>,
        now: Instant,
    ) -> bool {
        let decision = self.admission().judge_inbound(&Inbound {
            socket_lane: lane,
            hello_lane: hello.lane,
            peer: &hello.identity,
            peer_expects: &hello.expect,
            verified_key: verified,
            admitting: self.local.host == Host::Running,
        });
        match decision {
            InboundDecision::Refuse(r) => {
                self.refuse_with(slot, route, r, now);
                false
            }
            InboundDecision::Admit { stand_down } => {
                if let Some(dk) = stand_down {
                    // Their dial wins: stand our own dial down.
                    if self.links[dk].conn.is_some() {
                        self.fail_link(
                            dk,
                            FailureReason::StoodDown,
                            "peer's own dial is current",
                            now,
                        );
                    }
                    self.links[dk].yielded = true;
                }
                true
            }
        }
    }

    /// Makes an admitted connection the peer's current one on `lane`: WELCOME, its link and
    /// scheduler unit, then ready.
    fn admit_inbound(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: Vec<u8>,
        peer: Identity,
        verified: Option<PublicKey>,
        now: Instant,
    ) {
        let k = self.inbound_link(&peer.rid, lane, now);
        // A replacement connection of the same peer and lane (F3): the dialler closed the old
        // one before dialling this one, so the old one is done.
        if self.links[k].conn.is_some() {
            self.fail_link(
                k,
                FailureReason::Replaced,
                "replaced by a newer admitted connection",
                now,
            );
        }
        let id = self.local.fresh_conn_id();
        let Ok(welcome) = records::welcome(lane, &self.local.me, peer.capabilities) else {
            return;
        };
        if let Err(e) = self.sockets.send(slot, Some(&route), &welcome) {
            tracing::debug!(error = %e, "welcome not sent");
            return;
        }
        self.accepting.admitted(slot, route.clone(), k);
        if let Some(sid) = self.sockets.shared_id(slot) {
            if let Err(e) = self
                .receiving
                .sched
                .add_unit(Unit::Peer(k, id), SchedSource::Shared(sid))
            {
                tracing::debug!(error = ?e, "scheduler unit not added");
            }
        }
        self.links[k].conn = Some(Conn {
            id,
            slot,
            route: Some(route),
            opened_at: now,
            hello_sent: true,
            ready: false,
            peer: None,
            source: None,
            live: None,
            last_peer_probe: None,
            held: Vec::new(),
            verified_key: verified,
            notices: 0,
        });
        if self.links[k].state.state() != ConnState::Connecting {
            note(self.links[k].state.handle_connecting(now));
        }
        note(self.links[k].state.handle_admitted(now));
        self.become_ready(k, peer, now);
    }

    /// Refuses the unadmitted connection `route` of bound socket `slot`: one REJECT, and
    /// nothing it sends afterwards is looked at (while [`Refused`](crate::proto::node::accepting::Refused) remembers it).
    fn refuse(&mut self, slot: SlotKey, route: &[u8], reason: RejectReason, detail: &str) {
        if self.accepting.refuse(slot, route) {
            let _ = self
                .sockets
                .send(slot, Some(route), &records::reject(reason, detail));
        }
    }

    /// Refuses as [`admission`] decided: the input refusal counted if it is one, then
    /// [`Self::refuse`].
    fn refuse_with(&mut self, slot: SlotKey, route: &[u8], r: Refusing, now: Instant) {
        if let Some(why) = r.counted {
            self.record_refusal(slot, why, r.detail.clone(), now);
        }
        self.refuse(slot, route, r.reason, &r.detail);
    }

    pub(super) fn inbound_link(&mut self, rid: &str, lane: Lane, now: Instant) -> LinkKey {
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

    pub(super) fn become_ready(&mut self, k: LinkKey, peer: Identity, now: Instant) {
        // A ready connection has no handshake timeout any more.
        let l = &mut self.links[k];
        let Some(c) = l.conn.as_mut() else {
            return;
        };
        c.ready = true;
        let rid: Arc<str> = Arc::from(peer.rid.as_str());
        c.source = Some(match &l.kind {
            LinkKind::MeshDial { .. } => Source::Peer { rid },
            LinkKind::Inbound {
                lane: Lane::ClientServer,
                ..
            } => Source::Client { rid },
            LinkKind::Inbound { .. } => Source::Peer { rid },
            LinkKind::ClientDial { .. } => Source::Server { rid },
        });
        let id = c.id;
        // The 15 s deadline runs from ready (WIRE.md §5.2).
        c.live = Some(self.liveness.insert_connection(k, id, now));
        let rid = peer.rid.clone();
        for m in &peer.memberships {
            if m.role == crate::proto::handshake::Role::Server {
                self.caller.calls_mut().learn_server(&m.channel);
            }
        }
        c.peer = Some(peer);
        let l = &mut self.links[k];
        l.failures_in_row = 0;
        note(l.state.handle_ready(now));
        // One-way records may go to it from now on (before the application hears of it).
        self.open_send_queue(k);
        let link = self.local.link_id(&self.links[k].kind);
        self.app.emit_state(
            link,
            ConnState::Ready,
            None,
            &format!("{rid} ready on {id}"),
        );
    }

    /// The acceptor admitted us: verify it is who we expect, then the lane is ready.
    pub(super) fn on_welcome(&mut self, k: LinkKey, w: records::WelcomeRec, now: Instant) {
        let Some((lane, expect)) = self.dial_expectation(k) else {
            return;
        };
        let verified = self.links[k].conn.as_ref().and_then(|c| c.verified_key);
        let verified_z85 = verified.map(|key| key.to_z85());
        let verdict = admission::judge_welcome(&WelcomeFacts {
            lane,
            welcome_lane: w.lane,
            peer: &w.identity,
            verified_key: verified_z85.as_deref(),
            local: &self.local.me,
            expect: &expect,
        });
        match verdict {
            Ok(()) => {
                note(self.links[k].state.handle_admitted(now));
                self.become_ready(k, w.identity, now);
            }
            Err(refused) => {
                // Tell the acceptor why, then close our side.
                if let Some(reason) = refused.reject {
                    let _ = self.send_on_link(k, records::reject(reason, &refused.detail));
                }
                self.fail_link(k, refused.failure, &refused.detail, now);
            }
        }
    }
}
