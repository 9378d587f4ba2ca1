//! The default seed set (S1): several hundred seeded simulations of whole meshes, every
//! invariant checked on every step; and the properties the simulator itself must have.

use std::time::Duration;

use zmesh_sim::{run, Config, Report, Topology};

/// Seeds of the default set.
const SEEDS: u64 = 300;
/// Minutes of faults per seed (a quiet minute and a graceful stop follow).
const MINUTES: u64 = 3;

fn explain(r: &Report) -> String {
    let mut s = format!(
        "seed {} failed; replay: {}\n",
        r.seed,
        r.config.replay_line(r.seed)
    );
    for v in &r.violations {
        s.push_str(&format!(
            "  {} at {:.3}s: {}\n",
            v.invariant,
            v.at.as_secs_f64(),
            v.detail
        ));
    }
    for line in &r.trace {
        s.push_str(&format!("  {line}\n"));
    }
    s
}

#[test]
fn s1_default_seeds_hold_every_invariant() {
    let mut calls = 0;
    let mut deadlines = 0;
    let mut replayed = 0;
    let mut fanout = 0;
    let mut silences = 0;
    let mut total = zmesh_sim::truth::Stats::default();
    for seed in 0..SEEDS {
        let r = run(seed, &Config::for_seed(seed, MINUTES));
        assert!(r.passed(), "{}", explain(&r));
        calls += r.stats.calls;
        deadlines += r.stats.deadlines;
        replayed += r.stats.replayed;
        fanout += r.stats.fanout_records;
        silences += r.stats.silences;
        total.add(&r.stats);
    }
    // Bursts of calls leave as BATCH and CALLS records, and their answers leave packed.
    assert!(total.batches_sent > 1_000, "{total:?}");
    assert!(total.calls_records_sent > 1_000, "{total:?}");
    assert!(total.answers_packed > 1_000, "{total:?}");
    // Floods and healed partitions leave more on one connection than a rotation reads of it.
    assert!(total.floods > 100, "{total:?}");
    assert!(total.count_cap_turns > 100, "{total:?}");
    // The faults bite: links time out, guarded retries are answered from the record.
    assert!(calls > 100_000, "only {calls} calls in the default set");
    assert!(
        deadlines > 500,
        "only {deadlines} deadlines in the default set"
    );
    assert!(replayed > 1_000, "only {replayed} replayed guarded calls");
    assert!(fanout > 100_000, "only {fanout} fanout records");
    assert!(silences > 50, "only {silences} publisher silences");
    // Late records of connections their acceptors forgot arrive as stale first records
    // (`stale_records_refused`), graceful stops race new dials (`no_admission_while_draining`),
    // new runs' descriptors replace ready connections (`replaced_run_leaves_ready`).
    assert!(total.stale_first_records > 100, "{total:?}");
    assert!(total.draining_refusals > 20, "{total:?}");
    assert!(total.discovery_replacements > 50, "{total:?}");
}

#[test]
fn s1_a_seed_replays_exactly() {
    for seed in [7, 1234, 1235] {
        let mut cfg = Config::for_seed(seed, 2);
        // The run as it was kept: no bursts of calls, no receive loop, no store (SIMULATION.md).
        cfg.batches = false;
        cfg.receive_loop = false;
        cfg.discovery = false;
        cfg.streams = false;
        cfg.full_trace = true;
        let a = run(seed, &cfg);
        let b = run(seed, &cfg);
        assert!(a.steps > 1_000, "seed {seed}: only {} steps", a.steps);
        assert!(
            a.trace.len() > 10,
            "seed {seed}: a trace of {} lines",
            a.trace.len()
        );
        assert_eq!(
            a.trace, b.trace,
            "seed {seed} did not replay event for event"
        );
        assert_eq!(a.steps, b.steps);
        assert_eq!(format!("{:?}", a.stats), format!("{:?}", b.stats));
    }
}

#[test]
fn s1_k5_r2_a_seed_with_batches_and_the_receive_loop_replays_exactly() {
    for seed in [1234, 1235] {
        let mut cfg = Config::for_seed(seed, 2);
        // As it was kept: no store (SIMULATION.md).
        cfg.discovery = false;
        cfg.streams = false;
        cfg.full_trace = true;
        let a = run(seed, &cfg);
        let b = run(seed, &cfg);
        assert!(a.stats.bursts > 0, "seed {seed}: no burst of calls");
        assert!(a.stats.rotations > 0, "seed {seed}: no rotation");
        assert_eq!(
            a.trace, b.trace,
            "seed {seed} did not replay event for event"
        );
        assert_eq!(format!("{:?}", a.stats), format!("{:?}", b.stats));
    }
}

