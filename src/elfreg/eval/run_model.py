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
import sys
from pathlib import Path

from elfreg.atomic import atomic_write_text
from elfreg.bounds import COUNT
from elfreg.cliargs import error_line, input_file, model_ref, output_dir
from elfreg.fingerprint import FOLDER_FILE, add_restart_argument, claim, model_identity, move_aside, note
from elfreg.resources import check_fits, sampler_grid_need
from elfreg.tasks.answers import is_number
from elfreg.tasks.registry import KIND_TASKS, extract_for
from elfreg.threads import add_threads_argument, set_inference_threads

from ..sandbox import ISOLATION_CHOICES, Sandbox, SandboxConfig, TimeRule
from .completions import MAX_COMPLETION_BYTES_RANGE, Completion
from .custom import CUSTOM, load_for_eval
from .protocol import parse_ks, protocol_names, resolve_runs
from .registry import default_registry
from .report import combined_markdown, markdown_table, write_reports
from .scoring import TEXT_LIMIT, TIME_RULE_RANGES, ScoreOptions, score_completions, workers_range

# The task whose w preset a benchmark kind uses (elfreg.tasks.registry): GSM8K 3, MATH and code 2 (spec §5); multiple
# choice (MMLU) 2, a choice (the seeds give none; protocol.SRC["mmlu_w"]).
W_TASK = KIND_TASKS


def add_code_scoring_arguments(p: argparse.ArgumentParser) -> None:
    """Scoring flags shared by `eval score` and `eval run`: the per-sample text limit, the code time rule and the
    helper-tolerant alias column."""
    p.add_argument("--text-limit", type=TEXT_LIMIT.arg, default=ScoreOptions.text_limit_s,
                   help="seconds of answer extraction, math-verify and code preparation per sample, at most; a "
                        f"sample past it is scored wrong (default {ScoreOptions.text_limit_s:g})")
    p.add_argument("--min-time", type=TIME_RULE_RANGES["min_time_s"].arg, default=TimeRule.min_time_s,
                   help=f"per-test time floor in seconds (default {TimeRule.min_time_s:g}: elfreg's deliberate "
                        "choice, docs/evaluation.md 'Time limits'; EvalPlus 0.3.1's floor is 1.0 "
                        "(DEFAULT_MIN_TIME_LIMIT): --min-time 1 gives its verdicts)")
    p.add_argument("--time-factor", type=TIME_RULE_RANGES["factor"].arg, default=TimeRule.factor,
                   help="limit = max(min-time, time-factor x the reference solution's time) (EvalPlus: 4)")
    p.add_argument("--sample-cap", type=TIME_RULE_RANGES["sample_cap_s"].arg, default=TimeRule.sample_cap_s,
                   help="seconds per sample and test set, at most")
    p.add_argument("--max-completion-bytes", type=MAX_COMPLETION_BYTES_RANGE.arg,
                   default=ScoreOptions.max_completion_bytes,
                   help="a sample longer than this (UTF-8 bytes) is scored wrong (code: fail) with no text work, its "
                        f"row saying why (default {ScoreOptions.max_completion_bytes:,}: no model's answer comes "
                        "near); a completions line may be 6x this plus 64 KiB")
    p.add_argument("--alias-helpers", action="store_true",
                   help="also score elfreg's helper-tolerant alias reading (a helper + the solution is aliased) in "
                        "its own column; never the paper's number (its rule: exactly one top-level function)")


def time_rule(args: argparse.Namespace) -> TimeRule:
    """The time rule of the parsed code-scoring flags."""
    return TimeRule(args.min_time, args.time_factor, args.sample_cap)


def _data_identity(bench) -> str:
    """The benchmark file: its pinned version when it is the shipped copy, else its sha256."""
    return bench.data_version or bench.source_sha256


