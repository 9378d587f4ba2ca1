//! Classic fanout (PUB/SUB) messages: the liveness beacon and PUBLISH records.

use std::num::NonZeroU64;

use bytes::Bytes;

use super::codec::Reader;
use super::{
    read_header, Kind, WireError, BEACON_PAYLOAD, BEACON_TOPIC, MAGIC, MAX_TOPIC_LEN, VERSION,
};

/// One message on a Classic fanout PUB/SUB socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FanoutMessage {
    /// The liveness beacon: exactly the frames `01 5A 4C 46 31` and `5A 46 01 01` (L4).
    ///
    /// It is never acknowledged, dispatched, traced or counted as an application message.
    Beacon,
    /// A fanout application record: topic, PUBLISH envelope, payload.
    Publish {
        /// The SUB-side filter topic: 1..=255 bytes, anything but exactly [`BEACON_TOPIC`]
        /// (topics that merely share a prefix with it are fine).
        topic: Bytes,
        /// The publisher's lifecycle generation.
        generation: NonZeroU64,
        /// The publisher's sequence number (not checked by the codec).
        seq: u64,
        /// Opaque application bytes (may be empty).
        payload: Bytes,
    },
}

impl FanoutMessage {
    /// Encodes the message as its frames.
    ///
    /// A `Publish` whose topic is empty, longer than 255 bytes or exactly the reserved
    /// [`BEACON_TOPIC`] is an argument error: class `invalid_field`, field `topic` (L4).
    pub fn encode(&self) -> Result<Vec<Vec<u8>>, WireError> {
        match self {
            FanoutMessage::Beacon => Ok(encode_beacon().map(<[u8]>::to_vec).into()),
            FanoutMessage::Publish {
                topic,
                generation,
                seq,
                payload,
            } => {
                check_topic(topic)?;
                let env = encode_publish_envelope(*generation, *seq);
                Ok(vec![topic.to_vec(), env.to_vec(), payload.to_vec()])
            }
        }
    }

    /// Decodes one message received on a SUB socket.
    ///
    /// The reserved topic is recognised first: exactly the beacon decodes as `Beacon`, any
    /// other message on that exact topic is class `reserved_topic`. Everything else is checked
    /// as a PUBLISH in the order of WIRE.md §6. Topic and payload are copied out of their
    /// frames; [`FanoutMessage::decode_with`] can share them instead.
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Result<FanoutMessage, WireError> {
        Self::decode_with(frames, |f| Bytes::copy_from_slice(f.as_ref()))
    }

    /// [`FanoutMessage::decode`], taking the topic and payload frames of an accepted PUBLISH
    /// with `take` instead of copying them (see [`super::Record::decode_with`]). `take` is
    /// called only after every check passed, and the checks are exactly those of `decode`.
    pub fn decode_with<F: AsRef<[u8]>>(
        frames: &[F],
        take: impl Fn(&F) -> Bytes,
    ) -> Result<FanoutMessage, WireError> {
        let Some((topic_frame, rest)) = frames.split_first() else {
            return Err(WireError::FrameCount {
                kind: None,
                expected: 2,
                found: 0,
            });
        };
        let topic = topic_frame.as_ref();
        if topic == BEACON_TOPIC {
            return match rest {
                [payload] if payload.as_ref() == BEACON_PAYLOAD => Ok(FanoutMessage::Beacon),
                [_] => Err(WireError::ReservedTopic {
                    problem: "payload is not the beacon payload",
                }),
                _ => Err(WireError::ReservedTopic {
                    problem: "a beacon has exactly 2 frames",
                }),
            };
        }
        let Some((env, _)) = rest.split_first() else {
            return Err(WireError::FrameCount {
                kind: None,
                expected: 3,
                found: frames.len(),
            });
        };
        let (kind, body) = read_header(env.as_ref(), super::Capabilities::NONE)?;
        if kind != Kind::Publish {
            return Err(WireError::invalid(
                Some(kind),
                "kind",
                "only PUBLISH is valid in frame 1 of a fanout message",
            ));
        }
        let mut r = Reader::new(body, kind);
        let generation = r.u64("generation")?;
        let seq = r.u64("seq")?;
        r.finish()?;
        let [_, _, payload] = frames else {
            return Err(WireError::FrameCount {
                kind: Some(kind),
                expected: 3,
                found: frames.len(),
            });
        };
        check_topic(topic)?;
        let generation = NonZeroU64::new(generation).ok_or(WireError::invalid(
            Some(kind),
            "generation",
            "must be non-zero",
        ))?;
        Ok(FanoutMessage::Publish {
            topic: take(topic_frame),
            generation,
            seq,
            payload: take(payload),
        })
    }

    /// The kind of the message's envelope: `Some(Kind::Publish)`, or `None` for the beacon
    /// (which has no envelope).
    pub fn kind(&self) -> Option<Kind> {
        match self {
            FanoutMessage::Beacon => None,
            FanoutMessage::Publish { .. } => Some(Kind::Publish),
        }
    }
}

/// The length of a PUBLISH envelope: the header, the generation and the sequence number.
pub const PUBLISH_ENVELOPE_LEN: usize = 20;

/// Encodes frame 1 of a PUBLISH, the envelope, without allocating; frames 0 and 2 are the
/// topic and the payload byte for byte, so a publisher hands them to its socket as they are
/// (after checking the topic as [`FanoutMessage::encode`] does). The same bytes as frame 1
/// of [`FanoutMessage::encode`].
pub fn encode_publish_envelope(generation: NonZeroU64, seq: u64) -> [u8; PUBLISH_ENVELOPE_LEN] {
    let [m0, m1] = MAGIC;
    let [g0, g1, g2, g3, g4, g5, g6, g7] = generation.get().to_be_bytes();
    let [s0, s1, s2, s3, s4, s5, s6, s7] = seq.to_be_bytes();
    [
        m0,
        m1,
        VERSION,
        Kind::Publish as u8,
        g0,
        g1,
        g2,
        g3,
        g4,
        g5,
        g6,
        g7,
        s0,
        s1,
        s2,
        s3,
        s4,
        s5,
        s6,
        s7,
    ]
}

/// The two frames of the liveness beacon, without allocating (MISSION L4).
pub fn encode_beacon() -> [&'static [u8]; 2] {
    [&BEACON_TOPIC, &BEACON_PAYLOAD]
}

/// A topic of a fanout application record: 1..=255 bytes, not exactly the beacon topic.
fn check_topic(topic: &[u8]) -> Result<(), WireError> {
    let problem = if topic == BEACON_TOPIC {
        "the beacon topic is reserved"
    } else if topic.is_empty() || topic.len() > MAX_TOPIC_LEN {
        "length out of range"
    } else {
        return Ok(());
    };
    Err(WireError::invalid(Some(Kind::Publish), "topic", problem))
}
