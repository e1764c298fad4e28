"""JSON every reader parses (elfreg.jsontext): NaN and Infinity are never written."""

import json
import math

import pytest

from elfreg.jsontext import dumps, finite_or_null, non_finite


def test_finite_values_are_written_as_json_does():
    row = {"w": 3.0, "ids": [1, 2], "note": "é"}
    assert dumps(row, ensure_ascii=False) == json.dumps(row, ensure_ascii=False)


@pytest.mark.parametrize("obj, where", [
    ({"w": math.nan}, "w is nan"),
    ({"runs": [{"acc": 0.5}, {"acc": math.inf}]}, r"runs\[1\]\.acc is inf"),
    ([1.0, -math.inf], r"\[1\] is -inf"),
])
def test_nan_and_infinity_are_refused_naming_where_they_sit(obj, where):
    with pytest.raises(ValueError, match=f"^{where}: JSON has no such number"):
        dumps(obj)


def test_a_log_line_writes_null_instead():
    assert finite_or_null({"loss": 1.5, "grad_norm": math.inf, "x": [math.nan, 2]}) == \
        {"loss": 1.5, "grad_norm": None, "x": [None, 2]}
    assert non_finite({"a": [1, {"b": 2.0}]}) is None
