//! The CLI's side of commands (MISSION K1-K3): the demo service of `zmesh node --serve`, the
//! idempotency store of `--idempotency-store`, and `zmesh describe` / `zmesh ops`.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use serde_json::json;
use zmesh::runtime::calls::{encode, Request, ServeError};
use zmesh::runtime::idempotency::{
    Begin, Fingerprint, IdempotencyFuture, IdempotencyStore, Outcome, Owner, ScopedKey,
    SqliteIdempotencyStore,
};
use zmesh::runtime::service::{Method, NodeContract, Service};

use crate::output::outln;
use crate::EventFormat;

/// Where `--exec-log` records the calls that started running.
pub(crate) type ExecLog = Arc<Mutex<std::fs::File>>;

/// What the demo service's handlers share.
#[derive(Clone)]
struct Demo {
    rid: String,
    format: EventFormat,
    t0: Instant,
    exec_log: Option<ExecLog>,
    setpoint: Arc<AtomicU64>,
    dispensed: Arc<AtomicU64>,
}

impl Demo {
    /// Records that `req` starts running: a line in the exec log (a completed write before
    /// the method runs) and a line on stdout.
    fn started(&self, req: &Request) {
        if let Some(log) = &self.exec_log {
            if let Ok(mut f) = log.lock() {
                // One write call per line: `writeln!` may split a line into several writes,
                // and a process killed between them leaves half a line (seen in
                // faults::k5_c1_c3_kill9_with_batches_in_flight).
                let line = format!("{} {}\n", req.method, hex::encode(req.raw_args()));
                let _ = f.write_all(line.as_bytes());
            }
        }
        let line = match self.format {
            EventFormat::Ndjson => json!({
                "event": "call", "node": self.rid, "t_ms": self.t0.elapsed().as_millis(),
                "channel": req.channel, "method": req.method, "caller": req.caller,
            })
            .to_string(),
            EventFormat::Human => format!(
                "[{:>6} ms] {}: serving {}.{} for {}",
                self.t0.elapsed().as_millis(),
                self.rid,
                req.channel,
                req.method,
                req.caller
            ),
        };
        let _ = outln!("{line}");
    }
}

/// The demo service of `zmesh node --serve CHANNEL` (every method is documented in `--help`):
///
/// | method | semantics | does |
/// |---|---|---|
/// | `echo` | query | returns its arguments |
/// | `get` | query | returns the setpoint |
/// | `set` | idempotent command, conflating | sets the setpoint (an unsigned integer) |
/// | `dispense` | non-repeatable command | dispenses: returns `"dispensed #N"`; `{"hold_ms": M}` waits M ms once it has started, before it returns (so before its outcome is recorded) |
/// | `sleep`, `work`, `fail` | undeclared | answer after some ms / a token after some ms / Exception |
pub(crate) fn demo_service(
    channel: &str,
    rid: &str,
    format: EventFormat,
    t0: Instant,
    exec_log: Option<ExecLog>,
) -> Service {
    let demo = Demo {
        rid: rid.to_owned(),
        format,
        t0,
        exec_log,
        setpoint: Arc::new(AtomicU64::new(0)),
        dispensed: Arc::new(AtomicU64::new(0)),
    };
    let d = |demo: &Demo| demo.clone();
    let (d1, d2, d3, d4, d5, d6, d7) = (
        d(&demo),
        d(&demo),
        d(&demo),
        d(&demo),
        d(&demo),
        d(&demo),
        d(&demo),
    );
    Service::new(channel)
        .method(Method::query("echo"), move |req: Request| {
            d1.started(&req);
            async move { Ok(req.raw_args().clone()) }
        })
        .method(Method::query("get"), move |req: Request| {
            d2.started(&req);
            let v = d2.setpoint.load(Ordering::SeqCst);
            async move { encode(&v) }
        })
        .method(
            Method::idempotent_command("set").conflate(),
            move |req: Request| {
                d3.started(&req);
                let setpoint = d3.setpoint.clone();
                async move {
                    let v: u64 = req.args()?;
                    setpoint.store(v, Ordering::SeqCst);
                    encode(&v)
                }
            },
        )
        .method(
            Method::non_repeatable_command("dispense"),
            move |req: Request| {
                d4.started(&req);
                let n = d4.dispensed.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    let hold = req
                        .args::<serde_json::Value>()
                        .ok()
                        .and_then(|v| v.get("hold_ms").and_then(serde_json::Value::as_u64));
                    if let Some(ms) = hold {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    encode(&format!("dispensed #{n}"))
                }
            },
        )
        .method(Method::undeclared("sleep"), move |req: Request| {
            d5.started(&req);
            async move {
                let ms: u64 = req.args()?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                encode(&format!("slept {ms} ms"))
            }
        })
        .method(Method::undeclared("work"), move |req: Request| {
            d6.started(&req);
            async move {
                // A unit of work with a caller-chosen token: (token, milliseconds).
                let (token, ms): (String, u64) = req.args()?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                encode(&token)
            }
        })
        .method(Method::undeclared("fail"), move |req: Request| {
            d7.started(&req);
            async move {
                Err::<Bytes, _>(ServeError::exception(
                    "the demo method failed on purpose",
                ))
            }
        })
}

/// The durable idempotency store of `--idempotency-store PATH`, optionally holding every
/// recorded outcome `hold` before the REPLY may leave (fault injection for the crash tests
/// and the demo: a process killed during the hold has recorded the outcome and not
/// answered).
pub(crate) fn idempotency_store(
    path: &Path,
    hold: Option<Duration>,
) -> Result<Arc<dyn IdempotencyStore>> {
    let store = SqliteIdempotencyStore::open(path)
        .with_context(|| format!("opening the idempotency store {}", path.display()))?;
    Ok(match hold {
        Some(hold) => Arc::new(HoldAfterRecord { store, hold }),
        None => Arc::new(store),
    })
}

