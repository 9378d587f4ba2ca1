//! ANSWERS (WIRE.md §4.16) against an acceptor: to a caller whose HELLO offered `answers`,
//! the answers to a BATCH of calls, read with `answers` in effect, are exactly one ACCEPT
//! then one REPLY per call, whether they came packed or one message each (packing is the
//! sender's choice).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use zmesh::proto::wire::{Batch, Capabilities, Record};

use super::{admit, Acceptor, HelloSpec, Session};
use crate::link::{announced, random_nz, request, Wire, ANSWER};
use crate::{Report, Target};

const RULE: &str = "4.16/answers-stand-for-their-records";

/// Calls in the BATCH.
const CALLS: u64 = 4;

/// The ANSWERS check on one caller's connections that offered `answers`.
pub(super) fn answers_packed(t: &Target, acc: &Acceptor, r: &mut Report) {
    let Some((channel, method)) = &t.call else {
        return r.skip(RULE, "needs --call CHANNEL.METHOD");
    };
    let mut s = Session::new();
    let (rid, gen) = (s.rid("answers"), random_nz());
    let mut conns = Vec::new();
    for (lane, ep) in acc.lanes() {
        let mut h = HelloSpec::new(lane, &rid, gen);
        h.offer = vec!["answers"];
        match admit(&s, ep, &h) {
            Ok((d, w, _)) => {
                if !announced(&w).iter().any(|c| c == "answers") {
                    return r.skip(RULE, "the target does not announce answers");
                }
                conns.push(d);
            }
            Err(e) => return r.fail(RULE, format!("a HELLO offering answers on {lane:?}: {e}")),
        }
    }
    // RouteMesh: the BATCH on the Application lane, answers on the Completion lane.
    let (Some(req), Some(ans)) = (conns.first(), conns.last()) else {
        return r.fail(RULE, "no connection admitted");
    };
    let calls = (1..=CALLS)
        .map(|n| request(40 + n, channel, method, &t.call_args))
        .collect();
    let batch = match Batch::new(calls) {
        Ok(b) => Record::Batch(b),
        Err(e) => return r.fail(RULE, format!("the runner's BATCH: {e}")),
    };
    if let Err(e) = req.send(&batch.encode()) {
        return r.fail(RULE, e);
    }
    match read_answers(req, ans, conns.len() == 2, Capabilities::ANSWERS, CALLS) {
        Ok((seen, packed)) => {
            let whole = seen.len() as u64 == CALLS
                && seen.values().all(|s| s.as_slice() == ["accept", "reply"]);
            let packed: usize = packed.values().sum();
            r.check(
                RULE,
                whole,
                format!("per call, in order: {seen:?} ({packed} ANSWERS records)"),
            );
        }
        Err(e) => r.fail(RULE, e),
    }
}

/// What came for each call (`accept`, `reply`, in order), and how many records of each
/// packing kind (`answers`, `answers16`) carried them.
pub(super) type Seen = (
    BTreeMap<u64, Vec<&'static str>>,
    BTreeMap<&'static str, usize>,
);

/// Reads the answers on `ans` (decoded with `caps` in effect) until `calls` calls had a REPLY
/// each or [`ANSWER`] passed; PROBEs are answered, on the request connection `req` too when it
/// is `separate` from the answers' (RouteMesh). A malformed message is an error.
pub(super) fn read_answers(
    req: &dyn Wire,
    ans: &dyn Wire,
    separate: bool,
    caps: Capabilities,
    calls: u64,
) -> Result<Seen, String> {
    let (mut seen, mut packed): Seen = Default::default();
    let deadline = Instant::now() + ANSWER;
    let replies = |seen: &BTreeMap<u64, Vec<&'static str>>| {
        seen.values().filter(|s| s.contains(&"reply")).count() as u64
    };
    while replies(&seen) < calls {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "{} of {calls} REPLYs within 5 s: {seen:?}",
                replies(&seen)
            ));
        }
        while let Some(frames) = separate.then(|| req.recv(Duration::ZERO)).flatten() {
            if let Ok(Record::Probe { id }) = Record::decode(&frames) {
                let _ = req.send(&Record::Ack { id }.encode());
            }
        }
        let Some(frames) = ans.recv(left.min(Duration::from_millis(20))) else {
            continue;
        };
        let rec = Record::decode_in(&frames, caps, |f| bytes::Bytes::copy_from_slice(f)).map_err(
            |e| {
                format!(
                    "a malformed message with {caps} in effect: {} ({e})",
                    e.class()
                )
            },
        )?;
        let records = match rec {
            Record::Probe { id } => {
                let _ = ans.send(&Record::Ack { id }.encode());
                continue;
            }
            Record::Answers(a) => {
                *packed.entry(a.kind().name()).or_default() += 1;
                a.into_records().collect()
            }
            other => vec![other],
        };
        for rec in records {
            match rec {
                Record::Accept(a) => seen.entry(a.call_id.get()).or_default().push("accept"),
                Record::Reply(p) => seen.entry(p.call_id.get()).or_default().push("reply"),
                Record::Ack { .. } => {}
                other => return Err(format!("{} among the answers", other.kind().name())),
            }
        }
    }
    Ok((seen, packed))
}
