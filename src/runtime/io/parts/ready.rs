//! Socket readiness in O(active) instead of O(all sockets): an epoll set over every libzmq
//! socket's `ZMQ_FD`, and the `ZMQ_EVENTS` rule that keeps an edge from being lost.
//!
//! `zmq::poll` over every socket and monitor costs about 2 us per connection
//! per wake-up (a `poll(2)` over every descriptor plus libzmq's per-socket checks), and an
//! idle node with 1 512 connections wakes about 400 times a second (BENCHMARKS.md, P5). Here
//! each socket's `ZMQ_FD` is registered once in an epoll set (mio), and a wake-up costs the
//! sockets that moved.
//!
//! # The rule
//!
//! `ZMQ_FD` is not a readiness descriptor: it signals that the socket's `ZMQ_EVENTS` may have
//! changed, and any `send`, `recv` or `getsockopt` on the socket processes libzmq's pending
//! commands and can consume that signal without a record being read. So:
//!
//! - every socket whose descriptor fired, and every socket the loop operated on (sent on,
//!   received from, created, drained) since its last check, is **to be checked**: the loop
//!   reads its `ZMQ_EVENTS` ([`Readiness::take_checks`]) before it sleeps again, and after
//!   every wake-up;
//! - a socket whose `ZMQ_EVENTS` said `POLLIN` stays **readable** until a receive on it
//!   returns `EAGAIN` or a later check says no `POLLIN`; both of those process every pending
//!   command, so the next record that arrives signals the descriptor again. For the same
//!   reason a receive that returns `EAGAIN` stands for the check of the operations before it
//!   ([`Readiness::settled_by_receive`]): no `ZMQ_EVENTS` read follows it unless the loop
//!   operates on the socket again.
//!
//! So before every sleep, every socket's last operation was a `ZMQ_EVENTS` check that said
//! "nothing to read", or the socket is in the readable set (and the loop does not sleep while
//! a socket it may read is readable). A record can then never sit in a socket unseen.

use std::cell::RefCell;
use std::io;
use std::os::unix::io::RawFd;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::proto::node::keys::{Key, LinkKey, SlotKey};
use crate::runtime::socket::{MonitorSocket, ZmqSocket};
use crate::runtime::transport::{TransportMonitor, TransportSocket};

/// Events taken from the epoll set per wait; more stay queued for the next wait.
const EVENTS_PER_WAIT: usize = 1024;

/// One registered libzmq socket, named by what it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Watch {
    /// The async side's wake-up ([`crate::runtime::wake::WakeUp`]).
    Wake,
    /// The socket of a slot.
    Socket(SlotKey),
    /// The monitor of a slot.
    Monitor(SlotKey),
    /// The monitor of a link's closed socket, waiting for libzmq to confirm the close.
    Closing(LinkKey),
    /// The node's publisher (XPUB) socket: subscriptions arrived (beacon on join).
    Publisher,
    /// The monitor of the publisher's socket: failed transport handshakes.
    PublisherMonitor,
    /// The node's ZAP handler.
    Zap,
}

impl Watch {
    fn token(self) -> Token {
        Token(match self {
            Watch::Wake => 0,
            Watch::Publisher => 1 << 2,
            Watch::Zap => 2 << 2,
            Watch::PublisherMonitor => 3 << 2,
            Watch::Socket(i) => (i.index() << 2) | 1,
            Watch::Monitor(i) => (i.index() << 2) | 2,
            Watch::Closing(i) => (i.index() << 2) | 3,
        })
    }

    fn from_token(t: Token) -> Watch {
        let i = t.0 >> 2;
        match t.0 & 3 {
            1 => Watch::Socket(SlotKey::from_index(i)),
            2 => Watch::Monitor(SlotKey::from_index(i)),
            3 => Watch::Closing(LinkKey::from_index(i)),
            _ if i == 1 => Watch::Publisher,
            _ if i == 2 => Watch::Zap,
            _ if i == 3 => Watch::PublisherMonitor,
            _ => Watch::Wake,
        }
    }
}

