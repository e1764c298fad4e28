"""The ELF-REG training objective L = L_ELF + 0.5 L_REPA + 0.1 L_REG (spec §4).

One function per equation of the spec: the SC-CFG target (``sc_cfg_target``, its guidance term
``sc_cfg_guidance`` and clean-state form ``sc_cfg_x_star``), the text term ``elf_loss`` (with
``velocity_regression`` and ``token_cross_entropy``), ``repa_loss`` and ``reg_loss``; ``elf_reg_loss`` builds the
student's inputs (``student_inputs``), runs the self-conditioning passes (``self_condition``) and composes them.

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
from elfreg.flow import c_t, noisy_state, per_row, state_coefficients, t_from_normal, velocity, w_from_uniform
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

    def to(self, device: torch.device | str) -> "Draws":
        """The draws on ``device``; a tensor that serves two fields (see above) is moved once and still serves both."""
        moved: dict[int, Tensor] = {}

        def move(v):
            if isinstance(v, Tensor) and id(v) not in moved:
                moved[id(v)] = v.to(device)
            return moved[id(v)] if isinstance(v, Tensor) else v
        return Draws(**{k: move(v) for k, v in self.__dict__.items()})


def _lam(cfg: ObjectiveConfig, normal: Tensor) -> Tensor:
    """Decoder-input signal fraction lambda = sigmoid(mean + std N(0, 1)) (spec §4)."""
    return torch.sigmoid(cfg.decoder_lambda_mean + cfg.decoder_lambda_std * normal)


def draw(cfg: ObjectiveConfig, generators: list[torch.Generator], length: int, d: int, d_r: int | None) -> Draws:
    """Draw every random quantity of a step, example i from ``generators[i]`` only (CPU tensors).

    Per row: 3 uniforms (is_decoder, self_cond, w), one run of standard normals (t's, the state noise (L, d),
    lam's L) and, for a REG model, a second run (the REG noise (d_r), lam_r's), written in place into one buffer
    per kind; the laws (flow.t_from_normal, flow.w_from_uniform, ``_lam``) then apply to the whole batch at
    once. One noise serves the denoising and the decoder input (see ``Draws``). Per-row calls of a few numbers each
    were most of a demo step's draws; the streams differ from earlier versions, the laws do not
    (tests/test_objective.py checks them).
    """
    n = len(generators)
    k_state = length * d
    k = 1 + k_state + length
    normals = torch.empty(n, k)
    normals_r = torch.empty(n, d_r + 1) if d_r is not None else None
    uniforms = torch.empty(n, 3)
    for i, g in enumerate(generators):
        torch.rand(3, generator=g, out=uniforms[i])
        torch.randn(k, generator=g, out=normals[i])
        # The REG state's normals in a call of their own: a model with a REG token then draws exactly the text
        # draws of one without it (the ablation ladder pairs its arms per seed); in one longer call the generator's
        # last 16 values, which it redraws when the length is not a multiple of 16, would differ between the two.
        if normals_r is not None:
            torch.randn(d_r + 1, generator=g, out=normals_r[i])
    noise = normals[:, 1:1 + k_state].view(n, length, d)
    noise_r = normals_r[:, :d_r] if normals_r is not None else None
    return Draws(is_decoder=uniforms[:, 0] < cfg.decoder_prob,
                 t=t_from_normal(normals[:, 0], cfg.t_mean, cfg.t_std),
                 self_cond=uniforms[:, 1] < cfg.self_cond_prob,
                 w=w_from_uniform(uniforms[:, 2], cfg.w_min, cfg.w_max, cfg.w_law),
                 eps=noise, lam=_lam(cfg, normals[:, 1 + k_state:]), eps_dec=noise,
                 eps_r=noise_r, lam_r=_lam(cfg, normals_r[:, -1]) if normals_r is not None else None,
                 eps_r_dec=noise_r)


# -- the SC-CFG target (spec §4) ----------------------------------------------------------------------------------
def sc_cfg_guidance(b: Tensor, w: Tensor, v_sc: Tensor, v_no_sc: Tensor) -> Tensor:
    """b (1 - 1/w) (v_sc - v_no_sc), the guidance term of the SC-CFG target: v_sc, v_no_sc (B, ...), b, w (B,)
    (spec §4). The clean-state form's term is the same with x_sc, x_no_sc (``sc_cfg_x_star``). No grad."""
    delta = v_sc - v_no_sc
    return (per_row(b.to(delta.dtype) * (1.0 - 1.0 / w), delta) * delta).detach()


