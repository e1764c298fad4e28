"""The loss of one distillation step (docs/distill.md): PD or flow-map rows and the decoder's CE rows, one forward.

Each example takes the decoder branch with probability ``objective.decoder_prob`` (0.2, as in training: token CE of
the vocab head on the decoder input) or the distillation branch. Every row's loss is a per-example mean over its
response positions (plain x-space squared error / CE); the step's loss is their sum over the global batch divided by
the global batch size (per-example token mean, then batch mean). An ELF-REG student regresses the REG state's target
beside the text's, with ``objective.reg_weight``.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch import Tensor, nn

from elfreg.config import ObjectiveConfig
from elfreg.distill import flowmap, pd
from elfreg.distill.targets import jump_target, row_mse
from elfreg.objective import LossOutput, TrainBatch, student_inputs, token_cross_entropy


class DistillLoss(nn.Module):
    """loss(student, batch, draws, objective, counts) of one method and round; holds the frozen teacher network."""

    def __init__(self, teacher: nn.Module, method: str, round_: pd.PDRound | None = None,
                 diagonal_frac: float = 0.5, full_frac: float = 0.2) -> None:
        super().__init__()
        if method not in ("pd", "flowmap"):
            raise ValueError(f"distill.method: unknown {method!r}; choose pd or flowmap")
        if method == "pd" and round_ is None:
            raise ValueError("a PD loss needs its round")
        self.teacher = teacher.eval().requires_grad_(False)
        self.method, self.round, self.diagonal_frac, self.full_frac = method, round_, diagonal_frac, full_frac
        self.target_net: nn.Module | None = None
        self._target_weights: dict[str, Tensor] | None = None

    def ema_targets(self, student: nn.Module, weights: dict[str, Tensor]) -> None:
        """Make the flow map's two-hop targets with ``weights`` (the run's EMA, updated in place after every step:
        ``distill.target_weights=ema``) instead of the student's current weights: a frozen copy of the student,
        loaded with them at the start of every step."""
        if self.method != "flowmap":
            raise ValueError("distill.target_weights: only the flow map makes its own targets")
        self.target_net = copy.deepcopy(student).eval().requires_grad_(False)
        self._target_weights = weights

    def train(self, mode: bool = True) -> "DistillLoss":   # the teacher (and the target copy) stay in eval mode
        super().train(mode)
        self.teacher.eval()
        if self.target_net is not None:
            self.target_net.eval()
        return self

    def forward(self, student, batch: TrainBatch, draws, cfg: ObjectiveConfig,
                counts: dict[str, Tensor] | None = None) -> LossOutput:
        targets = student
        if self.target_net is not None:
            named = list(self.target_net.named_parameters())
            with torch.no_grad():
                torch._foreach_copy_([p for _, p in named], [self._target_weights[n].to(p.dtype) for n, p in named])
            targets = self.target_net
        return distill_loss(student, self.teacher, batch, draws, cfg, self.method, self.round, self.diagonal_frac,
                            self.full_frac, None if counts is None else counts.get("rows"), targets)


@torch.no_grad()
def _own_prediction(student, z: Tensor, q: Tensor, t: Tensor, w: Tensor, keep: Tensor, x_prompt: Tensor,
                    r: Tensor | None, t_to: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """The student's own clean prediction with no self-conditioning (as the sampler's first call sees it), no
    gradient: what a self-conditioned row gets as q (training's pass A)."""
    extra = {} if t_to is None else {"t_to": t_to}
    out = student(z, q, t, w, reg=r, reg_q=None if r is None else torch.zeros_like(r), **extra)
    return torch.where(keep, x_prompt, out.x_hat.float()), (out.reg_hat.float() if r is not None else None)


def distill_loss(student, teacher, batch: TrainBatch, draws, cfg: ObjectiveConfig, method: str,
                 round_: pd.PDRound | None, diagonal_frac: float, full_frac: float,
                 rows: Tensor | None = None, targets=None) -> LossOutput:
    """The step's loss (module docstring); ``rows``: the global batch size (default: this batch's); ``targets``: the
    network that makes the flow map's two-hop targets (default: the student itself, no gradient)."""
    mcfg = student.config
    x, pm = batch.x, batch.prompt_mask
    dev, floor = x.device, cfg.c_t_floor
    draws = draws.to(dev)
    dec = draws.is_decoder
    den = ~dec
    has_reg = mcfg.extra_token == "reg" and batch.reg is not None
    if mcfg.extra_token == "reg" and batch.reg is None:
        raise ValueError("an ELF-REG student is distilled with its REG state: the batch carries no REG target "
                         "(the run needs backbones.teacher, the model's REG teacher)")

    # Start times: PD t_s = (1 - 1/n) t; flow map s per row kind (t_to = s, 1 or a later time).
    t_to = None
    if method == "pd":
        t_start = pd.start_times(draws.t, round_.step)
    else:
        kind = flowmap.row_kinds(draws.u[:, 0], diagonal_frac, full_frac)
        t_start, t_to = flowmap.jump_times(draws.t, kind, draws.u[:, 1])
        t_to = torch.where(dec, torch.ones_like(t_to), t_to)   # decoder rows: t = 1, no jump
    inp = student_inputs(batch, dataclasses.replace(draws, t=t_start), cfg, mcfg.extra_token, mcfg.reg_dim)
    keep = pm.unsqueeze(-1)
    rows_den = den.nonzero(as_tuple=True)[0]
    sel = lambda a: a[rows_den] if a is not None else None  # noqa: E731
    z, t_s, w, xp, kp = inp.z[rows_den], inp.t[rows_den], inp.w[rows_den], x[rows_den].float(), keep[rows_den]
    r = sel(inp.r) if has_reg else None
    ts_to = sel(t_to)

    # Self-conditioning: with probability self_cond_prob a row sees the student's own prediction (no gradient).
    q = inp.q[rows_den].clone()
    r_q = torch.zeros_like(r) if r is not None else None
    sc = draws.self_cond[rows_den]
    if sc.any():
        d0, dr0 = _own_prediction(student, z[sc], q[sc], t_s[sc], w[sc], kp[sc], xp[sc],
                                  r[sc] if r is not None else None, ts_to[sc] if ts_to is not None else None)
        q[sc] = d0
        if r_q is not None:
            r_q[sc] = dr0

    # Targets (no gradient). A batch may hold no distillation row (every row drew the decoder branch).
    x_star, r_star = z, r
    with torch.no_grad():
        if not len(rows_den):
            pass
        elif method == "pd":
            grid = pd.sub_grid(t_s, round_.step, draws.sub_normals[rows_den, :round_.sub_steps - 1],
                               cfg.t_mean, cfg.t_std)
            z_t, r_t = pd.teacher_chain(teacher, z, q, grid, w, kp, xp, floor, r, r_q)
            x_star = jump_target(z, z_t, t_s, grid[:, -1], floor)
            r_star = jump_target(r, r_t, t_s, grid[:, -1], floor) if r is not None else None
        else:
            x_star, r_star = _flowmap_targets(student if targets is None else targets, teacher, z, q, t_s, ts_to, w,
                                              kp, xp, floor, r, r_q)

    inp.q[rows_den] = q
    if inp.r_q is not None and r_q is not None:
        inp.r_q[rows_den] = r_q
    extra = {"t_to": t_to} if method == "flowmap" else {}
    out = student(inp.z, inp.q, inp.t, inp.w, reg=inp.r, reg_q=inp.r_q, decoder=dec, **extra)

    resp = ~pm
    n_rows = torch.tensor(float(x.shape[0]), device=dev) if rows is None else rows.to(dev).float()
    mse = row_mse(out.x_hat[rows_den], x_star, resp[rows_den])
    ce_sum = torch.zeros((), device=dev)
    ce_mean = torch.zeros((), device=dev)
    if out.logits is not None:
        rdec = resp[dec]
        ce_tok = token_cross_entropy(out.logits, student.token_to_head_ids(batch.tokens[dec], where=rdec))
        ce_rows = torch.where(rdec, ce_tok, torch.zeros((), device=dev)).sum(-1) / rdec.sum(-1).clamp_min(1)
        ce_sum, ce_mean = ce_rows.sum(), ce_rows.mean()
    loss_text = (mse.sum() + ce_sum) / n_rows.clamp_min(1)
    total = loss_text
    terms = {"loss_elf": loss_text.detach(), "l2": (mse.mean() if len(mse) else torch.zeros((), device=dev)).detach(),
             "ce": ce_mean.detach(), "decoder_frac": dec.float().mean()}
    if r_star is not None:
        loss_reg = row_mse(out.reg_hat[rows_den], r_star).sum() / n_rows.clamp_min(1)
        terms["loss_reg"] = loss_reg.detach()
        total = total + cfg.reg_weight * loss_reg
    terms["loss"] = total.detach()
    return LossOutput(loss=total, terms=terms)


def _flowmap_targets(student, teacher, z: Tensor, q: Tensor, s: Tensor, t: Tensor, w: Tensor, keep: Tensor,
                     x_prompt: Tensor, floor: float, r: Tensor | None, r_q: Tensor | None
                     ) -> tuple[Tensor, Tensor | None]:
    """Per denoising row: the teacher's prediction where t = s, the two-hop target elsewhere."""
    x_star = torch.empty_like(z)
    r_star = torch.empty_like(r) if r is not None else None
    diag = t <= s
    sub = lambda a, m: a[m] if a is not None else None  # noqa: E731
    if diag.any():
        out = teacher(z[diag], q[diag], s[diag], w[diag], reg=sub(r, diag), reg_q=sub(r_q, diag))
        x_star[diag] = torch.where(keep[diag], x_prompt[diag], out.x_hat.float())
        if r_star is not None:
            r_star[diag] = out.reg_hat.float()
    far = ~diag
    if far.any():
        xs, rs = flowmap.two_hop_target(student, z[far], q[far], s[far], t[far], w[far], keep[far], x_prompt[far],
                                        floor, sub(r, far), sub(r_q, far))
        x_star[far] = xs
        if r_star is not None:
            r_star[far] = rs
    return x_star, r_star
