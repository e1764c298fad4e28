"""The forward process and its parametrisation (spec §3): z_t, c_t, velocities, and the training-time laws.

Convention: t = 0 is pure noise, t = 1 is clean data. The one home of c_t, z_t and the velocity: the objective
(``elfreg.objective``) and the samplers' update rules (``elfreg.sampling.updates``) call these.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def c_t(t: Tensor, floor: float = 0.05) -> Tensor:
    """c_t = max(1 - t, floor), shape of ``t`` (spec §3)."""
    return torch.clamp(1.0 - t, min=floor)


def per_row(coef: Tensor, like: Tensor) -> Tensor:
    """A per-row coefficient (B,) reshaped to broadcast against ``like`` (B, ...), in ``like``'s dtype."""
    return coef.reshape(coef.shape[0], *([1] * (like.dim() - 1))).to(like.dtype)


def state_coefficients(t: Tensor, sigma: float) -> tuple[Tensor, Tensor]:
    """(a, b) of z_t = a x + b eps: a = t, b = (1 - t) sigma, shaped as ``t`` (spec §3)."""
    return t, (1.0 - t) * sigma


def noisy_state(x: Tensor, t: Tensor, eps: Tensor, sigma: float) -> Tensor:
    """z_t = t x + (1 - t) sigma eps; x, eps (B, ...), t (B,) (spec §3)."""
    a, b = state_coefficients(per_row(t, x), sigma)
    return a * x + b * eps


def velocity(x_hat: Tensor, z: Tensor, t: Tensor, floor: float = 0.05) -> Tensor:
    """v = (x_hat - z) / c_t; x_hat, z (B, ...), t (B,) (spec §3; the samplers' v_j = (d_j - y_j)/max(1 - t_j, 0.05),
    spec §5, with ``floor`` = SamplerConfig.t_eps)."""
    return (x_hat - z) / per_row(c_t(t, floor), z)


def sample_t(n: int, mean: float, std: float, generator: torch.Generator | None = None) -> Tensor:
    """Logit-normal training times t = sigmoid(N(mean, std)), shape (n,) (spec §3)."""
    return t_from_normal(torch.randn(n, generator=generator), mean, std)


def t_from_normal(normal: Tensor, mean: float, std: float) -> Tensor:
    """The logit-normal time of standard normal draws: sigmoid(mean + std normal) (``sample_t``'s law)."""
    return torch.sigmoid(mean + std * normal)


def sample_w(n: int, w_min: float, w_max: float, law: str, generator: torch.Generator | None = None) -> Tensor:
    """Self-conditioning guidance scales w, shape (n,) (spec §4).

    What the sources say: the paper (seeds/002, eqs. 7-8, p. 18) states only a range, "the training guidance
    scale is sampled in [0.5, 5.0]", with no law; the spec writes w ~ U[0.5, 5.0]; the ELF reference code draws
    1 + w log-uniform on [1.5, 6] (reference facts §3.1). Both laws cover that range:

    ``uniform`` (default): w ~ U[w_min, w_max]. Default because the spec, this project's statement of the method,
    writes it and the paper's range does not contradict it. Median 2.75.
    ``log_uniform``: 1 + w log-uniform on [1 + w_min, 1 + w_max], as the ELF code the paper builds on; more mass at
    small w (median 2.0 on [0.5, 5]). Choose it with ``objective.w_law: log_uniform`` to match that code.
    The inference scales (w = 3 for GSM8K, 2 otherwise) lie inside the range under either law.
    """
    return w_from_uniform(torch.rand(n, generator=generator), w_min, w_max, law)


def w_from_uniform(u: Tensor, w_min: float, w_max: float, law: str) -> Tensor:
    """``sample_w``'s law applied to U[0, 1) draws ``u``."""
    if law == "uniform":
        return w_min + (w_max - w_min) * u
    if law == "log_uniform":
        a, b = 1.0 + w_min, 1.0 + w_max
        return a * torch.exp(u * math.log(b / a)) - 1.0
    raise ValueError(f"objective.w_law: unknown law {law!r}")


def snr(t: Tensor, sigma: float) -> Tensor:
    """SNR(t) = t^2 / (sigma^2 (1 - t)^2) (spec §9)."""
    return t**2 / (sigma**2 * (1.0 - t) ** 2)
