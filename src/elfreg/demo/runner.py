"""``elfreg demo``: train ELF and ELF-REG on the built-in task with a real frozen SmolLM2, evaluate, report.

Phases: backbones -> cached features -> two trainings with identical budgets and seeds -> every sampler at
several NFE over several seeds -> results.json, report.md, plots. Every number in the report comes from this run.

This module is the runner: the plan that fits a budget, the lanes the runs take side by side (threads here, or
the worker processes of :mod:`.lanes`), resuming, and the results. What the runs share is :mod:`.prepare`'s, one
training run :mod:`.runs`', the evaluation :mod:`.evaluation`'s, the report :mod:`.report`'s.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import torch

from elfreg.atomic import atomic_write_text
from elfreg.configtools import dump_yaml, from_dict, to_dict
from elfreg.demo.cards import write_demo_cards
from elfreg.demo.config import VARIANTS, DemoConfig
from elfreg.demo.evaluation import encode_test, eval_cells, evaluate, merge_evals
from elfreg.demo.lanes import LanePool, evaluate_job, time_job, train_job
from elfreg.demo.prepare import DemoData, prepare, with_training_precision
from elfreg.demo.runs import Stopped, lane_order, run_fingerprint, done_steps, time_run, train_run
from elfreg.jsontext import dumps
from elfreg.machine import machine_info
from elfreg.pretrained import ElfModel

def side_by_side(jobs: list, run: Callable[[Any, threading.Event], Any], lanes: int) -> list:
    """``run(job, stop)`` for every job, ``lanes`` at a time in threads taking jobs in queue order; results in the
    jobs' order.

    Threads, not processes: the tensor work of a step releases the GIL, and the runs share the cached features and
    the backbones in memory. Measured on 2 cores (benchmarks/bench_demo_step.py --lanes): two 1-thread lanes train
    1.2-1.6x more steps per second than one 2-thread run, since a small student's step cannot keep two threads
    busy. The first error (or Ctrl-C) sets ``stop``, the other lanes end after their current step, and it is raised.
    """
    stop = threading.Event()
    if lanes == 1:
        return [run(job, stop) for job in jobs]

    def guarded(job):
        if stop.is_set():
            raise Stopped("not started: another run failed")
        try:
            return run(job, stop)
        except BaseException:
            stop.set()
            raise

    pool = ThreadPoolExecutor(lanes, thread_name_prefix="elfreg-lane")
    try:
        futures = [pool.submit(guarded, job) for job in jobs]
        wait(futures, return_when=FIRST_EXCEPTION)
    except BaseException:  # Ctrl-C
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    errors = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
    if errors:
        raise next((e for e in errors if not isinstance(e, Stopped)), errors[0])
    return [f.result() for f in futures]

def time_lanes(data: DemoData, cfg: DemoConfig, pool: LanePool | None) -> list[dict]:
    """``time_run`` of both variants on every lane, the lanes side by side (at least one run of each variant)."""
    variants = [VARIANTS[i % len(VARIANTS)] for i in range(max(cfg.lanes, len(VARIANTS)))]
    if pool is not None:
        return pool.map(time_job, [(v,) for v in variants])
    shared = threading.Lock()
    together = threading.Barrier(cfg.lanes) if cfg.lanes > 1 else None

    def one(variant: str, stop: threading.Event) -> dict:
        torch.set_num_threads(cfg.threads // cfg.lanes)
        return time_run(data, cfg, variant, shared, together)

    try:
        return side_by_side(variants, one, cfg.lanes)
    finally:
        torch.set_num_threads(cfg.threads)

PLAN_FILE = "plan.json"

def saved_plan(out: Path, cfg: DemoConfig, budget_s: float | None) -> dict | None:
    """The plan an earlier demo in ``out`` made for the same settings and budget (it resumes with that plan, so that
    its runs keep their settings), else None."""
    path = out / PLAN_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    asked = json.loads(json.dumps(to_dict(cfg)))  # as read back from JSON
    same = saved.get("asked") == asked and saved.get("plan", {}).get("budget_s") == budget_s
    return saved if same else None

def make_plan(data: DemoData, cfg: DemoConfig, out: Path, pool: LanePool | None, budget_s: float | None,
              start: float) -> tuple[DemoConfig, dict]:
    """(the settings to run, the plan as JSON): ``cfg`` cut to ``budget_s`` seconds from ``start`` by the steps
    timed on the lanes (``elfreg.demo.budget``), or the plan an earlier demo in ``out`` made for the same settings
    and budget; printed, and saved in ``out``/plan.json."""
    from elfreg.demo import budget

    saved = saved_plan(out, cfg, budget_s)
    if saved is not None:
        print(f"elfreg demo: resuming with the plan the first run in {out} made: " + "; ".join(saved["lines"]),
              flush=True)
        return from_dict(DemoConfig, saved["cfg"]), {**saved["plan"], "resumed": True}
    timing = budget.Timing.from_runs(time_lanes(data, cfg, pool))
    plan = budget.fit(cfg, timing, budget_s, time.perf_counter() - start, done_steps(cfg, out))
    lines = budget.plan_lines(plan)
    for line in lines:
        print(f"elfreg demo: {line}", flush=True)
    saved = {"asked": to_dict(cfg), "cfg": to_dict(plan.cfg), "plan": plan.to_dict(), "lines": lines}
    atomic_write_text(out / PLAN_FILE, json.dumps(saved, indent=2))
    return plan.cfg, {**saved["plan"], "resumed": False}

def train_all(data: DemoData, cfg: DemoConfig, jobs: list[tuple[str, int]], out: Path, progress: bool) -> list[dict]:
    """Every training run of ``jobs`` (variant, seed), ``cfg.lanes`` at a time as threads of this process (lane_mode
    threads, or one lane); results in the jobs' order."""
    lane_threads = cfg.threads // cfg.lanes
    shared = threading.Lock()  # model init draws from the global RNG; the tokenizer is not thread-safe

    def train_one(job: tuple[str, int], stop: threading.Event) -> dict:
        variant, seed = job
        torch.set_num_threads(lane_threads)  # per thread under OpenMP: set in the lane itself
        return train_run(data, cfg, variant, seed, out / variant / f"seed-{seed}", stop, shared, progress)

    return side_by_side(jobs, train_one, cfg.lanes)