def _verdict_settings(args: argparse.Namespace, bench) -> dict:
    """The scoring flags that change verdicts: the per-sample text limit and completion size; for code, the time
    rule and memory limit."""
    text = {"text_limit": args.text_limit, "max_completion_bytes": args.max_completion_bytes}
    if bench.kind == "gsm8k" and any(not is_number(p.answer or "") for p in bench.problems):
        # golds that are not numbers are compared as the final line's text (elfreg.tasks.answers.verdict); a folder
        # scored before that compared them as numbers (always wrong) and is refused, not silently reused
        text["word_answers"] = "final-line text"
    if bench.kind != "code":
        return text
    return {**text, "min_time": args.min_time, "time_factor": args.time_factor,
            "sample_cap": args.sample_cap, **({"memory_gb": args.memory_gb} if hasattr(args, "memory_gb") else {})}


def score_settings(args: argparse.Namespace, bench, completions_sha256: str) -> dict:
    """The fingerprint of an `eval score` folder: benchmark, its data, the completions file (the sha256 of the
    bytes read, so the file is read once), verdict flags (not workers, progress, ks or isolation: each row records
    how it ran, and the report reads the rows)."""
    return {"benchmark": bench.name, "data": _data_identity(bench), "completions": completions_sha256,
            **_verdict_settings(args, bench)}


def claim_score_folder(args: argparse.Namespace, bench, completions_sha256: str) -> None:
    """Refuse an `eval score --out` made with other settings (RunMismatch); ``--restart`` moves its files aside."""
    out = Path(args.out)
    names = ("results.jsonl", "summary.json", "summary.md", FOLDER_FILE)
    claim(out / FOLDER_FILE, score_settings(args, bench, completions_sha256), [out / "results.jsonl"], args.restart,
          aside=[out / n for n in names])


def run_settings(args: argparse.Namespace, bench, cfg, model_id: str) -> dict:
    """The fingerprint of one `eval run` folder: model, benchmark and data, --limit and --long-prompts, every
    sampler setting, batch invariance, the verdict flags. Not --samples (more samples extend a run: noise is f(seed,
    prompt, sample)), --k, workers or device; nor the batch size while outputs are batch-invariant."""
    from elfreg.sampling.invariance import invariance_settings, resolve_batch_invariant, scheme_for

    device = _generation_device(args)
    invariant = resolve_batch_invariant(getattr(args, "batch_invariant", None), device)
    return {"model": model_id, "benchmark": bench.name, "data": _data_identity(bench), "limit": args.limit,
            "long_prompts": args.long_prompts, "prompt_format": getattr(args, "prompt_format", "template"),
            **dataclasses.asdict(cfg), "sigma": args.sigma, "precision": getattr(args, "precision", "auto"),
            **_verdict_settings(args, bench),
            **invariance_settings(invariant, getattr(args, "batch_size", None), scheme_for(invariant, device))}


def claim_run_folders(args: argparse.Namespace, bench, runs: list, cfgs: dict, out: Path, write: bool) -> None:
    """Check every run folder's fingerprint (RunMismatch naming what differs), and with ``write`` record it;
    ``--restart`` moves the whole --out folder aside first. ``cfgs``: each run's SamplerConfig, by label."""
    if args.restart and not write:
        move_aside([out])
    model_id = model_identity(args.model)
    for resolved in runs:
        folder = out / resolved.label if resolved.label else out
        claim(folder / FOLDER_FILE, run_settings(args, bench, cfgs[resolved.label], model_id),
              [folder / "generations.jsonl", folder / "results.jsonl"], write=write)


