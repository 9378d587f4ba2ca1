//! The target accepts (its RouteMesh lanes or its ClientServer server): the runner dials,
//! as a RouteMesh peer or a ClientServer client, and checks admission and REJECT reasons
//! (§5.1), liveness (§5.2), calls (§5.3, §5.4), CLOSE and malformed input (§5.1, §6),
//! capabilities and CANCEL (§8.1, §4.13, in `cancel`), ANSWERS (§4.16, `packed`), PACK
//! (§4.18, `pack`) and CALLS16 (§4.19, `ids16`).

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use zmesh::proto::wire::{
    Batch, CloseReason, Lane, Record, RejectReason, ReplyCode, Role, Welcome,
};

use super::link::{
    collect, next, random_nz, request, show, Dialled, Got, HelloSpec, Wire, ANSWER, NO_CHANNEL,
    QUIET,
};
use super::{liveness, Job, Report, Target};

mod cancel;
mod ids16;
mod pack;
mod packed;

/// Which acceptor the target is.
#[derive(Clone)]
pub enum Acceptor {
    /// RouteMesh: its Application and Completion lane endpoints.
    RouteMesh {
        /// Application lane endpoint.
        app: String,
        /// Completion lane endpoint.
        comp: String,
    },
    /// A ClientServer server.
    Server {
        /// Its endpoint.
        ep: String,
    },
}

impl Acceptor {
    fn role(&self) -> String {
        match self {
            Acceptor::RouteMesh { .. } => "route-mesh dialler".into(),
            Acceptor::Server { .. } => "client-server client".into(),
        }
    }

    /// The lane admission checks run on, and its endpoint.
    fn main(&self) -> (Lane, &str) {
        match self {
            Acceptor::RouteMesh { app, .. } => (Lane::Application, app),
            Acceptor::Server { ep } => (Lane::ClientServer, ep),
        }
    }

    /// Every lane with its endpoint.
    fn lanes(&self) -> Vec<(Lane, &str)> {
        match self {
            Acceptor::RouteMesh { app, comp } => {
                vec![(Lane::Application, app), (Lane::Completion, comp)]
            }
            Acceptor::Server { ep } => vec![(Lane::ClientServer, ep)],
        }
    }
}

/// One scenario against an acceptor.
type Scenario = fn(&Target, &Acceptor, &mut Report);

/// The scenarios against one acceptor, to run in parallel: admission, liveness, calls, close
/// and malformed input, capabilities and CANCEL.
pub fn jobs(target: &Target, acc: Acceptor) -> Vec<Job> {
    let mut out: Vec<Job> = Vec::new();
    let scenarios: [(&str, Scenario); 4] = [
        ("admission", admission),
        ("liveness", live),
        ("calls", calls_then_capabilities),
        ("close", close_and_malformed),
    ];
    for (what, f) in scenarios {
        let (t, a) = (target.clone(), acc.clone());
        out.push((
            format!("{} {what}", acc.role()),
            Box::new(move || {
                let mut r = Report::new(a.role());
                f(&t, &a, &mut r);
                r.outcomes
            }),
        ));
    }
    out
}

/// The call checks, then the capability and CANCEL checks (`cancel`), then ANSWERS (`packed`),
/// PACK (`pack`) and CALLS16 (`ids16`),
/// one after the other in one thread: the later ones admit their connections once the
/// liveness scenario's are past their first PROBEs.
fn calls_then_capabilities(t: &Target, acc: &Acceptor, r: &mut Report) {
    calls(t, acc, r);
    cancel::capabilities(t, acc, r);
    packed::answers_packed(t, acc, r);
    pack::pack_records(acc, r);
    ids16::ids16_records(t, acc, r);
}

/// A runner-side session: one libzmq context, fresh RIDs and generations per connection.
struct Session {
    ctx: zmq::Context,
    n: u32,
}

impl Session {
    fn new() -> Session {
        Session {
            ctx: zmq::Context::new(),
            n: 0,
        }
    }

    /// A fresh RID for a connection of the runner.
    fn rid(&mut self, what: &str) -> String {
        self.n += 1;
        format!("conform-{what}-{}", self.n)
    }

    fn dial(&self, ep: &str, lane: Lane) -> Result<Dialled, String> {
        Dialled::connect(&self.ctx, ep, lane, random_nz())
    }
}

/// What the target said in its WELCOME.
#[derive(Clone)]
struct Admitted {
    rid: String,
    generation: NonZeroU64,
    server: bool,
}

