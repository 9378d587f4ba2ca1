//! One-way records out, without a round trip to the I/O thread per record. Both [`super::node`] and [`super::io`] use this module.
//!
//! ```text
//!  Node::send ──> LinkTable (RID / server channel -> queue of the current ready link; the
//!      |          I/O thread publishes it when a link becomes ready or fails)
//!      +──> SendQueue of that link: at most SEND_QUEUE records (send waits for room,
//!      |    try_send refuses WouldBlock) ──> I/O thread, in bursts: libzmq, in order
//!      +──> Command::SendQueued + one wake-up, only when no drain of that queue is on its way
//!
//!  Node::publish ──> PubSocket: the publisher (XPUB) socket itself, under a mutex (the I/O
//!                    thread uses it for beacons, reads and applies its subscriptions: beacon
//!                    on join, and sends the records a burst of publishes held for a PUBPACK)
//! ```
//!
//! A queue belongs to one physical connection: it is made when the connection becomes ready
//! and closed when it leaves ready. Records still in it then are counted in that failure
//! (the state change's detail and `zmesh_records_unsent_total`), never silently dropped.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use super::error::SendError;
use super::records;
use super::socket::ZmqSocket;
use super::transport::TransportSocket;
use super::wake::WakeUp;
use crate::proto::node::keys::LinkKey;
use crate::proto::wire::{
    encode_beacon, AppliedSubscriptions, Capabilities, PubPack, BEACON_TOPIC, MAX_TOPIC_LEN,
};
use crate::proto::ConnId;

/// Records one link's zmesh queue holds (besides libzmq's own pipe, [`HWM`] records deep):
/// [`Node::send`](super::Node::send) waits for room while it is full,
/// [`Node::try_send`](super::Node::try_send) refuses with
/// [`SendError::WouldBlock`].
///
/// [`HWM`]: super::socket::HWM
pub const SEND_QUEUE: usize = 1_000;
/// Envelopes (one per channel) a queue keeps built, so a record costs no envelope of its own.
const ENVELOPES_CACHED: usize = 8;

/// Consecutive records of one channel in a [`SendQueue`]: the MESSAGE envelope they share
/// and how many payloads it covers. A queue keeps one envelope per run, not per record, so a
/// record pushed behind another of its channel costs no reference count on the envelope
/// (on either thread).
struct Run {
    env: Bytes,
    len: usize,
}

/// The records the I/O thread took from a [`SendQueue`] for one burst
/// ([`SendQueue::take`]): the payloads in order, and the channel runs they form. Reused from
/// burst to burst.
#[derive(Default)]
pub(crate) struct Taken {
    runs: Vec<Run>,
    payloads: Vec<Bytes>,
}

impl Taken {
    /// The runs, in order: each one's MESSAGE envelope and its payloads. Two runs next to
    /// each other may share a channel (a queue does not merge every run it could).
    pub(crate) fn runs(&self) -> impl Iterator<Item = (&Bytes, &[Bytes])> + '_ {
        let mut start = 0;
        self.runs.iter().map(move |run| {
            let payloads = self
                .payloads
                .get(start..start + run.len)
                .unwrap_or_default();
            start += run.len;
            (&run.env, payloads)
        })
    }

    /// Each record taken, in order: its envelope and payload.
    #[cfg(test)]
    fn records(&self) -> Vec<(Bytes, Bytes)> {
        self.runs()
            .flat_map(|(env, ps)| ps.iter().map(|p| (env.clone(), p.clone())))
            .collect()
    }
}

/// Why a queue takes no more records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Its connection left ready.
    NotReady,
    /// The node stopped.
    Shutdown,
}

/// What [`SendQueue::push`] did.
pub(crate) struct Pushed {
    /// Records taken, from the first.
    pub(crate) taken: usize,
    /// The I/O thread must be told (with [`super::command::Command::SendQueued`]): no drain
    /// of this queue is on its way.
    pub(crate) schedule: bool,
    /// Why it stopped before the end, if it did.
    pub(crate) stop: Option<Stop>,
}

/// Why [`SendQueue::push`] stopped before the last record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The queue holds [`SEND_QUEUE`] records.
    Full,
    /// The queue is closed.
    Closed(Closed),
    /// The channel is not a valid name.
    Invalid(String),
}

/// The zmesh send queue of one ready connection.
pub(crate) struct SendQueue {
    link: LinkKey,
    conn: ConnId,
    /// The peer's RID or the server's channel, for errors.
    who: Arc<str>,
    state: Mutex<QueueState>,
    /// Senders waiting for room, and for the close. Room is handed to one waiter at a
    /// time (`notify_one`): a waiter that pushed and left room hands it to the next, so a
    /// settle wakes as many senders as its room serves, not every sender (a burst of
    /// senders on one full queue would otherwise all wake, and all but a few wait again, at
    /// every drain). A close wakes them all.
    room: Notify,
}

