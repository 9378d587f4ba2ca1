//! Fuzz target: a contract document (what a peer's `$describe` answers) never panics the
//! reader, and anything it accepts writes back to JSON that reads as the same contract.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zmesh::proto::contract::NodeContract;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(contract) = NodeContract::from_json(text) {
        let json = contract.to_json_pretty().expect("an accepted contract serializes");
        let again = NodeContract::from_json(&json);
        assert_eq!(again.ok(), Some(contract), "accepted contract must round-trip");
    }
});
