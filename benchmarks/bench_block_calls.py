"""How much of a demo block's time is operator-call overhead: the block as one autograd Function against the module.

``OneCallBlock`` computes what ``elfreg.model.layers.Block`` computes (fp32, CPU): the same forward operations in
the same order, with the backward written out by hand, so autograd records 2 nodes for the block where the module
records 41 (and 13 gradient accumulations either way), and no submodule is called. The operator calls themselves
barely change (223 against 241 for a forward and backward): what is left is the arithmetic, one pass over memory
per element-wise operation, as eager PyTorch runs it. The difference between the two is what any scheme of fewer
calls (hand fusion of the Python side, a leaner module) can save on a block; the rest would need the element-wise
passes fused into fewer kernels (a compiler).

    PYTHONPATH=src python benchmarks/bench_block_calls.py [--threads 1] [--rows 1 10 32] [--calls 100]

An experiment, not a code path of elfreg: the student keeps its module blocks. The outputs and gradients of both are
checked equal (float rounding) before anything is timed; tests/benchmarks/test_bench_block_calls.py checks them too.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import Tensor

from elfreg.model.layers import Block, SwapPairs, _normalise, _rms_backward, rope_tables

# the demo student's block (elfreg.demo.config.DemoStudent): width 64, 4 heads, SwiGLU 170, 12 prefix tokens + 30
WIDTH, HEADS, MLP, PREFIX, CANVAS = 64, 4, 170, 12, 30


def _swap(x: Tensor) -> Tensor:
    """Pairs (2i, 2i+1) of the last dim swapped: layers.SwapPairs' own forward, without its autograd node (as
    layers.QKVFunction calls it)."""
    return SwapPairs.forward(None, x)


class OneCallBlock(torch.autograd.Function):
    """Block.forward (pre-norm attention with q/k RMSNorm and RoPE, then a SwiGLU MLP) as one autograd node."""

    @staticmethod
    def forward(ctx, x, w1, wqkv, bqkv, wqk, wp, bp, w2, w12, b12, w3, b3, cos, sin, heads: int, eps: float):
        b, s, h = x.shape
        hd = h // heads
        x2 = x.reshape(-1, h)
        xhat1, rstd1 = _normalise(x2, eps)
        n1 = xhat1 * w1
        t = torch.addmm(bqkv, n1, wqkv.t()).view(b, s, 3, heads, hd)
        xq, rq = _normalise(t[:, :, :2].permute(2, 0, 3, 1, 4).contiguous(), eps)
        w = wqk.clone()
        w[0] *= hd ** -0.5
        a_tab, c_tab = w[:, None] * cos, _swap(w)[:, None] * sin
        sw = _swap(xq)
        qk = torch.addcmul(xq * a_tab[:, None, None], sw, c_tab[:, None, None])
        q, k = qk[0], qk[1]
        v = t[:, :, 2].transpose(1, 2).contiguous()
        p = torch.matmul(q, k.transpose(-1, -2)).softmax(-1)
        o = torch.matmul(p, v).transpose(1, 2).reshape(b * s, h)
        x1 = torch.addmm(bp, o, wp.t()).add_(x2)
        xhat2, rstd2 = _normalise(x1, eps)
        n2 = xhat2 * w2
        a, up = torch.addmm(b12, n2, w12.t()).chunk(2, dim=-1)
        g = F.silu(a)
        m = g * up
        out = torch.addmm(b3, m, w3.t()).add_(x1)
        ctx.save_for_backward(xhat1, rstd1, n1, xq, rq, sw, a_tab, c_tab, cos, sin, q, k, v, p, o, xhat2, rstd2, n2,
                              a, up, g, m, w1, wqkv, wp, w2, w12, w3)
        ctx.dims = (b, s, h, heads, hd)
        return out.view(b, s, h)

    @staticmethod
    def backward(ctx, dout):
        (xhat1, rstd1, n1, xq, rq, sw, a_tab, c_tab, cos, sin, q, k, v, p, o, xhat2, rstd2, n2, a, up, g, m,
         w1, wqkv, wp, w2, w12, w3) = ctx.saved_tensors
        b, s, h, heads, hd = ctx.dims
        d = dout.reshape(-1, h)
        dw3, db3, dm = d.t() @ m, d.sum(0), d @ w3
        dab = torch.empty(a.shape[0], 2 * a.shape[1], dtype=d.dtype)
        da, dup = dab.chunk(2, dim=-1)
        torch.ops.aten.silu_backward.grad_input(dm * up, a, grad_input=da)
        torch.mul(dm, g, out=dup)
        dw12, db12, dn2 = dab.t() @ n2, dab.sum(0), dab @ w12
        dw2 = (dn2 * xhat2).sum(0)
        dx1 = _rms_backward(dn2 * w2, xhat2, rstd2).add_(d)
        dwp, dbp = dx1.t() @ o, dx1.sum(0)
        do = (dx1 @ wp).view(b, s, heads, hd).transpose(1, 2)
        dv = torch.matmul(p.transpose(-1, -2), do)
        ds = torch._softmax_backward_data(torch.matmul(do, v.transpose(-1, -2)), p, -1, p.dtype)
        dqk = torch.stack((torch.matmul(ds, k), torch.matmul(ds.transpose(-1, -2), q)))
        dqkv = torch.empty(b, s, 3, heads, hd, dtype=d.dtype)
        dqkv[:, :, 2] = dv.transpose(1, 2)
        dxhat = dqk * a_tab[:, None, None] + _swap(dqk * c_tab[:, None, None])
        dqkv[:, :, :2] = _rms_backward(dxhat, xq, rq).permute(1, 3, 0, 2, 4)
        dwqk = ((dqk * xq).sum((1, 2)) * cos + _swap((dqk * sw).sum((1, 2)) * sin)).sum(1)
        dwqk[0] *= hd ** -0.5
        dqkv = dqkv.view(-1, 3 * h)
        dwqkv, dbqkv, dn1 = dqkv.t() @ n1, dqkv.sum(0), dqkv @ wqkv
        dw1 = (dn1 * xhat1).sum(0)
        dx = _rms_backward(dn1 * w1, xhat1, rstd1).add_(dx1)
        return (dx.view(b, s, h), dw1, dwqkv, dbqkv, dwqk, dwp, dbp, dw2, dw12, db12, dw3, db3,
                None, None, None, None)


def one_call(block: Block, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``block(x, cos, sin)`` through OneCallBlock (fp32, CPU)."""
    at, mlp = block.attn, block.mlp
    return OneCallBlock.apply(x, block.norm1.weight, at.qkv.weight, at.qkv.bias,
                              torch.stack((at.q_norm.weight, at.k_norm.weight)), at.proj.weight, at.proj.bias,
                              block.norm2.weight, mlp.w12.weight, mlp.w12.bias, mlp.w3.weight, mlp.w3.bias, cos, sin,
                              at.heads, block.norm1.eps)


