"""`elfreg diagnose`: trajectory diagnostics of one or two models -> diagnostics.json, diagnostics.png and the
tables with a few samples' texts over time in diagnostics.md (docs/diagnostics.md)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from elfreg.atomic import atomic_write, atomic_write_text
from elfreg.cliargs import device, error_line, input_file, model_ref, output_dir
from elfreg.bounds import SEED, Range
from elfreg.diagnose.config import ACCEL_STEPS, KEEP_TEXTS, READOUT, STATE_DTYPES, STEPS, DiagnoseConfig
from elfreg.diagnose.plot import plot_diagnostics
from elfreg.diagnose.report import texts_section
from elfreg.diagnose.run import diagnose_model, read_problems
from elfreg.diagnose.tasks import BUILTIN_TASKS, AnswerTask, registry_task, resolve_task
from elfreg.jsontext import dumps
from elfreg.resources import check_fits, sampler_grid_need
from elfreg.loading import LoadedModel, load_elf_model
from elfreg.sampling.config import BATCH, EXIT_RANGES, NFE, SAMPLER_RANGES, task_w
from elfreg.sampling.exit import DEFAULT_EXIT, ExitRule
from elfreg.sampling.pipeline import check_sampling_fits


def register(subparsers: Any) -> None:
    """Add the `diagnose` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("diagnose", help="trajectory diagnostics: end-point error, stability, agreement",
                              description=__doc__)
    p.add_argument("--model", required=True, type=model_ref, help="model folder or hub id (ElfModel.from_pretrained)")
    p.add_argument("--model2", default=None, type=model_ref, help="a second model to compare (e.g. ELF vs ELF-REG)")
    p.add_argument("--label", default=None,
                   help="name of --model in the outputs (default: its folder name, or as much of its path as tells it "
                        "from --model2's, e.g. ELF/seed-0/model)")
    p.add_argument("--label2", default=None, help="name of --model2 in the outputs (default: as --label)")
    p.add_argument("--prompts", required=True, type=input_file,
                   help="JSONL file: 'prompt' string, optional 'answer' and 'id' per line")
    p.add_argument("--out", required=True, type=output_dir,
                   help="output folder for diagnostics.json and diagnostics.png")
    p.add_argument("--steps", type=STEPS.arg, default=512, help="M: points of the master path (M - 1 denoiser calls)")
    p.add_argument("--readouts", type=READOUT.list_arg(), default=None,
                   help="read-out NFE values N (clean prediction d_{N-2}); the end N = M is always added "
                        "(default 2,4,...,M/2 and M)")
    p.add_argument("--seeds", type=SEED.list_arg(), default=[0], help="generation seeds, e.g. 0,1,2,3")
    p.add_argument("--early-nfe", type=READOUT.arg, default=None,
                   help="early-stop NFE of the closing table (default 64 if a read-out, else the middle one)")
    p.add_argument("--accel-steps", type=ACCEL_STEPS.arg, default=None,
                   help="points of the uniform acceleration path (default --steps; 0 skips it)")
    p.add_argument("--task", default="gsm8k",
                   help=f"answer extractor / scorer, one of {', '.join(sorted(BUILTIN_TASKS))} (exact: the whole text)")
    p.add_argument("--w", type=SAMPLER_RANGES["w"].arg, default=None,
                   help="guidance scale (default: the task's preset, else 3)")
    p.add_argument("--sigma", type=SAMPLER_RANGES["sigma"].arg, default=None,
                   help="noise scale (default: the model's training sigma)")
    p.add_argument("--drop-reg", action="store_true", help="ablation: omit the REG token at inference")
    p.add_argument("--state-dtype", default="float32", help=f"storage of read-out states: {', '.join(STATE_DTYPES)}")
    p.add_argument("--batch-size", type=BATCH.arg, default=8, help="rows per network call")
    p.add_argument("--device", default=None, type=device, help="cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--exit-check-every", type=Range(0, NFE.hi, integer=True).arg, default=None,
                   help="adaptive exit rule (docs/sampling.md): note where it would stop each path, checking the "
                        f"answer every this many steps (default {DEFAULT_EXIT['check_every']} when the rule fits "
                        "--exit-max-nfe; 0: off)")
    p.add_argument("--exit-patience", type=EXIT_RANGES["patience"].arg, default=DEFAULT_EXIT["patience"],
                   help="exit rule: consecutive checks that must repeat the answer")
    p.add_argument("--exit-min-nfe", type=EXIT_RANGES["min_nfe"].arg, default=DEFAULT_EXIT["min_nfe"],
                   help="exit rule: least NFE spent")
    p.add_argument("--exit-max-nfe", type=Range(2, NFE.hi, integer=True).arg, default=None,
                   help="exit rule: its NFE budget, a divisor of --steps (default --early-nfe); the rule is the "
                        "adaptive sampler with --nfe this and --rho steps / this")
    p.add_argument("--keep-texts", type=KEEP_TEXTS.arg, default=DiagnoseConfig.keep_texts, metavar="N",
                   help="the first N samples (prompts, then seeds) keep their decoded text at every read-out, in "
                        "diagnostics.json and diagnostics.md (0: none)")
    p.add_argument("--prompt-format", default="template", choices=("template", "raw"),
                   help="template: prompts are bare questions put in the model's saved template (as elfreg "
                        "generate); raw: prompts are already formatted")
    p.set_defaults(func=cmd_diagnose)


