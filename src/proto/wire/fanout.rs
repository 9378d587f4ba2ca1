//! Classic fanout (PUB/SUB) messages: the liveness beacon, PUBLISH records and, where
//! capability `pubpack` is in effect, PUBPACKs of several PUBLISH records (WIRE.md §7.5).

use std::num::NonZeroU64;

use bytes::Bytes;

use super::codec::Reader;
use super::{
    read_header, Capabilities, Kind, PubPack, WireError, BEACON_PAYLOAD, BEACON_TOPIC, MAGIC,
    MAX_TOPIC_LEN, VERSION,
};

/// The subscription prefix by which a subscriber announces capability `pubpack` to a
/// publisher (WIRE.md §7.5): the reserved beacon topic, `00` and the capability's name in
/// ASCII, `01 5A 4C 46 31 00 70 75 62 70 61 63 6B`. A subscriber that speaks PUBPACK
/// subscribes each of its SUB sockets to it and to the empty prefix; a publisher packs only
/// while every subscription it applied is one of such pairs.
pub const PUBPACK_MARKER: [u8; 13] = [
    0x01, 0x5A, 0x4C, 0x46, 0x31, 0x00, b'p', b'u', b'b', b'p', b'a', b'c', b'k',
];

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
    /// Several PUBLISH records of one topic with consecutive seqs (kind `15`, WIRE.md §7.5):
    /// only where capability `pubpack` is in effect.
    PubPack(PubPack),
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
                check_topic(topic, Kind::Publish)?;
                let env = encode_publish_envelope(*generation, *seq);
                Ok(vec![topic.to_vec(), env.to_vec(), payload.to_vec()])
            }
            FanoutMessage::PubPack(p) => Ok(p.encode()),
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
        Self::decode_in(frames, Capabilities::NONE, take)
    }

    /// [`FanoutMessage::decode_with`] on a publisher's socket where the capabilities `caps`
    /// are in effect (WIRE.md §7.5, §8.1): kind `15` (PUBPACK) is known only if
    /// [`Capabilities::PUBPACK`] is in `caps`; with [`Capabilities::NONE`] this is exactly
    /// the version-1 decoder. Any other extension kind is not allowed in frame 1
    /// (`invalid_field`).
    pub fn decode_in<F: AsRef<[u8]>>(
        frames: &[F],
        caps: Capabilities,
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
        let (kind, body) = read_header(env.as_ref(), caps)?;
        match kind {
            Kind::Publish => {}
            Kind::PubPack => {
                return PubPack::decode(Reader::new(body, kind), frames, &take)
                    .map(FanoutMessage::PubPack)
            }
            _ => {
                return Err(WireError::invalid(
                    Some(kind),
                    "kind",
                    "only PUBLISH (and PUBPACK) is valid in frame 1 of a fanout message",
                ))
            }
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
        check_topic(topic, kind)?;
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

    /// The kind of the message's envelope: `Some(Kind::Publish)` or `Some(Kind::PubPack)`,
    /// or `None` for the beacon (which has no envelope).
    pub fn kind(&self) -> Option<Kind> {
        match self {
            FanoutMessage::Beacon => None,
            FanoutMessage::Publish { .. } => Some(Kind::Publish),
            FanoutMessage::PubPack(_) => Some(Kind::PubPack),
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

/// A topic of a fanout application record of `kind`: 1..=255 bytes, not exactly the beacon
/// topic.
pub(super) fn check_topic(topic: &[u8], kind: Kind) -> Result<(), WireError> {
    let problem = if topic == BEACON_TOPIC {
        "the beacon topic is reserved"
    } else if topic.is_empty() || topic.len() > MAX_TOPIC_LEN {
        "length out of range"
    } else {
        return Ok(());
    };
    Err(WireError::invalid(Some(kind), "topic", problem))
}

/// What the subscriptions a publisher applied say about its subscribers (WIRE.md §7.5):
/// whether capability `pubpack` is in effect on its socket. A publisher that applies every
/// subscription itself (zmesh: `ZMQ_XPUB_MANUAL`) hands each subscription and cancel it
/// applies, and each message it read that is neither, to this count before it sends anything
/// more, so what is in effect covers every subscriber that can receive what it sends next.
///
/// A subscriber that speaks PUBPACK subscribes to exactly the empty prefix and
/// [`PUBPACK_MARKER`]; any other subscriber (a version-1 one subscribes to the empty prefix
/// alone, a filtering one to its topics) applies some other subscription without a marker.
/// So `pubpack` is in effect when at least one marker is applied and exactly as many other
/// subscriptions. Once a message that is not a subscription was read, or a cancel of
/// something never counted, the counts are no longer evidence (with such input libzmq can
/// apply a later subscription to another connection than the one that sent it), and
/// `pubpack` is never in effect again on that socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppliedSubscriptions {
    markers: u64,
    others: u64,
    broken: bool,
}

impl AppliedSubscriptions {
    /// A subscription (`subscribe` true) or a cancel of `prefix` was applied.
    pub fn handle_subscription(&mut self, subscribe: bool, prefix: &[u8]) {
        let count = if prefix == PUBPACK_MARKER {
            &mut self.markers
        } else {
            &mut self.others
        };
        if subscribe {
            *count = count.saturating_add(1);
        } else if let Some(less) = count.checked_sub(1) {
            *count = less;
        } else {
            self.broken = true;
        }
    }

    /// A message that is neither a subscription nor a cancel was read from the socket.
    pub fn handle_other_message(&mut self) {
        self.broken = true;
    }

    /// The fanout capabilities in effect on the publisher's socket: [`Capabilities::PUBPACK`]
    /// while every applied subscription belongs to a pair of the empty prefix and the marker
    /// (and at least one such pair is there), none otherwise.
    pub fn in_effect(&self) -> Capabilities {
        if !self.broken && self.markers > 0 && self.others == self.markers {
            Capabilities::PUBPACK
        } else {
            Capabilities::NONE
        }
    }

    /// Whether a message that no subscriber sends, or a cancel of something never counted,
    /// made the counts unusable for good.
    pub fn is_broken(&self) -> bool {
        self.broken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MISSION X3: `pubpack` is in effect only while every applied subscription is one of a
    /// subscriber's pair of the empty prefix and the marker: a version-1 subscriber, a
    /// filtering one, a marker without its empty prefix or anything that is not a
    /// subscription takes it out, and the counts come back when the others leave.
    #[test]
    fn x3_pubpack_is_in_effect_only_while_every_subscriber_announced_it() {
        let mut s = AppliedSubscriptions::default();
        let on = |s: &AppliedSubscriptions| s.in_effect().contains(Capabilities::PUBPACK);
        assert!(!on(&s), "no subscriber");
        s.handle_subscription(true, b"");
        assert!(!on(&s), "the empty prefix alone is a version-1 subscriber");
        s.handle_subscription(true, &PUBPACK_MARKER);
        assert!(on(&s));
        s.handle_subscription(true, &PUBPACK_MARKER);
        s.handle_subscription(true, b"");
        assert!(on(&s), "two pack-capable subscribers");
        s.handle_subscription(true, b"");
        assert!(!on(&s), "a version-1 subscriber joined");
        s.handle_subscription(false, b"");
        assert!(on(&s), "it left");
        s.handle_subscription(true, b"prices");
        assert!(!on(&s), "a filtering subscriber");
        s.handle_subscription(false, b"prices");
        assert!(on(&s));
        s.handle_subscription(false, b"");
        s.handle_subscription(false, &PUBPACK_MARKER);
        s.handle_subscription(false, b"");
        s.handle_subscription(false, &PUBPACK_MARKER);
        assert!(!on(&s), "everyone left");
        assert_eq!(s, AppliedSubscriptions::default());
        // A cancel of something never counted: the counts are no evidence any more.
        s.handle_subscription(false, b"");
        s.handle_subscription(true, b"");
        s.handle_subscription(true, &PUBPACK_MARKER);
        assert!(s.is_broken() && !on(&s));
        let mut s = AppliedSubscriptions::default();
        s.handle_subscription(true, b"");
        s.handle_subscription(true, &PUBPACK_MARKER);
        s.handle_other_message();
        assert!(s.is_broken() && !on(&s));
    }
}
