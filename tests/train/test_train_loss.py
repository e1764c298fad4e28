"""The loss falls on a tiny task (ELF and ELF-REG); ablation switches reach the loss terms they touch."""

import pytest

from helpers import REPO
from _tiny import tiny_overrides
from elfreg.train.config import load_run_config
from elfreg.train.trainer import train

CONFIG = str(REPO / "configs/tiny-smoke.yaml")   # not relative: the tests may start anywhere
ELF = {"model.extra_token": "none", "model.repa": False, "objective.use_repa": False, "objective.use_reg": False,
       "backbones.teacher": None}


def mean_loss(history, sl):
    vals = [h["loss_elf"] for h in history[sl]]
    return sum(vals) / len(vals)


@pytest.mark.parametrize("variant", ["elf", "elf-reg"])
def test_loss_falls_on_tiny_sums(tmp_path, tiny_lm_dir, sums_jsonl, variant):
    over = {"train.steps": 300, "train.batch_size": 16, "train.lr": 3e-3, "train.warmup_steps": 20,
            "train.save_every": 1000, "train.log_every": 50, "data.features": "cached"}
    if variant == "elf":
        over.update(ELF)
    res = train(load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **over)), tmp_path / variant)
    first, last = mean_loss(res.history, slice(0, 20)), mean_loss(res.history, slice(-20, None))
    assert last < 0.7 * first, (first, last)
    if variant == "elf-reg":
        assert mean_loss(res.history, slice(-20, None)) < first
        assert all("loss_reg" in h for h in res.history)


TERMS = {  # switches as in configs/ablations -> which weighted terms the run reports (non-zero)
    "repa-only": ({"model.extra_token": "none", "objective.use_reg": False}, {"loss_repa"}),
    "reg-only": ({"model.repa": False, "objective.use_repa": False}, {"loss_reg"}),
    "repa-reg": ({}, {"loss_repa", "loss_reg"}),
    "olt": ({"model.extra_token": "olt", "objective.use_reg": False}, {"loss_repa"}),
    "elf": (ELF, set()),
}


@pytest.mark.parametrize("name", sorted(TERMS))
def test_ablation_switches_reach_the_loss_terms(tmp_path, tiny_lm_dir, sums_jsonl, name):
    over, terms = TERMS[name]
    cfg = load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 2, **over}))
    h = train(cfg, tmp_path / name).history[-1]
    assert {k for k in ("loss_repa", "loss_reg") if h[k] != 0.0} == terms
    weighted = h["loss_elf"] + cfg.objective.repa_weight * h["loss_repa"] + cfg.objective.reg_weight * h["loss_reg"]
    assert h["loss"] == pytest.approx(weighted, rel=1e-5)


def test_repa_variants_change_only_the_repa_term(tmp_path, tiny_lm_dir, sums_jsonl):
    base = train(load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 1})),
                 tmp_path / "base").history[0]
    for i, switch in enumerate(["objective.repa_shift=1", "objective.repa_target=mean_pooled",
                                "objective.repa_on_prompt=true", "backbones.standardize_teacher=true"]):
        k, v = switch.split("=")
        h = train(load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 1, k: v})),
                  tmp_path / f"v{i}").history[0]
        assert h["loss_repa"] != pytest.approx(base["loss_repa"], rel=1e-6), switch
        for term in ("loss_elf", "loss_reg", "l2", "ce"):
            assert h[term] == pytest.approx(base[term], rel=1e-6), (switch, term)


def test_standardised_repa_targets_keep_their_statistics_with_the_model(tmp_path, tiny_lm_dir, sums_jsonl):
    """backbones.standardize_teacher: the teacher's per-feature statistics are estimated once and saved with the
    model (none without it), as the encoder's are."""
    from elfreg.pretrained import ElfModel

    for on in (False, True):
        over = {"train.steps": 1, "backbones.standardize_teacher": str(on).lower()}
        res = train(load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **over)), tmp_path / str(on))
        stats = ElfModel.from_pretrained(res.model_dir).teacher_stats
        assert (stats is not None) == on
        if on:
            assert stats.std.min() > 0 and stats.mean.abs().max() > 0
