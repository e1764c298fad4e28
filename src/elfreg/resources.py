"""Will it fit: what a student or a sampler needs in memory, what this machine has, and the one line when it does not.

One home for the memory estimate of every path that builds a student or samples with one (train, generate, eval
run, diagnose, lm-eval, the demo, ``ElfModel.from_pretrained``). The estimate is a floor, never a forecast: it counts
only what the work must hold at once whatever the kernels do (parameters, and in training their gradients, EMA copy
and optimiser state; the sampler's states and master grid; the block inputs a backward pass keeps), so a refusal
means the work surely cannot fit, and a setting it passes may still run out of memory later. Available memory is RAM
on the CPU (MemAvailable, within a cgroup limit) and free device memory on CUDA; where it cannot be read nothing is
refused. Light: torch is imported only to ask CUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FP32, FP64, INT64 = 4, 8, 8
# The sampler's per-sample (B, L, d) states held across steps at least: the state z, the self-conditioning input q
# and the prompt features (elfreg.sampling.trajectory)
SAMPLER_STATES = 3
# Logit-normal grid of M points: the draws, their sigmoid, the sorted values and the sort's int64 indices, at once
GRID_TRANSIENT = 4
# Training bytes per parameter beyond the fp32 weights: the gradient and the EMA copy (fp32 each), plus the optimiser
# state: AdamW two moments; Muon one momentum buffer (the 1-D parameters' AdamW moments are ignored: a floor)
OPTIMIZER_STATE = {"adamw": 2 * FP32, "muon": FP32}


class DoesNotFit(ValueError):
    """The work cannot fit in this machine's memory; the message names the settings to lower."""


def cgroup_limit_bytes() -> int | None:
    """Memory left to this process's cgroup (v2: memory.max - memory.current), or None without a limit."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
        folder = Path("/sys/fs/cgroup") / line.split("::", 1)[1].lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((folder / "memory.current").read_text()))
    except (OSError, IndexError, ValueError):
        return None


def ram_available_bytes() -> int | None:
    """RAM this process can still get: MemAvailable (page cache it may reclaim included), within a cgroup limit."""
    found = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    limit = cgroup_limit_bytes()
    return found if limit is None else min(found, limit)


def ram_total_bytes() -> int | None:
    """This machine's physical memory, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_bytes(device: Any) -> int | None:
    """Memory free for new tensors on ``device`` (``cpu``, ``cuda``, ``cuda:1``, a torch.device), or None when it
    cannot be known (another accelerator)."""
    kind = str(device)
    if kind.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return None
        index = kind.partition(":")[2]
        return int(torch.cuda.mem_get_info(int(index) if index.isdigit() else torch.cuda.current_device())[0])
    return ram_available_bytes() if kind == "cpu" else None


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def human_bytes(n: float) -> str:
    """Bytes as a person reads them: ``34.4 GB``, ``512.0 MB``."""
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n / 1e3:,.1f} kB"


@dataclass
class Need:
    """Memory some work must hold at once on one device: bytes by part, and the settings that size it."""

    what: str                     # "the student of model/config.json", "generation at --batch-size 16"
    device: str                   # "cpu", "cuda:0"
    parts: dict[str, int] = field(default_factory=dict)
    settings: str = ""            # what to lower, naming the fields: "--batch-size, --rho or --nfe"

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def message(self, available: int) -> str:
        """One line: what needs how much of which memory, of what, against what there is, and what to lower."""
        where = "RAM" if self.device == "cpu" else f"{self.device} memory"
        parts = ", ".join(f"{name} {human_bytes(n)}" for name, n in self.parts.items() if n)
        lower = f"; lower {self.settings}" if self.settings else ""
        return (f"{self.what} needs at least {human_bytes(self.total)} of {where} ({parts}), but "
                f"{human_bytes(available)} is available{lower}")


def check_fits(*needs: Need) -> None:
    """DoesNotFit naming the settings for the first need that exceeds what its device has (summed per device)."""
    by_device: dict[str, list[Need]] = {}
    for need in needs:
        by_device.setdefault(need.device, []).append(need)
    for device, group in by_device.items():
        available = available_bytes(device)
        if available is None:
            continue
        total = Need(" together with ".join(n.what for n in group), device,
                     {k: v for n in group for k, v in n.parts.items()},
                     ", ".join(n.settings for n in group if n.settings))
        if total.total > available:
            raise DoesNotFit(total.message(available))


