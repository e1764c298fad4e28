"""Prompt/response templates for math and code rows (spec §2, §7; formats in docs/data.md).

Math responses always end with one final line `#### <answer>` so a GSM8K-style extractor finds the
answer; a `\\boxed{}` in the solution body is kept for math-verify.
"""

from __future__ import annotations

import re
from typing import Any

from elfreg.data.sources import BadRowError

MATH_PROMPT = "Question: {question}\nAnswer:"
CODE_PROMPT = "Question: {question}\nAnswer:"

_CALC = re.compile(r"<<[^<>]*>>")  # GSM8K calculator annotations: "<<48/2=24>>"
_HASH_LINE = re.compile(r"^\s*####\s*(.+?)\s*$", re.MULTILINE)
_ANSWER_IS_LINE = re.compile(r"^\s*The answer is:?\s*(.+?)\s*\.?\s*$", re.MULTILINE | re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in `text` (balanced braces), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def extract_final_answer(solution: str) -> str | None:
    """Final answer of a solution text: last `#### X` line, else last 'The answer is X' line, else last \\boxed{X}."""
    for pattern in (_HASH_LINE, _ANSWER_IS_LINE):
        hits = pattern.findall(solution)
        if hits:
            return hits[-1].strip()
    return last_boxed(solution)


def format_math_response(solution: str, answer: Any = None, where: str = "") -> str:
    """Solution text with calculator annotations and old final-answer lines removed, ending `\\n#### <answer>`.

    `answer` (e.g. OpenMathInstruct-2 expected_answer) wins over one extracted from the text;
    a row with neither is a BadRowError naming `where`.
    """
    if answer is None or str(answer).strip() == "":
        answer = extract_final_answer(solution)
        if answer is None:
            raise BadRowError(f"{where}: math response has no final answer (####, 'The answer is', \\boxed)")
    answer = str(answer).strip().replace("\n", " ")
    body = _CALC.sub("", solution)
    body = _HASH_LINE.sub("", body)
    body = _ANSWER_IS_LINE.sub("", body).rstrip()
    return f"{body}\n#### {answer}" if body else f"#### {answer}"


def apply_template(example: dict[str, Any], task: str) -> tuple[str, str]:
    """Example dict → (prompt text, response text) for task 'math' or 'code'."""
    question = example["prompt"].strip()
    where = str(example.get("id", ""))
    if task == "math":
        return MATH_PROMPT.format(question=question), format_math_response(
            example["response"], example.get("answer"), where)
    if task == "code":
        return CODE_PROMPT.format(question=question), example["response"].strip()
    raise ValueError(f"unknown task {task!r}; expected 'math' or 'code'")
