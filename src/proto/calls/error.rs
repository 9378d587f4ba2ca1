//! [`CallError`]: how a call failed, and what that says about whether it ran (MISSION C3, K6).

use std::fmt;

use crate::proto::wire::ReplyCode;

/// How far a call that was sent got before the connection carrying it left ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The request was handed to the transport; no ACCEPT had arrived. The callee may have
    /// received it, sent its ACCEPT and dispatched it, with the ACCEPT lost with the connection.
    Sent,
    /// The callee's ACCEPT had arrived on the connection the request went out on: the callee
    /// took the call and dispatched it, or was about to.
    Accepted,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Sent => "sent, not accepted",
            Phase::Accepted => "accepted",
        })
    }
}

/// The code of a REPLY that reports an error (every wire [`ReplyCode`] except `Ok`),
/// MISSION K6.
///
/// The call table turns two of these into dedicated [`CallError`] variants, because the
/// caller knows more about them than the code says: a REPLY `Timeout` becomes
/// [`CallError::Timeout`] `{ refused_by_server: true }` and a REPLY `Unavailable` becomes
/// [`CallError::Unavailable`] (see [`CallError::from_reply`]). [`RemoteCode::Timeout`] and
/// [`RemoteCode::Unavailable`] exist so that the mapping from the wire is total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemoteCode {
    /// The exposed method raised an error. It ran.
    Exception,
    /// The service exists but does not expose that method. It did not run.
    MethodNotFound,
    /// Nothing is exposed under that name. It did not run.
    ClassNotFound,
    /// The callee's runtime has no target for the call. It did not run.
    NotFound,
    /// The arguments do not match the method (also: every call of a BATCH over the
    /// receiver's limit, MISSION K5). It did not run.
    InvalidParams,
    /// The caller is not authenticated. It did not run.
    Unauthorized,
    /// The caller may not make this call. It did not run.
    Forbidden,
    /// The caller's contract cannot be served by the callee's. It did not run.
    IncompatibleVersion,
    /// The callee's mailbox was full; the call was refused, not queued (MISSION K4). It did
    /// not run.
    Busy,
    /// A newer conflated call replaced this one while it waited in its queue (MISSION K4).
    /// It did not run.
    Superseded,
    /// The callee does not know whether the call's effect happened (for example a gateway
    /// whose own downstream call was lost). It may have run.
    UnknownOutcome,
    /// The callee refused to run the call because its ttl ran out before dispatch. It did not
    /// run (the serve side never lets a handler send this code, see
    /// [`super::ServeTable::handle_done`]).
    Timeout,
    /// The callee reports that a request of its own never left: it certainly did not run.
    TransportError,
    /// The callee is stopping. Without knowing whether it had accepted the call this says
    /// nothing certain, so: may have run.
    Unavailable,
}

impl RemoteCode {
    /// The error code of a REPLY, or `None` for `Ok`.
    pub fn from_reply(code: ReplyCode) -> Option<Self> {
        Some(match code {
            ReplyCode::Ok => return None,
            ReplyCode::Exception => RemoteCode::Exception,
            ReplyCode::MethodNotFound => RemoteCode::MethodNotFound,
            ReplyCode::ClassNotFound => RemoteCode::ClassNotFound,
            ReplyCode::Timeout => RemoteCode::Timeout,
            ReplyCode::TransportError => RemoteCode::TransportError,
            ReplyCode::Unauthorized => RemoteCode::Unauthorized,
            ReplyCode::Forbidden => RemoteCode::Forbidden,
            ReplyCode::InvalidParams => RemoteCode::InvalidParams,
            ReplyCode::IncompatibleVersion => RemoteCode::IncompatibleVersion,
            ReplyCode::UnknownOutcome => RemoteCode::UnknownOutcome,
            ReplyCode::Busy => RemoteCode::Busy,
            ReplyCode::Superseded => RemoteCode::Superseded,
            ReplyCode::NotFound => RemoteCode::NotFound,
            ReplyCode::Unavailable => RemoteCode::Unavailable,
        })
    }

