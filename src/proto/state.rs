//! Connection states, failure reasons and the per-link state machine behind snapshots
//! (MISSION O1, F1, T4).
//!
//! A *link* is one configured intent: a peer lane (RouteMesh Application or Completion lane,
//! or a ClientServer connection) or a fanout publisher. It outlives its physical connections:
//! each reconnect is a new connection (new [`crate::proto::ConnId`], new liveness tracker) but
//! the same [`LinkState`], which keeps the history a snapshot shows.
//!
//! Legal transitions ([`LinkState`] refuses every other one):
//!
//! ```text
//! configured    -> connecting | not_connected
//! connecting    -> admitted | ready (publisher only) | not_required (peer only)
//!                  | reconnecting | not_connected
//! admitted      -> ready | not_required (peer only) | reconnecting | not_connected
//! ready         -> reconnecting | not_connected
//! reconnecting  -> connecting | not_connected
//! not_connected -> connecting | not_connected (a later failure replaces the reason)
//! not_required  -> nothing, until a new configuration generation
//! configured | reconnecting | not_connected | not_required -> configured (reconfigure)
//! ```
//!
//! Like everything under [`crate::proto`], no clock is read: times arrive as `now`.

use std::fmt;
use std::time::Instant;

use serde::Serialize;

/// Where one configured link stands (MISSION O1). Serialized in snake_case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnState {
    /// The intent exists (configuration or descriptor); nothing was attempted yet.
    Configured,
    /// A transport connection is being established (peer) or the SUB socket is connecting
    /// (publisher).
    Connecting,
    /// The handshake admitted the peer (identity and generation verified); handlers are
    /// being prepared. For a publisher: the SUB socket is connected, nothing received yet.
    Admitted,
    /// A usable message target: records and calls may be sent on it.
    Ready,
    /// A failure ended the last connection and a new attempt is planned.
    Reconnecting,
    /// The pair needs no connection (RouteMesh Object Client pair without Server
    /// membership, MISSION T4). Terminal for the configuration generation; not a failure and
    /// excluded from liveness and health aggregation.
    NotRequired,
    /// A connection is needed but none is ready and no attempt is running.
    NotConnected,
}

impl ConnState {
    /// Stable snake_case name, as in snapshots.
    pub fn as_str(&self) -> &'static str {
        match self {
            ConnState::Configured => "configured",
            ConnState::Connecting => "connecting",
            ConnState::Admitted => "admitted",
            ConnState::Ready => "ready",
            ConnState::Reconnecting => "reconnecting",
            ConnState::NotRequired => "not_required",
            ConnState::NotConnected => "not_connected",
        }
    }
}

impl fmt::Display for ConnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a link stopped being ready or never became ready (MISSION F1: each cause is its own
/// variant, so an orderly close and an exceeded deadline are never confused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureReason {
    /// The peer closed the connection in an orderly way.
    OrderlyClose,
    /// A transport error or disconnect event.
    TransportError,
    /// No accepted ACK within 15 s (RouteMesh, ClientServer).
    DeadlineExceeded,
    /// No valid record or beacon within 15 s (fanout).
    FanoutSilence,
    /// Malformed input on the connection or socket.
    ProtocolError,
    /// The peer's RID or security identity did not match the expectation.
    IdentityMismatch,
    /// The peer's lifecycle generation did not match the current descriptor.
    GenerationMismatch,
    /// Security verification failed.
    SecurityFailure,
    /// The pair needs no connection (MISSION T4); recorded as the closing reason, not counted
    /// as a failure.
    NotRequired,
    /// A newer admitted connection replaced this one.
    Replaced,
    /// A duplicate connection of a RouteMesh pair went in duplicate resolution (MISSION T1):
    /// this dial stood down for the peer's own dial of the same lane, or (an inbound link)
    /// the peer stood down the dial it held while this node's own dial of the lane is ready
    /// or connecting. Not
    /// a failure: not counted in the link's failures; a dial that stood down only waits,
    /// dialling again only if the kept connection fails.
    StoodDown,
    /// The local host is draining and no longer selects new targets.
    HostDraining,
    /// The local host stopped.
    HostStopped,
    /// The local host is in Error.
    HostError,
    /// The link's configuration changed; the old connection was closed for the new intent.
    Reconfigured,
    /// The node could not open a socket for the link: the process's file descriptor limit,
    /// the system's file table or libzmq's socket limit (the detail names which, with the
    /// figures). Retried with the normal backoff.
    ResourceExhausted,
}

