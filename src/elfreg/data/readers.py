"""Streaming readers: JSONL(.gz), Parquet (by row group) and Hugging Face datasets (spec §7).

Every reader yields `(raw_index, where, record_or_error)` so callers can resume at a raw index and
name the file and line of a malformed row.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

from elfreg.data.sources import BadRowError, SourceSpec

RawItem = tuple[int, str, "dict[str, Any] | BadRowError"]


@dataclass
class ReadStats:
    """Counters for one pass over a source: rows read, filtered out, malformed (skipped)."""

    rows_read: int = 0
    rows_kept: int = 0
    rows_filtered: int = 0
    bad_rows: int = 0
    bad_examples: list[str] = field(default_factory=list)  # first few messages, for the report

    def note_bad(self, message: str, keep: int = 20) -> None:
        """Count one skipped malformed row, remembering the first `keep` messages."""
        self.bad_rows += 1
        if len(self.bad_examples) < keep:
            self.bad_examples.append(message)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for state_dict / JSON reports)."""
        return dict(rows_read=self.rows_read, rows_kept=self.rows_kept, rows_filtered=self.rows_filtered,
                    bad_rows=self.bad_rows, bad_examples=list(self.bad_examples))


def resolve_files(path: str, fmt: str) -> list[str]:
    """A file, a glob, or a directory → sorted list of data files; error if none."""
    if os.path.isdir(path):
        exts = {"jsonl": (".jsonl", ".jsonl.gz"), "parquet": (".parquet",)}.get(
            fmt, (".jsonl", ".jsonl.gz", ".parquet"))
        files = sorted(os.path.join(root, f) for root, _, names in os.walk(path) for f in names if f.endswith(exts))
    elif any(ch in path for ch in "*?["):
        files = sorted(glob.glob(path))
    else:
        if not os.path.exists(path):
            raise FileNotFoundError(f"data file not found: {path}")
        files = [path]
    if not files:
        raise FileNotFoundError(f"no data files match {path!r} (format {fmt})")
    return files


def file_format(path: str) -> str:
    """'jsonl' or 'parquet' from a file name."""
    if path.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")):
        return "jsonl"
    if path.endswith(".parquet"):
        return "parquet"
    raise ValueError(f"cannot tell the format of {path!r}; set SourceSpec.format")


def _open_text(path: str) -> io.TextIOBase:
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_jsonl(files: list[str], start: int = 0) -> Iterator[RawItem]:
    """Records of JSONL files in order; blank lines are not rows. Rows before `start` are skipped unparsed."""
    index = 0
    for path in files:
        with _open_text(path) as fh:
            for line_no, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                if index >= start:
                    where = f"{path}:{line_no}"
                    try:
                        record: Any = json.loads(line)
                    except json.JSONDecodeError as exc:
                        yield index, where, BadRowError(f"{where}: bad JSON ({exc.msg} at column {exc.colno})")
                    else:
                        yield index, where, record
                index += 1


def iter_parquet(files: list[str], start: int = 0) -> Iterator[RawItem]:
    """Records of Parquet files, one row group in memory at a time; whole row groups before `start` are skipped."""
    import pyarrow.parquet as pq

    index = 0
    for path in files:
        pf = pq.ParquetFile(path)
        row_in_file = 0
        for rg in range(pf.num_row_groups):
            n = pf.metadata.row_group(rg).num_rows
            if index + n <= start:  # skip without reading
                index += n
                row_in_file += n
                continue
            for record in pf.read_row_group(rg).to_pylist():
                if index >= start:
                    yield index, f"{path}:row {row_in_file}", record
                index += 1
                row_in_file += 1


def iter_hf(spec: SourceSpec, start: int = 0) -> Iterator[RawItem]:
    """Records of a Hugging Face dataset: hub id / local data dir streamed, or a save_to_disk folder."""
    import datasets

    if spec.format == "disk":
        ds: Any = datasets.load_from_disk(spec.path)
        if isinstance(ds, datasets.DatasetDict):
            if spec.split not in ds:
                raise ValueError(f"{spec.path}: no split {spec.split!r}; has {sorted(ds)}")
            ds = ds[spec.split]
        name = spec.path
        ds = ds.to_iterable_dataset()
    else:
        name = spec.hub_id if spec.hub_id is not None else spec.path
        ds = datasets.load_dataset(name, spec.hub_config, split=spec.split, streaming=True)
    if start:
        ds = ds.skip(start)
    for offset, record in enumerate(ds):
        index = start + offset
        yield index, f"{name}[{spec.split}] row {index}", record


def iter_raw(spec: SourceSpec, start: int = 0) -> Iterator[RawItem]:
    """All raw records of a source from raw index `start`."""
    if spec.hub_id is not None or spec.format in ("hf", "disk"):
        return iter_hf(spec, start)
    assert spec.path is not None
    files = resolve_files(spec.path, spec.format)
    fmts = {spec.format} if spec.format != "auto" else {file_format(f) for f in files}
    if len(fmts) != 1:
        raise ValueError(f"{spec.path}: mixed file formats {sorted(fmts)}; set SourceSpec.format")
    fmt = fmts.pop()
    return iter_jsonl(files, start) if fmt == "jsonl" else iter_parquet(files, start)


def iter_source(spec: SourceSpec, start: int = 0,
                stats: ReadStats | None = None) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(raw_index, example or None) for every raw row; None = filtered out or skipped as malformed.

    Examples are {"prompt", "response", "answer", "id", "source"}. With on_bad_row='error' a
    malformed row raises BadRowError naming its file and line.
    """
    stats = stats if stats is not None else ReadStats()
    for index, where, record in iter_raw(spec, start):
        stats.rows_read += 1
        try:
            if isinstance(record, BadRowError):
                raise record
            example = spec.map_row(record, where)
        except BadRowError as exc:
            if spec.on_bad_row == "error":
                raise
            stats.note_bad(str(exc))
            yield index, None
            continue
        if example is None:
            stats.rows_filtered += 1
        else:
            stats.rows_kept += 1
        yield index, example


def iter_examples(spec: SourceSpec, stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """Kept examples of one source, in file order (no shuffling)."""
    for _, example in iter_source(spec, 0, stats):
        if example is not None:
            yield example