def evaluate_all(data: DemoData, cfg: DemoConfig, model_dirs: list[str], progress: bool) -> list[dict]:
    """``evaluate`` of every model folder, ``cfg.lanes`` at a time with the runs' own thread count, as threads of
    this process; results in order."""
    from tqdm.auto import tqdm

    total = len(model_dirs) * len(eval_cells(cfg)) * len(cfg.eval.seeds)
    with tqdm(total=total, desc="evaluate", disable=not progress) as bar:
        lane_threads = cfg.threads // cfg.lanes
        models = []
        torch.set_num_threads(lane_threads)  # every number of a run comes from its lane's thread count
        for d in model_dirs:  # encoded here, one at a time: the tokenizer may not encode in two threads at once
            model = ElfModel.from_pretrained(d)
            model.attach_backbones(data.backbones)
            models.append((model, encode_test(model, data.test_rows)))

        def evaluate_one(i: int, stop: threading.Event) -> dict:
            torch.set_num_threads(lane_threads)  # the same threads as the runs' accuracy curves
            return evaluate(models[i][0], data.test_problems, data.test_rows, cfg, bar, models[i][1])

        try:
            return side_by_side(list(range(len(models))), evaluate_one, cfg.lanes)
        finally:
            torch.set_num_threads(cfg.threads)

def train_and_evaluate(data: DemoData, cfg: DemoConfig, jobs: list[tuple[str, int]], out: Path, pool: LanePool | None,
                       progress: bool, phases: dict[str, float]) -> list[tuple[dict, dict]]:
    """Train every run of ``jobs`` and evaluate its model: (training result, evaluation) per job, in the jobs' order.

    In ``pool``'s worker processes a model's evaluation is queued as soon as it is trained, so the lane that ends
    its last training run first evaluates the finished models while the other lane still trains (the runs differ in
    length: ELF-REG's step is slower). phases: "train" (until the last run is trained) and "evaluate" (the rest).
    """
    from tqdm.auto import tqdm

    t = time.perf_counter()
    if pool is None:
        trained = train_all(data, cfg, jobs, out, progress)
        phases["train"] = time.perf_counter() - t
        t = time.perf_counter()
        evals = evaluate_all(data, cfg, [run["model_dir"] for run in trained], progress)
        phases["evaluate"] = time.perf_counter() - t
        return list(zip(trained, evals))
    cells = len(eval_cells(cfg)) * len(cfg.eval.seeds)
    with tqdm(total=len(jobs) * cfg.train.steps, desc="train", disable=not progress, position=0) as bar_t, \
            tqdm(total=len(jobs) * cells, desc="evaluate", disable=not progress, position=1) as bar_e:
        planned = to_dict(cfg)  # the workers hold the settings asked for; the budget may have cut them
        done = pool.map(train_job, [(job, str(out), planned) for job in jobs],
                        then=(evaluate_job, lambda r: (r["model_dir"], planned)),
                        bars={"train": bar_t, "evaluate": bar_e})
    phases["train"] = pool.first_done
    phases["evaluate"] = time.perf_counter() - t - pool.first_done
    return done