    /// The wire code this remote code travels as.
    pub fn to_reply(self) -> ReplyCode {
        match self {
            RemoteCode::Exception => ReplyCode::Exception,
            RemoteCode::MethodNotFound => ReplyCode::MethodNotFound,
            RemoteCode::ClassNotFound => ReplyCode::ClassNotFound,
            RemoteCode::NotFound => ReplyCode::NotFound,
            RemoteCode::InvalidParams => ReplyCode::InvalidParams,
            RemoteCode::Unauthorized => ReplyCode::Unauthorized,
            RemoteCode::Forbidden => ReplyCode::Forbidden,
            RemoteCode::IncompatibleVersion => ReplyCode::IncompatibleVersion,
            RemoteCode::Busy => ReplyCode::Busy,
            RemoteCode::Superseded => ReplyCode::Superseded,
            RemoteCode::UnknownOutcome => ReplyCode::UnknownOutcome,
            RemoteCode::Timeout => ReplyCode::Timeout,
            RemoteCode::TransportError => ReplyCode::TransportError,
            RemoteCode::Unavailable => ReplyCode::Unavailable,
        }
    }

    /// The K6 code string (`"MethodNotFound"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            RemoteCode::Exception => "Exception",
            RemoteCode::MethodNotFound => "MethodNotFound",
            RemoteCode::ClassNotFound => "ClassNotFound",
            RemoteCode::NotFound => "NotFound",
            RemoteCode::InvalidParams => "InvalidParams",
            RemoteCode::Unauthorized => "Unauthorized",
            RemoteCode::Forbidden => "Forbidden",
            RemoteCode::IncompatibleVersion => "IncompatibleVersion",
            RemoteCode::Busy => "Busy",
            RemoteCode::Superseded => "Superseded",
            RemoteCode::UnknownOutcome => "UnknownOutcome",
            RemoteCode::Timeout => "Timeout",
            RemoteCode::TransportError => "TransportError",
            RemoteCode::Unavailable => "Unavailable",
        }
    }

    /// Whether a handler may answer with this code (MISSION K6): the
    /// allow-list `Exception`, `Unauthorized`, `Forbidden`, `InvalidParams`,
    /// `IncompatibleVersion`, `ClassNotFound`, `MethodNotFound`, `TransportError`, `Timeout`,
    /// `UnknownOutcome`. `Busy`, `Superseded`, `NotFound` and `Unavailable` are the runtime's
    /// own: each states something about the runtime (its mailbox, its queue, its routing, its
    /// stop) that a handler cannot know, so a handler that returns one answers `Exception`.
    /// (`Timeout` from a handler is sent as `UnknownOutcome`: on the wire `Timeout` means
    /// "refused before dispatch", see [`super::ServeTable::handle_done`].)
    pub fn handler_may_choose(self) -> bool {
        match self {
            RemoteCode::Exception
            | RemoteCode::Unauthorized
            | RemoteCode::Forbidden
            | RemoteCode::InvalidParams
            | RemoteCode::IncompatibleVersion
            | RemoteCode::ClassNotFound
            | RemoteCode::MethodNotFound
            | RemoteCode::TransportError
            | RemoteCode::Timeout
            | RemoteCode::UnknownOutcome => true,
            RemoteCode::Busy
            | RemoteCode::Superseded
            | RemoteCode::NotFound
            | RemoteCode::Unavailable => false,
        }
    }

    /// Whether a call answered with this code may have run (the "It ..." sentence of each
    /// variant).
    pub fn may_have_run(self) -> bool {
        match self {
            RemoteCode::Exception | RemoteCode::UnknownOutcome | RemoteCode::Unavailable => true,
            RemoteCode::MethodNotFound
            | RemoteCode::ClassNotFound
            | RemoteCode::NotFound
            | RemoteCode::InvalidParams
            | RemoteCode::Unauthorized
            | RemoteCode::Forbidden
            | RemoteCode::IncompatibleVersion
            | RemoteCode::Busy
            | RemoteCode::Superseded
            | RemoteCode::Timeout
            | RemoteCode::TransportError => false,
        }
    }
}