/// Sends `hello` on a new connection to `ep` (whose lane is the HELLO's) and returns the
/// first answer (PROBEs before it are a violation and returned as they are).
fn hello_answer(
    s: &Session,
    ep: &str,
    hello: &HelloSpec,
) -> Result<(Dialled, Option<Got>), String> {
    hello_answer_on(s, ep, hello.lane, hello)
}

/// As [`hello_answer`], on an endpoint of lane `socket_lane` (the HELLO may name another).
fn hello_answer_on(
    s: &Session,
    ep: &str,
    socket_lane: Lane,
    hello: &HelloSpec,
) -> Result<(Dialled, Option<Got>), String> {
    let d = s.dial(ep, socket_lane)?;
    d.send(&hello.encode())?;
    let got = next(&d, ANSWER, false);
    Ok((d, got))
}

/// Dials and gets admitted: the connection, its WELCOME, the instant it became ready.
fn admit(s: &Session, ep: &str, hello: &HelloSpec) -> Result<(Dialled, Welcome, Instant), String> {
    let (d, got) = hello_answer(s, ep, hello)?;
    match got {
        Some(Got::Record(Record::Welcome(w))) => Ok((d, w, Instant::now())),
        Some(other) => Err(format!("answered {}", show(&other))),
        None => Err("no answer within 5 s".into()),
    }
}

/// The REJECT reason of an answer, or what came instead.
fn reject_of(got: &Option<Got>) -> Result<RejectReason, String> {
    match got {
        Some(Got::Record(Record::Reject(j))) => Ok(j.reason),
        Some(other) => Err(show(other)),
        None => Err("no answer within 5 s".into()),
    }
}

fn expect_reject(
    r: &mut Report,
    id: &'static str,
    s: &Session,
    (ep, socket_lane): (&str, Lane),
    hello: &HelloSpec,
    want: RejectReason,
) {
    match hello_answer_on(s, ep, socket_lane, hello) {
        Ok((_, got)) => match reject_of(&got) {
            Ok(reason) => r.check(id, reason == want, format!("REJECT {reason:?}")),
            Err(e) => r.fail(id, format!("expected REJECT {want:?}, got {e}")),
        },
        Err(e) => r.fail(id, e),
    }
}

/// The admission checks (§5.1) in order, on the acceptor's main lane: each a function of
/// its own, those after the WELCOME given what the target said in it.
fn admission(t: &Target, acc: &Acceptor, r: &mut Report) {
    let mut s = Session::new();
    let (lane, ep) = acc.main();
    let route_mesh = lane != Lane::ClientServer;
    silent_before_hello(&s, (ep, lane), r);
    let Some(w) = welcome(t, acc, &mut s, r) else {
        for id in [
            "5.1/reject-lane-mismatch",
            "5.1/reject-identity-mismatch",
            "5.1/reject-generation-mismatch",
            "5.1/reject-not-required",
            "5.1/reject-security-failure",
            "5.1/reject-duplicate",
            "5.1/reject-unsupported-version",
            "5.1/reject-protocol-first-record",
            "5.1/reject-protocol-malformed-hello",
            "5.1/one-reject-per-connection",
            "5.1/no-answer-to-close-or-reject",
            "5.1/replacement",
        ] {
            r.skip(id, "no WELCOME: admission failed");
        }
        return;
    };
    reject_lane_mismatch(&mut s, (ep, lane), route_mesh, r);
    reject_identity_mismatch(&mut s, (ep, lane), &w, r);
    reject_generation_mismatch(&mut s, (ep, lane), &w, r);
    reject_not_required(&mut s, (ep, lane), route_mesh, &w, r);
    reject_pinned_peer(t, &s, (ep, lane), route_mesh, &w, r);
    reject_unsupported_version(&mut s, (ep, lane), r);
    reject_protocol_first_record(&mut s, (ep, lane), r);
    reject_malformed_hello(&mut s, (ep, lane), r);
    no_answer_to_close_or_reject(&s, (ep, lane), r);
    replacement(&mut s, (ep, lane), r);
}

/// 5.1/silent-before-hello: nothing on a connection before the runner's HELLO.
fn silent_before_hello(s: &Session, (ep, lane): (&str, Lane), r: &mut Report) {
    match s.dial(ep, lane) {
        Ok(d) => {
            let got = d.recv(QUIET);
            r.check(
                "5.1/silent-before-hello",
                got.is_none(),
                match got {
                    None => format!("nothing in {} ms", QUIET.as_millis()),
                    Some(f) => format!("sent {} frame(s) unasked", f.len()),
                },
            );
        }
        Err(e) => r.fail("5.1/silent-before-hello", e),
    }
}

