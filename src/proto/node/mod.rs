//! The node core's parts: the state one node keeps about its links, sockets, subscriptions,
//! timers and calls, each part owning its own behind a narrow interface, none of them
//! touching a socket, a clock or a task (the determinism contract of [`crate::proto`]). The
//! runtime's I/O thread holds them and moves records between them and its sockets.
//!
//! - [`keys`]: the typed handles of the node's tables (links, socket slots, subscriptions,
//!   calls) and the tables they index, one of them tracking what a turn touched.
//! - [`link`]: a link (a configured peer lane or server, or a peer's inbound connection)
//!   with its current connection, its own timings and what a failure does to it.
//! - [`timers`]: the timer table, every owner's earliest deadline in one order, and the
//!   bound sockets' disconnect sweeps.
//! - [`live`]: the liveness table with the owner of each entry (MISSION L8).
//! - [`routes`]: where calls go, an index over the links' routes.
//! - [`answers`]: the callee's answers on their way out, per link, packed into ANSWERS
//!   records where the connection negotiated them.
//! - [`callee`]: the calls this node serves (the serve table, the execution queues, the
//!   waiting calls, the dispatch decisions, the answers decided, the stream items waiting
//!   for a window); the shell answers the questions about its served channels.
//! - [`caller`]: this node's calls (the call table, pending calls by the application's
//!   token, the REQUESTs of a turn and the messages they leave in, the server round-robin).
//! - [`gate`] and [`accepting`]: the bound sockets' gate (ZAP domains, open connections,
//!   the allow-list, recent refusals), the inbound connections admitted and the ones refused.
//! - [`source`]: who a delivered record came from, built once per connection.
//! - [`discovered`]: what automatic mode added (MISSION D1, F3): descriptor fences, and the
//!   links and subscriptions discovery made.
//! - [`admit`]: admission's decisions about the node's own peers (MISSION T1, F3): what it
//!   expects of a node it dials or that dials it, and what an admitted HELLO stands down.

pub(crate) mod accepting;
pub(crate) mod admit;
pub(crate) mod answers;
pub(crate) mod callee;
pub(crate) mod caller;
pub(crate) mod discovered;
pub(crate) mod gate;
pub(crate) mod keys;
pub(crate) mod link;
pub(crate) mod live;
pub(crate) mod routes;
pub(crate) mod source;
pub(crate) mod timers;
