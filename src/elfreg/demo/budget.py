"""The demo's time budget: estimate the whole run from a few timed steps and cut it to fit, seeds first.

Before training, each lane times a few real steps of a run of its own (``run.time_run``: the demo's trainer on the
cached features, the lanes side by side as they train), a checkpoint and an accuracy-curve point. From those
``estimate`` replays the demo's queue of training runs and evaluations over its lanes and gives the seconds of
training and evaluation. ``fit`` cuts what the budget cannot hold, in this order: training seeds (down to one),
then sampling seeds (down to one), then training steps, never below the steps the task needs to learn
(``DemoTrain.min_steps``). A run that does not fit even then runs at that minimum, and says so.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
from collections.abc import Callable

from elfreg.demo.config import VARIANTS, DemoConfig


@dataclasses.dataclass
class Timing:
    """Seconds measured before training, per variant: building a run's trainer (``setup``), one training step
    (``step``, the lanes running side by side), writing a checkpoint (``save``), one accuracy-curve point
    (``curve``: early-stop at the main NFE, one sampling seed, over the test problems) and encoding the test
    prompts once (``encode``)."""

    setup: dict[str, float]
    step: dict[str, float]
    save: dict[str, float]
    curve: dict[str, float]
    encode: dict[str, float]
    steps_timed: int = 0

    @classmethod
    def from_runs(cls, runs: list[dict]) -> "Timing":
        """The mean per variant of ``run.time_run``'s measurements (one per lane)."""
        fields = ("setup", "step", "save", "curve", "encode")
        out = {f: {} for f in fields}
        for v in {r["variant"] for r in runs}:
            mine = [r for r in runs if r["variant"] == v]
            for f in fields:
                out[f][v] = statistics.fmean(r[f] for r in mine)
        return cls(**out, steps_timed=min(r["steps_timed"] for r in runs))


@dataclasses.dataclass
class Estimate:
    """Seconds from the plan to the end of training (``train``) and of evaluation (``evaluate``, after that)."""

    train: float
    evaluate: float

    @property
    def total(self) -> float:
        return self.train + self.evaluate


def curve_points(steps: int, every: int) -> int:
    """Accuracy-curve points of a run: every ``every`` steps and the last step (``run.AccuracyCurve``)."""
    return 0 if not every else steps // every + (1 if steps % every else 0)


# A gradient-share measurement (train.grad_share_every) in steps' time: one more forward with its self-conditioning
# passes and a backward per term (elfreg.train.gradshare). Measured on the demo's runs (time_update of the measured
# steps against the others, training seed 0): 1.1 extra steps for ELF-REG, 1.3 for REPA only, 0.7 for REG only;
# 1.5 leaves a margin. ELF has no auxiliary term and measures nothing
SHARE_STEPS = 1.5


