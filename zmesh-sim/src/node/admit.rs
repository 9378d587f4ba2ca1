//! Admission in a simulated node run, as io/admission.rs runs it, through the library's node
//! core ([`Admission`], `zmesh::proto::node::admit`): a dialled connection sends HELLO once
//! connected, with what the core expects of the peer or server it dials; an unknown inbound
//! connection's first record is judged by [`Admission::judge_first_record`] (without CURVE:
//! a REJECT, stale, or WELCOME and ready, standing our own dial down when theirs wins); a
//! WELCOME is judged by `proto::admission::judge_welcome` against the same expectation; a
//! REJECT ends the dial (and says whether it comes back).
//!
//! The core reads this run's configuration through [`Configured`]: its peers are the hosts it
//! dials on the mesh lanes and its servers the hosts it dials on a ClientServer lane, each by
//! its host index; it reads the run's own dials through [`OwnDials`].

use std::collections::BTreeMap;

use zmesh::proto::admission::{self, WelcomeFacts};
use zmesh::proto::handshake::{self, Expectation, Identity};
use zmesh::proto::node::admit::{
    Admission, Configured, Credentials, DialView, FirstRecord, FirstVerdict, OwnDials, PeerView,
    ServerView,
};
use zmesh::proto::wire::{self, CloseReason, Lane, Record, RejectReason};
use zmesh::proto::ConnId;

use super::{Conn, Dial, Phase, Ready, SimNode};
use crate::net::{End, NetConn, NodeIx};
use crate::Ctx;

/// A run's dials, as admission reads them: its configured peers and servers, and its own
/// dials of them.
#[derive(Clone, Copy)]
pub(super) struct Dials<'a>(pub(super) &'a BTreeMap<(NodeIx, u8), Dial>);

impl Dials<'_> {
    /// The dial of host `host` on one of the mesh lanes.
    fn mesh(&self, host: usize) -> Option<&Dial> {
        [Lane::Application, Lane::Completion]
            .into_iter()
            .find_map(|lane| self.0.get(&(host, u8::from(lane))))
    }
}

impl Configured for Dials<'_> {
    fn peer(&self, peer: usize) -> Option<PeerView<'_>> {
        self.mesh(peer).map(|d| PeerView {
            rid: &d.rid,
            generation: None,
            security_identity: None,
            pinned_key: None,
        })
    }

    fn peer_index(&self, rid: &str) -> Option<usize> {
        crate::host_of_rid(rid).filter(|&h| self.mesh(h).is_some_and(|d| d.rid == rid))
    }

    fn server(&self, server: usize) -> Option<ServerView<'_>> {
        self.0
            .get(&(server, u8::from(Lane::ClientServer)))
            .map(|d| ServerView {
                rid: Some(&d.rid),
                endpoint: &d.endpoint,
                pinned_key: None,
            })
    }
}

impl OwnDials for Dials<'_> {
    type Dial = (NodeIx, u8);

    fn mesh_dial(&self, peer: usize, lane: Lane) -> Option<DialView<(NodeIx, u8)>> {
        let key = (peer, u8::from(lane));
        self.0.get(&key).map(|d| DialView {
            dial: key,
            withdrawn: d.withdrawn,
        })
    }
}

impl SimNode {
    pub(super) fn on_connected(&mut self, ctx: &mut Ctx<'_>, conn: NetConn) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.hello_sent = true;
        c.opened_at = ctx.now;
        let lane = c.lane;
        let peer_node = c.peer_node;
        // The dialler tells the acceptor which run it expects: the core's expectation of the
        // peer or server it dials (its RID, fenced by its descriptor in automatic mode).
        let expect = self.dial_expectation(peer_node, lane);
        let Ok(hello) = handshake::hello_record(lane, &self.me, &expect, 0) else {
            return;
        };
        self.send(ctx, conn, &Record::Hello(hello));
    }

