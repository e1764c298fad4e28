"""One command for the first GPU: prove elfreg's CUDA path and measure it at the paper's shapes.

    python benchmarks/gpu_check.py [--out DIR] [--budget-s 450]      # or: make gpu-check
    python benchmarks/gpu_check.py --smoke                           # tiny shapes on the CPU, seconds (a test runs it)

Writes ``gpu_check.json`` and ``gpu_check.md`` in ``--out`` (rewritten after every section, so a killed run keeps
what it measured). Sections, in order of importance:

1. device: the software, the device, and its peak bf16 FLOP/s from a large matmul measured in this run (MFU below
   is read against this device, not a datasheet);
2. gpu_tests: the tests marked ``gpu`` (CUDA SDPA vs the math path, bf16 autocast step vs fp32, a one-process NCCL
   group, an FSDP2-wrapped step vs the plain one, sampling batch invariance, ``elfreg generate``), run by pytest;
3. training: ELF and ELF-REG steps (the real ``Trainer.step_once``) at the B and L students of configs/gsm8k/*.yaml,
   with online features from a Qwen3-0.6B-shaped encoder and a Qwen3-1.7B-shaped teacher (random weights, cut to
   the blocks the presets read) and with cached features: step time, tokens/s (the paper's count: prompt + response
   + EOS), MFU, peak memory, the ELF-REG / ELF ratio, and the step time the paper's GPU-hours imply;
4. sampling: early-stop at 16/64/128 NFE, batch 1/16/64/256, against transformers' KV-cached ``generate`` of an AR
   model of the same size (benchmarks/bench_vs_autoregressive.py), and ``elfreg generate``'s end-to-end latency
   with the frozen encoder;
5. largest_batch: the largest per-GPU batch of an ELF-REG training step that fits in memory.

Every section runs inside a time box, its share of a global budget (default 450 s, under the 8 minutes the check may
take): one that fails or overruns records its error and the rest still run; sections the budget cannot fit are
skipped with the reason; 25 s past the budget a watchdog ends the process even from inside a hung kernel. Nothing
needs the network (the backbones are built from their shapes; hub access is switched off).
Without CUDA (or with ``--smoke``) every section runs at tiny shapes on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import faulthandler
import gc
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

START = time.monotonic()
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(REPO / "src"), str(HERE)):  # a checkout without `pip install -e .` works too
    if _p not in sys.path:
        sys.path.insert(0, _p)
if __name__ == "__main__":  # never the network: every model here is built locally (imported, e.g. by the tests,
    # the process's environment is its own: set here it would leak offline mode into everything after the import)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

from flops import (PRESETS, QWEN3_TOKENIZER_LEN, BackboneShape, FrozenModels, expectation_markdown,  # noqa: E402
                   expectations, mfu, paper_ratio, preset_config, preset_frozen, sampling_flops, train_step_flops)

SCHEMA = 1
DEFAULT_BUDGET_S = 450.0  # the check must end within 8 minutes on one H200; the rest is start-up and margin
WATCHDOG_MARGIN_S = 25.0  # past the budget by this much, the process exits even from inside a hung kernel


# -- time ------------------------------------------------------------------------------------------------------------
class SectionTimeout(BaseException):
    """A section ran past its time box (a BaseException: no ``except Exception`` on the way swallows it)."""


class SectionSkipped(Exception):
    """A section that has nothing to do here (the message says why)."""


@dataclass
class Deadline:
    """A point in time.monotonic() a section's loops check before starting more work."""

    at: float

    def left(self) -> float:
        return self.at - time.monotonic()


@contextlib.contextmanager
def hard_limit(seconds: float):
    """Raise SectionTimeout in the main thread after ``seconds`` (SIGALRM); a no-op where signals are unavailable."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise SectionTimeout(f"time box of {seconds:.0f} s exceeded")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def sync_seconds(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(wall seconds, result) of fn(), GPU work included (bench_sampler.seconds, keeping the result)."""
    from bench_sampler import seconds

    out: list[Any] = []
    return seconds(lambda: out.append(fn())), out[0]


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# -- the largest batch that fits -------------------------------------------------------------------------------------
@dataclass
class SearchResult:
    """largest: the largest batch seen to fit (0: none); first_fail: the smallest seen to fail (None: none failed);
    exact: largest + 1 == first_fail, or largest reached the limit; probes: every batch tried, in order."""

    largest: int
    first_fail: int | None
    limit: int
    exact: bool
    probes: list[tuple[int, bool]] = field(default_factory=list)


def largest_fitting(fits: Callable[[int], bool], start: int, limit: int,
                    more_time: Callable[[], bool] = lambda: True) -> SearchResult:
    """Largest batch b <= limit with fits(b), assuming fits is monotone: double from ``start`` (or halve when start
    fails), then bisect. ``more_time()`` False stops it early; the result then brackets the answer."""
    if start < 1 or limit < 1:
        raise ValueError(f"largest_fitting: start and limit must be >= 1, got {start} and {limit}")
    probes: list[tuple[int, bool]] = []

    def probe(b: int) -> bool:
        ok = bool(fits(b))
        probes.append((b, ok))
        return ok

    lo, hi = 0, None  # lo fits (0 trivially), hi fails
    b = min(start, limit)
    if probe(b):
        lo = b
        while lo < limit and more_time():
            b = min(2 * lo, limit)
            if probe(b):
                lo = b
            else:
                hi = b
                break
    else:
        hi = b
        while hi > 1 and more_time():
            b = hi // 2
            if probe(b):
                lo = b
                break
            hi = b
    while hi is not None and hi - lo > 1 and more_time():
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    exact = (hi is not None and hi - lo == 1) or lo == limit
    return SearchResult(lo, hi, limit, exact, probes)


