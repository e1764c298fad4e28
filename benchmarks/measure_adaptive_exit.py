"""Accuracy against mean NFE: the adaptive exit rule against fixed-NFE prefix early-stop (docs/sampling.md).

One command trains (or resumes) the demo's students on a setting where NFE matters and measures both samplers:

    PYTHONPATH=src python benchmarks/measure_adaptive_exit.py --run runs/adaptive-exit --out docs/adaptive_exit

1. ``elfreg demo`` with DEMO_OVERRIDES (3-step arithmetic, 3 training seeds; ELF and ELF-REG, the demo's own
   recipe and report) into --run. Trainings resume from their checkpoints, so the command can be stopped and
   re-run; ``--no-train`` measures the run as it is.
2. For every trained model of --variants and every sampling seed: prefix early-stop at each N of --fixed, and the
   adaptive rule at each setting of the grid (check_every x patience x min_nfe x max_nfe), on the run's test
   problems. A cell's NFE is what each row spent, check decodes included (the sampler's own per-row count).
   Cells are appended to --run/adaptive_exit_cells.jsonl as they finish; a re-run skips the cells it has.
3. Writes --out.md (table, the rule's losses, the command) and --out.png (accuracy against mean NFE).

Demo settings can be changed with ``key=value`` overrides as for ``elfreg demo`` (they replace DEMO_OVERRIDES' keys).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src")]

if TYPE_CHECKING:
    from elfreg.demo.config import DemoConfig

# 3-step arithmetic (one more dependent step than the default demo, 21-token answers), a larger training and test
# split, three training seeds; the canvas grows to the longer problem (15 prompt + 21 response tokens + EOS).
DEMO_OVERRIDES = ["task.ops=3", "task.n_train=4000", "task.n_test=300", "student.canvas_len=40",
                  "student.max_prompt_len=16", "train.steps=3000", "train.save_every=250", "train.seeds=[0,1,2]",
                  "eval.nfes=[4,8,16,32]"]
FIXED = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
CHECK_EVERY = (1, 2, 4)
PATIENCE = (1, 2, 3)
MIN_NFE = (0,)
MAX_NFE = (8, 16, 32, 64)


def merged_overrides(extra: list[str]) -> list[str]:
    """DEMO_OVERRIDES with the keys of ``extra`` replaced (later wins)."""
    keys = {o.split("=", 1)[0] for o in extra}
    return [o for o in DEMO_OVERRIDES if o.split("=", 1)[0] not in keys] + list(extra)


def rule_grid(max_nfe: tuple[int, ...]) -> list[dict]:
    """Every adaptive setting of the grid that can fire within its max_nfe."""
    from elfreg.sampling.exit import ExitRule

    out = []
    for top in max_nfe:
        for c in CHECK_EVERY:
            for pat in PATIENCE:
                for lo in MIN_NFE:
                    try:
                        ExitRule.checked(c, pat, lo, top)
                    except ValueError:
                        continue
                    out.append({"sampler": "adaptive", "nfe": top, "check_every": c, "patience": pat, "min_nfe": lo})
    return out


def cell_key(variant: str, train_seed: int, step: int, seed: int, spec: dict) -> str:
    return json.dumps([variant, train_seed, step, seed, sorted(spec.items())])


def model_steps(run: Path, variant: str, train_seeds: list[int]) -> dict[int, int]:
    """Training steps of each seed's model in the run (cells of older models are not reported)."""
    return {s: json.loads((run / variant / f"seed-{s}" / "summary.json").read_text())["steps"] for s in train_seeds}


