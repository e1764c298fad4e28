"""The training step's fast paths compute what the plain formulas compute, to stated tolerances.

The reference is the student as first written: self_cond_proj applied to [z, q], then the bottleneck (no
folding); RMSNorm as F.rms_norm; attention as q_norm / k_norm (F.rms_norm with their weights), RoPE
(layers.apply_rope) and SDPA; the SwiGLU gate as chunk, silu and product, each with autograd's own gradient.
Checked on fixed inputs: student outputs, the whole ELF-REG loss and every parameter's gradient, in fp32 (rounding
only: rtol 1e-4) and under CPU bf16 autocast (bf16 rounding of the blocks' matmuls: rtol 2e-2 on the loss).
"""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from elfreg.config import ObjectiveConfig, model_preset
from elfreg.model import layers
from elfreg.model.student import ElfStudent
from elfreg.objective import draw, elf_reg_loss
from helpers import random_train_batch

B, L, P, D = 6, 10, 3, 64


class ReferenceStudent(ElfStudent):
    """The unfolded input path: u = self_cond_proj([z, q]) then text_proj, in fp32."""

    def _input_path(self, z, q, weights=None, row_local=False):  # training passes never run row by row
        q = torch.zeros_like(z) if q is None else q
        with torch.autocast(z.device.type, enabled=False):
            return self.text_proj(self.self_cond_proj(torch.cat([z.float(), q.float()], dim=-1)))


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def plain_rms_norm(self, x):
    return F.rms_norm(x.float(), self.weight.shape, self.weight.float(), self.eps).to(x.dtype)


def plain_attention(self, x, cos, sin, row_local=False):
    b, s, _ = x.shape
    qkv = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
    q, k = (layers.apply_rope(norm(t), cos, sin) for norm, t in ((self.q_norm, qkv[0]), (self.k_norm, qkv[1])))
    out = sdpa(q.float(), k.float(), qkv[2].float()).to(qkv.dtype)
    return self.proj(out.transpose(1, 2).reshape(b, s, -1))


def plain_swiglu(self, x, row_local=False):
    a, b = self.w12(x).chunk(2, dim=-1)
    return self.w3(F.silu(a) * b)


def plain_layers(monkeypatch):
    """The reference's layers in place of the fast ones (for the rest of the test)."""
    monkeypatch.setattr(layers.RMSNorm, "forward", plain_rms_norm)
    monkeypatch.setattr(layers.Attention, "forward", plain_attention)
    monkeypatch.setattr(layers.SwiGLU, "forward", plain_swiglu)


def _pair(monkeypatch_ctx=None):
    torch.manual_seed(0)
    fast = ElfStudent(model_preset("tiny", feature_dim=D, reg_dim=D, teacher_dim=D, vocab_size=512))
    torch.nn.init.normal_(fast.final_linear.weight, std=0.1)
    torch.nn.init.normal_(fast.reg_out.weight, std=0.1)
    ref = ReferenceStudent(fast.config)
    ref.load_state_dict(fast.state_dict())
    return fast, ref


def _batch_draws():
    batch = random_train_batch(B, L, P, D, seed=3)
    cfg = ObjectiveConfig()
    draws = draw(cfg, [torch.Generator().manual_seed(50 + i) for i in range(B)], L, D, D)
    # every kind of row: denoising with and without self-conditioning, decoder
    draws = dataclasses.replace(draws, is_decoder=torch.tensor([False, False, False, True, False, True]),
                                self_cond=torch.tensor([True, False, True, True, True, False]))
    return batch, draws, cfg


def _loss_and_grads(student, batch, draws, cfg, bf16):
    student.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = elf_reg_loss(student, batch, draws, cfg)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in student.named_parameters() if p.grad is not None}


def test_cpu_attention_equals_sdpa_with_gradients():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 7, 8, generator=g, requires_grad=True) for _ in range(3))
    got = layers.attention(q, k, v)
    (gq, gk, gv) = torch.autograd.grad(got.square().sum(), (q, k, v))
    want = sdpa(q, k, v)
    (wq, wk, wv) = torch.autograd.grad(want.square().sum(), (q, k, v))
    assert torch.allclose(got, want, atol=1e-6)
    for a, b in ((gq, wq), (gk, wk), (gv, wv)):
        assert torch.allclose(a, b, atol=1e-5)


def test_student_rows_are_independent():
    """The self-conditioning passes run on the self-conditioned rows alone: a row's output ignores the others."""
    fast, _ = _pair()
    g = torch.Generator().manual_seed(1)
    z, q = torch.randn(5, L, D, generator=g), torch.randn(5, L, D, generator=g)
    t, w, r = torch.rand(5, generator=g), 1 + torch.rand(5, generator=g), torch.randn(5, D, generator=g)
    with torch.no_grad():
        full = fast(z, q, t, w, reg=r, reg_q=r)
        idx = torch.tensor([1, 3])
        part = fast(z[idx], q[idx], t[idx], w[idx], reg=r[idx], reg_q=r[idx])
    assert torch.allclose(part.x_hat, full.x_hat[idx], atol=1e-5)
    assert torch.allclose(part.reg_hat, full.reg_hat[idx], atol=1e-5)


