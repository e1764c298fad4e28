"""A distillation run's settings: the method and its schedule (``DistillConfig``) with the train, data and canvas
sections a training run has (``DistillRunConfig``), loaded from a preset or YAML file plus ``key=value`` overrides.

The model, its objective and its frozen backbones are the teacher's (its model folder). Data and canvas come, in
order of precedence, from the overrides, the config file (a ``base:`` key names a training config whose data,
canvas and paper sections it takes), else the teacher's own training run (``<teacher>/../config.yaml``, beside the
``model/`` folder that ``elfreg train`` writes).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from elfreg.bounds import Range, check_ranges
from elfreg.config import ObjectiveConfig
from elfreg.configtools import ConfigError, apply_overrides, check, from_dict, load_yaml
from elfreg.train.config import CanvasSection, DataConfig, PaperBudget, TrainConfig

METHODS = ("pd", "flowmap")
FLOWMAP_ONLY = ("diagonal_frac", "full_frac", "target_weights")   # settings a PD run never reads
TEACHER_GRID = Range(1, 4096, integer=True, why="teacher sub-steps over the whole path")
PROB = Range(0, 1)
DISTILL_RANGES = {
    "teacher_grid": TEACHER_GRID, "epochs_per_round": Range(0, 1e6, lo_open=True),
    "steps_per_round": Range(1, 2 ** 40, integer=True), "diagonal_frac": PROB, "full_frac": PROB,
    "nfe": Range(2, 2 ** 16, integer=True, why="the distilled model's default NFE"),
}
# Defaults of a distillation run's train section (the ELF reference's PD: Muon at 2e-3, 0.1-epoch warm-up, then
# constant; its budget is distill.epochs_per_round, its seed moves by one per round)
TRAIN_DEFAULTS: dict[str, Any] = {"warmup_steps": None, "warmup_epochs": 0.1, "lr": 2e-3, "ema_decay": 0.9999}


@dataclass
class DistillConfig:
    """What is distilled and how (docs/distill.md)."""

    method: Literal["pd", "flowmap"] = "pd"
    # PD: student steps of each round, in order (the reference: 16, 8, 4, 2, 1); the flow map trains one stage
    rounds: list[int] = field(default_factory=lambda: [16, 8, 4, 2, 1])
    # a teacher sub-step spans 1/teacher_grid on average: round n runs teacher_grid / n sub-steps per student step
    teacher_grid: int = 64
    # each round's (the flow map's one stage's) budget: epochs over the data, or optimiser steps (one of the two)
    epochs_per_round: float | None = 1.0
    steps_per_round: int | None = None
    # the decoder branch keeps the training CE on this share of the rows (0.2, as training and the reference's PD)
    decoder_prob: float = 0.2
    self_cond_prob: float = 0.5   # rows that see the student's own prediction as self-conditioning
    # flow map: shares of the denoising rows that regress the teacher (s = t) and that jump the whole path (0 -> 1);
    # with 0.25 of them anchored to the teacher the self-made targets drifted and the answers collapsed onto a few
    # (docs/distill.md, "Flow map": the choice and its measurements)
    diagonal_frac: float = 0.5
    full_frac: float = 0.2
    # flow map: the weights that make the two-hop targets: the student's own (online) or the run's EMA of them
    target_weights: Literal["online", "ema"] = "online"
    # the distilled model's default NFE (its sampler: full-span on the uniform grid); null: the last round's steps
    # + 1 (PD), 2 (the flow map: one step)
    nfe: int | None = None

    def __post_init__(self) -> None:
        check(self.method in METHODS, "distill.method", f"unknown {self.method!r}; choose pd or flowmap")
        check(self.target_weights in ("online", "ema"), "distill.target_weights",
              f"unknown {self.target_weights!r}; choose online or ema")
        check_ranges(self, DISTILL_RANGES, "distill.")
        for name in ("decoder_prob", "self_cond_prob"):
            PROB.check(getattr(self, name), f"distill.{name}")
        check((self.epochs_per_round is None) != (self.steps_per_round is None), "distill.epochs_per_round",
              f"give each round's budget once: epochs_per_round ({self.epochs_per_round}) or steps_per_round "
              f"({self.steps_per_round}), the other null")
        check(isinstance(self.rounds, list) and len(self.rounds) > 0, "distill.rounds",
              "give the student steps of each round, e.g. [16, 8, 4, 2, 1]")
        for n in self.rounds:
            check(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= self.teacher_grid, "distill.rounds",
                  f"{n!r} student steps is out of range: each round has 1 .. teacher_grid={self.teacher_grid} steps")
            check(self.teacher_grid % n == 0, "distill.rounds",
                  f"{n} student steps do not divide distill.teacher_grid={self.teacher_grid}")
        check(all(a > b for a, b in zip(self.rounds, self.rounds[1:])), "distill.rounds",
              f"rounds must halve (or at least shrink) the steps: {self.rounds}")
        check(self.diagonal_frac + self.full_frac <= 1, "distill.full_frac",
              f"diagonal_frac + full_frac = {self.diagonal_frac + self.full_frac:g} > 1")

    @property
    def stages(self) -> list[int]:
        """Student steps of each stage: the PD rounds, or the flow map's one stage (its default steps)."""
        return list(self.rounds) if self.method == "pd" else [self.default_nfe - 1]

    @property
    def default_nfe(self) -> int:
        """The distilled model's default NFE: ``nfe``, else the last round's steps + 1 (PD) or 2 (flow map)."""
        if self.nfe is not None:
            return self.nfe
        return self.rounds[-1] + 1 if self.method == "pd" else 2

    def objective(self, teacher: ObjectiveConfig) -> ObjectiveConfig:
        """The teacher's objective with this run's branch and self-conditioning shares."""
        import dataclasses

        return dataclasses.replace(teacher, decoder_prob=self.decoder_prob, self_cond_prob=self.self_cond_prob)


