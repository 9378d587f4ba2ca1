//! ANSWERS (`11`, capability `answers`, WIRE.md §4.16): the ACCEPTs and REPLYs of several
//! calls of one connection in one message, the acceptor's generation and connection id said
//! once; ANSWERS16 (`14`, capability `ids16`, §4.19) the same with the call ids as offsets
//! from the smallest.

use std::num::NonZeroU64;

use bytes::Bytes;

use super::codec::{put_count, put_u64, Reader};
use super::offsets::{base_of, check_base, id_from, put_id, read_id, IdForm};
use super::{
    code_byte, envelope, non_zero, read_code, Accept, Capabilities, Kind, Record, Reply, ReplyCode,
    WireError,
};

/// What one entry of an ANSWERS record carries for its call: its ACCEPT, its REPLY, or the
/// ACCEPT then the REPLY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The call's ACCEPT (wire `what` = 1).
    Accept,
    /// The call's REPLY (wire `what` = 2): its code, the next payload frame, and whether it
    /// was replayed ([`Reply::replayed`], bit 7 of the code byte, WIRE.md §4.17).
    Reply(ReplyCode, Bytes, bool),
    /// The call's ACCEPT, then its REPLY (wire `what` = 3), the REPLY as in
    /// [`Answer::Reply`].
    AcceptReply(ReplyCode, Bytes, bool),
}

impl Answer {
    /// The entry's `what` byte.
    fn what(&self) -> u8 {
        match self {
            Answer::Accept => 1,
            Answer::Reply(..) => 2,
            Answer::AcceptReply(..) => 3,
        }
    }

    /// The REPLY's code, payload and replayed mark, if the entry carries one.
    fn reply(&self) -> Option<(ReplyCode, &Bytes, bool)> {
        match self {
            Answer::Accept => None,
            Answer::Reply(code, payload, replayed)
            | Answer::AcceptReply(code, payload, replayed) => Some((*code, payload, *replayed)),
        }
    }

    /// How many records the entry stands for (1 or 2).
    fn records(&self) -> usize {
        match self {
            Answer::AcceptReply(..) => 2,
            Answer::Accept | Answer::Reply(..) => 1,
        }
    }
}

/// ANSWERS: the answers of 1..=65535 calls of one connection, in order, standing for at
/// least two records. Each entry is exactly the ACCEPT and/or REPLY it names arriving alone
/// in its place: the ACCEPTs carry the record's `generation` and `connection_id`, which every
/// ACCEPT of one connection shares. Only where capability `answers` is in effect (WIRE.md
/// §8.1); in the offset form ([`Answers::with_offsets`], kind ANSWERS16) only where `ids16`
/// is too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answers {
    generation: NonZeroU64,
    connection_id: u64,
    entries: Vec<(NonZeroU64, Answer)>,
    form: IdForm,
}

impl Answers {
    /// The most entries one ANSWERS record can carry (its u16 count).
    pub const MAX: usize = u16::MAX as usize;

    /// Checks the count: 1..=65535 entries standing for two records or more (a lone ACCEPT
    /// or REPLY is never wrapped). Fails with class `invalid_field`.
    pub fn new(
        generation: NonZeroU64,
        connection_id: u64,
        entries: Vec<(NonZeroU64, Answer)>,
    ) -> Result<Self, WireError> {
        Self::check_count(
            Kind::Answers,
            entries.len(),
            entries.iter().map(|(_, a)| a.records()).sum(),
        )?;
        Ok(Self {
            generation,
            connection_id,
            entries,
            form: IdForm::Full,
        })
    }

    /// The record in the offset form (kind ANSWERS16, WIRE.md §4.19: the smallest call id
    /// once, each id as a u16 offset from it) if its ids are within 65535 of each other;
    /// unchanged otherwise. Only where capability `ids16` is in effect.
    #[must_use]
    pub fn with_offsets(mut self) -> Self {
        if base_of(self.entries.iter().map(|(id, _)| *id)).is_some() {
            self.form = IdForm::Offsets;
        }
        self
    }

    /// How the record writes its call ids.
    pub fn form(&self) -> IdForm {
        self.form
    }

    /// The record's kind: ANSWERS, or ANSWERS16 in the offset form.
    pub fn kind(&self) -> Kind {
        match self.form {
            IdForm::Full => Kind::Answers,
            IdForm::Offsets => Kind::Answers16,
        }
    }

    fn check_count(kind: Kind, count: usize, records: usize) -> Result<(), WireError> {
        if count == 0 || count > Self::MAX || records < 2 {
            return Err(WireError::invalid(
                Some(kind),
                "count",
                "an ANSWERS record holds 1..=65535 entries standing for two records or more",
            ));
        }
        Ok(())
    }

