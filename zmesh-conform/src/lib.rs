//! `zmesh conform`: checks another implementation live, over the wire, rule by rule against
//! WIRE.md. The runner plays the target's counterpart in every role the target is described
//! with (dialler and acceptor of RouteMesh, client and server of ClientServer, subscriber and
//! publisher of fanout) with plain libzmq sockets and zmesh's codec, so it sees every byte.
//! Each result names its rule and WIRE.md section. How to describe a target is in
//! spec-tests/README.md ("The live runner").
//!
//! The `zmesh` binary (zmesh-cli) calls [`run`] for `zmesh conform`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod accept;
mod dial;
mod fanout;
mod link;
mod liveness;
// Shared with the CLI: a closed stdout ends the report quietly.
#[path = "../../zmesh-cli/src/stdout.rs"]
mod stdout;

use std::time::Instant;

use anyhow::{bail, Result};
use serde::Serialize;

/// Whether a rule is a requirement or a recommendation of WIRE.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Level {
    /// MUST: a failure fails the run.
    #[serde(rename = "MUST")]
    Must,
    /// SHOULD: a failure is a warning.
    #[serde(rename = "SHOULD")]
    Should,
}

/// One rule the runner checks.
pub struct Rule {
    /// Stable id: the WIRE.md section, a slash, a short name.
    pub id: &'static str,
    /// MUST or SHOULD.
    pub level: Level,
    /// What it checks.
    pub text: &'static str,
    /// Runs only with `--long`.
    pub long: bool,
}

const fn must(id: &'static str, text: &'static str) -> Rule {
    Rule {
        id,
        level: Level::Must,
        text,
        long: false,
    }
}

const fn should(id: &'static str, text: &'static str) -> Rule {
    Rule {
        id,
        level: Level::Should,
        text,
        long: false,
    }
}

const fn long(id: &'static str, text: &'static str) -> Rule {
    Rule {
        id,
        level: Level::Must,
        text,
        long: true,
    }
}

