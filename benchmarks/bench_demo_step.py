"""The demo's training step (elfreg demo: 4 x 64 student, batch 32, canvas 30, SmolLM2 widths) against its limit.

Prints, from one run: the whole step (Trainer.step_once: draws, loss with its two self-conditioning passes, backward,
clipping, Muon + AdamW, EMA) of ELF and ELF-REG, the share of each phase, the student's bare forward + backward on
the same batch (one mixed pass, no self-conditioning passes, no optimiser), the same step with AdamW in place of Muon,
and the step's **limit**: its matrix-product FLOPs (benchmarks/flops.py: the student's passes as elfreg.objective
runs them, plus Muon's Newton-Schulz) at the fp32 matmul rate of this CPU measured in the same process, in rounds
interleaved with the steps (so machine load hits both alike). With ``--base SRC`` (the ``src`` folder of another
checkout, e.g. ``git worktree add /tmp/base e88346d``) the same step of that code runs in a second process,
interleaved round by round with this one, and the ratio old / new is printed: on a shared machine both sides see the
same load.

    PYTHONPATH=src python benchmarks/bench_demo_step.py [--base /tmp/base/src] [--rounds 6] [--steps 20]
        [--threads 1] [--precision fp32]
    PYTHONPATH=src python benchmarks/bench_demo_step.py --profile   # torch.profiler tables by operator / module
    PYTHONPATH=src python benchmarks/bench_demo_step.py --lanes     # two runs side by side, as the demo trains
    PYTHONPATH=src python benchmarks/bench_demo_step.py --phases    # where a step's time goes
    PYTHONPATH=src python benchmarks/bench_demo_step.py --anatomy   # its GEMMs at their own shapes vs the rest
    PYTHONPATH=src python benchmarks/bench_demo_step.py --floor     # a cost per call + a cost per row, vs the limit

A CPU without native bf16 (AVX2 only) is emulated on one that has it by
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`` (docs/performance.md).
Random features stand in for SmolLM2's (widths 576; the step's cost does not depend on their values).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve()
D, VOCAB, N_ROWS = 576, 49152, 256


def _setup(variant: str, out: Path, precision: str | None = None, optimizer: str | None = None,
           batch_size: int | None = None):
    """A Trainer of the demo's run config on in-memory random features (fake backbones of SmolLM2's widths);
    ``precision`` / ``optimizer`` / ``batch_size``: train.precision / train.optimizer / train.batch_size in place of
    the demo's."""
    import torch

    from elfreg.config import BackboneConfig
    from elfreg.demo.config import DemoConfig
    try:
        from elfreg.demo.runs import run_config
    except ImportError:  # a --base checkout from before the demo's runner was split
        from elfreg.demo.run import run_config
    from elfreg.train import CachedFeatures
    from elfreg.train.trainer import Trainer

    cfg = DemoConfig()
    length, plen = cfg.student.canvas_len, 13
    g = torch.Generator().manual_seed(0)
    head_ids = sorted(set(torch.randint(0, VOCAB, (60,), generator=g).tolist()) | {2})
    tokens = torch.tensor(head_ids)[torch.randint(0, len(head_ids), (N_ROWS, length), generator=g)]
    pm = torch.zeros(N_ROWS, length, dtype=torch.bool)
    pm[:, :plen] = True
    cm = torch.zeros_like(pm)
    cm[:, plen:plen + 15] = True
    x = torch.randn(N_ROWS, length, D, generator=g).half()
    tensors = {"x": x, "tokens": tokens, "prompt_mask": pm, "content_mask": cm,
               "teacher": torch.randn(N_ROWS, length, D, generator=g).half(),
               "reg": torch.randn(N_ROWS, D, generator=g).half(),
               "teacher_at_source": torch.randn(N_ROWS, D, generator=g).half()}
    bcfg = BackboneConfig(encoder="unused", teacher="unused", encoder_layer=6, teacher_repa_layer=12,
                          teacher_reg_layer=12)
    tokenizer = _Vocab(range(VOCAB))  # the Trainer's plan counts tokens up to EOS
    backbones = SimpleNamespace(feature_dim=D, teacher_dim=D, tokenizer=tokenizer, cfg=bcfg)
    rcfg = run_config(cfg, variant, bcfg, head_ids, dict(feature_dim=D, reg_dim=D, teacher_dim=D, vocab_size=VOCAB),
                      progress=False)
    rcfg.data.epochs = None  # endless: the benchmark takes as many steps as it likes
    if precision is not None:
        rcfg.train.precision = precision
    if optimizer is not None:
        rcfg.train.optimizer = optimizer
    if batch_size is not None:
        rcfg.train.batch_size = batch_size
    return Trainer(rcfg, out, resume="never", backbones=backbones, dataset=CachedFeatures(tensors)), cfg


