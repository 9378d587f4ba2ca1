//! The transport's traits ([`crate::runtime::transport`]) over libzmq: [`Sockets`] makes
//! [`ZmqSocket`]s with their [`MonitorSocket`]s. Every call is the `zmq` crate's own, with the
//! flags and options the node has always used, so the wire is libzmq's, byte for byte.

use std::os::unix::io::RawFd;

use super::{
    guarded, Frame, FrameSocket, MonitorEvent, MonitorSocket, SocketRoom, SocketSendError, Sockets,
    CLOSE_LINGER_MS,
};
use crate::proto::security::PublicKey;
use crate::runtime::security::KeyPair;
use crate::runtime::transport::{
    Opened, SocketError, SocketEvent, SocketKind, SocketRole, Transport, TransportMonitor,
    TransportSocket,
};

/// A libzmq socket made by [`Sockets`] for the transport: the node's bound ROUTERs, dialled
/// ROUTERs and DEALERs, and SUB sockets. Its operations go through [`TransportSocket`] and
/// [`Transport`]; what only libzmq has reaches the `zmq::Socket` through
/// [`ZmqSocket::as_zmq`], and a received frame's message properties through
/// [`ZmqSocket::try_recv_record`].
pub struct ZmqSocket(zmq::Socket);

impl ZmqSocket {
    /// Wraps a libzmq socket (its options are the caller's).
    pub fn from_zmq(socket: zmq::Socket) -> ZmqSocket {
        ZmqSocket(socket)
    }

    /// The libzmq socket, for what only libzmq has (the transport's own calls use it:
    /// [`MonitorSocket::stop`], [`Sockets::close_monitor`]).
    pub fn as_zmq(&self) -> &zmq::Socket {
        &self.0
    }

    /// One whole record without blocking, as [`TransportSocket::try_recv`]; with `share`
    /// false every frame stays a [`Frame::Message`], whose message properties
    /// ([`Frame::user_id`]) can still be read (see [`FrameSocket::try_recv_record`]).
    #[inline]
    pub fn try_recv_record(&self, share: bool) -> Result<Option<Vec<Frame>>, zmq::Error> {
        self.0.try_recv_record(share)
    }
}

impl std::fmt::Debug for ZmqSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ZmqSocket").finish_non_exhaustive()
    }
}

impl TransportSocket for ZmqSocket {
    type Frame = Frame;
    type Error = zmq::Error;
    type Readiness = RawFd;

    fn set_routing_id(&self, id: &[u8]) -> Result<(), zmq::Error> {
        self.0.set_identity(id)
    }

    fn bind(&self, endpoint: &str) -> Result<String, zmq::Error> {
        guarded(|| self.0.bind(endpoint))?;
        // A wildcard (`tcp://127.0.0.1:*`) is known by what libzmq bound.
        Ok(match self.0.get_last_endpoint() {
            Ok(Ok(bound)) if endpoint.contains('*') => bound,
            _ => endpoint.to_owned(),
        })
    }

    fn connect(&self, endpoint: &str) -> Result<(), zmq::Error> {
        self.0.connect(endpoint)
    }

    fn secure_server(&self, pair: &KeyPair) -> Result<(), zmq::Error> {
        super::set_curve_server(&self.0, pair)
    }

    fn secure_client(&self, pair: &KeyPair, server: &PublicKey) -> Result<(), zmq::Error> {
        super::set_curve_client(&self.0, pair, server)
    }

    fn subscribe(&self, prefix: &[u8]) -> Result<(), zmq::Error> {
        self.0.set_subscribe(prefix)
    }

    /// In manual mode, an XPUB's `ZMQ_SUBSCRIBE` and `ZMQ_UNSUBSCRIBE` apply to the pipe of
    /// the subscription read last.
    fn apply_subscription(&self, subscribe: bool, prefix: &[u8]) -> Result<(), zmq::Error> {
        if subscribe {
            self.0.set_subscribe(prefix)
        } else {
            self.0.set_unsubscribe(prefix)
        }
    }

    #[inline]
    fn send(&self, frames: &[&[u8]]) -> Result<(), SocketSendError> {
        self.0.send_frames(frames)
    }

    #[inline]
    fn try_recv(&self) -> Result<Option<Vec<Frame>>, zmq::Error> {
        self.0.try_recv_record(true)
    }

    #[inline]
    fn has_input(&self) -> bool {
        super::has_input(&self.0)
    }

    fn readiness(&self) -> Result<RawFd, zmq::Error> {
        self.0.get_fd()
    }

