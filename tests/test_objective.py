import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from elfreg.config import ObjectiveConfig, model_preset
from elfreg.flow import velocity
from elfreg.model.student import ElfStudent
from elfreg.objective import (SelfConditioning, TrainBatch, cosine_to, draw, elf_loss, elf_reg_loss, reg_loss, reg_target,
                              repa_loss, sc_cfg_guidance, sc_cfg_target, sc_cfg_x_star, text_target, token_cross_entropy,
                              velocity_regression, x_star)

B, L = 6, 10
P = 3  # prompt length
CONTENT = 4  # response content tokens; the rest is EOS + EOS padding


class Spy(ElfStudent):
    """The tiny student, recording every call's inputs."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.calls = []

    def forward(self, z, q, t, w, **kw):
        self.calls.append(dict(z=z.detach().clone(), q=q.detach().clone(), t=t.clone(), **kw))
        return super().forward(z, q, t, w, **kw)


def make_student(seed=0, cls=ElfStudent, **over):
    torch.manual_seed(seed)
    m = cls(model_preset("tiny", **over))
    torch.nn.init.normal_(m.final_linear.weight, std=0.1)
    if hasattr(m, "reg_out"):
        torch.nn.init.normal_(m.reg_out.weight, std=0.1)
    return m


def make_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    pm = torch.zeros(B, L, dtype=torch.bool)
    pm[:, :P] = True
    cm = torch.zeros(B, L, dtype=torch.bool)
    cm[:, P:P + CONTENT] = True
    return TrainBatch(x=torch.randn(B, L, 64, generator=g), tokens=torch.randint(0, 512, (B, L), generator=g),
                      prompt_mask=pm, content_mask=cm, teacher=torch.randn(B, L, 64, generator=g),
                      reg=torch.randn(B, 64, generator=g), teacher_at_source=torch.randn(B, 64, generator=g))


def make_draws(cfg, seed=0, **fixed):
    d = draw(cfg, [torch.Generator().manual_seed(seed * 100 + i) for i in range(B)], L, 64, 64)
    return dataclasses.replace(d, **fixed)


def test_draw_laws_and_one_generator_per_row():
    cfg = ObjectiveConfig()
    n, length, d = 6000, 3, 4
    gens = lambda: [torch.Generator().manual_seed(7_000 + i) for i in range(n)]  # noqa: E731
    dr = draw(cfg, gens(), length, d, 5)
    assert dr.is_decoder.float().mean().item() == pytest.approx(cfg.decoder_prob, abs=0.015)
    assert dr.self_cond.float().mean().item() == pytest.approx(cfg.self_cond_prob, abs=0.02)
    logit = torch.log(dr.t / (1 - dr.t))  # t = sigmoid(N(-1.5, 0.8))
    assert (logit.mean().item(), logit.std().item()) == (pytest.approx(cfg.t_mean, abs=0.03),
                                                         pytest.approx(cfg.t_std, abs=0.03))
    assert dr.w.min().item() >= cfg.w_min and dr.w.max().item() <= cfg.w_max
    assert dr.w.mean().item() == pytest.approx((cfg.w_min + cfg.w_max) / 2, abs=0.05)  # U[0.5, 5]
    lam = torch.log(dr.lam / (1 - dr.lam))
    assert dr.lam.shape == (n, length) and lam.mean().item() == pytest.approx(cfg.decoder_lambda_mean, abs=0.03)
    assert lam.std().item() == pytest.approx(cfg.decoder_lambda_std, abs=0.03)
    assert dr.lam_r.shape == (n,) and dr.eps_r.shape == (n, 5) and dr.eps.shape == (n, length, d)
    assert (dr.eps.mean().item(), dr.eps.std().item()) == (pytest.approx(0.0, abs=0.02), pytest.approx(1.0, abs=0.02))
    # one noise serves both branches of a row; the state and REG noises are independent draws
    assert dr.eps_dec is dr.eps and dr.eps_r_dec is dr.eps_r
    assert abs(torch.corrcoef(torch.stack([dr.eps[:, 0, 0], dr.eps_r[:, 0]]))[0, 1].item()) < 0.05
    # a row's draws depend only on its own generator: the same seeds give the same rows in any order or batch
    few = draw(cfg, [torch.Generator().manual_seed(7_000 + i) for i in (5, 2)], length, d, 5)
    for j, i in enumerate((5, 2)):
        for name in ("is_decoder", "t", "self_cond", "w", "eps", "lam", "eps_r", "lam_r"):
            assert torch.equal(getattr(few, name)[j], getattr(dr, name)[i]), name
    # an ELF model (no REG state) draws no REG noise
    plain = draw(cfg, gens()[:4], length, d, None)
    assert plain.eps_r is None and plain.lam_r is None and plain.eps.shape == (4, length, d)


def test_sc_cfg_target_hand_values():
    x, z = torch.tensor([[1.0]]), torch.tensor([[0.2]])
    t = torch.tensor([0.6])  # c_t = 0.4, plain velocity (1 - 0.2)/0.4 = 2
    v_sc, v_no = torch.tensor([[3.0]]), torch.tensor([[1.0]])
    assert sc_cfg_target(x, z, t, torch.tensor([1.0]), torch.tensor([2.0]), v_sc, v_no, 0.05).item() == pytest.approx(3.0)
    assert sc_cfg_target(x, z, t, torch.tensor([0.0]), torch.tensor([2.0]), v_sc, v_no, 0.05).item() == pytest.approx(2.0)
    assert sc_cfg_target(x, z, t, torch.tensor([1.0]), torch.tensor([1.0]), v_sc, v_no, 0.05).item() == pytest.approx(2.0)
    # w = 0.5 is anti-guidance: 2 + (1 - 2) * 2 = 0
    assert sc_cfg_target(x, z, t, torch.tensor([1.0]), torch.tensor([0.5]), v_sc, v_no, 0.05).item() == pytest.approx(0.0, abs=1e-6)
    # near t = 1 the floor applies: c_t = 0.05, (1 - 0.2) / 0.05 = 16
    assert sc_cfg_target(x, z, torch.tensor([0.99]), torch.tensor([0.0]), torch.tensor([2.0]), v_sc, v_no,
                         0.05).item() == pytest.approx(16.0)


def test_sc_cfg_guidance_hand_values():
    b, w = torch.tensor([1.0, 0.0, 1.0]), torch.tensor([2.0, 3.0, 0.5])
    v_sc, v_no = torch.tensor([[3.0], [5.0], [1.0]]), torch.tensor([[1.0], [1.0], [2.0]])
    # b (1 - 1/w) (v_sc - v_no): 1 * 0.5 * 2 = 1; b = 0 gives 0; w = 0.5: (1 - 2) * (1 - 2) = 1
    assert sc_cfg_guidance(b, w, v_sc, v_no).flatten().tolist() == pytest.approx([1.0, 0.0, 1.0])


def _sc(rows, **fields):
    return SelfConditioning(torch.tensor(rows), **{k: fields.get(k) for k in ("x_no_sc", "x_sc", "r_no_sc", "r_sc")})


def test_text_target_guides_the_self_conditioned_rows_only():
    x, w = torch.tensor([[[1.0]], [[2.0]]]), torch.tensor([3.0, 4.0])
    sc = _sc([1], x_sc=torch.tensor([[[5.0]]]), x_no_sc=torch.tensor([[[1.0]]]))
    # row 1 (b = 1): 2 + (1 - 1/4) (5 - 1) = 5; row 0 (b = 0): x* = x = 1
    assert text_target(x, w, sc).flatten().tolist() == pytest.approx([1.0, 5.0])
    assert text_target(x, w, None) is x


def test_reg_target_hand_values():
    r, r_t = torch.tensor([[1.0], [1.0]]), torch.tensor([[0.2], [0.2]])
    t, w = torch.tensor([0.6, 0.6]), torch.tensor([2.0, 2.0])  # c_t = 0.4: plain (1 - 0.2) / 0.4 = 2
    # row 1 self-conditioned: v_sc = (0.6 - 0.2) / 0.4 = 1, v_no = (0.2 - 0.2) / 0.4 = 0: 2 + (1 - 1/2) (1 - 0) = 2.5
    sc = _sc([1], r_sc=torch.tensor([[0.6]]), r_no_sc=torch.tensor([[0.2]]))
    assert reg_target(r, r_t, t, w, sc, 0.05).flatten().tolist() == pytest.approx([2.0, 2.5])
    assert reg_target(r, r_t, t, w, None, 0.05).flatten().tolist() == pytest.approx([2.0, 2.0])


def test_elf_loss_hand_values():
    """L_ELF = (sum l2 over denoising positions + sum CE over decoder positions) / supervised positions."""
    x_hat = torch.tensor([[[1.0, 3.0], [2.0, 2.0]], [[9.0, 9.0], [9.0, 9.0]]])
    x_tgt = torch.tensor([[[0.0, 1.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
    t = torch.tensor([0.5, 0.99])  # c_t = 0.5, and 0.05 (the floor) on row 1
    l2 = velocity_regression(x_hat, x_tgt, t, 0.05)
    # row 0: c^-2 = 4; position 0: (1 + 4)/2 = 2.5 -> 10; position 1: (4 + 4)/2 = 4 -> 16. row 1: 400 * 81 = 32400
    assert l2.flatten().tolist() == pytest.approx([10.0, 16.0, 32400.0, 32400.0])
    # the decoder row (row 1): position 0 logits (0, 0) -> CE ln 2; position 1 logits (0, ln 3), target 1 -> ln(4/3)
    ce = token_cross_entropy(torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)]]]), torch.tensor([[0, 1]]))
    assert ce.flatten().tolist() == pytest.approx([math.log(2.0), math.log(4 / 3)])
    # supervised: row 0 position 1 (denoising), row 1 position 1 (decoder); position 0 is prompt
    denoising = torch.tensor([[False, True], [False, False]])
    loss, l2_sum, ce_sum = elf_loss(l2, denoising, ce, torch.tensor([[False, True]]), torch.tensor(2))
    assert (l2_sum.item(), ce_sum.item()) == (pytest.approx(16.0), pytest.approx(math.log(4 / 3)))
    assert loss.item() == pytest.approx((16.0 + math.log(4 / 3)) / 2)
    assert elf_loss(l2, denoising, None, None, torch.tensor(1))[0].item() == pytest.approx(16.0)


def test_reg_loss_hand_values():
    r_hat, r_t = torch.tensor([[1.0, 1.0], [float("inf"), 5.0]]), torch.zeros(2, 2)
    t = torch.tensor([0.5, 0.5])  # v_r = r_hat / 0.5
    v_tgt = torch.tensor([[1.0, 3.0], [0.0, 0.0]])
    den = torch.tensor([True, False])  # the decoder row (an inf there) counts for nothing
    # row 0: ((2 - 1)^2 + (2 - 3)^2) / 2 = 1
    assert reg_loss(r_hat, r_t, v_tgt, t, den, 0.05, torch.tensor(1)).item() == pytest.approx(1.0)
    assert reg_loss(r_hat, r_t, v_tgt, t, den, 0.05, torch.tensor(4)).item() == pytest.approx(0.25)


@pytest.mark.parametrize("t", [0.1, 0.5, 0.97])
def test_velocity_loss_equals_weighted_x_loss(t):
    g = torch.Generator().manual_seed(1)
    z, x_hat, v_tgt = (torch.randn(1, 5, 3, generator=g) for _ in range(3))
    tt = torch.tensor([t])
    v = velocity(x_hat, z, tt, 0.05)
    c = max(1 - t, 0.05)
    lhs = ((v - v_tgt) ** 2).sum()
    rhs = ((x_hat - x_star(z, v_tgt, tt, 0.05)) ** 2).sum() / c**2
    assert torch.allclose(lhs, rhs, rtol=1e-5)


@pytest.mark.parametrize("t", [0.3, 0.99])
def test_sc_cfg_x_star_is_x_star_of_the_sc_cfg_target(t):
    g = torch.Generator().manual_seed(2)
    x, z, x_sc, x_no = (torch.randn(2, 5, 3, generator=g) for _ in range(4))
    tt, b, w = torch.tensor([t, t / 2]), torch.tensor([1.0, 0.0]), torch.tensor([3.0, 0.7])
    v_tgt = sc_cfg_target(x, z, tt, b, w, velocity(x_sc, z, tt, 0.05), velocity(x_no, z, tt, 0.05), 0.05)
    assert torch.allclose(sc_cfg_x_star(x, x_sc, x_no, b, w), x_star(z, v_tgt, tt, 0.05), atol=1e-5)
    # hand values: x + (1 - 1/3) (x_sc - x_no) on the b = 1 row, x on the b = 0 row
    assert torch.allclose(sc_cfg_x_star(x, x_sc, x_no, b, w)[0], x[0] + (2 / 3) * (x_sc[0] - x_no[0]))
    assert torch.equal(sc_cfg_x_star(x, x_sc, x_no, b, w)[1], x[1])


class Recorder(ElfStudent):
    """The tiny student, keeping every call's arguments (to recompute the loss the long way)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.calls = []

    def forward(self, *args, **kw):
        self.calls.append((args, kw))
        return super().forward(*args, **kw)


