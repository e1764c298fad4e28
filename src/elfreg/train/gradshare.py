"""Per-term gradient shares: how much of the gradient at the student's blocks each auxiliary term contributes.

The objective sums L_ELF, repa_weight L_REPA and reg_weight L_REG; an auxiliary term whose gradient is large and
nearly orthogonal to the text's takes a share of every block update away from the text (Muon's update has a fixed
size whatever the gradient's). For each weighted term k, on one batch with the step's draws and weights:
``grad_rel_k`` = ||g_k|| / ||g_ELF|| and ``grad_cos_k`` = cos(g_k, g_ELF), g being the gradient with respect to every
parameter of the student's transformer blocks, flattened into one vector.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from elfreg.config import ObjectiveConfig
from elfreg.objective import Draws, TrainBatch, elf_reg_loss

AUX_TERMS = ("repa", "reg")


def block_parameters(student: torch.nn.Module) -> list[Tensor]:
    """The parameters of the student's transformer blocks, in order."""
    return [p for p in student.blocks.parameters() if p.requires_grad]


def term_gradients(parts: dict[str, Tensor], params: list[Tensor]) -> dict[str, list[Tensor]]:
    """{term: its gradient with respect to each of ``params``}; a parameter a term does not reach gets zeros."""
    out = {}
    names = list(parts)
    for i, name in enumerate(names):
        grads = torch.autograd.grad(parts[name], params, retain_graph=i < len(names) - 1, allow_unused=True)
        out[name] = [(g if g is not None else torch.zeros_like(p)).detach() for g, p in zip(grads, params)]
    return out


def _dot(a: list[Tensor], b: list[Tensor]) -> float:
    """The dot product of two gradients given per parameter, accumulated in float64 (an fp32 sum over millions of
    entries is off in the fourth digit)."""
    return sum(float(torch.sum(x.double() * y.double())) for x, y in zip(a, b, strict=True))


def shares(grads: dict[str, list[Tensor]]) -> dict[str, float]:
    """{grad_rel_<term>, grad_cos_<term>} of each auxiliary term against grads["elf"] (each a list of per-parameter
    gradients); nan where L_ELF's gradient (or the term's, for the cosine) is zero."""
    g_elf = grads["elf"]
    n_elf = math.sqrt(_dot(g_elf, g_elf))
    out = {}
    for name in AUX_TERMS:
        if name not in grads:
            continue
        g = grads[name]
        n = math.sqrt(_dot(g, g))
        out[f"grad_rel_{name}"] = n / n_elf if n_elf > 0 else math.nan
        out[f"grad_cos_{name}"] = _dot(g, g_elf) / (n * n_elf) if n > 0 and n_elf > 0 else math.nan
    return out


def grad_shares(student: torch.nn.Module, batch: TrainBatch, draws: Draws, objective: ObjectiveConfig,
                autocast=None) -> dict[str, float]:
    """The gradient shares of ``objective``'s auxiliary terms on one batch (its own denominators), from one more
    forward and one backward per term; the student's ``.grad`` and weights are left as they were. ``autocast``: a
    context manager for the forward (the run's precision). Empty for a run without auxiliary terms."""
    import contextlib

    if not (objective.use_repa or objective.use_reg and student.config.extra_token == "reg"):
        return {}   # no auxiliary term: nothing to measure, no pass spent
    with autocast if autocast is not None else contextlib.nullcontext():
        out = elf_reg_loss(student, batch, draws, objective)
    if not any(name in out.parts for name in AUX_TERMS):
        return {}
    return shares(term_gradients(out.parts, block_parameters(student)))
