//! PUBPACK (`15`, capability `pubpack`, WIRE.md §7.5): several PUBLISH records of one topic
//! in one fanout message, the topic in frame 0 as for a PUBLISH (SUB filters see it), the
//! sequence numbers said once as the first and a count, and the payloads back to back in one
//! frame.

use std::num::NonZeroU64;

use bytes::Bytes;

use super::codec::{put_count, put_u64, Reader};
use super::fanout::check_topic;
use super::pack::{check_lengths, check_total, put_payloads, read_lengths, slice_payloads};

/// Why a PUBPACK is refused for its payload bytes.
const TOO_LONG: &str = "the payloads of a PUBPACK are at most 65536 bytes together";
use super::{envelope, FanoutMessage, Kind, WireError};

/// PUBPACK: 2..=64 PUBLISH records of one topic and one publisher generation, with
/// consecutive sequence numbers, in one fanout message of three frames: the topic, the
/// envelope (generation, the first record's seq, the count, one u16 length per record) and
/// the payloads back to back, so a subscriber hands out each payload as a slice of the one
/// buffer frame 2 arrived in. Record *i* is the PUBLISH with seq `first_seq + i` and payload
/// *i*; a subscriber acts on each exactly as on that PUBLISH arriving alone, in order. Only
/// on a publisher's socket where capability `pubpack` is in effect (WIRE.md §7.5, §8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubPack {
    topic: Bytes,
    generation: NonZeroU64,
    first_seq: u64,
    payloads: Vec<Bytes>,
}

impl PubPack {
    /// The fewest records a PUBPACK carries: a lone record is never wrapped.
    pub const MIN: usize = 2;
    /// The most records a PUBPACK carries: the receive loop's count cap
    /// ([`crate::proto::sched::RECEIVE_COUNT_CAP`]), as for a PACK.
    pub const MAX: usize = 64;
    /// The longest payload a PUBPACK carries (its u16 length); a longer one travels as a
    /// PUBLISH.
    pub const MAX_RECORD: usize = u16::MAX as usize;
    /// The most payload bytes (frame 2) a PUBPACK carries: a decoder refuses a longer frame 2.
    pub const MAX_BYTES: usize = 64 * 1024;
    /// The length of the envelope before the lengths: header, generation, first seq, count.
    pub const FIXED_LEN: usize = 22;

    /// Checks the topic (1..=255 bytes, not exactly the beacon topic), the count (2..=64),
    /// that the last record's seq fits in a u64, each payload's length (at most 65535 bytes)
    /// and their sum (at most 64 KiB). Fails with class `invalid_field`.
    pub fn new(
        topic: Bytes,
        generation: NonZeroU64,
        first_seq: u64,
        payloads: Vec<Bytes>,
    ) -> Result<Self, WireError> {
        check_topic(&topic, Kind::PubPack)?;
        check_count(payloads.len())?;
        check_seqs(first_seq, payloads.len())?;
        if payloads.iter().any(|p| p.len() > Self::MAX_RECORD) {
            return Err(WireError::invalid(
                Some(Kind::PubPack),
                "lengths",
                "a PUBPACK payload is at most 65535 bytes",
            ));
        }
        let total = payloads
            .iter()
            .fold(0usize, |sum, p| sum.saturating_add(p.len()));
        check_total(Kind::PubPack, total, TOO_LONG)?;
        Ok(Self {
            topic,
            generation,
            first_seq,
            payloads,
        })
    }

    /// The topic of every record.
    pub fn topic(&self) -> &Bytes {
        &self.topic
    }

    /// The publisher's lifecycle generation.
    pub fn generation(&self) -> NonZeroU64 {
        self.generation
    }

    /// The sequence number of the first record; record *i* has `first_seq + i`.
    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// The payloads, in wire order.
    pub fn payloads(&self) -> &[Bytes] {
        &self.payloads
    }

    /// The topic and the owned payloads.
    pub fn into_parts(self) -> (Bytes, Vec<Bytes>) {
        (self.topic, self.payloads)
    }

