"""Text in, text out: questions -> answers through the generation pipeline (``ElfModel.generate``, ``elfreg serve``).

The same settings, noise keys and pipeline as ``elfreg generate``: prompt ``i`` of a call is prompt index ``i`` and
its samples are sample indices ``0 .. samples-1``, so ``model.generate(prompts, seed=s)`` returns the ``response``
fields that ``elfreg generate --prompts FILE --seed s`` writes for the same prompts in the same order.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from elfreg.sampling.config import SamplerConfig, task_w, with_model_defaults
from elfreg.sampling.pipeline import GenerationPipeline
from elfreg.sampling.watch import StepView, Watch
from elfreg.tasks.registry import extract_for, task_names

# A task names its w preset (else w = 3) and its answer extractor (else the whole text): elfreg.tasks.registry.
TASKS = task_names()


def sampler_config(*, task: str | None = None, w: float | None = None, extract: str | None = None,
                   sigma: float | None = None, **fields: Any) -> SamplerConfig:
    """SamplerConfig as ``elfreg generate`` builds it: ``w`` from the task's preset unless given (else 3), the task's
    answer extractor for the adaptive exit unless ``extract`` is given, ``sigma`` None = SamplerConfig's default (the
    callers that hold a model put its training sigma there). ValueError naming the field on bad input."""
    if task is not None and task not in TASKS:
        raise ValueError(f"task: unknown task {task!r}; choose one of {', '.join(TASKS)}")
    unknown = sorted(set(fields) - set(SamplerConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{unknown[0]}: not a sampler setting; the settings are "
                         f"{', '.join(SamplerConfig.__dataclass_fields__)}")
    return SamplerConfig(w=task_w(task) if w is None else w, extract=extract or extract_for(task),
                         sigma=SamplerConfig.sigma if sigma is None else sigma, **fields)


def build_pipeline(network: Any, encoder: Any, tokenizer: Any, cfg: SamplerConfig, *, batch_size: int = 16,
                   max_prompt_len: int | None = None, prompt_format: str = "template",
                   prompt_template: str | None = None, batch_invariant: bool | None = None,
                   precision: Any = "auto") -> GenerationPipeline:
    """The GenerationPipeline every text-producing entry point runs (generate, ElfModel.generate, serve), with the
    records' prompt format and template, the batch-invariance switch (None: the device's default) and the
    precision (auto / bf16 / fp32, or a resolved elfreg.precision.Precision)."""
    from elfreg.sampling.invariance import resolve_batch_invariant

    device = next((p.device for p in getattr(network, "parameters", lambda: iter(()))()), None)
    batch_invariant = resolve_batch_invariant(batch_invariant, device)
    return GenerationPipeline(network, encoder, tokenizer, cfg, batch_size=batch_size, max_prompt_len=max_prompt_len,
                              record_extra={"prompt_format": prompt_format, "prompt_template": prompt_template,
                                            "batch_invariant": batch_invariant},
                              batch_invariant=batch_invariant, precision=precision)


def model_pipeline(model: Any, cfg: SamplerConfig, *, batch_size: int = 16, formatted: bool = False,
                   batch_invariant: bool | None = None, precision: Any = "auto") -> GenerationPipeline:
    """``build_pipeline`` over an ElfModel: its student, its encoder (the saved template unless ``formatted``)."""
    return build_pipeline(model.student, model.prompt_encoder(formatted), model.tokenizer, cfg,
                          batch_size=batch_size, max_prompt_len=model.config.model.max_prompt_len,
                          prompt_format="raw" if formatted else "template",
                          prompt_template=None if formatted else model.prompt_template,
                          batch_invariant=batch_invariant, precision=precision)


def model_sampler_config(model: Any, sampler: str | None = None, nfe: int | None = None, seed: int = 0,
                         task: str | None = None, **options: Any) -> SamplerConfig:
    """``sampler_config`` with the model's training sigma as the default noise scale (as ``elfreg generate``); the
    sampler, NFE and grid not given are the model's (a distilled model's record), else early-stop at 64 NFE."""
    from elfreg.distilled import sampler_defaults

    if options.get("sigma") is None:
        options["sigma"] = model.config.objective.sigma
    chosen = with_model_defaults(sampler_defaults(model), sampler, nfe, options.pop("grid", None))
    return sampler_config(seed=seed, task=task, **chosen, **options)


def generate_texts(model: Any, prompts: str | Sequence[str], *, sampler: str | None = None, nfe: int | None = None,
                   samples: int = 1, seed: int = 0, task: str | None = None, batch_size: int = 16,
                   formatted: bool = False, batch_invariant: bool | None = None, precision: str = "auto",
                   on_step: Callable[[list[StepView]], None] | None = None, every: int = 1,
                   **sampler_options: Any) -> list[str] | list[list[str]]:
    """The answers of ``ElfModel.generate``: one text per prompt, or a list of ``samples`` texts per prompt.
    ``sampler`` / ``nfe`` None: the model's defaults (``model_sampler_config``).

    Each prompt goes into the model's saved template (unless ``formatted``); each answer is the response positions
    up to the first EOS, detokenised. ``sampler_options``: any other SamplerConfig field (rho, w, grid, p, eta, sigma,
    drop_reg, check_every, patience, min_nfe, extract). Every prompt is checked before any work (ValueError naming
    its 0-based index). ``on_step(views)``: called at every ``every``-th denoiser call of each batch with a
    ``StepView`` per sample on the path (its text from the current clean prediction; elfreg.sampling.watch); the
    answers are the same with and without it."""
    if isinstance(prompts, str):
        raise ValueError("prompts: give a list of prompts (a single string would be read as one prompt per "
                         "character); e.g. model.generate([\"3+4-2=?\"])")
    prompts = list(prompts)
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise ValueError(f"samples: need an integer >= 1, got {samples!r}")
    watch = Watch(on_step, every) if on_step is not None else None
    cfg = model_sampler_config(model, sampler, nfe, seed, task, **sampler_options)
    pipe = model_pipeline(model, cfg, batch_size=batch_size, formatted=formatted, batch_invariant=batch_invariant,
                          precision=precision)
    pipe.validate(prompts, "prompt", range(len(prompts)))
    texts: list[list[str]] = [[""] * samples for _ in prompts]
    for rec in pipe.generate(prompts, samples, watch=watch):
        texts[rec["prompt_index"]][rec["sample_index"]] = rec["response"]
    return [t[0] for t in texts] if samples == 1 else texts