def claim_runs(cfg: DemoConfig, out: Path, write: bool = True) -> None:
    """Check every training run folder's fingerprint, then record them (``write``), before anything is written: a
    run folder that holds checkpoints made with other settings is refused in one line (RunMismatch) instead of
    resumed. A refusal names the cuts an earlier demo's budget made there (plan.json), which a resume must repeat."""
    from elfreg.fingerprint import FOLDER_FILE, RunMismatch, claim
    from elfreg.train.checkpoint import list_checkpoints

    try:
        _claim_runs(cfg, out, write, claim, list_checkpoints, FOLDER_FILE)
    except RunMismatch as exc:
        try:
            earlier = json.loads((out / PLAN_FILE).read_text())
        except (OSError, json.JSONDecodeError):
            raise exc from None
        cuts = earlier.get("plan", {}).get("cuts") or []
        if not cuts:
            raise
        budget = earlier["plan"]["budget_s"]
        made = ", ".join(f"{c['key']}={c['ran']}" for c in cuts)
        raise RunMismatch(f"{exc} (the demo that made it cut {made} to fit --budget {budget / 60:g}: the same "
                          "settings and --budget resume it)") from None

def _claim_runs(cfg: DemoConfig, out: Path, write: bool, claim, list_checkpoints, folder_file: str) -> None:
    for write in (False, True) if write else (False,):
        for variant, seed in lane_order(cfg.train.seeds):
            run_dir = out / variant / f"seed-{seed}"
            done = [p for _, p in list_checkpoints(run_dir)]  # curve points past the checkpoint are redone anyway
            claim(run_dir / folder_file, run_fingerprint(cfg, variant, seed), done, write=write, where=run_dir)

def run_demo(cfg: DemoConfig, out: str | Path, cache_dir: str | Path | None = None, progress: bool = True,
             restart: bool = False, budget_s: float | None = None, spent_before_s: float = 0.0) -> dict:
    """Run the whole demo into ``out`` (resuming its training runs; ``restart``: move an existing ``out`` aside
    first), cut to end within ``budget_s`` seconds, ``spent_before_s`` of them gone before this call (the set-up's;
    None: as asked; ``make_plan``); returns the results dict (also written as results.json)."""
    from elfreg.demo.report import write_report
    from elfreg.fingerprint import move_aside

    start = time.perf_counter() - spent_before_s
    torch.set_num_threads(cfg.threads)
    out = Path(out)
    if restart:
        move_aside([out])
    cfg, precision = with_training_precision(cfg)
    earlier = saved_plan(out, cfg, budget_s)  # a resumed demo keeps its first plan: its runs' settings
    claim_runs(cfg if earlier is None else from_dict(DemoConfig, earlier["cfg"]), out, write=False)
    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    data = prepare(cfg, cache_dir, progress, phases)
    train_p, test_p, test_rows = data.train_problems, data.test_problems, data.test_rows
    atomic_write_text(out / "test.jsonl", "".join(json.dumps({"id": f"{cfg.task.kind}/{i}", "question": r["prompt"],
                                                              "answer": r["answer"]}) + "\n"
                                                  for i, r in enumerate(test_rows)))

    results: dict = {"task": {"train": len(train_p), "test": len(test_p), "example": data.train_rows[0]},
                     "head_token_ids": data.head_ids, "lanes": cfg.lanes, "lane_mode": cfg.lane_mode}
    pool = LanePool.for_demo(cfg, cache_dir) if cfg.lanes > 1 and cfg.lane_mode == "processes" else None
    try:
        t = time.perf_counter()
        cfg, results["plan"] = make_plan(data, cfg, out, pool, budget_s, start)
        phases["plan"] = time.perf_counter() - t  # the lanes' start and the timed steps
        claim_runs(cfg, out)
        dump_yaml(cfg, out / "demo_config.yaml")
        results.update(train_seeds=list(cfg.train.seeds),
                       models={v: {"steps": cfg.train.steps, "runs": []} for v in VARIANTS})
        jobs = lane_order(cfg.train.seeds)
        done = train_and_evaluate(data, cfg, jobs, out, pool, progress, phases)
    finally:
        if pool is not None:
            pool.close()
    for (variant, _), (run, _) in zip(jobs, done):
        results["models"][variant]["runs"].append(run)  # seed order: the queue is seed-major
    for variant in VARIANTS:
        results["models"][variant]["eval"] = merge_evals({run["seed"]: e for (v, _), (run, e) in zip(jobs, done)
                                                          if v == variant})
    phases["total"] = time.perf_counter() - start
    results["phases_seconds"] = phases
    results["threads"] = torch.get_num_threads()
    # what the numbers reproduce on (report: Reproducibility)
    results["machine"] = machine_info(cfg.threads, cfg.lanes, precision)
    atomic_write_text(out / "results.json", dumps(results, indent=2))
    write_demo_cards([(v, run, e) for (v, _), (run, e) in zip(jobs, done)], cfg, out, len(test_p),
                     data.train_rows[0].get("prompt"))
    write_report(results, cfg, out)
    return results
