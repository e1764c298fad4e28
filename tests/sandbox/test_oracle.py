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


TRI_INTS = """
def tri(n):
    if n == 0:
        return [1]
    ans = [1, 3]
    for i in range(2, n + 1):
        if i % 2 == 0:
            ans.append(1 + i // 2{bug})
        else:
            ans.append(ans[-1] + ans[-2] + 1 + (i + 1) // 2)
    return ans
"""


def test_humaneval_plus_130_ints_where_the_reference_has_floats_pass_as_in_evalplus(tmp_path):
    # The reference returns x.0 floats (1 + n / 2); a solution with ints is == to it, which is EvalPlus' check, and
    # passes there. Its long outputs go as digests: the digest form writes numbers by value, so it passes here too.
    import time

    from elfreg.tasks.testsets import load_benchmark
    from elfreg.eval.scoring import score_program
    from elfreg.sandbox.codecheck import TimeRule
    from elfreg.sandbox.expected import ExpectedOutputs

    from ._isolation import any_sandbox

    bench = load_benchmark("humaneval_plus")
    p = bench.by_id["HumanEval/130"]
    big = max(p.plus_inputs)[0]
    ns = {}
    exec(TRI_INTS.format(bug=""), ns)
    ref: dict = {}
    exec(p.reference, ref)
    assert ns["tri"](big) == ref["tri"](big) and "sha" in encode_output(ref["tri"](big))  # ==, and a digest
    with any_sandbox(memory_bytes=2 << 30) as sb:
        exp = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only={p.task_id})
        rule = TimeRule(min_time_s=10.0, sample_cap_s=120.0)
        t = time.monotonic()
        right = score_program(bench, p, p.extra["preamble"] + TRI_INTS.format(bug=""), sb, exp, rule)
        wrong = score_program(bench, p, p.extra["preamble"] + TRI_INTS.format(bug=" + (i == 100000)"), sb, exp, rule)
    assert right["base"] == "pass" and right["plus"] == "pass", right
    assert wrong["base"] == "pass" and wrong["plus"] == "fail", wrong  # only the long outputs differ: digests
    print(f"scored in {time.monotonic() - t:.1f} s")
