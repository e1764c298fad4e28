"""Distillation on 2 processes (CPU, gloo, DDP and FSDP2): the same student as one process with the same global
batch."""

import json
import socket

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from _distill_worker import run
from _teacher import distill_overrides, train_teacher
from elfreg.distill import distill, load_distill_config
from elfreg.train import checkpoint as ck


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("method, parallel", [("pd", "ddp"), ("flowmap", "ddp"), ("pd", "fsdp"), ("flowmap", "fsdp")])
def test_two_ranks_match_single_process(tmp_path, tiny_lm_dir, method, parallel):
    teacher = str(train_teacher(tmp_path / "teacher", tiny_lm_dir))
    # fp32 and the reference Muon (fp32 Newton-Schulz): reduction-order differences stay at rounding level. Half the
    # rows on the decoder branch: a student that starts as its (4-step) teacher has a distillation loss near 1e-7,
    # whose gradients are at rounding level, and AdamW's first steps (g / |g|) would turn their rounding into
    # lr-sized differences; the CE rows give every weight a gradient well above it
    over = distill_overrides(**{"distill.rounds": "[2]", "distill.method": method, "distill.steps_per_round": 2,
                                "distill.decoder_prob": 0.5, "train.muon_impl": "reference",
                                "train.precision": "fp32", "train.parallel": parallel})
    res = distill(teacher, tmp_path / "single", load_distill_config(None, over, teacher=teacher))
    ref = ck.load_tensors(ck.latest_checkpoint(res.output / res.summary["stages"][-1]["folder"]) /
                          "weights.safetensors")
    result = str(tmp_path / "ddp")
    mp.spawn(run, args=(2, free_port(), teacher, over, str(tmp_path / "ddp-out"), result), nprocs=2)
    w0, w1 = (load_file(f"{result}-rank{r}.safetensors") for r in range(2))
    losses = [[r["loss"] for r in map(json.loads, (o / "metrics.jsonl").read_text().splitlines())]
              for o in (res.output, tmp_path / "ddp-out")]
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-5, atol=1e-7)
    for k in ref:
        assert torch.equal(w0[k], w1[k]), f"ranks differ at {k}"
        # AdamW's g/|g| turns the rows' batch-size-dependent rounding into up to a few % of one lr-1e-3 update
        torch.testing.assert_close(w0[k], ref[k], rtol=1e-4, atol=5e-5, msg=f"DDP vs single at {k}")
    assert (tmp_path / "ddp-out" / "model" / "distill.json").is_file()
