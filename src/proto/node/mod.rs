//! The node core: the parts of a node's protocol state and decisions, each owning its own
//! behind a narrow interface, none of them touching a socket, a clock or a task (the
//! determinism contract of [`crate::proto`]). A shell holds them and moves records between
//! them and its connections: the runtime's I/O thread over libzmq sockets, and the simulator
//! (the workspace crate `zmesh-sim`) over its simulated network, which so checks these
//! decisions themselves rather than a copy of them.
//!
//! Public, for any shell:
//!
//! - [`callee`]: the calls this node serves (the serve table, the execution queues, the
//!   waiting calls, the dispatch decisions, the answers decided, the stream items waiting
//!   for a window); the shell answers the questions about its served channels.
//! - [`admit`]: admission's decisions about the node's own peers (MISSION T1, F3): what it
//!   expects of a node it dials or that dials it, and what an admitted HELLO stands down.
//! - [`discovered`]: what automatic mode added (MISSION D1, F3): descriptor fences, the
//!   links and subscriptions discovery made, and what each discovery intent does (a list of
//!   operations naming links by their `LinkKind` and subscriptions by their `SubKey`, both
//!   public for that, re-exported there); the shell answers for its configuration entries.
//!
//! The I/O thread's own parts (crate-private):
//!
//! - `core`: the node core, the node-wide parts below in one value (the links, the timer
//!   table, the admission tables, discovery's additions, the liveness table, the routes,
//!   the fanout subscriptions), and, in their order, the handshake's decisions (HELLO, an
//!   unadmitted connection's first record, WELCOME, the step to ready), a link's failure
//!   with its connection's close, and the bound sockets' disconnect sweeps, over `Shell`,
//!   what the core asks of its shell (sends, the receive units, the counters, the calls,
//!   the send queues, the application, closing a dialled socket). Its file `core/fanout.rs`
//!   holds classic fanout's decisions (a message read from a subscription, judged by its
//!   watch and delivered; a PUBPACK's records; the watch's verdicts; a subscription's
//!   failure, refusal and opening) over `FanoutShell` (delivering a record, a
//!   subscription's state, closing a SUB socket). Its file `core/receive.rs` holds the
//!   receive path's decisions over `ReceiveShell` (the frames it reads, the ACKs, calls
//!   served, answers, deliveries): where a record read goes (a link's record, libzmq's
//!   connection notices, a refused or unadmitted connection, a replaced connection's late
//!   record), what a link's record does in its connection's state (decoded with the
//!   capabilities it negotiated; a malformed one a protocol error of that link only), and
//!   a PACK's records delivered and counted as a run. Its file `core/gate.rs`
//!   holds the bound sockets' gate's decisions in order (a ZAP request's verdict, after its
//!   socket's monitor is read; a bound socket's monitor events; the publisher's refused
//!   input; a refusal counted under its reason and remembered) over `GateShell` (whether a
//!   socket is still bound, reading its monitor, the cap, an endpoint, the refusal counter).
//!   Its file `core/snapshot.rs` decides which links and subscriptions a snapshot lists, in
//!   which order and with what of each (history of a lane and removed intents left out, the
//!   count limit), as a listing the shell maps into its snapshot. Its file
//!   `core/exhaustion.rs` decides what running out of descriptors does: a link's or
//!   subscription's `resource_exhausted` failure (a state event on the episode's first
//!   only), another socket error's retry, and when an episode's one warning is logged.
//!   Its file `core/calls.rs` holds the calls' decisions over `CallShell` (the call table
//!   beside the core, the hand-offs to the caller's and callee's parts): where a call goes
//!   (a named peer's two ready lanes,
//!   or a ready server round-robin), how a turn's REQUESTs share a message (MISSION K5),
//!   which calls a lost connection fails (MISSION C2), whether an answer has a call key,
//!   where a REQUEST's answers go and who sent it, where a CANCEL or CREDIT goes and how
//!   an answer leaves its route (only in the forms its connection negotiated), and the
//!   timer table's and the routes' sync with the links.
//! - `keys`: the typed handles of the node's tables (links, socket slots, subscriptions,
//!   calls) and the tables they index, one of them tracking what a turn touched.
//! - `link`: a link (a configured peer lane or server, or a peer's inbound connection)
//!   with its current connection, its own timings and what a failure does to it.
//! - `links`: the decisions about links beyond one link's timings: what a dial uses and the
//!   link's bookkeeping after it, what a failure does to the other links, withdrawal and
//!   refencing, what a disconnect sweep sends.
//! - `timers`: the timer table, every owner's earliest deadline in one order, and the
//!   bound sockets' disconnect sweeps.
//! - `live`: the liveness table with the owner of each entry (MISSION L8).
//! - `routes`: where calls go, an index over the links' routes.
//! - `answers`: the callee's answers on their way out, per link, packed into ANSWERS
//!   records where the connection negotiated them.
//! - `caller`: this node's calls (the call table, pending calls by the application's
//!   token, the REQUESTs of a turn and the messages they leave in, the server round-robin).
//! - `gate` and `accepting`: the bound sockets' gate (ZAP domains, open connections,
//!   the allow-list, recent refusals), the inbound connections admitted and the ones refused.
//! - `source`: who a delivered record came from, built once per connection.
//! - `monitor`: what a dialled or SUB socket's monitor event asks of the shell.
//! - `ready`: a link's step to ready (an admitted inbound connection, a handshake done).
//! - `received`: the receive path's classifications: where a record read goes (a link, a
//!   connection notice, admission), what a link's record is for in its connection's state,
//!   whether a PACK is staged as its records and how a PACK's or PUBPACK's records are
//!   charged to the caps, and what a run of MESSAGEs counts (`core::receive` acts on them).
//! - `sub`: a fanout subscription and what opening, refusing, failing and readying it does
//!   to its state, and what is read from it (a decoded message, a PUBPACK's staged record).

pub(crate) mod accepting;
pub mod admit;
pub(crate) mod answers;
pub mod callee;
pub(crate) mod caller;
pub(crate) mod core;
pub mod discovered;
pub(crate) mod gate;
pub(crate) mod keys;
pub(crate) mod link;
pub(crate) mod links;
pub(crate) mod live;
pub(crate) mod monitor;
pub(crate) mod ready;
pub(crate) mod received;
pub(crate) mod routes;
pub(crate) mod source;
pub(crate) mod sub;
pub(crate) mod timers;
