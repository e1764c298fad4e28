"""Run fingerprints: the settings and inputs that made an output's results, recorded beside them (issue 28).

A command that resumes into an existing output first compares today's settings with the recorded ones and refuses a
mismatch with one line naming what differs; ``--restart`` moves the old output aside (``<name>.replaced-<UTC time>``,
nothing is deleted) and starts over. The fingerprint file also holds a random per-output key that signs every results
row (``sign_row`` / ``row_ok``), so a verdict edited by hand, or a row from another run's file, is detected and redone.
This guards against careless edits and stale files, not against someone who reads the key from the same folder.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from elfreg.atomic import atomic_write_text

log = logging.getLogger(__name__)

VERSION = 1
FOLDER_FILE = "fingerprint.json"  # the fingerprint of an output folder
CHECK_FIELD = "check"  # the row field holding its signature
_WHOLE = 8 << 20  # files up to this size are hashed whole; larger ones by size, head and tail (cheap)
_PART = 1 << 20


class RunMismatch(ValueError):
    """An existing output was made with other settings (the message is one line naming them)."""


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a regular file's bytes (inputs: prompts, benchmark files). Anything else is a ValueError naming
    it: a FIFO's bytes are gone once its reader has them (a second read waits forever), a device may never end;
    a reader that takes those hashes what it reads instead (``eval.completions.load_completions``)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{path}: not a regular file (a pipe, FIFO or device); its digest would need a second "
                         "read: save it to a file first")
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_identity(path: Path) -> str:
    """A file's sha256, or for a large one the sha256 of its size, first and last MiB (weights differ there too)."""
    size = path.stat().st_size
    if size <= _WHOLE:
        return file_digest(path)
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(_PART))
        f.seek(size - _PART)
        h.update(f.read(_PART))
    return h.hexdigest()


def model_identity(model: str | os.PathLike) -> str:
    """A cheap digest of a model folder's files (names, sizes, contents; large weight files by head and tail);
    a hub id or other non-folder value stands for itself. The model card (README.md) is left out: ``eval run``
    adds its results to it, which changes no sample."""
    p = Path(model)
    if not p.is_dir():
        return str(model)
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file() and x.relative_to(p).as_posix() != "README.md"):
        h.update(f"{f.relative_to(p).as_posix()}\0{_file_identity(f)}\n".encode())
    return h.hexdigest()


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys: {"train": {"lr": 1}} -> {"train.lr": 1}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(v: Any) -> str:
    text = v if isinstance(v, str) else json.dumps(v)
    return text if len(text) <= 40 else text[:16] + "…"


# Settings added after outputs were made, each with the value that does what elfreg did before it existed: a record
# written before the key existed was made with that value, so the output still resumes (else every new field would
# refuse every older output). A new field whose default keeps old runs as they were belongs here.
ADDED_LATER: dict[str, Any] = {
    "model.flow_map": False,  # flow-map students (elfreg distill)
    "distill.target_weights": "online",  # the flow map's two-hop targets from the EMA (an option added later)
}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) of every key whose value differs (a missing key reads as its
    :data:`ADDED_LATER` value, else as "unset")."""
    unset = "unset"

    def get(d: dict[str, Any], k: str) -> Any:
        return d.get(k, ADDED_LATER.get(k, unset))

    return [(k, get(old, k), get(new, k)) for k in sorted(set(old) | set(new)) if get(old, k) != get(new, k)]


def mismatch_message(where: str | os.PathLike, diffs: list[tuple[str, Any, Any]], flag: str = "--out") -> str:
    """One line: what the output was made with, what is asked now, and the two ways on."""
    shown = diffs[:4]
    more = f" (and {len(diffs) - 4} more)" if len(diffs) > 4 else ""
    was = ", ".join(f"{k}={_show(a)}" for k, a, _ in shown)
    now = ", ".join(f"{k}={_show(b)}" for k, _, b in shown)
    return f"{where}: was made with {was}, now {now}{more}; pass --restart to start over, or use another {flag}"


def _normalise(settings: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(settings))  # tuples -> lists, as they read back from the file


def read_fingerprint(record: Path) -> dict[str, Any] | None:
    """The fingerprint file's content, or None if there is none; a damaged one is an error naming it."""
    record = Path(record)
    if not record.is_file():
        return None
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("key"), str):
            raise ValueError("no key")
        bytes.fromhex(data["key"])
    except ValueError as exc:
        raise ValueError(f"{record}: not a fingerprint file ({exc}); pass --restart to start over") from None
    return data


