//! The simulated network: connections between node runs, each with two FIFO pipes, latency
//! and jitter per pipe, and the faults a real network has (a partition holds frames, a host
//! that freezes neither answers nor closes, a process killed closes its connections after
//! what it already sent).
//!
//! What it models of libzmq is what the protocol relies on: a dialled connection reports
//! `Connected` to the dialler (the monitor's CONNECTED event); the acceptor learns of a
//! connection from its first frames (a ROUTER's new routing id); frames on one connection
//! arrive in the order they were sent and never twice; a connection that ends reports
//! `Closed` to each side that is still there, after what was in flight (the monitor's
//! DISCONNECTED event, or the acceptor's sweep finding the pipe gone).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use zmesh::proto::wire::Lane;

/// Index of a simulated host (one node at a time runs on it).
pub type NodeIx = usize;

/// A connection of the simulated network, never reused within a run of the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetConn(pub u64);

impl std::fmt::Display for NetConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "k{}", self.0)
    }
}

/// What a connection is for: a lane of RouteMesh or ClientServer, or a SUB socket's
/// connection to a publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// A RouteMesh or ClientServer lane.
    Lane(Lane),
    /// A subscriber's connection to a publisher's PUB socket.
    Sub,
}

/// What a pipe delivers to the node at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The dialled connection is established (to the dialler only).
    Connected,
    /// One message: its frames, routing frames removed.
    Frames(Vec<Vec<u8>>),
    /// The connection is gone.
    Closed,
}

/// One end of a connection: a host and the run of the node on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// The host.
    pub node: NodeIx,
    /// The run of the node on that host that holds this end.
    pub run: u64,
}

#[derive(Debug, Default)]
struct Pipe {
    queue: VecDeque<(Duration, Delivery)>,
    /// When the last item queued arrives: later items never overtake it (FIFO).
    last_at: Duration,
}

#[derive(Debug)]
struct Connection {
    dialler: End,
    acceptor: End,
    link: Link,
    /// Dialler to acceptor.
    forth: Pipe,
    /// Acceptor to dialler.
    back: Pipe,
    /// Ends that closed their side (nothing more is queued from them, nothing is delivered
    /// to them).
    closed: [bool; 2],
}

/// A delivery due now, from [`Net::take_due`].
#[derive(Debug)]
pub struct Due {
    /// The connection.
    pub conn: NetConn,
    /// The end it is delivered to.
    pub to: End,
    /// The end it comes from.
    pub from: End,
    /// What the connection is for.
    pub link: Link,
    /// Whether the receiving end dialled it.
    pub to_dialler: bool,
    /// What arrives.
    pub delivery: Delivery,
}

/// The whole simulated network.
#[derive(Debug)]
pub struct Net {
    conns: BTreeMap<NetConn, Connection>,
    next: u64,
    /// One-way holds: frames from the first host to the second wait (a partition).
    held: BTreeSet<(NodeIx, NodeIx)>,
    /// Hosts that neither send, receive nor close (a frozen host, a half-open peer).
    frozen: BTreeSet<NodeIx>,
    /// Runs that neither send, receive nor close while the rest of their host goes on: a
    /// paused process beside which its successor runs (the zombie of a failover).
    frozen_runs: BTreeSet<(NodeIx, u64)>,
    /// The last instant a hold touched each connection (for the liveness invariant).
    last_hold: BTreeMap<NetConn, Duration>,
    /// The first item of every non-empty pipe, by arrival: (instant, connection, forth).
    heads: BTreeSet<(Duration, NetConn, bool)>,
    /// What `heads` holds for each pipe, to take it out again.
    indexed: BTreeMap<(NetConn, bool), Duration>,
    /// The base one-way latency and the most jitter added on top of it.
    pub latency: Duration,
    /// The most jitter added to one delivery.
    pub jitter: Duration,
    /// Frames delivered (statistics).
    pub delivered: u64,
}

