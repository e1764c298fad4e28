import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _one_thread_here(one_thread):
    """Every training test runs single-threaded (tests/conftest.py's one_thread)."""


@pytest.fixture
def sums_jsonl(tmp_path):
    from _tiny import write_sum_jsonl

    return write_sum_jsonl(tmp_path / "sums.jsonl")