/// Every rule, in report order.
pub const RULES: &[Rule] = &[
    // §5.1, the target accepts (the runner dials).
    must("5.1/silent-before-hello", "an acceptor sends nothing on a connection before its HELLO"),
    must("5.1/welcome", "a well-formed HELLO is answered with exactly one WELCOME of the same lane (and the target's RID, if given) before any other record"),
    must("5.1/reject-lane-mismatch", "a HELLO of another lane than the bound socket's gets REJECT LaneMismatch (7)"),
    must("5.1/reject-identity-mismatch", "a HELLO expecting another RID gets REJECT IdentityMismatch (2)"),
    must("5.1/reject-generation-mismatch", "a HELLO expecting another generation gets REJECT GenerationMismatch (3)"),
    must("5.1/reject-not-required", "on a RouteMesh lane, a HELLO without Server membership to a target that announced none gets REJECT NotRequired (1)"),
    must("5.1/reject-security-failure", "a HELLO of a pinned peer announcing another security identity gets REJECT SecurityFailure (4)"),
    must("5.1/reject-duplicate", "a HELLO of a configured peer whose RID is bytewise larger than the target's gets REJECT Duplicate (9)"),
    must("5.1/reject-unsupported-version", "a first record of envelope version 2 gets a version-1 REJECT UnsupportedVersion (5)"),
    must("5.1/reject-protocol-first-record", "a well-formed first record other than HELLO (a PROBE) gets REJECT Protocol (8)"),
    must("5.1/reject-protocol-malformed-hello", "a HELLO with generation 0 gets REJECT Protocol (8)"),
    must("5.1/one-reject-per-connection", "after its REJECT, the acceptor answers nothing more on that connection, a valid HELLO included"),
    must("5.1/no-answer-to-close-or-reject", "a CLOSE or REJECT as first records get no answer"),
    must("5.1/replacement", "a second connection with the same RID is admitted and the old one gets CLOSE Replaced (3)"),
    must("5.1/close-forgets-connection", "after a CLOSE the acceptor treats the connection as gone: a PROBE sent after it gets no ACK"),
    // §5.1, the target dials (the runner accepts).
    must("5.1/hello-first", "a dialler's first record is a well-formed HELLO of the lane it dials, expecting the runner's RID or none"),
    must("5.4/routing-id", "a dialler's routing id is 1..=255 bytes and does not begin with 00"),
    must("5.1/close-received", "a dialler that receives CLOSE closes that connection; it dials again on a new connection with a new routing id"),
    must("5.1/reject-received", "a dialler that receives REJECT (IdentityMismatch) closes that connection and dials again on a new one"),
    // §5.2, liveness, either side.
    must("5.2/first-probe-at-ready", "the first PROBE comes right after ready (within 2 s)"),
    must("5.2/ack-echoes-id", "a PROBE is answered with an ACK of the same id, a resent PROBE again"),
    must("5.2/probe-interval", "PROBEs come every 5 s (4.5..5.5 s apart); non-matching ACKs do not move the grid"),
    must("5.2/pending-id-resent", "while a probe is pending (a non-matching ACK, and an ACK on another connection, do not count) the next PROBE carries the same id"),
    must("5.2/new-id-after-ack", "after the matching ACK, the next PROBE carries a new id"),
    must("5.2/duplicate-ack-harmless", "a duplicate ACK changes nothing: the connection stays and answers PROBEs"),
    long("5.2/deadline", "15 s without a matching ACK the prober drops the connection (an acceptor sends CLOSE DeadlineExceeded (4))"),
    // §5.3, calls to the target.
    must("5.3/refusal-one-reply", "a REQUEST for a channel the target does not serve gets exactly one REPLY, not Ok"),
    must("5.3/accept-before-reply", "a served call gets ACCEPT (the target's generation) before its REPLY"),
    must("5.3/exactly-one-reply", "a served call gets exactly one REPLY"),
    must("5.3/batch", "each call of a BATCH is answered on its own: exactly one REPLY each (after an ACCEPT when served)"),
    must("5.3/batch-over-256", "every call of a BATCH of 257 gets REPLY InvalidParams and no ACCEPT"),
    must("5.4/answers-on-completion-lane", "on RouteMesh, a call on the Application lane is answered on the Completion lane"),
    must("5.4/request-on-completion-lane-ignored", "a REQUEST on a Completion lane gets no answer at all"),
    // §6, malformed input on an admitted connection.
    must("6/malformed-trailing-bytes", "a PROBE with a byte too many on an admitted connection is a protocol error: CLOSE ProtocolError (5) from an acceptor"),
    must("6/malformed-unknown-kind", "an envelope of unknown kind 0E on an admitted connection: CLOSE ProtocolError (5)"),
    must("6/malformed-frame-count", "a PROBE with a second frame on an admitted connection: CLOSE ProtocolError (5)"),
    // §7, fanout.
    must("7.1/beacon-bytes", "every message on the reserved topic is exactly the beacon (2 frames, 01 5A 4C 46 31 / 5A 46 01 01)"),
    should("7.1/beacon-on-join", "a subscriber that joins gets a beacon within 2.5 s"),
    must("7.1/beacon-interval", "beacons keep coming every 5 s: no gap over 5.5 s, and grid ticks 4.5..5.5 s apart"),
    must("7.2/publish-well-formed", "every other message is a well-formed PUBLISH, one generation, seq +1 per record"),
    must("7.3/subscribes-to-beacons", "the subscriber subscribes to a prefix of the beacon topic"),
    must("7.3/reserved-topic-resubscribes", "after a malformed message on the reserved topic the subscriber closes its socket and subscribes again on a new one"),
    long("7.3/silence-resubscribes", "after 15 s without beacon or record the subscriber subscribes again on a new socket"),
    must("7.5/pubpack-subscriber-well-formed", "beside a version-1 subscriber, a subscriber that announced pubpack gets beacons and well-formed PUBLISH (or PUBPACK) records, one generation, seq +1 per record"),
    must("7.5/subscriber-announces-pubpack", "a subscriber that subscribes to the pubpack marker subscribes to exactly the empty prefix besides it"),
    must("7.5/pubpack-accepted", "a subscriber that announced pubpack takes a well-formed PUBPACK as records: it keeps its socket"),
    // §8.1 and §4.13, capabilities and CANCEL (the target accepts).
    must("8.1/version-1-hello-version-1-welcome", "a HELLO that offers no capability gets a WELCOME without extension entries (what a version-1 acceptor sends)"),
    must("8.1/welcome-announces-only-offered", "a HELLO offering cancel and an unknown capability is admitted, and its WELCOME announces no capability the HELLO did not offer (the unknown one never)"),
    must("4.13/cancel-unknown-ignored", "where cancel is in effect, a CANCEL for a call id never used changes nothing: the connection answers the next PROBE"),
    must("4.13/cancel-answered-ignored", "where cancel is in effect, a CANCEL for a call already answered changes nothing: the next PROBE gets its ACK, the next call its REPLY, the cancelled call nothing more"),
    must("4.16/answers-stand-for-their-records", "where answers is in effect, the answers to a BATCH of calls are exactly one ACCEPT then one REPLY per call, whether packed in ANSWERS records or not"),
    must("4.18/pack-accepted", "where pack is in effect, a well-formed PACK of three MESSAGEs changes nothing about the connection: the next PROBE gets its ACK"),
    must("4.18/pack-lone-record-protocol-error", "where pack is in effect, a PACK of one record (a lone record is never wrapped) is a protocol error: CLOSE ProtocolError (5)"),
    must("4.18/pack-unknown-without-capability", "where pack is not in effect, a PACK is an unknown kind: CLOSE ProtocolError (5)"),
    must("4.19/calls16-answered", "where ids16 is in effect, each call of a CALLS16 of two calls is answered on its own (ACCEPT then one REPLY when served, one REPLY when not), whether the answers come alone or in ANSWERS or ANSWERS16 records"),
    must("4.19/calls16-base-not-smallest", "where ids16 is in effect, a CALLS16 whose base is not the smallest call id (no offset is 0) is a protocol error: CLOSE ProtocolError (5)"),
    must("4.19/ids16-unknown-without-capability", "where ids16 is not in effect, a CALLS16 is an unknown kind: CLOSE ProtocolError (5)"),
];