/// 5.1/welcome: a well-formed HELLO on every lane gets one WELCOME first; what the first
/// one said.
fn welcome(t: &Target, acc: &Acceptor, s: &mut Session, r: &mut Report) -> Option<Admitted> {
    let mut admitted: Option<Admitted> = None;
    let mut problems = Vec::new();
    for (lane, ep) in acc.lanes() {
        let mut h = HelloSpec::new(lane, &s.rid("hello"), random_nz());
        h.expect_rid = t.args.rid.clone();
        match admit(s, ep, &h) {
            Ok((_, w, _)) => {
                if w.lane != lane {
                    problems.push(format!("WELCOME of lane {:?} on lane {lane:?}", w.lane));
                }
                if let Some(rid) = &t.args.rid {
                    if w.rid.as_str() != rid {
                        problems.push(format!("WELCOME from {:?}, not {rid:?}", w.rid.as_str()));
                    }
                }
                admitted.get_or_insert(Admitted {
                    rid: w.rid.as_str().to_owned(),
                    generation: w.generation,
                    server: w
                        .memberships
                        .as_slice()
                        .iter()
                        .any(|m| m.role == Role::Server),
                });
            }
            Err(e) => problems.push(format!("lane {lane:?}: {e}")),
        }
    }
    r.check(
        "5.1/welcome",
        problems.is_empty() && admitted.is_some(),
        if problems.is_empty() {
            "one WELCOME per lane, first".to_owned()
        } else {
            problems.join("; ")
        },
    );
    admitted
}

/// 5.1/reject-lane-mismatch: a Completion HELLO on the Application endpoint (a RouteMesh
/// HELLO on the ClientServer endpoint).
fn reject_lane_mismatch(
    s: &mut Session,
    (ep, lane): (&str, Lane),
    route_mesh: bool,
    r: &mut Report,
) {
    // the ClientServer endpoint).
    let mut h = HelloSpec::new(lane, &s.rid("lane"), random_nz());
    h.lane = if route_mesh {
        Lane::Completion
    } else {
        Lane::Application
    };
    expect_reject(
        r,
        "5.1/reject-lane-mismatch",
        s,
        (ep, lane),
        &h,
        RejectReason::LaneMismatch,
    );
}

/// 5.1/reject-identity-mismatch: a HELLO expecting another RID than the target's.
fn reject_identity_mismatch(
    s: &mut Session,
    (ep, lane): (&str, Lane),
    w: &Admitted,
    r: &mut Report,
) {
    let mut h = HelloSpec::new(lane, &s.rid("identity"), random_nz());
    h.expect_rid = Some(format!(
        "{}-not",
        w.rid.chars().take(200).collect::<String>()
    ));
    expect_reject(
        r,
        "5.1/reject-identity-mismatch",
        s,
        (ep, lane),
        &h,
        RejectReason::IdentityMismatch,
    );
}

/// 5.1/reject-generation-mismatch: a HELLO expecting another generation than the target's.
fn reject_generation_mismatch(
    s: &mut Session,
    (ep, lane): (&str, Lane),
    w: &Admitted,
    r: &mut Report,
) {
    let mut h = HelloSpec::new(lane, &s.rid("generation"), random_nz());
    h.expect_generation = Some(NonZeroU64::new(w.generation.get() ^ 1).unwrap_or(NonZeroU64::MAX));
    expect_reject(
        r,
        "5.1/reject-generation-mismatch",
        s,
        (ep, lane),
        &h,
        RejectReason::GenerationMismatch,
    );
}

/// 5.1/reject-not-required: a RouteMesh HELLO without Server membership, to a target that
/// announced none.
fn reject_not_required(
    s: &mut Session,
    (ep, lane): (&str, Lane),
    route_mesh: bool,
    w: &Admitted,
    r: &mut Report,
) {
    if !route_mesh {
        r.skip(
            "5.1/reject-not-required",
            "n/a: ClientServer never gives NotRequired",
        );
    } else if w.server {
        r.skip(
            "5.1/reject-not-required",
            "n/a: the target announced a Server membership",
        );
    } else {
        let mut h = HelloSpec::new(lane, &s.rid("not-required"), random_nz());
        h.server = false;
        expect_reject(
            r,
            "5.1/reject-not-required",
            s,
            (ep, lane),
            &h,
            RejectReason::NotRequired,
        );
    }
}