impl Net {
    /// An empty network.
    pub fn new(latency: Duration, jitter: Duration) -> Net {
        Net {
            conns: BTreeMap::new(),
            next: 1,
            held: BTreeSet::new(),
            frozen: BTreeSet::new(),
            frozen_runs: BTreeSet::new(),
            last_hold: BTreeMap::new(),
            heads: BTreeSet::new(),
            indexed: BTreeMap::new(),
            latency,
            jitter,
            delivered: 0,
        }
    }

    fn delay(&self, rng: &mut ChaCha8Rng) -> Duration {
        let jitter = self.jitter.as_micros() as u64;
        let extra = if jitter == 0 {
            0
        } else {
            rng.random_range(0..=jitter)
        };
        self.latency + Duration::from_micros(extra)
    }

    /// Dials from `from` to `to` on `lane`. The dialler hears `Connected` (or `Closed` if
    /// nothing listens there: `to_up` false) after a round trip.
    pub fn dial(
        &mut self,
        from: End,
        to: End,
        to_up: bool,
        link: Link,
        now: Duration,
        rng: &mut ChaCha8Rng,
    ) -> NetConn {
        let id = NetConn(self.next);
        self.next += 1;
        let mut c = Connection {
            dialler: from,
            acceptor: to,
            link,
            forth: Pipe::default(),
            back: Pipe::default(),
            closed: [false, false],
        };
        let at = now + self.delay(rng) + self.delay(rng);
        let answer = if to_up {
            Delivery::Connected
        } else {
            c.closed[1] = true;
            Delivery::Closed
        };
        c.back.queue.push_back((at, answer));
        c.back.last_at = at;
        self.conns.insert(id, c);
        self.reindex(id);
        id
    }

    /// Queues a message from end `from` of `conn`. Returns false if that end is closed or the
    /// connection is gone (the frames go nowhere).
    pub fn send(
        &mut self,
        conn: NetConn,
        from: End,
        frames: Vec<Vec<u8>>,
        now: Duration,
        rng: &mut ChaCha8Rng,
    ) -> bool {
        let delay = self.delay(rng);
        let Some(c) = self.conns.get_mut(&conn) else {
            return false;
        };
        let Some(side) = side_of(c, from) else {
            return false;
        };
        if c.closed[side] || c.closed[1 - side] {
            return false;
        }
        let pipe = if side == 0 { &mut c.forth } else { &mut c.back };
        let at = (now + delay).max(pipe.last_at);
        pipe.last_at = at;
        pipe.queue.push_back((at, Delivery::Frames(frames)));
        self.reindex(conn);
        true
    }

    /// End `from` closes its side of `conn`: the other end hears `Closed` after what was
    /// already in flight to it. Nothing more reaches `from`.
    pub fn close(&mut self, conn: NetConn, from: End, now: Duration, rng: &mut ChaCha8Rng) {
        let delay = self.delay(rng);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(side) = side_of(c, from) else {
            return;
        };
        if c.closed[side] {
            return;
        }
        c.closed[side] = true;
        let (toward_me, toward_peer) = if side == 0 {
            (&mut c.back, &mut c.forth)
        } else {
            (&mut c.forth, &mut c.back)
        };
        toward_me.queue.clear();
        if !c.closed[1 - side] {
            let at = (now + delay).max(toward_peer.last_at);
            toward_peer.last_at = at;
            toward_peer.queue.push_back((at, Delivery::Closed));
        }
        self.reindex(conn);
        self.gc(conn);
    }

    /// A middlebox resets `conn`: both ends hear `Closed` after one latency, and what was in
    /// flight is lost.
    pub fn reset(&mut self, conn: NetConn, now: Duration, rng: &mut ChaCha8Rng) {
        let a = now + self.delay(rng);
        let b = now + self.delay(rng);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.closed == [true, true] {
            // Reset already: the ends hear of it once (a second reset must not take back
            // the `Closed` still held on its way to one of them).
            return;
        }
        for (side, at) in [(0usize, a), (1usize, b)] {
            let pipe = if side == 0 { &mut c.back } else { &mut c.forth };
            pipe.queue.clear();
            if !c.closed[side] {
                pipe.queue.push_back((at, Delivery::Closed));
                pipe.last_at = at;
            }
        }
        c.closed = [true, true];
        self.reindex(conn);
    }