impl FailureReason {
    /// Stable snake_case name, as in snapshots and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureReason::OrderlyClose => "orderly_close",
            FailureReason::TransportError => "transport_error",
            FailureReason::DeadlineExceeded => "deadline_exceeded",
            FailureReason::FanoutSilence => "fanout_silence",
            FailureReason::ProtocolError => "protocol_error",
            FailureReason::IdentityMismatch => "identity_mismatch",
            FailureReason::GenerationMismatch => "generation_mismatch",
            FailureReason::SecurityFailure => "security_failure",
            FailureReason::NotRequired => "not_required",
            FailureReason::Replaced => "replaced",
            FailureReason::StoodDown => "stood_down",
            FailureReason::HostDraining => "host_draining",
            FailureReason::HostStopped => "host_stopped",
            FailureReason::HostError => "host_error",
            FailureReason::Reconfigured => "reconfigured",
            FailureReason::ResourceExhausted => "resource_exhausted",
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One recorded failure: why, when (monotonic) and a free-form detail for humans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The cause.
    pub reason: FailureReason,
    /// When it was observed.
    pub at: Instant,
    /// Human-readable detail (never parsed).
    pub detail: String,
}

impl Failure {
    /// A failure observed at `at`.
    pub fn new(reason: FailureReason, at: Instant, detail: impl Into<String>) -> Self {
        Self {
            reason,
            at,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.reason, self.detail)
        }
    }
}

/// What a link connects to; decides which transitions are legal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// A RouteMesh lane or a ClientServer connection: ready only after admission.
    Peer,
    /// A fanout publisher: no handshake, ready on the first valid record or beacon.
    Publisher,
}

/// What follows a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// A new connection attempt is planned: [`ConnState::Reconnecting`].
    Reconnect,
    /// No attempt now (host draining or stopped, or nothing to retry with):
    /// [`ConnState::NotConnected`].
    Hold,
}

/// A transition the link's state machine refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// `from -> to` is not a legal transition for this kind of link.
    #[error("illegal link transition {from} -> {to}")]
    Illegal {
        /// The current state.
        from: ConnState,
        /// The requested state.
        to: ConnState,
    },
    /// A not-required link is only re-checked for a new configuration generation.
    #[error("link is not_required for configuration generation {generation}")]
    NotRequiredForGeneration {
        /// The generation it was judged under.
        generation: u64,
    },
}

/// The state machine of one configured link, with the history a snapshot shows.
#[derive(Debug, Clone)]
pub struct LinkState {
    kind: LinkKind,
    state: ConnState,
    since: Instant,
    config_generation: u64,
    last_failure: Option<Failure>,
    last_receive_at: Option<Instant>,
    ready_at: Option<Instant>,
    transitions: u64,
    readies: u64,
    failures: u64,
}

impl LinkState {
    /// A link configured at `now` under configuration generation `config_generation`.
    pub fn new(kind: LinkKind, config_generation: u64, now: Instant) -> Self {
        Self {
            kind,
            state: ConnState::Configured,
            since: now,
            config_generation,
            last_failure: None,
            last_receive_at: None,
            ready_at: None,
            transitions: 0,
            readies: 0,
            failures: 0,
        }
    }

    fn is_legal(&self, to: ConnState) -> bool {
        use ConnState::*;
        let peer = self.kind == LinkKind::Peer;
        match (self.state, to) {
            (Configured | Reconnecting | NotConnected, Connecting) => true,
            (Connecting, Admitted) => true,
            (Admitted, Ready) => true,
            (Connecting, Ready) => !peer,
            (Connecting | Admitted, NotRequired) => peer,
            (Connecting | Admitted | Ready, Reconnecting) => true,
            // A dial that could not even open its socket: another attempt is planned.
            (Configured | Reconnecting | NotConnected, Reconnecting) => true,
            (
                Configured | Connecting | Admitted | Ready | Reconnecting | NotConnected,
                NotConnected,
            ) => true,
            _ => false,
        }
    }