/// 5.1/reject-security-failure and 5.1/reject-duplicate: HELLOs of the pinned peer, with
/// another security identity, and (when its RID is larger than the target's) with its own.
fn reject_pinned_peer(
    t: &Target,
    s: &Session,
    (ep, lane): (&str, Lane),
    route_mesh: bool,
    w: &Admitted,
    r: &mut Report,
) {
    match (&t.pinned, route_mesh) {
        (Some((rid, identity)), true) => {
            let mut h = HelloSpec::new(lane, rid, random_nz());
            h.security_identity =
                format!("{}-wrong", identity.chars().take(200).collect::<String>());
            expect_reject(
                r,
                "5.1/reject-security-failure",
                s,
                (ep, lane),
                &h,
                RejectReason::SecurityFailure,
            );
            if w.rid.as_bytes() < rid.as_bytes() {
                let mut h = HelloSpec::new(lane, rid, random_nz());
                h.security_identity = identity.clone();
                expect_reject(
                    r,
                    "5.1/reject-duplicate",
                    s,
                    (ep, lane),
                    &h,
                    RejectReason::Duplicate,
                );
            } else {
                r.skip(
                    "5.1/reject-duplicate",
                    format!(
                        "n/a: the target's RID {:?} is not smaller than {rid:?}",
                        w.rid
                    ),
                );
            }
        }
        (_, false) => {
            r.skip(
                "5.1/reject-security-failure",
                "n/a: ClientServer checks no identity",
            );
            r.skip("5.1/reject-duplicate", "n/a: ClientServer");
        }
        (None, true) => {
            r.skip(
                "5.1/reject-security-failure",
                "needs --pinned-peer RID=IDENTITY",
            );
            r.skip("5.1/reject-duplicate", "needs --pinned-peer RID=IDENTITY");
        }
    }
}

/// 5.1/reject-unsupported-version: a HELLO in envelope version 2.
fn reject_unsupported_version(s: &mut Session, (ep, lane): (&str, Lane), r: &mut Report) {
    let h = HelloSpec::new(lane, &s.rid("v2"), random_nz());
    let mut frames = h.encode();
    if let Some(b) = frames.first_mut().and_then(|f| f.get_mut(2)) {
        *b = 2;
    }
    let id = "5.1/reject-unsupported-version";
    match reject_reason_for(s, (ep, lane), &frames) {
        Ok(reason) => r.check(
            id,
            reason == RejectReason::UnsupportedVersion,
            format!("a version-1 REJECT {reason:?}"),
        ),
        Err(e) => r.fail(id, e),
    }
}

/// 5.1/reject-protocol-first-record and 5.1/one-reject-per-connection: a PROBE first; then
/// more records and a valid HELLO on the same connection.
fn reject_protocol_first_record(s: &mut Session, (ep, lane): (&str, Lane), r: &mut Report) {
    match s.dial(ep, lane).and_then(|d| {
        d.send(
            &Record::Probe {
                id: NonZeroU64::MIN,
            }
            .encode(),
        )?;
        Ok((next(&d, ANSWER, false), d))
    }) {
        Ok((got, d)) => {
            match reject_of(&got) {
                Ok(reason) => r.check(
                    "5.1/reject-protocol-first-record",
                    reason == RejectReason::Protocol,
                    format!("REJECT {reason:?}"),
                ),
                Err(e) => r.fail("5.1/reject-protocol-first-record", e),
            }
            let probe = Record::Probe {
                id: NonZeroU64::MIN,
            }
            .encode();
            let hello = HelloSpec::new(lane, &s.rid("late"), random_nz()).encode();
            let sent = d
                .send(&probe)
                .and_then(|_| d.send(&probe))
                .and_then(|_| d.send(&hello));
            let more = collect(&d, Duration::from_millis(1_000));
            r.check(
                "5.1/one-reject-per-connection",
                sent.is_ok() && more.is_empty(),
                if more.is_empty() {
                    "nothing more for two PROBEs and a HELLO".to_owned()
                } else {
                    format!(
                        "then: {}",
                        more.iter().map(show).collect::<Vec<_>>().join(", ")
                    )
                },
            );
        }
        Err(e) => {
            r.fail("5.1/reject-protocol-first-record", e.clone());
            r.skip("5.1/one-reject-per-connection", e);
        }
    }
}

/// 5.1/reject-protocol-malformed-hello: a HELLO with generation 0 (malformed: non-zero field).
fn reject_malformed_hello(s: &mut Session, (ep, lane): (&str, Lane), r: &mut Report) {
    let h = HelloSpec::new(lane, &s.rid("zero"), random_nz());
    let mut frames = h.encode();
    if let Some(f) = frames.first_mut() {
        // rid is at 5..: 2 length bytes + the RID, then the generation.
        let at = 5 + 2 + h.rid.len();
        if f.len() >= at + 8 {
            f[at..at + 8].fill(0);
        }
    }
    let id = "5.1/reject-protocol-malformed-hello";
    match reject_reason_for(s, (ep, lane), &frames) {
        Ok(reason) => r.check(
            id,
            reason == RejectReason::Protocol,
            format!("REJECT {reason:?}"),
        ),
        Err(e) => r.fail(id, e),
    }
}

