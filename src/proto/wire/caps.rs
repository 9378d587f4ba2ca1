//! Wire capabilities beyond version 1 (WIRE.md §8.1): what a node announces in its
//! handshake, and the extension entries of the memberships list that carry the announcement.

use std::fmt;

/// A set of wire capabilities beyond version 1 (WIRE.md §8.1): record kinds and byte forms a
/// node speaks in addition to version 1. A node announces its set in its HELLO or WELCOME as
/// extension entries of the memberships list; a capability is in effect on a connection only
/// when both ends announced it there, so a version-1 peer, which announces none, receives
/// version-1 records only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(u32);

impl Capabilities {
    /// No capability: version 1 exactly.
    pub const NONE: Capabilities = Capabilities(0);
    /// CANCEL records (WIRE.md §4.13): a caller tells the callee it no longer waits.
    pub const CANCEL: Capabilities = Capabilities(1);
    /// CALLS records (WIRE.md §4.14): several calls of one method, shared fields said once.
    pub const CALLS: Capabilities = Capabilities(2);
    /// CREDIT records and stream windows (WIRE.md §4.15): a callee sends a stream's items
    /// only as far as the caller granted.
    pub const CREDIT: Capabilities = Capabilities(4);
    /// ANSWERS records (WIRE.md §4.16): the ACCEPTs and REPLYs of several calls of one
    /// connection in one message, the connection said once.
    pub const ANSWERS: Capabilities = Capabilities(8);
    /// The replayed mark (WIRE.md §4.17): bit 7 of a REPLY's code byte, in a REPLY record
    /// and in an ANSWERS entry, says the answer is the recorded outcome of an earlier call
    /// with the same idempotency key, not a run of the handler for this call.
    pub const REPLAYED: Capabilities = Capabilities(16);
    /// PACK records (WIRE.md §4.18): several MESSAGEs of one channel in one message, the
    /// payloads back to back in one frame.
    pub const PACK: Capabilities = Capabilities(32);
    /// CALLS16 and ANSWERS16 records (WIRE.md §4.19): CALLS and ANSWERS with the call ids as
    /// u16 offsets from the smallest, two bytes per id instead of eight.
    pub const IDS16: Capabilities = Capabilities(64);
    /// PUBPACK records (WIRE.md §7.5): several PUBLISH records of one topic in one fanout
    /// message. A fanout capability: a subscriber announces it by subscribing to
    /// [`super::PUBPACK_MARKER`], never in a handshake, so it is not in [`Self::SPOKEN`].
    pub const PUBPACK: Capabilities = Capabilities(128);
    /// Every capability this implementation speaks in a handshake, announced by default
    /// (the fanout capability [`Self::PUBPACK`] is announced by a subscription instead).
    pub const SPOKEN: Capabilities = Capabilities(
        Capabilities::CANCEL.0
            | Capabilities::CALLS.0
            | Capabilities::CREDIT.0
            | Capabilities::ANSWERS.0
            | Capabilities::REPLAYED.0
            | Capabilities::PACK.0
            | Capabilities::IDS16.0,
    );

    /// Each capability with its name on the wire (in an extension entry; for `pubpack`, in its
    /// subscription marker), in the order extension entries are sent.
    const NAMES: [(Capabilities, &'static str); 8] = [
        (Capabilities::CANCEL, "cancel"),
        (Capabilities::CALLS, "calls"),
        (Capabilities::CREDIT, "credit"),
        (Capabilities::ANSWERS, "answers"),
        (Capabilities::REPLAYED, "replayed"),
        (Capabilities::PACK, "pack"),
        (Capabilities::IDS16, "ids16"),
        (Capabilities::PUBPACK, "pubpack"),
    ];

    /// Whether every capability of `other` is in this set.
    pub const fn contains(self, other: Capabilities) -> bool {
        self.0 & other.0 == other.0
    }

    /// The capabilities in both sets: what is in effect between two ends.
    #[must_use]
    pub const fn intersection(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 & other.0)
    }

    /// The capabilities in either set.
    #[must_use]
    pub const fn union(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 | other.0)
    }

    /// Whether the set is empty (version 1 exactly).
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The wire names of the capabilities in the set, in wire order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .into_iter()
            .filter(move |(c, _)| self.contains(*c))
            .map(|(_, n)| n)
    }

    /// The capability an extension entry names, if this implementation knows it (an unknown
    /// name is ignored: it is a capability this side does not speak).
    pub(crate) fn from_entry(channel: &str) -> Option<Capabilities> {
        let name = channel.strip_prefix(EXTENSION_PREFIX)?;
        Self::NAMES
            .into_iter()
            .find(|(_, n)| *n == name)
            .map(|(c, _)| c)
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("v1");
        }
        f.write_str("v1")?;
        for n in self.names() {
            write!(f, "+{n}")?;
        }
        Ok(())
    }
}

impl serde::Serialize for Capabilities {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.names())
    }
}

/// The first character of an extension entry's channel (WIRE.md §8.1). No membership a
/// configuration holds begins with it, so an entry that does is never a channel.
pub const EXTENSION_PREFIX: char = '\0';

/// Room the memberships list keeps for extension entries: a configuration holds at most
/// [`super::Memberships::MAX`] minus this many memberships.
pub const EXTENSION_ROOM: usize = 16;

/// Whether `channel` is an extension entry's name rather than a channel (WIRE.md §8.1).
pub fn is_extension_entry(channel: &str) -> bool {
    channel.starts_with(EXTENSION_PREFIX)
}
