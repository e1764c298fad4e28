"""Time grids of the samplers (spec §5): logit-normal master grid, uniform grid, re-noising power grid."""

from __future__ import annotations

import torch

from elfreg.sampling.config import SamplerConfig


def logit_normal_grid(m: int, generator: torch.Generator, p_mean: float = -1.5, p_std: float = 0.8) -> torch.Tensor:
    """(M,) float64 grid: 0, the M - 2 sorted draws of sigmoid(N(p_mean, p_std)), 1 (spec §5)."""
    if m < 2:
        raise ValueError(f"grid size M must be >= 2, got {m}")
    n = torch.randn(m - 2, generator=generator, dtype=torch.float64)
    interior = torch.sigmoid(p_mean + p_std * n).sort().values
    return torch.cat([torch.zeros(1, dtype=torch.float64), interior, torch.ones(1, dtype=torch.float64)])


def uniform_grid(m: int) -> torch.Tensor:
    """(M,) float64 grid linspace(0, 1, M) (spec §5, the deterministic alternative)."""
    if m < 2:
        raise ValueError(f"grid size M must be >= 2, got {m}")
    return torch.linspace(0.0, 1.0, m, dtype=torch.float64)


def power_grid(n: int, t_star: float, p: float) -> torch.Tensor:
    """(N - 1,) float64 re-noising grid t_i = t* (i / (N - 2))^p, i = 0 .. N - 2 (spec §5.1); [0] when N = 2."""
    if n < 2:
        raise ValueError(f"nfe N must be >= 2, got {n}")
    if n == 2:
        return torch.zeros(1, dtype=torch.float64)
    i = torch.arange(n - 1, dtype=torch.float64)
    return t_star * (i / (n - 2)) ** p


def master_grid(cfg: SamplerConfig, generator: torch.Generator) -> torch.Tensor:
    """(M,) grid of cfg.master_points points of kind cfg.grid (spec §5)."""
    m = cfg.master_points
    if cfg.grid == "uniform":
        return uniform_grid(m)
    return logit_normal_grid(m, generator, cfg.p_mean, cfg.p_std)


def sampler_grid(cfg: SamplerConfig, generator: torch.Generator) -> tuple[torch.Tensor, float]:
    """Times at which the denoiser is called, plus the exit time of the decoded state (spec §5).

    Returns (times, exit_time): full-span: the N-point grid (denoiser at its first N - 1 points; the
    decoded y_{N-1} sits at t = 1); early-stop: the first N - 1 master-grid points (exit = t_{N-2});
    renoise: the power grid ending at t* = the early-stop exit time for the same N, rho and seed; adaptive: as
    early-stop with N = max_nfe (a row's own exit time is where its answer settles).
    """
    grid = master_grid(cfg, generator)
    n = cfg.nfe
    if cfg.sampler == "full-span":
        return grid, float(grid[-1])
    t_exit = float(grid[n - 2])
    if cfg.sampler in ("early-stop", "adaptive"):   # adaptive: the prefix a row may run; it may exit earlier
        return grid[: n - 1].clone(), t_exit
    return power_grid(n, t_exit, cfg.p), t_exit
