//! The one error type of the wire codec.

use std::fmt;

use super::Kind;

/// Why a message is not a valid zmesh v1 record (or why a value cannot be encoded as one).
///
/// There is one variant per error class of WIRE.md §6; [`WireError::class`] returns the class
/// name used by the spec-test vectors. A decoder reports the first failing check in the order
/// WIRE.md §6 gives, so every implementation reports the same class for the same bytes.
///
/// A decode error is a protocol error of the connection the message arrived on only (MISSION
/// W3): nothing of the message reaches the application.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Class `frame_count`: the message has the wrong number of frames for its kind (or none).
    #[error("{}expected {expected} frame(s), found {found}", KindCtx(*.kind))]
    FrameCount {
        /// The kind whose frame count was wrong; `None` when no kind could be read.
        kind: Option<Kind>,
        /// The number of frames the kind needs (the smallest valid count when `kind` is `None`).
        expected: usize,
        /// The number of frames the message has.
        found: usize,
    },
    /// Class `truncated`: a frame ends before the field that should come next ("need more
    /// bytes", as opposed to a malformed value).
    #[error("{}truncated before field `{field}`", KindCtx(*.kind))]
    Truncated {
        /// The kind being read; `None` while reading the 4-byte envelope header.
        kind: Option<Kind>,
        /// The field that did not fit (`header` for the envelope header).
        field: &'static str,
    },
    /// Class `bad_magic`: the envelope does not start with `5A 4D` ("ZM").
    #[error("bad magic {:02x}{:02x}, expected 5a4d", .found[0], .found[1])]
    BadMagic {
        /// The first two bytes of the envelope.
        found: [u8; 2],
    },
    /// Class `unsupported_version`: the version byte is not 1.
    ///
    /// Nothing after the version byte was read: a future version may change all of it. The
    /// runtime answers with REJECT `UnsupportedVersion`.
    #[error("unsupported wire version {version}")]
    UnsupportedVersion {
        /// The version byte the peer sent.
        version: u8,
    },
    /// Class `unknown_kind`: the kind byte names no v1 record kind.
    #[error("unknown record kind 0x{kind:02x}")]
    UnknownKind {
        /// The kind byte the peer sent.
        kind: u8,
    },
    /// Class `trailing_bytes`: a frame continues after the kind's last field.
    #[error("{kind}: {extra} byte(s) after the last field")]
    TrailingBytes {
        /// The kind whose body was too long.
        kind: Kind,
        /// How many bytes follow the last field.
        extra: usize,
    },
    /// Class `invalid_field`: a field value is outside its domain (zero where non-zero is
    /// required, unknown enum value, bad UTF-8, length out of range, a kind not allowed where it
    /// appears), or a value given to an encoder cannot be encoded (an argument error).
    #[error("{}invalid field `{field}`: {problem}", KindCtx(*.kind))]
    InvalidField {
        /// The kind the field belongs to; `None` when a value is checked outside any record.
        kind: Option<Kind>,
        /// The field name, as in WIRE.md.
        field: &'static str,
        /// What is wrong with the value.
        problem: &'static str,
    },
    /// Class `reserved_topic`: a fanout message on the reserved beacon topic that is not exactly
    /// the beacon. The subscriber takes that publisher not-ready at once (MISSION L5).
    #[error("reserved beacon topic misused: {problem}")]
    ReservedTopic {
        /// What differs from the exact beacon.
        problem: &'static str,
    },
}

impl WireError {
    /// The error class name, exactly as used in WIRE.md and the spec-test vectors.
    pub fn class(&self) -> &'static str {
        match self {
            Self::FrameCount { .. } => "frame_count",
            Self::Truncated { .. } => "truncated",
            Self::BadMagic { .. } => "bad_magic",
            Self::UnsupportedVersion { .. } => "unsupported_version",
            Self::UnknownKind { .. } => "unknown_kind",
            Self::TrailingBytes { .. } => "trailing_bytes",
            Self::InvalidField { .. } => "invalid_field",
            Self::ReservedTopic { .. } => "reserved_topic",
        }
    }

    /// Shorthand for an [`WireError::InvalidField`].
    pub(crate) fn invalid(kind: Option<Kind>, field: &'static str, problem: &'static str) -> Self {
        Self::InvalidField {
            kind,
            field,
            problem,
        }
    }

    /// Names the kind of an error raised by a context-free check (an enum or string
    /// constructor), keeping every other detail.
    pub(crate) fn in_kind(self, in_kind: Kind) -> Self {
        match self {
            Self::InvalidField {
                kind: None,
                field,
                problem,
            } => Self::InvalidField {
                kind: Some(in_kind),
                field,
                problem,
            },
            other => other,
        }
    }
}

/// Renders an optional kind as an error-message prefix (`"probe: "`, or nothing).
struct KindCtx(Option<Kind>);

impl fmt::Display for KindCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(kind) => write!(f, "{kind}: "),
            None => Ok(()),
        }
    }
}
