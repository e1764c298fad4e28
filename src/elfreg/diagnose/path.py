"""One Euler trajectory of the sampler, step by step (spec §5, §9): the path the diagnostics read out.

The steps come from the samplers' own loop (``elfreg.sampling.trajectory``) on the full-span grid, so read-out j
of an M-point logit-normal path is the state that prefix early-stop decodes with N = j + 2 NFE
(tests/diagnose/test_path.py checks this against ``elfreg.sampling.sample``).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.grids import master_grid
from elfreg.sampling.seeding import STREAM_GRID, STREAM_NOISE, sample_generator
from elfreg.sampling.trajectory import PathStep, Trajectory, check_batch, draw_rows

__all__ = ["PathStep", "draw_start_noise", "path_grids", "euler_path", "master_path"]


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


def master_path(network, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
                keys: Sequence[tuple[int, int]], times: torch.Tensor | None = None) -> Trajectory:
    """The M - 1 Euler steps of the path on the grid of cfg as a Trajectory (its ``decode`` counts on ``network``).

    times (B, M) overrides the grid (default: path_grids(cfg, keys)); the last step's y_next is y_{M-1}.
    """
    check_batch(x_prompt, prompt_mask, keys)
    grid = path_grids(cfg, keys) if times is None else times
    if grid.shape[0] != x_prompt.shape[0] or grid.shape[1] < 2:
        raise ValueError(f"times must be (B, M >= 2) with B = {x_prompt.shape[0]}, got {tuple(grid.shape)}")
    return Trajectory(network, x_prompt, prompt_mask, cfg, keys, grid[:, :-1], t_end=grid[:, -1])


@torch.inference_mode()
def euler_path(network, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
               keys: Sequence[tuple[int, int]], times: torch.Tensor | None = None) -> Iterator[PathStep]:
    """Yield the M - 1 Euler steps of the path on the grid of cfg (spec §5), one PathStep per denoiser call.

    x_prompt (B, L, d) clean prompt features, prompt_mask (B, L) bool; keys (prompt_index, sample_index)
    per row; times (B, M) overrides the grid (default: path_grids(cfg, keys)). The last step's y_next
    is the end point y_{M-1}. Prompt positions of y, d and q hold the clean prompt (v = 0 there).
    """
    yield from master_path(network, x_prompt, prompt_mask, cfg, keys, times)