# -- sizes ------------------------------------------------------------------------------------------------------------
@dataclass
class Sizes:
    """Every shape the check uses: the paper's on CUDA, tiny ones on the CPU (--smoke)."""

    label: str
    device: str
    presets: tuple[str, ...]  # trained in the training section, in this order
    search_presets: tuple[str, ...]  # whose largest batch is searched
    model_overrides: dict[str, dict[str, Any]]  # per preset size ("b", "l"): model.* overrides (empty: the preset's)
    backbone_overrides: dict[str, Any]
    encoder: BackboneShape
    encoder_layers: int  # blocks written and run: the deepest layer the presets read (the loader keeps no more)
    teacher: BackboneShape
    teacher_layers: int
    tokenizer_len: int
    prompt_tokens: int  # per training row, template included
    row_tokens: int  # per training row: the paper's count (prompt + response + EOS)
    train_batch: int  # per GPU
    warmup_steps: int
    timed_steps: int
    cache_rows: int
    batch_limit: int
    sample_batches: list[int]
    sample_nfes: list[int]
    sample_repeats: int
    e2e_batches: list[int]
    e2e_nfe: int
    peak_n: int
    peak_dtype: torch.dtype
    weights_dtype: torch.dtype


def paper_sizes(device: str) -> Sizes:
    """The presets' shapes (configs/gsm8k/*.yaml): Qwen3-0.6B / 1.7B backbones, canvas 1024, 64 canvases per GPU."""
    cfg = preset_config("elf-reg-l")
    frozen = preset_frozen(cfg)
    paper = cfg.paper
    return Sizes(
        label="the presets' shapes (configs/gsm8k)", device=device, presets=PRESETS,
        search_presets=("elf-reg-l", "elf-reg-b"), model_overrides={"b": {}, "l": {}},
        backbone_overrides={}, encoder=frozen.encoder, encoder_layers=frozen.encoder_layers, teacher=frozen.teacher,
        teacher_layers=frozen.teacher_layers, tokenizer_len=QWEN3_TOKENIZER_LEN,
        prompt_tokens=64, row_tokens=round(paper.tokens / (paper.epochs * paper.rows)),
        train_batch=paper.global_batch // 8, warmup_steps=2, timed_steps=3, cache_rows=16, batch_limit=2048,
        sample_batches=[1, 16, 64, 256], sample_nfes=[16, 64, 128], sample_repeats=1, e2e_batches=[1, 16],
        e2e_nfe=64, peak_n=8192, peak_dtype=torch.bfloat16, weights_dtype=torch.bfloat16)


def smoke_sizes(device: str) -> Sizes:
    """Tiny shapes: every code path of the check in seconds on a CPU."""
    tiny = dict(max_len=32, max_prompt_len=16, heads=2, repa_block=1, bottleneck_dim=16, repa_hidden=32, depth=4)
    shape = BackboneShape("tiny-qwen3", hidden=32, intermediate=64, layers=4, heads=4, kv_heads=2, head_dim=8,
                          vocab=64)
    return Sizes(
        label="tiny shapes (smoke)", device=device, presets=("elf-b", "elf-reg-b"), search_presets=("elf-reg-b",),
        model_overrides={"b": {**tiny, "width": 32}, "l": {**tiny, "width": 48}},
        backbone_overrides={"encoder_layer": 2, "teacher_repa_layer": 2, "teacher_reg_layer": 3},
        encoder=shape, encoder_layers=2, teacher=dataclasses.replace(shape, name="tiny-qwen3-teacher", hidden=48),
        teacher_layers=3,
        tokenizer_len=64, prompt_tokens=6, row_tokens=16, train_batch=4, warmup_steps=1, timed_steps=1,
        cache_rows=4, batch_limit=8, sample_batches=[1, 4], sample_nfes=[4, 8], sample_repeats=1, e2e_batches=[2],
        e2e_nfe=4, peak_n=512, peak_dtype=torch.float32, weights_dtype=torch.float32)


# -- the run's shared state ------------------------------------------------------------------------------------------
@dataclass
class Context:
    """What the sections share: the sizes, a work folder, the measured peak, backbones built and loaded once."""

    sizes: Sizes
    work: Path  # temporary folder: backbones, training rows, feature caches, runs
    peak_flops: float | None = None
    _folders: dict[str, Path] = field(default_factory=dict)
    _backbones: dict[bool, Any] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.sizes.device.startswith("cuda")

    def folder(self, role: str) -> Path:
        """The random-weight backbone folder of ``role`` ("encoder" or "teacher"), written on first use."""
        if role not in self._folders:
            from synthetic import write_random_qwen3

            s = self.sizes
            shape, layers = (s.encoder, s.encoder_layers) if role == "encoder" else (s.teacher, s.teacher_layers)
            self._folders[role] = write_random_qwen3(self.work / role, shape, layers, s.tokenizer_len, s.device,
                                                     s.weights_dtype)
        return self._folders[role]

    def peak(self) -> float:
        """The device's measured peak FLOP/s (the device section measures it; measured here if it did not run)."""
        if self.peak_flops is None:
            self.peak_flops = matmul_peak(self.sizes.device, self.sizes.peak_n, self.sizes.peak_dtype)
        return self.peak_flops

    def backbone_config(self, teacher: bool):
        b = preset_config("elf-reg-l").backbones
        return dataclasses.replace(b, encoder=str(self.folder("encoder")),
                                   teacher=str(self.folder("teacher")) if teacher else None,
                                   **self.sizes.backbone_overrides)

    def backbones(self, teacher: bool):
        """Loaded Backbones (elfreg.backbones, the loader training uses), with or without the teacher; kept."""
        if teacher not in self._backbones:
            from elfreg.backbones import Backbones

            self._backbones[teacher] = Backbones(self.backbone_config(teacher), self.sizes.device, need_teacher=teacher)
        return self._backbones[teacher]

    def rows_file(self) -> Path:
        path = self.work / "rows.jsonl"
        if not path.is_file():
            from synthetic import write_rows

            s = self.sizes
            write_rows(path, 256, s.prompt_tokens, s.row_tokens, s.tokenizer_len)
        return path


