//! The target dials (a RouteMesh lane of a configured peer, or a ClientServer server): the
//! runner binds the endpoint with the bound routing id of §5.4 and plays the acceptor. It
//! checks the target's HELLO and routing id, that a CLOSE and a REJECT make it close the
//! connection and dial again on a new one (§5.1), then liveness on a ready connection (§5.2).

use std::time::{Duration, Instant};

use zmesh::proto::wire::{CloseReason, Detail, Hello, Lane, Record, Reject, RejectReason};

use super::link::{random_nz, welcome, Bound, Wire};
use super::{liveness, Outcome, Report, Target};

/// Longest wait for the target's first HELLO (it may be in a reconnect backoff).
const FIRST_HELLO: Duration = Duration::from_secs(20);
/// Longest wait for a dial again after a CLOSE or REJECT (zmesh: 100 ms .. 2 s backoff).
const REDIAL: Duration = Duration::from_secs(6);

/// The next first record of a connection not seen before: its routing id, the HELLO (or
/// what came instead), its arrival.
fn new_connection(
    bound: &Bound,
    seen: &mut Vec<Vec<u8>>,
    limit: Duration,
) -> Option<(Vec<u8>, Result<Hello, String>, Instant)> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let (route, frames) = bound.recv_any(left)?;
        if seen.contains(&route) {
            continue;
        }
        seen.push(route.clone());
        let got = match Record::decode(&frames) {
            Ok(Record::Hello(h)) => Ok(h),
            Ok(other) => Err(format!("first record {}", other.kind().name())),
            Err(e) => Err(format!("first record malformed: {}", e.class())),
        };
        return Some((route, got, Instant::now()));
    }
}

/// Whether the connection of `route` is gone from `bound` within `limit` (a send to it
/// fails: `ROUTER_MANDATORY`).
fn gone(bound: &Bound, route: &[u8], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let ack = Record::Ack {
        id: std::num::NonZeroU64::MAX,
    }
    .encode();
    loop {
        if bound.conn(route.to_vec()).send(&ack).is_err() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        // Drain what the old connection may still send, then look again.
        let _ = bound.recv_any(Duration::from_millis(50));
    }
}

/// The rules checked after the first HELLO, in order: each needs the connection the one
/// before it leaves.
const LATER: [&str; 8] = [
    "5.1/close-received",
    "5.1/reject-received",
    "5.2/first-probe-at-ready",
    "5.2/ack-echoes-id",
    "5.2/probe-interval",
    "5.2/pending-id-resent",
    "5.2/new-id-after-ack",
    "5.2/duplicate-ack-harmless",
];

/// Skips every rule of a dialling target, for `why`.
fn skip_all(t: &Target, r: &mut Report, why: &str) {
    for id in ["5.1/hello-first", "5.4/routing-id"]
        .iter()
        .chain(LATER.iter())
    {
        r.skip(id, why.to_owned());
    }
    if t.args.long {
        r.skip("5.2/deadline", why.to_owned());
    }
}

/// The checks of one lane the target dials at `ep`.
pub fn run(t: &Target, ep: &str, lane: Lane) -> Vec<Outcome> {
    let role = match lane {
        Lane::Application => "route-mesh acceptor (app)",
        Lane::Completion => "route-mesh acceptor (comp)",
        Lane::ClientServer => "client-server server",
    };
    let mut r = Report::new(role);
    let ctx = zmq::Context::new();
    let bound = match Bound::bind(&ctx, ep, lane) {
        Ok(b) => b,
        Err(e) => {
            skip_all(t, &mut r, &e);
            return r.outcomes;
        }
    };
    let gen = random_nz();
    let mut d = Accepting {
        t,
        bound: &bound,
        lane,
        me: t.args.runner_rid.clone(),
        seen: Vec::new(),
    };
    let identity = t.runner_identity();

    // The first HELLO.
    let Some((route, hello, _)) = new_connection(&bound, &mut d.seen, FIRST_HELLO) else {
        skip_all(t, &mut r, "the target did not dial within 20 s");
        return r.outcomes;
    };
    d.hello_first(&route, &hello, &mut r);
    let welcome = welcome(lane, &d.me, gen, &identity);
    let Some(route) = d.close_received(route, &welcome, &mut r) else {
        return r.outcomes;
    };
    let Some(route) = d.reject_received(route, &mut r) else {
        return r.outcomes;
    };

    // Admit it and check its probing.
    let conn = bound.conn(route);
    if conn.send(&welcome).is_err() {
        for id in &LATER[2..] {
            r.skip(id, "the WELCOME could not be sent");
        }
        return r.outcomes;
    }
    let ready_at = Instant::now();
    liveness::check(&mut r, &conn, None, ready_at, false, t.args.long);
    r.outcomes
}

/// The runner as the acceptor of one lane the target dials: its bound socket, its RID, and
/// the routing ids of the connections seen so far.
struct Accepting<'a> {
    t: &'a Target,
    bound: &'a Bound,
    lane: Lane,
    me: String,
    seen: Vec<Vec<u8>>,
}

