//! The transport contract (`zmesh::runtime::transport`, its module docs), written once over
//! the traits and run against each implementation: libzmq over tcp and ipc
//! (`tests/transport_contract.rs`) and the simulated network
//! (`zmesh-sim/tests/transport_contract.rs`), each of which includes this file and expands
//! [`transport_contract!`] with its [`Harness`].
//!
//! Every wait goes through [`until`]: the condition is checked, and if it does not hold the
//! harness lets the network move ([`Harness::pump`]: libzmq waits on the watched sockets'
//! readiness for at most a few milliseconds; the simulator runs one round, or jumps to its
//! next timer) and says when it has waited as long as it will, which fails the test. No
//! test sleeps.
//!
//! Sockets whose close nobody confirms (bound, SUB) are closed through
//! [`Transport::close_stopping_monitor`]; dialled ROUTERs and DEALERs through
//! [`TransportSocket::close`], their monitor kept until it reported `Stopped` ([`close_dialled`]),
//! as the node does.

use zmesh::runtime::security::KeyPair;
use zmesh::runtime::socket::HWM;
use zmesh::runtime::transport::{
    Opened, RouterNotices, SocketEvent, SocketKind, SocketRole, SocketSendError, Transport,
    TransportMonitor, TransportSocket,
};

/// A socket of harness `H`'s transport.
pub type Sock<H> = <<H as Harness>::T as Transport>::Socket;
/// A monitor of harness `H`'s transport.
pub type Mon<H> = <<H as Harness>::T as Transport>::Monitor;
/// What harness `H` waits on.
pub type Ready<H> = <Sock<H> as TransportSocket>::Readiness;
/// A socket and its monitor.
pub type Pair<H> = Opened<Sock<H>, Mon<H>>;

/// One implementation under test.
pub trait Harness {
    /// The transport.
    type T: Transport;

    /// The transport, to make sockets with.
    fn transport(&mut self) -> &mut Self::T;

    /// An endpoint to bind with a wildcard the transport resolves (`tcp://127.0.0.1:*`).
    fn wildcard(&self) -> String;

    /// An endpoint nobody binds yet, to dial before it is bound and bind later.
    fn unbound(&mut self) -> String;

    /// Starts a wait: its bound counts from now.
    fn start_wait(&mut self);

    /// Lets the network move until something may have changed on `watch`; false once the
    /// wait started by [`Harness::start_wait`] has lasted as long as the harness allows.
    fn pump(&mut self, watch: &[Ready<Self>]) -> bool;
}

/// Expands the contract's tests for a harness made by `$make` (the including file declares
/// this module as `contract`, with `#[macro_use]`).
macro_rules! transport_contract {
    ($make:expr) => {
        #[test]
        fn t1_a_router_prepends_the_peers_routing_id_and_routes_by_it() {
            contract::routing_ids(&mut $make);
        }

        #[test]
        fn t1_records_of_one_connection_keep_their_order() {
            contract::fifo(&mut $make);
        }

        #[test]
        fn c3_a_full_pipe_fails_the_send_at_once_and_queues_nothing() {
            contract::full_pipe(&mut $make);
        }

        #[test]
        fn t3_a_pub_drops_for_a_full_subscriber_and_never_fails() {
            contract::pub_drops(&mut $make);
        }

        #[test]
        fn t3_a_sub_receives_only_what_its_prefixes_match() {
            contract::prefixes(&mut $make);
        }

        #[test]
        fn l6_an_unknown_or_departed_routing_id_is_unreachable() {
            contract::unreachable(&mut $make);
        }

        #[test]
        fn l6_connect_and_the_dialling_peers_close_are_reported_in_order() {
            contract::dialler_events(&mut $make);
        }

        #[test]
        fn l6_the_bound_peers_close_is_reported_to_routers_dealers_and_subs() {
            contract::bound_close_events(&mut $make);
        }

        #[test]
        fn f4_a_dial_to_nobody_is_retried_and_connects_once_bound() {
            contract::retried_dial(&mut $make);
        }

        #[test]
        fn f3_a_stopped_monitor_reports_nothing_more_and_a_close_watch_only_the_close() {
            contract::stopped_monitor(&mut $make);
        }

        #[test]
        fn t3_a_publisher_hands_subscriptions_over_and_applies_them_when_told() {
            contract::publisher(&mut $make);
        }

        #[test]
        fn s1_a_curve_client_that_expects_the_servers_key_connects_and_carries_records() {
            contract::secured(&mut $make);
        }
    };
}