    fn linger_on_close(&self) -> Result<(), zmq::Error> {
        self.0.set_linger(CLOSE_LINGER_MS)
    }
}

/// `EMFILE`: the process's descriptors, or a context's socket slots; the socket layer reports
/// the system's file table (`ENFILE`) and a context it could not open as `EMFILE` too
/// ([`super::guarded`], [`Sockets`]).
impl SocketError for zmq::Error {
    fn is_out_of_descriptors(&self) -> bool {
        *self == zmq::Error::EMFILE
    }
}

impl TransportMonitor for MonitorSocket {
    type Error = zmq::Error;
    type Readiness = RawFd;

    fn try_event(&self) -> Option<SocketEvent> {
        loop {
            let frames = self.try_recv_frames().ok()??;
            if let Some(event) = SocketEvent::decode(&frames) {
                return Some(event);
            }
        }
    }

    fn has_event(&self) -> bool {
        super::has_input(self)
    }

    fn readiness(&self) -> Result<RawFd, zmq::Error> {
        self.get_fd()
    }
}

/// libzmq's sockets for the transport, with the options of `runtime::socket`'s module docs:
///
/// - [`SocketRole::Bound`]: [`Sockets::bound`] (the ZAP handler's context and `domain` when
///   the node has a ZAP handler and the role a domain, `ROUTER_NOTIFY` on a ROUTER,
///   `ACCEPTED` events), and [`CLOSE_LINGER_MS`] of linger. [`SocketKind::Publisher`] is an
///   XPUB in manual mode (`XPUB_MANUAL`); without a domain, as [`Sockets::publisher`] makes
///   it: monitored, no `ACCEPTED` events, outside the ZAP handler's context.
/// - [`SocketRole::Dialled`]: [`Sockets::dialled`] for a ROUTER or DEALER (`ROUTER_NOTIFY` on
///   a ROUTER, `MONITOR_STOPPED` confirms its close), [`Sockets::monitored`] for a SUB; a
///   reconnect interval of 100 ms backing off to 1 s.
///
/// The role's options are set before the monitor starts, so a failure leaves nothing behind.
impl Transport for Sockets {
    type Socket = ZmqSocket;
    type Monitor = MonitorSocket;
    type Room = SocketRoom;

    fn socket(
        &mut self,
        kind: SocketKind,
        role: SocketRole<'_>,
    ) -> Result<Opened<ZmqSocket, MonitorSocket>, zmq::Error> {
        let m = self.for_role(kind, role)?;
        Ok(Opened {
            socket: ZmqSocket(m.socket),
            monitor: m.monitor,
        })
    }

    fn admission(&mut self) -> Result<ZmqSocket, zmq::Error> {
        self.zap_handler().map(ZmqSocket)
    }

    fn stop_monitor(
        socket: &ZmqSocket,
        monitor: MonitorSocket,
    ) -> Result<(Vec<SocketEvent>, SocketRoom), (zmq::Error, MonitorSocket)> {
        // libzmq reports the stop itself (`MONITOR_STOPPED`, last): not an event of the
        // socket, which stays open.
        let (mut events, room) = monitor.stop_with_events(&socket.0)?;
        if events.last() == Some(&SocketEvent::Stopped) {
            events.pop();
        }
        Ok((events, room))
    }

    fn watch_close(
        &self,
        socket: &ZmqSocket,
        room: SocketRoom,
    ) -> Result<MonitorSocket, zmq::Error> {
        self.close_monitor(&socket.0, room)
    }

    fn close_stopping_monitor(socket: ZmqSocket, monitor: MonitorSocket) -> Vec<SocketEvent> {
        match monitor.stop_with_events(&socket.0) {
            Ok((events, room)) => {
                drop(socket);
                drop(room);
                events
            }
            Err((e, m)) => {
                tracing::debug!(error = %e, "monitor not stopped before its socket closed");
                drop(socket);
                drop(m);
                Vec::new()
            }
        }
    }
}

