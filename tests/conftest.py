import pytest

from helpers import make_tiny_qwen3


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
    """A tiny Qwen3 (6 blocks, width 32) and its word tokenizer, saved once per session."""
    return make_tiny_qwen3(tmp_path_factory.mktemp("tiny_qwen3"))