def test_text_term_equals_the_spec_velocity_form_on_fixed_inputs():
    """terms["l2"] == mean over denoising response tokens of ||v - v_target||^2 / d, v = velocity(x_hat, z, t), v_target
    from sc_cfg_target of passes A and B (velocities), recomputed here from the student's own calls."""
    cfg = ObjectiveConfig()
    m = make_student(cls=Recorder)
    batch = make_batch()
    dec = torch.tensor([False, False, False, False, True, False])
    sc = torch.tensor([True, False, True, False, True, True])
    terms = elf_reg_loss(m, batch, make_draws(cfg, is_decoder=dec, self_cond=sc), cfg).terms
    (za, qa, ta, wa), _ = m.calls[0]
    (zb, qb, tb, wb), _ = m.calls[1]
    (z, q, t, w), kw = m.calls[2]
    with torch.no_grad():
        x_hat = ElfStudent.forward(m, z, q, t, w, **kw).x_hat
        rows = [0, 2, 5]
        pm = batch.prompt_mask[rows].unsqueeze(-1)
        x_s = batch.x[rows]
        x_a = torch.where(pm, x_s, ElfStudent.forward(m, za, qa, ta, wa, **m.calls[0][1]).x_hat)
        x_b = torch.where(pm, x_s, ElfStudent.forward(m, zb, qb, tb, wb, **m.calls[1][1]).x_hat)
    v_tgt = velocity(batch.x, z, t, cfg.c_t_floor)
    v_tgt[rows] = sc_cfg_target(x_s, za, ta, torch.ones(3), wa, velocity(x_b, za, ta, cfg.c_t_floor),
                                velocity(x_a, za, ta, cfg.c_t_floor), cfg.c_t_floor)
    per_tok = ((velocity(x_hat, z, t, cfg.c_t_floor) - v_tgt) ** 2).mean(-1)
    den_resp = ~batch.prompt_mask & ~dec[:, None]
    assert terms["l2"].item() == pytest.approx(per_tok[den_resp].mean().item(), rel=1e-5)


