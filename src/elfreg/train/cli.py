"""``elfreg train --config FILE [key=value ...]`` (also ``python -m elfreg.train ...`` under torchrun)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="run YAML (configs/...)")
    p.add_argument("--output", required=True, help="run folder: checkpoints, metrics.jsonl, model/")
    p.add_argument("--resume", choices=("auto", "never"), default="auto",
                   help="auto: continue from the newest complete checkpoint in --output (default)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. train.lr=1e-3")


def run(args: argparse.Namespace) -> int:
    from elfreg.configtools import ConfigError
    from elfreg.train.config import load_run_config
    from elfreg.train.trainer import TrainingDiverged, train

    try:
        cfg = load_run_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"elfreg train: {exc}", file=sys.stderr)
        return 2
    try:
        res = train(cfg, Path(args.output), args.resume)
    except TrainingDiverged as exc:
        print(f"elfreg train: {exc}", file=sys.stderr)
        return 3
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"elfreg train: {exc}", file=sys.stderr)
        return 2
    if res.model_dir is not None:
        print(f"step {res.step}: checkpoint {res.last_checkpoint}, EMA model {res.model_dir}")
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
