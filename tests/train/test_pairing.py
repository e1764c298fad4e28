"""Runs of one training seed are paired whatever their student: the same data order, the same draws for the text,
the same initial values of the parameters they share (the ablation ladder compares its arms per seed)."""

import torch

from _tiny import tiny_overrides
from elfreg.train.config import load_run_config
from elfreg.train.trainer import Trainer
from helpers import REPO

CONFIG = str(REPO / "configs/tiny-smoke.yaml")
ARMS = {
    "ELF": {"model.extra_token": "none", "model.repa": False, "objective.use_repa": False, "objective.use_reg": False},
    "REPA-only": {"model.extra_token": "none", "objective.use_reg": False},
    "REG-only": {"model.repa": False, "objective.use_repa": False},
    "ELF-REG": {},
    "OLT": {"model.extra_token": "olt", "objective.use_reg": False},
    "REG-direct": {"model.reg_io": "direct"},
}
TEXT_DRAWS = ("is_decoder", "t", "self_cond", "w", "eps", "lam", "eps_dec")


def test_arms_of_one_seed_see_the_same_data_draws_and_shared_initial_values(tmp_path, tiny_lm_dir, sums_jsonl):
    trainers = {name: Trainer(load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **{
        "train.steps": 3, "data.features": "cached", "data.cache_dir": str(tmp_path / "cache"), **over})),
        tmp_path / name) for name, over in ARMS.items()}
    base = trainers["ELF"]
    for name, tr in trainers.items():
        shared = {k: v for k, v in tr.student.state_dict().items() if k in base.student.state_dict()}
        assert shared and all(torch.equal(v, base.student.state_dict()[k]) for k, v in shared.items()), name
    steps = {name: [tr._micro_batches()[0] for _ in range(3)] for name, tr in trainers.items()}
    for name, got in steps.items():
        for (batch, draws), (b0, d0) in zip(got, steps["ELF"]):
            assert torch.equal(batch.tokens, b0.tokens) and torch.equal(batch.x, b0.x), name
            for field in TEXT_DRAWS:
                assert torch.equal(getattr(draws, field), getattr(d0, field)), (name, field)
    # the REG arms draw the same REG noise too
    for name in ("REG-only", "REG-direct"):
        for (_, d), (_, d0) in zip(steps[name], steps["ELF-REG"]):
            assert torch.equal(d.eps_r, d0.eps_r) and torch.equal(d.lam_r, d0.lam_r)
