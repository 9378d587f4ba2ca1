//! Classic fanout: the publisher's records and beacons (MISSION L4), and one SUB socket per
//! publisher with its own liveness watch (T3, L5): opened, judged, failed and reopened alone.
//! What opening, refusing, failing or readying a subscription does to it, and the verdict of
//! its watch's events, are the node core's ([`crate::proto::node::sub`]); this file opens and
//! closes the sockets, reads and delivers, and tells the application.
//!
//! The publisher's socket is an XPUB (PUB on the wire; subscribers see no difference) in
//! manual mode, so that subscriptions reach the node and take effect only when the node
//! applied them: the I/O thread reads each one, applies it to the connection that sent it
//! and counts it ([`PubSocket`](crate::runtime::outbound::PubSocket)), which tells whether
//! every subscriber speaks PUBPACK (WIRE.md §7.5). A subscription that covers the beacon
//! topic is a subscriber joining, and it gets a beacon at once (WIRE.md §7.1), besides the 5 s
//! grid of the beacon schedule, which joins do not move. The I/O thread watches the socket's
//! descriptor and reads the subscriptions apart from the receive loop; they never become
//! records, deliveries or record counts. The application publishes on the same socket from
//! its own threads (under the socket's mutex), and such a send can consume the descriptor's
//! signal of a subscription that arrives meanwhile: publishing therefore asks the I/O thread
//! for a look at the publisher in its next loop turn (at most once a millisecond, or, while
//! packing, once per burst: the look also sends the records held for a PUBPACK), and the
//! subscriptions are read at every grid beacon too.
//!
//! A subscription announces PUBPACK with a marker besides the empty prefix (WIRE.md §7.3,
//! §7.5); a PUBPACK read from it is staged as its records, so the receive loop's caps count
//! each, and is one receipt for the publisher's watch.
//!
//! What reaches the publisher that no subscriber sends is refused like input on the bound
//! ROUTERs (`io::gate`): a message that is neither a subscription nor its cancel (an XSUB
//! peer may send anything) is dropped as `malformed`, and the socket's monitor reports the
//! connections whose transport handshake failed (bytes that are not ZMTP, another security
//! mechanism, a silent connection at libzmq's handshake deadline).

use std::time::Instant;

use bytes::Bytes;

use super::parts::ready::Watch;
use super::parts::sockets::{close_stopping_monitor, Published, Slot, SlotRole, Staged, Unit};
use super::{Host, IoThread, SubKey};
use crate::proto::liveness::{
    self, Delivery as FanoutDelivery, FanoutInput, LivenessEvent, PublisherEvent,
};
use crate::proto::node::received::{self, Charges};
use crate::proto::node::sub::{judge_publisher_event, PublisherVerdict, SubSecurity};
use crate::proto::security::{handshake_refusal, InputRefusal};
use crate::proto::state::{ConnState, FailureReason};
use crate::proto::wire::{self, PUBPACK_MARKER};
use crate::runtime::error::NodeError;
use crate::runtime::event::{Delivery, NodeEvent};
use crate::runtime::link::LinkId;
use crate::runtime::records::{self, Fanout};
use crate::runtime::socket::{Frame, MonitorEvent, MonitorSocket, ZmqSocket};
use crate::runtime::transport::{SocketKind, SocketRole, Transport, TransportSocket};

/// The fanout capabilities every SUB socket of this node announces to its publisher, by
/// subscribing to their markers besides the empty prefix (WIRE.md §7.3, §7.5), and so the
/// capabilities its messages are decoded with.
pub(super) const SUB_CAPABILITIES: wire::Capabilities = wire::Capabilities::PUBPACK;

