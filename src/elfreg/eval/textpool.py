"""Per-sample text work (answer extraction, math-verify, code preparation) in killable worker processes.

A regular expression or a parser stuck inside C code cannot be interrupted from another thread, and a signal
handler only runs between bytecodes; so every task runs in a worker process under a wall-clock limit, and a task
past it is killed with its worker, which is replaced. The task is then reported as over the limit and the run goes
on. Workers are forked, so the task functions (closures included) are inherited, never pickled; only their
arguments and results cross the pipe.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait


@dataclass(frozen=True)
class Outcome:
    """What a task gave: its ``value``, or ``error`` saying why it gave none (over the limit, raised, died)."""

    value: object = None
    error: str | None = None


def _serve(conn, fns: dict[str, Callable]) -> None:
    """A worker's loop: run ``(name, args)`` tasks until the pipe closes; answer ``(ok, value or error)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it kills the workers
    while True:
        try:
            name, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            out = (True, fns[name](*args))
        except BaseException as e:  # noqa: BLE001 - RecursionError, MemoryError: that task's error, not the worker's
            out = (False, type(e).__name__)
        try:
            conn.send(out)
        except (RecursionError, ValueError, TypeError, AttributeError) as e:  # an unpicklable or too deep result
            conn.send((False, f"unsendable result ({type(e).__name__})"))


class _Worker:
    def __init__(self, ctx, fns: dict[str, Callable]) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, fns), daemon=True)
        self.proc.start()
        child.close()
        self.task: tuple[Hashable, str, float] | None = None  # (key, step, deadline) while busy

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


class TextPool:
    """``workers`` processes that run the named ``fns``; each task gets at most ``limit_s`` seconds of wall time."""

    def __init__(self, fns: dict[str, Callable], workers: int, limit_s: float) -> None:
        if limit_s <= 0:
            raise ValueError(f"the per-sample time limit must be > 0 s, got {limit_s}")
        self.fns, self.limit_s = fns, limit_s
        self._ctx = mp.get_context("fork")
        self._workers = [_Worker(self._ctx, fns) for _ in range(max(1, workers))]

    def __enter__(self) -> TextPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker (a task still running is abandoned)."""
        for w in self._workers:
            w.kill()
        self._workers = []

    def _replace(self, w: _Worker) -> _Worker:
        w.kill()
        new = _Worker(self._ctx, self.fns)
        self._workers[self._workers.index(w)] = new
        return new

    def _start(self, w: _Worker, task: tuple[Hashable, str, str, tuple]) -> None:
        key, step, name, args = task
        try:
            w.conn.send((name, args))
        except OSError:  # the idle worker died (killed for memory, say): its replacement takes the task
            w = self._replace(w)
            w.conn.send((name, args))
        w.task = (key, step, time.monotonic() + self.limit_s)

    def run(self, tasks: Iterable[tuple[Hashable, str, str, tuple]]) -> Iterator[tuple[Hashable, Outcome]]:
        """Run ``(key, step, fn name, args)`` tasks; yield ``(key, Outcome)`` as each finishes (completion order).

        ``step`` names the work in errors: ``"time limit in <step> (<limit> s)"``, ``"<step>: <exception>"``."""
        todo = iter(tasks)
        more = True
        while True:
            for w in self._workers:
                if w.task is None and more:
                    task = next(todo, None)
                    if task is None:
                        more = False
                        break
                    self._start(w, task)
            busy = [w for w in self._workers if w.task is not None]
            if not busy:
                return
            left = min(w.task[2] for w in busy) - time.monotonic()
            ready = set(wait([w.conn for w in busy], timeout=max(0.0, left)))
            for w in busy:
                key, step, deadline = w.task
                if w.conn in ready:
                    try:
                        ok, value = w.conn.recv()
                    except (EOFError, OSError):  # the worker died (killed for memory, say): replace it
                        self._replace(w)
                        yield key, Outcome(error=f"{step}: the worker process died")
                        continue
                    w.task = None
                    yield key, Outcome(value) if ok else Outcome(error=f"{step}: {value}")
                elif time.monotonic() >= deadline:
                    self._replace(w)
                    yield key, Outcome(error=f"time limit in {step} ({self.limit_s:g} s)")
