"""Sampling and `elfreg generate` on CUDA (GPU-marked: skipped without CUDA)."""

import argparse
import json

import pytest
import torch

from elfreg.generate.cli import cmd_generate, register
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.results_io import read_records
from elfreg.sampling.samplers import sample
from helpers import make_tiny_elf_model

from .test_real_student import _inputs, _student  # the same tiny real student and inputs as on the CPU

pytestmark = pytest.mark.gpu


def _agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a == b).float().mean())


@pytest.mark.parametrize("sampler", ["early-stop", "renoise", "full-span"])
def test_batch_invariance_on_cuda(sampler):
    """A row's sample does not depend on the batch it sits in (its noise and grid come from its key alone).

    Bit-equality across batch sizes is not promised on CUDA (cuBLAS may pick other kernels per shape), so the
    states must agree to fp32 rounding and the decoded tokens (their argmax) almost everywhere."""
    net = _student().cuda()
    x, mask = _inputs(net, 7)
    keys = [(i, 3) for i in range(7)]
    cfg = SamplerConfig(sampler=sampler, nfe=6, rho=4, seed=2)
    big = sample(net, x.cuda(), mask.cuda(), cfg, keys)
    assert big.count.denoiser_calls == 5 and big.count.decoder_calls == 1
    for i in (0, 3, 6):
        one = sample(net, x[i:i + 1].cuda(), mask[i:i + 1].cuda(), cfg, keys[i:i + 1])
        torch.testing.assert_close(one.text_state[0], big.text_state[i], atol=1e-4, rtol=1e-4)
        assert _agreement(one.token_ids[0], big.token_ids[i]) >= 0.98


@pytest.mark.parametrize("sampler", ["early-stop", "adaptive"])
def test_the_cuda_invariance_scheme_is_bit_for_bit(sampler):
    """`--batch-invariant` on CUDA (chunks of CUDA_CHUNK rows, elfreg.sampling.invariance): a row's states and
    tokens are the same bits in batches of 1, 7, 16 and 19, first rows and last."""
    from elfreg.sampling.invariance import apply_scheme

    net = _student().cuda()
    apply_scheme(net, "chunks")
    x, mask = _inputs(net, 19)
    x, mask = x.cuda(), mask.cuda()
    keys = [(i, 1) for i in range(19)]
    cfg = SamplerConfig(sampler=sampler, nfe=8, rho=4, seed=5)
    alone = [sample(net, x[i:i + 1], mask[i:i + 1], cfg, keys[i:i + 1]) for i in range(19)]
    for b in (7, 16, 19):
        for start in (0, 19 - b):
            out = sample(net, x[start:start + b], mask[start:start + b], cfg, keys[start:start + b])
            for i in range(b):
                assert torch.equal(out.text_state[i], alone[start + i].text_state[0]), (b, start, i)
                assert torch.equal(out.token_ids[i], alone[start + i].token_ids[0]), (b, start, i)


def test_cuda_samples_match_the_cpu():
    net = _student()
    x, mask = _inputs(net, 4)
    keys = [(i, 0) for i in range(4)]
    cfg = SamplerConfig(sampler="early-stop", nfe=6, rho=4, seed=1)
    cpu = sample(net, x, mask, cfg, keys)
    gpu = sample(net.cuda(), x.cuda(), mask.cuda(), cfg, keys)
    torch.testing.assert_close(gpu.text_state.cpu(), cpu.text_state, atol=1e-3, rtol=1e-3)
    assert torch.equal(gpu.times, cpu.times) and torch.equal(gpu.exit_time, cpu.exit_time)
    assert _agreement(gpu.token_ids, cpu.token_ids) >= 0.98


def test_generate_end_to_end_on_a_demo_sized_model(tmp_path, tiny_lm_dir):
    """`elfreg generate --device cuda` with the demo's student sizes and a local encoder, against the CPU run."""
    folder = make_tiny_elf_model(tmp_path / "model", tiny_lm_dir)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n"
                               for p in ["what is 3 plus 4 ?", "sort a b c", "what is 9 minus 2 ?"]))
    parser = argparse.ArgumentParser(prog="elfreg")
    register(parser.add_subparsers(dest="command", required=True))
    recs = {}
    for device in ("cuda", "cpu"):
        out = tmp_path / f"{device}.jsonl"
        args = parser.parse_args(["generate", "--model", str(folder), "--prompts", str(prompts), "--out", str(out),
                                  "--nfe", "16", "--samples", "2", "--batch-size", "4", "--device", device,
                                  "--no-progress"])
        assert cmd_generate(args) == 0
        recs[device] = sorted(read_records(out), key=lambda r: (r["prompt_index"], r["sample_index"]))
    assert [(r["prompt_index"], r["sample_index"]) for r in recs["cuda"]] == [(p, s) for p in range(3) for s in range(2)]
    assert all(r["nfe_spent"] == 16 and r["sampler"] == "early-stop" for r in recs["cuda"])
    ids_gpu = [t for r in recs["cuda"] for t in r["response_token_ids"]]
    ids_cpu = [t for r in recs["cpu"] for t in r["response_token_ids"]]
    same = sum(a == b for a, b in zip(ids_gpu, ids_cpu))
    assert same >= 0.95 * max(len(ids_gpu), len(ids_cpu))