impl IoThread {
    /// Binds the node's publisher socket (a [`SocketKind::Publisher`]); returns it and the
    /// endpoint it is bound to (what the transport bound, for a wildcard). The async side publishes on it without the I/O
    /// thread (see [`PubSocket`](crate::runtime::outbound::PubSocket)); the I/O thread watches its descriptor for subscriptions
    /// (beacon on join) and sends the beacons.
    pub(super) fn bind_publisher(
        &mut self,
        ep: &str,
    ) -> Result<(ZmqSocket, String, MonitorSocket), NodeError> {
        let bind_err = |source| NodeError::bind(ep, source);
        // Under CURVE the publisher is a CURVE server that the transport's admission sees,
        // with a domain of its own: a subscriber must be on the allow-list (gate).
        let domain = self
            .local
            .curve
            .is_some()
            .then_some(super::PUBLISHER_DOMAIN);
        // The transport applies no subscription by itself: the node reads each one (also a
        // second one of the same prefix, so each join gets its beacon) and applies it to the
        // connection that sent it, counting it first (WIRE.md §7.5, `PubSocket`).
        let m = self
            .sockets
            .contexts
            .socket(SocketKind::Publisher, SocketRole::Bound { domain })
            .map_err(bind_err)?;
        if let Some(pair) = &self.local.curve {
            m.socket.secure_server(pair).map_err(bind_err)?;
            self.core
                .accepting
                .gate
                .add_domain(super::PUBLISHER_DOMAIN, super::Gated::Publisher);
        }
        let socket = m.socket;
        let endpoint = socket.bind(ep).map_err(bind_err)?;
        self.sockets
            .ready
            .register(&socket, Watch::Publisher)
            .map_err(NodeError::poller)?;
        self.sockets
            .ready
            .register(&m.monitor, Watch::PublisherMonitor)
            .map_err(NodeError::poller)?;
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
        let endpoint = self.core.subs[i].endpoint.clone();
        let gate = &self.core.accepting.gate;
        let security = self.core.subs[i].security(self.local.curve.is_some(), |k| gate.allows(k));
        let curve = match (&self.local.curve, security) {
            (Some(pair), SubSecurity::Curve(key)) => Some((pair.clone(), key)),
            (_, SubSecurity::Refused) => {
                self.refuse_sub(i, &endpoint, now);
                return;
            }
            _ => None,
        };
        let opened = self
            .sockets
            .contexts
            .socket(SocketKind::Sub, SocketRole::Dialled)
            .and_then(|m| {
                if let Some((pair, key)) = &curve {
                    m.socket.secure_client(pair, key)?;
                }
                // Everything, beacons included (WIRE.md §7.3), and the marker that announces
                // PUBPACK (§7.5).
                m.socket.subscribe(b"")?;
                if SUB_CAPABILITIES.contains(wire::Capabilities::PUBPACK) {
                    m.socket.subscribe(&PUBPACK_MARKER)?;
                }
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
                        self.core.subs[i].handle_unwatched(now);
                        tracing::warn!(error = %e, endpoint, "cannot watch SUB socket");
                        return;
                    }
                };
                let id = self.local.fresh_conn_id();
                // A new socket starts a new watch: silence is counted from now (L5).
                let _ = self
                    .core
                    .liveness
                    .table_mut()
                    .reset_publisher(self.core.subs[i].live, now);
                self.core.subs[i].handle_opened(slot, id, now);
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
        let Some(detail) = self.core.subs[i].handle_refused(now) else {
            return;
        };
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
        let running = self.local.host == Host::Running;
        let s = &mut self.core.subs[i];
        let Some((slot, state)) = s.handle_failure(reason, detail, running, now) else {
            return;
        };
        let link = LinkId::Subscription {
            endpoint: s.endpoint.clone(),
        };
        if let Some(slot) = self.take_slot(slot) {
            close_stopping_monitor(slot);
        }
        self.app.emit_state(link, state, Some(reason), detail);
        metrics::counter!("zmesh_link_failures_total", "reason" => reason.as_str()).increment(1);
    }

    /// The records of a PUBPACK just read on subscription socket `owner`, each with its share
    /// of the read's `len` bytes, if the message is a valid PUBPACK. Anything else (a
    /// malformed PUBPACK included) is staged whole and judged in its turn as any message
    /// (WIRE.md §7.3: a malformed one fails that publisher).
    pub(super) fn unpack_published(
        &self,
        owner: Unit,
        staged: &Staged,
        len: usize,
    ) -> Option<impl Iterator<Item = (Staged, usize)>> {
        let (
            Unit::Socket(slot),
            Staged::Frames {
                route: None,
                frames,
            },
        ) = (owner, staged)
        else {
            return None;
        };
        if !received::is_kind(frames.get(1)?.as_ref(), wire::Kind::PubPack) {
            return None;
        }
        let Some(Slot {
            role: SlotRole::Sub(sub),
            ..
        }) = self.sockets.get(slot)
        else {
            return None;
        };
        let s = self.core.subs.get(*sub)?;
        let conn = s.conn_id?;
        let Ok(Fanout::Pack { topic, payloads }) =
            records::decode_fanout(frames, &s.last_topic, SUB_CAPABILITIES)
        else {
            return None;
        };
        let mut charges = Charges::new(len, payloads.iter().map(Bytes::len));
        let mut receipt = u16::try_from(payloads.len()).unwrap_or(u16::MAX);
        let sub = *sub;
        let parts = payloads.into_iter().map(move |payload| {
            let bytes = charges.next(payload.len());
            let published = Published {
                sub,
                conn,
                topic: topic.clone(),
                payload,
                receipt: std::mem::take(&mut receipt),
            };
            (Staged::Published(published), bytes)
        });
        Some(parts)
    }

