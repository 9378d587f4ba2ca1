//! The caller side of calls as a part of the node core (MISSION C1-C3, C5, K2, K5): [`Calls`]
//! owns this node's call table, the pending calls by the application's token, the REQUESTs
//! of this loop turn with the messages they leave in, and the round-robin position among
//! servers, and decides what each input does to them. The shell holds the application's
//! side of each call (its reply channel) and hands it what [`Calls::poll_item`] and
//! [`Calls::poll_completion`] give out.
//!
//! A call's key is the physical connection its answers travel on: when that connection
//! leaves ready, the call fails at once (MISSION C2).

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::proto::calls::batch;
use crate::proto::calls::{
    ttl_on_wire, CallError, CallId, CallTable, Completion, Disposition, StreamItem, Unrouted,
};
use crate::proto::contract::{self, Semantics};
use crate::proto::node::keys::{CallKey, LinkKey};
use crate::proto::ops;
use crate::proto::wire::{self, Name, Record, WireError};

/// How the REQUESTs for one link may share a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendPolicy {
    /// Each alone: the node behind the link turned batching off.
    Alone,
    /// In BATCHes (version 1).
    Batch,
    /// In CALLS records where consecutive calls share their header, BATCHes otherwise: the
    /// link negotiated capability `calls`. With `offsets` (the link negotiated `ids16` too)
    /// a CALLS record writes its ids as offsets (CALLS16, WIRE.md §4.19).
    Grouped {
        /// Whether CALLS records go in the offset form.
        offsets: bool,
    },
}

/// How a message of REQUESTs is encoded: [`encode_requests`] or [`encode_calls`].
type Encode = fn(Vec<wire::Request>) -> Result<Vec<Vec<u8>>, wire::WireError>;

/// One message of `calls` for `link`, encoded by `encode`.
fn message(link: LinkKey, calls: Vec<(CallId, wire::Request)>, encode: Encode) -> Requests {
    let (ids, requests): (Vec<CallId>, Vec<wire::Request>) = calls.into_iter().unzip();
    Requests {
        link,
        frames: encode(requests).ok(),
        ids,
    }
}

/// `calls` for `link` in the messages [`batch::frame`] cuts them into, in order: lone
/// REQUESTs, BATCHes and, where `grouped` (the link negotiated capability `calls`), CALLS
/// records for runs of calls that share their header, in the offset form where `offsets`.
fn framed(
    link: LinkKey,
    calls: Vec<(CallId, wire::Request)>,
    grouped: bool,
    offsets: bool,
    out: &mut Vec<Requests>,
) {
    let (ids, requests): (Vec<CallId>, Vec<wire::Request>) = calls.into_iter().unzip();
    let messages = batch::frame(&requests, grouped);
    let mut requests = requests.into_iter();
    for (range, framing) in messages {
        let part: Vec<wire::Request> = requests.by_ref().take(range.len()).collect();
        let frames = match framing {
            batch::Framing::Calls => encode_calls(part, offsets),
            batch::Framing::Request | batch::Framing::Batch => encode_requests(part),
        };
        out.push(Requests {
            link,
            frames: frames.ok(),
            ids: ids.get(range).map(<[CallId]>::to_vec).unwrap_or_default(),
        });
    }
}

/// REQUEST.
fn request(
    call_id: NonZeroU64,
    ttl_ms: Option<NonZeroU64>,
    semantics: wire::Semantics,
    channel: &str,
    method: &str,
    idempotency_key: Option<&str>,
    payload: Bytes,
) -> Result<wire::Request, WireError> {
    let name = |s: &str| Name::new(s.to_owned());
    Ok(wire::Request {
        call_id,
        ttl_ms,
        semantics,
        channel: name(channel)?,
        method: name(method)?,
        idempotency_key: idempotency_key
            .filter(|k| !k.is_empty())
            .map(name)
            .transpose()?,
        payload,
    })
}

/// The frames of one message carrying `requests`: a lone REQUEST for one, a BATCH for two or
/// more (MISSION K5: a lone call is never wrapped).
fn encode_requests(requests: Vec<wire::Request>) -> Result<Vec<Vec<u8>>, WireError> {
    lone_or(requests, |r| Ok(Record::Batch(wire::Batch::new(r)?)))
}