struct QueueState {
    /// The payloads waiting, oldest first.
    payloads: VecDeque<Bytes>,
    /// The channel runs of `payloads`, in the same order; their lengths add up to its length.
    runs: VecDeque<Run>,
    /// Records the I/O thread took and has not settled yet; they count against the bound.
    in_flight: usize,
    closed: Option<Closed>,
    /// A drain is on its way: the I/O thread was told and has not found the queue empty since.
    scheduled: bool,
    envelopes: Vec<(Box<str>, Bytes)>,
    /// The cache entry replaced next when a new channel does not fit.
    evict: usize,
    /// Senders in [`SendQueue::wait_for_room`] (one that was woken counts until it returns).
    waiting: usize,
}

impl QueueState {
    fn occupancy(&self) -> usize {
        self.payloads.len() + self.in_flight
    }

    /// The index in `envelopes` of `channel`'s envelope, built once per queue (up to
    /// [`ENVELOPES_CACHED`] channels).
    fn envelope(&mut self, channel: &str) -> Result<usize, String> {
        if let Some(i) = self.envelopes.iter().position(|(c, _)| &**c == channel) {
            return Ok(i);
        }
        let env = Bytes::from(records::message_envelope(channel).map_err(|e| e.to_string())?);
        let entry = (Box::from(channel), env);
        if self.envelopes.len() < ENVELOPES_CACHED {
            self.envelopes.push(entry);
            Ok(self.envelopes.len() - 1)
        } else {
            let i = self.evict;
            self.envelopes[i] = entry;
            self.evict = (i + 1) % ENVELOPES_CACHED;
            Ok(i)
        }
    }

    /// Appends `n` records on the envelope at `envelopes[env]` to the runs: the last run
    /// grows if it has that envelope, else a run begins.
    fn extend_runs(&mut self, env: usize, n: usize) {
        let Some((_, env)) = self.envelopes.get(env) else {
            return;
        };
        match self.runs.back_mut() {
            Some(run) if run.env == *env => run.len += n,
            _ => self.runs.push_back(Run {
                env: env.clone(),
                len: n,
            }),
        }
    }
}

impl SendQueue {
    /// An open, empty queue for connection `conn` of link `link`.
    pub(crate) fn new(link: LinkKey, conn: ConnId, who: Arc<str>) -> SendQueue {
        SendQueue {
            link,
            conn,
            who,
            state: Mutex::new(QueueState {
                payloads: VecDeque::new(),
                runs: VecDeque::new(),
                in_flight: 0,
                closed: None,
                scheduled: false,
                envelopes: Vec::new(),
                evict: 0,
                waiting: 0,
            }),
            room: Notify::new(),
        }
    }

    /// The link this queue feeds.
    pub(crate) fn link(&self) -> LinkKey {
        self.link
    }

    /// The connection this queue feeds.
    pub(crate) fn conn(&self) -> ConnId {
        self.conn
    }

