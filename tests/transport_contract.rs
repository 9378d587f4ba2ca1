//! The transport contract (`tests/transport/contract.rs`) against libzmq: the node's own
//! socket factory ([`Sockets`]) over tcp on 127.0.0.1 (wildcard ports) and ipc in a
//! temporary directory. Every wait polls the watched sockets' descriptors for at most
//! 20 ms at a time and gives up after [`BOUND`].

use std::os::unix::io::RawFd;
use std::time::{Duration, Instant};

use zmesh::runtime::socket::Sockets;

#[path = "transport/contract.rs"]
#[macro_use]
mod contract;

/// The longest one wait lasts before the test fails: a bound, never a synchronisation.
const BOUND: Duration = Duration::from_secs(10);
/// The longest one poll lasts: a descriptor that fired is looked at sooner.
const POLL_MS: i64 = 20;

struct Zmq {
    sockets: Sockets,
    dir: tempfile::TempDir,
    endpoints: u32,
    deadline: Instant,
}

impl Zmq {
    fn new() -> Zmq {
        Zmq {
            sockets: Sockets::new(std::process::id().into()),
            dir: tempfile::tempdir().expect("a temporary directory"),
            endpoints: 0,
            deadline: Instant::now() + BOUND,
        }
    }
}

impl contract::Harness for Zmq {
    type T = Sockets;

    fn transport(&mut self) -> &mut Sockets {
        &mut self.sockets
    }

    fn wildcard(&self) -> String {
        "tcp://127.0.0.1:*".to_owned()
    }

    fn unbound(&mut self) -> String {
        self.endpoints += 1;
        format!("ipc://{}/ep{}", self.dir.path().display(), self.endpoints)
    }

    fn start_wait(&mut self) {
        self.deadline = Instant::now() + BOUND;
    }

    fn pump(&mut self, watch: &[RawFd]) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut items: Vec<zmq::PollItem<'_>> = watch
            .iter()
            .map(|&fd| zmq::PollItem::from_fd(fd, zmq::POLLIN))
            .collect();
        let ms = i64::try_from(left.as_millis())
            .unwrap_or(POLL_MS)
            .min(POLL_MS);
        zmq::poll(&mut items, ms.max(1)).expect("poll");
        true
    }
}

transport_contract!(Zmq::new());
