"""Which positions the standardisation statistics come from, measured on the demo (docs/training.md).

Trains the demo's ELF-REG student (the demo's task, backbones, student and training budget, unchanged) with
``train.stats_positions`` set to one choice, then scores prefix early-stop at the demo's main NFE (16) over its
three sampling seeds and keeps the per-problem results. A second call with ``--compare`` pairs two runs over the
test problems the way the demo report does (``elfreg.demo.claims``) and prints the difference with its standard
error. Only the ELF-REG variant is trained (half the CPU of a full demo); both choices see identical data, seeds
and budgets, so the statistics are the only difference.

    PYTHONPATH=src python benchmarks/measure_stats_positions.py --positions response --out runs/stats-response
    PYTHONPATH=src python benchmarks/measure_stats_positions.py --positions unpadded --out runs/stats-unpadded
    PYTHONPATH=src python benchmarks/measure_stats_positions.py --compare runs/stats-response runs/stats-unpadded

Demo settings can be changed with ``key=value`` overrides as for ``elfreg demo`` (e.g. ``train.steps=500``).
``--eval-checkpoint DIR/ELF-REG/ckpt-<step>`` scores a checkpoint of a run stopped early instead of training.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src")]


def measure(positions: str, out: Path, threads: int, overrides: list[str], eval_checkpoint: Path | None = None) -> dict:
    """Train ELF-REG with the given statistics positions and score early-stop at the main NFE over the seeds."""
    import torch

    from elfreg.backbones import Backbones
    from elfreg.data import CanvasConfig
    from elfreg.demo.cli import demo_config
    from elfreg.demo.evaluation import per_problem, sample_texts, sampler_config
    from elfreg.demo.prepare import (backbone_config, default_cache_dir, head_token_ids, task_config, task_module,
                                     task_rows)
    from elfreg.demo.runs import run_config
    from elfreg.tasks.formats import apply_template
    from elfreg.pretrained import ElfModel
    from elfreg.train import CachedFeatures
    from elfreg.train.features import unpadded_response_mask
    from elfreg.train.trainer import Trainer

    cfg = demo_config(False, overrides)
    cfg = dataclasses.replace(cfg, threads=threads)
    torch.set_num_threads(threads)
    task, tcfg = task_module(cfg), task_config(cfg)
    train_p = task.make_split(cfg.task.n_train, cfg.task.seed, "train", tcfg)
    test_p = task.make_split(cfg.task.n_test, cfg.task.seed, "test", tcfg)
    train_rows, test_rows = task_rows(train_p, task), task_rows(test_p, task)
    bcfg = backbone_config(cfg)
    backbones = Backbones(bcfg)
    canvas = CanvasConfig(canvas_len=cfg.student.canvas_len, prompt_cap=cfg.student.max_prompt_len, overflow="error")
    features = CachedFeatures.build_or_load(train_rows, backbones, canvas, default_cache_dir(), task="math",
                                            need_teacher=True, progress=False)
    t = features.tensors
    response = ~t["prompt_mask"]
    unpadded = unpadded_response_mask(t["tokens"], t["prompt_mask"], backbones.tokenizer.eos_token_id)
    padding_share = 1.0 - float(unpadded.sum()) / float(response.sum())
    head_ids = head_token_ids(backbones.tokenizer, train_rows + test_rows) if cfg.student.restrict_head else None
    dims = dict(feature_dim=backbones.feature_dim, reg_dim=backbones.teacher_dim, teacher_dim=backbones.teacher_dim,
                vocab_size=len(backbones.tokenizer))
    rcfg = run_config(cfg, "ELF-REG", bcfg, head_ids, dims, progress=False)
    rcfg = dataclasses.replace(rcfg, train=dataclasses.replace(rcfg.train, stats_positions=positions))
    t0 = time.perf_counter()
    if eval_checkpoint is None:
        res = Trainer(rcfg, out / "ELF-REG", backbones=backbones, dataset=features).run()
        model_dir, steps = res.model_dir, res.step
    else:  # score a checkpoint of a run stopped early (its EMA weights, model/ inside the checkpoint)
        model_dir = eval_checkpoint / "model"
        steps = json.loads((eval_checkpoint / "train_state.json").read_text())["step"]
    train_s = time.perf_counter() - t0
    model = ElfModel.from_pretrained(model_dir)
    if model.config.model != rcfg.model:
        raise ValueError(f"{model_dir}: not a model of this measurement's config")
    model.attach_backbones(backbones)
    x, mask, _ = model.encode_prompts([apply_template(r, "math")[0] for r in test_rows])
    ev = cfg.eval
    cell = {"sampler": "early-stop", "nfe": ev.main_nfe, "acc": [], "correct": []}
    for seed in ev.seeds:
        texts, _ = sample_texts(model, x, mask, sampler_config(model, cfg, "early-stop", ev.main_nfe, seed),
                                ev.batch_size)
        right, _ = per_problem(texts, test_p, task)
        cell["acc"].append(sum(right) / len(right))
        cell["correct"].append(right)
    cell["mean"] = sum(cell["acc"]) / len(cell["acc"])
    result = {"stats_positions": positions, "steps": steps, "train_seconds": train_s, "threads": threads,
              "padding_share_of_response_positions": padding_share, "overrides": overrides, "cell": cell}
    out.mkdir(parents=True, exist_ok=True)
    (out / "stats_measure.json").write_text(json.dumps(result, indent=2))
    return result


def compare(a_dir: Path, b_dir: Path) -> None:
    """Print both runs' accuracy per seed and b - a paired over the test problems (demo report's rule)."""
    from elfreg.demo.claims import _paired_se, compare

    a, b = (json.loads((d / "stats_measure.json").read_text()) for d in (a_dir, b_dir))
    for r in (a, b):
        print(f"{r['stats_positions']:>9}: early-stop {r['cell']['nfe']} NFE, acc per seed "
              f"{[round(v, 3) for v in r['cell']['acc']]}, mean {r['cell']['mean']:.4f} "
              f"(padding = {r['padding_share_of_response_positions']:.1%} of response positions)")
    se = _paired_se(a["cell"], b["cell"])
    outcome, evidence = compare(a["cell"], b["cell"])
    print(f"{b['stats_positions']} - {a['stats_positions']}: {b['cell']['mean'] - a['cell']['mean']:+.4f} "
          f"(paired SE {se:.4f}); '{b['stats_positions']} above {a['stats_positions']}': {outcome} ({evidence})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--positions", choices=("response", "unpadded"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    ap.add_argument("--eval-checkpoint", type=Path, help="score this ckpt-<step> folder of an earlier run instead of "
                                                         "training (a run stopped before its last step)")
    ap.add_argument("overrides", nargs="*", metavar="key=value")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if not args.positions or not args.out:
        ap.error("--positions and --out are required (or --compare A B)")
    r = measure(args.positions, args.out, args.threads, args.overrides, args.eval_checkpoint)
    print(json.dumps({k: v for k, v in r.items() if k != "cell"} | {"acc": r["cell"]["acc"]}, indent=2))


if __name__ == "__main__":
    main()