def measure(run: Path, cfg: DemoConfig, variants: list[str], seeds: list[int], fixed: tuple[int, ...],
            max_nfe: tuple[int, ...], threads: int) -> Path:
    """Score every (model, sampling seed, sampler setting) cell not yet in run/adaptive_exit_cells.jsonl."""
    import torch

    from elfreg.backbones import Backbones
    from elfreg.demo.evaluation import encode_test, per_problem, sample_texts_nfe, sampler_config
    from elfreg.demo.prepare import backbone_config, task_config, task_module, task_rows
    from elfreg.pretrained import ElfModel

    torch.set_num_threads(threads)
    task, tcfg = task_module(cfg), task_config(cfg)
    test_p = task.make_split(cfg.task.n_test, cfg.task.seed, "test", tcfg)
    rows = task_rows(test_p, task)
    path = run / "adaptive_exit_cells.jsonl"
    done = {json.loads(line)["key"] for line in path.read_text().splitlines()} if path.is_file() else set()
    specs = [{"sampler": "early-stop", "nfe": n} for n in fixed] + rule_grid(max_nfe)
    backbones = None
    for variant in variants:
        steps = model_steps(run, variant, cfg.train.seeds)
        for train_seed in cfg.train.seeds:
            step = steps[train_seed]
            todo = [(s, spec) for s in seeds for spec in specs
                    if cell_key(variant, train_seed, step, s, spec) not in done]
            if not todo:
                continue
            backbones = backbones or Backbones(backbone_config(cfg))
            model = ElfModel.from_pretrained(run / variant / f"seed-{train_seed}" / "model")
            model.attach_backbones(backbones)
            x, mask, _ = encode_test(model, rows)
            for seed, spec in todo:
                # the demo's settings of the same budget, then the cell's sampler and rule (a rule that cannot fire
                # in the default settings would fail the check before its own settings replace them)
                base = sampler_config(model, cfg, "early-stop", spec["nfe"], seed)
                scfg = base.__class__(**{**base.to_dict(), **spec})
                t0 = time.perf_counter()
                texts, _, nfe, settled = sample_texts_nfe(model, x, mask, scfg, cfg.eval.batch_size)
                right, _ = per_problem(texts, test_p, task)
                rec = {"key": cell_key(variant, train_seed, step, seed, spec), "variant": variant,
                       "train_seed": train_seed, "step": step, "seed": seed, **spec, "correct": right,
                       "nfe_rows": nfe, "settled": settled, "seconds": time.perf_counter() - t0}
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec) + "\n")
                print(f"{variant} seed-{train_seed} s{seed} {spec}: acc {sum(right) / len(right):.3f}, "
                      f"mean NFE {statistics.fmean(nfe):.2f} ({rec['seconds']:.1f} s)", flush=True)
    return path


def spec_label(spec: dict) -> str:
    if spec["sampler"] == "early-stop":
        return f"early-stop {spec['nfe']}"
    return f"adaptive c={spec['check_every']} p={spec['patience']} min={spec['min_nfe']} max={spec['nfe']}"


def read_cells(path: Path, variant: str, steps: dict[int, int]) -> list[dict]:
    """The variant's cells measured on the models as they are now (their training step)."""
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in recs if r["variant"] == variant and steps.get(r["train_seed"]) == r["step"]]


def summarise(recs: list[dict]) -> list[dict]:
    """Per sampler setting: accuracy (mean, std over (training, sampling) seed pairs) and mean NFE per row."""
    cells: dict[str, list[dict]] = {}
    for rec in recs:
        spec = {k: rec[k] for k in ("sampler", "nfe", "check_every", "patience", "min_nfe") if k in rec}
        cells.setdefault(json.dumps(sorted(spec.items())), []).append(rec)
    out = []
    for key, recs in cells.items():
        spec = dict(json.loads(key))
        acc = [sum(r["correct"]) / len(r["correct"]) for r in recs]
        nfe = [v for r in recs for v in r["nfe_rows"]]
        out.append({**spec, "label": spec_label(spec), "acc": statistics.fmean(acc),
                    "acc_std": statistics.stdev(acc) if len(acc) > 1 else 0.0, "nfe_mean": statistics.fmean(nfe),
                    "cells": len(recs), "rows": len(nfe)})
    return sorted(out, key=lambda r: (r["sampler"] != "early-stop", r["nfe_mean"]))


def fixed_needed(fixed: list[dict], acc: float, tol: float = 0.01) -> dict | None:
    """The cheapest fixed-NFE setting whose accuracy is at least ``acc - tol`` (None if none reaches it)."""
    return next((f for f in sorted(fixed, key=lambda f: f["nfe"]) if f["acc"] >= acc - tol), None)