impl SocketEvent {
    /// Decodes a libzmq monitor message (frame 0: u16 event + u32 value in native byte
    /// order; frame 1: the endpoint). Malformed monitor messages are `None`.
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Option<SocketEvent> {
        let head = frames.first()?.as_ref();
        let raw: [u8; 2] = head.get(0..2)?.try_into().ok()?;
        let value: [u8; 4] = head.get(2..6)?.try_into().ok()?;
        let (raw, value) = (u16::from_ne_bytes(raw), u32::from_ne_bytes(value));
        use zmq::SocketEvent as E;
        Some(match raw {
            x if x == E::HANDSHAKE_SUCCEEDED.to_raw() => SocketEvent::HandshakeSucceeded,
            x if x == E::DISCONNECTED.to_raw() || x == E::CLOSED.to_raw() => {
                SocketEvent::Disconnected { conn: value }
            }
            x if x == E::HANDSHAKE_FAILED_NO_DETAIL.to_raw()
                || x == E::HANDSHAKE_FAILED_PROTOCOL.to_raw() =>
            {
                SocketEvent::HandshakeFailed { code: value }
            }
            x if x == E::HANDSHAKE_FAILED_AUTH.to_raw() => {
                SocketEvent::AuthFailed { status: value }
            }
            x if x == E::ACCEPTED.to_raw() => SocketEvent::Accepted { conn: value },
            x if x == E::CONNECT_RETRIED.to_raw() => SocketEvent::ConnectRetried,
            x if x == E::MONITOR_STOPPED.to_raw() => SocketEvent::Stopped,
            other => SocketEvent::Other { raw: other, value },
        })
    }
}

impl MonitorEvent {
    /// Decodes a libzmq monitor message (frame 0: u16 event + u32 value in native byte order;
    /// frame 1: the endpoint). Malformed monitor messages are `None`.
    pub fn decode<F: AsRef<[u8]>>(frames: &[F]) -> Option<MonitorEvent> {
        MonitorEvent::decode_with_value(frames).map(|(ev, _)| ev)
    }

    /// As [`MonitorEvent::decode`], with the event's value: the connection's file descriptor
    /// for `Accepted` and `Disconnected` (libzmq's only handle on one connection of a bound
    /// socket), an error code for handshake failures (0 where the event's value says
    /// nothing zmesh reads: a handshake done, a connect retried, a monitor stopped).
    pub fn decode_with_value<F: AsRef<[u8]>>(frames: &[F]) -> Option<(MonitorEvent, u32)> {
        SocketEvent::decode(frames)?.monitor_event()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Running out is `EMFILE` alone: what the socket layer reports for descriptors, a
    /// context's slots and the system's file table; other errors are not.
    #[test]
    fn only_emfile_is_running_out_of_descriptors() {
        assert!(zmq::Error::EMFILE.is_out_of_descriptors());
        for other in [
            zmq::Error::EINVAL,
            zmq::Error::EFAULT,
            zmq::Error::EADDRINUSE,
            zmq::Error::EAGAIN,
        ] {
            assert!(!other.is_out_of_descriptors(), "{other:?}");
        }
    }

    /// Every libzmq event number decodes to the event and value the node judged before the
    /// transport existed: the event by its number, the value where the core reads it.
    #[test]
    fn monitor_messages_decode_to_the_event_and_value_the_core_reads() {
        use zmq::SocketEvent as E;
        let msg = |raw: u16, value: u32| {
            let mut head = raw.to_ne_bytes().to_vec();
            head.extend_from_slice(&value.to_ne_bytes());
            vec![head, b"tcp://127.0.0.1:1".to_vec()]
        };
        let cases = [
            (
                E::HANDSHAKE_SUCCEEDED,
                MonitorEvent::HandshakeSucceeded,
                None,
            ),
            (E::DISCONNECTED, MonitorEvent::Disconnected, Some(9)),
            (E::CLOSED, MonitorEvent::Disconnected, Some(9)),
            (
                E::HANDSHAKE_FAILED_NO_DETAIL,
                MonitorEvent::HandshakeFailed,
                Some(9),
            ),
            (
                E::HANDSHAKE_FAILED_PROTOCOL,
                MonitorEvent::HandshakeFailed,
                Some(9),
            ),
            (E::HANDSHAKE_FAILED_AUTH, MonitorEvent::AuthFailed, Some(9)),
            (E::ACCEPTED, MonitorEvent::Accepted, Some(9)),
            (E::CONNECT_RETRIED, MonitorEvent::ConnectFailed, None),
            (E::MONITOR_STOPPED, MonitorEvent::Stopped, None),
            (
                E::CONNECTED,
                MonitorEvent::Other(E::CONNECTED.to_raw()),
                Some(9),
            ),
        ];
        for (raw, event, value) in cases {
            let (got, got_value) =
                MonitorEvent::decode_with_value(&msg(raw.to_raw(), 9)).expect("decodes");
            assert_eq!(got, event, "{raw:?}");
            if let Some(v) = value {
                assert_eq!(got_value, v, "{raw:?}");
            }
        }
        assert_eq!(SocketEvent::decode(&[vec![1u8, 0, 0]]), None, "too short");
        assert_eq!(SocketEvent::decode::<Vec<u8>>(&[]), None, "no frame");
    }
}
