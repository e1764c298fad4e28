"""Progressive distillation's pieces: the target against a hand computation, the teacher's sub-grid per round, the
teacher's Euler chain."""

import pytest
import torch

from elfreg.distill.pd import PDRound, pd_rounds, start_times, sub_grid, teacher_chain
from elfreg.distill.targets import jump_target, row_mse
from elfreg.model.student import StudentOutput


def test_target_against_a_hand_computation():
    # one row, two features: x* = z_s + (1 - t_s)/(t_t - t_s) (z_t - z_s)
    z_s = torch.tensor([[[1.0, -2.0]]])
    z_t = torch.tensor([[[1.5, -1.0]]])
    t_s, t_t = torch.tensor([0.2]), torch.tensor([0.45])
    x_star = jump_target(z_s, z_t, t_s, t_t)
    # (1 - 0.2)/(0.45 - 0.2) = 3.2: 1 + 3.2 * 0.5 = 2.6; -2 + 3.2 * 1 = 1.2
    assert torch.allclose(x_star, torch.tensor([[[2.6, 1.2]]]))
    # and one Euler step of the student's prediction x* from (z_s, t_s) lands on the teacher's z_t
    from elfreg.sampling.updates import euler_step

    assert torch.allclose(euler_step(z_s, x_star, t_s, t_t, 0.05), z_t)


def test_row_mse_is_a_per_example_token_mean():
    pred = torch.zeros(2, 3, 2)
    target = torch.tensor([[[1.0, 1.0], [2.0, 2.0], [float("inf"), 0.0]], [[3.0, 3.0], [0.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    # row 0: mean of 1 and 4 (the masked inf never enters); row 1: 9
    assert torch.equal(row_mse(pred, target, mask), torch.tensor([2.5, 9.0]))


@pytest.mark.parametrize("rounds, grid_n", [([16, 8, 4, 2, 1], 64), ([4, 2, 1], 64), ([16, 8, 4, 2, 1], 16)])
def test_rounds_and_their_sub_grids(rounds, grid_n):
    """grid 16: round 1 has one sub-step (no point inside the step; it used to lose the step's ends)."""
    gen = torch.Generator().manual_seed(0)
    for r in pd_rounds(rounds, grid_n):
        assert r.steps * r.sub_steps == grid_n and r.sub_step == pytest.approx(1 / grid_n)   # step / sub-steps
        t = torch.sigmoid(-1.5 + 0.8 * torch.randn(500, generator=gen))
        t_s = start_times(t, r.step)
        assert float(t_s.max()) <= 1 - r.step
        grid = sub_grid(t_s, r.step, torch.randn(500, r.sub_steps - 1, generator=gen), -1.5, 0.8)
        assert grid.shape == (500, r.sub_steps + 1)
        assert torch.equal(grid[:, 0], t_s)
        assert torch.allclose(grid[:, -1], t_s + r.step)
        assert bool((grid.diff(dim=1) >= 0).all())                      # sorted per row
        assert (grid[:, -1] - grid[:, 0]).mean() / r.sub_steps == pytest.approx(1 / grid_n)
        if r.sub_steps > 2:   # logit-normal inside: the points crowd the start of the step (median of u 0.18)
            u = (grid[:, 1:-1] - t_s[:, None]) / r.step
            assert 0.1 < float(u.median()) < 0.3


def test_a_round_that_does_not_divide_the_grid_is_refused():
    with pytest.raises(ValueError, match="do not divide"):
        pd_rounds([16, 3], 64)
    assert pd_rounds([1], 64) == [PDRound(1, 1, 64)]


class LinearDenoiser(torch.nn.Module):
    """x_hat = a z + b q + c t: a network whose Euler chain can be written by hand."""

    def __init__(self, a=0.5, b=0.25, c=1.0):
        super().__init__()
        self.a, self.b, self.c = a, b, c
        self.calls = []

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False):
        self.calls.append((q.clone(), t.clone(), w.clone()))
        return StudentOutput(x_hat=self.a * z + self.b * q + self.c * t[:, None, None])


def test_teacher_chain_chains_its_own_prediction_with_the_same_w():
    net = LinearDenoiser()
    z0 = torch.tensor([[[7.0], [2.0]]])               # position 0 is the prompt (its clean x: 7)
    keep = torch.tensor([[[True], [False]]])
    xp = torch.tensor([[[7.0], [0.0]]])
    q0 = torch.tensor([[[7.0], [0.5]]])
    grid = torch.tensor([[0.1, 0.2, 0.4]])
    w = torch.tensor([2.5])
    z, r = teacher_chain(net, z0.clone(), q0, grid, w, keep, xp, 0.05)
    # by hand, the response position: d0 = 0.5*2 + 0.25*0.5 + 0.1 = 1.225; z1 = 2 + 0.1 (1.225 - 2)/0.9
    d0 = 0.5 * 2 + 0.25 * 0.5 + 0.1
    z1 = 2 + 0.1 * (d0 - 2) / 0.9
    d1 = 0.5 * z1 + 0.25 * d0 + 0.2
    z2 = z1 + 0.2 * (d1 - z1) / 0.8
    assert z[0, 1, 0].item() == pytest.approx(z2, rel=1e-6)
    assert z[0, 0, 0].item() == pytest.approx(7.0)     # the prompt slot keeps the clean prompt
    assert r is None
    assert [float(c[1]) for c in net.calls] == pytest.approx([0.1, 0.2])
    assert all(float(c[2]) == 2.5 for c in net.calls)
    assert net.calls[1][0][0, 1, 0].item() == pytest.approx(d0)   # the second call's self-conditioning is d0