@dataclass
class DistillRunConfig:
    """A distillation run: the method (``distill``), and the train, data and canvas sections of its stages."""

    distill: DistillConfig = field(default_factory=DistillConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(**TRAIN_DEFAULTS))
    data: DataConfig = field(default_factory=DataConfig)
    canvas: CanvasSection = field(default_factory=CanvasSection)
    paper: PaperBudget | None = None
    base: str | None = None   # the training config the data, canvas and paper sections came from (the plan's model)

    def __post_init__(self) -> None:
        check(self.train.steps is None and self.train.epochs is None, "train.steps",
              "a distillation run's length is per round: set distill.epochs_per_round or distill.steps_per_round")


def teacher_run_config(teacher: str | Path) -> Path | None:
    """The config.yaml of the training run whose ``model/`` folder ``teacher`` is, if there is one."""
    path = Path(teacher).expanduser().parent / "config.yaml"
    return path if Path(teacher).expanduser().name == "model" and path.is_file() else None


def _merge(base: dict, top: dict) -> dict:
    """``top`` over ``base``, mappings merged key by key (lists and scalars replaced)."""
    out = copy.deepcopy(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


SECTIONS_FROM_BASE = ("data", "canvas", "paper")


def load_distill_config(path: str | Path | None = None, overrides: list[str] = (),
                        teacher: str | Path | None = None, method: str | None = None) -> DistillRunConfig:
    """The run's config: defaults, the teacher run's data and canvas, the file (its ``base``'s data, canvas, paper
    first), ``--method``, then the overrides; ConfigError naming the field (and the file) on bad input."""
    data: dict[str, Any] = {"train": dict(TRAIN_DEFAULTS)}
    run = teacher_run_config(teacher) if teacher is not None else None
    if run is not None:
        saved = load_yaml(run)
        taken = {k: saved[k] for k in ("data", "canvas") if isinstance(saved.get(k), dict)}
        # the run's validation scored its sampler at train.validate_nfe: not a few-step student's measure
        taken.get("data", {}).pop("validation", None)
        taken.get("data", {}).pop("cache_dir", None)   # the teacher run's own folder: a distillation caches its own
        data = _merge(data, taken)
    where = str(path) if path is not None else "config"
    if path is not None:
        own = load_yaml(path)
        base = own.get("base")
        if base is not None:
            from elfreg.configfiles import resolve_config

            try:
                base_data = load_yaml(resolve_config(str(base)))
            except FileNotFoundError as exc:
                raise ConfigError(f"{where}: base: {exc}") from None
            data = _merge(data, {k: base_data[k] for k in SECTIONS_FROM_BASE if k in base_data})
        data = _merge(data, own)
    if method is not None:
        data = _merge(data, {"distill": {"method": method}})
    data = apply_overrides(data, list(overrides))
    try:
        return from_dict(DistillRunConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}" if path is not None else str(exc)) from exc
