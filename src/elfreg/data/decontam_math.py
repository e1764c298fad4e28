"""Math decontamination (spec §7): group related questions, drop every group that matches a test problem.

A *group* is all training rows whose question has the same number-masked template (case, spacing,
punctuation and the values of numbers ignored) — the many solutions of one problem and its
renamed-number variants. A row *matches* a benchmark question by (1) equal normalised text,
(2) equal template (only for templates of >= min_template_words words, so "compute 0 0" does not
swallow a whole topic), or (3) word n-gram Jaccard >= jaccard_threshold on the masked text (texts of at least
max(ngram, min_template_words) words).
One matching row removes its whole group.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

from elfreg.data.benchmarks import BenchItem
from elfreg.data.ngrams import NgramIndex, mask_numbers, ngram_set, normalize, words


@dataclass(frozen=True)
class MathDecontamConfig:
    """Thresholds for math matching (docs/data.md)."""

    ngram: int = 8
    jaccard_threshold: float = 0.5
    min_template_words: int = 8

    def __post_init__(self) -> None:
        if self.ngram < 1:
            raise ValueError(f"MathDecontamConfig.ngram must be >= 1, got {self.ngram}")
        if not 0.0 < self.jaccard_threshold <= 1.0:
            raise ValueError(f"MathDecontamConfig.jaccard_threshold must be in (0, 1], got {self.jaccard_threshold}")
        if self.min_template_words < 1:
            raise ValueError(f"MathDecontamConfig.min_template_words must be >= 1, got {self.min_template_words}")


@dataclass(frozen=True)
class Match:
    """Why a row is contaminated: rule name, benchmark item id, similarity score (1.0 for exact rules)."""

    reason: str
    benchmark: str
    item_id: str
    score: float = 1.0


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).digest()


def template_words(question: str) -> list[str]:
    """Words of the question with every number replaced by 0."""
    return words(mask_numbers(question))


def group_key(question: str) -> bytes:
    """Group id of a training question: digest of its number-masked template."""
    return _digest(" ".join(template_words(question)))


class MathMatcher:
    """Index of benchmark questions; match() says whether a training question is contaminated."""

    def __init__(self, items: Sequence[BenchItem], cfg: MathDecontamConfig = MathDecontamConfig()) -> None:
        self.cfg, self.items = cfg, list(items)
        self._exact: dict[bytes, int] = {}
        self._template: dict[bytes, int] = {}
        self._index = NgramIndex()
        for i, item in enumerate(self.items):
            self._exact.setdefault(_digest(normalize(item.prompt)), i)
            tmpl = template_words(item.prompt)
            if len(tmpl) >= cfg.min_template_words:
                self._template.setdefault(_digest(" ".join(tmpl)), i)
            # Short texts get an empty gram set: their single whole-text gram would be the template rule again.
            self._index.add(self._grams(tmpl))

    def _grams(self, tmpl: list[str]) -> frozenset[str]:
        if len(tmpl) < max(self.cfg.ngram, self.cfg.min_template_words):
            return frozenset()
        return ngram_set(tmpl, self.cfg.ngram)

    def _match(self, reason: str, i: int, score: float = 1.0) -> Match:
        return Match(reason, self.items[i].benchmark, self.items[i].id, score)

    def match(self, question: str) -> Match | None:
        """First rule that fires (exact, template, ngram), or None if the question is clean."""
        i = self._exact.get(_digest(normalize(question)))
        if i is not None:
            return self._match("exact", i)
        tmpl = template_words(question)
        if len(tmpl) >= self.cfg.min_template_words:
            i = self._template.get(_digest(" ".join(tmpl)))
            if i is not None:
                return self._match("template", i)
        best = max(self._index.hits(self._grams(tmpl)), key=lambda h: h.jaccard, default=None)
        if best is not None and best.jaccard >= self.cfg.jaccard_threshold:
            return self._match("ngram", best.doc, best.jaccard)
        return None
