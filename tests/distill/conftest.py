import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "train"))


@pytest.fixture(autouse=True)
def _one_thread_here(one_thread):
    """Every distillation test runs single-threaded (tests/conftest.py's one_thread)."""


@pytest.fixture(scope="module", autouse=True)
def _one_thread_for_module_fixtures():
    """Module-scoped fixtures (a trained teacher, a reference run) are built before any function-scoped fixture: they
    run single-threaded too, or a resumed run (1 thread) differs in the last bits from its reference (2 threads on a
    2-core machine)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
