//! The calls' decisions over the node core, over what they ask of their shell beyond
//! [`Shell`] ([`CallShell`]: this node's call table, the hand-offs to the caller's and the
//! callee's parts, a CREDIT's send, the end of a calls input). The shell holds the
//! application's side of each call (its reply channel, the served channels, the running
//! handlers) and sends the records; where they go and whether they go is decided here.
//!
//! A call's key is the physical connection its answers travel on (MISSION C2): a RouteMesh
//! peer's Completion lane connection, or the ClientServer connection. Its REQUEST goes on
//! the peer's Application lane, or on the ClientServer connection itself.
//!
//! - Where a call goes ([`route_call`]): to a named peer, its Application lane with the
//!   call keyed on its Completion lane, both ready ([`mesh_route`]); otherwise a ready
//!   server of the channel, round-robin, as the call table picks among the routes.
//! - How a turn's REQUESTs for one link share a message ([`send_policy`], MISSION K5): each
//!   alone where the node behind the link turned `batch_calls` off, in CALLS records (in the
//!   offset form with `ids16`) where the connection negotiated `calls`, in BATCHes
//!   otherwise.
//! - Which calls a lost connection fails ([`lost_calls_key`], [`handle_connection_lost`],
//!   MISSION C2): a Completion lane's or ClientServer connection's own; a failed Application
//!   lane fails the peer's Completion-lane calls too, unless the peer closed it in order.
//! - Whether an answer belongs to a call key ([`handle_call_answer`]: answers never travel
//!   on an Application lane).
//! - Where the REQUESTs of a call key went ([`request_link`]), and so where a CANCEL
//!   ([`cancel_link`]) or a CREDIT ([`credit_link`], [`grant_items`]) goes: only where
//!   that connection negotiated the record; how an answer leaves on its route
//!   ([`answer_form`]: packed into ANSWERS, a REPLY's replayed mark kept, only where
//!   negotiated).
//! - Where a REQUEST's answers go and who sent it ([`request_route`], [`caller_of`]): a
//!   REQUEST on an Application lane is answered on the caller's Completion lane, one on a
//!   ClientServer connection on that connection, one on a Completion lane not at all; a
//!   REQUEST, BATCH, CANCEL or CREDIT with no way to answer changes nothing
//!   ([`handle_request`], [`handle_batch`], [`handle_cancel`], [`handle_credit`]).

use std::num::NonZeroU64;
use std::time::Instant;

use super::{negotiated, Answer, NodeCore, Shell};
use crate::proto::calls::Unrouted;
use crate::proto::node::admit::Configured;
use crate::proto::node::callee::From;
use crate::proto::node::caller::{Calls, SendPolicy};
use crate::proto::node::keys::{CallKey, LinkKey, Tracked};
use crate::proto::node::link::{Link, LinkKind, ServerChannels};
use crate::proto::node::timers::TimerOwner;
use crate::proto::state::FailureReason;
use crate::proto::wire::{self, Capabilities, Lane};
use crate::proto::ConnId;

/// What the calls' decisions ask of their shell beyond [`Shell`]: this node's call table
/// beside the core, and the consequences that reach the caller's and the callee's parts
/// (which hold the application's channels and the handlers) or a socket.
pub(crate) trait CallShell: Shell {
    /// The node core, to change, beside this node's call table.
    fn core_with_calls(&mut self) -> (&mut NodeCore, &mut Calls);
    /// The calls keyed `key` fail with their connection (MISSION C2): this node's calls as
    /// "may have run", and the calls served for the caller behind it.
    fn fail_calls_on(&mut self, key: CallKey, now: Instant);
    /// An answer for this node's calls keyed `key`.
    fn answer_call(&mut self, key: CallKey, answer: Answer, now: Instant);
    /// Counts an answer that no call of this node can be waiting for.
    fn count_ignored_answer(&mut self);
    /// Sends a CREDIT of `items` for call `call_id` on link `link`, in order behind the
    /// answers waiting there (never dropped).
    fn send_credit(&mut self, link: LinkKey, call_id: NonZeroU64, items: NonZeroU64);
    /// Hands the callee a REQUEST that arrived on link `k`, answered as `from` says.
    fn callee_request(
        &mut self,
        k: LinkKey,
        from: From<CallKey>,
        request: wire::Request,
        now: Instant,
    );
    /// Hands the callee a BATCH that arrived on link `k`, answered on `key` (each call of
    /// it the callee lets through is then a REQUEST of link `k`).
    fn callee_batch(
        &mut self,
        k: LinkKey,
        key: CallKey,
        requests: Vec<wire::Request>,
        now: Instant,
    );
    /// Tells the callee the caller behind `key` no longer waits for call `call_id`.
    fn callee_cancel(&mut self, key: CallKey, call_id: NonZeroU64, now: Instant);
    /// Tells the callee stream call `call_id` of the caller behind `key` may send `items`
    /// more.
    fn callee_credit(&mut self, key: CallKey, call_id: NonZeroU64, items: u64, now: Instant);
    /// A calls input is handled: finished calls go to the application, the CANCELs and the
    /// callee's answers out.
    fn drain_calls(&mut self, now: Instant);
}

