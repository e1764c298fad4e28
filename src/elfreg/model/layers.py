"""Building blocks of the ELF student (spec §1; reference facts §1.4–1.7)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def by_row(fn, x: Tensor, on: bool = True) -> Tensor:
    """``fn(x)``, or with ``on`` ``fn`` on each slice of x's first dimension alone, concatenated.

    For the kernels whose result for one row depends on how many rows the call holds (docs/sampling.md, "Batch
    invariance"): a GEMM's kernel and thread split follow its row count, and a transcendental elementwise op (silu,
    gelu, cos) rounds the elements at a thread's share's end in a scalar loop. Alone, a row meets the same kernel on
    the same shape in any batch; the row-wise kernels (norms, softmax, attention's per-head products) need no loop.
    """
    if not on or x.shape[0] == 1:
        return fn(x)
    return torch.cat([fn(x[i:i + 1]) for i in range(x.shape[0])])


def init_linear(layer: nn.Linear) -> nn.Linear:
    """Xavier-uniform weight and zero bias, the reference initialisation of every Linear."""
    nn.init.xavier_uniform_(layer.weight)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def _normalise(x: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(x * rstd, rstd) over the last dim, rstd = 1 / sqrt(mean(x^2) + eps) (B.., 1): two passes over x (its norm,
    then the product), where F.rms_norm's CPU kernel is a composite of about ten."""
    rstd = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.shape[-1]).add_(eps).rsqrt_()
    return x * rstd, rstd


def _rms_backward(dxhat: Tensor, xhat: Tensor, rstd: Tensor) -> Tensor:
    """The gradient through x -> x * rstd given the gradient ``dxhat`` of its output ``xhat``:
    rstd (dxhat - xhat mean(dxhat xhat))."""
    dot = torch.linalg.vecdot(dxhat, xhat).unsqueeze(-1).div_(xhat.shape[-1])
    return torch.addcmul(dxhat, xhat, dot, value=-1.0).mul_(rstd)


class RMSNormFunction(torch.autograd.Function):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim, with its gradient written out: the function of
    F.rms_norm in 3 passes forward and 6 backward, where autograd recorded about 10 and 12."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        xhat, rstd = _normalise(x, eps)
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight

    @staticmethod
    def backward(ctx, grad: Tensor):
        xhat, rstd, weight = ctx.saved_tensors
        dweight = (grad * xhat).flatten(0, -2).sum(0) if ctx.needs_input_grad[1] else None
        dx = _rms_backward(grad * weight, xhat, rstd) if ctx.needs_input_grad[0] else None
        return dx, dweight, None


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """F.rms_norm over the last dim with ``weight``, in fp32 (RMSNormFunction where a gradient is recorded)."""
    x, weight = x.float(), weight.float()
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return RMSNormFunction.apply(x, weight, eps)
    return _normalise(x, eps)[0] * weight


class RMSNorm(nn.Module):
    """RMSNorm with a learnable weight and no bias; the variance is computed in fp32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps).to(x.dtype)


def rope_tables(num_identity: int, length: int, head_dim: int, theta: float, device=None) -> tuple[Tensor, Tensor]:
    """cos/sin tables (S, head_dim) for interleaved RoPE; the first ``num_identity`` rows do not rotate.

    Prefix tokens (and the REG/OLT token) get identity rotation; text positions are 0..length-1. Pair (2i, 2i+1)
    turns by angle pos * theta^(-2i/head_dim): cos holds cos(angle) on both members, sin holds -sin(angle) on the
    even member and +sin(angle) on the odd one, so that ``apply_rope`` is x * cos + swap_pairs(x) * sin.
    """
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    pos = torch.arange(length, dtype=torch.float64, device=device)
    ang = torch.outer(pos, inv)
    cos = torch.cat([torch.ones(num_identity, inv.numel(), dtype=torch.float64, device=device), ang.cos()])
    sin = torch.cat([torch.zeros(num_identity, inv.numel(), dtype=torch.float64, device=device), ang.sin()])
    return cos.repeat_interleave(2, -1).float(), torch.stack((-sin, sin), -1).flatten(-2).float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """Rotate pairs (2i, 2i+1) of ``x`` (B, heads, S, head_dim) by the angles of ``rope_tables``, in fp32.

    (x0 cos - x1 sin, x0 sin + x1 cos) per pair, as x * cos + (x1, x0) * (-sin, sin): bit for bit the same values
    in fewer ops (a negation is exact). The result has ``x``'s dtype unless ``dtype`` is given (attention on the
    CPU keeps fp32 to skip two casts).
    """
    xf = x.float()
    return (xf * cos + SwapPairs.apply(xf) * sin).to(dtype or x.dtype)


class SwapPairs(torch.autograd.Function):
    """(x0, x1, x2, x3, ...) -> (x1, x0, x3, x2, ...) over the last dim, a permutation that is its own adjoint.

    Two strided copies forward and backward, where ``flip`` on a size-2 dim took 1.7x as long and indexing the pairs
    apart makes autograd zero-fill and add a full-size gradient per pair member.
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        u = x.unflatten(-1, (-1, 2))
        return torch.stack((u[..., 1], u[..., 0]), -1).flatten(-2)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return SwapPairs.forward(ctx, grad)


