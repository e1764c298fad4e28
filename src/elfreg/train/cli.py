"""``elfreg train --config FILE [key=value ...]`` (also ``python -m elfreg.train ...`` under torchrun)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from elfreg.fingerprint import add_restart_argument


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="run YAML (configs/...)")
    p.add_argument("--output", help="run folder: checkpoints, metrics.jsonl, model/ (not needed with --dry-run)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (rows, tokens per row, overflow, epochs, steps, tokens, warm-up, the paper's "
                        "budget) without training: one tokenizer pass over the data, no model")
    p.add_argument("--resume", choices=("auto", "never"), default="auto",
                   help="auto: continue from the newest complete checkpoint in --output (default)")
    add_restart_argument(p)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. train.lr=1e-3")


def run(args: argparse.Namespace) -> int:
    from elfreg.configtools import ConfigError
    from elfreg.train.config import load_run_config
    from elfreg.train.plan import format_plan
    from elfreg.train.trainer import TrainingDiverged, plan_run, train

    try:
        cfg = load_run_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"elfreg train: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        try:
            plan = plan_run(cfg)
        except (ConfigError, FileNotFoundError, ValueError, OSError) as exc:
            print(f"elfreg train: {exc}", file=sys.stderr)
            return 2
        print(f"plan of {args.config} (dry run: nothing trained)")
        print(format_plan(plan))
        return 0
    if not args.output:
        print("elfreg train: --output is required (unless --dry-run)", file=sys.stderr)
        return 2
    try:
        res = train(cfg, Path(args.output), args.resume, restart=args.restart)
    except TrainingDiverged as exc:
        print(f"elfreg train: {exc}", file=sys.stderr)
        return 3
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"elfreg train: {exc}", file=sys.stderr)
        return 2
    if res.model_dir is not None:
        sm = res.summary
        epoch = f", epoch {sm['epoch']:.4g}" if "epoch" in sm else ""
        print(f"step {res.step}{epoch}: {sm['tokens_total']:,} tokens (prompt + response + EOS), overflow skipped "
              f"{sm['overflow_skipped']:,} of {sm['overflow_rows_read']:,} rows read; checkpoint "
              f"{res.last_checkpoint}, EMA model {res.model_dir}; summary {res.output / 'summary.json'}")
    return 0


def register(subparsers) -> None:
    """Add the ``train`` subcommand."""
    p = subparsers.add_parser("train", help="train an ELF / ELF-REG student (torchrun for several processes)")
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m elfreg.train")
    add_arguments(parser)
    return run(parser.parse_args(argv))