impl fmt::Display for RemoteCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a call failed, and whether it may have run (MISSION C1-C4, C6, K6).
///
/// Every variant answers one question for the caller: *could the call's effect have
/// happened?* [`may_have_run`] answers it from the variant and its fields alone, so every
/// screen, log and registry classifies a failure the same way. "May have run" is the answer
/// whenever the table cannot prove the callee never started the method: a caller of a
/// non-repeatable command treats it as ambiguous and checks before sending it again. The
/// table never resubmits a call itself (MISSION C1).
///
/// | variant | meaning | may have run | code |
/// |---|---|---|---|
/// | `NoRegistration` | nothing serves that channel or method; the call was never sent | no | `NotFound` |
/// | `NoReadyPeer` | something serves it, but no connection to it is ready; never sent | no | `Unavailable` |
/// | `TransportRefused` | the link could not take the frame now (pipe full, peer unreachable, or its connection left ready before the frame was handed over); never sent, never queued | no | `TransportError` |
/// | `OutcomeUnknown { phase: Sent }` | sent; the connection left ready before any ACCEPT | **yes** | `UnknownOutcome` |
/// | `OutcomeUnknown { phase: Accepted }` | accepted; the connection that accepted it left ready before the REPLY (the lease failed, MISSION C2) | **yes** | `UnknownOutcome` |
/// | `Timeout { refused_by_server: false }` | the caller's own deadline (its ttl) passed | **yes** | `Timeout` |
/// | `Timeout { refused_by_server: true }` | the callee refused it: its ttl ran out before dispatch, also while waiting in a queue (MISSION C6) | no | `Timeout` |
/// | `Cancelled { sent: false }` | the caller cancelled it before the frame was handed over | no | `Cancelled` |
/// | `Cancelled { sent: true }` | the caller cancelled it after; a callee that speaks CANCEL is told, but it may have run | **yes** | `Cancelled` |
/// | `Shutdown { sent: false }` | the local node shut down before the frame was handed over | no | `Unavailable` |
/// | `Shutdown { sent: true }` | the local node shut down while the call was out | **yes** | `Unavailable` |
/// | `Unavailable { accepted: false }` | the callee refused it because it is stopping (draining, MISSION C4) | no | `Unavailable` |
/// | `Unavailable { accepted: true }` | the callee stopped with the call in hand: a stream it was producing ended, or the drain bound passed | **yes** | `Unavailable` |
/// | `ItemOutOfOrder { .. }` | a stream item arrived with a sequence number other than the next one; the stream is broken | **yes** | `UnknownOutcome` |
/// | `StreamOverrun { .. }` | the caller's stream buffer was full (the application did not take items); the stream ended and the callee was told | **yes** | `UnknownOutcome` |
/// | `InvalidArgument { .. }` | the call could not be encoded (argument serialisation, channel or method name length); never sent | no | `InvalidParams` |
/// | `UndecodableResult { .. }` | the callee ran the call and answered `Ok` (or sent a stream item), but the answer does not decode as the type the caller asked for | **yes** | `UndecodableResult` |
/// | `Remote { code, .. }` | the callee answered with an error code and message | per code: **yes** for `Exception`, `UnknownOutcome`, `Unavailable`; no for `MethodNotFound`, `ClassNotFound`, `NotFound`, `InvalidParams`, `Unauthorized`, `Forbidden`, `IncompatibleVersion`, `Busy`, `Superseded`, `Timeout`, `TransportError` | the code's name |
///
/// A REPLY proves the callee's view, so its refusals are "did not run": the callee sends
/// ACCEPT before it dispatches (WIRE.md §5.3), refuses a draining arrival without an ACCEPT,
/// and answers an expired ttl with `Timeout` instead of running. `Cancelled` and
/// `UndecodableResult` are the codes that are not in the K6 list: both are facts only the
/// caller knows (a cancellation, an answer it cannot read) and never travel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No registration serves the channel or method: rejected at send, never sent.
    #[error("nothing serves this channel or method; the call was never sent")]
    NoRegistration,
    /// Registrations exist but no connection to any of them is ready: never sent.
    #[error("no ready peer serves this channel; the call was never sent")]
    NoReadyPeer,
    /// The link could not take the frame now (pipe full, peer unreachable, or the connection
    /// left ready before the frame was handed over). A frame is never queued on a link that
    /// cannot send now (MISSION C3): the call was never sent.
    #[error("the link could not take the request now; the call was never sent")]
    TransportRefused,
    /// The request was sent, and the connection carrying it left ready before the terminal
    /// REPLY. The call may have run (MISSION C2).
    #[error("the connection left ready before the reply (call {phase}); it may have run")]
    OutcomeUnknown {
        /// Whether the callee's ACCEPT had arrived.
        phase: Phase,
    },
    /// The call's deadline passed.
    #[error("{}", if *refused_by_server {
        "the callee refused the call: its ttl ran out before dispatch; it did not run"
    } else {
        "the call's deadline passed; it may have run"
    })]
    Timeout {
        /// `true` when the callee answered REPLY `Timeout`: it refused to run the call because
        /// its ttl ran out before dispatch, which proves the call did not run. `false` when
        /// the caller's own timer fired: the call may have run.
        refused_by_server: bool,
    },
    /// The caller cancelled the call (its future or stream was dropped, or cancelled). A callee
    /// that negotiated CANCEL is told; it may have run the call if the request had left.
    #[error("the call was cancelled{}", if *sent { " after it was sent; it may have run" } else { " before it was sent" })]
    Cancelled {
        /// Whether the request had been handed to the transport.
        sent: bool,
    },
    /// The local node is shutting down.
    #[error("the local node is shutting down{}", if *sent { "; the call was out and may have run" } else { "; the call was never sent" })]
    Shutdown {
        /// Whether the request had been handed to the transport.
        sent: bool,
    },
    /// The callee answered REPLY `Unavailable`: it is stopping (MISSION C4).
    #[error("{}", if *accepted {
        "the callee stopped with the call in hand; it may have run"
    } else {
        "the callee is stopping and refused the call; it did not run"
    })]
    Unavailable {
        /// Whether the callee had ACCEPTed the call. `false`: it refused a new call while
        /// draining, without dispatching it. `true`: it stopped while the call was in hand (a
        /// stream it was producing, or a call still running when the drain bound passed).
        accepted: bool,
    },
    /// The call could not be built (arguments that do not serialise, a channel or method name
    /// outside 1..=255 bytes); it was never sent.
    #[error("invalid call argument: {reason}")]
    InvalidArgument {
        /// What was wrong.
        reason: String,
    },
    /// The callee answered, but this caller cannot read the answer: a REPLY `Ok` payload (or a
    /// stream item) that does not decode as the type asked for, from MessagePack. The callee
    /// dispatched the method and reported success, so the call ran; only its value is lost.
    /// Retrying a non-repeatable command because of it would run it again. For a stream item,
    /// the error is that item's only: the stream goes on.
    #[error("the callee ran the call and answered, but the answer does not decode: {reason}")]
    UndecodableResult {
        /// Why the answer could not be read (the decoder's message).
        reason: String,
    },
    /// The caller's buffer of stream items was full: the application did not take them as
    /// fast as the callee produced them, and an item arrived with no room for it. The stream
    /// ends at once (a shortened stream is never passed off as a whole one), the callee is
    /// told (CANCEL, where negotiated), and the items that were buffered can still be taken.
    /// The callee was producing items, so the call ran.
    #[error("the stream's buffer of {buffered} items was full: the stream ended; it may have run")]
    StreamOverrun {
        /// How many items the buffer held.
        buffered: usize,
    },
    /// A stream item arrived out of order (a gap or a repeat); the stream is broken and the
    /// call ends at once. The callee was producing items, so the call ran.
    #[error("stream item {got} arrived where item {expected} was due; the stream is broken")]
    ItemOutOfOrder {
        /// The sequence number due next.
        expected: u64,
        /// The sequence number that arrived.
        got: u64,
    },
    /// The callee answered with an error code (MISSION K6).
    #[error("the callee answered {code}: {message}")]
    Remote {
        /// The REPLY's code.
        code: RemoteCode,
        /// The REPLY's message (its payload as UTF-8, invalid sequences replaced).
        message: String,
    },
}

