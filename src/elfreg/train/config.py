"""Run configuration: the model/objective/backbones of ElfRegConfig plus train, data and canvas sections.

Loaded from YAML with ``key=value`` overrides (configtools); a top-level ``preset`` names a model preset whose
fields the ``model`` section overrides. The resolved config is written beside every checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from elfreg.bounds import COUNT, SEED, Range, check_ranges
from elfreg.config import MODEL_PRESETS, BackboneConfig, ElfRegConfig, ModelConfig, ObjectiveConfig
from elfreg.configtools import ConfigError, apply_overrides, check, from_dict, load_yaml

UNIT = Range(0, 1)
BETA = Range(0, 1, hi_open=True)
EPOCHS = Range(0, 1e6, lo_open=True)
# Rows per micro-step and canvases for the statistics: sanity bounds; what a micro-batch needs in memory is the
# memory estimate's call (elfreg.resources.training_need)
ROWS = Range(1, 2 ** 24, integer=True)
TRAIN_RANGES = {
    "seed": SEED, "steps": COUNT, "epochs": EPOCHS, "minutes": Range(0, 1e6, lo_open=True), "batch_size": ROWS,
    "grad_accum": Range(1, 2 ** 16, integer=True),
    "lr": Range(0, 10, lo_open=True), "warmup_steps": Range(0, None, integer=True), "warmup_epochs": Range(0, 1e6),
    "min_lr_ratio": UNIT, "decay_fraction": Range(0, 1, lo_open=True), "clip_grad": Range(0, 1e6),
    "ema_decay": BETA, "muon_momentum": BETA, "muon_lr": Range(0, 10, lo_open=True), "adam_beta1": BETA,
    "adam_beta2": BETA, "adam_eps": Range(0, 1, lo_open=True), "weight_decay": Range(0, 10), "log_every": COUNT,
    "save_every": COUNT, "keep_last": COUNT, "stats_canvases": ROWS,
    "validate_every": Range(0, None, integer=True, why="0: at every checkpoint"),
    "validate_nfe": Range(2, 2 ** 16, integer=True),
    "grad_share_every": Range(0, None, integer=True, why="0 turns the gradient shares off"),
}
from elfreg.data import CanvasConfig, SourceSpec


@dataclass
class TrainConfig:
    """Optimisation and run control (reference facts §3.7).

    ``lr`` is a plain field. The reference sets lr = blr × batch_size × grad_accum / 256 with blr = 1e-3, i.e.
    2e-3 at its global batch of 512; scale it the same way for other batch sizes.
    """

    seed: int = 42
    # The run's length: exactly one of steps / epochs (spec §7: the paper gives epochs). Epochs count passes over
    # the rows that fit the canvas: steps = ceil(epochs × rows / (batch_size × grad_accum)) (elfreg.train.plan).
    steps: int | None = None  # optimiser steps (the run also ends when the data runs out)
    epochs: float | None = None  # fractional allowed (7.5)
    # A wall-clock budget instead of a fixed length: as many steps as fit this many minutes on this machine (counted
    # from the run's start, loading the backbones and building the feature cache included), at most train.steps;
    # decided once from the run's own step and checkpoint times at its first checkpoint (elfreg.train.budget).
    # Not the paper's recipe: for CPU runs on a user's data (configs/small-cpu.yaml); the length then depends on
    # the machine, and the summary and model card record it
    minutes: float | None = None
    batch_size: int = 512  # examples per micro-step over all ranks (the reference's global batch)
    grad_accum: int = 1  # micro-steps per optimiser step
    lr: float = 2e-3
    # linear warmup from 0, then constant (reference §3.7); at most one of the two. warmup_epochs is the
    # reference's epoch-based form (0.5 epoch on OWT) and scales with the data: round(epochs × rows / batch) steps
    warmup_steps: int | None = 5000
    warmup_epochs: float | None = None
    keep_epochs: list[float] = field(default_factory=list)  # checkpoints kept (never pruned) at these epochs
    # After the warm-up: "constant" (the reference's), or a decay to min_lr_ratio x lr at the run's last step,
    # "cosine" or "linear", over the last decay_fraction of the steps after the warm-up (1: all of them; < 1: a
    # warmup-stable-decay schedule). Not the paper's recipe: for short runs such as the demo (elfreg.train.optim.lr_at)
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    min_lr_ratio: float = 0.0
    decay_fraction: float = 1.0
    # The auxiliary terms' weights over the run (objective.repa_weight, objective.reg_weight): "constant" (the
    # paper's) or "decay", linearly from the weight at step 0 to 0 at the run's last step (elfreg.train.optim.
    # aux_weights_at): an auxiliary term that helps early and then competes with the text fades out
    repa_weight_schedule: Literal["constant", "decay"] = "constant"
    reg_weight_schedule: Literal["constant", "decay"] = "constant"
    # Per-term gradient shares (elfreg.train.gradshare): every this many steps (and at the last), the gradient of
    # each weighted term of the loss at the student's blocks, its norm relative to L_ELF's and its cosine with it,
    # in metrics.jsonl, the progress line and learning_curve.png. 0: off. Costs one more forward and one backward
    # per term on those steps only (docs/training.md, "Per-term gradient shares"); the training is unchanged
    grad_share_every: int = 100
    clip_grad: float = 1.0  # global gradient norm; 0 disables
    ema_decay: float = 0.9999  # short runs need less (e.g. 0.99)
    optimizer: Literal["muon", "adamw"] = "muon"  # muon: Muon on 2-D weight matrices, AdamW on the rest
    # auto: GroupedMuon (torch.optim.Muon's update, same-shape matrices batched) when torch has Muon (not FSDP)
    muon_impl: Literal["auto", "grouped", "torch", "reference"] = "auto"
    muon_momentum: float = 0.95
    # Muon's own peak lr (the schedule scales it with lr); null: lr, the reference's one lr for Muon and AdamW
    # (facts §3.7). Muon's update has a fixed spectral norm, so in a short run of a narrow student it moves the
    # matrices far less than AdamW at the same lr (docs/training.md "Learning-rate schedules")
    muon_lr: float | None = None
    # "hidden" (default): Muon only on the transformer blocks' matrices, AdamW on the input/output maps, the vocab
    # head and the embedders (common Muon practice). "all": Muon on every 2-D matrix, as the reference does (facts
    # §3.7; the paper presets set it). On a narrow student the feature-wide maps and the vocab head (576 x 49152 for
    # SmolLM2) are the largest matrices by far: orthogonalising them costs more than the forward and backward
    # (docs/training.md, "Optimiser")
    muon_params: Literal["all", "hidden"] = "hidden"
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    # auto: bf16 autocast on CUDA; on a CPU, bf16 only where it measured faster than fp32 at this run's shapes
    # (elfreg.precision: CPUs without native bf16 emulate it, 5-50x slower). Muon's Newton-Schulz follows it.
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    compile: bool = False
    grad_checkpointing: bool = False
    parallel: Literal["ddp", "fsdp"] = "ddp"
    device: str = "auto"  # auto: cuda:<local rank> when CUDA is there, else cpu
    log_every: int = 10
    save_every: int = 1000  # optimiser steps between checkpoints (a final one is always written)
    keep_last: int = 3
    stats_canvases: int = 1024  # canvases used to estimate the standardisation statistics
    # positions of x the statistics come from: "unpadded" (response content + its EOS) or "response" (also every
    # EOS-padding position); measured on the demo, see docs/training.md "Standardisation statistics"
    stats_positions: Literal["response", "unpadded"] = "unpadded"
    match_backbones: bool = True  # take feature/teacher/reg widths and vocab size from the loaded backbones
    init_from: str | None = None  # checkpoint (or model folder) to start from (MATH: the GSM8K run's epoch-7.5)
    # What continues from init_from (docs/training.md "The MATH start"): the student's weights are the checkpoint's
    # online weights or its EMA weights; the optimiser state (Muon momentum, AdamW moments) continues or starts
    # fresh. The EMA always continues from the checkpoint's EMA. Defaults: the paper's "continues training"
    # (seeds/002:192) read as one run whose data changes: online weights and optimiser state continue.
    init_weights: Literal["online", "ema"] = "online"
    init_optimizer: Literal["continue", "fresh"] = "continue"
    # "responses": the vocab head keeps only the token ids of the training rows' templated responses and EOS
    # (elfreg.data.vocab; saved with the model as model.head_token_ids): a small student on a short-answer task
    # learns in far fewer steps (configs/small-cpu.yaml, as the demo's head); decoding never writes another token
    head_vocab: Literal["full", "responses"] = "full"
    # validation (data.validation): scored every this many steps and at the last one; 0: at every checkpoint
    validate_every: int = 0
    validate_nfe: int = 16  # the early-stop sampler's NFE for the validation accuracy
    keep_best: bool = False  # keep the checkpoint of the best validation accuracy as <output>/best (never pruned)
    tensorboard: bool = False
    wandb_project: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        check_ranges(self, TRAIN_RANGES, "train.")
        check(self.steps is None or self.epochs is None, "train.epochs",
              f"train.steps ({self.steps}) and train.epochs ({self.epochs}) are both set; give the run's length "
              "once (set the other to null)")
        if self.minutes is not None:
            self._check_minutes()
        check(self.warmup_steps is None or self.warmup_epochs is None, "train.warmup_epochs",
              f"train.warmup_steps ({self.warmup_steps}) and train.warmup_epochs ({self.warmup_epochs}) are both "
              "set; give the warm-up once (set the other to null)")
        for e in self.keep_epochs:
            EPOCHS.check(e, "train.keep_epochs")
            if self.epochs is not None:  # with train.steps the plan checks it (it needs the row count)
                check(e <= self.epochs, "train.keep_epochs", f"epoch {e:g} is beyond the run's train.epochs = "
                                                            f"{self.epochs:g}")
        check(self.stats_positions in ("response", "unpadded"), "train.stats_positions",
              f"unknown {self.stats_positions!r}; choose 'unpadded' or 'response'")
        check(self.head_vocab in ("full", "responses"), "train.head_vocab",
              f"unknown {self.head_vocab!r}; choose 'full' or 'responses'")
        check(self.validate_nfe >= 2, "train.validate_nfe", f"must be >= 2, got {self.validate_nfe}")
        check(self.lr_schedule in ("constant", "cosine", "linear"), "train.lr_schedule",
              f"unknown {self.lr_schedule!r}; choose constant, cosine or linear")
        check(self.muon_params in ("all", "hidden"), "train.muon_params", f"unknown {self.muon_params!r}")
        for name in ("repa_weight_schedule", "reg_weight_schedule"):
            check(getattr(self, name) in ("constant", "decay"), f"train.{name}",
                  f"unknown {getattr(self, name)!r}; choose constant or decay")
        check(self.optimizer in ("muon", "adamw"), "train.optimizer", f"unknown {self.optimizer!r}")
        check(self.muon_impl in ("auto", "grouped", "torch", "reference"), "train.muon_impl",
              f"unknown {self.muon_impl!r}")
        check(self.precision in ("auto", "bf16", "fp32"), "train.precision", f"unknown {self.precision!r}")
        check(self.parallel in ("ddp", "fsdp"), "train.parallel", f"unknown {self.parallel!r}")
        check(self.init_weights in ("online", "ema"), "train.init_weights",
              f"unknown {self.init_weights!r}; choose 'online' (the checkpoint's trained weights) or 'ema'")
        check(self.init_optimizer in ("continue", "fresh"), "train.init_optimizer",
              f"unknown {self.init_optimizer!r}; choose 'continue' or 'fresh'")
        check(not (self.parallel == "fsdp" and self.muon_impl in ("torch", "grouped")), "train.muon_impl",
              "torch.optim.Muon cannot orthogonalise FSDP-sharded matrices; use reference (or auto)")

    def _check_minutes(self) -> None:
        """train.minutes decides the length during the run: the cap is train.steps, and nothing before the decision
        may depend on the length (elfreg.train.budget)."""
        check(self.steps is not None, "train.minutes",
              "needs train.steps, the most steps the run may train (train.epochs cannot be the cap)")
        check(not self.keep_epochs, "train.keep_epochs", "epoch checkpoints need a length known before the run; "
                                                         "they cannot be combined with train.minutes")
        check(self.lr_schedule == "constant" or self.decay_fraction <= 0.5, "train.decay_fraction",
              f"with train.minutes the learning rate's decay must be a final part of the run (decay_fraction <= 0.5, "
              f"got {self.decay_fraction}): the length is decided during the run, before the decay starts")
        for name in ("repa_weight_schedule", "reg_weight_schedule"):
            check(getattr(self, name) == "constant", f"train.{name}",
                  "a weight that decays over the whole run needs its length from the start; with train.minutes "
                  "keep it constant")


@dataclass
class DataConfig:
    """Where examples come from and how features are made (spec §2, §7)."""

    task: Literal["math", "code", "choice"] = "math"  # choice: multiple-choice rationales (MMLU, configs/mmlu)
    sources: list[dict] = field(default_factory=list)  # SourceSpec mappings (see docs/data.md)
    shuffle_buffer: int = 10_000
    epochs: int | None = None  # caps the stream; None: loop until the run's length (train.steps or train.epochs)
    on_bad_row: Literal["error", "skip"] = "error"
    features: Literal["online", "cached"] = "online"  # cached: extract once to cache_dir, reuse (finite data only)
    cache_dir: str | None = None  # cached mode; default <output>/feature-cache
    # held-out rows scored while training (train.validate_every): a fraction in (0, 0.5] of the sources' rows (chosen
    # by a hash of each row, left out of training), or a file read as the first source (its format and columns)
    validation: float | str | None = None

    def __post_init__(self) -> None:
        check(self.task in ("math", "code", "choice"), "data.task", f"unknown {self.task!r}")
        if isinstance(self.validation, float):
            check(0 < self.validation <= 0.5, "data.validation",
                  f"a held-out fraction must lie in (0, 0.5], got {self.validation}")
        elif isinstance(self.validation, str):
            check(bool(self.validation.strip()), "data.validation", "give a file path or a fraction")
        check_ranges(self, {"shuffle_buffer": ROWS, "epochs": COUNT}, "data.")
        check(self.features in ("online", "cached"), "data.features", f"unknown {self.features!r}")
        check(self.on_bad_row in ("error", "skip"), "data.on_bad_row", f"unknown {self.on_bad_row!r}")
        for i, spec in enumerate(self.sources):
            try:
                SourceSpec.from_dict(spec)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"data.sources[{i}]: {exc}") from exc

    def source_specs(self, shared: str | None = None) -> list[SourceSpec]:
        """SourceSpecs; ``{shared}`` in a path becomes the shared folder ($ELFREG_SHARED or ../shared)."""
        out = []
        for spec in self.sources:
            spec = dict(spec)
            if spec.get("path") and "{shared}" in spec["path"]:
                if shared is None:
                    raise ConfigError(f"data.sources: {spec['path']} needs the shared folder; set ELFREG_SHARED")
                spec["path"] = spec["path"].replace("{shared}", shared)
            out.append(SourceSpec.from_dict(spec))
        return out


@dataclass
class CanvasSection:
    """Canvas policies; the geometry (length, prompt cap) is the model's max_len / max_prompt_len (spec §2)."""

    overflow: Literal["error", "skip"] = "skip"
    add_special_tokens: bool = False
    # a run stops with an error when more than this share of the rows read is skipped for overflow: a wrong canvas
    # size, prompt cap or tokenizer skips most rows, the data's long tail a few percent
    max_overflow_fraction: float = 0.05
    overflow_check_rows: int = 1000  # during a run, the bound is checked once this many rows were read

    def __post_init__(self) -> None:
        check(self.overflow in ("error", "skip"), "canvas.overflow", f"unknown {self.overflow!r}")
        check_ranges(self, {"max_overflow_fraction": UNIT, "overflow_check_rows": COUNT}, "canvas.")


