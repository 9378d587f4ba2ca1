//! The `zmesh` command line: run a node, publish, subscribe, inspect, and the local demo.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;
use zmesh::config::{Endpoint, NodeConfig};
use zmesh::runtime::calls::{decode, encode_args, may_have_run, CallError, CallOptions};
use zmesh::runtime::{Node, NodeEvent};

use crate::output::outln;

mod output;

mod commands;
mod contract;
mod demo;
mod idempotency;
mod peers;
mod ports;
mod stdout;

/// zmesh: a node transport runtime over ZeroMQ.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
    /// Colour in log lines: `auto` (only when stderr is a terminal and NO_COLOR is unset),
    /// `always` (what `--color` alone means) or `never`.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "WHEN",
        default_value_t = ColorWhen::Auto,
        num_args = 0..=1,
        default_missing_value = "always"
    )]
    color: ColorWhen,
    /// On an error, print where it was raised (a backtrace) after its causes.
    #[arg(long, global = true)]
    debug: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum ColorWhen {
    /// Colour only when stderr is a terminal and NO_COLOR is not set.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a node from a TOML configuration until Ctrl-C (or SIGTERM).
    Node {
        /// The node's TOML configuration file: every key is in README.md, section "Configuration".
        #[arg(long)]
        config: PathBuf,
        /// How to print state changes and deliveries on stdout.
        #[arg(long, value_enum, default_value_t = EventFormat::Human)]
        events: EventFormat,
        /// Serve snapshots on this endpoint for `zmesh status` (e.g. ipc:///tmp/a.ctl).
        #[arg(long)]
        control: Option<String>,
        /// Serve the node's metrics for Prometheus over HTTP on this address (any path, e.g.
        /// 127.0.0.1:9464/metrics). No authentication: keep it on loopback or a trusted
        /// network. Labels never carry RIDs or endpoints.
        #[arg(long, value_name = "ADDR")]
        metrics: Option<std::net::SocketAddr>,
        /// Send this many one-way records to every configured peer and server once ready
        /// (a quick traffic source for tests and demos).
        #[arg(long, default_value_t = 0)]
        send: u32,
        /// Serve the built-in demo service on this channel (repeatable), its methods declared
        /// with their semantics: `echo` (query) returns its arguments, `get`
        /// (query) the setpoint, `set` (idempotent command, conflating) sets it, `dispense`
        /// (non-repeatable command) answers "dispensed #N" (`{"hold_ms": M}` waits M ms
        /// once it has started, before it returns and its outcome is recorded); undeclared:
        /// `sleep` takes milliseconds and answers after them, `work` takes
        /// `[token, milliseconds]` and answers the token after them, `fail` answers Exception.
        #[arg(long = "serve")]
        serve: Vec<String>,
        /// Guard non-repeatable commands with a durable idempotency store in this SQLite file
        /// (created if absent; one host only).
        #[arg(long)]
        idempotency_store: Option<PathBuf>,
        /// Fault injection for crash tests and the demo: hold each recorded outcome this many
        /// milliseconds before its REPLY may leave.
        #[arg(long, hide = true)]
        fault_hold_after_record_ms: Option<u64>,
        /// Append one line per demo method call that starts running (`METHOD ARGS-HEX`),
        /// written before the method runs: a record of what this node executed, for fault
        /// tests that check `may_have_run` against reality.
        #[arg(long)]
        exec_log: Option<PathBuf>,
    },
    /// Start a node from a configuration, make one call, print the result as JSON, exit.
    /// Exit status 0 on success, 1 on a call error (the JSON says whether it may have run).
    Call {
        /// The calling node's configuration file.
        #[arg(long)]
        config: PathBuf,
        /// The channel to call.
        #[arg(long)]
        channel: String,
        /// The method to call.
        #[arg(long)]
        method: String,
        /// Arguments as JSON (sent as MessagePack).
        #[arg(long, default_value = "null")]
        args: String,
        /// Deadline in milliseconds (0: none).
        #[arg(long, default_value_t = 0)]
        ttl_ms: u64,
        /// Call this RouteMesh peer (RID) instead of any ready server of the channel.
        #[arg(long)]
        peer: Option<String>,
        /// How long to wait for a ready server before giving up (ms). Only calls that
        /// certainly did not run (no ready peer) are retried meanwhile.
        #[arg(long, default_value_t = 10_000)]
        wait_ms: u64,
        /// The idempotency key of this intent: a retry with the same key is
        /// answered from the server's record instead of running again.
        #[arg(long)]
        key: Option<String>,
        /// Pin the semantics the caller expects (query, idempotent-command,
        /// non-repeatable-command): a server whose method is more dangerous to repeat answers
        /// IncompatibleVersion instead of running it.
        #[arg(long)]
        semantics: Option<String>,
        /// Call as this RID. By default the configuration's RID followed by `.call-PID`: two
        /// calls started from one file at once must not share a RID (the second would replace
        /// the first's connection). The security identity stays the configured one.
        #[arg(long)]
        rid: Option<String>,
    },
    /// Print a node's service contract: from its `--control` endpoint, or over the wire
    /// from the node serving `--channel` (dialled with `--config`, as the configuration's RID
    /// followed by `.call-PID`, like `zmesh call`).
    Describe {
        /// The node's control endpoint.
        #[arg(long, conflicts_with = "config")]
        control: Option<String>,
        /// A configuration to dial the serving node with (with `--channel`).
        #[arg(long, requires = "channel")]
        config: Option<PathBuf>,
        /// The channel whose serving node to ask.
        #[arg(long)]
        channel: Option<String>,
        /// Ask this RouteMesh peer (RID).
        #[arg(long)]
        peer: Option<String>,
        /// How long to wait for a ready server (ms).
        #[arg(long, default_value_t = 10_000)]
        wait_ms: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The records of a durable idempotency store (`--idempotency-store PATH`): list those
    /// left in progress, show one, resolve one after a crash.
    Idempotency {
        #[command(subcommand)]
        cmd: idempotency::IdempotencyCmd,
    },
    /// Print a running node's operations registry: the calls it made and how
    /// each ended, from its `--control` endpoint.
    Ops {
        /// The node's control endpoint.
        #[arg(long)]
        control: String,
        /// Only operations with this status (issued, sent, succeeded, failed,
        /// unknown-outcome, deferred).
        #[arg(long)]
        status: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Publish fanout records (with beacons every 5 s) on an endpoint.
    Pub {
        /// Endpoint to bind, e.g. tcp://127.0.0.1:7104.
        #[arg(long)]
        endpoint: String,
        /// Topic of the records.
        #[arg(long, default_value = "demo")]
        topic: String,
        /// Records to publish (one per `interval_ms`); 0 publishes nothing but beacons.
        #[arg(long, default_value_t = 10)]
        count: u64,
        /// Milliseconds between records.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Keep running (beacons only) after the last record until Ctrl-C.
        #[arg(long)]
        stay: bool,
    },
    /// Subscribe to one or more publishers (one SUB socket each) and print what arrives.
    Sub {
        /// Publisher endpoints.
        #[arg(long = "endpoint", required = true)]
        endpoints: Vec<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = EventFormat::Human)]
        events: EventFormat,
        /// Exit after this many seconds (default: run until Ctrl-C).
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// Make a CURVE key pair: writes the key file (public and secret key, Z85;
    /// readable by its owner only; never overwrites) and prints the public key, which peers
    /// configure to expect of this node.
    Keygen {
        /// Where to write the key file.
        #[arg(long)]
        out: PathBuf,
    },
    /// List the nodes in a discovery store (automatic mode): every live
    /// descriptor with its generation, endpoints, memberships and lease age.
    Peers {
        /// The store: `sqlite:///path/mesh.db` or `etcd://host:port[,host:port…][/prefix]`.
        /// With `--config`, replaces the URL of its `[discovery]` section.
        #[arg(long, required_unless_present = "config")]
        store: Option<String>,
        /// A node's configuration file: its `[discovery]` section names the store and how to
        /// reach it (`[discovery.tls]`, `[discovery.auth]`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a running node's snapshot, fetched from its `--control` endpoint.
    Status {
        /// The node's control endpoint.
        #[arg(long)]
        control: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A live local mesh whose nodes find each other through a descriptor store (the embedded
    /// SQLite one; no endpoint written anywhere): all three topologies, a peer killed,
    /// detected and restarted as a new run, the store taken away, commands; exits by itself.
    Demo {
        /// No pacing pauses between scenes (for CI); every step still waits on what it
        /// observes.
        #[arg(long)]
        quick: bool,
        /// The same demo through an etcd it starts itself (ZMESH_ETCD, or `etcd` on PATH).
        #[arg(long)]
        etcd: bool,
    },
    /// Measure raw libzmq and zmesh side by side on 127.0.0.1 (see BENCHMARKS.md).
    Bench(zmesh_bench::BenchArgs),
    /// Check another implementation live, over the wire, rule by rule against WIRE.md: the
    /// runner plays the target's counterpart in each role the target is described with
    /// (spec-tests/README.md, "The live runner"). Exit status 1 if a MUST rule failed.
    Conform(zmesh_conform::ConformArgs),
    /// Deterministic simulations of whole meshes over the protocol core, every invariant
    /// checked on every step; `zmesh sim --help` lists the arguments.
    #[command(disable_help_flag = true)]
    Sim {
        /// The simulator's arguments (`--seeds N`, `--seed S --trace`, ...).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Service contracts: `zmesh contract check OLD.json NEW.json`.
    Contract {
        #[command(subcommand)]
        cmd: contract::ContractCmd,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum EventFormat {
    /// One human-readable line per event.
    Human,
    /// One JSON object per line.
    Ndjson,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.debug {
        // Errors capture where they were raised only when asked to; this runs before any
        // other thread exists.
        std::env::set_var("RUST_LIB_BACKTRACE", "1");
    }
    let ansi = match cli.color {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ZMESH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    let debug = cli.debug;
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if output::is_stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            for line in output::error_lines(&e) {
                eprintln!("{line}");
            }
            if debug {
                eprintln!("backtrace:\n{}", e.backtrace());
            }
            ExitCode::FAILURE
        }
    }
}

/// Runs one command on a tokio runtime.
fn run(command: Cmd) -> Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting tokio")?;
    rt.block_on(async move {
        match command {
            Cmd::Node {
                config,
                events,
                control,
                metrics,
                send,
                serve,
                exec_log,
                idempotency_store,
                fault_hold_after_record_ms,
            } => {
                let cfg = NodeConfig::from_file(&config)?;
                if let Some(addr) = metrics {
                    serve_metrics(addr)?;
                }
                let store = match &idempotency_store {
                    Some(p) => Some(commands::idempotency_store(
                        p,
                        fault_hold_after_record_ms.map(Duration::from_millis),
                    )?),
                    None => None,
                };
                let exec_log = match exec_log {
                    Some(p) => Some(std::sync::Arc::new(std::sync::Mutex::new(
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&p)
                            .with_context(|| format!("opening {}", p.display()))?,
                    ))),
                    None => None,
                };
                let serving = Serving {
                    channels: serve,
                    exec_log,
                    store,
                };
                run_node(cfg, events, control, send, None, serving).await
            }
            Cmd::Call {
                config,
                channel,
                method,
                args,
                ttl_ms,
                peer,
                wait_ms,
                key,
                semantics,
                rid,
            } => {
                let mut cfg = NodeConfig::from_file(&config)?;
                one_call_rid(&mut cfg, rid);
                let semantics = match semantics.as_deref() {
                    None => None,
                    Some(s) => match zmesh::proto::contract::parse_semantics(s) {
                        Some(p) => p,
                        None => bail!("--semantics {s:?}: use query, idempotent-command or non-repeatable-command"),
                    },
                };
                let opts = CallOptions {
                    ttl: (ttl_ms > 0).then(|| Duration::from_millis(ttl_ms)),
                    peer,
                    semantics,
                    idempotency_key: key,
                };
                call_once(cfg, &channel, &method, &args, opts, wait_ms).await
            }
            Cmd::Pub {
                endpoint,
                topic,
                count,
                interval_ms,
                stay,
            } => run_pub(endpoint, topic, count, interval_ms, stay).await,
            Cmd::Sub {
                endpoints,
                events,
                seconds,
            } => {
                let mut cfg = NodeConfig::new(format!("sub-{}", std::process::id()));
                cfg.subscriptions = endpoints
                    .into_iter()
                    .map(Endpoint::new)
                    .collect();
                run_node(
                    cfg,
                    events,
                    None,
                    0,
                    seconds.map(Duration::from_secs),
                    Serving::default(),
                )
                .await
            }
            Cmd::Keygen { out } => {
                let pair = zmesh::runtime::security::KeyPair::generate()?;
                pair.write_new(&out)?;
                outln!("{}", pair.public)
            }
            Cmd::Status { control, json } => status(&control, json),
            Cmd::Peers {
                store,
                config,
                json,
            } => peers::run(store, config, json).await,
            Cmd::Describe {
                control,
                config,
                channel,
                peer,
                wait_ms,
                json,
            } => describe(control, config, channel, peer, wait_ms, json).await,
            Cmd::Ops {
                control,
                status,
                json,
            } => {
                let v = commands::ask_control(&control, "ops")?;
                let ops = v.as_array().cloned().unwrap_or_default();
                commands::print_ops(&ops, status.as_deref(), json)
            }
            Cmd::Idempotency { cmd } => idempotency::run(cmd),
            Cmd::Demo { quick, etcd } => demo::run(quick, etcd).await,
            Cmd::Bench(args) => zmesh_bench::run(args).await,
            Cmd::Conform(args) => zmesh_conform::run(args),
            Cmd::Sim { args } => std::process::exit(zmesh_sim::cli::main(args)),
            Cmd::Contract { cmd } => std::process::exit(contract::run(&cmd)),
        }
    })
}

/// One ndjson line of an event: `event`, `node` and `t_ms`, then the fields of the event's
/// own JSON object (`fields`, as `serde_json::to_value` made it).
fn tagged(
    event: &str,
    rid: &str,
    ms: u128,
    fields: serde_json::Result<serde_json::Value>,
) -> String {
    let mut v = json!({ "event": event, "node": rid, "t_ms": ms });
    if let (Some(obj), Ok(serde_json::Value::Object(fields))) = (v.as_object_mut(), fields) {
        obj.extend(fields);
    }
    v.to_string()
}

/// Prints one event in the chosen format.
pub(crate) fn print_event(
    rid: &str,
    ev: &NodeEvent,
    format: EventFormat,
    t0: Instant,
) -> Result<()> {
    let ms = t0.elapsed().as_millis();
    let line = match (ev, format) {
        (NodeEvent::State(s), EventFormat::Ndjson) => json!({
            "event": "state", "node": rid, "t_ms": ms, "link": s.link, "state": s.state,
            "reason": s.reason, "detail": s.detail,
        })
        .to_string(),
        (NodeEvent::Delivery(d), EventFormat::Ndjson) => json!({
            "event": "delivery", "node": rid, "t_ms": ms, "source": d.source,
            "channel": String::from_utf8_lossy(&d.channel), "bytes": d.payload.len(),
            "payload": String::from_utf8_lossy(&d.payload),
        })
        .to_string(),
        (NodeEvent::State(s), EventFormat::Human) => format!(
            "[{ms:>6} ms] {rid}: {} -> {}{} ({})",
            s.link,
            s.state.as_str(),
            s.reason
                .map(|r| format!(" [{}]", r.as_str()))
                .unwrap_or_default(),
            s.detail
        ),
        (NodeEvent::Delivery(d), EventFormat::Human) => format!(
            "[{ms:>6} ms] {rid}: delivery from {} on {:?}: {}",
            d.source,
            String::from_utf8_lossy(&d.channel),
            String::from_utf8_lossy(&d.payload)
        ),
        (NodeEvent::Discovery(e), EventFormat::Ndjson) => {
            tagged("discovery", rid, ms, serde_json::to_value(e))
        }
        (NodeEvent::Discovery(e), EventFormat::Human) => {
            format!("[{ms:>6} ms] {rid}: discovery: {e}")
        }
        (NodeEvent::Security(e), EventFormat::Ndjson) => {
            tagged("security", rid, ms, serde_json::to_value(e))
        }
        (NodeEvent::Security(e), EventFormat::Human) => {
            format!("[{ms:>6} ms] {rid}: security: {e}")
        }
        (_, EventFormat::Ndjson) => {
            json!({ "event": "other", "node": rid, "t_ms": ms }).to_string()
        }
        (_, EventFormat::Human) => format!("[{ms:>6} ms] {rid}: {ev:?}"),
    };
    outln!("{line}")
}

/// What `zmesh node` serves: the demo service on these channels, its exec log, and the
/// idempotency store guarding its non-repeatable commands.
#[derive(Default)]
struct Serving {
    channels: Vec<String>,
    exec_log: Option<commands::ExecLog>,
    store: Option<std::sync::Arc<dyn zmesh::runtime::idempotency::IdempotencyStore>>,
}

async fn run_node(
    cfg: NodeConfig,
    format: EventFormat,
    control: Option<String>,
    send: u32,
    limit: Option<Duration>,
    serving: Serving,
) -> Result<()> {
    let t0 = Instant::now();
    // Before the node and its control endpoint exist: once either answers, TERM and HUP are
    // handled (SIGHUP reads the allow-list again; its outcome is an event).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let peers: Vec<String> = cfg.peers.iter().map(|p| p.rid.clone()).collect();
    let channels: Vec<String> = cfg.servers.iter().map(|s| s.channel.clone()).collect();
    let rid = cfg.rid.clone();
    // Services are registered before the node reads its first record: a caller that sees
    // this node ready never finds the channel unserved.
    let mut builder = Node::builder(cfg);
    for channel in &serving.channels {
        let service = commands::demo_service(channel, &rid, format, t0, serving.exec_log.clone());
        builder = builder.expose(service);
    }
    if let Some(store) = serving.store {
        builder = builder.idempotency_store(store);
    }
    let node = builder.start().await?;
    let mut events = node.take_events().context("event stream already taken")?;
    if let Some(ep) = control {
        serve_control(node.clone(), ep)?;
    }
    let mut sent = false;
    let deadline = limit.map(|l| tokio::time::Instant::now() + l);
    // A closed stdout (or another write error) ends the node like a signal, then is returned.
    let mut printed = Ok(());
    'run: loop {
        let stop = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            batch = events.recv() => {
                let Some(batch) = batch else { break };
                for ev in &batch {
                    printed = print_event(&rid, ev, format, t0);
                    if printed.is_err() {
                        break 'run;
                    }
                }
                if send > 0 && !sent {
                    sent = send_when_ready(&node, &peers, &channels, send).await;
                }
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hangup.recv() => {
                if let Err(e) = node.reload_allow_list().await {
                    eprintln!("{rid}: SIGHUP: allow-list not reloaded, the previous one stays: {e}");
                }
            }
            _ = stop => break,
        }
    }
    node.shutdown().await?;
    printed
}

/// Gives a node that makes one call and exits the RID `rid`, or by default the configured RID
/// followed by `.call-PID`, keeping the configured security identity (what authorizers see;
/// under CURVE it is the key, whatever the RID).
fn one_call_rid(cfg: &mut NodeConfig, rid: Option<String>) {
    if cfg.security.mode == zmesh::config::SecurityMode::None {
        cfg.security_identity = Some(cfg.security_identity().to_owned());
    }
    cfg.rid = rid.unwrap_or_else(|| format!("{}.call-{}", cfg.rid, std::process::id()));
}

async fn call_once(
    cfg: NodeConfig,
    channel: &str,
    method: &str,
    args: &str,
    opts: CallOptions,
    wait_ms: u64,
) -> Result<()> {
    let args: serde_json::Value = serde_json::from_str(args).context("--args is not JSON")?;
    let node = Node::start(cfg).await?;
    let limit = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let mut events = node.take_events().context("events")?;
    let mut contract_checked = opts.idempotency_key.is_none();
    let result = loop {
        if !contract_checked {
            // The key keeps a retry from running the command again only where the server
            // guards the method; its contract says whether it does.
            match node.fetch_contract(channel, opts.clone()).await {
                Err(CallError::NoReadyPeer | CallError::NoRegistration)
                    if tokio::time::Instant::now() < limit =>
                {
                    tokio::select! {
                        _ = events.recv() => {}
                        _ = tokio::time::sleep_until(limit) => {}
                    }
                    continue;
                }
                Ok(contract) => warn_if_unguarded(&contract, channel, method),
                Err(_) => {}
            }
            contract_checked = true;
        }
        // The answer says whether the server replayed it from its idempotency record.
        let r: (Result<serde_json::Value, CallError>, bool) = match encode_args(&args) {
            Ok(raw) => {
                let answer = node
                    .start_call(channel, method, raw, opts.clone())
                    .answer()
                    .await;
                let replayed = answer.replayed();
                (answer.into_result().and_then(|b| decode(&b)), replayed)
            }
            Err(e) => (Err(e), false),
        };
        match r {
            // Never sent: safe to try again once a link changes state.
            (Err(CallError::NoReadyPeer | CallError::NoRegistration), _)
                if tokio::time::Instant::now() < limit =>
            {
                tokio::select! {
                    _ = events.recv() => {}
                    _ = tokio::time::sleep_until(limit) => {}
                }
            }
            other => break other,
        }
    };
    let (result, replayed) = result;
    let ok = result.is_ok();
    // The call's row of this node's operations registry, as `zmesh ops` shows a node's rows:
    // the last entry (earlier ones are attempts that found no ready server and never left).
    let operation = node.operations().views().pop();
    let mut out = match result {
        Ok(v) => json!({"ok": true, "result": v}),
        Err(e) => json!({
            "ok": false, "code": e.code(), "error": e.to_string(), "may_have_run": may_have_run(&e),
        }),
    };
    out["replayed"] = json!(replayed);
    out["rid"] = json!(node.rid());
    out["operation"] = json!(operation);
    let printed = outln!("{out}");
    node.shutdown().await?;
    printed?;
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

/// `zmesh call --key` to a method its server's contract reports unguarded
/// (`"guarded": false`): one line on stderr, since the key will not keep a retry from running
/// the command again.
fn warn_if_unguarded(
    contract: &zmesh::runtime::service::NodeContract,
    channel: &str,
    method: &str,
) {
    let guarded = contract
        .services
        .iter()
        .find(|s| s.channel == channel)
        .and_then(|s| s.method(method))
        .and_then(|m| m.guarded);
    if guarded == Some(false) {
        eprintln!(
            "warning: {} does not guard {channel}.{method} with a durable idempotency store: \
             the key is ignored there, and a retry with it runs the command again",
            contract.rid
        );
    }
}

/// Sends `n` records to every peer and channel once all of them are ready; false if not yet.
async fn send_when_ready(node: &Node, peers: &[String], channels: &[String], n: u32) -> bool {
    for i in 0..n {
        for p in peers {
            if node
                .send(p, "demo", format!("hello {i} from {}", node.rid()))
                .await
                .is_err()
            {
                return i > 0;
            }
        }
        for c in channels {
            if node
                .send_to_server(c, format!("hello {i} from {}", node.rid()))
                .await
                .is_err()
            {
                return i > 0;
            }
        }
    }
    true
}

/// Installs the Prometheus exporter (its HTTP listener on `addr`, on this tokio runtime) as
/// the process's metrics recorder and describes zmesh's metrics to it.
fn serve_metrics(addr: std::net::SocketAddr) -> Result<()> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .with_context(|| format!("serving metrics on {addr}"))?;
    zmesh::runtime::telemetry::describe();
    Ok(())
}

/// Answers snapshot requests on a REP socket from a plain thread (the CLI's own control
/// plane; not part of the library).
fn serve_control(node: Node, endpoint: String) -> Result<()> {
    let ctx = zmq::Context::new();
    let rep = ctx.socket(zmq::REP)?;
    rep.set_linger(0)?;
    // A control question is a word: nobody sends more than 64 KiB to it.
    rep.set_maxmsgsize(64 << 10)?;
    rep.bind(&endpoint)
        .with_context(|| format!("binding control endpoint {endpoint}"))?;
    let handle = tokio::runtime::Handle::current();
    std::thread::spawn(move || {
        let _ctx = ctx;
        while let Ok(asked) = rep.recv_bytes(0) {
            let answer = match &asked[..] {
                b"ops" => {
                    serde_json::to_value(node.operations().views()).map_err(|e| e.to_string())
                }
                b"describe" => serde_json::to_value(node.describe()).map_err(|e| e.to_string()),
                _ => handle
                    .block_on(node.snapshot())
                    .map_err(|e| e.to_string())
                    .and_then(|s| serde_json::to_value(&s).map_err(|e| e.to_string())),
            };
            let reply = match answer {
                Ok(v) => v.to_string(),
                Err(e) => json!({ "error": e }).to_string(),
            };
            if rep.send(reply.as_bytes(), 0).is_err() {
                break;
            }
        }
    });
    Ok(())
}

fn status(control: &str, as_json: bool) -> Result<()> {
    let ctx = zmq::Context::new();
    let req = ctx.socket(zmq::REQ)?;
    req.set_linger(0)?;
    req.set_rcvtimeo(3000)?;
    req.connect(control)?;
    req.send(&b"snapshot"[..], 0)?;
    let reply = req
        .recv_bytes(0)
        .with_context(|| format!("no answer from {control} within 3 s"))?;
    let value: serde_json::Value = serde_json::from_slice(&reply)?;
    if let Some(e) = value.get("error") {
        bail!("node answered with an error: {e}");
    }
    if as_json {
        outln!("{}", serde_json::to_string_pretty(&value)?)
    } else {
        output::out!("{}", render_table(&value))
    }
}

fn render_table(v: &serde_json::Value) -> String {
    let s = |x: &serde_json::Value| match x {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut out = format!(
        "node {} generation {} host {}\n{:<14} {:<20} {:<10} {:<34} {:<14} {:>5} LAST FAILURE\n",
        s(&v["rid"]),
        s(&v["generation"]),
        s(&v["host"]),
        "TOPOLOGY",
        "ROLE",
        "PEER",
        "ENDPOINT",
        "STATE",
        "CONN"
    );
    for l in v["links"].as_array().into_iter().flatten() {
        let f = &l["last_failure"];
        let failure = if f.is_null() {
            String::new()
        } else {
            format!(
                "{} ({} ms ago) {}",
                s(&f["reason"]),
                s(&f["age_ms"]),
                s(&f["detail"])
            )
        };
        out.push_str(&format!(
            "{:<14} {:<20} {:<10} {:<34} {:<14} {:>5} {}\n",
            s(&l["topology"]),
            s(&l["role"]),
            s(&l["peer"]),
            s(&l["endpoint"]),
            s(&l["state"]),
            // 16 hex digits in the JSON; the short decimal form of event details (`c{n}`).
            l["connection_id"]
                .as_str()
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .map_or("-".to_owned(), |n| n.to_string()),
            failure
        ));
    }
    if v["omitted"].as_u64().is_some_and(|n| n > 0) {
        out.push_str(&format!("... {} more links omitted\n", s(&v["omitted"])));
    }
    out.push_str(&format!(
        "links ready {}; file descriptors {} open of {} (libzmq: {} contexts, {} sockets)\n",
        s(&v["links_ready"]),
        s(&v["fds_open"]),
        s(&v["fd_limit"]),
        s(&v["zmq_contexts"]),
        s(&v["zmq_sockets"]),
    ));
    let sec = &v["security"];
    if sec["mode"] == "curve" {
        out.push_str(&format!(
            "security curve key {} allow-list {} keys (reloaded {} times)\n",
            s(&sec["public_key"]),
            s(&sec["allowed_keys"]),
            s(&sec["allow_list_reloads"]),
        ));
    } else if sec.is_object() {
        out.push_str("security none: nothing authenticated or encrypted\n");
    }
    let d = &v["discovery"];
    if d.is_object() {
        let reachable = if d["store_reachable"] == true {
            "reachable"
        } else {
            "unreachable"
        };
        out.push_str(&format!(
            "discovery {} store {reachable} lease {} (age {} ms, ttl {} ms, renewed every {} ms) descriptors {}\n",
            s(&d["store"]),
            s(&d["lease"]),
            s(&d["lease_age_ms"]),
            s(&d["lease_ttl_ms"]),
            s(&d["lease_renew_interval_ms"]),
            s(&d["descriptors_seen"]),
        ));
    }
    out
}

async fn run_pub(
    endpoint: String,
    topic: String,
    count: u64,
    interval_ms: u64,
    stay: bool,
) -> Result<()> {
    let mut cfg = NodeConfig::new(format!("pub-{}", std::process::id()));
    cfg.publisher = Some(Endpoint::new(endpoint));
    let node = Node::start(cfg).await?;
    for i in 0..count {
        tokio::time::sleep(Duration::from_millis(interval_ms)).await;
        node.publish(topic.as_bytes(), format!("record {i}"))?;
        if let Err(e) = outln!("published record {i} on {topic:?}") {
            node.shutdown().await?;
            return Err(e);
        }
    }
    if stay {
        let _ = tokio::signal::ctrl_c().await;
    }
    node.shutdown().await?;
    Ok(())
}

/// `zmesh describe`: a node's contract, from its control endpoint or over the wire.
async fn describe(
    control: Option<String>,
    config: Option<PathBuf>,
    channel: Option<String>,
    peer: Option<String>,
    wait_ms: u64,
    as_json: bool,
) -> Result<()> {
    let contract: zmesh::runtime::service::NodeContract = match (control, config, channel) {
        (Some(control), _, _) => {
            serde_json::from_value(commands::ask_control(&control, "describe")?)
                .context("the control endpoint's contract")?
        }
        (None, Some(config), Some(channel)) => {
            let mut cfg = NodeConfig::from_file(&config)?;
            one_call_rid(&mut cfg, None);
            let node = Node::start(cfg).await?;
            let mut events = node.take_events().context("events")?;
            let opts = CallOptions {
                peer,
                ..CallOptions::default()
            };
            let limit = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
            let got = loop {
                match node.fetch_contract(&channel, opts.clone()).await {
                    Err(CallError::NoReadyPeer | CallError::NoRegistration)
                        if tokio::time::Instant::now() < limit =>
                    {
                        tokio::select! {
                            _ = events.recv() => {}
                            _ = tokio::time::sleep_until(limit) => {}
                        }
                    }
                    other => break other,
                }
            };
            node.shutdown().await?;
            got.with_context(|| format!("fetching the contract of {channel:?}"))?
        }
        _ => bail!("give --control EP, or --config FILE with --channel CHANNEL"),
    };
    commands::print_contract(&contract, as_json)
}

// Here, not in ports.rs: the bench and the integration tests include that file, and would run
// this again.
#[cfg(test)]
mod ports_tests {
    use super::ports::{free_loopback_port, pool};

    #[test]
    fn ports_are_below_the_ephemeral_range_and_distinct() {
        let (start, len) = pool();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let p = free_loopback_port().expect("a port");
            if len > 0 {
                assert!(p >= start && p < start + len, "{p} outside {start}+{len}");
            }
            assert!(seen.insert(p), "{p} handed out twice");
        }
    }
}
