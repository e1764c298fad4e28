"""Training throughput on the ``tiny`` preset: tokens/s and the share of step time in the frozen encoder+teacher.

    PYTHONPATH=src:tests python benchmarks/bench_train.py [--steps 40] [--batch 16] [--threads 1]

Builds the tiny Qwen3 backbones of the tests (6 blocks, width 32) in a temporary folder, trains the ``tiny``
student preset (width 128, depth 4, canvas 64) online on single-digit sums and prints the measured numbers of
this one run (the first steps are warm-up and not counted).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests"), str(REPO / "tests" / "train")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from _tiny import tiny_overrides, write_sum_jsonl
    from helpers import make_tiny_qwen3

    from elfreg.train.config import load_run_config
    from elfreg.train.trainer import train

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        lm = make_tiny_qwen3(tmp / "lm")
        data = write_sum_jsonl(tmp / "sums.jsonl")
        over = tiny_overrides(lm, data, **{"train.steps": args.steps, "train.batch_size": args.batch,
                                           "train.save_every": 10 ** 6, "train.log_every": 10 ** 6})
        # the tiny preset as it is (not the smaller smoke student)
        over += ["model.width=128", "model.depth=4", "model.heads=4", "model.repa_block=2",
                 "model.bottleneck_dim=64", "model.repa_hidden=256", "model.max_len=64", "model.max_prompt_len=32"]
        res = train(load_run_config(REPO / "configs" / "tiny-smoke.yaml", over), tmp / "run")
    hist = res.history[args.warmup:]
    t_feat = sum(h["time_features"] for h in hist)
    t_upd = sum(h["time_update"] for h in hist)
    tokens = sum(h["canvas_tokens"] for h in hist)
    text_tokens = sum(h["tokens"] for h in hist)
    print(f"steps measured      {len(hist)} (batch {args.batch} x canvas 64, {args.threads} thread(s), CPU)")
    print(f"tokens/s            {tokens / (t_feat + t_upd):,.0f} canvas positions, "
          f"{text_tokens / (t_feat + t_upd):,.0f} prompt + response + EOS (the paper's count)")
    print(f"step time           {1000 * (t_feat + t_upd) / len(hist):.1f} ms")
    print(f"encoder+teacher     {100 * t_feat / (t_feat + t_upd):.1f} % of step time "
          f"(online features: canvas + tokenizer + frozen forward)")
    print(f"student fwd/bwd+opt {100 * t_upd / (t_feat + t_upd):.1f} %")


if __name__ == "__main__":
    main()
