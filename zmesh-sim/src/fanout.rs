//! Classic fanout in a simulated node run: the publisher's beacons and records on its PUB
//! socket, and one SUB socket per publisher with its watch, wired as the I/O thread wires
//! them around the core's [`BeaconSchedule`](zmesh::proto::liveness::BeaconSchedule) and
//! [`PublisherWatch`](zmesh::proto::liveness::PublisherWatch) (both entries of the node's one
//! [`Liveness`] table).
//!
//! PUB/SUB as libzmq has it: a SUB connects and sends its subscription; the publisher sends
//! every message to every subscriber it knows, and drops a message for a subscriber whose pipe
//! already holds [`HWM`] messages; a SUB whose connection ends reconnects by itself under the
//! same socket (the watch goes on); a watch's silence verdict closes the socket and a new one
//! starts from nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use zmesh::proto::liveness::{Delivery as WatchDelivery, FanoutInput, LinkKey, Liveness};
use zmesh::proto::wire::FanoutMessage;

use crate::net::{End, Link, NetConn, NodeIx};
use crate::Ctx;

/// The topic every record is published on.
pub const TOPIC: &[u8] = b"t";

/// The PUB socket's send high-water mark per subscriber: messages beyond it are dropped.
pub const HWM: usize = 1000;

/// The subscription message a SUB sends when it connects (subscribe to everything).
const SUBSCRIBE: [u8; 1] = [0x01];

/// How soon a SUB reconnects after its connection ended (libzmq's reconnect interval).
const RECONNECT: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct Publisher {
    beacon: LinkKey,
    subscribers: BTreeSet<NetConn>,
    seq: u64,
}

#[derive(Debug)]
struct Sub {
    publisher: NodeIx,
    live: LinkKey,
    conn: Option<NetConn>,
    retry_at: Option<Duration>,
    /// The last sequence number received per publisher generation.
    last_seq: BTreeMap<u64, u64>,
    /// Ground truth: when the current socket last received a well-formed beacon or record,
    /// whatever the watch made of it.
    last_valid_at: Option<Duration>,
    /// Automatic mode: the generation of the publisher descriptor this socket was opened
    /// for (a descriptor of another generation replaces the socket, WIRE.md §7.3).
    discovered: Option<u64>,
    /// Automatic mode: the publisher's descriptor is gone, so the socket is not opened
    /// again once it closes or goes silent (the I/O thread's `retire_sub`).
    retired: bool,
}

/// What a publisher descriptor did to this run's subscriptions ([`Fan::discover`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovered {
    /// A new subscription: its SUB socket dials now.
    New,
    /// The descriptor of the generation the subscription already follows.
    Same,
    /// A descriptor of another run: the socket of generation `old` closed and a new one
    /// dials; `was_ready` says whether its watch was ready when it closed.
    Replaced {
        /// The generation the closed socket followed.
        old: u64,
        /// Whether the closed socket's watch was ready.
        was_ready: bool,
    },
}

/// A node run's fanout: its publisher, if it publishes, and its subscriptions.
#[derive(Debug, Default)]
pub struct Fan {
    publisher: Option<Publisher>,
    subs: Vec<Sub>,
}

impl Fan {
    /// The fanout part of a run that publishes (or not) and subscribes to `publishers`,
    /// started at `now`.
    pub fn new(publishes: bool, publishers: &[NodeIx], live: &mut Liveness, now: Instant) -> Fan {
        Fan {
            publisher: publishes.then(|| Publisher {
                beacon: live.insert_beacon(now),
                subscribers: BTreeSet::new(),
                seq: 0,
            }),
            subs: publishers
                .iter()
                .map(|&p| Sub {
                    publisher: p,
                    live: live.insert_publisher(now),
                    conn: None,
                    retry_at: Some(Duration::ZERO),
                    last_seq: BTreeMap::new(),
                    last_valid_at: None,
                    discovered: None,
                    retired: false,
                })
                .collect(),
        }
    }

