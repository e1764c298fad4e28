"""Locate /work/shared/data for tests (ELFREG_SHARED or <repo>/../shared); skip with a reason if absent."""

from __future__ import annotations

from pathlib import Path

from helpers import need_shared


def shared_data_dir() -> Path:
    return need_shared() / "data"


def data_file(name: str) -> str:
    from elfreg.eval.datasets import DEFAULT_FILES

    return str(shared_data_dir() / DEFAULT_FILES[name])