    /// Whom the records go to (a RID, or a server's channel).
    pub(crate) fn who(&self) -> &str {
        &self.who
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic while holding the lock leaves the queue consistent (every step is one
        // collection operation), so a poisoned lock is used as it is.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes records from the front of `payloads` on `channel`, in order, while the queue has
    /// room; each taken payload is moved out (left empty).
    pub(crate) fn push(&self, channel: &str, payloads: &mut [Bytes]) -> Pushed {
        let mut s = self.lock();
        let mut pushed = Pushed {
            taken: 0,
            schedule: false,
            stop: None,
        };
        if let Some(c) = s.closed {
            pushed.stop = Some(Stop::Closed(c));
            return pushed;
        }
        let env = match s.envelope(channel) {
            Ok(env) => env,
            Err(e) => {
                pushed.stop = Some(Stop::Invalid(e));
                return pushed;
            }
        };
        let n = payloads.len().min(SEND_QUEUE.saturating_sub(s.occupancy()));
        if n < payloads.len() {
            pushed.stop = Some(Stop::Full);
        }
        if n > 0 {
            s.extend_runs(env, n);
            let taken = payloads.iter_mut().take(n).map(std::mem::take);
            s.payloads.extend(taken);
            pushed.taken = n;
        }
        if pushed.taken > 0 && !s.scheduled {
            s.scheduled = true;
            pushed.schedule = true;
        }
        // Room is left and another sender waits for it: hand it on (see `room`).
        let hand_on = s.waiting > 0 && s.occupancy() < SEND_QUEUE;
        drop(s);
        if hand_on {
            self.room.notify_one();
        }
        pushed
    }

    /// Waits until the queue may have room or is closed. The waiter is registered before the
    /// queue is looked at, so a drain between the look and the wait is not missed.
    pub(crate) async fn wait_for_room(&self) {
        let notified = self.room.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let mut s = self.lock();
            if s.closed.is_some() || s.occupancy() < SEND_QUEUE {
                return;
            }
            s.waiting += 1;
        }
        // Counted out however the wait ends (woken, or the sender's future dropped).
        let _counted = Waiting(self);
        notified.await;
    }

    /// I/O thread: moves up to `max` records from the front into `out` (they keep counting
    /// against the bound until [`SendQueue::settle`]).
    pub(crate) fn take(&self, max: usize, out: &mut Taken) {
        out.runs.clear();
        out.payloads.clear();
        let mut s = self.lock();
        let n = max.min(s.payloads.len());
        // Moved out of the queue's two slices (a copy loop of known length, where extending
        // from `drain` pushes one by one), then the emptied places dropped.
        let (front, back) = s.payloads.as_mut_slices();
        let from_back = n.saturating_sub(front.len());
        out.payloads
            .extend(front.iter_mut().take(n).map(std::mem::take));
        out.payloads
            .extend(back.iter_mut().take(from_back).map(std::mem::take));
        s.payloads.drain(..n);
        s.in_flight += n;
        let mut left = n;
        while left > 0 {
            let Some(front) = s.runs.front_mut() else {
                break;
            };
            if front.len <= left {
                left -= front.len;
                if let Some(run) = s.runs.pop_front() {
                    out.runs.push(run);
                }
            } else {
                front.len -= left;
                out.runs.push(Run {
                    env: front.env.clone(),
                    len: left,
                });
                left = 0;
            }
        }
    }

    /// I/O thread: the first `sent` records of `out` (from [`SendQueue::take`]) went to the
    /// transport; the rest go back to the front, in order. Wakes the senders waiting for room
    /// if some was made. Returns true if records are still queued (the drain stays on its
    /// way); false clears it, so the next record pushed tells the I/O thread again.
    pub(crate) fn settle(&self, out: &mut Taken, sent: usize) -> bool {
        let (more, made_room) = {
            let mut s = self.lock();
            // Full before this settle: some sender may be waiting.
            let was_full = s.occupancy() >= SEND_QUEUE;
            s.in_flight = 0;
            let sent = sent.min(out.payloads.len());
            let mut unsent = out.payloads.len() - sent;
            for payload in out.payloads.drain(sent..).rev() {
                s.payloads.push_front(payload);
            }
            // The unsent records' runs go back too, from the last: the first one back may
            // continue the run now at the front (take split it there).
            for run in out.runs.drain(..).rev() {
                if unsent == 0 {
                    break;
                }
                let len = run.len.min(unsent);
                unsent -= len;
                match s.runs.front_mut() {
                    Some(front) if front.env == run.env => front.len += len,
                    _ => s.runs.push_front(Run { env: run.env, len }),
                }
            }
            let more = !s.payloads.is_empty();
            if !more {
                s.scheduled = false;
            }
            (more, was_full && sent > 0 && s.waiting > 0)
        };
        out.runs.clear();
        out.payloads.clear();
        if made_room {
            self.room.notify_one();
        }
        more
    }

    /// Seals the queue: it takes no more records (its waiting senders are told), and the
    /// I/O thread may still drain what it holds.
    pub(crate) fn seal(&self, why: Closed) {
        {
            let mut s = self.lock();
            if s.closed.is_none() {
                s.closed = Some(why);
            }
        }
        self.room.notify_waiters();
    }

    /// Closes the queue: it takes no more records, its waiting senders are told. Returns how
    /// many records were still queued (dropped, for the caller to count).
    pub(crate) fn close(&self, why: Closed) -> usize {
        let dropped = {
            let mut s = self.lock();
            if s.closed.is_none() {
                s.closed = Some(why);
            }
            let n = s.occupancy();
            s.payloads.clear();
            s.runs.clear();
            s.in_flight = 0;
            n
        };
        self.room.notify_waiters();
        dropped
    }

    /// Records queued now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().occupancy()
    }
}

/// A sender counted in [`QueueState::waiting`] while it waits for room.
struct Waiting<'a>(&'a SendQueue);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.waiting = s.waiting.saturating_sub(1);
    }
}

/// Where one-way records go, as the I/O thread last published it: each peer RID to the queue
/// of its current ready link, each server channel to the queues of its ready servers.
#[derive(Default)]
pub(crate) struct LinkTable {
    routes: RwLock<Routes>,
    /// Round-robin position among a channel's ready servers.
    server_rr: AtomicUsize,
    stopped: AtomicBool,
}

#[derive(Default)]
struct Routes {
    peers: HashMap<String, Arc<SendQueue>>,
    servers: HashMap<String, Vec<Arc<SendQueue>>>,
}

impl LinkTable {
    /// The queue of `peer`'s current ready link.
    pub(crate) fn peer(&self, peer: &str) -> Result<Arc<SendQueue>, SendError> {
        let routes = self.routes.read().unwrap_or_else(PoisonError::into_inner);
        match routes.peers.get(peer) {
            Some(q) => Ok(q.clone()),
            None => Err(self.not_ready(peer)),
        }
    }