def attention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
    """softmax(scale q k^T) v over (B, heads, S, head_dim), scale 1 / sqrt(head_dim) unless given (1: q comes
    scaled); bidirectional, no mask.

    On the CPU the short sequences of a small student run as two plain fp32 matmuls: PyTorch's CPU flash kernel
    (bf16 under autocast) costs several times more there, its backward most of all (measured in
    benchmarks/bench_demo_step.py). Elsewhere SDPA picks its fused kernel. Same function up to float rounding.
    """
    if q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    with torch.autocast("cpu", enabled=False):
        q = q.float() if scale == 1.0 else q.float() * scale
        return (q @ k.float().transpose(-1, -2)).softmax(-1) @ v.float()


class QKVFunction(torch.autograd.Function):
    """The fused qkv projection's output (B, S, 3 x heads x head_dim) -> q, k stacked (2, B, heads, S, head_dim),
    each RMS-normalised over head_dim with its weight, rotated by RoPE and (q) scaled, and v (B, heads, S, head_dim),
    in fp32: rms_norm(x) w rotated is xhat (w cos) + swap(xhat) (swap(w) sin), with the weights, the scale and the
    RoPE tables folded into two small (2, S, head_dim) tables. 5 ops forward and ~13 backward, where autograd
    recorded ~30 for the same function (Attention.forward's history: norms, weights, RoPE, slices)."""

    @staticmethod
    def forward(ctx, qkv: Tensor, weight: Tensor, cos: Tensor, sin: Tensor, heads: int, eps: float,
                q_scale: float) -> tuple[Tensor, Tensor]:
        b, s, _ = qkv.shape
        ctx.dtype = qkv.dtype
        t = qkv.float().view(b, s, 3, heads, -1)
        # (2, B, heads, S, head_dim), made contiguous once: the norm and products on the strided view cost more
        xhat, rstd = _normalise(t[:, :, :2].permute(2, 0, 3, 1, 4).contiguous(), eps)
        w = weight.clone()
        w[0] *= q_scale
        a = w[:, None] * cos  # (2, S, head_dim): q's and k's tables
        c = SwapPairs.forward(None, w)[:, None] * sin
        swapped = SwapPairs.forward(None, xhat)
        qk = torch.addcmul(xhat * a[:, None, None], swapped, c[:, None, None])
        v = t[:, :, 2].transpose(1, 2).contiguous()
        ctx.save_for_backward(xhat, swapped, rstd, a, c, cos, sin)
        ctx.shape, ctx.q_scale = (b, s, heads), q_scale
        return qk, v

    @staticmethod
    def backward(ctx, dqk: Tensor, dv: Tensor):
        xhat, swapped, rstd, a, c, cos, sin = ctx.saved_tensors
        b, s, heads = ctx.shape
        dqkv = torch.empty(b, s, 3, heads, xhat.shape[-1], dtype=xhat.dtype, device=xhat.device)
        dqkv[:, :, 2] = dv.transpose(1, 2)
        dxhat = dqk * a[:, None, None] + SwapPairs.forward(None, dqk * c[:, None, None])
        dqkv[:, :, :2] = _rms_backward(dxhat, xhat, rstd).permute(1, 3, 0, 2, 4)
        dweight = None
        if ctx.needs_input_grad[1]:  # d/dw of xhat (w cos) + swap(xhat) (swap(w) sin), summed over B and heads
            by_cos = (dqk * xhat).sum((1, 2)) * cos
            by_sin = (dqk * swapped).sum((1, 2)) * sin
            dweight = (by_cos + SwapPairs.forward(None, by_sin)).sum(1)
            dweight[0] *= ctx.q_scale
        return dqkv.view(b, s, -1).to(ctx.dtype), dweight, None, None, None, None, None


