//! The bound sockets' side of admission as one part: the gate, the inbound connections
//! admitted so far and the ones sent a REJECT. Admission itself (HELLO, REJECT, WELCOME,
//! duplicate resolution) is the thread's (`io/admission.rs`).

use std::collections::{HashMap, HashSet, VecDeque};

use super::gate::Gate;
use crate::proto::node::keys::{LinkKey, SlotKey};
use crate::proto::sched::IdMap;

/// The bound sockets' side of admission: the gate (ZAP handler, open connections, recent
/// refusals), the inbound connections admitted so far, and the ones sent a REJECT.
pub(crate) struct Accepting {
    /// Inbound connections by bound socket and routing id (unique per physical connection).
    /// The outer key is our own slot key (fast hash); the routing ids are chosen by peers and
    /// keep the standard keyed hash.
    pub(crate) inbound: IdMap<SlotKey, HashMap<Vec<u8>, LinkKey>>,
    /// Unadmitted connections of the bound sockets that were sent a REJECT: ignored since.
    pub(crate) refused: Refused,
    /// The bound sockets' ZAP handler, their open connections and recent refusals.
    pub(crate) gate: Gate,
}

/// The routing ids of bound-socket connections this node refused with a REJECT, per socket,
/// oldest forgotten first beyond [`Refused::CAPACITY`]. A refused connection gets no second
/// REJECT and its records are ignored: a peer that keeps sending garbage on one connection
/// costs one REJECT, and one that opens connection after connection one per connection
/// (each costs it a transport handshake), in bounded memory.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    by_slot: HashMap<SlotKey, HashSet<Vec<u8>>>,
    order: VecDeque<(SlotKey, Vec<u8>)>,
}

impl Refused {
    /// Routing ids remembered; the oldest goes when another one is refused.
    pub(crate) const CAPACITY: usize = 256;

    /// Whether connection `route` of socket `slot` was refused (and is still remembered).
    pub(crate) fn contains(&self, slot: SlotKey, route: &[u8]) -> bool {
        self.by_slot
            .get(&slot)
            .is_some_and(|ids| ids.contains(route))
    }

    /// Remembers connection `route` of socket `slot` as refused; false if it already was.
    pub(crate) fn insert(&mut self, slot: SlotKey, route: &[u8]) -> bool {
        if !self.by_slot.entry(slot).or_default().insert(route.to_vec()) {
            return false;
        }
        self.order.push_back((slot, route.to_vec()));
        while self.order.len() > Self::CAPACITY {
            if let Some((s, r)) = self.order.pop_front() {
                if let Some(ids) = self.by_slot.get_mut(&s) {
                    ids.remove(&r);
                }
            }
        }
        true
    }

    /// Connection `route` of socket `slot` is gone (its `ROUTER_NOTIFY` notice came): it is
    /// forgotten at once, so the remembered ids are those of connections still open, and a
    /// peer that opens and drops refused connections does not push out the ids of the ones
    /// it keeps open. False if it was not remembered.
    pub(crate) fn forget(&mut self, slot: SlotKey, route: &[u8]) -> bool {
        let Some(ids) = self.by_slot.get_mut(&slot) else {
            return false;
        };
        if !ids.remove(route) {
            return false;
        }
        if ids.is_empty() {
            self.by_slot.remove(&slot);
        }
        self.order
            .retain(|(s, r)| !(*s == slot && r.as_slice() == route));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Refused;
    use crate::proto::node::keys::{Key, SlotKey};

    fn slot(i: usize) -> SlotKey {
        SlotKey::from_index(i)
    }

    #[test]
    fn refused_ids_are_remembered_once_and_bounded() {
        let mut r = Refused::default();
        assert!(r.insert(slot(1), b"a"));
        assert!(
            !r.insert(slot(1), b"a"),
            "a second REJECT for the same connection"
        );
        assert!(r.contains(slot(1), b"a"));
        assert!(
            !r.contains(slot(2), b"a"),
            "routing ids are per bound socket"
        );
        for i in 0..Refused::CAPACITY {
            assert!(r.insert(slot(2), &i.to_be_bytes()));
        }
        assert!(
            !r.contains(slot(1), b"a"),
            "the oldest is forgotten beyond the capacity"
        );
        assert!(r.contains(slot(2), &0usize.to_be_bytes()));
        assert_eq!(r.order.len(), Refused::CAPACITY);
        assert_eq!(
            r.by_slot.values().map(|s| s.len()).sum::<usize>(),
            Refused::CAPACITY
        );
    }

    /// MISSION W3, L6: a refused connection's departure forgets its id, so a peer that opens
    /// and drops refused connections cannot push out the id of one it keeps open.
    #[test]
    fn w3_l6_a_departed_refused_connection_is_forgotten() {
        let mut r = Refused::default();
        assert!(r.insert(slot(1), b"kept"));
        for i in 0..(Refused::CAPACITY * 2) {
            let id = i.to_be_bytes();
            assert!(r.insert(slot(1), &id));
            assert!(r.forget(slot(1), &id), "its notice came");
        }
        assert!(r.contains(slot(1), b"kept"), "still remembered");
        assert!(!r.forget(slot(1), b"never"), "not remembered");
        assert_eq!(r.order.len(), 1);
        assert!(r.forget(slot(1), b"kept"));
        assert!(r.by_slot.is_empty() && r.order.is_empty());
    }
}
