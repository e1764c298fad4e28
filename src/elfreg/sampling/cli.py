"""`elfreg generate`: prompts JSONL (a file, or stdin with ``--prompts -``) or ``--prompt TEXT`` -> one results line per
sample, into ``--out`` (resumable, sharded over torch.distributed ranks) or to stdout (JSONL, or the answers' text)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch

from elfreg.cliargs import device, error_line, input_file, model_ref, output_file
from elfreg.fingerprint import add_restart_argument
from elfreg.resources import check_fits, sampler_grid_need
from elfreg.tasks.answers import EXTRACTORS
from elfreg.sampling.config import (BATCH, EXIT_RANGES, GRIDS, SAMPLER_RANGES, SAMPLERS, SAMPLES, W_PRESETS,
                                    SamplerConfig)
from elfreg.sampling.exit import DEFAULT_EXIT, format_nfe_summary, nfe_summary
from elfreg.sampling.results_io import read_records
from elfreg.sampling.invariance import resolve_batch_invariant, scheme_for
from elfreg.sampling.run import (PromptFile, claim_results_file, generate_to_file, generate_to_stream, inline_prompts,
                                 note_results_file, read_prompts)
from elfreg.sampling.text import TASKS, build_pipeline, sampler_config

PROMPT_FORMATS = ("template", "raw")
OUTPUT_FORMATS = ("text", "jsonl")
PRECISIONS = ("auto", "bf16", "fp32")


def _presets_text() -> str:
    """W_PRESETS as help reads them: ``gsm8k 3; math, math500, ... 2``."""
    by_w: dict[float, list[str]] = {}
    for task, w in W_PRESETS.items():
        by_w.setdefault(w, []).append(task)
    return "; ".join(f"{', '.join(tasks)} {w:g}" for w, tasks in by_w.items())


def register(subparsers: Any) -> None:
    """Add the `generate` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("generate", help="generate responses with an ELF-REG model (spec §5)",
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
    add_sampler_arguments(p)
    add_restart_argument(p)
    p.set_defaults(func=cmd_generate)


def add_sampler_arguments(p: argparse.ArgumentParser) -> None:
    """Sampler and batching flags shared by `elfreg generate` and `elfreg eval run`."""
    p.add_argument("--sampler", default="early-stop", help=f"one of {', '.join(SAMPLERS)}")
    p.add_argument("--nfe", type=SAMPLER_RANGES["nfe"].arg, default=64,
                   help="N: network calls per sample (N-1 denoiser + 1 decoder); adaptive: the most a sample may "
                        "spend (max_nfe)")
    p.add_argument("--rho", type=SAMPLER_RANGES["rho"].arg, default=8,
                   help="early-stop / renoise master grid ratio (M = rho*N)")
    p.add_argument("--grid", default="logit-normal", help=f"one of {', '.join(GRIDS)}")
    p.add_argument("--p", type=SAMPLER_RANGES["p"].arg, default=0.5, help="renoise grid power")
    p.add_argument("--eta", type=SAMPLER_RANGES["eta"].arg, default=1.2, help="renoise noise multiplier")
    p.add_argument("--w", type=SAMPLER_RANGES["w"].arg, default=None,
                   help="guidance scale w (default: --task preset, else 3)")
    p.add_argument("--task", default=None, choices=TASKS, metavar="TASK",
                   help=f"one of {', '.join(TASKS)}: its w preset ({_presets_text()}; else {SamplerConfig.w:g}) "
                        "and its answer extractor (--extract)")
    p.add_argument("--sigma", type=SAMPLER_RANGES["sigma"].arg, default=None,
                   help="noise scale of y_0 (default: the model's training sigma)")
    p.add_argument("--drop-reg", action="store_true", help="ablation: omit the REG token at inference")
    p.add_argument("--check-every", type=EXIT_RANGES["check_every"].arg, default=DEFAULT_EXIT["check_every"],
                   help="adaptive: decode and check the answer every this many denoiser calls (each check is 1 NFE)")
    p.add_argument("--patience", type=EXIT_RANGES["patience"].arg, default=DEFAULT_EXIT["patience"],
                   help="adaptive: stop once the answer repeated at this many consecutive checks")
    p.add_argument("--min-nfe", type=EXIT_RANGES["min_nfe"].arg, default=DEFAULT_EXIT["min_nfe"],
                   help="adaptive: stop no earlier than this many NFE")
    p.add_argument("--extract", default=None,
                   help=f"adaptive: answer the rule compares, one of {', '.join(EXTRACTORS)} (default: the task's, "
                        "else the whole response text)")
    p.add_argument("--samples", type=SAMPLES.arg, default=1, help="samples per prompt")
    p.add_argument("--seed", type=SAMPLER_RANGES["seed"].arg, default=0,
                   help="generation seed; sample noise = f(seed, prompt, sample)")
    p.add_argument("--batch-size", type=BATCH.arg, default=16, help="rows per network call")
    p.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction, default=None,
                   help="a sample does not depend on the other rows of its batch, nor on --batch-size (default: on; "
                        "docs/sampling.md, 'Batch invariance'); --no-batch-invariant batches rows into one pass "
                        "(faster; samples then depend on the batch, so --batch-size joins the run's fingerprint)")
    p.add_argument("--device", default=None, type=device, help="cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="the network's arithmetic: auto (bf16 on CUDA; on a CPU bf16 only where it measures faster "
                        "than fp32 at this model's shapes, once per machine), bf16 or fp32")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--prompt-format", default="template", choices=PROMPT_FORMATS,
                   help="template: each prompt is a bare question, put inside the model's saved prompt template "
                        "(default); raw: prompts are already formatted and are encoded unchanged")


