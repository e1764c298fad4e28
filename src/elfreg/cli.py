"""The ``elfreg`` command line: one subcommand per job, each registered by its own package."""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import sys

from elfreg import __version__
from elfreg.cliargs import error_line, is_bad_input, walk_actions
from elfreg.ctrlc import INTERRUPTED, CtrlC

# Each command's module exposes register(subparsers); listed explicitly so a broken import is an error, not a missing
# command. A run imports its own command's module only: the others pull in matplotlib, lm-eval and more (seconds).
COMMANDS = {
    "train": "elfreg.train.cli",
    "distill": "elfreg.distill.cli",
    "generate": "elfreg.generate.cli",
    "data": "elfreg.data.cli",
    "diagnose": "elfreg.diagnose.cli",
    "demo": "elfreg.demo.cli",
    "eval": "elfreg.eval.cli",
    "lm-eval": "elfreg.lm_eval.cli",
    "serve": "elfreg.serve.cli",
    "push": "elfreg.push",
}

class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``elfreg generate: error: ...``), exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append its range to every numeric option's help (elfreg.bounds), and "(default: X)" to every option's help that
    has a default and does not already say it."""
    for _, action in walk_actions(parser):
        rng = getattr(action.type, "range", None)
        if rng is not None and action.help not in (None, argparse.SUPPRESS):
            each = "comma-separated, each " if getattr(action.type, "__name__", "") == "list" else ""
            action.help += f" ({each}{rng.text})".replace("%", "%%")
        default = action.default
        if (action.help in (None, argparse.SUPPRESS) or default in (None, False, argparse.SUPPRESS)
                or "default" in action.help.lower() or "%(default)" in action.help):
            continue
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        if isinstance(default, dict):
            shown = ",".join(f"{k}={v}" for k, v in default.items())
        action.help += f" (default: {shown.replace('%', '%%')})"


def build_parser(command: str | None = None, subcommand: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand, or with ``command``'s alone; a module whose ``register`` takes
    ``only`` is asked for ``subcommand``'s parser alone (``eval score`` does not build ``eval run``'s sampler flags,
    which import torch: seconds per scoring command)."""
    parser = _Parser(prog="elfreg", description="ELF-REG: continuous diffusion language models.")
    parser.add_argument("--version", action="version", version=f"elfreg {__version__}")
    parser.add_argument("--log-level", default="INFO", help="logging level: DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in COMMANDS.items():
        if command is None or name == command:
            register = importlib.import_module(module).register
            if subcommand is not None and "only" in inspect.signature(register).parameters:
                register(sub, only=subcommand)
            else:
                register(sub)
    _show_defaults(parser)
    return parser


def _command_index(argv: list[str]) -> int:
    """The index of the first word after the top-level options."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] == "--log-level" else 1
    return i


def _command(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (after the top-level options), if it is one."""
    i = _command_index(argv)
    return argv[i] if i < len(argv) and argv[i] in COMMANDS else None


def _subcommand(argv: list[str]) -> str | None:
    """The word after the command when it is not an option (``score`` in ``elfreg eval score ...``), if any."""
    i = _command_index(argv) + 1
    return argv[i] if _command(argv) is not None and i < len(argv) and not argv[i].startswith("-") else None


def _prog(args: argparse.Namespace) -> str:
    """The command as typed: ``elfreg eval run``, ``elfreg data decontaminate``, ``elfreg generate``."""
    sub = getattr(args, "eval_command", None) or getattr(args, "data_command", None)
    return f"elfreg {args.command}" + (f" {sub}" if sub else "")


def _resume_note(args: argparse.Namespace) -> str:
    """What an interrupted command kept and how to go on."""
    out = getattr(args, "out", None) or getattr(args, "output", None)
    return INTERRUPTED.get(args.command, "run the command again").format(out=out or "the output")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (130 after a Ctrl-C, whenever it comes: elfreg.ctrlc)."""
    argv = sys.argv[1:] if argv is None else argv
    command = _command(argv)
    parsed: list[argparse.Namespace] = []

    def interrupted() -> str:
        if not parsed:
            return f"elfreg{' ' + command if command else ''}: interrupted before it started; nothing was written"
        return f"{_prog(parsed[0])}: interrupted; {_resume_note(parsed[0])}"

    with CtrlC(interrupted) as ctrl:   # until ctrl.working, a Ctrl-C ends the process at once: nothing written
        try:
            parser = build_parser(command, _subcommand(argv))
            args, extra = parser.parse_known_args(argv)
            if getattr(args, "passthrough_args", False):
                args.passthrough = extra   # a command whose flags belong to another tool (elfreg lm-eval)
            elif extra:
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
        except SystemExit as exc:   # --help, --version and argument errors (already printed)
            return exc.code if isinstance(exc.code, int) else 2
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        parsed.append(args)
        ctrl.working = True
        try:
            return int(args.func(args) or 0)
        except KeyboardInterrupt:
            print(interrupted(), file=sys.stderr)
            return 130
        except Exception as exc:
            if ctrl.seen:   # the Ctrl-C's doing (a library turned it into another error)
                print(interrupted(), file=sys.stderr)
                return 130
            if not is_bad_input(exc):
                raise
            # Bad input: one clear line, no traceback (set --log-level DEBUG for the traceback).
            logging.getLogger("elfreg").debug("traceback", exc_info=True)
            print(f"{_prog(args)}: error: {error_line(exc, args)}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
