"""One training run of the demo (a variant and a training seed): its settings, training it with its accuracy curve,
timing its parts for the budget, and what makes it the same run when a stopped demo resumes."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from elfreg.config import BackboneConfig, ModelConfig, ObjectiveConfig
from elfreg.configtools import to_dict
from elfreg.demo.config import KINDS, VARIANTS, DemoConfig
from elfreg.demo.evaluation import AccuracyCurve
from elfreg.demo.prepare import DemoData
from elfreg.train.metrics import read_metrics
from elfreg.train.config import CanvasSection, DataConfig, RunConfig, TrainConfig
from elfreg.train.trainer import Trainer

DEMO_ONLY = ("seeds", "min_steps")  # DemoTrain's fields that are not TrainConfig's: they say which runs, not how

def run_config(cfg: DemoConfig, variant: str, bcfg: BackboneConfig, head_ids: list[int] | None,
               dims: dict[str, int], progress: bool = True, seed: int | None = None) -> RunConfig:
    """The training run of one variant (a student of ``KINDS``: ELF, ELF-REG or an ablation arm's) and training
    seed (default: the first); the students differ only in the extra token and REPA."""
    s, t = cfg.student, cfg.train
    if variant not in KINDS:
        raise ValueError(f"unknown student {variant!r}; choose one of {sorted(KINDS)}")
    extra, repa = KINDS[variant]
    model = ModelConfig(**dims, width=s.width, depth=s.depth, heads=s.heads, bottleneck_dim=s.bottleneck_dim,
                        max_len=s.canvas_len, max_prompt_len=s.max_prompt_len, extra_token=extra,
                        repa=repa, repa_block=s.repa_block, repa_hidden=s.repa_hidden, head_token_ids=head_ids,
                        reg_io=s.reg_io)
    same = {k: v for k, v in dataclasses.asdict(t).items() if k not in DEMO_ONLY}  # the rest are TrainConfig's
    train_cfg = TrainConfig(**same, seed=t.seeds[0] if seed is None else seed, keep_last=1,
                            stats_canvases=min(1024, cfg.task.n_train), match_backbones=False, device="cpu",
                            progress=progress)
    objective = ObjectiveConfig(use_repa=repa, use_reg=extra == "reg", repa_weight=cfg.objective.repa_weight,
                                reg_weight=cfg.objective.reg_weight)
    return RunConfig(model=model, objective=objective, backbones=bcfg,
                     train=train_cfg, data=DataConfig(task="math", features="cached"),
                     canvas=CanvasSection(overflow="error"))

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
            "train_seconds": time.perf_counter() - t, "curve": curve.points, **run_summary(run_dir, res.step)}

SUMMARY_KEYS = ("loss_elf", "grad_rel_repa", "grad_cos_repa", "grad_rel_reg", "grad_cos_reg")


def run_summary(run_dir: Path, steps: int) -> dict:
    """From a run's metrics.jsonl: the text loss L_ELF averaged over the last 10 % of the run's logged steps, and
    each auxiliary term's gradient share (norm relative to L_ELF's, cosine) averaged over the second half's
    measurements."""
    records = read_metrics(run_dir / "metrics.jsonl")
    late = [r["loss_elf"] for r in records if r["step"] > 0.9 * steps and isinstance(r.get("loss_elf"), float)]
    out: dict = {"loss_elf": statistics.fmean(late) if late else None}
    for key in ("grad_rel_repa", "grad_cos_repa", "grad_rel_reg", "grad_cos_reg"):
        vals = [r[key] for r in records if r["step"] > steps / 2 and isinstance(r.get(key), float)]
        out[key] = statistics.fmean(vals) if vals else None
    return out


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
                            "student": d["student"], "train": d["train"], "objective": d["objective"],
                            "curve": curve})
