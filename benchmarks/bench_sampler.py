"""Sampler overhead benchmark (spec §5): a whole sample() against N bare network calls on the same inputs.

Run: PYTHONPATH=src python benchmarks/bench_sampler.py [--nfe 16] [--batch 1 16] [--threads 1]
     (GPU: add --device cuda --bf16)
     PYTHONPATH=src python benchmarks/bench_sampler.py --invariance [--demo-size] [--batch 1 16 100]
     (the batch-invariance schemes: each one's time / one plain pass, and whether each is invariant here)
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
from elfreg.sampling.invariance import CUDA_CHUNK, SCHEMES, apply_scheme


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


def rows_differing(net: nn.Module, cfg: BenchConfig, scheme: str, device: str, sizes=(1, 2, 5, 7, 16, 19)) -> int:
    """Rows (of every batch size in ``sizes``, first and last rows) whose denoiser output differs in any bit from the
    same row computed alone: 0 means the scheme is batch-invariant here."""
    apply_scheme(net, scheme)
    g = torch.Generator().manual_seed(0)
    n = max(sizes)
    z = torch.randn(n, cfg.max_len, cfg.feature_dim, generator=g).to(device)
    t, w = torch.rand(n, generator=g).to(device), torch.full((n,), 3.0, device=device)
    reg = torch.randn(n, cfg.reg_dim, generator=g).to(device)

    def out(s: slice) -> torch.Tensor:
        return net(z[s], torch.zeros_like(z[s]), t[s], w[s], reg=reg[s], reg_q=torch.zeros_like(reg[s])).x_hat

    bad = 0
    with torch.inference_mode():
        alone = torch.cat([out(slice(i, i + 1)) for i in range(n)])
        for b in sizes:
            for start in (0, n - b):
                got = out(slice(start, start + b))
                bad += sum(not torch.equal(got[i], alone[start + i]) for i in range(b))
    return bad


def invariance_costs(cfg: BenchConfig, args: argparse.Namespace) -> None:
    """Per batch size: early-stop sample() time of each scheme / one plain pass, interleaved, fastest of repeats;
    and each scheme's rows differing from the row alone (0: invariant)."""
    net, name = build_student(cfg)
    torch.nn.init.normal_(net.final_linear.weight, std=0.1)   # a zero output map would hide every difference
    net.to(args.device)
    schemes = ["off", "rows", "layers", "chunks"]
    print(f"network: {name}; canvas {cfg.max_len}, device {args.device}, torch threads {args.threads}, early-stop "
          f"N = {args.nfe}; chunks of {CUDA_CHUNK} rows (the CUDA scheme) timed on this device too")
    print("rows differing from the row alone (batches 1, 2, 5, 7, 16, 19; first and last rows): "
          + ", ".join(f"{s} {rows_differing(net, cfg, s, args.device)}" for s in schemes))
    print(f"{'batch':>5} " + " ".join(f"{s + ' s':>10}" for s in schemes) + "  " + " ".join(f"{s:>7}" for s in schemes[1:]))
    for batch in args.batch:
        x, mask = inputs(cfg, batch, prompt_len=cfg.max_len // 2, device=args.device)
        keys = [(i, 0) for i in range(batch)]
        scfg = SamplerConfig(sampler="early-stop", nfe=args.nfe, rho=8)
        best = {s: float("inf") for s in schemes}
        for _ in range(args.repeats):   # interleaved: the shared machine's load drifts hit every scheme alike
            for s in schemes:
                apply_scheme(net, s)
                best[s] = min(best[s], seconds(lambda: sample(net, x, mask, scfg, keys)))
        print(f"{batch:>5} " + " ".join(f"{best[s]:>10.3f}" for s in schemes) + "  "
              + " ".join(f"{best[s] / best['off']:>6.2f}x" for s in schemes[1:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nfe", type=int, default=16)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (GPU)")
    ap.add_argument("--scheme", default="off", choices=SCHEMES,
                    help="the batch-invariance scheme the network runs in (elfreg.sampling.invariance; `elfreg "
                         "generate` runs its device's: layers on the CPU)")
    ap.add_argument("--invariance", action="store_true",
                    help="instead: the cost of each batch-invariance scheme against one plain pass (below)")
    ap.add_argument("--demo-size", action="store_true", help="the demo's student (4 x 64, canvas 30)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = BenchConfig(max_len=30, width=64) if args.demo_size else BenchConfig()
    if args.invariance:
        return invariance_costs(cfg, args)
    net, name = build_student(cfg)
    net.to(args.device)
    apply_scheme(net, args.scheme)
    print(f"network: {name}; canvas {cfg.max_len}, device {args.device}, bf16 {args.bf16}, "
          f"torch threads {args.threads}, batch invariance {args.scheme}")
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
