//! CALLS (`0F`, capability `calls`, WIRE.md §4.14): several calls of one method in one
//! message, the fields they share said once; CALLS16 (`13`, capability `ids16`, §4.19) the
//! same with the call ids as offsets from the smallest.

use std::num::NonZeroU64;

use bytes::Bytes;

use super::codec::{put_count, put_str, put_u64, Reader};
use super::offsets::{base_of, check_base, id_from, put_id, read_id, IdForm};
use super::{envelope, optional_name, Kind, Name, Record, Request, Semantics, WireError};

/// CALLS: 2..=65535 calls of one channel and method, with one ttl and one semantics pin,
/// in one message. Each call keeps its own id, idempotency key and payload frame, and is
/// still refused, ACCEPTed, deadlined and answered on its own, exactly as the same REQUEST
/// arriving alone. The fields the calls share are said once, which is what makes it smaller
/// than a BATCH of the same calls. Only where capability `calls` is in effect (WIRE.md §8.1);
/// in the offset form ([`Calls::with_offsets`], kind CALLS16) only where `ids16` is too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calls {
    requests: Vec<Request>,
    form: IdForm,
}

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
        Ok(Self {
            requests,
            form: IdForm::Full,
        })
    }

    /// The record in the offset form (kind CALLS16, WIRE.md §4.19: the smallest call id once,
    /// each id as a u16 offset from it) if its ids are within 65535 of each other; unchanged
    /// otherwise. Only where capability `ids16` is in effect.
    #[must_use]
    pub fn with_offsets(mut self) -> Self {
        if base_of(self.requests.iter().map(|r| r.call_id)).is_some() {
            self.form = IdForm::Offsets;
        }
        self
    }

    /// How the record writes its call ids.
    pub fn form(&self) -> IdForm {
        self.form
    }

    /// The record's kind: CALLS, or CALLS16 in the offset form.
    pub fn kind(&self) -> Kind {
        match self.form {
            IdForm::Full => Kind::Calls,
            IdForm::Offsets => Kind::Calls16,
        }
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
        &self.requests
    }

    /// The owned calls.
    pub fn into_requests(self) -> Vec<Request> {
        self.requests
    }

    /// The record's frames: the envelope with the shared fields (in the offset form, the
    /// base after them) and each call's id and key, then one payload frame per call, in
    /// order.
    pub(super) fn encode(&self) -> Vec<Vec<u8>> {
        let mut env = envelope(self.kind());
        let Some(first) = self.requests.first() else {
            // `new` refuses an empty record; an empty one would have no shared fields.
            put_count(&mut env, 0);
            return vec![env];
        };
        put_count(&mut env, self.requests.len());
        put_u64(&mut env, first.ttl_ms.map_or(0, NonZeroU64::get));
        env.push(first.semantics.into());
        put_str(&mut env, &first.channel);
        put_str(&mut env, &first.method);
        let base = base_of(self.requests.iter().map(|r| r.call_id)).unwrap_or(first.call_id);
        if self.form == IdForm::Offsets {
            put_u64(&mut env, base.get());
        }
        for r in &self.requests {
            put_id(&mut env, self.form, base, r.call_id);
            put_str(&mut env, r.idempotency_key.as_deref().unwrap_or_default());
        }
        let mut frames = Vec::with_capacity(self.requests.len().saturating_add(1));
        frames.push(env);
        frames.extend(self.requests.iter().map(|r| r.payload.to_vec()));
        frames
    }

    /// Decodes the body of a CALLS (`form` full) or CALLS16 (`form` offsets) envelope and
    /// its payload frames (`frames` is the whole message, `rest` the frames after the
    /// envelope), in the check order of WIRE.md §6.2: every body field is read (truncated,
    /// trailing bytes), then the frame count, then the field values.
    pub(super) fn decode<F: AsRef<[u8]>>(
        mut r: Reader<'_>,
        form: IdForm,
        frames: &[F],
        rest: &[F],
        take: &impl Fn(&F) -> Bytes,
    ) -> Result<Record, WireError> {
        let count = usize::from(r.u16("count")?);
        let ttl_ms = r.u64("ttl_ms")?;
        let semantics = r.u8("semantics")?;
        let channel = r.string("channel")?;
        let method = r.string("method")?;
        let base = match form {
            IdForm::Full => 0,
            IdForm::Offsets => r.u64("base")?,
        };
        let kind = match form {
            IdForm::Full => Kind::Calls,
            IdForm::Offsets => Kind::Calls16,
        };
        // Bounded by the frame: each call is at least 4 bytes, and a short frame stops the
        // reader with `truncated` before anything is reserved for it.
        let mut calls = Vec::new();
        for _ in 0..count {
            let call_id = read_id(&mut r, form)?;
            let key = r.string("idempotency_key")?;
            calls.push((call_id, key));
        }
        r.finish()?;
        let expected = count.saturating_add(1);
        if frames.len() != expected {
            return Err(WireError::FrameCount {
                kind: Some(kind),
                expected,
                found: frames.len(),
            });
        }
        if count < Self::MIN {
            return Err(WireError::invalid(
                Some(kind),
                "count",
                "a CALLS record holds 2..=65535 calls",
            ));
        }
        let ttl_ms = NonZeroU64::new(ttl_ms);
        let semantics = Semantics::try_from(semantics)?;
        let channel = Name::from_wire(channel, "channel")?;
        let method = Name::from_wire(method, "method")?;
        let base = match form {
            IdForm::Full => None,
            IdForm::Offsets => Some(check_base(kind, base, calls.iter().map(|(id, _)| *id))?),
        };
        let mut checked = Vec::with_capacity(count);
        for (call_id, key) in calls {
            checked.push((
                id_from(kind, form, base, call_id)?,
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
        Ok(Record::Calls(Calls { requests, form }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

    use super::*;

    fn req(id: u64, method: &str, ttl: u64) -> Request {
        Request {
            call_id: NonZeroU64::new(id).unwrap(),
            ttl_ms: NonZeroU64::new(ttl),
            semantics: Semantics::Query,
            channel: Name::new("pump").unwrap(),
            method: Name::new(method).unwrap(),
            idempotency_key: None,
            payload: Bytes::from(vec![id.to_le_bytes()[0]]),
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

    /// MISSION K5, X4: CALLS16 says the smallest id once and each id as a u16 offset: it
    /// round-trips, is exactly six bytes per call smaller than CALLS (less the base), is
    /// known only where `ids16` is in effect, and a record whose ids span more than 65535
    /// stays CALLS. A base that is not the smallest id, and an offset past u64, are invalid.
    #[test]
    fn k5_x4_calls16_write_ids_as_offsets_from_the_smallest() {
        use super::super::Capabilities as Caps;
        let calls: Vec<Request> = [9, 7, 8, 200]
            .into_iter()
            .map(|i| req(i, "read", 0))
            .collect();
        let full = Calls::new(calls.clone()).unwrap();
        let short = full.clone().with_offsets();
        assert_eq!(short.kind(), Kind::Calls16);
        let (long, frames) = (
            Record::Calls(full).encode(),
            Record::Calls(short.clone()).encode(),
        );
        assert_eq!(frames[0][3], 0x13);
        assert_eq!(long[0].len() - frames[0].len(), 4 * 6 - 8);
        let both = Caps::CALLS.union(Caps::IDS16);
        let back = Record::decode_in(&frames, both, |f| Bytes::copy_from_slice(f)).unwrap();
        assert_eq!(back, Record::Calls(short));
        assert!(Record::decode_in(&frames, Caps::CALLS, |f| Bytes::copy_from_slice(f)).is_err());
        let Record::Calls(c) = back else { panic!() };
        let ids: Vec<u64> = c.requests().iter().map(|r| r.call_id.get()).collect();
        assert_eq!(ids, [9, 7, 8, 200]);

        let wide = vec![req(1, "read", 0), req(65_537, "read", 0)];
        assert_eq!(Calls::new(wide).unwrap().with_offsets().kind(), Kind::Calls);

        // The base sits after the method (`00 04 r e a d`), the first offset after it.
        let at = frames[0].len() - 4 * 4 - 8;
        let decode = |f: &[Vec<u8>]| Record::decode_in(f, both, |f| Bytes::copy_from_slice(f));
        let mut not_smallest = frames.clone();
        not_smallest[0][at + 13] = 5; // call 7's offset: now no offset is 0
        let err = decode(&not_smallest).unwrap_err();
        assert_eq!(
            (err.class(), err.to_string().contains("base")),
            ("invalid_field", true)
        );
        let mut past = frames.clone();
        past[0][at..at + 8].copy_from_slice(&u64::MAX.to_be_bytes());
        let err = decode(&past).unwrap_err();
        assert_eq!(
            (err.class(), err.to_string().contains("offset")),
            ("invalid_field", true)
        );
    }
}