    /// The queue of one ready server of `channel`, taking turns among them.
    pub(crate) fn server(&self, channel: &str) -> Result<Arc<SendQueue>, SendError> {
        let routes = self.routes.read().unwrap_or_else(PoisonError::into_inner);
        match routes.servers.get(channel) {
            Some(qs) if !qs.is_empty() => {
                let i = self.server_rr.fetch_add(1, Ordering::Relaxed) % qs.len();
                Ok(qs[i].clone())
            }
            _ => Err(self.not_ready(channel)),
        }
    }

    fn not_ready(&self, who: &str) -> SendError {
        if self.stopped.load(Ordering::Acquire) {
            SendError::Shutdown
        } else {
            SendError::NotReady(who.to_owned())
        }
    }

    /// I/O thread: `peer`'s records go to `q` from now on (none: the peer has no ready link).
    pub(crate) fn set_peer(&self, peer: &str, q: Option<Arc<SendQueue>>) {
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        match q {
            Some(q) => {
                routes.peers.insert(peer.to_owned(), q);
            }
            None => {
                routes.peers.remove(peer);
            }
        }
    }

    /// I/O thread: the ready servers of `channel` are now `qs`, in link order.
    pub(crate) fn set_servers(&self, channel: &str, qs: Vec<Arc<SendQueue>>) {
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        if qs.is_empty() {
            routes.servers.remove(channel);
        } else {
            routes.servers.insert(channel.to_owned(), qs);
        }
    }

    /// I/O thread: the node stopped; every lookup fails with [`SendError::Shutdown`].
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        routes.peers.clear();
        routes.servers.clear();
    }
}

/// The node's publisher socket (an XPUB: PUB on the wire), shared by
/// [`Node::publish`](super::Node::publish) (which sends on it directly: it never blocks, and
/// at the high-water mark libzmq drops records per subscriber, the fanout loss rule) and the
/// I/O thread (beacons, the subscriptions of joining subscribers, and the close).
///
/// A libzmq socket may be used from several threads one at a time, with a full memory barrier
/// between them: the mutex is that barrier.
///
/// **Subscriptions.** The socket runs with `ZMQ_XPUB_MANUAL` (WIRE.md §7.5): libzmq applies
/// no subscription by itself; the I/O thread reads each one and, under the mutex, applies it
/// to the connection that sent it and counts it ([`AppliedSubscriptions`]) before anything
/// else is sent. So a subscriber receives nothing before its subscription is counted, and
/// whether every subscriber speaks PUBPACK is known exactly when a record is sent.
///
/// **Packing.** While `pubpack` is in effect, records of one topic leave as PUBPACKs of at
/// most [`PUBPACK_RECORDS`] records and [`PUBPACK_BYTES`] of payloads. A `publish_batch`
/// packs its runs at once. Consecutive `publish` calls pack through a run held here: the
/// first record after the I/O thread's last look at the publisher goes out at once as a
/// PUBLISH and asks for a look (one wake-up); the records published before that look are
/// held as a run of one topic, which leaves as a PUBPACK when it is full, when a record of
/// another topic comes, at a beacon, at the close, or at the look, in the I/O thread's next
/// loop turn. A record is never held longer than that.
///
/// **Looks while not packing.** A publish can consume the socket descriptor's signal of a
/// subscription that arrives meanwhile, and an unread subscription is not applied, so the
/// subscriber would receive nothing until the grid beacon's read of the subscriptions. A
/// publish therefore also asks for a look when none was asked for in the last
/// [`LOOK_EVERY`]: a subscriber that joins while the application publishes is served within
/// that and a loop turn, at the cost of one wake-up of the I/O thread per [`LOOK_EVERY`] of
/// publishing rather than one per burst.
pub(crate) struct PubSocket {
    state: Mutex<Option<PubState>>,
    /// A look by the I/O thread is on its way ([`PubSocket::take_look`]).
    look: AtomicBool,
    wake: Arc<WakeUp>,
}

/// How often, at most, publishing asks the I/O thread for a look while `pubpack` is not in
/// effect (see [`PubSocket`]): the longest a subscription waits unread while the application
/// publishes, besides a loop turn. A wake-up costs the I/O thread a few microseconds, so this
/// is well under 1 % of a core.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// The most records a PUBPACK this node sends carries: the wire's bound (WIRE.md §7.5).
pub(crate) const PUBPACK_RECORDS: usize = PubPack::MAX;

/// The most payload bytes a PUBPACK this node sends carries (the wire allows 64 KiB): the
/// bound of a PACK (WIRE.md §4.18), for the same reason. libzmq's high-water mark counts
/// messages, so a subscriber's pipe full of PUBPACKs holds at most what it would hold of
/// 4 KiB PUBLISHes; a record with a longer payload leaves alone as a PUBLISH.
pub(crate) const PUBPACK_BYTES: usize = 4 * 1024;

struct PubState {
    socket: ZmqSocket,
    generation: NonZeroU64,
    /// The sequence number of the last record published (held records included).
    seq: u64,
    /// When a publish last asked for a look while `pubpack` was not in effect.
    asked_at: Option<Instant>,
    /// What the applied subscriptions say: whether `pubpack` is in effect.
    subscribers: AppliedSubscriptions,
    /// Records published but not sent yet: one topic, consecutive seqs.
    run: HeldRun,
    /// Frames 1 and 2 of the PUBPACK being sent, reused.
    env: Vec<u8>,
    body: Vec<u8>,
}