impl Accepting<'_> {
    /// Whether a first record is a HELLO as the target should send it: of this lane,
    /// expecting the runner's RID or none, from the `--rid` given; what it was, or what is
    /// wrong with it.
    fn check_hello(&self, h: &Result<Hello, String>) -> Result<String, String> {
        let (t, lane, me) = (self.t, self.lane, &self.me);
        let h = h.clone()?;
        let mut bad = Vec::new();
        if h.lane != lane {
            bad.push(format!("lane {:?}", h.lane));
        }
        if let Some(e) = &h.expect_rid {
            if e.as_str() != me {
                bad.push(format!("expects RID {:?}, not {me:?}", e.as_str()));
            }
        }
        if let Some(rid) = &t.args.rid {
            if h.rid.as_str() != rid {
                bad.push(format!("RID {:?}, not {rid:?}", h.rid.as_str()));
            }
        }
        if bad.is_empty() {
            Ok(format!(
                "HELLO from {:?}, lane {:?}",
                h.rid.as_str(),
                h.lane
            ))
        } else {
            Err(bad.join(", "))
        }
    }

    /// 5.1/hello-first and 5.4/routing-id, on the first connection.
    fn hello_first(&self, route: &[u8], hello: &Result<Hello, String>, r: &mut Report) {
        match self.check_hello(hello) {
            Ok(d) => r.pass("5.1/hello-first", d),
            Err(e) => r.fail("5.1/hello-first", e),
        }
        let id_ok = !route.is_empty() && route.len() <= 255 && route[0] != 0;
        r.check(
            "5.4/routing-id",
            id_ok,
            format!(
                "routing id of {} bytes, {:02x?}",
                route.len(),
                &route[..route.len().min(4)]
            ),
        );
    }

    /// 5.1/close-received: admits the connection of `route`, lets it probe once, then sends
    /// CLOSE: the target must close it and dial again. The new connection's routing id, or
    /// `None` with the rules after it skipped.
    fn close_received(
        &mut self,
        route: Vec<u8>,
        welcome: &[Vec<u8>],
        r: &mut Report,
    ) -> Option<Vec<u8>> {
        let bound = self.bound;
        let conn = bound.conn(route.clone());
        if conn.send(welcome).is_err() {
            for id in LATER {
                r.skip(id, "the WELCOME could not be sent");
            }
            return None;
        }
        if let Some(frames) = conn.recv(Duration::from_secs(2)) {
            if let Ok(Record::Probe { id }) = Record::decode(&frames) {
                let _ = conn.send(&Record::Ack { id }.encode());
            }
        }
        let close = Record::Close {
            reason: CloseReason::Shutdown,
        };
        let _ = conn.send(&close.encode());
        let closed = gone(bound, &route, Duration::from_secs(3));
        let again = new_connection(bound, &mut self.seen, REDIAL);
        let detail = format!(
            "old connection {}, {}",
            if closed {
                "closed"
            } else {
                "still open 3 s later"
            },
            match &again {
                Some((_, h, _)) => match self.check_hello(h) {
                    Ok(_) => "a new connection with a new routing id and HELLO".to_owned(),
                    Err(e) => format!("a new connection, but: {e}"),
                },
                None => "no new connection within 6 s".to_owned(),
            }
        );
        r.check(
            "5.1/close-received",
            closed
                && again
                    .as_ref()
                    .is_some_and(|a| self.check_hello(&a.1).is_ok()),
            detail,
        );
        let Some((route, _, _)) = again else {
            for id in &LATER[1..] {
                r.skip(id, "the target did not dial again");
            }
            return None;
        };
        Some(route)
    }

    /// 5.1/reject-received: REJECTs the connection of `route`: the target must close it and
    /// dial again. The new connection's routing id, or `None` with the rules after it skipped.
    fn reject_received(&mut self, route: Vec<u8>, r: &mut Report) -> Option<Vec<u8>> {
        let bound = self.bound;
        let reject = Record::Reject(Reject {
            reason: RejectReason::IdentityMismatch,
            detail: Detail::new("zmesh conform: refused on purpose").unwrap_or_default(),
        });
        let _ = bound.conn(route.clone()).send(&reject.encode());
        let closed = gone(bound, &route, Duration::from_secs(3));
        let again = new_connection(bound, &mut self.seen, REDIAL);
        r.check(
            "5.1/reject-received",
            closed && again.as_ref().is_some_and(|a| a.1.is_ok()),
            format!(
                "old connection {}, {}",
                if closed {
                    "closed"
                } else {
                    "still open 3 s later"
                },
                if again.is_some() {
                    "dialled again"
                } else {
                    "no new connection within 6 s"
                }
            ),
        );
        let Some((route, _, _)) = again else {
            for id in &LATER[2..] {
                r.skip(id, "the target did not dial again");
            }
            return None;
        };
        Some(route)
    }
}
