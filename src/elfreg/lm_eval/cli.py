"""``elfreg lm-eval``: lm-eval's own command line (every flag passed through) with the ``elfreg`` model registered.

``--model DIR`` names an elfreg model folder or hub id (it becomes ``--model elfreg --model_args pretrained=DIR``);
``--model elfreg --model_args pretrained=DIR,...`` works too. Everything else is lm-eval's: ``--tasks``,
``--num_fewshot``, ``--batch_size``, ``--output_path``, ``--log_samples``, ``--include_path``, ``--limit``, ...
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from elfreg.cliargs import device_problem, model_ref

HELP = __doc__
log = logging.getLogger(__name__)
# Words of the errors datasets / huggingface_hub raise when a dataset cannot be fetched from the hub.
_NO_NETWORK = ("Couldn't reach", "offline mode", "OfflineModeIsEnabled", "LocalEntryNotFoundError",
               "Name or service not known", "Temporary failure in name resolution", "Max retries exceeded",
               "Failed to resolve", "Connection refused", "Network is unreachable")


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
        try:
            model_ref(model)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"--model: {exc}") from None
        argv[model_at] = "elfreg"
        if args_at is None:
            argv += ["--model_args", f"pretrained={model}"]
        elif "pretrained=" in argv[args_at]:
            raise ValueError(f"--model {model} and --model_args pretrained=... both name the model; give one")
        else:
            argv[args_at] = f"pretrained={model}," + argv[args_at] if argv[args_at] else f"pretrained={model}"
    return argv


def _check_device(text: str) -> None:
    """ValueError for a --device naming CUDA where there is none (lm-eval would fail deep inside, after loading)."""
    problem = device_problem(text)
    if problem:
        raise ValueError(f"--device {text}: {problem}; use --device cpu, or leave --device out")


def _flag(argv: list[str], name: str) -> str | None:
    """The value of lm-eval flag ``name`` in ``argv`` (``--name V``), or None."""
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def _go_offline_if_unreachable() -> None:
    """Without a reachable hub, read datasets from the local cache at once (HF_DATASETS_OFFLINE) instead of ~25 s
    of retries per file before the same failure; set before lm-eval imports datasets, which reads it then."""
    if "HF_DATASETS_OFFLINE" in os.environ or "datasets" in sys.modules:
        return
    from elfreg.hubaccess import hub_unreachable

    reason = hub_unreachable()
    if reason:
        log.warning("Hugging Face hub unreachable (%s): datasets are read from the local cache only", reason)
        os.environ["HF_DATASETS_OFFLINE"] = "1"


def no_network_message(exc: BaseException, tasks: str | None) -> str | None:
    """One line for a task dataset that could not be downloaded (no network), or None for any other error."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain)
    if not isinstance(exc, (OSError, ValueError)) or not any(s in text for s in _NO_NETWORK):
        return None
    reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
    return (f"the dataset of task(s) {tasks or '?'} could not be downloaded (no network: {reason}); download it once "
            "where there is network (it stays in the Hugging Face cache) and set HF_DATASETS_OFFLINE=1 here, or point "
            "the task at a local copy: a task YAML with dataset_path: json and dataset_kwargs: {data_files: ...}, "
            "passed with --include_path DIR (docs/lm_eval.md, 'Offline')")


def main(argv: list[str]) -> int:
    """Run lm-eval's command line on ``argv`` with the elfreg model type; returns an exit code."""
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: elfreg lm-eval --model DIR [--model_args k=v,...] --tasks T [lm-eval flags]\n\n{HELP}\n"
              "lm-eval's flags: python -m lm_eval run --help; elfreg's model_args: docs/lm_eval.md")
        return 0
    _go_offline_if_unreachable()
    try:
        import lm_eval.__main__ as lm_main

        import elfreg.lm_eval  # noqa: F401  (registers the "elfreg" model type)
    except ImportError:
        from elfreg.lm_eval import INSTALL_HINT

        print(f"elfreg lm-eval: error: {INSTALL_HINT}", file=sys.stderr)
        return 2
    try:
        args = lm_eval_argv(argv[1:] if argv[0] == "run" else argv)
        _check_device(_flag(args, "--device") or "")
    except ValueError as exc:
        print(f"elfreg lm-eval: error: {exc}", file=sys.stderr)
        return 2
    saved = sys.argv
    sys.argv = ["elfreg lm-eval", "run", *args]
    try:
        lm_main.cli_evaluate()
    except SystemExit as exc:  # argparse errors and --help inside lm-eval
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    except Exception as exc:
        msg = no_network_message(exc, _flag(args, "--tasks"))
        if msg is None:
            raise
        log.debug("traceback", exc_info=True)
        print(f"elfreg lm-eval: error: {msg}", file=sys.stderr)
        return 2
    finally:
        sys.argv = saved
    return 0
