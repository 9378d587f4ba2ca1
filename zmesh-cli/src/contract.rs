//! `zmesh contract check OLD.json NEW.json`: the contract check (MISSION K1) from the shell.
//!
//! Exit status: 0 when nothing breaks a caller built against OLD, 1 when something does, 2
//! when either file cannot be read or is not a valid contract (clap's own usage errors are 2
//! as well).

use std::path::{Path, PathBuf};

use clap::Subcommand;
use zmesh::proto::contract::{check, CheckReport, NodeContract};

use crate::output::outln;

/// Exit status when no change breaks a caller.
const OK: i32 = 0;
/// Exit status when a change breaks a caller.
const BREAKING: i32 = 1;
/// Exit status when an input cannot be read or is not a contract.
const INVALID: i32 = 2;

#[derive(Subcommand)]
pub(crate) enum ContractCmd {
    /// Compare the contract a caller was built against (OLD) with the one now served (NEW), as
    /// written by `$describe`. Prints every change; exits 1 if any breaks a caller, 0 if none
    /// does, 2 if an input is unreadable or invalid.
    Check {
        /// The contract callers were built against (JSON).
        old: PathBuf,
        /// The contract now served (JSON).
        new: PathBuf,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `contract` subcommand and returns the process exit status.
pub(crate) fn run(cmd: &ContractCmd) -> i32 {
    match cmd {
        ContractCmd::Check { old, new, json } => check_files(old, new, *json),
    }
}

fn check_files(old: &Path, new: &Path, json: bool) -> i32 {
    let (old, new) = match (read(old), read(new)) {
        (Ok(old), Ok(new)) => (old, new),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("zmesh contract check: {e}");
            return INVALID;
        }
    };
    let report = check(&old, &new);
    let text = if json {
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())
    } else {
        Ok(table(&report))
    };
    let written = text
        .map_err(anyhow::Error::msg)
        .and_then(|text| outln!("{text}"));
    match written {
        // Its reader went away; the exit status still says what the report would have.
        Err(e) if crate::output::is_stdout_closed(&e) => {}
        Err(e) => {
            eprintln!("zmesh contract check: cannot print the report: {e:#}");
            return INVALID;
        }
        Ok(()) => {}
    }
    if report.is_breaking() {
        BREAKING
    } else {
        OK
    }
}

/// Reads and validates one contract file; the error names the file.
fn read(path: &Path) -> Result<NodeContract, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    NodeContract::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The human table: CHANNEL METHOD CHANGE BREAKING DETAIL, aligned, then a summary line.
fn table(report: &CheckReport) -> String {
    let header = ["CHANNEL", "METHOD", "CHANGE", "BREAKING", "DETAIL"];
    let rows: Vec<[&str; 5]> = report
        .changes
        .iter()
        .map(|c| {
            [
                c.channel.as_str(),
                c.method.as_deref().unwrap_or("-"),
                c.kind.as_str(),
                if c.breaking { "yes" } else { "no" },
                c.detail.as_str(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let lines = if rows.is_empty() { None } else { Some(&header) };
    for row in lines.into_iter().chain(&rows) {
        let line: Vec<String> = row[..4]
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .chain(std::iter::once(row[4].to_owned()))
            .collect();
        out.push_str(&line.join("  "));
        out.push('\n');
    }
    let breaking = report.breaking().count();
    out.push_str(&match (report.changes.len(), breaking) {
        (0, _) => "no changes".to_owned(),
        (n, 0) => format!("{n} change(s), none breaking"),
        (n, b) => format!("{n} change(s), {b} breaking"),
    });
    out
}