class _Vocab(list):
    """A stand-in tokenizer: its length and its EOS id are all the Trainer reads."""

    eos_token_id = 2


def _bare(trainer):
    """The student's bare forward + backward on one batch of the trainer's (all rows in one mixed pass)."""
    import torch

    micro = trainer._micro_batches()
    batch, draws = micro[0]
    st = trainer.student
    reg = batch.reg if st.config.extra_token == "reg" else None
    z, q = batch.x, torch.zeros_like(batch.x)
    dec = draws.is_decoder

    def run():
        st.zero_grad(set_to_none=True)
        with trainer._autocast():
            out = st(z, q, draws.t, draws.w, reg=reg, reg_q=None if reg is None else torch.zeros_like(reg),
                     decoder=dec, repa=st.repa_projector is not None)
            loss = out.x_hat.float().square().mean()
            if out.logits is not None:
                loss = loss + out.logits.float().logsumexp(-1).mean()
            if out.repa_hidden is not None:
                loss = loss + st.repa_projector(out.repa_hidden).float().mean()
            if out.reg_hat is not None:
                loss = loss + out.reg_hat.float().square().mean()
        loss.backward()
    return run


GEMM = 512  # the fp32 rate is that of a (GEMM x GEMM) @ (GEMM x GEMM) product: large enough to run at the
#             BLAS's full speed on one core, small enough to time in a few ms


def step_flops(trainer) -> dict[str, float]:
    """Matrix-product FLOPs of one of ``trainer``'s steps: the student's passes (expected over the draws) and Muon's
    Newton-Schulz on the matrices it orthogonalises (benchmarks/flops.py)."""
    sys.path.insert(0, str(HERE.parent))
    from flops import muon_flops, train_step_flops

    cfg = trainer.cfg
    out = train_step_flops(cfg.model, cfg.objective, cfg.train.batch_size)
    muon = trainer.optim.optimizers.get("muon")
    shapes = [tuple(p.shape) for g in muon.param_groups for p in g["params"]] if muon is not None else []
    out["muon"] = muon_flops(shapes) if shapes else 0.0
    out["total"] = out["total"] + out["muon"]
    return out


def worker(threads: int, precision: str | None) -> None:
    """Line protocol on stdin/stdout: "<variant> <kind> <n>" -> seconds per call (median of n). Kinds: step (the
    demo's step), adamw (the step with AdamW in place of Muon), bare (the student's forward + backward), rate (one
    fp32 GEMM; its "flops" are returned too)."""
    import torch

    torch.set_num_threads(threads)
    tmp = Path(tempfile.mkdtemp())
    runs = {}
    for variant in ("ELF", "ELF-REG"):
        trainer, _ = _setup(variant, tmp / variant, precision)
        runs[variant] = {"step": trainer, "adamw": _setup(variant, tmp / f"{variant}-adamw", precision, "adamw")[0],
                         "bare": _bare(trainer), "i": {"step": 0, "adamw": 0}, "flops": step_flops(trainer)}
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(GEMM, GEMM, generator=g), torch.randn(GEMM, GEMM, generator=g)
    used = runs["ELF"]["step"].precision.record() if hasattr(runs["ELF"]["step"], "precision") else {}
    print("ready " + json.dumps({"precision": used}), flush=True)
    for line in sys.stdin:
        variant, kind, n = line.split()
        r = runs[variant]
        times, cpu, phases = [], [], {"features": 0.0, "update": 0.0}
        for _ in range(int(n)):
            t0, c0 = time.perf_counter(), time.process_time()
            if kind in ("step", "adamw"):
                m = r[kind].step_once(r["i"][kind])
                r["i"][kind] += 1
                phases["features"] += m["time_features"]
                phases["update"] += m["time_update"]
            elif kind == "rate":
                torch.mm(a, b)
            else:
                r["bare"]()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        print(json.dumps({"median": statistics.median(times), "mean": statistics.fmean(times),
                          "cpu": statistics.median(cpu),
                          "phases": {k: v / int(n) for k, v in phases.items()}, "flops": r["flops"],
                          "gemm_flops": 2 * GEMM ** 3}), flush=True)


