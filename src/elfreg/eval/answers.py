"""Answer extraction for GSM8K (final number) and MMLU (option letter) (spec §6)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_NUM = r"-?\$?\s*\d[\d,]*(?:\.\d+)?|-?\$?\s*\.\d+"
# Never start inside a whitespace run (the run's first character starts the same match, and is always tried
# first): one scan per run, linear time instead of quadratic in the run's length.
_NUM_RE = re.compile(rf"(?!(?<=\s)\s)(?:{_NUM})")


def _last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (balanced braces), or None."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return None


def normalize_number(s: str) -> str | None:
    """``"$1,234.50."`` -> ``"1234.50"``; None if no number is left."""
    s = s.strip().replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    m = re.search(r"-?\d+(?:\.\d+)?|-?\.\d+", s)
    return m.group(0) if m else None


def extract_gsm8k(text: str) -> str | None:
    """Final number: after ``####``, else in the last ``\\boxed{}``, else after "The answer is", else the last number."""
    if "####" in text:
        tail = text.split("####")[-1]
        m = _NUM_RE.search(tail)
        if m:
            return normalize_number(m.group(0))
    boxed = _last_boxed(text)
    if boxed is not None:
        m = _NUM_RE.search(boxed)
        if m:
            return normalize_number(m.group(0))
    m = list(re.finditer(r"[Tt]he (?:final )?answer is[:\s]*", text))
    if m:
        n = _NUM_RE.search(text, m[-1].end())
        if n:
            return normalize_number(n.group(0))
    nums = _NUM_RE.findall(text)
    return normalize_number(nums[-1]) if nums else None


def numbers_equal(pred: str | None, gold: str) -> bool:
    """Numeric comparison (``"18.00" == "18"``); False when either side is not a number."""
    if pred is None:
        return False
    try:
        return Decimal(pred) == Decimal(gold.replace(",", ""))
    except InvalidOperation:
        return False


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
