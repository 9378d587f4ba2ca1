//! Handshake and admission: HELLO from the dialler, admission (or REJECT) by the acceptor,
//! WELCOME checked by the dialler, duplicate resolution between two nodes that dial each other
//! (MISSION T1), NotRequired (T4), and the step to ready. The decisions are the core's
//! ([`crate::proto::admission`]; [`crate::proto::node::admit`] for what this node expects of
//! a peer, what an unadmitted connection's first record and a WELCOME lead to and which of
//! its dials stands down; `proto::node::ready` for what an admitted connection and a done
//! handshake do to their link); this file reads their inputs off the frames (the record, the
//! CURVE `User-Id`), sends their records and hands the rest to the other parts.
//!
//! A connection that does not open with a well-formed HELLO is refused like one whose HELLO
//! fails admission: one REJECT (`Protocol`, or `UnsupportedVersion` for another envelope
//! version), then everything else it sends is ignored ([`Refused`](crate::proto::node::accepting::Refused), WIRE.md §5.1).

use std::time::Instant;

use super::parts::local::ConfigView;
use super::parts::sockets::Unit;
use super::{Host, IoThread, LinkKey, SlotKey, Tracked};
use crate::proto::admission::Refusing;
use crate::proto::handshake::{Expectation, Identity};
use crate::proto::node::admit::{
    Admission, Credentials, FirstRecord, FirstVerdict, WelcomeDecision,
};
use crate::proto::node::link::{note, Conn, Link};
use crate::proto::sched::Source as SchedSource;
use crate::proto::security::{InputRefusal, PublicKey};
use crate::proto::state::{ConnState, FailureReason};
use crate::runtime::records::{self, Lane, Rec, RejectReason};
use crate::runtime::socket::Frame;