def run_seconds(cfg: DemoConfig, timing: Timing, variant: str, done: int = 0) -> float:
    """One training run's seconds: its trainer, its steps from ``done`` on (with the gradient-share measurements
    among them), its checkpoints and final model, and its curve points (the first also encodes the test
    prompts)."""
    t, steps = cfg.train, cfg.train.steps
    left = max(steps - done, 0)
    every = t.grad_share_every
    shares = curve_points(steps, every) - (done // every if every else 0) if variant != "ELF" else 0
    left += SHARE_STEPS * max(shares, 0)
    # checkpoints every save_every steps after ``done``, and at the last step when save_every does not divide it
    saves = steps // t.save_every - done // t.save_every + (1 if steps % t.save_every else 0) if left else 0
    every = cfg.eval.curve_every
    points = curve_points(steps, every) - (done // every if every else 0)  # those up to ``done`` are kept
    return (timing.setup[variant] + left * timing.step[variant] + (saves + 1) * timing.save[variant]
            + points * timing.curve[variant] + (timing.encode[variant] if points else 0.0))


def eval_seconds(cfg: DemoConfig, timing: Timing, variant: str) -> float:
    """One model's evaluation: the test prompts encoded once, then every (sampler, NFE) cell at every sampling seed,
    each priced as a curve point scaled by its denoiser calls (+1: the final decode)."""
    from elfreg.demo.evaluation import eval_cells

    ev = cfg.eval
    per_call = timing.curve[variant] / (ev.main_nfe + 1)
    return timing.encode[variant] + sum((n + 1) * per_call for _, n in eval_cells(cfg)) * len(ev.seeds)


def schedule(first: list[float], lanes: int, then: list[float] | None = None, pipelined: bool = True
             ) -> tuple[float, float]:
    """(when the last of the ``first`` jobs ends, when everything ends) for jobs taken in queue order by ``lanes``
    workers: ``then[i]`` is queued once job i ends, behind the first jobs (``pipelined``: the demo's process lanes,
    ``LanePool.map(then=...)``), or all of them run after the first jobs (threads, or one lane)."""
    free = [0.0] * lanes
    ends = []
    for seconds in first:  # all queued at the start: the lane free first takes the next
        k = free.index(min(free))
        free[k] += seconds
        ends.append(free[k])
    first_done = max(ends, default=0.0)
    then = then or []
    ready = ends[:len(then)] if pipelined else [first_done] * len(then)
    for at, seconds in sorted(zip(ready, then)):
        k = free.index(min(free))
        free[k] = max(free[k], at) + seconds
    return first_done, max(free + [first_done])


def estimate(cfg: DemoConfig, timing: Timing, done: dict[tuple[str, int], int] | None = None) -> Estimate:
    """Seconds of ``cfg``'s training runs and evaluations on its lanes (``done``: steps each run (variant, seed)
    already has, from an earlier demo in the same folder)."""
    from elfreg.demo.runs import lane_order

    done = done or {}
    jobs = lane_order(cfg.train.seeds)
    train = [run_seconds(cfg, timing, v, done.get((v, s), 0)) for v, s in jobs]
    evals = [eval_seconds(cfg, timing, v) for v, _ in jobs]
    pipelined = cfg.lanes > 1 and cfg.lane_mode == "processes"
    first_done, end = schedule(train, cfg.lanes, evals, pipelined)
    return Estimate(train=first_done, evaluate=end - first_done)


@dataclasses.dataclass
class Cut:
    """One setting the budget changed: its key, the value asked for and the value run."""

    key: str
    asked: object
    ran: object


@dataclasses.dataclass
class Plan:
    """What the demo runs: ``cfg`` (the settings asked for, cut to the budget), the cuts, the estimates of both and
    whether even the smallest run was over the budget."""

    cfg: DemoConfig
    budget_s: float | None
    spent_s: float
    asked: Estimate
    planned: Estimate
    cuts: list[Cut]
    over_budget: bool
    timing: Timing

    def to_dict(self) -> dict:
        """The plan as plain JSON (results.json, plan.json; the config as its overrides)."""
        return {"budget_s": self.budget_s, "spent_s": self.spent_s, "over_budget": self.over_budget,
                "estimate_asked_s": self.spent_s + self.asked.total,
                "estimate_s": {"train": self.planned.train, "evaluate": self.planned.evaluate,
                               "total": self.spent_s + self.planned.total},
                "cuts": [dataclasses.asdict(c) for c in self.cuts], "timing": dataclasses.asdict(self.timing)}


def min_steps(cfg: DemoConfig) -> int:
    """The fewest steps a run may be cut to: the task's ``train.min_steps``, or the steps asked for if fewer."""
    return min(cfg.train.min_steps, cfg.train.steps)


def fit(cfg: DemoConfig, timing: Timing, budget_s: float | None, spent_s: float,
        done: dict[tuple[str, int], int] | None = None) -> Plan:
    """``cfg`` cut to end within ``budget_s`` seconds of the demo's start, ``spent_s`` of them gone (None: no
    budget): training seeds first (the first ones kept), then sampling seeds, then steps (to a multiple of 10, not
    below ``min_steps``)."""
    asked = estimate(cfg, timing, done)
    cur = copy.deepcopy(cfg)
    cuts: list[Cut] = []
    fits: Callable[[DemoConfig], bool] = lambda c: (budget_s is None
                                                     or spent_s + estimate(c, timing, done).total <= budget_s)
    while not fits(cur) and len(cur.train.seeds) > 1:
        cur.train.seeds = cur.train.seeds[:-1]
    while not fits(cur) and len(cur.eval.seeds) > 1:
        cur.eval.seeds = cur.eval.seeds[:-1]
    lowest = min_steps(cfg)
    if not fits(cur) and cur.train.steps > lowest:
        lo, hi = lowest, cur.train.steps  # the most steps that fit: estimate grows with the steps
        while hi - lo > 1:
            mid = (lo + hi) // 2
            hi, lo = (mid, lo) if not fits(_with_steps(cur, mid)) else (hi, mid)
        steps = lo if lo == lowest else max(lowest, lo - lo % 10)
        cur = _with_steps(cur, steps)
    for key, a, b in (("train.seeds", cfg.train.seeds, cur.train.seeds), ("eval.seeds", cfg.eval.seeds, cur.eval.seeds),
                      ("train.steps", cfg.train.steps, cur.train.steps)):
        if a != b:
            cuts.append(Cut(key, a, b))
    planned = estimate(cur, timing, done)
    return Plan(cur, budget_s, spent_s, asked, planned, cuts, not fits(cur), timing)


def _with_steps(cfg: DemoConfig, steps: int) -> DemoConfig:
    out = copy.deepcopy(cfg)
    out.train.steps = steps
    return out


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def plan_lines(plan: Plan) -> list[str]:
    """The plan as the demo prints it before training."""
    t, c = plan.timing, plan.cfg
    steps = ", ".join(f"{v} {1000 * t.step[v]:.0f} ms" for v in VARIANTS if v in t.step)
    runs = len(c.train.seeds) * len(VARIANTS)
    total = _minutes(plan.spent_s + plan.planned.total)
    lines = [f"timed {t.steps_timed} steps per run ({c.lanes} run(s) side by side, {c.threads // c.lanes} "
             f"thread(s) each): {steps} per step",
             f"plan: {runs} training runs (training seeds {c.train.seeds}) x {c.train.steps} steps, evaluated at "
             f"NFE {c.eval.nfes} x sampling seeds {c.eval.seeds}; estimated {total} in all ({_minutes(plan.spent_s)} "
             f"spent, training {_minutes(plan.planned.train)}, evaluation after it {_minutes(plan.planned.evaluate)})"
             + (f", budget {_minutes(plan.budget_s)}" if plan.budget_s is not None else ", no budget")]
    if plan.cuts:
        lines.append(f"cut to fit the budget (as asked: {_minutes(plan.spent_s + plan.asked.total)}): "
                     + "; ".join(f"{x.key} {x.asked} -> {x.ran}" for x in plan.cuts))
    if plan.over_budget:
        lines.append(f"over the budget even so: {min_steps(plan.cfg)} steps is the fewest this task learns in "
                     "(train.min_steps); running the smallest plan")
    return lines


def consequences(plan: Plan | dict, cfg: DemoConfig) -> list[str]:
    """What each cut does to the report's claims, one sentence per cut (``plan``: a Plan or its ``to_dict``)."""
    cuts = plan.cuts if isinstance(plan, Plan) else [Cut(**c) for c in plan["cuts"]]
    out = []
    for c in cuts:
        if c.key == "train.seeds":
            n, m = len(c.asked), len(c.ran)
            if m == 1:
                out.append(f"Training seeds {c.asked} -> {c.ran}: with one training seed the spread over seeds is "
                           "unknown, so the accuracy intervals hold sampling noise and the draw of test problems only, "
                           "and no Fig. 3 claim (steps to an accuracy) can be decided.")
            else:
                out.append(f"Training seeds {c.asked} -> {c.ran}: the seed part of every interval is about "
                           f"{math.sqrt(n / m):.2f}x wider, and the Fig. 3 claims' Student-t margin has {m - 1} "
                           f"degree(s) of freedom instead of {n - 1}, so fewer claims are decided.")
        elif c.key == "eval.seeds":
            out.append(f"Sampling seeds {c.asked} -> {c.ran}: each cell has {len(c.ran)} sample(s) per test problem "
                       "and training seed instead of " f"{len(c.asked)}: noisier per-problem results, slightly wider "
                       "intervals.")
        elif c.key == "train.steps":
            out.append(f"Steps per run {c.asked} -> {c.ran} (not below the {cfg.train.min_steps} this task needs to "
                       "learn, docs/demo.md): the students are a few points below what the full run reaches, and "
                       "the accuracies are not comparable with those of a run of other length.")
    return out