def register_run(sub) -> None:
    """Add `eval run` to the `eval` subparsers."""
    from elfreg.sampling.flags import add_sampler_arguments

    p = sub.add_parser("run", help="generate with an elfreg model on a benchmark, then score it")
    p.add_argument("--model", required=True, type=model_ref, help="model folder or hub id (ElfModel.from_pretrained)")
    p.add_argument("--benchmark", required=True,
                   help=f"one of {', '.join(default_registry().names())}, or custom: your own --data file, scored "
                        "by the rules of --task's benchmark (docs/evaluation.md, 'Your own test file')")
    p.add_argument("--data", default=None, type=input_file,
                   help="benchmark file (default: the copy shipped with elfreg); a file that is not the benchmark's "
                        "pinned copy (sha256) is scored by its rules and recorded as custom, by its name and sha256")
    p.add_argument("--out", required=True, type=output_dir,
                   help="run folder: prompts, generations, samples, results, summary (resumed when it exists)")
    p.add_argument("--limit", type=COUNT.arg, default=None, help="only the first N problems (reported as a subset)")
    p.add_argument("--workers", type=workers_range().arg, default=2, help="scoring workers")
    p.add_argument("--isolation", default="auto", choices=list(ISOLATION_CHOICES),
                   help="code sandbox, as eval score's --isolation")
    p.add_argument("--protocol", default="none",
                   help=f"one of {', '.join(protocol_names())}: per-benchmark sampling runs (sampler, NFE, rho, w, "
                        "samples) and pass@k (docs/evaluation.md); any flag given on the command line overrides it "
                        "in every run. MATH-500 under 'paper' is two runs (128 NFE: pass@1; 64 NFE: pass@10/16), "
                        "each in its own subfolder")
    p.add_argument("--k", default=None,
                   help="pass@k to report, e.g. 1,4,10 (each <= --samples; default: the paper's ks that fit)")
    p.add_argument("--long-prompts", choices=("error", "skip"), default="error",
                   help="a question longer than the model's prompt limit: error (default, before any generation), or "
                        "skip: not generated, scored wrong and counted in the report (MMLU has questions of ~1,000 "
                        "tokens)")
    add_code_scoring_arguments(p)
    add_sampler_arguments(p)
    add_threads_argument(p)
    add_restart_argument(p)
    # None = "not given", so a protocol can fill it and the report can say where each value came from.
    p.set_defaults(func=cmd_eval_run, sampler=None, nfe=None, rho=None, samples=None)
    for action in p._actions:
        if action.dest in ("sampler", "nfe", "rho", "samples"):
            action.help += " (default: the --protocol run's, else as elfreg generate)"
        elif action.dest == "w":
            action.help = ("guidance scale w (default: the --task preset, else the --protocol run's, else the "
                           "benchmark kind's preset: gsm8k and exact 3, math, code and choice 2)")


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
            "check_every", "patience", "min_nfe", "extract", "prompt_format", "prompt_template", "precision",
            "precision_used", "bf16_time_ratio")
    with open(path, encoding="utf-8") as f:
        first = json.loads(f.readline())
    return {k: first.get(k) for k in keys}


def generation_nfe(path: Path) -> dict:
    """NFE each sample spent (check decodes of the adaptive exit included): mean, range and histogram."""
    from elfreg.sampling.exit import nfe_summary  # here: the sampling package loads torch, which scoring never needs

    with open(path, encoding="utf-8") as f:
        return nfe_summary([json.loads(raw)["nfe_spent"] for raw in f if raw.strip()])


def _cached_loader():
    """The commands' model loader (:func:`elfreg.loading.load_elf_model`), loading each (model, device, prompt format) once: the runs of one
    protocol entry share the model."""
    from elfreg.loading import load_elf_model

    cache: dict = {}

    def load(path, device, prompt_format="template"):
        key = (str(path), str(device), prompt_format)
        if key not in cache:
            cache[key] = load_elf_model(path, device, prompt_format)
        return cache[key]

    return load


def _generation_device(args: argparse.Namespace):
    """The device `elfreg generate` picks for these flags (``--device``, else cuda:LOCAL_RANK, else cpu)."""
    from elfreg.sampling.generate import generation_device

    return generation_device(getattr(args, "device", None))


def split_long_prompts(args: argparse.Namespace, bench, problems, load) -> tuple[list, dict]:
    """(problems whose prompt fits the model, record of those that do not) under ``--long-prompts``.

    The prompt is measured as generation encodes it (the model's template around the question); ``error`` raises
    ValueError before any generation, naming the count, the limit and the longest."""
    from elfreg.sampling.pipeline import prompt_limit

    loaded = load(args.model, _generation_device(args), getattr(args, "prompt_format", "template"))
    limit = prompt_limit(int(loaded.network.config.max_len), loaded.max_prompt_len)
    lengths = [len(ids) for ids in loaded.encoder.prompt_token_ids([bench.format_prompt(p) for p in problems])]
    long = [(p.task_id, n) for p, n in zip(problems, lengths) if n > limit]
    record = {"limit": limit, "count": len(long), "task_ids": [t for t, _ in long],
              "longest": max((n for _, n in long), default=0)}
    if long and (args.long_prompts == "error" or len(long) == len(problems)):
        worst = max(long, key=lambda x: x[1])
        raise ValueError(f"--long-prompts: {len(long)} of {len(problems)} {bench.name} prompts exceed the model's "
                         f"{limit}-token prompt limit (longest: {worst[0]}, {worst[1]} tokens); "
                         + ("none is left to generate: use a model with a larger model.max_prompt_len"
                            if len(long) == len(problems) else "pass --long-prompts skip to score them as wrong "
                            "(counted in the report), or use a model with a larger model.max_prompt_len"))
    too_long = {t for t, _ in long}
    return [p for p in problems if p.task_id not in too_long], record


