//! What the transport says about a socket's connections, and what it means for the link or
//! subscription on that socket, sans-IO. libzmq's socket monitors report handshakes done or
//! failed, refusals in a peer's ZAP handler and disconnects ([`MonitorEvent`]; the shell
//! decodes them from the monitor's messages, `runtime::socket`); [`judge_monitor_event`] says
//! what each means for a dialled socket or a SUB socket, and the shell acts on its verdict.
//! A bound socket's events go to its gate instead (the connections open on it, refused
//! handshakes: [`crate::proto::security::handshake_refusal`]).

use crate::proto::security::HandshakeFailure;
use crate::proto::state::FailureReason;

/// A libzmq socket event reported by a monitor, reduced to what zmesh acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorEvent {
    /// The ZMTP handshake completed: the pipe can carry records.
    HandshakeSucceeded,
    /// The connection closed or failed (disconnect, closed, handshake failure).
    Disconnected,
    /// A dial attempt failed and libzmq will not retry (reconnect is disabled).
    ConnectFailed,
    /// libzmq destroyed the closed socket (its connections are gone, its slot in the context
    /// is free) and stopped its monitor: the last event a monitor reports. Only monitors of
    /// [`Sockets::dialled`](crate::runtime::socket::Sockets::dialled) sockets report it.
    Stopped,
    /// A bound socket accepted a connection (its transport handshake starts).
    Accepted,
    /// The transport handshake failed: not ZMTP, a mechanism mismatch, libzmq's handshake
    /// deadline (a `Disconnected` follows).
    HandshakeFailed,
    /// The security handshake failed: the ZAP handler refused the client, or the server
    /// refused this client's key (a `Disconnected` follows).
    AuthFailed,
    /// Anything else (connected, delayed, listening ...): informational.
    Other(u16),
}

/// The socket a monitor event is about, as far as its meaning goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// A dialled socket of a link (a RouteMesh lane's ROUTER, a ClientServer DEALER).
    Dialled,
    /// A SUB socket of a fanout subscription; `connected` once its transport handshake was
    /// done (a [`MonitorEvent::HandshakeSucceeded`] seen).
    Sub {
        /// Whether the socket's transport handshake was done.
        connected: bool,
    },
}

/// What a monitor event means for the link or subscription on the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MonitorVerdict {
    /// Nothing changes.
    Nothing,
    /// The dialled connection's transport handshake is done: its HELLO may go.
    SendHello,
    /// The SUB socket's transport handshake is done (a later disconnect is the publisher
    /// gone, not a failed connect attempt).
    SubConnected,
    /// The link or subscription fails for this reason; libzmq would only retry with the same
    /// keys, or will not retry at all.
    Fail {
        /// Why.
        reason: FailureReason,
        /// For humans, as the state change and the snapshot say it.
        detail: String,
    },
    /// The dialled connection is gone: the records that arrived before the disconnect are
    /// read first (an orderly CLOSE among them explains it better), then, if the connection
    /// is still the link's current one, it fails with `transport_error`.
    Disconnected,
}

/// What `event` (with its `value`) means for the socket `watched`, on a node that runs CURVE
/// (`curve`) or not.
pub fn judge_monitor_event(
    watched: Watched,
    event: MonitorEvent,
    value: u32,
    curve: bool,
) -> MonitorVerdict {
    let security = |detail: String| MonitorVerdict::Fail {
        reason: FailureReason::SecurityFailure,
        detail,
    };
    match (watched, event) {
        (Watched::Dialled, MonitorEvent::HandshakeSucceeded) => MonitorVerdict::SendHello,
        // The peer refused this connection in its transport handshake (its ZAP handler):
        // libzmq will not retry it; the link dials again after its backoff.
        (Watched::Dialled, MonitorEvent::AuthFailed) if value == 400 => security(
            "the peer refused this node's credentials (ZAP 400: under CURVE, this node's key \
             is not on its allow-list)"
                .to_owned(),
        ),
        (Watched::Dialled, MonitorEvent::AuthFailed) => MonitorVerdict::Fail {
            reason: FailureReason::TransportError,
            detail: format!("the peer refused the connection in its handshake (ZAP {value})"),
        },
        // The transport handshake failed: under CURVE (or against a CURVE node) that is the
        // keys; libzmq would only try again with the same keys. Anything else is left to the
        // link's own timers and disconnect handling.
        (_, MonitorEvent::HandshakeFailed) => match dial_handshake_security(value, curve) {
            Some(detail) => security(detail),
            None => MonitorVerdict::Nothing,
        },
        (Watched::Dialled, MonitorEvent::Disconnected) => MonitorVerdict::Disconnected,
        (Watched::Sub { .. }, MonitorEvent::HandshakeSucceeded) => MonitorVerdict::SubConnected,
        // A publisher that refuses this node (its allow-list): nothing of it is ever read.
        (Watched::Sub { .. }, MonitorEvent::AuthFailed) => security(format!(
            "the publisher refused this node's credentials (ZAP {value}): not on its \
             allow-list"
        )),
        // Before a handshake, a disconnect is a failed connect attempt that libzmq retries
        // itself; after one, the publisher is gone (MISSION L6).
        (Watched::Sub { connected: true }, MonitorEvent::Disconnected) => MonitorVerdict::Fail {
            reason: FailureReason::TransportError,
            detail: "publisher disconnected".to_owned(),
        },
        _ => MonitorVerdict::Nothing,
    }
}

