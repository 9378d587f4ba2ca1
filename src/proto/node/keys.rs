//! Typed handles of a node's tables: a [`LinkKey`] names a link, a [`SlotKey`] a socket's
//! slot, a [`SubKey`] a fanout subscription, and a [`Table`] is indexed by its own key type
//! only, so a link key can never index the slots (or the other way round). Keys are positions in their table:
//! handles for lookups and diagnostics, never fences (a connection is fenced by its
//! [`crate::proto::ConnId`] and the peer's identity).

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use crate::proto::ConnId;

/// A key of a [`Table`]: a position in it.
pub(crate) trait Key: Copy {
    /// The key at position `i`.
    fn from_index(i: usize) -> Self;
    /// This key's position.
    fn index(self) -> usize;
}

macro_rules! key {
    ($(#[$doc:meta])* $vis:vis $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis struct $name(usize);

        impl Key for $name {
            fn from_index(i: usize) -> Self {
                $name(i)
            }
            fn index(self) -> usize {
                self.0
            }
        }

        /// The position alone, as logs have always shown it.
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

key!(
    /// A link of the node: one configured or inbound lane to one peer, server or
    /// client, whatever its connection of the moment. Links are never removed, so a key stays
    /// the same link for the node's life.
    pub(crate) LinkKey
);
key!(
    /// A slot of the node's socket table. A slot is reused once its socket is gone.
    pub(crate) SlotKey
);
key!(
    /// A fanout subscription of the node: one publisher endpoint this node reads.
    /// Subscriptions are never removed while the node runs (a retired one keeps its key), so a
    /// key stays the same subscription for the node's life. Public: discovery's operations
    /// ([`crate::proto::node::discovered::DiscoveryOp`]) name subscriptions by it.
    pub SubKey
);

impl SubKey {
    /// The subscription at position `i` of a shell's subscription table (the shell numbers
    /// its subscriptions from 0 in the order it opens them).
    pub fn at(i: usize) -> SubKey {
        SubKey(i)
    }

    /// This subscription's position in the shell's subscription table.
    pub fn position(self) -> usize {
        self.0
    }
}

/// A vector indexed by its own key type `K`.
pub(crate) struct Table<K, T> {
    items: Vec<T>,
    key: PhantomData<K>,
}

impl<K, T> Default for Table<K, T> {
    fn default() -> Self {
        Table {
            items: Vec::new(),
            key: PhantomData,
        }
    }
}

impl<K: Key, T> Table<K, T> {
    /// The item of `k`, if the table reaches that far.
    pub(crate) fn get(&self, k: K) -> Option<&T> {
        self.items.get(k.index())
    }

    /// The item of `k`, mutable.
    pub(crate) fn get_mut(&mut self, k: K) -> Option<&mut T> {
        self.items.get_mut(k.index())
    }

    /// The key the next [`Table::push`] returns.
    pub(crate) fn next_key(&self) -> K {
        K::from_index(self.items.len())
    }

    /// Adds `item` at the end; returns its key.
    pub(crate) fn push(&mut self, item: T) -> K {
        self.items.push(item);
        K::from_index(self.items.len() - 1)
    }

    /// Every item goes (the node stops).
    pub(crate) fn clear(&mut self) {
        self.items.clear();
    }

    /// Every key, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = K> + use<K, T> {
        (0..self.items.len()).map(K::from_index)
    }

    /// Every item with its key, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, &T)> {
        self.items
            .iter()
            .enumerate()
            .map(|(i, t)| (K::from_index(i), t))
    }

    /// Every item, in order.
    pub(crate) fn values(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// The key of the first item that satisfies `pred`.
    pub(crate) fn position(&self, pred: impl FnMut(&T) -> bool) -> Option<K> {
        self.items.iter().position(pred).map(K::from_index)
    }
}

impl<'a, K, T> IntoIterator for &'a Table<K, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<'a, K, T> IntoIterator for &'a mut Table<K, T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter_mut()
    }
}

impl<K: Key, T> Index<K> for Table<K, T> {
    type Output = T;

    fn index(&self, k: K) -> &T {
        &self.items[k.index()]
    }
}

impl<K: Key, T> IndexMut<K> for Table<K, T> {
    fn index_mut(&mut self, k: K) -> &mut T {
        &mut self.items[k.index()]
    }
}

/// A [`Table`] that remembers which of its items were handed out mutably since it was last
/// asked. Whoever keeps something derived from the items (the timer table keeps each link's
/// and subscription's earliest deadline) derives it again for those items only, and cannot
/// miss a change: every mutable access to an item goes through here and marks it.
pub(crate) struct Tracked<K, T> {
    table: Table<K, T>,
    /// The keys marked since the last [`Tracked::drain_touched`], each once.
    touched: Vec<K>,
    /// Per position: the key is in `touched`.
    marked: Vec<bool>,
}