/// Waits until `f` yields, failing the test with `what` when the harness gives up.
pub fn until<H: Harness, R>(
    h: &mut H,
    what: &str,
    watch: &[Ready<H>],
    mut f: impl FnMut() -> Option<R>,
) -> R {
    h.start_wait();
    loop {
        if let Some(r) = f() {
            return r;
        }
        assert!(h.pump(watch), "{what}: not within the harness's bound");
    }
}

fn ready<S: TransportSocket>(s: &S) -> S::Readiness {
    s.readiness().expect("a socket's readiness")
}

fn ready_m<M: TransportMonitor>(m: &M) -> M::Readiness {
    m.readiness().expect("a monitor's readiness")
}

fn bytes<F: AsRef<[u8]>>(record: &[F]) -> Vec<Vec<u8>> {
    record.iter().map(|f| f.as_ref().to_vec()).collect()
}

/// The next record `s` receives.
pub fn recv<H: Harness>(h: &mut H, s: &Sock<H>, what: &str) -> Vec<Vec<u8>> {
    let watch = [ready(s)];
    until(h, what, &watch, || {
        s.try_recv().expect("receive").map(|r| bytes(&r))
    })
}

/// The next event `m` reports.
pub fn event<H: Harness>(h: &mut H, m: &Mon<H>, what: &str) -> SocketEvent {
    let watch = [ready_m(m)];
    until(h, what, &watch, || m.try_event())
}

/// Events `m` reports up to and with the first that `last` accepts.
pub fn events_until<H: Harness>(
    h: &mut H,
    m: &Mon<H>,
    what: &str,
    last: impl Fn(&SocketEvent) -> bool,
) -> Vec<SocketEvent> {
    let mut seen = Vec::new();
    loop {
        let e = event(h, m, what);
        let done = last(&e);
        seen.push(e);
        if done {
            return seen;
        }
    }
}

fn open<H: Harness>(h: &mut H, kind: SocketKind, role: SocketRole<'_>) -> Pair<H> {
    h.transport().socket(kind, role).expect("a socket")
}

/// A bound socket of `kind` with routing id `id`, and the endpoint it bound.
fn bound<H: Harness>(h: &mut H, kind: SocketKind, id: &[u8]) -> (Pair<H>, String) {
    let p = open(
        h,
        kind,
        SocketRole::Bound {
            domain: Some("contract"),
        },
    );
    p.socket.set_routing_id(id).expect("routing id");
    let ep = p.socket.bind(&h.wildcard()).expect("bind");
    assert!(!ep.contains('*'), "the wildcard of {ep} is resolved");
    (p, ep)
}

/// A dialled socket of `kind` with routing id `id`, dialling `ep`.
fn dialled<H: Harness>(h: &mut H, kind: SocketKind, id: &[u8], ep: &str) -> Pair<H> {
    let p = open(h, kind, SocketRole::Dialled);
    p.socket.set_routing_id(id).expect("routing id");
    p.socket.connect(ep).expect("connect");
    p
}

/// A SUB socket subscribed to `prefixes`, dialling `ep`.
fn sub<H: Harness>(h: &mut H, prefixes: &[&[u8]], ep: &str) -> Pair<H> {
    let p = open(h, SocketKind::Sub, SocketRole::Dialled);
    for prefix in prefixes {
        p.socket.subscribe(prefix).expect("subscribe");
    }
    p.socket.connect(ep).expect("connect");
    p
}

/// Closes a dialled ROUTER or DEALER as the node does: its monitor goes once it reported
/// the close (`Stopped`). Returns the events the monitor reported before that and had not
/// been read (the socket's own close adds none).
pub fn close_dialled<H: Harness>(h: &mut H, p: Pair<H>) -> Vec<SocketEvent> {
    let Opened { socket, monitor } = p;
    socket.close();
    let mut seen = events_until(h, &monitor, "the close confirmed", |e| {
        *e == SocketEvent::Stopped
    });
    seen.pop();
    seen
}

/// Closes a bound or SUB socket, its monitor stopped first.
pub fn close_stopping<H: Harness>(p: Pair<H>) -> Vec<SocketEvent> {
    <H::T as Transport>::close_stopping_monitor(p.socket, p.monitor)
}

