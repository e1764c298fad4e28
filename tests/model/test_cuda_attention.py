"""The student's attention kernels and forward on CUDA against the math path (GPU-marked: skipped without CUDA).

Shapes are the presets': a canvas of 1024 plus 12 prefix tokens and the REG token, head_dim 64 (B: 768 / 12) and
80 (L: 1280 / 16).
"""

import contextlib

import pytest
import torch

from elfreg.config import model_preset
from elfreg.model.layers import attention
from elfreg.model.student import ElfStudent

pytestmark = pytest.mark.gpu
BF16 = dict(atol=2e-3, rtol=1.6e-2)  # bf16: 8 significant bits, an ulp of 2e-3 at 0.5 (outputs reach ~0.5 here)


def _qkv(head_dim: int, batch: int = 2, heads: int = 4, seq: int = 1037):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(3)]


@pytest.mark.parametrize("head_dim", [64, 80])
@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "default"])
def test_sdpa_kernels_match_the_math_path_in_bf16(backend, head_dim):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = _qkv(head_dim)
    with sdpa_kernel(SDPBackend.MATH):
        math = attention(q, k, v)
    scores = (q.double() @ k.double().transpose(-1, -2)) * head_dim ** -0.5
    exact = scores.softmax(-1) @ v.double()
    ctx = contextlib.nullcontext() if backend == "default" else sdpa_kernel(getattr(SDPBackend, backend))
    try:
        with ctx:
            out = attention(q, k, v)
    except RuntimeError as exc:  # a kernel this device or build lacks is not elfreg's failure
        if "No available kernel" in str(exc):
            pytest.skip(f"{backend} is not available here: {str(exc).splitlines()[0]}")
        raise
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    torch.testing.assert_close(out.float(), math.float(), **BF16)
    torch.testing.assert_close(out.double(), exact, **BF16)


def _student(width: int, heads: int):
    torch.manual_seed(0)
    m = model_preset("tiny", width=width, heads=heads, depth=2, repa_block=1, max_len=128, max_prompt_len=32)
    net = ElfStudent(m).eval()
    torch.nn.init.normal_(net.final_linear.weight, std=0.05)  # the zero-initialised head would hide the body
    return net


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("width,heads", [(256, 4), (320, 4)])
def test_student_forward_on_cuda_matches_the_cpu(width, heads):
    """fp32 on CUDA equals the CPU (attention: SDPA there, two matmuls here); bf16 autocast stays within bf16."""
    net = _student(width, heads)
    m = net.config
    g = torch.Generator().manual_seed(1)
    b = 3
    z, q = torch.randn(b, m.max_len, m.feature_dim, generator=g), torch.randn(b, m.max_len, m.feature_dim, generator=g)
    t, w = torch.rand(b, generator=g), 1 + 4 * torch.rand(b, generator=g)
    reg = torch.randn(b, m.reg_dim, generator=g)
    dec = torch.tensor([True, False, True])
    with torch.no_grad():
        ref = net(z, q, t, w, reg=reg, reg_q=reg, decoder=dec, repa=True)
        net.cuda()
        args = [a.cuda() for a in (z, q, t, w)]
        fp32 = net(*args, reg=reg.cuda(), reg_q=reg.cuda(), decoder=dec.cuda(), repa=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            bf16 = net(*args, reg=reg.cuda(), reg_q=reg.cuda(), decoder=dec.cuda(), repa=True)
    for name in ("x_hat", "reg_hat", "logits", "repa_hidden"):
        want = getattr(ref, name)
        assert _rel(getattr(fp32, name).cpu(), want) < 1e-5, name
        assert _rel(getattr(bf16, name).cpu(), want) < 3e-2, name
