"""Continuous batching: the rows of requests that arrive within a window run as one batch, in one worker thread.

Every request is a list of formatted prompt texts with ``samples`` each and one sampler setting; its row (i, s) is
noise key (prompt i, sample s), as in ``elfreg generate`` and ``ElfModel.generate``. The worker takes the first
waiting request, then every request that arrives within ``max_wait_ms`` (up to ``max_batch`` rows), and runs the
rows of each sampler setting through the generation pipeline in batches of at most ``max_batch``. The pipeline is
batch-invariant (unless the server was started with ``--no-batch-invariant``), so a request's answers do not
depend on the requests it happens to share a batch with. One thread owns the model and its tokenizer: requests are
checked there too (prompt lengths), so nothing touches the model concurrently.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from elfreg.sampling.config import SamplerConfig
from elfreg.serve import MAX_BATCH, MAX_WAIT_MS
from elfreg.sampling.pipeline import GenerationPipeline
from elfreg.sampling.watch import Watch

PIPELINES_KEPT = 16   # pipelines cached by sampler setting (building one is cheap; this bounds the memory)


@dataclass
class Job:
    """One request: formatted prompt texts, samples per prompt, its sampler setting, and its result.

    ``post(records)`` -> the result, run in the worker thread (so it may use the tokenizer); default: the records.
    ``watch``: sees its rows' texts while they are made (elfreg.sampling.watch; keys are the job's own)."""

    texts: list[str]
    samples: int
    cfg: SamplerConfig
    post: Callable[[list[dict]], Any] | None = None
    future: Future = field(default_factory=Future)
    watch: Watch | None = None

    @property
    def keys(self) -> list[tuple[int, int]]:
        return [(p, s) for p in range(len(self.texts)) for s in range(self.samples)]


class Batcher:
    """The worker thread: ``submit`` a Job, wait on its future for one record per (prompt, sample) in key order."""

    def __init__(self, make_pipeline: Callable[[SamplerConfig], GenerationPipeline], max_batch: int = 32,
                 max_wait_ms: float = 10.0) -> None:
        MAX_BATCH.check(max_batch, "--max-batch")
        MAX_WAIT_MS.check(max_wait_ms, "--max-wait-ms")
        self.make_pipeline = make_pipeline
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000
        self.pipelines: OrderedDict[SamplerConfig, GenerationPipeline] = OrderedDict()
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.batches = 0          # batches run so far (the tests read them)
        self.batch_rows: list[int] = []
        self._thread = threading.Thread(target=self._work, name="elfreg-batcher", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> Future:
        self.queue.put(job)
        return job.future

    def close(self) -> None:
        """Stop the worker after the requests already queued."""
        self.queue.put(None)
        self._thread.join(timeout=60)

    def pipeline(self, cfg: SamplerConfig) -> GenerationPipeline:
        if cfg not in self.pipelines:
            self.pipelines[cfg] = self.make_pipeline(cfg)
            while len(self.pipelines) > PIPELINES_KEPT:
                self.pipelines.popitem(last=False)
        self.pipelines.move_to_end(cfg)
        return self.pipelines[cfg]

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
                self.pipeline(job.cfg).validate(job.texts, "prompt", range(len(job.texts)))
            except ValueError as exc:
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
                    watches = [job.watch for job, _, _ in part]
                    records = pipe.run_rows([t for _, t, _ in part], [k for _, _, k in part],
                                            watch=watches if any(watches) else None)
                    self.batches += 1
                    self.batch_rows.append(len(part))
                    for (job, _, _), rec in zip(part, records):
                        out[id(job)].append(rec)
            except Exception as exc:   # a failure fails the requests of this batch, not the server
                for job in group:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            for job in group:
                try:
                    job.future.set_result(job.post(out[id(job)]) if job.post else out[id(job)])
                except Exception as exc:
                    job.future.set_exception(exc)

    def _work(self) -> None:
        while True:
            first = self.queue.get()
            if first is None:
                return
            jobs, stop = self._gather(first)
            self._run(self._checked(jobs))
            if stop:
                return
