import math

import torch

from elfreg.flow import c_t, noisy_state, per_row, sample_t, sample_w, snr, velocity


def test_c_t_floor_near_one():
    t = torch.tensor([0.0, 0.5, 0.94, 0.95, 0.96, 0.999, 1.0])
    assert torch.allclose(c_t(t), torch.tensor([1.0, 0.5, 0.06, 0.05, 0.05, 0.05, 0.05]), atol=1e-6)


def test_z_t_hand_values():
    x = torch.tensor([[1.0, -2.0]])
    eps = torch.tensor([[0.5, 1.0]])
    # t = 0.99: 0.99 * x + 0.01 * 2 * eps
    z = noisy_state(x, torch.tensor([0.99]), eps, sigma=2.0)
    assert torch.allclose(z, torch.tensor([[0.99 + 0.01, -1.98 + 0.02]]), atol=1e-6)
    assert torch.allclose(noisy_state(x, torch.tensor([1.0]), eps, 2.0), x)
    assert torch.allclose(noisy_state(x, torch.tensor([0.0]), eps, 2.0), 2 * eps)


def test_velocity_uses_clamped_c_t():
    z = torch.tensor([[[0.0]]])
    x_hat = torch.tensor([[[1.0]]])
    # t = 0.99 -> c_t = 0.05 (not 0.01): v = 1 / 0.05 = 20
    assert torch.allclose(velocity(x_hat, z, torch.tensor([0.99])), torch.tensor([[[20.0]]]))
    assert torch.allclose(velocity(x_hat, z, torch.tensor([0.5])), torch.tensor([[[2.0]]]))


def test_per_row_broadcasts_a_row_coefficient_in_the_states_dtype():
    coef = torch.tensor([2.0, 3.0])
    like = torch.ones(2, 3, 4, dtype=torch.bfloat16)
    out = per_row(coef, like)
    assert out.shape == (2, 1, 1) and out.dtype == torch.bfloat16
    assert (out * like)[1].unique().item() == 3.0


def test_time_and_w_laws():
    g = torch.Generator().manual_seed(0)
    t = sample_t(200_000, -1.5, 0.8, g)
    assert abs(t.median().item() - 1 / (1 + math.exp(1.5))) < 0.005
    w = sample_w(200_000, 0.5, 5.0, "uniform", g)
    assert w.min() >= 0.5 and w.max() <= 5.0 and abs(w.median().item() - 2.75) < 0.02
    wl = sample_w(200_000, 0.5, 5.0, "log_uniform", g)
    # median of 1 + w is the geometric mean sqrt(1.5 * 6) = 3
    assert wl.min() >= 0.5 - 1e-6 and wl.max() <= 5.0 + 1e-6 and abs(wl.median().item() - 2.0) < 0.02


def test_snr():
    assert torch.allclose(snr(torch.tensor([0.5]), 2.0), torch.tensor([0.25]))
