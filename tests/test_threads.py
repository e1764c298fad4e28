"""Inference threads: --threads N exactly; auto from OMP_NUM_THREADS, else the usable CPUs less the load."""

import argparse

import pytest
import torch

from elfreg import threads
from elfreg.cli import main


@pytest.fixture
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_auto_leaves_the_busy_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("elfreg.resources.usable_cpus", lambda: 8)
    for load, want in ((0.2, 8), (2.6, 5), (7.9, 1), (30.0, 1)):
        monkeypatch.setattr(threads.os, "getloadavg", lambda load=load: (load, load, load))
        assert threads.auto_threads() == want
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.auto_threads() == 3


def test_explicit_threads_are_set_and_auto_never_raises_them(monkeypatch, keep_threads):
    assert threads.set_inference_threads(2) == 2 and torch.get_num_threads() == 2
    torch.set_num_threads(1)
    monkeypatch.setattr(threads, "auto_threads", lambda: 6)
    assert threads.set_inference_threads(None) == 1
    assert threads.threads_arg("auto") is None and threads.threads_arg("4") == 4
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            threads.threads_arg(bad)


@pytest.mark.parametrize("command", [["generate", "--prompt", "x"], ["eval", "run", "--benchmark", "gsm8k", "--out",
                                                                     "o"]])
def test_generate_and_eval_run_refuse_a_bad_thread_count(command, capsys, tmp_path):
    assert main([*command, "--model", str(tmp_path), "--threads", "0"]) == 2
    assert "--threads" in capsys.readouterr().err


def test_generate_sets_the_asked_thread_count(monkeypatch, keep_threads, tmp_path):
    import elfreg.generate.cli as gen

    seen = []
    monkeypatch.setattr(gen, "run_generation", lambda *a, **k: seen.append(torch.get_num_threads()) or 0)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert main(["generate", "--model", str(tmp_path), "--prompt", "x", "--threads", "3"]) == 0
    assert seen == [3]
