"""The question each benchmark asks, one format per benchmark, identical for every model (spec §6).

These are the bodies only: the model's own prompt template (saved with the model, elfreg.hub) is put around
each at generation (`elfreg generate`, which `elfreg eval run` calls), so an elfreg model sees at evaluation
exactly the prompt form it was trained on, and the template lives in one place. The exact strings are documented
in docs/evaluation.md; change them only with a version bump there.
"""

from __future__ import annotations

from elfreg.data.templates import format_choice_question

from .benchmark import Problem


def gsm8k_prompt(p: Problem) -> str:
    """GSM8K: question, then the model reasons and ends with ``#### <number>``."""
    return p.question.strip()


def math_prompt(p: Problem) -> str:
    """MATH-500: the problem (responses carry ``\\boxed{}`` and ``####``)."""
    return p.question.strip()


def choice_prompt(p: Problem) -> str:
    """MMLU: question and lettered options; the rationale ends with ``The answer is (X)`` (the training rows'
    text too: elfreg.data.templates.format_choice_question)."""
    return format_choice_question(p.question, p.extra["choices"])


def humaneval_prompt(p: Problem) -> str:
    """HumanEval(+): the function signature and docstring in a code block; reply with the whole function."""
    return ("Complete the following Python function. Reply with the complete function "
            f"in a ```python block.\n```python\n{p.question.rstrip()}\n```")


def mbpp_prompt(p: Problem) -> str:
    """MBPP(+): task text and its example asserts; reply with the code in a ```python block."""
    return f"{p.question.strip()}\nReply with the complete code in a ```python block."