def sampler_config_from_args(args: argparse.Namespace) -> SamplerConfig:
    """SamplerConfig from parsed arguments (ValueError naming the field on bad input)."""
    return sampler_config(task=args.task, w=args.w, extract=args.extract, sigma=args.sigma, sampler=args.sampler,
                          nfe=args.nfe, rho=args.rho, grid=args.grid, p=args.p, eta=args.eta, drop_reg=args.drop_reg,
                          seed=args.seed, check_every=args.check_every, patience=args.patience, min_nfe=args.min_nfe)


def prompts_file(text: str) -> str:
    """``--prompts``: an existing file (cliargs.input_file), or ``-`` for stdin."""
    return text if text == "-" else input_file(text)


@dataclass
class LoadedModel:
    """What generation needs from a model folder."""

    network: Any
    encoder: Any
    tokenizer: Any
    max_prompt_len: int | None = None
    sigma: float | None = None   # the training noise scale, used when --sigma is not given
    prompt_template: str | None = None  # the template the encoder puts each prompt in; None: prompts used as given


class ElfModelEncoder:
    """Prompt encoder over an ElfModel: cheap tokenisation for validation, encode_prompts for features.

    Prompts go through the model's template unless ``formatted`` (both methods see the same text, so
    validation counts exactly the tokens that are encoded).
    """

    def __init__(self, model: Any, formatted: bool = False) -> None:
        self.model = model
        self.formatted = formatted

    def prompt_token_ids(self, prompts: list[str]) -> list[list[int]]:
        return self.model.prompt_token_ids(prompts, formatted=self.formatted)

    def encode_prompts(self, prompts: list[str]) -> Any:
        return self.model.encode_prompts(prompts, formatted=self.formatted)


def load_elf_model(model_dir: str, device: torch.device, prompt_format: str = "template") -> LoadedModel:
    """Load an ElfModel folder (src/elfreg/hub.py): student, frozen encoder, tokenizer, prompt cap, sigma, template."""
    from elfreg.hub import ElfModel

    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format: expected one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    model = ElfModel.from_pretrained(model_dir, device=device)
    raw = prompt_format == "raw"
    return LoadedModel(network=model.student, encoder=ElfModelEncoder(model, formatted=raw), tokenizer=model.tokenizer,
                       max_prompt_len=model.config.model.max_prompt_len, sigma=model.config.objective.sigma,
                       prompt_template=None if raw else model.prompt_template)


