"""Precision by measurement (elfreg.precision): auto picks bf16 only where it measured faster than fp32."""

import json
import logging

import pytest
import torch

from elfreg import precision
from elfreg.config import model_preset
from elfreg.configtools import ConfigError
from elfreg.precision import Workload, measured_ratio, resolve, student_workload

SHAPES = Workload(rows=256, maps=((64, 192), (64, 64)), backward=True)


def fake_run(bf16_ms: float, fp32_ms: float):
    """A fake timing: every call of one kind takes the same time (seconds returned, nothing computed)."""
    calls = []

    def run(bf16: bool) -> float:
        calls.append(bf16)
        return (bf16_ms if bf16 else fp32_ms) / 1e3
    return run, calls


@pytest.mark.parametrize("bf16_ms, fp32_ms, picked", [(30.0, 2.0, "fp32"), (1.0, 2.0, "bf16"), (1.9, 2.0, "fp32")])
def test_auto_picks_bf16_only_where_it_measured_faster(bf16_ms, fp32_ms, picked):
    run, calls = fake_run(bf16_ms, fp32_ms)
    p = resolve("auto", "cpu", SHAPES, measure=lambda w: measured_ratio(w, run=run))
    assert p.choice == picked and p.ratio == pytest.approx(bf16_ms / fp32_ms)
    assert p.record() == {"precision": "auto", "precision_used": picked,
                          "bf16_time_ratio": round(bf16_ms / fp32_ms, 3)}
    assert p.dtype == (torch.bfloat16 if picked == "bf16" else torch.float32)
    assert p.fast_bf16 == (picked == "bf16")
    assert calls[:2] == [False, True] and calls.count(True) == calls.count(False) >= 4  # warm-up + >= 3 rounds


def test_explicit_bf16_on_a_slow_cpu_warns_in_one_line_and_is_honoured(caplog):
    with caplog.at_level(logging.WARNING, logger="elfreg.precision"):
        p = resolve("bf16", "cpu", SHAPES, what="train.precision", measure=lambda w: 12.0)
    assert p.choice == "bf16" and not p.fast_bf16  # honoured, but Muon's Newton-Schulz stays fp32
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "\n" not in warned[0] and "train.precision asks for bf16" in warned[0] and "12.0x" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="elfreg.precision"):
        assert resolve("bf16", "cpu", SHAPES, measure=lambda w: 1.5).choice == "bf16"
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]  # within 2x: no warning


def test_fp32_measures_nothing_and_cuda_is_bf16_without_measuring():
    def never(w):
        raise AssertionError("measured")
    assert resolve("fp32", "cpu", SHAPES, measure=never).choice == "fp32"
    p = resolve("auto", "cuda", SHAPES, measure=never)
    assert p.source == "cuda" and p.ratio is None
    assert p.choice == ("bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32")
    with pytest.raises(ConfigError, match="train.precision"):
        resolve("half", "cpu", SHAPES, what="train.precision")


def test_autocast_follows_the_choice():
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with resolve("auto", "cpu", SHAPES, measure=lambda w: 0.5).autocast("cpu"):
        assert lin(x).dtype == torch.bfloat16
    with resolve("auto", "cpu", SHAPES, measure=lambda w: 3.0).autocast("cpu"):
        assert lin(x).dtype == torch.float32


def test_measured_once_then_read_from_the_per_machine_cache(tmp_path, monkeypatch):
    runs = []

    def fake_measure(w, budget_s=precision.PROBE_SECONDS, run=None):
        runs.append(w)
        return 7.5
    monkeypatch.setattr(precision, "measured_ratio", fake_measure)
    w = Workload(rows=96, maps=((32, 96),), backward=True)
    first = resolve("auto", "cpu", w, cache_dir=tmp_path)
    assert (first.choice, first.ratio, first.source) == ("fp32", 7.5, "measured") and len(runs) == 1
    precision._cached_ratio.cache_clear()  # a new process: the file answers
    again = resolve("auto", "cpu", w, cache_dir=tmp_path)
    assert (again.ratio, again.source) == (7.5, "cached") and len(runs) == 1
    entries = json.loads((tmp_path / precision.CACHE_FILE).read_text())
    (entry,) = entries.values()
    assert entry["ratio"] == 7.5 and entry["threads"] == 1 and entry["shapes"] == w.key()
    # other shapes are another entry
    precision._cached_ratio.cache_clear()
    resolve("auto", "cpu", Workload(rows=96, maps=((32, 64),), backward=True), cache_dir=tmp_path)
    assert len(runs) == 2 and len(json.loads((tmp_path / precision.CACHE_FILE).read_text())) == 2


def test_the_kernel_environment_is_part_of_the_key(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    a = precision.machine_key(SHAPES)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert precision.machine_key(SHAPES) != a


def test_student_workload_is_one_block_at_every_position():
    m = model_preset("tiny", width=64, depth=4, heads=4, repa_block=2, repa_hidden=32, bottleneck_dim=8,
                     feature_dim=16, reg_dim=16, teacher_dim=16, vocab_size=50, max_len=30, max_prompt_len=14)
    w = student_workload(m, rows=32, backward=True)
    assert w.rows == 32 * (12 + 1 + 30) and w.backward
    assert w.maps == ((64, 192), (64, 64), (64, 2 * m.mlp_hidden), (m.mlp_hidden, 64))
    big = Workload(rows=10**6, maps=((576, 3072),))
    assert big.capped().flops() <= precision.PROBE_FLOPS and big.capped().rows >= 128


def test_the_real_probe_times_both_kinds():
    r = measured_ratio(Workload(rows=16, maps=((16, 16),), backward=True), budget_s=0.01)
    assert r > 0


def test_the_probe_runs_on_one_thread_and_restores_the_count(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(precision, "measured_ratio", lambda w: seen.append(torch.get_num_threads()) or 3.0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        resolve("auto", "cpu", Workload(rows=80, maps=((16, 48),), backward=True), cache_dir=tmp_path)
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