impl<K, T> Default for Tracked<K, T> {
    fn default() -> Self {
        Tracked {
            table: Table::default(),
            touched: Vec::new(),
            marked: Vec::new(),
        }
    }
}

impl<K: Key, T> Tracked<K, T> {
    fn touch(&mut self, k: K) {
        if let Some(m) = self.marked.get_mut(k.index()) {
            if !*m {
                *m = true;
                self.touched.push(k);
            }
        }
    }

    /// Calls `f` with every item marked since the last call (in the order first marked), and
    /// unmarks them.
    pub(crate) fn drain_touched(&mut self, mut f: impl FnMut(K, &T)) {
        for k in self.touched.drain(..) {
            if let Some(m) = self.marked.get_mut(k.index()) {
                *m = false;
            }
            if let Some(t) = self.table.get(k) {
                f(k, t);
            }
        }
    }

    /// The item of `k`, if the table reaches that far.
    pub(crate) fn get(&self, k: K) -> Option<&T> {
        self.table.get(k)
    }

    /// The item of `k`, mutable: it is marked.
    pub(crate) fn get_mut(&mut self, k: K) -> Option<&mut T> {
        self.touch(k);
        self.table.get_mut(k)
    }

    /// The key the next [`Tracked::push`] returns.
    pub(crate) fn next_key(&self) -> K {
        self.table.next_key()
    }

    /// Adds `item` at the end, marked; returns its key.
    pub(crate) fn push(&mut self, item: T) -> K {
        let k = self.table.push(item);
        self.marked.push(false);
        self.touch(k);
        k
    }

    /// Every item goes, and every mark (the node stops).
    pub(crate) fn clear(&mut self) {
        self.table.clear();
        self.touched.clear();
        self.marked.clear();
    }

    /// Every key, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = K> + use<K, T> {
        self.table.keys()
    }

    /// Every item with its key, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, &T)> {
        self.table.iter()
    }

    /// Every item, in order.
    pub(crate) fn values(&self) -> std::slice::Iter<'_, T> {
        self.table.values()
    }

    /// The key of the first item that satisfies `pred`.
    pub(crate) fn position(&self, pred: impl FnMut(&T) -> bool) -> Option<K> {
        self.table.position(pred)
    }
}

impl<'a, K, T> IntoIterator for &'a Tracked<K, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        (&self.table).into_iter()
    }
}

/// Every item, mutable: all are marked.
impl<'a, K: Key, T> IntoIterator for &'a mut Tracked<K, T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        for k in self.table.keys() {
            self.touch(k);
        }
        (&mut self.table).into_iter()
    }
}

impl<K: Key, T> Index<K> for Tracked<K, T> {
    type Output = T;

    fn index(&self, k: K) -> &T {
        &self.table[k]
    }
}

impl<K: Key, T> IndexMut<K> for Tracked<K, T> {
    fn index_mut(&mut self, k: K) -> &mut T {
        self.touch(k);
        &mut self.table[k]
    }
}

/// The physical connection a call travels on: a link and its current connection. The caller and
/// callee parts and the glue that routes their records all use it.
pub(crate) type CallKey = (LinkKey, ConnId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mutable_access_marks_its_item_once() {
        let mut t: Tracked<LinkKey, u32> = Tracked::default();
        let a = t.push(1);
        let b = t.push(2);
        let c = t.push(3);
        let mut seen = Vec::new();
        t.drain_touched(|k, v| seen.push((k, *v)));
        assert_eq!(seen, vec![(a, 1), (b, 2), (c, 3)]);
        // Reads mark nothing.
        let _ = t[a] + t.get(b).copied().unwrap_or(0) + t.values().sum::<u32>();
        seen.clear();
        t.drain_touched(|k, v| seen.push((k, *v)));
        assert!(seen.is_empty());
        // Writes mark, each key once, in the order first written.
        t[c] = 30;
        t[a] += 10;
        if let Some(v) = t.get_mut(c) {
            *v += 3;
        }
        t.drain_touched(|k, v| seen.push((k, *v)));
        assert_eq!(seen, vec![(c, 33), (a, 11)]);
        seen.clear();
        t.drain_touched(|k, v| seen.push((k, *v)));
        assert!(seen.is_empty());
        // A mutable walk marks every item.
        for v in &mut t {
            *v += 0;
        }
        t.drain_touched(|k, _| seen.push((k, 0)));
        assert_eq!(seen, vec![(a, 0), (b, 0), (c, 0)]);
        seen.clear();
        // Cleared: nothing is left to drain, and a key beyond the end marks nothing.
        t[b] = 20;
        t.clear();
        assert!(t.get_mut(b).is_none());
        t.drain_touched(|k, v| seen.push((k, *v)));
        assert!(seen.is_empty());
    }
}
