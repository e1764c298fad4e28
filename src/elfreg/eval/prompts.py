"""Model-facing prompt formats, one per benchmark, identical for every model (spec §6).

The exact strings are documented in docs/evaluation.md; change them only with a version bump there.
"""

from __future__ import annotations

from .benchmark import Problem

MATH_INSTRUCTION = "Solve the following problem step by step. Put the final answer in \\boxed{}."


def gsm8k_prompt(p: Problem) -> str:
    """GSM8K: question, then the model reasons and ends with ``#### <number>``."""
    return f"Question: {p.question.strip()}\nAnswer the question step by step and end with \"#### <number>\".\nAnswer:"


def math_prompt(p: Problem) -> str:
    """MATH-500: problem, answer in ``\\boxed{}``."""
    return f"{MATH_INSTRUCTION}\n\nProblem: {p.question.strip()}\nSolution:"


def choice_prompt(p: Problem) -> str:
    """MMLU: question and lettered options; the rationale ends with ``The answer is (X)``."""
    opts = "\n".join(f"({letter}) {text}" for letter, text in zip("ABCD", p.extra["choices"]))
    return (f"{p.question.strip()}\n{opts}\n"
            "Think step by step, then finish with \"The answer is (X)\" where X is A, B, C or D.\nAnswer:")


def humaneval_prompt(p: Problem) -> str:
    """HumanEval(+): the function signature and docstring in a code block; reply with the whole function."""
    return ("Complete the following Python function. Reply with the complete function in a ```python block.\n\n"
            f"```python\n{p.question.rstrip()}\n```\n")


def mbpp_prompt(p: Problem) -> str:
    """MBPP(+): task text and its example asserts; reply with the code in a ```python block."""
    return ("You are an expert Python programmer, and here is your task:\n"
            f"{p.question.strip()}\n"
            "Reply with the complete code in a ```python block.\n")
