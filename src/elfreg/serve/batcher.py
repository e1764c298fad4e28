"""Continuous batching: the rows of requests that arrive within a window run as one batch, in one worker thread.

Every request is a list of formatted prompt texts with ``samples`` each and one sampler setting; its row (i, s) is
noise key (prompt i, sample s), as in ``elfreg generate`` and ``ElfModel.generate``. The worker takes the first
waiting request, then every request that arrives within ``max_wait_ms`` (up to ``max_batch`` rows), and runs the
rows of each sampler setting through the generation pipeline in batches of at most ``max_batch``. The pipeline is
batch-invariant (unless the server was started with ``--no-batch-invariant``), so a request's answers do not
depend on the requests it happens to share a batch with. One thread owns the model and its tokenizer, so nothing
touches the model concurrently; a job's prompts are checked there too (their lengths) unless the server did it
already (``Job.checked``: elfreg serve tokenizes them in a thread of its own, with a tokenizer of its own).

The worker survives its requests: anything a request raises is that request's error. At most ``max_queue``
requests wait (``submit`` raises :class:`QueueFull` beyond), and a request whose every job is cancelled (its client
went away) stops its batch before the next network call. Should the thread die anyway, its requests fail,
``alive`` says so, and ``revive`` starts a new one.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.network import NFECounter
from elfreg.serve import MAX_BATCH, MAX_WAIT_MS
from elfreg.sampling.pipeline import GenerationPipeline
from elfreg.sampling.watch import Watch

log = logging.getLogger("elfreg.serve")
PIPELINES_KEPT = 16   # pipelines cached by sampler setting (building one is cheap; this bounds the memory)


class QueueFull(RuntimeError):
    """The server has as many requests waiting as it takes (HTTP 429)."""


class Cancelled(RuntimeError):
    """Every request of a batch was cancelled: the batch stopped between two network calls."""


@dataclass
class Job:
    """One request: formatted prompt texts, samples per prompt, its sampler setting, and its result.

    ``post(records)`` -> the result, run in the worker thread (so it may use the tokenizer); default: the records.
    ``watch``: sees its rows' texts while they are made (elfreg.sampling.watch; keys are the job's own).
    ``cancel()`` (its client went away) stops its rows before their next network call."""

    texts: list[str]
    samples: int
    cfg: SamplerConfig
    post: Callable[[list[dict]], Any] | None = None
    future: Future = field(default_factory=Future)
    watch: Watch | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    checked: bool = False   # its prompts were checked against the model already (by the server, off this thread)

    @property
    def keys(self) -> list[tuple[int, int]]:
        return [(p, s) for p in range(len(self.texts)) for s in range(self.samples)]

    def cancel(self) -> None:
        self.cancelled.set()
        self.future.cancel()   # a job still waiting never runs; a running one stops at its batch's next call


class CancellableCounter(NFECounter):
    """The pipeline's NFE counter that, before each network call, stops the batch when ``stop()`` says so."""

    def __init__(self, network: Any, stop: Callable[[], bool]) -> None:
        super().__init__(network)
        self.stop = stop

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.stop():
            raise Cancelled("every request of this batch was cancelled")
        return super().__call__(*args, **kwargs)


