//! Batching policy: several calls in one BATCH message (MISSION K5, WIRE.md §4.12).
//!
//! A BATCH is an envelope, never a transaction: every call in it is authorized, deadlined,
//! ACCEPTed and answered on its own. This module holds the two bounds and how a run of calls
//! for one link is cut into messages ([`split`], and [`frame`] where capability `calls` may
//! group them as CALLS records, WIRE.md §4.14); the codec ([`crate::proto::wire::Batch`])
//! accepts any count from 2 to 65535.

use std::ops::Range;

use crate::proto::wire::{Calls, Request};

/// The most calls a sender puts in one BATCH: a run of more is split. Sixteen calls already
/// save 94 % of the envelopes batching could ever save and sixty-four save 98 %; more would
/// cost the receiver memory (a frame is decoded whole before any call of it is dispatched).
pub const MAX_BATCH_CALLS: usize = 64;

/// The most calls a receiver takes from one BATCH. A BATCH with more is not dispatched: every
/// call in it is answered `InvalidParams` (did not run), none is dropped. The sender's own
/// split is no protection: the far end may be another program or another version.
pub const MAX_INCOMING_BATCH_CALLS: usize = 256;

/// How a run of `n` calls queued for one link is sent, in order: each range is one message,
/// a BATCH when it holds two calls or more and a lone REQUEST when it holds one (a lone call
/// is never wrapped). Ranges hold at most [`MAX_BATCH_CALLS`] calls; a run is cut into equal
/// parts as far as possible, so 65 calls go as 33 + 32, never as 64 + a lone 1.
pub fn split(n: usize) -> impl Iterator<Item = Range<usize>> {
    let parts = n.div_ceil(MAX_BATCH_CALLS).max(1);
    let (base, extra) = (n / parts, n % parts);
    (0..parts)
        .scan(0usize, move |start, i| {
            let len = base + usize::from(i < extra);
            let r = *start..*start + len;
            *start += len;
            Some(r)
        })
        .filter(|r| !r.is_empty())
}

/// How one message of [`frame`] carries its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One call, as a lone REQUEST.
    Request,
    /// Two calls or more, as a BATCH (version 1, WIRE.md §4.12).
    Batch,
    /// Two calls or more that share channel, method, ttl and semantics, as a CALLS record
    /// (capability `calls`, WIRE.md §4.14).
    Calls,
}

/// The messages a turn's `requests` for one link go out as, in order: each range of
/// `requests` is one message, carried as its [`Framing`] says. Without `calls` in effect on
/// the link the run is cut by [`split`] into BATCHes (a lone call alone). With it, each run
/// of two or more consecutive calls that share their header ([`Calls::share`]) goes as CALLS
/// records, cut the same way, and the calls between such runs as BATCHes. Calls never change
/// order, and the ranges cover `requests` exactly once.
pub fn frame(requests: &[Request], calls: bool) -> Vec<(Range<usize>, Framing)> {
    let mut out = Vec::new();
    if !calls {
        batched(0..requests.len(), &mut out);
        return out;
    }
    let mut loose = 0;
    let mut at = 0;
    while let Some(first) = requests.get(at) {
        let len = requests
            .iter()
            .skip(at)
            .take_while(|r| Calls::share(first, r))
            .count();
        if len >= Calls::MIN {
            batched(loose..at, &mut out);
            out.extend(split(len).map(|r| (at + r.start..at + r.end, Framing::Calls)));
            loose = at + len;
        }
        at += len.max(1);
    }
    batched(loose..requests.len(), &mut out);
    out
}

