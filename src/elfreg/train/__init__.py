"""Training (issue 5): run config, Muon/AdamW loop with EMA, checkpoints and resume, DDP/FSDP, feature cache.

The names below load on first use: ``python -m elfreg.train`` imports this package before its ``__main__`` can take
charge of Ctrl-C (elfreg.ctrlc), so the package itself imports nothing heavy (torch).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "DataConfig": "config", "RunConfig": "config", "TrainConfig": "config", "load_run_config": "config",
    "run_config_from_dict": "config", "CachedFeatures": "features", "standardize_batch": "features",
    "example_generators": "rng", "example_seed": "rng", "Trainer": "trainer", "TrainingDiverged": "trainer",
    "TrainResult": "trainer", "train": "trainer",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'elfreg.train' has no attribute {name!r}")
    return getattr(importlib.import_module(f"elfreg.train.{_HOMES[name]}"), name)
