//! Running out of descriptors. A link or subscription whose socket cannot be
//! opened because the node ran out (the process's limit, the system's file table, libzmq's
//! socket limit) fails with [`FailureReason::ResourceExhausted`] and the real cause with its
//! figures ([`Exhausted`]), and is retried with the normal backoff. Its state event is
//! emitted on the first such failure only (the link stays `reconnecting`; later failures
//! update its figures and counters); the node logs one warning per episode, an episode
//! lasting from the first such failure to the next socket that opens, and at most one per
//! [`EPISODE_LOG_MIN`]. At start, [`IoThread::check_fd_limit`] warns when the limit is below
//! what the configuration needs.

use std::time::Instant;

use super::parts::exhaustion::EPISODE_LOG_MIN;
use super::{IoThread, LinkKey, SubKey};
use crate::proto::node::link::record_exhausted;
use crate::proto::state::{ConnState, FailureReason};
use crate::runtime::fds::{self, Exhausted, Gauge};
use crate::runtime::link::LinkId;
use crate::runtime::socket::{
    FDS_PER_CONTEXT, FDS_PER_DIALLED, FDS_PER_MONITORED, SOCKETS_PER_CONTEXT,
};
use crate::runtime::transport::SocketError;

impl IoThread {
    /// Connections the node has open (sockets with a peer): dialled and inbound
    /// connections, and subscriptions with a socket.
    pub(super) fn open_connections(&self) -> usize {
        self.core
            .links
            .values()
            .filter(|l| l.conn.is_some())
            .count()
            + self.core.subs.values().filter(|s| s.slot.is_some()).count()
    }

    /// What opening a socket failing with `e` says about resources, the figures read at
    /// most once per [`Gauge::TTL`]; `None` for an error that is not running out.
    fn exhausted(&mut self, e: &impl SocketError, now: Instant) -> Option<Exhausted> {
        if !e.is_out_of_descriptors() {
            return None;
        }
        if let Some((at, cause)) = &self.sockets.exhaustion.last {
            if now.saturating_duration_since(*at) < Gauge::TTL {
                return Some(cause.clone());
            }
        }
        let cause = fds::classify_exhausted(self.open_connections(), self.sockets.exhaustion.base)?;
        self.sockets.exhaustion.last = Some((now, cause.clone()));
        Some(cause)
    }

    /// Counts a failure of `what` for `cause` in the episode and logs the episode's warning
    /// if it is the first failure and none was logged for [`EPISODE_LOG_MIN`].
    fn note_exhausted(&mut self, what: &str, cause: &Exhausted, now: Instant) {
        let x = &mut self.sockets.exhaustion;
        let first = !x.active;
        x.active = true;
        x.failures += 1;
        let quiet = x
            .logged_at
            .is_none_or(|t| now.saturating_duration_since(t) >= EPISODE_LOG_MIN);
        if first && quiet {
            let left_out = std::mem::take(&mut x.unlogged);
            x.logged_at = Some(now);
            tracing::warn!(
                first = what,
                left_out,
                "cannot open sockets: {cause}; links that need one fail with \
                 resource_exhausted and retry with their backoff (one line per episode; \
                 raise the limit or lower the connections: README \"File descriptors\")"
            );
        } else {
            x.unlogged += 1;
        }
    }

    /// A socket opened: a running episode ends (logged at info level).
    pub(super) fn socket_opened(&mut self, now: Instant) {
        let x = &mut self.sockets.exhaustion;
        if !x.active {
            return;
        }
        x.active = false;
        x.last = None;
        let failures = std::mem::take(&mut x.failures);
        let (open, limit) = x.gauge.read(now);
        tracing::info!(
            failures,
            open,
            limit,
            "sockets open again after running out of descriptors"
        );
    }