    /// The PUBLISH records the pack stands for, in order, each with its own seq.
    pub fn publishes(&self) -> impl Iterator<Item = FanoutMessage> + '_ {
        (self.first_seq..)
            .zip(&self.payloads)
            .map(|(seq, p)| FanoutMessage::Publish {
                topic: self.topic.clone(),
                generation: self.generation,
                seq,
                payload: p.clone(),
            })
    }

    /// Writes frames 1 and 2 of the PUBPACK of `payloads` (generation `generation`, the first
    /// record's seq `first_seq`) into `env` and `body`, which are cleared first; frame 0 is
    /// the topic byte for byte: the sender's path, which holds payloads rather than a
    /// [`PubPack`]. The caller keeps to the bounds [`PubPack::new`] checks (a valid topic,
    /// 2..=64 payloads of at most 65535 bytes, at most 64 KiB together, the last seq within
    /// a u64): the frames of anything else are not a valid PUBPACK.
    pub fn write_frames<'a>(
        generation: NonZeroU64,
        first_seq: u64,
        payloads: impl Iterator<Item = &'a [u8]> + Clone,
        env: &mut Vec<u8>,
        body: &mut Vec<u8>,
    ) {
        env.clear();
        body.clear();
        env.extend_from_slice(&envelope(Kind::PubPack));
        put_u64(env, generation.get());
        put_u64(env, first_seq);
        put_count(env, payloads.clone().count());
        put_payloads(env, body, payloads);
    }

    /// The message's three frames: the topic, the envelope, the payloads back to back.
    pub(super) fn encode(&self) -> Vec<Vec<u8>> {
        let (mut env, mut body) = (Vec::new(), Vec::new());
        Self::write_frames(
            self.generation,
            self.first_seq,
            self.payloads.iter().map(|p| p.as_ref()),
            &mut env,
            &mut body,
        );
        vec![self.topic.to_vec(), env, body]
    }

    /// Decodes the body of a PUBPACK envelope (frame 1) with the frames around it, in the
    /// check order of WIRE.md §6.3: every body field is read (truncated, trailing bytes),
    /// then the frame count, then the values: the topic, the generation, the count, the last
    /// seq, the lengths against frame 2, frame 2's bound. Frames 0 and 2 are taken once each,
    /// with `take`, only after every check passed, and each payload is a slice of frame 2.
    pub(super) fn decode<F: AsRef<[u8]>>(
        mut r: Reader<'_>,
        frames: &[F],
        take: &impl Fn(&F) -> Bytes,
    ) -> Result<PubPack, WireError> {
        let generation = r.u64("generation")?;
        let first_seq = r.u64("first_seq")?;
        let count = usize::from(r.u16("count")?);
        let lengths = read_lengths(&mut r, count)?;
        r.finish()?;
        let [topic_frame, _, body] = frames else {
            return Err(WireError::FrameCount {
                kind: Some(Kind::PubPack),
                expected: 3,
                found: frames.len(),
            });
        };
        check_topic(topic_frame.as_ref(), Kind::PubPack)?;
        let generation = NonZeroU64::new(generation).ok_or(WireError::invalid(
            Some(Kind::PubPack),
            "generation",
            "must be non-zero",
        ))?;
        check_count(count)?;
        check_seqs(first_seq, count)?;
        check_lengths(
            Kind::PubPack,
            &lengths,
            body.as_ref().len(),
            "the lengths of a PUBPACK add up to the length of its frame 2",
            TOO_LONG,
        )?;
        // Every check passed: only now are the frames taken, once each, and frame 2 sliced.
        let payloads = slice_payloads(take(body), lengths);
        Ok(PubPack {
            topic: take(topic_frame),
            generation,
            first_seq,
            payloads,
        })
    }
}

/// The count of a PUBPACK: 2..=64.
fn check_count(count: usize) -> Result<(), WireError> {
    if (PubPack::MIN..=PubPack::MAX).contains(&count) {
        Ok(())
    } else {
        Err(WireError::invalid(
            Some(Kind::PubPack),
            "count",
            "a PUBPACK holds 2..=64 records",
        ))
    }
}

