//! 64-bit identities in JSON as 16 lowercase hex digits, the form of a descriptor's
//! `generation`: JSON numbers above 2^53 lose digits in most readers (jq, JavaScript), and an
//! identity is compared, never added. Used with `#[serde(serialize_with = ...)]` on
//! generations and connection ids of snapshots and events.

use serde::Serializer;

/// `v` as 16 lowercase hex digits.
pub(crate) fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{v:016x}"))
}

/// `Some(v)` as 16 lowercase hex digits, `None` as null.
pub(crate) fn serialize_option<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => serialize(v, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize)]
    struct Ids {
        #[serde(serialize_with = "super::serialize")]
        generation: u64,
        #[serde(serialize_with = "super::serialize_option")]
        connection_id: Option<u64>,
        #[serde(serialize_with = "super::serialize_option")]
        peer_generation: Option<u64>,
    }

    #[test]
    fn identities_above_2_53_keep_every_digit_as_hex_text() {
        let ids = Ids {
            generation: 0xfedc_ba98_7654_3211,
            connection_id: Some(7),
            peer_generation: None,
        };
        assert_eq!(
            serde_json::to_string(&ids).expect("json"),
            r#"{"generation":"fedcba9876543211","connection_id":"0000000000000007","peer_generation":null}"#
        );
    }
}
