"""One-step update rules of the samplers (spec §5): the Euler step and the re-noising step.

The velocity v_j = (d_j - y_j)/max(1 - t_j, t_eps) and the per-row broadcast are ``elfreg.flow``'s (the same c_t
and velocity the objective trains); ``velocity`` is re-exported here for the samplers' callers.
"""

from __future__ import annotations

import torch

from elfreg.flow import per_row, velocity

__all__ = ["euler_step", "euler_update", "renoise_step", "velocity"]


def euler_update(y: torch.Tensor, v: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor) -> torch.Tensor:
    """y_{j+1} = y_j + (t_{j+1} - t_j) v_j; y, v (B, ...), t, t_next (B,) (spec §5)."""
    return y + per_row(t_next - t, y) * v


def euler_step(y: torch.Tensor, d: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor, t_eps: float) -> torch.Tensor:
    """y_{j+1} = y_j + (t_{j+1} - t_j) v_j with v_j = flow.velocity(d_j, y_j, t_j, t_eps); y, d (B, ...), t, t_next
    (B,) (spec §5)."""
    return euler_update(y, velocity(d, y, t, t_eps), t, t_next)


def renoise_step(x_hat: torch.Tensor, t_next: torch.Tensor, xi: torch.Tensor, eta: float, sigma: float) -> torch.Tensor:
    """z_{i+1} = t_{i+1} x_hat_i + (1 - t_{i+1}) eta sigma xi_i; x_hat, xi (B, ...), t_next (B,) (spec §5.1)."""
    a = per_row(t_next, x_hat)
    return a * x_hat + (1.0 - a) * (eta * sigma) * xi
