"""Answer extractors the adaptive exit rule compares between checks (spec §11: "exit by answer stability").

An extractor maps a decoded response text to its answer, or None when the text holds none (None never counts
as settled). ``text`` is the whole response (stripped); the others are the scorers' own extractors, so the rule
watches the same answer the benchmark scores.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from elfreg.sampling.exit import AnswerFn

Extractor = Callable[[str], "str | None"]

EXTRACTORS = ("text", "gsm8k", "math", "choice", "final-line")

# Which extractor a task or benchmark name implies (elfreg generate --task, eval run --benchmark, lm-eval's task);
# a name not listed here uses its benchmark kind (answer_for), else the whole text.
TASK_EXTRACTORS: dict[str, str] = {
    "gsm8k": "gsm8k", "math": "math", "math500": "math", "mmlu": "choice", "choice": "choice",
    "demo-arith": "final-line", "demo-chain": "final-line",
}


def whole_text(text: str) -> str | None:
    """The whole response, stripped; None when it is empty."""
    s = text.strip()
    return s or None


def extract_final_number(text: str) -> str | None:
    """GSM8K-style answer by the evaluation harness's own extractor (elfreg.eval.answers), as a canonical decimal
    ('1,234.50' -> '1234.5'), so that equal numbers agree as strings."""
    from elfreg.eval.answers import extract_gsm8k

    found = extract_gsm8k(text)
    if found is None:
        return None
    try:
        text = format(Decimal(found).normalize(), "f")
    except InvalidOperation:
        return found
    return "0" if text == "-0" else text


def _last_boxed(text: str) -> str | None:
    from elfreg.data.templates import last_boxed

    return last_boxed(text)


def _choice(text: str) -> str | None:
    from elfreg.eval.answers import extract_choice

    return extract_choice(text)


def _final_line(text: str) -> str | None:
    from elfreg.data.templates import extract_final_answer

    return extract_final_answer(text)


_BY_NAME: dict[str, Extractor] = {"text": whole_text, "gsm8k": extract_final_number, "math": _last_boxed,
                                  "choice": _choice, "final-line": _final_line}


def extractor(name: str) -> Extractor:
    """The extractor called ``name`` (one of EXTRACTORS); ValueError naming ``extract`` otherwise."""
    if name not in _BY_NAME:
        raise ValueError(f"extract: unknown answer extractor {name!r}; choose one of {', '.join(EXTRACTORS)}")
    return _BY_NAME[name]


def answer_for(task: str | None, kind: str | None = None) -> str:
    """The extractor a task / benchmark name implies, else its benchmark kind's (gsm8k, math, choice), else text.

    Code tasks and tasks without an extractor use the whole response text (issue #22: "the whole response text for
    tasks without one").
    """
    if task is not None and task.lower() in TASK_EXTRACTORS:
        return TASK_EXTRACTORS[task.lower()]
    if kind is not None and kind in TASK_EXTRACTORS:
        return TASK_EXTRACTORS[kind]
    return "text"


def text_answers(tokenizer, prompt_mask, extract: Extractor,
                 finish: Callable[[int, list[int]], str] | None = None) -> AnswerFn:
    """The adaptive rule's answer function on decoded token ids: each row's response up to its first EOS, as text
    (special tokens skipped) or as ``finish(batch row, response ids)`` makes it (e.g. lm-eval's token cap and stop
    strings), then ``extract``. prompt_mask (B, L) is the batch's, indexed by the rows the rule asks about.
    """
    from elfreg.sampling.decode import detokenize, response_token_ids

    mask = prompt_mask.cpu()
    eos = int(tokenizer.eos_token_id)

    def answer_of(ids, rows):
        responses = response_token_ids(ids.cpu(), mask[list(rows)], eos)
        if finish is None:
            texts = detokenize(tokenizer, responses)
        else:
            texts = [finish(r, resp) for r, resp in zip(rows, responses)]
        return [extract(t) for t in texts]
    return answer_of
