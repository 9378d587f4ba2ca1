//! Discovery, sans-IO (MISSION D1, D3, F3, T3, T4): node descriptors, what a set of
//! descriptors means for this node's links, and the owner lease.
//!
//! ```text
//!  Store (runtime::store)          this module                      I/O thread
//!  reload / delta of  ---------->  Directory: diff the set  ------>  Intent: dial peer X at
//!  descriptors                     (T4 skip, fences, T3)             E with fence F, stop
//!                                                                     dialling Y, one SUB
//!                                                                     socket per publisher
//!  put / renew / remove <--------  LeaseKeeper: when to renew,
//!  results              -------->  lease held / lost, age
//! ```
//!
//! - [`descriptor`]: the [`Descriptor`] a node publishes and its versioned JSON form.
//! - [`directory`]: the [`Directory`] of known descriptors, which turns a full reload or a
//!   delta into [`Intent`]s for the I/O thread, and never asks for a connection the pair does
//!   not need (an Object Client pair without a Server membership: T4).
//! - [`lease`]: the [`LeaseKeeper`], the owner lease's renewal schedule and verdicts
//!   ([`LEASE_TTL`], [`LEASE_RENEW_INTERVAL`]); it never looks at transport liveness and
//!   transport liveness never looks at it (F5).
//!
//! Like everything under [`crate::proto`], nothing here reads a clock or touches a store:
//! times arrive as `now`, store answers arrive as arguments.

pub mod descriptor;
pub mod directory;
pub mod lease;

pub use descriptor::{Descriptor, DescriptorError, MeshEndpoints, DESCRIPTOR_FORMAT};
pub use directory::{Directory, Intent, Local};
pub use lease::{
    LeaseEvent, LeaseKeeper, LeaseStatus, LostReason, RenewOutcome, StoreOp, LEASE_RENEW_INTERVAL,
    LEASE_TTL, STORE_RETRY,
};
