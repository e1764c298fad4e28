"""The harness keeps the time (issue 19): a correct but too slow program that replaces every clock it can reach
(``time.perf_counter``, ``monotonic``, ``time``, ``process_time``, the ``*_ns`` ones) still times out, on every
benchmark; the same program without the sleep passes. Before, HumanEval+/MBPP+ read the per-input time from the
program's own ``perf_counter`` and waited up to 5 s longer than the limit, and this program passed there."""

import json

import pytest

from elfreg.eval.completions import Completion
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions
from elfreg.sandbox.codecheck import TimeRule

from ._isolation import any_sandbox

TASK = {"humaneval": "HumanEval/0", "humaneval_plus": "HumanEval/0", "mbpp": "Mbpp/11", "mbpp_plus": "Mbpp/2"}
RULE = TimeRule(min_time_s=1.0, factor=4.0, sample_cap_s=6.0)
CLOCK_PATCH = """
import time as _time
_sleep = _time.sleep
for _name in ("perf_counter", "monotonic", "time", "process_time", "thread_time"):
    setattr(_time, _name, lambda: 0.0)
    setattr(_time, _name + "_ns", lambda: 0)
def {ep}(*args, **kwargs):
    if not {ep}.__dict__.get("slept"):  # only the first call is slow: well inside any total budget
        {ep}.slept = True
        _sleep({delay})
    return _right(*args, **kwargs)
"""


def _slow(p, delay: float) -> str:
    """The reference solution, its entry point renamed, behind a clock-patching wrapper that sleeps ``delay``."""
    import re

    right = re.sub(rf"\b{p.entry_point}\b", "_right", p.reference)
    return right + "\n" + CLOCK_PATCH.format(ep=p.entry_point, delay=delay)


@pytest.mark.parametrize("name", sorted(TASK))
def test_a_clock_patching_slow_program_times_out(name, tmp_path):
    bench = load_benchmark(name)
    p = bench.by_id[TASK[name]]
    comps = [Completion(p.task_id, 0, _slow(p, 2.5), 1, "solution"),  # > the 1 s limit of the first input / call
             Completion(p.task_id, 1, _slow(p, 0.0), 2, "solution")]
    opts = ScoreOptions(workers=1, cache_dir=str(tmp_path / "cache"), allow_subset=True, progress=False,
                        time_rule=RULE, ks=(1,))
    with any_sandbox(memory_bytes=1 << 30) as sb:
        score_completions(bench, comps, tmp_path / "results.jsonl", opts, sb)
    rows = {r["sample"]: r["noalias"] for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert rows[0]["base"] == "timeout", rows[0]
    assert rows[1]["base"] == "pass" and rows[1].get("plus", "pass") == "pass", rows[1]


TRICKLE = """
import os, time
def {ep}(*args, **kwargs):
    while True:  # a record that never ends, one byte at a time: the result pipe is never quiet for long
        for fd in range(3, 64):
            try:
                os.write(fd, b"{{")
            except OSError:
                pass
        time.sleep(0.05)
    return None  # (the sanitizer keeps functions with a return)
"""


def test_a_trickle_of_bytes_does_not_hold_the_clock(tmp_path):
    bench = load_benchmark("humaneval_plus")
    p = bench.by_id["HumanEval/0"]
    opts = ScoreOptions(workers=1, cache_dir=str(tmp_path / "cache"), allow_subset=True, progress=False,
                        time_rule=RULE, ks=(1,))
    program = p.extra["preamble"] + TRICKLE.format(ep=p.entry_point)
    with any_sandbox(memory_bytes=1 << 30) as sb:
        score_completions(bench, [Completion(p.task_id, 0, program, 1, "solution")], tmp_path / "r.jsonl", opts, sb)
    row = json.loads((tmp_path / "r.jsonl").read_text())["noalias"]
    assert row["base"] == "timeout", row


PRECOMPUTE = """
import sys, time
def _answers():  # the inputs are in the runner's frames: answer them all before `ready`, slowly
    f = sys._getframe(1)
    while f is not None and "payload" not in f.f_locals:
        f = f.f_back
    time.sleep({delay})  # (a slow solution that would miss every input's limit)
    return {{}}
_ANSWERS = _answers()
def {ep}(*args, **kwargs):
    return _ANSWERS.get(repr(args), _right(*args, **kwargs))  # (the sanitizer keeps what the entry point uses)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["humaneval_plus", "mbpp_plus"])
def test_a_program_that_computes_while_loading_times_out(name, tmp_path):
    # Before, loading counted only against the whole run's cap (here about 2 x 6 s + 1 s), so a program could spend
    # it all before `ready` and then answer every input at once. Now loading has a limit of its own, by the time rule.
    import re

    bench = load_benchmark(name)
    p = bench.by_id[TASK[name]]
    opts = ScoreOptions(workers=1, cache_dir=str(tmp_path / "cache"), allow_subset=True, progress=False,
                        time_rule=RULE, ks=(1,))
    with any_sandbox(memory_bytes=1 << 30) as sb:
        from elfreg.sandbox.expected import ExpectedOutputs

        exp = ExpectedOutputs(bench, sb, tmp_path / "cache").load_or_compute(progress=False, only={p.task_id})
        tests = exp.io(p, ("base", "plus"))
        load_limit = RULE.limit(sum(t.load for t in tests))
        delay = load_limit + 2.0
        assert delay + 2.0 < 2 * RULE.sample_cap_s  # within the run's cap: the old harness let it through
        right = re.sub(rf"\b{p.entry_point}\b", "_right", p.reference)
        slow = right + PRECOMPUTE.format(ep=p.entry_point, delay=delay)
        fast = right + PRECOMPUTE.format(ep=p.entry_point, delay=0.0)
        comps = [Completion(p.task_id, 0, slow, 1, "solution"), Completion(p.task_id, 1, fast, 2, "solution")]
        score_completions(bench, comps, tmp_path / "results.jsonl", opts, sb)
    rows = {r["sample"]: r["noalias"] for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert rows[0]["base"] == "timeout" and "loading the program took longer" in rows[0]["detail"], rows[0]
    assert rows[1]["base"] == "pass" and rows[1]["plus"] == "pass", rows[1]
