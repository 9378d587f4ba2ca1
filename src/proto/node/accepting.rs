//! The bound sockets' side of admission as one part: the gate, the inbound connections
//! admitted so far and the ones sent a REJECT, with the gate's decisions: what a bound
//! socket's monitor event changes ([`Accepting::handle_monitor_event`]), how many of its
//! connections are unadmitted ([`Accepting::unadmitted`]), the ZAP verdict over the gate's
//! state ([`Accepting::judge_zap`]), whether a refused connection is sent its REJECT
//! ([`Accepting::refuse`]) and what a new allow-list does to the links
//! ([`Accepting::allow_list_effects`]). Admission of a HELLO is [`crate::proto::node::admit`]'s;
//! what follows from a verdict, in order, is the node core's
//! ([`crate::proto::node::core::gate`]); reading the ZAP handler and the monitors, sending
//! REJECTs and counting refusals are the shell's (`io/gate.rs`, `io/admission.rs`).

use std::collections::{HashMap, HashSet, VecDeque};

use super::gate::{Gate, Gated};
use crate::proto::node::keys::{LinkKey, SlotKey, Tracked};
use crate::proto::node::link::{Link, LinkKind};
use crate::proto::sched::IdMap;
use crate::proto::security::{
    handshake_refusal, judge_zap, InputRefusal, ZapFacts, ZapReply, ZapRequest, ZapTarget,
};
use crate::proto::state::{ConnState, FailureReason};
use crate::proto::transport::MonitorEvent;
use crate::proto::wire::RejectReason;

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

/// What a bound socket's monitor event asks of the shell, from
/// [`Accepting::handle_monitor_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GateEvent {
    /// Nothing beyond the gate's own count.
    Nothing,
    /// A connection of the socket is gone: the disconnect sweep checks start (the fallback
    /// for a loss notice libzmq dropped; the connection is named by its notice).
    Sweep,
    /// A connection's transport handshake failed: a refusal to count.
    Refused(InputRefusal, String),
}

/// A link closed because its peer's key left the allow-list, from
/// [`Accepting::allow_list_effects`]; the failure is `security_failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyRemoved {
    /// The link whose connection closes.
    pub(crate) link: LinkKey,
    /// The REJECT the peer is sent first (an inbound connection: libzmq cannot close one
    /// connection of a bound socket, so the peer is told to close it), if any.
    pub(crate) reject: Option<(RejectReason, &'static str)>,
    /// The failure's detail.
    pub(crate) detail: &'static str,
}

/// What a new allow-list does to the links, from [`Accepting::allow_list_effects`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AllowListEffects {
    /// Dialled links refused for want of an allowed key: they dial again now.
    pub(crate) redial: Vec<LinkKey>,
    /// Connections of nodes whose key left the list, closed in this order.
    pub(crate) removed: Vec<KeyRemoved>,
}

impl Accepting {
    /// Bound socket `slot`'s monitor reported `event` with `value` (a connection's descriptor,
    /// or a failed handshake's code) on a node that runs CURVE (`curve`) or not: the
    /// connections open on it change, and what the shell does about it.
    pub(crate) fn handle_monitor_event(
        &mut self,
        slot: SlotKey,
        event: MonitorEvent,
        value: u32,
        curve: bool,
    ) -> GateEvent {
        match event {
            MonitorEvent::Accepted => {
                self.gate.opened(slot, value);
                GateEvent::Nothing
            }
            MonitorEvent::Disconnected => {
                self.gate.closed(slot, value);
                GateEvent::Sweep
            }
            MonitorEvent::HandshakeFailed => {
                let (reason, detail) = handshake_refusal(curve, value);
                GateEvent::Refused(reason, detail)
            }
            // The ZAP handler's own refusals are recorded when it decides.
            _ => GateEvent::Nothing,
        }
    }

    /// Connections open on bound socket `slot` that are not admitted there (a WELCOME sent,
    /// not failed since).
    pub(crate) fn unadmitted(&self, slot: SlotKey) -> usize {
        let open = self.gate.open_on(slot);
        let admitted = self.inbound.get(&slot).map_or(0, HashMap::len);
        open.saturating_sub(admitted)
    }

