"""The pool of killable workers (elfreg.eval.workers): results in completion order; a task that overruns, raises, exhausts its
memory or kills its worker is that task's error, and the pool goes on with a fresh worker; no worker outlives the
main process; a task's clock starts when its worker starts it."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from elfreg.eval.workers import Outcome, KillablePool


def _work(kind: str) -> str:
    if kind == "loop":  # backtracks inside C code: no signal handler can run before it returns
        re.match(r"(a+)+$", "a" * 40 + "b")
    elif kind == "deep":
        raise RecursionError("maximum recursion depth exceeded")
    elif kind == "exit":
        os._exit(9)
    elif kind == "slow":
        time.sleep(1.0)
    elif kind == "hog":  # 2 GiB in 64 MiB pieces: past any limit the tests set
        _ = [bytearray(64 << 20) for _ in range(32)]
    elif kind == "swallow":  # as math-verify does: catch the MemoryError, answer anyway from unfinished work
        try:
            _ = [bytearray(1 << 20) for _ in range(2048)]
        except MemoryError:
            return "WRONG ANYWAY"
    return kind.upper()


@pytest.mark.timeout(60)
def test_overrun_error_and_dead_worker_are_that_task_s_outcome_only():
    kinds = ["loop", "slow", "deep", "exit", "ok", "ok2"]
    t0 = time.monotonic()
    with KillablePool({"work": _work}, workers=2, limit_s=3) as pool:
        got = list(pool.run((k, "testing", "work", (k,)) for k in kinds))
    assert time.monotonic() - t0 < 20
    assert dict(got) == {"loop": Outcome(error="time limit in testing (3 s)"), "slow": Outcome("SLOW"),
                         "deep": Outcome(error="testing: RecursionError"),
                         "exit": Outcome(error="testing: the worker process died (exit code 9)"),
                         "ok": Outcome("OK"), "ok2": Outcome("OK2")}
    order = [k for k, _ in got]
    assert order[-1] == "loop" and order.index("ok2") < order.index("loop")  # finished rows are not held back


def test_the_limits_must_be_positive():
    with pytest.raises(ValueError, match="time limit must be > 0"):
        KillablePool({"work": _work}, workers=1, limit_s=0)
    with pytest.raises(ValueError, match="memory limit must be > 0"):
        KillablePool({"work": _work}, workers=1, limit_s=1, memory_bytes=0)


@pytest.mark.timeout(60)
def test_a_worker_past_its_memory_limit_is_that_task_s_error_and_is_replaced():
    with KillablePool({"work": _work}, workers=1, limit_s=30, memory_bytes=256 << 20) as pool:
        first = pool.pids[0]
        got = list(pool.run((k, "testing", "work", (k.rstrip("23"),))
                            for k in ["ok", "hog", "ok2", "swallow", "ok3"]))
        assert pool.pids[0] != first  # the worker that ran out retired; a fresh one took the next task
    over = Outcome(error="testing: over the memory limit of text work (256 MiB)")
    assert dict(got) == {"ok": Outcome("OK"), "ok2": Outcome("OK"), "ok3": Outcome("OK"), "hog": over,
                         "swallow": over}  # an answer given after a MemoryError of its own is not trusted


_LOADED: list[bool] = []


def _lazy(x: str) -> str:
    """A task whose first call in a process pays for its imports, as math-verify's does (about 1 s)."""
    if not _LOADED:
        time.sleep(0.8)
        _LOADED.append(True)
    if x == "slow":
        time.sleep(5)
    return x


def _arrive(seconds: float) -> str:
    time.sleep(seconds)
    return "arrived"


class _SlowToReceive:
    """An argument that takes 0.8 s to unpickle: the worker is not working on the sample yet."""

    def __reduce__(self):
        return _arrive, (0.8,)


@pytest.mark.timeout(60)
def test_no_worker_start_up_is_charged_to_a_sample():
    # slow samples alternating with quick ones, limit 0.5 s: every replacement worker inherits the warm-up done
    # here, so each quick sample keeps its answer (before: each paid the 0.8 s first call and was over the limit)
    tasks = [(f"{k}{i}", "t", "lazy", (k,)) for i in range(3) for k in ("slow", "quick")]
    with KillablePool({"lazy": _lazy, "echo": lambda x: x}, workers=1, limit_s=0.5,
                  warm_up=lambda: _lazy("warm")) as pool:
        got = dict(pool.run(tasks + [("received", "t", "echo", (_SlowToReceive(),))]))
    assert _LOADED == [True]  # the warm-up ran in this process
    assert got == {**{f"slow{i}": Outcome(error="time limit in t (0.5 s)") for i in range(3)},
                   **{f"quick{i}": Outcome("quick") for i in range(3)},
                   "received": Outcome("arrived")}  # the clock starts once the worker has the task in hand