/// Waits for the monitor's handshake event, with nothing before it but what `allowed`
/// accepts.
fn handshake<H: Harness>(
    h: &mut H,
    m: &Mon<H>,
    what: &str,
    allowed: impl Fn(&SocketEvent) -> bool,
) -> Vec<SocketEvent> {
    let seen = events_until(h, m, what, |e| *e == SocketEvent::HandshakeSucceeded);
    for e in &seen[..seen.len() - 1] {
        assert!(allowed(e), "{what}: unexpected {e:?} before the handshake");
    }
    seen
}

fn assert_unreachable<E: std::fmt::Debug>(sent: Result<(), SocketSendError<E>>) {
    assert!(
        matches!(sent, Err(SocketSendError::Unreachable)),
        "unreachable: {sent:?}"
    );
}

fn seq(record: &[Vec<u8>], at: usize) -> u64 {
    let f = record.get(at).expect("a sequence frame");
    u64::from_be_bytes(f[..8].try_into().expect("eight bytes"))
}

/// ROUTER routing ids both ways, ROUTER-ROUTER and DEALER-ROUTER, and the attach notices.
pub fn routing_ids<H: Harness>(h: &mut H) {
    let (b, ep) = bound::<H>(h, SocketKind::Router, b"B");
    let d = open(h, SocketKind::Router, SocketRole::Dialled);
    d.socket.set_routing_id(b"d1").expect("routing id");
    // Nothing knows "B" before a handshake told it.
    assert_unreachable(d.socket.send(&[b"B", b"early"]));
    d.socket.connect(&ep).expect("connect");
    // The dialling ROUTER may route to "B" once its attach notice says so.
    assert_eq!(recv(h, &d.socket, "d1's attach notice"), [&b"B"[..], b""]);
    d.socket.send(&[b"B", b"hello"]).expect("d1 -> B");
    assert_eq!(recv(h, &b.socket, "B: d1 attached"), [&b"d1"[..], b""]);
    assert_eq!(recv(h, &b.socket, "B: d1's record"), [&b"d1"[..], b"hello"]);
    b.socket.send(&[b"d1", b"back"]).expect("B -> d1");
    assert_eq!(recv(h, &d.socket, "d1: B's answer"), [&b"B"[..], b"back"]);

    let e = dialled::<H>(h, SocketKind::Dealer, b"e", &ep);
    handshake(h, &e.monitor, "e's handshake", |_| false);
    e.socket.send(&[b"hi"]).expect("e -> B");
    assert_eq!(recv(h, &b.socket, "B: e attached"), [&b"e"[..], b""]);
    assert_eq!(recv(h, &b.socket, "B: e's record"), [&b"e"[..], b"hi"]);
    // Readable until read, then not.
    let watch = [ready(&b.socket)];
    b.socket.send(&[b"e", b"yo"]).expect("B -> e");
    assert_eq!(
        recv(h, &e.socket, "e: B's answer"),
        [&b"yo"[..]],
        "no id on a DEALER"
    );
    d.socket.send(&[b"B", b"again"]).expect("d1 -> B");
    until(h, "B readable", &watch, || {
        b.socket.has_input().then_some(())
    });
    assert_eq!(
        b.socket.try_recv().expect("receive").map(|r| bytes(&r)),
        Some(vec![b"d1".to_vec(), b"again".to_vec()])
    );
    assert!(!b.socket.has_input(), "nothing left to read");
    assert_unreachable(b.socket.send(&[b"nobody", b"x"]));
    close_dialled(h, d);
    close_dialled(h, e);
    close_stopping::<H>(b);
}

