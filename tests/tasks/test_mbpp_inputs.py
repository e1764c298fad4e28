"""MBPP+ inputs get back the Python types EvalPlus gives them (tuples, sets, complex numbers)."""

import json

import pytest

from elfreg.tasks.testsets import manifest, packaged_data_dir, read_jsonl
from elfreg.tasks.mbpp_inputs import deserialize_inputs


def test_hand_checked_conversions():
    assert deserialize_inputs("Mbpp/2", [[[1, 2], [3]]]) == [[(1, 2), (3,)]]
    assert deserialize_inputs("Mbpp/115", [[[[1], [], 5]]]) == [[[{1}, {}, {}]]]
    assert deserialize_inputs("Mbpp/124", [[1, "1+2j"]]) == [(1.0, 1 + 2j)]
    assert deserialize_inputs("Mbpp/580", [[[1, [2, [3]]]]]) == [(((1, (2, (3,))),))]
    assert deserialize_inputs("Mbpp/722", [[{"a": [1, 2]}, 3]]) == [[{"a": (1, 2)}, 3]]
    assert deserialize_inputs("Mbpp/17", [[3]]) == [[3]]  # no rule: unchanged


def test_same_inputs_as_evalplus():
    mbpp = pytest.importorskip("evalplus.data.mbpp", reason="evalplus (test-only) is not installed; only this "
                               "comparison needs it")
    rows = list(read_jsonl(packaged_data_dir() / manifest()["mbpp_plus"]["file"]))
    for r in rows:
        for split in ("base_input", "plus_input"):
            raw = r[split] or []
            if raw:  # repr: tuples vs lists and sets vs dicts must agree, not just compare equal
                ours = deserialize_inputs(r["task_id"], json.loads(json.dumps(raw)))
                theirs = mbpp.mbpp_deserialize_inputs(r["task_id"], json.loads(json.dumps(raw)))
                assert repr(ours) == repr(theirs), (r["task_id"], split)
