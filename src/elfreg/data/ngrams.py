"""Text normalisation, word n-grams and an inverted n-gram index for decontamination (spec §7).

Cost: indexing M benchmark texts of ~l words is O(M·l) memory; querying one training text is
O(l · p) where p is the average posting-list length (small for 8-grams), so a pass over N training
rows is O(N·l·p) instead of the O(N·M·l) of pairwise comparison.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric words after NFKC normalisation (punctuation, LaTeX symbols and spacing dropped)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def normalize(text: str) -> str:
    """Canonical form for exact matching: words joined by single spaces."""
    return " ".join(words(text))


def mask_numbers(text: str) -> str:
    """Replace every number (with , or . separators) by 0, so renamed-number variants coincide."""
    return _NUMBER.sub("0", unicodedata.normalize("NFKC", text))


def ngram_set(tokens: list[str], n: int) -> frozenset[str]:
    """Set of word n-grams; a text shorter than n words gives one gram (the whole text), empty gives none."""
    if not tokens:
        return frozenset()
    if len(tokens) < n:
        return frozenset([" ".join(tokens)])
    return frozenset(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b| (0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


@dataclass(frozen=True)
class NgramHit:
    """Best overlap of a query with one indexed document."""

    doc: int
    jaccard: float
    containment: float  # share of the indexed document's grams found in the query


class NgramIndex:
    """Inverted index gram → documents; finds the indexed document with the highest Jaccard overlap."""

    def __init__(self) -> None:
        self._postings: dict[str, list[int]] = defaultdict(list)
        self._sizes: list[int] = []

    def add(self, grams: frozenset[str]) -> int:
        """Index one document's gram set; returns its document number."""
        doc = len(self._sizes)
        self._sizes.append(len(grams))
        for g in grams:
            self._postings[g].append(doc)
        return doc

    def __len__(self) -> int:
        return len(self._sizes)

    def hits(self, grams: frozenset[str]) -> list[NgramHit]:
        """Every indexed document sharing at least one gram with `grams`, in document order."""
        shared: dict[int, int] = defaultdict(int)
        for g in grams:
            for doc in self._postings.get(g, ()):
                shared[doc] += 1
        return [NgramHit(doc, s / (len(grams) + self._sizes[doc] - s), s / self._sizes[doc])
                for doc, s in sorted(shared.items())]
