"""Sampler overhead benchmark (spec §5): a whole sample() against N bare network calls on the same inputs.

Run: PYTHONPATH=src python benchmarks/bench_sampler.py [--nfe 16] [--batch 1 16] [--threads 1]
     (GPU: add --device cuda --bf16)
Prints, per sampler and batch size, the fastest of interleaved repeats of both and their ratio (goal
<= 1.03x). The adaptive exit is timed with an answer that never settles, so every row runs its whole budget:
its bare reference is the same calls (the budget's denoiser calls, its check decodes and the last decode), and
the ratio is the cost of the rule's own bookkeeping (argmax, answer comparison) on top of its counted NFE.
The minimum, not the median, because the shared CPU's load only ever adds time.
The network is the project's ElfStudent at a small CPU size (4 blocks x 256, SmolLM2-135M feature
width 576, REG token, canvas 128, vocabulary 49,152), randomly initialised: speed does not need training.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch
from torch import nn

from elfreg.config import ModelConfig
from elfreg.model.student import ElfStudent
from elfreg.sampling import SamplerConfig, sample


@dataclass
class BenchConfig:
    feature_dim: int = 576     # d: SmolLM2-135M hidden width (the tiny encoder's width)
    reg_dim: int = 576
    extra_token: str = "reg"
    max_len: int = 128         # canvas L
    vocab_size: int = 49152
    width: int = 256
    depth: int = 4
    heads: int = 4


def build_student(cfg: BenchConfig) -> tuple[nn.Module, str]:
    """The project's ElfStudent (random weights, eval mode) at the benchmark sizes; returns (net, description)."""
    mc = ModelConfig(feature_dim=cfg.feature_dim, reg_dim=cfg.reg_dim, teacher_dim=cfg.reg_dim,
                     extra_token=cfg.extra_token, max_len=cfg.max_len, max_prompt_len=cfg.max_len // 2,
                     vocab_size=cfg.vocab_size, width=cfg.width, depth=cfg.depth, heads=cfg.heads, repa=False)
    torch.manual_seed(0)
    net = ElfStudent(mc).eval()
    desc = (f"ElfStudent {cfg.depth}x{cfg.width}, body {net.num_parameters('body') / 1e6:.2f}M + "
            f"vocab head {net.num_parameters('head') / 1e6:.2f}M")
    return net, desc


def inputs(cfg: BenchConfig, batch: int, prompt_len: int = 64, device: str = "cpu"):
    """Clean prompt features (B, L, d) and a prompt mask with prompt_len prompt positions."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, cfg.max_len, cfg.feature_dim, generator=g)
    mask = torch.zeros(batch, cfg.max_len, dtype=torch.bool)
    mask[:, :prompt_len] = True
    return x.to(device), mask.to(device)


def autocast(device: str, bf16: bool):
    """bf16 autocast on the device when asked (the student keeps its fp32 islands itself)."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16)


@torch.inference_mode()
def bare_calls(net: nn.Module, cfg: BenchConfig, x: torch.Tensor, denoiser: int, decoder: int, with_reg: bool) -> None:
    """Bare network calls on fixed inputs: ``denoiser`` denoiser calls and ``decoder`` decoder calls."""
    b, dev = x.shape[0], x.device
    q = torch.zeros_like(x)
    t, w = torch.full((b,), 0.3, device=dev), torch.full((b,), 3.0, device=dev)
    reg = torch.zeros(b, cfg.reg_dim, device=dev) if with_reg else None
    for _ in range(denoiser):
        net(x, q, t, w, reg=reg, reg_q=reg, decoder=False)
    for _ in range(decoder):
        net(x, q, torch.ones(b, device=dev), w, reg=reg, reg_q=reg, decoder=True)


def never_settles(ids: torch.Tensor, rows) -> list:
    """An answer the adaptive rule never accepts: every row runs its whole budget."""
    return [None] * len(rows)


class CachedNetwork(nn.Module):
    """Returns precomputed outputs of the real network: times the sampler's own bookkeeping alone."""

    def __init__(self, net: nn.Module, cfg: BenchConfig, x: torch.Tensor) -> None:
        super().__init__()
        self.config = net.config
        b, dev = x.shape[0], x.device
        with torch.inference_mode():
            reg = torch.zeros(b, cfg.reg_dim, device=dev)
            t, w = torch.full((b,), 0.3, device=dev), torch.full((b,), 3.0, device=dev)
            self.den = net(x, torch.zeros_like(x), t, w, reg=reg, reg_q=reg)
            self.dec = net(x, torch.zeros_like(x), torch.ones(b, device=dev), w, reg=reg, reg_q=reg, decoder=True)

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False, repa=False):
        return self.dec if bool(decoder) else self.den

    def head_to_token_ids(self, idx):
        return idx


def seconds(fn) -> float:
    """Wall seconds of one call of fn (GPU work included)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nfe", type=int, default=16)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (GPU)")
    ap.add_argument("--row-by-row", action="store_true",
                    help="ElfStudent.row_by_row (what `elfreg generate` runs: batch-invariant samples)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = BenchConfig()
    net, name = build_student(cfg)
    net.to(args.device)
    net.row_by_row = args.row_by_row
    print(f"network: {name}; canvas {cfg.max_len}, device {args.device}, bf16 {args.bf16}, "
          f"torch threads {args.threads}, row by row {args.row_by_row}")
    print("ratio = whole sample / N bare calls; bookkeeping = the sampler with the network's outputs cached,")
    print("so 1 + bookkeeping / bare is the overhead ratio free of the shared CPU's load swings.")
    print(f"{'sampler':<11} {'batch':>5} {'N':>4} {'bare s':>9} {'sampler s':>10} {'ratio':>7} "
          f"{'bookkeep s':>11} {'1+bk/bare':>10}")
    for batch in args.batch:
        x, mask = inputs(cfg, batch, device=args.device)
        keys = [(i, 0) for i in range(batch)]
        for sampler in ("full-span", "early-stop", "renoise", "adaptive"):
            scfg = SamplerConfig(sampler=sampler, nfe=args.nfe, rho=8)
            calls = (args.nfe - 1, 1)
            if sampler == "adaptive":   # the budget of a row that never settles
                last = scfg.exit_rule().schedule[-1]
                calls = (last.k, last.nfe - last.k)
            answer = never_settles if sampler == "adaptive" else None
            seconds(lambda: bare_calls(net, cfg, x, 1, 1, True))  # warm-up
            # interleave the two measurements so machine load drifts hit both alike
            bare, full = [], []
            with autocast(args.device, args.bf16):
                for _ in range(args.repeats):
                    bare.append(seconds(lambda: bare_calls(net, cfg, x, *calls, True)))
                    full.append(seconds(lambda: sample(net, x, mask, scfg, keys, answer)))
                cached = CachedNetwork(net, cfg, x)
                k_s = min(seconds(lambda: sample(cached, x, mask, scfg, keys, answer)) for _ in range(args.repeats))
            b_s, f_s = min(bare), min(full)
            print(f"{sampler:<11} {batch:>5} {args.nfe:>4} {b_s:>9.4f} {f_s:>10.4f} {f_s / b_s:>6.3f}x "
                  f"{k_s:>11.4f} {1 + k_s / b_s:>9.3f}x")


if __name__ == "__main__":
    main()
