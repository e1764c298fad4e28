"""Locate /work/shared/data for tests (ELFREG_SHARED or <repo>/../shared); skip with a reason if absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    root = Path(os.environ["ELFREG_SHARED"]) if os.environ.get("ELFREG_SHARED") else REPO.parent / "shared"
    data = root / "data"
    if not data.is_dir():
        pytest.skip(f"shared benchmark data not found at {data} (set ELFREG_SHARED)")
    return data


def data_file(name: str) -> str:
    from elfreg.eval.datasets import DEFAULT_FILES

    return str(shared_data_dir() / DEFAULT_FILES[name])