def sc_cfg_target(x: Tensor, z: Tensor, t: Tensor, b: Tensor, w: Tensor, v_sc: Tensor, v_no_sc: Tensor,
                  floor: float) -> Tensor:
    """v_target = (x - z)/c_t + b (1 - 1/w) (v_sc - v_no_sc), all (B, ...), b and w (B,) (spec §4); no grad."""
    return (velocity(x, z, t, floor) + sc_cfg_guidance(b, w, v_sc, v_no_sc)).detach()


def sc_cfg_x_star(x: Tensor, x_sc: Tensor, x_no_sc: Tensor, b: Tensor, w: Tensor) -> Tensor:
    """The SC-CFG target in clean-state form: x*_t = z_t + c_t v_target = x + b (1 - 1/w) (x_sc - x_no_sc).

    Since v_sc - v_no_sc = (x_sc - x_no_sc)/c_t (both velocities are taken at the same z_t, t), this is
    ``x_star(z, sc_cfg_target(...))`` without any velocity (tests/test_objective.py checks the identity); the loss
    uses it with ||v - v_target||^2 = c_t^-2 ||x_hat - x*_t||^2, which saves the (B, L, d) velocity arithmetic.
    """
    return (x + sc_cfg_guidance(b, w, x_sc, x_no_sc)).detach()


def x_star(z: Tensor, v_target: Tensor, t: Tensor, floor: float) -> Tensor:
    """x*_t = z_t + c_t v_target, so that ||v - v_target||^2 = c_t^-2 ||x_hat - x*_t||^2 (spec §4)."""
    return (z + per_row(c_t(t, floor), z) * v_target).detach()


# -- L_ELF (spec §4) ------------------------------------------------------------------------------------------------
def _select(mask: Tensor, values: Tensor) -> Tensor:
    """values where mask, exactly 0 elsewhere (broadcast): masked positions contribute nothing, even an inf or a NaN
    (frozen fp16 features can overflow), where multiplying by the mask would give inf * 0 = NaN."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))


def velocity_regression(x_hat: Tensor, x_target: Tensor, t: Tensor, floor: float) -> Tensor:
    """Per position ||v - v_target||^2 / d, computed as c_t^-2 ||x_hat - x*_t||^2 / d: x_hat, x*_t (B, L, d), t (B,)
    -> (B, L) (spec §4: the weight c_t^-2 applied once)."""
    inv_c2 = c_t(t, floor).reciprocal().square()[:, None]
    # mse_loss: the values of (x_hat - x*)^2 in one kernel forward and backward
    return F.mse_loss(x_hat, x_target, reduction="none").mean(-1) * inv_c2


def token_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Per position cross-entropy of the vocab head, in fp32: logits (n, L, V), targets (n, L) head ids -> (n, L)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)


def elf_loss(l2: Tensor, denoising: Tensor, ce: Tensor | None, decoding: Tensor | None,
             n_supervised: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """L_ELF = (sum of ||v - v_target||^2 / d over denoising positions + sum of CE over decoder positions) / N, and
    the two sums (logged apart) (spec §4: one denominator, the supervised response positions of all rows).

    l2 (B, L) from ``velocity_regression`` with ``denoising`` (B, L) bool, the positions it supervises; ce (n, L)
    from ``token_cross_entropy`` on the n decoder rows with ``decoding`` (n, L), or None; n_supervised: N.
    """
    l2_sum = _select(denoising, l2).sum()
    ce_sum = _select(decoding, ce).sum() if ce is not None else torch.zeros((), device=l2.device)
    return (l2_sum + ce_sum) / n_supervised.clamp_min(1), l2_sum, ce_sum


# -- L_REPA (spec §4) -----------------------------------------------------------------------------------------------
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


def repa_loss(pred: Tensor, teacher: Tensor, mask: Tensor, shift: int = 0, mean_pooled: bool = False,
              extra_pred: Tensor | None = None, extra_target: Tensor | None = None,
              denominator: Tensor | None = None) -> Tensor:
    """L_REPA: the mean of 1 - cos(p(u_i), h_i) over masked positions (+ the REG/OLT token) (spec §4).

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


def repa_mask(batch: TrainBatch, cfg: ObjectiveConfig) -> Tensor:
    """(B, L) bool: the positions REPA aligns, before any shift: response content tokens, plus the prompt's with
    ``objective.repa_on_prompt`` (spec §4)."""
    pm = batch.prompt_mask
    return batch.content_mask | (pm if cfg.repa_on_prompt else torch.zeros_like(pm))