    fn transition(&mut self, to: ConnState, now: Instant) -> Result<(), TransitionError> {
        if !self.is_legal(to) {
            return Err(TransitionError::Illegal {
                from: self.state,
                to,
            });
        }
        if self.state != to {
            self.transitions += 1;
            self.state = to;
            self.since = now;
        }
        Ok(())
    }

    /// A connection attempt starts (dial, or SUB socket created).
    pub fn handle_connecting(&mut self, now: Instant) -> Result<(), TransitionError> {
        self.transition(ConnState::Connecting, now)
    }

    /// The handshake admitted the peer, or the publisher's SUB socket connected.
    pub fn handle_admitted(&mut self, now: Instant) -> Result<(), TransitionError> {
        self.transition(ConnState::Admitted, now)
    }

    /// The link became ready. A peer must be admitted first; a publisher may become ready
    /// straight from connecting (its first record can precede any connect notification).
    pub fn handle_ready(&mut self, now: Instant) -> Result<(), TransitionError> {
        self.transition(ConnState::Ready, now)?;
        self.readies += 1;
        self.ready_at = Some(now);
        Ok(())
    }

    /// Handshake admission found that the pair needs no connection (MISSION T4). Terminal
    /// until [`Self::handle_reconfigure`] brings a new configuration generation. Recorded as
    /// the last failure with reason [`FailureReason::NotRequired`] so the snapshot says why,
    /// but not counted in [`Self::failures`].
    pub fn handle_not_required(
        &mut self,
        detail: impl Into<String>,
        now: Instant,
    ) -> Result<(), TransitionError> {
        self.transition(ConnState::NotRequired, now)?;
        self.last_failure = Some(Failure::new(FailureReason::NotRequired, now, detail));
        Ok(())
    }

    /// The current connection failed (or the link cannot be served) for `reason`; the link
    /// goes to [`ConnState::Reconnecting`] or [`ConnState::NotConnected`] per `recovery`.
    ///
    /// A failure takes effect at once whatever the reason (MISSION L6, F1). With reason
    /// [`FailureReason::NotRequired`] this is [`Self::handle_not_required`].
    pub fn handle_failure(
        &mut self,
        reason: FailureReason,
        detail: impl Into<String>,
        recovery: Recovery,
        now: Instant,
    ) -> Result<(), TransitionError> {
        if reason == FailureReason::NotRequired {
            return self.handle_not_required(detail, now);
        }
        let to = match recovery {
            Recovery::Reconnect => ConnState::Reconnecting,
            Recovery::Hold => ConnState::NotConnected,
        };
        self.transition(to, now)?;
        // A dial that stood down did not fail: its history keeps the last real failure.
        if reason != FailureReason::StoodDown {
            self.failures += 1;
            self.last_failure = Some(Failure::new(reason, now, detail));
        }
        Ok(())
    }

    /// A new configuration generation for this link arrived at `now`: back to
    /// [`ConnState::Configured`]. Only legal while no connection is live (configured,
    /// reconnecting, not connected, not required); close the connection with
    /// [`FailureReason::Reconfigured`] first. A not-required link accepts only a different
    /// generation (MISSION T4: no retry for the same configuration generation).
    pub fn handle_reconfigure(
        &mut self,
        config_generation: u64,
        now: Instant,
    ) -> Result<(), TransitionError> {
        match self.state {
            ConnState::NotRequired if config_generation == self.config_generation => {
                return Err(TransitionError::NotRequiredForGeneration {
                    generation: config_generation,
                })
            }
            ConnState::Configured
            | ConnState::Reconnecting
            | ConnState::NotConnected
            | ConnState::NotRequired => {}
            from => {
                return Err(TransitionError::Illegal {
                    from,
                    to: ConnState::Configured,
                })
            }
        }
        self.config_generation = config_generation;
        if self.state != ConnState::Configured {
            self.transitions += 1;
            self.state = ConnState::Configured;
            self.since = now;
        }
        Ok(())
    }

