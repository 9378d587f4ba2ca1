//! What a snapshot lists of the node core (MISSION O1): every link and subscription with its
//! state, last failure and counters, in the link table's order then the subscriptions',
//! count-limited ([`listing`]). The shell maps each [`Row`] into its own snapshot values,
//! adding what only it knows (where a link sits in the configuration, the calls pending
//! on it).
//!
//! A RouteMesh lane is listed by the links that serve it or try to. Not listed, because they
//! are history and not a failure:
//! - a dial that stood down for the peer's own connection (duplicate resolution, MISSION T1;
//!   it dials again only if that connection fails, and is listed again from then on);
//! - any link without a connection whose peer and lane are ready on another link (the
//!   inbound link of a dial the peer stood down);
//! - a discovered intent whose descriptor is gone, once its last connection ended, and a
//!   discovered publisher whose descriptor is gone, once its socket is closed.
//!
//! The ready count is taken over every row listed before the count limit cuts the list.

use std::collections::HashSet;
use std::time::Instant;

use super::NodeCore;
use crate::proto::handshake::Identity;
use crate::proto::node::admit::Configured;
use crate::proto::node::keys::{LinkKey, SubKey};
use crate::proto::node::link::Link;
use crate::proto::node::links::mesh_lane;
use crate::proto::node::sub::Sub;
use crate::proto::state::{ConnState, Failure};
use crate::proto::wire::Lane;
use crate::proto::ConnId;

/// What a snapshot row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listed {
    /// A link (a configured peer lane or server, or an inbound connection).
    Link(LinkKey),
    /// A fanout subscription.
    Sub(SubKey),
}

/// What a snapshot shows of one link or subscription, as the core knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row<'a> {
    /// The link or subscription.
    pub(crate) listed: Listed,
    /// Its state.
    pub(crate) state: ConnState,
    /// Its current connection's id, if it has one.
    pub(crate) connection: Option<ConnId>,
    /// Its last failure.
    pub(crate) last_failure: Option<&'a Failure>,
    /// When it last received a record (a subscription: its publisher's watch's evidence).
    pub(crate) last_receive: Option<Instant>,
    /// Records it received.
    pub(crate) records: u64,
    /// Times it became ready.
    pub(crate) readies: u64,
    /// Times it failed.
    pub(crate) failures: u64,
    /// A link's peer, as its current connection's handshake named it.
    pub(crate) peer: Option<&'a Identity>,
    /// The peer's security identity, once known: a link's once its handshake named the peer
    /// (the verified key in Z85, else what the peer said), a subscription's publisher key
    /// while it is ready.
    pub(crate) security_identity: Option<String>,
    /// Whether the peer's key was verified (a link's by its CURVE handshake; a subscription
    /// is, under CURVE, once ready).
    pub(crate) verified: bool,
}

/// The rows of a snapshot, from [`listing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listing<'a> {
    /// The rows listed, links first, at most the limit.
    pub(crate) rows: Vec<Row<'a>>,
    /// Rows left out by the limit.
    pub(crate) omitted: usize,
    /// Rows ready, among all those listed before the limit.
    pub(crate) ready: usize,
}

/// What a snapshot lists of `core` (see the module docs), reading the configured peers'
/// RIDs in `configured`, on a node that runs CURVE (`curve`) or not, at most `limit` rows.
pub(crate) fn listing<'a, C: Configured>(
    core: &'a NodeCore,
    configured: &C,
    curve: bool,
    limit: usize,
) -> Listing<'a> {
    let ready_lanes: HashSet<(&str, Lane)> = core
        .links
        .iter()
        .filter(|(_, l)| l.state.is_ready())
        .filter_map(|(_, l)| mesh_lane(configured, &l.kind))
        .collect();
    let mut rows = Vec::new();
    for (k, l) in core.links.iter() {
        if l.is_removed() {
            continue;
        }
        let served_elsewhere = l.conn.is_none()
            && !l.state.is_ready()
            && mesh_lane(configured, &l.kind).is_some_and(|lane| ready_lanes.contains(&lane));
        if served_elsewhere || (l.yielded && l.conn.is_none()) {
            continue;
        }
        rows.push(link_row(k, l));
    }
    for (i, s) in core.subs.iter() {
        if s.retired && s.slot.is_none() {
            continue;
        }
        let last = core
            .liveness
            .table()
            .publisher(s.live)
            .and_then(|w| w.last_receive_at());
        rows.push(sub_row(i, s, last, curve));
    }
    let ready = rows.iter().filter(|r| r.state == ConnState::Ready).count();
    let omitted = rows.len().saturating_sub(limit);
    rows.truncate(limit);
    Listing {
        rows,
        omitted,
        ready,
    }
}

