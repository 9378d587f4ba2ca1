//! CALLS16 (WIRE.md §4.19) against an acceptor: where `ids16` is in effect each call of a
//! well-formed CALLS16 is answered on its own (the answers read with the capabilities in
//! effect, so they may come one message each, in ANSWERS or in ANSWERS16 records), a CALLS16
//! whose base is not the smallest call id is a protocol error (one byte form per record), and
//! where `ids16` is not in effect kind `13` is unknown, a protocol error as in version 1.

use zmesh::proto::wire::{Calls, Capabilities, Kind, Lane, Record};

use super::pack::closes_with_protocol_error;
use super::packed::read_answers;
use super::{admit, call_of, Acceptor, HelloSpec, Session};
use crate::link::{announced, random_nz, request, Dialled, Wire, NO_CHANNEL};
use crate::{Report, Target};

const ANSWERED: &str = "4.19/calls16-answered";
const NOT_SMALLEST: &str = "4.19/calls16-base-not-smallest";
const UNKNOWN: &str = "4.19/ids16-unknown-without-capability";

/// What the runner offers where it wants `ids16` in effect: each name with its capability.
const OFFER: [(&str, Capabilities); 3] = [
    ("calls", Capabilities::CALLS),
    ("answers", Capabilities::ANSWERS),
    ("ids16", Capabilities::IDS16),
];

/// The calls of the CALLS16 that is to be answered: base 51, offsets 0 and 1.
const IDS: [u64; 2] = [51, 52];

/// The frames of a CALLS16 of calls `ids` to `channel`.`method` with `args`.
fn calls16(
    ids: &[u64],
    (channel, method, args): (&str, &str, &[u8]),
) -> Result<Vec<Vec<u8>>, String> {
    let calls = Calls::new(
        ids.iter()
            .map(|&id| request(id, channel, method, args))
            .collect(),
    )
    .map_err(|e| format!("the runner's CALLS: {e}"))?
    .with_offsets();
    if calls.kind() != Kind::Calls16 {
        return Err(format!("calls {ids:?} have no CALLS16 form"));
    }
    Ok(Record::Calls(calls).encode())
}

/// Calls 61 and 62 (no keys, a channel nobody serves) written with base 60 and offsets 1
/// and 2: the same ids, but no offset is 0, so not the one byte form of WIRE.md §4.19.
fn base_not_smallest() -> Result<Vec<Vec<u8>>, String> {
    let mut frames = calls16(&[61, 62], (NO_CHANNEL, "m", &[0xC0]))?;
    let env = frames.first_mut().ok_or("no envelope")?;
    // The envelope ends with the base (u64), then per call its offset (u16) and an empty key
    // (u16 length 0).
    let at = env
        .len()
        .checked_sub(8 + 2 * 4)
        .ok_or("a short CALLS16 envelope")?;
    let patch = [
        (at, 60u64.to_be_bytes().to_vec()),
        (at + 8, vec![0, 1]),
        (at + 12, vec![0, 2]),
    ];
    for (from, bytes) in patch {
        env.get_mut(from..from + bytes.len())
            .ok_or("a short CALLS16 envelope")?
            .copy_from_slice(&bytes);
    }
    Ok(frames)
}

/// One caller admitted on `lanes` with HELLOs offering [`OFFER`]: its connections and the
/// capabilities in effect on the last one (where answers come); `None` if a WELCOME did not
/// announce `ids16`.
fn admit_offering(
    s: &mut Session,
    lanes: &[(Lane, &str)],
) -> Result<Option<(Vec<Dialled>, Capabilities)>, String> {
    let (rid, gen) = (s.rid("ids16"), random_nz());
    let mut conns = Vec::new();
    let mut caps = Capabilities::NONE;
    for &(lane, ep) in lanes {
        let mut h = HelloSpec::new(lane, &rid, gen);
        h.offer = OFFER.iter().map(|(name, _)| *name).collect();
        let (d, w, _) = admit(s, ep, &h)
            .map_err(|e| format!("a HELLO offering calls, answers and ids16 on {lane:?}: {e}"))?;
        let names = announced(&w);
        if !names.iter().any(|c| c == "ids16") {
            return Ok(None);
        }
        caps = OFFER
            .iter()
            .filter(|(name, _)| names.iter().any(|c| c == name))
            .fold(Capabilities::NONE, |caps, (_, cap)| caps.union(*cap));
        conns.push(d);
    }
    Ok(Some((conns, caps)))
}

