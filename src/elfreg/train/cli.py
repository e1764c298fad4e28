"""``elfreg train --config FILE [key=value ...]`` (also ``python -m elfreg.train ...`` under torchrun)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from elfreg.cliargs import config_placeholder, device_problem, error_line, output_dir, quiet_loaders
from elfreg.configfiles import config_arg
from elfreg.fingerprint import add_restart_argument


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train`` flags (shared by ``elfreg train`` and ``python -m elfreg.train``)."""
    p.add_argument("--config", required=True, type=config_arg,
                   help="run YAML: a file, or a shipped config by name (tiny-smoke, gsm8k/elf-reg-b, ...)")
    p.add_argument("--output", type=output_dir,
                   help="run folder: checkpoints, metrics.jsonl, model/ (not needed with --dry-run)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (rows, tokens per row, overflow, epochs, steps, tokens, warm-up, the paper's "
                        "budget) without training: one tokenizer pass over the data, no model")
    p.add_argument("--resume", choices=("auto", "never"), default="auto",
                   help="auto: continue from the newest complete checkpoint in --output (default)")
    add_restart_argument(p)
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bars (the same as train.progress=false); metrics.jsonl is written as always")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. train.lr=1e-3")


def _fail(exc: BaseException, args: argparse.Namespace, cfg=None) -> int:
    """Print the one line for bad input; the config's local data files are among the files it may name."""
    paths = [s["path"] for s in cfg.data.sources if s.get("path")] if cfg is not None else []
    print(f"elfreg train: error: {error_line(exc, argparse.Namespace(**vars(args), data_paths=paths))}",
          file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run ``elfreg train``; returns the exit code (2: bad input, 3: training diverged)."""
    from elfreg.configtools import ConfigError, to_dict
    from elfreg.train.config import load_run_config
    from elfreg.train.plan import format_plan
    from elfreg.train.setup import plan_run
    from elfreg.train.trainer import TrainingDiverged, train

    try:
        cfg = load_run_config(args.config, args.overrides + (["train.progress=false"] if args.no_progress else []))
        unreplaced = config_placeholder(to_dict(cfg))
        if unreplaced:
            raise ConfigError(f"{args.config}: {unreplaced}")
        no_cuda = device_problem(cfg.train.device)
        if no_cuda:
            raise ConfigError(f"train.device = {cfg.train.device}: {no_cuda}; set train.device=cpu (or auto)")
    except (ConfigError, ValueError, OSError) as exc:
        return _fail(exc, args)
    if args.dry_run:
        try:
            plan = plan_run(cfg)
        except (ConfigError, FileNotFoundError, ValueError, OSError) as exc:
            return _fail(exc, args, cfg)
        print(f"plan of {args.config} (dry run: nothing trained)")
        print(format_plan(plan))
        return 0
    if not args.output:
        print("elfreg train: --output is required (unless --dry-run)", file=sys.stderr)
        return 2
    if not cfg.train.progress:
        quiet_loaders()
    t0 = time.perf_counter()
    try:
        res = train(cfg, Path(args.output), args.resume, restart=args.restart)
    except TrainingDiverged as exc:
        print(f"elfreg train: {exc}", file=sys.stderr)
        return 3
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        return _fail(exc, args, cfg)
    if res.model_dir is not None:
        sm = res.summary
        epoch = f", epoch {sm['epoch']:.4g}" if "epoch" in sm else ""
        print(f"step {res.step}{epoch}: {sm['tokens_total']:,} tokens (prompt + response + EOS), overflow skipped "
              f"{sm['overflow_skipped']:,} of {sm['overflow_rows_read']:,} rows read; checkpoint "
              f"{res.last_checkpoint}, EMA model {res.model_dir}; summary {res.output / 'summary.json'}")
        print(closing_line(res.output, time.perf_counter() - t0, [h["loss"] for h in res.history]))
        if "validation" in sm:
            print(validation_line(sm["validation"]))
    return 0


def closing_line(output: Path, seconds: float, losses: list[float] = ()) -> str:
    """The run's last line: its final loss (``losses``, one per step this command ran: elfreg.card.final_loss, the
    value the model card records), the first logged loss, this command's wall time and the learning-curve PNG (drawn
    here from metrics.jsonl)."""
    from elfreg.card import final_loss
    from elfreg.train.metrics import plot_learning_curve, read_metrics

    records = read_metrics(output / "metrics.jsonl")
    png = plot_learning_curve(output)
    value, steps = final_loss(list(losses))
    loss = (f"final loss {value:.4g} (mean of the last {steps} steps to step {records[-1]['step']}; first logged "
            f"{records[0]['loss']:.4g} at step {records[0]['step']})" if records and value is not None
            else "no loss logged")
    return f"{loss}; {seconds:.0f} s; learning curve {png if png else '- (nothing logged)'}"


def validation_line(v: dict) -> str:
    """The summary's validation (data.validation): the last point, and the best model when train.keep_best kept
    one."""
    acc = "accuracy -" if v.get("val_acc") is None else f"accuracy {v['val_acc']:.1%}"
    skipped = f" ({v['skipped_rows']} over the canvas left out)" if v.get("skipped_rows") else ""
    loss = "-" if v.get("val_loss") is None else f"{v['val_loss']:.4g}"
    if v.get("val_loss") is not None and v.get("val_loss_rows", v["val_rows"]) < v["val_rows"]:
        loss += f" (on the {v['val_loss_rows']} rows whose responses the head can write)"
    line = f"validation at step {v['step']}: {acc} of {v['val_rows']} held-out rows{skipped}, loss {loss}"
    best = v.get("best")
    if best:
        line += f"; best {best['val_acc']:.1%} at step {best['step']}: {best['model']}"
    return line


def register(subparsers) -> None:
    """Add the ``train`` subcommand."""
    p = subparsers.add_parser("train", help="train an ELF / ELF-REG student (torchrun for several processes)")
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """``python -m elfreg.train``: the ``train`` command alone (one line and exit code 130 on Ctrl-C)."""
    from elfreg.ctrlc import run_alone

    return run_alone("train", add_arguments, run, argv)
