//! Byte-level reading and writing: big-endian integers and u16-length strings.
//!
//! [`Reader`] only checks structure (is the next field there?) and reports `truncated`;
//! [`Reader::finish`] is the exact variant that reports `trailing_bytes`. Field values are
//! checked afterwards, so that the error order of WIRE.md §6 holds whatever is wrong.

use super::{Kind, WireError};

/// A cursor over one frame's body, for one record kind.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    kind: Kind,
}

impl<'a> Reader<'a> {
    /// Reads `body` (the frame after its 4-byte header) as the body of `kind`.
    pub(crate) fn new(body: &'a [u8], kind: Kind) -> Self {
        Self { rest: body, kind }
    }

    /// Takes the next `n` bytes, or reports `truncated` at `field`.
    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], WireError> {
        let (head, tail) = self.rest.split_at_checked(n).ok_or(self.truncated(field))?;
        self.rest = tail;
        Ok(head)
    }

    /// Takes the next `N` bytes as an array.
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let (head, tail) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or(self.truncated(field))?;
        self.rest = tail;
        Ok(*head)
    }

    /// Reads a u8.
    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        self.array::<1>(field).map(|[b]| b)
    }

    /// Reads a big-endian u16.
    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        self.array(field).map(u16::from_be_bytes)
    }

    /// Reads a big-endian u64.
    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        self.array(field).map(u64::from_be_bytes)
    }

    /// Reads a string: u16 byte length, then that many bytes (UTF-8 is checked later).
    pub(crate) fn string(&mut self, field: &'static str) -> Result<&'a [u8], WireError> {
        let len = self.u16(field)?;
        self.take(usize::from(len), field)
    }

    /// Ends the body: any byte left is `trailing_bytes`.
    pub(crate) fn finish(self) -> Result<(), WireError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes {
                kind: self.kind,
                extra: self.rest.len(),
            })
        }
    }

    fn truncated(&self, field: &'static str) -> WireError {
        WireError::Truncated {
            kind: Some(self.kind),
            field,
        }
    }
}

/// Appends a big-endian u16.
pub(crate) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a big-endian u64.
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a string as u16 byte length + UTF-8 bytes.
///
/// Callers pass only strings whose type bounds them to at most 1024 bytes, so the length
/// always fits; the saturation is never reached.
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u16(out, u16::try_from(s.len()).unwrap_or(u16::MAX));
    out.extend_from_slice(s.as_bytes());
}

/// Appends a list count (bounded by the list's type to at most 65535).
pub(crate) fn put_count(out: &mut Vec<u8>, n: usize) {
    put_u16(out, u16::try_from(n).unwrap_or(u16::MAX));
}
