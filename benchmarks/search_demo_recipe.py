"""Steps-to-accuracy of demo recipes: settings x variants x training seeds, with the demo's own pieces.

Each run is one `elfreg demo` training run (elfreg.demo.runs.train_run: the demo's task, cached SmolLM2 features,
student, trainer and accuracy curve: test exact match of the EMA weights, early-stop at the main NFE, first
sampling seed), trained ``lanes`` at a time as the demo trains. A run's numbers depend only on its settings, seed
and thread count, not on the machine's load, so the search may run on a busy machine; its seconds may not.

    PYTHONPATH=src python benchmarks/search_demo_recipe.py --out runs/search \\
        --setting "base:" --setting "cosine:train.lr_schedule=cosine train.lr=3e-3" \\
        --common "train.steps=1000 eval.curve_every=100" --seeds 0 1 2 --variants ELF ELF-REG
    PYTHONPATH=src python benchmarks/search_demo_recipe.py --out runs/search --report   # tables only

Finished runs are appended to <out>/search.jsonl (one line per run) and skipped when asked again, so a search
can be split into several shorter commands; an interrupted run resumes from its last checkpoint. The table gives,
per setting and variant, the first curve step at which each training seed reaches each accuracy (">N": not by
the last point N), the last point's accuracy per seed, and the mean steps per second of the runs.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path


def parse_setting(text: str) -> tuple[str, list[str]]:
    """'name: k=v k=v' -> (name, [k=v, ...])."""
    name, _, rest = text.partition(":")
    if not name.strip() or any(c in name for c in "/ "):
        raise SystemExit(f"--setting {text!r}: expected 'name: key=value ...' with a name without spaces or '/'")
    return name.strip(), shlex.split(rest)


def read_results(path: Path) -> list[dict]:
    """The runs recorded in ``path`` (a torn last line from a kill is dropped)."""
    from elfreg.train.metrics import read_metrics  # the same JSON-lines reading

    try:
        return read_metrics(path)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def run_key(rec: dict) -> tuple:
    return rec["setting"], tuple(rec["overrides"]), rec["variant"], rec["seed"]


def search(args: argparse.Namespace) -> None:
    import torch

    from elfreg.atomic import append_line
    from elfreg.demo.cli import demo_config
    from elfreg.demo.config import VARIANTS
    from elfreg.demo.prepare import prepare
    from elfreg.demo.runner import side_by_side
    from elfreg.demo.runs import train_run

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "search.jsonl"
    common = shlex.split(args.common)
    for text in args.setting:
        name, overrides = parse_setting(text)
        overrides = common + overrides
        cfg = demo_config(False, overrides)
        done = {run_key(r) for r in read_results(path)}
        jobs = [(v, s) for s in args.seeds for v in args.variants
                if (name, tuple(overrides), v, s) not in done]
        for v in args.variants:
            if v not in VARIANTS:
                raise SystemExit(f"--variants: unknown {v!r}; choose from {VARIANTS}")
        if not jobs:
            continue
        print(f"== {name}: {' '.join(overrides)}; {len(jobs)} run(s)", file=sys.stderr, flush=True)
        torch.set_num_threads(cfg.threads)
        data = prepare(cfg, args.cache_dir, progress=False)
        shared = threading.Lock()
        lock = threading.Lock()  # appends from the lanes

        def one(job, stop):
            variant, seed = job
            torch.set_num_threads(cfg.threads // cfg.lanes)
            t0 = time.perf_counter()
            res = train_run(data, cfg, variant, seed, out / name / variant / f"seed-{seed}", stop, shared,
                            progress=args.progress)
            rec = {"setting": name, "overrides": overrides, "variant": variant, "seed": seed, "steps": res["steps"],
                   "seconds": time.perf_counter() - t0, "curve": res["curve"], "threads": cfg.threads // cfg.lanes,
                   "lanes": cfg.lanes}
            with lock:
                append_line(path, json.dumps(rec))
            print(f"   {name} {variant} seed {seed}: " + " ".join(f"{p['step']}:{100 * p['acc']:.0f}"
                                                               for p in res["curve"]), file=sys.stderr, flush=True)
            return rec

        side_by_side(jobs, one, cfg.lanes)
    report(path, args.thresholds)


def reach(curve: list[dict], x: float) -> str:
    step = next((p["step"] for p in curve if p["acc"] >= x - 1e-12), None)
    return str(step) if step is not None else f">{curve[-1]['step']}" if curve else "-"


def report(path: Path, thresholds: list[float]) -> None:
    """Per setting and variant: steps to each accuracy per training seed, last-point accuracy, steps per second."""
    recs = read_results(path)
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        groups.setdefault((r["setting"], tuple(r["overrides"]), r["variant"]), []).append(r)
    head = " | ".join(f"steps to {100 * x:.0f} %" for x in thresholds)
    print(f"| setting | variant | seeds | {head} | last point: step, acc % per seed (mean) | steps/s |")
    print("|---|---|---|" + "---|" * len(thresholds) + "---|---|")
    for (name, overrides, variant), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        cols = [" / ".join(reach(r["curve"], x) for r in rs) for x in thresholds]
        last = [r["curve"][-1] for r in rs if r["curve"]]
        accs = [100 * p["acc"] for p in last]
        mean = f" ({statistics.fmean(accs):.1f})" if accs else ""
        rate = statistics.fmean(r["steps"] / r["seconds"] for r in rs)
        print(f"| {name} | {variant} | {', '.join(str(r['seed']) for r in rs)} | " + " | ".join(cols)
              + f" | {last[0]['step'] if last else '-'}: {' / '.join(f'{a:.0f}' for a in accs)}{mean} | {rate:.1f} |")
    print()
    for name, overrides in dict.fromkeys((k[0], k[1]) for k in groups):
        print(f"- {name}: `{' '.join(overrides)}`")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder of the runs and search.jsonl")
    ap.add_argument("--setting", action="append", default=[], help="'name: key=value ...' (demo overrides)")
    ap.add_argument("--common", default="", help="overrides of every setting (before the setting's own)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variants", nargs="+", default=["ELF", "ELF-REG"])
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.3, 0.4, 0.5, 0.55])
    ap.add_argument("--cache-dir", default=None, help="feature cache (default: the demo's)")
    ap.add_argument("--progress", action="store_true", help="a progress bar per run")
    ap.add_argument("--report", action="store_true", help="only print the table of <out>/search.jsonl")
    args = ap.parse_args()
    if args.report:
        return report(Path(args.out) / "search.jsonl", args.thresholds)
    if not args.setting:
        ap.error("give at least one --setting (or --report)")
    search(args)


if __name__ == "__main__":
    main()
