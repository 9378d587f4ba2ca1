//! Shared by the fault-injection tests (`zmesh-cli/tests/faults.rs`, one callee killed,
//! stopped or fed malformed frames; `zmesh-cli/tests/reconnect_storm.rs`, several callees hit
//! at once, over and over): the `work` calls they issue and collect, the judge that checks
//! every outcome against the execution logs of the callees, and [`StormChild`], a
//! `zmesh node --serve CHANNEL` that is killed and restarted.
//!
//! Declared by the test files that use it (`#[path = "common/faults.rs"] mod fault;`),
//! next to `mod common;`, which it uses.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use zmesh::config::NodeConfig;
use zmesh::runtime::calls::{may_have_run, CallError, CallOptions};
use zmesh::runtime::Node;

use crate::common;

/// Bound of every wait for a callee's output or a link.
pub const STEP: Duration = Duration::from_secs(15);

/// One row of the fault matrix.
#[derive(Debug, Default)]
pub struct Row {
    pub calls: usize,
    pub ok: usize,
    pub failed_may_have_run: usize,
    pub failed_did_not_run: usize,
    pub executed: usize,
}

/// Checks every outcome against the execution log; panics on any dishonest answer.
pub fn judge(
    fault: &str,
    results: &[(String, Result<String, CallError>)],
    runs: &HashMap<String, usize>,
) -> Row {
    let mut row = Row {
        calls: results.len(),
        ..Row::default()
    };
    for (token, result) in results {
        let ran = runs.get(token).copied().unwrap_or(0);
        assert!(ran <= 1, "{fault}: call {token} ran {ran} times");
        row.executed += ran;
        match result {
            Ok(v) => {
                assert_eq!(v, token, "{fault}: answer of another call");
                assert_eq!(ran, 1, "{fault}: {token} answered Ok but did not run");
                row.ok += 1;
            }
            Err(e) if may_have_run(e) => row.failed_may_have_run += 1,
            Err(e) => {
                assert_eq!(
                    ran, 0,
                    "{fault}: {token} failed with {e} (did not run) but it ran"
                );
                row.failed_did_not_run += 1;
            }
        }
    }
    println!(
        "FAULT-MATRIX | {fault} | calls {} | ok {} | failed, may have run {} | failed, did not run {} | executed {} | lost 0 | duplicated 0 |",
        row.calls, row.ok, row.failed_may_have_run, row.failed_did_not_run, row.executed
    );
    row
}

/// Issues `n` concurrent `work` calls of `ms` milliseconds each; every call's task returns
/// exactly once with its result.
pub fn issue(
    a: &Node,
    tag: &str,
    n: usize,
    ms: u64,
) -> Vec<(String, tokio::task::JoinHandle<Result<String, CallError>>)> {
    (0..n)
        .map(|i| {
            let token = format!("{tag}-{i}");
            let a = a.clone();
            let t = token.clone();
            let task = tokio::spawn(async move {
                a.call_with::<_, String>("work", "work", &(t, ms), CallOptions::default())
                    .await
            });
            (token, task)
        })
        .collect()
}

pub async fn collect(
    tasks: Vec<(String, tokio::task::JoinHandle<Result<String, CallError>>)>,
) -> Vec<(String, Result<String, CallError>)> {
    let mut out = Vec::new();
    for (token, task) in tasks {
        let r = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every call completes (C1)")
            .expect("join");
        out.push((token, r));
    }
    out
}

/// A directory for one test's files, removed when the guard drops (even on a panic).
pub fn test_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("zmesh-faults-{name}-"))
        .tempdir()
        .expect("dir")
}

/// Adds to `runs` how many times each `work` token started running by the execution log
/// `log` (`zmesh node --exec-log`: one line per call, before its method runs).
pub fn count_runs(log: &Path, runs: &mut HashMap<String, usize>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for line in text.lines() {
        let Some(hex_args) = line.strip_prefix("work ") else {
            continue;
        };
        let bytes = hex::decode(hex_args).expect("hex");
        let (token, _ms): (String, u64) = rmp_serde::from_slice(&bytes).expect("args");
        *runs.entry(token).or_insert(0) += 1;
    }
}

