//! R4 scenarios: one flooder, quiet peers with a liveness record every 5 s.

use std::time::{Duration, Instant};

use zmesh::proto::sched::{Caps, ROTATION_TIME_CAP, STAGING_RECORD_BOUND};

use super::{Sim, UnitId, YIELD_COST};

const LIVENESS_INTERVAL: Duration = Duration::from_secs(5);
const PEER_DEADLINE: Duration = Duration::from_secs(15);

struct LivenessRun {
    checked: usize,
    worst_rotations: u64,
    worst_latency: Duration,
    flooded: u64,
}

/// Runs 60 s of simulated time: `flooder` keeps an endless queue of 1 KiB records (15 us of
/// processing each), every unit in `quiet` sends a 64-byte liveness record (5 us) every 5 s,
/// staggered. Returns the worst latency of a liveness record, in rotations and in time.
fn run_liveness(sim: &mut Sim, flooder: UnitId, quiet: &[UnitId]) -> LivenessRun {
    let t0 = sim.now;
    let mut next_due: Vec<Instant> = (0..quiet.len())
        .map(|i| t0 + LIVENESS_INTERVAL * (i as u32 + 1) / (quiet.len() as u32 + 1))
        .collect();
    let mut sent = 0;
    let mut run = LivenessRun {
        checked: 0,
        worst_rotations: 0,
        worst_latency: Duration::ZERO,
        flooded: 0,
    };
    let end = t0 + Duration::from_secs(60);
    while sim.now < end {
        for (i, unit) in quiet.iter().enumerate() {
            if next_due[i] <= sim.now {
                sim.send(*unit, 1, 64);
                sent += 1;
                next_due[i] += LIVENESS_INTERVAL;
            }
        }
        if sim.on_socket(flooder) < 1_000 {
            sim.send(flooder, 1_000, 1024);
        }
        let _ = sim.step();
        if let Some(d) = sim.last_delivery.take() {
            if d.unit == flooder {
                run.flooded += 1;
            } else if quiet.contains(&d.unit) {
                run.worst_rotations = run.worst_rotations.max(d.rotations_waited);
                run.worst_latency = run.worst_latency.max(d.latency);
                run.checked += 1;
            }
        }
    }
    assert_eq!(run.checked, sent, "every liveness record was processed");
    run
}

fn assert_liveness_bound(run: &LivenessRun, quiet: usize, sim: &Sim) {
    // 60 s / 5 s = 12 liveness records per quiet unit.
    assert_eq!(run.checked, 12 * quiet);
    // Processed in the rotation it was pending in, or the next.
    assert!(
        run.worst_rotations <= 1,
        "worst {} rotations",
        run.worst_rotations
    );
    // Two rotations, each at most the rotation cap plus one action, plus the yield between.
    let bound = 2 * (ROTATION_TIME_CAP + sim.max_cost + YIELD_COST);
    assert!(
        run.worst_latency <= bound,
        "worst latency {:?}",
        run.worst_latency
    );
    assert!(run.worst_latency * 1000 < PEER_DEADLINE);
    // The flood really was a flood: tens of thousands of rotations at 64 records or 1 ms.
    assert!(run.flooded > 1_000_000, "flooded only {}", run.flooded);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

/// MISSION R4: a peer flooding its own DEALER never delays the others' liveness records:
/// each is processed in the rotation it was pending in or the next, far below 15 s.
#[test]
fn r4_flood_on_a_single_socket_never_delays_liveness() {
    let t0 = Instant::now();
    let mut sim = Sim::new(Caps::default(), t0);
    let flooder = sim.add_single(Duration::from_micros(15));
    let mut quiet = vec![sim.add_single(Duration::from_micros(5))];
    let router = sim.add_socket();
    for _ in 0..3 {
        quiet.push(sim.add_peer(router, Duration::from_micros(5)));
    }
    quiet.push(sim.add_single(Duration::from_micros(5)));
    let run = run_liveness(&mut sim, flooder, &quiet);
    assert_liveness_bound(&run, quiet.len(), &sim);
}

/// MISSION R3/R4: a peer flooding a shared ROUTER never delays the liveness records of the
/// other peers behind the same ROUTER (or of other sockets) beyond the next rotation.
#[test]
fn r4_flood_behind_a_shared_router_never_delays_liveness() {
    let t0 = Instant::now();
    let mut sim = Sim::new(Caps::default(), t0);
    let mut quiet = vec![sim.add_single(Duration::from_micros(5))];
    let router = sim.add_socket();
    quiet.push(sim.add_peer(router, Duration::from_micros(5)));
    let flooder = sim.add_peer(router, Duration::from_micros(15));
    quiet.push(sim.add_peer(router, Duration::from_micros(5)));
    quiet.push(sim.add_single(Duration::from_micros(5)));
    let run = run_liveness(&mut sim, flooder, &quiet);
    assert_liveness_bound(&run, quiet.len(), &sim);
    let staged_peak = sim.sched.unit_stats(flooder).map_or(0, |s| s.staged_peak);
    assert!(staged_peak <= STAGING_RECORD_BOUND);
}

/// MISSION R3: two peers flooding one shared ROUTER share it evenly, each on its own 64
/// records per rotation; a quiet third peer behind it is not pushed out.
#[test]
fn r3_two_flooders_behind_one_router_each_use_only_their_own_share() {
    let t0 = Instant::now();
    let mut sim = Sim::new(Caps::default(), t0);
    let router = sim.add_socket();
    let a = sim.add_peer(router, Duration::from_micros(2));
    let b = sim.add_peer(router, Duration::from_micros(2));
    let quiet = sim.add_peer(router, Duration::from_micros(2));
    sim.send(a, 5_000, 100);
    sim.send(b, 5_000, 100);
    let mut rotations = 0;
    while rotations < 40 {
        if sim.step().is_some() {
            rotations += 1;
        }
        if rotations == 20 && sim.unit(quiet).is_some_and(|st| st.sent == 0) {
            sim.send(quiet, 1, 64);
        }
    }
    let (sa, sb) = (
        sim.sched.unit_stats(a).unwrap_or_default(),
        sim.sched.unit_stats(b).unwrap_or_default(),
    );
    // About 64 each per rotation, neither more than 64, and within one turn of each other.
    assert!(sa.records <= 64 * 40 && sb.records <= 64 * 40);
    assert!(sa.records >= 60 * 39, "a got {}", sa.records);
    assert!(
        sa.records.abs_diff(sb.records) <= 64,
        "{} vs {}",
        sa.records,
        sb.records
    );
    assert_eq!(
        sim.unit(quiet).map(|st| st.next_expected),
        Some(2),
        "quiet record handed out"
    );
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}
