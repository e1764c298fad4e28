"""A run's length from a wall-clock budget (``train.minutes``): as many optimiser steps as fit, at most ``train.steps``.

The steps are decided from what this run measured on this machine: first right after its first checkpoint (or
after a checkpoint forced at the first step by which ``DECIDE_AT`` of the budget is spent, if that comes first),
then again at every later checkpoint until the learning rate starts its final decay. At each decision the run
knows its elapsed time E (loading the backbones and building the feature cache included), the wall time of a step
tau (logging and hooks included; validations and checkpoints apart; the first ``SKIP_STEPS`` of a process left
out), the larger of its mean since the previous decision and its mean over the process, and the mean cost of its
checkpoints so far: the validation v and the save c (writing the checkpoint and the learning curve). It then trains
to the largest N <= cap with

    (N - s) tau + n_val(s, N) v + n_ckpt(s, N) c <= (1 - MARGIN) (B - E)

where s is the step of the decision, B the budget and n_val / n_ckpt count the validations and checkpoints the run
would still write after step s (its last step's included, where the final model and summary are written).

Deciding again at each checkpoint follows the step time as it drifts over a run (on a shared 2-core machine it
moved by up to 10 % after the first 300 steps, and a single decision at step 300 ended runs from 72 s before to
20 s after the end of their 9 minutes), and the margin shrinks with what is left to plan. The length may change
only while no step has trained at a rate that depends on it: the learning-rate schedule reads the length only for
its final decay, so a decision is taken only while that decay has not begun, and never picks a length whose decay
would have begun already (``least``). Hence ``train.minutes`` needs a schedule whose decay is a final part of the
run (``decay_fraction`` <= 0.5, auxiliary weights constant: :meth:`elfreg.train.config.TrainConfig.__post_init__`);
from the decay's start to the end the length stays as last decided.

The decided N is kept in every later checkpoint: a resumed run continues from it, with the seconds its checkpoint
recorded as spent, and decides again at its next checkpoints like the uninterrupted run. A run resumed from a
checkpoint written before the first decision decides at its next checkpoint. Which N a budget gives depends on the
machine and on what else runs on it; the summary and the model card record N and the measurements behind it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

DECIDE_AT = 0.25  # the share of the budget by which the decision is taken, a checkpoint forced if none came yet
# the share of the remaining budget left unplanned: step times drift over a run (up to 10 % from one stretch of
# 300 steps to the next on a shared 2-core machine); the last decision, before the decay, plans its final 20 %
MARGIN = 0.1
SKIP_STEPS = 3  # the first steps of a process (allocations, lazy set-up) are not a step's typical time


def steps_within(remaining_s: float, step: int, cap: int, step_s: float, validation_s: float, checkpoint_s: float,
                 validates: Callable[[int, int], bool], checkpoints: Callable[[int, int], bool]) -> int:
    """The largest run length N in [step, cap] whose steps after ``step`` fit ``remaining_s`` seconds.

    Step k in (step, N] costs ``step_s``, plus ``validation_s`` when ``validates(k, N)`` and ``checkpoint_s`` when
    ``checkpoints(k, N)`` (both given the run's length: its last step always writes the final model). ``step``
    itself when not even one more step fits."""
    best, spent = step, 0.0
    for n in range(step + 1, cap + 1):
        spent += step_s
        # the steps before n cost the same whatever the length; step n is the run's last if the run stops there
        if spent + validation_s * validates(n, n) + checkpoint_s * checkpoints(n, n) > remaining_s:
            break
        best = n
        spent += validation_s * validates(n, cap) + checkpoint_s * checkpoints(n, cap)
    return best


@dataclass
class TimeBudget:
    """The wall-clock budget of one run: the time it has spent, its step times, and its decided length."""

    minutes: float
    cap: int  # train.steps: the most the run may train
    spent_before: float = 0.0  # seconds a resumed run's earlier processes spent (its checkpoint's record)
    clock: Callable[[], float] = time.monotonic
    record: dict = field(default_factory=dict)  # the last decision and its measurements (summary, card); {} before
    start: float = field(init=False, default=0.0)
    _step_s: list[float] = field(init=False, repr=False, default_factory=list)
    _window: int = field(init=False, repr=False, default=0)  # _step_s[_window:]: the steps since the last decision
    _checkpoint_s: list[tuple[float, float]] = field(init=False, repr=False, default_factory=list)

    def __post_init__(self) -> None:
        self.start = self.clock()

    @property
    def steps(self) -> int | None:
        """The decided length (None until decided)."""
        return self.record.get("steps")

    @property
    def budget_s(self) -> float:
        return 60.0 * self.minutes

    def elapsed(self) -> float:
        """Seconds the run has spent, its earlier processes' included."""
        return self.spent_before + self.clock() - self.start

    def step_done(self, seconds: float) -> None:
        """One step's wall time (validation and checkpoint apart)."""
        self._step_s.append(seconds)

    def force_checkpoint(self) -> bool:
        """Whether the run must write a checkpoint now to decide in time (DECIDE_AT of the budget spent)."""
        return self.steps is None and self.elapsed() >= DECIDE_AT * self.budget_s

    def step_time(self) -> float:
        """The wall time of a step to plan with: the larger of the mean since the last decision and the mean over the
        process (its first SKIP_STEPS left out of both); 0.0 before any step. The recent mean follows a machine that
        got slower; the longer one keeps a fast stretch (300-step means moved between 0.18 and 0.23 s and back on an
        idle 2-core machine) from planning steps the rest of the run cannot take."""
        def mean(times: list[float]) -> float:
            return sum(times) / len(times) if times else 0.0

        recent = self._step_s[max(self._window, SKIP_STEPS):] or self._step_s[self._window:] or self._step_s
        return max(mean(recent), mean(self._step_s[SKIP_STEPS:]))

    def decide(self, step: int, validation_s: float, checkpoint_s: float,
               validates: Callable[[int, int], bool], checkpoints: Callable[[int, int], bool],
               least: int | None = None) -> int:
        """The run's length, decided after the checkpoint at ``step`` that took ``validation_s`` + ``checkpoint_s``;
        at least ``least`` (a length whose learning-rate decay begins after ``step``)."""
        self._checkpoint_s.append((validation_s, checkpoint_s))
        mean_v = sum(v for v, _ in self._checkpoint_s) / len(self._checkpoint_s)
        mean_c = sum(c for _, c in self._checkpoint_s) / len(self._checkpoint_s)
        step_s = self.step_time()
        elapsed = self.elapsed()
        remaining = (1.0 - MARGIN) * (self.budget_s - elapsed)
        n = steps_within(remaining, step, self.cap, step_s, mean_v, mean_c, validates, checkpoints) \
            if step_s > 0 else self.cap
        if least is not None:
            n = min(max(n, least), self.cap)
        first = self.record.get("first") or {"step": step, "steps": n}
        self.record = {"minutes": self.minutes, "decided_at_step": step, "elapsed_s": round(elapsed, 2),
                       "step_s": round(step_s, 4), "validation_s": round(mean_v, 2),
                       "checkpoint_s": round(mean_c, 2), "steps": n, "cap": self.cap, "first": first,
                       "decisions": int(self.record.get("decisions", 0)) + 1}
        self._window = len(self._step_s)
        return n

    def summary(self) -> dict:
        """The decision and its measurements, with the seconds the run has spent (the summary, the model card)."""
        return {**self.record, "minutes": self.minutes, "cap": self.cap, "seconds": round(self.elapsed(), 1)}

    def state(self) -> dict:
        """What a checkpoint keeps: the seconds spent so far and the decision (a resumed run continues from it)."""
        return {"minutes": self.minutes, "seconds": round(self.elapsed(), 3), "steps": self.steps,
                "record": self.record}

    def restore(self, saved: dict | None) -> None:
        """Continue from a checkpoint's :meth:`state` (None or empty: a fresh run): its seconds and its decision."""
        saved = saved or {}
        self.spent_before = float(saved.get("seconds", 0.0))
        self.record = dict(saved.get("record") or {})
