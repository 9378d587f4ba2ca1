//! WIRE.md §5.2 on one ready connection, either side of it, in two probe cycles (about 10 s):
//! the first PROBE at ready, ACKs echo ids, the 5 s grid, one pending id resent while no
//! matching ACK came on this connection, a new id after the matching ACK, a duplicate ACK
//! harmless; with `--long` also the 15 s deadline.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use zmesh::proto::wire::{CloseReason, Record};

use super::link::{describe, Wire};
use super::Report;

/// Slices of a wait on the checked connection, between which the other one is served.
const SLICE: Duration = Duration::from_millis(50);

/// The connection under check, and another ready connection to the same target whose PROBEs
/// are answered meanwhile (and which carries the ACK that must not count).
struct Probe<'a> {
    a: &'a dyn Wire,
    other: Option<&'a dyn Wire>,
    /// What else came on `a` (not PROBE/ACK), for the report.
    seen: Vec<String>,
}

impl Probe<'_> {
    /// Answers the other connection's PROBEs, without waiting.
    fn serve_other(&self) {
        if let Some(o) = self.other {
            while let Some(frames) = o.recv(Duration::ZERO) {
                if let Ok(Record::Probe { id }) = Record::decode(&frames) {
                    let _ = o.send(&Record::Ack { id }.encode());
                }
            }
        }
    }

    /// The next record on `a` until `until`, with its arrival instant; malformed messages
    /// are noted and skipped.
    fn read(&mut self, until: Instant) -> Option<(Instant, Record)> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.serve_other();
            let Some(frames) = self.a.recv(left.min(SLICE)) else {
                continue;
            };
            let at = Instant::now();
            match Record::decode(&frames) {
                Ok(r) => return Some((at, r)),
                Err(e) => self.seen.push(format!("malformed: {}", e.class())),
            }
        }
    }

    /// The next PROBE on `a` until `until`; ACKs are skipped, anything else noted.
    fn probe(&mut self, until: Instant) -> Option<(Instant, NonZeroU64)> {
        while let Some((at, r)) = self.read(until) {
            match r {
                Record::Probe { id } => return Some((at, id)),
                Record::Ack { .. } => {}
                other => self.seen.push(describe(&other)),
            }
        }
        None
    }

    /// Sends PROBE `id` on `a` and waits up to 2 s for its ACK; PROBEs of the target that
    /// come meanwhile are returned to the caller.
    fn echo(&mut self, id: NonZeroU64, probes: &mut Vec<(Instant, NonZeroU64)>) -> Option<u64> {
        if self.a.send(&Record::Probe { id }.encode()).is_err() {
            return None;
        }
        let until = Instant::now() + Duration::from_secs(2);
        while let Some((at, r)) = self.read(until) {
            match r {
                Record::Ack { id: got } => return Some(got.get()),
                Record::Probe { id } => probes.push((at, id)),
                other => self.seen.push(describe(&other)),
            }
        }
        None
    }
}

/// Whether two PROBEs or beacons `g` apart are on the 5 s grid (4.5..5.5 s).
pub(crate) fn gap_ok(g: Duration) -> bool {
    g >= Duration::from_millis(4_500) && g <= Duration::from_millis(5_500)
}

/// The rules checked after 5.2/first-probe-at-ready, in order.
const REST: [&str; 5] = [
    "5.2/ack-echoes-id",
    "5.2/probe-interval",
    "5.2/pending-id-resent",
    "5.2/new-id-after-ack",
    "5.2/duplicate-ack-harmless",
];

