"""Multiple-choice decontamination (spec §7) against the MMLU test set: a training question is contaminated when it
is an MMLU test question, by its text with the options or by the question alone, or by overlapping word n-grams.

Texts are normalised as in `elfreg.data.ngrams` (NFKC, lower case, runs of letters and digits). A training row
*matches* a test item by (1) ``exact``: equal normalised question + options; (2) ``question``: equal normalised
question, only for questions of >= ``min_question_words`` words (MMLU asks "Which of the following is true?" many
times with different options; those short stems say nothing alone); (3) ``ngram``: word ``ngram``-gram Jaccard >=
``jaccard_threshold`` on question + options (texts of at least ``ngram`` words).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

from elfreg.data.decontam_math import Match
from elfreg.data.ngrams import NgramIndex, ngram_set, words
from elfreg.tasks.testsets import load_benchmark


@dataclass(frozen=True)
class ChoiceItem:
    """One multiple-choice test question."""

    benchmark: str
    id: str
    question: str
    choices: tuple[str, ...]


@dataclass(frozen=True)
class ChoiceDecontamConfig:
    """Thresholds for multiple-choice matching (docs/data.md)."""

    ngram: int = 8
    jaccard_threshold: float = 0.5
    min_question_words: int = 8

    def __post_init__(self) -> None:
        if self.ngram < 1:
            raise ValueError(f"ChoiceDecontamConfig.ngram must be >= 1, got {self.ngram}")
        if not 0.0 < self.jaccard_threshold <= 1.0:
            raise ValueError(f"ChoiceDecontamConfig.jaccard_threshold must be in (0, 1], got {self.jaccard_threshold}")
        if self.min_question_words < 1:
            raise ValueError(f"ChoiceDecontamConfig.min_question_words must be >= 1, got {self.min_question_words}")


def _digest(ws: list[str]) -> bytes:
    return hashlib.blake2b(" ".join(ws).encode("utf-8"), digest_size=12).digest()


def _text_words(question: str, choices: Sequence[str]) -> list[str]:
    return words(question) + [w for c in choices for w in words(c)]


class ChoiceMatcher:
    """Index of test questions; ``match(question, choices)`` says whether a training question is contaminated."""

    def __init__(self, items: Sequence[ChoiceItem], cfg: ChoiceDecontamConfig = ChoiceDecontamConfig()) -> None:
        self.cfg, self.items = cfg, list(items)
        self._exact: dict[bytes, int] = {}
        self._question: dict[bytes, int] = {}
        self._index = NgramIndex()
        for i, item in enumerate(self.items):
            text = _text_words(item.question, item.choices)
            self._exact.setdefault(_digest(text), i)
            q = words(item.question)
            if len(q) >= cfg.min_question_words:
                self._question.setdefault(_digest(q), i)
            self._index.add(self._grams(text))

    def _grams(self, text: list[str]) -> frozenset[str]:
        return ngram_set(text, self.cfg.ngram) if len(text) >= self.cfg.ngram else frozenset()

    def _match(self, reason: str, i: int, score: float = 1.0) -> Match:
        return Match(reason, self.items[i].benchmark, self.items[i].id, score)

    def match(self, question: str, choices: Sequence[str]) -> Match | None:
        """First rule that fires (exact, question, ngram), or None if the question is clean."""
        text = _text_words(question, choices)
        i = self._exact.get(_digest(text))
        if i is not None:
            return self._match("exact", i)
        q = words(question)
        if len(q) >= self.cfg.min_question_words:
            i = self._question.get(_digest(q))
            if i is not None:
                return self._match("question", i)
        best = max(self._index.hits(self._grams(text)), key=lambda h: h.jaccard, default=None)
        if best is not None and best.jaccard >= self.cfg.jaccard_threshold:
            return self._match("ngram", best.doc, best.jaccard)
        return None


def mmlu_test_items(path: str | None = None) -> list[ChoiceItem]:
    """The MMLU test questions (the copy shipped with elfreg, or ``path`` as `elfreg eval --data` reads it)."""
    bench = load_benchmark("mmlu", path)
    return [ChoiceItem("mmlu", p.task_id, p.question, tuple(p.extra["choices"])) for p in bench.problems]
