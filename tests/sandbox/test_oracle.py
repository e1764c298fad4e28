from elfreg.sandbox.inside.codec import encode_output
from elfreg.sandbox.oracle import outputs_match


def m(out, exp, atol=0.0, ds="humaneval", ep="f", inp=()):
    return outputs_match(ds, ep, list(inp), encode_output(out), encode_output(exp), atol)


def test_exact_and_float_tolerance():
    assert m([1, 2], [1, 2]) and not m([1, 2], [2, 1])
    assert m(0.1 + 0.2, 0.3)  # float expected -> atol 1e-6
    assert not m(0.3001, 0.3)
    assert m([1.0, 2.0000000001], [1.0, 2.0])
    assert not m((1.0, 2.0), [1.0, 2.0])  # type must match when not exact
    assert m(1, 1.0)  # == holds


def test_atol_from_dataset():
    assert m(1.00005, 1.0, atol=1e-4) and not m(1.001, 1.0, atol=1e-4)


def test_find_zero_oracle_checks_the_root():
    # evalplus 0.3.1 always fails this task; here a true root passes and a wrong one fails
    assert m(2.0, 1.999, atol=1e-4, ep="find_zero", inp=([-2, 1],))
    assert not m(1.0, 2.0, atol=1e-4, ep="find_zero", inp=([-2, 1],))


def test_mbpp_special_oracles():
    assert m([3, 1], [1, 3], ds="mbpp", ep="similar_elements")
    assert m(None, None, ds="mbpp", ep="check_str") and not m(None, "match", ds="mbpp", ep="check_str")
    assert m(7, 10, ds="mbpp", ep="digit_distance_nums", inp=(123, 256))  # |1-2|+|2-5|+|3-6|
    assert not m(8, 10, ds="mbpp", ep="digit_distance_nums", inp=(123, 256))


def test_error_record_never_matches():
    assert not outputs_match("humaneval", "f", [], {"error": "ValueError"}, {"v": "1"}, 0.0)
