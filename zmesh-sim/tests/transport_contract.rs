//! The transport contract (`tests/transport/contract.rs` at the repository root) against the
//! simulated network ([`zmesh_sim::transport`]). A wait runs one round of the network per
//! look; when a round moves nothing the clock jumps to the next timer, and when there is
//! none either (nothing can change any more) or [`ROUNDS`] rounds have passed, the wait
//! fails.

use zmesh_sim::transport::{SimNet, SimReady, SimTransport};

#[path = "../../tests/transport/contract.rs"]
#[macro_use]
mod contract;

/// The most rounds one wait runs.
const ROUNDS: usize = 100_000;

struct Sim {
    net: SimNet,
    transport: SimTransport,
    endpoints: u32,
    rounds: usize,
}

impl Sim {
    fn new() -> Sim {
        let net = SimNet::new();
        Sim {
            transport: net.transport(),
            net,
            endpoints: 0,
            rounds: 0,
        }
    }
}

impl contract::Harness for Sim {
    type T = SimTransport;

    fn transport(&mut self) -> &mut SimTransport {
        &mut self.transport
    }

    fn wildcard(&self) -> String {
        "tcp://127.0.0.1:*".to_owned()
    }

    fn unbound(&mut self) -> String {
        self.endpoints += 1;
        format!("ipc://sim/ep{}", self.endpoints)
    }

    fn start_wait(&mut self) {
        self.rounds = 0;
    }

    fn pump(&mut self, _watch: &[SimReady]) -> bool {
        self.rounds += 1;
        if self.rounds > ROUNDS {
            return false;
        }
        if self.net.deliver() > 0 {
            return true;
        }
        match self.net.next_timer() {
            Some(at) => {
                self.net.advance(at.saturating_sub(self.net.now()));
                true
            }
            None => false,
        }
    }
}

transport_contract!(Sim::new());
