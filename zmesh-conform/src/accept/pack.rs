//! PACK (WIRE.md §4.18) against an acceptor: where `pack` is in effect a well-formed PACK
//! changes nothing about the connection (it stands for its MESSAGEs, which the runner cannot
//! see delivered), a PACK of one record is a protocol error, and where `pack` is not in effect
//! kind `12` is unknown, a protocol error as in version 1.

use zmesh::proto::wire::{CloseReason, Message, Name, Pack, Record};

use super::cancel::acked;
use super::{admit, Acceptor, HelloSpec, Session};
use crate::link::{announced, next, random_nz, show, Got, Wire, ANSWER};
use crate::Report;

const ACCEPTED: &str = "4.18/pack-accepted";
const LONE: &str = "4.18/pack-lone-record-protocol-error";
const UNKNOWN: &str = "4.18/pack-unknown-without-capability";

/// The channel of the runner's PACKs: a channel like any other to the target.
const CHANNEL: &str = "zmesh-conform";

/// The two frames of a PACK of `payloads` on [`CHANNEL`], its count field set to `count`.
fn pack(payloads: &[&[u8]], count: u16) -> Vec<Vec<u8>> {
    let (mut env, mut body) = (Vec::new(), Vec::new());
    // A constant name of 1..=255 bytes: always valid.
    let menv = Name::new(CHANNEL)
        .map(|c| Message::encode_envelope(&c))
        .unwrap_or_default();
    Pack::write_frames(&menv, payloads.iter().copied(), &mut env, &mut body);
    if let Some(c) = env.get_mut(4..6) {
        c.copy_from_slice(&count.to_be_bytes());
    }
    vec![env, body]
}

/// The PACK checks, each on a connection of its own on the acceptor's main lane.
pub(super) fn pack_records(acc: &Acceptor, r: &mut Report) {
    let mut s = Session::new();
    let (lane, ep) = acc.main();
    // Where pack is not in effect (a HELLO offering nothing): kind 12 is unknown.
    let plain = HelloSpec::new(lane, &s.rid("pack-v1"), random_nz());
    match admit(&s, ep, &plain) {
        Ok((d, _, _)) => closes_with_protocol_error(&d, &pack(&[b"a", b"b"], 2), UNKNOWN, r),
        Err(e) => r.fail(UNKNOWN, e),
    }
    for id in [ACCEPTED, LONE] {
        let rid = s.rid("pack");
        let mut h = HelloSpec::new(lane, &rid, random_nz());
        h.offer = vec!["pack"];
        let d = match admit(&s, ep, &h) {
            Ok((d, w, _)) if announced(&w).iter().any(|c| c == "pack") => d,
            Ok(_) => {
                r.skip(ACCEPTED, "the target does not announce pack");
                r.skip(LONE, "the target does not announce pack");
                return;
            }
            Err(e) => return r.fail(id, format!("a HELLO offering pack: {e}")),
        };
        if id == LONE {
            closes_with_protocol_error(&d, &pack(&[b"lone"], 1), LONE, r);
            continue;
        }
        let got = d
            .send(&pack(&[b"one", b"", b"three"], 3))
            .and_then(|_| acked(&d, random_nz()));
        match got {
            Ok(()) => r.pass(
                ACCEPTED,
                "after a PACK of three MESSAGEs, the next PROBE got its ACK",
            ),
            Err(e) => r.fail(ACCEPTED, e),
        }
    }
}

/// Sends `frames` on `d` and checks that the acceptor answers CLOSE ProtocolError.
pub(super) fn closes_with_protocol_error(
    d: &dyn Wire,
    frames: &[Vec<u8>],
    id: &'static str,
    r: &mut Report,
) {
    match d.send(frames).map(|_| next(d, ANSWER, true)) {
        Ok(Some(Got::Record(Record::Close { reason }))) => r.check(
            id,
            reason == CloseReason::ProtocolError,
            format!("CLOSE {reason:?}"),
        ),
        Ok(Some(other)) => r.fail(id, format!("got {}", show(&other))),
        Ok(None) => r.fail(id, "no CLOSE within 5 s"),
        Err(e) => r.fail(id, e),
    }
}
