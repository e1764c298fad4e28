"""The serving tests' model: a demo-size ELF model over the tiny Qwen3, built once per test module."""

import pytest

from helpers import make_tiny_elf_model


@pytest.fixture(scope="module")
def model(tmp_path_factory, tiny_lm_dir):
    """A tiny ELF model folder, loaded (module-scoped: a module's servers and reference answers share it)."""
    from elfreg.pretrained import ElfModel

    return ElfModel.from_pretrained(make_tiny_elf_model(tmp_path_factory.mktemp("serve") / "model", tiny_lm_dir))
