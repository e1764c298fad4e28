"""`elfreg generate`: prompts JSONL (a file, or stdin with ``--prompts -``) or ``--prompt TEXT`` -> one results line per
sample, into ``--out`` (resumable, sharded over torch.distributed ranks) or to stdout (JSONL, or the answers' text)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

import torch

from elfreg import loading
from elfreg.cliargs import error_line, input_file, model_ref, output_file
from elfreg.fingerprint import add_restart_argument
from elfreg.sampling.files import PromptFile, inline_prompts, read_prompts
from elfreg.sampling.flags import add_sampler_arguments, generation_job
from elfreg.sampling.generate import run_generation
from elfreg.sampling.watch import EVERY
from elfreg.threads import add_threads_argument, set_inference_threads

OUTPUT_FORMATS = ("text", "jsonl")


def register(subparsers: Any) -> None:
    """Add the `generate` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("generate", help="generate responses with an ELF-REG model (docs/method.md §5)",
                              description=__doc__)
    p.add_argument("--model", required=True, type=model_ref,
                   help="model folder or hub id (ElfModel.from_pretrained)")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--prompts", type=prompts_file,
                       help="JSONL file, one object with a 'prompt' string per line; '-' reads the lines from stdin")
    given.add_argument("--prompt", action="append", metavar="TEXT",
                       help="one prompt given inline (repeat for more): prompt i of the run is the i-th --prompt")
    p.add_argument("--prompt-field", default="prompt", help="JSON field holding the prompt text")
    p.add_argument("--out", default=None, type=output_file,
                   help="results JSONL file (appended; existing samples are skipped; the run resumes). Without it, "
                        "the results go to stdout (see --format) and logs to stderr")
    p.add_argument("--format", default=None, choices=OUTPUT_FORMATS, dest="output_format",
                   help="stdout without --out: text (each answer, then a newline; the default with --prompt) or "
                        "jsonl (one result record per line, as --out writes them; the default with --prompts)")
    p.add_argument("--show-steps", nargs="?", const=1, default=None, type=EVERY.arg, metavar="K",
                   help="watch the answers being made: each sample's text at every K-th denoising step (default 1) "
                        "on stderr, redrawn in place on a terminal, one line per view otherwise; the answers do not "
                        "change, and its decoder calls are not part of the NFE")
    add_sampler_arguments(p)
    add_threads_argument(p)
    add_restart_argument(p)
    p.set_defaults(func=cmd_generate)


def prompts_file(text: str) -> str:
    """``--prompts``: an existing file (cliargs.input_file), or ``-`` for stdin."""
    return text if text == "-" else input_file(text)


def prompts_of(args: argparse.Namespace) -> PromptFile:
    """The run's prompts: the --prompt texts, else the --prompts file (or stdin)."""
    if getattr(args, "prompt", None):
        return inline_prompts(args.prompt)
    return read_prompts(args.prompts, args.prompt_field)


def cmd_generate(args: argparse.Namespace,
                 load: Callable[[str, torch.device], loading.LoadedModel] = loading.load_elf_model) -> int:
    """Run `elfreg generate`; returns an exit code (2 for bad input, found before any generation)."""
    def bad_input(exc: Exception) -> int:
        print(f"elfreg generate: error: {error_line(exc, args)}", file=sys.stderr)
        return 2

    try:
        job = generation_job(args)
        prompts = prompts_of(args)
    except (ValueError, FileNotFoundError) as exc:
        return bad_input(exc)
    set_inference_threads(getattr(args, "threads", None))
    return run_generation(job, prompts, load, bad_input)