/// Calls that share channel, method, ttl and semantics as one message: a lone REQUEST, or
/// one CALLS record (only where capability `calls` is in effect, WIRE.md §4.14), its ids as
/// offsets where `offsets` (CALLS16: only where `ids16` is in effect too, §4.19).
fn encode_calls(requests: Vec<wire::Request>, offsets: bool) -> Result<Vec<Vec<u8>>, WireError> {
    lone_or(requests, |r| {
        let calls = wire::Calls::new(r)?;
        Ok(Record::Calls(if offsets {
            calls.with_offsets()
        } else {
            calls
        }))
    })
}

/// A lone call as a REQUEST (a lone call is never wrapped), several as the record `many`
/// makes of them.
fn lone_or(
    mut requests: Vec<wire::Request>,
    many: impl FnOnce(Vec<wire::Request>) -> Result<Record, WireError>,
) -> Result<Vec<Vec<u8>>, WireError> {
    if requests.len() == 1 {
        if let Some(r) = requests.pop() {
            return Ok(Record::Request(r).encode());
        }
    }
    Ok(many(requests)?.encode())
}

/// A call the application asked for, as the core needs it.
pub(crate) struct CallStart<'a> {
    /// The channel called.
    pub(crate) channel: &'a str,
    /// The method called.
    pub(crate) method: &'a str,
    /// The encoded arguments.
    pub(crate) args: Bytes,
    /// Its ttl, if it has one (zero counts as none).
    pub(crate) ttl: Option<Duration>,
    /// The semantics the caller was built against (MISSION K1).
    pub(crate) semantics: Option<Semantics>,
    /// Its idempotency key, if any (an empty one counts as none).
    pub(crate) idempotency_key: Option<&'a str>,
    /// The application's name for it, for a cancel.
    pub(crate) token: u64,
}

/// A call [`Calls::start`] started: its id, and what the operations registry records of it.
pub(crate) struct Started {
    /// The call's id.
    pub(crate) id: CallId,
    /// The RID of the node it went to, or the channel's target when it found none.
    pub(crate) target: String,
    /// Its semantics as the wire says them.
    pub(crate) semantics: wire::Semantics,
}

/// A finished call, as [`Calls::poll_completion`] hands it out.
pub(crate) struct Finished {
    /// The call.
    pub(crate) id: CallId,
    /// Its answer: the REPLY's payload, or why it failed.
    pub(crate) result: Result<Completion, CallError>,
    /// The REPLY said it was replayed from the callee's idempotency record (WIRE.md §4.17).
    pub(crate) replayed: bool,
}

/// Where a call goes, as the shell found it.
pub(crate) struct Route {
    /// The link its REQUEST goes out on.
    pub(crate) send: LinkKey,
    /// The connection its answers travel on (its lease).
    pub(crate) key: CallKey,
    /// The RID of the node behind it, if known (for the operations registry).
    pub(crate) target: Option<String>,
}

/// One message of REQUESTs for one link: a lone REQUEST or a BATCH.
pub(crate) struct Requests {
    /// The link to send it on.
    pub(crate) link: LinkKey,
    /// Its frames, or `None` when it could not be encoded (its calls fail as never sent).
    pub(crate) frames: Option<Vec<Vec<u8>>>,
    /// The calls in it, in order.
    ids: Vec<CallId>,
}

impl Requests {
    /// How many calls it carries.
    pub(crate) fn calls(&self) -> usize {
        self.ids.len()
    }

    /// The calls in it, in order.
    pub(crate) fn ids(&self) -> &[CallId] {
        &self.ids
    }
}

