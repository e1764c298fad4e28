"""The diagnostics' tasks: each a text task of the registry (elfreg.tasks.registry), read and judged as the scorer
does.

A task is `extract(text) -> answer | None` and `is_correct(text, problem) -> bool`, where `problem` is the prompt
record (a dict with "prompt" and, for scoring, "answer"). `resolve_task` asks a lookup function first (a caller may
plug in tasks of its own) and falls back to the registry's text tasks (code is judged by its tests, not here).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Mapping

from elfreg.tasks import registry
from elfreg.tasks.answers import extract_final_number, extractor
from elfreg.tasks.registry import gold_answer

__all__ = ["AnswerTask", "BUILTIN_TASKS", "extract_final_number", "gold_answer", "harness_task", "registry_task",
           "resolve_task"]


@dataclass(frozen=True)
class AnswerTask:
    """A task's answer extractor and scorer."""

    name: str
    extract: Callable[[str], str | None]
    is_correct: Callable[[str, Mapping[str, Any]], bool]


def registry_task(name: str) -> AnswerTask | None:
    """The registry's text task called ``name`` (case-blind) as an AnswerTask, or None."""
    spec = registry.find(name)
    if spec is None or spec.kind == "code":
        return None
    return AnswerTask(spec.name, extractor(spec.extract), partial(registry.judge, spec))


# The tasks `elfreg diagnose --task` knows without a lookup.
BUILTIN_TASKS: dict[str, AnswerTask] = {t.name: registry_task(t.name) for t in registry.TASKS if t.kind != "code"}
harness_task = registry_task  # the old name of the default lookup


def resolve_task(name: str, lookup: Callable[[str], AnswerTask | None] = registry_task) -> AnswerTask:
    """The task called name: from lookup(name) if it knows it, else a built-in; ValueError naming --task."""
    task = lookup(name)
    if task is not None:
        return task
    key = name.lower()
    if key not in BUILTIN_TASKS:
        raise ValueError(f"--task: unknown task {name!r}; built-in: {', '.join(sorted(BUILTIN_TASKS))}")
    return BUILTIN_TASKS[key]
