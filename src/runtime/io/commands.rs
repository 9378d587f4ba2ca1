//! Commands from the async side: one drain per loop turn (bounded, so commands cannot starve
//! the receive loop), one-way records to a peer or a server, publishing, snapshot and
//! shutdown requests, and the call commands handed on to [`super::calls`].

use std::time::Instant;

use bytes::Bytes;
use crossbeam_channel::TryRecvError;

use super::calls::GRACEFUL_STOP_BOUND;
use super::links::LinkKind;
use super::ready::Watch;
use super::{Host, IoThread, LinkKey, COMMANDS_PER_TURN};
use crate::runtime::command::Command;
use crate::runtime::error::{BatchSendError, SendError};
use crate::runtime::records::{self, Lane};
use crate::runtime::socket::FrameSocket;

impl IoThread {
    /// Returns false when the node must stop.
    pub(super) fn drain_commands(&mut self, now: Instant) -> bool {
        let go_on = self.drain_command_queue(now);
        // The calls of the last run of Call commands leave now, batched per link (K5).
        self.flush_calls(now);
        go_on
    }

    /// Handles up to [`COMMANDS_PER_TURN`] commands; returns false when the node must stop.
    /// Calls queue their REQUESTs; any other command first sends the ones queued before it,
    /// so commands take effect in the order they were given.
    fn drain_command_queue(&mut self, now: Instant) -> bool {
        for _ in 0..COMMANDS_PER_TURN {
            let cmd = match self.commands.try_recv() {
                Ok(c) => c,
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            };
            if !matches!(cmd, Command::Call { .. }) {
                self.flush_calls(now);
            }
            match cmd {
                Command::SendPeer {
                    peer,
                    channel,
                    payload,
                    reply,
                } => {
                    let r = self.send_peer(&peer, &channel, &payload);
                    let _ = reply.send(r);
                }
                Command::SendPeerBatch {
                    peer,
                    channel,
                    payloads,
                    reply,
                } => {
                    let r = self.send_peer_batch(&peer, &channel, &payloads);
                    let _ = reply.send(r);
                }
                Command::SendServer {
                    channel,
                    payload,
                    reply,
                } => {
                    let r = self.send_server(&channel, &payload);
                    let _ = reply.send(r);
                }
                Command::Publish { topic, payload } => {
                    self.publish(&topic, std::slice::from_ref(&payload))
                }
                Command::PublishBatch { topic, payloads } => self.publish(&topic, &payloads),
                Command::Snapshot(reply) => {
                    let _ = reply.send(self.snapshot(now));
                }
                Command::Shutdown(reply) => {
                    self.shutdown_reply = Some(reply);
                    if self.host == Host::Running {
                        // Graceful stop: refuse new calls, answer the accepted ones, then
                        // leave (MISSION C4, F6); the loop ends when the drain is done.
                        self.host = Host::Draining;
                        self.serve.begin_drain(GRACEFUL_STOP_BOUND, now);
                        self.drain_calls(now);
                    }
                }
                Command::Call {
                    channel,
                    method,
                    args,
                    opts,
                    reply,
                } => self.start_call(channel, method, args, opts, reply, now),
                Command::Serve { channel, served } => self.serve_channel(channel, served),
                Command::ServeItem(item) => self.on_serve_item(item, now),
                Command::ServeDone(done) => self.on_serve_done(done, now),
                Command::Discovery(intents, events) => self.on_discovery(intents, events, now),
            }
        }
        true
    }

    pub(super) fn send_peer(
        &mut self,
        peer: &str,
        channel: &str,
        payload: &Bytes,
    ) -> Result<(), SendError> {
        let k = self.peer_link(peer, channel)?;
        let env = message_envelope(channel)?;
        self.send_app(k, peer, &env, payload)
    }

