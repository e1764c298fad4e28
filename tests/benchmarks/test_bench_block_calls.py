"""benchmarks/bench_block_calls.py: the one-call block computes the module's function and gradients, so its timing
compares like with like; bench_demo_step's least-squares line."""

import sys

import pytest
import torch

import bench_block_calls as bbc
import bench_demo_step as bds


@pytest.mark.parametrize("rows", [1, 3])
def test_one_call_block_equals_the_module_forward_and_backward(rows):
    block, cos, sin = bbc.demo_block(seed=rows)
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, bbc.PREFIX + bbc.CANVAS, bbc.WIDTH, generator=g)
    grad = torch.randn(x.shape, generator=g)
    out_m, grads_m = bbc.gradients(block, lambda v: block(v, cos, sin), x, grad)
    out_o, grads_o = bbc.gradients(block, lambda v: bbc.one_call(block, v, cos, sin), x, grad)
    torch.testing.assert_close(out_o, out_m, rtol=1e-5, atol=1e-6)
    assert len(grads_o) == len(grads_m) == 1 + len(list(block.parameters()))
    for got, want in zip(grads_o, grads_m):  # x, then every parameter, the q/k norm weights through the stack
        assert got is not None
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_one_call_block_gradient_is_exact_in_float64():
    block, cos, sin = bbc.demo_block()
    block.double()
    x = torch.randn(2, bbc.PREFIX + bbc.CANVAS, bbc.WIDTH, dtype=torch.float64, requires_grad=True)
    params = [block.norm1.weight, block.attn.qkv.weight, block.attn.qkv.bias,
              torch.stack((block.attn.q_norm.weight, block.attn.k_norm.weight)).detach().requires_grad_(True),
              block.attn.proj.weight, block.attn.proj.bias, block.norm2.weight, block.mlp.w12.weight,
              block.mlp.w12.bias, block.mlp.w3.weight, block.mlp.w3.bias]

    def f(x, *p):
        return bbc.OneCallBlock.apply(x, *p, cos.double(), sin.double(), block.attn.heads, block.norm1.eps)

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-5, nondet_tol=0.0, fast_mode=True)


def test_the_benchmark_prints_a_row_per_batch(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench_block_calls.py", "--rows", "1", "2", "--calls", "2"])
    bbc.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if "rows:" in line]
    assert [r.split("rows:")[0].strip() for r in rows] == ["1", "2"]


def test_line_is_least_squares():
    assert bds._line([4, 8, 16, 32], [3 + 2 * x for x in (4, 8, 16, 32)]) == pytest.approx((3.0, 2.0))
    # an off-line point pulls the line toward it by the least-squares weights
    intercept, slope = bds._line([0, 1, 2], [0.0, 1.0, 5.0])
    assert (intercept, slope) == pytest.approx((-0.5, 2.5))
