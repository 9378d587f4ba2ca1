//! The demo's commands scene (MISSION K1-K3): node `e` serves "pump" with a
//! durable idempotency store; `a` sends it a non-repeatable command with an idempotency key;
//! `e` is killed after the command ran and its outcome was recorded, before `a` heard the
//! answer; `a` is told the command may have run and its operations tray shows the row;
//! `e` restarts (a new process run, the same store) and the same command with the same key
//! is answered from the durable record: the execution log shows it ran once. `a` finds `e`
//! through the store, both runs: the restarted `e` binds a new port, and its new descriptor
//! replaces the old run's connection (MISSION F3).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use zmesh::config::AutoBind;
use zmesh::proto::handshake::Role;
use zmesh::proto::state::ConnState;
use zmesh::runtime::calls::{may_have_run, CallOptions, Semantics};
use zmesh::runtime::operations::OpStatus;
use zmesh::runtime::snapshot::Snapshot;
use zmesh::runtime::{EventStream, Node};

use crate::output::outln;

use super::{member, node_config, wait_for, write_config, Proc};

/// How long `e` holds each answer after recording it, in the first run.
const HOLD_MS: &str = "60000";

/// Node `e` and its files.
pub(super) struct Pump {
    proc: Proc,
    store: PathBuf,
    exec_log: PathBuf,
}

impl Pump {
    /// Writes `e`'s configuration into `dir` (no endpoint: `[discovery]` on `url`, its
    /// ClientServer server on an ephemeral port) and starts it, holding answers after
    /// recording.
    pub(super) fn prepare(dir: &Path, url: &str) -> Result<Pump> {
        let mut e = node_config(
            "e",
            vec![member(Role::Server, "pump")],
            url,
            vec![AutoBind::Server],
        );
        // e serves "pump" and nothing else: no RouteMesh, no subscriptions.
        if let Some(d) = e.discovery.as_mut() {
            d.route_mesh = false;
            d.subscribe = false;
        }
        let store = dir.join("e-idempotency.db");
        let exec_log = dir.join("e-exec.log");
        let mut pump = Pump {
            proc: Proc::new("e", write_config(dir, &e)?, Vec::new()),
            store,
            exec_log,
        };
        pump.proc.extra = pump.args(true);
        pump.proc.start()?;
        Ok(pump)
    }

    fn args(&self, hold: bool) -> Vec<String> {
        let mut args = vec![
            "--serve".to_owned(),
            "pump".to_owned(),
            "--idempotency-store".to_owned(),
            self.store.display().to_string(),
            "--exec-log".to_owned(),
            self.exec_log.display().to_string(),
        ];
        if hold {
            args.extend([
                "--fault-hold-after-record-ms".to_owned(),
                HOLD_MS.to_owned(),
            ]);
        }
        args
    }

    /// The generation of `e` on `a`'s ready link to it, if ready.
    fn ready(s: &Snapshot) -> Option<u64> {
        s.links
            .iter()
            .find(|l| {
                l.topology == "client_server"
                    && l.peer.as_deref() == Some("e")
                    && l.state == ConnState::Ready
            })
            .and_then(|l| l.peer_generation)
    }

    /// The scene.
    pub(super) async fn run(
        &mut self,
        node: &Node,
        events: &mut EventStream,
        t0: Instant,
    ) -> Result<()> {
        wait_for(node, events, t0, |s| Pump::ready(s).is_some()).await?;
        let first = Pump::ready(&node.snapshot().await?);
        outln!(
            "   e serves \"pump\" with a durable idempotency store (SQLite); its contract, \
             fetched by a over the wire:"
        )?;
        let contract = node
            .fetch_contract("pump", CallOptions::default())
            .await
            .context("fetching e's contract")?;
        crate::commands::print_contract(&contract, false)?;
        outln!(
            "   e records each outcome before it answers; in this run it then holds the answer \
             {HOLD_MS} ms (fault injection), so the kill below lands after dispense ran and was \
             recorded, before a heard the answer"
        )?;
        let opts = CallOptions::default()
            .semantics(Semantics::NonRepeatableCommand)
            .idempotency_key("work-order-1001");
        let args = serde_json::json!({ "amount": 5 });
        let caller = node.clone();
        let (o, a) = (opts.clone(), args.clone());
        let mark = self.proc.mark();
        let call = tokio::spawn(async move {
            caller
                .call_with::<_, String>("pump", "dispense", &a, o)
                .await
        });
        self.proc.wait_line(mark, "outcome recorded").await?;
        let killed = Instant::now();
        self.proc.kill();
        outln!("   kill -9 e")?;
        match call.await? {
            Ok(v) => outln!("   unexpected answer {v:?}")?,
            Err(e) => outln!(
                "   a's call failed after {} ms: {e} [code {}, may_have_run = {}]",
                killed.elapsed().as_millis(),
                e.code(),
                may_have_run(&e)
            )?,
        }
        outln!(
            "   a's operations tray, unknown-outcome rows (zmesh ops --status unknown-outcome):"
        )?;
        let rows: Vec<serde_json::Value> = node
            .operations()
            .views()
            .into_iter()
            .filter(|v| v.status == OpStatus::UnknownOutcome)
            .map(|v| serde_json::to_value(v).unwrap_or_default())
            .collect();
        crate::commands::print_ops(&rows, None, false)?;

        outln!(
            "   restart e (same idempotency store, no fault injection, a new port found through \
             its new descriptor); retry with the same key"
        )?;
        self.proc.extra = self.args(false);
        self.proc.start()?;
        wait_for(node, events, t0, |s| {
            Pump::ready(s).is_some_and(|g| Some(g) != first)
        })
        .await?;
        let answer: String = node
            .call_with("pump", "dispense", &args, opts)
            .await
            .context("the retry")?;
        outln!(
            "   a -> e pump.dispense (key work-order-1001) = {answer:?}: answered from e's record"
        )?;
        let log = std::fs::read_to_string(&self.exec_log).unwrap_or_default();
        let runs = log.lines().filter(|l| l.starts_with("dispense ")).count();
        outln!("   e's execution log, both process runs: dispense ran {runs} time(s)")?;
        if runs != 1 {
            bail!("dispense ran {runs} times");
        }
        Ok(())
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.proc.kill();
    }
}