    /// The entries, in wire order.
    pub fn entries(&self) -> &[(NonZeroU64, Answer)] {
        &self.entries
    }

    /// How many ACCEPTs and REPLYs the entries stand for.
    pub fn records(&self) -> usize {
        self.entries.iter().map(|(_, a)| a.records()).sum()
    }

    /// The records the entries stand for, in order: what a receiver acts on, exactly as if
    /// each had arrived alone.
    pub fn into_records(self) -> impl Iterator<Item = Record> {
        let (generation, connection_id) = (self.generation, self.connection_id);
        self.entries.into_iter().flat_map(move |(call_id, answer)| {
            let accept = Record::Accept(Accept {
                call_id,
                generation,
                connection_id,
            });
            let reply = |code, payload, replayed| {
                Record::Reply(Reply {
                    call_id,
                    code,
                    payload,
                    replayed,
                })
            };
            match answer {
                Answer::Accept => [Some(accept), None],
                Answer::Reply(code, payload, replayed) => {
                    [Some(reply(code, payload, replayed)), None]
                }
                Answer::AcceptReply(code, payload, replayed) => {
                    [Some(accept), Some(reply(code, payload, replayed))]
                }
            }
            .into_iter()
            .flatten()
        })
    }

    /// The record's frames: the envelope with the shared fields (in the offset form, the
    /// base after them) and each entry's call id, `what` and code, then one payload frame per
    /// REPLY, in order.
    pub(super) fn encode(&self) -> Vec<Vec<u8>> {
        let mut env = envelope(self.kind());
        put_count(&mut env, self.entries.len());
        put_u64(&mut env, self.generation.get());
        put_u64(&mut env, self.connection_id);
        let base = base_of(self.entries.iter().map(|(id, _)| *id)).unwrap_or(NonZeroU64::MIN);
        if self.form == IdForm::Offsets {
            put_u64(&mut env, base.get());
        }
        let mut payloads = Vec::new();
        for (call_id, answer) in &self.entries {
            put_id(&mut env, self.form, base, *call_id);
            env.push(answer.what());
            if let Some((code, payload, replayed)) = answer.reply() {
                env.push(code_byte(code, replayed));
                payloads.push(payload.to_vec());
            }
        }
        let mut frames = Vec::with_capacity(payloads.len().saturating_add(1));
        frames.push(env);
        frames.extend(payloads);
        frames
    }

    /// Decodes the body of an ANSWERS (`form` full) or ANSWERS16 (`form` offsets) envelope
    /// and its payload frames (`frames` is the whole message, `rest` the frames after the
    /// envelope), in the check order of WIRE.md §6.2:
    /// every body field is read (truncated, trailing bytes), then the frame count, then the
    /// field values in wire order. A code byte carries the replayed mark only where `caps`
    /// hold [`Capabilities::REPLAYED`] (WIRE.md §4.17).
    pub(super) fn decode<F: AsRef<[u8]>>(
        mut r: Reader<'_>,
        form: IdForm,
        caps: Capabilities,
        frames: &[F],
        rest: &[F],
        take: &impl Fn(&F) -> Bytes,
    ) -> Result<Record, WireError> {
        let count = usize::from(r.u16("count")?);
        let generation = r.u64("generation")?;
        let connection_id = r.u64("connection_id")?;
        let (kind, base) = match form {
            IdForm::Full => (Kind::Answers, 0),
            IdForm::Offsets => (Kind::Answers16, r.u64("base")?),
        };
        // Bounded by the frame: each entry is at least 3 bytes, and a short frame stops the
        // reader with `truncated` before anything is reserved for it.
        let mut raw = Vec::new();
        for _ in 0..count {
            let call_id = read_id(&mut r, form)?;
            let what = r.u8("what")?;
            // The code is there exactly when `what` says a REPLY; an unknown `what` is
            // judged with the values below, so it reads no code.
            let code = if what & 2 != 0 && what <= 3 {
                Some(r.u8("code")?)
            } else {
                None
            };
            raw.push((call_id, what, code));
        }
        r.finish()?;
        let replies = raw.iter().filter(|(_, _, code)| code.is_some()).count();
        let expected = replies.saturating_add(1);
        if frames.len() != expected {
            return Err(WireError::FrameCount {
                kind: Some(kind),
                expected,
                found: frames.len(),
            });
        }
        let records = raw
            .iter()
            .map(|(_, what, _)| if *what == 3 { 2 } else { 1 })
            .sum();
        Self::check_count(kind, count, records)?;
        let generation = non_zero(generation, "generation")?;
        let base = match form {
            IdForm::Full => None,
            IdForm::Offsets => Some(check_base(kind, base, raw.iter().map(|(id, _, _)| *id))?),
        };
        let mut checked = Vec::with_capacity(count);
        for (call_id, what, code) in raw {
            let call_id = id_from(kind, form, base, call_id)?;
            if !(1..=3).contains(&what) {
                return Err(WireError::invalid(
                    Some(kind),
                    "what",
                    "an entry's what is 1 (ACCEPT), 2 (REPLY) or 3 (ACCEPT then REPLY)",
                ));
            }
            let code = code.map(|c| read_code(c, caps)).transpose()?;
            checked.push((call_id, what, code));
        }
        // Every check passed: only now are the payloads taken.
        let mut payloads = rest.iter();
        let mut entries = Vec::with_capacity(count);
        for (call_id, what, code) in checked {
            let answer = match (what, code) {
                (_, None) => Answer::Accept,
                (2, Some((code, replayed))) => Answer::Reply(
                    code,
                    payloads.next().map(take).unwrap_or_default(),
                    replayed,
                ),
                (_, Some((code, replayed))) => Answer::AcceptReply(
                    code,
                    payloads.next().map(take).unwrap_or_default(),
                    replayed,
                ),
            };
            entries.push((call_id, answer));
        }
        Ok(Record::Answers(Answers {
            generation,
            connection_id,
            entries,
            form,
        }))
    }
}

