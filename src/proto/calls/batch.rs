//! Batching policy: several calls in one BATCH message (MISSION K5, WIRE.md §4.12).
//!
//! A BATCH is an envelope, never a transaction: every call in it is authorized, deadlined,
//! ACCEPTed and answered on its own. This module holds the two bounds and how a run of calls
//! for one link is cut into messages; the codec ([`crate::proto::wire::Batch`]) accepts any
//! count from 2 to 65535.

use std::ops::Range;

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

#[cfg(test)]
mod tests {
    use super::*;

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