# -- sections ---------------------------------------------------------------------------------------------------------
def matmul_peak(device: str, n: int, dtype: torch.dtype, repeats: int = 10) -> float:
    """FLOP/s of an n x n x n matmul (mean of ``repeats`` after 3 warm-ups; random data)."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    for _ in range(3):
        a @ b
    secs, _ = sync_seconds(lambda: [a @ b for _ in range(repeats)])
    return 2 * n ** 3 * repeats / secs


def section_device(ctx: Context, deadline: Deadline, res: dict) -> None:
    import transformers

    res.update(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
               transformers=transformers.__version__, device=ctx.sizes.device, shapes=ctx.sizes.label,
               commit=_git_commit())
    if ctx.cuda:
        p = torch.cuda.get_device_properties(0)
        res.update(name=p.name, capability=f"{p.major}.{p.minor}", memory_gib=p.total_memory / 2 ** 30,
                   multiprocessors=p.multi_processor_count, bf16=torch.cuda.is_bf16_supported(),
                   driver=_nvidia_driver())
    else:
        res.update(name=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    s = ctx.sizes
    res["peak"] = {"n": s.peak_n, "dtype": str(s.peak_dtype).removeprefix("torch."), "flops_per_s": ctx.peak()}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def gpu_test_files(root: Path = REPO / "tests") -> list[Path]:
    """Test files that hold GPU-marked tests (``pytest.mark.gpu``)."""
    return sorted(p for p in root.rglob("test_*.py") if "mark.gpu" in p.read_text(encoding="utf-8"))


def run_pytest(files: list[Path], marker: str, junit: Path, timeout_s: float, cwd: Path = REPO) -> dict:
    """Run pytest on ``files`` selecting ``marker``; per-test outcomes from its JUnit XML."""
    import importlib.util

    cmd = [sys.executable, "-m", "pytest", "-q", "-m", marker, "-p", "no:cacheprovider", f"--junitxml={junit}",
           "-o", "junit_family=xunit2", "--continue-on-collection-errors"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={max(30, int(timeout_s / 2))}")
    cmd += [str(f) for f in files]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests"),
                                                        os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, env=env)
        out = {"returncode": proc.returncode, "output_tail": (proc.stdout + proc.stderr)[-3000:]}
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        out = {"returncode": None, "timed_out": True, "output_tail": text[-3000:]}
    out["tests"] = parse_junit(junit) if junit.is_file() else []
    counts: dict[str, int] = {}
    for t in out["tests"]:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    out["counts"] = counts
    return out


def parse_junit(path: Path) -> list[dict]:
    """[{name, outcome (passed/failed/error/skipped), seconds, message}] from a pytest JUnit XML file."""
    tests = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or node.text or "").strip().splitlines()[0][:300] if (
                    node.get("message") or node.text) else ""
                break
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        tests.append({"name": name, "outcome": outcome, "seconds": float(case.get("time") or 0), "message": message})
    return tests


def section_gpu_tests(ctx: Context, deadline: Deadline, res: dict) -> None:
    if not ctx.cuda:
        raise SectionSkipped("no CUDA device: the GPU-marked tests skip without one (the test suite runs them so)")
    files = gpu_test_files()
    res["files"] = [str(f.relative_to(REPO)) for f in files]
    res.update(run_pytest(files, "gpu", ctx.work / "gpu-tests.xml", max(10.0, deadline.left() - 5)))


def preset_run_config(ctx: Context, preset: str, batch: int):
    """configs/gsm8k/<preset>.yaml on the synthetic backbones and rows (the model's shape as the preset has it)."""
    from synthetic import trainer_overrides

    from elfreg.train.config import load_run_config

    s = ctx.sizes
    reg = preset.startswith("elf-reg")
    extra = {f"model.{k}": v for k, v in s.model_overrides[preset[-1]].items()}
    extra.update({f"backbones.{k}": v for k, v in s.backbone_overrides.items()})
    over = trainer_overrides(ctx.rows_file(), ctx.folder("encoder"), ctx.folder("teacher") if reg else None, batch,
                             extra)
    return load_run_config(REPO / "configs" / "gsm8k" / f"{preset}.yaml", over)


def build_trainer(ctx: Context, preset: str, batch: int):
    from elfreg.train.trainer import Trainer

    cfg = preset_run_config(ctx, preset, batch)
    return Trainer(cfg, ctx.work / "runs" / preset, resume="never",
                   backbones=ctx.backbones(cfg.backbones.teacher is not None))


def time_steps(trainer, first_step: int, warmup: int, timed: int, deadline: Deadline) -> list[dict]:
    """Run warm-up then timed optimiser steps (Trainer.step_once); each timed one: seconds and the trainer's metrics."""
    out, step, last = [], first_step, 0.0
    for k in range(warmup + timed):
        if deadline.left() < 2 * last:  # the step after this one would not fit in the box
            break
        last, m = sync_seconds(lambda: trainer.step_once(step))
        step += 1
        if k >= warmup:
            out.append({"seconds": last, "tokens": m["tokens"], "loss": m["loss"]})
    return out


def measure_mode(ctx: Context, trainer, preset: str, mode: str, deadline: Deadline, first_step: int,
                 expected: dict | None) -> dict:
    s = ctx.sizes
    batch = trainer.per_rank
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    steps = time_steps(trainer, first_step, s.warmup_steps, s.timed_steps, deadline)
    if not steps:
        return {"batch": batch, "skipped": f"time box: {deadline.left():.0f} s left, no step timed"}
    step_s = statistics.median(x["seconds"] for x in steps)
    tokens = statistics.median(x["tokens"] for x in steps)
    cfg = trainer.cfg
    frozen = None
    if mode == "online":
        b = cfg.backbones
        frozen = FrozenModels(s.encoder, b.encoder_layer, s.teacher if b.teacher else None,
                              max(b.teacher_repa_layer, b.teacher_reg_layer) if b.teacher else 0)
    flops = train_step_flops(cfg.model, cfg.objective, batch, frozen)
    out = {"batch": batch, "steps_timed": len(steps), "step_s": step_s, "tokens_per_step": tokens,
           "tokens_per_s": tokens / step_s, "canvas_positions_per_s": batch * cfg.model.max_len / step_s,
           "rows_per_s": batch / step_s, "flops_per_step": flops["total"], "flops_parts": flops,
           "achieved_tflops": flops["total"] / step_s / 1e12, "loss": steps[-1]["loss"]}
    out["mfu"] = mfu(flops["total"], step_s, ctx.peak())
    if ctx.cuda:
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
        if expected is not None and mode == "online":
            out["paper_step_s"] = expected["gpu_seconds_per_row"] * batch
            out["paper_basis"] = expected["basis"]
    return out


def draw_seconds(ctx: Context, cfg, batch: int) -> float:
    """CPU seconds of one step's random draws (elfreg.objective.draw, per-example generators) at this batch."""
    from elfreg.objective import draw
    from elfreg.train.rng import example_generators

    m = cfg.model
    keys = [(0, i) for i in range(batch)]
    t0 = time.perf_counter()
    draw(cfg.objective, example_generators(0, keys), m.max_len, m.feature_dim,
         m.reg_dim if m.extra_token == "reg" else None)
    return time.perf_counter() - t0


def section_training(ctx: Context, deadline: Deadline, res: dict) -> None:
    from synthetic import use_cached_features

    s = ctx.sizes
    expected = {e["preset"]: e for e in expectations(ctx.peak())} if ctx.cuda else {}
    res["presets"] = {}
    res["row_tokens"] = s.row_tokens
    for preset in s.presets:
        entry = res["presets"].setdefault(preset, {})
        if deadline.left() < (60 if ctx.cuda else 1):
            entry["skipped"] = f"time box: {deadline.left():.0f} s left"
            continue
        t0 = time.perf_counter()
        trainer = build_trainer(ctx, preset, s.train_batch)
        entry["setup_s"] = time.perf_counter() - t0
        entry["parameters"] = trainer.student.num_parameters("all")
        entry["optimizer"] = sorted(trainer.optim.optimizers)
        entry["muon"] = type(trainer.optim.optimizers["muon"]).__name__ if "muon" in trainer.optim.optimizers else None
        if "draw_s" not in res:
            res["draw_s"] = {"batch": s.train_batch, "seconds": draw_seconds(ctx, trainer.cfg, s.train_batch)}
        step = 0
        try:
            for mode in ("online", "cached"):
                if mode == "cached":
                    use_cached_features(trainer, ctx.work / "feature-cache", s.cache_rows)
                while True:  # the preset's per-GPU batch; halved (recorded) while it does not fit
                    try:
                        entry[mode] = measure_mode(ctx, trainer, preset, mode, deadline, step, expected.get(preset))
                        break
                    except torch.cuda.OutOfMemoryError:
                        entry.setdefault("out_of_memory", []).append(f"{mode} at batch {trainer.per_rank}")
                        trainer.optim.zero_grad()
                        free_memory()
                        if trainer.per_rank == 1:
                            entry[mode] = {"error": "out of memory at batch 1"}
                            break
                        trainer.per_rank //= 2
                    finally:
                        step += s.warmup_steps + s.timed_steps
        finally:
            del trainer
            free_memory()
    ratios = {}
    for size in ("b", "l"):
        for mode in ("online", "cached"):
            elf = res["presets"].get(f"elf-{size}", {}).get(mode, {})
            reg = res["presets"].get(f"elf-reg-{size}", {}).get(mode, {})
            if "step_s" in elf and "step_s" in reg:
                ratios[f"{size}/{mode}"] = reg["step_s"] / elf["step_s"]
    res["reg_over_elf"] = ratios
    res["paper_reg_over_elf"] = {"Table 8 (code, L)": paper_ratio("code"), "Table 9 (GSM8K, L)": paper_ratio("gsm8k")}


def section_largest_batch(ctx: Context, deadline: Deadline, res: dict) -> None:
    s = ctx.sizes
    for preset in s.search_presets:
        if deadline.left() < (45 if ctx.cuda else 1):
            res[preset] = {"skipped": f"time box: {deadline.left():.0f} s left"}
            continue
        trainer = build_trainer(ctx, preset, s.train_batch)
        step = [0]
        peaks: dict[int, float] = {}

        def fits(b: int) -> bool:
            trainer.per_rank = b
            if ctx.cuda:
                torch.cuda.reset_peak_memory_stats()
            try:
                sync_seconds(lambda: trainer.step_once(step[0]))
                step[0] += 1
                if ctx.cuda:
                    peaks[b] = torch.cuda.max_memory_allocated() / 2 ** 30
                return True
            except torch.cuda.OutOfMemoryError:
                return False
            finally:
                trainer.optim.zero_grad()
                free_memory()

        try:
            found = largest_fitting(fits, s.train_batch, s.batch_limit, lambda: deadline.left() > 20 * ctx.cuda)
            res[preset] = {**dataclasses.asdict(found), "mode": "online",
                           "peak_memory_gib": peaks.get(found.largest)}
        finally:
            del trainer
            free_memory()


def section_sampling(ctx: Context, deadline: Deadline, res: dict) -> None:
    from bench_sampler import BenchConfig, build_student
    from bench_vs_autoregressive import build_ar, crossover, matched_depth, measure_batch

    s = ctx.sizes
    m = preset_run_config(ctx, "elf-reg-b", s.train_batch).model
    m = dataclasses.replace(m, feature_dim=s.encoder.hidden, reg_dim=s.teacher.hidden, teacher_dim=s.teacher.hidden,
                            vocab_size=s.tokenizer_len)
    bcfg = BenchConfig(feature_dim=m.feature_dim, reg_dim=m.reg_dim, extra_token=m.extra_token, max_len=m.max_len,
                       vocab_size=m.vocab_size, width=m.width, depth=m.depth, heads=m.heads)
    student, desc = build_student(bcfg)
    ar = build_ar(bcfg, matched_depth(bcfg, student.num_parameters("body")))
    student.to(s.device)
    ar.to(s.device)
    prompt = s.prompt_tokens
    res.update(network=desc, ar_depth=ar.config.num_hidden_layers, prompt_tokens=prompt,
               new_tokens=m.max_len - prompt, bf16=ctx.cuda, batches={})
    last: tuple[int, float, float] | None = None  # (batch, seconds, AR seconds) of the last batch: predicts the next
    for batch in s.sample_batches:
        # AR generate is bound by per-token overhead (about constant in the batch), the sampler by FLOPs (linear)
        if last is not None and deadline.left() < 1.2 * (last[2] + (last[1] - last[2]) * batch / last[0]):
            res["batches"][batch] = {"skipped": f"time box: {deadline.left():.0f} s left"}
            continue
        t0 = time.perf_counter()
        r = measure_batch(student, ar, bcfg, batch, s.sample_nfes, prompt, s.sample_repeats, s.device, ctx.cuda)
        last = (batch, time.perf_counter() - t0, r["ar_s"] * (1 + s.sample_repeats))
        rows = {}
        for n, secs in r["diffusion_s"].items():
            f = sampling_flops(student.config, batch, n)["total"]
            rows[n] = {"seconds": secs, "samples_per_s": batch / secs, "tokens_per_s": batch * r["new_tokens"] / secs,
                       "vs_ar": secs / r["ar_s"], "achieved_tflops": f / secs / 1e12, "mfu": mfu(f, secs, ctx.peak())}
        a, b, cross = crossover(list(r["diffusion_s"]), list(r["diffusion_s"].values()), r["ar_s"])
        res["batches"][batch] = {"ar_s": r["ar_s"], "ar_samples_per_s": batch / r["ar_s"],
                                 "ar_tokens_per_s": batch * r["new_tokens"] / r["ar_s"], "nfe": rows,
                                 "line_s": [a, b], "crossover_nfe": cross}
    del ar
    free_memory()
    res["end_to_end"] = end_to_end(ctx, student, m, deadline)


def end_to_end(ctx: Context, student, m, deadline: Deadline) -> dict:
    """`elfreg generate`'s pipeline (tokenise, frozen encoder, early-stop sampler, decode) on word prompts: seconds per
    batch, in fp32 and in bf16 (what its --precision auto picks on CUDA), and the encoder's share."""
    from synthetic import word_text

    from elfreg.config import ElfRegConfig, ObjectiveConfig
    from elfreg.pretrained import ElfModel
    from elfreg.sampling import GenerationPipeline, SamplerConfig, w_for_task
    from elfreg.pretrained import ElfModelEncoder
    from elfreg.stats import FeatureStats

    s = ctx.sizes
    bb = ctx.backbones(teacher=False)
    cfg = ElfRegConfig(model=student.config, objective=ObjectiveConfig(use_repa=False),
                       backbones=ctx.backbone_config(teacher=False))
    model = ElfModel(cfg, student, FeatureStats.identity(m.feature_dim), FeatureStats.identity(m.reg_dim))
    model.attach_backbones(bb)
    model.to(s.device)
    out: dict[str, Any] = {"nfe": s.e2e_nfe, "prompt_tokens": s.prompt_tokens, "batches": {}}
    scfg = SamplerConfig(sampler="early-stop", nfe=s.e2e_nfe, rho=8, w=w_for_task("gsm8k"))
    for batch in s.e2e_batches:
        texts = [" ".join(word_text(list(range(i * 7, i * 7 + s.prompt_tokens)), s.tokenizer_len))
                 for i in range(batch)]
        keys = [(i, 0) for i in range(batch)]
        row: dict[str, Any] = {}
        row["encoder_s"], _ = sync_seconds(lambda: model.encode_prompts(texts, formatted=True))
        for precision in ("fp32", "bf16") if ctx.cuda else ("fp32",):
            if deadline.left() < 5 * ctx.cuda:
                row[precision] = {"skipped": f"time box: {deadline.left():.0f} s left"}
                continue
            pipe = GenerationPipeline(student, ElfModelEncoder(model, formatted=True), model.tokenizer, scfg,
                                      batch_size=batch, max_prompt_len=student.config.max_prompt_len,
                                      precision=precision)  # the pipeline's own autocast (--precision)
            pipe.run_rows(texts[:1], keys[:1])  # warm-up
            secs, recs = sync_seconds(lambda: pipe.run_rows(texts, keys))
            row[precision] = {"seconds": secs, "samples_per_s": batch / secs,
                              "nfe_spent": recs[0]["nfe_spent"], "encoder_share": row["encoder_s"] / secs}
        out["batches"][batch] = row
    return out


SECTIONS: dict[str, tuple[str, Callable, float, float]] = {
    # name: (title, function, nominal time box in s on CUDA (they add up to the default budget), least time worth
    # starting it in s); each section's box is its share of the budget left (section_boxes)
    "device": ("Device and peak matmul", section_device, 20, 5),
    "gpu_tests": ("GPU-marked tests", section_gpu_tests, 90, 20),
    "training": ("Training throughput", section_training, 170, 60),
    "sampling": ("Sampling", section_sampling, 120, 30),
    "largest_batch": ("Largest per-GPU batch", section_largest_batch, 50, 30),
}


# -- the report -------------------------------------------------------------------------------------------------------
class Report:
    """gpu_check.json + gpu_check.md, rewritten atomically after every section."""

    def __init__(self, out: Path, meta: dict) -> None:
        self.out = Path(out)
        self.data: dict[str, Any] = {"schema": SCHEMA, **meta, "sections": {}}

    def write(self) -> None:
        from elfreg.atomic import atomic_write_text

        self.data["elapsed_s"] = time.monotonic() - START
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.out / "gpu_check.json", json.dumps(self.data, indent=2, default=str) + "\n")
        atomic_write_text(self.out / "gpu_check.md", "\n".join(render_markdown(self.data)) + "\n")