/// Per-connection order, both ways, with two connections interleaved.
pub fn fifo<H: Harness>(h: &mut H) {
    const N: u64 = 2_000;
    let (b, ep) = bound::<H>(h, SocketKind::Router, b"B");
    let x = dialled::<H>(h, SocketKind::Dealer, b"x", &ep);
    let y = dialled::<H>(h, SocketKind::Dealer, b"y", &ep);
    handshake(h, &x.monitor, "x's handshake", |_| false);
    handshake(h, &y.monitor, "y's handshake", |_| false);
    for i in 0..N {
        x.socket.send(&[&i.to_be_bytes()]).expect("x sends");
        y.socket.send(&[&i.to_be_bytes()]).expect("y sends");
    }
    let mut next = [0u64; 2];
    let mut notices = 0;
    while next != [N, N] {
        let r = recv(h, &b.socket, "B reads x's and y's records");
        if RouterNotices::is_notice(&r) {
            notices += 1;
            continue;
        }
        let who = match r[0].as_slice() {
            b"x" => 0,
            b"y" => 1,
            other => panic!("a record from {other:?}"),
        };
        assert_eq!(seq(&r, 1), next[who], "in order from {}", r[0][0] as char);
        next[who] += 1;
    }
    assert_eq!(notices, 2, "one attach notice each");
    for i in 0..N {
        b.socket.send(&[b"x", &i.to_be_bytes()]).expect("B sends");
    }
    for i in 0..N {
        assert_eq!(seq(&recv(h, &x.socket, "x reads B's records"), 0), i);
    }
    close_dialled(h, x);
    close_dialled(h, y);
    close_stopping::<H>(b);
}

/// Sends `[prefix.., seq, pad]` on `s` until the send fails `Full`; returns how many it took.
fn fill<S: TransportSocket>(s: &S, prefix: &[&[u8]]) -> u64 {
    const MOST: u64 = 2_000_000;
    let pad = [7u8; 1024];
    for i in 0..MOST {
        let n = i.to_be_bytes();
        let mut frames: Vec<&[u8]> = prefix.to_vec();
        frames.push(&n);
        frames.push(&pad);
        match s.send(&frames) {
            Ok(()) => {}
            Err(SocketSendError::Full) => return i,
            Err(e) => panic!("send {i}: {e:?}"),
        }
    }
    panic!("{MOST} records and never Full");
}

/// Reads `n` records of [`fill`] on `s` (after `skip` frames of each), in order, then the
/// marker `end`, which `send_end` is retried until the pipe takes.
fn drain_then_end<H: Harness>(
    h: &mut H,
    s: &Sock<H>,
    skip: usize,
    n: u64,
    mut send_end: impl FnMut() -> Result<(), SocketSendError<<Sock<H> as TransportSocket>::Error>>,
) {
    for i in 0..n {
        let r = recv(h, s, "the records the full pipe took");
        assert_eq!(seq(&r, skip), i, "every record the pipe took, in order");
    }
    let watch = [ready(s)];
    let mut sent = false;
    let r = until(h, "the marker after the records", &watch, || {
        if !sent {
            match send_end() {
                Ok(()) => sent = true,
                Err(SocketSendError::Full) => {}
                Err(e) => panic!("marker: {e:?}"),
            }
        }
        s.try_recv().expect("receive").map(|r| bytes(&r))
    });
    assert_eq!(
        r.last().map(Vec::as_slice),
        Some(&b"end"[..]),
        "the record refused as Full was not queued"
    );
}

/// ROUTER and DEALER: a full pipe fails the send at once; what it took arrives, in order,
/// and the refused record never does.
pub fn full_pipe<H: Harness>(h: &mut H) {
    let hwm = u64::try_from(HWM).expect("HWM");
    let (b, ep) = bound::<H>(h, SocketKind::Router, b"B");
    let d = dialled::<H>(h, SocketKind::Dealer, b"d", &ep);
    handshake(h, &d.monitor, "d's handshake", |_| false);
    assert_eq!(recv(h, &b.socket, "B: d attached"), [&b"d"[..], b""]);

    let took = fill(&b.socket, &[b"d"]);
    assert!(
        took >= hwm,
        "a pipe takes at least its high-water mark: {took}"
    );
    drain_then_end(h, &d.socket, 0, took, || b.socket.send(&[b"d", b"end"]));

    let took = fill(&d.socket, &[]);
    assert!(
        took >= hwm,
        "a pipe takes at least its high-water mark: {took}"
    );
    drain_then_end(h, &b.socket, 1, took, || d.socket.send(&[b"end"]));
    close_dialled(h, d);
    close_stopping::<H>(b);
}

