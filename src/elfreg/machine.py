"""The machine a run's numbers depend on besides its settings: the CPU, its vector extensions, torch's build, threads.

Training and sampling are deterministic for a given machine type, torch build and thread count: the same run
repeats bit for bit there (tests/demo/test_run.py), whatever the load and however many runs train side by side.
Another CPU (other vector extensions pick other kernels: AVX-512 vs AVX2, native bf16 or not), another torch build
or another thread count (other reduction orders) gives other numbers, within the spread over training seeds.
Recorded by the demo (results.json, report.md) and read by :mod:`elfreg.precision` (its measurements are cached per
machine); it imports nothing of elfreg.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Protocol


class Recorded(Protocol):
    """What a run records of its precision (an :class:`elfreg.precision.Precision`)."""

    def record(self) -> dict: ...

    def describe(self) -> str: ...

# environment variables that select torch's CPU kernels (the AVX2 emulation of docs/performance.md sets the first three)
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")

# The vector extensions that select torch's CPU kernels (x86 /proc/cpuinfo flags, then Arm features).
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimddp", "sve", "sve2",
                "bf16", "i8mm")


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what ``platform`` knows)."""
    text = cpuinfo if cpuinfo is not None else _read("/proc/cpuinfo")
    field = lambda key: (re.search(rf"^{key}\s*:\s*(.+)$", text, re.M) or [None, None])[1]  # noqa: E731
    name = next((field(k) for k in ("model name", "Model Name", "Hardware") if field(k)), None)
    if name is None:
        return platform.processor() or platform.machine() or "unknown"
    # a virtual machine may show only the brand: family / model / stepping tell the generation apart
    ids = [f"{k} {field(k)}" for k in ("cpu family", "model", "stepping") if field(k)]
    return name.strip() + (f" ({', '.join(ids)})" if ids else "")


def vector_extensions(cpuinfo: str | None = None) -> list[str]:
    """The CPU's vector extensions among ``VECTOR_FLAGS``, in that order (empty where /proc/cpuinfo is missing)."""
    text = cpuinfo if cpuinfo is not None else _read("/proc/cpuinfo")
    m = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
    have = set(m.group(1).split()) if m else set()
    return [f for f in VECTOR_FLAGS if f in have]


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine_info(threads: int, lanes: int, precision: Recorded | None = None) -> dict:
    """The machine, torch build and thread counts of a demo run, and the training precision (recorded in
    results.json and the report)."""
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "vector_extensions": vector_extensions(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_blas": blas.group(1) if blas else None,
        "mkldnn": torch.backends.mkldnn.is_available(),
        "python": platform.python_version(),
        "os": platform.platform(),
        "threads": threads,
        "lanes": lanes,
        "threads_per_run": threads // lanes,
        "interop_threads": torch.get_num_interop_threads(),
        "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", *KERNEL_ENV) if k in os.environ},
        "precision": None if precision is None else {**precision.record(), "summary": precision.describe()},
    }