def section_boxes(names: list[str], left: float, scale: float = 1.0) -> tuple[float, float]:
    """(time box, least time worth starting) of the first of ``names`` with ``left`` seconds of budget: its share
    of what is left in proportion to the nominal boxes of it and the sections after it (so time an earlier section
    did not use goes to the later ones), never eating into the least time each later section needs."""
    nominal = sum(SECTIONS[n][2] for n in names)
    reserve = scale * sum(SECTIONS[n][3] for n in names[1:])
    return min(SECTIONS[names[0]][2] * left / nominal, left - reserve), scale * SECTIONS[names[0]][3]


def run_section(report: Report, name: str, fn: Callable, ctx: Context, box: float, least_s: float,
                grace_s: float = 10.0) -> None:
    """Run one section in its time box; record ok / error / timeout / skipped (a box under ``least_s``).

    The section's loops see the box as a soft deadline; ``grace_s`` after it an alarm stops the section."""
    title = SECTIONS[name][0] if name in SECTIONS else name
    entry: dict[str, Any] = {"title": title}
    report.data["sections"][name] = entry
    if box < least_s:
        entry.update(status="skipped", reason=f"global time budget: a box of {max(box, 0):.0f} s is left for it, "
                                              f"it needs at least {least_s:.0f} s")
        report.write()
        return
    result: dict[str, Any] = {}
    entry.update(status="running", box_s=box)  # what a watchdog exit leaves in the files
    report.write()
    t0 = time.monotonic()
    try:
        with hard_limit(box + grace_s):
            fn(ctx, Deadline(t0 + box), result)
        entry["status"] = "ok"
    except SectionSkipped as exc:
        entry.update(status="skipped", reason=str(exc))
    except SectionTimeout as exc:
        entry.update(status="timeout", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one failing section must not stop the others
        entry.update(status="error", error=f"{type(exc).__name__}: {exc}"[:2000],
                     traceback=traceback.format_exc()[-4000:])
    finally:
        entry.update(seconds=time.monotonic() - t0, box_s=box, result=result)
        free_memory()
        report.write()


def _fmt(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec) if isinstance(x, (int, float)) else str(x)


def render_markdown(data: dict) -> list[str]:
    """The report as markdown lines."""
    out = ["# elfreg GPU check", ""]
    dev = data["sections"].get("device", {}).get("result", {})
    out.append(f"Started {data.get('started')}; {data.get('elapsed_s', 0):.0f} s of a {data.get('budget_s', 0):.0f} s "
               f"budget; shapes: {data.get('shapes')}; command `{data.get('command')}`.")
    if not data.get("paper_shapes", True):
        out.append("\nTiny shapes: the figures show that every path runs, not how fast elfreg is (single steps on a "
                   "CPU; MFU against a small matmul).")
    out.append("")
    out.append("| section | status | seconds | note |")
    out.append("| --- | --- | --- | --- |")
    for name, sec in data["sections"].items():
        note = sec.get("reason") or sec.get("error") or ""
        out.append(f"| {sec.get('title', name)} | {sec.get('status')} | {_fmt(sec.get('seconds'), '.0f')} "
                   f"| {note.splitlines()[0][:160] if note else ''} |")
    if data.get("expected"):
        out += ["", "## What the paper's GPU-hours predict", "",
                "Per canvas (one row, one epoch) from seeds 002 §4.3, Tables 8-9; FLOPs from benchmarks/flops.py "
                "(docs/performance.md explains both).", ""] + list(data["expected"])
    for name, render in (("device", _md_device), ("gpu_tests", _md_tests), ("training", _md_training),
                         ("sampling", _md_sampling), ("largest_batch", _md_largest)):
        sec = data["sections"].get(name)
        if sec and sec.get("result"):
            out += ["", f"## {sec.get('title', name)}", ""] + render(sec["result"], dev)
    return out


def _md_device(r: dict, dev: dict) -> list[str]:
    keys = ("name", "capability", "memory_gib", "driver", "torch", "cuda", "transformers", "python", "commit",
            "threads")
    lines = [", ".join(f"{k} {_fmt(r[k])}" for k in keys if r.get(k) is not None)]
    p = r.get("peak")
    if p:
        lines.append(f"\nPeak: {p['n']}^3 {p['dtype']} matmul at {p['flops_per_s'] / 1e12:.1f} TFLOP/s "
                     "(measured here; MFU below is against it).")
    return lines


def _md_tests(r: dict, dev: dict) -> list[str]:
    counts = ", ".join(f"{v} {k}" for k, v in sorted(r.get("counts", {}).items())) or "no tests ran"
    lines = [f"{counts} (pytest exit {r.get('returncode')}{', timed out' if r.get('timed_out') else ''}).", "",
             "| test | outcome | s | message |", "| --- | --- | --- | --- |"]
    for t in r.get("tests", []):
        lines.append(f"| {t['name']} | {t['outcome']} | {t['seconds']:.1f} | {t['message'][:120]} |")
    return lines


def _md_training(r: dict, dev: dict) -> list[str]:
    lines = [f"Real `Trainer.step_once` (draws, loss with its self-conditioning passes, backward, clipping, "
             f"Muon/AdamW, EMA) on synthetic rows of {r.get('row_tokens')} paper-counted tokens. Online: features "
             "from the frozen encoder (+ teacher) every step; cached: from a feature cache.", "",
             "| preset | params | mode | batch | step s | tokens/s | canvas pos/s | TFLOP/s | MFU | peak GiB "
             "| paper-implied step s |", "| --- |" + " --- |" * 10]
    for preset, e in r.get("presets", {}).items():
        if "skipped" in e:
            lines.append(f"| {preset} | - | - | - | skipped: {e['skipped']} |" + " |" * 6)
            continue
        for mode in ("online", "cached"):
            x = e.get(mode)
            if not x:
                continue
            if "error" in x or "skipped" in x:
                note = x.get("error") or f"skipped: {x['skipped']}"
                lines.append(f"| {preset} | {_count(e.get('parameters'))} | {mode} | - | {note[:80]} |"
                             + " |" * 6)
                continue
            lines.append(
                f"| {preset} | {_count(e.get('parameters'))} | {mode} | {x['batch']} | {x['step_s']:.3f} "
                f"| {x['tokens_per_s']:,.0f} | {x['canvas_positions_per_s']:,.0f} | {_fmt(x['achieved_tflops'])} "
                f"| {_pct(x.get('mfu'))} | {_fmt(x.get('peak_memory_gib'), '.1f')} "
                f"| {_fmt(x.get('paper_step_s'), '.2f')} |")
    if any("paper_step_s" in e.get("online", {}) for e in r.get("presets", {}).values()):
        lines.append("\nPaper-implied step: the paper's H200 GPU-seconds per canvas (seeds 002 §4.3, Tables 8-9; the "
                     "prediction table above) times the batch.")
    ratios = r.get("reg_over_elf", {})
    if ratios:
        paper = "; ".join(f"{k} {v:.2f}x" for k, v in r.get("paper_reg_over_elf", {}).items())
        lines.append("")
        lines.append("ELF-REG / ELF step time: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
                     + f" (paper, H200 GPU-hours per canvas of the L students, seeds 002 §4.3: {paper}).")
    if r.get("draw_s"):
        lines.append(f"\nThe step's random draws (CPU, per-example generators): {1e3 * r['draw_s']['seconds']:.1f} ms "
                     f"at batch {r['draw_s']['batch']}.")
    for preset, e in r.get("presets", {}).items():
        if e.get("out_of_memory"):
            lines.append(f"\n{preset}: out of memory ({', '.join(e['out_of_memory'])}); measured at half that batch.")
    return lines


def _count(n: float | None) -> str:
    """A parameter count: 241.3M, 12.5k."""
    if n is None:
        return "-"
    return f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n / 1e3:.1f}k"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _md_sampling(r: dict, dev: dict) -> list[str]:
    lines = [f"{r.get('network')}; AR: LlamaForCausalLM, {r.get('ar_depth')} blocks of the same width (KV cache, "
             f"greedy); prompt {r.get('prompt_tokens')} tokens, {r.get('new_tokens')} new tokens; bf16 autocast "
             f"{r.get('bf16')}. Early-stop sampler, seconds per batch (all samples of a batch finish together).", "",
             "| batch | NFE | diffusion s | samples/s | vs AR | TFLOP/s | MFU | AR s | AR samples/s | crossover N |",
             "| --- |" + " --- |" * 9]
    for batch, b in r.get("batches", {}).items():
        if "skipped" in b:
            lines.append(f"| {batch} | skipped: {b['skipped']} |" + " |" * 8)
            continue
        for n, x in b["nfe"].items():
            lines.append(f"| {batch} | {n} | {x['seconds']:.3f} | {x['samples_per_s']:.2f} | {x['vs_ar']:.2f}x "
                         f"| {_fmt(x['achieved_tflops'])} | {_pct(x.get('mfu'))} | {b['ar_s']:.3f} "
                         f"| {b['ar_samples_per_s']:.2f} | {b['crossover_nfe']:.1f} |")
    e2e = r.get("end_to_end")
    if e2e:
        lines += ["", f"`elfreg generate` end to end (tokenise, frozen encoder, {e2e['nfe']} NFE early-stop, decode), "
                  f"prompts of {e2e['prompt_tokens']} tokens:", "",
                  "| batch | encoder s | fp32 s | bf16 autocast s (generate's auto on CUDA) | encoder share (fp32) |",
                  "| --- | --- | --- | --- | --- |"]
        for batch, x in e2e["batches"].items():
            f32, b16 = x.get("fp32", {}), x.get("bf16", {})
            lines.append(f"| {batch} | {x['encoder_s']:.3f} | {_fmt(f32.get('seconds'), '.3f')} "
                         f"| {_fmt(b16.get('seconds'), '.3f')} | {_pct(f32.get('encoder_share'))} |")
    return lines