def profile(threads: int, steps: int, precision: str | None = None) -> None:
    import torch
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as tprofile

    torch.set_num_threads(threads)
    tmp = Path(tempfile.mkdtemp())
    for variant in ("ELF", "ELF-REG"):
        trainer, _ = _setup(variant, tmp / variant, precision)
        for i in range(5):
            trainer.step_once(i)
        with tprofile(activities=[ProfilerActivity.CPU], with_stack=False, record_shapes=False) as prof:
            for i in range(steps):
                with record_function("step"):
                    trainer.step_once(5 + i)
        print(f"== {variant}: {steps} steps, {threads} threads; self CPU time by operator")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        print(f"== {variant}: by module / phase (total CPU time)")
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))


def anatomy(threads: int, steps: int, precision: str | None = None) -> None:
    """A step against its own matrix products: every aten call of one step is recorded (a TorchDispatchMode), each
    GEMM shape is then timed alone (fp32, CPU time), and the step (median CPU time of ``steps``) is split into its
    GEMMs at their own shapes and the rest, with the count of the other operator calls. The limit of the default
    mode prices the FLOPs at a 512^3 product's rate; this prices them at the shapes the step really multiplies, so
    the part of the gap that the shapes explain and the part that the other calls cost are told apart."""
    import collections

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.set_num_threads(threads)
    tmp = Path(tempfile.mkdtemp())

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: collections.Counter = collections.Counter()
            self.gemms: collections.Counter = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._overloadpacket.__name__
            self.ops[name] += 1
            if name in ("mm", "bmm"):
                self.gemms[(tuple(args[0].shape), tuple(args[1].shape))] += 1
            elif name in ("addmm", "baddbmm"):
                self.gemms[(tuple(args[1].shape), tuple(args[2].shape))] += 1
            return func(*args, **(kwargs or {}))

    def cpu_per_call(fn, seconds: float = 0.05) -> float:
        for _ in range(3):
            fn()
        t0, n = time.process_time(), 0
        while time.process_time() - t0 < seconds:
            fn()
            n += 1
        return (time.process_time() - t0) / n

    g = torch.Generator().manual_seed(0)
    big = torch.randn(GEMM, GEMM, generator=g), torch.randn(GEMM, GEMM, generator=g)
    rate = 2 * GEMM ** 3 / cpu_per_call(lambda: torch.mm(*big), 0.3)
    print(f"the step against its own matrix products: {threads} thread(s), CPU time, fp32 {GEMM}^3 GEMM "
          f"{rate / 1e9:.1f} GFLOP/s")
    for variant in ("ELF", "ELF-REG"):
        trainer, _ = _setup(variant, tmp / variant, precision)
        for i in range(5):
            trainer.step_once(i)
        step_times = []
        for i in range(steps):
            c0 = time.process_time()
            trainer.step_once(5 + i)
            step_times.append(time.process_time() - c0)
        step = statistics.median(step_times)
        calls = Calls()
        with calls:
            trainer.step_once(5 + steps)
        gemm_time = flops = 0.0
        for (a, b), n in calls.gemms.items():
            x, y = torch.randn(*a, generator=g), torch.randn(*b, generator=g)
            gemm_time += n * cpu_per_call(lambda x=x, y=y: torch.matmul(x, y))
            flops += n * 2 * math.prod(a) * b[-1]
        n_gemm = sum(calls.gemms.values())
        others = sum(calls.ops.values()) - n_gemm
        rest = step - gemm_time
        print(f"{variant:8s} step {1e3 * step:6.1f} ms = GEMMs {1e3 * gemm_time:5.1f} ms ({n_gemm} calls, "
              f"{flops / 1e9:.2f} GFLOP, {flops / gemm_time / 1e9:.1f} GFLOP/s at their own shapes; at the "
              f"{GEMM}^3 rate {1e3 * flops / rate:.1f} ms) + the rest {1e3 * rest:6.1f} ms ({others} other operator "
              f"calls, {1e6 * rest / others:.0f} us each)")
        print(f"{'':9s}most frequent calls: " + ", ".join(f"{k} {v}" for k, v in calls.ops.most_common(8)))


