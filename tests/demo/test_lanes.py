"""Training runs side by side: queue order, job-order results, at most ``lanes`` at once, the first error stops all."""

import threading
import time

import pytest

from elfreg.configtools import ConfigError
from elfreg.demo.config import DemoConfig
from elfreg.demo.lanes import LanePool, QueueBar, _WORKER, stopped
from elfreg.demo.runner import side_by_side
from elfreg.demo.runs import Stopped, lane_order, stop_hook


def test_lane_order_is_seed_major_and_alternates_the_variants():
    assert lane_order([0, 1, 2]) == [("ELF", 0), ("ELF-REG", 0), ("ELF-REG", 1), ("ELF", 1), ("ELF", 2),
                                     ("ELF-REG", 2)]


@pytest.mark.parametrize("lanes", [1, 2, 3])
def test_side_by_side_runs_every_job_at_most_lanes_at_once(lanes):
    lock, running, peak, started = threading.Lock(), [0], [0], []

    def run(job, stop):
        with lock:
            started.append(job)
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return job * 10

    assert side_by_side(list(range(7)), run, lanes) == [j * 10 for j in range(7)]
    assert started[:lanes] == list(range(lanes)) and sorted(started) == list(range(7))
    assert peak[0] == lanes


def test_the_first_error_stops_the_other_lanes_and_is_raised():
    seen = []

    def run(job, stop):
        if job == "bad":
            time.sleep(0.05)
            raise ValueError("lane failed")
        hook = stop_hook(stop)
        for step in range(1, 500):  # a long run: ends at its next step once stop is set
            time.sleep(0.01)
            try:
                hook(step)
            except Stopped:
                seen.append(step)
                raise
        return job

    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="lane failed"):
        side_by_side(["long", "bad", "never"], run, 2)
    assert len(seen) == 1 and seen[0] < 100 and time.perf_counter() - t0 < 3  # "never" was not started


def test_lanes_must_divide_threads():
    assert DemoConfig(threads=2, lanes=2).lanes == 2
    for threads, lanes in ((2, 3), (1, 2), (2, 0)):
        with pytest.raises(ConfigError, match="lanes"):
            DemoConfig(threads=threads, lanes=lanes)


# Worker-process jobs (module level: a spawned worker imports them by name).
def _init_tag(tag: str) -> None:
    _WORKER["tag"] = tag


def _job(name: str) -> str:
    import os

    if name == "bad":
        time.sleep(0.3)
        raise ValueError("lane failed")
    if name == "long":
        for _ in range(3000):  # ends early once the pool asks its runs to stop
            if stopped():
                raise Stopped("stopped")
            time.sleep(0.01)
    QueueBar(_WORKER["queue"]).update(3)
    return f"{_WORKER['tag']}:{name}:{os.getpid()}"


class _Bar:
    def __init__(self):
        self.n = 0

    def update(self, n=1):
        self.n += n


def test_process_lanes_run_every_job_in_its_workers_in_order_and_report_progress():
    import os

    bar = _Bar()
    with LanePool(2, _init_tag, ("w",)) as pool:
        got = pool.map(_job, [("a",), ("b",), ("c",)], bar)
    assert [g.split(":")[:2] for g in got] == [["w", "a"], ["w", "b"], ["w", "c"]]  # the initializer ran
    pids = {int(g.split(":")[2]) for g in got}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2  # at most two worker processes
    assert bar.n == 9  # each job's progress reached the parent's bar


def _sleep_job(name: str, seconds: float) -> str:
    time.sleep(seconds)
    QueueBar(_WORKER["queue"], "first").update(1)
    return name


def _second_job(name: str) -> str:
    QueueBar(_WORKER["queue"], "second").update(2)
    return f"{name}+{time.perf_counter()}"


def test_a_second_job_follows_each_first_job_and_fills_a_lane_that_ran_out_of_first_jobs():
    first, second = _Bar(), _Bar()
    # lane 1 takes "long" (1.5 s); lane 2 takes "a" then "b"; the second jobs of "a" and "b" must run on lane 2
    # while "long" still runs, not after it
    with LanePool(2, _init_tag, ("w",)) as pool:
        t0 = time.perf_counter()
        got = pool.map(_sleep_job, [("long", 1.5), ("a", 0.1), ("b", 0.1)],
                       then=(_second_job, lambda r: (r,)), bars={"first": first, "second": second})
    assert [r for r, _ in got] == ["long", "a", "b"]  # the jobs' order
    assert [s.split("+")[0] for _, s in got] == ["long", "a", "b"]
    second_at = {s.split("+")[0]: float(s.split("+")[1]) for _, s in got}
    assert second_at["a"] < second_at["long"] and second_at["b"] < second_at["long"]
    assert 1.4 < pool.first_done < time.perf_counter() - t0
    assert (first.n, second.n) == (3, 6)  # each tag reached its own bar


def test_process_lanes_stop_the_others_at_the_first_error_and_raise_it():
    t0 = time.perf_counter()
    with LanePool(2, _init_tag, ("w",)) as pool:
        with pytest.raises(ValueError, match="lane failed"):
            pool.map(_job, [("long",), ("bad",), ("never",)])
        assert pool.stop.is_set()
    assert time.perf_counter() - t0 < 25  # "long" (30 s) ended at the stop; "never" did not run


def test_lane_mode_is_validated():
    assert DemoConfig(lane_mode="threads").lane_mode == "threads"
    with pytest.raises(ConfigError, match="lane_mode"):
        DemoConfig(lane_mode="fibers")


_LANE_JOB = '''
import os, time


def tell_and_sleep(path):
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(120)
'''

_DEMO = '''
import sys
from elfreg.demo.lanes import LanePool
import lanejob

with LanePool(1) as pool:
    pool.map(lanejob.tell_and_sleep, [(sys.argv[1],)])
'''


def _gone(pid: int) -> bool:
    """The process has exited (no /proc entry, or a zombie nobody reaped yet)."""
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


@pytest.mark.skipif(not __import__("os").path.isdir("/proc"), reason="reads /proc (Linux)")
def test_a_killed_demo_takes_its_lanes_with_it(tmp_path):
    # `kill -9` of the demo (no Ctrl-C reaches its lanes): a lane must not train on unseen, writing into the output
    import os
    import signal
    import subprocess
    import sys

    from elfreg.demo.lanes import PARENT_CHECK_S

    (tmp_path / "lanejob.py").write_text(_LANE_JOB)
    told = tmp_path / "worker.pid"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    demo = subprocess.Popen([sys.executable, "-c", _DEMO, str(told)], env=env)
    worker = None
    try:
        deadline = time.monotonic() + 120
        while not told.exists() and time.monotonic() < deadline and demo.poll() is None:
            time.sleep(0.1)
        assert told.exists(), "the lane never started its job"
        worker = int(told.read_text())
        assert not _gone(worker)
        demo.kill()
        demo.wait()
        deadline = time.monotonic() + 10 * PARENT_CHECK_S + 10
        while not _gone(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(worker), "the lane outlived the demo"
    finally:
        if demo.poll() is None:
            demo.kill()
        if worker is not None and not _gone(worker):
            os.kill(worker, signal.SIGKILL)
