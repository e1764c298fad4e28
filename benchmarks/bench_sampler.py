"""Sampler overhead benchmark (spec §5): a whole sample() against N bare network calls on the same inputs.

Run: PYTHONPATH=src python benchmarks/bench_sampler.py [--nfe 32] [--batch 1 16] [--threads 2]
Prints, per sampler and batch size, the fastest of interleaved repeats of both and their ratio (goal
<= 1.03x). The minimum, not the median, because the shared CPU's load only ever adds time.
Uses the project's ElfStudent when it can be built, else an ELF-shaped stand-in transformer of the
same size (prefix tokens, RMSNorm, SDPA attention, SwiGLU, REG token, factored vocab head).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch
from torch import nn
import torch.nn.functional as F

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


@dataclass
class BenchOutput:
    x_hat: torch.Tensor
    reg_hat: torch.Tensor | None
    logits: torch.Tensor | None


class _Block(nn.Module):
    def __init__(self, h: int, heads: int) -> None:
        super().__init__()
        f = int(8 * h / 3)
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(h, eps=1e-6), nn.RMSNorm(h, eps=1e-6)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.w12, self.w3 = nn.Linear(h, 2 * f), nn.Linear(f, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, h))
        a, g = self.w12(self.n2(x)).chunk(2, dim=-1)
        return x + self.w3(F.silu(a) * g)


class _TimeEmbed(nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(256, h), nn.SiLU(), nn.Linear(h, h))
        self.register_buffer("freq", torch.exp(-torch.log(torch.tensor(1e4)) * torch.arange(128) / 128))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        arg = t[:, None].float() * self.freq
        return self.mlp(torch.cat([arg.cos(), arg.sin()], dim=-1))


class BenchStudent(nn.Module):
    """ELF-shaped stand-in denoiser/decoder with the contract of elfreg.model.student.ElfStudent."""

    def __init__(self, cfg: BenchConfig) -> None:
        super().__init__()
        self.config = cfg
        d, h = cfg.feature_dim, cfg.width
        self.self_cond_proj = nn.Linear(2 * d, d)
        self.text_proj = nn.Sequential(nn.Linear(d, 128, bias=False), nn.Linear(128, h))
        self.reg_in, self.reg_out = nn.Linear(cfg.reg_dim, h), nn.Linear(h, cfg.reg_dim)
        self.t_emb, self.w_emb = _TimeEmbed(h), _TimeEmbed(h)
        self.prefix = nn.Parameter(torch.randn(1, 12, h) * 0.02)
        self.blocks = nn.ModuleList(_Block(h, cfg.heads) for _ in range(cfg.depth))
        self.norm, self.final = nn.RMSNorm(h, eps=1e-6), nn.Linear(h, d)
        self.P = nn.Parameter(torch.randn(h, d) / h ** 0.5)
        self.U = nn.Parameter(torch.randn(d, cfg.vocab_size) / d ** 0.5)

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False, repa=False):
        b, length, _ = z.shape
        x = self.text_proj(self.self_cond_proj(torch.cat([z, q], dim=-1)))
        pre = self.prefix.expand(b, -1, -1).clone()
        pre[:, :4] += self.t_emb(t)[:, None]
        pre[:, 4:8] += self.w_emb(w)[:, None]
        pre[:, 8:12] *= float(bool(decoder))
        parts = [pre, x] + ([self.reg_in(reg + reg_q)[:, None]] if reg is not None else [])
        s = torch.cat(parts, dim=1)
        for blk in self.blocks:
            s = blk(s)
        text = s[:, 12:12 + length]
        reg_hat = self.reg_out(self.norm(s[:, -1])) if reg is not None else None
        logits = F.gelu(text @ self.P, approximate="tanh") @ self.U if bool(decoder) else None
        return BenchOutput(self.final(self.norm(text)), reg_hat, logits)

    def head_to_token_ids(self, idx):
        return idx


def build_student(cfg: BenchConfig) -> tuple[nn.Module, str]:
    """The project's ElfStudent if it can be built from these sizes, else the stand-in; returns (net, name)."""
    try:
        from elfreg.model.student import ElfStudent, ModelConfig  # type: ignore[import-not-found]
        mc = ModelConfig(feature_dim=cfg.feature_dim, reg_dim=cfg.reg_dim, extra_token=cfg.extra_token,
                         max_len=cfg.max_len, vocab_size=cfg.vocab_size, width=cfg.width, depth=cfg.depth,
                         heads=cfg.heads)
        return ElfStudent(mc).eval(), "elfreg ElfStudent"
    except Exception as exc:  # noqa: BLE001 - any failure means: use the stand-in, and say why
        return BenchStudent(cfg).eval(), f"stand-in ELF-shaped student ({type(exc).__name__}: {exc})"


