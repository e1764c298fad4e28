"""The fork server (zygote): each program gets a fresh isolated child; nothing carries over between
programs; the server itself cannot be hurt by a program and is replaced when it dies."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from elfreg.sandbox.codecheck import run_asserts
from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig
from elfreg.sandbox.sandbox import _MAX_SLOTS, _UID_BASE

SRC = str(Path(__file__).resolve().parents[2] / "src")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which(os.environ.get("ELFREG_BWRAP", "bwrap")) is None,
                                reason="the fork server needs root (private uids) and bubblewrap")


@pytest.fixture(scope="module")
def sb():
    try:
        box = Sandbox(SandboxConfig(memory_bytes=1 << 30, isolation="zygote"))
    except IsolationUnavailable as e:  # bubblewrap present but not working here
        pytest.skip(f"no fork server on this machine: {e}")
    with box:
        assert box.isolation.fork_server and "zygote" in box.isolation.describe()
        yield box


def ok(sb, program, tests="assert ok", limit=5.0):
    return run_asserts(sb, program, tests, limit)


def _server_pid(sb) -> int:
    (z,) = [z for z in sb._zygotes.values() if z.alive()]  # one worker -> one server
    return z.proc.pid


def test_runs_as_a_private_uid_in_a_fresh_private_directory(sb):
    prog = textwrap.dedent("""
        import os, stat, tempfile
        st = os.stat('.')
        ok = (os.getuid() != 0 and os.getcwd() == '/sandbox' and st.st_uid == os.getuid()
              and stat.S_IMODE(st.st_mode) == 0o700 and os.listdir('.') == [] and os.listdir('/tmp') == []
              and tempfile.gettempdir() == '/sandbox')
        open('left.txt', 'w').write('x')
        open('/tmp/left.txt', 'w').write('x')
    """)
    assert ok(sb, prog).passed
    assert ok(sb, prog).passed  # the second program sees none of the first one's files


def test_nothing_of_a_program_survives_into_the_next(sb):
    # A daemon that escapes the process group (setsid + double fork) and keeps running...
    daemon = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.01)
            os._exit(0)
        time.sleep(0.2)
        ok = True
    """)
    assert ok(sb, daemon).passed
    # ...is gone when the next program of the same worker (same uid) starts; so are monkeypatches.
    after = textwrap.dedent("""
        import builtins, math, os
        mine = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()
                and os.stat('/proc/' + p).st_uid == os.getuid()]
        ok = mine == [] and math.sqrt(4) == 2 and builtins.len([1]) == 1
        math.sqrt = lambda x: 0
        builtins.len = lambda x: 7
    """)
    assert ok(sb, after).passed
    assert ok(sb, after).passed


def test_a_program_cannot_hurt_the_server(sb):
    assert ok(sb, "x = 1", "assert x == 1").passed
    pid = _server_pid(sb)
    hostile = textwrap.dedent("""
        import os, signal
        for p in os.listdir('/proc'):
            if p.isdigit() and int(p) != os.getpid():
                for s in (signal.SIGKILL, signal.SIGSTOP):
                    try:
                        os.kill(int(p), s)
                    except OSError:
                        pass
        for path in ('/proc/1/mem', '/proc/2/mem', '/proc/2/environ'):
            try:
                open(path, 'rb').read(1)
                raise SystemExit('read ' + path)
            except OSError:
                pass
        ok = True
    """)
    assert ok(sb, hostile).passed  # every attempt failed, so the program got to its end
    assert ok(sb, "x = 1", "assert x == 1").passed
    assert _server_pid(sb) == pid  # the same server, never restarted


def test_a_dead_server_is_replaced(sb):
    assert ok(sb, "x = 1", "assert x == 1").passed
    pid = _server_pid(sb)
    os.killpg(pid, signal.SIGKILL)
    time.sleep(0.1)
    assert ok(sb, "x = 1", "assert x == 1").passed
    assert _server_pid(sb) != pid


def test_killed_harness_leaves_no_sandboxed_process(tmp_path):
    # A harness running a never-ending program is SIGKILLed: the server sees EOF and takes everything down.
    script = tmp_path / "harness.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {SRC!r})
        from elfreg.sandbox.codecheck import run_asserts
        from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig
        from elfreg.sandbox.sandbox import _MAX_SLOTS, _UID_BASE
        sb = Sandbox(SandboxConfig(isolation="zygote"))
        print("ready", flush=True)
        run_asserts(sb, "import os\\nos.fork()\\nwhile True:\\n    pass", "assert True", 300)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        uid = _UID_BASE + proc.pid * _MAX_SLOTS  # the private uid of the harness's slot 0
        deadline = time.monotonic() + 20
        while not _pids_of(uid):
            assert time.monotonic() < deadline, "the program never started"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while _pids_of(uid):
        assert time.monotonic() < deadline, f"processes of uid {uid} outlived the harness: {_pids_of(uid)}"
        time.sleep(0.05)


def _pids_of(uid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == uid:
                    out.append(int(p))
            except OSError:
                pass
    return out


def test_a_failing_fork_server_is_that_samples_error_and_the_run_goes_on(sb, monkeypatch, tmp_path):
    import json

    from elfreg.eval.completions import Completion
    from elfreg.tasks.testsets import load_benchmark
    from elfreg.eval.scoring import ScoreOptions, score_completions
    from elfreg.sandbox.forkserver import Zygote, ZygoteError

    bench = load_benchmark("humaneval")
    p = bench.by_id["HumanEval/0"]
    opts = ScoreOptions(workers=1, cache_dir=str(tmp_path / "cache"), allow_subset=True, progress=False, ks=(1,))
    score_completions(bench, [Completion(p.task_id, 0, p.reference, 1, "solution")], None, opts, sb)  # warm cache
    real, failures = Zygote.submit, [2]  # the next two submissions fail: a start and its one retry

    def flaky(self, *args):
        if failures[0]:
            failures[0] -= 1
            raise ZygoteError("the server stalled")
        return real(self, *args)

    monkeypatch.setattr(Zygote, "submit", flaky)
    comps = [Completion(p.task_id, k, p.reference, k + 1, "solution") for k in range(2)]
    summary = score_completions(bench, comps, tmp_path / "results.jsonl", opts, sb)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["noalias"]["base"] for r in rows] == ["error", "pass"]
    assert rows[0]["noalias"]["detail"] == ("the sandbox failed: the fork server failed twice: the server stalled")
    assert summary["error_samples"] == 1


def test_a_harness_failure_mid_run_leaves_the_server_in_step(sb):
    from elfreg.sandbox.records import RecordStream

    class Broken(RecordStream):
        def feed(self, line, now):
            raise RuntimeError("a bug in the harness")

    with pytest.raises(RuntimeError):
        sb.run({"mode": "asserts", "program": "x = 1", "tests": "pass"}, 5.0, Broken(""))
    assert ok(sb, "x = 1", "assert x == 1").passed  # the next program runs normally on the same server