# -- the student ---------------------------------------------------------------------------------------------------
def student_parameters(m: Any) -> int:
    """Parameters of ``ElfStudent(m)`` for a ModelConfig ``m``, counted from the config (never built): the same
    number as ``ElfStudent(m).num_parameters()``."""
    from elfreg.model.layers import FREQ_DIM as freq

    d, h, mlp, bott = m.feature_dim, m.width, m.mlp_hidden, m.bottleneck_dim
    total = (2 * d * d + d) + (d * bott + bott * h + h) + 2 * (freq * h + h + h * h + h) + m.num_prefix * h
    if m.extra_token == "reg" and getattr(m, "reg_io", "shared") == "direct":
        total += (2 * m.reg_dim * h + h) + (h * m.reg_dim + m.reg_dim)
    elif m.extra_token == "reg":
        total += 2 * m.reg_dim * d + d + m.reg_dim
    elif m.extra_token == "olt":
        total += h
    head_dim = h // m.heads
    block = 2 * h + (3 * h * h + 3 * h) + 2 * head_dim + (h * h + h) + (2 * h * mlp + 2 * mlp) + (mlp * h + h)
    total += m.depth * block + h + (h * d + d)
    total += h * d + d + d * m.head_size + m.head_size
    if m.repa:
        r = m.repa_hidden
        total += h * r + r + r * r + r + r * m.teacher_dim + m.teacher_dim
    return total


def _sequence(m: Any) -> int:
    """Tokens per row the blocks see: the prefix tokens, the REG/OLT token, the canvas."""
    return m.num_prefix + (m.extra_token != "none") + m.max_len


def _forward_floor(m: Any, rows: int, device: str) -> int:
    """Bytes one forward pass over ``rows`` rows holds at once at least: a block's input and output (fp32), the
    attention scores where they are materialised (the CPU path, elfreg.model.layers.attention), and the vocab
    logits of the decode (fp32)."""
    s = _sequence(m)
    scores = m.heads * s * s * FP32 if device == "cpu" else 0
    return rows * (2 * s * m.width * FP32 + scores + m.max_len * m.head_size * FP32)


def model_need(m: Any, what: str, device: str = "cpu", copies: int = 2) -> Need:
    """Loading a student: its fp32 parameters ``copies`` times (the model and the weights read from the file)."""
    return Need(what, device, {"parameters": copies * student_parameters(m) * FP32},
                "model.width, model.depth, model.vocab_size or model.max_len")


def inference_need(m: Any, batch: int, device: str, pass_rows: int | None = None, loaded: bool = True,
                   settings: str = "--batch-size") -> Need:
    """Sampling ``batch`` rows with student ``m`` on ``device``: the sampler's states and one forward pass over
    ``pass_rows`` rows at once (None: the whole batch; elfreg.sampling.invariance.pass_rows gives a scheme's), plus
    the parameters unless ``loaded`` (then they already hold their memory)."""
    parts = {} if loaded else {"parameters": student_parameters(m) * FP32}
    parts["sampler states"] = SAMPLER_STATES * batch * m.max_len * m.feature_dim * FP32
    parts["forward pass"] = _forward_floor(m, batch if pass_rows is None else pass_rows, device)
    return Need(f"sampling {batch} rows at once", device, parts, settings)


def grid_need(points: int, kept: int, batch: int, settings: str) -> Need:
    """The sampler's time grids (float64, on the CPU): one row's master grid of ``points`` points being drawn and
    sorted, and ``kept`` points kept per row for ``batch`` rows."""
    return Need(f"the master grid of {points:,} points", "cpu",
                {"master grid": GRID_TRANSIENT * points * FP64, "kept grids": batch * kept * FP64}, settings)


def sampler_grid_need(cfg: Any, batch: int, settings: str = "--rho, --nfe or --batch-size") -> Need:
    """``grid_need`` for a SamplerConfig: M = cfg.master_points drawn, the sampler's K points kept per row."""
    kept = cfg.master_points if cfg.sampler == "full-span" else cfg.nfe
    return grid_need(cfg.master_points, kept, batch, settings)


def training_need(cfg: Any, device: str, world: int = 1) -> Need:
    """One rank of a training run (a RunConfig): parameters, gradients, EMA and optimiser state, and the block inputs
    its backward pass keeps and the features of the micro-batch (train.batch_size / world rows; bf16 under autocast)."""
    m, tc = cfg.model, cfg.train
    params = student_parameters(m)
    rows = max(1, tc.batch_size // world)
    act = 2 if tc.precision == "bf16" or (tc.precision == "auto" and device.startswith("cuda")) else FP32
    kept = rows * (m.depth + 1) * _sequence(m) * m.width * act
    features = 2 * rows * m.max_len * m.feature_dim * FP32   # the clean features x and the noisy state z
    return Need(f"training ({m.depth} blocks of width {m.width}, {rows} rows per micro-step)", device,
                {"parameters": params * FP32, "gradients and EMA": 2 * params * FP32,
                 "optimiser state": params * OPTIMIZER_STATE[tc.optimizer], "activations": kept + features},
                "train.batch_size (with train.grad_accum for the same global batch), model.width, model.depth or "
                "model.max_len")