def _md_largest(r: dict, dev: dict) -> list[str]:
    lines = []
    for preset, x in r.items():
        if "skipped" in x:
            lines.append(f"- {preset}: skipped ({x['skipped']})")
            continue
        bound = "" if x["exact"] else f" (search stopped early; {x['first_fail'] or '> ' + str(x['largest'])} "
        bound += "fails)" if not x["exact"] and x["first_fail"] else ")" if not x["exact"] else ""
        at_limit = " (the search limit)" if x["largest"] == x["limit"] else ""
        peak = f"peak {x['peak_memory_gib']:.1f} GiB at it; " if x.get("peak_memory_gib") else ""
        lines.append(f"- {preset} ({x['mode']} features): {x['largest']} canvases per GPU fit{at_limit}{bound}; "
                     f"{peak}probes "
                     + ", ".join(f"{b}{'' if ok else ' OOM'}" for b, ok in x["probes"]))
    return lines


# -- main -------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (seconds)")
    ap.add_argument("--device", default=None, help="default: cuda when available (cpu with --smoke)")
    ap.add_argument("--out", default=".", help="folder for gpu_check.json and gpu_check.md")
    ap.add_argument("--budget-s", type=float, default=None,
                    help=f"global time budget (default {DEFAULT_BUDGET_S:.0f} s; 120 s with --smoke)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {', '.join(SECTIONS)}")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.sections.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        ap.error(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.budget_s is not None and args.budget_s <= 0:
        ap.error(f"--budget-s: must be positive, got {args.budget_s}")
    device = args.device or ("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False")
    paper = device.startswith("cuda") and not args.smoke
    sizes = paper_sizes(device) if paper else smoke_sizes(device)
    budget = args.budget_s if args.budget_s is not None else (DEFAULT_BUDGET_S if paper else 120.0)
    budget_end = START + budget
    meta = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:])),
            "budget_s": budget, "shapes": sizes.label, "paper_shapes": paper, "device": device}
    report = Report(Path(args.out), meta)
    # Past the budget a section stuck inside a kernel or a collective (where the alarm cannot reach it) ends the
    # process: the files then show that section as "running" and every earlier one complete.
    faulthandler.dump_traceback_later(max(budget_end - time.monotonic(), 1.0) + WATCHDOG_MARGIN_S, exit=True)
    with tempfile.TemporaryDirectory(prefix="elfreg-gpu-check-") as tmp:
        ctx = Context(sizes, Path(tmp))
        for i, name in enumerate(names):
            box, least = section_boxes(names[i:], budget_end - time.monotonic(),
                                       1.0 if paper else budget / DEFAULT_BUDGET_S)
            run_section(report, name, SECTIONS[name][1], ctx, box, least)
            print(f"gpu_check: {name}: {report.data['sections'][name]['status']} "
                  f"({report.data['sections'][name].get('seconds', 0):.1f} s)", file=sys.stderr, flush=True)
        ctx._backbones.clear()
    faulthandler.cancel_dump_traceback_later()
    report.data["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report.data["expected"] = expectation_markdown(ctx.peak_flops if paper else None)
    report.write()
    print(f"gpu_check: wrote {report.out / 'gpu_check.json'} and {report.out / 'gpu_check.md'}", file=sys.stderr)
    failed = [n for n, s in report.data["sections"].items() if s["status"] in ("error", "timeout")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
