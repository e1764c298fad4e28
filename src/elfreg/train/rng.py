"""Per-example randomness: one torch.Generator per example, seeded from (seed, epoch, global example index).

Because the seed depends only on the example's place in the global order, every example gets the same draws
whatever the world size, per-rank batch or accumulation, so the loss curve does not depend on them.
"""

from __future__ import annotations

import hashlib

import torch


def example_seed(seed: int, epoch: int, index: int) -> int:
    """First 8 bytes (big-endian, top bit cleared) of SHA-256 of ``"elfreg-example:{seed}:{epoch}:{index}"``."""
    digest = hashlib.sha256(f"elfreg-example:{seed}:{epoch}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def example_generators(seed: int, keys: list[tuple[int, int]]) -> list[torch.Generator]:
    """CPU generators for examples keyed (epoch, global index)."""
    return [torch.Generator().manual_seed(example_seed(seed, e, i)) for e, i in keys]
