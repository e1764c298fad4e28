import math

import pytest
import torch

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.grids import logit_normal_grid, power_grid, sampler_grid, uniform_grid
from elfreg.sampling.seeding import STREAM_GRID, sample_generator


def test_logit_normal_grid_has_endpoints_and_sorted_seeded_draws():
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    grid = logit_normal_grid(10, g1)
    assert grid.shape == (10,) and grid[0] == 0 and grid[-1] == 1
    assert torch.all(grid[1:] >= grid[:-1])
    # the interior is exactly the sorted sigmoid(N(-1.5, 0.8)) draws of the same generator
    n = torch.randn(8, generator=g2, dtype=torch.float64)
    expected = torch.sigmoid(-1.5 + 0.8 * n).sort().values
    assert torch.equal(grid[1:-1], expected)


def test_uniform_grid():
    assert torch.allclose(uniform_grid(5), torch.tensor([0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64))


def test_power_grid_by_hand():
    # N = 5, t* = 0.08, p = 0.5: t_i = 0.08 * sqrt(i / 3), i = 0..3
    got = power_grid(5, 0.08, 0.5)
    expected = [0.0, 0.08 * math.sqrt(1 / 3), 0.08 * math.sqrt(2 / 3), 0.08]
    assert got.tolist() == pytest.approx(expected, abs=1e-15)
    assert power_grid(4, 0.1, 2.0).tolist() == pytest.approx([0.0, 0.025, 0.1])
    assert power_grid(2, 0.3, 0.5).tolist() == [0.0]


def test_early_stop_exit_is_t_n_minus_2_of_rho_n_master_grid():
    cfg = SamplerConfig(sampler="early-stop", nfe=64, rho=8)
    assert cfg.master_points == 512
    times, t_exit = sampler_grid(cfg, sample_generator(0, 0, 0, STREAM_GRID))
    full = logit_normal_grid(512, sample_generator(0, 0, 0, STREAM_GRID))
    assert times.shape == (63,) and torch.equal(times, full[:63])
    assert t_exit == float(full[62])


def test_renoise_grid_ends_at_early_stop_exit_time():
    for n, rho in [(4, 8), (16, 2), (64, 8)]:
        es = SamplerConfig(sampler="early-stop", nfe=n, rho=rho, seed=5)
        rn = SamplerConfig(sampler="renoise", nfe=n, rho=rho, seed=5, p=0.5)
        _, t_es = sampler_grid(es, sample_generator(5, 1, 2, STREAM_GRID))
        times, t_rn = sampler_grid(rn, sample_generator(5, 1, 2, STREAM_GRID))
        assert t_rn == t_es and times.shape == (n - 1,)
        assert float(times[-1]) == pytest.approx(t_es) and float(times[0]) == 0.0


def test_renoise_grid_small_n_by_hand():
    # N = 3, rho = 1, uniform master grid [0, 0.5, 1]: t* = t_1 = 0.5; power grid t_i = 0.5 (i/1)^p -> [0, 0.5]
    cfg = SamplerConfig(sampler="renoise", nfe=3, rho=1, grid="uniform", p=0.5)
    times, t_exit = sampler_grid(cfg, torch.Generator())
    assert t_exit == 0.5 and times.tolist() == [0.0, 0.5]
    # N = 4, rho = 2, uniform master grid of 8 points: t* = t_2 = 2/7; grid 2/7 * (i/2)^0.5
    cfg = SamplerConfig(sampler="renoise", nfe=4, rho=2, grid="uniform", p=0.5)
    times, t_exit = sampler_grid(cfg, torch.Generator())
    assert t_exit == pytest.approx(2 / 7)
    assert times.tolist() == pytest.approx([0.0, 2 / 7 * math.sqrt(0.5), 2 / 7])


def test_full_span_grid_has_n_points():
    cfg = SamplerConfig(sampler="full-span", nfe=6, grid="uniform")
    times, t_exit = sampler_grid(cfg, torch.Generator())
    assert times.tolist() == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0]) and t_exit == 1.0


def test_exit_time_for_n64_rho8_averages_near_paper_value():
    # Paper: mean 0.0825, range 0.0755-0.0858 over 4 seeds. The 62nd of 510 sorted logit-normal draws
    # sits near the 12.1% quantile: sigmoid(-1.5 + 0.8 * Phi^-1(62/511)) ~= 0.080.
    cfg = SamplerConfig(sampler="early-stop", nfe=64, rho=8)
    exits = torch.tensor([sampler_grid(cfg, sample_generator(s, 0, 0, STREAM_GRID))[1] for s in range(64)])
    q = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(62 / 511))
    predicted = float(torch.sigmoid(-1.5 + 0.8 * q))
    assert abs(float(exits.mean()) - predicted) < 0.004
    assert 0.0755 - 0.01 < float(exits.mean()) < 0.0858 + 0.01
    assert float(exits.min()) > 0.05 and float(exits.max()) < 0.12