#[test]
fn s1_without_faults_no_link_ever_leaves_ready_and_no_call_is_lost_with_its_connection() {
    for (seed, topology) in [(1, Topology::RouteMesh), (2, Topology::ClientServer)] {
        let mut cfg = Config::for_seed(seed, 2);
        // The run as it was kept: no bursts of calls, no receive loop, no store (SIMULATION.md).
        cfg.batches = false;
        cfg.receive_loop = false;
        cfg.discovery = false;
        cfg.streams = false;
        cfg.topology = topology;
        cfg.nodes = 5;
        cfg.faults = false;
        let r = run(seed, &cfg);
        assert!(r.passed(), "{}", explain(&r));
        assert_eq!(
            r.stats.deadlines, 0,
            "a link timed out on a fault-free network"
        );
        assert!(r.stats.ok > 100, "{:?}", r.stats);
        assert_eq!(r.stats.lost_with_connection, 0, "{:?}", r.stats);
    }
}

#[test]
fn s1_t3_fanout_without_faults_never_goes_silent_and_delivers_in_order() {
    let mut cfg = Config::for_seed(4, 2);
    // The run as it was kept: no bursts of calls, no receive loop, no store (SIMULATION.md).
    cfg.batches = false;
    cfg.receive_loop = false;
    cfg.discovery = false;
    cfg.streams = false;
    cfg.topology = Topology::Fanout;
    cfg.nodes = 6;
    cfg.faults = false;
    let r = run(4, &cfg);
    assert!(r.passed(), "{}", explain(&r));
    assert_eq!(
        r.stats.silences, 0,
        "a publisher went silent on a fault-free network"
    );
    assert!(r.stats.fanout_records > 1_000, "{:?}", r.stats);
}

#[test]
fn s1_two_hundred_nodes_run() {
    let mut cfg = Config::for_seed(3, 1);
    // The run as it was kept (no bursts of calls, no receive loop, no streams, no
    // failovers: a successor run would publish a descriptor of its own), now with every node
    // publishing its descriptor and dialling what the store says.
    cfg.batches = false;
    cfg.receive_loop = false;
    cfg.discovery = true;
    cfg.streams = false;
    cfg.zombies = false;
    cfg.nodes = 200;
    cfg.topology = Topology::ClientServer;
    cfg.duration = Duration::from_secs(30);
    let r = run(3, &cfg);
    assert!(r.passed(), "{}", explain(&r));
    assert!(r.stats.readies >= 150, "{:?}", r.stats);
    assert_eq!(
        r.stats.store_puts, 200,
        "every node published: {:?}",
        r.stats
    );
    assert!(r.stats.discovery_dials >= 150, "{:?}", r.stats);
}

#[test]
fn s1_d1_two_hundred_fanout_nodes_find_their_publishers_in_the_store() {
    let mut cfg = Config::for_seed(3, 1);
    cfg.discovery = true;
    cfg.nodes = 200;
    cfg.topology = Topology::Fanout;
    cfg.duration = Duration::from_secs(15);
    let r = run(3, &cfg);
    assert!(r.passed(), "{}", explain(&r));
    assert!(r.stats.discovery_subscriptions >= 150, "{:?}", r.stats);
    assert!(r.stats.fanout_records > 1_000, "{:?}", r.stats);
}

#[test]
fn s1_x1_cancellation_holds_on_mixed_meshes() {
    // Call topologies only, half of the hosts speaking version 1: cancels go out as CANCEL
    // between capable nodes and stay local toward version-1 ones.
    let total = call_meshes(10_000..10_200, 1, |cfg| {
        // The run as it was kept: no bursts of calls, no receive loop, no store (SIMULATION.md).
        cfg.batches = false;
        cfg.receive_loop = false;
        cfg.discovery = false;
        cfg.streams = false;
        cfg.version1 = 50;
    });
    // Cancellation happened in every form it takes.
    assert!(total.cancels > 1_000, "{total:?}");
    assert!(total.cancelled_unsent > 100, "{total:?}");
    assert!(total.cancelled_sent > 100, "{total:?}");
    assert!(total.cancels_sent > 100, "{total:?}");
    assert!(total.cancels_kept_local > 100, "{total:?}");
    assert!(total.cancels_to_queued > 10, "{total:?}");
    assert!(total.cancels_to_running > 10, "{total:?}");
    assert!(total.queries_stopped > 10, "{total:?}");
}