/// A store whose `complete` waits `hold` after the outcome is recorded.
struct HoldAfterRecord {
    store: SqliteIdempotencyStore,
    hold: Duration,
}

impl IdempotencyStore for HoldAfterRecord {
    fn begin(
        &self,
        key: &ScopedKey,
        fingerprint: &Fingerprint,
        owner: &Owner,
        caller: &str,
        retention: Duration,
    ) -> IdempotencyFuture<'_, Begin> {
        self.store.begin(key, fingerprint, owner, caller, retention)
    }

    fn complete(&self, key: &ScopedKey, outcome: &Outcome) -> IdempotencyFuture<'_, ()> {
        let done = self.store.complete(key, outcome);
        let hold = self.hold;
        Box::pin(async move {
            done.await?;
            eprintln!(
                "fault injection: outcome recorded, holding the REPLY {} ms",
                hold.as_millis()
            );
            tokio::time::sleep(hold).await;
            Ok(())
        })
    }

    fn remove_expired(&self) -> IdempotencyFuture<'_, u64> {
        self.store.remove_expired()
    }

    fn is_durable(&self) -> bool {
        self.store.is_durable()
    }
}

/// Asks a node's `--control` endpoint (`snapshot`, `ops` or `describe`) and returns the JSON
/// it answers.
pub(crate) fn ask_control(control: &str, what: &str) -> Result<serde_json::Value> {
    let ctx = zmq::Context::new();
    let req = ctx.socket(zmq::REQ)?;
    req.set_linger(0)?;
    req.set_rcvtimeo(3000)?;
    req.connect(control)?;
    req.send(what.as_bytes(), 0)?;
    let reply = req
        .recv_bytes(0)
        .with_context(|| format!("no answer from {control} within 3 s"))?;
    let v: serde_json::Value = serde_json::from_slice(&reply).context("control reply")?;
    if let Some(e) = v.get("error") {
        bail!("{control}: {e}");
    }
    Ok(v)
}

/// Prints a node contract as a table (one row per method) or as JSON.
pub(crate) fn print_contract(contract: &NodeContract, as_json: bool) -> Result<()> {
    if as_json {
        outln!("{}", contract.to_json_pretty()?)?;
        return Ok(());
    }
    outln!(
        "node {} (contract format {})",
        contract.rid,
        contract.format
    )?;
    outln!(
        "{:<16} {:<8} {:<16} {:<24} {:<7} {:<9} {:<8} {:<7} {:<7}",
        "CHANNEL",
        "VERSION",
        "METHOD",
        "SEMANTICS",
        "SHAPE",
        "EXECUTION",
        "CONFLATE",
        "MAILBOX",
        "GUARDED"
    )?;
    for s in &contract.services {
        if s.methods.is_empty() {
            outln!(
                "{:<16} {:<8} {:<16} {:<24} {:<7} {:<9} {:<8} {:<7} {:<7}",
                s.channel,
                s.version,
                "(any)",
                "undeclared",
                "-",
                "parallel",
                "-",
                s.mailbox,
                "-"
            )?;
        }
        for m in &s.methods {
            outln!(
                "{:<16} {:<8} {:<16} {:<24} {:<7} {:<9} {:<8} {:<7} {:<7}",
                s.channel,
                s.version,
                m.name,
                zmesh::proto::contract::semantics_name(m.semantics),
                m.shape.as_str(),
                m.execution.as_str(),
                if m.conflate { "yes" } else { "no" },
                s.mailbox,
                match m.guarded {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "-",
                }
            )?;
        }
    }
    Ok(())
}

/// Prints operations (views from a node's registry) as a table or JSON, keeping only those
/// with `status` if given.
pub(crate) fn print_ops(
    ops: &[serde_json::Value],
    status: Option<&str>,
    as_json: bool,
) -> Result<()> {
    let ops: Vec<&serde_json::Value> = ops
        .iter()
        .filter(|o| status.is_none_or(|s| o["status"] == s))
        .collect();
    if as_json {
        outln!("{}", serde_json::to_string_pretty(&ops)?)?;
        return Ok(());
    }
    outln!(
        "{:>6} {:<12} {:<24} {:<24} {:<16} {:<16} {:>10} {:>10}",
        "ID",
        "TARGET",
        "CALL",
        "SEMANTICS",
        "STATUS",
        "CODE",
        "ISSUED",
        "SETTLED"
    )?;
    let ago = |v: &serde_json::Value| {
        v.as_u64()
            .map(|ms| format!("{ms} ms ago"))
            .unwrap_or_else(|| "-".into())
    };
    for o in ops {
        outln!(
            "{:>6} {:<12} {:<24} {:<24} {:<16} {:<16} {:>10} {:>10}",
            o["id"].as_u64().unwrap_or(0),
            o["target"].as_str().unwrap_or("-"),
            format!(
                "{}.{}",
                o["channel"].as_str().unwrap_or("?"),
                o["method"].as_str().unwrap_or("?")
            ),
            o["semantics"].as_str().unwrap_or("-"),
            o["status"].as_str().unwrap_or("-"),
            o["code"].as_str().unwrap_or("-"),
            ago(&o["issued_ms_ago"]),
            ago(&o["settled_ms_ago"]),
        )?;
    }
    Ok(())
}