    /// Records that something arrived on the link at `now` (diagnostics only).
    pub fn handle_receive(&mut self, now: Instant) {
        self.last_receive_at = Some(now);
    }

    /// What the link connects to.
    pub fn kind(&self) -> LinkKind {
        self.kind
    }

    /// The current state.
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// Whether the link is a usable target now.
    pub fn is_ready(&self) -> bool {
        self.state == ConnState::Ready
    }

    /// When the current state was entered.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// The configuration generation the link is judged under.
    pub fn config_generation(&self) -> u64 {
        self.config_generation
    }

    /// The last failure (or not-required verdict), if any.
    pub fn last_failure(&self) -> Option<&Failure> {
        self.last_failure.as_ref()
    }

    /// When something last arrived on the link.
    pub fn last_receive_at(&self) -> Option<Instant> {
        self.last_receive_at
    }

    /// When the link last became ready.
    pub fn ready_at(&self) -> Option<Instant> {
        self.ready_at
    }

    /// State changes so far.
    pub fn transitions(&self) -> u64 {
        self.transitions
    }

    /// Times the link became ready.
    pub fn readies(&self) -> u64 {
        self.readies
    }

    /// Failures recorded (a not-required verdict is not one).
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// A read-only copy for monitoring, with instants turned into ages relative to `now`.
    pub fn snapshot(&self, now: Instant) -> LinkSnapshot {
        LinkSnapshot {
            kind: self.kind,
            state: self.state,
            config_generation: self.config_generation,
            state_age_ms: age_ms(self.since, now),
            last_failure: self.last_failure.as_ref().map(|f| FailureSnapshot {
                reason: f.reason,
                detail: f.detail.clone(),
                age_ms: age_ms(f.at, now),
            }),
            last_receive_age_ms: self.last_receive_at.map(|at| age_ms(at, now)),
            transitions: self.transitions,
            readies: self.readies,
            failures: self.failures,
        }
    }
}

fn age_ms(at: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX)
}

/// Serializable copy of a [`LinkState`] (MISSION O1). Ages are milliseconds of monotonic time
/// before the snapshot was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkSnapshot {
    /// What the link connects to.
    pub kind: LinkKind,
    /// The current state.
    pub state: ConnState,
    /// The configuration generation.
    pub config_generation: u64,
    /// Time in the current state.
    pub state_age_ms: u64,
    /// The last failure, if any.
    pub last_failure: Option<FailureSnapshot>,
    /// Time since something last arrived, if anything did.
    pub last_receive_age_ms: Option<u64>,
    /// State changes so far.
    pub transitions: u64,
    /// Times the link became ready.
    pub readies: u64,
    /// Failures recorded.
    pub failures: u64,
}