# -- L_REG (spec §4) ------------------------------------------------------------------------------------------------
def reg_loss(r_hat: Tensor, r_t: Tensor, v_r_target: Tensor, t: Tensor, denoising: Tensor, floor: float,
             n_rows: Tensor) -> Tensor:
    """L_REG = sum over denoising rows of ||v_r - v_r_target||^2 / d_r, divided by n_rows, with v_r = (r_hat - r_t)/c_t
    (spec §4: the text term's velocity regression on the REG state, denoising rows only).

    r_hat, r_t, v_r_target: (B, d_r) prediction, input state and target (``reg_target``); t (B,); denoising (B,)
    bool; n_rows: the denominator (this batch's denoising rows, or their global count).
    """
    per_example = ((velocity(r_hat, r_t, t, floor) - v_r_target.detach()) ** 2).mean(-1)
    return _select(denoising, per_example).sum() / n_rows.clamp_min(1)


# -- composing them -------------------------------------------------------------------------------------------------
def loss_counts(batch: TrainBatch, draws: Draws, cfg: ObjectiveConfig, extra_token: str) -> dict[str, Tensor]:
    """Raw (unclamped) denominators of each loss term for one batch: {"elf", "repa", "reg"} (spec §4).

    elf: supervised response positions; repa: aligned positions (+ one per row for the REG/OLT token); reg: denoising
    rows. Summing them over ranks and micro-batches and passing the sums as ``elf_reg_loss(counts=...)`` makes the
    summed losses equal the loss of the whole global batch, whatever the world size or accumulation.
    """
    pm = batch.prompt_mask
    out = {"elf": (~pm).sum(), "reg": (~draws.is_decoder.to(pm.device)).sum()}
    mask = repa_mask(batch, cfg)
    if cfg.repa_target != "mean_pooled" and cfg.repa_shift == 1:
        mask = mask.clone()
        mask[:, 0] = False
    extra = pm.shape[0] if cfg.repa_on_extra_token and extra_token != "none" else 0
    out["repa"] = mask.sum() + extra
    return out


@dataclass
class LossOutput:
    """The total loss and every term, each with its own reduction (spec §4).

    parts: the weighted terms the total sums, with their graphs ({"elf": L_ELF, "repa": repa_weight L_REPA, "reg":
    reg_weight L_REG}, those the objective uses), for per-term gradients (elfreg.train.gradshare)."""

    loss: Tensor
    terms: dict[str, Tensor] = field(default_factory=dict)
    parts: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class StudentInputs:
    """What the student is given in a training step (spec §3-4), before self-conditioning fills ``q``.

    z (B, L, d): the clean prompt, then z_t on denoising rows and the decoder input on decoder rows; q (B, L, d): the
    clean prompt on denoising rows, 0 elsewhere; t (B,): t, or 1 on decoder rows; w (B,); r (B, d_r): the REG state's
    input (r_t, or its decoder input), or None without a REG token; r_q: its self-conditioning input (0), or None.
    """

    z: Tensor
    q: Tensor
    t: Tensor
    w: Tensor
    r: Tensor | None
    r_q: Tensor | None


def student_inputs(batch: TrainBatch, draws: Draws, cfg: ObjectiveConfig, extra_token: str,
                   reg_dim: int) -> StudentInputs:
    """The forward process of one batch (spec §3-4): prompt positions hold the clean x, denoising rows
    z_t = t x + (1 - t) sigma eps, decoder rows lam x + (1 - lam) s eps_dec; the REG state alike. draws on x's device.

    Built as one mix z = a x + b eps with per-position (a, b): the same values as building the three states and
    selecting, in two (B, L, d) products instead of eight passes.
    """
    x, pm = batch.x, batch.prompt_mask
    dec, den = draws.is_decoder, ~draws.is_decoder
    t = torch.where(dec, torch.ones_like(draws.t), draws.t)
    a_den, b_den = state_coefficients(draws.t[:, None], cfg.sigma)
    lam = draws.lam
    a = torch.where(dec[:, None], lam, a_den).masked_fill(pm, 1.0).unsqueeze(-1)
    b = torch.where(dec[:, None], (1.0 - lam) * cfg.decoder_noise_scale, b_den).masked_fill(pm, 0.0).unsqueeze(-1)
    noise = draws.eps if draws.eps is draws.eps_dec else torch.where(dec[:, None, None], draws.eps_dec, draws.eps)
    z = a * x + b * noise
    q = torch.where(pm.unsqueeze(-1) & den[:, None, None], x, 0.0)  # decoder mode: q = 0 everywhere
    r_in = None
    if extra_token == "reg":
        if batch.reg is not None:
            r = batch.reg
            r_den = noisy_state(r, draws.t, draws.eps_r, cfg.sigma)
            lam_r = draws.lam_r.unsqueeze(-1)
            r_dec = lam_r * r + (1.0 - lam_r) * cfg.decoder_noise_scale * draws.eps_r_dec
            r_in = torch.where(dec.unsqueeze(-1), r_dec, r_den)
        else:  # ELF-REG student trained without a teacher: the token still needs an input
            r_in = torch.zeros(x.shape[0], reg_dim, device=x.device)
    return StudentInputs(z=z, q=q, t=t, w=draws.w, r=r_in, r_q=torch.zeros_like(r_in) if r_in is not None else None)


