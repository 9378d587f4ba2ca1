//! Fuzz target: a descriptor read from a store never panics the reader, and anything it
//! accepts writes back to JSON that reads as the same descriptor.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zmesh::proto::discovery::Descriptor;

fuzz_target!(|data: &[u8]| {
    if let Ok(descriptor) = Descriptor::from_json(data) {
        assert!(descriptor.validate().is_ok(), "accepted descriptor must validate");
        let again = Descriptor::from_json(descriptor.to_json().as_bytes());
        assert_eq!(again.ok(), Some(descriptor), "accepted descriptor must round-trip");
    }
});
