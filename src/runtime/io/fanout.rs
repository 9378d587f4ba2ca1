//! Classic fanout: the publisher's records and beacons (MISSION L4), and one SUB socket per
//! publisher with its own liveness watch (T3, L5): opened, judged, failed and reopened alone.
//!
//! The publisher's socket is an XPUB (PUB on the wire; subscribers see no difference) so
//! that subscriptions reach the node: a subscription that covers the beacon topic is a
//! subscriber joining, and it gets a beacon at once (WIRE.md §7.1), besides the 5 s grid of
//! the beacon schedule, which joins do not move. The I/O thread watches the socket's
//! descriptor and reads the subscriptions apart from the receive loop; they never become
//! records, deliveries or record counts. The application publishes on the same socket from
//! its own threads (under the socket's mutex), and such a send can consume the descriptor's
//! signal of a subscription that arrives meanwhile: the subscriptions are therefore also read
//! at every grid beacon, so such a join gets its beacon at the next tick at the latest (and a
//! publisher that is publishing makes its subscribers ready with its records anyway).
//!
//! What reaches the publisher that no subscriber sends is refused like input on the bound
//! ROUTERs (`io::gate`): a message that is neither a subscription nor its cancel (an XSUB
//! peer may send anything) is dropped as `malformed`, and the socket's monitor reports the
//! connections whose transport handshake failed (bytes that are not ZMTP, another security
//! mechanism, a silent connection at libzmq's handshake deadline).

use std::time::Instant;

use super::parts::ready::Watch;
use super::parts::sockets::{close_stopping_monitor, Slot, SlotRole};
use super::{Host, IoThread, SubKey, BACKOFF_MAX};
use crate::proto::node::link::{backoff, note};
use crate::proto::security::{handshake_refusal, InputRefusal};
use crate::proto::state::{ConnState, FailureReason, Recovery};
use crate::runtime::error::NodeError;
use crate::runtime::link::LinkId;
use crate::runtime::socket::{
    guarded, set_curve_client, set_curve_server, MonitorEvent, MonitorSocket, CLOSE_LINGER_MS,
};

impl IoThread {
    /// Binds the node's publisher socket (an XPUB); returns it and the endpoint it is bound
    /// to (what libzmq bound, for a wildcard). The async side publishes on it without the I/O
    /// thread (see [`PubSocket`](crate::runtime::outbound::PubSocket)); the I/O thread watches its descriptor for subscriptions
    /// (beacon on join) and sends the beacons.
    pub(super) fn bind_publisher(
        &mut self,
        ep: &str,
    ) -> Result<(zmq::Socket, String, MonitorSocket), NodeError> {
        let bind_err = |source| NodeError::bind(ep, source);
        // Under CURVE the publisher is a CURVE server in the ZAP handler's context, with a
        // domain of its own: a subscriber must be on the allow-list (gate).
        let domain = self
            .local
            .curve
            .is_some()
            .then_some(super::PUBLISHER_DOMAIN);
        let m = self.sockets.contexts.publisher(domain).map_err(bind_err)?;
        if let Some(pair) = &self.local.curve {
            set_curve_server(&m.socket, pair).map_err(bind_err)?;
            self.accepting
                .gate
                .add_domain(super::PUBLISHER_DOMAIN, super::Gated::Publisher);
        }
        let socket = m.socket;
        socket.set_linger(CLOSE_LINGER_MS).map_err(bind_err)?;
        // Every subscription reaches the node, also a second one of the same prefix (every
        // zmesh subscriber subscribes to ""): each join gets its beacon.
        socket.set_xpub_verbose(true).map_err(bind_err)?;
        guarded(|| socket.bind(ep)).map_err(bind_err)?;
        self.sockets
            .ready
            .register(&socket, Watch::Publisher)
            .map_err(NodeError::poller)?;
        self.sockets
            .ready
            .register(&m.monitor, Watch::PublisherMonitor)
            .map_err(NodeError::poller)?;
        let endpoint = match socket.get_last_endpoint() {
            Ok(Ok(bound)) if ep.contains('*') => bound,
            _ => ep.to_owned(),
        };
        Ok((socket, endpoint, m.monitor))
    }

    /// Reads what waits on the publisher: its subscriptions (a beacon on join), anything
    /// else refused as malformed, and the monitor's failed handshakes, refused with their
    /// reason.
    pub(super) fn read_publisher(&mut self, now: Instant) {
        let Some(p) = self.fanout.publisher.as_mut() else {
            return;
        };
        let garbage = p.read_subscriptions();
        let events = if p.has_monitor_events() {
            let events = p.take_monitor_events();
            // Read until empty: the descriptor fires again only for events after a check.
            self.sockets.ready.touch(Watch::PublisherMonitor);
            events
        } else {
            Vec::new()
        };
        for _ in 0..garbage {
            self.refuse_publisher_input(
                InputRefusal::Malformed,
                "a message to the publisher that is neither a subscription nor its cancel"
                    .to_owned(),
                now,
            );
        }
        for (event, value) in events {
            if event == MonitorEvent::HandshakeFailed {
                let (reason, detail) = handshake_refusal(self.local.curve.is_some(), value);
                self.refuse_publisher_input(reason, detail, now);
            }
        }
    }