/// Sends `frames` as the first message of a new connection to `ep` and returns the REJECT
/// reason it is answered with, or what went wrong or came instead.
fn reject_reason_for(
    s: &Session,
    (ep, lane): (&str, Lane),
    frames: &[Vec<u8>],
) -> Result<RejectReason, String> {
    let d = s.dial(ep, lane)?;
    d.send(frames)?;
    reject_of(&next(&d, ANSWER, false))
}

/// 5.1/no-answer-to-close-or-reject: CLOSE and REJECT as first records get no answer.
fn no_answer_to_close_or_reject(s: &Session, (ep, lane): (&str, Lane), r: &mut Report) {
    let close = Record::Close {
        reason: CloseReason::Shutdown,
    }
    .encode();
    let reject = Record::Reject(zmesh::proto::wire::Reject {
        reason: RejectReason::IdentityMismatch,
        detail: Default::default(),
    })
    .encode();
    match s.dial(ep, lane).and_then(|d| {
        d.send(&close)?;
        d.send(&reject)?;
        Ok(collect(&d, Duration::from_millis(1_000)))
    }) {
        Ok(got) => r.check(
            "5.1/no-answer-to-close-or-reject",
            got.is_empty(),
            if got.is_empty() {
                "no answer".to_owned()
            } else {
                got.iter().map(show).collect::<Vec<_>>().join(", ")
            },
        ),
        Err(e) => r.fail("5.1/no-answer-to-close-or-reject", e),
    }
}

/// 5.1/replacement: the same RID and generation again.
fn replacement(s: &mut Session, (ep, lane): (&str, Lane), r: &mut Report) {
    let h = HelloSpec::new(lane, &s.rid("replaced"), random_nz());
    match admit(s, ep, &h).and_then(|(old, _, _)| {
        let (new, got) = hello_answer(s, ep, &h)?;
        let admitted = matches!(got, Some(Got::Record(Record::Welcome(_))));
        let closed = next(&old, ANSWER, true);
        drop(new);
        Ok((admitted, closed))
    }) {
        Ok((admitted, closed)) => {
            let replaced = matches!(
                closed,
                Some(Got::Record(Record::Close {
                    reason: CloseReason::Replaced
                }))
            );
            r.check(
                "5.1/replacement",
                admitted && replaced,
                format!(
                    "second connection {}, the first got {}",
                    if admitted { "admitted" } else { "not admitted" },
                    closed.as_ref().map_or("nothing".to_owned(), show)
                ),
            );
        }
        Err(e) => r.fail("5.1/replacement", e),
    }
}

/// Two ready connections of one runner RID (RouteMesh: both lanes; ClientServer: two
/// clients), the first checked, the second carrying the ACK that must not count.
fn live(t: &Target, acc: &Acceptor, r: &mut Report) {
    let s = Session::new();
    let lanes = acc.lanes();
    let gen = random_nz();
    let rid = "conform-live";
    let (lane, ep) = lanes[0];
    let other_of = match acc {
        Acceptor::RouteMesh { comp, .. } => (Lane::Completion, comp.as_str(), rid.to_owned()),
        Acceptor::Server { ep } => (Lane::ClientServer, ep.as_str(), "conform-live-2".to_owned()),
    };
    let first = admit(&s, ep, &HelloSpec::new(lane, rid, gen));
    let second = admit(
        &s,
        other_of.1,
        &HelloSpec::new(other_of.0, &other_of.2, gen),
    );
    match (first, second) {
        (Ok((a, _, at)), Ok((b, _, _))) => {
            liveness::check(r, &a, Some(&b), at, true, t.args.long);
        }
        (Err(e), _) | (_, Err(e)) => {
            for rule in super::RULES.iter().filter(|x| x.id.starts_with("5.2/")) {
                if rule.long && !t.args.long {
                    continue;
                }
                r.skip(rule.id, format!("not admitted: {e}"));
            }
        }
    }
}