def test_reg_term_equals_the_spec_velocity_form_on_fixed_inputs():
    """terms["loss_reg"] == mean over denoising rows of ||v_r - v_r_target||^2 / d_r, with v_r_target the SC-CFG target
    of passes A and B's REG predictions on the self-conditioned rows, recomputed here from the student's calls."""
    cfg = ObjectiveConfig()
    m = make_student(cls=Recorder)
    batch = make_batch()
    dec = torch.tensor([False, True, False, False, True, False])
    sc = torch.tensor([True, True, False, True, False, False])
    terms = elf_reg_loss(m, batch, make_draws(cfg, is_decoder=dec, self_cond=sc), cfg).terms
    (za, qa, ta, wa), kw_a = m.calls[0]
    (zb, qb, tb, wb), kw_b = m.calls[1]
    (z, q, t, w), kw = m.calls[2]
    rows, f = [0, 3], cfg.c_t_floor
    with torch.no_grad():
        r_a = ElfStudent.forward(m, za, qa, ta, wa, **kw_a).reg_hat
        r_b = ElfStudent.forward(m, zb, qb, tb, wb, **kw_b).reg_hat
        r_hat = ElfStudent.forward(m, z, q, t, w, **kw).reg_hat
    r_in = kw["reg"]
    v_tgt = velocity(batch.reg, r_in, t, f)
    v_tgt[rows] = sc_cfg_target(batch.reg[rows], r_in[rows], ta, torch.ones(2), wa, velocity(r_b, r_in[rows], ta, f),
                                velocity(r_a, r_in[rows], ta, f), f)
    per_row = ((velocity(r_hat, r_in, t, f) - v_tgt) ** 2).mean(-1)
    assert terms["loss_reg"].item() == pytest.approx(per_row[~dec].mean().item(), rel=1e-5)