    /// The process on host `node` is killed: each of its connections closes from its side
    /// (the kernel sends what the process had written, then ends the connection).
    pub fn kill(&mut self, node: NodeIx, now: Duration, rng: &mut ChaCha8Rng) {
        let mine: Vec<(NetConn, End)> = self
            .conns
            .iter()
            .filter_map(|(&id, c)| {
                if c.dialler.node == node {
                    Some((id, c.dialler))
                } else if c.acceptor.node == node {
                    Some((id, c.acceptor))
                } else {
                    None
                }
            })
            .collect();
        for (id, end) in mine {
            self.close(id, end, now, rng);
        }
    }

    /// The run at `end` is killed: each of its connections closes from its side, as
    /// [`Net::kill`] closes a whole host's.
    pub fn kill_run(&mut self, end: End, now: Duration, rng: &mut ChaCha8Rng) {
        let mine: Vec<NetConn> = self
            .conns
            .iter()
            .filter(|(_, c)| c.dialler == end || c.acceptor == end)
            .map(|(&id, _)| id)
            .collect();
        for id in mine {
            self.close(id, end, now, rng);
        }
    }

    /// The run at `end` pauses (or goes on), and nothing else of its host: while paused,
    /// nothing it holds is delivered or sent, and no connection of it reports anything.
    pub fn set_run_frozen(&mut self, end: End, frozen: bool, now: Duration) {
        self.touch_holds(now);
        if frozen {
            self.frozen_runs.insert((end.node, end.run));
        } else {
            self.frozen_runs.remove(&(end.node, end.run));
        }
        self.touch_holds(now);
    }

    /// Whether the run at `end` is paused, by itself or with its host.
    pub fn is_run_frozen(&self, end: End) -> bool {
        self.frozen.contains(&end.node) || self.frozen_runs.contains(&(end.node, end.run))
    }

    /// Whether a hold or a freeze stands between the runs at `from` and `to` now.
    fn blocked_ends(&self, from: End, to: End) -> bool {
        self.blocked(from.node, to.node)
            || self.frozen_runs.contains(&(from.node, from.run))
            || self.frozen_runs.contains(&(to.node, to.run))
    }

    /// Host `node` freezes (or comes back): while frozen, nothing it holds is delivered or
    /// sent, and no connection of it reports anything.
    pub fn set_frozen(&mut self, node: NodeIx, frozen: bool, now: Duration) {
        self.touch_holds(now);
        if frozen {
            self.frozen.insert(node);
        } else {
            self.frozen.remove(&node);
        }
        self.touch_holds(now);
    }

    /// Holds (or releases) frames from host `from` to host `to`.
    pub fn set_held(&mut self, from: NodeIx, to: NodeIx, held: bool, now: Duration) {
        self.touch_holds(now);
        if held {
            self.held.insert((from, to));
        } else {
            self.held.remove(&(from, to));
        }
        self.touch_holds(now);
    }

    /// Whether a hold or a freeze stands between `from` and `to` now.
    pub fn blocked(&self, from: NodeIx, to: NodeIx) -> bool {
        self.frozen.contains(&from) || self.frozen.contains(&to) || self.held.contains(&(from, to))
    }

    /// Whether host `node` is frozen.
    pub fn is_frozen(&self, node: NodeIx) -> bool {
        self.frozen.contains(&node)
    }

    /// Records `now` as the last hold instant of every connection a hold touches.
    pub fn touch_holds(&mut self, now: Duration) {
        for (&id, c) in &self.conns {
            let (a, b) = (c.dialler, c.acceptor);
            if self.blocked_ends(a, b) || self.blocked_ends(b, a) {
                self.last_hold.insert(id, now);
            }
        }
    }

    /// The last instant a hold or freeze touched `conn`, if any ever did.
    pub fn last_hold(&self, conn: NetConn) -> Option<Duration> {
        self.last_hold.get(&conn).copied()
    }