@dataclass
class SelfConditioning:
    """The two gradient-free passes on the self-conditioned rows (b = 1) of a step (spec §4).

    rows (n,): their batch indices. x_no_sc, x_sc (n, L, d): the clean predictions of pass A (q = 0 on the response)
    and pass B (q = pass A's), the prompt positions holding the clean x; r_no_sc, r_sc (n, d_r): their REG
    predictions, or None.
    """

    rows: Tensor
    x_no_sc: Tensor
    x_sc: Tensor
    r_no_sc: Tensor | None
    r_sc: Tensor | None


@torch.no_grad()
def self_condition(student: ElfStudent, x: Tensor, prompt_mask: Tensor, inp: StudentInputs,
                   rows: Tensor) -> SelfConditioning:
    """Passes A and B on ``rows`` alone (spec §4): only those rows' outputs are used, and every row is computed
    independently of the others. x (B, L, d) clean states, prompt_mask (B, L)."""
    sub = lambda a: a[rows] if a is not None else None  # noqa: E731
    z, t, w, x_s, pm = inp.z[rows], inp.t[rows], inp.w[rows], x[rows], prompt_mask.unsqueeze(-1)[rows]
    out_a = student(z, inp.q[rows], t, w, reg=sub(inp.r), reg_q=sub(inp.r_q))
    x_a = torch.where(pm, x_s, out_a.x_hat)
    out_b = student(z, x_a, t, w, reg=sub(inp.r), reg_q=out_a.reg_hat)
    return SelfConditioning(rows, x_no_sc=x_a, x_sc=torch.where(pm, x_s, out_b.x_hat), r_no_sc=out_a.reg_hat,
                            r_sc=out_b.reg_hat)


def text_target(x: Tensor, w: Tensor, sc: SelfConditioning | None) -> Tensor:
    """x*_t of every row (B, L, d), the SC-CFG target in clean-state form (spec §4): x + b (1 - 1/w) (x_sc - x_no_sc)
    with b = 1 on the self-conditioned rows ``sc.rows`` and b = 0 (x*_t = x) on the others. No grad."""
    if sc is None:
        return x
    guidance = sc_cfg_guidance(torch.ones_like(w[sc.rows]), w[sc.rows], sc.x_sc, sc.x_no_sc)
    return x.index_add(0, sc.rows, guidance.to(x.dtype)).detach()


def reg_target(r: Tensor, r_t: Tensor, t: Tensor, w: Tensor, sc: SelfConditioning | None, floor: float) -> Tensor:
    """v_r_target of every row (B, d_r), the REG state's SC-CFG target (spec §4): (r - r_t)/c_t + b (1 - 1/w)
    (v_sc - v_no_sc), with b = 1 on the self-conditioned rows ``sc.rows`` (v_sc, v_no_sc the velocities of passes
    B and A's REG predictions) and b = 0 on the others. No grad."""
    target = velocity(r, r_t, t, floor)
    if sc is None or sc.r_sc is None:
        return target.detach()
    t_s, r_s = t[sc.rows], r_t[sc.rows]
    guidance = sc_cfg_guidance(torch.ones_like(t_s), w[sc.rows], velocity(sc.r_sc, r_s, t_s, floor),
                               velocity(sc.r_no_sc, r_s, t_s, floor))
    return target.index_add(0, sc.rows, guidance.to(target.dtype)).detach()


