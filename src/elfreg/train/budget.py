"""A run's length from a wall-clock budget (``train.minutes``): as many optimiser steps as fit, at most ``train.steps``.

The steps are decided once, from what this run measured on this machine: right after its first checkpoint (or
after a checkpoint forced at the first step by which ``DECIDE_AT`` of the budget is spent, if that comes first),
the run knows its elapsed time E (loading the backbones and building the feature cache included), the mean wall
time of a step tau (logging and hooks included; validation and checkpoints apart) and what its checkpoint cost: the
validation v and the save c (writing the checkpoint and the learning curve). It then trains to the largest N <= cap
with

    (N - s) tau + n_val(s, N) v + n_ckpt(s, N) c <= (1 - MARGIN) (B - E)

where s is the step of the decision, B the budget and n_val / n_ckpt count the validations and checkpoints the run
would still write after step s (its last step's included, where the final model and summary are written).

Until the decision the run's length is the cap, which the learning-rate schedule only reads for its final decay,
so ``train.minutes`` needs a schedule whose decay is a final part of the run (``decay_fraction`` <= 0.5, auxiliary
weights constant: :meth:`elfreg.train.config.TrainConfig.__post_init__`); the decision comes before that part.
The decided N is kept in every later checkpoint: a resumed run trains to the same N. A run resumed from a
checkpoint written before the decision decides at its next checkpoint, counting the seconds its checkpoint
recorded as spent. Which N a budget gives depends on the machine and on what else runs on it; the summary and the
model card record N and the measurements behind it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

DECIDE_AT = 0.25  # the share of the budget by which the decision is taken, a checkpoint forced if none came yet
MARGIN = 0.05  # the share of the remaining budget left unplanned: step times vary over a run
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
    record: dict = field(default_factory=dict)  # the decision and its measurements (summary, model card); {} before
    start: float = field(init=False, default=0.0)
    _step_s: list[float] = field(init=False, repr=False, default_factory=list)

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

    def decide(self, step: int, validation_s: float, checkpoint_s: float,
               validates: Callable[[int, int], bool], checkpoints: Callable[[int, int], bool]) -> int:
        """The run's length, decided after the checkpoint at ``step`` that took ``validation_s`` + ``checkpoint_s``."""
        times = self._step_s[SKIP_STEPS:] or self._step_s
        step_s = sum(times) / len(times) if times else 0.0
        elapsed = self.elapsed()
        remaining = (1.0 - MARGIN) * (self.budget_s - elapsed)
        n = steps_within(remaining, step, self.cap, step_s, validation_s, checkpoint_s, validates, checkpoints) \
            if step_s > 0 else self.cap
        self.record = {"minutes": self.minutes, "decided_at_step": step, "elapsed_s": round(elapsed, 2),
                       "step_s": round(step_s, 4), "validation_s": round(validation_s, 2),
                       "checkpoint_s": round(checkpoint_s, 2), "steps": n, "cap": self.cap}
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