    /// Dialled link `k` could not open or set up its socket for `endpoint`: running out is
    /// a named failure of the link ([`FailureReason::ResourceExhausted`]), retried with the
    /// normal backoff; any other error is logged and retried after [`super::BACKOFF_MAX`].
    pub(super) fn dial_failed(
        &mut self,
        k: LinkKey,
        e: impl SocketError,
        endpoint: &str,
        now: Instant,
    ) {
        let Some(cause) = self.exhausted(&e, now) else {
            self.core.links[k].retry_at = Some(now + super::BACKOFF_MAX);
            tracing::warn!(error = %e, endpoint, "cannot open dialled socket");
            return;
        };
        let link = self.local.link_id(&self.core.links[k].kind);
        tracing::debug!(link = %link, "socket not opened: {cause}");
        self.note_exhausted(&link.to_string(), &cause, now);
        let detail = cause.to_string();
        let l = &mut self.core.links[k];
        let (retry_at, first) =
            record_exhausted(&mut l.state, &mut l.failures_in_row, &detail, now);
        l.retry_at = Some(retry_at);
        self.report_exhausted(link, first, &detail);
    }

    /// Subscription `i` could not open its SUB socket: as [`IoThread::dial_failed`].
    pub(super) fn sub_open_failed(&mut self, i: SubKey, e: impl SocketError, now: Instant) {
        let endpoint = self.core.subs[i].endpoint.clone();
        let Some(cause) = self.exhausted(&e, now) else {
            // Not again at once: the poll timeout takes this instant.
            self.core.subs[i].retry_at = now + super::BACKOFF_MAX;
            tracing::warn!(error = %e, endpoint, "cannot open SUB socket");
            return;
        };
        let link = LinkId::Subscription { endpoint };
        tracing::debug!(link = %link, "socket not opened: {cause}");
        self.note_exhausted(&link.to_string(), &cause, now);
        let detail = cause.to_string();
        let s = &mut self.core.subs[i];
        let (retry_at, first) =
            record_exhausted(&mut s.state, &mut s.failures_in_row, &detail, now);
        s.retry_at = retry_at;
        self.report_exhausted(link, first, &detail);
    }

    /// The state event of a `resource_exhausted` failure (only on the first failure of an
    /// episode: the link stays `reconnecting`) and its count.
    fn report_exhausted(&mut self, link: LinkId, first: bool, detail: &str) {
        if first {
            self.app.emit_state(
                link,
                ConnState::Reconnecting,
                Some(FailureReason::ResourceExhausted),
                detail,
            );
        }
        metrics::counter!("zmesh_link_failures_total", "reason" => FailureReason::ResourceExhausted.as_str())
            .increment(1);
    }

    /// At start, after the binds: warns when the descriptor limit is below what the
    /// configuration needs (the descriptors open now, [`FDS_PER_DIALLED`] per RouteMesh lane
    /// the node dials, [`FDS_PER_MONITORED`] per server it dials and per publisher it
    /// subscribes to, and the libzmq contexts for them), before any inbound connection. The node starts all the same: the links that cannot open a socket fail
    /// with `resource_exhausted` and retry.
    pub(super) fn check_fd_limit(&mut self) {
        let lanes = 2 * self.local.cfg.peers.len() as u64;
        let monitored = (self.local.cfg.servers.len() + self.local.cfg.subscriptions.len()) as u64;
        let dialled = lanes + monitored;
        let (Some(open), Some(limit)) = (fds::open_count(), fds::limit()) else {
            return;
        };
        self.sockets.exhaustion.base = open;
        let contexts = dialled.div_ceil((SOCKETS_PER_CONTEXT / 3) as u64);
        let need = open
            + lanes * FDS_PER_DIALLED
            + monitored * FDS_PER_MONITORED
            + contexts * FDS_PER_CONTEXT;
        if need > limit {
            tracing::warn!(
                limit,
                need,
                open,
                dialled,
                "the file descriptor limit ({limit}) is below what this node's configuration \
                 needs: about {need} ({open} open now, {lanes} dialled RouteMesh lanes x \
                 {FDS_PER_DIALLED}, {monitored} dialled servers and subscriptions x \
                 {FDS_PER_MONITORED}, {contexts} libzmq contexts x {FDS_PER_CONTEXT}), before \
                 any inbound connection; links that cannot open a \
                 socket will fail with resource_exhausted and retry. Raise the hard limit \
                 (ulimit -Hn, systemd LimitNOFILE=)"
            );
        } else {
            tracing::debug!(limit, need, open, dialled, "file descriptor limit checked");
        }
    }
}