@dataclass
class PaperBudget:
    """The paper's figures for a preset (data, not logic): printed beside the plan by ``elfreg train --dry-run``."""

    rows: int | None = None  # rows after filtering
    epochs: float | None = None
    tokens: float | None = None  # prompt + response + EOS, no padding, over the whole run
    init_tokens: float | None = None  # part of ``tokens`` spent by the run it starts from (MATH: 7.5 GSM8K epochs)
    # epochs the ``tokens`` figure covers when it is not this run's (the GSM8K baselines: the paper's token column
    # is ELF-REG's 12 epochs, the baselines train 18 and 15); the plan scales it per epoch
    tokens_epochs: float | None = None
    global_batch: int | None = None
    ema_decay: float | None = None  # the paper's EMA decay, when known (printed beside the run's)
    start: str = ""  # where the run starts, as the paper says it (MATH: the GSM8K epoch-7.5 weights)
    # epochs at which the paper compares this model: [{epoch, note}] (Table 2's final epochs, Fig. 3, Table 5)
    compare: list[dict] = field(default_factory=list)
    source: str = ""

    def __post_init__(self) -> None:
        check_ranges(self, {"rows": COUNT, "tokens": Range(0, None, lo_open=True), "epochs": EPOCHS,
                            "init_tokens": Range(0, None), "tokens_epochs": EPOCHS, "global_batch": COUNT,
                            "ema_decay": BETA}, "paper.")
        check(self.init_tokens is None or self.tokens is not None and 0 <= self.init_tokens < self.tokens,
              "paper.init_tokens", "must lie in [0, paper.tokens)")
        for i, c in enumerate(self.compare):
            check(isinstance(c, dict) and set(c) == {"epoch", "note"} and isinstance(c["epoch"], (int, float))
                  and c["epoch"] > 0 and isinstance(c["note"], str), f"paper.compare[{i}]",
                  f"expected {{epoch: > 0, note: text}}, got {c!r}")