def model_labels(paths: list[str]) -> list[str]:
    """Default names of the compared models: their folder names, or, where those are equal, the shortest path tails
    that differ (``ELF/seed-0/model`` vs ``ELF-REG/seed-0/model``); numbered only when the paths are the same."""
    parts = [Path(os.path.abspath(p)).parts for p in paths]
    names = [pp[-1] for pp in parts]
    if len(set(names)) == len(names):
        return names
    for n in range(2, max(len(pp) for pp in parts) + 1):
        tails = ["/".join(pp[-n:]) for pp in parts]
        if len(set(tails)) == len(tails):
            return tails
    return [f"{name} ({i + 1})" for i, name in enumerate(names)]


def _default_readouts(m: int) -> list[int]:
    out, n = [], 2
    while n < m:
        out.append(n)
        n *= 2
    return out + [m]


def config_from_args(args: argparse.Namespace) -> DiagnoseConfig:
    """DiagnoseConfig from parsed arguments (ValueError naming the field on bad input)."""
    m = args.steps
    readouts = args.readouts if args.readouts is not None else _default_readouts(m)
    full = sorted(set(readouts) | {m})
    early = args.early_nfe if args.early_nfe is not None else (64 if 64 in full[:-1] else full[(len(full) - 1) // 2])
    w = args.w if args.w is not None else task_w(args.task)
    exit_max = getattr(args, "exit_max_nfe", None) or early
    check_every = getattr(args, "exit_check_every", None)
    if check_every is None:   # the default rule, where it can fire within the budget on this path
        check_every = DEFAULT_EXIT["check_every"]
        try:
            ExitRule.checked(check_every, args.exit_patience, args.exit_min_nfe, exit_max)
            if m % exit_max:
                check_every = 0
        except ValueError:
            check_every = 0
    return DiagnoseConfig(steps=m, readouts=tuple(readouts), seeds=tuple(args.seeds), early_nfe=early, w=w,
                          sigma=args.sigma if args.sigma is not None else DiagnoseConfig.sigma,
                          drop_reg=args.drop_reg, accel_steps=m if args.accel_steps is None else args.accel_steps,
                          state_dtype=args.state_dtype, batch_size=args.batch_size, task=args.task,
                          exit_check_every=check_every, exit_patience=args.exit_patience,
                          exit_min_nfe=args.exit_min_nfe, exit_max_nfe=exit_max if check_every else 0,
                          keep_texts=getattr(args, "keep_texts", DiagnoseConfig.keep_texts))


def early_table(results: dict[str, dict]) -> str:
    """Markdown table of answer vs full-text agreement and flips at the early-stop NFE, one row per model."""
    lines = ["| model | NFE | answer agreement | full-text agreement | acc. early | acc. end | up | down | net |",
             "|---|---|---|---|---|---|---|---|---|"]

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.2f}%"

    for label, res in results.items():
        e = res["early_stop"]
        f = e["flips"] or {"up": "n/a", "down": "n/a", "n": e["n"], "net": None}
        net = "n/a" if f["net"] is None else f"{100 * f['net']:+.2f} pp"
        lines.append(f"| {label} | {e['nfe']} of {e['end_nfe']} | {pct(e['answer_agreement'])} | "
                     f"{pct(e['response_agreement'])} | {pct(e['accuracy_early'])} | {pct(e['accuracy_end'])} | "
                     f"{f['up']}/{f['n']} | {f['down']}/{f['n']} | {net} |")
    return "\n".join(lines)


def exit_table(results: dict[str, dict]) -> str:
    """Markdown table of where the adaptive exit rule stops against fixed early-stop at its max_nfe ('' when off)."""
    rows = [(label, res["exit_rule"]) for label, res in results.items() if res.get("exit_rule")]
    if not rows:
        return ""

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.2f}%"

    lines = ["| model | rule (check, patience, min NFE) | mean NFE (of max) | settled | acc. exit | acc. fixed | "
             "up | down | settled wrong (fixed right) |", "|---|---|---|---|---|---|---|---|---|"]
    for label, e in rows:
        r, f = e["rule"], e["flips_vs_fixed"] or {"up": "n/a", "down": "n/a", "n": e["n"]}
        lines.append(f"| {label} | {r['check_every']}, {r['patience']}, {r['min_nfe']} | {e['nfe']['mean']:.2f} "
                     f"(of {r['max_nfe']}) | {pct(e['settled'])} | {pct(e['accuracy_exit'])} | "
                     f"{pct(e['accuracy_fixed'])} | {f['up']}/{f['n']} | {f['down']}/{f['n']} | "
                     f"{e['settled_wrong'] if e['settled_wrong'] is not None else 'n/a'} "
                     f"({e['settled_wrong_fixed_right'] if e['settled_wrong_fixed_right'] is not None else 'n/a'}) |")
    return "\n".join(lines)


