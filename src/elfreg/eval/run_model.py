"""`elfreg eval run`: generate with an elfreg model on a benchmark, then score with the same protocol as `score`.

The run folder holds prompts.jsonl (the benchmark's questions; the model's saved prompt template is put around
each at generation and recorded with every sample as ``prompt_template``), generations.jsonl (one record per sample
with every sampler setting, resumable), samples.jsonl (the standard sample file: ``solution`` for code), results.jsonl,
summary.json and summary.md. Re-running the same command resumes:
samples already generated are not generated again, problems already scored are not scored again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from elfreg.atomic import atomic_write_text
from elfreg.sampling.answers import answer_for
from elfreg.sampling.config import w_for_task
from elfreg.sampling.exit import nfe_summary

from .codecheck import TimeRule
from .datasets import default_registry
from .completions import Completion
from .protocol import parse_ks, protocol_names, resolve_settings
from .report import markdown_table, write_reports
from .sandbox import ISOLATION_CHOICES, Sandbox, SandboxConfig
from .scoring import ScoreOptions, score_completions

# The paper's inference guidance scale by benchmark kind (spec §5): GSM8K 3, MATH and code 2.
W_TASK = {"gsm8k": "gsm8k", "math": "math", "code": "code", "choice": "math", "exact": "gsm8k"}


def register_run(sub) -> None:
    """Add `eval run` to the `eval` subparsers."""
    from elfreg.sampling.cli import add_sampler_arguments

    p = sub.add_parser("run", help="generate with an elfreg model on a benchmark, then score it")
    p.add_argument("--model", required=True, help="model folder or hub id (ElfModel.from_pretrained)")
    p.add_argument("--benchmark", required=True, help=f"one of {', '.join(default_registry().names())}")
    p.add_argument("--data", default=None, help="benchmark file (default: the copy shipped with elfreg)")
    p.add_argument("--out", required=True, help="run folder")
    p.add_argument("--limit", type=int, default=None, help="only the first N problems (reported as a subset)")
    p.add_argument("--workers", type=int, default=2, help="scoring workers")
    p.add_argument("--isolation", default="auto", choices=list(ISOLATION_CHOICES))
    p.add_argument("--protocol", default="none",
                   help=f"one of {', '.join(protocol_names())}: per-benchmark sampler, NFE, rho, w, samples and "
                        "pass@k (docs/evaluation.md); any flag given on the command line overrides it")
    p.add_argument("--k", default=None,
                   help="pass@k to report, e.g. 1,4,10 (each <= --samples; default: the paper's ks that fit)")
    add_sampler_arguments(p)
    # None = "not given", so a protocol can fill it and the report can say where each value came from.
    p.set_defaults(func=cmd_eval_run, sampler=None, nfe=None, rho=None, samples=None)


def write_prompts(bench, problems, path: Path) -> None:
    """The benchmark's questions (the model's template is applied at generation), one JSON line each with the task id."""
    lines = [json.dumps({"id": p.task_id, "prompt": bench.format_prompt(p)}) for p in problems]
    atomic_write_text(path, "\n".join(lines) + "\n")


def completions_from_generations(path: Path) -> list[Completion]:
    """Generation records -> samples keyed by (task id, sample index); elfreg's models answer code prompts
    with a whole program, so code samples are ``solution`` (self-contained) samples."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                rec = json.loads(raw)
                out.append(Completion(task_id=str(rec["prompt_id"]), sample=int(rec["sample_index"]),
                                      completion=rec["response"], line=n))
    return out


def write_samples(bench, comps: list[Completion], path: Path) -> None:
    """The samples in the standard format ``eval score`` and EvalPlus read: ``solution`` for code, else
    ``completion`` (written atomically)."""
    field = "solution" if bench.kind == "code" else "completion"
    lines = [json.dumps({"task_id": c.task_id, field: c.completion, "sample": c.sample}) for c in comps]
    atomic_write_text(path, "\n".join(lines) + "\n")