impl IoThread {
    pub(super) fn send_hello(&mut self, k: LinkKey) {
        // Once per connection: a dialled ROUTER learns that its handshake is done both from
        // its monitor and in band (`on_router_notice`), in either order.
        if self.core.links[k]
            .conn
            .as_ref()
            .is_none_or(|c| c.hello_sent)
        {
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
        if let Some(c) = self.core.links[k].conn.as_mut() {
            c.hello_sent = sent.is_ok();
        }
    }

    /// What admission reads of this node: the configured peers and servers, the descriptor
    /// fences, the links and this node's identity.
    pub(super) fn admission(&self) -> Admission<'_, ConfigView<'_>, Tracked<LinkKey, Link>> {
        Admission {
            configured: self.local.configured(),
            discovered: &self.core.discovered,
            links: &self.core.links,
            local: &self.local.me,
        }
    }

    /// A dialled link's lane and what it expects of the node it dials.
    fn dial_expectation(&self, k: LinkKey) -> Option<(Lane, Expectation)> {
        self.admission().dial_expectation(&self.core.links[k].kind)
    }

    /// The first record of an unadmitted connection `route` of bound socket `slot`, as the
    /// core judges it ([`Admission::judge_first_record`]): refused (one REJECT), stale, or
    /// admitted, standing a dial of ours down if the peer's wins.
    pub(super) fn on_unknown_inbound(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: Frame,
        frames: &mut [Frame],
        now: Instant,
    ) {
        if self.core.accepting.refused.contains(slot, route.as_ref()) {
            // Refused already: the rest of what this connection sends is ignored.
            return;
        }
        let route = route.as_ref().to_vec();
        // With CURVE, the key the connection proved, as the ZAP handler answered it: the
        // User-Id of the record's frames, read unshared for this (`recv_one`).
        let user_id = match self.local.curve {
            Some(_) => frames.first_mut().and_then(Frame::user_id),
            None => None,
        };
        let credentials = match self.local.curve {
            Some(_) => Credentials::Curve(user_id.as_deref()),
            None => Credentials::Plain,
        };
        let rec = records::decode(&*frames, crate::proto::wire::Capabilities::NONE);
        let first = match &rec {
            Ok(Rec::Hello(h)) => FirstRecord::Hello {
                lane: h.lane,
                peer: &h.identity,
                expects: &h.expect,
            },
            Ok(rec) => FirstRecord::Other(rec.kind()),
            Err(e) => FirstRecord::Malformed(e),
        };
        let admitting = self.local.host == Host::Running;
        let verdict = self
            .admission()
            .judge_first_record(lane, credentials, first, admitting);
        match verdict {
            FirstVerdict::Refuse(r) => {
                if let (Err(e), Some(InputRefusal::Malformed)) = (&rec, r.counted) {
                    tracing::debug!(error = %e, "malformed record from an unadmitted connection");
                }
                self.refuse_with(slot, &route, r, now);
            }
            FirstVerdict::Stale(r) => {
                metrics::counter!("zmesh_stale_records_total").increment(1);
                if let Some(r) = r {
                    self.refuse_with(slot, &route, r, now);
                }
            }
            FirstVerdict::Admit {
                stand_down,
                verified_key,
            } => {
                if let Some(dk) = stand_down {
                    // Their dial wins: stand our own dial down.
                    if self.core.links[dk].conn.is_some() {
                        self.fail_link(
                            dk,
                            FailureReason::StoodDown,
                            "peer's own dial is current",
                            now,
                        );
                    }
                    self.core.links[dk].yielded = true;
                }
                if let Ok(Rec::Hello(hello)) = rec {
                    self.admit_inbound(slot, lane, route, hello.identity, verified_key, now);
                }
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
        let k = self.core.inbound_link(&peer.rid, lane, now);
        // A replacement connection of the same peer and lane (F3): the dialler closed the old
        // one before dialling this one, so the old one is done.
        if self.core.links[k].conn.is_some() {
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
        self.core.accepting.admitted(slot, route.clone(), k);
        if let Some(sid) = self.sockets.shared_id(slot) {
            if let Err(e) = self
                .receiving
                .sched
                .add_unit(Unit::Peer(k, id), SchedSource::Shared(sid))
            {
                tracing::debug!(error = ?e, "scheduler unit not added");
            }
        }
        let conn = Conn::admitted(id, slot, route, verified, now);
        self.core.links[k].handle_admitted_inbound(conn, now);
        self.become_ready(k, peer, now);
    }

    /// Refuses the unadmitted connection `route` of bound socket `slot`: one REJECT, and
    /// nothing it sends afterwards is looked at (while [`Refused`](crate::proto::node::accepting::Refused) remembers it).
    fn refuse(&mut self, slot: SlotKey, route: &[u8], reason: RejectReason, detail: &str) {
        if self.core.accepting.refuse(slot, route) {
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

    /// The handshake of link `k`'s connection is done with `peer`: the link makes it ready
    /// ([`Link::handle_ready`]) with its liveness entry, the caller learns the channels the
    /// peer serves, its send queue opens and the application hears of it.
    pub(super) fn become_ready(&mut self, k: LinkKey, peer: Identity, now: Instant) {
        let Some(id) = self.core.links[k].conn.as_ref().map(|c| c.id) else {
            return;
        };
        let live = self.core.liveness.insert_connection(k, id, now);
        let Some(ready) = self.core.links[k].handle_ready(peer, live, now) else {
            return;
        };
        for channel in &ready.servers {
            self.caller.calls_mut().learn_server(channel);
        }
        // One-way records may go to it from now on (before the application hears of it).
        self.open_send_queue(k);
        let link = self.local.link_id(&self.core.links[k].kind);
        self.app
            .emit_state(link, ConnState::Ready, None, &ready.detail);
    }

    /// The acceptor admitted us: the core checks it is who we expect
    /// ([`Admission::judge_welcome`]), then the lane is ready.
    pub(super) fn on_welcome(&mut self, k: LinkKey, w: records::WelcomeRec, now: Instant) {
        let l = &self.core.links[k];
        let verified = l.conn.as_ref().and_then(|c| c.verified_key);
        let decision = self
            .admission()
            .judge_welcome(&l.kind, verified, w.lane, &w.identity);
        match decision {
            WelcomeDecision::Ignore => {}
            WelcomeDecision::Ready => {
                note(self.core.links[k].state.handle_admitted(now));
                self.become_ready(k, w.identity, now);
            }
            WelcomeDecision::Refuse(refused) => {
                // Tell the acceptor why, then close our side.
                if let Some(reason) = refused.reject {
                    let _ = self.send_on_link(k, records::reject(reason, &refused.detail));
                }
                self.fail_link(k, refused.failure, &refused.detail, now);
            }
        }
    }
}