impl NodeCore {
    /// Derives again the deadline of every link and subscription handed out mutably since
    /// the last call, and what each such link contributes to the call routes (`servers`: the
    /// channels of the node's configured servers).
    pub(crate) fn sync_touched<S: ServerChannels + ?Sized>(&mut self, servers: &S) {
        let (timers, routes) = (&mut self.timers, &mut self.routes);
        self.links.drain_touched(|k, l| {
            timers.set(TimerOwner::Link(k), l.next_deadline());
            if !l.routes_are(routes.of(k), servers) {
                routes.update(k, l.routes(servers));
            }
        });
        self.subs
            .drain_touched(|k, s| timers.set(TimerOwner::Sub(k), s.next_deadline()));
    }
}

/// The ready connection of `rid`'s RouteMesh lane `lane`, after the routes are brought up
/// to date.
pub(crate) fn lane_of<S: Shell>(node: &mut S, rid: &str, lane: Lane) -> Option<CallKey> {
    node.sync_timers();
    node.core().routes.lane_of(rid, lane)
}

/// The capabilities in effect on link `k`'s ready connection (none before it is ready).
pub(crate) fn conn_caps<S: Shell>(node: &S, k: LinkKey) -> Capabilities {
    negotiated(&node.core().links, node.me().capabilities, k)
}

/// Where a call to RouteMesh peer `rid` goes: the REQUEST on its Application lane, the
/// call keyed on (and its answers on) its Completion lane. Both must be ready.
pub(crate) fn mesh_route<S: Shell>(node: &mut S, rid: &str) -> Option<(LinkKey, CallKey)> {
    let app = lane_of(node, rid, Lane::Application)?;
    let completion = lane_of(node, rid, Lane::Completion)?;
    Some((app.0, completion))
}

/// Picks the connection for a call on `channel`: the named `peer` ([`mesh_route`]), or a
/// ready server of the channel (RouteMesh peers with a Server membership, and ClientServer
/// servers), round-robin. Returns the link to send the REQUEST on and the call's key.
pub(crate) fn route_call<S: CallShell>(
    node: &mut S,
    channel: &str,
    peer: Option<&str>,
) -> Result<(LinkKey, CallKey), Unrouted> {
    if let Some(rid) = peer {
        return mesh_route(node, rid).ok_or(Unrouted::NoReadyPeer);
    }
    node.sync_timers();
    let (core, calls) = node.core_with_calls();
    let (ready, configured) = core.routes.ready_for(channel);
    calls.pick(channel, ready, configured)
}

/// How the REQUESTs of a turn for link `k` of `links` share a message (MISSION K5): each
/// alone where the node behind it turned `batch_calls` off ([`batches_calls`]), grouped in
/// CALLS records where the connection negotiated `calls` (with offsets where it negotiated
/// `ids16` too), in BATCHes otherwise. `me`: this node's capabilities.
pub(crate) fn send_policy<C: Configured>(
    links: &Tracked<LinkKey, Link>,
    configured: &C,
    me: Capabilities,
    k: LinkKey,
) -> SendPolicy {
    if !batches_calls(links, configured, k) {
        SendPolicy::Alone
    } else if negotiated(links, me, k).contains(Capabilities::CALLS) {
        SendPolicy::Grouped {
            offsets: negotiated(links, me, k).contains(Capabilities::IDS16),
        }
    } else {
        SendPolicy::Batch
    }
}

/// Whether calls to the node behind link `k` may share a BATCH: its `batch_calls`
/// configuration; a link that is gone, or a peer that dialled us and is not configured
/// here: yes.
pub(crate) fn batches_calls<C: Configured>(
    links: &Tracked<LinkKey, Link>,
    configured: &C,
    k: LinkKey,
) -> bool {
    let Some(l) = links.get(k) else {
        return true;
    };
    match &l.kind {
        LinkKind::MeshDial { peer, .. } => configured.peer_batches_calls(*peer).unwrap_or(true),
        LinkKind::ClientDial { server } => configured.server_batches_calls(*server).unwrap_or(true),
        LinkKind::Inbound { rid, .. } => configured
            .peer_index(rid)
            .and_then(|p| configured.peer_batches_calls(p))
            .unwrap_or(true),
    }
}

/// The key of the calls that connection `conn` of link `k`, lost for `reason`, fails
/// (MISSION C2): a Completion lane's or ClientServer connection's own calls; for an
/// Application lane, the calls of the peer's ready Completion lane, unless the peer closed
/// the Application lane in order (a stopping peer answers what it accepted on the
/// Completion lane before closing that one).
pub(crate) fn lost_calls_key<S: Shell>(
    node: &mut S,
    k: LinkKey,
    conn: ConnId,
    reason: FailureReason,
) -> Option<CallKey> {
    let l = node.core().links.get(k)?;
    match l.lane() {
        Some(Lane::Completion | Lane::ClientServer) => Some((k, conn)),
        Some(Lane::Application) if reason != FailureReason::OrderlyClose => {
            let rid = l.conn.as_ref()?.peer.as_ref()?.rid.clone();
            lane_of(node, &rid, Lane::Completion)
        }
        _ => None,
    }
}

