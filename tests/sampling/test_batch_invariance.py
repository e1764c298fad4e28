"""A sample does not depend on its batch (docs/sampling.md, "Batch invariance"): a trained student at 64 NFE.

The student is trained for a few steps on the tiny Qwen3 (tests/train/_tiny.py) and loaded from its model folder;
prompts of several lengths, batch sizes 1, 7 and 16 (the last batch of 7 holds 2 rows). Before row-local matrix
products, a row's states differed in the last bits between batch sizes (the BLAS picks its kernel by the row count).
"""

import argparse
from pathlib import Path

import pytest
import torch

from elfreg.pretrained import ElfModel
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.pipeline import GenerationPipeline
from elfreg.sampling.samplers import sample
from elfreg.train.cli import register
from train._tiny import tiny_overrides, write_sum_jsonl

REPO = Path(__file__).resolve().parents[2]
PROMPTS = ["what is 3 plus 4 ?", "sort a b c", "what is 1 plus 2 plus 3 plus 0 ?", "copy d", "2 times 3",
           "what is the answer ?", "reverse a b c d then copy", "9 minus 5"]
SAMPLES = 2   # 16 rows: one batch of 16, or 7 + 7 + 2, or 16 of 1
SAMPLERS = ["full-span", "early-stop", "renoise", "adaptive"]


pytestmark = pytest.mark.usefixtures("one_thread")   # row-by-row calls of a tiny student: fastest on one thread


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_lm_dir):
    """A tiny ELF-REG student after 4 optimiser steps, loaded from its saved folder, and its encoded prompts."""
    tmp = tmp_path_factory.mktemp("trained")
    data = write_sum_jsonl(tmp / "sums.jsonl")
    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["train", "--config", str(REPO / "configs/tiny-smoke.yaml"), "--output", str(tmp / "run"),
                         *tiny_overrides(tiny_lm_dir, data, **{"train.steps": 4, "train.save_every": 4})])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # a tiny run is fastest single-threaded on a shared machine
    try:
        assert args.func(args) == 0
    finally:
        torch.set_num_threads(threads)
    model = ElfModel.from_pretrained(tmp / "run" / "model")
    GenerationPipeline(model.student, model, model.tokenizer, SamplerConfig())   # as `elfreg generate` builds it
    x, mask, ids = model.encode_prompts(PROMPTS)
    assert len({len(r) for r in ids}) >= 4   # mixed prompt lengths
    rows = torch.tensor([i for i in range(len(PROMPTS)) for _ in range(SAMPLES)])
    keys = [(i, s) for i in range(len(PROMPTS)) for s in range(SAMPLES)]
    return model.student, x[rows], mask[rows], keys


def _in_batches(net, x, mask, cfg, keys, size):
    """sample() over consecutive batches of ``size`` rows; (token ids, decoded states, NFE) of every row."""
    ids, states, nfe = [], [], []
    for start in range(0, len(keys), size):
        s = slice(start, start + size)
        out = sample(net, x[s], mask[s], cfg, keys[s])
        ids.append(out.token_ids)
        states.append(out.text_state)
        nfe += out.nfe
    return torch.cat(ids), torch.cat(states), nfe


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_trained_students_samples_do_not_depend_on_the_batch(trained, sampler):
    net, x, mask, keys = trained
    assert net.config.extra_token == "reg" and not net.training
    cfg = SamplerConfig(sampler=sampler, nfe=64, rho=2, seed=3)
    ref_ids, ref_states, ref_nfe = _in_batches(net, x, mask, cfg, keys, 16)
    for size in (1, 7):
        ids, states, nfe = _in_batches(net, x, mask, cfg, keys, size)
        assert nfe == ref_nfe
        assert torch.equal(ids, ref_ids), f"batch {size} vs 16: token ids differ"
        # the decoded states bit for bit: the old code differed here at every batch size (1e-7 and up)
        bad = [i for i in range(len(keys)) if not torch.equal(states[i], ref_states[i])]
        assert not bad, f"batch {size} vs 16: decoded states of rows {bad} differ"
