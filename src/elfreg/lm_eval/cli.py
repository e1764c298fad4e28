"""``elfreg lm-eval``: lm-eval's own command line (every flag passed through) with the ``elfreg`` model registered.

``--model DIR`` names an elfreg model folder or hub id (it becomes ``--model elfreg --model_args pretrained=DIR``);
``--model elfreg --model_args pretrained=DIR,...`` works too. Everything else is lm-eval's: ``--tasks``,
``--num_fewshot``, ``--batch_size``, ``--output_path``, ``--log_samples``, ``--include_path``, ``--limit``, ...
"""

from __future__ import annotations

import sys
from typing import Any

HELP = __doc__


def register(subparsers: Any) -> None:
    """Add ``lm-eval``; its arguments are lm-eval's and are parsed by lm-eval (see elfreg.cli.main)."""
    p = subparsers.add_parser("lm-eval", help="evaluate an elfreg model with lm-evaluation-harness (its flags pass)",
                              description=HELP, add_help=False)
    p.set_defaults(func=lambda args: main(list(getattr(args, "passthrough", []))), passthrough_args=True)


def lm_eval_argv(argv: list[str]) -> list[str]:
    """lm-eval's argv: ``--model DIR`` becomes ``--model elfreg`` with ``pretrained=DIR`` first in --model_args."""
    argv = list(argv)
    model, model_at, args_at = None, None, None
    i = 0
    while i < len(argv):
        a = argv[i]
        for flag, setter in (("--model", "model"), ("--model_args", "args")):
            if a == flag and i + 1 < len(argv):
                if setter == "model":
                    model, model_at = argv[i + 1], i + 1
                else:
                    args_at = i + 1
            elif a.startswith(flag + "="):
                raise ValueError(f"write {flag} VALUE, not {flag}=VALUE")
        i += 1
    if "--device" not in argv:   # lm-eval's own default is cuda:0, which a machine without CUDA cannot use
        import torch

        argv += ["--device", "cuda" if torch.cuda.is_available() else "cpu"]
    if model is None:
        raise ValueError("--model: give an elfreg model folder or hub id (or --model elfreg with "
                         "--model_args pretrained=DIR)")
    if model != "elfreg":
        argv[model_at] = "elfreg"
        if args_at is None:
            argv += ["--model_args", f"pretrained={model}"]
        elif "pretrained=" in argv[args_at]:
            raise ValueError(f"--model {model} and --model_args pretrained=... both name the model; give one")
        else:
            argv[args_at] = f"pretrained={model}," + argv[args_at] if argv[args_at] else f"pretrained={model}"
    return argv


def main(argv: list[str]) -> int:
    """Run lm-eval's command line on ``argv`` with the elfreg model type; returns an exit code."""
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: elfreg lm-eval --model DIR [--model_args k=v,...] --tasks T [lm-eval flags]\n\n{HELP}\n"
              "lm-eval's flags: python -m lm_eval run --help; elfreg's model_args: docs/lm_eval.md")
        return 0
    try:
        import lm_eval.__main__ as lm_main

        import elfreg.lm_eval  # noqa: F401  (registers the "elfreg" model type)
    except ImportError:
        from elfreg.lm_eval import INSTALL_HINT

        print(f"elfreg lm-eval: error: {INSTALL_HINT}", file=sys.stderr)
        return 2
    try:
        args = lm_eval_argv(argv[1:] if argv[0] == "run" else argv)
    except ValueError as exc:
        print(f"elfreg lm-eval: error: {exc}", file=sys.stderr)
        return 2
    saved = sys.argv
    sys.argv = ["elfreg lm-eval", "run", *args]
    try:
        lm_main.cli_evaluate()
    except SystemExit as exc:  # argparse errors and --help inside lm-eval
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    finally:
        sys.argv = saved
    return 0