/// Sends `topic` on `p` until `s` receives a record of it (a subscription takes effect once
/// it reached the publisher).
fn sync_sub<H: Harness>(h: &mut H, p: &Sock<H>, s: &Sock<H>, topic: &[u8]) {
    let watch = [ready(s)];
    until(h, "the subscription in effect", &watch, || {
        p.send(&[topic]).expect("PUB sends");
        while let Some(r) = s.try_recv().expect("receive") {
            if r[0].as_ref() == topic {
                return Some(());
            }
        }
        None
    });
}

/// PUB: sends never fail; a subscriber that does not read loses records, and what it gets
/// is in order.
pub fn pub_drops<H: Harness>(h: &mut H) {
    const N: u64 = 60_000;
    let hwm = u64::try_from(HWM).expect("HWM");
    let (p, ep) = bound::<H>(h, SocketKind::Pub, b"P");
    let s = sub::<H>(h, &[b""], &ep);
    sync_sub(h, &p.socket, &s.socket, b"sync");
    let pad = [7u8; 1024];
    for i in 0..N {
        p.socket
            .send(&[b"data", &i.to_be_bytes(), &pad])
            .expect("a PUB never fails a send");
    }
    let watch = [ready(&s.socket)];
    let mut got: Vec<u64> = Vec::new();
    // Records of the pipe besides the data: a `sync` sent before the data may be among them.
    let mut others = 0;
    until(h, "the subscriber drained", &watch, || {
        p.socket.send(&[b"end"]).expect("PUB sends");
        while let Some(r) = s.socket.try_recv().expect("receive") {
            match r[0].as_ref() {
                b"data" => got.push(seq(&bytes(&r), 1)),
                b"end" => return Some(()),
                _ => others += 1,
            }
        }
        None
    });
    assert!(
        (got.len() as u64) < N,
        "a subscriber that did not read lost records ({} of {N} arrived)",
        got.len()
    );
    assert!(
        got.len() as u64 + others >= hwm,
        "its pipe held at least its high-water mark ({} + {others})",
        got.len()
    );
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order");
    close_stopping::<H>(s);
    close_stopping::<H>(p);
}

/// The topics `s` receives until `end`, leaving out `ignored` ones.
fn topics_until<H: Harness>(h: &mut H, s: &Sock<H>, end: &[u8], ignored: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    loop {
        let r = recv(h, s, "a subscribed record");
        let topic = r[0].clone();
        if topic == end {
            return seen;
        }
        if !ignored.contains(&topic.as_slice()) {
            seen.push(topic);
        }
    }
}

/// SUB: prefix subscriptions, the empty prefix, and a subscription added later.
pub fn prefixes<H: Harness>(h: &mut H) {
    let (p, ep) = bound::<H>(h, SocketKind::Pub, b"P");
    let narrow = sub::<H>(h, &[b"a."], &ep);
    let all = sub::<H>(h, &[b""], &ep);
    sync_sub(h, &p.socket, &narrow.socket, b"a.sync");
    sync_sub(h, &p.socket, &all.socket, b"a.sync");
    for topic in [&b"b.1"[..], b"a.1", b"ab.1", b"a.2", b"a", b"a.end"] {
        p.socket.send(&[topic, b"payload"]).expect("PUB sends");
    }
    assert_eq!(
        topics_until(h, &narrow.socket, b"a.end", &[b"a.sync"]),
        [b"a.1".to_vec(), b"a.2".to_vec()]
    );
    assert_eq!(
        topics_until(h, &all.socket, b"a.end", &[b"a.sync"]),
        [
            b"b.1".to_vec(),
            b"a.1".to_vec(),
            b"ab.1".to_vec(),
            b"a.2".to_vec(),
            b"a".to_vec()
        ]
    );
    narrow.socket.subscribe(b"b.").expect("subscribe");
    sync_sub(h, &p.socket, &narrow.socket, b"b.sync");
    for topic in [&b"c.1"[..], b"b.2", b"b.end"] {
        p.socket.send(&[topic]).expect("PUB sends");
    }
    assert_eq!(
        topics_until(h, &narrow.socket, b"b.end", &[b"a.sync", b"b.sync"]),
        [b"b.2".to_vec()]
    );
    // The publisher filters: records nobody on a connection subscribed to never take room
    // in its pipe, so a subscriber that does not read loses none of its own.
    let hwm = u64::try_from(HWM).expect("HWM");
    for i in 0..3 * hwm {
        p.socket
            .send(&[b"z.", &i.to_be_bytes()])
            .expect("PUB sends");
    }
    for i in 0..100u64 {
        p.socket
            .send(&[b"a.", &i.to_be_bytes()])
            .expect("PUB sends");
    }
    p.socket.send(&[b"a.end"]).expect("PUB sends");
    let mut next = 0;
    loop {
        let r = recv(h, &narrow.socket, "a subscribed record after the others");
        match r[0].as_slice() {
            b"a.end" => break,
            b"a." => {
                assert_eq!(seq(&r, 1), next, "none of its own lost");
                next += 1;
            }
            other => assert!(other.ends_with(b"sync"), "{other:?}"),
        }
    }
    assert_eq!(next, 100);
    close_stopping::<H>(narrow);
    close_stopping::<H>(all);
    close_stopping::<H>(p);
}