/// Connection `conn` of link `k` is leaving ready for `reason`: the calls keyed on it, as
/// [`lost_calls_key`] says, fail at once (MISSION C2); then the calls input is drained.
pub(crate) fn handle_connection_lost<S: CallShell>(
    node: &mut S,
    k: LinkKey,
    conn: ConnId,
    reason: FailureReason,
    now: Instant,
) {
    if node.core().links.get(k).is_none() {
        return;
    }
    if let Some(key) = lost_calls_key(node, k, conn, reason) {
        node.fail_calls_on(key, now);
    }
    node.drain_calls(now);
}

/// An ACCEPT, ITEM or REPLY arriving on link `k`: for the calls keyed on its connection,
/// if answers travel there (a Completion lane, a ClientServer connection); otherwise it
/// is counted and changes nothing.
pub(crate) fn handle_call_answer<S: CallShell>(
    node: &mut S,
    k: LinkKey,
    answer: Answer,
    now: Instant,
) {
    let kind = answer.kind().name();
    tracing::debug!(kind, key = ?node.core().answer_key(k), "call answer");
    let Some(key) = node.core().answer_key(k) else {
        node.count_ignored_answer();
        return;
    };
    node.answer_call(key, answer, now);
    node.drain_calls(now);
}

/// The link the REQUESTs of calls keyed `key` go out on: the ClientServer connection
/// itself, or the Application lane to the peer behind a RouteMesh Completion lane.
pub(crate) fn request_link<S: Shell>(node: &mut S, key: CallKey) -> Option<LinkKey> {
    let l = node.core().links.get(key.0)?;
    match l.lane()? {
        Lane::ClientServer => Some(key.0),
        Lane::Completion => {
            let rid = l.conn.as_ref()?.peer.as_ref()?.rid.clone();
            lane_of(node, &rid, Lane::Application).map(|(send, _)| send)
        }
        Lane::Application => None,
    }
}

/// Where a CANCEL for a call keyed `key` goes: the link its REQUEST went out on, where
/// that connection negotiated CANCEL (WIRE.md §4.13, §8.1); elsewhere the cancel stays
/// local.
pub(crate) fn cancel_link<S: Shell>(node: &mut S, key: CallKey) -> Option<LinkKey> {
    let link = request_link(node, key)?;
    conn_caps(node, link)
        .contains(Capabilities::CANCEL)
        .then_some(link)
}

/// Where a CREDIT for a stream call keyed `key` goes: the link its REQUEST went out on,
/// where that connection negotiated CREDIT (WIRE.md §4.15); elsewhere none is sent.
pub(crate) fn credit_link<S: Shell>(node: &mut S, key: CallKey) -> Option<LinkKey> {
    let link = request_link(node, key)?;
    conn_caps(node, link)
        .contains(Capabilities::CREDIT)
        .then_some(link)
}

/// The application took `items` more items of the stream call it named `token`: a CREDIT
/// on the link its REQUEST went out on ([`credit_link`]); none for no items, a call that is
/// not a pending stream, or a connection that did not negotiate CREDIT.
pub(crate) fn grant_items<S: CallShell>(node: &mut S, token: u64, items: u64) {
    let Some((key, call_id)) = node.core_with_calls().1.credit_target(token) else {
        return;
    };
    let Some(items) = NonZeroU64::new(items) else {
        return;
    };
    if let Some(link) = credit_link(node, key) {
        node.send_credit(link, call_id, items);
    }
}

/// How an answer leaves on link `route`: the connection it goes to, and what that
/// connection negotiated of the answers' forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AnswerForm {
    /// The connection the answer goes to.
    pub(crate) conn: ConnId,
    /// It waits to be packed with the turn's other answers into ANSWERS records (the
    /// connection negotiated `answers`); otherwise it leaves at once unless answers wait
    /// before it.
    pub(crate) packs: bool,
    /// A REPLY keeps its replayed mark (the connection negotiated `replayed`, WIRE.md
    /// §4.17); otherwise the peer receives the version-1 code byte.
    pub(crate) replayed: bool,
}

/// How an answer leaves on link `route` ([`AnswerForm`]); `None` when the link has no
/// connection (the caller fails the call when it sees that).
pub(crate) fn answer_form<S: Shell>(node: &S, route: LinkKey) -> Option<AnswerForm> {
    let conn = node.core().links.get(route)?.conn.as_ref()?.id;
    let caps = conn_caps(node, route);
    Some(AnswerForm {
        conn,
        packs: caps.contains(Capabilities::ANSWERS),
        replayed: caps.contains(Capabilities::REPLAYED),
    })
}

