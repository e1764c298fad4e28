"""Benchmark and problem records, and the registry of benchmarks by name (spec §6)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from elfreg.tasks.registry import KINDS

PromptFormatter = Callable[["Problem"], str]


@dataclass
class Problem:
    """One benchmark item: ``reference`` is a completion that must score correct (gold answer / solution)."""

    task_id: str
    question: str  # the text shown to the model (before the benchmark's prompt template)
    reference: str
    answer: str | None = None  # gold answer for math / multiple choice
    entry_point: str | None = None  # function name for code tasks
    tests: str | None = None  # assert-style tests (HumanEval `check`, MBPP asserts)
    base_inputs: list | None = None  # differential-testing inputs (EvalPlus)
    plus_inputs: list | None = None
    atol: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Benchmark:
    """A named problem set with its prompt format and its scorer kind (one of :data:`elfreg.tasks.registry.KINDS`)."""

    name: str
    kind: str
    problems: list[Problem]
    source: str  # the file it was read from
    source_sha256: str
    prompt_formatter: PromptFormatter
    code_tests: tuple[str, ...] = ()  # code only: ("base",) or ("base", "plus")
    answer_extractor: Callable[[str], str | None] | None = None
    data_version: str | None = None  # the pinned version when the file is the shipped copy byte for byte
    # a user's file scored by this benchmark's rules: recorded as "custom", by the file's name and sha256
    custom: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Benchmark.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        ids = [p.task_id for p in self.problems]
        if len(set(ids)) != len(ids):
            raise ValueError(f"Benchmark {self.name}: duplicate task ids in {self.source}")
        self.by_id = {p.task_id: p for p in self.problems}

    def format_prompt(self, problem: Problem) -> str:
        """The model-facing prompt for ``problem`` (documented in docs/evaluation.md; same for every model)."""
        return self.prompt_formatter(problem)


BenchmarkFactory = Callable[[str | None], Benchmark]


@dataclass
class BenchmarkRegistry:
    """name -> factory(path or None) -> Benchmark; the demo registers its synthetic task here."""

    factories: dict[str, BenchmarkFactory] = field(default_factory=dict)

    def register(self, name: str, factory: BenchmarkFactory) -> None:
        """Add a benchmark; re-registering a name is an error (no silent override)."""
        if name in self.factories:
            raise ValueError(f"benchmark {name!r} is already registered")
        self.factories[name] = factory

    def load(self, name: str, path: str | None = None) -> Benchmark:
        """Build benchmark ``name`` from ``path`` (or its default location)."""
        if name not in self.factories:
            raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(sorted(self.factories))}")
        return self.factories[name](path)

    def names(self) -> list[str]:
        return sorted(self.factories)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes (keys the expected-output cache)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
