#!/usr/bin/env python3
"""Writes spec-tests/v1/records.json, fanout.json, cancel.json, calls.json, credit.json,
answers.json, replayed.json, pack.json and ids16.json.

This is a second, independent encoder of zmesh wire format v1, written from WIRE.md (not from
the Rust code), so the committed vectors cross-check the Rust codec rather than echo it. The
committed JSON is the reference; this script only exists to (re)produce it deterministically:

    python3 spec-tests/gen_vectors.py

Standard library only. Field values use the JSON form described in spec-tests/README.md.
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "v1")

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
}
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


# ---- records.json ----

def records_file():
    v = []
    v.append(valid("hello_minimal", "Smallest HELLO: 1-byte RID, no identity, no expectation, "
                   "no membership.", hello(rid="a", generation=1)))
    v.append(valid("hello_full", "All HELLO fields set; generation u64 max (beyond 2^53); "
                   "two memberships.",
                   hello(lane="client_server", rid="node-a", generation=U64_MAX,
                         security_identity="spiffe://zmesh/node-a", expect_rid="node-b",
                         expect_generation=0x0123456789ABCDEF, config_generation=7,
                         ms=[member("server", "orders"), member("object_client", "billing")])))
    v.append(valid("hello_completion_multibyte_utf8", "Lane completion; RID with 2-byte "
                   "UTF-8 characters (length counts bytes); a NUL is an ordinary character.",
                   hello(lane="completion", rid="n\u0153ud-\u00e4", generation=2,
                         security_identity="id\u0000x", config_generation=1)))
    v.append(valid("hello_rid_255_bytes", "RID of exactly 255 bytes (the maximum).",
                   hello(rid="r" * 255, generation=3)))
    v.append(valid("welcome_minimal", "WELCOME without identity or memberships.",
                   welcome(rid="b", generation=1)))
    v.append(valid("welcome_full", "WELCOME with identity and memberships.",
                   welcome(lane="client_server", rid="node-b", generation=0xFF,
                           security_identity="svc",
                           ms=[member("object_client", "orders")])))
    for reason in REJECT_REASONS:
        v.append(valid(f"reject_{reason}", f"REJECT with reason {reason}.",
                       reject(reason, "" if reason != "identity_mismatch" else "rid")))
    v.append(valid("reject_detail_1024_bytes", "REJECT detail of exactly 1024 bytes "
                   "(the maximum).", reject("protocol", "d" * 1024)))
    v.append(valid("probe_id_1", "PROBE id 1: 12 bytes, no payload frame.", probe(1)))
    v.append(valid("probe_id_max", "PROBE id u64 max.", probe(U64_MAX)))
    v.append(valid("ack_id_1", "ACK id 1.", ack(1)))
    v.append(valid("ack_id_deadbeef", "ACK id 0xDEADBEEF.", ack(0xDEADBEEF)))
    v.append(valid("message_with_payload", "MESSAGE on channel orders.",
                   message("orders", "0102")))
    v.append(valid("message_empty_payload", "MESSAGE with an empty payload frame.",
                   message("c")))
    v.append(valid("request_full", "REQUEST with ttl, semantics, idempotency key, payload.",
                   request(call_id=5, ttl_ms=1500, semantics="non_repeatable_command",
                           channel="pump", method="dispense", key="wo-1", payload="c0")))
    for sem in SEMANTICS:
        v.append(valid(f"request_{sem}", f"REQUEST with semantics {sem}, no ttl (0), no key.",
                       request(call_id=SEMANTICS[sem] + 10, semantics=sem)))
    v.append(valid("request_ttl_max", "REQUEST with ttl_ms u64 max.",
                   request(call_id=U64_MAX, ttl_ms=U64_MAX, semantics="query")))
    v.append(valid("accept", "ACCEPT naming generation and connection id.",
                   accept(5, 0x0102030405060708, 42)))
    v.append(valid("accept_connection_id_0", "ACCEPT with connection id 0 (diagnostic, "
                   "any value).", accept(1, 1, 0)))
    for code in REPLY_CODES:
        payload = "c3" if code == "ok" else "boom".encode().hex()
        v.append(valid(f"reply_{code}", f"REPLY with code {code}.",
                       reply(call_id=REPLY_CODES[code] + 1, code=code, payload=payload)))
    v.append(valid("reply_error_payload_not_utf8", "The codec does not check a REPLY "
                   "payload's UTF-8.", reply(call_id=9, code="exception", payload="ff")))
    v.append(valid("item_seq_0", "First ITEM of a stream.", item(5, 0, "01")))
    v.append(valid("item_seq_max", "ITEM with seq u64 max, empty payload.",
                   item(5, U64_MAX, "")))
    for reason in CLOSE_REASONS:
        v.append(valid(f"close_{reason}", f"CLOSE with reason {reason}.", close(reason)))
    v.append(valid("batch_of_2", "BATCH of two REQUESTs: 5 frames.",
                   batch(request(1, semantics="query", method="pressure", kind=False),
                         request(2, method="status", kind=False))))
    v.append(valid("batch_of_3_mixed", "BATCH of three REQUESTs with different fields.",
                   batch(request(7, 250, "idempotent_command", "pump", "set_setpoint", "",
                                 "cd04b0", kind=False),
                         request(8, 0, "non_repeatable_command", "pump", "dispense", "wo-9",
                                 "01", kind=False),
                         request(9, 1000, "query", "tank", "level", "", "", kind=False))))

    inv = []
    probe1 = encode(probe(1))[0]

    # Header-level (any kind).
    inv.append(invalid("empty_message", "No frame at all.", None, [], "frame_count"))
    inv.append(invalid("empty_frame", "Frame 0 is empty.", None, [b""], "truncated"))
    inv.append(invalid("header_2_bytes", "Only the magic.", None, [MAGIC], "truncated"))
    inv.append(invalid("header_3_bytes", "Magic and version, no kind.", None,
                       [MAGIC + b"\x01"], "truncated"))
    inv.append(invalid("short_frame_wrong_magic", "Shorter than 4 bytes: truncated is "
                       "checked before the magic.", None, [b"\x00\x00"], "truncated"))
    inv.append(invalid("bad_magic", "Magic 5A 4E.", None,
                       [replace(probe1, 0, b"\x5a\x4e")], "bad_magic"))
    inv.append(invalid("bad_magic_zeros", "All-zero header.", None, [b"\x00" * 4],
                       "bad_magic"))
    for ver in (0, 2, 255):
        inv.append(invalid(f"version_{ver}", f"Version byte {ver}; the rest is not read.",
                           None, [replace(probe1, 2, u8(ver))], "unsupported_version"))
    inv.append(invalid("version_2_other_layout", "Version 2 with a body and frame count "
                       "that are wrong for v1: still unsupported_version.", None,
                       [MAGIC + b"\x02\x04", b"x", b"y"], "unsupported_version"))
    for kind in (0x00, 0x0E, 0xFF):
        inv.append(invalid(f"unknown_kind_{kind:02x}", f"Kind byte {kind:02X}.", None,
                           [replace(probe1, 3, u8(kind))], "unknown_kind"))

    # HELLO
    h = encode(hello(rid="node-a", generation=1, ms=[member("server", "orders")]))[0]
    # offsets: lane 4, rid len 5, rid 7..13, generation 13..21, identity len 21..23,
    # expect_rid len 23..25, expect_generation 25..33, config_generation 33..41,
    # memberships count 41..43, role 43, channel len 44..46, channel 46..52
    inv += [
        invalid("hello_truncated_in_rid", "Frame ends inside the RID string.", "hello",
                [h[:10]], "truncated"),
        invalid("hello_truncated_in_memberships", "Memberships count 2, one entry present.",
                "hello", [replace(h, 41, u16(2))], "truncated"),
        invalid("hello_count_beyond_input", "Memberships count 65535 with no entry: "
                "truncated (and no 65535-entry allocation).", "hello",
                [replace(h[:43], 41, u16(0xFFFF))], "truncated"),
        invalid("hello_trailing_byte", "One byte after the last membership.", "hello",
                [h + b"\x00"], "trailing_bytes"),
        invalid("hello_two_frames", "HELLO has 1 frame.", "hello", [h, b""], "frame_count"),
        invalid("hello_lane_0", "Lane 0 is not a lane.", "hello", [replace(h, 4, b"\x00")],
                "invalid_field"),
        invalid("hello_lane_4", "Lane 4 is not a lane.", "hello", [replace(h, 4, b"\x04")],
                "invalid_field"),
        invalid("hello_generation_0", "Generation must be non-zero.", "hello",
                [replace(h, 13, u64(0))], "invalid_field"),
        invalid("hello_rid_empty", "RID must be 1..=255 bytes.", "hello",
                [encode(hello(rid="x"))[0].replace(string("x"), string(b""), 1)],
                "invalid_field"),
        invalid("hello_rid_256_bytes", "RID of 256 bytes.", "hello",
                [encode(hello(rid="x"))[0].replace(string("x"), string("r" * 256), 1)],
                "invalid_field"),
        invalid("hello_rid_bad_utf8", "RID with a lone continuation byte.", "hello",
                [replace(h, 12, b"\x80")], "invalid_field"),
        invalid("hello_identity_overlong_utf8", "Security identity C0 80 (overlong NUL) "
                "is not UTF-8.", "hello",
                [encode(hello(security_identity="zz"))[0].replace(string("zz"),
                                                                  string(b"\xc0\x80"), 1)],
                "invalid_field"),
        invalid("hello_identity_surrogate", "Security identity ED A0 80 (a UTF-16 "
                "surrogate) is not UTF-8.", "hello",
                [encode(hello(security_identity="zzz"))[0].replace(string("zzz"),
                                                                   string(b"\xed\xa0\x80"), 1)],
                "invalid_field"),
        invalid("hello_identity_256_bytes", "Security identity of 256 bytes.", "hello",
                [encode(hello(security_identity="zz"))[0].replace(string("zz"),
                                                                  string("i" * 256), 1)],
                "invalid_field"),
        invalid("hello_expect_rid_256_bytes", "Expected RID of 256 bytes.", "hello",
                [encode(hello(expect_rid="zz"))[0].replace(string("zz"),
                                                           string("e" * 256), 1)],
                "invalid_field"),
        invalid("hello_role_0", "Membership role 0.", "hello", [replace(h, 43, b"\x00")],
                "invalid_field"),
        invalid("hello_role_3", "Membership role 3.", "hello", [replace(h, 43, b"\x03")],
                "invalid_field"),
        invalid("hello_membership_channel_empty", "Membership channel must be 1..=255 "
                "bytes.", "hello", [h[:44] + string(b"")], "invalid_field"),
        invalid("hello_1025_memberships", "More than 1024 memberships.", "hello",
                [encode(hello(ms=[member("server", "c")] * 1025))[0]], "invalid_field"),
    ]

    # WELCOME
    w = encode(welcome(rid="node-b", generation=0xFF, security_identity="svc"))[0]
    # lane 4, rid len 5, rid 7..13, generation 13..21, identity 21..26, count 26..28
    inv += [
        invalid("welcome_truncated", "Frame ends inside the memberships count.", "welcome",
                [w[:-1]], "truncated"),
        invalid("welcome_trailing_byte", "One byte after the memberships.", "welcome",
                [w + b"\x00"], "trailing_bytes"),
        invalid("welcome_two_frames", "WELCOME has 1 frame.", "welcome", [w, b""],
                "frame_count"),
        invalid("welcome_lane_9", "Lane 9.", "welcome", [replace(w, 4, b"\x09")],
                "invalid_field"),
        invalid("welcome_generation_0", "Generation must be non-zero.", "welcome",
                [replace(w, 13, u64(0))], "invalid_field"),
        invalid("welcome_rid_bad_utf8", "RID with byte FF.", "welcome",
                [replace(w, 7, b"\xff")], "invalid_field"),
    ]

    # REJECT
    r = encode(reject("identity_mismatch", "rid"))[0]
    inv += [
        invalid("reject_truncated", "Frame ends inside the detail.", "reject", [r[:-1]],
                "truncated"),
        invalid("reject_no_detail_length", "Reason only.", "reject", [r[:5]], "truncated"),
        invalid("reject_trailing_byte", "One byte after the detail.", "reject",
                [r + b"\x00"], "trailing_bytes"),
        invalid("reject_two_frames", "REJECT has 1 frame.", "reject", [r, b""],
                "frame_count"),
        invalid("reject_reason_0", "Reason 0.", "reject", [replace(r, 4, b"\x00")],
                "invalid_field"),
        invalid("reject_reason_10", "Reason 10.", "reject", [replace(r, 4, b"\x0a")],
                "invalid_field"),
        invalid("reject_detail_1025_bytes", "Detail of 1025 bytes.", "reject",
                [header("reject") + b"\x08" + string("d" * 1025)], "invalid_field"),
        invalid("reject_detail_bad_utf8", "Detail C3 28 (invalid 2-byte sequence).",
                "reject", [header("reject") + b"\x08" + string(b"\xc3\x28")],
                "invalid_field"),
    ]

    # PROBE / ACK
    for kind, rec in (("probe", probe(1)), ("ack", ack(1))):
        f = encode(rec)[0]
        inv += [
            invalid(f"{kind}_11_bytes", f"{kind.upper()} one byte short.", kind, [f[:11]],
                    "truncated"),
            invalid(f"{kind}_header_only", f"{kind.upper()} without its id.", kind, [f[:4]],
                    "truncated"),
            invalid(f"{kind}_13_bytes", f"{kind.upper()} one byte long.", kind,
                    [f + b"\x00"], "trailing_bytes"),
            invalid(f"{kind}_with_payload_frame", f"{kind.upper()} carries no payload "
                    "frame (L3).", kind, [f, b""], "frame_count"),
            invalid(f"{kind}_id_0", "The id must be non-zero.", kind,
                    [replace(f, 4, u64(0))], "invalid_field"),
        ]
    inv += [
        invalid("probe_id_0_trailing", "Order: trailing_bytes is checked before the zero "
                "id.", "probe", [header("probe") + u64(0) + b"\x00"], "trailing_bytes"),
        invalid("probe_id_0_two_frames", "Order: frame_count is checked before the zero "
                "id.", "probe", [header("probe") + u64(0), b""], "frame_count"),
        invalid("probe_truncated_two_frames", "Order: truncated is checked before the "
                "frame count.", "probe", [probe1[:6], b""], "truncated"),
    ]

    # MESSAGE
    m = encode(message("orders", "0102"))
    inv += [
        invalid("message_truncated", "Frame ends inside the channel.", "message",
                [m[0][:-2], m[1]], "truncated"),
        invalid("message_trailing_byte", "One byte after the channel.", "message",
                [m[0] + b"\x00", m[1]], "trailing_bytes"),
        invalid("message_no_payload_frame", "MESSAGE has 2 frames.", "message", [m[0]],
                "frame_count"),
        invalid("message_three_frames", "MESSAGE has 2 frames.", "message", m + [b""],
                "frame_count"),
        invalid("message_channel_empty", "Channel must be 1..=255 bytes.", "message",
                [header("message") + string(b""), b""], "invalid_field"),
        invalid("message_channel_256_bytes", "Channel of 256 bytes.", "message",
                [header("message") + string("c" * 256), b""], "invalid_field"),
        invalid("message_channel_bad_utf8", "Channel FF.", "message",
                [header("message") + string(b"\xff"), b""], "invalid_field"),
    ]

    # REQUEST
    q = encode(request(5, 1500, "non_repeatable_command", "pump", "dispense", "wo-1", "c0"))
    # call_id 4..12, ttl 12..20, semantics 20, channel len 21..23, channel 23..27,
    # method len 27..29, method 29..37, key len 37..39, key 39..43
    inv += [
        invalid("request_truncated_in_key", "Frame ends inside the idempotency key.",
                "request", [q[0][:-1], q[1]], "truncated"),
        invalid("request_truncated_before_method", "Frame ends after the channel.",
                "request", [q[0][:27], q[1]], "truncated"),
        invalid("request_trailing_byte", "One byte after the idempotency key.", "request",
                [q[0] + b"\x00", q[1]], "trailing_bytes"),
        invalid("request_no_payload_frame", "REQUEST has 2 frames.", "request", [q[0]],
                "frame_count"),
        invalid("request_three_frames", "REQUEST has 2 frames.", "request", q + [b""],
                "frame_count"),
        invalid("request_call_id_0", "Call id must be non-zero.", "request",
                [replace(q[0], 4, u64(0)), q[1]], "invalid_field"),
        invalid("request_semantics_4", "Semantics 4.", "request",
                [replace(q[0], 20, b"\x04"), q[1]], "invalid_field"),
        invalid("request_channel_bad_utf8", "Channel with byte FE.", "request",
                [replace(q[0], 23, b"\xfe"), q[1]], "invalid_field"),
        invalid("request_method_empty", "Method must be 1..=255 bytes.", "request",
                [q[0][:27] + string(b"") + string(b""), b""], "invalid_field"),
        invalid("request_method_256_bytes", "Method of 256 bytes.", "request",
                [q[0][:27] + string("m" * 256) + string(b""), b""], "invalid_field"),
        invalid("request_key_256_bytes", "Idempotency key of 256 bytes.", "request",
                [q[0][:37] + string("k" * 256), b""], "invalid_field"),
        invalid("request_key_bad_utf8", "Idempotency key 80.", "request",
                [q[0][:37] + string(b"\x80"), b""], "invalid_field"),
    ]

    # ACCEPT
    a = encode(accept(5, 0x0102030405060708, 42))[0]
    inv += [
        invalid("accept_truncated", "27 bytes.", "accept", [a[:-1]], "truncated"),
        invalid("accept_trailing_byte", "29 bytes.", "accept", [a + b"\x00"],
                "trailing_bytes"),
        invalid("accept_two_frames", "ACCEPT has 1 frame.", "accept", [a, b""],
                "frame_count"),
        invalid("accept_call_id_0", "Call id must be non-zero.", "accept",
                [replace(a, 4, u64(0))], "invalid_field"),
        invalid("accept_generation_0", "Generation must be non-zero.", "accept",
                [replace(a, 12, u64(0))], "invalid_field"),
        invalid("accept_all_zero", "Values are checked in wire order: call_id first.",
                "accept", [header("accept") + u64(0) * 3], "invalid_field"),
    ]

    # REPLY
    p = encode(reply(5, "ok", "c3"))
    inv += [
        invalid("reply_truncated", "No code byte.", "reply", [p[0][:-1], p[1]], "truncated"),
        invalid("reply_trailing_byte", "One byte after the code.", "reply",
                [p[0] + b"\x00", p[1]], "trailing_bytes"),
        invalid("reply_no_payload_frame", "REPLY has 2 frames.", "reply", [p[0]],
                "frame_count"),
        invalid("reply_call_id_0", "Call id must be non-zero.", "reply",
                [replace(p[0], 4, u64(0)), p[1]], "invalid_field"),
        invalid("reply_code_15", "Code 15.", "reply", [replace(p[0], 12, b"\x0f"), p[1]],
                "invalid_field"),
        invalid("reply_code_255", "Code 255.", "reply", [replace(p[0], 12, b"\xff"), p[1]],
                "invalid_field"),
    ]

    # ITEM
    i = encode(item(5, 0, "01"))
    inv += [
        invalid("item_truncated", "seq one byte short.", "item", [i[0][:-1], i[1]],
                "truncated"),
        invalid("item_trailing_byte", "One byte after seq.", "item", [i[0] + b"\x00", i[1]],
                "trailing_bytes"),
        invalid("item_three_frames", "ITEM has 2 frames.", "item", i + [b""],
                "frame_count"),
        invalid("item_call_id_0", "Call id must be non-zero.", "item",
                [replace(i[0], 4, u64(0)), i[1]], "invalid_field"),
    ]

    # CLOSE
    c = encode(close("shutdown"))[0]
    inv += [
        invalid("close_truncated", "No reason byte.", "close", [c[:4]], "truncated"),
        invalid("close_trailing_byte", "One byte after the reason.", "close",
                [c + b"\x00"], "trailing_bytes"),
        invalid("close_two_frames", "CLOSE has 1 frame.", "close", [c, b""],
                "frame_count"),
        invalid("close_reason_0", "Reason 0.", "close", [replace(c, 4, b"\x00")],
                "invalid_field"),
        invalid("close_reason_7", "Reason 7.", "close", [replace(c, 4, b"\x07")],
                "invalid_field"),
    ]

    # BATCH
    b2 = encode(batch(request(1, semantics="query", method="pressure", kind=False),
                      request(2, method="status", kind=False)))
    one = encode(request(1, method="status"))
    inv += [
        invalid("batch_truncated_count", "Count one byte short.", "batch",
                [b2[0][:5]] + b2[1:], "truncated"),
        invalid("batch_trailing_byte", "One byte after the count.", "batch",
                [b2[0] + b"\x00"] + b2[1:], "trailing_bytes"),
        invalid("batch_missing_pair", "Count 2 but one REQUEST pair: 3 frames, not 5.",
                "batch", b2[:3], "frame_count"),
        invalid("batch_extra_frame", "Count 2 with 6 frames.", "batch", b2 + [b""],
                "frame_count"),
        invalid("batch_count_3_for_2_pairs", "Count 3 with 2 pairs: 5 frames, not 7.",
                "batch", [replace(b2[0], 4, u16(3))] + b2[1:], "frame_count"),
        invalid("batch_count_0", "Count 0 (1 frame, consistent) is below 2.", "batch",
                [header("batch") + u16(0)], "invalid_field"),
        invalid("batch_count_1", "Count 1 (3 frames, consistent): a lone call is never "
                "wrapped.", "batch", [header("batch") + u16(1)] + one, "invalid_field"),
        invalid("batch_inner_message", "A MESSAGE inside a BATCH.", "batch",
                b2[:3] + encode(message("orders", "")), "invalid_field"),
        invalid("batch_inner_probe", "A PROBE (with a payload frame) inside a BATCH.",
                "batch", b2[:3] + [probe1, b""], "invalid_field"),
        invalid("batch_inner_call_id_0", "Inner REQUEST with call id 0.", "batch",
                b2[:3] + [replace(b2[3], 4, u64(0)), b""], "invalid_field"),
        invalid("batch_inner_truncated", "Inner REQUEST cut short.", "batch",
                b2[:3] + [b2[3][:-1], b""], "truncated"),
        invalid("batch_inner_trailing_byte", "Inner REQUEST one byte long.", "batch",
                b2[:3] + [b2[3] + b"\x00", b""], "trailing_bytes"),
        invalid("batch_inner_version_2", "Inner envelope of version 2.", "batch",
                b2[:3] + [replace(b2[3], 2, b"\x02"), b""], "unsupported_version"),
        invalid("batch_inner_bad_magic", "Inner envelope with bad magic.", "batch",
                b2[:3] + [replace(b2[3], 0, b"ZZ"), b""], "bad_magic"),
        invalid("batch_inner_unknown_kind", "Inner envelope of kind 0E.", "batch",
                b2[:3] + [replace(b2[3], 3, b"\x0e"), b""], "unknown_kind"),
    ]

    # PUBLISH outside fanout
    pub = encode(publish("74", 1, 9, "68656c6c6f"))
    inv += [
        invalid("publish_outside_fanout", "A PUBLISH envelope as frame 0 of a non-fanout "
                "message.", "publish", pub[1:], "invalid_field"),
        invalid("publish_outside_fanout_short", "The kind is checked before the body: a "
                "bare PUBLISH header is still invalid_field.", "publish",
                [header("publish")], "invalid_field"),
    ]

    une = [
        unencodable("hello_rid_empty", "RID must be 1..=255 bytes.", hello(rid="")),
        unencodable("hello_rid_256_bytes", "RID of 256 bytes.", hello(rid="r" * 256)),
        unencodable("hello_generation_0", "Generation must be non-zero.",
                    hello(generation=0)),
        unencodable("welcome_membership_channel_empty", "Membership channel must be "
                    "1..=255 bytes.", welcome(ms=[member("server", "")])),
        unencodable("reject_detail_1025_bytes", "Detail of 1025 bytes.",
                    reject("protocol", "d" * 1025)),
        unencodable("probe_id_0", "Probe id must be non-zero.", probe(0)),
        unencodable("message_channel_empty", "Channel must be 1..=255 bytes.", message("")),
        unencodable("request_method_256_bytes", "Method of 256 bytes.",
                    request(method="m" * 256)),
        unencodable("accept_generation_0", "Generation must be non-zero.",
                    accept(1, 0, 0)),
        unencodable("batch_of_1", "A lone call is never wrapped.",
                    batch(request(1, kind=False))),
        unencodable("batch_of_0", "An empty batch.", batch()),
    ]
    record_additions(v, inv, une)
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "record",
        "description": "Non-fanout records of zmesh wire format v1 (WIRE.md §3-§6). Frames "
                       "exclude ROUTER routing-id frames.",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }


# ---- added after the first publication ----
#
# Published vectors never change (WIRE.md §8): vectors added later are appended to the end of
# their lists by these functions, so regenerating leaves every earlier vector as it was.

def record_additions(v, inv, une):
    """Codec checks that had no vector yet, and the BATCH check order of WIRE.md §6.2."""
    v.append(valid("hello_1024_memberships", "1024 memberships (the maximum count).",
                   hello(rid="a", ms=[member("server", "c")] * 1024)))
    v.append(valid("request_names_255_bytes", "Channel, method and idempotency key of "
                   "255 bytes each (the maximum).",
                   request(call_id=3, channel="c" * 255, method="m" * 255, key="k" * 255)))
    v.append(valid("batch_inner_payloads_opaque", "Inner payload frames are not checked: any "
                   "bytes, empty included.",
                   batch(request(1, payload="ff00", kind=False),
                         request(2, payload="", kind=False),
                         request(3, payload="5a4d0104", kind=False))))

    h = encode(hello(rid="node-a", generation=1, ms=[member("server", "orders")]))[0]
    w = encode(welcome(rid="node-b", generation=0xFF, security_identity="svc",
                       ms=[member("server", "orders")]))[0]
    # w: lane 4, rid 5..13, generation 13..21, identity 21..26, count 26..28, role 28,
    # channel length 29..31, channel 31..37
    q = encode(request(5, 1500, "non_repeatable_command", "pump", "dispense", "wo-1", "c0"))
    inv.extend([
        invalid("hello_expect_rid_bad_utf8", "Expected RID with byte FF.", "hello",
                [encode(hello(expect_rid="zz"))[0].replace(string("zz"), string(b"\xff"), 1)],
                "invalid_field"),
        invalid("hello_membership_channel_256_bytes", "Membership channel of 256 bytes.",
                "hello", [h[:44] + string("c" * 256)], "invalid_field"),
        invalid("hello_membership_channel_bad_utf8", "Membership channel with byte 80.",
                "hello", [h[:44] + string(b"\x80")], "invalid_field"),
        invalid("welcome_rid_empty", "RID must be 1..=255 bytes.", "welcome",
                [encode(welcome(rid="x"))[0].replace(string("x"), string(b""), 1)],
                "invalid_field"),
        invalid("welcome_identity_256_bytes", "Security identity of 256 bytes.", "welcome",
                [w[:21] + string("i" * 256) + w[26:]], "invalid_field"),
        invalid("welcome_role_0", "Membership role 0.", "welcome", [replace(w, 28, b"\x00")],
                "invalid_field"),
        invalid("welcome_membership_channel_empty", "Membership channel must be 1..=255 "
                "bytes.", "welcome", [w[:29] + string(b"")], "invalid_field"),
        invalid("welcome_1025_memberships", "More than 1024 memberships.", "welcome",
                [encode(welcome(ms=[member("object_client", "c")] * 1025))[0]],
                "invalid_field"),
        invalid("welcome_memberships_truncated", "Memberships count 1, no entry.", "welcome",
                [w[:26] + u16(1)], "truncated"),
        invalid("request_channel_empty", "Channel must be 1..=255 bytes.", "request",
                [q[0][:21] + string(b"") + q[0][27:], q[1]], "invalid_field"),
        invalid("request_channel_256_bytes", "Channel of 256 bytes.", "request",
                [q[0][:21] + string("c" * 256) + q[0][27:], q[1]], "invalid_field"),
        invalid("request_method_bad_utf8", "Method with byte FF.", "request",
                [replace(q[0], 29, b"\xff"), q[1]], "invalid_field"),
        invalid("reply_three_frames", "REPLY has 2 frames.", "reply",
                encode(reply(5, "ok", "c3")) + [b""], "frame_count"),
        invalid("item_no_payload_frame", "ITEM has 2 frames.", "item",
                encode(item(5, 0, "01"))[:1], "frame_count"),
    ])

    # BATCH check order (WIRE.md §6.2): frame 0 completely first, then pair by pair.
    r1 = request_frames(request(1, semantics="query", method="pressure", kind=False))
    r2 = request_frames(request(2, method="status", kind=False))
    b_hdr = header("batch")
    inv.extend([
        invalid("batch_order_count_before_pairs", "Count 1 with 3 frames (consistent): "
                "invalid_field for the count, although the one pair is truncated.", "batch",
                [b_hdr + u16(1), r1[0][:-1], r1[1]], "invalid_field"),
        invalid("batch_order_frame_count_before_count", "Count 1 with 1 frame: the frame "
                "count (3 expected) is checked before the count's value.", "batch",
                [b_hdr + u16(1)], "frame_count"),
        invalid("batch_order_count_0_with_a_pair", "Count 0 with 3 frames: frame_count "
                "(1 expected) before the count's value.", "batch",
                [b_hdr + u16(0)] + r1, "frame_count"),
        invalid("batch_order_first_pair_first", "Pair 1 has call id 0, pair 2 is truncated: "
                "pair 1 is checked completely before pair 2 is looked at.", "batch",
                [b_hdr + u16(2), replace(r1[0], 4, u64(0)), r1[1], r2[0][:-1], r2[1]],
                "invalid_field"),
        invalid("batch_order_truncated_pair_before_bad_magic", "Pair 1 is truncated, pair 2 "
                "has bad magic: truncated.", "batch",
                [b_hdr + u16(2), r1[0][:-1], r1[1], replace(r2[0], 0, b"ZZ"), r2[1]],
                "truncated"),
        invalid("batch_order_value_after_structure_in_a_pair", "Pair 1 has call id 0 and a "
                "trailing byte: within a pair, trailing_bytes comes before values.", "batch",
                [b_hdr + u16(2), replace(r1[0], 4, u64(0)) + b"\x00", r1[1]] + r2,
                "trailing_bytes"),
        invalid("batch_order_kind_before_body", "A bare MESSAGE header as pair 2's envelope: "
                "the kind is checked before the body (invalid_field, not truncated).",
                "batch", [b_hdr + u16(2)] + r1 + [header("message"), b""], "invalid_field"),
        invalid("batch_inner_empty_envelope", "Pair 2's envelope frame is empty.", "batch",
                [b_hdr + u16(2)] + r1 + [b"", b""], "truncated"),
        invalid("batch_inner_publish", "A PUBLISH envelope inside a BATCH.", "batch",
                [b_hdr + u16(2)] + r1
                + [header("publish") + u64(1) + u64(1), b""], "invalid_field"),
    ])

    une.extend([
        unencodable("hello_security_identity_256_bytes", "Security identity of 256 bytes.",
                    hello(security_identity="i" * 256)),
        unencodable("request_channel_empty", "Channel must be 1..=255 bytes.",
                    request(channel="")),
        unencodable("request_key_256_bytes", "Idempotency key of 256 bytes.",
                    request(key="k" * 256)),
        unencodable("reply_call_id_0", "Call id must be non-zero.", reply(call_id=0)),
        unencodable("item_call_id_0", "Call id must be non-zero.", item(call_id=0)),
    ])


def fanout_additions(v, inv, une):
    """The fanout check order of WIRE.md §6.3 where it had no vector yet."""
    v.append(valid("publish_seq_1", "The first record of a publisher: seq 1 (WIRE.md §7.2).",
                   publish("707269636573", 0x0102030405060708, 1, "3432")))
    pub = encode(publish("74", 1, 9, "68656c6c6f"))
    inv.extend([
        invalid("publish_order_truncated_before_frame_count", "Topic and a truncated "
                "envelope, no payload frame: truncated (structure before frame count).",
                "publish", [pub[0], pub[1][:6]], "truncated"),
        invalid("publish_order_kind_before_frame_count", "Topic and a MESSAGE envelope, 2 "
                "frames: invalid_field (the kind before the frame count).", "publish",
                [pub[0], encode(message("orders", ""))[0]], "invalid_field"),
        invalid("publish_order_version_before_frame_count", "Topic and a version-2 "
                "envelope, 2 frames: unsupported_version.", "publish",
                [pub[0], replace(pub[1], 2, b"\x02")], "unsupported_version"),
        invalid("publish_order_frame_count_before_topic", "Empty topic and a good envelope, "
                "no payload frame: frame_count (before the topic's value).", "publish",
                [b"", pub[1]], "frame_count"),
    ])
    une.extend([
        unencodable("publish_topic_beacon_topic_exact_with_beacon_payload", "The exact "
                    "reserved topic is refused whatever the payload (L4).",
                    publish("015a4c4631", 1, 1, "5a460101")),
    ])


# ---- fanout.json ----

def fanout_file():
    v = [
        valid("beacon", "The liveness beacon: exactly these 2 frames (L4).", {"kind": "beacon"}),
        valid("publish", "PUBLISH on topic 't'.", publish("74", 1, 9, "68656c6c6f")),
        valid("publish_empty_payload", "PUBLISH with an empty payload frame.",
              publish("6f72646572732f6e6577", 0x0102030405060708, 0, "")),
        valid("publish_seq_max", "PUBLISH with generation and seq u64 max.",
              publish("74", U64_MAX, U64_MAX, "00")),
        valid("publish_topic_255_bytes", "Topic of exactly 255 bytes (the maximum).",
              publish("ab" * 255, 1, 1, "01")),
        valid("publish_topic_beacon_prefix", "Topic 01 5A 4C 46: a strict prefix of the "
              "reserved topic is an application topic.", publish("015a4c46", 1, 2, "01")),
        valid("publish_topic_beacon_extended", "Topic 01 5A 4C 46 31 00: the reserved topic "
              "plus a byte is an application topic.", publish("015a4c463100", 1, 3, "01")),
        valid("publish_topic_beacon_last_byte_differs", "Topic 01 5A 4C 46 32.",
              publish("015a4c4632", 1, 4, "")),
        valid("publish_topic_01", "Topic 01 (first byte of the reserved topic).",
              publish("01", 1, 5, "5a460101")),
        valid("publish_beacon_payload_other_topic", "The beacon payload on another topic "
              "is an ordinary PUBLISH payload.", publish("74", 1, 6, "5a460101")),
    ]
    pub = encode(publish("74", 1, 9, "68656c6c6f"))
    inv = [
        invalid("empty_message", "No frame at all.", None, [], "frame_count"),
        invalid("reserved_topic_wrong_payload", "Reserved topic, payload 5A 46 01 02.",
                "beacon", [BEACON_TOPIC, bytes.fromhex("5a460102")], "reserved_topic"),
        invalid("reserved_topic_short_payload", "Reserved topic, payload 5A 46 01.",
                "beacon", [BEACON_TOPIC, bytes.fromhex("5a4601")], "reserved_topic"),
        invalid("reserved_topic_long_payload", "Reserved topic, payload 5A 46 01 01 00.",
                "beacon", [BEACON_TOPIC, bytes.fromhex("5a46010100")], "reserved_topic"),
        invalid("reserved_topic_empty_payload", "Reserved topic, empty payload.", "beacon",
                [BEACON_TOPIC, b""], "reserved_topic"),
        invalid("reserved_topic_1_frame", "Reserved topic alone.", "beacon", [BEACON_TOPIC],
                "reserved_topic"),
        invalid("reserved_topic_3_frames", "The beacon plus an empty frame.", "beacon",
                [BEACON_TOPIC, BEACON_PAYLOAD, b""], "reserved_topic"),
        invalid("reserved_topic_publish", "A well-formed PUBLISH envelope and payload on the "
                "reserved topic.", "beacon", [BEACON_TOPIC] + pub[1:], "reserved_topic"),
        invalid("publish_topic_only", "One frame, not the reserved topic.", "publish",
                pub[:1], "frame_count"),
        invalid("publish_no_payload_frame", "Topic and envelope only.", "publish", pub[:2],
                "frame_count"),
        invalid("publish_four_frames", "PUBLISH has 3 frames.", "publish", pub + [b""],
                "frame_count"),
        invalid("publish_envelope_empty", "Empty envelope frame.", "publish",
                [pub[0], b"", pub[2]], "truncated"),
        invalid("publish_truncated", "seq one byte short.", "publish",
                [pub[0], pub[1][:-1], pub[2]], "truncated"),
        invalid("publish_trailing_byte", "One byte after seq.", "publish",
                [pub[0], pub[1] + b"\x00", pub[2]], "trailing_bytes"),
        invalid("publish_bad_magic", "Envelope magic 00 00.", "publish",
                [pub[0], replace(pub[1], 0, b"\x00\x00"), pub[2]], "bad_magic"),
        invalid("publish_version_2", "Envelope version 2.", "publish",
                [pub[0], replace(pub[1], 2, b"\x02"), pub[2]], "unsupported_version"),
        invalid("publish_unknown_kind", "Envelope kind 0E.", "publish",
                [pub[0], replace(pub[1], 3, b"\x0e"), pub[2]], "unknown_kind"),
        invalid("publish_kind_probe", "Only PUBLISH is valid in frame 1.", "publish",
                [pub[0], encode(probe(1))[0], b""], "invalid_field"),
        invalid("publish_kind_message", "A MESSAGE envelope in frame 1.", "publish",
                [pub[0]] + encode(message("orders", "")), "invalid_field"),
        invalid("publish_generation_0", "Generation must be non-zero.", "publish",
                [pub[0], replace(pub[1], 4, u64(0)), pub[2]], "invalid_field"),
        invalid("publish_topic_empty", "Topic must be 1..=255 bytes.", "publish",
                [b""] + pub[1:], "invalid_field"),
        invalid("publish_topic_256_bytes", "Topic of 256 bytes.", "publish",
                [b"\xab" * 256] + pub[1:], "invalid_field"),
        invalid("publish_topic_empty_truncated", "Order: the envelope's structure is "
                "checked before the topic.", "publish", [b"", pub[1][:6], pub[2]],
                "truncated"),
    ]
    une = [
        unencodable("publish_reserved_topic", "Publishing on the exact beacon topic is an "
                    "argument error (L4).", publish("015a4c4631", 1, 0, "")),
        unencodable("publish_topic_empty", "Topic must be 1..=255 bytes.",
                    publish("", 1, 0, "")),
        unencodable("publish_topic_256_bytes", "Topic of 256 bytes.",
                    publish("ab" * 256, 1, 0, "")),
        unencodable("publish_generation_0", "Generation must be non-zero.",
                    publish("74", 0, 0, "")),
    ]
    fanout_additions(v, inv, une)
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "fanout",
        "description": "Classic fanout (PUB/SUB) messages of zmesh wire format v1 "
                       "(WIRE.md §7, §6.3). Frame 0 is the topic.",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }


# ---- cancel.json (capability `cancel`, WIRE.md §4.13, §8.1) ----

def cancel(call_id):
    return {"kind": "cancel", "call_id": str(call_id)}


def cancel_file():
    cap = member("object_client", "\x00cancel")
    v = [
        valid("cancel", "CANCEL of call 1.", cancel(1)),
        valid("cancel_max_call_id", "CANCEL of the largest call id.", cancel(U64_MAX)),
        valid("hello_announcing_cancel",
              "A ClientServer HELLO whose memberships end with the extension entry of cancel "
              "(role object_client, channel 00 'cancel'): valid version-1 bytes.",
              hello("client_server", "cli", 1, "", "srv", 0, 0,
                    [member("object_client", "billing"), cap])),
        valid("welcome_announcing_cancel",
              "The WELCOME answering it: the acceptor speaks cancel too, so it announces it.",
              welcome("client_server", "srv", 2, "srv", [member("server", "orders"), cap])),
    ]
    one = encode(cancel(1))[0]
    two_calls = encode(batch(request(1, 0, "query", "pump", "pressure"),
                             request(2, 0, "undeclared", "pump", "status")))
    inv = [
        invalid("cancel_call_id_zero", "call_id 0.", "cancel", [header("cancel") + u64(0)],
                "invalid_field"),
        invalid("cancel_truncated", "The call id is cut one byte short.", "cancel",
                [one[:-1]], "truncated"),
        invalid("cancel_trailing_bytes", "One byte after the call id.", "cancel",
                [one + b"\x00"], "trailing_bytes"),
        invalid("cancel_with_payload", "A payload frame after a CANCEL.", "cancel",
                [one, b""], "frame_count"),
        invalid("cancel_inside_batch",
                "A CANCEL envelope inside a BATCH: only REQUESTs travel there, and inner "
                "envelopes are version 1.", "batch",
                two_calls[:3] + [encode(cancel(2))[0], b""], "unknown_kind"),
    ]
    une = [
        unencodable("cancel_call_id_zero", "call_id 0 cannot be sent.", cancel(0)),
    ]
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "record",
        "capabilities": ["cancel"],
        "description": "Records of the capability cancel (WIRE.md §4.13, §8.1): decode with "
                       "the record decoder on a connection where both ends announced cancel. "
                       "Without the capability, kind 0E is unknown (records.json, "
                       "unknown_kind_0e).",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }


# ---- calls.json (capability `calls`, WIRE.md §4.14, §8.1) ----

def calls(ttl_ms=0, semantics="query", channel="pump", method="read", items=()):
    return {"kind": "calls", "ttl_ms": str(ttl_ms), "semantics": semantics,
            "channel": channel, "method": method,
            "calls": [{"call_id": str(i), "idempotency_key": k, "payload": p}
                      for (i, k, p) in items]}


def calls_file():
    two = calls(items=[(1, "", "01"), (2, "", "02")])
    v = [
        valid("calls", "Two calls of pump.read, query, no ttl, no keys, payloads 01 and 02.",
              two),
        valid("calls_ttl_keys_empty_payloads",
              "Three calls of orders.place, non-repeatable, ttl 1500 ms, each with its own key; "
              "empty payloads.",
              calls(1500, "non_repeatable_command", "orders", "place",
                    [(7, "k-7", ""), (8, "k-8", ""), (U64_MAX, "k-max", "")])),
    ]
    frames = encode(two)
    env = frames[0]
    one = encode(calls(items=[(1, "", "01"), (2, "", "02")]))[0]
    one_call = (header("calls") + u16(1) + u64(0) + u8(1) + string("pump") + string("read")
                + u64(1) + string(""))
    inv = [
        invalid("calls_count_1", "A CALLS record of one call: a lone call is never wrapped.",
                "calls", [one_call, b"\x01"], "invalid_field"),
        invalid("calls_truncated_in_calls", "The frame ends inside the second call.", "calls",
                [env[:-3]] + frames[1:], "truncated"),
        invalid("calls_trailing_bytes", "One byte after the last call.", "calls",
                [env + b"\x00"] + frames[1:], "trailing_bytes"),
        invalid("calls_missing_payload", "Two calls, one payload frame.", "calls",
                frames[:2], "frame_count"),
        invalid("calls_call_id_zero", "The second call's id is 0.", "calls",
                [replace(one, len(one) - 10, u64(0))] + frames[1:], "invalid_field"),
        invalid("calls_bad_semantics", "Semantics 4.", "calls",
                [replace(env, 14, b"\x04")] + frames[1:], "invalid_field"),
    ]
    une = [
        unencodable("calls_call_id_zero", "call_id 0 cannot be sent.",
                    calls(items=[(1, "", ""), (0, "", "")])),
        unencodable("calls_one_call", "A CALLS record holds 2..=65535 calls.",
                    calls(items=[(1, "", "")])),
    ]
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "record",
        "capabilities": ["calls"],
        "description": "Records of the capability calls (WIRE.md §4.14, §8.1): decode with "
                       "the record decoder on a connection where both ends announced calls. "
                       "Without the capability, kind 0F is unknown.",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }


# ---- credit.json (capability `credit`, WIRE.md §4.15, §8.1) ----

def credit(call_id, items):
    return {"kind": "credit", "call_id": str(call_id), "items": str(items)}


def credit_file():
    one = encode(credit(3, 256))[0]
    v = [
        valid("credit", "CREDIT: stream call 3 may send 256 more items.", credit(3, 256)),
        valid("credit_max", "The largest call id and grant.", credit(U64_MAX, U64_MAX)),
    ]
    inv = [
        invalid("credit_call_id_zero", "call_id 0.", "credit",
                [header("credit") + u64(0) + u64(256)], "invalid_field"),
        invalid("credit_items_zero", "A grant of 0 items.", "credit",
                [header("credit") + u64(3) + u64(0)], "invalid_field"),
        invalid("credit_truncated", "The grant is cut one byte short.", "credit",
                [one[:-1]], "truncated"),
        invalid("credit_trailing_bytes", "One byte after the grant.", "credit",
                [one + b"\x00"], "trailing_bytes"),
        invalid("credit_with_payload", "A payload frame after a CREDIT.", "credit",
                [one, b""], "frame_count"),
    ]
    une = [
        unencodable("credit_items_zero", "A grant of 0 items cannot be sent.", credit(3, 0)),
    ]
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "record",
        "capabilities": ["credit"],
        "description": "Records of the capability credit (WIRE.md §4.15, §8.1): decode with "
                       "the record decoder on a connection where both ends announced credit. "
                       "Without the capability, kind 10 is unknown.",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }


# ---- answers.json (capability `answers`, WIRE.md §4.16, §8.1) ----

def answer(call_id, what, code="ok", payload=""):
    a = {"call_id": str(call_id), "what": what}
    if what != "accept":
        a["code"] = code
        a["payload"] = payload
    return a


def answers(generation, connection_id, items):
    return {"kind": "answers", "generation": str(generation),
            "connection_id": str(connection_id), "answers": items}


def answers_file():
    gen = 0x0102030405060708
    three = answers(gen, 42, [answer(5, "accept_reply", "ok", "c3"), answer(6, "accept"),
                              answer(7, "reply", "busy", "")])
    v = [
        valid("answers", "Call 5 accepted and answered Ok (payload C3), call 6 accepted, call 7 "
              "answered Busy (empty message), on connection 42 of generation 0102030405060708.",
              three),
        valid("answers_one_call_accepted_and_answered",
              "One entry standing for two records: call 1's ACCEPT, then its REPLY Ok.",
              answers(1, 0, [answer(1, "accept_reply", "ok", "")])),
        valid("answers_two_accepts", "Two ACCEPTs, no payload frame.",
              answers(U64_MAX, U64_MAX, [answer(1, "accept"), answer(U64_MAX, "accept")])),
    ]
    frames = encode(three)
    env = frames[0]
    # Offsets: header 4, count 2, generation 8, connection 8 = 22; entry 5 at 22 (8 + 1 + 1),
    # entry 6 at 32 (8 + 1), entry 7 at 41 (8 + 1 + 1).
    lone_accept = header("answers") + u16(1) + u64(gen) + u64(42) + u64(6) + u8(1)
    lone_reply = header("answers") + u16(1) + u64(gen) + u64(42) + u64(7) + u8(2) + u8(0)
    inv = [
        invalid("answers_count_0", "No entry.", "answers",
                [header("answers") + u16(0) + u64(gen) + u64(42)], "invalid_field"),
        invalid("answers_lone_accept", "One ACCEPT alone: a lone record is never wrapped.",
                "answers", [lone_accept], "invalid_field"),
        invalid("answers_lone_reply", "One REPLY alone: a lone record is never wrapped.",
                "answers", [lone_reply, b""], "invalid_field"),
        invalid("answers_truncated", "The frame ends inside the last entry's code.", "answers",
                [env[:-1]] + frames[1:], "truncated"),
        invalid("answers_trailing_bytes", "One byte after the last entry.", "answers",
                [env + b"\x00"] + frames[1:], "trailing_bytes"),
        invalid("answers_missing_payload", "Two REPLY entries, one payload frame.", "answers",
                frames[:2], "frame_count"),
        invalid("answers_payload_after_accepts", "Two ACCEPTs and a payload frame.", "answers",
                encode(answers(1, 0, [answer(1, "accept"), answer(2, "accept")])) + [b""],
                "frame_count"),
        invalid("answers_generation_zero", "Generation 0.", "answers",
                [replace(env, 6, u64(0))] + frames[1:], "invalid_field"),
        invalid("answers_call_id_zero", "Entry 6's call id is 0.", "answers",
                [replace(env, 32, u64(0))] + frames[1:], "invalid_field"),
        invalid("answers_what_0", "Entry 6's what is 0 (it reads no code).", "answers",
                [replace(env, 40, u8(0))] + frames[1:], "invalid_field"),
        invalid("answers_bad_code", "Entry 7's code is 15.", "answers",
                [replace(env, 50, u8(15))] + frames[1:], "invalid_field"),
    ]
    une = [
        unencodable("answers_lone_accept", "A lone ACCEPT cannot be wrapped.",
                    answers(1, 0, [answer(1, "accept")])),
        unencodable("answers_generation_zero", "Generation 0 cannot be sent.",
                    answers(0, 0, [answer(1, "accept"), answer(2, "accept")])),
    ]
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "record",
        "capabilities": ["answers"],
        "description": "Records of the capability answers (WIRE.md §4.16, §8.1): decode with "
                       "the record decoder on a connection where both ends announced answers. "
                       "Each valid record stands for the ACCEPTs and REPLYs its entries name, "
                       "in order. Without the capability, kind 11 is unknown.",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }


# ---- replayed.json (capability `replayed`, WIRE.md §4.17, §8.1) ----

def replayed_file():
    gen = 0x0102030405060708
    ok = dict(reply(5, "ok", "c3"), replayed=True)
    marked = answers(gen, 42, [dict(answer(5, "accept_reply", "ok", "c3"), replayed=True),
                               dict(answer(6, "reply", "exception", "78"), replayed=True),
                               answer(7, "reply", "busy", "")])
    v = [
        valid("reply_replayed", "Call 5 answered Ok (payload C3) from the idempotency record: "
              "code byte 80.", ok),
        valid("reply_replayed_exception", "Call 9 answered Exception (message \"x\") from the "
              "record: code byte 81.", dict(reply(9, "exception", "78"), replayed=True)),
        valid("reply_not_replayed", "Call 5 answered Ok now: the version-1 bytes, code byte 00.",
              reply(5, "ok", "c3")),
        valid("reply_replayed_unavailable", "The highest code, replayed: code byte 8E.",
              dict(reply(1, "unavailable", ""), replayed=True)),
        valid("answers_replayed", "On connection 42 of generation 0102030405060708: call 5 "
              "accepted and answered Ok from the record (code 80), call 6 answered Exception "
              "from the record (code 81), call 7 answered Busy now (code 0B).", marked),
    ]
    frames = encode(marked)
    env = frames[0]
    # Offsets: entries start at 22; entry 5 at 22 (code at 31), entry 6 at 32 (code at 41),
    # entry 7 at 42 (code at 51).
    reply_env = encode(ok)[0]
    inv = [
        invalid("reply_replayed_code_15", "Code byte 8F: the mark on code 15, which does not "
                "exist.", "reply", [replace(reply_env, 12, u8(0x8F)), b"\xc3"],
                "invalid_field"),
        invalid("reply_replayed_code_ff", "Code byte FF.", "reply",
                [replace(reply_env, 12, u8(0xFF)), b"\xc3"], "invalid_field"),
        invalid("answers_replayed_code_15", "Entry 6's code byte is 8F.", "answers",
                [replace(env, 41, u8(0x8F))] + frames[1:], "invalid_field"),
        invalid("reply_replayed_trailing_byte", "A byte after the code: the mark is in the "
                "code byte, never a byte of its own.", "reply",
                [reply_env + b"\x01", b"\xc3"], "trailing_bytes"),
    ]
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "record",
        "capabilities": ["answers", "replayed"],
        "description": "The replayed mark (WIRE.md §4.17, §8.1): decode with the record "
                       "decoder on a connection where both ends announced replayed (and "
                       "answers, for the ANSWERS records). Bit 7 of a REPLY's code byte, in a "
                       "REPLY or an ANSWERS entry, says the answer was replayed from the "
                       "callee's idempotency record. Without the capability a code byte of 80 "
                       "or more is invalid_field, as in version 1.",
        "valid": v,
        "invalid": inv,
        "unencodable": [],
    }


# ---- pack.json (capability `pack`, WIRE.md §4.18, §8.1) ----

def pack(channel, payloads):
    return {"kind": "pack", "channel": channel, "payloads": list(payloads)}


def pack_file():
    three = pack("orders", ["0102", "", "03"])
    v = [
        valid("pack", "Three MESSAGEs on channel orders: payloads 01 02, empty, 03.", three),
        valid("pack_two_empty", "Two empty payloads: frame 1 is empty.", pack("t", ["", ""])),
        valid("pack_64", "64 one-byte payloads 00..3F, the most records a PACK holds.",
              pack("orders", ["%02x" % i for i in range(64)])),
    ]
    frames = encode(three)
    env, body = frames
    # Offsets: header 4, count 2 (4..6), channel 2 + 6 (6..14), lengths 14, 16, 18.
    many = header("pack") + u16(65) + string("orders") + u16(0) * 65
    over = header("pack") + u16(2) + string("big") + u16(0xFFFF) + u16(2)
    inv = [
        invalid("pack_count_0", "No record.", "pack",
                [header("pack") + u16(0) + string("orders"), b""], "invalid_field"),
        invalid("pack_count_1", "One record: a lone record is never wrapped.", "pack",
                [header("pack") + u16(1) + string("orders") + u16(1), b"\x01"],
                "invalid_field"),
        invalid("pack_count_65", "65 records: more than the 64 a PACK holds.", "pack",
                [many, b""], "invalid_field"),
        invalid("pack_truncated", "The frame ends inside the last length.", "pack",
                [env[:-1], body], "truncated"),
        invalid("pack_truncated_count", "Count 4 with three lengths.", "pack",
                [replace(env, 4, u16(4)), body], "truncated"),
        invalid("pack_trailing_bytes", "One byte after the last length.", "pack",
                [env + b"\x00", body], "trailing_bytes"),
        invalid("pack_missing_payloads", "Frame 1 is missing.", "pack", [env], "frame_count"),
        invalid("pack_extra_frame", "A third frame.", "pack", [env, body, b""], "frame_count"),
        invalid("pack_lengths_short", "The lengths add up to 3, frame 1 holds 2 bytes.",
                "pack", [env, body[:-1]], "invalid_field"),
        invalid("pack_lengths_long", "The lengths add up to 3, frame 1 holds 4 bytes.",
                "pack", [env, body + b"\x00"], "invalid_field"),
        invalid("pack_channel_empty", "An empty channel.", "pack",
                [header("pack") + u16(2) + u16(0) + u16(1) + u16(1), b"\x01\x02"],
                "invalid_field"),
        invalid("pack_over_64_kib", "Lengths 65535 and 2: more than 64 KiB of payloads (and "
                "more than the empty frame 1 holds).", "pack", [over, b""], "invalid_field"),
    ]
    une = [
        unencodable("pack_lone_record", "A lone record cannot be wrapped.",
                    pack("orders", ["01"])),
        unencodable("pack_65", "65 records cannot be packed.", pack("orders", [""] * 65)),
    ]
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "record",
        "capabilities": ["pack"],
        "description": "Records of the capability pack (WIRE.md §4.18, §8.1): decode with the "
                       "record decoder on a connection where both ends announced pack. Each "
                       "valid record stands for one MESSAGE per payload on its channel, in "
                       "order. Without the capability, kind 12 is unknown.",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }


# ---- ids16.json (capability `ids16`, WIRE.md §4.19, §8.1) ----

def calls16(ttl_ms=0, semantics="query", channel="pump", method="read", items=()):
    return dict(calls(ttl_ms, semantics, channel, method, items), kind="calls16")


def answers16(generation, connection_id, items):
    return dict(answers(generation, connection_id, items), kind="answers16")


def ids16_file():
    gen = 0x0102030405060708
    two = calls16(items=[(1, "", "01"), (2, "", "02")])
    three = answers16(gen, 42, [answer(5, "accept_reply", "ok", "c3"), answer(6, "accept"),
                                answer(7, "reply", "busy", "")])
    v = [
        valid("calls16", "The calls example as CALLS16: calls 1 and 2 of pump.read, query, no "
              "ttl, no keys, payloads 01 and 02; base 1, offsets 0 and 1.", two),
        valid("calls16_ids_out_of_order_ttl_keys",
              "Calls 1002, 1000 and 1001 of orders.place, non-repeatable, ttl 1500 ms, each "
              "with its own key: base 1000 (the smallest, not the first), offsets 2, 0, 1.",
              calls16(1500, "non_repeatable_command", "orders", "place",
                      [(1002, "k-1002", "c0"), (1000, "k-1000", ""), (1001, "k-1001", "01")])),
        valid("calls16_widest_span_at_u64_max",
              "Calls u64 max and u64 max - 65535: offsets 65535 and 0, the widest span, and "
              "base + offset exactly u64 max.",
              calls16(items=[(U64_MAX, "", ""), (U64_MAX - 0xFFFF, "", "")])),
        valid("answers16", "The answers example as ANSWERS16, base 5: call 5 accepted and "
              "answered Ok (payload C3), call 6 accepted, call 7 answered Busy (empty "
              "message), on connection 42 of generation 0102030405060708.", three),
        valid("answers16_replayed", "The replayed example as ANSWERS16, base 5: call 5 "
              "accepted and answered Ok from the record (code 80), call 6 answered Exception "
              "from the record (code 81), call 7 answered Busy now (code 0B).",
              answers16(gen, 42,
                        [dict(answer(5, "accept_reply", "ok", "c3"), replayed=True),
                         dict(answer(6, "reply", "exception", "78"), replayed=True),
                         answer(7, "reply", "busy", "")])),
        valid("answers16_ids_falling", "Entries in the order the answers were decided: call 12 "
              "accepted, call 10 answered Ok (payload 78), call 11 accepted and answered Busy; "
              "base 10, offsets 2, 0, 1.",
              answers16(3, 7, [answer(12, "accept"), answer(10, "reply", "ok", "78"),
                               answer(11, "accept_reply", "busy", "")])),
    ]

    # CALLS16 `two`: header 4, count 4..6, ttl 6..14, semantics 14, channel 15..21,
    # method 21..27, base 27..35; call 1: offset 35..37, key 37..39; call 2: offset 39..41,
    # key 41..43.
    frames = encode(two)
    env = frames[0]
    one_call = (header("calls16") + u16(1) + u64(0) + u8(1) + string("pump") + string("read")
                + u64(1) + u16(0) + string(""))
    base_0 = replace(env, 27, u64(0))
    inv = [
        invalid("calls16_base_zero", "Base 0 (offsets 0 and 1).", "calls16",
                [base_0] + frames[1:], "invalid_field"),
        invalid("calls16_base_not_smallest", "Calls 2 and 3 as base 1, offsets 1 and 2: no "
                "offset is 0, so the base is not the smallest id (the one byte form is base 2, "
                "offsets 0 and 1).", "calls16",
                [replace(replace(env, 35, u16(1)), 39, u16(2))] + frames[1:],
                "invalid_field"),
        invalid("calls16_offset_overflow", "Base u64 max, offsets 0 and 1: the second call's "
                "id is beyond u64.", "calls16", [replace(env, 27, u64(U64_MAX))] + frames[1:],
                "invalid_field"),
        invalid("calls16_count_1", "A CALLS16 record of one call: a lone call is never "
                "wrapped.", "calls16", [one_call, b"\x01"], "invalid_field"),
        invalid("calls16_truncated_in_calls", "The frame ends inside the second call's "
                "offset.", "calls16", [env[:-3]] + frames[1:], "truncated"),
        invalid("calls16_truncated_in_base", "The frame ends inside the base.", "calls16",
                [env[:31]] + frames[1:], "truncated"),
        invalid("calls16_trailing_bytes", "One byte after the last call.", "calls16",
                [env + b"\x00"] + frames[1:], "trailing_bytes"),
        invalid("calls16_missing_payload", "Two calls, one payload frame.", "calls16",
                frames[:2], "frame_count"),
        invalid("calls16_extra_payload", "Two calls, three payload frames.", "calls16",
                frames + [b""], "frame_count"),
        invalid("calls16_order_frame_count_before_base", "Base 0 and one payload frame "
                "missing: frame_count (before the base's value).", "calls16",
                [base_0] + frames[1:2], "frame_count"),
        invalid("calls16_order_trailing_bytes_before_base", "Base 0 and a byte after the last "
                "call: trailing_bytes (before the base's value).", "calls16",
                [base_0 + b"\x00"] + frames[1:], "trailing_bytes"),
    ]

    # ANSWERS16 `three`: header 4, count 4..6, generation 6..14, connection 14..22,
    # base 22..30; entry 5: offset 30..32, what 32, code 33; entry 6: offset 34..36, what 36;
    # entry 7: offset 37..39, what 39, code 40.
    frames = encode(three)
    env = frames[0]
    lone_accept = header("answers16") + u16(1) + u64(gen) + u64(42) + u64(6) + u16(0) + u8(1)
    base_0 = replace(env, 22, u64(0))
    inv += [
        invalid("answers16_base_zero", "Base 0 (offsets 0, 1 and 2).", "answers16",
                [base_0] + frames[1:], "invalid_field"),
        invalid("answers16_base_not_smallest", "Calls 5, 6 and 7 as base 4, offsets 1, 2 "
                "and 3: no offset is 0.", "answers16",
                [replace(replace(replace(env, 30, u16(1)), 34, u16(2)), 37, u16(3))]
                + frames[1:], "invalid_field"),
        invalid("answers16_offset_overflow", "Base u64 max - 1, offsets 0, 1 and 2: entry 7's "
                "id is beyond u64.", "answers16",
                [replace(env, 22, u64(U64_MAX - 1))] + frames[1:], "invalid_field"),
        invalid("answers16_lone_accept", "One ACCEPT alone: a lone record is never wrapped.",
                "answers16", [lone_accept], "invalid_field"),
        invalid("answers16_generation_zero", "Generation 0.", "answers16",
                [replace(env, 6, u64(0))] + frames[1:], "invalid_field"),
        invalid("answers16_what_4", "Entry 6's what is 4 (it reads no code).", "answers16",
                [replace(env, 36, u8(4))] + frames[1:], "invalid_field"),
        invalid("answers16_bad_code", "Entry 7's code byte is 8F: the replayed mark on code "
                "15, which does not exist.", "answers16",
                [replace(env, 40, u8(0x8F))] + frames[1:], "invalid_field"),
        invalid("answers16_truncated_in_entries", "The frame ends inside entry 6's offset.",
                "answers16", [env[:35]] + frames[1:], "truncated"),
        invalid("answers16_truncated_in_code", "The frame ends before the last entry's code.",
                "answers16", [env[:-1]] + frames[1:], "truncated"),
        invalid("answers16_trailing_bytes", "One byte after the last entry.", "answers16",
                [env + b"\x00"] + frames[1:], "trailing_bytes"),
        invalid("answers16_missing_payload", "Two REPLY entries, one payload frame.",
                "answers16", frames[:2], "frame_count"),
        invalid("answers16_order_frame_count_before_base", "Base 0 and one payload frame "
                "missing: frame_count (before the base's value).", "answers16",
                [base_0] + frames[1:2], "frame_count"),
    ]
    une = [
        unencodable("calls16_span_65536", "Calls 1 and 65537: offset 65536 does not fit a "
                    "u16, so these calls cannot be a CALLS16 (they go as CALLS).",
                    calls16(items=[(1, "", ""), (65537, "", "")])),
        unencodable("calls16_call_id_zero", "call_id 0 cannot be sent.",
                    calls16(items=[(1, "", ""), (0, "", "")])),
        unencodable("calls16_one_call", "A CALLS16 record holds 2..=65535 calls.",
                    calls16(items=[(1, "", "")])),
        unencodable("answers16_span_65536", "ACCEPTs of calls 1 and 65537: not an ANSWERS16 "
                    "(they go as ANSWERS).",
                    answers16(1, 0, [answer(1, "accept"), answer(65537, "accept")])),
        unencodable("answers16_lone_accept", "A lone ACCEPT cannot be wrapped.",
                    answers16(1, 0, [answer(1, "accept")])),
    ]
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "record",
        "capabilities": ["calls", "answers", "replayed", "ids16"],
        "description": "Records of the capability ids16 (WIRE.md §4.19, §8.1): CALLS16 and "
                       "ANSWERS16, CALLS and ANSWERS with each call id written as a u16 offset "
                       "from the record's smallest call id (base). Decode with the record "
                       "decoder on a connection where both ends announced calls, answers, "
                       "replayed and ids16. A valid record stands for exactly the CALLS or "
                       "ANSWERS with the same call ids; the record's JSON lists the call ids "
                       "in full, its base is their smallest and each offset the call id minus "
                       "it. Without the capability, kinds 13 and 14 are unknown.",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }


def write(name, data):
    for part in ("valid", "invalid", "unencodable"):
        part_names = [x["name"] for x in data[part]]
        assert len(part_names) == len(set(part_names)), f"duplicate names in {name} {part}"
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    write("records.json", records_file())
    write("fanout.json", fanout_file())
    write("cancel.json", cancel_file())
    write("calls.json", calls_file())
    write("credit.json", credit_file())
    write("answers.json", answers_file())
    write("replayed.json", replayed_file())
    write("pack.json", pack_file())
    write("ids16.json", ids16_file())
