"""Answer extraction for GSM8K (final number) and MMLU (option letter) (spec §6)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_NUM = r"-?\$?\s*\d[\d,]*(?:\.\d+)?|-?\$?\s*\.\d+"
_NUM_RE = re.compile(_NUM)


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


def extract_choice(text: str) -> str | None:
    """MMLU letter: "The answer is (X)" / "Answer: X", else the last standalone A-D."""
    m = list(re.finditer(r"answer is:?\s*\(?([ABCD])\)?", text, flags=re.IGNORECASE))
    if m:
        return m[-1].group(1).upper()
    m = list(re.finditer(r"Answer:\s*\(?([ABCD])\)?", text))
    if m:
        return m[-1].group(1)
    m = list(re.finditer(r"\(([ABCD])\)|\b([ABCD])\b", text))
    if m:
        return m[-1].group(1) or m[-1].group(2)
    return None
