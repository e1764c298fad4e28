"""One run's results, read from the pipe its program writes to: records fed to a :class:`RecordStream` as they
come, under the run's deadline, its size limit and the stream's own deadlines (all on the harness's clock)."""

from __future__ import annotations

import fcntl
import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .records import MAX_RECORD_BYTES, RecordStream


# The harness's pause between looks at a running program's pipe (:func:`collect`): at most this much later it reads
# the closing record of a run (0.25 ms per run on average), against a wake-up per record without it.
GATHER_S = 0.0005


@dataclass
class RunResult:
    """Everything the harness learned from one sandboxed run."""

    stream: RecordStream  # the checked records, their arrival times, and a protocol violation if any
    timed_out: bool = False
    overflow: bool = False
    returncode: int | None = None
    wall_s: float = 0.0
    stderr: str = ""
    killed: str = ""  # why the sandbox killed the program, when it did (its memory): the run fails with this

    @property
    def records(self) -> list[dict]:
        return self.stream.records


def collect(r_fd: int, t0: float, deadline_s: float, stream: RecordStream, max_result_bytes: int,
            release: Callable[[int], None]) -> RunResult:
    """Feed result lines to ``stream`` until it stops, EOF, overflow (past ``max_result_bytes``) or a deadline: the
    run's ``deadline_s`` or the stream's own (:meth:`RecordStream.due`), both on the harness's clock; then close the
    pipe with ``release`` (the sandbox's, which forgets the descriptor first).

    A deadline is judged at a moment ``looked`` and only after everything in the pipe then has been read and
    fed: a harness that looks late (busy with another sample's comparison, which holds the GIL) may accept a
    late record, but never times out one written in time; the pipe holds a whole record (where the kernel
    lets it grow, :func:`result_pipe`), so a program never waits for a busy harness either."""
    res = RunResult(stream)
    stream.started = t0

    def next_due() -> float:
        due = stream.due()
        return t0 + deadline_s if due is None else min(t0 + deadline_s, due)

    try:
        os.set_blocking(r_fd, False)
        capacity = _pipe_capacity(r_fd)
        buf, total = bytearray(), 0  # the record being written (no newline yet)
        while True:
            select.select([r_fd], [], [], max(0.0, next_due() - time.monotonic()))
            looked = time.monotonic()
            chunks, eof = _drain(r_fd, capacity)  # at least what the pipe held at `looked`
            data = b"".join(chunks)
            total += len(data)
            if total > max_result_bytes:
                res.overflow = True
                stream.violate(f"the program wrote more than {max_result_bytes:,} bytes of "
                               "results")
                break
            if b"\n" in data:  # a record's bytes are copied once more when it completes: linear in all
                now = time.monotonic()
                lines = (bytes(buf) + data).split(b"\n")
                buf = bytearray(lines.pop())
                stop = any(stream.feed(line, now) for line in lines)
                if stream.feed_s is not None:  # a profiled run: the harness's own time on the records
                    stream.feed_s += time.monotonic() - now
                if stop:
                    break
            else:
                buf += data  # a long record arrives in many small pieces: no copy of what came before
            if len(buf) > MAX_RECORD_BYTES:
                stream.violate(f"result record {len(stream.records) + 1} is malformed: it is longer than "
                               f"{MAX_RECORD_BYTES:,} bytes")
                break
            if eof:
                break
            if looked >= next_due():  # also when bytes keep coming but no record completes
                res.timed_out = True
                break
            # Let a few records gather before looking again: a program of fast calls writes a record every few
            # microseconds, and a wake-up per record (select, reads, the split) was most of the harness's CPU.
            # A record read later only starts the next call's clock later (more lenient, never stricter).
            time.sleep(min(GATHER_S, max(0.0, next_due() - time.monotonic())))
    finally:
        release(r_fd)
    return res


def result_pipe() -> tuple[int, int]:
    """A pipe for result records, grown to hold a whole record (``MAX_RECORD_BYTES``) where the kernel allows it
    (``CAP_SYS_RESOURCE``; else up to ``/proc/sys/fs/pipe-max-size``, usually 1 MiB), so a program that wrote its
    record in time never waits on a harness that reads late."""
    r_fd, w_fd = os.pipe()
    for size in (MAX_RECORD_BYTES, _PIPE_MAX_SIZE):
        try:
            fcntl.fcntl(r_fd, fcntl.F_SETPIPE_SZ, size)
            break
        except OSError:
            continue
    return r_fd, w_fd


def _read_pipe_max() -> int:
    try:
        return int(Path("/proc/sys/fs/pipe-max-size").read_text())
    except (OSError, ValueError):
        return 1 << 16


_PIPE_MAX_SIZE = _read_pipe_max()


def _pipe_capacity(fd: int) -> int:
    try:
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except OSError:
        return 1 << 16


def _drain(fd: int, at_least: int) -> tuple[list[bytes], bool]:
    """Read a non-blocking pipe until it is empty or ``at_least`` bytes came (all it held when called);
    ``(chunks, eof)``."""
    chunks, n = [], 0
    while n < at_least:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return chunks, False
        if not chunk:
            return chunks, True
        chunks.append(chunk)
        n += len(chunk)
    return chunks, False
