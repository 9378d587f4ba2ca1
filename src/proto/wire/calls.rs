//! CALLS (`0F`, capability `calls`, WIRE.md §4.14): several calls of one method in one
//! message, the fields they share said once.

use std::num::NonZeroU64;

use bytes::Bytes;

use super::codec::{put_count, put_str, put_u64, Reader};
use super::{envelope, non_zero, optional_name, Kind, Name, Record, Request, Semantics, WireError};

/// CALLS: 2..=65535 calls of one channel and method, with one ttl and one semantics pin,
/// in one message. Each call keeps its own id, idempotency key and payload frame, and is
/// still refused, ACCEPTed, deadlined and answered on its own, exactly as the same REQUEST
/// arriving alone. The fields the calls share are said once, which is what makes it smaller
/// than a BATCH of the same calls. Only where capability `calls` is in effect (WIRE.md §8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calls(Vec<Request>);

impl Calls {
    /// The fewest calls a CALLS record carries: a lone call is never wrapped.
    pub const MIN: usize = 2;
    /// The most calls a CALLS record can carry (its u16 count).
    pub const MAX: usize = u16::MAX as usize;

    /// Checks the count (2..=65535) and that every call has the first one's channel, method,
    /// ttl and semantics. Fails with class `invalid_field`.
    pub fn new(requests: Vec<Request>) -> Result<Self, WireError> {
        if !(Self::MIN..=Self::MAX).contains(&requests.len()) {
            return Err(WireError::invalid(
                Some(Kind::Calls),
                "count",
                "a CALLS record holds 2..=65535 calls",
            ));
        }
        if let Some((first, rest)) = requests.split_first() {
            if rest.iter().any(|r| !Self::share(first, r)) {
                return Err(WireError::invalid(
                    Some(Kind::Calls),
                    "requests",
                    "the calls of a CALLS record share channel, method, ttl and semantics",
                ));
            }
        }
        Ok(Self(requests))
    }

    /// Whether `a` and `b` may travel in one CALLS record: the same channel, method, ttl and
    /// semantics.
    pub fn share(a: &Request, b: &Request) -> bool {
        a.channel == b.channel
            && a.method == b.method
            && a.ttl_ms == b.ttl_ms
            && a.semantics == b.semantics
    }

    /// The calls, in wire order.
    pub fn requests(&self) -> &[Request] {
        &self.0
    }

    /// The owned calls.
    pub fn into_requests(self) -> Vec<Request> {
        self.0
    }

    /// The record's frames: the envelope with the shared fields and each call's id and key,
    /// then one payload frame per call, in order.
    pub(super) fn encode(&self) -> Vec<Vec<u8>> {
        let mut env = envelope(Kind::Calls);
        let Some(first) = self.0.first() else {
            // `new` refuses an empty record; an empty one would have no shared fields.
            put_count(&mut env, 0);
            return vec![env];
        };
        put_count(&mut env, self.0.len());
        put_u64(&mut env, first.ttl_ms.map_or(0, NonZeroU64::get));
        env.push(first.semantics.into());
        put_str(&mut env, &first.channel);
        put_str(&mut env, &first.method);
        for r in &self.0 {
            put_u64(&mut env, r.call_id.get());
            put_str(&mut env, r.idempotency_key.as_deref().unwrap_or_default());
        }
        let mut frames = Vec::with_capacity(self.0.len().saturating_add(1));
        frames.push(env);
        frames.extend(self.0.iter().map(|r| r.payload.to_vec()));
        frames
    }

