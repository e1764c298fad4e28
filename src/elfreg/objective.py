"""The ELF-REG training objective L = L_ELF + 0.5 L_REPA + 0.1 L_REG (spec §4).

Randomness is drawn up front into ``Draws`` (per example, from per-example generators), so the loss itself is
a deterministic function of (weights, batch, draws): tests set draws by hand, and the trainer derives each
example's generator from (seed, epoch, global example index) so results do not depend on the world size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from elfreg.config import ObjectiveConfig
from elfreg.flow import _bcast, c_t, noisy_state, state_coefficients, t_from_normal, velocity, w_from_uniform
from elfreg.model.student import ElfStudent


@dataclass
class TrainBatch:
    """One batch of canvases with frozen features (standardised where the spec says so).

    x: (B, L, d) encoder states; tokens: (B, L) ids; prompt_mask: (B, L) bool; content_mask: (B, L) bool (response
    content tokens: no special tokens, no EOS padding); teacher: (B, L, d_t) REPA targets; reg: (B, d_r) REG
    target; teacher_at_source: (B, d_t) REPA target of the REG/OLT token.
    """

    x: Tensor
    tokens: Tensor
    prompt_mask: Tensor
    content_mask: Tensor
    teacher: Tensor | None = None
    reg: Tensor | None = None
    teacher_at_source: Tensor | None = None

    def to(self, device: torch.device | str) -> "TrainBatch":
        return TrainBatch(**{k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in self.__dict__.items()})


@dataclass
class Draws:
    """Per-example random draws of one training step (spec §4). Shapes: (B,) unless noted.

    A row is either a denoising row (it reads eps, eps_r) or a decoder row (it reads eps_dec, eps_r_dec), never
    both, so ``draw`` fills each pair from one noise tensor (the same tensor object); tests may set them apart.
    """

    is_decoder: Tensor  # bool
    t: Tensor
    self_cond: Tensor  # bool, b
    w: Tensor
    eps: Tensor  # (B, L, d)
    lam: Tensor  # (B, L) decoder-input signal fraction
    eps_dec: Tensor  # (B, L, d)
    eps_r: Tensor | None = None  # (B, d_r)
    lam_r: Tensor | None = None  # (B,)
    eps_r_dec: Tensor | None = None  # (B, d_r)


def _lam(cfg: ObjectiveConfig, normal: Tensor) -> Tensor:
    """Decoder-input signal fraction lambda = sigmoid(mean + std N(0, 1)) (spec §4)."""
    return torch.sigmoid(cfg.decoder_lambda_mean + cfg.decoder_lambda_std * normal)


def draw(cfg: ObjectiveConfig, generators: list[torch.Generator], length: int, d: int, d_r: int | None) -> Draws:
    """Draw every random quantity of a step, example i from ``generators[i]`` only (CPU tensors).

    Two calls per row: 3 uniforms (is_decoder, self_cond, w) and one run of standard normals (t's, the state
    noise (L, d), lam's L, then for a REG model the REG noise (d_r) and lam_r's), written in place into one
    buffer per kind; the laws (flow.t_from_normal, flow.w_from_uniform, ``_lam``) then apply to the whole batch at
    once. One noise serves the denoising and the decoder input (see ``Draws``). Per-row calls of a few numbers each
    were most of a demo step's draws; the streams differ from earlier versions, the laws do not
    (tests/test_objective.py checks them).
    """
    n = len(generators)
    k_state = length * d
    k = 1 + k_state + length + ((d_r + 1) if d_r is not None else 0)
    normals = torch.empty(n, k)
    uniforms = torch.empty(n, 3)
    for i, g in enumerate(generators):
        torch.rand(3, generator=g, out=uniforms[i])
        torch.randn(k, generator=g, out=normals[i])
    noise = normals[:, 1:1 + k_state].view(n, length, d)
    at = 1 + k_state + length
    noise_r = normals[:, at:at + d_r] if d_r is not None else None
    return Draws(is_decoder=uniforms[:, 0] < cfg.decoder_prob,
                 t=t_from_normal(normals[:, 0], cfg.t_mean, cfg.t_std),
                 self_cond=uniforms[:, 1] < cfg.self_cond_prob,
                 w=w_from_uniform(uniforms[:, 2], cfg.w_min, cfg.w_max, cfg.w_law),
                 eps=noise, lam=_lam(cfg, normals[:, 1 + k_state:at]), eps_dec=noise,
                 eps_r=noise_r, lam_r=_lam(cfg, normals[:, -1]) if d_r is not None else None, eps_r_dec=noise_r)


def _guide(b: Tensor, w: Tensor, like: Tensor) -> Tensor:
    """The SC-CFG weight b (1 - 1/w) per row, shaped to broadcast against ``like`` (spec §4)."""
    return _bcast(b.to(like.dtype) * (1.0 - 1.0 / w), like)


def sc_cfg_target(x: Tensor, z: Tensor, t: Tensor, b: Tensor, w: Tensor, v_sc: Tensor, v_no_sc: Tensor,
                  floor: float) -> Tensor:
    """v_target = (x - z)/c_t + b (1 - 1/w) (v_sc - v_no_sc), all (B, ...), b and w (B,) (spec §4); no grad."""
    return ((x - z) / _bcast(c_t(t, floor), z) + _guide(b, w, z) * (v_sc - v_no_sc)).detach()


def sc_cfg_x_star(x: Tensor, x_sc: Tensor, x_no_sc: Tensor, b: Tensor, w: Tensor) -> Tensor:
    """The SC-CFG target in clean-state form: x*_t = z_t + c_t v_target = x + b (1 - 1/w) (x_sc - x_no_sc).

    Since v_sc - v_no_sc = (x_sc - x_no_sc)/c_t (both velocities are taken at the same z_t, t), this is
    ``x_star(z, sc_cfg_target(...))`` without any velocity (tests/test_objective.py checks the identity); the loss
    uses it with ||v - v_target||^2 = c_t^-2 ||x_hat - x*_t||^2, which saves the (B, L, d) velocity arithmetic.
    """
    return (x + _guide(b, w, x) * (x_sc - x_no_sc)).detach()


def x_star(z: Tensor, v_target: Tensor, t: Tensor, floor: float) -> Tensor:
    """x*_t = z_t + c_t v_target, so that ||v - v_target||^2 = c_t^-2 ||x_hat - x*_t||^2 (spec §4)."""
    return (z + _bcast(c_t(t, floor), z) * v_target).detach()


def cosine_to(pred: Tensor, target: Tensor, eps: float = 1e-8) -> Tensor:
    """cos(pred, target) over the last dim in fp32, as ``F.cosine_similarity`` (each norm clamped at ``eps``), with
    no gradient into ``target`` (REPA's targets are frozen teacher states).

    The target is normalised once, so the gradient flows only through pred's dot product with it and pred's norm:
    (B, L) divisions in place of F.cosine_similarity's two broadcast (B, L, d_t) divisions and their backward,
    which took ~20 % of an ELF-REG demo step (benchmarks/bench_demo_step.py --profile). Same values up to rounding.
    """
    t = target.detach().float()
    t_hat = t / torch.linalg.vector_norm(t, dim=-1, keepdim=True).clamp_min(eps)
    p = pred.float()
    return (p * t_hat).sum(-1) / torch.linalg.vector_norm(p, dim=-1).clamp_min(eps)


def _select(mask: Tensor, values: Tensor) -> Tensor:
    """values where mask, exactly 0 elsewhere (broadcast): masked positions contribute nothing, even an inf or a NaN
    (frozen fp16 features can overflow), where multiplying by the mask would give inf * 0 = NaN."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))


def repa_loss(pred: Tensor, teacher: Tensor, mask: Tensor, shift: int = 0, mean_pooled: bool = False,
              extra_pred: Tensor | None = None, extra_target: Tensor | None = None,
              denominator: Tensor | None = None) -> Tensor:
    """Mean of 1 - cos(p(u_i), h_i) over masked positions (+ the REG/OLT token) (spec §4).

    pred, teacher: (B, L, d_t); mask: (B, L) bool, positions to align. shift=1 aligns student position i with teacher
    position i - 1 (position 0 then has no target). mean_pooled: every position's target is the row's mean teacher
    state over the masked positions. extra_pred/extra_target: (B, d_t), one more term per row. denominator: divide
    the summed terms by this count instead of this batch's own (a global count across ranks / micro-batches).
    """
    mask = mask.clone()
    target = teacher
    if mean_pooled:
        kept = _select(mask.unsqueeze(-1), teacher)
        target = (kept.sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp_min(1).unsqueeze(-1)).expand_as(teacher)
    elif shift == 1:
        target = torch.cat([torch.zeros_like(teacher[:, :1]), teacher[:, :-1]], dim=1)
        mask[:, 0] = False
    elif shift != 0:
        raise ValueError(f"objective.repa_shift must be 0 or 1, got {shift}")
    # the target is zeroed off the mask too: a cosine with an inf there would give the pred a NaN gradient
    total = _select(mask, 1.0 - cosine_to(pred, _select(mask.unsqueeze(-1), target))).sum()
    count = mask.sum()
    if extra_pred is not None and extra_target is not None:
        total = total + (1.0 - cosine_to(extra_pred, extra_target)).sum()
        count = count + extra_pred.shape[0]
    return total / (count if denominator is None else denominator).clamp_min(1)


def loss_counts(batch: TrainBatch, draws: Draws, cfg: ObjectiveConfig, extra_token: str) -> dict[str, Tensor]:
    """Raw (unclamped) denominators of each loss term for one batch: {"elf", "repa", "reg"} (spec §4).

    elf: supervised response positions; repa: aligned positions (+ one per row for the REG/OLT token); reg: denoising
    rows. Summing them over ranks and micro-batches and passing the sums as ``elf_reg_loss(counts=...)`` makes the
    summed losses equal the loss of the whole global batch, whatever the world size or accumulation.
    """
    pm = batch.prompt_mask
    out = {"elf": (~pm).sum(), "reg": (~draws.is_decoder.to(pm.device)).sum()}
    mask = batch.content_mask | (pm if cfg.repa_on_prompt else torch.zeros_like(pm))
    if cfg.repa_target != "mean_pooled" and cfg.repa_shift == 1:
        mask = mask.clone()
        mask[:, 0] = False
    extra = pm.shape[0] if cfg.repa_on_extra_token and extra_token != "none" else 0
    out["repa"] = mask.sum() + extra
    return out


@dataclass
class LossOutput:
    """The total loss and every term, each with its own reduction (spec §4)."""

    loss: Tensor
    terms: dict[str, Tensor] = field(default_factory=dict)


def _rows(mask: Tensor) -> Tensor:
    return mask.nonzero(as_tuple=True)[0]


def elf_reg_loss(student: ElfStudent, batch: TrainBatch, draws: Draws, cfg: ObjectiveConfig,
                 counts: dict[str, Tensor] | None = None) -> LossOutput:
    """L = L_ELF + repa_weight L_REPA + reg_weight L_REG for one batch (spec §4).

    L_ELF: (sum of per-token ||v - v_target||^2 / d over denoising rows + sum of token CE over decoder rows) divided
    by the number of supervised response positions of all rows (the reference's shared denominator; EOS padding is
    supervised). L_REPA: response content tokens (+ the REG/OLT token), in both branches. L_REG: velocity
    regression of the REG state / d_r, denoising rows only. counts: global denominators from ``loss_counts``
    (summed over ranks / micro-batches); default: this batch's own.
    """
    mcfg = student.config
    x, pm = batch.x, batch.prompt_mask
    dev = x.device
    b_sz, length, d = x.shape
    dr = {k: (v.to(dev) if isinstance(v, Tensor) else v) for k, v in draws.__dict__.items()}
    dec, sc = dr["is_decoder"], dr["self_cond"] & ~dr["is_decoder"]
    den = ~dec
    pm3 = pm.unsqueeze(-1)
    resp = ~pm
    use_reg = cfg.use_reg and mcfg.extra_token == "reg"
    if use_reg and batch.reg is None:
        raise ValueError("objective.use_reg is on but the batch carries no REG target (teacher features missing)")
    if cfg.use_repa and (batch.teacher is None or student.repa_projector is None):
        raise ValueError("objective.use_repa is on but the batch has no teacher states or the model no projector")
    floor = cfg.c_t_floor

    # Forward process (spec §3): prompt positions always hold the clean x, denoising rows z_t, decoder rows the
    # decoder input lam x + (1 - lam) s eps. Built as one mix z = a x + b eps with per-position (a, b): the same
    # values as building the three states and selecting, in two (B, L, d) products instead of eight passes.
    t = torch.where(dec, torch.ones_like(dr["t"]), dr["t"])
    a_den, b_den = state_coefficients(dr["t"][:, None], cfg.sigma)
    lam = dr["lam"]
    a = torch.where(dec[:, None], lam, a_den).masked_fill(pm, 1.0).unsqueeze(-1)
    b = torch.where(dec[:, None], (1.0 - lam) * cfg.decoder_noise_scale, b_den).masked_fill(pm, 0.0).unsqueeze(-1)
    noise = dr["eps"] if dr["eps"] is dr["eps_dec"] else torch.where(dec[:, None, None], dr["eps_dec"], dr["eps"])
    z = a * x + b * noise
    w = dr["w"]
    q = torch.where(pm3 & den[:, None, None], x, 0.0)  # decoder mode: q = 0 everywhere

    r_in = r = None
    if mcfg.extra_token == "reg":
        if batch.reg is not None:
            r = batch.reg
            r_den = noisy_state(r, dr["t"], dr["eps_r"], cfg.sigma)
            lam_r = dr["lam_r"].unsqueeze(-1)
            r_dec = lam_r * r + (1.0 - lam_r) * cfg.decoder_noise_scale * dr["eps_r_dec"]
            r_in = torch.where(dec.unsqueeze(-1), r_dec, r_den)
        else:  # ELF-REG student trained without a teacher: the token still needs an input
            r_in = torch.zeros(b_sz, mcfg.reg_dim, device=dev)
    qr = torch.zeros_like(r_in) if r_in is not None else None

    # Self-conditioning and the SC-CFG target: two gradient-free passes on the self-conditioned rows (spec §4).
    # The text term is c_t^-2 ||x_hat - x*_t||^2 / d = ||v - v_target||^2 / d, with x*_t = x on the rows without
    # self-conditioning (their v_target is (x - z)/c_t) and sc_cfg_x_star on the others.
    x_tgt = x
    v_r_tgt = velocity(r, r_in, t, floor) if use_reg else None
    if sc.any():
        with torch.no_grad():
            # Only the self-conditioned rows' outputs are used, so both passes run on those rows alone (every row
            # is computed independently of the others).
            sc_idx = _rows(sc)
            sub = lambda a: a[sc_idx] if a is not None else None  # noqa: E731
            z_s, t_s, w_s, x_s, pm_s = z[sc_idx], t[sc_idx], w[sc_idx], x[sc_idx], pm3[sc_idx]
            out_a = student(z_s, q[sc_idx], t_s, w_s, reg=sub(r_in), reg_q=sub(qr))
            x_a = torch.where(pm_s, x_s, out_a.x_hat)
            out_b = student(z_s, x_a, t_s, w_s, reg=sub(r_in), reg_q=out_a.reg_hat)
            x_b = torch.where(pm_s, x_s, out_b.x_hat)
            x_tgt = x.clone()
            x_tgt[sc_idx] = sc_cfg_x_star(x_s, x_b, x_a, torch.ones_like(t_s), w_s)
            q[sc_idx] = x_a  # q and qr are this function's own tensors: no copies
            if use_reg:
                v_r_tgt = v_r_tgt.clone()
                v_r_tgt[sc_idx] = sc_cfg_target(
                    r[sc_idx], r_in[sc_idx], t_s, torch.ones_like(t_s), w_s,
                    velocity(out_b.reg_hat, r_in[sc_idx], t_s, floor),
                    velocity(out_a.reg_hat, r_in[sc_idx], t_s, floor), floor)
            if qr is not None and out_a.reg_hat is not None:
                qr[sc_idx] = out_a.reg_hat

    # The gradient pass: one mixed forward over denoising and decoder rows.
    out = student(z, q, t, w, reg=r_in, reg_q=qr, decoder=dec, repa=cfg.use_repa)
    inv_c2 = c_t(t, floor).reciprocal().square()[:, None]
    # (B, L): ||v - v_target||^2 / d; mse_loss: the values of (x_hat - x*)^2 in one kernel forward and backward
    l2_tok = F.mse_loss(out.x_hat, x_tgt, reduction="none").mean(-1) * inv_c2
    den_resp = resp & den[:, None]
    dec_resp = resp & dec[:, None]
    l2_sum = _select(den_resp, l2_tok).sum()
    ce_sum = torch.zeros((), device=dev)
    if out.logits is not None:
        targets = student.token_to_head_ids(batch.tokens[dec])
        ce = F.cross_entropy(out.logits.float().flatten(0, 1), targets.flatten(), reduction="none")
        ce_sum = _select(resp[dec], ce.view_as(targets)).sum()
    n_resp = (resp.sum() if counts is None else counts["elf"].to(dev)).clamp_min(1)
    loss_elf = (l2_sum + ce_sum) / n_resp
    terms = {
        "loss_elf": loss_elf.detach(),
        "l2": (l2_sum / den_resp.sum().clamp_min(1)).detach(),
        "ce": (ce_sum / dec_resp.sum().clamp_min(1)).detach(),
        "decoder_frac": dec.float().mean(),
    }
    total = loss_elf

    if cfg.use_repa:
        mask = batch.content_mask | (pm if cfg.repa_on_prompt else torch.zeros_like(pm))
        extra_pred = extra_tgt = None
        if cfg.repa_on_extra_token and out.repa_extra is not None:
            if batch.teacher_at_source is None:
                raise ValueError("REPA on the REG/OLT token needs batch.teacher_at_source")
            # One projector call for the token and the text positions: under autocast a weight used twice shares
            # one bf16 cast, and so sums its two gradients in bf16, only while no other thread clears autocast's
            # (process-wide) cast cache in between; one call makes runs side by side deterministic.
            both = student.repa_projector(torch.cat([out.repa_extra[:, None], out.repa_hidden], dim=1))
            pred, extra_pred, extra_tgt = both[:, 1:], both[:, 0], batch.teacher_at_source
        else:
            pred = student.repa_projector(out.repa_hidden)
        loss_repa = repa_loss(pred, batch.teacher, mask, cfg.repa_shift, cfg.repa_target == "mean_pooled",
                              extra_pred, extra_tgt, None if counts is None else counts["repa"].to(dev))
        terms["loss_repa"] = loss_repa.detach()
        total = total + cfg.repa_weight * loss_repa

    if use_reg:
        v_r = velocity(out.reg_hat, r_in, t, floor)
        per_row = ((v_r - v_r_tgt.detach()) ** 2).mean(-1)  # ||v_r - v_r_target||^2 / d_r
        loss_reg = _select(den, per_row).sum() / (den.sum() if counts is None else counts["reg"].to(dev)).clamp_min(1)
        terms["loss_reg"] = loss_reg.detach()
        total = total + cfg.reg_weight * loss_reg

    terms["loss"] = total.detach()
    return LossOutput(loss=total, terms=terms)
