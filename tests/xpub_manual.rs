//! What zmesh's fanout publisher relies on in libzmq's `ZMQ_XPUB_MANUAL` mode (WIRE.md §7.5),
//! checked on real sockets: libzmq applies no subscription by itself, so a subscriber
//! receives nothing until the publisher applied its subscription; a subscription applied
//! right after reading it applies to the connection that sent it; a connection that ends
//! hands back, as unsubscriptions, exactly the subscriptions it sent, so counts kept from the
//! messages return to zero; and a subscription read after its sender left applies to nothing
//! (libzmq 4.3.4 needs zmesh's fix for that, `vendor/zeromq-src/README.md`).

use std::time::{Duration, Instant};

/// Upper bound of every wait.
const STEP: Duration = Duration::from_secs(10);

/// An XPUB in manual mode bound to a fresh tcp endpoint, and the endpoint.
fn manual_xpub(ctx: &zmq::Context) -> (zmq::Socket, String) {
    let p = ctx.socket(zmq::XPUB).expect("xpub");
    p.set_xpub_manual(true).expect("manual");
    p.set_linger(0).expect("linger");
    p.bind("tcp://127.0.0.1:*").expect("bind");
    let ep = p.get_last_endpoint().expect("endpoint").expect("utf-8");
    (p, ep)
}

/// A SUB connected to `ep`, subscribed to each of `prefixes`.
fn sub(ctx: &zmq::Context, ep: &str, prefixes: &[&[u8]]) -> zmq::Socket {
    let s = ctx.socket(zmq::SUB).expect("sub");
    s.set_linger(0).expect("linger");
    for p in prefixes {
        s.set_subscribe(p).expect("subscribe");
    }
    s.connect(ep).expect("connect");
    s
}

/// Reads subscription messages from `p` until `n` arrived; with `apply`, applies each right
/// after reading it. Returns them as (subscribe?, prefix).
fn read_subscriptions(p: &zmq::Socket, n: usize, apply: bool) -> Vec<(bool, Vec<u8>)> {
    let end = Instant::now() + STEP;
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            Instant::now() < end,
            "only {out:?} of {n} subscription messages"
        );
        match p.recv_bytes(zmq::DONTWAIT) {
            Ok(m) => {
                let (op, prefix) = m.split_first().expect("a subscription message");
                let subscribe = *op == 1;
                if apply {
                    if subscribe {
                        p.set_subscribe(prefix).expect("apply");
                    } else {
                        p.set_unsubscribe(prefix).expect("apply");
                    }
                }
                out.push((subscribe, prefix.to_vec()));
            }
            Err(zmq::Error::EAGAIN) => {
                let _ = p.poll(zmq::POLLIN, 10);
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    out
}

/// Whether `s` receives a message within `wait`.
fn receives(s: &zmq::Socket, wait: Duration) -> bool {
    s.poll(zmq::POLLIN, wait.as_millis() as i64).expect("poll") > 0 && s.recv_multipart(0).is_ok()
}

/// Publishes `topic` a few times over `wait` (a subscription may reach the publisher a
/// little later than the connection).
fn publish_for(p: &zmq::Socket, wait: Duration) {
    let end = Instant::now() + wait;
    while Instant::now() < end {
        p.send("t", 0).expect("send");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// MISSION X3: a subscriber of a manual XPUB receives nothing until the publisher applied
/// its subscription, then everything; each connection's subscriptions come back as
/// unsubscriptions when it closes, so counts kept from the messages return to zero.
#[test]
fn x3_manual_xpub_applies_nothing_by_itself_and_hands_back_what_each_connection_sent() {
    let ctx = zmq::Context::new();
    let (p, ep) = manual_xpub(&ctx);
    let marker: &[u8] = b"\x01ZLF1\x00pubpack";
    let plain = sub(&ctx, &ep, &[b""]);
    // Not read, so not applied: nothing reaches the subscriber.
    std::thread::sleep(Duration::from_millis(200));
    publish_for(&p, Duration::from_millis(200));
    assert!(!receives(&plain, Duration::from_millis(200)));
    assert_eq!(read_subscriptions(&p, 1, true), vec![(true, vec![])]);
    p.send("t", 0).expect("send");
    assert!(receives(&plain, STEP), "applied: the record arrives");
    let both = sub(&ctx, &ep, &[b"", marker]);
    let got = read_subscriptions(&p, 2, true);
    assert_eq!(got, vec![(true, vec![]), (true, marker.to_vec())]);
    p.send("t", 0).expect("send");
    assert!(receives(&both, STEP));
    // Each close hands back what that connection sent, and only that.
    let count = |msgs: &[(bool, Vec<u8>)], n: &mut i64| {
        for (subscribe, _) in msgs {
            *n += if *subscribe { 1 } else { -1 };
        }
    };
    let mut n = 3;
    drop(plain);
    let back = read_subscriptions(&p, 1, true);
    assert_eq!(back, vec![(false, vec![])]);
    count(&back, &mut n);
    drop(both);
    let mut back = read_subscriptions(&p, 2, true);
    back.sort();
    assert_eq!(back, vec![(false, vec![]), (false, marker.to_vec())]);
    count(&back, &mut n);
    assert_eq!(n, 0, "the counts return to zero");
}

/// MISSION X3: a subscription read after its subscriber left applies to nothing: a
/// subscriber that connects afterwards still receives nothing until its own subscription is
/// applied. (In libzmq 4.3.4 as released the late subscription put the freed connection into
/// the subscription trie, where a new connection allocated at the same address could inherit
/// it, and every send touched freed memory.)
#[test]
fn x3_subscription_of_a_subscriber_that_left_applies_to_nothing() {
    let ctx = zmq::Context::new();
    let (p, ep) = manual_xpub(&ctx);
    for _ in 0..5 {
        let gone = sub(&ctx, &ep, &[b""]);
        // Let the publisher take in the connection and its subscription, unread.
        let end = Instant::now() + STEP;
        while !p.get_events().expect("events").contains(zmq::POLLIN) {
            assert!(Instant::now() < end, "no subscription arrived");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(gone);
        // The connection ends while its subscription waits unread; then a new one arrives.
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..10 {
            let _ = p.get_events();
            std::thread::sleep(Duration::from_millis(5));
        }
        let late = sub(&ctx, &ep, &[b""]);
        std::thread::sleep(Duration::from_millis(100));
        // The departed subscriber's subscription, applied as it is read, and its
        // unsubscription.
        let got = read_subscriptions(&p, 2, true);
        assert_eq!(got, vec![(true, vec![]), (false, vec![])]);
        publish_for(&p, Duration::from_millis(100));
        assert!(
            !receives(&late, Duration::from_millis(100)),
            "the late subscriber received a record before its subscription was applied"
        );
        let got = read_subscriptions(&p, 1, true);
        assert_eq!(got, vec![(true, vec![])]);
        p.send("t", 0).expect("send");
        assert!(receives(&late, STEP));
        drop(late);
        assert_eq!(read_subscriptions(&p, 1, true), vec![(false, vec![])]);
    }
}