    /// Decodes the body of a CALLS envelope and its payload frames (`frames` is the whole
    /// message, `rest` the frames after the envelope), in the check order of WIRE.md §6.2:
    /// every body field is read (truncated, trailing bytes), then the frame count, then the
    /// field values.
    pub(super) fn decode<F: AsRef<[u8]>>(
        mut r: Reader<'_>,
        frames: &[F],
        rest: &[F],
        take: &impl Fn(&F) -> Bytes,
    ) -> Result<Record, WireError> {
        let count = usize::from(r.u16("count")?);
        let ttl_ms = r.u64("ttl_ms")?;
        let semantics = r.u8("semantics")?;
        let channel = r.string("channel")?;
        let method = r.string("method")?;
        // Bounded by the frame: each call is at least 10 bytes, and a short frame stops the
        // reader with `truncated` before anything is reserved for it.
        let mut calls = Vec::new();
        for _ in 0..count {
            let call_id = r.u64("call_id")?;
            let key = r.string("idempotency_key")?;
            calls.push((call_id, key));
        }
        r.finish()?;
        let expected = count.saturating_add(1);
        if frames.len() != expected {
            return Err(WireError::FrameCount {
                kind: Some(Kind::Calls),
                expected,
                found: frames.len(),
            });
        }
        if count < Self::MIN {
            return Err(WireError::invalid(
                Some(Kind::Calls),
                "count",
                "a CALLS record holds 2..=65535 calls",
            ));
        }
        let ttl_ms = NonZeroU64::new(ttl_ms);
        let semantics = Semantics::try_from(semantics)?;
        let channel = Name::from_wire(channel, "channel")?;
        let method = Name::from_wire(method, "method")?;
        let mut checked = Vec::with_capacity(count);
        for (call_id, key) in calls {
            checked.push((
                non_zero(call_id, "call_id")?,
                optional_name(key, "idempotency_key")?,
            ));
        }
        // Every check passed: only now are the payloads taken.
        let requests = checked
            .into_iter()
            .zip(rest)
            .map(|((call_id, idempotency_key), payload)| Request {
                call_id,
                ttl_ms,
                semantics,
                channel: channel.clone(),
                method: method.clone(),
                idempotency_key,
                payload: take(payload),
            })
            .collect();
        Ok(Record::Calls(Calls(requests)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn req(id: u64, method: &str, ttl: u64) -> Request {
        Request {
            call_id: NonZeroU64::new(id).unwrap(),
            ttl_ms: NonZeroU64::new(ttl),
            semantics: Semantics::Query,
            channel: Name::new("pump").unwrap(),
            method: Name::new(method).unwrap(),
            idempotency_key: None,
            payload: Bytes::from(vec![u8::try_from(id).unwrap()]),
        }
    }

    /// MISSION K5, X3, X4: only calls that share channel, method, ttl and semantics make one
    /// CALLS record, of two calls or more; a record survives encode and decode unchanged, and
    /// is smaller than the BATCH of the same calls.
    #[test]
    fn k5_x3_x4_calls_share_their_header_and_save_bytes() {
        assert!(Calls::new(vec![req(1, "read", 0)]).is_err(), "one call");
        assert!(Calls::new(vec![req(1, "read", 0), req(2, "set", 0)]).is_err());
        assert!(Calls::new(vec![req(1, "read", 0), req(2, "read", 5)]).is_err());
        let calls: Vec<Request> = (1..=64).map(|i| req(i, "read", 0)).collect();
        let record = Record::Calls(Calls::new(calls.clone()).unwrap());
        let frames = record.encode();
        assert_eq!(frames.len(), 65);
        let back = Record::decode_in(&frames, super::super::Capabilities::CALLS, |f| {
            Bytes::copy_from_slice(f)
        })
        .unwrap();
        assert_eq!(back, record);
        assert!(
            Record::decode(&frames).is_err(),
            "unknown where calls is not in effect"
        );
        let batch = Record::Batch(super::super::Batch::new(calls).unwrap()).encode();
        let bytes = |f: &[Vec<u8>]| f.iter().map(Vec::len).sum::<usize>();
        assert!(
            bytes(&frames) * 2 < bytes(&batch),
            "{} against {}",
            bytes(&frames),
            bytes(&batch)
        );
    }
}
