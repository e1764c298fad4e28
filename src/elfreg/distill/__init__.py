"""Few-step generation: distil an ELF / ELF-REG model into a student that answers in one or a few network calls
(docs/distill.md). ``distill_pd`` (progressive distillation, as the ELF reference) and ``distill_flowmap`` (a
flow-map student: any number of steps from the same weights) are ``distill`` with the method set."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from elfreg.distill.config import DistillConfig, DistillRunConfig, load_distill_config
from elfreg.distilled import DistillRecord, read_record, sampler_defaults

__all__ = ["DistillConfig", "DistillRunConfig", "DistillRecord", "distill", "distill_pd", "distill_flowmap",
           "load_distill_config", "read_record", "sampler_defaults"]


def distill(teacher: str | Path, output: str | Path, cfg: DistillRunConfig | None = None, **kwargs):
    """Distil ``teacher`` into ``output`` with ``cfg`` (default: ``load_distill_config(teacher=teacher)``, the
    teacher run's data); kwargs: resume, backbones, dataset, hooks, restart (elfreg.distill.loop.distill)."""
    from elfreg.distill.loop import distill as run

    return run(teacher, output, cfg if cfg is not None else load_distill_config(teacher=teacher), **kwargs)


def _with_method(cfg: DistillRunConfig | None, teacher: str | Path, method: str) -> DistillRunConfig:
    cfg = cfg if cfg is not None else load_distill_config(teacher=teacher)
    return dataclasses.replace(cfg, distill=dataclasses.replace(cfg.distill, method=method))


def distill_pd(teacher: str | Path, output: str | Path, cfg: DistillRunConfig | None = None, **kwargs):
    """Progressive distillation of ``teacher`` (rounds ``cfg.distill.rounds``, 16 -> 1 steps by default)."""
    return distill(teacher, output, _with_method(cfg, teacher, "pd"), **kwargs)


def distill_flowmap(teacher: str | Path, output: str | Path, cfg: DistillRunConfig | None = None, **kwargs):
    """A flow-map student of ``teacher`` in one stage (any number of steps at inference)."""
    return distill(teacher, output, _with_method(cfg, teacher, "flowmap"), **kwargs)