/// The catalog entry of `id`.
pub fn rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
}

/// A result's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The target follows the rule.
    Pass,
    /// It does not (a MUST rule).
    Fail,
    /// It does not follow a SHOULD rule.
    Warn,
    /// Not checked: the role was not given, or a precondition is missing (detail says).
    Skip,
}

/// One checked rule.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The rule's id.
    pub rule: &'static str,
    /// Its WIRE.md section.
    pub section: String,
    /// MUST or SHOULD.
    pub level: Level,
    /// The result.
    pub status: Status,
    /// The role the runner played.
    pub role: String,
    /// What was seen.
    pub detail: String,
}

/// The results of one scenario.
pub struct Report {
    role: String,
    /// Its outcomes.
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// An empty report for the runner's `role`.
    pub fn new(role: impl Into<String>) -> Report {
        Report {
            role: role.into(),
            outcomes: Vec::new(),
        }
    }

    fn push(&mut self, id: &'static str, status: Status, detail: String) {
        let r = rule(id);
        let level = r.map_or(Level::Must, |r| r.level);
        let status = match (status, level) {
            (Status::Fail, Level::Should) => Status::Warn,
            (s, _) => s,
        };
        let section = id.split('/').next().unwrap_or(id).to_owned();
        self.outcomes.push(Outcome {
            rule: id,
            section: format!("§{section}"),
            level,
            status,
            role: self.role.clone(),
            detail,
        });
    }

    /// Records `ok` for rule `id`, with what was seen.
    pub fn check(&mut self, id: &'static str, ok: bool, detail: impl Into<String>) {
        let status = if ok { Status::Pass } else { Status::Fail };
        self.push(id, status, detail.into());
    }

    /// Records a pass.
    pub fn pass(&mut self, id: &'static str, detail: impl Into<String>) {
        self.push(id, Status::Pass, detail.into());
    }

    /// Records a failure.
    pub fn fail(&mut self, id: &'static str, detail: impl Into<String>) {
        self.push(id, Status::Fail, detail.into());
    }

    /// Records a rule not checked, and why.
    pub fn skip(&mut self, id: &'static str, why: impl Into<String>) {
        self.push(id, Status::Skip, why.into());
    }
}

