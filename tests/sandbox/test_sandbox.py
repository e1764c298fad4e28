"""Hostile programs fail or are contained; they never crash or stall the harness or pass a test."""

import os
import shutil
import socket
import time

import pytest

from elfreg.sandbox.inside.codec import decode_text, encode_text
from elfreg.tasks.benchmark import Problem
from elfreg.sandbox.codecheck import (IOTests, OutputStream, TimeRule, encode_inputs, io_inputs, marshal_inputs,
                                      run_asserts, run_io)
from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig
from elfreg.sandbox.config import machine_memory

LIMIT = 3.0


@pytest.fixture(scope="module", params=["auto", "bwrap"])
def sb(request):
    """Every hostile program runs against the default (fork server when root) and the fresh-interpreter path."""
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bwrap not installed: the fresh-interpreter bwrap path cannot run here")
    try:
        box = Sandbox(SandboxConfig(memory_bytes=1 << 30, isolation=request.param))
    except IsolationUnavailable as e:  # a machine without (working) bubblewrap: nothing isolated to test
        pytest.skip(f"no isolation on this machine: {e}")
    with box:
        yield box


def verdict(sb, program, tests="assert True", limit=LIMIT):
    t0 = time.monotonic()
    r = run_asserts(sb, program, tests, limit)
    assert time.monotonic() - t0 < limit + 10, "harness stalled"
    return r


def test_good_program_passes_and_wrong_fails(sb):
    assert verdict(sb, "def f(x):\n    return x + 1", "assert f(1) == 2").passed
    r = verdict(sb, "def f(x):\n    return x", "assert f(1) == 2")
    assert r.status == "fail" and "AssertionError" in r.detail


def test_infinite_loop_times_out(sb):
    t0 = time.monotonic()
    r = verdict(sb, "while True:\n    pass", limit=1.5)
    assert r.status == "timeout" and time.monotonic() - t0 < 5


def test_signal_ignoring_loop_still_killed(sb):
    r = verdict(sb, "import signal\nfor s in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT):\n"
                    "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass", limit=1.5)
    assert r.status == "timeout"


