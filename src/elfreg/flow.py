"""The forward process and its parametrisation (spec §3): z_t, c_t, velocities, and the training-time laws.

Convention: t = 0 is pure noise, t = 1 is clean data.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def c_t(t: Tensor, floor: float = 0.05) -> Tensor:
    """c_t = max(1 - t, floor), shape of ``t`` (spec §3)."""
    return torch.clamp(1.0 - t, min=floor)


def _bcast(t: Tensor, like: Tensor) -> Tensor:
    """Reshape per-row ``t`` (B,) to broadcast against ``like`` (B, ...)."""
    return t.reshape(t.shape[0], *([1] * (like.dim() - 1))).to(like.dtype)


def noisy_state(x: Tensor, t: Tensor, eps: Tensor, sigma: float) -> Tensor:
    """z_t = t x + (1 - t) sigma eps; x, eps (B, ...), t (B,) (spec §3)."""
    tb = _bcast(t, x)
    return tb * x + (1.0 - tb) * sigma * eps


def velocity(x_hat: Tensor, z: Tensor, t: Tensor, floor: float = 0.05) -> Tensor:
    """v = (x_hat - z) / c_t; x_hat, z (B, ...), t (B,) (spec §3)."""
    return (x_hat - z) / _bcast(c_t(t, floor), z)


def sample_t(n: int, mean: float, std: float, generator: torch.Generator | None = None) -> Tensor:
    """Logit-normal training times t = sigmoid(N(mean, std)), shape (n,) (spec §3)."""
    return torch.sigmoid(mean + std * torch.randn(n, generator=generator))


def sample_w(n: int, w_min: float, w_max: float, law: str, generator: torch.Generator | None = None) -> Tensor:
    """Self-conditioning guidance scales w, shape (n,) (spec §4).

    ``uniform``: w ~ U[w_min, w_max] (the paper). ``log_uniform``: 1 + w log-uniform on [1 + w_min, 1 + w_max]
    (the ELF reference code).
    """
    u = torch.rand(n, generator=generator)
    if law == "uniform":
        return w_min + (w_max - w_min) * u
    if law == "log_uniform":
        a, b = 1.0 + w_min, 1.0 + w_max
        return a * torch.exp(u * math.log(b / a)) - 1.0
    raise ValueError(f"objective.w_law: unknown law {law!r}")


def snr(t: Tensor, sigma: float) -> Tensor:
    """SNR(t) = t^2 / (sigma^2 (1 - t)^2) (spec §9)."""
    return t**2 / (sigma**2 * (1.0 - t) ** 2)