/// The caller's state (see the module docs). Its fields are its own: the shell talks to it
/// through its methods.
#[derive(Default)]
pub(crate) struct Calls {
    /// Calls this node made, leased on the connection that carried them (MISSION C1, C2).
    table: CallTable<CallKey>,
    /// The pending calls by the application's token, for a cancel.
    tokens: HashMap<u64, CallId>,
    /// The application's token of each call not yet handed out finished.
    token_of: HashMap<CallId, u64>,
    /// Calls the REPLY that completed them said were replayed (WIRE.md §4.17), until the
    /// completion is handed out.
    replayed: HashSet<CallId>,
    /// Streams that lost an item to their application's full buffer: they end as
    /// [`CallError::StreamOverrun`], and no later item of theirs is handed out.
    overrun: HashMap<CallId, usize>,
    /// REQUESTs of calls started in this loop turn, with the link they go on: sent together
    /// (per link, as BATCHes) before any other command is handled and at the end of the
    /// command drain (MISSION K5).
    outgoing: Vec<(LinkKey, CallId, wire::Request)>,
    /// Round-robin position among the ready servers of a channel.
    rr: usize,
    /// Channels some peer ever announced a Server membership for.
    known_servers: HashSet<String>,
}

impl Calls {
    /// A peer announced a Server membership for `channel`: a call to it that finds no
    /// ready server has no ready peer, not no registration.
    pub(crate) fn learn_server(&mut self, channel: &str) {
        if !self.known_servers.contains(channel) {
            self.known_servers.insert(channel.to_owned());
        }
    }

    /// Picks the connection for a call to any server of `channel` among the `ready` routes
    /// (REQUEST link, call key), round-robin. `configured`: a ClientServer server of the
    /// channel is configured, ready or not.
    pub(crate) fn pick(
        &mut self,
        channel: &str,
        ready: &[(LinkKey, CallKey)],
        configured: bool,
    ) -> Result<(LinkKey, CallKey), Unrouted> {
        if ready.is_empty() {
            return Err(if configured || self.known_servers.contains(channel) {
                Unrouted::NoReadyPeer
            } else {
                Unrouted::NoRegistration
            });
        }
        let pick = ready[self.rr % ready.len()];
        self.rr = self.rr.wrapping_add(1);
        Ok(pick)
    }

    /// Starts a call on `route` (or fails it at once as never sent, for the reason given):
    /// its REQUEST waits for [`Calls::take_requests`], which the shell calls before any
    /// other command and at the end of the command drain, so the REQUEST leaves in this loop
    /// turn (or the call fails at once as never sent).
    pub(crate) fn start(
        &mut self,
        call: CallStart<'_>,
        route: Result<Route, Unrouted>,
        now: Instant,
    ) -> Started {
        let ttl = call.ttl.filter(|t| !t.is_zero());
        let semantics = contract::to_wire(call.semantics);
        let mut target = None;
        let id = match route {
            Err(why) => self.table.start_unrouted(why, now),
            Ok(route) => {
                let id = self.table.start(route.key, ttl, now);
                target = route.target;
                let request = request(
                    id.get(),
                    ttl_on_wire(ttl),
                    semantics,
                    call.channel,
                    call.method,
                    call.idempotency_key,
                    call.args,
                );
                match request {
                    Ok(r) => self.outgoing.push((route.send, id, r)),
                    Err(_) => {
                        let _ = self.table.handle_send_failed(id, now);
                    }
                }
                id
            }
        };
        if self.table.is_pending(id) {
            self.tokens.insert(call.token, id);
        }
        self.token_of.insert(id, call.token);
        Started {
            id,
            target: target.unwrap_or_else(|| ops::channel_target(call.channel)),
            semantics,
        }
    }

    /// The application stopped waiting for the call it named `token`, at `now`: the call
    /// ends as `Cancelled` (whether it was sent says whether it may have run). Its REQUEST,
    /// if still waiting for this turn's send, never leaves; if it left, the callee is to be
    /// told ([`Calls::take_cancels`]). A token of a call that already ended changes nothing.
    /// Returns whether the cancel ended a call.
    pub(crate) fn cancel(&mut self, token: u64, now: Instant) -> bool {
        let Some(id) = self.tokens.remove(&token) else {
            return false;
        };
        self.table.handle_cancel(id, now) == Disposition::Applied
    }