    /// Connection `route` of bound socket `slot` is admitted as link `k`.
    pub(crate) fn admitted(&mut self, slot: SlotKey, route: Vec<u8>, k: LinkKey) {
        self.inbound.entry(slot).or_default().insert(route, k);
    }

    /// Connection `route` of bound socket `slot` is refused: true if it is to be sent its
    /// REJECT (the first refusal of it), false if it was refused already.
    pub(crate) fn refuse(&mut self, slot: SlotKey, route: &[u8]) -> bool {
        self.refused.insert(slot, route)
    }

    /// The verdict on one ZAP request ([`judge_zap`]) over the gate's state, and the refusal
    /// to count with the socket it refuses for, if it counts one. `gated` is what the
    /// request's domain names (`Gate::gated`), `still_bound` whether a bound ROUTER of that
    /// domain still holds its slot; the shell reads the socket's monitor first, so the
    /// connection's ACCEPTED event (published before its ZAP request) is counted.
    pub(crate) fn judge_zap(
        &self,
        request: &ZapRequest,
        gated: Option<Gated>,
        still_bound: bool,
        curve: bool,
        max_unadmitted: usize,
    ) -> (ZapReply, Option<(Gated, InputRefusal, String)>) {
        let target = match gated {
            None => ZapTarget::Unknown,
            Some(Gated::Publisher) => ZapTarget::Publisher,
            Some(Gated::Bound(slot)) if still_bound => ZapTarget::Router {
                unadmitted: self.unadmitted(slot),
            },
            Some(Gated::Bound(_)) => ZapTarget::Gone,
        };
        let (reply, refused) = judge_zap(&ZapFacts {
            request,
            target,
            curve,
            allowed: request
                .curve_key()
                .is_some_and(|key| self.gate.allows(&key)),
            max_unadmitted,
        });
        let refused = gated
            .zip(refused)
            .map(|(gated, (reason, detail))| (gated, reason, detail));
        (reply, refused)
    }

    /// What the allow-list in force (just loaded) does to `links`: dialled links refused
    /// for want of an allowed key dial again (a descriptor's key may be on the list now),
    /// and connections to nodes whose key left it close: inbound ones, and dialled ones
    /// whose key came from a descriptor (`pinned` says whether a link's endpoint has a key
    /// in `endpoint_keys`, the operator's word, which the list does not override).
    pub(crate) fn allow_list_effects(
        &self,
        links: &Tracked<LinkKey, Link>,
        pinned: impl Fn(LinkKey) -> bool,
    ) -> AllowListEffects {
        let mut effects = AllowListEffects::default();
        for (k, l) in links.iter() {
            let refused = l.conn.is_none()
                && l.retry_at.is_none()
                && l.waits_to_redial()
                && l.state.state() == ConnState::NotConnected
                && l.state
                    .last_failure()
                    .is_some_and(|f| f.reason == FailureReason::SecurityFailure);
            if refused {
                effects.redial.push(k);
            }
        }
        for (k, l) in links.iter() {
            let Some(key) = l.conn.as_ref().and_then(|c| c.verified_key) else {
                continue;
            };
            if self.gate.allows(&key) {
                continue;
            }
            let removed = if matches!(l.kind, LinkKind::Inbound { .. }) {
                // The dialer learns why (it treats a REJECT on an admitted connection like
                // any REJECT), then the connection closes as every failed inbound one does.
                KeyRemoved {
                    link: k,
                    reject: Some((
                        RejectReason::SecurityFailure,
                        "this node's key was removed from the peer's allow-list",
                    )),
                    detail: "its key was removed from the allow-list",
                }
            } else if !pinned(k) {
                KeyRemoved {
                    link: k,
                    reject: None,
                    detail: "the descriptor's key was removed from this node's allow-list",
                }
            } else {
                continue;
            };
            effects.removed.push(removed);
        }
        effects
    }
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
    use std::collections::BTreeSet;
    use std::time::Instant;