/// The calls of `range` as BATCHes cut by [`split`], a lone call as a REQUEST.
fn batched(range: Range<usize>, out: &mut Vec<(Range<usize>, Framing)>) {
    out.extend(split(range.len()).map(|r| {
        let framing = if r.len() == 1 {
            Framing::Request
        } else {
            Framing::Batch
        };
        (range.start + r.start..range.start + r.end, framing)
    }));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::num::NonZeroU64;

    use bytes::Bytes;

    use super::*;
    use crate::proto::wire::{Name, Semantics};

    fn req(id: u64, method: &str) -> Request {
        Request {
            call_id: NonZeroU64::new(id).unwrap(),
            ttl_ms: None,
            semantics: Semantics::Query,
            channel: Name::new("svc").unwrap(),
            method: Name::new(method).unwrap(),
            idempotency_key: None,
            payload: Bytes::new(),
        }
    }

    fn shapes(requests: &[Request], calls: bool) -> Vec<(usize, Framing)> {
        frame(requests, calls)
            .into_iter()
            .map(|(r, f)| (r.len(), f))
            .collect()
    }

    /// MISSION K5, X4: without `calls` a turn's calls go as BATCHes (a lone one alone); with
    /// it, runs that share their header go as CALLS and the calls between them as BATCHes,
    /// in order, every call once.
    #[test]
    fn k5_x4_frame_groups_runs_as_calls_and_the_rest_as_batches() {
        use Framing::{Batch, Calls as C, Request as R};
        let m = |methods: &str| -> Vec<Request> {
            methods
                .chars()
                .enumerate()
                .map(|(i, c)| req(i as u64 + 1, &c.to_string()))
                .collect()
        };
        assert_eq!(shapes(&[], true), vec![]);
        assert_eq!(shapes(&m("a"), true), vec![(1, R)]);
        assert_eq!(shapes(&m("aa"), false), vec![(2, Batch)]);
        assert_eq!(shapes(&m("aa"), true), vec![(2, C)]);
        assert_eq!(shapes(&m("ab"), true), vec![(2, Batch)]);
        assert_eq!(shapes(&m("abba"), true), vec![(1, R), (2, C), (1, R)]);
        assert_eq!(
            shapes(&m("abcaaadeff"), true),
            vec![(3, Batch), (3, C), (2, Batch), (2, C)]
        );
        let run: Vec<Request> = (1..=65).map(|i| req(i, "a")).collect();
        assert_eq!(shapes(&run, true), vec![(33, C), (32, C)]);
        assert_eq!(shapes(&run, false), vec![(33, Batch), (32, Batch)]);
        for calls in [false, true] {
            let mixed = m("aabcccdddddeeab");
            let mut next = 0;
            for (r, _) in frame(&mixed, calls) {
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, mixed.len());
        }
    }

    fn sizes(n: usize) -> Vec<usize> {
        split(n).map(|r| r.len()).collect()
    }

    /// MISSION K5: a lone call is one lone message; none at all is nothing.
    #[test]
    fn k5_lone_call_is_never_wrapped() {
        assert_eq!(sizes(0), Vec::<usize>::new());
        assert_eq!(sizes(1), vec![1]);
        assert_eq!(sizes(2), vec![2]);
    }

    /// MISSION K5: runs above 64 are split into parts of at most 64, never leaving a lone 1.
    #[test]
    fn k5_sender_splits_above_64() {
        assert_eq!(sizes(64), vec![64]);
        assert_eq!(sizes(65), vec![33, 32]);
        assert_eq!(sizes(128), vec![64, 64]);
        assert_eq!(sizes(129), vec![43, 43, 43]);
        assert_eq!(sizes(300), vec![60, 60, 60, 60, 60]);
    }

    /// MISSION K5: the ranges cover the run exactly once, in order, each within the bound,
    /// and no part of a split run is a lone call.
    #[test]
    fn k5_split_covers_every_call_in_order() {
        for n in 0..1000 {
            let mut next = 0;
            for r in split(n) {
                assert_eq!(r.start, next, "n = {n}");
                assert!(
                    !r.is_empty() && r.len() <= MAX_BATCH_CALLS,
                    "n = {n}: {r:?}"
                );
                assert!(
                    n == 1 || r.len() >= 2,
                    "n = {n}: a lone call in a split run"
                );
                next = r.end;
            }
            assert_eq!(next, n);
        }
    }
}