class Batcher:
    """The worker thread: ``submit`` a Job, wait on its future for one record per (prompt, sample) in key order."""

    def __init__(self, make_pipeline: Callable[[SamplerConfig], GenerationPipeline], max_batch: int = 32,
                 max_wait_ms: float = 10.0, max_queue: int = 256) -> None:
        MAX_BATCH.check(max_batch, "--max-batch")
        MAX_WAIT_MS.check(max_wait_ms, "--max-wait-ms")
        if max_queue < 1:
            raise ValueError(f"--max-queue: need an integer >= 1, got {max_queue}")
        self.make_pipeline = make_pipeline
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000
        self.max_queue = max_queue
        self.pipelines: OrderedDict[SamplerConfig, GenerationPipeline] = OrderedDict()
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.batches = 0          # batches run so far (the tests read them)
        self.batch_rows: list[int] = []
        self.calls = 0            # network calls made so far (each one batch's call)
        self.cancelled = 0        # batches stopped because their every request was cancelled
        self.restarts = 0         # worker threads started after one died
        self.died: str | None = None   # why the last worker thread died, while none runs
        self._current: list[Job] = []  # the jobs of the batch running now
        self._lock = threading.Lock()
        self._closed = False
        self._start()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="elfreg-batcher", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the worker thread runs (False after close, or if it died)."""
        return self._thread.is_alive()

    def revive(self) -> bool:
        """Start a new worker thread if the last one died (not after close); True if one was started."""
        with self._lock:
            if self._closed or self._thread.is_alive():
                return False
            self.restarts += 1
            self.died = None
            self._start()
            return True

    def submit(self, job: Job) -> Future:
        """Queue ``job``; QueueFull when max_queue requests already wait."""
        self.revive()
        with self._lock:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            if self.queue.qsize() >= self.max_queue:
                raise QueueFull(f"the server has {self.max_queue} requests waiting (--max-queue); retry later")
            self.queue.put(job)
        return job.future

    def close(self) -> None:
        """Stop the worker after the requests already queued."""
        with self._lock:
            self._closed = True
        self.queue.put(None)
        self._thread.join(timeout=60)

    def pipeline(self, cfg: SamplerConfig) -> GenerationPipeline:
        if cfg not in self.pipelines:
            pipe = self.make_pipeline(cfg)
            pipe.counter = CancellableCounter(pipe.counter.network, self._stop_batch)
            self.pipelines[cfg] = pipe
            while len(self.pipelines) > PIPELINES_KEPT:
                self.pipelines.popitem(last=False)
        self.pipelines.move_to_end(cfg)
        return self.pipelines[cfg]

    def _stop_batch(self) -> bool:
        """Before each network call: count it, and stop if every request of the running batch was cancelled."""
        self.calls += 1
        current = self._current
        return bool(current) and all(job.cancelled.is_set() for job in current)

    # -- the worker ---------------------------------------------------------------------------------------------
    def _gather(self, first: Job) -> tuple[list[Job], bool]:
        """The first job and those arriving within the window, up to max_batch rows; (jobs, stop after them)."""
        jobs, rows = [first], len(first.keys)
        deadline = time.monotonic() + self.max_wait_s
        while rows < self.max_batch:
            left = deadline - time.monotonic()
            try:
                job = self.queue.get(timeout=left) if left > 0 else self.queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            rows += len(job.keys)
        return jobs, False

    def _checked(self, jobs: list[Job]) -> list[Job]:
        """The jobs whose prompts fit the model; the others get their error now (nothing of theirs runs)."""
        ok = []
        for job in jobs:
            if not job.future.set_running_or_notify_cancel():
                continue
            try:
                pipe = self.pipeline(job.cfg)
                if not job.checked:
                    pipe.validate(job.texts, "prompt", range(len(job.texts)))
            except Exception as exc:   # a prompt too long or empty (ValueError), or anything else: this job's error
                job.future.set_exception(exc)
                continue
            ok.append(job)
        return ok

    def _run(self, jobs: list[Job]) -> None:
        """Each sampler setting's rows in batches of max_batch; each job gets its records in key order."""
        by_cfg: dict[SamplerConfig, list[Job]] = {}
        for job in jobs:
            by_cfg.setdefault(job.cfg, []).append(job)
        for cfg, group in by_cfg.items():
            rows = [(job, text, key) for job in group for key in job.keys for text in [job.texts[key[0]]]]
            out: dict[int, list[dict]] = {id(job): [] for job in group}
            try:
                pipe = self.pipeline(cfg)
                for start in range(0, len(rows), self.max_batch):
                    part = rows[start:start + self.max_batch]
                    self._current = list({id(job): job for job, _, _ in part}.values())
                    if all(job.cancelled.is_set() for job in self._current):
                        raise Cancelled("every request of this batch was cancelled")
                    watches = [job.watch for job, _, _ in part]
                    records = pipe.run_rows([t for _, t, _ in part], [k for _, _, k in part],
                                            watch=watches if any(watches) else None)
                    self.batches += 1
                    self.batch_rows.append(len(part))
                    for (job, _, _), rec in zip(part, records):
                        out[id(job)].append(rec)
            except Exception as exc:   # a failure fails the requests of this batch, not the server
                self.cancelled += isinstance(exc, Cancelled)
                for job in group:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            finally:
                self._current = []
            for job in group:
                try:
                    job.future.set_result(job.post(out[id(job)]) if job.post else out[id(job)])
                except Exception as exc:
                    job.future.set_exception(exc)

    def _work(self) -> None:
        jobs: list[Job] = []
        try:
            while True:
                first = self.queue.get()
                if first is None:
                    return
                jobs, stop = self._gather(first)
                self._run(self._checked(jobs))
                if stop:
                    return
        except BaseException as exc:   # the thread dies (nothing above lets an Exception through): say why
            self.died = f"{type(exc).__name__}: {exc}"
            log.error("the batcher worker stopped: %s", self.died)
        finally:   # no request of the dead worker waits for ever
            for job in jobs:
                if not job.future.done():
                    if job.future.running() or job.future.set_running_or_notify_cancel():
                        job.future.set_exception(RuntimeError("the server's worker stopped"))
