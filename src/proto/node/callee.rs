//! The callee side of calls as a part of the node core (MISSION C4, C6, K1, K4, K5): what a
//! served method asks of the node ([`MethodPlan`]), who sent a REQUEST ([`From`]), and the
//! REPLYs and ITEMs the callee decides on ([`Answer`], [`reply`], [`item`]).

use std::num::NonZeroU64;

use bytes::Bytes;

use crate::proto::calls::CallShape;
use crate::proto::contract::{ExecutionKind, Semantics};
use crate::proto::node::keys::CallKey;
use crate::proto::wire::{self, Record};

/// How the callee treats one call of a served channel: what its method declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MethodPlan {
    /// The method's declared semantics (`None`: undeclared).
    pub semantics: Option<Semantics>,
    /// Unary or stream.
    pub shape: CallShape,
    /// Parallel, serial or keyed (MISSION K4).
    pub execution: ExecutionKind,
    /// Whether a newer call of the method takes the place of a waiting one (MISSION K4).
    pub conflate: bool,
    /// Whether a cancel stops the running handler ([`crate::proto::contract::stops_on_cancel`]).
    pub stops_on_cancel: bool,
}

/// Who sent a REQUEST, as the I/O thread knows it from the connection it came on.
pub(crate) struct From {
    /// The connection its answers travel on.
    pub(crate) key: CallKey,
    /// The caller's RID.
    pub(crate) rid: String,
    /// The caller's lifecycle generation.
    pub(crate) generation: u64,
    /// Whether the connection the REQUEST came on negotiated `credit`: a stream answered to
    /// it sends only as far as its window (WIRE.md §4.15).
    pub(crate) credit: bool,
}

/// One answer the callee decided on: an ACCEPT-less REPLY, for the connection the call's
/// answers travel on.
pub(crate) struct Answer {
    /// The call's connection.
    pub(crate) key: CallKey,
    /// The REPLY.
    pub(crate) reply: wire::Reply,
}

/// REPLY (encoded when it leaves: answers of one connection may travel together, WIRE.md
/// §4.16), not replayed (see [`wire::Reply::replayed`]).
pub(crate) fn reply(call_id: NonZeroU64, code: wire::ReplyCode, payload: Bytes) -> wire::Reply {
    wire::Reply {
        call_id,
        code,
        payload,
        replayed: false,
    }
}

/// ITEM: stream item `seq` of call `call_id`.
pub(crate) fn item(call_id: NonZeroU64, seq: u64, payload: Bytes) -> Vec<Vec<u8>> {
    Record::Item(wire::Item {
        call_id,
        seq,
        payload,
    })
    .encode()
}
