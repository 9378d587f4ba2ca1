"""The builders of the capability files (WIRE.md §4.13-§4.19, §7.5, §8.1): cancel.json,
calls.json, credit.json, answers.json, replayed.json, pack.json, ids16.json and pubpack.json,
with the field-value builders of their kinds.
"""

from gen_wire import (
    BEACON_TOPIC, PUBPACK_MARKER, U64_MAX, batch, encode, header, hello, invalid, member,
    replace, reply, request, string, u16, u64, u8, unencodable, valid, welcome,
)


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


# ---- pubpack.json (capability `pubpack`, WIRE.md §7.5, §8.1) ----

def pubpack(topic, generation, first_seq, payloads):
    return {"kind": "pubpack", "topic": topic, "generation": str(generation),
            "first_seq": str(first_seq), "payloads": list(payloads)}


def pubpack_file():
    three = pubpack("707269636573", 0x0102030405060708, 9, ["0102", "", "03"])
    v = [
        valid("pubpack", "Three PUBLISH records on topic prices, seqs 9, 10 and 11: payloads "
              "01 02, empty, 03.", three),
        valid("pubpack_two_empty", "Two empty payloads: frame 2 is empty.",
              pubpack("74", 1, 1, ["", ""])),
        valid("pubpack_64", "64 one-byte payloads 00..3F, seqs 1..64: the most records a "
              "PUBPACK holds.", pubpack("74", 1, 1, ["%02x" % i for i in range(64)])),
        valid("pubpack_last_seq_max", "Two records whose last seq is 2^64 - 1.",
              pubpack("74", U64_MAX, U64_MAX - 1, ["00", "01"])),
        valid("pubpack_topic_is_the_marker", "The marker's bytes are an ordinary topic.",
              pubpack(PUBPACK_MARKER.hex(), 1, 5, ["", ""])),
    ]
    topic, env, body = encode(three)
    # Offsets in frame 1: header 4, generation 4..12, first_seq 12..20, count 20..22,
    # lengths 22, 24, 26.
    fixed = env[:20]

    def head(count):
        return fixed + u16(count)

    many = head(65) + u16(0) * 65
    over = head(2) + u16(0xFFFF) + u16(2)
    inv = [
        invalid("pubpack_count_0", "No record.", "pubpack", [topic, head(0), b""],
                "invalid_field"),
        invalid("pubpack_count_1", "One record: a lone record is never wrapped.", "pubpack",
                [topic, head(1) + u16(1), b"\x01"], "invalid_field"),
        invalid("pubpack_count_65", "65 records: more than the 64 a PUBPACK holds.",
                "pubpack", [topic, many, b""], "invalid_field"),
        invalid("pubpack_truncated", "Frame 1 ends inside the last length.", "pubpack",
                [topic, env[:-1], body], "truncated"),
        invalid("pubpack_truncated_count", "Count 4 with three lengths.", "pubpack",
                [topic, replace(env, 20, u16(4)), body], "truncated"),
        invalid("pubpack_truncated_first_seq", "Frame 1 ends inside first_seq.", "pubpack",
                [topic, env[:15], body], "truncated"),
        invalid("pubpack_trailing_bytes", "One byte after the last length.", "pubpack",
                [topic, env + b"\x00", body], "trailing_bytes"),
        invalid("pubpack_missing_payloads", "Frame 2 is missing.", "pubpack", [topic, env],
                "frame_count"),
        invalid("pubpack_extra_frame", "A fourth frame.", "pubpack",
                [topic, env, body, b""], "frame_count"),
        invalid("pubpack_topic_empty", "An empty topic.", "pubpack", [b"", env, body],
                "invalid_field"),
        invalid("pubpack_topic_256_bytes", "A topic of 256 bytes.", "pubpack",
                [b"\xab" * 256, env, body], "invalid_field"),
        invalid("pubpack_generation_0", "Generation must be non-zero.", "pubpack",
                [topic, replace(env, 4, u64(0)), body], "invalid_field"),
        invalid("pubpack_last_seq_beyond_u64", "first_seq 2^64 - 1 with two records: the "
                "second's seq does not fit.", "pubpack",
                [topic, replace(env, 12, u64(U64_MAX)), body], "invalid_field"),
        invalid("pubpack_lengths_short", "The lengths add up to 3, frame 2 holds 2 bytes.",
                "pubpack", [topic, env, body[:-1]], "invalid_field"),
        invalid("pubpack_lengths_long", "The lengths add up to 3, frame 2 holds 4 bytes.",
                "pubpack", [topic, env, body + b"\x00"], "invalid_field"),
        invalid("pubpack_over_64_kib", "Lengths 65535 and 2: more than 64 KiB of payloads "
                "(and more than the empty frame 2 holds).", "pubpack", [topic, over, b""],
                "invalid_field"),
        invalid("pubpack_on_reserved_topic", "A well-formed PUBPACK envelope on the reserved "
                "topic: the beacon rule comes first.", "beacon",
                [BEACON_TOPIC, env, body], "reserved_topic"),
        invalid("pubpack_order_truncated_before_frame_count", "Topic and a truncated "
                "envelope, no payload frame: truncated (structure before frame count).",
                "pubpack", [topic, env[:21]], "truncated"),
        invalid("pubpack_order_frame_count_before_count", "Count 1 and no frame 2: "
                "frame_count (before the count's value).", "pubpack",
                [topic, head(1) + u16(1)], "frame_count"),
        invalid("pubpack_order_topic_before_count", "An empty topic and count 1: "
                "invalid_field for the topic, the first value in wire order.", "pubpack",
                [b"", head(1) + u16(1), b"\x01"], "invalid_field"),
    ]
    une = [
        unencodable("pubpack_lone_record", "A lone record cannot be wrapped.",
                    pubpack("74", 1, 1, ["01"])),
        unencodable("pubpack_65", "65 records cannot be packed.",
                    pubpack("74", 1, 1, [""] * 65)),
        unencodable("pubpack_reserved_topic", "Publishing on the exact beacon topic is an "
                    "argument error (L4).", pubpack(BEACON_TOPIC.hex(), 1, 1, ["", ""])),
        unencodable("pubpack_topic_empty", "Topic must be 1..=255 bytes.",
                    pubpack("", 1, 1, ["", ""])),
        unencodable("pubpack_generation_0", "Generation must be non-zero.",
                    pubpack("74", 0, 1, ["", ""])),
        unencodable("pubpack_last_seq_beyond_u64", "The last record's seq must fit in a "
                    "u64.", pubpack("74", 1, U64_MAX, ["", ""])),
    ]
    return {
        "format": "zmesh-spec-vectors",
        "version": 1,
        "decoder": "fanout",
        "capabilities": ["pubpack"],
        "description": "Messages of the fanout capability pubpack (WIRE.md §7.5, §8.1): decode "
                       "with the fanout decoder of a subscriber that announced pubpack (it "
                       "subscribed to the marker 01 5A 4C 46 31 00 70 75 62 70 61 63 6B). "
                       "Each valid PUBPACK stands for one PUBLISH per payload on its topic, "
                       "with seqs first_seq, first_seq + 1, ..., in order. Without the "
                       "capability, kind 15 is unknown.",
        "valid": v,
        "invalid": inv,
        "unencodable": une,
    }
