"""CPU threads for inference: ``--threads`` of ``elfreg generate`` and ``elfreg eval run``.

torch's default, one thread per core, suits an idle machine. A small model's steps are short, so on a busy one
its threads wait for cores: one question took 27-58 s with the default and 7 s with one thread (2 cores under
load). ``auto``, the default: ``OMP_NUM_THREADS`` when set, else the usable CPUs less the machine's current load
(the one-minute load average, rounded), at least 1, and never more than the process already uses. Floating-point
sums split over another number of threads can round differently and, rarely, change a token: give ``--threads N``
to reproduce a run exactly.
"""

from __future__ import annotations

import argparse
import os

from elfreg.bounds import Range

THREADS = Range(1, 1024, integer=True, why="CPU threads")


def auto_threads() -> int:
    """``OMP_NUM_THREADS`` when it is a positive integer, else usable CPUs minus the one-minute load average (>= 1)."""
    from elfreg.resources import usable_cpus

    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    cpus = usable_cpus()
    try:
        busy = round(os.getloadavg()[0])
    except (AttributeError, OSError):   # no load average on this platform
        busy = 0
    return max(1, min(cpus, cpus - busy))


def threads_arg(text: str) -> int | None:
    """argparse type of ``--threads``: ``auto`` (None) or a count in THREADS' range."""
    if text.strip().lower() == "auto":
        return None
    try:
        return THREADS.arg(text)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or auto)") from None


def add_threads_argument(p: argparse.ArgumentParser) -> None:
    """The ``--threads`` flag (default auto)."""
    p.add_argument("--threads", type=threads_arg, default=None, metavar="N|auto",
                   help="CPU threads for the model (default auto: OMP_NUM_THREADS, else the usable CPUs less the "
                        "machine's load, at least 1; a busy machine answers faster with fewer)")


def set_inference_threads(requested: int | None) -> int:
    """Set torch's intra-op threads to ``requested`` (None: :func:`auto_threads`); returns the count set."""
    import torch

    # auto never raises what the process already runs with (torch's default, or a caller's choice)
    n = requested if requested is not None else min(torch.get_num_threads(), auto_threads())
    torch.set_num_threads(n)
    return n
