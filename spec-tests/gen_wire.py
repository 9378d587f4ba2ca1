"""The wire-level part of the vector generator (spec-tests/gen_vectors.py): the constants of
zmesh wire format v1, the primitive and record encoders (WIRE.md §1, §4, §7), the field-value
builders of the base kinds (JSON form, spec-tests/README.md) and the vector helpers.
"""

import struct

MAGIC = b"\x5a\x4d"
VERSION = 1
BEACON_TOPIC = bytes.fromhex("015a4c4631")
BEACON_PAYLOAD = bytes.fromhex("5a460101")
U64_MAX = 2**64 - 1

KINDS = {
    "hello": 0x01, "welcome": 0x02, "reject": 0x03, "probe": 0x04, "ack": 0x05,
    "message": 0x06, "request": 0x07, "accept": 0x08, "reply": 0x09, "item": 0x0A,
    "close": 0x0B, "batch": 0x0C, "publish": 0x0D,
    # An extension kind: known only where capability `cancel` is in effect (WIRE.md §8.1).
    "cancel": 0x0E,
    # Known only where capability `calls` is in effect.
    "calls": 0x0F,
    # Known only where capability `credit` is in effect.
    "credit": 0x10,
    # Known only where capability `answers` is in effect.
    "answers": 0x11,
    # Known only where capability `pack` is in effect.
    "pack": 0x12,
    # Known only where capability `ids16` is in effect: CALLS and ANSWERS with the call ids
    # as u16 offsets from the smallest (WIRE.md §4.19).
    "calls16": 0x13,
    "answers16": 0x14,
    # Frame 1 of a fanout message, known only on a publisher's socket where capability
    # `pubpack` is in effect: several PUBLISH records of one topic (WIRE.md §7.5).
    "pubpack": 0x15,
}
# The subscription prefix that announces capability `pubpack` (WIRE.md §7.5): the reserved
# beacon topic, 00 and the capability's name.
PUBPACK_MARKER = bytes.fromhex("015a4c4631") + b"\x00" + b"pubpack"
ANSWER_WHAT = {"accept": 1, "reply": 2, "accept_reply": 3}
# Bit 7 of a REPLY's code byte where capability `replayed` is in effect (WIRE.md §4.17).
REPLAYED_MARK = 0x80
LANES = {"application": 1, "completion": 2, "client_server": 3}
ROLES = {"server": 1, "object_client": 2}
REJECT_REASONS = {
    "not_required": 1, "identity_mismatch": 2, "generation_mismatch": 3,
    "security_failure": 4, "unsupported_version": 5, "draining": 6, "lane_mismatch": 7,
    "protocol": 8, "duplicate": 9,
}
SEMANTICS = {
    "undeclared": 0, "query": 1, "idempotent_command": 2, "non_repeatable_command": 3,
}
REPLY_CODES = {
    "ok": 0, "exception": 1, "method_not_found": 2, "class_not_found": 3, "timeout": 4,
    "transport_error": 5, "unauthorized": 6, "forbidden": 7, "invalid_params": 8,
    "incompatible_version": 9, "unknown_outcome": 10, "busy": 11, "superseded": 12,
    "not_found": 13, "unavailable": 14,
}
CLOSE_REASONS = {
    "shutdown": 1, "draining": 2, "replaced": 3, "deadline_exceeded": 4,
    "protocol_error": 5, "not_required": 6,
}


# ---- primitive encoders (WIRE.md §1) ----

def u8(v):
    return struct.pack(">B", v)


def u16(v):
    return struct.pack(">H", v)


def u64(v):
    return struct.pack(">Q", int(v))


def string(s):
    """u16 byte length + bytes; `s` is str (UTF-8 encoded) or raw bytes (for invalid vectors)."""
    b = s.encode("utf-8") if isinstance(s, str) else s
    return u16(len(b)) + b


def header(kind):
    return MAGIC + u8(VERSION) + u8(KINDS[kind])


# ---- record encoder (WIRE.md §4, §7) ----

def memberships(ms):
    out = u16(len(ms))
    for m in ms:
        out += u8(ROLES[m["role"]]) + string(m["channel"])
    return out


