"""How tasks are asked and answered in text: prompt templates, training-row formats, benchmark questions, choice
formats and final-answer lines (spec §2, §6, §7; formats in docs/data.md and docs/evaluation.md).

Math responses always end with one final line `#### <answer>` so a GSM8K-style extractor finds the
answer; a `\\boxed{}` in the solution body is kept for math-verify. Multiple-choice (MMLU) prompts are the
question with its lettered options (:func:`format_choice_question`, the one home of that text: training rows and
the MMLU benchmark ask the same), and responses are rationales ending with the line `The answer is (X).`
The benchmark questions (``*_prompt``) are the bodies only: the model's own template (saved with the model) is put
around each at generation, so a model sees at evaluation exactly the prompt form it was trained on.
"""

from __future__ import annotations

import re
import string
from typing import Any, Protocol

MATH_PROMPT = "Question: {question}\nAnswer:"
CODE_PROMPT = "Question: {question}\nAnswer:"
CHOICE_PROMPT = "Question: {question}\nAnswer:"
PROMPT_TEMPLATES = {"math": MATH_PROMPT, "code": CODE_PROMPT, "choice": CHOICE_PROMPT}
LETTERS = "ABCD"
CHOICE_INSTRUCTION = 'Think step by step, then finish with "The answer is (X)" where X is A, B, C or D.'

# Every elfreg model saved before templates were stored with the model was trained on this template (MATH_PROMPT
# and CODE_PROMPT have always been equal), so it is the exact fallback for old model folders (docs/sampling.md).
LEGACY_PROMPT_TEMPLATE = MATH_PROMPT


class BadRowError(ValueError):
    """A malformed input row; the message names the file (or dataset) and line/row."""


_CALC = re.compile(r"<<[^<>]*>>")  # GSM8K calculator annotations: "<<48/2=24>>"
_HASH_LINE = re.compile(r"^\s*####\s*(.+?)\s*$", re.MULTILINE)
_ANSWER_IS_LINE = re.compile(r"^\s*The answer is:?\s*(.+?)\s*\.?\s*$", re.MULTILINE | re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{")
_BRACE = re.compile(r"[{}]")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` of ``text`` (balanced braces, stripped), or None.

    A box is the command ``\\boxed`` with a braced argument, whitespace allowed before the brace (``\\boxed {5}``,
    as LaTeX reads it); a ``\\boxed`` without one (a truncated answer, ``\\boxedfoo``) is not a box. An argument
    whose braces never close (a truncated answer) gives None."""
    start = None
    for m in _BOXED.finditer(text):
        start = m.end()
    if start is None:
        return None
    depth = 1
    for brace in _BRACE.finditer(text, start):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[start:brace.start()].strip()
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


# MMLU option letters (spec §6: "option letter extracted from a rationale"). Phrases are matched case-blind, the
# letter itself is a capital A-D (a lower-case one only inside parentheses), so "the answer is a matter of ..." never
# reads as option A. A letter must not run on into a word ("Answer: Because" is not B).
_LETTER = r"(?:\(([A-Da-d])\)|\b([A-D])\b(?![\w'-]))"
# Whitespace, stars and colons are taken possessively (``*+``): what follows each of them never starts with what
# it skips, so giving some back never finds another match, and the runs cost linear time, not a power of their
# length per extra quantifier.
_CHOICE_CONCLUSIONS = re.compile("|".join([
    # "The answer is (C)", "the correct answer is: C", "Final answer: **B**", "answer would be option D"
    r"(?i:\banswer)\s*+(?i:is|would be|should be|must be|:|=)?\s*+[:*]*+\s*+(?i:option|choice)?\s*+\**+\s*+" + _LETTER,
    # "The correct option is B", "the best choice is (A)", "the right option: D"
    r"(?i:\b(?:correct|right|best|only)\s++(?:option|choice))\s*+(?i:is|would be|:)?\s*+[:*]*+\s*+\**+" + _LETTER,
    # "Option B is correct", "(C) is the correct answer", "Choice D is right"
    r"(?:(?i:\b(?:option|choice))\s++)?" + _LETTER + r"\**+\s++(?i:is\s++(?:the\s++)?(?:correct|right|best)\b)",
    r"\\boxed\{\s*+(?:\\text\{)?\s*+" + _LETTER,  # \boxed{C}, \boxed{\text{C}}
]))
# A final line that is only an option mark: "(C)", "C", "C.", "**C**", "C) 42", "C: Paris".
_CHOICE_LINE = re.compile(r"^\W*(?:\(([A-Da-d])\)|([A-D])(?:[.):]|\**$))")


def extract_choice(text: str) -> str | None:
    """MMLU option letter of a rationale: the last explicit conclusion ("The answer is (C)", "Answer: C",
    "the correct option is C", "C is correct", "\\boxed{C}"), else a last line that is only an option mark
    ("(C)", "C."); None when the text commits to no option (a bare "C" inside a sentence never counts)."""
    hits = [m for m in _CHOICE_CONCLUSIONS.finditer(text)]
    if hits:
        last = hits[-1]
        return next(g for g in last.groups() if g).upper()
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if lines:
        m = _CHOICE_LINE.match(lines[-1])
        if m:
            return (m.group(1) or m.group(2)).upper()
    return None


def format_choice_response(rationale: str, answer: Any, where: str = "") -> str:
    """A rationale ending with the canonical line ``The answer is (X).`` (appended unless it already ends so).

    ``answer`` is the gold letter (A-D or 0-3); a rationale whose own conclusion names another option is a
    BadRowError naming ``where`` (`elfreg data mmlu-train` keeps only rationales that agree with the gold letter)."""
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


class Question(Protocol):
    """What a benchmark question is asked from: its text and, for multiple choice, ``extra["choices"]``."""

    question: str
    extra: dict[str, Any]


def gsm8k_prompt(p: Question) -> str:
    """GSM8K: question, then the model reasons and ends with ``#### <number>``."""
    return p.question.strip()


def math_prompt(p: Question) -> str:
    """MATH-500: the problem (responses carry ``\\boxed{}`` and ``####``)."""
    return p.question.strip()


def choice_prompt(p: Question) -> str:
    """MMLU: question and lettered options; the rationale ends with ``The answer is (X)`` (the training rows' text
    too: :func:`format_choice_question`)."""
    return format_choice_question(p.question, p.extra["choices"])


def humaneval_prompt(p: Question) -> str:
    """HumanEval(+): the function signature and docstring in a code block; reply with the whole function."""
    return ("Complete the following Python function. Reply with the complete function "
            f"in a ```python block.\n```python\n{p.question.rstrip()}\n```")


def mbpp_prompt(p: Question) -> str:
    """MBPP(+): task text and its example asserts; reply with the code in a ```python block."""
    return f"{p.question.strip()}\nReply with the complete code in a ```python block."
