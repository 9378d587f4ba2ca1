//! zmesh: a node transport runtime over ZeroMQ sockets.
//!
//! zmesh gives a service three topologies over libzmq 4.3 (through the `zmq` crate):
//! RouteMesh (ROUTER-ROUTER, an Application and a Completion lane per peer pair),
//! ClientServer (DEALER-ROUTER, one lane) and Classic fanout (PUB/SUB, one SUB socket per
//! publisher). Liveness is exact and fixed: a probe every 5 s, a 15 s peer deadline, exact-byte
//! beacons on fanout.
//!
//! # Layout
//!
//! ```text
//!   application (async, tokio)
//!        |  commands / deliveries (crossbeam-channel)
//!   runtime: one I/O thread per node, one receive loop (epoll over every ZMQ_FD)
//!        |  bytes in, bytes out, `now`, socket events
//!   proto: sans-IO core (no clock reads, no sockets, no tasks)
//!        wire      byte-exact codec of WIRE.md
//!        liveness  probe tracker, publisher watch, beacon schedule
//!        state     connection states and failure reasons
//!        sched     fair receive scheduler (64 records / bytes / time caps)
//!        calls     reply correlation, leases, deadlines, graceful stop
//!        discovery descriptors, the intents a descriptor set implies, the owner lease
//!   runtime::store: descriptor stores (embedded SQLite, etcd v3) for automatic mode
//! ```
//!
//! Everything under [`proto`] is deterministic: it takes `now: Instant` as an input and reports
//! the next instant it wants to be woken at, so the 5 s / 15 s rules are tested with a manual
//! clock in milliseconds of real time.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod display_time;
mod durable_time;
pub mod proto;
pub mod runtime;

/// Compiles the README's example as a doctest, so the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
