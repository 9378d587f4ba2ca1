//! Calls: reply correlation, leases, deadlines and graceful stop (MISSION C1-C6, seeds 000,
//! 002 §6, 003).
//!
//! | machine | side | keeps | tells the shell |
//! |---|---|---|---|
//! | [`CallTable`] | caller, one per node | every pending call: its connection, state, deadline, stream position | each call's one completion ([`CallTable::poll_completion`]), stream items in order ([`CallTable::poll_item`]) |
//! | [`ServeTable`] | callee, one per node | every accepted call: its connection, ttl, shape, whether it runs | whether to ACCEPT, run or refuse; the REPLYs it decides itself ([`ServeTable::poll_transmit`]); the end of a drain |
//!
//! ```text
//!   caller                                   callee
//!   CallTable::start ── REQUEST (ttl) ──>    ServeTable::handle_request ── Accept
//!   handle_sent                              (ACCEPT before dispatch)
//!   handle_accept  <──── ACCEPT ──────────   handle_dispatch ── Run | Refuse(Timeout)
//!   handle_item    <──── ITEM 0, 1, .. ───   handle_item (numbers them)
//!   handle_reply   <──── REPLY ───────────   handle_done (the one REPLY)
//! ```
//!
//! # What a failure says
//!
//! A failed call ends with a [`CallError`] whose variant and fields alone say whether it may
//! have run ([`may_have_run`], MISSION C3); the table on [`CallError`] is the reference.
//! "Did not run" is only claimed with proof: the frame never left this node, or the callee's
//! answer says it never dispatched the method.
//!
//! # No timeout is needed (MISSION C2)
//!
//! A call is a lease on the connection that accepted it: when that connection leaves ready,
//! its calls fail at once ([`CallTable::handle_connection_lost`]). A call without a ttl has no
//! timer at all and may legitimately take hours. The ttl exists for callers that want to
//! bound their wait; it travels as a duration and the callee refuses a call whose ttl ran out
//! before dispatch (MISSION C6).
//!
//! # Determinism
//!
//! Nothing here reads a clock, sends or sleeps: inputs carry `now`, outputs are polled, and
//! `poll_timeout()` says when to come back. The same inputs in the same order give the same
//! outputs; bulk failures (a lost connection, a shutdown, a drain) are reported in id order.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod batch;
mod caller;
mod error;
mod exec;
mod serve;

pub use caller::{
    ttl_on_wire, CallId, CallState, CallStats, CallTable, Completion, Disposition, StreamItem,
    Unrouted, REFUSAL_MARGIN,
};
pub use error::{may_have_run, CallError, Phase, RemoteCode};
pub use exec::{Arrival, ExecQueues, ExecStats, DEFAULT_MAILBOX};
pub use serve::{
    Admission, CallShape, Cancelled, Dispatch, DrainReport, ServeId, ServeReply, ServeStats,
    ServeTable, CREDIT_STEP, STREAM_WINDOW,
};

#[cfg(test)]
mod tests;
