//! Fuzz target: the record decoder never panics, and anything it accepts re-encodes to the
//! exact same frames (one byte form per record).
#![no_main]

use libfuzzer_sys::fuzz_target;
use zmesh::proto::wire::Record;

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
});
