"""Run configuration: the model/objective/backbones of ElfRegConfig plus train, data and canvas sections.

Loaded from YAML with ``key=value`` overrides (configtools); a top-level ``preset`` names a model preset whose
fields the ``model`` section overrides. The resolved config is written beside every checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from elfreg.config import MODEL_PRESETS, BackboneConfig, ElfRegConfig, ModelConfig, ObjectiveConfig
from elfreg.configtools import ConfigError, apply_overrides, check, from_dict, load_yaml
from elfreg.data import CanvasConfig, SourceSpec


@dataclass
class TrainConfig:
    """Optimisation and run control (reference facts §3.7).

    ``lr`` is a plain field. The reference sets lr = blr × batch_size × grad_accum / 256 with blr = 1e-3, i.e.
    2e-3 at its global batch of 512; scale it the same way for other batch sizes.
    """

    seed: int = 42
    steps: int = 100_000  # optimiser steps (the run also ends when the data runs out)
    batch_size: int = 512  # examples per micro-step over all ranks (the reference's global batch)
    grad_accum: int = 1  # micro-steps per optimiser step
    lr: float = 2e-3
    warmup_steps: int = 5000  # linear warmup from 0, then constant
    clip_grad: float = 1.0  # global gradient norm; 0 disables
    ema_decay: float = 0.9999  # short runs need less (e.g. 0.99)
    optimizer: Literal["muon", "adamw"] = "muon"  # muon: Muon on 2-D weight matrices, AdamW on the rest
    muon_impl: Literal["auto", "torch", "reference"] = "auto"  # auto: torch.optim.Muon when present (not FSDP)
    muon_momentum: float = 0.95
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    precision: Literal["auto", "bf16", "fp32"] = "auto"  # auto: bf16 autocast on CUDA, fp32 elsewhere
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
    init_from: str | None = None  # model folder or checkpoint to start from (MATH starts from GSM8K)
    tensorboard: bool = False
    wandb_project: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "grad_accum", "log_every", "save_every", "keep_last", "stats_canvases"):
            check(getattr(self, name) >= 1, f"train.{name}", f"must be >= 1, got {getattr(self, name)}")
        check(self.stats_positions in ("response", "unpadded"), "train.stats_positions",
              f"unknown {self.stats_positions!r}; choose 'unpadded' or 'response'")
        check(self.lr > 0, "train.lr", "must be positive")
        check(self.warmup_steps >= 0, "train.warmup_steps", "must be >= 0")
        check(self.clip_grad >= 0, "train.clip_grad", "must be >= 0 (0 disables clipping)")
        check(0.0 <= self.ema_decay < 1.0, "train.ema_decay", f"must lie in [0, 1), got {self.ema_decay}")
        check(0.0 <= self.muon_momentum < 1.0, "train.muon_momentum", "must lie in [0, 1)")
        check(0.0 <= self.adam_beta1 < 1.0 and 0.0 <= self.adam_beta2 < 1.0, "train.adam_beta1",
              "Adam betas must lie in [0, 1)")
        check(self.adam_eps > 0, "train.adam_eps", "must be positive")
        check(self.weight_decay >= 0, "train.weight_decay", "must be >= 0")
        check(self.optimizer in ("muon", "adamw"), "train.optimizer", f"unknown {self.optimizer!r}")
        check(self.muon_impl in ("auto", "torch", "reference"), "train.muon_impl", f"unknown {self.muon_impl!r}")
        check(self.precision in ("auto", "bf16", "fp32"), "train.precision", f"unknown {self.precision!r}")
        check(self.parallel in ("ddp", "fsdp"), "train.parallel", f"unknown {self.parallel!r}")
        check(not (self.parallel == "fsdp" and self.muon_impl == "torch"), "train.muon_impl",
              "torch.optim.Muon cannot orthogonalise FSDP-sharded matrices; use reference (or auto)")


@dataclass
class DataConfig:
    """Where examples come from and how features are made (spec §2, §7)."""

    task: Literal["math", "code"] = "math"
    sources: list[dict] = field(default_factory=list)  # SourceSpec mappings (see docs/data.md)
    shuffle_buffer: int = 10_000
    epochs: int | None = None  # None: loop until train.steps
    on_bad_row: Literal["error", "skip"] = "error"
    features: Literal["online", "cached"] = "online"  # cached: extract once to cache_dir, reuse (finite data only)
    cache_dir: str | None = None  # cached mode; default <output>/feature-cache

    def __post_init__(self) -> None:
        check(self.task in ("math", "code"), "data.task", f"unknown {self.task!r}")
        check(self.shuffle_buffer >= 1, "data.shuffle_buffer", "must be >= 1")
        check(self.epochs is None or self.epochs >= 1, "data.epochs", "must be >= 1 or null")
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

    def __post_init__(self) -> None:
        check(self.overflow in ("error", "skip"), "canvas.overflow", f"unknown {self.overflow!r}")


@dataclass
class RunConfig:
    """A training run: ElfRegConfig (model, objective, backbones) + train, data and canvas sections."""

    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    backbones: BackboneConfig = field(default_factory=BackboneConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    canvas: CanvasSection = field(default_factory=CanvasSection)

    def __post_init__(self) -> None:
        self.objective.check_model(self.model)

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