def _write(record: Path, settings: dict[str, Any] | None, key: str) -> None:
    atomic_write_text(record, json.dumps({"version": VERSION, "settings": settings, "key": key}, indent=1) + "\n")


def add_restart_argument(p: argparse.ArgumentParser) -> None:
    """The start-over flag, the same in every command that resumes into its output."""
    p.add_argument("--restart", action="store_true",
                   help="start over: move an existing output aside to <name>.replaced-<UTC time> (nothing is "
                        "deleted) instead of resuming it; without it, an output made with other settings is refused")


def move_aside(paths: list[Path]) -> list[Path]:
    """Rename each existing path to ``<name>.replaced-<UTC time>`` beside it (nothing is deleted); returns the
    new names."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for p in map(Path, paths):
        if p.exists() or p.is_symlink():
            dest = p.with_name(f"{p.name}.replaced-{stamp}")
            n = 1
            while dest.exists():
                dest, n = p.with_name(f"{p.name}.replaced-{stamp}-{n}"), n + 1
            os.replace(p, dest)
            log.warning("--restart: moved %s aside to %s", p, dest)
            moved.append(dest)
    return moved


def claim(record: Path, settings: dict[str, Any], existing: list[Path], restart: bool = False,
          aside: list[Path] | None = None, flag: str = "--out", write: bool = True,
          where: Path | None = None) -> str:
    """Check ``settings`` against the fingerprint in ``record`` (writing it for a new output); returns the row key.

    ``existing``: the outputs whose presence means there are results to reuse; ``aside``: what ``restart`` moves
    away first (default: ``existing`` and ``record``). Raises RunMismatch (one line) when the recorded settings
    differ from the recorded ones while results exist, or when results exist with no recorded settings.
    ``write=False``: check only (nothing is written; the key returned is then meaningless for a new output).
    ``where``: the output the message names (default: the first of ``existing``).
    """
    record, settings = Path(record), _normalise(settings)
    if restart:
        move_aside(list(aside) if aside is not None else [*existing, record])
    old = read_fingerprint(record)
    where = where if where is not None else existing[0] if existing else record
    if any(Path(p).exists() for p in existing):  # results to reuse: only under the settings that made them
        if old is None or old.get("settings") is None:
            raise RunMismatch(f"{where}: holds results but no record of the settings that made them ({record.name} "
                              f"is missing: an older elfreg, or it was removed); pass --restart to start over, or "
                              f"use another {flag}")
        diffs = differences(old["settings"], settings)
        if diffs:
            raise RunMismatch(mismatch_message(where, diffs, flag))
        return old["key"]
    # the same settings keep their key; new ones get a new key, so no row signed before can pass for theirs
    key = old["key"] if old is not None and old.get("settings") in (None, settings) else secrets.token_hex(32)
    if write:
        _write(record, settings, key)  # nothing made yet: today's settings are the record
    return key


def note(record: Path, facts: dict[str, Any]) -> None:
    """Add measured facts of a run (e.g. the precision ``auto`` chose and the time ratio behind it) to a fingerprint
    file, beside its settings: recorded, never compared on resume (as the device is not). No-op without a file."""
    record = Path(record)
    data = read_fingerprint(record)
    if data is None:
        return
    data["notes"] = {**(data.get("notes") or {}), **_normalise(facts)}
    atomic_write_text(record, json.dumps(data, indent=1) + "\n")


def folder_key(folder: Path) -> str:
    """The row key of an output folder (its fingerprint file's), created with no settings when there is none yet."""
    record = Path(folder) / FOLDER_FILE
    old = read_fingerprint(record)
    if old is not None:
        return old["key"]
    key = secrets.token_hex(32)
    _write(record, None, key)
    return key


def _mac(row: dict[str, Any], key: str) -> str:
    body = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return hmac.new(bytes.fromhex(key), body, hashlib.sha256).hexdigest()[:32]


def sign_row(row: dict[str, Any], key: str) -> dict[str, Any]:
    """``row`` with its signature under ``key`` in the ``check`` field."""
    body = {k: v for k, v in row.items() if k != CHECK_FIELD}
    return {**body, CHECK_FIELD: _mac(body, key)}


def row_ok(row: dict[str, Any], key: str) -> bool:
    """Whether ``row`` carries the signature of its own content under ``key`` (unedited, from this output)."""
    check = row.get(CHECK_FIELD)
    body = {k: v for k, v in row.items() if k != CHECK_FIELD}
    return isinstance(check, str) and hmac.compare_digest(check, _mac(body, key))