    /// Sends `payloads` in order on one peer link; stops at the first one not taken.
    pub(super) fn send_peer_batch(
        &mut self,
        peer: &str,
        channel: &str,
        payloads: &[Bytes],
    ) -> Result<(), BatchSendError> {
        let k = self
            .peer_link(peer, channel)
            .and_then(|k| Ok((k, message_envelope(channel)?)));
        let (k, env) = k.map_err(|error| BatchSendError { sent: 0, error })?;
        for (sent, payload) in payloads.iter().enumerate() {
            self.send_app(k, peer, &env, payload)
                .map_err(|error| BatchSendError { sent, error })?;
        }
        Ok(())
    }

    /// The ready link that carries one-way records to `peer` (a RouteMesh peer's Application
    /// lane, or a client of our server), after checking the channel name.
    pub(super) fn peer_link(&self, peer: &str, channel: &str) -> Result<LinkKey, SendError> {
        if channel.is_empty() || channel.len() > 255 {
            return Err(SendError::Invalid("channel must be 1..=255 bytes".into()));
        }
        self.links
            .iter()
            .position(|l| {
                let lane_ok = match &l.kind {
                    // A RouteMesh peer's Application lane, or a client of our server.
                    LinkKind::MeshDial { lane, .. } => *lane == Lane::Application,
                    LinkKind::Inbound { lane, .. } => *lane != Lane::Completion,
                    LinkKind::ClientDial { .. } => false,
                };
                lane_ok
                    && l.conn
                        .as_ref()
                        .is_some_and(|c| c.ready && c.peer.as_ref().is_some_and(|p| p.rid == peer))
            })
            .ok_or_else(|| SendError::NotReady(peer.to_owned()))
    }

    pub(super) fn send_server(&mut self, channel: &str, payload: &Bytes) -> Result<(), SendError> {
        if channel.is_empty() || channel.len() > 255 {
            return Err(SendError::Invalid("channel must be 1..=255 bytes".into()));
        }
        let ready: Vec<LinkKey> = (0..self.links.len())
            .filter(|k| {
                let l = &self.links[*k];
                matches!(&l.kind, LinkKind::ClientDial { server }
                    if self.cfg.servers.get(*server).is_some_and(|s| s.channel == channel))
                    && l.conn.as_ref().is_some_and(|c| c.ready)
            })
            .collect();
        if ready.is_empty() {
            return Err(SendError::NotReady(channel.to_owned()));
        }
        // Spread records over the ready servers.
        let pick = ready[self.server_rr % ready.len()];
        self.server_rr = self.server_rr.wrapping_add(1);
        let env = message_envelope(channel)?;
        self.send_app(pick, channel, &env, payload)
    }

    /// Sends one MESSAGE: `env` (from [`message_envelope`]) and the payload as it is.
    pub(super) fn send_app(
        &mut self,
        k: LinkKey,
        who: &str,
        env: &[u8],
        payload: &[u8],
    ) -> Result<(), SendError> {
        let Some(c) = self.links.get(k).and_then(|l| l.conn.as_ref()) else {
            return Err(SendError::NotReady(who.to_owned()));
        };
        let sent = match (self.slots.get(c.slot), c.route.as_deref()) {
            (Some(Some(s)), Some(route)) => s.socket.send_frames(&[route, env, payload]),
            (Some(Some(s)), None) => s.socket.send_frames(&[env, payload]),
            _ => Err(crate::runtime::socket::SendError::Unreachable),
        };
        // The send may have consumed the ZMQ_FD signal of a record that arrived meanwhile:
        // check the socket's ZMQ_EVENTS before the loop sleeps (see `ready`).
        self.ready.touch(Watch::Socket(c.slot));
        match sent {
            Ok(()) => {
                metrics::counter!("zmesh_app_records_sent_total").increment(1);
                Ok(())
            }
            Err(crate::runtime::socket::SendError::Full) => {
                Err(SendError::WouldBlock(who.to_owned()))
            }
            Err(_) => Err(SendError::NotReady(who.to_owned())),
        }
    }
}

/// The MESSAGE envelope of `channel`, a refused channel being an argument error.
pub(super) fn message_envelope(channel: &str) -> Result<Vec<u8>, SendError> {
    records::message_envelope(channel).map_err(|e| SendError::Invalid(e.to_string()))
}