def inputs(cfg: BenchConfig, batch: int, prompt_len: int = 64):
    """Clean prompt features (B, L, d) and a prompt mask with prompt_len prompt positions."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, cfg.max_len, cfg.feature_dim, generator=g)
    mask = torch.zeros(batch, cfg.max_len, dtype=torch.bool)
    mask[:, :prompt_len] = True
    return x, mask


@torch.inference_mode()
def bare_calls(net: nn.Module, cfg: BenchConfig, x: torch.Tensor, nfe: int, with_reg: bool) -> None:
    """N bare network calls on fixed inputs: N - 1 denoiser calls and 1 decoder call."""
    b = x.shape[0]
    q = torch.zeros_like(x)
    t, w = torch.full((b,), 0.3), torch.full((b,), 3.0)
    reg = torch.zeros(b, cfg.reg_dim) if with_reg else None
    for _ in range(nfe - 1):
        net(x, q, t, w, reg=reg, reg_q=reg, decoder=False)
    net(x, q, torch.ones(b), w, reg=reg, reg_q=reg, decoder=True)


class CachedNetwork(nn.Module):
    """Returns precomputed outputs of the real network: times the sampler's own bookkeeping alone."""

    def __init__(self, net: nn.Module, cfg: BenchConfig, x: torch.Tensor) -> None:
        super().__init__()
        self.config = net.config
        b = x.shape[0]
        with torch.inference_mode():
            reg = torch.zeros(b, cfg.reg_dim)
            self.den = net(x, torch.zeros_like(x), torch.full((b,), 0.3), torch.full((b,), 3.0), reg=reg, reg_q=reg)
            self.dec = net(x, torch.zeros_like(x), torch.ones(b), torch.full((b,), 3.0), reg=reg, reg_q=reg,
                           decoder=True)

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False, repa=False):
        return self.dec if bool(decoder) else self.den

    def head_to_token_ids(self, idx):
        return idx


def seconds(fn) -> float:
    """Wall seconds of one call of fn."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nfe", type=int, default=16)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = BenchConfig()
    net, name = build_student(cfg)
    nparams = sum(p.numel() for p in net.parameters())
    print(f"network: {name}; {nparams / 1e6:.2f}M parameters; canvas {cfg.max_len}, torch threads {args.threads}")
    print("ratio = whole sample / N bare calls; bookkeeping = the sampler with the network's outputs cached,")
    print("so 1 + bookkeeping / bare is the overhead ratio free of the shared CPU's load swings.")
    print(f"{'sampler':<11} {'batch':>5} {'N':>4} {'bare s':>9} {'sampler s':>10} {'ratio':>7} "
          f"{'bookkeep s':>11} {'1+bk/bare':>10}")
    for batch in args.batch:
        x, mask = inputs(cfg, batch)
        keys = [(i, 0) for i in range(batch)]
        for sampler in ("full-span", "early-stop", "renoise"):
            scfg = SamplerConfig(sampler=sampler, nfe=args.nfe, rho=8)
            seconds(lambda: bare_calls(net, cfg, x, 2, True))  # warm-up
            # interleave the two measurements so machine load drifts hit both alike
            bare, full = [], []
            for _ in range(args.repeats):
                bare.append(seconds(lambda: bare_calls(net, cfg, x, args.nfe, True)))
                full.append(seconds(lambda: sample(net, x, mask, scfg, keys)))
            b_s, f_s = min(bare), min(full)
            cached = CachedNetwork(net, cfg, x)
            k_s = min(seconds(lambda: sample(cached, x, mask, scfg, keys)) for _ in range(args.repeats))
            print(f"{sampler:<11} {batch:>5} {args.nfe:>4} {b_s:>9.4f} {f_s:>10.4f} {f_s / b_s:>6.3f}x "
                  f"{k_s:>11.4f} {1 + k_s / b_s:>9.3f}x")


if __name__ == "__main__":
    main()
