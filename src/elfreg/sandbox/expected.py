"""Expected outputs: what the reference solutions answer, computed in the sandbox and cached (spec §6).

The cache is a file of binary records per benchmark data file (keyed by its sha256) and Python version under
``--cache-dir`` (default ``ELFREG_CACHE_DIR`` or ``~/.cache/elfreg/eval``, never visible inside the sandbox): per
task its id and its row as ``marshal`` data, with the inputs' marshal form and the original tests' payload already
made (a HumanEval+ scoring run reads and prepares its test sets in about a third of the CPU time it took from JSON).
It is an answer key and it sets the time limits, so nothing in it is trusted as read: every record carries an
HMAC-SHA256 under a key kept next to it (``key``, mode 0600, created by the first isolated run) that is checked
before its row is read (``marshal`` is not meant for untrusted bytes), and a record whose MAC does not verify is
dropped and recomputed, with a warning naming the file. A program can rewrite the file only where it runs with
the harness's rights, i.e. unisolated (``--isolation none`` without a uid drop); such a run therefore works on its
own file and key (``…-unisolated``) and deletes the isolated runs' key before its first program and after its
last, so whatever it could have written is recomputed by the next isolated run.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import marshal
import os
import secrets
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .codecheck import (IOTests, OutputStream, ReplaySpec, encode_calls, encode_inputs, io_inputs, marshal_inputs,
                        tail)
from .config import default_cache_root
from .sandbox import Sandbox

log = logging.getLogger(__name__)

CACHE_FORMAT = "v8"  # bump when the cached row layout changes (v4: harness-measured times, MAC per row; v5:
# digests write numbers by value, the reference's load time per test set; v6: digests write long strings as bytes;
# v7: each line is its MAC, a space, the row's JSON, the MAC over those bytes; v8: binary records, marshal rows
# with the inputs' marshal data and the original tests' calls text and tails: what computes those is part of the
# format)
_ISOLATED_KEY = "key"
# A record: the MAC (HMAC-SHA256, 32 bytes), the task id's and the row's byte counts, the id (UTF-8), the row
# (marshal). The MAC covers the file's name, the counts, the id and the row.
_MAC_SIZE = 32
_COUNTS = struct.Struct("<HQ")
_PYTHON = "py%d%d" % sys.version_info[:2]  # marshal data is only promised to read back in the same version


def revoke_isolated_key(cache_dir: str | Path | None = None) -> None:
    """Delete the isolated runs' cache key (called around an unisolated run whose programs could read it): every
    cached row it signed is recomputed by the next isolated run."""
    root = Path(cache_dir) if cache_dir else default_cache_root()
    try:
        (root / _ISOLATED_KEY).unlink()
    except FileNotFoundError:
        pass


def _load_key(path: Path) -> bytes:
    """The MAC key at ``path``, created (mode 0600, atomically) when missing; replaced (with a warning) when it is
    not a key, not ours, or readable by others: every row it signed is then recomputed."""
    try:
        st = os.lstat(path)
        if st.st_uid == os.getuid() and not st.st_mode & 0o077 and os.path.isfile(path) and not path.is_symlink():
            return bytes.fromhex(path.read_text().strip())
        log.warning("%s: not private to this user; replacing it (every row it signed is recomputed)", path)
        path.unlink()
    except FileNotFoundError:
        pass
    except ValueError:
        log.warning("%s: not a cache key; replacing it (every row it signed is recomputed)", path)
        path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    try:
        os.link(tmp, path)  # the first writer wins; a concurrent run then reads the same key
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return bytes.fromhex(path.read_text().strip())


@dataclass(frozen=True)
class OriginalTests:
    """A task's original tests as a tested program meets them: the recorded calls and the reference's answers."""

    spec: ReplaySpec
    calls: list
    outputs: list
    ref_time: float
    check_time: float
    calls_text: str  # the calls payload
    tails: list  # per call, the reference's output record after its index (identical outputs skip parsing)


class ExpectedOutputs:
    """Reference outputs and times of a benchmark, computed by running the canonical solutions in the sandbox.

    :attr:`table` maps task_id to a cached row: ``{"base": [...], "plus": [...]}`` for differential tests (per input
    ``{"v"|"sha"+"n", "t"}``; with ``base_inputs``/``plus_inputs``, the inputs' payload text, and ``base_load``/
    ``plus_load``, the reference's seconds to ``ready``), ``{"calls",
    "outputs", "ref_time", "check_time"}`` for original tests."""

    def __init__(self, benchmark, sandbox: Sandbox, cache_dir: str | Path | None = None, workers: int = 2) -> None:
        self.benchmark, self.sandbox, self.workers = benchmark, sandbox, workers
        self.root = Path(cache_dir) if cache_dir else default_cache_root()
        tag = "" if sandbox.isolation.isolated else "-unisolated"
        self.path = self.root / (f"{benchmark.name}-{benchmark.source_sha256[:16]}-expected-{CACHE_FORMAT}-{_PYTHON}"
                                 f"{tag}.bin")
        self.key_path = self.root / (_ISOLATED_KEY + tag)
        self.table: dict[str, dict] = {}
        self._prepared: dict[str, object] = {}
        self._lock = threading.Lock()

    def _mac(self, key: bytes, *parts) -> bytes:
        """A record's MAC: over the file's name (format, data file, Python) and ``parts`` (the record's counts, task id
        and row bytes as written), so checking a row needs no parse of it."""
        mac = hmac.new(key, self.path.name.encode() + b"\0", hashlib.sha256)
        for part in parts:
            mac.update(part)
        return mac.digest()

    def record(self, key: bytes, task_id: str, row: dict) -> bytes:
        """A row as a cache record: its MAC, the id's and the row's byte counts, the id, the row (``marshal``)."""
        tid, body = task_id.encode(), marshal.dumps(row, 4)
        counts = _COUNTS.pack(len(tid), len(body))
        return self._mac(key, counts, tid, body) + counts + tid + body

    def _read(self, key: bytes) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as e:
            log.warning("%s: unreadable (%s); recomputing its expected outputs", self.path, type(e).__name__)
            return
        view, at, bad = memoryview(data), 0, []
        while at < len(data):
            head = at + _MAC_SIZE + _COUNTS.size
            n_id, n_row = _COUNTS.unpack_from(data, at + _MAC_SIZE) if head <= len(data) else (0, 0)
            end = head + n_id + n_row
            if end > len(data):  # cut short (or a count was changed): what verified before it stays
                log.warning("%s: truncated at byte %d; recomputing its expected outputs from there", self.path, at)
                break
            tid, body = view[head:head + n_id], view[head + n_id:end]
            name = bytes(tid).decode("utf-8", "replace")
            row = None
            if hmac.compare_digest(view[at:at + _MAC_SIZE], self._mac(key, view[at + _MAC_SIZE:head], tid, body)):
                try:
                    row = marshal.loads(body)  # only bytes this harness signed reach marshal
                except (ValueError, EOFError, TypeError):
                    pass
            if isinstance(row, dict):
                self.table[name] = row
            else:
                bad.append(name[:40] or f"byte {at}")
            at = end
        if bad:
            log.warning("%s: %d cached row(s) fail their integrity check (e.g. %s); recomputing them", self.path,
                        len(bad), ", ".join(bad[:3]))

    def load_or_compute(self, progress: bool = True, only: set[str] | None = None) -> "ExpectedOutputs":
        """Fill :attr:`table` for ``only`` (default: every problem) from verified cache rows, computing the rest;
        newly computed rows are merged into the cache file (atomically)."""
        if not self.sandbox.isolation.isolated and not self.sandbox.isolation.uid_drop:
            revoke_isolated_key(self.root)  # this run's programs could read it
        key = _load_key(self.key_path)
        self._read(key)
        todo = [p for p in self.benchmark.problems if p.task_id not in self.table
                and (only is None or p.task_id in only)]
        if not todo:
            return self
        from tqdm import tqdm

        with ThreadPoolExecutor(self.workers) as ex:
            rows = list(tqdm(ex.map(self._compute, todo), total=len(todo), disable=not progress,
                             desc=f"expected outputs {self.benchmark.name}"))
        for p, row in zip(todo, rows):
            self.table[p.task_id] = row
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        with open(tmp, "wb") as f:
            for tid, row in self.table.items():
                f.write(self.record(key, tid, row))
        os.replace(tmp, self.path)  # atomic: a crash never leaves a half cache
        return self

    def reference_seconds(self, task_id: str) -> float:
        """The reference solution's seconds on ``task_id``'s tests (every input and load, or its original tests),
        from :attr:`table`; 0 for a task not there."""
        row = self.table.get(task_id) or {}
        io = sum(e.get("t", 0.0) for s in ("base", "plus") for e in row.get(s) or []) + \
            row.get("base_load", 0.0) + row.get("plus_load", 0.0)
        return io + row.get("ref_time", 0.0)

    # ------------------------------------------------------------------ what a tested program is checked against
    def original(self, p) -> OriginalTests:
        """``p``'s original tests, prepared once per task."""
        with self._lock:
            got = self._prepared.get(p.task_id)
        if got is None:
            row = self.table[p.task_id]
            got = OriginalTests(ReplaySpec.from_problem(p), row["calls"], row["outputs"], row["ref_time"],
                                row.get("check_time", 0.0), row["calls_text"], row["tails"])
            with self._lock:
                self._prepared[p.task_id] = got
        return got

    def io(self, p, splits: tuple[str, ...]) -> list[IOTests]:
        """``p``'s differential test sets ``splits`` (``base``, ``plus``), prepared once per task."""
        key = (p.task_id, splits)
        with self._lock:
            got = self._prepared.get(key)
        if got is None:
            row = self.table[p.task_id]
            inputs = {"base": p.base_inputs or [], "plus": p.plus_inputs or []}
            got = [IOTests.build(s, inputs[s], row[f"{s}_inputs"], row[s], p.entry_point or "", row[f"{s}_load"],
                                 row[f"{s}_marshal"]) for s in splits]
            with self._lock:
                self._prepared[key] = got
        return got

    # ------------------------------------------------------------------ computing
    def _compute(self, p) -> dict:
        row: dict = {}
        if p.tests is not None:
            row.update(self._record(p))
        for split, inputs in (("base", p.base_inputs), ("plus", p.plus_inputs)):
            if inputs is not None:
                # the inputs' payload text and marshal data are kept too: preparing them again for every run, or
                # every scoring run, costs seconds
                row[f"{split}_inputs"] = text = encode_inputs(inputs)
                row[f"{split}_marshal"] = data = marshal_inputs(text)
                row[split], row[f"{split}_load"] = \
                    self._reference_outputs(p, text, data, len(inputs)) if inputs else ([], 0.0)
        return row

    def _record(self, p) -> dict:
        """Record the original tests' calls on the reference, answer them as a tested program would, and
        check that the replay of those outputs passes (so identical outputs may pass without a replay)."""
        spec = ReplaySpec.from_problem(p)
        fail = f"{self.benchmark.name} {p.task_id}: reference solution"
        res = self.sandbox.run(dict(spec.payload("record"), program=p.reference), deadline_s=300.0)
        if not res.stream.passed():
            raise RuntimeError(f"{fail} fails its tests: {res.stream.violation or res.stream.failure()} "
                               f"(timed out: {res.timed_out})")
        calls = [[r["f"], r["a"], r["k"]] for r in res.records if "f" in r]
        stream = OutputStream([None] * len(calls))
        out = self.sandbox.run(spec.calls_payload(p.reference, encode_calls(calls)), deadline_s=300.0, stream=stream)
        if len(stream.got) != len(calls) or stream.stopped or stream.violation:
            raise RuntimeError(f"{fail} fails when its recorded calls are replayed: "
                               f"{stream.violation or stream.stopped or stream.failure()}")
        t0 = time.monotonic()
        chk = self.sandbox.run(dict(spec.payload("check"), program="", calls=calls, outputs=stream.got),
                               deadline_s=300.0)
        if not (chk.stream.passed() and chk.stream.last.get("calls") == len(calls)):
            raise RuntimeError(f"{fail}: the replayed tests fail on its own outputs: {chk.stream.failure()}")
        return {"calls": calls, "outputs": stream.got, "ref_time": out.wall_s, "check_time": time.monotonic() - t0,
                "calls_text": encode_calls(calls), "tails": [tail(o) for o in stream.got]}

    def _reference_outputs(self, p, inputs_text: str, inputs_marshal: bytes | None, n: int) -> tuple[list, float]:
        """The reference's output per input with its time on the harness's clock (from the previous record), and its
        load time (from the run's start to ``ready``)."""
        stream = _ReferenceStream(n)
        payload = {"mode": "io", "program": p.reference, "entry_point": p.entry_point,
                   **io_inputs([(inputs_text[1:-1], inputs_marshal)])}
        self.sandbox.run(payload, deadline_s=1800.0, stream=stream)
        if len(stream.got) != n or stream.violation or stream.stopped:
            raise RuntimeError(f"{self.benchmark.name} {p.task_id}: reference solution failed on an input "
                               f"({len(stream.got)}/{n} ran; "
                               f"{stream.violation or stream.stopped or stream.failure()})")
        return [dict(g, t=t) for g, t in zip(stream.got, stream.times)], stream.load


class _ReferenceStream(OutputStream):
    """The reference's outputs with the time of each (harness clock, from the previous record)."""

    def __init__(self, n: int) -> None:
        super().__init__([None] * n, [300.0] * n)
        self.times: list[float] = []
        self.load = 0.0
        self._last: float | None = None

    def accept(self, rec: dict, now: float) -> bool:
        if rec.get("status") == "ready":
            self._last = now
            self.load = now - (self.started if self.started is not None else now)
        return super().accept(rec, now)

    def output(self, i: int, rec: dict | None, now: float) -> bool:
        self.times.append(now - self._last)
        self._last = now
        return super().output(i, rec, now)