def floor(threads: int, steps: int, rounds: int, precision: str | None = None) -> None:
    """The step as a cost per call plus a cost per row: the step (mean CPU time over ``steps`` steps, interleaved
    ``rounds``) at several batch sizes, fitted by least squares as fixed + rows x per-row, beside its limit fitted the
    same way (the FLOPs at each batch size at the 512^3 rate; its fixed part is Muon's Newton-Schulz and the input
    path's folded matrix, computed once per pass whatever the batch). The fixed part is what fewer operator calls can
    remove; the per-row part against the per-row limit is what the element-wise work between the matrix products
    costs, which fewer calls do not remove: the fixed part at its own limit plus the rows at their measured cost
    bounds the step / limit of the demo's batch from below, for any scheme that only cuts calls."""
    import torch

    torch.set_num_threads(threads)
    tmp = Path(tempfile.mkdtemp())
    sizes = (4, 8, 16, 32)
    g = torch.Generator().manual_seed(0)
    big = torch.randn(GEMM, GEMM, generator=g), torch.randn(GEMM, GEMM, generator=g)
    print(f"the step as fixed + rows x per-row: {threads} thread(s), CPU time, mean of {steps} steps x {rounds} "
          f"interleaved rounds at batch {', '.join(map(str, sizes))}")
    for variant in ("ELF", "ELF-REG"):
        trainers = {b: _setup(variant, tmp / f"{variant}-{b}", precision, batch_size=b)[0] for b in sizes}
        done = dict.fromkeys(sizes, 0)
        spent = dict.fromkeys(sizes, 0.0)
        rate_time = []
        for b, tr in trainers.items():
            for _ in range(3):
                tr.step_once(done[b])
                done[b] += 1
        for _ in range(rounds):
            for b, tr in trainers.items():
                c0 = time.process_time()
                for _ in range(steps):
                    tr.step_once(done[b])
                    done[b] += 1
                spent[b] += time.process_time() - c0
            c0 = time.process_time()
            for _ in range(5):
                torch.mm(*big)
            rate_time.append((time.process_time() - c0) / 5)
        rate = 2 * GEMM ** 3 / statistics.median(rate_time)
        step = {b: spent[b] / (rounds * steps) for b in sizes}
        limit = {b: step_flops(tr)["total"] / rate for b, tr in trainers.items()}
        fixed, per_row = _line(sizes, [step[b] for b in sizes])
        lim_fixed, lim_row = _line(sizes, [limit[b] for b in sizes])
        b = max(sizes)
        print(f"{variant:8s} step at batch {b} {1e3 * step[b]:6.1f} ms, limit {1e3 * limit[b]:5.1f} ms "
              f"({step[b] / limit[b]:.2f}x) = fixed {1e3 * fixed:5.1f} ms (limit {1e3 * lim_fixed:4.1f}) "
              f"+ {b} x {1e3 * per_row:5.2f} ms per row (limit {1e3 * lim_row:5.2f}: {per_row / lim_row:.2f}x); "
              f"with the fixed part at its own limit the step would still be "
              f"{(lim_fixed + b * per_row) / limit[b]:.2f}x the limit")
        print(f"{'':9s}per batch size (step / limit): " + ", ".join(
            f"{k}: {1e3 * step[k]:.1f} / {1e3 * limit[k]:.1f} ms" for k in sizes))


