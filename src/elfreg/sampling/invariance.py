"""Batch invariance: whether a sample may depend on the rows it is computed with, and each device's default."""

from __future__ import annotations

from typing import Any


def default_batch_invariant(device: Any = None) -> bool:
    """The default of ``--batch-invariant`` on ``device`` (a torch.device, a string, or None for the CPU)."""
    return True


def invariance_settings(batch_invariant: bool, batch_size: int | None) -> dict:
    """What a run's fingerprint records about batching: the switch, and the batch size when samples depend on it."""
    return {"batch_invariant": bool(batch_invariant)} if batch_invariant else \
        {"batch_invariant": False, "batch_size": batch_size}


def resolve_batch_invariant(asked: bool | None, device: Any = None) -> bool:
    """``--batch-invariant`` as given, else the device's default."""
    return default_batch_invariant(device) if asked is None else bool(asked)
