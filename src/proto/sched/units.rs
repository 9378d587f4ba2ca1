//! The scheduler's registered units: each unit's state in a dense table, found by its id
//! through an index. A turn holds its unit's position in the table, so handing out the
//! turn's records reaches the unit's queue without hashing its id per record.

use std::collections::VecDeque;
use std::hash::Hash;

use super::{IdMap, Slot, Source, UnitStats, STAGING_RECORD_BOUND};

/// One registered unit.
pub(super) struct UnitState<R> {
    pub(super) source: Source,
    pub(super) queue: VecDeque<(R, usize)>,
    pub(super) queued_bytes: usize,
    pub(super) served_in: u64,
    pub(super) stats: UnitStats,
    /// Readiness mode: a single-peer unit's socket may have records.
    pub(super) readable: bool,
    /// The unit's slot in the ring.
    pub(super) pos: Slot,
}

/// Whether a unit's staging queue is full: [`STAGING_RECORD_BOUND`] records or `byte_bound`
/// bytes.
pub(super) fn is_full<R>(state: &UnitState<R>, byte_bound: usize) -> bool {
    !state.queue.is_empty()
        && (state.queue.len() >= STAGING_RECORD_BOUND || state.queued_bytes >= byte_bound)
}

/// The registered units: their states in a table, and an index from unit id to position.
///
/// A position stays its unit's while the unit is registered; a removed unit's position is
/// reused by a unit registered later, so a position is only meaningful as long as its unit
/// is known to be registered (the scheduler keeps one in a turn only, which the removal of
/// its unit ends).
pub(super) struct Units<U, R> {
    index: IdMap<U, usize>,
    table: Vec<Option<UnitState<R>>>,
    /// Positions of removed units, to reuse.
    free: Vec<usize>,
}

impl<U: Copy + Eq + Hash, R> Units<U, R> {
    pub(super) fn new() -> Self {
        Units {
            index: IdMap::default(),
            table: Vec::new(),
            free: Vec::new(),
        }
    }

    /// The position of `unit`, if registered.
    pub(super) fn position(&self, unit: &U) -> Option<usize> {
        self.index.get(unit).copied()
    }

    /// The state of `unit`, if registered.
    pub(super) fn get(&self, unit: &U) -> Option<&UnitState<R>> {
        self.at(self.position(unit)?)
    }

    /// The state of `unit`, mutable, if registered.
    pub(super) fn get_mut(&mut self, unit: &U) -> Option<&mut UnitState<R>> {
        self.at_mut(self.position(unit)?)
    }

    /// The state of the unit at `pos`, if one is registered there.
    pub(super) fn at(&self, pos: usize) -> Option<&UnitState<R>> {
        self.table.get(pos)?.as_ref()
    }

    /// The state of the unit at `pos`, mutable, if one is registered there.
    pub(super) fn at_mut(&mut self, pos: usize) -> Option<&mut UnitState<R>> {
        self.table.get_mut(pos)?.as_mut()
    }

    /// Whether `unit` is registered.
    pub(super) fn contains_key(&self, unit: &U) -> bool {
        self.index.contains_key(unit)
    }

    /// Units registered.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no unit is registered.
    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Registers `unit`, which must not be registered yet (a registered one keeps its state
    /// and `state` is dropped); returns its position.
    pub(super) fn insert(&mut self, unit: U, state: UnitState<R>) -> usize {
        if let Some(pos) = self.position(&unit) {
            return pos;
        }
        let pos = match self.free.pop() {
            Some(pos) => {
                if let Some(entry) = self.table.get_mut(pos) {
                    *entry = Some(state);
                }
                pos
            }
            None => {
                self.table.push(Some(state));
                self.table.len() - 1
            }
        };
        self.index.insert(unit, pos);
        pos
    }

    /// Removes `unit` and returns its state (`None` if unknown).
    pub(super) fn remove(&mut self, unit: &U) -> Option<UnitState<R>> {
        let pos = self.index.remove(unit)?;
        let state = self.table.get_mut(pos)?.take();
        self.free.push(pos);
        state
    }
}