class Attention(nn.Module):
    """Bidirectional multi-head attention: fused qkv (bias), qk-RMSNorm before RoPE, SDPA, output projection."""

    def __init__(self, width: int, heads: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.qkv = init_linear(nn.Linear(width, 3 * width, bias=True))
        self.q_norm = RMSNorm(self.head_dim, eps)
        self.k_norm = RMSNorm(self.head_dim, eps)
        self.proj = init_linear(nn.Linear(width, width, bias=True))

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, row_local: bool = False) -> Tensor:
        """x (B, S, width) -> (B, S, width); ``row_local``: the projections row by row (``by_row``)."""
        b, s, _ = x.shape
        qkv = by_row(self.qkv, x, row_local)
        w = torch.stack((self.q_norm.weight, self.k_norm.weight)).float()
        # q_norm / k_norm, then RoPE, on q and k stacked, q pre-scaled by 1 / sqrt(head_dim) (QKVFunction)
        qk, v = QKVFunction.apply(qkv, w, cos, sin, self.heads, self.q_norm.eps, self.head_dim ** -0.5)
        keep = torch.float32 if x.device.type == "cpu" else qkv.dtype  # the CPU's attention stays fp32
        q, k = qk.to(keep).unbind(0)
        out = attention(q, k, v.to(keep), scale=1.0).to(qkv.dtype)
        return by_row(self.proj, out.transpose(1, 2).reshape(b, s, -1), row_local)


class SwiGLU(nn.Module):
    """SwiGLU MLP with a fused gate/up projection: w3(silu(a) * b), [a | b] = w12(x)."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.w12 = init_linear(nn.Linear(width, 2 * hidden, bias=True))
        self.w3 = init_linear(nn.Linear(hidden, width, bias=True))

    def forward(self, x: Tensor, row_local: bool = False) -> Tensor:
        """``row_local``: the whole MLP row by row (``by_row``: its GEMMs and silu)."""
        return by_row(self._mlp, x, row_local)

    def _mlp(self, x: Tensor) -> Tensor:
        return self.w3(SwiGLUGate.apply(self.w12(x)))


class SwiGLUGate(torch.autograd.Function):
    """silu(a) * b of [a | b] (last dim), its gradient written into one [da | db] buffer: autograd's chunk + silu
    + mul recorded a zero-filled buffer and a copy per half for the same gradient."""

    @staticmethod
    def forward(ctx, ab: Tensor) -> Tensor:
        a, b = ab.chunk(2, dim=-1)
        gate = F.silu(a)
        ctx.save_for_backward(a, b, gate)
        return gate * b

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        a, b, gate = ctx.saved_tensors
        out = torch.empty(*grad.shape[:-1], 2 * grad.shape[-1], dtype=grad.dtype, device=grad.device)
        da, db = out.chunk(2, dim=-1)
        torch.ops.aten.silu_backward.grad_input(grad * b, a, grad_input=da)
        torch.mul(grad, gate, out=db)
        return out


class Block(nn.Module):
    """Pre-norm transformer block: x + Attn(norm(x)), then x + MLP(norm(x)); no adaLN."""

    def __init__(self, width: int, heads: int, mlp_hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.norm1 = RMSNorm(width, eps)
        self.attn = Attention(width, heads, eps)
        self.norm2 = RMSNorm(width, eps)
        self.mlp = SwiGLU(width, mlp_hidden)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, row_local: bool = False) -> Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, row_local)
        return x + self.mlp(self.norm2(x), row_local)


FREQ_DIM = 256   # sinusoidal features of a ScalarEmbedder (t, w)


class ScalarEmbedder(nn.Module):
    """Sinusoidal features of a raw scalar (t in [0,1] or w, not scaled by 1000) through a 2-layer SiLU MLP."""

    def __init__(self, width: int, freq_dim: int = FREQ_DIM, max_period: float = 10_000.0) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.max_period = max_period
        self.mlp = nn.Sequential(nn.Linear(freq_dim, width), nn.SiLU(), nn.Linear(width, width))
        for layer in (self.mlp[0], self.mlp[2]):
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)

    def features(self, s: Tensor) -> Tensor:
        """(B,) -> (B, freq_dim): [cos | sin] of s * exp(-ln(max_period) k / half)."""
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(self.max_period) * torch.arange(half, dtype=torch.float32, device=s.device) / half)
        args = s.float()[:, None] * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, s: Tensor, row_local: bool = False) -> Tensor:
        return by_row(lambda v: self.mlp(self.features(v)), s, row_local)


class RepaProjector(nn.Module):
    """p_phi: a 3-layer position-wise SiLU MLP from the student width to the teacher width (spec §1, §4)."""

    def __init__(self, width: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            init_linear(nn.Linear(width, hidden)), nn.SiLU(),
            init_linear(nn.Linear(hidden, hidden)), nn.SiLU(),
            init_linear(nn.Linear(hidden, out_dim)),
        )

    def forward(self, u: Tensor) -> Tensor:
        return self.net(u)