/// Records of one topic held for a PUBPACK.
#[derive(Default)]
struct HeldRun {
    topic: Vec<u8>,
    first_seq: u64,
    payloads: Vec<Bytes>,
    bytes: usize,
}

impl HeldRun {
    /// Whether a record with `payload` on `topic` can join the run.
    fn takes(&self, topic: &[u8], payload: &Bytes) -> bool {
        self.payloads.len() < PUBPACK_RECORDS
            && self.bytes + payload.len() <= PUBPACK_BYTES
            && self.topic == topic
    }

    fn is_full(&self) -> bool {
        self.payloads.len() >= PUBPACK_RECORDS || self.bytes >= PUBPACK_BYTES
    }
}

impl PubSocket {
    /// The publisher of a node of lifecycle `generation`, over its bound XPUB `socket` (in
    /// manual mode); `wake` wakes the node's I/O thread for a look.
    pub(crate) fn new(socket: ZmqSocket, generation: u64, wake: Arc<WakeUp>) -> PubSocket {
        PubSocket {
            state: Mutex::new(Some(PubState {
                socket,
                generation: NonZeroU64::new(generation).unwrap_or(NonZeroU64::MIN),
                seq: 0,
                asked_at: None,
                subscribers: AppliedSubscriptions::default(),
                run: HeldRun::default(),
                env: Vec::new(),
                body: Vec::new(),
            })),
            look: AtomicBool::new(false),
            wake,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<PubState>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes `payloads` on `topic` in order, one sequence number each: as PUBLISHes
    /// (the topic and the payload go to libzmq as they are, between them an envelope built on
    /// the stack) or, while `pubpack` is in effect, packed (see the type). False once the
    /// node stopped (nothing was published).
    pub(crate) fn publish(&self, topic: &[u8], payloads: &[Bytes]) -> bool {
        let mut guard = self.lock();
        let Some(p) = guard.as_mut() else {
            return false;
        };
        // The wire rule, checked again here (Node::publish checked the argument).
        if topic.is_empty() || topic.len() > MAX_TOPIC_LEN || topic == BEACON_TOPIC {
            return true;
        }
        let ask = if !p.packs() {
            // Nothing is held while `pubpack` is not in effect (a change of it sends the run
            // first); a run held by an earlier call leaves first all the same.
            p.flush();
            for payload in payloads {
                p.seq += 1;
                p.send_publish(topic, p.seq, payload);
            }
            let now = Instant::now();
            let due = p
                .asked_at
                .is_none_or(|at| now.duration_since(at) >= LOOK_EVERY);
            if due {
                p.asked_at = Some(now);
            }
            due
        } else if let [payload] = payloads {
            let looked = !self.look.load(Ordering::Acquire);
            p.hold(topic, payload, looked);
            true
        } else {
            for payload in payloads {
                p.hold(topic, payload, false);
            }
            p.flush();
            true
        };
        drop(guard);
        if ask && !self.look.swap(true, Ordering::AcqRel) {
            self.wake.command_queued();
        }
        true
    }

    /// I/O thread: whether a publish asked for a look since the last one; the request is
    /// taken. The look itself is [`PubSocket::subscriptions`].
    pub(crate) fn take_look(&self) -> bool {
        self.look.swap(false, Ordering::AcqRel)
    }

    /// Sends the two beacon frames (MISSION L4), after any held records.
    pub(crate) fn beacon(&self) {
        let mut guard = self.lock();
        let Some(p) = guard.as_mut() else {
            return;
        };
        p.flush();
        p.send_beacon();
    }

    /// The I/O thread's look at the publisher: sends the records held, then reads up to
    /// `max` subscription messages waiting on the (XPUB) socket, applying and counting each
    /// right after reading it, and sends one beacon if one of them subscribes to a prefix of
    /// the beacon topic (a subscriber joined: beacon on join, WIRE.md §7.1). The socket's
    /// last operation is a read that found nothing or an event check, so the next
    /// subscription signals its descriptor again; `more` says whether messages are still
    /// waiting.
    pub(crate) fn subscriptions(&self, max: usize) -> Subscriptions {
        let mut guard = self.lock();
        let Some(p) = guard.as_mut() else {
            return Subscriptions::default();
        };
        // Held records leave to the subscribers they were held for, before any subscription
        // read now is applied.
        p.flush();
        let packed_before = p.packs();
        let mut read = Subscriptions {
            joined: false,
            more: true,
            not_subscriptions: 0,
            packs: packed_before,
        };
        for _ in 0..max {
            match p.socket.try_recv() {
                Ok(Some(frames)) => match subscription(&frames) {
                    Some((subscribe, prefix)) => {
                        // Right after the read: libzmq applies it to the connection that sent
                        // it (manual mode).
                        let applied = p.socket.apply_subscription(subscribe, prefix);
                        if let Err(e) = applied {
                            tracing::warn!(error = %e, "subscription not applied");
                        }
                        p.subscribers.handle_subscription(subscribe, prefix);
                        read.joined |= subscribe && BEACON_TOPIC.starts_with(prefix);
                    }
                    None => {
                        read.not_subscriptions += 1;
                        p.subscribers.handle_other_message();
                    }
                },
                Ok(None) => {
                    read.more = false;
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "subscription not read");
                    read.more = false;
                    break;
                }
            }
        }
        read.packs = p.packs();
        if read.packs != packed_before {
            tracing::debug!(packs = read.packs, "fanout packing changed");
        }
        if read.joined {
            p.send_beacon();
            // The send may have consumed the signal of a subscription that came meanwhile.
            read.more |= p.socket.has_input();
        }
        read
    }

    /// Takes the socket out (the node stops), after sending the records held: publishing
    /// fails from now on.
    pub(crate) fn close(&self) -> Option<ZmqSocket> {
        let mut guard = self.lock();
        if let Some(p) = guard.as_mut() {
            p.flush();
        }
        guard.take().map(|p| p.socket)
    }
}

impl PubState {
    /// Whether `pubpack` is in effect on the socket.
    fn packs(&self) -> bool {
        self.subscribers.in_effect().contains(Capabilities::PUBPACK)
    }