    pub(super) fn open_sub(&mut self, i: SubKey, now: Instant) {
        let endpoint = self.fanout.subs[i].endpoint.clone();
        let key = self.fanout.subs[i]
            .key
            .filter(|k| !self.fanout.subs[i].key_from_descriptor || self.accepting.gate.allows(k));
        let curve = match (&self.local.curve, key) {
            (None, _) => None,
            (Some(pair), Some(key)) => Some((pair.clone(), key)),
            (Some(_), None) => {
                self.refuse_sub(i, &endpoint, now);
                return;
            }
        };
        let opened = self.sockets.contexts.monitored(zmq::SUB).and_then(|m| {
            if let Some((pair, key)) = &curve {
                set_curve_client(&m.socket, pair, key)?;
            }
            m.socket.set_subscribe(b"")?;
            m.socket.set_reconnect_ivl(100)?;
            m.socket.set_reconnect_ivl_max(1000)?;
            m.socket.connect(&endpoint)?;
            Ok(m)
        });
        match opened {
            Ok(m) => {
                self.socket_opened(now);
                let added = self.add_slot(Slot {
                    socket: m.socket,
                    monitor: Some(m.monitor),
                    room: None,
                    role: SlotRole::Sub(i),
                    endpoint: endpoint.clone(),
                    shared: None,
                });
                let slot = match added {
                    Ok(slot) => slot,
                    Err(e) => {
                        self.fanout.subs[i].retry_at = now + BACKOFF_MAX;
                        tracing::warn!(error = %e, endpoint, "cannot watch SUB socket");
                        return;
                    }
                };
                let id = self.local.fresh_conn_id();
                // A new socket starts a new watch: silence is counted from now (L5).
                let _ = self
                    .liveness
                    .table_mut()
                    .reset_publisher(self.fanout.subs[i].live, now);
                let s = &mut self.fanout.subs[i];
                s.slot = Some(slot);
                s.conn_id = Some(id);
                s.connected = false;
                note(s.state.handle_connecting(now));
                self.app.emit_state(
                    LinkId::Subscription { endpoint },
                    ConnState::Connecting,
                    None,
                    &format!("subscribed as {id}"),
                );
            }
            Err(e) => self.sub_open_failed(i, e, now),
        }
    }

    /// Subscription `i` has no CURVE key to expect of its publisher: it is not opened; it
    /// shows `not_connected` with `security_failure` and is looked at again after a while.
    fn refuse_sub(&mut self, i: SubKey, endpoint: &str, now: Instant) {
        let detail = format!(
            "no CURVE key known for publisher {endpoint} (none in [security.endpoint_keys], \
             and no descriptor key on this node's allow-list)"
        );
        let s = &mut self.fanout.subs[i];
        s.retry_at = now + BACKOFF_MAX;
        let already = s.state.state() == ConnState::NotConnected
            && s.state
                .last_failure()
                .is_some_and(|f| f.reason == FailureReason::SecurityFailure);
        if already {
            return;
        }
        note(s.state.handle_failure(
            FailureReason::SecurityFailure,
            detail.as_str(),
            Recovery::Hold,
            now,
        ));
        self.app.emit_state(
            LinkId::Subscription {
                endpoint: endpoint.to_owned(),
            },
            ConnState::NotConnected,
            Some(FailureReason::SecurityFailure),
            &detail,
        );
    }

    /// Takes one publisher out of ready, closes only its socket; a new socket is opened on the
    /// next timer pass (MISSION L5).
    pub(super) fn fail_sub(
        &mut self,
        i: SubKey,
        reason: FailureReason,
        detail: &str,
        now: Instant,
    ) {
        let Some(slot) = self.fanout.subs[i].slot.take() else {
            return;
        };
        if let Some(slot) = self.take_slot(slot) {
            close_stopping_monitor(slot);
        }
        let s = &mut self.fanout.subs[i];
        s.conn_id = None;
        s.failures_in_row = s.failures_in_row.saturating_add(1);
        s.retry_at = now + backoff(s.failures_in_row);
        let recovery = if self.local.host == Host::Running && !s.retired {
            Recovery::Reconnect
        } else {
            Recovery::Hold
        };
        note(s.state.handle_failure(reason, detail, recovery, now));
        let link = LinkId::Subscription {
            endpoint: s.endpoint.clone(),
        };
        let state = s.state.state();
        self.app.emit_state(link, state, Some(reason), detail);
        metrics::counter!("zmesh_link_failures_total", "reason" => reason.as_str()).increment(1);
    }
}
