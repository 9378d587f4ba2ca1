//! Handshake and admission, the shell's side: the decisions and their order are the node
//! core's ([`crate::proto::node::core`]: HELLO, the first record of an unadmitted
//! connection, WELCOME, the step to ready; [`crate::proto::node::admit`] for the judgements).
//! This file reads their inputs off the frames (the record, the CURVE `User-Id`) and is the
//! core's [`Shell`]: it sends the core's records on the sockets and hands the rest to the
//! other parts (the probes, beacons, dials and SUB re-opens of the core's timers among
//! them).
//!
//! A connection that does not open with a well-formed HELLO is refused like one whose HELLO
//! fails admission: one REJECT (`Protocol`, or `UnsupportedVersion` for another envelope
//! version), then everything else it sends is ignored ([`Refused`](crate::proto::node::accepting::Refused), WIRE.md §5.1).

use std::time::Instant;

use super::parts::local::ConfigView;
use super::parts::sockets::Unit;
use super::{Host, IoThread, LinkKey, SlotKey, SubKey};
use crate::proto::handshake::{self, Identity};
use crate::proto::liveness::{self, PublisherEvent};
use crate::proto::node::admit::Credentials;
use crate::proto::node::core::{self, Count, First, NodeCore, SendFailure, Shell};
use crate::proto::node::gate::Gated;
use crate::proto::node::links::SweepRecord;
use crate::proto::sched::Source as SchedSource;
use crate::proto::security::InputRefusal;
use crate::proto::state::{ConnState, FailureReason};
use crate::proto::wire::{Capabilities, Record};
use crate::proto::ConnId;
use crate::runtime::outbound::Closed;
use crate::runtime::records::{self, Lane};
use crate::runtime::socket::{Frame, SocketSendError};

impl IoThread {
    /// The first record of an unadmitted connection `route` of bound socket `slot`
    /// ([`core::handle_bound_record`] decided it is one): decoded, with the key the
    /// connection proved, for the core to judge ([`core::handle_first_record`]).
    pub(super) fn on_unknown_inbound(
        &mut self,
        slot: SlotKey,
        lane: Lane,
        route: Frame,
        frames: &mut [Frame],
        now: Instant,
    ) {
        let route = route.as_ref().to_vec();
        // With CURVE, the key the connection proved, as the ZAP handler answered it: the
        // User-Id of the record's frames, read unshared for this (`recv_one`).
        let user_id = match self.local.curve {
            Some(_) => frames.first_mut().and_then(Frame::user_id),
            None => None,
        };
        let credentials = match self.local.curve {
            Some(_) => Credentials::Curve(user_id.as_deref()),
            None => Credentials::Plain,
        };
        // No capabilities are in effect before the handshake.
        let first = match Record::decode_in(&*frames, Capabilities::NONE, Frame::to_bytes) {
            Ok(Record::Hello(h)) => {
                let (lane, peer, expects) = handshake::from_hello(h);
                First::Hello {
                    lane,
                    peer,
                    expects,
                }
            }
            Ok(rec) => First::Other(rec.kind()),
            Err(e) => First::Malformed(e),
        };
        core::handle_first_record(self, slot, lane, route, credentials, first, now);
    }
}

impl SendFailure for SocketSendError {
    fn unreachable(&self) -> bool {
        matches!(self, SocketSendError::Unreachable)
    }
}

impl Shell for IoThread {
    type Configured<'a> = ConfigView<'a>;
    type SendError = SocketSendError;

    fn core(&self) -> &NodeCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut NodeCore {
        &mut self.core
    }