/// A bound ROUTER: an id it never had, and one whose connection closed, are unreachable (the
/// disconnect sweep's basis), the latter while its records are still unread; they stay
/// readable.
pub fn unreachable<H: Harness>(h: &mut H) {
    let (b, ep) = bound::<H>(h, SocketKind::Router, b"B");
    assert_unreachable(b.socket.send(&[b"nobody", b"x"]));
    let d = dialled::<H>(h, SocketKind::Router, b"d", &ep);
    assert_eq!(recv(h, &b.socket, "B: d attached"), [&b"d"[..], b""]);
    b.socket.send(&[b"d", b"x"]).expect("B -> d");
    assert_eq!(recv(h, &d.socket, "d: B attached"), [&b"B"[..], b""]);
    d.socket.send(&[b"B", b"unread"]).expect("d -> B");
    d.socket.linger_on_close().expect("linger");
    close_dialled(h, d);
    // B reads nothing meanwhile: d's record and its loss notice wait in its pipe.
    let watch = [ready_m(&b.monitor)];
    until(h, "d unreachable once gone", &watch, || {
        match b.socket.send(&[b"d", b"y"]) {
            Err(SocketSendError::Unreachable) => Some(()),
            Ok(()) | Err(SocketSendError::Full) => {
                while b.monitor.try_event().is_some() {}
                None
            }
            Err(e) => panic!("{e:?}"),
        }
    });
    assert_eq!(
        recv(h, &b.socket, "B: d's last record"),
        [&b"d"[..], b"unread"]
    );
    assert_eq!(recv(h, &b.socket, "B: d's loss"), [&b"d"[..], b""]);
    close_stopping::<H>(b);
}

/// A dialled ROUTER to a bound one: the monitors' handshake events, the attach notices on
/// both sides; then the dialling side's close: its last record, then its loss notice and the
/// bound monitor's disconnect of the same connection.
pub fn dialler_events<H: Harness>(h: &mut H) {
    let (b, ep) = bound::<H>(h, SocketKind::Router, b"B");
    let d = dialled::<H>(h, SocketKind::Router, b"d", &ep);
    assert_eq!(
        handshake(h, &d.monitor, "d's handshake", |_| false),
        [SocketEvent::HandshakeSucceeded]
    );
    let seen = handshake(h, &b.monitor, "B's handshake", |e| {
        matches!(e, SocketEvent::Accepted { .. })
    });
    let [SocketEvent::Accepted { conn }, SocketEvent::HandshakeSucceeded] = seen[..] else {
        panic!("the bound side reports the accept, then the handshake: {seen:?}");
    };
    let (mut on_b, mut on_d) = (RouterNotices::default(), RouterNotices::default());
    let r = recv(h, &b.socket, "B: d's attach");
    assert_eq!(
        on_b.classify(&r),
        Some(SocketEvent::PeerConnected {
            routing_id: b"d".to_vec()
        })
    );
    let r = recv(h, &d.socket, "d: B's attach");
    assert_eq!(
        on_d.classify(&r),
        Some(SocketEvent::PeerConnected {
            routing_id: b"B".to_vec()
        })
    );
    d.socket.send(&[b"B", b"last"]).expect("d -> B");
    d.socket.linger_on_close().expect("linger");
    assert_eq!(
        close_dialled(h, d),
        [],
        "closing a socket reports nothing to its own monitor but its close"
    );
    let r = recv(h, &b.socket, "B: d's last record");
    assert_eq!(on_b.classify(&r), None);
    assert_eq!(r, [&b"d"[..], b"last"]);
    let r = recv(h, &b.socket, "B: d's loss");
    assert_eq!(
        on_b.classify(&r),
        Some(SocketEvent::PeerDisconnected {
            routing_id: b"d".to_vec()
        })
    );
    assert_eq!(
        event(h, &b.monitor, "B: d's disconnect"),
        SocketEvent::Disconnected { conn },
        "the disconnect names the connection the accept named"
    );
    close_stopping::<H>(b);
}

