//! L3: a sans-IO node pair over a simulated link: probes, ACKs and beacons never reach the
//! application.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use zmesh::proto::liveness::{
    BeaconSchedule, Delivery, FanoutInput, ProbeEvent, ProbeIdSource, ProbeTracker, PublisherEvent,
    PublisherWatch, PEER_DEADLINE,
};
use zmesh::proto::ConnId;

use super::{ms, secs};

/// What travels on the simulated link. Liveness frames and application frames share it, as
/// probes and ACKs share the Application lane with data (seed 002 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Probe(u64),
    Ack(u64),
    App(u32),
    Beacon,
    Record(u32),
}

/// One direction of a link: constant latency (so FIFO), deterministic loss (every
/// `drop_every`-th frame), and partition windows during which everything is lost.
struct Wire {
    latency: Duration,
    drop_every: u64,
    partitions: Vec<(Instant, Instant)>,
    in_flight: VecDeque<(Instant, Frame)>,
    sent: u64,
    lost: u64,
}

impl Wire {
    fn new(latency: Duration, drop_every: u64) -> Self {
        Self {
            latency,
            drop_every,
            partitions: Vec::new(),
            in_flight: VecDeque::new(),
            sent: 0,
            lost: 0,
        }
    }

    fn send(&mut self, now: Instant, frame: Frame) {
        self.sent += 1;
        let dropped = self.drop_every != 0 && self.sent.is_multiple_of(self.drop_every);
        let partitioned = self.partitions.iter().any(|&(a, b)| a <= now && now < b);
        if dropped || partitioned {
            self.lost += 1;
        } else {
            self.in_flight.push_back((now + self.latency, frame));
        }
    }

    fn next_arrival(&self) -> Option<Instant> {
        self.in_flight.front().map(|&(at, _)| at)
    }

    fn pop_due(&mut self, now: Instant) -> Option<Frame> {
        if self.next_arrival()? <= now {
            self.in_flight.pop_front().map(|(_, frame)| frame)
        } else {
            None
        }
    }
}

/// One node's view of the pair: its tracker for its side of the connection, what reached its
/// application, and optionally a fanout publisher (A) or subscriber (B).
struct Node {
    conn: ConnId,
    tracker: ProbeTracker,
    application: Vec<Frame>,
    verdict: Option<(Instant, ProbeEvent)>,
    beacons: Option<BeaconSchedule>,
    watch: Option<PublisherWatch>,
    watch_events: Vec<(Instant, PublisherEvent)>,
}

impl Node {
    fn new(conn: ConnId, seed: u64, now: Instant) -> Self {
        Self {
            conn,
            tracker: ProbeTracker::new(conn, now, ProbeIdSource::new(seed)),
            application: Vec::new(),
            verdict: None,
            beacons: None,
            watch: None,
            watch_events: Vec::new(),
        }
    }

