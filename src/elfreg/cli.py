"""The ``elfreg`` command line: one subcommand per job, each registered by its own package."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Each command's module exposes register(subparsers); listed explicitly so a broken import is an error, not a missing
# command. A run imports its own command's module only: the others pull in matplotlib, lm-eval and more (seconds).
COMMANDS = {
    "train": "elfreg.train.cli",
    "generate": "elfreg.sampling.cli",
    "data": "elfreg.data.cli",
    "diagnose": "elfreg.diagnose.cli",
    "demo": "elfreg.demo.cli",
    "eval": "elfreg.eval.cli",
    "lm-eval": "elfreg.lm_eval.cli",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand, or with ``command``'s alone."""
    parser = argparse.ArgumentParser(prog="elfreg", description="ELF-REG: continuous diffusion language models.")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(module).register(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (after the top-level options), if it is one."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] == "--log-level" else 1
    return argv[i] if i < len(argv) and argv[i] in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command(argv))
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
