"""A tiny teacher for the distillation tests: configs/tiny-smoke.yaml trained a few steps on the sums file."""

from __future__ import annotations

from pathlib import Path

from helpers import REPO
from _tiny import tiny_overrides, write_sum_jsonl

CONFIG = str(REPO / "configs/tiny-smoke.yaml")
ELF = {"model.extra_token": "none", "model.repa": "false", "objective.use_repa": "false",
       "objective.use_reg": "false"}


def train_teacher(folder: Path, lm_dir: Path, variant: str = "elf-reg") -> Path:
    """A trained tiny ELF-REG (or ELF) model; returns its model folder (<run>/model, the run's config beside it)."""
    from elfreg.train.config import load_run_config
    from elfreg.train.trainer import train

    data = write_sum_jsonl(folder.parent / f"{folder.name}-sums.jsonl")
    over = {"train.steps": 4, "train.save_every": 4, "train.batch_size": 8, "train.stats_canvases": 16,
            **(ELF if variant == "elf" else {})}
    res = train(load_run_config(CONFIG, tiny_overrides(lm_dir, data, **over)), folder)
    return res.model_dir


def distill_overrides(**extra) -> list[str]:
    """A distillation small enough for a test: rounds 2 -> 1, three optimiser steps each, batch 4."""
    over = {"distill.rounds": "[2,1]", "distill.epochs_per_round": "null", "distill.steps_per_round": 3,
            "train.batch_size": 4, "train.warmup_epochs": "null", "train.warmup_steps": 1, "train.ema_decay": 0.5,
            "train.save_every": 2, "train.log_every": 1, "train.progress": "false", **extra}
    return [f"{k}={v}" for k, v in over.items()]