    pub(super) fn on_unknown_inbound(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: NetConn,
        peer_node: NodeIx,
        lane: Lane,
        rec: Result<Record, wire::WireError>,
    ) {
        let refuse = |node: &mut SimNode, ctx: &mut Ctx<'_>, reason: RejectReason, detail: &str| {
            let rej = Record::Reject(wire::Reject {
                reason,
                detail: wire::Detail::new(detail.chars().take(1000).collect::<String>())
                    .unwrap_or_default(),
            });
            node.send(ctx, conn, &rej);
            ctx.trace(format!("{} {conn} refused: {detail}", node.me.rid));
            node.conns.insert(
                conn,
                Conn {
                    lane,
                    peer_node,
                    dialled: false,
                    id: ConnId(0),
                    opened_at: ctx.now,
                    hello_sent: false,
                    ready: None,
                    refused: true,
                },
            );
        };
        // The first record as the core reads it: a HELLO's identity and expectation, another
        // kind, or a record that does not decode.
        let hello = match rec {
            Ok(Record::Hello(h)) => Ok(handshake::from_hello(h)),
            other => Err(other),
        };
        let first = match &hello {
            Ok((hello_lane, peer, theirs)) => FirstRecord::Hello {
                lane: *hello_lane,
                peer,
                expects: theirs,
            },
            Err(Ok(other)) => FirstRecord::Other(other.kind()),
            Err(Err(e)) => FirstRecord::Malformed(e),
        };
        let admitting = self.phase == Phase::Running;
        // The simulator runs no CURVE: the connection proved no key.
        let verdict = self
            .with_admission(|a| a.judge_first_record(lane, Credentials::Plain, first, admitting));
        match verdict {
            FirstVerdict::Refuse(r) => {
                match r.reason {
                    RejectReason::GenerationMismatch => ctx.truth.stats.fence_refusals += 1,
                    RejectReason::Draining => ctx.truth.stats.draining_refusals += 1,
                    _ => {}
                }
                refuse(self, ctx, r.reason, &r.detail)
            }
            FirstVerdict::Stale(r) => {
                if let Some(r) = r {
                    refuse(self, ctx, r.reason, &r.detail);
                }
            }
            FirstVerdict::Admit { stand_down, .. } => {
                // Admitted on its first record: a HELLO, whose dialler is the peer.
                let Ok((_, peer, _)) = hello else {
                    return;
                };
                if let Some(key) = stand_down {
                    let dial_conn = self.dials.get(&key).and_then(|d| d.conn);
                    if let Some(dc) = dial_conn {
                        ctx.trace(format!(
                            "{} {dc} stands down for the peer's dial",
                            self.me.rid
                        ));
                        self.drop_conn(ctx, dc, Some(CloseReason::Replaced));
                    }
                    if let Some(d) = self.dials.get_mut(&key) {
                        d.yielded = true;
                        d.retry_at = None;
                    }
                }
                // A replacement connection of the same peer and lane: the old one is done.
                let old: Vec<NetConn> = self
                    .conns
                    .iter()
                    .filter(|(_, c)| {
                        !c.dialled && !c.refused && c.peer_node == peer_node && c.lane == lane
                    })
                    .map(|(&k, _)| k)
                    .collect();
                for k in old {
                    ctx.trace(format!("{} {k} replaced by {conn}", self.me.rid));
                    self.drop_conn(ctx, k, Some(CloseReason::Replaced));
                }
                let Ok(welcome) = handshake::welcome_record(lane, &self.me, peer.capabilities)
                else {
                    return;
                };
                if !self.send(ctx, conn, &Record::Welcome(welcome)) {
                    return;
                }
                let id = ConnId(self.next_conn_id);
                self.next_conn_id += 1;
                self.conns.insert(
                    conn,
                    Conn {
                        lane,
                        peer_node,
                        dialled: false,
                        id,
                        opened_at: ctx.now,
                        hello_sent: false,
                        ready: None,
                        refused: false,
                    },
                );
                self.become_ready(ctx, conn, peer);
            }
        }
    }

    pub(super) fn on_welcome(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, w: wire::Welcome) {
        let Some((lane, peer_node)) = self.conns.get(&conn).map(|c| (c.lane, c.peer_node)) else {
            return;
        };
        let (welcome_lane, peer) = handshake::from_welcome(w);
        let expect = self.dial_expectation(peer_node, lane);
        let verdict = admission::judge_welcome(&WelcomeFacts {
            lane,
            welcome_lane,
            peer: &peer,
            verified_key: None,
            local: &self.me,
            expect: &expect,
        });
        match verdict {
            Ok(()) => self.become_ready(ctx, conn, peer),
            Err(refused) => {
                if refused.reject == Some(RejectReason::GenerationMismatch) {
                    ctx.truth.stats.fence_refusals += 1;
                }
                ctx.trace(format!(
                    "{} {conn} welcome refused: {}",
                    self.me.rid, refused.detail
                ));
                self.drop_conn(ctx, conn, None);
            }
        }
    }

    pub(super) fn on_reject(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, reason: RejectReason) {
        ctx.trace(format!("{} {conn} rejected: {reason:?}", self.me.rid));
        let key = self
            .conns
            .get(&conn)
            .map(|c| (c.peer_node, u8::from(c.lane)));
        self.drop_conn(ctx, conn, None);
        if let Some(d) = key.and_then(|k| self.dials.get_mut(&k)) {
            match reason {
                RejectReason::NotRequired => {
                    d.not_required = true;
                    d.retry_at = None;
                }
                RejectReason::Duplicate => {
                    d.yielded = true;
                    d.retry_at = None;
                }
                _ => {}
            }
        }
    }

    /// What this run expects of host `host` it dials on `lane`, as the core decides it: of
    /// a peer on a mesh lane, of a server on a ClientServer lane.
    fn dial_expectation(&self, host: NodeIx, lane: Lane) -> Expectation {
        self.with_admission(|a| match lane {
            Lane::Application | Lane::Completion => a.peer_expectation(host),
            Lane::ClientServer => a.server_expectation(host),
        })
    }

    /// Runs `f` with the node core's admission over this run's dials and descriptor fences.
    fn with_admission<T>(&self, f: impl FnOnce(&Admission<'_, Dials<'_>, Dials<'_>>) -> T) -> T {
        let dials = Dials(&self.dials);
        f(&Admission {
            configured: dials,
            discovered: &self.discovered,
            links: &dials,
            local: &self.me,
        })
    }

    pub(super) fn become_ready(&mut self, ctx: &mut Ctx<'_>, conn: NetConn, peer: Identity) {
        let now = self.at(ctx.now);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let live = self.live.insert_connection(c.id, now);
        self.live_conn.insert(live, conn);
        ctx.trace(format!(
            "{} {conn} ready: {} g{:x} on {:?}",
            self.me.rid, peer.rid, peer.generation, c.lane
        ));
        let me = End {
            node: self.ix,
            run: self.run,
        };
        ctx.truth
            .on_ready(me, &peer.rid, peer.generation, self.disc.is_some());
        ctx.truth.on_conn_ready(me, conn, c.dialled);
        c.ready = Some(Ready { peer, live });
        if c.dialled {
            if let Some(d) = self.dials.get_mut(&(c.peer_node, u8::from(c.lane))) {
                d.failures = 0;
            }
        }
    }
}