/// The bound side closes: a dialled ROUTER hears it on its monitor and in band, a dialled
/// DEALER and a SUB on their monitors, and each will dial again.
pub fn bound_close_events<H: Harness>(h: &mut H) {
    let (b, ep) = bound::<H>(h, SocketKind::Router, b"B");
    let r = dialled::<H>(h, SocketKind::Router, b"r", &ep);
    let d = dialled::<H>(h, SocketKind::Dealer, b"d", &ep);
    handshake(h, &r.monitor, "r's handshake", |_| false);
    handshake(h, &d.monitor, "d's handshake", |_| false);
    let mut on_r = RouterNotices::default();
    let attach = recv(h, &r.socket, "r: B's attach");
    assert!(matches!(
        on_r.classify(&attach),
        Some(SocketEvent::PeerConnected { .. })
    ));
    let (p, pub_ep) = bound::<H>(h, SocketKind::Pub, b"P");
    let s = sub::<H>(h, &[b""], &pub_ep);
    handshake(h, &s.monitor, "s's handshake", |_| false);

    close_stopping::<H>(b);
    close_stopping::<H>(p);
    for (who, m) in [("r", &r.monitor), ("d", &d.monitor), ("s", &s.monitor)] {
        let seen = events_until(h, m, who, |e| *e == SocketEvent::ConnectRetried);
        assert!(
            matches!(
                seen[..],
                [
                    SocketEvent::Disconnected { .. },
                    SocketEvent::ConnectRetried
                ]
            ),
            "{who}: the disconnect, then a retry: {seen:?}"
        );
    }
    let loss = recv(h, &r.socket, "r: B's loss");
    assert_eq!(
        on_r.classify(&loss),
        Some(SocketEvent::PeerDisconnected {
            routing_id: b"B".to_vec()
        })
    );
    close_dialled(h, r);
    close_dialled(h, d);
    close_stopping::<H>(s);
}

/// A dial to an endpoint nobody binds fails and is retried; a DEALER queues what it sends
/// meanwhile, and it arrives once the endpoint is bound.
pub fn retried_dial<H: Harness>(h: &mut H) {
    let ep = h.unbound();
    let d = dialled::<H>(h, SocketKind::Dealer, b"d", &ep);
    let seen = events_until(h, &d.monitor, "the failed attempt", |e| {
        *e == SocketEvent::ConnectRetried
    });
    assert!(
        matches!(
            seen[..],
            [
                SocketEvent::Disconnected { .. },
                SocketEvent::ConnectRetried
            ]
        ),
        "a failed attempt, then a retry: {seen:?}"
    );
    d.socket
        .send(&[b"queued"])
        .expect("a DEALER queues before its handshake");
    let b = open(
        h,
        SocketKind::Router,
        SocketRole::Bound {
            domain: Some("contract"),
        },
    );
    b.socket.set_routing_id(b"B").expect("routing id");
    assert_eq!(b.socket.bind(&ep).expect("bind"), ep);
    handshake(h, &d.monitor, "the retried dial's handshake", |e| {
        matches!(
            e,
            SocketEvent::Disconnected { .. } | SocketEvent::ConnectRetried
        )
    });
    assert_eq!(recv(h, &b.socket, "B: d attached"), [&b"d"[..], b""]);
    assert_eq!(
        recv(h, &b.socket, "B: d's queued record"),
        [&b"d"[..], b"queued"]
    );
    close_dialled(h, d);
    close_stopping::<H>(b);
}