    /// Automatic mode: the store holds a descriptor of `publisher` of `generation` that
    /// names its PUB endpoint (`Intent::Publisher`). A publisher not subscribed to yet gets
    /// a SUB socket of its own (MISSION T3); a descriptor of another run closes the current
    /// socket and opens a new one, as the I/O thread's `discover_publisher` does; a retired
    /// subscription is taken up again.
    pub fn discover(
        &mut self,
        ctx: &mut Ctx<'_>,
        me: End,
        live: &mut Liveness,
        base: Instant,
        publisher: NodeIx,
        generation: u64,
    ) -> Discovered {
        let now = base + ctx.now;
        let Some(s) = self.subs.iter_mut().find(|s| s.publisher == publisher) else {
            self.subs.push(Sub {
                publisher,
                live: live.insert_publisher(now),
                conn: None,
                retry_at: Some(ctx.now),
                last_seq: BTreeMap::new(),
                last_valid_at: None,
                discovered: Some(generation),
                retired: false,
            });
            return Discovered::New;
        };
        s.retired = false;
        let old = s.discovered.replace(generation);
        match old {
            Some(g) if g != generation => {
                let was_ready = live.publisher(s.live).is_some_and(|w| w.is_ready());
                if let Some(c) = s.conn.take() {
                    ctx.net.close(c, me, ctx.now, ctx.rng);
                }
                s.last_valid_at = None;
                s.retry_at = Some(ctx.now);
                let _ = live.reset_publisher(s.live, now);
                Discovered::Replaced { old: g, was_ready }
            }
            _ => {
                if s.conn.is_none() && s.retry_at.is_none() {
                    s.last_valid_at = None;
                    s.retry_at = Some(ctx.now);
                    let _ = live.reset_publisher(s.live, now);
                }
                Discovered::Same
            }
        }
    }

    /// Automatic mode: `publisher`'s descriptor is gone (`Intent::PublisherGone`). A socket
    /// whose watch never became ready closes now; a ready one stays until its connection
    /// ends or it goes silent (a lease is no liveness signal, MISSION F5); neither is
    /// opened again until a descriptor names the publisher once more.
    pub fn retire(&mut self, ctx: &mut Ctx<'_>, me: End, live: &Liveness, publisher: NodeIx) {
        let Some(s) = self.subs.iter_mut().find(|s| s.publisher == publisher) else {
            return;
        };
        s.retired = true;
        let ready = live.publisher(s.live).is_some_and(|w| w.is_ready());
        if !ready {
            if let Some(c) = s.conn.take() {
                ctx.net.close(c, me, ctx.now, ctx.rng);
            }
            s.last_valid_at = None;
            s.retry_at = None;
        }
    }