#[test]
fn s1_d1_d3_f3_f5_discovery_through_the_store_holds_on_call_meshes() {
    // Automatic mode on every seed: descriptors published into the simulated store under
    // leases, peers learnt through the library's directory, store outages among the faults.
    let total = discovering_call_meshes(20_000..20_000 + DISCOVERY_SEEDS, 2);
    assert!(total.store_outages > 30, "{total:?}");
    assert!(total.leases_expired > 10, "{total:?}");
    assert!(total.discovery_dials > 1_000, "{total:?}");
}

#[test]
fn s1_d1_t3_fanout_subscribers_learn_their_publishers_from_the_store() {
    // Fanout in automatic mode: publishers name their PUB endpoint in their descriptors,
    // subscribers open one SUB socket per publisher the store names (T3), a new run of a
    // publisher replaces its socket, a descriptor gone retires it; kills, partitions and
    // store outages among the faults.
    let mut total = zmesh_sim::truth::Stats::default();
    for seed in 25_000..25_000 + FANOUT_DISCOVERY_SEEDS {
        let mut cfg = Config::for_seed(seed, 2);
        cfg.discovery = true;
        cfg.topology = Topology::Fanout;
        let r = run(seed, &cfg);
        assert!(r.passed(), "{}", explain(&r));
        total.add(&r.stats);
    }
    eprintln!("{total:?}");
    assert!(total.store_outages > 10, "{total:?}");
    assert!(total.discovery_subscriptions > 100, "{total:?}");
    // Restarted publishers: a subscriber's ready watch closed for the new run's socket.
    assert!(total.discovery_replacements > 0, "{total:?}");
    assert!(total.fanout_records > 10_000, "{total:?}");
    assert_eq!(total.discovery_dials, 0, "a fanout node dialled: {total:?}");
}

#[test]
fn s1_d1_t3_fanout_through_the_store_without_faults_reaches_every_subscriber() {
    let mut cfg = Config::for_seed(7, 2);
    cfg.discovery = true;
    cfg.topology = Topology::Fanout;
    cfg.nodes = 6;
    cfg.faults = false;
    let r = run(7, &cfg);
    assert!(r.passed(), "{}", explain(&r));
    assert_eq!(
        r.stats.silences, 0,
        "a publisher went silent on a fault-free network"
    );
    // Every subscriber subscribed to every publisher once (its first reload), and no more.
    let (publishers, subscribers) = (r.servers as u64, (cfg.nodes - r.servers) as u64);
    assert!(
        publishers >= 1 && subscribers >= 1,
        "{publishers} {subscribers}"
    );
    assert_eq!(
        r.stats.discovery_subscriptions,
        publishers * subscribers,
        "{:?}",
        r.stats
    );
    assert!(r.stats.fanout_records > 1_000, "{:?}", r.stats);
}

/// Seeds of the fanout automatic-mode set.
const FANOUT_DISCOVERY_SEEDS: u64 = 30;

#[test]
fn s1_d1_a_seed_with_the_store_replays_exactly() {
    for (seed, topology) in [
        (1234, Topology::RouteMesh),
        (1235, Topology::ClientServer),
        (1236, Topology::Fanout),
    ] {
        let mut cfg = Config::for_seed(seed, 2);
        cfg.discovery = true;
        cfg.streams = false;
        cfg.topology = topology;
        cfg.full_trace = true;
        let a = run(seed, &cfg);
        let b = run(seed, &cfg);
        assert!(a.stats.store_puts > 0, "seed {seed}: nothing published");
        assert_eq!(
            a.trace, b.trace,
            "seed {seed} did not replay event for event"
        );
        assert_eq!(format!("{:?}", a.stats), format!("{:?}", b.stats));
    }
}

/// Runs `seeds` as RouteMesh (even seeds) and ClientServer (odd) meshes, `minutes` of
/// faults each, with each seed's configuration changed by `tweak`; every seed must hold
/// every invariant. Returns their figures together.
fn call_meshes(
    seeds: std::ops::Range<u64>,
    minutes: u64,
    tweak: impl Fn(&mut Config),
) -> zmesh_sim::truth::Stats {
    let mut total = zmesh_sim::truth::Stats::default();
    for seed in seeds {
        let mut cfg = Config::for_seed(seed, minutes);
        cfg.topology = if seed % 2 == 0 {
            Topology::RouteMesh
        } else {
            Topology::ClientServer
        };
        tweak(&mut cfg);
        let r = run(seed, &cfg);
        assert!(r.passed(), "{}", explain(&r));
        total.add(&r.stats);
    }
    eprintln!("{total:?}");
    total
}

