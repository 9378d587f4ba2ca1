//! Running out of descriptors. A link or subscription whose socket cannot be opened because
//! the node ran out (the process's limit, the system's file table, libzmq's socket limit)
//! fails with `resource_exhausted` and the real cause with its figures ([`Exhausted`]),
//! and is retried with the normal backoff; its state event is emitted on
//! the first such failure only. What a failure does to the link or subscription and when the
//! episode's one warning is logged are the node core's
//! ([`crate::proto::node::core::exhaustion`]); this file works out the cause from the
//! descriptor figures the OS gives, logs, and carries out the core's decisions. At start,
//! [`IoThread::check_fd_limit`] warns when the limit is below what the configuration needs.

use std::time::Instant;

use super::{IoThread, LinkKey, SubKey};
use crate::proto::node::core::exhaustion;
use crate::runtime::fds::{self, Exhausted, Gauge};
use crate::runtime::link::LinkId;
use crate::runtime::socket::{
    FDS_PER_CONTEXT, FDS_PER_DIALLED, FDS_PER_MONITORED, SOCKETS_PER_CONTEXT,
};
use crate::runtime::transport::SocketError;

impl IoThread {
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
        let open = exhaustion::open_connections(&self.core);
        let cause = fds::classify_exhausted(open, self.sockets.exhaustion.base)?;
        self.sockets.exhaustion.last = Some((now, cause.clone()));
        Some(cause)
    }

    /// Counts a failure of `what` for `cause` in the episode and logs the episode's warning
    /// if the core's [`Episode`](exhaustion::Episode) says it is due.
    fn note_exhausted(&mut self, what: &str, cause: &Exhausted, now: Instant) {
        if let Some(left_out) = self.sockets.exhaustion.episode.handle_failure(now) {
            tracing::warn!(
                first = what,
                left_out,
                "cannot open sockets: {cause}; links that need one fail with \
                 resource_exhausted and retry with their backoff (one line per episode; \
                 raise the limit or lower the connections: README \"File descriptors\")"
            );
        }
    }

    /// A socket opened: a running episode ends (logged at info level).
    pub(super) fn socket_opened(&mut self, now: Instant) {
        let x = &mut self.sockets.exhaustion;
        let Some(failures) = x.episode.handle_opened() else {
            return;
        };
        x.last = None;
        let (open, limit) = x.gauge.read(now);
        tracing::info!(
            failures,
            open,
            limit,
            "sockets open again after running out of descriptors"
        );
    }

    /// Dialled link `k` could not open or set up its socket for `endpoint`: running out is
    /// a named failure of the link ([`exhaustion::link_exhausted`]); any other error is
    /// logged and retried later ([`exhaustion::link_open_error`]).
    pub(super) fn dial_failed(
        &mut self,
        k: LinkKey,
        e: impl SocketError,
        endpoint: &str,
        now: Instant,
    ) {
        let Some(cause) = self.exhausted(&e, now) else {
            exhaustion::link_open_error(&mut self.core, k, now);
            tracing::warn!(error = %e, endpoint, "cannot open dialled socket");
            return;
        };
        let link = self.local.link_id(&self.core.links[k].kind);
        tracing::debug!(link = %link, "socket not opened: {cause}");
        self.note_exhausted(&link.to_string(), &cause, now);
        exhaustion::link_exhausted(self, k, &cause.to_string(), now);
    }

    /// Subscription `i` could not open its SUB socket: as [`IoThread::dial_failed`]
    /// ([`exhaustion::sub_exhausted`], [`exhaustion::sub_open_error`]).
    pub(super) fn sub_open_failed(&mut self, i: SubKey, e: impl SocketError, now: Instant) {
        let endpoint = self.core.subs[i].endpoint.clone();
        let Some(cause) = self.exhausted(&e, now) else {
            exhaustion::sub_open_error(&mut self.core, i, now);
            tracing::warn!(error = %e, endpoint, "cannot open SUB socket");
            return;
        };
        let link = LinkId::Subscription { endpoint };
        tracing::debug!(link = %link, "socket not opened: {cause}");
        self.note_exhausted(&link.to_string(), &cause, now);
        exhaustion::sub_exhausted(self, i, &cause.to_string(), now);
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
