"""The ``elfreg`` command line: one subcommand per job, each registered by its own package."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Each module exposes register(subparsers); listed explicitly so a broken import is an error, not a missing command.
COMMAND_MODULES = (
    "elfreg.train.cli",
    "elfreg.sampling.cli",
    "elfreg.data.cli",
    "elfreg.diagnose.cli",
    "elfreg.demo.cli",
    "elfreg.eval.cli",
    "elfreg.lm_eval.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="elfreg", description="ELF-REG: continuous diffusion language models.")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "passthrough_args", False):
        args.passthrough = extra   # a command whose flags belong to another tool (elfreg lm-eval)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        # Bad input: one clear line, no traceback (set --log-level DEBUG for the traceback).
        logging.getLogger("elfreg").debug("traceback", exc_info=True)
        print(f"elfreg {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
