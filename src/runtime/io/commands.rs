//! Commands from the async side: one drain per loop turn (bounded, so commands cannot starve
//! the receive loop): send queues with records to drain (handed on to [`super::outbound`]),
//! snapshot and shutdown requests, and the call commands handed on to [`super::calls`].

use std::time::Instant;

use crossbeam_channel::TryRecvError;

use super::parts::caller::NewCall;
use super::GRACEFUL_STOP_BOUND;
use super::{Host, IoThread, COMMANDS_PER_TURN};
use crate::runtime::command::Command;

impl IoThread {
    /// Returns false when the node must stop.
    pub(super) fn drain_commands(&mut self, now: Instant) -> bool {
        self.outbound.turns.start_turn();
        let go_on = self.drain_command_queue(now);
        // The calls of the last run of Call commands leave now, batched per link (K5).
        self.flush_calls(now);
        // Then the send queues left over (by a burst's or the turn's bound, or a full pipe).
        self.flush_send_queues(now);
        go_on
    }

    /// Handles up to [`COMMANDS_PER_TURN`] commands; returns false when the node must stop.
    /// Calls queue their REQUESTs; any other command first sends the ones queued before it,
    /// so commands take effect in the order they were given.
    fn drain_command_queue(&mut self, now: Instant) -> bool {
        for _ in 0..COMMANDS_PER_TURN {
            let cmd = match self.handoff.commands.try_recv() {
                Ok(c) => c,
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            };
            // A cancel does not send the REQUESTs before it: a call cancelled in the turn it
            // was made never leaves.
            if !matches!(
                cmd,
                Command::Call { .. } | Command::CancelCall(_) | Command::GrantItems { .. }
            ) {
                self.flush_calls(now);
            }
            match cmd {
                Command::SendQueued(q) => self.on_send_queued(q, now),
                Command::Snapshot(reply) => {
                    let _ = reply.send(self.snapshot(now));
                }
                Command::Shutdown(reply) => {
                    self.handoff.shutdown_reply = Some(reply);
                    if self.local.host == Host::Running {
                        // Graceful stop: refuse new calls, answer the accepted ones, then
                        // leave (MISSION C4, F6); the loop ends when the drain is done.
                        self.local.host = Host::Draining;
                        self.callee
                            .serving_mut()
                            .begin_drain(GRACEFUL_STOP_BOUND, now);
                        self.drain_calls(now);
                    }
                }
                Command::Call {
                    channel,
                    method,
                    args,
                    opts,
                    reply,
                    token,
                } => self.start_call(
                    NewCall {
                        channel,
                        method,
                        args,
                        opts,
                        reply,
                        token,
                    },
                    now,
                ),
                Command::CancelCall(token) => self.cancel_call(token, now),
                Command::GrantItems { token, items } => self.grant_items(token, items),
                Command::Serve { channel, served } => self.serve_channel(channel, served),
                Command::ServeItem(item) => self.on_serve_item(item, now),
                Command::ServeDone(done) => self.on_serve_done(done, now),
                Command::Discovery(intents, events) => self.on_discovery(intents, events, now),
                Command::AllowList {
                    loaded,
                    trigger,
                    reply,
                } => {
                    let r = self.on_allow_list(loaded, trigger, now);
                    if let Some(reply) = reply {
                        let _ = reply.send(r);
                    }
                }
            }
        }
        true
    }
}