def test_loss_is_weighted_sum_of_terms():
    cfg = ObjectiveConfig()
    out = elf_reg_loss(make_student(), make_batch(), make_draws(cfg), cfg)
    t = out.terms
    expect = t["loss_elf"].item() + 0.5 * t["loss_repa"].item() + 0.1 * t["loss_reg"].item()
    assert out.loss.item() == pytest.approx(expect, rel=1e-6)
    out.loss.backward()


def test_prompt_never_noised_and_passes_follow_self_conditioning():
    cfg = ObjectiveConfig()
    m = make_student(cls=Spy)
    batch = make_batch()
    dec = torch.tensor([False, False, False, False, True, True])
    sc = torch.tensor([True, False, True, False, True, False])
    elf_reg_loss(m, batch, make_draws(cfg, is_decoder=dec, self_cond=sc), cfg)
    a, b, grad = m.calls
    # passes A and B: the denoising rows with b = 1 (pass A's output is used on those rows only)
    assert len(a["z"]) == 2 and len(b["z"]) == 2
    assert torch.equal(a["q"][:, P:], torch.zeros_like(a["q"][:, P:]))
    for call in m.calls:
        n = len(call["z"])
        rows = [0, 2] if n == 2 else list(range(B))
        assert torch.equal(call["z"][:, :P], batch.x[rows, :P])
    # denoiser rows see the clean prompt in q too; decoder rows have q = 0 everywhere and t = 1
    assert torch.equal(grad["q"][:4, :P], batch.x[:4, :P])
    assert torch.count_nonzero(grad["q"][4:]) == 0
    assert torch.equal(grad["t"][4:], torch.ones(2))
    # the gradient pass self-conditions exactly the b = 1 denoising rows, on pass A's prediction
    assert torch.count_nonzero(grad["q"][[1, 3], P:]) == 0
    assert torch.count_nonzero(grad["q"][[0, 2], P:]) > 0
    assert torch.equal(b["q"], grad["q"][[0, 2]])