@dataclass
class RunConfig:
    """A training run: ElfRegConfig (model, objective, backbones) + train, data and canvas sections."""

    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    backbones: BackboneConfig = field(default_factory=BackboneConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    canvas: CanvasSection = field(default_factory=CanvasSection)
    paper: PaperBudget | None = None

    def __post_init__(self) -> None:
        self.objective.check_model(self.model)
        check(self.train.epochs is None or self.data.epochs is None, "data.epochs",
              "caps the data stream; leave it null when train.epochs sets the run's length")

    def elf_config(self) -> ElfRegConfig:
        """The model-defining part, as saved in model folders."""
        return ElfRegConfig(model=self.model, objective=self.objective, backbones=self.backbones)

    def canvas_config(self) -> CanvasConfig:
        """CanvasConfig with the model's geometry."""
        return CanvasConfig(canvas_len=self.model.max_len, prompt_cap=self.model.max_prompt_len,
                            overflow=self.canvas.overflow, add_special_tokens=self.canvas.add_special_tokens)


def run_config_from_dict(data: dict[str, Any], where: str = "config") -> RunConfig:
    """RunConfig from a nested mapping; a top-level ``preset`` fills model fields the ``model`` section overrides."""
    data = dict(data)
    name = data.pop("preset", None)
    if name is not None:
        if name not in MODEL_PRESETS:
            raise ConfigError(f"{where}: preset {name!r} unknown; choose one of {sorted(MODEL_PRESETS)}")
        model = data.get("model") or {}
        if not isinstance(model, dict):
            raise ConfigError(f"{where}: model must be a mapping")
        data["model"] = {**MODEL_PRESETS[name], **model}
    try:
        return from_dict(RunConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def load_run_config(path: str | Path | None, overrides: list[str] = ()) -> RunConfig:
    """Read a run YAML (or start from defaults when path is None), apply ``key=value`` overrides, validate."""
    data = load_yaml(path) if path is not None else {}
    data = apply_overrides(data, list(overrides))
    return run_config_from_dict(data, str(path) if path is not None else "config")
