"""A harder built-in task of ``elfreg demo`` (``task.kind=chain``): pointer chasing through variable assignments.

Not the default: at the demo's CPU budget the student never got past chance on it (measurements below); the
default is the arithmetic-chain task of ``elfreg.tasks.arith``. It stays as a harder target for longer runs.

A problem lists single-letter variable assignments in shuffled order. One chain starts at a digit and is
followed by ``hops`` copies (``a=3, c=a, e=c``); a second, distractor chain starts at a different digit.
The question names the last variable of the target chain; the answer walks the chain back to its digit:

    prompt:   "d=5,e=c,a=3,b=d,c=a,f=b. e?"
    response: "e=c=a=3\\n#### 3"

Each step of the response is one lookup ("which line defines c?"), so the final digit is only right when
every hop is resolved and the distractor chain (which holds another digit) is ignored: a real multi-step
problem, not copying. The final line ``#### <answer>`` lets the GSM8K-style extractor of
``elfreg.tasks.formats`` score it. With SmolLM2's tokenizer every letter, digit, ``=`` and ``,`` is one
token, so a problem with 2 hops and a 2-hop distractor is 26 prompt + 11 response tokens.

Why this family: two-digit word arithmetic reached only 1-4% exact answers after 1,200 CPU steps (the
arithmetic table was the bottleneck, in an earlier CPU probe), while lookups need no table. Probe
(throwaway; SmolLM2-135M layer 6 features, 4.3M-parameter student, batch 64, AdamW 2e-3, EMA 0.99, 16-NFE
Euler, 200 test problems) measured exact final answers at 150/300/450/600 steps: 2 hops + 1 distractor
chain of 2 hops, ELF 9/8/8.5/28.5% (0.5% with the whole chain right); 1 hop + 1 one-hop distractor,
ELF 8.5/11/11.5% and ELF-REG 11.5/14/14.5% at 200/300/400 steps. So learning starts around 450-600 steps
and 50% needs more steps than the probe could run on a shared CPU. A model that only picks one of the
root digits scores 1/(1 + distractors): ``chain_correct`` checks the shown path as well.

Why it is still slow (measured, 2026-11-30): the bottleneck is not the sampler, the features or the arithmetic
but a long plateau before the student learns to read the prompt at all. After 1,500 steps (width 128) the EMA
model copies the query letter into the first response slot only 44-50% of the time (chance 12.5%), and at t = 0
its first lookup is right 12% of the time, although every response position is decoded 100% right from clean
features and the letter explains 87-99% of the feature variance there. Plain supervised regression of the
response features from the clean prompt (t = 0 only, no diffusion) shows the same plateau: with the loss on one
position the copy is learned after ~220 steps (~50 with random token embeddings instead of SmolLM2 features);
with the loss on every response position, neither is learned within 250 steps. Changes that did not move test
accuracy at 16 NFE off 9-16% within 600-2,000 steps: lr 5e-3, encoder layer 3, SC-CFG off (w = 1), t_mean
-0.5, pure t ~ 0 training, 8 heads, sigma 1 (plateau test), batch 16 or 32 with proportionally more steps,
1 hop with 3 one-digit distractors, half the training set made of 1-hop problems (800 steps), and a learned
absolute position embedding (plateau test).

Train and test are disjoint by construction: a problem belongs to the test split iff a hash of its prompt
text falls in the test bucket, so no prompt can appear in both, whatever the seeds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from elfreg.tasks.synthetic import hash_split, score, worked_body

LETTERS = "abcdefgh"
DIGITS = "0123456789"
SPLITS = ("train", "test")


@dataclass(frozen=True)
class ChainTaskConfig:
    """Difficulty of the pointer-chasing task: hops of the target chain and of the distractor chain."""

    hops: int = 2  # copies after the root of the target chain (response has hops + 1 lookups)
    distractor_hops: int = 2  # copies after the root of each distractor chain
    distractors: int = 1  # distractor chains; a model that only picks a root digit is right 1/(1 + distractors)
    test_buckets: int = 10  # 1 in test_buckets of the prompt space is test

    def __post_init__(self) -> None:
        if self.hops < 1:
            raise ValueError(f"ChainTaskConfig.hops must be >= 1, got {self.hops}")
        if self.distractor_hops < 0:
            raise ValueError(f"ChainTaskConfig.distractor_hops must be >= 0, got {self.distractor_hops}")
        if self.distractors < 0:
            raise ValueError(f"ChainTaskConfig.distractors must be >= 0, got {self.distractors}")
        if self.num_variables > len(LETTERS):
            raise ValueError(f"ChainTaskConfig: {self.num_variables} variables (hops, distractor_hops, distractors) "
                             f"exceed the {len(LETTERS)} letters available")
        if self.test_buckets < 2:
            raise ValueError(f"ChainTaskConfig.test_buckets must be >= 2, got {self.test_buckets}")

    @property
    def num_variables(self) -> int:
        return self.hops + 1 + self.distractors * (self.distractor_hops + 1)


@dataclass(frozen=True)
class ChainProblem:
    """One problem: assignments (lhs, rhs) in prompt order (rhs a digit or a letter) and the queried variable."""

    assignments: tuple[tuple[str, str], ...]
    query: str

    def chain(self) -> list[str]:
        """The lookup path from the query back to its digit, e.g. ['e', 'c', 'a', '3']."""
        table = dict(self.assignments)
        if len(table) != len(self.assignments):
            raise ValueError(f"ChainProblem: a variable is assigned twice in {self.assignments}")
        path = [self.query]
        while path[-1] not in DIGITS:
            if path[-1] not in table:
                raise ValueError(f"ChainProblem: variable {path[-1]!r} is never assigned")
            if len(path) > len(table):
                raise ValueError(f"ChainProblem: the assignments of {self.query!r} form a cycle")
            path.append(table[path[-1]])
        return path

    @property
    def answer(self) -> str:
        """The digit the queried variable holds."""
        return self.chain()[-1]


def format_prompt(problem: ChainProblem) -> str:
    """Prompt text: 'd=5,e=c,a=3,b=d,c=a,f=b. e?'."""
    return ",".join(f"{lhs}={rhs}" for lhs, rhs in problem.assignments) + f". {problem.query}?"


def reference_response(problem: ChainProblem) -> str:
    """The worked answer: the lookup path joined by '=', then the final line '#### <digit>'."""
    return "=".join(problem.chain()) + f"\n#### {problem.answer}"


def chain_correct(text: str, problem: ChainProblem) -> bool:
    """Stricter than ``score``: the shown solution (the text before the final line) is exactly the right one."""
    return score(text, problem) and worked_body(text) == "=".join(problem.chain())


def split_of(problem: ChainProblem, cfg: ChainTaskConfig = ChainTaskConfig()) -> str:
    """'test' iff the sha256 of the prompt text falls in bucket 0 of cfg.test_buckets, else 'train'."""
    return hash_split(format_prompt(problem), cfg.test_buckets)


def random_problem(rng: random.Random, cfg: ChainTaskConfig = ChainTaskConfig()) -> ChainProblem:
    """One problem drawn from ``rng``: a target chain and distractor chains with distinct root digits, shuffled."""
    names = rng.sample(LETTERS, cfg.num_variables)
    roots = rng.sample(DIGITS, 1 + cfg.distractors)
    k = cfg.distractor_hops + 1
    chains = [names[:cfg.hops + 1]] + [names[cfg.hops + 1 + i * k:cfg.hops + 1 + (i + 1) * k]
                                       for i in range(cfg.distractors)]
    assignments = []
    for chain, root in zip(chains, roots):
        assignments.append((chain[0], root))
        assignments += [(chain[i], chain[i - 1]) for i in range(1, len(chain))]
    rng.shuffle(assignments)
    return ChainProblem(tuple(assignments), chains[0][-1])


def make_split(n: int, seed: int, split: str, cfg: ChainTaskConfig = ChainTaskConfig()) -> list[ChainProblem]:
    """``n`` distinct problems of ``split`` ('train' or 'test'), determined by (seed, split, cfg)."""
    if split not in SPLITS:
        raise ValueError(f"make_split: split must be one of {SPLITS}, got {split!r}")
    if n < 0:
        raise ValueError(f"make_split: n must be >= 0, got {n}")
    rng = random.Random(f"elfreg-demo-chain/{seed}/{split}")
    out: list[ChainProblem] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n + 10_000:
            raise ValueError(f"make_split: could not draw {n} distinct {split} problems for {cfg}")
        problem = random_problem(rng, cfg)
        key = format_prompt(problem)
        if key in seen or split_of(problem, cfg) != split:
            continue
        seen.add(key)
        out.append(problem)
    return out
