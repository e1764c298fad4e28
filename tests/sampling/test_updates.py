import pytest
import torch

from elfreg import flow
from elfreg.flow import velocity
from elfreg.sampling import updates
from elfreg.sampling.updates import euler_step, renoise_step


def test_the_samplers_velocity_is_the_flow_velocity():
    """One home per formula: the update rules call elfreg.flow's velocity and broadcast, not copies of them."""
    assert updates.velocity is flow.velocity and updates.per_row is flow.per_row


def test_velocity_by_hand_with_clamp():
    d = torch.tensor([[1.0], [1.0]])
    y = torch.tensor([[0.0], [0.5]])
    t = torch.tensor([0.5, 0.99])
    # row 0: (1 - 0) / 0.5 = 2; row 1: 1 - 0.99 = 0.01 < 0.05, so (1 - 0.5) / 0.05 = 10
    assert velocity(d, y, t, 0.05).flatten().tolist() == pytest.approx([2.0, 10.0])


def test_euler_step_by_hand():
    y = torch.tensor([[[0.0, 2.0]]])
    d = torch.tensor([[[1.0, 1.0]]])
    # t = 0.2 -> c = 0.8, v = [1.25, -1.25]; h = 0.3 -> y' = [0.375, 1.625]
    out = euler_step(y, d, torch.tensor([0.2]), torch.tensor([0.5]), 0.05)
    assert out.flatten().tolist() == pytest.approx([0.375, 1.625])


def test_euler_step_to_one_lands_on_prediction_when_unclamped():
    y, d = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    out = euler_step(y, d, torch.tensor([0.4, 0.9]), torch.tensor([1.0, 1.0]), 0.05)
    assert torch.allclose(out, d, atol=1e-6)


def test_renoise_step_by_hand():
    x_hat = torch.tensor([[1.0, -1.0]])
    xi = torch.tensor([[0.5, 2.0]])
    # z = 0.25 x + 0.75 * 1.2 * 2 * xi = 0.25 x + 1.8 xi
    out = renoise_step(x_hat, torch.tensor([0.25]), xi, eta=1.2, sigma=2.0)
    assert out.flatten().tolist() == pytest.approx([0.25 + 0.9, -0.25 + 3.6])
