"""A local cache of converted backbones: a GGUF file de-quantised once into safetensors + config, then read in seconds.

Entries live in ``<root>/<name>/`` (root: ``$ELFREG_CACHE_DIR/backbones``, else ``~/.cache/elfreg/backbones``), named
by the hash of the source file and what was kept of it (e.g. the number of blocks). An entry's ``manifest.json``,
written last, records the format version, the source's hash and every file's size and xxh3-128 hash; an entry whose
manifest is missing, of another format or source, or whose files do not match it, is never used: it is moved aside
and rebuilt. Entries are built in a private temporary folder and renamed into place in one step, so processes that
fill the cache at once never see a half-written entry; the loser of such a race drops its copy and uses the winner's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)
FORMAT = 1
MANIFEST = "manifest.json"
_CHUNK = 1 << 22


def cache_home() -> Path:
    """elfreg's cache folder: $ELFREG_CACHE_DIR, else ~/.cache/elfreg."""
    root = os.environ.get("ELFREG_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "elfreg"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir`` if given, else $ELFREG_CACHE_DIR/backbones, else ~/.cache/elfreg/backbones."""
    return Path(cache_dir) if cache_dir is not None else cache_home() / "backbones"


def file_hash(path: str | Path) -> str:
    """xxh3-128 hex digest of a file's bytes (fast enough to run on every load: ~1 GB/s)."""
    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def check_entry(folder: Path, source_hash: str) -> dict | None:
    """The entry's manifest if every recorded file is present with its size and hash (and nothing is missing)."""
    try:
        meta = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format") != FORMAT or meta.get("source_hash") != source_hash:
        return None
    files = meta.get("files", {})
    present = {p.relative_to(folder).as_posix() for p in _files(folder)}
    if present != set(files):
        return None
    for rel, rec in files.items():
        p = folder / rel
        if p.stat().st_size != rec["size"] or file_hash(p) != rec["hash"]:
            return None
    return meta


def _discard(folder: Path) -> None:
    """Move a bad entry aside (one rename, so no reader sees it half-deleted), then delete it."""
    trash = folder.with_name(f".trash-{folder.name}-{uuid.uuid4().hex[:8]}")
    try:
        folder.rename(trash)
    except FileNotFoundError:  # another process got there first
        return
    shutil.rmtree(trash, ignore_errors=True)


def get_or_build(root: str | Path, name: str, source_hash: str, build: Callable[[Path], dict]) -> tuple[Path, dict]:
    """(folder, manifest) of entry ``name``; ``build(tmp)`` writes the files into ``tmp`` and returns extra metadata.

    A valid entry is used as it is; a bad one is discarded and rebuilt; a missing one is built.
    """
    root = Path(root)
    folder = root / name
    if folder.exists():
        meta = check_entry(folder, source_hash)
        if meta is not None:
            return folder, meta
        log.warning("backbone cache entry %s is incomplete, corrupted or stale: rebuilding it", folder)
        _discard(folder)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        extra = build(tmp)
        files = {p.relative_to(tmp).as_posix(): {"size": p.stat().st_size, "hash": file_hash(p)} for p in _files(tmp)}
        meta = {"format": FORMAT, "source_hash": source_hash, "files": files, **(extra or {})}
        (tmp / MANIFEST).write_text(json.dumps(meta, indent=2))
        for p in _files(tmp) + [tmp / MANIFEST]:  # durable before the rename publishes them
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        try:
            tmp.rename(folder)
        except OSError:  # another process published the entry first: use theirs if it is sound
            theirs = check_entry(folder, source_hash)
            if theirs is None:
                raise
            return folder, theirs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder, meta