def _repa_predictions(student: ElfStudent, out, batch: TrainBatch,
                      cfg: ObjectiveConfig) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """(projected text states (B, L, d_t), projected REG/OLT token state (B, d_t) or None, its target or None)."""
    if cfg.repa_on_extra_token and out.repa_extra is not None:
        if batch.teacher_at_source is None:
            raise ValueError("REPA on the REG/OLT token needs batch.teacher_at_source")
        # One projector call for the token and the text positions: under autocast a weight used twice shares
        # one bf16 cast, and so sums its two gradients in bf16, only while no other thread clears autocast's
        # (process-wide) cast cache in between; one call makes runs side by side deterministic.
        both = student.repa_projector(torch.cat([out.repa_extra[:, None], out.repa_hidden], dim=1))
        return both[:, 1:], both[:, 0], batch.teacher_at_source
    return student.repa_projector(out.repa_hidden), None, None


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
    use_reg = cfg.use_reg and mcfg.extra_token == "reg"
    if use_reg and batch.reg is None:
        raise ValueError("objective.use_reg is on but the batch carries no REG target (teacher features missing)")
    if cfg.use_repa and (batch.teacher is None or student.repa_projector is None):
        raise ValueError("objective.use_repa is on but the batch has no teacher states or the model no projector")
    floor = cfg.c_t_floor
    draws = draws.to(dev)
    dec = draws.is_decoder
    den = ~dec
    inp = student_inputs(batch, draws, cfg, mcfg.extra_token, mcfg.reg_dim)

    # Self-conditioning (b = 1) on the denoising rows drawn for it: passes A and B give the SC-CFG targets, and the
    # gradient pass sees pass A's prediction as q (q and r_q are this function's own tensors: no copies).
    sc_rows = _rows(draws.self_cond & den)
    sc = self_condition(student, x, pm, inp, sc_rows) if len(sc_rows) else None
    x_target = text_target(x, inp.w, sc)
    v_r_target = reg_target(batch.reg, inp.r, inp.t, inp.w, sc, floor) if use_reg else None
    if sc is not None:
        inp.q[sc.rows] = sc.x_no_sc
        if inp.r_q is not None and sc.r_no_sc is not None:
            inp.r_q[sc.rows] = sc.r_no_sc

    # The gradient pass: one mixed forward over denoising and decoder rows.
    out = student(inp.z, inp.q, inp.t, inp.w, reg=inp.r, reg_q=inp.r_q, decoder=dec, repa=cfg.use_repa)
    resp = ~pm
    den_resp, dec_resp = resp & den[:, None], resp & dec[:, None]
    ce = None
    if out.logits is not None:
        ce = token_cross_entropy(out.logits, student.token_to_head_ids(batch.tokens[dec], where=resp[dec]))
    loss_elf, l2_sum, ce_sum = elf_loss(velocity_regression(out.x_hat, x_target, inp.t, floor), den_resp,
                                        ce, resp[dec], resp.sum() if counts is None else counts["elf"].to(dev))
    terms = {
        "loss_elf": loss_elf.detach(),
        "l2": (l2_sum / den_resp.sum().clamp_min(1)).detach(),
        "ce": (ce_sum / dec_resp.sum().clamp_min(1)).detach(),
        "decoder_frac": dec.float().mean(),
    }
    total = loss_elf
    parts = {"elf": loss_elf}

    if cfg.use_repa:
        pred, extra_pred, extra_target = _repa_predictions(student, out, batch, cfg)
        loss_repa = repa_loss(pred, batch.teacher, repa_mask(batch, cfg), cfg.repa_shift,
                              cfg.repa_target == "mean_pooled", extra_pred, extra_target,
                              None if counts is None else counts["repa"].to(dev))
        terms["loss_repa"] = loss_repa.detach()
        parts["repa"] = cfg.repa_weight * loss_repa
        total = total + parts["repa"]

    if use_reg:
        loss_reg = reg_loss(out.reg_hat, inp.r, v_r_target, inp.t, den, floor,
                            den.sum() if counts is None else counts["reg"].to(dev))
        terms["loss_reg"] = loss_reg.detach()
        parts["reg"] = cfg.reg_weight * loss_reg
        total = total + parts["reg"]

    terms["loss"] = total.detach()
    return LossOutput(loss=total, terms=terms, parts=parts)


def _rows(mask: Tensor) -> Tensor:
    """The indices (n,) of the rows where a (B,) mask holds."""
    return mask.nonzero(as_tuple=True)[0]
