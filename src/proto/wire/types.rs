//! Field types of the v1 records: one-byte enums and length-bounded strings and lists.
//!
//! Each type admits exactly the values WIRE.md allows, so a record built from them always
//! encodes to bytes that decode back to it (parse, don't validate).

use std::fmt;
use std::ops::Deref;

use super::WireError;

/// Defines a one-byte wire enum with `TryFrom<u8>` (unknown values are `invalid_field`).
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $name:ident, field = $field:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value, )+
        }

        impl $name {
            /// Every value, in wire order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];
        }

        impl TryFrom<u8> for $name {
            type Error = WireError;

            fn try_from(value: u8) -> Result<Self, WireError> {
                match value {
                    $( $value => Ok(Self::$variant), )+
                    _ => Err(WireError::invalid(None, $field, "unknown enum value")),
                }
            }
        }

        impl From<$name> for u8 {
            fn from(value: $name) -> u8 {
                value as u8
            }
        }
    };
}

wire_enum! {
    /// The lane a HELLO/WELCOME connection serves (MISSION T1, T2).
    Lane, field = "lane" {
        /// RouteMesh Application lane.
        Application = 1,
        /// RouteMesh Completion lane.
        Completion = 2,
        /// The single ClientServer lane.
        ClientServer = 3,
    }
}

wire_enum! {
    /// A node's role in one channel membership.
    Role, field = "role" {
        /// Serves the channel.
        Server = 1,
        /// Calls the channel as an Object Client.
        ObjectClient = 2,
    }
}

wire_enum! {
    /// Why a REJECT refuses a connection; the sender closes after sending it.
    RejectReason, field = "reason" {
        /// The pair needs no connection (two Object Clients without Server membership, T4).
        NotRequired = 1,
        /// The peer's RID or security identity is not the one expected.
        IdentityMismatch = 2,
        /// The peer's lifecycle generation is not the one expected.
        GenerationMismatch = 3,
        /// Security verification failed.
        SecurityFailure = 4,
        /// The peer's wire version is not supported.
        UnsupportedVersion = 5,
        /// The node is draining and admits no new connection.
        Draining = 6,
        /// The HELLO's lane is not the lane of the socket it arrived on.
        LaneMismatch = 7,
        /// The peer broke the protocol (malformed or unexpected record).
        Protocol = 8,
        /// Both nodes dialled each other on this lane; the connection dialled by the smaller
        /// RID (bytewise) is the current one and this one is refused (MISSION T1).
        Duplicate = 9,
    }
}

wire_enum! {
    /// What repeating a call does to the world (MISSION K1).
    Semantics, field = "semantics" {
        /// The method declares nothing.
        Undeclared = 0,
        /// Reads only; safe to repeat.
        Query = 1,
        /// Repeating it leaves the same state as doing it once.
        IdempotentCommand = 2,
        /// Repeating it does it again.
        NonRepeatableCommand = 3,
    }
}

wire_enum! {
    /// The outcome a REPLY reports (MISSION K6).
    ReplyCode, field = "code" {
        /// Success; the payload is the result.
        Ok = 0,
        /// The handler raised an error.
        Exception = 1,
        /// No such method.
        MethodNotFound = 2,
        /// No such service class.
        ClassNotFound = 3,
        /// The deadline ran out before the call ran.
        Timeout = 4,
        /// The transport failed.
        TransportError = 5,
        /// The caller is not authenticated.
        Unauthorized = 6,
        /// The caller may not call this method.
        Forbidden = 7,
        /// The arguments are invalid (also: a batch over the receiver's limit).
        InvalidParams = 8,
        /// Caller and callee versions are incompatible.
        IncompatibleVersion = 9,
        /// Whether the call ran is not known.
        UnknownOutcome = 10,
        /// The mailbox is full.
        Busy = 11,
        /// A newer conflated call replaced this one.
        Superseded = 12,
        /// No target for the call.
        NotFound = 13,
        /// The target is unavailable.
        Unavailable = 14,
    }
}

wire_enum! {
    /// Why a CLOSE ends a connection; the receiver takes it out of ready at once (L6).
    CloseReason, field = "reason" {
        /// The node is shutting down.
        Shutdown = 1,
        /// The node is draining.
        Draining = 2,
        /// A newer admitted connection replaced this one.
        Replaced = 3,
        /// The peer deadline was exceeded.
        DeadlineExceeded = 4,
        /// The peer broke the protocol.
        ProtocolError = 5,
        /// The pair needs no connection.
        NotRequired = 6,
    }
}