/// The target, as the runner's command line describes it.
#[derive(clap::Args, Debug, Clone)]
pub struct ConformArgs {
    /// The target accepts RouteMesh peers on these endpoints (its Application and Completion
    /// lanes); the runner dials them.
    #[arg(long, value_name = "APP_EP,COMP_EP")]
    pub route_mesh: Option<String>,
    /// The target is a ClientServer server on this endpoint; the runner is its client.
    #[arg(long, value_name = "EP")]
    pub server: Option<String>,
    /// The target publishes fanout on this endpoint (it binds); the runner subscribes.
    #[arg(long, value_name = "EP")]
    pub publisher: Option<String>,
    /// The target subscribes to a publisher on this endpoint, which the runner binds.
    #[arg(long, value_name = "EP")]
    pub subscriber_of: Option<String>,
    /// The target dials a RouteMesh peer (RID `--runner-rid`) at these endpoints, which the
    /// runner binds (Application and Completion lane).
    #[arg(long, value_name = "APP_EP,COMP_EP")]
    pub dials_route_mesh: Option<String>,
    /// The target is a ClientServer client of a server on this endpoint, which the runner
    /// binds.
    #[arg(long, value_name = "EP")]
    pub client_of: Option<String>,
    /// The target's RID: checked in its WELCOMEs and HELLOs (otherwise learned from them).
    #[arg(long)]
    pub rid: Option<String>,
    /// The RID the runner is where the target dials it (`--dials-route-mesh`, `--client-of`).
    #[arg(long, default_value = "zmesh-conform")]
    pub runner_rid: String,
    /// A RouteMesh peer configured at the target with a pinned security identity
    /// (`RID=IDENTITY`): enables the SecurityFailure and Duplicate checks. If RID is
    /// `--runner-rid`, the runner announces IDENTITY where the target dials it.
    #[arg(long, value_name = "RID=IDENTITY")]
    pub pinned_peer: Option<String>,
    /// A method the target serves that answers the arguments of `--call-args` with Ok:
    /// `CHANNEL.METHOD`. Enables the ACCEPT/REPLY checks of served calls.
    #[arg(long, value_name = "CHANNEL.METHOD")]
    pub call: Option<String>,
    /// The call's argument payload, hex (MessagePack; default `c0`, nil).
    #[arg(long, default_value = "c0", value_name = "HEX")]
    pub call_args: String,
    /// Also run the checks that take longer than two probe cycles: the 15 s probe deadline
    /// and the subscriber's 15 s silence (about 20 s more).
    #[arg(long)]
    pub long: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print the rules and exit.
    #[arg(long)]
    pub list: bool,
}

/// The checked parts of [`ConformArgs`], shared by the scenarios.
#[derive(Clone)]
pub struct Target {
    /// The runner's arguments.
    pub args: ConformArgs,
    /// `--call` split.
    pub call: Option<(String, String)>,
    /// `--call-args` decoded.
    pub call_args: Vec<u8>,
    /// `--pinned-peer` split.
    pub pinned: Option<(String, String)>,
}

impl Target {
    /// The runner's security identity where the target dials it.
    pub fn runner_identity(&self) -> String {
        match &self.pinned {
            Some((rid, identity)) if *rid == self.args.runner_rid => identity.clone(),
            _ => self.args.runner_rid.clone(),
        }
    }
}

fn pair(s: &str, what: &str) -> Result<(String, String)> {
    match s.split_once(',') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_owned(), b.to_owned())),
        _ => bail!("{what} takes two endpoints separated by a comma: {s:?}"),
    }
}

type Job = (String, Box<dyn FnOnce() -> Vec<Outcome> + Send>);

/// The scenarios of the target description, or what is wrong with it.
fn plan(args: &ConformArgs) -> Result<Vec<Job>> {
    let call = match &args.call {
        Some(c) => match c.split_once('.') {
            Some((ch, m)) if !ch.is_empty() && !m.is_empty() => Some((ch.to_owned(), m.to_owned())),
            _ => bail!("--call takes CHANNEL.METHOD: {c:?}"),
        },
        None => None,
    };
    let call_args = match hex::decode(&args.call_args) {
        Ok(b) => b,
        Err(e) => bail!("--call-args is not hex: {e}"),
    };
    let pinned = match &args.pinned_peer {
        Some(p) => match p.split_once('=') {
            Some((rid, id)) if !rid.is_empty() => Some((rid.to_owned(), id.to_owned())),
            _ => bail!("--pinned-peer takes RID=IDENTITY: {p:?}"),
        },
        None => None,
    };
    let target = Target {
        args: args.clone(),
        call,
        call_args,
        pinned,
    };
    let mut jobs: Vec<Job> = Vec::new();
    if let Some(rm) = &args.route_mesh {
        let (app, comp) = pair(rm, "--route-mesh")?;
        jobs.extend(accept::jobs(
            &target,
            accept::Acceptor::RouteMesh { app, comp },
        ));
    }
    if let Some(ep) = &args.server {
        jobs.extend(accept::jobs(
            &target,
            accept::Acceptor::Server { ep: ep.clone() },
        ));
    }
    if let Some(rm) = &args.dials_route_mesh {
        let (app, comp) = pair(rm, "--dials-route-mesh")?;
        for (ep, lane) in [
            (app, zmesh::proto::wire::Lane::Application),
            (comp, zmesh::proto::wire::Lane::Completion),
        ] {
            let t = target.clone();
            jobs.push((
                format!("dial {ep}"),
                Box::new(move || dial::run(&t, &ep, lane)),
            ));
        }
    }
    if let Some(ep) = &args.client_of {
        let t = target.clone();
        let ep = ep.clone();
        jobs.push((
            format!("client of {ep}"),
            Box::new(move || dial::run(&t, &ep, zmesh::proto::wire::Lane::ClientServer)),
        ));
    }
    if let Some(ep) = &args.publisher {
        let t = target.clone();
        let ep = ep.clone();
        jobs.push((
            format!("publisher {ep}"),
            Box::new(move || fanout::subscribe(&t, &ep)),
        ));
    }
    if let Some(ep) = &args.subscriber_of {
        let t = target.clone();
        let ep = ep.clone();
        jobs.push((
            format!("subscriber of {ep}"),
            Box::new(move || fanout::publish(&t, &ep)),
        ));
    }
    if jobs.is_empty() {
        bail!(
            "describe the target: --route-mesh, --server, --publisher, --subscriber-of, \
             --dials-route-mesh or --client-of (see zmesh conform --help)"
        );
    }
    Ok(jobs)
}

