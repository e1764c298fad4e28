"""The adaptive exit rule (spec §11, "exit by answer stability instead of a fixed rho"; docs/sampling.md).

Along the prefix early-stop path of a master grid of rho * max_nfe points, every ``check_every`` denoiser calls
the clean prediction d_j is decoded (one decoder call, one NFE) and its answer extracted. A row stops when its
answer has repeated at ``patience`` consecutive checks and it has spent at least ``min_nfe``; the decoded check is
its output. A row that never settles stops when one more denoiser call and its decode would exceed ``max_nfe``,
and decodes its last clean prediction there (that decode counts too), so no row ever spends more than max_nfe.

All rows of a batch advance in lockstep (they share the step count k and the check schedule); only the answers
differ, so the schedule below is a function of the settings alone and a row's exit depends only on its own path.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Hashable, Sequence

import torch

from elfreg.bounds import INT64_MAX

# Defaults of the rule; the measurement behind them is in docs/sampling.md ("Adaptive exit").
DEFAULT_EXIT: dict[str, int] = {"check_every": 2, "patience": 2, "min_nfe": 0}

AnswerFn = Callable[[torch.Tensor, Sequence[int]], Sequence[Hashable | None]]


@dataclass(frozen=True)
class SchedulePoint:
    """The k-th denoiser call of a row that has not stopped: does it check, and the NFE spent if it stops here."""

    k: int          # denoiser calls so far (the decoded prediction is d_{k-1})
    check: bool     # a check decode follows this call
    checks: int     # check decodes spent so far, this one included
    nfe: int        # NFE of a row that stops after this call: k + checks, + 1 for the budget's own decode
    last: bool      # the budget allows no further denoiser call (and its decode)


@dataclass(frozen=True)
class ExitRule:
    """Settings of the exit rule; ``checked`` validates them with errors that name the field."""

    check_every: int
    patience: int
    min_nfe: int
    max_nfe: int

    @classmethod
    def checked(cls, check_every: Any, patience: Any, min_nfe: Any, max_nfe: int, prefix: str = "",
                max_name: str = "max_nfe", need_fire: bool = True) -> "ExitRule":
        """The rule, or ValueError naming the bad field (``prefix`` + name; the budget is called ``max_name``).

        need_fire: also require that the rule can fire before the budget ends (off for the fixed samplers, which
        record the settings but do not use them).
        """
        def bad(v: Any, low: int) -> bool:
            return isinstance(v, bool) or not isinstance(v, int) or not low <= v <= INT64_MAX

        if bad(check_every, 1):
            raise ValueError(f"{prefix}check_every: need an integer >= 1 (denoiser calls between answer checks), "
                             f"got {check_every!r}")
        if bad(patience, 1):
            raise ValueError(f"{prefix}patience: need an integer >= 1 (consecutive checks that repeat the answer), "
                             f"got {patience!r}")
        if bad(min_nfe, 0):
            raise ValueError(f"{prefix}min_nfe: need an integer >= 0, got {min_nfe!r}")
        if bad(max_nfe, 2):
            raise ValueError(f"{prefix}{max_name}: need an integer >= 2, got {max_nfe!r}")
        rule = cls(check_every, patience, min_nfe, max_nfe)
        if need_fire:
            if min_nfe > max_nfe:
                raise ValueError(f"{prefix}min_nfe: {min_nfe} exceeds {max_name} = {max_nfe}")
            if rule.earliest is None:
                need = (patience + 1) * (check_every + 1)
                raise ValueError(
                    f"{prefix}patience: {patience + 1} checks every {check_every} denoiser calls (at least {need} "
                    f"NFE{f', and min_nfe = {min_nfe}' if min_nfe > need else ''}) do not fit {max_name} = "
                    f"{max_nfe}: the rule could never fire; lower {prefix}patience or {prefix}check_every, "
                    f"or raise {max_name}")
        return rule

    @cached_property
    def schedule(self) -> tuple[SchedulePoint, ...]:
        """Every denoiser call of a row that never settles, up to the one the budget ends at."""
        out, checks, k = [], 0, 0
        while True:
            k += 1
            check = k % self.check_every == 0
            checks += check
            last = (k + 1) + checks + 1 > self.max_nfe   # one more call plus its decode would not fit
            out.append(SchedulePoint(k, check, checks, k + checks + (last and not check), last))
            if last:
                return tuple(out)

    @cached_property
    def earliest(self) -> SchedulePoint | None:
        """The first call after which the rule can fire (patience + 1 checks, min_nfe spent), None if none fits."""
        return next((p for p in self.schedule
                     if p.check and p.checks >= self.patience + 1 and p.nfe >= self.min_nfe), None)

    @property
    def max_calls(self) -> int:
        """Denoiser calls of a row that never settles (the grid prefix the sampler needs)."""
        return self.schedule[-1].k

    def to_dict(self) -> dict[str, int]:
        return {"check_every": self.check_every, "patience": self.patience, "min_nfe": self.min_nfe,
                "max_nfe": self.max_nfe}


@dataclass
class ExitEvent:
    """Rows that stop after denoiser call k: their places in the step's rows, answers and whether they settled."""

    k: int
    nfe: int                          # NFE each of these rows spent (the same for all: rows move in lockstep)
    local: list[int]                  # positions in the step's rows
    settled: list[bool]               # True: the answer settled; False: the budget ended
    answers: list[Hashable | None]    # the answer at the exit
    token_ids: torch.Tensor           # (B', L) the decode made after call k, for every row of the step


