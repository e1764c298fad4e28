"""A distillation step's per-example draws: the training step's (``elfreg.objective.draw``), then, from the same
row generator, the standard normals of the teacher's sub-grid and two uniforms (the flow map's row kind and jump
length). Drawn whatever the method and round, so a row's draws depend only on its key."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from elfreg.config import ObjectiveConfig
from elfreg.objective import Draws, draw


@dataclass
class DistillDraws(Draws):
    """``Draws`` plus sub_normals (B, teacher_grid - 1) and u (B, 2)."""

    sub_normals: Tensor | None = None
    u: Tensor | None = None

    def to(self, device: torch.device | str) -> "DistillDraws":
        base = Draws.to(Draws(**{f.name: getattr(self, f.name) for f in fields(Draws)}), device)
        return DistillDraws(**base.__dict__, sub_normals=self.sub_normals.to(device), u=self.u.to(device))


def distill_draws(cfg: ObjectiveConfig, generators: list[torch.Generator], length: int, d: int, d_r: int | None,
                  teacher_grid: int) -> DistillDraws:
    """Every random quantity of a distillation step, example i from ``generators[i]`` only (CPU tensors)."""
    base = draw(cfg, generators, length, d, d_r)
    n = len(generators)
    sub = torch.empty(n, max(teacher_grid - 1, 0))
    u = torch.empty(n, 2)
    for i, g in enumerate(generators):
        torch.randn(sub.shape[1], generator=g, out=sub[i])
        torch.rand(2, generator=g, out=u[i])
    return DistillDraws(**base.__dict__, sub_normals=sub, u=u)
