"""What the demo tasks share: the final '#### X' answer line, the worked solution above it, the hash split."""

from __future__ import annotations

import hashlib
from typing import Protocol

from elfreg.data.templates import extract_final_answer


class HasAnswer(Protocol):
    @property
    def answer(self) -> str: ...


def extract_answer(text: str) -> str | None:
    """The final answer of a response (GSM8K-style '#### X' line), or None."""
    return extract_final_answer(text)


def score(text: str, problem: HasAnswer) -> bool:
    """Exact match of the extracted final answer with the problem's answer."""
    return extract_answer(text) == problem.answer


def worked_body(text: str) -> str:
    """The shown solution: the text before the final '#### ' line, stripped."""
    return text.split("\n####", 1)[0].strip()


def hash_split(prompt: str, test_buckets: int) -> str:
    """'test' iff the sha256 of the prompt text falls in bucket 0 of ``test_buckets``, else 'train'."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % test_buckets == 0 else "train"
