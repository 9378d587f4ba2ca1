//! A link's step to ready, beside the link itself ([`crate::proto::node::link`]): an
//! admitted inbound connection becomes its link's current one ([`Link::handle_admitted_inbound`]),
//! and a connection whose handshake is done becomes ready ([`Link::handle_ready`]: who its
//! records come from, its liveness entry, the peer's identity, the failure count, the state),
//! telling the shell what the other parts learn of it ([`Ready`]). The liveness entry and
//! the order of the rest (the WELCOME, the scheduler unit, the send queue, telling the
//! application) are the node core's handshake ([`crate::proto::node::core`]); doing them
//! is its shell's (`io/admission.rs`).

use std::sync::Arc;
use std::time::Instant;

use crate::proto::handshake::{Identity, Role};
use crate::proto::liveness;
use crate::proto::node::keys::SlotKey;
use crate::proto::node::link::{note, Conn, Link, LinkKind};
use crate::proto::node::source::Source;
use crate::proto::security::PublicKey;
use crate::proto::state::ConnState;
use crate::proto::wire::Lane;
use crate::proto::ConnId;

/// What a connection's becoming ready tells the other parts, from [`Link::handle_ready`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ready {
    /// The connection that is ready.
    pub(crate) conn: ConnId,
    /// The channels the peer serves (its Server memberships): a call to one that finds no
    /// ready server has no ready peer, not no registration.
    pub(crate) servers: Vec<String>,
    /// The state change's detail, for the application.
    pub(crate) detail: String,
}

impl Conn {
    /// Connection `id` of a peer, admitted on bound socket `slot` from routing id `route`
    /// at `now`: its HELLO came (so nothing more is sent to open it) and it is not ready yet;
    /// with CURVE, `verified_key` is the key it proved.
    pub(crate) fn admitted(
        id: ConnId,
        slot: SlotKey,
        route: Vec<u8>,
        verified_key: Option<PublicKey>,
        now: Instant,
    ) -> Conn {
        let mut conn = Conn::new(id, slot, Some(route), verified_key, now);
        conn.hello_sent = true;
        conn
    }
}

impl Link {
    /// An admitted inbound connection becomes this link's current one (any connection it had
    /// was failed first, as replaced): the link goes through connecting (unless it is there)
    /// to admitted.
    pub(crate) fn handle_admitted_inbound(&mut self, conn: Conn, now: Instant) {
        self.conn = Some(conn);
        if self.state.state() != ConnState::Connecting {
            note(self.state.handle_connecting(now));
        }
        note(self.state.handle_admitted(now));
    }