/// The lines `child` prints on its stdout (taken from it), read on a thread of their own.
pub fn stdout_lines(child: &mut Child) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let out = child.stdout.take().expect("stdout");
    let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// A child `zmesh node --serve CHANNEL` that a test kills and restarts: every process run
/// has a new lifecycle generation, its own execution log and its own control endpoint (for
/// its snapshot: generation, inbound links).
pub struct StormChild {
    pub name: String,
    dir: PathBuf,
    cfg_path: PathBuf,
    pub serve: String,
    pub child: Option<Child>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    exec_logs: Vec<PathBuf>,
    control: String,
    /// The generation of every run whose control endpoint answered.
    pub generations: Vec<u64>,
}

impl StormChild {
    pub fn start(dir: &Path, cfg: &NodeConfig, serve: &str) -> StormChild {
        let cfg_path = dir.join(format!("{}.toml", cfg.rid));
        std::fs::write(&cfg_path, toml::to_string(cfg).expect("toml")).expect("write");
        let (_tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let mut c = StormChild {
            name: cfg.rid.clone(),
            dir: dir.to_owned(),
            cfg_path,
            serve: serve.to_owned(),
            child: None,
            lines,
            exec_logs: Vec::new(),
            control: String::new(),
            generations: Vec::new(),
        };
        c.spawn();
        c
    }

    /// Starts a new process run (a new generation).
    pub fn spawn(&mut self) {
        let run = self.exec_logs.len();
        let exec_log = self.dir.join(format!("exec-{}-{run}.log", self.name));
        self.control = format!(
            "ipc://{}",
            self.dir
                .join(format!("ctl-{}-{run}.sock", self.name))
                .display()
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args(["node", "--events", "ndjson", "--serve", &self.serve])
            .arg("--exec-log")
            .arg(&exec_log)
            .args(["--control", &self.control])
            .arg("--config")
            .arg(&self.cfg_path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn storm child");
        self.lines = stdout_lines(&mut child);
        self.child = Some(child);
        self.exec_logs.push(exec_log);
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("kill -9");
            let _ = c.wait();
        }
    }

    /// Waits until `n` handlers started in the current run.
    pub async fn wait_started(&mut self, n: usize) {
        let mut seen = 0;
        while seen < n {
            let line = tokio::time::timeout(STEP, self.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("{}: {n} calls started within the bound", self.name))
                .expect("storm child still running");
            let v: serde_json::Value = serde_json::from_str(&line).expect("ndjson");
            if v["event"] == "call" {
                seen += 1;
            }
        }
    }

    /// The current run's snapshot, from its control endpoint (bounded wait: the run may still
    /// be starting).
    pub async fn snapshot(&self) -> serde_json::Value {
        let ep = self.control.clone();
        let name = self.name.clone();
        tokio::task::spawn_blocking(move || {
            let ctx = zmq::Context::new();
            let req = ctx.socket(zmq::REQ).expect("req");
            req.set_linger(0).expect("linger");
            req.set_rcvtimeo(10_000).expect("rcvtimeo");
            req.connect(&ep).expect("connect");
            req.send(&b"snapshot"[..], 0).expect("send");
            let reply = req
                .recv_bytes(0)
                .unwrap_or_else(|e| panic!("{name}: no snapshot from {ep} within 10 s: {e}"));
            serde_json::from_slice(&reply).expect("snapshot json")
        })
        .await
        .expect("join")
    }

    /// Records the current run's generation (once its control endpoint answers).
    pub async fn learn_generation(&mut self) -> u64 {
        let g = common::hex_id(&self.snapshot().await["generation"]).expect("generation");
        if self.generations.last() != Some(&g) {
            self.generations.push(g);
        }
        g
    }

    /// How many times each `work` token started running, over every run.
    pub fn executed(&self, runs: &mut HashMap<String, usize>) {
        for log in &self.exec_logs {
            count_runs(log, runs);
        }
    }
}

impl Drop for StormChild {
    fn drop(&mut self) {
        self.kill9();
    }
}
