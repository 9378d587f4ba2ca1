//! The runtime's view of the wire records: fanout messages decoded into what the I/O loop
//! acts on, records encoded from runtime values (a link's records are decoded and judged by
//! the node core, [`crate::proto::node::core`]). All byte layout lives in [`crate::proto::wire`].

use std::num::NonZeroU64;

use bytes::Bytes;

use super::socket::Frame;
use crate::proto::wire::{self, FanoutMessage, Name, Record, WireError};

pub(crate) use crate::proto::wire::{CloseReason, Lane};

/// A decoded fanout message (the node core's type: it judges and delivers them).
pub(crate) use crate::proto::node::sub::Fanout;

/// Decodes one fanout message on a socket where the fanout capabilities `caps` are in effect.
/// A frame with the bytes of `last_topic` (the topic of this publisher's previous record, as
/// a rule the same) is taken as a clone of it rather than copied; the payload frame is
/// shared, not copied.
pub(crate) fn decode_fanout(
    frames: &[Frame],
    last_topic: &Bytes,
    caps: wire::Capabilities,
) -> Result<Fanout, WireError> {
    let take = |f: &Frame| {
        if f.as_ref() == last_topic.as_ref() {
            last_topic.clone()
        } else {
            f.to_bytes()
        }
    };
    Ok(match FanoutMessage::decode_in(frames, caps, take)? {
        FanoutMessage::Beacon => Fanout::Beacon,
        FanoutMessage::Publish { topic, payload, .. } => Fanout::Publish { topic, payload },
        FanoutMessage::PubPack(p) => {
            let (topic, payloads) = p.into_parts();
            Fanout::Pack { topic, payloads }
        }
    })
}

fn nz(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)
}

fn name(s: &str) -> Result<Name, WireError> {
    Name::new(s.to_owned())
}

/// PROBE.
pub(crate) fn probe(id: u64) -> Vec<Vec<u8>> {
    vec![wire::encode_probe(nz(id)).to_vec()]
}

/// CANCEL of call `call_id`.
pub(crate) fn cancel(call_id: NonZeroU64) -> Vec<Vec<u8>> {
    Record::Cancel { call_id }.encode()
}

/// CREDIT of `items` more items for stream call `call_id`.
pub(crate) fn credit(call_id: NonZeroU64, items: NonZeroU64) -> Vec<Vec<u8>> {
    Record::Credit { call_id, items }.encode()
}

/// ACK.
pub(crate) fn ack(id: u64) -> Vec<Vec<u8>> {
    vec![wire::encode_ack(nz(id)).to_vec()]
}

/// CLOSE.
pub(crate) fn close(reason: CloseReason) -> Vec<Vec<u8>> {
    Record::Close { reason }.encode()
}

/// The envelope of a MESSAGE on `channel` (frame 0; the payload is frame 1 as it is, so it
/// goes to the socket without a copy of ours, and a batch shares one envelope).
pub(crate) fn message_envelope(channel: &str) -> Result<Vec<u8>, WireError> {
    Ok(wire::Message::encode_envelope(&name(channel)?))
}

/// The envelope of a fanout application record (frame 1, between the topic and the
/// payload, which go to the socket as they are).
pub(crate) fn publish_envelope(generation: u64, seq: u64) -> [u8; wire::PUBLISH_ENVELOPE_LEN] {
    wire::encode_publish_envelope(nz(generation), seq)
}

/// Display name of a lane.
pub(crate) fn lane_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Application => "application",
        Lane::Completion => "completion",
        Lane::ClientServer => "client_server",
    }
}
