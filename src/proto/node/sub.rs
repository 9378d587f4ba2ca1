//! A fanout subscription: one publisher this node reads with a SUB socket of its own and its
//! own watch (MISSION T3, L5), and what opening, refusing, failing and readying it does to
//! its state (its socket's connection, its retry time, its failures in a row); and what is
//! read from it: a decoded message ([`Fanout`]) and a PUBPACK's record staged on its own
//! ([`Published`]). The order of the consequences is the node core's
//! (`core::fanout`); the socket itself, and announcing the state to the application, are
//! the shell's.

use std::borrow::Cow;
use std::time::Instant;

use bytes::Bytes;

use crate::proto::liveness::{self, PublisherEvent};
use crate::proto::node::keys::{SlotKey, SubKey};
use crate::proto::node::link::{backoff, note, BACKOFF_MAX};
use crate::proto::node::source::Source;
use crate::proto::security::PublicKey;
use crate::proto::state::{ConnState, FailureReason, LinkKind, LinkState, Recovery};
use crate::proto::ConnId;

/// A fanout message as the shell decoded it off a subscription's socket.
pub(crate) enum Fanout {
    /// The liveness beacon (MISSION L4): never delivered.
    Beacon,
    /// A PUBLISH: its topic and payload.
    Publish {
        /// The record's topic.
        topic: Bytes,
        /// The record's payload.
        payload: Bytes,
    },
    /// A PUBPACK: its records' topic and payloads, in order (WIRE.md §7.5).
    Pack {
        /// The topic of every record of the PUBPACK.
        topic: Bytes,
        /// The records' payloads, in order.
        payloads: Vec<Bytes>,
    },
}

/// One PUBLISH of a PUBPACK, staged on its own (WIRE.md §7.5), so that the receive loop's
/// caps count each record.
pub(crate) struct Published {
    /// The subscription the PUBPACK came on.
    pub(crate) sub: SubKey,
    /// The subscription's socket's connection id then: the record is that socket's only, so
    /// it changes nothing once the subscription has another socket.
    pub(crate) conn: ConnId,
    /// The PUBPACK's topic, one buffer shared by its records.
    pub(crate) topic: Bytes,
    /// This record's payload: a slice of the PUBPACK's frame 2.
    pub(crate) payload: Bytes,
    /// On the PUBPACK's first record, how many records it carries: the publisher's watch
    /// takes the PUBPACK as one receipt when the first is handed out; 0 on the others.
    pub(crate) receipt: u16,
}

/// One publisher this node subscribes to (see the module docs).
pub(crate) struct Sub {
    pub(crate) endpoint: String,
    /// The source of this publisher's deliveries, built once (a reference count per record).
    pub(crate) source: Source,
    /// The topic of the last record delivered: the next record's topic, when it is the same,
    /// is a clone of it instead of a fresh copy.
    pub(crate) last_topic: Bytes,
    pub(crate) slot: Option<SlotKey>,
    pub(crate) conn_id: Option<ConnId>,
    /// This publisher's watch in the node's liveness table.
    pub(crate) live: liveness::LinkKey,
    pub(crate) state: LinkState,
    pub(crate) records: u64,
    /// The current socket completed a ZMTP handshake with the publisher.
    pub(crate) connected: bool,
    /// Open a new socket not before this instant.
    pub(crate) retry_at: Instant,
    pub(crate) failures_in_row: u32,
    /// Automatic mode: the publisher's descriptor is gone, so no new socket is opened (a
    /// ready one stays until it fails; see `io::discovery`).
    pub(crate) retired: bool,
    /// CURVE: the key the publisher must hold (`[security.endpoint_keys]`, or its
    /// descriptor's security identity); a publisher with another key is never read.
    pub(crate) key: Option<PublicKey>,
    /// `key` is the publisher descriptor's: used only while it is on the allow-list.
    pub(crate) key_from_descriptor: bool,
}

