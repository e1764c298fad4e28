"""Reading and validating a completions JSONL file (``{"task_id", "completion", "sample"}`` per line)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Completion:
    """One model output for one problem; ``sample`` is the generation seed / sample index."""

    task_id: str
    sample: int
    completion: str
    line: int


class CompletionsError(ValueError):
    """Bad completions input; the message names the file and line."""


def read_completions(path: str | Path, known_task_ids: set[str] | None = None) -> list[Completion]:
    """Parse and validate: malformed JSON, missing/mistyped fields, unknown task ids and duplicated
    (task_id, sample) pairs raise :class:`CompletionsError` naming ``path:line``."""
    out: list[Completion] = []
    seen: dict[tuple[str, int], int] = {}
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{path}:{n}"
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as e:
                raise CompletionsError(f"{where}: malformed JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise CompletionsError(f"{where}: expected a JSON object")
            tid, comp, sample = row.get("task_id"), row.get("completion"), row.get("sample", 0)
            if not isinstance(tid, str):
                raise CompletionsError(f"{where}: field 'task_id' must be a string")
            if not isinstance(comp, str):
                raise CompletionsError(f"{where}: field 'completion' must be a string")
            if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
                raise CompletionsError(f"{where}: field 'sample' must be a non-negative integer")
            if known_task_ids is not None and tid not in known_task_ids:
                raise CompletionsError(f"{where}: unknown task_id {tid!r}")
            if (tid, sample) in seen:
                raise CompletionsError(f"{where}: duplicated sample {sample} for {tid!r} "
                                       f"(first on line {seen[(tid, sample)]})")
            seen[(tid, sample)] = n
            out.append(Completion(tid, sample, comp, n))
    if not out:
        raise CompletionsError(f"{path}: no completions")
    return out
