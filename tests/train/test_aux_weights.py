"""The auxiliary weights' schedule: constant (the paper's) leaves the objective alone; decay changes the weights
it names and nothing else."""

import pytest

from _tiny import tiny_overrides
from elfreg.config import ObjectiveConfig
from elfreg.configtools import ConfigError
from elfreg.train.config import TrainConfig, load_run_config
from elfreg.train.optim import aux_weights_at
from elfreg.train.trainer import train
from helpers import REPO

CONFIG = str(REPO / "configs/tiny-smoke.yaml")


def test_constant_is_the_objective_itself_and_decay_is_linear_to_zero():
    obj = ObjectiveConfig()
    assert aux_weights_at(7, TrainConfig(steps=10), obj) is obj
    cfg = TrainConfig(steps=10, reg_weight_schedule="decay")
    assert aux_weights_at(0, cfg, obj).reg_weight == pytest.approx(0.1)
    assert aux_weights_at(5, cfg, obj).reg_weight == pytest.approx(0.05)
    assert aux_weights_at(9, cfg, obj).reg_weight == pytest.approx(0.01)
    assert aux_weights_at(5, cfg, obj).repa_weight == 0.5   # only the named term decays
    both = TrainConfig(steps=4, reg_weight_schedule="decay", repa_weight_schedule="decay")
    assert aux_weights_at(2, both, obj).repa_weight == pytest.approx(0.25)
    with pytest.raises(ConfigError, match="train.reg_weight_schedule"):
        TrainConfig(reg_weight_schedule="cosine")


def test_a_decaying_reg_weight_changes_only_the_reg_weight(tmp_path, tiny_lm_dir, sums_jsonl):
    """Paired runs: the first step (weight 0.1 in both) is the same; then the REG weight falls and the runs part."""
    hist = {}
    for sched in ("constant", "decay"):
        over = {"train.steps": 4, "train.log_every": 1, "train.reg_weight_schedule": sched,
                "data.features": "cached", "train.grad_share_every": 0}
        hist[sched] = train(load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **over)),
                            tmp_path / sched).history
    assert hist["constant"][0]["loss"] == hist["decay"][0]["loss"]
    assert [h["reg_weight"] for h in hist["decay"]] == pytest.approx([0.1, 0.075, 0.05, 0.025])
    assert all(h["repa_weight"] == 0.5 for h in hist["decay"])
    assert "reg_weight" not in hist["constant"][0]
    assert hist["constant"][-1]["loss_elf"] != hist["decay"][-1]["loss_elf"]