impl CallError {
    /// The error for a REPLY carrying `code` (not `Ok`) and `message`, for a call whose ACCEPT
    /// had (`accepted`) or had not arrived. `None` for `Ok`.
    ///
    /// `Timeout` becomes [`CallError::Timeout`] `{ refused_by_server: true }`, `Unavailable`
    /// becomes [`CallError::Unavailable`] `{ accepted }`, every other code
    /// [`CallError::Remote`].
    pub fn from_reply(code: ReplyCode, message: &[u8], accepted: bool) -> Option<Self> {
        Some(match RemoteCode::from_reply(code)? {
            RemoteCode::Timeout => CallError::Timeout {
                refused_by_server: true,
            },
            RemoteCode::Unavailable => CallError::Unavailable { accepted },
            code => CallError::Remote {
                code,
                message: String::from_utf8_lossy(message).into_owned(),
            },
        })
    }

    /// Whether the call may have run; see [`may_have_run`].
    pub fn may_have_run(&self) -> bool {
        may_have_run(self)
    }

    /// The error code string (MISSION K6), as in the table on [`CallError`]: one of the K6
    /// codes, `"Cancelled"` for a local cancellation, or `"UndecodableResult"` for an answer
    /// the caller cannot read.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::NoRegistration => "NotFound",
            CallError::NoReadyPeer | CallError::Shutdown { .. } | CallError::Unavailable { .. } => {
                "Unavailable"
            }
            CallError::TransportRefused => "TransportError",
            CallError::InvalidArgument { .. } => "InvalidParams",
            CallError::OutcomeUnknown { .. }
            | CallError::ItemOutOfOrder { .. }
            | CallError::StreamOverrun { .. } => "UnknownOutcome",
            CallError::Timeout { .. } => "Timeout",
            CallError::Cancelled { .. } => "Cancelled",
            CallError::UndecodableResult { .. } => "UndecodableResult",
            CallError::Remote { code, .. } => code.name(),
        }
    }
}

/// Whether a call that failed with `err` may have run (MISSION C3), decided from the variant
/// and its fields alone; the table on [`CallError`] lists every case.
///
/// `false` is a proof: the request never left this node, or the callee's answer says it did
/// not dispatch the method. `true` means the caller cannot rule the effect out.
pub fn may_have_run(err: &CallError) -> bool {
    match err {
        CallError::NoRegistration
        | CallError::NoReadyPeer
        | CallError::TransportRefused
        | CallError::InvalidArgument { .. } => false,
        CallError::OutcomeUnknown { .. }
        | CallError::ItemOutOfOrder { .. }
        | CallError::StreamOverrun { .. }
        | CallError::UndecodableResult { .. } => true,
        CallError::Timeout { refused_by_server } => !refused_by_server,
        CallError::Cancelled { sent } | CallError::Shutdown { sent } => *sent,
        CallError::Unavailable { accepted } => *accepted,
        CallError::Remote { code, .. } => code.may_have_run(),
    }
}
