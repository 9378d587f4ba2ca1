"""The builders of records.json and fanout.json (the base kinds of wire format v1), with the
vectors appended to them after the first publication (record_additions, fanout_additions).
"""

from gen_wire import (
    BEACON_PAYLOAD, BEACON_TOPIC, CLOSE_REASONS, MAGIC, REJECT_REASONS, REPLY_CODES, SEMANTICS,
    U64_MAX, accept, ack, batch, close, encode, header, hello, invalid, item, member, message,
    probe, publish, reject, replace, reply, request, request_frames, string, u16, u64, u8,
    unencodable, valid, welcome,
)


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
