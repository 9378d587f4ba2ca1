//! Fuzz target: the fanout decoder never panics; an accepted message re-encodes exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zmesh::proto::wire::FanoutMessage;

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
    if let Ok(msg) = FanoutMessage::decode(&frames) {
        let again = msg.encode().expect("an accepted message encodes");
        assert_eq!(again, frames, "accepted input must be canonical");
    }
});
