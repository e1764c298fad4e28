"""``elfreg distill --dry-run``: each stage's plan (rows, epochs, optimiser steps, warm-up, the teacher's sub-steps
and network calls) before any work: one tokenizer pass over the data, no model weights.

The data is counted as ``elfreg train --dry-run`` counts it; when it cannot be read here (a Hugging Face dataset
with the hub unreachable) the preset's paper row count stands in, and the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elfreg.config import ElfRegConfig
from elfreg.configtools import ConfigError
from elfreg.distill.config import DistillRunConfig
from elfreg.distill.pd import pd_rounds
from elfreg.train.plan import TrainPlan


@dataclass
class StagePlan:
    """One stage: its folder, student steps, teacher sub-steps per student step (PD), and its TrainPlan."""

    name: str
    steps: int
    sub_steps: int | None
    plan: TrainPlan


def plan_model(run: DistillRunConfig, teacher: str | Path | None) -> ElfRegConfig:
    """The model the plan is for: the teacher's (its folder's config), else the ``base`` training config's."""
    if teacher is not None:
        from elfreg.pretrained import ElfModel

        return ElfModel.from_pretrained(teacher).config
    if run.base is None:
        raise ConfigError("--dry-run needs --teacher MODEL, or a config whose base names a training config "
                          "(the distill presets do)")
    from elfreg.configfiles import resolve_config
    from elfreg.train.config import load_run_config

    return load_run_config(resolve_config(run.base)).elf_config()


def distill_plan(run: DistillRunConfig, teacher: str | Path | None = None) -> tuple[list[StagePlan], str]:
    """The stages' plans and where the row count came from ("counted" or the paper's figure and why)."""
    from elfreg.distill.loop import stage_config, stage_name
    from elfreg.train.setup import count_rows, plan_from_counts

    model = plan_model(run, teacher)
    d = run.distill
    first = stage_config(run, model, 1)
    try:
        from elfreg.backbones import load_tokenizer
        from elfreg.train.plan import check_sources

        b = first.backbones
        offline = check_sources(first)
        tok = load_tokenizer(b.encoder, b.encoder_gguf_file, b.revision, local_files_only=offline)
        counts, source = count_rows(first, tok), "counted"
    except (OSError, ValueError) as exc:
        if run.paper is None or run.paper.rows is None:
            raise
        p = run.paper
        tokens = int(p.tokens / (p.tokens_epochs or p.epochs)) if p.tokens and p.epochs else 0
        counts = dict(rows=p.rows, overflow=[0, 0], tokens_per_epoch=tokens, max_tokens=0)
        from elfreg.train.plan import SourcesUnreachable

        why = ("its sources are on the Hugging Face hub, unreachable here" if isinstance(exc, SourcesUnreachable)
               else str(exc).splitlines()[0].rstrip(":"))
        source = f"the paper's count; the data was not counted: {why}"
    rounds = pd_rounds(d.rounds, d.teacher_grid) if d.method == "pd" else [None]
    out = []
    for i, (n, r) in enumerate(zip(d.stages, rounds), start=1):
        plan = plan_from_counts(stage_config(run, model, i), counts)
        out.append(StagePlan(stage_name(d.method, i, n), n, r.sub_steps if r is not None else None, plan))
    return out, source


def format_distill_plan(run: DistillRunConfig, stages: list[StagePlan], source: str) -> str:
    """The plan as a table: a row per stage, then the totals."""
    d = run.distill
    head = ("stage", "student steps", "teacher sub-steps", "mean sub-step", "epochs", "optimiser steps", "warm-up",
            "network calls per row")
    rows = []
    calls_total = 0.0
    for s in stages:
        p = s.plan
        if d.method == "pd":
            # the teacher's sub-steps, the self-conditioning pass on half the rows, the gradient pass
            calls = s.sub_steps + d.self_cond_prob + 1
            sub = (str(s.sub_steps), f"1/{d.teacher_grid}")
        else:
            # diagonal rows: one teacher call; jump rows: two student calls (the two hops); + self-cond + gradient
            calls = d.diagonal_frac + 2 * (1 - d.diagonal_frac) + d.self_cond_prob + 1
            sub = ("-", "-")
        dist_rows = p.steps * p.global_batch * (1 - d.decoder_prob)
        calls_total += dist_rows * calls
        rows.append((s.name, str(s.steps), *sub, f"{p.epochs:g}", f"{p.steps:,}", f"{p.warmup_steps:,}",
                     f"{calls:g}"))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    p0 = stages[0].plan
    out = [f"method {d.method}; rows per epoch: {p0.rows:,} ({source}); global batch {p0.global_batch:,}; "
           f"decoder (CE) rows {d.decoder_prob:g}", line(head), "-" * len(line(head)), *map(line, rows)]
    total = sum(s.plan.steps for s in stages)
    out.append(f"total: {total:,} optimiser steps over {len(stages)} stage{'s' if len(stages) > 1 else ''}; about "
               f"{calls_total:.3g} network calls on distillation rows (forward passes of the student's size)")
    nfe = d.default_nfe
    out.append(f"the distilled model samples with full-span on the uniform grid at NFE {nfe} ({nfe - 1} denoiser "
               f"call{'s' if nfe > 2 else ''} + 1 decoder call) unless told otherwise")
    return "\n".join(out)
