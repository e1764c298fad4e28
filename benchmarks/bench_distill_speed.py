"""Seconds per question of distilled students, their teacher and an autoregressive model of matched size.

Run: PYTHONPATH=src python benchmarks/bench_distill_speed.py --study demo_distill [--seed 0] [--batch 1 32]
     [--threads 1] [--repeats 5]
On the models of one training seed of `elfreg demo --distill` and its prompt, times (min of interleaved repeats):
- the sampler alone (denoiser and decoder calls, full-span on the uniform grid) for the teacher at NFE 16, PD's
  student at NFE 2 and the flow map at NFE 2 and 3, the way bench_vs_autoregressive.py times a diffusion model;
- the frozen prompt encoder's forward (SmolLM2-135M: every diffusion model pays it once per question; printed apart);
- two randomly initialised LlamaForCausalLM of the student's width, heads and SwiGLU width with the student's head
  vocabulary (the tokens of the training responses), generating the canvas' response positions greedily with their
  KV cache, prefill included: "AR matched", as many blocks as match the student's body parameter count
  (bench_vs_autoregressive.matched_depth: the student's input and output projections of the encoder's width count,
  so it is much deeper), and "AR same depth", the student's number of blocks (the stricter baseline).
Prints seconds per batch, answers per second and each model's speed against both AR models, sampler alone and with
the encoder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_sampler import BenchConfig, seconds  # noqa: E402  (same folder)
from bench_vs_autoregressive import build_ar, matched_depth  # noqa: E402
from elfreg.demo.distill import PROMPT  # noqa: E402
from elfreg.pretrained import ElfModel  # noqa: E402
from elfreg.sampling import SamplerConfig, sample  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, required=True, help="an `elfreg demo --distill` output folder")
    ap.add_argument("--seed", type=int, default=0, help="the training seed whose models are timed")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root = args.study / f"seed-{args.seed}"
    cells = [("teacher", root / "teacher/model", 16), ("PD", root / "pd/model", 2),
             ("flow map", root / "flowmap/model", 2), ("flow map", root / "flowmap/model", 3)]
    models = {p: ElfModel.from_pretrained(p) for _, p, _ in cells if p.is_dir()}
    if not models:
        raise SystemExit(f"{root}: no model folders (run `elfreg demo --distill --out {args.study}` first)")
    first = next(iter(models.values()))
    mc = first.config.model
    student = first.student
    head = mc.head_size
    bc = BenchConfig(feature_dim=mc.feature_dim, reg_dim=mc.reg_dim, extra_token=mc.extra_token, max_len=mc.max_len,
                     vocab_size=head, width=mc.width, depth=mc.depth, heads=mc.heads)
    ars = {"AR matched": build_ar(bc, matched_depth(bc, student.num_parameters("body"))),
           "AR same depth": build_ar(bc, mc.depth)}
    x, mask, ids = first.encode_prompts([PROMPT])
    prompt_len = len(ids[0])
    new_tokens = mc.max_len - prompt_len
    print(f"student {mc.depth}x{mc.width} (body {student.num_parameters('body') / 1e6:.2f}M, head of {head} tokens); "
          f"AR LlamaForCausalLM {ars['AR matched'].config.num_hidden_layers}x{mc.width} (matched) and "
          f"{mc.depth}x{mc.width} (same depth) of vocabulary {head}; prompt {prompt_len} "
          f"tokens, {new_tokens} response positions; torch threads {args.threads}; min of {args.repeats} repeats")
    for batch in args.batch:
        xb, mb = x.expand(batch, -1, -1).contiguous(), mask.expand(batch, -1).contiguous()
        keys = [(i, 0) for i in range(batch)]
        prompt_ids = torch.randint(2, head, (batch, prompt_len), generator=torch.Generator().manual_seed(0))

        def run_ar(ar) -> None:
            with torch.inference_mode():
                ar.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), max_new_tokens=new_tokens,
                            min_new_tokens=new_tokens, do_sample=False, use_cache=True, pad_token_id=0,
                            eos_token_id=None)

        def run(model: ElfModel, nfe: int) -> None:
            with torch.inference_mode():
                sample(model.student, xb, mb, SamplerConfig(sampler="full-span", grid="uniform", nfe=nfe), keys)

        def encode() -> None:
            with torch.inference_mode():
                first.encode_prompts([PROMPT] * batch)

        todo = [(n, (lambda a=a: run_ar(a))) for n, a in ars.items()] + [("encoder", encode)] + [
            (f"{name} NFE {nfe}", (lambda m=models[p], n=nfe: run(m, n))) for name, p, nfe in cells if p in models]
        for _, fn in todo:   # warm-up
            fn()
        best = {name: float("inf") for name, _ in todo}
        for _ in range(args.repeats):
            for name, fn in todo:
                best[name] = min(best[name], seconds(fn))
        t_m, t_d, t_enc = best.pop("AR matched"), best.pop("AR same depth"), best.pop("encoder")
        print(f"\nbatch {batch}: AR matched {t_m:.4f} s ({batch / t_m:.1f} answers/s), AR same depth {t_d:.4f} s "
              f"({batch / t_d:.1f} answers/s); prompt encoder {t_enc:.4f} s")
        print("speed against the AR models (their seconds / the model's): sampler alone | with the encoder")
        print(f"{'model':<16} {'sampler s':>9} {'answers/s':>9} {'vs matched':>10} {'vs same':>8} | "
              f"{'+ encoder s':>11} {'vs matched':>10} {'vs same':>8}")
        for name, t in best.items():
            te = t + t_enc
            print(f"{name:<16} {t:>9.4f} {batch / t:>9.1f} {t_m / t:>9.1f}x {t_d / t:>7.1f}x | {te:>11.4f} "
                  f"{t_m / te:>9.1f}x {t_d / te:>7.1f}x")


if __name__ == "__main__":
    main()
