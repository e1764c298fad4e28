"""Demo runs side by side in worker processes (``DemoConfig.lane_mode: processes``).

Each worker process loads the demo's shared data once (``prepare.prepare``: the backbones from their cache, the cached
training features) and then trains or evaluates whole runs, one at a time, with threads / lanes intra-op threads.
Processes rather than threads of one process: the Python part of a small student's step holds the GIL, so two
threads wait on each other; measured on 2 cores (benchmarks/bench_demo_step.py --lanes), two 1-thread processes
train 1.33-1.53x more steps per second than one 2-thread run, two threads 1.25-1.31x. A run's numbers depend only
on its thread count, so they are the same in either mode and with one lane (tests/demo/test_run.py).

The first error sets a stop event: the other workers end their run after its current step (it resumes from its
last checkpoint when the demo is run again) and pending runs never start. Progress reaches the parent through a
queue (one bar for all runs).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable

_WORKER: dict[str, Any] = {}  # in a worker process: its config, shared data, stop event, progress queue, barrier


def _start(stop, queue, together, init: Callable | None, args: tuple) -> None:
    """Worker initializer: keep the stop event, the progress queue and the lanes' barrier, watch the parent, then
    run ``init(*args)``."""
    _WORKER.update(stop=stop, queue=queue, together=together)
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), daemon=True, name="parent-watch").start()
    if init is not None:
        init(*args)


PARENT_CHECK_S = 1.0  # how often a worker looks whether the demo's process is still there


def _end_with_parent(parent: int) -> None:
    """In a worker: exit once the process that started it is gone. A demo killed without Ctrl-C (``kill``, an
    out-of-memory kill) cannot stop its lanes, which would otherwise train on unseen, writing into its output;
    what they leave resumes from the last checkpoint (checkpoints are written atomically)."""
    while True:
        time.sleep(PARENT_CHECK_S)
        if os.getppid() != parent:
            os._exit(1)


def stopped() -> bool:
    """In a worker: whether the pool asked its runs to stop (another run failed, or Ctrl-C)."""
    return _WORKER["stop"].is_set()


def demo_init(cfg_data: dict, cache_dir: str | None, threads: int) -> None:
    """Worker initializer of the demo: its threads, config and shared data (``run.prepare``, from the caches)."""
    import torch
    from transformers.utils import logging as hf_logging

    from elfreg.configtools import from_dict
    from elfreg.demo.config import DemoConfig
    from elfreg.demo.prepare import prepare

    hf_logging.disable_progress_bar()  # the parent shows one bar for all runs
    torch.set_num_threads(threads)
    cfg = from_dict(DemoConfig, cfg_data)
    _WORKER.update(cfg=cfg, data=prepare(cfg, cache_dir, progress=False), lock=threading.Lock())


class QueueBar:
    """A progress bar's ``update`` that sends its counts to the parent's bar ``tag`` through a queue."""

    def __init__(self, queue, tag: str | None = None) -> None:
        self.queue, self.tag = queue, tag

    def update(self, n: int = 1) -> None:
        self.queue.put((self.tag, n))


def _planned(cfg_data: dict | None):
    """The settings a job runs with: the demo's plan (``cfg_data``, the budget may have cut them), else the pool's."""
    if cfg_data is None:
        return _WORKER["cfg"]
    from elfreg.configtools import from_dict
    from elfreg.demo.config import DemoConfig

    return from_dict(DemoConfig, cfg_data)


def train_job(job: tuple[str, int], out: str, cfg_data: dict | None = None) -> dict:
    """Worker: train (or resume) run ``job`` = (variant, seed) of the demo into ``out``/<variant>/seed-<seed>."""
    from elfreg.demo.runs import train_run

    w, bar = _WORKER, QueueBar(_WORKER["queue"], "train")
    variant, seed = job
    return train_run(w["data"], _planned(cfg_data), variant, seed, Path(out) / variant / f"seed-{seed}", w["stop"],
                     w["lock"], progress=False, on_steps=bar.update)


def time_job(variant: str) -> dict:
    """Worker: the seconds of a training run's parts of ``variant`` (``run.time_run``), timed beside the other lanes'
    (each lane passes the pool's barrier before its steps)."""
    from elfreg.demo.runs import time_run

    w = _WORKER
    return time_run(w["data"], w["cfg"], variant, w["lock"], w["together"])


def evaluate_job(model_dir: str, cfg_data: dict | None = None) -> dict:
    """Worker: every (sampler, NFE, seed) cell of the model in ``model_dir`` on the test problems."""
    from elfreg.demo.evaluation import encode_test, evaluate
    from elfreg.pretrained import ElfModel

    w = _WORKER
    data = w["data"]
    model = ElfModel.from_pretrained(model_dir)
    model.attach_backbones(data.backbones)
    return evaluate(model, data.test_problems, data.test_rows, _planned(cfg_data), QueueBar(w["queue"], "evaluate"),
                    encode_test(model, data.test_rows))


class LanePool:
    """``lanes`` worker processes (spawned: safe with OpenMP and threads), each set up once by ``init(*args)``."""

    def __init__(self, lanes: int, init: Callable | None = None, args: tuple = ()) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        # A SimpleQueue writes each count into the pipe before put() returns (a Queue hands it to a feeder thread),
        # so every count a job sent is readable once its result is back: the bar misses none.
        self.queue = ctx.SimpleQueue()
        self.together = ctx.Barrier(lanes)  # for jobs that must run side by side, one per lane (time_job)
        self.pool = ProcessPoolExecutor(lanes, mp_context=ctx, initializer=_start,
                                        initargs=(self.stop, self.queue, self.together, init, args))

    @classmethod
    def for_demo(cls, cfg, cache_dir: str | Path | None) -> "LanePool":
        """The demo's pool: ``cfg.lanes`` workers holding its shared data, threads / lanes threads each."""
        from elfreg.configtools import to_dict

        return cls(cfg.lanes, demo_init, (to_dict(cfg), None if cache_dir is None else str(cache_dir),
                                          cfg.threads // cfg.lanes))

    def map(self, fn: Callable, jobs: list[tuple], bar=None, then: tuple[Callable, Callable] | None = None,
            bars: dict[str, Any] | None = None) -> list:
        """``fn(*job)`` for every job in the workers, results in the jobs' order; counts sent by the workers go to
        ``bar.update`` (or ``bars[tag].update`` for a tagged ``QueueBar``). The first error stops the other runs
        after their current step and is raised.

        ``then`` = (fn2, args_of): as soon as job i's result r is back, ``fn2(*args_of(r))`` is queued behind the
        jobs not yet started, and job i's result is (r, its result). A lane whose queue of first jobs is empty takes
        the second jobs of those already done, instead of idling while the other lanes finish (the demo evaluates
        its first trained models while the last one trains). ``self.first_done``: seconds from the call until the
        last first job ended.
        """
        from elfreg.demo.runs import Stopped

        bars = dict(bars or {})
        done = threading.Event()

        def drain() -> None:
            while True:
                if self.queue.empty():
                    if done.is_set():
                        return
                    time.sleep(0.05)
                    continue
                tag, n = self.queue.get()
                target = bars.get(tag, bar)
                if target is not None:
                    target.update(n)

        t0 = time.perf_counter()
        self.first_done = 0.0
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            futures = [self.pool.submit(fn, *job) for job in jobs]
            second: dict[int, Any] = {}
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                if any(f.exception() is not None for f in finished if not f.cancelled()):
                    break
                for f in finished:
                    if f in futures and then is not None:
                        i = futures.index(f)
                        second[i] = self.pool.submit(then[0], *then[1](f.result()))
                        pending.add(second[i])
                if all(f.done() for f in futures) and not self.first_done:
                    self.first_done = time.perf_counter() - t0
            everything = futures + list(second.values())
            if any(not f.cancelled() and f.done() and f.exception() is not None for f in everything):
                self.stop.set()
                for f in everything:
                    f.cancel()
                wait(everything)
        except BaseException:  # Ctrl-C: the workers stop after their current step
            self.stop.set()
            raise
        finally:
            done.set()
            reader.join()
        errors = [f.exception() for f in everything if not f.cancelled() and f.exception() is not None]
        if errors:
            raise next((e for e in errors if not isinstance(e, Stopped)), errors[0])
        if then is None:
            return [f.result() for f in futures]
        return [(f.result(), second[i].result()) for i, f in enumerate(futures)]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.queue.close()

    def __enter__(self) -> "LanePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