/// What a failed transport handshake of a dialled or SUB socket (event value `value`) says
/// about security, if anything: a mechanism mismatch (one side CURVE, the other not), failed
/// CURVE cryptography, and under CURVE a connection the node at the other end closed during
/// the handshake (it does not hold the key expected of it, so it could not open this node's
/// HELLO). `None`: not a security failure.
pub fn dial_handshake_security(value: u32, curve: bool) -> Option<String> {
    match (HandshakeFailure::of(value), curve) {
        (HandshakeFailure::MechanismMismatch, true) => {
            Some("the node at this endpoint does not run CURVE (mechanism mismatch)".into())
        }
        (HandshakeFailure::MechanismMismatch, false) => Some(
            "the node at this endpoint runs CURVE and this node does not (mechanism mismatch)"
                .into(),
        ),
        (HandshakeFailure::Cryptographic, _) => Some(format!(
            "the CURVE handshake failed (libzmq code {value:#x}): the node at this endpoint \
             does not hold the key expected of it"
        )),
        (HandshakeFailure::Closed, true) => Some(
            "closed during the CURVE handshake: the node at this endpoint does not hold the \
             key expected of it (or this node's key file pairs a public key with another \
             secret key)"
                .into(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::security::{ZMTP_CRYPTOGRAPHIC, ZMTP_MECHANISM_MISMATCH};

    /// A `HANDSHAKE_FAILED_NO_DETAIL` value: an errno (the other side closed).
    const ECONNRESET: u32 = 104;
    /// A ZMTP protocol error that says nothing about keys.
    const ZMTP_UNEXPECTED_COMMAND: u32 = 0x1000_0001;

    fn fail(v: MonitorVerdict) -> (FailureReason, String) {
        match v {
            MonitorVerdict::Fail { reason, detail } => (reason, detail),
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn l6_f1_a_dialled_socket_sends_hello_after_its_handshake_and_fails_when_disconnected() {
        let j = |ev| judge_monitor_event(Watched::Dialled, ev, 0, false);
        assert_eq!(
            j(MonitorEvent::HandshakeSucceeded),
            MonitorVerdict::SendHello
        );
        assert_eq!(j(MonitorEvent::Disconnected), MonitorVerdict::Disconnected);
        for quiet in [
            MonitorEvent::Accepted,
            MonitorEvent::ConnectFailed,
            MonitorEvent::Stopped,
            MonitorEvent::Other(1),
        ] {
            assert_eq!(j(quiet), MonitorVerdict::Nothing, "{quiet:?}");
        }
        // ZAP 400 from the peer is this node's key; any other status is the transport's.
        let (reason, detail) = fail(judge_monitor_event(
            Watched::Dialled,
            MonitorEvent::AuthFailed,
            400,
            true,
        ));
        assert_eq!(reason, FailureReason::SecurityFailure);
        assert!(detail.contains("ZAP 400"), "{detail}");
        let (reason, detail) = fail(judge_monitor_event(
            Watched::Dialled,
            MonitorEvent::AuthFailed,
            500,
            true,
        ));
        assert_eq!(reason, FailureReason::TransportError);
        assert!(detail.contains("ZAP 500"), "{detail}");
    }

    #[test]
    fn l6_a_sub_socket_fails_on_a_disconnect_only_after_its_handshake() {
        let sub = |connected| Watched::Sub { connected };
        assert_eq!(
            judge_monitor_event(sub(false), MonitorEvent::HandshakeSucceeded, 0, false),
            MonitorVerdict::SubConnected
        );
        // Before the handshake a disconnect is a connect attempt libzmq retries itself.
        assert_eq!(
            judge_monitor_event(sub(false), MonitorEvent::Disconnected, 0, false),
            MonitorVerdict::Nothing
        );
        let (reason, detail) = fail(judge_monitor_event(
            sub(true),
            MonitorEvent::Disconnected,
            0,
            false,
        ));
        assert_eq!(reason, FailureReason::TransportError);
        assert_eq!(detail, "publisher disconnected");
        // A publisher's ZAP refusal is this node's credentials, whatever its status.
        let (reason, detail) = fail(judge_monitor_event(
            sub(true),
            MonitorEvent::AuthFailed,
            500,
            true,
        ));
        assert_eq!(reason, FailureReason::SecurityFailure);
        assert!(detail.contains("ZAP 500"), "{detail}");
    }

    #[test]
    fn f3_a_failed_handshake_fails_its_socket_only_when_it_is_about_keys() {
        for watched in [Watched::Dialled, Watched::Sub { connected: false }] {
            let j = |value, curve| {
                judge_monitor_event(watched, MonitorEvent::HandshakeFailed, value, curve)
            };
            // A mechanism mismatch is security with CURVE on either side.
            for curve in [true, false] {
                let (reason, _) = fail(j(ZMTP_MECHANISM_MISMATCH, curve));
                assert_eq!(reason, FailureReason::SecurityFailure);
            }
            let (reason, detail) = fail(j(ZMTP_CRYPTOGRAPHIC, false));
            assert_eq!(reason, FailureReason::SecurityFailure);
            assert!(detail.contains("0x11000001"), "{detail}");
            // Closed during the handshake: the keys under CURVE, the transport without.
            let (reason, _) = fail(j(ECONNRESET, true));
            assert_eq!(reason, FailureReason::SecurityFailure);
            assert_eq!(j(ECONNRESET, false), MonitorVerdict::Nothing);
            // A protocol error says nothing about keys.
            assert_eq!(j(ZMTP_UNEXPECTED_COMMAND, true), MonitorVerdict::Nothing);
        }
        assert!(dial_handshake_security(ZMTP_MECHANISM_MISMATCH, true)
            .is_some_and(|d| d.contains("does not run CURVE")));
        assert!(dial_handshake_security(ZMTP_MECHANISM_MISMATCH, false)
            .is_some_and(|d| d.contains("this node does not")));
    }
}