class ExitTracker:
    """The rule along one batch's trajectory: per row the last checked answer and how often it repeated.

    ``step`` is called after each denoiser call with the batch rows that call computed; it decodes (through
    ``decode``) only at checks and at the budget's last call. The sampler removes the rows it reports; the
    diagnostics keep them on the path and only note where the rule fired.
    """

    def __init__(self, rule: ExitRule, answer_of: AnswerFn, rows: int) -> None:
        self.rule, self.answer_of = rule, answer_of
        self.last: list[Hashable | None] = [None] * rows
        self.streak = [0] * rows
        self.live = [True] * rows

    @property
    def done(self) -> bool:
        return not any(self.live)

    def step(self, k: int, rows: Sequence[int], decode: Callable[[], torch.Tensor]) -> ExitEvent | None:
        """After denoiser call k on batch rows ``rows``: decode if the schedule says so; the rows that stop, or None."""
        if k > len(self.rule.schedule):
            return None
        point = self.rule.schedule[k - 1]
        live = [i for i, r in enumerate(rows) if self.live[r]]
        if not live or not (point.check or point.last):
            return None
        ids = decode()
        answers = list(self.answer_of(ids[live], [rows[i] for i in live]))
        local, settled, found = [], [], []
        for i, a in zip(live, answers):
            r = rows[i]
            fired = False
            if point.check:
                self.streak[r] = self.streak[r] + 1 if a is not None and a == self.last[r] else 0
                self.last[r] = a
                fired = self.streak[r] >= self.rule.patience and point.nfe >= self.rule.min_nfe
            if fired or point.last:
                local.append(i)
                settled.append(fired)
                found.append(a)
                self.live[r] = False
        return ExitEvent(k, point.nfe, local, settled, found, ids) if local else None


def nfe_summary(nfe: Sequence[int]) -> dict[str, Any]:
    """Per-row NFE -> {n, mean, min, max, histogram {NFE: rows}} (the histogram's keys ascending)."""
    values = [int(v) for v in nfe]
    if not values:
        return {"n": 0, "mean": None, "min": None, "max": None, "histogram": {}}
    hist = Counter(values)
    return {"n": len(values), "mean": sum(values) / len(values), "min": min(values), "max": max(values),
            "histogram": {int(k): hist[k] for k in sorted(hist)}}


def format_nfe_summary(summary: dict[str, Any]) -> str:
    """One line: mean, range and histogram of an nfe_summary."""
    if not summary["n"]:
        return "no samples"
    hist = ", ".join(f"{k}: {v}" for k, v in summary["histogram"].items())
    return (f"mean {summary['mean']:.2f} over {summary['n']} (min {summary['min']}, max {summary['max']}); "
            f"histogram NFE: samples {{{hist}}}")
