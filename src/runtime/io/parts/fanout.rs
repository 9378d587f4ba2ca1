//! The fanout topology's part of the thread: its own publisher with its XPUB socket, beacon
//! schedule and monitor. The subscriptions this node holds (one SUB socket per publisher,
//! MISSION T3, L5) are the node core's table (`NodeCore::subs`, [`crate::proto::node::sub`]);
//! their sockets, and beacons, are the thread's (`io/fanout.rs`, whose module docs describe
//! the topology).

use std::sync::Arc;

use crate::proto::liveness;
use crate::runtime::outbound::PubSocket;
use crate::runtime::socket::{MonitorEvent, MonitorSocket};
use crate::runtime::transport::TransportMonitor;

/// The fanout topology's part of the thread: its own publisher.
#[derive(Default)]
pub(crate) struct FanoutState {
    /// This node's publisher, if it has a publisher endpoint.
    pub(crate) publisher: Option<Publisher>,
}

/// This node's publisher: its socket, its beacon schedule and what may be waiting on it.
pub(crate) struct Publisher {
    /// The publisher (XPUB) socket, shared with the async side, which publishes on it
    /// directly.
    pub(crate) socket: Arc<PubSocket>,
    /// The endpoint it is bound to (what libzmq bound, for a wildcard).
    pub(crate) endpoint: String,
    /// The beacon schedule in the node's liveness table.
    pub(crate) live: liveness::LinkKey,
    /// Subscription messages may be waiting: read them before sleeping.
    subscriptions: bool,
    /// The socket's monitor (failed transport handshakes); stopped before the socket closes.
    pub(crate) monitor: Option<MonitorSocket>,
    /// Monitor events may be waiting.
    monitor_events: bool,
}

/// Subscription messages read from the publisher's socket per loop turn; more wait for the
/// next turn (a flood of subscriptions cannot starve the loop, and costs one beacon a turn).
const SUBSCRIPTIONS_PER_TURN: usize = 256;

impl Publisher {
    /// The publisher on `socket`, bound to `endpoint`, with its beacon schedule `live`.
    pub(crate) fn new(
        socket: Arc<PubSocket>,
        endpoint: String,
        live: liveness::LinkKey,
        monitor: MonitorSocket,
    ) -> Publisher {
        Publisher {
            socket,
            endpoint,
            live,
            subscriptions: false,
            monitor: Some(monitor),
            monitor_events: false,
        }
    }

    /// Sends the two beacon frames (MISSION L4), on the 5 s grid. The subscriptions are read
    /// in the same turn, so one whose descriptor signal a publish consumed waits no longer
    /// than this.
    pub(crate) fn send_beacon(&mut self) {
        self.socket.beacon();
        self.subscriptions = true;
    }

    /// The socket's descriptor fired: subscriptions may be waiting.
    pub(crate) fn subscriptions_waiting(&mut self) {
        self.subscriptions = true;
    }

    /// True if subscription messages may be waiting. (A publish that asks for a look wakes
    /// the loop itself: [`PubSocket::publish`].)
    pub(crate) fn has_subscriptions(&self) -> bool {
        self.subscriptions
    }

    /// The monitor's descriptor fired: look at its events.
    pub(crate) fn monitor_waiting(&mut self) {
        self.monitor_events = self.monitor.as_ref().is_some_and(|m| m.has_event());
    }

    /// True if monitor events may be waiting.
    pub(crate) fn has_monitor_events(&self) -> bool {
        self.monitor_events
    }

    /// The monitor's events waiting now, with their values.
    pub(crate) fn take_monitor_events(&mut self) -> Vec<(MonitorEvent, u32)> {
        self.monitor_events = false;
        let mut events = Vec::new();
        if let Some(m) = &self.monitor {
            while let Some(ev) = m.try_event() {
                events.extend(ev.monitor_event());
            }
        }
        events
    }

    /// The loop's look at the publisher, when its descriptor fired or a publish asked for
    /// one: sends the records held for a PUBPACK, reads the subscription messages waiting on
    /// the socket (at most [`SUBSCRIPTIONS_PER_TURN`] a turn), applying each, and, if one of
    /// them subscribes to the beacons, sends one beacon at once: a subscriber that joins is
    /// ready in milliseconds instead of at the next tick of the 5 s grid (WIRE.md §7.1). The
    /// schedule is not touched, and nothing read here is a record.
    /// Returns how many messages read were not subscriptions.
    pub(crate) fn read_subscriptions(&mut self) -> usize {
        let asked = self.socket.take_look();
        if !self.subscriptions && !asked {
            return 0;
        }
        let read = self.socket.subscriptions(SUBSCRIPTIONS_PER_TURN);
        self.subscriptions = read.more;
        if read.joined {
            metrics::counter!("zmesh_fanout_join_beacons_total").increment(1);
        }
        read.not_subscriptions
    }
}
