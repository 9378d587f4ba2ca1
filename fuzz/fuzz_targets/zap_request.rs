//! Fuzz target: a ZAP request (RFC 27 frames) never panics the parser; a CURVE request it
//! accepts has exactly one credential frame, and a key is read from it only when that frame
//! is 32 bytes long.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zmesh::proto::security::{Mechanism, ZapRequest};

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
    if let Ok(request) = ZapRequest::parse(&frames(data)) {
        let key = request.curve_key();
        if request.mechanism == Mechanism::Curve {
            assert_eq!(request.credentials.len(), 1);
            assert_eq!(key.is_some(), request.credentials[0].len() == 32);
        } else {
            assert!(key.is_none());
        }
    }
});