    /// Takes one record on `topic` while `pubpack` is in effect: into the run if it fits
    /// (sending the run once full), else after sending the run; with `now` and no run held,
    /// it goes out at once as a PUBLISH instead.
    fn hold(&mut self, topic: &[u8], payload: &Bytes, now: bool) {
        self.seq += 1;
        if !self.run.payloads.is_empty() && !self.run.takes(topic, payload) {
            self.flush();
        }
        if payload.len() > PUBPACK_BYTES || (now && self.run.payloads.is_empty()) {
            self.send_publish(topic, self.seq, payload);
            return;
        }
        if self.run.payloads.is_empty() {
            self.run.topic.clear();
            self.run.topic.extend_from_slice(topic);
            self.run.first_seq = self.seq;
        }
        self.run.bytes += payload.len();
        self.run.payloads.push(payload.clone());
        if self.run.is_full() {
            self.flush();
        }
    }

    /// Sends the run held: a PUBPACK, or a PUBLISH for a lone record.
    fn flush(&mut self) {
        match self.run.payloads.as_slice() {
            [] => {}
            [payload] => {
                let payload = payload.clone();
                let topic = std::mem::take(&mut self.run.topic);
                self.send_publish(&topic, self.run.first_seq, &payload);
                self.run.topic = topic;
            }
            payloads => {
                PubPack::write_frames(
                    self.generation,
                    self.run.first_seq,
                    payloads.iter().map(|p| p.as_ref()),
                    &mut self.env,
                    &mut self.body,
                );
                // PUB never blocks; at HWM libzmq drops for that subscriber (fanout loss rule).
                let _ = self.socket.send(&[&self.run.topic, &self.env, &self.body]);
            }
        }
        self.run.payloads.clear();
        self.run.bytes = 0;
    }

    /// Sends one PUBLISH.
    fn send_publish(&self, topic: &[u8], seq: u64, payload: &[u8]) {
        let env = records::publish_envelope(self.generation.get(), seq);
        // PUB never blocks; at HWM libzmq drops for that subscriber (fanout loss rule).
        let _ = self.socket.send(&[topic, &env, payload]);
    }

    /// Sends the two beacon frames (MISSION L4).
    fn send_beacon(&self) {
        let [topic, payload] = encode_beacon();
        if let Err(e) = self.socket.send(&[topic, payload]) {
            tracing::warn!(error = %e, "beacon not sent");
        }
    }
}

/// What [`PubSocket::subscriptions`] read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subscriptions {
    /// A subscriber joined (a subscription to a prefix of the beacon topic): a beacon went.
    pub(crate) joined: bool,
    /// Messages are still waiting.
    pub(crate) more: bool,
    /// Messages read that are neither a subscription nor a cancel (an XSUB peer may send
    /// anything): dropped, each a refusal of malformed input.
    pub(crate) not_subscriptions: usize,
    /// Whether `pubpack` is in effect after what was read.
    pub(crate) packs: bool,
}

