"""``elfreg distill --teacher MODEL --output DIR --method pd|flowmap [--config PRESET] [key=value ...]`` (also
``python -m elfreg.distill ...`` under torchrun)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from elfreg.cliargs import error_line, output_dir, quiet_loaders
from elfreg.fingerprint import add_restart_argument


def distill_config_arg(text: str) -> str:
    """argparse type of ``--config``: a distillation preset by name (``demo``, ``gsm8k-b``, ...), a shipped config
    by name (``distill/gsm8k-b``) or a YAML file."""
    from elfreg.configfiles import config_arg, resolve_config

    if not Path(text).expanduser().exists():
        try:
            return str(resolve_config(f"distill/{text}"))
        except FileNotFoundError:
            pass
    return config_arg(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``distill`` flags (shared by ``elfreg distill`` and ``python -m elfreg.distill``)."""
    p.add_argument("--teacher", help="the model folder to distil (a training run's model/ folder, or any elfreg "
                                     "model folder or hub id); its data is the run's unless the config gives one")
    p.add_argument("--output", type=output_dir, help="run folder: a folder per stage, then model/ (the distilled "
                                                     "model), metrics.jsonl, summary.json (not needed with --dry-run)")
    p.add_argument("--method", choices=("pd", "flowmap"), default=None,
                   help="pd: progressive distillation, rounds of 16, 8, 4, 2, 1 steps; flowmap: one stage, a student "
                        "that jumps between any two times (default: the config's, else pd)")
    p.add_argument("--config", type=distill_config_arg, default=None,
                   help="a distillation preset (demo, gsm8k-b, gsm8k-l, math-b, math-l, code-b, code-l) or YAML "
                        "file: distill, train, data and canvas sections (docs/distill.md)")
    p.add_argument("--dry-run", action="store_true",
                   help="print each stage's plan (rows, epochs, steps, teacher sub-steps, network calls) and stop")
    p.add_argument("--resume", choices=("auto", "never"), default="auto",
                   help="auto: finished stages are kept, the stage in progress continues from its newest checkpoint")
    add_restart_argument(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars (train.progress=false)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="config overrides, e.g. distill.rounds=[4,2,1] distill.steps_per_round=200 train.batch_size=64")


def _fail(exc: BaseException, args: argparse.Namespace) -> int:
    print(f"elfreg distill: error: {error_line(exc, args)}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run ``elfreg distill``; returns the exit code (2: bad input, 3: the loss diverged)."""
    from elfreg.configtools import ConfigError
    from elfreg.distill.config import load_distill_config
    from elfreg.train.trainer import TrainingDiverged

    overrides = list(args.overrides) + (["train.progress=false"] if args.no_progress else [])
    try:
        if args.teacher is not None:
            from elfreg.hubaccess import resolve_model_dir

            resolve_model_dir(args.teacher)   # a folder that is not a model: one line now, before any work
        cfg = load_distill_config(args.config, overrides, args.teacher, args.method)
    except (ConfigError, ValueError, OSError) as exc:
        return _fail(exc, args)
    if args.dry_run:
        from elfreg.distill.plan import distill_plan, format_distill_plan

        try:
            stages, source = distill_plan(cfg, args.teacher)
        except (ConfigError, ValueError, OSError) as exc:
            return _fail(exc, args)
        print(f"plan of {args.config or 'elfreg distill'} (dry run: nothing trained)")
        print(format_distill_plan(cfg, stages, source))
        return 0
    for flag, value in (("--teacher", args.teacher), ("--output", args.output)):
        if not value:
            print(f"elfreg distill: error: {flag} is required (unless --dry-run)", file=sys.stderr)
            return 2
    if not cfg.train.progress:
        quiet_loaders()
    from elfreg.distill.loop import distill

    t0 = time.perf_counter()
    try:
        res = distill(args.teacher, args.output, cfg, args.resume, restart=args.restart)
    except TrainingDiverged as exc:
        print(f"elfreg distill: {exc}", file=sys.stderr)
        return 3
    except (ConfigError, ValueError, OSError) as exc:
        return _fail(exc, args)
    rec = res.record
    stages = ", ".join(f"{s['student_steps']} steps: {s['optimiser_steps']:,} optimiser steps"
                       for s in res.summary["stages"])
    print(f"distilled {args.teacher} by {rec.method} ({stages}) in {time.perf_counter() - t0:.0f} s; model "
          f"{res.model_dir} (samples at NFE {rec.sampler['nfe']} by default: full-span, uniform grid); learning "
          f"curve {res.output / 'learning_curve.png'}; summary {res.output / 'summary.json'}")
    return 0


def register(subparsers) -> None:
    """Add the ``distill`` subcommand."""
    p = subparsers.add_parser("distill", help="distil a model into a few-step student (progressive distillation or "
                                              "a flow map); torchrun for several processes")
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """``python -m elfreg.distill``: the ``distill`` command alone (one line and exit code 130 on Ctrl-C)."""
    from elfreg.ctrlc import run_alone

    return run_alone("distill", add_arguments, run, argv)