@pytest.mark.parametrize("shared_noise", [True, False])
def test_gradient_pass_state_is_the_forward_process_row_by_row(shared_noise):
    """z of the gradient pass, by hand: prompt positions x; denoising rows t x + (1 - t) sigma eps; decoder rows
    lam x + (1 - lam) s eps_dec (per position), with non-default sigma and s, one noise or two."""
    cfg = ObjectiveConfig(sigma=1.5, decoder_noise_scale=0.7)
    m = make_student(cls=Spy)
    batch = make_batch()
    dec = torch.tensor([False, True, False, True, False, False])
    draws = make_draws(cfg, is_decoder=dec, self_cond=torch.zeros(B, dtype=torch.bool))
    if not shared_noise:
        draws = dataclasses.replace(draws, eps_dec=torch.randn(B, L, 64, generator=torch.Generator().manual_seed(7)))
    elf_reg_loss(m, batch, draws, cfg)
    z = m.calls[-1]["z"]
    x = batch.x
    for i in range(B):
        for j in range(L):
            if j < P:
                want = x[i, j]
            elif dec[i]:
                lam = draws.lam[i, j]
                want = lam * x[i, j] + (1 - lam) * 0.7 * draws.eps_dec[i, j]
            else:
                t = draws.t[i]
                want = t * x[i, j] + (1 - t) * 1.5 * draws.eps[i, j]
            torch.testing.assert_close(z[i, j], want, rtol=1e-6, atol=1e-6)