/// Serializable copy of a [`Failure`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureSnapshot {
    /// The cause.
    pub reason: FailureReason,
    /// Human-readable detail.
    pub detail: String,
    /// Time since it was observed.
    pub age_ms: u64,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A dial that cannot open its socket fails before any connection exists, on
    /// the first attempt and on later ones: the link is Reconnecting with the reason, and
    /// the next dial that opens its socket is Connecting as usual.
    #[test]
    fn a_dial_that_cannot_open_its_socket_is_reconnecting() {
        let t0 = Instant::now();
        let mut link = LinkState::new(LinkKind::Peer, 1, t0);
        for i in 1..=3 {
            assert_eq!(
                link.handle_failure(
                    FailureReason::ResourceExhausted,
                    "too many open files: 63 of 64",
                    Recovery::Reconnect,
                    t0 + s(i)
                ),
                Ok(())
            );
            assert_eq!(link.state(), ConnState::Reconnecting);
        }
        assert_eq!(link.failures(), 3);
        assert_eq!(
            link.last_failure().map(|f| f.reason),
            Some(FailureReason::ResourceExhausted)
        );
        assert_eq!(link.handle_connecting(t0 + s(4)), Ok(()));
        // Held links too (a refused dial, then a retry that cannot open its socket).
        let mut held = LinkState::new(LinkKind::Peer, 1, t0);
        let failed =
            held.handle_failure(FailureReason::SecurityFailure, "no key", Recovery::Hold, t0);
        assert_eq!(failed, Ok(()));
        let failed = held.handle_failure(
            FailureReason::ResourceExhausted,
            "too many open files: 63 of 64",
            Recovery::Reconnect,
            t0 + s(1),
        );
        assert_eq!(failed, Ok(()));
        assert_eq!(held.state(), ConnState::Reconnecting);
    }

    #[test]
    fn peer_lifecycle_with_reconnect() {
        let t0 = Instant::now();
        let mut link = LinkState::new(LinkKind::Peer, 1, t0);
        assert_eq!(link.handle_connecting(t0), Ok(()));
        assert_eq!(link.handle_admitted(t0 + s(1)), Ok(()));
        assert_eq!(link.handle_ready(t0 + s(1)), Ok(()));
        assert_eq!(
            link.handle_failure(
                FailureReason::DeadlineExceeded,
                "no ack",
                Recovery::Reconnect,
                t0 + s(16)
            ),
            Ok(())
        );
        assert_eq!(link.state(), ConnState::Reconnecting);
        assert_eq!(link.handle_connecting(t0 + s(17)), Ok(()));
        assert_eq!(link.handle_admitted(t0 + s(17)), Ok(()));
        assert_eq!(link.handle_ready(t0 + s(17)), Ok(()));
        assert_eq!(link.readies(), 2);
        assert_eq!(link.failures(), 1);
        assert_eq!(link.transitions(), 7);
        let failure = link.last_failure().cloned();
        assert_eq!(
            failure,
            Some(Failure::new(
                FailureReason::DeadlineExceeded,
                t0 + s(16),
                "no ack"
            ))
        );
    }

    #[test]
    fn rejects_peer_ready_without_admission() {
        let t0 = Instant::now();
        let mut link = LinkState::new(LinkKind::Peer, 1, t0);
        assert_eq!(link.handle_connecting(t0), Ok(()));
        assert_eq!(
            link.handle_ready(t0),
            Err(TransitionError::Illegal {
                from: ConnState::Connecting,
                to: ConnState::Ready
            })
        );
        assert_eq!(link.readies(), 0);
    }

    #[test]
    fn publisher_may_become_ready_from_connecting() {
        let t0 = Instant::now();
        let mut link = LinkState::new(LinkKind::Publisher, 1, t0);
        assert_eq!(link.handle_connecting(t0), Ok(()));
        assert_eq!(link.handle_ready(t0 + s(1)), Ok(()));
        assert!(link.is_ready());
    }

    #[test]
    fn rejects_not_required_for_publishers_and_retry_in_same_generation() {
        let t0 = Instant::now();
        let mut publisher = LinkState::new(LinkKind::Publisher, 1, t0);
        assert_eq!(publisher.handle_connecting(t0), Ok(()));
        assert!(publisher.handle_not_required("", t0).is_err());

        let mut peer = LinkState::new(LinkKind::Peer, 4, t0);
        assert_eq!(peer.handle_connecting(t0), Ok(()));
        assert_eq!(peer.handle_admitted(t0), Ok(()));
        assert_eq!(peer.handle_not_required("object client pair", t0), Ok(()));
        assert_eq!(peer.state(), ConnState::NotRequired);
        assert_eq!(peer.failures(), 0);
        assert_eq!(
            peer.handle_connecting(t0 + s(1)),
            Err(TransitionError::Illegal {
                from: ConnState::NotRequired,
                to: ConnState::Connecting
            })
        );
        assert_eq!(
            peer.handle_failure(FailureReason::HostStopped, "", Recovery::Hold, t0),
            Err(TransitionError::Illegal {
                from: ConnState::NotRequired,
                to: ConnState::NotConnected
            })
        );
        assert_eq!(
            peer.handle_reconfigure(4, t0 + s(2)),
            Err(TransitionError::NotRequiredForGeneration { generation: 4 })
        );
        assert_eq!(peer.handle_reconfigure(5, t0 + s(2)), Ok(()));
        assert_eq!(peer.state(), ConnState::Configured);
        assert_eq!(peer.config_generation(), 5);
    }

    #[test]
    fn rejects_reconfigure_while_connected() {
        let t0 = Instant::now();
        let mut link = LinkState::new(LinkKind::Peer, 1, t0);
        assert_eq!(link.handle_connecting(t0), Ok(()));
        assert_eq!(
            link.handle_reconfigure(2, t0),
            Err(TransitionError::Illegal {
                from: ConnState::Connecting,
                to: ConnState::Configured
            })
        );
    }

    #[test]
    fn orderly_close_and_deadline_are_distinct_in_snapshots() {
        let t0 = Instant::now();
        let mut a = LinkState::new(LinkKind::Peer, 1, t0);
        let mut b = LinkState::new(LinkKind::Peer, 1, t0);
        for link in [&mut a, &mut b] {
            assert_eq!(link.handle_connecting(t0), Ok(()));
            assert_eq!(link.handle_admitted(t0), Ok(()));
            assert_eq!(link.handle_ready(t0), Ok(()));
        }
        let r1 = a.handle_failure(FailureReason::OrderlyClose, "", Recovery::Hold, t0 + s(3));
        let r2 = b.handle_failure(
            FailureReason::DeadlineExceeded,
            "",
            Recovery::Hold,
            t0 + s(15),
        );
        assert_eq!((r1, r2), (Ok(()), Ok(())));
        let now = t0 + s(20);
        let json_a = serde_json::to_value(a.snapshot(now)).ok();
        let json_b = serde_json::to_value(b.snapshot(now)).ok();
        assert_eq!(
            json_a,
            Some(serde_json::json!({
                "kind": "peer",
                "state": "not_connected",
                "config_generation": 1,
                "state_age_ms": 17_000,
                "last_failure": {"reason": "orderly_close", "detail": "", "age_ms": 17_000},
                "last_receive_age_ms": null,
                "transitions": 4,
                "readies": 1,
                "failures": 1
            }))
        );
        let reason_b = json_b
            .as_ref()
            .and_then(|v| v.pointer("/last_failure/reason"))
            .cloned();
        assert_eq!(reason_b, Some(serde_json::json!("deadline_exceeded")));
    }

    #[test]
    fn names_are_stable_snake_case() {
        let states = [
            (ConnState::Configured, "configured"),
            (ConnState::Connecting, "connecting"),
            (ConnState::Admitted, "admitted"),
            (ConnState::Ready, "ready"),
            (ConnState::Reconnecting, "reconnecting"),
            (ConnState::NotRequired, "not_required"),
            (ConnState::NotConnected, "not_connected"),
        ];
        for (state, name) in states {
            assert_eq!(state.as_str(), name);
            assert_eq!(
                serde_json::to_value(state).ok(),
                Some(serde_json::json!(name))
            );
        }
        let reasons = [
            FailureReason::OrderlyClose,
            FailureReason::TransportError,
            FailureReason::DeadlineExceeded,
            FailureReason::FanoutSilence,
            FailureReason::ProtocolError,
            FailureReason::IdentityMismatch,
            FailureReason::GenerationMismatch,
            FailureReason::SecurityFailure,
            FailureReason::NotRequired,
            FailureReason::Replaced,
            FailureReason::StoodDown,
            FailureReason::HostDraining,
            FailureReason::HostStopped,
            FailureReason::HostError,
            FailureReason::Reconfigured,
            FailureReason::ResourceExhausted,
        ];
        let mut names: Vec<&str> = reasons.iter().map(FailureReason::as_str).collect();
        for (reason, name) in reasons.iter().zip(&names) {
            assert_eq!(reason.to_string(), *name);
            assert_eq!(
                serde_json::to_value(reason).ok(),
                Some(serde_json::json!(name))
            );
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), reasons.len(), "reasons must be distinct");
    }
}
