import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest single-threaded on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def sums_jsonl(tmp_path):
    from _tiny import write_sum_jsonl

    return write_sum_jsonl(tmp_path / "sums.jsonl")