def test_prompt_positions_are_never_supervised():
    cfg = ObjectiveConfig(use_repa=False)
    batch = make_batch()
    draws = make_draws(cfg, is_decoder=torch.tensor([False, True] * 3))
    base = elf_reg_loss(make_student(), batch, draws, cfg).terms
    # change the prompt's target tokens: nothing supervised may change (prompt features stay, so inputs are equal)
    tokens = batch.tokens.clone()
    tokens[:, :P] = (tokens[:, :P] + 1) % 512
    other = elf_reg_loss(make_student(), dataclasses.replace(batch, tokens=tokens), draws, cfg).terms
    assert other["loss_elf"] == pytest.approx(base["loss_elf"].item())


def test_eos_padding_in_text_loss_but_not_in_repa():
    cfg = ObjectiveConfig()
    batch = make_batch()
    draws = make_draws(cfg, is_decoder=torch.tensor([True] * B))
    base = elf_reg_loss(make_student(), batch, draws, cfg).terms
    pad = slice(P + CONTENT + 1, L)
    tokens = batch.tokens.clone()
    tokens[:, pad] = (tokens[:, pad] + 7) % 512
    teacher = batch.teacher.clone()
    teacher[:, pad] = torch.randn_like(teacher[:, pad])
    changed = elf_reg_loss(make_student(), dataclasses.replace(batch, tokens=tokens, teacher=teacher), draws, cfg).terms
    assert changed["ce"] != pytest.approx(base["ce"].item())  # padding is supervised by the text loss
    assert changed["loss_repa"] == pytest.approx(base["loss_repa"].item())  # ... but not aligned by REPA


def test_no_reg_loss_in_decoder_samples():
    cfg = ObjectiveConfig()
    batch = make_batch()
    dec = torch.tensor([True, True, True, False, False, False])
    # lam_r = 1 would feed r to decoder rows; lam_r = 0 makes their input pure noise, independent of r
    draws = make_draws(cfg, is_decoder=dec, lam_r=torch.zeros(B))
    base = elf_reg_loss(make_student(), batch, draws, cfg).terms
    reg = batch.reg.clone()
    reg[:3] += 5.0  # move the REG targets of the decoder rows only
    same = elf_reg_loss(make_student(), dataclasses.replace(batch, reg=reg), draws, cfg).terms
    assert same["loss_reg"] == pytest.approx(base["loss_reg"].item())
    reg[3] += 5.0  # a denoising row's target does count
    assert elf_reg_loss(make_student(), dataclasses.replace(batch, reg=reg), draws, cfg).terms["loss_reg"] != \
        pytest.approx(base["loss_reg"].item())
    all_dec = make_draws(cfg, is_decoder=torch.ones(B, dtype=torch.bool))
    assert elf_reg_loss(make_student(), batch, all_dec, cfg).terms["loss_reg"].item() == 0.0


def test_repa_shift_one_aligns_with_previous_position():
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(2, 5, 4, generator=g)
    mask = torch.ones(2, 5, dtype=torch.bool)
    pred = torch.cat([torch.randn(2, 1, 4, generator=g), teacher[:, :-1]], dim=1)  # pred_i = h_{i-1}
    assert repa_loss(pred, teacher, mask, shift=1).item() == pytest.approx(0.0, abs=1e-6)
    assert repa_loss(pred, teacher, mask, shift=0).item() > 0.1
    assert repa_loss(teacher, teacher, mask, shift=0).item() == pytest.approx(0.0, abs=1e-6)
    # hand value: orthogonal vectors give 1 - cos = 1, opposite give 2
    t = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])
    p = torch.tensor([[[0.0, 3.0], [-2.0, 0.0]]])
    assert repa_loss(p, t, torch.ones(1, 2, dtype=torch.bool)).item() == pytest.approx(1.5)
    # the extra (REG) token adds one term per row: (1 + 2 + 0) / 3
    assert repa_loss(p, t, torch.ones(1, 2, dtype=torch.bool), extra_pred=torch.tensor([[1.0, 0.0]]),
                     extra_target=torch.tensor([[5.0, 0.0]])).item() == pytest.approx(1.0)