/// `zmesh conform`: runs every scenario the target description allows, in parallel, and
/// prints the results. Exit status 1 if a MUST rule failed, 2 for a bad description. A
/// stdout closed by its reader (`zmesh conform ... | head -1`) ends the report quietly; the
/// status is the same.
pub fn run(args: ConformArgs) -> Result<()> {
    if args.list {
        return quiet_if_closed(list_rules());
    }
    let jobs = match plan(&args) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("zmesh conform: {e:#}");
            std::process::exit(2);
        }
    };
    let t0 = Instant::now();
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|(name, job)| (name, std::thread::spawn(job)))
        .collect();
    let mut outcomes = Vec::new();
    for (name, h) in handles {
        match h.join() {
            Ok(o) => outcomes.extend(o),
            Err(_) => bail!("the runner's scenario {name} panicked"),
        }
    }
    // Report order: the catalog's, then the role.
    let order = |o: &Outcome| {
        RULES
            .iter()
            .position(|r| r.id == o.rule)
            .unwrap_or(usize::MAX)
    };
    outcomes.sort_by(|a, b| order(a).cmp(&order(b)).then(a.role.cmp(&b.role)));
    let count = |s: Status| outcomes.iter().filter(|o| o.status == s).count();
    let (passed, failed, warned, skipped) = (
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Warn),
        count(Status::Skip),
    );
    let seconds = t0.elapsed().as_secs_f64();
    let counts = [passed, failed, warned, skipped];
    quiet_if_closed(report(&outcomes, counts, seconds, args.json))?;
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// Prints the rules of [`RULES`] with their levels.
fn list_rules() -> Result<()> {
    for r in RULES {
        let level = match r.level {
            Level::Must => "MUST",
            Level::Should => "SHOULD",
        };
        let long = if r.long { " (--long)" } else { "" };
        stdout::outln!("{:<40} {level:<6} {}{long}", r.id, r.text)?;
    }
    Ok(())
}

/// Prints the outcomes, as a table or (`json`) as one JSON document; `counts`: passed,
/// failed, warnings, skipped.
fn report(outcomes: &[Outcome], counts: [usize; 4], seconds: f64, json: bool) -> Result<()> {
    let [passed, failed, warned, skipped] = counts;
    if json {
        let v = serde_json::json!({
            "format": "zmesh-conform",
            "wire_version": 1,
            "passed": passed,
            "failed": failed,
            "warnings": warned,
            "skipped": skipped,
            "seconds": (seconds * 10.0).round() / 10.0,
            "results": outcomes,
        });
        stdout::outln!("{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        stdout::outln!(
            "zmesh conform: {passed} passed, {failed} failed, {warned} warnings, {skipped} skipped ({seconds:.1} s)"
        )?;
        stdout::outln!(
            "{:<6} {:<7} {:<40} {:<28} DETAIL",
            "STATUS",
            "SECTION",
            "RULE",
            "ROLE"
        )?;
        for o in outcomes {
            let status = match o.status {
                Status::Pass => "pass",
                Status::Fail => "FAIL",
                Status::Warn => "warn",
                Status::Skip => "skip",
            };
            stdout::outln!(
                "{status:<6} {:<7} {:<40} {:<28} {}",
                o.section,
                o.rule,
                o.role,
                o.detail
            )?;
        }
    }
    Ok(())
}

/// A closed stdout is the end of the report, not an error; any other failure to write is.
fn quiet_if_closed(printed: Result<()>) -> Result<()> {
    match printed {
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(stdout::is_closed) =>
        {
            Ok(())
        }
        other => other,
    }
}