/// The row of link `k`.
fn link_row(k: LinkKey, l: &Link) -> Row<'_> {
    let peer = l.conn.as_ref().and_then(|c| c.peer.as_ref());
    let verified_key = l.conn.as_ref().and_then(|c| c.verified_key);
    Row {
        listed: Listed::Link(k),
        state: l.state.state(),
        connection: l.conn.as_ref().map(|c| c.id),
        last_failure: l.state.last_failure(),
        last_receive: l.last_receive,
        records: l.records,
        readies: l.state.readies(),
        failures: l.state.failures(),
        peer,
        security_identity: peer
            .map(|p| verified_key.map_or_else(|| p.security_identity.clone(), |key| key.to_z85())),
        verified: peer.is_some() && verified_key.is_some(),
    }
}

/// The row of subscription `i`, whose publisher last sent evidence at `last`.
fn sub_row(i: SubKey, s: &Sub, last: Option<Instant>, curve: bool) -> Row<'_> {
    Row {
        listed: Listed::Sub(i),
        state: s.state.state(),
        connection: s.conn_id,
        last_failure: s.state.last_failure(),
        last_receive: last,
        records: s.records,
        readies: s.state.readies(),
        failures: s.state.failures(),
        peer: None,
        security_identity: s.key.filter(|_| s.state.is_ready()).map(|k| k.to_z85()),
        verified: curve && s.state.is_ready(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::handshake::{Capabilities, Membership};
    use crate::proto::node::core::fanout::add_sub;
    use crate::proto::node::core::tests::{shell, Recording};
    use crate::proto::node::core::Shell;
    use crate::proto::node::keys::{Key, SlotKey};
    use crate::proto::node::link::{Conn, LinkKind};
    use crate::proto::security::{PublicKey, KEY_LEN};

    fn list(n: &Recording, curve: bool, limit: usize) -> Listing<'_> {
        listing(&n.core, &n.configured(), curve, limit)
    }

    fn listed(l: &Listing<'_>) -> Vec<Listed> {
        l.rows.iter().map(|r| r.listed).collect()
    }

    fn dial(lane: Lane) -> LinkKind {
        LinkKind::MeshDial { peer: 0, lane }
    }

    fn identity(rid: &str) -> Identity {
        Identity {
            rid: rid.into(),
            generation: 3,
            security_identity: "b@example".into(),
            memberships: vec![Membership::server("pump")],
            capabilities: Capabilities::NONE,
        }
    }

    /// Link `k` becomes ready on connection `id` to `rid`.
    fn ready(n: &mut Recording, k: LinkKey, id: u64, rid: &str, now: Instant) {
        let l = &mut n.core.links[k];
        l.conn = Some(Conn::for_test(id, true, Some(identity(rid))));
        l.state.handle_connecting(now).expect("connecting");
        l.state.handle_admitted(now).expect("admitted");
        l.state.handle_ready(now).expect("ready");
    }

    /// MISSION O1, T1: a dial that stood down for the peer's own connection is history, not
    /// a failure: it is not listed while it has no connection, and listed again once it
    /// dials again.
    #[test]
    fn o1_t1_a_stood_down_dial_is_not_listed() {
        let now = Instant::now();
        let mut n = shell("a", vec!["b"]);
        let k = n.core.add_link(dial(Lane::Application), now);
        assert_eq!(listed(&list(&n, false, 10)), [Listed::Link(k)]);
        n.core.links[k].yielded = true;
        let l = list(&n, false, 10);
        assert_eq!((l.rows.len(), l.omitted, l.ready), (0, 0, 0));
        n.core.links[k].conn = Some(Conn::for_test(5, false, None));
        let l = list(&n, false, 10);
        assert_eq!(listed(&l), [Listed::Link(k)]);
        assert_eq!(l.rows[0].connection, Some(ConnId(5)));
    }

    /// MISSION O1, T1: a link without a connection whose peer and lane are ready on another
    /// link is not listed (the dial of a lane the peer's inbound connection serves); the
    /// ready link shows its peer and the security identity it named, unverified; the other
    /// lane, ready nowhere, is listed.
    #[test]
    fn o1_t1_a_lane_ready_on_another_link_is_listed_once() {
        let now = Instant::now();
        let mut n = shell("a", vec!["b"]);
        let app = n.core.add_link(dial(Lane::Application), now);
        let completion = n.core.add_link(dial(Lane::Completion), now);
        let inbound = n.core.inbound_link("b", Lane::Application, now);
        ready(&mut n, inbound, 7, "b", now);
        let l = list(&n, false, 10);
        assert_eq!(
            listed(&l),
            [Listed::Link(completion), Listed::Link(inbound)],
            "{app:?} is served by {inbound:?}"
        );
        let row = &l.rows[1];
        assert_eq!(row.state, ConnState::Ready);
        assert_eq!(row.peer.map(|p| p.rid.as_str()), Some("b"));
        assert_eq!(row.security_identity.as_deref(), Some("b@example"));
        assert!(!row.verified);
        assert_eq!(
            (l.ready, l.rows[0].peer, &l.rows[0].security_identity),
            (1, None, &None)
        );
    }

    /// MISSION O1: a discovered intent whose descriptor is gone leaves the snapshot once
    /// its last connection ended, a withdrawn publisher once its socket closed; a
    /// subscription shows its publisher's key while ready, verified under CURVE only.
    #[test]
    fn o1_removed_intents_and_retired_publishers_are_not_listed() {
        let now = Instant::now();
        let mut n = shell("a", vec!["b"]);
        let k = n.core.add_link(dial(Lane::Application), now);
        n.core.links[k].withdrawn = true;
        let key = PublicKey::from_bytes([9; KEY_LEN]);
        let gone = add_sub(&mut n.core, "tcp://p:1", None, now);
        n.core.subs[gone].retired = true;
        let sub = add_sub(&mut n.core, "tcp://q:1", Some(key), now);
        n.core.subs[sub].handle_opened(SlotKey::from_index(4), ConnId(8), now);
        let l = list(&n, false, 10);
        assert_eq!(listed(&l), [Listed::Sub(sub)]);
        assert_eq!(l.rows[0].connection, Some(ConnId(8)));
        assert_eq!(
            (&l.rows[0].security_identity, l.rows[0].verified),
            (&None, false)
        );
        n.core.subs[sub].handle_ready(now);
        let l = list(&n, true, 10);
        assert_eq!(l.rows[0].security_identity, Some(key.to_z85()));
        assert!(l.rows[0].verified);
        assert!(!list(&n, false, 10).rows[0].verified);
        n.core.links[k].conn = Some(Conn::for_test(6, false, None));
        assert_eq!(
            listed(&list(&n, false, 10)),
            [Listed::Link(k), Listed::Sub(sub)],
            "a withdrawn link's connection is still listed until it ends"
        );
    }

    /// MISSION O1: the listing keeps the link table's order, then the subscriptions', cut
    /// at the limit with the rows left out counted; the ready count is over every row
    /// listed, the cut ones included.
    #[test]
    fn o1_the_count_limit_keeps_the_first_rows_and_counts_ready_over_all() {
        let now = Instant::now();
        let mut n = shell("a", vec!["b"]);
        let app = n.core.add_link(dial(Lane::Application), now);
        let completion = n.core.add_link(dial(Lane::Completion), now);
        let inbound = n.core.inbound_link("c", Lane::Application, now);
        ready(&mut n, inbound, 7, "c", now);
        let sub = add_sub(&mut n.core, "tcp://q:1", None, now);
        let all = list(&n, false, 10);
        assert_eq!(
            listed(&all),
            [
                Listed::Link(app),
                Listed::Link(completion),
                Listed::Link(inbound),
                Listed::Sub(sub),
            ]
        );
        let cut = list(&n, false, 2);
        assert_eq!(listed(&cut), [Listed::Link(app), Listed::Link(completion)]);
        assert_eq!((cut.omitted, cut.ready), (2, 1));
        assert_eq!(all.rows[..2], cut.rows[..]);
    }
}
