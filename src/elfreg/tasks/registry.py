"""One record per task: how it is asked, which answer it reads, how that answer is judged, its guidance preset.

Every per-task table of elfreg reads from :data:`TASKS`: the ``--task`` names of ``generate``, ``eval run``,
``diagnose`` and lm-eval (:func:`task_names`), the w presets (:func:`w_presets`, spec §5), the answer the adaptive
exit watches (:func:`extract_for`, spec §11), the verdict of a text benchmark (:func:`judge`) and the question each
benchmark asks (``prompt``). A benchmark kind (``Benchmark.kind``) names its default task (:data:`KIND_TASKS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from elfreg.tasks import formats
from elfreg.tasks.answers import EXTRACTORS, VERDICT_KINDS, extract_gsm8k, normalize_number, verdict

KINDS = (*VERDICT_KINDS, "code")


@dataclass(frozen=True)
class Task:
    """A task: its verdict ``kind``, the answer it reads (``extract``, one of EXTRACTORS), its guidance preset ``w``
    (None: the sampler's default), the question it asks (``prompt``; None: a task name with no benchmark of its own),
    the form of its problems' ids, and whether ``--task`` names it (``sampling``)."""

    name: str
    kind: str
    extract: str
    w: float | None = None
    prompt: Callable[[formats.Question], str] | None = None
    task_id: str = ""
    sampling: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Task {self.name}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.extract not in EXTRACTORS:
            raise ValueError(f"Task {self.name}: extract must be one of {', '.join(EXTRACTORS)}, got {self.extract!r}")


# Guidance w: 3 for GSM8K, 2 for code and MATH (spec §5). MMLU: the sources are silent; 2 is elfreg's choice
# (docs/evaluation.md). Code answers are whole programs: the exit rule compares the whole text.
TASKS: tuple[Task, ...] = (
    Task("gsm8k", "gsm8k", "gsm8k", 3.0, formats.gsm8k_prompt, "gsm8k/<row>"),
    Task("math", "math", "math", 2.0, None),
    Task("math500", "math", "math", 2.0, formats.math_prompt, "<unique_id>, e.g. test/algebra/1.json"),
    Task("code", "code", "text", 2.0, None),
    Task("humaneval", "code", "text", 2.0, formats.humaneval_prompt, "HumanEval/<n>"),
    Task("mbpp", "code", "text", 2.0, formats.mbpp_prompt, "Mbpp/<n>"),
    Task("mmlu", "choice", "choice", 2.0, formats.choice_prompt, "<subject>/<row in subject>"),
    Task("choice", "choice", "choice", None, None),
    Task("demo-arith", "exact", "final-line", None, formats.gsm8k_prompt, "arith/<n>"),
    Task("demo-chain", "exact", "final-line", None, formats.gsm8k_prompt, "chain/<n>"),
    Task("humaneval_plus", "code", "text", None, formats.humaneval_prompt, "HumanEval/<n>", sampling=False),
    Task("mbpp_plus", "code", "text", None, formats.mbpp_prompt, "Mbpp/<n>", sampling=False),
    Task("mmlu_dev", "choice", "choice", None, formats.choice_prompt, "<subject>/<row in subject>", sampling=False),
    Task("exact", "exact", "text", None, None, sampling=False),
)
_BY_NAME = {t.name: t for t in TASKS}

# The task whose settings a benchmark kind uses when no task is named (eval run's w preset, the exit's answer).
KIND_TASKS: dict[str, str] = {"gsm8k": "gsm8k", "math": "math", "code": "code", "choice": "mmlu", "exact": "gsm8k"}


def task(name: str) -> Task:
    """The task called ``name`` (case-blind); ValueError naming ``task`` otherwise."""
    found = _BY_NAME.get(name.lower())
    if found is None:
        raise ValueError(f"task: unknown task {name!r}; choose one of {', '.join(task_names())}")
    return found


def find(name: str | None) -> Task | None:
    """The task called ``name`` (case-blind), or None."""
    return _BY_NAME.get(name.lower()) if name else None


def task_names() -> tuple[str, ...]:
    """The ``--task`` names of generate, eval run and lm-eval, sorted."""
    return tuple(sorted(t.name for t in TASKS if t.sampling))


def w_presets() -> dict[str, float]:
    """Task name -> its guidance preset w (spec §5), for the tasks that have one."""
    return {t.name: t.w for t in TASKS if t.sampling and t.w is not None}


def extract_for(name: str | None, kind: str | None = None) -> str:
    """The answer extractor a task / benchmark name implies, else its benchmark kind's, else ``text``.

    Only a task whose answer is not the whole text names its extractor by name; a benchmark with no task of its own
    (``mmlu_dev``) reads its kind's."""
    named = find(name)
    if named is not None and named.sampling and named.extract != "text":
        return named.extract
    if kind in ("gsm8k", "math", "choice"):  # the kind's own answer; code and exact tasks: the whole text
        return _BY_NAME[KIND_TASKS[kind]].extract
    return "text"


def gold_answer(problem: dict[str, Any]) -> str | None:
    """The reference answer of a prompt record: its ``answer`` field (a full '... #### x' solution is cut to x, a
    number normalised)."""
    gold = problem.get("answer")
    if gold is None:
        return None
    gold = str(gold)
    return extract_gsm8k(gold) if "####" in gold else (normalize_number(gold) or gold.strip())


def judge(spec: Task, text: str, problem: dict[str, Any], math_timeout_s: int = 5) -> bool:
    """Whether ``text`` answers the prompt record ``problem`` (its ``answer``): the scorer's verdict of the task's
    kind, read by the task's extractor for exact-match tasks; a record without an answer is never right."""
    if spec.kind == "code":
        raise ValueError(f"task: {spec.name} is judged by running its tests (elfreg eval), not by its text")
    gold = gold_answer(problem) if spec.kind == "gsm8k" else problem.get("answer")
    if gold is None:
        return False
    from elfreg.tasks.answers import extractor

    read = extractor(spec.extract) if spec.kind == "exact" and spec.extract != "text" else None
    return bool(verdict(spec.kind, read, math_timeout_s, text, str(gold))["correct"])