def _one_run(args: argparse.Namespace, bench, problems, resolved, cfg, out: Path, sandbox, load,
             skipped: dict) -> dict | int:
    """Generate (``cfg``: the run's checked SamplerConfig) and score one sampling run in ``out``; returns its summary,
    or generation's exit code on failure.

    Problems in ``skipped`` (prompts over the limit) are not generated: each of their samples is an empty answer,
    scored wrong, so `eval score` on samples.jsonl gives the same numbers."""
    from elfreg.sampling.files import read_prompts
    from elfreg.sampling.flags import generation_job
    from elfreg.sampling.generate import run_generation

    out.mkdir(parents=True, exist_ok=True)
    prompts_path, gens_path = out / "prompts.jsonl", out / "generations.jsonl"
    # --restart moved the whole folder aside already
    job = generation_job(args, cfg, samples=resolved.values["samples"], out=str(gens_path), prompt_field="prompt",
                         restart=False, output_format=None, inline=False, command="elfreg eval run")

    def bad_input(exc: Exception) -> int:
        print(f"{job.command}: error: {error_line(exc, args)}", file=sys.stderr)
        return 2

    skip = set(skipped["task_ids"]) if skipped["count"] else set()
    write_prompts(bench, [p for p in problems if p.task_id not in skip], prompts_path)
    try:
        prompts = read_prompts(prompts_path, "prompt")
    except (ValueError, FileNotFoundError) as exc:
        return bad_input(exc)
    code = run_generation(job, prompts, load, bad_input)
    if code != 0:
        return code
    gen = generation_settings(gens_path)
    note(out / FOLDER_FILE, {k: gen[k] for k in ("precision_used", "bf16_time_ratio")})  # what auto chose here
    comps = completions_from_generations(gens_path)
    comps += [Completion(p.task_id, k, "", 0) for p in problems if p.task_id in skip
              for k in range(resolved.values["samples"])]
    write_samples(bench, comps, out / "samples.jsonl")
    opts = ScoreOptions(workers=args.workers, allow_subset=args.limit is not None, time_rule=time_rule(args),
                        text_limit_s=args.text_limit, progress=not args.no_progress, ks=resolved.values["ks"],
                        alias_helpers=args.alias_helpers, max_completion_bytes=args.max_completion_bytes)
    summary = score_completions(bench, comps, out / "results.jsonl", opts, sandbox)
    evaluation = resolved.as_dict()
    if bench.custom:   # the paper's figures are for its test sets, not for this file
        evaluation["paper_refs"] = []
    summary.update(model=str(args.model), generation=gen, nfe=generation_nfe(gens_path),
                   samples_per_problem=resolved.values["samples"], problems=len(problems),
                   evaluation=evaluation, prompts_too_long=skipped)
    if resolved.label:
        summary["run_label"] = (f"{resolved.label}: {resolved.values['sampler']}, {resolved.values['nfe']} NFE, "
                                f"pass@{', pass@'.join(map(str, resolved.values['ks']))}")
    summary["pass_at_k"].update(dropped_ks=list(resolved.ks_dropped), ks_from=resolved.origin["ks"])
    write_reports(summary, out)
    return summary


