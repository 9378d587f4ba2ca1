//! PACK (`12`, capability `pack`, WIRE.md §4.18): several MESSAGE records of one connection
//! and one channel in one ZeroMQ message, the channel said once and the payloads back to back
//! in one frame.

use bytes::Bytes;

use super::codec::{put_count, put_str, put_u16, Reader};
use super::{envelope, Kind, Message, Name, Record, WireError, HEADER_LEN};

/// PACK: 2..=64 MESSAGEs on one channel in one message of two frames. Frame 0 is the
/// envelope (count, channel, one u16 length per record), frame 1 the payloads back to back,
/// so a receiver hands out each payload as a slice of the one buffer frame 1 arrived in,
/// without a copy per payload. A receiver acts on each record exactly as on the MESSAGE it
/// stands for arriving alone, in order. Only where capability `pack` is in effect (WIRE.md
/// §8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pack {
    channel: Name,
    payloads: Vec<Bytes>,
}

impl Pack {
    /// The fewest records a PACK carries: a lone record is never wrapped.
    pub const MIN: usize = 2;
    /// The most records a PACK carries: the receive loop's count cap
    /// ([`crate::proto::sched::RECEIVE_COUNT_CAP`]), so one PACK never holds more records than
    /// one turn hands out.
    pub const MAX: usize = 64;
    /// The longest payload a PACK carries (its u16 length); a longer one travels as a MESSAGE.
    pub const MAX_RECORD: usize = u16::MAX as usize;
    /// The most payload bytes (frame 1) a PACK carries: a sender closes a pack before a record
    /// that would cross it, and a decoder refuses a longer frame 1.
    pub const MAX_BYTES: usize = 64 * 1024;

    /// Checks the count (2..=64), each payload's length (at most 65535 bytes) and their sum (at
    /// most 64 KiB). Fails with class `invalid_field`.
    pub fn new(channel: Name, payloads: Vec<Bytes>) -> Result<Self, WireError> {
        check_count(payloads.len())?;
        if payloads.iter().any(|p| p.len() > Self::MAX_RECORD) {
            return Err(WireError::invalid(
                Some(Kind::Pack),
                "lengths",
                "a PACK payload is at most 65535 bytes",
            ));
        }
        let total = payloads
            .iter()
            .fold(0usize, |sum, p| sum.saturating_add(p.len()));
        check_total(Kind::Pack, total, TOO_LONG)?;
        Ok(Self { channel, payloads })
    }

    /// The channel every record of the pack is for.
    pub fn channel(&self) -> &Name {
        &self.channel
    }

    /// The payloads, in wire order.
    pub fn payloads(&self) -> &[Bytes] {
        &self.payloads
    }

    /// The channel and the owned payloads.
    pub fn into_parts(self) -> (Name, Vec<Bytes>) {
        (self.channel, self.payloads)
    }

    /// The MESSAGE records the pack stands for, in order.
    pub fn messages(&self) -> impl Iterator<Item = Message> + '_ {
        self.payloads.iter().map(|p| Message {
            channel: self.channel.clone(),
            payload: p.clone(),
        })
    }

    /// Writes the two frames of the PACK of `payloads` on the channel of `message_envelope`
    /// (frame 0 of a MESSAGE, [`Message::encode_envelope`]) into `env` and `body`, which are
    /// cleared first: the sender's path, which holds MESSAGE envelopes and payloads rather
    /// than a [`Pack`]. The caller keeps to the bounds [`Pack::new`] checks (2..=64 payloads
    /// of at most 65535 bytes, at most 64 KiB together): the frames of anything else are not
    /// a valid PACK.
    pub fn write_frames<'a>(
        message_envelope: &[u8],
        payloads: impl Iterator<Item = &'a [u8]> + Clone,
        env: &mut Vec<u8>,
        body: &mut Vec<u8>,
    ) {
        env.clear();
        body.clear();
        env.extend_from_slice(&envelope(Kind::Pack));
        put_count(env, payloads.clone().count());
        // The channel string exactly as the MESSAGE envelope says it.
        env.extend_from_slice(message_envelope.get(HEADER_LEN..).unwrap_or_default());
        put_payloads(env, body, payloads);
    }

    /// The record's two frames: the envelope, then the payloads back to back.
    pub(super) fn encode(&self) -> Vec<Vec<u8>> {
        let mut env = envelope(Kind::Pack);
        put_count(&mut env, self.payloads.len());
        put_str(&mut env, &self.channel);
        let mut body = Vec::new();
        put_payloads(
            &mut env,
            &mut body,
            self.payloads.iter().map(|p| p.as_ref()),
        );
        vec![env, body]
    }

    /// Decodes the body of a PACK envelope and its payload frame, in the check order of
    /// WIRE.md §6.2: every body field is read (truncated, trailing bytes), then the frame
    /// count, then the values: count, channel, the lengths against frame 1, frame 1's bound.
    /// Frame 1 is taken once, with `take`, and each payload is a slice of it.
    pub(super) fn decode<F: AsRef<[u8]>>(
        mut r: Reader<'_>,
        frames: &[F],
        take: &impl Fn(&F) -> Bytes,
    ) -> Result<Record, WireError> {
        let count = usize::from(r.u16("count")?);
        let channel = r.string("channel")?;
        let lengths = read_lengths(&mut r, count)?;
        r.finish()?;
        let [_, body] = frames else {
            return Err(WireError::FrameCount {
                kind: Some(Kind::Pack),
                expected: 2,
                found: frames.len(),
            });
        };
        check_count(count)?;
        let channel = Name::from_wire(channel, "channel")?;
        check_lengths(
            Kind::Pack,
            &lengths,
            body.as_ref().len(),
            "the lengths of a PACK add up to the length of its frame 1",
            TOO_LONG,
        )?;
        // Every check passed: only now is frame 1 taken, once, and sliced.
        let payloads = slice_payloads(take(body), lengths);
        Ok(Record::Pack(Pack { channel, payloads }))
    }
}

