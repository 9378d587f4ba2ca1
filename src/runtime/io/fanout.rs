//! Classic fanout, the shell's side: the publisher's records and beacons (MISSION L4), and
//! one SUB socket per publisher with its own liveness watch (T3, L5): opened, judged, failed
//! and reopened alone. The decisions are the node core's ([`crate::proto::node::core::fanout`]
//! over the subscriptions table `NodeCore::subs`): what a message read from a subscription is
//! and whether it is delivered, a PUBPACK's records, the watch's verdicts, a subscription's
//! failure, its refusal, and its bookkeeping once a socket is open. This file binds the
//! publisher and reads its subscriptions; creates, secures, subscribes and connects the SUB
//! sockets (as the core says they are secured) and places them; decodes what they read for
//! the core; and is the core's [`FanoutShell`]: it hands records and states to the
//! application and closes the SUB sockets the core lets go of.
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
use super::parts::sockets::{close_stopping_monitor, Slot, SlotRole, Staged, Unit};
use super::{IoThread, SlotKey, SubKey};
use crate::proto::node::core::fanout::{self, FanoutShell};
use crate::proto::node::core::gate;
use crate::proto::node::received;
use crate::proto::node::sub::{Published, SubSecurity};
use crate::proto::state::{ConnState, FailureReason};
use crate::proto::wire::{self, PUBPACK_MARKER};
use crate::runtime::error::NodeError;
use crate::runtime::event::{Delivery, NodeEvent};
use crate::runtime::link::LinkId;
use crate::runtime::records::{self, Fanout};
use crate::runtime::socket::{Frame, MonitorSocket, ZmqSocket};
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
        gate::refuse_publisher_input(self, garbage, &events, now);
    }

    /// Opens subscription `i`'s socket, secured as the core says ([`fanout::open_security`]:
    /// a subscription it refuses is not opened), subscribed to everything and connected, and
    /// hands it to the core once it is watched ([`fanout::on_sub_opened`]).
    pub(super) fn open_sub(&mut self, i: SubKey, now: Instant) {
        let security = fanout::open_security(self, i, now);
        let curve = match (&self.local.curve, security) {
            (_, SubSecurity::Refused) => return,
            (Some(pair), SubSecurity::Curve(key)) => Some((pair.clone(), key)),
            _ => None,
        };
        let endpoint = self.core.subs[i].endpoint.clone();
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
                match added {
                    Ok(slot) => fanout::on_sub_opened(self, i, slot, now),
                    Err(e) => {
                        self.core.subs[i].handle_unwatched(now);
                        tracing::warn!(error = %e, endpoint, "cannot watch SUB socket");
                    }
                }
            }
            Err(e) => self.sub_open_failed(i, e, now),
        }
    }

    /// The records of a PUBPACK just read on subscription socket `owner`, each with its share
    /// of the read's `len` bytes ([`fanout::published_records`]), if the message is a valid
    /// PUBPACK of a subscription with a socket. Anything else (a malformed PUBPACK included)
    /// is staged whole and judged in its turn as any message (WIRE.md §7.3: a malformed one
    /// fails that publisher).
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
        let parts = fanout::published_records(*sub, conn, topic, payloads, len);
        Some(parts.map(|(published, bytes)| (Staged::Published(published), bytes)))
    }

    /// A record of a PUBPACK in its turn, for the core to judge and deliver
    /// ([`fanout::on_published`]).
    pub(super) fn on_published(&mut self, p: Published, now: Instant) {
        fanout::on_published(self, p, now);
    }

    /// A message read from subscription `i`'s socket, in its turn (a PUBPACK's records come
    /// as [`Staged::Published`] instead, [`fanout::on_published`]): decoded, for the core to
    /// judge and deliver ([`fanout::on_fanout`]).
    pub(super) fn on_fanout(&mut self, i: SubKey, frames: Vec<Frame>, now: Instant) {
        let decoded =
            records::decode_fanout(&frames, &self.core.subs[i].last_topic, SUB_CAPABILITIES);
        fanout::on_fanout(self, i, decoded, now);
    }
}

/// Fanout's effects: the application's deliveries and states, and the SUB sockets.
impl FanoutShell for IoThread {
    #[inline]
    fn deliver_published(&mut self, sub: SubKey, topic: Bytes, payload: Bytes) {
        metrics::counter!("zmesh_fanout_records_received_total").increment(1);
        self.app.push(NodeEvent::Delivery(Delivery {
            source: self.core.subs[sub].source.clone(),
            channel: topic,
            payload,
        }));
    }

    fn close_sub_socket(&mut self, slot: SlotKey) {
        if let Some(slot) = self.take_slot(slot) {
            close_stopping_monitor(slot);
        }
    }

    fn emit_sub_state(
        &mut self,
        sub: SubKey,
        state: ConnState,
        reason: Option<FailureReason>,
        detail: &str,
    ) {
        let link = LinkId::Subscription {
            endpoint: self.core.subs[sub].endpoint.clone(),
        };
        self.app.emit_state(link, state, reason, detail);
    }
}