/// One call's answers: ACCEPTs and REPLYs by call id, in arrival order, and where they came.
#[derive(Default)]
struct Answers {
    /// (call id, "ACCEPT"/"REPLY", code) in order.
    seen: Vec<(u64, &'static str, Option<ReplyCode>)>,
    /// Answers that came on the Application lane (RouteMesh).
    wrong_lane: usize,
    /// The generation of each ACCEPT, by call id.
    accept_gens: Vec<(u64, NonZeroU64)>,
    other: Vec<String>,
}

impl Answers {
    fn take(&mut self, g: Got, wrong_lane: bool) {
        if wrong_lane {
            self.wrong_lane += 1;
        }
        match g {
            Got::Record(Record::Accept(a)) => {
                self.accept_gens.push((a.call_id.get(), a.generation));
                self.seen.push((a.call_id.get(), "ACCEPT", None))
            }
            Got::Record(Record::Reply(p)) => {
                self.seen.push((p.call_id.get(), "REPLY", Some(p.code)))
            }
            other => self.other.push(show(&other)),
        }
    }

    fn of(&self, id: u64) -> Vec<(&'static str, Option<ReplyCode>)> {
        self.seen
            .iter()
            .filter(|s| s.0 == id)
            .map(|s| (s.1, s.2))
            .collect()
    }

    fn replies(&self, id: u64) -> usize {
        self.of(id).iter().filter(|x| x.0 == "REPLY").count()
    }
}

/// Reads answers on `answer` (and anything on `request` when it is another connection)
/// until `done` says so, then `QUIET` more for late extras, at most `limit` in all.
fn answers(
    request: &dyn Wire,
    answer: &dyn Wire,
    separate: bool,
    limit: Duration,
    done: impl Fn(&Answers) -> bool,
) -> Answers {
    let mut a = Answers::default();
    let deadline = Instant::now() + limit;
    let mut quiet_until: Option<Instant> = None;
    loop {
        let end = quiet_until.unwrap_or(deadline).min(deadline);
        if Instant::now() >= end {
            return a;
        }
        if separate {
            while let Some(g) = next(request, Duration::ZERO, true) {
                a.take(g, true);
            }
        }
        let slice = end
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(20));
        if let Some(g) = next(answer, slice, true) {
            a.take(g, false);
        }
        if quiet_until.is_none() && done(&a) {
            quiet_until = Some(Instant::now() + QUIET);
        }
    }
}

/// The call checks (§5.3, §5.4) on one caller's connections, each a function of its own.
fn calls(t: &Target, acc: &Acceptor, r: &mut Report) {
    let s = Session::new();
    let gen = random_nz();
    let rid = "conform-caller";
    let lanes = acc.lanes();
    let mut conns = Vec::new();
    let mut target_gen = None;
    for (lane, ep) in &lanes {
        match admit(&s, ep, &HelloSpec::new(*lane, rid, gen)) {
            Ok((d, w, _)) => {
                target_gen = Some(w.generation);
                conns.push(d);
            }
            Err(e) => {
                for id in [
                    "5.3/refusal-one-reply",
                    "5.3/accept-before-reply",
                    "5.3/exactly-one-reply",
                    "5.3/batch",
                    "5.3/batch-over-256",
                    "5.4/answers-on-completion-lane",
                    "5.4/request-on-completion-lane-ignored",
                ] {
                    r.skip(id, format!("not admitted on lane {lane:?}: {e}"));
                }
                return;
            }
        }
    }
    let req: &dyn Wire = &conns[0];
    let c = Caller {
        req,
        ans: conns.last().map_or(req, |c| c as &dyn Wire),
        route_mesh: conns.len() == 2,
        target_gen,
    };
    let wrong_lane = refusal_one_reply(&c, r)
        + served_call(t, &c, r)
        + batch_of_two(t, &c, r)
        + batch_over_256(&c, r);
    completion_lane(t, &c, wrong_lane, r);
}

/// A caller's connections to the target: where its REQUESTs go, where answers are expected
/// (RouteMesh: the Completion lane), and the generation the target announced.
struct Caller<'a> {
    req: &'a dyn Wire,
    ans: &'a dyn Wire,
    route_mesh: bool,
    target_gen: Option<NonZeroU64>,
}

/// The call a check makes: `--call`'s channel, method and arguments, or a channel nobody
/// serves.
fn call_of(t: &Target) -> (&str, &str, &[u8]) {
    match &t.call {
        Some((c, m)) => (c.as_str(), m.as_str(), t.call_args.as_slice()),
        None => (NO_CHANNEL, "m", &[0xC0][..]),
    }
}

