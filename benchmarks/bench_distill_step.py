"""What a distillation step costs against a training step, on the demo's student (4 x 64, batch 32, canvas 30,
SmolLM2 widths 576, the head restricted to 40 tokens), per PD round and for the flow map.

Prints, from one run, CPU seconds per loss + backward (no optimiser: it costs the same in both) of the training
objective (elfreg.objective, ELF-REG) and of elfreg.distill's loss in each PD round (its teacher runs 64/n Euler
sub-steps per row) and for the flow map, measured in rounds interleaved with each other (so machine load hits all
alike), and each one's ratio to the training step; then what a whole PD run of S steps per round costs in training
steps. Random features and weights stand in for a trained teacher's (the cost does not depend on the values).

    PYTHONPATH=src python benchmarks/bench_distill_step.py [--rounds 3] [--steps 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def build(flow_map: bool = False):
    from elfreg.config import ObjectiveConfig, model_preset
    from elfreg.model.student import ElfStudent

    torch.manual_seed(0)
    m = model_preset("tiny", width=64, depth=4, heads=4, repa_block=1, bottleneck_dim=32, repa_hidden=128,
                     feature_dim=576, reg_dim=576, teacher_dim=576, vocab_size=49152, max_len=30, max_prompt_len=16,
                     head_token_ids=list(range(40)), flow_map=flow_map)
    return ElfStudent(m).train(), ObjectiveConfig()


def batch_and_draws(cfg, b: int = 32, length: int = 30, d: int = 576):
    from elfreg.distill.draws import distill_draws
    from elfreg.objective import TrainBatch

    g = torch.Generator().manual_seed(1)
    prompt = torch.zeros(b, length, dtype=torch.bool)
    prompt[:, :12] = True
    batch = TrainBatch(x=torch.randn(b, length, d, generator=g), tokens=torch.randint(0, 40, (b, length), generator=g),
                       prompt_mask=prompt, content_mask=~prompt, teacher=torch.randn(b, length, d, generator=g),
                       reg=torch.randn(b, d, generator=g), teacher_at_source=torch.randn(b, d, generator=g))
    gens = [torch.Generator().manual_seed(i) for i in range(b)]
    return batch, distill_draws(cfg, gens, length, d, d, 64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3, help="steps per measurement")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--per-round", type=int, default=150, help="optimiser steps per PD round for the estimate")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from elfreg.distill.loss import distill_loss
    from elfreg.distill.pd import pd_rounds
    from elfreg.objective import elf_reg_loss

    student, cfg = build()
    fm_student, _ = build(flow_map=True)
    teacher, _ = build()
    teacher.eval().requires_grad_(False)
    batch, draws = batch_and_draws(cfg)
    rows = torch.tensor(32.0)

    def train_step():
        elf_reg_loss(student, batch, draws, cfg).loss.backward()

    cases = {"train (ELF-REG objective)": train_step}
    for r in pd_rounds([16, 8, 4, 2, 1], 64):
        cases[f"PD round {r.index}: {r.steps} steps, {r.sub_steps} sub-steps"] = (
            lambda r=r: distill_loss(student, teacher, batch, draws, cfg, "pd", r, 0.25, 0.1, rows).loss.backward())
    cases["flow map"] = lambda: distill_loss(fm_student, teacher, batch, draws, cfg, "flowmap", None, 0.25, 0.1,
                                             rows).loss.backward()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for fn in cases.values():   # warm-up
        fn()
    for _ in range(args.rounds):
        for name, fn in cases.items():
            t0 = time.process_time()
            for _ in range(args.steps):
                fn()
            times[name].append((time.process_time() - t0) / args.steps)
    base = statistics.median(times["train (ELF-REG objective)"])
    print(f"CPU seconds per loss + backward, median of {args.rounds} interleaved rounds of {args.steps} steps, "
          f"{args.threads} thread(s); batch 32, canvas 30, student 4 x 64")
    width = max(map(len, cases))
    pd_total = 0.0
    for name, ts in times.items():
        med = statistics.median(ts)
        if name.startswith("PD"):
            pd_total += med * args.per_round
        print(f"  {name:<{width}}  {med:8.4f} s  {med / base:6.2f}x the training step")
    print(f"a PD run of 5 rounds x {args.per_round} steps: {pd_total:.0f} CPU s of loss + backward = "
          f"{pd_total / base:.0f} training steps; the flow map's {args.per_round * 5} steps: "
          f"{statistics.median(times['flow map']) * args.per_round * 5:.0f} CPU s")


if __name__ == "__main__":
    main()