    /// Puts the first item of each pipe of `id` into `heads` (and takes out what was there).
    fn reindex(&mut self, id: NetConn) {
        for forth in [true, false] {
            if let Some(at) = self.indexed.remove(&(id, forth)) {
                self.heads.remove(&(at, id, forth));
            }
            let front = self.conns.get(&id).and_then(|c| {
                let pipe = if forth { &c.forth } else { &c.back };
                pipe.queue.front().map(|(at, _)| *at)
            });
            if let Some(at) = front {
                self.heads.insert((at, id, forth));
                self.indexed.insert((id, forth), at);
            }
        }
    }

    /// The hosts a pipe carries frames from and to.
    fn pipe_hosts(&self, id: NetConn, forth: bool) -> Option<(End, End)> {
        let c = self.conns.get(&id)?;
        Some(if forth {
            (c.dialler, c.acceptor)
        } else {
            (c.acceptor, c.dialler)
        })
    }

    /// The first pipe head no hold blocks.
    fn first_unblocked(&self) -> Option<(Duration, NetConn, bool)> {
        self.heads.iter().copied().find(|&(_, id, forth)| {
            self.pipe_hosts(id, forth)
                .is_some_and(|(from, to)| !self.blocked_ends(from, to))
        })
    }

    /// The earliest delivery not blocked by a hold.
    pub fn next_due(&self) -> Option<Duration> {
        self.first_unblocked().map(|(at, _, _)| at)
    }

    /// Takes every delivery due at or before `now` that no hold blocks, earliest first (per
    /// pipe in FIFO order).
    pub fn take_due(&mut self, now: Duration) -> Vec<Due> {
        let mut out = Vec::new();
        while let Some((at, id, forth)) = self.first_unblocked() {
            if at > now {
                break;
            }
            let Some((from, to)) = self.pipe_hosts(id, forth) else {
                break;
            };
            let Some(c) = self.conns.get_mut(&id) else {
                break;
            };
            let link = c.link;
            let pipe = if forth { &mut c.forth } else { &mut c.back };
            let Some((_, delivery)) = pipe.queue.pop_front() else {
                break;
            };
            self.delivered += 1;
            out.push(Due {
                conn: id,
                to,
                from,
                link,
                to_dialler: !forth,
                delivery,
            });
            self.reindex(id);
            self.gc(id);
        }
        out
    }

    fn gc(&mut self, id: NetConn) {
        let done = self.conns.get(&id).is_some_and(|c| {
            c.closed[0] && c.closed[1] && c.forth.queue.is_empty() && c.back.queue.is_empty()
        });
        let half_done = self.conns.get(&id).is_some_and(|c| {
            (c.closed[0] && c.back.queue.is_empty() && c.forth.queue.is_empty())
                || (c.closed[1] && c.forth.queue.is_empty() && c.back.queue.is_empty())
        });
        if done || half_done {
            if let Some(c) = self.conns.get_mut(&id) {
                // The last Closed was delivered: the other side saw the end too.
                c.closed = [true, true];
            }
            self.conns.remove(&id);
            self.reindex(id);
        }
    }

    /// Whether `conn` is still open at both ends (a send from either end would be queued).
    pub fn is_open(&self, conn: NetConn) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| !c.closed[0] && !c.closed[1])
    }

    /// Messages queued from end `from` of `conn` and not yet delivered (what a sender's
    /// high-water mark counts).
    pub fn backlog(&self, conn: NetConn, from: End) -> usize {
        let Some(c) = self.conns.get(&conn) else {
            return 0;
        };
        match side_of(c, from) {
            Some(0) => c.forth.queue.len(),
            Some(_) => c.back.queue.len(),
            None => 0,
        }
    }

    /// The connections host `node` holds an end of.
    pub fn conns_of(&self, node: NodeIx) -> Vec<NetConn> {
        self.conns
            .iter()
            .filter(|(_, c)| c.dialler.node == node || c.acceptor.node == node)
            .map(|(&k, _)| k)
            .collect()
    }

    /// Connections still open or draining.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether no connection remains.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }
}

fn side_of(c: &Connection, end: End) -> Option<usize> {
    if c.dialler == end {
        Some(0)
    } else if c.acceptor == end {
        Some(1)
    } else {
        None
    }
}
