"""The default task of ``elfreg demo``: single-digit arithmetic chains, solved step by step.

A problem is a start digit followed by ``ops`` additions or subtractions of one digit, chosen so that every
intermediate result stays a single digit (0..9). The worked response computes one step per clause, each step
starting from the previous result, and ends with the GSM8K-style final line:

    prompt:   "3+4-2=?"
    response: "3+4=7,7-2=5\\n#### 5"

The final digit is right only if every step's table fact is right and carried into the next step, so the
answer needs ``ops`` dependent computations, not one. With SmolLM2's tokenizer every digit, sign, '=', ',' and
'?' is one token (``tests/demo/test_arith.py`` checks it).

Why this task (measured, 2026-11-30, SmolLM2 layer-6 features, 16-NFE early-stop, 100 test problems): the
pointer-chasing task of ``elfreg.tasks.chain`` stayed at chance for every setting tried, because the student
must learn content-addressed lookups. Here every operand sits at a fixed offset from the step that uses it,
which the student learns to copy within a few hundred steps (operands 89-96 % right after 600 steps); what
is left to learn is the 110-fact table of single-digit sums and differences, and carrying the first result
into the second step (the harder part: after 1,400 steps of a width-128 student the first result was right
65 % of the time, the second 37 %). The full demo (4 x 64 student, 3,500 steps of batch 32) reaches
55-61 % exact at 16 NFE against about 10 % for a guess.

The problem space is small and enumerated: ``11**ops * 10`` problems (1,210 for two steps), split into train
and test by a hash of the prompt text, so no prompt can appear in both.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from functools import lru_cache

from elfreg.tasks.synthetic import hash_split, score, worked_body

SPLITS = ("train", "test")
OPS = ("+", "-")


@dataclass(frozen=True)
class ArithTaskConfig:
    """Difficulty of the arithmetic-chain task: how many dependent steps, and the hash split of the problems."""

    ops: int = 2  # additions/subtractions after the start digit; the response has one step per op
    test_buckets: int = 10  # 1 in test_buckets of the problem space is test

    def __post_init__(self) -> None:
        if not 1 <= self.ops <= 4:
            raise ValueError(f"ArithTaskConfig.ops must be in 1..4 (the space grows as 11**ops), got {self.ops}")
        if self.test_buckets < 2:
            raise ValueError(f"ArithTaskConfig.test_buckets must be >= 2, got {self.test_buckets}")


@dataclass(frozen=True)
class ArithProblem:
    """One problem: the start digit and the (sign, digit) steps applied to it in order."""

    start: int
    steps: tuple[tuple[str, int], ...]

    def values(self) -> list[int]:
        """The running results: start, after step 1, ..., after the last step (each must stay in 0..9)."""
        out = [self.start]
        for sign, operand in self.steps:
            if sign not in OPS:
                raise ValueError(f"ArithProblem: unknown sign {sign!r}; expected one of {OPS}")
            out.append(out[-1] + operand if sign == "+" else out[-1] - operand)
        if not all(0 <= v <= 9 for v in out + [o for _, o in self.steps]):
            raise ValueError(f"ArithProblem: every number must be a single digit 0..9, got {self}")
        return out

    @property
    def answer(self) -> str:
        """The final result as text."""
        return str(self.values()[-1])


def format_prompt(problem: ArithProblem) -> str:
    """Prompt text: '3+4-2=?'."""
    return str(problem.start) + "".join(f"{s}{o}" for s, o in problem.steps) + "=?"


def worked_steps(problem: ArithProblem) -> str:
    """The worked solution without the final line: '3+4=7,7-2=5'."""
    v = problem.values()
    return ",".join(f"{v[i]}{s}{o}={v[i + 1]}" for i, (s, o) in enumerate(problem.steps))


def reference_response(problem: ArithProblem) -> str:
    """The worked answer: every step, then the final line '#### <digit>'."""
    return f"{worked_steps(problem)}\n#### {problem.answer}"


def chain_correct(text: str, problem: ArithProblem) -> bool:
    """Stricter than ``score``: the shown solution (the text before the final line) is exactly the right one."""
    return score(text, problem) and worked_body(text) == worked_steps(problem)


def split_of(problem: ArithProblem, cfg: ArithTaskConfig = ArithTaskConfig()) -> str:
    """'test' iff the sha256 of the prompt text falls in bucket 0 of cfg.test_buckets, else 'train'."""
    return hash_split(format_prompt(problem), cfg.test_buckets)


@lru_cache(maxsize=8)
def all_problems(cfg: ArithTaskConfig = ArithTaskConfig()) -> dict[str, tuple[ArithProblem, ...]]:
    """Every problem of the space, by split, in a fixed order."""
    out: dict[str, list[ArithProblem]] = {s: [] for s in SPLITS}
    step_choices = [(s, o) for s in OPS for o in range(10)]
    for start in range(10):
        for steps in itertools.product(step_choices, repeat=cfg.ops):
            v = start
            for s, o in steps:
                v = v + o if s == "+" else v - o
                if not 0 <= v <= 9:
                    break
            else:
                p = ArithProblem(start, tuple(steps))
                out[split_of(p, cfg)].append(p)
    return {s: tuple(ps) for s, ps in out.items()}


def make_split(n: int, seed: int, split: str, cfg: ArithTaskConfig = ArithTaskConfig()) -> list[ArithProblem]:
    """``n`` distinct problems of ``split`` ('train' or 'test'), a seeded draw from the enumerated space."""
    if split not in SPLITS:
        raise ValueError(f"make_split: split must be one of {SPLITS}, got {split!r}")
    pool = all_problems(cfg)[split]
    if not 0 <= n <= len(pool):
        raise ValueError(f"make_split: n must be in 0..{len(pool)} (the {split} split of {cfg} has "
                         f"{len(pool)} problems), got {n}")
    return random.Random(f"elfreg-demo-arith/{seed}/{split}").sample(pool, n)
