"""Output comparison with EvalPlus' rules, including its special oracles (spec §6).

Differences from evalplus 0.3.1, on purpose: the HumanEval/32 (``find_zero``) oracle records its
result (0.3.1 skips it, so every solution fails); the float tolerance is decided per input.
"""

from __future__ import annotations

import math

import numpy as np

from .inside.codec import bounded_keys, decode_text, digest_of

def dataset_of(benchmark: str) -> str:
    """Which EvalPlus dataset's special oracles apply to ``benchmark`` (``humaneval``, ``mbpp`` or none)."""
    return "humaneval" if benchmark.startswith("humaneval") else "mbpp" if "mbpp" in benchmark else ""


MBPP_SET_EQ = {"similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly",
               "larg_nnum", "intersection_array", "find_dissimilar", "Diff"}
MBPP_NOT_NONE = {"check_str", "text_match_three", "text_starta_endb"}
# Entry points whose outputs a rule of their own judges (identical text to the reference's is not the test).
SPECIAL_ORACLES = frozenset({"find_zero", "are_equivalent", "sum_div", "surface_Area", "digit_distance_nums"}
                            | MBPP_SET_EQ | MBPP_NOT_NONE)


def _poly(xs: list, x: float) -> float:
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge, height):
    slant = math.sqrt((base_edge / 2) ** 2 + height ** 2)
    return round(base_edge ** 2 + 2 * base_edge * slant)


def _digit_distance(a, b):
    sa, sb = str(a), str(b)
    n = max(len(sa), len(sb))
    return sum(abs(int(x) - int(y)) for x, y in zip(sa.zfill(n), sb.zfill(n)))


def is_floats(x) -> bool:
    """A float, a non-empty list/tuple of floats, or a float ndarray."""
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    if isinstance(x, np.ndarray):
        return x.dtype in (np.float64, np.float32)
    return False


def outputs_match(dataset: str, entry_point: str, inp: list, out_rec: dict, exp_rec: dict, atol: float) -> bool:
    """Does the program's output record match the expected one? Records hold ``v`` (text) or ``sha``."""
    if "error" in out_rec:
        return False
    try:
        if "sha" in out_rec or "sha" in exp_rec:  # a long output: digest forms match (numbers by value, as ==)
            return _digest(out_rec) == _digest(exp_rec)
        out, exp = decode_text(out_rec["v"]), decode_text(exp_rec["v"])
        return _match_values(dataset, entry_point, inp, out, exp, atol)
    except Exception:  # noqa: BLE001 - any failure to compare is a mismatch, as in EvalPlus
        return False


def _digest(rec: dict) -> tuple:
    """``(sha, n)`` of an output record's digest form; an output sent as text is decoded and digested here (the
    other side is long: e.g. HumanEval+/130's ints where the reference's floats are more characters)."""
    d = rec if "sha" in rec else digest_of(decode_text(rec["v"]))
    return d["sha"], d["n"]


def _match_values(dataset, entry_point, inp, out, exp, atol) -> bool:
    if dataset == "humaneval" and entry_point == "find_zero":
        return abs(_poly(inp[0], out)) <= atol
    try:
        exact = bool(out == exp)
    except Exception:  # noqa: BLE001 - e.g. ndarray truth value
        exact = False
    if dataset == "mbpp":
        if entry_point == "are_equivalent":
            return True
        if entry_point == "sum_div":
            return exact or out == 0
        if entry_point == "surface_Area":
            return exact or abs(out - _surface_area(*inp)) <= atol
        if entry_point == "digit_distance_nums":
            return exact or out == _digit_distance(*inp)
        if entry_point in MBPP_SET_EQ:
            return set(bounded_keys(list(out))) == set(exp)  # a list of colliding ints: refused, not quadratic
        if entry_point in MBPP_NOT_NONE:
            want = exp is not None  # expected is stored raw; EvalPlus compares "is not None"
            return out == want if isinstance(out, bool) else want == (out is not None)
    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact and atol != 0:
        if type(out) is not type(exp):
            return False
        if isinstance(exp, (list, tuple)) and len(out) != len(exp):
            return False
        return bool(np.allclose(out, exp, rtol=1e-07, atol=atol, equal_nan=True))  # as assert_allclose
    return exact