/// Most entries of one ANSWERS record zmesh sends: the receive loop's per-turn record count,
/// so one record never carries more answers than a turn would take one at a time.
pub const ANSWERS_MAX_ENTRIES: usize = 64;

/// Most payload bytes of the REPLYs of one ANSWERS record zmesh sends. A REPLY that would
/// take a record past it starts the next one (a REPLY bigger than this travels on its own),
/// so a record stays small beside the receive loop's byte cap.
pub const ANSWERS_MAX_PAYLOAD: usize = 16 * 1024;

/// One answer waiting to leave on a connection, as [`pack_front`] sees it.
#[derive(Debug, Clone, Copy)]
pub enum Pending<'a> {
    /// The ACCEPT of the call with this id.
    Accept(NonZeroU64),
    /// A REPLY.
    Reply(&'a Reply),
    /// Any other record: a pack never reaches past it.
    Other,
}

/// The ANSWERS entries of the ACCEPTs and REPLYs at the front of `queue` (answers of one
/// connection, in the order they are to leave), and how many of them the entries carry: an
/// ACCEPT followed by its call's REPLY makes one entry; the pack stops before anything that
/// is not an answer, at `max_entries` entries, and before a REPLY that would take its
/// payloads past `max_payload` bytes (unless it is the first answer). The entries make an
/// ANSWERS record only if they stand for two records or more ([`Answers::new`] says).
pub fn pack_front<'a>(
    queue: impl IntoIterator<Item = Pending<'a>>,
    max_entries: usize,
    max_payload: usize,
) -> (Vec<(NonZeroU64, Answer)>, usize) {
    let mut entries: Vec<(NonZeroU64, Answer)> = Vec::new();
    let (mut used, mut payload) = (0usize, 0usize);
    for pending in queue {
        let full = entries.len() >= max_entries;
        let reply = match pending {
            Pending::Accept(_) if full => break,
            Pending::Accept(call_id) => {
                entries.push((call_id, Answer::Accept));
                used = used.saturating_add(1);
                continue;
            }
            Pending::Reply(r) => r,
            Pending::Other => break,
        };
        let size = payload.saturating_add(reply.payload.len());
        if used > 0 && size > max_payload {
            break;
        }
        match entries.last_mut() {
            Some((id, last @ Answer::Accept)) if *id == reply.call_id => {
                *last = Answer::AcceptReply(reply.code, reply.payload.clone(), reply.replayed);
            }
            _ if full => break,
            _ => entries.push((
                reply.call_id,
                Answer::Reply(reply.code, reply.payload.clone(), reply.replayed),
            )),
        }
        payload = size;
        used = used.saturating_add(1);
    }
    (entries, used)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

    use super::*;
    use crate::proto::wire::Capabilities;

    fn id(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    fn decode(frames: &[Vec<u8>]) -> Result<Record, WireError> {
        Record::decode_in(frames, Capabilities::ANSWERS, |f| Bytes::copy_from_slice(f))
    }

    /// MISSION K5, X4: ANSWERS16 says the smallest id once and each id as a u16 offset:
    /// entries keep their order (ids may fall), it round-trips, saves six bytes an entry
    /// (less the base), is known only where `ids16` is in effect, and stays ANSWERS where
    /// the ids span more than 65535.
    #[test]
    fn k5_x4_answers16_write_ids_as_offsets_from_the_smallest() {
        let gen = id(3);
        let entries = vec![
            (id(12), Answer::Accept),
            (
                id(10),
                Answer::Reply(ReplyCode::Ok, Bytes::from_static(b"x"), true),
            ),
            (
                id(11),
                Answer::AcceptReply(ReplyCode::Busy, Bytes::new(), false),
            ),
        ];
        let full = Answers::new(gen, 7, entries.clone()).unwrap();
        let short = full.clone().with_offsets();
        assert_eq!(short.kind(), Kind::Answers16);
        let long = Record::Answers(full).encode();
        let frames = Record::Answers(short.clone()).encode();
        assert_eq!(frames[0][3], 0x14);
        assert_eq!(long[0].len() - frames[0].len(), 3 * 6 - 8);
        assert_eq!(
            &frames[0][22..30],
            &10u64.to_be_bytes(),
            "the base is the smallest id"
        );
        assert_eq!(&frames[0][30..33], &[0, 2, 1], "call 12: offset 2, ACCEPT");
        let caps = Capabilities::ANSWERS
            .union(Capabilities::IDS16)
            .union(Capabilities::REPLAYED);
        let back = Record::decode_in(&frames, caps, |f| Bytes::copy_from_slice(f)).unwrap();
        assert_eq!(back, Record::Answers(short));
        let Record::Answers(a) = back else { panic!() };
        assert_eq!(a.entries(), &entries[..]);
        assert!(
            decode(&frames).is_err(),
            "unknown where ids16 is not in effect"
        );
        let wide = vec![(id(1), Answer::Accept), (id(70_000), Answer::Accept)];
        let wide = Answers::new(gen, 7, wide).unwrap().with_offsets();
        assert_eq!(wide.kind(), Kind::Answers);
        let mut bad = frames.clone();
        bad[0][34] = 3; // call 10's offset: now no offset is 0

        let err = Record::decode_in(&bad, caps, |f| Bytes::copy_from_slice(f)).unwrap_err();
        assert_eq!(err.class(), "invalid_field");
    }

    /// MISSION K5, X3, X4: the answers of 64 calls travel as one ANSWERS record that stands
    /// for exactly the ACCEPTs and REPLYs it names, in order, in under half the bytes of
    /// those records sent alone; it is unknown where `answers` is not in effect, and a lone
    /// ACCEPT or REPLY is never wrapped.
    #[test]
    fn k5_x3_x4_answers_say_the_connection_once_and_save_bytes() {
        let gen = id(0x0102_0304_0506_0708);
        assert!(Answers::new(gen, 7, vec![(id(1), Answer::Accept)]).is_err());
        assert!(Answers::new(
            gen,
            7,
            vec![(id(1), Answer::Reply(ReplyCode::Ok, Bytes::new(), false))]
        )
        .is_err());
        assert!(Answers::new(gen, 7, vec![]).is_err());
        let one = Answers::new(
            gen,
            7,
            vec![(
                id(1),
                Answer::AcceptReply(ReplyCode::Ok, Bytes::new(), false),
            )],
        );
        assert!(one.is_ok(), "one call's ACCEPT and REPLY are two records");

        let entries: Vec<_> = (1..=64)
            .map(|n| {
                (
                    id(n),
                    Answer::AcceptReply(ReplyCode::Ok, Bytes::from(vec![0xC3]), false),
                )
            })
            .collect();
        let record = Record::Answers(Answers::new(gen, 7, entries).unwrap());
        let frames = record.encode();
        assert_eq!(frames.len(), 65);
        let back = decode(&frames).unwrap();
        assert_eq!(back, record);
        assert!(Record::decode(&frames).is_err(), "unknown in version 1");

        let Record::Answers(a) = back else { panic!() };
        assert_eq!(a.records(), 128);
        let records: Vec<Record> = a.into_records().collect();
        assert_eq!(records.len(), 128);
        let alone: Vec<Vec<u8>> = records.iter().flat_map(Record::encode).collect();
        assert_eq!(
            records[0],
            Record::Accept(Accept {
                call_id: id(1),
                generation: gen,
                connection_id: 7
            })
        );
        assert_eq!(
            records[1],
            Record::Reply(Reply {
                call_id: id(1),
                code: ReplyCode::Ok,
                payload: Bytes::from(vec![0xC3]),
                replayed: false,
            })
        );
        // ZMTP adds 2 bytes per short frame either way.
        let bytes = |f: &[Vec<u8>]| f.iter().map(|f| f.len() + 2).sum::<usize>();
        assert!(
            bytes(&frames) * 2 < bytes(&alone),
            "{} against {}",
            bytes(&frames),
            bytes(&alone)
        );
    }

    /// MISSION X3, W3 (WIRE.md §4.17): the replayed mark is bit 7 of the code byte of a
    /// REPLY and of an ANSWERS entry; it round-trips where `replayed` is in effect, and
    /// without it the same bytes are an unknown code (`invalid_field`) while an unmarked
    /// REPLY keeps its version-1 bytes either way.
    #[test]
    fn x3_w3_replayed_mark_round_trips_only_where_negotiated() {
        let with = Capabilities::ANSWERS.union(Capabilities::REPLAYED);
        let decode_in = |frames: &[Vec<u8>], caps| {
            Record::decode_in(frames, caps, |f: &Vec<u8>| Bytes::copy_from_slice(f))
        };
        let reply = |replayed| {
            Record::Reply(Reply {
                call_id: id(5),
                code: ReplyCode::Exception,
                payload: Bytes::from_static(b"x"),
                replayed,
            })
        };
        let marked = reply(true).encode();
        assert_eq!(marked[0][12], 0x81);
        assert_eq!(decode_in(&marked, with).unwrap(), reply(true));
        assert_eq!(
            decode_in(&marked, Capabilities::ANSWERS)
                .unwrap_err()
                .class(),
            "invalid_field"
        );
        let plain = reply(false).encode();
        assert_eq!(plain[0][12], 0x01, "version 1's byte");
        assert_eq!(decode_in(&plain, with).unwrap(), reply(false));
        assert_eq!(decode_in(&plain, Capabilities::NONE).unwrap(), reply(false));
        // A marked code that does not exist is still refused.
        let mut unknown = marked.clone();
        unknown[0][12] = 0x8F;
        assert_eq!(
            decode_in(&unknown, with).unwrap_err().class(),
            "invalid_field"
        );

        let record = Record::Answers(
            Answers::new(
                id(9),
                3,
                vec![
                    (
                        id(1),
                        Answer::AcceptReply(ReplyCode::Ok, Bytes::new(), true),
                    ),
                    (id(2), Answer::Reply(ReplyCode::Busy, Bytes::new(), false)),
                ],
            )
            .unwrap(),
        );
        let frames = record.encode();
        assert_eq!(decode_in(&frames, with).unwrap(), record);
        assert_eq!(
            decode_in(&frames, Capabilities::ANSWERS)
                .unwrap_err()
                .class(),
            "invalid_field"
        );
        let Record::Answers(a) = record else { panic!() };
        let replies: Vec<bool> = a
            .into_records()
            .filter_map(|r| match r {
                Record::Reply(r) => Some(r.replayed),
                _ => None,
            })
            .collect();
        assert_eq!(replies, [true, false], "each REPLY keeps its own mark");
    }

    /// WIRE.md §4.16 and §6.2: the body is read whole first (truncated, trailing bytes), then
    /// the frame count, then the values (count, generation, call ids, what, code).
    #[test]
    fn w3_answers_are_checked_in_wire_order() {
        let gen = id(9);
        let entries = vec![
            (id(1), Answer::Accept),
            (
                id(2),
                Answer::Reply(ReplyCode::Busy, Bytes::from_static(b"x"), false),
            ),
        ];
        let good = Record::Answers(Answers::new(gen, 1, entries).unwrap()).encode();
        assert!(decode(&good).is_ok());
        let class = |frames: &[Vec<u8>]| decode(frames).unwrap_err().class();

        let mut short = good.clone();
        short[0].pop();
        assert_eq!(class(&short), "truncated");
        let mut long = good.clone();
        long[0].push(0);
        assert_eq!(class(&long), "trailing_bytes");
        let mut frames = good.clone();
        frames.push(Vec::new());
        assert_eq!(class(&frames), "frame_count");
        let mut zero_gen = good.clone();
        zero_gen[0][6..14].fill(0);
        assert_eq!(class(&zero_gen), "invalid_field");
        let mut bad_code = good.clone();
        let last = bad_code[0].len() - 1;
        bad_code[0][last] = 0xEE;
        assert_eq!(class(&bad_code), "invalid_field");
        // `what` 4 reads no code: the body is then one byte too long.
        let mut bad_what = good.clone();
        bad_what[0][last - 1] = 4;
        assert_eq!(class(&bad_what), "trailing_bytes");
        bad_what[0].pop();
        bad_what.pop();
        assert_eq!(class(&bad_what), "invalid_field");
    }
}
