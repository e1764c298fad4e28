"""One Euler trajectory of the sampler, step by step (spec §5, §9): the path the diagnostics read out.

The loop is the full-span sampler of src/elfreg/sampling/samplers.py written as a generator, so that a
diagnostic can look at every clean prediction d_j and velocity v_j without the sampler keeping them.
It uses the same grid, noise streams and update rules, so read-out j of an M-point logit-normal path is
the state that prefix early-stop decodes with N = j + 2 NFE (tests/diagnose/test_path.py checks this
against `elfreg.sampling.sample`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.grids import master_grid
from elfreg.sampling.network import uses_reg_state
from elfreg.sampling.samplers import draw_rows, start_state
from elfreg.sampling.seeding import STREAM_GRID, STREAM_NOISE, sample_generator
from elfreg.sampling.updates import euler_step, velocity


@dataclass
class PathStep:
    """Step j of the path: state y_j, clean prediction d_j, velocity v_j and the next state y_{j+1}.

    Text tensors are (B, L, d); REG tensors (B, d_r) or None; t, t_next (B,) float32.
    """

    j: int
    t: torch.Tensor
    t_next: torch.Tensor
    y: torch.Tensor
    d: torch.Tensor
    v: torch.Tensor
    y_next: torch.Tensor
    r: torch.Tensor | None
    dr: torch.Tensor | None
    vr: torch.Tensor | None
    r_next: torch.Tensor | None


def draw_start_noise(keys: Sequence[tuple[int, int]], seed: int, length: int, d: int,
                     d_r: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, L, d) text noise eps and (B, d_r) REG noise eps_r, drawn per row as the sampler does (spec §5).

    Each row's noise stream yields its (L, d) text noise first, then its (d_r,) REG noise (only when the
    model has a REG token), on CPU in float32.
    """
    return draw_rows([sample_generator(seed, p, s, STREAM_NOISE) for p, s in keys], length, d, d_r)


def path_grids(cfg: SamplerConfig, keys: Sequence[tuple[int, int]]) -> torch.Tensor:
    """(B, M) float64 grids, one per row from its own grid stream (M = cfg.master_points)."""
    return torch.stack([master_grid(cfg, sample_generator(cfg.seed, p, s, STREAM_GRID)) for p, s in keys])


@torch.inference_mode()
def euler_path(network, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
               keys: Sequence[tuple[int, int]], times: torch.Tensor | None = None) -> Iterator[PathStep]:
    """Yield the M - 1 Euler steps of the path on the grid of cfg (spec §5), one PathStep per denoiser call.

    x_prompt (B, L, d) clean prompt features, prompt_mask (B, L) bool; keys (prompt_index, sample_index)
    per row; times (B, M) overrides the grid (default: path_grids(cfg, keys)). The last step's y_next
    is the end point y_{M-1}. Prompt positions of y, d and q hold the clean prompt (v = 0 there).
    """
    b, length, d = x_prompt.shape
    if prompt_mask.shape != (b, length):
        raise ValueError(f"prompt_mask must be (B, L) = {(b, length)}, got {tuple(prompt_mask.shape)}")
    if len(keys) != b:
        raise ValueError(f"need one (prompt_index, sample_index) key per row: {len(keys)} keys, {b} rows")
    mcfg = network.config
    device = x_prompt.device
    has_reg_token = getattr(mcfg, "extra_token", "none") == "reg"
    carry_reg = uses_reg_state(mcfg, cfg.drop_reg)
    d_r = int(mcfg.reg_dim) if has_reg_token else 0
    grid = path_grids(cfg, keys) if times is None else times
    if grid.shape[0] != b or grid.shape[1] < 2:
        raise ValueError(f"times must be (B, M >= 2) with B = {b}, got {tuple(grid.shape)}")
    eps, eps_r = draw_start_noise(keys, cfg.seed, length, d, d_r)

    keep, x_prompt, y, q, r, r_q = start_state(x_prompt, prompt_mask, eps, eps_r if carry_reg else None, cfg.sigma)
    w = torch.full((b,), float(cfg.w), device=device)
    dev_times = grid.to(device=device, dtype=torch.float32)
    for j in range(grid.shape[1] - 1):
        t_j, t_next = dev_times[:, j], dev_times[:, j + 1]
        out = network(y, q, t_j, w, reg=r, reg_q=r_q, decoder=False)
        d_j = torch.where(keep, x_prompt, out.x_hat.float())   # prompt output replaced by x (v = 0 there)
        v_j = velocity(d_j, y, t_j, cfg.t_eps)
        y_next = euler_step(y, d_j, t_j, t_next, cfg.t_eps)     # Euler step, as the sampler
        dr_j = vr_j = r_next = None
        if r is not None:
            dr_j = out.reg_hat.float()
            vr_j = velocity(dr_j, r, t_j, cfg.t_eps)
            r_next = euler_step(r, dr_j, t_j, t_next, cfg.t_eps)
        yield PathStep(j=j, t=t_j, t_next=t_next, y=y, d=d_j, v=v_j, y_next=y_next,
                       r=r, dr=dr_j, vr=vr_j, r_next=r_next)
        y, r = y_next, r_next
        q, r_q = d_j, dr_j                                      # self-conditioning on the last clean prediction
