//! P7's inbound size: RouteMesh peers that dial the node, so that one node holds
//! 10 000 connections under a 20 000 descriptor limit. A connection the node accepts takes
//! it one descriptor (its TCP connection on the shared bound socket), where a connection it
//! dials takes two; the dialled sizes cannot reach 10 000 under that limit.
//!
//! The dialers are two raw ROUTER sockets in the bench process, one per lane, each connecting
//! to the node's bound endpoint once per fake peer: a fresh routing id per connection
//! (`ZMQ_ROUTING_ID` before each connect, in the format of WIRE.md 5.4) and a local name for
//! each (`ZMQ_CONNECT_ROUTING_ID`), so one socket holds them all at one descriptor each. Each
//! connection speaks zmesh records as a dialling node would: HELLO once its handshake is done
//! (`ROUTER_MANDATORY`: the send fails with `EHOSTUNREACH` until then, WIRE.md 5.4), then an
//! ACK to each PROBE and a PROBE of its own every 5 s, phases spread over the 5 s.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Result;
use zmesh::proto::wire::{self, Hello, Label, Lane, Memberships, Name, Record};

use super::idle::{send, send_probe, Worker, PERIOD};

/// Fake RouteMesh peers dialling one node's two bound endpoints.
pub(super) type FakeDialers = Worker<DialerCounters>;

/// What the fake dialers sent and received.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct DialerCounters {
    hellos_sent: u64,
    welcomed: u64,
    rejected: u64,
    probes_answered: u64,
    probes_sent: u64,
    acks_received: u64,
    closed: u64,
}

/// One connection of the fake dialers.
struct Conn {
    lane: usize,
    /// The local name of the connection (`ZMQ_CONNECT_ROUTING_ID`).
    route: Vec<u8>,
    welcomed: bool,
    next_probe: Instant,
}

/// The lanes, in the order of the sockets.
const LANES: [(Lane, u8); 2] = [(Lane::Application, b'A'), (Lane::Completion, b'C')];

/// Starts `peers` fake peers, each dialling `application` and `completion` once.
pub(super) fn dial(peers: usize, application: &str, completion: &str) -> Result<FakeDialers> {
    let ctx = zmq::Context::new();
    let sockets = [ctx.socket(zmq::ROUTER)?, ctx.socket(zmq::ROUTER)?];
    let mut conns = Vec::with_capacity(2 * peers);
    // Each connection's HELLO, by its place in `conns`, until it is sent.
    let mut hellos = Vec::with_capacity(2 * peers);
    let start = Instant::now();
    for (lane, (socket, endpoint)) in sockets.iter().zip([application, completion]).enumerate() {
        socket.set_linger(0)?;
        socket.set_router_mandatory(true)?;
        socket.set_sndhwm(zmesh::runtime::socket::HWM)?;
        socket.set_rcvhwm(zmesh::runtime::socket::HWM)?;
        for peer in 0..peers {
            let route = format!("{}-{peer}", LANES[lane].1 as char).into_bytes();
            socket.set_identity(&routing_id(LANES[lane].1, peer))?;
            socket.set_connect_routing_id(&route)?;
            socket.connect(endpoint)?;
            let k = (2 * peer + lane) as u32;
            let n = (2 * peers).max(1) as u32;
            hellos.push((conns.len(), hello(LANES[lane].0, peer)?));
            conns.push(Conn {
                lane,
                route,
                welcomed: false,
                next_probe: start + PERIOD * (k % n) / n,
            });
        }
    }
    Ok(Worker::spawn("fake dialers", move |st, co| {
        let _ctx = ctx;
        run(&sockets, conns, hellos, st, co)
    }))
}

/// A dialled routing id as zmesh makes them (WIRE.md 5.4): `z`, the lane, a generation and
/// a connection counter (u64 BE each).
fn routing_id(lane: u8, peer: usize) -> Vec<u8> {
    let mut id = vec![b'z', lane];
    id.extend_from_slice(&generation(peer).get().to_be_bytes());
    id.extend_from_slice(&(peer as u64).to_be_bytes());
    id
}