/// The count of a PACK: 2..=64.
fn check_count(count: usize) -> Result<(), WireError> {
    if (Pack::MIN..=Pack::MAX).contains(&count) {
        Ok(())
    } else {
        Err(WireError::invalid(
            Some(Kind::Pack),
            "count",
            "a PACK holds 2..=64 records",
        ))
    }
}

/// Why a PACK is refused for its payload bytes.
const TOO_LONG: &str = "the payloads of a PACK are at most 65536 bytes together";

/// Writes one u16 length per payload into `env` and the payloads back to back into `body`:
/// the lengths and the payload frame of a PACK and of a PUBPACK (WIRE.md §4.18, §7.5).
pub(super) fn put_payloads<'a>(
    env: &mut Vec<u8>,
    body: &mut Vec<u8>,
    payloads: impl Iterator<Item = &'a [u8]>,
) {
    for p in payloads {
        put_u16(env, u16::try_from(p.len()).unwrap_or(u16::MAX));
        body.extend_from_slice(p);
    }
}

/// Reads `count` u16 lengths. Bounded by the frame: each length is 2 bytes, and a short
/// frame stops the reader with `truncated` before anything is reserved for it beyond the
/// lengths of a valid PACK or PUBPACK ([`Pack::MAX`], reserved at once rather than grown to).
pub(super) fn read_lengths(r: &mut Reader<'_>, count: usize) -> Result<Vec<usize>, WireError> {
    let mut lengths = Vec::with_capacity(count.min(Pack::MAX));
    for _ in 0..count {
        lengths.push(usize::from(r.u16("lengths")?));
    }
    Ok(lengths)
}

/// The lengths of a PACK or a PUBPACK (`kind`) against its payload frame of `frame_len`
/// bytes: they add up to it (`mismatch` otherwise), and it holds at most 64 KiB
/// (`too_long` otherwise). Fails with class `invalid_field`.
pub(super) fn check_lengths(
    kind: Kind,
    lengths: &[usize],
    frame_len: usize,
    mismatch: &'static str,
    too_long: &'static str,
) -> Result<(), WireError> {
    let total = lengths.iter().fold(0usize, |sum, l| sum.saturating_add(*l));
    if total != frame_len {
        return Err(WireError::invalid(Some(kind), "lengths", mismatch));
    }
    check_total(kind, total, too_long)
}

/// The payload bytes of a PACK or a PUBPACK (`kind`): at most 64 KiB (`too_long`
/// otherwise). Fails with class `invalid_field`.
pub(super) fn check_total(
    kind: Kind,
    total: usize,
    too_long: &'static str,
) -> Result<(), WireError> {
    if total <= Pack::MAX_BYTES {
        Ok(())
    } else {
        Err(WireError::invalid(Some(kind), "payloads", too_long))
    }
}