def test_cosine_to_is_torch_cosine_similarity_with_no_gradient_into_the_target():
    g = torch.Generator().manual_seed(0)
    pred = torch.randn(3, 7, 16, generator=g, requires_grad=True)
    target = torch.randn(3, 7, 16, generator=g) * torch.rand(3, 7, 1, generator=g) * 10
    want = F.cosine_similarity(pred, target, dim=-1, eps=1e-8)
    got = cosine_to(pred, target)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # the gradient of 1 - cos with respect to pred: -(t_hat - cos p_hat) / |p|
    (g_got,) = torch.autograd.grad((1 - got).sum(), pred)
    (g_want,) = torch.autograd.grad((1 - want).sum(), pred)
    torch.testing.assert_close(g_got, g_want, rtol=1e-5, atol=1e-6)
    p_norm = pred.detach().norm(dim=-1, keepdim=True)
    t_hat = target / target.norm(dim=-1, keepdim=True)
    hand = -(t_hat - got.detach()[..., None] * pred.detach() / p_norm) / p_norm
    torch.testing.assert_close(g_got, hand, rtol=1e-5, atol=1e-6)
    # a target that requires grad gets none (REPA's targets are frozen teacher states)
    t = target.clone().requires_grad_(True)
    assert torch.autograd.grad(cosine_to(pred, t).sum(), t, allow_unused=True)[0] is None
    # bf16 inputs are compared in fp32, as F.cosine_similarity on .float()
    assert cosine_to(pred.detach().bfloat16(), target.bfloat16()).dtype == torch.float32


def test_repa_mean_pooled_target():
    teacher = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])
    mask = torch.tensor([[True, True, False]])
    pred = torch.tensor([[[1.0, 1.0], [2.0, 2.0], [0.0, 1.0]]])  # along the pooled mean (0.5, 0.5)
    assert repa_loss(pred, teacher, mask, mean_pooled=True).item() == pytest.approx(0.0, abs=1e-6)


def test_ablation_switches_touch_only_their_terms():
    batch, cfg = make_batch(), ObjectiveConfig()
    draws = make_draws(cfg)
    base = elf_reg_loss(make_student(), batch, draws, cfg).terms
    for change in (dict(repa_shift=1), dict(repa_target="mean_pooled"), dict(repa_on_prompt=True),
                   dict(repa_on_extra_token=False)):
        t = elf_reg_loss(make_student(), batch, draws, dataclasses.replace(cfg, **change)).terms
        assert t["loss_repa"] != pytest.approx(base["loss_repa"].item()), change
        assert t["loss_elf"] == pytest.approx(base["loss_elf"].item()) and t["loss_reg"] == pytest.approx(
            base["loss_reg"].item()), change
    no_reg = elf_reg_loss(make_student(extra_token="olt"), batch, draws, dataclasses.replace(cfg, use_reg=False)).terms
    assert "loss_reg" not in no_reg
    elf = elf_reg_loss(make_student(extra_token="none", repa=False), batch, draws,
                       dataclasses.replace(cfg, use_reg=False, use_repa=False)).terms
    assert set(elf) == {"loss_elf", "l2", "ce", "decoder_frac", "loss"}
    assert elf["loss"] == pytest.approx(elf["loss_elf"].item())


def test_text_loss_shared_denominator_hand_check():
    """L_ELF = (sum l2 over denoising tokens + sum CE over decoder tokens) / all supervised tokens."""
    cfg = ObjectiveConfig(use_repa=False, use_reg=False)
    batch = make_batch()
    dec = torch.tensor([True, False, False, False, False, True])
    t = elf_reg_loss(make_student(extra_token="none"), batch, make_draws(cfg, is_decoder=dec), cfg).terms
    n_tok = L - P
    expect = (t["l2"] * 4 * n_tok + t["ce"] * 2 * n_tok) / (B * n_tok)
    assert t["loss_elf"].item() == pytest.approx(expect.item(), rel=1e-5)


def test_missing_teacher_is_a_clear_error():
    cfg = ObjectiveConfig()
    batch = dataclasses.replace(make_batch(), teacher=None)
    with pytest.raises(ValueError, match="use_repa"):
        elf_reg_loss(make_student(), batch, make_draws(cfg), cfg)


