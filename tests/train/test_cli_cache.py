"""The train CLI (argparse registration, torchrun entry) and the on-disk feature cache."""

import argparse
import subprocess
import sys
from pathlib import Path

import torch

from _tiny import sum_rows, tiny_overrides
from elfreg.backbones import Backbones
from elfreg.config import BackboneConfig
from elfreg.data import CanvasConfig
from elfreg.pretrained import ElfModel
from elfreg.train.cli import register
from elfreg.train.features import CachedFeatures

REPO = Path(__file__).resolve().parents[2]


def parser():
    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="cmd"))
    return p


def test_cli_trains_and_writes_a_loadable_model(tmp_path, tiny_lm_dir, sums_jsonl):
    over = tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 2})
    args = parser().parse_args(["train", "--config", str(REPO / "configs/tiny-smoke.yaml"),
                                "--output", str(tmp_path / "run"), *over])
    assert args.func(args) == 0
    assert ElfModel.from_pretrained(tmp_path / "run" / "model").config.model.width == 64


def test_cli_bad_override_is_exit_2(tmp_path, capsys):
    args = parser().parse_args(["train", "--config", str(REPO / "configs/tiny-smoke.yaml"),
                                "--output", str(tmp_path), "train.lr=-1"])
    assert args.func(args) == 2
    assert "train.lr" in capsys.readouterr().err


def test_module_entry_point_runs(tmp_path, tiny_lm_dir, sums_jsonl):
    over = tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 1})
    out = subprocess.run([sys.executable, "-m", "elfreg.train", "--config", str(REPO / "configs/tiny-smoke.yaml"),
                          "--output", str(tmp_path / "run"), *over], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "run" / "ckpt-00000001" / "COMPLETE").is_file()


def test_feature_cache_is_built_once_and_keyed(tmp_path, tiny_lm_dir):
    bb = Backbones(BackboneConfig(encoder=str(tiny_lm_dir), encoder_layer=4, teacher=str(tiny_lm_dir),
                                  teacher_repa_layer=4, teacher_reg_layer=6, dtype="float32"))
    rows = sum_rows(10)
    ccfg = CanvasConfig(canvas_len=24, prompt_cap=12)
    a = CachedFeatures.build_or_load(rows, bb, ccfg, tmp_path)
    assert len(a) == 10 and (a.folder / "manifest.json").is_file()
    b = CachedFeatures.build_or_load(rows, bb, ccfg, tmp_path)  # loaded, not rebuilt
    assert b.folder == a.folder and torch.equal(a.tensors["x"], b.tensors["x"])
    assert a.tensors["x"].dtype == torch.float16
    batch = a.batch([0, 3])
    assert batch.x.shape == (2, 24, 32) and batch.reg.shape == (2, 32) and batch.teacher.shape == (2, 24, 32)
    c = CachedFeatures.build_or_load(rows[:9], bb, ccfg, tmp_path)  # other data -> other key
    d = CachedFeatures.build_or_load(rows, bb, CanvasConfig(canvas_len=20, prompt_cap=12), tmp_path)
    assert len({a.folder, c.folder, d.folder}) == 3
