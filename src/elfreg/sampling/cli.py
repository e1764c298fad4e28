"""`elfreg generate`: prompts JSONL -> one results line per sample, resumable, sharded over torch.distributed ranks."""

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
from elfreg.sampling.answers import EXTRACTORS, TASK_EXTRACTORS, answer_for
from elfreg.sampling.config import GRIDS, SAMPLERS, W_PRESETS, SamplerConfig, task_w
from elfreg.sampling.exit import DEFAULT_EXIT, format_nfe_summary, nfe_summary
from elfreg.sampling.pipeline import GenerationPipeline
from elfreg.sampling.results_io import read_records
from elfreg.sampling.run import claim_results_file, generate_to_file, note_results_file, read_prompts

PROMPT_FORMATS = ("template", "raw")
PRECISIONS = ("auto", "bf16", "fp32")
# --task names a task: its w preset (else w = 3) and its answer extractor (else the whole text).
TASKS = tuple(sorted(set(W_PRESETS) | set(TASK_EXTRACTORS)))


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
    p.add_argument("--prompts", required=True, type=input_file,
                   help="JSONL file, one object with a 'prompt' string per line")
    p.add_argument("--prompt-field", default="prompt", help="JSON field holding the prompt text")
    p.add_argument("--out", required=True, type=output_file,
                   help="results JSONL file (appended; existing samples are skipped)")
    add_sampler_arguments(p)
    add_restart_argument(p)
    p.set_defaults(func=cmd_generate)


def add_sampler_arguments(p: argparse.ArgumentParser) -> None:
    """Sampler and batching flags shared by `elfreg generate` and `elfreg eval run`."""
    p.add_argument("--sampler", default="early-stop", help=f"one of {', '.join(SAMPLERS)}")
    p.add_argument("--nfe", type=int, default=64, help="N: network calls per sample (N-1 denoiser + 1 decoder); "
                                                        "adaptive: the most a sample may spend (max_nfe)")
    p.add_argument("--rho", type=int, default=8, help="early-stop / renoise master grid ratio (M = rho*N)")
    p.add_argument("--grid", default="logit-normal", help=f"one of {', '.join(GRIDS)}")
    p.add_argument("--p", type=float, default=0.5, help="renoise grid power")
    p.add_argument("--eta", type=float, default=1.2, help="renoise noise multiplier")
    p.add_argument("--w", type=float, default=None, help="guidance scale w (default: --task preset, else 3)")
    p.add_argument("--task", default=None, choices=TASKS, metavar="TASK",
                   help=f"one of {', '.join(TASKS)}: its w preset ({_presets_text()}; else {SamplerConfig.w:g}) "
                        "and its answer extractor (--extract)")
    p.add_argument("--sigma", type=float, default=None, help="noise scale of y_0 (default: the model's training sigma)")
    p.add_argument("--drop-reg", action="store_true", help="ablation: omit the REG token at inference")
    p.add_argument("--check-every", type=int, default=DEFAULT_EXIT["check_every"],
                   help="adaptive: decode and check the answer every this many denoiser calls (each check is 1 NFE)")
    p.add_argument("--patience", type=int, default=DEFAULT_EXIT["patience"],
                   help="adaptive: stop once the answer repeated at this many consecutive checks")
    p.add_argument("--min-nfe", type=int, default=DEFAULT_EXIT["min_nfe"],
                   help="adaptive: stop no earlier than this many NFE")
    p.add_argument("--extract", default=None,
                   help=f"adaptive: answer the rule compares, one of {', '.join(EXTRACTORS)} (default: the task's, "
                        "else the whole response text)")
    p.add_argument("--samples", type=int, default=1, help="samples per prompt")
    p.add_argument("--seed", type=int, default=0, help="generation seed; sample noise = f(seed, prompt, sample)")
    p.add_argument("--batch-size", type=int, default=16, help="rows per network call")
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
    w = args.w if args.w is not None else task_w(args.task)
    sigma = SamplerConfig.sigma if args.sigma is None else args.sigma
    return SamplerConfig(sampler=args.sampler, nfe=args.nfe, rho=args.rho, grid=args.grid, p=args.p, eta=args.eta,
                         w=w, sigma=sigma, drop_reg=args.drop_reg, seed=args.seed, check_every=args.check_every,
                         patience=args.patience, min_nfe=args.min_nfe, extract=args.extract or answer_for(args.task))


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


def cmd_generate(args: argparse.Namespace, load: Callable[[str, torch.device], LoadedModel] = load_elf_model) -> int:
    """Run `elfreg generate`; returns an exit code (2 for bad input, found before any generation)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        if args.samples < 1:
            raise ValueError(f"--samples: need >= 1, got {args.samples}")
        if args.batch_size < 1:
            raise ValueError(f"--batch-size: need >= 1, got {args.batch_size}")
        cfg = sampler_config_from_args(args)
        prompts = read_prompts(args.prompts, args.prompt_field)
        if int(os.environ.get("RANK", "0")) == 0:  # before loading: an --out made with other settings is refused
            claim_results_file(args, cfg)
    except (ValueError, FileNotFoundError) as exc:
        print(f"elfreg generate: error: {error_line(exc, args)}", file=sys.stderr)
        return 2
    rank = 0
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    if world > 1:
        rank = torch.distributed.get_rank()
    if args.device:
        device = torch.device(args.device)
    elif torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    else:
        device = torch.device("cpu")
    prompt_format = getattr(args, "prompt_format", "template")
    loaded = load(args.model, device, prompt_format)
    if args.sigma is None and loaded.sigma is not None:
        cfg = dataclasses.replace(cfg, sigma=loaded.sigma)
    pipeline = GenerationPipeline(loaded.network, loaded.encoder, loaded.tokenizer, cfg, batch_size=args.batch_size,
                                  max_prompt_len=loaded.max_prompt_len,
                                  record_extra={"prompt_format": prompt_format,
                                                "prompt_template": loaded.prompt_template},
                                  precision=getattr(args, "precision", "auto"))
    if rank == 0:  # what auto chose here, and the measured ratio, beside the settings
        note_results_file(args, pipeline.precision.record())
    try:
        pipeline.validate(prompts.prompts, prompts.source, prompts.lines)
    except ValueError as exc:
        print(f"elfreg generate: error: {error_line(exc, args)}", file=sys.stderr)
        return 2
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