/// How a subscription's next socket is secured ([`Sub::security`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubSecurity {
    /// The node runs without CURVE.
    Plain,
    /// A CURVE client expecting the publisher to hold this key.
    Curve(PublicKey),
    /// The node runs CURVE and knows no key to expect: the socket is not opened.
    Refused,
}

/// What a verdict of a subscription's watch does to it ([`judge_publisher_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PublisherVerdict {
    /// The first valid record or beacon: the subscription is ready.
    Ready,
    /// The subscription fails for this reason: its socket is closed and a new one opened.
    Fail(FailureReason, Cow<'static, str>),
}

/// What the watch's `ev` does to its subscription: ready at its first valid record or
/// beacon; failed at 15 s of silence or a protocol error (MISSION L5, F1).
pub(crate) fn judge_publisher_event(ev: PublisherEvent) -> PublisherVerdict {
    match ev {
        PublisherEvent::BecameReady => PublisherVerdict::Ready,
        PublisherEvent::Silence { .. } => PublisherVerdict::Fail(
            FailureReason::FanoutSilence,
            Cow::Borrowed("no record or beacon for 15 s"),
        ),
        PublisherEvent::ProtocolError(e) => {
            PublisherVerdict::Fail(FailureReason::ProtocolError, Cow::Owned(e.to_string()))
        }
    }
}

impl Sub {
    /// A subscription to the publisher at `endpoint`, watched by liveness entry `live`, which
    /// under CURVE must hold `key` (configured, not a descriptor's): no socket yet, its first
    /// one due at `now`.
    pub(crate) fn new(
        endpoint: &str,
        key: Option<PublicKey>,
        live: liveness::LinkKey,
        now: Instant,
    ) -> Sub {
        Sub {
            endpoint: endpoint.to_owned(),
            source: Source::Publisher {
                endpoint: endpoint.into(),
            },
            last_topic: Bytes::new(),
            slot: None,
            conn_id: None,
            live,
            state: LinkState::new(LinkKind::Publisher, 0, now),
            records: 0,
            connected: false,
            retry_at: now,
            failures_in_row: 0,
            retired: false,
            key,
            key_from_descriptor: false,
        }
    }

