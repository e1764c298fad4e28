"""The flow-map student (docs/distill.md, "Flow map"): one network X_{s,t} that jumps from time s to any t >= s.

The network keeps the denoiser's output, a clean prediction x_hat(z, q, s, w, t): the jump is one Euler step of it,
X_{s,t}(z) = z + (t - s)(x_hat - z)/c_s, so at t = s it is the plain denoiser and the samplers' Euler loop runs it
unchanged, each call told the next grid time (``elfreg.sampling.trajectory``). One training stage mixes three kinds
of denoising rows:

- s = t rows regress the teacher's prediction at (z_s, s) (the instantaneous velocity: the flow the map integrates);
- s < t rows regress the two-hop target: jump to the midpoint m = (s + t)/2, then from m to t, with the student's
  own weights and no gradient; ``targets.jump_target`` turns where it lands into the clean prediction of one jump;
- a share of those rows are the whole path, s = 0 and t = 1: what one-step generation asks.
"""

from __future__ import annotations

import torch
from torch import Tensor

from elfreg.sampling.updates import euler_step
from elfreg.distill.targets import jump_target

KINDS = ("diagonal", "full", "jump")


def jump(network, z: Tensor, q: Tensor, s: Tensor, t: Tensor, w: Tensor, keep: Tensor, x_prompt: Tensor,
         floor: float, r: Tensor | None = None, r_q: Tensor | None = None
         ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """X_{s,t}: (state at t, the clean prediction d (prompt slots: the clean prompt), REG state at t, REG prediction)
    of one network call at (z, q, s, w) told the end t; z (B, L, d), s, t, w (B,), keep (B, L, 1)."""
    out = network(z, q, s, w, reg=r, reg_q=r_q, t_to=t)
    d = torch.where(keep, x_prompt, out.x_hat.to(z.dtype))
    dr = out.reg_hat.to(r.dtype) if r is not None else None
    return euler_step(z, d, s, t, floor), d, (euler_step(r, dr, s, t, floor) if r is not None else None), dr


@torch.no_grad()
def two_hop_target(network, z: Tensor, q: Tensor, s: Tensor, t: Tensor, w: Tensor, keep: Tensor, x_prompt: Tensor,
                   floor: float, r: Tensor | None = None, r_q: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The semigroup target of the jump s -> t (t > s): X_{m,t}(X_{s,m}(z)) with m = (s + t)/2 and no gradient, as
    the clean prediction of one jump (``targets.jump_target``); returns (text target (B, L, d), REG target or None).
    The second hop is self-conditioned on the first's prediction, as the sampler chains them."""
    m = (s + t) / 2
    z_m, d1, r_m, dr1 = jump(network, z, q, s, m, w, keep, x_prompt, floor, r, r_q)
    z_t, _, r_t, _ = jump(network, z_m, d1, m, t, w, keep, x_prompt, floor, r_m, dr1)
    x_star = jump_target(z, z_t, s, t, floor)
    r_star = jump_target(r, r_t, s, t, floor) if r is not None else None
    return x_star, r_star


def row_kinds(u: Tensor, diagonal_frac: float, full_frac: float) -> Tensor:
    """Each row's kind from a uniform draw u (B,): 0 diagonal (s = t) with probability diagonal_frac, 1 the whole path
    (0 -> 1) with probability full_frac, else 2 (a jump s -> t)."""
    return (u >= diagonal_frac).long() + (u >= diagonal_frac + full_frac).long()


MIN_JUMP = 0.01   # a jump covers at least this share of the rest of the path: the target divides by t - s


def jump_times(t: Tensor, kind: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """(s, t_to) per row: s the logit-normal time t, t_to = s (diagonal); (0, 1) (the whole path); s and
    t_to = s + (1 - s) f, f = MIN_JUMP^u log-uniform on (MIN_JUMP, 1] from a uniform u in [0, 1) (a jump).

    Log-uniform, so every scale of jump gets the same share of rows: a jump's target rests on two jumps half its
    length, which must be learned first (docs/distill.md: uniform f gave 75 % at NFE 2 where log-uniform gave 80 %,
    one seed)."""
    s = torch.where(kind == 1, torch.zeros_like(t), t)
    f = MIN_JUMP ** u
    t_to = torch.where(kind == 0, s, torch.where(kind == 1, torch.ones_like(t), s + (1 - s) * f))
    return s, t_to