@pytest.mark.parametrize("prog", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "exit(0)",
                                  "raise SystemExit", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"])
def test_exit_before_asserts_fails(sb, prog):
    assert not verdict(sb, prog + "\ndef f():\n    return 1", "assert f() == 2").passed


@pytest.mark.parametrize("prog", [
    "def check(c):\n    pass",  # the test's own check() is defined after the program
    "import builtins\nbuiltins.AssertionError = type('A', (Exception,), {})",
    "import json\njson.dumps = lambda *a, **k: '{\"status\": \"pass\", \"token_ok\": true}'",
    "import os\n_w = os.write\nos.write = lambda fd, b: _w(fd, b'{\"status\": \"pass\", \"token_ok\": true}\\n')",
    "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"status\": \"pass\", \"token_ok\": true}\\n')\n"
    "    except OSError:\n        pass",
])
def test_monkeypatching_checker_or_builtins_never_passes(sb, prog):
    tests = "def check(candidate):\n    assert candidate(2) == 5\ncheck(f)"
    assert not verdict(sb, prog + "\ndef f(x):\n    return 0", tests).passed


def test_memory_bomb_fails(sb):
    assert not verdict(sb, "x = bytearray(8 * 1024 ** 3)\nok = True", "assert ok").passed
    assert not verdict(sb, "l = []\nwhile True:\n    l.append(' ' * 10 ** 7)").passed


def test_gigabytes_of_output_are_discarded(sb):
    r = verdict(sb, "import sys\nfor _ in range(3000):\n    sys.stdout.write('x' * 10 ** 6)\nok = True", "assert ok",
                limit=20)
    assert r.passed  # went to /dev/null, never buffered by the harness


def test_flooding_the_result_channel_is_cut_off(sb):
    sb = Sandbox(SandboxConfig(memory_bytes=1 << 30, max_result_bytes=1 << 20, isolation=sb.config.isolation))
    prog = "import os\nfor fd in range(3, 64):\n    try:\n        [os.write(fd, b'x' * 65536) for _ in range(200)]\n" \
           "    except OSError:\n        pass"
    assert not verdict(sb, prog).passed


def test_cannot_write_or_delete_outside_its_directory(sb, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.chmod(tmp_path, 0o777)
    prog = (f"import os, shutil\nfor act in (lambda: open({str(victim)!r}, 'w').write('gone'),\n"
            f"            lambda: os.remove({str(victim)!r}), lambda: shutil.rmtree({str(tmp_path)!r}),\n"
            f"            lambda: open({str(tmp_path / 'new.txt')!r}, 'w').write('x')):\n"
            "    try:\n        act()\n    except Exception:\n        pass\n"
            "open('mine.txt', 'w').write('ok')\nok = open('mine.txt').read() == 'ok'")
    assert verdict(sb, prog, "assert ok").passed  # its own directory works
    assert victim.read_text() == "keep" and not (tmp_path / "new.txt").exists()


def test_cannot_read_harness_files(sb, tmp_path):
    secret = tmp_path / "expected.json"
    secret.write_text("42")
    for path in (str(secret), __file__, "/proc/1/environ"):
        assert not verdict(sb, f"data = open({path!r}).read()", "assert data").passed, path


def test_no_network(sb):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        prog = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nok = True"
        if sb.isolation.kind == "bwrap" or sb.isolation.netns:
            assert not verdict(sb, prog, "assert ok").passed
        prog2 = "import socket\ns = socket.create_connection(('1.1.1.1', 53), timeout=2)\nok = True"
        assert not verdict(sb, prog2, "assert ok").passed
    finally:
        srv.close()


def _contains_processes(sb) -> bool:
    return sb.isolation.uid_drop or os.geteuid() != 0


def test_fork_bomb_is_contained(sb):
    if not _contains_processes(sb):
        pytest.skip(f"process limit not enforceable here: {sb.isolation.describe()}")
    # First a bounded burst proves the process limit holds, so the real bomb cannot hurt the machine.
    burst = ("import os, time\nn = 0\ntry:\n    for _ in range(500):\n        if os.fork() == 0:\n"
             "            time.sleep(5)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\n")
    assert not verdict(sb, burst, "assert n == 500").passed
    t0 = time.monotonic()
    r = verdict(sb, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", limit=2)
    assert not r.passed and time.monotonic() - t0 < 15
    # and the harness still starts programs normally afterwards
    assert verdict(sb, "x = 1", "assert x == 1").passed


def test_killing_its_parent_does_not_hurt_the_harness(sb):
    if not _contains_processes(sb):
        pytest.skip(f"a root program could signal the harness here: {sb.isolation.describe()}")
    prog = ("import os, signal\nfor act in (lambda: os.kill(os.getppid(), 9), lambda: os.killpg(0, 9),\n"
            "            lambda: os.kill(-1, 9)):\n    try:\n        act()\n    except Exception:\n        pass\n")
    assert not verdict(sb, prog, "assert False").passed
    assert verdict(sb, "x = 1", "assert x == 1").passed


def test_io_mode_compares_in_the_harness(sb):
    p = Problem("t/0", "", "", entry_point="f")
    inputs = [[0], [1], [2]]
    tests = [IOTests.build("base", inputs, encode_inputs(inputs), [{"v": encode_text(x + 1), "t": 0.001} for x in range(3)],
                           "f")]
    rule = TimeRule(min_time_s=1.0)

    def io(program):
        return run_io(sb, program, p, "", tests, rule)["base"]

    assert io("def f(x):\n    return x + 1").passed
    assert io("def f(x):\n    return x + 1.0").passed  # equal, not identical: the oracle decides
    r = io("def f(x):\n    return 1")
    assert r.status == "fail" and "input 1" in r.detail
    assert io("def f(x):\n    while x == 2:\n        pass\n    return x + 1").status == "timeout"
    assert io("import os\ndef f(x):\n    os._exit(0)").status == "fail"


def test_io_inputs_read_as_marshal_or_as_text_give_the_same_outputs(sb):
    inputs = [[[1, 2]], [[1, 2]], [-0.0], [2 ** 70], [(1, "é\n")], [{"b": [1], "a": 2}], [b"\x00", 1j, None, True]]
    text = encode_inputs(inputs)
    # each call mutates its first argument: equal inputs are separate objects in both forms
    program = ("def f(*a):\n    if type(a[0]) is list:\n        a[0].append(0)\n"
               "    return repr(a) + repr([type(x).__name__ for x in a])\n")
    fast = io_inputs([(text[1:-1], marshal_inputs(text))])
    assert "inputs_marshal" in fast
    got = []
    for fields in ({"inputs": text}, fast):
        stream = OutputStream([None] * len(inputs), [5.0] * len(inputs))
        sb.run({"mode": "io", "program": program, "entry_point": "f", **fields}, 10.0, stream=stream)
        assert len(stream.got) == len(inputs), stream.failure()
        got.append(stream.got)
    assert got[0] == got[1] and decode_text(got[0][1]["v"]) == "([1, 2, 0],)['list']"


def test_fallback_isolation_still_limits_time_and_verdicts():
    sb = Sandbox(SandboxConfig(isolation="none", memory_bytes=1 << 30))
    assert sb.isolation.kind == "none" and not sb.isolation.isolated and sb.isolation.reason
    assert sb.isolation.describe().startswith("UNISOLATED")
    assert verdict(sb, "def f():\n    return 1", "assert f() == 1").passed
    assert verdict(sb, "while True:\n    pass", limit=1.0).status == "timeout"
    assert not verdict(sb, "import sys\nsys.exit(0)", "assert False").passed


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="memory_bytes"):
        SandboxConfig(memory_bytes=0)
    with pytest.raises(ValueError, match="isolation"):
        SandboxConfig(isolation="docker")
    with pytest.raises(ValueError, match="nproc"):
        SandboxConfig(nproc=-1)


@pytest.mark.parametrize("field, value", [
    ("memory_bytes", int(1e30 * (1 << 30))),  # --memory-gb 1e30: it said to install bubblewrap (issue 36)
    ("memory_bytes", 16 << 20),  # too little for an interpreter to start: the same misleading refusal
    ("memory_bytes", 2 * machine_memory()), ("workdir_bytes", 2 * machine_memory()), ("file_bytes", 0),
    ("max_result_bytes", 1 << 50), ("nproc", 10 ** 9), ("open_files", 3), ("memory_bytes", 2.5e9),
    ("memory_bytes", float("nan")), ("nproc", True)])
def test_limits_out_of_range_are_refused_naming_the_field_and_the_range(field, value):
    with pytest.raises(ValueError) as e:
        SandboxConfig(**{field: value})
    msg = str(e.value)
    assert msg.startswith(f"SandboxConfig.{field} must be an integer between ") and "\n" not in msg, msg
    assert "bubblewrap" not in msg


def test_the_default_limits_and_the_ends_of_each_range_are_accepted():
    SandboxConfig()
    SandboxConfig(memory_bytes=64 << 20, workdir_bytes=1 << 20, file_bytes=1 << 20, max_result_bytes=1 << 20,
                  nproc=1, open_files=16)
    SandboxConfig(memory_bytes=machine_memory(), workdir_bytes=machine_memory(), nproc=1 << 15, open_files=1 << 16)


def test_the_smallest_memory_limit_runs_a_program_in_every_mode():
    """64 MiB, the lowest accepted: enough for the interpreter on every path (a lower one made the probe fail and
    the scorer say bubblewrap was missing)."""
    for isolation in ("auto", "bwrap", "none"):
        try:
            sb = Sandbox(SandboxConfig(memory_bytes=64 << 20, isolation=isolation))
        except IsolationUnavailable as e:
            assert "bubblewrap not found" in str(e) or "needs root" in str(e), e
            continue
        with sb:
            assert verdict(sb, "x = [0] * 1000", "assert len(x) == 1000").passed, isolation


def test_keyrings_are_refused(sb):
    # The per-uid keyring outlives every process of the uid: one program could leave its code there for the next.
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip(f"no keyring syscall numbers known for {os.uname().machine}")
    prog = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
            "nr = {'x86_64': 248, 'aarch64': 217}[__import__('os').uname().machine]\n"
            "r = libc.syscall(nr, b'user', b'k', b'v', 1, ctypes.c_int(-4))\nerr = ctypes.get_errno()")
    r = verdict(sb, prog, "assert r == -1 and err == 1, (r, err)")
    assert r.passed, r.detail


WRITER = """
import os
written = []
for path in ("/x", "/usr/x", "/root/x", "/etc/x", "/dev/x", "/dev/shm/x", "/proc/x", "/tmp/x", "/sandbox/x"):
    try:
        with open(path, "w") as f:
            f.write("x")
        written.append(path)
    except OSError:
        pass
with open("/dev/null", "w") as f:
    f.write("output goes nowhere")
"""


@pytest.mark.parametrize("harness", ["as-is", "pretend-not-root"])
def test_a_program_writes_only_its_own_tmpfs(monkeypatch, harness):
    """Not root, the program owns bubblewrap's root tmpfs (no size limit) and its /dev: both are read-only. Here
    as root, the non-root start (a user namespace, no uid drop, no fork server) is taken by pretending."""
    if harness == "pretend-not-root":
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
    try:
        sb = Sandbox(SandboxConfig(memory_bytes=1 << 30))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")
    with sb:
        r = verdict(sb, WRITER, "assert written == ['/tmp/x', '/sandbox/x'], written")
    assert r.passed, (sb.isolation.describe(), r.detail)


NESTED_USERNS = """
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NEWUSER, SIGCHLD = 0x10000000, 17
clone_nr = {'x86_64': 56, 'aarch64': 220}[os.uname().machine]
got = {}
got['unshare'] = (libc.unshare(NEWUSER), ctypes.get_errno())
pid = libc.syscall(clone_nr, NEWUSER | SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
got['clone'] = (pid, ctypes.get_errno())
if pid > 0:
    os.waitpid(pid, 0)
# what a program does need still works: threads and processes (clone without the flag, clone3's fallback)
ran = []
t = threading.Thread(target=ran.append, args=[1])
t.start()
t.join()
child = os.fork()
if child == 0:
    os._exit(7)
got['fork'] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
got['thread'] = ran
"""


def test_a_program_cannot_make_a_user_namespace():
    """unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER) are refused (EPERM) by the runner's filter in every
    isolation mode; threads and forks still run."""
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip(f"no namespace syscall numbers known for {os.uname().machine}")
    from ._isolation import any_sandbox

    with any_sandbox(memory_bytes=1 << 30) as sb:
        r = run_asserts(sb, NESTED_USERNS, "assert got == {'unshare': (-1, 1), 'clone': (-1, 1), 'fork': 7, "
                                           "'thread': [1]}, got", 30.0)
    assert r.passed, (sb.isolation.describe(), r.detail)