    /// Where a CREDIT for the stream the application named `token` goes: its connection and
    /// call id, while it is pending.
    pub(crate) fn credit_target(&self, token: u64) -> Option<(CallKey, NonZeroU64)> {
        let id = *self.tokens.get(&token)?;
        Some((self.table.target(id)?, id.get()))
    }

    /// The calls whose callers stopped waiting after their REQUEST left (cancelled, or past
    /// their deadline), each with the connection its answers travel on: a CANCEL to send
    /// where that connection's pair negotiated it.
    pub(crate) fn take_cancels(&mut self) -> Vec<(CallKey, NonZeroU64)> {
        std::iter::from_fn(|| self.table.poll_cancel())
            .map(|(key, id)| (key, id.get()))
            .collect()
    }

    /// True if REQUESTs of this turn wait to be sent.
    pub(crate) fn has_requests(&self) -> bool {
        !self.outgoing.is_empty()
    }

    /// The REQUESTs of this turn as messages (MISSION K5): the calls for one link go, in
    /// order, as one BATCH when there are two or more (cut by [`batch::split`] above
    /// [`batch::MAX_BATCH_CALLS`]) and as a lone REQUEST otherwise, or each alone when
    /// `policy` says the node behind the link turned batching off. Where the link negotiated
    /// capability `calls`, a run of consecutive calls sharing channel, method, ttl and
    /// semantics goes as CALLS records instead (WIRE.md §4.14), the shared fields said once;
    /// calls never change order. Send each, in order, and report with
    /// [`Calls::handle_sent`]: a message the link cannot take now fails every call in it at
    /// once as never sent (a frame is never queued on a link that cannot send now, MISSION
    /// C3).
    pub(crate) fn take_requests(
        &mut self,
        policy: impl Fn(LinkKey) -> SendPolicy,
    ) -> Vec<Requests> {
        let mut per_link: Vec<(LinkKey, Vec<(CallId, wire::Request)>)> = Vec::new();
        // A call that ended before its REQUEST left (cancelled in this turn) must not leave.
        let table = &self.table;
        for (link, id, request) in self
            .outgoing
            .drain(..)
            .filter(|(_, id, _)| table.is_pending(*id))
        {
            match per_link.iter_mut().find(|(l, _)| *l == link) {
                Some((_, calls)) => calls.push((id, request)),
                None => per_link.push((link, vec![(id, request)])),
            }
        }
        let mut out = Vec::new();
        for (link, calls) in per_link {
            match policy(link) {
                SendPolicy::Alone => {
                    for call in calls {
                        out.push(message(link, vec![call], encode_requests));
                    }
                }
                SendPolicy::Batch => framed(link, calls, false, false, &mut out),
                SendPolicy::Grouped { offsets } => framed(link, calls, true, offsets, &mut out),
            }
        }
        out
    }

    /// The message `requests` was handed to its socket (`sent`), or not.
    pub(crate) fn handle_sent(&mut self, requests: &Requests, sent: bool, now: Instant) {
        for &id in &requests.ids {
            if sent {
                let _ = self.table.handle_sent(id, now);
            } else {
                let _ = self.table.handle_send_failed(id, now);
            }
        }
    }

    /// An ACCEPT for call `call_id`, arriving on connection `key`.
    pub(crate) fn handle_accept(&mut self, key: CallKey, call_id: NonZeroU64, now: Instant) {
        let _ = self.table.handle_accept(CallId(call_id), key, now);
    }

    /// ITEM `seq` of call `call_id`, arriving on connection `key`.
    pub(crate) fn handle_item(
        &mut self,
        key: CallKey,
        call_id: NonZeroU64,
        seq: u64,
        payload: Bytes,
        now: Instant,
    ) {
        let _ = self
            .table
            .handle_item(CallId(call_id), key, seq, payload, now);
    }

    /// The REPLY of call `call_id`, arriving on connection `key`; `replayed`: its replayed
    /// mark (WIRE.md §4.17).
    pub(crate) fn handle_reply(
        &mut self,
        key: CallKey,
        call_id: NonZeroU64,
        code: wire::ReplyCode,
        payload: Bytes,
        replayed: bool,
        now: Instant,
    ) {
        let id = CallId(call_id);
        let applied = self.table.handle_reply(id, key, code, payload, now);
        // The REPLY that completes a call is the answer it reports (a late or foreign one
        // changes nothing).
        if replayed && applied == Disposition::Applied {
            self.replayed.insert(id);
        }
    }