/// The seqs of a PUBPACK: the last, `first_seq + count - 1`, within a u64.
fn check_seqs(first_seq: u64, count: usize) -> Result<(), WireError> {
    let more = u64::try_from(count.saturating_sub(1)).unwrap_or(u64::MAX);
    if first_seq.checked_add(more).is_some() {
        Ok(())
    } else {
        Err(WireError::invalid(
            Some(Kind::PubPack),
            "first_seq",
            "the last record's seq is beyond 2^64 - 1",
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

    use super::super::{Capabilities, BEACON_TOPIC};
    use super::*;

    fn gen() -> NonZeroU64 {
        NonZeroU64::new(7).unwrap()
    }

    fn pack(n: usize) -> PubPack {
        let payloads = (0..n).map(|i| Bytes::from(vec![i as u8; i])).collect();
        PubPack::new(Bytes::from_static(b"prices"), gen(), 41, payloads).unwrap()
    }

    fn decode(frames: &[Vec<u8>]) -> Result<FanoutMessage, WireError> {
        FanoutMessage::decode_in(frames, Capabilities::PUBPACK, |f| Bytes::copy_from_slice(f))
    }

    /// MISSION X3, X4: a PUBPACK survives encode and decode unchanged, its payloads slices of
    /// the one frame-2 buffer and its records the PUBLISHes with consecutive seqs; the
    /// sender's path writes the same bytes; the kind is unknown where `pubpack` is not in
    /// effect; a lone record, 65 records, a long payload, more than 64 KiB, a last seq beyond
    /// a u64 and the beacon topic are refused on both sides.
    #[test]
    fn x4_x3_pubpack_round_trips_and_keeps_its_bounds() {
        let p = pack(3);
        let msg = FanoutMessage::PubPack(p.clone());
        let frames = msg.encode().unwrap();
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0], b"prices");
        let shared = Bytes::from(frames[2].clone());
        let back = FanoutMessage::decode_in(&frames, Capabilities::PUBPACK, |f| {
            if f.as_slice() == frames[2].as_slice() {
                shared.clone()
            } else {
                Bytes::copy_from_slice(f)
            }
        })
        .unwrap();
        assert_eq!(back, msg);
        let FanoutMessage::PubPack(back) = back else {
            unreachable!()
        };
        for b in back.payloads().iter().filter(|b| !b.is_empty()) {
            assert!(
                shared.as_ptr_range().contains(&b.as_ptr()),
                "a slice of frame 2, not a copy"
            );
        }
        let seqs: Vec<u64> = back
            .publishes()
            .map(|m| match m {
                FanoutMessage::Publish { seq, .. } => seq,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seqs, [41, 42, 43]);
        let (mut env, mut body) = (Vec::new(), Vec::new());
        PubPack::write_frames(
            gen(),
            41,
            p.payloads().iter().map(|b| b.as_ref()),
            &mut env,
            &mut body,
        );
        assert_eq!(vec![b"prices".to_vec(), env, body], frames);
        assert!(matches!(
            FanoutMessage::decode(&frames),
            Err(WireError::UnknownKind { kind: 0x15 })
        ));
        let new = |topic: &[u8], first: u64, payloads: Vec<Bytes>| {
            PubPack::new(Bytes::copy_from_slice(topic), gen(), first, payloads)
        };
        assert!(new(b"t", 1, vec![Bytes::new()]).is_err(), "lone record");
        assert!(new(b"t", 1, vec![Bytes::new(); 65]).is_err(), "65 records");
        assert!(new(b"t", 1, vec![Bytes::new(); 64]).is_ok());
        assert!(new(b"t", u64::MAX - 63, vec![Bytes::new(); 64]).is_ok());
        assert!(new(b"t", u64::MAX - 62, vec![Bytes::new(); 64]).is_err());
        assert!(new(&BEACON_TOPIC, 1, vec![Bytes::new(); 2]).is_err());
        assert!(new(b"", 1, vec![Bytes::new(); 2]).is_err());
        let long = Bytes::from(vec![0; 65536]);
        assert!(new(b"t", 1, vec![long, Bytes::new()]).is_err());
        let half = Bytes::from(vec![0; 32768]);
        assert!(new(b"t", 1, vec![half.clone(), half]).is_ok());
        let over = vec![Bytes::from(vec![0; 30000]); 3];
        assert!(new(b"t", 1, over).is_err(), "more than 64 KiB");
    }

    /// MISSION X4, W3: malformed PUBPACKs are typed errors in the order of WIRE.md §6.3,
    /// never a panic.
    #[test]
    fn x4_rejects_malformed_pubpacks_in_wire_order() {
        let frames = FanoutMessage::PubPack(pack(3)).encode().unwrap();
        let [topic, env, body] = [&frames[0], &frames[1], &frames[2]].map(Clone::clone);
        let class = |f: &[Vec<u8>]| decode(f).unwrap_err().class();
        let with = |at: usize, bytes: &[u8]| {
            let mut e = env.clone();
            e[at..at + bytes.len()].copy_from_slice(bytes);
            e
        };
        // Count 1 with one length, count 0 with none, count 65 with 65.
        let head = |n: u16| {
            let mut e = with(20, &n.to_be_bytes());
            e.truncate(PubPack::FIXED_LEN);
            e
        };
        let mut one = head(1);
        one.extend_from_slice(&[0, 1]);
        assert_eq!(class(&[topic.clone(), one, vec![9]]), "invalid_field");
        assert_eq!(class(&[topic.clone(), head(0), vec![]]), "invalid_field");
        let mut many = head(65);
        many.extend(std::iter::repeat_n(0u8, 130));
        assert_eq!(class(&[topic.clone(), many, vec![]]), "invalid_field");
        // Structure before values: truncated, trailing, frame count.
        assert_eq!(
            class(&[topic.clone(), env[..env.len() - 1].to_vec(), body.clone()]),
            "truncated"
        );
        assert_eq!(
            class(&[topic.clone(), with(20, &[0, 4]), body.clone()]),
            "truncated"
        );
        let mut trailing = env.clone();
        trailing.push(0);
        assert_eq!(
            class(&[topic.clone(), trailing, body.clone()]),
            "trailing_bytes"
        );
        assert_eq!(class(&[topic.clone(), env.clone()]), "frame_count");
        assert_eq!(
            class(&[topic.clone(), env.clone(), body.clone(), vec![]]),
            "frame_count"
        );
        // Values in wire order: topic, generation, count, last seq, lengths, bound.
        assert_eq!(class(&[vec![], env.clone(), body.clone()]), "invalid_field");
        assert_eq!(
            class(&[vec![b't'; 256], env.clone(), body.clone()]),
            "invalid_field"
        );
        let zero_gen = with(4, &[0; 8]);
        assert_eq!(
            class(&[topic.clone(), zero_gen, body.clone()]),
            "invalid_field"
        );
        let late = with(12, &(u64::MAX - 1).to_be_bytes());
        assert_eq!(class(&[topic.clone(), late, body.clone()]), "invalid_field");
        let mut short = body.clone();
        short.pop();
        assert_eq!(class(&[topic.clone(), env.clone(), short]), "invalid_field");
        let mut long = body.clone();
        long.push(0);
        assert_eq!(class(&[topic.clone(), env.clone(), long]), "invalid_field");
        let mut big = head(2);
        big.extend_from_slice(&[0xFF, 0xFF, 0x00, 0x02]);
        assert_eq!(
            class(&[topic.clone(), big, vec![0; 65537]]),
            "invalid_field"
        );
        // On the reserved topic the beacon rule comes first.
        assert_eq!(
            class(&[BEACON_TOPIC.to_vec(), env.clone(), body.clone()]),
            "reserved_topic"
        );
        // Every prefix of a valid envelope is an error, never a panic.
        for n in 0..env.len() {
            assert!(decode(&[topic.clone(), env[..n].to_vec(), body.clone()]).is_err());
        }
    }
}
