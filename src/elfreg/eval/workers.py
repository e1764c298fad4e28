"""A pool of killable, memory-limited worker processes: each task runs in one under a wall-clock and a memory limit.

Scoring runs its per-sample text work there (answer extraction, math-verify, code preparation).

A regular expression or a parser stuck inside C code cannot be interrupted from another thread, and a signal
handler only runs between bytecodes; so every task runs in a worker process under a wall-clock limit and a memory
limit, and a task past either is that task's error: a worker past the time limit is killed and replaced, one past
its memory limit replies with the error and is replaced too. The run goes on. Workers are forked, so the task
functions (closures included) are inherited, never pickled; only their arguments and results cross the pipe.

Three properties the harness relies on:

* **No orphans.** A worker keeps no descriptor but its own pipe, stdio and the streams logging writes to (the
  parent's ends of the other workers' pipes, a results file, a sandbox fork server's socket are closed before the
  worker reports ready, and the pool waits for that report before it uses or lists the worker), and asks the
  kernel to kill it when the parent dies (``PR_SET_PDEATHSIG``; elsewhere than Linux, an idle worker still ends on
  its pipe's EOF). SIGKILL or SIGTERM to the main process leaves no worker behind.
* **No start-up charged to a sample.** ``warm_up`` runs once in this process before the first fork, so every
  worker, replacements included, starts with what the tasks import and cache; and a task's clock starts when
  its worker reports that it has the task in hand, not when it was sent.
* **Memory.** ``RLIMIT_DATA`` bounds what a worker maps beyond what it inherits at the fork (its data segment at
  start plus ``memory_bytes``). Not ``RLIMIT_AS``: address space that is only reserved (a CUDA context in ``eval
  run``'s process, malloc arenas, guard pages) would count against it and uses no memory. Memory the parent had
  freed but kept (Python's allocator keeps the free room of arenas still in use) is inherited too, and a task can
  fill it without mapping anything: so a task also counts as over the limit when the worker's private memory
  (pages it wrote, copies of shared ones included) grew by 90 % of ``memory_bytes`` while it ran, and the verdict
  on a sample does not hang on how fragmented the parent's heap was. A task that raised MemoryError, or took the
  worker's address space within 10 % of the limit, is over it too (see ``_serve``). While a task runs the kernel
  stops it at the data limit; inherited free room can add at most the parent's free memory to that.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_START_S = 10.0  # seconds a worker may take to pick up a task it was sent, on top of the task's own limit
_READY_S = 60.0  # seconds a new worker may take to shed what it inherited and say it is ready (a loaded machine)


@dataclass(frozen=True)
class Outcome:
    """What a task gave: its ``value``, or ``error`` saying why it gave none (over a limit, raised, died)."""

    value: object = None
    error: str | None = None


def _status_bytes(field: bytes) -> int | None:
    """A size from /proc/self/status (``b"VmData"``: what ``RLIMIT_DATA`` counts; ``b"VmPeak"``: the largest address
    space since the fork), or None where /proc does not say."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(field + b":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _private_bytes() -> int | None:
    """This process's private dirty memory (/proc/self/smaps_rollup): pages it wrote, copies of pages shared with
    the parent included; None where the kernel does not say (before Linux 4.14, not Linux)."""
    try:
        with open("/proc/self/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Private_Dirty:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class _Ceiling:
    """Past either, a task is over its memory limit: the worker's address space (``VmPeak``), or the growth of its
    private memory while the task ran."""

    address: int
    private_growth: int


def _limit_memory(memory_bytes: int | None) -> _Ceiling | None:
    """Cap this process's future allocations at ``memory_bytes`` beyond its current data segment (never above the
    hard limit); returns where a task counts as over the limit (90 % of the way), or None: no limit, or a host
    without ``RLIMIT_DATA`` or /proc (the time limit still holds)."""
    now, size = _status_bytes(b"VmData"), _status_bytes(b"VmSize")
    if memory_bytes is None or now is None or size is None:
        return None
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    soft = now + memory_bytes if hard == resource.RLIM_INFINITY else min(now + memory_bytes, hard)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (OSError, ValueError):
        return None
    return _Ceiling(size + (soft - now) * 9 // 10, (soft - now) * 9 // 10)


def _prctl() -> Callable | None:
    """libc's ``prctl``, or None where there is none (not Linux). Looked up before forking: a forked child of a
    threaded process must not take the dynamic loader's lock."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_parent(prctl: Callable | None, parent: int) -> None:
    """Ask the kernel for SIGKILL when the parent dies, and exit now if it already has (it may have died between
    the fork and the request). Without ``prctl`` an idle worker still ends on its pipe's EOF."""
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)


def _log_fds() -> set[int]:
    """The descriptors of ``sys.stdout``, ``sys.stderr`` and every logging handler's stream (a worker's warnings
    go where the parent's go, e.g. math-verify's to a log file)."""
    streams = [sys.stdout, sys.stderr]
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        streams += [getattr(h, "stream", None) for h in getattr(logger, "handlers", [])]
    fds = set()
    for stream in streams:
        try:
            fds.add(stream.fileno())
        except (AttributeError, OSError, ValueError):  # no stream, closed, or not a file (io.StringIO)
            pass
    return fds


def _keep_only(keep: set[int]) -> None:
    """Close every inherited descriptor but stdio and ``keep`` (other workers' pipe ends, results files, sockets: a
    worker holding them keeps them open after the parent dies); stdin becomes /dev/null."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    if null != 0:
        os.close(null)


def _serve(conn: Connection, fns: dict[str, Callable], ceiling: _Ceiling | None) -> None:
    """A worker's loop: for each ``(name, args)`` task, say ``("start", time)``, run it, answer
    ``("done", ok, value or error, retire)``; return when the pipe closes or after a task over the memory limit
    (``retire``: a fresh worker takes the next task).

    A task is over the limit when it raised MemoryError, or when it took the worker past ``ceiling``: libraries
    that catch every exception (math-verify, the sanitizer's parser) answer after a MemoryError of their own, from
    work they did not finish."""
    # The collector would write to every object the parent left (its header), copying their pages: memory the
    # task did not ask for, counted as its own
    gc.freeze()
    private = _private_bytes() if ceiling is not None else None
    while True:
        try:
            name, args = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(("start", time.monotonic()))
        try:
            out = (True, fns[name](*args))
        except MemoryError:
            out = (False, "MemoryError")
        except BaseException as e:  # noqa: BLE001 - RecursionError and the like: that task's error, not the worker's
            out = (False, type(e).__name__)
        if ceiling is not None:
            peak, before, private = _status_bytes(b"VmPeak"), private, _private_bytes()
            if (peak is not None and peak >= ceiling.address) or \
                    (before is not None and private is not None and private - before >= ceiling.private_growth):
                out = (False, "MemoryError")
        retire = out == (False, "MemoryError")
        try:
            conn.send(("done", *out, retire))
        except (RecursionError, ValueError, TypeError, AttributeError) as e:  # an unpicklable or too deep result
            conn.send(("done", False, f"unsendable result ({type(e).__name__})", retire))
        if retire:
            return


def _signal_name(status: int) -> str:
    """How a worker ended, from its wait status: ``SIGKILL``, ``exit code 9``."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return signal.Signals(sig).name
        except ValueError:
            return f"signal {sig}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


class _Worker:
    """One forked worker: its pid, the parent's end of its pipe, and the task it holds."""

    def __init__(self, fns: dict[str, Callable], memory_bytes: int | None, prctl: Callable | None) -> None:
        self.conn, child = Pipe()
        parent, log_fds = os.getpid(), _log_fds()
        pid = os.fork()
        if pid == 0:  # the worker: nothing after this returns to the caller
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it kills workers
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # never the parent's handlers
                _die_with_parent(prctl, parent)
                _keep_only({child.fileno(), *log_fds})
                child.send(("ready",))
                _serve(child, fns, _limit_memory(memory_bytes))
            except BaseException:  # noqa: BLE001 - a worker never unwinds into the parent's code
                code = 1
            finally:
                os._exit(code)
        child.close()
        self.pid = pid
        self.status: int | None = None  # wait status once reaped
        # (key, step, deadline) while busy; the deadline counts from the worker's start report once it came
        self.task: tuple[Hashable, str, float] | None = None
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Block until the worker has closed what it inherited (until then it holds the parent's descriptors, and a
        scheduler may run it well after its siblings); a worker that dies or hangs first is an error."""
        try:
            if self.conn.poll(_READY_S) and self.conn.recv() == ("ready",):
                return
        except (EOFError, OSError):
            pass
        died = self.conn.poll(0)  # EOF pending: it ended by itself; otherwise it hung past the wait
        self.kill()
        raise RuntimeError(f"a worker process ended before it was ready ({_signal_name(self.status)})" if died
                           else f"a worker process was not ready within {_READY_S:g} s")

    def kill(self) -> None:
        """SIGKILL and reap the worker (it may have ended already), then close its pipe."""
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.status = os.waitpid(self.pid, 0)[1]
        self.conn.close()


class KillablePool:
    """``workers`` processes that run the named ``fns``; each task gets at most ``limit_s`` seconds of wall time
    from when its worker starts it, and each worker at most ``memory_bytes`` beyond what it inherits (None: no
    memory limit). ``warm_up`` runs here once before the first fork (imports, caches: every worker inherits
    them); its failure is ignored, as the workers would then only do that work themselves.

    Workers are forked by the thread that creates the pool or replaces a worker (``run``); the kernel kills a
    worker when the thread that forked it ends, so use a pool from one thread that outlives it."""

    def __init__(self, fns: dict[str, Callable], workers: int, limit_s: float, memory_bytes: int | None = None,
                 warm_up: Callable[[], object] | None = None) -> None:
        if not limit_s > 0:
            raise ValueError(f"the per-sample time limit must be > 0 s, got {limit_s}")
        if memory_bytes is not None and memory_bytes <= 0:
            raise ValueError(f"the text workers' memory limit must be > 0 bytes, got {memory_bytes}")
        self.fns, self.limit_s, self.memory_bytes = fns, limit_s, memory_bytes
        self._prctl = _prctl()
        if warm_up is not None:
            try:
                warm_up()
            except Exception:  # noqa: BLE001 - an optimisation only
                pass
        self._workers = [_Worker(fns, memory_bytes, self._prctl) for _ in range(max(1, workers))]

    def __enter__(self) -> KillablePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker (a task still running is abandoned)."""
        for w in self._workers:
            w.kill()
        self._workers = []

    @property
    def pids(self) -> list[int]:
        """The workers' process ids (replacements included, as of now)."""
        return [w.pid for w in self._workers]

    def _replace(self, w: _Worker) -> _Worker:
        w.kill()
        new = _Worker(self.fns, self.memory_bytes, self._prctl)
        self._workers[self._workers.index(w)] = new
        return new

    def _start(self, w: _Worker, task: tuple[Hashable, str, str, tuple]) -> None:
        key, step, name, args = task
        try:
            w.conn.send((name, args))
        except OSError:  # the idle worker died (killed for memory, say): its replacement takes the task
            w = self._replace(w)
            w.conn.send((name, args))
        w.task = (key, step, time.monotonic() + _START_S + self.limit_s)

    def _died(self, w: _Worker, step: str) -> str:
        """Reap a worker that closed its pipe mid-task, replace it, and say how it ended."""
        self._replace(w)
        return f"{step}: the worker process died ({_signal_name(w.status)})"

    def _error(self, step: str, error: str) -> str:
        if error == "MemoryError":
            return f"{step}: over the memory limit of text work ({self.memory_bytes / (1 << 20):g} MiB)" \
                if self.memory_bytes is not None else f"{step}: MemoryError"
        return f"{step}: {error}"

    def _receive(self, w: _Worker) -> Outcome | None:
        """Read what ``w`` has sent: a start report moves its deadline (None: nothing finished yet); a result, or
        its death, is the task's outcome. A worker that retires after its answer is replaced."""
        key, step, _ = w.task
        while True:
            try:
                msg = w.conn.recv()
            except (EOFError, OSError):  # the worker died (the kernel's OOM killer, say): replace it
                w.task = None
                return Outcome(error=self._died(w, step))
            if msg[0] == "start":
                w.task = (key, step, msg[1] + self.limit_s)
                if not w.conn.poll():
                    return None
                continue
            _, ok, value, retire = msg
            w.task = None
            if retire:
                self._replace(w)
            return Outcome(value) if ok else Outcome(error=self._error(step, value))

    def run(self, tasks: Iterable[tuple[Hashable, str, str, tuple]]) -> Iterator[tuple[Hashable, Outcome]]:
        """Run ``(key, step, fn name, args)`` tasks; yield ``(key, Outcome)`` as each finishes (completion order).

        ``step`` names the work in errors: ``"time limit in <step> (<limit> s)"``, ``"<step>: <exception>"``."""
        todo = iter(tasks)
        more = True
        while True:
            for w in list(self._workers):
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
                key, step = w.task[:2]
                if w.conn in ready:
                    out = self._receive(w)
                    if out is not None:
                        yield key, out
                        continue
                if w.task is not None and time.monotonic() >= w.task[2]:
                    self._replace(w)
                    yield key, Outcome(error=f"time limit in {step} ({self.limit_s:g} s)")
