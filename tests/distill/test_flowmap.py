"""The flow map's semigroup target: where the model is an exact flow map, the two-hop target is the one-hop jump."""

import math

import pytest
import torch

from elfreg.distill.flowmap import MIN_JUMP, jump, jump_times, row_kinds, two_hop_target
from elfreg.flow import c_t
from elfreg.model.student import StudentOutput


class ExactFlowMap(torch.nn.Module):
    """The exact flow map of dz/dt = -(z - c) (z_t = c + (z_s - c) e^{-(t - s)}), written as the clean prediction
    whose Euler jump lands on it: x_hat = z + c_s/(t - s) (X_{s,t}(z) - z). ``exact=False`` breaks the semigroup."""

    def __init__(self, c: float = 0.7, exact: bool = True):
        super().__init__()
        self.c, self.exact = c, exact

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False, t_to=None):
        s, e = t[:, None, None], t_to[:, None, None]
        rate = 1.0 if self.exact else 1.0 + 3.0 * (e - s)      # a rate that depends on the jump: not a semigroup
        target = self.c + (z - self.c) * torch.exp(-rate * (e - s))
        reg_hat = None
        if reg is not None:
            sr, er = t[:, None], t_to[:, None]
            reg_target = self.c + (reg - self.c) * torch.exp(-(er - sr))
            reg_hat = reg + c_t(t, 0.05)[:, None] / (er - sr) * (reg_target - reg)
        return StudentOutput(x_hat=z + c_t(t, 0.05)[:, None, None] / (e - s) * (target - z), reg_hat=reg_hat)


def _inputs(b=3, length=4, d=2):
    g = torch.Generator().manual_seed(1)
    z = torch.randn(b, length, d, generator=g, dtype=torch.float64)
    keep = torch.zeros(b, length, 1, dtype=torch.bool)
    keep[:, 0] = True
    xp = torch.zeros(b, length, d, dtype=torch.float64)
    z = torch.where(keep, xp, z)
    s = torch.tensor([0.0, 0.2, 0.5], dtype=torch.float64)
    t = torch.tensor([1.0, 0.6, 0.9], dtype=torch.float64)
    return z, torch.zeros_like(z), s, t, torch.full((b,), 2.0, dtype=torch.float64), keep, xp


def test_two_hop_target_equals_the_one_hop_jump_of_an_exact_flow_map():
    net = ExactFlowMap()
    z, q, s, t, w, keep, xp = _inputs()
    one_hop = torch.where(keep, xp, net(z, q, s, w, t_to=t).x_hat)
    x_star, _ = two_hop_target(net, z, q, s, t, w, keep, xp, 0.05)
    assert torch.allclose(x_star, one_hop, atol=1e-9)
    # the jump itself lands on the exact solution
    z_t, *_ = jump(net, z, q, s, t, w, keep, xp, 0.05)
    exact = torch.where(keep, xp, 0.7 + (z - 0.7) * torch.exp(-(t - s))[:, None, None])
    assert torch.allclose(z_t, exact, atol=1e-9)


def test_two_hop_target_differs_where_the_model_is_not_a_flow_map():
    net = ExactFlowMap(exact=False)
    z, q, s, t, w, keep, xp = _inputs()
    one_hop = torch.where(keep, xp, net(z, q, s, w, t_to=t).x_hat)
    x_star, _ = two_hop_target(net, z, q, s, t, w, keep, xp, 0.05)
    assert not torch.allclose(x_star, one_hop, atol=1e-3)
    assert torch.equal(x_star[:, 0], xp[:, 0])                 # the prompt's target is the clean prompt


def test_the_reg_state_gets_its_own_two_hop_target():
    net = ExactFlowMap()
    z, q, s, t, w, keep, xp = _inputs()
    r = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    one_hop = net(z, q, s, w, reg=r, reg_q=torch.zeros_like(r), t_to=t).reg_hat
    _, r_star = two_hop_target(net, z, q, s, t, w, keep, xp, 0.05, r, torch.zeros_like(r))
    assert torch.allclose(r_star, one_hop, atol=1e-9)


def test_row_kinds_and_jump_times():
    u = torch.tensor([0.0, 0.24, 0.25, 0.34, 0.35, 0.99])
    kind = row_kinds(u, 0.25, 0.1)
    assert kind.tolist() == [0, 0, 1, 1, 2, 2]
    t = torch.full((6,), 0.4)
    s, t_to = jump_times(t, kind, torch.tensor([0.5, 0.5, 0.5, 0.5, 0.0, 0.999999]))
    assert s.tolist() == pytest.approx([0.4, 0.4, 0.0, 0.0, 0.4, 0.4])
    assert t_to[:2].tolist() == pytest.approx([0.4, 0.4]) and t_to[2:4].tolist() == [1.0, 1.0]
    assert t_to[4].item() == pytest.approx(1.0)
    assert t_to[5].item() == pytest.approx(0.4 + 0.6 * MIN_JUMP, abs=1e-5)
    # log-uniform jumps: u = 0.5 covers a tenth of the rest of the path (uniform would cover about half)
    _, mid = jump_times(torch.tensor([0.4]), torch.tensor([2]), torch.tensor([0.5]))
    assert mid.item() == pytest.approx(0.4 + 0.6 * 0.1)
    assert not math.isnan(float(t_to.sum()))
