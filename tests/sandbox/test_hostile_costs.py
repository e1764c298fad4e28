"""Hostile samples that attack the harness's time, not its verdicts (issue 28): an output set of hash-colliding
ints (``k * (2**61 - 1)``: every hash 0) made the harness's decoding quadratic (90,000 ints: 170 s, holding the
GIL, so the other worker stalled too); a harness busy elsewhere timed out a correct program whose records waited
in the pipe. No sample may cost another its verdict."""

import json
import threading
import time
from types import SimpleNamespace

import pytest

from elfreg.eval.completions import Completion
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions
from elfreg.sandbox.codecheck import IOTests, TimeRule, encode_inputs, run_io
from elfreg.sandbox.inside.codec import CostError, MAX_KEY_WORK, bounded_keys, decode_plain, decode_text, encode_output
from elfreg.sandbox.oracle import outputs_match

from ._isolation import any_sandbox

P = 2 ** 61 - 1  # hash(k * P) == 0 for every int k


def _colliding_set_text(n: int) -> str:
    return '{"$s":[' + ",".join(str(k * P) for k in range(n)) + "]}"


@pytest.mark.timeout(60)
def test_decoding_a_colliding_set_or_dict_is_refused_in_linear_time():
    for text in (_colliding_set_text(90_000),
                 '{"$d":[' + ",".join("[%d,0]" % (k * P) for k in range(90_000)) + "]}",
                 '{"$s":[' + ",".join('{"$t":[%d,1]}' % (k * P) for k in range(50_000)) + "]}"):
        for decode in (decode_text, decode_plain):
            t = time.monotonic()
            with pytest.raises(CostError):
                decode(text)
            assert time.monotonic() - t < 5.0  # measured ~0.3 s; before: 170 s for the first
    # as many colliding keys as the budget allows, and any number of equal ones, still decode
    few = int(MAX_KEY_WORK ** 0.5)
    assert len(decode_text(_colliding_set_text(few))) == few
    assert decode_text('{"$s":[' + ",".join(["0"] * 200_000 + [str(P)] * 3) + "]}") == {0, P}
    assert bounded_keys([1, 2.0, 3]) == [1, 2.0, 3]


@pytest.mark.timeout(60)
def test_the_set_equality_oracle_refuses_a_colliding_list_in_linear_time():
    out = {"v": "[" + ",".join(str(k * P) for k in range(90_000)) + "]"}
    t = time.monotonic()
    assert not outputs_match("mbpp", "similar_elements", [], out, encode_output([1, 2]), 0.0)
    assert time.monotonic() - t < 5.0
    assert outputs_match("mbpp", "similar_elements", [], {"v": "[" + "2," * 100_000 + "1]"}, encode_output([1, 2]),
                         0.0)


HOSTILE = """
import json, os
def {ep}(*args, **kwargs):
    text = '{{"$s":[' + ",".join(str(k * (2 ** 61 - 1)) for k in range(90000)) + ']}}'
    data = ('{{"i":0,"v":' + json.dumps(text) + '}}\\n').encode()
    for fd in range(3, 64):  # the result pipe is one of them
        try:
            os.write(fd, data)
        except OSError:
            pass
    return None
"""


@pytest.mark.timeout(300)
def test_a_colliding_set_fails_fast_and_a_concurrent_correct_sample_passes(tmp_path):
    bench = load_benchmark("humaneval_plus")
    p = bench.by_id["HumanEval/0"]
    comps = [Completion(p.task_id, 0, p.extra["preamble"] + HOSTILE.format(ep=p.entry_point), 1, "solution"),
             Completion(p.task_id, 1, p.reference, 2, "solution")]
    opts = ScoreOptions(workers=2, cache_dir=str(tmp_path / "cache"), allow_subset=True, progress=False,
                        time_rule=TimeRule(min_time_s=4.0, sample_cap_s=10.0), ks=(1,))
    out = tmp_path / "results.jsonl"
    with any_sandbox(memory_bytes=2 << 30) as sb:
        score_completions(bench, comps[1:], tmp_path / "warm.jsonl", opts, sb)  # expected outputs cached first
        t = time.monotonic()
        score_completions(bench, comps, out, opts, sb)
        took = time.monotonic() - t
    rows = {r["sample"]: r["noalias"] for r in map(json.loads, out.read_text().splitlines())}
    assert rows[0]["base"] == "fail" and "wrong output on input 0" in rows[0]["detail"], rows[0]
    assert rows[1]["base"] == "pass" and rows[1]["plus"] == "pass", rows[1]
    assert took < 60, took  # before: the harness spent 170 s on the first sample's output


def _gil_hog(seconds: float) -> list:
    """A list whose ``set()`` holds the GIL about ``seconds`` (one C call over colliding ints)."""
    n = 2000
    t = time.monotonic()
    set([k * P for k in range(n)])
    per_pair = (time.monotonic() - t) / n ** 2
    return [k * P for k in range(int((seconds / per_pair) ** 0.5))]


BIG_OUTPUTS = """
import time
def f(i):
    time.sleep(0.005)
    return "x" * 1000
"""


@pytest.mark.timeout(120)
def test_a_busy_harness_does_not_time_out_records_written_in_time():
    # 200 records of 1 KB in about 1 s, more than a default pipe (64 KiB) holds; the run may take 4 s (1 s per
    # input, 3 s for the test set, +1 s to load; loading at most 4 s). While it runs, another thread holds the GIL
    # for 6 s (as a costly comparison of another sample's output would). The program wrote every record in time.
    inputs = [[i] for i in range(200)]
    expected = [dict(encode_output("x" * 1000), t=0.001) for _ in inputs]
    tests = [IOTests.build("base", inputs, encode_inputs(inputs), expected, "f", load=1.0)]
    problem = SimpleNamespace(entry_point="f", atol=0.0)
    rule = TimeRule(min_time_s=1.0, sample_cap_s=3.0)
    hog = _gil_hog(6.0)
    got: dict = {}
    with any_sandbox(memory_bytes=1 << 30) as sb:
        assert run_io(sb, BIG_OUTPUTS, problem, "", tests, rule)["base"].passed  # warm, and passes when not busy
        worker = threading.Thread(target=lambda: got.update(run_io(sb, BIG_OUTPUTS, problem, "", tests, rule)))
        worker.start()
        time.sleep(0.5)  # the program is running, its records coming
        t = time.monotonic()
        set(hog)
        assert time.monotonic() - t > 4.0  # the harness was busy longer than the run's whole time limit
        worker.join()
    assert got["base"].passed, got["base"]