    /// The earliest reconnect due.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.subs.iter().filter_map(|s| s.retry_at).min()
    }

    /// Whether `key` is this run's beacon schedule.
    pub fn is_beacon(&self, key: LinkKey) -> bool {
        self.publisher.as_ref().is_some_and(|p| p.beacon == key)
    }

    /// Whether `conn` is one of this run's SUB connections or a subscriber of its PUB.
    pub fn owns(&self, conn: NetConn) -> bool {
        self.subs.iter().any(|s| s.conn == Some(conn))
            || self
                .publisher
                .as_ref()
                .is_some_and(|p| p.subscribers.contains(&conn))
    }

    /// Dials the SUB connections whose reconnect is due.
    pub fn handle_timeout(&mut self, ctx: &mut Ctx<'_>, me: End) {
        for s in &mut self.subs {
            if s.retry_at.is_none_or(|t| t > ctx.now) || s.conn.is_some() {
                continue;
            }
            s.retry_at = None;
            let (to, up) = ctx.host(s.publisher);
            let conn = ctx.net.dial(me, to, up, Link::Sub, ctx.now, ctx.rng);
            s.conn = Some(conn);
        }
    }

    /// Sends the message `frames` to every subscriber, dropping it for a subscriber whose pipe
    /// is at the high-water mark.
    fn broadcast(&mut self, ctx: &mut Ctx<'_>, me: End, frames: &[Vec<u8>]) {
        let Some(p) = &self.publisher else { return };
        for &conn in &p.subscribers {
            if ctx.net.backlog(conn, me) < HWM {
                ctx.net.send(conn, me, frames.to_vec(), ctx.now, ctx.rng);
            }
        }
    }

    /// The beacon schedule asked for a beacon.
    pub fn send_beacon(&mut self, ctx: &mut Ctx<'_>, me: End) {
        let frames: Vec<Vec<u8>> = zmesh::proto::wire::encode_beacon()
            .map(<[u8]>::to_vec)
            .into();
        self.broadcast(ctx, me, &frames);
    }

    /// Publishes record `uid`; false if this run does not publish.
    pub fn publish(&mut self, ctx: &mut Ctx<'_>, me: End, generation: u64, uid: u64) -> bool {
        let Some(p) = &mut self.publisher else {
            return false;
        };
        p.seq += 1;
        let msg = FanoutMessage::Publish {
            topic: Bytes::from_static(TOPIC),
            generation: NonZeroU64::new(generation).unwrap_or(NonZeroU64::MIN),
            seq: p.seq,
            payload: crate::truth::fanout_of(uid),
        };
        let Ok(frames) = msg.encode() else {
            return false;
        };
        ctx.truth.on_publish(uid);
        self.broadcast(ctx, me, &frames);
        true
    }

    /// Something arrived on a fanout connection. Returns false if `conn` is not fanout's.
    pub fn handle_delivery(
        &mut self,
        ctx: &mut Ctx<'_>,
        me: End,
        live: &mut Liveness,
        base: Instant,
        conn: NetConn,
        delivery: crate::net::Delivery,
    ) {
        use crate::net::Delivery;
        let now = base + ctx.now;
        if let Some(s) = self.subs.iter_mut().find(|s| s.conn == Some(conn)) {
            match delivery {
                Delivery::Connected => {
                    ctx.net
                        .send(conn, me, vec![SUBSCRIBE.to_vec()], ctx.now, ctx.rng);
                }
                Delivery::Closed => {
                    s.conn = None;
                    s.retry_at = (!s.retired).then_some(ctx.now + RECONNECT);
                }
                Delivery::Frames(frames) => {
                    let decoded = FanoutMessage::decode(&frames);
                    if decoded.is_ok() {
                        s.last_valid_at = Some(ctx.now);
                    }
                    let input = FanoutInput::from_decoded(
                        decoded.as_ref().map(|m| matches!(m, FanoutMessage::Beacon)),
                    );
                    let verdict = live.handle_fanout(s.live, input, now);
                    if let (
                        Ok(WatchDelivery::Deliver),
                        Ok(FanoutMessage::Publish {
                            generation,
                            seq,
                            payload,
                            ..
                        }),
                    ) = (verdict, decoded)
                    {
                        let last = s.last_seq.insert(generation.get(), seq);
                        ctx.truth
                            .on_fanout_record(me.node, s.publisher, last, seq, &payload);
                    }
                }
            }
            return;
        }
        let Some(p) = &mut self.publisher else { return };
        match delivery {
            Delivery::Frames(frames)
                if frames.first().map(Vec::as_slice) == Some(&SUBSCRIBE[..]) =>
            {
                // A subscriber joined: it hears a beacon at once.
                p.subscribers.insert(conn);
                let beacon: Vec<Vec<u8>> = zmesh::proto::wire::encode_beacon()
                    .map(<[u8]>::to_vec)
                    .into();
                ctx.net.send(conn, me, beacon, ctx.now, ctx.rng);
            }
            Delivery::Closed => {
                p.subscribers.remove(&conn);
            }
            _ => {}
        }
    }

    /// The watch `key` went silent or saw a protocol error: its socket closes and a new one
    /// starts from nothing. `since` is the last valid receipt (or the socket's creation).
    pub fn handle_silence(
        &mut self,
        ctx: &mut Ctx<'_>,
        me: End,
        live: &mut Liveness,
        base: Instant,
        key: LinkKey,
        since: Duration,
    ) {
        let Some(s) = self.subs.iter_mut().find(|s| s.live == key) else {
            return;
        };
        ctx.truth
            .on_silence(me.node, s.publisher, since, ctx.now, s.last_valid_at);
        if let Some(c) = s.conn.take() {
            ctx.net.close(c, me, ctx.now, ctx.rng);
        }
        s.last_valid_at = None;
        s.retry_at = (!s.retired).then_some(ctx.now);
        let _ = live.reset_publisher(key, base + ctx.now);
    }

    /// The watches that are ready, with their last valid receipt.
    pub fn ready_watches(&self, live: &Liveness, base: Instant) -> Vec<(NodeIx, Duration)> {
        self.subs
            .iter()
            .filter_map(|s| {
                let w = live.publisher(s.live)?;
                if !w.is_ready() {
                    return None;
                }
                let last = w.last_receive_at().unwrap_or(w.socket_at());
                Some((s.publisher, last.saturating_duration_since(base)))
            })
            .collect()
    }

    /// Closes every fanout connection (the run stops).
    pub fn stop(&mut self, ctx: &mut Ctx<'_>, me: End) {
        for s in &mut self.subs {
            if let Some(c) = s.conn.take() {
                ctx.net.close(c, me, ctx.now, ctx.rng);
            }
            s.retry_at = None;
        }
        if let Some(p) = &mut self.publisher {
            for c in std::mem::take(&mut p.subscribers) {
                ctx.net.close(c, me, ctx.now, ctx.rng);
            }
        }
    }
}