def generation_settings(path: Path) -> dict:
    """Sampler settings shared by every record of a generations file (recorded in the summary)."""
    keys = ("sampler", "nfe", "rho", "grid", "p", "eta", "w", "sigma", "t_eps", "p_mean", "p_std", "drop_reg", "seed",
            "check_every", "patience", "min_nfe", "extract", "prompt_format", "prompt_template")
    with open(path, encoding="utf-8") as f:
        first = json.loads(f.readline())
    return {k: first.get(k) for k in keys}


def generation_nfe(path: Path) -> dict:
    """NFE each sample spent (check decodes of the adaptive exit included): mean, range and histogram."""
    with open(path, encoding="utf-8") as f:
        return nfe_summary([json.loads(raw)["nfe_spent"] for raw in f if raw.strip()])


def cmd_eval_run(args: argparse.Namespace) -> int:
    """Entry point of `elfreg eval run`; returns an exit code."""
    from elfreg.sampling.cli import cmd_generate

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit: need >= 1, got {args.limit}")
    registry = default_registry()
    if args.benchmark not in registry.names():
        raise ValueError(f"--benchmark: unknown benchmark {args.benchmark!r}; one of {', '.join(registry.names())}")
    resolved = resolve_settings(args.protocol, args.benchmark,
                                {k: getattr(args, k, None) for k in ("sampler", "nfe", "rho", "samples", "w", "task")}
                                | {"ks": parse_ks(args.k) if args.k is not None else None})
    bench = registry.load(args.benchmark, args.data)
    if resolved.values["w"] is None:  # a w preset by name (--task, else the benchmark kind's): record the number
        task = resolved.values["task"] or W_TASK[bench.kind]
        resolved = dataclasses.replace(resolved, values={**resolved.values, "task": task, "w": w_for_task(task)})
    problems = bench.problems[: args.limit] if args.limit else bench.problems
    # the adaptive exit rule watches the answer the benchmark scores (code: the whole response); every sampler
    # setting is checked before any work, errors naming the field
    args.extract = args.extract or answer_for(args.benchmark, bench.kind)
    from elfreg.sampling.cli import sampler_config_from_args

    sampler_config_from_args(argparse.Namespace(**{**vars(args), **resolved.values}))
    # Before any generation: code scoring refuses to run without isolation (unless --isolation none).
    sandbox = Sandbox(SandboxConfig(isolation=args.isolation)) if bench.kind == "code" else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts_path, gens_path = out / "prompts.jsonl", out / "generations.jsonl"
    write_prompts(bench, problems, prompts_path)
    for key in ("sampler", "nfe", "rho", "samples", "w", "task"):
        setattr(args, key, resolved.values[key])
    gen_args = argparse.Namespace(**vars(args), prompts=str(prompts_path), prompt_field="prompt")
    gen_args.out = str(gens_path)
    code = cmd_generate(gen_args)
    if code != 0:
        if sandbox is not None:
            sandbox.close()
        return code
    comps = completions_from_generations(gens_path)
    write_samples(bench, comps, out / "samples.jsonl")
    opts = ScoreOptions(workers=args.workers, allow_subset=args.limit is not None, time_rule=TimeRule(),
                        progress=not args.no_progress, ks=resolved.values["ks"])
    try:
        summary = score_completions(bench, comps, out / "results.jsonl", opts, sandbox)
    finally:
        if sandbox is not None:
            sandbox.close()
    summary.update(model=str(args.model), generation=generation_settings(gens_path), nfe=generation_nfe(gens_path),
                   samples_per_problem=args.samples, problems=len(problems), evaluation=resolved.as_dict())
    summary["pass_at_k"].update(dropped_ks=list(resolved.ks_dropped), ks_from=resolved.origin["ks"])
    write_reports(summary, out)
    print(markdown_table(summary))
    return 0