/// The subscription or cancel that `frames`, read from an XPUB socket, are: one frame whose
/// first byte is 1 (subscribe) or 0 (cancel), then the prefix (how libzmq hands both up,
/// whichever ZMTP version the subscriber speaks). `None` for anything else.
fn subscription(frames: &[super::socket::Frame]) -> Option<(bool, &[u8])> {
    match frames {
        [f] => match f.as_ref().split_first() {
            Some((1, prefix)) => Some((true, prefix)),
            Some((0, prefix)) => Some((false, prefix)),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::node::keys::Key;

    fn queue() -> SendQueue {
        SendQueue::new(LinkKey::from_index(0), ConnId(1), Arc::from("b"))
    }

    fn payloads(n: usize) -> Vec<Bytes> {
        payloads_from(0, n)
    }

    fn payloads_from(first: usize, n: usize) -> Vec<Bytes> {
        (first..first + n)
            .map(|i| Bytes::from(i.to_be_bytes().to_vec()))
            .collect()
    }

    /// The bound is [`SEND_QUEUE`] records, counting the ones the I/O thread
    /// holds; a push past it stops with `Full`; only the first push of a burst asks for a
    /// drain.
    #[test]
    fn push_stops_at_the_bound_and_schedules_once() {
        let q = queue();
        let mut first = payloads(10);
        let p = q.push("c", &mut first);
        assert_eq!((p.taken, p.schedule, p.stop), (10, true, None));
        let mut rest = payloads_from(10, SEND_QUEUE);
        let p = q.push("c", &mut rest);
        assert_eq!(p.taken, SEND_QUEUE - 10);
        assert!(!p.schedule, "a drain is already on its way");
        assert_eq!(p.stop, Some(Stop::Full));
        // Taken by the I/O thread but not settled: still counted.
        let mut out = Taken::default();
        q.take(100, &mut out);
        assert_eq!(out.records().len(), 100);
        let p = q.push("c", &mut payloads(1));
        assert_eq!((p.taken, p.stop), (0, Some(Stop::Full)));
        // 60 sent, 40 back at the front, in order.
        assert!(q.settle(&mut out, 60));
        assert_eq!(q.len(), SEND_QUEUE - 60);
        q.take(1, &mut out);
        assert_eq!(
            out.records()[0].1,
            Bytes::from(60usize.to_be_bytes().to_vec())
        );
    }

    /// Records leave in the order they were pushed, and a queue emptied by
    /// the I/O thread asks for a drain again on the next push.
    #[test]
    fn order_kept_and_drain_requested_again_after_empty() {
        let q = queue();
        let p = q.push("c", &mut payloads(5));
        assert!(p.schedule);
        let mut out = Taken::default();
        q.take(usize::MAX, &mut out);
        let got: Vec<Bytes> = out.records().into_iter().map(|(_, p)| p).collect();
        assert_eq!(got, payloads(5));
        assert!(!q.settle(&mut out, 5));
        assert!(q.push("c", &mut payloads(1)).schedule);
    }

    /// One envelope per channel, shared by the records of that channel.
    #[test]
    fn envelope_built_once_per_channel() {
        let q = queue();
        q.push("a", &mut payloads(2));
        q.push("b", &mut payloads(1));
        let mut out = Taken::default();
        q.take(usize::MAX, &mut out);
        let out = out.records();
        assert_eq!(out[0].0.as_ptr(), out[1].0.as_ptr());
        assert_ne!(out[0].0, out[2].0);
        assert_eq!(
            out[2].0,
            Bytes::from(records::message_envelope("b").expect("valid"))
        );
        let p = q.push("", &mut payloads(1));
        assert!(matches!(p.stop, Some(Stop::Invalid(_))), "empty channel");
    }

    /// MISSION X4: the runs a burst is taken in keep channels apart and each record on its
    /// own channel's envelope, however takes, partial settles and pushes in between split
    /// them; the runs of one channel that meet again are one run (so they pack as one).
    #[test]
    fn x4_taken_runs_keep_channels_apart() {
        let q = queue();
        let env = |c: &str| Bytes::from(records::message_envelope(c).expect("valid"));
        // What the queue should hold, record by record: (channel, payload).
        let mut model: VecDeque<(&str, Bytes)> = VecDeque::new();
        let mut next = 0;
        let mut out = Taken::default();
        let mut push = |q: &SendQueue, model: &mut VecDeque<(&'static str, Bytes)>, c, n| {
            let mut ps = payloads_from(next, n);
            next += n;
            model.extend(ps.iter().map(|p| (c, p.clone())));
            assert_eq!(q.push(c, &mut ps).taken, n);
        };
        push(&q, &mut model, "a", 3);
        push(&q, &mut model, "a", 2);
        push(&q, &mut model, "b", 1);
        push(&q, &mut model, "a", 4);
        let steps: [(usize, usize, &str, usize); 5] = [
            (4, 1, "b", 2),
            (6, 6, "a", 0),
            (3, 0, "a", 1),
            (20, 2, "c", 3),
            (20, 20, "a", 0),
        ];
        for (take, sent, push_c, push_n) in steps {
            q.take(take, &mut out);
            let got = out.records();
            let want: Vec<(Bytes, Bytes)> = model
                .iter()
                .take(take)
                .map(|(c, p)| (env(c), p.clone()))
                .collect();
            assert_eq!(got, want, "take {take}");
            for pair in out.runs().collect::<Vec<_>>().windows(2) {
                assert_ne!(pair[0].0, pair[1].0, "neighbouring runs of one channel");
            }
            let sent = sent.min(got.len());
            // Pushed while the burst is out: behind everything, sent or not.
            push(&q, &mut model, push_c, push_n);
            q.settle(&mut out, sent);
            model.drain(..sent);
            assert_eq!(q.len(), model.len());
        }
        assert!(model.is_empty());
    }

    /// Closing counts what was queued, taken or not,
    /// and refuses every later push.
    #[test]
    fn close_counts_queued_records_and_refuses_more() {
        let q = queue();
        q.push("c", &mut payloads(7));
        assert_eq!(q.close(Closed::NotReady), 7);
        let p = q.push("c", &mut payloads(1));
        assert_eq!((p.taken, p.stop), (0, Some(Stop::Closed(Closed::NotReady))));
    }

    /// Room made by a drain is handed to waiting senders one at a time: a settle that frees
    /// three places wakes senders until the queue is full again, not every waiting sender;
    /// the others keep waiting, and none is lost.
    #[tokio::test(flavor = "current_thread")]
    async fn room_is_handed_on_one_waiter_at_a_time_and_none_is_lost() {
        let q = Arc::new(queue());
        q.push("c", &mut payloads(SEND_QUEUE));
        let wakes = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (q, wakes, done) = (q.clone(), wakes.clone(), done.clone());
                tokio::spawn(async move {
                    loop {
                        q.wait_for_room().await;
                        wakes.fetch_add(1, Ordering::SeqCst);
                        if q.push("c", &mut payloads(1)).taken == 1 {
                            done.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                })
            })
            .collect();
        let settle_all = |n: usize| {
            let mut out = Taken::default();
            q.take(n, &mut out);
            q.settle(&mut out, n);
        };
        let run = || async {
            for _ in 0..64 {
                tokio::task::yield_now().await;
            }
        };
        run().await;
        assert_eq!(done.load(Ordering::SeqCst), 0, "no room yet");
        settle_all(3);
        run().await;
        assert_eq!(done.load(Ordering::SeqCst), 3);
        assert_eq!(q.len(), SEND_QUEUE);
        assert_eq!(
            wakes.load(Ordering::SeqCst),
            3,
            "only the senders the room served woke"
        );
        settle_all(5);
        for w in waiters {
            w.await.expect("waiter");
        }
        assert_eq!(done.load(Ordering::SeqCst), 8);
        assert_eq!(wakes.load(Ordering::SeqCst), 8);
    }

    /// A sender that was handed room and went away before using it (its future dropped)
    /// passes the room on to the next waiting sender.
    #[tokio::test(flavor = "current_thread")]
    async fn room_handed_to_a_sender_that_left_goes_to_the_next() {
        let q = Arc::new(queue());
        q.push("c", &mut payloads(SEND_QUEUE));
        let spawn_waiter = || {
            let q = q.clone();
            tokio::spawn(async move {
                q.wait_for_room().await;
                q.push("c", &mut payloads(1)).taken
            })
        };
        let first = spawn_waiter();
        tokio::task::yield_now().await;
        let second = spawn_waiter();
        tokio::task::yield_now().await;
        let mut out = Taken::default();
        q.take(1, &mut out);
        q.settle(&mut out, 1);
        first.abort();
        assert!(first.await.is_err(), "the first sender was aborted");
        for _ in 0..64 {
            tokio::task::yield_now().await;
        }
        assert!(second.is_finished(), "the room went to the second sender");
        assert_eq!(second.await.expect("second sender"), 1);
    }

    /// A sender waiting for room wakes when the I/O thread makes some, and when the queue
    /// closes.
    #[tokio::test]
    async fn waiting_sender_wakes_on_room_and_on_close() {
        let q = Arc::new(queue());
        q.push("c", &mut payloads(SEND_QUEUE));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move {
                q.wait_for_room().await;
                q.push("c", &mut payloads(1)).taken
            }
        });
        tokio::task::yield_now().await;
        let mut out = Taken::default();
        q.take(1, &mut out);
        q.settle(&mut out, 1);
        assert_eq!(waiter.await.expect("waiter"), 1);
        let closed = tokio::spawn({
            let q = q.clone();
            async move { q.wait_for_room().await }
        });
        tokio::task::yield_now().await;
        q.close(Closed::Shutdown);
        closed.await.expect("woken by the close");
    }

    /// The table answers NotReady for an unknown peer, and Shutdown once stopped.
    #[test]
    fn table_lookups() {
        let t = LinkTable::default();
        assert_eq!(t.peer("b").err(), Some(SendError::NotReady("b".into())));
        t.set_peer("b", Some(Arc::new(queue())));
        assert!(t.peer("b").is_ok());
        t.set_servers("orders", vec![Arc::new(queue()), Arc::new(queue())]);
        let a = t.server("orders").expect("one");
        let b = t.server("orders").expect("other");
        assert!(!Arc::ptr_eq(&a, &b), "servers take turns");
        t.stop();
        assert_eq!(t.peer("b").err(), Some(SendError::Shutdown));
        assert_eq!(t.server("orders").err(), Some(SendError::Shutdown));
    }
}