    fn configured(&self) -> ConfigView<'_> {
        self.local.configured()
    }

    fn core_with_configured(&mut self) -> (&mut NodeCore, ConfigView<'_>) {
        (&mut self.core, self.local.configured())
    }

    fn me(&self) -> &Identity {
        &self.local.me
    }

    fn admitting(&self) -> bool {
        self.local.host == Host::Running
    }

    fn fresh_conn_id(&mut self) -> ConnId {
        self.local.fresh_conn_id()
    }

    fn send_on_link(&mut self, k: LinkKey, frames: Vec<Vec<u8>>) -> Result<(), SocketSendError> {
        IoThread::send_on_link(self, k, frames)
    }

    fn send_to(
        &mut self,
        slot: SlotKey,
        route: &[u8],
        frames: &[Vec<u8>],
    ) -> Result<(), SocketSendError> {
        self.sockets.send(slot, Some(route), frames)
    }

    fn send_sweep_record(
        &mut self,
        slot: SlotKey,
        route: &[u8],
        record: SweepRecord,
    ) -> Result<(), SocketSendError> {
        let frames = match record {
            SweepRecord::Ack(id) => records::ack(id),
            SweepRecord::Probe(id) => records::probe(id),
        };
        self.sockets.send(slot, Some(route), &frames)
    }

    fn add_peer_unit(&mut self, slot: SlotKey, k: LinkKey, conn: ConnId) {
        if let Some(sid) = self.sockets.shared_id(slot) {
            if let Err(e) = self
                .receiving
                .sched
                .add_unit(Unit::Peer(k, conn), SchedSource::Shared(sid))
            {
                tracing::debug!(error = ?e, "scheduler unit not added");
            }
        }
    }

    fn record_refusal(&mut self, slot: SlotKey, why: InputRefusal, detail: String, now: Instant) {
        core::gate::record_refusal(self, Gated::Bound(slot), why, detail, now);
    }

    fn count(&mut self, what: Count) {
        match what {
            Count::StaleRecord => metrics::counter!("zmesh_stale_records_total").increment(1),
            Count::LinkFailure(reason) => {
                metrics::counter!("zmesh_link_failures_total", "reason" => reason.as_str())
                    .increment(1)
            }
            Count::SweepRecord => {
                metrics::counter!("zmesh_disconnect_sweep_records_total").increment(1)
            }
        }
    }

    fn learn_servers(&mut self, channels: &[String]) {
        for channel in channels {
            self.caller.calls_mut().learn_server(channel);
        }
    }

    fn open_send_queue(&mut self, k: LinkKey) {
        IoThread::open_send_queue(self, k);
    }

    fn emit_state(
        &mut self,
        k: LinkKey,
        state: ConnState,
        reason: Option<FailureReason>,
        detail: &str,
    ) {
        let link = self.local.link_id(&self.core.links[k].kind);
        self.app.emit_state(link, state, reason, detail);
    }

    fn fail_calls(&mut self, k: LinkKey, conn: ConnId, reason: FailureReason, now: Instant) {
        self.calls_connection_lost(k, conn, reason, now);
    }

    fn close_send_queue(&mut self, k: LinkKey, reason: FailureReason) -> usize {
        IoThread::close_send_queue(self, k, Closed::NotReady, reason)
    }

    fn close_dialled(&mut self, k: LinkKey, slot: SlotKey) -> bool {
        IoThread::close_dialled(self, k, slot)
    }

    fn remove_peer_unit(&mut self, k: LinkKey, conn: ConnId) {
        self.receiving.sched.remove_unit(Unit::Peer(k, conn));
    }

    fn sync_timers(&mut self) {
        self.sync_links();
    }

    fn send_probe(&mut self, k: LinkKey, id: u64) {
        self.send_liveness(k, records::probe(id));
    }

    fn send_beacon(&mut self, key: liveness::LinkKey) {
        IoThread::send_beacon(self, key);
    }

    fn on_publisher_event(&mut self, sub: SubKey, ev: PublisherEvent, now: Instant) {
        core::fanout::on_publisher_event(self, sub, ev, now);
    }

    fn dial(&mut self, k: LinkKey, now: Instant) {
        IoThread::dial(self, k, now);
    }

    fn close_overdue(&mut self, k: LinkKey) {
        IoThread::close_overdue(self, k);
    }

    fn settle_overdue_closing(&mut self) {
        self.sockets.settle_overdue_closing();
    }

    fn open_due_sub(&mut self, sub: SubKey, now: Instant) {
        IoThread::open_due_sub(self, sub, now);
    }

    fn runs_curve(&self) -> bool {
        self.local.curve.is_some()
    }

    fn drain_before_disconnect(&mut self, slot: SlotKey, now: Instant) {
        IoThread::drain_before_disconnect(self, slot, now);
    }

    fn sub_connected(&mut self, sub: SubKey) {
        IoThread::sub_connected(self, sub);
    }

    fn fail_sub(&mut self, sub: SubKey, reason: FailureReason, detail: &str, now: Instant) {
        core::fanout::fail_sub(self, sub, reason, detail, now);
    }
}