_ORPHAN_PARENT = textwrap.dedent("""
    import os, sys, time
    from elfreg.eval import workers
    from elfreg.eval.workers import Outcome, KillablePool

    born, init, shed = [], workers._Worker.__init__, workers._keep_only
    def count(self, *args):  # a child sees how many workers were forked before it
        born.append(1)
        init(self, *args)
    def late_shed(keep):  # the first worker runs late, as a loaded scheduler may run it: after its sibling's task
        if len(born) == 1:
            time.sleep(1.0)
        shed(keep)
    workers._Worker.__init__, workers._keep_only = count, late_shed

    def work(kind):
        if kind == "busy":
            time.sleep(600)  # still running when the parent dies
        return kind

    results = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # as eval score's results.jsonl
    pool = KillablePool({"work": work}, workers=2, limit_s=900)
    run = pool.run([("busy", "t", "work", ("busy",)), ("idle", "t", "work", ("idle",))])
    assert next(run) == ("idle", Outcome("idle"))
    holder = os.fork()  # a later child holding every descriptor of the parent (as a sandbox fork server would)
    if holder == 0:
        time.sleep(600)
        os._exit(0)
    print(" ".join(map(str, [holder, *pool.pids])), flush=True)
    next(run)  # blocks on the busy worker until killed
""")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_no_worker_outlives_the_main_process(tmp_path, sig):
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN_PARENT, str(tmp_path / "results.jsonl")],
                              stdout=subprocess.PIPE, text=True)
    holder, workers = None, []
    try:
        holder, *workers = map(int, parent.stdout.readline().split())
        assert len(workers) == 2 and all(map(_alive, workers))
        for pid in workers:  # each worker holds stdio and its own pipe only: no results file, no sibling's pipe
            fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
            assert len(fds) == 4 and fds[0] == os.devnull and str(tmp_path) not in " ".join(fds.values())
        parent.send_signal(sig)  # the main process only
        parent.wait(10)
        deadline = time.monotonic() + 1.0
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [pid for pid in workers if _alive(pid)], "text workers outlived the main process by 1 s"
    finally:  # what this test started and is still running: the parent, the holder, workers that outlived it
        for pid in [p for p in (holder, *workers) if p and _alive(p)] + ([] if parent.poll() is not None
                                                                         else [parent.pid]):
            os.kill(pid, signal.SIGKILL)
        parent.wait()


def test_a_worker_that_dies_before_it_is_ready_is_an_error_not_a_hang(monkeypatch):
    import elfreg.eval.workers as workers

    def die(keep):
        os._exit(3)
    monkeypatch.setattr(workers, "_keep_only", die)
    with pytest.raises(RuntimeError, match=r"ended before it was ready \(exit code 3\)"):
        KillablePool({"work": _work}, workers=1, limit_s=1)


# A parent whose heap the allocator kept after a free: 6 million small strings, one in 256 still alive, so Python
# keeps their arenas. A task then makes 3 million small strings (about 200 MB): it can fill the inherited room
# without mapping anything, so the data limit alone never stops it
_FRAGMENTED_PARENT = textwrap.dedent("""
    import sys
    from elfreg.eval.workers import KillablePool
    kept = [str(i) + "ab" for i in range(6_000_000)][::256]

    def fill(n):
        return len([str(i) + "cd" for i in range(n)])

    with KillablePool({"fill": fill}, workers=1, limit_s=60, memory_bytes=128 << 20) as pool:
        for key, out in pool.run((k, "testing", "fill", (n,)) for k, n in [("small", 1000), ("big", 3_000_000)]):
            print(key, out.value, out.error)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps_rollup (Linux)")
@pytest.mark.timeout(120)
def test_memory_the_parent_freed_counts_against_a_task_s_limit():
    got = subprocess.run([sys.executable, "-c", _FRAGMENTED_PARENT], capture_output=True, text=True, timeout=100)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["small 1000 None",
                                       "big None testing: over the memory limit of text work (128 MiB)"]