def cmd_diagnose(args: argparse.Namespace, load: Callable[[str, torch.device], LoadedModel] = load_elf_model,
                 task_lookup: Callable[[str], AnswerTask | None] = registry_task) -> int:
    """Run `elfreg diagnose`; returns an exit code (2 for bad input, found before any model is loaded)."""
    try:
        cfg = config_from_args(args)
        check_fits(sampler_grid_need(cfg.sampler_config(0), cfg.batch_size, "--steps or --batch-size"))
        task = resolve_task(args.task, task_lookup)
        problems = read_problems(args.prompts)
    except (ValueError, FileNotFoundError) as exc:
        print(f"elfreg diagnose: error: {error_line(exc, args)}", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    paths = [args.model] + ([args.model2] if args.model2 else [])
    given = [args.label, args.label2][:len(paths)]
    specs = [(g or d, path) for g, d, path in zip(given, model_labels(paths), paths)]
    if len({label for label, _ in specs}) != len(specs):
        specs = [(f"{label} ({i + 1})", path) for i, (label, path) in enumerate(specs)]
    results: dict[str, dict] = {}
    settings: dict[str, dict] = {}
    for label, path in specs:
        loaded = load(path, device, getattr(args, "prompt_format", "template"))
        mcfg = cfg if args.sigma is not None or loaded.sigma is None else dataclasses.replace(cfg, sigma=loaded.sigma)
        try:
            check_sampling_fits(loaded.network, mcfg.sampler_config(0), mcfg.batch_size, device)
            results[label] = diagnose_model(loaded.network, loaded.encoder, loaded.tokenizer, problems, mcfg, task,
                                            device, loaded.max_prompt_len, progress=not args.no_progress)
        except ValueError as exc:
            print(f"elfreg diagnose: error: {error_line(exc, args)}", file=sys.stderr)
            return 2
        settings[label] = {"model": str(path), **mcfg.to_dict(), "prompts": problems.source}
    out = Path(args.out)
    doc = {"settings": settings, "models": results, "early_stop_table": early_table(results),
           "exit_rule_table": exit_table(results)}
    atomic_write_text(out / "diagnostics.json", dumps(doc, indent=1) + "\n")
    atomic_write(out / "diagnostics.png", lambda p: plot_diagnostics(results, p, cfg.early_nfe))
    exit_part = ("\n\nAdaptive exit rule on the same paths (fixed: early-stop at the rule's max NFE):\n\n"
                 + doc["exit_rule_table"]) if doc["exit_rule_table"] else ""
    texts = texts_section(results, cfg.readouts, problems.prompts)
    atomic_write_text(out / "diagnostics.md", "# Trajectory diagnostics\n\nEarly stop against the end of the path:"
                      f"\n\n{doc['early_stop_table']}{exit_part}\n\n![diagnostics](diagnostics.png)\n"
                      + (f"\n## The texts over time (decoded at each read-out)\n\n{texts}\n" if texts else ""))
    print(doc["early_stop_table"] + exit_part)
    print(f"elfreg diagnose: wrote {out / 'diagnostics.json'}, {out / 'diagnostics.png'} and "
          f"{out / 'diagnostics.md'}", file=sys.stderr)
    return 0
