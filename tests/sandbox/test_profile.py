"""The time split of sandboxed runs (benchmarks only): its parts add up to each run's wall time, the inside's steps
come through, and without a profile nothing of it happens (no stamp, no pipe, no argument, no reply field)."""

import math
import os
import shutil
import subprocess

import pytest

from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig
from elfreg.sandbox.forkserver import Zygote
from elfreg.sandbox.profile import STEPS, SandboxProfile, Stamps, split_run
from elfreg.sandbox.records import RecordStream

_ZYGOTE_OK = os.geteuid() == 0 and shutil.which(os.environ.get("ELFREG_BWRAP", "bwrap")) is not None
_IO = {"mode": "io", "program": "def f(x):\n    return x + 1\n", "entry_point": "f", "inputs": "[[1],[2],[3]]"}
_BAD_LOAD = {"mode": "io", "program": "raise ValueError('no')\n", "entry_point": "f", "inputs": "[[1]]"}


def _sandbox(isolation: str, profile: SandboxProfile | None) -> Sandbox:
    try:
        return Sandbox(SandboxConfig(memory_bytes=1 << 30, isolation=isolation), slots=2, profile=profile)
    except IsolationUnavailable as e:
        pytest.skip(f"no {isolation} sandbox on this machine: {e}")


def _check_adds_up(prof: SandboxProfile, n: int, kind: str) -> None:
    assert len(prof.runs) == n and {r.kind for r in prof.runs} == {kind}
    for r in prof.runs:
        assert set(r.parts) <= set(STEPS) and all(v >= 0 for v in r.parts.values())
        assert math.isclose(sum(r.parts.values()), r.wall_s, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.skipif(not _ZYGOTE_OK, reason="the fork server needs root (private uids) and bubblewrap")
def test_zygote_runs_split_into_their_steps_which_add_up_to_the_wall_time():
    prof = SandboxProfile()
    with _sandbox("zygote", prof) as sb:
        assert prof.runs == []  # the probe is not counted
        good = sb.run(dict(_IO), 5.0)
        bad = sb.run(dict(_BAD_LOAD), 5.0)
    assert [r["status"] for r in good.records if "status" in r] == ["ready", "done"]
    assert bad.records[-1]["status"] == "fail"
    _check_adds_up(prof, 2, "zygote")
    first, second = prof.runs
    # the inside's steps came through the profile pipe, and the program's own steps were timed by the harness
    for step in ("submit", "fork", "namespaces", "payload read", "seccomp+uid", "program load", "inputs", "teardown"):
        assert step in first.parts, step
    assert "program load" not in second.parts  # no ready record: its time went to the next step
    assert "fork" in second.parts and "seccomp+uid" in second.parts
    table = prof.table()
    assert "fork" in table and "2 runs (zygote)" in table


def test_fresh_interpreter_runs_split_into_their_steps_which_add_up_to_the_wall_time():
    prof = SandboxProfile()
    with _sandbox("none", prof) as sb:
        sb.run(dict(_IO), 10.0)
    _check_adds_up(prof, 1, "fresh")
    for step in ("spawn", "interpreter start", "payload read", "seccomp+uid", "program load", "inputs", "teardown"):
        assert step in prof.runs[0].parts, step


def test_without_a_profile_no_run_is_stamped_and_nothing_is_passed_in(monkeypatch):
    popens, replies = [], []
    real_popen, real_finish = subprocess.Popen, Zygote.finish

    def popen(argv, *a, **kw):
        popens.append((list(argv), tuple(kw.get("pass_fds", ()))))
        return real_popen(argv, *a, **kw)

    def finish(self):
        replies.append(real_finish(self))
        return replies[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(Zygote, "finish", finish)
    streams = []
    for isolation in (("zygote",) if _ZYGOTE_OK else ()) + ("none",):
        with _sandbox(isolation, None) as sb:
            assert sb.profile is None
            stream = RecordStream("")
            res = sb.run(dict(_IO), 10.0, stream)
            assert res.records[-1]["status"] == "done"
            streams.append(stream)
    assert all(s.feed_s is None for s in streams)  # the harness's feed() is not timed
    assert not any("--profile" in argv for argv, _ in popens)
    runs = [fds for argv, fds in popens if "-c" in argv and "--zygote" not in argv]
    assert runs and all(len(fds) == 1 for fds in runs)  # the result pipe alone
    assert all("prof" not in r for r in replies)


def test_split_run_orders_the_stamps_on_one_clock_and_ignores_inside_times_out_of_the_run():
    st = Stamps()
    t0 = st.t[0][1]
    st.t += [("slot wait", t0 + 0.001), ("payload", t0 + 0.002), ("memcg", t0 + 0.003), ("inputs", t0 + 0.010),
             ("teardown", t0 + 0.011), ("memcg", t0 + 0.012)]
    inside = [t0 + 0.004, t0 + 0.005, t0 + 99.0, t0 + 0.006, t0 + 0.007]  # one stamp past the run's end
    split = split_run(0, "zygote", st, inside, [t0 + 0.008], [{"status": "ready"}], feed_s=0.0005)
    p = {k: round(v * 1000, 6) for k, v in split.parts.items()}
    assert p == {"slot wait": 1, "payload": 1, "memcg": 2, "submit": 1, "fork": 1, "payload read": 1,
                 "seccomp+uid": 1, "program load": 1, "inputs": 1.5, "checks": 0.5, "teardown": 1}
    assert math.isclose(sum(split.parts.values()), split.wall_s) and math.isclose(split.wall_s, 0.012)
