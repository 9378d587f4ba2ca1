//! Call ids as offsets (capability `ids16`, WIRE.md §4.19): the form of CALLS16 and
//! ANSWERS16, which say the smallest call id of the record once (`base`) and each call's id
//! as a u16 offset from it, where CALLS and ANSWERS spend eight bytes per id.

use std::num::NonZeroU64;

use super::codec::{put_u64, Reader};
use super::{Kind, WireError};

/// How the call ids of a CALLS or ANSWERS record are written on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum IdForm {
    /// Each call id in full, a u64 (kinds `0F` CALLS and `11` ANSWERS).
    #[default]
    Full,
    /// The smallest call id once, then each id as a u16 offset from it (kinds `13` CALLS16
    /// and `14` ANSWERS16, capability `ids16`).
    Offsets,
}

/// The base of `ids` written as offsets: the smallest id, if every id is within
/// `u16::MAX` of it (none if `ids` is empty or spans more).
pub(super) fn base_of(ids: impl Iterator<Item = NonZeroU64> + Clone) -> Option<NonZeroU64> {
    let min = ids.clone().min()?;
    let max = ids.max()?;
    (max.get().checked_sub(min.get())? <= u64::from(u16::MAX)).then_some(min)
}

/// Writes `id` as its offset from `base` (the encoder only writes ids [`base_of`] admitted).
pub(super) fn put_id(env: &mut Vec<u8>, form: IdForm, base: NonZeroU64, id: NonZeroU64) {
    match form {
        IdForm::Full => put_u64(env, id.get()),
        IdForm::Offsets => {
            let offset = id.get().saturating_sub(base.get());
            env.extend_from_slice(&u16::try_from(offset).unwrap_or(u16::MAX).to_be_bytes());
        }
    }
}

/// Reads one call id field as written: a u64, or a u16 offset (widened; checked by
/// [`id_from`] and [`check_base`]).
pub(super) fn read_id(r: &mut Reader<'_>, form: IdForm) -> Result<u64, WireError> {
    match form {
        IdForm::Full => r.u64("call_id"),
        IdForm::Offsets => r.u16("offset").map(u64::from),
    }
}

/// Checks the base of a record in the offset form: non-zero, and the smallest call id, so
/// some offset is 0 (one byte form per record). `raw` are the offsets as read.
pub(super) fn check_base(
    kind: Kind,
    base: u64,
    mut raw: impl Iterator<Item = u64>,
) -> Result<NonZeroU64, WireError> {
    let base =
        NonZeroU64::new(base).ok_or(WireError::invalid(Some(kind), "base", "must be non-zero"))?;
    if !raw.any(|offset| offset == 0) {
        return Err(WireError::invalid(
            Some(kind),
            "base",
            "the base is the smallest call id of the record: some offset is 0",
        ));
    }
    Ok(base)
}

/// The call id of a field read by [`read_id`]: the id itself (non-zero) in the full form,
/// `base` plus the offset (at most `u64::MAX`) in the offset form.
pub(super) fn id_from(
    kind: Kind,
    form: IdForm,
    base: Option<NonZeroU64>,
    raw: u64,
) -> Result<NonZeroU64, WireError> {
    match (form, base) {
        (IdForm::Offsets, Some(base)) => base.checked_add(raw).ok_or(WireError::invalid(
            Some(kind),
            "offset",
            "base plus offset is beyond u64",
        )),
        _ => NonZeroU64::new(raw).ok_or(WireError::invalid(None, "call_id", "must be non-zero")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn id(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    /// The base is the smallest id, and only a span of at most 65535 has one.
    #[test]
    fn x4_a_base_exists_only_for_ids_within_a_u16_of_the_smallest() {
        assert_eq!(base_of([id(9), id(7), id(8)].into_iter()), Some(id(7)));
        assert_eq!(base_of([id(1), id(65_536)].into_iter()), Some(id(1)));
        assert_eq!(base_of([id(1), id(65_537)].into_iter()), None);
        assert_eq!(base_of(std::iter::empty()), None);
        let mut env = Vec::new();
        put_id(&mut env, IdForm::Offsets, id(7), id(9));
        put_id(&mut env, IdForm::Full, id(7), id(9));
        assert_eq!(env, [0, 2, 0, 0, 0, 0, 0, 0, 0, 9]);
        assert!(id_from(Kind::Calls16, IdForm::Offsets, Some(id(u64::MAX)), 1).is_err());
        assert_eq!(
            id_from(Kind::Calls16, IdForm::Offsets, Some(id(7)), 2).unwrap(),
            id(9)
        );
        assert!(check_base(Kind::Calls16, 7, [1, 2].into_iter()).is_err());
        assert!(check_base(Kind::Calls16, 0, [0].into_iter()).is_err());
        assert_eq!(
            check_base(Kind::Calls16, 7, [1, 0].into_iter()).unwrap(),
            id(7)
        );
    }
}