    /// The receive path of the shell: internal signals are handled here and only
    /// application frames reach `application`.
    fn receive(&mut self, frame: Frame, now: Instant, back: &mut Wire) {
        match frame {
            // Answer by echoing the id; the receiver's own tracker is not involved.
            Frame::Probe(id) => back.send(now, Frame::Ack(id)),
            Frame::Ack(id) => {
                let _ = self.tracker.handle_ack(self.conn, id, now);
            }
            Frame::App(_) => {
                self.tracker.handle_app_traffic(now);
                self.application.push(frame);
            }
            Frame::Beacon | Frame::Record(_) => {
                let input = if frame == Frame::Beacon {
                    FanoutInput::Beacon
                } else {
                    FanoutInput::Record
                };
                let Some(watch) = self.watch.as_mut() else {
                    return;
                };
                if watch.handle_input(input, now) == Delivery::Deliver {
                    self.application.push(frame);
                }
            }
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        [
            self.tracker.poll_timeout(),
            self.beacons.as_ref().and_then(BeaconSchedule::poll_timeout),
            self.watch.as_ref().and_then(PublisherWatch::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn on_time(&mut self, now: Instant, out: &mut Wire, fanout: &mut Wire) {
        self.tracker.handle_timeout(now);
        if let Some(watch) = self.watch.as_mut() {
            watch.handle_timeout(now);
            while let Some(event) = watch.poll_event() {
                self.watch_events.push((now, event));
            }
        }
        while let Some(id) = self.tracker.poll_transmit(now) {
            out.send(now, Frame::Probe(id));
        }
        if let Some(beacons) = self.beacons.as_mut() {
            if beacons.poll_transmit(now) {
                fanout.send(now, Frame::Beacon);
            }
        }
        if let Some(event) = self.tracker.poll_event() {
            self.verdict = Some((now, event));
        }
    }
}

/// Two nodes, a bidirectional RouteMesh-like link and a one-way fanout link from A to B.
struct Pair {
    now: Instant,
    a: Node,
    b: Node,
    ab: Wire,
    ba: Wire,
    fanout: Wire,
}

impl Pair {
    fn next_wakeup(&self) -> Option<Instant> {
        [
            self.a.next_timer(),
            self.b.next_timer(),
            self.ab.next_arrival(),
            self.ba.next_arrival(),
            self.fanout.next_arrival(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Jumps from wake-up to wake-up until `end` (or until nothing is left to do).
    fn drive_until(&mut self, end: Instant) {
        while let Some(next) = self.next_wakeup().filter(|&t| t <= end) {
            self.now = next;
            let now = next;
            while let Some(frame) = self.ab.pop_due(now) {
                self.b.receive(frame, now, &mut self.ba);
            }
            while let Some(frame) = self.ba.pop_due(now) {
                self.a.receive(frame, now, &mut self.ab);
            }
            while let Some(frame) = self.fanout.pop_due(now) {
                self.b.receive(frame, now, &mut self.ba);
            }
            self.a.on_time(now, &mut self.ab, &mut self.fanout);
            self.b.on_time(now, &mut self.ba, &mut self.fanout);
        }
        self.now = end;
    }
}

/// L3 (with L2, L4, L5): probes, ACKs and beacons never reach the application. Two sans-IO
/// nodes run liveness for five minutes over a lossy link with no application traffic: their
/// application lists stay empty while thousands of liveness frames flow. A positive control
/// shows the same harness does deliver application frames. Then a partition makes both
/// sides not-ready exactly 15 s after their last valid ACK, and the subscriber's publisher
/// not-ready 15 s after its last beacon - still without a single application delivery.
#[test]
fn l3_probes_acks_and_beacons_never_reach_the_application() {
    let t0 = Instant::now();
    let mut a = Node::new(ConnId(100), 1, t0);
    a.beacons = Some(BeaconSchedule::new(t0));
    let mut b = Node::new(ConnId(200), 2, t0);
    b.watch = Some(PublisherWatch::new(t0));
    let mut pair = Pair {
        now: t0,
        a,
        b,
        ab: Wire::new(ms(30), 7),
        ba: Wire::new(ms(30), 7),
        fanout: Wire::new(ms(5), 0),
    };
    let partition = (t0 + secs(301), t0 + secs(400));
    pair.ab.partitions.push(partition);
    pair.ba.partitions.push(partition);
    pair.fanout.partitions.push(partition);

    // Five minutes of liveness only, with every 7th frame lost in each direction.
    pair.drive_until(t0 + secs(300));
    assert!(pair.a.application.is_empty() && pair.b.application.is_empty());
    assert_eq!(pair.a.verdict, None);
    assert_eq!(pair.b.verdict, None);
    assert!(pair.b.watch.as_ref().is_some_and(PublisherWatch::is_ready));
    assert!(pair.ab.lost > 0 && pair.ba.lost > 0, "loss was injected");
    for node in [&pair.a, &pair.b] {
        let stats = node.tracker.stats();
        // One probe per 5 s cycle from 0 s to 300 s, new or resent.
        assert_eq!(stats.probes_sent + stats.probes_resent, 61, "{stats:?}");
        assert!(
            stats.probes_resent > 0,
            "lost probes were resent: {stats:?}"
        );
        assert!(stats.acks_accepted >= 40, "{stats:?}");
        assert_eq!(stats.app_receives, 0);
    }
    let watch_stats = pair.b.watch.as_ref().map(|w| *w.stats());
    // Beacons sent at 0 s, 5 s, ..., 295 s have arrived (the one sent at 300 s is in flight).
    assert_eq!(watch_stats.map(|s| (s.beacons, s.records)), Some((60, 0)));

    // Positive control: application frames do reach the application, on both paths.
    pair.ab.send(pair.now, Frame::App(1));
    pair.fanout.send(pair.now, Frame::Record(2));
    pair.drive_until(t0 + ms(300_500));
    assert_eq!(pair.b.application, vec![Frame::Record(2), Frame::App(1)]);

    // Partition from 301 s: both trackers die exactly 15 s after their last accepted ACK.
    pair.drive_until(t0 + secs(340));
    for node in [&pair.a, &pair.b] {
        let Some(last_ack) = node.tracker.last_ack_at() else {
            panic!("acks were accepted");
        };
        assert!(last_ack < partition.0 + pair.ab.latency);
        assert_eq!(
            node.verdict,
            Some((
                last_ack + PEER_DEADLINE,
                ProbeEvent::DeadlineExceeded {
                    conn: node.conn,
                    last_ack_at: Some(last_ack)
                }
            ))
        );
    }
    let last_beacon = pair
        .b
        .watch
        .as_ref()
        .and_then(PublisherWatch::last_receive_at);
    let Some(last_beacon) = last_beacon else {
        panic!("beacons arrived");
    };
    assert_eq!(
        pair.b.watch_events.last(),
        Some(&(
            last_beacon + PEER_DEADLINE,
            PublisherEvent::Silence {
                last_receive_at: Some(last_beacon)
            }
        ))
    );
    assert!(pair.a.application.is_empty());
    assert_eq!(pair.b.application, vec![Frame::Record(2), Frame::App(1)]);
}