def request_frames(r):
    env = (header("request") + u64(r["call_id"]) + u64(r["ttl_ms"])
           + u8(SEMANTICS[r["semantics"]]) + string(r["channel"]) + string(r["method"])
           + string(r["idempotency_key"]))
    return [env, bytes.fromhex(r["payload"])]


def encode(rec):
    k = rec["kind"]
    if k == "hello":
        return [header(k) + u8(LANES[rec["lane"]]) + string(rec["rid"])
                + u64(rec["generation"]) + string(rec["security_identity"])
                + string(rec["expect_rid"]) + u64(rec["expect_generation"])
                + u64(rec["config_generation"]) + memberships(rec["memberships"])]
    if k == "welcome":
        return [header(k) + u8(LANES[rec["lane"]]) + string(rec["rid"])
                + u64(rec["generation"]) + string(rec["security_identity"])
                + memberships(rec["memberships"])]
    if k == "reject":
        return [header(k) + u8(REJECT_REASONS[rec["reason"]]) + string(rec["detail"])]
    if k in ("probe", "ack"):
        return [header(k) + u64(rec["id"])]
    if k == "message":
        return [header(k) + string(rec["channel"]), bytes.fromhex(rec["payload"])]
    if k == "request":
        return request_frames(rec)
    if k == "accept":
        return [header(k) + u64(rec["call_id"]) + u64(rec["generation"])
                + u64(rec["connection_id"])]
    if k == "reply":
        return [header(k) + u64(rec["call_id"]) + u8(code_byte(rec)),
                bytes.fromhex(rec["payload"])]
    if k == "item":
        return [header(k) + u64(rec["call_id"]) + u64(rec["seq"]),
                bytes.fromhex(rec["payload"])]
    if k == "close":
        return [header(k) + u8(CLOSE_REASONS[rec["reason"]])]
    if k == "cancel":
        return [header(k) + u64(rec["call_id"])]
    if k == "credit":
        return [header(k) + u64(rec["call_id"]) + u64(rec["items"])]
    if k == "calls":
        env = (header(k) + u16(len(rec["calls"])) + u64(rec["ttl_ms"])
               + u8(SEMANTICS[rec["semantics"]]) + string(rec["channel"])
               + string(rec["method"]))
        for c in rec["calls"]:
            env += u64(c["call_id"]) + string(c["idempotency_key"])
        return [env] + [bytes.fromhex(c["payload"]) for c in rec["calls"]]
    if k == "answers":
        env = (header(k) + u16(len(rec["answers"])) + u64(rec["generation"])
               + u64(rec["connection_id"]))
        payloads = []
        for a in rec["answers"]:
            env += u64(a["call_id"]) + u8(ANSWER_WHAT[a["what"]])
            if a["what"] != "accept":
                env += u8(code_byte(a))
                payloads.append(bytes.fromhex(a["payload"]))
        return [env] + payloads
    if k == "calls16":
        base = id_base(c["call_id"] for c in rec["calls"])
        env = (header(k) + u16(len(rec["calls"])) + u64(rec["ttl_ms"])
               + u8(SEMANTICS[rec["semantics"]]) + string(rec["channel"])
               + string(rec["method"]) + u64(base))
        for c in rec["calls"]:
            env += u16(int(c["call_id"]) - base) + string(c["idempotency_key"])
        return [env] + [bytes.fromhex(c["payload"]) for c in rec["calls"]]
    if k == "answers16":
        base = id_base(a["call_id"] for a in rec["answers"])
        env = (header(k) + u16(len(rec["answers"])) + u64(rec["generation"])
               + u64(rec["connection_id"]) + u64(base))
        payloads = []
        for a in rec["answers"]:
            env += u16(int(a["call_id"]) - base) + u8(ANSWER_WHAT[a["what"]])
            if a["what"] != "accept":
                env += u8(code_byte(a))
                payloads.append(bytes.fromhex(a["payload"]))
        return [env] + payloads
    if k == "pack":
        payloads = [bytes.fromhex(p) for p in rec["payloads"]]
        env = header(k) + u16(len(payloads)) + string(rec["channel"])
        for p in payloads:
            env += u16(len(p))
        return [env, b"".join(payloads)]
    if k == "batch":
        frames = [header(k) + u16(len(rec["requests"]))]
        for r in rec["requests"]:
            frames += request_frames(r)
        return frames
    if k == "beacon":
        return [BEACON_TOPIC, BEACON_PAYLOAD]
    if k == "publish":
        return [bytes.fromhex(rec["topic"]),
                header(k) + u64(rec["generation"]) + u64(rec["seq"]),
                bytes.fromhex(rec["payload"])]
    if k == "pubpack":
        payloads = [bytes.fromhex(p) for p in rec["payloads"]]
        env = (header(k) + u64(rec["generation"]) + u64(rec["first_seq"])
               + u16(len(payloads)))
        for p in payloads:
            env += u16(len(p))
        return [bytes.fromhex(rec["topic"]), env, b"".join(payloads)]
    raise ValueError(k)


