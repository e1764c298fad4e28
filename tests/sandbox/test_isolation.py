"""Isolation is never lost silently (issue 13): without a working bubblewrap, code scoring refuses and says
how to get isolation or how to opt out; ``--isolation none`` runs and every report says it ran unisolated;
a program that kills its parent leaves the scorer running and fails."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from elfreg.eval.cli import run_score
from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig


SRC = str(Path(__file__).resolve().parents[2] / "src")
NO_BWRAP = "/nonexistent/bwrap"  # how these tests make bubblewrap unavailable to the code under test


@pytest.mark.parametrize("isolation", ["auto", "zygote", "bwrap"])
def test_without_bubblewrap_isolating_modes_refuse(monkeypatch, isolation):
    monkeypatch.setenv("ELFREG_BWRAP", NO_BWRAP)
    with pytest.raises(IsolationUnavailable) as e:
        Sandbox(SandboxConfig(isolation=isolation))
    assert "bubblewrap" in str(e.value)
    if isolation == "auto":
        msg = str(e.value)
        assert "apt-get install bubblewrap" in msg and "dnf install bubblewrap" in msg and "--isolation none" in msg


def _score_args(tmp_path, isolation, n=2):
    comp = tmp_path / "c.jsonl"
    from elfreg.tasks.testsets import load_benchmark

    bench = load_benchmark("humaneval")
    with open(comp, "w") as f:
        for p in bench.problems[:n]:
            f.write(json.dumps({"task_id": p.task_id, "completion": "def f(:\n", "sample": 0}) + "\n")
    from elfreg.cli import build_parser

    return build_parser().parse_args([
        "eval", "score", "--benchmark", "humaneval", "--completions", str(comp),
        "--out", str(tmp_path / "out"), "--workers", "1", "--isolation", isolation, "--memory-gb", "1.0",
        "--cache-dir", str(tmp_path / "cache"), "--allow-subset", "--no-progress"])


def test_code_scoring_refuses_without_isolation(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ELFREG_BWRAP", NO_BWRAP)
    assert run_score(_score_args(tmp_path, "auto")) == 2
    err = capsys.readouterr().err
    assert "apt-get install bubblewrap" in err and "--isolation none" in err
    assert not (tmp_path / "out").exists()  # refused before any work


def test_isolation_none_runs_and_every_report_says_unisolated(tmp_path, monkeypatch):
    monkeypatch.setenv("ELFREG_BWRAP", NO_BWRAP)
    assert run_score(_score_args(tmp_path, "none")) == 0
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["isolated"] is False and summary["settings"]["isolation"].startswith("UNISOLATED")
    assert "UNISOLATED" in (out / "summary.md").read_text()
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["isolation"].startswith("UNISOLATED") for r in rows)


KILLER = """
import os, signal
def _kill_everything():
    for act in (lambda: os.kill(os.getppid(), 9), lambda: os.killpg(0, 9),
                lambda: os.killpg(os.getpgid(os.getppid()), 9), lambda: os.kill(-1, 9)):
        try:
            act()
        except Exception:
            pass
    for p in os.listdir('/proc'):
        if p.isdigit() and int(p) != os.getpid():
            try:
                os.kill(int(p), 9)
            except Exception:
                pass
_kill_everything()
def {ep}(*args):
    _kill_everything()
    return True
"""


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_program_that_kills_its_parent_leaves_the_scorer_running(tmp_path, isolation):
    try:
        sb = Sandbox(SandboxConfig(isolation=isolation))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")
    with sb:
        if not (sb.isolation.isolated or sb.isolation.pidns or sb.isolation.uid_drop):
            pytest.skip(f"unisolated without a PID namespace or uid drop, a program can signal the scorer: "
                        f"{sb.isolation.describe()}")
    # The scorer runs in its own process, so a successful kill would show as its death, not pytest's.
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {SRC!r})
        from elfreg.sandbox import ExpectedOutputs, TimeRule
        from elfreg.tasks.testsets import load_benchmark
        from elfreg.sandbox import Sandbox, SandboxConfig
        from elfreg.eval.scoring import score_program
        bench = load_benchmark("humaneval")
        p = bench.by_id["HumanEval/0"]
        with Sandbox(SandboxConfig(isolation={isolation!r}, memory_bytes=1 << 30)) as sb:
            exp = ExpectedOutputs(bench, sb, {str(tmp_path)!r}).load_or_compute(progress=False, only={{p.task_id}})
            rule = TimeRule(min_time_s=3.0, sample_cap_s=10.0)
            killer = p.extra["preamble"] + {KILLER!r}.format(ep=p.entry_point)
            verdicts = [score_program(bench, p, killer, sb, exp, rule)["base"]
                        for _ in range(2)]
            verdicts.append(score_program(bench, p, p.reference, sb, exp, rule)["base"])
        print(json.dumps(verdicts))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert json.loads(proc.stdout.splitlines()[-1]) == ["fail", "fail", "pass"]


def test_refusal_without_isolation_leaves_an_existing_out_alone_even_with_restart(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ELFREG_BWRAP", NO_BWRAP)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text("kept\n")
    args = _score_args(tmp_path, "auto")
    args.restart = True
    assert run_score(args) == 2
    assert "--isolation none" in capsys.readouterr().err
    assert (out / "results.jsonl").read_text() == "kept\n"  # not moved aside by --restart: refused first
    assert not list(tmp_path.glob("out.replaced-*"))
