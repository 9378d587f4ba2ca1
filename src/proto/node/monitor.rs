//! What one monitor event of a dialled or SUB socket asks of the shell ([`monitor_op`], over
//! [`judge_monitor_event`]'s verdict), and when a dialled connection's handshake is done on
//! its socket ([`Link::hello_sent_on`], [`Link::monitor_done_on`]). A bound socket's events
//! are its gate's ([`crate::proto::node::accepting::Accepting::handle_monitor_event`]).
//! Reading the monitors, stopping one, draining a socket and failing a link or a
//! subscription are the shell's (`io/monitor.rs`).

use crate::proto::node::keys::{LinkKey, SlotKey, SubKey};
use crate::proto::node::link::{Link, LinkKind};
use crate::proto::state::FailureReason;
use crate::proto::transport::{judge_monitor_event, MonitorEvent, MonitorVerdict, Watched};

/// A dialled or SUB socket, as what its monitor's events mean depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watching {
    /// The dialled socket of link `k`.
    Dialled(LinkKey),
    /// The SUB socket of a subscription.
    Sub {
        /// The subscription.
        sub: SubKey,
        /// Whether its transport handshake was done (a disconnect since is the publisher
        /// gone, not a failed connect attempt).
        connected: bool,
    },
}

/// What the shell does about one monitor event, from [`monitor_op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MonitorOp {
    /// Nothing.
    Nothing,
    /// The dialled connection's transport handshake is done: send its HELLO.
    SendHello(LinkKey),
    /// The link fails.
    FailLink {
        /// The link.
        link: LinkKey,
        /// Why.
        reason: FailureReason,
        /// For humans.
        detail: String,
    },
    /// The dialled connection is gone: read the records that arrived before the disconnect
    /// (an orderly CLOSE among them explains it better), then, if the connection is still
    /// the link's current one on the socket ([`Link::hello_sent_on`]), fail it with
    /// `transport_error`.
    Disconnected(LinkKey),
    /// The subscription's transport handshake is done.
    SubConnected(SubKey),
    /// The subscription fails.
    FailSub {
        /// The subscription.
        sub: SubKey,
        /// Why.
        reason: FailureReason,
        /// For humans.
        detail: String,
    },
}

/// What `event` (with its `value`) on the socket `watching` asks of the shell, on a node that
/// runs CURVE (`curve`) or not.
pub(crate) fn monitor_op(
    watching: Watching,
    event: MonitorEvent,
    value: u32,
    curve: bool,
) -> MonitorOp {
    let watched = match watching {
        Watching::Dialled(_) => Watched::Dialled,
        Watching::Sub { connected, .. } => Watched::Sub { connected },
    };
    match (watching, judge_monitor_event(watched, event, value, curve)) {
        (_, MonitorVerdict::Nothing) => MonitorOp::Nothing,
        (Watching::Dialled(k), MonitorVerdict::SendHello) => MonitorOp::SendHello(k),
        (Watching::Dialled(link), MonitorVerdict::Fail { reason, detail }) => MonitorOp::FailLink {
            link,
            reason,
            detail,
        },
        (Watching::Dialled(k), MonitorVerdict::Disconnected) => MonitorOp::Disconnected(k),
        (Watching::Sub { sub, .. }, MonitorVerdict::SubConnected) => MonitorOp::SubConnected(sub),
        (Watching::Sub { sub, .. }, MonitorVerdict::Fail { reason, detail }) => {
            MonitorOp::FailSub {
                sub,
                reason,
                detail,
            }
        }
        // Verdicts for the other kind of socket: `judge_monitor_event` gives none.
        (Watching::Dialled(_), MonitorVerdict::SubConnected)
        | (Watching::Sub { .. }, MonitorVerdict::SendHello | MonitorVerdict::Disconnected) => {
            MonitorOp::Nothing
        }
    }
}

impl Link {
    /// Whether this link's current connection is on socket `slot` and has sent its HELLO
    /// (its transport handshake is done).
    pub(crate) fn hello_sent_on(&self, slot: SlotKey) -> bool {
        self.conn
            .as_ref()
            .is_some_and(|c| c.slot == slot && c.hello_sent)
    }