/// A set of small dense keys (slot keys) with its members listed: membership in O(1), and
/// iteration over the members only.
pub(crate) struct KeySet<K = SlotKey> {
    flags: Vec<bool>,
    list: Vec<K>,
}

impl<K> Default for KeySet<K> {
    fn default() -> Self {
        KeySet {
            flags: Vec::new(),
            list: Vec::new(),
        }
    }
}

impl<K: Key + PartialEq> KeySet<K> {
    /// Adds `k`; no effect if present.
    pub(crate) fn insert(&mut self, k: K) {
        let i = k.index();
        if self.flags.len() <= i {
            self.flags.resize(i + 1, false);
        }
        if !self.flags[i] {
            self.flags[i] = true;
            self.list.push(k);
        }
    }

    /// Removes `k`; no effect if absent.
    pub(crate) fn remove(&mut self, k: K) {
        if self.contains(k) {
            self.flags[k.index()] = false;
            if let Some(i) = self.list.iter().position(|x| *x == k) {
                self.list.swap_remove(i);
            }
        }
    }

    /// Whether `k` is a member.
    pub(crate) fn contains(&self, k: K) -> bool {
        self.flags.get(k.index()).copied().unwrap_or(false)
    }

    /// The members, in no particular order.
    pub(crate) fn members(&self) -> &[K] {
        &self.list
    }

    /// Takes every member out.
    pub(crate) fn take(&mut self) -> Vec<K> {
        for k in &self.list {
            self.flags[k.index()] = false;
        }
        std::mem::take(&mut self.list)
    }

    /// True when there are no members.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// The watches due for a `ZMQ_EVENTS` check, each once: a flag per token and the list of
/// members, so that taking them costs the members only.
///
/// (A `HashSet` drained on every wake-up costs its capacity, not its length: after a start
/// that touched thousands of sockets at once, every later wake-up would walk and clear those
/// buckets again.)
#[derive(Default)]
struct Checks {
    flags: Vec<bool>,
    list: Vec<Watch>,
}

impl Checks {
    fn insert(&mut self, w: Watch) {
        let i = w.token().0;
        if self.flags.len() <= i {
            self.flags.resize(i + 1, false);
        }
        if !self.flags[i] {
            self.flags[i] = true;
            self.list.push(w);
        }
    }

    fn remove(&mut self, w: Watch) {
        let i = w.token().0;
        if self.flags.get(i).copied().unwrap_or(false) {
            self.flags[i] = false;
            if let Some(p) = self.list.iter().position(|x| *x == w) {
                self.list.swap_remove(p);
            }
        }
    }

    fn take(&mut self) -> Vec<Watch> {
        for w in &self.list {
            self.flags[w.token().0] = false;
        }
        std::mem::take(&mut self.list)
    }
}

/// The epoll set, the sockets waiting for a `ZMQ_EVENTS` check, and what the checks found:
/// sockets with a record to read, monitors with events, a wake-up of the async side.
pub(crate) struct Readiness {
    poll: Poll,
    events: Events,
    /// Watches to check before the next sleep: touched by the loop, or their descriptor
    /// fired. Interior mutability because sends happen behind `&self` all over the loop.
    checks: RefCell<Checks>,
    /// Sockets with a record to read (their `ZMQ_EVENTS` said so, and no receive has
    /// returned `EAGAIN` since).
    readable: KeySet,
    /// Slots whose monitor has events to read.
    monitors: KeySet,
    /// The async side woke the loop (commands are queued).
    woken: bool,
}

impl Readiness {
    /// An empty epoll set.
    pub(crate) fn new() -> io::Result<Readiness> {
        Ok(Readiness {
            poll: Poll::new()?,
            events: Events::with_capacity(EVENTS_PER_WAIT),
            checks: RefCell::new(Checks::default()),
            readable: KeySet::default(),
            monitors: KeySet::default(),
            woken: false,
        })
    }

    /// A check of socket `k` found a record to read (`input`), or none.
    pub(crate) fn found_socket(&mut self, k: SlotKey, input: bool) {
        if input {
            self.readable.insert(k);
        } else {
            self.readable.remove(k);
        }
    }

