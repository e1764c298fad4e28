"""Prompt/response templates for math, code and multiple-choice rows (spec §2, §7; formats in docs/data.md).

Math responses always end with one final line `#### <answer>` so a GSM8K-style extractor finds the
answer; a `\\boxed{}` in the solution body is kept for math-verify. Multiple-choice (MMLU) prompts are the
question with its lettered options (:func:`format_choice_question`, the one home of that text: the evaluation
harness asks the same), and responses are rationales ending with the line `The answer is (X).`
"""

from __future__ import annotations

import re
import string
from typing import Any

from elfreg.data.sources import BadRowError

MATH_PROMPT = "Question: {question}\nAnswer:"
CODE_PROMPT = "Question: {question}\nAnswer:"
CHOICE_PROMPT = "Question: {question}\nAnswer:"
PROMPT_TEMPLATES = {"math": MATH_PROMPT, "code": CODE_PROMPT, "choice": CHOICE_PROMPT}
LETTERS = "ABCD"
CHOICE_INSTRUCTION = 'Think step by step, then finish with "The answer is (X)" where X is A, B, C or D.'

# Every elfreg model saved before templates were stored with the model was trained on this template (MATH_PROMPT
# and CODE_PROMPT have always been equal), so it is the exact fallback for old model folders (docs/sampling.md).
LEGACY_PROMPT_TEMPLATE = MATH_PROMPT

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


def format_choice_question(question: str, choices: list[str]) -> str:
    """A multiple-choice question as the model is asked it: the question, one ``(A) ...`` line per option, and the
    instruction to end with "The answer is (X)" (training rows and the MMLU benchmark share this text)."""
    if len(choices) != len(LETTERS):
        raise ValueError(f"a multiple-choice question needs {len(LETTERS)} options, got {len(choices)}")
    opts = "\n".join(f"({letter}) {str(text).strip()}" for letter, text in zip(LETTERS, choices))
    return f"{question.strip()}\n{opts}\n{CHOICE_INSTRUCTION}"


def choice_letter(answer: Any) -> str | None:
    """An option as its letter: ``"C"``, ``" c "`` or ``2`` (0-based, the Hugging Face form) -> ``"C"``; else None."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        return LETTERS[answer] if 0 <= answer < len(LETTERS) else None
    if isinstance(answer, str) and len(answer.strip()) == 1 and answer.strip().upper() in LETTERS:
        return answer.strip().upper()
    return None


def format_choice_response(rationale: str, answer: Any, where: str = "") -> str:
    """A rationale ending with the canonical line ``The answer is (X).`` (appended unless it already ends so).

    ``answer`` is the gold letter (A-D or 0-3); a rationale whose own conclusion names another option is a
    BadRowError naming ``where`` (`elfreg data mmlu-train` keeps only rationales that agree with the gold letter)."""
    from elfreg.eval.answers import extract_choice  # light: regular expressions only

    letter = choice_letter(answer)
    if letter is None:
        raise BadRowError(f"{where}: multiple-choice row needs an answer A-D (or 0-3), got {answer!r}")
    said = extract_choice(rationale)
    if said is not None and said != letter:
        raise BadRowError(f"{where}: the rationale concludes ({said}) but the answer is ({letter})")
    body, end = rationale.strip(), f"The answer is ({letter})."
    return body if body.endswith(end) else (f"{body}\n{end}" if body else end)


def prompt_template(task: str) -> str:
    """The prompt template a model trained on data.task ``task`` sees: one ``{question}`` field."""
    if task not in PROMPT_TEMPLATES:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(PROMPT_TEMPLATES)}")
    return PROMPT_TEMPLATES[task]


def validate_template(template: Any, where: str = "prompt_template") -> str:
    """Return ``template`` if it is a str.format template with exactly one field, ``{question}``; else ValueError."""
    if not isinstance(template, str):
        raise ValueError(f"{where}: expected a string with one {{question}} field, got {type(template).__name__}")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ValueError(f"{where}: not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None
    if fields != ["question"]:
        raise ValueError(f"{where}: a prompt template needs exactly one field {{question}}, found {fields} "
                         f"in {template!r}")
    return template


def format_prompt(template: str, question: str) -> str:
    """The prompt a model sees: its template around the question (the one home of prompt formatting)."""
    return template.format(question=question.strip())


def apply_template(example: dict[str, Any], task: str) -> tuple[str, str]:
    """Example dict → (prompt text, response text) for task 'math', 'code' or 'choice'.

    'choice' rows hold the question with its options already formatted (``format_choice_question``; rows written
    by `elfreg data mmlu-train`), the rationale and the gold letter in ``answer``."""
    question = example["prompt"].strip()
    where = str(example.get("id", ""))
    if task == "math":
        return format_prompt(MATH_PROMPT, question), format_math_response(
            example["response"], example.get("answer"), where)
    if task == "code":
        return format_prompt(CODE_PROMPT, question), example["response"].strip()
    if task == "choice":
        return format_prompt(CHOICE_PROMPT, question), format_choice_response(
            example["response"], example.get("answer"), where)
    raise ValueError(f"unknown task {task!r}; expected one of {', '.join(PROMPT_TEMPLATES)}")
