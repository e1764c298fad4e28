"""Ctrl-C whenever it comes (elfreg.ctrlc, elfreg.console): one line and exit code 130, never a traceback, also while
torch and numpy are being imported (numpy turns a KeyboardInterrupt in its import into an ImportError, and torch's
optional numpy import then swallows it: the command went on)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, start_in_foreground

pytestmark = [pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="watches /proc/PID/maps (Linux)"),
              pytest.mark.signals]

# Shared libraries whose mapping shows that an import is under way: numpy's core, then torch's
NUMPY = "_multiarray_umath"
TORCH = "libtorch_cpu"


def _interrupt_when_loading(argv: list[str], library: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Start ``argv``, send SIGINT (as a terminal's Ctrl-C) the moment ``library`` is mapped into it, wait."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = start_in_foreground(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                               start_new_session=True)
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if library in maps.read_text():
                break
        except OSError:
            pass
        time.sleep(0.002)
    assert proc.poll() is None, f"{argv} ended before {library} was loaded"
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _assert_one_line(res: subprocess.CompletedProcess, start: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 130 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(start), lines


@pytest.mark.timeout(300)
@pytest.mark.parametrize("library", [NUMPY, TORCH])
def test_ctrl_c_while_importing_is_one_line(tmp_path, library):
    (tmp_path / "p.jsonl").write_text('{"prompt": "q"}\n')
    argv = [sys.executable, "-m", "elfreg", "generate", "--model", "m", "--prompts", "p.jsonl", "--out", "o.jsonl"]
    res = _interrupt_when_loading(argv, library, tmp_path)
    _assert_one_line(res, "elfreg generate: interrupted before it started; nothing was written")
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.timeout(300)
def test_ctrl_c_while_python_m_elfreg_train_imports_is_one_line(tmp_path):
    argv = [sys.executable, "-m", "elfreg.train", "--config", str(REPO / "configs/tiny-smoke.yaml"), "--output",
            str(tmp_path / "run")]
    res = _interrupt_when_loading(argv, TORCH, tmp_path)
    _assert_one_line(res, f"python -m elfreg.train: interrupted; the complete checkpoints in {tmp_path / 'run'}")


@pytest.mark.timeout(300)
def test_ctrl_c_while_lm_eval_imports_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")   # no hub probe: lm-eval's own imports are what is interrupted
    argv = [sys.executable, "-m", "elfreg", "lm-eval", "--model", str(tmp_path), "--tasks", "gsm8k", "--device",
            "cpu"]
    res = _interrupt_when_loading(argv, TORCH, tmp_path)   # importing elfreg.lm_eval registers the model: torch
    _assert_one_line(res, "elfreg lm-eval: interrupted before it started; nothing was written")


def test_the_handler_is_put_back_and_a_background_job_keeps_ignoring_ctrl_c():
    from elfreg.ctrlc import CtrlC

    inherited = signal.getsignal(signal.SIGINT)   # SIG_IGN when the tests run in a background job
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)   # a foreground process's disposition
        with CtrlC(lambda: "x") as ctrl:
            assert signal.getsignal(signal.SIGINT) == ctrl._handle
            ctrl.working = True
            with pytest.raises(KeyboardInterrupt):
                ctrl._handle(signal.SIGINT, sys._getframe())   # at work, outside an import: Python's own behaviour
            assert ctrl.seen
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a background job's
        with CtrlC(lambda: "x"):
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_a_child_the_tests_signal_starts_with_the_default_dispositions_whatever_the_tests_inherited():
    """A shell starts a background job with SIGINT and SIGQUIT ignored (nohup: SIGHUP too) and children inherit that:
    the Ctrl-C tests above would then send a signal their child never sees."""
    from helpers import SENT_SIGNALS

    def ignored_in(pid: int) -> set[int]:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:"))
        mask = int(line.split()[1], 16)
        return {s for s in SENT_SIGNALS if mask >> (s - 1) & 1}

    before = {s: signal.getsignal(s) for s in SENT_SIGNALS}
    try:
        for s in SENT_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        plain = subprocess.Popen(["sleep", "30"])
        child = start_in_foreground(["sleep", "30"])
        try:
            assert ignored_in(plain.pid) == set(SENT_SIGNALS)   # what a plain Popen inherits: the test is real
            assert ignored_in(child.pid) == set()
            assert all(signal.getsignal(s) is signal.SIG_IGN for s in SENT_SIGNALS)   # the parent's are put back
        finally:
            for p in (plain, child):
                p.kill()
                p.wait()
    finally:
        for s, h in before.items():
            signal.signal(s, h)
