"""2 processes on CPU (gloo): identical weights on both ranks, equal to one process with the same global batch."""

import json
import socket

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from _dist_worker import run
from helpers import REPO
from _tiny import tiny_overrides
from elfreg.train.config import load_run_config
from elfreg.train.trainer import Trainer

CONFIG = str(REPO / "configs/tiny-smoke.yaml")   # not relative: the tests may start anywhere


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single(tmp_path, overrides):
    t = Trainer(load_run_config(CONFIG, overrides), tmp_path / "single")
    res = t.run()
    return {k: v.detach() for k, v in t.student.state_dict().items()}, torch.tensor([h["loss"] for h in res.history])


def two_procs(tmp_path, overrides, name):
    result = str(tmp_path / name)
    mp.spawn(run, args=(2, free_port(), CONFIG, overrides, str(tmp_path / f"{name}-out"), result), nprocs=2)
    return ([load_file(f"{result}-rank{r}.safetensors") for r in range(2)],
            [load_file(f"{result}-loss-rank{r}.safetensors")["loss"] for r in range(2)])


@pytest.mark.slow
def test_ddp_two_ranks_match_single_process(tmp_path, tiny_lm_dir, sums_jsonl):
    # fp32 Newton–Schulz (reference Muon): torch.optim.Muon's bf16 orthogonalisation turns float reduction-order
    # differences into ~1e-5 weight differences per step, which would need a looser tolerance.
    # an epoch budget (0.5 x 55 rows / 8 = 4 steps) with a kept epoch: rank 0 counts the rows, both ranks plan.
    # fp32 on both sides: precision auto times bf16 at one process's batch, 8 rows here and 4 per rank under DDP, and
    # on a CPU with native bf16 the two can fall on either side of the 0.9 line (an AMD Zen 4: 0.90x and 1.04x)
    over = tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": "null", "train.epochs": 0.5,
                                                      "train.keep_epochs": "[0.25]", "train.batch_size": 8,
                                                      "train.save_every": 2, "train.muon_impl": "reference",
                                                      "train.precision": "fp32"})
    ref, ref_loss = single(tmp_path, over)
    (w0, w1), (l0, l1) = two_procs(tmp_path, over, "ddp")
    for k in ref:
        assert torch.equal(w0[k], w1[k]), f"ranks differ at {k}"
        torch.testing.assert_close(w0[k], ref[k], rtol=1e-4, atol=1e-5, msg=f"DDP vs single at {k}")
    torch.testing.assert_close(l0, ref_loss, rtol=1e-5, atol=1e-6)
    assert torch.equal(l0, l1) and len(l0) == 4
    assert (tmp_path / "ddp-out" / "epoch-0.25" / "COMPLETE").is_file()


@pytest.mark.slow
def test_a_time_budget_is_decided_by_rank_0_for_both_ranks(tmp_path, tiny_lm_dir, sums_jsonl):
    """train.minutes under DDP: rank 0's clock forces the checkpoint and decides the length, and decides it again at
    the next checkpoint, broadcast to rank 1, whose clock runs ten times faster (were it read, the ranks would
    checkpoint at different steps and hang, or stop at different lengths). 12 s at 1 s a step: the checkpoint forced
    at step 4, then (1 - 0.1)(12 - 4) = 7.2 s: 11; again at step 6: (1 - 0.1)(12 - 6) = 5.4 s: 11."""
    over = tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 40, "train.minutes": 0.2, "train.batch_size": 8,
                                                      "train.save_every": 6, "train.keep_last": 20})
    result = str(tmp_path / "budget")
    mp.spawn(run, args=(2, free_port(), CONFIG, over, str(tmp_path / "budget-out"), result, [1.0, 10.0]), nprocs=2)
    assert [int(load_file(f"{result}-loss-rank{r}.safetensors")["steps"][0]) for r in range(2)] == [11, 11]
    assert (tmp_path / "budget-out" / "ckpt-00000004").is_dir()
    tb = json.loads((tmp_path / "budget-out" / "summary.json").read_text())["time_budget"]
    assert (tb["first"], tb["decided_at_step"], tb["decisions"], tb["steps"]) == ({"step": 4, "steps": 11}, 6, 2, 11)


@pytest.mark.slow
def test_fsdp_two_ranks_match_single_process(tmp_path, tiny_lm_dir, sums_jsonl):
    over = tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 2, "train.batch_size": 8, "train.save_every": 2,
                                                      "train.parallel": "fsdp", "train.precision": "fp32"})
    ref, ref_loss = single(tmp_path, over)  # one process: no sharding, same reference Muon
    (w0, w1), (l0, _) = two_procs(tmp_path, over, "fsdp")
    for k in ref:
        assert torch.equal(w0[k], w1[k]), f"ranks differ at {k}"
        torch.testing.assert_close(w0[k], ref[k], rtol=1e-4, atol=1e-5, msg=f"FSDP vs single at {k}")
    torch.testing.assert_close(l0, ref_loss, rtol=1e-5, atol=1e-6)
