"""Code decontamination (spec §7): normalised-prompt match, word 8-gram Jaccard, exact solution AST match.

AST rule: the code of a training response (```python blocks, else the whole text) is parsed,
docstrings are removed, and `ast.dump` (no line numbers) is hashed for the whole module and for
every function; any hash equal to one of a benchmark reference solution is a match. Formatting,
comments, quoting style and redundant parentheses therefore do not hide a copy; renamed
identifiers do (exact match, as in the paper).
"""

from __future__ import annotations

import ast
import hashlib
import re
import warnings
from dataclasses import dataclass
from typing import Sequence

from elfreg.data.benchmarks import BenchItem
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

    def __post_init__(self) -> None:
        if self.ngram < 1:
            raise ValueError(f"CodeDecontamConfig.ngram must be >= 1, got {self.ngram}")
        if not 0.0 < self.jaccard_threshold <= 1.0:
            raise ValueError(f"CodeDecontamConfig.jaccard_threshold must be in (0, 1], got {self.jaccard_threshold}")
        if self.containment_threshold is not None and not 0.0 < self.containment_threshold <= 1.0:
            raise ValueError(
                f"CodeDecontamConfig.containment_threshold must be in (0, 1] or None, got {self.containment_threshold}")


def extract_code(text: str) -> str:
    """Python code of a response: the ```python fenced blocks joined, else the text itself."""
    blocks = _FENCE.findall(text)
    return "\n".join(blocks) if blocks else text


class _StripDocstrings(ast.NodeTransformer):
    def _strip(self, node: ast.AST) -> ast.AST:
        self.generic_visit(node)
        body = getattr(node, "body", None)
        if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
        return node

    visit_Module = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _strip


def ast_hashes(code: str) -> set[bytes]:
    """Digests of the docstring-free AST dump of the module and of each function in it; empty if unparsable."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in benchmark strings are not our concern
            tree = ast.parse(code.replace("\r\n", "\n"))
    except (SyntaxError, ValueError, RecursionError):
        return set()
    tree = _StripDocstrings().visit(tree)
    out = set()
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in nodes:
        if isinstance(node, ast.Module) and not node.body:
            continue
        out.add(hashlib.blake2b(ast.dump(node).encode(), digest_size=12).digest())
    return out


class CodeMatcher:
    """Index of benchmark prompts and solutions; match() says whether a training row is contaminated."""

    def __init__(self, items: Sequence[BenchItem], cfg: CodeDecontamConfig = CodeDecontamConfig()) -> None:
        self.cfg, self.items = cfg, list(items)
        self._prompt: dict[str, int] = {}
        self._ast: dict[bytes, int] = {}
        self._index = NgramIndex()
        for i, item in enumerate(self.items):
            self._prompt.setdefault(normalize(item.prompt), i)
            self._index.add(ngram_set(words(item.prompt), cfg.ngram))
            if cfg.use_ast and item.solution:
                for h in ast_hashes(item.solution):
                    self._ast.setdefault(h, i)

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
            for h in sorted(ast_hashes(extract_code(response))):
                if h in self._ast:
                    return self._match("ast", self._ast[h])
        return None