@pytest.mark.parametrize("bf16,rtol", [(False, 1e-4), (True, 2e-2)])
def test_loss_and_gradients_match_the_plain_formulas(monkeypatch, bf16, rtol):
    fast, ref = _pair()
    batch, draws, cfg = _batch_draws()
    got, g_fast = _loss_and_grads(fast, batch, draws, cfg, bf16)
    plain_layers(monkeypatch)
    want, g_ref = _loss_and_grads(ref, batch, draws, cfg, bf16)
    assert got.loss.item() == pytest.approx(want.loss.item(), rel=rtol)
    for k in ("loss_elf", "loss_repa", "loss_reg"):
        assert got.terms[k].item() == pytest.approx(want.terms[k].item(), rel=rtol, abs=1e-6), k
    assert g_fast.keys() == g_ref.keys()
    for n in g_ref:  # gradients agree relative to the whole tensor's scale
        scale = g_ref[n].abs().max().clamp_min(1e-8)
        err = (g_fast[n] - g_ref[n]).abs().max() / scale
        assert err < (1e-3 if not bf16 else 0.1), (n, float(err))


def test_swap_pairs_is_flip_of_each_pair_forward_and_backward():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 7, 8, generator=g, requires_grad=True)
    upstream = torch.randn(2, 3, 4, 7, 8, generator=g)
    got = layers.SwapPairs.apply(x)
    (grad_got,) = torch.autograd.grad(got, x, upstream)
    want = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    (grad_want,) = torch.autograd.grad(want, x, upstream)
    assert torch.equal(got, want) and torch.equal(grad_got, grad_want)
    assert torch.equal(layers.SwapPairs.apply(got), x)  # its own inverse


def _same_function(fast, plain, inputs, upstream, atol):
    """fast(*inputs) and plain(*inputs): values and the gradients of every input, against ``upstream``."""
    got = fast(*inputs)
    g_got = torch.autograd.grad(got, inputs, upstream)
    want = plain(*inputs)
    g_want = torch.autograd.grad(want, inputs, upstream)
    torch.testing.assert_close(got, want, atol=atol, rtol=1e-5)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, atol=atol, rtol=1e-5)


@pytest.mark.parametrize("shape", [(6, 10, 64), (2, 3, 4, 7, 8)])
def test_rms_norm_function_is_f_rms_norm(shape):
    g = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(shape, generator=g)).requires_grad_(True)
    w = (1 + 0.3 * torch.randn(shape[-1], generator=g)).requires_grad_(True)
    _same_function(lambda x, w: layers.RMSNormFunction.apply(x, w, 1e-6),
                   lambda x, w: F.rms_norm(x, (shape[-1],), w, 1e-6), (x, w), torch.randn(shape, generator=g), 1e-5)
    with torch.no_grad():  # the graph-free path: the same values
        torch.testing.assert_close(layers.rms_norm(x, w, 1e-6), F.rms_norm(x, (shape[-1],), w, 1e-6))


def test_qkv_function_is_norms_rope_and_scale():
    g = torch.Generator().manual_seed(0)
    b, s, heads, hd, prefix = 3, 9, 2, 8, 4
    qkv = torch.randn(b, s, 3 * heads * hd, generator=g, requires_grad=True)
    w = (1 + 0.3 * torch.randn(2, hd, generator=g)).requires_grad_(True)
    cos, sin = layers.rope_tables(prefix, s - prefix, hd, 10_000.0)

    def fast(qkv, w):
        qk, v = layers.QKVFunction.apply(qkv, w, cos, sin, heads, 1e-6, hd ** -0.5)
        return torch.cat([qk.flatten(), v.flatten()])

    def plain(qkv, w):
        t = qkv.view(b, s, 3, heads, hd).permute(2, 0, 3, 1, 4)
        q, k = (layers.apply_rope(F.rms_norm(t[i], (hd,), w[i], 1e-6), cos, sin) for i in (0, 1))
        return torch.cat([(q * hd ** -0.5).flatten(), k.flatten(), t[2].flatten()])
    _same_function(fast, plain, (qkv, w), torch.randn(3 * b * s * heads * hd, generator=g), 1e-5)


def test_swiglu_gate_is_silu_times_the_other_half():
    g = torch.Generator().manual_seed(0)
    ab = torch.randn(4, 5, 2 * 7, generator=g, requires_grad=True)

    def plain(ab):
        a, b = ab.chunk(2, dim=-1)
        return F.silu(a) * b
    _same_function(layers.SwiGLUGate.apply, plain, (ab,), torch.randn(4, 5, 7, generator=g), 1e-6)


def test_attention_takes_a_prescaled_q():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 7, 8, generator=g) for _ in range(3))
    torch.testing.assert_close(layers.attention(q * 8 ** -0.5, k, v, scale=1.0), sdpa(q, k, v))
