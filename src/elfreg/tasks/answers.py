"""The answer a response gives and whether it is right, one extractor and one verdict per benchmark kind (spec §6).

Extraction: the final number (GSM8K), the option letter of a rationale (MMLU), the last ``\\boxed{}`` (MATH), the final
``#### X`` line (the synthetic tasks) or the whole text. The verdict of a text sample (:func:`verdict`) is the
scorer's; the adaptive exit rule (spec §11) and the diagnostics read the same answers by extractor name
(:data:`EXTRACTORS`, ``--extract``), so the rule watches the answer the benchmark scores. Plain Python: regular
expressions, and math-verify (:mod:`elfreg.tasks.mathcheck`) for MATH.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Callable

from elfreg.tasks.formats import extract_choice, extract_final_answer, last_boxed
from elfreg.tasks.mathcheck import verify_answer

Extractor = Callable[[str], "str | None"]

_NUM = r"-?\$?\s*\d[\d,]*(?:\.\d+)?|-?\$?\s*\.\d+"
# Never start inside a whitespace run (the run's first character starts the same match, and is always tried
# first): one scan per run, linear time instead of quadratic in the run's length.
_NUM_RE = re.compile(rf"(?!(?<=\s)\s)(?:{_NUM})")


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
    boxed = last_boxed(text)
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


def is_number(gold: str) -> bool:
    """Whether a reference answer is a finite number (thousands separators allowed): GSM8K's rule compares it as a
    number; any other answer (a word, a letter, a unit) as the text of the final ``#### X`` line."""
    try:
        return Decimal(gold.strip().replace(",", "")).is_finite()
    except InvalidOperation:
        return False


def numbers_equal(pred: str | None, gold: str) -> bool:
    """Numeric comparison (``"18.00" == "18"``); False when either side is not a number."""
    if pred is None:
        return False
    try:
        return Decimal(pred) == Decimal(gold.replace(",", ""))
    except InvalidOperation:
        return False


def whole_text(text: str) -> str | None:
    """The whole response, stripped; None when it is empty."""
    s = text.strip()
    return s or None


def extract_final_number(text: str) -> str | None:
    """:func:`extract_gsm8k` as a canonical decimal ('1,234.50' -> '1234.5'), so that equal numbers agree as
    strings (the adaptive exit compares answers by equality)."""
    found = extract_gsm8k(text)
    if found is None:
        return None
    try:
        text = format(Decimal(found).normalize(), "f")
    except InvalidOperation:
        return found
    return "0" if text == "-0" else text


# The extractors by name (``--extract``, SamplerConfig.extract, the task registry): what a response answers.
_BY_NAME: dict[str, Extractor] = {"text": whole_text, "gsm8k": extract_final_number, "math": last_boxed,
                                  "choice": extract_choice, "final-line": extract_final_answer}
EXTRACTORS = tuple(_BY_NAME)


def extractor(name: str) -> Extractor:
    """The extractor called ``name`` (one of EXTRACTORS); ValueError naming ``extract`` otherwise."""
    if name not in _BY_NAME:
        raise ValueError(f"extract: unknown answer extractor {name!r}; choose one of {', '.join(EXTRACTORS)}")
    return _BY_NAME[name]


# The kinds of text benchmark (elfreg.tasks.benchmark.Benchmark.kind; "code" is judged in the sandbox) and the
# extractor whose answer each scores when the benchmark names none.
VERDICT_KINDS = ("gsm8k", "math", "choice", "exact")
_KIND_ANSWERS: dict[str, Extractor] = {"gsm8k": extract_gsm8k, "choice": extract_choice}


def verdict(kind: str, extract: Extractor | None, math_timeout_s: int, completion: str, gold: str) -> dict:
    """A text sample's verdict fields: ``correct``, and ``pred`` (the answer read) for every kind but math.

    ``gsm8k``: the final number, compared as a number (a gold that is not a number, as in a user's file of
    word answers: the final ``#### X`` line's text equals it, both stripped; every GSM8K gold is a number);
    ``choice``: the option letter; ``math``: math-verify, gold parsed first (``extract`` unused); ``exact``: the
    answer ``extract`` reads (default: the whole text, stripped) equals the gold, both stripped. ``extract``
    overrides the kind's extractor."""
    if kind == "math":
        return {"correct": verify_answer(gold, completion, math_timeout_s)}
    if kind not in VERDICT_KINDS:
        raise ValueError(f"verdict: {kind!r} is not a text benchmark kind; one of {', '.join(VERDICT_KINDS)}")
    if kind == "gsm8k" and not is_number(gold):   # a number extractor cannot read a word
        kind, extract = "exact", extract_final_answer
    if kind == "exact":
        pred = extract(completion) if extract else completion.strip()
        return {"pred": pred, "correct": pred is not None and pred.strip() == gold.strip()}
    pred = (extract or _KIND_ANSWERS[kind])(completion)
    ok = numbers_equal(pred, gold) if kind == "gsm8k" else pred == gold
    return {"pred": pred, "correct": bool(ok)}
