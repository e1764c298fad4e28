"""The text pool (elfreg.eval.textpool): results in completion order; a task that overruns, raises or kills its
worker is that task's error, and the pool goes on with a fresh worker."""

import os
import re
import time

import pytest

from elfreg.eval.textpool import Outcome, TextPool


def _work(kind: str) -> str:
    if kind == "loop":  # backtracks inside C code: no signal handler can run before it returns
        re.match(r"(a+)+$", "a" * 40 + "b")
    elif kind == "deep":
        raise RecursionError("maximum recursion depth exceeded")
    elif kind == "exit":
        os._exit(9)
    elif kind == "slow":
        time.sleep(1.0)
    return kind.upper()


@pytest.mark.timeout(60)
def test_overrun_error_and_dead_worker_are_that_task_s_outcome_only():
    kinds = ["loop", "slow", "deep", "exit", "ok", "ok2"]
    t0 = time.monotonic()
    with TextPool({"work": _work}, workers=2, limit_s=3) as pool:
        got = list(pool.run((k, "testing", "work", (k,)) for k in kinds))
    assert time.monotonic() - t0 < 20
    assert dict(got) == {"loop": Outcome(error="time limit in testing (3 s)"), "slow": Outcome("SLOW"),
                         "deep": Outcome(error="testing: RecursionError"),
                         "exit": Outcome(error="testing: the worker process died"), "ok": Outcome("OK"),
                         "ok2": Outcome("OK2")}
    order = [k for k, _ in got]
    assert order[-1] == "loop" and order.index("ok2") < order.index("loop")  # finished rows are not held back


def test_the_limit_must_be_positive():
    with pytest.raises(ValueError, match="time limit must be > 0"):
        TextPool({"work": _work}, workers=1, limit_s=0)
