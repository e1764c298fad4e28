"""benchmarks/bench_hostile.py: every case runs, and the hostile inputs are the ones the scorer refuses."""

import math
import sys

import pytest

import bench_hostile as bh
from elfreg.sandbox.inside.codec import CostError, decode_text


def test_every_case_is_timed_at_n_and_4n(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench_hostile.py", "--n", "200", "--repeat", "1"])
    bh.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "ms |" in line]
    assert [r.split(" | ")[0][2:] for r in rows] == [c.__name__ for c in bh.CASES]
    # each row: two times and their ratio, finite numbers (a busy machine can stretch either time, so their values
    # are the benchmark's to report, not this test's to judge)
    cells = [[c.removesuffix(" ms") for c in r.strip("| ").split(" | ")[1:]] for r in rows]
    assert all(len(c) == 3 and all(math.isfinite(float(x)) and float(x) >= 0 for x in c) for c in cells), rows


def test_the_colliding_set_case_is_refused_not_decoded():
    with pytest.raises(CostError):
        decode_text('{"$s":[' + ",".join(str(k * bh.P) for k in range(20_000)) + "]}")