    /// When this subscription opens a new socket: only while it has none and is not retired.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        (self.slot.is_none() && !self.retired).then_some(self.retry_at)
    }

    /// Whether a new socket is to be opened at `now`: it has none, is not retired, and its
    /// retry time has come (MISSION L5).
    pub(crate) fn is_open_due(&self, now: Instant) -> bool {
        self.next_deadline().is_some_and(|at| now >= at)
    }

    /// How its next socket is secured, on a node that runs CURVE (`curve`) or not: with the
    /// configured key, or the descriptor's while `allowed` (the allow-list) holds it.
    pub(crate) fn security(
        &self,
        curve: bool,
        allowed: impl FnOnce(&PublicKey) -> bool,
    ) -> SubSecurity {
        if !curve {
            return SubSecurity::Plain;
        }
        match self.key {
            Some(key) if !self.key_from_descriptor || allowed(&key) => SubSecurity::Curve(key),
            _ => SubSecurity::Refused,
        }
    }

    /// A new socket (`slot`, connection `conn`) was opened at `now`: a new watch, connecting.
    pub(crate) fn handle_opened(&mut self, slot: SlotKey, conn: ConnId, now: Instant) {
        self.slot = Some(slot);
        self.conn_id = Some(conn);
        self.connected = false;
        note(self.state.handle_connecting(now));
    }

    /// The socket opened at `now` could not be watched: try again after the longest backoff.
    pub(crate) fn handle_unwatched(&mut self, now: Instant) {
        self.retry_at = now + BACKOFF_MAX;
    }

    /// The node runs CURVE and knows no key to expect of the publisher (see
    /// [`Sub::security`]): no socket, `not_connected` with `security_failure`, looked at
    /// again after the longest backoff. Returns the failure's detail if this is news (the
    /// subscription did not already show it), for the shell to announce.
    pub(crate) fn handle_refused(&mut self, now: Instant) -> Option<String> {
        self.retry_at = now + BACKOFF_MAX;
        let already = self.state.state() == ConnState::NotConnected
            && self
                .state
                .last_failure()
                .is_some_and(|f| f.reason == FailureReason::SecurityFailure);
        if already {
            return None;
        }
        let detail = format!(
            "no CURVE key known for publisher {} (none in [security.endpoint_keys], \
             and no descriptor key on this node's allow-list)",
            self.endpoint
        );
        note(self.state.handle_failure(
            FailureReason::SecurityFailure,
            detail.as_str(),
            Recovery::Hold,
            now,
        ));
        Some(detail)
    }

    /// The current socket failed for `reason` at `now` (MISSION L5): it is no longer this
    /// subscription's, the failure counts toward the backoff, and a new socket is opened
    /// after it if the node is `running` and the subscription not retired. Returns the
    /// socket to close and the state the subscription is in now, or `None` if it had no
    /// socket (nothing changes).
    pub(crate) fn handle_failure(
        &mut self,
        reason: FailureReason,
        detail: &str,
        running: bool,
        now: Instant,
    ) -> Option<(SlotKey, ConnState)> {
        let slot = self.slot.take()?;
        self.conn_id = None;
        self.failures_in_row = self.failures_in_row.saturating_add(1);
        self.retry_at = now + backoff(self.failures_in_row);
        let recovery = if running && !self.retired {
            Recovery::Reconnect
        } else {
            Recovery::Hold
        };
        note(self.state.handle_failure(reason, detail, recovery, now));
        Some((slot, self.state.state()))
    }

    /// The watch found the publisher ready at `now`: the failures in a row are over.
    pub(crate) fn handle_ready(&mut self, now: Instant) {
        self.failures_in_row = 0;
        note(self.state.handle_ready(now));
    }

    /// Whether a record read on connection `conn` is still this subscription's: its socket
    /// is the current one.
    pub(crate) fn is_current(&self, conn: ConnId) -> bool {
        self.conn_id == Some(conn)
    }

    /// One record of `topic` delivered: counted, and its topic kept so that the next of the
    /// same topic shares its buffer.
    pub(crate) fn handle_delivered(&mut self, topic: &Bytes) {
        self.records += 1;
        if self.last_topic != *topic {
            self.last_topic = topic.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::proto::liveness::FanoutProtocolError;
    use crate::proto::node::keys::Key;

    fn sub(now: Instant) -> Sub {
        let live = liveness::Liveness::new(1).insert_publisher(now);
        Sub::new("tcp://p:1", None, live, now)
    }

    /// A subscription's socket opens connecting, fails with a growing backoff (reconnecting
    /// only while the node runs and the subscription is not retired), and readying it ends
    /// the failures in a row (L5, F1).
    #[test]
    fn l5_a_subscription_fails_backs_off_and_recovers_alone() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut s = sub(t0);
        assert_eq!(s.next_deadline(), Some(t0));
        let slot = SlotKey::from_index(4);
        s.handle_opened(slot, ConnId(9), t0);
        assert_eq!(s.state.state(), ConnState::Connecting);
        assert_eq!(s.next_deadline(), None, "a socket open: nothing to open");
        assert!(s.is_current(ConnId(9)) && !s.is_current(ConnId(8)));

        let failed = s.handle_failure(FailureReason::FanoutSilence, "quiet", true, t0 + ms);
        assert_eq!(failed, Some((slot, ConnState::Reconnecting)));
        assert_eq!((s.slot, s.conn_id, s.failures_in_row), (None, None, 1));
        assert_eq!(s.retry_at, t0 + ms + backoff(1));
        assert!(!s.is_current(ConnId(9)));
        assert_eq!(
            s.handle_failure(FailureReason::FanoutSilence, "again", true, t0),
            None,
            "no socket: nothing fails"
        );

        s.handle_opened(slot, ConnId(10), t0);
        let failed = s.handle_failure(FailureReason::ProtocolError, "bad", true, t0);
        assert_eq!(failed.map(|f| f.1), Some(ConnState::Reconnecting));
        assert_eq!(s.retry_at, t0 + backoff(2));

        s.handle_opened(slot, ConnId(11), t0);
        s.handle_ready(t0);
        assert_eq!((s.state.state(), s.failures_in_row), (ConnState::Ready, 0));

        let failed = s.handle_failure(FailureReason::FanoutSilence, "quiet", false, t0);
        assert_eq!(
            failed.map(|f| f.1),
            Some(ConnState::NotConnected),
            "stopping"
        );
        s.handle_opened(slot, ConnId(12), t0);
        s.retired = true;
        let failed = s.handle_failure(FailureReason::FanoutSilence, "quiet", true, t0);
        assert_eq!(
            failed.map(|f| f.1),
            Some(ConnState::NotConnected),
            "retired"
        );
        assert_eq!(s.next_deadline(), None);

        s.handle_unwatched(t0);
        assert_eq!(s.retry_at, t0 + BACKOFF_MAX);
    }

    /// Under CURVE a subscription expects its configured key, or its descriptor's only while
    /// the allow-list holds it; without one it is refused once (`security_failure`, shown
    /// once), and looked at again after the longest backoff.
    #[test]
    fn t3_a_subscription_without_a_key_to_expect_is_refused_once() {
        let t0 = Instant::now();
        let mut s = sub(t0);
        assert_eq!(s.security(false, |_| false), SubSecurity::Plain);
        assert_eq!(s.security(true, |_| true), SubSecurity::Refused);
        let key = PublicKey::from_bytes([7; 32]);
        s.key = Some(key);
        assert_eq!(s.security(true, |_| false), SubSecurity::Curve(key));
        s.key_from_descriptor = true;
        assert_eq!(s.security(true, |k| *k == key), SubSecurity::Curve(key));
        assert_eq!(s.security(true, |_| false), SubSecurity::Refused);

        let detail = s.handle_refused(t0);
        assert!(detail.as_deref().is_some_and(|d| d.contains("tcp://p:1")));
        assert_eq!(s.retry_at, t0 + BACKOFF_MAX);
        assert_eq!(
            s.state.last_failure().map(|f| f.reason),
            Some(FailureReason::SecurityFailure)
        );
        let later = t0 + Duration::from_secs(3);
        assert_eq!(s.handle_refused(later), None, "already shown");
        assert_eq!(s.retry_at, later + BACKOFF_MAX);
    }

    /// The watch's verdicts: ready, or a failure with the reason and detail a snapshot shows.
    #[test]
    fn l5_f1_a_watch_event_readies_or_fails_the_subscription() {
        assert_eq!(
            judge_publisher_event(PublisherEvent::BecameReady),
            PublisherVerdict::Ready
        );
        assert_eq!(
            judge_publisher_event(PublisherEvent::Silence {
                last_receive_at: None
            }),
            PublisherVerdict::Fail(
                FailureReason::FanoutSilence,
                "no record or beacon for 15 s".into()
            )
        );
        let e = FanoutProtocolError::MalformedRecord;
        assert_eq!(
            judge_publisher_event(PublisherEvent::ProtocolError(e)),
            PublisherVerdict::Fail(FailureReason::ProtocolError, e.to_string().into())
        );
    }

    /// A delivered record is counted, and a new topic is kept while the same one is shared.
    #[test]
    fn a_delivered_record_keeps_its_topic() {
        let mut s = sub(Instant::now());
        let topic = Bytes::from_static(b"t");
        s.handle_delivered(&topic);
        s.handle_delivered(&Bytes::from(b"t".to_vec()));
        assert_eq!((s.records, &s.last_topic[..]), (2, &b"t"[..]));
        s.handle_delivered(&Bytes::from_static(b"u"));
        assert_eq!(&s.last_topic[..], b"u");
    }
}