    /// A record of a PUBPACK in its turn: the first is the PUBPACK's receipt for the
    /// publisher's watch (WIRE.md §7.5: one valid receipt), and each is delivered while the
    /// socket it came on is still the subscription's and the watch took the PUBPACK.
    pub(super) fn on_published(&mut self, p: Published, now: Instant) {
        let Some(s) = self.core.subs.get(p.sub) else {
            return;
        };
        if !s.is_current(p.conn) {
            return;
        }
        if p.receipt > 0 {
            let input = FanoutInput::Pack { records: p.receipt };
            let live = s.live;
            let verdict = self
                .core
                .liveness
                .table_mut()
                .handle_fanout(live, input, now);
            // A state change (ready) comes before the records that caused it.
            self.take_publisher_events(p.sub, live, now);
            if !matches!(verdict, Ok(FanoutDelivery::Deliver)) {
                return;
            }
            // A verdict that failed the watch closed the socket: the rest finds no socket.
        }
        self.deliver_published(p.sub, p.topic, p.payload);
    }

    /// Hands one fanout record of subscription `i` to the application.
    pub(super) fn deliver_published(&mut self, i: SubKey, topic: Bytes, payload: Bytes) {
        self.core.subs[i].handle_delivered(&topic);
        metrics::counter!("zmesh_fanout_records_received_total").increment(1);
        self.app.push(NodeEvent::Delivery(Delivery {
            source: self.core.subs[i].source.clone(),
            channel: topic,
            payload,
        }));
    }

    /// A message read from subscription `i`'s socket, in its turn (a PUBPACK's records come
    /// as [`Staged::Published`] instead, [`Self::on_published`]): a beacon, a PUBLISH or a
    /// PUBPACK judged by the publisher's watch and delivered, or a malformed message that
    /// fails the publisher (WIRE.md §7.3).
    pub(super) fn on_fanout(&mut self, i: SubKey, frames: Vec<Frame>, now: Instant) {
        let decoded =
            records::decode_fanout(&frames, &self.core.subs[i].last_topic, SUB_CAPABILITIES);
        let input = match &decoded {
            Ok(Fanout::Beacon) => FanoutInput::Beacon,
            Ok(Fanout::Publish { .. }) => FanoutInput::Record,
            Ok(Fanout::Pack { payloads, .. }) => FanoutInput::Pack {
                records: u16::try_from(payloads.len()).unwrap_or(u16::MAX),
            },
            Err(e) => FanoutInput::from_decoded(Err(e)),
        };
        let live = self.core.subs[i].live;
        let verdict = self
            .core
            .liveness
            .table_mut()
            .handle_fanout(live, input, now);
        // A state change (ready) comes before the record that caused it.
        self.take_publisher_events(i, live, now);
        match (verdict, decoded) {
            (Ok(FanoutDelivery::Deliver), Ok(Fanout::Publish { topic, payload })) => {
                self.deliver_published(i, topic, payload);
            }
            (Ok(FanoutDelivery::Deliver), Ok(Fanout::Pack { topic, payloads })) => {
                // Each as the PUBLISH it stands for, in order (WIRE.md §7.5).
                for payload in payloads {
                    self.deliver_published(i, topic.clone(), payload);
                }
            }
            _ => {}
        }
    }

    /// Acts on what subscription `i`'s watch (`live`) said of the input it was just handed,
    /// before that input's records are delivered.
    fn take_publisher_events(&mut self, i: SubKey, live: liveness::LinkKey, now: Instant) {
        while let Some(ev) = self.core.liveness.table_mut().poll_event_of(live) {
            match ev {
                LivenessEvent::Publisher(ev) => self.on_publisher_event(i, ev, now),
                LivenessEvent::Probe(ev) => {
                    tracing::debug!(?ev, "probe event of a publisher's watch")
                }
            }
        }
    }

    /// The verdict of subscription `i`'s watch: ready at its first valid record or beacon;
    /// failed (its socket closed, a new one opened) at 15 s of silence or a protocol error.
    pub(super) fn on_publisher_event(&mut self, i: SubKey, ev: PublisherEvent, now: Instant) {
        match judge_publisher_event(ev) {
            PublisherVerdict::Ready => {
                let s = &mut self.core.subs[i];
                s.handle_ready(now);
                let link = LinkId::Subscription {
                    endpoint: s.endpoint.clone(),
                };
                self.app
                    .emit_state(link, ConnState::Ready, None, "first record or beacon");
            }
            PublisherVerdict::Fail(reason, detail) => self.fail_sub(i, reason, &detail, now),
        }
    }
}
