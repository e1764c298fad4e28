"""One generation run, as `elfreg generate` and `elfreg eval run` both make it: prompts -> results (spec §5).

:class:`GenerationJob` holds every setting of a run, its SamplerConfig built and checked once by the caller;
:func:`run_generation` checks the rest before loading the model (an --out made with other settings is refused), then
loads it (:class:`LoadedModel`, from the caller's loader: the commands' is :func:`elfreg.loading.load_elf_model`) on
:func:`generation_device`, generates into the results file (resumable, sharded over torch.distributed ranks) or to
stdout.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch

from elfreg.resources import check_fits, sampler_grid_need
from elfreg.sampling.config import BATCH, SAMPLES, SamplerConfig
from elfreg.sampling.exit import format_nfe_summary, nfe_summary
from elfreg.sampling.invariance import resolve_batch_invariant, scheme_for
from elfreg.sampling.results_io import read_records
from elfreg.sampling.files import (PromptFile, claim_results_file, generate_to_file, generate_to_stream,
                                 note_results_file)
from elfreg.sampling.showsteps import step_watch
from elfreg.sampling.text import build_pipeline

# How a prompt reaches the encoder: inside the model's saved template (a bare question), or as given (raw).
PROMPT_FORMATS = ("template", "raw")


@dataclass
class LoadedModel:
    """What generation needs from a model folder."""

    network: Any
    encoder: Any
    tokenizer: Any
    max_prompt_len: int | None = None
    sigma: float | None = None   # the training noise scale, used when --sigma is not given
    prompt_template: str | None = None  # the template the encoder puts each prompt in; None: prompts used as given


Loader = Callable[[str, torch.device, str], LoadedModel]


def generation_device(device: str | None = None) -> torch.device:
    """The device generation runs on: ``device`` (``--device``), else cuda:LOCAL_RANK when CUDA is there, else the
    CPU."""
    if device:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


@dataclass(frozen=True)
class GenerationJob:
    """Every setting of one generation run; ``cfg`` is checked already. ``sigma`` is the noise scale as given (None:
    the model's training sigma replaces ``cfg.sigma`` once the model is loaded); ``out`` None writes to stdout in
    ``output_format`` (default: text for inline prompts, else JSONL). ``command`` is the command the user ran
    (``elfreg eval run`` generates too): it begins the run's error and progress lines."""

    model: str
    cfg: SamplerConfig
    sigma: float | None = None
    samples: int = 1
    batch_size: int = 16
    out: str | None = None
    prompt_field: str = "prompt"
    prompt_format: str = "template"
    precision: str = "auto"
    batch_invariant: bool | None = None
    device: str | None = None
    restart: bool = False
    progress: bool = True
    output_format: str | None = None
    inline: bool = False
    command: str = "elfreg generate"
    show_steps: int | None = None   # print each sample's text at every k-th denoising step on stderr (showsteps)


def run_generation(job: GenerationJob, prompts: PromptFile, load: Loader,
                   bad_input: Callable[[Exception], int]) -> int:
    """Run ``job`` on ``prompts``; returns an exit code. Bad input found before any generation (flags, the --out
    fingerprint, a prompt too long for the model) is handed to ``bad_input``, whose return is the exit code."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    to_stdout = job.out is None
    device = generation_device(job.device)
    batch_invariant = resolve_batch_invariant(job.batch_invariant, device)
    try:
        SAMPLES.check(job.samples, "--samples")
        BATCH.check(job.batch_size, "--batch-size")
        if to_stdout and world > 1:
            raise ValueError("--out: a run over several processes (WORLD_SIZE > 1) writes into a file; give --out")
        if job.output_format and not to_stdout:
            raise ValueError("--format: chooses what goes to stdout without --out; --out is always JSONL")
        check_fits(sampler_grid_need(job.cfg, job.batch_size))   # the grids live on the CPU: known before loading
        if not to_stdout and int(os.environ.get("RANK", "0")) == 0:  # before loading: other settings are refused
            claim_results_file(job, job.cfg, prompts, batch_invariant, scheme_for(batch_invariant, device))
    except (ValueError, FileNotFoundError) as exc:
        return bad_input(exc)
    rank = 0
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    if world > 1:
        rank = torch.distributed.get_rank()
    loaded = load(job.model, device, job.prompt_format)
    cfg = job.cfg
    if job.sigma is None and loaded.sigma is not None:
        cfg = dataclasses.replace(cfg, sigma=loaded.sigma)
    pipeline = build_pipeline(loaded.network, loaded.encoder, loaded.tokenizer, cfg, batch_size=job.batch_size,
                              max_prompt_len=loaded.max_prompt_len, prompt_format=job.prompt_format,
                              prompt_template=loaded.prompt_template, batch_invariant=batch_invariant,
                              precision=job.precision)
    if rank == 0 and not to_stdout:  # what auto chose here, and the measured ratio, beside the settings
        note_results_file(job, pipeline.precision.record())
    try:
        pipeline.validate(prompts.prompts, prompts.source, prompts.lines)
    except ValueError as exc:
        return bad_input(exc)
    watch = step_watch(job.show_steps, sys.stderr) if rank == 0 else None
    progress = job.progress and watch is None   # the views take the progress bar's place on stderr
    if to_stdout:
        fmt = job.output_format or ("text" if job.inline else "jsonl")
        records = generate_to_stream(pipeline, prompts, sys.stdout, job.samples, fmt, progress=progress, watch=watch)
        spent = nfe_summary([r["nfe_spent"] for r in records])
        print(f"{job.command}: {len(records)} samples -> stdout; NFE per sample: {format_nfe_summary(spent)}",
              file=sys.stderr)
        return 0
    try:
        n = generate_to_file(pipeline, prompts, job.out, job.samples, rank=rank, world=world, progress=progress,
                             watch=watch)
    finally:
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    if rank == 0:
        print(f"{job.command}: {n} new samples on rank 0 -> {job.out}", file=sys.stderr)
        spent = nfe_summary([r["nfe_spent"] for r in read_records(job.out) if "nfe_spent" in r])
        print(f"{job.command}: NFE per sample in {job.out}: {format_nfe_summary(spent)}", file=sys.stderr)
    return 0