    use super::*;
    use crate::proto::node::keys::Key;
    use crate::proto::node::link::Conn;
    use crate::proto::security::{PublicKey, ZapStatus, KEY_LEN, ZMTP_CRYPTOGRAPHIC};
    use crate::proto::state::Recovery;
    use crate::proto::wire::Lane;

    fn slot(i: usize) -> SlotKey {
        SlotKey::from_index(i)
    }

    fn key(b: u8) -> PublicKey {
        PublicKey::from_bytes([b; KEY_LEN])
    }

    /// A gate over bound socket 1 (domain "app") and the publisher ("pub"), allowing `allow`.
    fn accepting(allow: &[PublicKey]) -> Accepting {
        let mut gate = Gate::new(allow.iter().copied().collect::<BTreeSet<_>>());
        gate.add_domain("app", Gated::Bound(slot(1)));
        gate.add_domain("pub", Gated::Publisher);
        Accepting {
            inbound: IdMap::default(),
            refused: Refused::default(),
            gate,
        }
    }

    fn zap(domain: &str, key: Option<PublicKey>) -> ZapRequest {
        ZapRequest::for_test(b"1", domain, key.as_ref())
    }

    /// MISSION W3: the monitor's ACCEPTED and DISCONNECTED events count a bound socket's open
    /// connections, an admitted one is not unadmitted, a disconnect starts the sweep checks,
    /// and a failed handshake is a refusal (`security_failure` only under CURVE).
    #[test]
    fn w3_monitor_events_count_the_unadmitted_connections_of_a_bound_socket() {
        let mut a = accepting(&[]);
        let s = slot(1);
        for fd in [10, 11, 12] {
            assert_eq!(
                a.handle_monitor_event(s, MonitorEvent::Accepted, fd, false),
                GateEvent::Nothing
            );
        }
        assert_eq!(a.unadmitted(s), 3);
        a.admitted(s, b"r1".to_vec(), LinkKey::from_index(0));
        assert_eq!(a.unadmitted(s), 2);
        assert_eq!(
            a.handle_monitor_event(s, MonitorEvent::Disconnected, 11, false),
            GateEvent::Sweep
        );
        assert_eq!(a.unadmitted(s), 1);
        // A disconnect it never saw open changes nothing but still starts the checks.
        assert_eq!(
            a.handle_monitor_event(s, MonitorEvent::Disconnected, 99, false),
            GateEvent::Sweep
        );
        assert_eq!((a.unadmitted(s), a.unadmitted(slot(2))), (1, 0));
        let refused = |curve| match accepting(&[]).handle_monitor_event(
            s,
            MonitorEvent::HandshakeFailed,
            ZMTP_CRYPTOGRAPHIC,
            curve,
        ) {
            GateEvent::Refused(why, _) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(true), InputRefusal::SecurityFailure);
        assert_eq!(refused(false), InputRefusal::HandshakeFailed);
        assert_eq!(
            a.handle_monitor_event(s, MonitorEvent::AuthFailed, 400, true),
            GateEvent::Nothing,
            "the ZAP handler's refusals are recorded when it decides"
        );
    }