    /// The handshake of this link's current connection is done with `peer`: the connection
    /// is ready (a ready connection has no handshake timeout any more), its records come from
    /// `peer` as a peer, a client or a server by the link's kind, `live` is its liveness
    /// entry (the 15 s deadline runs from ready, WIRE.md §5.2), and the link's failures in a
    /// row are over. `None` if the link has no connection.
    pub(crate) fn handle_ready(
        &mut self,
        peer: Identity,
        live: liveness::LinkKey,
        now: Instant,
    ) -> Option<Ready> {
        let c = self.conn.as_mut()?;
        c.ready = true;
        let rid: Arc<str> = Arc::from(peer.rid.as_str());
        c.source = Some(match &self.kind {
            LinkKind::MeshDial { .. } => Source::Peer { rid },
            LinkKind::Inbound {
                lane: Lane::ClientServer,
                ..
            } => Source::Client { rid },
            LinkKind::Inbound { .. } => Source::Peer { rid },
            LinkKind::ClientDial { .. } => Source::Server { rid },
        });
        c.live = Some(live);
        let ready = Ready {
            conn: c.id,
            servers: (peer.memberships.iter())
                .filter(|m| m.role == Role::Server)
                .map(|m| m.channel.clone())
                .collect(),
            detail: format!("{} ready on {}", peer.rid, c.id),
        };
        c.peer = Some(peer);
        self.failures_in_row = 0;
        note(self.state.handle_ready(now));
        Some(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::handshake::{Capabilities, Membership};
    use crate::proto::liveness::Liveness;
    use crate::proto::node::keys::Key;
    use crate::proto::state::FailureReason;

    fn peer(rid: &str) -> Identity {
        Identity {
            rid: rid.into(),
            generation: 1,
            security_identity: String::new(),
            memberships: vec![
                Membership::server("pump"),
                Membership::object_client("logs"),
            ],
            capabilities: Capabilities::NONE,
        }
    }

    /// An admitted inbound connection is its link's current one, admitted and not ready, on
    /// a fresh link as on one whose old connection failed (through connecting both times);
    /// ready, its records come from a client on the ClientServer lane and from a peer on a
    /// mesh lane, the peer's served channels are learnt and its failures in a row are over.
    #[test]
    fn t1_an_admitted_inbound_connection_becomes_ready_with_its_source() {
        let now = Instant::now();
        let mut live = Liveness::new(1);
        for (lane, client) in [(Lane::ClientServer, true), (Lane::Completion, false)] {
            let mut l = Link::new(
                LinkKind::Inbound {
                    rid: "a".into(),
                    lane,
                },
                now,
            );
            l.failures_in_row = 3;
            let route = b"r".to_vec();
            let conn = Conn::admitted(ConnId(7), SlotKey::from_index(2), route, None, now);
            l.handle_admitted_inbound(conn, now);
            assert_eq!(l.state.state(), ConnState::Admitted);
            let c = l.conn.as_ref().unwrap();
            assert!(c.hello_sent && !c.ready && c.route.as_deref() == Some(&b"r"[..]));
            let key = live.insert_connection(ConnId(7), now);
            let ready = l.handle_ready(peer("a"), key, now).unwrap();
            assert_eq!(ready.conn, ConnId(7));
            assert_eq!(ready.servers, ["pump"]);
            assert_eq!(ready.detail, format!("a ready on {}", ConnId(7)));
            assert_eq!((l.state.state(), l.failures_in_row), (ConnState::Ready, 0));
            let c = l.conn.as_ref().unwrap();
            assert!(c.ready && c.live == Some(key));
            assert_eq!(c.peer.as_ref().map(|p| p.rid.as_str()), Some("a"));
            let is_client = matches!(c.source, Some(Source::Client { .. }));
            assert_eq!(is_client, client);
            // Failed and admitted again: connecting, admitted, ready once more.
            l.conn = None;
            l.record_failure(FailureReason::TransportError, "gone", true, now);
            let conn = Conn::admitted(ConnId(8), SlotKey::from_index(2), vec![], None, now);
            l.handle_admitted_inbound(conn, now);
            assert_eq!(l.state.state(), ConnState::Admitted);
            let key = live.insert_connection(ConnId(7), now);
            assert!(l.handle_ready(peer("a"), key, now).is_some());
            assert_eq!(l.state.state(), ConnState::Ready);
        }
    }

    /// A dialled link's ready connection delivers from a server (ClientServer) or a peer
    /// (RouteMesh); a link without a connection does not become ready.
    #[test]
    fn a_dialled_connection_is_ready_from_a_server_or_a_peer() {
        let now = Instant::now();
        let mut live = Liveness::new(1);
        for (kind, server) in [
            (LinkKind::ClientDial { server: 0 }, true),
            (
                LinkKind::MeshDial {
                    peer: 0,
                    lane: Lane::Application,
                },
                false,
            ),
        ] {
            let mut l = Link::new(kind, now);
            let key = live.insert_connection(ConnId(7), now);
            assert_eq!(l.handle_ready(peer("s"), key, now), None);
            note(l.state.handle_connecting(now));
            note(l.state.handle_admitted(now));
            l.conn = Some(Conn::for_test(1, false, None));
            assert!(l.handle_ready(peer("s"), key, now).is_some());
            let c = l.conn.as_ref().unwrap();
            let is_server = matches!(c.source, Some(Source::Server { .. }));
            assert_eq!(is_server, server);
            assert_eq!(l.state.state(), ConnState::Ready);
        }
    }
}
