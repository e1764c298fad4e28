"""Decontamination passes over example streams and their report (spec §7).

Math needs two passes (find contaminated groups, then filter), so it takes a callable that
re-opens the rows; code needs one. Memory: O(contaminated groups + benchmark index), not O(rows).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from elfreg.data.decontam_code import CodeMatcher
from elfreg.data.decontam_math import Match, MathMatcher, group_key


@dataclass
class DecontamReport:
    """What was dropped and why: counts per rule and per benchmark, plus the first dropped rows."""

    task: str
    rows_in: int = 0
    rows_kept: int = 0
    rows_dropped: int = 0
    by_reason: Counter = field(default_factory=Counter)
    by_benchmark: Counter = field(default_factory=Counter)
    groups_dropped: int = 0
    dropped: list[dict[str, Any]] = field(default_factory=list)
    max_listed: int = 1000

    def note(self, row: dict[str, Any], match: Match, reason: str | None = None) -> None:
        """Count one dropped row (reason defaults to the match's rule)."""
        reason = reason or match.reason
        self.rows_dropped += 1
        self.by_reason[reason] += 1
        self.by_benchmark[match.benchmark] += 1
        if len(self.dropped) < self.max_listed:
            self.dropped.append({"id": row.get("id"), "source": row.get("source"), "reason": reason,
                                 "benchmark": match.benchmark, "item_id": match.item_id,
                                 "score": round(match.score, 4)})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready report."""
        return {"task": self.task, "rows_in": self.rows_in, "rows_kept": self.rows_kept,
                "rows_dropped": self.rows_dropped, "by_reason": dict(sorted(self.by_reason.items())),
                "by_benchmark": dict(sorted(self.by_benchmark.items())), "groups_dropped": self.groups_dropped,
                "dropped_listed": len(self.dropped), "dropped": self.dropped}


def decontaminate_math(open_rows: Callable[[], Iterable[dict[str, Any]]], matcher: MathMatcher,
                       report: DecontamReport) -> Iterator[dict[str, Any]]:
    """Kept rows. Pass 1 marks groups with a matching row; pass 2 drops every row of a marked group."""
    bad_groups: dict[bytes, Match] = {}
    for row in open_rows():
        key = group_key(row["prompt"])
        if key not in bad_groups:
            m = matcher.match(row["prompt"])
            if m is not None:
                bad_groups[key] = m
    report.groups_dropped = len(bad_groups)
    for row in open_rows():
        report.rows_in += 1
        m = bad_groups.get(group_key(row["prompt"]))
        if m is None:
            report.rows_kept += 1
            yield row
            continue
        own = matcher.match(row["prompt"])  # name the row's own rule when it matches by itself
        report.note(row, own or m, None if own else "group")


def decontaminate_code(rows: Iterable[dict[str, Any]], matcher: CodeMatcher,
                       report: DecontamReport) -> Iterator[dict[str, Any]]:
    """Kept rows (one pass): rows matching a benchmark by prompt, n-grams or solution AST are dropped."""
    for row in rows:
        report.rows_in += 1
        m = matcher.match(row["prompt"], row.get("response", ""))
        if m is None:
            report.rows_kept += 1
            yield row
        else:
            report.note(row, m)


def write_jsonl_atomic(path: str, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows to `path` through a temporary file in the same folder, renamed at the end; returns the count."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".jsonl")
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return n


def write_json_atomic(path: str, obj: Any) -> None:
    """Write one JSON document atomically."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
