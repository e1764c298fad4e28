"""What a few-step student regresses: the clean prediction whose one Euler step lands where a longer path lands.

The samplers' Euler step from (z_s, t_s) to t_t with the clean prediction x_hat is
z_t = z_s + (t_t - t_s) (x_hat - z_s) / c_{t_s} (``elfreg.sampling.updates``, with c_t = max(1 - t, floor) from
``elfreg.flow``). Solving it for x_hat gives the one formula both methods train on (docs/distill.md):

    x_hat* = z_s + c_{t_s} / (t_t - t_s) (z_t - z_s)

Progressive distillation takes z_t from the teacher's sub-steps (``elfreg.distill.pd``), the flow map from its own
two half jumps (``elfreg.distill.flowmap``). The ELF reference writes (1 - t_s) for c_{t_s}: the same value wherever
t_s <= 1 - floor (every start of a round of at most 1 / floor = 20 student steps).
"""

from __future__ import annotations

import torch
from torch import Tensor

from elfreg.flow import c_t, per_row


def jump_target(z_s: Tensor, z_t: Tensor, t_s: Tensor, t_t: Tensor, floor: float = 0.05) -> Tensor:
    """x_hat* = z_s + c_{t_s} / (t_t - t_s) (z_t - z_s): z_s, z_t (B, ...), t_s, t_t (B,) with t_t > t_s; no grad."""
    scale = c_t(t_s, floor) / (t_t - t_s)
    return (z_s + per_row(scale, z_s) * (z_t - z_s)).detach()


def row_mse(pred: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
    """Plain x-space squared error per example: the mean over the feature dim, then over the ``mask``ed positions
    (B, L) (all positions without a mask) -> (B,). pred, target (B, L, d) or (B, d_r) (then no mask)."""
    err = (pred.float() - target.float()).square().mean(-1)
    if err.dim() == 1:
        return err
    if mask is None:
        return err.mean(-1)
    kept = torch.where(mask, err, torch.zeros((), dtype=err.dtype, device=err.device))   # an inf off the mask: 0
    return kept.sum(-1) / mask.sum(-1).clamp_min(1).to(err.dtype)
