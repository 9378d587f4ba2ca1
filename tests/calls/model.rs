//! C1, C2, C3, C5, C6: every caller event, in random orders, against a reference model.

use std::collections::{BTreeMap, HashSet};
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use zmesh::proto::calls::{
    may_have_run, CallError, CallId, CallTable, Completion, Phase, RemoteCode, Unrouted,
};
use zmesh::proto::wire::ReplyCode;
use zmesh::proto::ConnId;

use super::{drain, ms, Done, A};

const CONNS: u64 = 3;

/// One input of the property test. Call numbers index the calls started so far (modulo
/// their count, one past it = an id never issued), so events hit pending, completed and
/// unknown calls, and repeat.
#[derive(Debug, Clone)]
enum Ev {
    Start {
        conn: u64,
        ttl_ms: Option<u64>,
    },
    Unrouted {
        registration: bool,
    },
    Sent(usize),
    SendFailed(usize),
    Accept {
        call: usize,
        right: bool,
    },
    Item {
        call: usize,
        right: bool,
        skew: i8,
    },
    Reply {
        call: usize,
        right: bool,
        code: usize,
    },
    Lost(u64),
    Cancel(usize),
    Shutdown,
    Advance(u64),
    Timeout,
}

fn ev() -> impl Strategy<Value = Ev> {
    let call = 0_usize..12;
    prop_oneof![
        4 => (0..CONNS, prop_oneof![Just(None), Just(Some(0)), (1_u64..3_000).prop_map(Some)])
            .prop_map(|(conn, ttl_ms)| Ev::Start { conn, ttl_ms }),
        1 => any::<bool>().prop_map(|registration| Ev::Unrouted { registration }),
        4 => call.clone().prop_map(Ev::Sent),
        1 => call.clone().prop_map(Ev::SendFailed),
        3 => (call.clone(), prop::bool::weighted(0.8))
            .prop_map(|(call, right)| Ev::Accept { call, right }),
        2 => (call.clone(), prop::bool::weighted(0.8), prop_oneof![8 => Just(0_i8), 1 => Just(-1), 1 => Just(1)])
            .prop_map(|(call, right, skew)| Ev::Item { call, right, skew }),
        2 => (call.clone(), prop::bool::weighted(0.8), 0..ReplyCode::ALL.len())
            .prop_map(|(call, right, code)| Ev::Reply { call, right, code }),
        1 => (0..CONNS).prop_map(Ev::Lost),
        1 => call.prop_map(Ev::Cancel),
        3 => (0_u64..1_500).prop_map(Ev::Advance),
        1 => prop_oneof![30 => Just(Ev::Timeout), 1 => Just(Ev::Shutdown)],
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MState {
    Issued,
    Sent,
    Accepted,
}

/// The reference model of one pending call: what the specification says the table knows.
#[derive(Debug, Clone)]
struct MCall {
    conn: ConnId,
    ttl: Option<Duration>,
    state: MState,
    deadline: Option<Instant>,
    next_seq: u64,
}

/// What happened to one call in the world, for the may_have_run check.
#[derive(Debug, Clone, Default)]
struct Facts {
    /// The frame left this node before the call completed: a send report, or a record that
    /// can only answer a received request, on the call's own connection.
    left: bool,
    /// The completion came from a REPLY on the call's connection.
    by_reply: bool,
}

struct Model {
    now: Instant,
    ids: Vec<CallId>,
    pending: BTreeMap<CallId, MCall>,
    facts: BTreeMap<CallId, Facts>,
    shut: bool,
}

impl Model {
    fn expire(&mut self, now: Instant) -> Vec<(CallId, CallError)> {
        let due: Vec<CallId> = self
            .pending
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        due.into_iter()
            .map(|id| {
                self.pending.remove(&id);
                (
                    id,
                    CallError::Timeout {
                        refused_by_server: false,
                    },
                )
            })
            .collect()
    }

    fn leave(&mut self, id: CallId, state: MState, now: Instant) {
        self.facts.entry(id).or_default().left = true;
        if let Some(c) = self.pending.get_mut(&id) {
            if c.state == MState::Issued {
                c.deadline = c.ttl.map(|t| now + t);
            }
            c.state = state;
        }
    }
}

fn pick(model: &Model, n: usize) -> CallId {
    if model.ids.is_empty() || n % (model.ids.len() + 1) == model.ids.len() {
        CallId(NonZeroU64::new(10_000 + n as u64).unwrap())
    } else {
        model.ids[n % (model.ids.len() + 1)]
    }
}

fn other(conn: ConnId) -> ConnId {
    ConnId(conn.0 % CONNS + 1)
}

/// What one event must produce: the completions, by call, and the stream items, in order.
#[derive(Default)]
struct Expect {
    done: BTreeMap<CallId, Result<Completion, CallError>>,
    items: Vec<(CallId, u64, Bytes)>,
}

/// Runs `events` through a table and the model; checks every completion against the model
/// and the facts, the gauges and the wake-up after every event, and exactly-once at the end.
fn run(events: &[Ev]) -> Result<(), TestCaseError> {
    let t0 = Instant::now();
    let mut table = CallTable::<ConnId>::new();
    let mut model = Model {
        now: t0,
        ids: Vec::new(),
        pending: BTreeMap::new(),
        facts: BTreeMap::new(),
        shut: false,
    };
    let mut completed: HashSet<CallId> = HashSet::new();

    for event in events.iter().chain(std::iter::once(&Ev::Shutdown)) {
        let now = model.now;
        // Every input first applies the deadlines due at its `now` (moving the clock is not
        // an input).
        let mut expect = Expect::default();
        if !matches!(event, Ev::Advance(_)) {
            expect.done = model
                .expire(now)
                .into_iter()
                .map(|(id, e)| (id, Err(e)))
                .collect();
        }
        apply(&mut table, &mut model, event, now, &mut expect);
        check_event(&mut table, &model, &mut completed, expect, event)?;
    }

    // Exactly once: every call ever started completed, once; none is left.
    prop_assert_eq!(completed.len(), model.ids.len());
    prop_assert_eq!(table.pending(), 0);
    prop_assert_eq!(table.poll_timeout(), None);
    prop_assert_eq!(table.stats().started, model.ids.len() as u64);
    prop_assert_eq!(table.stats().completed, model.ids.len() as u64);
    Ok(())
}

/// Gives `event` to the table and to the model, and adds what it must produce to `expect`.
fn apply(
    table: &mut CallTable<ConnId>,
    model: &mut Model,
    event: &Ev,
    now: Instant,
    expect: &mut Expect,
) {
    match *event {
        Ev::Start { conn, ttl_ms } => start(table, model, conn, ttl_ms, now, expect),
        Ev::Unrouted { registration } => {
            let (reason, err) = if registration {
                (Unrouted::NoRegistration, CallError::NoRegistration)
            } else {
                (Unrouted::NoReadyPeer, CallError::NoReadyPeer)
            };
            let id = table.start_unrouted(reason, now);
            model.ids.push(id);
            model.facts.insert(id, Facts::default());
            let err = if model.shut {
                CallError::Shutdown { sent: false }
            } else {
                err
            };
            expect.done.insert(id, Err(err));
        }
        Ev::Sent(n) => {
            let id = pick(model, n);
            let _ = table.handle_sent(id, now);
            if model
                .pending
                .get(&id)
                .is_some_and(|c| c.state == MState::Issued)
            {
                model.leave(id, MState::Sent, now);
            }
        }
        Ev::SendFailed(n) => {
            let id = pick(model, n);
            let _ = table.handle_send_failed(id, now);
            if model
                .pending
                .get(&id)
                .is_some_and(|c| c.state == MState::Issued)
            {
                model.pending.remove(&id);
                expect.done.insert(id, Err(CallError::TransportRefused));
            }
        }
        Ev::Accept { call, right } => {
            let id = pick(model, call);
            let conn = model.pending.get(&id).map_or(A, |c| c.conn);
            let conn = if right { conn } else { other(conn) };
            let _ = table.handle_accept(id, conn, now);
            if right && model.pending.contains_key(&id) {
                model.leave(id, MState::Accepted, now);
            }
        }
        Ev::Item { call, right, skew } => item(table, model, (call, right, skew), now, expect),
        Ev::Reply { call, right, code } => reply(table, model, (call, right, code), now, expect),
        Ev::Lost(conn) => lost(table, model, ConnId(conn + 1), now, expect),
        Ev::Cancel(n) => {
            let id = pick(model, n);
            let _ = table.handle_cancel(id, now);
            if let Some(c) = model.pending.remove(&id) {
                expect.done.insert(
                    id,
                    Err(CallError::Cancelled {
                        sent: c.state != MState::Issued,
                    }),
                );
            }
        }
        Ev::Shutdown => {
            table.handle_shutdown(now);
            model.shut = true;
            for (id, c) in std::mem::take(&mut model.pending) {
                expect.done.insert(
                    id,
                    Err(CallError::Shutdown {
                        sent: c.state != MState::Issued,
                    }),
                );
            }
        }
        // The clock moves; the table hears nothing until the next input.
        Ev::Advance(d) => model.now += ms(d),
        Ev::Timeout => table.handle_timeout(now),
    }
}

/// `Ev::Start`: a call on connection `conn + 1`; refused at once after shutdown.
fn start(
    table: &mut CallTable<ConnId>,
    model: &mut Model,
    conn: u64,
    ttl_ms: Option<u64>,
    now: Instant,
    expect: &mut Expect,
) {
    let conn = ConnId(conn + 1);
    let ttl = ttl_ms.map(ms);
    let id = table.start(conn, ttl, now);
    model.ids.push(id);
    model.facts.insert(id, Facts::default());
    if model.shut {
        expect
            .done
            .insert(id, Err(CallError::Shutdown { sent: false }));
    } else {
        model.pending.insert(
            id,
            MCall {
                conn,
                ttl: ttl.filter(|t| !t.is_zero()),
                state: MState::Issued,
                deadline: None,
                next_seq: 0,
            },
        );
    }
}

/// `Ev::Item`: a stream item for call number `call`, on its own connection or another, with
/// its sequence number `skew` off the one due.
fn item(
    table: &mut CallTable<ConnId>,
    model: &mut Model,
    (call, right, skew): (usize, bool, i8),
    now: Instant,
    expect: &mut Expect,
) {
    let id = pick(model, call);
    let (conn, next) = model
        .pending
        .get(&id)
        .map_or((A, 0), |c| (c.conn, c.next_seq));
    let seq = next.saturating_add_signed(i64::from(skew));
    let conn = if right { conn } else { other(conn) };
    let payload = Bytes::from(seq.to_be_bytes().to_vec());
    let _ = table.handle_item(id, conn, seq, payload.clone(), now);
    if right && model.pending.contains_key(&id) {
        model.leave(id, MState::Accepted, now);
        let c = model.pending.get_mut(&id).unwrap();
        if seq == c.next_seq {
            c.next_seq += 1;
            expect.items.push((id, seq, payload));
        } else {
            let expected_seq = c.next_seq;
            model.pending.remove(&id);
            expect.done.insert(
                id,
                Err(CallError::ItemOutOfOrder {
                    expected: expected_seq,
                    got: seq,
                }),
            );
        }
    }
}

/// `Ev::Reply`: a REPLY with `ReplyCode::ALL[code]` for call number `call`, on its own
/// connection or another.
fn reply(
    table: &mut CallTable<ConnId>,
    model: &mut Model,
    (call, right, code): (usize, bool, usize),
    now: Instant,
    expect: &mut Expect,
) {
    let id = pick(model, call);
    let code = ReplyCode::ALL[code];
    let conn = model.pending.get(&id).map_or(A, |c| c.conn);
    let conn = if right { conn } else { other(conn) };
    let payload = Bytes::from_static(b"r");
    let _ = table.handle_reply(id, conn, code, payload.clone(), now);
    if !right {
        return;
    }
    if let Some(c) = model.pending.remove(&id) {
        let facts = model.facts.entry(id).or_default();
        facts.left = true;
        facts.by_reply = true;
        let result = match code {
            ReplyCode::Ok => Ok(Completion {
                payload,
                items: c.next_seq,
            }),
            ReplyCode::Timeout => Err(CallError::Timeout {
                refused_by_server: true,
            }),
            ReplyCode::Unavailable => Err(CallError::Unavailable {
                accepted: c.state == MState::Accepted,
            }),
            code => Err(CallError::Remote {
                code: RemoteCode::from_reply(code).unwrap(),
                message: "r".to_owned(),
            }),
        };
        expect.done.insert(id, result);
    }
}

/// `Ev::Lost`: connection `conn` is gone; every call on it fails by its phase.
fn lost(
    table: &mut CallTable<ConnId>,
    model: &mut Model,
    conn: ConnId,
    now: Instant,
    expect: &mut Expect,
) {
    let _ = table.handle_connection_lost(conn, now);
    let on: Vec<CallId> = model
        .pending
        .iter()
        .filter(|(_, c)| c.conn == conn)
        .map(|(&id, _)| id)
        .collect();
    for id in on {
        let c = model.pending.remove(&id).unwrap();
        let err = match c.state {
            MState::Issued => CallError::TransportRefused,
            MState::Sent => CallError::OutcomeUnknown { phase: Phase::Sent },
            MState::Accepted => CallError::OutcomeUnknown {
                phase: Phase::Accepted,
            },
        };
        expect.done.insert(id, Err(err));
    }
}

/// After `event`: the items and completions are exactly those expected, each call completes
/// once and says what is known, and the C5 gauges and the one wake-up match the model.
fn check_event(
    table: &mut CallTable<ConnId>,
    model: &Model,
    completed: &mut HashSet<CallId>,
    expect: Expect,
    event: &Ev,
) -> Result<(), TestCaseError> {
    // Items in order, exactly those the model expects.
    let items: Vec<_> = std::iter::from_fn(|| table.poll_item())
        .map(|i| (i.id, i.seq, i.payload))
        .collect();
    prop_assert_eq!(items, expect.items, "items after {:?}", event);

    let got: Vec<Done> = drain(table);
    let got_ids: Vec<CallId> = got.iter().map(|(id, _)| *id).collect();
    let got_map: BTreeMap<CallId, Result<Completion, CallError>> = got.into_iter().collect();
    prop_assert_eq!(
        got_map.len(),
        got_ids.len(),
        "one completion per call per poll"
    );
    prop_assert_eq!(&got_map, &expect.done, "completions after {:?}", event);
    for (id, result) in &got_map {
        prop_assert!(completed.insert(*id), "{} completed twice", id);
        prop_assert!(model.ids.contains(id), "completion for an id never issued");
        let facts = model.facts.get(id).cloned().unwrap_or_default();
        if let Err(err) = result {
            if !facts.left {
                // Never sent: never "may have run".
                prop_assert!(!may_have_run(err), "{} never left but {:?}", id, err);
            } else if !facts.by_reply {
                // Sent, and failed locally: always "may have run".
                prop_assert!(may_have_run(err), "{} left but {:?}", id, err);
            }
        }
    }

    // C5 gauges and the one wake-up, after every event.
    prop_assert_eq!(table.pending(), model.pending.len());
    for c in 1..=CONNS {
        let conn = ConnId(c);
        let n = model.pending.values().filter(|m| m.conn == conn).count();
        prop_assert_eq!(table.pending_on(conn), n);
    }
    let wake = model.pending.values().filter_map(|c| c.deadline).min();
    prop_assert_eq!(table.poll_timeout(), wake);
    prop_assert!(model.pending.keys().all(|&id| table.is_pending(id)));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// C1, C2, C3, C5, C6: sent / send failed / accept on the right or wrong connection /
    /// items in and out of order / reply with every code / connection lost / cancel /
    /// shutdown / deadlines, duplicated, late and for unknown ids, in random orders for many
    /// calls: each call completes exactly once, with the result the specification gives,
    /// never "may have run" if it never left and always if it left and failed locally; the
    /// gauges and the wake-up match after every event.
    #[test]
    fn c1_c3_prop_every_call_completes_exactly_once_and_says_what_is_known(
        events in prop::collection::vec(ev(), 1..150)
    ) {
        run(&events)?;
    }
}
