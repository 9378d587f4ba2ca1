//! `zmesh idempotency list|show|resolve --store PATH`: the records of a durable idempotency
//! store (`zmesh node --idempotency-store PATH`), for an operator after a crash. A record
//! left in progress answers `UnknownOutcome` to every retry for its whole retention; an
//! operator who went and looked settles it with `resolve`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use serde_json::json;
use zmesh::runtime::idempotency::{
    RecordState, Resolution, ScopedKey, SqliteIdempotencyStore, StoredRecord,
};

use crate::output::outln;

/// The `zmesh idempotency` subcommands.
#[derive(Subcommand)]
pub(crate) enum IdempotencyCmd {
    /// List the records left in progress: commands started and never completed (running now,
    /// or left by a process that died, when nobody knows whether they ran), soonest to
    /// expire first, with their age, the node run that started them and the caller whose
    /// call started them.
    List {
        /// The store's SQLite file.
        #[arg(long)]
        store: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show the record under KEY (as `list` prints it), in progress or done.
    Show {
        /// The store's SQLite file.
        #[arg(long)]
        store: PathBuf,
        /// The record's key, as `list` prints it.
        key: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Settle a record left in progress, once you know what happened: `--ran` (a retry is
    /// answered Exception with your note and does not run it again) or `--did-not-run` (the
    /// record goes; a retry with the key runs the command).
    Resolve {
        /// The store's SQLite file.
        #[arg(long)]
        store: PathBuf,
        /// The record's key, as `list` prints it.
        key: String,
        /// The command ran (its effect is there).
        #[arg(
            long,
            conflicts_with = "did_not_run",
            required_unless_present = "did_not_run"
        )]
        ran: bool,
        /// The command did not run.
        #[arg(long)]
        did_not_run: bool,
        /// What you saw; callers that retry a command resolved as run are given it.
        #[arg(long)]
        note: String,
    },
}

/// Runs a `zmesh idempotency` subcommand.
pub(crate) fn run(cmd: IdempotencyCmd) -> Result<()> {
    let open = |path: &PathBuf| {
        if !path.exists() {
            // Opening would create an empty store: nothing to list, and a typo unnoticed.
            bail!("no idempotency store at {}", path.display());
        }
        SqliteIdempotencyStore::open(path)
            .with_context(|| format!("opening the idempotency store {}", path.display()))
    };
    match cmd {
        IdempotencyCmd::List { store, json } => {
            let records = open(&store)?.in_progress()?;
            if json {
                let rows: Vec<serde_json::Value> = records.iter().map(record_json).collect();
                return outln!("{}", serde_json::to_string_pretty(&rows)?);
            }
            outln!(
                "{:<10} {:<16} {:<24} {:<20} {:>10} {:>10} KEY",
                "STATE",
                "OWNER",
                "OWNER GENERATION",
                "CALLER",
                "AGE",
                "EXPIRES IN"
            )?;
            for r in &records {
                let v = record_json(r);
                outln!(
                    "{:<10} {:<16} {:<24} {:<20} {:>10} {:>10} {}",
                    v["state"].as_str().unwrap_or("-"),
                    r.record.owner.rid,
                    format!("{:016x}", r.record.owner.generation),
                    v["caller"].as_str().unwrap_or("-"),
                    r.age
                        .map_or("-".to_owned(), |a| format!("{} s", a.as_secs())),
                    format!("{} s", r.expires_in.as_secs()),
                    r.key
                )?;
            }
            outln!("{} in progress", records.len())
        }
        IdempotencyCmd::Show { store, key, json } => {
            let key = ScopedKey::from_stored(key);
            let Some(r) = open(&store)?.get(&key)? else {
                bail!("no live record under {key}");
            };
            let v = record_json(&r);
            if json {
                return outln!("{}", serde_json::to_string_pretty(&v)?);
            }
            for (name, value) in v.as_object().into_iter().flatten() {
                outln!(
                    "{name:<18} {}",
                    value.as_str().map_or(value.to_string(), str::to_owned)
                )?;
            }
            Ok(())
        }
        IdempotencyCmd::Resolve {
            store,
            key,
            ran,
            note,
            ..
        } => {
            let key = ScopedKey::from_stored(key);
            let resolution = if ran {
                Resolution::Ran { note: note.clone() }
            } else {
                Resolution::DidNotRun
            };
            open(&store)?
                .resolve(&key, &resolution)
                .with_context(|| format!("resolving {key}"))?;
            let what = if ran { "ran" } else { "did not run" };
            outln!("{key}: resolved as {what} ({note})")
        }
    }
}

/// A record as `list --json` and `show --json` print it.
fn record_json(r: &StoredRecord) -> serde_json::Value {
    let (state, code) = match &r.record.state {
        RecordState::InProgress => ("in-progress", None),
        RecordState::Done(outcome) => ("done", Some(outcome.code)),
    };
    let mut v = json!({
        "key": r.key.as_str(),
        "state": state,
        "reply_code": code,
        "owner": r.record.owner.rid,
        "owner_generation": format!("{:016x}", r.record.owner.generation),
        "expires_in_ms": u64::try_from(r.expires_in.as_millis()).unwrap_or(u64::MAX),
        // null for a record written before the store kept its begin time.
        "age_ms": r.age.map(|a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX)),
        // The calling node's RID as the server knew it; null for a keyed record written
        // before the store kept it (a record without a key names it in its key).
        "caller": r.caller,
    });
    match r.key.parts() {
        Some(("key", p)) => {
            v["channel"] = json!(p[0]);
            v["method"] = json!(p[1]);
            v["idempotency_key"] = json!(p[2]);
        }
        Some((_, p)) => {
            if r.caller.is_none() {
                v["caller"] = json!(p[0]);
            }
            // 16 hex digits, as every generation in zmesh's JSON.
            v["caller_generation"] = json!(p[1]
                .parse::<u64>()
                .map_or(p[1].to_owned(), |g| format!("{g:016x}")));
            v["call_id"] = json!(p[2]);
        }
        None => {}
    }
    v
}