def _line(xs, ys) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def step_phases(threads: int, steps: int, precision: str | None = None) -> None:
    """Where a step's time goes, as multiples of the bare forward + backward: the student's calls without gradient
    (the self-conditioning passes) and with it, the backward, the optimisers, the EMA, the batch and its draws, and
    the rest (the loss's own arithmetic, clipping). Means over ``steps`` steps after 5 of warm-up."""
    import torch

    torch.set_num_threads(threads)
    tmp = Path(tempfile.mkdtemp())
    print(f"demo-size step, {threads} thread(s), mean of {steps} steps, ms (x the bare forward + backward)")
    for variant in ("ELF", "ELF-REG"):
        trainer, _ = _setup(variant, tmp / variant, precision)
        spent: dict[str, float] = {}

        def timed(name, fn):
            def run(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    key = name(*a) if callable(name) else name
                    spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
            return run

        st = trainer.student
        st.forward = timed(lambda *a: "student, no gradient" if not torch.is_grad_enabled() else "student, gradient",
                           st.forward)
        trainer.optim.step = timed("optimisers", trainer.optim.step)
        trainer.ema.update = timed("EMA", trainer.ema.update)
        backward = torch.Tensor.backward
        torch.Tensor.backward = timed("backward", backward)
        bare = _bare(trainer)
        try:
            for i in range(5):
                trainer.step_once(i)
            spent.clear()
            total = 0.0
            for i in range(steps):
                t0 = time.perf_counter()
                spent["batch + draws"] = spent.get("batch + draws", 0.0) + trainer.step_once(5 + i)["time_features"]
                total += time.perf_counter() - t0
            kept = dict(spent)
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                bare()
                times.append(time.perf_counter() - t0)
        finally:
            torch.Tensor.backward = backward
        b = statistics.fmean(times)  # the bare pass's own backward went through the timer too: not in ``kept``
        kept["rest"] = total - sum(kept.values())
        cells = ", ".join(f"{k} {1e3 * v / steps:.1f} ({v / steps / b:.2f}x)" for k, v in kept.items())
        print(f"{variant:8s} step {1e3 * total / steps:.1f} ({total / steps / b:.2f}x), bare {1e3 * b:.1f}: {cells}")


def lanes(threads: int, steps: int, rounds: int) -> None:
    """Training throughput of two runs: one after the other on ``threads`` threads; side by side as threads of one
    process (elfreg.demo.runner.side_by_side, as the demo trains) with threads / 2 each; side by side as two processes
    with threads / 2 each. Interleaved rounds, medians; each figure is ms per step of one run."""
    import torch

    try:
        from elfreg.demo.runner import side_by_side
    except ImportError:  # a --base checkout from before the demo's runner was renamed
        from elfreg.demo.run import side_by_side

    tmp = Path(tempfile.mkdtemp())
    procs = [Side(str(HERE.parents[1] / "src"), threads // 2) for _ in range(2)]
    for variant in ("ELF", "ELF-REG"):
        pair = [_setup(variant, tmp / f"{variant}-{i}")[0] for i in range(2)]
        count = [0, 0]

        def run(i, stop=None, n=steps):
            torch.set_num_threads(threads // 2 if stop is not None else threads)
            for _ in range(n):
                pair[i].step_once(count[i])
                count[i] += 1

        for i in range(2):
            run(i, n=3)  # warm-up
        for p in procs:
            p.ask(variant, "step", 3)
        seq, par, proc = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            run(0), run(1)
            seq.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            side_by_side([0, 1], run, 2)
            par.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for p in procs:  # both processes start before either is read
                p.send(variant, "step", steps)
            for p in procs:
                p.read()
            proc.append(time.perf_counter() - t0)
        s, p_, q = (statistics.median(x) for x in (seq, par, proc))
        print(f"{variant:8s} 2 runs x {steps} steps, ms per step of a run: one after the other ({threads} threads) "
              f"{1e3 * s / (2 * steps):6.1f}; side by side ({threads // 2} thread(s) each) as threads "
              f"{1e3 * p_ / steps:6.1f} ({s / p_:.2f}x the steps/s), as processes {1e3 * q / steps:6.1f} "
              f"({s / q:.2f}x)")
    for p in procs:
        p.close()
    torch.set_num_threads(threads)


class Side:
    """One worker process running the step of the code under ``src``."""

    def __init__(self, src: str, threads: int, precision: str | None = None) -> None:
        env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS=str(threads))
        argv = [sys.executable, str(HERE), "--worker", "--threads", str(threads)]
        if precision is not None:
            argv += ["--precision", precision]
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  cwd=tempfile.gettempdir())
        first = self.p.stdout.readline().strip()
        assert first.startswith("ready"), "worker failed to start"
        self.info = json.loads(first.removeprefix("ready").strip() or "{}")

    def send(self, variant: str, kind: str, n: int) -> None:
        self.p.stdin.write(f"{variant} {kind} {n}\n")
        self.p.stdin.flush()

    def read(self) -> dict:
        return json.loads(self.p.stdout.readline())

    def ask(self, variant: str, kind: str, n: int) -> dict:
        self.send(variant, kind, n)
        return self.read()

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", help="src folder of the code to compare with (e.g. /tmp/base/src)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=20, help="calls per measurement (median taken)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base-threads", type=int, help="threads of the --base side (default: --threads)")
    ap.add_argument("--precision", choices=("auto", "bf16", "fp32"),
                    help="train.precision of both sides (default: the demo's)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the worker's CPU time (time.process_time) instead of wall time: steadier on a "
                         "loaded machine, where a process gets a fraction of a core (one thread per side only)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--lanes", action="store_true", help="two runs side by side vs one after the other")
    ap.add_argument("--phases", action="store_true", help="where a step's time goes, against the bare pass")
    ap.add_argument("--anatomy", action="store_true",
                    help="the step split into its GEMMs, timed alone at their own shapes, and its other calls")
    ap.add_argument("--floor", action="store_true",
                    help="the step as a fixed cost + a cost per row, each against its share of the limit")
    args = ap.parse_args()
    if args.worker:
        return worker(args.threads, args.precision)
    if args.profile:
        return profile(args.threads, args.steps, args.precision)
    if args.lanes:
        return lanes(args.threads, args.steps, args.rounds)
    if args.phases:
        return step_phases(args.threads, args.steps, args.precision)
    if args.anatomy:
        return anatomy(args.threads, args.steps, args.precision)
    if args.floor:
        return floor(args.threads, args.steps, args.rounds, args.precision)
    new_src = str(HERE.parents[1] / "src")
    sides = {"new": Side(new_src, args.threads, args.precision)}
    if args.base:
        sides["old"] = Side(args.base, args.base_threads or args.threads, args.precision)
    kinds = ("step", "adamw", "bare", "rate")
    res: dict = {}
    for r in range(args.rounds):  # interleaved: every side and kind sees the machine's load alike
        for variant in ("ELF", "ELF-REG"):
            for name, side in sides.items():
                for kind in kinds:
                    got = side.ask(variant, kind, args.steps)
                    res.setdefault((name, variant, kind), []).append(got)
                    print(f"round {r}: {variant} {name} {kind} {1e3 * got['median']:.2f} ms", file=sys.stderr,
                          flush=True)
    for side in sides.values():
        side.close()
    clock = "cpu" if args.cpu_time else "median"
    med = {k: statistics.median(r[clock] for r in v) for k, v in res.items()}
    env = " ".join(f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                                                     "MKL_ENABLE_INSTRUCTIONS") if k in os.environ)
    print(f"demo-size step: batch 32 x canvas 30, student 4 x 64, widths 576; {args.threads} threads "
          f"({args.base_threads or args.threads} for --base); {args.rounds} interleaved rounds of {args.steps} calls, "
          f"medians of {'process CPU time' if args.cpu_time else 'wall time'} (machine load hits every side alike)"
          f"{'; ' + env if env else ''}")
    for name, side in sides.items():
        print(f"{name}: precision {side.info.get('precision') or 'as the demo sets it'}")
    for variant in ("ELF", "ELF-REG"):
        for name in sides:
            step, bare, adamw = (med[(name, variant, k)] for k in ("step", "bare", "adamw"))
            last = res[(name, variant, "step")][-1]
            rate = last["gemm_flops"] / med[(name, variant, "rate")]
            flops = last["flops"]
            limit = flops["total"] / rate
            ph = last["phases"]
            tot = ph["features"] + ph["update"]
            print(f"{variant:8s} {name:3s}: step {1e3 * step:7.1f} ms  (batch+draws {100 * ph['features'] / tot:4.1f} %)"
                  f"   bare fwd+bwd {1e3 * bare:6.1f} ms   AdamW step {1e3 * adamw:6.1f} ms (Muon / AdamW "
                  f"{step / adamw:.2f}x)")
            print(f"{'':13s}limit {1e3 * limit:6.1f} ms = {flops['total'] / 1e9:.2f} GFLOP (Muon "
                  f"{flops['muon'] / 1e6:.0f} MFLOP) at {rate / 1e9:.1f} GFLOP/s (fp32 {GEMM}^3 GEMM, same process)"
                  f"   step / limit {step / limit:.2f}x")
        if "old" in sides:
            print(f"{variant:8s} old / new step time: {med[('old', variant, 'step')] / med[('new', variant, 'step')]:.2f}x"
                  f"   (new step / old bare fwd+bwd {med[('new', variant, 'step')] / med[('old', variant, 'bare')]:.2f}x)")


if __name__ == "__main__":
    main()
