"""The diagnostic path is the sampler's path: closed form for a constant network, equality with sample()."""

import math

import pytest
import torch

from elfreg.diagnose.path import draw_start_noise, euler_path, path_grids
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.samplers import sample

from ._nets import ConstConfig, ConstantNet, student_inputs, tiny_student


def _const_setup(seed=0):
    cfg_m = ConstConfig()
    g = torch.Generator().manual_seed(5)
    c = torch.randn(1, cfg_m.max_len, cfg_m.feature_dim, generator=g)
    c_r = torch.randn(1, cfg_m.reg_dim, generator=g)
    net = ConstantNet(c, c_r, cfg_m)
    x = torch.randn(2, cfg_m.max_len, cfg_m.feature_dim, generator=g)
    mask = torch.zeros(2, cfg_m.max_len, dtype=torch.bool)
    mask[0, :2] = True
    mask[1, :3] = True
    return net, c, c_r, x, mask


def test_constant_network_follows_the_closed_form_euler_path():
    # uniform grid of 41 points (dt = 1/40): without the clamp y_j - c = (1 - t_j)(y_0 - c); the clamp
    # c_t = max(1 - t, 0.05) bites at t_39 = 0.975, where the step halves the gap: y_40 - c = 0.0125 (y_0 - c).
    net, c, c_r, x, mask = _const_setup()
    keys = [(0, 0), (1, 0)]
    cfg = SamplerConfig(sampler="full-span", nfe=41, grid="uniform", sigma=2.0, seed=3)
    eps, eps_r = draw_start_noise(keys, 3, 6, 4, 3)
    keep = mask.unsqueeze(-1)
    c_rows = torch.where(keep, x, c)            # prompt slots hold the clean prompt, as in the sampler
    y0 = torch.where(keep, x, 2.0 * eps)
    r0 = 2.0 * eps_r
    steps = list(euler_path(net, x, mask, cfg, keys))
    assert len(steps) == 40
    for st in steps:
        t = st.j / 40
        assert torch.allclose(st.d, c_rows)
        gap = 1 - t   # exact up to y_39 (the step from t = 0.95 has c_t = 0.05 = 1 - t, no clamp yet)
        assert torch.allclose(st.y - c_rows, gap * (y0 - c_rows), atol=1e-5), st.j
        assert torch.allclose(st.r - c_r, gap * (r0 - c_r), atol=1e-5), st.j
    assert torch.allclose(steps[-1].y_next - c_rows, 0.0125 * (y0 - c_rows), atol=1e-6)
    assert torch.allclose(steps[-1].r_next - c_r, 0.0125 * (r0 - c_r), atol=1e-6)
    assert [k for k, _ in net.calls] == ["denoiser"] * 40


def test_logit_normal_path_of_a_constant_network_lands_on_c():
    # every step keeps y_j - c = (1 - t_j)(y_0 - c) while 1 - t_j >= 0.05, and the last step (to t = 1) closes it
    net, c, c_r, x, mask = _const_setup()
    cfg = SamplerConfig(sampler="full-span", nfe=16, seed=1)
    steps = list(euler_path(net, x, mask, cfg, [(0, 0), (1, 0)]))
    grid = path_grids(cfg, [(0, 0), (1, 0)])
    assert grid[:, -2].max() < 0.95
    c_rows = torch.where(mask.unsqueeze(-1), x, c)
    assert torch.allclose(steps[-1].y_next, c_rows, atol=1e-5)


@pytest.mark.parametrize("extra_token", ["reg", "olt"])
def test_readout_j_is_early_stop_with_j_plus_2_nfe(extra_token):
    net = tiny_student(extra_token)
    x, mask = student_inputs(net, 3)
    keys = [(0, 0), (1, 0), (2, 1)]
    m = 16
    cfg = SamplerConfig(sampler="full-span", nfe=m, seed=4, w=2.0)
    steps = list(euler_path(net, x, mask, cfg, keys))
    for n, rho in ((2, 8), (4, 4), (8, 2)):   # rho * N = M: the same master grid
        es = sample(net, x, mask, SamplerConfig(sampler="early-stop", nfe=n, rho=rho, seed=4, w=2.0), keys)
        assert torch.allclose(es.text_state, steps[n - 2].d, atol=1e-5)
        assert torch.allclose(es.exit_time.float(), steps[n - 2].t, atol=1e-7)
        if extra_token == "reg":
            assert torch.allclose(es.reg_state, steps[n - 2].dr, atol=1e-5)
    full = sample(net, x, mask, cfg, keys)
    assert torch.allclose(full.text_state, steps[-1].y_next, atol=1e-5)


def test_discrete_end_point_identity():
    # d_j - y_{M-1} = (c_j - (1 - t_j)) v_j + sum_{l=j}^{M-2} dt_l (v_j - v_l)   (paper eq. 13-14)
    net = tiny_student()
    x, mask = student_inputs(net, 2)
    cfg = SamplerConfig(sampler="full-span", nfe=10, grid="uniform", seed=0)   # uniform: the clamp is active
    steps = list(euler_path(net, x, mask, cfg, [(0, 0), (1, 0)]))
    y_end = steps[-1].y_next.double()
    for j in (0, 4, 8):
        sj = steps[j]
        t_j = float(sj.t[0])
        c_j = max(1 - t_j, 0.05)
        rhs = (c_j - (1 - t_j)) * sj.v.double()
        for sl in steps[j:]:
            rhs = rhs + float(sl.t_next[0] - sl.t[0]) * (sj.v.double() - sl.v.double())
        assert torch.allclose(sj.d.double() - y_end, rhs, atol=1e-4), j
    assert math.isclose(float(steps[8].t[0]), 8 / 9, rel_tol=1e-6)


def test_bad_inputs():
    net, c, c_r, x, mask = _const_setup()
    cfg = SamplerConfig(sampler="full-span", nfe=4)
    with pytest.raises(ValueError, match="one \\(prompt_index, sample_index\\) key per row"):
        list(euler_path(net, x, mask, cfg, [(0, 0)]))
    with pytest.raises(ValueError, match="prompt_mask"):
        list(euler_path(net, x, mask[:, :3], cfg, [(0, 0), (1, 0)]))
