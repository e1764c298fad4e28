"""What the synthetic tasks (arith, chain) share: the final '#### X' answer line, the worked solution above it, the
hash split."""

from __future__ import annotations

import hashlib
from typing import Protocol

from elfreg.tasks.answers import verdict
from elfreg.tasks.formats import extract_final_answer

# A response's final answer: its last '#### X' line (else 'The answer is X', else the last \boxed{X}).
extract_answer = extract_final_answer


class HasAnswer(Protocol):
    """A problem with its reference answer as text."""

    @property
    def answer(self) -> str: ...


def score(text: str, problem: HasAnswer) -> bool:
    """Exact match of the final answer with the problem's (the scorer's ``exact`` verdict on the '#### X' line)."""
    return verdict("exact", extract_final_answer, 0, text, problem.answer)["correct"]


def worked_body(text: str) -> str:
    """The shown solution: the text before the final '#### ' line, stripped."""
    return text.split("\n####", 1)[0].strip()


def hash_split(prompt: str, test_buckets: int) -> str:
    """'test' iff the sha256 of the prompt text falls in bucket 0 of ``test_buckets``, else 'train'."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % test_buckets == 0 else "train"
