"""Resumable results JSONL: one line per (prompt_index, sample_index), appended atomically, kill-tolerant."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Iterable

from elfreg.jsontext import dumps

Key = tuple[int, int]


def repair_truncated_tail(path: str | os.PathLike, redo: str = "generated again") -> bool:
    """Cut a last line that a kill left without its newline; returns True (and warns) if one was dropped.

    ``redo``: what happens to that line's sample, for the warning ("generated again", "scored again")."""
    p = Path(path)
    if not p.exists():
        return False
    data = p.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    keep = data.rfind(b"\n") + 1
    with open(p, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    warnings.warn(f"{p}: dropped a truncated last line ({len(data) - keep} bytes) left by an interrupted run; "
                  f"that sample will be {redo}", stacklevel=2)
    return True


def read_records(path: str | os.PathLike, ignore_partial_tail: bool = False) -> list[dict[str, Any]]:
    """All records of a results file; a malformed complete line is an error naming file and line."""
    p = Path(path)
    if not p.exists():
        return []
    data = p.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()          # bytes after the last newline: "" for a complete file
    if tail and not ignore_partial_tail:
        raise ValueError(f"{p}: last line has no newline (interrupted write); call repair_truncated_tail first")
    records = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            int(rec["prompt_index"]), int(rec["sample_index"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{p}:{n}: not a results record ({exc})") from None
        records.append(rec)
    return records


def record_key(rec: dict[str, Any]) -> Key:
    """(prompt_index, sample_index) of a record."""
    return int(rec["prompt_index"]), int(rec["sample_index"])


def done_keys(paths: Iterable[str | os.PathLike], ignore_partial_tail: bool = False) -> set[Key]:
    """Keys already present in any of the files."""
    return {record_key(r) for p in paths for r in read_records(p, ignore_partial_tail)}


class AppendWriter:
    """Appends records, one os.write per line on an O_APPEND fd (lines never interleave), fsync per batch."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write_batch(self, records: Iterable[dict[str, Any]]) -> None:
        """Append each record as one JSON line, then fsync."""
        for rec in records:
            line = (dumps(rec, ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8")
            written = os.write(self.fd, line)
            if written != len(line):  # a short write would leave a partial line: fail loudly
                raise OSError(f"{self.path}: short write ({written} of {len(line)} bytes)")
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> "AppendWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
