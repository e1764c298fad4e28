"""Answer extraction and scoring used by the diagnostics: a small task interface plus built-in fallbacks.

A task is `extract(text) -> answer | None` and `is_correct(text, problem) -> bool`, where `problem` is
the prompt record (a dict with "prompt" and, for scoring, "answer"). `resolve_task` asks a lookup
function first (the evaluation harness's registry plugs in there) and falls back to the built-ins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from elfreg.eval.answers import extract_gsm8k, normalize_number, numbers_equal
from elfreg.sampling.answers import extract_final_number, whole_text




@dataclass(frozen=True)
class AnswerTask:
    """A task's answer extractor and scorer."""

    name: str
    extract: Callable[[str], str | None]
    is_correct: Callable[[str, Mapping[str, Any]], bool]


def gold_answer(problem: Mapping[str, Any]) -> str | None:
    """The reference answer of a prompt record: its 'answer' field (a full '... #### x' solution is cut to x)."""
    gold = problem.get("answer")
    if gold is None:
        return None
    gold = str(gold)
    return extract_gsm8k(gold) if "####" in gold else (normalize_number(gold) or gold.strip())


def _gsm8k_correct(text: str, problem: Mapping[str, Any]) -> bool:
    gold = gold_answer(problem)
    return gold is not None and numbers_equal(extract_gsm8k(text), gold)


def _exact_correct(text: str, problem: Mapping[str, Any]) -> bool:
    gold = problem.get("answer")
    return gold is not None and text.strip() == str(gold).strip()


BUILTIN_TASKS: dict[str, AnswerTask] = {
    "gsm8k": AnswerTask("gsm8k", extract_final_number, _gsm8k_correct),
    "exact": AnswerTask("exact", whole_text, _exact_correct),
}


def harness_task(name: str) -> AnswerTask | None:
    """Tasks registered beside the evaluation harness: the embedded demo's tasks (one '#### X' final line)."""
    if name in ("demo-arith", "demo-chain"):
        from elfreg.demo.answers import extract_answer

        return AnswerTask(name, extract_answer,
                          lambda text, problem: extract_answer(text) == str(problem.get("answer")))
    return None


def resolve_task(name: str, lookup: Callable[[str], AnswerTask | None] = harness_task) -> AnswerTask:
    """The task called name: from lookup(name) if it knows it, else a built-in; ValueError naming --task."""
    task = lookup(name)
    if task is not None:
        return task
    key = name.lower()
    if key not in BUILTIN_TASKS:
        raise ValueError(f"--task: unknown task {name!r}; built-in: {', '.join(sorted(BUILTIN_TASKS))}")
    return BUILTIN_TASKS[key]
