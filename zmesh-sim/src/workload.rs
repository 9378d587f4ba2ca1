//! The workload: calls of every semantics (guarded retries among them), bursts of calls,
//! stream calls, one-way messages, floods and fanout publishing, and the draws behind them.

use std::time::Duration;

use rand::Rng;

use crate::net::NodeIx;
use crate::node;
use crate::truth::CallKind;
use crate::{Event, World};

impl World {
    /// One unit of workload: a call of some semantics, a retry of a guarded call, or a
    /// message.
    pub(crate) fn work(&mut self) {
        // Publishers publish now and then; every second one only beacons (an idle publisher
        // is kept alive by its beacons alone).
        let publishers: Vec<NodeIx> = (0..self.n())
            .filter(|&i| self.specs[i].publishes && i % 2 == 0 && self.up(i))
            .collect();
        if !publishers.is_empty() && self.rng.random_bool(0.7) {
            let who = publishers[self.rng.random_range(0..publishers.len())];
            let uid = self.next_uid;
            self.next_uid += 1;
            let burst = self.rng.random_range(1..=20);
            self.ctx_node(who, |node, ctx| {
                for k in 0..burst {
                    node.publish(ctx, uid * 100 + k);
                }
            });
            return;
        }
        // Callers: every RouteMesh node; the clients of ClientServer (servers dial nobody).
        let callers: Vec<NodeIx> = (0..self.n())
            .filter(|&i| !self.specs[i].dials.is_empty())
            .collect();
        if callers.is_empty() {
            return;
        }
        let who = callers[self.rng.random_range(0..callers.len())];
        if !self.up(who) {
            return;
        }
        if self.cfg.receive_loop && self.rng.random_bool(0.005) {
            self.flood(who);
            return;
        }
        if self.cfg.batches && self.rng.random_bool(0.08) {
            self.burst(who);
            return;
        }
        if self.cfg.streams && self.rng.random_bool(0.1) {
            self.stream(who);
            return;
        }
        let uid = self.next_uid;
        self.next_uid += 1;
        let pick = self.rng.random_range(0..100);
        if pick < 20 {
            self.truth.on_send(uid);
            self.ctx_node(who, |node, ctx| {
                node.send_message(ctx, uid);
            });
            return;
        }
        let kind = self.draw_kind(uid, pick);
        let ttl = self.draw_ttl();
        self.truth.on_call(uid, kind.clone(), self.end_of(who));
        let at_once = self.draw_cancel(who, uid);
        self.ctx_node(who, |node, ctx| {
            node.start_call(ctx, uid, &kind, ttl, at_once);
        });
    }

    /// A burst: 2 to 12 calls (now and then 65 to 100, which the caller cuts into several
    /// records) that `who`'s application makes in one turn, so that they leave for one
    /// server together, as BATCH and, where `calls` is in effect, CALLS records. In half of
    /// the bursts every call shares semantics and ttl (one CALLS run where negotiated); in
    /// the others each is drawn as a lone call is. Every call is still cancelled, retried and
    /// checked on its own.
    pub(crate) fn burst(&mut self, who: NodeIx) {
        let n = if self.rng.random_bool(0.05) {
            self.rng.random_range(65..=100)
        } else {
            self.rng.random_range(2..=12)
        };
        let uniform = self.rng.random_bool(0.5);
        let mut shared = None;
        let mut calls = Vec::with_capacity(n);
        for _ in 0..n {
            let uid = self.next_uid;
            self.next_uid += 1;
            let (kind, ttl) = match &shared {
                Some((kind, ttl)) if uniform => (self.same_kind(kind, uid), *ttl),
                _ => {
                    let pick = self.rng.random_range(20..100);
                    let kind = self.draw_kind(uid, pick);
                    let ttl = self.draw_ttl();
                    shared = Some((kind.clone(), ttl));
                    (kind, ttl)
                }
            };
            self.truth.on_call(uid, kind.clone(), self.end_of(who));
            let at_once = self.draw_cancel(who, uid);
            calls.push(node::Burst {
                uid,
                kind,
                ttl,
                cancel_at_once: at_once,
            });
        }
        self.truth.stats.bursts += 1;
        self.ctx_node(who, |node, ctx| node.start_calls(ctx, calls));
    }