def cmd_eval_run(args: argparse.Namespace) -> int:
    """Entry point of `elfreg eval run`; returns an exit code.

    One sampling run writes its files into ``--out``; a protocol entry with several runs (MATH-500 under "paper")
    writes each into ``--out/<label>`` and a combined summary.json / summary.md into ``--out``."""
    if args.limit is not None:
        COUNT.check(args.limit, "--limit")
    from elfreg.sampling.config import task_w

    registry = default_registry()
    if args.benchmark not in (*registry.names(), CUSTOM):
        raise ValueError(f"--benchmark: unknown benchmark {args.benchmark!r}; one of {', '.join(registry.names())}, "
                         f"{CUSTOM}")
    from elfreg.distilled import sampler_defaults

    runs = resolve_runs(args.protocol, args.benchmark,
                        {k: getattr(args, k, None) for k in ("sampler", "nfe", "rho", "samples", "w", "task")}
                        | {"ks": parse_ks(args.k) if args.k is not None else None},
                        sampler_defaults(args.model))   # a distilled model samples as its record says
    # bad limits fail before any work
    ScoreOptions(workers=args.workers, time_rule=time_rule(args), text_limit_s=args.text_limit,
                 max_completion_bytes=args.max_completion_bytes)
    bench = load_for_eval(registry, args.benchmark, args.data, getattr(args, "task", None))
    for i, resolved in enumerate(runs):
        if resolved.values["w"] is None:  # a w preset by name (--task, else the benchmark kind's): record the number
            task = resolved.values["task"] or W_TASK[bench.kind]
            runs[i] = dataclasses.replace(resolved, values={**resolved.values, "task": task, "w": task_w(task)})
    problems = bench.problems[: args.limit] if args.limit else bench.problems
    # the adaptive exit rule watches the answer the benchmark scores (code: the whole response); every sampler
    # setting is checked before any work, errors naming the field
    args.extract = args.extract or extract_for(args.benchmark, bench.kind)
    from elfreg.sampling.flags import sampler_config_from_args

    cfgs = {resolved.label: sampler_config_from_args(args, **resolved.values) for resolved in runs}
    for cfg in cfgs.values():
        check_fits(sampler_grid_need(cfg, args.batch_size))   # the grids live on the CPU: known before loading
    out = Path(args.out)
    # Before any generation, and before --out is touched: code scoring refuses to run without isolation
    # (unless --isolation none).
    sandbox = Sandbox(SandboxConfig(isolation=args.isolation)) if bench.kind == "code" else None
    set_inference_threads(getattr(args, "threads", None))
    load = _cached_loader()
    summaries: dict[str, dict] = {}
    try:
        claim_run_folders(args, bench, runs, cfgs, out, write=False)  # before any work: an --out of other settings
        _, skipped = split_long_prompts(args, bench, problems, load)
        claim_run_folders(args, bench, runs, cfgs, out, write=True)
        for resolved in runs:
            res = _one_run(args, bench, problems, resolved, cfgs[resolved.label],
                           out / resolved.label if resolved.label else out, sandbox, load, skipped)
            if isinstance(res, int):
                return res
            summaries[resolved.label] = res
    finally:
        if sandbox is not None:
            sandbox.close()
    if len(runs) == 1:
        _update_card(args.model, summaries[runs[0].label])
        print(markdown_table(summaries[runs[0].label]))
        return 0
    combined = {"benchmark": bench.name, "model": str(args.model), "protocol": args.protocol,
                "runs": {label: s for label, s in summaries.items()},
                "run_folders": {label: str(out / label) for label in summaries}}
    write_reports(combined, out)
    _update_card(args.model, combined)
    print(combined_markdown(combined))
    return 0


def _update_card(model: str, summary: dict) -> None:
    """Add the run's results to the model card of a local model folder (elfreg.card.record_results); a hub id's
    downloaded copy is not ours to change, and a folder we cannot write keeps its card (both logged)."""
    import logging

    from elfreg.card import record_results, summary_results

    log = logging.getLogger(__name__)
    if not Path(model).is_dir():
        log.info("%s is not a local folder: its model card is not updated", model)
        return
    try:
        path = record_results(model, summary_results(summary))
    except OSError as exc:
        log.warning("could not add the results to the model card in %s: %s", model, exc)
        return
    log.info("results added to the model card %s", path)