/// 5.3/refusal-one-reply: a call nobody serves is refused with exactly one REPLY. Returns
/// the answers that came on the wrong lane.
fn refusal_one_reply(c: &Caller, r: &mut Report) -> usize {
    let mut wrong_lane = 0;
    let refused = request(1, NO_CHANNEL, "m", &[0xC0]);
    match c.req.send(&Record::Request(refused).encode()) {
        Ok(()) => {
            let a = answers(c.req, c.ans, c.route_mesh, ANSWER, |a| a.replies(1) > 0);
            wrong_lane += a.wrong_lane;
            let of = a.of(1);
            let replies: Vec<_> = of.iter().filter(|x| x.0 == "REPLY").collect();
            let ok = replies.len() == 1 && replies[0].1 != Some(ReplyCode::Ok);
            r.check(
                "5.3/refusal-one-reply",
                ok,
                format!("answers to call 1: {of:?}"),
            );
        }
        Err(e) => r.fail("5.3/refusal-one-reply", e),
    }
    wrong_lane
}

/// 5.3/accept-before-reply and 5.3/exactly-one-reply: a served call gets ACCEPT, then
/// exactly one REPLY. Returns the answers that came on the wrong lane.
fn served_call(t: &Target, c: &Caller, r: &mut Report) -> usize {
    let mut wrong_lane = 0;
    match &t.call {
        Some((channel, method)) => {
            let call = request(2, channel, method, &t.call_args);
            match c.req.send(&Record::Request(call).encode()) {
                Ok(()) => {
                    let a = answers(c.req, c.ans, c.route_mesh, ANSWER, |a| a.replies(2) > 0);
                    wrong_lane += a.wrong_lane;
                    let of = a.of(2);
                    let accept_first = of.first().is_some_and(|x| x.0 == "ACCEPT")
                        && of.iter().filter(|x| x.0 == "ACCEPT").count() == 1
                        && of.iter().any(|x| x.0 == "REPLY");
                    let accept_gen = a
                        .accept_gens
                        .iter()
                        .all(|(id, g)| *id != 2 || Some(*g) == c.target_gen);
                    r.check(
                        "5.3/accept-before-reply",
                        accept_first && accept_gen,
                        format!(
                            "answers to call 2: {of:?} (target generation {:?})",
                            c.target_gen
                        ),
                    );
                    r.check(
                        "5.3/exactly-one-reply",
                        a.replies(2) == 1,
                        format!("{} REPLY(s) to call 2: {of:?}", a.replies(2)),
                    );
                }
                Err(e) => {
                    r.fail("5.3/accept-before-reply", e.clone());
                    r.fail("5.3/exactly-one-reply", e);
                }
            }
        }
        None => {
            r.skip("5.3/accept-before-reply", "needs --call CHANNEL.METHOD");
            r.skip("5.3/exactly-one-reply", "needs --call CHANNEL.METHOD");
        }
    }
    wrong_lane
}

/// 5.3/batch: each call of a BATCH of two is answered on its own. Returns the answers that
/// came on the wrong lane.
fn batch_of_two(t: &Target, c: &Caller, r: &mut Report) -> usize {
    let mut wrong_lane = 0;
    let (channel, method, args) = call_of(t);
    let served = t.call.is_some();
    let batch = Batch::new(vec![
        request(3, channel, method, args),
        request(4, channel, method, args),
    ]);
    match batch
        .map_err(|e| e.to_string())
        .and_then(|b| c.req.send(&Record::Batch(b).encode()))
    {
        Ok(()) => {
            let a = answers(c.req, c.ans, c.route_mesh, ANSWER, |a| {
                a.replies(3) > 0 && a.replies(4) > 0
            });
            wrong_lane += a.wrong_lane;
            let each = [3, 4].iter().all(|&id| {
                let of = a.of(id);
                a.replies(id) == 1 && (!served || of.first().is_some_and(|x| x.0 == "ACCEPT"))
            });
            r.check(
                "5.3/batch",
                each,
                format!("call 3: {:?}; call 4: {:?}", a.of(3), a.of(4)),
            );
        }
        Err(e) => r.fail("5.3/batch", e),
    }
    wrong_lane
}

/// 5.3/batch-over-256: 257 calls in one BATCH get InvalidParams each, no ACCEPT. Returns
/// the answers that came on the wrong lane.
fn batch_over_256(c: &Caller, r: &mut Report) -> usize {
    let mut wrong_lane = 0;
    let many: Vec<_> = (1000..1257u64)
        .map(|id| request(id, NO_CHANNEL, "m", &[0xC0]))
        .collect();
    match Batch::new(many)
        .map_err(|e| e.to_string())
        .and_then(|b| c.req.send(&Record::Batch(b).encode()))
    {
        Ok(()) => {
            let a = answers(c.req, c.ans, c.route_mesh, ANSWER * 2, |a| {
                (1000..1257u64).all(|id| a.replies(id) > 0)
            });
            wrong_lane += a.wrong_lane;
            let invalid = (1000..1257u64)
                .filter(|&id| a.of(id) == vec![("REPLY", Some(ReplyCode::InvalidParams))])
                .count();
            r.check(
                "5.3/batch-over-256",
                invalid == 257,
                format!("{invalid} of 257 calls answered with exactly one REPLY InvalidParams and no ACCEPT"),
            );
        }
        Err(e) => r.fail("5.3/batch-over-256", e),
    }
    wrong_lane
}