/// Runs the §5.2 checks on `a`, ready since `ready_at`; `other` is another ready connection
/// of the same target (or none); `acceptor` says whether the target accepted `a` (it then
/// sends CLOSE DeadlineExceeded at its deadline) or dialled it (it closes its socket).
pub fn check(
    r: &mut Report,
    a: &dyn Wire,
    other: Option<&dyn Wire>,
    ready_at: Instant,
    acceptor: bool,
    long: bool,
) {
    let mut p = Probe {
        a,
        other,
        seen: Vec::new(),
    };
    let Some(first) = first_probe(&mut p, r, ready_at, long) else {
        return;
    };
    let extra = ack_echoes_id(&mut p, r);
    let Some(cycles) = probe_cycles(&mut p, r, first, extra) else {
        return;
    };
    duplicate_ack_harmless(&mut p, r);
    if !long {
        let _ = a.send(&Record::Ack { id: cycles.last }.encode());
        return;
    }
    deadline(&mut p, r, acceptor, cycles.acked, cycles.wrong);
}

/// 5.2/first-probe-at-ready: the first PROBE, with its arrival; `None` with the rules after
/// it skipped.
fn first_probe(
    p: &mut Probe,
    r: &mut Report,
    ready_at: Instant,
    long: bool,
) -> Option<(Instant, NonZeroU64)> {
    let Some((t1, p1)) = p.probe(ready_at + Duration::from_secs(6)) else {
        r.fail("5.2/first-probe-at-ready", "no PROBE within 6 s of ready");
        for id in REST {
            r.skip(id, "the target sent no PROBE");
        }
        if long {
            r.skip("5.2/deadline", "the target sent no PROBE");
        }
        return None;
    };
    let after = t1 - ready_at;
    r.check(
        "5.2/first-probe-at-ready",
        after <= Duration::from_secs(2),
        format!("first PROBE {} ms after ready", after.as_millis()),
    );
    Some((t1, p1))
}

/// 5.2/ack-echoes-id: the runner's PROBEs are echoed, a resent one again. Returns the
/// target's PROBEs that came meanwhile.
fn ack_echoes_id(p: &mut Probe, r: &mut Report) -> Vec<(Instant, NonZeroU64)> {
    let x = NonZeroU64::new(0x00C0_FFEE_0000_0001).unwrap_or(NonZeroU64::MIN);
    let mut extra = Vec::new();
    let first = p.echo(x, &mut extra);
    let again = p.echo(x, &mut extra);
    r.check(
        "5.2/ack-echoes-id",
        first == Some(x.get()) && again == Some(x.get()),
        format!("PROBE {x} twice: ACKs {first:?}, {again:?}"),
    );
    extra
}

/// What the two probe cycles leave for the deadline check.
struct Cycles {
    /// When the runner last sent a matching ACK.
    acked: Instant,
    /// The id of the target's last PROBE.
    last: NonZeroU64,
    /// The non-matching ACK id the runner sent.
    wrong: NonZeroU64,
}

/// 5.2/pending-id-resent, 5.2/probe-interval and 5.2/new-id-after-ack over two probe cycles
/// after the first PROBE (`first`; `extra`: the target's PROBEs already read): ACKs that
/// must not count (a non-matching id here, the matching id on another connection), then a
/// matching ACK, twice. `None` with the rules left skipped or failed.
fn probe_cycles(
    p: &mut Probe,
    r: &mut Report,
    (t1, p1): (Instant, NonZeroU64),
    extra: Vec<(Instant, NonZeroU64)>,
) -> Option<Cycles> {
    let (a, other) = (p.a, p.other);
    let wrong = NonZeroU64::new(p1.get() ^ 0x5A5A).unwrap_or(NonZeroU64::MAX);
    let _ = a.send(&Record::Ack { id: wrong }.encode());
    let mut sent = format!("non-matching ACK {wrong}");
    if let Some(o) = other {
        let _ = o.send(&Record::Ack { id: p1 }.encode());
        sent.push_str(&format!(", ACK {p1} on another connection"));
    }
    // Cycle 1.
    let next = extra
        .first()
        .copied()
        .or_else(|| p.probe(t1 + Duration::from_millis(6_500)));
    let Some((t2, p2)) = next else {
        r.fail("5.2/probe-interval", "no second PROBE within 6.5 s");
        for id in &REST[2..] {
            r.skip(id, "no second PROBE");
        }
        return None;
    };
    r.check(
        "5.2/pending-id-resent",
        p2 == p1,
        format!("PROBE {p1}, then ({sent}) PROBE {p2}"),
    );
    let _ = a.send(&Record::Ack { id: p2 }.encode());
    let acked = Instant::now();
    let _ = a.send(&Record::Ack { id: p2 }.encode());
    // Cycle 2.
    let Some((t3, p3)) = p.probe(t2 + Duration::from_millis(6_500)) else {
        r.fail(
            "5.2/probe-interval",
            format!(
                "PROBEs {} ms apart, then none within 6.5 s",
                (t2 - t1).as_millis()
            ),
        );
        r.fail(
            "5.2/duplicate-ack-harmless",
            format!("no PROBE after a duplicate ACK; seen: {:?}", p.seen),
        );
        r.skip("5.2/new-id-after-ack", "no third PROBE");
        return None;
    };
    let (g1, g2) = (t2 - t1, t3 - t2);
    r.check(
        "5.2/probe-interval",
        gap_ok(g1) && gap_ok(g2),
        format!("PROBEs {} ms, {} ms apart", g1.as_millis(), g2.as_millis()),
    );
    r.check(
        "5.2/new-id-after-ack",
        p3 != p2,
        format!("PROBE {p2} ACKed (twice), next PROBE {p3}"),
    );
    Some(Cycles {
        acked,
        last: p3,
        wrong,
    })
}