/// The payloads of the payload frame `all`, each a slice of it, by `lengths` (checked
/// against it by [`check_lengths`]).
pub(super) fn slice_payloads(all: Bytes, lengths: Vec<usize>) -> Vec<Bytes> {
    let mut payloads = Vec::with_capacity(lengths.len());
    let mut at = 0usize;
    for len in lengths {
        let end = at.saturating_add(len);
        if end > all.len() {
            // The lengths add up to the frame's length, checked before.
            break;
        }
        payloads.push(all.slice(at..end));
        at = end;
    }
    payloads
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::super::Capabilities;
    use super::*;

    fn pack(n: usize) -> Pack {
        let payloads = (0..n).map(|i| Bytes::from(vec![i as u8; i])).collect();
        Pack::new(Name::new("orders").unwrap(), payloads).unwrap()
    }

    fn decode(frames: &[Vec<u8>]) -> Result<Record, WireError> {
        Record::decode_in(frames, Capabilities::PACK, |f| Bytes::copy_from_slice(f))
    }

    /// MISSION X3, X4: a PACK survives encode and decode unchanged, its payloads slices of
    /// the one frame-1 buffer; the sender's path writes the same bytes; it is unknown where
    /// `pack` is not in effect; a lone record, 65 records, a long payload or more than 64 KiB
    /// are refused on both sides.
    #[test]
    fn x4_x3_pack_round_trips_and_keeps_its_bounds() {
        let p = pack(3);
        let record = Record::Pack(p.clone());
        let frames = record.encode();
        assert_eq!(frames.len(), 2);
        let shared = Bytes::from(frames[1].clone());
        let back = Record::decode_in(&frames, Capabilities::PACK, |_| shared.clone()).unwrap();
        assert_eq!(back, record);
        let Record::Pack(back) = back else {
            unreachable!()
        };
        for b in back.payloads().iter().filter(|b| !b.is_empty()) {
            let inside = shared.as_ptr_range();
            assert!(
                inside.contains(&b.as_ptr()),
                "a slice of frame 1, not a copy"
            );
        }
        let (mut env, mut body) = (Vec::new(), Vec::new());
        let menv = Message::encode_envelope(p.channel());
        Pack::write_frames(
            &menv,
            p.payloads().iter().map(|b| b.as_ref()),
            &mut env,
            &mut body,
        );
        assert_eq!(vec![env, body], frames);
        assert!(matches!(
            Record::decode(&frames),
            Err(WireError::UnknownKind { kind: 0x12 })
        ));
        let name = || Name::new("orders").unwrap();
        assert!(
            Pack::new(name(), vec![Bytes::new()]).is_err(),
            "lone record"
        );
        assert!(
            Pack::new(name(), vec![Bytes::new(); 65]).is_err(),
            "65 records"
        );
        assert!(Pack::new(name(), vec![Bytes::new(); 64]).is_ok());
        let long = Bytes::from(vec![0; 65536]);
        assert!(Pack::new(name(), vec![long, Bytes::new()]).is_err());
        let half = Bytes::from(vec![0; 32768]);
        assert!(Pack::new(name(), vec![half.clone(), half.clone()]).is_ok());
        assert!(Pack::new(name(), vec![half.clone(), half, Bytes::new()]).is_ok());
        let over = vec![Bytes::from(vec![0; 30000]); 3];
        assert!(Pack::new(name(), over).is_err(), "more than 64 KiB");
    }

    /// MISSION X4, W3: malformed PACKs are typed errors in the order of WIRE.md §6.2, never a
    /// panic: count 0 and 1, count 65, truncated lengths, trailing bytes, a missing or extra
    /// frame, lengths that do not add up to frame 1, a frame 1 over 64 KiB.
    #[test]
    fn x4_malformed_packs_are_typed_errors() {
        let frames = Record::Pack(pack(3)).encode();
        let env = &frames[0];
        let class = |f: &[Vec<u8>]| decode(f).unwrap_err().class();
        let with_count = |n: u16| {
            let mut e = env.clone();
            e[4..6].copy_from_slice(&n.to_be_bytes());
            e
        };
        // Count 0 and 1 with as many lengths: a lone record is never wrapped.
        let mut zero = with_count(0);
        zero.truncate(env.len() - 6);
        assert_eq!(class(&[zero, Vec::new()]), "invalid_field");
        let mut one = with_count(1);
        one.truncate(env.len() - 4);
        assert_eq!(class(&[one, vec![]]), "invalid_field");
        // Count 65 with 65 lengths of 0.
        let mut many = with_count(65);
        many.truncate(env.len() - 6);
        many.extend(std::iter::repeat_n(0u8, 130));
        assert_eq!(class(&[many, vec![]]), "invalid_field");
        // Count 3 with two lengths: truncated.
        assert_eq!(
            class(&[env[..env.len() - 1].to_vec(), frames[1].clone()]),
            "truncated"
        );
        assert_eq!(class(&[with_count(4), frames[1].clone()]), "truncated");
        let mut trailing = env.clone();
        trailing.push(0);
        assert_eq!(class(&[trailing, frames[1].clone()]), "trailing_bytes");
        assert_eq!(class(&frames[..1]), "frame_count");
        let mut extra = frames.clone();
        extra.push(vec![]);
        assert_eq!(class(&extra), "frame_count");
        let mut short = frames[1].clone();
        short.pop();
        assert_eq!(class(&[env.clone(), short]), "invalid_field");
        let mut channel = env.clone();
        channel[6..8].copy_from_slice(&0u16.to_be_bytes());
        channel.drain(8..14);
        assert_eq!(class(&[channel, frames[1].clone()]), "invalid_field");
        // Two payloads of 65535 and 2: add up, but over 64 KiB.
        let mut big = with_count(2);
        big.truncate(env.len() - 6);
        big.extend_from_slice(&[0xFF, 0xFF, 0x00, 0x02]);
        assert_eq!(class(&[big, vec![0; 65537]]), "invalid_field");
        // Every prefix of a valid envelope is an error, never a panic.
        for n in 0..env.len() {
            assert!(decode(&[env[..n].to_vec(), frames[1].clone()]).is_err());
        }
    }
}
