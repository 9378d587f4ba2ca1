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

/// The checks of one lane the target dials at `ep`.
pub fn run(t: &Target, ep: &str, lane: Lane) -> Vec<Outcome> {
    let role = match lane {
        Lane::Application => "route-mesh acceptor (app)",
        Lane::Completion => "route-mesh acceptor (comp)",
        Lane::ClientServer => "client-server server",
    };
    let mut r = Report::new(role);
    let later = [
        "5.1/close-received",
        "5.1/reject-received",
        "5.2/first-probe-at-ready",
        "5.2/ack-echoes-id",
        "5.2/probe-interval",
        "5.2/pending-id-resent",
        "5.2/new-id-after-ack",
        "5.2/duplicate-ack-harmless",
    ];
    let skip_all = |r: &mut Report, why: &str| {
        for id in ["5.1/hello-first", "5.4/routing-id"]
            .iter()
            .chain(later.iter())
        {
            r.skip(id, why.to_owned());
        }
        if t.args.long {
            r.skip("5.2/deadline", why.to_owned());
        }
    };
    let ctx = zmq::Context::new();
    let bound = match Bound::bind(&ctx, ep, lane) {
        Ok(b) => b,
        Err(e) => {
            skip_all(&mut r, &e);
            return r.outcomes;
        }
    };
    let gen = random_nz();
    let me = t.args.runner_rid.clone();
    let identity = t.runner_identity();
    let mut seen = Vec::new();

    // The first HELLO.
    let Some((route, hello, _)) = new_connection(&bound, &mut seen, FIRST_HELLO) else {
        skip_all(&mut r, "the target did not dial within 20 s");
        return r.outcomes;
    };
    let check_hello = |h: &Result<Hello, String>| -> Result<String, String> {
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
    };
    match check_hello(&hello) {
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

    // Admit it, let it probe once, then CLOSE: it must close and dial again.
    let conn = bound.conn(route.clone());
    let welcome = welcome(lane, &me, gen, &identity);
    if conn.send(&welcome).is_err() {
        for id in later {
            r.skip(id, "the WELCOME could not be sent");
        }
        return r.outcomes;
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
    let closed = gone(&bound, &route, Duration::from_secs(3));
    let again = new_connection(&bound, &mut seen, REDIAL);
    let detail = format!(
        "old connection {}, {}",
        if closed {
            "closed"
        } else {
            "still open 3 s later"
        },
        match &again {
            Some((_, h, _)) => match check_hello(h) {
                Ok(_) => "a new connection with a new routing id and HELLO".to_owned(),
                Err(e) => format!("a new connection, but: {e}"),
            },
            None => "no new connection within 6 s".to_owned(),
        }
    );
    r.check(
        "5.1/close-received",
        closed && again.as_ref().is_some_and(|a| check_hello(&a.1).is_ok()),
        detail,
    );
    let Some((route, _, _)) = again else {
        for id in &later[1..] {
            r.skip(id, "the target did not dial again");
        }
        return r.outcomes;
    };

    // REJECT that one: it must close and dial again.
    let reject = Record::Reject(Reject {
        reason: RejectReason::IdentityMismatch,
        detail: Detail::new("zmesh conform: refused on purpose").unwrap_or_default(),
    });
    let _ = bound.conn(route.clone()).send(&reject.encode());
    let closed = gone(&bound, &route, Duration::from_secs(3));
    let again = new_connection(&bound, &mut seen, REDIAL);
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
        for id in &later[2..] {
            r.skip(id, "the target did not dial again");
        }
        return r.outcomes;
    };

    // Admit it and check its probing.
    let conn = bound.conn(route);
    if conn.send(&welcome).is_err() {
        for id in &later[2..] {
            r.skip(id, "the WELCOME could not be sent");
        }
        return r.outcomes;
    }
    let ready_at = Instant::now();
    liveness::check(&mut r, &conn, None, ready_at, false, t.args.long);
    r.outcomes
}
