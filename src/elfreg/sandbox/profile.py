"""Where a sandboxed run's time goes: each run's wall time split into its steps, for benchmarks (off by default).

A :class:`SandboxProfile` given to :class:`elfreg.sandbox.Sandbox` makes it stamp each run on the harness's clock
(``time.monotonic()``) and ask the inside for the times of the steps that happen there before any payload code
runs (the fork server's ``--profile``, or the fresh interpreter's): when the server got the program, when its child
was forked, had its namespaces and folders, had read its payload, and held its limits, seccomp filter and uid.
Those times come through a pipe that is closed before the program runs, so nothing a program does reaches them;
the program's own steps are timed by the harness alone (the arrival of its ``ready`` record, of its last output).
Without a profile nothing of this happens: no stamp, no pipe, no extra argument or reply field.

A run's parts, in order (each is the time from the previous stamp that exists to its own, so they add up to the
run's wall time exactly; a step that did not happen, e.g. a program that failed to load, adds nothing):

* ``slot wait`` — waiting for a free slot (another thread holds every one);
* ``payload`` — the payload's JSON, its memfd or stdin, the result pipe, the command line;
* ``server start`` — starting a fork server (a slot's first run, or after a server was replaced);
* ``memcg`` — the memory cgroup: its limit set (fresh interpreter) and its OOM count read before and after;
* ``submit`` — the request reaching the fork server (zygote);
* ``fork`` — the fork from the zygote (zygote), or ``spawn``: starting the process (fresh interpreter);
* ``interpreter start`` — bwrap, the interpreter and the runner's source (fresh interpreter only);
* ``namespaces`` — the child's new mount and IPC namespaces and size-capped tmpfs folders (zygote);
* ``payload read`` — the child reading and decoding its payload;
* ``seccomp+uid`` — rlimits, no-new-privileges, the seccomp filter, the uid drop;
* ``program load`` — compiling and running the program (its imports included) and decoding the inputs, until
  its ``ready`` record arrives;
* ``inputs`` — the program answering its inputs, as the harness waits for the outputs;
* ``checks`` — the harness reading and comparing those outputs (its thread's time in between);
* ``teardown`` — killing the program and everything of its uid, reaping it, the server's reply.
"""

from __future__ import annotations

import statistics
import struct
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

STEPS = ("slot wait", "payload", "server start", "memcg", "submit", "fork", "spawn", "interpreter start",
         "namespaces", "payload read", "seccomp+uid", "program load", "inputs", "checks", "teardown")
# The stamps of the inside, in order, after the request's arrival (zygote) or the process's start (fresh).
ZYGOTE_MARKS = ("fork", "namespaces", "payload read", "seccomp+uid")
FRESH_MARKS = ("interpreter start", "payload read", "seccomp+uid")


class Stamps:
    """The harness's stamps of one run: ``stamps(step)`` says the time since the previous stamp went to ``step``."""

    def __init__(self) -> None:
        self.t: list[tuple[str, float]] = [("", time.monotonic())]

    def __call__(self, step: str) -> None:
        self.t.append((step, time.monotonic()))


class _Off:
    """The stamps of a sandbox without a profile: records nothing."""

    def __call__(self, step: str) -> None:
        pass


OFF = _Off()


@dataclass
class RunSplit:
    """One run's wall time (``wall_s``) split into :data:`STEPS` (``parts``, seconds); ``slot``: its worker."""

    slot: int
    kind: str  # "zygote" or "fresh"
    wall_s: float
    parts: dict[str, float] = field(default_factory=dict)
    start: float = 0.0  # time.monotonic() when the run began



def read_marks(fd: int) -> list[float]:
    """The times written to a profile pipe whose writers are gone (so this never blocks); closes ``fd``."""
    import os

    data = b""
    try:
        while len(data) < 256:
            chunk = os.read(fd, 256)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return [struct.unpack_from("d", data, k)[0] for k in range(0, len(data) - len(data) % 8, 8)]


