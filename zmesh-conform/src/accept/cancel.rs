//! Capabilities (WIRE.md §8.1) and CANCEL (§4.13) against an acceptor. What its WELCOME
//! announces to a version-1 HELLO (nothing) and to a HELLO offering `cancel` and a capability
//! nobody knows (only what was offered); then, where `cancel` is in effect, that a CANCEL for
//! a call the target does not hold changes nothing: the connection stays ready, answers the
//! next PROBE, and serves the next call.
//!
//! What a CANCEL does to a call the target still holds (a queued call never runs, a running
//! handler is signalled) needs a method that takes long or a queue behind a running call:
//! the runner cannot ask a target for one, so that part of §5.3 is not checked here.

use std::num::NonZeroU64;

use zmesh::proto::wire::{Record, Welcome};

use super::{admit, answers, Acceptor, HelloSpec, Session};
use crate::link::{announced, next, random_nz, request, show, Got, Wire, ANSWER};
use crate::{Report, Target};

/// The capability the runner offers that no implementation knows: it must never be
/// announced back, and must not stand in the way of admission.
const UNKNOWN: &str = "zmesh-conform-unknown";

/// The rules of this scenario that need `cancel` in effect.
const CANCEL_RULES: [&str; 2] = [
    "4.13/cancel-unknown-ignored",
    "4.13/cancel-answered-ignored",
];

/// The capability checks, then the CANCEL checks on a caller's connections that offered
/// `cancel`.
pub(super) fn capabilities(t: &Target, acc: &Acceptor, r: &mut Report) {
    let mut s = Session::new();
    let (lane, ep) = acc.main();
    // A version-1 HELLO: the WELCOME a version-1 acceptor sends, no extension entry.
    let plain = HelloSpec::new(lane, &s.rid("v1"), random_nz());
    match admit(&s, ep, &plain) {
        Ok((_, w, _)) => {
            let got = announced(&w);
            r.check(
                "8.1/version-1-hello-version-1-welcome",
                got.is_empty(),
                if got.is_empty() {
                    "a WELCOME without extension entries".to_owned()
                } else {
                    format!("the WELCOME announced {got:?} to a HELLO that offered nothing")
                },
            );
        }
        Err(e) => r.fail("8.1/version-1-hello-version-1-welcome", e),
    }
    // A HELLO offering `cancel` and an unknown capability, on every lane of one caller.
    let rid = s.rid("caps");
    let gen = random_nz();
    let mut conns = Vec::new();
    let mut welcomes: Vec<Welcome> = Vec::new();
    for (lane, ep) in acc.lanes() {
        let mut h = HelloSpec::new(lane, &rid, gen);
        h.offer = vec!["cancel", UNKNOWN];
        match admit(&s, ep, &h) {
            Ok((d, w, _)) => {
                conns.push(d);
                welcomes.push(w);
            }
            Err(e) => {
                let why = format!("a HELLO offering cancel and {UNKNOWN} on {lane:?}: {e}");
                r.fail("8.1/welcome-announces-only-offered", why.clone());
                for id in CANCEL_RULES {
                    r.skip(id, format!("not admitted: {why}"));
                }
                return;
            }
        }
    }
    let all: Vec<Vec<String>> = welcomes.iter().map(announced).collect();
    let only_offered = all.iter().flatten().all(|c| c == "cancel");
    r.check(
        "8.1/welcome-announces-only-offered",
        only_offered,
        format!("to a HELLO offering [\"cancel\", {UNKNOWN:?}], the WELCOMEs announced {all:?}"),
    );
    let speaks_cancel = all.first().is_some_and(|a| a.iter().any(|c| c == "cancel"));
    if !speaks_cancel {
        for id in CANCEL_RULES {
            r.skip(
                id,
                "the target does not announce cancel (a version-1 acceptor)",
            );
        }
        return;
    }
    // RouteMesh: REQUESTs and CANCELs on the Application lane, answers on the Completion lane.
    let req: &dyn Wire = &conns[0];
    let ans: &dyn Wire = conns.last().map_or(req, |c| c as &dyn Wire);
    let separate = conns.len() == 2;
    cancel_unknown(req, r);
    cancel_answered(t, req, ans, separate, r);
}

/// Sends PROBE `id` on `w` and waits for its ACK, answering the target's PROBEs meanwhile:
/// `Ok` when it came, or what came instead (a CLOSE, a malformed message, nothing).
pub(super) fn acked(w: &dyn Wire, id: NonZeroU64) -> Result<(), String> {
    w.send(&Record::Probe { id }.encode())?;
    let deadline = std::time::Instant::now() + ANSWER;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match next(w, left, false) {
            None => return Err("no ACK within 5 s".into()),
            Some(Got::Record(Record::Ack { id: got })) if got == id => return Ok(()),
            Some(Got::Record(Record::Ack { .. })) => {}
            Some(Got::Record(Record::Probe { id: theirs })) => {
                let _ = w.send(&Record::Ack { id: theirs }.encode());
            }
            Some(g @ (Got::Record(Record::Close { .. }) | Got::Malformed(_))) => {
                return Err(format!("got {} instead of the ACK", show(&g)))
            }
            Some(_) => {}
        }
    }
}

/// 4.13/cancel-unknown-ignored: a CANCEL for a call id never used changes nothing.
fn cancel_unknown(req: &dyn Wire, r: &mut Report) {
    let call_id = NonZeroU64::new(0x00C4_4CE1).unwrap_or(NonZeroU64::MIN);
    let probe = random_nz();
    let got = req
        .send(&Record::Cancel { call_id }.encode())
        .and_then(|_| acked(req, probe));
    match got {
        Ok(()) => r.pass(
            "4.13/cancel-unknown-ignored",
            format!("after a CANCEL of call {call_id}, never made, the next PROBE got its ACK"),
        ),
        Err(e) => r.fail("4.13/cancel-unknown-ignored", e),
    }
}

/// 4.13/cancel-answered-ignored: a CANCEL for a call already answered changes nothing: the
/// next PROBE gets its ACK and the next call its REPLY.
fn cancel_answered(t: &Target, req: &dyn Wire, ans: &dyn Wire, separate: bool, r: &mut Report) {
    let Some((channel, method)) = &t.call else {
        r.skip(
            "4.13/cancel-answered-ignored",
            "needs --call CHANNEL.METHOD",
        );
        return;
    };
    let id = "4.13/cancel-answered-ignored";
    let call = |n: u64| Record::Request(request(n, channel, method, &t.call_args)).encode();
    let first = req
        .send(&call(21))
        .map(|_| answers(req, ans, separate, ANSWER, |a| a.replies(21) > 0));
    let replied = match first {
        Ok(a) => a.replies(21),
        Err(e) => return r.fail(id, e),
    };
    if replied == 0 {
        return r.fail(id, "call 21 got no REPLY within 5 s");
    }
    let call_id = NonZeroU64::new(21).unwrap_or(NonZeroU64::MIN);
    let after = req
        .send(&Record::Cancel { call_id }.encode())
        .and_then(|_| acked(req, random_nz()))
        .and_then(|_| req.send(&call(22)))
        .map(|_| answers(req, ans, separate, ANSWER, |a| a.replies(22) > 0));
    match after {
        Ok(a) => r.check(
            id,
            a.replies(22) == 1 && a.replies(21) == 0,
            format!(
                "after a CANCEL of answered call 21, the PROBE got its ACK; call 22 got {:?}, call 21 {:?}",
                a.of(22),
                a.of(21)
            ),
        ),
        Err(e) => r.fail(id, e),
    }
}
