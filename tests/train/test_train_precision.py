"""train.precision: resolved once per run (elfreg.precision), recorded in the metrics and the summary; Muon's
Newton-Schulz follows it."""

import json

import pytest
import torch

from helpers import REPO
from _tiny import tiny_overrides
from elfreg import precision
from elfreg.train.config import load_run_config
from elfreg.train.trainer import Trainer

CONFIG = str(REPO / "configs/tiny-smoke.yaml")   # not relative: the tests may start anywhere


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="this torch has no torch.optim.Muon")
@pytest.mark.parametrize("ratio, used", [(6.0, "fp32"), (0.5, "bf16")])
def test_auto_precision_is_measured_recorded_and_followed_by_muon(tmp_path, tiny_lm_dir, sums_jsonl, monkeypatch,
                                                                 ratio, used):
    seen = []

    def fake(workload, cache_dir=None):  # a fake timing: bf16 takes ``ratio`` x fp32's time
        seen.append(workload)
        return ratio, "measured"
    monkeypatch.setattr(precision, "cached_ratio", fake)
    cfg = load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 2, "train.log_every": 1}))
    assert cfg.train.precision == "auto"
    trainer = Trainer(cfg, tmp_path / "run")
    assert trainer.precision.choice == used and len(seen) == 1
    assert seen[0] == precision.student_workload(trainer.cfg.model, cfg.train.batch_size, backward=True)
    assert trainer.optim.optimizers["muon"].ns_dtype == (torch.bfloat16 if used == "bf16" else torch.float32)
    with trainer._autocast():
        assert torch.is_autocast_enabled("cpu") == (used == "bf16")
    res = trainer.run()
    want = {"precision": "auto", "precision_used": used, "bf16_time_ratio": ratio}
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines and all({k: ln[k] for k in want} == want for ln in lines)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {k: summary[k] for k in want} == want == {k: res.summary[k] for k in want}


def test_fp32_asked_measures_nothing(tmp_path, tiny_lm_dir, sums_jsonl, monkeypatch):
    monkeypatch.setattr(precision, "cached_ratio", lambda *a, **k: pytest.fail("measured"))
    cfg = load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 1,
                                                                              "train.precision": "fp32"}))
    trainer = Trainer(cfg, tmp_path / "run")
    assert trainer.precision.record() == {"precision": "fp32", "precision_used": "fp32", "bf16_time_ratio": None}
