"""Generation speed: ELF-REG early-stop sampling against a KV-cached autoregressive transformer of matched size.

Run: PYTHONPATH=src python benchmarks/bench_vs_autoregressive.py [--nfe 8 16 32 64] [--batch 1 16] [--threads 1]
     (GPU: add --device cuda --bf16)
Both produce the same number of response tokens (canvas L minus a P-token prompt). The AR model is a
randomly initialised transformers LlamaForCausalLM with the student's width, heads, SwiGLU width and
vocabulary and as many blocks as match the student's body parameter count (the student's input/output
projections count too), generating greedily with use_cache=True. Printed per batch: seconds per batch of each,
the ratio diffusion / AR per N, and the N at which the two cross (from a least-squares line a + b N
through the diffusion timings). The frozen prompt encoder is excluded from the diffusion time (it is one
forward over the prompt, like the AR prefill that *is* included) — see docs/sampling.md.
"""

from __future__ import annotations

import argparse

import torch

from bench_sampler import BenchConfig, autocast, build_student, inputs, seconds  # same folder
from elfreg.sampling import SamplerConfig, sample


def build_ar(cfg: BenchConfig, depth: int):
    """Llama of the student's width, heads, SwiGLU width and vocabulary (untied head), random weights, eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    lc = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.width, intermediate_size=int(8 * cfg.width / 3),
                     num_hidden_layers=depth, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                     max_position_embeddings=4 * cfg.max_len, tie_word_embeddings=False, use_cache=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(lc).eval()


def matched_depth(cfg: BenchConfig, student_body: int) -> int:
    """AR depth whose non-embedding parameter count is closest to the student's body (no vocab head)."""
    def body(depth: int) -> int:
        m = build_ar(cfg, depth)
        return sum(p.numel() for p in m.parameters()) - m.get_input_embeddings().weight.numel() \
            - m.get_output_embeddings().weight.numel()
    one, two = body(1), body(2)
    per_layer, base = two - one, 2 * one - two
    return max(1, round((student_body - base) / per_layer))


def measure_batch(student, ar, cfg: BenchConfig, batch: int, nfes: list[int], prompt_len: int, repeats: int,
                  device: str, bf16: bool) -> dict:
    """Seconds per batch of AR generate and of early-stop sampling at each N (fastest of interleaved repeats).

    Returns {"ar_s": s, "diffusion_s": {N: s}, "new_tokens": response tokens per sample}.
    """
    new_tokens = cfg.max_len - prompt_len
    x, mask = inputs(cfg, batch, prompt_len, device)
    keys = [(i, 0) for i in range(batch)]
    ids = torch.randint(2, cfg.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(0)).to(device)

    def run_ar(n: int = new_tokens) -> None:
        with torch.inference_mode(), autocast(device, bf16):
            out = ar.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None)
        assert out.shape[1] == prompt_len + n

    run_ar(min(8, new_tokens))  # warm-up: the same kernels, a fraction of the tokens
    with autocast(device, bf16):  # warm-up of the diffusion side
        sample(student, x, mask, SamplerConfig(sampler="early-stop", nfe=2, rho=8), keys)
    diff: dict[int, list[float]] = {n: [] for n in nfes}
    ar_times: list[float] = []
    for _ in range(repeats):
        ar_times.append(seconds(run_ar))
        for n in nfes:
            scfg = SamplerConfig(sampler="early-stop", nfe=n, rho=8)
            with autocast(device, bf16):
                diff[n].append(seconds(lambda: sample(student, x, mask, scfg, keys)))
    return {"ar_s": min(ar_times), "diffusion_s": {n: min(v) for n, v in diff.items()}, "new_tokens": new_tokens}


def crossover(nfes: list[int], times: list[float], t_ar: float) -> tuple[float, float, float]:
    """(a, b, N*): least-squares line a + b N through the diffusion times and the N where it meets the AR time."""
    ns = torch.tensor(nfes, dtype=torch.float64)
    ts = torch.tensor(times, dtype=torch.float64)
    a_mat = torch.stack([torch.ones_like(ns), ns], dim=1)
    a, b = torch.linalg.lstsq(a_mat, ts[:, None]).solution.flatten().tolist()
    return a, b, (t_ar - a) / b if b > 0 else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nfe", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast for both models (GPU)")
    ap.add_argument("--ar-depth", type=int, default=0,
                    help="AR blocks (default 0: match the student's body parameter count)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = BenchConfig()
    student, name = build_student(cfg)
    ar = build_ar(cfg, args.ar_depth or matched_depth(cfg, student.num_parameters("body")))
    student.to(args.device)
    ar.to(args.device)
    new_tokens = cfg.max_len - args.prompt_len
    emb = ar.get_input_embeddings().weight.numel() + ar.get_output_embeddings().weight.numel()
    ar_all = sum(p.numel() for p in ar.parameters())
    print(f"diffusion: {name}; AR: LlamaForCausalLM {ar.config.num_hidden_layers}x{cfg.width}, "
          f"body {(ar_all - emb) / 1e6:.2f}M + embeddings/head {emb / 1e6:.2f}M")
    print(f"prompt {args.prompt_len} tokens, {new_tokens} new tokens, device {args.device}, bf16 {args.bf16}, "
          f"torch threads {args.threads}, "
          f"min of {args.repeats} interleaved repeats")
    for batch in args.batch:
        res = measure_batch(student, ar, cfg, batch, args.nfe, args.prompt_len, args.repeats, args.device, args.bf16)
        t_ar = res["ar_s"]
        print(f"\nbatch {batch}: AR generate {t_ar:.3f} s/batch ({batch * new_tokens / t_ar:.0f} tok/s)")
        print(f"{'N':>4} {'diffusion s':>12} {'tok/s':>8} {'diffusion/AR':>13}")
        ts = [res["diffusion_s"][n] for n in args.nfe]
        for n, t in zip(args.nfe, ts):
            print(f"{n:>4} {t:>12.3f} {batch * new_tokens / t:>8.0f} {t / t_ar:>12.2f}x")
        a, b, cross = crossover(args.nfe, ts, t_ar)
        where = (f"crosses the AR time at N ~ {cross:.1f} (diffusion faster below it)" if cross >= 2 else
                 f"no crossover: slower than AR at every N >= 2 (the line meets it at N ~ {cross:.1f})")
        print(f"diffusion time ~ {a:.4f} + {b:.5f} N s; {where}")


if __name__ == "__main__":
    main()