    /// A receive on socket `k` found nothing: not readable until its descriptor fires or a
    /// check finds a record.
    pub(crate) fn drained(&mut self, k: SlotKey) {
        self.readable.remove(k);
    }

    /// The sockets with a record to read, in no particular order.
    pub(crate) fn readable(&self) -> &[SlotKey] {
        self.readable.members()
    }

    /// True if socket `k` has a record to read.
    pub(crate) fn is_readable(&self, k: SlotKey) -> bool {
        self.readable.contains(k)
    }

    /// A check of slot `k`'s monitor found events.
    pub(crate) fn found_monitor(&mut self, k: SlotKey) {
        self.monitors.insert(k);
    }

    /// Monitor `k` is drained at the loop's next monitor phase, events or not (and the loop
    /// does not sleep before it): a dialled ROUTER whose connection attached stops its
    /// monitor there, after acting on what the monitor held.
    pub(crate) fn recheck_monitor(&mut self, k: SlotKey) {
        self.monitors.insert(k);
    }

    /// The slots whose monitors have events; none afterwards.
    pub(crate) fn take_monitors(&mut self) -> Vec<SlotKey> {
        self.monitors.take()
    }

    /// True if some monitor has events.
    pub(crate) fn has_monitors(&self) -> bool {
        !self.monitors.is_empty()
    }

    /// Slot `k`'s monitor was stopped or its socket closed: nothing of it is waiting.
    pub(crate) fn forget_monitor(&mut self, k: SlotKey) {
        self.monitors.remove(k);
    }

    /// Slot `k` is given up: nothing of it is waiting.
    pub(crate) fn forget(&mut self, k: SlotKey) {
        self.readable.remove(k);
        self.monitors.remove(k);
    }

    /// A check found the async side's wake-up.
    pub(crate) fn found_wake(&mut self) {
        self.woken = true;
    }

    /// True if the async side woke the loop since the last [`Readiness::take_wake`].
    pub(crate) fn is_woken(&self) -> bool {
        self.woken
    }

    /// Whether the async side woke the loop; cleared.
    pub(crate) fn take_wake(&mut self) -> bool {
        std::mem::take(&mut self.woken)
    }

    /// Registers a socket's `ZMQ_FD` under `w` and marks it to be checked (whatever
    /// happened on the socket before, such as a connect, is then looked at).
    pub(crate) fn register(&self, socket: &impl Descriptor, w: Watch) -> io::Result<()> {
        let fd = socket.descriptor()?;
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), w.token(), Interest::READABLE)?;
        self.touch(w);
        Ok(())
    }

    /// A waker whose wake-ups fire [`Watch::Wake`] in this set.
    pub(crate) fn waker(&self) -> io::Result<mio::Waker> {
        mio::Waker::new(self.poll.registry(), Watch::Wake.token())
    }

    /// Takes a socket's `ZMQ_FD` out of the epoll set; call it before the socket is closed.
    pub(crate) fn deregister(&self, socket: &impl Descriptor) {
        let res = socket
            .descriptor()
            .and_then(|fd| self.poll.registry().deregister(&mut SourceFd(&fd)));
        if let Err(e) = res {
            tracing::debug!(error = %e, "socket not deregistered from the epoll set");
        }
    }

    /// Notes that the loop operated on `w`'s socket: its `ZMQ_EVENTS` must be read before the
    /// loop sleeps, because the operation may have consumed the descriptor's signal.
    pub(crate) fn touch(&self, w: Watch) {
        self.checks.borrow_mut().insert(w);
    }

    /// Notes that a receive on `w`'s socket returned `EAGAIN`: libzmq processed every
    /// pending command of the socket before it said so, as a `ZMQ_EVENTS` check would, and
    /// found nothing to read; that receive is the socket's last operation, so the next record
    /// signals the descriptor again and the check due for earlier operations is not needed.
    /// An operation after this one touches the socket again.
    pub(crate) fn settled_by_receive(&self, w: Watch) {
        self.checks.borrow_mut().remove(w);
    }

    /// True if some socket waits for its check.
    pub(crate) fn has_checks(&self) -> bool {
        !self.checks.borrow().list.is_empty()
    }

    /// The watches to check now (each once); the set is empty afterwards.
    pub(crate) fn take_checks(&self) -> Vec<Watch> {
        self.checks.borrow_mut().take()
    }

    /// Waits until a registered descriptor fires or `timeout` passes (`None`: no limit), and
    /// marks every watch whose descriptor fired to be checked. An interrupted wait is a wait
    /// that saw nothing.
    pub(crate) fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut checks = self.checks.borrow_mut();
        for ev in self.events.iter() {
            checks.insert(Watch::from_token(ev.token()));
        }
        Ok(())
    }
}