    /// Connection `key` left ready: every call leased on it fails; returns how many.
    pub(crate) fn handle_connection_lost(&mut self, key: CallKey, now: Instant) -> usize {
        self.table.handle_connection_lost(key, now)
    }

    /// The node stops: every call still out ends now, each saying whether it may have run.
    pub(crate) fn handle_shutdown(&mut self, now: Instant) {
        self.table.handle_shutdown(now);
    }

    /// Applies the call deadlines due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.table.handle_timeout(now);
    }

    /// The earliest call deadline.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.table.poll_timeout()
    }

    /// Calls pending (MISSION C5).
    pub(crate) fn pending(&self) -> usize {
        self.table.pending()
    }

    /// Calls pending on connection `key`.
    pub(crate) fn pending_on(&self, key: CallKey) -> usize {
        self.table.pending_on(key)
    }

    /// The application's buffer of stream `id` was full when an item of it came
    /// (`buffered` items in it): the stream ends as [`CallError::StreamOverrun`] (the callee
    /// is told), also if its REPLY had already arrived, and none of its later items is handed
    /// out.
    pub(crate) fn handle_overrun(&mut self, id: CallId, buffered: usize, now: Instant) {
        self.overrun.insert(id, buffered);
        let _ = self.table.handle_overrun(id, buffered, now);
    }

    /// Whether stream `id` overran ([`Calls::handle_overrun`]): none of its later items is
    /// to be handed to its application.
    pub(crate) fn is_overrun(&self, id: CallId) -> bool {
        self.overrun.contains_key(&id)
    }

    /// The next stream item, in order; call before [`Calls::poll_completion`] (a call's
    /// items come before its end). An item of a stream that overran is not to be handed out
    /// ([`Calls::is_overrun`]).
    #[must_use]
    pub(crate) fn poll_item(&mut self) -> Option<StreamItem> {
        self.table.poll_item()
    }

    /// The next finished call. A stream that lost an item to a full buffer is never passed
    /// off as whole, even if its REPLY had already arrived.
    #[must_use]
    pub(crate) fn poll_completion(&mut self) -> Option<Finished> {
        let (id, result) = self.table.poll_completion()?;
        let replayed = self.replayed.remove(&id);
        let (result, replayed) = match self.overrun.remove(&id) {
            Some(buffered) => (Err(CallError::StreamOverrun { buffered }), false),
            None => (result, replayed),
        };
        if let Some(token) = self.token_of.remove(&id) {
            self.tokens.remove(&token);
        }
        Some(Finished {
            id,
            result,
            replayed,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::proto::wire::{Kind, Name, Record, Semantics};

    fn call(id: u64, method: &str) -> (CallId, wire::Request) {
        let n = NonZeroU64::new(id).unwrap();
        (
            CallId(n),
            wire::Request {
                call_id: n,
                ttl_ms: None,
                semantics: Semantics::Query,
                channel: Name::new("pump").unwrap(),
                method: Name::new(method).unwrap(),
                idempotency_key: None,
                payload: Bytes::new(),
            },
        )
    }

    /// MISSION K5, X4: runs of two or more calls that share their header go as CALLS (as
    /// CALLS16 where the link speaks `ids16`), the calls between runs as a lone REQUEST or a
    /// BATCH, and no call changes its place.
    #[test]
    fn k5_x4_grouped_calls_keep_their_order() {
        let link = <LinkKey as crate::proto::node::keys::Key>::from_index(0);
        let calls = || {
            vec![
                call(1, "read"),
                call(2, "read"),
                call(3, "set"),
                call(4, "read"),
                call(5, "read"),
                call(6, "read"),
                call(7, "set"),
                call(8, "get"),
            ]
        };
        let shape = |offsets: bool| -> Vec<(Kind, Vec<u64>)> {
            let mut out = Vec::new();
            framed(link, calls(), true, offsets, &mut out);
            let caps = wire::Capabilities::CALLS.union(wire::Capabilities::IDS16);
            out.iter()
                .map(|m| {
                    let frames = m.frames.as_ref().expect("encodes");
                    let kind =
                        Record::decode_in(frames, caps, |f: &Vec<u8>| Bytes::copy_from_slice(f))
                            .expect("decodes")
                            .kind();
                    (kind, m.ids.iter().map(|id| id.get().get()).collect())
                })
                .collect()
        };
        let expect = |calls: Kind| {
            vec![
                (calls, vec![1, 2]),
                (Kind::Request, vec![3]),
                (calls, vec![4, 5, 6]),
                (Kind::Batch, vec![7, 8]),
            ]
        };
        assert_eq!(shape(false), expect(Kind::Calls));
        assert_eq!(shape(true), expect(Kind::Calls16));
    }

    fn key(i: usize) -> CallKey {
        (
            <LinkKey as crate::proto::node::keys::Key>::from_index(i),
            crate::proto::ConnId(i as u64),
        )
    }

    fn route(i: usize) -> Route {
        Route {
            send: <LinkKey as crate::proto::node::keys::Key>::from_index(i),
            key: key(i),
            target: Some("b".to_owned()),
        }
    }

    fn start(calls: &mut Calls, token: u64, now: Instant) -> CallId {
        let call = CallStart {
            channel: "pump",
            method: "read",
            args: Bytes::new(),
            ttl: None,
            semantics: None,
            idempotency_key: None,
            token,
        };
        calls.start(call, Ok(route(0)), now).id
    }

    /// A stream whose application buffer overflowed ends as `StreamOverrun` even when its
    /// REPLY had already arrived (it is never passed off as whole, X2), exactly once (C1);
    /// a finished call's token names nothing any more, so a late cancel or CREDIT changes
    /// nothing; and a call to a channel nobody ever served fails as `NoRegistration`, one
    /// some peer serves but none is ready as `NoReadyPeer` (C3: neither ran).
    #[test]
    fn c1_x2_an_overrun_stream_never_ends_whole_and_its_token_is_forgotten() {
        let now = Instant::now();
        let mut calls = Calls::default();
        let id = start(&mut calls, 7, now);
        let sent = calls.take_requests(|_| SendPolicy::Batch);
        assert_eq!(sent.len(), 1);
        calls.handle_sent(&sent[0], true, now);
        let call_id = id.get();
        calls.handle_accept(key(0), call_id, now);
        calls.handle_item(key(0), call_id, 0, Bytes::from_static(b"i0"), now);
        calls.handle_reply(
            key(0),
            call_id,
            wire::ReplyCode::Ok,
            Bytes::from_static(b"done"),
            true,
            now,
        );
        let item = calls.poll_item().expect("the item");
        assert!(!calls.is_overrun(item.id));
        calls.handle_overrun(item.id, 4, now);
        assert!(calls.is_overrun(id));
        let done = calls.poll_completion().expect("one completion");
        assert_eq!(done.id, id);
        assert!(matches!(
            done.result,
            Err(CallError::StreamOverrun { buffered: 4 })
        ));
        assert!(!done.replayed, "an overrun answer is not the replayed one");
        assert!(calls.poll_completion().is_none(), "completed exactly once");
        assert!(!calls.is_overrun(id));
        assert!(calls.credit_target(7).is_none());
        assert!(!calls.cancel(7, now));

        assert!(matches!(
            calls.pick("valve", &[], false),
            Err(Unrouted::NoRegistration)
        ));
        calls.learn_server("valve");
        assert!(matches!(
            calls.pick("valve", &[], false),
            Err(Unrouted::NoReadyPeer)
        ));
        let ready = [(route(1).send, key(1)), (route(2).send, key(2))];
        let picks: Vec<_> = (0..4)
            .map(|_| calls.pick("valve", &ready, false).expect("ready").1)
            .collect();
        assert_eq!(picks, vec![key(1), key(2), key(1), key(2)]);
    }
}