def generation_device(args: argparse.Namespace) -> torch.device:
    """The device generation runs on: ``--device``, else cuda:LOCAL_RANK when CUDA is there, else the CPU."""
    if getattr(args, "device", None):
        return torch.device(args.device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def prompts_of(args: argparse.Namespace) -> PromptFile:
    """The run's prompts: the --prompt texts, else the --prompts file (or stdin)."""
    if getattr(args, "prompt", None):
        return inline_prompts(args.prompt)
    return read_prompts(args.prompts, args.prompt_field)


def cmd_generate(args: argparse.Namespace, load: Callable[[str, torch.device], LoadedModel] = load_elf_model) -> int:
    """Run `elfreg generate`; returns an exit code (2 for bad input, found before any generation)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    to_stdout = args.out is None
    device = generation_device(args)
    batch_invariant = resolve_batch_invariant(getattr(args, "batch_invariant", None), device)
    try:
        SAMPLES.check(args.samples, "--samples")
        BATCH.check(args.batch_size, "--batch-size")
        if to_stdout and world > 1:
            raise ValueError("--out: a run over several processes (WORLD_SIZE > 1) writes into a file; give --out")
        if getattr(args, "output_format", None) and not to_stdout:
            raise ValueError("--format: chooses what goes to stdout without --out; --out is always JSONL")
        cfg = sampler_config_from_args(args)
        check_fits(sampler_grid_need(cfg, args.batch_size))   # the grids live on the CPU: known before loading
        prompts = prompts_of(args)
        if not to_stdout and int(os.environ.get("RANK", "0")) == 0:  # before loading: an --out made with other settings is refused
            claim_results_file(args, cfg, prompts, batch_invariant, scheme_for(batch_invariant, device))
    except (ValueError, FileNotFoundError) as exc:
        print(f"elfreg generate: error: {error_line(exc, args)}", file=sys.stderr)
        return 2
    rank = 0
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    if world > 1:
        rank = torch.distributed.get_rank()
    prompt_format = getattr(args, "prompt_format", "template")
    loaded = load(args.model, device, prompt_format)
    if args.sigma is None and loaded.sigma is not None:
        cfg = dataclasses.replace(cfg, sigma=loaded.sigma)
    pipeline = build_pipeline(loaded.network, loaded.encoder, loaded.tokenizer, cfg, batch_size=args.batch_size,
                              max_prompt_len=loaded.max_prompt_len, prompt_format=prompt_format,
                              prompt_template=loaded.prompt_template, batch_invariant=batch_invariant,
                              precision=getattr(args, "precision", "auto"))
    if rank == 0 and not to_stdout:  # what auto chose here, and the measured ratio, beside the settings
        note_results_file(args, pipeline.precision.record())
    try:
        pipeline.validate(prompts.prompts, prompts.source, prompts.lines)
    except ValueError as exc:
        print(f"elfreg generate: error: {error_line(exc, args)}", file=sys.stderr)
        return 2
    if to_stdout:
        fmt = getattr(args, "output_format", None) or ("text" if getattr(args, "prompt", None) else "jsonl")
        records = generate_to_stream(pipeline, prompts, sys.stdout, args.samples, fmt, progress=not args.no_progress)
        spent = nfe_summary([r["nfe_spent"] for r in records])
        print(f"elfreg generate: {len(records)} samples -> stdout; NFE per sample: {format_nfe_summary(spent)}",
              file=sys.stderr)
        return 0
    try:
        n = generate_to_file(pipeline, prompts, args.out, args.samples, rank=rank, world=world,
                             progress=not args.no_progress)
    finally:
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    if rank == 0:
        print(f"elfreg generate: {n} new samples on rank 0 -> {args.out}", file=sys.stderr)
        spent = nfe_summary([r["nfe_spent"] for r in read_records(args.out) if "nfe_spent" in r])
        print(f"elfreg generate: NFE per sample in {args.out}: {format_nfe_summary(spent)}", file=sys.stderr)
    return 0
