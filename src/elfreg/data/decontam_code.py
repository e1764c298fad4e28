"""Code decontamination (spec §7): normalised-prompt match, word 8-gram Jaccard, exact solution AST match.

AST rule (normalisation in `elfreg.data.code_ast`): the benchmark's canonical solution body (HumanEval: the
entry point's body; MBPP/MBPP+: every top-level function of the reference code) is compared with the body of
every function in a training response's code, after removing docstrings, type annotations and the function's
own name. So a copy survives none of: formatting, comments, quoting, parentheses, another function name,
dropped type hints or docstring, surrounding imports/helpers/other functions. Parameter and local names,
constants and statement order must match exactly (an exact AST match, as in the paper). Bodies smaller than
`ast_min_nodes` AST nodes (`return len(string)`, `return x + y`) match only together with the function's
name: such one-liners are written independently all the time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from elfreg.data.benchmarks import BenchItem
from elfreg.data.code_ast import Fingerprint, fingerprints
from elfreg.data.decontam_math import Match
from elfreg.data.ngrams import NgramIndex, ngram_set, normalize, words

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CodeDecontamConfig:
    """Thresholds for code matching (docs/data.md)."""

    ngram: int = 8
    jaccard_threshold: float = 0.5
    containment_threshold: float | None = 0.8  # share of a benchmark prompt's grams inside the row; None = off
    use_ast: bool = True
    ast_min_nodes: int = 8  # smaller bodies match only with the same function name (docs/data.md)

    def __post_init__(self) -> None:
        if isinstance(self.ast_min_nodes, bool) or not isinstance(self.ast_min_nodes, int) or self.ast_min_nodes < 0:
            raise ValueError(f"CodeDecontamConfig.ast_min_nodes must be an integer >= 0, got {self.ast_min_nodes!r}")
        if self.ngram < 1:
            raise ValueError(f"CodeDecontamConfig.ngram must be >= 1, got {self.ngram}")
        if not 0.0 < self.jaccard_threshold <= 1.0:
            raise ValueError(f"CodeDecontamConfig.jaccard_threshold must be in (0, 1], got {self.jaccard_threshold}")
        if self.containment_threshold is not None and not 0.0 < self.containment_threshold <= 1.0:
            raise ValueError(
                f"CodeDecontamConfig.containment_threshold must be in (0, 1] or None, got {self.containment_threshold}")


def code_blocks(text: str) -> list[str]:
    """The ```python fenced blocks of a response, else the whole text as one block."""
    return _FENCE.findall(text) or [text]


def extract_code(text: str) -> str:
    """Python code of a response: the ```python fenced blocks joined, else the text itself."""
    return "\n".join(code_blocks(text))


def response_fingerprints(response: str) -> list[Fingerprint]:
    """Fingerprints of every function (methods included) in a training response's code.

    The fenced blocks are parsed together (a later block may use an earlier one's imports); when that fails
    (one block is a shell session or has `>>>` prompts) each block that parses on its own is used.
    """
    blocks = code_blocks(response)
    fps = fingerprints("\n".join(blocks))
    if fps or len(blocks) == 1:
        return fps
    return [fp for block in blocks for fp in fingerprints(block)]


def solution_fingerprints(item: BenchItem) -> list[Fingerprint]:
    """Fingerprints of a benchmark item's reference solution (class bodies skipped: boilerplate, not solution)."""
    return fingerprints(item.solution, only=item.entry_point or None, methods=False)


class CodeMatcher:
    """Index of benchmark prompts and solutions; match() says whether a training row is contaminated."""

    def __init__(self, items: Sequence[BenchItem], cfg: CodeDecontamConfig = CodeDecontamConfig()) -> None:
        self.cfg, self.items = cfg, list(items)
        self._prompt: dict[str, int] = {}
        self._ast: dict[bytes, int] = {}  # Fingerprint.match_key -> item
        self._index = NgramIndex()
        for i, item in enumerate(self.items):
            self._prompt.setdefault(normalize(item.prompt), i)
            self._index.add(ngram_set(words(item.prompt), cfg.ngram))
            if cfg.use_ast and item.solution:
                for fp in solution_fingerprints(item):
                    self._ast.setdefault(fp.match_key(cfg.ast_min_nodes), i)

    def _match(self, reason: str, i: int, score: float = 1.0) -> Match:
        return Match(reason, self.items[i].benchmark, self.items[i].id, score)

    def match(self, prompt: str, response: str = "") -> Match | None:
        """First rule that fires (prompt, ngram, ast), or None if the row is clean."""
        i = self._prompt.get(normalize(prompt))
        if i is not None:
            return self._match("prompt", i)
        hits = self._index.hits(ngram_set(words(prompt), self.cfg.ngram))
        best = max(hits, key=lambda h: h.jaccard, default=None)
        if best is not None and best.jaccard >= self.cfg.jaccard_threshold:
            return self._match("ngram", best.doc, best.jaccard)
        if self.cfg.containment_threshold is not None:
            most = max(hits, key=lambda h: h.containment, default=None)
            if most is not None and most.containment >= self.cfg.containment_threshold:
                return self._match("ngram_containment", most.doc, most.containment)
        if self.cfg.use_ast and response:
            for fp in response_fingerprints(response):
                i = self._ast.get(fp.match_key(self.cfg.ast_min_nodes))
                if i is not None:
                    return self._match("ast", i)
        return None
