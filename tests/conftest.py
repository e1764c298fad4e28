import pytest

from helpers import make_tiny_qwen3


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip, with the reason, where torch sees no CUDA device."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (GPU-marked; benchmarks/gpu_check.py runs these on a GPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
    """A tiny Qwen3 (6 blocks, width 32) and its word tokenizer, saved once per session."""
    return make_tiny_qwen3(tmp_path_factory.mktemp("tiny_qwen3"))


@pytest.fixture
def one_thread():
    """Tiny models run fastest single-threaded on a shared 2-core machine (torch's thread count restored after)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
