//! Fuzz target: the record decoder never panics, and anything it accepts re-encodes to the
//! exact same frames (one byte form per record), both as version 1 and with every capability
//! in effect (the extension kinds of WIRE.md §8.1).
#![no_main]

use libfuzzer_sys::fuzz_target;
use bytes::Bytes;
use zmesh::proto::wire::{Capabilities, Record};

/// Splits the input into frames: each frame is a length byte then that many bytes.
fn frames(mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = data.split_first() {
        let n = (len as usize).min(rest.len());
        out.push(rest[..n].to_vec());
        data = &rest[n..];
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let frames = frames(data);
    if let Ok(record) = Record::decode(&frames) {
        assert_eq!(record.encode(), frames, "accepted input must be canonical");
    }
    let spoken = Record::decode_in(&frames, Capabilities::SPOKEN, |f| Bytes::copy_from_slice(f));
    if let Ok(record) = spoken {
        assert_eq!(record.encode(), frames, "accepted input must be canonical");
    }
});