/// A CURVE server and a CURVE client that expects the server's key: the handshake completes
/// (nothing else before it: a client given another key would fail it) and records pass
/// both ways.
pub fn secured<H: Harness>(h: &mut H) {
    let server = KeyPair::generate().expect("a key pair");
    let client = KeyPair::generate().expect("a key pair");
    let b = open(
        h,
        SocketKind::Router,
        SocketRole::Bound {
            domain: Some("contract"),
        },
    );
    b.socket.set_routing_id(b"B").expect("routing id");
    b.socket.secure_server(&server).expect("a CURVE server");
    let ep = b.socket.bind(&h.wildcard()).expect("bind");
    let d = open(h, SocketKind::Router, SocketRole::Dialled);
    d.socket.set_routing_id(b"d").expect("routing id");
    d.socket
        .secure_client(&client, &server.public)
        .expect("a CURVE client");
    d.socket.connect(&ep).expect("connect");
    handshake(h, &d.monitor, "d's CURVE handshake", |_| false);
    assert_eq!(recv(h, &b.socket, "B: d attached"), [&b"d"[..], b""]);
    assert_eq!(recv(h, &d.socket, "d: B attached"), [&b"B"[..], b""]);
    d.socket.send(&[b"B", b"up"]).expect("d -> B");
    assert_eq!(recv(h, &b.socket, "B: d's record"), [&b"d"[..], b"up"]);
    b.socket.send(&[b"d", b"down"]).expect("B -> d");
    assert_eq!(recv(h, &d.socket, "d: B's record"), [&b"B"[..], b"down"]);
    close_dialled(h, d);
    close_stopping::<H>(b);
}

/// A dialled ROUTER's monitor stopped once its connection attached, as the node does: the
/// stop hands back what the monitor held (its handshake at most), the socket carries records
/// on, and a close watch attached afterwards reports the socket's close and nothing else,
/// though the connection is lost and redialled before the close.
pub fn stopped_monitor<H: Harness>(h: &mut H) {
    let (b, ep) = bound::<H>(h, SocketKind::Router, b"B");
    let Opened { socket, monitor } = dialled::<H>(h, SocketKind::Router, b"d", &ep);
    let mut on_d = RouterNotices::default();
    let r = recv(h, &socket, "d: B's attach");
    assert!(matches!(
        on_d.classify(&r),
        Some(SocketEvent::PeerConnected { .. })
    ));
    let (held, room) = match <H::T as Transport>::stop_monitor(&socket, monitor) {
        Ok(stopped) => stopped,
        Err((e, _)) => panic!("the monitor stops: {e}"),
    };
    assert!(
        held.iter().all(|e| *e == SocketEvent::HandshakeSucceeded) && held.len() <= 1,
        "a stopped monitor hands back what it held: {held:?}"
    );
    socket.send(&[b"B", b"after"]).expect("d -> B");
    assert_eq!(recv(h, &b.socket, "B: d attached"), [&b"d"[..], b""]);
    assert_eq!(recv(h, &b.socket, "B: d's record"), [&b"d"[..], b"after"]);
    let watch = h
        .transport()
        .watch_close(&socket, room)
        .expect("a close watch");
    close_stopping::<H>(b);
    let loss = recv(h, &socket, "d: B's loss");
    assert!(matches!(
        on_d.classify(&loss),
        Some(SocketEvent::PeerDisconnected { .. })
    ));
    socket.close();
    assert_eq!(
        events_until(h, &watch, "d's close", |e| *e == SocketEvent::Stopped),
        [SocketEvent::Stopped],
        "a close watch reports the close alone, not the loss or the redial before it"
    );
}

/// A [`SocketKind::Publisher`] hands a SUB's subscription to its reader and does not apply
/// it: a record sent before the node applied it does not reach the SUB, one sent after does.
pub fn publisher<H: Harness>(h: &mut H) {
    let (p, ep) = bound::<H>(h, SocketKind::Publisher, b"P");
    let s = sub::<H>(h, &[b"a"], &ep);
    let got = recv(h, &p.socket, "P: s's subscription");
    assert_eq!(got, [&b"\x01a"[..]], "a subscription: 1, then the prefix");
    p.socket
        .send(&[b"a", b"before"])
        .expect("a publisher's send");
    p.socket
        .apply_subscription(true, b"a")
        .expect("the subscription applied");
    p.socket
        .send(&[b"a", b"after"])
        .expect("a publisher's send");
    assert_eq!(
        recv(h, &s.socket, "s: the record sent after the apply"),
        [&b"a"[..], b"after"],
        "nothing sent before the apply reaches the subscriber"
    );
    close_stopping::<H>(s);
    close_stopping::<H>(p);
}
