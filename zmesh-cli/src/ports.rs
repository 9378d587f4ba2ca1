//! Loopback ports for configurations that must name a port before anything binds it (the
//! bench's nodes (zmesh-bench), the demo's etcd, the integration tests; the bench and the
//! tests include this file).
//!
//! A port taken with `bind(127.0.0.1:0)` and released comes from the kernel's ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`), the range it also takes the source port of every
//! outgoing connection from. Between the release and the real bind, any connect on the
//! machine (a node re-dialling a peer that is not up yet does so every 100 ms) may take that
//! port, and the bind fails with "Address already in use". So these ports come from below the
//! ephemeral range, which the kernel never hands out by itself: a port is checked free by
//! binding it, and one process never hands out the same port twice (until the pool wraps).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// How many ports below the ephemeral range's start the pool holds (never below 1024).
const POOL: u16 = 12_000;

/// How many candidates one call tries before it gives up.
const TRIES: u32 = 1_000;

/// A free port on 127.0.0.1 outside the kernel's ephemeral range (see the module doc), or the
/// error of the last bind tried.
pub fn free_loopback_port() -> std::io::Result<u16> {
    let (start, len) = pool();
    if len == 0 {
        // No room below the ephemeral range: take one from the kernel.
        return TcpListener::bind("127.0.0.1:0")?
            .local_addr()
            .map(|a| a.port());
    }
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static SEED: OnceLock<u32> = OnceLock::new();
    // A different starting point per process, so that processes running at once seldom try
    // the same ports.
    let seed = *SEED.get_or_init(|| (RandomState::new().hash_one(std::process::id()) >> 32) as u32);
    let mut last = None;
    for _ in 0..TRIES {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = start + (seed.wrapping_add(n) % u32::from(len)) as u16;
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free loopback port")))
}

/// The pool's first port and length: the `POOL` ports below the ephemeral range's start.
pub fn pool() -> (u16, u16) {
    static POOL_RANGE: OnceLock<(u16, u16)> = OnceLock::new();
    *POOL_RANGE.get_or_init(|| {
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
            // Linux's default; elsewhere (no such file) the IANA dynamic range starts at 49152.
            .unwrap_or(if cfg!(target_os = "linux") {
                32_768
            } else {
                49_152
            });
        let start = low.saturating_sub(POOL).max(1_024);
        (start, low.saturating_sub(start))
    })
}
