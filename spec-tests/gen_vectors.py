#!/usr/bin/env python3
"""Writes spec-tests/v1/records.json, fanout.json, cancel.json, calls.json, credit.json,
answers.json, replayed.json, pack.json, ids16.json and pubpack.json.

This is a second, independent encoder of zmesh wire format v1, written from WIRE.md (not from
the Rust code), so the committed vectors cross-check the Rust codec rather than echo it. The
committed JSON is the reference; this script only exists to (re)produce it deterministically:

    python3 spec-tests/gen_vectors.py

Standard library only. Field values use the JSON form described in spec-tests/README.md.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "v1")

# The modules below are siblings of this script (gen_wire.py: encoders; gen_records.py:
# records.json and fanout.json; gen_capabilities.py: the capability files). No __pycache__
# is written next to them, so a run leaves only the JSON changed.
if HERE not in sys.path:
    sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

from gen_capabilities import (  # noqa: E402
    answers_file, calls_file, cancel_file, credit_file, ids16_file, pack_file, pubpack_file,
    replayed_file,
)
from gen_records import fanout_file, records_file  # noqa: E402


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
    write("pubpack.json", pubpack_file())
