"""Per-feature standardisation statistics, estimated once from training data and saved with the model (spec §2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class FeatureStats:
    """Mean and std per feature dimension, each (D,) fp32."""

    mean: Tensor
    std: Tensor

    def standardize(self, h: Tensor) -> Tensor:
        """(h - mean) / std over the last axis of h (.., D), in fp32 at least: a half or bf16 ``h`` is promoted by
        the subtraction itself (the values of ``h.float()`` standardised, without a copy of ``h`` first)."""
        return (h - self.mean.to(h.device, torch.float32)) / self.std.to(h.device, torch.float32)

    def unstandardize(self, x: Tensor) -> Tensor:
        """Inverse of ``standardize``."""
        return x * self.std.to(x) + self.mean.to(x)

    def to_tensors(self, prefix: str) -> dict[str, Tensor]:
        return {f"{prefix}.mean": self.mean.contiguous(), f"{prefix}.std": self.std.contiguous()}

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor], prefix: str) -> "FeatureStats | None":
        if f"{prefix}.mean" not in tensors:
            return None
        return cls(tensors[f"{prefix}.mean"].float(), tensors[f"{prefix}.std"].float())

    @classmethod
    def identity(cls, dim: int) -> "FeatureStats":
        return cls(torch.zeros(dim), torch.ones(dim))


class RunningStats:
    """Streaming per-feature mean/variance in float64 over the rows a mask selects."""

    def __init__(self, dim: int, min_std: float = 1e-6) -> None:
        self.count = 0
        self.total = torch.zeros(dim, dtype=torch.float64)
        self.total_sq = torch.zeros(dim, dtype=torch.float64)
        self.min_std = min_std

    def update(self, h: Tensor, mask: Tensor | None = None) -> None:
        """Add vectors h (.., D), keeping only positions where mask (..) is True."""
        v = h.detach().reshape(-1, h.shape[-1]).double().cpu()
        if mask is not None:
            v = v[mask.reshape(-1).cpu()]
        self.count += v.shape[0]
        self.total += v.sum(0)
        self.total_sq += (v * v).sum(0)

    def finalize(self) -> FeatureStats:
        """The statistics so far; an error if nothing was seen."""
        if self.count < 2:
            raise ValueError(f"need at least 2 feature vectors to estimate statistics, got {self.count}")
        mean = self.total / self.count
        var = (self.total_sq / self.count - mean * mean).clamp_min(0) * self.count / (self.count - 1)
        return FeatureStats(mean.float(), var.sqrt().clamp_min(self.min_std).float())