/// 5.4/answers-on-completion-lane (given the answers the other checks saw on the wrong lane)
/// and 5.4/request-on-completion-lane-ignored: a REQUEST on the Completion lane gets no
/// answer at all.
fn completion_lane(t: &Target, c: &Caller, wrong_lane: usize, r: &mut Report) {
    if c.route_mesh {
        r.check(
            "5.4/answers-on-completion-lane",
            wrong_lane == 0,
            format!("{wrong_lane} answer(s) on the Application lane"),
        );
        let (channel, method, args) = call_of(t);
        let stray = request(9, channel, method, args);
        match c.ans.send(&Record::Request(stray).encode()) {
            Ok(()) => {
                let a = answers(c.req, c.ans, true, Duration::from_millis(1_000), |_| false);
                r.check(
                    "5.4/request-on-completion-lane-ignored",
                    a.of(9).is_empty(),
                    format!("answers: {:?}", a.of(9)),
                );
            }
            Err(e) => r.fail("5.4/request-on-completion-lane-ignored", e),
        }
    } else {
        r.skip(
            "5.4/answers-on-completion-lane",
            "n/a: ClientServer has one lane",
        );
        r.skip(
            "5.4/request-on-completion-lane-ignored",
            "n/a: ClientServer has one lane",
        );
    }
}

fn close_and_malformed(_t: &Target, acc: &Acceptor, r: &mut Report) {
    let mut s = Session::new();
    let (lane, ep) = acc.main();
    // CLOSE: the connection is gone for the target.
    let rid = s.rid("close");
    match admit(&s, ep, &HelloSpec::new(lane, &rid, random_nz())) {
        Ok((d, _, _)) => {
            let close = Record::Close {
                reason: CloseReason::Shutdown,
            };
            let id = NonZeroU64::new(0x00C1_05ED).unwrap_or(NonZeroU64::MIN);
            // The target's first PROBE (at ready) is answered before the CLOSE.
            let _ = next(&d, Duration::from_millis(500), true);
            let sent = d
                .send(&close.encode())
                .and_then(|_| d.send(&Record::Probe { id }.encode()));
            // Raw: an ACK must not come.
            let mut got = Vec::new();
            let until = Instant::now() + Duration::from_millis(1_500);
            while let Some(g) = next(&d, until.saturating_duration_since(Instant::now()), false) {
                got.push(g);
            }
            let acked = got
                .iter()
                .any(|g| matches!(g, Got::Record(Record::Ack { .. })));
            r.check(
                "5.1/close-forgets-connection",
                sent.is_ok() && !acked,
                format!(
                    "after CLOSE, a PROBE got: {}",
                    if got.is_empty() {
                        "nothing".to_owned()
                    } else {
                        got.iter().map(show).collect::<Vec<_>>().join(", ")
                    }
                ),
            );
        }
        Err(e) => r.fail("5.1/close-forgets-connection", e),
    }
    // Malformed records on admitted connections.
    let probe = Record::Probe {
        id: NonZeroU64::MIN,
    }
    .encode();
    let mut trailing = probe.clone();
    if let Some(f) = trailing.first_mut() {
        f.push(0);
    }
    let unknown = vec![vec![0x5A, 0x4D, 0x01, 0x0E]];
    let mut two_frames = probe;
    two_frames.push(vec![0]);
    for (id, frames) in [
        ("6/malformed-trailing-bytes", trailing),
        ("6/malformed-unknown-kind", unknown),
        ("6/malformed-frame-count", two_frames),
    ] {
        let rid = s.rid("malformed");
        match admit(&s, ep, &HelloSpec::new(lane, &rid, random_nz())) {
            Ok((d, _, _)) => {
                let got = d.send(&frames).map(|_| next(&d, ANSWER, true));
                match got {
                    Ok(Some(Got::Record(Record::Close { reason }))) => r.check(
                        id,
                        reason == CloseReason::ProtocolError,
                        format!("CLOSE {reason:?}"),
                    ),
                    Ok(Some(other)) => r.fail(id, format!("got {}", show(&other))),
                    Ok(None) => r.fail(id, "no CLOSE within 5 s"),
                    Err(e) => r.fail(id, e),
                }
            }
            Err(e) => r.fail(id, e),
        }
    }
}
