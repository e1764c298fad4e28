"""The sampler and batching flags shared by `elfreg generate`, `elfreg eval run` and `elfreg serve`
(:func:`add_sampler_arguments`), and what the parsed flags ask for: a SamplerConfig (:func:`sampler_config_from_args`)
and a generation run (:func:`generation_job`, run by :func:`elfreg.sampling.generate.run_generation`)."""

from __future__ import annotations

import argparse
from typing import Any

from elfreg.cliargs import device
from elfreg.sampling.config import (BATCH, EXIT_RANGES, GRIDS, SAMPLER_RANGES, SAMPLERS, SAMPLES, W_PRESETS,
                                    SamplerConfig, with_model_defaults)
from elfreg.sampling.exit import DEFAULT_EXIT
from elfreg.sampling.generate import PROMPT_FORMATS, GenerationJob
from elfreg.sampling.text import TASKS, sampler_config
from elfreg.tasks.answers import EXTRACTORS

PRECISIONS = ("auto", "bf16", "fp32")


def _presets_text() -> str:
    """W_PRESETS as help reads them: ``gsm8k 3; math, math500, ... 2``."""
    by_w: dict[float, list[str]] = {}
    for task, w in W_PRESETS.items():
        by_w.setdefault(w, []).append(task)
    return "; ".join(f"{', '.join(tasks)} {w:g}" for w, tasks in by_w.items())


def add_sampler_arguments(p: argparse.ArgumentParser) -> None:
    """Sampler and batching flags shared by `elfreg generate`, `elfreg eval run` and `elfreg serve`."""
    p.add_argument("--sampler", default=None,
                   help=f"one of {', '.join(SAMPLERS)} (default: {SamplerConfig.sampler}; a distilled model's own, "
                        "full-span)")
    p.add_argument("--nfe", type=SAMPLER_RANGES["nfe"].arg, default=None,
                   help="N: network calls per sample (N-1 denoiser + 1 decoder); adaptive: the most a sample may "
                        f"spend (max_nfe) (default: {SamplerConfig.nfe}; a distilled model's own, its steps + 1)")
    p.add_argument("--rho", type=SAMPLER_RANGES["rho"].arg, default=8,
                   help="early-stop / renoise master grid ratio (M = rho*N)")
    p.add_argument("--grid", default=None,
                   help=f"one of {', '.join(GRIDS)} (default: {SamplerConfig.grid}; a distilled model's own, uniform)")
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


def sampler_config_from_args(args: argparse.Namespace, **given: Any) -> SamplerConfig:
    """SamplerConfig from parsed arguments, a sampler setting in ``given`` (e.g. a protocol run's) overriding its flag;
    ValueError naming the field on bad input."""
    from elfreg.distilled import sampler_defaults

    flags = dict(task=args.task, w=args.w, extract=args.extract, sigma=args.sigma, sampler=args.sampler, nfe=args.nfe,
                 rho=args.rho, grid=args.grid, p=args.p, eta=args.eta, drop_reg=args.drop_reg, seed=args.seed,
                 check_every=args.check_every, patience=args.patience, min_nfe=args.min_nfe)
    flags = {**flags, **{k: v for k, v in given.items() if k in flags}}
    # the sampler, NFE and grid not given: the model folder's own (a distilled model's record), else the defaults
    model = getattr(args, "model", None)
    flags.update(with_model_defaults(sampler_defaults(model) if model else {}, flags["sampler"], flags["nfe"],
                                     flags["grid"]))
    return sampler_config(**flags)


def generation_job(args: argparse.Namespace, cfg: SamplerConfig | None = None, **given: Any) -> GenerationJob:
    """The run the parsed flags ask for: ``cfg`` as given (else built from the flags, ValueError naming the field),
    ``given`` overriding any other setting."""
    settings = dict(model=args.model, cfg=cfg or sampler_config_from_args(args), sigma=args.sigma,
                    samples=args.samples, batch_size=args.batch_size, out=getattr(args, "out", None),
                    prompt_field=getattr(args, "prompt_field", "prompt"),
                    prompt_format=getattr(args, "prompt_format", "template"),
                    precision=getattr(args, "precision", "auto"),
                    batch_invariant=getattr(args, "batch_invariant", None), device=getattr(args, "device", None),
                    restart=getattr(args, "restart", False), progress=not args.no_progress,
                    output_format=getattr(args, "output_format", None), inline=bool(getattr(args, "prompt", None)),
                    show_steps=getattr(args, "show_steps", None))
    return GenerationJob(**{**settings, **given})
