import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "train"))


@pytest.fixture(autouse=True)
def _one_thread_here(one_thread):
    """Every distillation test runs single-threaded (tests/conftest.py's one_thread)."""