/// [`call_meshes`] that discover through the store (failovers among their faults), without
/// stream calls.
fn discovering_call_meshes(seeds: std::ops::Range<u64>, minutes: u64) -> zmesh_sim::truth::Stats {
    call_meshes(seeds, minutes, |cfg| {
        cfg.discovery = true;
        cfg.streams = false;
    })
}

/// Seeds of the automatic-mode set.
const DISCOVERY_SEEDS: u64 = 60;

#[test]
fn s1_c1_streams_arrive_in_order_within_their_windows() {
    // Stream calls on every seed: ITEMs then the REPLY, CREDIT windows where `credit` is in
    // effect (and not toward version-1 hosts), a fifth of the streams cancelled, a quarter
    // of them taken by a slow consumer.
    let total = call_meshes(30_000..30_000 + STREAM_SEEDS, 2, |cfg| {
        cfg.streams = true;
        cfg.discovery = false;
    });
    // Streams longer than a window waited for CREDIT, and were granted it.
    assert!(total.streams > 1_000, "{total:?}");
    assert!(total.credits_sent > 50, "{total:?}");
    assert!(total.windows_closed > 0, "{total:?}");
    // Slow consumers held items back, and their streams still held every invariant.
    assert!(total.slow_streams > 250, "{total:?}");
    assert!(total.slow_items > 1_000, "{total:?}");
}

/// Seeds of the stream set.
const STREAM_SEEDS: u64 = 40;

/// Seed 3653 of the long run (`zmesh sim --seeds 10000`): a host's watch resumed after a
/// store outage and replayed the changes it missed one by one, among them the descriptor of
/// a peer's run that had started and stopped during the outage; applying it fenced out the
/// peer's next run, already admitted, and closed its ready links
/// (`discovery_keeps_ready_links`). Kept as it was found: the default configuration of the
/// seed, which the long run uses.
#[test]
fn s1_d1_f3_a_resumed_watch_backlog_never_fences_out_the_admitted_run() {
    let cfg = Config::for_seed(3653, MINUTES);
    assert!(cfg.discovery, "the seed runs automatic mode");
    let r = run(3653, &cfg);
    assert!(r.passed(), "{}", explain(&r));
}

/// Seeds of the failover set.
const FAILOVER_SEEDS: u64 = 40;

#[test]
fn s1_f3_f4_a_paused_run_beside_its_successor_never_beats_the_fence() {
    // A third of the freezes of a discovering call mesh are failovers: the run pauses, a
    // successor of its RID starts with a new generation, and the paused run comes back
    // beside it until the store tells it it was superseded (or it is killed). Its peers may
    // admit it only while their watch names no run of that RID; with the descriptor of the
    // successor delivered, its HELLOs and WELCOMEs are refused (MISSION F3, F4).
    let total = discovering_call_meshes(40_000..40_000 + FAILOVER_SEEDS, 3);
    // Measured: 9 failovers, all 9 back beside their successor, 8 of them ended by the
    // store's answer; 169 fence refusals.
    assert!(total.zombies_back >= 5, "{total:?}");
    assert!(total.zombies_superseded >= 4, "{total:?}");
    assert!(total.fence_refusals > 50, "{total:?}");
}

#[test]
fn s1_a_run_without_zombies_draws_what_it_drew_before_them() {
    // `--no-zombies` replays the faults of a discovering call mesh as they were drawn
    // before failovers existed: no run pauses beside a successor. Seed 40 002 draws a
    // failover with them on, so the switch is what keeps it out.
    let seed = 40_002;
    let mut cfg = Config::for_seed(seed, 2);
    cfg.discovery = true;
    cfg.streams = false;
    cfg.topology = Topology::RouteMesh;
    let with = run(seed, &cfg);
    assert!(with.passed(), "{}", explain(&with));
    assert!(with.stats.zombies > 0, "{:?}", with.stats);
    cfg.zombies = false;
    let without = run(seed, &cfg);
    assert!(without.passed(), "{}", explain(&without));
    assert_eq!(without.stats.zombies, 0, "{:?}", without.stats);
    assert!(without.stats.store_puts > 0, "{:?}", without.stats);
    assert_ne!(with.trace, without.trace);
}