/// Where the answers to REQUESTs arriving on link `k` go: the calls' key (the connection
/// answers travel on), and the caller's RID and generation. `None` when there is no way
/// to answer (a REQUEST on a Completion lane, or the caller's Completion lane is not
/// ready): the caller fails such calls when its lanes fail.
pub(crate) fn request_route<S: Shell>(node: &mut S, k: LinkKey) -> Option<From<CallKey>> {
    let l = node.core().links.get(k)?;
    let c = l.conn.as_ref()?;
    let (rid, generation) = c
        .peer
        .as_ref()
        .map(|p| (p.rid.clone(), p.generation))
        .unwrap_or_default();
    let key = match l.lane()? {
        Lane::ClientServer => (k, c.id),
        // A RouteMesh call is answered on the caller's Completion lane.
        Lane::Application => lane_of(node, &rid, Lane::Completion)?,
        Lane::Completion => return None,
    };
    node.core().answer_route(key)?;
    Some(From {
        key,
        rid,
        generation,
        credit: conn_caps(node, k).contains(Capabilities::CREDIT),
    })
}

/// A REQUEST arriving on link `k`: to the callee with where its answers go; with no way
/// to answer it changes nothing (the caller fails the call when its lanes fail).
pub(crate) fn handle_request<S: CallShell>(
    node: &mut S,
    k: LinkKey,
    request: wire::Request,
    now: Instant,
) {
    if let Some(from) = request_route(node, k) {
        node.callee_request(k, from, request, now);
    }
}

/// A BATCH arriving on link `k` (MISSION K5): to the callee with where its answers go;
/// with no way to answer it changes nothing.
pub(crate) fn handle_batch<S: CallShell>(
    node: &mut S,
    k: LinkKey,
    requests: Vec<wire::Request>,
    now: Instant,
) {
    if let Some(from) = request_route(node, k) {
        node.callee_batch(k, from.key, requests, now);
    }
}

/// A CANCEL arriving on link `k` (WIRE.md §4.13): the caller no longer waits for call
/// `call_id`, which it sent on this link; with no way to answer it changes nothing.
pub(crate) fn handle_cancel<S: CallShell>(
    node: &mut S,
    k: LinkKey,
    call_id: NonZeroU64,
    now: Instant,
) {
    if let Some(from) = request_route(node, k) {
        node.callee_cancel(from.key, call_id, now);
    }
}

/// A CREDIT arriving on link `k` (WIRE.md §4.15): stream call `call_id`, which the caller
/// sent on this link, may send `items` more; with no way to answer it changes nothing.
pub(crate) fn handle_credit<S: CallShell>(
    node: &mut S,
    k: LinkKey,
    call_id: NonZeroU64,
    items: u64,
    now: Instant,
) {
    if let Some(from) = request_route(node, k) {
        node.callee_credit(from.key, call_id, items, now);
    }
}

/// Who calls on link `k`, as its connection knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallerId {
    /// The caller's RID (from its HELLO; never verified on its own).
    pub(crate) rid: String,
    /// Under CURVE the Z85 text of its transport-verified key; otherwise the identity its
    /// HELLO claimed.
    pub(crate) security_identity: String,
    /// Whether the transport verified `security_identity`.
    pub(crate) verified: bool,
}