def test_under_autocast_each_layer_runs_once_with_grad():
    """A layer called twice with grad under autocast shares one cached bf16 cast of its weight only while no other
    thread clears autocast's process-wide cache: its gradient would then depend on thread timing (runs side by
    side, elfreg demo). The loss's gradient pass must call each autocast layer once."""
    cfg = ObjectiveConfig()
    m = make_student()
    calls = {}

    def count(name):
        def hook(mod, args):
            if torch.is_grad_enabled() and torch.is_autocast_enabled("cpu"):
                calls[name] = calls.get(name, 0) + 1
        return hook

    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(count(name))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        elf_reg_loss(m, make_batch(), make_draws(cfg), cfg)
    assert any(k.startswith("repa_projector") for k in calls) and any(k.startswith("blocks") for k in calls)
    assert max(calls.values()) == 1, {k: v for k, v in calls.items() if v > 1}


@pytest.mark.parametrize("mode", [dict(), dict(shift=1), dict(mean_pooled=True)])
def test_repa_an_inf_at_a_masked_position_contributes_nothing(mode):
    # fp16 cached teacher states can overflow (massive activations): one inf off the mask must not make NaN
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(2, 5, 4, generator=g).half()
    mask = torch.tensor([[False, True, True, False, True], [True, True, False, True, True]])
    pred = torch.randn(2, 5, 4, generator=g, requires_grad=True)
    inf, zeroed = teacher.clone(), teacher.clone()
    inf[0, 0], inf[1, 2, 1] = float("inf"), float("-inf")    # masked-out positions
    zeroed[0, 0], zeroed[1, 2] = 0.0, 0.0
    if mode.get("shift") == 1:   # shift 1 reads teacher position i - 1 for student position i: move the infs along
        inf, zeroed = teacher.clone(), teacher.clone()
        inf[0, 2], inf[1, 1, 0] = float("inf"), float("nan")   # read by positions 3 (masked) and 2 (masked)
        zeroed[0, 2], zeroed[1, 1] = 0.0, 0.0
    loss = repa_loss(pred, inf, mask, **mode)
    want = repa_loss(pred, zeroed, mask, **mode)
    assert torch.isfinite(loss) and loss.item() == want.item()
    (grad,) = torch.autograd.grad(loss, pred)
    (grad_want,) = torch.autograd.grad(want, pred)
    assert torch.isfinite(grad).all() and torch.equal(grad, grad_want)
    assert grad[~mask].abs().sum() == 0   # masked positions get no gradient


def test_whole_loss_stays_finite_with_an_inf_teacher_state_on_the_prompt():
    cfg = ObjectiveConfig()
    batch = make_batch()
    teacher = batch.teacher.half()
    teacher[:, 0, 3] = float("inf")   # position 0 is prompt: REPA never aligns it (repa_on_prompt False)
    m = make_student()
    out = elf_reg_loss(m, dataclasses.replace(batch, teacher=teacher), make_draws(cfg), cfg)
    assert torch.isfinite(out.loss)
    clean = teacher.clone()
    clean[:, 0] = 0.0
    want = elf_reg_loss(make_student(), dataclasses.replace(batch, teacher=clean), make_draws(cfg), cfg)
    assert out.terms["loss_repa"].item() == want.terms["loss_repa"].item()
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_draws_with_and_without_a_reg_state_share_the_text_draws():
    """A REG model's rows draw the text's noise, times and modes exactly as a model without the REG token (the REG
    state's normals come after, in a call of their own): runs of one seed are paired across students. The canvas
    size here (1 + L d + L = 46 normals) is not a multiple of 16, where one longer call would redraw the tail."""
    cfg = ObjectiveConfig()
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(4)]  # noqa: E731
    plain, reg = draw(cfg, gens(), 5, 8, None), draw(cfg, gens(), 5, 8, 3)
    for f in ("is_decoder", "t", "self_cond", "w", "eps", "lam", "eps_dec"):
        assert torch.equal(getattr(plain, f), getattr(reg, f)), f
    assert plain.eps_r is None and reg.eps_r.shape == (4, 3) and reg.lam_r.shape == (4,)
