"""The payload's wire form (runner.pack_payload / unpack_payload): what the harness writes is what the runner reads."""

import json

from elfreg.sandbox.inside.runner import pack_payload, unpack_payload


def test_a_payload_comes_back_whole_with_its_binary_parts_in_order():
    payload = {"mode": "io", "program": "x = '\n'\n\udcff", "n": 3, "inputs_marshal": [b"\n\x00a", b"", b"\n\n"]}
    data = pack_payload(payload)
    assert data.count(b"\n") == 1 + 3  # the JSON line's end, then the parts' own newlines only
    back = unpack_payload(data)
    assert [bytes(p) for p in back.pop("inputs_marshal")] == [b"\n\x00a", b"", b"\n\n"]
    assert back == {k: v for k, v in payload.items() if k != "inputs_marshal"}
    assert payload["inputs_marshal"] == [b"\n\x00a", b"", b"\n\n"]  # the caller's payload is left as it was


def test_a_payload_without_binary_parts_is_its_json_line():
    payload = {"mode": "asserts", "program": "pass", "tests": "assert True"}
    data = pack_payload(payload)
    assert data == json.dumps(payload).encode() + b"\n" and unpack_payload(data) == payload