    /// MISSION W3, F3: the ZAP verdict reads the gate: the unadmitted count of the request's
    /// socket against the cap (this connection included), the allow-list under CURVE, and
    /// a refusal is attributed to the socket it protects; an unknown domain counts nothing.
    #[test]
    fn w3_f3_the_zap_verdict_reads_the_cap_and_the_allow_list_of_its_socket() {
        let mut a = accepting(&[key(1)]);
        let s = slot(1);
        a.handle_monitor_event(s, MonitorEvent::Accepted, 10, false);
        a.handle_monitor_event(s, MonitorEvent::Accepted, 11, false);
        let gated = a.gate.gated("app");
        assert_eq!(gated, Some(Gated::Bound(s)));
        let (r, refused) = a.judge_zap(&zap("app", None), gated, true, false, 2);
        assert_eq!((r.status, refused), (ZapStatus::Ok, None));
        let (r, refused) = a.judge_zap(&zap("app", None), gated, true, false, 1);
        assert_eq!(r.status, ZapStatus::Refused);
        let (on, why, _) = refused.unwrap();
        assert_eq!((on, why), (Gated::Bound(s), InputRefusal::UnadmittedCap));
        // Admitted connections leave room under the cap.
        a.admitted(s, b"r".to_vec(), LinkKey::from_index(0));
        assert_eq!(
            a.judge_zap(&zap("app", None), gated, true, false, 1)
                .0
                .status,
            ZapStatus::Ok
        );
        // A socket closed meanwhile has no cap left to keep.
        assert_eq!(
            a.judge_zap(&zap("app", None), gated, false, false, 0)
                .0
                .status,
            ZapStatus::Ok
        );
        // CURVE: the allow-list, on the publisher as on a bound socket.
        let publisher = a.gate.gated("pub");
        let (r, refused) = a.judge_zap(&zap("pub", Some(key(1))), publisher, false, true, 0);
        assert_eq!(
            (r.status, refused, r.user_id),
            (ZapStatus::Ok, None, key(1).to_z85())
        );
        let (r, refused) = a.judge_zap(&zap("pub", Some(key(2))), publisher, false, true, 0);
        assert_eq!(r.status, ZapStatus::AuthFailure);
        let (on, why, _) = refused.unwrap();
        assert_eq!((on, why), (Gated::Publisher, InputRefusal::SecurityFailure));
        let (r, refused) = a.judge_zap(&zap("nowhere", Some(key(1))), None, false, true, 9);
        assert_eq!((r.status, refused), (ZapStatus::AuthFailure, None));
    }

    /// MISSION F3, W3: a new allow-list makes the dials refused for want of an allowed key dial
    /// again, closes inbound connections whose key left it (REJECT first) and dialled ones
    /// whose key came from a descriptor, and keeps dials whose key is pinned, connections
    /// whose key stays and connections without a verified key.
    #[test]
    fn f3_w3_a_new_allow_list_redials_refused_dials_and_closes_removed_keys() {
        let now = Instant::now();
        let a = accepting(&[key(1)]);
        let mut links: Tracked<LinkKey, Link> = Tracked::default();
        let dial = |peer| LinkKind::MeshDial {
            peer,
            lane: Lane::Application,
        };
        let with_key = |l: &mut Link, k: Option<PublicKey>| {
            let mut c = Conn::for_test(1, true, None);
            c.verified_key = k;
            l.conn = Some(c);
        };
        // Refused before dialling (no allowed key): retry_at cleared, security_failure.
        let refused = links.push(Link::new(dial(0), now));
        links[refused].retry_at = None;
        let failed = links[refused].state.handle_failure(
            FailureReason::SecurityFailure,
            "no key",
            Recovery::Hold,
            now,
        );
        assert!(failed.is_ok());
        // Refused for another reason: not redialled.
        let other = links.push(Link::new(dial(1), now));
        links[other].retry_at = None;
        let failed = links[other].state.handle_failure(
            FailureReason::TransportError,
            "gone",
            Recovery::Hold,
            now,
        );
        assert!(failed.is_ok());
        let inbound = links.push(Link::new(
            LinkKind::Inbound {
                rid: "c".into(),
                lane: Lane::Application,
            },
            now,
        ));
        with_key(&mut links[inbound], Some(key(2)));
        let described = links.push(Link::new(dial(2), now));
        with_key(&mut links[described], Some(key(3)));
        let pinned = links.push(Link::new(dial(3), now));
        with_key(&mut links[pinned], Some(key(4)));
        let kept = links.push(Link::new(dial(4), now));
        with_key(&mut links[kept], Some(key(1)));
        let plain = links.push(Link::new(dial(5), now));
        with_key(&mut links[plain], None);
        let effects = a.allow_list_effects(&links, |k| k == pinned);
        assert_eq!(effects.redial, [refused]);
        let removed: Vec<_> = effects
            .removed
            .iter()
            .map(|r| (r.link, r.reject.map(|(why, _)| why)))
            .collect();
        assert_eq!(
            removed,
            [
                (inbound, Some(RejectReason::SecurityFailure)),
                (described, None)
            ]
        );
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
