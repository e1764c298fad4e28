"""benchmarks/bench_hostile.py: every case runs, and the hostile inputs are the ones the scorer refuses."""

import sys

import pytest

import bench_hostile as bh
from elfreg.sandbox.inside.codec import CostError, decode_text


def test_every_case_is_timed_at_n_and_4n(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench_hostile.py", "--n", "200", "--repeat", "1"])
    bh.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "ms |" in line]
    assert [r.split(" | ")[0][2:] for r in rows] == [c.__name__ for c in bh.CASES]
    assert all(float(r.rstrip(" |").rsplit(" | ", 1)[1]) > 0 for r in rows)


def test_the_colliding_set_case_is_refused_not_decoded():
    with pytest.raises(CostError):
        decode_text('{"$s":[' + ",".join(str(k * bh.P) for k in range(20_000)) + "]}")