/// Who calls on link `k` of `links`, as its connection knows it (nobody's RID, an empty
/// identity, not verified, for a link with no connection).
pub(crate) fn caller_of(links: &Tracked<LinkKey, Link>, k: LinkKey) -> CallerId {
    let c = links.get(k).and_then(|l| l.conn.as_ref());
    let peer = c.and_then(|c| c.peer.as_ref());
    let verified = c.and_then(|c| c.verified_key);
    CallerId {
        rid: peer.map(|p| p.rid.clone()).unwrap_or_default(),
        security_identity: match (verified, peer) {
            (Some(key), _) => key.to_z85(),
            (None, Some(p)) => p.security_identity.clone(),
            (None, None) => String::new(),
        },
        verified: verified.is_some(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::{node, shell, Effect, Peers, Recording};
    use super::*;
    use crate::proto::handshake::Identity;
    use crate::proto::node::admit::{PeerView, ServerView};
    use crate::proto::node::caller::{CallStart, Route};
    use crate::proto::node::keys::{Key, SlotKey};
    use crate::proto::node::link::Conn;
    use crate::proto::wire::Kind;

    /// What the calls' decisions asked of the recording shell beyond `Shell`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum CallEffect {
        /// The calls keyed on a connection fail with it.
        FailCallsOn(CallKey),
        /// An answer for the calls keyed on a connection, by its kind.
        Answer(CallKey, Kind),
        /// An answer no call waits for, counted.
        IgnoredAnswer,
        /// A CREDIT of items for a call, on a link.
        SendCredit(LinkKey, u64, u64),
        /// A REQUEST to the callee: the link it came on, where its answers go, the caller's
        /// RID and whether its connection negotiated `credit`.
        CalleeRequest(LinkKey, CallKey, String, bool),
        /// A BATCH of so many calls to the callee, answered on a key.
        CalleeBatch(LinkKey, CallKey, usize),
        /// A CANCEL to the callee.
        CalleeCancel(CallKey, u64),
        /// A CREDIT to the callee.
        CalleeCredit(CallKey, u64, u64),
        /// The calls input is drained.
        Drain,
    }

    impl ServerChannels for Peers {
        fn channel(&self, _: usize) -> Option<&str> {
            None
        }
    }

    impl Recording {
        fn call_effect(&mut self, e: CallEffect) {
            self.effects.push(Effect::Calls(e));
        }
    }

    impl CallShell for Recording {
        fn core_with_calls(&mut self) -> (&mut NodeCore, &mut Calls) {
            (&mut self.core, &mut self.calls)
        }
        fn fail_calls_on(&mut self, key: CallKey, _: Instant) {
            self.call_effect(CallEffect::FailCallsOn(key));
        }
        fn answer_call(&mut self, key: CallKey, answer: Answer, _: Instant) {
            self.call_effect(CallEffect::Answer(key, answer.kind()));
        }
        fn count_ignored_answer(&mut self) {
            self.call_effect(CallEffect::IgnoredAnswer);
        }
        fn send_credit(&mut self, link: LinkKey, call_id: NonZeroU64, items: NonZeroU64) {
            self.call_effect(CallEffect::SendCredit(link, call_id.get(), items.get()));
        }
        fn callee_request(
            &mut self,
            k: LinkKey,
            from: From<CallKey>,
            _: wire::Request,
            _: Instant,
        ) {
            self.call_effect(CallEffect::CalleeRequest(
                k,
                from.key,
                from.rid,
                from.credit,
            ));
        }
        fn callee_batch(&mut self, k: LinkKey, key: CallKey, r: Vec<wire::Request>, _: Instant) {
            self.call_effect(CallEffect::CalleeBatch(k, key, r.len()));
        }
        fn callee_cancel(&mut self, key: CallKey, call_id: NonZeroU64, _: Instant) {
            self.call_effect(CallEffect::CalleeCancel(key, call_id.get()));
        }
        fn callee_credit(&mut self, key: CallKey, call_id: NonZeroU64, items: u64, _: Instant) {
            self.call_effect(CallEffect::CalleeCredit(key, call_id.get(), items));
        }
        fn drain_calls(&mut self, _: Instant) {
            self.call_effect(CallEffect::Drain);
        }
    }

    /// Node `b`, speaking `caps`, configured with peers `a` and `c`.
    fn b_with(caps: Capabilities) -> Recording {
        let mut b = shell("b", vec!["a", "c"]);
        b.me.capabilities = caps;
        b
    }

    /// Adds a link of `kind` whose connection `id` is ready, to `peer` (serving "pump")
    /// announcing `caps`.
    fn ready(
        b: &mut Recording,
        kind: LinkKind,
        peer: &str,
        caps: Capabilities,
        id: u64,
    ) -> LinkKey {
        let now = Instant::now();
        let k = b.core.add_link(kind, now);
        let slot = SlotKey::from_index(id as usize);
        let mut c = Conn::new(ConnId(id), slot, None, None, now);
        c.ready = true;
        c.peer = Some(Identity {
            capabilities: caps,
            ..node(peer)
        });
        b.core.links[k].conn = Some(c);
        k
    }

    /// A dialled RouteMesh lane of configured peer `peer`.
    fn dial(peer: usize, lane: Lane) -> LinkKind {
        LinkKind::MeshDial { peer, lane }
    }

    /// Both lanes of peer `a` (index 0) ready, with `caps`: (Application, Completion).
    fn lanes_of_a(b: &mut Recording, caps: Capabilities) -> (LinkKey, LinkKey) {
        let app = ready(b, dial(0, Lane::Application), "a", caps, 1);
        let completion = ready(b, dial(0, Lane::Completion), "a", caps, 2);
        (app, completion)
    }

    fn request() -> wire::Request {
        wire::Request {
            call_id: NonZeroU64::MIN,
            ttl_ms: None,
            semantics: wire::Semantics::Query,
            channel: wire::Name::new("pump").expect("a valid name"),
            method: wire::Name::new("go").expect("a valid name"),
            idempotency_key: None,
            payload: Default::default(),
        }
    }

    /// A call to a named peer goes on its Application lane, keyed on its Completion lane;
    /// while either lane is not ready it is not routed. A call to a channel goes to a ready
    /// server of it (a peer serving it with both lanes ready); with none ready it has no
    /// ready peer if a server of the channel is known, no registration otherwise (T1).
    #[test]
    fn t1_a_call_to_a_peer_with_one_lane_not_ready_is_not_routed() {
        let mut b = b_with(Capabilities::NONE);
        let app = ready(
            &mut b,
            dial(0, Lane::Application),
            "a",
            Capabilities::NONE,
            1,
        );
        assert_eq!(
            route_call(&mut b, "pump", Some("a")),
            Err(Unrouted::NoReadyPeer)
        );
        assert_eq!(
            route_call(&mut b, "pump", None),
            Err(Unrouted::NoRegistration)
        );
        let completion = ready(
            &mut b,
            dial(0, Lane::Completion),
            "a",
            Capabilities::NONE,
            2,
        );
        let routed = Ok((app, (completion, ConnId(2))));
        assert_eq!(route_call(&mut b, "pump", Some("a")), routed);
        assert_eq!(route_call(&mut b, "pump", None), routed);
        assert_eq!(
            route_call(&mut b, "other", None),
            Err(Unrouted::NoRegistration)
        );
        // The Completion lane leaves ready: the peer is not routed to any more.
        if let Some(c) = b.core.links[completion].conn.as_mut() {
            c.ready = false;
        }
        assert_eq!(
            route_call(&mut b, "pump", Some("a")),
            Err(Unrouted::NoReadyPeer)
        );
        b.calls.learn_server("pump");
        assert_eq!(route_call(&mut b, "pump", None), Err(Unrouted::NoReadyPeer));
        assert!(b.effects.is_empty());
    }

    /// Calls to a channel served by two ready peers alternate between them.
    #[test]
    fn calls_to_a_channel_go_round_robin_among_ready_servers() {
        let mut b = b_with(Capabilities::NONE);
        let (app_a, completion_a) = lanes_of_a(&mut b, Capabilities::NONE);
        let app_c = ready(
            &mut b,
            dial(1, Lane::Application),
            "c",
            Capabilities::NONE,
            3,
        );
        let completion_c = ready(
            &mut b,
            dial(1, Lane::Completion),
            "c",
            Capabilities::NONE,
            4,
        );
        let picks: Vec<_> = (0..4)
            .map(|_| route_call(&mut b, "pump", None).expect("a ready server"))
            .collect();
        let a = (app_a, (completion_a, ConnId(2)));
        let c = (app_c, (completion_c, ConnId(4)));
        assert!(picks == [a, c, a, c] || picks == [c, a, c, a], "{picks:?}");
    }

    /// A configured node for the send policy's tests: peer `a` (index 0) with batching as
    /// `batch_calls` says.
    struct Batching {
        batch_calls: Option<bool>,
    }

    impl Configured for Batching {
        fn peer(&self, peer: usize) -> Option<PeerView<'_>> {
            (peer == 0).then_some(PeerView {
                rid: "a",
                generation: None,
                security_identity: None,
                pinned_key: None,
            })
        }
        fn peer_index(&self, rid: &str) -> Option<usize> {
            (rid == "a").then_some(0)
        }
        fn server(&self, _: usize) -> Option<ServerView<'_>> {
            None
        }
        fn peer_batches_calls(&self, peer: usize) -> Option<bool> {
            (peer == 0).then_some(self.batch_calls?)
        }
    }

    /// The REQUESTs of a turn share a message as the negotiated capabilities and the peer's
    /// `batch_calls` say (K5): CALLS records where both ends speak `calls` (CALLS16 with
    /// `ids16` too), BATCHes where they do not, each alone where the peer's configuration
    /// turned batching off, whatever was negotiated; a peer that dialled us is judged by
    /// its configuration under its RID, and one not configured batches.
    #[test]
    fn k5_the_send_policy_follows_the_negotiated_capabilities_and_batch_calls() {
        let both = Capabilities::CALLS.union(Capabilities::IDS16);
        let mut b = b_with(both);
        let app = ready(
            &mut b,
            dial(0, Lane::Application),
            "a",
            Capabilities::NONE,
            1,
        );
        let calls = ready(
            &mut b,
            dial(0, Lane::Completion),
            "a",
            Capabilities::CALLS,
            2,
        );
        let ids16 = ready(&mut b, dial(0, Lane::Completion), "a", both, 3);
        let inbound = |rid: &str| LinkKind::Inbound {
            rid: rid.into(),
            lane: Lane::Application,
        };
        let from_a = ready(&mut b, inbound("a"), "a", both, 4);
        let from_z = ready(&mut b, inbound("z"), "z", both, 5);
        let on = Batching {
            batch_calls: Some(true),
        };
        let off = Batching {
            batch_calls: Some(false),
        };
        let unsaid = Batching { batch_calls: None };
        let policy = |cfg: &Batching, k| send_policy(&b.core.links, cfg, b.me.capabilities, k);
        let grouped = |offsets| SendPolicy::Grouped { offsets };
        assert_eq!(policy(&on, app), SendPolicy::Batch);
        assert_eq!(policy(&on, calls), grouped(false));
        assert_eq!(policy(&on, ids16), grouped(true));
        assert_eq!(policy(&on, from_a), grouped(true));
        assert_eq!(policy(&unsaid, ids16), grouped(true));
        for k in [app, calls, ids16, from_a] {
            assert_eq!(policy(&off, k), SendPolicy::Alone);
        }
        assert_eq!(policy(&off, from_z), grouped(true));
        // This node not speaking `calls` itself: BATCHes.
        let me = Capabilities::NONE;
        assert_eq!(
            send_policy(&b.core.links, &on, me, ids16),
            SendPolicy::Batch
        );
    }

    /// A lost Completion lane fails its calls at once (C2), and so does a lost ClientServer
    /// connection; then the calls input is drained.
    #[test]
    fn c2_a_lost_completion_lane_fails_its_calls_at_once() {
        let mut b = b_with(Capabilities::NONE);
        let (_, completion) = lanes_of_a(&mut b, Capabilities::NONE);
        let server = LinkKind::ClientDial { server: 0 };
        let client = ready(&mut b, server, "s", Capabilities::NONE, 7);
        let now = Instant::now();
        for reason in [FailureReason::TransportError, FailureReason::OrderlyClose] {
            handle_connection_lost(&mut b, completion, ConnId(2), reason, now);
            handle_connection_lost(&mut b, client, ConnId(7), reason, now);
        }
        let lost = |key| Effect::Calls(CallEffect::FailCallsOn(key));
        let drain = Effect::Calls(CallEffect::Drain);
        let (c, s) = ((completion, ConnId(2)), (client, ConnId(7)));
        assert_eq!(
            b.effects,
            [
                lost(c),
                drain.clone(),
                lost(s),
                drain.clone(),
                lost(c),
                drain.clone(),
                lost(s),
                drain
            ]
        );
    }

    /// A peer that closed its Application lane in order still answers on its Completion
    /// lane what it accepted there: those calls do not fail (C2). A failed Application lane
    /// fails them at once; one whose peer has no ready Completion lane fails nothing.
    #[test]
    fn c2_an_orderly_closed_application_lane_does_not_fail_the_completion_lanes_calls() {
        let mut b = b_with(Capabilities::NONE);
        let (app, completion) = lanes_of_a(&mut b, Capabilities::NONE);
        let now = Instant::now();
        handle_connection_lost(&mut b, app, ConnId(1), FailureReason::OrderlyClose, now);
        let drain = Effect::Calls(CallEffect::Drain);
        assert_eq!(b.effects, std::slice::from_ref(&drain));
        b.effects.clear();
        handle_connection_lost(&mut b, app, ConnId(1), FailureReason::DeadlineExceeded, now);
        let lost = Effect::Calls(CallEffect::FailCallsOn((completion, ConnId(2))));
        assert_eq!(b.effects, [lost, drain.clone()]);
        b.effects.clear();
        b.core.links[completion].conn = None;
        handle_connection_lost(&mut b, app, ConnId(1), FailureReason::DeadlineExceeded, now);
        assert_eq!(b.effects, [drain]);
    }

    /// Answers belong to the calls keyed on the connection they arrive on, where answers
    /// travel (a Completion lane, a ClientServer connection); one arriving on an
    /// Application lane is counted and changes nothing (C2: an ACCEPT on another connection
    /// pins nothing).
    #[test]
    fn c2_an_answer_on_an_application_lane_has_no_call_key() {
        let mut b = b_with(Capabilities::NONE);
        let (app, completion) = lanes_of_a(&mut b, Capabilities::NONE);
        let now = Instant::now();
        let accept = || {
            Answer::Accept(wire::Accept {
                call_id: NonZeroU64::MIN,
                generation: NonZeroU64::MIN,
                connection_id: 2,
            })
        };
        handle_call_answer(&mut b, completion, accept(), now);
        handle_call_answer(&mut b, app, accept(), now);
        assert_eq!(
            b.effects,
            [
                Effect::Calls(CallEffect::Answer((completion, ConnId(2)), Kind::Accept)),
                Effect::Calls(CallEffect::Drain),
                Effect::Calls(CallEffect::IgnoredAnswer),
            ]
        );
    }

    /// A REQUEST on a peer's Application lane is answered on its Completion lane, with its
    /// RID and whether the Application lane negotiated `credit`; one on a ClientServer
    /// connection on that connection; one on a Completion lane, or whose caller has no
    /// ready Completion lane, reaches no callee. CANCELs, CREDITs and BATCHes take the same
    /// route (T1, T2).
    #[test]
    fn t1_t2_a_request_is_answered_on_the_callers_completion_lane() {
        let mut b = b_with(Capabilities::CREDIT);
        let (app, completion) = lanes_of_a(&mut b, Capabilities::CREDIT);
        let inbound = LinkKind::Inbound {
            rid: "s".into(),
            lane: Lane::ClientServer,
        };
        let client = ready(&mut b, inbound, "s", Capabilities::NONE, 7);
        let now = Instant::now();
        let id = NonZeroU64::MIN;
        handle_request(&mut b, app, request(), now);
        handle_request(&mut b, client, request(), now);
        handle_request(&mut b, completion, request(), now);
        handle_batch(&mut b, app, vec![request(), request()], now);
        handle_cancel(&mut b, app, id, now);
        handle_credit(&mut b, client, id, 3, now);
        handle_cancel(&mut b, completion, id, now);
        let (c, s) = ((completion, ConnId(2)), (client, ConnId(7)));
        let calls = |e| Effect::Calls(e);
        assert_eq!(
            b.effects,
            [
                calls(CallEffect::CalleeRequest(app, c, "a".into(), true)),
                calls(CallEffect::CalleeRequest(client, s, "s".into(), false)),
                calls(CallEffect::CalleeBatch(app, c, 2)),
                calls(CallEffect::CalleeCancel(c, 1)),
                calls(CallEffect::CalleeCredit(s, 1, 3)),
            ]
        );
        b.effects.clear();
        b.core.links[completion].conn = None;
        handle_request(&mut b, app, request(), now);
        assert!(b.effects.is_empty());
    }

    /// A CREDIT for a stream call goes on the link its REQUEST went out on (the peer's
    /// Application lane) only where that connection negotiated `credit`; none for no items
    /// (X3). A CANCEL goes the same way where CANCEL was negotiated (X1).
    #[test]
    fn x3_x1_credit_and_cancel_go_on_the_request_link_only_where_negotiated() {
        let caps = Capabilities::CREDIT.union(Capabilities::CANCEL);
        let mut b = b_with(caps);
        let (app, completion) = lanes_of_a(&mut b, Capabilities::CREDIT);
        let key = (completion, ConnId(2));
        let route = Route {
            send: app,
            key,
            target: Some("a".into()),
        };
        let call = CallStart {
            channel: "pump",
            method: "go",
            args: Default::default(),
            ttl: None,
            semantics: None,
            idempotency_key: None,
            token: 9,
        };
        let now = Instant::now();
        let started = b.calls.start(call, Ok(route), now);
        grant_items(&mut b, 9, 0);
        grant_items(&mut b, 8, 4);
        grant_items(&mut b, 9, 4);
        let id = started.id.get().get();
        let sent = Effect::Calls(CallEffect::SendCredit(app, id, 4));
        assert_eq!(b.effects, [sent]);
        assert_eq!(request_link(&mut b, key), Some(app));
        assert_eq!(credit_link(&mut b, key), Some(app));
        assert_eq!(cancel_link(&mut b, key), None, "a did not announce CANCEL");
        let k = ready(&mut b, dial(1, Lane::Application), "c", caps, 3);
        let kc = ready(&mut b, dial(1, Lane::Completion), "c", caps, 4);
        assert_eq!(cancel_link(&mut b, (kc, ConnId(4))), Some(k));
        assert_eq!(request_link(&mut b, (k, ConnId(3))), None);
    }

    /// An answer waits to be packed into ANSWERS only on a connection that negotiated
    /// `answers`, and a REPLY keeps its replayed mark only where `replayed` was negotiated
    /// (K5, X3); a link with no connection takes no answer.
    #[test]
    fn k5_x3_an_answer_is_packed_and_keeps_its_replayed_mark_only_where_negotiated() {
        let both = Capabilities::ANSWERS.union(Capabilities::REPLAYED);
        let mut b = b_with(both);
        let (_, v1) = lanes_of_a(&mut b, Capabilities::NONE);
        let packs = ready(&mut b, dial(1, Lane::Completion), "c", both, 4);
        let form = |conn, packs, replayed| {
            Some(AnswerForm {
                conn: ConnId(conn),
                packs,
                replayed,
            })
        };
        assert_eq!(answer_form(&b, v1), form(2, false, false));
        assert_eq!(answer_form(&b, packs), form(4, true, true));
        b.me.capabilities = Capabilities::ANSWERS;
        assert_eq!(answer_form(&b, packs), form(4, true, false));
        b.core.links[packs].conn = None;
        assert_eq!(answer_form(&b, packs), None);
    }

    /// Who calls on a link: its peer's RID and the identity its HELLO claimed, not
    /// verified without CURVE; nobody on a link with no connection.
    #[test]
    fn the_caller_of_a_link_is_its_peer_as_its_connection_knows_it() {
        let mut b = b_with(Capabilities::NONE);
        let (app, _) = lanes_of_a(&mut b, Capabilities::NONE);
        if let Some(p) = b.core.links[app]
            .conn
            .as_mut()
            .and_then(|c| c.peer.as_mut())
        {
            p.security_identity = "claimed".into();
        }
        let who = caller_of(&b.core.links, app);
        assert_eq!(
            who,
            CallerId {
                rid: "a".into(),
                security_identity: "claimed".into(),
                verified: false,
            }
        );
        b.core.links[app].conn = None;
        assert_eq!(caller_of(&b.core.links, app).rid, "");
    }
}
