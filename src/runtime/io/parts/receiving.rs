//! The receive side's own state: the one fair scheduler over every socket and peer (MISSION
//! R1-R3) and whether its last rotation left work that socket readiness cannot show.
//! Running a rotation is the thread's (`io/receive.rs`).

use super::sockets::{Staged, Unit};
use crate::proto::sched::ReceiveScheduler;

/// The scheduler and what the last rotation left (see the module docs).
pub(crate) struct Receiving {
    /// The one fair receive scheduler over every socket and peer (MISSION R1-R3).
    pub(crate) sched: ReceiveScheduler<Unit, Staged>,
    /// The last receive rotation left work that socket readiness cannot show (records
    /// staged, a rotation cut by its time cap): wait without sleeping, and run a rotation
    /// even if no socket is readable.
    pub(crate) busy: bool,
    /// The records of a turn the rotation takes from the scheduler together (a PACK's),
    /// reused from turn to turn (`io/receive.rs`, `on_turn`).
    pub(crate) taken: Vec<Staged>,
}

impl Receiving {
    /// A scheduler in readiness mode: a rotation visits the units with work only (the
    /// readable set is handed over at the start of each rotation).
    pub(crate) fn new() -> Receiving {
        Receiving {
            sched: ReceiveScheduler::new().with_readiness(),
            busy: false,
            taken: Vec::new(),
        }
    }
}