def id_base(call_ids):
    """The base of a CALLS16 or ANSWERS16 record (WIRE.md §4.19): its smallest call id; every
    id must be within 65535 of it."""
    ids = [int(i) for i in call_ids]
    base = min(ids)
    if base == 0 or max(ids) - base > 0xFFFF:
        raise ValueError(f"no offset form for call ids {ids}")
    return base


def code_byte(rec):
    """A REPLY's code byte: the code, with the replayed mark when the record says so."""
    return REPLY_CODES[rec["code"]] | (REPLAYED_MARK if rec.get("replayed") else 0)


# ---- field-value builders (JSON form, spec-tests/README.md) ----

def hello(lane="application", rid="node-a", generation=1, security_identity="",
          expect_rid="", expect_generation=0, config_generation=0, ms=()):
    return {"kind": "hello", "lane": lane, "rid": rid, "generation": str(generation),
            "security_identity": security_identity, "expect_rid": expect_rid,
            "expect_generation": str(expect_generation),
            "config_generation": str(config_generation), "memberships": list(ms)}


def welcome(lane="application", rid="node-b", generation=2, security_identity="", ms=()):
    return {"kind": "welcome", "lane": lane, "rid": rid, "generation": str(generation),
            "security_identity": security_identity, "memberships": list(ms)}


def member(role, channel):
    return {"role": role, "channel": channel}


def reject(reason, detail=""):
    return {"kind": "reject", "reason": reason, "detail": detail}


def probe(i):
    return {"kind": "probe", "id": str(i)}


def ack(i):
    return {"kind": "ack", "id": str(i)}


def message(channel, payload=""):
    return {"kind": "message", "channel": channel, "payload": payload}


def request(call_id=1, ttl_ms=0, semantics="undeclared", channel="pump", method="status",
            key="", payload="", kind=True):
    r = {"call_id": str(call_id), "ttl_ms": str(ttl_ms), "semantics": semantics,
         "channel": channel, "method": method, "idempotency_key": key, "payload": payload}
    return {"kind": "request", **r} if kind else r


def accept(call_id=1, generation=2, connection_id=0):
    return {"kind": "accept", "call_id": str(call_id), "generation": str(generation),
            "connection_id": str(connection_id)}


def reply(call_id=1, code="ok", payload=""):
    return {"kind": "reply", "call_id": str(call_id), "code": code, "payload": payload}


def item(call_id=1, seq=0, payload=""):
    return {"kind": "item", "call_id": str(call_id), "seq": str(seq), "payload": payload}


def close(reason):
    return {"kind": "close", "reason": reason}


def batch(*requests):
    return {"kind": "batch", "requests": list(requests)}


def publish(topic="74", generation=1, seq=0, payload=""):
    return {"kind": "publish", "topic": topic, "generation": str(generation),
            "seq": str(seq), "payload": payload}


# ---- vector helpers ----

def hexes(frames):
    return [f.hex() for f in frames]


def valid(name, description, rec):
    return {"name": name, "description": description, "frames": hexes(encode(rec)),
            "record": rec}


def invalid(name, description, kind, frames, error):
    v = {"name": name, "description": description}
    if kind is not None:
        v["kind"] = kind
    v["frames"] = hexes(frames)
    v["error"] = error
    return v


def unencodable(name, description, rec, error="invalid_field"):
    return {"name": name, "description": description, "record": rec, "error": error}


def replace(b, offset, new):
    """`b` with bytes at `offset` replaced by `new`."""
    return b[:offset] + new + b[offset + len(new):]