/// The CALLS16 checks: on a connection without `ids16`, then on a caller's connections where
/// it is in effect, then on a connection of its own on the acceptor's main lane.
pub(super) fn ids16_records(t: &Target, acc: &Acceptor, r: &mut Report) {
    let mut s = Session::new();
    let (lane, ep) = acc.main();
    // Where ids16 is not in effect (a HELLO offering the long forms only): kind 13 is unknown.
    let mut plain = HelloSpec::new(lane, &s.rid("ids16-v1"), random_nz());
    plain.offer = vec!["calls", "answers"];
    match admit(&s, ep, &plain).and_then(|(d, _, _)| {
        calls16(&[71, 72], (NO_CHANNEL, "m", &[0xC0])).map(|frames| (d, frames))
    }) {
        Ok((d, frames)) => closes_with_protocol_error(&d, &frames, UNKNOWN, r),
        Err(e) => r.fail(UNKNOWN, e),
    }
    match admit_offering(&mut s, &acc.lanes()) {
        Ok(Some((conns, caps))) => answered(t, &conns, caps, r),
        Ok(None) => {
            r.skip(ANSWERED, "the target does not announce ids16");
            r.skip(NOT_SMALLEST, "the target does not announce ids16");
            return;
        }
        Err(e) => r.fail(ANSWERED, e),
    }
    match (admit_offering(&mut s, &[(lane, ep)]), base_not_smallest()) {
        (Ok(Some((conns, _))), Ok(frames)) => match conns.first() {
            Some(d) => closes_with_protocol_error(d, &frames, NOT_SMALLEST, r),
            None => r.fail(NOT_SMALLEST, "no connection admitted"),
        },
        (Ok(None), _) => r.skip(NOT_SMALLEST, "the target does not announce ids16"),
        (Err(e), _) | (_, Err(e)) => r.fail(NOT_SMALLEST, e),
    }
}

/// 4.19/calls16-answered: a CALLS16 of calls [`IDS`] on the first connection (RouteMesh: the
/// Application lane), its answers read on the last with `caps` in effect.
fn answered(t: &Target, conns: &[Dialled], caps: Capabilities, r: &mut Report) {
    let (Some(req), Some(ans)) = (conns.first(), conns.last()) else {
        return r.fail(ANSWERED, "no connection admitted");
    };
    let sent = calls16(&IDS, call_of(t)).and_then(|frames| req.send(&frames));
    if let Err(e) = sent {
        return r.fail(ANSWERED, e);
    }
    // A served call gets its ACCEPT then its REPLY, a refused one (no --call) its REPLY only.
    let want: &[&str] = if t.call.is_some() {
        &["accept", "reply"]
    } else {
        &["reply"]
    };
    match read_answers(req, ans, conns.len() == 2, caps, IDS.len() as u64) {
        Ok((seen, packed)) => {
            let each = seen.len() == IDS.len()
                && IDS
                    .iter()
                    .all(|id| seen.get(id).is_some_and(|s| s.as_slice() == want));
            r.check(
                ANSWERED,
                each,
                format!(
                    "to a CALLS16 of calls {IDS:?} ({caps} in effect), per call: {seen:?} \
                     (packed: {packed:?})"
                ),
            );
        }
        Err(e) => r.fail(ANSWERED, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(
        frames: &[Vec<u8>],
        caps: Capabilities,
    ) -> Result<Record, zmesh::proto::wire::WireError> {
        Record::decode_in(frames, caps, |f| bytes::Bytes::copy_from_slice(f))
    }

    /// The runner's CALLS16 is kind 13 with calls 51 and 52, known only where `ids16` is in
    /// effect; its malformed one differs from a well-formed CALLS16 of the same calls only
    /// in the base and offsets, and is refused for its base.
    #[test]
    fn x4_the_runners_calls16_are_what_the_rules_say() {
        let caps = Capabilities::CALLS.union(Capabilities::IDS16);
        let frames = calls16(&IDS, (NO_CHANNEL, "m", &[0xC0])).expect("calls16");
        assert_eq!(frames[0][3], 0x13);
        let Ok(Record::Calls(c)) = decode(&frames, caps) else {
            panic!("{:?}", decode(&frames, caps))
        };
        let ids: Vec<u64> = c.requests().iter().map(|r| r.call_id.get()).collect();
        assert_eq!((ids, c.kind()), (IDS.to_vec(), Kind::Calls16));
        let without = decode(&frames, Capabilities::CALLS.union(Capabilities::ANSWERS));
        assert_eq!(without.map_err(|e| e.class()), Err("unknown_kind"));

        let bad = base_not_smallest().expect("malformed");
        let good = calls16(&[61, 62], (NO_CHANNEL, "m", &[0xC0])).expect("calls16");
        let differ: Vec<usize> = (0..good[0].len())
            .filter(|&i| good[0][i] != bad[0][i])
            .collect();
        let base = good[0].len() - 16;
        assert_eq!(
            differ,
            [base + 7, base + 9, base + 13],
            "base 61 -> 60, offsets +1"
        );
        assert_eq!(&bad[1..], &good[1..]);
        let err = decode(&bad, caps).expect_err("no offset is 0");
        assert_eq!(err.class(), "invalid_field");
        assert!(err.to_string().contains("base"), "{err}");
    }

    /// Every rule of this module is in the catalog, as a MUST.
    #[test]
    fn x4_the_ids16_rules_are_listed() {
        for id in [ANSWERED, NOT_SMALLEST, UNKNOWN] {
            let rule = crate::rule(id).unwrap_or_else(|| panic!("{id} not in RULES"));
            assert_eq!(rule.level, crate::Level::Must, "{id}");
        }
    }
}