def split_run(slot: int, kind: str, stamps: Stamps, inside: list[float], arrivals: list[float],
              records: list[dict], feed_s: float) -> RunSplit:
    """The split of one run from the harness's ``stamps``, the ``inside`` times (zygote: the request's arrival then
    :data:`ZYGOTE_MARKS`; fresh: :data:`FRESH_MARKS`), the records' arrivals and the harness's time in ``feed``.

    All are times on one clock, each the end of a step: in time order, each step lasted from the previous one."""
    start, end = stamps.t[0][1], stamps.t[-1][1]
    names = (("submit",) + ZYGOTE_MARKS) if kind == "zygote" else FRESH_MARKS
    points = list(stamps.t[1:]) + [(step, t) for step, t in zip(names, inside) if start <= t <= end]
    if records and records[0].get("status") == "ready" and start <= arrivals[0] <= end:
        points.append(("program load", arrivals[0]))
    points.sort(key=lambda p: p[1])  # stable: equal times keep the harness's order
    parts: dict[str, float] = defaultdict(float)
    last = start
    for step, t in points:
        span = t - last
        if step == "inputs":  # the harness's thread: waiting for outputs, or checking them
            checks = min(max(feed_s, 0.0), span)
            parts["checks"] += checks
            span -= checks
        parts[step] += span
        last = t
    return RunSplit(slot, kind, end - start, {s: parts[s] for s in STEPS if s in parts}, start)


class SandboxProfile:
    """Every run's :class:`RunSplit`, from all of a sandbox's threads."""

    def __init__(self) -> None:
        self.runs: list[RunSplit] = []
        self._lock = threading.Lock()

    def add(self, split: RunSplit) -> None:
        with self._lock:
            self.runs.append(split)

    def table(self, began: float | None = None, ended: float | None = None) -> str:
        """A text table: each step's mean per run (ms), its share, and its total per worker (s); with the scoring's
        ``began`` and ``ended`` (``time.monotonic()``), each worker's time outside a run: before its first, between
        runs, after its last."""
        runs = list(self.runs)
        if not runs:
            return "no sandboxed run"
        slots = sorted({r.slot for r in runs})
        total = sum(r.wall_s for r in runs)
        head = f"{'step':<18} {'mean ms/run':>11} {'share':>6} " + " ".join(f"{f'worker {s} s':>10}" for s in slots)
        lines = [head, "-" * len(head)]
        for step in STEPS:
            vals = [r.parts.get(step, 0.0) for r in runs]
            if not any(vals):
                continue
            per = " ".join(f"{sum(r.parts.get(step, 0.0) for r in runs if r.slot == s):>10.2f}" for s in slots)
            lines.append(f"{step:<18} {1000 * statistics.fmean(vals):>11.2f} {sum(vals) / total:>6.1%} {per}")
        walls = " ".join(f"{sum(r.wall_s for r in runs if r.slot == s):>10.2f}" for s in slots)
        lines.append(f"{'sandboxed run':<18} {1000 * statistics.fmean(r.wall_s for r in runs):>11.2f} "
                     f"{1:>6.0%} {walls}")
        if began is not None and ended is not None:
            first = {s: min(r.start for r in runs if r.slot == s) for s in slots}
            last = {s: max(r.start + r.wall_s for r in runs if r.slot == s) for s in slots}
            busy = {s: sum(r.wall_s for r in runs if r.slot == s) for s in slots}
            for name, value in (("before first run", lambda s: first[s] - began),
                                ("between runs", lambda s: last[s] - first[s] - busy[s]),
                                ("after last run", lambda s: ended - last[s])):
                lines.append(f"{name:<18} {'':>11} {'':>6} " + " ".join(f"{value(s):>10.2f}" for s in slots))
        lines.append(f"{len(runs)} runs ({', '.join(sorted({r.kind for r in runs}))})")
        return "\n".join(lines)
