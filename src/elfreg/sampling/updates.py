"""One-step update rules of the samplers (spec §5): velocity with the c_t clamp, Euler step, re-noising step."""

from __future__ import annotations

import torch


def _expand(coef: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(B,) coefficient -> shape broadcastable against like (B, ...) in like's dtype."""
    return coef.to(like.dtype).reshape(coef.shape[0], *([1] * (like.dim() - 1)))


def velocity(d: torch.Tensor, y: torch.Tensor, t: torch.Tensor, t_eps: float) -> torch.Tensor:
    """v = (d - y) / max(1 - t, t_eps); d, y (B, ...), t (B,) (spec §3, §5)."""
    c_t = torch.clamp(1.0 - t, min=t_eps)
    return (d - y) / _expand(c_t, y)


def euler_update(y: torch.Tensor, v: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor) -> torch.Tensor:
    """y_{j+1} = y_j + (t_{j+1} - t_j) v_j; y, v (B, ...), t, t_next (B,) (spec §5)."""
    return y + _expand(t_next - t, y) * v


def euler_step(y: torch.Tensor, d: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor, t_eps: float) -> torch.Tensor:
    """y_{j+1} = y_j + (t_{j+1} - t_j) v_j with v_j from velocity(); y, d (B, ...), t, t_next (B,) (spec §5)."""
    return euler_update(y, velocity(d, y, t, t_eps), t, t_next)


def renoise_step(x_hat: torch.Tensor, t_next: torch.Tensor, xi: torch.Tensor, eta: float, sigma: float) -> torch.Tensor:
    """z_{i+1} = t_{i+1} x_hat_i + (1 - t_{i+1}) eta sigma xi_i; x_hat, xi (B, ...), t_next (B,) (spec §5.1)."""
    a = _expand(t_next, x_hat)
    return a * x_hat + (1.0 - a) * (eta * sigma) * xi
