"""Differential tests' inputs in the payload (codecheck.marshal_inputs / io_inputs): the marshal form the runner
reads is exactly the values the text form decodes to, for every input the shipped benchmarks hold."""

import marshal
import math

import pytest

from elfreg.sandbox.codecheck import encode_inputs, io_inputs, marshal_inputs
from elfreg.sandbox.inside.codec import Opaque, decode_text, encode_text
from elfreg.tasks.testsets import load_humaneval_plus, load_mbpp_plus


def same(a, b) -> bool:
    """Identical values: the same types all the way down, floats to the bit (-0.0, NaN), dicts in order."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a == b and math.copysign(1, a) == math.copysign(1, b) or math.isnan(a) and math.isnan(b)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def _identity_free(x, seen) -> bool:
    """No mutable value reached twice (a program mutating one input must not change another)."""
    if type(x) in (list, dict):
        if id(x) in seen:
            return False
        seen.add(id(x))
    items = x.values() if type(x) is dict else x if type(x) in (list, tuple) else ()
    return all(_identity_free(e, seen) for e in items)


@pytest.mark.parametrize("load", [load_humaneval_plus, load_mbpp_plus], ids=["humaneval+", "mbpp+"])
def test_marshal_inputs_are_the_values_the_text_decodes_to(load):
    written = 0
    for p in load().problems:
        text = encode_inputs((p.base_inputs or []) + (p.plus_inputs or []))
        data = marshal_inputs(text)
        if data is None:
            assert '"$s"' in text or '"$np"' in text or '"$nd"' in text, p.task_id
            continue
        written += 1
        got = marshal.loads(data)
        assert same(got, decode_text(text)), p.task_id
        assert _identity_free(got, set()), p.task_id
    assert written > 100


def test_edge_values_round_trip_and_sets_stay_text():
    values = [[-0.0, float("nan"), float("inf"), 2 ** 200, -(2 ** 64), 1 + 2j, b"\x00", True, None, "\udcff"],
              [(1, [2]), {"b": 1, "a": (2,)}], [[], [[]]]]
    text = encode_inputs(values)
    assert same(marshal.loads(marshal_inputs(text)), decode_text(text))
    assert marshal_inputs(encode_inputs([[{1, 2}]])) is None  # a set's iteration order is the runner's to make
    assert marshal_inputs(encode_text([[Opaque("re.Match")]])) is None  # marshal refuses it: the text decides
    assert marshal_inputs("[" * 500 + "]" * 500) is None  # too deep for the codec: the runner refuses the text


def test_io_inputs_takes_marshal_only_when_every_set_has_it():
    a, b = encode_inputs([[1], [2]]), encode_inputs([[{3}]])
    both = io_inputs([(a[1:-1], marshal_inputs(a)), ("", None), (a[1:-1], marshal_inputs(a))])
    assert [marshal.loads(p) for p in both["inputs_marshal"]] == [[[1], [2]], [[1], [2]]]
    mixed = io_inputs([(a[1:-1], marshal_inputs(a)), (b[1:-1], marshal_inputs(b))])
    assert mixed == {"inputs": "[[1],[2],[" + '{"$s":[3]}' + "]]"} and decode_text(mixed["inputs"]) == [[1], [2], [{3}]]