/// 5.2/duplicate-ack-harmless: after the duplicate ACK the connection is still there and
/// answers a PROBE.
fn duplicate_ack_harmless(p: &mut Probe, r: &mut Report) {
    let y = NonZeroU64::new(0x00C0_FFEE_0000_0002).unwrap_or(NonZeroU64::MIN);
    let mut more = Vec::new();
    let echoed = p.echo(y, &mut more);
    let closed = p
        .seen
        .iter()
        .any(|s| s.starts_with("CLOSE") || s.starts_with("REJECT"));
    // Whether the ACK carries the right id is 5.2/ack-echoes-id's business: here only that
    // the connection is still there and answers.
    r.check(
        "5.2/duplicate-ack-harmless",
        echoed.is_some() && !closed,
        format!(
            "after a duplicate ACK: PROBE {y} answered {echoed:?}; also seen {:?}",
            p.seen
        ),
    );
}

/// 5.2/deadline: with no more matching ACKs, 15 s after the last one (`acked`) the target
/// drops the connection (an acceptor sends CLOSE DeadlineExceeded, a dialler closes its
/// socket); `wrong`: a non-matching ACK id to probe the route with.
fn deadline(p: &mut Probe, r: &mut Report, acceptor: bool, acked: Instant, wrong: NonZeroU64) {
    let a = p.a;
    let until = acked + Duration::from_secs(18);
    let dropped = if acceptor {
        loop {
            match p.read(until) {
                Some((at, Record::Close { reason })) => {
                    break Some((
                        at,
                        format!("CLOSE {reason:?}"),
                        reason == CloseReason::DeadlineExceeded,
                    ))
                }
                Some(_) => continue,
                None => break None,
            }
        }
    } else {
        // A dialler closes its socket: the route disappears from the runner's socket.
        loop {
            if Instant::now() >= until {
                break None;
            }
            let _ = p.read(Instant::now() + Duration::from_millis(200));
            if a.send(&Record::Ack { id: wrong }.encode()).is_err() {
                break Some((Instant::now(), "connection closed".to_owned(), true));
            }
        }
    };
    match dropped {
        Some((at, what, right)) => {
            let after = at - acked;
            let in_time =
                after >= Duration::from_millis(14_500) && after <= Duration::from_millis(17_000);
            r.check(
                "5.2/deadline",
                right && in_time,
                format!(
                    "{what} {} ms after the last matching ACK",
                    after.as_millis()
                ),
            );
        }
        None => r.fail(
            "5.2/deadline",
            "still connected 18 s after the last matching ACK",
        ),
    }
}
