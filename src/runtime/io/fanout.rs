//! Classic fanout: the publisher's records and beacons (MISSION L4), and one SUB socket per
//! publisher with its own liveness watch (T3, L5): opened, judged, failed and reopened alone.
//!
//! The publisher's socket is an XPUB (PUB on the wire; subscribers see no difference) so
//! that the subscriptions reach the node: a subscription that covers the beacon topic is a
//! subscriber joining, and it gets a beacon at once (WIRE.md §7.1), besides the 5 s grid of
//! the beacon schedule, which joins do not move. Subscription messages are read apart from
//! the receive loop and never become records, deliveries or record counts.

use std::time::Instant;

use bytes::Bytes;

use super::links::{backoff, note};
use super::ready::Watch;
use super::slots::{Slot, SlotRole};
use super::{Host, IoThread, SlotKey, BACKOFF_MAX};
use crate::proto::liveness::{self, Delivery as FanoutDelivery, FanoutInput};
use crate::proto::state::{ConnState, FailureReason, LinkState, Recovery};
use crate::proto::wire::{BEACON_TOPIC, MAX_TOPIC_LEN};
use crate::proto::ConnId;
use crate::runtime::event::{Delivery, NodeEvent, Source};
use crate::runtime::records::{self, Fanout};
use crate::runtime::socket::{Frame, FrameSocket};

pub(super) struct Sub {
    pub(super) endpoint: String,
    /// The source of this publisher's deliveries, built once (a reference count per record).
    pub(super) source: Source,
    /// The topic of the last record delivered: the next record's topic, when it is the same,
    /// is a clone of it instead of a fresh copy.
    pub(super) last_topic: Bytes,
    pub(super) slot: Option<SlotKey>,
    pub(super) conn_id: Option<ConnId>,
    /// This publisher's watch in the node's liveness table.
    pub(super) live: liveness::LinkKey,
    pub(super) state: LinkState,
    pub(super) records: u64,
    /// The current socket completed a ZMTP handshake with the publisher.
    pub(super) connected: bool,
    /// Open a new socket not before this instant.
    pub(super) retry_at: Instant,
    pub(super) failures_in_row: u32,
    /// Automatic mode: the publisher's descriptor is gone, so no new socket is opened (a
    /// ready one stays until it fails; see `io::discovery`).
    pub(super) retired: bool,
}

/// Subscription messages read from the publisher's socket per loop turn; more wait for the
/// next turn (a flood of subscriptions cannot starve the loop, and costs one beacon a turn).
const SUBSCRIPTIONS_PER_TURN: usize = 256;

pub(super) struct Publisher {
    pub(super) slot: SlotKey,
    /// The beacon schedule in the node's liveness table.
    pub(super) live: liveness::LinkKey,
    pub(super) seq: u64,
    /// The socket's `ZMQ_EVENTS` said subscription messages are waiting.
    pub(super) subscriptions: bool,
}

impl Publisher {
    /// The publisher of the XPUB socket in `slot`, its beacon schedule `live`.
    pub(super) fn new(slot: SlotKey, live: liveness::LinkKey) -> Publisher {
        Publisher {
            slot,
            live,
            seq: 0,
            subscriptions: false,
        }
    }
}

/// Whether `frames`, read from an XPUB socket, subscribe to a prefix of the beacon topic
/// (the empty prefix included): a subscriber that will receive beacons joined.
fn subscribes_to_beacons(frames: &[Frame]) -> bool {
    match frames {
        [f] => match f.as_ref().split_first() {
            Some((1, prefix)) => BEACON_TOPIC.starts_with(prefix),
            _ => false,
        },
        _ => false,
    }
}

impl IoThread {
    /// Sends the two beacon frames on the publisher socket (MISSION L4).
    pub(super) fn send_beacon(&mut self) {
        let Some(p) = &self.publisher else { return };
        if let Some(Some(slot)) = self.slots.get(p.slot) {
            let frames = records::beacon();
            let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            if let Err(e) = slot.socket.send_frames(&refs) {
                tracing::warn!(error = %e, "beacon not sent");
            }
            // The send may have consumed the signal of a subscription that arrived meanwhile.
            self.ready.touch(Watch::Socket(p.slot));
        }
    }

    /// Notes what the publisher socket's `ZMQ_EVENTS` said: subscriptions waiting or not.
    pub(super) fn subscriptions_waiting(&mut self, input: bool) {
        if let Some(p) = self.publisher.as_mut() {
            p.subscriptions = input;
        }
    }