/// A UTF-8 string of `MIN..=MAX` bytes (no NUL terminator; the wire length is a u16).
///
/// Use the aliases [`Name`], [`Label`] and [`Detail`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BoundedStr<const MIN: usize, const MAX: usize>(String);

/// A string of 1..=255 bytes: RID, channel, method, expected RID, idempotency key.
pub type Name = BoundedStr<1, 255>;
/// A string of 0..=255 bytes: security identity.
pub type Label = BoundedStr<0, 255>;
/// A string of 0..=1024 bytes: REJECT detail.
pub type Detail = BoundedStr<0, 1024>;

impl<const MIN: usize, const MAX: usize> BoundedStr<MIN, MAX> {
    /// Compile-time guard: the bound must fit the u16 wire length.
    const FITS_U16: () = assert!(MIN <= MAX && MAX <= u16::MAX as usize);

    /// Whether a string of `len` bytes fits (`MIN..=MAX`): the one length check of names
    /// and labels, for code that holds a `&str` it does not wrap.
    pub const fn fits(len: usize) -> bool {
        MIN <= len && len <= MAX
    }

    /// Checks the length of `s` (in bytes). Fails with class `invalid_field`.
    pub fn new(s: impl Into<String>) -> Result<Self, WireError> {
        let s = s.into();
        Self::check_len(s.len(), "string")?;
        Ok(Self(s))
    }

    /// Decodes a string field from its wire bytes.
    pub(crate) fn from_wire(bytes: &[u8], field: &'static str) -> Result<Self, WireError> {
        Self::check_len(bytes.len(), field)?;
        let s =
            std::str::from_utf8(bytes).map_err(|_| WireError::invalid(None, field, "not UTF-8"))?;
        Ok(Self(s.to_owned()))
    }

    fn check_len(len: usize, field: &'static str) -> Result<(), WireError> {
        let () = Self::FITS_U16;
        if Self::fits(len) {
            Ok(())
        } else {
            Err(WireError::invalid(None, field, "length out of range"))
        }
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl<const MAX: usize> Default for BoundedStr<0, MAX> {
    fn default() -> Self {
        Self(String::new())
    }
}

impl<const MIN: usize, const MAX: usize> Deref for BoundedStr<MIN, MAX> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<const MIN: usize, const MAX: usize> AsRef<str> for BoundedStr<MIN, MAX> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<const MIN: usize, const MAX: usize> fmt::Display for BoundedStr<MIN, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<const MIN: usize, const MAX: usize> TryFrom<String> for BoundedStr<MIN, MAX> {
    type Error = WireError;

    fn try_from(s: String) -> Result<Self, WireError> {
        Self::new(s)
    }
}

impl<const MIN: usize, const MAX: usize> TryFrom<&str> for BoundedStr<MIN, MAX> {
    type Error = WireError;

    fn try_from(s: &str) -> Result<Self, WireError> {
        Self::new(s)
    }
}

impl<const MIN: usize, const MAX: usize> PartialEq<str> for BoundedStr<MIN, MAX> {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl<const MIN: usize, const MAX: usize> PartialEq<&str> for BoundedStr<MIN, MAX> {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// One channel membership announced in HELLO/WELCOME.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Membership {
    /// The node's role in the channel.
    pub role: Role,
    /// The channel name.
    pub channel: Name,
}

/// The memberships list of HELLO/WELCOME: at most [`Memberships::MAX`] entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Memberships(Vec<Membership>);

impl Memberships {
    /// The largest number of memberships a record may carry.
    pub const MAX: usize = 1024;

    /// Checks the count. Fails with class `invalid_field`.
    pub fn new(list: Vec<Membership>) -> Result<Self, WireError> {
        Self::check_count(list.len())?;
        Ok(Self(list))
    }

    /// Checks a memberships count.
    pub(crate) fn check_count(count: usize) -> Result<(), WireError> {
        if count > Self::MAX {
            Err(WireError::invalid(
                None,
                "memberships",
                "more than 1024 entries",
            ))
        } else {
            Ok(())
        }
    }

    /// The memberships, in wire order.
    pub fn as_slice(&self) -> &[Membership] {
        &self.0
    }

    /// The owned list.
    pub fn into_vec(self) -> Vec<Membership> {
        self.0
    }
}

impl Deref for Memberships {
    type Target = [Membership];

    fn deref(&self) -> &[Membership] {
        &self.0
    }
}

impl TryFrom<Vec<Membership>> for Memberships {
    type Error = WireError;

    fn try_from(list: Vec<Membership>) -> Result<Self, WireError> {
        Self::new(list)
    }
}
