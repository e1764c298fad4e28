"""Progressive distillation (PD) as the ELF reference does it (docs/distill.md, "Progressive distillation").

Rounds of n = 16, 8, 4, 2, 1 student steps. In a round, a denoising row starts at t_s = (1 - 1/n) t with t
logit-normal (the training law) and ends at t_t = t_s + 1/n. The teacher (the original model's EMA weights, every
round) runs ``sub_steps`` Euler sub-steps over a per-row sorted logit-normal sub-grid of [t_s, t_t], chaining its own
clean prediction as self-conditioning with the row's w; with n x sub_steps = ``teacher_grid`` (64), a sub-step spans
1/64 on average in every round. The student regresses ``targets.jump_target`` of where the teacher lands.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from elfreg.flow import t_from_normal
from elfreg.sampling.updates import euler_step


@dataclass(frozen=True)
class PDRound:
    """One PD round: the student learns ``steps`` steps, each from ``sub_steps`` teacher sub-steps."""

    index: int       # 1-based
    steps: int       # n: student steps of the round
    sub_steps: int   # teacher Euler sub-steps per student step

    @property
    def step(self) -> float:
        """1/n: the time one student step spans."""
        return 1.0 / self.steps

    @property
    def sub_step(self) -> float:
        """The time a teacher sub-step spans on average: step / sub_steps = 1 / teacher_grid."""
        return self.step / self.sub_steps


def pd_rounds(rounds: list[int], teacher_grid: int) -> list[PDRound]:
    """The rounds of a schedule: student steps n_k and teacher sub-steps teacher_grid / n_k (ValueError naming the
    field when n_k does not divide teacher_grid)."""
    out = []
    for i, n in enumerate(rounds):
        if teacher_grid % n:
            raise ValueError(f"distill.rounds: {n} student steps do not divide distill.teacher_grid={teacher_grid}")
        out.append(PDRound(i + 1, n, teacher_grid // n))
    return out


def start_times(t: Tensor, step: float) -> Tensor:
    """t_s = (1 - step) t: a logit-normal training time scaled so the step [t_s, t_s + step] ends by 1."""
    return t * (1.0 - step)


def sub_grid(t_s: Tensor, step: float, normals: Tensor, mean: float, std: float) -> Tensor:
    """(B, K + 1) per-row sub-grid of [t_s, t_s + step]: both ends and K - 1 sorted logit-normal points between,
    t_s + step sigmoid(mean + std n) from the row's standard normals ``normals`` (B, K - 1) (K = sub-steps)."""
    inner = t_from_normal(normals, mean, std).sort(dim=-1).values
    end = inner.new_ones((inner.shape[0], 1))   # shaped from the rows, not from inner: K = 1 has no inner points
    u = torch.cat([end - 1, inner, end], dim=1)
    return t_s[:, None] + step * u.to(t_s.dtype)


@torch.no_grad()
def teacher_chain(teacher, z: Tensor, q: Tensor, grid: Tensor, w: Tensor, keep: Tensor, x_prompt: Tensor,
                  floor: float, r: Tensor | None = None, r_q: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The teacher's Euler path over each row's ``grid`` (B, K + 1) from state z (B, L, d), self-conditioning q:
    returns (z at the grid's end, the REG state there or None). Each sub-step's clean prediction (prompt slots: the
    clean prompt, keep (B, L, 1)) is the next sub-step's self-conditioning, at the row's own w (B,)."""
    for i in range(grid.shape[1] - 1):
        t, t_next = grid[:, i], grid[:, i + 1]
        out = teacher(z, q, t, w, reg=r, reg_q=r_q)
        d = torch.where(keep, x_prompt, out.x_hat.to(z.dtype))
        z = euler_step(z, d, t, t_next, floor)
        q = d
        if r is not None:
            dr = out.reg_hat.to(r.dtype)
            r, r_q = euler_step(r, dr, t, t_next, floor), dr
    return z, r