    /// Whether socket `slot`'s monitor is needed no longer: a RouteMesh lane's dialled ROUTER
    /// whose handshake is done learns of its connection's loss in band (`ROUTER_NOTIFY`); a
    /// ClientServer DEALER keeps its monitor.
    pub(crate) fn monitor_done_on(&self, slot: SlotKey) -> bool {
        matches!(self.kind, LinkKind::MeshDial { .. }) && self.hello_sent_on(slot)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::proto::node::keys::Key;
    use crate::proto::node::link::Conn;
    use crate::proto::security::ZMTP_CRYPTOGRAPHIC;
    use crate::proto::wire::Lane;

    /// MISSION L6, F3: a dialled socket's handshake sends HELLO, its disconnect is read out
    /// then failed, a refusal by the peer's ZAP handler fails the link; a SUB socket's
    /// handshake marks it connected and a disconnect after it fails the subscription (before
    /// it, libzmq retries); events meant for the other kind of socket change nothing.
    #[test]
    fn l6_f3_each_monitor_event_asks_for_its_operation_by_socket() {
        let k = LinkKey::from_index(3);
        let sub = SubKey::from_index(1);
        let dialled = Watching::Dialled(k);
        let op = |w, ev, value| monitor_op(w, ev, value, true);
        assert_eq!(
            op(dialled, MonitorEvent::HandshakeSucceeded, 0),
            MonitorOp::SendHello(k)
        );
        assert_eq!(
            op(dialled, MonitorEvent::Disconnected, 0),
            MonitorOp::Disconnected(k)
        );
        let MonitorOp::FailLink { link, reason, .. } = op(dialled, MonitorEvent::AuthFailed, 400)
        else {
            panic!("a refusal by the peer's ZAP handler did not fail the link");
        };
        assert_eq!((link, reason), (k, FailureReason::SecurityFailure));
        let MonitorOp::FailLink { reason, .. } =
            op(dialled, MonitorEvent::HandshakeFailed, ZMTP_CRYPTOGRAPHIC)
        else {
            panic!("a failed CURVE handshake did not fail the link");
        };
        assert_eq!(reason, FailureReason::SecurityFailure);
        assert_eq!(op(dialled, MonitorEvent::Accepted, 9), MonitorOp::Nothing);
        let waiting = Watching::Sub {
            sub,
            connected: false,
        };
        let connected = Watching::Sub {
            sub,
            connected: true,
        };
        assert_eq!(
            op(waiting, MonitorEvent::HandshakeSucceeded, 0),
            MonitorOp::SubConnected(sub)
        );
        assert_eq!(
            op(waiting, MonitorEvent::Disconnected, 0),
            MonitorOp::Nothing
        );
        let MonitorOp::FailSub { sub: s, reason, .. } =
            op(connected, MonitorEvent::Disconnected, 0)
        else {
            panic!("a publisher gone did not fail the subscription");
        };
        assert_eq!((s, reason), (sub, FailureReason::TransportError));
    }

    /// A dialled connection's handshake is done on its own socket once its HELLO went; only
    /// a RouteMesh lane's ROUTER gives its monitor up then.
    #[test]
    fn a_mesh_dials_monitor_is_done_once_its_hello_went_on_that_socket() {
        let now = Instant::now();
        let slot = SlotKey::from_index(0);
        let other = SlotKey::from_index(1);
        let mesh = LinkKind::MeshDial {
            peer: 0,
            lane: Lane::Application,
        };
        for (kind, stops) in [(mesh, true), (LinkKind::ClientDial { server: 0 }, false)] {
            let mut l = Link::new(kind, now);
            assert!(!l.hello_sent_on(slot) && !l.monitor_done_on(slot));
            let mut c = Conn::for_test(1, false, None);
            c.hello_sent = false;
            l.conn = Some(c);
            assert!(!l.hello_sent_on(slot));
            if let Some(c) = l.conn.as_mut() {
                c.hello_sent = true;
            }
            assert!(l.hello_sent_on(slot) && !l.hello_sent_on(other));
            assert_eq!(l.monitor_done_on(slot), stops);
            assert!(!l.monitor_done_on(other));
        }
    }
}