def losses(cells: list[dict], spec: dict) -> dict:
    """The rule against fixed early-stop at its max NFE, paired on the same paths (same rho, seeds and keys).

    up: fixed wrong, rule right; down: fixed right, rule wrong; settled_wrong: rows whose answer settled on a wrong
    answer (of them, fixed_right were right with the whole budget: the rule's losses).
    """
    by = {(r["train_seed"], r["seed"], r["sampler"], r["nfe"], r.get("check_every"), r.get("patience"),
           r.get("min_nfe")): r for r in cells}
    out = {"n": 0, "up": 0, "down": 0, "settled": 0, "settled_wrong": 0, "settled_wrong_fixed_right": 0}
    for (ts, s, sampler, nfe, c, p, lo), rec in by.items():
        if (sampler, nfe, c, p, lo) != ("adaptive", spec["nfe"], spec["check_every"], spec["patience"],
                                         spec["min_nfe"]):
            continue
        ref = by.get((ts, s, "early-stop", nfe, None, None, None))
        if ref is None:
            continue
        for a, f, st in zip(rec["correct"], ref["correct"], rec["settled"]):
            out["n"] += 1
            out["up"] += (not f) and a
            out["down"] += f and not a
            out["settled"] += st
            out["settled_wrong"] += st and not a
            out["settled_wrong_fixed_right"] += st and not a and f
    return out


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def report(cells: list[dict], variant: str, out: Path, command: str) -> list[dict]:
    """Markdown table and plot of accuracy against mean NFE (fixed early-stop curve, adaptive settings)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summarise(cells)
    fixed = [r for r in rows if r["sampler"] == "early-stop"]
    rules = [r for r in rows if r["sampler"] == "adaptive"]
    top = max(f["nfe"] for f in fixed)
    lines = [f"# Adaptive exit against fixed-NFE early-stop ({variant})", "", f"Made by: `{command}`", "",
             "Accuracy: exact final answer on the run's test problems, mean ± std over (training seed, sampling "
             "seed) pairs. NFE: per row, every network call that computed it (check decodes included), averaged "
             "over rows. 'fixed needed': the cheapest fixed early-stop N measured whose accuracy is within 1 point "
             "of the rule's (or above it); 'saving' = that N / the rule's mean NFE. Paired against fixed early-stop "
             "at the rule's max NFE on the same paths: 'up' = fixed wrong, rule right; 'down' = fixed right, rule "
             "wrong; 'settled wrong' = the answer settled on a wrong one (in brackets: of those, right with the "
             "whole budget: the rule's losses).", "",
             "| sampler | mean NFE | accuracy (%) | fixed needed | saving | settled (%) | up / down | "
             "settled wrong (fixed right) | rows |", "|---|---|---|---|---|---|---|---|---|"]
    for r in fixed:
        lines.append(f"| {r['label']} | {r['nfe_mean']:.2f} | {pct(r['acc'])} ± {pct(r['acc_std'])} | | | | | | "
                     f"{r['rows']} |")
    for r in rules:
        need = fixed_needed(fixed, r["acc"])
        r["fixed_needed"] = need["nfe"] if need else None
        r["saving"] = need["nfe"] / r["nfe_mean"] if need else None
        r["losses"] = lo = losses(cells, r)
        n = max(lo["n"], 1)
        need_s = str(need["nfe"]) if need else f"> {top}"
        saving_s = f"{r['saving']:.2f}x" if need else "n/a"
        lines.append(f"| {r['label']} | {r['nfe_mean']:.2f} | {pct(r['acc'])} ± {pct(r['acc_std'])} | {need_s} | "
                     f"{saving_s} | {pct(lo['settled'] / n)} | {lo['up']} / {lo['down']} | {lo['settled_wrong']} "
                     f"({lo['settled_wrong_fixed_right']}) | {r['rows']} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    (out.parent / f"{out.name}.json").write_text(json.dumps(rows, indent=1))

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ax.errorbar([r["nfe_mean"] for r in fixed], [100 * r["acc"] for r in fixed],
                yerr=[100 * r["acc_std"] for r in fixed], marker="o", capsize=3, color="k",
                label="fixed early-stop")
    for i, budget in enumerate(sorted({r["nfe"] for r in rules})):
        pts = [r for r in rules if r["nfe"] == budget]
        ax.scatter([r["nfe_mean"] for r in pts], [100 * r["acc"] for r in pts], marker="s", color=f"C{i}",
                   label=f"adaptive exit, max {budget} NFE (check decodes counted)")
    ax.set_xscale("log", base=2)
    ticks = [r["nfe"] for r in fixed]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("mean NFE per sample")
    ax.set_ylabel("exact match (%)")
    ax.set_title(f"{variant}: accuracy against mean NFE")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    plt.close(fig)
    print("\n".join(lines))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="demo output folder (trained here unless --no-train)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "adaptive_exit",
                    help="report path without suffix (.md and .png are written)")
    ap.add_argument("--no-train", action="store_true", help="measure the run's models as they are")
    ap.add_argument("--variants", nargs="+", default=["ELF-REG"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="sampling seeds")
    ap.add_argument("--fixed", type=int, nargs="+", default=list(FIXED), help="fixed early-stop NFE values")
    ap.add_argument("--max-nfe", type=int, nargs="+", default=list(MAX_NFE), help="max_nfe values of the rule grid")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("overrides", nargs="*", metavar="key=value")
    args = ap.parse_args()
    from elfreg.demo.cli import demo_config

    cfg = demo_config(False, merged_overrides(args.overrides))
    if not args.no_train:
        from elfreg.demo.runner import run_demo

        run_demo(cfg, args.run, progress=False)
    path = measure(args.run, cfg, args.variants, args.seeds, tuple(args.fixed), tuple(args.max_nfe), args.threads)
    command = "PYTHONPATH=src python benchmarks/measure_adaptive_exit.py " + " ".join(sys.argv[1:])
    train_seeds = cfg.train.seeds
    for variant in args.variants:
        out = args.out if len(args.variants) == 1 else args.out.with_name(f"{args.out.name}-{variant}")
        report(read_cells(path, variant, model_steps(args.run, variant, train_seeds)), variant, out, command)


if __name__ == "__main__":
    main()
