"""Precision by measurement: bf16 autocast only where this device runs it faster than fp32 at the run's own shapes.

``auto`` (the default of train.precision, the demo, ``generate`` / ``eval run --precision`` and backbones.dtype):
on CUDA, bf16 (where the GPU supports it). On a CPU, the matrix products of the run's shapes (a ``Workload``) are
timed once in fp32 and under bf16 autocast, interleaved, for about a second; bf16 is chosen only where it takes at
most ``BF16_MARGIN`` of fp32's time. CPUs with AVX512-BF16 or AMX run bf16 several times faster than fp32; CPUs
without it (AVX2 only: most laptops, AMD before Zen 4) emulate it, 5-50x slower than fp32. The probe runs on one
thread and counts the process's CPU time, not the wall clock: on a busy machine (other processes on the cores) a
two-thread timing swung from 0.1x to 7x between runs, one thread's CPU time stayed within 10 %. The measured ratio
is kept in a per-machine cache (``precision.json`` in the elfreg cache folder) keyed by the CPU, its vector
extensions, torch's build and kernel level and the shapes, so later runs read it instead of timing again.

An explicit ``bf16`` is honoured; on a CPU where it measures more than ``SLOW_BF16`` times fp32's time, one warning
line says so. An explicit ``fp32`` measures nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

CHOICES = ("auto", "bf16", "fp32")
BF16_MARGIN = 0.9  # auto picks bf16 when it takes at most this share of fp32's time (a clear win, not noise)
SLOW_BF16 = 2.0  # an explicit bf16 this many times slower than fp32 is warned about
PROBE_SECONDS = 1.0  # the probe's time budget (the first call of each kind, a warm-up, not counted)
PROBE_FLOPS = 5e8  # rows are capped so that one timed call does at most this many fp32 FLOPs
CACHE_FILE = "precision.json"


@dataclass(frozen=True)
class Workload:
    """The matrix products that autocast changes in one call of a run: every (in, out) linear map of ``maps``
    applied to ``rows`` rows (with the backward pass when ``backward``)."""

    rows: int
    maps: tuple[tuple[int, int], ...]
    backward: bool = False

    def flops(self) -> float:
        """fp32 FLOPs of one call: 2 per multiply-add, the backward's two products 2x the forward."""
        per_row = sum(2 * i * o for i, o in self.maps)
        return self.rows * per_row * (3 if self.backward else 1)

    def capped(self, budget: float = PROBE_FLOPS) -> "Workload":
        """The same maps on at most as many rows as fit ``budget`` FLOPs per call (at least 128: the ratio is that
        of the shapes' regime, not of the row count, once the products are this large)."""
        per_row = self.flops() / self.rows
        rows = max(min(128, self.rows), min(self.rows, int(budget // per_row)))
        return Workload(rows, self.maps, self.backward)

    def key(self) -> str:
        maps = ",".join(f"{i}x{o}" for i, o in self.maps)
        return f"rows={self.rows} maps={maps} backward={int(self.backward)}"


def student_workload(model, rows: int, backward: bool) -> Workload:
    """A student's autocast products at ``rows`` sequences: one transformer block's maps (qkv, proj, w12, w3) on
    every position of the sequence (prefix, extra token, canvas); the input path and both heads run in fp32."""
    h, f = model.width, model.mlp_hidden
    seq = model.num_prefix + int(model.extra_token != "none") + model.max_len
    return Workload(rows * seq, ((h, 3 * h), (h, h), (h, 2 * f), (f, h)), backward)


def backbone_workload(config, rows: int = 2048) -> Workload:
    """A frozen transformers decoder's products on ``rows`` tokens: one block's attention and MLP maps."""
    h = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    kv = (getattr(config, "num_key_value_heads", None) or heads) * head_dim
    inter = getattr(config, "intermediate_size", None) or 4 * h
    return Workload(rows, ((h, heads * head_dim + 2 * kv), (heads * head_dim, h), (h, 2 * inter), (inter, h)))


@dataclass(frozen=True)
class Precision:
    """A run's resolved precision: what was asked, what runs, and the measured bf16 / fp32 time ratio."""

    requested: str  # auto | bf16 | fp32
    choice: str  # bf16 | fp32
    ratio: float | None = None  # bf16 time / fp32 time at the run's shapes; None: not measured
    source: str = "asked"  # measured | cached | cuda | asked | default (auto with nothing to measure: fp32)

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.choice == "bf16" else torch.float32

    @property
    def fast_bf16(self) -> bool:
        """Whether bf16 is the faster arithmetic here (CUDA, or a CPU that measured it faster): Newton-Schulz and
        other fixed-cost work may then run in bf16 too."""
        return self.choice == "bf16" and (self.source == "cuda" or (self.ratio is not None and self.ratio < 1.0))

    def autocast(self, device_type: str) -> torch.autocast:
        """bf16 autocast when bf16 was chosen, else autocast turned off."""
        return torch.autocast(device_type, dtype=torch.bfloat16, enabled=self.choice == "bf16")

    def describe(self) -> str:
        """One line for the logs and reports, e.g. ``fp32 (auto; bf16 measured 4.12x fp32's time here)``."""
        if self.source == "cuda":
            return f"{self.choice} ({self.requested}; CUDA)"
        if self.source == "default":
            return f"{self.choice} ({self.requested}; no shapes to time on this device)"
        if self.ratio is None:
            return f"{self.choice} (as asked)"
        how = "measured" if self.source == "measured" else "measured earlier on this machine"
        return f"{self.choice} ({self.requested}; bf16 {how}: {self.ratio:.2f}x fp32's time at these shapes)"

    def record(self) -> dict:
        """The fields recorded in metrics, summaries, results rows, reports and fingerprints: the setting, the
        precision used and the measured bf16 / fp32 time ratio (None where not measured)."""
        return {"precision": self.requested, "precision_used": self.choice,
                "bf16_time_ratio": None if self.ratio is None else round(self.ratio, 3)}


def check_choice(value: str, field: str) -> None:
    """A clear error naming ``field`` for a precision outside auto / bf16 / fp32."""
    from elfreg.configtools import check

    check(value in CHOICES, field, f"unknown {value!r}; choose auto, bf16 or fp32")


def resolve(requested: str, device: torch.device | str, workload: Workload | None = None, what: str = "precision",
            measure: Callable[[Workload], float] | None = None, cache_dir: str | Path | None = None) -> Precision:
    """The precision a run uses on ``device`` (see the module docstring); logs the choice, warns once about an
    explicit bf16 that is more than SLOW_BF16 times slower than fp32. ``workload``: the run's shapes (needed for
    auto / bf16 on a CPU). ``measure``: the probe (default: ``measured_ratio``, cached per machine); tests fake it.
    ``what``: the setting's name in messages."""
    check_choice(requested, what)
    device = torch.device(device)
    if requested == "fp32":
        return Precision(requested, "fp32")
    if device.type == "cuda":
        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return Precision(requested, "bf16" if ok or requested == "bf16" else "fp32", source="cuda")
    if device.type != "cpu" or workload is None:  # nothing to time: fp32 unless bf16 was asked for
        return Precision(requested, "bf16" if requested == "bf16" else "fp32",
                         source="asked" if requested == "bf16" else "default")
    if measure is not None:
        ratio, source = measure(workload), "measured"
    else:
        ratio, source = cached_ratio(workload, cache_dir)
    if requested == "bf16":
        if ratio > SLOW_BF16:
            log.warning("%s asks for bf16, which takes %.1fx fp32's time on this CPU at these shapes (no native "
                        "bf16): auto or fp32 is faster", what, ratio)
        out = Precision("bf16", "bf16", ratio, source)
    else:
        out = Precision("auto", "bf16" if ratio <= BF16_MARGIN else "fp32", ratio, source)
    log.info("%s: %s", what, out.describe())
    return out


def cache_path(cache_dir: str | Path | None = None) -> Path:
    """The per-machine file of measured ratios (in ``cache_dir``, else the elfreg cache folder)."""
    from elfreg.backbone_cache import cache_home

    return Path(cache_dir) / CACHE_FILE if cache_dir is not None else cache_home() / CACHE_FILE


def machine_key(workload: Workload) -> str:
    """What the ratio depends on: CPU model and vector extensions, torch build and kernel level, the kernel
    environment variables and the shapes (a digest of their text)."""
    from elfreg.machine import KERNEL_ENV, cpu_model, vector_extensions

    env = " ".join(f"{k}={os.environ[k]}" for k in KERNEL_ENV if k in os.environ)
    text = "|".join([cpu_model(), " ".join(vector_extensions()), torch.__version__,
                     torch.backends.cpu.get_cpu_capability(), env, workload.capped().key()])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cached_ratio(workload: Workload, cache_dir: str | Path | None = None) -> tuple[float, str]:
    """(bf16 / fp32 time ratio, "cached" or "measured"): from the per-machine cache, else measured and stored."""
    key = machine_key(workload)
    path = cache_path(cache_dir)
    return _cached_ratio(key, workload.capped(), str(path))


@functools.lru_cache(maxsize=64)  # once per process and key: the file is read, or the probe run, only once
def _cached_ratio(key: str, workload: Workload, path: str) -> tuple[float, str]:
    from elfreg.atomic import atomic_write_text

    p = Path(path)
    entries = _read_cache(p)
    if isinstance(entries.get(key), dict) and isinstance(entries[key].get("ratio"), (int, float)):
        return float(entries[key]["ratio"]), "cached"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: steady on a busy machine (see the module docstring)
    try:
        ratio = measured_ratio(workload)
    finally:
        torch.set_num_threads(threads)
    entries = _read_cache(p)  # another process may have added entries meanwhile
    entries[key] = {"ratio": ratio, "shapes": workload.key(), "threads": 1,
                    "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
                    "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(p, json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError as exc:  # a read-only home: measure again next time
        log.debug("precision cache %s not written: %s", p, exc)
    return ratio, "measured"


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def measured_ratio(workload: Workload, budget_s: float = PROBE_SECONDS,
                   run: Callable[[bool], float] | None = None) -> float:
    """bf16-autocast time / fp32 time of ``workload`` (capped: ``Workload.capped``) on this CPU.

    One untimed call of each kind first (kernel selection, oneDNN's code generation), then fp32 and bf16 calls in
    alternation for about ``budget_s`` seconds (at least 3 of each); the ratio of the two fastest calls, the least
    disturbed by other processes. A clear-cut ratio (over 4x either way) stops early. ``run(bf16)`` times one call
    and returns its CPU seconds (default: the real products, on this thread's torch thread count); tests pass a
    fake.
    """
    run = run if run is not None else _timed_call(workload.capped())
    run(False), run(True)
    t32: list[float] = []
    t16: list[float] = []
    spent = 0.0
    while len(t32) < 50:
        t32.append(run(False))
        t16.append(run(True))
        spent += t32[-1] + t16[-1]
        ratio = min(t16) / min(t32)
        if len(t32) >= 3 and (spent > budget_s or not 0.25 < ratio < 4.0):
            break
    log.debug("precision probe: %d rounds, fp32 median %.2f ms, bf16 median %.2f ms", len(t32),
              1e3 * statistics.median(t32), 1e3 * statistics.median(t16))
    return min(t16) / min(t32)


def _timed_call(workload: Workload) -> Callable[[bool], float]:
    """A function timing one call of ``workload``'s products, in fp32 or under bf16 autocast."""
    g = torch.Generator().manual_seed(0)
    weights = [(torch.randn(o, i, generator=g) * i ** -0.5).requires_grad_(workload.backward)
               for i, o in workload.maps]
    inputs = [torch.randn(workload.rows, i, generator=g).requires_grad_(workload.backward) for i, _ in workload.maps]

    def call(bf16: bool) -> float:
        t0 = time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16), torch.set_grad_enabled(workload.backward):
            outs = [F.linear(x, w) for x, w in zip(inputs, weights)]
        if workload.backward:
            torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
            for t in (*weights, *inputs):
                t.grad = None
        return time.process_time() - t0

    return call