    /// Reads the subscription messages waiting on the publisher socket (at most
    /// [`SUBSCRIPTIONS_PER_TURN`]) and, if one of them subscribes to the beacons, sends one
    /// beacon at once: a subscriber that joins is ready in milliseconds instead of at the next
    /// tick of the 5 s grid (WIRE.md §7.1). The schedule is not touched. Nothing read here is
    /// a record.
    pub(super) fn read_subscriptions(&mut self) {
        let Some(p) = self.publisher.as_mut() else {
            return;
        };
        if !p.subscriptions {
            return;
        }
        let key = p.slot;
        let Some(Some(slot)) = self.slots.get(key) else {
            p.subscriptions = false;
            return;
        };
        let mut joined = false;
        let mut more = true;
        for _ in 0..SUBSCRIPTIONS_PER_TURN {
            match slot.socket.try_recv_frames() {
                Ok(Some(frames)) => joined |= subscribes_to_beacons(&frames),
                Ok(None) => {
                    more = false;
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "subscription not read");
                    more = false;
                    break;
                }
            }
        }
        p.subscriptions = more;
        // The receives processed libzmq's commands: check again before sleeping.
        self.ready.touch(Watch::Socket(key));
        if joined {
            metrics::counter!("zmesh_fanout_join_beacons_total").increment(1);
            self.send_beacon();
        }
    }

    /// Publishes `payloads` on `topic` in order, one sequence number each. Topic and payload
    /// go to the socket as they are, between them an envelope built on the stack.
    pub(super) fn publish(&mut self, topic: &[u8], payloads: &[Bytes]) {
        let Some(p) = self.publisher.as_mut() else {
            tracing::warn!("publish on a node without a publisher endpoint");
            return;
        };
        // Node::publish checked the topic; the wire rule is checked again here, once a batch.
        if topic.is_empty() || topic.len() > MAX_TOPIC_LEN || topic == BEACON_TOPIC {
            return;
        }
        let Some(Some(slot)) = self.slots.get(p.slot) else {
            return;
        };
        for payload in payloads {
            p.seq += 1;
            let env = records::publish_envelope(self.me.generation, p.seq);
            // PUB never blocks; at HWM libzmq drops for that subscriber (fanout loss rule).
            let _ = slot.socket.send_frames(&[topic, &env, payload]);
        }
        // A send can consume the signal of a subscription (beacon on join).
        self.ready.touch(Watch::Socket(p.slot));
    }

    pub(super) fn open_sub(&mut self, i: usize, now: Instant) {
        self.timers_changed();
        let endpoint = self.subs[i].endpoint.clone();
        let opened = self.sockets.monitored(zmq::SUB).and_then(|m| {
            m.socket.set_subscribe(b"")?;
            m.socket.set_reconnect_ivl(100)?;
            m.socket.set_reconnect_ivl_max(1000)?;
            m.socket.connect(&endpoint)?;
            Ok(m)
        });
        match opened {
            Ok(m) => {
                let added = self.add_slot(Slot {
                    socket: m.socket,
                    monitor: Some(m.monitor),
                    role: SlotRole::Sub(i),
                    endpoint: endpoint.clone(),
                    shared: None,
                });
                let slot = match added {
                    Ok(slot) => slot,
                    Err(e) => {
                        self.subs[i].retry_at = now + BACKOFF_MAX;
                        tracing::warn!(error = %e, endpoint, "cannot watch SUB socket");
                        return;
                    }
                };
                let id = self.fresh_conn_id();
                // A new socket starts a new watch: silence is counted from now (L5).
                let _ = self.liveness.reset_publisher(self.subs[i].live, now);
                let s = &mut self.subs[i];
                s.slot = Some(slot);
                s.conn_id = Some(id);
                s.connected = false;
                note(s.state.handle_connecting(now));
                self.emit_state(
                    format!("sub {endpoint}"),
                    ConnState::Connecting,
                    None,
                    &format!("subscribed as {id}"),
                );
            }
            Err(e) => {
                // Not again at once: the poll timeout takes this instant.
                self.subs[i].retry_at = now + BACKOFF_MAX;
                tracing::warn!(error = %e, endpoint, "cannot open SUB socket");
            }
        }
    }

    pub(super) fn on_fanout(&mut self, i: usize, frames: Vec<Frame>, now: Instant) {
        let decoded = records::decode_fanout(&frames, &self.subs[i].last_topic);
        let input = match &decoded {
            Ok(Fanout::Beacon) => FanoutInput::Beacon,
            Ok(Fanout::Publish { .. }) => FanoutInput::Record,
            Err(e) => FanoutInput::Malformed {
                reserved_topic: e.class() == "reserved_topic",
            },
        };
        let live = self.subs[i].live;
        let verdict = self.liveness.handle_fanout(live, input, now);
        // A state change (ready) comes before the record that caused it.
        self.drain_liveness_events(now);
        if let (Ok(FanoutDelivery::Deliver), Ok(Fanout::Publish { topic, payload })) =
            (verdict, decoded)
        {
            let s = &mut self.subs[i];
            s.records += 1;
            if s.last_topic != topic {
                s.last_topic = topic.clone();
            }
            metrics::counter!("zmesh_fanout_records_received_total").increment(1);
            self.out.push(NodeEvent::Delivery(Delivery {
                source: self.subs[i].source.clone(),
                channel: topic,
                payload,
            }));
        }
        self.drain_liveness_events(now);
    }

    /// Takes one publisher out of ready, closes only its socket; a new socket is opened on the
    /// next timer pass (MISSION L5).
    pub(super) fn fail_sub(&mut self, i: usize, reason: FailureReason, detail: &str, now: Instant) {
        self.timers_changed();
        let Some(slot) = self.subs[i].slot.take() else {
            return;
        };
        self.take_slot(slot);
        let s = &mut self.subs[i];
        s.conn_id = None;
        s.failures_in_row = s.failures_in_row.saturating_add(1);
        s.retry_at = now + backoff(s.failures_in_row);
        let recovery = if self.host == Host::Running && !s.retired {
            Recovery::Reconnect
        } else {
            Recovery::Hold
        };
        note(s.state.handle_failure(reason, detail, recovery, now));
        let name = format!("sub {}", s.endpoint);
        let state = s.state.state();
        self.emit_state(name, state, Some(reason), detail);
        metrics::counter!("zmesh_link_failures_total", "reason" => reason.as_str()).increment(1);
    }
}