/// What the epoll set watches of a transport's socket or monitor: its readiness (libzmq: its
/// `ZMQ_FD`).
pub(crate) trait Descriptor {
    /// The descriptor.
    fn descriptor(&self) -> io::Result<RawFd>;
}

impl Descriptor for ZmqSocket {
    fn descriptor(&self) -> io::Result<RawFd> {
        TransportSocket::readiness(self).map_err(io::Error::from)
    }
}

impl Descriptor for MonitorSocket {
    fn descriptor(&self) -> io::Result<RawFd> {
        TransportMonitor::readiness(self).map_err(io::Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(i: usize) -> SlotKey {
        SlotKey::from_index(i)
    }

    #[test]
    fn tokens_round_trip() {
        for w in [
            Watch::Wake,
            Watch::Publisher,
            Watch::Zap,
            Watch::PublisherMonitor,
            Watch::Socket(slot(0)),
            Watch::Socket(slot(7)),
            Watch::Monitor(slot(0)),
            Watch::Monitor(slot(1234)),
            Watch::Closing(LinkKey::from_index(0)),
            Watch::Closing(LinkKey::from_index(99)),
        ] {
            assert_eq!(Watch::from_token(w.token()), w);
        }
    }

    #[test]
    fn key_set_lists_its_members() {
        let mut s: KeySet = KeySet::default();
        s.insert(slot(5));
        s.insert(slot(2));
        s.insert(slot(5));
        assert!(
            s.contains(slot(5))
                && s.contains(slot(2))
                && !s.contains(slot(3))
                && !s.contains(slot(100))
        );
        assert_eq!(s.members().len(), 2);
        s.remove(slot(5));
        s.remove(slot(100));
        assert_eq!(s.members(), &[slot(2)]);
        assert_eq!(s.take(), vec![slot(2)]);
        assert!(s.is_empty() && !s.contains(slot(2)));
    }

    /// The edge rule on real sockets: a record that arrives while the loop sends on the same
    /// socket is still seen, because the send marks the socket to be checked.
    #[test]
    fn a_record_behind_a_send_is_seen_by_the_check() {
        let ctx = zmq::Context::new();
        let a = ZmqSocket::from_zmq(ctx.socket(zmq::PAIR).unwrap());
        let b = ctx.socket(zmq::PAIR).unwrap();
        a.as_zmq().bind("inproc://ready-test").unwrap();
        b.connect("inproc://ready-test").unwrap();
        let mut r = Readiness::new().unwrap();
        r.register(&a, Watch::Socket(slot(0))).unwrap();
        for w in r.take_checks() {
            assert_eq!(w, Watch::Socket(slot(0)));
            assert!(!a.has_input());
        }
        b.send("one", 0).unwrap();
        r.wait(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(r.take_checks(), vec![Watch::Socket(slot(0))]);
        // A send on `a` processes its commands before the check: the signal is gone, but the
        // socket was touched, so the check still runs and finds the record.
        a.as_zmq().send("x", 0).unwrap();
        r.touch(Watch::Socket(slot(0)));
        assert_eq!(r.take_checks(), vec![Watch::Socket(slot(0))]);
        assert!(a.has_input());
        assert_eq!(a.as_zmq().recv_bytes(0).unwrap(), b"one");
        assert!(!a.has_input());
        // The next record signals the descriptor again.
        b.send("two", 0).unwrap();
        r.wait(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(r.take_checks(), vec![Watch::Socket(slot(0))]);
        assert!(a.has_input());
        r.deregister(&a);
    }
}
