//! The end of a node: orderly CLOSE on every ready connection, then every socket, monitor
//! and timer goes, and the contexts are terminated (MISSION F6).

use std::time::Instant;

use super::parts::sockets::close_stopping_monitor;
use super::IoThread;
use crate::proto::node::core;
use crate::proto::node::link::note;
use crate::proto::state::{FailureReason, Recovery};
use crate::runtime::records::{self, CloseReason};
use crate::runtime::socket::Sockets;
use crate::runtime::transport::{Transport, TransportSocket};

impl IoThread {
    /// Orderly close of every ready connection, then every socket, monitor and timer goes.
    pub(super) fn close_everything(&mut self) {
        let now = Instant::now();
        // This node's own calls still out end now, each saying whether it may have run.
        self.caller.calls_mut().handle_shutdown(now);
        self.drain_calls(now);
        // Handlers still running serve nobody any more.
        self.callee.handle_stop();
        // One-way records queued before the stop leave ahead of the CLOSE, as far as the
        // pipes take them; what is left is counted and named.
        for (k, unsent) in self.flush_send_queues_at_stop() {
            let detail = format!("node stopped; {unsent} queued records not sent");
            let l = &mut self.core.links[k];
            note(
                l.state
                    .handle_failure(FailureReason::HostStopped, &detail, Recovery::Hold, now),
            );
            let state = l.state.state();
            let link = self.local.link_id(&self.core.links[k].kind);
            self.app
                .emit_state(link, state, Some(FailureReason::HostStopped), &detail);
        }
        for k in self.core.links.keys() {
            if self.core.links[k].conn.as_ref().is_some_and(|c| c.ready) {
                let _ = self.send_on_link(k, records::close(CloseReason::Shutdown));
            }
            if let Some(conn) = self.core.links[k].conn.take() {
                core::close_conn(self, k, conn, FailureReason::HostStopped, now);
            }
            // Dropped before libzmq confirmed the close: a monitor dropped that early can
            // keep the context's reaper waiting to send it MONITOR_STOPPED, until the context
            // is terminated, which the end of this function does.
            self.confirm_close(k);
            self.core.links[k].retry_at = None;
        }
        for m in std::mem::take(&mut self.sockets.overdue_closing) {
            self.sockets.ready.deregister(&m);
        }
        for k in self.sockets.slots.keys() {
            if let Some(slot) = self.take_slot(k) {
                // Dialled sockets carrying our CLOSE need a moment to flush it.
                let _ = slot.socket.linger_on_close();
                close_stopping_monitor(slot);
            }
        }
        self.core.timers.clear();
        self.core.accepting.inbound.clear();
        self.core.subs.clear();
        if let Some(mut p) = self.fanout.publisher.take() {
            let monitor = p.monitor.take();
            if let Some(m) = &monitor {
                self.sockets.ready.deregister(m);
            }
            if let Some(socket) = p.socket.close() {
                self.sockets.ready.deregister(&socket);
                // Records published just before the stop get the linger to leave.
                let _ = socket.linger_on_close();
                // Its monitor stops first: a monitor closed before its socket can leave a
                // libzmq thread waiting to send it the socket's last events.
                match monitor {
                    Some(m) => drop(Sockets::close_stopping_monitor(socket, m)),
                    None => socket.close(),
                }
            }
        }
        self.core.liveness.clear();
        // Dropping the contexts terminates them once their last socket is closed: after this,
        // libzmq has released every socket, connection and listening port of the node.
        self.sockets.contexts = Sockets::new(0);
        self.app.flush();
        if let Some(reply) = self.handoff.shutdown_reply.take() {
            let _ = reply.send(());
        }
    }
}
