//! `zmesh sim`: runs seeded simulations of whole meshes and checks every invariant. The
//! `zmesh` binary (zmesh-cli) hands [`main`] its arguments after `sim`.
//!
//! ```text
//! zmesh sim [--seeds N] [--first S] [--minutes M]      many seeds, each its own configuration
//! zmesh sim --seed S [--nodes N] [--topology mesh|client-server|fanout] [--seconds T]
//!           [--version1 P] [--no-faults] [--no-batches] [--no-receive-loop]
//!           [--discovery | --no-discovery] [--streams | --no-streams]
//!           [--no-zombies] [--zombie-puts] [--trace]
//!                                                       one seed, replayed exactly
//! ```
//! A failing seed prints the command that replays it and the trace up to the violation; the
//! exit status is 1 if any seed failed. A stdout closed by its reader (`zmesh sim | head -1`)
//! ends the run quietly, with the status of the seeds run until then.

use std::io;
use std::time::{Duration, Instant};

use crate::stdout::{is_closed, outln};
use crate::{run, Config, Report, Topology};

struct Args {
    seeds: u64,
    first: u64,
    minutes: u64,
    seed: Option<u64>,
    nodes: Option<usize>,
    topology: Option<Topology>,
    seconds: Option<u64>,
    faults: bool,
    trace: bool,
    version1: Option<u8>,
    batches: bool,
    receive_loop: bool,
    discovery: Option<bool>,
    streams: Option<bool>,
    zombies: bool,
    zombie_puts: bool,
}

fn parse(args: Vec<String>) -> Result<Args, String> {
    let mut a = Args {
        seeds: 100,
        first: 0,
        minutes: 3,
        seed: None,
        nodes: None,
        topology: None,
        seconds: None,
        faults: true,
        trace: false,
        version1: None,
        batches: true,
        receive_loop: true,
        discovery: None,
        streams: None,
        zombies: true,
        zombie_puts: false,
    };
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let num = |s: String, name: &str| -> Result<u64, String> {
            s.parse()
                .map_err(|_| format!("{name}: {s:?} is not a number"))
        };
        match flag.as_str() {
            "--seeds" => a.seeds = num(value("--seeds")?, "--seeds")?,
            "--first" => a.first = num(value("--first")?, "--first")?,
            "--minutes" => a.minutes = num(value("--minutes")?, "--minutes")?,
            "--seed" => a.seed = Some(num(value("--seed")?, "--seed")?),
            "--nodes" => {
                let n = num(value("--nodes")?, "--nodes")?;
                if !(2..=200).contains(&n) {
                    return Err("--nodes: 2 to 200".into());
                }
                a.nodes = Some(n as usize);
            }
            "--topology" => {
                let t = value("--topology")?;
                a.topology = Some(Topology::parse(&t).ok_or(format!(
                    "--topology: mesh, client-server or fanout, not {t:?}"
                ))?);
            }
            "--seconds" => a.seconds = Some(num(value("--seconds")?, "--seconds")?),
            "--version1" => {
                let p = num(value("--version1")?, "--version1")?;
                a.version1 = Some(
                    u8::try_from(p)
                        .ok()
                        .filter(|&p| p <= 100)
                        .ok_or("--version1: 0 to 100")?,
                );
            }
            "--no-faults" => a.faults = false,
            "--no-batches" => a.batches = false,
            "--no-receive-loop" => a.receive_loop = false,
            "--discovery" => a.discovery = Some(true),
            "--no-discovery" => a.discovery = Some(false),
            "--streams" => a.streams = Some(true),
            "--no-streams" => a.streams = Some(false),
            "--no-zombies" => a.zombies = false,
            "--zombie-puts" => a.zombie_puts = true,
            "--trace" => a.trace = true,
            "-h" | "--help" => {
                let _ = outln!("{}", include_str!("usage.txt"));
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(a)
}

fn config(a: &Args, seed: u64) -> Config {
    let mut c = Config::for_seed(seed, a.minutes);
    if let Some(n) = a.nodes {
        c.nodes = n;
    }
    if let Some(t) = a.topology {
        c.topology = t;
    }
    if let Some(s) = a.seconds {
        c.duration = Duration::from_secs(s);
    }
    if let Some(p) = a.version1 {
        c.version1 = p;
    }
    c.faults = a.faults;
    c.batches = c.batches && a.batches;
    c.receive_loop = c.receive_loop && a.receive_loop;
    c.zombies = c.zombies && a.zombies;
    c.zombie_puts = a.zombie_puts;
    if let Some(d) = a.discovery {
        c.discovery = d;
    }
    if let Some(st) = a.streams {
        c.streams = st;
    }
    c.full_trace = a.trace;
    c
}

fn print_failure(r: &Report) -> io::Result<()> {
    outln!(
        "seed {} FAILED; replay: {}",
        r.seed,
        r.config.replay_line(r.seed)
    )?;
    for v in &r.violations {
        outln!(
            "  {} at {:.3}s: {}",
            v.invariant,
            v.at.as_secs_f64(),
            v.detail
        )?;
    }
    outln!("  trace (last {} lines):", r.trace.len())?;
    for line in &r.trace {
        outln!("  {line}")?;
    }
    Ok(())
}

/// Runs `zmesh sim` with `args` (those after `sim`); returns the exit status: 0 if every
/// seed passed, 1 if one failed, 2 for a usage error.
pub fn main(args: Vec<String>) -> i32 {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("zmesh sim: {e}");
            return 2;
        }
    };
    // The status found until stdout failed, if it did.
    let mut status = 0;
    let ran = match a.seed {
        Some(seed) => replay(&a, seed, &mut status),
        None => run_seeds(&a, &mut status),
    };
    match ran {
        Err(e) if !is_closed(&e) => {
            eprintln!("zmesh sim: writing to stdout: {e}");
            1
        }
        _ => status,
    }
}

/// One seed, replayed exactly (`--seed S`); `status` becomes 1 if it failed.
fn replay(a: &Args, seed: u64, status: &mut i32) -> io::Result<()> {
    let r = run(seed, &config(a, seed));
    if !r.passed() {
        *status = 1;
    }
    if a.trace {
        for line in &r.trace {
            outln!("{line}")?;
        }
    }
    outln!("seed {seed}: {} steps, {:?}", r.steps, r.stats)?;
    if r.passed() {
        return outln!("every invariant held");
    }
    print_failure(&r)
}

/// Many seeds, each its own configuration; `status` becomes 1 once one failed.
fn run_seeds(a: &Args, status: &mut i32) -> io::Result<()> {
    let started = Instant::now();
    let mut failed = 0u64;
    let mut total = crate::truth::Stats::default();
    let mut steps = 0u64;
    let mut virtual_secs = 0u64;
    for seed in a.first..a.first + a.seeds {
        let c = config(a, seed);
        virtual_secs += c.duration.as_secs() + 90;
        let r = run(seed, &c);
        steps += r.steps;
        total.add(&r.stats);
        if !r.passed() {
            failed += 1;
            *status = 1;
            print_failure(&r)?;
        }
    }
    outln!(
        "{} seeds ({}..{}), {} failed; {:.1} h virtual time, {steps} steps, {:.1} s wall",
        a.seeds,
        a.first,
        a.first + a.seeds,
        failed,
        virtual_secs as f64 / 3600.0,
        started.elapsed().as_secs_f64()
    )?;
    outln!("{total:?}")
}