def demo_block(seed: int = 0) -> tuple[Block, Tensor, Tensor]:
    """A demo-sized Block with every weight moved off its initial value, and its RoPE tables."""
    torch.manual_seed(seed)
    block = Block(WIDTH, HEADS, MLP)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    cos, sin = rope_tables(PREFIX, CANVAS, WIDTH // HEADS, 10_000.0)
    return block, cos, sin


def gradients(block: Block, fn, x: Tensor, grad: Tensor) -> tuple[Tensor, list[Tensor]]:
    """(output, [d/dx, d/d each parameter]) of ``fn(x)`` against ``grad``."""
    block.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    out = fn(x)
    out.backward(grad)
    return out.detach(), [x.grad] + [p.grad for p in block.parameters()]


def _cpu_ms(fns: dict, calls: int, rounds: int = 5) -> dict:
    """Median CPU time (ms) of one call of each of ``fns``, in ``rounds`` interleaved rounds: a load that comes and
    goes hits each alike."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    times: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            for _ in range(max(1, calls // rounds)):
                c0 = time.process_time()
                fn()
                times[k].append(time.process_time() - c0)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 10, 32], help="canvases per call")
    ap.add_argument("--calls", type=int, default=100, help="timed calls per figure (median of CPU time)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    block, cos, sin = demo_block()
    module = lambda x: block(x, cos, sin)  # noqa: E731
    fused = lambda x: one_call(block, x, cos, sin)  # noqa: E731
    print(f"a demo block ({WIDTH} wide, {HEADS} heads, SwiGLU {MLP}, {PREFIX + CANVAS} positions), fp32, "
          f"{args.threads} thread(s), median CPU time of {args.calls} calls in 5 interleaved rounds, ms per block")
    for rows in args.rows:
        x, grad = torch.randn(rows, PREFIX + CANVAS, WIDTH), torch.randn(rows, PREFIX + CANVAS, WIDTH)
        (o1, g1), (o2, g2) = gradients(block, module, x, grad), gradients(block, fused, x, grad)
        worst = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item() for a, b in zip(g1 + [o1], g2 + [o2]))
        assert worst < 1e-4, f"the one-call block differs from the module by {worst:.2e} (relative)"

        def train(fn):
            return lambda: gradients(block, fn, x, grad)

        def infer(fn):
            def run():
                with torch.no_grad():
                    fn(x)
            return run

        t = _cpu_ms({"module": train(module), "one": train(fused), "module, no grad": infer(module),
                     "one, no grad": infer(fused)}, args.calls)
        t_mod, t_one, n_mod, n_one = t.values()
        print(f"{rows:3d} rows: forward + backward module {t_mod:6.2f}, one call {t_one:6.2f} ({t_mod / t_one:.2f}x, "
              f"saves {t_mod - t_one:5.2f}); forward without gradient {n_mod:6.2f} vs {n_one:6.2f} "
              f"({n_mod / n_one:.2f}x); largest relative difference {worst:.1e}")


if __name__ == "__main__":
    main()