    /// A stream call: its handler produces 1 to 40 items, in 5 % of the streams 1 100 to
    /// 1 600 (more than one window, so that CREDIT matters where `credit` is in effect); in
    /// a quarter of them the application is a slow consumer.
    pub(crate) fn stream(&mut self, who: NodeIx) {
        let uid = self.next_uid;
        self.next_uid += 1;
        let total = if self.rng.random_bool(0.05) {
            self.rng.random_range(1_100..=1_600)
        } else {
            self.rng.random_range(1..=40)
        };
        self.truth.on_call(uid, CallKind::Query, self.end_of(who));
        self.truth.on_stream(uid, total);
        let ttl = self.draw_ttl();
        let at_once = self.draw_cancel(who, uid);
        // A quarter of the applications are slow consumers: one item per 0.5 to 20 ms.
        let pace = self
            .rng
            .random_bool(0.25)
            .then(|| Duration::from_micros(self.rng.random_range(500..=20_000)));
        if pace.is_some() {
            self.truth.stats.slow_streams += 1;
        }
        self.ctx_node(who, |node, ctx| {
            node.start_stream(ctx, uid, ttl, at_once, pace);
        });
    }

    /// A call of the same semantics as `kind` (a guarded one with a key of its own, drawn as
    /// [`Self::draw_kind`] draws keys).
    pub(crate) fn same_kind(&mut self, kind: &CallKind, uid: u64) -> CallKind {
        match kind {
            CallKind::Guarded(_) => self.draw_kind(uid, 99),
            other => other.clone(),
        }
    }

    /// The semantics `pick` (20..100) stands for; a guarded command gets a fresh key, or in
    /// 40 % of the cases a retry of an earlier key (as a caller does after "may have run").
    pub(crate) fn draw_kind(&mut self, uid: u64, pick: u32) -> CallKind {
        match pick {
            20..=39 => CallKind::Query,
            40..=54 => CallKind::Idempotent,
            55..=64 => CallKind::Command,
            _ => {
                if !self.keys.is_empty() && self.rng.random_bool(0.4) {
                    let i = self.rng.random_range(0..self.keys.len());
                    CallKind::Guarded(self.keys[i].0.clone())
                } else {
                    let k = format!("k{uid}");
                    self.keys.push((k.clone(), uid));
                    CallKind::Guarded(k)
                }
            }
        }
    }

    /// A ttl of 50 ms to 5 s for 30 % of the calls.
    pub(crate) fn draw_ttl(&mut self) -> Option<Duration> {
        self.rng
            .random_bool(0.3)
            .then(|| Duration::from_millis(self.rng.random_range(50..5_000)))
    }

    /// Whether the application cancels call `uid` of `who`: a fifth of the calls, a quarter
    /// of those in the turn they are made (true: before the REQUEST leaves), the others a
    /// while later (scheduled here), often soon enough to find the call waiting in its
    /// callee's queue.
    pub(crate) fn draw_cancel(&mut self, who: NodeIx, uid: u64) -> bool {
        let cancel = self.rng.random_bool(0.2);
        let at_once = cancel && self.rng.random_bool(0.25);
        if cancel && !at_once {
            let within = if self.rng.random_bool(0.5) {
                300
            } else {
                5_000
            };
            let later = Duration::from_millis(self.rng.random_range(0..within));
            let run = self.hosts[who].0;
            self.at(
                self.now + later,
                Event::Cancel {
                    node: who,
                    run,
                    uid,
                },
            );
        }
        at_once
    }

    /// A flooding peer: `who` sends 100 to 300 one-way messages on one connection at once,
    /// more than one rotation of the receiver's loop reads of one connection.
    pub(crate) fn flood(&mut self, who: NodeIx) {
        let n = self.rng.random_range(100..=300);
        self.truth.stats.floods += 1;
        for _ in 0..n {
            let uid = self.next_uid;
            self.next_uid += 1;
            self.truth.on_send(uid);
            self.ctx_node(who, |node, ctx| {
                node.send_message(ctx, uid);
            });
        }
    }
}
