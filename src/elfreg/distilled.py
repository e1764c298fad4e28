"""What a distilled model folder says it is: ``distill.json`` beside ``config.json`` (teacher, method, rounds, the
steps it was trained for, the optimiser steps each stage took, its sampler defaults). ``ElfModel`` reads and writes
it; ``generate``, ``serve``, ``eval run``, ``lm-eval`` and ``ElfModel.generate`` take their sampler defaults from it
(``sampler_defaults``): flags that are given still win."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elfreg.configtools import ConfigError, from_dict

RECORD_FILE = "distill.json"
RECORD_VERSION = 1


@dataclass
class DistillRecord:
    """A distilled model's identity and sampler defaults."""

    teacher: str                 # the teacher's model folder (or hub id) as given to elfreg distill
    method: str                  # pd | flowmap
    rounds: list[int]            # student steps of each stage trained so far (PD: 16, 8, ...; flow map: one)
    steps: int                   # the student steps this model was trained for (the last round's)
    trained_steps: list[int] = field(default_factory=list)   # optimiser steps of each stage
    # sampler defaults: full-span on the uniform grid, NFE = steps + 1 (one step: NFE 2 = 1 denoiser + 1 decoder)
    sampler: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in ("pd", "flowmap"):
            raise ConfigError(f"distill.method: unknown {self.method!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ConfigError(f"distill.steps: must be an integer >= 1, got {self.steps!r}")
        if not self.sampler:
            self.sampler = {"sampler": "full-span", "grid": "uniform", "nfe": self.steps + 1}
        unknown = sorted(set(self.sampler) - {"sampler", "grid", "nfe", "w", "rho"})
        if unknown:
            raise ConfigError(f"distill.sampler: {unknown[0]} is not a sampler default this record keeps")

    def to_json(self) -> str:
        return json.dumps({"version": RECORD_VERSION, **asdict(self)}, indent=2)


def read_record(folder: str | Path) -> DistillRecord | None:
    """The record of a model folder, or None when it is not a distilled model (no distill.json); ValueError naming
    the file when it cannot be read."""
    path = Path(folder).expanduser() / RECORD_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a distillation record ({exc})") from None
    if not isinstance(data, dict) or data.pop("version", None) != RECORD_VERSION:
        raise ValueError(f"{path}: unsupported distillation record (version {RECORD_VERSION} expected)")
    try:
        return from_dict(DistillRecord, data)
    except ConfigError as exc:
        raise ValueError(f"{path}: {exc}") from None


def write_record(folder: str | Path, record: DistillRecord) -> Path:
    """Write ``distill.json`` into a model folder atomically."""
    from elfreg.atomic import atomic_write_text

    path = Path(folder) / RECORD_FILE
    atomic_write_text(path, record.to_json())
    return path


def sampler_defaults(model: Any) -> dict[str, Any]:
    """The sampler defaults of a model: an ElfModel (its ``distill`` record), or a local model folder; {} for a model
    that is not distilled (the commands' own defaults apply)."""
    record = getattr(model, "distill", None) if not isinstance(model, (str, Path)) else _folder_record(model)
    return dict(record.sampler) if record is not None else {}


def _folder_record(model: str | Path) -> DistillRecord | None:
    path = Path(model).expanduser()
    return read_record(path) if path.is_dir() else None
