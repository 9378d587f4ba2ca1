//! Micro-benchmarks of the fair receive scheduler (`zmesh::proto::sched`): whole rotations
//! of `poll_action` / `handle_read` / `handle_would_block` over N units, the way the I/O
//! thread drives it, with in-memory queues standing in for sockets. Throughput is in records
//! handed out. Run with `cargo bench --bench sched`.
//!
//! - `single/N/k`: N single-peer units (dialled sockets, SUB sockets), k records waiting in
//!   each; k = 1 is the light-traffic case where the per-unit cost dominates, k = 64 a full
//!   turn (the count cap) per unit.
//! - `shared/N/k`: one bound ROUTER with N peers behind it, k records each, arriving
//!   interleaved as libzmq's fair queue hands them out; read phases stage, peer turns deliver.
//! - `idle/N`: a rotation over N units with nothing to read (what every loop turn of an idle
//!   node pays), in turns.

use std::collections::VecDeque;
use std::time::Instant;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use zmesh::proto::sched::{Action, ReadTarget, ReceiveScheduler, SharedSocketId, Source};

/// A record: its bytes do not matter to the scheduler, only its length.
type Rec = u32;
const LEN: usize = 64;

fn single(n: u32) -> ReceiveScheduler<u32, Rec> {
    let mut s = ReceiveScheduler::new();
    for u in 0..n {
        s.add_unit(u, Source::Single).expect("fresh unit");
    }
    s
}

/// Runs rotations until every waiting record was handed out; returns records handed out.
fn drain_single(s: &mut ReceiveScheduler<u32, Rec>, waiting: &mut [u32]) -> u64 {
    let mut delivered = 0;
    loop {
        match s.poll_action(Instant::now()) {
            Action::Deliver { record, .. } => {
                black_box(record);
                delivered += 1;
            }
            Action::Read(req) => {
                let ReadTarget::Unit(u) = req.target() else {
                    s.handle_would_block(req);
                    continue;
                };
                match waiting.get_mut(u as usize) {
                    Some(left) if *left > 0 => {
                        *left -= 1;
                        if s.handle_read(req, u, *left, LEN).is_err() {
                            unreachable!("single unit refused its own record");
                        }
                    }
                    _ => s.handle_would_block(req),
                }
            }
            Action::Yield(end) => {
                if end.is_idle() {
                    return delivered;
                }
            }
        }
    }
}

fn shared(n: u32) -> (ReceiveScheduler<u32, Rec>, SharedSocketId) {
    let mut s = ReceiveScheduler::new();
    let sid = s.add_shared_socket();
    for u in 0..n {
        s.add_unit(u, Source::Shared(sid)).expect("fresh unit");
    }
    (s, sid)
}

/// Like [`drain_single`] for one shared socket whose records arrive in `arrivals` order.
fn drain_shared(s: &mut ReceiveScheduler<u32, Rec>, arrivals: &mut VecDeque<u32>) -> u64 {
    let mut delivered = 0;
    loop {
        match s.poll_action(Instant::now()) {
            Action::Deliver { record, .. } => {
                black_box(record);
                delivered += 1;
            }
            Action::Read(req) => match arrivals.pop_front() {
                Some(owner) => {
                    if s.handle_read(req, owner, owner, LEN).is_err() {
                        unreachable!("peer refused behind its own socket");
                    }
                }
                None => s.handle_would_block(req),
            },
            Action::Yield(end) => {
                if end.is_idle() {
                    return delivered;
                }
            }
        }
    }
}

fn sched(c: &mut Criterion) {
    let mut g = c.benchmark_group("sched");
    for n in [16u32, 256, 1024] {
        for k in [1u32, 64] {
            g.throughput(Throughput::Elements(u64::from(n * k)));
            let mut s = single(n);
            g.bench_with_input(BenchmarkId::new(format!("single/{n}"), k), &k, |b, &k| {
                b.iter(|| {
                    let mut waiting = vec![k; n as usize];
                    drain_single(&mut s, &mut waiting)
                })
            });
            let (mut s, _sid) = shared(n);
            g.bench_with_input(BenchmarkId::new(format!("shared/{n}"), k), &k, |b, &k| {
                b.iter(|| {
                    // libzmq's fair queue: one record per peer with data, in turn.
                    let mut arrivals: VecDeque<u32> = (0..k).flat_map(|_| 0..n).collect();
                    drain_shared(&mut s, &mut arrivals)
                })
            });
        }
        g.throughput(Throughput::Elements(u64::from(n)));
        let mut s = single(n);
        g.bench_function(BenchmarkId::new("idle", n), |b| {
            b.iter(|| drain_single(&mut s, &mut []))
        });
    }
    g.finish();
}

criterion_group!(benches, sched);
criterion_main!(benches);