fn generation(peer: usize) -> NonZeroU64 {
    NonZeroU64::new(0xD1A1_0000_0000 + peer as u64 + 1).unwrap_or(NonZeroU64::MIN)
}

fn hello(lane: Lane, peer: usize) -> Result<Vec<Vec<u8>>> {
    let rid = format!("d{peer}");
    Ok(Record::Hello(Hello {
        lane,
        security_identity: Label::new(rid.as_str())?,
        rid: Name::new(rid)?,
        generation: generation(peer),
        expect_rid: None,
        expect_generation: None,
        config_generation: 0,
        memberships: Memberships::new(Vec::new())?,
    })
    .encode())
}

fn run(
    sockets: &[zmq::Socket; 2],
    mut conns: Vec<Conn>,
    mut unsent: Vec<(usize, Vec<Vec<u8>>)>,
    stop: &AtomicBool,
    counters: &std::sync::Mutex<DialerCounters>,
) -> Result<()> {
    // Where a connection is in `conns`, by lane and peer.
    let peers = conns.len() / 2;
    let index = |lane: usize, peer: usize| lane * peers + peer;
    let mut next_id = 1u64;
    while !stop.load(Ordering::Relaxed) {
        let mut c = counters.lock().map_err(|_| anyhow::anyhow!("counters"))?;
        // HELLO on every connection whose handshake is done (the send fails until then).
        unsent.retain(|(i, frames)| {
            let conn = &conns[*i];
            let sent = send(&sockets[conn.lane], &conn.route, frames).is_ok();
            c.hellos_sent += u64::from(sent);
            !sent
        });
        for (lane, socket) in sockets.iter().enumerate() {
            while let Ok(frames) = socket.recv_multipart(zmq::DONTWAIT) {
                let Some((route, rec)) = frames.split_first() else {
                    continue;
                };
                let Some(peer) = std::str::from_utf8(route)
                    .ok()
                    .and_then(|r| r.get(2..))
                    .and_then(|p| p.parse::<usize>().ok())
                else {
                    continue;
                };
                let i = index(lane, peer);
                match Record::decode(rec) {
                    Ok(Record::Welcome(_)) => {
                        if let Some(conn) = conns.get_mut(i) {
                            conn.welcomed = true;
                            c.welcomed += 1;
                        }
                    }
                    Ok(Record::Reject { .. }) => c.rejected += 1,
                    Ok(Record::Probe { id }) => {
                        let ack = [wire::encode_ack(id).to_vec()];
                        c.probes_answered += u64::from(send(socket, route, &ack).is_ok());
                    }
                    Ok(Record::Ack { .. }) => c.acks_received += 1,
                    Ok(Record::Close { .. }) => c.closed += 1,
                    _ => {}
                }
            }
        }
        // Our own probes, each welcomed connection every 5 s (a fresh id each time).
        let now = Instant::now();
        for conn in conns
            .iter_mut()
            .filter(|x| x.welcomed && now >= x.next_probe)
        {
            send_probe(&sockets[conn.lane], &conn.route, &mut next_id);
            while conn.next_probe <= now {
                conn.next_probe += PERIOD;
            }
            c.probes_sent += 1;
        }
        drop(c);
        let wait = if unsent.is_empty() {
            conns
                .iter()
                .filter(|x| x.welcomed)
                .map(|x| x.next_probe)
                .min()
                .map(|t| t.saturating_duration_since(now).as_millis() as i64 + 1)
                .unwrap_or(50)
                .min(50)
        } else {
            1
        };
        let mut items = [
            sockets[0].as_poll_item(zmq::POLLIN),
            sockets[1].as_poll_item(zmq::POLLIN),
        ];
        zmq::poll(&mut items, wait)?;
    }
    Ok(())
}
